/* SPDX-License-Identifier: MIT */
/*
 * Transport tests: dlopens a module (argv[1] or MESH_TEST_MODULE) and drives
 * its data path through the harness.  `--bench` measures throughput instead
 * of testing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* ---- tests ---- */

static void params_base(void);

/* One message each way of posting: receive first, or send first (parked). */
static void check_transfer(struct pair *p, size_t size, size_t posted,
			   bool send_first, int tag)
{
	unsigned char *src = malloc(size ? size : 1);
	unsigned char *dst = malloc(posted ? posted : 1);
	unsigned char *ref = malloc(size ? size : 1);
	void *sreq, *rreq;
	int ssize = -1, rsize = -1, ret;

	fill(src, size, (unsigned int)size + (unsigned int)tag);
	memcpy(ref, src, size);
	memset(dst, 0xa5, posted ? posted : 1);
	if (send_first) {
		sreq = post_send(p, src, size, tag);
		usleep(20000);
		rreq = post_recv(p, dst, posted, tag);
	} else {
		rreq = post_recv(p, dst, posted, tag);
		sreq = post_send(p, src, size, tag);
	}
	if (!sreq || !rreq) {
		CHECK(0, "no request for %zu bytes", size);
		goto out;
	}
	ret = wait_req(rreq, &rsize, DEADLINE_S);
	CHECK(ret == 0, "recv of %zu bytes: %d", size, ret);
	ret = wait_req(sreq, &ssize, DEADLINE_S);
	CHECK(ret == 0, "send of %zu bytes: %d", size, ret);
	CHECK(rsize == (int)size, "recv reported %d bytes, sent %zu", rsize,
	      size);
	CHECK(ssize == (int)size, "send reported %d bytes of %zu", ssize,
	      size);
	CHECK(!memcmp(dst, ref, size), "payload of %zu bytes differs", size);
	if (posted > size)
		CHECK(dst[size] == 0xa5, "wrote past %zu bytes", size);
out:
	free(src);
	free(dst);
	free(ref);
}

static void test_sizes(const char *label)
{
	static const size_t sizes[] = { 0, 1, 4095, (1 << 20) + 3, 64 << 20 };
	struct pair p;
	int ret = pair_open(&p);

	CHECK(ret == 0, "%s: connect: %d", label, ret);
	if (ret)
		return;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		check_transfer(&p, sizes[i], sizes[i], false, (int)i);
		check_transfer(&p, sizes[i], sizes[i] + 100, true, (int)i + 7);
	}
	pair_close(&p);
	printf("ok %s\n", label);
}

static void test_outstanding(void)
{
	enum { N = 32, SIZE = 65536 };
	unsigned char *src = malloc((size_t)N * (SIZE + N));
	unsigned char *dst = calloc(N, SIZE + N);
	void *sreq[N], *rreq[N], *extra;
	struct pair p;
	int ret = pair_open(&p);

	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		goto out;
	for (int i = 0; i < N; i++) {
		fill(src + (size_t)i * (SIZE + N), SIZE + (size_t)i,
		     (unsigned int)i);
		sreq[i] = post_send(&p, src + (size_t)i * (SIZE + N),
				    SIZE + (size_t)i, i);
		CHECK(sreq[i], "isend %d of %d refused", i, N);
	}
	extra = post_send(&p, src, 1, 99);
	CHECK(!extra, "isend beyond %d outstanding accepted", N);
	for (int i = 0; i < N; i++) {
		rreq[i] = post_recv(&p, dst + (size_t)i * (SIZE + N),
				    SIZE + N, i);
		CHECK(rreq[i], "irecv %d of %d refused", i, N);
	}
	extra = post_recv(&p, dst, 1, 99);
	CHECK(!extra, "irecv beyond %d outstanding accepted", N);
	for (int i = 0; i < N; i++) {
		int size = -1;

		if (!rreq[i] || !sreq[i])
			continue;
		ret = wait_req(rreq[i], &size, DEADLINE_S);
		CHECK(ret == 0 && size == SIZE + i, "recv %d: %d, %d bytes", i,
		      ret, size);
		ret = wait_req(sreq[i], &size, DEADLINE_S);
		CHECK(ret == 0, "send %d: %d", i, ret);
		CHECK(!memcmp(dst + (size_t)i * (SIZE + N),
			      src + (size_t)i * (SIZE + N), SIZE + (size_t)i),
		      "message %d differs", i);
	}
	/* Slots are free again once tested. */
	check_transfer(&p, 4096, 4096, false, 5);
	pair_close(&p);
	printf("ok 32 outstanding requests\n");
out:
	free(src);
	free(dst);
}

