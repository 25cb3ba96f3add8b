/* SPDX-License-Identifier: MIT */
/*
 * ib-fabric: descriptor, parameters, devices and memory registration.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib_fabric.h"
#include "netaddr.h"

const struct mesh_host *ib_fabric_host;

static const struct mesh_param ib_fabric_params[] = {
	{ "hca", MESH_PARAM_STR, "", 0, 0,
	  "HCA ports to use, NCCL_IB_HCA syntax (prefix, '=' exact, '^' exclude, name:port[:fabricId]); empty uses all." },
	{ "gid_index", MESH_PARAM_INT, "-1", -1, 65535,
	  "GID index for every port; -1 picks one per port." },
	{ "gid_overrides", MESH_PARAM_LIST, "", 0, 0,
	  "Per-port GID index, \"dev:port=index\" entries; win over gid_index." },
	{ "roce_version", MESH_PARAM_INT, "2", 1, 2,
	  "Preferred RoCE version when picking a GID." },
	{ "addr_family", MESH_PARAM_STR, "ipv4", 0, 0,
	  "Preferred GID address family: ipv4 or ipv6." },
	{ "addr_range", MESH_PARAM_STR, "", 0, 0,
	  "Only GIDs inside this CIDR range (e.g. 10.0.0.0/8); empty: any." },
	{ "qps_per_conn", MESH_PARAM_INT, "2", 1, IB_FABRIC_MAX_QPS,
	  "Queue pairs per connection; messages are spread over them." },
	{ "timeout", MESH_PARAM_INT, "14", 1, 31,
	  "IB transport timeout exponent (4.096 us * 2^timeout)." },
	{ "retry_cnt", MESH_PARAM_INT, "7", 0, 7,
	  "IB transport retries before a send fails." },
	{ "sl", MESH_PARAM_INT, "0", 0, 15,
	  "IB service level." },
	{ "traffic_class", MESH_PARAM_INT, "0", 0, 255,
	  "Traffic class (RoCE: DSCP << 2) of every packet." },
	{ "max_recvs", MESH_PARAM_INT, "8", 1, IB_FABRIC_MAX_RECVS,
	  "Grouped receives per irecv reported to NCCL." },
	{ "mr_cache", MESH_PARAM_BOOL, "true", 0, 0,
	  "Reuse one memory region for registrations of the same range." },
	{ "sysfs_root", MESH_PARAM_STR, "/sys/class/infiniband", 0, 0,
	  "Where HCA port and GID tables are read from." },
	{ NULL, 0, NULL, 0, 0, NULL },
};

/* ---- GID preferences ---- */

static int prefs_from_params(const struct mesh_host *host,
			     struct ib_fabric_gid_prefs *prefs)
{
	const char *fam = host->param_str(host, "addr_family");
	const char *range = host->param_str(host, "addr_range");

	memset(prefs, 0, sizeof(*prefs));
	prefs->roce_version = (int)host->param_int(host, "roce_version");
	prefs->force_index = (int)host->param_int(host, "gid_index");
	if (!fam || !*fam || !strcmp(fam, "ipv4")) {
		prefs->family = AF_INET;
	} else if (!strcmp(fam, "ipv6")) {
		prefs->family = AF_INET6;
	} else {
		MESH_WARN("addr_family '%s': expected ipv4 or ipv6", fam);
		return -EINVAL;
	}
	if (range && *range) {
		struct mesh_addr a;

		if (mesh_addr_parse(range, &a) || !a.prefix_len) {
			MESH_WARN("addr_range '%s': expected a CIDR range such as 10.0.0.0/8",
				  range);
			return -EINVAL;
		}
		prefs->range_family = a.family;
		prefs->range_prefix = a.prefix_len;
		memcpy(prefs->range_ip, a.ip, sizeof(a.ip));
	}
	return 0;
}

