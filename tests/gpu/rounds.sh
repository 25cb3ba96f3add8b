#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The large-message bar of tests/gpu, in rounds: Socket and one or more
# Mesh variants alternate, each round one run of each at SIZE, so that the
# host's drift between runs hits every variant alike.  Prints each run's
# busbw and the most cores the host kept busy over a second of it, then per
# variant the median busbw and the median of its per-round ratios to
# Socket.  Exits 1 if any run failed (allreduce.py checks every result and
# that NCCL used the network asked for).
#
# With --raw-tcp STREAMS, each round also measures raw loopback TCP, both
# directions at once with STREAMS connections each way (tests/bench's
# tcp_stream, built with the project), and every variant's twice busbw
# (two ranks: each byte of busbw crosses loopback once each way) as a
# share of it: how close the run comes to what the host's loopback carries.
# --raw-ring R1,R2,... measures it once for each ring size, the memory each
# of tcp_stream's threads steps through in 512 KiB buffers (default 512K:
# one buffer, hot in the caches; NCCL's host buffers, 4 MiB per channel and
# direction on each rank, are not).
#
# With --host-memory-ref, each round also runs NCCL's SHM transport
# between the two ranks as one node (allreduce.py --net SHM): the GPUs
# write into and read from pinned host memory as they do under any network
# plugin without GPUDirect, with no network between.  Every variant's
# busbw is then also given as a share of it.  SHM runs with
# NCCL_MIN_NCHANNELS=16 (--host-memory-channels N; 0: NCCL's choice, 4
# channels on the host measured, which moved 18% less), so that the
# reference is what host memory carries, not what NCCL's default asks of it.
#
# Usage: tests/gpu/rounds.sh [BUILD_DIR] [--rounds N] [--size S] [--iters N]
#                            [--raw-tcp STREAMS [--raw-ring R,...]]
#                            [--host-memory-ref [--host-memory-channels N]]
#                            [VARIANT ...]
#
# A VARIANT is NAME or NAME:VAR=VALUE,VAR=VALUE (NCCL_MESH_* or NCCL_*
# settings for that Mesh run; a comma not followed by VAR= belongs to
# the value, so lists pass whole); without any, one Mesh variant at the
# defaults of tests/gpu/gpu.conf.  Example:
#   tests/gpu/rounds.sh build --rounds 3 default threads16:NCCL_MESH_TCP_XDC_THREADS=16

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}
build=build
rounds=3
size=256M
iters=20
raw_streams=0
raw_rings=512K
host_memory_ref=0
host_memory_channels=16
variants=()

