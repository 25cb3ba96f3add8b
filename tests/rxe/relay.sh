# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2034 # relay_checks is for the sourcing script
#
# Relay checks of the rxe stage (docs/testing-rxe.md): rdma-mesh over
# direct cables, each its own subnet, where some node pairs share no cable
# and the core hands their connections to the relay module.  Sourced, never
# run: stage.sh sources it after lib.sh, net.sh and mesh.sh and before it
# dispatches "--check FUNC", and runs the entries of relay_checks with its
# `check`.  tests/bench/rxe-relay.sh sources it too.
#
# Needs from the sourcing script (exported, so the per-check processes see
# them): BUILD, MESHPERF, PLUGIN, LOGDIR; lib.sh's and mesh.sh's helpers.
#
# Topologies (tests/rxe/net.sh ring 4 / line 4), namespaces rxn1..rxn4:
#
#   ring   cables 1-2, 2-3, 3-4, 1-4; cable i-j is 10.77.<i><j>.0/24 with
#          rxe<i><j> on node i's end.  1-3 and 2-4 share no cable: each
#          goes through one of the two nodes between them.
#   line   cables 1-2, 2-3, 3-4: 1-4 goes through 2 and 3.
#   both   a management network (10.88.0.<i>/24 on m<i>, no RDMA device)
#          for meshperf's bootstrap only; rdma-mesh never sees it.
#
# Relays: one meshrelay per node (port 29400 in its namespace), started by
# each check and gone with it; meshperf's processes relay nothing
# (serve = false).  A relay in the rank processes is the shape users run,
# but meshperf opens the plugin only once its client connects and each
# process lives for one pair, so an in-process relay would come and go
# with the pairs it is meant to serve.  The configs are relay-ring.conf and
# relay-line.conf; host names n1..n4 name the relays too.

RELAY_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/rxe/mesh.sh
declare -F mesh_server >/dev/null || . "$RELAY_DIR/mesh.sh"

# The checks in order, "FUNC|LIMIT_S|NAME"; relay_run_checks runs them.
relay_checks=(
	"check_relay_ring_up|90|relay: ring of 4 up (4 cables, management network)"
	"check_relay_ring|900|relay: ring, 12 directed pairs at once, the 4 diagonal pairs relayed"
	"check_relay_spread|900|relay: ring, a pair's 4 channels spread over both relays"
	"check_relay_line_up|90|relay: line of 4 up (3 cables, management network)"
	"check_relay_line|900|relay: line, node 1 <-> node 4 through two relays"
	"check_relay_kill|600|relay: relay killed mid-transfer fails both ends in time"
	"check_relay_topology_down|60|relay: topology down"
)

relay_run_checks() {
	local entry func limit name

	for entry in "${relay_checks[@]}"; do
		IFS='|' read -r func limit name <<<"$entry"
		check "$name" "$limit" "$func" || true
	done
}

# The ring runs 24 meshperf processes and 4 relays at once on the guest's
# two emulated CPUs: small sizes, few iterations.
RELAY_RING_ARGS=(--abi 12 --timeout 360 --sizes '0,8,64K,2M' --iters 20
		 --budget 4M --mem 32M --lat-max 64K)
RELAY_RING_NSIZES=4
RELAY_LINE_ARGS=(--abi 12 --timeout 240 --sizes '0,8,64K,1M,16M' --iters 50
		 --budget 32M --mem 64M --lat-max 64K)
RELAY_LINE_NSIZES=5
# Both ends of a relayed pair must fail once the relay is gone: the relay's
# timeout_ms of the configs (30000) is what detects it, so the bound is
# that and room for a loaded host; meshperf's own --timeout giving up
# instead ("no progress for" in a log) fails the check.
RELAY_KILL_BOUND=${RELAY_KILL_BOUND:-90}
RELAY_PORT=29400

# ------------------------------------------------------------ topology

# relay_topology_ensure SHAPE: the 4-node ring or line, built afresh
# unless it is there.
relay_topology_ensure() {
	if [ "$(rxnet_shape)" = "$1" ] && [ "$(rxnet_nodes)" = 4 ] &&
	   rxnet_ns_exists rxn4 && rxnet_ns_exists rxnm; then
		return 0
	fi
	# what mesh.sh's checks added to an older mesh goes first
	mesh_extras_remove
	rxnet_shaped "$1" 4 && return 0
	echo "cannot build the $1 of 4 nodes"
	rxnet_down
	return 1
}

