#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): tcp-xdc at distance.  The pair
# topology of tests/netns-faults/wan-lib.sh, its WAN shaped to RATE each
# way with a delay line in each router (tests/netns/lib.sh), so that the
# round trip is RTT with no netem.  For every RTT, loss and congestion
# control, c sends to s:
#
#   iperf3 -P STREAMS              the path's TCP ceiling (the first
#                                  OMIT s, a long WAN's slow start, left
#                                  out);
#   meshperf, 64 MiB messages      through the plugin and tcp-xdc with
#                                  STREAMS streams at its defaults, 8
#                                  outstanding;
#   meshperf, NCCL's shape         1 MiB messages, 8 outstanding (a
#                                  channel's steps);
#   meshperf, the offer's shape    (SHAPES=offer) NCCL's steps with the
#                                  NCCL_BUFFSIZE the core offers NCCL
#                                  for this round trip declared in
#                                  xdc_rtt_ms, at RATE (docs/nccl.md):
#                                  8 outstanding of an eighth of it;
#
# each meshperf shape run twice, the first warming the connection up, the
# second measured (every byte verified), about SECS seconds of data at
# what iperf3 moved.  A row prints the Gbit/s of each
# and meshperf's ratios to iperf3, against the issue's bar (>= 0.9 at RTT
# 10, 100 and 200 ms and at 0.01% loss) and the goal (>= 0.95 everywhere);
# a row whose iperf3 stays below 0.9 of RATE says so (loss caps TCP
# itself, a busy host too).  With SWEEP, streams instead: every count of
# the list at SWEEP_RTT, iperf3 -P N against meshperf with N streams, and
# whether more streams ever moved less (by more than 5%).
#
#   tests/bench/xdc-distance.sh [BUILD_DIR]
#
# Environment: RTTS (ms, default 0,10,50,100,200), LOSSES (percent, default
# 0,0.01), CCS (default cubic,bbr), RATE (default 2gbit), STREAMS (default
# 8), SECS (seconds measured of each, default 8), SHAPES (of 64m,nccl,offer,
# default 64m,nccl), SWEEP (stream counts, e.g. 1,2,4,8,16,32), SWEEP_RTT (ms,
# default 20), QUEUES (delay line queues, default 2), TCP_XDC_ENV (more
# VAR=value words for meshperf), OUT (a folder for the table and logs).
#
# A congestion control other than the host's default may be kept from
# namespaces (net.ipv4.tcp_allowed_congestion_control); ALLOW_CC=1 adds
# it to that list for the run and puts the list back at the end, else its
# rows are left out with a note.  tcp_bbr may need `modprobe tcp_bbr`.
set -euo pipefail

build=$(realpath "${1:-build}")
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$src/tests/netns-faults/wan-lib.sh"
# shellcheck source=tests/bench/lib.sh
. "$src/tests/bench/lib.sh"

rtts=${RTTS:-0,10,50,100,200}
losses=${LOSSES:-0,0.01}
ccs=${CCS:-cubic,bbr}
rate=${RATE:-2gbit}
streams=${STREAMS:-8}
secs=${SECS:-8}
shapes=${SHAPES:-64m,nccl}
sweep=${SWEEP:-}
sweep_rtt=${SWEEP_RTT:-20}
DELAYLINE_QUEUES=${QUEUES:-2}
MESHPERF=$build/tools/meshperf/meshperf
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc
DELAYLINE=$build/tools/delayline/delayline
BOOT_PORT=47300

for f in "$MESHPERF" "$PLUGIN" "$MODULE_DIR/mesh-tcp-xdc.so" "$DELAYLINE"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 2; }
done
command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 2; }
netns_init
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
rate_bits=$(tc_rate_bits "$rate")
# meshperf's own watchdog well past any round trip here
WAN_MP_TIMEOUT=60

# ---- congestion control: what the namespaces may take
allowed_file=/proc/sys/net/ipv4/tcp_allowed_congestion_control
allowed0=$(cat "$allowed_file")
restore_cc() {
	[ "$(cat "$allowed_file")" = "$allowed0" ] ||
		echo "$allowed0" >"$allowed_file"
}
trap 'restore_cc; netns_cleanup' EXIT

