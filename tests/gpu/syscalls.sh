#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Where a small all-reduce's time goes around the network calls, Mesh
# against NCCL's Socket: both ranks of tests/gpu/nccl_latency (ITERS
# all-reduces of SIZE bytes) run under perf, Socket and Mesh in turn,
# rotating which goes first, and each transport twice a run:
#
#  1. perf stat: system calls per all-reduce and rank, all of them, then
#     sched_yield (NCCL's proxy thread yields when it found nothing to do),
#     receive calls (recvfrom, recvmsg; most find nothing) and send calls
#     (sendto, sendmsg).
#  2. perf record of every send call and every receive that returned data,
#     read back by syscall_timeline.py: the hop (a send entered on one rank
#     to the receive on the other that returned its data) and the
#     turnaround (data received to the next send on the same rank), both
#     ways.  With --show N, N events of the middle of the run as well.
#  3. With --durations, a third run: every system call of both ranks over
#     200 ms, WINDOW_AT (4) seconds after start, and how long each kind
#     took from entry to exit (empty receives, receives that returned
#     data, sends, sched_yield).
#
# The figures are per all-reduce of the whole run (setup included, a few
# per mille at the default ITERS).  A benchmark, not a test; x86_64 system
# call numbers.
#
# Usage: tests/gpu/syscalls.sh [BUILD_DIR] [--runs N] [--size BYTES] [--iters N] [--show N] [--durations] [--out DIR]
#
# Defaults: 1 run, 8 bytes, 200000 all-reduces.  PERF names the perf
# binary (default: perf on PATH); the user must be allowed to trace system
# calls (root, or perf_event_paranoid -1).  Settings in the environment
# (NCCL_ALGO, NCCL_PROTO, ...) apply to both transports.  With one GPU,
# start CUDA MPS first (tests/gpu/README.md).

set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
perf=${PERF:-perf}
build=build
runs=1
size=8
iters=200000
show=0
durations=0
out=

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=${2:?}; shift ;;
	--size) size=${2:?}; shift ;;
	--iters) iters=${2:?}; shift ;;
	--show) show=${2:?}; shift ;;
	--durations) durations=1 ;;
	--out) out=${2:?}; shift ;;
	-h|--help) sed -n '/^# Usage:/,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
	-*) echo "syscalls.sh: unknown option $1" >&2; exit 2 ;;
	*) build=$1 ;;
	esac
	shift
done

die() { echo "syscalls.sh: $*" >&2; exit 2; }

[ "$(uname -m)" = x86_64 ] || die "the system call numbers here are x86_64's"
# shellcheck source=tests/gpu/lib.sh
. "$here/lib.sh"
gpu_build syscalls.sh "$build" || exit 2
"$perf" stat -e raw_syscalls:sys_enter true >/dev/null 2>&1 ||
	die "'$perf' cannot count system calls here (PERF, perf_event_paranoid)"

gpu_latency_setup "$build" syscalls || exit 2

# x86_64: sched_yield 24, sendto 44, recvfrom 45, sendmsg 46, recvmsg 47
counted="all system calls, sched_yield, receive calls, send calls"
stat_events=(-e raw_syscalls:sys_enter
	     -e raw_syscalls:sys_enter --filter 'id == 24'
	     -e raw_syscalls:sys_enter --filter 'id == 45 || id == 47'
	     -e raw_syscalls:sys_enter --filter 'id == 44 || id == 46')
record_events=(-e raw_syscalls:sys_enter --filter 'id == 44 || id == 46'
	       -e raw_syscalls:sys_exit --filter '(id == 45 || id == 47) && ret > 0')

