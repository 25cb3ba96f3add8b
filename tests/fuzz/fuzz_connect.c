/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for connect() fed with mutated listen handles, through
 * the plugin's own entry (ncclNetPlugin_v11/_v12, core/nccl/plugin.c, built in
 * with the core so that coverage reaches it) on a real config that loads
 * tcp-xdc on lo with a 100 ms connect timeout.  The handles start from one
 * a real listen() gave, slot included (the last 8 bytes, which connect
 * must never take for its own: handle.h).
 *
 * Mutated addresses get dialled: it runs only in a network namespace that
 * holds nothing but lo (run-in-netns.sh), and refuses to start where
 * another interface exists.
 *
 * Input: a flags byte, a device byte, 128 handle bytes, 8 slot bytes.
 *  flags & 1   the handle bytes are the handle; else they are XORed onto
 *              the listen's handle (all zero: that handle as it is)
 *  flags & 2   through ncclNetPlugin_v12 rather than _v11
 *  flags & 4   the device is the device byte (signed), else 0
 *  flags & 8   once connect is in progress, the slot is overwritten with
 *              the slot bytes (a connect left behind: finalize frees it)
 *  flags & 16  the slot starts as the key of a connect in progress to
 *              another listen of ours (it must not be taken over)
 * Properties checked for any input:
 *  - connect ends (a comm or an error) within its timeout and some slack,
 *    and then its slot is zero; a comm it gives is closed cleanly;
 *  - while it is in progress the slot holds a key that is neither the
 *    garbage it started with nor another connect's;
 *  - a handle that is not ours (error before any dial) is left untouched;
 *  - the connect whose key was copied still reaches its own listen.
 * The context is finalized and initialized again now and then, so that
 * the connects left behind are freed (LeakSanitizer watches).
 */
#include <errno.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl-mesh/nccl_net.h"

#include "fuzz_util.h"

#define HANDLE_SIZE 128
#define SLOT 120		/* CORE_HANDLE_STATE_OFFSET */
#define TIMEOUT_MS 100		/* connect_timeout_ms below */
#define SLACK_S 5.0		/* a sanitized build on a busy host */
#define INPUTS_PER_LIFE 2000
#define LEFT_MAX 32		/* connects left behind before a new life */

extern const ncclNet_v11_t ncclNetPlugin_v11;
extern const ncclNet_v12_t ncclNetPlugin_v12;

static const ncclNet_v11_t *net = &ncclNetPlugin_v11;
static void *ctx;
static void *lcomm, *lcomm2;		/* the fuzzed handles' listen; another */
static uint8_t genuine[HANDLE_SIZE], genuine2[HANDLE_SIZE];
static int inputs, left_behind;
static bool verbose;

static void logger(ncclDebugLogLevel level, unsigned long flags,
		   const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	(void)flags;
	if (!verbose || level > NCCL_LOG_INFO)
		return;
	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void)
{
	struct timespec ts = { 0, 50 * 1000 };

	nanosleep(&ts, NULL);
}

static uint64_t slot_of(const uint8_t *h)
{
	uint64_t v;

	memcpy(&v, h + SLOT, sizeof(v));
	return v;
}

/* Whatever arrived at a listen: accepted and closed. */
static void drain_accept(void *l)
{
	void *rcomm = NULL;

	if (l && net->accept(l, &rcomm, NULL) == ncclSuccess && rcomm)
		REQUIRE(net->closeRecv(rcomm) == ncclSuccess);
}

static void life_start(void)
{
	REQUIRE(net->init(&ctx, 1, NULL, logger, NULL) == ncclSuccess);
	memset(genuine, 0, sizeof(genuine));
	memset(genuine2, 0, sizeof(genuine2));
	REQUIRE(net->listen(ctx, 0, genuine, &lcomm) == ncclSuccess);
	REQUIRE(net->listen(ctx, 0, genuine2, &lcomm2) == ncclSuccess);
	REQUIRE(slot_of(genuine) == 0 && slot_of(genuine2) == 0);
	left_behind = 0;
}

