/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc send streams: chunks claimed from the shared cursor, written with
 * their headers by the pool threads (or a small one by the proxy thread
 * itself), the receiver's pings dropped, blocked streams watched for a dead
 * peer.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tcp_xdc_resume.h"
#include "tcp_xdc_send.h"
#include "tcp_xdc_stall.h"
#include "tcp_xdc_stream.h"

/* The full message number in the cursor; it is never behind by > 2^24. */
static uint64_t cursor_msg(uint64_t cursor, uint64_t posted)
{
	return posted - ((posted - (cursor >> TCP_XDC_OFFSET_BITS)) & SEQ_MASK);
}

static bool send_work_available(struct tcp_xdc_comm *comm)
{
	uint64_t cur = atomic_load(&comm->cursor);
	uint64_t posted = atomic_load(&comm->posted);

	return cursor_msg(cur, posted) != posted;
}

static void chunk_hdr_encode(struct tcp_xdc_stream *s)
{
	const struct tcp_xdc_chunk c = {
		.seq = s->seq, .total = s->total, .offset = s->offset,
		.len = s->len, .tag = s->tag,
	};

	tcp_xdc_chunk_encode(&s->wire, &c);
}

/*
 * Takes the next chunk for stream s, when it belongs to message only
 * (NO_WAIT: to any message); proxy: on NCCL's proxy thread.  A cursor
 * that still points into a message proves that message incomplete, so
 * its slot cannot be reused while we look at it: a successful CAS
 * validates what was read before.
 */
static bool chunk_claim(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			uint64_t only, bool proxy)
{
	uint64_t cur = atomic_load_explicit(&comm->cursor,
					    memory_order_acquire);

	for (;;) {
		uint64_t posted = atomic_load_explicit(&comm->posted,
						       memory_order_acquire);
		uint64_t msg = cursor_msg(cur, posted);
		struct tcp_xdc_req *req;
		uint64_t size, off, len, next, piece;

		if (msg == posted || (only != NO_WAIT && msg != only) ||
		    (s->sent && !xdc_sent_room(s)))
			return false;
		req = &comm->reqs[msg % TCP_XDC_MAX_REQUESTS];
		size = __atomic_load_n(&req->size, __ATOMIC_RELAXED);
		piece = __atomic_load_n(&req->piece, __ATOMIC_RELAXED);
		off = cur & OFFSET_MASK;
		len = size > off ? size - off : 0;
		if (len > piece)
			len = piece;
		if (off + len >= size)
			next = ((msg + 1) & SEQ_MASK) << TCP_XDC_OFFSET_BITS;
		else
			next = cur + len;
		if (!atomic_compare_exchange_weak_explicit(&comm->cursor, &cur,
				next, memory_order_acq_rel,
				memory_order_acquire))
			continue;
		s->req = req;
		s->seq = msg;
		s->total = size;
		s->offset = off;
		s->len = (uint32_t)len;
		s->tag = req->tag;
		s->src = req->data + off;
		s->hdr_done = 0;
		s->payload_done = 0;
		s->state = TCP_XDC_PAYLOAD;
		chunk_hdr_encode(s);
		xdc_prof_begin(s, req);
		if (s->sent)
			xdc_sent_push(comm, s, proxy);
		return true;
	}
}

/* The next chunk for an idle stream: one kept from a broken socket first. */
static bool chunk_next(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		       bool proxy)
{
	if (s->sent && xdc_sent_again(s)) {
		s->hdr_done = 0;
		s->payload_done = 0;
		s->state = TCP_XDC_PAYLOAD;
		chunk_hdr_encode(s);
		return true;
	}
	return chunk_claim(comm, s, NO_WAIT, proxy);
}

/*
 * Writes the stream's chunk, then takes and writes the next ones, at most
 * `claims` more (-1: any); proxy: on NCCL's proxy thread.  Returns 1 when
 * the socket is full, 0 when out of work (or of claims), or -errno.
 */
