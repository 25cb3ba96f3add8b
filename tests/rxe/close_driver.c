/* SPDX-License-Identifier: MIT */
/*
 * Close right after completion, both directions, through the NCCL net API
 * (ncclNetPlugin_v10) of any plugin.  Two processes, a and b, each listen,
 * trade handles through files in DIR and then, ITERS times: connect to the
 * peer and accept from it (one listen comm serves every accept), send
 * MSGS messages and receive MSGS, and close each comm the moment its own
 * last request completes: the send comm while the peer may still be
 * receiving, the recv comm with EXTRA more receives still posted.  Every
 * message is checked byte by byte, with its size.
 *
 *   close_driver PLUGIN a|b DIR [-i ITERS] [-m MSGS] [-e EXTRA] [-t SECS]
 *                [-l LAG] [-k [-s STOP]]
 *
 * -l LAG (lagging receiver): each side posts its receives up front, waits
 * until the peer's send comm is closed, then posts the EXTRA receives and
 * tests nothing for LAG ms: the peer's QPs are gone by then while those
 * receives' announcements still travel to it, and every receive must
 * still complete (MSGS is cut to fit one window); then the first extra
 * receive, which nothing was sent into, must fail its test() within 5 s.
 *
 * -k (kill test): one endless iteration of 1 MiB messages; prints
 * "transferring" once data flows and waits to be killed, or to fail when
 * the peer is.  With -s STOP it ends instead once the file STOP exists:
 * each side sends no more than it has handed out by then, tells the peer
 * how many (DIR/<side>.count), receives as many as the peer tells and
 * closes in order, all verified (the outage tests: a transfer that lasts
 * as long as the test needs, whatever the host's speed).  A send comm
 * closes only once the peer has read the count (DIR/<peer>.read): a
 * receive beyond it that the peer tested after the close would fail, as
 * the plugin must fail a receive nothing will be sent into.  Exit status: 0
 * all verified, 1 a call failed or data was wrong (the line says which),
 * 2 usage or setup, 3 no progress for SECS.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <nccl-mesh/nccl_net.h>

#define WINDOW 8
#define SLOT (1U << 20)

static const ncclNet_v10_t *net;
static const char *me;
static int timeout_s = 60;
static time_t last_progress;
static const char *dir;
static int lag_ms = -1;
static const char *stop_path;	/* -s */
static const char *peer;

static void logger(ncclDebugLogLevel level, unsigned long flags,
		   const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	(void)flags;
	(void)file;
	(void)line;
	/* filtered here, as NCCL filters by NCCL_DEBUG: the plugin hands a
	 * logger every line; TRACE where NCCL_MESH_LOG=trace asks */
	if (level == NCCL_LOG_TRACE) {
		const char *v = getenv("NCCL_MESH_LOG");

		if (!v || strcasecmp(v, "trace"))
			return;
	} else if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO) {
		return;
	}
	fprintf(stderr, "%s NCCL %s ", me,
		level == NCCL_LOG_WARN ? "WARN" :
		level == NCCL_LOG_INFO ? "INFO" : "TRACE");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void die(int code, const char *fmt, ...)
{
	va_list ap;

	printf("%s: ", me);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	exit(code);
}

#define CALL(what, ...)                                                 \
	do {                                                            \
		ncclResult_t r_ = net->__VA_ARGS__;                     \
		if (r_ != ncclSuccess)                                  \
			die(1, "FAIL: %s returned %d (iteration %d)",   \
			    what, r_, iter);                            \
	} while (0)

static void progress(void)
{
	last_progress = time(NULL);
}

static void watchdog(int iter)
{
	if (time(NULL) - last_progress > timeout_s)
		die(3, "STUCK: no progress for %d s (iteration %d)", timeout_s,
		    iter);
}

