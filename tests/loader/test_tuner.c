/* SPDX-License-Identifier: MIT */
/*
 * The tuner as NCCL sees it: dlopens the plugin, inits its network (v11)
 * on a config with nccl_channels_by_size and nccl_ll_max, and asks
 * ncclTunerPlugin_v4 what NCCL would: the channel count per size, only for
 * a communicator over more than one node whose network is ours, by the
 * algorithm NCCL's cost table makes cheapest (its own rules, else those
 * for any algorithm); the table untouched up to nccl_ll_max, above it LL
 * and LL128 set aside unless Simple is impossible; and a context that
 * outlives the network's finalize.
 *
 * usage: test_tuner PLUGIN MODULE_DIR
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl-mesh/nccl_net.h"
#include "nccl-mesh/nccl_tuner.h"

#include "../unit/check.h"
#include "../unit/plugin_conf.h"

#define NALGO 7
#define NPROTO 3
#define LL_MAX 8192	/* nccl_ll_max below */

static const ncclTuner_v4_t *tuner;

#define ALGO_PAT 6
#define NO_ALGO (-1)

/* NCCL's cost table where `algo`'s Simple protocol is cheapest (none with
 * NO_ALGO), every other algorithm's LL impossible (-1). */
static float cost(int algo, int a, int p)
{
	if (algo == NO_ALGO || (a != algo && p == 0))
		return -1;
	return a == algo && p == 2 ? 1 : (float)(10 + a * NPROTO + p);
}

/* Whether the tuner sets protocol p aside for a collective of `bytes`
 * (LL and LL128 above nccl_ll_max), Simple being possible. */
static bool set_aside(size_t bytes, int p)
{
	return bytes > LL_MAX && p != 2;
}

/* cost() as a tuner that applies nccl_ll_max leaves it. */
static float cost_tuned(int algo, size_t bytes, int a, int p)
{
	return algo != NO_ALGO && set_aside(bytes, p) ? -1 : cost(algo, a, p);
}

/* The channels the tuner gives a collective of `bytes` whose cost table is
 * `table` (0: NCCL's), the table left as `want`. */
static int tuned(void *ctx, size_t bytes, float table[NALGO][NPROTO],
		 float want[NALGO][NPROTO])
{
	int n = 0;

	CHECK(tuner->getCollInfo(ctx, ncclFuncAllReduce, bytes, 1,
				 (float **)table, NALGO, NPROTO, 0, &n) ==
	      ncclSuccess);
	for (int a = 0; a < NALGO; a++)
		for (int p = 0; p < NPROTO; p++)
			CHECK(table[a][p] == want[a][p]);
	return n;
}

/* The same for a collective that NCCL would run with `algo`'s Simple,
 * the tuner applying nccl_ll_max if `ours`. */
static int tuned_for(void *ctx, size_t bytes, int algo, bool ours)
{
	float table[NALGO][NPROTO], want[NALGO][NPROTO];

	for (int a = 0; a < NALGO; a++)
		for (int p = 0; p < NPROTO; p++) {
			table[a][p] = cost(algo, a, p);
			want[a][p] = ours ? cost_tuned(algo, bytes, a, p)
					  : table[a][p];
		}
	return tuned(ctx, bytes, table, want);
}

static int channels_for(void *ctx, size_t bytes, int algo)
{
	return tuned_for(ctx, bytes, algo, true);
}

static int channels(void *ctx, size_t bytes)
{
	return channels_for(ctx, bytes, NCCL_ALGO_RING);
}

/* Where NCCL would run Tree with LL, Ring with Simple next: above
 * nccl_ll_max Ring's Simple is left cheapest, and Ring's rules apply. */
static void check_ll_max(void *ctx)
{
	float table[NALGO][NPROTO], want[NALGO][NPROTO];

	for (size_t bytes = LL_MAX; bytes <= 2 * LL_MAX; bytes += LL_MAX) {
		for (int a = 0; a < NALGO; a++)
			for (int p = 0; p < NPROTO; p++)
				table[a][p] = (float)(10 + a * NPROTO + p);
		table[NCCL_ALGO_TREE][0] = 1;
		table[NCCL_ALGO_RING][2] = 2;
		for (int a = 0; a < NALGO; a++)
			for (int p = 0; p < NPROTO; p++)
				want[a][p] = set_aside(bytes, p) ? -1 : table[a][p];
		/* tree:8K:0 at LL_MAX; ring's 64K:2 above it */
		CHECK(tuned(ctx, bytes, table, want) ==
		      (bytes > LL_MAX ? 2 : 0));
	}
	/* NCCL_PROTO=LL: Simple impossible, LL stays. */
	for (int a = 0; a < NALGO; a++)
		for (int p = 0; p < NPROTO; p++)
			table[a][p] = want[a][p] = p == 2 ? -1 :
				a == NCCL_ALGO_RING ? 1 : 10 + a;
	CHECK(tuned(ctx, 1 << 20, table, want) == 3);
}

