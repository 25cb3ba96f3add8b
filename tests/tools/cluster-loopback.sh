#!/bin/bash
# SPDX-License-Identifier: MIT
# shellcheck disable=SC2154 # rc0..rc2 are set by cluster() through eval
#
# meshinfo --cluster on loopback, three processes, each its own host by
# the address it advertises (127.0.0.1x):
#   direct      every pair connects on tcp-xdc: exit 0 on every rank, the
#               JSON parses with six connected pairs, each with its round
#               trip and a window above its bandwidth-delay product (no
#               window finding), and validates against its schema; the
#               DOT has three nodes and three edges, the SVG (Graphviz)
#               holds them too
#   relayed     rank 0 reaches rank 2 through a meshrelay: that pair is
#               "relayed" via r1, the others direct, exit 0; the DOT names
#               r1 on the pair's orange edge (red where loopback's noise
#               got it a finding)
#   dead-relay  the route's relay is not running: exit 1 on every rank,
#               the pair fails as "no relay" and is the one finding
#   encrypted   tcp-xdc with a key and encrypt = true: every pair reports
#               AES-256-GCM in the JSON and the text (direct: "none")
#   window      tcp-xdc told a 100 Gbit/s rail, with one stream of a 64 KiB
#               rcvbuf: every pair's window is 64 KiB, below its
#               bandwidth-delay product at 100 Gbit/s (500 KB at 40 us),
#               one "window" finding per host pair naming tcp-xdc.rcvbuf,
#               each pair's edge red and thick in the DOT (labelled by its
#               first finding: a loaded host may find it degraded first),
#               the JSON valid against its schema; in direct, none
#
# usage: cluster-loopback.sh BUILD_DIR SOURCE_DIR [CASE...]
set -uo pipefail

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
shift 2
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(direct relayed dead-relay encrypted window)
meshinfo=$build/tools/meshinfo/meshinfo
meshrelay=$build/tools/meshrelay/meshrelay
plugin=$build/core/libnccl-net-mesh.so
tmp=$(mktemp -d)
pids=()
ROUTES=()
export NCCL_MESH_ADVERTISE_LOCAL=false

# shellcheck source=cluster-lib.sh
. "$src/tests/tools/cluster-lib.sh"

# cluster [VAR=VALUE...] -- [meshinfo args...]: ranks 1 and 2 in the
# background, rank 0 in front; rc0..rc2 their exits, r0..r2.log theirs
cluster() {
	local envs=() port
	while [ "$1" != "--" ]; do
		envs+=("$1")
		shift
	done
	shift
	port=$(free_port 127.0.0.1)
	local bg=()
	for r in 2 1 0; do
		local route=()
		[[ "${envs[*]}" != *NCCL_MESH_RELAY_RELAYS* ]] ||
			route=(NCCL_MESH_RELAY_NAME="h$r")
		[ -z "${ROUTES[$r]:-}" ] ||
			route+=(NCCL_MESH_RELAY_ROUTES="${ROUTES[$r]}")
		env "${envs[@]}" "${route[@]}" \
			NCCL_MESH_ADVERTISE_ADDRS="127.0.0.1$r" \
			timeout 120 "$meshinfo" --cluster --plugin "$plugin" \
			--rendezvous "127.0.0.1:$port" --rank $r --size 3 \
			--timeout 30 "$@" >"$tmp/r$r.log" 2>"$tmp/r$r.err" &
		bg[r]=$!
		pids+=($!)
	done
	for r in 0 1 2; do
		wait "${bg[$r]}"
		eval "rc$r=$?"
	done
}

# json_check FILE PYTHON-EXPRESSION: the expression over the report `d`
json_check() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ok = eval("(" + sys.argv[2] + ")", {"d": d})
if not ok:
    print("JSON check failed:", sys.argv[2])
    print(json.dumps(d, indent=1)[:4000])
sys.exit(0 if ok else 1)
EOF
}

