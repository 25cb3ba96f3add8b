/* SPDX-License-Identifier: MIT */
/*
 * Closed send streams that still owe the peer data.
 *
 * close_send() shuts a stream down for writing and hands it over here when
 * every completed isend may still sit in the socket buffer.  One thread per
 * module context reads and drops the receiver's pings (an unread byte at
 * close() would make Linux reset the connection and drop what is unsent),
 * and closes a stream once the peer acknowledged everything including our
 * FIN, once the peer closed or reset it, or once it looks dead: nothing
 * acknowledged for timeout_ms.
 *
 * A resuming comm whose completed sends are still copies the peer has not
 * acknowledged comes here whole (closing): the pool drives it on, dialing
 * its streams anew through an outage, and this thread finishes its close
 * (the step its owner handed over) once the peer has everything, the comm failed, or
 * fini's wait ran out.  fini() waits for both at most timeout_ms (30 s
 * when 0), then closes what is left.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_xdc_linger.h"
#include "tcp_xdc_stall.h"

#define LINGER_MIN_POLL_MS 1
#define LINGER_MAX_POLL_MS 100
#define LINGER_FINI_DEFAULT_MS 30000

struct linger_fd {
	int fd;
	struct tcp_xdc_stall stall;
	char peer[64];
};

/* A closing comm and the step that finishes its close. */
struct linger_comm {
	struct tcp_xdc_comm *comm;
	tcp_xdc_close_fn *close_step;
};

struct tcp_xdc_linger {
	pthread_t tid;
	int efd;
	int timeout_ms;
	pthread_mutex_t lock;
	/* under lock: streams and comms handed over, not yet taken by the
	 * thread */
	struct linger_fd *pending;
	int npending, cap_pending;
	struct linger_comm *comms_pending;
	int ncomms_pending, cap_comms_pending;
	bool stop;
	uint64_t deadline_ns;
	/* the thread's own */
	struct linger_fd *active;
	int nactive, cap_active;
	struct linger_comm *comms;
	int ncomms, cap_comms;
};

/* Room for need elements of size bytes in *arr. */
static int grow(void *arr, int *cap, int need, size_t size)
{
	void *p;
	int n = *cap ? *cap : 16;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	p = realloc(*(void **)arr, (size_t)n * size);
	if (!p)
		return -ENOMEM;
	*(void **)arr = p;
	*cap = n;
	return 0;
}

/* Takes the pings; true once the peer closed or reset the stream. */
static bool linger_drain(struct linger_fd *e)
{
	return tcp_xdc_pings_take(e->fd, &e->stall) != 0;
}

/* True when the stream is finished with, for good or bad. */
static bool linger_step(struct tcp_xdc_linger *l, struct linger_fd *e,
			uint64_t now)
{
	int outq = 0;

	if (linger_drain(e))
		return true;
	if (ioctl(e->fd, SIOCOUTQ, &outq) || outq <= 0)
		return true;
	if (!l->timeout_ms ||
	    !tcp_xdc_stall_check(e->fd, 0, &e->stall, now, l->timeout_ms,
				 false))
		return false;
	MESH_INFO("closed send stream to %s: %d bytes unacknowledged for %d ms, peer gone; dropping them",
		  e->peer, outq, l->timeout_ms);
	return true;
}

/* Appends the n elements of size bytes at *from to *to (count and room
 * in *nto, *cap); leaves them where they are when out of memory. */
static void move_all(void *to, int *nto, int *cap, const void *from, int *n,
		     size_t size)
{
	if (!*n || grow(to, cap, *nto + *n, size))
		return;
	memcpy((char *)*(void **)to + (size_t)*nto * size, from,
	       (size_t)*n * size);
	*nto += *n;
	*n = 0;
}

/* Moves what was handed over to the thread's own lists; l->lock held. */
static void take_handed(struct tcp_xdc_linger *l)
{
	move_all(&l->active, &l->nactive, &l->cap_active, l->pending,
		 &l->npending, sizeof(*l->active));
	move_all(&l->comms, &l->ncomms, &l->cap_comms, l->comms_pending,
		 &l->ncomms_pending, sizeof(*l->comms));
}

static void linger_take_pending(struct tcp_xdc_linger *l, bool *stop,
				uint64_t *deadline)
{
	pthread_mutex_lock(&l->lock);
	take_handed(l);
	*stop = l->stop;
	*deadline = l->deadline_ns;
	pthread_mutex_unlock(&l->lock);
}

/* Closes what is finished; returns true when anything changed. */
static bool linger_pass(struct tcp_xdc_linger *l, bool expired)
{
	uint64_t now = xdc_now_ns();
	bool changed = false;

	/* first the comms: a finished one hands its streams on, below */
	for (int i = 0; i < l->ncomms;) {
		struct linger_comm *c = &l->comms[i];

		if (!c->close_step(c->comm, expired)) {
			i++;
			continue;
		}
		l->comms[i] = l->comms[--l->ncomms];
		changed = true;
	}
	/* the streams those comms handed over */
	pthread_mutex_lock(&l->lock);
	take_handed(l);
	pthread_mutex_unlock(&l->lock);

	for (int i = 0; i < l->nactive;) {
		struct linger_fd *e = &l->active[i];

		if (!linger_step(l, e, now) && !expired) {
			i++;
			continue;
		}
		if (expired)
			MESH_INFO("closed send stream to %s: unloading, dropping what the peer has not acknowledged",
				  e->peer);
		linger_drain(e);
		close(e->fd);
		*e = l->active[--l->nactive];
		changed = true;
	}
	return changed;
}