wan_pair "$rate"
netns_long_tcp c s
default_cc=$(nsx c sysctl -n net.ipv4.tcp_congestion_control)
usable=()
IFS=, read -r -a want_cc <<<"$ccs"
for cc in "${want_cc[@]}"; do
	if ! netns_have_cc "$cc"; then
		echo "note: the kernel offers no $cc (modprobe tcp_$cc?); its rows are left out"
	elif netns_cc "$cc" c s; then
		usable+=("$cc")
	elif [ "${ALLOW_CC:-0}" = 1 ]; then
		echo "$(cat "$allowed_file") $cc" >"$allowed_file"
		echo "note: $cc added to $allowed_file for this run (was: $allowed0)"
		netns_cc "$cc" c s || { echo "note: $cc still refused; left out"; continue; }
		usable+=("$cc")
	else
		echo "note: namespaces may not take $cc here ($allowed_file: $allowed0); its rows are left out (ALLOW_CC=1 allows it for the run)"
	fi
done
[ ${#usable[@]} -gt 0 ] || { echo "no congestion control to run" >&2; exit 2; }
netns_cc "$default_cc" c s || true

# ---- one measurement each

# line RTT_MS LOSS: both delay lines (re)made for that round trip, each
# router holding half of it; their limit twice what RATE puts in flight.
line() {
	local half_us=$(($1 * 1000 / 2)) r

	DELAYLINE_LIMIT=$((rate_bits * $1 * 2 / 8 / 1000 + (64 << 20)))
	for r in rc rs; do
		netns_delayline_stop "$r" || true
		netns_delayline "$r" wan "${half_us}us" "$2"
	done
}

# conf N: a config of tcp-xdc at its defaults on the pair, N streams.
conf() {
	cat >"$NETNS_TMP/xdc.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lan"; streams = $1; };
CONF
}

# omit RTT_MS: seconds of slow start left out of iperf3's figure.
omit() {
	echo $((2 + $1 * 15 / 1000))
}

# offer_step RTT_MS: NCCL's step (an eighth of NCCL_BUFFSIZE) as the
# core's offer sizes it with xdc_rtt_ms = RTT_MS on a rail of RATE: the
# power of two from 8 MiB up past half the bandwidth-delay product, at
# most 64 MiB (nccl_buffsize, nccl_buffsize_max at their defaults).
offer_step() {
	local b=$((8 << 20)) half=$((rate_bits * $1 / 1000 / 8 / 2))

	while [ "$b" -lt "$half" ] && [ "$b" -lt $((64 << 20)) ]; do
		b=$((b * 2))
	done
	echo $((b / 8))
}

# mp TAG SHAPE N GBIT: Gbit/s of meshperf c -> s in SHAPE with N
# streams, the second of two runs of it (the first warms the streams up),
# each about SECS seconds at GBIT (iperf3's figure: a path that loss
# holds to a tenth of its rate gets a tenth of the bytes).
mp() {
	local tag=$1 shape=$2 n=$3 size win msg bytes
	local extra=()

	case $shape in
	64m) size=64M; win=8; msg=$((64 << 20)) ;;
	nccl) size=1M; win=8; msg=$((1 << 20)) ;;
	offer) msg=$(offer_step "$row_rtt"); size=$((msg >> 10))K; win=8 ;;
	*) echo "unknown shape $shape" >&2; exit 2 ;;
	esac
	bytes=$(awk -v g="$4" -v s="$secs" -v m="$msg" 'BEGIN {
		if (g !~ /^[0-9.]+$/ || g == 0) g = 0.1
		printf "%d\n", int(g * 1e9 / 8 * s / m + 1) * m }')
	[ "$bytes" -ge $((8 * msg)) ] || bytes=$((8 * msg))
	conf "$n"
	# shellcheck disable=SC2206 # words on purpose
	extra=(${TCP_XDC_ENV:-})
	WAN_ENV=("${extra[@]}")
	wan_start s c "$tag" "$BOOT_PORT" "$NETNS_TMP/xdc.conf" --json \
		--sizes "$size,$size" -w "$win" --mem "$((win * msg))" \
		--budget "$bytes" --no-latency
	wan_end "$WAN_CPID" 600
	local crc=$WAN_RC
	wan_end "$WAN_SPID" 30
	cp "$NETNS_TMP/$tag".* "$out/" 2>/dev/null || true
	if [ "$crc" -ne 0 ] || [ "$WAN_RC" -ne 0 ] ||
	   ! grep -q '"event":"summary".*"status":"ok"' "$NETNS_TMP/$tag.client"; then
		echo "$tag: meshperf failed (client $crc, server $WAN_RC; logs in $out)" >&2
		echo "fail"
		return 0
	fi
	bench_figure "$NETNS_TMP/$tag.client" gbits_per_s
}

# ip3 TAG N RTT_MS: Gbit/s of iperf3 -P N c -> s.
ip3() {
	local m

	m=$(wan_iperf3 "$1" "$2" "$secs" "$(omit "$3")")
	awk -v m="$m" 'BEGIN { printf "%.3f\n", m / 1000 }'
}