/* A receive that must fail: too small or wrong tag.  stored: the send
 * completes before the receive is posted (a long path's early chunks). */
static void test_mismatch(size_t sent, size_t posted, int stag, int rtag,
			  bool stored, const char *label)
{
	unsigned char *src = calloc(1, sent), *dst = calloc(1, posted);
	void *sreq, *rreq, *later = NULL, *mh = NULL;
	struct pair p;
	double t0;
	int ret = pair_open(&p), size;

	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		goto out;
	if (stored) {
		sreq = post_send(&p, src, sent, stag);
		ret = wait_req(sreq, &size, DEADLINE_S);
		CHECK(ret == 0, "%s: the send was not stored: %d", label, ret);
		rreq = post_recv(&p, dst, posted, rtag);
	} else {
		rreq = post_recv(&p, dst, posted, rtag);
		sreq = post_send(&p, src, sent, stag);
	}
	t0 = now_s();
	ret = wait_req(rreq, &size, 10);
	CHECK(ret < 0 && ret != -ETIMEDOUT, "%s: recv returned %d", label,
	      ret);
	/* The sender learns too: its peer shut the streams down. */
	ret = stored ? 0 : wait_req(sreq, &size, 10);
	CHECK(ret == 0 || (ret < 0 && ret != -ETIMEDOUT),
	      "%s: send neither completed nor failed", label);
	/* irecv fails only on misuse: the failure comes from test(). */
	ret = mod->irecv(p.recv_comm, 1, (void **)&dst, &posted, &rtag, &mh,
			 &later);
	CHECK(ret == 0 && later, "%s: irecv on a failed comm returned %d",
	      label, ret);
	ret = later ? wait_req(later, &size, 1) : 0;
	CHECK(ret < 0 && ret != -ETIMEDOUT,
	      "%s: test of a receive on a failed comm returned %d", label,
	      ret);
	pair_close(&p);
	printf("ok %s (%.2f s)\n", label, now_s() - t0);
out:
	free(src);
	free(dst);
}

struct stored_seen {
	uint64_t window, stored;
	bool has_window, has_stored;
};

static void stored_counter(void *arg, const struct mesh_counter *c)
{
	struct stored_seen *seen = arg;

	if (!strcmp(c->name, "window_bytes")) {
		seen->window = c->value;
		seen->has_window = true;
	} else if (!strcmp(c->name, "stored_bytes")) {
		seen->stored = c->value;
		seen->has_stored = true;
	}
}

/*
 * Early chunks (window set, as a long path's product would): with socket
 * buffers far too small to hide them, N sends of about 1 MiB complete
 * before any receive is posted, the receiver shows them as stored_bytes
 * within its rings, and receives posted one by one later get every byte.
 * Then the sender sends N more and closes at once: the receives posted
 * after that close get them all too, and one more fails, not hangs.
 */
