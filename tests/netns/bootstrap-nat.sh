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
# NCCL_SOCKET_IFNAME=mgmt everywhere (docs/deploy.md's first recipe), where
# the check finds nothing, is tests/netns/cluster.sh's run.
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
# the rendezvous is the launcher's, over the management network
rdv=${XDC_MGMT_IP[a1]}:29500
cov=(--hosts "$size" --ok-pairs $((size * (size - 1))) --boot-max-s "$boot_max_s")

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
CLUSTER_IFNAME=(lan- lan- lan- lan- lan- lan-)
cluster_run trap 3 "$rdv" "${XDC_HOSTS[@]}"
cluster_report trap "${cov[@]}" "${args[@]}"
cluster_text trap "^  bootstrap: NCCL's init will hang in ncclCommInitRank: b1's bootstrap address 10\.2\.0\.11 on lan-b1 \(NCCL_SOCKET_IFNAME=lan-\) is not reached from a1 \(timed out: .*\), a2 \(timed out\), a3 \(timed out\); set NCCL_SOCKET_IFNAME"
cluster_text trap '^  a1 -> b1  10\.2\.0\.11:[0-9]+ on lan-b1  FAILED timed out'
echo "PASS trap: the 18 cross-DC pairs of NCCL's bootstrap named, the data path connected"

# one host left on the NAT'd LAN
CLUSTER_IFNAME=(mgmt mgmt mgmt mgmt mgmt lan-)
cluster_run one-host 3 "$rdv" "${XDC_HOSTS[@]}"
cluster_report one-host "${cov[@]}" --boot-finding "b3=a1+a2+a3" \
	--boot-failed "a1:b3=timed out" --boot-failed "a2:b3=timed out" \
	--boot-failed "a3:b3=timed out"
cluster_text one-host "^  bootstrap: NCCL's init will hang in ncclCommInitRank: b3's bootstrap address 10\.2\.0\.13 on lan-b3 "
echo "PASS one-host: exactly a1, a2, a3 -> b3 named"

