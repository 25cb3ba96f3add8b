#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The plugin's profiler events under real NCCL, in one go (under 100 s on
# an H200 host): two ranks on this host (NCCL_HOSTID each, sharing the GPU
# under CUDA MPS), NCCL_NET=Mesh over tcp-xdc on loopback, NCCL loading
# the test profiler (libnccl-profiler-meshprof.so, built with the tree).
#
#   1. events: every network operation NCCL ran (its ProxyStep events)
#      has the plugin's events, whose bytes add up to what NCCL sent and
#      received (check.py on each rank's file);
#   2. the bar: all-reduce bandwidth (64 MiB) and 8-byte latency with the
#      events on against off, alternating block by block in the same job,
#      medians of the rounds; then the same blocks in a job without any
#      profiler, for reference.
#
# Usage: tests/gpu/profiler/run.sh [BUILD_DIR] [--out DIR] [--rounds N]
#                                  [--no-mps]
# Exit status 0 when the events check passed (the bar is reported, not
# judged by the status), 1 when it failed, 2 when something is missing.

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
python=${PYTHON:-python3}
t_start=$(date +%s)

build=build
out=
rounds=8
use_mps=1
while [ $# -gt 0 ]; do
	case $1 in
	--out) out=${2:?--out needs a value}; shift ;;
	--rounds) rounds=${2:?--rounds needs a value}; shift ;;
	--no-mps) use_mps=0 ;;
	-h|--help) sed -n '3,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
	*) build=$1 ;;
	esac
	shift
done

cd "$repo" || exit 2
# shellcheck source=tests/gpu/lib.sh
. "$repo/tests/gpu/lib.sh"
gpu_build profiler/run.sh "$build" || exit 2
profiler=$build/tests/gpu/profiler/libnccl-profiler-meshprof.so
[ -f "$profiler" ] || { echo "run.sh: no $profiler" >&2; exit 2; }
gpu_libs "$build" "$plugin" "$build/modules/tcp-xdc/mesh-tcp-xdc.so" \
	"$profiler" || exit 2
gpu_nccl_env
gpu_net_envs "$build"
if [ -z "$out" ]; then
	out=$(mktemp -d -t nccl-mesh-prof.XXXXXX) || exit 2
fi
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
echo "results and logs: $out"

# ---- CUDA MPS: both ranks on one GPU side by side, not taking turns ----
mps_ours=0
mps_note="off"
stop_mps() {
	[ $mps_ours -eq 1 ] || return 0
	mps_ours=0
	echo quit | nvidia-cuda-mps-control
	sleep 1
	rm -rf "$CUDA_MPS_PIPE_DIRECTORY"
}
trap stop_mps EXIT
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ $use_mps -eq 1 ] && [ "$ngpu" -lt 2 ] &&
   command -v nvidia-cuda-mps-control >/dev/null; then
	CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/nccl-mesh-mps.XXXXXX) || exit 2
	export CUDA_MPS_PIPE_DIRECTORY
	export CUDA_MPS_LOG_DIRECTORY=$out/mps-log
	mkdir -p "$CUDA_MPS_LOG_DIRECTORY"
	if nvidia-cuda-mps-control -d; then
		mps_ours=1
		mps_note="on (started here)"
		if ! timeout 20 "$python" -c 'import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()' 2>"$out/mps-probe.err"; then
			echo "run.sh: warning: CUDA fails under MPS; going on without it" >&2
			stop_mps
			unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
			mps_note="off (CUDA failed under it)"
		fi
	else
		unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
		mps_note="off (nvidia-cuda-mps-control -d failed)"
	fi
fi
echo "GPUs: $ngpu, MPS: $mps_note"

failures=0

# ---- 1 and 2: events checked, events on against off in one job ----
echo "==== events on and off, alternating ($rounds rounds)"
env "${gpu_mesh_env[@]}" timeout -k 5 60 "$python" "$here/prof_ranks.py" \
	--profiler "$profiler" --out "$out" --name toggle --rounds "$rounds" \
	--timeout 50 2>&1 | tee "$out/toggle.log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	echo "==== toggle run: FAILED (exit $rc)"
	failures=$((failures + 1))
fi

echo "==== events check"
if ls "$out"/rank*.events >/dev/null 2>&1; then
	"$python" "$here/check.py" --json "$out/check.jsonl" "$out"/rank*.events |
		tee "$out/check.txt"
	[ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))
else
	echo "no event files"
	failures=$((failures + 1))
fi

# ---- the same blocks without a profiler, while time is left ----
if [ $(( $(date +%s) - t_start )) -lt 55 ]; then
	echo "==== no profiler at all (reference)"
	env "${gpu_mesh_env[@]}" timeout -k 5 30 "$python" "$here/prof_ranks.py" \
		--absent --out "$out" --name absent --rounds 4 --timeout 25 \
		2>&1 | tee "$out/absent.log"
else
	echo "==== no time left for the run without a profiler"
fi

echo "==== the bar: events on against off"
"$python" "$here/prof_ranks.py" --summary "$out/toggle.jsonl" \
	"$out/absent.jsonl" "$out/check.jsonl" | tee "$out/bar.txt"

echo "results and logs: $out ($(( $(date +%s) - t_start )) s)"
if [ $failures -ne 0 ]; then
	echo "RESULT: FAIL ($failures failed step(s))"
	exit 1
fi
echo "RESULT: PASS"
