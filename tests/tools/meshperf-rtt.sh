#!/bin/bash
# SPDX-License-Identifier: MIT
# meshperf's round trip, two processes over loopback (tcp-xdc):
#   plugin     with latency, the text: the header's "# rtt N: the
#              shortest of 8 round trips of 8 bytes through the plugin",
#              each latency row's rtt_us above 0 and at most its whole
#              round (2 x lat_us, the patterns' time aside), "-" for a
#              row without latency, the summary's rtt the header's; the
#              same on the server
#   bootstrap  --no-latency --json: no reverse connection, so an "rtt"
#              event through "bootstrap" (the kernel's), every result's
#              rtt_us null, the summary's rtt_us the event's
#
# usage: meshperf-rtt.sh BUILD_DIR SOURCE_DIR
set -uo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
meshperf=$build/tools/meshperf/meshperf
plugin=$build/core/libnccl-net-mesh.so
tmp=$(mktemp -d)
pids=()
export NCCL_MESH_CONF=$src/tests/functional/loopback.conf
export NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc

# shellcheck source=tests/tools/cluster-lib.sh
. "$src/tests/tools/cluster-lib.sh"

# run [meshperf args...]: a server and a client, both waited for; their
# output in server.log and client.log, exit statuses in src_rc, cli_rc
run() {
	rm -f "$tmp/port"
	timeout 60 "$meshperf" --server --port 0 --port-file "$tmp/port" \
		--plugin "$plugin" "$@" >"$tmp/server.log" 2>&1 &
	local server=$!
	pids+=("$server")
	for _ in $(seq 100); do
		[ -s "$tmp/port" ] && break
		sleep 0.1
	done
	timeout 60 "$meshperf" --client 127.0.0.1 --port "$(cat "$tmp/port")" \
		--plugin "$plugin" "$@" >"$tmp/client.log" 2>&1
	cli_rc=$?
	wait "$server"
	src_rc=$?
}

case_plugin() {
	run --sizes 8,1K,1M --iters 50 --lat-max 1K
	[ "$src_rc" -eq 0 ] && [ "$cli_rc" -eq 0 ] &&
	for side in client server; do
		awk '
/^# rtt [0-9.]+ (us|ms): the shortest of 8 round trips of 8 bytes through the plugin$/ {
	head = $3 " " substr($4, 1, length($4) - 1)
}
$1 ~ /^[0-9]+$/ && NF == 9 {
	rows++
	if ($1 <= 1024) {
		# the shortest round is no longer than the mean one
		if (!($9 > 0 && $9 <= 2 * $8 + 5)) bad = bad " size " $1
	} else if ($8 != "-" || $9 != "-") bad = bad " size " $1
}
/ outages resumed; rtt / {
	sub(/.*; rtt /, ""); tail = $0
}
END {
	if (head == "" || rows != 3 || bad != "" || tail != head " (plugin)") {
		printf "header rtt \"%s\", %d rows, bad:%s, summary \"%s\"\n",
			head, rows, bad, tail
		exit 1
	}
}' "$tmp/$side.log" || return 1
	done
}

case_bootstrap() {
	run --sizes 64K,1M --iters 20 --no-latency --json
	[ "$src_rc" -eq 0 ] && [ "$cli_rc" -eq 0 ] &&
		python3 - "$tmp/client.log" <<'EOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rtt = [e for e in ev if e["event"] == "rtt"]
res = [e for e in ev if e["event"] == "result"]
summ = [e for e in ev if e["event"] == "summary"]
ok = (len(rtt) == 1 and rtt[0]["through"] == "bootstrap"
      and rtt[0]["rtt_us"] > 0 and len(res) == 2
      and all(r["rtt_us"] is None and r["lat_us"] is None for r in res)
      and len(summ) == 1 and summ[0]["rtt_through"] == "bootstrap"
      and summ[0]["rtt_us"] == rtt[0]["rtt_us"])
if not ok:
    print("events:", rtt, res, summ)
sys.exit(0 if ok else 1)
EOF
}

for c in plugin bootstrap; do
	"case_$c"
	check "$c" $? "meshperf's round trip, $c"
done
[ "$failures" -eq 0 ] || exit 1
