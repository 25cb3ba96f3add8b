/* SPDX-License-Identifier: MIT */
/*
 * One source for the loader's fake modules.  Each is built with a few
 * macros that pick which way it is broken:
 *
 *   FAKE_NAME       the name in the descriptor (the file is mesh-<x>.so)
 *   FAKE_ABI        the descriptor's abi_version
 *   FAKE_INIT_ERR   what init returns (0, -EIO, -ENODEV)
 *   FAKE_NEEDS_LIB  init calls into a library absent at run time
 *   FAKE_NDEVS      how many devices it finds (default 2)
 *   FAKE_NODEV_WHY  init says why through host->no_devices, then -ENODEV
 *   FAKE_SIZE       the descriptor's size (an older ABI's, or too short)
 *   FAKE_NO_<OP>    leaves operation <op> NULL: FINI, ABANDON, DMABUF,
 *                   REACH, CHECK (optional) or ISEND (required)
 *   FAKE_POISON_CHECK  check always fails: for a descriptor whose size
 *                   ends before check, which the core must not read
 *   FAKE_POISON_LAYER  start fails and route aborts: for a descriptor
 *                   whose size ends before them (ABI 1.3)
 *   FAKE_POISON_DESCRIBE  describe fails: for a descriptor whose size
 *                   ends before it (ABI 1.4)
 *
 * A working instance has two devices, fake0 and fake1, on 127.0.0.1, and
 * two parameters, `level` and `max_level`, with the rule level <= max_level
 * (its check).  It has no data path: the loader tests never connect, so
 * those entries answer -ENOSYS.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <nccl-mesh/module.h>

#ifndef FAKE_NAME
#error "FAKE_NAME must name the module"
#endif
#ifndef FAKE_ABI
#define FAKE_ABI MESH_MODULE_ABI_VERSION
#endif
#ifndef FAKE_INIT_ERR
#define FAKE_INIT_ERR 0
#endif

#ifndef FAKE_NDEVS
#define FAKE_NDEVS 2
#endif
#ifndef FAKE_SIZE
#define FAKE_SIZE sizeof(struct mesh_module)
#endif

#ifdef FAKE_NEEDS_LIB
int mesh_fakedep_answer(void);
#endif

struct fake_ctx {
	const struct mesh_host *host;
	long long level;
};

static const struct mesh_param fake_params[] = {
	{ .name = "level", .type = MESH_PARAM_INT, .dflt = "3",
	  .min = 0, .max = 100,
	  .help = "Fake knob; each device reports level * 1000 Mbit/s" },
	{ .name = "max_level", .type = MESH_PARAM_INT, .dflt = "100",
	  .min = 0, .max = 100, .help = "level may not exceed this" },
	{ .name = NULL },
};

__attribute__((unused))
static int fake_check(const struct mesh_host *host)
{
#ifdef FAKE_POISON_CHECK
	host->param_error(host, "level", "read a check past its size");
	return -EINVAL;
#else
	long long level = host->param_int(host, "level");
	long long most = host->param_int(host, "max_level");

	if (level <= most)
		return 0;
	host->param_error(host, "level", "expected at most max_level (%lld), "
			  "got %lld", most, level);
	return -EINVAL;
#endif
}

static int fake_init(const struct mesh_host *host, void **mctx)
{
	struct fake_ctx *ctx;

	if (FAKE_INIT_ERR)
		return FAKE_INIT_ERR;
#ifdef FAKE_NODEV_WHY
	host->no_devices(host, "the fake module was told to find none");
	return -ENODEV;
#endif
#ifdef FAKE_NEEDS_LIB
	/* Never reached when the library is missing: dlopen fails first. */
	if (mesh_fakedep_answer() != 42)
		return -EINVAL;
#endif
#ifdef FAKE_NO_FINI
	/* Nothing would ever free it: no allocation. */
	static struct fake_ctx only;

	ctx = &only;
#else
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
#endif
	ctx->host = host;
	ctx->level = host->param_int(host, "level");
	*mctx = ctx;
	return 0;
}

__attribute__((unused))
static void fake_fini(void *mctx)
{
	free(mctx);
}

static int fake_devices(void *mctx, int *ndev)
{
	(void)mctx;
	*ndev = FAKE_NDEVS;
	return 0;
}

static void fake_loopback_addr(struct mesh_addr *addr)
{
	struct in_addr lo = { .s_addr = htonl(INADDR_LOOPBACK) };

	memset(addr, 0, sizeof(*addr));
	addr->family = AF_INET;
	addr->prefix_len = 8;
	memcpy(addr->ip, &lo, sizeof(lo));
}

