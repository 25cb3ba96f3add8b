/* SPDX-License-Identifier: MIT */
/*
 * The NCCL boundary: ncclNetPlugin_v10, _v11 and _v12 as thin adapters over
 * core/mesh.c, and ncclTunerPlugin_v4 over core/tuner.c.  The only place
 * that speaks ncclResult_t, and the only symbols the library exports.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "net.h"
#include "nccl-mesh/nccl_net.h"
#include "nccl-mesh/nccl_tuner.h"
#include "profile.h"
#include "tuner.h"

#define PLUGIN_EXPORT __attribute__((visibility("default")))

_Static_assert(sizeof(ncclNetProperties_v10_t) == 104, "v10 properties");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 properties");
_Static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v12 properties");
_Static_assert(sizeof(ncclNet_v10_t) == 160, "v10 struct");
_Static_assert(sizeof(ncclNet_v11_t) == 176, "v11 struct");
_Static_assert(sizeof(ncclNet_v12_t) == 176, "v12 struct");

/*
 * The one place an errno becomes an ncclResult_t (docs/nccl.md has the
 * table).  Only codes NCCL 2.28 knows (0..7): the peer or the network
 * between us is ncclRemoteError, a wrong argument ncclInvalidArgument, a
 * configuration that cannot work (or two hosts configured apart)
 * ncclInvalidUsage, the local system ncclSystemError, and a code no layer
 * may return (positive) ncclInternalError.  Not static: its unit test
 * calls it.
 */
ncclResult_t core_to_nccl(int err);

ncclResult_t core_to_nccl(int err)
{
	switch (err) {
	case 0:
		return ncclSuccess;
	case -ECONNRESET:
	case -ECONNREFUSED:
	case -ECONNABORTED:
	case -EPIPE:
	case -ETIMEDOUT:
	case -EPROTO:
	case -EBADMSG:
	case -ENOTCONN:
	case -EHOSTDOWN:
	case -EHOSTUNREACH:
	case -ENETDOWN:
	case -ENETUNREACH:
	case -ENETRESET:
	case -EREMOTEIO:
		return ncclRemoteError;
	case -EINVAL:
	case -EBADF:
	case -EFAULT:
	case -ERANGE:
		return ncclInvalidArgument;
	case -ENOENT:
	case -EACCES:
	case -EPERM:
	case -ENOPROTOOPT:
	case -ENOTSUP:
	case -EADDRINUSE:
	case -EMSGSIZE:
	case -E2BIG:
	case -ENODEV:
		return ncclInvalidUsage;
	default:
		return err < 0 ? ncclSystemError : ncclInternalError;
	}
}

/* ---------------------------------------------------------- one body */

static ncclResult_t p_devices(int *ndev)
{
	return core_to_nccl(core_net_devices(ndev));
}

static ncclResult_t p_listen(void *ctx, int dev, void *handle,
			     void **listen_comm)
{
	return core_to_nccl(core_net_listen(ctx, dev, handle, listen_comm));
}

static ncclResult_t p_connect(void *ctx, int dev, void *handle,
			      int traffic_class, void **send_comm,
			      ncclNetDeviceHandle_t **dev_comm)
{
	if (dev_comm)
		*dev_comm = NULL;
	return core_to_nccl(core_net_connect(ctx, dev, handle, traffic_class,
					     send_comm));
}

static ncclResult_t p_accept(void *listen_comm, void **recv_comm,
			     ncclNetDeviceHandle_t **dev_comm)
{
	if (dev_comm)
		*dev_comm = NULL;
	return core_to_nccl(core_net_accept(listen_comm, recv_comm));
}

static ncclResult_t p_reg_mr(void *comm, void *data, size_t size, int type,
			     void **mhandle)
{
	struct core_comm *c = comm;

	return core_to_nccl(c->desc->reg_mr(c->mcomm, data, size, type, mhandle));
}

static ncclResult_t p_reg_mr_dmabuf(void *comm, void *data, size_t size,
				    int type, uint64_t offset, int fd,
				    void **mhandle)
{
	struct core_comm *c = comm;

	return core_to_nccl(c->desc->reg_mr_dmabuf(c->mcomm, data, size, type,
					      offset, fd, mhandle));
}

static ncclResult_t p_dereg_mr(void *comm, void *mhandle)
{
	struct core_comm *c = comm;

	return core_to_nccl(c->desc->dereg_mr(c->mcomm, mhandle));
}

