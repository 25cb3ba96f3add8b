#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""meshinfo against the real tcp-xdc module and small fixture configs.

usage: test_meshinfo.py MESHINFO MODULE_DIR FIXTURE_DIR CASE [FAKE_DIR]

FAKE_DIR holds the loader's fake modules (tests/modules); the hostile and
no-devices cases put it on the module path after MODULE_DIR.
"""
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

MESHINFO, MODULE_DIR, FIXTURES, CASE = sys.argv[1:5]
FAKE_DIR = sys.argv[5] if len(sys.argv) > 5 else None


class Failure(Exception):
    pass


def check(cond, what, result=None):
    if cond:
        return
    if result is not None:
        what += "\n--- exit %d\n--- stdout:\n%s--- stderr:\n%s" % (
            result.returncode, result.stdout, result.stderr)
    raise Failure(what)


def fixture(name):
    return os.path.join(FIXTURES, name)


def marked_line(name, marker):
    """Line number of the fixture line carrying `# marker`."""
    with open(fixture(name)) as f:
        for number, line in enumerate(f, 1):
            if "# " + marker in line:
                return number
    raise Failure("%s has no line marked '%s'" % (name, marker))


def meshinfo(*args, module_path=None, timeout=20):
    # Only what the test sets may steer the core.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("NCCL_MESH_") and k != "NCCL_DEBUG"}
    env["NCCL_MESH_MODULE_PATH"] = module_path or MODULE_DIR
    return subprocess.run([MESHINFO, *args], env=env, capture_output=True,
                          encoding="utf-8", errors="replace",
                          timeout=timeout)


def with_fakes():
    if not FAKE_DIR:
        raise Failure("this case needs the fake modules' directory")
    # the relay module of this build, for its fixtures' rules
    relay = os.path.join(os.path.dirname(MODULE_DIR), "relay")
    return MODULE_DIR + ":" + FAKE_DIR + (":" + relay
                                          if os.path.isdir(relay) else "")


def section(text, title):
    """Lines of the text report between '# title' and the next '#' line."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# " + title):
            body = []
            for rest in lines[i + 1:]:
                if rest.startswith("#") \
                        and not rest.startswith("# name") \
                        and not rest.startswith("# rail"):
                    break
                if not rest.startswith("#"):
                    body.append(rest)
            return body
    raise Failure("no section '# %s' in:\n%s" % (title, text))


def test_text():
    r = meshinfo("--config", fixture("good.conf"))
    check(r.returncode == 0, "a good config must be usable", r)
    out = r.stdout
    check(re.search(r"^# nccl-mesh \d+\.\d+\.\d+, module ABI \d+\.\d+$", out,
                    re.M), "header names version and module ABI", r)
    check("# config: " + fixture("good.conf") in out,
          "header names the config used", r)
    check(re.search(r"^# host: \S+", out, re.M), "header names the host", r)

    mods = section(out, "modules")
    check(any(re.match(r"tcp-xdc\s+\S+\s+ready\s+\S*mesh-tcp-xdc\.so$", m)
              for m in mods), "tcp-xdc listed as ready with its path", r)

    rails = section(out, "rails")
    check(rails and re.match(r"0\s+\S+\s+fabricId 0\s+dc 0\s+rail 0\s+",
                             rails[0]), "rail 0 with fabricId 0", r)
    members = [m for m in rails if m.lstrip().startswith("member tcp-xdc lo ")]
    check(members, "rail member tcp-xdc lo", r)
    check("127.0.0.1/8" in members[0], "member lists 127.0.0.1/8", r)

    paths = section(out, "path classes")
    check(len(paths) == 1, "one matrix row per rail", r)
    header = [l for l in out.splitlines() if re.match(r"# rail +\d", l)]
    check(header and "(dc0 rail0)" in header[0] and "(dc3 rail0)" in header[0],
          "columns cover this host's dc and the hosts entry's dc 3", r)
    check(re.search(r"same-DC tcp-xdc\s+cross-DC tcp-xdc", paths[0]),
          "same-DC and cross-DC both pick tcp-xdc", r)

    core = section(out, "effective config: core")
    check(any(re.match(r"NCCL_MESH_DC=0\s+# .*good\.conf:4$", l)
              for l in core), "dc comes from good.conf line 4", r)
    check(any(re.match(r"NCCL_MESH_MODULE_PATH=\S+\s+# env "
                       r"NCCL_MESH_MODULE_PATH$", l) for l in core),
          "module_path comes from the environment", r)
    check(any(re.match(r"NCCL_MESH_CONNECT_TIMEOUT_MS=60000\s+# default$", l)
              for l in core), "connect_timeout_ms is a default", r)
    ifname_line = marked_line("good.conf", "ifname line")
    tcp = section(out, "effective config: tcp-xdc")
    check(any(re.match(r"NCCL_MESH_TCP_XDC_IFNAME=lo\s+# .*good\.conf:%d$"
                       % ifname_line, l) for l in tcp),
          "tcp-xdc ifname comes from good.conf", r)
    check("# errors: none" in out, "no errors", r)
    check(re.search(r"^# status: usable, 1 rail$", out, re.M),
          "status line says usable", r)


