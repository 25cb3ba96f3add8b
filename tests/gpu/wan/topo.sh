# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# The two-datacenter topology of the GPU WAN tier (tests/gpu/wan/run.sh)
# and the faults it injects.  Sourced, never run.
#
#            mgmt bridge 172.30.0.0/24 (NCCL's bootstrap only, never shaped)
#      +--------+-----------+-----------+--------+
#      a1 .11   a2 .12      b1 .21      b2 .22       (mg0 in every host)
#
#   a1 10.1.0.11 --+                                      +-- b1 10.2.0.11
#                  br0 ra 192.0.2.1 ==WAN, TBF== 192.0.2.2 rb br0
#   a2 10.1.0.12 --+   (10.1.0.1)                 (10.2.0.1)  +-- b2 10.2.0.12
#                      router               NAT router
#
# Every host is a network namespace with its data interface lan0 on its
# DC's bridge.  DC A is routed: its hosts' own addresses are what DC B
# dials.  DC B sits behind rb, which masquerades outbound and forwards
# from its WAN address a block of ports per host to that host's 40000..:
# 192.0.2.2:50000-50009 -> b1:40000-40009, 50010-50019 -> b2.  The WAN
# veth is shaped by a token bucket at WAN_RATE in both directions (the
# kernels this runs on may have no netem, so there is no added delay).
#
# Modes (wan_mode): nat (the above), routed (no NAT: DC B's addresses
# routed, as NCCL's Socket transport needs) and gateway (the routers
# forward nothing across the WAN; only meshrelay on ra and rb joins the
# DCs, as "ga" and "gb").
#
# With WAN_RTT_MS set (run.sh --rtt), the WAN is long: each router holds
# what it receives from the WAN for half the round trip in a delay line
# (tools/delayline, wan_delayline), losing WAN_LOSS percent of it.
#
# The tools (ip, tc, ss, nft, conntrack, iperf3) come from the system or,
# where it lacks them, from a folder made by tools.sh, started through
# that folder's own loader so that no library path reaches anything else.

WAN_PFX=${WAN_PFX:-gw$$}
WAN_RATE=${WAN_RATE:-4gbit}
WAN_HOSTS=(a1 a2 b1 b2)
WAN_LIST=()		# namespaces made
WAN_PIDS=()		# background processes started
WAN_TMP=

declare -gA WAN_IP=([a1]=10.1.0.11 [a2]=10.1.0.12 [b1]=10.2.0.11
		    [b2]=10.2.0.12)
declare -gA WAN_MG=([a1]=172.30.0.11 [a2]=172.30.0.12 [b1]=172.30.0.21
		    [b2]=172.30.0.22)
declare -gA WAN_FWD=([b1]=50000 [b2]=50010)	# first forwarded port
WAN_EXT_A=192.0.2.1
WAN_EXT_B=192.0.2.2
WAN_PORT_LOW=40000
WAN_NPORTS=10		# 40000-40007 the plugin, 40009 the TCP ceiling
WAN_TOOL_PORT=40009
WAN_RELAY_PORT=29400

WAN_RTT_MS=${WAN_RTT_MS:-0}	# the delay lines' round trip; 0: none
WAN_LOSS=${WAN_LOSS:-0}		# percent of packets each line loses
WAN_DL_QUEUES=${WAN_DL_QUEUES:-4}	# queues (threads) of each line
WAN_DL_CPUS=${WAN_DL_CPUS:-}		# the lines' CPUs (taskset), or any
WAN_DELAYLINE=			# its program (BUILD/tools/delayline/delayline)
WAN_DL=0			# 1 once the lines run
declare -gA WAN_DL_PID=()
# shellcheck source=tools/delayline/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../../tools/delayline/lib.sh"

declare -gA WAN_CARRIED=()
WAN_TOOLS=
WAN_NSENTER=0

wan_log() {
	printf '[wan] %s\n' "$*" >&2
}

wan_die() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

wan_skip() {
	printf 'SKIP: %s\n' "$*" >&2
	exit 77
}