/* What core/profile needs of a comm to report its requests. */
static struct core_prof_comm prof_comm(const struct core_comm *c)
{
	return (struct core_prof_comm){
		.desc = c->desc, .mcomm = c->mcomm,
		.peer = c->path.direct ? &c->path.remote : NULL };
}

/*
 * With a profiler callback and NCCL's handle, core/profile asks NCCL
 * whether the step is profiled and reports the request if it is; without
 * one (meshperf, older NCCL) the request goes straight to the module.
 */
static ncclResult_t p_isend(void *send_comm, void *data, size_t size, int tag,
			    void *mhandle, void *phandle, void **request)
{
	struct core_comm *c = send_comm;

	if (core_prof_fn && phandle) {
		struct core_prof_comm pc = prof_comm(c);

		return core_to_nccl(core_prof_isend(&pc, data, size, tag,
						    mhandle, phandle, request));
	}
	return core_to_nccl(c->desc->isend(c->mcomm, data, size, tag, mhandle,
				      request));
}

static ncclResult_t p_irecv(void *recv_comm, int n, void **data,
			    size_t *sizes, int *tags, void **mhandles,
			    void **phandles, void **request)
{
	struct core_comm *c = recv_comm;

	if (core_prof_fn && phandles) {
		struct core_prof_comm pc = prof_comm(c);

		return core_to_nccl(core_prof_irecv(&pc, n, data, sizes, tags,
						    mhandles, phandles,
						    request));
	}
	return core_to_nccl(c->desc->irecv(c->mcomm, n, data, sizes, tags,
				      mhandles, request));
}

static ncclResult_t p_iflush(void *recv_comm, int n, void **data, int *sizes,
			     void **mhandles, void **request)
{
	struct core_comm *c = recv_comm;

	return core_to_nccl(c->desc->iflush(c->mcomm, n, data, sizes, mhandles,
				       request));
}

static ncclResult_t p_test(void *request, int *done, int *sizes)
{
	struct mesh_request *r = request;

	return core_to_nccl(r->test(request, done, sizes));
}

static ncclResult_t p_close_send(void *send_comm)
{
	return core_to_nccl(core_net_close_comm(send_comm, 1));
}

static ncclResult_t p_close_recv(void *recv_comm)
{
	return core_to_nccl(core_net_close_comm(recv_comm, 0));
}

static ncclResult_t p_close_listen(void *listen_comm)
{
	return core_to_nccl(core_net_close_listen(listen_comm));
}

static ncclResult_t p_finalize(void *ctx)
{
	return core_to_nccl(core_net_finalize(ctx));
}

/* Fills the fields every version shares; returns the rail or NULL. */
#define FILL_COMMON_PROPS(props, dev)                                          \
	({                                                                     \
		const struct core_rail *r_ = core_net_rail(dev);                   \
		if (r_) {                                                      \
			const struct mesh_dev_props *m_ = &r_->props;          \
			memset((props), 0, sizeof(*(props)));                  \
			(props)->name = (char *)m_->name;                      \
			(props)->pciPath = m_->pci_path[0] ?                   \
						   (char *)m_->pci_path :      \
						   NULL;                       \
			(props)->guid = m_->guid;                              \
			(props)->ptrSupport = m_->ptr_support;                 \
			(props)->regIsGlobal = m_->reg_is_global;              \
			(props)->forceFlush = m_->force_flush;                 \
			(props)->speed = m_->speed_mbps;                       \
			(props)->port = m_->port;                              \
			(props)->latency = m_->latency_us;                     \
			(props)->maxComms = m_->max_comms;                     \
			(props)->maxRecvs = m_->max_recvs;                     \
			(props)->netDeviceType = NCCL_NET_DEVICE_HOST;         \
			(props)->vProps.ndevs = 1;                             \
			(props)->vProps.devs[0] = (dev);                       \
			(props)->maxP2pBytes = m_->max_p2p_bytes;              \
			(props)->maxCollBytes = m_->max_coll_bytes;            \
		}                                                              \
		r_;                                                            \
	})

static ncclResult_t props_v10(int dev, ncclNetProperties_v10_t *props)
{
	return FILL_COMMON_PROPS(props, dev) ? ncclSuccess :
					       ncclInvalidArgument;
}

static ncclResult_t props_v11(int dev, ncclNetProperties_v11_t *props)
{
	if (!FILL_COMMON_PROPS(props, dev))
		return ncclInvalidArgument;
	props->maxMultiRequestSize = 1;
	return ncclSuccess;
}

