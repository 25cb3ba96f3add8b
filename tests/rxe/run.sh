#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Host side of the rxe lab stage: makes sure the lab's guest image exists,
# boots the guest once and runs tests/rxe/in-guest.sh in it against a build
# made on this host.  Exit status: in-guest.sh's, 77 (skip) when the lab
# cannot run here (not root, no rxe-lab, no qemu), 124 when the guest ran
# past its time limit.
#
#   tests/rxe/run.sh BUILD_DIR
#
# Environment: RXE_LAB (the rxe-lab script; default ../shared/rxe-lab/rxe-lab
# next to the repository), RXE_STAGE_TIMEOUT (seconds for the whole boot,
# default 1500), RXE_TEST_MODULE and RXE_TEST_ONLY (passed to in-guest.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)

skip() {
	echo "SKIP: $*" >&2
	exit 77
}

[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
case $build/ in
"$src"/*) rel=${build#"$src"/} ;;
*) echo "$0: the build directory must be inside $src (the guest sees only the repository)" >&2
   exit 2 ;;
esac

lab=${RXE_LAB:-$src/../shared/rxe-lab/rxe-lab}
[ "$(id -u)" -eq 0 ] || skip "the rxe lab needs root"
[ -x "$lab" ] || skip "no rxe lab at $lab (set RXE_LAB)"
[ -e "$build/modules/ib-fabric/mesh-ib-fabric.so" ] ||
	[ "${RXE_TEST_MODULE:-ib-fabric}" != ib-fabric ] ||
	skip "ib-fabric was not built (install libibverbs-dev and reconfigure)"
"$lab" ensure || skip "the rxe lab cannot be set up here (rxe-lab ensure failed)"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"

# The guest runs a newer Debian than the build host: libraries whose soname
# changed in between (libconfig) travel with the build.  libibverbs is not
# copied: its providers must be the guest's own (it is backward compatible).
libs=$build/rxe-libs
rm -rf "$libs"
mkdir -p "$libs"
ldd "$build/core/libnccl-net-mesh.so" "$build/tools/meshinfo/meshinfo" |
	awk '$1 ~ /^libconfig\.so/ && $3 ~ /^\// { print $3 }' | sort -u |
	while read -r lib; do
		cp -L "$lib" "$libs/"
	done

env_words=()
for v in RXE_TEST_MODULE RXE_TEST_ONLY; do
	# quoted for the guest's shell: a regex may hold spaces and '|'
	[ -n "${!v:-}" ] && env_words+=("$(printf '%q' "$v=${!v}")")
done
# A guest that dies before the command finishes (125) is the emulator
# failing, not the tests: under TCG the guest kernel now and then oopses
# while it boots.  Boot again, twice at most; a test failure is never
# retried.
for attempt in 1 2 3; do
	rc=0
	"$lab" run --src "$src" --timeout "${RXE_STAGE_TIMEOUT:-1500}" -- \
		"env ${env_words[*]} bash tests/rxe/in-guest.sh '$rel'" || rc=$?
	[ "$rc" -eq 125 ] || break
	echo "rxe stage: the guest died without a result (boot $attempt of 3)"
done
case $rc in
124) echo "FAIL: the guest ran past ${RXE_STAGE_TIMEOUT:-1500} s" ;;
125) echo "FAIL: the guest died without a result" ;;
esac
exit "$rc"