# ratio A B: A/B with three decimals, "-" where either is not a number.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "-"
		else printf "%.3f\n", a / b }'
}

# verdict RATIO MIN: ok, MISS or -.
verdict() {
	awk -v r="$1" -v m="$2" 'BEGIN {
		if (r !~ /^[0-9.]+$/) print "-"; else print (r >= m ? "ok" : "MISS") }'
}

IFS=, read -r -a shape_list <<<"$shapes"
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); WAN $rate each way, MTU $XDC_MTU; delay line: $DELAYLINE_QUEUES queues a router$([ "$DELAYLINE_RT" = 1 ] && echo ", SCHED_FIFO")"
echo "each: iperf3 -P N for $secs s after a ramp; meshperf tcp-xdc N streams, ${shapes} (8 outstanding), the second of two runs; results in $out"

# ---- the streams sweep
if [ -n "$sweep" ]; then
	cc=${usable[0]}
	netns_cc "$cc" c s
	line "$sweep_rtt" 0
	row_rtt=$sweep_rtt
	printf '%-7s %-6s %-8s' streams cc iperf3
	for sh in "${shape_list[@]}"; do printf ' %-9s %-7s' "$sh" ratio; done
	echo
	declare -A prev=()
	fewer=0
	IFS=, read -r -a counts <<<"$sweep"
	for n in "${counts[@]}"; do
		i=$(ip3 "sweep-ip3-$n" "$n" "$sweep_rtt")
		row=$(printf '%-7s %-6s %-8s' "$n" "$cc" "$i")
		notes=
		for sh in "${shape_list[@]}"; do
			m=$(mp "sweep-$sh-$n" "$sh" "$n" "$i")
			row+=$(printf ' %-9s %-7s' "$m" "$(ratio "$m" "$i")")
			if [ -n "${prev[$sh]:-}" ] &&
			   [ "$(ratio "$m" "${prev[$sh]}")" != - ] &&
			   awk -v r="$(ratio "$m" "${prev[$sh]}")" 'BEGIN { exit !(r < 0.95) }'; then
				notes+=" ($sh: less than with fewer streams)"
				fewer=1
			fi
			prev[$sh]=$m
		done
		echo "$row$notes" | tee -a "$out/sweep.txt"
	done
	netns_delayline_summary rs
	if [ $fewer -eq 0 ]; then
		echo "more streams never moved less (RTT $sweep_rtt ms, $cc): ok"
	else
		echo "more streams never moved less (RTT $sweep_rtt ms, $cc): MISS"
	fi
	exit 0
fi

# ---- the rows
IFS=, read -r -a rtt_list <<<"$rtts"
IFS=, read -r -a loss_list <<<"$losses"
hdr=$(printf '%-6s %-6s %-6s %-8s' rtt_ms loss% cc iperf3)
for sh in "${shape_list[@]}"; do hdr+=$(printf ' %-9s %-7s' "$sh" ratio); done
hdr+="  bar 0.9 / goal 0.95"
echo "$hdr" | tee "$out/table.txt"
for rtt in "${rtt_list[@]}"; do
	for loss in "${loss_list[@]}"; do
		line "$rtt" "$loss"
		row_rtt=$rtt
		for cc in "${usable[@]}"; do
			netns_cc "$cc" c s
			tag=r$rtt-l$loss-$cc
			i=$(ip3 "$tag-ip3" "$streams" "$rtt")
			row=$(printf '%-6s %-6s %-6s %-8s' "$rtt" "$loss" "$cc" "$i")
			bar=no
			case $rtt in 10|100|200) bar=yes ;; esac
			[ "$loss" = 0.01 ] && bar=yes
			marks=
			for sh in "${shape_list[@]}"; do
				m=$(mp "$tag-$sh" "$sh" "$streams" "$i")
				r=$(ratio "$m" "$i")
				row+=$(printf ' %-9s %-7s' "$m" "$r")
				if [ $bar = yes ]; then
					marks+=" $sh $(verdict "$r" 0.9)/$(verdict "$r" 0.95)"
				else
					marks+=" $sh -/$(verdict "$r" 0.95)"
				fi
			done
			# loss caps TCP itself (CUBIC's 8 streams at 0.01% and
			# 10 ms moved 1.28 Gbit/s on a 2-core host); so does load
			awk -v i="$i" -v r="$rate_bits" 'BEGIN { exit !(i * 1e9 < 0.9 * r) }' &&
				marks+=" (iperf3 below 0.9 of $rate)"
			echo "$row $marks" | tee -a "$out/table.txt"
		done
		netns_delayline_summary rs | tee -a "$out/lines.txt"
	done
done
