/* SPDX-License-Identifier: MIT */
/*
 * NCCL sizes a communicator's channel count from the speed the network
 * reports, for its largest messages, and spreads mid-sized collectives over
 * all of them.  Over TCP every channel is one more message in flight per
 * step, each paying system calls on both hosts and a turn of NCCL's proxy
 * thread, so a collective of a few tens of KiB is faster on fewer channels
 * while large ones still need them all (docs/nccl.md).  A fast network
 * also makes NCCL's model keep its LL protocol up to hundreds of KiB, where
 * over TCP its doubled bytes and one message per step and channel cost
 * more than Simple's pipeline.  NCCL leaves both choices to a tuner, and
 * looks for one in the network plugin's library.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_log.h"
#include "net.h"
#include "param_parse.h"
#include "state.h"
#include "tuner.h"

/* "up to 64K: 2, tree up to 16K: 2" for the INFO line. */
static void rules_text(const struct core_channel_rules *r, char *buf,
		       size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < r->n && used < len; i++) {
		const char *algo = core_algo_name(r->rule[i].algo);
		char size[32], count[16];

		param_size_text((long long)r->rule[i].max_bytes, size,
				sizeof(size));
		snprintf(count, sizeof(count), "%d", r->rule[i].channels);
		used += (size_t)snprintf(buf + used, len - used,
			"%s%s%sup to %s: %s", i ? ", " : "",
			algo ? algo : "", algo ? " " : "", size,
			r->rule[i].channels ? count : "NCCL's");
	}
}

int core_tuner_init(size_t nranks, size_t nnodes, void **ctx)
{
	struct core_tuning *t = calloc(1, sizeof(*t));
	char rules[512], ll[96] = "", ll_max[32];

	*ctx = t;
	if (!t)
		return -ENOMEM;
	if (nnodes < 2 || !core_nccl_net_is_ours())
		return 0;	/* NVLink, shared memory or another network */
	core_net_tuning(t);
	if (!t->channels.n && !t->ll_max)
		return 0;
	rules_text(&t->channels, rules, sizeof(rules));
	if (t->ll_max) {
		param_size_text((long long)t->ll_max, ll_max, sizeof(ll_max));
		snprintf(ll, sizeof(ll), "; LL and LL128 up to %s, Simple "
			 "above (nccl_ll_max)", ll_max);
	}
	CORE_INFO("tuner: %zu ranks on %zu nodes; channels per collective "
		  "by size (nccl_channels_by_size): %s%sNCCL's%s", nranks,
		  nnodes, rules, t->channels.n ? ", above: " : "", ll);
	return 0;
}

bool core_tuner_simple_only(const void *ctx, uint64_t bytes)
{
	uint64_t ll_max = ((const struct core_tuning *)ctx)->ll_max;

	return ll_max && bytes > ll_max;
}

int core_tuner_channels(const void *ctx, uint64_t bytes,
			enum core_algo algo)
{
	const struct core_channel_rules *r =
		&((const struct core_tuning *)ctx)->channels;
	enum core_algo use = CORE_ALGO_ANY;

	for (int i = 0; i < r->n; i++)
		if (algo != CORE_ALGO_ANY && r->rule[i].algo == algo)
			use = algo;
	for (int i = 0; i < r->n; i++)
		if (r->rule[i].algo == use && bytes <= r->rule[i].max_bytes)
			return r->rule[i].channels;
	return 0;
}

void core_tuner_destroy(void *ctx)
{
	free(ctx);
}