relay_topology_show() {
	rxnet_status
	# no TCP route between nodes that share no cable: only their
	# management addresses join them
	if ip netns exec rxn1 ping -c 1 -W 2 "$(mesh_addr 3 2)" >/dev/null 2>&1; then
		echo "rxn1 reaches node 3's cable address $(mesh_addr 3 2): it must not"
		return 1
	fi
	ip netns exec rxn1 ping -c 1 -W 5 10.88.0.3 >/dev/null || {
		echo "rxn1 does not reach node 3's management address"
		return 1
	}
	echo "rxn1: node 3 only over the management network, as it must be"
}

# ------------------------------------------------------------ processes

relay_need() {
	mesh_need_module || return 1
	if ! [ -x "$BUILD/tools/meshrelay/meshrelay" ] ||
	   ! [ -e "$BUILD/modules/relay/mesh-relay.so" ]; then
		echo "relay or meshrelay not built"
		return 77
	fi
}

# relay_use SHAPE: the config and module path of meshperf's processes.
relay_use() {
	RELAY_CONF=$RELAY_DIR/relay-$1.conf
	RELAY_MODPATH=$BUILD/modules/rdma-mesh:$BUILD/modules/relay
	MESH_CONF=$RELAY_CONF
	MESH_ENV="NCCL_MESH_MODULE_PATH=$RELAY_MODPATH"
}

# relay_start TAG: a meshrelay on every node, logs LOGDIR/TAG.relay<i>,
# pids in RELAY_PID[i]; each must serve its port.
declare -gA RELAY_PID=()
relay_start() {
	local tag=$1 i

	for i in 1 2 3 4; do
		rxe_spawn "rxn$i" "$LOGDIR/$tag.relay$i" env NCCL_MESH_HOSTNAME="n$i" \
			NCCL_MESH_CONF="$RELAY_CONF" \
			NCCL_MESH_MODULE_PATH="$RELAY_MODPATH" NCCL_MESH_LOG=info \
			"$BUILD/tools/meshrelay/meshrelay"
		RELAY_PID[$i]=$RXE_LAST_PID
	done
	for i in 1 2 3 4; do
		rxe_wait_listen "rxn$i" "$RELAY_PORT" 60 && continue
		echo "$tag: the meshrelay of node $i does not serve port $RELAY_PORT"
		relay_show "$tag"
		return 1
	done
}

relay_show() {
	local i

	for i in 1 2 3 4; do
		[ -f "$LOGDIR/$1.relay$i" ] || continue
		echo "---- $1 meshrelay n$i (last 30 lines) ----"
		tail -n 30 "$LOGDIR/$1.relay$i"
	done
}

# relay_pairs TAG I: the pairs node I's relay forwarded, one line each.
relay_pairs() {
	grep -h 'pair [0-9]*: forwarding' "$LOGDIR/$1.relay$2" 2>/dev/null |
		sed 's/.*pair [0-9]*: forwarding //' || true
}

# relay_lines TAG SIDE: the relay module's route lines of one side, the
# sending end's "send comm N to DEST: via n2 (rdma-mesh ADDR) -> ..." and
# the receiving end's "recv comm N from ORIGIN: n1 -(rdma-mesh)-> ...".
relay_lines() {
	grep -hE '(send comm [0-9]+ to [^ ]+: via |recv comm [0-9]+ from [^ ]+: [^ ]+ -\()' \
		"$LOGDIR/$1.$2" || true
}

# relay_expect TAG SIDE KIND REGEX: SIDE logged a relay line of KIND (send
# or recv), and every one of that kind matches REGEX.
relay_expect() {
	local tag=$1 side=$2 kind=$3 lines bad

	lines=$(relay_lines "$tag" "$side" | grep "$kind comm " || true)
	if [ -z "$lines" ]; then
		echo "$tag $side: no relayed $kind comm"
		return 1
	fi
	bad=$(printf '%s\n' "$lines" | grep -vE -- "$4" || true)
	if [ -n "$bad" ]; then
		echo "$tag $side: a relayed $kind comm not as expected (/$4/):"
		printf '%s\n' "$bad" | sed 's/^/    /'
		return 1
	fi
}

# relay_none TAG: neither side relayed anything.
relay_none() {
	local lines

	lines=$(relay_lines "$1" client; relay_lines "$1" server)
	[ -z "$lines" ] && return 0
	echo "$1: relayed, though the nodes share a cable:"
	printf '%s\n' "$lines" | sed 's/^/    /'
	return 1
}

