/* SPDX-License-Identifier: MIT */
/* rdma-mesh's cable planning: which local cable ends reach a peer. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "netaddr.h"
#include "rdma_mesh_plan.h"

static struct mesh_addr addr(const char *text)
{
	struct mesh_addr a;

	memset(&a, 0, sizeof(a));
	if (util_addr_parse(text, &a))
		fprintf(stderr, "bad test address %s\n", text);
	return a;
}

/* Node 1 of a triangle, its cables listed against index order. */
static void test_triangle(void)
{
	struct rm_end ends[2] = {
		{ "rxe13", addr("10.77.13.1/24") },
		{ "rxe12", addr("10.77.12.1/24") },
	};
	struct mesh_addr node2[2] = { addr("10.77.12.2:5000"),
				      addr("10.77.23.2:5000") };
	struct mesh_addr node3[2] = { addr("10.77.13.3"), addr("10.77.23.3") };
	struct rm_cable c[4];

	CHECK(rm_plan(ends, 2, node2, 2, c, 4) == 1);
	CHECK(c[0].end == 1);
	CHECK(util_addr_equal_ip(&c[0].peer, &node2[0]));
	CHECK(c[0].peer.port == 0);
	CHECK(rm_plan(ends, 2, node3, 2, c, 4) == 1);
	CHECK(c[0].end == 0);
	CHECK(util_addr_equal_ip(&c[0].peer, &node3[0]));
}

/* Two cables to one peer: both used, each peer address once. */
static void test_two_cables(void)
{
	struct rm_end ends[3] = {
		{ "rxe12", addr("10.77.12.1/24") },
		{ "rxe13", addr("10.77.13.1/24") },
		{ "rxe12b", addr("10.77.112.1/24") },
	};
	struct mesh_addr peer[3] = { addr("10.77.112.2"), addr("10.77.23.2"),
				     addr("10.77.12.2") };
	struct rm_cable c[4];

	CHECK(rm_plan(ends, 3, peer, 3, c, 4) == 2);
	CHECK(c[0].end == 0 && util_addr_equal_ip(&c[0].peer, &peer[2]));
	CHECK(c[1].end == 2 && util_addr_equal_ip(&c[1].peer, &peer[0]));
	CHECK(rm_plan(ends, 3, peer, 3, c, 1) == 1);
}

/* One peer address is one cable, however many local ends share its
 * subnet; ends without a known subnet and loopback peers never match. */
static void test_edges(void)
{
	struct rm_end ends[3] = {
		{ "a", addr("10.0.0.1/24") },
		{ "b", addr("10.0.0.5/24") },
		{ "c", addr("10.1.0.1") },
	};
	struct mesh_addr peer[2] = { addr("10.0.0.2"), addr("127.0.0.1") };
	struct mesh_addr nosub[1] = { addr("10.1.0.2") };
	struct rm_cable c[4];

	CHECK(rm_plan(ends, 3, peer, 2, c, 4) == 1);
	CHECK(c[0].end == 0);
	CHECK(rm_plan(ends, 3, nosub, 1, c, 4) == 0);
	CHECK(rm_plan(ends, 0, peer, 2, c, 4) == 0);
}

/* A fourth node cabled only to node 1, asked for node 2. */
static void test_unreachable(void)
{
	struct rm_end ends[1] = { { "rxe41", addr("10.77.14.4/24") } };
	struct mesh_addr node2[2] = { addr("10.77.12.2:5000"),
				      addr("10.77.23.2:5000") };
	struct rm_cable c[4];
	char why[512];

	CHECK(rm_plan(ends, 1, node2, 2, c, 4) == 0);
	rm_unreachable(ends, 1, node2, 2, why, sizeof(why));
	CHECK(strstr(why, "10.77.12.2/") == NULL);	/* no prefix known */
	CHECK(strstr(why, "10.77.12.2, 10.77.23.2") != NULL);
	CHECK(strstr(why, "rxe41 10.77.14.4/24") != NULL);
	CHECK(strstr(why, "relay") != NULL);
	CHECK(strstr(why, ":5000") == NULL);
	rm_unreachable(ends, 0, node2, 0, why, sizeof(why));
	CHECK(strstr(why, "no address") != NULL && strstr(why, "none") != NULL);
	rm_unreachable(ends, 1, node2, 2, why, 16);	/* truncates safely */
	CHECK(strlen(why) == 15);
}

int main(void)
{
	test_triangle();
	test_two_cables();
	test_edges();
	test_unreachable();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
