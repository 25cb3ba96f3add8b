/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc data path.
 *
 * A message is cut into chunks; each chunk travels on one stream as a header
 * followed by its payload.  Send threads claim chunks from one shared cursor
 * with a compare-and-swap, so a stream that drains faster simply takes more
 * chunks.  Receive threads read each chunk straight into the posted buffer.
 *
 * The proxy thread (isend, irecv, test) never blocks and shares no lock with
 * the data threads: it publishes a message by bumping comm->posted, wakes
 * sleeping threads through their eventfd, and reads completion counters.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tcp_xdc.h"

#define SEQ_BITS (64 - TCP_XDC_OFFSET_BITS)
#define SEQ_MASK ((1ULL << SEQ_BITS) - 1)
#define OFFSET_MASK (TCP_XDC_MAX_MESSAGE - 1)
#define TOTAL_UNKNOWN UINT64_MAX
#define NO_WAIT UINT64_MAX

static const char *comm_kind(const struct tcp_xdc_comm *comm)
{
	return comm->is_send ? "send" : "recv";
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* ---- failure ---- */

static void thread_wake(struct tcp_xdc_thread *t)
{
	uint64_t one = 1;

	/* Only fails when the counter is saturated: a wakeup is pending. */
	if (write(t->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		MESH_INFO("eventfd write: %s", strerror(errno));
}

static void threads_wake_all(struct tcp_xdc_comm *comm)
{
	for (int i = 0; i < comm->nthreads; i++)
		thread_wake(&comm->threads[i]);
}

/*
 * Records the first failure of a comm.  It becomes a WARN when a request
 * observes it (comm_error): a peer that closes an idle connection at the end
 * of a job is no error.  The sockets are shut down so the peer notices too.
 */
static int comm_fail(struct tcp_xdc_comm *comm, int err, const char *fmt, ...)
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
		 comm_kind(comm), comm->id, comm->is_send ? "to" : "from",
		 comm->peer, what);
	atomic_store_explicit(&comm->error, err, memory_order_release);
	MESH_INFO("%s", comm->errmsg);
	for (int i = 0; i < comm->nstreams; i++)
		shutdown(comm->streams[i].fd, SHUT_RDWR);
	threads_wake_all(comm);
	return err;
}

/* The comm's failure, WARNed the first time a request runs into it. */
static int comm_error(struct tcp_xdc_comm *comm)
{
	int err = atomic_load_explicit(&comm->error, memory_order_acquire);
	int expected = TCP_XDC_FAILED;

	if (err && atomic_compare_exchange_strong(&comm->fail_state,
						  &expected, TCP_XDC_WARNED))
		MESH_WARN("%s", comm->errmsg);
	return err;
}

static int stream_fail(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		       int err, const char *what)
{
	s->state = TCP_XDC_DEAD;
	if (s->req)
		return comm_fail(comm, err, "stream %d/%d: %s (message %llu)",
				 s->index, comm->nstreams, what,
				 (unsigned long long)s->seq);
	return comm_fail(comm, err, "stream %d/%d: %s", s->index,
			 comm->nstreams, what);
}

/*
 * A socket error in words.  TCP reports a stream that went unacknowledged
 * for timeout_ms as ETIMEDOUT, or as the last ICMP error it saw on the way
 * (no route, unreachable), so both say how long it waited.
 */
static int stream_syscall_fail(struct tcp_xdc_comm *comm,
			       struct tcp_xdc_stream *s, int err)
{
	char what[128];

	switch (err) {
	case EPIPE:
		return stream_fail(comm, s, -err, "connection closed by peer");
	case ECONNRESET:
		return stream_fail(comm, s, -err, "connection reset by peer");
	case ETIMEDOUT:
		snprintf(what, sizeof(what),
			 "timed out after %d ms without an acknowledgement (link down or peer gone)",
			 comm->timeout_ms);
		return stream_fail(comm, s, -err, what);
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
		snprintf(what, sizeof(what), "%s, gave up after %d ms",
			 strerror(err), comm->timeout_ms);
		return stream_fail(comm, s, -err, what);
	default:
		return stream_fail(comm, s, -err, strerror(err));
	}
}

/* The pending error of a socket that poll flagged with POLLERR. */
static int stream_pending_error(struct tcp_xdc_comm *comm,
				struct tcp_xdc_stream *s)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) || !err)
		err = ECONNRESET;
	return stream_syscall_fail(comm, s, err);
}

