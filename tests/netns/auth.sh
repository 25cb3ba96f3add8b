#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Authentication across the NAT scenario (auth_key_file):
#  - the same key on both sides: a cross-DC pair connects and verifies;
#  - different keys: the connect fails with a clear WARN, and the listener
#    logs the refused connection;
#  - a key file readable by others is refused at init;
#  - while a real transfer runs, garbage and silent connections to the
#    listener's port (from another host of the other DC, through both
#    NATs) are refused and logged, and the transfer completes and verifies.
#
# usage: auth.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

xdc_scenario "$here/nat.conf" "$@"

umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key-a"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key-b"
cp "$NETNS_TMP/key-a" "$NETNS_TMP/key-open"
chmod 0644 "$NETNS_TMP/key-open"

args=(--json --verbose --timeout 20 --sizes '0,4K,1M' --budget 8M
      --mem 16M --iters 20 --lat-max 4K)
XDC_ENV=(NCCL_MESH_CONNECT_TIMEOUT_MS=5000)

fail_with_logs() {
	xdc_show_logs "$1"
	netns_die "$2"
}

# ------------------------------------------------------------- same key
XDC_ENV+=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-a")
xdc_meshperf a1 b1 same 40 "${args[@]}" ||
	fail_with_logs same "a1 <- b1 with the same key failed"
xdc_log_has same client '"event":"summary".*"status":"ok"' ||
	fail_with_logs same "no ok summary"
echo "PASS same key: a1 <-> b1 through NAT connected and verified"

# ------------------------------------------------------- different keys
XDC_ENV=(NCCL_MESH_CONNECT_TIMEOUT_MS=5000)
XDC_SERVER_ENV=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-a")
XDC_CLIENT_ENV=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-b")
t0=$SECONDS
rc=0
# one direction only (no latency, no reverse connection): a1 listens and
# judges b1's response; b1 learns of the refusal afterwards
xdc_meshperf a1 b1 mismatch 40 "${args[@]}" --no-latency || rc=$?
[ "$rc" -ne 0 ] || fail_with_logs mismatch "different keys connected"
netns_clean_failure "$rc" ||
	fail_with_logs mismatch "different keys: hung or crashed ($rc)"
[ $((SECONDS - t0)) -le 15 ] ||
	fail_with_logs mismatch "different keys: failing took $((SECONDS - t0)) s"
grep -Eiq 'WARN .*(authenticat|key|HMAC|MAC)' "$NETNS_TMP/mismatch.client" ||
	fail_with_logs mismatch "the connector's WARN does not mention authentication"
grep -Eq 'WARN .*refused connection from ([[]::ffff:)?192\.0\.2\.2' \
	"$NETNS_TMP/mismatch.server" ||
	fail_with_logs mismatch "the listener did not log a refused connection"
grep -h WARN "$NETNS_TMP/mismatch.server" "$NETNS_TMP/mismatch.client"
echo "PASS different keys: refused on both sides"

# ------------------------------------------------- key readable by others
XDC_SERVER_ENV=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-open")
XDC_CLIENT_ENV=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-a")
rc=0
xdc_meshperf a1 b1 open 40 "${args[@]}" || rc=$?
netns_clean_failure "$rc" ||
	fail_with_logs open "a key file of mode 0644 was accepted ($rc)"
grep -Eq 'WARN .*key-open' "$NETNS_TMP/open.server" ||
	fail_with_logs open "no WARN names the open key file"
grep -h 'WARN .*key-open' "$NETNS_TMP/open.server" | head -n1
echo "PASS a key file readable by others is refused"

# --------------------------------------- garbage around a real transfer
# The listener is served while an accept is pending, so b1's connection is
# held back at rB while garbage from b2 hits a1's listening port; then b1
# gets through and streams while more garbage arrives.
XDC_SERVER_ENV=()
XDC_CLIENT_ENV=()
XDC_ENV=(NCCL_MESH_CONNECT_TIMEOUT_MS=15000
	 "NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-a")

# garbage N: N bad connections from b2 to a1's plugin port (the lowest of
# its range, 40000, is 192.0.2.1:50000 outside): random bytes, an all-zero
# hello, one that sends nothing
garbage() {
	local i kinds=(random zeros random silent random)

	for ((i = 0; i < $1; i++)); do
		# shellcheck disable=SC2016 # expanded by the inner bash
		nsx b2 timeout 5 bash -c '
			exec 3<>/dev/tcp/192.0.2.1/50000 || exit 1
			case $0 in
			random) head -c 4096 /dev/urandom >&3 ;;
			zeros) head -c 40 /dev/zero >&3 ;;
			esac
			sleep 0.3' "${kinds[i % 5]}" ||
			netns_die "could not reach a1's listener from b2"
	done
}

# refusals FILE: how many connections the listener refused, logged alone
# or counted in its rate-limited summaries
refusals() {
	{
		grep -c 'WARN .*refused connection from' "$1" || true
		{ grep -o 'refused [0-9]* more' "$1" || true; } |
			awk '{ n += $2 } END { print n + 0 }'
	} | awk '{ n += $1 } END { print n }'
}

hold=(FORWARD 1 -s "${XDC_IP[b1]}" -d 192.0.2.1 -p tcp --dport 50000 -j DROP)
netns_ipt rb -I "${hold[@]}"
# 96 MiB across the 200 Mbit/s link: about 4 s of streaming
xdc_meshperf_start a1 b1 busy --json --verbose --timeout 30 --sizes 32M \
	--budget 96M --mem 64M --no-latency
netns_wait_listen a1 40000 10 || fail_with_logs busy "a1 did not listen"
garbage 5
# the refusal log summarises once per 5 s: let the last summary out
sleep 5.2
before=$(refusals "$NETNS_TMP/busy.server")
netns_ipt rb -D "${hold[@]:0:1}" "${hold[@]:2}"
for _ in $(seq 100); do
	grep -q 'connected' "$NETNS_TMP/busy.client" && break
	sleep 0.1
done
garbage 5
rc=0
xdc_meshperf_finish 60 || rc=$?
[ "$rc" -eq 0 ] || fail_with_logs busy "the real transfer failed ($rc)"
xdc_log_has busy server '"event":"summary".*"status":"ok"' ||
	fail_with_logs busy "the real transfer did not verify"
after=$(refusals "$NETNS_TMP/busy.server")
grep -h 'refused' "$NETNS_TMP/busy.server" |
	sed 's/:[0-9]* on port/:PORT on port/' | sort | uniq -c
[ "$before" -ge 4 ] ||
	fail_with_logs busy "$before of 5 garbage connections during accept were refused and logged"
echo "PASS garbage during accept refused and logged ($before of 5)," \
	"$((after - before)) of 5 more while streaming; the transfer verified"
echo "PASS: authentication"