/* Closes what is ours and finalizes: the connects left in progress go
 * with the context. */
static void life_end(void)
{
	drain_accept(lcomm);
	drain_accept(lcomm2);
	REQUIRE(net->closeListen(lcomm) == ncclSuccess);
	REQUIRE(net->closeListen(lcomm2) == ncclSuccess);
	REQUIRE(net->finalize(ctx) == ncclSuccess);
	lcomm = lcomm2 = ctx = NULL;
}

/* Every init reads it again. */
static char conf_path[96], conf_dir[64];

static void at_exit(void)
{
	if (ctx)
		life_end();
	unlink(conf_path);
	rmdir(conf_dir);
}

/* Mutated addresses are dialled: nowhere but lo. */
static void require_lo_only(void)
{
	struct if_nameindex *ifs = if_nameindex();

	if (!ifs) {
		perror("if_nameindex");
		exit(1);
	}
	for (struct if_nameindex *i = ifs; i->if_index; i++) {
		if (strcmp(i->if_name, "lo")) {
			fprintf(stderr, "fuzz_connect: interface %s is here: "
				"run in a network namespace that holds only lo "
				"(tests/fuzz/run-in-netns.sh)\n", i->if_name);
			exit(1);
		}
	}
	if_freenameindex(ifs);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static char dir[] = "/tmp/mesh-fuzz-connect-XXXXXX";
	char conf[sizeof(dir) + 32];
	FILE *f;

	(void)argc, (void)argv;
	require_lo_only();
	verbose = getenv("FUZZ_CONNECT_VERBOSE") != NULL;
	if (!getenv("NCCL_MESH_MODULE_PATH"))
		setenv("NCCL_MESH_MODULE_PATH", FUZZ_MODULE_DIR, 1);
	REQUIRE(mkdtemp(dir) != NULL);
	snprintf(conf, sizeof(conf), "%s/nccl-mesh.conf", dir);
	f = fopen(conf, "w");
	REQUIRE(f != NULL);
	fprintf(f, "version = 1;\nmodules = [ \"tcp-xdc\" ];\n"
		"connect_timeout_ms = %d;\n"
		"tcp-xdc: { ifname = \"lo\"; streams = 1; threads = 1; };\n",
		TIMEOUT_MS);
	fclose(f);
	setenv("NCCL_MESH_CONF", conf, 1);
	unsetenv("NCCL_NET");
	snprintf(conf_path, sizeof(conf_path), "%s", conf);
	snprintf(conf_dir, sizeof(conf_dir), "%s", dir);
	atexit(at_exit);
	life_start();
	return 0;
}

/* The other listen's connect, started in h2: true while in progress (its
 * key is then in h2's slot). */
static bool other_start(uint8_t *h2, void **scomm2)
{
	memcpy(h2, genuine2, HANDLE_SIZE);
	*scomm2 = NULL;
	REQUIRE(net->connect(ctx, 0, h2, scomm2, NULL) == ncclSuccess);
	if (*scomm2) {
		REQUIRE(net->closeSend(*scomm2) == ncclSuccess);
		return false;
	}
	REQUIRE(slot_of(h2) != 0);
	return true;
}

/* The other connect is still its own: it ends, and a comm it gives is
 * to its own listen (the only one its nonce names). */
