/* SPDX-License-Identifier: MIT */
/*
 * What the plugin offers NCCL besides its network: the buffer size, for a
 * job whose network is ours.
 */
#include <errno.h>
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
enum core_nccl_offer core_offer_nccl_buffsize(const struct core_state *st)
{
	const char *set = getenv("NCCL_BUFFSIZE");
	char text[32];

	if (!st->nccl_buffsize)
		return CORE_NCCL_OFFER_OFF;
	if (!core_nccl_net_is_ours())
		return CORE_NCCL_OFFER_OTHER_NET;
	if (set && *set) {
		CORE_INFO("NCCL_BUFFSIZE=%s from the environment kept "
			  "(nccl_buffsize would give %lld)", set,
			  st->nccl_buffsize);
		return CORE_NCCL_OFFER_USER_SET;
	}
	snprintf(text, sizeof(text), "%lld", st->nccl_buffsize);
	if (setenv("NCCL_BUFFSIZE", text, 0)) {
		CORE_WARN("could not set NCCL_BUFFSIZE=%s: %s", text,
			  strerror(errno));
		return CORE_NCCL_OFFER_FAILED;
	}
	CORE_INFO("NCCL_BUFFSIZE=%s set for NCCL (nccl_buffsize; 0 leaves "
		  "NCCL's default)", text);
	return CORE_NCCL_OFFER_SET;
}

/* What we tell NCCL (its buffer size, the tuner's channels) is for a job
 * whose network is ours: NCCL_NET unset or Mesh. */
bool core_nccl_net_is_ours(void)
{
	const char *net = getenv("NCCL_NET");

	return !net || !*net || !strcasecmp(net, CORE_NCCL_NET_NAME);
}
