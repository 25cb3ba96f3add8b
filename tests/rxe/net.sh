# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# The rxe stage's mesh of Soft-RoCE links between network namespaces, in the
# guest or on a host whose kernel has rdma_rxe.  Sourced by the stage's
# scripts; run directly for a manual setup:
#
#   tests/rxe/net.sh up [N]     N nodes (2..9, default 3), every pair linked
#   tests/rxe/net.sh down
#   tests/rxe/net.sh status     "mode=netns nodes=N", then devices and ports
#   tests/rxe/net.sh probe      RC ping-pong over link 1-2, data checked
#   tests/rxe/net.sh ring [N]   N nodes (3..9, default 4) in a ring: node i
#                               cabled to i+1 and node N to node 1 only
#   tests/rxe/net.sh line [N]   the same without the cable N-1 (a line)
#
# Node i is namespace rxn<i>.  Link i-j (i < j) is subnet 10.77.<i><j>.0/24:
# veth v<i><j> with 10.77.<i><j>.<i> in rxn<i> and v<j><i> with
# 10.77.<i><j>.<j> in rxn<j>, an rxe device of the same digits (rxe<i><j>,
# rxe<j><i>) on each end.  IPv6 is off in the namespaces, so each device's
# table holds its default GID and one RoCE v2 GID, the IPv4-mapped address.
# MTU 4500 gives RoCE an active MTU of 4096.  RDMA netns mode "shared":
# every device is visible in every namespace, its packets go through its
# netdev's namespace, so processes choose devices by name.
#
# A ring or a line has the cables of its shape only (same names and
# subnets as the full mesh), so rdma-mesh finds no cable between nodes that
# are not neighbours, plus a management network for bootstrap TCP that no
# RDMA device sits on: namespace rxnm holds bridge br0, node i is on it as
# m<i> with 10.88.0.<i>/24.

# shellcheck source=tests/rxe/lib.sh
declare -F rxe_gid_index >/dev/null ||
	. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RXNET_STATE=${RXNET_STATE:-/run/nccl-mesh-rxe}

rxnet_ns_exists() {
	ip netns list | awk '{ print $1 }' | grep -qx "$1"
}

# rxnet_add_ns NAME: an IPv4-only namespace with its loopback up.
rxnet_add_ns() {
	ip netns add "$1" || return 1
	ip -n "$1" link set lo up &&
		ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
			net.ipv6.conf.default.disable_ipv6=1
}

# rxnet_veth I J NET [SUFFIX]: a veth from node I to node J on NET.0/24
# (three octets): v<I><J>SUFFIX with NET.<I> in rxn<I>, its peer
# v<J><I>SUFFIX with NET.<J> in rxn<J>, both up.
rxnet_veth() {
	local i=$1 j=$2 net=$3 sfx=${4:-} a b

	ip link add "v$i$j$sfx" netns "rxn$i" type veth peer name "v$j$i$sfx" \
		netns "rxn$j" || return 1
	for a in "$i $j" "$j $i"; do
		read -r a b <<<"$a"
		if ! { ip -n "rxn$a" addr add "$net.$a/24" dev "v$a$b$sfx" &&
		       ip -n "rxn$a" link set "v$a$b$sfx" mtu 4500 up; }; then
			echo "link $i-$j$sfx: cannot set up v$a$b$sfx in rxn$a"
			return 1
		fi
	done
}

# rxnet_rxe I J [SUFFIX]: device rxe<I><J>SUFFIX on node I's end of the link.
rxnet_rxe() {
	ip netns exec "rxn$1" rdma link add "rxe$1$2${3:-}" type rxe \
		netdev "v$1$2${3:-}" && return 0
	echo "cannot add rxe$1$2${3:-} on v$1$2${3:-} in rxn$1"
	return 1
}

# rxnet_link I J NET [SUFFIX]: the veth and a device on each end.
rxnet_link() {
	rxnet_veth "$@" && rxnet_rxe "$1" "$2" "${4:-}" &&
		rxnet_rxe "$2" "$1" "${4:-}"
}

