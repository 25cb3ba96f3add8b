#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two ranks of real NCCL through the plugin, under the test profiler.

Each rank (its own NCCL_HOSTID, so every byte goes through the network
plugin) loads the test profiler before NCCL does (ctypes, the same
library NCCL_PROFILER_PLUGIN names, so one instance), then:

  1. checks all-reduce results at a few sizes with events on (phase
     "on:check"), through allreduce.py's Bench;
  2. alternates events off and on, round by round (the first state of a
     round alternating too): an all-reduce bandwidth block (--bw-size,
     --bw-iters calls) and an 8-byte latency block (--lat-iters calls)
     in each state, every block its own phase ("off:bw:R", "on:lat:R");
  3. writes its profiler's events to OUT/rank<R>.events.

With --absent the ranks run without any profiler and only time the
blocks ("absent:bw:R"): the same job in other processes, for reference.
--summary TOGGLE.jsonl [ABSENT.jsonl [CHECK.jsonl]] prints the bar from
those records (check.py's report says whether the off blocks were off).

Rank 0 writes one JSON line per block to OUT/<name>.jsonl: the state, the
round, busbw (GB/s; with two ranks the same as algbw) or the mean time of
an 8-byte all-reduce (us), the slower rank's.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import allreduce  # noqa: E402  (tests/gpu/allreduce.py)

CHECK_SIZES = [8, 4096, 65536, 1 << 20, 16 << 20]


def worker(args):
    import torch
    import torch.distributed as dist

    rank = args.rank
    ngpu = torch.cuda.device_count()
    if ngpu < 1:
        allreduce.log("rank %d: no GPU visible" % rank)
        return allreduce.EXIT_USAGE
    device = torch.device("cuda", rank % ngpu)
    torch.cuda.set_device(device)
    prof = None
    if not args.absent:
        # Loaded before NCCL: NCCL's dlopen of the same path finds it.
        prof = ctypes.CDLL(args.profiler)
        prof.meshprof_mark.argtypes = [ctypes.c_char_p]
        prof.meshprof_dump.argtypes = [ctypes.c_char_p]
        prof.meshprof_enable.argtypes = [ctypes.c_int]
        prof.meshprof_mark(b"warmup")

    allreduce.init_group(torch, dist, rank, device, args.timeout)
    net, line = allreduce.wait_for_used_net(args.log, "Mesh")
    allreduce.log("rank %d on %s: %s" % (rank, device,
                                          line or "no 'Using network' line"))
    if net != "Mesh":
        return allreduce.EXIT_WRONG_NET
    bench = allreduce.Bench(torch, dist, device, rank)

    def mark(name):
        if prof:
            prof.meshprof_mark(name.encode())

    def state(on):
        if prof:
            prof.meshprof_enable(1 if on else 0)

    ok = True
    if prof:
        mark("on:check")
        for size in CHECK_SIZES:
            _, good = bench.run(size, 3, 1)
            ok = ok and good
            if not good:
                allreduce.log("rank %d: all-reduce of %d bytes WRONG" %
                              (rank, size))

    # zeros: in place, the sums of many calls stay finite
    big = torch.zeros(args.bw_size // 4, dtype=torch.float32, device=device)
    small = torch.zeros(2, dtype=torch.float32, device=device)
    for _ in range(3):
        dist.all_reduce(big)
    for _ in range(50):
        dist.all_reduce(small)
    torch.cuda.synchronize(device)

    def block(tensor, iters):
        bench.sync_ranks()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        torch.cuda.synchronize(device)
        return bench.agree_max(time.perf_counter() - start,
                               torch.float64) / iters

    records = []
    for r in range(args.rounds):
        if args.absent:
            states = ["absent"]
        else:
            states = ["off", "on"] if r % 2 == 0 else ["on", "off"]
        for st in states:
            state(st != "off")
            mark("%s:bw:%d" % (st, r))
            t = block(big, args.bw_iters)
            records.append({"state": st, "round": r, "what": "bw",
                            "bytes": args.bw_size,
                            "busbw_GBps": round(args.bw_size / t / 1e9, 4)})
            mark("%s:lat:%d" % (st, r))
            t = block(small, args.lat_iters)
            records.append({"state": st, "round": r, "what": "lat",
                            "bytes": 8, "time_us": round(t * 1e6, 3)})
    state(True)
    mark("end")
    bench.sync_ranks()
    torch.cuda.synchronize(device)
    # the last requests' stops come from the proxy thread after the kernel
    time.sleep(0.5)
    if prof:
        path = os.path.join(args.out, "rank%d.events" % rank)
        if prof.meshprof_dump(path.encode()) != 0:
            allreduce.log("rank %d: cannot write %s" % (rank, path))
            ok = False
    failed = bench.agree_max(0 if ok else 1, torch.int32)
    if rank == 0:
        with open(os.path.join(args.out, args.name + ".jsonl"), "w") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
    sys.stdout.flush()
    # Skip NCCL's and PyTorch's teardown: a peer gone first can hang it.
    os._exit(allreduce.EXIT_OK if failed == 0 else
             allreduce.EXIT_WRONG_RESULT)


def launcher(args):
    os.makedirs(args.out, exist_ok=True)
    port = allreduce.free_port()
    procs, logs = [], []
    for rank in range(allreduce.WORLD):
        log = os.path.join(args.out, "%s-rank%d.nccl.log" % (args.name, rank))
        logs.append(log)
        env = dict(os.environ)
        env.update({
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "RANK": str(rank), "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(allreduce.WORLD),
            "NCCL_HOSTID": "mesh-host-%d" % rank,
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
            "NCCL_DEBUG_FILE": log, "PYTHONUNBUFFERED": "1",
        })
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        if args.absent:
            env["NCCL_PROFILER_PLUGIN"] = "none"
        else:
            env["NCCL_PROFILER_PLUGIN"] = args.profiler
        cmd = [sys.executable, os.path.abspath(__file__), "--worker",
               "--rank", str(rank), "--log", log] + args.pass_on
        procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))
    codes, timed_out = allreduce.wait_ranks(procs, args.timeout)
    for log in logs:
        try:
            with open(log, errors="replace") as f:
                lines = [x.rstrip() for x in f
                         if "rofiler" in x or "NCCL WARN" in x or
                         "Using network" in x]
        except OSError:
            lines = ["(no log)"]
        print("# %s:" % os.path.basename(log))
        for x in lines[-12:]:
            print("#   " + x)
    if timed_out:
        print("%s: timed out after %d s" % (args.name, args.timeout))
        return allreduce.EXIT_TIMEOUT
    bad = [c for c in codes if c != 0]
    return bad[0] if bad else 0


