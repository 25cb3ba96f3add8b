/* SPDX-License-Identifier: MIT */
/*
 * The tuner NCCL finds in the plugin's library: nccl_channels_by_size and
 * nccl_ll_max told to NCCL per collective.  Negative errno; core/plugin.c
 * speaks NCCL.
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
void core_tuner_destroy(void *ctx);

#endif
