# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2034 # mesh_checks is for the sourcing script
#
# rdma-mesh checks of the rxe stage (docs/testing-rxe.md).  Sourced, never
# run: stage.sh sources it after lib.sh and net.sh and before it dispatches
# "--check FUNC", and runs the entries of mesh_checks with its `check`.
#
# Needs from the sourcing script (exported, so the per-check processes see
# them): BUILD, MESHPERF, PLUGIN, LOGDIR; lib.sh's helpers.
#
# Topologies, all in namespaces rxn1..rxn4 (tests/rxe/net.sh):
#
#   triangle  net.sh up 3: link i-j is 10.77.<i><j>.0/24, netdev v<i><j>,
#             rxe device rxe<i><j> in rxn<i>.
#   node 4    namespace rxn4 cabled only to node 1: v14 10.77.14.1 (rxe14) ==
#             v41 10.77.14.4 (rxe41).  A plain veth without RoCE device,
#             m24 10.88.24.2 == m42 10.88.24.4, joins rxn4 to rxn2 for
#             meshperf's bootstrap only, as a cluster's management network
#             would: it is no cable, so rdma-mesh never sees it.
#   cable 2   a second cable between nodes 1 and 2: v12b 10.77.112.1 (rxe12b)
#             == v21b 10.77.112.2 (rxe21b).  The cable-down check takes
#             v12b down and up again under a transfer.
#
# Every check builds the topology it needs when it is missing, so any check
# can run alone (RXE_TEST_ONLY); what a check builds outlives it and
# mesh_cleanup removes it.  The config is tests/rxe/mesh-rdma.conf.

MESH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/rxe/net.sh
declare -F rxnet_up >/dev/null || . "$MESH_DIR/net.sh"
# shellcheck source=tests/rxe/close.sh
declare -F close_spawn >/dev/null || . "$MESH_DIR/close.sh"
# shellcheck source=tests/rxe/outage.sh
declare -F outage_bounce >/dev/null || . "$MESH_DIR/outage.sh"

# The checks in order, "FUNC|LIMIT_S|NAME"; mesh_run_checks runs them.
mesh_checks=(
	"check_mesh_triangle_up|90|rdma-mesh: triangle up (3 nodes, 3 links)"
	"check_mesh_triangle|900|rdma-mesh: triangle, 6 directed pairs at once, both ways, 2 channels, hca order not paired"
	"check_mesh_node4_up|90|rdma-mesh: node 4 cabled only to node 1"
	"check_mesh_node4_reach|900|rdma-mesh: node 4 -> node 1 over their one cable"
	"check_mesh_node4_unreachable|180|rdma-mesh: node 4 -> node 2 fails fast (no shared cable)"
	"check_mesh_cable2_up|90|rdma-mesh: second cable between nodes 1 and 2"
	"check_mesh_two_cables|900|rdma-mesh: two cables 1 -> 2, 0 B..64 MiB, striped over both"
	"check_mesh_cable_down|420|rdma-mesh: one of two cables down 5 s under traffic both ways, every byte kept, the cable back in use"
	"check_mesh_topology_down|60|rdma-mesh: topology down"
)

# mesh_run_checks: every entry of mesh_checks through the sourcing script's
# check NAME LIMIT FUNC.
mesh_run_checks() {
	local entry func limit name

	for entry in "${mesh_checks[@]}"; do
		IFS='|' read -r func limit name <<<"$entry"
		check "$name" "$limit" "$func" || true
	done
}

# meshperf parameters.  The triangle runs twelve processes at once on the
# guest's two emulated CPUs: small sizes, few iterations.  Their --timeout
# (no progress) and the runs' limits (MESH_LIMIT_S) only end hangs: on a
# loaded two-core host the triangle went 120 s without progress and still
# worked.
MESH_LIMIT_S=840
MESH_TRI_ARGS=(--abi 12 --timeout 360 --bidir --channels 2 --sizes '0,8,64K,1M,4M'
	       --iters 20 --budget 8M --mem 32M --lat-max 64K)
MESH_TRI_NSIZES=5
MESH_N4_ARGS=(--abi 12 --timeout 240 --sizes '0,8,64K,1M,8M' --iters 50
	      --budget 16M --mem 32M --lat-max 64K)
MESH_N4_NSIZES=5
MESH_DUO_ARGS=(--abi 12 --timeout 240 --sizes '0,8,64K,1M,16M,64M' --iters 50
	       --budget 128M --mem 128M --lat-max 64K)