/* Sleeps until a stream has input, the eventfd is written, or poll_ms. */
static void linger_sleep(struct tcp_xdc_linger *l, struct pollfd **pfd,
			 int *cap, int poll_ms)
{
	int n = l->nactive + 1;
	uint64_t count;

	if (n > *cap) {
		struct pollfd *p = realloc(*pfd, (size_t)n * 2 * sizeof(*p));

		if (!p) {
			poll(NULL, 0, poll_ms < 0 ? LINGER_MAX_POLL_MS : poll_ms);
			return;
		}
		*pfd = p;
		*cap = n * 2;
	}
	(*pfd)[0].fd = l->efd;
	(*pfd)[0].events = POLLIN;
	for (int i = 1; i < n; i++) {
		(*pfd)[i].fd = l->active[i - 1].fd;
		(*pfd)[i].events = POLLIN | POLLRDHUP;
	}
	if (poll(*pfd, (nfds_t)n, poll_ms) > 0 && ((*pfd)[0].revents & POLLIN) &&
	    read(l->efd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		MESH_INFO("eventfd read: %s", strerror(errno));
}

static void *linger_thread(void *arg)
{
	struct tcp_xdc_linger *l = arg;
	struct pollfd *pfd = NULL;
	int cap = 0, poll_ms = LINGER_MIN_POLL_MS;

	for (;;) {
		int before = l->nactive + l->ncomms;
		uint64_t deadline;
		bool stop, changed;

		linger_take_pending(l, &stop, &deadline);
		changed = l->nactive + l->ncomms != before;
		changed |= linger_pass(l, stop && xdc_now_ns() >= deadline);
		if (stop && !l->nactive && !l->ncomms)
			break;
		/* Acknowledgements wake no one: look again soon after a
		 * change, then back off. */
		if (changed)
			poll_ms = LINGER_MIN_POLL_MS;
		else
			poll_ms = poll_ms * 2 < LINGER_MAX_POLL_MS ?
				  poll_ms * 2 : LINGER_MAX_POLL_MS;
		linger_sleep(l, &pfd, &cap,
			     l->nactive || l->ncomms ? poll_ms : -1);
	}
	free(pfd);
	return NULL;
}

static struct tcp_xdc_linger *linger_start(struct tcp_xdc_ctx *ctx)
{
	struct tcp_xdc_linger *l = calloc(1, sizeof(*l));
	sigset_t all, old;
	int ret;

	if (!l)
		return NULL;
	l->timeout_ms = ctx->timeout_ms;
	l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->efd < 0) {
		MESH_WARN("eventfd: %s", strerror(errno));
		free(l);
		return NULL;
	}
	pthread_mutex_init(&l->lock, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pthread_create(&l->tid, NULL, linger_thread, l);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		MESH_WARN("cannot start the thread for closed streams: %s",
			  strerror(ret));
		pthread_mutex_destroy(&l->lock);
		close(l->efd);
		free(l);
		return NULL;
	}
	pthread_setname_np(l->tid, "xdc-linger");
	return l;
}

/* The thread, started with the first close that needs it; NULL when it
 * cannot start or the module is finishing. */
static struct tcp_xdc_linger *linger_get(struct tcp_xdc_ctx *ctx)
{
	struct tcp_xdc_linger *l;

	pthread_mutex_lock(&ctx->linger_lock);
	if (!ctx->linger && !ctx->finished)
		ctx->linger = linger_start(ctx);
	l = ctx->linger;
	pthread_mutex_unlock(&ctx->linger_lock);
	return l;
}

int tcp_xdc_linger_add(struct tcp_xdc_ctx *ctx, const char *peer,
		       const int *fds, int n)
{
	struct tcp_xdc_linger *l = linger_get(ctx);
	uint64_t now = xdc_now_ns();
	int ret;

	if (!l)
		return -ENOMEM;
	pthread_mutex_lock(&l->lock);
	ret = grow(&l->pending, &l->cap_pending, l->npending + n,
		   sizeof(*l->pending));
	for (int i = 0; !ret && i < n; i++) {
		struct linger_fd *e = &l->pending[l->npending++];

		e->fd = fds[i];
		e->stall.tx = 0;
		e->stall.outq = -2;
		e->stall.since = now;
		snprintf(e->peer, sizeof(e->peer), "%s", peer);
	}
	pthread_mutex_unlock(&l->lock);
	if (!ret)
		xdc_efd_wake(l->efd);
	return ret;
}

int tcp_xdc_linger_add_comm(struct tcp_xdc_ctx *ctx,
			    struct tcp_xdc_comm *comm,
			    tcp_xdc_close_fn *close_step)
{
	struct tcp_xdc_linger *l = linger_get(ctx);
	int ret;

	if (!l)
		return -ENOMEM;
	pthread_mutex_lock(&l->lock);
	ret = grow(&l->comms_pending, &l->cap_comms_pending,
		   l->ncomms_pending + 1, sizeof(*l->comms_pending));
	if (!ret)
		l->comms_pending[l->ncomms_pending++] =
			(struct linger_comm){ comm, close_step };
	pthread_mutex_unlock(&l->lock);
	if (!ret)
		xdc_efd_wake(l->efd);
	return ret;
}

void tcp_xdc_linger_fini(struct tcp_xdc_ctx *ctx)
{
	struct tcp_xdc_linger *l = ctx->linger;
	int wait_ms = ctx->timeout_ms ? ctx->timeout_ms :
					LINGER_FINI_DEFAULT_MS;

	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	l->deadline_ns = xdc_now_ns() + (uint64_t)wait_ms * 1000000ULL;
	pthread_mutex_unlock(&l->lock);
	xdc_efd_wake(l->efd);
	pthread_join(l->tid, NULL);
	pthread_mutex_destroy(&l->lock);
	close(l->efd);
	free(l->pending);
	free(l->active);
	free(l->comms_pending);
	free(l->comms);
	free(l);
	ctx->linger = NULL;
}
