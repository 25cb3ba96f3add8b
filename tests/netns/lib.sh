# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# Network namespace helpers for the scenario tests and benchmarks.  Sourced,
# never run.  Everything made here lives inside namespaces whose names start
# with a prefix unique to this process, so parallel runs do not collide and
# nothing is ever added to the root namespace: veth pairs are created with
# both ends directly in their namespaces.  An EXIT trap kills every process
# started here and deletes every namespace, also on failure or Ctrl-C.
#
# The XDC topology (xdc_topology) is two "datacenters" behind NAT routers:
#
#   a1 10.1.0.11 --+                                      +-- b1 10.2.0.11
#                  br0 rA 192.0.2.1 ==shaped== 192.0.2.2 rB br0
#   a2 10.1.0.12 --+   (10.1.0.1)                (10.2.0.1)  +-- b2 10.2.0.12
#
# Each router masquerades outbound and forwards inbound only a small port
# range per host, to different internal ports (see xdc_fwd_base).

NETNS_PREFIX=${NETNS_PREFIX:-nm$$}

# netns_lsan_no_tls: LeakSanitizer without thread-local storage as roots,
# for the scenarios where a relayed route moves (relay-resume.sh's
# failover, netns-faults' relay-failover).  There, under ASan, the
# server's exit aborted: LSan's tracer took SIGSEGV in
# ScanRangeForPointers (address 0x1a0) scanning that process's
# thread-local storage (Debian's gcc 12 runtime), after a run that
# verified every byte.  Fewer roots can only make LSan report more
# leaks, never fewer.
netns_lsan_no_tls() {
	export LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}use_tls=0
}
NETNS_LIST=()
NETNS_PIDS=()
NETNS_TMP=""
NETNS_IPT=iptables

# Host and router facts of the XDC topology, shared by tests and benchmarks.
declare -gA XDC_IP=([a1]=10.1.0.11 [a2]=10.1.0.12 [b1]=10.2.0.11
		    [b2]=10.2.0.12)
declare -gA XDC_ROUTER=([a1]=ra [a2]=ra [b1]=rb [b2]=rb)
declare -gA XDC_EXT=([ra]=192.0.2.1 [rb]=192.0.2.2)
# First external port forwarded to each host (internal ports start at 40000).
declare -gA XDC_FWD_BASE=([a1]=50000 [a2]=50010 [b1]=50000 [b2]=50010)
XDC_PORT_LOW=40000	# the hosts' plugin port_range is 40000-40007
XDC_NPORTS=10		# forwarded: 40000-40009; 40009 is meshperf's bootstrap
XDC_BOOT_PORT=40009
XDC_RATE=${XDC_RATE:-200mbit}	# the shaped inter-DC link, each direction
XDC_DELAY=${XDC_DELAY:-}	# optional one-way delay, e.g. 10ms (xdc_topology)
XDC_LOSS=${XDC_LOSS:-0}		# loss in percent each way, with the delay line
XDC_MTU=${XDC_MTU:-1500}

netns_log() {
	printf '[netns] %s\n' "$*" >&2
}

netns_die() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

netns_skip() {
	printf 'SKIP: %s\n' "$*" >&2
	exit 77
}

# Full name of namespace NAME.
ns() {
	printf '%s-%s' "$NETNS_PREFIX" "$1"
}

# nsx NAME CMD...: runs CMD inside namespace NAME.
nsx() {
	local name=$1

	shift
	ip netns exec "$(ns "$name")" "$@"
}