static int send_progress(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 int claims, bool proxy)
{
	for (;;) {
		struct iovec iov[2];
		struct msghdr msg = { .msg_iov = iov };
		struct tcp_xdc_req *req;
		ssize_t n;

		if (s->state == TCP_XDC_BROKEN || s->state == TCP_XDC_RESUMING)
			return 0;	/* its socket went meanwhile */
		if (s->state == TCP_XDC_IDLE &&
		    (s->peer_done || !claims-- ||
		     !chunk_next(comm, s, proxy)))
			return 0;
		if (s->hdr_done < sizeof(s->wire)) {
			iov[msg.msg_iovlen].iov_base =
				(char *)&s->wire + s->hdr_done;
			iov[msg.msg_iovlen++].iov_len =
				sizeof(s->wire) - s->hdr_done;
		}
		if (s->payload_done < s->len) {
			iov[msg.msg_iovlen].iov_base = (char *)s->src +
				s->payload_done;
			iov[msg.msg_iovlen++].iov_len =
				s->len - s->payload_done;
		}
		n = xdc_stream_send(s, &msg);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (s->sent)
					xdc_sent_reap(s);
				return 1;
			}
			if (errno == EINTR)
				continue;
			return xdc_stream_syscall_fail(comm, s, errno);
		}
		if (s->hdr_done < sizeof(s->wire)) {
			size_t h = sizeof(s->wire) - s->hdr_done;

			if ((size_t)n < h) {
				s->hdr_done += (size_t)n;
				continue;
			}
			s->hdr_done = sizeof(s->wire);
			n -= (ssize_t)h;
		}
		s->payload_done += (size_t)n;
		if (s->payload_done < s->len)
			continue;
		xdc_prof_end(s);
		req = s->req;
		s->req = NULL;
		s->state = TCP_XDC_IDLE;
		if (s->sent) {
			/* done now where it has a copy, else once the peer's
			 * kernel has all of it */
			xdc_sent_written(s);
			xdc_sent_reap(s);
			continue;
		}
		/* Last touch of the slot: the proxy may recycle it now. */
		atomic_fetch_add_explicit(&req->chunks_done, 1,
					  memory_order_release);
	}
}

/*
 * The receiver writes nothing but pings on a data stream: they only prove
 * the link alive (our kernel acknowledges them) and are dropped here.
 */
/*
 * The receiver closed this stream in order: it wants nothing more.  No
 * error yet: a chunk it already read may still be counted by another
 * thread, and test() must not fail that request.  The stream takes no new
 * chunk; one still being written fails on the socket.  Once every stream
 * is closed, what is not written never will be (req_test).
 *
 * Resuming, the chunks the receiver took are done only once reaped, and
 * its FIN carries the acknowledgement of all it took: reaped here, before
 * the end is counted, test() finds them done whenever it sees every
 * stream ended (a receiver with bytes unread at close resets instead).
 */
static int send_peer_closed(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s)
{
	if (!s->peer_done) {
		if (s->sent)
			xdc_sent_reap(s);
		s->peer_done = true;
		atomic_fetch_add_explicit(&comm->ended, 1,
					  memory_order_acq_rel);
	}
	return 0;
}

static int send_drain_pings(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s)
{
	int ret = tcp_xdc_pings_take(s->fd, &s->stall);

	if (ret == 1 && comm->rejoin && !tcp_xdc_peer_fin(s->fd))
		return xdc_stream_syscall_fail(comm, s, ETIMEDOUT);
	if (ret == 1)
		return send_peer_closed(comm, s);
	return ret < 0 ? xdc_stream_syscall_fail(comm, s, -ret) : 0;
}

static int send_check_events(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s, short revents)
{
	if (revents & POLLERR)
		return xdc_stream_pending_error(comm, s);
	if ((revents & (POLLIN | POLLRDHUP | POLLHUP)) && !s->peer_done)
		return send_drain_pings(comm, s);
	return 0;
}