while [ $# -gt 0 ]; do
	case $1 in
	--rounds) rounds=${2:?}; shift ;;
	--size) size=${2:?}; shift ;;
	--iters) iters=${2:?}; shift ;;
	--raw-tcp) raw_streams=${2:?}; shift ;;
	--raw-ring) raw_rings=${2:?}; shift ;;
	--host-memory-ref) host_memory_ref=1 ;;
	--host-memory-channels) host_memory_channels=${2:?}; shift ;;
	-h|--help) sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) echo "rounds.sh: unknown option $1" >&2; exit 2 ;;
	*)
		if [ -d "$1" ] && [ ${#variants[@]} -eq 0 ] && [ "$build" = build ]; then
			build=$1
		else
			variants+=("$1")
		fi
		;;
	esac
	shift
done
[ ${#variants[@]} -gt 0 ] || variants=(default)
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"
gpu_build rounds.sh "$build" || exit 2
raw_tool=$build/tests/bench/tcp_stream
if [ "$raw_streams" -gt 0 ] && [ ! -x "$raw_tool" ]; then
	echo "rounds.sh: no $raw_tool: build the project first" >&2
	exit 2
fi
out=$(mktemp -d -t nccl-mesh-rounds.XXXXXX) || exit 2

# shellcheck source=tests/bench/lib.sh
. "$repo/tests/bench/lib.sh"
gpu_libs "$build" "$plugin" || exit 2
gpu_nccl_env
gpu_net_envs "$build"

# sample_cpu FILE: appends "seconds busy-jiffies" of the host (all but
# idle and iowait) four times a second until killed.
sample_cpu() {
	while :; do
		awk -v t="$(date +%s.%N)" 'NR == 1 { b = 0
			for (i = 2; i <= NF; i++) if (i != 5 && i != 6) b += $i
			print t, b; exit }' /proc/stat >>"$1"
		sleep 0.25
	done
}

# peak_busy FILE: the most cores busy over any second of the samples.
peak_busy() {
	awk '{ t[NR] = $1; b[NR] = $2 } END { best = 0
		for (i = 1; i <= NR; i++) for (j = i + 1; j <= NR; j++)
			if (t[j] - t[i] >= 1) { c = (b[j] - b[i]) / 100 / (t[j] - t[i])
				if (c > best) best = c; break }
		printf "%.1f", best }' "$1"
}

# run_one NAME [VAR=VALUE ...]: busbw (GB/s) and busy cores of one run.
run_one() {
	local name=$1 file spid bw
	shift
	file=$out/$name.jsonl
	rm -f "$file" "$out/$name.cpu"
	sample_cpu "$out/$name.cpu" &
	spid=$!
	if ! env "$@" timeout -k 10 300 "$python" "$here/allreduce.py" \
		--sizes "$size" --iters "$iters" --out "$file" \
		--log-dir "$out/logs-$name" >"$out/$name.log" 2>&1; then
		kill "$spid"
		echo "$name FAILED: $(tail -n 3 "$out/$name.log")" >&2
		echo "failed" >>"$out/failures"
		echo "0 0"
		return
	fi
	kill "$spid"
	wait "$spid" 2>/dev/null
	bw=$("$python" -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "busbw_GBps" in d: print(d["busbw_GBps"])' "$file" | tail -1)
	echo "${bw:-0} $(peak_busy "$out/$name.cpu")"
}

IFS=, read -r -a rings <<<"$raw_rings"

# share BUSBW RAW...: twice BUSBW as a share of each RAW, comma-separated.
share() {
	local bw=$1 out="" r
	shift
	for r in "$@"; do
		out+=$(awk -v a="$bw" -v b="$r" 'BEGIN { printf "%.3f", (b > 0 ? 2 * a / b : 0) }'),
	done
	echo "${out%,}"
}

echo "rounds.sh: $rounds rounds at $size, $iters calls; $(nproc) cores; logs in $out"
for r in $(seq "$rounds"); do
	raws=()
	if [ "$raw_streams" -gt 0 ]; then
		for ring in "${rings[@]}"; do
			raw=$(bench_tcp_stream "$build" "$raw_streams" 5 512K "$ring")
			echo "round $r raw loopback TCP, $raw_streams streams each way, ring $ring: ${raw:=0} GB/s both ways"
			echo "raw-$ring $raw" >>"$out/all"
			raws+=("$raw")
		done
	fi
	read -r sbw scpu < <(run_one socket "${gpu_socket_env[@]}")
	echo "round $r socket busbw $sbw GB/s (peak busy cores $scpu)"
	echo "socket $sbw" >>"$out/all"
	hbw=0
	if [ "$host_memory_ref" = 1 ]; then
		hm_env=(NCCL_NET=SHM)
		[ "$host_memory_channels" = 0 ] ||
			hm_env+=(NCCL_MIN_NCHANNELS="$host_memory_channels")
		read -r hbw hcpu < <(run_one shm "${hm_env[@]}")
		echo "round $r host memory (NCCL SHM, one node, min channels $host_memory_channels) busbw $hbw GB/s (peak busy cores $hcpu)"
		echo "shm $hbw" >>"$out/all"
	fi
	for v in "${variants[@]}"; do
		bench_variant "$v"
		read -r bw cpu < <(run_one "$name" "${gpu_mesh_env[@]}" \
			${env_list[@]+"${env_list[@]}"})
		ratio=$(awk -v a="$bw" -v b="$sbw" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
		shares=$(share "$bw" ${raws[@]+"${raws[@]}"})
		echo "round $r $name busbw $bw GB/s (peak busy cores $cpu) ratio $ratio${shares:+ 2 x busbw / raw (ring $raw_rings) $shares}"
		echo "$name $bw $ratio ${shares//,/ }" >>"$out/all"
		if [ "$host_memory_ref" = 1 ]; then
			hshare=$(awk -v a="$bw" -v b="$hbw" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
			echo "round $r $name busbw / host memory $hshare"
			echo "$name-of-shm $hshare" >>"$out/all"
		fi
	done
done

echo "summary (medians of $rounds rounds):"
echo "socket busbw $(bench_median_of "$out/all" socket) GB/s"
if [ "$raw_streams" -gt 0 ]; then
	for ring in "${rings[@]}"; do
		echo "raw loopback TCP, ring $ring: $(bench_median_of "$out/all" "raw-$ring") GB/s both ways"
	done
fi
[ "$host_memory_ref" = 0 ] ||
	echo "host memory (NCCL SHM, one node) busbw $(bench_median_of "$out/all" shm) GB/s"
for v in "${variants[@]}"; do
	bench_variant "$v"
	shares=""
	if [ "$raw_streams" -gt 0 ]; then
		for i in "${!rings[@]}"; do
			shares+=$(bench_median_of "$out/all" "$name" $((4 + i))),
		done
	fi
	echo "$name busbw $(bench_median_of "$out/all" "$name") GB/s," \
	     "ratio to socket $(bench_median_of "$out/all" "$name" 3)${shares:+, 2 x busbw / raw (ring $raw_rings) ${shares%,}}"
	[ "$host_memory_ref" = 0 ] ||
		echo "$name busbw / host memory $(bench_median_of "$out/all" "$name-of-shm")"
done
if [ -s "$out/failures" ]; then
	echo "rounds.sh: $(wc -l <"$out/failures") run(s) failed; logs in $out" >&2
	exit 1
fi
