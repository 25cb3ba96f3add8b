#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The rxe stage (docs/testing-rxe.md): real verbs over Soft-RoCE against a
# build made on this host.  Where this host's kernel has an rdma_rxe that
# works inside network namespaces, tests/rxe/stage.sh runs here; otherwise
# it runs in a qemu guest that tests/rxe/lab/guest builds from Debian
# packages (once; cached) and boots once for the whole stage.
#
#   tests/rxe/run.sh BUILD_DIR
#
# Exit status: stage.sh's; 77 (skip) when the stage cannot run here (not
# root, ib-fabric not built, no rdma_rxe and no way to build or boot the
# guest), with the reason on stderr; 124 when the guest ran past its limit;
# 125 when it died during the stage; 126 when it never came up.
#
# Environment: RXE_MODE (auto, host, guest; default auto),
# RXE_STAGE_TIMEOUT (seconds for the stage in the guest, default 4200),
# RXE_TEST_*, CONF_* and CLOSE_* (passed to stage.sh), and the guest's own
# (tests/rxe/lab/guest).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)

skip() {
	echo "SKIP: rxe stage: $*" >&2
	exit 77
}

[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
case $build/ in
"$src"/*) rel=${build#"$src"/} ;;
*) echo "$0: the build directory must be inside $src (the guest sees only the repository)" >&2
   exit 2 ;;
esac

[ "$(id -u)" -eq 0 ] || skip "needs root (namespaces, rxe devices, the guest image)"
[ -e "$build/modules/ib-fabric/mesh-ib-fabric.so" ] ||
	[ "${RXE_TEST_MODULE:-ib-fabric}" != ib-fabric ] ||
	skip "ib-fabric was not built (install libibverbs-dev and reconfigure)"

# the stage's own knobs travel into the guest
stage_env=()
for v in $(compgen -v | grep -E '^(RXE_TEST_|CONF_|CLOSE_)'); do
	stage_env+=("$v=${!v}")
done

# host_rxe: this kernel's rdma_rxe carries RoCE between two namespaces (a
# two-node mesh and an RC ping-pong over it; net.sh explains the probe).
host_rxe() {
	local rc=0

	[ -d /sys/module/rdma_rxe ] || modprobe rdma_rxe 2>/dev/null || {
		echo "rxe stage: this kernel has no rdma_rxe"
		return 1
	}
	command -v ibv_rc_pingpong >/dev/null || {
		echo "rxe stage: no ibv_rc_pingpong (ibverbs-utils) for the probe"
		return 1
	}
	bash "$here/net.sh" up 2 && bash "$here/net.sh" probe || rc=1
	bash "$here/net.sh" down
	[ "$rc" -eq 0 ] ||
		echo "rxe stage: this kernel's rdma_rxe does not carry RoCE between namespaces"
	return "$rc"
}

mode=${RXE_MODE:-auto}
if [ "$mode" = auto ]; then
	mode=guest
	host_rxe && mode=host
fi
case $mode in
host)
	echo "rxe stage: on this host, kernel $(uname -r)"
	exec env "${stage_env[@]}" bash "$here/stage.sh" "$build"
	;;
guest) ;;
*) echo "$0: RXE_MODE is auto, host or guest" >&2; exit 2 ;;
esac

guest=$here/lab/guest
"$guest" deps || skip "cannot install qemu and mmdebstrap here"
"$guest" image >/dev/null ||
	skip "cannot build the guest image (no access to the Debian archive?)"

# The guest runs a newer Debian than the build host: libraries whose soname
# changed in between (libconfig, intel-ipsec-mb) travel with the build.
# libibverbs is not copied: its providers must be the guest's own (it is
# backward compatible).
libs=$build/rxe-libs
rm -rf "$libs"
mkdir -p "$libs"
ldd "$build/core/libnccl-net-mesh.so" "$build/tools/meshinfo/meshinfo" \
	"$build/modules/tcp-xdc/mesh-tcp-xdc.so" |
	awk '$1 ~ /^lib(config|IPSec_MB)\.so/ && $3 ~ /^\// { print $3 }' |
	sort -u |
	while read -r lib; do
		cp -L "$lib" "$libs/"
	done

cmd="env"
for w in "${stage_env[@]}"; do
	cmd+=" $(printf '%q' "$w")"
done
cmd+=" bash tests/rxe/stage.sh $(printf '%q' "$rel")"
rc=0
"$guest" run -t "${RXE_STAGE_TIMEOUT:-4200}" -- "$cmd" || rc=$?
case $rc in
124) echo "FAIL: rxe stage: the guest ran past ${RXE_STAGE_TIMEOUT:-4200} s" ;;
125) echo "FAIL: rxe stage: the guest died during the stage" ;;
126) echo "FAIL: rxe stage: the guest did not come up" ;;
esac
exit "$rc"