static ncclResult_t props_v12(int dev, ncclNetProperties_v12_t *props)
{
	if (!FILL_COMMON_PROPS(props, dev))
		return ncclInvalidArgument;
	props->maxMultiRequestSize = 1;
	props->railId = (int16_t)dev;
	props->planeId = NCCL_NET_ID_UNDEF;
	return ncclSuccess;
}

/* ------------------------------------------------------- NCCL's hints */

/* NCCL's "not set" for trafficClass and for each ncclNetAttr_t field. */
#define NET_TRAFFIC_CLASS_UNDEF (-1)
#define NET_ATTR_UNDEF (-1)

/*
 * The traffic class of NCCL's config: -1 for none (no config, or
 * NCCL_NET_TRAFFIC_CLASS_UNDEF), else the TOS byte, 0..255.  A value
 * outside both is NCCL's caller's mistake: -EINVAL, said once here.
 */
static int traffic_class_of(const ncclNetCommConfig_t *config, int *tc)
{
	*tc = -1;
	if (!config || config->trafficClass == NET_TRAFFIC_CLASS_UNDEF)
		return 0;
	if (config->trafficClass < 0 || config->trafficClass > 255) {
		CORE_WARN("trafficClass %d in NCCL's communicator config is "
			  "not a traffic class (0..255, the TOS byte: "
			  "DSCP << 2)", config->trafficClass);
		return -EINVAL;
	}
	*tc = config->trafficClass;
	return 0;
}

/*
 * Whether one direction's hints of setNetAttr can be true: each count
 * NCCL_NET_ATTR_UNDEF or at least 0, and a minimum no larger than its
 * maximum.  0, or -EINVAL with the reason in why.  Not static: its unit
 * test calls it.
 */
int core_net_attr_check(const ncclNetAttr_t *attr, char *why, size_t cap);

static int comm_attr_check(const ncclNetCommAttr_t *a, const char *dir,
			   char *why, size_t cap)
{
	const struct {
		const char *name;
		int32_t v;
	} f[] = {
		{ "maxConcurrentPeers", a->maxConcurrentPeers },
		{ "minConcurrentPeers", a->minConcurrentPeers },
		{ "maxFlowsPerPeer", a->maxFlowsPerPeer },
		{ "minFlowsPerPeer", a->minFlowsPerPeer },
	};

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i].v < 0 && f[i].v != NET_ATTR_UNDEF) {
			snprintf(why, cap, "%sCommAttr.%s is %d", dir,
				 f[i].name, (int)f[i].v);
			return -EINVAL;
		}
	/* f[] pairs max, min: 0 with 1, 2 with 3 */
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i += 2)
		if (f[i].v >= 0 && f[i + 1].v > f[i].v) {
			snprintf(why, cap, "%sCommAttr.%s %d exceeds %s %d",
				 dir, f[i + 1].name, (int)f[i + 1].v,
				 f[i].name, (int)f[i].v);
			return -EINVAL;
		}
	return 0;
}

int core_net_attr_check(const ncclNetAttr_t *attr, char *why, size_t cap)
{
	if (!attr) {
		snprintf(why, cap, "no attributes (NULL)");
		return -EINVAL;
	}
	if (comm_attr_check(&attr->sendCommAttr, "send", why, cap))
		return -EINVAL;
	return comm_attr_check(&attr->recvCommAttr, "recv", why, cap);
}

/* NCCL sets its hints before every collective, by algorithm and protocol,
 * so they alternate among a few; each of those is logged once. */
#define PLUGIN_ATTRS_LOGGED 8

/*
 * A communicator's context as NCCL holds it (v11 on): the core's, and
 * NCCL's hints for its connections.  The traffic class goes with every
 * connect; setNetAttr's hints are recorded and logged, and nothing acts
 * on them yet (docs/nccl.md, "NCCL's hints", says why).
 */
struct plugin_ctx {
	void *core;
	int traffic_class;		/* -1: none */
	/* NCCL may set them from any thread, before every collective: the
	 * sets seen are only ever added to, each written whole before nattrs
	 * counts it, so a set seen before is found without the lock, which
	 * only adding one takes. */
	pthread_mutex_t attr_lock;
	atomic_int nattrs;
	ncclNetAttr_t attrs[PLUGIN_ATTRS_LOGGED];
};

