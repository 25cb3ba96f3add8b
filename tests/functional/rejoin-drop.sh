#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Dropped rejoins during a transfer, on loopback.  Without a key file a
# REJOIN (a stream dialed anew for a connection kept for resuming) is
# named by the handle's nonce and the connection's rejoin key, which go by
# in clear: a party on the path (rejoin_replay.py, a TCP proxy that the
# server advertises instead of its listener) reads them off the control
# connection, and once the transfer is under way sends COUNT REJOINs for
# one stream straight to the listener, each closed the moment its ack is
# read, then one with another key.
#
# Must hold: the transfer (meshperf, every byte verified) completes on
# both sides; every REJOIN with the key is acked and each is one short
# outage event of the stream at the receiver, none of which adds up
# towards outage_ms (4 s here, while the data trickles for at least 6 s
# from the first REJOIN: an outage left open would end the connection);
# the one with another key is refused ("no such connection"), the
# server's one WARN; nothing else is logged at WARN.
#
# usage: rejoin-drop.sh MESHPERF PLUGIN MODULE_DIR [COUNT]
#   COUNT  REJOINs (default 300)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 3 ] || { echo "usage: $0 MESHPERF PLUGIN MODULE_DIR [COUNT]" >&2; exit 2; }
meshperf=$1
plugin=$2
modules=$3
count=${4:-300}
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	for f in report server.log client.log; do
		[ -f "$tmp/$f" ] || continue
		echo "---- $f ----"
		grep -v '^{"event":"progress"' "$tmp/$f" | tail -n 40
	done
	exit 1
}

# two free ports in a row: the listener's, then the proxy's
port=$(python3 -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 60000)
    try:
        a, b = socket.socket(), socket.socket()
        a.bind(("127.0.0.1", p)); b.bind(("127.0.0.1", p + 1))
        a.close(); b.close(); print(p); break
    except OSError:
        pass')
[ -n "$port" ] || fail "no two free ports in a row"
cat >"$tmp/mesh.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
port_range = "$port-$port";
tcp-xdc: {
  ifname = "lo";
  streams = 2;
  threads = 2;
  timeout_ms = 3000;
  outage_ms = 4000;
};
CONF
export NCCL_MESH_CONF=$tmp/mesh.conf NCCL_MESH_MODULE_PATH=$modules

# the attack starts after 64 MiB, the data trickles at 4 MiB/s meanwhile
# and for 6 s at least
python3 "$here/rejoin_replay.py" $((port + 1)) "$port" $((64 << 20)) \
	"$count" 1 $((4 << 20)) 6 "$tmp/report" >"$tmp/proxy.log" 2>&1 &
pids+=($!)
NCCL_MESH_ADVERTISE_ADDRS=127.0.0.1 NCCL_MESH_ADVERTISE_PORT_OFFSET=1 \
	NCCL_MESH_ADVERTISE_LOCAL=false \
	"$meshperf" --server --port 0 --port-file "$tmp/port" \
	--plugin "$plugin" -v >"$tmp/server.log" 2>&1 &
server=$!
pids+=("$server")
for _ in $(seq 100); do
	[ -s "$tmp/port" ] && break
	sleep 0.1
done
[ -s "$tmp/port" ] || fail "the server did not start"
for _ in $(seq 100); do
	[ -e "$tmp/report.listening" ] && break
	sleep 0.1
done
[ -e "$tmp/report.listening" ] || fail "the replaying proxy did not listen"
"$meshperf" --client 127.0.0.1 --port "$(cat "$tmp/port")" \
	--plugin "$plugin" --sizes 4M --iters 100000 --budget 256M \
	--no-latency --json --timeout 60 -v >"$tmp/client.log" 2>&1
client_rc=$?
wait "$server"
server_rc=$?
[ "$client_rc" -eq 0 ] || fail "the client exited with $client_rc"
[ "$server_rc" -eq 0 ] || fail "the server exited with $server_rc"
grep -q '"verified":true' "$tmp/client.log" || fail "no verified result"

for _ in $(seq 50); do
	[ -s "$tmp/report" ] && [ -s "$tmp/report.end" ] && break
	sleep 0.1
done
[ -s "$tmp/report" ] || fail "the replaying proxy wrote no report"
field() { sed -n "s/^$1=//p" "$tmp/report" "$tmp/report.end"; }
[ "$(field key_seen)" = 1 ] || fail "the proxy saw no rejoin key"
[ "$(field acked)" = "$count" ] ||
	fail "$(field acked) of $count REJOINs acked, expected all"
[ "$(field wrong_key_status)" = 3 ] ||
	fail "a REJOIN with another key got status $(field wrong_key_status), expected 3 (no such connection)"
# the transfer went on after the attack, not only through it
[ "$(field data)" -gt $(($(field data_after) + (16 << 20))) ] ||
	fail "the transfer ended during the attack ($(field data_after) of $(field data) bytes before its end)"
events=$(grep -c 'recv comm .*: out for .*went on: the socket dialed anew was lost' "$tmp/server.log")
[ "$events" -ge 1 ] || fail "no outage event logged for the dropped rejoins"
warns=$(grep WARN "$tmp/server.log" "$tmp/client.log" |
	grep -v 'refused connection .*: it resumes a connection not kept here')
[ -z "$warns" ] || fail "WARN lines beside the refusal: $warns"
grep -q 'refused connection .*it resumes a connection not kept here' \
	"$tmp/server.log" || fail "the REJOIN with another key was not refused"
echo "PASS: $count REJOINs acked and dropped in $(field seconds) s during a verified transfer, $events outage events at the receiver; another key refused"
