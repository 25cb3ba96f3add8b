#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root): FAULTS (default 1000) WAN faults,
# each shorter than tcp-xdc's outage budget, injected one after another
# into verified meshperf transfers across the two-DC NAT topology of
# tests/netns/lib.sh (b1 receiving from a1 through both NATs, the link
# shaped to XDC_RATE, default 1gbit).  The faults take turns:
#
#   down 500 / down 2000 / down 5000   the inter-DC link down (at rA) for
#                                      that many ms, then up
#   reset                              nftables in rA answers every TCP
#                                      segment it forwards with a reset, 1 s
#   flush ra / flush rb                a router's conntrack table flushed;
#                                      both pick up no stream they did not
#                                      see start, so every stream through
#                                      it is lost (needs `conntrack`)
#
# with timeout_ms 3000 and outage_ms 10000 (the budget).  Transfers of
# BUDGET (default 4G) run back to back while the faults go on; a fault
# waits until the link carries full rate again (90% of the TCP goodput the
# shaped rate allows) and SETTLE_MS (default timeout_ms) have passed since
# the last one ended before it starts.  Faults closer together add up to
# one longer outage: a reset of every stream and then the link down for
# longer than timeout_ms in all fails a receiver as a dead sender would
# (docs/modules/tcp-xdc.md, "Limits"); SETTLE_MS=0 runs them so.
#
# Prints each fault (its kind, how long it lasted, the time from its end
# to full rate again, the largest tcpi_rto and backoff of a1's sockets to
# the peer at the moment the link came back); then the transfers completed
# and failed (meshperf verifies every byte: none lost, duplicated or
# wrong), each failed one with the faults of its last 15 s and its first
# WARN lines, the "resumed" INFO lines, and for link-down faults the time to
# full rate against the bar: at most 1 s + the RTO the streams had.
#
#   tests/bench/wan-faults.sh [BUILD_DIR] [FAULTS]
#
# Environment: XDC_RATE, SETTLE_MS, BUDGET (bytes per transfer, meshperf size syntax),
# KINDS (the faults' turns, e.g. "down 500,reset"), KEEP (a folder that
# receives the logs of every failed transfer).
set -euo pipefail

build=$(realpath "${1:-build}")
nfaults=${2:-1000}
src=$(cd "$(dirname "$0")/../.." && pwd)
XDC_RATE=${XDC_RATE:-1gbit}
budget=${BUDGET:-4G}
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"
# shellcheck source=tests/netns-faults/wan-lib.sh
. "$src/tests/netns-faults/wan-lib.sh"

MESHPERF=$build/tools/meshperf/meshperf
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc
CONF=$src/tests/netns/nat.conf
BOOT_PORT=47200
# where rA sends everything when its link is up; the link takes it down
RA_ROUTE="default via ${XDC_EXT[rb]}"

[ -x "$MESHPERF" ] || { echo "no $MESHPERF: build first" >&2; exit 2; }
kinds=("down 500" reset "down 2000" "flush ra" "down 5000" "flush rb")
[ -z "${KINDS:-}" ] || mapfile -t kinds < <(tr , '\n' <<<"$KINDS")
if ! command -v conntrack >/dev/null; then
	echo "conntrack (package conntrack) is not installed: no flush faults"
	mapfile -t kinds < <(printf '%s\n' "${kinds[@]}" | grep -v '^flush')
fi
netns_init
wan_nft_works
xdc_topology
wan_strict_conntrack ra
wan_strict_conntrack rb
WAN_ENV=("NCCL_MESH_TCP_XDC_TIMEOUT_MS=$WAN_TIMEOUT_MS"
	 "NCCL_MESH_TCP_XDC_OUTAGE_MS=$WAN_OUTAGE_MS")

rate_bits=$(tc_rate_bits "$XDC_RATE")
# full rate: 90% of the TCP goodput the shaped rate allows (tbf counts
# Ethernet frames; payload per 1514-byte frame is 1448 bytes)
full_bps=$((rate_bits * 1448 * 9 / (1514 * 80)))

# b1's received bytes every 20 ms: "ms bytes" lines in samples
netns_spawn b1 "$NETNS_TMP/samples" python3 -c '
import sys, time
path = "/sys/class/net/lan-b1/statistics/rx_bytes"
while True:
    with open(path) as f:
        b = int(f.read())
    print("%d %d" % (time.time() * 1000, b), flush=True)
    time.sleep(0.02)
'

# rate_now WINDOW_MS: bytes per second b1 received in the last WINDOW_MS.
rate_now() {
	tail -n 200 "$NETNS_TMP/samples" | awk -v w="$1" '
		{ t[NR] = $1; b[NR] = $2 }
		END {
			if (NR < 2) { print 0; exit }
			for (i = NR - 1; i > 1 && t[NR] - t[i] < w; i--) ;
			dt = t[NR] - t[i]
			print (dt > 0 ? int((b[NR] - b[i]) * 1000 / dt) : 0)
		}'
}