def test_json():
    r = meshinfo("--json", "--config", fixture("good.conf"))
    check(r.returncode == 0, "a good config must be usable", r)
    try:
        doc = json.loads(r.stdout)
    except ValueError as e:
        raise Failure("--json output does not parse: %s\n%s" % (e, r.stdout))
    for key in ("version", "module_abi", "config", "hostname", "usable",
                "modules", "rails", "paths", "effective_config", "errors",
                "warnings"):
        check(key in doc, "JSON has '%s'" % key, r)
    check(doc["config"] == fixture("good.conf"), "config path", r)
    check(doc["usable"] is True, "usable", r)
    tcp = [m for m in doc["modules"] if m["name"] == "tcp-xdc"]
    check(tcp and tcp[0]["status"] == "ready" and tcp[0]["reason"] is None,
          "tcp-xdc ready without a reason", r)
    check(len(doc["rails"]) == 1, "one rail", r)
    rail = doc["rails"][0]
    check(rail["fabric_id"] == 0 and rail["dc"] == 0 and rail["rail"] == 0,
          "rail 0 has fabricId 0", r)
    lo = [m for m in rail["members"]
          if m["module"] == "tcp-xdc" and m["device"] == "lo"]
    check(lo and "127.0.0.1/8" in lo[0]["addresses"], "member lo", r)
    paths = doc["paths"]
    check(paths["dcs"] == [0, 3], "dcs from this host and hosts entries", r)
    check([c["fabric_id"] for c in paths["columns"]] == [0, 48],
          "columns are fabricIds 0 and 3 * 16", r)
    cells = paths["rows"][0]["cells"]
    check([(c["class"], c["module"]) for c in cells] ==
          [("same-DC", "tcp-xdc"), ("cross-DC", "tcp-xdc")],
          "path classes and chosen modules", r)
    scopes = {s["scope"]: s["values"] for s in doc["effective_config"]}
    check(list(scopes) == ["core", "tcp-xdc"], "core scope, then tcp-xdc", r)
    dc = [v for v in scopes["core"] if v["key"] == "dc"]
    check(dc and dc[0]["env"] == "NCCL_MESH_DC" and dc[0]["value"] == "0"
          and dc[0]["source"].endswith("good.conf:4"), "dc value", r)
    check(doc["errors"] == [], "no errors", r)


def test_json_escape():
    # Quotes, backslashes, control characters and a byte that is not UTF-8
    # in the config's path: the document must still parse and keep them.
    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.join(os.fsencode(tmp), b'a"b\\c\td\xff.conf')
        shutil.copy(fixture("good.conf"), name)
        r = meshinfo("--json", "--config", name)
        check(r.returncode == 0, "the copied good config is usable", r)
        try:
            doc = json.loads(r.stdout)
        except ValueError as e:
            raise Failure("--json does not parse: %s\n%s" % (e, r.stdout))
        want = tmp + '/a"b\\c\td\ufffd.conf'
        check(doc["config"] == want, "config path escaped: %r" %
              doc["config"], r)


def check_fails_at(name, what):
    r = meshinfo("--check", fixture(name))
    check(r.returncode == 1, "--check on a %s must exit 1" % what, r)
    where = "%s:%d:" % (fixture(name), marked_line(name, "error line"))
    check(where in r.stderr, "the %s is reported at %s" % (what, where), r)
    check("OK" not in r.stdout, "a broken file is not OK", r)


