#!/bin/bash
# SPDX-License-Identifier: MIT
# Benchmark (not a test): the 8-byte half round trip through the plugin and
# tcp-xdc on loopback (meshperf's ping-pong) against a plain C TCP
# ping-pong on the same link (tests/bench/tcp_pingpong.c: read() that
# sleeps, recv() polled without a break, recv() polled yielding the core
# when nothing came, as NCCL's proxy thread does, polled with each way on
# its own connection, as NCCL's send and receive comms are, and that with
# delayed acknowledgements, as tcp-xdc sets its receive streams), and
# tcp-xdc with its fast path off (inline_max = 0: every message handed to
# a data thread), and tcp-xdc with encrypt = true under a fresh key,
# alternating, median of ROUNDS each.  Every figure is a mean over its
# round trips, as meshperf reports them.  Also what one empty poll costs
# (tcp_pingpong's empty-poll: recv() against recvmsg() with two iovecs).
# Bar: tcp-xdc <= 1.3 x the plain ping-pong.
#
#   tests/bench/xdc-latency.sh [BUILD_DIR] [ROUNDS] [SIZE]
set -euo pipefail

build=$(realpath "${1:-build}")
rounds=${2:-5}
size=${3:-8}
iters=${ITERS:-20000}
src=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh
. "$src/tests/bench/lib.sh"
pingpong=$build/tests/bench/tcp_pingpong
[ -x "$pingpong" ] || { echo "no $pingpong: build first" >&2; exit 2; }

bench_loopback_conf "$build"
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/key")

mesh_lat() {
	bench_meshperf "$build" "$work" "$work/mp.json" --sizes "$size" \
		--iters "$iters" --budget 64M
	bench_figure "$work/mp.json" lat_us
}

for r in $(seq "$rounds"); do
	"$pingpong" "$size" "$iters" >"$work/pp.json"
	for m in block busy yield split split-delayed-ack; do
		python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["mode"] == sys.argv[2]: print(d["half_rtt_us_mean"])' \
			"$work/pp.json" "$m" >>"$work/$m"
	done
	python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["mode"] == "empty-poll": print(d["recv_ns"], d["recvmsg_2iov_ns"])' \
		"$work/pp.json" >>"$work/empty-poll"
	mesh_lat >>"$work/mesh"
	NCCL_MESH_TCP_XDC_INLINE_MAX=0 mesh_lat >>"$work/handoff"
	NCCL_MESH_AUTH_KEY_FILE=$work/key NCCL_MESH_TCP_XDC_ENCRYPT=true \
		mesh_lat >>"$work/encrypted"
	echo "round $r: block $(tail -1 "$work/block") busy $(tail -1 "$work/busy")" \
		"yield $(tail -1 "$work/yield") split $(tail -1 "$work/split")" \
		"split-delayed-ack $(tail -1 "$work/split-delayed-ack")" \
		"tcp-xdc $(tail -1 "$work/mesh") handed-off $(tail -1 "$work/handoff")" \
		"encrypted $(tail -1 "$work/encrypted") us"
done
declare -A med
for m in block busy yield split split-delayed-ack mesh handoff encrypted; do
	med[$m]=$(bench_median <"$work/$m")
done
echo "host: $(nproc) cores; $size-byte half round trip on loopback, means, medians of $rounds rounds"
echo "plain TCP: read() ${med[block]} us, polled recv() ${med[busy]} us," \
     "polled recv() yielding ${med[yield]} us,"
echo "           polled recv() with one connection each way ${med[split]} us," \
     "and with delayed acknowledgements ${med[split-delayed-ack]} us"
echo "an empty poll, as test() repeats while a message is on its way:" \
     "recv() $(cut -d' ' -f1 "$work/empty-poll" | bench_median) ns," \
     "recvmsg() with two iovecs $(cut -d' ' -f2 "$work/empty-poll" | bench_median) ns"
echo "tcp-xdc: ${med[mesh]} us; with every message handed to a data thread: ${med[handoff]} us;" \
     "encrypted: ${med[encrypted]} us"
awk -v x="${med[mesh]}" -v a="${med[block]}" -v b="${med[busy]}" \
    -v c="${med[yield]}" -v d="${med[split]}" -v e="${med[split-delayed-ack]}" 'BEGIN {
	printf "tcp-xdc / plain read(): %.2f (bar 1.3); / polled recv(): %.2f;", x / a, x / b
	printf " / polled recv() yielding: %.2f; / polled recv() one connection each way: %.2f;", x / c, x / d
	printf " / the same, delayed acknowledgements: %.2f\n", x / e }'