MESH_DUO_NSIZES=6
# A connection to a peer without a shared cable must fail before the
# config's connect_timeout_ms (60 s) could end it: it does not wait for a
# cable.  It takes seconds; the rest is room for a loaded host.
MESH_FAIL_FAST_S=50

# ------------------------------------------------------------ topology

# mesh_addr I J: node I's address on its cable to node J (first cable).
mesh_addr() {
	local i=$1 j=$2

	if [ "$i" -lt "$j" ]; then
		echo "10.77.$i$j.$i"
	else
		echo "10.77.$j$i.$i"
	fi
}

mesh_triangle_ensure() {
	[ "$(rxnet_nodes)" = 3 ] && rxnet_ns_exists rxn3 && return 0
	# what was added to an older mesh goes first
	mesh_extras_remove
	rxnet_up 3 || {
		echo "cannot build the 3-node mesh"
		rxnet_down
		return 1
	}
}

mesh_node4_present() {
	rxnet_ns_exists rxn4 && [ -e /sys/class/infiniband/rxe14 ] &&
		[ -e /sys/class/infiniband/rxe41 ]
}

mesh_node4_build() {
	rxnet_add_ns rxn4 || return 1
	rxnet_link 1 4 10.77.14 || return 1
	# management link: bootstrap TCP only, no RoCE device
	if ! { ip link add m42 netns rxn4 type veth peer name m24 netns rxn2 &&
	       ip -n rxn4 addr add 10.88.24.4/24 dev m42 &&
	       ip -n rxn2 addr add 10.88.24.2/24 dev m24 &&
	       ip -n rxn4 link set m42 up && ip -n rxn2 link set m24 up; }; then
		echo "node 4: cannot set up the management link m42/m24"
		return 1
	fi
	rxnet_wait_active rxe14 rxe41
}

mesh_node4_ensure() {
	mesh_triangle_ensure || return 1
	mesh_node4_present && return 0
	mesh_node4_remove
	mesh_node4_build && return 0
	mesh_node4_remove
	return 1
}

