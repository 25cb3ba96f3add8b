#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Connection setup at distance: the pair topology (wan-lib.sh) with a
# delay line in each router at RTT 100 ms, one tcp-xdc connection of 8
# streams, in clear and with an auth_key_file.  The connecting side is
# done after the round trips of its control connection and of one stream,
# its streams dialed all at once (docs/modules/tcp-xdc.md, "Setup round
# trips"): 3 in clear, 6 with the key; dialed one after another they took
# 11 and 28.  Its connects (meshperf's setup event on the client), the
# best of two runs, must take
#
#   at least 3 round trips, else the path was not long: the test would
#   prove nothing;
#   at most 7 in clear and 16 with the key: room for a loaded host and the
#   sanitizers, none for streams dialed one after another.
#
# The accepting side's figure is printed too; it also holds the time the
# handles took through the bootstrap's bridge.
#
# usage: setup.sh MESHPERF PLUGIN MODULE_DIR DELAYLINE
# Needs root and network namespaces; exits 77 (skip) without them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/../netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$here/wan-lib.sh"

[ $# -eq 4 ] || {
	echo "usage: $0 MESHPERF PLUGIN MODULE_DIR DELAYLINE" >&2
	exit 2
}
netns_scenario "$1" "$2" "$3"
DELAYLINE=$4
RTT_MS=100
STREAMS=8

netns_init
[ -x "$DELAYLINE" ] || netns_die "no delay line at $DELAYLINE"
WAN_DELAY=$((RTT_MS / 2))ms
WAN_MP_TIMEOUT=30
wan_pair ""

wan_setup_confs "$NETNS_TMP" "$STREAMS"

# rtts MS: MS in round trips
rtts() {
	awk -v m="$1" -v r="$RTT_MS" 'BEGIN { printf "%.2f", m / r }'
}

# check TAG MAX_RTTS: the best of two connections (config TAG) within the
# bounds
check() {
	local tag=$1 max=$2 best='' run ms

	for run in 1 2; do
		port=$((port + 1))
		wan_setup_run "$tag-$run" "$port" "$NETNS_TMP/$tag.conf"
		read -r -a ms <<<"$WAN_SETUP_MS"
		echo "$tag: the client's connects took $(rtts "${ms[0]}") round trips, the server's accepts $(rtts "${ms[1]}")"
		best=$(awk -v a="${best:-${ms[0]}}" -v b="${ms[0]}" \
			'BEGIN { print (a < b ? a : b) }')
	done
	best=$(rtts "$best")
	awk -v n="$best" 'BEGIN { exit !(n >= 3) }' ||
		wan_fail "$tag-1" "$tag: the client's connects took $best round trips, less than 3: the delay line is not in the path"
	awk -v n="$best" -v max="$max" 'BEGIN { exit !(n <= max) }' ||
		wan_fail "$tag-1" "$tag: the client's connects took $best round trips at best, more than $max: are the streams dialed one after another?"
}

port=47500
check clear 7
check auth 16
echo "PASS: $STREAMS streams dialed at once, in clear and with a key"
