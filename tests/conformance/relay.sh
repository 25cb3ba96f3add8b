#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The conformance suite over relayed connections: starts a meshrelay on
# 127.0.0.2 (a free port), then runs tests/conformance/run.sh with both
# ranks routed through it (relay.conf).  Arguments go to run.sh.
#
# usage: relay.sh BUILD_DIR [run.sh options...]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
shift
meshrelay=$build/tools/meshrelay/meshrelay
[ -x "$meshrelay" ] && [ -e "$build/modules/relay/mesh-relay.so" ] || {
	echo "SKIP: relay or meshrelay not built"
	exit 77
}
modpath=$build/modules/tcp-xdc:$build/modules/relay
tmp=$(mktemp -d)
relay_pid=""

cleanup() {
	[ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null && wait "$relay_pid"
	rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
NCCL_MESH_CONF=$here/relay.conf NCCL_MESH_MODULE_PATH=$modpath \
	NCCL_MESH_RELAY_NAME=r1 NCCL_MESH_RELAY_PORT="$port" NCCL_DEBUG=INFO \
	"$meshrelay" >"$tmp/relay.log" 2>&1 &
relay_pid=$!
for _ in $(seq 100); do
	ss -Htln "sport = :$port" | grep -q . && break
	kill -0 "$relay_pid" 2>/dev/null || break
	sleep 0.1
done
ss -Htln "sport = :$port" | grep -q . || {
	echo "FAIL: meshrelay did not listen on port $port"
	cat "$tmp/relay.log"
	exit 1
}

rank() {
	echo "env NCCL_MESH_RELAY_NAME=c$1 NCCL_MESH_ADVERTISE_ADDRS=127.0.0.$(($1 + 3)) NCCL_MESH_ADVERTISE_LOCAL=false"
}
"$here/run.sh" --conf "$here/relay.conf" --module-path "$modpath" \
	--env NCCL_MESH_RELAY_PORT="$port" \
	--rank0-prefix "$(rank 0)" --rank1-prefix "$(rank 1)" "$@"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
	echo "---- meshrelay ----"
	tail -n 60 "$tmp/relay.log"
fi
exit $rc