netns_cleanup() {
	local pid n

	for pid in "${NETNS_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	# anything still running inside our namespaces was started by us
	for n in "${NETNS_LIST[@]}"; do
		for pid in $(ip netns pids "$n" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
	done
	for pid in "${NETNS_PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for n in "${NETNS_LIST[@]}"; do
		ip netns del "$n" 2>/dev/null || true
	done
	NETNS_LIST=()
	NETNS_PIDS=()
	if [ -n "$NETNS_TMP" ]; then
		rm -rf "$NETNS_TMP"
	fi
}

# Checks that namespaces can be made here (else SKIP), picks the iptables
# flavour that works and installs the cleanup trap.
netns_init() {
	local probe ipt

	[ "$(id -u)" -eq 0 ] || netns_skip "needs root"
	command -v ip >/dev/null || netns_skip "no ip (iproute2)"
	trap netns_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	NETNS_TMP=$(mktemp -d)
	probe=$(ns probe)
	ip netns add "$probe" 2>/dev/null ||
		netns_skip "cannot create a network namespace"
	NETNS_LIST+=("$probe")
	NETNS_IPT=""
	for ipt in iptables iptables-nft iptables-legacy; do
		command -v "$ipt" >/dev/null || continue
		if ip netns exec "$probe" "$ipt" -t nat -A POSTROUTING \
			-o lo -j MASQUERADE 2>/dev/null &&
		   ip netns exec "$probe" "$ipt" -A FORWARD -m conntrack \
			--ctstate DNAT -j ACCEPT 2>/dev/null; then
			NETNS_IPT=$ipt
			break
		fi
	done
	ip netns del "$probe"
	NETNS_LIST=("${NETNS_LIST[@]:0:${#NETNS_LIST[@]}-1}")
	[ -n "$NETNS_IPT" ] ||
		netns_skip "no iptables with nat and conntrack works here"
	command -v tc >/dev/null || netns_skip "no tc (iproute2)"
}

# netns_scenario MESHPERF PLUGIN MODULE_DIR: the arguments a scenario
# script takes first (usage: NAME.sh MESHPERF PLUGIN MODULE_DIR ...), set
# as the meshperf helpers below want them.
netns_scenario() {
	MESHPERF=$1
	PLUGIN=$2
	MODULE_DIR=$3
}

# netns_add NAME...: new namespaces with loopback up.
netns_add() {
	local name

	for name in "$@"; do
		ip netns add "$(ns "$name")" ||
			netns_die "cannot create namespace $(ns "$name")"
		NETNS_LIST+=("$(ns "$name")")
		nsx "$name" ip link set lo up
	done
}

# netns_veth NS1 IF1 NS2 IF2: a veth pair, one end in each namespace, up.
netns_veth() {
	ip link add "$2" mtu "$XDC_MTU" netns "$(ns "$1")" type veth \
		peer name "$4" mtu "$XDC_MTU" netns "$(ns "$3")"
	nsx "$1" ip link set "$2" up
	nsx "$3" ip link set "$4" up
}

# netns_bridge NS BR PORT...: a bridge in NS enslaving the given interfaces.
netns_bridge() {
	local name=$1 br=$2 port

	shift 2
	nsx "$name" ip link add "$br" type bridge
	for port in "$@"; do
		nsx "$name" ip link set "$port" master "$br"
	done
	nsx "$name" ip link set "$br" up
}

# netns_addr NS IF CIDR
netns_addr() {
	nsx "$1" ip addr add "$3" dev "$2"
}

# netns_route NS DEST VIA ("default" for DEST works)
netns_route() {
	nsx "$1" ip route add "$2" via "$3"
}

netns_forwarding() {
	nsx "$1" sysctl -qw net.ipv4.ip_forward=1
}

# netns_ipt NS ARGS...: iptables inside NS.
netns_ipt() {
	local name=$1

	shift
	nsx "$name" "$NETNS_IPT" "$@"
}

netns_have_netem() {
	local probe=$NETNS_PREFIX-netem ok=1

	ip netns add "$probe" || return 1
	ip netns exec "$probe" ip link set lo up
	ip netns exec "$probe" tc qdisc add dev lo root netem delay 1ms \
		2>/dev/null || ok=0
	ip netns del "$probe"
	[ "$ok" -eq 1 ]
}

# netns_shape NS IF RATE [DELAY]: egress of IF limited to RATE (tc rate
# syntax, e.g. 200mbit) by a token bucket; with DELAY (e.g. 10ms) a netem
# delay sits in front of it.  The bucket holds 50 ms of traffic, so TCP
# sees a queue like a router's rather than drops at every burst.
netns_shape() {
	local name=$1 dev=$2 rate=$3 delay=${4:-} bits burst parent=root

	bits=$(tc_rate_bits "$rate")
	# at least one 64 KiB GSO packet, else about 1 ms at the rate
	burst=$(( bits / 8 / 1000 ))
	[ "$burst" -ge 65536 ] || burst=65536
	if [ -n "$delay" ]; then
		nsx "$name" tc qdisc add dev "$dev" root handle 1: netem \
			delay "$delay" limit 100000 ||
			netns_die "tc netem is not available (kernel without sch_netem)"
		parent="parent 1:1"
	fi
	# shellcheck disable=SC2086 # parent is one or two words on purpose
	nsx "$name" tc qdisc add dev "$dev" $parent handle 10: tbf \
		rate "$rate" burst "$burst" latency 50ms
}

# tc_rate_bits RATE: bits per second of a tc rate (kbit, mbit, gbit, bit).
tc_rate_bits() {
	local r=${1,,} n unit

	n=${r%%[a-z]*}
	unit=${r#"$n"}
	case $unit in
	""|bit) echo "$n" ;;
	kbit) echo $((n * 1000)) ;;
	mbit) echo $((n * 1000000)) ;;
	gbit) echo $((n * 1000000000)) ;;
	*) netns_die "unsupported rate unit in '$1' (use bit, kbit, mbit, gbit)" ;;
	esac
}

# netns_spawn NS LOG CMD...: CMD in the background inside NS, output to LOG;
# its pid is in NETNS_LAST_PID and killed by the cleanup.
netns_spawn() {
	local name=$1 log=$2

	shift 2
	ip netns exec "$(ns "$name")" "$@" >"$log" 2>&1 &
	NETNS_LAST_PID=$!
	NETNS_PIDS+=("$NETNS_LAST_PID")
}

# netns_wait PID LIMIT_S: waits for PID at most LIMIT_S seconds; returns
# its status, or 124 after killing it when it ran too long.
netns_wait() {
	local pid=$1 deadline=$((SECONDS + $2)) rc

	while kill -0 "$pid" 2>/dev/null; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			kill -KILL "$pid" 2>/dev/null || true
			wait "$pid" 2>/dev/null || true
			return 124
		fi
		sleep 0.1
	done
	rc=0
	wait "$pid" || rc=$?
	return "$rc"
}

# True when status RC is a failure that is neither a time limit (124) nor
# a signal: what a clean, reported error looks like.
netns_clean_failure() {
	[ "$1" -ne 0 ] && [ "$1" -ne 124 ] && [ "$1" -lt 128 ]
}

