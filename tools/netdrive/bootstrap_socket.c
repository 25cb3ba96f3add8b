/* SPDX-License-Identifier: MIT */
/*
 * The bootstrap channel between server and client: a TCP socket carrying
 * the listen handle, the agreed parameters, barriers and results, the part
 * NCCL's own bootstrap plays.  Every wait is bounded so a dead peer can
 * never hang the program.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netdrive.h"

static int set_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static int remaining_ms(double deadline)
{
	double left = deadline - perf_now();

	return left <= 0 ? 0 : (int)(left * 1000) + 1;
}

static int wait_fd(int fd, short events, double deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int ms, rc;

	for (;;) {
		ms = remaining_ms(deadline);
		if (ms == 0)
			return -ETIMEDOUT;
		rc = poll(&pfd, 1, ms);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static int resolve(const char *host, int port, bool passive,
		   struct addrinfo **res)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = passive ? AI_PASSIVE : 0,
	};
	char service[16];
	int rc;

	snprintf(service, sizeof(service), "%d", port);
	rc = getaddrinfo(host, service, &hints, res);
	if (rc) {
		perf_err("cannot resolve %s: %s", host, gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	return 0;
}

static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len))
		return -errno;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

int oob_listen(const char *bind_host, int port, int *port_out)
{
	struct addrinfo *res, *ai;
	int fd = -1, one = 1, err = 0, rc;

	rc = resolve(bind_host, port, true, &res);
	if (rc)
		return rc;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 1))
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		perf_err("bootstrap listen on %s port %d: %s", bind_host, port,
			 strerror(err));
		return -err;
	}
	*port_out = bound_port(fd);
	return fd;
}

int oob_accept(int listen_fd, int timeout_s)
{
	double deadline = perf_now() + timeout_s;
	int fd, rc, one = 1;

	rc = wait_fd(listen_fd, POLLIN, deadline);
	if (rc) {
		perf_err("no client on the bootstrap port within %d s",
			 timeout_s);
		return rc;
	}
	fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		perf_err("bootstrap accept: %s", strerror(-rc));
		return rc;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	rc = set_nonblock(fd);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

static int try_connect(const struct addrinfo *ai, double deadline)
{
	int fd, rc, err = 0, one = 1;
	socklen_t len = sizeof(err);

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
		    ai->ai_protocol);
	if (fd < 0)
		return -errno;
	rc = set_nonblock(fd);
	if (rc)
		goto err_close;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
		rc = -errno;
		goto err_close;
	}
	rc = wait_fd(fd, POLLOUT, deadline);
	if (rc)
		goto err_close;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		rc = -(err ? err : errno);
		goto err_close;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;

err_close:
	close(fd);
	return rc;
}

/* The server may start after us (scripts): retry until the deadline. */
int oob_connect(const char *host, int port, int timeout_s)
{
	double deadline = perf_now() + timeout_s;
	struct timespec pause = { 0, 100 * 1000 * 1000 };
	struct addrinfo *res, *ai;
	int fd = -ETIMEDOUT, rc;

	rc = resolve(host, port, false, &res);
	if (rc)
		return rc;
	while (perf_now() < deadline) {
		for (ai = res; ai; ai = ai->ai_next) {
			fd = try_connect(ai, deadline);
			if (fd >= 0)
				goto out;
		}
		nanosleep(&pause, NULL);
	}
	perf_err("cannot reach the server at %s port %d within %d s: %s",
		 host, port, timeout_s, strerror(-fd));
out:
	freeaddrinfo(res);
	return fd;
}