case_direct() {
	local t0=$SECONDS
	ROUTES=()
	cluster NCCL_MESH_CONF="$src/tests/functional/loopback.conf" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" -- \
		--json "$tmp/c.json" --dot "$tmp/c.dot"
	[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] &&
		grep -q "6 of 6 pairs connected" "$tmp/r0.log" &&
		json_check "$tmp/c.json" '
d["version"] == 1 and len(d["hosts"]) == 3 and len(d["pairs"]) == 6
and all(p["ok"] and p["class"] == "same-DC" and p["module"] == "tcp-xdc"
        and p["encryption"] == "none"
        and p["gbps"] > 0 and p["lat_us"] > 0 and p["error"] is None
        and p["remote"].startswith("127.0.0.1%d:" % p["to"])
        and 0 < p["rtt_us"] and p["bdp_bytes"] > 0
        and p["inflight_max_bytes"] > p["bdp_bytes"]
        for p in d["pairs"])
and not [f for f in d["findings"] if f["kind"] == "window"]
and all(len(h["config_sha256"]) == 64 and len(h["plugin_sha256"]) == 64
        for h in d["hosts"])
and d["nccl_env"]["NCCL_NET"] == "Mesh"' &&
		[ "$(grep -Ec '^ +h[0-9]+ \[label=' "$tmp/c.dot")" -eq 3 ] &&
		[ "$(grep -c -- ' -- ' "$tmp/c.dot")" -eq 3 ]
	check direct $? "six pairs connected and measured, exit 0 everywhere, JSON and DOT in $((SECONDS - t0)) s"
	if ! command -v dot >/dev/null; then
		echo "SKIP: direct-svg: Graphviz's dot is not installed"
		return
	fi
	cluster NCCL_MESH_CONF="$src/tests/functional/loopback.conf" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" -- \
		--svg "$tmp/c.svg" --burst-bytes 4M --lat-iters 10
	[ "$rc0" -eq 0 ] && grep -q "<svg" "$tmp/c.svg" &&
		[ "$(grep -c 'class="node"' "$tmp/c.svg")" -eq 3 ] &&
		[ "$(grep -c 'class="edge"' "$tmp/c.svg")" -eq 3 ]
	check direct-svg $? "the picture rendered by Graphviz has three nodes and three edges"
}

# relay_env PORT: RELAY_ENV, the relay setup of tests/functional/relay.sh
relay_env() {
	RELAY_ENV=(NCCL_MESH_CONF="$src/tests/functional/relay.conf"
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc:$build/modules/relay"
		NCCL_MESH_RELAY_RELAYS="r1 127.0.0.2:$1")
}

# the relay module and meshrelay are built, else SKIP for the case
relay_built() {
	[ -x "$meshrelay" ] && [ -e "$build/modules/relay/mesh-relay.so" ] &&
		return 0
	echo "SKIP: $1: the relay module or meshrelay is not built"
	return 1
}

case_relayed() {
	local port
	relay_built relayed || return 0
	port=$(free_port 127.0.0.2)
	relay_env "$port"
	env "${RELAY_ENV[@]}" NCCL_MESH_RELAY_NAME=r1 \
		NCCL_MESH_RELAY_PORT="$port" "$meshrelay" >"$tmp/relay.log" 2>&1 &
	local relay=$!
	pids+=("$relay")
	for _ in $(seq 100); do
		ss -Htln "sport = :$port" | grep -q . && break
		sleep 0.1
	done
	ROUTES=("127.0.0.12 via r1")
	cluster "${RELAY_ENV[@]}" -- --json "$tmp/r.json" --dot "$tmp/r.dot" --burst-bytes 16M
	kill "$relay" 2>/dev/null
	ROUTES=()
	[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] &&
		json_check "$tmp/r.json" '
all(p["ok"] for p in d["pairs"])
and [(p["from"], p["to"]) for p in d["pairs"] if p["class"] == "relayed"] == [(0, 2)]
and [p["relays"] for p in d["pairs"] if p["class"] == "relayed"] == [["r1"]]
and [p["remote"].startswith("127.0.0.12:") for p in d["pairs"] if p["class"] == "relayed"] == [True]' &&
		grep -qE 'color=(orange|red).*via r1' "$tmp/r.dot"
	check relayed $? "0 -> 2 relayed via r1, the rest direct, exit 0"
}

case_dead_relay() {
	local port t0=$SECONDS
	relay_built dead-relay || return 0
	port=$(free_port 127.0.0.2)
	relay_env "$port"
	ROUTES=("127.0.0.12 via r1")
	cluster "${RELAY_ENV[@]}" -- --json "$tmp/d.json" --burst-bytes 8M
	[ "$rc0" -eq 1 ] && [ "$rc1" -eq 1 ] && [ "$rc2" -eq 1 ] &&
		[ $((SECONDS - t0)) -lt 40 ] &&
		json_check "$tmp/d.json" '
[(p["from"], p["to"], p["error"]) for p in d["pairs"] if not p["ok"]] == [(0, 2, "no relay")]
and "r1" in [p for p in d["pairs"] if not p["ok"]][0]["reason"]
and [(f["kind"], f["from"], f["to"]) for f in d["findings"]
     if f["kind"] == "unreachable" or "does not" in f["text"]]
    == [("asymmetric", 0, 2)]'
	check dead-relay $? "the unrelayed pair fails as 'no relay', every rank exits 1, in $((SECONDS - t0)) s"
}

