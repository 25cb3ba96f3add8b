# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shared by the benchmark scripts: sourced, never run.

# bench_scratch: a scratch folder in $work and the background processes a
# script starts in pids, both gone when the script exits, however it ends.
bench_scratch() {
	work=$(mktemp -d)
	pids=()
	trap bench_cleanup EXIT
}

bench_cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}

# The median of the numbers on stdin, one per line (of an even count, the
# mean of the middle two).
bench_median() {
	sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2)
		print NR % 2 ? v[m] : (v[m] + v[m + 1]) / 2 }'
}

# bench_figure FILE KEY: figure KEY of the last result line meshperf wrote
# to FILE with --json, with three decimals.
bench_figure() {
	python3 - "$1" "$2" <<'PY'
import json, sys
val = None
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        if d.get("event") == "result" and d.get(sys.argv[2]) is not None:
            val = d[sys.argv[2]]
print("%.3f" % val)
PY
}

# bench_meshperf BUILD WORK OUT [client options...]: one meshperf pair over
# loopback through BUILD's plugin, in the caller's environment (NCCL_MESH_*);
# the client's JSON lines in OUT, each side's log next to it.  The array
# BENCH_BOTH, where set, holds options for both processes (per-process
# ones, such as --profiler).
bench_meshperf() {
	local b=$1 pf=$2/port out=$3 spid rc=0 both=()
	shift 3
	[ -z "${BENCH_BOTH+set}" ] || both=("${BENCH_BOTH[@]}")
	rm -f "$pf"
	"$b/tools/meshperf/meshperf" --server -P "$b/core/libnccl-net-mesh.so" \
		-p 0 --port-file "$pf" "${both[@]}" >"$out.server" 2>&1 &
	spid=$!
	for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.1; done
	"$b/tools/meshperf/meshperf" --client 127.0.0.1 -p "$(cat "$pf")" \
		-P "$b/core/libnccl-net-mesh.so" --json "${both[@]}" "$@" >"$out" \
		2>"$out.client" || rc=$?
	wait "$spid" || rc=$?
	[ "$rc" = 0 ] || { echo "meshperf failed ($rc): $(tail -n 3 "$out.client" "$out.server")" >&2; return 1; }
}

# bench_loopback_conf BUILD: sets work to a new folder (removed at exit)
# holding a config of tcp-xdc on loopback at its defaults, and exports it
# and BUILD's module folder for meshperf.
bench_loopback_conf() {
	work=$(mktemp -d)
	# shellcheck disable=SC2064 # the folder's name now
	trap "rm -rf '$work'" EXIT
	cat >"$work/bench.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lo"; };
CONF
	export NCCL_MESH_CONF=$work/bench.conf
	export NCCL_MESH_MODULE_PATH=$1/modules/tcp-xdc
}

# bench_median_of FILE NAME [COLUMN]: the median of COLUMN (default 2) over
# FILE's lines whose first word is NAME.
bench_median_of() {
	awk -v n="$2" -v c="${3:-2}" '$1 == n { print $c }' "$1" | bench_median
}

# bench_variant V: splits a variant, NAME or NAME:VAR=VALUE,VAR=VALUE, into
# the caller's name and env_list (the VAR=VALUE words, maybe none).  A
# comma starts the next setting only where VAR= follows it, so a value may
# be a list (NCCL_MESH_NCCL_CHANNELS_BY_SIZE=16K:1,64K:2).
bench_variant() {
	name=${1%%:*}
	env_list=()
	if [ "$1" != "$name" ]; then
		mapfile -t env_list < <(sed 's/,\([A-Za-z_][A-Za-z0-9_]*=\)/\n\1/g' \
			<<<"${1#*:}")
	fi
}

# bench_tcp_stream BUILD STREAMS SECS BUF RING: GB/s both ways of raw
# loopback TCP, tests/bench/tcp_stream of BUILD (see its header).
bench_tcp_stream() {
	"$1/tests/bench/tcp_stream" "$2" "$3" "$4" "$5" |
		sed -n 's/.*: \([0-9.]*\) GB\/s both ways.*/\1/p'
}