/* "dev:port=index" for this port, or -1; -EINVAL on a malformed entry. */
static int gid_override(const struct mesh_host *host, const char *dev, int port)
{
	const char *const *items;
	int n = host->param_list(host, "gid_overrides", &items);

	for (int i = 0; i < n; i++) {
		char name[IB_FABRIC_NAME_MAX];
		int p, idx, used = 0;

		if (sscanf(items[i], "%63[^:]:%d=%d%n", name, &p, &idx,
			   &used) != 3 || items[i][used] || p < 1 || idx < 0) {
			MESH_WARN("gid_overrides entry '%s': expected dev:port=index",
				  items[i]);
			return -EINVAL;
		}
		if (!strcmp(name, dev) && p == port)
			return idx;
	}
	return -1;
}

/* ---- devices ---- */

/* The IP address a RoCE GID carries, with the netdev's prefix if known. */
static void dev_addrs(struct ib_fabric_dev *d)
{
	static const uint8_t v4map[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					   0xff, 0xff };
	struct mesh_addr a = { 0 };
	struct mesh_netif *ifs = NULL;
	char filter[IB_FABRIC_NAME_MAX + 1];
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
		n = mesh_netif_list(filter, &ifs);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < ifs[i].naddrs; j++)
				if (mesh_addr_equal_ip(&ifs[i].addrs[j], &a))
					a.prefix_len = ifs[i].addrs[j].prefix_len;
		free(ifs);
	}
	d->addrs[0] = a;
	d->naddrs = 1;
}

static bool path_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/*
 * GPU memory is registrable only with a PCI HCA and a GPU stack: the
 * peer-memory module for plain pointers, a dma-buf capable provider for
 * dma-buf.  Software devices (rxe, siw) have no PCI device and never can.
 */
