#!/bin/bash
# SPDX-License-Identifier: MIT
# meshrelay's metrics endpoint on loopback: a relay r1 (127.0.0.2) with
# metrics_listen, a meshperf server that advertises 127.0.0.3 and a
# client routed through r1.
#   scrape   GET /metrics while the data flows: strict Prometheus text,
#            relayed_bytes grows while the route is up (relay_pairs 1),
#            and once the client is done it is what the client sent
#            (its own textfile's bytes, exact) plus one 32-byte header
#            per message (its requests); the same by origin and by
#            destination
#   abuse    anything but GET /metrics: 404, 405, 400; a header past
#            8 KiB: 431; a client that sends nothing holds nothing up:
#            a scrape beside it is answered at once; a second meshrelay
#            on the same metrics_listen exits 1 naming it
# (one address crowding the endpoint: metrics-crowd.sh)
#
# usage: metrics-relay.sh BUILD_DIR SOURCE_DIR
set -uo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
# shellcheck source=tests/tools/metrics-lib.sh
. "$src/tests/tools/metrics-lib.sh"
meshperf=$build/tools/meshperf/meshperf
meshrelay=$build/tools/meshrelay/meshrelay
plugin=$build/core/libnccl-net-mesh.so
metrics_test_setup
export NCCL_MESH_CONF=$src/tests/functional/relay.conf
export NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc:$build/modules/relay

P1=$(free_port 127.0.0.2)
MP=$(free_port 127.0.0.2)
RELAYS="r1 127.0.0.2:$P1"
URL=http://127.0.0.2:$MP

# http METHOD PATH OUT: the status line's code, the body into OUT
http() {
	python3 - "$@" "$URL" <<'PY'
import sys
import urllib.error
import urllib.request

method, path, out, url = sys.argv[1:5]
req = urllib.request.Request(url + path, method=method)
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        body, code = r.read(), r.status
        ctype = r.headers.get('Content-Type', '')
except urllib.error.HTTPError as e:
    body, code, ctype = e.read(), e.code, ''
open(out, 'wb').write(body)
print(code, ctype)
PY
}

relay_start "127.0.0.2:$MP"

case_scrape() {
	local ok=0 grew=0 up=0 last=0 v code server client want reqs got
	local by_origin
	code=$(http GET /metrics "$tmp/m0")
	[ "$code" = "200 text/plain; version=0.0.4; charset=utf-8" ] &&
		prom check "$tmp/m0" &&
		[ "$(prom get "$tmp/m0" nccl_mesh_relay_pairs)" = 0 ] || ok=1
	relayed_server
	# scrapes while the data flows (one scraper, started before the
	# client: a python started per scrape, or late, can take seconds on
	# a busy host and miss the transfer): the count grows
	python3 - "$URL/metrics" "$tmp/client.pid" "$tmp" <<'PY' >"$tmp/scrapes" &
import os
import sys
import time
import urllib.request

url, pidfile, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, tmp)
import prom  # noqa: E402

# until the client ended, at most 120 s
for n in range(1200):
    try:
        os.kill(int(open(pidfile).read()), 0)
    except (FileNotFoundError, ValueError):
        time.sleep(0.1)
        continue
    except ProcessLookupError:
        break
    with urllib.request.urlopen(url, timeout=10) as r:
        path = '%s/scrape.%04d' % (tmp, n)
        open(path, 'wb').write(r.read())
    errors, samples = prom.parse(path)
    sent = prom.total(samples, 'nccl_mesh_relayed_bytes_total',
                      {'direction': 'send', 'peer': '127.0.0.3'})
    pairs = prom.total(samples, 'nccl_mesh_relay_pairs', {})
    print('%d %d %d' % (len(errors), sent or 0, pairs or 0), flush=True)
    for e in errors:
        print(e, file=sys.stderr)
    time.sleep(0.1)
