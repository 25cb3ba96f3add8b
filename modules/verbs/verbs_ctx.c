/* SPDX-License-Identifier: MIT */
/*
 * A module's verbs context: the parameters every RDMA module shares and the
 * device ports it opens, walked through the hca filter.  Which ports a
 * module wants, and with which GID, is its own choice (vl_port_fn).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

static void ctx_params(const struct mesh_host *host, struct vl_ctx *ctx)
{
	ctx->nqps = (int)host->param_int(host, "qps_per_conn");
	ctx->timeout = (int)host->param_int(host, "timeout");
	ctx->retry_cnt = (int)host->param_int(host, "retry_cnt");
	ctx->sl = (int)host->param_int(host, "sl");
	ctx->traffic_class = (int)host->param_int(host, "traffic_class");
	ctx->mr_cache = host->param_int(host, "mr_cache") != 0;
	ctx->max_recvs = (int)host->param_int(host, "max_recvs");
	ctx->eager_max = (int)host->param_int(host, "eager_max");
	ctx->outage_ms = (int)host->param_int(host, "outage_ms");
}

static int port_count(struct ibv_device *ibdev)
{
	struct ibv_context *probe = ibv_open_device(ibdev);
	struct ibv_device_attr attr;
	int nports = 0;

	if (probe && !ibv_query_device(probe, &attr))
		nports = attr.phys_port_cnt;
	if (probe)
		ibv_close_device(probe);
	return nports;
}

static struct vl_dev *dev_slot(struct vl_ctx *ctx, int *cap)
{
	if (ctx->ndevs == *cap) {
		int n = *cap ? 2 * *cap : 8;
		void *p = realloc(ctx->devs, (size_t)n * sizeof(*ctx->devs));

		if (!p)
			return NULL;
		ctx->devs = p;
		*cap = n;
	}
	return &ctx->devs[ctx->ndevs];
}

/* Walks every device and port the filter lets through. */
static int devs_scan(struct vl_ctx *ctx, struct ibv_device **list,
		     int nlist, const struct vl_hca_filter *filter,
		     const char *root, vl_port_fn choose, void *arg)
{
	int cap = 0;

	for (int i = 0; i < nlist; i++) {
		const char *name = ibv_get_device_name(list[i]);
		int nports = port_count(list[i]);

		for (int port = 1; port <= nports; port++) {
			struct vl_gid_prefs prefs;
			struct vl_dev *d;
			int64_t fid = -1;
			int ret;

			if (!vl_hca_match(filter, name, port, &fid))
				continue;
			ret = choose(arg, root, name, port, &prefs);
			if (ret <= 0) {
				if (ret < 0)
					return ret;
				continue;
			}
			d = dev_slot(ctx, &cap);
			if (!d)
				return -ENOMEM;
			if (vl_dev_open(root, list[i], port, &prefs, d)) {
				d->fabric_id = fid;
				ctx->ndevs++;
			}
		}
	}
	return 0;
}

void vl_ctx_free(struct vl_ctx *ctx)
{
	if (!ctx)
		return;
	for (int i = 0; i < ctx->ndevs; i++)
		vl_dev_close(&ctx->devs[i]);
	free(ctx->devs);
	free(ctx);
}

static void devs_log(const struct vl_ctx *ctx)
{
	for (int i = 0; i < ctx->ndevs; i++) {
		const struct vl_dev *d = &ctx->devs[i];
		char g[INET6_ADDRSTRLEN];

		MESH_INFO("device %d: %s port %d, %s, GID %d %s (RoCE v%d), %d Mb/s%s",
			  i, d->ibname, d->port,
			  d->pinfo.ethernet ? "RoCE" : "InfiniBand",
			  d->gid.index, vl_gid_str(d->gid.raw, g, sizeof(g)),
			  d->gid.roce_version, d->pinfo.speed_mbps,
			  d->gpu ? ", GPU memory" : "");
	}
}

int vl_check_params(const struct mesh_host *host)
{
	const char *hca = host->param_str(host, "hca");
	struct vl_hca_filter filter;
	char why[256] = "";

	if (!vl_hca_parse(hca ? hca : "", &filter, why, sizeof(why)))
		return 0;
	host->param_error(host, "hca", "%s", why);
	return -EINVAL;
}

int vl_ctx_open(const struct mesh_host *host, vl_port_fn choose,
		   void *arg, struct vl_ctx **out)
{
	const char *hca = host->param_str(host, "hca");
	const char *root = host->param_str(host, "sysfs_root");
	struct vl_hca_filter filter;
	struct ibv_device **list;
	struct vl_ctx *ctx;
	char why[256] = "";
	int nlist = 0, ret;

	*out = NULL;
	hca = hca ? hca : "";
	/* vl_check_params refused a bad one before init */
	if (vl_hca_parse(hca, &filter, why, sizeof(why))) {
		MESH_WARN("hca '%s': %s", hca, why);
		return -EINVAL;
	}
	list = ibv_get_device_list(&nlist);
	if (!list || nlist == 0) {
		MESH_INFO("no RDMA devices%s%s", list ? "" : ": ",
			  list ? "" : strerror(errno));
		if (list)
			ibv_free_device_list(list);
		return -ENODEV;
	}
	ctx = calloc(1, sizeof(*ctx));
	ret = ctx ? devs_scan(ctx, list, nlist, &filter, root ? root : "",
			      choose, arg) : -ENOMEM;
	ibv_free_device_list(list);
	if (!ret && !ctx->ndevs) {
		MESH_INFO("no usable RDMA port%s%s%s", *hca ? " matches hca '" : "",
			  hca, *hca ? "'" : "");
		ret = -ENODEV;
	}
	if (ret) {
		vl_ctx_free(ctx);
		return ret;
	}
	ctx_params(host, ctx);
	devs_log(ctx);
	*out = ctx;
	return 0;
}
