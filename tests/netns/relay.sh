#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Relay scenario: two DCs that only their gateways g0 and g1 join, and the
# gateways do not forward (tests/netns/lib.sh, relay_topology); meshrelay
# runs on both, every host loads tcp-xdc and relay with one key.
#  - no host reaches the other DC by itself;
#  - every cross-DC host pair runs meshperf (data verified, connections
#    both ways) through g0 and g1, and the connecting sides' INFO lines
#    name the route; a0 <-> b0 alone first, then the other pairs at once;
#  - a client without the key is refused by g0, which logs it, as is a
#    raw connection sending garbage to g0's relay port;
#  - a destination outside relay.members is refused by the relay, which
#    logs it; the client fails cleanly and in time.
#
# usage: relay.sh MESHPERF PLUGIN BUILD_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/netns/relay-lib.sh
. "$here/relay-lib.sh"

relay_scenario "$@"
key=$RELAY_KEY

# ------------------------------------------------------- no way around
# a0's default route ends at g0, which does not forward
for target in "${RELAY_IP[b0]}" "${RELAY_IP[g1]}" "${RELAY_EXT[g1]}"; do
	# shellcheck disable=SC2016 # expanded by the inner bash
	if nsx a0 timeout 1 bash -c 'exec 3<>"/dev/tcp/$0/40009"' \
		"$target" 2>/dev/null; then
		netns_die "a0 reached $target:40009 without a relay"
	fi
done
echo "PASS a0 reaches neither b0 nor g1 by itself"

XDC_ENV=("$key")
relay_meshrelay_start g0
relay_meshrelay_start g1

args=(--json --verbose --timeout 20 --sizes '0,8,4K,1M,4M' --budget 8M
      --mem 64M --iters 50 --lat-max 4K)
nsizes=5

# check_pair TAG SERVER CLIENT: verified both ways, routes logged
check_pair() {
	local tag=$1 srv=$2 cli=$3 got side g

	got=$(grep -c '"event":"result"' "$NETNS_TMP/$tag.client" || true)
	[ "$got" -eq "$nsizes" ] ||
		relay_fail "$tag" "$tag: $got results, expected $nsizes"
	for side in server client; do
		xdc_log_has "$tag" "$side" '"event":"summary".*"status":"ok"' ||
			relay_fail "$tag" "$tag: $side summary missing or not ok"
	done
	# each side sends (the client its data, the server the replies)
	# through its own gateway, then the other one
	for side in client server; do
		if [ "$side" = client ]; then g=${RELAY_GW[$cli]}; else g=${RELAY_GW[$srv]}; fi
		re="INFO .*relay: send comm .*: via $g \\(tcp-xdc [^)]*\\) -> "
		re+="g$((1 - ${g#g})) \\(tcp-xdc [^)]*:$RELAY_EXT_PORT\\) -> destination"
		xdc_log_has "$tag" "$side" "$re" ||
			relay_fail "$tag" "$tag: the $side's log names no route via $g and the other gateway"
	done
	echo "PASS $tag: $(grep -ho "relay: send comm .*" \
		"$NETNS_TMP/$tag.client" | head -n1)"
}

