/* SPDX-License-Identifier: MIT */
/*
 * Profiler events (docs/observe.md, "Profiler events").
 *
 * NCCL passes its callback at every init, whether a profiler plugin is
 * loaded or not, and a pHandle with every isend and irecv.  Whether the
 * step of a request is profiled only shows when its event is started: the
 * callback leaves the handle NULL when no profiler asked for net plugin
 * events.  So the core starts the request's event first, before the
 * module's call, and only when it started does anything else happen: the
 * module sees a token (prof_request) and reports its parts, and the
 * request NCCL gets back is the core's, whose test() stops the event with
 * what moved.  An unprofiled request costs the one callback and goes to
 * the module as it would without it.
 *
 * NCCL calls isend again with the same pHandle when the module took no
 * request (all its slots busy): the started event waits for that retry,
 * one per thread, instead of being reported as a second request.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "nccl-mesh/nccl_profiler.h"
#include "profile.h"

ncclProfilerCallback_t core_prof_fn;

/* Grouped receives reported one by one; an irecv of more goes
 * unreported. */
#define PROF_SUBS 8

/* The core's request around a profiled one of a module. */
struct prof_req {
	struct mesh_request base;	/* test = prof_test */
	struct mesh_request *inner;	/* the module's */
	const char *module;		/* its name, whole */
	int n;				/* 1, or an irecv's receives */
	void *phandle[PROF_SUBS];
	void *ev[PROF_SUBS];		/* NCCL's events; NULL: none */
	struct mesh_prof_event_v1 d[PROF_SUBS];
};

/* The request on this thread's module call (prof_request), and a started
 * one whose post the module turned down (waiting for NCCL's retry).  No
 * request is kept for the next one: a thread's cache would outlive an
 * unload of the plugin (a leak, and a destructor in unmapped code). */
static __thread struct prof_req *cur;
static __thread struct prof_req *waiting;
/* Ids: a thread's number in the high bits, its count below. */
static __thread uint64_t next_id;
static atomic_uint_fast64_t threads;

static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

void core_prof_set(ncclProfilerCallback_t fn)
{
	if (fn)
		__atomic_store_n(&core_prof_fn, fn, __ATOMIC_RELEASE);
}

/* NCCL's call; a profiler error never fails the data path (the
 * profiler's README asks profilers to return success only). */
static void *ev_start(void *phandle, struct mesh_prof_event_v1 *d)
{
	void *ev = NULL;

	(void)core_prof_fn(&ev, MESH_NCCL_PROF_NET_START, phandle,
			   MESH_PROF_NET_ID, d);
	return ev;
}

static void ev_stop(void **ev, int type, struct mesh_prof_event_v1 *d)
{
	if (*ev)
		(void)core_prof_fn(ev, type, NULL, 0, d);
	*ev = NULL;
}

/* Stops what a request started: with what moved (sizes from test(), NULL
 * for what was posted) and flags. */
static void req_stop(struct prof_req *w, const int *sizes, uint8_t flags)
{
	for (int i = 0; i < w->n; i++) {
		if (sizes && !w->d[i].send && sizes[i] >= 0)
			w->d[i].bytes = (uint64_t)sizes[i];
		if (flags & MESH_PROF_FLAG_UNPOSTED)
			w->d[i].bytes = 0;
		w->d[i].flags |= flags;
		ev_stop(&w->ev[i], MESH_NCCL_PROF_NET_UPDATE_AND_STOP,
			&w->d[i]);
	}
}

/* A thread that ends with a post still waiting reports it unposted. */
static void thread_exit(void *unused)
{
	(void)unused;
	if (waiting) {
		req_stop(waiting, NULL, MESH_PROF_FLAG_UNPOSTED);
		free(waiting);
		waiting = NULL;
	}
}

static bool exit_key_made;

static void exit_key_make(void)
{
	exit_key_made = !pthread_key_create(&exit_key, thread_exit);
}

/* Unloaded: the unloading thread's kept request goes, and no thread that
 * ends later calls into code that is gone. */
__attribute__((destructor)) static void prof_unload(void)
{
	thread_exit(NULL);
	if (exit_key_made)
		(void)pthread_key_delete(exit_key);
}

static int prof_test(void *request, int *done, int *sizes)
{
	struct prof_req *w = request;
	int err = w->inner->test(w->inner, done, sizes);

	if (err) {
		/* stopped once; the request stays the caller's to test */
		req_stop(w, NULL, MESH_PROF_FLAG_FAILED);
		return err;
	}
	if (*done) {
		req_stop(w, sizes, 0);
		free(w);
	}
	return 0;
}

