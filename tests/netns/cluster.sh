#!/bin/bash
# SPDX-License-Identifier: MIT
#
# meshinfo --cluster on six hosts in two DCs behind NAT
# (xdc_cluster_topology in lib.sh), one process per host, rank 0 in a1
# and every other rank finding it with --rendezvous (cross-DC through
# a1's router).  Every host's cable is shaped to 1 Gbit/s, but b1 <-> b2
# to 100 Mbit/s both ways; a2 and a3 drop each other's packets.  Then:
#  - every rank exits 1 (a pair could not connect);
#  - the JSON report validates against docs/meshinfo-cluster.schema.json;
#    a2 -> a3 and a3 -> a2 failed, every other pair connected;
#    the findings are b1 <-> b2 degraded and a2 <-> a3 unreachable,
#    nothing else;
#  - the SVG that Graphviz rendered from the report's DOT holds one node
#    per host, one cluster per DC and one edge per host pair, the failed
#    one dashed, b1 <-> b2's red, thick and labelled "degraded", and no
#    other edge marked (SKIP printed for this part without Graphviz).
# With CLUSTER_KEEP=DIR the text report, JSON, DOT and SVG are copied to
# DIR (the pictures of docs/meshinfo.md come from there).
#
# usage: cluster.sh MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

# each host's cable, below what two loaded cores move through a veth, so
# the figures hold still; the routers' link is XDC_RATE (lib.sh)
cable=1gbit
slow=100mbit

cluster_scenario "$@"
xdc_cluster_topology 3
# NCCL's bootstrap on a management network, as docs/deploy.md says: the
# report's findings are the two faults alone
# (tests/netns/bootstrap-nat.sh checks the bootstrap on the NAT'd LANs)
xdc_mgmt_network "${XDC_HOSTS[@]}"
for h in "${XDC_HOSTS[@]}"; do
	case $h in
	b1) netns_shape_split b1 lan-b1 "$cable" "${XDC_IP[b2]}" "$slow" ;;
	b2) netns_shape_split b2 lan-b2 "$cable" "${XDC_IP[b1]}" "$slow" ;;
	*) netns_shape_split "$h" "lan-$h" "$cable" ;;
	esac
done
netns_block a2 a3

# the plugin is told its cables' speed, so no rail-speed finding is due
env_common=(NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_DIR"
	    NCCL_MESH_TCP_XDC_SPEED_MBPS=1200 NCCL_SOCKET_IFNAME=mgmt)
out=$NETNS_TMP/out
mkdir -p "$out"
pic=()
if command -v dot >/dev/null; then
	pic=(--svg "$out/cluster.svg")
fi
size=${#XDC_HOSTS[@]}
t0=$SECONDS
pids=()
for ((r = 0; r < size; r++)); do
	h=${XDC_HOSTS[$r]}
	read -r addr port < <(xdc_dial "$h" a1)
	extra=()
	[ "$r" -eq 0 ] && extra=(--json "$out/cluster.json"
				 --dot "$out/cluster.dot" "${pic[@]}")
	netns_spawn "$h" "$NETNS_TMP/rank$r" env NCCL_MESH_HOSTNAME="$h" \
		"${env_common[@]}" "$MESHINFO" --cluster \
		--rendezvous "$addr:$port" --rank "$r" --size "$size" \
		--plugin "$PLUGIN" --timeout 60 "${extra[@]}"
	pids+=("$NETNS_LAST_PID")
done

show_all() {
	local r

	for ((r = 0; r < size; r++)); do
		echo "---- rank $r (${XDC_HOSTS[$r]}) ----"
		cat "$NETNS_TMP/rank$r"
	done
}

for ((r = 0; r < size; r++)); do
	rc=0
	netns_wait "${pids[$r]}" 100 || rc=$?
	[ "$rc" -eq 1 ] || {
		show_all
		netns_die "rank $r (${XDC_HOSTS[$r]}) exited $rc, expected 1 (a pair cannot connect)"
	}
done
elapsed=$((SECONDS - t0))
cat "$NETNS_TMP/rank0"
echo "PASS every rank exits 1 (a2 and a3 cannot connect), after $elapsed s"

if [ -n "${CLUSTER_KEEP:-}" ]; then
	mkdir -p "$CLUSTER_KEEP"
	cp "$NETNS_TMP/rank0" "$CLUSTER_KEEP/cluster.txt"
	cp "$out"/* "$CLUSTER_KEEP/"
fi

[ -s "$out/cluster.dot" ] || { show_all; netns_die "rank 0 wrote no DOT file"; }
svg_check=()
if [ "${#pic[@]}" -gt 0 ]; then
	[ -s "$out/cluster.svg" ] ||
		{ show_all; netns_die "rank 0 wrote no SVG file"; }
	svg_check=(--svg "$out/cluster.svg")
else
	echo "SKIP: the rendered picture (no Graphviz dot)"
fi
# a2 dials a3's own address (dropped: timed out), then the address a3
# advertises, its router's outside, which refuses a connection from inside
# (no hairpin NAT): the plugin's line has both, and the drop is the news
blocked='timed out'
python3 "$check" "$out/cluster.json" --schema "$schema" --hosts "$size" \
	--ok-pairs $((size * (size - 1) - 2)) --failed "a2:a3=$blocked" \
	--finding degraded=b1:b2 --finding unreachable=a2:a3 --only-findings \
	--marked degraded=b1:b2 --boot-ok \
	"${svg_check[@]}" || {
	show_all
	cat "$out/cluster.json"
	netns_die "the report does not show the scenario"
}
# the text report says the same
for re in '^  unreachable: rail 0: a2 <-> a3 ' '^  degraded: rail 0: b[12] -> b[12] '; do
	grep -q -- "$re" "$NETNS_TMP/rank0" ||
		netns_die "rank 0's text report has no line matching '$re'"
done
python3 "$check" "$out/cluster.json" --table
echo "PASS the report flags b1-b2 degraded and a2-a3 unreachable, nothing else"