static void handle_trade(void *mine, void *theirs, const char *dir,
			 const char *peer)
{
	char path[512], tmp[520];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.handle", dir, me);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "wb");
	if (!f || fwrite(mine, NCCL_NET_HANDLE_MAXSIZE, 1, f) != 1 ||
	    fclose(f) || rename(tmp, path))
		die(2, "cannot write %s", path);
	snprintf(path, sizeof(path), "%s/%s.handle", dir, peer);
	for (;;) {
		f = fopen(path, "rb");
		if (f) {
			size_t n = fread(theirs, NCCL_NET_HANDLE_MAXSIZE, 1, f);

			fclose(f);
			if (n == 1)
				return;
		}
		watchdog(-1);
		usleep(20000);
	}
}

static unsigned char pattern(int from, int iter, int msg, size_t i)
{
	return (unsigned char)(from * 101 + iter * 13 + msg * 7 + (int)(i % 251));
}

static size_t msg_size(int iter, int msg, int kill)
{
	static const size_t sizes[] = { 8, 65536, 1U << 20, 0, 4096, 200 };

	if (kill)
		return SLOT;
	return sizes[(size_t)(iter + msg) % (sizeof(sizes) / sizeof(sizes[0]))];
}

struct side {
	void *comm, *mh;
	void *req[WINDOW];
	int posted, done;	/* requests handed out, completed in order */
	bool closed;
	double lag_until;	/* -l: no test before (0: peer not closed) */
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* -l: the flag a side's send comm leaves once closed. */
static void flag_path(char *buf, size_t cap, const char *who, int iter)
{
	snprintf(buf, cap, "%s/%s.send-closed.%d", dir, who, iter);
}

/* -l and -s: an empty file one side leaves for the other. */
static void flag_set(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f || fclose(f))
		die(2, "cannot create %s", path);
}

/* -s: the flag of a side that has read its peer's count. */
static void read_path(char *buf, size_t cap, const char *who)
{
	snprintf(buf, cap, "%s/%s.read", dir, who);
}

static void send_step(struct side *s, unsigned char *buf, int from, int iter,
		      int msgs, int kill)
{
	char path[600];

	if (s->closed)
		return;
	if (s->posted < msgs && s->posted - s->done < WINDOW) {
		int j = s->posted;
		size_t size = msg_size(iter, j, kill);
		unsigned char *p = buf + (size_t)(j % WINDOW) * SLOT;
		void **r = &s->req[j % WINDOW];

		for (size_t i = 0; i < size; i++)
			p[i] = pattern(from, iter, j, i);
		CALL("isend", isend(s->comm, p, size, j & 0xffff, s->mh, NULL,
				    r));
		if (*r)
			s->posted++;
	}
	while (s->done < s->posted) {
		int done = 0, got = -1;

		CALL("test (send)", test(s->req[s->done % WINDOW], &done, &got));
		if (!done)
			break;
		s->done++;
		progress();
	}
	if (s->done != msgs)
		return;
	if (stop_path) {
		read_path(path, sizeof(path), peer);
		if (access(path, F_OK))
			return;
	}
	CALL("deregMr (send)", deregMr(s->comm, s->mh));
	CALL("closeSend", closeSend(s->comm));
	s->closed = true;
	if (lag_ms >= 0) {
		flag_path(path, sizeof(path), me, iter);
		flag_set(path);
	}
}

/* -l: whether the receives may be tested yet. */
static bool lagging(struct side *s, int msgs, int iter)
{
	char path[600];

	if (lag_ms < 0 || s->posted < msgs)
		return false;
	if (!s->lag_until) {
		flag_path(path, sizeof(path), peer, iter);
		if (access(path, F_OK))
			return true;
		s->lag_until = now_ms() + lag_ms;
	}
	return now_ms() < s->lag_until;
}

/*
 * -l: the peer closed its send comm in order, so the first extra receive,
 * which nothing was sent into, must fail its test() soon (the peer's close
 * notice says nothing more comes), not hang and not wait for a timeout.
 */
