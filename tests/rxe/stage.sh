#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The whole rxe stage: real verbs over Soft-RoCE between network namespaces,
# as root, on a host whose kernel has rdma_rxe or in the guest that
# tests/rxe/run.sh boots (one boot for the whole stage).  Every check runs
# as its own process under `timeout`, so a hang fails that check quickly
# and the stage goes on.  A check that cannot run here exits 77 and counts
# as skipped.  Ends with "N passed, N failed, N skipped" and exits
# non-zero on any failure.
#
#   0. the mesh (tests/rxe/net.sh): namespaces, veth links, rxe devices, and
#      an RC ping-pong whose packets must cross the link.
#   1. two nodes (net.sh up 2): GID auto-selection against the real
#      rxe tables; meshperf rxn2 (server) <- rxn1 (client) over ib-fabric for
#      ABI 10, 11 and 12, 0 B .. 256 MiB, every byte verified; several QPs
#      per connection with grouped receives; the eager path for small
#      messages (max_recvs 1); ib-fabric's error paths
#      (tests/rxe/errors.sh): an oversize send, a work completion error
#      from a stale rkey, and a refused RoCE v1 / v2 GID mix, each of
#      which must make both processes fail cleanly and quickly; the link
#      down under traffic (tests/rxe/outage.sh): for 5 s, survived with
#      every byte, and past outage_ms, failed on both ends with the reason.
#   2. rdma-mesh (tests/rxe/mesh.sh): a triangle, a node with one cable,
#      two cables between two nodes, one of them down for 5 s under traffic; relay over rdma-mesh (tests/rxe/relay.sh):
#      a ring of four whose diagonal pairs go through a neighbour, a line of
#      four whose ends go through two relays, a relay killed mid-transfer;
#      meshinfo --cluster on the triangle and the ring (tests/rxe/cluster.sh):
#      each pair's cable, the relayed pairs and their relays, the picture.
#   3. two datacenters (two hosts each, rxe inside a DC, only a routed TCP
#      link between them): meshinfo per host, then meshperf over every host
#      pair, with the plugin's per-connection lines showing ib-fabric for
#      same-DC pairs and tcp-xdc for cross-DC pairs.
#
# usage: tests/rxe/stage.sh BUILD_DIR   (BUILD_DIR relative to the repo)
# Environment: RXE_TEST_MODULE=tcp-xdc runs the same harness with tcp-xdc
# in place of ib-fabric (to check the harness itself); RXE_TEST_ONLY=REGEX
# runs only the checks whose names match.
# shellcheck disable=SC2317 # the checks are called by name (--check FUNC)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
# shellcheck source=tests/rxe/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/rxe/net.sh
. "$here/net.sh"
# shellcheck source=tests/rxe/errors.sh
. "$here/errors.sh"
# shellcheck source=tests/rxe/mesh.sh
. "$here/mesh.sh"
# shellcheck source=tests/rxe/relay.sh
. "$here/relay.sh"
# shellcheck source=tests/rxe/cluster.sh
. "$here/cluster.sh"
# shellcheck source=tests/rxe/close.sh
[ -e "$here/close.sh" ] && . "$here/close.sh"
# shellcheck source=tests/rxe/outage.sh
. "$here/outage.sh"
# shellcheck source=tests/rxe/conformance.sh
. "$here/conformance.sh"

# ---------------------------------------------------------------- setup

