/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc receive streams: chunk headers checked, payload read straight
 * into its posted receive (by the pool threads, or a small chunk by the
 * proxy thread in test()); a chunk whose receive is not posted yet stored
 * in the stream's ring on a long path, else parked until it is; streams
 * the peer ended, and pings that prove the link alive.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "tcp_xdc_ahead.h"
#include "tcp_xdc_crypt.h"
#include "tcp_xdc_recv.h"
#include "tcp_xdc_resume.h"
#include "tcp_xdc_stall.h"
#include "tcp_xdc_window.h"

static int header_parse(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	struct tcp_xdc_chunk c;
	char what[128];
	int ret = tcp_xdc_chunk_parse(&s->wire, comm->chunk_size, s->last_seq,
				      &c);

	s->seq = c.seq;
	s->total = c.total;
	s->offset = c.offset;
	s->len = c.len;
	s->tag = c.tag;
	s->payload_done = 0;
	if (ret) {
		snprintf(what, sizeof(what),
			 "bad chunk header: message %llu, offset %llu, length %u, total %llu",
			 (unsigned long long)s->seq,
			 (unsigned long long)s->offset, s->len,
			 (unsigned long long)s->total);
		return xdc_stream_fail(comm, s, -EPROTO, what);
	}
	s->last_seq = s->seq;
	s->hdr_done = 0;
	return 0;
}

/*
 * The posted receive a chunk of message seq (total bytes, tag) belongs
 * to, checking size and tag, in *out; 0 or what failed the comm.
 */
static int chunk_req(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		     uint64_t seq, uint64_t total, int32_t tag,
		     struct tcp_xdc_req **out)
{
	struct tcp_xdc_req *req = &comm->reqs[seq % TCP_XDC_MAX_REQUESTS];
	uint64_t expected = TOTAL_UNKNOWN;
	char what[160];
	int err = -EPROTO;

	if (req->seq != seq)
		snprintf(what, sizeof(what),
			 "chunk of message %llu, slot holds message %llu",
			 (unsigned long long)seq,
			 (unsigned long long)req->seq);
	else if (total > req->size) {
		snprintf(what, sizeof(what),
			 "message %llu: peer sends %llu bytes, receive posted for %zu",
			 (unsigned long long)seq, (unsigned long long)total,
			 req->size);
		err = -EMSGSIZE;
	} else if (tag != req->tag)
		snprintf(what, sizeof(what),
			 "message %llu: peer sends tag %d, receive posted for tag %d",
			 (unsigned long long)seq, tag, req->tag);
	else if (!atomic_compare_exchange_strong(&req->total, &expected,
						 total) &&
		 expected != total)
		snprintf(what, sizeof(what),
			 "message %llu: chunks disagree on its size (%llu, %llu)",
			 (unsigned long long)seq,
			 (unsigned long long)expected,
			 (unsigned long long)total);
	else {
		*out = req;
		return 0;
	}
	return xdc_stream_fail(comm, s, err, what);
}

/* A chunk of len bytes is in req: test() may see it. */
static void req_count(struct tcp_xdc_req *req, uint32_t len)
{
	atomic_fetch_add_explicit(&req->bytes_done, len, memory_order_release);
	atomic_fetch_add_explicit(&req->chunks_done, 1, memory_order_release);
}

/* Binds a parsed chunk to its posted receive. */
static int chunk_attach(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	struct tcp_xdc_req *req;
	int ret = chunk_req(comm, s, s->seq, s->total, s->tag, &req);

	if (ret)
		return ret;
	s->req = req;
	xdc_recv_unpark(comm, s);
	xdc_prof_begin(s, req);
	return 0;
}

/*
 * A parsed chunk whose receive is not posted: into the stream's ring,
 * where the comm has one (a long path) and it has room; false: it stays
 * parked.  Only a pool thread stores (max_len SIZE_MAX in recv_progress):
 * what the proxy thread reads in test() is posted already.
 */