# wan_tools DIR FORCE: where each tool comes from: the system's unless it
# lacks it or FORCE is 1, else DIR (tools.sh).  SKIP when one is missing
# from both; iperf3 may be missing (wan_ceiling then uses Python).
wan_tools() {
	local dir=$1 force=$2 t

	WAN_TOOLS=$dir
	for t in ip tc ss nft conntrack iperf3; do
		if [ "$force" -eq 0 ] && command -v "$t" >/dev/null; then
			continue
		fi
		if [ -x "$dir/bin/$t" ] && [ -x "$dir/ld.so" ]; then
			WAN_CARRIED[$t]=1
		elif [ "$t" != iperf3 ]; then
			wan_skip "no $t here and none in $dir (make it with" \
				 "tests/gpu/wan/tools.sh $dir on a host that has it)"
		fi
	done
	command -v nsenter >/dev/null && WAN_NSENTER=1
	return 0
}

# wan_has TOOL: the tool can be started (system or carried).
wan_has() {
	[ -n "${WAN_CARRIED[$1]:-}" ] || command -v "$1" >/dev/null
}

# wan_x TOOL ARGS...: a tool in the namespace of the caller.
wan_x() {
	local t=$1

	shift
	if [ -n "${WAN_CARRIED[$t]:-}" ]; then
		${WAN_NSX_EXEC:+exec} "$WAN_TOOLS/ld.so" --library-path \
			"$WAN_TOOLS/lib" "$WAN_TOOLS/bin/$t" "$@"
	else
		${WAN_NSX_EXEC:+exec} "$t" "$@"
	fi
}

# Full name of namespace NAME, and its file.
ns() {
	printf '%s-%s' "$WAN_PFX" "$1"
}

ns_path() {
	printf '/run/netns/%s' "$(ns "$1")"
}

# nsx NAME CMD...: CMD inside namespace NAME (a tool of wan_tools or any
# program).
nsx() {
	local n=$1 t=$2

	shift
	if [ -n "${WAN_CARRIED[$t]:-}" ]; then
		shift
		set -- "$WAN_TOOLS/ld.so" --library-path "$WAN_TOOLS/lib" \
			"$WAN_TOOLS/bin/$t" "$@"
	fi
	if [ "$WAN_NSENTER" -eq 1 ]; then
		${WAN_NSX_EXEC:+exec} nsenter --net="$(ns_path "$n")" "$@"
	else
		wan_x ip netns exec "$(ns "$n")" "$@"
	fi
}

# nsx_sysctl NAME KEY VALUE: a sysctl of NAME's network namespace.
nsx_sysctl() {
	nsx "$1" sh -c "echo $3 > /proc/sys/${2//.//}"
}

# wan_spawn NAME LOG CMD...: CMD in the background inside NAME, output to
# LOG; its pid is in WAN_LAST_PID and ended by the cleanup.
wan_spawn() {
	local n=$1 log=$2

	shift 2
	# the background shell becomes CMD (nsenter and ip netns exec exec
	# it too), so that WAN_LAST_PID is CMD's own: a TERM sent there stops
	# it, not a shell that would leave it running
	WAN_NSX_EXEC=1 nsx "$n" "$@" >"$log" 2>&1 &
	WAN_LAST_PID=$!
	WAN_PIDS+=("$WAN_LAST_PID")
}

