/* SPDX-License-Identifier: MIT */
/*
 * Transport harness: dlopens a module (argv[1] or MESH_TEST_MODULE), gives it
 * a host and a loopback control channel, and drives its data path the way
 * the core does.  `--bench` measures throughput instead of testing.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nccl-mesh/module.h>

#define MAX_STREAMS 64
#define MAX_OVERRIDES 8
#define DEADLINE_S 30.0

static const struct mesh_module *mod;
static int failures;
static int log_level = MESH_LOG_WARN;

#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                    \
			fputc('\n', stderr);                             \
			failures++;                                      \
		}                                                        \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- host ---- */

static struct {
	const char *name;
	const char *value;
} overrides[MAX_OVERRIDES];
static int noverrides;

static void param_set(const char *name, const char *value)
{
	for (int i = 0; i < noverrides; i++) {
		if (!strcmp(overrides[i].name, name)) {
			overrides[i].value = value;
			return;
		}
	}
	overrides[noverrides].name = name;
	overrides[noverrides++].value = value;
}

static void params_reset(void)
{
	noverrides = 0;
}

static void host_log(const struct mesh_host *host, enum mesh_log_level level,
		     const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	if ((int)level > log_level)
		return;
	fprintf(stderr, "%s %s %s:%d: ", level == MESH_LOG_WARN ? "WARN" :
		"INFO", host->module, file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const struct mesh_param *param_find(const char *name)
{
	for (const struct mesh_param *p = mod->params; p && p->name; p++)
		if (!strcmp(p->name, name))
			return p;
	fprintf(stderr, "module asked for unknown parameter %s\n", name);
	abort();
}

static const char *host_param_str(const struct mesh_host *host,
				  const char *name)
{
	const struct mesh_param *p = param_find(name);
	char env[96] = "NCCL_MESH_TCP_XDC_";
	size_t n = strlen(env);

	(void)host;
	for (int i = 0; i < noverrides; i++)
		if (!strcmp(overrides[i].name, name))
			return overrides[i].value;
	/* Like the core: NCCL_MESH_<MODULE>_<KEY> beats the default. */
	for (const char *c = name; *c && n < sizeof(env) - 1; c++)
		env[n++] = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
	env[n] = '\0';
	return getenv(env) ? getenv(env) : p->dflt;
}

static long long host_param_int(const struct mesh_host *host,
				const char *name)
{
	const char *text = host_param_str(host, name);
	char *end;
	long long v = strtoll(text, &end, 10);

	switch (*end) {
	case 'K': case 'k': v <<= 10; break;
	case 'M': case 'm': v <<= 20; break;
	case 'G': case 'g': v <<= 30; break;
	default: break;
	}
	return v;
}

static int host_param_list(const struct mesh_host *host, const char *name,
			   const char *const **items)
{
	(void)host;
	(void)name;
	*items = NULL;
	return 0;
}

static const struct mesh_host host = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_host),
	.module = "tcp-xdc",
	.log = host_log,
	.param_str = host_param_str,
	.param_int = host_param_int,
	.param_list = host_param_list,
};

/* ---- loopback control channel ---- */

struct test_ctrl {
	struct mesh_ctrl base;
	int msg_fd;		/* socketpair end, length-prefixed messages */
	bool dialer;
	int listen_fd;		/* shared by the pair */
	uint16_t port;
	int streams[MAX_STREAMS];
	struct mesh_addr local, remote;
};

static int ctrl_send(struct mesh_ctrl *c, const void *msg, size_t len)
{
	struct test_ctrl *tc = (struct test_ctrl *)c;
	uint32_t n = (uint32_t)len;
	struct iovec iov[2] = { { &n, sizeof(n) }, { (void *)msg, len } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };

	if (len > 4096)
		return -EMSGSIZE;
	if (sendmsg(tc->msg_fd, &mh, MSG_NOSIGNAL) != (ssize_t)(len + 4))
		return -errno;
	return 0;
}

