#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The NAT scenario without advertise_* settings: handles carry only private
# addresses.  Same-DC pairs still work; a cross-DC connect must fail within
# connect_timeout_ms (3 s here) with a WARN naming every address it tried,
# and the peer's router must have dropped the attempts.
#
# usage: nat-missing.sh MESHPERF PLUGIN MODULE_DIR
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

xdc_scenario "$here/nat-missing.conf" "$@"
timeout_ms=3000

args=(--json --verbose --timeout 20 --sizes '0,1M' --budget 4M --mem 16M
      --iters 20 --lat-max 0)

# same DC: unaffected
xdc_meshperf a2 a1 same 40 "${args[@]}" || {
	xdc_show_logs same
	netns_die "same-DC pair failed without advertise settings"
}
echo "PASS same-DC pair a1 <-> a2 works without advertise settings"

# across: b1 dials a1's private address, which rA's firewall drops
drops0=$(xdc_drops ra)
t0=$(date +%s%N)
rc=0
xdc_meshperf a1 b1 cross 40 "${args[@]}" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$rc" -ne 0 ] || {
	xdc_show_logs cross
	netns_die "cross-DC connect succeeded without NAT settings"
}
netns_clean_failure "$rc" || {
	xdc_show_logs cross
	netns_die "cross-DC run hung or crashed (status $rc)"
}
# the WARN names the timeout and the private address:port it dialled
re="WARN .*connect [^ ]+: cannot reach the peer within $timeout_ms ms: "
re+="tried .*(10\\.1\\.0\\.11|\\[::ffff:10\\.1\\.0\\.11\\]):4000[0-7]"
xdc_log_has cross client "$re" || {
	xdc_show_logs cross
	netns_die "no client WARN matches '$re'"
}
# not before the timeout; and ended by it, not by meshperf's 20 s without
# progress or the 60 s default: the WARN above names it, and the bound,
# five times the timeout, leaves process start and bootstrap on a slow
# host all the room they take
if [ "$ms" -lt $((timeout_ms - 500)) ] ||
   [ "$ms" -gt $((timeout_ms * 5)) ]; then
	xdc_show_logs cross
	netns_die "connect failed after $ms ms, expected $timeout_ms ms and" \
		"at most $((timeout_ms * 5)) ms"
fi
drops=$(($(xdc_drops ra) - drops0))
[ "$drops" -gt 0 ] || netns_die "rA's firewall dropped nothing"
grep -h 'WARN' "$NETNS_TMP/cross.client"
echo "PASS: cross-DC connect failed after $ms ms (connect_timeout_ms" \
	"$timeout_ms), $drops packets dropped by rA's firewall"