case_encrypted() {
	local t0=$SECONDS
	ROUTES=()
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' \
		>"$tmp/key")
	cat >"$tmp/encrypted.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
auth_key_file = "$tmp/key";
tcp-xdc: { ifname = "lo"; streams = 2; threads = 2; encrypt = true; };
CONF
	cluster NCCL_MESH_CONF="$tmp/encrypted.conf" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" -- \
		--json "$tmp/c.json" --burst-bytes 4M --lat-iters 10
	[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] &&
		[ "$(grep -c ' tcp-xdc .*  AES-256-GCM  ' "$tmp/r0.log")" -eq 6 ] &&
		json_check "$tmp/c.json" '
len(d["pairs"]) == 6
and all(p["ok"] and p["encryption"] == "AES-256-GCM" for p in d["pairs"])'
	check encrypted $? "every pair reports AES-256-GCM (JSON and text), in $((SECONDS - t0)) s"
}

case_window() {
	local t0=$SECONDS
	ROUTES=()
	cat >"$tmp/window.conf" <<CONF
version = 1;
modules = [ "tcp-xdc" ];
tcp-xdc: { ifname = "lo"; streams = 1; threads = 2; rcvbuf = "64K";
           speed_mbps = 100000; };
CONF
	cluster NCCL_MESH_CONF="$tmp/window.conf" \
		NCCL_MESH_MODULE_PATH="$build/modules/tcp-xdc" -- \
		--json "$tmp/w.json" --dot "$tmp/w.dot" --burst-bytes 4M \
		--lat-iters 10
	[ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] &&
		[ "$(grep -Ec 'color=red, dir=none, penwidth=3, fontcolor=red, label="(window|degraded|asymmetric): [0-9.]* / [0-9.]* Gb/s"' "$tmp/w.dot")" -eq 3 ] &&
		[ "$(grep -Ec '  rtt [0-9.]+ (us|ms)  bdp [0-9.]+ [KM]iB, window 64 KiB$' "$tmp/r0.log")" -eq 6 ] &&
		[ "$(grep -c '^  window: rail 0: .* tcp-xdc connection keeps at most 64 KiB, .*; that is 1 stream x 64 KiB, the window half of [^ ]* receive buffer opens (tcp-xdc.rcvbuf, 128 KiB); raise tcp-xdc.rcvbuf, or set it to 0 for autotuning, or tcp-xdc.streams$' "$tmp/r0.log")" -eq 3 ] &&
		json_check "$tmp/w.json" '
all(p["rtt_us"] > 0 and p["inflight_max_bytes"] == 65536
    and abs(p["bdp_bytes"] - 100e9 / 8 * p["rtt_us"] / 1e6) <= 1
    + 1e-6 * p["bdp_bytes"] and p["bdp_measured_bytes"] > 0
    for p in d["pairs"])
and all(h["tcp_xdc"] == {"streams": 1, "streams_max": 64,
                         "send_buffer_max": h["tcp_xdc"]["send_buffer_max"],
                         "send_buffer_by": "tcp_wmem",
                         "recv_buffer_max": 131072, "recv_buffer_by": "rcvbuf",
                         "keep_max": h["tcp_xdc"]["keep_max"]}
        for h in d["hosts"])
and sorted(tuple(sorted((f["from"], f["to"]))) for f in d["findings"]
           if f["kind"] == "window") == [(0, 1), (0, 2), (1, 2)]' &&
		schema_check "$tmp/w.json"
	check window $? "every pair's 64 KiB window below its product at 100 Gbit/s, three findings, in $((SECONDS - t0)) s"
}

# schema_check FILE: the report against docs/meshinfo-cluster.schema.json
# (SKIP said, and true, without python3-jsonschema)
schema_check() {
	python3 - "$1" "$src/docs/meshinfo-cluster.schema.json" <<'EOF'
import json, sys
try:
    import jsonschema
except ImportError:
    print("SKIP: schema validation (no python3-jsonschema)")
    sys.exit(0)
jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))
EOF
}

for c in "${cases[@]}"; do
	"case_${c//-/_}" || check "$c" 1 "set-up failed"
done
[ "$failures" -eq 0 ] || exit 1
