/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's data-path threads: one pool per process, sized from the cores
 * (two per core, or the threads key), shared by every comm.  A comm's streams are split
 * into lanes, one per pool thread it uses; a thread steps each of its lanes
 * (tcp_xdc_send.c, tcp_xdc_recv.c) and then sleeps in one poll() over all
 * their sockets and its eventfd.  So threads follow the cores, and a comm
 * costs its sockets and a few hundred bytes, not threads.
 *
 * Lanes come and go under the thread's mutex, which the data path never
 * takes: the thread copies its lane list when the list's generation
 * changes, and a closing comm waits until every thread of its lanes has
 * seen the generation that dropped them.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "tcp_xdc_pool.h"
#include "tcp_xdc_recv.h"
#include "tcp_xdc_send.h"

struct tcp_xdc_worker {
	struct tcp_xdc_pool *pool;
	pthread_t tid;
	bool started;
	int efd;			/* eventfd: wake-ups from any thread */
	pthread_mutex_t lock;		/* guards what follows */
	pthread_cond_t seen_cond;
	struct tcp_xdc_lane **lanes;
	int nlanes;
	int cap;
	uint64_t gen;			/* bumped by every change of lanes */
	uint64_t seen;			/* the thread's copy is of this gen */
	bool running;
};

struct tcp_xdc_pool {
	int nworkers;
	int spin_us;
	atomic_int stop;
	atomic_uint next;		/* first thread of the next comm */
	atomic_int ncomms;		/* attached, not yet detached */
	struct tcp_xdc_worker workers[];
};

/* What a thread works from between two looks at its lane list. */
struct worker_view {
	uint64_t gen;
	int nlanes;
	int nfds;			/* streams of all lanes, plus the eventfd */
	struct tcp_xdc_lane **lanes;
	struct pollfd *pfd;		/* [0]: eventfd, then lane by lane */
};

/* The cores this process may run on (its affinity, as taskset or a
 * container's cpuset leave it), or the online ones. */
static int cores_usable(void)
{
	cpu_set_t set;
	long online;

	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	online = sysconf(_SC_NPROCESSORS_ONLN);
	return online > 0 ? (int)online : 1;
}

/*
 * Two per core by default: a thread that waits on a full socket leaves its
 * core to the other (measured on two cores, 64 MiB: 2 threads 21.0 Gb/s,
 * 4 threads 22.8).
 */
int tcp_xdc_pool_size(int threads)
{
	int n = 2 * cores_usable();

	if (threads > 0)
		return threads;
	return n > TCP_XDC_MAX_THREADS ? TCP_XDC_MAX_THREADS : n;
}

static void worker_wake(struct tcp_xdc_worker *w)
{
	xdc_efd_wake(w->efd);
}

/* Takes a fresh copy of the lane list; false when out of memory. */
static bool worker_refresh(struct tcp_xdc_worker *w, struct worker_view *v)
{
	bool ok = true;
	int nfds = 1;

	pthread_mutex_lock(&w->lock);
	for (int i = 0; i < w->nlanes; i++)
		nfds += w->lanes[i]->nstreams;
	if (nfds > v->nfds || w->nlanes > v->nlanes) {
		void *lanes = realloc(v->lanes, (size_t)(w->nlanes + 1) *
				      sizeof(*v->lanes));
		void *pfd = realloc(v->pfd, (size_t)nfds * sizeof(*v->pfd));

		if (lanes)
			v->lanes = lanes;
		if (pfd)
			v->pfd = pfd;
		ok = lanes && pfd;
	}
	if (ok) {
		if (w->nlanes)
			memcpy(v->lanes, w->lanes,
			       (size_t)w->nlanes * sizeof(*v->lanes));
		v->nlanes = w->nlanes;
		v->nfds = nfds;
		v->gen = w->gen;
		w->seen = w->gen;
		pthread_cond_broadcast(&w->seen_cond);
	}
	pthread_mutex_unlock(&w->lock);
	return ok;
}

static int sleep_min(int a, int b)
{
	if (a < 0)
		return b;
	if (b < 0)
		return a;
	return a < b ? a : b;
}

/* One step of every lane; how long the thread may then sleep (-1: until
 * woken, 0: not at all). */
static int worker_step(struct worker_view *v)
{
	int off = 1, sleep_ms = -1;

	for (int i = 0; i < v->nlanes; i++) {
		struct tcp_xdc_lane *l = v->lanes[i];
		struct pollfd *pfd = v->pfd + off;
		int ms = -1;

		off += l->nstreams;
		if (xdc_comm_stopped(l->comm)) {
			/* Failed or closing: its sockets are not ours now. */
			for (int j = 0; j < l->nstreams; j++)
				pfd[j] = (struct pollfd){ .fd = -1 };
			continue;
		}
		ms = l->comm->is_send ? xdc_send_lane_step(l, pfd) :
					xdc_recv_lane_step(l, pfd);
		sleep_ms = sleep_min(sleep_ms, ms);
	}
	return sleep_ms;
}

