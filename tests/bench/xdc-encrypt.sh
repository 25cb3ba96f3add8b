#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test; needs root for the shaped part): tcp-xdc with
# encrypt = true against encrypt = false, authentication on in both.
#
#  1. the shaped inter-DC link of the netns NAT scenario (tests/netns/
#     lib.sh, as tests/bench/xdc-shaped.sh), b1 sending to a1: median of
#     ROUNDS meshperf runs each, alternating; bar: on/off >= 0.97;
#  2. loopback, 64 MiB messages: median of ROUNDS each, alternating, with
#     the CPU both processes used (user + system over wall time); bar:
#     on/off >= 0.6.  The cipher's cores: CPU on less CPU off, scaled to
#     the same bytes.  And what encrypted can be of clear here, about,
#     from the cipher's speed on one core (tests/bench/aead_speed, same
#     record size) and the CPU clear took per byte.
#
#   tests/bench/xdc-encrypt.sh [BUILD_DIR] [ROUNDS]
#
# Environment: STREAMS (default 8), RECORD (record_size, default the
# module's), SECS (seconds per shaped run, default 8), XDC_RATE, SKIP_SHAPED=1.
set -euo pipefail

build=$(realpath "${1:-build}")
rounds=${2:-3}
streams=${STREAMS:-8}
secs=${SECS:-8}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/netns/lib.sh
. "$src/tests/netns/lib.sh"

MESHPERF=$build/tools/meshperf/meshperf
AEAD_SPEED=$build/tests/bench/aead_speed
PLUGIN=$build/core/libnccl-net-mesh.so
MODULE_DIR=$build/modules/tcp-xdc
CONF=$src/tests/netns/nat.conf
for p in "$MESHPERF" "$AEAD_SPEED"; do
	[ -x "$p" ] || { echo "no $p: build first" >&2; exit 2; }
done

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
# Mbit/s of the SIZE_MIB MiB result in a meshperf --json log
mbits() {
	python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        d=json.loads(l)
        if d.get("event")=="result" and d.get("size")==int(sys.argv[2])<<20: print("%.1f" % (d["gbits_per_s"]*1000))' "$1" "$2"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
common=("NCCL_MESH_AUTH_KEY_FILE=$tmp/key" "NCCL_MESH_TCP_XDC_STREAMS=$streams"
	"NCCL_MESH_TCP_XDC_THREADS=$streams")
[ -z "${RECORD:-}" ] || common+=("NCCL_MESH_TCP_XDC_RECORD_SIZE=$RECORD")
ON=NCCL_MESH_TCP_XDC_ENCRYPT=true
OFF=NCCL_MESH_TCP_XDC_ENCRYPT=false

# ---------------------------------------------------------------- loopback
# loop_once ENCRYPT_WORD: "Mbit/s cores" of one run
loop_once() {
	local pf=$tmp/port spid

	rm -f "$pf"
	( TIMEFORMAT='%R %U %S'
	  time env "${common[@]}" "$1" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		NCCL_MESH_TCP_XDC_IFNAME=lo "$MESHPERF" -P "$PLUGIN" --server \
		-p 0 --port-file "$pf" >"$tmp/lo.server" 2>&1 ) 2>"$tmp/t.server" &
	spid=$!
	for _ in $(seq 100); do [ -s "$pf" ] && break; sleep 0.05; done
	( TIMEFORMAT='%R %U %S'
	  time env "${common[@]}" "$1" NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
		NCCL_MESH_TCP_XDC_IFNAME=lo "$MESHPERF" -P "$PLUGIN" \
		--client 127.0.0.1 -p "$(cat "$pf")" --json --sizes 64M \
		--budget 4G --no-latency >"$tmp/lo.client" 2>&1 ) 2>"$tmp/t.client" || {
		cat "$tmp/lo.client" >&2; echo "meshperf failed" >&2; exit 1; }
	wait "$spid"
	echo "$(mbits "$tmp/lo.client" 64)" "$(cat "$tmp/t.server" "$tmp/t.client" |
		awk '{c += ($2 + $3) / $1} END {printf "%.2f", c}')"
}

: >"$tmp/lon"; : >"$tmp/loff"; : >"$tmp/con"; : >"$tmp/coff"
for r in $(seq "$rounds"); do
	read -r on con < <(loop_once "$ON")
	read -r off coff < <(loop_once "$OFF")
	echo "loopback round $r: encrypted $on Mbit/s ($con cores), clear $off Mbit/s ($coff cores)"
	echo "$on" >>"$tmp/lon"; echo "$off" >>"$tmp/loff"
	echo "$con" >>"$tmp/con"; echo "$coff" >>"$tmp/coff"
done
lon=$(median <"$tmp/lon"); loff=$(median <"$tmp/loff")
con=$(median <"$tmp/con"); coff=$(median <"$tmp/coff")
read -r seal open < <("$AEAD_SPEED" "${RECORD:-256K}" 1)
python3 -c "
on, off, con, coff, seal, open_ = $lon, $loff, $con, $coff, $seal, $open
print('loopback, 64 MiB, %d streams: encrypted %.0f Mbit/s, clear %.0f Mbit/s, on/off %.3f (bar 0.6: %s)' % ($streams, on, off, on / off, 'met' if on / off >= 0.6 else 'NOT met'))
print('cores used (both processes): encrypted %.2f, clear %.2f of %d; the cipher: about %.2f cores at %.0f Mbit/s' % (con, coff, $(nproc), con - coff * on / off, on))
clear_ns = coff / (off / 8e3)   # core-ns per byte, clear
cipher_ns = 1 / seal + 1 / open_  # one seal and one open per byte
print('AES-256-GCM on one core, ${RECORD:-256K} records: seal %.2f GB/s, open %.2f GB/s; clear took %.3f core-ns a byte, the cipher adds %.3f: the two together allow about %.3f of clear here' % (seal, open_, clear_ns, cipher_ns, clear_ns / (clear_ns + cipher_ns)))"

[ -z "${SKIP_SHAPED:-}" ] || exit 0

# ------------------------------------------------------------------ shaped
rm -rf "$tmp"
netns_init
xdc_topology
tmp=$NETNS_TMP
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/key"
common[0]="NCCL_MESH_AUTH_KEY_FILE=$tmp/key"
rate_bits=$(tc_rate_bits "$XDC_RATE")
msgs=$(((rate_bits * secs / 8 + (2 << 20)) / (4 << 20)))
[ "$msgs" -ge 8 ] || msgs=8

shaped_once() {
	XDC_ENV=("${common[@]}" "$1")
	xdc_meshperf a1 b1 mp 120 --json --sizes 4M --budget "$((msgs * 4))M" \
		--mem 512M --no-latency --timeout 60 || {
		xdc_show_logs mp >&2
		netns_die "meshperf failed"
	}
	mbits "$NETNS_TMP/mp.client" 4
}

: >"$tmp/son"; : >"$tmp/soff"
for r in $(seq "$rounds"); do
	on=$(shaped_once "$ON")
	off=$(shaped_once "$OFF")
	echo "shaped round $r: encrypted $on Mbit/s, clear $off Mbit/s"
	echo "$on" >>"$tmp/son"; echo "$off" >>"$tmp/soff"
done
son=$(median <"$tmp/son"); soff=$(median <"$tmp/soff")
python3 -c "
on, off = $son, $soff
print('shaped $XDC_RATE, 4 MiB x $msgs, $streams streams: encrypted %.1f Mbit/s, clear %.1f Mbit/s, on/off %.3f (bar 0.97: %s)' % (on, off, on / off, 'met' if on / off >= 0.97 else 'NOT met'))"
