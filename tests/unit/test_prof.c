/* SPDX-License-Identifier: MIT */
/*
 * Profiler events at the NCCL boundary (core/profile, core/nccl/plugin.c):
 * a fake module under ncclNetPlugin_v12's isend, irecv and test, and a
 * fake of NCCL's callback that starts events only for the handles the
 * test marks profiled, as NCCL does for steps whose profiler asked for
 * net plugin events.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "net.h"
#include "nccl-mesh/nccl_profiler.h"
#include "profile.h"

extern const ncclNet_v12_t ncclNetPlugin_v12;	/* core/nccl/plugin.c */

/* ---------------------------------------------------------- fake NCCL */

#define MAX_CALLS 64

struct call {
	int type;
	void *phandle;
	int64_t id;
	struct mesh_prof_event_v1 d;	/* copied, as a profiler does */
	bool has_d;
	void *ev;			/* the event it names */
};

static struct call calls[MAX_CALLS];
static int ncalls;
static char step_a, step_b;		/* two steps' handles */
static bool profiled_a, profiled_b;
static char events[MAX_CALLS];		/* event handles handed out */
static int nevents;

static ncclResult_t fake_callback(void **eh, int type, void *ph, int64_t id,
				  void *ext)
{
	struct call *c = &calls[ncalls < MAX_CALLS ? ncalls++ : MAX_CALLS - 1];

	memset(c, 0, sizeof(*c));
	c->type = type;
	c->phandle = ph;
	c->id = id;
	if (ext) {
		c->d = *(struct mesh_prof_event_v1 *)ext;
		c->has_d = true;
	}
	if (type == MESH_NCCL_PROF_NET_START) {
		if ((ph == &step_a && profiled_a) ||
		    (ph == &step_b && profiled_b))
			*eh = &events[nevents++ % MAX_CALLS];
		c->ev = *eh;
	} else {
		c->ev = *eh;
	}
	return ncclSuccess;
}

static int count(int type)
{
	int n = 0;

	for (int i = 0; i < ncalls; i++)
		n += calls[i].type == type;
	return n;
}

static const struct call *last(int type)
{
	for (int i = ncalls - 1; i >= 0; i--)
		if (calls[i].type == type)
			return &calls[i];
	return NULL;
}

static void reset(void)
{
	ncalls = 0;
}

/* ------------------------------------------------------- fake module */

struct fake_req {
	struct mesh_request base;
	bool done;
	int size;
	int err;
	int tests;
};

static struct fake_req reqs[4];
static int next_req;
static bool turn_down;			/* isend takes no request */
static int post_err;			/* isend/irecv fail */
static struct mesh_host host, leg_host;	/* ours, a layered module's */
static void *token_seen;
static struct mesh_prof_part part = { MESH_PROF_STREAM, 3, 4096 };

static int fake_test(void *request, int *done, int *sizes)
{
	struct fake_req *r = request;

	r->tests++;
	if (r->err)
		return r->err;
	*done = r->done;
	if (r->done && sizes)
		sizes[0] = r->size;
	return 0;
}

static struct fake_req *fake_post(void **request)
{
	struct fake_req *r = &reqs[next_req++ % 4];

	memset(r, 0, sizeof(*r));
	r->base.test = fake_test;
	*request = r;
	/* a module asks for the token and reports one part; a module it
	 * layers over, called from here, gets none */
	token_seen = host.prof_request(&host);
	CHECK(leg_host.prof_request(&leg_host) == NULL);
	if (token_seen) {
		void *ev = host.prof_start(&host, token_seen, &part);

		if (ev)
			host.prof_stop(&host, ev);
	}
	return r;
}

static int fake_isend(void *comm, void *data, size_t size, int tag,
		      void *mhandle, void **request)
{
	(void)comm, (void)data, (void)tag, (void)mhandle;
	*request = NULL;
	if (post_err)
		return post_err;
	if (turn_down) {
		token_seen = host.prof_request(&host);
		return 0;
	}
	fake_post(request)->size = (int)size;
	return 0;
}

static int fake_irecv(void *comm, int n, void **data, size_t *sizes,
		      int *tags, void **mhandles, void **request)
{
	(void)comm, (void)n, (void)data, (void)tags, (void)mhandles;
	*request = NULL;
	if (post_err)
		return post_err;
	fake_post(request)->size = (int)sizes[0];
	return 0;
}