static bool thread_should_exit(struct tcp_xdc_comm *comm)
{
	return atomic_load_explicit(&comm->stop, memory_order_acquire) ||
	       atomic_load_explicit(&comm->error, memory_order_relaxed);
}

/*
 * Looks at the sockets and the eventfd without sleeping for up to spin_us:
 * the next message of a busy connection usually comes within microseconds,
 * and a sleeping thread costs a wake-up on both sides.  Each round yields
 * the CPU, so on a small host the proxy thread still runs.  Returns the
 * poll() result of the last round.
 */
static int thread_spin(struct tcp_xdc_thread *t, struct pollfd *pfd, int n)
{
	uint64_t end = now_ns() + (uint64_t)t->comm->spin_us * 1000;
	int ret;

	do {
		ret = poll(pfd, (nfds_t)n + 1, 0);
		if (ret)
			return ret;
		sched_yield();
	} while (now_ns() < end);
	return 0;
}

/*
 * Sleeps until a socket in pfd[0..n-1] or the thread's eventfd is ready, or
 * for at most timeout_ms (-1: no limit).
 */
static int thread_poll(struct tcp_xdc_thread *t, struct pollfd *pfd, int n,
		       int timeout_ms)
{
	uint64_t count;
	int ret = 0;

	pfd[n].fd = t->efd;
	pfd[n].events = POLLIN;
	if (t->comm->spin_us && !t->comm->is_send)
		ret = thread_spin(t, pfd, n);
	if (!ret)
		ret = poll(pfd, (nfds_t)n + 1, timeout_ms);
	if (ret < 0) {
		if (errno == EINTR)
			return 0;
		return comm_fail(t->comm, -errno, "poll: %s", strerror(errno));
	}
	if (pfd[n].revents & POLLIN) {
		if (read(t->efd, &count, sizeof(count)) < 0 && errno != EAGAIN)
			MESH_INFO("eventfd read: %s", strerror(errno));
	}
	return 0;
}

/* ---- send side ---- */

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
 * Takes the next chunk for stream s.  A cursor that still points into a
 * message proves that message incomplete, so its slot cannot be reused
 * while we look at it: a successful CAS validates what was read before.
 */
static bool chunk_claim(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	uint64_t cur = atomic_load_explicit(&comm->cursor,
					    memory_order_acquire);

	for (;;) {
		uint64_t posted = atomic_load_explicit(&comm->posted,
						       memory_order_acquire);
		uint64_t msg = cursor_msg(cur, posted);
		struct tcp_xdc_req *req;
		uint64_t size, off, len, next, piece;

		if (msg == posted)
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
		s->hdr_done = 0;
		s->payload_done = 0;
		s->state = TCP_XDC_PAYLOAD;
		chunk_hdr_encode(s);
		return true;
	}
}

/*
 * An idle send thread looks for the next message for up to spin_us before
 * it asks to be woken: a busy proxy posts again within microseconds, and
 * then neither side pays for an eventfd write and a wake-up.  Yielding in
 * the loop keeps the proxy thread running on a small host.
 */
static bool send_spin(struct tcp_xdc_comm *comm)
{
	uint64_t end;

	if (!comm->spin_us)
		return false;
	end = now_ns() + (uint64_t)comm->spin_us * 1000;
	do {
		if (send_work_available(comm))
			return true;
		sched_yield();
	} while (now_ns() < end && !thread_should_exit(comm));
	return false;
}

/* Returns 1 when the socket is full, 0 when out of work, or -errno. */
static int send_progress(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	for (;;) {
		struct iovec iov[2];
		struct msghdr msg = { .msg_iov = iov };
		ssize_t n;

		if (s->state == TCP_XDC_IDLE && !chunk_claim(comm, s))
			return 0;
		if (s->hdr_done < sizeof(s->wire)) {
			iov[msg.msg_iovlen].iov_base =
				(char *)&s->wire + s->hdr_done;
			iov[msg.msg_iovlen++].iov_len =
				sizeof(s->wire) - s->hdr_done;
		}
		if (s->payload_done < s->len) {
			iov[msg.msg_iovlen].iov_base = s->req->data +
				s->offset + s->payload_done;
			iov[msg.msg_iovlen++].iov_len =
				s->len - s->payload_done;
		}
		n = sendmsg(s->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 1;
			if (errno == EINTR)
				continue;
			return stream_syscall_fail(comm, s, errno);
		}
		s->tx_bytes += (uint64_t)n;
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
		/* Last touch of the slot: the proxy may recycle it now. */
		atomic_fetch_add_explicit(&s->req->chunks_done, 1,
					  memory_order_release);
		s->req = NULL;
		s->state = TCP_XDC_IDLE;
	}
}