static bool chunk_store(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	struct tcp_xdc_stored *e;
	size_t off;

	if (!comm->keep_ring ||
	    s->stored_tail - s->stored_head >= TCP_XDC_STORED_MAX)
		return false;
	if (!s->stored) {
		s->stored = calloc(TCP_XDC_STORED_MAX, sizeof(*s->stored));
		if (!s->stored)
			return false;
	}
	if ((!s->keep.buf && xdc_keep_make(comm, s)) ||
	    !tcp_xdc_keep_alloc(&s->keep, s->len, &off))
		return false;
	e = &s->stored[s->stored_tail % TCP_XDC_STORED_MAX];
	*e = (struct tcp_xdc_stored){ .seq = s->seq, .total = s->total,
				      .offset = s->offset, .len = s->len,
				      .tag = s->tag, .keep_off = off };
	if (s->stored_head == s->stored_tail)
		atomic_store(&s->stored_seq, s->seq);
	s->stored_tail++;
	s->storing = true;
	xdc_recv_unpark(comm, s);
	return true;
}

static void chunk_finish(struct tcp_xdc_stream *s)
{
	struct tcp_xdc_req *req = s->req;

	s->state = TCP_XDC_IDLE;
	s->chunks++;
	if (s->storing) {	/* the newest stored chunk is whole */
		s->storing = false;
		return;
	}
	xdc_prof_end(s);
	s->req = NULL;
	req_count(req, s->len);
}

/* The oldest stored chunk read whole, if any. */
static struct tcp_xdc_stored *stored_first(struct tcp_xdc_stream *s)
{
	uint64_t whole = s->stored_tail - (s->storing ? 1 : 0);

	return s->stored_head < whole ?
		       &s->stored[s->stored_head % TCP_XDC_STORED_MAX] : NULL;
}

/*
 * Stored chunks whose receives are posted now go where they belong,
 * oldest first: a stream's messages never go back, so the first one
 * still waiting holds back those behind it, which wait for later
 * receives.  0 or -errno.
 */
static int stored_deliver(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	uint64_t posted = atomic_load_explicit(&comm->posted,
					       memory_order_acquire);
	struct tcp_xdc_stored *e;
	int ret = 0;

	while ((e = stored_first(s))) {
		if (!e->lost) {
			struct tcp_xdc_req *req;
			void *ev;

			if (posted <= e->seq)
				break;
			ret = chunk_req(comm, s, e->seq, e->total, e->tag,
					&req);
			if (ret)
				break;
			ev = xdc_prof_part(req, s->index, e->len);
			if (e->len)	/* an empty message may have no buffer */
				memcpy(req->data + e->offset,
				       (char *)s->keep.buf + e->keep_off,
				       e->len);
			xdc_prof_stop(ev);
			req_count(req, e->len);
		}
		tcp_xdc_keep_free(&s->keep, e->keep_off, e->len);
		s->stored_head++;
	}
	/* after the counts: test() finds a message either counted or still
	 * stored (xdc_recv_all_ended) */
	atomic_store(&s->stored_seq, s->stored_head == s->stored_tail ? NO_WAIT :
		     s->stored[s->stored_head % TCP_XDC_STORED_MAX].seq);
	return ret;
}

/*
 * The peer ended a stream.  Between chunks that is no error: a sender that
 * closes shuts its streams down behind the last chunk, and the other
 * streams may still hold data for receives to come.  Whether anything is
 * missing is only known once every stream has ended (req_test).  A reset
 * counts the same: the data before it was read first, and a sender whose
 * kernel received our pings after it closed resets instead of closing.
 * Returns 0 (nothing more to read) or -errno.
 */
static int recv_eof(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		    bool reset)
{
	/* resuming, a reset is the path's (a middlebox, a lost NAT
	 * mapping) or a sender that gave up on this socket: it dials anew */
	if (reset && comm->rejoin)
		return xdc_stream_syscall_fail(comm, s, ECONNRESET);
	/* an end that is no FIN: the socket failed and another call (a
	 * ping) took its error, which leaves reads at end of file */
	if (comm->rejoin && !tcp_xdc_peer_fin(s->fd))
		return xdc_stream_syscall_fail(comm, s, ETIMEDOUT);
	if (s->state != TCP_XDC_IDLE || s->hdr_done)
		return xdc_stream_fail(comm, s, -ECONNRESET, reset ?
			"connection reset by peer in the middle of a chunk" :
			"connection closed by peer in the middle of a chunk");
	s->state = TCP_XDC_ENDED;
	if (s->end_early) {	/* counted while parked: now it is done */
		atomic_store(&s->early_seq, NO_WAIT);
		return 0;
	}
	s->reset = reset;
	if (reset)
		atomic_fetch_add(&comm->ended_reset, 1);
	if (atomic_fetch_add_explicit(&comm->ended, 1, memory_order_acq_rel) +
	    1 == comm->nstreams)
		MESH_INFO("recv comm %u from %s: the peer %s the connection after message %llu",
			  comm->id, comm->peer,
			  atomic_load(&comm->ended_reset) ? "reset" : "closed",
			  (unsigned long long)s->last_seq);
	return 0;
}

