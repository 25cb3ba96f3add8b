/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc data path internals shared by its parts: requests and lifecycle
 * (tcp_xdc_data.c), the pool of data threads (tcp_xdc_pool.c), and what
 * they do with send streams (tcp_xdc_send.c) and receive streams
 * (tcp_xdc_recv.c).
 */
#ifndef TCP_XDC_PATH_H
#define TCP_XDC_PATH_H

#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "tcp_xdc.h"

#define SEQ_BITS (64 - TCP_XDC_OFFSET_BITS)
#define SEQ_MASK ((1ULL << SEQ_BITS) - 1)
#define OFFSET_MASK (TCP_XDC_MAX_MESSAGE - 1)
#define TOTAL_UNKNOWN UINT64_MAX
#define NO_WAIT UINT64_MAX

uint64_t xdc_now_ns(void);
const char *xdc_comm_kind(const struct tcp_xdc_comm *comm);
/* Records the first failure of a comm (logged when a request sees it). */
int xdc_comm_fail(struct tcp_xdc_comm *comm, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The comm's failure, WARNed the first time a request runs into it. */
int xdc_comm_error(struct tcp_xdc_comm *comm);
int xdc_stream_fail(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		    int err, const char *what);
int xdc_stream_syscall_fail(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, int err);
int xdc_stream_pending_error(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s);
/* The records of stream `index` keyed from a socket's secret; 0 or -errno. */
int xdc_crypt_new(const struct tcp_xdc_comm *comm, int index,
		  const uint8_t *secret, size_t secret_len,
		  uint32_t record_size, struct tcp_xdc_crypt **out);
void xdc_crypt_free(struct tcp_xdc_crypt **c);
/* Failed or closing: the pool threads leave it alone. */
bool xdc_comm_stopped(struct tcp_xdc_comm *comm);

/* tcp_xdc_pool.c */
int xdc_pool_attach(struct tcp_xdc_ctx *ctx, struct tcp_xdc_comm *comm);
/* Returns once no pool thread looks at the comm's streams any more; true
 * when it was the last comm open at the module's fini, which left the
 * context to it (tcp_xdc_ctx_free). */
bool xdc_pool_detach(struct tcp_xdc_comm *comm);
int xdc_pool_workers(const struct tcp_xdc_ctx *ctx);
/* Wakes the thread that sleeps on eventfd efd (a lane's, the linger's). */
void xdc_efd_wake(int efd);
void xdc_lane_wake(struct tcp_xdc_lane *l);

/* Takes the stream if nobody holds it; never waits. */
static inline bool xdc_stream_hold(struct tcp_xdc_stream *s)
{
	return !atomic_exchange(&s->held, true);
}

/*
 * The pool thread's side: it marks the stream passed before it tries, so
 * that the proxy thread, releasing after, sees the mark and wakes it.
 */
static inline bool xdc_stream_hold_or_pass(struct tcp_xdc_stream *s)
{
	atomic_store(&s->passed, true);
	if (!xdc_stream_hold(s))
		return false;
	atomic_store_explicit(&s->passed, false, memory_order_relaxed);
	return true;
}

/*
 * The proxy thread's release after its fast path: the pool thread takes
 * over when it passed the stream by meanwhile or when work is left on it.
 */
static inline void xdc_stream_hand_back(struct tcp_xdc_stream *s,
					bool work_left)
{
	atomic_store(&s->held, false);
	if (atomic_exchange(&s->passed, false) || work_left)
		xdc_lane_wake(s->lane);
}

static inline void xdc_stream_release(struct tcp_xdc_stream *s)
{
	atomic_store_explicit(&s->held, false, memory_order_release);
}

/* tcp_xdc_send.c: writes msg in clear or as records; bytes out or -1 with
 * errno (an encrypted stream counts only records written whole). */
ssize_t xdc_stream_send(struct tcp_xdc_stream *s, struct msghdr *msg);
/* tcp_xdc_send.c: one step of a send lane, its poll set in pfd; returns
 * how long its thread may sleep (-1: until woken, 0: not at all). */
int xdc_send_lane_step(struct tcp_xdc_lane *l, struct pollfd *pfd);
bool xdc_send_lane_has_work(struct tcp_xdc_lane *l);
/* isend's fast path on stream 0: true when it took the message (written
 * whole, or left to the pool thread it woke). */
bool xdc_send_inline(struct tcp_xdc_comm *comm, struct tcp_xdc_req *req);

/* tcp_xdc_recv.c: the same for receive lanes. */
int xdc_recv_lane_step(struct tcp_xdc_lane *l, struct pollfd *pfd);
/* Any thread: every stream ended, none of them left with a chunk of
 * message seq or earlier: what seq lacks never comes. */
bool xdc_recv_all_ended(struct tcp_xdc_comm *comm, uint64_t seq);
/* test()'s fast path: reads small chunks on stream 0 itself. */
void xdc_recv_inline(struct tcp_xdc_comm *comm);
/* ... and no more: stream 0 goes back to its data thread. */
void xdc_recv_inline_stop(struct tcp_xdc_comm *comm);

#endif
