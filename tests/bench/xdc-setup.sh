#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): connection setup at distance.  The
# pair topology of tests/netns-faults/wan-lib.sh with a delay line in each
# router (tools/delayline) at RTT_MS (default 100) round trip; meshperf
# times its connects and accepts (its "setup" event: from the first call
# to the last comm, once the handles crossed), for
#
#   one       one tcp-xdc connection at its defaults (8 streams)
#   comm      a communicator's worth between two ranks: CHANNELS (default
#             4) connections each way at once, as NCCL opens one per
#             channel and peer and steps them all together
#
# each in clear and with an auth_key_file, RUNS (default 3) times; a run's
# figure is the later of the two sides' (the accepting side's last stream
# ends the connection's setup).  The reference is NCCL's Socket transport
# emulated with plain TCP (tests/bench/tcp_setup.c, same delay line): per
# connection its control socket plus NSOCKS data sockets, dialed one after
# another as Socket dials them, each sending its 13 bytes and waiting for
# nothing.  At NCCL's defaults (NSOCKS 0, outside AWS and GCP) that is one
# connect, the least any TCP transport can take; the table also shows
# Socket with as many sockets as tcp-xdc has streams, and the floor of
# that many sockets dialed at once.  Prints the medians in ms and in
# round trips, and each ratio to Socket's defaults against the bar of
# issue 42 (1.5x).
#
#   tests/bench/xdc-setup.sh [BUILD_DIR]
#
# Environment: RTT_MS, RUNS, CHANNELS, STREAMS (tcp-xdc's; default its own).
set -euo pipefail

build=$(realpath "${1:-build}")
src=$(cd "$(dirname "$0")/../.." && pwd)
RTT_MS=${RTT_MS:-100}
RUNS=${RUNS:-3}
CHANNELS=${CHANNELS:-4}
BAR=1.5
# shellcheck source=tests/bench/lib.sh
. "$src/tests/bench/lib.sh"
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$src/tests/netns-faults/wan-lib.sh"

MESHPERF=$build/tools/meshperf/meshperf
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc
DELAYLINE=$build/tools/delayline/delayline
TCP_SETUP=$build/tests/bench/tcp_setup
for f in "$MESHPERF" "$DELAYLINE" "$TCP_SETUP"; do
	[ -x "$f" ] || { echo "no $f: build first" >&2; exit 2; }
done
netns_init
WAN_DELAY=$((RTT_MS / 2))ms
WAN_MP_TIMEOUT=60
wan_pair ""
streams=${STREAMS:-}

wan_setup_confs "$NETNS_TMP" "$streams"

# The runs below start background processes (bridges), so they run in
# this shell, never in a $(...): each leaves its figure in ms in RESULT.
RESULT=
port=47300
# mesh TAG CONF CHANNELS [meshperf options...]: one run
mesh() {
	local tag=$1 cf=$2 ch=$3

	shift 3
	port=$((port + 1))
	wan_setup_run "$tag" "$port" "$cf" --channels "$ch" "$@"
	RESULT=$(awk -v ms="$WAN_SETUP_MS" 'BEGIN { split(ms, v, " ")
		printf "%.1f", (v[1] > v[2] ? v[1] : v[2]) }')
}

# socket TAG CONNS NSOCKS seq|par: one run of the reference
socket() {
	local tag=$1 conns=$2 nsocks=$3 mode=$4 apid cpid a c

	port=$((port + 1))
	netns_spawn s "$NETNS_TMP/$tag.acc" "$TCP_SETUP" accept "$port" 5400 \
		"$conns" "$nsocks"
	apid=$NETNS_LAST_PID
	netns_wait_listen s "$port" 10 || netns_die "$tag: tcp_setup did not listen"
	netns_tcp_bridge c "$port" s "$port"
	netns_spawn c "$NETNS_TMP/$tag.con" "$TCP_SETUP" connect "$port" \
		"${WAN_IP[s]}" 5400 "$conns" "$nsocks" "$mode"
	cpid=$NETNS_LAST_PID
	if ! netns_wait "$cpid" 90 || ! netns_wait "$apid" 30; then
		cat "$NETNS_TMP/$tag.acc" "$NETNS_TMP/$tag.con" >&2
		netns_die "$tag: tcp_setup failed"
	fi
	a=$(awk '$1 == "acceptor_ms" { print $2 }' "$NETNS_TMP/$tag.acc")
	c=$(awk '$1 == "connector_ms" { print $2 }' "$NETNS_TMP/$tag.con")
	RESULT=$(awk -v c="$c" -v a="$a" 'BEGIN { printf "%.1f", (c > a ? c : a) }')
}

# median FN TAG ARGS...: RESULT is the median of RUNS runs of FN (each
# tagged TAG-RUN)
median() {
	local fn=$1 tag=$2 i all=()

	shift 2
	for i in $(seq "$RUNS"); do
		"$fn" "$tag-$i" "$@"
		all+=("$RESULT")
	done
	RESULT=$(printf '%s\n' "${all[@]}" | bench_median)
}

n=${streams:-8}
echo "RTT $RTT_MS ms (delay line), medians of $RUNS runs; tcp-xdc with $n streams"

# row NAME MS [REF_MS]: a table row, in ms and round trips, and the ratio
row() {
	awk -v name="$1" -v ms="$2" -v ref="${3:-}" -v rtt="$RTT_MS" -v bar="$BAR" 'BEGIN {
		printf "  %-46s %8.1f ms %5.2f RTT", name, ms, ms / rtt
		if (ref != "")
			printf "   %.2fx Socket%s", ms / ref,
				ms / ref <= bar ? "" : "  (bar " bar "x: missed)"
		printf "\n" }'
}

for what in one comm; do
	if [ "$what" = one ]; then
		echo "one connection:"
		conns=1 ch=1 extra=() each=
	else
		echo "a communicator's worth: $CHANNELS connections each way at once:"
		conns=$((2 * CHANNELS)) ch=$CHANNELS extra=(--bidir) each=" a connection"
	fi
	median socket "sock-$what" "$conns" 0 seq
	ref=$RESULT
	row "Socket, defaults (1 socket a connection)" "$ref"
	median socket "sockn-$what" "$conns" "$n" seq
	row "Socket, $n+1 sockets one after another" "$RESULT"
	median socket "par-$what" "$conns" "$n" par
	row "plain TCP, $((n + 1)) sockets$each at once" "$RESULT"
	median mesh "mesh-$what" "$NETNS_TMP/clear.conf" "$ch" "${extra[@]}"
	row "tcp-xdc" "$RESULT" "$ref"
	median mesh "auth-$what" "$NETNS_TMP/auth.conf" "$ch" "${extra[@]}"
	row "tcp-xdc, auth_key_file" "$RESULT" "$ref"
	echo "  ($conns connections in all)"
done
