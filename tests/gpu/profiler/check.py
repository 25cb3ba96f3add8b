#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks the event files of the test profiler (meshprof.c), one per rank.

In every phase whose name starts with "on" (meshprof_mark), each network
operation NCCL ran, a ProxyStep event, must have the plugin's request
events under it (net plugin events of nccl-mesh's id, type req), stopped,
and their bytes must add up to the size NCCL recorded for the step (its
transSize after the send was posted or the receive completed).  A request's parts (chunks on streams, work
requests on QPs, hops), where the module reports any, must add up to the
request.  In phases whose name starts with "off" there should be no
ProxyStep and no net plugin event at all (the events really were off);
where there are, the file still passes, with a warning and off_steps
in the report: a comparison of on with off is then void.  A net plugin
event counts in the phase of its step.

Usage: check.py [--json OUT] FILE...
Exit status 0 when every file passes, 1 when one does not, 2 on bad
input.
"""

import argparse
import collections
import json
import sys

MESH_ID = (0x4D48 << 16) | 1
FLAG_UNPOSTED = 0x1
MAX_SHOWN = 5


class BadInput(Exception):
    pass


def parse_fields(words):
    fields = {}
    for w in words:
        key, sep, value = w.partition("=")
        if not sep:
            raise BadInput("not key=value: %r" % w)
        fields[key] = value
    return fields


def num(fields, key, base=10):
    try:
        return int(fields[key], base)
    except (KeyError, ValueError):
        raise BadInput("field %s missing or not a number" % key)


def read(path):
    """The events of one file: header, marks, ops, steps, nets."""
    ev = {"header": {}, "marks": {0: "start"}, "ops": {}, "steps": {},
          "nets": [], "others": 0}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            words = line.split()
            if not words:
                continue
            try:
                if words[0] == "#":
                    if len(words) >= 3 and words[1] == "meshprof":
                        ev["header"] = parse_fields(words[3:])
                    continue
                if words[0] == "mark":
                    ev["marks"][int(words[1])] = (
                        words[2] if len(words) > 2 else "")
                    continue
                kind, ident = words[0], int(words[1])
                fields = parse_fields(words[2:])
                fields["id"] = ident
                for key in ("phase", "t0", "t1"):
                    fields[key] = num(fields, key)
                if kind == "op":
                    fields["send"] = num(fields, "send")
                    ev["ops"][ident] = fields
                elif kind == "step":
                    for key in ("op", "bytes", "states", "step"):
                        fields[key] = num(fields, key)
                    ev["steps"][ident] = fields
                elif kind == "net":
                    fields["step"] = num(fields, "step")
                    fields["plugin"] = num(fields, "plugin", 16)
                    if fields["plugin"] == MESH_ID:
                        for key in ("bytes", "req", "flags", "index",
                                    "updates"):
                            fields[key] = num(fields, key)
                    ev["nets"].append(fields)
                elif kind == "ev":
                    ev["others"] += 1
                else:
                    raise BadInput("unknown event kind %r" % kind)
            except (BadInput, ValueError, IndexError) as e:
                raise BadInput("%s:%d: %s" % (path, lineno, e))
    if not ev["header"]:
        raise BadInput("%s: no meshprof header" % path)
    return ev


def phase_kind(marks, phase):
    name = marks.get(phase, "")
    if name.startswith("on"):
        return "on"
    if name.startswith("off"):
        return "off"
    return "other"


def check(ev, name):
    """Returns (ok, report dict, problem lines)."""
    marks = ev["marks"]
    problems = []
    r = collections.Counter()
    reqs_of_step = collections.defaultdict(list)
    parts_of_req = collections.defaultdict(list)
    modules = collections.Counter()

    for n in ev["nets"]:
        if n["plugin"] != MESH_ID:
            r["foreign_net_events"] += 1
            continue
        step = ev["steps"].get(n["step"])
        if step is None:
            r["orphan_net_events"] += 1
            continue
        # An event belongs to its step's phase: a module may start a
        # part of a request after the phase that posted it ended.
        if phase_kind(marks, step["phase"]) == "off":
            r["off_net_events"] += 1
            continue
        modules[(n.get("module", "-"), n["type"], n.get("kind", "-"))] += 1
        if n["type"] == "req":
            if n["flags"] & FLAG_UNPOSTED:
                r["unposted"] += 1
                continue
            reqs_of_step[n["step"]].append(n)
        else:
            parts_of_req[n["req"]].append(n)

    for sid, st in sorted(ev["steps"].items()):
        kind = phase_kind(marks, st["phase"])
        if kind == "off":
            r["off_steps"] += 1
            continue
        if kind != "on":
            continue
        op = ev["ops"].get(st["op"])
        direction = "send" if op and op["send"] else "recv"
        r["steps"] += 1
        reqs = reqs_of_step.get(sid, [])
        if not reqs:
            r["steps_without_events"] += 1
            problems.append("step %d (%s, op %d, step %d, %d bytes): no "
                            "plugin event" % (sid, direction, st["op"],
                                              st["step"], st["bytes"]))
            continue
        r["steps_with_events"] += 1
        total = 0
        for q in reqs:
            r["requests"] += 1
            if not q["t1"] or not q["updates"]:
                r["requests_not_stopped"] += 1
                problems.append("request %d of step %d never stopped with "
                                "its size" % (q["req"], sid))
            total += q["bytes"]
            parts = parts_of_req.get(q["req"], [])
            if parts:
                r["requests_with_parts"] += 1
                r["parts"] += len(parts)
                got = sum(p["bytes"] for p in parts)
                if got != q["bytes"]:
                    r["requests_parts_mismatch"] += 1
                    problems.append("request %d: parts carry %d bytes, the "
                                    "request %d" % (q["req"], got, q["bytes"]))
        if st["states"]:
            r["bytes_nccl_" + direction] += st["bytes"]
            r["bytes_plugin_" + direction] += total
            if total == st["bytes"]:
                r["steps_bytes_match"] += 1
            else:
                r["steps_bytes_mismatch"] += 1
                problems.append("step %d (%s): NCCL moved %d bytes, the "
                                "plugin's events say %d" %
                                (sid, direction, st["bytes"], total))
        else:
            r["steps_unsized"] += 1

    ok = (r["steps"] > 0 and not r["steps_without_events"] and
          not r["steps_bytes_mismatch"] and not r["requests_not_stopped"] and
          not r["requests_parts_mismatch"] and not r["orphan_net_events"] and
          r["steps_bytes_match"] > 0)
    if r["steps"] == 0:
        problems.append("no ProxyStep event in an 'on' phase")
    if r["off_steps"] or r["off_net_events"]:
        print("%s: warning: %d steps and %d plugin events in 'off' phases: "
              "the events were not off" % (name, r["off_steps"],
                                           r["off_net_events"]))
    if r["orphan_net_events"]:
        problems.append("%d plugin events under no known step" %
                        r["orphan_net_events"])
    report = dict(r)
    report["file"] = name
    report["rank"] = ev["header"].get("rank")
    report["dropped"] = int(ev["header"].get("dropped", "0"))
    report["ok"] = ok and report["dropped"] == 0
    if report["dropped"]:
        problems.append("the profiler dropped %d events (MESHPROF_MAX)" %
                        report["dropped"])
    report["events_by_module"] = {"%s %s %s" % k: v
                                  for k, v in sorted(modules.items())}
    return report["ok"], report, problems


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the reports here, one per line")
    p.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    all_ok = True
    reports = []
    for path in args.files:
        try:
            ev = read(path)
        except (OSError, BadInput) as e:
            print("check.py: %s" % e, file=sys.stderr)
            return 2
        ok, report, problems = check(ev, path)
        reports.append(report)
        all_ok = all_ok and ok
        print("%s: rank %s: %s" % (path, report["rank"],
                                   "PASS" if ok else "FAIL"))
        print("  %d steps in 'on' phases, %d with plugin events, %d sized "
              "alike by NCCL and the plugin, %d not" %
              (report.get("steps", 0), report.get("steps_with_events", 0),
               report.get("steps_bytes_match", 0),
               report.get("steps_bytes_mismatch", 0)))
        for d in ("send", "recv"):
            print("  %s: NCCL %d bytes, plugin requests %d bytes" %
                  (d, report.get("bytes_nccl_" + d, 0),
                   report.get("bytes_plugin_" + d, 0)))
        print("  %d requests, %d with parts (%d parts), %d unposted" %
              (report.get("requests", 0), report.get("requests_with_parts", 0),
               report.get("parts", 0), report.get("unposted", 0)))
        for k, v in report["events_by_module"].items():
            print("  events %s: %d" % (k, v))
        for line in problems[:MAX_SHOWN]:
            print("  problem: " + line)
        if len(problems) > MAX_SHOWN:
            print("  ... and %d more problems" % (len(problems) - MAX_SHOWN))
    if args.json:
        with open(args.json, "w") as f:
            for report in reports:
                f.write(json.dumps(report) + "\n")
    print("profiler events: %s" % ("PASS" if all_ok else "FAIL"))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
