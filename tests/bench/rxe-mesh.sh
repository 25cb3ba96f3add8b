#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root and the rxe lab): rdma-mesh on a
# Soft-RoCE triangle, in one boot of the lab's guest.  Emulated rxe is slow
# and noisy, so the programs alternate and medians of ROUNDS runs each are
# compared:
#
#   links:  each triangle cable driven alone, ib_write_bw on that cable's
#           devices vs meshperf over rdma-mesh between the two nodes (the
#           module must pick that cable itself); bar >= 0.9 per cable.
#   stripe: nodes 1 and 2 with two cables, each shaped with tc tbf to RATE
#           (default 100mbit) on node 1's side; meshperf over one cable vs
#           over both; bar >= 1.8x.  Emulated rxe is CPU-bound (about
#           0.5 Gb/s per guest): the shaped rate keeps the cables, not the
#           emulation, the bottleneck.  The tbf queue is deeper than what
#           rxe keeps in flight (at most 128 unacknowledged packets per QP),
#           so it delays and never drops, and the QP timeout is raised so
#           the queueing delay does not count as a lost packet.
#
#   tests/bench/rxe-mesh.sh [BUILD_DIR] [ROUNDS]
#
# Environment: PARTS ("links stripe", the default, or one of them), MSG
# (message size, default 1M), BW_MIB (MiB per run, default 128), RATE (tc
# rate of each shaped cable, default 100mbit).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$here/lib.sh"

# -------------------------------------------------------------- guest

# write_bw I J: one ib_write_bw run over cable I-J, node I -> node J;
# prints Gb/s.
write_bw() {
	local i=$1 j=$2 port=$((19000 + RANDOM % 500)) spid rc=0 sg cg

	sg=$(rxe_gid_index "rxe$j$i")
	cg=$(rxe_gid_index "rxe$i$j")
	rxe_spawn "rxn$j" "$LOGDIR/perf.server" timeout 120 ib_write_bw \
		-d "rxe$j$i" -x "$sg" -p "$port" -F --report_gbits -s "$BYTES" \
		-n "$ITERS"
	spid=$RXE_LAST_PID
	rxe_wait_listen "rxn$j" "$port" 30 || { cat "$LOGDIR/perf.server" >&2; return 1; }
	ip netns exec "rxn$i" timeout 120 ib_write_bw -d "rxe$i$j" -x "$cg" \
		-p "$port" -F --report_gbits -s "$BYTES" -n "$ITERS" \
		"$(mesh_addr "$j" "$i")" >"$LOGDIR/perf.client" 2>&1 || rc=$?
	rxe_wait "$spid" 30 || rc=$?
	if [ "$rc" -ne 0 ]; then
		cat "$LOGDIR/perf.client" "$LOGDIR/perf.server" >&2
		return 1
	fi
	awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 4 { v = $4 } END { print v }' \
		"$LOGDIR/perf.client"
}

# mesh_bw TAG SNS SHOST SADDR CNS CHOST: one meshperf run over rdma-mesh;
# prints Gb/s for MSG.
mesh_bw() {
	local tag=$1 rc=0

	mesh_server "$tag" "$2" "$3" "$4" $((19600 + RANDOM % 300))
	mesh_server_listens "$tag" >&2 || return 1
	mesh_client "$tag" "$5" "$6" "$4" --abi 12 --timeout 120 --sizes "$MSG" \
		--no-latency --iters "$ITERS" --budget "$((ITERS * BYTES))" --mem 64M
	mesh_finish "$tag" 300 || rc=$?
	if [ "$rc" -ne 0 ] || ! mp_check "$tag" 1 >&2; then
		mp_show_logs "$tag" >&2
		return 1
	fi
	mp_field "$tag" "$BYTES" gbits_per_s
}

# verdict NAME REF_FILE MESH_FILE BAR: the medians and whether MESH >= BAR x REF.
verdict() {
	awk -v name="$1" -v r="$(median <"$2")" -v m="$(median <"$3")" -v bar="$4" 'BEGIN {
		printf "  %-30s ref %8.3f Gb/s  meshperf %8.3f Gb/s  ratio %.2f (bar >= %.2f: %s)\n",
			name, r, m, m / r, bar, (m >= bar * r) ? "holds" : "MISSED"
	}'
}