PY
	local scraper=$!
	NCCL_MESH_METRICS_FILE="$tmp/client.prom" relayed_client \
		--sizes 8,1M,4M --iters 1000 --budget 1G
	echo "$client" >"$tmp/client.pid"
	wait "$client" || ok=1
	wait "$scraper" || ok=1
	while read -r bad v pairs; do
		[ "$bad" = 0 ] || ok=1
		[ "$pairs" = 1 ] && up=1
		if [ "$v" -gt "$last" ]; then
			[ "$last" -gt 0 ] && grew=1
			last=$v
		fi
	done <"$tmp/scrapes"
	wait "$server" || ok=1
	# the pair ends when the client's comm closes: its count stays
	sleep 0.5
	http GET /metrics "$tmp/m1" >/dev/null
	prom check "$tmp/m1" && prom check "$tmp/client.prom" || ok=1
	want=$(prom get "$tmp/client.prom" nccl_mesh_bytes_total module=relay \
		direction=send peer=127.0.0.3)
	reqs=$(prom get "$tmp/client.prom" nccl_mesh_requests_total \
		module=relay direction=send)
	got=$(prom get "$tmp/m1" nccl_mesh_relayed_bytes_total direction=send \
		peer=127.0.0.3)
	by_origin=$(prom get "$tmp/m1" nccl_mesh_relayed_bytes_total \
		direction=recv peer=c)
	# what meshperf says it moved
	[ "$want" = "$(json_sum bytes)" ] &&
	[ "$got" = "$by_origin" ] &&
	[ "$got" -ge $((want + 32 * reqs)) ] &&
	[ "$got" -le $((want + 32 * (reqs + 1))) ] &&
	[ "$(prom get "$tmp/m1" nccl_mesh_relay_pairs)" = 0 ] || ok=1
	check $((ok | !grew | !up)) "scrape: grew while relaying ($grew, a pair up: $up), then $got bytes forwarded = $want sent + 32 x $reqs messages"
	[ $((ok | !grew | !up)) -eq 0 ] || { cat "$tmp/check.log" "$tmp/m1"; }
}

case_abuse() {
	local ok=0 r2
	# one python for every request, so that its start-up on a busy host
	# does not count as the endpoint's time
	python3 - "$MP" <<'PY' >"$tmp/abuse.log" 2>&1 || ok=1
import socket
import sys
import time

port = int(sys.argv[1])


def ask(data):
    s = socket.create_connection(('127.0.0.2', port), timeout=10)
    s.sendall(data)
    reply = b''
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply.split(b'\r\n', 1)[0].decode()


cases = [
    (b'GET / HTTP/1.1\r\nHost: x\r\n\r\n', 'HTTP/1.1 404 Not Found'),
    (b'GET /metricsx HTTP/1.1\r\n\r\n', 'HTTP/1.1 404 Not Found'),
    (b'POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n',
     'HTTP/1.1 405 Method Not Allowed'),
    (b'GARBAGE\r\n\r\n', 'HTTP/1.1 400 Bad Request'),
    (b'GET /metrics HTTP/1.1\r\nX: ' + b'a' * 9000,
     'HTTP/1.1 431 Request Header Fields Too Large'),
]
bad = 0
for data, want in cases:
    got = ask(data)
    if got != want:
        print('%r: %r, want %r' % (data[:40], got, want))
        bad += 1
# one that says nothing: a scrape beside it does not wait for it
idle = socket.create_connection(('127.0.0.2', port))
time.sleep(0.2)
t0 = time.monotonic()
got = ask(b'GET /metrics HTTP/1.1\r\n\r\n')
took = time.monotonic() - t0
idle.close()
print('beside a silent client: %s after %.1f s' % (got, took))
if got != 'HTTP/1.1 200 OK' or took > 1.0:
    bad += 1
sys.exit(1 if bad else 0)
PY
	# the address taken: a second relay fails, naming it (its own port,
	# free when picked, may be taken by another process before it binds
	# on a busy host: then it is picked again)
	for _ in 1 2 3; do
		NCCL_MESH_RELAY_NAME=r2 NCCL_MESH_RELAY_PORT=$(free_port 127.0.0.2) \
			NCCL_MESH_RELAY_RELAYS="$RELAYS" \
			NCCL_MESH_METRICS_LISTEN=127.0.0.2:$MP \
			timeout 30 "$meshrelay" >"$tmp/r2.log" 2>&1
		r2=$?
		grep -q "is served by another process" "$tmp/r2.log" || break
	done
	[ $r2 = 1 ] &&
		grep -q "metrics_listen 127.0.0.2:$MP: Address already in use" \
			"$tmp/r2.log" || ok=1
	check $ok "abuse: 404, 405, 400, 431, $(tail -n 1 "$tmp/abuse.log"), a taken address fails the relay"
}

case_scrape
case_abuse
[ $failures -eq 0 ]
