#!/bin/bash
# SPDX-License-Identifier: MIT
#
# docs/deploy.md's cloud recipe: four VMs in two regions, each behind a
# 1:1 NAT to a public address of its own (nat11_topology in lib.sh; the
# routers' firewall lets in only 40000-40009), and a VPN among them
# (xdc_mgmt_network: interface mgmt, as WireGuard's wg0 would be).
# meshinfo --cluster on the four, with deploy-1to1.conf:
#   vpn      NCCL_SOCKET_IFNAME=mgmt: no finding, exit 0; cross-region
#            pairs dial the peer's public address on its own listen port
#   private  NCCL_SOCKET_IFNAME unset: NCCL's default takes the private
#            address, which the other region cannot reach: every
#            cross-region bootstrap pair times out, exit 3
#
# usage: deploy-1to1.sh MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

cluster_scenario "$@"
CONF=$here/deploy-1to1.conf
nat11_topology
hosts=(a1 a2 b1 b2)
xdc_mgmt_network "${hosts[@]}"
rdv=${XDC_MGMT_IP[a1]}:29500

CLUSTER_IFNAME=(mgmt mgmt mgmt mgmt)
cluster_run vpn 0 "$rdv" "${hosts[@]}"
cluster_report vpn --hosts 4 --ok-pairs 12 --boot-ok
for p in a1:b1 a2:b2 b1:a1 b2:a2; do
	f=${p%:*} t=${p#*:}
	cluster_text vpn "^  $f -> $t  cross-DC tcp-xdc ${XDC_IP[$f]//./\\.}:[0-9]+ -> ${NAT11_PUB[$t]//./\\.}:4000[0-7] "
done
cluster_text vpn '^  export NCCL_SOCKET_IFNAME=mgmt$'
echo "PASS vpn: bootstrap on the VPN, cross-region pairs on the public addresses"

CLUSTER_IFNAME=("" "" "" "")
args=()
for p in a1:b1 a1:b2 a2:b1 a2:b2; do
	args+=(--boot-failed "$p=timed out" --boot-failed "${p#*:}:${p%:*}=timed out")
done
cluster_run private 3 "$rdv" "${hosts[@]}"
cluster_report private --hosts 4 --ok-pairs 12 "${args[@]}" \
	--boot-finding a1=b1+b2 --boot-finding a2=b1+b2 \
	--boot-finding b1=a1+a2 --boot-finding b2=a1+a2
echo "PASS private: the private addresses named as what NCCL's bootstrap would take"