static void test_stored(void)
{
	enum { N = 16, SIZE = (1 << 20) + 4093 };
	unsigned char *src = malloc((size_t)N * SIZE);
	unsigned char *dst = malloc((size_t)N * SIZE);
	void *sreq[N], *rreq;
	struct stored_seen seen = { 0 };
	struct pair p;
	int ret, size, before = failures;

	/* each stream's ring takes half the burst: streams carry unevenly */
	param_set("window", "32M");
	param_set("sndbuf", "64K");
	param_set("rcvbuf", "64K");
	ret = pair_open(&p);
	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		goto out;
	for (int round = 0; round < 2 && failures == before; round++) {
		for (int i = 0; i < N; i++) {
			fill(src + (size_t)i * SIZE, SIZE - (size_t)i,
			     (unsigned int)(round * N + i));
			sreq[i] = post_send(&p, src + (size_t)i * SIZE,
					    SIZE - (size_t)i, i);
			CHECK(sreq[i], "isend %d refused", i);
		}
		for (int i = 0; i < N && sreq[i]; i++) {
			ret = wait_req(sreq[i], &size, DEADLINE_S);
			CHECK(ret == 0, "round %d: send %d of %d did not complete with no receive posted: %d",
			      round, i, N, ret);
		}
		if (!round) {
			/* the last chunks may still be in flight */
			for (int tries = 0; tries < 200; tries++) {
				mod->comm_counters(p.recv_comm, stored_counter,
						   &seen);
				if (seen.stored >= (N - 2ULL) * SIZE)
					break;
				usleep(10000);
			}
			CHECK(seen.has_window && seen.has_stored,
			      "the receiver shows no window_bytes or stored_bytes");
			CHECK(seen.stored >= (N - 2ULL) * SIZE &&
			      seen.stored <= seen.window,
			      "stored_bytes %llu, window_bytes %llu, sent %llu",
			      (unsigned long long)seen.stored,
			      (unsigned long long)seen.window,
			      (unsigned long long)N * SIZE);
		} else {
			mod->close_send(p.send_comm);
			p.send_comm = NULL;
		}
		memset(dst, 0xa5, (size_t)N * SIZE);
		for (int i = 0; i < N; i++) {
			rreq = post_recv(&p, dst + (size_t)i * SIZE, SIZE, i);
			ret = rreq ? wait_req(rreq, &size, DEADLINE_S) : -1;
			CHECK(ret == 0 && size == SIZE - i,
			      "round %d: stored receive %d: %d, %d bytes",
			      round, i, ret, size);
			CHECK(!memcmp(dst + (size_t)i * SIZE,
				      src + (size_t)i * SIZE, SIZE - (size_t)i),
			      "round %d: stored message %d differs", round, i);
			usleep(2000);
		}
	}
	if (failures == before) {
		mod->comm_counters(p.recv_comm, stored_counter, &seen);
		CHECK(seen.stored == 0,
		      "%llu bytes still stored after delivery",
		      (unsigned long long)seen.stored);
		rreq = post_recv(&p, dst, SIZE, 0);
		ret = rreq ? wait_req(rreq, &size, 10) : -1;
		CHECK(ret < 0 && ret != -ETIMEDOUT,
		      "a receive after the sender closed returned %d", ret);
	}
	pair_close(&p);
	printf("%s early chunks stored and delivered, also after the sender closed\n",
	       failures == before ? "ok" : "not ok");
out:
	params_base();
	free(src);
	free(dst);
}

/*
 * The module's own clocks in the close tests below: a dead link and
 * fini's wait for closing streams take this long, so that ending well
 * within CLOSE_LIMIT_S shows the close ended it, not one of them, on a
 * host however slow.
 */
#define CLOSE_MODULE_TIMEOUT_MS "60000"
#define CLOSE_LIMIT_S 20

/* Every test's parameters: loopback, the rest the module's defaults. */
static void params_base(void)
{
	params_reset();
	param_set("ifname", "=lo");
}

/* One side closes with a 64 MiB message half way; the other fails from
 * that close, not from a dead-link timeout (which says -ETIMEDOUT).  The
 * failure is a warning, except where the comm is another module's leg
 * (module.h 1.10): there that module decides, the leg says INFO. */