static const struct mesh_module fake = {
	.name = "fake-mod",
	.isend = fake_isend,
	.irecv = fake_irecv,
};

/* ------------------------------------------------------------- tests */

static struct core_comm comm = { .desc = &fake, .mcomm = &comm };

static void *isend(void *ph, size_t size)
{
	void *req = (void *)1;

	CHECK(ncclNetPlugin_v12.isend(&comm, NULL, size, 7, NULL, ph, &req) ==
	      ncclSuccess);
	return req;
}

static int test(void *req, int *size)
{
	int done = 0;

	CHECK(ncclNetPlugin_v12.test(req, &done, size) == ncclSuccess);
	return done;
}

/* No callback (meshperf): the module's own request, nothing else. */
static void without_callback(void)
{
	void *req;

	reset();
	req = isend(&step_a, 100);
	CHECK(req == &reqs[(next_req - 1) % 4]);
	CHECK(token_seen == NULL);
	CHECK(ncalls == 0);
}

/* A step nobody profiles: one start that starts nothing, no token. */
static void unprofiled(void)
{
	void *req;

	reset();
	profiled_a = false;
	req = isend(&step_a, 100);
	CHECK(req == &reqs[(next_req - 1) % 4]);
	CHECK(token_seen == NULL);
	CHECK(ncalls == 1 && calls[0].type == MESH_NCCL_PROF_NET_START);
	CHECK(calls[0].phandle == &step_a);
	CHECK(calls[0].id == MESH_PROF_NET_ID);
}

static void profiled_send(void)
{
	struct fake_req *inner;
	const struct call *start, *pstart, *stop;
	void *req;
	int size = -1;

	reset();
	profiled_a = true;
	req = isend(&step_a, 1000);
	inner = &reqs[(next_req - 1) % 4];
	CHECK(req && req != inner);
	CHECK(token_seen != NULL);
	/* the request's start, then the module's part, started and stopped */
	CHECK(count(MESH_NCCL_PROF_NET_START) == 2);
	CHECK(count(MESH_NCCL_PROF_NET_STOP) == 1);
	start = &calls[0];
	CHECK(start->has_d && start->d.type == MESH_PROF_REQUEST);
	CHECK(start->d.send == 1 && start->d.bytes == 1000 &&
	      start->d.tag == 7);
	CHECK_STR(start->d.module, "fake-mod");
	CHECK(start->d.peer_family == AF_INET && start->d.peer_port == 5000);
	CHECK(start->d.peer_ip[0] == 10 && start->d.peer_ip[3] == 7);
	pstart = &calls[1];
	CHECK(pstart->phandle == &step_a && pstart->d.type == MESH_PROF_PART);
	CHECK(pstart->d.kind == MESH_PROF_STREAM && pstart->d.index == 3 &&
	      pstart->d.bytes == 4096);
	CHECK(pstart->d.request == start->d.request);
	CHECK(calls[2].type == MESH_NCCL_PROF_NET_STOP &&
	      calls[2].ev == pstart->ev && pstart->ev != start->ev);

	/* not done: the module is asked, nothing stops */
	CHECK(!test(req, &size));
	CHECK(inner->tests == 1);
	CHECK(count(MESH_NCCL_PROF_NET_UPDATE_AND_STOP) == 0);
	inner->done = true;
	CHECK(test(req, &size));
	CHECK(size == 1000);
	stop = last(MESH_NCCL_PROF_NET_UPDATE_AND_STOP);
	CHECK(stop && stop->ev == start->ev);
	CHECK(stop && stop->d.bytes == 1000 && stop->d.flags == 0);
	CHECK(count(MESH_NCCL_PROF_NET_UPDATE_AND_STOP) == 1);
}

/* A receive reports what arrived, not what was posted. */
static void profiled_recv(void)
{
	void *data = NULL, *mh = NULL, *ph = &step_b, *req = NULL;
	size_t posted = 8192;
	int tag = 3, size = -1;
	const struct call *stop;

	reset();
	profiled_b = true;
	CHECK(ncclNetPlugin_v12.irecv(&comm, 1, &data, &posted, &tag, &mh, &ph,
				      &req) == ncclSuccess);
	CHECK(req && req != &reqs[(next_req - 1) % 4]);
	CHECK(calls[0].d.send == 0 && calls[0].d.bytes == 8192);
	reqs[(next_req - 1) % 4].size = 512;
	reqs[(next_req - 1) % 4].done = true;
	CHECK(test(req, &size) && size == 512);
	stop = last(MESH_NCCL_PROF_NET_UPDATE_AND_STOP);
	CHECK(stop && stop->d.bytes == 512 && stop->d.type == MESH_PROF_REQUEST);
	CHECK(stop && stop->ev == calls[0].ev);
}

