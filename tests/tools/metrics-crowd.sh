#!/bin/bash
# SPDX-License-Identifier: MIT
# meshrelay's metrics endpoint while one address crowds it: a relay r1
# (relay port on 127.0.0.2, metrics on 127.0.0.1) and, from 127.0.0.5,
# 20 slowloris clients (a request line, then a header line every 0.5 s,
# never its end) and 64 idle connections, each one opened again as soon
# as the endpoint ends it.  Meanwhile:
#   - that source holds at most its 8 connections at the endpoint;
#   - five scrapes from 127.0.0.6 are each answered 200, strict
#     Prometheus text, within 1 s of their connect;
#   - a meshperf client routed through r1 (a relay request) moves its
#     bytes, verified, and r1's counters show them relayed;
#   - r1 stops on SIGTERM (status 0) with the crowd still there.
#
# usage: metrics-crowd.sh BUILD_DIR SOURCE_DIR
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

if ! command -v ss >/dev/null; then
	echo "SKIP: no ss (iproute2) to see the endpoint's connections"
	exit 77
fi

CROWD=127.0.0.5
SCRAPER=127.0.0.6
P1=$(free_port 127.0.0.2)
MP=$(free_port 127.0.0.1)
RELAYS="r1 127.0.0.2:$P1"

relay_start "127.0.0.1:$MP"

# The crowd and the scraper, one python (its start-up on a busy host is
# no part of any time measured).  It writes tmp/holding once the crowd
# has held for a second, scrapes five times once tmp/go exists, once more
# when tmp/done does, and ends the crowd when tmp/stop does.
python3 - "$MP" "$CROWD" "$SCRAPER" "$tmp" <<'PY' >"$tmp/crowd.out" 2>"$tmp/crowd.log" &
import os
import socket
import sys
import time

port, crowd, scraper, tmp = int(sys.argv[1]), sys.argv[2], sys.argv[3], \
    sys.argv[4]
sys.path.insert(0, tmp)
import prom  # noqa: E402

SLOW, IDLE = 20, 64
opened = ended = 0


def dial(src, timeout):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(('127.0.0.1', port))
    return s


class Client:
    def __init__(self, slow):
        self.slow, self.s, self.next = slow, None, 0.0

    def step(self, now):
        global opened, ended
        if self.s:
            try:
                if self.s.recv(4096, socket.MSG_DONTWAIT) == b'':
                    raise ConnectionResetError
            except BlockingIOError:
                pass
            except OSError:
                self.s.close()
                self.s = None
                ended += 1
        if not self.s:
            try:
                self.s = dial(crowd, 0.2)
                opened += 1
                if self.slow:
                    self.s.send(b'GET /metrics HTTP/1.1\r\n')
                self.next = now + 0.5
            except OSError:
                if self.s:
                    self.s.close()
                self.s = None
            return
        if self.slow and now >= self.next:
            try:
                self.s.send(b'X-Slow: %d\r\n' % int(now * 10))
            except OSError:
                pass
            self.next = now + 0.5


clients = [Client(i < SLOW) for i in range(SLOW + IDLE)]


def run_crowd(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        now = time.monotonic()
        for c in clients:
            c.step(now)
        time.sleep(0.05)


def scrape(n):
    t0 = time.monotonic()
    s = dial(scraper, 5)
    s.sendall(b'GET /metrics HTTP/1.1\r\nHost: r1\r\n\r\n')
    reply = b''
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    took = time.monotonic() - t0
    s.close()
    head, _, body = reply.partition(b'\r\n\r\n')
    path = '%s/scrape.%s' % (tmp, n)
    open(path, 'wb').write(body)
    return head.split(b'\r\n', 1)[0].decode(), took, path


run_crowd(1.0)
open(tmp + '/holding', 'w').close()
for _ in range(600):
    if os.path.exists(tmp + '/go'):
        break
    run_crowd(0.1)
bad = 0
for n in range(5):
    run_crowd(0.3)
    try:
        status, took, path = scrape(n)
        errors, _ = prom.parse(path)
    except OSError as e:
        status, took, errors = 'no answer (%s)' % e, -1, []
    print('scrape %d: %s%s' % (n, status, took >= 0 and
                               ' in %.3f s' % took or ''), flush=True)
    for e in errors[:5]:
        print('  ' + e, flush=True)
    if status != 'HTTP/1.1 200 OK' or not 0 <= took < 1.0 or errors:
        bad += 1
for _ in range(1200):
    if os.path.exists(tmp + '/done'):
        break
    run_crowd(0.1)
# one more, after the relayed transfer: what r1 forwarded
try:
    status = scrape('final')[0]
except OSError as e:
    status = 'no answer (%s)' % e
print('after the transfer: %s' % status, flush=True)
if status != 'HTTP/1.1 200 OK':
    bad += 1
for _ in range(600):
    if os.path.exists(tmp + '/stop'):
        break
    run_crowd(0.1)
print('crowd: %d connections opened, %d of them ended by the endpoint'
      % (opened, ended), flush=True)
sys.exit(1 if bad else 0)
PY
crowd=$!
pids+=("$crowd")
for _ in $(seq 300); do
	[ -e "$tmp/holding" ] && break
	sleep 0.1
done

# what the crowd's source holds at the endpoint, sampled while it holds:
# the connections r1 took (those in its backlog are no process's yet)
held_max=0
for _ in $(seq 10); do
	n=$(ss -Htnp state established "( sport = :$MP and dst $CROWD )" |
		grep -c "pid=$r1,")
	[ "$n" -gt "$held_max" ] && held_max=$n
	sleep 0.1
done

# a relayed transfer while the crowd holds: the client's relay request
# to r1, the data through it
relayed_server
relayed_client --sizes 8,64K,1M --iters 100
touch "$tmp/go"
ok=0
wait "$client" || ok=1
wait "$server" || ok=1
# the scrapes are done when the crowd reports its last one
for _ in $(seq 300); do
	[ "$(grep -c '^scrape' "$tmp/crowd.out")" -ge 5 ] && break
	sleep 0.1
done
touch "$tmp/done"
for _ in $(seq 300); do
	grep -q '^after the transfer' "$tmp/crowd.out" && break
	sleep 0.1
done
kill -TERM "$r1"
wait "$r1"
stopped=$?
touch "$tmp/stop"
wait "$crowd" || ok=1
cat "$tmp/crowd.out"

sent=$(json_sum bytes 2>/dev/null)
relayed=$(prom get "$tmp/scrape.final" nccl_mesh_relayed_bytes_total \
	direction=send peer=127.0.0.3 2>/dev/null)
[ "$held_max" -ge 1 ] && [ "$held_max" -le 8 ] &&
	[ -n "$sent" ] && [ "$sent" -gt 0 ] &&
	[ -n "$relayed" ] && [ "$relayed" != none ] &&
	[ "$relayed" -ge "$sent" ] && [ "$stopped" = 0 ] || ok=1
check $ok "crowd: its source held $held_max (at most 8); five scrapes from\
 another address 200 within 1 s; $sent bytes sent through the relay\
 meanwhile, ${relayed:-no} bytes forwarded; r1 stopped with status $stopped"
[ $failures -eq 0 ]