static void test_peer_closed(bool sender_closes, bool leg)
{
	const size_t size = 64 << 20;
	unsigned char *src = calloc(1, size), *dst = calloc(1, size);
	struct pair p;
	void *req;
	double t0;
	int ret, n, warned;

	param_set("timeout_ms", CLOSE_MODULE_TIMEOUT_MS);
	ctrl_leg = leg;
	ret = pair_open(&p);
	ctrl_leg = false;
	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		goto out;
	req = post_send(&p, src, size, 1);
	usleep(100000);		/* socket buffers fill, the rest waits */
	t0 = now_s();
	if (sender_closes) {
		mod->close_send(p.send_comm);	/* request in flight */
		p.send_comm = NULL;
		req = post_recv(&p, dst, size, 1);
	} else {
		mod->close_recv(p.recv_comm);
		p.recv_comm = NULL;
	}
	warned = warnings;
	ret = req ? wait_req(req, &n, CLOSE_LIMIT_S) : -EINVAL;
	warned = warnings - warned;
	CHECK(ret < 0 && ret != -ETIMEDOUT,
	      "%s closed mid-transfer: other side's test returned %d after "
	      "%.1f s", sender_closes ? "sender" : "receiver", ret,
	      now_s() - t0);
	CHECK(leg ? !warned : warned == 1, "%s closed mid-transfer: %d "
	      "warnings from a%s comm", sender_closes ? "sender" : "receiver",
	      warned, leg ? " leg's" : "n NCCL");
	pair_close(&p);
	printf("ok %s closed mid-transfer%s (%.2f s)\n",
	       sender_closes ? "sender" : "receiver",
	       leg ? ", a leg" : "", now_s() - t0);
out:
	params_base();
	free(src);
	free(dst);
}

/* Both sides close while requests are still in flight in both directions:
 * at once, without fini waiting out its timeout for the streams. */
static void test_close_in_flight(void)
{
	const size_t size = 64 << 20;
	unsigned char *src = calloc(1, size), *dst = calloc(1, size);
	struct pair p;
	double t0;
	int ret;

	param_set("timeout_ms", CLOSE_MODULE_TIMEOUT_MS);
	ret = pair_open(&p);
	CHECK(ret == 0, "connect: %d", ret);
	if (!ret) {
		for (int i = 0; i < 4; i++) {
			post_send(&p, src, size, i);
			post_recv(&p, dst, size, i);
		}
		t0 = now_s();
		pair_close(&p);
		CHECK(now_s() - t0 < CLOSE_LIMIT_S, "close took %.1f s, as "
		      "if it waited for the streams", now_s() - t0);
		printf("ok close with requests in flight (%.2f s)\n",
		       now_s() - t0);
	}
	params_base();
	free(src);
	free(dst);
}

/* fini with both comms still open (NCCL closes first, but a crashing job
 * may not): closing them afterwards is safe, and frees what fini left. */
static void test_close_after_fini(void)
{
	struct pair p;
	int ret = pair_open(&p);

	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		return;
	check_transfer(&p, 4096, 4096, false, 1);
	check_transfer(&p, 4 << 20, 4 << 20, true, 2);
	mod->fini(p.mctx);
	p.mctx = NULL;
	pair_close_comms(&p);
	printf("ok close after fini\n");
}

/* The acceptor refuses a hello it does not understand and says why. */
static void test_refuse(void)
{
	struct test_ctrl acceptor;
	uint32_t hello[4] = { htonl(0x54584443u), htonl(99u << 16 | 8), 0, 0 };
	unsigned char reply[256];
	void *mctx, *comm = NULL;
	int sv[2], ret, n;

	CHECK(mod->init(&host, &mctx) == 0, "init");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		perror("socketpair");
		exit(1);
	}
	ctrl_init(&acceptor, sv[1], false, -1, 0);
	n = sizeof(hello);
	CHECK(write(sv[0], &n, 4) == 4 && write(sv[0], hello, 16) == 16,
	      "write hello");
	log_level = 0;
	do {
		ret = mod->accept(mctx, 0, &acceptor.base, &comm);
	} while (!ret && !comm);
	log_level = MESH_LOG_WARN;
	CHECK(ret == -EPROTONOSUPPORT, "accept of version 99 returned %d",
	      ret);
	CHECK(recv(sv[0], &n, 4, MSG_WAITALL) == 4 && n <= (int)sizeof(reply) &&
	      recv(sv[0], reply, (size_t)n, MSG_WAITALL) == n,
	      "no reply to a bad hello");
	CHECK(reply[6] || reply[7], "reply to a bad hello accepts it");
	mod->abandon(mctx, &acceptor.base);
	ctrl_fini(&acceptor);
	close(sv[0]);
	mod->fini(mctx);
	printf("ok refuses a bad hello\n");
}

