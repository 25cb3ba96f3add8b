#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Three NCCL ranks where one pair has no direct path: it goes through the
relay in the third rank's process.  Real NCCL (via PyTorch), results exact.

Roles:

  relay.py --conf FILE --algo Ring|Tree [options]
      launcher: checks each rank's config with meshinfo (--meshinfo), then
      starts three ranks of this script.  Each has its own NCCL_HOSTID (so
      NCCL connects them through the net plugin), advertises its own
      loopback address 127.0.0.1R and serves its relay rR.  Rank 0 routes
      127.0.0.12 via r1 and rank 2 routes 127.0.0.10 via r1, so the pair
      0 <-> 2 is relayed by rank 1's process; the other pairs are direct.
      The ranks run all-reduce (NCCL_ALGO as given) and all-to-all at each
      size, checked exactly; then the launcher reads the logs: NCCL used
      Mesh, its connections between 0 and 2 exist, our relay logged them on
      both ends and rank 1 forwarded them, and no direct pair was relayed.

  relay.py --check-only --conf FILE --meshinfo PATH
      only the meshinfo checks of the three ranks' configs (no GPU).

  relay.py --summary FILE...
      a table of earlier runs' JSON lines; exit 1 unless all passed.

Exit status as allreduce.py's (0 pass, 1 wrong result, 2 usage, 3 wrong
network, 4 crash, 124 timeout), and 5 when the logs do not show the route.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allreduce as ar  # noqa: E402  (shares the launching and checks)

# allreduce.py's helpers (init_group, Bench, rank_env) size the job by
# its module-level WORLD; this test has three ranks.
WORLD = 3
ar.WORLD = WORLD

EXIT_ROUTE = 5
RELAYED = (0, 2)                  # the pair without a direct path
VIA = 1                           # whose process relays it
DEFAULT_SIZES = "1K,100K,1M,10M,64M"
MAX_ITERS = 9
ALLTOALL_MOD = (1 << 31) - 1

log = ar.log


def rank_addr(rank):
    return "127.0.0.%d" % (10 + rank)


def routes_of(rank):
    """Rank 0 and rank 2 reach each other only through r1."""
    a, b = RELAYED
    if rank == a:
        return "%s via r%d" % (rank_addr(b), VIA)
    if rank == b:
        return "%s via r%d" % (rank_addr(a), VIA)
    return None


def mesh_env(rank, relay_ports):
    """The NCCL_MESH_* settings that differ per rank."""
    env = {
        "NCCL_MESH_ADVERTISE_ADDRS": rank_addr(rank),
        "NCCL_MESH_ADVERTISE_LOCAL": "false",
        "NCCL_MESH_RELAY_NAME": "r%d" % rank,
        "NCCL_MESH_RELAY_PORT": str(relay_ports[rank]),
        # a list in the environment is comma-separated
        "NCCL_MESH_RELAY_RELAYS": ",".join(
            "r%d %s:%d" % (r, rank_addr(r), relay_ports[r])
            for r in range(WORLD)),
    }
    if routes_of(rank):
        env["NCCL_MESH_RELAY_ROUTES"] = routes_of(rank)
    return env


def without_rank_settings(env):
    """Drops inherited per-rank mesh settings, so that nothing from the
    caller's environment changes the topology under test."""
    for k in list(env):
        if k.startswith(("NCCL_MESH_RELAY_", "NCCL_MESH_ADVERTISE_")):
            del env[k]
    return env


def base_env():
    return without_rank_settings(dict(os.environ))


# ---------------------------------------------------------------- worker --