def test_check_good():
    r = meshinfo("--check", fixture("good.conf"))
    check(r.returncode == 0, "--check on a good file exits 0", r)
    check(r.stdout == fixture("good.conf") + ": OK\n", "prints FILE: OK", r)
    check(r.stderr == "", "and nothing else", r)
    r = meshinfo("--check", fixture("good.conf"), "--json")
    check(r.returncode == 0, "--check --json on a good file exits 0", r)
    doc = json.loads(r.stdout)
    check(doc["ok"] is True and doc["file"] == fixture("good.conf")
          and doc["errors"] == [] and doc["warnings"] == [],
          "--check --json reports ok", r)


def test_check_syntax():
    check_fails_at("syntax.conf", "syntax error")


def test_check_type():
    check_fails_at("badtype.conf", "value of the wrong type")


def test_check_range():
    check_fails_at("range.conf", "value out of range")


def test_check_unknown():
    r = meshinfo("--check", fixture("unknown.conf"))
    check(r.returncode == 0, "an unknown key is a warning, not an error", r)
    where = "%s:%d:" % (fixture("unknown.conf"),
                        marked_line("unknown.conf", "warning line"))
    warning = [l for l in r.stderr.splitlines() if where in l]
    check(warning and "max_rail" in warning[0], "the warning names the key", r)
    check("max_rails" in warning[0], "the warning hints at max_rails", r)
    check(r.stdout.endswith(": OK\n"), "still OK", r)


def test_missing_only():
    r = meshinfo("--config", fixture("missing-only.conf"))
    check(r.returncode == 1, "no module loads, so no rails: exit 1", r)
    mods = section(r.stdout, "modules")
    check(mods and re.match(r"no-such-module\s+-\s+failed\s", mods[0]),
          "the missing module is listed as failed", r)
    check(len(mods) > 1 and re.match(r"\s+reason: \S", mods[1]),
          "with its reason", r)
    check("# status: NOT usable" in r.stdout and "no rails" in r.stdout,
          "status says why", r)
    # init fails on this list, so --check must too, for the same reason
    where = "%s:2: error: modules: no module in the list loads on this " \
        "host" % fixture("missing-only.conf")
    check(any(l.startswith(where) for l in r.stdout.splitlines()),
          "the report names the error at the line of 'modules'", r)
    r = meshinfo("--check", fixture("missing-only.conf"))
    check(r.returncode == 1 and "OK" not in r.stdout,
          "--check fails a list of which no module loads", r)
    check(any(l.startswith(where) for l in r.stderr.splitlines()),
          "--check says why, at the line of 'modules'", r)
    check("module no-such-module not loaded, its keys were not checked: "
          "not found (searched: %s)" % MODULE_DIR in r.stderr,
          "and the module's own reason", r)


def test_missing_among():
    r = meshinfo("--config", fixture("missing-among.conf"))
    check(r.returncode == 0, "the other modules still load: exit 0", r)
    mods = section(r.stdout, "modules")
    check(any(re.match(r"tcp-xdc\s+\S+\s+ready\s", m) for m in mods),
          "tcp-xdc ready", r)
    failed = [i for i, m in enumerate(mods)
              if re.match(r"no-such-module\s+-\s+failed\s", m)]
    check(failed and re.match(r"\s+reason: \S", mods[failed[0] + 1]),
          "the missing module is failed, with its reason", r)
    where = "%s:2: warning: module no-such-module not loaded: " % \
        fixture("missing-among.conf")
    check(any(l.startswith(where) for l in section(r.stdout, "warnings")),
          "a warning names the module and the line of 'modules'", r)
    check("# status: usable, 1 rail" in r.stdout, "status says usable", r)
    r = meshinfo("--check", fixture("missing-among.conf"))
    check(r.returncode == 0 and r.stdout.endswith(": OK\n"),
          "--check passes while another module loads", r)
    check(where.replace(": warning: module no-such-module not loaded: ",
                        ": warning: module no-such-module not loaded, "
                        "its keys were not checked: ") in r.stderr,
          "--check warns about the missing one", r)


def test_usage():
    r = meshinfo("--no-such-flag")
    check(r.returncode == 2, "an unknown flag exits 2", r)
    check(r.stdout == "" and "Usage: meshinfo" in r.stderr,
          "usage goes to stderr", r)
    r = meshinfo("-V")
    check(r.returncode == 0 and re.match(
        r"meshinfo \(nccl-mesh\) \d+\.\d+\.\d+, module ABI \d+\.\d+$",
        r.stdout), "-V prints the version", r)
    r = meshinfo("--help")
    check(r.returncode == 0 and "--check FILE" in r.stdout,
          "--help prints usage on stdout", r)
    r = meshinfo("--check")
    check(r.returncode == 2 and "needs an argument" in r.stderr,
          "--check without FILE is a usage error", r)