/* NCCL posts again with the same handle after a turn-down: one event. */
static void retry(void)
{
	void *req;
	int size;

	reset();
	profiled_a = true;
	turn_down = true;
	CHECK(isend(&step_a, 64) == NULL);
	CHECK(token_seen != NULL);	/* the module was asked with it */
	CHECK(isend(&step_a, 64) == NULL);
	CHECK(count(MESH_NCCL_PROF_NET_START) == 1);
	turn_down = false;
	req = isend(&step_a, 64);
	CHECK(req != NULL);
	/* the request's one start and its part's */
	CHECK(count(MESH_NCCL_PROF_NET_START) == 2);
	reqs[(next_req - 1) % 4].done = true;
	CHECK(test(req, &size));
	CHECK(count(MESH_NCCL_PROF_NET_UPDATE_AND_STOP) == 1);
	CHECK(last(MESH_NCCL_PROF_NET_UPDATE_AND_STOP)->d.bytes == 64);

	/* NCCL moves on to another step: the first is reported unposted */
	reset();
	profiled_b = true;
	turn_down = true;
	CHECK(isend(&step_a, 64) == NULL);
	turn_down = false;
	req = isend(&step_b, 32);
	CHECK(count(MESH_NCCL_PROF_NET_UPDATE_AND_STOP) == 1);
	CHECK(calls[1].type == MESH_NCCL_PROF_NET_UPDATE_AND_STOP);
	CHECK(calls[1].ev == calls[0].ev);
	CHECK(calls[1].d.flags == MESH_PROF_FLAG_UNPOSTED &&
	      calls[1].d.bytes == 0);
	reqs[(next_req - 1) % 4].done = true;
	CHECK(test(req, &size));
}

/* Errors go back as they were; the event stops, flagged. */
static void errors(void)
{
	void *req = (void *)1;
	int done = 0, size;

	reset();
	profiled_a = true;
	post_err = -EMSGSIZE;
	CHECK(ncclNetPlugin_v12.isend(&comm, NULL, 1, 0, NULL, &step_a,
				      &req) == ncclInvalidUsage);
	CHECK(req == NULL);
	CHECK(last(MESH_NCCL_PROF_NET_UPDATE_AND_STOP)->d.flags ==
	      MESH_PROF_FLAG_UNPOSTED);
	post_err = 0;

	reset();
	req = isend(&step_a, 10);
	reqs[(next_req - 1) % 4].err = -ECONNRESET;
	CHECK(ncclNetPlugin_v12.test(req, &done, &size) == ncclRemoteError);
	CHECK(last(MESH_NCCL_PROF_NET_UPDATE_AND_STOP)->d.flags ==
	      MESH_PROF_FLAG_FAILED);
	/* tested again: the module answers, nothing is stopped twice */
	CHECK(ncclNetPlugin_v12.test(req, &done, &size) == ncclRemoteError);
	CHECK(count(MESH_NCCL_PROF_NET_UPDATE_AND_STOP) == 1);
	free(req);	/* a failed request is the caller's to drop */
}

/* Ids are unique, and a part names its own request's. */
static void ids(void)
{
	uint64_t first;
	void *r1, *r2;
	int size;

	reset();
	profiled_a = true;
	r1 = isend(&step_a, 1);
	first = calls[0].d.request;
	reset();
	r2 = isend(&step_a, 1);
	CHECK(calls[0].d.request != first);
	CHECK(calls[1].d.request == calls[0].d.request);
	reqs[(next_req - 1) % 4].done = true;
	reqs[(next_req - 2) % 4].done = true;
	CHECK(test(r1, &size) && test(r2, &size));
}

int main(void)
{
	comm.path.direct = 1;
	comm.path.remote = (struct mesh_addr){ .family = AF_INET, .port = 5000,
					       .ip = { 10, 0, 0, 7 } };
	core_prof_host(&host);
	host.module = "fake-mod";
	core_prof_host(&leg_host);
	leg_host.module = "leg-mod";
	without_callback();
	core_prof_set(fake_callback);
	unprofiled();
	profiled_send();
	profiled_recv();
	retry();
	errors();
	ids();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