/*
 * Looks at the sockets and for new sends without sleeping for up to
 * spin_us: the next message of a busy connection usually comes within
 * microseconds, and a sleeping thread costs a wake-up on both sides.
 * Yielding keeps the proxy thread running on a small host.  Returns the
 * poll() result of the last round, or 1 when a send lane has work.
 */
static int worker_spin(struct tcp_xdc_pool *pool, struct worker_view *v)
{
	uint64_t end = xdc_now_ns() + (uint64_t)pool->spin_us * 1000;
	int ret;

	do {
		ret = poll(v->pfd, (nfds_t)v->nfds, 0);
		if (ret)
			return ret;
		for (int i = 0; i < v->nlanes; i++)
			if (xdc_send_lane_has_work(v->lanes[i]))
				return 1;
		sched_yield();
	} while (xdc_now_ns() < end && !atomic_load(&pool->stop));
	return 0;
}

/* Sleeps in poll(), then hands each stream its events. */
static void worker_wait(struct tcp_xdc_worker *w, struct worker_view *v,
			int sleep_ms)
{
	uint64_t count;
	int ret = 0, off = 1;

	v->pfd[0] = (struct pollfd){ .fd = w->efd, .events = POLLIN };
	if (w->pool->spin_us)
		ret = worker_spin(w->pool, v);
	if (!ret)
		ret = poll(v->pfd, (nfds_t)v->nfds, sleep_ms);
	if (ret < 0) {
		if (errno != EINTR)
			MESH_WARN("data thread: poll: %s", strerror(errno));
		return;
	}
	if ((v->pfd[0].revents & POLLIN) &&
	    read(w->efd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		MESH_INFO("eventfd read: %s", strerror(errno));
	for (int i = 0; i < v->nlanes; i++) {
		struct tcp_xdc_lane *l = v->lanes[i];

		for (int j = 0; j < l->nstreams; j++)
			if (v->pfd[off + j].fd >= 0)
				l->streams[j]->revents |= v->pfd[off + j].revents;
		off += l->nstreams;
	}
}

static void *worker_main(void *arg)
{
	struct tcp_xdc_worker *w = arg;
	struct worker_view v = { .gen = UINT64_MAX };

	while (!atomic_load_explicit(&w->pool->stop, memory_order_acquire)) {
		int sleep_ms;

		if (__atomic_load_n(&w->gen, __ATOMIC_ACQUIRE) != v.gen &&
		    !worker_refresh(w, &v)) {
			MESH_WARN("data thread: out of memory for its lane list");
			sleep(1);
			continue;
		}
		sleep_ms = worker_step(&v);
		if (sleep_ms)
			worker_wait(w, &v, sleep_ms);
	}
	pthread_mutex_lock(&w->lock);
	w->running = false;
	pthread_cond_broadcast(&w->seen_cond);
	pthread_mutex_unlock(&w->lock);
	free(v.lanes);
	free(v.pfd);
	return NULL;
}

/* ---- lanes (proxy thread) ---- */

static int worker_add(struct tcp_xdc_worker *w, struct tcp_xdc_lane *l)
{
	pthread_mutex_lock(&w->lock);
	if (w->nlanes == w->cap) {
		int cap = w->cap ? 2 * w->cap : 8;
		void *lanes = realloc(w->lanes, (size_t)cap * sizeof(*w->lanes));

		if (!lanes) {
			pthread_mutex_unlock(&w->lock);
			return -ENOMEM;
		}
		w->lanes = lanes;
		w->cap = cap;
	}
	w->lanes[w->nlanes++] = l;
	__atomic_store_n(&w->gen, w->gen + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&w->lock);
	worker_wake(w);
	return 0;
}

/* Drops l and waits until the thread no longer looks at it. */
static void worker_remove(struct tcp_xdc_worker *w, struct tcp_xdc_lane *l)
{
	uint64_t gen;

	pthread_mutex_lock(&w->lock);
	for (int i = 0; i < w->nlanes; i++) {
		if (w->lanes[i] == l) {
			w->lanes[i] = w->lanes[--w->nlanes];
			break;
		}
	}
	gen = w->gen + 1;
	__atomic_store_n(&w->gen, gen, __ATOMIC_RELEASE);
	worker_wake(w);
	while (w->running && w->seen < gen)
		pthread_cond_wait(&w->seen_cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/*
 * Hands the comm's lanes to consecutive pool threads, starting where the
 * last comm stopped, so that many small comms spread evenly.
 */
int xdc_pool_attach(struct tcp_xdc_ctx *ctx, struct tcp_xdc_comm *comm)
{
	struct tcp_xdc_pool *pool = ctx->pool;
	unsigned int first = atomic_fetch_add(&pool->next,
					      (unsigned int)comm->nlanes);

	/* Counted before its first lane may run; detach uncounts it once a
	 * lane is attached, and a comm whose first lane failed is uncounted
	 * here (detach finds no lane of it). */
	atomic_fetch_add(&pool->ncomms, 1);

	for (int i = 0; i < comm->nlanes; i++) {
		struct tcp_xdc_lane *l = &comm->lanes[i];
		int ret;

		l->worker = (first + (unsigned int)i) %
			    (unsigned int)pool->nworkers;
		l->wake_fd = pool->workers[l->worker].efd;
		ret = worker_add(&pool->workers[l->worker], l);
		l->attached = !ret;
		if (ret) {
			MESH_WARN("%s comm %u: out of memory for a lane",
				  xdc_comm_kind(comm), comm->id);
			if (i == 0)
				atomic_fetch_sub(&pool->ncomms, 1);
			else
				xdc_pool_detach(comm);
			return ret;
		}
	}
	return 0;
}

bool xdc_pool_detach(struct tcp_xdc_comm *comm)
{
	struct tcp_xdc_pool *pool = NULL;

	for (int i = 0; i < comm->nlanes; i++) {
		struct tcp_xdc_lane *l = &comm->lanes[i];

		if (!l->attached)
			continue;
		pool = comm->ctx->pool;
		worker_remove(&pool->workers[l->worker], l);
		l->attached = false;
	}
	return pool && atomic_fetch_sub(&pool->ncomms, 1) == 1 &&
	       atomic_load(&pool->stop);
}

int xdc_pool_workers(const struct tcp_xdc_ctx *ctx)
{
	return ctx->pool->nworkers;
}

/* ---- life of the pool ---- */

static void pool_join(struct tcp_xdc_pool *pool)
{
	atomic_store(&pool->stop, 1);
	for (int i = 0; i < pool->nworkers; i++) {
		struct tcp_xdc_worker *w = &pool->workers[i];

		if (w->started) {
			worker_wake(w);
			pthread_join(w->tid, NULL);
			w->started = false;
		}
	}
}

static void pool_free(struct tcp_xdc_pool *pool)
{
	for (int i = 0; i < pool->nworkers; i++) {
		struct tcp_xdc_worker *w = &pool->workers[i];

		if (w->efd >= 0)
			close(w->efd);
		free(w->lanes);
		pthread_cond_destroy(&w->seen_cond);
		pthread_mutex_destroy(&w->lock);
	}
	free(pool);
}

/* Data threads take no signals: those belong to the application. */
static int worker_start(struct tcp_xdc_worker *w, int index)
{
	char name[16];
	int ret;

	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0) {
		ret = -errno;
		MESH_WARN("eventfd: %s", strerror(errno));
		return ret;
	}
	w->running = true;
	ret = -pthread_create(&w->tid, NULL, worker_main, w);
	if (ret) {
		w->running = false;
		MESH_WARN("cannot start a data thread: %s", strerror(-ret));
		return ret;
	}
	w->started = true;
	snprintf(name, sizeof(name), "xdc-data-%d", index % 100);
	pthread_setname_np(w->tid, name);
	return 0;
}

/* Starts the pool with the first comm; later calls find it running. */
int tcp_xdc_pool_start(struct tcp_xdc_ctx *ctx)
{
	int n = ctx->threads, ret = 0;
	struct tcp_xdc_pool *pool;
	sigset_t all, old;

	pthread_mutex_lock(&ctx->linger_lock);
	if (ctx->pool)
		goto out;
	pool = calloc(1, sizeof(*pool) + (size_t)n * sizeof(pool->workers[0]));
	if (!pool) {
		ret = -ENOMEM;
		MESH_WARN("out of memory for the data threads");
		goto out;
	}
	pool->nworkers = n;
	pool->spin_us = ctx->spin_us;
	for (int i = 0; i < n; i++) {
		pool->workers[i].pool = pool;
		pool->workers[i].efd = -1;
		pthread_mutex_init(&pool->workers[i].lock, NULL);
		pthread_cond_init(&pool->workers[i].seen_cond, NULL);
	}
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (int i = 0; i < n && !ret; i++)
		ret = worker_start(&pool->workers[i], i);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		pool_join(pool);
		pool_free(pool);
		goto out;
	}
	MESH_INFO("%d data threads, shared by all connections", n);
	ctx->pool = pool;
out:
	pthread_mutex_unlock(&ctx->linger_lock);
	return ret;
}

static void pool_release(struct tcp_xdc_ctx *ctx)
{
	if (ctx->pool)
		pool_free(ctx->pool);
	ctx->pool = NULL;
}

/*
 * NCCL closes its comms before it finalizes the plugin.  Should one still
 * be open, the threads stop but the pool stays, so that closing the comm
 * later is safe; the last such close frees it.
 */
int tcp_xdc_pool_fini(struct tcp_xdc_ctx *ctx)
{
	struct tcp_xdc_pool *pool = ctx->pool;
	int open;

	if (!pool)
		return 0;
	pool_join(pool);
	open = atomic_load(&pool->ncomms);
	if (open)
		MESH_INFO("%d connections still open at finalize: their data threads stopped, their state stays until they close",
			  open);
	else
		pool_release(ctx);
	return open;
}

/* The module's context, once fini and the last comm open at fini (whose
 * detach says so) are done with it. */
void tcp_xdc_ctx_free(struct tcp_xdc_ctx *ctx)
{
	pool_release(ctx);
	pthread_mutex_destroy(&ctx->linger_lock);
	free(ctx->devs);
	free(ctx);
}
