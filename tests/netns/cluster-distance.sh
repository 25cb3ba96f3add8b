#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The tools over a long WAN: four hosts in two DCs behind NAT
# (xdc_cluster_topology in lib.sh), the DCs' link shaped to 200 Mbit/s
# and a delay line in each router's WAN ingress (10 ms each way: a round
# trip of 20 ms), NCCL's bootstrap and the rendezvous on a management
# network, the plugin told the WAN's speed.  Then:
#  - short: every host's tcp_rmem stops at 128 KiB and tcp-xdc dials 2
#    streams, so a connection keeps 2 x 64 KiB in flight, a quarter of
#    the cross-DC product (200 Mbit/s x 20 ms = 488 KiB).  Every rank exits
#    0 and the JSON validates against the schema; each cross-DC way's
#    rtt_us is 20-40 ms, its bdp_bytes its round trip times 200 Mbit/s,
#    its inflight_max_bytes 128 KiB, and each cross-DC host pair has one
#    "window" finding naming tcp_rmem; the same-DC ways' round trips are
#    under 5 ms and none of them has a finding; the text report carries
#    the round trip, the product and the window.
#  - long: tcp_rmem and tcp_wmem up to 256 MiB (netns_long_tcp) and the
#    config's streams: no window finding, the same round trips.
#  - meshperf from a1 to b1 prints the round trip it measured through the
#    plugin, 20-40 ms, in its header, result and summary.
# With CLUSTER_KEEP=DIR rank 0's text reports and JSON and meshperf's
# client output are copied to DIR (docs/meshinfo.md's come from there).
#
# usage: cluster-distance.sh MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT
#                            DELAYLINE MESHPERF
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

DELAYLINE=$5
MESHPERF=$6
rate=200mbit
one_way=10ms

cluster_scenario "$@"
[ -x "$DELAYLINE" ] || netns_skip "the delay line is not built"
XDC_RATE=$rate
xdc_cluster_topology 2
xdc_mgmt_network "${XDC_HOSTS[@]}"
for r in ra rb; do
	netns_delayline "$r" ext "$one_way"
	netns_delayline_fw "$r"
done
rdv=${XDC_MGMT_IP[a1]}:29500
CLUSTER_IFNAME=(mgmt mgmt mgmt mgmt)
env_speed=(NCCL_MESH_TCP_XDC_SPEED_MBPS=200)

# checks of rank 0's JSON beyond cluster_report.py: "window" findings
# exactly on the cross-DC host pairs (WANT_WINDOW 1) or none, and each
# way's figures
distance_check() {
	python3 - "$NETNS_TMP/$1.json" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
want_window = sys.argv[2] == "1"
bad = []
host = [h["host"] for h in d["hosts"]]
for p in d["pairs"]:
    way = "%s -> %s" % (host[p["from"]], host[p["to"]])
    cross = p["class"] == "cross-DC"
    rtt = p["rtt_us"]
    if not p["ok"] or rtt is None:
        bad.append(way + ": not measured")
        continue
    if cross and not 20000 <= rtt <= 40000:
        bad.append("%s: rtt %.0f us, not 20-40 ms" % (way, rtt))
    if not cross and rtt >= 5000:
        bad.append("%s: same-DC rtt %.0f us" % (way, rtt))
    want_bdp = 200e6 * rtt / 1e6 / 8
    if abs(p["bdp_bytes"] - want_bdp) > 0.01 * want_bdp + 1:
        bad.append("%s: bdp %d, want %.0f" % (way, p["bdp_bytes"], want_bdp))
    if want_window and p["inflight_max_bytes"] != 2 * 65536:
        bad.append("%s: in flight at most %s" % (way, p["inflight_max_bytes"]))
found = sorted(tuple(sorted((host[f["from"]], host[f["to"]])))
               for f in d["findings"] if f["kind"] == "window")
want = sorted(tuple(sorted((a, b))) for a in host for b in host
              if a < b and a[0] != b[0]) if want_window else []
if found != want:
    bad.append("window findings on %s, want %s" % (found, want))
for f in d["findings"]:
    if f["kind"] == "window" and "tcp_rmem" not in f["text"]:
        bad.append("the finding does not name tcp_rmem: " + f["text"])
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
EOF
}