# the meshperf pair TAG (server on node J, client on node I) over the
# management network
relay_pair_start() {
	local tag=$1 i=$2 j=$3 port=$4

	shift 4
	mesh_server "$tag" "rxn$j" "n$j" "10.88.0.$j" "$port"
	mesh_server_listens "$tag" || return 1
	mesh_client "$tag" "rxn$i" "n$i" "10.88.0.$j" "$@"
}

# ---------------------------------------------------------- checks: ring

check_relay_ring_up() {
	relay_topology_ensure ring || return 1
	relay_topology_show
}

# relay_between I J: the nodes of the ring next to both I and J.
relay_between() {
	local k

	for k in 1 2 3 4; do
		[ "$k" = "$1" ] || [ "$k" = "$2" ] && continue
		[ $(((k - $1 + 4) % 2)) = 1 ] && echo "$k"
	done | paste -sd '|' -
}

# All twelve directed pairs at once, every byte verified; each run's
# latency phase opens the reverse connection, so both ends send.  The
# pairs that share a cable use it directly (rdma-mesh's line names it, no
# relay line); the diagonal ones go through a node next to both, on both
# ends: the sender's line names the relay and the destination, the
# receiver's the whole route.  The relays' logs show which carried what.
check_relay_ring() {
	local i j k tag tags=() rc=0 frc t0 via

	relay_need || return $?
	relay_topology_ensure ring || return 1
	relay_use ring
	relay_start ring || return 1
	for i in 1 2 3 4; do
		for j in 1 2 3 4; do
			[ "$i" = "$j" ] && continue
			tag=ring-$i$j
			tags+=("$tag")
			mesh_server "$tag" "rxn$j" "n$j" "10.88.0.$j" \
				$((18600 + 10 * i + j))
		done
	done
	for tag in "${tags[@]}"; do
		mesh_server_listens "$tag" || return 1
	done
	t0=$SECONDS
	for tag in "${tags[@]}"; do
		i=${tag:5:1}
		j=${tag:6:1}
		mesh_client "$tag" "rxn$i" "n$i" "10.88.0.$j" "${RELAY_RING_ARGS[@]}"
	done
	for tag in "${tags[@]}"; do
		frc=0
		mesh_finish "$tag" 800 || frc=$?
		if [ "$frc" -ne 0 ]; then
			echo "$tag: meshperf failed ($frc)"
			mp_show_logs "$tag"
			rc=1
		fi
	done
	echo "twelve runs at once took $((SECONDS - t0)) s"
	if [ "$rc" -ne 0 ]; then
		relay_show ring
		return 1
	fi
	for tag in "${tags[@]}"; do
		i=${tag:5:1}
		j=${tag:6:1}
		if ! mp_check "$tag" "$RELAY_RING_NSIZES"; then
			mp_show_logs "$tag"
			rc=1
			continue
		fi
		if [ $(((i - j + 4) % 2)) = 1 ]; then
			# neighbours: their one cable, no relay
			mesh_expect_links "$tag" client "send recv" \
				"rxe$i$j=$(mesh_addr "$j" "$i")" &&
				mesh_expect_links "$tag" server "send recv" \
					"rxe$j$i=$(mesh_addr "$i" "$j")" &&
				relay_none "$tag" || rc=1
			echo "$tag: direct over rxe$i$j"
			continue
		fi
		via=$(relay_between "$i" "$j")
		if ! relay_expect "$tag" client send \
			"to 10\.77\.[0-9]+\.$j(:[0-9]+)?: via n($via) \(rdma-mesh [0-9.:]+\) -> destination \(rdma-mesh 10\.77\.[0-9]+\.$j(:[0-9]+)?\)" ||
		   ! relay_expect "$tag" client recv \
			"from n$j: n$j -\(rdma-mesh\)-> n($via) -\(rdma-mesh\)-> here" ||
		   ! relay_expect "$tag" server send \
			"to 10\.77\.[0-9]+\.$i(:[0-9]+)?: via n($via) " ||
		   ! relay_expect "$tag" server recv \
			"from n$i: n$i -\(rdma-mesh\)-> n($via) -\(rdma-mesh\)-> here"; then
			rc=1
			mp_show_logs "$tag"
			continue
		fi
		echo "$tag: relayed"
		{ relay_lines "$tag" client; relay_lines "$tag" server; } |
			sed 's/^meshperf//; s/^/    /'
		mesh_show_results "$tag"
	done
	for k in 1 2 3 4; do
		echo "relay n$k forwarded $(relay_pairs ring "$k" | wc -l) pairs:"
		relay_pairs ring "$k" | sed 's/^/    /'
	done
	[ "$rc" -eq 0 ] || relay_show ring
	return "$rc"
}

