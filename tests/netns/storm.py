#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Connection storm: RATE new TCP connections a second to HOST:PORT for
SECONDS, each silent (it never sends a byte) and held HOLD seconds, as an
attacker would, also after the last one opened.  Prints a JSON line when
the last connection is opened ("storm") and exits once the last one was
closed.

usage: storm.py HOST PORT RATE SECONDS HOLD [SOURCE_ADDR]"""
import collections
import errno
import json
import resource
import socket
import sys
import time


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    rate, seconds, hold = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    source = sys.argv[6] if len(sys.argv) > 6 else None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, int(rate * min(hold, seconds)) + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    held = collections.deque()
    opened = failed = 0
    t0 = time.monotonic()
    while True:
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        due = int((now - t0) * rate)
        while opened + failed < due:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            if source:
                s.bind((source, 0))
            rc = s.connect_ex((host, port))
            if rc in (0, errno.EINPROGRESS):
                held.append((now, s))
                opened += 1
            else:
                s.close()
                failed += 1
        while held and now - held[0][0] > hold:
            held.popleft()[1].close()
        time.sleep(0.002)
    print(json.dumps({"event": "storm", "opened": opened, "failed": failed,
                      "seconds": round(time.monotonic() - t0, 2),
                      "rate": rate}), flush=True)
    while held:
        now = time.monotonic()
        while held and now - held[0][0] > hold:
            held.popleft()[1].close()
        time.sleep(0.05)


if __name__ == "__main__":
    main()
