#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The ceiling of the one-GPU all-reduce runs: what the GPU moves to and from
# pinned host memory, both ways at once in equal amounts as an all-reduce
# does, for one process and for two processes at once (the two ranks of
# run.sh and rounds.sh sharing one GPU under CUDA MPS; start MPS first, as
# for those).  Builds tests/gpu/host_link.cu with nvcc.  Every byte of
# Mesh's and Socket's busbw crosses this path once each way on each rank,
# so the two-process sum each way with many blocks, halved, bounds the
# busbw any network plugin without GPUDirect can reach there; 4 blocks
# come near NCCL's 4 channels.
#
# Usage: tests/gpu/host-link.sh [SECS] [BLOCKS,...] [RING_MB]
#   (defaults: 5 s; 4 and 32 blocks of 512 threads; 32 MiB each way)

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
secs=${1:-5}
IFS=, read -r -a block_counts <<<"${2:-4,32}"
ring=${3:-32}
nvcc=${NVCC:-nvcc}
command -v "$nvcc" >/dev/null || { echo "host-link.sh: no nvcc" >&2; exit 2; }
tmp=$(mktemp -d -t nccl-mesh-host-link.XXXXXX) || exit 2
trap 'rm -rf "$tmp"' EXIT
"$nvcc" -O2 -o "$tmp/host_link" "$here/host_link.cu" || exit 2

# field FILE KEY: the sum of KEY over the JSON lines of FILE.
field() {
	python3 -c 'import json,sys
print("%.2f" % sum(json.loads(l)[sys.argv[2]] for l in open(sys.argv[1])))' "$1" "$2"
}

# run_set NAME PROCS ARGS...: PROCS processes at once, then their sums.
run_set() {
	local name=$1 procs=$2 pids=() rc=0
	shift 2
	: >"$tmp/$name"
	for _ in $(seq "$procs"); do
		"$tmp/host_link" "$@" >>"$tmp/$name" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	[ "$rc" = 0 ] || { echo "host-link.sh: $name failed" >&2; exit 1; }
	echo "$name: $procs process(es), $*: to host $(field "$tmp/$name" d2h_GBps)" \
	     "GB/s, from host $(field "$tmp/$name" h2d_GBps) GB/s (sums)"
}

nvidia-smi -L 2>/dev/null | head -1
for b in "${block_counts[@]}"; do
	run_set "sm-$b-one" 1 "$secs" "$b" 512 "$ring"
	run_set "sm-$b-two" 2 "$secs" "$b" 512 "$ring"
done
run_set ce-one 1 --ce "$secs" 1 512 "$ring"
run_set ce-two 2 --ce "$secs" 1 512 "$ring"