# short: 2 streams x half of a 128 KiB receive buffer
for h in "${XDC_HOSTS[@]}"; do
	nsx "$h" sysctl -qw "net.ipv4.tcp_rmem=4096 65536 131072"
done
CLUSTER_ENV=("${env_speed[@]}" NCCL_MESH_TCP_XDC_STREAMS=2)
cluster_run short 0 "$rdv" "${XDC_HOSTS[@]}"
cluster_report short --schema "$schema" --hosts 4 --ok-pairs 12 --boot-ok \
	--finding window=a1:b1 --finding window=a1:b2 \
	--finding window=a2:b1 --finding window=a2:b2
distance_check short 1 || {
	cat "$NETNS_TMP/short.rank0"
	netns_die "short: the report's distance figures are wrong"
}
cluster_text short '^  a1 -> b1  cross-DC tcp-xdc .*  rtt [23][0-9]\.[0-9]+ ms  bdp [0-9]+ KiB, window 128 KiB$'
cluster_text short "^  window: rail 0: a[12] -> b[12] \(and the other way\): round trip [23][0-9]\.[0-9]+ ms; at the rail's 0\.2 Gb/s the path holds [0-9]+ KiB in flight \(its bandwidth-delay product\), but a tcp-xdc connection keeps at most 128 KiB, 0\.0[3-5] Gb/s at this round trip \(measured [0-9.]+ Gb/s\); that is 2 streams x 64 KiB, the window half of b[12]'s receive buffer opens \(net\.ipv4\.tcp_rmem's maximum, 128 KiB\); raise it, or tcp-xdc\.streams$"
echo "PASS short: the four cross-DC pairs' windows, 128 KiB for about 488 KiB, named"

# long: what a long path needs
netns_long_tcp "${XDC_HOSTS[@]}"
CLUSTER_ENV=("${env_speed[@]}")
cluster_run long 0 "$rdv" "${XDC_HOSTS[@]}"
cluster_report long --schema "$schema" --hosts 4 --ok-pairs 12 --boot-ok \
	--no-finding window
distance_check long 0 || {
	cat "$NETNS_TMP/long.rank0"
	netns_die "long: the report's distance figures are wrong"
}
echo "PASS long: tcp_rmem and tcp_wmem up to 256 MiB, no window finding"

# meshperf's round trip, through the plugin
CONF=$here/cluster.conf
xdc_meshperf b1 a1 rtt 60 --sizes 8 --iters 20 || {
	xdc_show_logs rtt
	netns_die "meshperf a1 -> b1 failed"
}
for side in client server; do
	xdc_log_has rtt "$side" '^# rtt [23][0-9]\.[0-9]+ ms: the shortest of 8 round trips of 8 bytes through the plugin$' &&
		xdc_log_has rtt "$side" '^ +8 +1 +[0-9]+ +20 .* [23][0-9]{4}\.[0-9]+$' &&
		xdc_log_has rtt "$side" 'outages resumed; rtt [23][0-9]\.[0-9]+ ms \(plugin\)$' || {
		xdc_show_logs rtt
		netns_die "meshperf's $side did not print a round trip of 20-40 ms"
	}
done
echo "PASS meshperf: a1 -> b1's round trip 20-40 ms in its header, result and summary"
if [ -n "${CLUSTER_KEEP:-}" ]; then
	mkdir -p "$CLUSTER_KEEP"
	for t in short long; do
		cp "$NETNS_TMP/$t.rank0" "$CLUSTER_KEEP/$t.txt"
		cp "$NETNS_TMP/$t.json" "$CLUSTER_KEEP/$t.json"
	done
	cp "$NETNS_TMP/rtt.client" "$CLUSTER_KEEP/meshperf.txt"
fi