setup_env() {
	local build=$1

	case $build in
	/*) BUILD=$build ;;
	*) BUILD=$src/$build ;;
	esac
	MESHPERF=$BUILD/tools/meshperf/meshperf
	MESHINFO=$BUILD/tools/meshinfo/meshinfo
	PLUGIN=$BUILD/core/libnccl-net-mesh.so
	XDC_MODULE=$BUILD/modules/tcp-xdc/mesh-tcp-xdc.so
	MODULE_PATH=$BUILD/modules/ib-fabric:$BUILD/modules/tcp-xdc
	LOGDIR=${RXE_LOGDIR:-$BUILD/rxe-logs}
	MOD=${RXE_TEST_MODULE:-ib-fabric}
	# host libraries whose soname the guest lacks (run.sh copies them)
	# (grep reads all of ldd's output: under pipefail, -q would fail ldd)
	if [ -d "$BUILD/rxe-libs" ] &&
		ldd "$MESHINFO" "$XDC_MODULE" |
		grep 'not found' >/dev/null; then
		export LD_LIBRARY_PATH=$BUILD/rxe-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	fi
	export BUILD MESHPERF MESHINFO PLUGIN XDC_MODULE MODULE_PATH LOGDIR MOD DC_PREFIX
}

# Pair sizes: the full range, few iterations for the large ones (the guest
# is emulated: about 0.5 Gb/s, and checking every byte is slow too).
# Limits only end hangs: meshperf's --timeout (no progress) of PAIR_STALL_S
# fires first, then the run's PAIR_LIMIT_S, then the check's; on a loaded
# two-core host a pair went 60 s without progress and still worked.
PAIR_STALL_S=240
PAIR_LIMIT_S=840
PAIR_ARGS=(--timeout "$PAIR_STALL_S" --sizes '0,8,4K,64K,1M,16M,256M' --iters 100
	   --budget 32M --mem 256M --lat-max 64K)
PAIR_NSIZES=7
PAIR_PORT=18700

# host_env HOST (rxn1, rxn2, dc0-a ...): extra VAR=value words for the
# process on HOST; only when the harness runs on tcp-xdc alone.
host_env() {
	[ "$MOD" = tcp-xdc ] || return 0
	case $1 in
	rxn1) echo NCCL_MESH_MODULES=tcp-xdc NCCL_MESH_TCP_XDC_IFNAME==v12 ;;
	rxn2) echo NCCL_MESH_MODULES=tcp-xdc NCCL_MESH_TCP_XDC_IFNAME==v21 ;;
	dc*) echo NCCL_MESH_MODULES=tcp-xdc \
		"NCCL_MESH_RAILS=tcp-xdc/up${DC_HOST_NS[$1]#h}" ;;
	esac
}

# --------------------------------------------------------- checks: pair

check_mesh_up() {
	rxnet_up 2 && rxnet_status
}

check_mesh_probe() {
	rxnet_probe
}

check_binaries() {
	local f

	for f in "$MESHPERF" "$MESHINFO" "$PLUGIN" "$XDC_MODULE"; do
		[ -e "$f" ] || { echo "missing $f (build first)"; return 1; }
		if ldd "$f" | grep 'not found'; then
			echo "$f: libraries missing in the guest"
			return 1
		fi
	done
	if [ "$MOD" = ib-fabric ]; then
		f=$BUILD/modules/ib-fabric/mesh-ib-fabric.so
		[ -e "$f" ] || { echo "missing $f (libibverbs-dev on the build host?)"; return 1; }
		if ldd "$f" | grep 'not found'; then
			echo "$f: libraries missing in the guest"
			return 1
		fi
	fi
	"$MESHINFO" --version
}

# meshinfo_host NS HOST [args]: meshinfo as HOST sees it, in namespace NS.
meshinfo_host() {
	local n=$1 host=$2

	shift 2
	# shellcheck disable=SC2046,SC2086 # lists of VAR=value words
	ip netns exec "$n" env NCCL_MESH_HOSTNAME="$host" NCCL_MESH_CONF="$CONF" \
		NCCL_MESH_MODULE_PATH="$MODULE_PATH" NCCL_MESH_LOG=info \
		$(host_env "$host") ${MESHINFO_ENV:-} "$MESHINFO" "$@"
}

# check_gid NODE DEV: the GID ib-fabric picks for DEV is the RoCE v2
# IPv4-mapped entry found by reading the table directly.
check_gid() {
	local node=$1 dev=$2 want out

	CONF=$here/pair.conf
	want=$(rxe_gid_index "$dev") || { echo "$dev: no RoCE v2 IPv4 GID"; return 1; }
	echo "$dev table:"
	rxe_gid_table "$dev" | sed 's/^/    /'
	echo "expected index $want"
	if [ "$MOD" != ib-fabric ]; then
		echo "SKIP plugin pick: module $MOD"
		return 0
	fi
	out=$(meshinfo_host "rxn$node" "rxn$node" -v 2>&1) || {
		printf '%s\n' "$out"
		return 1
	}
	printf '%s\n' "$out" | grep -iE "$dev|gid" | sed 's/^/    /'
	gid_line_has "$out" "$dev" "$want"
}

# gid_line_has TEXT DEV INDEX: some line of TEXT names DEV with GID index
# INDEX ("gid 1", "gid_index 1", "gid index 1", "gid=1", "GID[1]" ...).
gid_line_has() {
	printf '%s\n' "$1" | grep -F "$2" |
		grep -qiE "gid[ _-]?(index)?[ =:\[]*$3([^0-9]|$)" || {
		echo "no line names $2 with GID index $3"
		return 1
	}
}

# An IPv6 global address (and with it link-local entries) appears in the
# table: the default pick stays on the IPv4-mapped RoCE v2 entry,
# addr_family=ipv6 takes the global IPv6 one (never the link-local),
# addr_range keeps or excludes the device, gid_overrides forces an index.
check_gid_ipv6() {
	local want6 out rc=0

	CONF=$here/pair.conf
	ip netns exec rxn1 sysctl -qw net.ipv6.conf.v12.disable_ipv6=0
	ip -n rxn1 addr add fd77:12::1/64 dev v12 nodad
	sleep 1
	echo "rxe12 table with IPv6:"
	rxe_gid_table rxe12 | sed 's/^/    /'
	want6=$(rxe_gid_index rxe12 'fd77:0012:*') || {
		echo "the IPv6 address did not reach the GID table as RoCE v2"
		rc=1
	}
	if [ "$rc" -eq 0 ] && [ "$MOD" = ib-fabric ]; then
		gid_case "default" "$(rxe_gid_index rxe12)" || rc=1
		gid_case "IPv6 preferred" "$want6" \
			NCCL_MESH_IB_FABRIC_ADDR_FAMILY=ipv6 || rc=1
		gid_case "range 10.77.12.0/24" "$(rxe_gid_index rxe12)" \
			NCCL_MESH_IB_FABRIC_ADDR_FAMILY=ipv6 \
			NCCL_MESH_IB_FABRIC_ADDR_RANGE=10.77.12.0/24 || rc=1
		gid_case "override rxe12:1=$want6" "$want6" \
			"NCCL_MESH_IB_FABRIC_GID_OVERRIDES=rxe12:1=$want6" || rc=1
		out=$(MESHINFO_ENV=NCCL_MESH_IB_FABRIC_ADDR_RANGE=192.0.2.0/24 \
			meshinfo_host rxn1 rxn1 -v 2>&1) || true
		if printf '%s\n' "$out" | grep -qE '^ib-fabric +[^ ]+ +ready'; then
			echo "range 192.0.2.0/24: rxe12 still used"
			rc=1
		else
			echo "range 192.0.2.0/24: no GID fits, rxe12 not used: ok"
		fi
	fi
	ip -n rxn1 addr del fd77:12::1/64 dev v12 || true
	ip netns exec rxn1 sysctl -qw net.ipv6.conf.v12.disable_ipv6=1
	return "$rc"
}

# gid_case NAME INDEX [VAR=value...]: with that environment, meshinfo on
# rxn1 shows ib-fabric using rxe12 with GID INDEX.
gid_case() {
	local name=$1 want=$2 out

	shift 2
	out=$(MESHINFO_ENV="$*" meshinfo_host rxn1 rxn1 -v 2>&1) || {
		printf '%s\n' "$out"
		return 1
	}
	if gid_line_has "$out" rxe12 "$want"; then
		echo "$name: GID $want: ok"
	else
		echo "$name:"
		printf '%s\n' "$out" | grep -iE 'rxe12|gid' | sed 's/^/    /'
		return 1
	fi
}

# pair_run TAG [client args]: meshperf rxn2 <- rxn1; the connections must
# be same-DC over the module under test.
pair_run() {
	local tag=$1 port=$((PAIR_PORT + RANDOM % 200)) rc=0

	shift
	CONF=$here/pair.conf
	read -ra MP_SERVER_ENV <<<"$(host_env rxn2)"
	read -ra MP_CLIENT_ENV <<<"$(host_env rxn1)"
	mp_run "$tag" rxn2 rxn2 10.77.12.2 rxn1 rxn1 "$port" "$PAIR_LIMIT_S" "$@" ||
		rc=$?
	if [ "$rc" -ne 0 ]; then
		mp_show_logs "$tag"
		echo "$tag: meshperf failed ($rc)"
		return 1
	fi
	if ! mp_check "$tag" "$PAIR_NSIZES" ||
	   ! mp_expect_conns "$tag" "$MOD" same-DC; then
		mp_show_logs "$tag"
		return 1
	fi
	mp_conn_lines "$tag" | sed 's/^/    /'
	grep '"event":"result"' "$LOGDIR/$tag.client" |
		sed 's/.*"size":\([0-9]*\),.*"iters":\([0-9]*\),.*"gbits_per_s":\([0-9.]*\),.*"lat_us":\([0-9.a-z]*\).*/    size \1: \2 iters, \3 Gb\/s, lat \4 us/'
}

