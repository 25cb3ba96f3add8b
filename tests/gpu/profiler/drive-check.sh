#!/bin/sh
# SPDX-License-Identifier: MIT
# The test profiler and check.py without NCCL: meshprof_drive plays NCCL
# between the core's events and the profiler; check.py must pass the
# good run and fail each broken one (a step never posted to the plugin,
# a size unlike what was sent, parts short of their request).
# Usage: drive-check.sh MESHPROF_DRIVE PROFILER.so CHECK.PY
set -u
drive=$1 profiler=$2 check=$3
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail=0
for mode in good missing bytes parts; do
	if ! "$drive" "$profiler" "$dir/$mode.events" "$mode"; then
		echo "FAIL: meshprof_drive $mode"
		fail=1
		continue
	fi
	python3 "$check" "$dir/$mode.events" >"$dir/$mode.out" 2>&1
	rc=$?
	want=1
	[ "$mode" = good ] && want=0
	if [ "$rc" -ne "$want" ]; then
		echo "FAIL: check.py on $mode: exit $rc, want $want"
		cat "$dir/$mode.out"
		fail=1
	else
		echo "ok: check.py on $mode: exit $rc"
	fi
done
cat "$dir/good.out"
exit $fail
