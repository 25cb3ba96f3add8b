#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Relayed connections on loopback, each process its own host: meshrelays
# r1 (127.0.0.2) and r2 (127.0.0.5), a meshperf server that advertises
# 127.0.0.3 and a client routed by the config.
#   two-hop     route 127.0.0.3 via r1 r2: data verified both ways, and
#               each relay's log shows its pair
#   outsider    r1 keeps only 127.0.0.2/32 in the cluster: the client's
#               connect fails fast naming r1's refusal, r1 logs it
#   dead-relay  the only relay is not running: connect fails naming it
#   relay-dies  r1 is killed during a transfer: both ends fail, in time
#   one-host    (not run by default) two ranks on one host, the relay in
#               the first one's process (serve = true): the second loses
#               the relay port and reaches the first through it, the
#               handles advertising ::1 as well while relay.members lists
#               127.0.0.0/8 alone; verified, no WARN on either
# and, with relay_knock, what anyone reaching r1's port may try without a
# key (not run by default):
#   idle-hold   64 channels from 127.0.0.3 that send a hello and then
#               nothing, and 64 from 127.0.0.4 that also say they heard
#               the ack (so the relay's accept takes them), are held open
#               (each reopened once the relay ends it): a real request
#               from 127.0.0.1 is taken at once and answered, and the
#               relay logs the dropped channels in a few lines
#   port-scan   a request for a "destination" at a port outside
#               port_range, where another service listens: the relay
#               refuses it and never connects there; a destination inside
#               the range is dialed as before
#   unknown-relay a request whose explicit route names a relay that is not
#               in r1's relay.relays: r1 refuses it, and the reason it
#               answers and logs names that relay
#   port-probe  requests for three ports inside port_range: one where a
#               service that is no nccl-mesh listener answers with a
#               banner, one where a service closes every connection, one
#               where nothing listens: the three answers are the same
#               refusal at the same time (within 0.5 s), and only r1's
#               log says what answered; the same three for routes that
#               replace a broken one (resume): one refusal, "nothing
#               listens there", at once
#
# usage: relay.sh BUILD_DIR [CASE...]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(two-hop outsider dead-relay relay-dies)
meshperf=$build/tools/meshperf/meshperf
meshrelay=$build/tools/meshrelay/meshrelay
knock=$build/tests/functional/relay_knock
plugin=$build/core/libnccl-net-mesh.so
[ -x "$meshrelay" ] && [ -e "$build/modules/relay/mesh-relay.so" ] || {
	echo "SKIP: relay or meshrelay not built"
	exit 77
}
export NCCL_MESH_CONF=$here/relay.conf
export NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc:$build/modules/relay
tmp=$(mktemp -d)
pids=()
failures=0

cleanup() {
	for p in "${pids[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"
}

P1=$(free_port 127.0.0.2)
P2=$(free_port 127.0.0.5)
RELAYS="r1 127.0.0.2:$P1,r2 127.0.0.5:$P2"

# relay NAME PORT [VAR=VALUE...]: a meshrelay in the background
relay() {
	local name=$1 port=$2
	shift 2
	env NCCL_DEBUG=INFO NCCL_MESH_RELAY_NAME="$name" \
		NCCL_MESH_RELAY_PORT="$port" NCCL_MESH_RELAY_RELAYS="$RELAYS" \
		"$@" "$meshrelay" >"$tmp/$name.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		ss -Htln "sport = :$port" | grep -q . && return 0
		sleep 0.1
	done
	echo "relay $name did not listen on $port"
	cat "$tmp/$name.log"
	return 1
}

