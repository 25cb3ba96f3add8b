/* SPDX-License-Identifier: MIT */
/*
 * Opening a verbs device port for the modules built on this layer: its
 * attributes, the chosen GID, the IP address it carries, GPU capabilities.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs.h"
#include "netaddr.h"

/* The IP address a RoCE GID carries, with the netdev's prefix if known. */
static void dev_addrs(struct vl_dev *d)
{
	static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					   0xff, 0xff };
	struct mesh_addr a = { 0 };
	struct util_netif *ifs = NULL;
	char filter[VL_NAME_MAX + 1];
	int n;

	if (!d->pinfo.ethernet)
		return;
	if (!memcmp(d->gid.raw, v4map, sizeof(v4map))) {
		a.family = AF_INET;
		memcpy(a.ip, d->gid.raw + 12, 4);
	} else {
		a.family = AF_INET6;
		memcpy(a.ip, d->gid.raw, 16);
	}
	/* The netdev may live in another namespace: then the prefix stays
	 * unknown, which the core treats as "no subnet information". */
	if (d->pinfo.netdev[0]) {
		snprintf(filter, sizeof(filter), "=%s", d->pinfo.netdev);
		n = util_netif_list(filter, &ifs);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < ifs[i].naddrs; j++)
				if (util_addr_equal_ip(&ifs[i].addrs[j], &a))
					a.prefix_len = ifs[i].addrs[j].prefix_len;
		free(ifs);
	}
	d->addrs[0] = a;
	d->naddrs = 1;
}

bool vl_path_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/*
 * GPU memory is registrable only with a PCI HCA and a GPU stack: the
 * peer-memory module for plain pointers, a dma-buf capable provider for
 * dma-buf.  Software devices (rxe, siw) have no PCI device and never can.
 */
static void dev_gpu_caps(struct vl_dev *d)
{
	struct ibv_mr *mr;

	if (!d->pci_path[0] || !vl_path_exists("/proc/driver/nvidia/version"))
		return;
	d->gpu = vl_path_exists("/sys/kernel/mm/memory_peers/nv_mem/version") ||
		 vl_path_exists("/sys/module/nvidia_peermem");
	/* A provider without dma-buf support says so to a probe with fd -1. */
	errno = 0;
	mr = ibv_reg_dmabuf_mr(d->pd, 0, 0, 0, -1, 0);
	if (mr)
		ibv_dereg_mr(mr);
	d->dmabuf = errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

static void dev_pci_path(const char *root, struct vl_dev *d)
{
	char link[PATH_MAX], real[PATH_MAX];

	snprintf(link, sizeof(link), "%s/%s/device", root, d->ibname);
	if (!realpath(link, real))
		return;
	snprintf(d->pci_path, sizeof(d->pci_path), "%.255s", real);
}

/* Opens one port; 1 when usable, 0 to skip it (logged). */
int vl_dev_open(const char *root, struct ibv_device *ibdev, int port,
		   const struct vl_gid_prefs *prefs, struct vl_dev *d)
{
	struct ibv_device_attr attr;
	char why[256] = "";
	int ret;

	memset(d, 0, sizeof(*d));
	snprintf(d->ibname, sizeof(d->ibname), "%s", ibv_get_device_name(ibdev));
	d->port = port;
	d->fabric_id = -1;
	d->ctx = ibv_open_device(ibdev);
	if (!d->ctx) {
		MESH_INFO("%s: cannot open: %s", d->ibname, strerror(errno));
		return 0;
	}
	if (ibv_query_device(d->ctx, &attr) ||
	    ibv_query_port(d->ctx, (uint8_t)port, &d->pattr)) {
		MESH_INFO("%s:%d: cannot query: %s", d->ibname, port,
			  strerror(errno));
		goto skip;
	}
	if (d->pattr.state != IBV_PORT_ACTIVE) {
		MESH_INFO("%s:%d: port not active (state %d)", d->ibname, port,
			  d->pattr.state);
		goto skip;
	}
	if (vl_port_info(root, d->ibname, port, &d->pinfo) < 0)
		d->pinfo.ethernet =
			d->pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
	ret = vl_gid_pick(root, d->ibname, port, prefs, &d->gid, why,
				 sizeof(why));
	if (ret) {
		MESH_INFO("%s:%d: no usable GID: %s", d->ibname, port, why);
		goto skip;
	}
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		MESH_INFO("%s:%d: cannot allocate a protection domain: %s",
			  d->ibname, port, strerror(errno));
		goto skip;
	}
	d->guid = be64toh(attr.node_guid);
	d->max_qp_wr = attr.max_qp_wr;
	d->max_cqe = attr.max_cqe;
	if (attr.phys_port_cnt > 1)
		snprintf(d->name, sizeof(d->name), "%.52s:%d", d->ibname, port);
	else
		snprintf(d->name, sizeof(d->name), "%s", d->ibname);
	dev_pci_path(root, d);
	dev_addrs(d);
	dev_gpu_caps(d);
	pthread_mutex_init(&d->mr_lock, NULL);
	return 1;
skip:
	ibv_close_device(d->ctx);
	d->ctx = NULL;
	return 0;
}

