#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): tcp-xdc alone, moving what NCCL's all-reduce of
# large messages between two ranks asks of it, against raw loopback TCP
# touching the same memory.  No GPU: it tells the transport's share of a
# tests/gpu run from the GPU's and NCCL's.
#
# meshperf, both directions at once, CHANNELS connections each way (NCCL's
# channels; 4 in tests/gpu's runs), WINDOW messages of SIZE outstanding on
# each (NCCL's steps: 8 of 512 KiB in its 4 MiB buffer), message bytes not
# filled or checked (--no-verify: one thread checking every byte is slower
# than the transport on a large host; correctness is the tests' job).
# The reference is tests/bench's tcp_stream with STREAMS connections each
# way, each of its 4 x STREAMS threads stepping through as much memory as
# meshperf's buffers hold in all (2 processes x 2 directions x CHANNELS x
# WINDOW x SIZE), so both miss the caches alike.  Variants and the
# reference alternate; medians of ROUNDS.  Each run also says when its
# first channel was through, as a share of the run: how evenly the data
# threads served the channels, since NCCL waits for the slowest.
#
#   tests/bench/xdc-ceiling.sh [BUILD_DIR] [ROUNDS] [VARIANT ...]
#
# A VARIANT is NAME or NAME:VAR=VALUE,... (NCCL_MESH_* settings); default:
# one at tcp-xdc's defaults (8 streams, as tests/gpu/gpu.conf).
# Environment: CHANNELS (4), WINDOW (8), SIZE (512K), STREAMS (8),
# BUDGET (bytes per run and direction, 32G).
set -euo pipefail

build=$(realpath "${1:-build}")
rounds=${2:-3}
shift $(($# > 2 ? 2 : $#))
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(default)
channels=${CHANNELS:-4} window=${WINDOW:-8} size=${SIZE:-512K}
streams=${STREAMS:-8}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$src/tests/bench/lib.sh"
for t in tools/meshperf/meshperf tests/bench/tcp_stream; do
	[ -x "$build/$t" ] || { echo "no $t in $build: build first" >&2; exit 2; }
done

bench_loopback_conf "$build"

bytes=$(numfmt --from=iec "$size")
ring=$((channels * window * bytes / streams))
[ "$ring" -ge "$bytes" ] || ring=$bytes

for r in $(seq "$rounds"); do
	raw=$(bench_tcp_stream "$build" "$streams" 4 "$size" "$ring")
	echo "raw $raw" >>"$work/all"
	line="round $r: raw TCP $raw"
	for v in "${variants[@]}"; do
		bench_variant "$v"
		(
			for kv in ${env_list[@]+"${env_list[@]}"}; do export "${kv?}"; done
			bench_meshperf "$build" "$work" "$work/mp.json" \
				--sizes "$size" --channels "$channels" \
				-w "$window" -n 1000000 --budget "${BUDGET:-32G}" \
				--mem "$((channels * window * bytes))" \
				--no-latency --bidir --no-verify
		)
		bw=$(bench_figure "$work/mp.json" gbytes_per_s)
		first=$(bench_figure "$work/mp.json" first_channel_share)
		echo "$name $bw $first" >>"$work/all"
		line+=", $name $bw (first channel through at $first)"
	done
	echo "$line GB/s both ways"
done
echo "host: $(nproc) cores; $channels channels x $window x $size each way;" \
     "raw TCP $streams streams each way, $ring bytes a thread"
rawm=$(bench_median_of "$work/all" raw)
echo "raw TCP: median $rawm GB/s both ways"
for v in "${variants[@]}"; do
	bench_variant "$v"
	m=$(bench_median_of "$work/all" "$name")
	f=$(bench_median_of "$work/all" "$name" 3)
	python3 -c "print('%s: median %s GB/s both ways, %.3f of raw TCP; first channel through at %s of the run' % ('$name', '$m', $m / $rawm, '$f'))"
done
