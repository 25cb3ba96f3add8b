#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Encryption under attack (tcp-xdc encrypt = true), in two namespaces joined
# by a veth pair:
#
#   c 10.79.0.1 (xdc0) ==== (xdc0) 10.79.0.2 s  [relay :40001 -> :40000]
#
# A meshperf client in c streams to s, whose plugin listens on port 40000.
# On the way, nftables in c flips one bit of one packet in flight: the
# first one past 3 MiB of a connection to port 40000 (a data stream,
# mid-transfer), once in all, with the TCP checksum fixed up so that TCP
# delivers the flipped byte.  Where nftables cannot do that, a relay in s
# (a TCP proxy on port 40001, the only address s then advertises) flips
# the bit instead, and the test says so.
#
#  - in clear (encrypt = false): the flip goes through unnoticed by TCP
#    and the transfer fails (meshperf's own check, or a bad chunk header),
#    which shows that the flip lands;
#  - encrypted: the receiving plugin fails the connection from test()
#    with "record N failed authentication: data corrupted or tampered in
#    flight" (or a length out of range), and meshperf's data check never
#    sees a wrong byte;
#  - then, untouched: the same key both sides connects and verifies, also
#    with libcrypto sealing on one side only (cipher_library);
#    another key, encrypt on one side only and encrypt without a key each
#    fail with their clear error; the one-sided refusal also through the
#    relay holding back what goes to the client by half a second, so that
#    it arrives after the refusing server has exited.
#
# usage: tamper.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

netns_scenario "$@"
IP_C=10.79.0.1
IP_S=10.79.0.2
BOOT=40009
FLIP_AT=$((3 << 20))

netns_init
command -v python3 >/dev/null || netns_skip "no python3 for the relay"
netns_add c s
netns_veth c xdc0 s xdc0
netns_addr c xdc0 "$IP_C/24"
netns_addr s xdc0 "$IP_S/24"

umask 077
for k in a b; do
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key-$k"
done
cat >"$NETNS_TMP/base.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
port_range = "40000-40000";
connect_timeout_ms = 8000;
tcp-xdc: {
  ifname = "xdc0";
  streams = 4;
  threads = 2;
  timeout_ms = 3000;
  record_size = "64K";
};
CONF

# The relay: from :40001 to :40000; with FLIP_AT > 0 it flips one bit at
# byte FLIP_AT of the first connection to carry that much towards the
# server; it holds each piece going back to the client for HOLD seconds.
# shellcheck disable=SC2016 # python, not shell
RELAY='
import socket, sys, threading, time
lsn, dst, at, hold = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
lock = threading.Lock()
done = [False]

def pump(a, b, tamper):
    seen = 0
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            if tamper and at and not done[0] and seen <= at < seen + len(d):
                with lock:
                    if not done[0]:
                        done[0] = True
                        d = bytearray(d)
                        d[at - seen] ^= 0x01
                        print("flipped one bit at byte", at, flush=True)
            seen += len(d)
            if not tamper:
                time.sleep(hold)
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
host, port = lsn.rsplit(":", 1)
ls.bind((host, int(port)))
ls.listen(64)
while True:
    c, _ = ls.accept()
    h, p = dst.rsplit(":", 1)
    try:
        d = socket.create_connection((h, int(p)))
    except OSError:
        c.close()
        continue
    for x, y, t in ((c, d, True), (d, c, False)):
        threading.Thread(target=pump, args=(x, y, t), daemon=True).start()
'

# pair NAME LIMIT_S SERVER_ENV CLIENT_ENV [MESHPERF ARGS...]: one transfer;
# returns the client's status, the server's in $NETNS_TMP/NAME.src.
pair() {
	local name=$1 limit=$2 senv=$3 cenv=$4 spid rc src

	shift 4
	# shellcheck disable=SC2086 # the env words split on purpose
	netns_spawn s "$NETNS_TMP/$name.server" env \
		NCCL_MESH_CONF="$NETNS_TMP/base.conf" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" $senv \
		"$MESHPERF" -v -P "$PLUGIN" --server --bind "$IP_S" \
		--port "$BOOT" --timeout 30
	spid=$NETNS_LAST_PID
	netns_wait_listen s "$BOOT" 10 || netns_die "$name: no server"
	rc=0
	# shellcheck disable=SC2086
	nsx c env NCCL_MESH_CONF="$NETNS_TMP/base.conf" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" $cenv \
		timeout "$limit" "$MESHPERF" -v -P "$PLUGIN" --client "$IP_S" \
		--port "$BOOT" --timeout 30 --no-latency "$@" \
		>"$NETNS_TMP/$name.client" 2>&1 || rc=$?
	src=0
	netns_wait "$spid" 15 || src=$?
	echo "$src" >"$NETNS_TMP/$name.src"
	return "$rc"
}

