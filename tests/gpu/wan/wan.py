#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""NCCL all-reduce between two datacenters: one rank per network namespace
(tests/gpu/wan/topo.sh), real NCCL through PyTorch, every result exact.

Roles:

  wan.py --net Mesh|Socket --ranks a1=NETNS,a2=NETNS,... --master ADDR
         [--duration S] [--sizes 64M,256M] [--batch N] [--expect WHAT,...]
      launcher: starts one rank of this script in each namespace (in the
      order given: rank 0 first), each its own NCCL_HOSTID and
      NCCL_MESH_HOSTNAME (the name before '='), meeting at ADDR (rank 0's
      management address).  The ranks loop over the sizes for S seconds,
      a batch of N in-place all-reduces per size at a time, every batch
      checked exactly; rank 0 prints one JSON line per batch and a summary
      per size.  The launcher then reads each rank's NCCL log for the path
      the variant must have taken (--expect).

  wan.py --worker ...
      one rank (started by the launcher).

  wan.py --net Mesh --check-logs HOST=LOG,... --expect WHAT,...
      only the path checks, on plugin logs of another program (run.sh
      --no-gpu: meshperf).

  wan.py --net Mesh --summary VARIANT=JSONL,... [--ceiling UP,DOWN]
      a table of the variants' results, with each busbw as a share of the
      plain TCP ceiling (Gbit/s each way).

Exit status as tests/gpu/allreduce.py's (0 pass, 1 wrong result, 2 usage,
3 wrong network, 4 a rank crashed, 124 timeout), and 5 when the results
were exact but the logs do not show the path expected.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import allreduce as ar  # noqa: E402  (the launching, Bench and its checks)

EXIT_PATH = 5
MASTER_PORT = 29500
DEFAULT_SIZES = "64M,256M"
# Each in-place call of a batch multiplies the values by the rank count;
# with 4 ranks float32 stays exact for the pattern to about 50 calls.
MAX_BATCH = 20

log = ar.log

# "send rail0: tcp-xdc, 10.1.0.11:40000 -> 192.0.2.2:50003, cross-DC (...)"
CONN_RE = re.compile(r"(send|recv) [^:]+: tcp-xdc, (\S+) -> (\S+), "
                     r"(same-DC|cross-DC)")
# one line per tcp-xdc comm: "... 8 streams on 16 data threads, ..., clear"
STREAMS_RE = re.compile(r"streams on \d+ data threads")
SEALED = "encrypted (AES-256-GCM"
RELAY_SEND_RE = re.compile(r"NET/Mesh/relay: send comm \d+ to \S+: via (\S+)")
WARN_RE = re.compile(r"NCCL WARN")
RESUMED_RE = re.compile(r"INFO NET/Mesh.*resumed")


def host_of(addr):
    """'[::ffff:192.0.2.2]:50003' or '192.0.2.2:50003' -> ('192.0.2.2',
    50003)."""
    m = re.fullmatch(r"\[?(?:::ffff:)?([0-9.]+)\]?:(\d+)", addr)
    return (m.group(1), int(m.group(2))) if m else (addr, 0)


# ---------------------------------------------------------------- worker --