# netns_wait_listen NS PORT LIMIT_S: until something listens on TCP PORT.
netns_wait_listen() {
	local deadline=$((SECONDS + $3))

	while [ "$SECONDS" -lt "$deadline" ]; do
		nsx "$1" ss -Htln "sport = :$2" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

# --------------------------------------------------------- XDC topology

# xdc_lan NAME DC_OCTET EXT_IP PEER_EXT_IP HOST...: router NAME's LAN
# (each HOST's lan-HOST at XDC_IP on its bridge, 10.<dc>.0.1 the hosts'
# way out) and its outside address, forwarding on, no NAT or firewall yet.
xdc_lan() {
	local r=$1 dc=$2 ext=$3 peer=$4 h ports=()

	shift 4
	for h in "$@"; do
		netns_veth "$h" "lan-$h" "$r" "p-$h"
		ports+=("p-$h")
		netns_addr "$h" "lan-$h" "${XDC_IP[$h]}/24"
		netns_route "$h" default "10.$dc.0.1"
	done
	netns_bridge "$r" br0 "${ports[@]}"
	netns_addr "$r" br0 "10.$dc.0.1/24"
	netns_addr "$r" ext "$ext/30"
	# the "internet" is the other router; private addresses of the other
	# DC are routed there too, and its firewall drops them
	netns_route "$r" default "$peer"
	netns_forwarding "$r"
}

# xdc_router NAME DC_OCTET EXT_IP PEER_EXT_IP HOST...
xdc_router() {
	local r=$1 ext=$3 h k base

	xdc_lan "$@"
	shift 4

	# NAT: outbound masquerades to the external address; inbound, each
	# host gets XDC_NPORTS external ports from its base, one rule each,
	# mapped to internal ports from XDC_PORT_LOW
	netns_ipt "$r" -t nat -A POSTROUTING -o ext -j SNAT --to-source "$ext"
	for h in "$@"; do
		base=${XDC_FWD_BASE[$h]}
		for ((k = 0; k < XDC_NPORTS; k++)); do
			netns_ipt "$r" -t nat -A PREROUTING -i ext -p tcp \
				-d "$ext" --dport $((base + k)) -j DNAT \
				--to-destination "${XDC_IP[$h]}:$((XDC_PORT_LOW + k))"
		done
	done

	# firewall: from outside only replies and forwarded ports; every
	# other new connection is dropped silently (counted by the last rule)
	netns_ipt "$r" -P FORWARD DROP
	netns_ipt "$r" -A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED \
		-j ACCEPT
	netns_ipt "$r" -A FORWARD -i br0 -o ext -j ACCEPT
	# LAN traffic, seen here when the host has br_netfilter loaded
	netns_ipt "$r" -A FORWARD -i br0 -o br0 -j ACCEPT
	netns_ipt "$r" -A FORWARD -i ext -m conntrack --ctstate DNAT -j ACCEPT
	netns_ipt "$r" -A FORWARD -i ext -j DROP
	netns_ipt "$r" -A INPUT -i ext -m conntrack \
		--ctstate ESTABLISHED,RELATED -j ACCEPT
	netns_ipt "$r" -A INPUT -i ext -j DROP
}

# Builds the two-DC topology; the inter-DC link is shaped to XDC_RATE in
# both directions (plus XDC_DELAY each way when set: by the delay line
# where DELAYLINE names it, with XDC_LOSS, else by netem).
xdc_topology() {
	local r

	netns_add a1 a2 b1 b2 ra rb
	netns_veth ra ext rb ext
	xdc_router ra 1 "${XDC_EXT[ra]}" "${XDC_EXT[rb]}" a1 a2
	xdc_router rb 2 "${XDC_EXT[rb]}" "${XDC_EXT[ra]}" b1 b2
	if [ -n "$XDC_DELAY" ] && [ -n "$DELAYLINE" ]; then
		netns_shape ra ext "$XDC_RATE"
		netns_shape rb ext "$XDC_RATE"
		for r in ra rb; do
			netns_delayline "$r" ext "$XDC_DELAY" "$XDC_LOSS"
			netns_delayline_fw "$r"
		done
		return 0
	fi
	netns_shape ra ext "$XDC_RATE" "$XDC_DELAY"
	netns_shape rb ext "$XDC_RATE" "$XDC_DELAY"
}

# xdc_scenario CONF MESHPERF PLUGIN MODULE_DIR: a scenario on the two-DC
# topology with the plugin config CONF: the arguments and CONF set, SKIP
# where it cannot run (netns_init), the topology built.
xdc_scenario() {
	CONF=$1
	shift
	netns_scenario "$@"
	netns_init
	xdc_topology
}

# Packets dropped by a router's firewall rules for new inbound connections.
xdc_drops() {
	local r=$1

	{
		netns_ipt "$r" -L FORWARD -v -x -n
		netns_ipt "$r" -L INPUT -v -x -n
	} | awk '$3 == "DROP" && $6 == "ext" { n += $1 } END { print n + 0 }'
}

# Where HOST's port P (internal) is reachable from the other DC.
xdc_ext_port() {
	echo $((XDC_FWD_BASE[$1] + $2 - XDC_PORT_LOW))
}

# The address and bootstrap port a meshperf client in host FROM dials to
# reach a server in host TO (directly inside a DC, else through NAT).
xdc_dial() {
	local from=$1 to=$2

	if [ "${XDC_ROUTER[$from]}" = "${XDC_ROUTER[$to]}" ]; then
		echo "${XDC_IP[$to]} $XDC_BOOT_PORT"
	else
		echo "${XDC_EXT[${XDC_ROUTER[$to]}]} $(xdc_ext_port "$to" \
			"$XDC_BOOT_PORT")"
	fi
}

# ------------------------------------------------------------ delay line
#
# A long WAN where the kernel has no netem: router NS sends what it
# receives on its WAN interface through a TUN device, dl0, whose program
# (tools/delayline) holds each packet for a one-way delay, drops some if
# asked, and writes it back into dl0, where the main table routes it on:
#
#   WAN -> wan (rule: iif wan -> table 100, "default dev dl0") -> dl0
#       -> delayline, DELAY later -> dl0 (main table) -> LAN
#
# NAT, conntrack and the firewall decide on the first pass, as the packet
# comes from the WAN; the second pass is untracked and let through
# (netns_delayline_fw, in routers that track connections).  A line in
# each router makes the round trip the sum of their delays; the WAN's
# shaping (netns_shape, on the way out) stays where it was, before the
# delay.  Traffic to the router's own addresses is not delayed.

DELAYLINE=${DELAYLINE:-}	# the program: BUILD/tools/delayline/delayline
DELAYLINE_QUEUES=${DELAYLINE_QUEUES:-2}
DELAYLINE_LIMIT=${DELAYLINE_LIMIT:-256M}	# bytes held at most, per line
# 1: its threads at SCHED_FIFO (delayline --realtime), so that a busy host
# holds packets no longer than asked
DELAYLINE_RT=${DELAYLINE_RT-1}
DELAYLINE_TABLE=100
declare -gA DELAYLINE_PID=()
# shellcheck source=tools/delayline/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/delayline/lib.sh"

# netns_delayline NS WAN_IF DELAY [LOSS]: the line in router NS for what
# arrives on WAN_IF, held DELAY (delayline --delay: 25ms, 500us, 0), each
# packet on the wire lost with LOSS percent (default 0).  Its reports go
# to $NETNS_TMP/delayline-NS.stats (netns_delayline_stats).  Run again,
# it replaces a line that netns_delayline_stop ended.
netns_delayline() {
	local r=$1 wan=$2 delay=$3 loss=${4:-0} log mtu rt=()

	[ "$DELAYLINE_RT" != 1 ] || rt=(--realtime)
	[ -x "$DELAYLINE" ] ||
		netns_die "no delay line program (DELAYLINE='$DELAYLINE')"
	log=$NETNS_TMP/delayline-$r.log
	mtu=$(nsx "$r" cat "/sys/class/net/$wan/mtu")
	rm -f "$NETNS_TMP/delayline-$r.stats"
	netns_spawn "$r" "$log" "$DELAYLINE" --dev dl0 \
		--queues "$DELAYLINE_QUEUES" --delay "$delay" --loss "$loss" \
		--limit "$DELAYLINE_LIMIT" --mtu "$mtu" "${rt[@]}" \
		--stats "$NETNS_TMP/delayline-$r.stats"
	DELAYLINE_PID[$r]=$NETNS_LAST_PID
	delayline_up "$log" "$NETNS_LAST_PID" ||
		netns_die "$r: the delay line did not start"
	# the second pass comes in on dl0 from addresses routed via WAN_IF
	nsx "$r" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
		"net.ipv4.conf.$wan.rp_filter=0" net.ipv4.conf.dl0.rp_filter=0
	nsx "$r" ip route replace default dev dl0 table "$DELAYLINE_TABLE"
	nsx "$r" ip rule show pref 100 | grep -q . ||
		nsx "$r" ip rule add pref 100 iif "$wan" lookup "$DELAYLINE_TABLE"
}

# netns_long_tcp NS...: TCP in each NS may keep as much in flight as a long
# WAN takes: tcp_rmem and tcp_wmem (per namespace) grow to NETNS_TCP_MAX
# (default 256M) per socket, as autotuning needs for the bandwidth-delay
# product.
NETNS_TCP_MAX=${NETNS_TCP_MAX:-268435456}
netns_long_tcp() {
	local n

	for n in "$@"; do
		nsx "$n" sysctl -qw \
			"net.ipv4.tcp_rmem=4096 131072 $NETNS_TCP_MAX" \
			"net.ipv4.tcp_wmem=4096 16384 $NETNS_TCP_MAX" ||
			netns_die "$n: cannot raise tcp_rmem and tcp_wmem"
	done
}

# netns_cc CC NS...: CC is the congestion control of each NS; fails where
# the kernel lacks it or keeps it from namespaces (a namespace may take
# only those in the host's tcp_allowed_congestion_control).
netns_cc() {
	local cc=$1 n

	shift
	for n in "$@"; do
		nsx "$n" sysctl -qw "net.ipv4.tcp_congestion_control=$cc" \
			2>/dev/null || return 1
	done
}

# netns_have_cc CC: the kernel offers congestion control CC.
netns_have_cc() {
	grep -qw -- "$1" /proc/sys/net/ipv4/tcp_available_congestion_control
}

# netns_delayline_fw NS: router NS's iptables take the second pass of its
# line untracked (its NAT and conntrack were done on the first) and let
# it through.
netns_delayline_fw() {
	netns_ipt "$1" -t raw -I PREROUTING -i dl0 -j CT --notrack
	netns_ipt "$1" -I FORWARD 1 -i dl0 -j ACCEPT
}

# netns_delayline_stats NS: the line's report now (one line of KEY=VALUE,
# tools/delayline), or its last one once it ended.
netns_delayline_stats() {
	local r=$1 f=$NETNS_TMP/delayline-$1.stats pid old

	pid=${DELAYLINE_PID[$r]:-}
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		old=$(netns_delayline_key "$(cat "$f" 2>/dev/null)" report)
		kill -USR1 "$pid"
		for _ in $(seq 100); do
			[ "$(netns_delayline_key "$(cat "$f" 2>/dev/null)" \
				report)" != "$old" ] && break
			sleep 0.02
		done
	fi
	cat "$f" 2>/dev/null || netns_die "$r: the delay line left no report"
}

# netns_delayline_stop NS: the line ended, its last report in its stats
# file; dl0 and its route go with it, and the WAN is direct again.
# Returns the line's exit status (a sanitizer's finding shows there).
netns_delayline_stop() {
	local pid=${DELAYLINE_PID[$1]:-} rc=0

	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	netns_wait "$pid" 10 || rc=$?
	unset "DELAYLINE_PID[$1]"
	return "$rc"
}

# netns_delayline_key LINE KEY: the value of KEY in a report.
netns_delayline_key() {
	sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"
}

# netns_delayline_summary NS: the report of NS's line, in words.
netns_delayline_summary() {
	netns_delayline_stats "$1" | awk -v name="$1" \
		-f "$(dirname "${BASH_SOURCE[0]}")/../../tools/delayline/summary.awk"
}

# ---------------------------------------------------------------- meshperf

# Set by the caller: MESHPERF, PLUGIN, MODULE_DIR, CONF.
#
# xdc_meshperf_start SERVER CLIENT TAG [meshperf args...]: starts one
# meshperf run, the server in host SERVER, the client in host CLIENT, each
# process told its host name for the config's host sections.  Logs go to
# $NETNS_TMP/TAG.server and TAG.client; the pids are in XDC_SPID, XDC_CPID.
xdc_meshperf_start() {
	local srv=$1 cli=$2 tag=$3 addr port

	shift 3
	read -r addr port < <(xdc_dial "$cli" "$srv")
	netns_spawn "$srv" "$NETNS_TMP/$tag.server" env \
		NCCL_MESH_HOSTNAME="$srv" NCCL_MESH_CONF="$CONF" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" "${XDC_ENV[@]}" \
		"${XDC_SERVER_ENV[@]}" \
		"$MESHPERF" --server --bind 0.0.0.0 --port "$XDC_BOOT_PORT" \
		--plugin "$PLUGIN" "$@"
	XDC_SPID=$NETNS_LAST_PID
	netns_wait_listen "$srv" "$XDC_BOOT_PORT" 10 ||
		netns_die "$tag: meshperf server in $srv did not listen"
	netns_spawn "$cli" "$NETNS_TMP/$tag.client" env \
		NCCL_MESH_HOSTNAME="$cli" NCCL_MESH_CONF="$CONF" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" "${XDC_ENV[@]}" \
		"${XDC_CLIENT_ENV[@]}" \
		"$MESHPERF" --client "$addr" --port "$port" \
		--plugin "$PLUGIN" "$@"
	XDC_CPID=$NETNS_LAST_PID
}

# xdc_meshperf_finish LIMIT_S: waits for the run; returns the client's
# status (or the server's when only it failed; 124 on the time limit).
xdc_meshperf_finish() {
	local src=0 crc=0

	netns_wait "$XDC_CPID" "$1" || crc=$?
	netns_wait "$XDC_SPID" 10 || src=$?
	[ "$crc" -ne 0 ] && return "$crc"
	return "$src"
}

# xdc_meshperf SERVER CLIENT TAG LIMIT_S [meshperf args...]: one whole run.
xdc_meshperf() {
	local srv=$1 cli=$2 tag=$3 limit=$4

	shift 4
	xdc_meshperf_start "$srv" "$cli" "$tag" "$@"
	xdc_meshperf_finish "$limit"
}

# Extra environment (VAR=value words) for both meshperf processes, or for
# the server or client only.
XDC_ENV=()
XDC_SERVER_ENV=()
XDC_CLIENT_ENV=()

xdc_show_logs() {
	local tag=$1 side

	for side in server client; do
		[ -f "$NETNS_TMP/$tag.$side" ] || continue
		echo "---- $tag $side ----"
		cat "$NETNS_TMP/$tag.$side"
	done
}

# xdc_log_has TAG SIDE REGEX: a log line of that run matches.
xdc_log_has() {
	grep -Eq -- "$3" "$NETNS_TMP/$1.$2"
}

# ------------------------------------------------------------ bootstrap

# netns_tcp_bridge FROM PORT TO TO_PORT: 127.0.0.1:PORT in namespace FROM
# leads to 127.0.0.1:TO_PORT in namespace TO, through a unix socket in
# NETNS_TMP.  For out-of-band channels (meshperf's bootstrap, NCCL's own in
# a real job) between namespaces that the network under test must not
# join by itself.  Both halves run until the cleanup.
netns_tcp_bridge() {
	local from=$1 port=$2 to=$3 to_port=$4 sock

	sock=$NETNS_TMP/bridge-$from-$port.sock
	# shellcheck disable=SC2016 # python, not shell
	local py='
import socket, sys, threading
mode, lsn, dst = sys.argv[1:4]

def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass

if mode == "unix":
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(lsn)
    dial = lambda: socket.create_connection(("127.0.0.1", int(dst)))
else:
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", int(lsn)))
    def dial():
        s = socket.socket(socket.AF_UNIX)
        s.connect(dst)
        return s
ls.listen(16)
while True:
    c, _ = ls.accept()
    try:
        d = dial()
    except OSError:
        c.close()
        continue
    for x, y in ((c, d), (d, c)):
        threading.Thread(target=pump, args=(x, y), daemon=True).start()
'
	netns_spawn "$to" "$NETNS_TMP/bridge-$to-$to_port.log" \
		python3 -c "$py" unix "$sock" "$to_port"
	for _ in $(seq 100); do
		[ -S "$sock" ] && break
		sleep 0.05
	done
	[ -S "$sock" ] || netns_die "bridge to $to:$to_port did not start"
	netns_spawn "$from" "$NETNS_TMP/bridge-$from-$port.log" \
		python3 -c "$py" tcp "$port" "$sock"
	netns_wait_listen "$from" "$port" 10 ||
		netns_die "bridge in $from on port $port did not listen"
}

# ------------------------------------------------------ relay topology
#
# Two DCs that only their gateways join (relay scenario):
#
#   a0 10.0.0.11 --+                                        +-- b0 10.1.0.11
#                  br0 g0 192.168.100.1 ==== 192.168.100.2 g1 br0
#   a1 10.0.0.12 --+  10.0.0.1                      10.1.0.1  +-- b1 10.1.0.12
#
# The gateways do not forward (ip_forward=0): a host's default route leads
# to its gateway and ends there, so only a relay on the gateways carries
# traffic between the DCs.  From the link, each gateway's firewall takes
# only replies and a port mapping, as a NAT router in front of it would:
# RELAY_EXT_PORT to the relay port, and 50000-50009 to 40000-40009 (the
# plugin's port range and meshperf's bootstrap).

declare -gA RELAY_IP=([a0]=10.0.0.11 [a1]=10.0.0.12 [b0]=10.1.0.11
		      [b1]=10.1.0.12 [g0]=10.0.0.1 [g1]=10.1.0.1)
declare -gA RELAY_EXT=([g0]=192.168.100.1 [g1]=192.168.100.2)
# shellcheck disable=SC2034 # for the scripts that source this
declare -gA RELAY_GW=([a0]=g0 [a1]=g0 [b0]=g1 [b1]=g1)
RELAY_PORT=29400	# relay.port in tests/netns/relay.conf
RELAY_EXT_PORT=39400	# where the other gateway dials it

# relay_gateway G DC_OCTET HOST...
relay_gateway() {
	local g=$1 dc=$2 ext=${RELAY_EXT[$1]} h k ports=()

	shift 2
	for h in "$@"; do
		netns_veth "$h" "lan-$h" "$g" "p-$h"
		ports+=("p-$h")
		netns_addr "$h" "lan-$h" "${RELAY_IP[$h]}/24"
		netns_route "$h" default "${RELAY_IP[$g]}"
	done
	netns_bridge "$g" br0 "${ports[@]}"
	netns_addr "$g" br0 "${RELAY_IP[$g]}/24"
	netns_addr "$g" ext "$ext/24"
	nsx "$g" sysctl -qw net.ipv4.ip_forward=0

	netns_ipt "$g" -t nat -A PREROUTING -i ext -p tcp -d "$ext" \
		--dport "$RELAY_EXT_PORT" -j DNAT \
		--to-destination "$ext:$RELAY_PORT"
	for ((k = 0; k < 10; k++)); do
		netns_ipt "$g" -t nat -A PREROUTING -i ext -p tcp -d "$ext" \
			--dport $((50000 + k)) -j DNAT \
			--to-destination "$ext:$((40000 + k))"
	done
	netns_ipt "$g" -A INPUT -i ext -m conntrack \
		--ctstate ESTABLISHED,RELATED,DNAT -j ACCEPT
	netns_ipt "$g" -A INPUT -i ext -p icmp -j ACCEPT
	netns_ipt "$g" -A INPUT -i ext -j DROP
}

# relay_topology [RATE [DELAY]]: builds it; with RATE the link is shaped
# in both directions (netns_shape).
relay_topology() {
	netns_add a0 a1 b0 b1 g0 g1
	netns_veth g0 ext g1 ext
	relay_gateway g0 0 a0 a1
	relay_gateway g1 1 b0 b1
	if [ -n "${1:-}" ]; then
		netns_shape g0 ext "$1" "${2:-}"
		netns_shape g1 ext "$1" "${2:-}"
	fi
}

# Set by the caller: MESHPERF, MESHRELAY, PLUGIN, MODULE_DIR, CONF; extra
# environment words in XDC_ENV (every process), XDC_SERVER_ENV and
# XDC_CLIENT_ENV (meshperf), RELAY_ENV (meshrelay).
RELAY_ENV=()

# relay_meshrelay_start G: meshrelay on gateway G, logging to
# $NETNS_TMP/meshrelay-G; waits until it serves.
relay_meshrelay_start() {
	local g=$1

	netns_spawn "$g" "$NETNS_TMP/meshrelay-$g" env NCCL_MESH_HOSTNAME="$g" \
		NCCL_MESH_RELAY_NAME="$g" NCCL_MESH_CONF="$CONF" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" NCCL_DEBUG=INFO \
		"${XDC_ENV[@]}" "${RELAY_ENV[@]}" \
		"$MESHRELAY" --config "$CONF"
	netns_wait_listen "$g" "$RELAY_PORT" 15 || {
		cat "$NETNS_TMP/meshrelay-$g" >&2
		netns_die "meshrelay on $g does not serve port $RELAY_PORT"
	}
}

# relay_meshperf_start SERVER CLIENT TAG BOOT_PORT [meshperf args...]: as
# xdc_meshperf_start, but the bootstrap goes through a netns_tcp_bridge
# on BOOT_PORT (one per concurrent run), so that only the plugin's own
# connections use the network.  A client's BOOT_PORT always leads to the
# same server host.
declare -gA RELAY_BRIDGE=()
relay_meshperf_start() {
	local srv=$1 cli=$2 tag=$3 port=$4

	shift 4
	netns_spawn "$srv" "$NETNS_TMP/$tag.server" env \
		NCCL_MESH_HOSTNAME="$srv" NCCL_MESH_RELAY_NAME="$srv" \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		NCCL_DEBUG=INFO \
		"${XDC_ENV[@]}" "${XDC_SERVER_ENV[@]}" \
		"$MESHPERF" --server --port "$port" --plugin "$PLUGIN" "$@"
	XDC_SPID=$NETNS_LAST_PID
	netns_wait_listen "$srv" "$port" 10 ||
		netns_die "$tag: meshperf server in $srv did not listen"
	case ${RELAY_BRIDGE[$cli:$port]:-} in
	"") netns_tcp_bridge "$cli" "$port" "$srv" "$port"
	    RELAY_BRIDGE[$cli:$port]=$srv ;;
	"$srv") ;;
	*) netns_die "$tag: bootstrap port $port of $cli leads to ${RELAY_BRIDGE[$cli:$port]}" ;;
	esac
	netns_spawn "$cli" "$NETNS_TMP/$tag.client" env \
		NCCL_MESH_HOSTNAME="$cli" NCCL_MESH_RELAY_NAME="$cli" \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		NCCL_DEBUG=INFO \
		"${XDC_ENV[@]}" "${XDC_CLIENT_ENV[@]}" \
		"$MESHPERF" --client 127.0.0.1 --port "$port" \
		--plugin "$PLUGIN" "$@"
	XDC_CPID=$NETNS_LAST_PID
}

