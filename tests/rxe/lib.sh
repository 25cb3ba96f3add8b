# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2034 # its tables are for the scripts that source it
#
# Helpers for the scripts of the rxe stage (stage.sh,
# tests/bench/rxe-ib.sh).  Sourced, never run.
#
# tests/rxe/net.sh builds namespaces rxn1..rxnN with one veth link per
# node pair (10.77.<i><j>.0/24, netdev v<i><j>, rxe device rxe<i><j>).  The
# two-datacenter topology (dc_topology) is built here: every rxe device is
# visible in every namespace (RDMA netns mode "shared"), so processes pick
# their device by name through the config's host sections.

RXE_PIDS=()
RXE_NS=()
RXE_DEVS=()

rxe_log() {
	printf '[rxe] %s\n' "$*" >&2
}

# Kills what rxe_spawn started, deletes what dc_topology built.
rxe_cleanup() {
	local pid dev n

	for pid in "${RXE_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${RXE_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	RXE_PIDS=()
	for dev in "${RXE_DEVS[@]}"; do
		rdma link delete "$dev" 2>/dev/null || true
	done
	RXE_DEVS=()
	for n in "${RXE_NS[@]}"; do
		for pid in $(ip netns pids "$n" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
		ip netns del "$n" 2>/dev/null || true
	done
	RXE_NS=()
}

# rxe_spawn NS LOG CMD...: CMD in the background inside namespace NS; its
# pid is in RXE_LAST_PID and killed by rxe_cleanup.
rxe_spawn() {
	local n=$1 log=$2

	shift 2
	ip netns exec "$n" "$@" >"$log" 2>&1 &
	RXE_LAST_PID=$!
	RXE_PIDS+=("$RXE_LAST_PID")
}

# rxe_wait PID LIMIT_S: its exit status, or 124 after killing it.
rxe_wait() {
	local pid=$1 deadline=$((SECONDS + $2)) rc=0

	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			return 124
		fi
		sleep 0.2
	done
	wait "$pid" || rc=$?
	return "$rc"
}

# rxe_wait_listen NS PORT LIMIT_S: until something listens on TCP PORT.
rxe_wait_listen() {
	local deadline=$((SECONDS + $3))

	while [ "$SECONDS" -lt "$deadline" ]; do
		ip netns exec "$1" ss -Htln "sport = :$2" | grep -q . && return 0
		sleep 0.2
	done
	return 1
}

# rxe_gid_index DEV [GLOB]: index of DEV's RoCE v2 GID whose text matches
# GLOB (default: an IPv4-mapped address), read from sysfs independently of
# the plugin: what a correct auto-selection must find.
rxe_gid_index() {
	local dev=$1 glob=${2:-0000:0000:0000:0000:0000:ffff:*} f idx g t

	# builtin reads only: a fork per entry of a 1024-entry table is slow
	# in an emulated guest
	for f in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
		idx=${f##*/}
		read -r g <"$f" 2>/dev/null || continue
		# shellcheck disable=SC2254 # glob is a pattern on purpose
		case $g in
		$glob)
			t=""
			read -r t <"/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$idx" \
				2>/dev/null || true
			[ "$t" = "RoCE v2" ] && {
				echo "$idx"
				return 0
			}
			;;
		esac
	done
	return 1
}

# rxe_gid_table DEV: the non-zero entries of port 1, "index gid type".
rxe_gid_table() {
	local dev=$1 f idx g t

	for f in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
		idx=${f##*/}
		read -r g <"$f" 2>/dev/null || continue
		[ "$g" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
		t="?"
		read -r t <"/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$idx" \
			2>/dev/null || true
		echo "$idx $g ${t:-?}"
	done
}

# rxe_pair_conf MODULE FILE: a config with MODULE alone for the two-node
# mesh, each node on its end of link 1-2 (host names rxn1, rxn2).
rxe_pair_conf() {
	cat >"$2" <<EOF
version = 1;
modules = [ "$1" ];
connect_timeout_ms = 60000;
hosts = (
  { match = "rxn1"; $1: { hca = "=rxe12"; }; },
  { match = "rxn2"; $1: { hca = "=rxe21"; }; }
);
EOF
}

# ------------------------------------------------------------ meshperf

# Set by the caller: MESHPERF, PLUGIN, MODULE_PATH, CONF, LOGDIR.
#
# mp_run TAG SRV_NS SRV_HOST SRV_ADDR CLI_NS CLI_HOST PORT LIMIT [args...]:
# one meshperf run, the server in namespace SRV_NS bound to SRV_ADDR:PORT,
# the client in CLI_NS; each process names its host for the config's host
# sections.  Args go to the client (meshperf sends the run parameters to the
# server); MP_SERVER_ARGS and MP_ENV (VAR=value words, both sides) are extra.
# Logs: LOGDIR/TAG.server, LOGDIR/TAG.client.  Returns the client's status,
# else the server's (124: time limit).
MP_SERVER_ARGS=()
MP_ENV=()
MP_SERVER_ENV=()
MP_CLIENT_ENV=()
mp_run() {
	local tag=$1 sns=$2 shost=$3 saddr=$4 cns=$5 chost=$6 port=$7
	local limit=$8 spid cpid src=0 crc=0

	shift 8
	rxe_spawn "$sns" "$LOGDIR/$tag.server" env NCCL_MESH_HOSTNAME="$shost" \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_PATH" \
		"${MP_ENV[@]}" "${MP_SERVER_ENV[@]}" \
		"$MESHPERF" --server --bind "$saddr" --port "$port" \
		--plugin "$PLUGIN" --json --verbose "${MP_SERVER_ARGS[@]}"
	spid=$RXE_LAST_PID
	if ! rxe_wait_listen "$sns" "$port" 30; then
		echo "$tag: meshperf server in $sns did not listen on $port" \
			>>"$LOGDIR/$tag.server"
		return 1
	fi
	rxe_spawn "$cns" "$LOGDIR/$tag.client" env NCCL_MESH_HOSTNAME="$chost" \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_PATH" \
		"${MP_ENV[@]}" "${MP_CLIENT_ENV[@]}" \
		"$MESHPERF" --client "$saddr" --port "$port" \
		--plugin "$PLUGIN" --json --verbose "$@"
	cpid=$RXE_LAST_PID
	rxe_wait "$cpid" "$limit" || crc=$?
	rxe_wait "$spid" 20 || src=$?
	[ "$crc" -ne 0 ] && return "$crc"
	return "$src"
}

mp_show_logs() {
	local tag=$1 side

	for side in server client; do
		[ -f "$LOGDIR/$tag.$side" ] || continue
		echo "---- $tag $side (last 60 lines) ----"
		tail -n 60 "$LOGDIR/$tag.$side"
	done
}

# mp_check TAG NRESULTS: both sides ended "ok", the client printed
# NRESULTS result lines.
mp_check() {
	local tag=$1 want=$2 got side

	got=$(grep -c '"event":"result"' "$LOGDIR/$tag.client" || true)
	if [ "$got" -ne "$want" ]; then
		echo "$tag: $got result lines, expected $want"
		return 1
	fi
	for side in server client; do
		grep -q '"event":"summary".*"status":"ok"' "$LOGDIR/$tag.$side" || {
			echo "$tag: $side summary missing or not ok"
			return 1
		}
	done
}

# mp_conn_lines TAG: the plugin's per-connection INFO lines of both sides.
mp_conn_lines() {
	grep -hE '(send|recv) mesh[0-9]+: [a-z0-9-]+, .* -> .*, (same-DC|cross-DC|disconnected)' \
		"$LOGDIR/$1.server" "$LOGDIR/$1.client" || true
}

# mp_expect_conns TAG MODULE CLASS: every connection line of the run names
# MODULE and CLASS, and there is at least one "send" line on each side.
mp_expect_conns() {
	local tag=$1 mod=$2 cls=$3 lines bad side

	lines=$(mp_conn_lines "$tag")
	if [ -z "$lines" ]; then
		echo "$tag: no per-connection INFO lines"
		return 1
	fi
	bad=$(printf '%s\n' "$lines" | grep -vE ": $mod, .*, $cls( |,|$)" || true)
	if [ -n "$bad" ]; then
		echo "$tag: connections not over $mod ($cls):"
		printf '%s\n' "$bad"
		return 1
	fi
	for side in server client; do
		grep -qE "send mesh[0-9]+: $mod, .*, $cls" "$LOGDIR/$tag.$side" || {
			echo "$tag: $side logged no send connection over $mod ($cls)"
			return 1
		}
	done
}

# mp_field TAG SIZE FIELD: a numeric field of the client's result line for
# SIZE ("" when absent or null).
mp_field() {
	grep "\"event\":\"result\"" "$LOGDIR/$1.client" |
		grep "\"size\":$2," | head -n 1 |
		sed -n "s/.*\"$3\":\([0-9.eE+-]*\).*/\1/p"
}

# median: of the numbers on stdin, one per line.
median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}

# ------------------------------------------------- two datacenters

# The two-datacenter topology: four hosts and one router, each a namespace
# named DC_PREFIX-<name>.
#
#   DC 0: dc0-a f12 10.78.12.1 ==rxe== f21 10.78.12.2 dc0-b
#   DC 1: dc1-a f34 10.78.34.3 ==rxe== f43 10.78.34.4 dc1-b
#   every host: up<i> 10.79.<i>.2/24 -- r<i> 10.79.<i>.1 in the router,
#   default route through it.
#
# The fabric subnets (rxe devices rxf12, rxf21, rxf34, rxf43) exist only
# inside their DC: the router has no route to them, so RoCE traffic cannot
# cross; between DCs only TCP over the routed uplinks works.
DC_PREFIX=${DC_PREFIX:-rx2dc$$}
declare -gA DC_HOST_NS=([dc0-a]=h1 [dc0-b]=h2 [dc1-a]=h3 [dc1-b]=h4)
declare -gA DC_UPLINK=([dc0-a]=10.79.1.2 [dc0-b]=10.79.2.2 [dc1-a]=10.79.3.2
		       [dc1-b]=10.79.4.2)
declare -gA DC_FABRIC=([dc0-a]=10.78.12.1 [dc0-b]=10.78.12.2
		       [dc1-a]=10.78.34.3 [dc1-b]=10.78.34.4)
declare -gA DC_OF=([dc0-a]=0 [dc0-b]=0 [dc1-a]=1 [dc1-b]=1)
DC_HOSTS=(dc0-a dc0-b dc1-a dc1-b)

# dc_ns HOST: the namespace of HOST (or of "r", the router).
dc_ns() {
	if [ "$1" = r ]; then
		echo "$DC_PREFIX-r"
	else
		echo "$DC_PREFIX-${DC_HOST_NS[$1]}"
	fi
}

# dc_add_ns NAME: net.sh's IPv4-only namespace, removed by rxe_cleanup.
dc_add_ns() {
	RXE_NS+=("$1")
	rxnet_add_ns "$1"
}

# dc_fabric_link I J: the intra-DC link between host namespaces h<I>, h<J>,
# with an rxe device on each end.
dc_fabric_link() {
	local i=$1 j=$2 a b

	ip link add "f$i$j" netns "$DC_PREFIX-h$i" type veth peer name "f$j$i" \
		netns "$DC_PREFIX-h$j" || return 1
	for a in "$i $j" "$j $i"; do
		read -r a b <<<"$a"
		ip -n "$DC_PREFIX-h$a" addr add "10.78.$i$j.$a/24" dev "f$a$b"
		ip -n "$DC_PREFIX-h$a" link set "f$a$b" mtu 4500 up
		ip netns exec "$DC_PREFIX-h$a" rdma link add "rxf$a$b" type rxe \
			netdev "f$a$b" || return 1
		RXE_DEVS+=("rxf$a$b")
	done
}

# dc_uplink I: host h<I>'s routed TCP link to the router.
dc_uplink() {
	local i=$1 h=$DC_PREFIX-h$1 r=$DC_PREFIX-r

	ip link add "up$i" netns "$h" type veth peer name "r$i" netns "$r" ||
		return 1
	ip -n "$h" addr add "10.79.$i.2/24" dev "up$i"
	ip -n "$r" addr add "10.79.$i.1/24" dev "r$i"
	ip -n "$h" link set "up$i" up
	ip -n "$r" link set "r$i" up
	ip -n "$h" route add default via "10.79.$i.1"
}

dc_topology() {
	local i

	modprobe rdma_rxe || return 1
	rdma system set netns shared 2>/dev/null || true
	dc_add_ns "$DC_PREFIX-r" || return 1
	ip netns exec "$DC_PREFIX-r" sysctl -qw net.ipv4.ip_forward=1
	for i in 1 2 3 4; do
		dc_add_ns "$DC_PREFIX-h$i" || return 1
		dc_uplink "$i" || return 1
	done
	dc_fabric_link 1 2 && dc_fabric_link 3 4
}