mesh_node4_remove() {
	local pid

	rdma link delete rxe14 2>/dev/null || true
	rdma link delete rxe41 2>/dev/null || true
	if rxnet_ns_exists rxn4; then
		for pid in $(ip netns pids rxn4 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
		# its veth ends go with it, and so do their peers v14 and m24
		ip netns del rxn4 2>/dev/null || true
	fi
	ip -n rxn1 link del v14 2>/dev/null || true
	ip -n rxn2 link del m24 2>/dev/null || true
}

mesh_cable2_present() {
	[ -e /sys/class/infiniband/rxe12b ] && [ -e /sys/class/infiniband/rxe21b ]
}

mesh_cable2_ensure() {
	mesh_triangle_ensure || return 1
	mesh_cable2_present && return 0
	mesh_cable2_remove
	rxnet_link 1 2 10.77.112 b && rxnet_wait_active rxe12b rxe21b && return 0
	mesh_cable2_remove
	return 1
}

mesh_cable2_remove() {
	rdma link delete rxe12b 2>/dev/null || true
	rdma link delete rxe21b 2>/dev/null || true
	ip -n rxn1 link del v12b 2>/dev/null || true
}

# What these checks add to the triangle.
mesh_extras_remove() {
	mesh_cable2_remove
	mesh_node4_remove
}

# Removes everything the checks built; for the sourcing script's cleanup.
mesh_cleanup() {
	mesh_extras_remove
	rxnet_down >/dev/null 2>&1 || true
}

# ------------------------------------------------------------ meshperf

mesh_need_module() {
	local f=$BUILD/modules/rdma-mesh/mesh-rdma-mesh.so

	[ -e "$f" ] || { echo "missing $f (libibverbs-dev on the build host?)"; return 1; }
	if ldd "$f" | grep 'not found'; then
		echo "$f: libraries missing in the guest"
		return 1
	fi
}

# mesh_env HOST: the environment of a meshperf process on HOST.
mesh_env() {
	echo "NCCL_MESH_HOSTNAME=$1 NCCL_MESH_CONF=${MESH_CONF:-$MESH_DIR/mesh-rdma.conf}" \
		"NCCL_MESH_MODULE_PATH=$BUILD/modules/rdma-mesh ${MESH_ENV:-}"
}

# mesh_server TAG NS HOST ADDR PORT: a meshperf server, pid in
# MESH_SPID[TAG], log LOGDIR/TAG.server.
declare -gA MESH_SPID=() MESH_CPID=() MESH_PORT=() MESH_NS=()
mesh_server() {
	local tag=$1 n=$2 host=$3 addr=$4 port=$5 envw

	read -ra envw <<<"$(mesh_env "$host")"
	rxe_spawn "$n" "$LOGDIR/$tag.server" env "${envw[@]}" "$MESHPERF" \
		--server --bind "$addr" --port "$port" --plugin "$PLUGIN" \
		--json --verbose
	MESH_SPID[$tag]=$RXE_LAST_PID
	MESH_PORT[$tag]=$port
	MESH_NS[$tag]=$n
}

mesh_server_listens() {
	local tag=$1

	rxe_wait_listen "${MESH_NS[$tag]}" "${MESH_PORT[$tag]}" 60 && return 0
	echo "$tag: meshperf server in ${MESH_NS[$tag]} did not listen on ${MESH_PORT[$tag]}"
	mp_show_logs "$tag"
	return 1
}

# mesh_client TAG NS HOST SERVER_ADDR [args]: the meshperf client of TAG's
# server, pid in MESH_CPID[TAG], log LOGDIR/TAG.client.
mesh_client() {
	local tag=$1 n=$2 host=$3 addr=$4 envw

	shift 4
	read -ra envw <<<"$(mesh_env "$host")"
	rxe_spawn "$n" "$LOGDIR/$tag.client" env "${envw[@]}" "$MESHPERF" \
		--client "$addr" --port "${MESH_PORT[$tag]}" --plugin "$PLUGIN" \
		--json --verbose "$@"
	MESH_CPID[$tag]=$RXE_LAST_PID
}

# mesh_finish TAG LIMIT_S: waits for the client, then the server; the
# client's status, else the server's (124: time limit).
mesh_finish() {
	local tag=$1 crc=0 src=0

	rxe_wait "${MESH_CPID[$tag]}" "$2" || crc=$?
	rxe_wait "${MESH_SPID[$tag]}" 30 || src=$?
	[ "$crc" -ne 0 ] && return "$crc"
	return "$src"
}

# mesh_link_lines TAG SIDE: rdma-mesh's per-connection lines of one side,
# "send comm 3 to peer ...: 2 QPs over rxe13 GID 1 -> ::ffff:10.77.13.3
# (index 1), MTU 4096; rxe12b GID 1 -> ...".
mesh_link_lines() {
	grep -hE '(send|recv) comm [0-9]+ (to|from) peer .*: [0-9]+ QPs over ' \
		"$LOGDIR/$1.$2" || true
}

# mesh_line_links: of the line on stdin, the links as "DEV=PEER_IP", sorted,
# space separated.
mesh_line_links() {
	sed -E 's/.* QPs over //' | tr ';' '\n' | awk '{
		t = ""
		for (i = 1; i < NF; i++)
			if ($i == "->")
				t = $(i + 1)
		sub(/^::ffff:/, "", t)
		print $1 "=" t
	}' | sort | paste -sd ' ' -
}

# mesh_expect_links TAG SIDE KINDS WANT: every connection line of SIDE uses
# exactly the links WANT ("rxe13=10.77.13.3 ...", sorted), and there is a
# line of each kind in KINDS ("send recv").
mesh_expect_links() {
	local tag=$1 side=$2 kinds=$3 want=$4 lines line got k rc=0

	lines=$(mesh_link_lines "$tag" "$side")
	if [ -z "$lines" ]; then
		echo "$tag $side: no rdma-mesh connection lines"
		return 1
	fi
	for k in $kinds; do
		printf '%s\n' "$lines" | grep -q "$k comm " || {
			echo "$tag $side: no $k connection"
			rc=1
		}
	done
	while IFS= read -r line; do
		got=$(mesh_line_links <<<"$line")
		[ "$got" = "$want" ] && continue
		echo "$tag $side: links $got, expected $want:"
		echo "    $line"
		rc=1
	done <<<"$lines"
	return "$rc"
}

mesh_show_results() {
	grep '"event":"result"' "$LOGDIR/$1.client" |
		sed 's/.*"size":\([0-9]*\),.*"iters":\([0-9]*\),.*"gbits_per_s":\([0-9.]*\),.*"lat_us":\([0-9.a-z]*\).*/    size \1: \2 iters, \3 Gb\/s, lat \4 us/'
}

