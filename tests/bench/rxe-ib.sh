#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root and the rxe lab): meshperf over
# ib-fabric against perftest on the same Soft-RoCE link, in one boot of the
# lab's guest.  Emulated rxe is slow and noisy, so the programs alternate
# and the medians of ROUNDS runs each are compared:
#
#   bandwidth: ib_write_bw vs meshperf, MSG (default 1M) messages, rxn1 -> rxn2
#   latency:   ib_write_lat and ib_send_lat vs meshperf ping-pong, 8 bytes
#
# Bars: meshperf bandwidth >= 0.9x ib_write_bw; meshperf 8-byte latency
# <= 1.3x ib_write_lat and ib_send_lat (means against means: meshperf
# reports the mean half round trip; perftest's typical value is shown too).
#
#   tests/bench/rxe-ib.sh [BUILD_DIR] [ROUNDS]
#
# Environment: MSG (bandwidth message size, default 1M), BW_MIB (MiB per
# bandwidth run, default 192), LAT_ITERS (default 1000), PARTS ("bw lat",
# the default, or one of them), MESHPERF_ENV (more VAR=value words for meshperf, e.g.
# "NCCL_MESH_IB_FABRIC_QPS_PER_CONN=2").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$here/lib.sh"

# -------------------------------------------------------------- guest

# perf TOOL FIELD ARGS...: one perftest run rxn1 -> rxn2 over rxe12/rxe21;
# prints column FIELD of its result line.
perf() {
	local tool=$1 field=$2 port=$((19000 + RANDOM % 500)) spid rc=0

	shift 2
	rxe_spawn rxn2 "$LOGDIR/perf.server" timeout 120 "$tool" -d rxe21 \
		-x "$GID2" -p "$port" -F "$@"
	spid=$RXE_LAST_PID
	rxe_wait_listen rxn2 "$port" 30 || { cat "$LOGDIR/perf.server" >&2; return 1; }
	ip netns exec rxn1 timeout 120 "$tool" -d rxe12 -x "$GID1" -p "$port" \
		-F "$@" 10.77.12.2 >"$LOGDIR/perf.client" 2>&1 || rc=$?
	rxe_wait "$spid" 30 || rc=$?
	if [ "$rc" -ne 0 ]; then
		cat "$LOGDIR/perf.client" "$LOGDIR/perf.server" >&2
		return 1
	fi
	awk -v f="$field" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= f { v = $f } END { print v }' \
		"$LOGDIR/perf.client"
}

# mperf FIELD SIZE ARGS...: one meshperf run rxn1 -> rxn2 over ib-fabric;
# prints FIELD of the result line for SIZE.
mperf() {
	local field=$1 size=$2 rc=0

	shift 2
	read -ra MP_ENV <<<"${MESHPERF_ENV:-}"
	mp_run mp rxn2 rxn2x 10.77.12.2 rxn1 rxn1x $((19600 + RANDOM % 300)) \
		300 --abi 12 --timeout 60 "$@" || rc=$?
	if [ "$rc" -ne 0 ] || ! mp_check mp 1; then
		mp_show_logs mp >&2
		return 1
	fi
	mp_field mp "$size" "$field"
}

# bw_rounds ROUNDS: alternating ib_write_bw and meshperf bandwidth runs.
bw_rounds() {
	local rounds=$1 msg bytes iters r v

	msg=${MSG:-1M}
	bytes=$(bench_size_bytes "$msg")
	iters=$(( (${BW_MIB:-192} << 20) / bytes ))
	[ "$iters" -ge 8 ] || iters=8
	echo "bandwidth: $rounds rounds, $msg messages, $iters per run, rxe12 -> rxe21"
	for ((r = 1; r <= rounds; r++)); do
		v=$(perf ib_write_bw 4 --report_gbits -s "$bytes" -n "$iters")
		echo "$v" >>"$LOGDIR/bw.perf"
		echo "  round $r ib_write_bw $v Gb/s"
		v=$(mperf gbits_per_s "$bytes" --sizes "$msg" --no-latency \
			--iters "$iters" --budget "$((iters * bytes))" --mem 64M)
		echo "$v" >>"$LOGDIR/bw.mesh"
		echo "  round $r meshperf    $v Gb/s"
	done
	awk -v bp="$(median <"$LOGDIR/bw.perf")" \
	    -v bm="$(median <"$LOGDIR/bw.mesh")" -v n="$rounds" -v msg="$msg" 'BEGIN {
		printf "medians of %d rounds (same boot, same link)\n", n
		printf "  %-28s %10.3f Gb/s\n", "ib_write_bw " msg, bp
		printf "  %-28s %10.3f Gb/s   ratio %.2f (bar >= 0.90: %s)\n",
			"meshperf ib-fabric " msg, bm, bm / bp,
			(bm >= 0.9 * bp) ? "holds" : "MISSED"
	}' | tee "$LOGDIR/summary.bw"
}