/*
 * The receiver writes nothing but pings on a data stream: they only prove
 * the link alive (our kernel acknowledges them) and are dropped here.
 */
static int send_drain_pings(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s)
{
	char buf[256];

	for (;;) {
		ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0)
			continue;
		if (n == 0)
			return stream_fail(comm, s, -ECONNRESET,
					   "connection closed by peer");
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno != EINTR)
			return stream_syscall_fail(comm, s, errno);
	}
}

static int send_check_events(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s, short revents)
{
	if (revents & POLLERR)
		return stream_pending_error(comm, s);
	if (revents & (POLLIN | POLLRDHUP | POLLHUP))
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
 * dead link stays silent (tcp_xdc_stall_check).  Returns how long the thread may
 * sleep (-1: until woken), or -errno once a stream failed.
 */
static int send_check_stalls(struct tcp_xdc_thread *t, bool busy)
{
	struct tcp_xdc_comm *comm = t->comm;
	uint64_t now;

	if (!busy || !comm->timeout_ms) {
		t->next_check_ns = 0;
		return -1;
	}
	now = now_ns();
	if (t->next_check_ns && now < t->next_check_ns)
		return (int)((t->next_check_ns - now) / 1000000) + 1;
	for (int i = 0; i < t->nstreams; i++) {
		struct tcp_xdc_stream *s = t->streams[i];

		if (s->state == TCP_XDC_PAYLOAD &&
		    tcp_xdc_stall_check(s->fd, s->tx_bytes, &s->stall, now,
					comm->timeout_ms, !t->next_check_ns))
			return stream_syscall_fail(comm, s, ETIMEDOUT);
	}
	t->next_check_ns = now + comm->ping_busy_ns;
	return (int)(comm->ping_busy_ns / 1000000) + 1;
}

static void *send_thread(void *arg)
{
	struct tcp_xdc_thread *t = arg;
	struct tcp_xdc_comm *comm = t->comm;
	struct pollfd pfd[TCP_XDC_MAX_STREAMS + 1];

	for (int i = 0; i < t->nstreams; i++)
		pfd[i].revents = POLLOUT;
	while (!thread_should_exit(comm)) {
		bool idle = false, busy = false;
		int sleep_ms;

		for (int i = 0; i < t->nstreams; i++) {
			struct tcp_xdc_stream *s = t->streams[i];
			int ret = 0;

			if (pfd[i].revents & ~POLLOUT)
				ret = send_check_events(comm, s,
							pfd[i].revents);
			if (!ret && (s->state == TCP_XDC_IDLE ||
				     pfd[i].revents))
				ret = send_progress(comm, s);
			if (ret < 0)
				return NULL;
			pfd[i].fd = s->fd;
			/* A stream holding a chunk is blocked on its socket. */
			pfd[i].events = POLLIN | POLLRDHUP |
				(s->state == TCP_XDC_PAYLOAD ? POLLOUT : 0);
			pfd[i].revents = 0;
			idle |= s->state == TCP_XDC_IDLE;
			busy |= s->state == TCP_XDC_PAYLOAD;
		}
		/* Only when no stream waits for its socket: those are polled. */
		if (idle && !busy && send_spin(comm))
			continue;
		if (idle) {
			/* Pairs with the posted store in isend. */
			atomic_store(&t->want_work, 1);
			if (send_work_available(comm)) {
				atomic_store(&t->want_work, 0);
				continue;
			}
		}
		sleep_ms = send_check_stalls(t, busy);
		if (sleep_ms < -1 ||
		    thread_poll(t, pfd, t->nstreams, sleep_ms))
			return NULL;
		atomic_store_explicit(&t->want_work, 0, memory_order_relaxed);
	}
	return NULL;
}

/* ---- receive side ---- */

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
		return stream_fail(comm, s, -EPROTO, what);
	}
	s->last_seq = s->seq;
	s->hdr_done = 0;
	return 0;
}