show() {
	local f

	for f in "$NETNS_TMP/$1".*; do
		echo "---- $(basename "$f")" >&2
		grep -v '^ *[0-9]' "$f" | tail -n 25 >&2
	done
}

fail() {
	show "$1"
	netns_die "$1: $2"
}

# The server advertises the relay only.
VIA_RELAY="NCCL_MESH_ADVERTISE_ADDRS=$IP_S NCCL_MESH_ADVERTISE_PORT_OFFSET=1 NCCL_MESH_ADVERTISE_LOCAL=false"
KEY_A="NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-a"
KEY_B="NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key-b"
ENC="NCCL_MESH_TCP_XDC_ENCRYPT=true"
DATA=(--sizes 1M --iters 64 --budget 64M)

# relay NAME FLIP_AT HOLD
relay() {
	netns_spawn s "$NETNS_TMP/$1.relay" \
		python3 -c "$RELAY" "$IP_S:40001" "$IP_S:40000" "$2" "$3"
	RELAY_PID=$NETNS_LAST_PID
	netns_wait_listen s 40001 10 || netns_die "the relay did not start"
}

relay_stop() {
	kill -TERM "$RELAY_PID" 2>/dev/null || true
	wait "$RELAY_PID" 2>/dev/null || true
}

# The packet flipper, in c on the way out: XOR one bit into the first
# payload byte of the first packet past FLIP_AT bytes of a connection to
# the plugin's port; the set makes it once in all.  nftables fixes up the
# TCP checksum after a write to the payload ("inner header"), so TCP
# takes the packet; "ct original bytes" needs conntrack accounting.
FLIP_NFT="table inet tamper {
	set flipped { type ipv4_addr; flags dynamic; }
	chain out {
		type filter hook postrouting priority 0;
		ip daddr $IP_S tcp dport 40000 ct original bytes > $FLIP_AT ip daddr != @flipped @ih,0,32 set @ih,0,32 ^ 0x01000000 add @flipped { ip daddr } counter
	}
}"

# Which one flips: nftables where it loads, else the relay.
FLIPPER=relay
if ! command -v nft >/dev/null; then
	echo "no nft (nftables) here: the relay flips instead"
elif nsx c sysctl -qw net.netfilter.nf_conntrack_acct=1 2>"$NETNS_TMP/nft.err" &&
     nsx c nft -f - <<<"$FLIP_NFT" 2>>"$NETNS_TMP/nft.err" &&
     nsx c nft delete table inet tamper; then
	FLIPPER=nftables
else
	echo "nftables cannot flip here: the relay flips instead:"
	head -n 3 "$NETNS_TMP/nft.err"
fi

# flip_start NAME: arms the flipper; FLIP_VIA: what the server then needs.
flip_start() {
	if [ "$FLIPPER" = nftables ]; then
		nsx c nft -f - <<<"$FLIP_NFT"
		FLIP_VIA=""
	else
		relay "$1" "$FLIP_AT" 0
		FLIP_VIA=$VIA_RELAY
	fi
}