wan_cleanup() {
	local pid n

	for pid in "${WAN_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	# whatever still runs inside our namespaces was started by us
	for n in "${WAN_LIST[@]}"; do
		for pid in $(wan_x ip netns pids "$n" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
	done
	for pid in "${WAN_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	for n in "${WAN_LIST[@]}"; do
		wan_x ip netns del "$n" 2>/dev/null || true
	done
	WAN_LIST=()
	WAN_PIDS=()
	[ -z "$WAN_TMP" ] || rm -rf "$WAN_TMP"
}

# wan_init: root and namespaces here, else SKIP; the cleanup set to run
# on exit.  Call wan_tools first.
wan_init() {
	local probe

	[ "$(id -u)" -eq 0 ] || wan_skip "needs root (network namespaces)"
	WAN_TMP=$(mktemp -d -t nccl-mesh-wan.XXXXXX) || wan_die "mktemp failed"
	probe=$(ns probe)
	wan_x ip netns add "$probe" 2>/dev/null ||
		wan_skip "cannot create a network namespace"
	WAN_LIST+=("$probe")
	nsx probe nft -f - >/dev/null 2>&1 <<'NFT' ||
table ip probe {
	chain post { type nat hook postrouting priority srcnat; masquerade; }
}
NFT
		wan_skip "nftables cannot load a NAT table here"
	wan_x ip netns del "$probe"
	WAN_LIST=()
}

wan_ns_add() {
	local n

	for n in "$@"; do
		wan_x ip netns add "$(ns "$n")" ||
			wan_die "cannot create namespace $(ns "$n")"
		WAN_LIST+=("$(ns "$n")")
		nsx "$n" ip link set lo up
	done
}

# wan_veth NS1 IF1 NS2 IF2: a veth pair, one end in each namespace, up;
# nothing is ever added to the namespace of the caller.
wan_veth() {
	wan_x ip link add "$2" netns "$(ns "$1")" type veth \
		peer name "$4" netns "$(ns "$3")" || wan_die "veth $1:$2 - $3:$4"
	nsx "$1" ip link set "$2" up
	nsx "$3" ip link set "$4" up
}

# wan_bridge NS BR PORT...
wan_bridge() {
	local n=$1 br=$2 port

	shift 2
	nsx "$n" ip link add "$br" type bridge
	for port in "$@"; do
		nsx "$n" ip link set "$port" master "$br"
	done
	nsx "$n" ip link set "$br" up
}

# wan_shape NS IF RATE: egress of IF held to RATE by a token bucket under
# an htb class.  The bucket's burst is 1 ms at the rate (at least one 64
# KiB GSO packet), its queue 50 ms, as a router's.
wan_shape() {
	local n=$1 dev=$2 rate=$3 bits burst

	bits=$(wan_rate_bits "$rate") || wan_die "bad rate '$rate'"
	burst=$((bits / 8 / 1000))
	[ "$burst" -ge 65536 ] || burst=65536
	if ! nsx "$n" tc qdisc add dev "$dev" root handle 1: htb default 1 ||
	   ! nsx "$n" tc class add dev "$dev" parent 1: classid 1:1 htb \
		rate 100gbit quantum 60000 ||
	   ! nsx "$n" tc qdisc add dev "$dev" parent 1:1 handle 10: tbf \
		rate "$rate" burst "$burst" latency 50ms; then
		wan_die "cannot shape $dev in $n to $rate (tc htb/tbf)"
	fi
}

# wan_rate_bits RATE: bits per second of a tc rate (bit, kbit, mbit, gbit).
wan_rate_bits() {
	local r=${1,,} n

	n=${r%%[a-z]*}
	[ -n "$n" ] || return 1
	case ${r#"$n"} in
	""|bit) echo "$n" ;;
	kbit) echo $((n * 1000)) ;;
	mbit) echo $((n * 1000000)) ;;
	gbit) echo $((n * 1000000000)) ;;
	*) return 1 ;;
	esac
}

# wan_topology: the namespaces, links, addresses and shaping; the routers
# then wait for wan_mode.
wan_topology() {
	local h r dc mg=()

	wan_ns_add "${WAN_HOSTS[@]}" ra rb mg
	for h in "${WAN_HOSTS[@]}"; do
		r=r${h:0:1}
		dc=$([ "${h:0:1}" = a ] && echo 1 || echo 2)
		wan_veth "$h" lan0 "$r" "p-$h"
		nsx "$h" ip addr add "${WAN_IP[$h]}/24" dev lan0
		nsx "$h" ip route add default via "10.$dc.0.1"
		wan_veth "$h" mg0 mg "m-$h"
		nsx "$h" ip addr add "${WAN_MG[$h]}/24" dev mg0
		mg+=("m-$h")
	done
	wan_bridge ra br0 p-a1 p-a2
	wan_bridge rb br0 p-b1 p-b2
	wan_bridge mg br0 "${mg[@]}"
	nsx ra ip addr add 10.1.0.1/24 dev br0
	nsx rb ip addr add 10.2.0.1/24 dev br0
	wan_veth ra wan rb wan
	nsx ra ip addr add "$WAN_EXT_A/30" dev wan
	nsx rb ip addr add "$WAN_EXT_B/30" dev wan
	for r in ra rb; do
		nsx_sysctl "$r" net.ipv4.ip_forward 1
		wan_shape "$r" wan "$WAN_RATE"
	done
	WAN_MODE=
}

