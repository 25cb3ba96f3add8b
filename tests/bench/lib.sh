# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Shared by the benchmark scripts: sourced, never run.

# The median of the numbers on stdin, one per line.
bench_median() {
	sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# bench_figure FILE KEY: figure KEY of the last result line meshperf wrote
# to FILE with --json, with three decimals.
bench_figure() {
	python3 - "$1" "$2" <<'PY'
import json, sys
val = None
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        if d.get("event") == "result" and d.get(sys.argv[2]) is not None:
            val = d[sys.argv[2]]
print("%.3f" % val)
PY
}
