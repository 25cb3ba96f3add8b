#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): two builds of nccl-mesh measured in one run, so a
# change can be judged against the code before it on the same machine at
# the same time.  Each round runs meshperf through the plugin and tcp-xdc on
# loopback with build A, then build B: 64 MiB bandwidth (unidirectional,
# then bidirectional), and the 8-byte half round trip.  Prints every round,
# the medians of each and the ratios B/A.
#
#   tests/bench/before-after.sh BUILD_A BUILD_B [ROUNDS] [STREAMS]
#
# BUILD_A is usually a build of the commit before the change (from
# `git worktree add` or `git archive`), BUILD_B the current tree.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 BUILD_A BUILD_B [ROUNDS] [STREAMS]" >&2; exit 2; }
builds=("$(realpath "$1")" "$(realpath "$2")")
rounds=${3:-5}
streams=${4:-8}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_scratch

for b in "${builds[@]}"; do
	[ -x "$b/tools/meshperf/meshperf" ] || { echo "no meshperf in $b: build first" >&2; exit 2; }
done

cat >"$work/bench.conf" <<CONF
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lo"; streams = $streams; threads = $streams; };
CONF


# run BUILD KEY EXTRA_ARGS...: prints the figure KEY of the last result line.
run() {
	local b=$1 key=$2 pf=$work/port
	shift 2
	rm -f "$pf"
	NCCL_MESH_CONF=$work/bench.conf NCCL_MESH_MODULE_PATH=$b/modules/tcp-xdc \
		"$b/tools/meshperf/meshperf" --server -P "$b/core/libnccl-net-mesh.so" \
		-p 0 --port-file "$pf" >/dev/null 2>&1 &
	pids+=($!)
	for _ in $(seq 50); do [ -s "$pf" ] && break; sleep 0.1; done
	NCCL_MESH_CONF=$work/bench.conf NCCL_MESH_MODULE_PATH=$b/modules/tcp-xdc \
		"$b/tools/meshperf/meshperf" --client 127.0.0.1 -p "$(cat "$pf")" \
		-P "$b/core/libnccl-net-mesh.so" --json "$@" >"$work/mp.json"
	wait "${pids[-1]}"
	bench_figure "$work/mp.json" "$key"
}

kinds=(bw bidir lat)
declare -A args=(
	[bw]="--sizes 64M --budget 4G --mem 512M --no-latency"
	[bidir]="--sizes 64M --budget 2G --mem 512M --no-latency --bidir"
	[lat]="--sizes 8 --iters 20000"
)
declare -A key=([bw]=gbits_per_s [bidir]=gbits_per_s [lat]=lat_us)

for r in $(seq "$rounds"); do
	line="round $r:"
	for k in "${kinds[@]}"; do
		for i in 0 1; do
			# shellcheck disable=SC2086
			v=$(run "${builds[$i]}" "${key[$k]}" ${args[$k]})
			echo "$v" >>"$work/$k.$i"
			line+=" ${k}[$i]=$v"
		done
	done
	echo "$line"
done
echo "A = ${builds[0]}"
echo "B = ${builds[1]}"
for k in "${kinds[@]}"; do
	a=$(bench_median <"$work/$k.0"); b=$(bench_median <"$work/$k.1")
	unit=Gb/s; [ "$k" = lat ] && unit=us
	python3 -c "print('%-6s median A %s, B %s %s, B/A %.3f' % ('$k', '$a', '$b', '$unit', $b/$a))"
done
