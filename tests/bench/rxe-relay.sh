#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root and the rxe lab): relay over rdma-mesh
# on the Soft-RoCE ring of four (tests/rxe/relay.sh, relay-ring.conf), one
# meshrelay per node, in one boot of the lab's guest.  A direct neighbour
# pair (node 1 -> node 2, one cable) against a relayed diagonal pair
# (node 1 -> node 3, through node 2, which the bench config names for both
# directions so that one relay carries each run):
#
#   calibration: the direct pair unshaped, CAL_ROUNDS runs: what the
#                guest's emulated CPUs carry, since unshaped rxe is bound
#                by them, not by any link.
#   shaped:      every cable shaped with tc tbf on both its ends to RATE
#                (default: a quarter of the calibration's median, so the
#                links and not the CPUs are the bottleneck even where a
#                relayed byte costs the CPUs twice, once per leg); then
#                ROUNDS alternating runs of direct and relayed bandwidth
#                (MSG messages) and 8-byte ping-pong latency.
#
# Bars (issue 11): relayed bandwidth >= 0.85x direct; relayed 8-byte
# latency <= 2.5x direct.  Emulated rxe varies by about 30% from run to
# run, and latency far more with the host's load: the bars are judged on
# the median of the per-round ratios, each a direct run and the relayed
# run right after it; the medians of each are printed too.
#
#   tests/bench/rxe-relay.sh [BUILD_DIR] [ROUNDS]
#
# Environment: RATE (tc rate, e.g. 100mbit; default auto), MSG (default
# 4M), BW_MIB (MiB per bandwidth run, default 64), LAT_ITERS (default
# 1000), CAL_ROUNDS (default 3).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$here/lib.sh"

# -------------------------------------------------------------- guest

# run TAG I J FIELD [args]: one meshperf run, node I -> node J, over the
# management network; prints FIELD of the result.  A run from 1 to 3
# must be relayed through n2, one from 1 to 2 must not be.
run() {
	local tag=$1 i=$2 j=$3 field=$4 rc=0 size

	shift 4
	size=$(bench_size_bytes "${*: -1}")
	RUNS=$((RUNS + 1))
	tag=$tag-$RUNS
	relay_pair_start "$tag" "$i" "$j" $((19000 + RUNS % 500)) \
		--abi 12 --timeout 120 "$@" >&2 || return 1
	mesh_finish "$tag" 600 || rc=$?
	if [ "$rc" -ne 0 ] || ! mp_check "$tag" 1 >&2; then
		mp_show_logs "$tag" >&2
		return 1
	fi
	if [ "$j" = 3 ]; then
		relay_expect "$tag" client send ": via n2 " >&2 || return 1
	else
		relay_none "$tag" >&2 || return 1
	fi
	mp_field "$tag" "$size" "$field"
}

bw() {
	run "bw$1$2" "$1" "$2" gbits_per_s --no-latency --iters "$ITERS" \
		--budget "$((ITERS * BYTES))" --mem 64M --sizes "$MSG"
}

lat() {
	run "lat$1$2" "$1" "$2" lat_us --iters "$LAT_ITERS" --lat-max 8 \
		--budget 1M --sizes 8
}

# shape_all RATE: tbf on both ends of every cable, its queue deeper than
# what rxe keeps in flight, so it delays and never drops.
shape_all() {
	local i j

	while read -r i j; do
		ip netns exec "rxn$i" tc qdisc replace dev "v$i$j" root tbf \
			rate "$1" burst 256kb limit 16mb
		ip netns exec "rxn$j" tc qdisc replace dev "v$j$i" root tbf \
			rate "$1" burst 256kb limit 16mb
	done < <(rxnet_cables ring 4)
}

# verdict NAME DIRECT_FILE RELAYED_FILE BAR UNIT higher|lower: the
# medians, and the median of each round's ratio (a direct run and the
# relayed one after it share the host's load of the moment), which the bar
# is judged on.
verdict() {
	local q

	q=$(paste "$2" "$3" | awk '{ print $2 / $1 }' | median)
	awk -v name="$1" -v d="$(median <"$2")" -v r="$(median <"$3")" -v q="$q" \
	    -v bar="$4" -v unit="$5" -v way="$6" 'BEGIN {
		ok = way == "higher" ? q >= bar : q <= bar
		printf "  %-16s direct %9.3f %s  relayed %9.3f %s  ratio of medians %.2f, median ratio per round %.2f (bar %s %.2f: %s)\n",
			name, d, unit, r, unit, r / d, q, way == "higher" ? ">=" : "<=",
			bar, ok ? "holds" : "MISSED"
	}'
}

