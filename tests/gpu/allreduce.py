#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two-rank all-reduce through real NCCL (via PyTorch), checked and timed.

Three roles in one file:

  allreduce.py --net Mesh|Socket|SHM [options]
      launcher: starts two worker processes (ranks 0 and 1) of this script,
      each with its own NCCL_HOSTID so that NCCL treats them as two nodes and
      must move the data through the network plugin, even on one host and
      one GPU.  Prints one JSON line per size and a summary line, then the
      NCCL log lines that say which network NCCL used.  SHM is a reference:
      one node, NCCL's SHM transport through host memory (see
      HOST_MEMORY_REF).

  allreduce.py --worker ...
      one rank (started by the launcher; not meant to be run by hand).

  allreduce.py --compare MESH.jsonl SOCKET.jsonl [--sweep FILE ...]
      reads the JSON lines of earlier runs and prints a side-by-side table.

Exit status of the launcher: 0 all checks passed, 1 a result was wrong,
2 bad usage or environment, 3 NCCL used another network than requested,
4 a rank crashed, 124 the run timed out.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

EXIT_OK = 0
EXIT_WRONG_RESULT = 1
EXIT_USAGE = 2
EXIT_WRONG_NET = 3
EXIT_CRASH = 4
EXIT_TIMEOUT = 124

WORLD = 2
MIB = 1 << 20
DEFAULT_SIZES = [MIB << i for i in range(9)]  # 1 MiB .. 256 MiB
LARGE = 64 * MIB
# Values double on every in-place all-reduce; float32 stays exact (and
# finite) for the pattern below up to about 2^117 times its start.
MAX_ITERS = 100
# Element i carries (i % PATTERN_MOD) + 1.  A prime modulus never lines up
# with NCCL's power-of-two chunks, so a chunk landing at the wrong offset
# changes the values and is caught.
PATTERN_MOD = 251

USED_NET_RE = re.compile(r"Using network (\S+)")
# --net SHM is a reference, not a network: both ranks on one "node" with
# GPU peer access off, so NCCL's SHM transport carries the data through
# host memory.  That is the path a network plugin without GPUDirect also
# takes (the GPU writes into and reads from pinned host buffers), less
# the network; its busbw bounds what any such plugin can reach on the host.
HOST_MEMORY_REF = "SHM"
USED_SHM_RE = re.compile(r" via (SHM)/")
# NCCL log lines worth showing even without --debug.
NOTABLE_RE = re.compile(r"NET/Plugin|NET/Mesh|NCCL WARN|Using network|"
                        r"NCCL version|NCCL_NET_PLUGIN|[Nn]etwork plugin|"
                        r"NET plugin")
NCCL_ENV_SHOWN = ("NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_NET_PLUGIN_REF_COUNT",
                  "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE",
                  "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD",
                  "NCCL_MESH_CONF", "NCCL_MESH_MODULE_PATH")


