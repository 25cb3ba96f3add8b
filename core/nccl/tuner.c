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
 * more than Simple's pipeline.  And NCCL's model counts a network hop at a
 * few microseconds: between datacenters each of an algorithm's sequential
 * WAN crossings costs the one-way delay, and its ring and trees cross a
 * different number of times (tuner_model.c).  NCCL leaves these choices
 * to a tuner, and looks for one in the network plugin's library.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_log.h"
#include "net.h"
#include "param_parse.h"
#include "state.h"
#include "tuner.h"

/* Size classes: class c holds the sizes above 2^(c-1) and up to 2^c. */
#define SIZE_CLASSES 65

struct core_tuner {
	struct core_tuning tuning;	/* first: the rules' copy */
	struct core_crossings x;
	double one_way_us;		/* 0: no distance model */
	/* per size class, the first all-reduce's choice: 0 none, else
	 * (NCCL's algorithm << 4 | the one it ran) + 1 */
	_Atomic uint8_t picked[SIZE_CLASSES];
};

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

/*
 * The distance model, where a round trip between the datacenters is
 * declared: only the declared one, the same in every rank's config.  A
 * measured round trip differs a little per rank and arrives at each when
 * its own connections do; ranks that pick different algorithms for one
 * collective hang (NCCL's own model once did, over mixed CPU vendors).
 */
static void distance_init(struct core_tuner *t, size_t nnodes)
{
	const struct core_tuning *tu = &t->tuning;
	struct core_rtt_seen seen = core_rtt_seen(CORE_PATH_CROSS_DC);
	char measured[64] = "";
	double ms;

	if (!tu->algo_by_distance || !tu->xdc_rtt_ms)
		return;
	if (core_crossings_two_dcs(nnodes, &t->x)) {
		CORE_INFO("tuner: %zu nodes, more than the distance model "
			  "counts (%d); NCCL's algorithms stand", nnodes,
			  CORE_TUNER_NODES_MAX);
		return;
	}
	t->one_way_us = tu->xdc_rtt_ms * 500.0;
	ms = t->one_way_us / 1000;
	if (seen.max_us)
		snprintf(measured, sizeof(measured), " (measured so far: up "
			 "to %u us)", seen.max_us);
	CORE_INFO("tuner: %zu nodes in two DCs, xdc_rtt_ms %u%s: an "
		  "all-reduce crosses between them %d times by ring (+%.1f "
		  "ms), %d by tree (+%.1f ms); %s (nccl_algo_by_distance)",
		  nnodes, tu->xdc_rtt_ms, measured, t->x.ring,
		  t->x.ring * ms, t->x.tree, t->x.tree * ms,
		  t->x.ring == t->x.tree ? "the same, so NCCL's choice stands" :
		  "NCCL's time plus that picks the algorithm");
}

int core_tuner_init(size_t nranks, size_t nnodes, void **ctx)
{
	struct core_tuner *t = calloc(1, sizeof(*t));
	struct core_tuning *tu;
	char rules[512], ll[96] = "", ll_max[32];

	*ctx = t;
	if (!t)
		return -ENOMEM;
	if (nnodes < 2 || !core_nccl_net_is_ours())
		return 0;	/* NVLink, shared memory or another network */
	tu = &t->tuning;
	core_net_tuning(tu);
	distance_init(t, nnodes);
	if (!tu->channels.n && !tu->ll_max)
		return 0;
	rules_text(&tu->channels, rules, sizeof(rules));
	if (tu->ll_max) {
		param_size_text((long long)tu->ll_max, ll_max, sizeof(ll_max));
		snprintf(ll, sizeof(ll), "; LL and LL128 up to %s, Simple "
			 "above (nccl_ll_max)", ll_max);
	}
	CORE_INFO("tuner: %zu ranks on %zu nodes; channels per collective "
		  "by size (nccl_channels_by_size): %s%sNCCL's%s", nranks,
		  nnodes, rules, tu->channels.n ? ", above: " : "", ll);
	return 0;
}

bool core_tuner_simple_only(const void *ctx, uint64_t bytes)
{
	uint64_t ll_max = ((const struct core_tuner *)ctx)->tuning.ll_max;

	return ll_max && bytes > ll_max;
}

int core_tuner_channels(const void *ctx, uint64_t bytes,
			enum core_algo algo)
{
	const struct core_channel_rules *r =
		&((const struct core_tuner *)ctx)->tuning.channels;
	enum core_algo use = CORE_ALGO_ANY;

	for (int i = 0; i < r->n; i++)
		if (algo != CORE_ALGO_ANY && r->rule[i].algo == algo)
			use = algo;
	for (int i = 0; i < r->n; i++)
		if (r->rule[i].algo == use && bytes <= r->rule[i].max_bytes)
			return r->rule[i].channels;
	return 0;
}

double core_tuner_wan_us(const void *ctx, enum core_algo algo)
{
	const struct core_tuner *t = ctx;

	if (!t->one_way_us)
		return -1;
	switch (algo) {
	case CORE_ALGO_TREE:
		return t->x.tree * t->one_way_us;
	case CORE_ALGO_RING:
		return t->x.ring * t->one_way_us;
	default:
		return -1;
	}
}

static int size_class(uint64_t bytes)
{
	return bytes <= 1 ? 0 : 64 - __builtin_clzll(bytes - 1);
}

void core_tuner_note(void *ctx, uint64_t bytes, enum core_algo nccl,
		     enum core_algo ran)
{
	struct core_tuner *t = ctx;
	uint8_t none = 0;

	atomic_compare_exchange_strong_explicit(&t->picked[size_class(bytes)],
		&none, (uint8_t)((nccl << 4 | ran) + 1), memory_order_relaxed,
		memory_order_relaxed);
}

static const char *algo_text(enum core_algo a)
{
	const char *name = core_algo_name(a);

	return name ? name : "another";
}

/* 2^c as a size ("64K"); the classes past 2^62 do not occur. */
static void class_text(int c, char *buf, size_t len)
{
	if (c <= 62)
		param_size_text(1LL << c, buf, len);
	else
		snprintf(buf, len, "2^%d", c);
}

/* Where the tuner ran another algorithm than NCCL's, by size class. */
static void distance_summary(const struct core_tuner *t)
{
	char buf[512], lo[32], hi[32];
	size_t used = 0;
	bool seen = false;

	buf[0] = '\0';
	for (int c = 0, end; c < SIZE_CLASSES; c = end + 1) {
		uint8_t code = atomic_load(&t->picked[c]);
		enum core_algo nccl = (enum core_algo)((code - 1) >> 4);
		enum core_algo ran = (enum core_algo)((code - 1) & 0xf);

		for (end = c; end + 1 < SIZE_CLASSES &&
		     atomic_load(&t->picked[end + 1]) == code; end++)
			;
		seen = seen || code;
		if (!code || nccl == ran || used >= sizeof(buf))
			continue;
		lo[0] = '\0';
		if (c)
			class_text(c - 1, lo, sizeof(lo));
		class_text(end, hi, sizeof(hi));
		used += (size_t)snprintf(buf + used, sizeof(buf) - used,
			"%s%s%s%sup to %s: %s for NCCL's %s", used ? ", " : "",
			c ? "above " : "", lo, c ? " " : "", hi,
			algo_text(ran), algo_text(nccl));
	}
	if (seen)
		CORE_INFO("tuner: all-reduces by WAN crossings: %s",
			  used ? buf : "NCCL's algorithm at every size");
}

void core_tuner_destroy(void *ctx)
{
	struct core_tuner *t = ctx;

	if (t && t->one_way_us)
		distance_summary(t);
	free(ctx);
}