# Node 1 to node 3 with four connections (meshperf channels): n2 and n4
# both reach both ends, so the connections must not all take the same one.
check_relay_spread() {
	local tag=spread-13 rc=0 k n

	relay_need || return $?
	relay_topology_ensure ring || return 1
	relay_use ring
	relay_start spread || return 1
	relay_pair_start "$tag" 1 3 18631 --abi 12 --timeout 240 --no-latency \
		--channels 4 --sizes '0,64K,4M' --iters 16 --budget 16M \
		--mem 64M || return 1
	mesh_finish "$tag" "$MESH_LIMIT_S" || rc=$?
	if [ "$rc" -ne 0 ] || ! mp_check "$tag" 3 ||
	   ! relay_expect "$tag" client send ": via n(2|4) "; then
		echo "$tag: meshperf failed ($rc)"
		mp_show_logs "$tag"
		relay_show spread
		return 1
	fi
	relay_lines "$tag" client | sed 's/^meshperf//; s/^/    /'
	for k in 2 4; do
		n=$(relay_lines "$tag" client | grep -c ": via n$k " || true)
		echo "through n$k: $n of the connections"
		[ "$n" -gt 0 ] || rc=1
	done
	[ "$rc" -eq 0 ] || echo "$tag: every connection took the same relay"
	return "$rc"
}

# ---------------------------------------------------------- checks: line

check_relay_line_up() {
	relay_topology_ensure line || return 1
	relay_topology_show
}

# Node 1 to node 4 and back: n1 reaches only n2, which reaches only n1 and
# n3, so n2 asks n3, the only relay that reaches n4.  Both directions'
# lines name both relays in order, and both relays forwarded a pair each
# way.
check_relay_line() {
	local tag=line-14 rc=0 k

	relay_need || return $?
	relay_topology_ensure line || return 1
	relay_use line
	relay_start line || return 1
	relay_pair_start "$tag" 1 4 18614 "${RELAY_LINE_ARGS[@]}" || return 1
	mesh_finish "$tag" "$MESH_LIMIT_S" || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "$tag: meshperf failed ($rc)"
		mp_show_logs "$tag"
		relay_show line
		return 1
	fi
	if ! mp_check "$tag" "$RELAY_LINE_NSIZES" ||
	   ! relay_expect "$tag" client send \
		"to 10\.77\.34\.4(:[0-9]+)?: via n2 \(rdma-mesh 10\.77\.12\.2(:[0-9]+)?\) -> n3 \(rdma-mesh 10\.77\.23\.3(:[0-9]+)?\) -> destination \(rdma-mesh 10\.77\.34\.4(:[0-9]+)?\)" ||
	   ! relay_expect "$tag" server recv \
		"from n1: n1 -\(rdma-mesh\)-> n2 -\(rdma-mesh\)-> n3 -\(rdma-mesh\)-> here" ||
	   ! relay_expect "$tag" server send \
		"to 10\.77\.12\.1(:[0-9]+)?: via n3 \(rdma-mesh 10\.77\.34\.3(:[0-9]+)?\) -> n2 \(rdma-mesh 10\.77\.23\.2(:[0-9]+)?\) -> destination \(rdma-mesh 10\.77\.12\.1(:[0-9]+)?\)" ||
	   ! relay_expect "$tag" client recv \
		"from n4: n4 -\(rdma-mesh\)-> n3 -\(rdma-mesh\)-> n2 -\(rdma-mesh\)-> here"; then
		mp_show_logs "$tag"
		relay_show line
		return 1
	fi
	for k in 2 3; do
		if [ "$(relay_pairs line "$k" | wc -l)" -lt 2 ]; then
			echo "relay n$k forwarded fewer than 2 pairs (one each way)"
			relay_show line
			return 1
		fi
		echo "relay n$k forwarded:"
		relay_pairs line "$k" | sed 's/^/    /'
	done
	{ relay_lines "$tag" client; relay_lines "$tag" server; } |
		sed 's/^meshperf//; s/^/    /'
	mesh_show_results "$tag"
}

# ------------------------------------------------------ checks: relay dies

# rx_bytes NS DEV
relay_rx() {
	ip netns exec "$1" cat "/sys/class/net/$2/statistics/rx_bytes"
}

