#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): tcp-xdc with many comms against one, the same
# total streams.  meshperf on loopback, both directions at once, 4 MiB
# messages: 1 channel of 64 streams, 8 channels of 8, 64 channels of 1,
# alternating, median of ROUNDS each; with each process's threads,
# descriptors and peak RSS as meshperf reports them.
# Bars: 64 channels >= 0.9 of 1 channel; threads <= 2 x cores.
#
#   tests/bench/xdc-scale.sh [BUILD_DIR] [ROUNDS]
#
# Environment: TOTAL (streams per direction, default 64), SIZE (4M),
# BUDGET (bytes per run and direction, default 4G).
set -euo pipefail

build=$(realpath "${1:-build}")
rounds=${2:-3}
total=${TOTAL:-64}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$src/tests/bench/lib.sh"
[ -x "$build/tools/meshperf/meshperf" ] || { echo "no meshperf in $build: build first" >&2; exit 2; }

bench_loopback_conf "$build"

channels=(1 8 "$total")
for r in $(seq "$rounds"); do
	line="round $r:"
	for ch in "${channels[@]}"; do
		NCCL_MESH_TCP_XDC_STREAMS=$((total / ch)) bench_meshperf \
			"$build" "$work" "$work/mp.json" --sizes "${SIZE:-4M}" \
			--budget "${BUDGET:-4G}" --no-latency --bidir \
			--channels "$ch"
		v=$(bench_figure "$work/mp.json" gbits_per_s)
		echo "$v" >>"$work/bw.$ch"
		for k in threads fds peak_rss_kib; do
			bench_figure "$work/mp.json" "$k" >"$work/$k.$ch"
		done
		line+=" ${ch}ch=$v"
	done
	echo "$line Gb/s"
done
echo "host: $(nproc) cores; $total streams per direction in all, both directions"
for ch in "${channels[@]}"; do
	printf '%3d channels x %2d streams: median %s Gb/s, %s threads, %s descriptors, peak RSS %s MiB\n' \
		"$ch" $((total / ch)) "$(bench_median <"$work/bw.$ch")" \
		"$(cut -d. -f1 "$work/threads.$ch")" "$(cut -d. -f1 "$work/fds.$ch")" \
		"$(($(cut -d. -f1 "$work/peak_rss_kib.$ch") / 1024))"
done
one=$(bench_median <"$work/bw.1")
many=$(bench_median <"$work/bw.$total")
python3 -c "print('%d channels / 1 channel: %.3f (bar 0.9)' % ($total, $many / $one))"
t=$(sort -g "$work"/threads.* | tail -1 | cut -d. -f1)
echo "threads per process: at most $t, meshperf's own included: $((t - 1)) data threads with $(nproc) cores (bar $((2 * $(nproc))))"
