#!/bin/bash
# SPDX-License-Identifier: MIT
# metrics_file: two meshperf processes over loopback (tcp-xdc) write
# their counters for node_exporter's textfile collector.
#   clear      the files appear while data moves, one per process (%p),
#              parse as strict Prometheus text, and their bytes and
#              requests are exactly what meshperf moved, each way; while
#              the comms are open they carry the round trip to the peer,
#              and not once they closed
#   encrypted  encrypt = true: records sealed and opened at least the
#              payload, no tag failed
#   bad-dir    a directory that does not exist: one WARN, the job runs
#
# usage: metrics-textfile.sh BUILD_DIR SOURCE_DIR
set -uo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
# shellcheck source=tests/tools/metrics-lib.sh
. "$src/tests/tools/metrics-lib.sh"
metrics_loopback_setup "$build" "$src"

# run DIR [meshperf args...]: a server and a client writing into DIR,
# in the background (pids server and client: their timeouts')
run() {
	local dir=$1
	shift
	mkdir -p "$dir"
	loopback_server "$dir/nccl-mesh-%p.prom"
	NCCL_MESH_METRICS_FILE="$dir/nccl-mesh-%p.prom" timeout 100 \
		"$meshperf" --client 127.0.0.1 --port "$(cat "$tmp/port")" \
		--plugin "$plugin" --json --no-latency "$@" \
		>"$tmp/client.json" 2>"$tmp/client.log" &
	client=$!
	pids+=("$client")
}

# files DIR: the client's file (it only sends: --no-latency) in cf, the
# server's in sf; each file's pid label is its name's
files() {
	cf=$(grep -l 'direction="send"' "$1"/nccl-mesh-*.prom)
	sf=$(grep -L 'direction="send"' "$1"/nccl-mesh-*.prom)
	[ "$(echo "$cf" | wc -w)" = 1 ] && [ "$(echo "$sf" | wc -w)" = 1 ] &&
	for f in $cf $sf; do
		local pid=${f##*nccl-mesh-}
		pid=${pid%.prom}
		[ "$(grep -c '^nccl_mesh_' "$f")" = \
		  "$(grep -c "pid=\"$pid\"" "$f")" ] || return 1
	done
}

case_clear() {
	local dir=$tmp/clear seen=1 ok=0 f want reqs rtt=
	run "$dir" --sizes 0,8,4K,1M --iters 300
	# written while the job runs, not only at its end
	for _ in $(seq 200); do
		if compgen -G "$dir/nccl-mesh-*.prom" >/dev/null &&
		   kill -0 "$client" 2>/dev/null; then
			seen=0
			break
		fi
		sleep 0.05
	done
	# while its comm is open, the client's round trip to its peer
	while [ -z "$rtt" ] && kill -0 "$client" 2>/dev/null; do
		rtt=$(cat "$dir"/nccl-mesh-*.prom 2>/dev/null | sed -n \
			's/^nccl_mesh_rtt_microseconds{module="tcp-xdc",peer="127\.0\.0\.1",pid="[0-9]*"} \([1-9][0-9]*\)$/\1/p' |
			head -n 1)
		sleep 0.05
	done
	wait "$client" || ok=1
	wait "$server" || ok=1
	files "$dir" || ok=1
	want=$(json_sum bytes)
	reqs=$(json_sum iters)
	for f in "$cf" "$sf"; do
		[ -f "$f" ] && prom check "$f" || ok=1
	done
	[ "$(prom get "$cf" nccl_mesh_bytes_total module=tcp-xdc \
		direction=send peer=127.0.0.1)" = "$want" ] &&
	[ "$(prom get "$sf" nccl_mesh_bytes_total module=tcp-xdc \
		direction=recv peer=127.0.0.1)" = "$want" ] &&
	[ "$(prom get "$cf" nccl_mesh_requests_total direction=send)" = \
		"$reqs" ] &&
	[ "$(prom get "$sf" nccl_mesh_requests_total direction=recv)" = \
		"$reqs" ] &&
	[ "$(prom get "$cf" nccl_mesh_stalls_total)" = 0 ] &&
	[ "$(prom get "$cf" nccl_mesh_resumes_total module=tcp-xdc)" = 0 ] &&
	! compgen -G "$dir/*.tmp" >/dev/null || ok=1
	# a level: gone with the comms
	[ -n "$rtt" ] && ! grep -q '^nccl_mesh_rtt_microseconds' "$cf" "$sf" ||
		ok=1
	check $((ok | seen)) "clear: files of both processes while data moves, strict text, $want bytes and $reqs requests each way, round trip ${rtt:-?} us while open"
	if [ $((ok | seen)) -ne 0 ]; then
		echo "--- $cf:"; cat "$cf"; echo "--- $sf:"; cat "$sf"
	fi
}

case_encrypted() {
	local dir=$tmp/enc ok=0 want sealed opened
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
	chmod 600 "$tmp/key"
	NCCL_MESH_AUTH_KEY_FILE=$tmp/key NCCL_MESH_TCP_XDC_ENCRYPT=true \
		run "$dir" --sizes 8,1M --iters 100
	wait "$client" || ok=1
	wait "$server" || ok=1
	files "$dir" || ok=1
	want=$(json_sum bytes)
	prom check "$cf" && prom check "$sf" || ok=1
	sealed=$(prom get "$cf" nccl_mesh_encrypted_bytes_total direction=send)
	opened=$(prom get "$sf" nccl_mesh_decrypted_bytes_total direction=recv)
	[ "$(prom get "$cf" nccl_mesh_bytes_total direction=send)" = "$want" ] &&
	[ "$sealed" != none ] && [ "$sealed" -ge "$want" ] &&
	[ "$opened" != none ] && [ "$opened" -ge "$want" ] &&
	[ "$(prom get "$sf" nccl_mesh_auth_failures_total)" = 0 ] || ok=1
	check $ok "encrypted: $sealed bytes sealed, $opened opened for $want of payload, no tag failed"
}

case_bad_dir() {
	local ok=0 n
	loopback_server "$tmp/missing/x-%p.prom" 60
	NCCL_MESH_METRICS_FILE=$tmp/missing/x-%p.prom timeout 60 \
		"$meshperf" --client 127.0.0.1 --port "$(cat "$tmp/port")" \
		--plugin "$plugin" --sizes 8,64K --iters 50 \
		>"$tmp/client.log" 2>&1 || ok=1
	wait "$server" || ok=1
	n=$(grep -c "metrics_file $tmp/missing/x-[0-9]*.prom: creating the temporary file: No such file or directory" "$tmp/client.log")
	[ "$n" = 1 ] || ok=1
	check $ok "bad-dir: the job runs, one WARN ($n)"
}

case_clear
case_encrypted
case_bad_dir
[ $failures -eq 0 ]