/* Bytes the record layer read from the socket and has not handed out,
 * which poll will not announce: whoever reads the stream comes back for
 * them. */
static bool stream_buffered(const struct tcp_xdc_stream *s)
{
	return s->crypt && tcp_xdc_crypt_buffered(s->crypt);
}

/*
 * Reads into iov, in clear or through the record layer (only verified
 * bytes come out).  Returns bytes (> 0) or 0 when nothing is there; an
 * end, reset or failure is decided here.  A record that fails its tag or
 * a stream cut inside one fails the connection with the record layer's
 * words.  In clear nothing is read ahead: the bytes go straight where
 * they belong, so a payload lands in the posted buffer while the kernel
 * is still in the call (before the acknowledgement it may send on the
 * way out), and NCCL's GPU, which polls that buffer for small messages,
 * sees it then.  Read ahead and copied after the call, small all-reduces
 * took longer (docs/benchmarks.md).
 */
static ssize_t stream_readv(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, struct iovec *iov,
			    int iovcnt)
{
	ssize_t n = s->crypt ?
		tcp_xdc_crypt_recv(s->crypt, s->fd, iov, iovcnt,
				   &s->rx_bytes) :
		tcp_xdc_readv(s->fd, iov, iovcnt, &s->rx_bytes);

	if (n > 0) {
		if (s->crypt)
			mesh_count(&s->m_crypt_bytes, (uint64_t)n);
		return n;
	}
	switch (n) {
	case 0:
		return recv_eof(comm, s, false);
	case -EAGAIN:
		return 0;
	case -ECONNRESET:
	case -EPIPE:
		return recv_eof(comm, s, true);
	case -ECONNABORTED:
		/* cut inside a record: resuming, the path broke; by a reset,
		 * which a sender that is gone leaves too, as a reset */
		if (comm->rejoin)
			return xdc_stream_syscall_fail(comm, s,
				s->crypt->cut == -ECONNRESET ||
				s->crypt->cut == -EPIPE ? ECONNRESET :
							  ECONNABORTED);
		/* fall through */
	case -EBADMSG:
		if (s->crypt) {
			mesh_count(&s->m_auth_failures, 1);
			return xdc_stream_fail(comm, s, (int)n,
					       s->crypt->why);
		}
		/* fall through */
	default:
		return xdc_stream_syscall_fail(comm, s, (int)-n);
	}
}

static ssize_t stream_read(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			   void *buf, size_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return stream_readv(comm, s, &iov, 1);
}

/*
 * Reads the rest of a chunk's payload, and the next header behind it in
 * the same call: one system call per chunk saved.
 */
static ssize_t payload_read(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s)
{
	size_t rest = s->len - s->payload_done;
	char *dst = s->storing ?
		(char *)s->keep.buf + xdc_stored_newest(s)->keep_off :
		s->req->data + s->offset;
	struct iovec iov[2] = {
		{ dst + s->payload_done, rest },
		{ &s->wire, sizeof(s->wire) },
	};
	ssize_t n = stream_readv(comm, s, iov, 2);

	if (n <= 0)
		return n;
	if ((size_t)n > rest) {
		s->hdr_done = (size_t)n - rest;
		n = (ssize_t)rest;
	}
	s->payload_done += (size_t)n;
	return 1;
}

/*
 * Returns 0 when the stream would block, waits for an irecv or holds a
 * chunk longer than max_len, or -errno.
 */