static void dev_gpu_caps(struct ib_fabric_dev *d)
{
	struct ibv_mr *mr;

	if (!d->pci_path[0] || !path_exists("/proc/driver/nvidia/version"))
		return;
	d->gpu = path_exists("/sys/kernel/mm/memory_peers/nv_mem/version") ||
		 path_exists("/sys/module/nvidia_peermem");
	/* A provider without dma-buf support says so to a probe with fd -1. */
	errno = 0;
	mr = ibv_reg_dmabuf_mr(d->pd, 0, 0, 0, -1, 0);
	if (mr)
		ibv_dereg_mr(mr);
	d->dmabuf = errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

static void dev_pci_path(const char *root, struct ib_fabric_dev *d)
{
	char link[PATH_MAX], real[PATH_MAX];

	snprintf(link, sizeof(link), "%s/%s/device", root, d->ibname);
	if (!realpath(link, real))
		return;
	snprintf(d->pci_path, sizeof(d->pci_path), "%.255s", real);
}

/* Opens one port; 1 when usable, 0 to skip it, -errno on a config error. */
static int dev_open(struct ib_fabric_ctx *ctx, const char *root,
		    struct ibv_device *ibdev, int port, int64_t fabric_id,
		    const struct ib_fabric_gid_prefs *base,
		    struct ib_fabric_dev *d)
{
	const struct mesh_host *host = ib_fabric_host;
	struct ib_fabric_gid_prefs prefs = *base;
	struct ibv_device_attr attr;
	char why[256] = "";
	int ret, ov;

	memset(d, 0, sizeof(*d));
	snprintf(d->ibname, sizeof(d->ibname), "%s", ibv_get_device_name(ibdev));
	d->port = port;
	d->fabric_id = fabric_id;
	ov = gid_override(host, d->ibname, port);
	if (ov < -1)
		return ov;
	if (ov >= 0)
		prefs.force_index = ov;
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
	if (ib_fabric_port_info(root, d->ibname, port, &d->pinfo) < 0)
		d->pinfo.ethernet =
			d->pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
	ret = ib_fabric_gid_pick(root, d->ibname, port, &prefs, &d->gid, why,
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
	(void)ctx;
	return 1;
skip:
	ibv_close_device(d->ctx);
	d->ctx = NULL;
	return 0;
}

static void dev_close(struct ib_fabric_dev *d)
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

static char *gid_str(const uint8_t raw[16], char *buf, size_t len)
{
	if (!inet_ntop(AF_INET6, raw, buf, (socklen_t)len))
		snprintf(buf, len, "?");
	return buf;
}

/* Walks every device and port the filter lets through. */
static int devs_scan(struct ib_fabric_ctx *ctx, struct ibv_device **list,
		     int nlist, const struct ib_fabric_hca_filter *filter,
		     const char *root, const struct ib_fabric_gid_prefs *prefs)
{
	int cap = 0;

	for (int i = 0; i < nlist; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *probe = ibv_open_device(list[i]);
		struct ibv_device_attr attr;
		int nports = 0;

		if (probe && !ibv_query_device(probe, &attr))
			nports = attr.phys_port_cnt;
		if (probe)
			ibv_close_device(probe);
		for (int port = 1; port <= nports; port++) {
			int64_t fid = -1;
			struct ib_fabric_dev *d;
			int ret;

			if (!ib_fabric_hca_match(filter, name, port, &fid))
				continue;
			if (ctx->ndevs == cap) {
				void *p;

				cap = cap ? 2 * cap : 8;
				p = realloc(ctx->devs, (size_t)cap *
					    sizeof(*ctx->devs));
				if (!p)
					return -ENOMEM;
				ctx->devs = p;
			}
			d = &ctx->devs[ctx->ndevs];
			ret = dev_open(ctx, root, list[i], port, fid, prefs, d);
			if (ret < 0)
				return ret;
			if (ret)
				ctx->ndevs++;
		}
	}
	return 0;
}

static void ctx_free(struct ib_fabric_ctx *ctx)
{
	for (int i = 0; i < ctx->ndevs; i++)
		dev_close(&ctx->devs[i]);
	free(ctx->devs);
	free(ctx);
}

static int ctx_params(const struct mesh_host *host, struct ib_fabric_ctx *ctx)
{
	ctx->nqps = (int)host->param_int(host, "qps_per_conn");
	ctx->timeout = (int)host->param_int(host, "timeout");
	ctx->retry_cnt = (int)host->param_int(host, "retry_cnt");
	ctx->sl = (int)host->param_int(host, "sl");
	ctx->traffic_class = (int)host->param_int(host, "traffic_class");
	ctx->mr_cache = host->param_int(host, "mr_cache") != 0;
	ctx->max_recvs = (int)host->param_int(host, "max_recvs");
	return 0;
}

static void devs_log(const struct ib_fabric_ctx *ctx)
{
	for (int i = 0; i < ctx->ndevs; i++) {
		const struct ib_fabric_dev *d = &ctx->devs[i];
		char g[INET6_ADDRSTRLEN];

		MESH_INFO("device %d: %s port %d, %s, GID %d %s (RoCE v%d), %d Mb/s%s",
			  i, d->ibname, d->port,
			  d->pinfo.ethernet ? "RoCE" : "InfiniBand",
			  d->gid.index, gid_str(d->gid.raw, g, sizeof(g)),
			  d->gid.roce_version, d->pinfo.speed_mbps,
			  d->gpu ? ", GPU memory" : "");
	}
}

static int ib_fabric_init(const struct mesh_host *host, void **mctx)
{
	struct ib_fabric_hca_filter filter;
	struct ib_fabric_gid_prefs prefs;
	struct ibv_device **list;
	struct ib_fabric_ctx *ctx;
	const char *hca, *root;
	char why[256] = "";
	int nlist = 0, ret;

	ib_fabric_host = host;
	hca = host->param_str(host, "hca");
	root = host->param_str(host, "sysfs_root");
	if (ib_fabric_hca_parse(hca ? hca : "", &filter, why, sizeof(why))) {
		MESH_WARN("hca '%s': %s", hca, why);
		return -EINVAL;
	}
	ret = prefs_from_params(host, &prefs);
	if (ret)
		return ret;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx_params(host, ctx);
	list = ibv_get_device_list(&nlist);
	if (!list || nlist == 0) {
		MESH_INFO("no RDMA devices%s%s", list ? "" : ": ",
			  list ? "" : strerror(errno));
		if (list)
			ibv_free_device_list(list);
		ctx_free(ctx);
		return -ENODEV;
	}
	ret = devs_scan(ctx, list, nlist, &filter, root ? root : "", &prefs);
	ibv_free_device_list(list);
	if (ret) {
		ctx_free(ctx);
		return ret;
	}
	if (!ctx->ndevs) {
		MESH_INFO("no active RDMA port with a usable GID%s%s%s",
			  hca && *hca ? " matches hca '" : "", hca ? hca : "",
			  hca && *hca ? "'" : "");
		ctx_free(ctx);
		return -ENODEV;
	}
	devs_log(ctx);
	*mctx = ctx;
	return 0;
}

static void ib_fabric_fini(void *mctx)
{
	if (mctx)
		ctx_free(mctx);
}

static int ib_fabric_devices(void *mctx, int *ndev)
{
	struct ib_fabric_ctx *ctx = mctx;

	*ndev = ctx->ndevs;
	return 0;
}

/* From the port's width and speed codes, when sysfs has no rate. */
static int port_speed_mbps(const struct ibv_port_attr *pa)
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

static int ib_fabric_get_properties(void *mctx, int dev,
				    struct mesh_dev_props *props)
{
	struct ib_fabric_ctx *ctx = mctx;
	const struct ib_fabric_dev *d;

	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	d = &ctx->devs[dev];
	snprintf(props->name, sizeof(props->name), "%s", d->name);
	snprintf(props->pci_path, sizeof(props->pci_path), "%s", d->pci_path);
	props->guid = d->guid;
	props->ptr_support = MESH_PTR_HOST;
	if (d->gpu)
		props->ptr_support |= MESH_PTR_CUDA;
	if (d->dmabuf && (d->gpu || path_exists("/proc/driver/nvidia/version")))
		props->ptr_support |= MESH_PTR_DMABUF;
	props->reg_is_global = 0;
	props->force_flush = 0;
	props->speed_mbps = d->pinfo.speed_mbps > 0 ? d->pinfo.speed_mbps :
			    port_speed_mbps(&d->pattr);
	props->port = d->port;
	props->latency_us = 0;
	props->max_comms = 65536;
	props->max_recvs = ctx->max_recvs;
	props->max_p2p_bytes = IB_FABRIC_MAX_MESSAGE;
	props->max_coll_bytes = IB_FABRIC_MAX_MESSAGE;
	props->naddrs = d->naddrs;
	memcpy(props->addrs, d->addrs, sizeof(props->addrs[0]) *
	       (size_t)d->naddrs);
	props->fabric_id_set = d->fabric_id >= 0;
	props->fabric_id = props->fabric_id_set ? (uint64_t)d->fabric_id : 0;
	return 0;
}

/* ---- memory registration ---- */

#define IB_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		   IBV_ACCESS_REMOTE_READ)

static uintptr_t page_size(void)
{
	static uintptr_t ps;

	if (!ps)
		ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	return ps;
}

/* Caller holds dev->mr_lock. */
static struct ib_mr_ent *mr_lookup(struct ib_fabric_dev *d, uintptr_t start,
				   uintptr_t end)
{
	for (struct ib_mr_ent *e = d->mrs; e; e = e->next)
		if (e->cached && e->start <= start && end <= e->end)
			return e;
	return NULL;
}

static int mr_insert(struct ib_fabric_comm *c, struct ibv_mr *mr,
		     uintptr_t start, uintptr_t end, bool cached,
		     void **mhandle)
{
	struct ib_mr_ent *e = calloc(1, sizeof(*e));

	if (!e) {
		ibv_dereg_mr(mr);
		return -ENOMEM;
	}
	e->dev = c->dev;
	e->start = start;
	e->end = end;
	e->mr = mr;
	e->refs = 1;
	e->cached = cached;
	e->next = c->dev->mrs;
	c->dev->mrs = e;
	*mhandle = e;
	return 0;
}

int ib_fabric_reg_mr(void *comm, void *data, size_t size, int type,
		     void **mhandle)
{
	struct ib_fabric_comm *c = comm;
	struct ib_fabric_dev *d = c->dev;
	uintptr_t ps = page_size();
	uintptr_t start = (uintptr_t)data & ~(ps - 1);
	uintptr_t end = ((uintptr_t)data + size + ps - 1) & ~(ps - 1);
	struct ib_mr_ent *e;
	struct ibv_mr *mr;
	int ret;

	*mhandle = NULL;
	if (type != MESH_PTR_HOST && !(type == MESH_PTR_CUDA && d->gpu)) {
		MESH_WARN("%s: cannot register pointer type %d (host%s only)",
			  d->name, type, d->gpu ? " and CUDA" : "");
		return -EINVAL;
	}
	if (end == start)
		end = start + ps;
	pthread_mutex_lock(&d->mr_lock);
	e = c->ctx->mr_cache ? mr_lookup(d, start, end) : NULL;
	if (e) {
		e->refs++;
		*mhandle = e;
		pthread_mutex_unlock(&d->mr_lock);
		return 0;
	}
	mr = ibv_reg_mr(d->pd, (void *)start, end - start, IB_ACCESS);
	if (!mr) {
		ret = -errno;
		pthread_mutex_unlock(&d->mr_lock);
		MESH_WARN("%s: cannot register %zu bytes at %p: %s", d->name,
			  size, data, strerror(-ret));
		return ret ? ret : -EIO;
	}
	ret = mr_insert(c, mr, start, end, c->ctx->mr_cache, mhandle);
	pthread_mutex_unlock(&d->mr_lock);
	return ret;
}

int ib_fabric_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			    uint64_t offset, int fd, void **mhandle)
{
	struct ib_fabric_comm *c = comm;
	struct ib_fabric_dev *d = c->dev;
	struct ibv_mr *mr;
	int ret;

	*mhandle = NULL;
	if (type == MESH_PTR_HOST)
		return ib_fabric_reg_mr(comm, data, size, type, mhandle);
	if (!d->dmabuf) {
		MESH_WARN("%s: dma-buf registration is not supported",
			  d->name);
		return -EOPNOTSUPP;
	}
	mr = ibv_reg_dmabuf_mr(d->pd, offset, size, (uint64_t)(uintptr_t)data,
			       fd, IB_ACCESS);
	if (!mr) {
		ret = errno ? -errno : -EIO;
		MESH_WARN("%s: cannot register dma-buf fd %d (%zu bytes at offset %llu): %s",
			  d->name, fd, size, (unsigned long long)offset,
			  strerror(-ret));
		return ret;
	}
	/* Never cached: another fd may later back the same addresses. */
	pthread_mutex_lock(&d->mr_lock);
	ret = mr_insert(c, mr, (uintptr_t)data, (uintptr_t)data + size, false,
			mhandle);
	pthread_mutex_unlock(&d->mr_lock);
	return ret;
}

int ib_fabric_dereg_mr(void *comm, void *mhandle)
{
	struct ib_mr_ent *e = mhandle, **pp;
	struct ib_fabric_dev *d;
	int ret = 0;

	(void)comm;
	if (!e)
		return 0;
	d = e->dev;
	pthread_mutex_lock(&d->mr_lock);
	if (--e->refs > 0) {
		pthread_mutex_unlock(&d->mr_lock);
		return 0;
	}
	for (pp = &d->mrs; *pp && *pp != e; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = e->next;
	pthread_mutex_unlock(&d->mr_lock);
	if (ibv_dereg_mr(e->mr)) {
		ret = -errno;
		MESH_WARN("%s: cannot deregister memory: %s", d->name,
			  strerror(errno));
	}
	free(e);
	return ret;
}

MESH_EXPORT const struct mesh_module MESH_MODULE_DESCRIPTOR = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_module),
	.name = "ib-fabric",
	.version = "1.0",
	.params = ib_fabric_params,
	.init = ib_fabric_init,
	.fini = ib_fabric_fini,
	.devices = ib_fabric_devices,
	.get_properties = ib_fabric_get_properties,
	.connect = ib_fabric_connect,
	.accept = ib_fabric_accept,
	.abandon = ib_fabric_abandon,
	.reg_mr = ib_fabric_reg_mr,
	.reg_mr_dmabuf = ib_fabric_reg_mr_dmabuf,
	.dereg_mr = ib_fabric_dereg_mr,
	.isend = ib_fabric_isend,
	.irecv = ib_fabric_irecv,
	.iflush = ib_fabric_iflush,
	.close_send = ib_fabric_close_send,
	.close_recv = ib_fabric_close_recv,
};