check_pair_abi() {
	pair_run "pair-abi$1" --abi "$1" "${PAIR_ARGS[@]}"
}

# several QPs per connection, messages spread over them, grouped receives
check_pair_qps() {
	MP_ENV=(NCCL_MESH_IB_FABRIC_QPS_PER_CONN=4)
	PAIR_NSIZES=5
	pair_run pair-qps4 --abi 12 --timeout "$PAIR_STALL_S" --sizes '0,8,64K,1M,8M' \
		--iters 64 --budget 16M --mem 64M --lat-max 64K
}

# the eager path (max_recvs 1, host memory): messages up to 1 KiB skip the
# receive FIFO, bigger ones take it, every byte verified; with RECV_SIZE
# the receives are posted bigger than the messages, as NCCL posts whole
# step buffers, so small messages go eager into receives that announced
# themselves and the sender skips those FIFO entries
check_pair_eager() {
	local tag=pair-eager${1:+-recv$1}

	MP_ENV=(NCCL_MESH_IB_FABRIC_MAX_RECVS=1)
	PAIR_NSIZES=6
	pair_run "$tag" --abi 12 --timeout "$PAIR_STALL_S" \
		--sizes '0,8,1K,4K,64K,1M' \
		--iters 64 --budget 16M --mem 64M --lat-max 64K \
		${1:+--recv-size "$1"} || return 1
	grep -qE 'recv comm [0-9]+ from peer .*, eager up to 1024 bytes' \
		"$LOGDIR/$tag.server" || {
		echo "$tag: the receiver did not take the eager path"
		return 1
	}
}

