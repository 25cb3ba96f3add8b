/* SPDX-License-Identifier: MIT */
/*
 * NCCL's part between the plugin's profiler events and a profiler, on a
 * host without NCCL: loads the test profiler (libnccl-profiler-meshprof),
 * gives our core a callback that does what NCCL's does (a net plugin
 * event under the ProxyStep its pHandle names, only when the profiler's
 * mask asks for net plugin events), and runs the proxy steps of a send
 * and a receive operation through the exported isend, irecv and test over
 * a fake module that reports its parts.  Then it writes the profiler's
 * file, for check.py.
 *
 * Usage: meshprof_drive PROFILER.so OUT MODE
 *   MODE good:    every step posted, sizes as NCCL records them
 *   MODE missing: one step's request is never posted to the plugin
 *   MODE bytes:   one step's size recorded unlike what was sent
 *   MODE parts:   the module's parts fall short of one request
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net.h"
#include "nccl-mesh/nccl_profiler.h"
#include "profile.h"
#include "prof_abi.h"

extern const ncclNet_v12_t ncclNetPlugin_v12;	/* core/nccl/plugin.c */

static const ncclProfiler_v5_t *prof;
static void *prof_ctx;
static int mask;
static const char *mode;

/* What NCCL's pHandle of a step leads to. */
struct step_handle {
	void *step_event;
};

/* NCCL's ncclProfilerCallback, as its documentation and code describe. */
static ncclResult_t nccl_callback(void **eh, int type, void *ph,
				  int64_t id, void *data)
{
	ncclProfilerEventStateArgs_t args = { .netPlugin = { data } };

	switch (type) {
	case MESH_NCCL_PROF_NET_START:
		if (mask & ncclProfileNetPlugin) {
			ncclProfilerEventDescr_v5_t d = {
				.type = ncclProfileNetPlugin,
				.parentObj = ((struct step_handle *)ph)->step_event,
				.rank = 0,
			};
			d.u.netPlugin.id = id;
			d.u.netPlugin.data = data;
			prof->startEvent(prof_ctx, eh, &d);
		}
		break;
	case MESH_NCCL_PROF_NET_STOP:
		prof->stopEvent(*eh);
		break;
	case MESH_NCCL_PROF_NET_UPDATE_AND_STOP:
		prof->recordEventState(*eh, MESHPROF_STATE_NET_UPDATE, &args);
		prof->stopEvent(*eh);
		break;
	default:
		prof->recordEventState(*eh, MESHPROF_STATE_NET_UPDATE, &args);
		break;
	}
	return ncclSuccess;
}

/* ------------------------------------------ a module of three streams */

struct fake_req {
	struct mesh_request base;
	size_t size;
};

static struct mesh_host host;
static int short_parts;		/* parts: the next request's fall short */

static int fake_test(void *request, int *done, int *sizes)
{
	struct fake_req *r = request;

	*done = 1;
	if (sizes)
		sizes[0] = (int)r->size;
	free(r);
	return 0;
}

/* Each request goes out as three parts, one per stream, started and
 * stopped before the request can be done. */
static int post(size_t size, void **request)
{
	struct fake_req *r = calloc(1, sizeof(*r));
	void *token = host.prof_request(&host);

	if (!r)
		return -1;
	r->base.test = fake_test;
	r->size = size;
	for (int s = 0; token && s < 3; s++) {
		struct mesh_prof_part part = {
			.kind = MESH_PROF_STREAM, .index = s,
			.bytes = size / 3 + (s == 2 ? size % 3 : 0) };
		void *ev;

		if (s == 2 && short_parts) {
			part.bytes--;
			short_parts = 0;
		}
		ev = host.prof_start(&host, token, &part);
		if (ev)
			host.prof_stop(&host, ev);
	}
	*request = r;
	return 0;
}

static int fake_isend(void *comm, void *data, size_t size, int tag,
		      void *mhandle, void **request)
{
	(void)comm, (void)data, (void)tag, (void)mhandle;
	return post(size, request);
}

static int fake_irecv(void *comm, int n, void **data, size_t *sizes,
		      int *tags, void **mhandles, void **request)
{
	(void)comm, (void)n, (void)data, (void)tags, (void)mhandles;
	/* what arrives: a quarter less than the posted buffer */
	return post(sizes[0] - sizes[0] / 4, request);
}

static const struct mesh_module fake = {
	.name = "fake-xdc", .isend = fake_isend, .irecv = fake_irecv };
static struct core_comm comm = { .desc = &fake };

/* ------------------------------------------------ NCCL's proxy steps */

