/* SPDX-License-Identifier: MIT */
/*
 * The last 8 bytes of a listen handle (the connecting side's slot) come
 * from the peer like the rest of the handle, through NCCL's bootstrap.
 * connect() must never take them for its own state: whatever a peer put
 * there, a handle of ours connects normally and anything else fails with
 * ncclInvalidArgument.  Driven as NCCL drives it: the plugin dlopened,
 * v11 on tcp-xdc over loopback.
 *
 *  - "AAAAAA\0\0", all ones, 1, and the address of a live object full of
 *    0x41 in the slot: each connects (and its accept completes), and the
 *    slot is zero again once connect has given its comm;
 *  - the same garbage in a handle that is not ours: ncclInvalidArgument,
 *    the handle left as it was;
 *  - the slot of a connect in progress copied into another listener's
 *    handle: that connect goes to its own listener, and the first one
 *    still completes, to its own;
 *  - threads connecting at once, each with garbage in its slots;
 *  - connects left in progress (their handles freed, as NCCL does when it
 *    gives up) are released by finalize: the sanitized build's leak check
 *    sees nothing.
 *
 * usage: test_connect_slot PLUGIN MODULE_DIR
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl-mesh/nccl_net.h"

#include "check.h"
#include "plugin_conf.h"

#define HANDLE_SIZE 128
#define SLOT 120		/* CORE_HANDLE_STATE_OFFSET */
#define DEADLINE_S 20.0
#define NTHREADS 4
#define PER_THREAD 8

static const ncclNet_v11_t *net;
static void *net_ctx;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void)
{
	struct timespec ts = { 0, 200 * 1000 };

	nanosleep(&ts, NULL);
}

static uint64_t slot_of(const uint8_t *handle)
{
	uint64_t v;

	memcpy(&v, handle + SLOT, sizeof(v));
	return v;
}

static void set_slot(uint8_t *handle, uint64_t v)
{
	memcpy(handle + SLOT, &v, sizeof(v));
}

/* Polls connect and accept until both have their comm; 0 when they did. */
static int connect_accept(uint8_t *handle, void *lcomm, void **scomm,
			  void **rcomm)
{
	double deadline = now_s() + DEADLINE_S;

	*scomm = *rcomm = NULL;
	while (now_s() < deadline && !(*scomm && *rcomm)) {
		if (!*scomm && net->connect(net_ctx, 0, handle, scomm, NULL) !=
				       ncclSuccess)
			return -1;
		if (!*rcomm && net->accept(lcomm, rcomm, NULL) != ncclSuccess)
			return -1;
		nap();
	}
	return *scomm && *rcomm ? 0 : -1;
}

static void close_pair(void *scomm, void *rcomm)
{
	if (scomm)
		CHECK(net->closeSend(scomm) == ncclSuccess);
	if (rcomm)
		CHECK(net->closeRecv(rcomm) == ncclSuccess);
}

/* A handle of ours with `slot` in its slot connects as any other. */
static void garbage_connects(uint64_t slot, const char *what)
{
	uint8_t handle[HANDLE_SIZE] = { 0 };
	void *lcomm = NULL, *scomm, *rcomm;
	int rc;

	CHECK(net->listen(net_ctx, 0, handle, &lcomm) == ncclSuccess);
	CHECK(slot_of(handle) == 0);
	set_slot(handle, slot);
	rc = connect_accept(handle, lcomm, &scomm, &rcomm);
	if (rc)
		fprintf(stderr, "slot %s: no connection\n", what);
	CHECK(rc == 0);
	CHECK(slot_of(handle) == 0);
	close_pair(scomm, rcomm);
	CHECK(net->closeListen(lcomm) == ncclSuccess);
}

/* Not our handle: refused, whatever the slot holds, and left alone. */
static void garbage_refused(uint64_t slot)
{
	uint8_t handle[HANDLE_SIZE], before[HANDLE_SIZE];
	void *scomm = (void *)&scomm;

	memset(handle, 0x41, sizeof(handle));
	set_slot(handle, slot);
	memcpy(before, handle, sizeof(before));
	CHECK(net->connect(net_ctx, 0, handle, &scomm, NULL) ==
	      ncclInvalidArgument);
	CHECK(scomm == NULL);
	CHECK(!memcmp(handle, before, sizeof(handle)));
}

/* The key of a connect in progress, copied into another listener's
 * handle, names nothing there. */
static void key_of_another(void)
{
	uint8_t ha[HANDLE_SIZE] = { 0 }, hb[HANDLE_SIZE] = { 0 };
	void *la = NULL, *lb = NULL, *sa = NULL, *ra = NULL, *sb, *rb;

	CHECK(net->listen(net_ctx, 0, ha, &la) == ncclSuccess);
	CHECK(net->listen(net_ctx, 0, hb, &lb) == ncclSuccess);
	/* nobody accepts on a yet: the first call cannot finish */
	CHECK(net->connect(net_ctx, 0, ha, &sa, NULL) == ncclSuccess);
	CHECK(sa == NULL);
	CHECK(slot_of(ha) != 0);
	set_slot(hb, slot_of(ha));
	CHECK(connect_accept(hb, lb, &sb, &rb) == 0);
	CHECK(slot_of(hb) == 0);
	close_pair(sb, rb);
	/* a's connect is still its own, and reaches a */
	CHECK(connect_accept(ha, la, &sa, &ra) == 0);
	close_pair(sa, ra);
	CHECK(net->closeListen(la) == ncclSuccess);
	CHECK(net->closeListen(lb) == ncclSuccess);
}

