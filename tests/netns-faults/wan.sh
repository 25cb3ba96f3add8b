#!/bin/bash
# SPDX-License-Identifier: MIT
#
# WAN faults against tcp-xdc's outage budget (outage_ms), between network
# namespaces, over verified meshperf transfers (tests/netns-faults/
# wan-lib.sh).  timeout_ms is 3000 and outage_ms 10000 throughout, so that
# every case stays within seconds.  Mid-transfer, one fault:
#
# must survive (both sides exit 0, every byte verified, no WARN, and each
# side logs an INFO line with "resumed" for the outage):
#   linkdown        the WAN link down for 5 s, then up;
#   linkdown-long   down for 80% of outage_ms;
#   reset           nftables in the client's router answers every segment
#                   between the two with a TCP reset, both ways, for 1 s;
#   conntrack       the two-DC NAT topology (tests/netns/lib.sh): the
#                   server's router flushes its conntrack table, and, as
#                   many firewalls, picks up no stream it did not see start,
#                   so every stream through it is lost (needs `conntrack`);
#                   the budget comes from the environment here
#                   (NCCL_MESH_TCP_XDC_OUTAGE_MS);
#   relay-restart   the relay topology (tests/netns/relay.sh): the client's
#                   gateway's meshrelay is killed (SIGKILL) and restarted;
#   relay-failover  the same with a second gateway relay in the client's DC:
#                   the relay carrying the connection is killed for good and
#                   the route moves to the other one;
#   stored          the link down for longer than timeout_ms while the
#                   server holds chunks stored before their receives
#                   (window set, receives 4 s late): every byte arrives;
#   close-kept      sends that completed as copies the peer has not yet
#                   acknowledged (window set on the client; the server 4 s
#                   late, with 64 KiB receive buffers and no window, so
#                   that it stores nothing early), the send comms closed at once
#                   (--close-early), and the link down right after the close
#                   for longer than timeout_ms: the closed comm resumes and
#                   the server still gets every byte;
# must fail:
#   peer-killed     the server process is killed (SIGKILL): the client fails
#                   within timeout_ms (+ 2 s), naming the server;
#   past-budget     the link stays down for longer than outage_ms: both
#                   fail, saying how long the peer was out ("out for N ms",
#                   N at least outage_ms), within outage_ms + timeout_ms
#                   (+ 4 s) of the link going down, while it is still down.
#
# usage: wan.sh MESHPERF PLUGIN BUILD_DIR CASE
# Needs root and network namespaces; exits 77 (skip) without them, and
# where a case's tool (nft, conntrack) or the relay's build is missing.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/../netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$here/wan-lib.sh"

