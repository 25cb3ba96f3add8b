/* SPDX-License-Identifier: MIT */
/*
 * The tuner's distance model (core/nccl/tuner_model.c): the sequential
 * crossings between datacenters of NCCL's ring and trees for layouts
 * worked out by hand from NCCL's construction (docs/modules/tcp-xdc.md,
 * "Latency at distance"), and what it refuses.
 */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "tuner.h"

/* Crossings for a layout written as one letter per node: "AABB". */
static struct core_crossings of(const char *layout)
{
	struct core_crossings x = { -1, -1 };
	uint8_t dc[64];
	size_t n = strlen(layout);

	for (size_t i = 0; i < n && i < sizeof(dc); i++)
		dc[i] = (uint8_t)(layout[i] - 'A');
	CHECK(core_crossings(n, dc, &x) == 0);
	return x;
}

#define CHECK_X(layout, want_ring, want_tree)                              \
	do {                                                               \
		struct core_crossings x_ = of(layout);                     \
		if (x_.ring != (want_ring) || x_.tree != (want_tree)) {    \
			fprintf(stderr, "%s: ring %d tree %d, want %d %d\n",\
				layout, x_.ring, x_.tree, want_ring,       \
				want_tree);                                \
			failures++;                                        \
		}                                                          \
	} while (0)

static void test_layouts(void)
{
	/* one DC: nothing crosses */
	CHECK_X("A", 0, 0);
	CHECK_X("AAAA", 0, 0);
	/* 0 -> 1 -> 0, and 1 under the root 0 in both trees */
	CHECK_X("AB", 2, 2);
	/*
	 * The GPU tier's: the ring's 6 hops from any start pass one of its
	 * two WAN edges 3 times; tree 0 is 0 - 2 - {1, 3}, tree 1 (its
	 * mirror) 3 - 1 - {2, 0}: leaf 1 reaches the root 0 through 2, two
	 * crossings up and two down.
	 */
	CHECK_X("AABB", 3, 4);
	/* interleaved: every ring hop crosses; tree 0 keeps 0 - 2 in A */
	CHECK_X("ABAB", 6, 2);
	/* odd: tree 1 is tree 0 shifted by one, 1 - 0 - 2 */
	CHECK_X("AAB", 3, 4);
	CHECK_X("AAAABBBB", 4, 4);
	CHECK_X("AAAAAAAABBBBBBBB", 4, 4);
	/* the last of 14 nodes alone: tree 1's root (the mirror of 0), so
	 * every path crosses once into it; tree 0 has it under 12 */
	CHECK_X("AAAAAAAAAAAAAB", 4, 2);
}

static void test_two_dcs(void)
{
	struct core_crossings x = { -1, -1 }, y = { -1, -1 };
	uint8_t dc[1000];

	CHECK(core_crossings_two_dcs(4, &x) == 0);
	CHECK(x.ring == 3 && x.tree == 4);
	CHECK(core_crossings_two_dcs(3, &x) == 0);
	CHECK(x.ring == 3 && x.tree == 4);	/* AAB */
	for (size_t i = 0; i < 1000; i++)
		dc[i] = i >= 500;
	CHECK(core_crossings_two_dcs(1000, &x) == 0);
	CHECK(core_crossings(1000, dc, &y) == 0);
	CHECK(x.ring == y.ring && x.tree == y.tree);
	CHECK(x.ring == 4);
	CHECK(x.tree >= 2 && x.tree % 2 == 0);
}

static void test_refused(void)
{
	struct core_crossings x = { -1, -1 };

	CHECK(core_crossings_two_dcs(0, &x) == -EINVAL);
	CHECK(core_crossings_two_dcs(CORE_TUNER_NODES_MAX + 1, &x) ==
	      -EINVAL);
	CHECK(x.ring == -1 && x.tree == -1);
	/* the largest it counts, quickly: n log n */
	CHECK(core_crossings_two_dcs(CORE_TUNER_NODES_MAX, &x) == 0);
	CHECK(x.ring == 4);
}

int main(void)
{
	test_layouts();
	test_two_dcs();
	test_refused();
	if (failures)
		fprintf(stderr, "test_tuner_model: %d check(s) failed\n",
			failures);
	return failures ? 1 : 0;
}
