/* SPDX-License-Identifier: MIT */
/*
 * The tuner as NCCL sees it: dlopens the plugin, inits its network (v11)
 * on a config with nccl_channels_by_size and nccl_ll_max, and asks
 * ncclTunerPlugin_v4 what NCCL would: the channel count per size, only for
 * a communicator over more than one node whose network is ours, by the
 * algorithm NCCL's cost table makes cheapest (its own rules, else those
 * for any algorithm); the table untouched up to nccl_ll_max, above it LL
 * and LL128 set aside unless Simple is impossible; and a context that
 * outlives the network's finalize.  Then the distance model: with
 * xdc_rtt_ms = 50 an all-reduce over four nodes in two DCs runs Ring
 * where NCCL's time plus the crossings (ring 3, tree 4, 25 ms each) makes
 * it cheaper than NCCL's Tree, NCCL's choice where not, and nothing
 * changes at a round trip of 0, over two or eight nodes (as many
 * crossings either way), for other collectives, or with
 * nccl_algo_by_distance = false; the tuner says so in its lines.
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
#include "../unit/log_capture.h"
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

/* The channels the tuner gives a collective `coll` of `bytes` whose cost
 * table is `table` (0: NCCL's), the table left as `want`. */
static int tuned_coll(void *ctx, ncclFunc_t coll, size_t bytes,
		      float table[NALGO][NPROTO], float want[NALGO][NPROTO])
{
	int n = 0;

	CHECK(tuner->getCollInfo(ctx, coll, bytes, 1, (float **)table, NALGO,
				 NPROTO, 0, &n) == ncclSuccess);
	for (int a = 0; a < NALGO; a++)
		for (int p = 0; p < NPROTO; p++)
			CHECK(table[a][p] == want[a][p]);
	return n;
}