# wan_routes: the routes through the WAN of the current mode, (re)made;
# a link that went down took them along.
wan_routes() {
	nsx rb ip route replace default via "$WAN_EXT_A"
	if [ "$WAN_MODE" = routed ]; then
		nsx ra ip route replace 10.2.0.0/24 via "$WAN_EXT_B"
	else
		nsx ra ip route del 10.2.0.0/24 2>/dev/null || true
	fi
}

# wan_rb_rules MODE: rb's nftables for MODE, printed.
wan_rb_rules() {
	local h k

	echo 'table ip wan {'
	if [ "$1" = nat ]; then
		echo ' chain prerouting { type nat hook prerouting priority dstnat;'
		for h in b1 b2; do
			for ((k = 0; k < WAN_NPORTS; k++)); do
				echo "  iifname \"wan\" ip daddr $WAN_EXT_B tcp dport $((WAN_FWD[$h] + k)) dnat to ${WAN_IP[$h]}:$((WAN_PORT_LOW + k))"
			done
		done
		echo ' }'
		echo ' chain postrouting { type nat hook postrouting priority srcnat;'
		echo '  oifname "wan" masquerade'
		echo ' }'
	fi
	# From outside: replies, forwarded ports (nat), the relay port
	# (gateway); everything else is dropped silently, as a firewall does.
	echo ' chain forward { type filter hook forward priority filter; policy drop;'
	echo '  iifname "br0" oifname "br0" accept'
	if [ "$WAN_DL" -eq 1 ]; then
		# the delay line's second pass was decided on its first, from
		# the WAN, but for the gateway's: it must be for rb itself
		if [ "$1" = gateway ]; then
			echo '  iifname "dl0" drop'
			echo '  iifname "wan" oifname "dl0" ct state established,related accept'
			echo "  iifname \"wan\" oifname \"dl0\" ip daddr $WAN_EXT_B tcp dport $WAN_RELAY_PORT accept"
		else
			echo '  iifname "dl0" accept'
		fi
	fi
	case $1 in
	nat)
		# what conntrack no longer tracks (strict, after a flush)
		# would leave un-NATed, with its private address
		echo '  ct state invalid drop'
		echo '  ct state established,related accept'
		echo '  iifname "br0" oifname "wan" accept'
		echo '  iifname "wan" ct status dnat accept' ;;
	routed)
		echo '  accept' ;;
	esac
	echo ' }'
	echo ' chain input { type filter hook input priority filter; policy accept;'
	echo '  iifname "wan" ct state established,related accept'
	[ "$1" = gateway ] &&
		echo "  iifname \"wan\" tcp dport $WAN_RELAY_PORT accept"
	echo '  iifname "wan" drop'
	echo ' }'
	echo '}'
}

# wan_mode nat|routed|gateway: the routers' rules and routes for MODE.
wan_mode() {
	[ "${WAN_MODE:-}" = "$1" ] && return 0
	nsx ra nft delete table ip wan 2>/dev/null || true
	nsx rb nft delete table ip wan 2>/dev/null || true
	wan_rb_rules "$1" | nsx rb nft -f - || wan_die "rb: nft rules for $1"
	if [ "$1" = gateway ]; then
		# ra forwards nothing across either; its relay port is open.
		# With the delay line, what comes from the WAN passes it first
		# and may then go to ra itself only.
		local dl=
		[ "$WAN_DL" -eq 0 ] ||
			dl='iifname "wan" oifname "dl0" accept; iifname "dl0" drop;'
		nsx ra nft -f - <<NFT || wan_die "ra: nft rules for gateway"
table ip wan {
 chain forward { type filter hook forward priority filter; policy accept;
  $dl
  iifname "wan" drop
  oifname "wan" drop
 }
}
NFT
	fi
	WAN_MODE=$1
	wan_routes
	nsx rb conntrack -F >/dev/null 2>&1 || true
	wan_log "mode $1"
}

# wan_wait_listen NS PORT LIMIT_S: until something listens on TCP PORT.
wan_wait_listen() {
	local deadline=$((SECONDS + $3))

	while [ "$SECONDS" -lt "$deadline" ]; do
		nsx "$1" ss -Htln "sport = :$2" | grep -q . && return 0
		sleep 0.2
	done
	return 1
}

