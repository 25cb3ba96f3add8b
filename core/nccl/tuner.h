/* SPDX-License-Identifier: MIT */
/*
 * The tuner NCCL finds in the plugin's library: nccl_channels_by_size,
 * nccl_ll_max and the distance model (xdc_rtt_ms) told to NCCL per
 * collective.  Negative errno; core/plugin.c speaks NCCL.
 */
#ifndef CORE_TUNER_H
#define CORE_TUNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state.h"	/* enum core_algo: the rules' own, from the config */

/*
 * A context for one communicator of nranks over nnodes.  It applies the
 * rules only where NCCL's network carries the traffic and is ours: more
 * than one node, and NCCL_NET unset or Mesh.  The rules are copied, so the
 * context outlives the network's finalize.
 */
int core_tuner_init(size_t nranks, size_t nnodes, void **ctx);
/*
 * The channels the rules give a collective of `bytes` that NCCL runs with
 * `algo`: that algorithm's own rules where it has any, else the rules for
 * any algorithm; 0: NCCL's count.
 */
int core_tuner_channels(const void *ctx, uint64_t bytes,
			enum core_algo algo);
/* Whether a collective of `bytes` is above nccl_ll_max: Simple only. */
bool core_tuner_simple_only(const void *ctx, uint64_t bytes);
/*
 * What the WAN adds, in us, to an all-reduce NCCL runs with `algo`: its
 * sequential crossings times the one-way delay of xdc_rtt_ms, which
 * NCCL's estimate, made for a network of microseconds, lacks.  -1 where
 * the model says nothing: no round trip declared, nccl_algo_by_distance
 * false, one node, an algorithm it does not count.  The same on every
 * rank: it rests on nothing measured (ranks that chose apart would hang).
 */
double core_tuner_wan_us(const void *ctx, enum core_algo algo);
/* What the tuner did for an all-reduce of `bytes`: NCCL would have run
 * `nccl`, it runs `ran`.  Kept per size class for the line at destroy. */
void core_tuner_note(void *ctx, uint64_t bytes, enum core_algo nccl,
		     enum core_algo ran);
void core_tuner_destroy(void *ctx);

/*
 * The distance model's arithmetic (tuner_model.c).  dc[i] is the
 * datacenter of NCCL's node i (nodes numbered by their first rank);
 * crossings are those of the chunk that crosses most, one after the
 * other: ring 2(n-1) consecutive edges, tree up to the root and down.
 */
#define CORE_TUNER_NODES_MAX (1 << 20)

struct core_crossings {
	int ring, tree;
};

int core_crossings(size_t nnodes, const uint8_t *dc,
		   struct core_crossings *out);
/* The layout the tuner assumes: two datacenters, nodes in DC order, the
 * first (n + 1) / 2 in one. */
int core_crossings_two_dcs(size_t nnodes, struct core_crossings *out);

#endif
