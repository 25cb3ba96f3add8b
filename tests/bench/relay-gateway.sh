#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): the netns relay scenario
# (tests/netns/lib.sh, relay_topology) with the gateways' link shaped.
# meshperf from a0 to b0 through meshrelay on g0 and g1 against meshperf
# from g0 to g1 straight over the same link with tcp-xdc alone (through
# the gateway's port mapping), alternating, median of ROUNDS each, both
# with the key on.  Prints both figures and relayed/direct (the bar is
# 0.8).
#
#   tests/bench/relay-gateway.sh [BUILD_DIR] [ROUNDS]
#
# Environment: XDC_RATE (tc rate of the link, default 200mbit), XDC_DELAY
# (one-way netem delay, e.g. 10ms; needs sch_netem), XDC_MTU (default
# 1500), SECS (seconds per run, default 8), STREAMS and THREADS (tcp-xdc,
# default 4 and 2, every process and leg), MSG_MIB (message size, default
# 4), RELAY_BENCH_ENV (more VAR=value words for every process),
# PERF_ARGS (more meshperf arguments, e.g. "--window 8").
set -euo pipefail

build=$(realpath "${1:-build}")
rounds=${2:-5}
secs=${SECS:-8}
streams=${STREAMS:-4}
threads=${THREADS:-2}
msg_mib=${MSG_MIB:-4}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"

MESHPERF=$build/tools/meshperf/meshperf
MESHRELAY=$build/tools/meshrelay/meshrelay
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc:$build/modules/relay
CONF=$src/tests/netns/relay.conf

for f in "$MESHPERF" "$MESHRELAY" "$PLUGIN" "$build/modules/relay/mesh-relay.so"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 2; }
done
netns_init
if [ -n "$XDC_DELAY" ] && ! netns_have_netem; then
	echo "XDC_DELAY needs tc netem, which this kernel lacks" >&2
	exit 2
fi
relay_topology "$XDC_RATE" "$XDC_DELAY"

umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key"
XDC_ENV=("NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key"
	 "NCCL_MESH_TCP_XDC_STREAMS=$streams" "NCCL_MESH_TCP_XDC_THREADS=$threads")
# shellcheck disable=SC2206 # words on purpose
XDC_ENV+=(${RELAY_BENCH_ENV:-})
relay_meshrelay_start g0
relay_meshrelay_start g1
# the bootstrap bridges, made here: the runs below are subshells
for b in a0:41000:b0 g0:41001:g1; do
	IFS=: read -r from port to <<<"$b"
	netns_tcp_bridge "$from" "$port" "$to" "$port"
	RELAY_BRIDGE[$from:$port]=$to
done

rate_bits=$(tc_rate_bits "$XDC_RATE")
ceiling=$(python3 -c "print('%.1f' % ($rate_bits * ($XDC_MTU - 52) /
	($XDC_MTU + 14) / 1e6))")
msgs=$(((rate_bits * secs / 8 + (msg_mib << 19)) / (msg_mib << 20)))
[ "$msgs" -ge 8 ] || msgs=8
budget=$((msgs * msg_mib))M

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# mbits SERVER CLIENT BOOT_PORT: Mbit/s of one meshperf run, client to
# server; XDC_SERVER_ENV and XDC_CLIENT_ENV as the caller set them
mbits() {
	# shellcheck disable=SC2086 # PERF_ARGS: words on purpose
	relay_meshperf_start "$1" "$2" mp "$3" --json --verbose --sizes "${msg_mib}M" \
		--budget "$budget" --mem 512M --no-latency --timeout 60 \
		${PERF_ARGS:-}
	xdc_meshperf_finish 120 || {
		xdc_show_logs mp >&2
		for g in g0 g1; do
			echo "---- meshrelay $g ----" >&2
			tail -n 20 "$NETNS_TMP/meshrelay-$g" >&2
		done
		netns_die "meshperf $2 -> $1 failed"
	}
	python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        d=json.loads(l)
        if d.get("event")=="result" and d.get("size")==int(sys.argv[2])<<20: print("%.1f" % (d["gbits_per_s"]*1000))' \
		"$NETNS_TMP/mp.client" "$msg_mib"
}

# a0 -> b0 through g0 and g1
relayed() {
	XDC_SERVER_ENV=()
	XDC_CLIENT_ENV=()
	mbits b0 a0 41000
	grep -q 'relay: send comm .* via g0 ' "$NETNS_TMP/mp.client" ||
		netns_die "a0 -> b0 was not relayed through g0"
}

# g0 -> g1 with tcp-xdc alone on the link, dialled at g1's mapped ports
direct() {
	XDC_SERVER_ENV=(NCCL_MESH_MODULES=tcp-xdc NCCL_MESH_TCP_XDC_IFNAME==ext
			"NCCL_MESH_ADVERTISE_ADDRS=${RELAY_EXT[g1]}"
			NCCL_MESH_ADVERTISE_PORT_OFFSET=10000
			NCCL_MESH_ADVERTISE_LOCAL=false)
	XDC_CLIENT_ENV=(NCCL_MESH_MODULES=tcp-xdc NCCL_MESH_TCP_XDC_IFNAME==ext)
	mbits g1 g0 41001
}

echo "link: $XDC_RATE each way${XDC_DELAY:+, $XDC_DELAY one-way delay}," \
	"MTU $XDC_MTU; TCP goodput ceiling $ceiling Mbit/s"
echo "meshperf: $msg_mib MiB x $msgs, tcp-xdc $streams streams," \
	"$threads threads; key on"
: >"$NETNS_TMP/r"
: >"$NETNS_TMP/d"
for r in $(seq "$rounds"); do
	d=$(direct)
	m=$(relayed)
	echo "round $r: direct g0 -> g1 $d Mbit/s, relayed a0 -> g0 -> g1 -> b0 $m Mbit/s"
	echo "$d" >>"$NETNS_TMP/d"
	echo "$m" >>"$NETNS_TMP/r"
done
md=$(median <"$NETNS_TMP/d")
mr=$(median <"$NETNS_TMP/r")
echo "median direct tcp-xdc g0 -> g1: $md Mbit/s"
echo "median relayed a0 -> b0 through meshrelay: $mr Mbit/s"
python3 -c "print('relayed/direct %.3f (bar 0.8), direct/ceiling %.3f, relayed/ceiling %.3f' % ($mr/$md, $md/$ceiling, $mr/$ceiling))"
grep -h 'bytes' "$NETNS_TMP/meshrelay-g0" | tail -n 2 || true
