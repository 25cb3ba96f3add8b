#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The close-race bar: the conformance suite's close-last-recv, a new
# connection each loop whose receiver closes the moment its last receive
# completes while the sender still tests its last sends; every send must
# complete.  LOOPS connections (default 1000, the bar) for tcp-xdc, for
# tcp-xdc with encrypt = true and relayed through a meshrelay (no WARN
# either).  Prints run.sh's PASS or FAIL line for each and a summary.
#
# usage: tests/bench/close-race.sh [BUILD_DIR] [LOOPS]
#   BUILD_DIR  a meson build directory (default: build)
#   LOOPS      connections each (default $CLOSE_RACE_LOOPS, else 1000)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
conf=$here/../conformance
b=$(realpath "${1:-build}")
loops=${2:-${CLOSE_RACE_LOOPS:-1000}}
driver=$b/tests/conformance/nccl-conform
plugin=$b/core/libnccl-net-mesh.so
for f in "$driver" "$plugin" "$b/modules/tcp-xdc/mesh-tcp-xdc.so"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 2; }
done
common=(--driver "$driver" --plugin "$plugin" --test close-last-recv
	--loops "$loops")
opts=(-- --late-ms 4000 --dead-ms 10000)
failed=0

run() {
	local what=$1 out
	shift
	out=$("$@" 2>&1)
	if [ $? -eq 0 ]; then
		echo "$what: $(grep -m1 '^PASS' <<<"$out")"
	else
		echo "$what: FAIL"
		tail -n 30 <<<"$out" | sed 's/^/  /'
		failed=$((failed + 1))
	fi
}

run tcp-xdc bash "$conf/run.sh" "${common[@]}" \
	--conf "$conf/tcp-xdc.conf" --module-path "$b/modules/tcp-xdc" \
	"${opts[@]}"
run encrypted bash "$conf/encrypt.sh" "$conf/run.sh" "${common[@]}" \
	--module-path "$b/modules/tcp-xdc" "${opts[@]}" -v
run relayed bash "$conf/relay.sh" "$b" "${common[@]}" "${opts[@]}"
echo "close race: $((3 - failed)) of 3 runs of $loops connections passed"
[ "$failed" -eq 0 ]