links_rounds() {
	local rounds=$1 r i j pair v

	echo "links: $rounds rounds per cable, $MSG messages, $ITERS per run, each cable alone"
	for pair in 12 13 23; do
		i=${pair:0:1}
		j=${pair:1:1}
		for ((r = 1; r <= rounds; r++)); do
			v=$(write_bw "$i" "$j")
			echo "$v" >>"$LOGDIR/link$pair.perf"
			echo "  cable $i-$j round $r ib_write_bw $v Gb/s"
			v=$(mesh_bw "l$pair" "rxn$j" "tri$j" "$(mesh_addr "$j" "$i")" \
				"rxn$i" "tri$i")
			echo "$v" >>"$LOGDIR/link$pair.mesh"
			echo "  cable $i-$j round $r meshperf    $v Gb/s"
		done
	done
	echo "medians of $rounds rounds (same boot)"
	for pair in 12 13 23; do
		verdict "cable ${pair:0:1}-${pair:1:1} (rxe$pair)" "$LOGDIR/link$pair.perf" \
			"$LOGDIR/link$pair.mesh" 0.9
	done | tee "$LOGDIR/summary.links"
}

# shape DEV: tbf at RATE on node 1's end of a cable, queue deep enough
# for everything rxe keeps in flight.
shape() {
	ip netns exec rxn1 tc qdisc replace dev "$1" root tbf rate "$RATE" \
		burst 256kb limit 16mb
}

stripe_rounds() {
	local rounds=$1 r v

	mesh_cable2_ensure >&2
	shape v12
	shape v12b
	echo "stripe: $rounds rounds, cables v12 and v12b each shaped to $RATE (tc tbf), $MSG messages, $ITERS per run"
	for ((r = 1; r <= rounds; r++)); do
		v=$(mesh_bw one rxn2 one2 10.77.12.2 rxn1 one1)
		echo "$v" >>"$LOGDIR/stripe.one"
		echo "  round $r one cable  $v Gb/s"
		v=$(mesh_bw two rxn2 duo2 10.77.12.2 rxn1 duo1)
		echo "$v" >>"$LOGDIR/stripe.two"
		echo "  round $r two cables $v Gb/s"
	done
	ip netns exec rxn1 tc -s qdisc show dev v12 | sed 's/^/  v12: /'
	ip netns exec rxn1 tc -s qdisc show dev v12b | sed 's/^/  v12b: /'
	echo "medians of $rounds rounds (same boot)"
	verdict "two cables vs one" "$LOGDIR/stripe.one" "$LOGDIR/stripe.two" 1.8 |
		tee "$LOGDIR/summary.stripe"
}

guest_main() {
	local rounds=$2

	bench_rxe_guest "$1"
	export BUILD MESHPERF PLUGIN LOGDIR
	BYTES=$(bench_size_bytes "$MSG")
	ITERS=$(( (BW_MIB << 20) / BYTES ))
	[ "$ITERS" -ge 8 ] || ITERS=8
	# the lab's triangle hosts, plus one1/one2: nodes 1 and 2 on cable
	# v12 alone; timeout 18 (1 s): a shaped queue delays, it loses nothing
	MESH_CONF=$LOGDIR/bench.conf
	sed 's/^  qps_per_conn = .*/&\n  timeout = 18;/' \
		"$src/tests/rxe/mesh-rdma.conf" >"$MESH_CONF"
	sed -i 's/^hosts = (/&\n  { match = "one1"; rdma-mesh: { hca = "=rxe12"; }; },\n  { match = "one2"; rdma-mesh: { hca = "=rxe21"; }; },/' \
		"$MESH_CONF"
	export MESH_CONF
	trap 'rxe_cleanup; mesh_cleanup; rm -rf "$LOGDIR"' EXIT
	mesh_triangle_ensure
	bench_rxe_parts "$rounds" "${PARTS:-links stripe}" links stripe
}

# --------------------------------------------------------------- host

host_main() {
	bench_rxe_host "${1:-build}" modules/rdma-mesh/mesh-rdma-mesh.so
	"$lab" run -t 1800 -- \
		"env PARTS='${PARTS:-links stripe}' MSG=${MSG:-1M} BW_MIB=${BW_MIB:-128} \
RATE=${RATE:-100mbit} bash tests/bench/rxe-mesh.sh --in-guest '$rel' ${2:-5}"
}

# in the guest: tests/rxe/mesh.sh, which sources what it needs of tests/rxe
# shellcheck source=tests/rxe/mesh.sh
[ "${1:-}" != --in-guest ] || . "$src/tests/rxe/mesh.sh"
bench_rxe_main "$@"
