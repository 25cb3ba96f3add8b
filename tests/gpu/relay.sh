#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Real NCCL through a relayed pair: three ranks on this host (one GPU is
# enough, shared through CUDA MPS), each its own NCCL_HOSTID and loopback
# address, the pair rank 0 <-> rank 2 routed through the relay in rank 1's
# process.  All-reduce with NCCL_ALGO=Ring and =Tree, and all-to-all, at
# several sizes, checked exactly; then NCCL's log and ours must show the
# relayed connections.  Exits non-zero on any failure, 77 without a GPU.
#
# Usage: tests/gpu/relay.sh BUILD_DIR [--sizes LIST] [--out DIR]
#                           [--iters N] [--timeout S] [--algos LIST]
#                           [--no-mps] [--check-only]

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}

usage() {
	sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
	cat <<'EOF'
  BUILD_DIR       meson build directory (required)
  --sizes LIST    sizes, e.g. 1K,1M,64M (default: 1K,100K,1M,10M,64M);
                  all-to-all sends this much to every rank
  --out DIR       where results and logs go (default: a new temp dir)
  --iters N       checked calls per size and collective (default: 5)
  --timeout S     limit for each run in seconds (default: 240)
  --algos LIST    NCCL_ALGO values for the all-reduce runs (default:
                  Ring,Tree); each run also does the all-to-all
  --no-mps        do not start CUDA MPS (the ranks take turns on a GPU)
  --check-only    only check the three ranks' configs with meshinfo
                  (no GPU needed)
EOF
}

die() {
	echo "relay.sh: $*" >&2
	exit 2
}

build=
sizes=
out=
iters=
timeout_s=240
algos=Ring,Tree
use_mps=1
check_only=0

while [ $# -gt 0 ]; do
	case $1 in
	--sizes) sizes=${2:?--sizes needs a value}; shift ;;
	--out) out=${2:?--out needs a value}; shift ;;
	--iters) iters=${2:?--iters needs a value}; shift ;;
	--timeout) timeout_s=${2:?--timeout needs a value}; shift ;;
	--algos) algos=${2:?--algos needs a value}; shift ;;
	--no-mps) use_mps=0 ;;
	--check-only) check_only=1 ;;
	-h|--help) usage; exit 0 ;;
	-*) usage >&2; die "unknown option $1" ;;
	*)
		[ -z "$build" ] || die "only one BUILD_DIR may be given"
		build=$1
		;;
	esac
	shift
done

[ -n "$build" ] || { usage >&2; die "BUILD_DIR is required"; }
case $timeout_s in
''|*[!0-9]*) die "--timeout must be a number of seconds" ;;
esac

cd "$repo" || die "cannot enter the repository"
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"
gpu_build relay.sh "$build" || exit 2
meshinfo=$build/tools/meshinfo/meshinfo
conf=$here/relay.conf
for f in "$build/modules/tcp-xdc/mesh-tcp-xdc.so" \
	 "$build/modules/relay/mesh-relay.so" "$meshinfo"; do
	[ -e "$f" ] || die "not built: $f (run ninja -C $build)"
done
command -v "$python" >/dev/null || die "$python not found"
gpu_libs "$build" "$plugin" "$build/modules/relay/mesh-relay.so" \
	"$meshinfo" || exit 2

if [ -z "$out" ]; then
	out=$(mktemp -d -t nccl-mesh-relay.XXXXXX) || die "mktemp failed"
fi
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

export NCCL_NET_PLUGIN=$plugin
export NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc:$build/modules/relay
gpu_nccl_env
unset NCCL_ALGO NCCL_PROTO

py_args=(--conf "$conf" --meshinfo "$meshinfo" --timeout "$timeout_s")
[ -n "$sizes" ] && py_args+=(--sizes "$sizes")
[ -n "$iters" ] && py_args+=(--iters "$iters")

echo "results and logs: $out"
echo "build: $build"

echo "==== configs of the three ranks (meshinfo)"
"$python" "$here/relay.py" "${py_args[@]}" --check-only \
	--log-dir "$out/meshinfo" 2>&1 | tee "$out/meshinfo.log"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
	echo "RESULT: FAIL (a rank's config does not check)"
	exit 1
fi
[ $check_only -eq 1 ] && { echo "RESULT: PASS (configs only)"; exit 0; }

# ---- CUDA MPS: the three ranks share one GPU side by side ----
mps_note="off (--no-mps)"
mps_ours=0
mps_pipe=