# ------------------------------------------------------- delay line
#
# wan_delayline OUT: a delay line in each router (after wan_topology,
# before wan_mode), as tests/netns/lib.sh's netns_delayline makes them:
# what a router receives on wan is routed by input interface into the
# TUN device dl0, held WAN_RTT_MS / 2 there, and written back, where the
# main table routes it on, untracked (NAT, conntrack and the firewall
# decided on the first pass; wan_rb_rules and wan_mode let the second
# through).  Unlike there, the local table is moved behind the line's
# rules (one per IP protocol), so that the gateways' relays, which the
# WAN reaches on the routers themselves, are as far apart.  Each line's limit is what the
# rate puts in flight over the round trip, plus 64 MiB; its log and
# reports go to OUT.
wan_delayline() {
	local out=$1 r log half_us=$((WAN_RTT_MS * 1000 / 2)) bits limit

	[ -x "$WAN_DELAYLINE" ] || wan_die "no delay line at '$WAN_DELAYLINE'"
	rm -f "$out"/delayline-r[ab].*
	bits=$(wan_rate_bits "$WAN_RATE")
	limit=$((bits * WAN_RTT_MS / 8 / 1000 + (64 << 20)))
	for r in ra rb; do
		log=$out/delayline-$r.log
		wan_spawn "$r" "$log" ${WAN_DL_CPUS:+taskset -c "$WAN_DL_CPUS"} \
			"$WAN_DELAYLINE" --dev dl0 \
			--queues "$WAN_DL_QUEUES" --delay "${half_us}us" \
			--loss "$WAN_LOSS" --limit "$limit" --realtime \
			--mtu "$(nsx "$r" ip -o link show dev wan |
				 sed -n 's/.* mtu \([0-9]*\) .*/\1/p')" \
			--stats "$out/delayline-$r.stats" \
			--pid-file "$out/delayline-$r.pid"
		delayline_up "$log" "$WAN_LAST_PID" ||
			wan_die "$r: the delay line did not start"
		# its own pid: WAN_LAST_PID is the subshell that started it
		WAN_DL_PID[$r]=$(cat "$out/delayline-$r.pid")
		for k in all wan dl0; do
			nsx_sysctl "$r" "net.ipv4.conf.$k.rp_filter" 0
		done
		# early demux would find the router's own sockets on the first
		# pass and hand them the packet there, past the line
		nsx_sysctl "$r" net.ipv4.ip_early_demux 0
		# by protocol, so that the lookups of ARP (protocol 0) still
		# find the router's own addresses in the local table
		if ! nsx "$r" ip route replace default dev dl0 table 100 ||
		   ! nsx "$r" ip rule add pref 100 iif wan ipproto tcp lookup 100 ||
		   ! nsx "$r" ip rule add pref 100 iif wan ipproto udp lookup 100 ||
		   ! nsx "$r" ip rule add pref 100 iif wan ipproto icmp lookup 100 ||
		   ! nsx "$r" ip rule add pref 200 lookup local ||
		   ! nsx "$r" ip rule del pref 0 lookup local; then
			wan_die "$r: cannot route the WAN through the delay line"
		fi
		nsx "$r" nft -f - <<'NFT' || wan_die "$r: nft notrack for dl0"
table ip delayline {
 chain raw { type filter hook prerouting priority raw; policy accept;
  iifname "dl0" notrack
 }
}
NFT
	done
	WAN_DL=1
}

# wan_delayline_report OUT: each line's report now, in words (and whole
# in OUT/delayline-R.stats).
wan_delayline_report() {
	local out=$1 r pid f old

	for r in ra rb; do
		pid=${WAN_DL_PID[$r]:-}
		f=$out/delayline-$r.stats
		[ -n "$pid" ] || continue
		if kill -0 "$pid" 2>/dev/null; then
			old=$(cat "$f" 2>/dev/null)
			kill -USR1 "$pid"
			for _ in $(seq 100); do
				[ "$(cat "$f" 2>/dev/null)" != "$old" ] && break
				sleep 0.02
			done
		fi
		awk -v name="$r" -f "$WAN_HERE/../../../tools/delayline/summary.awk" "$f"
	done
}

# ------------------------------------------------------- TCP ceiling

