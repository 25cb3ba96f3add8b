/* SPDX-License-Identifier: MIT */
/*
 * A small NCCL profiler plugin for the GPU test of the plugin's profiler
 * events (tests/gpu/profiler/run.sh).  It asks NCCL for ProxyOp,
 * ProxyStep and net plugin events (and the group and collective events
 * above them), keeps every event in memory while the job runs, and writes
 * them as text when told (meshprof_dump) or at the last finalize (to
 * $MESHPROF_FILE): one line per event, read by check.py.
 *
 * The job switches the events off and on while it runs (meshprof_enable):
 * NCCL reads the activation mask the profiler set at init for every
 * group it launches, so blocks of the same job alternate between events
 * on and off.  meshprof_mark starts a new phase; each event carries the
 * phase it started in.
 *
 * Recording costs an atomic increment and a clock read per event, no
 * lock and no allocation: the records are one array, mapped at the first
 * init ($MESHPROF_MAX records, default 4M); events past it are counted
 * and dropped.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "nccl-mesh/nccl_profiler.h"
#include "prof_abi.h"
#include "meshprof.h"

#define EXPORT __attribute__((visibility("default")))

#define MASK_ON (ncclProfileGroup | ncclProfileColl | ncclProfileProxyOp | \
		 ncclProfileProxyStep | ncclProfileNetPlugin)

static struct meshprof_rec *recs;
static uint64_t cap;
static atomic_uint_fast64_t nrecs;
static atomic_uint_fast64_t dropped;
static atomic_int phase;
static char marks[MESHPROF_MARKS][64];
static atomic_int enabled = 1;
static int *mask_ptr;		/* NCCL's mask, from init */
static int rank = -1;
static atomic_int contexts;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int map_records(void)
{
	const char *env = getenv("MESHPROF_MAX");
	uint64_t n = env ? strtoull(env, NULL, 0) : (4ull << 20);
	void *p;

	if (recs)
		return 0;
	if (n < 1024)
		n = 1024;
	p = mmap(NULL, n * sizeof(*recs), PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	recs = p;
	cap = n;
	return 0;
}

static void apply_mask(void)
{
	if (mask_ptr)
		__atomic_store_n(mask_ptr,
				 atomic_load(&enabled) ? MASK_ON : 0,
				 __ATOMIC_RELAXED);
}

EXPORT void meshprof_enable(int on)
{
	atomic_store(&enabled, on != 0);
	apply_mask();
}

EXPORT int meshprof_mark(const char *name)
{
	int p = atomic_load(&phase) + 1;

	if (p >= MESHPROF_MARKS)
		return -1;
	snprintf(marks[p], sizeof(marks[p]), "%s", name ? name : "");
	atomic_store(&phase, p);
	return p;
}

static struct meshprof_rec *rec_of(void *handle)
{
	struct meshprof_rec *r = handle;

	if (!r || !recs || r < recs || r >= recs + cap)
		return NULL;
	return r;
}

static uint64_t id_of(void *handle)
{
	struct meshprof_rec *r = rec_of(handle);

	return r ? (uint64_t)(r - recs) + 1 : 0;
}

/* Both versions' startEvent, the descriptor's fields read out. */
static void start(void **eh, uint64_t type, void *parent, int r,
		  const union meshprof_descr_u *u)
{
	uint64_t i = atomic_fetch_add_explicit(&nrecs, 1,
					       memory_order_relaxed);
	struct meshprof_rec *rec;

	*eh = NULL;
	if (!recs || i >= cap) {
		atomic_fetch_add(&dropped, 1);
		return;
	}
	rec = &recs[i];
	rec->type = (uint32_t)type;
	rec->phase = (uint16_t)atomic_load_explicit(&phase,
						    memory_order_relaxed);
	rec->rank = r;
	rec->parent = id_of(parent);
	switch (type) {
	case ncclProfileProxyOp:
		rec->a = u->proxyOp.channelId;
		rec->b = u->proxyOp.peer;
		rec->c = u->proxyOp.nSteps;
		rec->d = u->proxyOp.isSend;
		rec->bytes = (uint64_t)(int64_t)u->proxyOp.chunkSize;
		break;
	case ncclProfileProxyStep:
		rec->a = u->proxyStep.step;
		break;
	case ncclProfileNetPlugin:
		rec->net_id = u->netPlugin.id;
		if (u->netPlugin.id == MESH_PROF_NET_ID && u->netPlugin.data)
			rec->ev = *(const struct mesh_prof_event_v1 *)
					   u->netPlugin.data;
		break;
	default:
		break;
	}
	rec->t0 = now_ns();
	*eh = rec;
}

static ncclResult_t stop_event(void *eh)
{
	struct meshprof_rec *r = rec_of(eh);

	if (r)
		r->t1 = now_ns();
	return ncclSuccess;
}

static ncclResult_t record_state(void *eh, int state,
				 ncclProfilerEventStateArgs_t *args)
{
	struct meshprof_rec *r = rec_of(eh);

	if (!r || !args)
		return ncclSuccess;
	if (r->type == ncclProfileProxyStep) {
		/*
		 * NCCL sets transSize to a step's size right after the isend
		 * (SendWait) and after the receive's test said done
		 * (RecvFlushWait); the states after those may carry the next
		 * step's size already.
		 */
		if (state == MESHPROF_STATE_SEND_WAIT ||
		    state == MESHPROF_STATE_RECV_FLUSH_WAIT) {
			r->bytes = args->proxyStep.transSize;
			r->states++;
		}
	} else if (r->type == ncclProfileNetPlugin &&
		   state == MESHPROF_STATE_NET_UPDATE &&
		   r->net_id == MESH_PROF_NET_ID && args->netPlugin.data) {
		r->ev = *(const struct mesh_prof_event_v1 *)
				 args->netPlugin.data;
		r->states++;
	}
	return ncclSuccess;
}

static ncclResult_t init_common(void **ctx, int *mask, int r)
{
	pthread_mutex_lock(&lock);
	if (map_records()) {
		pthread_mutex_unlock(&lock);
		return ncclSystemError;
	}
	mask_ptr = mask;
	rank = r;
	apply_mask();
	atomic_fetch_add(&contexts, 1);
	pthread_mutex_unlock(&lock);
	*ctx = &contexts;	/* one recorder for every comm */
	return ncclSuccess;
}

static void addr_text(const struct mesh_prof_event_v1 *e, char *buf,
		      size_t cap_)
{
	const uint8_t *ip = e->peer_ip;

	if (e->peer_family == 2)	/* AF_INET */
		snprintf(buf, cap_, "%u.%u.%u.%u:%u", ip[0], ip[1], ip[2],
			 ip[3], e->peer_port);
	else if (e->peer_family)
		snprintf(buf, cap_, "ipv6:%u", e->peer_port);
	else
		snprintf(buf, cap_, "-");
}

static const char *kind_name(int kind)
{
	switch (kind) {
	case 1:
		return "stream";
	case 2:
		return "qp";
	case 3:
		return "hop";
	default:
		return "-";
	}
}

static void write_rec(FILE *f, uint64_t id, const struct meshprof_rec *r)
{
	char peer[64];

	switch (r->type) {
	case ncclProfileProxyOp:
		fprintf(f, "op %llu parent=%llu channel=%d peer=%d nsteps=%d "
			"send=%d chunk=%llu",
			(unsigned long long)id, (unsigned long long)r->parent,
			r->a, r->b, r->c, r->d, (unsigned long long)r->bytes);
		break;
	case ncclProfileProxyStep:
		fprintf(f, "step %llu op=%llu step=%d bytes=%llu states=%u",
			(unsigned long long)id, (unsigned long long)r->parent,
			r->a, (unsigned long long)r->bytes, r->states);
		break;
	case ncclProfileNetPlugin:
		fprintf(f, "net %llu step=%llu plugin=0x%llx",
			(unsigned long long)id, (unsigned long long)r->parent,
			(unsigned long long)r->net_id);
		if (r->net_id == MESH_PROF_NET_ID) {
			addr_text(&r->ev, peer, sizeof(peer));
			fprintf(f, " type=%s dir=%s kind=%s index=%d req=%llu "
				"bytes=%llu flags=%u tag=%d sub=%u module=%s "
				"peer=%s updates=%u",
				r->ev.type == MESH_PROF_PART ? "part" : "req",
				r->ev.send ? "send" : "recv",
				kind_name(r->ev.kind), r->ev.index,
				(unsigned long long)r->ev.request,
				(unsigned long long)r->ev.bytes, r->ev.flags,
				r->ev.tag, r->ev.sub,
				r->ev.module[0] ? r->ev.module : "-", peer,
				r->states);
		}
		break;
	default:
		fprintf(f, "ev %llu type=%u parent=%llu",
			(unsigned long long)id, r->type,
			(unsigned long long)r->parent);
		break;
	}
	fprintf(f, " phase=%u t0=%llu t1=%llu\n", r->phase,
		(unsigned long long)r->t0, (unsigned long long)r->t1);
}

EXPORT int meshprof_dump(const char *path)
{
	uint64_t n = atomic_load(&nrecs);
	FILE *f = fopen(path, "w");
	int p = atomic_load(&phase);

	if (!f)
		return -1;
	if (n > cap)
		n = cap;
	fprintf(f, "# meshprof 1 rank=%d pid=%d records=%llu dropped=%llu\n",
		rank, (int)getpid(), (unsigned long long)n,
		(unsigned long long)atomic_load(&dropped));
	for (int i = 1; i <= p && i < MESHPROF_MARKS; i++)
		fprintf(f, "mark %d %s\n", i, marks[i]);
	for (uint64_t i = 0; i < n; i++)
		write_rec(f, i + 1, &recs[i]);
	return fclose(f) ? -1 : 0;
}

/* ------------------------------------------------------------ v4, v5 */

static ncclResult_t init_v5(void **ctx, uint64_t comm_id, int *mask,
			    const char *name, int nnodes, int nranks, int r,
			    ncclDebugLogger_t logfn)
{
	(void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)logfn;
	return init_common(ctx, mask, r);
}

static ncclResult_t init_v4(void **ctx, int *mask, const char *name,
			    uint64_t hash, int nnodes, int nranks, int r,
			    ncclDebugLogger_t logfn)
{
	(void)hash;
	return init_v5(ctx, 0, mask, name, nnodes, nranks, r, logfn);
}

static ncclResult_t start_v5(void *ctx, void **eh,
			     ncclProfilerEventDescr_v5_t *d)
{
	(void)ctx;
	start(eh, d->type, d->parentObj, d->rank, &d->u);
	return ncclSuccess;
}

static ncclResult_t start_v4(void *ctx, void **eh,
			     ncclProfilerEventDescr_v4_t *d)
{
	(void)ctx;
	start(eh, d->type, d->parentObj, d->rank, &d->u);
	return ncclSuccess;
}

static ncclResult_t finalize(void *ctx)
{
	const char *path = getenv("MESHPROF_FILE");

	(void)ctx;
	if (atomic_fetch_sub(&contexts, 1) == 1 && path && *path)
		(void)meshprof_dump(path);
	return ncclSuccess;
}

EXPORT const ncclProfiler_v5_t ncclProfiler_v5 = {
	.name = "meshprof",
	.init = init_v5,
	.startEvent = start_v5,
	.stopEvent = stop_event,
	.recordEventState = record_state,
	.finalize = finalize,
};

EXPORT const ncclProfiler_v4_t ncclProfiler_v4 = {
	.name = "meshprof",
	.init = init_v4,
	.startEvent = start_v4,
	.stopEvent = stop_event,
	.recordEventState = record_state,
	.finalize = finalize,
};