mps_running() {
	echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1
}

stop_mps() {
	[ $mps_ours -eq 1 ] || return 0
	mps_ours=0
	echo quit | nvidia-cuda-mps-control
	for _ in $(seq 100); do
		mps_running || break
		sleep 0.1
	done
	if mps_running; then
		echo "relay.sh: warning: MPS did not stop ($mps_pipe)" >&2
	else
		rm -rf "$mps_pipe"
	fi
}
trap stop_mps EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

gpu_probe() {
	"$python" -c 'import torch, sys
if not torch.cuda.is_available():
    sys.exit("CUDA is not available to PyTorch")
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
print("%s, %d visible" % (torch.cuda.get_device_name(0),
                          torch.cuda.device_count()))' 2>&1 | tail -n 3
}

if [ $use_mps -eq 1 ]; then
	if ! command -v nvidia-cuda-mps-control >/dev/null; then
		mps_note="off (nvidia-cuda-mps-control not found)"
	elif mps_running; then
		# someone else's daemon: use it, and leave it running
		mps_note="on (a daemon already running, left as is)"
	else
		# a pipe directory of our own: neither we nor whoever else
		# uses MPS here can end the other's daemon
		mps_pipe=$(mktemp -d /tmp/nccl-mesh-mps.XXXXXX) ||
			die "mktemp failed"
		export CUDA_MPS_PIPE_DIRECTORY=$mps_pipe
		export CUDA_MPS_LOG_DIRECTORY=$out/mps-log
		mkdir -p "$CUDA_MPS_LOG_DIRECTORY"
		if nvidia-cuda-mps-control -d; then
			mps_ours=1
			mps_note="on (started here, log in $CUDA_MPS_LOG_DIRECTORY)"
		else
			mps_note="off (nvidia-cuda-mps-control -d failed)"
			unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
		fi
	fi
fi

echo "==== GPU check (MPS $mps_note)"
probe=$(gpu_probe)
probe_rc=$?
if [ $probe_rc -ne 0 ] && [ $mps_ours -eq 1 ]; then
	echo "$probe"
	echo "relay.sh: warning: CUDA fails under MPS; going on without it" \
	     "(the ranks take turns on the GPU)" >&2
	stop_mps
	unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
	mps_note="off (CUDA failed under MPS: ${probe##*$'\n'})"
	probe=$(gpu_probe)
	probe_rc=$?
fi
if [ $probe_rc -ne 0 ]; then
	echo "$probe"
	echo "SKIP: no usable GPU"
	exit 77
fi
echo "GPU: $probe"

failures=0
results=()
IFS=, read -r -a algo_list <<<"$algos"
for algo in "${algo_list[@]}"; do
	name=$(echo "$algo" | tr '[:upper:]' '[:lower:]')
	echo
	echo "==== NCCL_ALGO=$algo: all-reduce and all-to-all, pair 0 <-> 2 relayed"
	timeout -k 10 $((timeout_s + 60)) "$python" "$here/relay.py" \
		"${py_args[@]}" --algo "$algo" --out "$out/$name.jsonl" \
		--log-dir "$out/logs-$name" 2>&1 | tee "$out/$name.log"
	rc=${PIPESTATUS[0]}
	results+=("$out/$name.jsonl")
	if [ "$rc" -ne 0 ]; then
		echo "==== NCCL_ALGO=$algo: FAILED (exit $rc)"
		failures=$((failures + 1))
	else
		echo "==== NCCL_ALGO=$algo: passed"
	fi
done

stop_mps
if [ -n "${CUDA_MPS_LOG_DIRECTORY:-}" ] &&
   [ -f "$CUDA_MPS_LOG_DIRECTORY/control.log" ]; then
	# the GPU check and every rank: 1 + 3 per run when all went through
	clients=$(grep -o 'NEW CLIENT [0-9]*' \
		"$CUDA_MPS_LOG_DIRECTORY/control.log" | sort -u | wc -l)
	mps_note="$mps_note; $clients client processes connected"
fi

echo
echo "==== summary"
"$python" "$here/relay.py" --summary "${results[@]}" | tee "$out/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))
echo "MPS: $mps_note" | tee -a "$out/summary.txt"
echo "results and logs: $out"
if [ $failures -ne 0 ]; then
	echo "RESULT: FAIL ($failures failed step(s))"
	exit 1
fi
echo "RESULT: PASS"