# flip_stop NAME: disarms it; fails NAME if nothing was flipped.
flip_stop() {
	local n

	if [ "$FLIPPER" = nftables ]; then
		n=$(nsx c nft list table inet tamper |
			sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
		nsx c nft delete table inet tamper
	else
		relay_stop
		n=$(grep -c flipped "$NETNS_TMP/$1.relay" || true)
	fi
	[ "${n:-0}" -ge 1 ] || fail "$1" "the $FLIPPER flipped nothing"
	echo "$FLIPPER flipped one bit in $n packet(s)"
}

# --------------------------------------------- in clear: the flip lands
flip_start clear
rc=0
pair clear 60 "$KEY_A $FLIP_VIA" "$KEY_A" "${DATA[@]}" || rc=$?
flip_stop clear
grep -q 'not encrypted' "$NETNS_TMP/clear.server" ||
	fail clear "the comm does not say it is not encrypted"
if [ "$rc" -eq 0 ] && [ "$(cat "$NETNS_TMP/clear.src")" -eq 0 ]; then
	fail clear "a flipped bit in clear went unnoticed by both sides"
fi
echo "PASS in clear: the flip ($FLIPPER) broke the transfer:"
grep -hE 'data mismatch|bad chunk header|WARN' "$NETNS_TMP/clear.server" |
	head -n 2

# ------------------------------------------- encrypted: detected, nothing
flip_start enc
t0=$SECONDS
rc=0
pair enc 60 "$KEY_A $ENC $FLIP_VIA" "$KEY_A $ENC" "${DATA[@]}" || rc=$?
flip_stop enc
grep -q 'encrypted (AES-256-GCM' "$NETNS_TMP/enc.server" ||
	fail enc "the recv comm does not say it is encrypted"
src=$(cat "$NETNS_TMP/enc.src")
netns_clean_failure "$src" ||
	fail enc "the receiver did not fail cleanly (status $src)"
netns_clean_failure "$rc" || [ "$rc" -eq 0 ] ||
	fail enc "the sender hung or crashed (status $rc)"
grep -Eq 'WARN .*stream [0-9]+/4: record [0-9]+ (failed authentication|has a length out of range): data corrupted or tampered in flight' \
	"$NETNS_TMP/enc.server" ||
	fail enc "the receiver did not report the tampered record"
! grep -q 'data mismatch' "$NETNS_TMP/enc.server" ||
	fail enc "meshperf's check saw a wrong byte: corrupted data was delivered"
# the WARN above says the record's authentication caught it (neither the
# dead-link timeout nor meshperf's); how soon is for benchmarks to judge
echo "PASS encrypted: the flip was detected in $((SECONDS - t0)) s," \
	"nothing wrong delivered:"
grep -hE 'tampered' "$NETNS_TMP/enc.server" | head -n 1

# ------------------------------------------------------ keys and sides
pair same 60 "$KEY_A $ENC" "$KEY_A $ENC" "${DATA[@]}" ||
	fail same "encrypted, same key: transfer failed"
grep -q 'all checks passed' "$NETNS_TMP/same.client" ||
	fail same "no verified transfer"
echo "PASS same key, encrypted, direct: connected and verified"

# Each side picks its cipher library: the acceptor libcrypto, the
# connector its default (intel-ipsec-mb where that runs on VAES).
pair libs 60 "$KEY_A $ENC NCCL_MESH_TCP_XDC_CIPHER_LIBRARY=openssl" \
	"$KEY_A $ENC" "${DATA[@]}" || fail libs "transfer failed"
grep -q 'all checks passed' "$NETNS_TMP/libs.client" ||
	fail libs "no verified transfer"
grep -q 'encrypted (AES-256-GCM by OpenSSL' "$NETNS_TMP/libs.server" ||
	fail libs "the acceptor does not say OpenSSL seals"
echo "PASS cipher libraries chosen apart, connected and verified:" \
	"$(grep -ohm1 'AES-256-GCM by [^,]*' "$NETNS_TMP/libs.client") to" \
	"$(grep -ohm1 'AES-256-GCM by [^,]*' "$NETNS_TMP/libs.server")"

rc=0
pair wrongkey 40 "$KEY_A $ENC" "$KEY_B $ENC" "${DATA[@]}" || rc=$?
netns_clean_failure "$rc" || fail wrongkey "connected, hung or crashed ($rc)"
grep -Eiq 'WARN .*(authenticat|key)' "$NETNS_TMP/wrongkey.client" ||
	fail wrongkey "the connector's WARN does not name the key"
echo "PASS another key: refused"

# oneside NAME SERVER_ENV: the connector in clear, the acceptor encrypted.
oneside() {
	local rc=0 side

	pair "$1" 40 "$KEY_A $ENC $2" "$KEY_A" "${DATA[@]}" || rc=$?
	netns_clean_failure "$rc" || fail "$1" "connected, hung or crashed ($rc)"
	for side in client server; do
		grep -q 'WARN .*encryption mismatch: the connecting side has encrypt = false, the accepting side true' \
			"$NETNS_TMP/$1.$side" ||
			fail "$1" "the $side does not say encryption is one-sided"
	done
}
oneside oneside ""
echo "PASS encrypt on one side only: refused, said on both sides"
# The server exits once it refused; its bootstrap connection closes at
# once, its reply reaches the client half a second later.
relay oneside-late 0 0.5
oneside oneside-late "$VIA_RELAY"
relay_stop
echo "PASS the same, the refusal arriving after the server exited: said on both sides"

rc=0
pair nokey 30 "$ENC" "$ENC" "${DATA[@]}" || rc=$?
netns_clean_failure "$rc" || fail nokey "ran, hung or crashed ($rc)"
grep -q 'tcp-xdc.encrypt: encrypt = true needs auth_key_file' \
	"$NETNS_TMP/nokey.client" ||
	fail nokey "no config error for encrypt without a key"
echo "PASS encrypt without a key: config error"
grep -h 'needs auth_key_file' "$NETNS_TMP/nokey.client" | head -n 1