# Node 1 to node 3 on the line goes through n2 alone.  Once data flows
# through it, n2's meshrelay is killed (SIGKILL: no close).  Both meshperf
# processes must fail (exit 1: a failed plugin call, not meshperf's own
# watchdog, which is set far beyond the bound) within RELAY_KILL_BOUND
# seconds, each with a WARN line of the relay module naming the route
# through n2.  With outage_ms 0: a relay that dies fails its routes at
# once (with a budget they wait for a new route, which the netns suite's
# relay tests check).
check_relay_kill() {
	local tag=kill-13 t0 crc=0 src=0 a b n side rc=0 lines named
	local -x NCCL_MESH_RELAY_OUTAGE_MS=0

	relay_need || return $?
	relay_topology_ensure line || return 1
	relay_use line
	relay_start kill || return 1
	relay_pair_start "$tag" 1 3 18613 --abi 12 --timeout 300 --no-latency \
		--sizes 4M --iters 1000000 --budget 1T --mem 64M || return 1
	# data through n2: its pair is set up and its cable to n3 carries
	# more than a MiB a second
	for n in $(seq 120); do
		if [ -n "$(relay_pairs kill 2)" ]; then
			a=$(relay_rx rxn3 v32)
			sleep 1
			b=$(relay_rx rxn3 v32)
			[ $((b - a)) -gt $((1 << 20)) ] && break
		else
			sleep 1
		fi
		if ! kill -0 "${MESH_CPID[$tag]}" 2>/dev/null; then
			echo "$tag: the client ended before the kill"
			mp_show_logs "$tag"
			relay_show kill
			return 1
		fi
	done
	[ "$n" -lt 120 ] || {
		echo "$tag: no data through n2 after 120 s"
		mp_show_logs "$tag"
		relay_show kill
		return 1
	}
	echo "$tag: $(((b - a) >> 10)) KiB/s into node 3 from n2; killing n2's meshrelay"
	t0=$(date +%s.%N)
	# reaped at once, so that bash reports no "Killed" job
	{ kill -KILL "${RELAY_PID[2]}" && wait "${RELAY_PID[2]}"; } 2>/dev/null || true
	rxe_wait "${MESH_CPID[$tag]}" "$((RELAY_KILL_BOUND + 5))" || crc=$?
	echo "client: exit $crc after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
	rxe_wait "${MESH_SPID[$tag]}" "$((RELAY_KILL_BOUND + 5))" || src=$?
	echo "server: exit $src after $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
	named=0
	for side in client server; do
		lines=$(grep -E 'WARN' "$LOGDIR/$tag.$side" |
			grep -E 'n2' | grep -E '(send|recv) comm [0-9]+ ' || true)
		# the side that notices first ends its meshperf, whose
		# bootstrap then stops the other before its comm fails: that
		# one counts when the first side named the relay
		if [ -z "$lines" ] && [ "$side" = server ] && [ "$named" = 1 ] &&
		   grep -q 'peer closed the bootstrap connection' "$LOGDIR/$tag.$side"; then
			echo "server: stopped by the client's failure (bootstrap closed) before its own comm failed"
		elif [ -z "$lines" ]; then
			echo "$tag: the $side logged no WARN naming the relay n2"
			rc=1
		else
			[ "$side" = client ] && named=1
			echo "$side:"
			printf '%s\n' "$lines" | sed 's/^meshperf//; s/^/    /'
		fi
		grep -E 'AddressSanitizer|runtime error:|Segmentation fault|watchdog: stuck|no progress for' \
			"$LOGDIR/$tag.$side" && rc=1
	done
	for n in "$crc:client" "$src:server"; do
		case ${n%%:*} in
		1) ;;
		124) echo "$tag: the ${n#*:} still ran $((RELAY_KILL_BOUND + 5)) s after the kill"
		     rc=1 ;;
		*) echo "$tag: the ${n#*:} exited ${n%%:*} (must fail: 1)"; rc=1 ;;
		esac
	done
	# the time: from the kill until both were gone
	n=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	if awk -v t="$n" -v m="$RELAY_KILL_BOUND" 'BEGIN { exit !(t > m) }'; then
		echo "$tag: both gone only $n s after the kill (bound $RELAY_KILL_BOUND s)"
		rc=1
	fi
	[ "$rc" -eq 0 ] || { mp_show_logs "$tag"; relay_show kill; }
	return "$rc"
}

check_relay_topology_down() {
	rxnet_down
	if rxnet_ns_exists rxn1 || rxnet_ns_exists rxnm; then
		echo "the topology is still there"
		return 1
	fi
}
