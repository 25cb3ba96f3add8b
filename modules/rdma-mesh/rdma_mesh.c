/* SPDX-License-Identifier: MIT */
/*
 * rdma-mesh: verbs over direct cables, every cable its own subnet (GPU boxes
 * cabled to each other with no switch).
 *
 * A cable end is an active RoCE port whose netdev is an interface of this
 * network namespace with an IPv4 address; its GID is the one that carries
 * that address.  NCCL sees one device for all cables.  A connection picks,
 * from the addresses the peer advertised in its handle, every local cable
 * on the same subnet as one of them and stripes over those cables; the
 * acceptor uses the cable ends the connector names.  Index pairing of NICs
 * never enters: NICs may be listed in any order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "netaddr.h"
#include "rdma_mesh_plan.h"
#include "verbs.h"

const struct mesh_host *vl_host;

static const struct mesh_param rdma_mesh_params[] = {
	VL_PARAM_ROWS,
	{ "speed_mbps", MESH_PARAM_INT, "0", 0, 10000000,
	  "Speed reported to NCCL; 0: the fastest single cable (what one connection to one peer gets)." },
	{ NULL, 0, NULL, 0, 0, NULL },
};

struct rdma_mesh {
	struct vl_ctx *verbs;	/* devs[]: one per cable end */
	struct rm_end ends[MESH_DEV_ADDRS_MAX];
	struct vl_dev *end_dev[MESH_DEV_ADDRS_MAX];
	int nends;
	int speed_mbps;
	struct util_netif *ifs;		/* this namespace's, at init */
	int nifs;
};

/* ---- cable ends ---- */

/* The first usable IPv4 address of the local interface `netdev`. */
static const struct mesh_addr *netdev_ipv4(const struct rdma_mesh *m,
					   const char *netdev)
{
	for (int i = 0; i < m->nifs; i++) {
		if (strcmp(m->ifs[i].name, netdev))
			continue;
		for (int a = 0; a < m->ifs[i].naddrs; a++) {
			const struct mesh_addr *ad = &m->ifs[i].addrs[a];

			if (ad->family == AF_INET && ad->prefix_len &&
			    !util_addr_is_loopback(ad) &&
			    !util_addr_is_link_local(ad))
				return ad;
		}
	}
	return NULL;
}

/* A port is a cable end when its netdev is ours and has an address; its
 * GID is the RoCE v2 one of exactly that address. */
static int port_is_cable(void *arg, const char *root, const char *dev,
			 int port, struct vl_gid_prefs *prefs)
{
	const struct rdma_mesh *m = arg;
	struct vl_port_info pi;
	const struct mesh_addr *a;

	if (vl_port_info(root, dev, port, &pi) < 0 || !pi.ethernet ||
	    !pi.netdev[0])
		return 0;
	a = netdev_ipv4(m, pi.netdev);
	if (!a)
		return 0;
	memset(prefs, 0, sizeof(*prefs));
	prefs->roce_version = 2;
	prefs->family = AF_INET;
	prefs->force_index = -1;
	prefs->range_family = AF_INET;
	prefs->range_prefix = 32;
	memcpy(prefs->range_ip, a->ip, 4);
	return 1;
}

static void ends_fill(struct rdma_mesh *m)
{
	struct vl_ctx *v = m->verbs;

	m->nends = 0;
	for (int i = 0; i < v->ndevs && m->nends < MESH_DEV_ADDRS_MAX; i++) {
		struct vl_dev *d = &v->devs[i];

		if (!d->naddrs || !d->addrs[0].prefix_len)
			continue;
		m->end_dev[m->nends] = d;
		m->ends[m->nends].name = d->name;
		m->ends[m->nends].addr = d->addrs[0];
		m->nends++;
	}
}

static void rdma_mesh_fini(void *mctx)
{
	struct rdma_mesh *m = mctx;

	if (!m)
		return;
	vl_ctx_free(m->verbs);
	free(m->ifs);
	free(m);
}

static int rdma_mesh_init(const struct mesh_host *host, void **mctx)
{
	struct rdma_mesh *m = calloc(1, sizeof(*m));
	int ret;

	vl_host = host;
	if (!m)
		return -ENOMEM;
	m->nifs = util_netif_list("", &m->ifs);
	if (m->nifs < 0)
		m->nifs = 0;
	ret = vl_ctx_open(host, port_is_cable, m, &m->verbs);
	if (!ret) {
		ends_fill(m);
		if (!m->nends) {
			MESH_INFO("no RoCE port carries an IPv4 address of this namespace");
			ret = -ENODEV;
		}
	}
	if (ret) {
		rdma_mesh_fini(m);
		return ret;
	}
	m->speed_mbps = (int)host->param_int(host, "speed_mbps");
	*mctx = m;
	return 0;
}

static int rdma_mesh_devices(void *mctx, int *ndev)
{
	(void)mctx;
	*ndev = 1;
	return 0;
}