static void other_finish(uint8_t *h2, uint64_t key)
{
	double deadline = now_s() + TIMEOUT_MS / 1000.0 + SLACK_S;
	void *scomm = NULL, *rcomm = NULL;
	ncclResult_t r = ncclSuccess;

	REQUIRE(slot_of(h2) == key);
	while (now_s() < deadline && r == ncclSuccess && !scomm) {
		r = net->connect(ctx, 0, h2, &scomm, NULL);
		if (!rcomm && net->accept(lcomm2, &rcomm, NULL) != ncclSuccess)
			rcomm = NULL;	/* a fuzzed dial's, refused */
		nap();
	}
	/* it may time out (the fuzzed connect's steps took its time) */
	REQUIRE(r != ncclSuccess || scomm);
	REQUIRE(slot_of(h2) == 0);
	while (scomm && !rcomm && now_s() < deadline &&
	       net->accept(lcomm2, &rcomm, NULL) == ncclSuccess)
		nap();
	if (scomm)
		REQUIRE(net->closeSend(scomm) == ncclSuccess);
	if (rcomm)
		REQUIRE(net->closeRecv(rcomm) == ncclSuccess);
	drain_accept(lcomm2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t in[2 + HANDLE_SIZE + 8] = { 0 };
	uint8_t handle[HANDLE_SIZE], before[HANDLE_SIZE], h2[HANDLE_SIZE];
	const ncclNet_v11_t *api = net;
	void *scomm = NULL, *rcomm = NULL, *scomm2 = NULL;
	uint64_t pre, ours = 0, key2 = 0;
	bool other = false, overwritten = false;
	double deadline;
	ncclResult_t r;
	uint8_t flags;
	int dev = 0;

	if (++inputs % INPUTS_PER_LIFE == 0 || left_behind >= LEFT_MAX) {
		life_end();
		life_start();
	}
	memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
	flags = in[0];
	if (flags & 2)
		api = (const ncclNet_v11_t *)&ncclNetPlugin_v12;
	if (flags & 4)
		dev = (int8_t)in[1];
	for (int i = 0; i < HANDLE_SIZE; i++)
		handle[i] = flags & 1 ? in[2 + i] : genuine[i] ^ in[2 + i];
	if (flags & 16) {
		other = other_start(h2, &scomm2);
		if (other) {
			key2 = slot_of(h2);
			memcpy(handle + SLOT, &key2, sizeof(key2));
		}
	}
	/* the other's very handle on the same device: its own connect by
	 * the plugin's rules (a peer cannot know our key) */
	if (other && dev == 0 && !memcmp(handle, h2, SLOT)) {
		other_finish(h2, key2);
		return 0;
	}
	memcpy(before, handle, sizeof(before));

	deadline = now_s() + TIMEOUT_MS / 1000.0 + SLACK_S;
	do {
		pre = slot_of(handle);
		r = api->connect(ctx, dev, handle, &scomm, NULL);
		if (r == ncclSuccess && !scomm) {
			uint64_t key = slot_of(handle);

			/* in progress: a key of ours, never what the slot
			 * held unless that was this connect's own key, never
			 * the other connect's */
			REQUIRE(key != 0);
			REQUIRE(key == pre ? pre == ours : true);
			REQUIRE(!other || key != key2);
			ours = key;
			if ((flags & 8) && !overwritten) {
				overwritten = true;
				left_behind++;
				memcpy(handle + SLOT, in + 2 + HANDLE_SIZE, 8);
			}
		}
		if (!rcomm && net->accept(lcomm, &rcomm, NULL) != ncclSuccess)
			rcomm = NULL;	/* a fuzzed hello, refused */
		if (r != ncclSuccess || scomm)
			break;
		nap();
	} while (now_s() < deadline);
	REQUIRE(r != ncclSuccess || scomm);	/* it ended in time */
	/* only the slot is ever written */
	REQUIRE(!memcmp(handle, before, SLOT));
	if (r == ncclSuccess) {
		REQUIRE(slot_of(handle) == 0);
		REQUIRE(api->closeSend(scomm) == ncclSuccess);
		/* its accept may still be flushing */
		deadline = now_s() + SLACK_S;
		while (!rcomm && now_s() < deadline &&
		       net->accept(lcomm, &rcomm, NULL) == ncclSuccess)
			nap();
	} else {
		/* cleared, or as it was when refused before a start */
		REQUIRE(slot_of(handle) == 0 || slot_of(handle) == pre);
	}
	if (rcomm)
		REQUIRE(net->closeRecv(rcomm) == ncclSuccess);
	drain_accept(lcomm);
	if (other)
		other_finish(h2, key2);
	return 0;
}
