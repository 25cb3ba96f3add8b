/* SPDX-License-Identifier: MIT */
/*
 * The reference for tcp-xdc's large-message throughput: raw TCP on
 * loopback, both directions at once, as an all-reduce between two ranks
 * moves its data.  STREAMS connections each way, every connection with
 * its own sending and receiving thread, blocking send()/recv() of BUF
 * bytes, each thread stepping through RING bytes of its own memory (RING =
 * BUF, the default, keeps one buffer hot in the caches: the loopback's
 * ceiling; a RING as large as NCCL's buffers makes every byte come from
 * and go to memory, as NCCL's do).  Prints the bytes received per second
 * over SECS, both directions together and each on its own.
 *
 *   tcp_stream [STREAMS] [SECS] [BUF] [RING]     (sizes take K, M, G)
 *
 * One process; the kernel's loopback path is the same whether the two
 * ends are one process or two.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "size.h"

#define MAX_STREAMS 256

struct end {
	int fd;
	bool sender;
	size_t buf_len;
	size_t ring_len;	/* a multiple of buf_len */
	uint64_t received;	/* bytes, counted by receivers only */
};

static atomic_bool measuring, stopping;

static void *run_end(void *arg)
{
	struct end *e = arg;
	char *ring = malloc(e->ring_len);
	size_t at = 0;

	if (!ring)
		bench_die("malloc");
	memset(ring, 0x5a, e->ring_len);
	while (!atomic_load_explicit(&stopping, memory_order_relaxed)) {
		ssize_t n = e->sender ?
			send(e->fd, ring + at, e->buf_len, MSG_NOSIGNAL) :
			recv(e->fd, ring + at, e->buf_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;	/* the other end shut down at the stop */
		at = (at + e->buf_len) % e->ring_len;
		if (!e->sender &&
		    atomic_load_explicit(&measuring, memory_order_relaxed))
			e->received += (uint64_t)n;
	}
	free(ring);
	return NULL;
}

/* A connected pair over 127.0.0.1 through LISTENER: *out dials, *in accepts. */
static void connect_pair(int listener, const struct sockaddr_in *addr,
			 int *out, int *in)
{
	int one = 1;

	*out = socket(AF_INET, SOCK_STREAM, 0);
	if (*out < 0)
		bench_die("socket");
	if (connect(*out, (const struct sockaddr *)addr, sizeof(*addr)) < 0)
		bench_die("connect");
	*in = accept(listener, NULL, NULL);
	if (*in < 0)
		bench_die("accept");
	setsockopt(*out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int open_listener(struct sockaddr_in *addr)
{
	socklen_t len = sizeof(*addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		bench_die("socket");
	memset(addr, 0, sizeof(*addr));
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)addr, sizeof(*addr)) < 0 ||
	    listen(fd, MAX_STREAMS) < 0 ||
	    getsockname(fd, (struct sockaddr *)addr, &len) < 0)
		bench_die("listener");
	return fd;
}

/* Bytes in ARG (size.h), 1 to 1 TiB; -1 if bad. */
static long size_arg(const char *arg)
{
	uint64_t v;

	if (util_size_parse(arg, &v) || v < 1 || v > (1ULL << 40))
		return -1;
	return (long)v;
}

int main(int argc, char **argv)
{
	int streams = argc > 1 ? atoi(argv[1]) : 16;
	double secs = argc > 2 ? atof(argv[2]) : 5.0;
	long buf_len = argc > 3 ? size_arg(argv[3]) : 512 * 1024;
	long ring_len = argc > 4 ? size_arg(argv[4]) : buf_len;
	/* per direction d (0: a to b, 1: b to a), stream s: [d][s][0] sends */
	static struct end ends[2][MAX_STREAMS][2];
	static pthread_t threads[2][MAX_STREAMS][2];
	struct sockaddr_in addr;
	uint64_t dir_bytes[2] = { 0, 0 };
	double t0, t1;
	int listener;

	if (streams < 1 || streams > MAX_STREAMS || secs <= 0 || buf_len < 1 ||
	    ring_len < buf_len) {
		fprintf(stderr, "usage: tcp_stream [STREAMS 1..%d] [SECS] [BUF] "
			"[RING >= BUF]\n", MAX_STREAMS);
		return 2;
	}
	ring_len -= ring_len % buf_len;
	listener = open_listener(&addr);
	for (int d = 0; d < 2; d++)
		for (int s = 0; s < streams; s++) {
			struct end *e = ends[d][s];

			connect_pair(listener, &addr, &e[0].fd, &e[1].fd);
			e[0].sender = true;
			for (int k = 0; k < 2; k++) {
				e[k].buf_len = (size_t)buf_len;
				e[k].ring_len = (size_t)ring_len;
			}
			for (int k = 0; k < 2; k++)
				if (pthread_create(&threads[d][s][k], NULL,
						   run_end, &e[k]))
					bench_die("pthread_create");
		}
	/* A second to ramp up (windows, autotuning), then measure. */
	sleep(1);
	t0 = bench_now_s();
	atomic_store(&measuring, true);
	usleep((useconds_t)(secs * 1e6));
	atomic_store(&measuring, false);
	t1 = bench_now_s();
	atomic_store(&stopping, true);
	for (int d = 0; d < 2; d++)
		for (int s = 0; s < streams; s++)
			for (int k = 0; k < 2; k++)
				shutdown(ends[d][s][k].fd, SHUT_RDWR);
	for (int d = 0; d < 2; d++)
		for (int s = 0; s < streams; s++) {
			for (int k = 0; k < 2; k++) {
				pthread_join(threads[d][s][k], NULL);
				close(ends[d][s][k].fd);
			}
			dir_bytes[d] += ends[d][s][1].received;
		}
	close(listener);
	printf("tcp_stream: %d streams each way, %.1f s, %ld-byte buffers in "
	       "%ld bytes a thread: %.2f GB/s both ways (%.2f and %.2f)\n",
	       streams, t1 - t0, buf_len, ring_len, (double)(dir_bytes[0] + dir_bytes[1]) / (t1 - t0) / 1e9,
	       (double)dir_bytes[0] / (t1 - t0) / 1e9,
	       (double)dir_bytes[1] / (t1 - t0) / 1e9);
	return 0;
}