/* Binds a parsed chunk to its posted receive, checking size and tag. */
static int chunk_attach(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	struct tcp_xdc_req *req = &comm->reqs[s->seq % TCP_XDC_MAX_REQUESTS];
	uint64_t expected = TOTAL_UNKNOWN;
	char what[160];

	if (req->seq != s->seq) {
		snprintf(what, sizeof(what),
			 "chunk of message %llu, slot holds message %llu",
			 (unsigned long long)s->seq,
			 (unsigned long long)req->seq);
		return stream_fail(comm, s, -EPROTO, what);
	}
	if (s->total > req->size) {
		snprintf(what, sizeof(what),
			 "message %llu: peer sends %llu bytes, receive posted for %zu",
			 (unsigned long long)s->seq,
			 (unsigned long long)s->total, req->size);
		return stream_fail(comm, s, -EMSGSIZE, what);
	}
	if (s->tag != req->tag) {
		snprintf(what, sizeof(what),
			 "message %llu: peer sends tag %d, receive posted for tag %d",
			 (unsigned long long)s->seq, s->tag, req->tag);
		return stream_fail(comm, s, -EPROTO, what);
	}
	if (!atomic_compare_exchange_strong(&req->total, &expected, s->total) &&
	    expected != s->total) {
		snprintf(what, sizeof(what),
			 "message %llu: chunks disagree on its size (%llu, %llu)",
			 (unsigned long long)s->seq,
			 (unsigned long long)expected,
			 (unsigned long long)s->total);
		return stream_fail(comm, s, -EPROTO, what);
	}
	s->req = req;
	s->state = TCP_XDC_PAYLOAD;
	return 0;
}

static void chunk_finish(struct tcp_xdc_stream *s)
{
	struct tcp_xdc_req *req = s->req;

	s->req = NULL;
	s->state = TCP_XDC_IDLE;
	atomic_fetch_add_explicit(&req->bytes_done, s->len,
				  memory_order_release);
	atomic_fetch_add_explicit(&req->chunks_done, 1, memory_order_release);
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
	if (s->state != TCP_XDC_IDLE || s->hdr_done)
		return stream_fail(comm, s, -ECONNRESET, reset ?
			"connection reset by peer in the middle of a chunk" :
			"connection closed by peer in the middle of a chunk");
	s->state = TCP_XDC_ENDED;
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

/*
 * Reads into iov; returns bytes (> 0), 0 when nothing is there, or -errno.
 */
static ssize_t stream_readv(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, struct iovec *iov,
			    int iovcnt)
{
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)iovcnt };

	for (;;) {
		ssize_t n = recvmsg(s->fd, &msg, MSG_DONTWAIT);

		if (n > 0) {
			s->rx_bytes += (uint64_t)n;
			return n;
		}
		if (n == 0)
			return recv_eof(comm, s, false);
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno == ECONNRESET || errno == EPIPE)
			return recv_eof(comm, s, true);
		if (errno != EINTR)
			return stream_syscall_fail(comm, s, errno);
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
	struct iovec iov[2] = {
		{ s->req->data + s->offset + s->payload_done, rest },
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

/* Returns 0 when the stream would block or waits for an irecv, or -errno. */
static int recv_progress(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	ssize_t n;
	int ret;

	for (;;) {
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
						 memory_order_acquire) <= s->seq)
				return 0;
			ret = chunk_attach(comm, s);
			if (ret)
				return ret;
			/* fall through */
		case TCP_XDC_PAYLOAD:
			if (s->payload_done < s->len) {
				n = payload_read(comm, s);
				if (n <= 0)
					return (int)n;
			}
			if (s->payload_done == s->len)
				chunk_finish(s);
			break;
		case TCP_XDC_ENDED:
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
 * as the sign that we live (send_check_stalls).  Otherwise it is half the
 * keepalive idle time, so the kernel's keepalive never probes a stream (it
 * would drop one with TCP_USER_TIMEOUT at the first lost probe).  A stream
 * the peer ended gets none.  Returns how long the thread may sleep (-1:
 * until woken), or -errno once a stream failed.
 */