/* One device for the whole mesh: every cable's address, so peers can pick
 * theirs; a speed one connection can reach. */
static int rdma_mesh_get_properties(void *mctx, int dev,
				    struct mesh_dev_props *props)
{
	const struct rdma_mesh *m = mctx;
	size_t len = 0;
	int fastest = 0;

	if (dev != 0)
		return -EINVAL;
	vl_dev_props(m->verbs, m->end_dev[0], props);
	props->naddrs = 0;
	for (int e = 0; e < m->nends; e++) {
		const struct vl_dev *d = m->end_dev[e];

		if (vl_port_speed_mbps(d) > fastest)
			fastest = vl_port_speed_mbps(d);
		if (!d->gpu)
			props->ptr_support &= ~MESH_PTR_CUDA;
		if (!d->dmabuf)
			props->ptr_support &= ~MESH_PTR_DMABUF;
		props->addrs[props->naddrs++] = m->ends[e].addr;
		len += (size_t)snprintf(props->name + len,
					len < sizeof(props->name) ?
					sizeof(props->name) - len : 0,
					"%s%s", e ? "+" : "", d->name);
	}
	props->speed_mbps = m->speed_mbps ? m->speed_mbps : fastest;
	props->fabric_id_set = 0;
	return 0;
}

/* ---- connections ---- */

static int rdma_mesh_reach(void *mctx, int dev, const struct mesh_addr *peer,
			   int npeer, char *why, size_t cap)
{
	const struct rdma_mesh *m = mctx;
	struct rm_cable cables[VL_MAX_LINKS];

	(void)dev;
	if (rm_plan(m->ends, m->nends, peer, npeer, cables, VL_MAX_LINKS))
		return 0;
	rm_unreachable(m->ends, m->nends, peer, npeer, why, cap);
	return -EHOSTUNREACH;
}

/* The cables to this peer, from its handle's addresses or, without them,
 * the address our control connection reached. */
static int plan_cables(struct rdma_mesh *m, const struct mesh_ctrl *ctrl,
		       struct vl_link_plan *plan)
{
	const struct mesh_addr *peer = ctrl->peer_addrs;
	int npeer = ctrl->npeer_addrs;
	struct rm_cable cables[VL_MAX_LINKS];
	char why[512];
	int n;

	if (!npeer) {
		peer = ctrl->remote;
		npeer = 1;
	}
	n = rm_plan(m->ends, m->nends, peer, npeer, cables, VL_MAX_LINKS);
	if (!n) {
		rm_unreachable(m->ends, m->nends, peer, npeer, why,
			       sizeof(why));
		MESH_WARN("connect to %s: %s", ctrl->peer, why);
		return -EHOSTUNREACH;
	}
	for (int i = 0; i < n; i++) {
		plan[i].dev = m->end_dev[cables[i].end];
		plan[i].target = cables[i].peer;
	}
	return n;
}

static int rdma_mesh_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
			     void **send_comm)
{
	struct rdma_mesh *m = mctx;
	struct vl_link_plan plan[VL_MAX_LINKS];
	int n = 0;

	*send_comm = NULL;
	if (dev != 0)
		return -EINVAL;
	/* the plan matters only to the first call, which creates the QPs */
	if (!ctrl->module_state) {
		n = plan_cables(m, ctrl, plan);
		if (n < 0)
			return n;
	}
	return vl_connect_links(m->verbs, plan, n, ctrl, send_comm);
}

/* The acceptor's end of the cable the connector named by our address. */
static int cable_end_of(void *arg, const struct mesh_addr *target,
			struct vl_dev **dev, char *why, size_t cap)
{
	struct rdma_mesh *m = arg;
	char t[64];

	for (int e = 0; e < m->nends; e++)
		if (util_addr_equal_ip(&m->ends[e].addr, target)) {
			*dev = m->end_dev[e];
			return 0;
		}
	if (!target->family)
		snprintf(why, cap, "the connector named no cable end");
	else
		snprintf(why, cap, "the connector asked for cable end %s, which is none of this node's",
			 util_addr_str(target, t, sizeof(t)));
	return -ENXIO;
}

static int rdma_mesh_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
			    void **recv_comm)
{
	struct rdma_mesh *m = mctx;

	*recv_comm = NULL;
	if (dev != 0)
		return -EINVAL;
	return vl_accept_links(m->verbs, cable_end_of, m, ctrl, recv_comm);
}

MESH_EXPORT const struct mesh_module MESH_MODULE_DESCRIPTOR = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_module),
	.name = "rdma-mesh",
	.version = "1.0",
	.params = rdma_mesh_params,
	.init = rdma_mesh_init,
	.fini = rdma_mesh_fini,
	.devices = rdma_mesh_devices,
	.get_properties = rdma_mesh_get_properties,
	.connect = rdma_mesh_connect,
	.accept = rdma_mesh_accept,
	VL_MODULE_DATA_PATH,
	.reach = rdma_mesh_reach,
	.check = vl_check_params,
};