class AllToAll:
    """all_to_all_single of `nbytes` to every peer, checked exactly.

    Element k of the block rank s sends to rank d carries
    (7k + 1000003 s + 7919 d) mod (2^31 - 1): a block from the wrong
    sender, for the wrong receiver or at the wrong offset reads wrong.
    """

    def __init__(self, torch, dist, device, rank):
        self.torch, self.dist = torch, dist
        self.device, self.rank = device, rank

    def values(self, m, sender_of, receiver_of):
        torch = self.torch
        k = torch.arange(m * WORLD, dtype=torch.int64,
                         device=self.device) % m
        v = (k * 7 + sender_of * 1000003 + receiver_of * 7919) % \
            ALLTOALL_MOD
        return v.to(torch.int32)

    def run(self, nbytes, iters):
        torch, dist = self.torch, self.dist
        m = nbytes // 4
        block = torch.arange(m * WORLD, dtype=torch.int64,
                             device=self.device) // m
        src = self.values(m, self.rank, block)
        expected = self.values(m, block, self.rank)
        del block
        out = torch.empty_like(expected)
        oks = []
        torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        for _ in range(iters):
            out.fill_(-1)
            dist.all_to_all_single(out, src)
            # kept on the GPU: no sync inside the loop
            oks.append((out == expected).all())
        torch.cuda.synchronize(self.device)
        elapsed = time.perf_counter() - start
        ok = all(bool(o) for o in oks)
        if not ok:
            wrong = out != expected
            first = int(wrong.to(torch.uint8).argmax().item())
            log("rank %d: all-to-all %s: RESULT MISMATCH: %d of %d "
                "elements wrong in the last call, first at %d (from rank "
                "%d): got %d, expected %d" %
                (self.rank, ar.human_size(nbytes), int(wrong.sum().item()),
                 out.numel(), first, first // m, int(out[first].item()),
                 int(expected[first].item())))
        del src, expected, out
        bench = ar.Bench(torch, dist, self.device, self.rank)
        elapsed = bench.agree_max(elapsed, torch.float64)
        failed = bench.agree_max(0 if ok else 1, torch.int32)
        return elapsed / iters, failed == 0


def close_in_order(dist, rank, logfile, seconds=30.0):
    """The relayed ranks close first, the relaying rank after them, so
    that their connections end over a live relay (and its log says how
    each ended) rather than into a process already gone."""
    done = os.path.join(os.path.dirname(logfile), "closed-rank%d")
    if rank != VIA:
        dist.destroy_process_group()
        open(done % rank, "w").close()
        return
    deadline = time.monotonic() + seconds
    while not all(os.path.exists(done % r) for r in RELAYED):
        if time.monotonic() > deadline:
            log("rank %d: the relayed ranks did not close within %ds" %
                (rank, seconds))
            break
        time.sleep(0.1)
    dist.destroy_process_group()


def record(op, algo, nbytes, t, ok, iters, busbw_factor, moved=None):
    """nbytes: the size asked for; moved: bytes per rank per call (the
    nccl-tests convention for algbw), nbytes unless given."""
    algbw = (moved or nbytes) / t / 1e9
    return {"op": op, "algo": algo, "bytes": nbytes,
            "time_us": round(t * 1e6, 2), "algbw_GBps": round(algbw, 4),
            "busbw_GBps": round(algbw * busbw_factor, 4), "ok": ok,
            "iters": iters}


