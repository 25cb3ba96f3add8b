/* SPDX-License-Identifier: MIT */
/*
 * Profiler events through NCCL's callback (include/nccl-mesh/
 * nccl_profiler.h): the core's event for each request it posts, and the
 * host services modules report their parts with.  Under everything but
 * the logger: the loader hands modules the services, nccl/plugin.c
 * routes isend and irecv here when NCCL gave a callback.
 */
#ifndef CORE_PROFILE_H
#define CORE_PROFILE_H

#include <stddef.h>

#include <nccl-mesh/module.h>
#include "nccl-mesh/nccl_net.h"

/*
 * NCCL's callback, NULL until an init gave one (and always under
 * meshperf and meshinfo).  Read on every isend and irecv; nothing else
 * is done there while it is NULL.
 */
extern ncclProfilerCallback_t core_prof_fn;

/* From init: the callback NCCL passed (NULL changes nothing). */
void core_prof_set(ncclProfilerCallback_t fn);

/* Fills the prof_* services of a module's host. */
void core_prof_host(struct mesh_host *host);

/* The comm a request goes on: its module's, and its peer (NULL: not
 * known here, as a relayed comm's far end). */
struct core_prof_comm {
	const struct mesh_module *desc;
	void *mcomm;
	const struct mesh_addr *peer;
};

/*
 * isend and irecv with NCCL's profiler handles: the module's own call,
 * and when NCCL starts an event for it, a request of the core around the
 * module's that reports the request and stops the event in test().  What
 * the module's call returns, errors included.
 */
int core_prof_isend(const struct core_prof_comm *c, void *data, size_t size,
		    int tag, void *mhandle, void *phandle, void **request);
int core_prof_irecv(const struct core_prof_comm *c, int n, void **data,
		    size_t *sizes, int *tags, void **mhandles, void **phandles,
		    void **request);

#endif
