/* SPDX-License-Identifier: MIT */
/*
 * How many times, one after the other, an all-reduce crosses between
 * datacenters under each of NCCL's algorithms, for a layout of nodes:
 * the tuner's distance model (docs/modules/tcp-xdc.md, "Latency at
 * distance").  Pure arithmetic over NCCL's published construction of its
 * ring and trees; no NCCL code.
 *
 * NCCL numbers a communicator's nodes by their first rank.  Its ring
 * visits them in that order, and an all-reduce is 2(n-1) steps, each
 * waiting for the one before on the previous node: the chunk that
 * travels furthest crosses every WAN edge on 2(n-1) consecutive edges.
 * Its trees (a double binary tree over the nodes) reduce up to the root
 * and broadcast back down, so a chunk crosses twice the WAN edges of the
 * longest path from a node to the root; the two trees carry half the
 * channels each and run side by side, so the worse one counts.
 */
#include <errno.h>
#include <stdlib.h>

#include "tuner.h"

/* The parent of `node` in NCCL's first tree over n nodes, -1 for the
 * root 0: the lowest set bit cleared and the next one set, or only the
 * bit cleared where that falls outside. */
static long btree_parent(long n, long node)
{
	long bit = node & -node, up;

	if (node == 0)
		return -1;
	up = (node ^ bit) | (bit << 1);
	return up < n ? up : node ^ bit;
}

/* The second tree: the first mirrored (n even) or shifted by one. */
static long tree_parent(int tree, long n, long node)
{
	long up;

	if (tree == 0)
		return btree_parent(n, node);
	if (n % 2 == 0) {
		up = btree_parent(n, n - 1 - node);
		return up < 0 ? -1 : n - 1 - up;
	}
	up = btree_parent(n, (node - 1 + n) % n);
	return up < 0 ? -1 : (up + 1) % n;
}

static int ring_crossings(long n, const uint8_t *dc)
{
	long hops = 2 * (n - 1), rem = hops % n, all = 0, win = 0, best;

	for (long i = 0; i < n; i++)
		all += dc[i] != dc[(i + 1) % n];
	/* the most crossings among `rem` consecutive edges, any start */
	for (long i = 0; i < rem; i++)
		win += dc[i] != dc[(i + 1) % n];
	best = win;
	for (long s = 1; s < n && rem; s++) {
		long in = (s + rem - 1) % n, out = s - 1;

		win += (dc[in] != dc[(in + 1) % n]) -
		       (dc[out] != dc[out + 1]);
		if (win > best)
			best = win;
	}
	return (int)((hops / n) * all + best);
}

/* Twice the most crossings on a path from a node up to the root; a path
 * has at most 64 hops (the parent's bits rise), so walking each is cheap. */
static int tree_crossings(int tree, long n, const uint8_t *dc)
{
	int most = 0;

	for (long node = 0; node < n; node++) {
		int x = 0;

		for (long v = node, up; (up = tree_parent(tree, n, v)) >= 0;
		     v = up)
			x += dc[v] != dc[up];
		if (x > most)
			most = x;
	}
	return 2 * most;
}

int core_crossings(size_t nnodes, const uint8_t *dc,
		   struct core_crossings *out)
{
	long n = (long)nnodes;

	if (nnodes < 1 || nnodes > CORE_TUNER_NODES_MAX)
		return -EINVAL;
	out->ring = ring_crossings(n, dc);
	out->tree = tree_crossings(0, n, dc);
	if (n > 1) {
		int t1 = tree_crossings(1, n, dc);

		if (t1 > out->tree)
			out->tree = t1;
	}
	return 0;
}

int core_crossings_two_dcs(size_t nnodes, struct core_crossings *out)
{
	uint8_t *dc;
	int err;

	if (nnodes < 1 || nnodes > CORE_TUNER_NODES_MAX)
		return -EINVAL;
	dc = malloc(nnodes);
	if (!dc)
		return -ENOMEM;
	for (size_t i = 0; i < nnodes; i++)
		dc[i] = i >= (nnodes + 1) / 2;
	err = core_crossings(nnodes, dc, out);
	free(dc);
	return err;
}