static int fake_get_properties(void *mctx, int dev,
			       struct mesh_dev_props *props)
{
	const struct fake_ctx *ctx = mctx;

	if (dev < 0 || dev >= FAKE_NDEVS)
		return -EINVAL;
	memset(props, 0, sizeof(*props));
	strcpy(props->name, dev ? "fake1" : "fake0");
	props->ptr_support = MESH_PTR_HOST;
	/* Lets a test see that the resolved parameter reached the module. */
	props->speed_mbps = (int)(ctx->level * 1000);
	props->latency_us = 1.0f;
	props->max_comms = 1024;
	props->max_recvs = 1;
	props->max_p2p_bytes = 1 << 30;
	props->max_coll_bytes = 1 << 30;
	props->naddrs = 1;
	fake_loopback_addr(&props->addrs[0]);
	return 0;
}

static int fake_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
			void **comm)
{
	(void)mctx, (void)dev, (void)ctrl, (void)comm;
	return -ENOSYS;
}

__attribute__((unused))
static void fake_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	(void)mctx, (void)ctrl;
}

static int fake_reg_mr(void *comm, void *data, size_t size, int type,
		       void **mhandle)
{
	(void)comm, (void)data, (void)size, (void)type, (void)mhandle;
	return -ENOSYS;
}

__attribute__((unused))
static int fake_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			      uint64_t offset, int fd, void **mhandle)
{
	(void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd;
	(void)mhandle;
	return -ENOSYS;
}

static int fake_dereg_mr(void *comm, void *mhandle)
{
	(void)comm, (void)mhandle;
	return -ENOSYS;
}

__attribute__((unused))
static int fake_isend(void *comm, void *data, size_t size, int tag,
		      void *mhandle, void **request)
{
	(void)comm, (void)data, (void)size, (void)tag, (void)mhandle;
	(void)request;
	return -ENOSYS;
}

static int fake_irecv(void *comm, int n, void **data, size_t *sizes,
		      int *tags, void **mhandles, void **request)
{
	(void)comm, (void)n, (void)data, (void)sizes, (void)tags;
	(void)mhandles, (void)request;
	return -ENOSYS;
}

static int fake_close(void *comm)
{
	(void)comm;
	return -ENOSYS;
}

#ifdef FAKE_NO_FINI
#define fake_fini NULL
#endif
#ifdef FAKE_NO_ABANDON
#define fake_abandon NULL
#endif
#ifdef FAKE_NO_DMABUF
#define fake_reg_mr_dmabuf NULL
#endif
#ifdef FAKE_NO_ISEND
#define fake_isend NULL
#endif
#ifdef FAKE_NO_CHECK
#define fake_check NULL
#endif

__attribute__((unused))
static int fake_reach(void *mctx, int dev, const struct mesh_addr *peer,
		      int npeer, char *why, size_t cap)
{
	(void)mctx, (void)dev, (void)peer, (void)npeer;
	snprintf(why, cap, "the fake reaches nobody");
	return -EHOSTUNREACH;
}
#ifdef FAKE_NO_REACH
#define fake_reach NULL
#endif

#ifdef FAKE_POISON_LAYER
static int poison_start(void *mctx)
{
	(void)mctx;
	return -EIO;
}

static int poison_route(void *mctx, int rail, const void *handle,
			const char *unreached, void **state, void **send_comm)
{
	(void)mctx, (void)rail, (void)handle, (void)unreached, (void)state;
	(void)send_comm;
	abort();
}
#endif

#ifdef FAKE_POISON_DESCRIBE
static int poison_describe(void *comm, struct mesh_conn_info *info)
{
	(void)comm, (void)info;
	return -EIO;
}
#endif

MESH_EXPORT const struct mesh_module MESH_MODULE_DESCRIPTOR = {
	.abi_version = FAKE_ABI,
	.size = FAKE_SIZE,
	.name = FAKE_NAME,
	.version = "0.0-test",
	.params = fake_params,
	.init = fake_init,
	.fini = fake_fini,
	.devices = fake_devices,
	.get_properties = fake_get_properties,
	.connect = fake_connect,
	.accept = fake_connect,
	.abandon = fake_abandon,
	.reg_mr = fake_reg_mr,
	.reg_mr_dmabuf = fake_reg_mr_dmabuf,
	.dereg_mr = fake_dereg_mr,
	.isend = fake_isend,
	.irecv = fake_irecv,
	.iflush = NULL,
	.close_send = fake_close,
	.close_recv = fake_close,
	.reach = fake_reach,
	.check = fake_check,
#ifdef FAKE_POISON_LAYER
	.start = poison_start,
	.route = poison_route,
#endif
#ifdef FAKE_POISON_DESCRIBE
	.describe = poison_describe,
#endif
};
