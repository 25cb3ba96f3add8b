#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): what metrics and profiler events cost on the
# data path.  One build, meshperf through the plugin and tcp-xdc on
# loopback, each round once off (no metrics_file, no profiler callback at
# init) and once on (metrics_file written every 100 ms, far more often
# than a collector reads it, so the writer's own work is in the figures
# too, and a profiler callback that takes every event as a profiler plugin
# does: meshperf --profiler record), in alternating order: 64 MiB
# bandwidth, then the 8-byte half round trip.  Prints every round, the
# medians and the ratios on/off; the bar is within 3% (docs/benchmarks.md).
#
#   tests/bench/metrics-cost.sh BUILD [ROUNDS] [STREAMS]
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BUILD [ROUNDS] [STREAMS]" >&2; exit 2; }
build=$(realpath "$1")
rounds=${2:-7}
streams=${3:-8}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_scratch

[ -x "$build/tools/meshperf/meshperf" ] ||
	{ echo "no meshperf in $build: build first" >&2; exit 2; }
mkdir -p "$work/prom"
cat >"$work/off.conf" <<CONF
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lo"; streams = $streams; threads = $streams; };
CONF
cat "$work/off.conf" - >"$work/on.conf" <<CONF
metrics_file = "$work/prom/nccl-mesh-%p.prom";
metrics_interval_ms = 100;
CONF

# run MODE KEY EXTRA_ARGS...: prints the figure KEY of the last result.
run() {
	local conf=$work/$1.conf key=$2
	local -a BENCH_BOTH=(--profiler none)
	[ "$1" = off ] || BENCH_BOTH=(--profiler record)
	shift 2
	NCCL_MESH_CONF=$conf NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc \
		bench_meshperf "$build" "$work" "$work/mp.json" "$@"
	bench_figure "$work/mp.json" "$key"
}

kinds=(bw lat)
declare -A args=(
	[bw]="--sizes 64M --budget 4G --mem 512M --no-latency"
	[lat]="--sizes 8 --iters 20000"
)
declare -A key=([bw]=gbits_per_s [lat]=lat_us)

for r in $(seq "$rounds"); do
	line="round $r:"
	# alternate which goes first, so that drift favours neither
	order=(off on)
	[ $((r % 2)) = 0 ] && order=(on off)
	for k in "${kinds[@]}"; do
		for m in "${order[@]}"; do
			# shellcheck disable=SC2086
			v=$(run "$m" "${key[$k]}" ${args[$k]})
			echo "$v" >>"$work/$k.$m"
			line+=" $k.$m=$v"
		done
	done
	echo "$line"
done
# the "on" runs wrote their files: one per process, not empty
n=$(find "$work/prom" -name 'nccl-mesh-*.prom' -size +0 | wc -l)
echo "metrics files written by the 'on' runs: $n (want $((rounds * 4)))"
for k in "${kinds[@]}"; do
	off=$(bench_median <"$work/$k.off"); on=$(bench_median <"$work/$k.on")
	python3 - "$k" "$off" "$on" <<'PY'
import sys

kind, off, on = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
unit = 'us' if kind == 'lat' else 'Gb/s'
# bandwidth: on/off at least 0.97; latency: on/off at most 1.03
ratio = on / off
ok = ratio >= 0.97 if kind == 'bw' else ratio <= 1.03
print('%-4s median off %g, on %g %s, on/off %.3f (bar: within 3%%: %s)'
      % (kind, off, on, unit, ratio, 'met' if ok else 'NOT met'))
PY
done
