/* SPDX-License-Identifier: MIT */
/*
 * Which cables join this node to a peer: pure logic over addresses, so it
 * can be tested without devices.  A cable end is known by its address and
 * subnet; a peer by the addresses it advertised in its handle.
 */
#ifndef RDMA_MESH_PLAN_H
#define RDMA_MESH_PLAN_H

#include <stddef.h>

#include <nccl-mesh/module.h>

/* One local cable end: device name and its address with prefix_len. */
struct rm_end {
	const char *name;
	struct mesh_addr addr;
};

/* A cable to the peer: our end (index into the ends) and the peer's
 * address on the same subnet. */
struct rm_cable {
	int end;
	struct mesh_addr peer;
};

/*
 * Every local end whose subnet holds one of the peer's addresses, each end
 * and each peer address used at most once, in the order of the ends.
 * Ends without a known subnet never match.  Returns the count (<= max).
 */
int rm_plan(const struct rm_end *ends, int nends, const struct mesh_addr *peer,
	    int npeer, struct rm_cable *out, int max);

/* The reason no cable reaches the peer: what was compared, and what would
 * serve the peer instead. */
void rm_unreachable(const struct rm_end *ends, int nends,
		    const struct mesh_addr *peer, int npeer, char *why,
		    size_t cap);

#endif