[ $# -eq 4 ] || { echo "usage: $0 MESHPERF PLUGIN BUILD_DIR CASE" >&2; exit 2; }
build=$3
case_name=$4
netns_scenario "$1" "$2" "$build/modules/tcp-xdc"
MESHRELAY=$build/tools/meshrelay/meshrelay

SLACK_MS=2000	# a killed peer: scheduling, a reconnect's round trips
# An outage past the budget: as SLACK_MS, and noticing the outage may take
# timeout_ms and more on a busy host (faults.sh allows 4 s for that)
BUDGET_SLACK_MS=4000
BOOT_PORT=47000
# A verified transfer both ways of about 2 s at WAN_RATE: the fault comes
# after its first 128 MiB, the rest shows that the data flows again.
xfer=(--sizes 16M --budget 512M --mem 128M --no-latency --bidir)
MID_BYTES=$((128 << 20))

# pair_start: the pair topology, its config, the transfer under way.
pair_start() {
	wan_pair "$WAN_RATE"
	wan_pair_conf "$NETNS_TMP/pair.conf"
	wan_start s c run "$BOOT_PORT" "$NETNS_TMP/pair.conf" "${xfer[@]}"
	wan_wait_rx s lan "$MID_BYTES" 30 run
}

# pair_survived T_BACK: both sides done and well, one outage each.
pair_survived() {
	local back=$1 crc src

	wan_end "$WAN_CPID" 90
	crc=$WAN_RC
	wan_end "$WAN_SPID" 20
	src=$WAN_RC
	wan_check_ok run 1 "$crc" "$src"
	echo "done $(($(wan_now_ms) - back)) ms after the fault ended"
}

# linkdown MS: the WAN link down for MS, then up.
case_linkdown() {
	local t0 back

	pair_start
	read -r t0 back < <(wan_down_for "$1")
	echo "link down for $((back - t0)) ms (outage_ms $WAN_OUTAGE_MS, timeout_ms $WAN_TIMEOUT_MS)"
	pair_survived "$back"
}

case_reset() {
	local t0 back

	wan_nft_works
	pair_start
	read -r t0 back < <(wan_reset_for rc 1000)
	echo "every segment reset for $((back - t0)) ms (timeout_ms $WAN_TIMEOUT_MS)"
	pair_survived "$back"
}

case_conntrack() {
	local t0 back crc src

	command -v conntrack >/dev/null ||
		netns_skip "conntrack (package conntrack) is not installed"
	netns_init
	# 1 Gb/s: the transfer below lasts about 5 s
	XDC_RATE=1gbit
	xdc_topology
	wan_strict_conntrack ra
	wan_strict_conntrack rb
	nsx rb conntrack -L >/dev/null 2>&1 ||
		netns_skip "the conntrack tool cannot reach the kernel's table here"
	WAN_ENV=("NCCL_MESH_TCP_XDC_TIMEOUT_MS=$WAN_TIMEOUT_MS"
		 "NCCL_MESH_TCP_XDC_OUTAGE_MS=$WAN_OUTAGE_MS")
	wan_start b1 a1 run "$BOOT_PORT" "$here/../netns/nat.conf" \
		--sizes 16M --budget 256M --mem 128M --no-latency --bidir
	wan_wait_rx b1 lan-b1 $((64 << 20)) 30 run
	t0=$(wan_now_ms)
	wan_conntrack_flush rb || netns_die "conntrack -F failed in rb"
	back=$(wan_now_ms)
	echo "rb's conntrack table flushed in $((back - t0)) ms"
	wan_end "$WAN_CPID" 90
	crc=$WAN_RC
	wan_end "$WAN_SPID" 20
	src=$WAN_RC
	wan_check_ok run 1 "$crc" "$src"
	echo "done $(($(wan_now_ms) - back)) ms after the flush"
}

# relay_setup CONF: the relay topology, a key, meshrelay on the gateways
# (g0, g1 and any other named) with the test's budget.
relay_setup() {
	local conf=$1 g

	shift
	[ -f "$build/modules/relay/mesh-relay.so" ] ||
		netns_skip "mesh-relay.so is not built"
	[ -x "$MESHRELAY" ] || netns_skip "meshrelay is not built"
	MODULE_DIR=$build/modules/tcp-xdc:$build/modules/relay
	CONF=$conf
	netns_init
	relay_topology ""
	umask 077
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key"
	# the budget of the relayed connections (relay's outage_ms) and of
	# the tcp-xdc legs they are made of
	XDC_ENV=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key"
		 "NCCL_MESH_RELAY_OUTAGE_MS=$WAN_OUTAGE_MS"
		 "NCCL_MESH_TCP_XDC_TIMEOUT_MS=$WAN_TIMEOUT_MS"
		 "NCCL_MESH_TCP_XDC_OUTAGE_MS=$WAN_OUTAGE_MS")
	WAN_ENV=("${XDC_ENV[@]}" NCCL_DEBUG=INFO)
	WAN_SERVER_ENV=(NCCL_MESH_RELAY_NAME=b0)
	WAN_CLIENT_ENV=(NCCL_MESH_RELAY_NAME=a0)
	"${@:-true}"
	for g in g0 g1 ${RELAY_MORE:-}; do
		relay_meshrelay_start "$g"
	done
}

relay_logs() {
	ls "$NETNS_TMP"/meshrelay-*
}

# relay_kill G: meshrelay on gateway G (the only process in G) killed.
relay_kill() {
	local pid

	for pid in $(ip netns pids "$(ns "$1")"); do
		kill -KILL "$pid"
	done
	# its log stays for the report; the restart writes a new one
	mv "$NETNS_TMP/meshrelay-$1" "$NETNS_TMP/meshrelay-$1.killed"
}

# relay_run_check TAG RC_CLIENT RC_SERVER: survived, through the relays.
relay_run_check() {
	local logs

	mapfile -t logs < <(relay_logs)
	wan_check_ok "$1" 1 "$2" "$3" "${logs[@]}"
}

relay_xfer=(--sizes 16M --budget 512M --mem 128M --no-latency)

case_relay_restart() {
	local t0 back crc src

	relay_setup "$here/../netns/relay.conf"
	wan_start b0 a0 run "$BOOT_PORT" "$CONF" "${relay_xfer[@]}"
	wan_wait_rx b0 lan-b0 "$MID_BYTES" 30 run
	t0=$(wan_now_ms)
	relay_kill g0
	sleep 1
	relay_meshrelay_start g0
	back=$(wan_now_ms)
	echo "meshrelay on g0 killed and serving again after $((back - t0)) ms"
	wan_end "$WAN_CPID" 90
	crc=$WAN_RC
	wan_end "$WAN_SPID" 20
	src=$WAN_RC
	relay_run_check run "$crc" "$src"
	echo "done $(($(wan_now_ms) - back)) ms after g0 served again"
}