static void *thread_main(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	int *bad = calloc(1, sizeof(*bad));

	for (int i = 0; bad && i < PER_THREAD; i++) {
		uint8_t handle[HANDLE_SIZE] = { 0 };
		void *lcomm = NULL, *scomm = NULL, *rcomm = NULL;
		uint64_t junk = 0;

		for (int b = 0; b < 8; b++)
			junk = junk << 8 | (uint64_t)(rand_r(&seed) & 0xff);
		if (net->listen(net_ctx, 0, handle, &lcomm) != ncclSuccess) {
			(*bad)++;
			continue;
		}
		set_slot(handle, junk | 1);
		if (connect_accept(handle, lcomm, &scomm, &rcomm) ||
		    slot_of(handle) != 0)
			(*bad)++;
		if (scomm)
			*bad += net->closeSend(scomm) != ncclSuccess;
		if (rcomm)
			*bad += net->closeRecv(rcomm) != ncclSuccess;
		*bad += net->closeListen(lcomm) != ncclSuccess;
	}
	return bad;
}

static void threads(void)
{
	pthread_t t[NTHREADS];

	for (int i = 0; i < NTHREADS; i++)
		CHECK(pthread_create(&t[i], NULL, thread_main,
				     (void *)(uintptr_t)(i + 1)) == 0);
	for (int i = 0; i < NTHREADS; i++) {
		int *bad = NULL;

		CHECK(pthread_join(t[i], (void **)&bad) == 0);
		CHECK(bad && *bad == 0);
		free(bad);
	}
}

/* Connects NCCL gives up on: the handle goes, the connect stays ours
 * until finalize. */
static void abandoned(void)
{
	void *lcomm[3] = { NULL };

	for (int i = 0; i < 3; i++) {
		uint8_t *handle = calloc(1, HANDLE_SIZE);
		void *scomm = NULL;

		CHECK(handle != NULL);
		if (!handle)
			break;
		CHECK(net->listen(net_ctx, 0, handle, &lcomm[i]) ==
		      ncclSuccess);
		CHECK(net->connect(net_ctx, 0, handle, &scomm, NULL) ==
		      ncclSuccess);
		CHECK(scomm == NULL);
		free(handle);
	}
	for (int i = 0; i < 3; i++)
		if (lcomm[i])
			CHECK(net->closeListen(lcomm[i]) == ncclSuccess);
}

int main(int argc, char **argv)
{
	struct plugin_conf pc;
	uint8_t object[64];
	void *lib;

	if (argc != 3) {
		fprintf(stderr, "usage: %s PLUGIN MODULE_DIR\n", argv[0]);
		return 2;
	}
	if (plugin_conf_write(&pc, "slot",
			      "version = 1;\nmodules = [ \"tcp-xdc\" ];\n"
			      "connect_timeout_ms = 10000;\n"
			      "tcp-xdc: { ifname = \"lo\"; streams = 1; threads = 1; };\n"))
		return 2;
	setenv("NCCL_MESH_MODULE_PATH", argv[2], 1);

	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
		return 2;
	}
	net = dlsym(lib, "ncclNetPlugin_v11");
	if (!net) {
		fprintf(stderr, "%s: no ncclNetPlugin_v11\n", argv[1]);
		return 2;
	}
	if (net->init(&net_ctx, 1, NULL, NULL, NULL) != ncclSuccess) {
		fprintf(stderr, "init failed\n");
		return 1;
	}

	memset(object, 0x41, sizeof(object));
	garbage_connects(0x0000414141414141ull, "AAAAAA\\0\\0");
	garbage_connects(~0ull, "all ones");
	garbage_connects(1, "1");
	garbage_connects((uint64_t)(uintptr_t)object, "a live object");
	garbage_refused(0x0000414141414141ull);
	garbage_refused((uint64_t)(uintptr_t)object);
	key_of_another();
	threads();
	abandoned();

	CHECK(net->finalize(net_ctx) == ncclSuccess);
	/* a second life: the table starts empty, and works */
	CHECK(net->init(&net_ctx, 2, NULL, NULL, NULL) == ncclSuccess);
	garbage_connects(0x0000414141414141ull, "AAAAAA\\0\\0, again");
	abandoned();
	CHECK(net->finalize(net_ctx) == ncclSuccess);

	dlclose(lib);
	plugin_conf_remove(&pc);
	if (failures)
		fprintf(stderr, "test_connect_slot: %d check(s) failed\n",
			failures);
	return failures ? 1 : 0;
}
