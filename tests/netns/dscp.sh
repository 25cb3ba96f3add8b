#!/bin/bash
# SPDX-License-Identifier: MIT
#
# NCCL's traffic class on tcp-xdc's data streams (docs/nccl.md, "NCCL's
# hints"): two hosts on one veth pair, an nftables counter in each that
# sorts the other's packets by DSCP, and meshperf moving data from the
# client (sender) to the server (receiver):
#  - no class anywhere: the data carries DSCP 0;
#  - --traffic-class 104 (NCCL's trafficClass, the TOS byte: DSCP 26):
#    every data packet carries DSCP 26;
#  - the config's traffic_class 72 (DSCP 18) alone: the data carries 18,
#    and the receiver's acknowledgements too (its own config's class);
#  - both: NCCL's class wins on the data, the receiver keeps its config's;
#  - the sender's streams reset mid-transfer: the streams dialed anew
#    carry NCCL's class too.
# A data packet is one longer than 1000 bytes (the plugin's control
# channel and meshperf's bootstrap carry only small messages).
#
# usage: dscp.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

netns_scenario "$@"
netns_init
command -v nft >/dev/null || netns_skip "no nft (package nftables)"

netns_add snd rcv
netns_veth snd v0 rcv v0
netns_addr snd v0 10.77.0.1/24
netns_addr rcv v0 10.77.0.2/24
nsx rcv nft add table inet probe 2>/dev/null ||
	netns_skip "nftables does not work in a namespace here"
nsx rcv nft delete table inet probe

CONF=$NETNS_TMP/dscp.conf
cat >"$CONF" <<'EOF'
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "=v0"; streams = 4; threads = 2; };
EOF
PORT=40009

# count NS DSCP: fresh counters in NS of the packets that arrive from the
# other host, data (longer than 1000 bytes) and small ones, each with DSCP
# and with any other
count() {
	nsx "$1" nft delete table inet dscp 2>/dev/null || true
	nsx "$1" nft -f - <<EOF
table inet dscp {
	chain in {
		type filter hook input priority 0; policy accept;
		iifname "v0" ip length > 1000 ip dscp $2 counter comment "data_match"
		iifname "v0" ip length > 1000 ip dscp != $2 counter comment "data_other"
		iifname "v0" ip length <= 1000 ip dscp $2 counter comment "small_match"
	}
}
EOF
}

# packets NS NAME: the packets counter NAME of NS has seen
packets() {
	nsx "$1" nft list chain inet dscp in |
		awk -v c="\"$2\"" '$0 ~ c { for (i = 1; i < NF; i++)
			if ($i == "packets") print $(i + 1) }'
}

# run_bg TAG [meshperf args...]: starts one transfer of 1 MiB messages
# (20 unless the args say), client in snd, server in rcv, each with the
# env of SND_ENV / RCV_ENV; run_end TAG waits for it to succeed
run_bg() {
	local tag=$1

	shift
	netns_spawn rcv "$NETNS_TMP/$tag.server" env NCCL_MESH_CONF="$CONF" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		"${RCV_ENV[@]}" "$MESHPERF" --server --bind 10.77.0.2 \
		--port "$PORT" --plugin "$PLUGIN" -v "$@"
	spid=$NETNS_LAST_PID
	netns_wait_listen rcv "$PORT" 10 ||
		netns_die "$tag: meshperf server did not listen"
	netns_spawn snd "$NETNS_TMP/$tag.client" env NCCL_MESH_CONF="$CONF" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		"${SND_ENV[@]}" "$MESHPERF" --client 10.77.0.2 --port "$PORT" \
		--plugin "$PLUGIN" -v --sizes 1M --iters 20 --no-latency "$@"
	cpid=$NETNS_LAST_PID
}

run_end() {
	local tag=$1 rc=0

	netns_wait "$cpid" 20 || rc=$?
	netns_wait "$spid" 10 || rc=$((rc ? rc : $?))
	if [ "$rc" -ne 0 ]; then
		tail -n 20 "$NETNS_TMP/$tag.client" "$NETNS_TMP/$tag.server" >&2
		netns_die "$tag: meshperf failed ($rc)"
	fi
}

run() {
	run_bg "$@"
	run_end "$1"
}

# expect TAG DATA_DSCP ACK_DSCP: after run TAG with counters on both
# sides, every data packet the receiver got carried DATA_DSCP; with
# ACK_DSCP, the sender got small packets marked with it
expect() {
	local tag=$1 m o a

	m=$(packets rcv data_match)
	o=$(packets rcv data_other)
	netns_log "$tag: data packets with DSCP $2: $m, with another: $o"
	[ "${m:-0}" -ge 100 ] ||
		netns_die "$tag: only ${m:-0} data packets carry DSCP $2"
	[ "${o:-1}" -eq 0 ] ||
		netns_die "$tag: $o data packets carry another DSCP than $2"
	if [ -n "${3:-}" ]; then
		a=$(packets snd small_match)
		netns_log "$tag: small packets back to the sender with DSCP $3: $a"
		[ "${a:-0}" -gt 0 ] ||
			netns_die "$tag: the receiver's packets do not carry DSCP $3"
	fi
}

SND_ENV=()
RCV_ENV=()
count rcv 0
run none
expect none 0

count rcv 26
run nccl --traffic-class 104
expect nccl 26
grep -q 'traffic class 104 (DSCP 26)' "$NETNS_TMP/nccl.client" ||
	netns_die "nccl: the send comm does not say its traffic class"

SND_ENV=(NCCL_MESH_TCP_XDC_TRAFFIC_CLASS=72)
RCV_ENV=(NCCL_MESH_TCP_XDC_TRAFFIC_CLASS=72)
count rcv 18
count snd 18
run config
expect config 18 18

count rcv 26
count snd 18
run both --traffic-class 104
expect both 26 18

# Streams dialed anew after an outage carry the class too: the sender's
# data sockets reset mid-transfer (ss -K), on a link slow enough that the
# transfer is still running, and every data packet, before and after,
# must carry DSCP 26.  Needs the kernel's socket destroy (INET_DIAG_DESTROY).
SND_ENV=()
RCV_ENV=()
netns_shape snd v0 400mbit
count rcv 26
run_bg resume --traffic-class 104 --iters 100
sleep 0.8
killed=$(nsx snd ss -HtK dst 10.77.0.2 "( dport != :$PORT )" 2>/dev/null |
	grep -c ESTAB || true)
t0=$SECONDS
run_end resume
netns_log "resume: took $((SECONDS - t0)) s"
grep -h 'resumed' "$NETNS_TMP/resume.client" | head -n 2 >&2 || true
if [ "$killed" -eq 0 ]; then
	netns_log "resume: no socket destroyed (kernel without INET_DIAG_DESTROY?): only the first streams checked"
else
	grep -q 'resumed' "$NETNS_TMP/resume.client" ||
		netns_die "resume: $killed sockets reset, and the sender did not resume"
fi
expect resume 26

echo "PASS: dscp (data marked with NCCL's class, else the config's)"