static int recv_ping_check(struct tcp_xdc_thread *t)
{
	static const char ping = 'p';
	struct tcp_xdc_comm *comm = t->comm;
	uint64_t now, next = UINT64_MAX;
	bool busy;

	if (!comm->ping_busy_ns)
		return -1;
	now = now_ns();
	busy = atomic_load_explicit(&comm->posted, memory_order_relaxed) !=
	       atomic_load_explicit(&comm->completed, memory_order_relaxed);
	for (int i = 0; i < t->nstreams; i++) {
		struct tcp_xdc_stream *s = t->streams[i];
		uint64_t period = busy || s->state == TCP_XDC_PARKED ?
				  comm->ping_busy_ns : comm->ping_idle_ns;

		if (s->state == TCP_XDC_ENDED || s->peer_done)
			continue;
		if (s->rx_bytes != s->rx_seen || !s->quiet_since) {
			s->rx_seen = s->rx_bytes;
			s->quiet_since = now;
		}
		if (now - s->quiet_since >= period) {
			s->quiet_since = now;
			/* A closed or reset peer shows on the read side. */
			if (send(s->fd, &ping, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
			    errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != EINTR && errno != EPIPE &&
			    errno != ECONNRESET)
				return stream_syscall_fail(comm, s, errno);
		}
		if (s->quiet_since + period < next)
			next = s->quiet_since + period;
	}
	if (next == UINT64_MAX)
		return -1;
	return (int)((next - now) / 1000000) + 1;
}

/*
 * A parked stream is not read, but poll still flags its hangup and errors.
 * A hangup or a reset leaves the data before it readable: the stream is
 * left alone until its receive is posted.  Other errors (a timed out ping)
 * fail the connection.
 */
static int recv_check_parked(struct tcp_xdc_thread *t, struct pollfd *pfd)
{
	for (int i = 0; i < t->nstreams; i++) {
		struct tcp_xdc_stream *s = t->streams[i];
		int err = 0;
		socklen_t len = sizeof(err);

		if (s->state != TCP_XDC_PARKED || !pfd[i].revents)
			continue;
		if ((pfd[i].revents & POLLERR) &&
		    !getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) &&
		    err && err != ECONNRESET && err != EPIPE)
			return stream_syscall_fail(t->comm, s, err);
		s->peer_done = true;
	}
	return 0;
}

static void *recv_thread(void *arg)
{
	struct tcp_xdc_thread *t = arg;
	struct tcp_xdc_comm *comm = t->comm;
	struct pollfd pfd[TCP_XDC_MAX_STREAMS + 1];

	for (int i = 0; i < t->nstreams; i++)
		pfd[i].revents = POLLIN;
	while (!thread_should_exit(comm)) {
		uint64_t wait = NO_WAIT;
		int sleep_ms;

		for (int i = 0; i < t->nstreams; i++) {
			struct tcp_xdc_stream *s = t->streams[i];

			if ((pfd[i].revents || s->state == TCP_XDC_PARKED) &&
			    recv_progress(comm, s) < 0)
				return NULL;
			pfd[i].fd = s->fd;
			pfd[i].revents = 0;
			pfd[i].events = POLLIN;
			/* A parked stream is not read: TCP pushes back. */
			if (s->state == TCP_XDC_PARKED) {
				pfd[i].events = 0;
				if (s->seq < wait)
					wait = s->seq;
			}
			/* Nothing more will come (poll would flag the
			 * hangup over and over). */
			if (s->state == TCP_XDC_ENDED ||
			    (s->state == TCP_XDC_PARKED && s->peer_done))
				pfd[i].fd = -1;
		}
		/* Pairs with the posted store in irecv: no lost wakeup. */
		atomic_store(&t->wait_seq, wait);
		if (wait != NO_WAIT && atomic_load(&comm->posted) > wait)
			continue;
		sleep_ms = recv_ping_check(t);
		if (sleep_ms < -1 ||
		    thread_poll(t, pfd, t->nstreams, sleep_ms) ||
		    recv_check_parked(t, pfd))
			return NULL;
	}
	return NULL;
}

/* ---- requests (proxy thread) ---- */

static bool req_finished(struct tcp_xdc_req *req, size_t *size)
{
	uint64_t total, bytes;

	if (req->comm->is_send) {
		*size = req->size;
		return atomic_load_explicit(&req->chunks_done,
					    memory_order_acquire) ==
		       req->nchunks;
	}
	bytes = atomic_load_explicit(&req->bytes_done, memory_order_acquire);
	total = atomic_load_explicit(&req->total, memory_order_acquire);
	*size = (size_t)total;
	return total != TOTAL_UNKNOWN && bytes == total &&
	       atomic_load_explicit(&req->chunks_done, memory_order_acquire);
}

/*
 * Every stream ended between chunks: what has not arrived never will.  The
 * threads finish each chunk before they count its stream as ended, so a
 * receive still unfinished after that is short for good.
 */
