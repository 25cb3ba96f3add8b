#!/bin/bash
# SPDX-License-Identifier: MIT
#
# docs/deploy.md's container recipe: two machines on a LAN, one container
# each behind Docker's default bridge (docker_topology in lib.sh: both
# containers at 172.17.0.2, ports 50000-50009 of the machine forwarded to
# the container's 40000-40009 as `docker run -p` does), and an overlay
# beside it (xdc_mgmt_network: interface mgmt, as a macvlan network or a
# VPN in the container gives).  meshinfo --cluster in both containers,
# with deploy-docker.conf:
#   bridge   NCCL_SOCKET_IFNAME unset: NCCL's default takes eth0, the same
#            172.17.0.2 in both, so each dials itself: bootstrap findings
#            for both ways naming the copied address, exit 3; the plugin's
#            pairs connect through the forwarded ports all the same.
#   overlay  NCCL_SOCKET_IFNAME=mgmt: no finding, exit 0, each container
#            reaches the other on its machine's address and a port of
#            50000-50007.
#
# usage: deploy-docker.sh MESHINFO PLUGIN MODULE_DIR SOURCE_ROOT
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/netns/lib.sh
. "$here/lib.sh"

cluster_scenario "$@"
CONF=$here/deploy-docker.conf
docker_topology h1 h2
xdc_mgmt_network c-h1 c-h2
rdv=${XDC_MGMT_IP[c-h1]}:29500
ranks=(c-h1 c-h2)

CLUSTER_IFNAME=("" "")
cluster_run bridge 3 "$rdv" "${ranks[@]}"
cluster_report bridge --hosts 2 --ok-pairs 2 \
	--boot-failed "c-h1:c-h2=refused|another host" \
	--boot-failed "c-h2:c-h1=refused|another host" \
	--boot-finding "c-h1=c-h2" --boot-finding "c-h2=c-h1"
cluster_text bridge "^     1  c-h2 +eth0 +172\.17\.0\.2 +NCCL's default: not docker\* or lo$"
cluster_text bridge "^  c-h1 -> c-h2  172\.17\.0\.2:[0-9]+ on eth0  FAILED .*\(this host has 172\.17\.0\.2 too\)$"
echo "PASS bridge: the copied container address is named, both ways"

CLUSTER_IFNAME=(mgmt mgmt)
cluster_run overlay 0 "$rdv" "${ranks[@]}"
cluster_report overlay --hosts 2 --ok-pairs 2 --boot-ok
cluster_text overlay '^  c-h1 -> c-h2  same-DC tcp-xdc 172\.17\.0\.2:[0-9]+ -> 10\.0\.0\.12:5000[0-7] '
cluster_text overlay '^  c-h2 -> c-h1  same-DC tcp-xdc 172\.17\.0\.2:[0-9]+ -> 10\.0\.0\.11:5000[0-7] '
echo "PASS overlay: NCCL's bootstrap on the overlay, the plugin through docker -p"