# rxnet_wait_active DEV...: every device's port is active with an IPv4 RoCE
# v2 GID (the address reaches the GID table a moment after the device).
rxnet_wait_active() {
	local dev deadline=$((SECONDS + 20))

	for dev in "$@"; do
		until rxe_gid_index "$dev" >/dev/null &&
		      grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null; do
			if [ "$SECONDS" -ge "$deadline" ]; then
				echo "$dev: port not active with an IPv4 RoCE v2 GID after 20 s"
				return 1
			fi
			sleep 0.5
		done
	done
}

rxnet_nodes() {
	cat "$RXNET_STATE/nodes" 2>/dev/null || echo 0
}

# rxnet_shape: full (rxnet_up), ring or line (rxnet_shaped).
rxnet_shape() {
	cat "$RXNET_STATE/shape" 2>/dev/null || echo full
}

# rxnet_begin N [SHAPE]: an older mesh removed, rdma_rxe loaded, the
# namespaces of N nodes; the shape (ring, line) noted when not a full mesh.
rxnet_begin() {
	local i

	rxnet_down
	if [ ! -d /sys/module/rdma_rxe ] && ! modprobe rdma_rxe; then
		echo "no rdma_rxe in this kernel"
		return 1
	fi
	# shared is the kernel's default; a host may have changed it
	rdma system set netns shared 2>/dev/null || true
	mkdir -p "$RXNET_STATE"
	echo "$1" >"$RXNET_STATE/nodes"
	[ -z "${2:-}" ] || echo "$2" >"$RXNET_STATE/shape"
	for ((i = 1; i <= $1; i++)); do
		rxnet_add_ns "rxn$i" || return 1
	done
}

# rxnet_up N: a fresh mesh of N nodes (an older one is removed first), with
# its management network: every cable is its own subnet, so NCCL's
# bootstrap between any two nodes needs one (meshinfo --cluster checks it).
rxnet_up() {
	local n=${1:-3} i j devs=()

	case $n in
	[2-9]) ;;
	*) echo "rxnet_up: 2 to 9 nodes"; return 1 ;;
	esac
	rxnet_begin "$n" || return 1
	for ((i = 1; i <= n; i++)); do
		for ((j = i + 1; j <= n; j++)); do
			rxnet_veth "$i" "$j" "10.77.$i$j" || return 1
		done
	done
	# devices node by node: each node's devices are numbered together
	for ((i = 1; i <= n; i++)); do
		for ((j = 1; j <= n; j++)); do
			[ "$i" = "$j" ] && continue
			rxnet_rxe "$i" "$j" || return 1
			devs+=("rxe$i$j")
		done
	done
	rxnet_mgmt "$n" && rxnet_wait_active "${devs[@]}"
}

# rxnet_down: removes the mesh rxnet_up built (devices first: an rxe device
# holds its netdev).
rxnet_down() {
	local n i j pid

	n=$(rxnet_nodes)
	for ((i = 1; i <= n; i++)); do
		for ((j = 1; j <= n; j++)); do
			[ "$i" = "$j" ] || rdma link delete "rxe$i$j" 2>/dev/null || true
		done
	done
	for ((i = 1; i <= n; i++)); do
		rxnet_ns_exists "rxn$i" || continue
		for pid in $(ip netns pids "rxn$i" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
		ip netns del "rxn$i" 2>/dev/null || true
	done
	if rxnet_ns_exists rxnm; then
		ip netns del rxnm 2>/dev/null || true
	fi
	rm -f "$RXNET_STATE/nodes" "$RXNET_STATE/shape"
}

# rxnet_cables SHAPE N: the cables of that shape, "I J" per line, I < J.
rxnet_cables() {
	local i

	for ((i = 1; i < $2; i++)); do
		echo "$i $((i + 1))"
	done
	[ "$1" = ring ] && echo "1 $2"
	return 0
}

# rxnet_mgmt N: the management network (bridge br0 in namespace rxnm, m<i>
# with 10.88.0.<i>/24 in rxn<i>): bootstrap TCP between any two nodes.
rxnet_mgmt() {
	local i

	rxnet_add_ns rxnm && ip -n rxnm link add br0 type bridge &&
		ip -n rxnm link set br0 up || return 1
	for ((i = 1; i <= $1; i++)); do
		if ! { ip link add "m$i" netns "rxn$i" type veth peer name "b$i" \
			       netns rxnm &&
		       ip -n rxnm link set "b$i" master br0 up &&
		       ip -n "rxn$i" addr add "10.88.0.$i/24" dev "m$i" &&
		       ip -n "rxn$i" link set "m$i" up; }; then
			echo "management link of node $i: cannot set up m$i"
			return 1
		fi
	done
}

# rxnet_shaped SHAPE N: a fresh ring or line of N nodes (an older mesh is
# removed first) with its management network.
rxnet_shaped() {
	local shape=$1 n=${2:-4} i j devs=()

	case $shape/$n in
	ring/[3-9] | line/[2-9]) ;;
	*) echo "rxnet_shaped: a ring of 3 to 9 nodes or a line of 2 to 9"
	   return 1 ;;
	esac
	rxnet_begin "$n" "$shape" || return 1
	while read -r i j; do
		rxnet_link "$i" "$j" "10.77.$i$j" || return 1
		devs+=("rxe$i$j" "rxe$j$i")
	done < <(rxnet_cables "$shape" "$n")
	rxnet_mgmt "$n" && rxnet_wait_active "${devs[@]}"
}