static int recv_peer_closed(struct tcp_xdc_req *req)
{
	struct tcp_xdc_comm *comm = req->comm;
	uint64_t total = atomic_load(&req->total);
	const char *how = atomic_load(&comm->ended_reset) ? "reset" : "closed";

	if (total == TOTAL_UNKNOWN || !atomic_load(&req->bytes_done))
		comm_fail(comm, -ECONNRESET,
			  "the peer %s the connection before sending message %llu",
			  how, (unsigned long long)req->seq);
	else
		comm_fail(comm, -ECONNRESET,
			  "the peer %s the connection with message %llu incomplete (%llu of %llu bytes)",
			  how, (unsigned long long)req->seq,
			  (unsigned long long)atomic_load(&req->bytes_done),
			  (unsigned long long)total);
	return comm_error(comm);
}

static int req_test(void *request, int *done, int *sizes)
{
	struct tcp_xdc_req *req = request;
	struct tcp_xdc_comm *comm = req->comm;
	bool closed = false;
	size_t size;
	int err;

	*done = 0;
	for (;;) {
		if (req_finished(req, &size)) {
			req->in_use = false;
			atomic_fetch_add_explicit(&comm->completed, 1,
						  memory_order_relaxed);
			*done = 1;
			if (sizes)
				*sizes = (int)size;
			return 0;
		}
		err = comm_error(comm);
		if (err || closed)
			return err ? err : recv_peer_closed(req);
		/* Once all ended, look at the request again: its last
		 * chunks may have landed since. */
		closed = atomic_load_explicit(&comm->ended,
					      memory_order_acquire) ==
			 comm->nstreams;
		if (!closed)
			return 0;
	}
}

/*
 * Chunk length for a message of size bytes: one piece per stream, so that a
 * lone message still uses them all, but no smaller than min_chunk (headers
 * and wake-ups cost) and no larger than chunk_size.  Pieces are whole pages
 * so that copies stay aligned.
 */
static size_t message_piece(const struct tcp_xdc_comm *comm, size_t size)
{
	size_t piece = (size + (size_t)comm->nstreams - 1) /
		       (size_t)comm->nstreams;

	piece = (piece + 4095) & ~(size_t)4095;
	if (piece < comm->min_chunk)
		piece = comm->min_chunk;
	if (piece > comm->chunk_size)
		piece = comm->chunk_size;
	return piece;
}

/* Takes the next slot, or NULL when 32 requests are outstanding. */
static struct tcp_xdc_req *req_next(struct tcp_xdc_comm *comm, void *data,
				    size_t size, int tag)
{
	uint64_t seq = comm->next_seq;
	struct tcp_xdc_req *req = &comm->reqs[seq % TCP_XDC_MAX_REQUESTS];

	if (req->in_use)
		return NULL;
	req->in_use = true;
	req->seq = seq;
	__atomic_store_n(&req->data, (char *)data, __ATOMIC_RELAXED);
	__atomic_store_n(&req->size, size, __ATOMIC_RELAXED);
	__atomic_store_n(&req->tag, tag, __ATOMIC_RELAXED);
	atomic_store_explicit(&req->chunks_done, 0, memory_order_relaxed);
	atomic_store_explicit(&req->bytes_done, 0, memory_order_relaxed);
	atomic_store_explicit(&req->total, TOTAL_UNKNOWN,
			      memory_order_relaxed);
	comm->next_seq++;
	return req;
}

int tcp_xdc_isend(void *send_comm, void *data, size_t size, int tag,
		  void *mhandle, void **request)
{
	struct tcp_xdc_comm *comm = send_comm;
	struct tcp_xdc_req *req;
	uint64_t woken = 0;

	(void)mhandle;
	*request = NULL;
	/* A failed comm still takes requests: their test() reports it. */
	if (size > TCP_XDC_MAX_MESSAGE) {
		MESH_WARN("send comm %u to %s: message of %zu bytes exceeds the maximum %llu",
			  comm->id, comm->peer, size, TCP_XDC_MAX_MESSAGE);
		return -EMSGSIZE;
	}
	req = req_next(comm, data, size, tag);
	if (!req)
		return 0;
	req->piece = message_piece(comm, size);
	req->nchunks = size ? (size + req->piece - 1) / req->piece : 1;
	atomic_store(&comm->posted, req->seq + 1);
	for (int i = 0; i < comm->nthreads && woken < req->nchunks; i++) {
		struct tcp_xdc_thread *t = &comm->threads[i];

		if (atomic_load_explicit(&t->want_work, memory_order_relaxed) &&
		    atomic_exchange(&t->want_work, 0)) {
			thread_wake(t);
			woken++;
		}
	}
	*request = req;
	return 0;
}