static void test_devices(void)
{
	struct mesh_dev_props props;
	void *mctx;
	int ndev = 0, ret;

	params_reset();
	ret = mod->init(&host, &mctx);
	CHECK(ret == 0 || ret == -ENODEV, "init with auto ifname: %d", ret);
	if (!ret)
		mod->fini(mctx);
	param_set("ifname", "=lo");
	ret = mod->init(&host, &mctx);
	CHECK(ret == 0, "init on lo: %d", ret);
	if (ret)
		return;
	CHECK(mod->devices(mctx, &ndev) == 0 && ndev == 1, "%d devices",
	      ndev);
	CHECK(mod->get_properties(mctx, 0, &props) == 0, "properties");
	CHECK(!strcmp(props.name, "lo"), "device name %s", props.name);
	CHECK(props.ptr_support == MESH_PTR_HOST && props.max_recvs == 1 &&
	      props.speed_mbps > 0 && props.naddrs > 0 &&
	      props.max_comms == 65536, "properties of lo");
	CHECK(mod->get_properties(mctx, 1, &props) == -EINVAL, "dev 1");
	mod->fini(mctx);
	param_set("ifname", "=no-such-if0");
	log_level = 0;
	ret = mod->init(&host, &mctx);
	log_level = MESH_LOG_WARN;
	CHECK(ret == -ENODEV, "init without interface: %d", ret);
	param_set("ifname", "=lo");
	printf("ok devices\n");
}

/* ---- benchmark ---- */

struct bench_result {
	double seconds;
	double cpu_s;		/* all threads of the process */
	long csw;		/* context switches, voluntary and not */
};