/*
 * The sending side sets no TCP_USER_TIMEOUT: Linux applies it to zero-window
 * probing too and would drop the connection to a receiver that is alive but
 * late (a rank still loading its model).  Instead a stream blocked on its
 * socket fails once for timeout_ms it wrote nothing and the peer
 * acknowledged nothing, with data in flight or, at a zero window, without a
 * word from the peer: a live receiver pings every stream it does not read,
 * and its kernel acknowledges data as it arrives, so only a dead peer or a
 * dead link stays silent (tcp_xdc_stall_check).  A lane looks at its
 * blocked streams every ping_busy_ns.
 */
struct stall_round {
	uint64_t now;
	bool due;
	bool restart;			/* the lane was not busy before */
};

static struct stall_round stall_round_begin(struct tcp_xdc_lane *l)
{
	struct stall_round r = { 0 };

	if (!l->comm->timeout_ms)
		return r;
	r.now = xdc_now_ns();
	r.due = r.now >= l->next_check_ns;
	r.restart = !l->next_check_ns;
	return r;
}

/* How long the lane may sleep as far as its stall checks go. */
static int stall_round_end(struct tcp_xdc_lane *l, const struct stall_round *r,
			   bool busy)
{
	uint64_t period = l->comm->ping_busy_ns;

	if (!busy || !l->comm->timeout_ms) {
		l->next_check_ns = 0;
		return -1;
	}
	if (r->due)
		l->next_check_ns = r->now + period;
	return (int)((l->next_check_ns - r->now) / 1000000) + 1;
}

/* Data in flight that a stall check watches: a chunk being written, or
 * (resuming) chunks written whole that the peer has not acknowledged. */
static bool send_in_flight(const struct tcp_xdc_stream *s)
{
	return s->state == TCP_XDC_PAYLOAD ||
	       (s->sent && s->state == TCP_XDC_IDLE &&
		s->sent_head != s->sent_next);
}

/* One held stream: events, then whatever it can write.  0 or -errno. */
static int send_stream_step(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s,
			    const struct stall_round *r, int *sleep_ms)
{
	short revents = s->revents;
	int ret = 0;

	s->revents = 0;
	if (s->state == TCP_XDC_BROKEN || s->state == TCP_XDC_RESUMING) {
		ret = xdc_send_resume_step(comm, s, r->now ? r->now :
					   xdc_now_ns(), sleep_ms);
		if (ret || s->state != TCP_XDC_IDLE)
			return ret;
		revents = 0;
	}
	if (revents & ~POLLOUT)
		ret = send_check_events(comm, s, revents);
	/* a long path: one chunk a stream at a time, so that each stream of
	 * the lane takes its share, none idles (its window would start over)
	 * and none keeps what another could send sooner */
	if (!ret && (s->state == TCP_XDC_IDLE || revents))
		ret = send_progress(comm, s, comm->notsent_lowat ? 1 : -1,
				    false);
	if (ret < 0 || s->state == TCP_XDC_BROKEN)
		return ret;
	/* kept chunks and no room for more: look for acknowledgements soon */
	if (s->sent && s->state == TCP_XDC_IDLE && !xdc_sent_room(s) &&
	    *sleep_ms != 0)
		*sleep_ms = 1;
	/* kept chunks whose sends are done wait for no test() to reap them:
	 * what the peer has is no data in flight */
	if (r->due && s->sent && s->state == TCP_XDC_IDLE)
		xdc_sent_reap(s);
	if (r->due && send_in_flight(s) &&
	    tcp_xdc_stall_check(s->fd, s->tx_bytes, &s->stall, r->now,
				comm->rejoin ? (int)comm->stall_ms :
					       comm->timeout_ms, r->restart)) {
		char what[96];

		mesh_count(&s->m_stalls, 1);
		snprintf(what, sizeof(what),
			 "no acknowledgement and no word from the peer for %d ms",
			 comm->rejoin ? (int)comm->stall_ms : comm->timeout_ms);
		return comm->rejoin ? xdc_stream_break(comm, s, ETIMEDOUT, what) :
				      xdc_stream_syscall_fail(comm, s, ETIMEDOUT);
	}
	return 0;
}

