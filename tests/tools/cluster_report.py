#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks a meshinfo --cluster report against what a scenario built.

usage: cluster_report.py REPORT.json [checks...]

  --schema FILE        validate against the JSON Schema (docs/meshinfo-
                       cluster.schema.json); prints SKIP for this part when
                       python3-jsonschema is missing
  --hosts N            the report lists N hosts, ranks 0..N-1
  --ok-pairs N         N pairs connected (every rail counted)
  --failed A:B[=ERR]   the ordered pairs A->B and B->A failed (with error
                       class ERR, or one of ERR|ERR...); repeatable; no
                       other pair failed
  --finding KIND=A:B   a finding of KIND between hosts A and B (either
                       order); repeatable; with --only-findings every
                       finding must be one of these
  --only-findings      no finding other than those given with --finding
  --no-finding KIND    no finding of KIND; repeatable
  --svg FILE           the rendered picture: one node per host, one
                       cluster per DC, one edge per host pair and rail,
                       failed pairs dashed
  --marked KIND=A:B    with --svg: the edges of A and B are drawn as a
                       finding of KIND (red, thick, the label naming it);
                       repeatable; no edge of another pair that connected
                       is drawn so
  --boot-failed A:B[=ERR]  NCCL's bootstrap from A to B's address failed
                       (with error class ERR, or one of ERR|ERR...);
                       repeatable; no other bootstrap pair failed
  --boot-finding B=A1+A2...  a bootstrap finding about B's address that
                       names exactly A1, A2, ... as the hosts not reaching
                       it; repeatable; no other bootstrap finding
  --boot-ok            every bootstrap pair connected, no bootstrap finding
  --boot-max-s S       the bootstrap check took under S seconds
  --table              print one line per pair: from to class gbps lat_us

Exit 0 when every check holds, 1 (with the reasons) otherwise.  Hosts are
named by the report's "host" field, so a scenario speaks of its own names.
"""
import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def validate_schema(doc, schema_path):
    try:
        import jsonschema
    except ImportError:
        print("SKIP: schema validation (no python3-jsonschema)")
        return
    with open(schema_path) as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    errors = sorted(cls(schema).iter_errors(doc), key=lambda e: list(e.path))
    for e in errors[:20]:
        where = "/".join(str(p) for p in e.path) or "(top)"
        fail(f"schema: {where}: {e.message}")
    if not errors:
        print(f"PASS report validates against {schema_path}")


def check_ranks(doc):
    """What a schema cannot say: ranks index hosts, pairs name real ones."""
    hosts = doc.get("hosts", [])
    ranks = [h.get("rank") for h in hosts]
    if ranks != list(range(len(hosts))):
        fail(f"host ranks are {ranks}, expected 0..{len(hosts) - 1} in order")
    n = len(hosts)
    for p in doc.get("pairs", []):
        if not (0 <= p.get("from", -1) < n and 0 <= p.get("to", -1) < n) \
                or p.get("from") == p.get("to"):
            fail(f"pair names a rank outside the hosts or itself: {p}")
    for f in doc.get("findings", []):
        for k in ("from", "to"):
            if f.get(k) is not None and not 0 <= f[k] < n:
                fail(f"finding names rank {f[k]} outside the hosts: {f}")
        for r in f.get("hosts") or []:
            if not 0 <= r < n:
                fail(f"finding names rank {r} outside the hosts: {f}")


def host_pair(spec):
    a, _, b = spec.partition(":")
    if not a or not b:
        raise argparse.ArgumentTypeError(f"expected A:B, got {spec!r}")
    return a, b


def match_failed(pairs, name, want, what):
    """The failed ones of pairs are exactly want's ordered (from, to)
    keys, each with one of its error classes where it names any."""
    got = set()
    for p in pairs:
        if p["ok"]:
            continue
        key = (name[p["from"]], name[p["to"]])
        got.add(key)
        if key not in want:
            fail(f"{what} {key[0]}->{key[1]} failed and should not have: "
                 f"{p.get('error')}: {p.get('reason')}")
        elif want[key] and p.get("error") not in want[key]:
            fail(f"{what} {key[0]}->{key[1]} failed with "
                 f"'{p.get('error')}', expected '{'|'.join(want[key])}' "
                 f"({p.get('reason')})")
    for key in want:
        if key not in got:
            fail(f"{what} {key[0]}->{key[1]} did not fail")


def failed_specs(specs, both_ways):
    """A:B[=ERR|ERR...] specs as match_failed wants them."""
    want = {}
    for spec in specs:
        pair, _, err = spec.partition("=")
        a, b = host_pair(pair)
        want[(a, b)] = err.split("|") if err else None
        if both_ways:
            want[(b, a)] = want[(a, b)]
    return want


def check_failed(doc, name, specs):
    match_failed(doc["pairs"], name, failed_specs(specs, True), "pair")


def check_findings(doc, name, specs, only):
    want = set()
    for spec in specs:
        kind, _, pair = spec.partition("=")
        want.add((kind, frozenset(host_pair(pair))))
    seen = set()
    for f in doc["findings"]:
        if f.get("from") is not None and f.get("to") is not None:
            key = (f["kind"], frozenset((name[f["from"]], name[f["to"]])))
        else:
            key = (f["kind"], None)
        if key in want:
            seen.add(key)
        elif only:
            fail(f"unexpected finding: {f['kind']}: {f.get('text')}")
    for kind, pair in want - seen:
        fail(f"no {kind} finding between {' and '.join(sorted(pair))}")


def check_boot(doc, name, a):
    """NCCL's bootstrap: the failed pairs, the findings, the time."""
    boot = doc["bootstrap"]
    rank = {v: k for k, v in name.items()}
    n = len(name)
    tried = len(boot["pairs"])
    print(f"bootstrap check: {tried} pairs, {boot['elapsed_s']:.2f} s")
    if a.boot_max_s is not None and not boot["elapsed_s"] < a.boot_max_s:
        fail(f"the bootstrap check took {boot['elapsed_s']} s, "
             f"not under {a.boot_max_s} s")
    if tried != n * (n - 1):
        fail(f"{tried} bootstrap pairs tried, expected {n * (n - 1)}")
    want = failed_specs(a.boot_failed, False)
    match_failed(boot["pairs"], name, want, "bootstrap")
    if boot["ok"] != (not want and not a.boot_finding):
        fail(f"bootstrap ok is {boot['ok']}")
    expect = {}
    for spec in a.boot_finding:
        dst, _, srcs = spec.partition("=")
        expect[dst] = frozenset(srcs.split("+"))
    seen = set()
    for f in doc["findings"]:
        if f["kind"] != "bootstrap":
            continue
        dst = name[f["to"]] if f.get("to") is not None else None
        srcs = frozenset(name[h] for h in f["hosts"] if h != f.get("to"))
        if dst not in expect or expect[dst] != srcs:
            fail(f"unexpected bootstrap finding: {f['text']}")
            continue
        seen.add(dst)
        need = ("ncclCommInitRank", "NCCL_SOCKET_IFNAME",
                doc["hosts"][rank[dst]]["bootstrap"]["address"])
        for word in need:
            if word not in f["text"]:
                fail(f"the bootstrap finding about {dst} does not say "
                     f"'{word}': {f['text']}")
    for dst in set(expect) - seen:
        fail(f"no bootstrap finding about {dst}")