def worker_main(args):
    rank = args.rank
    ar.WORLD = args.world
    out = open(args.out, "w") if args.out and rank == 0 else None
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        log("rank %d: CUDA is not available to PyTorch" % rank)
        return ar.EXIT_USAGE
    visible = torch.cuda.device_count()
    device = torch.device("cuda", rank % (args.gpus or visible))
    torch.cuda.set_device(device)
    # The communicator's setup: PyTorch makes NCCL's communicator with its
    # first collective, and NCCL connects that collective's channels then;
    # a second one of the same size tells the call's own crossings apart.
    first_start = time.monotonic()
    ar.init_group(torch, dist, rank, device, args.timeout)
    probe = torch.full((1,), float(rank + 1), device=device)
    dist.all_reduce(probe)
    torch.cuda.synchronize(device)
    first_s = time.monotonic() - first_start
    again = torch.ones(1, device=device)
    again_start = time.monotonic()
    dist.all_reduce(again)
    torch.cuda.synchronize(device)
    again_s = time.monotonic() - again_start
    net, line = ar.wait_for_used_net(args.log, args.net)
    log("rank %d (%s) on %s (%s): %s" %
        (rank, os.environ.get("NCCL_MESH_HOSTNAME"), device,
         torch.cuda.get_device_name(device), line or "no 'Using network'"))
    if net is None or net.lower() != args.net.lower():
        log("rank %d: FAIL: requested network %s, NCCL used %s" %
            (rank, args.net, net or "unknown"))
        dist.destroy_process_group()
        return ar.EXIT_WRONG_NET
    probe_ok = probe.item() == args.world * (args.world + 1) // 2
    if not probe_ok:
        log("rank %d: FAIL: first all-reduce gave %r, expected %d" %
            (rank, probe.item(), args.world * (args.world + 1) // 2))

    bench = ar.Bench(torch, dist, device, rank)
    first_s = bench.agree_max(first_s, torch.float64)
    again_s = bench.agree_max(again_s, torch.float64)
    if rank == 0:
        ar.emit({"setup": True, "net": args.net,
                 "first_call_ms": round(first_s * 1e3, 1),
                 "next_call_ms": round(again_s * 1e3, 1),
                 "setup_ms": round((first_s - again_s) * 1e3, 1)}, out)
    # NCCL connects a channel's peers on its first use: one untimed batch
    # per size before the clock starts.
    warm_ok = all([bench.run(size, 1, 1)[1] for size in args.sizes])
    if rank == 0 and args.loop_mark:
        open(args.loop_mark, "w").close()
    factor = 2 * (args.world - 1) / args.world
    sums = {size: {"calls": 0, "time": 0.0, "worst": 0.0, "best": 0.0,
                   "ok": True} for size in args.sizes}
    start = time.monotonic()
    while True:
        for size in args.sizes:
            at = time.monotonic() - start
            per_call, ok = bench.run(size, args.batch, 0)
            busbw = size / per_call / 1e9 * factor
            s = sums[size]
            s["calls"] += args.batch
            s["time"] += per_call * args.batch
            s["worst"] = max(s["worst"], per_call * args.batch)
            s["best"] = max(s["best"], busbw)
            s["ok"] = s["ok"] and ok
            if rank == 0:
                ar.emit({"net": args.net, "t_s": round(at, 1),
                         "bytes": size, "calls": args.batch,
                         "time_us": round(per_call * 1e6, 1),
                         "busbw_GBps": round(busbw, 4), "ok": ok}, out)
        # every rank's clock, so that all leave the loop together
        if bench.agree_max(time.monotonic() - start,
                           torch.float64) >= args.duration:
            break
    loop_s = time.monotonic() - start
    ok_all = probe_ok and warm_ok and all(s["ok"] for s in sums.values())
    if rank == 0:
        for size, s in sums.items():
            ar.emit({"size_summary": True, "net": args.net, "bytes": size,
                     "calls": s["calls"],
                     "busbw_GBps": round(size * s["calls"] / s["time"] /
                                         1e9 * factor, 4),
                     "best_batch_busbw_GBps": round(s["best"], 4),
                     "longest_batch_s": round(s["worst"], 2),
                     "ok": s["ok"]}, out)
        ar.emit({"summary": True, "net": args.net, "net_used": net,
                 "ok": ok_all, "ranks": args.world,
                 "loop_s": round(loop_s, 1),
                 "torch": torch.__version__, "nccl": ar.nccl_version(torch),
                 "device": torch.cuda.get_device_name(device),
                 "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))},
                out)
    dist.destroy_process_group()
    if out:
        out.close()
    return ar.EXIT_OK if ok_all else ar.EXIT_WRONG_RESULT


# ------------------------------------------------------------ log checks --

def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n") for l in f]
    except OSError:
        return []


def conns(lines):
    """(direction, local, remote, class) of every tcp-xdc connection."""
    return [m.groups() for l in lines for m in [CONN_RE.search(l)] if m]


# DCs ("a", "b") with a rank that sent across: a ring crosses from one rank
# of each DC only, NCCL's tree from more, so each DC needs one, not each rank.
CROSSED = set()
# The DCs of which a rank sent across through its gateway.
RELAYED = set()


def cross_sends(host, lines):
    """The host's cross-DC tcp-xdc send connections, noted for its DC."""
    cross = [c for c in conns(lines) if c[0] == "send" and c[3] == "cross-DC"]
    if cross:
        CROSSED.add(host[0])
        log("%s: %d cross-DC send connections, e.g. -> %s" %
            (host, len(cross), cross[0][2]))
    else:
        log("%s: no cross-DC send connection (NCCL's algorithm crosses "
            "from other ranks)" % host)
    return cross


def check_nat(host, lines, ext_b):
    """DC A dials DC B at rb's address in a forwarded block; DC B dials DC
    A's own addresses; both as cross-DC."""
    cross = cross_sends(host, lines)
    fails = []
    for _, _, remote, _ in cross:
        addr, port = host_of(remote)
        if host.startswith("a") and (addr != ext_b or not 50000 <= port
                                     < 50020):
            fails.append("%s: dialled DC B at %s, not %s:500xx" %
                         (host, remote, ext_b))
        if host.startswith("b") and not addr.startswith("10.1.0."):
            fails.append("%s: dialled DC A at %s" % (host, remote))
    return fails


def check_routed(host, lines, _ext_b):
    cross = cross_sends(host, lines)
    other = "10.2.0." if host.startswith("a") else "10.1.0."
    bad = [c[2] for c in cross if not host_of(c[2])[0].startswith(other)]
    return ["%s: dialled %s across" % (host, b) for b in bad]


def check_gateway(host, lines, _ext_b):
    """Every cross-DC send goes through this DC's gateway, and no tcp-xdc
    connection leaves the DC: each leg runs to a host of the same dc."""
    gw = "ga" if host.startswith("a") else "gb"
    vias = [m.group(1) for l in lines for m in [RELAY_SEND_RE.search(l)]
            if m]
    fails = []
    if vias:
        RELAYED.add(host[0])
    else:
        log("%s: no relayed send comm (NCCL's algorithm crosses from other "
            "ranks)" % host)
    fails += ["%s: relayed via %s, not %s" % (host, v, gw)
              for v in vias if v != gw]
    fails += ["%s: a tcp-xdc connection crossed by itself: %s -> %s" %
              (host, c[1], c[2]) for c in conns(lines) if c[3] == "cross-DC"]
    if vias:
        log("%s: %d relayed send comms via %s" % (host, len(vias), gw))
    return fails


def check_encrypted(host, lines, _ext_b):
    comms = [l for l in lines if STREAMS_RE.search(l)]
    sealed = [l for l in comms if SEALED in l]
    log("%s: %d of %d tcp-xdc comms encrypted" %
        (host, len(sealed), len(comms)))
    if not comms or len(sealed) != len(comms):
        return ["%s: %d of %d tcp-xdc comms encrypted" %
                (host, len(sealed), len(comms))]
    return []


def check_resumed(host, lines, _ext_b):
    """After faults: the plugin logged each recovery, one INFO line per
    outage ("... out for 61234 ms (...), resumed; ...")."""
    resumed = [l for l in lines if RESUMED_RE.search(l)]
    if not resumed:
        return ["%s: no INFO line says a connection resumed" % host]
    log("%s: %d connections resumed, e.g. %s" %
        (host, len(resumed), resumed[0].split("NET/Mesh/", 1)[-1]))
    return []


CHECKS = {"nat": check_nat, "routed": check_routed,
          "gateway": check_gateway, "encrypt": check_encrypted,
          "resumed": check_resumed}


def check_paths(args, hosts, logs):
    fails = []
    for host, path in zip(hosts, logs):
        lines = read_lines(path)
        for what in args.expect:
            fails += CHECKS[what](host, lines, args.ext_b)
    if {"nat", "routed"} & set(args.expect):
        fails += ["DC %s: no rank sent across by tcp-xdc" % dc.upper()
                  for dc in "ab" if dc not in CROSSED]
    if "gateway" in args.expect:
        fails += ["DC %s: no rank sent across through its gateway" %
                  dc.upper() for dc in "ab" if dc not in RELAYED]
    return fails


def show_warnings(hosts, logs, most=6):
    """The first warnings of each rank: where a fault run fails, the
    plugin's reason is among them."""
    for host, path in zip(hosts, logs):
        warns = [l for l in read_lines(path) if WARN_RE.search(l)]
        if warns:
            log("---- %s: %d warnings, the first %d:" %
                (host, len(warns), min(most, len(warns))))
            for l in warns[:most]:
                print("#   " + l)


def check_logs_main(args):
    pairs = parse_pairs(args.check_logs)
    fails = check_paths(args, [h for h, _ in pairs], [p for _, p in pairs])
    for f in fails:
        log("FAIL: " + f)
    return EXIT_PATH if fails else ar.EXIT_OK


def summary_main(args):
    """One row per variant and size.  The ring's busbw is what each WAN
    direction carries per second (every WAN crossing of a ring moves
    2(n-1)/n of the data), so it is set against the slower direction of
    the plain TCP ceiling."""
    ceiling = None
    if args.ceiling:
        ceiling = min(float(x) for x in args.ceiling.split(",")) / 8
    print("%-12s %8s %7s %11s %11s %9s %8s %s" %
          ("variant", "size", "calls", "busbw GB/s", "best batch",
           "longest s", "of TCP", "result"))
    ok = True
    for name, path in parse_pairs(args.summary):
        rows, summary, setup = [], None, None
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("{"):
                        rec = json.loads(line)
                        if rec.get("size_summary"):
                            rows.append(rec)
                        elif rec.get("summary"):
                            summary = rec
                        elif rec.get("setup"):
                            setup = rec
        except (OSError, ValueError) as e:
            log("%s: %s" % (name, e))
        if summary is None or not summary.get("ok"):
            ok = False
        if setup:
            print("%-12s setup: first all-reduce %.1f ms (communicator "
                  "and its connections), the next %.1f ms: %.1f ms" %
                  (name, setup["first_call_ms"], setup["next_call_ms"],
                   setup["setup_ms"]))
        if not rows:
            print("%-12s %8s %7s %11s %11s %9s %8s %s" %
                  (name, "-", "-", "-", "-", "-", "-",
                   "FAILED (no summary: see its log)"))
            continue
        for r in rows:
            share = ("%.0f%%" % (100 * r["busbw_GBps"] / ceiling)
                     if ceiling else "-")
            print("%-12s %8s %7d %11.3f %11.3f %9.2f %8s %s" %
                  (name, ar.human_size(r["bytes"]), r["calls"],
                   r["busbw_GBps"], r["best_batch_busbw_GBps"],
                   r["longest_batch_s"], share,
                   "exact" if r["ok"] else "WRONG"))
    print("(busbw = algbw x 2(n-1)/n, 1 GB = 1e9 bytes; 'of TCP': of the "
          "slower direction of plain TCP across the WAN)")
    return ar.EXIT_OK if ok else ar.EXIT_WRONG_RESULT


# -------------------------------------------------------------- launcher --

def parse_pairs(text):
    """'NAME=PATH,...' -> [(NAME, PATH), ...]."""
    pairs = []
    for item in text.split(","):
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise argparse.ArgumentTypeError(
                "expected NAME=PATH,..., got %r" % item)
        pairs.append((name, path))
    return pairs


def parse_ranks(text):
    ranks = parse_pairs(text)
    if len(ranks) < 2:
        raise argparse.ArgumentTypeError("at least two ranks")
    return ranks


def in_netns(path):
    """What puts a child into the network namespace bound at `path`:
    (preexec_fn, command prefix)."""
    if hasattr(os, "setns"):
        def enter():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.setns(fd, os.CLONE_NEWNET)
            finally:
                os.close(fd)
        return enter, []
    return None, ["nsenter", "--net=" + path]


def worker_cmd(args, rank, logfile):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--rank", str(rank), "--world", str(len(args.ranks)),
           "--net", args.net, "--sizes", ",".join(map(str, args.sizes)),
           "--duration", str(args.duration), "--batch", str(args.batch),
           "--gpus", str(args.gpus), "--timeout", str(args.timeout),
           "--log", logfile]
    if args.out:
        cmd += ["--out", args.out]
    if args.loop_mark:
        cmd += ["--loop-mark", args.loop_mark]
    return cmd


def rank_env(args, rank, host, logfile):
    env = dict(os.environ)
    env.update({
        "MASTER_ADDR": args.master, "MASTER_PORT": str(MASTER_PORT),
        "RANK": str(rank), "LOCAL_RANK": "0",
        "WORLD_SIZE": str(len(args.ranks)),
        # a host id each: NCCL sees as many nodes as ranks, so every byte
        # between them goes through the network under test
        "NCCL_HOSTID": "wan-" + host,
        "NCCL_MESH_HOSTNAME": host,
        "NCCL_NET": args.net,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "ALL" if args.debug else "INIT,NET,ENV",
        "NCCL_DEBUG_FILE": logfile,
        "NCCL_NVLS_ENABLE": "0",
        "PYTHONUNBUFFERED": "1",
    })
    # A rank whose collective failed would otherwise wait a minute for a
    # debug dump before PyTorch ends it.
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")
    return env


def launcher_main(args):
    logdir = args.log_dir
    os.makedirs(logdir, exist_ok=True)
    hosts = [h for h, _ in args.ranks]
    logs = [os.path.join(logdir, "nccl-%s.log" % h) for h in hosts]
    for path in logs + [p for p in (args.out, args.loop_mark) if p]:
        if os.path.exists(path):
            os.unlink(path)
    log("all-reduce: net=%s ranks=%s sizes=%s duration=%ds batch=%d "
        "master=%s" % (args.net, ",".join(hosts),
                       ",".join(ar.human_size(s) for s in args.sizes),
                       args.duration, args.batch, args.master))
    log("env: " + " ".join("%s=%s" % (k, os.environ[k])
                           for k in sorted(os.environ)
                           if k.startswith("NCCL_")))
    signal.signal(signal.SIGTERM, ar.stop_launcher)
    procs = []
    try:
        for rank, (host, path) in enumerate(args.ranks):
            pre, prefix = in_netns(path)
            procs.append(subprocess.Popen(
                prefix + worker_cmd(args, rank, logs[rank]),
                env=rank_env(args, rank, host, logs[rank]),
                preexec_fn=pre, start_new_session=True))
        codes, timed_out = ar.wait_ranks(procs, args.timeout)
    finally:
        for p in procs:
            ar.kill_group(p)

    failed = timed_out or any(c != 0 for c in codes)
    if failed:
        show_warnings(hosts, logs)
    if timed_out:
        log("FAIL: timed out after %ds (exit codes %s, by host %s)" %
            (args.timeout, codes, ",".join(hosts)))
        return ar.EXIT_TIMEOUT
    if ar.EXIT_USAGE in codes:
        log("FAIL: a rank could not start (its message is above)")
        return ar.EXIT_USAGE
    if any(c not in (ar.EXIT_OK, ar.EXIT_WRONG_RESULT, ar.EXIT_WRONG_NET)
           for c in codes):
        log("FAIL: a rank crashed (exit codes %s, by host %s)" %
            (codes, ",".join(hosts)))
        return ar.EXIT_CRASH
    nets_known, nets_right = ar.check_used_nets(args, logs)
    if not nets_right or not nets_known or ar.EXIT_WRONG_NET in codes:
        log("FAIL: NCCL did not use the requested network %s" % args.net)
        return ar.EXIT_WRONG_NET
    if ar.EXIT_WRONG_RESULT in codes:
        log("FAIL: wrong all-reduce results (see above)")
        return ar.EXIT_WRONG_RESULT
    fails = check_paths(args, hosts, logs)
    for f in fails:
        log("FAIL: " + f)
    if fails:
        return EXIT_PATH
    log("PASS: %s, all results exact%s" %
        (args.net, ", paths as expected (%s)" % ",".join(args.expect)
         if args.expect else ""))
    return ar.EXIT_OK


# ------------------------------------------------------------------ main --

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="NCCL all-reduce across two datacenters of network "
                    "namespaces, results checked exactly.")
    p.add_argument("--net", required=True, help="Mesh or Socket")
    p.add_argument("--ranks", type=parse_ranks,
                   help="HOST=NETNS_FILE,... in rank order")
    p.add_argument("--master", help="rank 0's management address")
    p.add_argument("--sizes", type=ar.parse_sizes,
                   default=ar.parse_sizes(DEFAULT_SIZES),
                   help="all-reduce sizes (default %s)" % DEFAULT_SIZES)
    p.add_argument("--duration", type=int, default=60,
                   help="seconds of the timed loop (default 60)")
    p.add_argument("--batch", type=int, default=5,
                   help="in-place calls per checked batch (default 5, at "
                        "most %d)" % MAX_BATCH)
    p.add_argument("--gpus", type=int, default=0,
                   help="GPUs; rank r on cuda:(r %% N) (default all)")
    p.add_argument("--timeout", type=int, default=600,
                   help="seconds for the whole run, also PyTorch's "
                        "collective timeout (default 600)")
    p.add_argument("--expect", default="",
                   help="paths to find in the logs: %s" % ",".join(CHECKS))
    p.add_argument("--ext-b", default="192.0.2.2",
                   help="DC B's public address (nat check)")
    p.add_argument("--out", help="the JSON lines also go here")
    p.add_argument("--log-dir", help="the NCCL log of each rank goes here")
    p.add_argument("--loop-mark", help="rank 0 creates this file when the "
                   "timed loop starts")
    p.add_argument("--debug", action="store_true",
                   help="NCCL's INFO log of every subsystem")
    p.add_argument("--check-logs", metavar="HOST=LOG,...",
                   help="only check the paths in these logs")
    p.add_argument("--summary", metavar="VARIANT=JSONL,...",
                   help="a table of earlier runs")
    p.add_argument("--ceiling", metavar="UP,DOWN",
                   help="with --summary: plain TCP Gbit/s each way")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.expect = [e for e in args.expect.split(",") if e]
    for e in args.expect:
        if e not in CHECKS:
            p.error("--expect: unknown %r (known: %s)" %
                    (e, ",".join(CHECKS)))
    if not 1 <= args.batch <= MAX_BATCH:
        p.error("--batch must be 1..%d" % MAX_BATCH)
    if args.duration < 0 or args.timeout <= 0 or args.gpus < 0:
        p.error("--duration >= 0, --timeout > 0, --gpus >= 0")
    if args.worker:
        if not args.log or not 0 <= args.rank < args.world:
            p.error("--worker needs --rank, --world and --log")
    elif args.check_logs or args.summary:
        pass
    elif not (args.ranks and args.master and args.log_dir):
        p.error("--ranks, --master and --log-dir are required")
    return args


def main(argv):
    args = parse_args(argv)
    if args.check_logs:
        return check_logs_main(args)
    if args.summary:
        return summary_main(args)
    if not args.worker:
        return launcher_main(args)
    return ar.run_worker(worker_main, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