int tcp_xdc_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		  int *tags, void **mhandles, void **request)
{
	struct tcp_xdc_comm *comm = recv_comm;
	struct tcp_xdc_req *req;

	(void)mhandles;
	*request = NULL;
	if (n != 1) {
		MESH_WARN("recv comm %u from %s: %d grouped receives, only 1 is supported",
			  comm->id, comm->peer, n);
		return -EINVAL;
	}
	req = req_next(comm, data[0], sizes[0], tags[0]);
	if (!req)
		return 0;
	atomic_store(&comm->posted, req->seq + 1);
	for (int i = 0; i < comm->nthreads; i++) {
		struct tcp_xdc_thread *t = &comm->threads[i];

		if (atomic_load(&t->wait_seq) <= req->seq)
			thread_wake(t);
	}
	*request = req;
	return 0;
}

/* ---- lifecycle ---- */

static void threads_stop(struct tcp_xdc_comm *comm)
{
	atomic_store(&comm->stop, 1);
	for (int i = 0; i < comm->nthreads; i++) {
		struct tcp_xdc_thread *t = &comm->threads[i];

		if (t->started) {
			thread_wake(t);
			pthread_join(t->tid, NULL);
			t->started = false;
		}
		if (t->efd >= 0)
			close(t->efd);
		t->efd = -1;
	}
}

static void comm_destroy(struct tcp_xdc_comm *comm)
{
	threads_stop(comm);
	for (int i = 0; i < comm->nthreads; i++)
		free(comm->threads[i].streams);
	for (int i = 0; i < comm->nstreams; i++)
		if (comm->streams[i].fd >= 0)
			close(comm->streams[i].fd);
	free(comm->threads);
	free(comm->streams);
	free(comm);
}

/* Every request handed over was written whole: nothing is owed. */
static bool send_owes_nothing(struct tcp_xdc_comm *comm)
{
	if (atomic_load(&comm->error))
		return false;
	for (int i = 0; i < TCP_XDC_MAX_REQUESTS; i++) {
		struct tcp_xdc_req *req = &comm->reqs[i];

		if (req->in_use && atomic_load(&req->chunks_done) !=
				   req->nchunks)
			return false;
	}
	return true;
}

/*
 * What a completed isend wrote may still sit in our socket buffers, for
 * instance while the receiver is late and its window closed.  A plain
 * close would lose it whenever a ping of the receiver is unread (Linux
 * then resets the connection and drops the unsent data), or arrives later.
 * So the streams are shut down for writing, which queues the FIN behind
 * the data, and handed to a background thread that drains pings until the
 * peer acknowledged everything.  With requests in flight or a failed
 * connection the sockets simply close: the peer learns it from them.
 */
static void send_close_streams(struct tcp_xdc_comm *comm)
{
	int fds[TCP_XDC_MAX_STREAMS];

	if (!send_owes_nothing(comm))
		return;
	for (int i = 0; i < comm->nstreams; i++) {
		fds[i] = comm->streams[i].fd;
		shutdown(fds[i], SHUT_WR);
	}
	if (tcp_xdc_linger_add(comm->ctx, comm->peer, fds, comm->nstreams))
		return;
	for (int i = 0; i < comm->nstreams; i++)
		comm->streams[i].fd = -1;
}

/* From here on the comm owns the fds, also when this fails. */
static int comm_alloc(struct tcp_xdc_ctx *ctx, int nstreams, const int *fds,
		      struct tcp_xdc_comm **comm_out)
{
	int nthreads = ctx->threads < nstreams ? ctx->threads : nstreams;
	struct tcp_xdc_comm *comm = calloc(1, sizeof(*comm));

	if (comm)
		comm->streams = calloc((size_t)nstreams,
				       sizeof(*comm->streams));
	if (!comm || !comm->streams) {
		for (int i = 0; i < nstreams; i++)
			close(fds[i]);
		free(comm);
		return -ENOMEM;
	}
	for (int i = 0; i < nstreams; i++) {
		comm->streams[i].fd = fds[i];
		comm->streams[i].index = i;
	}
	comm->nstreams = nstreams;
	for (int i = 0; i < TCP_XDC_MAX_REQUESTS; i++) {
		comm->reqs[i].base.test = req_test;
		comm->reqs[i].comm = comm;
	}
	*comm_out = comm;