def log(msg):
    """Comment lines start with '#', so JSON readers can skip them."""
    print("# " + msg, flush=True)


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.I)
    if not m:
        raise argparse.ArgumentTypeError(
            "bad size %r (expected e.g. 4096, 64K, 1M, 1G)" % text)
    shift = {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
    size = int(m.group(1)) << shift
    if size <= 0 or size % 4:
        raise argparse.ArgumentTypeError(
            "size %r must be a positive multiple of 4 bytes "
            "(float32 elements)" % text)
    return size


def parse_sizes(text):
    sizes = [parse_size(s) for s in text.split(",") if s.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sorted(set(sizes))


def human_size(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return "%d %s" % (nbytes >> shift, unit)
    return "%d B" % nbytes


def iters_for(size, args):
    if args.iters:
        return args.iters
    return 5 if size >= LARGE else 20


def warmup_for(size, args):
    if args.warmup is not None:
        return args.warmup
    return 2 if size >= LARGE else 5


def is_host_memory_ref(net):
    return net.upper() == HOST_MEMORY_REF


def used_net_regex(requested):
    """What in the log names the path used: the network, or SHM's channels."""
    return USED_SHM_RE if is_host_memory_ref(requested) else USED_NET_RE


def used_net_lines(path, requested):
    """The lines of one rank's NCCL log that name the path it used."""
    regex = used_net_regex(requested)
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n") for l in f if regex.search(l)]
    except OSError:
        return []


def used_net(path, requested):
    lines = used_net_lines(path, requested)
    if not lines:
        return None, None
    return used_net_regex(requested).search(lines[-1]).group(1), lines[-1]


# ---------------------------------------------------------------- worker --

def emit(record, out):
    line = json.dumps(record, sort_keys=False)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


def init_group(torch, dist, rank, device, timeout_s):
    import datetime
    kwargs = dict(backend="nccl", init_method="env://", rank=rank,
                  world_size=WORLD,
                  timeout=datetime.timedelta(seconds=timeout_s))
    try:
        # Binding the device makes PyTorch create the communicator now
        # and keeps barrier/destroy from guessing devices.
        dist.init_process_group(device_id=device, **kwargs)
    except TypeError:
        dist.init_process_group(**kwargs)


def wait_for_used_net(path, requested, seconds=10.0):
    """NCCL logs the line while creating the communicator; allow it to land."""
    deadline = time.monotonic() + seconds
    while True:
        net, line = used_net(path, requested)
        if net or time.monotonic() > deadline:
            return net, line
        time.sleep(0.1)


class Bench:
    """The collectives of one size, on one rank."""

    def __init__(self, torch, dist, device, rank):
        self.torch = torch
        self.dist = dist
        self.device = device
        self.rank = rank

    def sync_ranks(self):
        """A tiny all-reduce, so both ranks start the timed loop together."""
        t = self.torch.ones(1, device=self.device)
        self.dist.all_reduce(t)
        self.torch.cuda.synchronize(self.device)

    def agree_max(self, value, dtype):
        t = self.torch.tensor([value], dtype=dtype, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.item()

    def make_data(self, nbytes):
        torch = self.torch
        n = nbytes // 4
        pattern = torch.arange(n, dtype=torch.int32, device=self.device)
        pattern = (pattern % PATTERN_MOD + 1).to(torch.float32)
        src = pattern * float(self.rank + 1)
        # Sum over ranks of (rank + 1) * pattern.
        expected = pattern * float(WORLD * (WORLD + 1) // 2)
        del pattern
        return src, expected

    def report_mismatch(self, nbytes, buf, expected, timed_ok):
        wrong = buf != expected
        nwrong = int(wrong.sum().item())
        first = int(wrong.to(self.torch.uint8).argmax().item())
        detail = "single call: %d of %d elements wrong" % (
            nwrong, buf.numel())
        if nwrong:
            detail += ", first at %d: got %r, expected %r" % (
                first, buf[first].item(), expected[first].item())
        log("rank %d: %s: RESULT MISMATCH (timed loop %s; %s)" %
            (self.rank, human_size(nbytes),
             "ok" if timed_ok else "WRONG", detail))

    def run(self, nbytes, iters, warmup):
        torch, dist = self.torch, self.dist
        src, expected = self.make_data(nbytes)
        buf = src.clone()
        for _ in range(warmup):
            dist.all_reduce(buf)
        buf.copy_(src)
        self.sync_ranks()

        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - start

        # Every timed call fed the next one, so a single bad transfer
        # anywhere in the loop shows up here.  Each call multiplies the
        # values by WORLD (the ranks hold the same buffer after the first).
        timed_ok = torch.equal(buf, expected * float(WORLD ** (iters - 1)))
        buf.copy_(src)
        dist.all_reduce(buf)
        once_ok = torch.equal(buf, expected)
        torch.cuda.synchronize(self.device)
        if not (timed_ok and once_ok):
            self.report_mismatch(nbytes, buf, expected, timed_ok)
        del src, expected, buf

        # The slower rank decides the time; any rank's failure fails all.
        elapsed = self.agree_max(elapsed, torch.float64)
        failed = self.agree_max(0 if timed_ok and once_ok else 1,
                                torch.int32)
        return elapsed / iters, failed == 0


def nccl_version(torch):
    """The NCCL library PyTorch loaded: a tuple, or an int in old releases."""
    v = torch.cuda.nccl.version()
    if isinstance(v, int):
        v = (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else \
            (v // 1000, v // 100 % 10, v % 100)
    return ".".join(map(str, v))


def worker_main(args):
    rank = args.rank
    out = open(args.out, "w") if args.out and rank == 0 else None
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        log("rank %d: CUDA is not available to PyTorch" % rank)
        return EXIT_USAGE
    visible = torch.cuda.device_count()
    ngpus = args.gpus or visible
    if ngpus > visible:
        log("rank %d: --gpus %d but only %d visible" %
            (rank, ngpus, visible))
        return EXIT_USAGE
    device = torch.device("cuda", rank % ngpus)
    torch.cuda.set_device(device)

    init_group(torch, dist, rank, device, args.timeout)
    probe = torch.full((1,), float(rank + 1), device=device)
    dist.all_reduce(probe)
    torch.cuda.synchronize(device)

    net, line = wait_for_used_net(args.log, args.net)
    log("rank %d on %s (%s), NCCL_HOSTID=%s: %s" %
        (rank, device, torch.cuda.get_device_name(device),
         os.environ.get("NCCL_HOSTID"), line or "no 'Using network' line"))
    if net is None or net.lower() != args.net.lower():
        log("rank %d: FAIL: requested network %s, NCCL used %s" %
            (rank, args.net, net or "unknown"))
        dist.destroy_process_group()
        return EXIT_WRONG_NET
    probe_ok = probe.item() == WORLD * (WORLD + 1) // 2
    if not probe_ok:
        log("rank %d: FAIL: first all-reduce gave %r, expected %d" %
            (rank, probe.item(), WORLD * (WORLD + 1) // 2))

    bench = Bench(torch, dist, device, rank)
    failed = []
    records = []
    for nbytes in args.sizes:
        iters = iters_for(nbytes, args)
        t, ok = bench.run(nbytes, iters, warmup_for(nbytes, args))
        algbw = nbytes / t / 1e9
        rec = {"net": args.net, "bytes": nbytes,
               "time_us": round(t * 1e6, 2),
               "algbw_GBps": round(algbw, 4),
               "busbw_GBps": round(algbw * 2 * (WORLD - 1) / WORLD, 4),
               "ok": ok, "iters": iters}
        records.append(rec)
        if not ok:
            failed.append(nbytes)
        if rank == 0:
            emit(rec, out)

    dist.destroy_process_group()
    if rank == 0:
        best = max(records, key=lambda r: r["busbw_GBps"])
        emit({"summary": True, "net": args.net, "net_used": net,
              "ok": not failed and probe_ok,
              "sizes": len(records), "failed_bytes": failed,
              "best_busbw_GBps": best["busbw_GBps"],
              "best_bytes": best["bytes"],
              "torch": torch.__version__,
              "nccl": nccl_version(torch),
              "gpus": ngpus,
              "device": torch.cuda.get_device_name(device),
              "env": {k: os.environ[k] for k in NCCL_ENV_SHOWN
                      if k in os.environ}}, out)
    if out:
        out.close()
    return EXIT_WRONG_RESULT if failed or not probe_ok else EXIT_OK


# -------------------------------------------------------------- launcher --

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(args, rank, port, logfile):
    env = dict(os.environ)
    env.update({
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(WORLD),
        # Read once per process by NCCL: distinct ids make the two
        # ranks two "nodes", so only the network can connect them.
        "NCCL_HOSTID": "mesh-host-%d" % rank,
        "NCCL_NET": args.net,
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "ALL" if args.debug else "INIT,NET,ENV",
        "NCCL_DEBUG_FILE": logfile,
        "PYTHONUNBUFFERED": "1",
    })
    if is_host_memory_ref(args.net):
        env.update({"NCCL_HOSTID": "mesh-host-shm", "NCCL_NET": "Socket",
                    "NCCL_NET_PLUGIN": "none", "NCCL_P2P_DISABLE": "1",
                    "NCCL_SHM_DISABLE": "0"})
    # NVLink SHARP cannot apply between two "nodes"; keep NCCL from
    # probing multicast at all.
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    return env


def worker_cmd(args, rank, logfile, out):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--rank", str(rank), "--net", args.net,
           "--sizes", ",".join(map(str, args.sizes)),
           "--gpus", str(args.gpus), "--timeout", str(args.timeout),
           "--log", logfile]
    if args.iters:
        cmd += ["--iters", str(args.iters)]
    if args.warmup is not None:
        cmd += ["--warmup", str(args.warmup)]
    if out:
        cmd += ["--out", out]
    return cmd


def kill_group(proc):
    """Each rank leads its own process group: end it and its children."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def wait_ranks(procs, timeout, grace=20.0):
    """Waits for all ranks.  Returns (returncodes, timed_out).

    When one rank dies, the other usually blocks in NCCL waiting for it;
    give it a short grace period, then end it.
    """
    deadline = time.monotonic() + timeout
    first_exit = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return codes, False
        now = time.monotonic()
        if first_exit is None and any(c not in (None, 0) for c in codes):
            first_exit = now
        if now > deadline:
            for p in procs:
                kill_group(p)
            return [p.poll() for p in procs], True
        if first_exit is not None and now - first_exit > grace:
            for p in procs:
                kill_group(p)
            return [p.poll() for p in procs], False
        time.sleep(0.2)


def show_logs(logs, debug, failed):
    for rank, path in enumerate(logs):
        try:
            with open(path, errors="replace") as f:
                lines = [l.rstrip("\n") for l in f]
        except OSError as e:
            log("rank %d: no NCCL log (%s)" % (rank, e))
            continue
        if debug:
            log("---- rank %d NCCL log %s (%d lines)" %
                (rank, path, len(lines)))
            for l in lines:
                print("#   " + l)
            continue
        notable = [l for l in lines if NOTABLE_RE.search(l)]
        log("---- rank %d NCCL log %s: %d notable of %d lines" %
            (rank, path, len(notable), len(lines)))
        for l in notable[:40]:
            print("#   " + l)
        if failed and lines:
            log("---- rank %d: last lines of the NCCL log" % rank)
            for l in lines[-30:]:
                print("#   " + l)
    sys.stdout.flush()


def check_used_nets(args, logs):
    """Returns (every rank named its network, every named one is right)."""
    all_known, all_right = True, True
    for rank, path in enumerate(logs):
        net, line = used_net(path, args.net)
        if net is None:
            log("rank %d: FAIL: NCCL never said which network it "
                "used (no 'Using network' line in %s)" % (rank, path))
            all_known = False
        elif net.lower() != args.net.lower():
            log("rank %d: FAIL: requested %s, %s" %
                (rank, args.net, line.strip()))
            all_right = False
        else:
            log("rank %d used network %s (requested %s): %s" %
                (rank, net, args.net, line.strip()))
    return all_known, all_right


def stop_launcher(signum, frame):
    raise SystemExit(128 + signum)


def launcher_main(args):
    logdir = args.log_dir or tempfile.mkdtemp(prefix="nccl-mesh-gpu-")
    os.makedirs(logdir, exist_ok=True)
    port = free_port()
    logs = [os.path.join(logdir, "nccl-%s-rank%d.log" %
                         (args.net.lower(), r)) for r in range(WORLD)]
    for path in logs + ([args.out] if args.out else []):
        if os.path.exists(path):
            os.unlink(path)

    log("all-reduce: net=%s ranks=%d sizes=%s gpus=%s timeout=%ds" %
        (args.net, WORLD, ",".join(human_size(s) for s in args.sizes),
         args.gpus or "all visible", args.timeout))
    log("env: " + (" ".join("%s=%s" % (k, os.environ[k])
                            for k in NCCL_ENV_SHOWN if k in os.environ) or
                   "no NCCL settings"))
    log("NCCL logs: " + logdir)

    # The ranks run in their own sessions (so that a hung rank can be
    # ended with its children); end them too if this launcher is stopped.
    signal.signal(signal.SIGTERM, stop_launcher)
    procs = []
    try:
        for r in range(WORLD):
            procs.append(subprocess.Popen(
                worker_cmd(args, r, logs[r], args.out),
                env=rank_env(args, r, port, logs[r]),
                start_new_session=True))
        codes, timed_out = wait_ranks(procs, args.timeout)
    finally:
        for p in procs:
            kill_group(p)

    if EXIT_USAGE in codes:
        log("FAIL: a rank could not start (its message is above)")
        return EXIT_USAGE
    failed = timed_out or any(c != 0 for c in codes)
    show_logs(logs, args.debug, failed)
    nets_known, nets_right = check_used_nets(args, logs)
    crashed = any(c not in (EXIT_OK, EXIT_WRONG_RESULT, EXIT_WRONG_NET)
                  for c in codes)

    if timed_out:
        log("FAIL: timed out after %ds (rank exit codes %s)" %
            (args.timeout, codes))
        return EXIT_TIMEOUT
    if not nets_right or EXIT_WRONG_NET in codes:
        log("FAIL: NCCL did not use the requested network %s" % args.net)
        return EXIT_WRONG_NET
    if crashed:
        log("FAIL: a rank crashed (exit codes %s)" % codes)
        return EXIT_CRASH
    if not nets_known:
        return EXIT_WRONG_NET
    if EXIT_WRONG_RESULT in codes:
        log("FAIL: wrong all-reduce results (see above)")
        return EXIT_WRONG_RESULT
    log("PASS: %s, all results exact" % args.net)
    return EXIT_OK


# --------------------------------------------------------------- compare --

def read_results(path):
    """Returns ({bytes: record}, summary or None) from a JSON-lines file."""
    rows, summary = {}, None
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                rec = json.loads(line)
                if rec.get("summary"):
                    summary = rec
                elif "bytes" in rec:
                    rows[rec["bytes"]] = rec
    except (OSError, ValueError) as e:
        log("cannot read %s: %s" % (path, e))
    return rows, summary


def fmt_bw(rec):
    if rec is None:
        return "n/a"
    return "%.2f%s" % (rec["busbw_GBps"], "" if rec["ok"] else " FAIL")


def ratio(a, b):
    if a is None or b is None or b["busbw_GBps"] <= 0:
        return None
    return a["busbw_GBps"] / b["busbw_GBps"]


def run_status(name, rows, summary):
    if summary is None:
        return ("%s: INCOMPLETE (no summary line: the run failed, "
                "see its console log)" % name)
    state = "ok" if summary.get("ok") else "FAILED"
    return "%s: %s, %d sizes, net used %s, NCCL %s, torch %s, %s" % (
        name, state, summary.get("sizes", len(rows)),
        summary.get("net_used"), summary.get("nccl"),
        summary.get("torch"), summary.get("device"))


def report_size(tables, at):
    """`at` if every table has it, else the largest size they share."""
    common = set.intersection(*(set(t) for t in tables)) if tables else set()
    if at in common or not common:
        return at
    return max(common)


def print_sweep(paths, at, mesh_rows):
    runs = [(path,) + read_results(path) for path in paths]
    at = report_size([rows for _, rows, _ in runs], at)
    print()
    print("Socket sweep (busbw GB/s at %s):" % human_size(at))
    print("  %8s %8s %10s" % ("nthreads", "nsocks", "busbw"))
    all_ok, best = True, None
    for path, rows, summary in runs:
        env = (summary or {}).get("env", {})
        rec = rows.get(at)
        all_ok = all_ok and summary is not None and summary.get("ok")
        print("  %8s %8s %10s" % (env.get("NCCL_SOCKET_NTHREADS", "?"),
                                   env.get("NCCL_NSOCKS_PERTHREAD", "?"),
                                   fmt_bw(rec) if summary else
                                   "INCOMPLETE"))
        if rec and rec["ok"] and (best is None or
                                  rec["busbw_GBps"] > best[0]["busbw_GBps"]):
            best = (rec, env)
    if best:
        rec, env = best
        r = ratio(mesh_rows.get(at), rec)
        print("best Socket at %s: NCCL_SOCKET_NTHREADS=%s "
              "NCCL_NSOCKS_PERTHREAD=%s busbw %.2f GB/s%s" %
              (human_size(at), env.get("NCCL_SOCKET_NTHREADS"),
               env.get("NCCL_NSOCKS_PERTHREAD"), rec["busbw_GBps"],
               "; Mesh/best-Socket = %.2fx" % r if r else ""))
    return all_ok


def compare_main(args):
    mesh_rows, mesh_sum = read_results(args.compare[0])
    sock_rows, sock_sum = read_results(args.compare[1])
    print("%10s %14s %16s %12s" %
          ("size", "Mesh busbw", "Socket busbw", "Mesh/Socket"))
    for size in sorted(set(mesh_rows) | set(sock_rows)):
        m, s = mesh_rows.get(size), sock_rows.get(size)
        r = ratio(m, s)
        print("%10s %14s %16s %12s" %
              (human_size(size), fmt_bw(m), fmt_bw(s),
               "%.2fx" % r if r else "n/a"))
    print("(busbw in GB/s, 1 GB = 1e9 bytes; FAIL = result not exact)")
    at = report_size([mesh_rows, sock_rows], args.ratio_at)
    r = ratio(mesh_rows.get(at), sock_rows.get(at))
    print("%s ratio Mesh/Socket: %s" %
          (human_size(at), "%.2fx" % r if r else "n/a"))
    print(run_status("Mesh", mesh_rows, mesh_sum))
    print(run_status("Socket", sock_rows, sock_sum))

    ok = all(s is not None and s.get("ok") for s in (mesh_sum, sock_sum))
    if args.sweep:
        ok = print_sweep(args.sweep, args.ratio_at, mesh_rows) and ok
    return EXIT_OK if ok else EXIT_WRONG_RESULT


# ------------------------------------------------------------------ main --

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Two-rank NCCL all-reduce through PyTorch: exact "
                    "result check and bus bandwidth per size.")
    p.add_argument("--net", default=os.environ.get("NCCL_NET"),
                   help="network NCCL must use: Mesh or Socket, or SHM "
                        "for the host-memory reference (both ranks on one "
                        "node, NCCL's SHM transport) (default: $NCCL_NET)")
    p.add_argument("--sizes", type=parse_sizes, default=DEFAULT_SIZES,
                   help="comma-separated sizes in bytes, K/M/G suffixes "
                        "allowed (default: 1M,2M,...,256M)")
    p.add_argument("--iters", type=int, default=0,
                   help="timed calls per size (default: 20, or 5 from "
                        "64 MiB; at most %d)" % MAX_ITERS)
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed calls per size (default: 5, or 2 from "
                        "64 MiB)")
    p.add_argument("--gpus", type=int, default=0,
                   help="GPUs to use; rank r runs on cuda:(r %% N) "
                        "(default: all visible)")
    p.add_argument("--timeout", type=int, default=300,
                   help="seconds for the whole run (default: 300)")
    p.add_argument("--debug", action="store_true",
                   help="full NCCL INFO log (all subsystems), printed at "
                        "the end")
    p.add_argument("--out", help="also write the JSON lines to this file")
    p.add_argument("--log-dir", help="where the per-rank NCCL logs go "
                        "(default: a new temporary directory)")
    p.add_argument("--compare", nargs=2, metavar=("MESH", "SOCKET"),
                   help="print a table from two JSON-lines files")
    p.add_argument("--sweep", nargs="*", default=[],
                   help="with --compare: JSON-lines files of Socket runs "
                        "with other NCCL_SOCKET_NTHREADS/NSOCKS_PERTHREAD")
    p.add_argument("--ratio-at", type=parse_size, default=256 * MIB,
                   help="with --compare: size whose ratio is reported "
                        "(default: 256M)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.compare:
        return args
    if not args.net:
        p.error("--net (or NCCL_NET) is required")
    if not 1 <= (args.iters or 1) <= MAX_ITERS:
        p.error("--iters must be 1..%d" % MAX_ITERS)
    if args.warmup is not None and args.warmup < 0:
        p.error("--warmup must be >= 0")
    if args.gpus < 0 or args.timeout <= 0:
        p.error("--gpus must be >= 0 and --timeout > 0")
    if args.worker and (args.rank not in range(WORLD) or not args.log):
        p.error("--worker needs --rank 0..%d and --log" % (WORLD - 1))
    return args


def run_worker(worker, args):
    """A rank's body; a crash ends the process at once (exit EXIT_CRASH).

    Interpreter teardown is skipped: NCCL may hang waiting for a peer; the
    launcher ends the other ranks."""
    try:
        return worker(args)
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_CRASH)


def main(argv):
    args = parse_args(argv)
    if args.compare:
        return compare_main(args)
    if not args.worker:
        return launcher_main(args)
    return run_worker(worker_main, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