def svg_text(g):
    return " ".join(t.text or "" for t in g.iter() if t.tag.endswith("}text"))


def edge_marks(g):
    """What an edge's drawing says: its stroke colors, whether a line is
    thick (a finding's mark), and its label."""
    strokes = {c.get("stroke") for c in g.iter()
               if c.tag.endswith("}path") and c.get("stroke")}
    thick = any(float(c.get("stroke-width") or 1) >= 2.5 for c in g.iter()
                if c.tag.endswith("}path"))
    return strokes, thick, svg_text(g)


def check_svg(doc, name, path, marked=()):
    """Graphviz writes one <g class="node|edge|cluster"> per element, with
    the DOT name in its <title>; node names are mapped to hosts through
    their labels, which hold the host name."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        fail(f"{path}: not a readable SVG: {e}")
        return
    groups = {"node": [], "edge": [], "cluster": []}
    for g in root.iter():
        if g.tag.endswith("}g") and g.get("class") in groups:
            groups[g.get("class")].append(g)

    def title(g):
        t = next((c for c in g if c.tag.endswith("}title")), None)
        return (t.text or "") if t is not None else ""

    hosts = set(name.values())
    node_host = {}
    for g in groups["node"]:
        words = set(re.split(r"[\s()]+", svg_text(g)))
        match = hosts & words
        if len(match) != 1:
            fail(f"svg node '{title(g)}' labelled '{svg_text(g)}' names "
                 f"not exactly one host")
            continue
        node_host[title(g)] = match.pop()
    if sorted(node_host.values()) != sorted(hosts):
        fail(f"svg nodes are {sorted(node_host.values())}, expected one per "
             f"host {sorted(hosts)}")
    dcs = {h["dc"] for h in doc["hosts"]}
    if len(groups["cluster"]) != len(dcs):
        fail(f"svg has {len(groups['cluster'])} clusters, expected one per "
             f"DC ({len(dcs)})")

    # the expected edges: every unordered host pair per rail (relayed
    # pairs may be drawn through relay hosts, which this check leaves out)
    relayed = {frozenset((name[p["from"]], name[p["to"]]))
               for p in doc["pairs"] if p.get("class") == "relayed"}
    failed = {frozenset((name[p["from"]], name[p["to"]]))
              for p in doc["pairs"] if not p["ok"]}
    rails = {p["rail"] for p in doc["pairs"]}
    want = {}
    for p in doc["pairs"]:
        key = frozenset((name[p["from"]], name[p["to"]]))
        if key not in relayed:
            want[key] = len(rails)
    marks = {}
    for spec in marked:
        kind, _, pair = spec.partition("=")
        marks[frozenset(host_pair(pair))] = kind
    got = {}
    for g in groups["edge"]:
        ends = re.split(r"->|--", title(g))
        if len(ends) != 2 or not all(e in node_host for e in ends):
            fail(f"svg edge '{title(g)}' does not join two host nodes")
            continue
        key = frozenset(node_host[e] for e in ends)
        got[key] = got.get(key, 0) + 1
        if key in failed:
            dashed = any(c.get("stroke-dasharray") for c in g.iter())
            if not dashed:
                fail(f"svg edge of the failed pair {sorted(key)} is not dashed")
            continue
        strokes, thick, text = edge_marks(g)
        if key in marks:
            if strokes != {"red"} or not thick or marks[key] not in text:
                fail(f"svg edge of {sorted(key)} is not marked "
                     f"'{marks[key]}' (strokes {sorted(strokes)}, "
                     f"thick {thick}, label '{text}')")
        elif "red" in strokes or thick or \
                any(k in text for k in ("degraded", "asymmetric")):
            fail(f"svg edge of {sorted(key)} is marked, though no finding "
                 f"was expected (label '{text}')")
    for key in set(want) | set(got):
        if key in relayed:
            continue
        if got.get(key, 0) != want.get(key, 0):
            fail(f"svg has {got.get(key, 0)} edges between "
                 f"{' and '.join(sorted(key))}, expected {want.get(key, 0)}")
    if not failures:
        print(f"PASS {path}: {len(groups['node'])} nodes, "
              f"{len(groups['cluster'])} DC clusters, "
              f"{len(groups['edge'])} edges")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report")
    ap.add_argument("--schema")
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--ok-pairs", type=int)
    ap.add_argument("--failed", action="append", default=[])
    ap.add_argument("--finding", action="append", default=[])
    ap.add_argument("--only-findings", action="store_true")
    ap.add_argument("--no-finding", action="append", default=[])
    ap.add_argument("--svg")
    ap.add_argument("--marked", action="append", default=[])
    ap.add_argument("--boot-failed", action="append", default=[])
    ap.add_argument("--boot-finding", action="append", default=[])
    ap.add_argument("--boot-ok", action="store_true")
    ap.add_argument("--boot-max-s", type=float)
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()

    try:
        with open(a.report) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL: {a.report}: {e}", file=sys.stderr)
        return 1
    if a.schema:
        validate_schema(doc, a.schema)
    if failures:
        return 1
    check_ranks(doc)
    if failures:
        return 1
    name = {h["rank"]: h["host"] for h in doc["hosts"]}
    if len(set(name.values())) != len(name):
        fail(f"host names are not unique: {sorted(name.values())}")
        return 1

    if a.hosts is not None and len(doc["hosts"]) != a.hosts:
        fail(f"{len(doc['hosts'])} hosts, expected {a.hosts}")
    ok = sum(1 for p in doc["pairs"] if p["ok"])
    if a.ok_pairs is not None and ok != a.ok_pairs:
        fail(f"{ok} pairs connected, expected {a.ok_pairs}")
    if a.failed or a.ok_pairs is not None:
        check_failed(doc, name, a.failed)
    if a.finding or a.only_findings:
        check_findings(doc, name, a.finding, a.only_findings)
    for f in doc["findings"]:
        if f["kind"] in a.no_finding:
            fail(f"unexpected finding: {f['kind']}: {f.get('text')}")
    if a.boot_failed or a.boot_finding or a.boot_ok or \
            a.boot_max_s is not None:
        check_boot(doc, name, a)
    if a.svg:
        check_svg(doc, name, a.svg, a.marked)
    if a.table:
        for p in doc["pairs"]:
            print(f"{p['rail']} {name[p['from']]} {name[p['to']]} "
                  f"{p['class'] or '-'} {p['gbps'] if p['ok'] else '-'} "
                  f"{p['lat_us'] if p['ok'] else '-'} "
                  f"{p['error'] or ''}".rstrip())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
