#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A party on the path that replays a connection's REJOIN (rejoin-drop.sh).

A TCP proxy from LISTEN to TARGET that reads the 40-byte hello every
connection starts with (core/ctrl/ctrl_wire.h).  On a control connection
(kind 1) it also reads tcp-xdc's hello (modules/tcp-xdc/tcp_xdc_wire.h),
which carries the connection's rejoin key in clear when no key file is
set.  Once COUNT_AFTER bytes went through the data streams (the transfer
is under way), it sends COUNT REJOINs for stream INDEX of that connection
straight to TARGET, one after the other, each closed the moment its ack
is read, and then one with another key, which must be refused.  While it
does, and for at least HOLD seconds from its first REJOIN, the data goes
through at most TRICKLE bytes a second, so that the transfer lasts the
attack out whatever the host's load (and a budget the REJOINs might have
used up runs out meanwhile); then at full speed again.  What it saw goes to REPORT as key=value lines; the bytes
the data streams carried in all, once TARGET's side closed them all, to
REPORT.end; REPORT.listening once it listens.

usage: rejoin_replay.py LISTEN_PORT TARGET_PORT COUNT_AFTER COUNT INDEX
                        TRICKLE HOLD REPORT
"""
import os
import socket
import struct
import sys
import threading
import time

HOST = "127.0.0.1"
HELLO = 40
ACK = 12                        # length word, "MSAK", status
KIND_CTRL, KIND_STREAM, KIND_REJOIN = 1, 2, 3
XDC_MAGIC = b"TXDC"
XDC_HELLO = 24

listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
count_after, count, index = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
trickle, hold, report = int(sys.argv[6]), float(sys.argv[7]), sys.argv[8]
lock = threading.Lock()
state = {"rejoin": None, "data": 0, "streams": 0}
started = threading.Event()
attacking = threading.Event()


def read_exact(s, n):
    buf = b""
    while len(buf) < n:
        got = s.recv(n - len(buf))
        if not got:
            return buf
        buf += got
    return buf


def sniff(hello, seen):
    """The REJOIN hello of the connection whose control bytes are seen."""
    at = seen.find(XDC_MAGIC)
    if at < 0 or len(seen) < at + XDC_HELLO:
        return None
    key = struct.unpack(">Q", seen[at + 16:at + 24])[0]
    if not key:
        return None
    return (hello[:5] + bytes([KIND_REJOIN]) + hello[6:8] +
            struct.pack("<I", index) + hello[12:20] + struct.pack("<Q", key) +
            hello[28:])


def pump(src, dst, hello=None, data=False):
    seen = b""
    try:
        while True:
            got = src.recv(65536)
            if not got:
                dst.shutdown(socket.SHUT_WR)
                return
            dst.sendall(got)
            if hello is not None and len(seen) < 4096:
                seen += got
                rejoin = sniff(hello, seen)
                if rejoin is not None:
                    with lock:
                        if state["rejoin"] is None:
                            state["rejoin"] = rejoin
                    hello = None
            if data:
                with lock:
                    state["data"] += len(got)
                    if state["data"] >= count_after:
                        started.set()
                if attacking.is_set():
                    time.sleep(len(got) / trickle)
    except OSError:
        pass


def serve(client):
    server = None
    try:
        hello = read_exact(client, HELLO)
        server = socket.create_connection((HOST, target_port))
        server.sendall(hello)
        kind = hello[5] if len(hello) == HELLO else 0
        threading.Thread(target=pump, args=(server, client),
                         daemon=True).start()
        if kind == KIND_STREAM:
            with lock:
                state["streams"] += 1
        pump(client, server, hello if kind == KIND_CTRL else None,
             kind == KIND_STREAM)
        if kind == KIND_STREAM:
            with lock:
                state["streams"] -= 1
                if not state["streams"]:
                    with open(report + ".end", "w") as f:
                        f.write("data=%d\n" % state["data"])
    except OSError:
        if server:
            server.close()
        client.close()


def replay(hello):
    """One REJOIN straight to the listener: the ack's status, or None."""
    s = socket.create_connection((HOST, target_port), timeout=5)
    try:
        s.sendall(hello)
        ack = read_exact(s, ACK)
    except OSError:
        ack = b""
    s.close()
    if len(ack) != ACK or ack[4:8] != b"MSAK":
        return None
    return struct.unpack("<I", ack[8:12])[0]


def attack():
    started.wait(120)
    hello = state["rejoin"]
    lines = ["key_seen=%d" % (hello is not None)]
    if hello is not None:
        taken = 0
        t0 = time.monotonic()
        lines.append("data_before=%d" % state["data"])
        attacking.set()
        for _ in range(count):
            taken += replay(hello) == 0
        took = time.monotonic() - t0
        while time.monotonic() - t0 < hold:
            time.sleep(0.05)
        attacking.clear()
        lines += ["replayed=%d" % count, "acked=%d" % taken,
                  "seconds=%.2f" % took, "data_after=%d" % state["data"]]
        key = struct.unpack("<Q", hello[20:28])[0] ^ 0x5a5a5a5a5a5a5a5a
        wrong = hello[:20] + struct.pack("<Q", key) + hello[28:]
        lines.append("wrong_key_status=%s" % replay(wrong))
    with open(report + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.rename(report + ".tmp", report)


def main():
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((HOST, listen_port))
    lsn.listen(64)
    # the script starts the client only once this is there: a client
    # that dials before, its first connection refused, fails its setup
    open(report + ".listening", "w").close()
    threading.Thread(target=attack, daemon=True).start()
    while True:
        client, _ = lsn.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


if __name__ == "__main__":
    main()