# ----------------------------------------------------- cluster topology
#
# xdc_topology with N hosts in each DC (meshinfo --cluster scenarios):
# a1..aN behind ra, b1..bN behind rb, host k at 10.<dc>.0.(10+k), its
# router forwarding XDC_NPORTS external ports from 50000 + (k-1) *
# XDC_NPORTS to 40000.. (a1, a2, b1 and b2 keep xdc_topology's facts).
# The inter-DC link is shaped to XDC_RATE unless it is empty.  The hosts'
# names are left in XDC_HOSTS, DC A's first.
xdc_cluster_topology() {
	local n=$1 k a=() b=()

	if [ "$n" -lt 1 ] || [ "$n" -gt 9 ]; then
		netns_die "xdc_cluster_topology: 1..9 hosts per DC, not $n"
	fi
	for ((k = 1; k <= n; k++)); do
		a+=("a$k")
		b+=("b$k")
		XDC_IP[a$k]=10.1.0.$((10 + k))
		XDC_IP[b$k]=10.2.0.$((10 + k))
		XDC_ROUTER[a$k]=ra
		XDC_ROUTER[b$k]=rb
		XDC_FWD_BASE[a$k]=$((50000 + (k - 1) * XDC_NPORTS))
		XDC_FWD_BASE[b$k]=$((50000 + (k - 1) * XDC_NPORTS))
	done
	XDC_HOSTS=("${a[@]}" "${b[@]}")
	netns_add "${XDC_HOSTS[@]}" ra rb
	netns_veth ra ext rb ext
	xdc_router ra 1 "${XDC_EXT[ra]}" "${XDC_EXT[rb]}" "${a[@]}"
	xdc_router rb 2 "${XDC_EXT[rb]}" "${XDC_EXT[ra]}" "${b[@]}"
	if [ -n "$XDC_RATE" ]; then
		netns_shape ra ext "$XDC_RATE" "$XDC_DELAY"
		netns_shape rb ext "$XDC_RATE" "$XDC_DELAY"
	fi
}

