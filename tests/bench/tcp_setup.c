/* SPDX-License-Identifier: MIT */
/*
 * The reference for tcp-xdc's connection setup at distance: NCCL's Socket
 * transport's setup done with plain TCP.  Each of CONNS connections is
 * SOCKS + 1 sockets (NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS data
 * sockets and the control socket); each socket, once connected, sends
 * what Socket's does (its magic, its type and its index, 13 bytes) and
 * waits for nothing back.  Socket dials a connection's sockets one after
 * another (seq); par dials them all at once, the floor of any setup that
 * opens that many sockets.  The connections themselves all start at once,
 * as NCCL steps all its connects together.
 *
 *   tcp_setup accept  BOOT_PORT DATA_PORT CONNS SOCKS
 *   tcp_setup connect BOOT_PORT HOST DATA_PORT CONNS SOCKS seq|par
 *
 * Both meet on 127.0.0.1:BOOT_PORT first (another path than the one
 * measured: a bridge between namespaces), where the acceptor says go and
 * both start their clocks.  Each prints its own time, from go to its last
 * socket: "connector_ms T" once every socket has sent its bytes,
 * "acceptor_ms T" once every socket's bytes arrived.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define MAX_SOCKETS 4096
#define HELLO_SIZE 13		/* magic 8, type 4, index 1 */
#define LIMIT_S 60

struct sock {
	int fd;
	size_t done;		/* bytes of the hello sent or received */
};

static int listener(const char *ip, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0 || inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		bench_die("listener");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(fd, MAX_SOCKETS))
		bench_die("bind");
	return fd;
}

/* A blocking connect to 127.0.0.1:port, retried while nothing listens. */
static int boot_dial(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	for (int i = 0; i < 100; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			bench_die("socket");
		if (!connect(fd, (struct sockaddr *)&a, sizeof(a)))
			return fd;
		close(fd);
		usleep(100000);
	}
	bench_die("bootstrap connect");
	return -1;
}

static int dial(const struct sockaddr_in *to)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;

	if (fd < 0)
		bench_die("socket");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)to, sizeof(*to)) &&
	    errno != EINPROGRESS)
		bench_die("connect");
	return fd;
}

static void past_limit(double t0)
{
	if (bench_now_s() - t0 > LIMIT_S) {
		fprintf(stderr, "tcp_setup: not done within %d s\n", LIMIT_S);
		exit(1);
	}
}

static int run_accept(int boot_port, int data_port, int total)
{
	static struct sock s[MAX_SOCKETS];
	static struct pollfd p[MAX_SOCKETS + 1];
	int lfd = listener("0.0.0.0", data_port);
	int bl = listener("127.0.0.1", boot_port), boot, n = 0, complete = 0;
	double t0;

	boot = accept(bl, NULL, NULL);
	if (boot < 0 || fcntl(lfd, F_SETFL, O_NONBLOCK))
		bench_die("accept");
	if (send(boot, "g", 1, 0) != 1)
		bench_die("send");
	t0 = bench_now_s();
	while (complete < total) {
		int fd;

		p[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < n; i++)
			p[i + 1] = (struct pollfd){ .fd = s[i].fd,
				.events = s[i].done < HELLO_SIZE ? POLLIN : 0 };
		if (poll(p, (nfds_t)n + 1, 100) < 0 && errno != EINTR)
			bench_die("poll");
		past_limit(t0);
		while (n < MAX_SOCKETS && (fd = accept4(lfd, NULL, NULL,
					SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
			s[n++] = (struct sock){ .fd = fd };
		for (int i = 0; i < n; i++) {
			char buf[HELLO_SIZE];
			ssize_t r;

			if (s[i].done == HELLO_SIZE)
				continue;
			r = recv(s[i].fd, buf, HELLO_SIZE - s[i].done, 0);
			if (r == 0 || (r < 0 && errno != EAGAIN))
				bench_die("recv");
			if (r > 0)
				s[i].done += (size_t)r;
			complete += s[i].done == HELLO_SIZE;
		}
	}
	printf("acceptor_ms %.3f\n", (bench_now_s() - t0) * 1e3);
	return 0;
}

/* Steps socket s: dialed, connected, hello sent; true once sent. */
static bool step(struct sock *s, const struct sockaddr_in *to)
{
	static const char hello[HELLO_SIZE] = "nccl-sock-12";
	struct pollfd p = { .fd = s->fd, .events = POLLOUT };
	int err = 0;
	socklen_t len = sizeof(err);
	ssize_t r;

	if (s->fd < 0)
		s->fd = dial(to);
	if (s->done == HELLO_SIZE)
		return true;
	if (poll(&p, 1, 0) == 0)
		return false;
	if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
		errno = err;
		bench_die("connect");
	}
	r = send(s->fd, hello + s->done, HELLO_SIZE - s->done, MSG_NOSIGNAL);
	if (r < 0 && errno != EAGAIN)
		bench_die("send");
	if (r > 0)
		s->done += (size_t)r;
	return s->done == HELLO_SIZE;
}

static int run_connect(int boot_port, const char *host, int data_port,
		       int conns, int per, bool seq)
{
	static struct sock s[MAX_SOCKETS];
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)data_port) };
	int boot = boot_dial(boot_port), left = conns;
	char go;
	double t0;

	if (inet_pton(AF_INET, host, &to.sin_addr) != 1)
		bench_die("address");
	if (recv(boot, &go, 1, MSG_WAITALL) != 1)
		bench_die("bootstrap");
	t0 = bench_now_s();
	for (int i = 0; i < conns * per; i++)
		s[i].fd = -1;
	while (left) {
		left = 0;
		for (int c = 0; c < conns; c++) {
			bool all = true;

			/* seq: the next socket once the one before is done */
			for (int k = 0; k < per && (all || !seq); k++)
				all = step(&s[c * per + k], &to) && all;
			left += !all;
		}
		if (left)
			usleep(200);
		past_limit(t0);
	}
	printf("connector_ms %.3f\n", (bench_now_s() - t0) * 1e3);
	return 0;
}

int main(int argc, char **argv)
{
	bool seq;
	int conns, per;

	if (argc == 6 && !strcmp(argv[1], "accept")) {
		conns = atoi(argv[4]);
		per = atoi(argv[5]) + 1;
		if (conns < 1 || per < 1 || conns * per > MAX_SOCKETS)
			goto usage;
		return run_accept(atoi(argv[2]), atoi(argv[3]), conns * per);
	}
	if (argc == 8 && !strcmp(argv[1], "connect")) {
		conns = atoi(argv[5]);
		per = atoi(argv[6]) + 1;
		seq = !strcmp(argv[7], "seq");
		if (conns < 1 || per < 1 || conns * per > MAX_SOCKETS ||
		    (!seq && strcmp(argv[7], "par")))
			goto usage;
		return run_connect(atoi(argv[2]), argv[3], atoi(argv[4]), conns,
				   per, seq);
	}
usage:
	fprintf(stderr, "usage: tcp_setup accept BOOT_PORT DATA_PORT CONNS SOCKS\n"
		"       tcp_setup connect BOOT_PORT HOST DATA_PORT CONNS SOCKS "
		"seq|par\n");
	return 2;
}
