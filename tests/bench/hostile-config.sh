#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): how long configs that once hung or stalled
# NCCL's init take to be refused, in `meshinfo --check FILE` and in init
# (plain meshinfo with NCCL_MESH_CONF naming the file: the code path of
# the plugin's init).  Prints each case's seconds and exit status; the bar
# is 2 s each.  A case still running after 60 s is cut off and shown so.
#
#   tests/bench/hostile-config.sh BUILD
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 BUILD" >&2; exit 2; }
build=$(realpath "$1")
meshinfo=$build/tools/meshinfo/meshinfo
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# the configs: an @include naming a FIFO with an escaped quote and with an
# escaped backslash, ten levels of four @includes, 30,000 keys, a file
# that reads as empty, text after a NUL byte
mkfifo "$work/x\"y" "$work/p\\q"
touch "$work/x\\" "$work/p\\\\q"	# as a reader skipping escapes would name them
printf 'version = 1;\n@include "x\\"y"\n' >"$work/quote.conf"
printf 'version = 1;\n@include "p\\\\q"\n' >"$work/backslash.conf"
for level in 0 1 2 3 4 5 6 7 8 9; do
	if [ "$level" -lt 9 ]; then
		for _ in 1 2 3 4; do
			echo "@include \"fan$((level + 1)).conf\""
		done
	else
		echo "# leaf"
	fi >"$work/fan$level.conf"
done
printf 'version = 1;\n@include "fan0.conf"\n' >"$work/fan.conf"
{ echo "version = 1;"; seq -f 'key_%05g = 1;' 0 29999; } >"$work/keys.conf"
printf 'version = 1;\ndc = 1;\0 max_rails = 0;\n' >"$work/nul.conf"

cases=(quote.conf backslash.conf fan.conf keys.conf /proc/self/mem nul.conf)

# seconds and exit status of one run, cut off at 60 s
measure() {
	local start end rc=0
	start=$(date +%s.%N)
	env -u NCCL_MESH_CONF NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" \
		"$@" timeout 60 "$meshinfo" "${args[@]}" >/dev/null 2>&1 || rc=$?
	end=$(date +%s.%N)
	LC_ALL=C awk -v a="$start" -v b="$end" -v rc="$rc" \
		'BEGIN { printf "%6.2f s (exit %d%s)", b - a, rc,
			 rc == 124 ? ", cut off" : "" }'
}

printf '%-16s %-28s %s\n' case "meshinfo --check" "init (NCCL_MESH_CONF)"
for c in "${cases[@]}"; do
	file=$c
	[ "${c#/}" != "$c" ] || file=$work/$c
	args=(--check "$file")
	check=$(measure)
	args=()
	init=$(measure NCCL_MESH_CONF="$file")
	printf '%-16s %-28s %s\n' "$(basename "$c")" "$check" "$init"
done