/* The hints in one line, for the log. */
static void attr_text(const ncclNetAttr_t *a, char *buf, size_t cap)
{
	snprintf(buf, cap, "send peers %d..%d flows/peer %d..%d, recv peers "
		 "%d..%d flows/peer %d..%d, op 0x%x algo 0x%x proto 0x%x "
		 "(-1: unset)",
		 (int)a->sendCommAttr.minConcurrentPeers,
		 (int)a->sendCommAttr.maxConcurrentPeers,
		 (int)a->sendCommAttr.minFlowsPerPeer,
		 (int)a->sendCommAttr.maxFlowsPerPeer,
		 (int)a->recvCommAttr.minConcurrentPeers,
		 (int)a->recvCommAttr.maxConcurrentPeers,
		 (int)a->recvCommAttr.minFlowsPerPeer,
		 (int)a->recvCommAttr.maxFlowsPerPeer,
		 a->op, a->algo, a->proto);
}

/* Whether this set of hints came before (or no more are kept). */
static bool attr_seen(struct plugin_ctx *pc, const ncclNetAttr_t *attr)
{
	int n = atomic_load_explicit(&pc->nattrs, memory_order_acquire);

	for (int i = 0; i < n; i++)
		if (!memcmp(&pc->attrs[i], attr, sizeof(*attr)))
			return true;
	return n == PLUGIN_ATTRS_LOGGED;
}

/*
 * NCCL calls it before each connection it sets up and each collective it
 * runs, with hints by algorithm and protocol: a line for each hint set
 * the first time it comes, so that the log says what NCCL asked without
 * one line per call.
 */
static ncclResult_t set_net_attr(void *ctx, ncclNetAttr_t *attr)
{
	struct plugin_ctx *pc = ctx;
	char why[160], text[256];
	bool seen, last = false;
	int n;

	if (!pc) {
		CORE_WARN("setNetAttr without a context (NULL)");
		return ncclInvalidArgument;
	}
	if (core_net_attr_check(attr, why, sizeof(why))) {
		CORE_WARN("setNetAttr: NCCL's hints cannot be true: %s", why);
		return ncclInvalidArgument;
	}
	if (attr_seen(pc, attr))
		return ncclSuccess;
	pthread_mutex_lock(&pc->attr_lock);
	seen = attr_seen(pc, attr);	/* another thread's, meanwhile */
	if (!seen) {
		n = atomic_load_explicit(&pc->nattrs, memory_order_relaxed);
		pc->attrs[n] = *attr;
		atomic_store_explicit(&pc->nattrs, n + 1, memory_order_release);
		last = n + 1 == PLUGIN_ATTRS_LOGGED;
	}
	pthread_mutex_unlock(&pc->attr_lock);
	if (!seen) {
		attr_text(attr, text, sizeof(text));
		CORE_INFO("NCCL's hints for the connections of this "
			  "communicator: %s; recorded, not acted on%s", text,
			  last ? " (no more of them logged)" : "");
	}
	return ncclSuccess;
}

/* --------------------------------------------------------- v11 and v12 */

static ncclResult_t init_v11(void **ctx, uint64_t comm_id,
			     ncclNetCommConfig_t *config,
			     ncclDebugLogger_t logger,
			     ncclProfilerCallback_t prof)
{
	struct plugin_ctx *pc;
	int err;

	*ctx = NULL;
	core_log_set_nccl(logger);	/* the class's warning goes to NCCL */
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return ncclSystemError;
	/* NCCL's config lives on its stack: what it says is copied now */
	err = traffic_class_of(config, &pc->traffic_class);
	if (!err) {
		core_prof_set(prof);
		err = core_net_init(&pc->core, comm_id, logger);
	}
	if (err) {
		free(pc);
		return core_to_nccl(err);
	}
	pthread_mutex_init(&pc->attr_lock, NULL);
	atomic_init(&pc->nattrs, 0);
	if (pc->traffic_class >= 0)
		CORE_INFO("communicator %016llx: traffic class %d (DSCP %d) "
			  "for its connections", (unsigned long long)comm_id,
			  pc->traffic_class, pc->traffic_class >> 2);
	*ctx = pc;
	return ncclSuccess;
}

static ncclResult_t listen_v11(void *ctx, int dev, void *handle,
			       void **listen_comm)
{
	struct plugin_ctx *pc = ctx;

	return p_listen(pc ? pc->core : NULL, dev, handle, listen_comm);
}

