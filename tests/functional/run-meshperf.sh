#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Runs a meshperf server and client on loopback against one plugin and
# checks how both ended.
#
# usage: run-meshperf.sh MESHPERF PLUGIN [check...] -- [arg...]
#   args after -- go to both processes; checks:
#   --server-arg A / --client-arg A   an argument for one side only
#   --results N        the client printed N JSON result lines (needs --json)
#   --expect-fail RE   at least one side fails, and a log matches RE
#   --limit S          kill both and fail after S seconds (default 90)
#   --server-env V=X   environment only for the server (fault injection)
#   --env V=X          environment for both processes
#   --expect-log RE    on success, a log line of either side matches RE
#   --max-threads-per-core K   the client's process never ran more than
#                      K x cores threads (+ 2: its own and one more)
#   --max-fds N        ... nor held more than N descriptors (needs --json)
set -u

meshperf=$1
plugin=$2
shift 2
server_args=()
client_args=()
server_env=()
results=""
expect_fail=""
expect_log=""
both_env=()
limit=90
max_threads_per_core=""
max_fds=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	case $1 in
	--server-arg) server_args+=("$2"); shift 2 ;;
	--client-arg) client_args+=("$2"); shift 2 ;;
	--server-env) server_env+=("$2"); shift 2 ;;
	--env) both_env+=("$2"); shift 2 ;;
	--expect-log) expect_log=$2; shift 2 ;;
	--results) results=$2; shift 2 ;;
	--expect-fail) expect_fail=$2; shift 2 ;;
	--limit) limit=$2; shift 2 ;;
	--max-threads-per-core) max_threads_per_core=$2; shift 2 ;;
	--max-fds) max_fds=$2; shift 2 ;;
	*) echo "run-meshperf.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ "${1:-}" = "--" ] && shift
common=("$@")

tmp=$(mktemp -d)
server_pid=""
client_pid=""

stop() {
	local pid=$1

	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null
	sleep 1
	kill -KILL "$pid" 2>/dev/null
}

cleanup() {
	stop "$client_pid"
	stop "$server_pid"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

show_logs() {
	local side

	for side in server client; do
		[ -f "$tmp/$side.log" ] || continue
		echo "---- $side ----"
		cat "$tmp/$side.log"
	done
}

fail() {
	echo "FAIL: $*"
	show_logs
	exit 1
}

env "${both_env[@]}" "${server_env[@]}" "$meshperf" --server --port 0 \
	--port-file "$tmp/port" --plugin "$plugin" \
	"${common[@]}" "${server_args[@]}" >"$tmp/server.log" 2>&1 &
server_pid=$!

# the server writes its bootstrap port once it listens
for _ in $(seq 100); do
	[ -s "$tmp/port" ] && break
	kill -0 "$server_pid" 2>/dev/null || fail "server exited before listening"
	sleep 0.1
done
[ -s "$tmp/port" ] || fail "server did not listen within 10 s"
port=$(cat "$tmp/port")

env "${both_env[@]}" "$meshperf" --client 127.0.0.1 --port "$port" --plugin "$plugin" \
	"${common[@]}" "${client_args[@]}" >"$tmp/client.log" 2>&1 &
client_pid=$!

deadline=$((SECONDS + limit))
while kill -0 "$server_pid" 2>/dev/null || kill -0 "$client_pid" 2>/dev/null
do
	[ $SECONDS -lt "$deadline" ] || fail "still running after $limit s"
	sleep 0.2
done
wait "$server_pid"
server_rc=$?
wait "$client_pid"
client_rc=$?
server_pid=""
client_pid=""

if [ -n "$expect_fail" ]; then
	[ $server_rc -ne 0 ] || [ $client_rc -ne 0 ] ||
		fail "both sides succeeded; expected a failure"
	cat "$tmp/server.log" "$tmp/client.log" | grep -Eq -- "$expect_fail" ||
		fail "no log line matches '$expect_fail'"
	# a failure must never look like a crash or a hang
	[ $server_rc -lt 128 ] && [ $client_rc -lt 128 ] ||
		fail "killed by a signal (server $server_rc, client $client_rc)"
	show_logs
	echo "PASS: failed as expected (server $server_rc, client $client_rc)"
	exit 0
fi

[ $server_rc -eq 0 ] || fail "server exited with $server_rc"
[ $client_rc -eq 0 ] || fail "client exited with $client_rc"
if [ -n "$results" ]; then
	got=$(grep -c '"event":"result"' "$tmp/client.log")
	[ "$got" -eq "$results" ] ||
		fail "client printed $got results, expected $results"
	grep -q '"event":"summary".*"status":"ok"' "$tmp/server.log" ||
		fail "server summary missing or not ok"
	# every result says when its first channel was through: a share of
	# the run, at most 1
	shares=$(grep -o '"first_channel_share":[0-9.]*' "$tmp/client.log" |
		cut -d: -f2 | awk '$1 >= 0 && $1 <= 1' | wc -l)
	[ "$shares" -eq "$got" ] ||
		fail "$shares of $got results have a first_channel_share in [0, 1]"
fi
summary_field() {
	sed -n 's/.*"event":"summary".*"'"$1"'":\([0-9-]*\).*/\1/p' "$tmp/client.log"
}
if [ -n "$max_threads_per_core" ]; then
	got=$(summary_field threads_max)
	bound=$((max_threads_per_core * $(nproc) + 2))
	[ -n "$got" ] && [ "$got" -ge 1 ] && [ "$got" -le "$bound" ] ||
		fail "client ran ${got:-?} threads, bound $bound ($(nproc) cores)"
	echo "client: at most $got threads (bound $bound)"
fi
if [ -n "$max_fds" ]; then
	got=$(summary_field fds_max)
	[ -n "$got" ] && [ "$got" -ge 1 ] && [ "$got" -le "$max_fds" ] ||
		fail "client held ${got:-?} descriptors, bound $max_fds"
	echo "client: at most $got descriptors (bound $max_fds)"
fi
if [ -n "$expect_log" ]; then
	cat "$tmp/server.log" "$tmp/client.log" | grep -Eq -- "$expect_log" ||
		fail "no log line matches '$expect_log'"
fi
show_logs
echo "PASS"
