#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Runs the conformance suite (nccl-conform) against one NCCL net plugin:
# each test as its own pair of processes, rank 0 and rank 1, so one
# failure never hides the next test.  Prints a PASS/FAIL/SKIP line per
# test (with both ranks' output after a FAIL), then "N passed, N failed,
# N skipped"; exits 1 on any failure, 77 when every test skipped.
#
# usage: tests/conformance/run.sh --driver NCCL_CONFORM --plugin PLUGIN
#          [--conf FILE] [--module-path DIR] [--env VAR=VALUE]...
#          [--rank0-prefix 'WORDS'] [--rank1-prefix 'WORDS']
#          [--oob HOST:PORT] [--test A,B] [--loops N] [--limit S]
#          [--log-dir DIR] [-- NCCL_CONFORM_OPTIONS...]
#
#   --conf FILE        NCCL_MESH_CONF for both ranks (the mesh plugin)
#   --module-path DIR  NCCL_MESH_MODULE_PATH for both ranks
#   --env VAR=VALUE    more environment for both ranks
#   --rankN-prefix     words put before rank N's command, e.g.
#                      'ip netns exec rxn2 env NCCL_MESH_HOSTNAME=rxn2'
#   --oob HOST:PORT    where rank 0 listens and rank 1 dials for the
#                      bootstrap (default 127.0.0.1 and a free port)
#   --test A,B         these tests only (default: all, see nccl-conform --list)
#   --loops N          loops of each test (default 10)
#   --limit S          outer bound on one test's pair (default 1800 s);
#                      nccl-conform's own watchdog normally fires first
#   --log-dir DIR      keep each pair's output there (default: a temp dir)
#   after --           passed to both ranks (--late-ms, --dead-ms, -v ...)
set -uo pipefail

driver='' plugin='' oob='' tests='' loops=10 limit=1800 logdir=''
prefix0=() prefix1=() envs=() extra=()

die() {
	echo "run.sh: $*" >&2
	exit 2
}

while [ $# -gt 0 ]; do
	case $1 in
	--driver) driver=$2; shift 2 ;;
	--plugin) plugin=$2; shift 2 ;;
	--conf) envs+=("NCCL_MESH_CONF=$2"); shift 2 ;;
	--module-path) envs+=("NCCL_MESH_MODULE_PATH=$2"); shift 2 ;;
	--env) envs+=("$2"); shift 2 ;;
	--rank0-prefix) read -r -a prefix0 <<<"$2"; shift 2 ;;
	--rank1-prefix) read -r -a prefix1 <<<"$2"; shift 2 ;;
	--oob) oob=$2; shift 2 ;;
	--test) tests=$2; shift 2 ;;
	--loops) loops=$2; shift 2 ;;
	--limit) limit=$2; shift 2 ;;
	--log-dir) logdir=$2; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	*) die "unknown option $1 (see the comment at the top)" ;;
	esac
done
[ -x "$driver" ] || die "--driver: '$driver' is not an executable"
[ -n "$plugin" ] || die "--plugin is required"

if [ -z "$logdir" ]; then
	logdir=$(mktemp -d /tmp/nccl-conform.XXXXXX) || die "mktemp failed"
	trap 'rm -rf "$logdir"' EXIT
fi
mkdir -p "$logdir" || die "cannot create $logdir"

if [ -z "$tests" ]; then
	tests=$("$driver" --list | awk '{print $1}' | paste -sd, -)
fi

pids=()
# shellcheck disable=SC2317 # called by the trap
cleanup() {
	local pid

	for pid in "${pids[@]}"; do
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	pids=()
}
trap 'cleanup; exit 130' INT TERM

# wait_pid PID DEADLINE: its status, or 124 after killing it at DEADLINE.
wait_pid() {
	local pid=$1 deadline=$2 rc=0

	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			kill -KILL "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			return 124
		fi
		sleep 0.1
	done
	wait "$pid" || rc=$?
	return "$rc"
}

# run_pair TEST: one pair of processes; sets rc0, rc1.
run_pair() {
	local t=$1 host port portfile=$logdir/$1.port deadline common

	host=${oob%:*}
	port=${oob##*:}
	[ -n "$oob" ] || { host=127.0.0.1; port=0; }
	rm -f "$portfile"
	common=(--test "$t" --loops "$loops" "${extra[@]}")
	"${prefix0[@]}" env "${envs[@]}" "$driver" --rank 0 \
		--oob "$host:$port" --port-file "$portfile" "${common[@]}" \
		--plugin "$plugin" >"$logdir/$t.rank0" 2>&1 &
	pids=($!)
	deadline=$((SECONDS + 30))
	while [ ! -s "$portfile" ] && kill -0 "${pids[0]}" 2>/dev/null &&
	      [ "$SECONDS" -lt "$deadline" ]; do
		sleep 0.05
	done
	[ "$port" = 0 ] && port=$(cat "$portfile" 2>/dev/null)
	"${prefix1[@]}" env "${envs[@]}" "$driver" --rank 1 \
		--oob "$host:${port:-0}" "${common[@]}" \
		--plugin "$plugin" >"$logdir/$t.rank1" 2>&1 &
	pids+=($!)
	deadline=$((SECONDS + limit))
	rc0=0 rc1=0
	wait_pid "${pids[0]}" "$deadline" || rc0=$?
	wait_pid "${pids[1]}" "$deadline" || rc1=$?
	pids=()
}

passed=0 failed=0 skipped=0
IFS=, read -r -a list <<<"$tests"
for t in "${list[@]}"; do
	start=$SECONDS
	run_pair "$t"
	if [ "$rc0" = 0 ] && [ "$rc1" = 0 ]; then
		grep -h '^PASS' "$logdir/$t.rank0"
		passed=$((passed + 1))
	elif [ "$rc0" = 77 ] && [ "$rc1" = 77 ]; then
		grep -h '^SKIP' "$logdir/$t.rank0"
		skipped=$((skipped + 1))
	else
		echo "FAIL $t (rank 0 exit $rc0, rank 1 exit $rc1, $((SECONDS - start)) s)"
		if [ "$rc0" = 124 ] || [ "$rc1" = 124 ]; then
			echo "  (killed after --limit $limit s)"
		fi
		for r in 0 1; do
			sed "s/^/  rank$r| /" "$logdir/$t.rank$r" | tail -n 60
		done
		failed=$((failed + 1))
	fi
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] || exit 1
[ "$passed" -eq 0 ] && [ "$skipped" -gt 0 ] && exit 77
exit 0
