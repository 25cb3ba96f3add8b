#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The small-message bar of tests/gpu: all-reduce time through Mesh against
# NCCL's Socket at each size, as medians of several run.sh runs (single
# runs of small sizes scatter by a third on a shared host).  Prints every
# run's time per size and transport, then per size the medians and their
# ratio Mesh / Socket, marking sizes where Mesh is slower.  Exits 1 if a
# run failed its checks (allreduce.py checks every result and the network
# NCCL used).
#
# Usage: tests/gpu/by-size.sh [BUILD_DIR] [--runs N] [--sizes LIST] [--iters N]
#
# Defaults: 3 runs, sizes 8,64,512,4K,16K,64K,256K,1M, 100 calls a size.
# With one GPU, start CUDA MPS first (tests/gpu/README.md).

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
build=build
runs=3
sizes=8,64,512,4K,16K,64K,256K,1M
iters=100

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:?}; shift ;;
	--sizes) sizes=${2:?}; shift ;;
	--iters) iters=${2:?}; shift ;;
	-h|--help) sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) echo "by-size.sh: unknown option $1" >&2; exit 2 ;;
	*) build=$1 ;;
	esac
	shift
done

out=$(mktemp -d -t nccl-mesh-by-size.XXXXXX) || exit 2
failed=0
for r in $(seq "$runs"); do
	if "$here/run.sh" "$build" --sizes "$sizes" --iters "$iters" \
		--out "$out/run$r" >"$out/run$r.log" 2>&1; then
		echo "run $r: passed"
	else
		echo "run $r: FAILED ($(tail -n 1 "$out/run$r.log"))"
		failed=1
	fi
done

"$python" - "$here" "$out" "$runs" <<'PY'
import os, statistics, sys

sys.path.insert(0, sys.argv[1])
from allreduce import read_results

out, runs = sys.argv[2], int(sys.argv[3])
times = {}
for r in range(1, runs + 1):
    for net in ("mesh", "socket"):
        path = os.path.join(out, "run%d" % r, net + ".jsonl")
        if not os.path.exists(path):
            continue
        for size, rec in read_results(path)[0].items():
            if rec.get("ok"):
                times.setdefault(size, {}).setdefault(net, []).append(
                    rec["time_us"])

print("%10s  %-28s %-28s %s" % ("size", "Mesh us (runs)", "Socket us (runs)",
                                "median Mesh / Socket"))
for size in sorted(times):
    m, s = times[size].get("mesh", []), times[size].get("socket", [])
    if not m or not s:
        print("%10d  incomplete" % size)
        continue
    ratio = statistics.median(m) / statistics.median(s)
    print("%10d  %-28s %-28s %.2f%s" % (
        size, " ".join("%.1f" % t for t in m), " ".join("%.1f" % t for t in s),
        ratio, "  (Mesh slower)" if ratio > 1 else ""))
PY
echo "results and logs: $out"
exit $failed
