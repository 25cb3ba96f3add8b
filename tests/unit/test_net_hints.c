/* SPDX-License-Identifier: MIT */
/*
 * NCCL's hints at the NCCL boundary (core/nccl/plugin.c built in):
 *
 *  - setNetAttr is there (not NULL) in v11 and v12, and checks what NCCL
 *    hands it: no context or no attributes, a count below 0 other than
 *    NCCL_NET_ATTR_UNDEF, a minimum above its maximum are refused with
 *    ncclInvalidArgument; unset (-1), zeros and real hints are taken;
 *  - init refuses a trafficClass outside -1..255 and leaves no context;
 *    v10's connect refuses one the same way;
 *  - with a class, init works and the context takes hints, and logs each
 *    distinct set once however often NCCL sets them again (it does before
 *    every collective), at most 8.
 *
 * usage: test_net_hints MODULE_DIR
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl-mesh/nccl_net.h"

#include "check.h"
#include "log_capture.h"
#include "plugin_conf.h"

extern const ncclNet_v12_t ncclNetPlugin_v12;
extern const ncclNet_v11_t ncclNetPlugin_v11;
extern const ncclNet_v10_t ncclNetPlugin_v10;
int core_net_attr_check(const ncclNetAttr_t *attr, char *why, size_t cap);

#define UNDEF (-1)

/* from any thread of the plugin's callers */
static atomic_int hint_lines, hint_last, hint_lasts;

/* Counts the hint lines of what the plugin logs. */
static void count_hints(const char *text)
{
	if (strstr(text, "NCCL's hints for the connections")) {
		bool last = strstr(text, "no more of them logged") != NULL;

		atomic_fetch_add(&hint_lines, 1);
		atomic_store(&hint_last, last);
		atomic_fetch_add(&hint_lasts, last);
	}
}

static ncclNetAttr_t attr_unset(void)
{
	ncclNetAttr_t a = {
		{ UNDEF, UNDEF, UNDEF, UNDEF },
		{ UNDEF, UNDEF, UNDEF, UNDEF },
		(uint32_t)UNDEF, (uint32_t)UNDEF, (uint32_t)UNDEF,
	};

	return a;
}

static void check_attrs(void)
{
	ncclNetAttr_t a = attr_unset();
	char why[160] = "";

	CHECK(core_net_attr_check(NULL, why, sizeof(why)) == -EINVAL);
	CHECK(core_net_attr_check(&a, why, sizeof(why)) == 0);
	memset(&a, 0, sizeof(a));
	CHECK(core_net_attr_check(&a, why, sizeof(why)) == 0);

	/* what NCCL sends for p2p: peers and flows per peer, masks */
	a = attr_unset();
	a.sendCommAttr.maxConcurrentPeers = 8;
	a.sendCommAttr.minConcurrentPeers = 1;
	a.sendCommAttr.maxFlowsPerPeer = 4;
	a.sendCommAttr.minFlowsPerPeer = 1;
	a.recvCommAttr = a.sendCommAttr;
	a.op = 0x3;
	a.algo = 0x2;
	a.proto = 0x4;
	CHECK(core_net_attr_check(&a, why, sizeof(why)) == 0);

	a.sendCommAttr.maxFlowsPerPeer = -2;
	CHECK(core_net_attr_check(&a, why, sizeof(why)) == -EINVAL);
	CHECK(strstr(why, "sendCommAttr.maxFlowsPerPeer is -2") != NULL);

	a.sendCommAttr.maxFlowsPerPeer = 4;
	a.recvCommAttr.minConcurrentPeers = 9;
	CHECK(core_net_attr_check(&a, why, sizeof(why)) == -EINVAL);
	CHECK(strstr(why, "recvCommAttr.minConcurrentPeers 9 exceeds "
			  "maxConcurrentPeers 8") != NULL);

	/* a minimum with no maximum is no contradiction */
	a.recvCommAttr.maxConcurrentPeers = UNDEF;
	CHECK(core_net_attr_check(&a, why, sizeof(why)) == 0);
}

/* Sets 12 distinct hint sets in turn, 500 rounds, as NCCL's threads may. */
static void *set_hints_loop(void *ctx)
{
	ncclNetAttr_t a = attr_unset();

	for (int r = 0; r < 500; r++)
		for (int i = 0; i < 12; i++) {
			a.op = 1 << i;
			if (ncclNetPlugin_v12.setNetAttr(ctx, &a) != ncclSuccess)
				return ctx;
		}
	return NULL;
}

