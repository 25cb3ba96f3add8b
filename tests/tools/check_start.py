#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`meshinfo --check` and start judge every key alike.

usage: check_start.py MESHINFO MESHRELAY MODULES_BUILD_DIR

The keys come from the parameter tables themselves (`meshinfo --json`
lists every key of the core and of each loaded module with its type and
range).  Each key is given bad values: past one end of its range, of
its type's bad syntax, a string with "\\x00" in it, and for strings and
lists whose syntax a module or the core checks, values that break it
(among them those that start once refused while --check passed them).
For each value three runs judge the same file:

- `meshinfo --check FILE`: exit 1, an error at the value's file:line;
- start as the plugin's init does it, `meshinfo --json --config FILE`:
  not usable, with an error at the same file:line;
- start as meshrelay does it, the real process on loopback with its relay
  port and metrics endpoint: it exits 1 instead of running.  It runs the
  plugin's init first, so it is asked where init took the file (what it
  refuses beyond init would show there) and for the values listed below;
  where init refused, it would refuse by the same code.

A few values are good (both accept, meshrelay runs and stops on SIGTERM),
and one is this host's state, not the file's (an interface this host does
not have): --check passes with a warning about this host, start fails.
A string or list key of a table that the test has no bad value for, and
does not know as free text, fails the test: a new key brings its own.
"""
import concurrent.futures
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

MESHINFO, MESHRELAY, MODULES = sys.argv[1:4]

# Modules whose tables are walked, where this build has them: tcp-xdc
# gives the rail on loopback, relay is what meshrelay runs.
WANTED = ["tcp-xdc", "relay", "ib-fabric", "rdma-mesh"]

# Keys whose any text is valid syntax (paths, names of modules that may
# be installed elsewhere): given only the string with a NUL.
FREE_TEXT = {
    "core.module_path", "core.metrics_file", "core.prefer_same_dc",
    "core.prefer_cross_dc", "core.prefer_disconnected",
    "ib-fabric.sysfs_root", "rdma-mesh.sysfs_root",
}

REFUSE, ACCEPT, HOST = "refuse", "accept", "host"

# (scope.key, libconfig literal, expectation); %PORT% is a free port.
VALUES = [
    # start refused these once while --check passed them
    ("core.metrics_listen", '"garbage"', REFUSE),
    ("core.metrics_listen", '":99999"', REFUSE),
    ("core.metrics_listen", '"%s%n"', REFUSE),
    ("tcp-xdc.ifname", '"=lo\\x00zz"', REFUSE),
    ("core.metrics_listen", '"127.0.0.1"', REFUSE),
    ("core.metrics_listen", '"[::1]"', REFUSE),
    ("core.metrics_listen", '"224.0.0.1:9464"', REFUSE),
    ("core.metrics_listen", '"127.0.0.1:%PORT%"', ACCEPT),
    ("core.metrics_listen", '"[::1]:%PORT%"', ACCEPT),
    ("core.modules", '[ "tcp-xdc", "relay", "tcp-xdc" ]', REFUSE),
    ("core.modules", '[ "tcp xdc", "relay" ]', REFUSE),
    ("core.rails", '[ "nosuch/eth0" ]', REFUSE),
    ("core.nccl_channels_by_size", '[ "garbage" ]', REFUSE),
    ("core.auth_key_file", '"/nonexistent/nccl-mesh.key"', REFUSE),
    ("tcp-xdc.ifname", '"lo eth0"', REFUSE),
    ("tcp-xdc.ifname", '"^"', REFUSE),
    ("tcp-xdc.ifname", '"=lo:99999"', REFUSE),
    ("tcp-xdc.ifname", '"=lo,"', ACCEPT),
    ("tcp-xdc.ifname", '"=nosuch9"', HOST),
    ("tcp-xdc.cipher_library", '"libsodium"', REFUSE),
    ("relay.name", '"bad name"', REFUSE),
    ("relay.relays", '[ "r0" ]', REFUSE),
    ("relay.members", '[ "garbage" ]', REFUSE),
    ("relay.routes", '[ "garbage" ]', REFUSE),
    ("ib-fabric.hca", '"="', REFUSE),
    ("ib-fabric.hca", '"mlx5_0:0"', REFUSE),
    ("ib-fabric.addr_family", '"ipv5"', REFUSE),
    ("ib-fabric.addr_range", '"10.0.0.0"', REFUSE),
    ("ib-fabric.gid_overrides", '[ "garbage" ]', REFUSE),
    ("rdma-mesh.hca", '"="', REFUSE),
]


class Failure(Exception):
    pass


def env(**extra):
    # Only what the test sets may steer the core.
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("NCCL_MESH_") and k != "NCCL_DEBUG"}
    e["NCCL_MESH_MODULE_PATH"] = ":".join(
        os.path.join(MODULES, m) for m in modules_built())
    e.update(extra)
    return e


def modules_built():
    return [m for m in WANTED
            if os.path.exists(os.path.join(MODULES, m, "mesh-%s.so" % m))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(path, scopes):
    """The file of `scopes` ({scope: {key: literal}}); the line of every
    key as {scope.key: line}."""
    lines, where = ["version = 1;"], {}
    for scope, keys in scopes.items():
        if scope != "core":
            lines.append("%s: {" % scope)
        for key, lit in keys.items():
            where["%s.%s" % (scope, key)] = len(lines) + 1
            lines.append("%s%s = %s;" % ("" if scope == "core" else "  ",
                                         key, lit))
        if scope != "core":
            lines.append("};")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return where


def base_scopes(port):
    mods = modules_built()
    scopes = {"core": {"modules": "[ %s ]" % ", ".join(
        '"%s"' % m for m in mods)}}
    scopes["tcp-xdc"] = {"ifname": '"lo"'}
    if "relay" in mods:
        scopes["relay"] = {
            "name": '"r0"', "port": str(port),
            "relays": '[ "r0 127.0.0.1" ]',
            "members": '[ "127.0.0.0/8", "::1/128" ]'}
    return scopes


def run(args, **kw):
    return subprocess.run(args, env=env(), capture_output=True,
                          encoding="utf-8", errors="replace", timeout=30,
                          **kw)


def relay_start(conf):
    """meshrelay on conf: 'running' (it served, then stopped on SIGTERM
    with exit 0) or 'exit N'; with its stderr."""
    p = subprocess.Popen([MESHRELAY, "--config", conf],
                         env=env(NCCL_DEBUG="INFO"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out, deadline = b"", time.monotonic() + 20
    try:
        while b"meshrelay: running with" not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                return "hung", out.decode(errors="replace")
            if select.select([p.stderr], [], [], left)[0]:
                chunk = os.read(p.stderr.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
        if b"meshrelay: running with" in out:
            p.send_signal(signal.SIGTERM)
            _, rest = p.communicate(timeout=20)
            out += rest
            return ("running" if p.returncode == 0 else
                    "stopped with exit %d" % p.returncode), \
                out.decode(errors="replace")
        p.wait(timeout=20)
        return "exit %d" % p.returncode, out.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()


def judge(tmp, n, case, listed):
    """Runs the three judges on one case; returns what went wrong."""
    name, lit, expect = case
    scope, key = name.split(".", 1)
    port = free_port()
    scopes = base_scopes(port)
    scopes.setdefault(scope, {})[key] = lit.replace(
        "%PORT%", str(free_port()))
    conf = os.path.join(tmp, "case%03d.conf" % n)
    line = write_config(conf, scopes)[name]
    at = "%s:%d: " % (conf, line)

    check = run([MESHINFO, "--check", conf])
    start = run([MESHINFO, "--json", "--config", conf])
    try:
        doc = json.loads(start.stdout)
    except ValueError:
        return ["meshinfo --json gave no JSON: %r" % start.stdout[:200]]
    relay = None
    if "relay" in modules_built() and (listed or doc["usable"]):
        relay = relay_start(conf)

    check_errors = [l for l in check.stderr.splitlines()
                    if l.startswith(at + "error: ")]
    start_errors = [e for e in doc["errors"] if e.startswith(at)]
    nul = "\\x00" in lit
    why = []
    if expect == REFUSE:
        if check.returncode != 1 or "OK" in check.stdout:
            why.append("--check exit %d%s" % (
                check.returncode, ", printed OK" if "OK" in check.stdout
                else ""))
        if not check_errors:
            why.append("--check: no error at line %d" % line)
        elif not nul and not any(name in e or key in e
                                 for e in check_errors):
            why.append("--check: the error does not name %s" % name)
        if start.returncode != 1 or doc["usable"] or not start_errors:
            why.append("start (init) exit %d, usable %s, %d errors at "
                       "line %d" % (start.returncode, doc["usable"],
                                    len(start_errors), line))
        if relay and relay[0] != "exit 1":
            why.append("meshrelay: %s" % relay[0])
    elif expect == ACCEPT:
        if check.returncode != 0:
            why.append("--check exit %d" % check.returncode)
        if start.returncode != 0 or not doc["usable"]:
            why.append("start (init) exit %d" % start.returncode)
        if relay and relay[0] != "running":
            why.append("meshrelay: %s" % relay[0])
    else:  # HOST: the file is fine, this host has no such interface
        if check.returncode != 0 or check_errors:
            why.append("--check exit %d" % check.returncode)
        if "on this host" not in check.stderr:
            why.append("--check: no warning about this host")
        if start.returncode != 1 or doc["usable"]:
            why.append("start (init) exit %d, usable %s" %
                       (start.returncode, doc["usable"]))
        if relay and relay[0] == "running":
            why.append("meshrelay ran")
    if why:
        why = ["%s = %s (%s): %s" % (name, lit, expect, "; ".join(why)),
               "    --check: exit %d, stderr:\n      %s" % (
                   check.returncode,
                   check.stderr.strip().replace("\n", "\n      ")),
               "    init errors: %s" % doc["errors"]]
        if relay:
            why.append("    meshrelay (%s), stderr tail:\n      %s" % (
                relay[0], "\n      ".join(relay[1].splitlines()[-6:])))
    return why


def tables(tmp):
    """{scope.key: its entry of meshinfo --json's effective_config}."""
    conf = os.path.join(tmp, "base.conf")
    write_config(conf, base_scopes(free_port()))
    r = run([MESHINFO, "--json", "--config", conf])
    doc = json.loads(r.stdout)
    if r.returncode != 0 or not doc["usable"]:
        raise Failure("the base config is not usable: %s\n%s" % (
            doc["errors"], r.stderr))
    keys = {}
    for scope in doc["effective_config"]:
        for v in scope["values"]:
            keys["%s.%s" % (scope["scope"], v["key"])] = v
    scopes = {k.split(".")[0] for k in keys}
    missing = set(["core"] + modules_built()) - scopes
    if missing:
        raise Failure("no table listed for %s" % sorted(missing))
    return keys


def literal_int(n):
    # libconfig reads integers beyond 32 bits only with the L suffix
    return "%d%s" % (n, "L" if abs(n) > 2**31 - 1 else "")


def cases_of(keys):
    """Bad values of every key by its type, then the values above."""
    cases, no_value = [], []
    known = {name for name, _, _ in VALUES}
    for i, (name, v) in enumerate(keys.items()):
        t = v["type"]
        if t in ("integer", "size"):
            if "max" not in v:
                no_value.append("%s (%s without a range)" % (name, t))
                continue
            # one end of the range per key, both ends over the keys
            # (sizes below 0 are a syntax error of their own)
            low = t == "integer" and i % 2
            cases.append((name, literal_int(v["min"] - 1 if low else
                                            v["max"] + 1), REFUSE))
        elif t == "boolean":
            cases.append((name, '"maybe"', REFUSE))
        elif t == "string":
            cases.append((name, '"a\\x00b"', REFUSE))
        elif t == "list":
            cases.append((name, '[ "a\\x00b" ]', REFUSE))
        elif t == "port range":
            cases.append((name, '"9-1"', REFUSE))
        elif t == "address list":
            cases.append((name, '[ "garbage" ]', REFUSE))
        elif t == "port map":
            cases.append((name, '[ "1=99999" ]', REFUSE))
        elif t != "address and port":
            no_value.append("%s (type %s)" % (name, t))
        if t in ("string", "list", "address and port") and \
                name not in known and name not in FREE_TEXT:
            no_value.append("%s (%s: no value breaking its syntax)"
                            % (name, t))
    if no_value:
        raise Failure("keys the test has no bad value for:\n  " +
                      "\n  ".join(no_value))
    return [(c, False) for c in cases] + \
        [(c, True) for c in VALUES if c[0] in keys]


def main():
    try:
        if not os.access(MESHRELAY, os.X_OK) or \
                "tcp-xdc" not in modules_built():
            print("SKIP: needs meshrelay and the tcp-xdc module")
            return 77
        with tempfile.TemporaryDirectory() as tmp:
            keys = tables(tmp)
            cases = cases_of(keys)
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                results = list(pool.map(
                lambda a: judge(tmp, a[0], *a[1]), enumerate(cases)))
        bad = [line for r in results for line in r]
        if bad:
            raise Failure("%d of %d values judged apart:\n%s" % (
                sum(1 for r in results if r), len(cases), "\n".join(bad)))
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    print("ok: %d keys (%s), %d values: --check and start agree" % (
        len(keys), ", ".join(sorted({k.split(".")[0] for k in keys})),
        len(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
