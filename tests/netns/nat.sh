#!/bin/bash
# SPDX-License-Identifier: MIT
#
# NAT scenario: two datacenters behind masquerading routers that forward
# only a small port range per host, to other ports than the hosts listen on,
# with a shaped link between them.  meshperf runs every host pair through
# the plugin and verifies every byte.  The plugin's per-connection INFO
# lines must show that same-DC peers were dialled on their own address and
# listen port, cross-DC peers on their router's external address and a port
# of their forwarded block, and that the accepting side saw the dialler's
# router (masquerade).
#
# usage: nat.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

xdc_scenario "$here/nat.conf" "$@"

# listen ports of the plugin: 40000-40007 inside, a block outside
int_ports='4000[0-7]'
ext_ports() {
	local base=${XDC_FWD_BASE[$1]} k alt=""

	for ((k = 0; k < 8; k++)); do
		alt+="${alt:+|}$((base + k))"
	done
	printf '(%s)' "$alt"
}

# an IPv4 address as the plugin prints it: plain or IPv4-mapped IPv6
ip_re() {
	local q=${1//./\\.}

	printf '(%s|\\[::ffff:%s\\])' "$q" "$q"
}

# expect_conn TAG SIDE DIR FROM_IP TO_IP TO_PORT_RE CLASS [FROM_PORT_RE]
expect_conn() {
	local from_port=${8:-[0-9]+} re

	re="$3 [^ ]+: tcp-xdc, $(ip_re "$4"):$from_port -> $(ip_re "$5"):$6, $7"
	xdc_log_has "$1" "$2" "$re" || {
		xdc_show_logs "$1"
		netns_die "$1: no $2 log line matches '$re'"
	}
}

args=(--json --verbose --timeout 20 --sizes '0,8,4K,1M,8M' --budget 16M
      --mem 64M --iters 50 --lat-max 4K)
nsizes=5

run_pair() {
	local srv=$1 cli=$2 tag="$1-$2" rc=0 t0=$SECONDS got

	xdc_meshperf "$srv" "$cli" "$tag" 60 "${args[@]}" || rc=$?
	if [ "$rc" -ne 0 ]; then
		xdc_show_logs "$tag"
		netns_die "$tag: meshperf failed ($rc)"
	fi
	got=$(grep -c '"event":"result"' "$NETNS_TMP/$tag.client" || true)
	[ "$got" -eq "$nsizes" ] || {
		xdc_show_logs "$tag"
		netns_die "$tag: $got results, expected $nsizes"
	}
	for side in server client; do
		xdc_log_has "$tag" "$side" '"event":"summary".*"status":"ok"' || {
			xdc_show_logs "$tag"
			netns_die "$tag: $side summary missing or not ok"
		}
	done
	if [ "${XDC_ROUTER[$srv]}" = "${XDC_ROUTER[$cli]}" ]; then
		# client -> server, and the reverse connection of the replies
		expect_conn "$tag" client send "${XDC_IP[$cli]}" \
			"${XDC_IP[$srv]}" "$int_ports" same-DC
		expect_conn "$tag" server send "${XDC_IP[$srv]}" \
			"${XDC_IP[$cli]}" "$int_ports" same-DC
	else
		local srv_ext=${XDC_EXT[${XDC_ROUTER[$srv]}]}
		local cli_ext=${XDC_EXT[${XDC_ROUTER[$cli]}]}

		expect_conn "$tag" client send "${XDC_IP[$cli]}" "$srv_ext" \
			"$(ext_ports "$srv")" cross-DC
		expect_conn "$tag" server send "${XDC_IP[$srv]}" "$cli_ext" \
			"$(ext_ports "$cli")" cross-DC
		# the acceptor sees the peer's router, not the peer
		expect_conn "$tag" server recv "${XDC_IP[$srv]}" "$cli_ext" \
			'[0-9]+' cross-DC "$int_ports"
		expect_conn "$tag" client recv "${XDC_IP[$cli]}" "$srv_ext" \
			'[0-9]+' cross-DC "$int_ports"
	fi
	echo "PASS $tag ($((SECONDS - t0)) s): $(grep '"size":8388608' \
		"$NETNS_TMP/$tag.client" | grep -o '"gbits_per_s":[0-9.]*')"
}

# same DC, directly
run_pair a1 a2
run_pair b2 b1
# across, through both NATs; every host is server once and client once
run_pair a1 b1
run_pair b2 a1
run_pair a2 b2
run_pair b1 a2
echo "PASS: all host pairs verified"