def worker_main(args):
    rank = args.rank
    out = open(args.out, "w") if args.out and rank == 0 else None
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        log("rank %d: CUDA is not available to PyTorch" % rank)
        return ar.EXIT_USAGE
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    ar.init_group(torch, dist, rank, device, args.timeout)
    probe = torch.full((1,), float(rank + 1), device=device)
    dist.all_reduce(probe)
    torch.cuda.synchronize(device)
    net, line = ar.wait_for_used_net(args.log, "Mesh")
    log("rank %d on %s (%s), NCCL_HOSTID=%s, advertises %s: %s" %
        (rank, device, torch.cuda.get_device_name(device),
         os.environ.get("NCCL_HOSTID"),
         os.environ.get("NCCL_MESH_ADVERTISE_ADDRS"),
         line or "no 'Using network' line"))
    if net is None or net.lower() != "mesh":
        log("rank %d: FAIL: NCCL used %s, not Mesh" % (rank, net))
        dist.destroy_process_group()
        return ar.EXIT_WRONG_NET
    probe_ok = probe.item() == WORLD * (WORLD + 1) // 2
    if not probe_ok:
        log("rank %d: FAIL: first all-reduce gave %r, expected %d" %
            (rank, probe.item(), WORLD * (WORLD + 1) // 2))

    bench = ar.Bench(torch, dist, device, rank)
    a2a = AllToAll(torch, dist, device, rank)
    records = []
    for nbytes in args.sizes:
        t, ok = bench.run(nbytes, args.iters, args.warmup)
        records.append(record("all_reduce", args.algo, nbytes, t, ok,
                              args.iters, 2 * (WORLD - 1) / WORLD))
        if rank == 0:
            ar.emit(records[-1], out)
    for nbytes in args.sizes:
        t, ok = a2a.run(nbytes, args.iters)
        # nbytes to every rank: (WORLD - 1) * nbytes cross the network
        records.append(record("all_to_all", "p2p", nbytes, t, ok,
                              args.iters, (WORLD - 1) / WORLD,
                              nbytes * WORLD))
        if rank == 0:
            ar.emit(records[-1], out)
    close_in_order(dist, rank, args.log)
    failed = [r for r in records if not r["ok"]]
    if rank == 0:
        ar.emit({"summary": True, "algo": args.algo, "net_used": net,
                 "ok": not failed and probe_ok, "results": len(records),
                 "failed": ["%s %s" % (r["op"], ar.human_size(r["bytes"]))
                            for r in failed],
                 "torch": torch.__version__, "nccl": ar.nccl_version(torch),
                 "device": torch.cuda.get_device_name(device),
                 "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))},
                out)
    if out:
        out.close()
    return ar.EXIT_WRONG_RESULT if failed or not probe_ok else ar.EXIT_OK


# ------------------------------------------------------------ log checks --

# NCCL: "Channel 00/0 : 2[0] -> 0[0] [send] via NET/Mesh/0"; the number
# after the slash is the connection index: 0 for the collectives' rings
# and trees, 1 for point-to-point (all-to-all), "via NET/Mesh/0/Shared"
NCCL_CONN_RE = re.compile(r"Channel \d+/(\d+) : (\d+)\[[^]]*\] -> "
                          r"(\d+)\[[^]]*\] \[(?:send|receive)\] "
                          r"via NET/Mesh")
CONN_KINDS = {0: "collective", 1: "point-to-point"}
# ours, at the origin: "NET/Mesh/relay: send comm 3 to 127.0.0.12:4711: via r1 ..."
OUR_SEND_RE = re.compile(r"NET/Mesh/relay: send comm \d+ to "
                         r"(127\.0\.0\.\d+):\d+: via (\S+)")
OUR_RECV_RE = re.compile(r"NET/Mesh/relay: recv comm \d+ from (\S+): ")
# ours, at the relay: "NET/Mesh/relay: pair 0: forwarding r0 from ..."
OUR_PAIR_RE = re.compile(r"NET/Mesh/relay: pair (\d+): forwarding (\S+) from ")
# "NET/Mesh/relay: pair 0: closed by the origin after 367972752 bytes in ..."
OUR_PAIR_END_RE = re.compile(r"NET/Mesh/relay: pair (\d+): (.*?) after "
                             r"(\d+) bytes")
OUR_WARN_RE = re.compile(r"NCCL WARN NET/Mesh")
SERVES_RE = re.compile(r"NET/Mesh/relay: relay (\S+) serves port (\d+)")


def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n") for l in f]
    except OSError:
        return []


def check_pair_ends(rank, lines):
    """Every pair the relay forwarded ended because its origin closed it
    (not a failed or broken leg)."""
    started = [m.group(1) for l in lines for m in [OUR_PAIR_RE.search(l)]
               if m]
    ends = {m.group(1): (m.group(2), int(m.group(3)), l) for l in lines
            for m in [OUR_PAIR_END_RE.search(l)] if m}
    fails = []
    for pid in started:
        if pid not in ends:
            fails.append("rank %d: relay pair %s never ended" % (rank, pid))
        elif ends[pid][0] != "closed by the origin":
            fails.append("rank %d: %s" % (rank, ends[pid][2].strip()))
    if started:
        log("rank %d, ours: %d pairs relayed %d bytes, %d closed by their "
            "origin" % (rank, len(started),
                        sum(e[1] for e in ends.values()),
                        sum(e[0] == "closed by the origin"
                            for e in ends.values())))
    return fails


def check_route_logs(logs):
    """Our log and NCCL's show the pair 0 <-> 2 relayed through r1 and the
    other pairs direct.  Returns the list of failures; prints evidence."""
    a, b = RELAYED
    fails = []
    lines = [read_lines(p) for p in logs]
    for rank in range(WORLD):
        served = [m.group(1) for l in lines[rank]
                  for m in [SERVES_RE.search(l)] if m]
        if "r%d" % rank not in served:
            fails.append("rank %d: no 'relay r%d serves port' line" %
                         (rank, rank))
        sends = [(m.group(1), m.group(2), l) for l in lines[rank]
                 for m in [OUR_SEND_RE.search(l)] if m]
        peer = {a: b, b: a}.get(rank)
        for dest, via, l in sends:
            if peer is None or dest != rank_addr(peer):
                fails.append("rank %d: a direct pair was relayed: %s" %
                             (rank, l.strip()))
            elif via != "r%d" % VIA:
                fails.append("rank %d: relayed via %s, not r%d: %s" %
                             (rank, via, VIA, l.strip()))
        if peer is not None:
            mine = [l for d, v, l in sends if d == rank_addr(peer)]
            if not mine:
                fails.append("rank %d: no relayed send comm to %s in our "
                             "log" % (rank, rank_addr(peer)))
            else:
                log("rank %d, ours (%d relayed send comms to rank %d), "
                    "e.g.: %s" % (rank, len(mine), peer,
                                  mine[0].split("NET/Mesh/", 1)[-1]))
            recvs = [l for l in lines[rank] if OUR_RECV_RE.search(l)]
            if not recvs:
                fails.append("rank %d: no relayed recv comm in our log" %
                             rank)
            else:
                log("rank %d, ours (%d relayed recv comms), e.g.: %s" %
                    (rank, len(recvs), recvs[0].split("NET/Mesh/", 1)[-1]))
        warns = [l for l in lines[rank] if OUR_WARN_RE.search(l)]
        if warns:
            fails.append("rank %d: %d warnings from the plugin, the first: "
                         "%s" % (rank, len(warns), warns[0].strip()))
        pairs = [(m.group(2), l) for l in lines[rank]
                 for m in [OUR_PAIR_RE.search(l)] if m]
        if rank == VIA:
            fails += check_pair_ends(rank, lines[rank])
            for origin in ("r%d" % a, "r%d" % b):
                mine = [l for o, l in pairs if o == origin]
                if not mine:
                    fails.append("rank %d: its relay forwarded nothing for "
                                 "%s" % (rank, origin))
                else:
                    log("rank %d, ours (%d pairs forwarded for %s), e.g.: "
                        "%s" % (rank, len(mine), origin,
                                mine[0].split("NET/Mesh/", 1)[-1]))
        elif pairs:
            fails.append("rank %d relayed, only rank %d should: %s" %
                         (rank, VIA, pairs[0][1].strip()))
    # NCCL's own view: connections between ranks 0 and 2 over NET/Mesh,
    # for the all-reduce (ring or tree) and for the all-to-all
    for rank in RELAYED:
        conns = [(int(m.group(1)), l) for l in lines[rank]
                 for m in [NCCL_CONN_RE.search(l)]
                 if m and {int(m.group(2)), int(m.group(3))} == set(RELAYED)]
        for index, kind in sorted(CONN_KINDS.items()):
            mine = [l for i, l in conns if i == index]
            if not mine:
                fails.append("rank %d: NCCL's log shows no %s NET/Mesh "
                             "connection between ranks %d and %d" %
                             (rank, kind, a, b))
            else:
                log("rank %d, NCCL's (%d %s connections with rank %d), "
                    "e.g.: %s" % (rank, len(mine), kind, a + b - rank,
                                  mine[0].split("NCCL INFO ", 1)[-1]))
    return fails


# -------------------------------------------------------------- meshinfo --

def meshinfo_checks(args, relay_ports, logdir):
    """meshinfo --check and a report for each rank's environment.
    Returns the failures."""
    fails = []
    for rank in range(WORLD):
        env = base_env()
        env.update(mesh_env(rank, relay_ports))
        env["NCCL_MESH_CONF"] = args.conf
        for name, cmd in (("check", [args.meshinfo, "--check", args.conf]),
                          ("report", [args.meshinfo])):
            path = os.path.join(logdir, "meshinfo-%s-rank%d.txt" %
                                (name, rank))
            try:
                p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=60,
                                   universal_newlines=True)
            except (OSError, subprocess.TimeoutExpired) as e:
                fails.append("rank %d: meshinfo %s: %s" % (rank, name, e))
                continue
            with open(path, "w") as f:
                f.write(p.stdout)
            if p.returncode != 0:
                tail = p.stdout.strip().splitlines()[-12:]
                fails.append("rank %d: meshinfo %s exited %d (all of it in "
                             "%s), its last lines:\n%s" %
                             (rank, name, p.returncode, path,
                              "\n".join(tail)))
            elif name == "check":
                log("rank %d: meshinfo --check: %s" %
                    (rank, p.stdout.strip().splitlines()[-1]))
            else:
                fails += report_routes(rank, p.stdout, path)
    return fails


def report_routes(rank, text, path):
    """The report's relay section must show the routes this rank needs,
    and none where it needs none."""
    peer = {RELAYED[0]: RELAYED[1], RELAYED[1]: RELAYED[0]}.get(rank)
    lines = text.splitlines()
    start = next((i + 1 for i, l in enumerate(lines)
                  if l.startswith("# routes through relays")), len(lines))
    section = []
    for l in lines[start:]:
        if l.startswith("#"):
            break
        section.append(l.strip())
        log("rank %d: meshinfo: %s" % (rank, l.rstrip()))
    routes = [l for l in section if l.startswith("route ")]
    want = [] if peer is None else ["route %s/32 via r%d" %
                                    (rank_addr(peer), VIA)]
    if routes != want:
        return ["rank %d: meshinfo's report shows routes %s, expected %s "
                "(%s)" % (rank, routes or "none", want or "none", path)]
    return []


# -------------------------------------------------------------- launcher --

def worker_cmd(args, rank, logfile):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--rank", str(rank), "--algo", args.algo,
           "--sizes", ",".join(map(str, args.sizes)),
           "--iters", str(args.iters), "--warmup", str(args.warmup),
           "--timeout", str(args.timeout), "--log", logfile]
    if args.out:
        cmd += ["--out", args.out]
    return cmd


def launcher_main(args):
    logdir = args.log_dir or tempfile.mkdtemp(prefix="nccl-mesh-relay-")
    os.makedirs(logdir, exist_ok=True)
    ports = [ar.free_port() for _ in range(WORLD + 1)]
    master, relay_ports = ports[0], ports[1:]
    if len(set(ports)) != len(ports):
        log("FAIL: could not pick %d distinct free ports" % len(ports))
        return ar.EXIT_USAGE
    for rank in range(WORLD):
        log("rank %d: %s" % (rank, " ".join(
            "%s='%s'" % kv for kv in sorted(mesh_env(rank,
                                                     relay_ports).items()))))
    if args.meshinfo:
        fails = meshinfo_checks(args, relay_ports, logdir)
        for f in fails:
            log("FAIL: " + f)
        if fails:
            return ar.EXIT_USAGE
    if args.check_only:
        log("PASS: the three ranks' configs check")
        return ar.EXIT_OK

    logs = [os.path.join(logdir, "nccl-%s-rank%d.log" % (args.algo.lower(),
                                                         r))
            for r in range(WORLD)]
    closed = [os.path.join(logdir, "closed-rank%d" % r)
              for r in range(WORLD)]
    for path in logs + closed + ([args.out] if args.out else []):
        if os.path.exists(path):
            os.unlink(path)
    log("relay test: NCCL_ALGO=%s ranks=%d sizes=%s iters=%d timeout=%ds, "
        "NCCL logs in %s" % (args.algo, WORLD, ",".join(
            ar.human_size(s) for s in args.sizes), args.iters, args.timeout,
            logdir))
    # allreduce.py's rank_env: host id, rendezvous and NCCL log per rank
    args.net, args.debug = "Mesh", False
    signal_setup()
    procs = []
    try:
        for r in range(WORLD):
            env = without_rank_settings(
                ar.rank_env(args, r, master, logs[r]))
            env.update(mesh_env(r, relay_ports))
            env.update({"NCCL_MESH_CONF": args.conf, "NCCL_ALGO": args.algo,
                        "NCCL_NET": "Mesh"})
            procs.append(subprocess.Popen(worker_cmd(args, r, logs[r]),
                                          env=env, start_new_session=True))
        codes, timed_out = ar.wait_ranks(procs, args.timeout)
    finally:
        for p in procs:
            ar.kill_group(p)

    if ar.EXIT_USAGE in codes:
        log("FAIL: a rank could not start (its message is above)")
        return ar.EXIT_USAGE
    failed = timed_out or any(c != 0 for c in codes)
    ar.show_logs(logs, False, failed)
    nets_known, nets_right = ar.check_used_nets(args, logs)
    route_fails = check_route_logs(logs)
    for f in route_fails:
        log("FAIL: " + f)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"route_check": True, "algo": args.algo,
                                "ok": not route_fails,
                                "failures": route_fails}) + "\n")
    if timed_out:
        log("FAIL: timed out after %ds (rank exit codes %s)" %
            (args.timeout, codes))
        return ar.EXIT_TIMEOUT
    if not (nets_known and nets_right) or ar.EXIT_WRONG_NET in codes:
        log("FAIL: NCCL did not use Mesh on every rank")
        return ar.EXIT_WRONG_NET
    if any(c not in (ar.EXIT_OK, ar.EXIT_WRONG_RESULT) for c in codes):
        log("FAIL: a rank crashed (exit codes %s)" % codes)
        return ar.EXIT_CRASH
    if ar.EXIT_WRONG_RESULT in codes:
        log("FAIL: wrong results (see above)")
        return ar.EXIT_WRONG_RESULT
    if route_fails:
        log("FAIL: the logs do not show the relayed route")
        return EXIT_ROUTE
    log("PASS: NCCL_ALGO=%s, all results exact, pair %d <-> %d relayed "
        "through rank %d" % (args.algo, RELAYED[0], RELAYED[1], VIA))
    return ar.EXIT_OK