static int recv_progress(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 size_t max_len)
{
	ssize_t n;
	int ret;

	for (;;) {
		/* a socket dialed anew decides how far the old one counts */
		if (!xdc_recv_old_readable(s))
			return 0;
		switch (s->state) {
		case TCP_XDC_IDLE:
			if (s->hdr_done < sizeof(s->wire)) {
				n = stream_read(comm, s,
						(char *)&s->wire + s->hdr_done,
						sizeof(s->wire) - s->hdr_done);
				if (n <= 0)
					return (int)n;
				s->hdr_done += (size_t)n;
			}
			if (s->hdr_done < sizeof(s->wire))
				break;
			ret = header_parse(comm, s);
			if (ret)
				return ret;
			s->state = TCP_XDC_PARKED;
			/* fall through */
		case TCP_XDC_PARKED:
			if (atomic_load_explicit(&comm->posted,
						 memory_order_acquire) <= s->seq) {
				if (max_len != SIZE_MAX ||
				    !chunk_store(comm, s))
					return 0;
			} else if (s->len > max_len) {
				return 0;
			} else {
				ret = chunk_attach(comm, s);
				if (ret)
					return ret;
			}
			/* fall through */
		case TCP_XDC_PAYLOAD:
			if (s->len > max_len || (s->storing &&
						 max_len != SIZE_MAX))
				return 0;
			if (s->payload_done < s->len) {
				n = payload_read(comm, s);
				if (n <= 0)
					return (int)n;
			}
			if (s->payload_done < s->len)
				break;
			chunk_finish(s);
			/* test() asks no more of the socket than one message:
			 * what comes next, the next test() reads. */
			if (max_len != SIZE_MAX && !s->hdr_done &&
			    !stream_buffered(s))
				return 0;
			break;
		case TCP_XDC_ENDED:
		case TCP_XDC_BROKEN:
		case TCP_XDC_RESUMING:
			return 0;
		case TCP_XDC_DEAD:
			return -EPIPE;
		}
	}
}

/*
 * Pings: the receiver writes one byte on a stream after it has been quiet
 * for a while.  The sender's kernel acknowledges it even when the sender
 * has nothing to say, so a live but slow peer costs nothing, while on a
 * dead link the unacknowledged byte makes the socket fail with ETIMEDOUT
 * after timeout_ms (TCP_USER_TIMEOUT).  Without them a receiver whose link
 * died would wait for TCP keepalive, minutes later.  The quiet time is
 * short while a receive is outstanding, and for a parked stream: its sender
 * is blocked on our closed window and takes the acknowledgements of pings
 * as the sign that we live (send_check_stalls).  So is stream 0 while
 * test() reads it: the pool does not watch it then, and a sender may fill
 * its window before a receive is posted.  Otherwise it is half the
 * keepalive idle time, so the kernel's keepalive never probes a stream (it
 * would drop one with TCP_USER_TIMEOUT at the first lost probe).  A stream
 * the peer ended gets none.  Returns 0 or -errno; *next: when the stream
 * wants its next look.
 */