# cluster_scenario MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT: the arguments
# a meshinfo --cluster scenario takes (usage: NAME.sh MESHINFO PLUGIN
# MODULE_DIR SOURCE_ROOT), set with its config (cluster.conf), the
# report's schema and checker; SKIP where it cannot run (netns_init).
cluster_scenario() {
	MESHINFO=$1
	PLUGIN=$2
	MODULE_DIR=$3
	CONF=$(dirname "${BASH_SOURCE[0]}")/cluster.conf
	schema=$4/docs/meshinfo-cluster.schema.json
	check=$4/tests/tools/cluster_report.py
	netns_init
}

# cluster_run TAG WANT RDV NS...: one meshinfo --cluster, rank r in
# namespace NS_r, rank 0 listening at RDV (ADDR:PORT, which every rank
# reaches); each rank's NCCL_MESH_HOSTNAME is CLUSTER_NAMES[r] (else
# NS_r), its NCCL_SOCKET_IFNAME CLUSTER_IFNAME[r] (unset where empty),
# with CLUSTER_ENV (VAR=value words) for all.  Small bursts: the pairs
# need only connect.  Every rank must exit WANT, else the logs are shown
# and the test fails; rank 0's JSON is left in NETNS_TMP/TAG.json, each
# rank's output in NETNS_TMP/TAG.rankR.
CLUSTER_NAMES=()
CLUSTER_IFNAME=()
CLUSTER_ENV=()
cluster_run() {
	local tag=$1 want=$2 rdv=$3 size r k rc pids=() ifn extra

	shift 3
	size=$#
	for ((r = 0; r < size; r++)); do
		ifn=(-u NCCL_SOCKET_IFNAME)
		[ -z "${CLUSTER_IFNAME[$r]:-}" ] ||
			ifn=(NCCL_SOCKET_IFNAME="${CLUSTER_IFNAME[$r]}")
		extra=()
		[ "$r" -eq 0 ] && extra=(--json "$NETNS_TMP/$tag.json")
		netns_spawn "${@:r+1:1}" "$NETNS_TMP/$tag.rank$r" env \
			"${ifn[@]}" NCCL_MESH_HOSTNAME="${CLUSTER_NAMES[$r]:-${*:r+1:1}}" \
			NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
			"${CLUSTER_ENV[@]}" \
			"$MESHINFO" --cluster --rendezvous "$rdv" --rank "$r" \
			--size "$size" --plugin "$PLUGIN" --timeout 30 \
			--burst-ms 20 --burst-bytes 256K --lat-iters 0 \
			"${extra[@]}"
		pids+=("$NETNS_LAST_PID")
	done
	for ((r = 0; r < size; r++)); do
		rc=0
		netns_wait "${pids[$r]}" 90 || rc=$?
		[ "$rc" -eq "$want" ] && continue
		for ((k = 0; k < size; k++)); do
			echo "---- $tag rank $k ----"
			cat "$NETNS_TMP/$tag.rank$k"
		done
		netns_die "$tag: rank $r exited $rc, expected $want"
	done
	sed -n '/^NCCL bootstrap/,/^$/p;/^findings/,/^$/p' \
		"$NETNS_TMP/$tag.rank0"
	echo "PASS $tag: every rank exits $want"
}