static double tv_s(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Sends count messages of msg bytes with window in flight; 0 on success. */
static int bench_run(struct pair *p, size_t msg, long count, int window,
		     struct bench_result *res)
{
	unsigned char *src = malloc(msg ? msg : 1), *dst = malloc(msg ? msg : 1);
	void *sreq[32], *rreq[32];
	long sent = 0, rcvd = 0, sdone = 0, rdone = 0;
	struct rusage ru0, ru1;
	int n, done, ret = 0;
	double t0;

	memset(src, 1, msg ? msg : 1);
	memset(dst, 0, msg ? msg : 1);
	getrusage(RUSAGE_SELF, &ru0);
	t0 = now_s();
	while (!ret && (rdone < count || sdone < count)) {
		while (sent < count && sent - sdone < window) {
			sreq[sent % window] = post_send(p, src, msg, 0);
			if (!sreq[sent % window])
				break;
			sent++;
		}
		while (rcvd < count && rcvd - rdone < window) {
			rreq[rcvd % window] = post_recv(p, dst, msg, 0);
			if (!rreq[rcvd % window])
				break;
			rcvd++;
		}
		if (sdone < sent) {
			ret = req_test(sreq[sdone % window], &done, &n);
			if (!ret && done)
				sdone++;
		}
		if (!ret && rdone < rcvd) {
			ret = req_test(rreq[rdone % window], &done, &n);
			if (!ret && done)
				rdone++;
		}
	}
	res->seconds = now_s() - t0;
	getrusage(RUSAGE_SELF, &ru1);
	res->cpu_s = tv_s(ru1.ru_utime) + tv_s(ru1.ru_stime) -
		     tv_s(ru0.ru_utime) - tv_s(ru0.ru_stime);
	res->csw = ru1.ru_nvcsw + ru1.ru_nivcsw - ru0.ru_nvcsw - ru0.ru_nivcsw;
	if (ret)
		fprintf(stderr, "bench: request failed: %d\n", ret);
	free(src);
	free(dst);
	return ret ? 1 : 0;
}

/*
 * mib MiB in messages of each size with window in flight, sender to
 * receiver in one process: wall-clock rate, and the CPU time and context
 * switches per message, which stay meaningful on a busy host.
 */
static int bench(const char *sizes, int window, long mib)
{
	char *list = strdup(sizes), *save = NULL;
	struct pair p;
	int ret = pair_open(&p);

	if (ret) {
		fprintf(stderr, "connect: %d\n", ret);
		free(list);
		return 1;
	}
	for (char *tok = strtok_r(list, ",", &save); tok && !ret;
	     tok = strtok_r(NULL, ",", &save)) {
		char *end;
		size_t msg = strtoull(tok, &end, 10);
		struct bench_result r;
		long count;

		msg <<= *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
		count = msg ? (long)(((size_t)mib << 20) / msg) : 10000;
		if (count < 2 * window)
			count = 2 * window;
		ret = bench_run(&p, msg, count, window, &r);
		printf("bench: %9zu B x %6ld, window %2d: %7.3f GB/s, %6.1f us/msg, cpu %6.2f s/GB, %5.2f csw/msg\n",
		       msg, count, window,
		       (double)msg * (double)count / r.seconds / 1e9,
		       r.seconds * 1e6 / (double)count,
		       msg ? r.cpu_s / ((double)msg * (double)count / 1e9) : 0,
		       (double)r.csw / (double)count);
	}
	pair_close(&p);
	free(list);
	return ret;
}

int main(int argc, char **argv)
{
	const char *path = getenv("MESH_TEST_MODULE");
	const char *sizes = "128K,512K,2M,64M";
	bool do_bench = false;
	int window = 8;
	long mib = 1024;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--bench"))
			do_bench = true;
		else if (!strcmp(argv[i], "--sizes") && i + 1 < argc)
			sizes = argv[++i];
		else if (!strcmp(argv[i], "--window") && i + 1 < argc)
			window = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			mib = atol(argv[++i]);
		else if (!strcmp(argv[i], "--gib") && i + 1 < argc)
			mib = atol(argv[++i]) * 1024;
		else
			path = argv[i];
	}
	if (!path || window < 1 || window > 32 || mib < 1) {
		fprintf(stderr, "usage: %s [--bench [--sizes LIST] [--window N] [--mib N | --gib N]] MODULE.so\n",
			argv[0]);
		return 2;
	}
	harness_load(path);
	params_base();
	if (do_bench)
		return bench(sizes, window, mib);

	test_devices();
	test_refuse();
	test_sizes("sizes, 8 streams on two data threads per core, 512K chunks");
	param_set("streams", "5");
	param_set("threads", "2");
	param_set("chunk_size", "4K");
	test_sizes("sizes, 5 streams on 2 data threads, 4K chunks");
	param_set("streams", "1");
	param_set("threads", "1");
	param_set("chunk_size", "64M");
	test_sizes("sizes, 1 stream, 64M chunks");
	params_base();
	test_outstanding();
	test_mismatch(2 << 20, 1 << 20, 3, 3, false,
		      "send larger than posted fails");
	test_mismatch(4096, 4096, 3, 4, false, "tag mismatch fails");
	test_stored();
	param_set("window", "16M");
	test_sizes("sizes, early chunks stored");
	test_mismatch(2 << 20, 1 << 20, 3, 3, true,
		      "stored send larger than posted fails");
	test_mismatch(4096, 4096, 3, 4, true, "stored tag mismatch fails");
	params_base();
	test_peer_closed(true, false);
	test_peer_closed(false, false);
	test_peer_closed(true, true);
	test_peer_closed(false, true);
	test_close_in_flight();
	test_close_after_fini();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("all transport checks passed\n");
	return 0;
}