static int recv_ping(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		     uint64_t now, bool busy, uint64_t *next)
{
	bool unwatched = s->state == TCP_XDC_IDLE &&
			 atomic_load_explicit(&s->proxy_reads,
					      memory_order_relaxed);
	uint64_t period = busy || s->state == TCP_XDC_PARKED || unwatched ?
			  comm->ping_busy_ns : comm->ping_idle_ns;
	/* nobody reads the stream until a receive is posted */
	char ping = s->state == TCP_XDC_PARKED || (unwatched && !busy) ?
			    TCP_XDC_PING_PARKED : TCP_XDC_PING;

	if (s->state == TCP_XDC_ENDED || s->peer_done ||
	    s->state == TCP_XDC_BROKEN || s->new_fd >= 0)
		return 0;
	if (s->rx_bytes != s->rx_seen || !s->quiet_since) {
		s->rx_seen = s->rx_bytes;
		s->quiet_since = now;
	}
	if (now - s->quiet_since >= period) {
		s->quiet_since = now;
		/* A closed or reset peer shows on the read side. */
		/* resuming, every fault shows there too, after the data
		 * the socket still holds, which must be read first */
		if (send(s->fd, &ping, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
		    errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
		    errno != EPIPE && errno != ECONNRESET && !comm->rejoin)
			return xdc_stream_syscall_fail(comm, s, errno);
	}
	if (s->quiet_since + period < *next)
		*next = s->quiet_since + period;
	return 0;
}

/*
 * A parked stream is not read, but poll still flags its hangup, its
 * peer's end (POLLRDHUP) and errors.  A hangup, an end or a reset leaves
 * the data before it readable: the stream is left alone until its
 * receive is posted.  But what it still holds is for receives not yet
 * posted, so for those that are it counts as ended at once: a sender
 * that is gone while its chunks wait here fails them now, not never.
 * Resuming, a reset is an outage like any other (xdc_recv_parked_reset).
 * Other errors (a timed out ping) fail the connection.
 */
static int recv_check_parked(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s, short revents)
{
	bool reset = (revents & (POLLERR | POLLHUP)) != 0;
	int err = 0;
	socklen_t len = sizeof(err);

	if (s->peer_done)
		return 0;
	if (!comm->rejoin && (revents & POLLERR) &&
	    !getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) &&
	    err && err != ECONNRESET && err != EPIPE)
		return xdc_stream_syscall_fail(comm, s, err);
	s->peer_done = true;
	/* resuming: a reset or an error, not an end, may be the path's */
	if (comm->rejoin && !tcp_xdc_peer_fin(s->fd))
		return xdc_recv_parked_reset(comm, s);
	s->end_early = true;
	s->reset = reset && !comm->rejoin;
	if (s->reset)
		atomic_fetch_add(&comm->ended_reset, 1);
	/* before the count: whoever sees it sees which message may still
	 * come (xdc_recv_all_ended) */
	atomic_store(&s->early_seq, s->seq);
	atomic_fetch_add(&comm->ended, 1);
	return 0;
}

bool xdc_recv_all_ended(struct tcp_xdc_comm *comm, uint64_t seq)
{
	if (atomic_load(&comm->ended) != comm->nstreams)
		return false;
	/* one counted while parked still serves its message and later ones
	 * (a stream's messages never go back), until its end is read; one
	 * that stored chunks serves their messages once they are posted */
	for (int i = 0; i < comm->nstreams; i++)
		if (atomic_load(&comm->streams[i].early_seq) <= seq ||
		    atomic_load(&comm->streams[i].stored_seq) <= seq)
			return false;
	return true;
}

/* One held stream: its events, what it can read, its ping.  0 or -errno. */
static int recv_stream_step(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, uint64_t now, bool busy,
			    uint64_t *next)
{
	short revents = s->revents;
	int ret = 0;

	s->revents = 0;
	/* POLLIN may be left from before the stream parked (test() parks
	 * stream 0 too): only an end, a hangup or an error says the peer is
	 * done; not one of a socket dialed anew, which the resume step reads */
	if (s->state == TCP_XDC_PARKED && !s->polls_new &&
	    (revents & (POLLRDHUP | POLLHUP | POLLERR)))
		ret = recv_check_parked(comm, s, revents);
	if (comm->rejoin && !ret)
		ret = xdc_recv_resume_step(comm, s, now);
	if (!ret && s->stored_head != s->stored_tail)
		ret = stored_deliver(comm, s);
	if (!ret && (revents || s->state == TCP_XDC_PARKED ||
		     stream_buffered(s) || s->new_fd >= 0))
		ret = recv_progress(comm, s, SIZE_MAX);
	/* what it just stored may be posted already */
	if (!ret && stored_first(s))
		ret = stored_deliver(comm, s);
	if (comm->rejoin && !ret) {
		/* the old socket may just have given its last chunk */
		if (s->new_fd >= 0)
			ret = xdc_recv_resume_step(comm, s, now);
		/* an outage's end is checked now and then */
		if (s->broken_ns && now + 100000000ULL < *next)
			*next = now + 100000000ULL;
	}
	if (!ret && comm->ping_busy_ns)
		ret = recv_ping(comm, s, now, busy, next);
	return ret;
}