static ncclResult_t connect_v11(void *ctx, int dev, void *handle,
				void **send_comm,
				ncclNetDeviceHandle_t **dev_comm)
{
	struct plugin_ctx *pc = ctx;

	return p_connect(pc ? pc->core : NULL, dev, handle,
			 pc ? pc->traffic_class : -1, send_comm, dev_comm);
}

static ncclResult_t finalize_v11(void *ctx)
{
	struct plugin_ctx *pc = ctx;
	ncclResult_t res;

	if (!pc)
		return p_finalize(NULL);
	res = p_finalize(pc->core);
	pthread_mutex_destroy(&pc->attr_lock);
	free(pc);
	return res;
}

#define V11_LIKE_MEMBERS(props_fn)                                             \
	.name = CORE_NCCL_NET_NAME, .init = init_v11, .devices = p_devices,    \
	.getProperties = props_fn, .listen = listen_v11,                       \
	.connect = connect_v11, .accept = p_accept, .regMr = p_reg_mr,         \
	.regMrDmaBuf = p_reg_mr_dmabuf, .deregMr = p_dereg_mr,                 \
	.isend = p_isend, .irecv = p_irecv, .iflush = p_iflush,                \
	.test = p_test, .closeSend = p_close_send,                             \
	.closeRecv = p_close_recv, .closeListen = p_close_listen,              \
	.getDeviceMr = NULL, .irecvConsumed = NULL, .makeVDevice = NULL,       \
	.finalize = finalize_v11, .setNetAttr = set_net_attr

PLUGIN_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
	V11_LIKE_MEMBERS(props_v12)
};

PLUGIN_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
	V11_LIKE_MEMBERS(props_v11)
};

/* For tools (meshinfo --cluster): what a comm runs over.  Named by
 * MESH_CONN_INFO_SYMBOL. */
PLUGIN_EXPORT int mesh_conn_info_v1(void *comm, struct mesh_conn_info *info)
{
	return core_net_conn_info(comm, info);
}

/* ---------------------------------------------------------------- v10 */

/* v10 has one process-wide init and no finalize: the library's unload
 * (mesh.c's destructor) tears down instead. */
static void *v10_ctx;

static ncclResult_t init_v10(ncclDebugLogger_t logger,
			     ncclProfilerCallback_t prof)
{
	core_prof_set(prof);
	if (v10_ctx)
		return ncclSuccess;
	return core_to_nccl(core_net_init(&v10_ctx, 0, logger));
}

__attribute__((destructor)) static void v10_unload(void)
{
	core_net_finalize(v10_ctx);
	v10_ctx = NULL;
}

static ncclResult_t listen_v10(int dev, void *handle, void **listen_comm)
{
	return p_listen(v10_ctx, dev, handle, listen_comm);
}

/* v10 hands the config to each connect instead of to init. */
static ncclResult_t connect_v10(int dev, ncclNetCommConfig_t *config,
				void *handle, void **send_comm,
				ncclNetDeviceHandle_t **dev_comm)
{
	int tc;
	int err = traffic_class_of(config, &tc);

	if (err) {
		*send_comm = NULL;
		return core_to_nccl(err);
	}
	return p_connect(v10_ctx, dev, handle, tc, send_comm, dev_comm);
}

PLUGIN_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
	.name = CORE_NCCL_NET_NAME,
	.init = init_v10,
	.devices = p_devices,
	.getProperties = props_v10,
	.listen = listen_v10,
	.connect = connect_v10,
	.accept = p_accept,
	.regMr = p_reg_mr,
	.regMrDmaBuf = p_reg_mr_dmabuf,
	.deregMr = p_dereg_mr,
	.isend = p_isend,
	.irecv = p_irecv,
	.iflush = p_iflush,
	.test = p_test,
	.closeSend = p_close_send,
	.closeRecv = p_close_recv,
	.closeListen = p_close_listen,
	.getDeviceMr = NULL,
	.irecvConsumed = NULL,
	.makeVDevice = NULL,
};

/* -------------------------------------------------------------- tuner */

static ncclResult_t tuner_init(size_t nranks, size_t nnodes,
			       ncclDebugLogger_t logger, void **ctx)
{
	(void)logger;	/* the network's init set the same one */
	return core_to_nccl(core_tuner_init(nranks, nnodes, ctx));
}

/*
 * The entry NCCL will run: the cheapest of its table, -1 for none.  The
 * table is NCCL's float[nalgo][nproto]; what NCCL cannot or may not run
 * (NCCL_ALGO, NCCL_PROTO) costs -1.
 */