static int ctrl_recv(struct mesh_ctrl *c, void *buf, size_t cap)
{
	struct test_ctrl *tc = (struct test_ctrl *)c;
	struct pollfd pfd = { .fd = tc->msg_fd, .events = POLLIN };
	char tmp[4096];
	uint32_t n;

	if (poll(&pfd, 1, 0) == 0)
		return -EAGAIN;
	if (recv(tc->msg_fd, &n, sizeof(n), MSG_WAITALL) != sizeof(n))
		return -ECONNRESET;
	if (n > sizeof(tmp) ||
	    recv(tc->msg_fd, tmp, n, MSG_WAITALL) != (ssize_t)n)
		return -EPROTO;
	if (n > cap)
		return -EMSGSIZE;
	memcpy(buf, tmp, n);
	return (int)n;
}

static int stream_dial(struct test_ctrl *tc, int index, int *fd_out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(tc->port) };
	uint32_t idx = (uint32_t)index;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, &idx, sizeof(idx), 0) != sizeof(idx)) {
		int err = -errno;

		close(fd);
		return err;
	}
	*fd_out = fd;
	return 0;
}

/* Accepts whatever has arrived and files it by the index the dialer sent. */
static int stream_take(struct test_ctrl *tc, int index, int *fd_out)
{
	for (;;) {
		struct pollfd pfd = { .fd = tc->listen_fd, .events = POLLIN };
		uint32_t idx;
		int fd;

		if (tc->streams[index] >= 0) {
			*fd_out = tc->streams[index];
			tc->streams[index] = -1;
			return 0;
		}
		if (poll(&pfd, 1, 0) == 0)
			return -EAGAIN;
		fd = accept4(tc->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return -errno;
		if (recv(fd, &idx, sizeof(idx), MSG_WAITALL) != sizeof(idx) ||
		    idx >= MAX_STREAMS || tc->streams[idx] >= 0) {
			close(fd);
			return -EPROTO;
		}
		tc->streams[idx] = fd;
	}
}

static int ctrl_stream(struct mesh_ctrl *c, int index, int *fd_out)
{
	struct test_ctrl *tc = (struct test_ctrl *)c;

	if (index < 0 || index >= MAX_STREAMS)
		return -EINVAL;
	return tc->dialer ? stream_dial(tc, index, fd_out) :
			    stream_take(tc, index, fd_out);
}

static void ctrl_init(struct test_ctrl *tc, int msg_fd, bool dialer,
		      int listen_fd, uint16_t port)
{
	memset(tc, 0, sizeof(*tc));
	tc->base.send = ctrl_send;
	tc->base.recv = ctrl_recv;
	tc->base.stream = ctrl_stream;
	tc->base.local = &tc->local;
	tc->base.remote = &tc->remote;
	tc->base.peer = dialer ? "127.0.0.1 (acceptor)" : "127.0.0.1 (dialer)";
	tc->msg_fd = msg_fd;
	tc->dialer = dialer;
	tc->listen_fd = listen_fd;
	tc->port = port;
	for (int i = 0; i < MAX_STREAMS; i++)
		tc->streams[i] = -1;
}

static void ctrl_fini(struct test_ctrl *tc)
{
	for (int i = 0; i < MAX_STREAMS; i++)
		if (tc->streams[i] >= 0)
			close(tc->streams[i]);
	close(tc->msg_fd);
}

/* ---- connection pair ---- */

struct pair {
	void *mctx;
	void *send_comm;
	void *recv_comm;
};

struct dial_arg {
	void *mctx;
	struct test_ctrl *ctrl;
	void *comm;
	int ret;
};

static void *dial_thread(void *arg)
{
	struct dial_arg *d = arg;
	double end = now_s() + DEADLINE_S;

	do {
		d->ret = mod->connect(d->mctx, 0, &d->ctrl->base, &d->comm);
		if (d->ret || d->comm)
			return NULL;
		usleep(100);
	} while (now_s() < end);
	d->ret = -ETIMEDOUT;
	return NULL;
}

static int listener_open(uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fd, MAX_STREAMS) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len)) {
		perror("listener");
		exit(1);
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Connects and accepts in two threads, as two ranks would. */
static int pair_open(struct pair *p)
{
	struct test_ctrl dialer, acceptor;
	struct dial_arg d = { 0 };
	double end = now_s() + DEADLINE_S;
	pthread_t tid;
	uint16_t port;
	int sv[2], lfd, ret;

	memset(p, 0, sizeof(*p));
	ret = mod->init(&host, &p->mctx);
	if (ret)
		return ret;
	lfd = listener_open(&port);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
		perror("socketpair");
		exit(1);
	}
	ctrl_init(&dialer, sv[0], true, lfd, port);
	ctrl_init(&acceptor, sv[1], false, lfd, port);
	d.mctx = p->mctx;
	d.ctrl = &dialer;
	pthread_create(&tid, NULL, dial_thread, &d);
	do {
		ret = mod->accept(p->mctx, 0, &acceptor.base, &p->recv_comm);
		if (ret || p->recv_comm)
			break;
		usleep(100);
	} while (now_s() < end);
	if (!ret && !p->recv_comm)
		ret = -ETIMEDOUT;
	pthread_join(tid, NULL);
	if (ret)
		mod->abandon(p->mctx, &acceptor.base);
	if (d.ret)
		mod->abandon(p->mctx, &dialer.base);
	p->send_comm = d.comm;
	ctrl_fini(&dialer);
	ctrl_fini(&acceptor);
	close(lfd);
	if (ret || d.ret) {
		if (p->send_comm)
			mod->close_send(p->send_comm);
		if (p->recv_comm)
			mod->close_recv(p->recv_comm);
		mod->fini(p->mctx);
		return ret ? ret : d.ret;
	}
	return 0;
}