# wan_ceiling STREAMS SECS OUT: plain TCP from a1 to b1 through rb's NAT
# (a forwarded port) and back, STREAMS connections each way, SECS seconds
# each direction; prints "A->B GBIT B->A GBIT" (Gbit/s of payload, the
# receiver's count).  iperf3 where it can start (a long WAN's slow start,
# 15 round trips, not counted), else Python sockets.
wan_ceiling() {
	local streams=$1 secs=$2 out=$3 dir rev srv dial
	local port=$((WAN_FWD[b1] + WAN_TOOL_PORT - WAN_PORT_LOW))

	if wan_has iperf3; then
		for dir in ab ba; do
			rev=()
			[ $dir = ba ] && rev=(-R)
			wan_spawn b1 "$out/iperf3-server-$dir.log" iperf3 -s -1 \
				-p "$WAN_TOOL_PORT"
			wan_wait_listen b1 "$WAN_TOOL_PORT" 10 || break
			nsx a1 iperf3 -c "$WAN_EXT_B" -p "$port" -P "$streams" \
				-t "$secs" -O "$((1 + WAN_RTT_MS * 15 / 1000))" \
				--json "${rev[@]}" \
				>"$out/iperf3-$dir.json" 2>&1 || break
			wait "$WAN_LAST_PID" 2>/dev/null
		done
		python3 - "$out/iperf3-ab.json" "$out/iperf3-ba.json" \
			2>/dev/null <<'PY' && return 0
import json, sys
print(" ".join("%.3f" % (json.load(open(p))["end"]["sum_received"]
                         ["bits_per_second"] / 1e9) for p in sys.argv[1:]))
PY
		kill "$WAN_LAST_PID" 2>/dev/null
		wan_log "iperf3 failed (see $out/iperf3-*); Python sockets instead"
	fi
	# the sender names "send": a1 for A->B, b1 for B->A; the receiver
	# prints the rate
	for dir in ab ba; do
		srv=()
		dial=()
		if [ $dir = ab ]; then dial=(send); else srv=(send); fi
		wan_spawn b1 "$out/ceiling-b1-$dir.txt" python3 \
			"$WAN_HERE/ceiling.py" serve "$WAN_TOOL_PORT" "$streams" \
			"$secs" "${srv[@]}"
		wan_wait_listen b1 "$WAN_TOOL_PORT" 10 || return 1
		nsx a1 python3 "$WAN_HERE/ceiling.py" dial "$WAN_EXT_B:$port" \
			"$streams" "$secs" "${dial[@]}" \
			>"$out/ceiling-a1-$dir.txt" 2>&1 || return 1
		wait "$WAN_LAST_PID" || return 1
	done
	echo "$(tail -n1 "$out/ceiling-b1-ab.txt") $(tail -n1 "$out/ceiling-a1-ba.txt")"
}

# ----------------------------------------------------------- faults

# wan_down_start / wan_down_end: the WAN link down (ra's end, so rb sees
# its carrier go), and up again with its routes.
wan_fault_down() {
	nsx ra ip link set wan down
}

wan_fault_down_end() {
	nsx ra ip link set wan up
	wan_routes
}

# wan_fault_nft KIND: every packet across the WAN dropped (KIND drop) or
# every TCP segment answered by a reset (KIND reset, a middlebox killing
# streams), at ra, forwarded or its own (the gateway's relay).
wan_fault_nft() {
	local verdict=drop

	[ "$1" = reset ] && verdict="meta l4proto tcp reject with tcp reset"
	nsx ra nft -f - <<NFT
table ip fault {
 chain forward { type filter hook forward priority -10; policy accept;
  iifname "wan" $verdict
  oifname "wan" $verdict
 }
 chain input { type filter hook input priority -10; policy accept;
  iifname "wan" $verdict
 }
 chain output { type filter hook output priority -10; policy accept;
  oifname "wan" $verdict
 }
}
NFT
}

wan_fault_nft_end() {
	nsx ra nft delete table ip fault
}

# wan_strict_conntrack: rb stops picking up streams it did not see start
# (nf_conntrack_tcp_loose = 0), as many firewalls do, so that a flush
# loses every stream through the NAT rather than being healed by the
# next segment.
wan_strict_conntrack() {
	nsx_sysctl rb net.netfilter.nf_conntrack_tcp_loose 0 ||
		wan_die "rb: cannot set nf_conntrack_tcp_loose"
}

wan_fault_flush() {
	nsx rb conntrack -F 2>&1
}
