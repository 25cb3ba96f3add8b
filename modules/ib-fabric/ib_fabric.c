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

#include "verbs.h"
#include "netaddr.h"

const struct mesh_host *vl_host;

static const struct mesh_param ib_fabric_params[] = {
	VL_PARAM_ROWS,
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
	{ NULL, 0, NULL, 0, 0, NULL },
};

/* ---- GID preferences ---- */

/*
 * The GID preferences from the parameters, read by check and by init
 * alike, so that a value init cannot use is a config error at its line
 * (param_error) also for meshinfo --check, and init meets none.
 */
static int prefs_from_params(const struct mesh_host *host,
			     struct vl_gid_prefs *prefs)
{
	const char *fam = host->param_str(host, "addr_family");
	const char *range = host->param_str(host, "addr_range");
	int err = 0;

	memset(prefs, 0, sizeof(*prefs));
	prefs->roce_version = (int)host->param_int(host, "roce_version");
	prefs->force_index = (int)host->param_int(host, "gid_index");
	if (!fam || !*fam || !strcmp(fam, "ipv4")) {
		prefs->family = AF_INET;
	} else if (!strcmp(fam, "ipv6")) {
		prefs->family = AF_INET6;
	} else {
		host->param_error(host, "addr_family", "expected ipv4 or "
				  "ipv6, got '%s'", fam);
		err = -EINVAL;
	}
	if (range && *range) {
		struct mesh_addr a;

		if (util_addr_parse(range, &a) || !a.prefix_len || a.port) {
			host->param_error(host, "addr_range", "expected a CIDR "
					  "range such as 10.0.0.0/8, got '%s'",
					  range);
			err = -EINVAL;
		} else {
			prefs->range_family = a.family;
			prefs->range_prefix = a.prefix_len;
			memcpy(prefs->range_ip, a.ip, sizeof(a.ip));
		}
	}
	return err;
}

/* One gid_overrides entry, "dev:port=index"; -EINVAL when malformed. */
static int parse_gid_override(const char *item, char name[VL_NAME_MAX],
			      int *port, int *idx)
{
	int used = 0;

	if (sscanf(item, "%63[^:]:%d=%d%n", name, port, idx, &used) != 3 ||
	    item[used] || *port < 1 || *idx < 0 || *idx > 65535)
		return -EINVAL;
	return 0;
}

static int check_gid_overrides(const struct mesh_host *host)
{
	const char *const *items;
	int n = host->param_list(host, "gid_overrides", &items), err = 0;

	for (int i = 0; i < n; i++) {
		char name[VL_NAME_MAX];
		int p, idx;

		if (parse_gid_override(items[i], name, &p, &idx)) {
			host->param_error(host, "gid_overrides", "item %d "
					  "('%s'): expected dev:port=index, "
					  "port 1 or more, index 0..65535",
					  i + 1, items[i]);
			err = -EINVAL;
		}
	}
	return err;
}

/* "dev:port=index" for this port, or -1 (entries checked by check). */
static int gid_override(const struct mesh_host *host, const char *dev, int port)
{
	const char *const *items;
	int n = host->param_list(host, "gid_overrides", &items);

	for (int i = 0; i < n; i++) {
		char name[VL_NAME_MAX];
		int p, idx;

		if (!parse_gid_override(items[i], name, &p, &idx) &&
		    !strcmp(name, dev) && p == port)
			return idx;
	}
	return -1;
}

/* Each value's syntax, before init (and by meshinfo --check). */
static int ib_fabric_check(const struct mesh_host *host)
{
	struct vl_gid_prefs prefs;
	int err = vl_check_params(host);

	if (prefs_from_params(host, &prefs))
		err = -EINVAL;
	if (check_gid_overrides(host))
		err = -EINVAL;
	return err;
}

/* ---- devices ---- */

/* Every port the filter passes, with the configured GID preferences. */
static int port_prefs(void *arg, const char *root, const char *dev, int port,
		      struct vl_gid_prefs *prefs)
{
	int ov = gid_override(vl_host, dev, port);

	(void)root;
	*prefs = *(const struct vl_gid_prefs *)arg;
	if (ov >= 0)
		prefs->force_index = ov;
	return 1;
}

static int ib_fabric_init(const struct mesh_host *host, void **mctx)
{
	struct vl_gid_prefs prefs;
	struct vl_ctx *ctx;
	int ret;

	vl_host = host;
	ret = prefs_from_params(host, &prefs);
	if (!ret)
		ret = vl_ctx_open(host, port_prefs, &prefs, &ctx);
	if (ret)
		return ret;
	*mctx = ctx;
	return 0;
}

static void ib_fabric_fini(void *mctx)
{
	vl_ctx_free(mctx);
}

static int ib_fabric_devices(void *mctx, int *ndev)
{
	struct vl_ctx *ctx = mctx;

	*ndev = ctx->ndevs;
	return 0;
}

static int ib_fabric_get_properties(void *mctx, int dev,
				    struct mesh_dev_props *props)
{
	struct vl_ctx *ctx = mctx;

	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	vl_dev_props(ctx, &ctx->devs[dev], props);
	return 0;
}

/* ---- connections: one link, the device NCCL chose, on both sides ---- */

static int ib_fabric_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
			     void **send_comm)
{
	struct vl_ctx *ctx = mctx;
	struct vl_link_plan plan = { 0 };

	*send_comm = NULL;
	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	plan.dev = &ctx->devs[dev];
	return vl_connect_links(ctx, &plan, 1, ctrl, send_comm);
}

static int accepting_dev(void *arg, const struct mesh_addr *target,
			 struct vl_dev **dev, char *why, size_t cap)
{
	(void)target;
	(void)why;
	(void)cap;
	*dev = arg;
	return 0;
}

static int ib_fabric_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
			    void **recv_comm)
{
	struct vl_ctx *ctx = mctx;

	*recv_comm = NULL;
	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	return vl_accept_links(ctx, accepting_dev, &ctx->devs[dev], ctrl,
				  recv_comm);
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
	VL_MODULE_DATA_PATH,
	.check = ib_fabric_check,
};
