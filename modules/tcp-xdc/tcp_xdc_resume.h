/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc resuming (tcp_xdc_resume.c): a stream's faults, streams that
 * break and are dialed anew, and the chunks a send stream keeps until
 * they are acknowledged; above one stream's socket and the window, below
 * the lanes.
 * Every function here runs on the thread that holds the stream, unless it
 * says otherwise.
 */
#ifndef TCP_XDC_RESUME_H
#define TCP_XDC_RESUME_H

#include "tcp_xdc_state.h"

/*
 * A socket error err (positive errno) of s, in words, and then a break
 * (below) or the comm's failure.
 */
int xdc_stream_syscall_fail(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, int err);
/* The same for the pending error of a socket that poll flagged POLLERR. */
int xdc_stream_pending_error(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s);
/*
 * A fault of s (positive errno, what: in words): with resuming on and a
 * fault of the path, the stream is out (its socket reset) and 0 comes
 * back; else the comm fails as without resuming.
 */
int xdc_stream_break(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		     int err, const char *what);
/* Fails the comm once its outage has lasted outage_ms; else 0. */
int xdc_outage_check(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		     uint64_t now);

/* send: the chunk s just took (payload at s->src) is kept, its bytes
 * copied into the stream's ring where there is room; proxy: NCCL's proxy
 * thread took it, which copies small chunks only */
void xdc_sent_push(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		   bool proxy);
bool xdc_sent_room(const struct tcp_xdc_stream *s);
/* send: loads the next kept chunk to write again (its payload at
 * s->src); false when none */
bool xdc_sent_again(struct tcp_xdc_stream *s);
/* send: the chunk being written went out whole; one with a copy counts
 * towards its request now */
void xdc_sent_written(struct tcp_xdc_stream *s);
/* send: drops what the peer's kernel acknowledged, finishing requests */
void xdc_sent_reap(struct tcp_xdc_stream *s);
/* any thread: whether s keeps unacknowledged chunks */
bool xdc_sent_unacked(const struct tcp_xdc_stream *s);
/* the proxy thread: reaps every stream no data thread holds */
void xdc_send_reap_all(struct tcp_xdc_comm *comm);
/* send: a broken or resuming stream's step; lowers *sleep_ms to its tick */
int xdc_send_resume_step(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 uint64_t now, int *sleep_ms);

/* recv, lane 0's thread: hands sockets dialed anew to their streams */
void xdc_recv_take(struct tcp_xdc_comm *comm, uint64_t now, int *sleep_ms);
/* recv: asks on a socket dialed anew, reads the answer, and switches to
 * it once the old one gave the chunks the sender saw acknowledged */
int xdc_recv_resume_step(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 uint64_t now);
/* recv: a parked stream whose socket was reset or failed: out as a
 * reset stream is (the sender dials anew, or it is gone), while what its
 * old socket holds waits for its receive; 0 */
int xdc_recv_parked_reset(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s);
/* recv: a parked stream's receive is posted: it reads its chunk */
void xdc_recv_unpark(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s);
/* recv: whether the old socket may be read: not while the answer to our
 * question is out, nor past where the sender goes on */
static inline bool xdc_recv_old_readable(const struct tcp_xdc_stream *s)
{
	return s->new_fd < 0 || (s->confirmed && s->chunks < s->resume_to);
}

#endif
