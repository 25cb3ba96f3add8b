#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Plain multi-stream TCP across the WAN, where iperf3 is not at hand:
what the shaped link carries without any plugin (tests/gpu/wan/topo.sh,
wan_ceiling).

  ceiling.py serve PORT STREAMS SECS [send]
  ceiling.py dial HOST:PORT STREAMS SECS [send]

The side given `send` sends on all STREAMS connections for SECS seconds,
then closes; the other receives until every stream ends and prints the
payload rate it received, in Gbit/s (1e9 bits).
"""

import socket
import sys
import threading
import time

CHUNK = 1 << 20
MAX_STREAMS = 128


def send_all(sock, deadline):
    buf = bytes(CHUNK)
    while time.monotonic() < deadline:
        sock.sendall(buf)
    sock.shutdown(socket.SHUT_WR)


def receive_all(sock, counts, i):
    buf = bytearray(CHUNK)
    while True:
        n = sock.recv_into(buf)
        if n == 0:
            return
        counts[i] += n


def guarded(fn, errors):
    """fn's OSError kept for main, which then fails: a stream that broke
    would leave a figure too low, not an error."""
    def run(*a):
        try:
            fn(*a)
        except OSError as e:
            errors.append(str(e))
    return run


def connect(role, where, streams):
    if role == "serve":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("0.0.0.0", int(where)))
        ls.listen(streams)
        socks = [ls.accept()[0] for _ in range(streams)]
        ls.close()
        return socks
    host, _, port = where.rpartition(":")
    return [socket.create_connection((host, int(port)), timeout=10)
            for _ in range(streams)]


def main(argv):
    if len(argv) not in (4, 5) or argv[0] not in ("serve", "dial") or \
            (len(argv) == 5 and argv[4] != "send"):
        sys.exit(__doc__)
    role, where, streams, secs = argv[0], argv[1], int(argv[2]), \
        float(argv[3])
    if not 1 <= streams <= MAX_STREAMS or not 0 < secs <= 600:
        sys.exit("STREAMS 1..%d, SECS 0..600" % MAX_STREAMS)
    socks = connect(role, where, streams)
    for s in socks:
        s.settimeout(secs + 30)
    sending = len(argv) == 5
    counts = [0] * streams
    errors = []
    start = time.monotonic()
    if sending:
        threads = [threading.Thread(target=guarded(send_all, errors),
                                    args=(s, start + secs)) for s in socks]
    else:
        threads = [threading.Thread(target=guarded(receive_all, errors),
                                    args=(s, counts, i))
                   for i, s in enumerate(socks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("ceiling.py: %d streams failed: %s" % (len(errors),
                                                         errors[0]))
    if not sending:
        print("%.3f" % (sum(counts) * 8 / (time.monotonic() - start) / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