# cluster_report TAG CHECKS...: rank 0's JSON of cluster_run TAG against
# the schema and cluster_report.py's CHECKS.
cluster_report() {
	local tag=$1

	shift
	python3 "$check" "$NETNS_TMP/$tag.json" --schema "$schema" "$@" || {
		cat "$NETNS_TMP/$tag.rank0"
		netns_die "$tag: the report does not show the scenario"
	}
}

# cluster_text TAG LINE_RE: rank 0's text report has a line matching.
cluster_text() {
	grep -Eq -- "$2" "$NETNS_TMP/$1.rank0" ||
		netns_die "$1: rank 0's text report has no line matching '$2'"
}

# netns_shape_split NS IF RATE [DEST DEST_RATE]...: egress of IF limited
# to RATE, except packets to address DEST, which get a token bucket of
# their own at DEST_RATE: one cable of a host made slower than its others.
# An htb with unlimited classes only sorts the packets (prio is not in
# every kernel); token buckets as in netns_shape do the shaping.
netns_shape_split() {
	local name=$1 dev=$2 rate=$3 band=2

	shift 3
	nsx "$name" tc qdisc add dev "$dev" root handle 1: htb default 1
	netns_tbf_class "$name" "$dev" 1:1 "$rate"
	while [ $# -ge 2 ]; do
		netns_tbf_class "$name" "$dev" "1:$band" "$2"
		nsx "$name" tc filter add dev "$dev" parent 1: protocol ip \
			prio 1 u32 match ip dst "$1/32" flowid "1:$band"
		band=$((band + 1))
		shift 2
	done
}

# netns_tbf_class NS IF CLASSID RATE: an unlimited htb class with a token
# bucket at RATE under it.
netns_tbf_class() {
	local bits burst

	nsx "$1" tc class add dev "$2" parent 1: classid "$3" htb \
		rate 100gbit quantum 60000
	bits=$(tc_rate_bits "$4")
	burst=$(( bits / 8 / 1000 ))
	[ "$burst" -ge 65536 ] || burst=65536
	nsx "$1" tc qdisc add dev "$2" parent "$3" tbf rate "$4" \
		burst "$burst" latency 50ms
}

# netns_block A B: every packet between hosts A and B (XDC_IP) dropped in
# both hosts, both directions, so a connection between them times out.
netns_block() {
	netns_ipt "$1" -A OUTPUT -d "${XDC_IP[$2]}" -j DROP
	netns_ipt "$1" -A INPUT -s "${XDC_IP[$2]}" -j DROP
	netns_ipt "$2" -A OUTPUT -d "${XDC_IP[$1]}" -j DROP
	netns_ipt "$2" -A INPUT -s "${XDC_IP[$1]}" -j DROP
}

# ------------------------------------------------- management network
#
# xdc_mgmt_network HOST...: beside the NAT'd LANs, one flat network that
# every given host reaches directly, as a management network or a VPN
# does (docs/deploy.md): a bridge in namespace "mg", and in each host an
# interface "mgmt" at 10.99.0.(10 + its place in the list)/24, the
# addresses left in XDC_MGMT_IP.  No route of the LANs changes: only
# what binds or dials a mgmt address (NCCL's bootstrap with
# NCCL_SOCKET_IFNAME=mgmt) takes it.
declare -gA XDC_MGMT_IP=()
xdc_mgmt_network() {
	local h k=0 ports=()

	netns_add mg
	for h in "$@"; do
		k=$((k + 1))
		netns_veth "$h" mgmt mg "m-$h"
		ports+=("m-$h")
		XDC_MGMT_IP[$h]=10.99.0.$((10 + k))
		netns_addr "$h" mgmt "${XDC_MGMT_IP[$h]}/24"
	done
	netns_bridge mg br0 "${ports[@]}"
}

# ------------------------------------------- containers behind docker -p
#
# docker_topology HOST...: machines on one LAN, each running one container
# behind Docker's default bridge (docs/deploy.md, containers):
#
#   c<k> eth0 172.17.0.2 -- docker0 172.17.0.1  h<k> eth0 10.0.0.(10+k) -- LAN
#
# Namespace HOST is the machine, "c-HOST" its container, at 172.17.0.2 in
# every machine as Docker gives it.  The machine masquerades what leaves
# the container and forwards its ports 50000..50009 to the container's
# 40000..40009, one rule per port as `docker run -p 50000-50009:40000-40009`
# makes them.  Addresses in DOCKER_HOST_IP.
declare -gA DOCKER_HOST_IP=()
docker_topology() {
	local h k=0 p ports=()

	netns_add lan
	for h in "$@"; do
		k=$((k + 1))
		netns_add "$h" "c-$h"
		DOCKER_HOST_IP[$h]=10.0.0.$((10 + k))
		netns_veth "$h" eth0 lan "p-$h"
		ports+=("p-$h")
		netns_addr "$h" eth0 "${DOCKER_HOST_IP[$h]}/24"
		# the container's eth0 first: its lowest interface after lo
		netns_veth "c-$h" eth0 "$h" veth0
		netns_addr "c-$h" eth0 172.17.0.2/16
		netns_route "c-$h" default 172.17.0.1
		netns_bridge "$h" docker0 veth0
		netns_addr "$h" docker0 172.17.0.1/16
		netns_forwarding "$h"
		netns_ipt "$h" -t nat -A POSTROUTING -s 172.17.0.0/16 \
			! -o docker0 -j MASQUERADE
		for ((p = 0; p < 10; p++)); do
			netns_ipt "$h" -t nat -A PREROUTING -i eth0 -p tcp \
				-d "${DOCKER_HOST_IP[$h]}" --dport $((50000 + p)) \
				-j DNAT --to-destination 172.17.0.2:$((40000 + p))
		done
	done
	netns_bridge lan br0 "${ports[@]}"
}

# ----------------------------------------------- cloud VMs behind 1:1 NAT
#
# nat11_topology: xdc_topology's four hosts and two routers, but each host
# has a public address of its own, mapped 1:1 (every port) by its router,
# as a cloud VM's public IP is: a1, a2 at 203.0.113.11, .12 behind ra;
# b1, b2 at 198.51.100.11, .12 behind rb.  The routers' firewall (a
# security group) lets in only replies and ports 40000-40009 (the plugin's
# range and the rendezvous); a host's private address is not routed from
# the other side.  Public addresses in NAT11_PUB.
declare -gA NAT11_PUB=([a1]=203.0.113.11 [a2]=203.0.113.12
		       [b1]=198.51.100.11 [b2]=198.51.100.12)
nat11_router() {
	local r=$1 h

	xdc_lan "$@"
	shift 4
	for h in "$@"; do
		netns_ipt "$r" -t nat -A PREROUTING -i ext -d "${NAT11_PUB[$h]}" \
			-j DNAT --to-destination "${XDC_IP[$h]}"
		netns_ipt "$r" -t nat -A POSTROUTING -o ext -s "${XDC_IP[$h]}" \
			-j SNAT --to-source "${NAT11_PUB[$h]}"
	done
	netns_ipt "$r" -P FORWARD DROP
	netns_ipt "$r" -A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED \
		-j ACCEPT
	netns_ipt "$r" -A FORWARD -i br0 -j ACCEPT
	netns_ipt "$r" -A FORWARD -i ext -p tcp --dport 40000:40009 \
		-m conntrack --ctstate DNAT -j ACCEPT
}

nat11_topology() {
	netns_add a1 a2 b1 b2 ra rb
	netns_veth ra ext rb ext
	nat11_router ra 1 "${XDC_EXT[ra]}" "${XDC_EXT[rb]}" a1 a2
	nat11_router rb 2 "${XDC_EXT[rb]}" "${XDC_EXT[ra]}" b1 b2
}
