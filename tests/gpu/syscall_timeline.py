#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hops and turnarounds from the system calls of two ranks (syscalls.sh).

Each input file holds one rank's `perf script --ns -F tid,time,event,trace`
lines of raw_syscalls events, each line prefixed with the rank: a
sys_enter is a send call entered, a sys_exit a receive that returned data.
Calls of one kind on one rank less than 3 us apart form one message (NCCL's
Socket reads a message's size and its data in two calls).  The hop from a
rank: its send entered to the other rank's receive that completed the
message; the turnaround at a rank: its receive that completed a message to
its next send.  Prints the median, mean, 10th and 90th percentile of each.
With --durations the files hold every system call's entry and exit, and
it prints how long each kind took instead.
"""
import argparse
import statistics
import sys

BURST_S = 3e-6


def records(paths):
    """(rank, tid, time, entered, nr, ret) of each event line; ret None
    for an entry."""
    for path in paths:
        with open(path) as f:
            for text in f:
                field = text.split()
                if len(field) < 6 or not field[5].isdigit():
                    continue
                entered = "sys_enter" in field[3]
                ret = None if entered or len(field) < 8 else int(field[7])
                yield (int(field[0]), field[1], float(field[2].rstrip(":")),
                       entered, int(field[5]), ret)


def events(paths):
    """(time, rank, kind, what) sorted: a send entered or a receive with
    data (the only events recorded for the timeline)."""
    out = [(t, rank, "send" if entered else "recv",
            "%s %d%s" % ("enter" if entered else "exit", nr,
                         "" if entered else " = %d" % ret))
           for rank, _, t, entered, nr, ret in records(paths)]
    out.sort()
    return out


def messages(evs):
    """[first, last, rank, kind, calls] per burst of one kind on one rank."""
    out = []
    for t, rank, kind, _ in evs:
        if out and out[-1][2] == rank and out[-1][3] == kind and \
                t - out[-1][1] < BURST_S:
            out[-1][1] = t
            out[-1][4] += 1
        else:
            out.append([t, t, rank, kind, 1])
    return out


def intervals(msgs):
    hop, turn = {0: [], 1: []}, {0: [], 1: []}
    sent, received = {0: None, 1: None}, {0: None, 1: None}
    for first, last, rank, kind, _ in msgs:
        if kind == "send":
            if received[rank] is not None:
                turn[rank].append(first - received[rank])
                received[rank] = None
            sent[rank] = first
        else:
            other = 1 - rank
            if sent[other] is not None:
                hop[other].append(last - sent[other])
                sent[other] = None
            received[rank] = last
    return hop, turn


def line(name, xs):
    xs = sorted(xs)
    n = len(xs)
    return "  %-22s %7d  median %6.2f us  mean %6.2f  p10 %6.2f  p90 %6.2f" % (
        name, n, 1e6 * xs[n // 2], 1e6 * statistics.mean(xs),
        1e6 * xs[n // 10], 1e6 * xs[9 * n // 10])


KINDS = {24: "sched_yield", 44: "send", 46: "send", 45: "receive", 47: "receive"}


def durations(paths):
    """Entry to exit of each call, per kind; every event of each thread."""
    entered_at, took = {}, {}
    for _, tid, t, entered, nr, ret in records(paths):
        if entered:
            entered_at[tid] = (t, nr)
            continue
        start = entered_at.pop(tid, None)
        if start is None or start[1] != nr or nr not in KINDS:
            continue
        kind = KINDS[nr]
        if kind == "receive":
            kind += " with data" if ret and ret > 0 else ", empty"
        took.setdefault(kind, []).append(t - start[0])
    if not took:
        print("  no calls in the window: did the run end before it?")
        return 1
    for kind in sorted(took):
        print(line(kind, took[kind]))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", type=int, default=0,
                    help="print this many events from the middle of the run")
    ap.add_argument("--durations", action="store_true",
                    help="how long each kind of call took, entry to exit")
    ap.add_argument("rank_files", nargs=2)
    args = ap.parse_args()
    if args.durations:
        return durations(args.rank_files)
    evs = events(args.rank_files)
    if not evs:
        print("  no events recorded")
        return 1
    mid = len(evs) // 2
    prev = evs[mid][0]
    for t, rank, kind, what in evs[mid:mid + args.show]:
        print("    +%8.2f us  rank %d %-4s %s" % (1e6 * (t - prev), rank,
                                                  kind, what[:60]))
        prev = t
    msgs = messages(evs)
    for kind in ("send", "recv"):
        calls = [m[4] for m in msgs if m[3] == kind]
        print("  %s: %d messages, %.2f calls each" % (
            kind, len(calls), statistics.mean(calls) if calls else 0))
    hop, turn = intervals(msgs)
    for rank in (0, 1):
        for name, xs in (("hop from rank %d" % rank, hop[rank]),
                         ("turnaround at rank %d" % rank, turn[rank])):
            if xs:
                print(line(name, xs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
