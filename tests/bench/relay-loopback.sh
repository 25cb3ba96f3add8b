#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): a relayed connection against a direct one on
# loopback, measured in one run.  Each round runs meshperf through the
# plugin with tcp-xdc, once direct and once through a meshrelay on
# 127.0.0.2 (the server advertises 127.0.0.3, which the config routes
# through it): 64 MiB bandwidth and the 8-byte half round trip.  Prints
# every round, the medians and the ratios relayed/direct.  On one host the
# relay shares the cores with both ends, so this bounds what the relay's
# own path costs rather than what a network would show.
#
#   tests/bench/relay-loopback.sh BUILD [ROUNDS] [STREAMS]
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BUILD [ROUNDS] [STREAMS]" >&2; exit 2; }
b=$(realpath "$1")
rounds=${2:-5}
streams=${3:-4}
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_scratch

for f in tools/meshperf/meshperf tools/meshrelay/meshrelay \
	 modules/relay/mesh-relay.so; do
	[ -e "$b/$f" ] || { echo "no $f in $b: build first" >&2; exit 2; }
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])')
cat >"$work/bench.conf" <<CONF
modules = [ "tcp-xdc", "relay" ];
tcp-xdc: { ifname = "lo"; streams = $streams; threads = $streams; };
relay: {
  serve = false;
  port = $port;
  relays = [ "r1 127.0.0.2" ];
  members = [ "127.0.0.0/8" ];
  routes = [ "127.0.0.3 via r1" ];
};
CONF
export NCCL_MESH_CONF=$work/bench.conf
export NCCL_MESH_MODULE_PATH=$b/modules/tcp-xdc:$b/modules/relay
NCCL_DEBUG=INFO NCCL_MESH_RELAY_NAME=r1 "$b/tools/meshrelay/meshrelay" >"$work/relay.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	python3 -c 'import socket,sys; socket.create_connection(("127.0.0.2", int(sys.argv[1])), 1)' "$port" 2>/dev/null && break
	sleep 0.1
done


# run MODE KEY EXTRA_ARGS...: MODE direct or relayed; prints figure KEY.
run() {
	local mode=$1 key=$2 pf=$work/port adv=127.0.0.4
	shift 2
	[ "$mode" = relayed ] && adv=127.0.0.3
	rm -f "$pf"
	NCCL_MESH_ADVERTISE_ADDRS=$adv NCCL_MESH_ADVERTISE_LOCAL=false \
		NCCL_MESH_RELAY_NAME=d "$b/tools/meshperf/meshperf" --server \
		-P "$b/core/libnccl-net-mesh.so" -p 0 --port-file "$pf" \
		>/dev/null 2>&1 &
	pids+=($!)
	for _ in $(seq 50); do [ -s "$pf" ] && break; sleep 0.1; done
	NCCL_MESH_RELAY_NAME=c "$b/tools/meshperf/meshperf" --client 127.0.0.1 \
		-p "$(cat "$pf")" -P "$b/core/libnccl-net-mesh.so" --json "$@" \
		>"$work/mp.json"
	wait "${pids[-1]}"
	bench_figure "$work/mp.json" "$key"
}

kinds=(bw lat)
modes=(direct relayed)
declare -A args=(
	[bw]="--sizes 64M --budget 4G --mem 512M --no-latency"
	[lat]="--sizes 8 --iters 20000"
)
declare -A key=([bw]=gbits_per_s [lat]=lat_us)

for r in $(seq "$rounds"); do
	line="round $r:"
	for k in "${kinds[@]}"; do
		for m in "${modes[@]}"; do
			# shellcheck disable=SC2086
			v=$(run "$m" "${key[$k]}" ${args[$k]})
			echo "$v" >>"$work/$k.$m"
			line+=" ${k}[$m]=$v"
		done
	done
	echo "$line"
done
grep -q "pair 0: forwarding" "$work/relay.log" ||
	{ echo "the relayed runs did not go through the relay" >&2; exit 1; }
echo "host: $(nproc) cores, $streams tcp-xdc streams per leg"
for k in "${kinds[@]}"; do
	d=$(bench_median <"$work/$k.direct"); r=$(bench_median <"$work/$k.relayed")
	unit=Gb/s; [ "$k" = lat ] && unit=us
	python3 -c "print('%-4s median direct %s, relayed %s %s, relayed/direct %.3f' % ('$k', '$d', '$r', '$unit', $r/$d))"
done
