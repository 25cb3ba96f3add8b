#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The conformance suite over relayed connections: starts a meshrelay on
# 127.0.0.2 (a free port), then runs tests/conformance/run.sh with both
# ranks routed through it (relay.conf).  Arguments go to run.sh.
# An orderly close is no error anywhere (docs/relay.md): every test but
# those that close with requests in flight or kill a rank also fails when
# either rank, or the meshrelay in a run of such tests only, logs a WARN.
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

# run.sh's options read here: where the pairs' output goes (run.sh takes
# the last --log-dir, so the caller's wins over ours), which tests.
logdir=$tmp/logs tests='' driver=''
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
	case ${args[i]} in
	--) break ;;
	--log-dir) logdir=${args[i + 1]} ;;
	--test) tests=${args[i + 1]} ;;
	--driver) driver=${args[i + 1]} ;;
	esac
done

rank() {
	echo "env NCCL_MESH_RELAY_NAME=c$1 NCCL_MESH_ADVERTISE_ADDRS=127.0.0.$(($1 + 3)) NCCL_MESH_ADVERTISE_LOCAL=false"
}
"$here/run.sh" --conf "$here/relay.conf" --module-path "$modpath" \
	--env NCCL_MESH_RELAY_PORT="$port" \
	--rank0-prefix "$(rank 0)" --rank1-prefix "$(rank 1)" \
	--log-dir "$tmp/logs" "$@"
rc=$?
if [ $rc -eq 0 ]; then
	[ -n "$tests" ] || tests=$("$driver" --list | awk '{print $1}' | paste -sd, -)
	IFS=, read -r -a list <<<"$tests"
	all_orderly=1
	for t in "${list[@]}"; do
		case $t in
		close-inflight-* | killed-*) all_orderly=0; continue ;;
		esac
		for r in 0 1; do
			grep -q WARN "$logdir/$t.rank$r" || continue
			echo "FAIL $t: rank $r logged a WARN though every close was orderly:"
			grep WARN "$logdir/$t.rank$r" | head -n 5 | sed 's/^/  /'
			rc=1
		done
	done
	if [ $all_orderly = 1 ] && grep -q WARN "$tmp/relay.log"; then
		echo "FAIL: meshrelay logged a WARN though every close was orderly:"
		grep WARN "$tmp/relay.log" | head -n 5 | sed 's/^/  /'
		rc=1
	fi
fi
if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
	echo "---- meshrelay ----"
	tail -n 60 "$tmp/relay.log"
fi
exit $rc