def hostile_dir(tmp):
    """Key files and FIFOs the hostile configs name as @DIR@/..."""
    def write(name, data, mode=0o600):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
    write("key-644", b"k" * 32, 0o644)
    write("key-short", b"short\n")
    write("key-long", b"k" * 5000)
    write("key-empty", b"")
    os.mkfifo(os.path.join(tmp, "key-fifo"), 0o600)
    os.mkfifo(os.path.join(tmp, "include-fifo"), 0o600)


def expectation(text):
    first = text.splitlines()[0]
    if not first.startswith("# expect: "):
        raise Failure("hostile config without '# expect: ' line")
    return first[len("# expect: "):]


def test_hostile():
    """Every config init would refuse fails --check: exit 1, its file and
    line, the reason, never OK; and init (plain meshinfo) refuses it too."""
    files = sorted(glob.glob(os.path.join(FIXTURES, "hostile", "*.conf")))
    check(len(files) >= 50, "at least 50 hostile configs, found %d"
          % len(files))
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        hostile_dir(tmp)
        for src in files:
            name = os.path.basename(src)
            with open(src) as f:
                text = f.read().replace("@DIR@", tmp)
            conf = os.path.join(tmp, name)
            with open(conf, "w") as f:
                f.write(text)
            expect = expectation(text)
            line = [n for n, l in enumerate(text.splitlines(), 1)
                    if "# error line" in l][0]
            try:
                r = meshinfo("--check", conf, module_path=with_fakes(),
                             timeout=10)
                usable = meshinfo("--config", conf,
                                  module_path=with_fakes(), timeout=10)
            except subprocess.TimeoutExpired:
                bad.append("%s: meshinfo hung" % name)
                continue
            where = "%s:%d: error: " % (conf, line)
            errors = [l for l in r.stderr.splitlines() if l.startswith(where)]
            why = []
            if r.returncode != 1:
                why.append("exit %d" % r.returncode)
            if "OK" in r.stdout:
                why.append("printed OK")
            if not errors:
                why.append("no error at line %d" % line)
            elif not any(expect in e for e in errors):
                why.append("no error says '%s'" % expect)
            if usable.returncode != 1:
                why.append("plain meshinfo (init) exit %d"
                           % usable.returncode)
            if why:
                bad.append("%s: %s\n    stdout: %s    stderr: %s" % (
                    name, ", ".join(why), r.stdout or "-\n",
                    r.stderr.replace("\n", "\n            ")))
    check(not bad, "%d of %d hostile configs not refused:\n%s" % (
        len(bad), len(files), "\n".join(bad)))


def test_fifo():
    """A FIFO as config or key file fails with a clear line instead of
    waiting for a writer that never comes (nothing here writes to it, so
    only a hang reaches the limit; how fast is for the benchmarks)."""
    with tempfile.TemporaryDirectory() as tmp:
        fifo = os.path.join(tmp, "fifo.conf")
        os.mkfifo(fifo)
        for args in (["--check", fifo], ["--config", fifo]):
            start = time.monotonic()
            try:
                r = meshinfo(*args, timeout=20)
            except subprocess.TimeoutExpired:
                raise Failure("meshinfo %s hangs on a FIFO" % args[0])
            print("%s on a FIFO: %.2f s" % (args[0],
                                            time.monotonic() - start))
            check(r.returncode == 1, "a FIFO config is an error", r)
            check("%s: cannot read: a FIFO, not a regular file" % fifo
                  in r.stdout + r.stderr, "the error says why", r)
        key = os.path.join(tmp, "key")
        os.mkfifo(key, 0o600)
        conf = os.path.join(tmp, "key.conf")
        with open(conf, "w") as f:
            f.write('version = 1;\nmodules = [ "tcp-xdc" ];\n'
                    'auth_key_file = "%s";\n' % key)
        try:
            r = meshinfo("--check", conf, timeout=20)
        except subprocess.TimeoutExpired:
            raise Failure("meshinfo hangs on a FIFO key file")
        check(r.returncode == 1 and "%s:3: error: auth_key_file: " % conf
              in r.stderr and "not a regular file" in r.stderr,
              "a FIFO key file is an error at its line", r)