# run_pairs BOOT_PORT SERVER:CLIENT...: meshperf runs at once, then checks
run_pairs() {
	local port=$1 p srv cli tags=() rc t0=$SECONDS

	shift
	for p in "$@"; do
		srv=${p%:*}
		cli=${p#*:}
		relay_meshperf_start "$srv" "$cli" "$cli-$srv" "$port" "${args[@]}"
		tags+=("$cli-$srv:$XDC_SPID:$XDC_CPID")
		port=$((port + 1))
	done
	for p in "${tags[@]}"; do
		IFS=: read -r tag XDC_SPID XDC_CPID <<<"$p"
		rc=0
		xdc_meshperf_finish 60 || rc=$?
		[ "$rc" -eq 0 ] || relay_fail "$tag" "$tag: meshperf failed ($rc)"
	done
	for p in "$@"; do
		check_pair "${p#*:}-${p%:*}" "${p%:*}" "${p#*:}"
	done
	echo "PASS ${*} in $((SECONDS - t0)) s"
}

# --------------------------------------------------------- every pair
# a0 <-> b0 both ways on its own, then the other three pairs at once
run_pairs 41000 b0:a0
run_pairs 41001 a0:b0
run_pairs 41010 b1:a0 a1:b0 b1:a1
grep -h 'bytes' "$NETNS_TMP/meshrelay-g0" | tail -n 4 || true

# ------------------------------------------------------ without the key
# a1 has no key: g0 refuses its relay request; b1 never hears of it
short=(--json --verbose --timeout 10 --sizes '0,4K' --budget 1M --mem 16M
       --iters 5 --no-latency)
XDC_ENV=()
XDC_SERVER_ENV=("$key")
XDC_CLIENT_ENV=(NCCL_MESH_CONNECT_TIMEOUT_MS=5000)
# refusals g0 logged: one line each, or counted in its rate-limited
# summaries (once per 5 s)
refused_g0() {
	{
		grep -c "refused connection from ${RELAY_IP[a1]//./\\.}" \
			"$NETNS_TMP/meshrelay-g0" || true
		{ grep -o 'refused [0-9]* more' "$NETNS_TMP/meshrelay-g0" ||
			true; } | awk '{ n += $2 } END { print n + 0 }'
	} | awk '{ n += $1 } END { print n }'
}
before=$(refused_g0)
t0=$SECONDS
rc=0
relay_meshperf_start b1 a1 nokey 41020 "${short[@]}"
xdc_meshperf_finish 30 || rc=$?
[ "$rc" -ne 0 ] || relay_fail nokey "a client without the key got through"
netns_clean_failure "$rc" ||
	relay_fail nokey "without the key: hung or crashed ($rc)"
[ $((SECONDS - t0)) -le 20 ] ||
	relay_fail nokey "without the key: failing took $((SECONDS - t0)) s"
after=$(refused_g0)
[ "$after" -gt "$before" ] ||
	relay_fail nokey "g0 did not log refusing a1"
grep -h "refused connection from" "$NETNS_TMP/meshrelay-g0" | tail -n1
grep -h WARN "$NETNS_TMP/nokey.client" | head -n2
echo "PASS a client without the key is refused by g0"

# garbage straight to the relay port
before=$after
# shellcheck disable=SC2016 # expanded by the inner bash
nsx a1 timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1" &&
	head -c 4096 /dev/urandom >&3; sleep 0.3' "${RELAY_IP[g0]}" "$RELAY_PORT" ||
	netns_die "a1 cannot reach g0's relay port"
# a refusal right after another is only counted in the next summary,
# which the listener logs once per 5 s
for _ in $(seq 70); do
	[ "$(refused_g0)" -gt "$before" ] && break
	sleep 0.1
done
[ "$(refused_g0)" -gt "$before" ] ||
	relay_fail nokey "g0 did not log refusing a raw connection"
echo "PASS garbage to g0's relay port is refused and logged"

# ---------------------------------------------------- outside the cluster
# b1 advertises only 10.9.0.11, outside relay.members; a1 (with the key)
# believes in a route there through g0, which must refuse to forward
XDC_ENV=("$key" NCCL_MESH_CONNECT_TIMEOUT_MS=5000)
XDC_SERVER_ENV=(NCCL_MESH_ADVERTISE_ADDRS=10.9.0.11
		NCCL_MESH_ADVERTISE_LOCAL=false)
XDC_CLIENT_ENV=("NCCL_MESH_RELAY_ROUTES=10.1.0.0/24 via g0,10.9.0.0/24 via g0"
		"NCCL_MESH_RELAY_MEMBERS=10.0.0.0/24,10.1.0.0/24,10.9.0.0/24")
t0=$SECONDS
rc=0
relay_meshperf_start b1 a1 outside 41021 "${short[@]}"
xdc_meshperf_finish 30 || rc=$?
[ "$rc" -ne 0 ] || relay_fail outside "a destination outside the cluster was relayed"
netns_clean_failure "$rc" ||
	relay_fail outside "outside the cluster: hung or crashed ($rc)"
[ $((SECONDS - t0)) -le 20 ] ||
	relay_fail outside "outside the cluster: failing took $((SECONDS - t0)) s"
re='10\.9\.0\.11.*outside|outside.*10\.9\.0\.11'
grep -Eq "$re" "$NETNS_TMP/meshrelay-g0" ||
	relay_fail outside "g0 did not log refusing 10.9.0.11 as outside the cluster"
grep -Eh "$re" "$NETNS_TMP/meshrelay-g0" | head -n1
grep -h WARN "$NETNS_TMP/outside.client" | head -n2
echo "PASS a destination outside the cluster is refused and logged by g0"
echo "PASS: relay through the gateways"