# pair ROUTES [meshperf args...]: server at 127.0.0.3, client routed;
# sets rc (the client's exit) and leaves server.log, client.log
pair() {
	local routes=$1
	shift
	rm -f "$tmp/port"
	env NCCL_MESH_RELAY_NAME=d NCCL_MESH_RELAY_RELAYS="$RELAYS" \
		NCCL_MESH_ADVERTISE_ADDRS=127.0.0.3 \
		NCCL_MESH_ADVERTISE_LOCAL=false \
		timeout 120 "$meshperf" --server --port 0 --port-file "$tmp/port" \
		--plugin "$plugin" -v >"$tmp/server.log" 2>&1 &
	local server=$!
	pids+=($server)
	for _ in $(seq 100); do
		[ -s "$tmp/port" ] && break
		sleep 0.1
	done
	env NCCL_MESH_RELAY_NAME=c NCCL_MESH_RELAY_RELAYS="$RELAYS" \
		NCCL_MESH_RELAY_ROUTES="$routes" \
		timeout 100 "$meshperf" --client 127.0.0.1 --port "$(cat "$tmp/port")" \
		--plugin "$plugin" -v "$@" >"$tmp/client.log" 2>&1
	rc=$?
	wait "$server" 2>/dev/null
	server_rc=$?
}