# mesh_judge TAG NSIZES KINDS CLIENT_LINKS SERVER_LINKS: the finished run
# verified every size on both sides and used exactly the expected links.
mesh_judge() {
	local tag=$1 n=$2 kinds=$3 rc=0

	mp_check "$tag" "$n" || rc=1
	mesh_expect_links "$tag" client "$kinds" "$4" || rc=1
	mesh_expect_links "$tag" server "$kinds" "$5" || rc=1
	if [ "$rc" -ne 0 ]; then
		mp_show_logs "$tag"
		return 1
	fi
	echo "$tag: ok"
	{ mesh_link_lines "$tag" client; mesh_link_lines "$tag" server; } |
		sed 's/^meshperf//; s/^/    /'
	mesh_show_results "$tag"
}

# ------------------------------------------------------ checks: triangle

check_mesh_triangle_up() {
	mesh_triangle_ensure || return 1
	rxnet_status
}

# All six directed pairs at once: for each i -> j a server on node j and a
# client on node i, --bidir with latency, so each run's two ranks connect to
# each other at the same moment.  Every connection must use exactly the
# cable joining its pair, whatever position that cable has in the node's
# hca list.
check_mesh_triangle() {
	local i j tag tags=() rc=0 frc t0

	mesh_need_module || return 1
	mesh_triangle_ensure || return 1
	for i in 1 2 3; do
		for j in 1 2 3; do
			[ "$i" = "$j" ] && continue
			tag=tri-$i$j
			tags+=("$tag")
			mesh_server "$tag" "rxn$j" "tri$j" "$(mesh_addr "$j" "$i")" \
				$((18800 + 10 * i + j))
		done
	done
	for tag in "${tags[@]}"; do
		mesh_server_listens "$tag" || return 1
	done
	t0=$SECONDS
	for tag in "${tags[@]}"; do
		i=${tag:4:1}
		j=${tag:5:1}
		mesh_client "$tag" "rxn$i" "tri$i" "$(mesh_addr "$j" "$i")" \
			"${MESH_TRI_ARGS[@]}"
	done
	for tag in "${tags[@]}"; do
		frc=0
		mesh_finish "$tag" "$MESH_LIMIT_S" || frc=$?
		if [ "$frc" -ne 0 ]; then
			echo "$tag: meshperf failed ($frc)"
			mp_show_logs "$tag"
			rc=1
		fi
	done
	echo "six runs at once took $((SECONDS - t0)) s"
	[ "$rc" -eq 0 ] || return 1
	for tag in "${tags[@]}"; do
		i=${tag:4:1}
		j=${tag:5:1}
		mesh_judge "$tag" "$MESH_TRI_NSIZES" "send recv" \
			"rxe$i$j=$(mesh_addr "$j" "$i")" \
			"rxe$j$i=$(mesh_addr "$i" "$j")" || rc=1
	done
	return "$rc"
}

# ------------------------------------------------------- checks: node 4

check_mesh_node4_up() {
	mesh_node4_ensure || return 1
	ip -n rxn4 -br addr show
	ip -n rxn1 -br addr show dev v14
	rdma link show | grep -E 'rxe(14|41)/'
}

# Node 4 has one cable, to node 1: the run uses it, and node 1, which has no
# hca list here, accepts on its end of it.
check_mesh_node4_reach() {
	local tag=quad-41 rc=0

	mesh_need_module || return 1
	mesh_node4_ensure || return 1
	mesh_server "$tag" rxn1 quad1 10.77.14.1 18841
	mesh_server_listens "$tag" || return 1
	mesh_client "$tag" rxn4 quad4 10.77.14.1 "${MESH_N4_ARGS[@]}"
	mesh_finish "$tag" "$MESH_LIMIT_S" || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "$tag: meshperf failed ($rc)"
		mp_show_logs "$tag"
		return 1
	fi
	mesh_judge "$tag" "$MESH_N4_NSIZES" "send recv" \
		"rxe41=10.77.14.1" "rxe14=10.77.14.4"
}

