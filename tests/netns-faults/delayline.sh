#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The long WAN of the namespace tiers (tools/delayline, tests/netns/lib.sh)
# checked as a path: the pair topology (wan-lib.sh) shaped to RATE with a
# delay line in each router, RTT_MS round trip, no netem.
#
#   rate    iperf3 with 4 streams reaches 0.9 of the shaped rate, and the
#           line that carried the data held at least half the bytes the
#           rate puts in flight over its delay, dropping none;
#   rtt     TCP connects take the configured round trip: none shorter,
#           the median within 10% (+ 1 ms);
#   loss    both lines again with 1% loss: UDP at a fixed rate loses about
#           1% in the line (within 4 standard deviations of the binomial
#           over at least 4000 packets), and what iperf3 counts lost is
#           what the line dropped plus what the receiving socket did;
#           TCP over it keeps moving, with offloaded packets cut where a
#           segment of theirs was lost and no checksum error at the
#           receiver.
#
# usage: delayline.sh DELAYLINE
# Needs root, network namespaces and iperf3; exits 77 (skip) without.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/../netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$here/wan-lib.sh"

[ $# -eq 1 ] || { echo "usage: $0 DELAYLINE" >&2; exit 2; }
DELAYLINE=$1
RATE_MBIT=300
RTT_MS=50
LOSS_PCT=1

netns_init
command -v iperf3 >/dev/null || netns_skip "iperf3 is not installed"
[ -x "$DELAYLINE" ] || netns_die "no delay line at $DELAYLINE"

WAN_DELAY=$((RTT_MS / 2))ms
wan_pair "${RATE_MBIT}mbit"
netns_long_tcp c s
echo "TCP: $(nsx c sysctl -n net.ipv4.tcp_congestion_control), up to $NETNS_TCP_MAX bytes a socket"

# key NS KEY: KEY of the line in router NS, reported now
key() {
	netns_delayline_key "$(netns_delayline_stats "$1")" "$2"
}

# stop_line NS: the line of router NS ended well
stop_line() {
	local rc=0

	netns_delayline_stop "$1" || rc=$?
	[ "$rc" -eq 0 ] || {
		cat "$NETNS_TMP/delayline-$1.log" >&2
		netns_die "$1: the delay line ended with status $rc"
	}
}

# ---- rate
mbit=$(wan_iperf3 rate 4 5 2)
netns_delayline_summary rs
netns_delayline_summary rc
echo "rate: iperf3 -P 4 moved $mbit Mbit/s over ${RATE_MBIT} Mbit/s at RTT $RTT_MS ms"
awk -v m="$mbit" -v r="$RATE_MBIT" 'BEGIN { exit !(m >= 0.9 * r) }' ||
	netns_die "rate: iperf3 reached $mbit Mbit/s, less than 0.9 of $RATE_MBIT"
held=$(key rs max_held_bytes)
# half of what the rate puts in flight over one line's delay (RTT / 2)
want=$((RATE_MBIT * 1000000 * RTT_MS / 8 / 2 / 1000 / 2))
[ "$held" -ge "$want" ] ||
	netns_die "rate: rs's line held at most $held bytes, less than $want"
for r in rc rs; do
	for k in over_pkts dev_drops bad_pkts write_errs; do
		[ "$(key "$r" "$k")" -eq 0 ] ||
			netns_die "rate: $r's line counted $k=$(key "$r" "$k")"
	done
done
echo "PASS rate: $mbit Mbit/s; rs held up to $held bytes (at least $want)"

# ---- round trip
netns_spawn s "$NETNS_TMP/listener" python3 -c '
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 5301))
s.listen(64)
while True:
    c, _ = s.accept()
    c.close()'
