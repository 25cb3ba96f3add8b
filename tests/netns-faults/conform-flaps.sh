#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The conformance suite's tcp-xdc set (tests/conformance) between two
# network namespaces, each behind a router (wan-lib.sh's pair), while the
# WAN link between the routers flaps: down FLAP_DOWN_S (1 s) every FLAP_EVERY_S (4 s), from the first
# test to the last.  tcp-xdc runs as in tests/conformance/tcp-xdc.conf
# (timeout_ms 2000) with an outage budget, outage_ms 10000: every test
# must pass, the flaps notwithstanding; the killed-* tests still see a
# dead peer within --dead-ms.  The ranks meet through a netns_tcp_bridge,
# so that only the plugin's connections cross the flapping link.
#
# Every test runs LOOPS times (default 5), the late-* ones, which wait
# --late-ms (4 s) a loop, LATE_LOOPS times (default 1).
#
# usage: conform-flaps.sh RUN_SH NCCL_CONFORM PLUGIN MODULE_DIR [LOOPS [LATE_LOOPS]]
# Needs root and network namespaces; exits 77 (skip) without them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/../netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$here/wan-lib.sh"

[ $# -ge 4 ] || {
	echo "usage: $0 RUN_SH NCCL_CONFORM PLUGIN MODULE_DIR [LOOPS [LATE_LOOPS]]" >&2
	exit 2
}
run_sh=$1
conform=$2
plugin=$3
moddir=$4
loops=${5:-5}
late_loops=${6:-1}
FLAP_DOWN_S=${FLAP_DOWN_S:-1}
FLAP_EVERY_S=${FLAP_EVERY_S:-4}
OOB_PORT=47100
LATE_TESTS=late-accept,late-connect,late-recv,late-recv-close,late-send

netns_init
wan_pair ""
WAN_TIMEOUT_MS=2000
WAN_STREAMS=2
wan_pair_conf "$NETNS_TMP/conform.conf"
netns_tcp_bridge c "$OOB_PORT" s "$OOB_PORT"

# The WAN link goes down and up; each flap is a line in flaps.
flapper() {
	while :; do
		sleep $((FLAP_EVERY_S - FLAP_DOWN_S))
		wan_down_for $((FLAP_DOWN_S * 1000)) >>"$NETNS_TMP/flaps"
	done
}

# every test but the late ones, then those
others=$("$conform" --list | awk '{ print $1 }' |
	 grep -vxF -f <(tr , '\n' <<<"$LATE_TESTS") | paste -sd, -)

flapper &
NETNS_PIDS+=($!)
flap_pid=$!
t0=$SECONDS
rc=0
for set in "$others:$loops" "$LATE_TESTS:$late_loops"; do
	bash "$run_sh" --driver "$conform" --plugin "$plugin" \
		--conf "$NETNS_TMP/conform.conf" --module-path "$moddir" \
		--rank0-prefix "ip netns exec $(ns s)" \
		--rank1-prefix "ip netns exec $(ns c)" \
		--oob "127.0.0.1:$OOB_PORT" --test "${set%:*}" \
		--loops "${set##*:}" --limit 120 -- \
		--late-ms 4000 --dead-ms 10000 || rc=$?
	[ "$rc" -eq 0 ] || break
done
kill "$flap_pid" 2>/dev/null || true
wait "$flap_pid" 2>/dev/null || true
wan_up
flaps=$(wc -l <"$NETNS_TMP/flaps" 2>/dev/null || echo 0)
echo "$flaps flaps (down ${FLAP_DOWN_S} s every ${FLAP_EVERY_S} s) in $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] || netns_die "conformance failed with the link flapping"
[ "$flaps" -gt 0 ] || netns_die "the link never flapped"
echo "PASS: conformance with the link flapping"
