#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): meshinfo --cluster on eight hosts,
# four per DC behind NAT (xdc_cluster_topology in tests/netns/lib.sh),
# with the default burst settings.  The bars of the cluster view:
#  - the full matrix (56 ordered pairs) completes in at most 30 s;
#  - its pair bandwidths are within 10% of meshperf's on the same pairs.
#    meshperf is run right after as meshinfo ran each pair (rank 0's -v
#    lines say how): the same message size and count per burst, the same
#    window (32 MiB of buffers), as many bursts in one connection, the
#    first dropped where meshinfo dropped it, all bytes over all time of
#    the rest, each burst on the slower side's clock.  A long meshperf run
#    beside it (1 GiB inside a DC, 32 MiB across, after a first transfer
#    as long) is the rate a longer transfer gets.
# Prints the report, both figures per pair and their ratio; exits 1 when a
# bar is missed.
#
#   tests/bench/cluster-8.sh [BUILD_DIR]
#
# Environment: XDC_RATE (the shaped inter-DC link, default 200mbit),
# CABLE (a tc rate for every host's own cable, default 5gbit; "none"
# leaves the veth unshaped, where two CPUs shared by eight hosts, not a
# cable, set each pair's rate and no two runs of either tool agree to 10%:
# docs/benchmarks.md),
# ROUNDS (meshperf runs per pair, median; default 3), MP_FAST_BUDGET (the
# long run inside a DC, default 1G),
# MESHINFO_ARGS (more meshinfo options, e.g. "--burst-ms 200"), PAIRS (the
# compared pairs, "FROM:TO ...", default "a1:a2 a3:a4 b3:b4 b2:b1 a1:b1 b4:a4"),
# SETTLE (seconds between building the namespaces and starting meshinfo,
# default 6).
set -euo pipefail

build=$(realpath "${1:-build}")
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"

MESHINFO=$build/tools/meshinfo/meshinfo
MESHPERF=$build/tools/meshperf/meshperf
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc
CONF=$src/tests/netns/cluster.conf
rounds=${ROUNDS:-3}
fast_budget=${MP_FAST_BUDGET:-1G}
settle=${SETTLE:-6}
# shellcheck disable=SC2206 # words on purpose
more=(${MESHINFO_ARGS:-})
# shellcheck disable=SC2206 # words on purpose
pairs=(${PAIRS:-a1:a2 a3:a4 b3:b4 b2:b1 a1:b1 b4:a4})	# from:to, the sender first

for f in "$MESHINFO" "$MESHPERF" "$PLUGIN"; do
	[ -e "$f" ] || { echo "no $f: build first" >&2; exit 2; }
done
netns_init
xdc_cluster_topology 4
cable=${CABLE:-5gbit}
if [ "$cable" != none ]; then
	for h in "${XDC_HOSTS[@]}"; do
		netns_shape_split "$h" "lan-$h" "$cable"
	done
fi
size=${#XDC_HOSTS[@]}
# Same-DC pairs measured in the first seconds after the namespaces are
# built (and an earlier run's torn down) read a third to half of what they
# read later on two cores, whether meshinfo starts at once or sleeps before
# its matrix: the host, not meshinfo, is warming up.
sleep "$settle"

# ------------------------------------------------------------ the matrix
t0=$(date +%s.%N)
pids=()
for ((r = 0; r < size; r++)); do
	h=${XDC_HOSTS[$r]}
	read -r addr port < <(xdc_dial "$h" a1)
	extra=()
	# rank 0's -v lines name each burst it timed
	[ "$r" -eq 0 ] && extra=(--json "$NETNS_TMP/cluster.json" -v)
	netns_spawn "$h" "$NETNS_TMP/rank$r" env NCCL_MESH_HOSTNAME="$h" \
		NCCL_MESH_CONF="$CONF" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		"$MESHINFO" --cluster --rendezvous "$addr:$port" --rank "$r" \
		--size "$size" --plugin "$PLUGIN" "${extra[@]}" "${more[@]}"
	pids+=("$NETNS_LAST_PID")
done
for ((r = 0; r < size; r++)); do
	rc=0
	netns_wait "${pids[$r]}" 120 || rc=$?
	if [ "$rc" -ne 0 ]; then
		cat "$NETNS_TMP/rank$r" >&2
		netns_die "rank $r (${XDC_HOSTS[$r]}) exited $rc"
	fi
done
wall=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
grep -v '^meshinfo\[0\] INFO' "$NETNS_TMP/rank0"
reported=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['elapsed_s'])" \
	"$NETNS_TMP/cluster.json")

# ---------------------------------------------- meshperf, the same pairs
# bursts_of FROM TO: meshinfo's bursts of that pair, "N SIZE" per line
bursts_of() {
	local from=$1 to=$2 rf rt

	rf=$(rank_of "$from")
	rt=$(rank_of "$to")
	sed -n "s/^meshinfo\[0\] INFO burst $rf -> $rt rail 0: \([0-9]*\) x \([0-9]*\) B in .*/\1 \2/p" \
		"$NETNS_TMP/rank0"
}
rank_of() {
	local r

	for r in "${!XDC_HOSTS[@]}"; do
		[ "${XDC_HOSTS[$r]}" = "$1" ] && { echo "$r"; return; }
	done
	netns_die "no host $1"
}