void vl_dev_close(struct vl_dev *d)
{
	while (d->mrs) {
		struct ib_mr_ent *e = d->mrs;

		d->mrs = e->next;
		ibv_dereg_mr(e->mr);
		free(e);
	}
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	pthread_mutex_destroy(&d->mr_lock);
}

char *vl_gid_str(const uint8_t raw[16], char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

/* From the port's width and speed codes, when sysfs has no rate. */
static int speed_from_attr(const struct ibv_port_attr *pa)
{
	static const int width[] = { [1] = 1, [2] = 4, [4] = 8, [8] = 12,
				     [16] = 2 };
	int lanes = pa->active_width < 17 ? width[pa->active_width] : 0;
	int lane;

	switch (pa->active_speed) {
	case 1: lane = 2500; break;
	case 2: lane = 5000; break;
	case 4: case 8: lane = 10000; break;
	case 16: lane = 14000; break;
	case 32: lane = 25000; break;
	case 64: lane = 50000; break;
	case 128: lane = 100000; break;
	default: lane = 10000; break;
	}
	return (lanes ? lanes : 1) * lane;
}


int vl_port_speed_mbps(const struct vl_dev *d)
{
	return d->pinfo.speed_mbps > 0 ? d->pinfo.speed_mbps :
	       speed_from_attr(&d->pattr);
}

void vl_dev_props(const struct vl_ctx *ctx, const struct vl_dev *d,
		     struct mesh_dev_props *props)
{
	snprintf(props->name, sizeof(props->name), "%s", d->name);
	snprintf(props->pci_path, sizeof(props->pci_path), "%s", d->pci_path);
	props->guid = d->guid;
	props->ptr_support = MESH_PTR_HOST;
	if (d->gpu)
		props->ptr_support |= MESH_PTR_CUDA;
	if (d->dmabuf && (d->gpu || vl_path_exists("/proc/driver/nvidia/version")))
		props->ptr_support |= MESH_PTR_DMABUF;
	props->reg_is_global = 0;
	props->force_flush = 0;
	props->speed_mbps = vl_port_speed_mbps(d);
	props->port = d->port;
	props->latency_us = 0;
	props->max_comms = 65536;
	props->max_recvs = ctx->max_recvs;
	props->max_p2p_bytes = VL_MAX_MESSAGE;
	props->max_coll_bytes = VL_MAX_MESSAGE;
	props->naddrs = d->naddrs;
	memcpy(props->addrs, d->addrs, sizeof(props->addrs[0]) *
	       (size_t)d->naddrs);
	props->fabric_id_set = d->fabric_id >= 0;
	props->fabric_id = props->fabric_id_set ? (uint64_t)d->fabric_id : 0;
}