/* Four threads at once: each set is logged at most once, 8 in all. */
static void check_threads(void *ctx)
{
	pthread_t t[4];
	void *bad;

	atomic_store(&hint_lines, 0);
	atomic_store(&hint_lasts, 0);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, set_hints_loop, ctx) == 0);
	for (int i = 0; i < 4; i++) {
		CHECK(pthread_join(t[i], &bad) == 0);
		CHECK(bad == NULL);
	}
	CHECK(atomic_load(&hint_lines) == 8);
	CHECK(atomic_load(&hint_lasts) == 1);
}

static void check_init(const char *module_dir)
{
	ncclNetCommConfig_t config = { .trafficClass = 256 };
	ncclNetAttr_t a = attr_unset();
	struct plugin_conf pc;
	void *ctx = (void *)&config;
	void *comm = (void *)&config;
	char handle[128] = { 0 };

	CHECK(ncclNetPlugin_v11.setNetAttr != NULL);
	CHECK(ncclNetPlugin_v12.setNetAttr != NULL);
	CHECK(ncclNetPlugin_v12.setNetAttr(NULL, &a) == ncclInvalidArgument);

	CHECK(ncclNetPlugin_v12.init(&ctx, 1, &config, NULL, NULL) ==
	      ncclInvalidArgument);
	CHECK(ctx == NULL);
	config.trafficClass = -2;
	CHECK(ncclNetPlugin_v11.init(&ctx, 1, &config, NULL, NULL) ==
	      ncclInvalidArgument);
	CHECK(ctx == NULL);
	CHECK(ncclNetPlugin_v10.connect(0, &config, handle, &comm, NULL) ==
	      ncclInvalidArgument);
	CHECK(comm == NULL);

	if (plugin_conf_write(&pc, "hints", "version = 1;\n"
			      "modules = [ \"tcp-xdc\" ];\n"
			      "tcp-xdc: { ifname = \"=lo\"; };\n")) {
		fprintf(stderr, "cannot write the config\n");
		failures++;
		return;
	}
	setenv("NCCL_MESH_MODULE_PATH", module_dir, 1);
	config.trafficClass = 104;
	test_log_sink = count_hints;
	CHECK(ncclNetPlugin_v12.init(&ctx, 2, &config, test_logger, NULL) ==
	      ncclSuccess);
	CHECK(ctx != NULL);
	if (ctx) {
		CHECK(ncclNetPlugin_v12.setNetAttr(ctx, NULL) ==
		      ncclInvalidArgument);
		/* two sets in turn, as NCCL's protocols alternate: two lines */
		for (int i = 0; i < 20; i++) {
			a.proto = i % 2 ? 0x1 : 0x4;
			CHECK(ncclNetPlugin_v12.setNetAttr(ctx, &a) ==
			      ncclSuccess);
		}
		CHECK(hint_lines == 2);
		/* ten more distinct sets: six more lines, the last says so */
		for (int i = 0; i < 10; i++) {
			a.op = 1 << i;
			CHECK(ncclNetPlugin_v12.setNetAttr(ctx, &a) ==
			      ncclSuccess);
		}
		CHECK(hint_lines == 8 && hint_last);
		a.sendCommAttr.maxFlowsPerPeer = 2;
		CHECK(ncclNetPlugin_v12.setNetAttr(ctx, &a) == ncclSuccess);
		CHECK(hint_lines == 8);
		a.recvCommAttr.minFlowsPerPeer = -5;
		CHECK(ncclNetPlugin_v12.setNetAttr(ctx, &a) ==
		      ncclInvalidArgument);
		CHECK(ncclNetPlugin_v12.finalize(ctx) == ncclSuccess);
	}
	ctx = NULL;
	CHECK(ncclNetPlugin_v12.init(&ctx, 3, &config, test_logger, NULL) ==
	      ncclSuccess);
	if (ctx) {
		check_threads(ctx);
		CHECK(ncclNetPlugin_v12.finalize(ctx) == ncclSuccess);
	}
	plugin_conf_remove(&pc);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s MODULE_DIR\n", argv[0]);
		return 2;
	}
	check_attrs();
	check_init(argv[1]);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("net hints: ok\n");
	return 0;
}