static void expect_closed(struct side *s, int msgs, int iter)
{
	double t0 = now_ms();
	int done = 0, got;
	ncclResult_t r;

	do {
		r = net->test(s->req[msgs % WINDOW], &done, &got);
		if (done)
			die(1, "FAIL: a receive nothing was sent into completed (iteration %d)",
			    iter);
		if (now_ms() - t0 > 5000)
			die(1, "FAIL: a receive nothing was sent into still pending 5 s after the peer closed (iteration %d)",
			    iter);
	} while (r == ncclSuccess);
	printf("%s: iteration %d: the unsent receive failed %.0f ms after the lag, as the peer had closed\n",
	       me, iter, now_ms() - t0);
	fflush(stdout);
}

static void recv_step(struct side *s, unsigned char *buf, int from, int iter,
		      int msgs, int extra, int kill)
{
	if (s->closed)
		return;
	if (s->posted < msgs + extra && s->posted - s->done < WINDOW &&
	    (lag_ms < 0 || s->posted < msgs || s->lag_until)) {
		int j = s->posted;
		void *data = buf + (size_t)(j % WINDOW) * SLOT;
		/* odd iterations post whole slots, even ones the exact size
		 * (small exact receives take the eager path where offered) */
		size_t size = iter % 2 ? SLOT : msg_size(iter, j, kill);
		int tag = j & 0xffff;

		CALL("irecv", irecv(s->comm, 1, &data, &size, &tag, &s->mh,
				    NULL, &s->req[j % WINDOW]));
		if (s->req[j % WINDOW])
			s->posted++;
	}
	if (lagging(s, msgs, iter)) {
		progress();
		return;
	}
	while (s->done < s->posted && s->done < msgs) {
		int j = s->done, done = 0, got = -1;
		size_t want = msg_size(iter, j, kill);
		unsigned char *p = buf + (size_t)(j % WINDOW) * SLOT;

		CALL("test (recv)", test(s->req[j % WINDOW], &done, &got));
		if (!done)
			break;
		if (got != (int)want)
			die(1, "FAIL: message %d of iteration %d: %d bytes, sent %zu",
			    j, iter, got, want);
		for (size_t i = 0; i < want; i++)
			if (p[i] != pattern(from, iter, j, i))
				die(1, "FAIL: message %d of iteration %d: byte %zu is wrong",
				    j, iter, i);
		s->done++;
		progress();
		if (kill && j == 2) {
			printf("%s: transferring\n", me);
			fflush(stdout);
		}
	}
	if (s->done == msgs && lag_ms >= 0 && extra > 0)
		expect_closed(s, msgs, iter);
	if (s->done == msgs) {
		/* EXTRA receives are still posted: close must cope */
		CALL("deregMr (recv)", deregMr(s->comm, s->mh));
		CALL("closeRecv", closeRecv(s->comm));
		s->closed = true;
	}
}

/*
 * -s: once STOP exists, this side sends only what it has handed out and
 * says how many; once the peer has said so, this side receives that many
 * and says it read the count.  *smsgs and *rmsgs stay endless (msgs of
 * -k) until then.
 */
static void stop_poll(const struct side *s, const struct side *r,
		      int *smsgs, int *rmsgs, int endless)
{
	char path[600], tmp[610];
	FILE *f;

	if (*smsgs == endless && !access(stop_path, F_OK)) {
		*smsgs = s->posted;
		snprintf(path, sizeof(path), "%s/%s.count", dir, me);
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		f = fopen(tmp, "w");
		if (!f || fprintf(f, "%d\n", *smsgs) < 0 || fclose(f) ||
		    rename(tmp, path))
			die(2, "cannot write %s", path);
	}
	if (*rmsgs == endless) {
		int n;

		snprintf(path, sizeof(path), "%s/%s.count", dir, peer);
		f = fopen(path, "r");
		if (!f)
			return;
		if (fscanf(f, "%d", &n) != 1 || n < r->done || n >= endless)
			die(2, "bad count in %s", path);
		fclose(f);
		*rmsgs = n;
		read_path(path, sizeof(path), me);
		flag_set(path);
	}
}

