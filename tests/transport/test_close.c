/* SPDX-License-Identifier: MIT */
/*
 * Closing and late peers, through the transport harness (argv[1] or
 * MESH_TEST_MODULE is the module):
 *
 *  - a sender that closes its send comm as soon as its last isend tests
 *    done loses nothing, whether the receiver is posted already or posts
 *    only after the close; many small receives in flight at the close;
 *    every iteration is a new connection on the same module context, as
 *    one listen comm serving several accepts in a row;
 *  - a receive posted after the peer closed in order fails from test()
 *    instead of hanging;
 *  - a receiver that posts long after timeout_ms (its window closed, the
 *    sender blocked) is a straggler, not a dead peer: nothing fails and
 *    every byte arrives.
 *
 * usage: test_close [--loops N] MODULE.so
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MAX_MSGS 32

struct batch {
	int n;
	size_t size[MAX_MSGS];
	unsigned char *src[MAX_MSGS], *dst[MAX_MSGS];
	void *sreq[MAX_MSGS], *rreq[MAX_MSGS];
};

static void batch_init(struct batch *b, int n, const size_t *sizes,
		       unsigned int seed)
{
	memset(b, 0, sizeof(*b));
	b->n = n;
	for (int i = 0; i < n; i++) {
		b->size[i] = sizes[i];
		b->src[i] = malloc(sizes[i] + 1);
		b->dst[i] = malloc(sizes[i] + 1);
		fill(b->src[i], sizes[i], seed + (unsigned int)i);
		memset(b->dst[i], 0xa5, sizes[i] + 1);
	}
}

static void batch_free(struct batch *b)
{
	for (int i = 0; i < b->n; i++) {
		free(b->src[i]);
		free(b->dst[i]);
	}
}

static void post_recvs(struct pair *p, struct batch *b)
{
	for (int i = 0; i < b->n; i++)
		b->rreq[i] = post_recv(p, b->dst[i], b->size[i], i);
}

/* Posts every send and waits until each tests done; 0 or the error. */
static int send_all(struct pair *p, struct batch *b, double timeout_s)
{
	int ret = 0, size;

	for (int i = 0; i < b->n; i++)
		b->sreq[i] = post_send(p, b->src[i], b->size[i], i);
	for (int i = 0; i < b->n && !ret; i++) {
		if (!b->sreq[i])
			return -ENOBUFS;
		ret = wait_req(b->sreq[i], &size, timeout_s);
		if (!ret && size != (int)b->size[i])
			ret = -EBADMSG;
	}
	return ret;
}

/* Waits for every receive and checks its bytes; false on any failure. */
static bool recv_all(struct batch *b, const char *what, int iter)
{
	bool ok = true;

	for (int i = 0; i < b->n; i++) {
		int size = -1, ret;

		if (!b->rreq[i]) {
			CHECK(0, "%s %d: receive %d not posted", what, iter, i);
			return false;
		}
		ret = wait_req(b->rreq[i], &size, DEADLINE_S);
		CHECK(ret == 0, "%s %d: receive %d of %zu bytes failed: %d",
		      what, iter, i, b->size[i], ret);
		if (ret)
			return false;
		CHECK(size == (int)b->size[i] &&
		      !memcmp(b->dst[i], b->src[i], b->size[i]) &&
		      b->dst[i][b->size[i]] == 0xa5,
		      "%s %d: message %d (%zu bytes) arrived wrong (%d bytes)",
		      what, iter, i, b->size[i], size);
		ok &= size == (int)b->size[i];
	}
	return ok;
}

/*
 * After an orderly close with nothing owed, a further receive fails from
 * test() (it never hangs, and irecv itself takes it).
 */
static void check_closed_receive(struct pair *p, const char *what, int iter)
{
	unsigned char buf[64];
	void *req = post_recv(p, buf, sizeof(buf), 0);
	double t0 = now_s();
	int size, ret;

	CHECK(req, "%s %d: irecv after the peer closed refused", what, iter);
	if (!req)
		return;
	log_level = 0;		/* the failure is expected */
	ret = wait_req(req, &size, 10);
	log_level = MESH_LOG_WARN;
	CHECK(ret < 0 && ret != -ETIMEDOUT,
	      "%s %d: receive after the peer closed: test returned %d after %.1f s",
	      what, iter, ret, now_s() - t0);
}

/*
 * One connection of a loop: the sender closes right after its sends test
 * done.  early: the receives are posted before the sends, else only after
 * the sender closed.  closed_check: then one more receive must fail.
 */
static void close_round(struct pair *p, int n, const size_t *sizes,
			bool early, bool closed_check, const char *what,
			int iter)
{
	struct batch b;
	int ret;

	batch_init(&b, n, sizes, (unsigned int)iter * 64);
	if (early)
		post_recvs(p, &b);
	ret = send_all(p, &b, DEADLINE_S);
	CHECK(ret == 0, "%s %d: send failed: %d", what, iter, ret);
	mod->close_send(p->send_comm);
	p->send_comm = NULL;
	if (!early)
		post_recvs(p, &b);
	if (recv_all(&b, what, iter) && closed_check)
		check_closed_receive(p, what, iter);
	batch_free(&b);
}