# lat_rounds ROUNDS: alternating ib_write_lat, ib_send_lat and meshperf
# 8-byte ping-pongs.
lat_rounds() {
	local rounds=$1 i=${LAT_ITERS:-1000} r v tool typ avg

	echo "latency: $rounds rounds, 8 bytes, $i iterations"
	for ((r = 1; r <= rounds; r++)); do
		for tool in ib_write_lat ib_send_lat; do
			perf "$tool" 6 -s 8 -n "$i" >/dev/null
			awk '$1 == 8 { print $5, $6 }' "$LOGDIR/perf.client" >"$LOGDIR/cur"
			read -r typ avg <"$LOGDIR/cur"
			echo "$typ" >>"$LOGDIR/$tool.typ"
			echo "$avg" >>"$LOGDIR/$tool.avg"
			echo "  round $r $tool typical $typ us, avg $avg us"
		done
		# one buffer per receive, as ib_*_lat posts: meshperf
		# otherwise groups max_recvs messages into each step
		v=$(MESHPERF_ENV="NCCL_MESH_IB_FABRIC_MAX_RECVS=1 ${MESHPERF_ENV:-}" \
			mperf lat_us 8 --sizes 8 --lat-max 8 --iters "$i" \
			--budget 8K)
		echo "$v" >>"$LOGDIR/lat.mesh"
		echo "  round $r meshperf     avg $v us"
	done
	awk -v wl="$(median <"$LOGDIR/ib_write_lat.avg")" \
	    -v wt="$(median <"$LOGDIR/ib_write_lat.typ")" \
	    -v sl="$(median <"$LOGDIR/ib_send_lat.avg")" \
	    -v st="$(median <"$LOGDIR/ib_send_lat.typ")" \
	    -v ml="$(median <"$LOGDIR/lat.mesh")" -v n="$rounds" 'BEGIN {
		printf "medians of %d rounds (same boot, same link)\n", n
		printf "  %-28s %10.1f us avg (typical %.1f)\n", "ib_write_lat 8 B", wl, wt
		printf "  %-28s %10.1f us avg (typical %.1f)\n", "ib_send_lat 8 B", sl, st
		printf "  %-28s %10.1f us avg   ratio %.2f to write_lat, %.2f to send_lat (bar <= 1.30: %s)\n",
			"meshperf ib-fabric 8 B", ml, ml / wl, ml / sl,
			(ml <= 1.3 * wl && ml <= 1.3 * sl) ? "holds" : "MISSED"
	}' | tee "$LOGDIR/summary.lat"
}

guest_main() {
	local rounds=$2

	bench_rxe_guest "$1"
	MODULE_PATH=$BUILD/modules/ib-fabric
	# host names rxn1x/rxn2x: only the device differs, given here
	CONF=$LOGDIR/bench.conf
	cat >"$CONF" <<-EOF
	version = 1;
	modules = [ "ib-fabric" ];
	hosts = (
	  { match = "rxn1x"; ib-fabric: { hca = "=rxe12"; }; },
	  { match = "rxn2x"; ib-fabric: { hca = "=rxe21"; }; }
	);
	EOF
	trap 'rxe_cleanup; rm -rf "$LOGDIR"; rxnet_down >/dev/null 2>&1 || true' EXIT
	rxnet_up 2
	GID1=$(rxe_gid_index rxe12)
	GID2=$(rxe_gid_index rxe21)
	bench_rxe_parts "$rounds" "${PARTS:-bw lat}" bw lat
}

# --------------------------------------------------------------- host

host_main() {
	bench_rxe_host "${1:-build}" modules/ib-fabric/mesh-ib-fabric.so
	"$lab" run -t 1800 -- \
		"env PARTS='${PARTS:-bw lat}' MSG=${MSG:-1M} BW_MIB=${BW_MIB:-192} LAT_ITERS=${LAT_ITERS:-1000} \
MESHPERF_ENV='${MESHPERF_ENV:-}' bash tests/bench/rxe-ib.sh --in-guest '$rel' ${2:-5}"
}

# in the guest: tests/rxe/net.sh, which sources what it needs of tests/rxe
# shellcheck source=tests/rxe/net.sh
[ "${1:-}" != --in-guest ] || . "$src/tests/rxe/net.sh"
bench_rxe_main "$@"