# ---------------------------------------------------- checks: two DCs

check_mesh_down() {
	rxnet_down
	! rxnet_ns_exists rxn1 || { echo "rxn1 is still there"; return 1; }
}

check_dc_topology() {
	dc_topology
	ip netns exec "$(dc_ns dc0-a)" rdma link show | grep rxf
	# the topology outlives this check; the main process removes it
	RXE_NS=()
	RXE_DEVS=()
}

# ping FROM TO_ADDR: must succeed or fail (want ok|fail)
dc_ping() {
	local from=$1 to=$2 want=$3

	if ip netns exec "$(dc_ns "$from")" ping -c 1 -W 3 "$to" >/dev/null 2>&1; then
		[ "$want" = ok ] || { echo "$from reaches $to: it must not"; return 1; }
	else
		[ "$want" = fail ] || { echo "$from cannot reach $to"; return 1; }
	fi
	echo "$from -> $to: $want as expected"
}

# Inside a DC the fabric link works, between DCs only the uplinks do: no
# fabric address (and so no RoCE endpoint) is reachable from the other DC.
check_dc_reach() {
	dc_ping dc0-a "${DC_FABRIC[dc0-b]}" ok
	dc_ping dc1-b "${DC_FABRIC[dc1-a]}" ok
	dc_ping dc0-a "${DC_UPLINK[dc1-a]}" ok
	dc_ping dc1-b "${DC_UPLINK[dc0-b]}" ok
	dc_ping dc0-a "${DC_FABRIC[dc1-a]}" fail
	dc_ping dc0-b "${DC_FABRIC[dc1-b]}" fail
	dc_ping dc1-a "${DC_FABRIC[dc0-a]}" fail
	dc_ping dc1-b "${DC_FABRIC[dc0-b]}" fail
}

dc_same_mod() {
	echo "$MOD"
}