static int tuned(void *ctx, size_t bytes, float table[NALGO][NPROTO],
		 float want[NALGO][NPROTO])
{
	return tuned_coll(ctx, ncclFuncAllReduce, bytes, table, want);
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

/* ------------------------------------------------------------ distance */

#define MIB16 ((size_t)16 << 20)

/* The tuner's lines, from the logger the network was given. */
static char logged[8192];
static size_t logged_len;

static void collect(const char *text)
{
	if (strstr(text, "tuner:") && logged_len < sizeof(logged))
		logged_len += (size_t)snprintf(logged + logged_len,
			sizeof(logged) - logged_len, "%s\n", text);
}

/*
 * NCCL's times for an all-reduce (us): Tree and Ring Simple, Ring LL128
 * a little dearer than Ring Simple, the rest impossible.
 */
static void two_algos(float t[NALGO][NPROTO], float tree, float ring)
{
	for (int a = 0; a < NALGO; a++)
		for (int p = 0; p < NPROTO; p++)
			t[a][p] = -1;
	t[NCCL_ALGO_TREE][NCCL_PROTO_SIMPLE] = tree;
	t[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = ring;
	t[NCCL_ALGO_RING][NCCL_PROTO_LL128] = ring + 5000;
}

/* The table two_algos makes, as the tuner leaves it: every entry but
 * Ring Simple set aside where it runs Ring for NCCL's Tree. */
static void check_pick(void *ctx, ncclFunc_t coll, size_t bytes, float tree,
		       float ring, bool to_ring)
{
	float table[NALGO][NPROTO], want[NALGO][NPROTO];

	two_algos(table, tree, ring);
	two_algos(want, tree, ring);
	if (to_ring)
		two_algos(want, -1, ring);
	if (to_ring || bytes > LL_MAX)
		want[NCCL_ALGO_RING][NCCL_PROTO_LL128] = -1;
	tuned_coll(ctx, coll, bytes, table, want);
}

/* NCCL's Tree LL cheapest for a small all-reduce, Ring LL next. */
static void check_pick_ll(void *ctx, size_t bytes, bool to_ring)
{
	float table[NALGO][NPROTO], want[NALGO][NPROTO];

	for (int a = 0; a < NALGO; a++)
		for (int p = 0; p < NPROTO; p++)
			table[a][p] = want[a][p] = -1;
	table[NCCL_ALGO_TREE][NCCL_PROTO_LL] = 30;
	table[NCCL_ALGO_RING][NCCL_PROTO_LL] = 40;
	table[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 60;
	want[NCCL_ALGO_RING][NCCL_PROTO_LL] = 40;
	if (!to_ring) {
		want[NCCL_ALGO_TREE][NCCL_PROTO_LL] = 30;
		want[NCCL_ALGO_RING][NCCL_PROTO_SIMPLE] = 60;
	}
	CHECK(tuned(ctx, bytes, table, want) == 0);	/* "4K:0" */
}

/* One network init with the environment as it is: four nodes' tuner,
 * changing NCCL's choice where `model` says it does. */
static void check_distance(const ncclNet_v11_t *net, bool model)
{
	void *net_ctx = NULL, *t4, *t2, *t8;

	logged_len = 0;
	logged[0] = '\0';
	test_log_sink = collect;
	CHECK(net->init(&net_ctx, 2, NULL, test_logger, NULL) == ncclSuccess);
	t4 = tuner_ctx(4, 4);
	/* NCCL's Tree 10 ms cheaper: +100 ms against Ring's +75 ms */
	check_pick(t4, ncclFuncAllReduce, MIB16, 20000, 30000, model);
	/* 30 ms cheaper: Tree still wins */
	check_pick(t4, ncclFuncAllReduce, MIB16, 20000, 50000, false);
	/* NCCL runs Ring: it crosses fewest already */
	check_pick(t4, ncclFuncAllReduce, MIB16, 27000, 20000, false);
	/* only all-reduce: NCCL's other collectives as they are */
	check_pick(t4, ncclFuncAllGather, MIB16, 20000, 30000, false);
	check_pick_ll(t4, 4096, model);
	/* two nodes cross twice, eight four times, by either algorithm */
	t2 = tuner_ctx(2, 2);
	check_pick(t2, ncclFuncAllReduce, MIB16, 20000, 30000, false);
	t8 = tuner_ctx(8, 8);
	check_pick(t8, ncclFuncAllReduce, MIB16, 20000, 30000, false);
	CHECK(tuner->destroy(t8) == ncclSuccess);
	CHECK(tuner->destroy(t2) == ncclSuccess);
	CHECK(tuner->destroy(t4) == ncclSuccess);
	CHECK(net->finalize(net_ctx) == ncclSuccess);
	CHECK(!model == !strstr(logged, "4 nodes in two DCs, xdc_rtt_ms 50: "
		"an all-reduce crosses between them 3 times by ring (+75.0 "
		"ms), 4 by tree (+100.0 ms); NCCL's time plus that picks the "
		"algorithm"));
	CHECK(!model == !strstr(logged, "2 nodes in two DCs, xdc_rtt_ms 50: "
		"an all-reduce crosses between them 2 times by ring (+50.0 "
		"ms), 2 by tree (+50.0 ms); the same, so NCCL's choice "
		"stands"));
	CHECK(!model == !strstr(logged, "tuner: all-reduces by WAN crossings: "
		"above 2K up to 4K: ring for NCCL's tree, above 8M up to 16M: "
		"ring for NCCL's tree\n"));
	CHECK(!model == !strstr(logged, "tuner: all-reduces by WAN crossings: "
		"NCCL's algorithm at every size\n"));
	if (failures)
		fprintf(stderr, "the tuner's lines:\n%s", logged);
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

	/* A round trip of 0 (none declared), 50 ms, 50 ms with the model
	 * turned off. */
	check_distance(net, false);
	setenv("NCCL_MESH_XDC_RTT_MS", "50", 1);
	check_distance(net, true);
	setenv("NCCL_MESH_NCCL_ALGO_BY_DISTANCE", "false", 1);
	check_distance(net, false);
	unsetenv("NCCL_MESH_NCCL_ALGO_BY_DISTANCE");
	unsetenv("NCCL_MESH_XDC_RTT_MS");

	dlclose(lib);
	plugin_conf_remove(&pc);
	if (failures)
		fprintf(stderr, "test_tuner: %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