def median(values):
    v = sorted(values)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2


def read_blocks(path):
    try:
        with open(path) as f:
            return [json.loads(x) for x in f if x.strip()]
    except (OSError, ValueError):
        return []


BAR = 0.03


def summary(paths):
    """The bar from the blocks' records: events on against off."""
    toggle = read_blocks(paths[0])
    absent = read_blocks(paths[1]) if len(paths) > 1 else []
    checks = read_blocks(paths[2]) if len(paths) > 2 else []
    void = [c for c in checks if c.get("off_steps") or
            c.get("off_net_events")]
    if not toggle:
        print("no blocks in %s" % paths[0])
        return 1
    key = {"bw": "busbw_GBps", "lat": "time_us"}
    unit = {"bw": "GB/s busbw", "lat": "us per 8-byte all-reduce"}
    met = True
    for what in ("bw", "lat"):
        by = {}
        rounds = {}
        for rec in toggle + absent:
            if rec["what"] != what:
                continue
            by.setdefault(rec["state"], []).append(rec[key[what]])
            if rec["state"] in ("on", "off"):
                rounds.setdefault(rec["round"], {})[rec["state"]] = \
                    rec[key[what]]
        off, on = median(by.get("off", [])), median(by.get("on", []))
        pairs = [r["on"] / r["off"] for r in rounds.values()
                 if "on" in r and "off" in r and r["off"]]
        line = "%s: off %s, on %s" % (unit[what], off, on)
        if "absent" in by:
            line += ", no profiler %s" % median(by["absent"])
        print(line)
        print("  rounds: off %s, on %s" % (by.get("off"), by.get("on")))
        if off and on and pairs:
            ratio = on / off
            within = (ratio >= 1 - BAR) if what == "bw" else \
                (ratio <= 1 + BAR)
            met = met and within
            print("  on/off %.4f (medians), per round %.4f (median of %d): "
                  "%s" % (ratio, median(pairs), len(pairs),
                          "within 3%" if within else "NOT within 3%"))
        else:
            met = False
            print("  not enough blocks to compare")
    if void:
        met = False
        print("the 'off' blocks had events (NCCL kept the mask of the "
              "comm's start): on/off is void; compare with no profiler")
    print("BAR (events on within 3%% of off): %s" %
          ("met" if met else "not met"))
    return 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profiler", help="libnccl-profiler-meshprof.so")
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="toggle")
    p.add_argument("--absent", action="store_true")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--bw-size", type=int, default=64 << 20)
    p.add_argument("--bw-iters", type=int, default=20)
    p.add_argument("--lat-iters", type=int, default=1500)
    p.add_argument("--timeout", type=int, default=60)
    p.add_argument("--worker", action="store_true")
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--log")
    args = p.parse_args(argv)
    if not args.absent and not args.profiler:
        p.error("--profiler is needed unless --absent")
    if args.profiler:
        args.profiler = os.path.abspath(args.profiler)
    args.out = os.path.abspath(args.out)
    args.pass_on = ["--out", args.out, "--name", args.name,
                    "--rounds", str(args.rounds),
                    "--bw-size", str(args.bw_size),
                    "--bw-iters", str(args.bw_iters),
                    "--lat-iters", str(args.lat_iters),
                    "--timeout", str(args.timeout)]
    if args.absent:
        args.pass_on.append("--absent")
    else:
        args.pass_on += ["--profiler", args.profiler]
    return args


def main(argv):
    if argv[:1] == ["--summary"]:
        return summary(argv[1:])
    args = parse_args(argv)
    if args.worker:
        return allreduce.run_worker(worker, args)
    return launcher(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