rxnet_status() {
	local n i

	n=$(rxnet_nodes)
	[ "$n" -gt 0 ] || { echo "no mesh"; return 1; }
	echo "mode=netns nodes=$n"
	[ "$(rxnet_shape)" = full ] || echo "shape=$(rxnet_shape)"
	rdma link show | grep -E '^link rxe[1-9][1-9]/' || true
	for ((i = 1; i <= n; i++)); do
		ip -n "rxn$i" -br -4 addr show | sed "s/^/rxn$i /" | grep -v ' lo '
	done
}

# rxnet_probe: an RC ping-pong between rxe12 (rxn1) and rxe21 (rxn2) with
# the received data checked, which must leave through v12: proof that
# RoCE packets cross the link between the namespaces (kernels before 7.x
# keep rxe's socket in the initial namespace, and this fails there).
rxnet_probe() {
	local g1 g2 spid rc=0 tx0 tx1 log=${TMPDIR:-/tmp}/rxnet-probe.$$

	if ! g1=$(rxe_gid_index rxe12) || ! g2=$(rxe_gid_index rxe21); then
		echo "probe: no IPv4 RoCE v2 GID on rxe12 or rxe21"
		return 1
	fi
	tx0=$(ip netns exec rxn1 cat /sys/class/net/v12/statistics/tx_packets)
	ip netns exec rxn2 timeout 30 ibv_rc_pingpong -d rxe21 -g "$g2" -c \
		-n 200 -s 4096 >"$log.server" 2>&1 &
	spid=$!
	rxe_wait_listen rxn2 18515 15 &&
		ip netns exec rxn1 timeout 25 ibv_rc_pingpong -d rxe12 -g "$g1" \
			-c -n 200 -s 4096 10.77.12.2 >"$log.client" 2>&1 || rc=1
	wait "$spid" || rc=1
	tx1=$(ip netns exec rxn1 cat /sys/class/net/v12/statistics/tx_packets)
	echo "probe: ibv_rc_pingpong rxe12 -> rxe21 ($( [ "$rc" -eq 0 ] && echo ok || echo FAILED)), v12 sent $((tx1 - tx0)) packets"
	if [ "$rc" -ne 0 ]; then
		sed 's/^/    server: /' "$log.server" 2>/dev/null
		sed 's/^/    client: /' "$log.client" 2>/dev/null
	else
		grep -h 'bytes in' "$log.client" | sed 's/^/    /'
	fi
	rm -f "$log.server" "$log.client"
	# 200 round trips of 4 KiB each way: far more than the TCP exchange
	[ "$rc" -eq 0 ] && [ $((tx1 - tx0)) -ge 200 ]
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -uo pipefail
	case ${1:-} in
	up) rxnet_up "${2:-3}" ;;
	down) rxnet_down ;;
	status) rxnet_status ;;
	probe) rxnet_probe ;;
	ring|line) rxnet_shaped "$1" "${2:-4}" ;;
	*) echo "usage: $0 up [N] | ring [N] | line [N] | down | status | probe" >&2
	   exit 2 ;;
	esac
fi