def budget_cases(tmp):
    """Configs whose reading must end at once with a clear error:
    (name, config path, what the error says)."""
    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path
    cases = []
    # FIFOs named with the escapes libconfig reads in an @include name,
    # beside regular files named as a reader that skips them would read
    os.mkfifo(os.path.join(tmp, 'x"y'))
    os.mkfifo(os.path.join(tmp, "p\\q"))
    write("x\\", "")
    write("p\\\\q", "")
    cases.append(("include-quote", write(
        "quote.conf", 'version = 1;\n@include "x\\"y"\n'),
        "a FIFO, not a regular file"))
    cases.append(("include-backslash", write(
        "backslash.conf", 'version = 1;\n@include "p\\\\q"\n'),
        "a FIFO, not a regular file"))
    # ten levels of four includes each
    for level in range(10):
        write("fan%d.conf" % level, "".join(
            '@include "fan%d.conf"\n' % (level + 1)
            for _ in range(4)) if level < 9 else "# leaf\n")
    cases.append(("include-fan-out", write(
        "fan.conf", 'version = 1;\n@include "fan0.conf"\n'),
        "files read for one config"))
    # 30,000 keys, under 1 MiB
    cases.append(("30000-keys", write("keys.conf", "version = 1;\n" + "".join(
        "key_%05d = 1;\n" % i for i in range(30000))),
        "settings in one group"))
    cases.append(("proc-self-mem", "/proc/self/mem", "cannot read: "))
    return cases


def test_budget():
    """Configs that hung or slowed init end at once, in --check and in
    init alike, with an error that names the file (bar: 2 s each, see
    tests/bench/hostile-config.sh; the limit here only ends a hang)."""
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, conf, expect in budget_cases(tmp):
            for args in (["--check", conf], ["--config", conf]):
                start = time.monotonic()
                try:
                    r = meshinfo(*args, timeout=30)
                except subprocess.TimeoutExpired:
                    bad.append("%s %s: hung" % (name, args[0]))
                    continue
                took = time.monotonic() - start
                print("%s %s: %.2f s" % (name, args[0], took))
                out = r.stdout + r.stderr
                if r.returncode != 1 or "error" not in out \
                        or expect not in out or ": OK" in r.stdout:
                    bad.append("%s %s: exit %d, want '%s':\n%s" % (
                        name, args[0], r.returncode, expect, out))
    check(not bad, "\n".join(bad))


def test_sorted():
    """Diagnostics of every kind come out in line order."""
    r = meshinfo("--check", fixture("sorted.conf"))
    check(r.returncode == 1, "sorted.conf has errors", r)
    lines = [int(m.group(1)) for m in
             re.finditer(r"^\S*sorted\.conf:(\d+): (?:error|warning): ",
                         r.stderr, re.M)]
    check(len(lines) >= 4, "four diagnostics or more", r)
    check(lines == sorted(lines), "sorted by line: %s" % lines, r)


def test_no_devices():
    """A module without devices says why, and one without fini neither
    crashes meshinfo nor init."""
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "nodev.conf")
        with open(conf, "w") as f:
            f.write('version = 1;\nmodules = [ "tcp-xdc", "nofini", '
                    '"nodevwhy" ];\ntcp-xdc: { ifname = "nonesuch9"; };\n')
        r = meshinfo("--config", conf, module_path=with_fakes())
        check(r.returncode == 1, "no rails: exit 1 (and no crash)", r)
        mods = section(r.stdout, "modules")
        text = "\n".join(mods)
        check("reason: no devices: no usable interface matches 'nonesuch9'"
              in text, "tcp-xdc's reason is what it said", r)
        check("reason: no devices: the fake module was told to find none"
              in text, "a reason given through no_devices", r)
        check(re.search(r"nofini .* no devices", text),
              "nofini lists as no devices", r)
        r = meshinfo("--check", conf, module_path=with_fakes())
        check(r.returncode == 0 and r.stdout.endswith(": OK\n"),
              "--check judges the file, which is fine", r)
        check("%s:2: warning: module tcp-xdc on this host: no devices: "
              "no usable interface matches 'nonesuch9'" % conf in r.stderr,
              "and warns that this host gives tcp-xdc no device", r)


def main():
    test = globals().get("test_" + CASE.replace("-", "_"))
    if not test:
        print("unknown case", CASE, file=sys.stderr)
        return 2
    try:
        test()
    except Failure as e:
        print("FAIL %s: %s" % (CASE, e), file=sys.stderr)
        return 1
    print("ok", CASE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
