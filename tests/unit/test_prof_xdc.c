/* SPDX-License-Identifier: MIT */
/*
 * Profiler events of real tcp-xdc traffic over loopback: the plugin
 * library, driven through ncclNet_v12 in one process (both ends), with a
 * callback that starts an event for every pHandle as NCCL does when a
 * profiler asks for net plugin events.  Every request must come with its
 * request event, stopped with the bytes that moved, and its chunks'
 * stream events must add up to it; messages small (one inline chunk) and
 * large (chunks on both streams).
 *
 * Usage: test_prof_xdc PLUGIN.so   (NCCL_MESH_CONF and
 * NCCL_MESH_MODULE_PATH name tcp-xdc on lo)
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl-mesh/module.h>

#include "check.h"
#include "nccl-mesh/nccl_net.h"
#include "nccl-mesh/nccl_profiler.h"

#define MAX_EV 4096

struct ev {
	struct mesh_prof_event_v1 start, stop;
	void *phandle;
	bool started, stopped;
};

static struct ev evs[MAX_EV];
static int nev;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Every start is granted (a profiler that asked for net plugin events);
 * the handle is the record. */
static ncclResult_t callback(void **eh, int type, void *ph, int64_t id,
			     void *data)
{
	struct ev *e;

	pthread_mutex_lock(&lock);
	if (type == MESH_NCCL_PROF_NET_START) {
		if (nev < MAX_EV && id == MESH_PROF_NET_ID && data) {
			e = &evs[nev++];
			e->start = *(struct mesh_prof_event_v1 *)data;
			e->stop = e->start;
			e->phandle = ph;
			e->started = true;
			*eh = e;
		}
	} else if (*eh) {
		e = *eh;
		CHECK(!e->stopped);
		if (type == MESH_NCCL_PROF_NET_UPDATE_AND_STOP && data)
			e->stop = *(struct mesh_prof_event_v1 *)data;
		e->stopped = true;
	}
	pthread_mutex_unlock(&lock);
	return ncclSuccess;
}

static const ncclNet_v12_t *net;

/* Tests both until both are done: a receive may be read only in its
 * test() (tcp-xdc reads small messages there), and the send waits for it. */
static bool wait_both(void *sreq, int *ssize, void *rreq, int *rsize)
{
	struct timespec t0, t;
	int sdone = 0, rdone = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!sdone || !rdone) {
		if ((!sdone && net->test(sreq, &sdone, ssize) != ncclSuccess) ||
		    (!rdone && net->test(rreq, &rdone, rsize) != ncclSuccess))
			return false;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 20)
			return false;
	}
	return true;
}

/* One message each way of size bytes; checks its events. */
static void exchange(void *send_comm, void *recv_comm, size_t size)
{
	char *src = malloc(size ? size : 1), *dst = calloc(1, size + 1);
	char step_s, step_r;		/* NCCL's handles: one per step */
	void *sreq = NULL, *rreq = NULL, *ph = &step_r, *mh = NULL;
	void *dp = dst;
	size_t posted = size + 1;
	int tag = 5, ssize = 0, rsize = -1;
	uint64_t parts_s = 0, parts_r = 0;
	int first = nev, reqs = 0;

	memset(src, 'x', size);
	CHECK(net->irecv(recv_comm, 1, &dp, &posted, &tag, &mh, &ph, &rreq) ==
	      ncclSuccess && rreq);
	while (!sreq)
		CHECK(net->isend(send_comm, src, size, tag, NULL, &step_s,
				 &sreq) == ncclSuccess);
	CHECK(wait_both(sreq, &ssize, rreq, &rsize));
	CHECK(rsize == (int)size);
	pthread_mutex_lock(&lock);
	for (int i = first; i < nev; i++) {
		struct ev *e = &evs[i];

		CHECK(e->stopped);
		CHECK_STR(e->start.module, "tcp-xdc");
		if (e->start.type == MESH_PROF_REQUEST) {
			reqs++;
			CHECK(e->stop.bytes == size && !e->stop.flags);
			CHECK(e->phandle == (e->start.send ? (void *)&step_s :
							     (void *)&step_r));
		} else {
			CHECK(e->start.type == MESH_PROF_PART &&
			      e->start.kind == MESH_PROF_STREAM);
			CHECK(e->start.index >= 0 && e->start.index < 2);
			*(e->start.send ? &parts_s : &parts_r) += e->start.bytes;
		}
	}
	pthread_mutex_unlock(&lock);
	CHECK(reqs == 2);
	if (parts_s != size || parts_r != size)
		fprintf(stderr, "%zu bytes: parts carry %llu sent, %llu received\n",
			size, (unsigned long long)parts_s,
			(unsigned long long)parts_r);
	CHECK(parts_s == size && parts_r == size);
	free(src);
	free(dst);
}

int main(int argc, char **argv)
{
	char handle[NCCL_NET_HANDLE_MAXSIZE];
	void *lib, *ctx = NULL, *listen = NULL, *sc = NULL, *rc = NULL;
	ncclNetCommConfig_t config = { 0 };
	int ndev = 0, rounds = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	net = lib ? dlsym(lib, "ncclNetPlugin_v12") : NULL;
	if (!net) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	if (net->init(&ctx, 1, &config, NULL, callback) != ncclSuccess ||
	    net->devices(&ndev) != ncclSuccess || ndev < 1 ||
	    net->listen(ctx, 0, handle, &listen) != ncclSuccess) {
		fprintf(stderr, "cannot start the plugin\n");
		return 1;
	}
	while ((!sc || !rc) && rounds++ < 200000) {
		if (!sc && net->connect(ctx, 0, handle, &sc, NULL) != ncclSuccess)
			break;
		if (!rc && net->accept(listen, &rc, NULL) != ncclSuccess)
			break;
	}
	if (!sc || !rc) {
		fprintf(stderr, "no connection\n");
		return 1;
	}
	exchange(sc, rc, 8);
	exchange(sc, rc, 1 << 20);
	exchange(sc, rc, (3 << 20) + 17);
	exchange(sc, rc, 0);
	CHECK(net->closeSend(sc) == ncclSuccess);
	CHECK(net->closeRecv(rc) == ncclSuccess);
	CHECK(net->closeListen(listen) == ncclSuccess);
	CHECK(net->finalize(ctx) == ncclSuccess);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