netns_wait_listen s 5301 10 || netns_die "rtt: the listener did not start"
read -r rmin rmed rmax < <(nsx c python3 -c '
import socket, sys, time
ts = []
for _ in range(20):
    s = socket.socket()
    t = time.monotonic()
    s.connect((sys.argv[1], 5301))
    ts.append((time.monotonic() - t) * 1000)
    s.close()
ts.sort()
print("%.2f %.2f %.2f" % (ts[0], ts[10], ts[-1]))' "${WAN_IP[s]}")
echo "rtt: 20 TCP connects took $rmin ms at least, $rmed median, $rmax at most; configured $RTT_MS ms"
awk -v a="$rmin" -v m="$rmed" -v r="$RTT_MS" \
	'BEGIN { exit !(a >= r - 0.05 && m <= 1.1 * r + 1) }' ||
	netns_die "rtt: the round trip is not $RTT_MS ms"
echo "PASS rtt"

# ---- loss
for r in rc rs; do
	stop_line "$r"
	netns_delayline "$r" wan "$WAN_DELAY" "$LOSS_PCT"
done
rcvbuf0=$(nsx s nstat -az UdpRcvbufErrors | awk '$1 == "UdpRcvbufErrors" { print $2 }')
netns_spawn s "$NETNS_TMP/udp.server" iperf3 -s -1 -p 5202
pid=$NETNS_LAST_PID
netns_wait_listen s 5202 10 || netns_die "loss: iperf3 -s did not start"
timeout 40 ip netns exec "$(ns c)" iperf3 -c "${WAN_IP[s]}" -p 5202 -u \
	-b 60M -l 1400 -t 3 -w 4M -J >"$NETNS_TMP/udp.json" ||
	netns_die "loss: iperf3 -u failed"
netns_wait "$pid" 10 || true
rcvbuf=$(($(nsx s nstat -az UdpRcvbufErrors |
	awk '$1 == "UdpRcvbufErrors" { print $2 }') - rcvbuf0))
read -r sent ilost < <(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))["end"]["sum"]
print(d["packets"], d["lost_packets"])' "$NETNS_TMP/udp.json")
line=$(netns_delayline_stats rs)
wire=$(netns_delayline_key "$line" in_wire)
dropped=$(netns_delayline_key "$line" loss_wire)
netns_delayline_summary rs
echo "loss: iperf3 sent $sent datagrams and counts $ilost lost; rs's line dropped $dropped of $wire packets, the receiving socket $rcvbuf"
# within 4 standard deviations of the binomial, over enough packets for
# that to be tight (a busy host may send fewer than asked)
awk -v d="$dropped" -v w="$wire" -v p="$LOSS_PCT" 'BEGIN { p /= 100
	e = d - p * w; if (e < 0) e = -e
	exit !(w >= 4000 && e <= 4 * sqrt(w * p * (1 - p)) + 1) }' ||
	netns_die "loss: the line dropped $dropped of $wire, not about $LOSS_PCT%"
awk -v i="$ilost" -v d="$dropped" -v b="$rcvbuf" \
	'BEGIN { e = i - d - b; if (e < 0) e = -e; exit !(e <= 5 + 0.03 * i) }' ||
	netns_die "loss: iperf3 lost $ilost, the line dropped $dropped and the socket $rcvbuf"
echo "PASS loss: UDP"

split0=$(key rs split_pkts)
csum0=$(nsx s nstat -az TcpInCsumErrors | awk '$1 == "TcpInCsumErrors" { print $2 }')
mbit=$(wan_iperf3 lossy 4 3 0)
split=$(($(key rs split_pkts) - split0))
csum=$(($(nsx s nstat -az TcpInCsumErrors |
	awk '$1 == "TcpInCsumErrors" { print $2 }') - csum0))
netns_delayline_summary rs
echo "loss: TCP moved $mbit Mbit/s at $LOSS_PCT% loss; rs cut $split offloaded packets; $csum checksum errors at s"
awk -v m="$mbit" 'BEGIN { exit !(m > 0.5) }' ||
	netns_die "loss: TCP did not move over the lossy line"
[ "$split" -gt 0 ] || netns_die "loss: no offloaded packet was cut"
[ "$csum" -eq 0 ] || netns_die "loss: $csum TCP checksum errors at the receiver"
echo "PASS loss: TCP"
stop_line rc
stop_line rs
