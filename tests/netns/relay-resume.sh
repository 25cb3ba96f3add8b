#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Relayed connections survive their relay (tests/netns/lib.sh,
# relay_topology: two DCs that only the gateways g0 and g1 join, each
# running meshrelay, one key everywhere; relay.outage_ms 30 s):
#  - restart: g0's meshrelay is killed (SIGKILL) while a0 and b0 move
#    data both ways through g0 and g1, and started again 2 s later: the
#    verified meshperf run completes, both ends log one outage and one
#    recovery per connection, and no relay line is a warning;
#  - failover: a second relay g0b serves DC 0 (on g0, port 29401, which
#    a0's routes name after g0); g0's meshrelay is killed for good while
#    a0 sends to b0: the route moves to g0b, the run completes verified;
#  - stall: g1's firewall forgets every connection through it (conntrack
#    flushed, no stream picked up midway) while a0 sends to b0: the channel
#    between g0 and g1 goes silent, which the relays notice within
#    timeout_ms (3 s here), and the route is set up again (needs the
#    conntrack tool; skipped without it).
#
# usage: relay-resume.sh MESHPERF PLUGIN BUILD_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/netns/relay-lib.sh
. "$here/relay-lib.sh"

netns_lsan_no_tls
relay_scenario "$@"
XDC_ENV=("$RELAY_KEY" NCCL_MESH_RELAY_OUTAGE_MS=30000)

# count TAG SIDE REGEX: lines of that run's log that match
count() {
	grep -Ec -- "$3" "$NETNS_TMP/$1.$2" || true
}

# finish TAG LIMIT: the run ended, verified, with no relay warning
finish() {
	local tag=$1 rc=0 side

	xdc_meshperf_finish "$2" || rc=$?
	[ "$rc" -eq 0 ] || relay_fail "$tag" "$tag: meshperf failed ($rc)"
	for side in server client; do
		xdc_log_has "$tag" "$side" '"event":"summary".*"status":"ok"' ||
			relay_fail "$tag" "$tag: $side summary missing or not ok"
		! xdc_log_has "$tag" "$side" 'WARN NET/Mesh/relay' ||
			relay_fail "$tag" "$tag: the $side's relay warned"
	done
}

