#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Real NCCL all-reduce between two ranks on this host: once through the
# nccl-mesh plugin (NCCL_NET=Mesh), once through NCCL's own Socket transport,
# then a side-by-side table.  Exits non-zero if any run failed its checks.
#
# Usage: tests/gpu/run.sh [BUILD_DIR] [--sizes LIST] [--iters N] [--gpus N]
#                         [--socket-sweep] [--sweep-sizes LIST]
#                         [--timeout S] [--out DIR] [--debug] [--encrypt]

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${PYTHON:-python3}

usage() {
	sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
	cat <<'EOF'
  BUILD_DIR       meson build directory (default: build)
  --sizes LIST    all-reduce sizes, e.g. 1M,16M,256M (default: 1M..256M)
  --iters N       timed calls per size (default: 20, 5 from 64 MiB)
  --gpus N        GPUs to use, rank r on cuda:(r % N) (default: all visible;
                  with one GPU both ranks share it)
  --socket-sweep  also run Socket with NCCL_SOCKET_NTHREADS x
                  NCCL_NSOCKS_PERTHREAD in {1,2,4,8}^2 (product <= 64)
  --sweep-sizes   sizes for the sweep (default: 64M,256M)
  --timeout S     limit for each run in seconds (default: 300)
  --out DIR       where results and NCCL logs go (default: a new temp dir)
  --debug         full NCCL INFO logs, printed after each run
  --encrypt       the Mesh run with tcp-xdc's encrypt = true, under a fresh
                  key in DIR; fails unless every tcp-xdc connection NCCL
                  made says it is encrypted
EOF
}

die() {
	echo "run.sh: $*" >&2
	exit 2
}

build=build
sizes=
iters=
gpus=
sweep=0
sweep_sizes=64M,256M
timeout_s=300
out=
debug=0
encrypt=0
positional=0

while [ $# -gt 0 ]; do
	case $1 in
	--sizes) sizes=${2:?--sizes needs a value}; shift ;;
	--iters) iters=${2:?--iters needs a value}; shift ;;
	--gpus) gpus=${2:?--gpus needs a value}; shift ;;
	--socket-sweep) sweep=1 ;;
	--sweep-sizes) sweep_sizes=${2:?--sweep-sizes needs a value}; shift ;;
	--timeout) timeout_s=${2:?--timeout needs a value}; shift ;;
	--out) out=${2:?--out needs a value}; shift ;;
	--debug) debug=1 ;;
	--encrypt) encrypt=1 ;;
	-h|--help) usage; exit 0 ;;
	-*) usage >&2; die "unknown option $1" ;;
	*)
		[ $positional -eq 0 ] || die "only one BUILD_DIR may be given"
		build=$1
		positional=1
		;;
	esac
	shift
done

case $timeout_s in
''|*[!0-9]*) die "--timeout must be a number of seconds" ;;
esac

cd "$repo" || die "cannot enter the repository"
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"
gpu_build run.sh "$build" || exit 2
module_dir=$build/modules/tcp-xdc
conf=$here/gpu.conf

[ -f "$conf" ] || die "missing $conf"
if ! ls "$module_dir"/mesh-tcp-xdc*.so >/dev/null 2>&1; then
	echo "run.sh: warning: no mesh-tcp-xdc module in $module_dir;" \
	     "the Mesh run will fail" >&2
fi
command -v "$python" >/dev/null || die "$python not found"
gpu_libs "$build" "$plugin" || exit 2

if [ -z "$out" ]; then
	out=$(mktemp -d -t nccl-mesh-gpu.XXXXXX) || die "mktemp failed"
fi
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)

common_args=(--timeout "$timeout_s")
[ -n "$iters" ] && common_args+=(--iters "$iters")
[ -n "$gpus" ] && common_args+=(--gpus "$gpus")
[ $debug -eq 1 ] && common_args+=(--debug)

gpu_nccl_env
gpu_net_envs "$build"

failures=0

# run_one NAME SIZES [VAR=VALUE ...]: one launcher run in its own
# environment; results in $out/NAME.jsonl, console in $out/NAME.log.
run_one() {
	local name=$1 run_sizes=$2
	shift 2
	local size_args=()
	[ -n "$run_sizes" ] && size_args=(--sizes "$run_sizes")

	echo
	echo "==== $name: $*"
	env "$@" timeout -k 10 $((timeout_s + 30)) \
		"$python" "$here/allreduce.py" "${common_args[@]}" \
		${size_args[@]+"${size_args[@]}"} --out "$out/$name.jsonl" \
		--log-dir "$out/logs-$name" 2>&1 | tee "$out/$name.log"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ]; then
		echo "==== $name: FAILED (exit $rc)"
		failures=$((failures + 1))
	else
		echo "==== $name: passed"
	fi
}

echo "results and logs: $out"
echo "build: $build"

mesh_env=()
if [ $encrypt -eq 1 ]; then
	(umask 077 && "$python" -c 'import secrets; print(secrets.token_hex(32))' \
		>"$out/mesh.key") || die "cannot write $out/mesh.key"
	mesh_env=(NCCL_MESH_AUTH_KEY_FILE="$out/mesh.key"
		  NCCL_MESH_TCP_XDC_ENCRYPT=true)
fi

run_one mesh "$sizes" "${gpu_mesh_env[@]}" ${mesh_env[@]+"${mesh_env[@]}"}

# Every tcp-xdc connection logs one INFO line that ends in how it is sealed.
if [ $encrypt -eq 1 ]; then
	lines=$(grep -h "streams on .* data threads" "$out"/logs-mesh/*.log 2>/dev/null)
	conns=$(grep -c . <<<"$lines")
	sealed=$(grep -c "encrypted (AES-256-GCM" <<<"$lines")
	echo "==== encryption: $sealed of $conns tcp-xdc connections encrypted"
	if [ "$conns" -eq 0 ] || [ "$sealed" -ne "$conns" ]; then
		echo "==== encryption: FAILED"
		failures=$((failures + 1))
	fi
fi

run_one socket "$sizes" "${gpu_socket_env[@]}"

sweep_files=()
if [ $sweep -eq 1 ]; then
	for nthreads in 1 2 4 8; do
		for nsocks in 1 2 4 8; do
			# NCCL refuses more than 64 sockets per connection.
			[ $((nthreads * nsocks)) -le 64 ] || continue
			name=socket-t$nthreads-s$nsocks
			run_one "$name" "$sweep_sizes" "${gpu_socket_env[@]}" \
				NCCL_SOCKET_NTHREADS=$nthreads \
				NCCL_NSOCKS_PERTHREAD=$nsocks
			sweep_files+=("$out/$name.jsonl")
		done
	done
fi

echo
echo "==== summary"
compare_args=(--compare "$out/mesh.jsonl" "$out/socket.jsonl")
[ ${#sweep_files[@]} -gt 0 ] && compare_args+=(--sweep "${sweep_files[@]}")
"$python" "$here/allreduce.py" "${compare_args[@]}" | tee "$out/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || failures=$((failures + 1))

echo "results and logs: $out"
if [ $failures -ne 0 ]; then
	echo "RESULT: FAIL ($failures failed step(s))"
	exit 1
fi
echo "RESULT: PASS"
