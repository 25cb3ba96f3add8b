#!/bin/bash
# SPDX-License-Identifier: MIT
# shellcheck disable=SC2154 # rc0..rc2 are set by finish() through eval
#
# meshinfo --cluster on loopback (three ranks, each its own host by the
# address it advertises, 127.0.0.1x) with an outsider at rank 0's port
# before the ranks come:
#   bind        rank 0 listens on the address of --rendezvous, not on all
#   silent      a connection that says nothing: the ranks still join, and
#               rank 0 reports the true matrix, exit 0
#   claim       another meshinfo (127.0.0.19) joins first as rank 1, no
#               key, and the true rank 1 comes while rank 0 waits for
#               rank 2: rank 0 fails naming the outsider's address (a
#               rank claimed twice), or reports the true matrix
#   other-key   the same outsider with another auth_key_file than the
#               cluster's: refused; the true matrix, exit 0
#   no-key      the same outsider with no key where the cluster has one:
#               refused; the true matrix, exit 0
#   bursts      (no outsider) ranks 1 and 2 with --burst-bytes 64K under a
#               rank 0 with the default: its burst sizes fit their
#               buffers, the true matrix
# "The true matrix": three hosts, six pairs connected, each pair's remote
# the address of its rank (never 127.0.0.19).
#
# usage: cluster-outsider.sh BUILD_DIR SOURCE_DIR [CASE...]
set -uo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
shift 2
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(silent claim other-key no-key bursts)
meshinfo=$build/tools/meshinfo/meshinfo
plugin=$build/core/libnccl-net-mesh.so
tmp=$(mktemp -d)
pids=()
export NCCL_MESH_ADVERTISE_LOCAL=false
export NCCL_MESH_MODULE_PATH=$build/modules/tcp-xdc

command -v ss >/dev/null || { echo "SKIP: ss (iproute2) is missing"; exit 77; }

# shellcheck source=cluster-lib.sh
. "$src/tests/tools/cluster-lib.sh"

# key FILE: a fresh key, owner-only
key() {
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1")
}

# conf NAME [KEY]: a loopback tcp-xdc config, with auth_key_file = KEY
conf() {
	{
		echo 'version = 1;'
		echo 'modules = [ "tcp-xdc" ];'
		[ -z "${2:-}" ] || echo "auth_key_file = \"$2\";"
		echo 'tcp-xdc: { ifname = "lo"; streams = 2; threads = 2; };'
	} >"$tmp/$1.conf"
}

# start NAME RANK ADDR CONF [ARGS...]: one meshinfo in the background,
# its pid in pid_NAME; the rendezvous is 127.0.0.1:$port
start() {
	local name=$1 rank=$2 addr=$3 cf=$4
	shift 4
	NCCL_MESH_CONF="$tmp/$cf.conf" NCCL_MESH_ADVERTISE_ADDRS="$addr" \
		timeout 120 "$meshinfo" --cluster --plugin "$plugin" \
		--rendezvous "127.0.0.1:$port" --rank "$rank" --size 3 \
		--timeout 30 --burst-bytes 4M --lat-iters 10 -v \
		--json "$tmp/$name.json" "$@" >"$tmp/$name.log" \
		2>"$tmp/$name.err" &
	eval "pid_$name=$!"
	pids+=($!)
}

# until_ok TRIES CMD...: CMD succeeds within TRIES tenths of a second
until_ok() {
	local n=$1
	shift
	while ! "$@" 2>/dev/null; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || return 1
		sleep 0.1
	done
}

listening() {
	ss -Htln "sport = :$port" | grep -q .
}

# the local address of process $1's connection to the rendezvous port
conn_of() {
	local pid

	pid=$(pgrep -P "$1" meshinfo) || return 1
	ss -Htnp state established "dport = :$port" |
		awk -v p="pid=$pid," 'index($0, p) { print $3; exit }' | grep .
}

# finish: ranks 1 and 2 (at their own 127.0.0.1x), then every exit
finish() {
	start r1 1 127.0.0.11 "$1"
	start r2 2 127.0.0.12 "$1"
	for r in 0 1 2; do
		eval "wait \$pid_r$r"
		eval "rc$r=$?"
	done
}

# true_matrix: rank 0 exited 0 with the matrix of the three true hosts
true_matrix() {
	[ "$rc0" -eq 0 ] && grep -q "6 of 6 pairs connected" "$tmp/r0.log" &&
		python3 - "$tmp/r0.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ok = (len(d["hosts"]) == 3 and len(d["pairs"]) == 6 and
      all(p["ok"] and p["remote"].startswith("127.0.0.1%d:" % p["to"])
          for p in d["pairs"]))
if not ok:
    print(json.dumps(d["pairs"], indent=1)[:3000])
sys.exit(0 if ok else 1)
EOF
}

