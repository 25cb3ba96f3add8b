/* SPDX-License-Identifier: MIT */
/* Reading a stream socket, straight or ahead (tcp_xdc_ahead.h). */
#include <assert.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_xdc_ahead.h"

/* -errno of a failed receive; -EAGAIN when nothing was there. */
static ssize_t recv_failed(void)
{
	return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/*
 * One iovec goes through a plain recv: on a socket polled while it is
 * empty, as test() polls stream 0 for the next header, recvmsg's copy-in
 * of a header and an iovec costs more: an empty poll takes 228 ns through
 * recv and 304 through recvmsg with two iovecs on a 2-core host
 * (tests/bench/xdc-latency.sh).
 */
ssize_t tcp_xdc_readv(int fd, const struct iovec *iov, int iovcnt,
		      uint64_t *wire)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov,
			      .msg_iovlen = (size_t)iovcnt };
	ssize_t n;

	do
		n = iovcnt == 1 ? recv(fd, iov->iov_base, iov->iov_len,
				       MSG_DONTWAIT) :
				  recvmsg(fd, &msg, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return recv_failed();
	*wire += (uint64_t)n;
	return n;
}

/* A read larger than the buffer: straight into buf, what follows (up to
 * room) into the buffer. */
static ssize_t read_large(struct tcp_xdc_ahead *a, int fd, void *buf,
			  size_t want, size_t room, uint64_t *wire)
{
	struct iovec two[2] = { { buf, want }, { a->buf, room } };
	ssize_t n = tcp_xdc_readv(fd, two, 2, wire);

	if (n <= 0 || (size_t)n <= want)
		return n;
	a->pos = 0;
	a->len = (uint32_t)((size_t)n - want);
	return (ssize_t)want;
}

/* A read that fits the buffer refills it and is served from it, as are the
 * bytes already read ahead. */
ssize_t tcp_xdc_ahead_read(struct tcp_xdc_ahead *a, int fd, void *buf,
			   size_t want, size_t room, uint64_t *wire)
{
	size_t took;

	assert(a->buf && room > 0 && room <= TCP_XDC_READ_AHEAD && want > 0);
	if (!tcp_xdc_ahead_pending(a)) {
		struct iovec refill = { a->buf, room };
		ssize_t n;

		if (want > room)
			return read_large(a, fd, buf, want, room, wire);
		n = tcp_xdc_readv(fd, &refill, 1, wire);
		if (n <= 0)
			return n;
		a->pos = 0;
		a->len = (uint32_t)n;
	}
	took = a->len - a->pos < want ? a->len - a->pos : want;
	memcpy(buf, a->buf + a->pos, took);
	a->pos += (uint32_t)took;
	return (ssize_t)took;
}