static void *start(uint64_t type, void *parent, int send, int nsteps)
{
	ncclProfilerEventDescr_v5_t d = { .type = type, .parentObj = parent };
	void *eh = NULL;

	if (!(mask & type))
		return NULL;
	if (type == ncclProfileProxyOp) {
		d.u.proxyOp.isSend = send;
		d.u.proxyOp.nSteps = nsteps;
		d.u.proxyOp.peer = 1;
	}
	prof->startEvent(prof_ctx, &eh, &d);
	return eh;
}

/* One proxy operation of nsteps steps of size bytes. */
static int run_op(int send, int nsteps, size_t size)
{
	void *op = start(ncclProfileProxyOp, NULL, send, nsteps);

	for (int s = 0; s < nsteps; s++) {
		struct step_handle ph = {
			start(ncclProfileProxyStep, op, send, 0) };
		void *phandle = &ph, *req = NULL, *data = NULL, *mh = NULL;
		size_t sz = size;
		int tag = 0, done = 0, got = 0;
		ncclProfilerEventStateArgs_t a;

		if (s == 1 && !strcmp(mode, "missing") && ph.step_event) {
			mode = "done";	/* this step never reaches the plugin */
			got = (int)size;
		} else {
			if (s == 2 && !strcmp(mode, "parts")) {
				short_parts = 1;
				mode = "done";
			}
			if (send ? ncclNetPlugin_v12.isend(&comm, NULL, sz, 0,
							   NULL, phandle, &req)
				 : ncclNetPlugin_v12.irecv(&comm, 1, &data,
							   &sz, &tag, &mh,
							   &phandle, &req))
				return -1;
			while (!done)
				if (ncclNetPlugin_v12.test(req, &done, &got))
					return -1;
		}
		if (!send && !strcmp(mode, "bytes") && ph.step_event) {
			got++;
			mode = "done";
		}
		/* NCCL's state after the post (send) or the completion
		 * (receive) carries what moved; a later one may not */
		a.proxyStep.transSize = send ? size : (size_t)got;
		if (ph.step_event) {
			prof->recordEventState(ph.step_event, send ?
					       MESHPROF_STATE_SEND_WAIT :
					       MESHPROF_STATE_RECV_FLUSH_WAIT,
					       &a);
			a.proxyStep.transSize = 12345;
			prof->recordEventState(ph.step_event, 12, &a);
			prof->stopEvent(ph.step_event);
		}
	}
	if (op)
		prof->stopEvent(op);
	return 0;
}

int main(int argc, char **argv)
{
	void *lib;
	void (*enable)(int);
	int (*mark)(const char *);
	int (*dump)(const char *);

	if (argc != 4) {
		fprintf(stderr, "usage: %s PROFILER.so OUT MODE\n", argv[0]);
		return 2;
	}
	mode = argv[3];
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "%s\n", dlerror());
		return 2;
	}
	prof = dlsym(lib, "ncclProfiler_v5");
	enable = (void (*)(int))dlsym(lib, "meshprof_enable");
	mark = (int (*)(const char *))dlsym(lib, "meshprof_mark");
	dump = (int (*)(const char *))dlsym(lib, "meshprof_dump");
	if (!prof || !enable || !mark || !dump || !dlsym(lib, "ncclProfiler_v4")) {
		fprintf(stderr, "%s lacks a symbol\n", argv[1]);
		return 2;
	}
	if (prof->init(&prof_ctx, 1, &mask, "drive", 1, 2, 0, NULL) ||
	    !(mask & ncclProfileNetPlugin)) {
		fprintf(stderr, "profiler init: mask 0x%x\n", mask);
		return 1;
	}
	comm.mcomm = &comm;
	comm.path.direct = 1;
	comm.path.remote = (struct mesh_addr){ .family = AF_INET,
					       .port = 40000,
					       .ip = { 127, 0, 0, 2 } };
	core_prof_host(&host);
	host.module = fake.name;
	core_prof_set(nccl_callback);

	mark("on:check");
	if (run_op(1, 4, 1 << 20) || run_op(0, 4, 1 << 20) ||
	    run_op(1, 3, 8) || run_op(0, 3, 8))
		return 1;
	enable(0);
	mark("off:bench");
	if (mask || run_op(1, 4, 1 << 20) || run_op(0, 4, 1 << 20))
		return 1;
	enable(1);
	mark("on:bench");
	if (run_op(1, 2, 4096) || run_op(0, 2, 4096))
		return 1;
	if (dump(argv[2]) || prof->finalize(prof_ctx))
		return 1;
	return 0;
}
