#!/bin/bash
# SPDX-License-Identifier: MIT
#
# A receiver minutes late on a healthy link, through tcp-xdc: the netns
# "late" scenario of tests/netns-faults/faults.sh with a longer delay.  Two
# namespaces joined by a veth pair, timeout_ms = 2000; the client sends
# 8 x 4 MiB (window 8) while the server posts its receives LATE_S seconds
# later, the client closes its send comm as soon as its sends complete.
# The transfer must complete with every byte verified and nothing logged
# at WARN; prints the delay, the time to completion and meshperf's result.
#
# usage: tests/bench/late-receiver.sh [BUILD_DIR] [LATE_S]
#   BUILD_DIR  a meson build directory (default: build)
#   LATE_S     seconds the receiver is late (default 300, the bar)
# Needs root (network namespaces); exits 77 without.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
late=${2:-300}

for f in tools/meshperf/meshperf core/libnccl-net-mesh.so \
	 modules/tcp-xdc/mesh-tcp-xdc.so; do
	[ -e "$build/$f" ] || { echo "late-receiver: $build/$f is missing (build first)" >&2; exit 2; }
done
echo "# receiver $late s late, timeout_ms 2000, 8 x 4 MiB, then close right after completion"
start=$(date +%s)
FAULTS_LATE_S=$late bash "$here/../netns-faults/faults.sh" \
	"$build/tools/meshperf/meshperf" "$build/core/libnccl-net-mesh.so" \
	"$build/modules/tcp-xdc" late
echo "# wall time $(($(date +%s) - start)) s"
