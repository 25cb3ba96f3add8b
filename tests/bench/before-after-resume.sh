#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; the shaped part needs root): what tcp-xdc's
# outage budget (outage_ms, the resume of broken streams) costs when
# nothing breaks.  Two builds measured in one run, alternating, each at its
# defaults (build B's outage_ms is then 300000):
#
#   loopback   tests/bench/before-after.sh BUILD_A BUILD_B ROUNDS: 64 MiB
#              bandwidth one way and both ways, and the 8-byte half round
#              trip;
#   shaped     two namespaces each behind a router, the link between the
#              routers shaped to RATE (tc tbf, default 200mbit) both ways
#              (tests/netns-faults/wan-lib.sh's pair): 4 MiB messages for
#              about SECS (8) seconds one way, and the 8-byte half round
#              trip across it.
#
# Prints every round, the medians, the ratios B/A and the bars: bandwidth
# B/A at least 0.97, latency B/A at most 1.1.
#
#   tests/bench/before-after-resume.sh BUILD_A BUILD_B [ROUNDS]
#
# BUILD_A is a build of the commit before the resume (from `git worktree
# add`), BUILD_B the current tree.  Environment: RATE, SECS.
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: $0 BUILD_A BUILD_B [ROUNDS]" >&2; exit 2; }
builds=("$(realpath "$1")" "$(realpath "$2")")
rounds=${3:-5}
rate=${RATE:-200mbit}
secs=${SECS:-8}
src=$(cd "$(dirname "$0")/../.." && pwd)

for bld in "${builds[@]}"; do
	[ -x "$bld/tools/meshperf/meshperf" ] || { echo "no meshperf in $bld: build first" >&2; exit 2; }
done

# bar KIND RATIO: whether B/A of KIND holds its bar, in words.
bar() {
	python3 -c "import sys
k, r = sys.argv[1], float(sys.argv[2])
lat = k.endswith('lat')
ok = r <= 1.1 if lat else r >= 0.97
print('%-15s B/A %.3f, bar %s: %s' % (k, r, '<= 1.1' if lat else '>= 0.97', 'HOLDS' if ok else 'MISSED'))" "$1" "$2"
}

# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$src/tests/netns-faults/wan-lib.sh"
# shellcheck source=tests/bench/lib.sh
. "$src/tests/bench/lib.sh"

netns_init
echo "== loopback (tests/bench/before-after.sh)"
bash "$src/tests/bench/before-after.sh" "${builds[@]}" "$rounds" |
	tee "$NETNS_TMP/loopback"
declare -A ratio=()
# "bw     median A 9.1, B 9.0 Gb/s, B/A 0.989": the kind and the ratio
while read -r k r; do
	ratio[loopback-$k]=$r
done < <(awk '/^(bw|bidir|lat) +median/ { print $1, $NF }' "$NETNS_TMP/loopback")

echo "== shaped: $rate each way between two routers"
wan_pair "$rate"
cat >"$NETNS_TMP/shaped.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lan"; };
CONF
rate_bits=$(tc_rate_bits "$rate")
# about SECS seconds at the shaped rate, in 4 MiB messages
msgs=$((rate_bits * secs / 8 / (4 << 20)))
[ "$msgs" -ge 8 ] || msgs=8
declare -A args=(
	[bw]="--sizes 4M --budget $((msgs * 4))M --mem 64M --no-latency"
	[lat]="--sizes 8 --iters 5000"
)
declare -A key=([bw]=gbits_per_s [lat]=lat_us)
port=47300

# shaped BUILD KIND: one run; prints its figure.
shaped() {
	local bld=$1 k=$2 tag=s$port

	MESHPERF=$bld/tools/meshperf/meshperf
	PLUGIN=$bld/core/libnccl-net-mesh.so
	MODULE_DIR=$bld/modules/tcp-xdc
	# shellcheck disable=SC2086 # the arguments are words
	wan_start s c "$tag" "$port" "$NETNS_TMP/shaped.conf" --json ${args[$k]}
	wan_end "$WAN_CPID" 120
	[ "$WAN_RC" = 0 ] || wan_fail "$tag" "$bld: meshperf failed ($WAN_RC)"
	wan_end "$WAN_SPID" 20
	bench_figure "$NETNS_TMP/$tag.client" "${key[$k]}"
}

for r in $(seq "$rounds"); do
	line="round $r:"
	for k in bw lat; do
		for i in 0 1; do
			# a new port a run: the bridge of a port leads to one server
			v=$(shaped "${builds[$i]}" "$k")
			port=$((port + 1))
			echo "$v" >>"$NETNS_TMP/shaped-$k.$i"
			line+=" ${k}[$i]=$v"
		done
	done
	echo "$line"
done
for k in bw lat; do
	ma=$(bench_median <"$NETNS_TMP/shaped-$k.0")
	mb=$(bench_median <"$NETNS_TMP/shaped-$k.1")
	unit=Gb/s; [ "$k" = lat ] && unit=us
	echo "$k median A $ma, B $mb $unit"
	ratio[shaped-$k]=$(python3 -c "print('%.3f' % ($mb / $ma))")
done

echo "== A = ${builds[0]}"
echo "== B = ${builds[1]}"
for k in loopback-bw loopback-bidir loopback-lat shaped-bw shaped-lat; do
	bar "$k" "${ratio[$k]}"
done
