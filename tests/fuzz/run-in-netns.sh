#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs a command in a network namespace of its own that holds only lo, up:
# for a fuzz target that dials the addresses it mutates.  Exits 77 (meson's
# skip) where no namespace can be made (not root, unshare or ip missing).
# Usage: run-in-netns.sh COMMAND [ARGS...]
set -uo pipefail

if [ $# -lt 1 ]; then
	echo "usage: $0 COMMAND [ARGS...]" >&2
	exit 2
fi
if ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
	echo "SKIP: unshare or ip (iproute2) missing"
	exit 77
fi
if ! unshare --net true 2>/dev/null; then
	echo "SKIP: cannot create a network namespace (root needed)"
	exit 77
fi
exec unshare --net -- bash -c 'ip link set lo up || exit 1; exec "$@"' \
	netns "$@"