check() {
	local name=$1 ok=$2 what=$3

	if [ "$ok" -eq 0 ]; then
		echo "PASS: $name: $what"
	else
		echo "FAIL: $name: $what"
		for f in "$tmp"/*.log; do
			echo "---- $(basename "$f") ----"
			grep -a -v "^\[" "$f" | tail -n 25
		done
		failures=$((failures + 1))
	fi
}

stop_relays() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	wait 2>/dev/null
	pids=()
}

case_two_hop() {
	relay r1 "$P1" && relay r2 "$P2" || return 1
	pair "127.0.0.3 via r1 r2" --sizes 0,8,4K,100K,3M --iters 50 --bidir
	[ $rc -eq 0 ] && [ $server_rc -eq 0 ] &&
		! grep -aq WARN "$tmp"/*.log &&
		grep -aq "via r1 (tcp-xdc 127.0.0.2:$P1) -> r2 (tcp-xdc 127.0.0.5:$P2) -> destination" "$tmp/client.log" &&
		grep -aq "pair .*: forwarding .* -> r2 " "$tmp/r1.log" &&
		grep -aq "pair .*: forwarding .* -> destination" "$tmp/r2.log" &&
		grep -aq "recv comm .* from c: c -(tcp-xdc)-> r1 -(tcp-xdc)-> r2 -(tcp-xdc)-> here" "$tmp/server.log"
	check two-hop $? "verified both ways through r1 and r2, each names the route, no WARN"
	stop_relays
}

case_outsider() {
	relay r1 "$P1" NCCL_MESH_RELAY_MEMBERS=127.0.0.2/32 || return 1
	local t0=$SECONDS
	pair "127.0.0.3 via r1" --sizes 8 --iters 5
	[ $rc -ne 0 ] && [ $((SECONDS - t0)) -lt 30 ] &&
		grep -aq "no relay carries the connection: r1: refused: destination 127.0.0.3:[0-9]* is outside the cluster" "$tmp/client.log" &&
		grep -aq "refused to relay for c .*outside the cluster" "$tmp/r1.log"
	check outsider $? "a destination outside relay.members is refused, both sides say so"
	stop_relays
}

case_dead_relay() {
	local t0=$SECONDS
	pair "127.0.0.3 via r1" --sizes 8 --iters 5
	[ $rc -ne 0 ] && [ $((SECONDS - t0)) -lt 30 ] &&
		grep -aq "no relay carries the connection: r1 at 127.0.0.2:$P1" "$tmp/client.log"
	check dead-relay $? "a relay that does not answer is named with its address"
}

case_relay_dies() {
	# outage_ms 0: a broken route fails the connection at once
	local -x NCCL_MESH_RELAY_OUTAGE_MS=0
	relay r1 "$P1" || return 1
	local victim=${pids[-1]} t0=$SECONDS
	( sleep 4; kill -9 "$victim" ) &
	pair "127.0.0.3 via r1" --sizes 64M --iters 100000 --budget 64G --no-latency
	[ $rc -ne 0 ] && [ $((SECONDS - t0)) -lt 60 ] &&
		grep -aq "relay.*the leg failed (route: via r1" "$tmp/client.log" &&
		grep -aEq "relay.*(before message [0-9]* came|the leg failed) \(route: c -\(tcp-xdc\)-> r1" "$tmp/server.log"
	check relay-dies $? "a relay killed mid-transfer fails both ends naming the route, in $((SECONDS - t0)) s"
	stop_relays
}

# one_host NAME PORT COMMAND...: a rank on this host whose process serves
# the relay port when it is free, routed to 127.0.0.3 through relay h
one_host() {
	local name=$1 port=$2
	shift 2
	env NCCL_DEBUG=INFO NCCL_MESH_RELAY_SERVE=true \
		NCCL_MESH_RELAY_PORT="$port" \
		NCCL_MESH_RELAY_RELAYS="h 127.0.0.1:$port" \
		NCCL_MESH_RELAY_ROUTES="127.0.0.3 via h" \
		NCCL_MESH_RELAY_NAME="$name" "$@"
}

case_one_host() {
	local port server
	port=$(free_port 127.0.0.1)
	ip -6 addr show dev lo 2>/dev/null | grep -q '::1/128' ||
		echo "note: lo has no ::1 here, the handles advertise none"
	rm -f "$tmp/port"
	# h advertises 127.0.0.3 first (the route's) and lo's own addresses,
	# 127.0.0.1 and ::1, after it
	one_host h "$port" NCCL_MESH_ADVERTISE_ADDRS=127.0.0.3 \
		timeout 60 "$meshperf" --server --port 0 --port-file "$tmp/port" \
		--plugin "$plugin" -v >"$tmp/server.log" 2>&1 &
	server=$!
	pids+=($server)
	wait_for "$tmp/port" . 10 || return 1
	# both ranks init once their bootstrap met: the server's answer
	# reaches the client only after the server took the relay port, so
	# that the server is the rank that serves, as the route wants
	python3 -c '
import socket, sys, threading, time
lsn = socket.create_server(("127.0.0.1", 0))
open(sys.argv[2] + ".tmp", "w").write("%d\n" % lsn.getsockname()[1])
__import__("os").rename(sys.argv[2] + ".tmp", sys.argv[2])
c, _ = lsn.accept()
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def served():
    for _ in range(300):
        if sys.argv[4].encode() in open(sys.argv[3], "rb").read():
            return
        time.sleep(0.1)
def pump(a, b, gate):
    while True:
        d = a.recv(65536)
        if gate:
            served()
            gate = False
        if not d:
            b.shutdown(socket.SHUT_WR)
            return
        b.sendall(d)
threading.Thread(target=pump, args=(c, s, False), daemon=True).start()
pump(s, c, True)
' "$(cat "$tmp/port")" "$tmp/proxy-port" "$tmp/server.log" \
		"relay h serves port $port" &
	pids+=($!)
	wait_for "$tmp/proxy-port" . 10 || return 1
	one_host c "$port" timeout 50 "$meshperf" --client 127.0.0.1 \
		--port "$(cat "$tmp/proxy-port")" --plugin "$plugin" -v \
		--sizes 0,8,4K,1M --iters 10 >"$tmp/client.log" 2>&1
	rc=$?
	wait "$server"
	server_rc=$?
	[ $rc -eq 0 ] && [ $server_rc -eq 0 ] &&
		! grep -aq WARN "$tmp/server.log" "$tmp/client.log" &&
		grep -aq "port $port is served by another process on this host" "$tmp/client.log" &&
		grep -aq "via h (tcp-xdc 127.0.0.1:$port) -> destination" "$tmp/client.log" &&
		grep -aq "pair .*: forwarding c from" "$tmp/server.log"
	check one-host $? "two ranks on one host relay through the first one's process, members 127.0.0.0/8, no WARN"
}

# where the abuse cases' listeners are; below the ephemeral ports, so that
# no other test's connections take it
RANGE_LOW=29620
RANGE=$RANGE_LOW-$((RANGE_LOW + 9))

# wait_for FILE PATTERN SECONDS
wait_for() {
	for _ in $(seq $(($3 * 10))); do
		grep -aq "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

case_idle_hold() {
	local idlers=() rc lines
	relay r1 "$P1" NCCL_MESH_PORT_RANGE="$RANGE" || return 1
	"$knock" idle 127.0.0.2 "$P1" 64 60 127.0.0.3 100 0 >"$tmp/idle.log" 2>&1 &
	idlers+=($!)
	"$knock" idle 127.0.0.2 "$P1" 64 60 127.0.0.4 100 1 >"$tmp/heard.log" 2>&1 &
	idlers+=($!)
	pids+=("${idlers[@]}")
	wait_for "$tmp/idle.log" '"event":"held"' 30 &&
		wait_for "$tmp/heard.log" '"event":"held"' 30 || return 1
	# the relay takes them all in before the real request comes; its
	# destination is outside the cluster, so the answer comes at once
	sleep 2
	"$knock" request 127.0.0.2 "$P1" "192.0.2.1:$((RANGE_LOW + 5))" 30 \
		>"$tmp/request.log" 2>&1
	rc=$?
	kill "${idlers[@]}" 2>/dev/null
	stop_relays
	lines=$(grep -acE "a channel from|more channels that brought no request|refused .*connection" \
		"$tmp/r1.log")
	[ $rc -eq 0 ] &&
		grep -aq '"event":"answer".*outside the cluster' "$tmp/request.log" &&
		! grep -aq "refused .*connection from 127.0.0.1:" "$tmp/r1.log" &&
		[ "$lines" -le 12 ]
	check idle-hold $? "a real request is taken at once and answered while 128 idle channels are held ($lines log lines)"
}

case_port_scan() {
	local other rc rc_in
	other=$(free_port 127.0.0.1)
	# another service on a member's address: it notes every connection
	python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
while True:
    c, a = s.accept()
    print("connected from", a, flush=True)
    c.close()
' "$other" >"$tmp/service.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		ss -Htln "sport = :$other" | grep -q . && break
		sleep 0.1
	done
	relay r1 "$P1" NCCL_MESH_PORT_RANGE="$RANGE" || return 1
	"$knock" request 127.0.0.2 "$P1" "127.0.0.1:$other" 30 \
		>"$tmp/request.log" 2>&1
	rc=$?
	"$knock" request 127.0.0.2 "$P1" "127.0.0.1:$((RANGE_LOW + 5))" 30 \
		>"$tmp/inside.log" 2>&1
	rc_in=$?
	stop_relays
	[ $rc -eq 0 ] &&
		grep -aq '"status":[1-9].*no port where an nccl-mesh listener can be' \
			"$tmp/request.log" &&
		! grep -aq connected "$tmp/service.log" &&
		[ $rc_in -eq 0 ] && grep -aq '"status":[1-9]' "$tmp/inside.log" &&
		! grep -aq "no port where" "$tmp/inside.log"
	check port-scan $? "a port outside port_range is never dialed, one inside is"
}

case_unknown_relay() {
	local rc want="'r9' is not in r1's relay.relays"
	relay r1 "$P1" NCCL_MESH_PORT_RANGE="$RANGE" || return 1
	"$knock" request 127.0.0.2 "$P1" "127.0.0.1:$((RANGE_LOW + 5))" 30 \
		r9 >"$tmp/request.log" 2>&1
	rc=$?
	stop_relays
	[ $rc -eq 0 ] && grep -aq '"status":[1-9]' "$tmp/request.log" &&
		grep -aqF "$want" "$tmp/request.log" &&
		grep -a "refused to relay for knock " "$tmp/r1.log" |
			grep -aqF "$want"
	check unknown-relay $? "a route through a relay r1 does not know is refused, naming it"
}

# answer_of FILE: a knock answer's status and text, the milliseconds in
# the text made N; answer_ms FILE: how long it took
answer_of() {
	sed -n 's/.*"status":\(-\{0,1\}[0-9]*\),.*"text":"\(.*\)"}$/\1 \2/p' "$1" |
		sed 's/[0-9][0-9]* ms/N ms/g'
}
answer_ms() {
	sed -n 's/.*"ms":\([0-9]*\)[.0-9]*,.*/\1/p' "$1"
}