static int cheapest(const float *cost, int nalgo, int nproto)
{
	int best = -1;

	for (int i = 0; i < nalgo * nproto; i++)
		if (cost[i] >= 0 && (best < 0 || cost[i] < cost[best]))
			best = i;
	return best;
}

/* A row of the table as the core names algorithms. */
static enum core_algo algo_of_row(int row)
{
	switch (row) {
	case NCCL_ALGO_TREE:
		return CORE_ALGO_TREE;
	case NCCL_ALGO_RING:
		return CORE_ALGO_RING;
	default:
		return CORE_ALGO_ANY;
	}
}

/* The algorithm NCCL will run, from the table as the tuner leaves it. */
static enum core_algo nccl_algo(float **cost_table, int nalgo, int nproto)
{
	int best = cheapest((const float *)cost_table, nalgo, nproto);

	return best < 0 ? CORE_ALGO_ANY : algo_of_row(best / nproto);
}

/*
 * Sets LL and LL128 aside wherever NCCL may run Simple, so that NCCL picks
 * the cheapest algorithm with Simple; where it may not (NCCL_PROTO),
 * NCCL's choice stands.
 */
static void simple_only(float **cost_table, int nalgo, int nproto)
{
	float *cost = (float *)cost_table;
	bool simple = false;

	if (nproto <= NCCL_PROTO_SIMPLE)
		return;
	for (int a = 0; a < nalgo; a++)
		simple = simple || cost[a * nproto + NCCL_PROTO_SIMPLE] >= 0;
	for (int a = 0; simple && a < nalgo; a++) {
		cost[a * nproto + NCCL_PROTO_LL] = NCCL_ALGO_PROTO_IGNORE;
		cost[a * nproto + NCCL_PROTO_LL128] = NCCL_ALGO_PROTO_IGNORE;
	}
}

/*
 * An all-reduce between datacenters: each Tree and Ring entry costs
 * NCCL's time plus what the WAN adds to it (core_tuner_wan_us).  Where
 * another entry then costs less than NCCL's own choice, every other entry
 * is set aside so that NCCL runs it; NCCL's choice of an algorithm the
 * model does not know stands, and what NCCL cannot run stays -1.
 */
static void by_distance(void *ctx, size_t nbytes, float **cost_table,
			int nalgo, int nproto)
{
	float *cost = (float *)cost_table;
	int nccl = cheapest(cost, nalgo, nproto), best = nccl;
	double wan, least;

	if (nccl < 0)
		return;
	wan = core_tuner_wan_us(ctx, algo_of_row(nccl / nproto));
	if (wan < 0)
		return;
	least = cost[nccl] + wan;
	for (int i = 0; i < nalgo * nproto; i++) {
		wan = core_tuner_wan_us(ctx, algo_of_row(i / nproto));
		if (cost[i] >= 0 && wan >= 0 && cost[i] + wan < least) {
			least = cost[i] + wan;
			best = i;
		}
	}
	core_tuner_note(ctx, nbytes, algo_of_row(nccl / nproto),
			algo_of_row(best / nproto));
	for (int i = 0; best != nccl && i < nalgo * nproto; i++)
		if (i != best)
			cost[i] = NCCL_ALGO_PROTO_IGNORE;
}

/* The protocol above nccl_ll_max, the algorithm by distance, then the
 * channel count for the algorithm NCCL will run. */
static ncclResult_t tuner_coll_info(void *ctx, ncclFunc_t coll, size_t nbytes,
				    int npipe_ops, float **cost_table,
				    int nalgo, int nproto, int reg_buff,
				    int *nchannels)
{
	int n;

	(void)npipe_ops, (void)reg_buff;
	if (core_tuner_simple_only(ctx, nbytes))
		simple_only(cost_table, nalgo, nproto);
	if (coll == ncclFuncAllReduce)
		by_distance(ctx, nbytes, cost_table, nalgo, nproto);
	n = core_tuner_channels(ctx, nbytes,
				nccl_algo(cost_table, nalgo, nproto));
	if (n)
		*nchannels = n;
	return ncclSuccess;
}

static ncclResult_t tuner_destroy(void *ctx)
{
	core_tuner_destroy(ctx);
	return ncclSuccess;
}

PLUGIN_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {
	.name = CORE_NCCL_NET_NAME,
	.init = tuner_init,
	.getCollInfo = tuner_coll_info,
	.destroy = tuner_destroy,
};