# moving PID LOG N BYTES: meshrelay PID (logging to LOG) has N pairs now
# that each forwarded BYTES (its counters, on SIGUSR1): data is on its way
moving() {
	local deadline=$((SECONDS + 30)) n

	while [ "$SECONDS" -lt "$deadline" ]; do
		kill -USR1 "$1"
		sleep 0.3
		n=$(tac "$2" | sed -n '/^--- meshrelay report/q;p' |
			awk -v b="$4" '/^pair [0-9]+: [0-9]+ bytes/ &&
				$3 >= b { n++ } END { print n + 0 }')
		[ "$n" -ge "$3" ] && return 0
	done
	return 1
}

# kill_relay PID: SIGKILL, as a crash or the OOM killer does
kill_relay() {
	kill -KILL "$1"
	wait "$1" 2>/dev/null || true
}

data=(--json --verbose --timeout 60 --sizes 4M --iters 100000 --budget 512M
      --mem 64M --no-latency)

# ------------------------------------------------------------- restart
relay_meshrelay_start g0
g0=$NETNS_LAST_PID
relay_meshrelay_start g1
relay_meshperf_start b0 a0 restart 41100 "${data[@]}" --bidir
# both directions move data through g0
moving "$g0" "$NETNS_TMP/meshrelay-g0" 2 $((64 << 20)) ||
	relay_fail restart "restart: no data through g0"
t0=$SECONDS
kill_relay "$g0"
mv "$NETNS_TMP/meshrelay-g0" "$NETNS_TMP/meshrelay-g0-killed"
sleep 2
relay_meshrelay_start g0
g0=$NETNS_LAST_PID
finish restart 90
for side in client server; do
	# each end has a send comm and a recv comm through g0: one outage
	# and one recovery each
	broke=$(count restart "$side" 'INFO .*relay: .*the route broke')
	back=$(count restart "$side" 'INFO .*relay: .*out for [0-9]+ ms \(.*\), resumed')
	if [ "$broke" -lt 2 ] || [ "$broke" -ne "$back" ]; then
		relay_fail restart "restart: the $side logged $broke outages and $back recoveries"
	fi
done
grep -h '), resumed' "$NETNS_TMP/restart.client" | head -n 2
echo "PASS restart: g0 killed and back after 2 s, the run completed verified ($((SECONDS - t0)) s after the kill)"

# ------------------------------------------------------------ failover
# g0b: a second relay for DC 0, on g0's host at another port; a0 names
# it after g0 for DC 1, and it goes on through g1 as g0 does
relays="g0 10.0.0.1 192.168.100.1:39400,g1 10.1.0.1 192.168.100.2:39400"
relays+=",g0b 10.0.0.1:29401"
XDC_ENV+=("NCCL_MESH_RELAY_RELAYS=$relays")
XDC_CLIENT_ENV=("NCCL_MESH_RELAY_ROUTES=10.1.0.0/24 via g0,10.1.0.0/24 via g0b")
RELAY_ENV=()
kill_relay "$g0"
relay_meshrelay_start g0
g0=$NETNS_LAST_PID
netns_spawn g0 "$NETNS_TMP/meshrelay-g0b" env NCCL_MESH_HOSTNAME=g0 \
	NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
	NCCL_DEBUG=INFO "${XDC_ENV[@]}" NCCL_MESH_RELAY_NAME=g0b \
	NCCL_MESH_RELAY_PORT=29401 "$MESHRELAY" --config "$CONF"
netns_wait_listen g0 29401 15 ||
	relay_fail failover "meshrelay g0b does not serve port 29401"
relay_meshperf_start b0 a0 failover 41101 "${data[@]}"
moving "$g0" "$NETNS_TMP/meshrelay-g0" 1 $((64 << 20)) ||
	relay_fail failover "failover: no data from a0 through g0"
t0=$SECONDS
kill_relay "$g0"
finish failover 90
xdc_log_has failover client 'INFO .*relay: send comm .*\), resumed; .*, now via g0b ' ||
	relay_fail failover "failover: a0's connection did not move to g0b"
grep -Eq 'pair [0-9]+: forwarding a0 ' "$NETNS_TMP/meshrelay-g0b" ||
	relay_fail failover "failover: g0b logged no pair for a0"
grep -h '), resumed' "$NETNS_TMP/failover.client" | head -n 1
echo "PASS failover: g0 killed, the route moved to g0b, the run completed verified ($((SECONDS - t0)) s after the kill)"

# --------------------------------------------------------------- stall
if command -v conntrack >/dev/null &&
	nsx g1 conntrack -L >/dev/null 2>&1 &&
	nsx g1 sysctl -qw net.netfilter.nf_conntrack_tcp_loose=0; then
	XDC_ENV+=(NCCL_MESH_RELAY_TIMEOUT_MS=3000)
	XDC_CLIENT_ENV=()
	relay_meshrelay_start g0	# killed for good above
	g0=$NETNS_LAST_PID
	relay_meshperf_start b0 a0 stall 41102 "${data[@]}"
	moving "$g0" "$NETNS_TMP/meshrelay-g0" 1 $((64 << 20)) ||
		relay_fail stall "stall: no data from a0 through g0"
	t0=$SECONDS
	nsx g1 conntrack -F >/dev/null 2>&1 ||
		relay_fail stall "stall: conntrack -F failed in g1"
	finish stall 90
	grep -Eq 'pair [0-9]+: the way (on|back) went silent' \
		"$NETNS_TMP/meshrelay-g0" "$NETNS_TMP/meshrelay-g1" ||
		relay_fail stall "stall: no relay noticed the silent channel"
	xdc_log_has stall client 'INFO .*relay: send comm .*\), resumed; ' ||
		relay_fail stall "stall: a0's connection did not resume"
	grep -h '), resumed' "$NETNS_TMP/stall.client" | head -n 1
	echo "PASS stall: g1 forgot its connections, the route came back, the run completed verified ($((SECONDS - t0)) s after the flush)"
else
	echo "SKIP stall: no conntrack tool, or it cannot reach g1's table"
fi
echo "PASS: relayed connections survive their relay"