# A second gateway in DC 0, g2: on g0's LAN bridge as 10.0.0.2, with a
# link of its own to g1 (192.168.101.0/24), which g1 serves its relay port
# on directly.  DC 0's hosts lose their default route, so that tcp-xdc
# claims nothing in DC 1 and relay picks among the relays they reach.
relay_add_g2() {
	netns_add g2
	netns_veth g2 lan-g2 g0 p-g2
	nsx g0 ip link set p-g2 master br0
	netns_addr g2 lan-g2 10.0.0.2/24
	netns_veth g2 ext g1 ext2
	netns_addr g2 ext 192.168.101.1/24
	netns_addr g1 ext2 192.168.101.2/24
	nsx a0 ip route del default
	nsx a1 ip route del default
	RELAY_MORE=g2
}

case_relay_failover() {
	local t0 via other crc src re

	netns_lsan_no_tls
	relay_setup "$here/relay-failover.conf" relay_add_g2
	wan_start b0 a0 run "$BOOT_PORT" "$CONF" "${relay_xfer[@]}"
	wan_wait_rx b0 lan-b0 "$MID_BYTES" 30 run
	# the gateway the connection took (either: relays take turns)
	via=$(grep -o 'relay: send comm [0-9]*.*: via g[02] ' \
		"$NETNS_TMP/run.client" | head -n1 | grep -o 'g[02] $' || true)
	via=${via% }
	case $via in
	g0) other=g2 ;;
	g2) other=g0 ;;
	*) wan_fail run "the client's log names no route via g0 or g2" ;;
	esac
	t0=$(wan_now_ms)
	relay_kill "$via"
	echo "meshrelay on $via killed for good; $other is left"
	wan_end "$WAN_CPID" 90
	crc=$WAN_RC
	wan_end "$WAN_SPID" 20
	src=$WAN_RC
	relay_run_check run "$crc" "$src"
	# the resumed connection names its new route, through the other one
	re="INFO.*resumed.*via $other "
	grep -Eq "$re" "$NETNS_TMP/run.client" ||
		wan_fail run "the client's resumed line names no route via $other" \
			"$(relay_logs)"
	echo "done $(($(wan_now_ms) - t0)) ms after $via was killed, via $other"
}

# A close that finds completed sends still kept: a receiver 4 s late with
# small socket buffers holds the bytes back in the sender's sockets (large
# ones, set, with room for all 2 MiB on any four streams: 1 MiB each
# unsent), so the client's sends complete as copies (window set) that are
# not even on the wire yet, and it closes; the link goes down at once, for longer than
# timeout_ms, after which a closed stream that only lingered would give
# up on what it holds: only the comm, resumed, can deliver it.
case_close_kept() {
	local t0 back line deadline

	wan_pair
	wan_pair_conf "$NETNS_TMP/pair.conf" 'window = "32M";' 'rcvbuf = "64K";' \
		'sndbuf = "4M";'
	# the server's without window: it stores no early chunks (a
	# receiver's window), so its small buffers hold the sender back
	wan_pair_conf "$NETNS_TMP/server.conf" 'rcvbuf = "64K";' 'sndbuf = "4M";'
	wan_meshperf s server run "$NETNS_TMP/server.conf" --server \
		--port "$BOOT_PORT" --sizes 1M --budget 2M --no-latency \
		--recv-delay 4
	WAN_SPID=$NETNS_LAST_PID
	netns_wait_listen s "$BOOT_PORT" 10 ||
		netns_die "run: meshperf server in s did not listen"
	netns_tcp_bridge c "$BOOT_PORT" s "$BOOT_PORT"
	wan_meshperf c client run "$NETNS_TMP/pair.conf" --client 127.0.0.1 \
		--port "$BOOT_PORT" --sizes 1M --budget 2M --no-latency \
		--close-early
	WAN_CPID=$NETNS_LAST_PID
	deadline=$((SECONDS + 60))
	until line=$(grep -m1 'closed with about [0-9]* KiB of completed sends' \
			"$NETNS_TMP/run.client"); do
		kill -0 "$WAN_CPID" 2>/dev/null ||
			wan_fail run "the client ended without closing with copies kept"
		[ "$SECONDS" -lt "$deadline" ] ||
			wan_fail run "no close with copies kept within 60 s"
		sleep 0.02
	done
	read -r t0 back < <(wan_down_for $((WAN_TIMEOUT_MS + 2000)))
	echo "${line#*tcp-xdc: }"
	echo "link down for $((back - t0)) ms right after the close (timeout_ms $WAN_TIMEOUT_MS)"
	pair_survived "$back"
	grep -q 'send comm .*resumed; resent [1-9]' "$NETNS_TMP/run.client" ||
		wan_fail run "the closed comm wrote no copy again after the outage"
}