static void fill(struct mesh_prof_event_v1 *d, const struct core_prof_comm *c,
		 uint64_t id, bool send, int sub, size_t bytes, int tag)
{
	memset(d, 0, sizeof(*d));
	d->type = MESH_PROF_REQUEST;
	d->send = send;
	d->request = id;
	d->bytes = bytes;
	d->tag = tag;
	d->sub = (uint8_t)sub;
	if (c->peer) {
		d->peer_family = c->peer->family;
		d->peer_port = c->peer->port;
		memcpy(d->peer_ip, c->peer->ip, sizeof(d->peer_ip));
	}
	strncpy(d->module, c->desc->name, sizeof(d->module) - 1);
}

/*
 * The started request for these handles: the one waiting for this retry,
 * else a new one when NCCL starts an event for any of its receives.  NULL
 * when nothing is profiled (or no memory: then nothing is reported).
 */
static struct prof_req *req_begin(const struct core_prof_comm *c, bool send,
				  int n, void **phandles, const size_t *sizes,
				  const int *tags)
{
	struct prof_req *w = waiting;
	bool any = false;

	if (w) {
		waiting = NULL;
		if (w->n == n && w->d[0].send == send &&
		    !memcmp(w->phandle, phandles, (size_t)n * sizeof(void *)))
			return w;
		/* NCCL moved on without the retry */
		req_stop(w, NULL, MESH_PROF_FLAG_UNPOSTED);
		free(w);
	}
	w = malloc(sizeof(*w));
	if (!w)
		return NULL;
	if (!next_id) {
		(void)pthread_once(&exit_once, exit_key_make);
		(void)pthread_setspecific(exit_key, &next_id);
		next_id = (atomic_fetch_add(&threads, 1) + 1) << 40;
	}
	w->base.test = prof_test;
	w->module = c->desc->name;
	w->n = n;
	for (int i = 0; i < n; i++) {
		w->phandle[i] = phandles[i];
		fill(&w->d[i], c, next_id, send, i, sizes[i], tags[i]);
		w->ev[i] = phandles[i] ? ev_start(phandles[i], &w->d[i]) : NULL;
		any = any || w->ev[i];
	}
	next_id++;
	if (!any) {
		free(w);
		return NULL;
	}
	return w;
}

/* After the module's call: the core's request, or the module's as it is
 * when nothing was started. */
static int req_end(struct prof_req *w, int err, void *inner, void **request)
{
	cur = NULL;
	if (err) {
		req_stop(w, NULL, MESH_PROF_FLAG_UNPOSTED);
		free(w);
		*request = NULL;
		return err;
	}
	if (!inner) {
		waiting = w;
		*request = NULL;
		return 0;
	}
	w->inner = inner;
	*request = w;
	return 0;
}

int core_prof_isend(const struct core_prof_comm *c, void *data, size_t size,
		    int tag, void *mhandle, void *phandle, void **request)
{
	struct prof_req *w = req_begin(c, true, 1, &phandle, &size, &tag);
	void *inner = NULL;
	int err;

	if (!w)
		return c->desc->isend(c->mcomm, data, size, tag, mhandle,
				      request);
	cur = w;
	err = c->desc->isend(c->mcomm, data, size, tag, mhandle, &inner);
	return req_end(w, err, inner, request);
}

int core_prof_irecv(const struct core_prof_comm *c, int n, void **data,
		    size_t *sizes, int *tags, void **mhandles, void **phandles,
		    void **request)
{
	struct prof_req *w = NULL;
	void *inner = NULL;
	int err;

	if (n >= 1 && n <= PROF_SUBS)
		w = req_begin(c, false, n, phandles, sizes, tags);
	if (!w)
		return c->desc->irecv(c->mcomm, n, data, sizes, tags, mhandles,
				      request);
	cur = w;
	err = c->desc->irecv(c->mcomm, n, data, sizes, tags, mhandles, &inner);
	return req_end(w, err, inner, request);
}

/* ------------------------------------------------------ host services */

/*
 * Only the module NCCL's request went to gets the token: a module it
 * layers over (the relay's legs) posts requests of its own, which may
 * outlive the one NCCL tests, and which the core does not see.
 */
static void *prof_request(const struct mesh_host *host)
{
	if (!cur || !host || !host->module || strcmp(host->module, cur->module))
		return NULL;
	return cur;
}

/* A part goes with the request's first receive: NCCL takes it to that
 * step's event. */
static void *prof_start(const struct mesh_host *host, void *token,
			const struct mesh_prof_part *part)
{
	const struct prof_req *w = token;
	struct mesh_prof_event_v1 d;

	(void)host;
	if (!w || !part)
		return NULL;
	d = w->d[0];
	d.type = MESH_PROF_PART;
	d.kind = (uint8_t)part->kind;
	d.index = part->index;
	d.bytes = part->bytes;
	d.flags = 0;
	return ev_start(w->phandle[0], &d);
}

static void prof_stop(const struct mesh_host *host, void *event)
{
	(void)host;
	ev_stop(&event, MESH_NCCL_PROF_NET_STOP, NULL);
}

void core_prof_host(struct mesh_host *host)
{
	host->prof_request = prof_request;
	host->prof_start = prof_start;
	host->prof_stop = prof_stop;
}
