/* SPDX-License-Identifier: MIT */
/*
 * The round trips the control connections measured, per path class: the
 * largest and the latest, for the tuner's line, the tools and whatever
 * sizes by distance.  Written once per connection, read anywhere: atomics,
 * no lock.
 */
#include <stdatomic.h>

#include "core_log.h"
#include "net_priv.h"

/* Below this a round trip changes nothing NCCL's own model does not
 * cover (docs/modules/tcp-xdc.md, "Latency at distance"). */
#define RTT_FAR_US 1000u

static _Atomic uint32_t rtt_max[CORE_PATH_DISCONNECTED];
static _Atomic uint32_t rtt_latest[CORE_PATH_DISCONNECTED];
static atomic_bool told_far;

/*
 * Once per process, where a cross-DC round trip is long: whether the
 * tuner counts it.  It uses only the declared one, the same on every
 * rank, never this measurement (tuner.c says why).
 */
static void tell_far(const struct core_tuning *t, uint32_t us)
{
	if (us < RTT_FAR_US || atomic_exchange(&told_far, true))
		return;
	if (!t->xdc_rtt_ms)
		CORE_INFO("cross-DC round trip %u us measured; xdc_rtt_ms is 0, "
			  "so the tuner counts no WAN crossings (set it to "
			  "the round trip for NCCL's algorithm to follow "
			  "them)", us);
	else if (us / 2000 > t->xdc_rtt_ms ||
		 (uint64_t)us * 2 < (uint64_t)t->xdc_rtt_ms * 1000)
		CORE_INFO("cross-DC round trip %u us measured; the tuner "
			  "counts xdc_rtt_ms = %u ms", us, t->xdc_rtt_ms);
}

void core_rtt_note(enum core_path_class c, uint32_t us,
		   const struct core_tuning *t)
{
	uint32_t max;

	if (c >= CORE_PATH_DISCONNECTED || !us)
		return;
	atomic_store_explicit(&rtt_latest[c], us, memory_order_relaxed);
	max = atomic_load_explicit(&rtt_max[c], memory_order_relaxed);
	while (us > max &&
	       !atomic_compare_exchange_weak_explicit(&rtt_max[c], &max, us,
			memory_order_relaxed, memory_order_relaxed))
		;
	if (c == CORE_PATH_CROSS_DC)
		tell_far(t, us);
}

struct core_rtt_seen core_rtt_seen(enum core_path_class c)
{
	if (c >= CORE_PATH_DISCONNECTED)
		return (struct core_rtt_seen){ 0 };
	return (struct core_rtt_seen){
		.max_us = atomic_load_explicit(&rtt_max[c],
					       memory_order_relaxed),
		.latest_us = atomic_load_explicit(&rtt_latest[c],
						  memory_order_relaxed) };
}

void core_rtt_forget(void)
{
	for (int c = 0; c < CORE_PATH_DISCONNECTED; c++) {
		atomic_store(&rtt_max[c], 0);
		atomic_store(&rtt_latest[c], 0);
	}
	atomic_store(&told_far, false);
}
