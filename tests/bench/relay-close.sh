#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The relayed orderly-close bar: RUNS pairs of processes (default 100),
# each with its own meshrelay (tests/conformance/relay.sh), run the
# conformance suite's connect-close for LOOPS connections (default 6:
# nothing, one message, three, each way), both ranks closing at once.
# A run passes when every connection completes and neither rank nor the
# relay logged a WARN.  Prints a line per failed run and "N of RUNS runs
# passed".
#
# usage: tests/bench/relay-close.sh [BUILD_DIR] [RUNS] [LOOPS]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
b=$(realpath "${1:-build}")
runs=${2:-100}
loops=${3:-6}
passed=0
for ((i = 1; i <= runs; i++)); do
	out=$(bash "$here/../conformance/relay.sh" "$b" \
		--driver "$b/tests/conformance/nccl-conform" \
		--plugin "$b/core/libnccl-net-mesh.so" --test connect-close \
		--loops "$loops" -- --late-ms 4000 --dead-ms 10000 2>&1)
	if [ $? -eq 0 ]; then
		passed=$((passed + 1))
	else
		echo "run $i: FAIL"
		grep -E '^FAIL|WARN' <<<"$out" | head -n 5 | sed 's/^/  /'
	fi
done
echo "relayed orderly closes: $passed of $runs runs passed ($loops connections each, no WARN)"
[ "$passed" -eq "$runs" ]