def signal_setup():
    import signal
    signal.signal(signal.SIGTERM, ar.stop_launcher)


# --------------------------------------------------------------- summary --

def summary_main(paths):
    ok = True
    print("%-10s %-6s %10s %8s %12s %s" %
          ("op", "algo", "size", "result", "busbw GB/s", "(run)"))
    for path in paths:
        rows, summary, route = [], None, None
        for line in read_lines(path):
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("summary"):
                summary = rec
            elif rec.get("route_check"):
                route = rec
            elif "op" in rec:
                rows.append(rec)
        name = os.path.basename(path)
        for r in rows:
            print("%-10s %-6s %10s %8s %12.3f %s" %
                  (r["op"], r["algo"], ar.human_size(r["bytes"]),
                   "exact" if r["ok"] else "WRONG", r["busbw_GBps"], name))
        if summary is None:
            print("%s: INCOMPLETE (no summary: the run failed, see its "
                  "log)" % name)
            ok = False
        else:
            print("%s: results %s; NCCL %s, torch %s, %s, MPS %s" %
                  (name, "exact" if summary["ok"] else "WRONG: " +
                   ", ".join(summary["failed"]), summary["nccl"],
                   summary["torch"], summary["device"],
                   "on" if summary.get("mps") else "off"))
            ok = ok and summary["ok"]
        if route is None:
            print("%s: route not checked" % name)
            ok = False
        else:
            print("%s: relayed route in the logs: %s" %
                  (name, "shown" if route["ok"] else "MISSING: " +
                   "; ".join(route["failures"])))
            ok = ok and route["ok"]
    return ar.EXIT_OK if ok else ar.EXIT_WRONG_RESULT