# wait_full LIMIT_S: until b1 received at full rate for 500 ms.
wait_full() {
	local deadline=$((SECONDS + $1))

	while [ "$SECONDS" -lt "$deadline" ]; do
		[ "$(rate_now 500)" -ge "$full_bps" ] && return 0
		sleep 0.1
	done
	return 1
}

# The transfers, back to back until stop exists: "N START END RC_CLIENT
# RC_SERVER VERIFIED RESUMED_CLIENT RESUMED_SERVER WARNS" in transfers.
transfers() {
	local n=0 t0 crc src ok rc rs w

	while [ ! -e "$NETNS_TMP/stop" ]; do
		n=$((n + 1))
		t0=$(wan_now_ms)
		wan_start b1 a1 "t$n" "$BOOT_PORT" "$CONF" --sizes 16M \
			--budget "$budget" --mem 128M --no-latency
		wan_end "$WAN_CPID" 3600
		crc=$WAN_RC
		wan_end "$WAN_SPID" 60
		src=$WAN_RC
		ok=0
		grep -q "all checks passed" "$NETNS_TMP/t$n.client" &&
			grep -q "all checks passed" "$NETNS_TMP/t$n.server" && ok=1
		rc=$(wan_resumed "$NETNS_TMP/t$n.client")
		rs=$(wan_resumed "$NETNS_TMP/t$n.server")
		w=$(cat "$NETNS_TMP/t$n.client" "$NETNS_TMP/t$n.server" |
		    grep -c 'WARN' || true)
		# what went wrong, for the summary and KEEP
		if [ "$ok" = 0 ] && [ -n "${KEEP:-}" ]; then
			mkdir -p "$KEEP"
			cp "$NETNS_TMP/t$n.client" "$NETNS_TMP/t$n.server" "$KEEP/"
		fi
		grep -h -m 2 -E 'WARN|ERROR|watchdog' "$NETNS_TMP/t$n.client" \
			"$NETNS_TMP/t$n.server" | sed "s/^/transfer $n: /" \
			>>"$NETNS_TMP/warns" || true
		echo "$n $t0 $(wan_now_ms) $crc $src $ok $rc $rs $w" \
			>>"$NETNS_TMP/transfers"
	done
}

# a1's sockets to rB: the largest rto and backoff (ss -ti), as "RTO BACKOFF".
a1_rto() {
	nsx a1 ss -tin dst "${XDC_EXT[rb]}" | awk '
		{ for (i = 1; i <= NF; i++) {
			if ($i ~ /^rto:/) { v = substr($i, 5) + 0; if (v > r) r = v }
			if ($i ~ /^backoff:/) { v = substr($i, 9) + 0; if (v > b) b = v }
		} }
		END { printf "%d %d\n", r, b }'
}

# fault KIND...: one fault; prints "START END RTO BACKOFF", END being when
# the link came back (down) or the rules went (reset).
fault() {
	local t0 t1 rto=0 backoff=0 reader

	case $1 in
	down)
		# the RTO a1's streams have at the return: read about 100 ms
		# before it, while wan_flap keeps the time
		echo "0 0" >"$NETNS_TMP/rto"
		{
			sleep "$(wan_secs $(($2 > 150 ? $2 - 150 : 0)))"
			a1_rto >"$NETNS_TMP/rto.new" &&
				mv "$NETNS_TMP/rto.new" "$NETNS_TMP/rto"
		} &
		reader=$!
		# (a process substitution sets $! too: the reader's pid is kept)
		read -r t0 t1 < <(wan_flap ra ext "$2" "$RA_ROUTE")
		wait "$reader" || true
		read -r rto backoff <"$NETNS_TMP/rto" ;;
	reset)
		read -r t0 t1 < <(wan_reset_for ra 1000) ;;
	flush)
		t0=$(wan_now_ms)
		wan_conntrack_flush "$2"
		t1=$(wan_now_ms) ;;
	esac
	echo "$t0 $t1 $rto $backoff"
}

transfers &
NETNS_PIDS+=($!)
transfers_pid=$!

echo "wan-faults: $nfaults faults over ${budget}B transfers b1 <- a1 at $XDC_RATE" \
	"(full rate: $((full_bps * 8 / 1000000)) Mbit/s), timeout_ms $WAN_TIMEOUT_MS," \
	"outage_ms $WAN_OUTAGE_MS, faults ${SETTLE_MS:-$WAN_TIMEOUT_MS} ms apart at least," \
	"$(basename "$build")"
