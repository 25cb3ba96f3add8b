/* SPDX-License-Identifier: MIT */
/* The test profiler's record of one event and its control functions
 * (meshprof.c), for the driver that checks it without NCCL. */
#ifndef MESHPROF_H
#define MESHPROF_H

#include <pthread.h>
#include <stdint.h>

#include "nccl-mesh/nccl_profiler.h"

#define MESHPROF_MARKS 1024

struct meshprof_rec {
	uint32_t type;		/* NCCL's event type bit */
	uint16_t phase;		/* meshprof_mark's count when it started */
	uint16_t states;	/* state records seen */
	int rank;
	int a, b, c, d;		/* op: channel, peer, steps, send; step: step */
	uint64_t parent;	/* the parent's id (index + 1); 0: none */
	uint64_t bytes;		/* op: chunk size; step: its transSize */
	int64_t net_id;		/* net plugin: its pluginId */
	uint64_t t0, t1;	/* start, stop (CLOCK_MONOTONIC ns); 0: not */
	struct mesh_prof_event_v1 ev;	/* ours: the last descriptor */
};

/* Events on (the default) or off: NCCL's mask, from the next group on. */
void meshprof_enable(int on);
/* A new phase named name; its number, or -1 past MESHPROF_MARKS. */
int meshprof_mark(const char *name);
/* Every event so far, as text; 0 or -1. */
int meshprof_dump(const char *path);

#endif