# ------------------------------------------------------------------ main --

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Three NCCL ranks, the pair 0 <-> 2 relayed through "
                    "rank 1: all-reduce and all-to-all checked exactly.")
    p.add_argument("--conf", help="nccl-mesh config (tests/gpu/relay.conf)")
    p.add_argument("--algo", default="Ring", help="NCCL_ALGO for all-reduce")
    p.add_argument("--sizes", type=ar.parse_sizes,
                   default=ar.parse_sizes(DEFAULT_SIZES),
                   help="sizes, K/M/G allowed (default %s); all-to-all "
                        "sends this much to every rank" % DEFAULT_SIZES)
    p.add_argument("--iters", type=int, default=5,
                   help="checked calls per size and collective (default 5)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=int, default=300,
                   help="seconds for the whole run (default: 300)")
    p.add_argument("--meshinfo", help="meshinfo executable: check each "
                   "rank's config before starting")
    p.add_argument("--check-only", action="store_true",
                   help="only the meshinfo checks (no GPU needed)")
    p.add_argument("--out", help="also write the JSON lines to this file")
    p.add_argument("--log-dir", help="where the logs go")
    p.add_argument("--summary", nargs="+", metavar="FILE",
                   help="print a table of earlier runs")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.summary:
        return args
    if not args.worker and not args.conf:
        p.error("--conf is required")
    if args.conf:
        args.conf = os.path.abspath(args.conf)
    if args.check_only and not args.meshinfo:
        p.error("--check-only needs --meshinfo")
    # allreduce.py's Bench runs the calls in place: the values triple
    # per call with three ranks, and float32 holds 6 * 251 * 3^8 exactly
    if not 1 <= args.iters <= MAX_ITERS or args.warmup < 0:
        p.error("--iters must be 1..%d, --warmup >= 0" % MAX_ITERS)
    if args.algo not in ("Ring", "Tree"):
        p.error("--algo must be Ring or Tree")
    if args.worker and (args.rank not in range(WORLD) or not args.log):
        p.error("--worker needs --rank 0..%d and --log" % (WORLD - 1))
    return args


def main(argv):
    args = parse_args(argv)
    if args.summary:
        return summary_main(args.summary)
    if not args.worker:
        return launcher_main(args)
    return ar.run_worker(worker_main, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