/*
 * loops connections on one module context, as one listen comm serving
 * several accepts in a row.  Even iterations post the receives only after
 * the sender closed, unless always_early.
 */
static void close_loop(int loops, int n, const size_t *sizes,
		       bool always_early, const char *what)
{
	struct pair p;
	double t0 = now_s();
	int i, ret, before = failures;

	memset(&p, 0, sizeof(p));
	ret = mod->init(&host, &p.mctx);
	CHECK(ret == 0, "init: %d", ret);
	if (ret)
		return;
	for (i = 0; i < loops && failures == before; i++) {
		ret = pair_connect(&p);
		CHECK(ret == 0, "%s: connect %d: %d", what, i, ret);
		if (ret)
			break;
		close_round(&p, n, sizes, always_early || i % 2, !always_early,
			    what, i);
		pair_close_comms(&p);
	}
	mod->fini(p.mctx);
	printf("%s %s, %d connections on one context (%.1f s)\n",
	       failures == before ? "ok" : "not ok", what, i, now_s() - t0);
}

static void test_close_after_completion(int loops)
{
	static const size_t sizes[] = { 0, 1, 4095, 300000, 3 * 65536 + 5,
					512 << 10 };

	close_loop(loops, (int)(sizeof(sizes) / sizeof(sizes[0])), sizes,
		   false, "close right after completion");
}

/* A full window of small receives in flight when the sender closes. */
static void test_close_small_window(int loops)
{
	size_t sizes[MAX_MSGS];

	for (int i = 0; i < MAX_MSGS; i++)
		sizes[i] = (size_t)(i * 37) % 200;
	close_loop(loops, MAX_MSGS, sizes, true,
		   "32 small receives in flight at close");
}

/*
 * The receiver posts delay_s after the sends, with timeout_ms far below
 * that: the streams sit at a zero window meanwhile.  Then the sender closes
 * as soon as its sends test done, while the receiver still reads.
 */
static void test_late_receiver(const char *timeout_ms, double delay_s)
{
	static const size_t sizes[] = { 4 << 20, (4 << 20) + 1, 4096 };
	struct batch b;
	struct pair p;
	double t0;
	int done = 0, size, ret, before = failures;

	param_set("timeout_ms", timeout_ms);
	/* Small buffers: 4 MiB cannot hide in them. */
	param_set("sndbuf", "64K");
	param_set("rcvbuf", "64K");
	ret = pair_open(&p);
	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		return;
	batch_init(&b, 3, sizes, 99);
	for (int i = 0; i < b.n; i++)
		b.sreq[i] = post_send(&p, b.src[i], b.size[i], i);
	t0 = now_s();
	while (now_s() - t0 < delay_s && failures == before) {
		ret = req_test(b.sreq[0], &done, &size);
		CHECK(ret == 0, "sender failed %.1f s into the wait: %d",
		      now_s() - t0, ret);
		CHECK(!done, "4 MiB went out with no receive posted");
		usleep(10000);
	}
	post_recvs(&p, &b);
	ret = 0;
	for (int i = 0; i < b.n && !ret; i++)
		ret = wait_req(b.sreq[i], &size, DEADLINE_S);
	CHECK(ret == 0, "send after the late receive: %d", ret);
	mod->close_send(p.send_comm);
	p.send_comm = NULL;
	recv_all(&b, "late receiver", 0);
	pair_close(&p);
	batch_free(&b);
	params_reset();
	param_set("ifname", "=lo");
	printf("%s receiver %.0f s late with timeout_ms %s\n",
	       failures == before ? "ok" : "not ok", delay_s, timeout_ms);
}

int main(int argc, char **argv)
{
	const char *path = getenv("MESH_TEST_MODULE");
	int loops = 100;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--loops") && i + 1 < argc)
			loops = atoi(argv[++i]);
		else
			path = argv[i];
	}
	if (!path || loops < 1) {
		fprintf(stderr, "usage: %s [--loops N] MODULE.so\n", argv[0]);
		return 2;
	}
	harness_load(path);
	param_set("ifname", "=lo");
	param_set("streams", "4");
	param_set("threads", "2");
	param_set("min_chunk", "4K");
	param_set("chunk_size", "64K");
	test_close_after_completion(loops);
	test_close_small_window(loops);
	param_set("streams", "2");
	param_set("threads", "2");
	test_close_after_completion(loops / 4 + 1);
	params_reset();
	param_set("ifname", "=lo");
	param_set("streams", "4");
	test_late_receiver("500", 3);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("all close checks passed\n");
	return 0;
}
