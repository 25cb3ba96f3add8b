#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What the relay scenarios share (relay.sh, relay-resume.sh): the gateway
# topology of lib.sh (relay_topology) with meshrelay built, a key for
# every host, and the logs shown when a check fails.  Sourced after
# lib.sh.

# relay_scenario MESHPERF PLUGIN BUILD_DIR: skips (77) without the relay
# module or meshrelay; sets MESHRELAY, CONF and RELAY_KEY (the
# environment word that gives a process the key).
# shellcheck disable=SC2034 # for the scripts that source this
relay_scenario() {
	local build=$3 dir

	dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
	netns_scenario "$1" "$2" "$build/modules/tcp-xdc:$build/modules/relay"
	MESHRELAY=$build/tools/meshrelay/meshrelay
	CONF=$dir/relay.conf
	[ -f "$build/modules/relay/mesh-relay.so" ] ||
		netns_skip "mesh-relay.so is not built"
	[ -x "$MESHRELAY" ] || netns_skip "meshrelay is not built"
	netns_init
	relay_topology ""
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 |
		tr -d ' \n' >"$NETNS_TMP/key")
	RELAY_KEY=NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key
}

# relay_fail TAG MESSAGE: the run's logs and every meshrelay's, then dies
relay_fail() {
	local f

	xdc_show_logs "$1"
	for f in "$NETNS_TMP"/meshrelay-*; do
		echo "---- $(basename "$f") ----"
		cat "$f"
	done
	netns_die "$2"
}