# meshinfo on HOST: its modules load, and the path class matrix shows
# same-DC peers over ib-fabric and cross-DC peers over tcp-xdc.
check_dc_meshinfo() {
	local host=$1 out same

	CONF=$here/two-dc.conf
	same=$(dc_same_mod)
	out=$(meshinfo_host "$(dc_ns "$host")" "$host" 2>&1) || {
		printf '%s\n' "$out"
		return 1
	}
	printf '%s\n' "$out" | sed -n '/^# modules/,/^# effective/p' | sed 's/^/    /'
	printf '%s\n' "$out" | grep -qE "^0 +mesh0 +fabricId [0-9]+ +dc ${DC_OF[$host]} " || {
		echo "$host: rail mesh0 is not in dc ${DC_OF[$host]}"
		return 1
	}
	printf '%s\n' "$out" | grep -E '^mesh0 ' | grep -q "same-DC $same" || {
		echo "$host: mesh0 has no same-DC $same column"
		return 1
	}
	printf '%s\n' "$out" | grep -E '^mesh0 ' | grep -q 'cross-DC tcp-xdc' || {
		echo "$host: mesh0 has no cross-DC tcp-xdc column"
		return 1
	}
	printf '%s\n' "$out" | grep -E '^mesh0 ' | grep -q 'cross-DC ib-fabric' && {
		echo "$host: cross-DC over ib-fabric"
		return 1
	}
	return 0
}

DC_ARGS=(--abi 12 --timeout 60 --sizes '0,8,4K,1M,8M' --iters 50 --budget 16M
	 --mem 64M --lat-max 4K)
DC_NSIZES=5

# check_dc_pair SERVER CLIENT: meshperf between two hosts of the topology,
# bootstrap over the uplinks; every connection of the run must be over the
# module of its path class.
check_dc_pair() {
	local srv=$1 cli=$2 tag="dc-$1-$2" rc=0 mod cls

	CONF=$here/two-dc.conf
	if [ "${DC_OF[$srv]}" = "${DC_OF[$cli]}" ]; then
		mod=$(dc_same_mod)
		cls="same-DC"
	else
		mod=tcp-xdc
		cls="cross-DC"
	fi
	read -ra MP_SERVER_ENV <<<"$(host_env "$srv")"
	read -ra MP_CLIENT_ENV <<<"$(host_env "$cli")"
	# a port of its own per pair: no wait for an earlier run's TIME_WAIT
	mp_run "$tag" "$(dc_ns "$srv")" "$srv" "${DC_UPLINK[$srv]}" \
		"$(dc_ns "$cli")" "$cli" "$((18900 + ${DC_HOST_NS[$srv]#h} * 10 + ${DC_HOST_NS[$cli]#h}))" 200 "${DC_ARGS[@]}" || rc=$?
	if [ "$rc" -ne 0 ]; then
		mp_show_logs "$tag"
		echo "$tag: meshperf failed ($rc)"
		return 1
	fi
	if ! mp_check "$tag" "$DC_NSIZES" ||
	   ! mp_expect_conns "$tag" "$mod" "$cls"; then
		mp_show_logs "$tag"
		return 1
	fi
	mp_conn_lines "$tag" | sed 's/^/    /'
}

# ------------------------------------------------------------- driver

PASS=0
FAIL=0
SKIP=0
FAILED=()

# check NAME LIMIT FUNC [args]: FUNC in its own process under timeout;
# its status 77 means it could not run here (skipped).
check() {
	local name=$1 limit=$2 t0=$SECONDS rc=0 out

	shift 2
	if [ -n "${RXE_TEST_ONLY:-}" ] && ! [[ $name =~ $RXE_TEST_ONLY ]]; then
		return 0
	fi
	out=$LOGDIR/check-$((PASS + FAIL + SKIP + 1)).log
	timeout -k 10 "$limit" bash "$0" --check "$@" >"$out" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		PASS=$((PASS + 1))
		echo "PASS: $name ($((SECONDS - t0)) s)"
	elif [ "$rc" -eq 77 ]; then
		SKIP=$((SKIP + 1))
		echo "SKIP: $name"
	else
		FAIL=$((FAIL + 1))
		FAILED+=("$name")
		[ "$rc" -eq 124 ] && echo "(killed after $limit s)" >>"$out"
		echo "FAIL: $name (rc=$rc, $((SECONDS - t0)) s)"
	fi
	sed 's/^/    /' "$out"
	return "$rc"
}

