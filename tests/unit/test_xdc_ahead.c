/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's read-ahead over a socketpair: a read that fits the buffer (one
 * recv through it, the rest kept for the next call) and one that does not
 * (straight into the caller's buffer, what follows into ours), an empty
 * socket, two reads served in order from one socket read, and the end of
 * the stream; the clear path's read straight into the caller's iovec.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "tcp_xdc_ahead.h"

static uint8_t ahead_buf[TCP_XDC_READ_AHEAD];

/* Byte i of the stream the tests write. */
static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 7 + 3);
}

static void put(int fd, size_t from, size_t len)
{
	uint8_t *b = malloc(len);

	for (size_t i = 0; i < len; i++)
		b[i] = pattern(from + i);
	CHECK(write(fd, b, len) == (ssize_t)len);
	free(b);
}

static int same(const uint8_t *b, size_t from, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (b[i] != pattern(from + i))
			return 0;
	return 1;
}

static void test_small_reads(void)
{
	struct tcp_xdc_ahead a = { .buf = ahead_buf };
	uint8_t hdr[32], body[100];
	uint64_t wire = 0;
	int fd[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0);
	CHECK(tcp_xdc_ahead_read(&a, fd[0], hdr, sizeof(hdr),
				 sizeof(ahead_buf), &wire) == -EAGAIN);
	CHECK(wire == 0 && !tcp_xdc_ahead_pending(&a));

	/* 100 bytes: the header's 32 now, 68 kept */
	put(fd[1], 0, 100);
	CHECK(tcp_xdc_ahead_read(&a, fd[0], hdr, sizeof(hdr),
				 sizeof(ahead_buf), &wire) == 32);
	CHECK(same(hdr, 0, 32) && wire == 100);
	CHECK(tcp_xdc_ahead_pending(&a) && a.len - a.pos == 68);

	/* served from what was read, without the socket */
	CHECK(tcp_xdc_ahead_read(&a, fd[0], body, 40, sizeof(ahead_buf),
				 &wire) == 40);
	CHECK(same(body, 32, 40));
	CHECK(tcp_xdc_ahead_read(&a, fd[0], body, sizeof(body),
				 sizeof(ahead_buf), &wire) == 28);
	CHECK(same(body, 72, 28) && !tcp_xdc_ahead_pending(&a) && wire == 100);

	/* two reads filled in order from one socket read */
	{
		uint8_t x[10], y[20];

		put(fd[1], 100, 25);
		CHECK(tcp_xdc_ahead_read(&a, fd[0], x, sizeof(x),
					 sizeof(ahead_buf), &wire) == 10);
		CHECK(wire == 125);
		CHECK(tcp_xdc_ahead_read(&a, fd[0], y, sizeof(y),
					 sizeof(ahead_buf), &wire) == 15);
		CHECK(same(x, 100, 10) && same(y, 110, 15));
		CHECK(!tcp_xdc_ahead_pending(&a) && wire == 125);
	}

	/* the end of the stream, once the buffer is empty */
	close(fd[1]);
	CHECK(tcp_xdc_ahead_read(&a, fd[0], body, sizeof(body),
				 sizeof(ahead_buf), &wire) == 0);
	close(fd[0]);
}

static void test_large_read(void)
{
	struct tcp_xdc_ahead a = { .buf = ahead_buf };
	size_t big = 3 * TCP_XDC_READ_AHEAD;
	uint8_t *payload = malloc(big);
	uint8_t hdr[32];
	uint64_t wire = 0;
	size_t got = 0, want = big + sizeof(hdr);
	int fd[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0);
	CHECK(tcp_xdc_ahead_read(&a, fd[0], payload, big, sizeof(ahead_buf),
				 &wire) == -EAGAIN);
	/* a payload, the next header, and 50 bytes of what follows */
	put(fd[1], 0, want + 50);
	while (got < want) {
		uint8_t *at = got < big ? payload + got : hdr + (got - big);
		size_t len = got < big ? big - got : want - got;
		ssize_t r = tcp_xdc_ahead_read(&a, fd[0], at, len,
					       sizeof(ahead_buf), &wire);

		CHECK(r > 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	CHECK(got == want && same(payload, 0, big) && same(hdr, big, 32));
	/* what followed the header waits in the buffer */
	CHECK(tcp_xdc_ahead_pending(&a) && a.len - a.pos == 50);
	CHECK(same(a.buf + a.pos, want, 50) && wire == want + 50);
	free(payload);
	close(fd[0]);
	close(fd[1]);
}

/*
 * The clear path's read: a payload and the next header in one call, then
 * one iovec, an empty socket, the end of the stream.
 */
static void test_direct(void)
{
	uint8_t payload[10], header[8], rest[32];
	struct iovec two[2] = { { payload, sizeof(payload) },
				{ header, sizeof(header) } };
	struct iovec one = { rest, sizeof(rest) };
	uint64_t wire = 0;
	int fd[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0);
	put(fd[1], 0, 40);
	CHECK(tcp_xdc_readv(fd[0], two, 2, &wire) == 18);
	CHECK(same(payload, 0, 10) && same(header, 10, 8) && wire == 18);
	CHECK(tcp_xdc_readv(fd[0], &one, 1, &wire) == 22);
	CHECK(same(rest, 18, 22) && wire == 40);
	CHECK(tcp_xdc_readv(fd[0], &one, 1, &wire) == -EAGAIN);
	close(fd[1]);
	CHECK(tcp_xdc_readv(fd[0], two, 2, &wire) == 0 && wire == 40);
	close(fd[0]);
}

int main(void)
{
	test_small_reads();
	test_large_read();
	test_direct();
	return failures ? 1 : 0;
}