	comm->threads = calloc((size_t)nthreads, sizeof(*comm->threads));
	if (!comm->threads)
		return -ENOMEM;
	comm->nthreads = nthreads;
	for (int i = 0; i < nthreads; i++) {
		comm->threads[i].comm = comm;
		comm->threads[i].efd = -1;
		atomic_init(&comm->threads[i].wait_seq, NO_WAIT);
	}
	for (int i = 0; i < nthreads; i++) {
		comm->threads[i].streams = calloc(
			(size_t)(nstreams + nthreads - 1) / (size_t)nthreads,
			sizeof(*comm->threads[i].streams));
		if (!comm->threads[i].streams)
			return -ENOMEM;
	}
	/* Stream i is served by thread i % nthreads. */
	for (int i = 0; i < nstreams; i++) {
		struct tcp_xdc_thread *t = &comm->threads[i % nthreads];

		t->streams[t->nstreams++] = &comm->streams[i];
	}
	return 0;
}

/* Data threads take no signals: those belong to the application. */
static int threads_start(struct tcp_xdc_comm *comm)
{
	sigset_t all, old;
	int ret = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (int i = 0; i < comm->nthreads && !ret; i++) {
		struct tcp_xdc_thread *t = &comm->threads[i];
		char name[16];

		t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (t->efd < 0) {
			ret = -errno;
			MESH_WARN("eventfd: %s", strerror(errno));
			break;
		}
		ret = -pthread_create(&t->tid, NULL, comm->is_send ?
				      send_thread : recv_thread, t);
		if (ret) {
			MESH_WARN("cannot start a data thread: %s",
				  strerror(-ret));
			break;
		}
		t->started = true;
		snprintf(name, sizeof(name), "xdc-%c%u-%u",
			 comm->is_send ? 's' : 'r', comm->id % 1000,
			 (unsigned int)i % 100);
		pthread_setname_np(t->tid, name);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

static int fds_nonblocking(struct tcp_xdc_comm *comm)
{
	for (int i = 0; i < comm->nstreams; i++) {
		int fd = comm->streams[i].fd;
		int flags = fcntl(fd, F_GETFL);

		if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
			MESH_WARN("peer %s: fcntl on stream %d: %s",
				  comm->peer, i, strerror(errno));
			return -errno;
		}
	}
	return 0;
}

int tcp_xdc_comm_start(struct tcp_xdc_ctx *ctx, bool is_send, const char *peer,
		       size_t chunk_size, int nstreams, const int *fds,
		       struct tcp_xdc_comm **comm_out)
{
	struct tcp_xdc_comm *comm = NULL;
	int ret;

	ret = comm_alloc(ctx, nstreams, fds, &comm);
	if (ret) {
		MESH_WARN("peer %s: out of memory for a connection", peer);
		goto err;
	}
	comm->ctx = ctx;
	comm->is_send = is_send;
	comm->id = atomic_fetch_add(&ctx->next_comm_id, 1);
	comm->chunk_size = chunk_size;
	comm->min_chunk = ctx->min_chunk < chunk_size ? ctx->min_chunk :
							chunk_size;
	comm->timeout_ms = ctx->timeout_ms;
	comm->spin_us = ctx->spin_us;
	if (ctx->timeout_ms) {
		uint64_t busy = (uint64_t)ctx->timeout_ms / 8;

		busy = busy < 50 ? 50 : busy > 1000 ? 1000 : busy;
		comm->ping_busy_ns = busy * 1000000;
		comm->ping_idle_ns = (uint64_t)ctx->keepalive_idle_s *
				     500000000ULL;
	}
	snprintf(comm->peer, sizeof(comm->peer), "%s", peer ? peer : "?");
	ret = fds_nonblocking(comm);
	if (ret)
		goto err;
	ret = threads_start(comm);
	if (ret)
		goto err;
	MESH_INFO("%s comm %u %s %s: %d streams, %d threads, %zu-%zu KiB chunks, timeout %d ms",
		  comm_kind(comm), comm->id, is_send ? "to" : "from",
		  comm->peer, comm->nstreams, comm->nthreads,
		  comm->min_chunk >> 10, chunk_size >> 10, comm->timeout_ms);
	*comm_out = comm;
	return 0;
err:
	if (comm)
		comm_destroy(comm);
	return ret;
}

int tcp_xdc_close_send(void *send_comm)
{
	struct tcp_xdc_comm *comm = send_comm;

	if (!comm)
		return 0;
	threads_stop(comm);
	send_close_streams(comm);
	comm_destroy(comm);
	return 0;
}

int tcp_xdc_close_recv(void *recv_comm)
{
	if (recv_comm)
		comm_destroy(recv_comm);
	return 0;
}