static void pair_close(struct pair *p)
{
	if (p->send_comm)
		mod->close_send(p->send_comm);
	if (p->recv_comm)
		mod->close_recv(p->recv_comm);
	mod->fini(p->mctx);
}

/* ---- request helpers ---- */

static int req_test(void *req, int *done, int *size)
{
	return ((struct mesh_request *)req)->test(req, done, size);
}

static void *post_send(struct pair *p, void *buf, size_t size, int tag)
{
	void *mh = NULL, *req = NULL;
	int ret;

	mod->reg_mr(p->send_comm, buf, size, MESH_PTR_HOST, &mh);
	ret = mod->isend(p->send_comm, buf, size, tag, mh, &req);
	CHECK(ret == 0, "isend of %zu bytes: %d", size, ret);
	return req;
}

static void *post_recv(struct pair *p, void *buf, size_t size, int tag)
{
	void *mh = NULL, *req = NULL;
	int ret;

	mod->reg_mr(p->recv_comm, buf, size, MESH_PTR_HOST, &mh);
	ret = mod->irecv(p->recv_comm, 1, &buf, &size, &tag, &mh, &req);
	CHECK(ret == 0, "irecv of %zu bytes: %d", size, ret);
	return req;
}

/* Polls until done; returns the test() error, or -ETIMEDOUT. */
static int wait_req(void *req, int *size, double timeout_s)
{
	double end = now_s() + timeout_s;
	int done = 0, ret;

	do {
		ret = req_test(req, &done, size);
		if (ret || done)
			return ret;
		usleep(50);
	} while (now_s() < end);
	return -ETIMEDOUT;
}

static void fill(unsigned char *buf, size_t size, unsigned int seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < size; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (unsigned char)(x >> 16);
	}
}

/* ---- tests ---- */

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

