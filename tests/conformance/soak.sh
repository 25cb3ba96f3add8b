#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The conformance suite's soak: every test LOOPS times (default 100, the
# bar) against the mesh plugin with tcp-xdc on loopback, in clear and with
# encrypt = true (encrypt.sh: a fresh key, every stream as records), then
# against the reference plugin, each test its own pair of processes.
# Prints one line per test and a summary per plugin; exits 1 if anything
# failed.  The late-* tests take most of the time: each waits LOOPS x
# --late-ms; the others take about a minute a plugin on two cores.
#
# usage: tests/conformance/soak.sh [BUILD_DIR] [LOOPS]
# Environment:
#   SOAK_PLUGINS   which plugins (default "tcp-xdc tcp-xdc-encrypt refnet")
#   SOAK_TESTS     comma list of tests (default: all)
#   SOAK_LATE_MS   --late-ms (default 4000: tcp-xdc.conf's timeout_ms is
#                  2000); 300000 runs the five-minute-late receiver
#   SOAK_DEAD_MS   --dead-ms (default 10000)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${1:-$src/build}
loops=${2:-100}
late=${SOAK_LATE_MS:-4000}
dead=${SOAK_DEAD_MS:-10000}
drv=$build/tests/conformance/nccl-conform
tests_arg=()
[ -n "${SOAK_TESTS:-}" ] && tests_arg=(--test "$SOAK_TESTS")

[ -x "$drv" ] || { echo "soak.sh: no $drv (build first)" >&2; exit 2; }
# outer bound on one test's pair; each loop has its own watchdog
limit=$((loops * (60 + late / 1000) + 300))
rc=0
for p in ${SOAK_PLUGINS:-tcp-xdc tcp-xdc-encrypt refnet}; do
	mesh=(--plugin "$build/core/libnccl-net-mesh.so"
	      --module-path "$build/modules/tcp-xdc")
	wrap=() more=()
	case $p in
	tcp-xdc)
		args=("${mesh[@]}" --conf "$here/tcp-xdc.conf") ;;
	tcp-xdc-encrypt)
		# encrypt.sh writes the config and checks the comms said so
		wrap=(bash "$here/encrypt.sh") args=("${mesh[@]}") more=(-v) ;;
	refnet)
		args=(--plugin "$build/tests/functional/libnccl-net-refnet.so") ;;
	*)
		echo "soak.sh: unknown plugin $p (tcp-xdc, tcp-xdc-encrypt" \
			"or refnet)" >&2
		exit 2 ;;
	esac
	echo "== $p: $loops loops of each test, late by $late ms"
	start=$SECONDS
	"${wrap[@]}" "$here/run.sh" --driver "$drv" "${args[@]}" \
		"${tests_arg[@]}" --loops "$loops" --limit "$limit" -- \
		--late-ms "$late" --dead-ms "$dead" "${more[@]}" || rc=1
	echo "== $p: $((SECONDS - start)) s"
done
exit "$rc"
