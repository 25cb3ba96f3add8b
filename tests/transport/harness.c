/* SPDX-License-Identifier: MIT */
/*
 * Transport harness: gives a module a host and a loopback control channel,
 * and drives its data path the way the core does.
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
#include "harness.h"

const struct mesh_module *mod;
int failures;
int log_level = MESH_LOG_WARN;
int warnings;
bool ctrl_leg;

double now_s(void)
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

void param_set(const char *name, const char *value)
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

void params_reset(void)
{
	noverrides = 0;
}

static void host_log(const struct mesh_host *host, enum mesh_log_level level,
		     const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	if (level == MESH_LOG_WARN)
		__atomic_fetch_add(&warnings, 1, __ATOMIC_RELAXED);
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

const struct mesh_host host = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_host),
	.module = "tcp-xdc",
	.log = host_log,
	.param_str = host_param_str,
	.param_int = host_param_int,
	.param_list = host_param_list,
};

/* ---- loopback control channel ---- */


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

void ctrl_init(struct test_ctrl *tc, int msg_fd, bool dialer,
		      int listen_fd, uint16_t port)
{
	memset(tc, 0, sizeof(*tc));
	tc->base.send = ctrl_send;
	tc->base.recv = ctrl_recv;
	tc->base.stream = ctrl_stream;
	tc->base.local = &tc->local;
	tc->base.remote = &tc->remote;
	tc->base.peer = dialer ? "127.0.0.1 (acceptor)" : "127.0.0.1 (dialer)";
	tc->base.leg = ctrl_leg;
	tc->msg_fd = msg_fd;
	tc->dialer = dialer;
	tc->listen_fd = listen_fd;
	tc->port = port;
	for (int i = 0; i < MAX_STREAMS; i++)
		tc->streams[i] = -1;
}

void ctrl_fini(struct test_ctrl *tc)
{
	for (int i = 0; i < MAX_STREAMS; i++)
		if (tc->streams[i] >= 0)
			close(tc->streams[i]);
	close(tc->msg_fd);
}

/* ---- connection pair ---- */


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

int listener_open(uint16_t *port)
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
int pair_connect(struct pair *p)
{
	struct test_ctrl dialer, acceptor;
	struct dial_arg d = { 0 };
	double end = now_s() + DEADLINE_S;
	pthread_t tid;
	uint16_t port;
	int sv[2], lfd, ret;

	p->send_comm = p->recv_comm = NULL;
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
		pair_close_comms(p);
		return ret ? ret : d.ret;
	}
	return 0;
}

int pair_open(struct pair *p)
{
	int ret;

	memset(p, 0, sizeof(*p));
	ret = mod->init(&host, &p->mctx);
	if (ret)
		return ret;
	ret = pair_connect(p);
	if (ret)
		mod->fini(p->mctx);
	return ret;
}

void pair_close_comms(struct pair *p)
{
	if (p->send_comm)
		mod->close_send(p->send_comm);
	if (p->recv_comm)
		mod->close_recv(p->recv_comm);
	p->send_comm = p->recv_comm = NULL;
}

void pair_close(struct pair *p)
{
	pair_close_comms(p);
	mod->fini(p->mctx);
}

void harness_load(const char *path)
{
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!dl || !(mod = dlsym(dl, MESH_MODULE_SYMBOL))) {
		fprintf(stderr, "%s: %s\n", path, dlerror());
		exit(1);
	}
	if (mod->abi_version != MESH_MODULE_ABI_VERSION) {
		fprintf(stderr, "%s: module ABI %#x\n", path, mod->abi_version);
		exit(1);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("MESH_TEST_LOG"))
		log_level = atoi(getenv("MESH_TEST_LOG"));
}

/* ---- request helpers ---- */

int req_test(void *req, int *done, int *size)
{
	return ((struct mesh_request *)req)->test(req, done, size);
}

void *post_send(struct pair *p, void *buf, size_t size, int tag)
{
	void *mh = NULL, *req = NULL;
	int ret;

	mod->reg_mr(p->send_comm, buf, size, MESH_PTR_HOST, &mh);
	ret = mod->isend(p->send_comm, buf, size, tag, mh, &req);
	CHECK(ret == 0, "isend of %zu bytes: %d", size, ret);
	return req;
}

void *post_recv(struct pair *p, void *buf, size_t size, int tag)
{
	void *mh = NULL, *req = NULL;
	int ret;

	mod->reg_mr(p->recv_comm, buf, size, MESH_PTR_HOST, &mh);
	ret = mod->irecv(p->recv_comm, 1, &buf, &size, &tag, &mh, &req);
	CHECK(ret == 0, "irecv of %zu bytes: %d", size, ret);
	return req;
}

/* Polls until done; returns the test() error, or -ETIMEDOUT. */
int wait_req(void *req, int *size, double timeout_s)
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

void fill(unsigned char *buf, size_t size, unsigned int seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < size; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (unsigned char)(x >> 16);
	}
}
