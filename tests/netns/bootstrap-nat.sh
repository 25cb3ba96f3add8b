#!/bin/bash
# SPDX-License-Identifier: MIT
#
# meshinfo --cluster's check of NCCL's own bootstrap, on six hosts in two
# DCs behind NAT (xdc_cluster_topology in lib.sh) with a management
# network beside the LANs (xdc_mgmt_network).  The plugin's data path
# crosses the NAT on forwarded port ranges (cluster.conf) in every run;
# only the interface NCCL's bootstrap takes changes:
#   trap     NCCL_SOCKET_IFNAME=lan- on every host, the NAT'd LANs: no
#            host of one DC reaches a bootstrap address of the other.
#            Every rank exits 3; one bootstrap finding per host, naming
#            the three hosts of the other DC that time out; every data
#            pair still connects; the check takes < 5 s.
#   one-host NCCL_SOCKET_IFNAME=mgmt everywhere but b3, left on lan-:
#            exactly a1, a2, a3 -> b3 fail, one finding about b3's
#            address on lan-b3, exit 3, < 5 s.
#   fixed    NCCL_SOCKET_IFNAME=mgmt everywhere (docs/deploy.md's first
#            recipe): every bootstrap pair connects, no bootstrap
#            finding, exit 0, and the NCCL environment printed for the
#            job carries NCCL_SOCKET_IFNAME=mgmt.
# The bursts are small and the links unshaped: the data pairs only need
# to connect here (tests/netns/cluster.sh measures them).
#
# usage: bootstrap-nat.sh MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

# the check's bar: six hosts, every pair, in under 5 s
boot_max_s=5

cluster_scenario "$@"
XDC_RATE=""
xdc_cluster_topology 3
xdc_mgmt_network "${XDC_HOSTS[@]}"
size=${#XDC_HOSTS[@]}
out=$NETNS_TMP/out
mkdir -p "$out"

# run TAG EXPECTED_RC IFNAME_OF_HOST...: one meshinfo --cluster, rank r
# in host XDC_HOSTS[r] with NCCL_SOCKET_IFNAME the r-th word
run() {
	local tag=$1 want=$2 r h rc addr port pids=() extra ifs

	shift 2
	ifs=("$@")
	for ((r = 0; r < size; r++)); do
		h=${XDC_HOSTS[$r]}
		read -r addr port < <(xdc_dial "$h" a1)
		extra=()
		[ "$r" -eq 0 ] && extra=(--json "$out/$tag.json"
					 --dot "$out/$tag.dot")
		netns_spawn "$h" "$NETNS_TMP/$tag.rank$r" env \
			NCCL_MESH_HOSTNAME="$h" NCCL_MESH_CONF="$CONF" \
			NCCL_MESH_MODULE_PATH="$MODULE_DIR" \
			NCCL_SOCKET_IFNAME="${ifs[$r]}" \
			"$MESHINFO" --cluster --rendezvous "$addr:$port" \
			--rank "$r" --size "$size" --plugin "$PLUGIN" \
			--timeout 30 --burst-ms 20 --burst-bytes 256K \
			--lat-iters 2 "${extra[@]}"
		pids+=("$NETNS_LAST_PID")
	done
	for ((r = 0; r < size; r++)); do
		rc=0
		netns_wait "${pids[$r]}" 90 || rc=$?
		[ "$rc" -eq "$want" ] || {
			for ((k = 0; k < size; k++)); do
				echo "---- $tag rank $k (${XDC_HOSTS[$k]}) ----"
				cat "$NETNS_TMP/$tag.rank$k"
			done
			netns_die "$tag: rank $r (${XDC_HOSTS[$r]}) exited $rc, expected $want"
		}
	done
	sed -n '/^NCCL bootstrap/,/^$/p;/^findings/,/^$/p' "$NETNS_TMP/$tag.rank0"
	echo "PASS $tag: every rank exits $want"
}

# report TAG CHECKS...: the JSON against the schema and the checks
report() {
	local tag=$1

	shift
	python3 "$check" "$out/$tag.json" --schema "$schema" --hosts "$size" \
		--ok-pairs $((size * (size - 1))) --boot-max-s "$boot_max_s" \
		"$@" || {
		cat "$NETNS_TMP/$tag.rank0"
		netns_die "$tag: the report does not show the scenario"
	}
}

# text LINE_RE TAG: rank 0's text report has a line matching
text() {
	grep -Eq -- "$1" "$NETNS_TMP/$2.rank0" ||
		netns_die "$2: rank 0's text report has no line matching '$1'"
}

# trap: every cross-DC bootstrap pair times out, nothing else fails
args=()
for d in a b; do
	for k in 1 2 3; do
		o=$([ "$d" = a ] && echo b || echo a)
		args+=(--boot-finding "$d$k=${o}1+${o}2+${o}3")
		for j in 1 2 3; do
			args+=(--boot-failed "$o$j:$d$k=timed out")
		done
	done
done
run trap 3 lan- lan- lan- lan- lan- lan-
report trap "${args[@]}"
text "^  bootstrap: NCCL's init will hang in ncclCommInitRank: b1's bootstrap address 10\.2\.0\.11 on lan-b1 \(NCCL_SOCKET_IFNAME=lan-\) is not reached from a1 \(timed out: .*\), a2 \(timed out\), a3 \(timed out\); set NCCL_SOCKET_IFNAME" trap
text '^  a1 -> b1  10\.2\.0\.11:[0-9]+ on lan-b1  FAILED timed out' trap
echo "PASS trap: the 18 cross-DC pairs of NCCL's bootstrap named, the data path connected"

# one host left on the NAT'd LAN
run one-host 3 mgmt mgmt mgmt mgmt mgmt lan-
report one-host --boot-finding "b3=a1+a2+a3" \
	--boot-failed "a1:b3=timed out" --boot-failed "a2:b3=timed out" \
	--boot-failed "a3:b3=timed out"
text "^  bootstrap: NCCL's init will hang in ncclCommInitRank: b3's bootstrap address 10\.2\.0\.13 on lan-b3 " one-host
echo "PASS one-host: exactly a1, a2, a3 -> b3 named"

# the fix: the management network for NCCL's bootstrap
run fixed 0 mgmt mgmt mgmt mgmt mgmt mgmt
report fixed --boot-ok
text '^  export NCCL_SOCKET_IFNAME=mgmt$' fixed
text "^NCCL bootstrap .*: 30 of 30 pairs connect" fixed
echo "PASS fixed: NCCL's bootstrap on mgmt reaches every host, no finding"