int main(int argc, char **argv)
{
	char hmine[NCCL_NET_HANDLE_MAXSIZE], htheirs[NCCL_NET_HANDLE_MAXSIZE];
	int iters = 20, msgs = 12, extra = 2, kill = 0, iter = -1, opt, ndev;
	int sent = 0, received = 0;
	ncclNetCommConfig_t cfg = { -1 };
	unsigned char *sbuf, *rbuf;
	void *lib, *lc;

	if (argc < 4 || (strcmp(argv[2], "a") && strcmp(argv[2], "b"))) {
		fprintf(stderr, "usage: %s PLUGIN a|b DIR [-i ITERS] [-m MSGS] [-e EXTRA] [-t SECS] [-l LAG] [-k [-s STOP]]\n",
			argv[0]);
		return 2;
	}
	me = argv[2];
	peer = me[0] == 'a' ? "b" : "a";
	dir = argv[3];
	optind = 4;
	while ((opt = getopt(argc, argv, "i:m:e:t:l:ks:")) != -1) {
		switch (opt) {
		case 'i': iters = atoi(optarg); break;
		case 'm': msgs = atoi(optarg); break;
		case 'e': extra = atoi(optarg); break;
		case 't': timeout_s = atoi(optarg); break;
		case 'l': lag_ms = atoi(optarg); break;
		case 'k': kill = 1; break;
		case 's': stop_path = optarg; break;
		default: return 2;
		}
	}
	if (kill) {
		iters = 1;
		msgs = 1 << 30;
		extra = 0;
	}
	if (lag_ms >= 0 && msgs > WINDOW - extra)
		msgs = WINDOW - extra;
	if (iters < 1 || msgs < 1 || extra < 0 || extra > WINDOW ||
	    (stop_path && !kill))
		die(2, "bad counts");
	progress();
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		die(2, "dlopen %s: %s", argv[1], dlerror());
	net = dlsym(lib, "ncclNetPlugin_v10");
	if (!net)
		die(2, "%s has no ncclNetPlugin_v10", argv[1]);
	sbuf = aligned_alloc(4096, (size_t)WINDOW * SLOT);
	rbuf = aligned_alloc(4096, (size_t)WINDOW * SLOT);
	if (!sbuf || !rbuf)
		die(2, "out of memory");
	CALL("init", init(logger, NULL));
	CALL("devices", devices(&ndev));
	if (ndev < 1)
		die(2, "no devices");
	memset(hmine, 0, sizeof(hmine));
	CALL("listen", listen(0, hmine, &lc));
	handle_trade(hmine, htheirs, dir, peer);
	for (iter = 0; iter < iters; iter++) {
		struct side s = { 0 }, r = { 0 };
		ncclNetDeviceHandle_t *dh = NULL;
		int from = peer[0] == 'a' ? 1 : 2, smsgs = msgs, rmsgs = msgs;

		while (!s.comm || !r.comm) {
			if (!s.comm)
				CALL("connect", connect(0, &cfg, htheirs, &s.comm, &dh));
			if (!r.comm)
				CALL("accept", accept(lc, &r.comm, &dh));
			watchdog(iter);
		}
		progress();
		CALL("regMr (send)", regMr(s.comm, sbuf, (size_t)WINDOW * SLOT,
					    NCCL_PTR_HOST, &s.mh));
		CALL("regMr (recv)", regMr(r.comm, rbuf, (size_t)WINDOW * SLOT,
					    NCCL_PTR_HOST, &r.mh));
		while (!s.closed || !r.closed) {
			if (stop_path)
				stop_poll(&s, &r, &smsgs, &rmsgs, msgs);
			send_step(&s, sbuf, me[0] == 'a' ? 1 : 2, iter, smsgs,
				  kill);
			recv_step(&r, rbuf, from, iter, rmsgs, extra, kill);
			watchdog(iter);
		}
		sent = s.done;
		received = r.done;
	}
	CALL("closeListen", closeListen(lc));
	if (stop_path)
		printf("%s: OK %d messages sent, %d received, every byte verified\n",
		       me, sent, received);
	else
		printf("%s: OK %d iterations, %d messages each way verified each\n",
		       me, iters, msgs);
	return 0;
}