# ranks DIR NAME HOW VAR=VALUE...: both ranks, each its own NCCL_HOSTID,
# under perf HOW (stat or record), or (window) with perf attached to them
# for a while; perf's output in DIR/NAME-rankR.perf.
ranks() {
	local dir=$1 name=$2 how=$3 pids=() rc=0 r
	local -a events
	shift 3
	case $how in
	stat) events=("$perf" stat -x "," "${stat_events[@]}") ;;
	record) events=("$perf" record -q -k mono "${record_events[@]}") ;;
	window) events=() ;;
	esac
	mkdir -p "$dir"
	rm -f "$dir/$name.id"
	for r in 0 1; do
		local -a wrap=()
		[ ${#events[@]} -eq 0 ] ||
			wrap=("${events[@]}" -o "$dir/$name-rank$r.perf")
		env "$@" NCCL_HOSTID="mesh-host-$r" \
			timeout -k 10 300 ${wrap[@]+"${wrap[@]}"} \
			"$out/nccl_latency" "$r" 2 "$dir/$name.id" "$size" \
			"$iters" 100 >"$dir/$name-rank$r.out" 2>&1 &
		pids+=($!)
	done
	[ "$how" = window ] && window "$dir" "$name" "${pids[@]}"
	for r in "${pids[@]}"; do wait "$r" || rc=1; done
	[ $rc = 0 ] || echo "$name under perf $how: FAILED (see $dir)"
	return $rc
}

# window DIR NAME PID0 PID1: every system call of both ranks (the children
# of those timeout processes) over 200 ms, WINDOW_AT seconds after start.
window() {
	local dir=$1 name=$2 r rank=0 child
	shift 2
	sleep "${WINDOW_AT:-4}"
	for r in "$@"; do
		child=$(pgrep -n -P "$r") &&
			"$perf" record -q -k mono -p "$child" \
				-e raw_syscalls:sys_enter -e raw_syscalls:sys_exit \
				-o "$dir/$name-rank$rank.perf" -- sleep 0.2 &
		rank=$((rank + 1))
	done
	wait "$!"
}

# per_reduce FILE: perf stat's counts in FILE, per all-reduce
per_reduce() {
	grep -v '^#' "$1" | awk -F, -v n="$iters" 'NF > 2 && $1 ~ /^[0-9]+$/ {
		printf " %8.2f", $1 / n }'
}

# timeline DIR NAME OPTION...: both ranks' recorded events, each line
# prefixed with its rank, read by syscall_timeline.py with OPTION...
timeline() {
	local dir=$1 name=$2 r
	shift 2
	for r in 0 1; do
		"$perf" script --ns -F tid,time,event,trace \
			-i "$dir/$name-rank$r.perf" 2>/dev/null |
			sed "s/^/$r /" >"$dir/$name-rank$r.events"
	done
	"${PYTHON:-python3}" "$here/syscall_timeline.py" "$@" \
		"$dir/$name-rank0.events" "$dir/$name-rank1.events"
}

report() {
	local dir=$1 name=$2 r
	echo "$name: $(sed -n 's/.*"us": \([0-9.]*\).*/\1 us an all-reduce/p' \
		"$dir/$name-rank0.out" | head -1)"
	for r in 0 1; do
		printf '  rank %d, per all-reduce (%s):' "$r" "$counted"
		per_reduce "$dir/$name-stat-rank$r.perf"
		echo
	done
	timeline "$dir" "$name" --show "$show"
}

# durations_report DIR NAME: how long each kind of call took in the window
durations_report() {
	echo "  each call from entry to exit, 200 ms of both ranks:"
	timeline "$1" "$2" --durations
}

failed=0
nets=(socket mesh)
for r in $(seq "$runs"); do
	echo "== run $r: $size bytes, $iters all-reduces${NCCL_ALGO:+, NCCL_ALGO=$NCCL_ALGO}"
	for i in 0 1; do
		v=${nets[$(((i + r - 1) % 2))]}
		if [ "$v" = socket ]; then
			env_of=("${gpu_socket_env[@]}")
		else
			env_of=("${gpu_mesh_env[@]}")
		fi
		ranks "$out/run$r" "$v-stat" stat "${env_of[@]}" &&
			ranks "$out/run$r" "$v" record "${env_of[@]}" &&
			report "$out/run$r" "$v" || failed=1
		[ "$durations" = 0 ] || {
			ranks "$out/run$r" "$v-window" window "${env_of[@]}" &&
				durations_report "$out/run$r" "$v-window"
		} || failed=1
	done
done
echo "results: $out"
exit $failed