# probed KIND MIN_MS MAX_MS: the knocks of KIND (request, resume) for
# the three ports got one refusal, each after MIN_MS to MAX_MS and within
# 1 s of the closed port's (the leak this guards against is the relay's
# whole 2 s hold; a loaded host starts the knocks up to a few hundred ms
# apart); leaves it in $answer
probed() {
	local kind=$1 min=$2 max=$3 p a t t0=

	answer=
	for p in "$closed" "$banner" "$closer"; do
		a=$(answer_of "$tmp/$kind-$p.log")
		t=$(answer_ms "$tmp/$kind-$p.log")
		echo "$kind to port $p: ${t:-?} ms '$a'"
		[ -n "$a" ] && [ "${a%% *}" != 0 ] && [ -n "$t" ] &&
			[ "$t" -ge "$min" ] && [ "$t" -le "$max" ] || return 1
		[ -n "$answer" ] || { answer=$a; t0=$t; }
		[ "$a" = "$answer" ] &&
			[ $((t > t0 ? t - t0 : t0 - t)) -le 1000 ] || return 1
	done
}

case_port_probe() {
	local -x RELAYS="r1 127.0.0.2:$P1"
	local banner=$((RANGE_LOW + 3)) closer=$((RANGE_LOW + 4))
	local closed=$((RANGE_LOW + 5)) knocks=() rc=0 answer kind
	ss -Htln "sport = :$closed" | grep -q . && {
		echo "port $closed is taken here"
		return 1
	}
	# what else may listen inside the range: a service that greets
	# first (as SSH or SMTP do), one that closes at once
	python3 -c '
import socket, sys, threading
def serve(port, greet):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port)); s.listen(64)
    while True:
        c, _ = s.accept()
        print("connected to", port, flush=True)
        if greet:
            try: c.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            except OSError: pass
            threading.Timer(10, c.close).start()
        else:
            c.close()