int xdc_recv_lane_step(struct tcp_xdc_lane *l, struct pollfd *pfd)
{
	struct tcp_xdc_comm *comm = l->comm;
	uint64_t wait = NO_WAIT, next = UINT64_MAX, now = 0;
	bool busy;

	if (comm->ping_busy_ns || comm->rejoin)
		now = xdc_now_ns();
	busy = atomic_load_explicit(&comm->posted, memory_order_relaxed) !=
	       atomic_load_explicit(&comm->completed, memory_order_relaxed);
	for (int i = 0; i < l->nstreams; i++) {
		struct tcp_xdc_stream *s = l->streams[i];
		struct tcp_xdc_stored *first;
		int ret;

		pfd[i] = (struct pollfd){ .fd = -1 };
		if (!xdc_stream_hold_or_pass(s))
			continue;
		ret = recv_stream_step(comm, s, now, busy, &next);
		/* A parked stream is not read: TCP pushes back.  One that
		 * ended gets nothing more (poll would flag the hangup over
		 * and over). */
		pfd[i].events = s->state == TCP_XDC_PARKED ? POLLRDHUP :
				s->state == TCP_XDC_BROKEN ? 0 : POLLIN;
		if (s->new_fd >= 0 && !s->confirmed)
			pfd[i].events = POLLIN;	/* the answer, below */
		first = stored_first(s);
		if (s->state == TCP_XDC_PARKED && s->seq < wait)
			wait = s->seq;
		if (first && first->seq < wait)
			wait = first->seq;
		s->polls_new = !ret && s->new_fd >= 0 && !s->confirmed;
		if (s->polls_new)
			pfd[i].fd = s->new_fd;
		else if (!ret && s->state != TCP_XDC_ENDED &&
		    s->state != TCP_XDC_BROKEN &&
		    !(s->state == TCP_XDC_PARKED && s->peer_done) &&
		    !(s->state == TCP_XDC_IDLE &&
		      atomic_load_explicit(&s->proxy_reads,
					   memory_order_relaxed)))
			pfd[i].fd = s->fd;
		xdc_stream_release(s);
		if (ret)
			return 0;
	}
	/* Pairs with the posted store in irecv: no lost wakeup. */
	atomic_store(&l->wait_seq, wait);
	if (wait != NO_WAIT && atomic_load(&comm->posted) > wait)
		return 0;
	if (comm->rejoin && l == &comm->lanes[0]) {
		int ms = next == UINT64_MAX ? -1 :
			 (int)((next - now) / 1000000) + 1;

		xdc_recv_take(comm, now, &ms);
		return ms;
	}
	if (next == UINT64_MAX)
		return -1;
	return (int)((next - now) / 1000000) + 1;
}

/*
 * test() reads stream 0 itself when it holds a small chunk or none yet, so
 * a small message lands without waking a pool thread: a busy proxy thread
 * sees the bytes as soon as the kernel has them.  While it does, the pool
 * thread does not watch the idle stream (both would wake for every
 * message, and on a small host the second wake-up delays the first).  What
 * it leaves half done or parked, a large chunk, goes back to the pool
 * thread.
 */
void xdc_recv_inline(struct tcp_xdc_comm *comm)
{
	struct tcp_xdc_stream *s = &comm->streams[0];
	enum tcp_xdc_stream_state state;
	bool left, was_reading;
	uint64_t rx;

	if (!xdc_stream_hold(s))
		return;
	state = s->state;
	rx = s->rx_bytes;
	if (s->state == TCP_XDC_IDLE || s->state == TCP_XDC_PARKED ||
	    s->state == TCP_XDC_PAYLOAD)
		recv_progress(comm, s, comm->inline_max);
	left = s->state == TCP_XDC_PARKED || s->state == TCP_XDC_PAYLOAD ||
	       s->state == TCP_XDC_BROKEN || s->new_fd >= 0;
	was_reading = atomic_load_explicit(&s->proxy_reads,
					   memory_order_relaxed);
	if (left == was_reading)
		atomic_store_explicit(&s->proxy_reads, !left,
				      memory_order_relaxed);
	/* NCCL calls test() in a tight loop: wake the thread only for what
	 * it has not seen, not for a parked stream or a large chunk it is
	 * already reading */
	xdc_stream_hand_back(s, left && (was_reading || s->state != state ||
					 s->rx_bytes != rx));
}

void xdc_recv_inline_stop(struct tcp_xdc_comm *comm)
{
	struct tcp_xdc_stream *s = &comm->streams[0];

	atomic_store(&s->proxy_reads, false);
	xdc_lane_wake(s->lane);
}