# Node 4 shares no cable with node 2: the connection fails at once, with
# the module's reason (the peer's addresses, the local cables' subnets, the
# relay module), and meshperf exits non-zero instead of waiting out the
# connect timeout.  The bootstrap crosses the management link.
check_mesh_node4_unreachable() {
	local tag=quad-42 rc=0 t0 t1 took why

	mesh_need_module || return 1
	mesh_node4_ensure || return 1
	mesh_server "$tag" rxn2 quad2 10.88.24.2 18842
	mesh_server_listens "$tag" || return 1
	t0=$(date +%s.%N)
	mesh_client "$tag" rxn4 quad4 10.88.24.2 --abi 12 --timeout 60 \
		--sizes 8 --no-latency
	rxe_wait "${MESH_CPID[$tag]}" 120 || rc=$?
	t1=$(date +%s.%N)
	took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	rxe_wait "${MESH_SPID[$tag]}" 30 ||
		echo "(server exit status $?)"
	echo "client: exit status $rc after $took s"
	if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
		echo "$tag: the client must fail (non-zero, not a time limit)"
		mp_show_logs "$tag"
		return 1
	fi
	if awk -v t="$took" -v m="$MESH_FAIL_FAST_S" 'BEGIN { exit !(t > m) }'; then
		echo "$tag: took $took s, more than $MESH_FAIL_FAST_S s"
		mp_show_logs "$tag"
		return 1
	fi
	# one line says it all: node 2's addresses, node 4's subnet, relay
	why=$(grep -E '10\.77\.12\.2' "$LOGDIR/$tag.client" |
		grep -E '10\.77\.23\.2' | grep -E '10\.77\.14\.[0-9]+/24' |
		grep -i relay | head -n 1) || true
	if [ -z "$why" ]; then
		echo "$tag: no line names the peer's addresses (10.77.12.2, 10.77.23.2), the local subnet (10.77.14.x/24) and relay"
		mp_show_logs "$tag"
		return 1
	fi
	echo "    ${why#meshperf}"
}

# ----------------------------------------------------- checks: cable 2

check_mesh_cable2_up() {
	mesh_cable2_ensure || return 1
	ip -n rxn1 -br addr show | grep -E '^v12'
	rdma link show | grep -E 'rxe(12|21)b?/'
}

# mesh_tx NS DEV: bytes DEV has sent.
mesh_tx() {
	ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}

# Nodes 1 and 2 with two cables: every connection stripes over both (the
# lines name both links), and both veths carry a fair share of the data.
check_mesh_two_cables() {
	local tag=duo-12 rc=0 a0 b0 a1 b1

	mesh_need_module || return 1
	mesh_cable2_ensure || return 1
	mesh_server "$tag" rxn2 duo2 10.77.12.2 18812
	mesh_server_listens "$tag" || return 1
	a0=$(mesh_tx rxn1 v12)
	b0=$(mesh_tx rxn1 v12b)
	mesh_client "$tag" rxn1 duo1 10.77.12.2 "${MESH_DUO_ARGS[@]}"
	mesh_finish "$tag" "$MESH_LIMIT_S" || rc=$?
	a1=$(mesh_tx rxn1 v12)
	b1=$(mesh_tx rxn1 v12b)
	if [ "$rc" -ne 0 ]; then
		echo "$tag: meshperf failed ($rc)"
		mp_show_logs "$tag"
		return 1
	fi
	mesh_judge "$tag" "$MESH_DUO_NSIZES" "send recv" \
		"rxe12=10.77.12.2 rxe12b=10.77.112.2" \
		"rxe21=10.77.12.1 rxe21b=10.77.112.1" || return 1
	echo "sent by node 1: v12 $(((a1 - a0) >> 20)) MiB, v12b $(((b1 - b0) >> 20)) MiB"
	# 64 MiB alone is 128 MiB over the two: each must have carried a third
	if [ $(((a1 - a0) * 2)) -lt $((b1 - b0)) ] ||
	   [ $(((b1 - b0) * 2)) -lt $((a1 - a0)) ]; then
		echo "$tag: the data was not spread over both cables"
		return 1
	fi
}

# One cable of two down under traffic both ways (tests/rxe/outage.sh):
# v12b goes down for 5 s and up again; the traffic moves to v12 at once,
# and once every comm has logged the cable's return and v12b carried data
# again, both ends close in order with every byte verified.
check_mesh_cable_down() {
	mesh_need_module || return 1
	mesh_cable2_ensure || return 1
	outage_bounce down-12 rdma-mesh "${MESH_CONF:-$MESH_DIR/mesh-rdma.conf}" \
		rxn1 duo1 rxn2 duo2 rxn1 v12b 'rxe(12b|21b) -> 10\.77\.112\.[12]' \
		NCCL_MESH_RDMA_MESH_RETRY_CNT=3
}

check_mesh_topology_down() {
	mesh_cleanup
	if rxnet_ns_exists rxn1 || rxnet_ns_exists rxn4 ||
	   [ -e /sys/class/infiniband/rxe12b ]; then
		echo "the topology is still there"
		return 1
	fi
}
