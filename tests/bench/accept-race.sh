#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The accept-race bar: 100 pairs of processes set up connections (the
# conformance suite's multi-accept, 2 loops each: 10 connections a pair)
# while one process is paused 1.0-1.2 s every 0.1-0.3 s, the handle holding
# 127.0.0.1 and ::1, authenticated and encrypted; every connection must
# complete with no WARN.  Prints a line per run and "N of RUNS runs passed".
#
# usage: tests/bench/accept-race.sh [BUILD_DIR] [RUNS]
#   BUILD_DIR  a meson build directory (default: build)
#   RUNS       pairs of processes (default 100, the bar)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../conformance/encrypt.sh" \
	"$here/../conformance/accept-race.sh" "${1:-build}" "${2:-100}" 2 \
	multi-accept
