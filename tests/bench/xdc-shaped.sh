#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): the shaped inter-DC link of the netns
# NAT scenario (tests/netns/lib.sh), b1 sending to a1 through both NATs.
# iperf3 with STREAMS streams against meshperf through the plugin and
# tcp-xdc with STREAMS streams and MSG_MIB (default 4) MiB messages, alternating, median of
# ROUNDS each; then meshperf with authentication on against off.  Prints
# the shaped rate, the TCP goodput it allows, both figures and the ratios.
#
#   tests/bench/xdc-shaped.sh [BUILD_DIR] [STREAMS] [ROUNDS]
#
# Environment: XDC_RATE (tc rate of the link, default 200mbit), XDC_DELAY
# (one-way delay, e.g. 10ms: netem's, else the delay line's, with XDC_LOSS
# percent of loss), XDC_MTU (default 1500), SECS (seconds per run,
# default 8), THREADS (tcp-xdc threads, default STREAMS), TCP_XDC_ENV (more
# VAR=value words for meshperf, e.g. "NCCL_MESH_TCP_XDC_SNDBUF=8M").
set -euo pipefail

build=$(realpath "${1:-build}")
streams=${2:-8}
rounds=${3:-5}
secs=${SECS:-8}
threads=${THREADS:-$streams}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"

MESHPERF=$build/tools/meshperf/meshperf
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc
CONF=$src/tests/netns/nat.conf

command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 2; }
[ -x "$MESHPERF" ] || { echo "no $MESHPERF: build first" >&2; exit 2; }
netns_init
# without netem, the delay line of tests/netns/lib.sh holds XDC_DELAY
if [ -n "$XDC_DELAY" ] && ! netns_have_netem; then
	DELAYLINE=$build/tools/delayline/delayline
	[ -x "$DELAYLINE" ] || { echo "no $DELAYLINE: build first" >&2; exit 2; }
fi
xdc_topology
# a long link: autotuning may grow the hosts' buffers to its product
[ -z "$XDC_DELAY" ] || netns_long_tcp a1 a2 b1 b2

rate_bits=$(tc_rate_bits "$XDC_RATE")
# TCP payload per frame: MTU less IPv4 and TCP headers with timestamps
# (52 B); tbf counts the Ethernet header (14 B) as well
ceiling=$(python3 -c "print('%.1f' % ($rate_bits * ($XDC_MTU - 52) /
	($XDC_MTU + 14) / 1e6))")
# about SECS seconds of data at the shaped rate, in whole messages of
# MSG_MIB; many messages in flight, so the first and last of them weigh
# little, as in iperf3's steady stream
msg_mib=${MSG_MIB:-4}
msgs=$(((rate_bits * secs / 8 + (msg_mib << 19)) / (msg_mib << 20)))
[ "$msgs" -ge 8 ] || msgs=8
budget=$((msgs * msg_mib))M

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# Mbit/s of one iperf3 run from b1 to a1 (port 40005, outside 50005)
iperf3_once() {
	local pid

	netns_spawn a1 "$NETNS_TMP/iperf3.server" iperf3 -s -1 -p 40005
	pid=$NETNS_LAST_PID
	netns_wait_listen a1 40005 10 || netns_die "iperf3 -s did not start"
	nsx b1 iperf3 -c 192.0.2.1 -p 50005 -P "$streams" -t "$secs" -J \
		>"$NETNS_TMP/iperf.json"
	netns_wait "$pid" 10 || true
	python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); print("%.1f" % (d["end"]["sum_received"]["bits_per_second"]/1e6))' \
		"$NETNS_TMP/iperf.json"
}

# Mbit/s of one meshperf run from b1 to a1: MSG_MIB messages; extra
# environment words as arguments
meshperf_once() {
	XDC_ENV=("NCCL_MESH_TCP_XDC_STREAMS=$streams"
		 "NCCL_MESH_TCP_XDC_THREADS=$threads" "$@")
	# shellcheck disable=SC2206 # words on purpose
	XDC_ENV+=(${TCP_XDC_ENV:-})
	xdc_meshperf a1 b1 mp 120 --json --sizes "${msg_mib}M" --budget "$budget" \
		--mem 512M --no-latency --timeout 60 || {
		xdc_show_logs mp >&2
		netns_die "meshperf failed"
	}
	python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        d=json.loads(l)
        if d.get("event")=="result" and d.get("size")==int(sys.argv[2])<<20: print("%.1f" % (d["gbits_per_s"]*1000))' \
		"$NETNS_TMP/mp.client" "$msg_mib"
}

echo "link: $XDC_RATE each way${XDC_DELAY:+, $XDC_DELAY one-way delay}," \
	"MTU $XDC_MTU; TCP goodput ceiling $ceiling Mbit/s"
echo "meshperf: $streams streams, $threads threads, $msg_mib MiB x $msgs;" \
	"iperf3: -P $streams -t $secs"
: >"$NETNS_TMP/i"
: >"$NETNS_TMP/m"
for r in $(seq "$rounds"); do
	i=$(iperf3_once)
	m=$(meshperf_once)
	echo "round $r: iperf3 $i Mbit/s, meshperf $m Mbit/s"
	echo "$i" >>"$NETNS_TMP/i"
	echo "$m" >>"$NETNS_TMP/m"
done
mi=$(median <"$NETNS_TMP/i")
mm=$(median <"$NETNS_TMP/m")
echo "median iperf3 -P $streams: $mi Mbit/s"
echo "median meshperf tcp-xdc, $streams streams: $mm Mbit/s"
python3 -c "r=$rate_bits/1e6; print('meshperf/rate %.3f, meshperf/ceiling %.3f, iperf3/rate %.3f, meshperf/iperf3 %.3f' % ($mm/r, $mm/$ceiling, $mi/r, $mm/$mi))"

umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key"
: >"$NETNS_TMP/on"
: >"$NETNS_TMP/off"
for r in $(seq "$rounds"); do
	on=$(meshperf_once "NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key")
	off=$(meshperf_once)
	echo "round $r: auth on $on Mbit/s, off $off Mbit/s"
	echo "$on" >>"$NETNS_TMP/on"
	echo "$off" >>"$NETNS_TMP/off"
done
mon=$(median <"$NETNS_TMP/on")
moff=$(median <"$NETNS_TMP/off")
echo "median meshperf auth on: $mon Mbit/s, off: $moff Mbit/s"
python3 -c "print('auth on/off %.3f (drop %.1f%%)' % ($mon/$moff, 100*(1-$mon/$moff)))"
