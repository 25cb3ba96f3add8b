/* SPDX-License-Identifier: MIT */
/*
 * The relay's route text as meshinfo gets it, hop by hop (relay_wire.c):
 * what relays write, addresses of either family, and what a peer may send
 * that is cut short or malformed.
 */
#include <string.h>

#include "check.h"
#include "relay_wire.h"

static int hop_is(const struct mesh_conn_hop *h, const char *name,
		  const char *module, const char *addr)
{
	return !strcmp(h->name, name) && !strcmp(h->module, module) &&
	       !strcmp(h->addr, addr);
}

int main(void)
{
	struct mesh_conn_hop h[MESH_CONN_HOPS_MAX];

	CHECK(relay_route_hops("destination (tcp-xdc 10.0.0.3:4000)", h, 8) ==
	      1 && hop_is(&h[0], "destination", "tcp-xdc", "10.0.0.3:4000"));
	CHECK(relay_route_hops("g0 (tcp-xdc 10.0.0.9:5000) -> r1 (rdma-mesh "
			       "[fd00::2]:5001) -> destination (ib-fabric "
			       "10.0.0.3:4000)", h, 8) == 3 &&
	      hop_is(&h[0], "g0", "tcp-xdc", "10.0.0.9:5000") &&
	      hop_is(&h[1], "r1", "rdma-mesh", "[fd00::2]:5001") &&
	      hop_is(&h[2], "destination", "ib-fabric", "10.0.0.3:4000"));
	/* no more than asked for */
	CHECK(relay_route_hops("a (m 1:1) -> b (m 2:2) -> c (m 3:3)", h, 2) ==
	      2 && hop_is(&h[1], "b", "m", "2:2"));
	/* cut short, or not a route: the whole hops before it */
	CHECK(relay_route_hops("a (m 1:1) -> b (m 2:", h, 8) == 1);
	CHECK(relay_route_hops("a (m) -> b (m 2:2)", h, 8) == 0);
	CHECK(relay_route_hops("", h, 8) == 0);
	CHECK(relay_route_hops("no relay here", h, 8) == 0);
	return failures ? 1 : 0;
}