static int send_all(int fd, const void *buf, size_t len, double deadline)
{
	const uint8_t *p = buf;
	ssize_t n;
	int rc;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		rc = wait_fd(fd, POLLOUT, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len, double deadline)
{
	uint8_t *p = buf;
	ssize_t n;
	int rc;

	while (len) {
		n = recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		rc = wait_fd(fd, POLLIN, deadline);
		if (rc)
			return rc;
	}
	return 0;
}

static const char *msg_name(enum perf_msg type)
{
	switch (type) {
	case PERF_MSG_HELLO:
		return "hello";
	case PERF_MSG_HELLO_ACK:
		return "hello reply";
	case PERF_MSG_HANDLE:
		return "handle";
	case PERF_MSG_BARRIER:
		return "barrier";
	case PERF_MSG_RESULT:
		return "result";
	}
	return "message";
}

int oob_send_msg(int fd, enum perf_msg type, const void *buf, size_t len,
		 int timeout_s)
{
	double deadline = perf_now() + timeout_s;
	uint8_t hdr[OOB_HDR_BYTES];
	int rc;

	oob_hdr_put(hdr, type, len);
	rc = send_all(fd, hdr, sizeof(hdr), deadline);
	if (!rc)
		rc = send_all(fd, buf, len, deadline);
	if (rc == -EPIPE || rc == -ECONNRESET)
		perf_err("bootstrap: peer closed the connection while we sent %s",
			 msg_name(type));
	else if (rc)
		perf_err("bootstrap: sending %s to the peer: %s",
			 msg_name(type), strerror(-rc));
	return rc;
}

int oob_recv_msg(int fd, enum perf_msg type, void *buf, size_t len,
		 int timeout_s)
{
	double deadline = perf_now() + timeout_s;
	uint8_t hdr[OOB_HDR_BYTES];
	int rc;

	rc = recv_all(fd, hdr, sizeof(hdr), deadline);
	if (rc)
		goto err;
	if (!oob_hdr_ok(hdr, type, len)) {
		perf_err("bootstrap: expected %s (%zu bytes), got type %u (%u bytes): peers out of step",
			 msg_name(type), len, oob_hdr_word(hdr, 1),
			 oob_hdr_word(hdr, 2));
		return -EPROTO;
	}
	rc = recv_all(fd, buf, len, deadline);
	if (!rc)
		return 0;
err:
	if (rc == -ECONNRESET)
		perf_err("bootstrap: peer closed the connection while we waited for %s",
			 msg_name(type));
	else
		perf_err("bootstrap: waiting for %s: %s", msg_name(type),
			 strerror(-rc));
	return rc;
}

int oob_barrier(int fd, uint32_t tag, int timeout_s)
{
	uint32_t out = htobe32(tag), in;
	int rc;

	rc = oob_send_msg(fd, PERF_MSG_BARRIER, &out, sizeof(out), timeout_s);
	if (!rc)
		rc = oob_recv_msg(fd, PERF_MSG_BARRIER, &in, sizeof(in),
				  timeout_s);
	if (rc)
		return rc;
	if (be32toh(in) != tag) {
		perf_err("bootstrap: barrier %u met peer barrier %u", tag,
			 be32toh(in));
		return -EPROTO;
	}
	return 0;
}

/*
 * During transfers the peer sends nothing on the bootstrap socket until it
 * is done, so end-of-file here means it died: stop waiting on the plugin.
 */
int oob_peer_gone(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

	if (n == 0)
		return 1;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return 1;
	return 0;
}

/*
 * Seconds the plugin gets, once the peer's bootstrap connection closed, to
 * report the failure itself: its reason (which connection, which route)
 * says more than the bootstrap's, and a peer that failed first and exited
 * closes the bootstrap before our plugin has read what it sent last.
 */
#define PERF_PEER_GONE_GRACE 3.0

/* Whether the peer's bootstrap connection has been closed for the grace;
 * *gone_at (0 at first) keeps when it was first seen closed. */
bool oob_peer_gone_long(int fd, double *gone_at)
{
	if (*gone_at <= 0) {
		if (!oob_peer_gone(fd))
			return false;
		*gone_at = perf_now();
	}
	return perf_now() - *gone_at >= PERF_PEER_GONE_GRACE;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, sizeof(v));
	return p + sizeof(v);
}

static const uint8_t *get64(const uint8_t *p, uint64_t *v)
{
	memcpy(v, p, sizeof(*v));
	*v = be64toh(*v);
	return p + sizeof(*v);
}

/* Bump when the hello layout changes: both ends must run the same one. */
#define PERF_PROTO_VERSION 4
#define PERF_PARAMS_FIXED 12	/* scalar fields before the sizes */

size_t perf_params_encode(const struct perf_params *p, uint8_t *buf)
{
	uint8_t *q = buf;
	uint32_t i;

	q = put64(q, PERF_PROTO_VERSION);
	q = put64(q, p->window);
	q = put64(q, p->iters);
	q = put64(q, p->budget);
	q = put64(q, p->mem);
	q = put64(q, (uint64_t)p->lat_max);
	q = put64(q, (uint64_t)p->unverified << 33 |
		     (uint64_t)p->bidir << 32 | p->reload);
	q = put64(q, p->timeout);
	q = put64(q, p->nsizes);
	q = put64(q, p->comm_id);
	q = put64(q, p->channels);
	q = put64(q, p->recv_size);
	for (i = 0; i < PERF_MAX_SIZES; i++)
		q = put64(q, i < p->nsizes ? p->sizes[i] : 0);
	return q - buf;
}

int perf_params_decode(struct perf_params *p, const uint8_t *buf, size_t len)
{
	const uint8_t *q = buf;
	uint64_t v[PERF_PARAMS_FIXED];
	uint32_t i;

	if (len != PERF_PARAMS_WIRE_MAX)
		return -EPROTO;
	for (i = 0; i < PERF_PARAMS_FIXED; i++)
		q = get64(q, &v[i]);
	if (v[0] != PERF_PROTO_VERSION || v[8] > PERF_MAX_SIZES ||
	    v[10] > PERF_MAX_CHANNELS)
		return -EPROTO;
	p->window = (uint32_t)v[1];
	p->iters = (uint32_t)v[2];
	p->budget = v[3];
	p->mem = v[4];
	p->lat_max = (int64_t)v[5];
	p->bidir = (uint32_t)(v[6] >> 32) & 1;
	p->unverified = (uint32_t)(v[6] >> 33) & 1;
	p->reload = (uint32_t)v[6];
	p->timeout = (uint32_t)v[7];
	p->nsizes = (uint32_t)v[8];
	p->comm_id = v[9];
	p->channels = (uint32_t)v[10];
	p->recv_size = v[11];
	for (i = 0; i < p->nsizes; i++)
		q = get64(q, &p->sizes[i]);
	if (!p->window || p->window > NCCL_NET_MAX_REQUESTS || !p->iters ||
	    !p->reload || !p->timeout || !p->nsizes || !p->mem ||
	    !p->channels)
		return -EPROTO;
	return 0;
}
