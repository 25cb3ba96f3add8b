#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The small-message bar of tests/gpu without PyTorch in the way: all-reduce
# (or send/receive) time by size through Mesh and through NCCL's Socket,
# each rank a C program (tests/gpu/nccl_latency.c, built here with nvcc
# against the NCCL that PyTorch loads) that queues ITERS calls on one
# stream and times them as a whole.  Each run starts Socket and each Mesh variant
# in turn, rotating which goes first.  Prints per size and transport the
# median, its ratio to Socket's, in how many runs it was faster than
# Socket, and every run's time.  Exits 1 if a result was not exact or a
# rank did not use the network it was given.
#
# Usage: tests/gpu/latency.sh [BUILD_DIR] [--runs N] [--sizes LIST] [--iters N]
#                             [--ranks N] [--op allreduce|sendrecv] [--out DIR] [VARIANT...]
#
# VARIANT: NAME or NAME:VAR=VALUE,VAR=VALUE, a Mesh run with those
# settings (default: one, "mesh", as configured); a comma not followed
# by VAR= belongs to the value, so a list passes whole.
# Defaults: 5 runs, sizes 8,64,512,4K,16K,64K,256K,1M, 1000 calls a size
# (after 100 not timed), 2 ranks, all-reduce.  Every rank is its own
# "host" (NCCL_HOSTID), so all traffic between ranks takes the network;
# sendrecv sends to the next rank and receives from the one before, as
# nccl-tests' sendrecv does.  NCCL_HOME, if set, holds include/nccl.h and
# lib/libnccl.so.2; otherwise PyTorch's NCCL package is used.  NCCL's
# logs (INIT and NET, and whatever NCCL_DEBUG_SUBSYS adds) and the results
# go to DIR, else to a fresh temporary folder.  Settings in the environment
# (NCCL_PROTO, NCCL_ALGO, ...) apply to both transports.  With one GPU,
# start CUDA MPS first (tests/gpu/README.md).

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
build=build
runs=5
sizes=8,64,512,4K,16K,64K,256K,1M
iters=1000
ranks=2
op=allreduce
out=
variants=()

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:?}; shift ;;
	--sizes) sizes=${2:?}; shift ;;
	--iters) iters=${2:?}; shift ;;
	--ranks) ranks=${2:?}; shift ;;
	--op) op=${2:?}; shift ;;
	--out) out=${2:?}; shift ;;
	-h|--help) sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) echo "latency.sh: unknown option $1" >&2; exit 2 ;;
	*)
		if [ "$build" = build ] && [ ${#variants[@]} -eq 0 ] && [ -d "$1" ]; then
			build=$1
		else
			variants+=("$1")
		fi ;;
	esac
	shift
done

die() { echo "latency.sh: $*" >&2; exit 2; }

{ [[ $ranks =~ ^[0-9]+$ ]] && [ "$ranks" -ge 2 ]; } || die "--ranks takes 2 or more"
case $op in allreduce|sendrecv) ;; *) die "--op is allreduce or sendrecv" ;; esac
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"
gpu_build latency.sh "$build" || exit 2
# allreduce.py's size list: K/M/G, positive multiples of 4, sorted
bytes=$("$python" -c 'import sys; sys.path.insert(0, sys.argv[1])
from allreduce import parse_sizes
print(",".join(map(str, parse_sizes(sys.argv[2]))))' "$here" "$sizes") ||
	die "bad --sizes $sizes"

[ ${#variants[@]} -gt 0 ] || variants=(mesh)
# shellcheck source=tests/bench/lib.sh
. "$here/../bench/lib.sh"
gpu_latency_setup "$build" latency || exit 2


# run_net DIR NAME NET VAR=VALUE...: all ranks, each its own NCCL_HOSTID;
# rank 0's lines in DIR/NAME.jsonl; checks each used NET.
run_net() {
	local dir=$1 name=$2 net=$3 pids=() rc=0 r
	shift 3
	mkdir -p "$dir"
	for r in $(seq 0 $((ranks - 1))); do
		env "$@" NCCL_HOSTID="mesh-host-$r" NCCL_DEBUG=INFO \
			NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:+$NCCL_DEBUG_SUBSYS,}INIT,NET" \
			NCCL_DEBUG_FILE="$dir/$name-rank$r.log" \
			timeout -k 10 300 "$out/nccl_latency" "$r" "$ranks" \
			"$dir/$name.id" "$bytes" "$iters" 100 "$op" \
			>"$dir/$name-rank$r.out" 2>&1 &
		pids+=($!)
	done
	for r in "${pids[@]}"; do wait "$r" || rc=1; done
	cp "$dir/$name-rank0.out" "$dir/$name.jsonl"
	for r in $(seq 0 $((ranks - 1))); do
		grep -q "Using network $net" "$dir/$name-rank$r.log" || {
			echo "rank $r of $name: no 'Using network $net' in its log"
			rc=1
		}
	done
	return $rc
}

nets=(socket "${variants[@]}")
failed=0
echo "$op, $ranks ranks, $iters calls a size"
for r in $(seq "$runs"); do
	for i in "${!nets[@]}"; do
		v=${nets[$(((i + r - 1) % ${#nets[@]}))]}
		if [ "$v" = socket ]; then
			run_net "$out/run$r" socket Socket "${gpu_socket_env[@]}"
		else
			bench_variant "$v"
			run_net "$out/run$r" "$name" Mesh "${gpu_mesh_env[@]}" \
				${env_list[@]+"${env_list[@]}"}
		fi || { echo "run $r, $v: FAILED (see $out/run$r)"; failed=1; }
	done
	echo "run $r: done"
done

names=()
for v in "${nets[@]}"; do bench_variant "$v"; names+=("$name"); done
"$python" - "$out" "$runs" "${names[@]}" <<'PY' || failed=1
import json, os, statistics, sys

out, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times, wrong = {}, 0
for r in range(1, runs + 1):
    for name in names:
        path = os.path.join(out, "run%d" % r, name + ".jsonl")
        for line in open(path) if os.path.exists(path) else []:
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if not rec["exact"]:
                wrong += 1
                continue
            times.setdefault(rec["bytes"], {}).setdefault(name, []).append(
                rec["us"])
print("%9s  %-12s %8s %9s %12s  %s" % (
    "bytes", "transport", "us", "/ Socket", "faster than", "runs"))
for size in sorted(times):
    ref = times[size].get("socket", [])
    for name in names:
        t = times[size].get(name, [])
        if not t or not ref:
            print("%9d  %-12s incomplete" % (size, name))
            continue
        med, ref_med = statistics.median(t), statistics.median(ref)
        faster = "" if name == "socket" else "%d of %d" % (
            sum(a < b for a, b in zip(t, ref)), min(len(t), len(ref)))
        print("%9d  %-12s %8.1f %9.2f %12s  %s" % (
            size, name, med, med / ref_med, faster,
            " ".join("%.1f" % x for x in t)))
if wrong:
    print("%d results NOT exact" % wrong)
sys.exit(1 if wrong else 0)
PY
echo "results and logs: $out"
exit $failed
