/* SPDX-License-Identifier: MIT */
/*
 * The reference for tcp-xdc's small-message latency: a plain TCP ping-pong
 * between two processes on loopback, TCP_NODELAY, one socket, nothing else.
 * Prints the half round trip (median and mean, microseconds) for each mode:
 *   block  read() sleeps until the reply is there, as most programs do;
 *   busy   recv(MSG_DONTWAIT) in a loop, never leaving the core;
 *   yield  the same, yielding the core after each empty recv(), as NCCL's
 *          proxy thread yields after a pass over test() that found nothing;
 *   split  polled as busy, but each way on its own connection, as NCCL's
 *          send and receive comms are (a reply cannot carry the ACK of
 *          the message it answers);
 *   split-delayed-ack  the same with TCP_QUICKACK off on each receiving
 *          end, as tcp-xdc sets the stream its small messages take: the
 *          kernel then acknowledges every other small segment, not each.
 * Then what one empty poll costs, the call NCCL's proxy thread repeats
 * while a message is on its way: recv() into one buffer against recvmsg()
 * with two iovecs (a header and a read-ahead buffer), on an idle socket.
 *
 *   tcp_pingpong [SIZE] [ITERS]
 */
#include <errno.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

enum wait_mode {
	WAIT_BLOCK, WAIT_BUSY, WAIT_YIELD, WAIT_SPLIT, WAIT_SPLIT_DELACK,
	WAIT_MODES
};

static const char *const mode_names[WAIT_MODES] = {
	"block", "busy", "yield", "split", "split-delayed-ack",
};

static void xfer(int fd, char *buf, size_t len, bool send_it,
		 enum wait_mode mode)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send_it ?
			send(fd, buf + done, len - done, MSG_NOSIGNAL) :
			recv(fd, buf + done, len - done,
			     mode == WAIT_BLOCK ? 0 : MSG_DONTWAIT);

		if (n > 0)
			done += (size_t)n;
		else if (n == 0)
			die("peer closed");
		else if (errno != EAGAIN && errno != EINTR)
			die(send_it ? "send" : "recv");
		else if (mode == WAIT_YIELD)
			sched_yield();
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * One mode: the client times iters round trips, the server echoes.  The
 * client sends on fd[0]; replies come on fd[1] in split mode, else on fd[0].
 */
static void run(const int *fd, bool client, enum wait_mode mode, char *buf,
		size_t size, int iters, uint64_t *rtt)
{
	bool split = mode == WAIT_SPLIT || mode == WAIT_SPLIT_DELACK;
	int back = fd[split];
	int off = 0;

	/* the last mode: the setting stays with the sockets */
	if (mode == WAIT_SPLIT_DELACK &&
	    setsockopt(client ? back : fd[0], IPPROTO_TCP, TCP_QUICKACK, &off,
		       sizeof(off)))
		die("TCP_QUICKACK");

	for (int i = 0; i < iters + iters / 10; i++) {
		uint64_t t0 = now_ns();

		if (client) {
			xfer(fd[0], buf, size, true, mode);
			xfer(back, buf, size, false, mode);
			if (i >= iters / 10)
				rtt[i - iters / 10] = now_ns() - t0;
		} else {
			xfer(fd[0], buf, size, false, mode);
			xfer(back, buf, size, true, mode);
		}
	}
}

static void report(const char *mode, size_t size, uint64_t *rtt, int iters)
{
	double sum = 0;

	qsort(rtt, (size_t)iters, sizeof(*rtt), cmp_u64);
	for (int i = 0; i < iters; i++)
		sum += (double)rtt[i];
	printf("{\"mode\":\"%s\",\"size\":%zu,\"iters\":%d,"
	       "\"half_rtt_us_median\":%.2f,\"half_rtt_us_mean\":%.2f}\n",
	       mode, size, iters, (double)rtt[iters / 2] / 2000.0,
	       sum / iters / 2000.0);
}

/*
 * Nanoseconds a call, the best of three passes of n calls each way, on a
 * connection of its own whose peer stays open and silent.
 */
static void empty_polls(int lfd, const struct sockaddr_in *addr, int n)
{
	static char hdr[32], ahead[4096];
	struct iovec iov[2] = { { hdr, sizeof(hdr) }, { ahead, sizeof(ahead) } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };
	double best_recv = 1e30, best_recvmsg = 1e30;
	int peer = socket(AF_INET, SOCK_STREAM, 0), fd;

	if (peer < 0 || connect(peer, (const void *)addr, sizeof(*addr)))
		die("empty poll: connect");
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("empty poll: accept");
	for (int pass = 0; pass < 3; pass++) {
		uint64_t t0 = now_ns(), t1, t2;

		for (int i = 0; i < n; i++)
			if (recv(fd, ahead, sizeof(ahead), MSG_DONTWAIT) >= 0)
				die("empty poll: data on an idle socket");
		t1 = now_ns();
		for (int i = 0; i < n; i++)
			if (recvmsg(fd, &msg, MSG_DONTWAIT) >= 0)
				die("empty poll: data on an idle socket");
		t2 = now_ns();
		if ((double)(t1 - t0) / n < best_recv)
			best_recv = (double)(t1 - t0) / n;
		if ((double)(t2 - t1) / n < best_recvmsg)
			best_recvmsg = (double)(t2 - t1) / n;
	}
	printf("{\"mode\":\"empty-poll\",\"recv_ns\":%.0f,\"recvmsg_2iov_ns\":%.0f}\n",
	       best_recv, best_recvmsg);
	close(fd);
	close(peer);
}

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 8;
	int iters = argc > 2 ? atoi(argv[2]) : 20000;
	struct sockaddr_in addr = { .sin_family = AF_INET };
	socklen_t alen = sizeof(addr);
	int one = 1, lfd, fd[2], status;
	char *buf = calloc(1, size ? size : 1);
	uint64_t *rtt = calloc((size_t)iters, sizeof(*rtt));
	pid_t pid;

	if (!buf || !rtt || iters < 10)
		die("arguments");
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (void *)&addr, sizeof(addr)) ||
	    listen(lfd, 2) || getsockname(lfd, (void *)&addr, &alen))
		die("listen");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	/* two connections, accepted in the order they were made */
	for (int i = 0; i < 2; i++) {
		if (pid == 0) {
			fd[i] = accept(lfd, NULL, NULL);
		} else {
			fd[i] = socket(AF_INET, SOCK_STREAM, 0);
			if (fd[i] >= 0 &&
			    connect(fd[i], (void *)&addr, sizeof(addr)))
				die("connect");
		}
		if (fd[i] < 0 || setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY,
					    &one, sizeof(one)))
			die("socket");
	}
	for (int mode = 0; mode < WAIT_MODES; mode++) {
		run(fd, pid != 0, (enum wait_mode)mode, buf, size, iters, rtt);
		if (pid)
			report(mode_names[mode], size, rtt, iters);
	}
	if (pid == 0)
		_exit(0);
	empty_polls(lfd, &addr, 200000);
	close(fd[0]);
	close(fd[1]);
	free(buf);
	free(rtt);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && !WEXITSTATUS(status) ? 0 : 1;
}
