#!/bin/bash
# SPDX-License-Identifier: MIT
#
# What a connect says and does when the address it dials is wrong, in one
# namespace over its loopback:
#  - the first advertised address has a wrong port where a live service
#    answers (not nccl-mesh): connect goes on to the next address and the
#    transfer verifies;
#  - only that wrong address: connect fails fast, and its WARN names the
#    address and what answered there;
#  - a peer without the key against a listener that requires one is told
#    so ("requires authentication"), and the reverse ("does not
#    authenticate");
#  - a live service that closes the connection after the hello: the WARN
#    names the address;
#  - each failure is one WARN line on the connecting side.
#
# usage: connect-errors.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

netns_scenario "$@"
PORT=40000
WRONG=$((PORT + 5))	# advertise_port_offset below

netns_init
netns_add s
nsx s sysctl -qw net.ipv6.conf.all.disable_ipv6=1
nsx s sysctl -qw net.ipv6.conf.lo.disable_ipv6=1

umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$NETNS_TMP/key"

# conf NAME LOCAL TIMEOUT_MS: the wrong port advertised first, the own
# address after it when LOCAL is true
conf() {
	cat >"$NETNS_TMP/$1.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
port_range = "$PORT-$((PORT + 3))";
connect_timeout_ms = $3;
advertise_addrs = [ "127.0.0.1" ];
advertise_port_offset = 5;
advertise_local = $2;
tcp-xdc: { ifname = "lo"; streams = 2; threads = 2; };
CONF
}
conf next true 60000
conf only false 60000
# a service that closes after the hello may be a listener restarting:
# connect retries it until its timeout, whose WARN then names it
conf closes false 8000
cat >"$NETNS_TMP/plain.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
port_range = "$PORT-$((PORT + 3))";
connect_timeout_ms = 60000;
tcp-xdc: { ifname = "lo"; streams = 2; threads = 2; };
CONF

# service MODE: a live service on the wrong port; "banner" answers every
# connection with a line and closes, "close" reads and closes at once
service() {
	netns_spawn s "$NETNS_TMP/service-$1" python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
while True:
    c, peer = s.accept()
    if sys.argv[2] == "banner":
        c.sendall(b"SSH-2.0-OpenSSH_9.2 not what you dialed\r\n")
    else:
        c.recv(64)
    c.close()
' "$WRONG" "$1"
	SERVICE_PID=$NETNS_LAST_PID
	netns_wait_listen s "$WRONG" 30 || netns_die "the service did not listen"
}

stop_service() {
	kill "$SERVICE_PID" 2>/dev/null || true
	wait "$SERVICE_PID" 2>/dev/null || true
}

args=(--plugin "$PLUGIN" --port 40009 --json --verbose --timeout 30
      --sizes 0,4K,1M --budget 8M --mem 16M --iters 4 --no-latency)

# pair TAG CONF [server env] -- [client env]: one meshperf run; its status
pair() {
	local tag=$1 conf=$2 senv=() cenv=() rc=0 spid cpid

	shift 2
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do senv+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	cenv=("$@")
	netns_spawn s "$NETNS_TMP/$tag.server" env \
		NCCL_MESH_CONF="$NETNS_TMP/$conf.conf" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" "${senv[@]}" \
		"$MESHPERF" --server --bind 127.0.0.1 "${args[@]}"
	spid=$NETNS_LAST_PID
	netns_wait_listen s 40009 10 || netns_die "$tag: no server"
	netns_spawn s "$NETNS_TMP/$tag.client" env \
		NCCL_MESH_CONF="$NETNS_TMP/$conf.conf" \
		NCCL_MESH_MODULE_PATH="$MODULE_DIR" "${cenv[@]}" \
		"$MESHPERF" --client 127.0.0.1 "${args[@]}"
	cpid=$NETNS_LAST_PID
	netns_wait "$cpid" 40 || rc=$?
	netns_wait "$spid" 10 || true
	return "$rc"
}

show() {
	local side

	for side in server client; do
		echo "---- $1 $side ----"
		cat "$NETNS_TMP/$1.$side"
	done
}

# expect_warn TAG REGEX: the client's WARN lines match REGEX
expect_warn() {
	grep -E 'WARN' "$NETNS_TMP/$1.client" | grep -Eq -- "$2" ||
		{ show "$1"; netns_die "$1: no client WARN matches: $2"; }
	grep -E 'WARN' "$NETNS_TMP/$1.client" | grep -E -- "$2" | head -n 2
}

# expect_one_warn TAG: the failure is logged once, where it was decided
expect_one_warn() {
	local n

	n=$(grep -c 'WARN' "$NETNS_TMP/$1.client" || true)
	[ "$n" -eq 1 ] || { show "$1"; netns_die "$1: $n client WARN lines, not 1"; }
}

# expect_fast_failure TAG RC T0: failed cleanly on what answered, without
# waiting out connect_timeout_ms (60 s, which would say "cannot reach the
# peer within"); the bound, far below both it and meshperf's 30 s without
# progress, only leaves a slow host its time
expect_fast_failure() {
	netns_clean_failure "$2" || { show "$1"; netns_die "$1: status $2"; }
	! grep -q 'cannot reach the peer within' "$NETNS_TMP/$1.client" ||
		{ show "$1"; netns_die "$1: the connect timed out"; }
	[ $((SECONDS - $3)) -le 20 ] ||
		{ show "$1"; netns_die "$1: failing took $((SECONDS - $3)) s"; }
}

# ------------------------------------------- a wrong port, then the right one
service banner
rc=0
pair next next || rc=$?
[ "$rc" -eq 0 ] || { show next; netns_die "next: the connect did not go on to the next address ($rc)"; }
grep -q '"event":"summary".*"status":"ok"' "$NETNS_TMP/next.client" ||
	{ show next; netns_die "next: no ok summary"; }
echo "PASS a wrong advertised port with a live service: the next address connected"

# ------------------------------------------------------ only the wrong one
t0=$SECONDS rc=0
pair only only || rc=$?
expect_fast_failure only "$rc" "$t0"
expect_warn only "127\.0\.0\.1:$WRONG \(answered with something else than an nccl-mesh listener"
expect_one_warn only
echo "PASS only the wrong port: failed in $((SECONDS - t0)) s naming the address"
stop_service

# ------------------------------------------- a service that just closes
service close
t0=$SECONDS rc=0
pair closes closes || rc=$?
netns_clean_failure "$rc" || { show closes; netns_die "closes: status $rc"; }
expect_warn closes "127\.0\.0\.1:$WRONG \(closed the connection after our hello"
echo "PASS a service that closes: the WARN names the address"
stop_service

# ----------------------------------------------------------- missing key
t0=$SECONDS rc=0
pair nokey plain "NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key" -- || rc=$?
expect_fast_failure nokey "$rc" "$t0"
expect_warn nokey "127\.0\.0\.1:$PORT \(the listener requires authentication"
expect_one_warn nokey
echo "PASS a peer without the key is told the listener requires authentication"

t0=$SECONDS rc=0
pair keyonly plain -- "NCCL_MESH_AUTH_KEY_FILE=$NETNS_TMP/key" || rc=$?
expect_fast_failure keyonly "$rc" "$t0"
expect_warn keyonly "127\.0\.0\.1:$PORT \(the listener does not authenticate"
expect_one_warn keyonly
echo "PASS a peer with a key against a listener without one is told so"
echo "PASS: connect errors"
