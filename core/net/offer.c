/* SPDX-License-Identifier: MIT */
/*
 * What the plugin offers NCCL besides its network: the buffer size, for a
 * job whose network is ours.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core_log.h"
#include "net.h"
#include "state.h"

/*
 * NCCL's SIMPLE protocol moves a channel's data in 8 steps of
 * NCCL_BUFFSIZE / 8, and a step is refilled only once its last one has
 * crossed.  Through host memory and TCP that round trip is long enough
 * that NCCL's 4 MiB leaves its pipeline short (docs/benchmarks.md).  NCCL
 * reads the variable once, after its first net plugin init, so setting it
 * here reaches every communicator of the process.  What the user set, in
 * the environment or NCCL's own config file, always wins, and a job that
 * asked NCCL for another network is left alone.
 */
/*
 * Across a long WAN that pipeline is bound by the round trip, not by the
 * plugin: a channel's kernel runs its loop one chunk (half the buffer) at
 * a time, and each chunk waits on the one before it around the ring, so a
 * channel carries about twice its buffer a round trip (8 MiB: 2.35 Gbit/s
 * a channel at 50 ms, docs/modules/tcp-xdc.md).  With the round trip
 * declared (xdc_rtt_ms; NCCL reads the variable before any connection
 * could measure one), the buffer grows to the power of two that carries
 * half the bandwidth-delay product of the fastest rail, so that NCCL's
 * usual two channels hold the product with room to spare, up to
 * nccl_buffsize_max: NCCL holds one buffer per channel and peer.
 */
long long core_nccl_buffsize(const struct core_state *st)
{
	long long size = st->nccl_buffsize;
	uint64_t half_bdp;
	int i, mbps = 0;

	if (!size || !st->tuning.xdc_rtt_ms)
		return size;
	for (i = 0; i < st->nrails; i++)
		if (st->rails[i].props.speed_mbps > mbps)
			mbps = st->rails[i].props.speed_mbps;
	/* Mbit/s times ms is kbit: 125 bytes each; half of it */
	half_bdp = (uint64_t)mbps * st->tuning.xdc_rtt_ms * 125 / 2;
	while (size < st->nccl_buffsize_max && (uint64_t)size < half_bdp)
		size = size < st->nccl_buffsize_max / 2 ? size * 2 :
							st->nccl_buffsize_max;
	return size;
}

enum core_nccl_offer core_offer_nccl_buffsize(const struct core_state *st)
{
	const char *set = getenv("NCCL_BUFFSIZE");
	long long size = core_nccl_buffsize(st);
	char text[32], why[96] = "";

	if (!size)
		return CORE_NCCL_OFFER_OFF;
	if (!core_nccl_net_is_ours())
		return CORE_NCCL_OFFER_OTHER_NET;
	if (size != st->nccl_buffsize)
		snprintf(why, sizeof(why), ", raised for xdc_rtt_ms %u up to "
			 "nccl_buffsize_max", st->tuning.xdc_rtt_ms);
	if (set && *set) {
		CORE_INFO("NCCL_BUFFSIZE=%s from the environment kept "
			  "(nccl_buffsize would give %lld%s)", set, size, why);
		return CORE_NCCL_OFFER_USER_SET;
	}
	snprintf(text, sizeof(text), "%lld", size);
	if (setenv("NCCL_BUFFSIZE", text, 0)) {
		CORE_WARN("could not set NCCL_BUFFSIZE=%s: %s", text,
			  strerror(errno));
		return CORE_NCCL_OFFER_FAILED;
	}
	CORE_INFO("NCCL_BUFFSIZE=%s set for NCCL (nccl_buffsize%s; 0 leaves "
		  "NCCL's default)", text, why);
	return CORE_NCCL_OFFER_SET;
}

/* What we tell NCCL (its buffer size, the tuner's channels) is for a job
 * whose network is ours: NCCL_NET unset or Mesh. */
bool core_nccl_net_is_ours(void)
{
	const char *net = getenv("NCCL_NET");

	return !net || !*net || !strcasecmp(net, CORE_NCCL_NET_NAME);
}