# meshperf_rate RECEIVER SENDER TAG NSIZES SIZE BUDGET: one run of NSIZES
# transfers of BUDGET bytes in SIZE messages over one connection; prints
# the Gb/s of all but the first (all bytes over all seconds), or of the
# only one.
meshperf_rate() {
	local to=$1 from=$2 tag=$3 n=$4 sz=$5 budget=$6 sizes rc=0

	sizes=$(printf "$sz%.0s," $(seq "$n"))
	xdc_meshperf "$to" "$from" "$tag" 120 --json --sizes "${sizes%,}" \
		--budget "$budget" --mem 32M --no-latency --timeout 30 || rc=$?
	if [ "$rc" -ne 0 ]; then
		xdc_show_logs "$tag" >&2
		netns_die "meshperf $from -> $to failed ($rc)"
	fi
	grep '"event":"result"' "$NETNS_TMP/$tag.client" | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin]
r = r[1:] if len(r) > 1 else r
print("%.4f" % (8 * sum(x["bytes"] for x in r) / sum(x["seconds"] for x in r) / 1e9))'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

rows=()
for p in "${pairs[@]}"; do
	from=${p%:*}
	to=${p#*:}
	read -r nb sz < <(bursts_of "$from" "$to" | tail -1)
	nbursts=$(bursts_of "$from" "$to" | wc -l)
	[ -n "${nb:-}" ] || netns_die "no burst of $from -> $to in rank 0's log"
	same=$(for ((k = 0; k < rounds; k++)); do
		meshperf_rate "$to" "$from" "mp-$from-$to-$k" "$nbursts" \
			"$sz" $((nb * sz))
	done | median)
	long=32M
	[ "${XDC_ROUTER[$from]}" = "${XDC_ROUTER[$to]}" ] && long=$fast_budget
	lng=$(for ((k = 0; k < rounds; k++)); do
		meshperf_rate "$to" "$from" "ml-$from-$to-$k" 2 4M "$long"
	done | median)
	mi=$(python3 - "$NETNS_TMP/cluster.json" "$from" "$to" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rank = {h["host"]: h["rank"] for h in doc["hosts"]}
for p in doc["pairs"]:
    if p["rail"] == 0 and p["from"] == rank[sys.argv[2]] \
            and p["to"] == rank[sys.argv[3]]:
        print(p["gbps"], p["class"])
PY
)
	rows+=("$from $to ${mi% *} $same $lng ${mi#* } ${nbursts}x${nb}x$((sz >> 20))M")
done

# ------------------------------------------------------------- figures
echo
echo "# eight hosts, XDC_RATE=$XDC_RATE, cables $cable, meshinfo ${MESHINFO_ARGS:-defaults}, ${settle} s settle, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '# matrix: %s s by the report, %s s wall (bar: 30 s)\n' \
	"$reported" "$wall"
printf '# %-8s %-9s %-10s %9s %9s %7s %9s %7s\n' pair class bursts \
	meshinfo "mp same" ratio "mp long" ratio
miss=0
for row in "${rows[@]}"; do
	read -r from to mi mp lng cls shape <<<"$row"
	ratio=$(python3 -c "print('%.3f' % ($mi / $mp))")
	lratio=$(python3 -c "print('%.3f' % ($mi / $lng))")
	printf '  %-8s %-9s %-10s %9.3f %9.3f %7s %9.3f %7s\n' "$from->$to" \
		"$cls" "$shape" "$mi" "$mp" "$ratio" "$lng" "$lratio"
	python3 -c "import sys; sys.exit(0 if abs($mi / $mp - 1) <= 0.10 else 1)" ||
		miss=1
done
for p in "${pairs[@]}"; do
	printf '# meshinfo %s: bursts of%s s\n' "${p/:/->}" "$(sed -n \
		"s/^meshinfo\[0\] INFO burst $(rank_of "${p%:*}") -> $(rank_of "${p#*:}") rail 0: .* in \([0-9.]*\) s$/ \1/p" \
		"$NETNS_TMP/rank0" | tr -d '\n')"
done
echo "# Gb/s; bursts: meshinfo's, count x messages x size (the first dropped"
echo "# when more than one); mp same: meshperf the same way; mp long: meshperf"
echo "# ${fast_budget} inside a DC, 32M across, after a first transfer as long"
if python3 -c "import sys; sys.exit(0 if $reported <= 30 else 1)"; then
	echo "PASS matrix in $reported s (<= 30 s)"
else
	echo "MISS matrix in $reported s (> 30 s)"
	miss=1
fi
if [ "$miss" -eq 0 ]; then
	echo "PASS every compared pair within 10% of meshperf"
else
	echo "MISS a bar (above)"
fi
exit "$miss"