/* A receive that must fail: too small or wrong tag. */
static void test_mismatch(size_t sent, size_t posted, int stag, int rtag,
			  const char *label)
{
	unsigned char *src = calloc(1, sent), *dst = calloc(1, posted);
	void *sreq, *rreq, *later = NULL, *mh = NULL;
	struct pair p;
	double t0;
	int ret = pair_open(&p), size;

	CHECK(ret == 0, "connect: %d", ret);
	if (ret)
		goto out;
	rreq = post_recv(&p, dst, posted, rtag);
	sreq = post_send(&p, src, sent, stag);
	t0 = now_s();
	ret = wait_req(rreq, &size, 10);
	CHECK(ret < 0 && ret != -ETIMEDOUT, "%s: recv returned %d", label,
	      ret);
	/* The sender learns too: its peer shut the streams down. */
	ret = wait_req(sreq, &size, 10);
	CHECK(ret == 0 || (ret < 0 && ret != -ETIMEDOUT),
	      "%s: send neither completed nor failed", label);
	ret = mod->irecv(p.recv_comm, 1, (void **)&dst, &posted, &rtag, &mh,
			 &later);
	CHECK(ret < 0, "%s: irecv on a failed comm returned %d", label, ret);
	pair_close(&p);
	printf("ok %s (%.2f s)\n", label, now_s() - t0);
out:
	free(src);
	free(dst);
}

/* One side closes with a 64 MiB message half way; the other must fail fast. */
static void test_peer_closed(bool sender_closes)
{
	const size_t size = 64 << 20;
	unsigned char *src = calloc(1, size), *dst = calloc(1, size);
	struct pair p;
	void *req;
	double t0;
	int ret = pair_open(&p), n;

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
	ret = req ? wait_req(req, &n, 10) : -EINVAL;
	CHECK(ret < 0 && ret != -ETIMEDOUT,
	      "%s closed mid-transfer: other side's test returned %d",
	      sender_closes ? "sender" : "receiver", ret);
	CHECK(now_s() - t0 < 5, "failure took %.1f s", now_s() - t0);
	pair_close(&p);
	printf("ok %s closed mid-transfer (%.2f s)\n",
	       sender_closes ? "sender" : "receiver", now_s() - t0);
out:
	free(src);
	free(dst);
}

/* Both sides close while requests are still in flight in both directions. */
static void test_close_in_flight(void)
{
	const size_t size = 64 << 20;
	unsigned char *src = calloc(1, size), *dst = calloc(1, size);
	struct pair p;
	double t0;
	int ret = pair_open(&p);

	CHECK(ret == 0, "connect: %d", ret);
	if (!ret) {
		for (int i = 0; i < 4; i++) {
			post_send(&p, src, size, i);
			post_recv(&p, dst, size, i);
		}
		t0 = now_s();
		pair_close(&p);
		CHECK(now_s() - t0 < 5, "close took %.1f s", now_s() - t0);
		printf("ok close with requests in flight\n");
	}
	free(src);
	free(dst);
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
	void *dl;

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
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("MESH_TEST_LOG"))
		log_level = atoi(getenv("MESH_TEST_LOG"));
	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl || !(mod = dlsym(dl, MESH_MODULE_SYMBOL))) {
		fprintf(stderr, "%s: %s\n", path, dlerror());
		return 1;
	}
	if (mod->abi_version != MESH_MODULE_ABI_VERSION) {
		fprintf(stderr, "%s: module ABI %#x\n", path, mod->abi_version);
		return 1;
	}
	param_set("ifname", "=lo");
	if (do_bench)
		return bench(sizes, window, mib);

	test_devices();
	test_refuse();
	test_sizes("sizes, 8 streams on 8 threads, 512K chunks");
	param_set("streams", "5");
	param_set("threads", "2");
	param_set("chunk_size", "4K");
	test_sizes("sizes, 5 streams on 2 threads, 4K chunks");
	param_set("streams", "1");
	param_set("threads", "1");
	param_set("chunk_size", "64M");
	test_sizes("sizes, 1 stream, 64M chunks");
	params_reset();
	param_set("ifname", "=lo");
	test_outstanding();
	test_mismatch(2 << 20, 1 << 20, 3, 3, "send larger than posted fails");
	test_mismatch(4096, 4096, 3, 4, "tag mismatch fails");
	test_peer_closed(true);
	test_peer_closed(false);
	test_close_in_flight();
	dlclose(dl);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("all transport checks passed\n");
	return 0;
}
