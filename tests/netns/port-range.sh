#!/bin/bash
# SPDX-License-Identifier: MIT
#
# Port ranges and the firewall of the NAT scenario:
#  - the routers forward their ranges and silently drop every other new
#    inbound connection (outside the range, or to a private address);
#  - the plugin listens on the lowest free port of its range, and the peer
#    in the other DC dials the matching external port;
#  - a host whose range is all taken fails to listen with a clear WARN;
#  - a host listening outside the forwarded range cannot be reached, and
#    its peer's connect fails on its own timeout, naming the external
#    address it tried.
#
# usage: port-range.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

xdc_scenario "$here/nat.conf" "$@"

# hold PORT... in HOST: listen and answer every connection with the
# address it came from, so a test sees what the NAT did
hold_ports() {
	local host=$1

	shift
	netns_spawn "$host" "$NETNS_TMP/hold-$host-$1" python3 -c '
import selectors, socket, sys
sel = selectors.DefaultSelector()
for p in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(p)))
    s.listen()
    sel.register(s, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        c, peer = key.fileobj.accept()
        c.sendall(("from %s\n" % peer[0]).encode())
        c.close()
' "$@"
	netns_wait_listen "$host" "${@: -1}" 10 ||
		netns_die "could not hold ports $* in $host"
}

# tcp_try HOST ADDR PORT LIMIT_S: prints what the listener says; status
# 124 when the attempt was still pending after LIMIT_S (dropped), else
# bash's status (1: refused)
tcp_try() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	nsx "$1" timeout "$4" bash -c \
		'exec 3<>"/dev/tcp/$0/$1" && head -n1 <&3' "$2" "$3"
}

# ---------------------------------------------------------------- firewall
hold_ports a1 40003
drops0=$(xdc_drops ra)
got=$(tcp_try b1 192.0.2.1 50003 5) ||
	netns_die "forwarded port 192.0.2.1:50003 did not answer"
[ "$got" = "from 192.0.2.2" ] ||
	netns_die "a1 saw '$got', expected the masqueraded 'from 192.0.2.2'"
echo "PASS forwarded 192.0.2.1:50003 reaches a1:40003 ($got)"

rc=0
tcp_try b1 192.0.2.1 50008 5 >/dev/null 2>&1 || rc=$?
netns_clean_failure "$rc" ||
	netns_die "50008 (forwarded, nothing listening) should be refused, status $rc"
echo "PASS forwarded 192.0.2.1:50008 is refused by a1 itself"

for target in 192.0.2.1:50100 192.0.2.1:40003 10.1.0.11:40003; do
	rc=0
	tcp_try b1 "${target%:*}" "${target#*:}" 2 >/dev/null 2>&1 || rc=$?
	[ "$rc" -eq 124 ] ||
		netns_die "$target from b1 should be dropped (timeout), status $rc"
	echo "PASS $target from b1 is dropped"
done
drops=$(($(xdc_drops ra) - drops0))
[ "$drops" -ge 3 ] || netns_die "rA counted $drops drops, expected >= 3"
echo "PASS rA's firewall dropped $drops packets"

# ------------------------------------------- lowest free port, through NAT
# 40000-40003 taken (40003 above): a1's listener gets 40004, reached from
# the other DC as 192.0.2.1:50004
hold_ports a1 40000 40001 40002
args=(--json --verbose --timeout 20 --sizes '0,64K' --budget 1M --mem 16M
      --iters 20 --lat-max 0)
xdc_meshperf a1 b1 lowest 40 "${args[@]}" || {
	xdc_show_logs lowest
	netns_die "meshperf a1 <- b1 failed with 40000-40003 taken"
}
re='send [^ ]+: tcp-xdc, [^ ]+ -> 192\.0\.2\.1:50004, cross-DC'
xdc_log_has lowest client "$re" || {
	xdc_show_logs lowest
	netns_die "b1 did not dial a1's 5th port as 192.0.2.1:50004"
}
echo "PASS a1 listened on 40004, the lowest free port, dialled as 192.0.2.1:50004"

# ----------------------------------------------------------- range taken
hold_ports a1 40004 40005 40006 40007
rc=0
xdc_meshperf a1 b1 full 40 "${args[@]}" || rc=$?
netns_clean_failure "$rc" || {
	xdc_show_logs full
	netns_die "a full port range should fail cleanly, status $rc"
}
re='WARN .*no free port to listen on in range 40000-40007'
xdc_log_has full server "$re" || {
	xdc_show_logs full
	netns_die "no server WARN matches '$re'"
}
grep -h "$re" "$NETNS_TMP/full.server" | head -n1
echo "PASS a full port range fails with a clear WARN"

# ------------------------------------------ listening outside the forward
# a2 listens in 40020-40027: its router forwards nothing there
XDC_ENV=(NCCL_MESH_PORT_RANGE=40020-40027 NCCL_MESH_CONNECT_TIMEOUT_MS=3000)
# the server's own connect back (to b2, blocked too) waits longer, so that
# the client's is always the one that fails first and says so
XDC_SERVER_ENV=(NCCL_MESH_CONNECT_TIMEOUT_MS=10000)
t0=$(date +%s%N)
rc=0
xdc_meshperf a2 b2 blocked 40 "${args[@]}" || rc=$?
XDC_SERVER_ENV=()
ms=$((($(date +%s%N) - t0) / 1000000))
netns_clean_failure "$rc" || {
	xdc_show_logs blocked
	netns_die "a blocked listener should fail cleanly, status $rc"
}
re='WARN .*connect [^ ]+: cannot reach the peer within 3000 ms: tried '
re+='.*192\.0\.2\.1:50030'
xdc_log_has blocked client "$re" || {
	xdc_show_logs blocked
	netns_die "no client WARN matches '$re'"
}
# The WARN says the client gave up on its own 3000 ms; how long the run
# took is no test (a loaded host adds seconds of start-up), the run's
# limit above only ends a hang.
grep -h 'WARN' "$NETNS_TMP/blocked.client" | head -n1
echo "PASS a listener outside the forwarded range fails the connect (run: $ms ms)"
echo "PASS: port ranges and firewall"
