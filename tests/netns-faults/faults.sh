#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Faults under tcp-xdc, in two network namespaces joined by a veth pair:
#
#   client 10.77.0.1/24 (xdc0) ==== (xdc0) 10.77.0.2/24 server
#
# A meshperf client streams 64 MiB messages to a meshperf server through the
# plugin and tcp-xdc with timeout_ms = 3000.  Mid-transfer one fault:
#
#   kill      the server dies (SIGKILL), at the default outage_ms: the
#             client fails within a few seconds, naming the peer, the
#             connection and how the stream broke.
#   linkdrop  the server's namespace drops every incoming packet, silently,
#             as a dead link does, with outage_ms = 0 (no outage budget:
#             fail on the first fault): both sides fail within timeout_ms
#             plus slack, each naming peer, connection, stream and the
#             timeout.  (wan.sh tests the budget.)
#
# and three that must not fail anything, with timeout_ms = 2000:
#
#   late      the server posts its receives 10 s late (5x timeout_ms) while
#             the client's 4 MiB messages wait at a zero window; the client
#             closes its send comm as soon as its last send tests done.
#             Both succeed, every byte verified, no WARN.
#   late-small the same after a run of small messages, which test()
#             reads on stream 0 while the data thread leaves that stream
#             alone: its pings must go on while nobody reads it.
#   closeloop 10 cycles of init, connect, transfer, close right after the
#             last completion, finalize: every byte verified, no WARN.
#
# Neither process may hang, crash (exit status >= 128) or be stopped by
# meshperf's own watchdog: meshperf's --timeout is far above the plugin's.
#
# usage: faults.sh MESHPERF PLUGIN MODULE_DIR kill|linkdrop|late|late-small|closeloop
# Needs root and network namespaces; exits 77 (skip) without them.
set -euo pipefail

meshperf=$1
plugin=$2
moddir=$3
fault=$4

TIMEOUT_MS=3000
case $fault in late* | closeloop) TIMEOUT_MS=2000 ;; esac
# The outage budget: the default (a connection that loses its streams
# holds its requests and reconnects), but none for linkdrop, which tests
# failing on the first fault
OUTAGE_CONF=""
[ "$fault" != linkdrop ] || OUTAGE_CONF="outage_ms = 0;"
LATE_S=${FAULTS_LATE_S:-10}
# meshperf gives up after this long without progress: more than the delay
MP_TIMEOUT=60
[ "$fault" != late ] || MP_TIMEOUT=$((LATE_S + 60))
SLACK_S=4		# scheduling, RTO granularity, the receiver's ping delay
KILL_LIMIT_S=5
PREFIX=nf$$
NS_C=$PREFIX-c
NS_S=$PREFIX-s
IP_C=10.77.0.1
IP_S=10.77.0.2
BOOT_PORT=18515
tmp=""
pids=()
namespaces=()

skip() {
	echo "SKIP: $*" >&2
	exit 77
}

fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/*.log; do
		[ -f "$f" ] || continue
		echo "---- $(basename "$f")" >&2
		tail -n 30 "$f" >&2
	done
	exit 1
}

cleanup() {
	local pid n

	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	for n in "${namespaces[@]}"; do
		for pid in $(ip netns pids "$n" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
		ip netns delete "$n" 2>/dev/null || true
	done
	[ -z "$tmp" ] || rm -rf "$tmp"
}
trap cleanup EXIT

now_ms() {
	date +%s%3N
}

setup() {
	[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
	command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
	ip netns add "$NS_C" 2>/dev/null || skip "cannot create network namespaces"
	namespaces+=("$NS_C")
	ip netns add "$NS_S" || fail "cannot create namespace $NS_S"
	namespaces+=("$NS_S")
	# both ends are made inside the namespaces: nothing touches the host
	ip -n "$NS_C" link add name xdc0 type veth peer name xdc0 netns "$NS_S" ||
		fail "cannot create a veth pair"
	ip -n "$NS_C" addr add "$IP_C/24" dev xdc0
	ip -n "$NS_S" addr add "$IP_S/24" dev xdc0
	for n in "$NS_C" "$NS_S"; do
		ip -n "$n" link set dev lo up
		ip -n "$n" link set dev xdc0 up
	done
	tmp=$(mktemp -d)
	cat >"$tmp/faults.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: {
  ifname = "xdc0";
  streams = 4;
  threads = 2;
  timeout_ms = $TIMEOUT_MS;
  $OUTAGE_CONF
};
CONF
}

# run NS NAME ARGS...: meshperf in the background; logs in $tmp/NAME.log,
# exit status in $tmp/NAME.rc, end time in $tmp/NAME.end.
run() {
	local n=$1 name=$2

	shift 2
	(
		set +e
		ip netns exec "$n" env NCCL_MESH_CONF="$tmp/faults.conf" \
			NCCL_MESH_MODULE_PATH="$moddir" \
			"$meshperf" -P "$plugin" --port "$BOOT_PORT" \
			--timeout "$MP_TIMEOUT" "$@" >"$tmp/$name.log" 2>&1
		echo $? >"$tmp/$name.rc"
		now_ms >"$tmp/$name.end"
	) &
	pids+=($!)
}

# Bytes the server's end of the link has received.
rx_bytes() {
	ip netns exec "$NS_S" cat /sys/class/net/xdc0/statistics/rx_bytes
}

start_transfer() {
	run "$NS_S" server --server --bind "$IP_S"
	for _ in $(seq 100); do
		ip netns exec "$NS_S" ss -Hltn "sport = :$BOOT_PORT" |
			grep -q . && break
		sleep 0.05
	done
	run "$NS_C" client --client "$IP_S" --sizes 64M --budget 1T \
		--mem 256M --no-latency
	# mid-transfer: 256 MiB of data have crossed the link
	for _ in $(seq 300); do
		[ "$(rx_bytes)" -gt $((256 << 20)) ] && return 0
		[ -f "$tmp/client.rc" ] && fail "client ended before the fault"
		sleep 0.05
	done
	fail "the transfer did not start within 15 s"
}

# wait_end NAME LIMIT_S: waits for a process to end, at most LIMIT_S.
wait_end() {
	local name=$1 limit=$2

	for _ in $(seq $((limit * 20))); do
		[ -f "$tmp/$name.end" ] && return 0
		sleep 0.05
	done
	fail "$name still running ${limit} s after the fault (hang)"
}

# check_end NAME T0 LIMIT_S REGEX: ended in time, failed cleanly, said why.
check_end() {
	local name=$1 t0=$2 limit=$3 re=$4 rc took

	rc=$(cat "$tmp/$name.rc")
	took=$(($(cat "$tmp/$name.end") - t0))
	echo "$name: exit status $rc, $took ms after the fault"
	[ "$rc" -ne 0 ] || fail "$name succeeded despite the fault"
	[ "$rc" -lt 128 ] || fail "$name died of a signal (status $rc)"
	! grep -q watchdog "$tmp/$name.log" ||
		fail "$name was stopped by meshperf's watchdog, not the plugin"
	[ "$took" -le $((limit * 1000)) ] ||
		fail "$name took $took ms to fail, limit ${limit} s"
	grep -E "$re" "$tmp/$name.log" ||
		fail "$name's log does not match: $re"
}

fault_kill() {
	local t0 pid

	t0=$(now_ms)
	# the server's namespace holds nothing but the server
	for pid in $(ip netns pids "$NS_S"); do
		kill -KILL "$pid"
	done
	wait_end client $((KILL_LIMIT_S + 5))
	# with an outage budget (the default) the client dials the broken
	# stream again first, and says what the peer's host answered, then
	# how the stream broke
	check_end client "$t0" "$KILL_LIMIT_S" \
		"send comm [0-9]+ to $IP_S:[0-9]+: stream [0-9]+/4: (.* after the stream broke \\()?connection (reset|closed) by"
}

fault_linkdrop() {
	local t0 limit=$((TIMEOUT_MS / 1000 + SLACK_S)) re

	command -v iptables >/dev/null || skip "iptables is not installed"
	t0=$(now_ms)
	ip netns exec "$NS_S" iptables -I INPUT -i xdc0 -j DROP ||
		skip "cannot add an iptables rule in a namespace"
	wait_end client $((limit + 10))
	wait_end server $((limit + 10))
	re="stream [0-9]+/4: timed out after $TIMEOUT_MS ms"
	check_end client "$t0" "$limit" "send comm [0-9]+ to $IP_S:[0-9]+: $re"
	check_end server "$t0" "$limit" "recv comm [0-9]+ from (\\[::ffff:)?$IP_C\\]?:[0-9]+: $re"
}

start_server() {
	run "$NS_S" server --server --bind "$IP_S" "$@"
	for _ in $(seq 100); do
		ip netns exec "$NS_S" ss -Hltn "sport = :$BOOT_PORT" |
			grep -q . && return 0
		sleep 0.05
	done
	fail "the server did not listen within 5 s"
}

# check_ok NAME: ended well, every check passed, nothing WARNed.
check_ok() {
	local name=$1 rc

	rc=$(cat "$tmp/$name.rc")
	[ "$rc" -eq 0 ] || fail "$name failed (status $rc)"
	grep -q "all checks passed" "$tmp/$name.log" ||
		fail "$name did not verify its transfers"
	! grep -E "WARN|ERROR" "$tmp/$name.log" ||
		fail "$name logged a warning or an error"
}

# no_fault_late [SIZES]: every size's receives posted LATE_S late
no_fault_late() {
	local t0 sizes=${1:-4M} n

	t0=$(now_ms)
	start_server --recv-delay "$LATE_S"
	run "$NS_C" client --client "$IP_S" --sizes "$sizes" --iters 8 \
		--window 8 --no-latency --close-early
	n=$(tr -cd , <<<"$sizes" | wc -c)
	wait_end client $(((n + 1) * LATE_S + 40))
	wait_end server 20
	check_ok client
	check_ok server
	grep -v '^#' "$tmp/client.log" | sed 's/^/client result: /'
	echo "late receiver: ${LATE_S} s late, timeout_ms $TIMEOUT_MS, done after $(($(cat "$tmp/server.end") - t0)) ms"
}

no_fault_closeloop() {
	local t0

	t0=$(now_ms)
	start_server
	run "$NS_C" client --client "$IP_S" --sizes 0,1,4095,64K,1M --mem 16M \
		--iters 16 --no-latency --close-early --reload "${FAULTS_CYCLES:-10}"
	wait_end client 120
	wait_end server 20
	check_ok client
	check_ok server
	grep -q "after ${FAULTS_CYCLES:-10} cycle" "$tmp/server.log" ||
		fail "the server did not run ${FAULTS_CYCLES:-10} cycles"
	echo "close right after completion: ${FAULTS_CYCLES:-10} cycles in $(($(cat "$tmp/server.end") - t0)) ms"
}

setup
case $fault in
kill) start_transfer; fault_kill ;;
linkdrop) start_transfer; fault_linkdrop ;;
late) no_fault_late ;;
late-small) no_fault_late 4K,4M ;;
closeloop) no_fault_closeloop ;;
*) fail "unknown fault $fault" ;;
esac
echo "PASS: $fault"