static short send_events(const struct tcp_xdc_stream *s)
{
	if (s->state == TCP_XDC_BROKEN)
		return 0;
	if (s->state == TCP_XDC_RESUMING)
		return s->resume_done < TCP_XDC_RESUME_SIZE ? POLLIN : POLLOUT;
	/* A stream holding a chunk is blocked on its socket; one the peer
	 * closed has nothing more to read. */
	return (short)((s->peer_done ? 0 : POLLIN | POLLRDHUP) |
		       (s->state == TCP_XDC_PAYLOAD ? POLLOUT : 0));
}

int xdc_send_lane_step(struct tcp_xdc_lane *l, struct pollfd *pfd)
{
	struct tcp_xdc_comm *comm = l->comm;
	struct stall_round r = stall_round_begin(l);
	bool idle = false, busy = false;
	int sleep_ms = -1, ms;

	for (int i = 0; i < l->nstreams; i++) {
		struct tcp_xdc_stream *s = l->streams[i];
		bool was_out;
		int ret;

		pfd[i] = (struct pollfd){ .fd = -1 };
		/*
		 * Held by the proxy thread (test() reaping its chunks): it
		 * may be blocked with data in flight, so it keeps the lane
		 * busy.  Else, with its lane-mates broken, every such pass
		 * would restart the lane's stall checks, and a stream
		 * blocked through an outage would never be found stalled.
		 */
		if (!xdc_stream_hold_or_pass(s)) {
			busy = true;
			continue;
		}
		was_out = s->state == TCP_XDC_BROKEN;
		ret = send_stream_step(comm, s, &r, &sleep_ms);
		/* broken just now: come back to dial it at once */
		if (!ret && !was_out && s->state == TCP_XDC_BROKEN)
			sleep_ms = 0;
		pfd[i].events = send_events(s);
		pfd[i].fd = pfd[i].events && !ret ? s->fd : -1;
		idle |= s->state == TCP_XDC_IDLE && !s->peer_done;
		busy |= send_in_flight(s);
		xdc_stream_release(s);
		if (ret)
			return 0;
	}
	if (idle) {
		/* Pairs with the posted store in isend. */
		atomic_store(&l->want_work, 1);
		if (send_work_available(comm)) {
			atomic_store(&l->want_work, 0);
			return 0;
		}
	}
	ms = stall_round_end(l, &r, busy);
	return sleep_ms >= 0 && (ms < 0 || sleep_ms < ms) ? sleep_ms : ms;
}

bool xdc_send_lane_has_work(struct tcp_xdc_lane *l)
{
	return l->comm->is_send &&
	       atomic_load_explicit(&l->want_work, memory_order_relaxed) &&
	       send_work_available(l->comm);
}

/*
 * A message of one chunk goes out from the proxy thread, on stream 0 when
 * that is idle and no earlier chunk waits for a stream: no hand-off to a
 * pool thread and no wake-up, which on loopback cost more than the write.
 * A socket too full for all of it leaves the rest to the pool thread.
 */
bool xdc_send_inline(struct tcp_xdc_comm *comm, struct tcp_xdc_req *req)
{
	struct tcp_xdc_stream *s = &comm->streams[0];
	bool took = false;

	if (!xdc_stream_hold(s))
		return false;
	/* kept chunks to write again go first, and are the data thread's */
	if (s->state == TCP_XDC_IDLE && !s->peer_done &&
	    (!s->sent || s->sent_next == atomic_load(&s->sent_tail)) &&
	    chunk_claim(comm, s, req->seq, true)) {
		took = true;
		/* with copies kept, the next messages' chunks are the data
		 * threads': no large copy here */
		send_progress(comm, s, comm->keep_ring ? 0 : -1, true);
	}
	xdc_stream_hand_back(s, s->state != TCP_XDC_IDLE);
	return took;
}
