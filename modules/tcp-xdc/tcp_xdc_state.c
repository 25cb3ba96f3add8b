/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's shared state below every other layer: the host it logs
 * through, the clock, a comm's failure and the wake-up of a lane's
 * thread, which any thread may call and which reach nothing above.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tcp_xdc_state.h"

/* The host that loaded the module: set by init, read by every file. */
const struct mesh_host *tcp_xdc_host;

const char *xdc_comm_kind(const struct tcp_xdc_comm *comm)
{
	return comm->is_send ? "send" : "recv";
}

uint64_t xdc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* Only fails when the counter is saturated: a wakeup is pending. */
void xdc_efd_wake(int efd)
{
	uint64_t one = 1;

	if (write(efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		MESH_INFO("eventfd write: %s", strerror(errno));
}

void xdc_lane_wake(struct tcp_xdc_lane *l)
{
	xdc_efd_wake(l->wake_fd);
}

/* ---- failure ---- */

static void lanes_wake_all(struct tcp_xdc_comm *comm)
{
	for (int i = 0; i < comm->nlanes; i++)
		if (comm->lanes[i].wake_fd >= 0)
			xdc_lane_wake(&comm->lanes[i]);
}

/*
 * Records the first failure of a comm.  It becomes a WARN when a request
 * observes it (tcp_xdc_data.c, comm_error): a peer that closes an idle
 * connection at the end of a job is no error.  The sockets are shut down
 * so the peer notices too.
 */
int xdc_comm_fail(struct tcp_xdc_comm *comm, int err, const char *fmt, ...)
{
	int expected = TCP_XDC_HEALTHY;
	char what[160];
	va_list ap;

	if (!atomic_compare_exchange_strong(&comm->fail_state, &expected,
					    TCP_XDC_FAILED))
		return err;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(comm->errmsg, sizeof(comm->errmsg), "%s comm %u %s %s: %s",
		 xdc_comm_kind(comm), comm->id, comm->is_send ? "to" : "from",
		 comm->peer, what);
	atomic_store_explicit(&comm->error, err, memory_order_release);
	MESH_INFO("%s", comm->errmsg);
	for (int i = 0; i < comm->nstreams; i++)
		shutdown(comm->streams[i].fd, SHUT_RDWR);
	lanes_wake_all(comm);
	return err;
}

int xdc_stream_fail(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		    int err, const char *what)
{
	s->state = TCP_XDC_DEAD;
	if (s->req)
		return xdc_comm_fail(comm, err, "stream %d/%d: %s (message %llu)",
				     s->index, comm->nstreams, what,
				     (unsigned long long)s->seq);
	return xdc_comm_fail(comm, err, "stream %d/%d: %s", s->index,
			     comm->nstreams, what);
}

bool xdc_comm_stopped(struct tcp_xdc_comm *comm)
{
	return atomic_load_explicit(&comm->stop, memory_order_acquire) ||
	       atomic_load_explicit(&comm->error, memory_order_relaxed);
}