settle_ms=${SETTLE_MS:-$WAN_TIMEOUT_MS}
last_end=0
for ((i = 0; i < nfaults; i++)); do
	kind=${kinds[i % ${#kinds[@]}]}
	if ! wait_full 120; then
		echo "fault $((i + 1)): the link carried no full rate for 120 s; stopping"
		break
	fi
	gap=$((last_end + settle_ms - $(wan_now_ms)))
	[ "$gap" -le 0 ] || sleep "$(wan_secs "$gap")"
	# shellcheck disable=SC2086 # the kind's words are the arguments
	if ! read -r t0 t1 rto backoff < <(fault $kind); then
		echo "fault $((i + 1)) ($kind) could not be injected; stopping"
		break
	fi
	echo "$kind $t0 $t1 $rto $backoff" >>"$NETNS_TMP/faults"
	last_end=$t1
done
touch "$NETNS_TMP/stop"
wait "$transfers_pid" || true

# Each fault's time from its end to the first 200 ms at full rate, from
# the samples; then the summary.
touch "$NETNS_TMP/warns"
python3 - "$NETNS_TMP/faults" "$NETNS_TMP/samples" "$NETNS_TMP/transfers" \
	"$full_bps" "$NETNS_TMP/warns" <<'PY'
import bisect, math, statistics, sys

faults = [l.split() for l in open(sys.argv[1])]
samples = [tuple(map(int, l.split())) for l in open(sys.argv[2])
           if len(l.split()) == 2]
transfers = [list(map(int, l.split())) for l in open(sys.argv[3])]
full = int(sys.argv[4])
ts = [s[0] for s in samples]

def kind_of(f):
    return f[0] + " " + f[1] if f[0] in ("down", "flush") else f[0]

def back_to_full(t_end):
    """ms from t_end to the start of the first 200 ms at full rate."""
    i = bisect.bisect_left(ts, t_end)
    j = i
    while i < len(samples):
        while j < len(samples) and samples[j][0] - samples[i][0] < 200:
            j += 1
        if j >= len(samples):
            return None
        dt = samples[j][0] - samples[i][0]
        if (samples[j][1] - samples[i][1]) * 1000 / dt >= full:
            return samples[i][0] - t_end
        i += 1
    return None

def in_transfer(t0, t1):
    return any(tr[1] <= t0 and t1 <= tr[2] for tr in transfers)

downs, bars = [], []
kinds = {}
for f in faults:
    kind = kind_of(f)
    t0, t1, rto, backoff = map(int, f[-4:])
    ret = back_to_full(t1)
    whole = ret is not None and in_transfer(t0, t1 + ret)
    kinds.setdefault(kind, []).append(ret if whole else None)
    shown = "%d ms" % ret if whole else "n/a (transfer boundary)"
    print("fault %-9s lasted %5d ms, full rate %s after, rto %d ms backoff %d"
          % (kind, t1 - t0, shown, rto, backoff))
    if kind.startswith("down") and whole:
        downs.append((ret, rto))
        bars.append(ret <= 1000 + rto)

def stats(v):
    v = sorted(v)
    return "median %d ms, p90 %d ms, max %d ms" % (
        statistics.median(v), v[max(0, math.ceil(0.9 * len(v)) - 1)], v[-1])

print()
print("faults: %d (%s)" % (len(faults), ", ".join(
    "%s %d" % (k, len(v)) for k, v in sorted(kinds.items()))))
done = [t for t in transfers if t[3] == 0 and t[4] == 0 and t[5] == 1]
failed = [t for t in transfers if t not in done]
print("transfers: %d completed and verified, %d failed (numbers: %s)" % (
    len(done), len(failed), " ".join(str(t[0]) for t in failed) or "none"))
for t in failed:
    # the faults of the last 15 s before it ended: which one it failed on
    near = [kind_of(f) for f in faults
            if t[1] <= int(f[-4]) and t[2] - 15000 <= int(f[-3]) <= t[2]]
    print("transfer %d: client status %d, server status %d%s; faults in its"
          " last 15 s: %s" % (t[0], t[3], t[4], "" if t[5] else
                              ", not verified", ", ".join(near) or "none"))
print("".join(open(sys.argv[5]).readlines()[:40]) if failed else "", end="")
print("resumed INFO lines: client %d, server %d; WARN lines %d" % (
    sum(t[6] for t in transfers), sum(t[7] for t in transfers),
    sum(t[8] for t in transfers)))
for k, v in sorted(kinds.items()):
    got = [x for x in v if x is not None]
    if got:
        print("back to full rate after %-9s %s (%d measured)" % (
            k + ":", stats(got), len(got)))
if downs:
    print("link down: back to full rate %s; rto at the return %s" % (
        stats([d[0] for d in downs]), stats([d[1] for d in downs])))
    print("bar: full rate within 1 s + RTO of the return: %d of %d %s" % (
        sum(bars), len(bars), "HOLDS" if all(bars) else "MISSED"))
PY
