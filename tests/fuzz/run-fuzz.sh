#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs a libFuzzer target for a bounded time on a copy of its seed corpus,
# so the seeds in the source tree stay as they are.  A crashing input is
# kept in the artifact directory and named in the output.
# Usage: run-fuzz.sh TARGET SEED_DIR ARTIFACT_DIR SECONDS RUNS
set -euo pipefail

if [ $# -ne 5 ]; then
	echo "usage: $0 TARGET SEED_DIR ARTIFACT_DIR SECONDS RUNS" >&2
	exit 2
fi
target=$1 seeds=$2 artifacts=$3 seconds=$4 runs=$5

work=$(mktemp -d "${TMPDIR:-/tmp}/mesh-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$artifacts"
cp -- "$seeds"/* "$work/corpus/"

# -timeout: one input taking this long is a hang, reported as a failure.
"$target" "$work/corpus" \
	-max_total_time="$seconds" -runs="$runs" -timeout=10 \
	-rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$artifacts/"
