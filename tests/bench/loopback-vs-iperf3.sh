#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): large-message bandwidth of meshperf through the
# plugin and tcp-xdc on loopback against iperf3 with the same number of TCP
# streams, alternating the two, median of ROUNDS each.  Prints both figures
# and their ratio.
#
#   tests/bench/loopback-vs-iperf3.sh [BUILD_DIR] [STREAMS] [ROUNDS]
set -euo pipefail

build=$(realpath "${1:-build}")
streams=${2:-8}
rounds=${3:-5}
src=$(cd "$(dirname "$0")/../.." && pwd)
meshperf=$build/tools/meshperf/meshperf
plugin=$build/core/libnccl-net-mesh.so
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_scratch

command -v iperf3 >/dev/null || { echo "iperf3 is not installed" >&2; exit 2; }
[ -x "$meshperf" ] || { echo "no $meshperf: build first" >&2; exit 2; }

cat >"$work/bench.conf" <<CONF
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lo"; streams = $streams; };
CONF

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# Gbit/s of one iperf3 run: -P streams for 5 s, receiver's figure.
iperf3_once() {
	local port=$((20000 + RANDOM % 20000))
	iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
	pids+=($!)
	sleep 0.3
	iperf3 -c 127.0.0.1 -p "$port" -P "$streams" -t 5 -J >"$work/iperf.json"
	wait "${pids[-1]}" 2>/dev/null || true
	python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); print("%.2f" % (d["end"]["sum_received"]["bits_per_second"]/1e9))' "$work/iperf.json"
}

# Gbit/s of one meshperf run: 64 MiB messages, 4 GiB in all.
meshperf_once() {
	local pf=$work/port
	rm -f "$pf"
	NCCL_MESH_CONF=$work/bench.conf \
	NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc \
		"$meshperf" --server -P "$plugin" -p 0 --port-file "$pf" \
		--no-latency >/dev/null 2>&1 &
	pids+=($!)
	for _ in $(seq 50); do [ -s "$pf" ] && break; sleep 0.1; done
	NCCL_MESH_CONF=$work/bench.conf \
	NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc \
		"$meshperf" --client 127.0.0.1 -p "$(cat "$pf")" -P "$plugin" \
		--sizes 64M --budget 4G --mem 512M --no-latency --json \
		>"$work/mp.json"
	wait "${pids[-1]}"
	python3 -c 'import json,sys
for l in open(sys.argv[1]):
    l=l.strip()
    if l.startswith("{"):
        d=json.loads(l)
        if d.get("event")=="result" and d.get("size")==64<<20: print("%.2f" % d["gbits_per_s"])' "$work/mp.json"
}

: >"$work/i"; : >"$work/m"
for r in $(seq "$rounds"); do
	i=$(iperf3_once); m=$(meshperf_once)
	echo "round $r: iperf3 -P $streams ${i} Gb/s, meshperf ${m} Gb/s"
	echo "$i" >>"$work/i"; echo "$m" >>"$work/m"
done
mi=$(median <"$work/i"); mm=$(median <"$work/m")
echo "median iperf3 -P $streams: $mi Gb/s"
echo "median meshperf tcp-xdc, $streams streams: $mm Gb/s"
python3 -c "print('ratio meshperf/iperf3: %.2f' % ($mm/$mi))"