threading.Thread(target=serve, args=(int(sys.argv[2]), False), daemon=True).start()
serve(int(sys.argv[1]), True)
' "$banner" "$closer" >"$tmp/service.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		ss -Htln "sport = :$banner" | grep -q . &&
			ss -Htln "sport = :$closer" | grep -q . && break
		sleep 0.1
	done
	relay r1 "$P1" NCCL_MESH_PORT_RANGE="$RANGE" \
		NCCL_MESH_RELAY_TIMEOUT_MS=2000 || return 1
	# first routes, and routes that replace a broken one (through the
	# destination's rejoin), all at once
	for kind in request resume; do
		for p in "$banner" "$closer" "$closed"; do
			"$knock" "$kind" 127.0.0.2 "$P1" "127.0.0.1:$p" 30 \
				>"$tmp/$kind-$p.log" 2>&1 &
			knocks+=($!)
		done
	done
	for k in "${knocks[@]}"; do
		wait "$k" || rc=1
	done
	stop_relays
	[ $rc -eq 0 ] && probed request 1900 30000 &&
		grep -aq "connected to $banner" "$tmp/service.log" &&
		grep -aq "connected to $closer" "$tmp/service.log" &&
		grep -a "refused to relay for knock " "$tmp/r1.log" |
			grep -aq "not told: .*something else than an nccl-mesh listener"
	check port-probe $? "a port where another service answers, one that closes and a closed one get the same answer at the same time"
	# a resumed route learns at once that no process of the connection
	# is there any more, whatever else listens
	[ $rc -eq 0 ] && probed resume 0 1500 &&
		[[ "$answer" == "111 "*"nothing listens there"* ]] &&
		grep -a "no new route for knock " "$tmp/r1.log" |
			grep -aq "not told: .*something else than an nccl-mesh listener" &&
		grep -a "no new route for knock " "$tmp/r1.log" |
			grep -aq "not told: .*closed the connection with no answer"
	check port-probe $? "resumed: a port where another service answers, one that closes and a closed one are refused alike, at once"
}

for c in "${cases[@]}"; do
	"case_${c//-/_}" || check "$c" 1 "set-up failed"
done
[ $failures -eq 0 ] || exit 1
