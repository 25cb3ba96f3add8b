#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): a meshrelay on loopback (127.0.0.2) while idle
# keyless channels are held against it, COUNT at a time (64, then 1000 by
# default): half from 127.0.0.3 send a hello and nothing else, half from
# 127.0.0.4 also say they heard the ack, so the relay's accept takes
# them; each one the relay ends is opened again after REOPEN_MS.  While
# they are held, real requests from 127.0.0.1 (for a destination outside
# the cluster, which the relay answers as soon as it reads the request)
# are timed, and the relay's CPU is read from /proc/PID/stat over the
# hold.  Prints one line per count.
#
#   tests/bench/relay-idle.sh BUILD [HOLD_S [REOPEN_MS [COUNT...]]]
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BUILD [HOLD_S [REOPEN_MS [COUNT...]]]" >&2; exit 2; }
b=$(realpath "$1")
hold=${2:-20}
reopen=${3:-100}
shift $(($# < 3 ? $# : 3))
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(64 1000)
here=$(cd "$(dirname "$0")" && pwd)
knock=$b/tests/functional/relay_knock
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_scratch

for f in tools/meshrelay/meshrelay modules/relay/mesh-relay.so \
	 tests/functional/relay_knock; do
	[ -e "$b/$f" ] || { echo "no $f in $b: build first" >&2; exit 2; }
done
ulimit -n 8192
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
export NCCL_MESH_CONF=$here/../functional/relay.conf
export NCCL_MESH_MODULE_PATH=$b/modules/tcp-xdc:$b/modules/relay
export NCCL_MESH_PORT_RANGE=29620-29629
hz=$(getconf CLK_TCK)

# CPU seconds (user + system) of a process so far
cpu_s() {
	awk -v hz="$hz" '{ sub(/^.*\) /, ""); print ($12 + $13) / hz }' "/proc/$1/stat"
}

for count in "${counts[@]}"; do
	NCCL_MESH_RELAY_NAME=r1 NCCL_MESH_RELAY_PORT=$port \
		"$b/tools/meshrelay/meshrelay" >"$work/relay.log" 2>&1 &
	relay=$!
	pids+=("$relay")
	for _ in $(seq 100); do
		ss -Htln "sport = :$port" | grep -q . && break
		sleep 0.1
	done
	half=$((count / 2))
	"$knock" idle 127.0.0.2 "$port" "$half" $((hold + 5)) 127.0.0.3 \
		"$reopen" 0 >"$work/idle0" 2>&1 &
	i0=$!
	"$knock" idle 127.0.0.2 "$port" $((count - half)) $((hold + 5)) \
		127.0.0.4 "$reopen" 1 >"$work/idle1" 2>&1 &
	i1=$!
	pids+=("$i0" "$i1")
	for _ in $(seq 300); do
		grep -q held "$work/idle0" && grep -q held "$work/idle1" && break
		sleep 0.1
	done
	sleep 1
	c0=$(cpu_s "$relay")
	t0=$EPOCHREALTIME
	worst=0 n=0 fails=0
	while (( ${EPOCHREALTIME%.*} - ${t0%.*} < hold )); do
		if out=$("$knock" request 127.0.0.2 "$port" 192.0.2.1:29625 10); then
			ms=$(sed 's/.*"ms":\([0-9.]*\).*/\1/' <<<"$out")
			worst=$(awk -v a="$worst" -v b="$ms" 'BEGIN { print (b > a) ? b : a }')
		else
			fails=$((fails + 1))
		fi
		n=$((n + 1))
		sleep 1
	done
	c1=$(cpu_s "$relay")
	t1=$EPOCHREALTIME
	# the idlers end on their own, a few seconds on, with their counts
	wait "$i0" "$i1" 2>/dev/null || true
	kill -USR1 "$relay"
	sleep 0.5
	ended=$({ grep -o '[0-9]* channels ended without a request' \
		"$work/relay.log" || true; } | tail -n 1 | awk '{ print $1 }')
	kill "$relay"
	wait "$relay" 2>/dev/null || true
	reopened=$(cat "$work/idle0" "$work/idle1" |
		{ grep -o '"closed_by_relay":[0-9]*' || true; } |
		awk -F: '{ n += $2 } END { print n + 0 }')
	cpu=$(awk -v a="$c0" -v b="$c1" -v s="$t0" -v e="$t1" \
		'BEGIN { printf "%.1f", 100 * (b - a) / (e - s) }')
	echo "idle=$count reopen_ms=$reopen hold_s=$hold requests=$n" \
		"unanswered=$fails worst_answer_ms=$worst relay_cpu_pct=$cpu" \
		"channels_ended_by_relay=${ended:-?} attacker_reopens=$reopened"
done