# Chunks stored early when the path breaks: the server (window set, so
# that it reads chunks that come before their receive into its rings)
# posts its receives 4 s late, so 128 MiB sent meet full rings and parked
# streams (and socket buffers too small to take the rest); once its metrics show chunks stored, the link goes down for
# longer than timeout_ms, and the receives come during the outage.  The
# new sockets' counts take the stored chunks as received: every byte
# arrives once, verified, and both sides resume.
case_stored() {
	local t0 back deadline

	wan_pair "$WAN_RATE"
	# small socket buffers: what the rings cannot take stays with the
	# client, so that it has data in flight when the link goes down
	wan_pair_conf "$NETNS_TMP/pair.conf" 'window = "32M";' 'rcvbuf = "256K";'
	WAN_SERVER_ENV=("NCCL_MESH_METRICS_FILE=$NETNS_TMP/server.prom"
			NCCL_MESH_METRICS_INTERVAL_MS=100)
	wan_start s c run "$BOOT_PORT" "$NETNS_TMP/pair.conf" --sizes 1M \
		--budget 128M --no-latency --recv-delay 4
	deadline=$((SECONDS + 20))
	until grep -Eq '^nccl_mesh_stored_bytes\{.*\} [1-9]' \
			"$NETNS_TMP/server.prom" 2>/dev/null; do
		[ "$SECONDS" -lt "$deadline" ] ||
			wan_fail run "the server stored no chunk within 20 s"
		sleep 0.05
	done
	grep -m1 -o 'stores up to [0-9]* KiB a stream' "$NETNS_TMP/run.server" ||
		wan_fail run "the server's comm says it stores nothing"
	read -r t0 back < <(wan_down_for $((WAN_TIMEOUT_MS + 2000)))
	echo "link down for $((back - t0)) ms with chunks stored (timeout_ms $WAN_TIMEOUT_MS)"
	pair_survived "$back"
}

case_peer_killed() {
	local t0

	pair_start
	t0=$(wan_now_ms)
	kill -KILL "$WAN_SPID"
	wan_end "$WAN_CPID" 60
	wan_check_fail run client "$WAN_RC" "$t0" "$WAN_END" \
		$((WAN_TIMEOUT_MS + SLACK_MS)) \
		"WARN.*(send comm [0-9]+ to|recv comm [0-9]+ from) (\\[::ffff:)?${WAN_IP[s]//./\\.}\\]?:[0-9]+"
}

case_past_budget() {
	local t0 down_ms limit side pid out n

	pair_start
	down_ms=$((WAN_OUTAGE_MS + WAN_TIMEOUT_MS + 6000))
	limit=$((WAN_OUTAGE_MS + WAN_TIMEOUT_MS + BUDGET_SLACK_MS))
	t0=$(wan_now_ms)
	wan_down
	for side in client server; do
		if [ "$side" = client ]; then pid=$WAN_CPID; else pid=$WAN_SPID; fi
		wan_end "$pid" $(((down_ms + 999) / 1000))
		wan_check_fail run "$side" "$WAN_RC" "$t0" "$WAN_END" "$limit" \
			"WARN.*out for [0-9]+ ms"
		# the failure's own line: an outage resumed before may precede it
		out=$(grep -o 'out for [0-9]* ms, past' "$NETNS_TMP/run.$side" |
			head -n1)
		out=${out%, past}
		n=${out//[^0-9]/}
		[ "$n" -ge "$WAN_OUTAGE_MS" ] ||
			wan_fail run "the $side says '$out': less than outage_ms $WAN_OUTAGE_MS"
		[ "$n" -le $((WAN_END - t0 + 1000)) ] ||
			wan_fail run "the $side says '$out', but the link went down $((WAN_END - t0)) ms before it ended"
	done
	[ $(($(wan_now_ms) - t0)) -lt "$down_ms" ] ||
		netns_die "the link came back before both sides failed"
	wan_up
}

case $case_name in
linkdown | linkdown-long | reset | close-kept | stored | peer-killed | past-budget)
	netns_init ;;
esac
case $case_name in
linkdown) case_linkdown 5000 ;;
linkdown-long) case_linkdown $((WAN_OUTAGE_MS * 8 / 10)) ;;
reset) case_reset ;;
close-kept) case_close_kept ;;
stored) case_stored ;;
conntrack) case_conntrack ;;
relay-restart) case_relay_restart ;;
relay-failover) case_relay_failover ;;
peer-killed) case_peer_killed ;;
past-budget) case_past_budget ;;
*) netns_die "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
