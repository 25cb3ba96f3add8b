/* SPDX-License-Identifier: MIT */
/*
 * util_tcp_rtt_us over a real loopback connection: both ends report a
 * round trip once the handshake and a message have crossed, a socket
 * that never connected has none, and what is not a TCP socket is told
 * apart by its error.  Then the core's record of them per path class
 * (core/net/rtt.c): the largest and the latest, classes apart, emptied
 * at the last finalize, and the one line about a long cross-DC one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "core_log.h"
#include "net_priv.h"
#include "tcp_rtt.h"

/* Loopback's round trip is tens of microseconds; a loaded host may stall
 * a process for a while, so the bound is what no loopback reaches. */
#define RTT_MAX_US 1000000u

static int tcp_socket(void)
{
	struct timeval tv = { .tv_sec = 5 };	/* no test waits forever */
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
				 sizeof(tv))) {
		perror("socket");
		exit(2);
	}
	return fd;
}

/* A connected pair over 127.0.0.1: *a dialed, *b accepted. */
static void loopback_pair(int *a, int *b)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int l = tcp_socket();

	*a = tcp_socket();
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sa, &len) ||
	    connect(*a, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("loopback");
		exit(2);
	}
	*b = accept(l, NULL, NULL);
	if (*b < 0) {
		perror("accept");
		exit(2);
	}
	close(l);
}

/* One message each way, so each end has an acknowledged send. */
static void exchange(int a, int b)
{
	char c = 'x';

	CHECK(write(a, &c, 1) == 1 && read(b, &c, 1) == 1);
	CHECK(write(b, &c, 1) == 1 && read(a, &c, 1) == 1);
}

static void test_connected(void)
{
	uint32_t us_a = 0, us_b = 0;
	int a, b;

	loopback_pair(&a, &b);
	exchange(a, b);
	CHECK(util_tcp_rtt_us(a, &us_a) == 0);
	CHECK(util_tcp_rtt_us(b, &us_b) == 0);
	CHECK(us_a > 0 && us_a < RTT_MAX_US);
	CHECK(us_b > 0 && us_b < RTT_MAX_US);
	close(a);
	close(b);
}

static void test_not_measured(void)
{
	uint32_t us = 7;
	int fd = tcp_socket();

	CHECK(util_tcp_rtt_us(fd, &us) == -ENODATA);
	CHECK(us == 0);
	close(fd);
}

static void test_not_tcp(void)
{
	uint32_t us = 7;
	int sv[2], p[2];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe(p)) {
		perror("socketpair");
		exit(2);
	}
	CHECK(util_tcp_rtt_us(sv[0], &us) == -EOPNOTSUPP);
	CHECK(util_tcp_rtt_us(p[0], &us) == -ENOTSOCK);
	close(p[0]);
	CHECK(util_tcp_rtt_us(p[0], &us) == -EBADF);
	CHECK(us == 7);		/* untouched where nothing was read */
	close(sv[0]);
	close(sv[1]);
	close(p[1]);
}

/* The core's lines, from the logger NCCL would have given it. */
static char logged[2048];

static void collect(ncclDebugLogLevel level, unsigned long flags,
		    const char *file, int line, const char *fmt, ...)
{
	size_t used = strlen(logged);
	va_list ap;

	(void)level, (void)flags, (void)file, (void)line;
	va_start(ap, fmt);
	vsnprintf(logged + used, sizeof(logged) - used, fmt, ap);
	va_end(ap);
	used = strlen(logged);
	snprintf(logged + used, sizeof(logged) - used, "\n");
}

static void test_record(void)
{
	struct core_tuning none = { 0 }, declared = { .xdc_rtt_ms = 50 };
	struct core_rtt_seen x;

	core_log_set_nccl(collect);
	core_rtt_note(CORE_PATH_SAME_DC, 40, &none);
	core_rtt_note(CORE_PATH_CROSS_DC, 800, &none);	/* not far: quiet */
	core_rtt_note(CORE_PATH_CROSS_DC, 50000, &none);
	core_rtt_note(CORE_PATH_CROSS_DC, 30000, &none);	/* said once */
	core_rtt_note(CORE_PATH_CROSS_DC, 0, &none);	/* none measured */
	core_rtt_note(CORE_PATH_DISCONNECTED, 9, &none);	/* no record */
	x = core_rtt_seen(CORE_PATH_CROSS_DC);
	CHECK(x.max_us == 50000 && x.latest_us == 30000);
	x = core_rtt_seen(CORE_PATH_SAME_DC);
	CHECK(x.max_us == 40 && x.latest_us == 40);
	x = core_rtt_seen(CORE_PATH_DISCONNECTED);
	CHECK(x.max_us == 0 && x.latest_us == 0);
	CHECK_STR(logged, "NET/Mesh: cross-DC round trip 50000 us measured; "
		  "xdc_rtt_ms is 0, so the tuner counts no WAN crossings "
		  "(set it to the round trip for NCCL's algorithm to follow "
		  "them)\n");

	core_rtt_forget();
	x = core_rtt_seen(CORE_PATH_CROSS_DC);
	CHECK(x.max_us == 0 && x.latest_us == 0);
	logged[0] = '\0';
	core_rtt_note(CORE_PATH_CROSS_DC, 49000, &declared);	/* agrees */
	CHECK_STR(logged, "");
	core_rtt_forget();
	core_rtt_note(CORE_PATH_CROSS_DC, 120000, &declared);
	CHECK_STR(logged, "NET/Mesh: cross-DC round trip 120000 us measured; "
		  "the tuner counts xdc_rtt_ms = 50 ms\n");
	core_log_set_nccl(NULL);
}

int main(void)
{
	test_connected();
	test_not_measured();
	test_not_tcp();
	test_record();
	if (failures)
		fprintf(stderr, "test_tcp_rtt: %d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