static void *tuner_ctx(size_t nranks, size_t nnodes)
{
	void *ctx = NULL;

	CHECK(tuner->init(nranks, nnodes, NULL, &ctx) == ncclSuccess);
	CHECK(ctx != NULL);
	return ctx;
}

int main(int argc, char **argv)
{
	struct plugin_conf pc;
	const ncclNet_v11_t *net;
	void *lib, *net_ctx = NULL, *t2, *t1, *other;

	if (argc != 3) {
		fprintf(stderr, "usage: %s PLUGIN MODULE_DIR\n", argv[0]);
		return 2;
	}
	if (plugin_conf_write(&pc, "tuner",
			      "version = 1;\nmodules = [ \"tcp-xdc\" ];\n"
			      "nccl_channels_by_size = [ \"4K:0\", \"64K:2\", \"1M:3\",\n"
			      "  \"tree:8K:0\", \"tree:16K:5\" ];\n"
			      "nccl_ll_max = \"8K\";\n"
			      "tcp-xdc: { ifname = \"lo\"; streams = 1; threads = 1; };\n"))
		return 2;
	setenv("NCCL_MESH_MODULE_PATH", argv[2], 1);
	unsetenv("NCCL_NET");

	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 2;
	}
	net = dlsym(lib, "ncclNetPlugin_v11");
	tuner = dlsym(lib, "ncclTunerPlugin_v4");
	if (!net || !tuner) {
		fprintf(stderr, "%s: ncclNetPlugin_v11 or ncclTunerPlugin_v4 "
			"missing\n", argv[1]);
		return 2;
	}
	CHECK(!strcmp(tuner->name, "Mesh"));
	CHECK(net->init(&net_ctx, 1, NULL, NULL, NULL) == ncclSuccess);

	t2 = tuner_ctx(2, 2);
	CHECK(channels(t2, 8) == 0);
	CHECK(channels(t2, 4096) == 0);
	CHECK(channels(t2, 4097) == 2);
	CHECK(channels(t2, 65536) == 2);
	CHECK(channels(t2, 65537) == 3);
	CHECK(channels(t2, 1 << 20) == 3);
	CHECK(channels(t2, (1 << 20) + 1) == 0);
	CHECK(channels(t2, (size_t)1 << 40) == 0);
	/* Tree has rules of its own; any other algorithm takes the rest. */
	CHECK(channels_for(t2, 8192, NCCL_ALGO_TREE) == 0);
	CHECK(channels_for(t2, 8193, NCCL_ALGO_TREE) == 5);
	CHECK(channels_for(t2, 16384, NCCL_ALGO_TREE) == 5);
	CHECK(channels_for(t2, 16385, NCCL_ALGO_TREE) == 0);
	CHECK(channels_for(t2, 65536, NCCL_ALGO_TREE) == 0);
	CHECK(channels_for(t2, 65536, ALGO_PAT) == 2);
	CHECK(channels_for(t2, 16384, NO_ALGO) == 2);
	check_ll_max(t2);

	/* One node: NVLink or shared memory carry it, not the network. */
	t1 = tuner_ctx(8, 1);
	CHECK(tuned_for(t1, 65536, NCCL_ALGO_RING, false) == 0);
	/* A job that asked NCCL for another network. */
	setenv("NCCL_NET", "Socket", 1);
	other = tuner_ctx(2, 2);
	CHECK(tuned_for(other, 65536, NCCL_ALGO_RING, false) == 0);
	unsetenv("NCCL_NET");

	CHECK(net->finalize(net_ctx) == ncclSuccess);
	/* NCCL may destroy a tuner after the network's finalize. */
	CHECK(channels(t2, 65536) == 2);
	CHECK(tuner->destroy(t2) == ncclSuccess);
	CHECK(tuner->destroy(t1) == ncclSuccess);
	CHECK(tuner->destroy(other) == ncclSuccess);
	/* Before any network init: NCCL's counts. */
	t2 = tuner_ctx(2, 2);
	CHECK(tuned_for(t2, 65536, NCCL_ALGO_RING, false) == 0);
	CHECK(tuner->destroy(t2) == ncclSuccess);

	dlclose(lib);
	plugin_conf_remove(&pc);
	if (failures)
		fprintf(stderr, "test_tuner: %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