guest_main() {
	local rounds=$2 r v cal rate run what to how unit

	bench_rxe_guest "$1"
	export BUILD MESHPERF PLUGIN LOGDIR
	BYTES=$(bench_size_bytes "$MSG")
	ITERS=$(((BW_MIB << 20) / BYTES))
	[ "$ITERS" -ge 8 ] || ITERS=8
	RUNS=0
	trap 'rxe_cleanup; rxnet_down; rm -rf "$LOGDIR"' EXIT
	relay_topology_ensure ring
	relay_use ring
	# n1 and n3 route through n2 both ways; the QP timeout is raised to
	# 18 (1 s) so a shaped queue's delay does not count as a lost packet
	RELAY_CONF=$LOGDIR/bench.conf
	sed -e 's/^  qps_per_conn = .*/&\n  timeout = 18;/' \
	    -e 's/{ match = "n1"; relay: { name = "n1";/& routes = [ "10.77.34.3 via n2" ];/' \
	    -e 's/{ match = "n3"; relay: { name = "n3";/& routes = [ "10.77.14.1 via n2" ];/' \
		"$src/tests/rxe/relay-ring.conf" >"$RELAY_CONF"
	# shellcheck disable=SC2034 # read by tests/rxe/relay.sh
	MESH_CONF=$RELAY_CONF
	relay_start bench >&2

	echo "calibration: direct pair n1 -> n2 unshaped, $MSG messages, $ITERS per run"
	for ((r = 1; r <= CAL_ROUNDS; r++)); do
		v=$(bw 1 2)
		echo "$v" >>"$LOGDIR/cal.direct"
		echo "  round $r direct  $v Gb/s"
	done
	v=$(bw 1 3)
	echo "  unshaped relayed n1 -> n2 -> n3: $v Gb/s (the CPUs carry each byte twice)"
	cal=$(median <"$LOGDIR/cal.direct")
	# shellcheck disable=SC2153 # RATE comes from host_main
	rate=$RATE
	if [ "$rate" = auto ]; then
		rate=$(awk -v c="$cal" 'BEGIN { r = int(c * 1000 / 4 / 10) * 10; print (r < 10 ? 10 : r) "mbit" }')
	fi
	echo "the guest's CPUs carry about $cal Gb/s on one unshaped pair;" \
		"every cable is shaped to $rate (tc tbf, both ends), below that"
	shape_all "$rate"

	echo "shaped: $rounds rounds, $MSG messages ($ITERS per run), latency $LAT_ITERS round trips of 8 B"
	for ((r = 1; r <= rounds; r++)); do
		for run in "bw 2 direct Gb/s" "bw 3 relayed Gb/s" \
			   "lat 2 direct us" "lat 3 relayed us"; do
			read -r what to how unit <<<"$run"
			v=$("$what" 1 "$to")
			echo "$v" >>"$LOGDIR/$what.$how"
			printf '  round %d %-3s %-7s %s %s\n' "$r" "$what" "$how" "$v" "$unit"
		done
	done
	ip netns exec rxn2 tc -s qdisc show dev v23 | sed 's/^/  v23 (n2 -> n3): /'
	echo "relay n2's pairs:"
	relay_pairs bench 2 | sed 's/^/  /'
	echo "medians of $rounds rounds (same boot), links at $rate:"
	verdict "bandwidth $MSG" "$LOGDIR/bw.direct" "$LOGDIR/bw.relayed" \
		0.85 Gb/s higher
	verdict "latency 8 B" "$LOGDIR/lat.direct" "$LOGDIR/lat.relayed" \
		2.5 us lower
}

# --------------------------------------------------------------- host

host_main() {
	bench_rxe_host "${1:-build}" modules/rdma-mesh/mesh-rdma-mesh.so \
		tools/meshrelay/meshrelay
	"$lab" run -t 2400 -- \
		"env RATE=${RATE:-auto} MSG=${MSG:-4M} BW_MIB=${BW_MIB:-64} \
LAT_ITERS=${LAT_ITERS:-1000} CAL_ROUNDS=${CAL_ROUNDS:-3} \
bash tests/bench/rxe-relay.sh --in-guest '$rel' ${2:-5}"
}

# in the guest: tests/rxe/relay.sh, which sources what it needs of tests/rxe
# shellcheck source=tests/rxe/relay.sh
[ "${1:-}" != --in-guest ] || . "$src/tests/rxe/relay.sh"
bench_rxe_main "$@"