# --------------------------------------------------------- rxe benchmarks
# rxe-*.sh run on the host, which boots the rxe lab's guest (root), and
# again inside that guest with --in-guest.  The caller sets src, the
# source tree, and defines host_main and guest_main.

# bench_size_bytes SIZE: 1M -> 1048576 (suffixes K, M, G).
bench_size_bytes() {
	local n=${1%[KkMmGg]}

	case ${1: -1} in
	K|k) echo $((n << 10)) ;;
	M|m) echo $((n << 20)) ;;
	G|g) echo $((n << 30)) ;;
	*) echo "$1" ;;
	esac
}

# bench_rxe_host BUILD NEED...: on the host, before the guest runs a
# benchmark: sets build (BUILD made absolute), rel (BUILD inside src) and
# lab (the lab's guest command); exits 2 unless root and each NEED, a path
# inside BUILD, is there; readies the guest's image and copies the
# libraries whose soname the guest lacks to BUILD/rxe-libs.
# shellcheck disable=SC2034,SC2154 # src is the caller's, rel for it
bench_rxe_host() {
	local need lib libs

	build=$(cd "$1" && pwd)
	shift
	case $build/ in
	"$src"/*) rel=${build#"$src"/} ;;
	*) echo "the build directory must be inside $src" >&2; exit 2 ;;
	esac
	lab=$src/tests/rxe/lab/guest
	[ "$(id -u)" -eq 0 ] || { echo "needs root (qemu guest)" >&2; exit 2; }
	for need in "$@"; do
		[ -e "$build/$need" ] || { echo "no $need in $build" >&2; exit 2; }
	done
	"$lab" deps
	"$lab" image >/dev/null
	libs=$build/rxe-libs
	rm -rf "$libs"
	mkdir -p "$libs"
	for lib in $(ldd "$build/core/libnccl-net-mesh.so" |
		     awk '$1 ~ /^libconfig\.so/ && $3 ~ /^\// { print $3 }'); do
		cp -L "$lib" "$libs/"
	done
}

# bench_rxe_guest BUILD: in the guest: sets BUILD (inside src where
# relative), MESHPERF, PLUGIN and LOGDIR (a new folder), and
# LD_LIBRARY_PATH to what bench_rxe_host copied where the plugin misses a
# library.
# shellcheck disable=SC2034,SC2154 # src is the caller's, the rest for it
bench_rxe_guest() {
	case $1 in
	/*) BUILD=$1 ;;
	*) BUILD=$src/$1 ;;
	esac
	MESHPERF=$BUILD/tools/meshperf/meshperf
	PLUGIN=$BUILD/core/libnccl-net-mesh.so
	LOGDIR=$(mktemp -d)
	if [ -d "$BUILD/rxe-libs" ] && ldd "$PLUGIN" | grep -q 'not found'; then
		export LD_LIBRARY_PATH=$BUILD/rxe-libs
	fi
}

# bench_rxe_parts ROUNDS PARTS KNOWN...: for each word PART of PARTS in
# turn, PART_rounds ROUNDS; returns 2 on a PART not among KNOWN.
bench_rxe_parts() {
	local rounds=$1 parts=$2 part known

	shift 2
	printf -v known '%s, ' "$@"
	for part in $parts; do
		case " $* " in
		*" $part "*) "${part}_rounds" "$rounds" ;;
		*) echo "unknown part $part (${known%, })" >&2; return 2 ;;
		esac
	done
}

# bench_rxe_main ARGS...: a benchmark's entry.  With --in-guest BUILD
# [ROUNDS], guest_main BUILD ROUNDS (default 5), the caller having sourced
# what it needs of tests/rxe; else host_main ARGS.
bench_rxe_main() {
	if [ "${1:-}" = --in-guest ]; then
		guest_main "$2" "${3:-5}"
	else
		host_main "$@"
	fi
}