# outsider_named ADDR: rank 0 failed, naming ADDR as a rank's claimant
outsider_named() {
	[ "$rc0" -eq 2 ] && grep -F "claimed twice" "$tmp/r0.err" |
		grep -qF "$1"
}

case_silent() {
	port=$(free_port 127.0.0.1)
	conf plain
	start r0 0 127.0.0.10 plain
	until_ok 100 listening || { check silent 1 "rank 0 never listened"; return; }
	ss -Htln "sport = :$port" | awk '{ print $4 }' >"$tmp/bound"
	[ "$(cat "$tmp/bound")" = "127.0.0.1:$port" ]
	check bind $? "rank 0 listens on 127.0.0.1:$port alone (got: $(tr '\n' ' ' <"$tmp/bound"))"
	python3 -c 'import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print(s.getsockname()[0], s.getsockname()[1], flush=True)
time.sleep(300)' "$port" >"$tmp/silent.addr" &
	pids+=($!)
	until_ok 100 test -s "$tmp/silent.addr"
	finish plain
	true_matrix
	check silent $? "a silent connection to rank 0: the true matrix, exit 0 (rank 0 $rc0, 1 $rc1, 2 $rc2)"
}

# r1_settled: rank 1 joined (rank 0 says so), or rank 1 or rank 0 ended
r1_settled() {
	local addr

	! kill -0 "$pid_r1" 2>/dev/null || ! kill -0 "$pid_r0" 2>/dev/null ||
		{ addr=$(conn_of "$pid_r1") &&
		  grep -q "rank 1 (.*) joined from $addr" "$tmp/r0.err"; }
}

# claim_case NAME RANKS_CONF OUTSIDER_CONF: rank 0, the outsider as rank
# 1, then the true rank 1, and rank 2 only once rank 1 is settled, so
# that rank 1 always comes while rank 0 still waits for a rank
claim_case() {
	local addr
	port=$(free_port 127.0.0.1)
	start r0 0 127.0.0.10 "$2"
	until_ok 100 listening || { check "$1" 1 "rank 0 never listened"; return; }
	start outsider 1 127.0.0.19 "$3"
	# joined or refused: either way it has spoken to rank 0 by then
	until_ok 100 conn_of "$pid_outsider" >/dev/null
	addr=$(conn_of "$pid_outsider")
	until_ok 50 grep -q "from $addr" "$tmp/r0.err" || true
	start r1 1 127.0.0.11 "$2"
	until_ok 600 r1_settled
	rc2=none
	if kill -0 "$pid_r0" 2>/dev/null; then
		start r2 2 127.0.0.12 "$2"
		wait "$pid_r2"
		rc2=$?
	fi
	wait "$pid_r0"
	rc0=$?
	wait "$pid_r1"
	rc1=$?
	if [ "$1" = claim ]; then
		true_matrix || outsider_named "${addr:-none}"
	else
		true_matrix
	fi
	check "$1" $? "an outsider ($addr) claims rank 1: the true matrix, or a failure naming it (exits $rc0 $rc1 $rc2)"
}

case_claim() {
	conf plain
	claim_case claim plain plain
}

case_other_key() {
	key "$tmp/key"
	key "$tmp/other"
	conf keyed "$tmp/key"
	conf other "$tmp/other"
	claim_case other-key keyed other
	grep -q "refused the connection from .*another key" "$tmp/r0.err" ||
		grep -q "refused the connection from .*not the cluster's key" "$tmp/r0.err"
	check other-key-said $? "rank 0 says it refused the outsider for its key"
}

case_no_key() {
	key "$tmp/key"
	conf keyed "$tmp/key"
	conf plain
	claim_case no-key keyed plain
	grep -q "refused the connection from .*has no key" "$tmp/r0.err"
	check no-key-said $? "rank 0 says it refused the outsider for having no key"
}

# bursts: ranks 1 and 2 with --burst-bytes 64K, rank 0 with the default:
# rank 0's sizes fit the buffers of the others, the true matrix
case_bursts() {
	port=$(free_port 127.0.0.1)
	conf plain
	start r0 0 127.0.0.10 plain
	start r1 1 127.0.0.11 plain --burst-bytes 64K
	start r2 2 127.0.0.12 plain --burst-bytes 64K
	for r in 0 1 2; do
		eval "wait \$pid_r$r"
		eval "rc$r=$?"
	done
	true_matrix && [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]
	check bursts $? "ranks with a smaller --burst-bytes than rank 0's: the true matrix (exits $rc0 $rc1 $rc2)"
}

for c in "${cases[@]}"; do
	"case_${c//-/_}" || check "$c" 1 "set-up failed"
	for p in "${pids[@]}"; do
		pkill -KILL -P "$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
	done
	wait 2>/dev/null
	pids=()
done
[ "$failures" -eq 0 ] || exit 1