# Namespaces and devices of the two-DC topology, by name, for the cleanup
# of the main process (they were made by a child).
main_cleanup() {
	local i

	RXE_NS=("$DC_PREFIX-r")
	for i in 1 2 3 4; do
		RXE_NS+=("$DC_PREFIX-h$i")
	done
	RXE_DEVS=(rxf12 rxf21 rxf34 rxf43)
	rxe_cleanup
	mesh_cleanup
	rxnet_down >/dev/null 2>&1 || true
}

main() {
	local t0=$SECONDS abi h s c

	[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
	[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (namespaces, rxe devices)" >&2; exit 2; }
	setup_env "$1"
	rm -rf "$LOGDIR"
	mkdir -p "$LOGDIR"
	trap main_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	echo "rxe stage: module $MOD, build $BUILD, kernel $(uname -r)"

	if check "mesh up: 2 nodes, one rxe link" 90 check_mesh_up &&
	   check "mesh probe: RC ping-pong crosses the link" 90 check_mesh_probe; then
		check "binaries load" 60 check_binaries || true
		check "GID pick rxe12 (real table)" 60 check_gid 1 rxe12 || true
		check "GID pick rxe21 (real table)" 60 check_gid 2 rxe21 || true
		for abi in 10 11 12; do
			check "meshperf ABI v$abi rxn2 <- rxn1, 0 B..256 MiB" 900 \
				check_pair_abi "$abi" || true
		done
		if [ "$MOD" = ib-fabric ]; then
			check "meshperf 4 QPs per connection, grouped receives" 900 \
				check_pair_qps || true
			check "meshperf eager path, 0 B..1 MiB" 900 \
				check_pair_eager || true
			check "meshperf eager path, receives of 64 KiB" 900 \
				check_pair_eager 64K || true
			check "ib-fabric error: oversize send fails the isend" 180 \
				check_error_oversize || true
			check "ib-fabric error: oversize send into an eager receive" 180 \
				check_error_eager_oversize || true
			check "ib-fabric error: eager message too big for its receive" 180 \
				check_error_eager_small || true
			check "ib-fabric error: stale rkey gives a completion error" 180 \
				check_error_completion || true
			check "ib-fabric error: RoCE v1 and v2 GIDs are refused" 300 \
				check_error_gid_types || true
		fi
		check "GID pick rxe12 with IPv6 entries" 60 check_gid_ipv6 || true
		if [ "$MOD" = ib-fabric ]; then
			! declare -F close_run_checks >/dev/null || close_run_checks
			outage_run_checks
			conf_run_checks
		fi
	fi
	check "mesh down" 60 check_mesh_down || true

	if [ "$MOD" = ib-fabric ]; then
		mesh_run_checks
		relay_run_checks
		cluster_run_checks
	fi

	if check "two-DC topology" 90 check_dc_topology; then
		check "two-DC reachability (no fabric route across)" 90 check_dc_reach || true
		for h in "${DC_HOSTS[@]}"; do
			check "two-DC meshinfo $h" 90 check_dc_meshinfo "$h" || true
		done
		for s in 0 1 2 3; do
			for c in $(seq $((s + 1)) 3); do
				check "two-DC pair ${DC_HOSTS[$s]} <- ${DC_HOSTS[$c]}" 240 \
					check_dc_pair "${DC_HOSTS[$s]}" "${DC_HOSTS[$c]}" || true
			done
		done
	fi

	echo "rxe stage took $((SECONDS - t0)) s; logs in $LOGDIR"
	[ "$FAIL" -eq 0 ] || printf 'failed: %s\n' "${FAILED[@]}"
	echo "$PASS passed, $FAIL failed, $SKIP skipped"
	[ "$FAIL" -eq 0 ]
}

# A check runs in a process of its own: "stage.sh --check FUNC [args]".
if [ "${1:-}" = --check ]; then
	shift
	trap rxe_cleanup EXIT
	trap 'exit 143' TERM
	"$@"
	exit
fi
# one line: bash reads no further while main runs
main "$@"; exit $?
