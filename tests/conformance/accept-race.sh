#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The accept race: connections set up while one of the two processes is
# paused (SIGSTOP) for 1.0-1.2 s at a time, running 0.1-0.3 s in between,
# so that a dialer gives up on one address of the handle at any point of
# the handshake and dials the next.  Loopback advertises two addresses
# (127.0.0.1 and ::1); run through encrypt.sh, the connections
# authenticate (auth_key_file) and encrypt.  Each run is one pair of
# nccl-conform processes running TESTS for LOOPS loops; the side paused
# alternates between runs.  A run passes when both processes exit 0 and
# neither logged a WARN but the listener's note of a dial closed during
# its handshake: an abandoned dial is no error.  Prints one line
# per run and "N of M runs passed"; exits 1 on any failure.
#
# usage: encrypt.sh accept-race.sh BUILD_DIR [RUNS [LOOPS [TESTS]]]
#   (encrypt.sh adds --conf FILE --log-dir DIR in front)
#   RUNS   pairs of processes (default 3)
#   LOOPS  loops of each test per pair (default 2)
#   TESTS  nccl-conform tests (default multi-accept,close-bidir)
set -uo pipefail

[ "$1" = --conf ] && [ "$3" = --log-dir ] || {
	echo "usage: encrypt.sh accept-race.sh BUILD_DIR [RUNS [LOOPS [TESTS]]]" >&2
	exit 2
}
conf=$2 tmp=$4
shift 4
build=$(cd "$1" && pwd) || exit 2
runs=${2:-3}
loops=${3:-2}
tests=${4:-multi-accept,close-bidir}
driver=$build/tests/conformance/nccl-conform
plugin=$build/core/libnccl-net-mesh.so
[ -x "$driver" ] && [ -e "$plugin" ] &&
	[ -e "$build/modules/tcp-xdc/mesh-tcp-xdc.so" ] || {
	echo "SKIP: nccl-conform, the plugin or tcp-xdc not built"
	exit 77
}
ip -br addr show lo 2>/dev/null | grep -q '::1/' || {
	echo "SKIP: loopback has no ::1 (one address only: no race)"
	exit 77
}

pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill -CONT "$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# a sleep of LOW..LOW+SPREAD ms
nap() {
	local ms=$(($1 + RANDOM % ($2 + 1)))

	sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
}

# pauser PID: stops and resumes PID until it exits.
pauser() {
	while kill -0 "$1" 2>/dev/null; do
		nap 100 200
		kill -STOP "$1" 2>/dev/null || break
		nap 1000 200
		kill -CONT "$1" 2>/dev/null
	done
}

# one_run N: 0 when both ranks passed with no WARN.
one_run() {
	local n=$1 pf=$tmp/port log=$tmp/run$1 ppid rc0=0 rc1=0 victim

	rm -f "$pf"
	common=(--test "$tests" --loops "$loops" --late-ms 1500
		--dead-ms 30000 --timeout 300 --plugin "$plugin" -v)
	env NCCL_MESH_CONF="$conf" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" \
		"$driver" --rank 0 --oob 127.0.0.1:0 --port-file "$pf" \
		"${common[@]}" >"$log.rank0" 2>&1 &
	pids=($!)
	for _ in $(seq 300); do
		[ -s "$pf" ] && break
		kill -0 "${pids[0]}" 2>/dev/null || break
		sleep 0.1
	done
	env NCCL_MESH_CONF="$conf" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" \
		"$driver" --rank 1 --oob "127.0.0.1:$(cat "$pf" 2>/dev/null)" \
		"${common[@]}" >"$log.rank1" 2>&1 &
	pids+=($!)
	victim=${pids[$((n % 2))]}
	pauser "$victim" &
	ppid=$!
	wait "${pids[0]}" || rc0=$?
	wait "${pids[1]}" || rc1=$?
	wait "$ppid" 2>/dev/null
	pids=()
	# the gate's note of a dial closed mid-handshake is the listener's
	# to log (it cannot tell a dialer that moved on from a stranger)
	if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] &&
	   ! grep 'WARN' "$log.rank0" "$log.rank1" |
		grep -qv 'closed during the authentication handshake'; then
		echo "run $n: pass (rank $((n % 2)) paused)"
		return 0
	fi
	echo "run $n: FAIL (rank $((n % 2)) paused; exits $rc0 and $rc1)"
	for r in 0 1; do
		grep -E 'WARN|FAIL|fail' "$log.rank$r" | head -n 20 |
			sed "s/^/  rank$r| /"
	done
	return 1
}

passed=0
for n in $(seq "$runs"); do
	one_run "$n" && passed=$((passed + 1))
done
echo "$passed of $runs runs passed (tests $tests, $loops loops each, one side paused 1.0-1.2 s every 0.1-0.3 s, two addresses, encrypted)"
[ "$passed" = "$runs" ]
