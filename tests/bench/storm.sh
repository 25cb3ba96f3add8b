#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): the bar for connection storms.  A
# storm of RATE (default 1000) silent connections a second without the key
# for SECONDS (default 30) against a meshperf server with 1024 descriptors,
# while a real client waits to connect (held back until the storm ends).
# Runs the netns storm scenario (tests/netns/storm.sh) at that length and
# prints its figures: the real setup's time after the storm, the refusal
# log's lines per second, the server's peak descriptors.
#
#   tests/bench/storm.sh [BUILD_DIR] [SECONDS] [RATE]
#
# Bar: setup within 2 s of the storm's end, at most one log line a second.
set -euo pipefail

build=$(realpath "${1:-build}")
seconds=${2:-30}
rate=${3:-1000}
src=$(cd "$(dirname "$0")/../.." && pwd)

out=$(bash "$src/tests/netns/storm.sh" "$build/tools/meshperf/meshperf" \
	"$build/core/libnccl-net-mesh.so" "$build/modules/tcp-xdc" \
	"$seconds" "$rate" 10 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E '^(storm|figures|PASS)'
figures=$(echo "$out" | grep '^figures:')
get() { echo "$figures" | grep -o "$1=[0-9.]*" | cut -d= -f2; }
echo
echo "storm of $rate connections/s for $seconds s, listener with 1024 descriptors:"
echo "  real setup after the storm: $(get setup_after_storm_s) s (bar 2 s)"
echo "  refusal log: $(get refusal_lines) lines, $(get lines_per_s) per second (bar 1)"
echo "  refusals counted in summaries: $(get refusals_counted)"
echo "  peak descriptors of the server: $(get peak_fds) (limit 1024)"
