/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc resuming: a stream whose socket is reset or stops answering is
 * an outage, not a failure.  The sender dials the stream anew through the
 * core (module.h, rejoin_*: the same address, port, gate and key as the
 * first); the receiver asks on the new socket with how many chunks of the
 * stream it has whole, and the sender answers with the chunk it writes
 * next there (tcp_xdc_wire.h, the resume messages).
 *
 * What makes that exact: a chunk stays in the stream's list of kept
 * chunks (struct tcp_xdc_sent) until the receiver's kernel acknowledged
 * all of it, so that it lies in the receiver's old socket, which keeps it
 * readable through a reset.  The sender's answer counts those chunks, and
 * the receiver reads them from the old socket before it switches.  Until
 * acknowledged, a chunk's bytes are a copy in the stream's ring
 * (tcp_xdc_keep.h), and its send may complete once it is written; or,
 * where the ring has no room (or the path is short enough that the round
 * trip costs nothing, tcp_xdc_window.c), they stay in NCCL's buffer and
 * the send completes once acknowledged.
 *
 * Dead peers stay apart from outages: a receiver whose process is gone
 * refuses the dial (nothing listens) or its core says it keeps no such
 * connection; the first fails after half of timeout_ms of refusals, the
 * second at once.  A path that does not answer is retried until the
 * outage has lasted outage_ms.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_xdc_crypt.h"
#include "tcp_xdc_resume.h"
#include "tcp_xdc_stream.h"
#include "tcp_xdc_window.h"

/* A broken send stream's dial, and a receiver's look for new sockets,
 * while streams are out; a receiver also looks this often when none is
 * (a sender may give up on a stream whose socket still looks fine here). */
#define RESUME_TICK_MS 5
#define TAKE_IDLE_NS 50000000ULL
/* A receiver answers a socket dialed anew within milliseconds of taking
 * it (it looks every TAKE_IDLE_NS at most), and a sender our question
 * within a round trip: either side gives up on a new socket silent for
 * this long. */
#define RESUME_ANSWER_NS 3000000000ULL

/* Faults of the path, which a new socket may get past. */
static bool path_fault(int err)
{
	switch (err) {
	case ECONNRESET:
	case EPIPE:
	case ETIMEDOUT:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
	case ECONNREFUSED:
		return true;
	default:
		return false;
	}
}

static unsigned long long ms_since(uint64_t then, uint64_t now)
{
	return (unsigned long long)((now - then) / 1000000);
}

/* A socket we give up: a reset, never a close the peer could read as the
 * stream's end. */
static void socket_abort(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static void outage_begin(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 uint64_t now)
{
	int expected = 0;

	s->broken_ns = now;
	if (atomic_fetch_add(&comm->broken, 1) == 0) {
		atomic_store(&comm->outage_ns, now);
		atomic_store(&comm->resent_chunks, 0);
		atomic_store(&comm->resent_bytes, 0);
	}
	if (atomic_compare_exchange_strong(&comm->cause_set, &expected, 1))
		snprintf(comm->outage_cause, sizeof(comm->outage_cause),
			 "stream %d/%d: %s", s->index, comm->nstreams,
			 s->cause);
}

/* The stream works again: the last one back ends the outage, in one line
 * that says how (resumed, or went on with its old socket). */
static void outage_end(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		       const char *how)
{
	uint64_t now = xdc_now_ns();

	s->broken_ns = 0;
	atomic_fetch_add(&comm->ctx->resumed_streams, 1);
	if (atomic_fetch_sub(&comm->broken, 1) != 1)
		return;
	atomic_fetch_add(&comm->ctx->outages, 1);
	if (comm->is_send)
		MESH_INFO("send comm %u to %s: out for %llu ms (%s), %s; resent %llu chunks (%llu bytes)",
			  comm->id, comm->peer,
			  ms_since(atomic_load(&comm->outage_ns), now),
			  comm->outage_cause, how,
			  (unsigned long long)atomic_load(&comm->resent_chunks),
			  (unsigned long long)atomic_load(&comm->resent_bytes));
	else
		MESH_INFO("recv comm %u from %s: out for %llu ms (%s), %s",
			  comm->id, comm->peer,
			  ms_since(atomic_load(&comm->outage_ns), now),
			  comm->outage_cause, how);
	atomic_store(&comm->cause_set, 0);
}

/*
 * recv: a stream out by a reset and not dialed anew since: its sender may
 * be gone.  The comm counts them (resets_out), so that a stream can tell
 * a sender whose process is gone, whose exit reset or closed every stream
 * at once, from one that gave up on this socket alone and whose dial anew
 * an outage holds up.
 */
static bool reset_out(const struct tcp_xdc_stream *s)
{
	return s->reset && !s->dialed &&
	       (s->state == TCP_XDC_BROKEN || s->parked_out);
}

/* After s changed: was it counted before (reset_out)? */
static void resets_out_update(struct tcp_xdc_comm *comm,
			      const struct tcp_xdc_stream *s, bool was)
{
	if (reset_out(s) != was)
		atomic_fetch_add(&comm->resets_out, was ? -1 : 1);
}

/* A chunk half stored counts for nothing, as one half read: the sender
 * writes it again whole; its place in the ring goes in turn. */
static void stored_drop_partial(struct tcp_xdc_stream *s)
{
	if (!s->storing)
		return;
	xdc_stored_newest(s)->lost = true;
	s->storing = false;
}

int xdc_stream_break(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		     int err, const char *what)
{
	bool was = reset_out(s);

	if (!comm->rejoin || !path_fault(err) || xdc_comm_stopped(comm))
		return xdc_stream_fail(comm, s, -err, what);
	if (s->state == TCP_XDC_BROKEN)
		return 0;
	snprintf(s->cause, sizeof(s->cause), "%s", what);
	if (!s->broken_ns)
		outage_begin(comm, s, xdc_now_ns());
	socket_abort(s->fd);
	s->fd = -1;
	/* a chunk half read or half written counts for nothing: the sender
	 * writes it again whole */
	s->req = NULL;
	stored_drop_partial(s);
	s->hdr_done = 0;
	s->payload_done = 0;
	s->peer_done = false;
	/* a receiver cannot tell a reset of the path from a sender that
	 * died: the sender, if it lives, dials within timeout_ms */
	s->reset = !comm->is_send && (err == ECONNRESET || err == EPIPE);
	s->parked_out = false;
	s->state = TCP_XDC_BROKEN;
	resets_out_update(comm, s, was);
	if (comm->is_send)
		s->sent_next = s->sent_head;
	return 0;
}

/*
 * A socket error in words.  TCP reports a stream that went unacknowledged
 * for timeout_ms as ETIMEDOUT, or as the last ICMP error it saw on the way
 * (no route, unreachable), so both say how long it waited.
 */
int xdc_stream_syscall_fail(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, int err)
{
	char what[128];

	switch (err) {
	case EPIPE:
		snprintf(what, sizeof(what), "connection closed by peer");
		break;
	case ECONNRESET:
		snprintf(what, sizeof(what), "connection reset by peer");
		break;
	case ETIMEDOUT:
		snprintf(what, sizeof(what),
			 "timed out after %d ms without an acknowledgement (link down or peer gone)",
			 comm->timeout_ms);
		break;
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ENETDOWN:
		snprintf(what, sizeof(what), "%s, gave up after %d ms",
			 strerror(err), comm->timeout_ms);
		break;
	default:
		snprintf(what, sizeof(what), "%s", strerror(err));
		break;
	}
	/* resuming: a fault of the path is an outage, not a failure */
	return xdc_stream_break(comm, s, err, what);
}

/* The pending error of a socket that poll flagged with POLLERR. */
int xdc_stream_pending_error(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) || !err)
		err = ECONNRESET;
	return xdc_stream_syscall_fail(comm, s, err);
}

int xdc_outage_check(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		     uint64_t now)
{
	uint64_t since = atomic_load(&comm->outage_ns);
	char what[256];

	/*
	 * Reset, and so is every other stream, or it ended: the sender's
	 * process is gone, or something resets all its streams; a live
	 * sender dials anew within timeout_ms.  Not while a sibling is up or
	 * out otherwise: then the sender gave up on this socket alone (a
	 * stall), or was cut from us after its reset, and outage_ms bounds
	 * its dial anew.
	 */
	if (reset_out(s) && s->new_fd < 0 && comm->timeout_ms &&
	    atomic_load(&comm->resets_out) + atomic_load(&comm->ended) >=
	    comm->nstreams && now >= s->broken_ns &&
	    comm->timeout_ms < comm->outage_ms &&
	    now - s->broken_ns >= (uint64_t)comm->timeout_ms * 1000000ULL) {
		snprintf(what, sizeof(what),
			 "reset, and not dialed anew within timeout_ms %d (the sender is gone)",
			 comm->timeout_ms);
		return xdc_stream_fail(comm, s, -ECONNRESET, what);
	}

	/* since may be younger than a now taken before the break */
	if (!s->broken_ns || !since || now < since ||
	    now - since < (uint64_t)comm->outage_ms * 1000000ULL)
		return 0;
	snprintf(what, sizeof(what),
		 "out for %llu ms, past outage_ms %d (%s)", ms_since(since, now),
		 comm->outage_ms, s->cause);
	return xdc_stream_fail(comm, s, -ETIMEDOUT, what);
}

/* Keys a new socket's records: fresh from its own handshake.  0, or the
 * comm fails. */
static int rekey(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		 const uint8_t *secret, size_t secret_len,
		 struct tcp_xdc_crypt **out)
{
	int ret = xdc_crypt_new(comm, s->index, secret, secret_len,
				comm->record_size, out);

	if (ret)
		return xdc_stream_fail(comm, s, ret,
				       "cannot key a stream dialed anew");
	return 0;
}

/* ---- send side ---- */

/* Copies the chunk s just took into its ring, where there is room. */
static bool sent_keep(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		      struct tcp_xdc_sent *e, bool proxy)
{
	size_t off;

	/* a large copy stays off NCCL's proxy thread, which serves every
	 * channel: that chunk is done once acknowledged instead */
	if (!comm->keep_ring || (proxy && e->len > TCP_XDC_KEEP_PROXY_MAX) ||
	    (!s->keep.buf && xdc_keep_make(comm, s)))
		return false;
	if (!tcp_xdc_keep_alloc(&s->keep, e->len, &off)) {
		xdc_sent_reap(s);
		if (!tcp_xdc_keep_alloc(&s->keep, e->len, &off))
			return false;
	}
	memcpy(s->keep.buf + off, s->src, e->len);
	e->kept = true;
	e->keep_off = off;
	s->src = (const char *)s->keep.buf + off;
	return true;
}

void xdc_sent_push(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		   bool proxy)
{
	uint64_t tail = atomic_load_explicit(&s->sent_tail,
					     memory_order_relaxed);
	struct tcp_xdc_sent *e = &s->sent[tail % TCP_XDC_SENT_MAX];

	/* the ring may make room by reaping [head, next): before e counts */
	*e = (struct tcp_xdc_sent){ .req = s->req, .seq = s->seq,
		.total = s->total, .offset = s->offset, .len = s->len,
		.tag = s->tag };
	if (!sent_keep(comm, s, e, proxy))
		atomic_fetch_add_explicit(&s->sent_bare, 1,
					  memory_order_relaxed);
	atomic_store_explicit(&s->sent_tail, tail + 1, memory_order_release);
	s->sent_next = tail + 1;
}

bool xdc_sent_room(const struct tcp_xdc_stream *s)
{
	return atomic_load_explicit(&s->sent_tail, memory_order_relaxed) -
	       s->sent_head < TCP_XDC_SENT_MAX;
}

bool xdc_sent_again(struct tcp_xdc_stream *s)
{
	const struct tcp_xdc_sent *e;

	if (s->sent_next == atomic_load_explicit(&s->sent_tail,
						 memory_order_relaxed))
		return false;
	e = &s->sent[s->sent_next++ % TCP_XDC_SENT_MAX];
	/* a kept chunk's request may be done and its slot reused: its
	 * bytes come from the copy */
	s->req = e->req;
	s->seq = e->seq;
	s->total = e->total;
	s->offset = e->offset;
	s->len = e->len;
	s->tag = e->tag;
	s->src = e->kept ? (const char *)s->keep.buf + e->keep_off :
			   e->req->data + e->offset;
	return true;
}

/* The chunk's last touch of its request's slot: the proxy may recycle
 * it once every chunk counted. */
static void sent_count(struct tcp_xdc_sent *e)
{
	struct tcp_xdc_req *req = e->req;

	e->req = NULL;
	e->counted = true;
	atomic_fetch_add_explicit(&req->chunks_done, 1, memory_order_release);
}

void xdc_sent_written(struct tcp_xdc_stream *s)
{
	struct tcp_xdc_sent *e = &s->sent[(s->sent_next - 1) %
					  TCP_XDC_SENT_MAX];

	e->end = s->tx_bytes;
	/* its copy survives a break: done now, not one round trip later */
	if (e->kept && !e->counted)
		sent_count(e);
}

static void sent_pop(struct tcp_xdc_stream *s)
{
	struct tcp_xdc_sent *e = &s->sent[s->sent_head % TCP_XDC_SENT_MAX];

	if (!e->counted)
		sent_count(e);
	if (e->kept)
		tcp_xdc_keep_free(&s->keep, e->keep_off, e->len);
	else
		atomic_fetch_sub_explicit(&s->sent_bare, 1,
					  memory_order_relaxed);
	atomic_store_explicit(&s->sent_head, s->sent_head + 1,
			      memory_order_release);
}

void xdc_sent_reap(struct tcp_xdc_stream *s)
{
	int outq = 0;
	uint64_t acked;

	if (s->sent_head == s->sent_next || s->fd < 0 ||
	    s->state == TCP_XDC_BROKEN || s->state == TCP_XDC_RESUMING ||
	    ioctl(s->fd, SIOCOUTQ, &outq) || outq < 0)
		return;
	__atomic_store_n(&s->outq, outq, __ATOMIC_RELAXED);
	acked = s->tx_bytes - (uint64_t)outq;
	while (s->sent_head != s->sent_next) {
		const struct tcp_xdc_sent *e =
			&s->sent[s->sent_head % TCP_XDC_SENT_MAX];

		if (!e->end || e->end > acked)
			break;
		sent_pop(s);
	}
}

bool xdc_sent_unacked(const struct tcp_xdc_stream *s)
{
	return s->sent_head != atomic_load_explicit(&s->sent_tail,
						    memory_order_relaxed);
}

/* Only chunks with no copy wait for an acknowledgement to count: a
 * stream whose chunks all have one costs test() nothing (no ioctl, no
 * hold that would make its pool thread pass it by). */
void xdc_send_reap_all(struct tcp_xdc_comm *comm)
{
	for (int i = 0; i < comm->nstreams; i++) {
		struct tcp_xdc_stream *s = &comm->streams[i];

		if (!atomic_load_explicit(&s->sent_bare,
					  memory_order_relaxed) ||
		    !xdc_stream_hold(s))
			continue;
		xdc_sent_reap(s);
		xdc_stream_hand_back(s, false);
	}
}

static int send_adopt(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		      struct mesh_stream_new *ns)
{
	int ret = 0;

	tcp_xdc_stream_setup(comm->ctx, ns->fd, s->index, comm->peer, true,
			     comm->traffic_class);
	xdc_window_socket(comm, ns->fd);
	s->fd = ns->fd;
	if (s->crypt) {
		xdc_crypt_free(&s->crypt);
		ret = rekey(comm, s, ns->secret, ns->secret_len, &s->crypt);
	}
	explicit_bzero(ns->secret, sizeof(ns->secret));
	if (ret)
		return ret;
	s->tx_bytes = 0;
	s->stall = (struct tcp_xdc_stall){ 0 };
	s->resume_done = 0;
	s->resume_ns = xdc_now_ns();
	s->state = TCP_XDC_RESUMING;
	for (uint64_t n = s->sent_head; n != s->sent_next; n++)
		s->sent[n % TCP_XDC_SENT_MAX].end = 0;
	return 0;
}

/* A broken send stream: one step of its dial. */
static int send_redial(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		       uint64_t now)
{
	const struct mesh_host *host = tcp_xdc_host;
	struct mesh_stream_new ns;
	char what[256];
	int ret;

	pthread_mutex_lock(&comm->rejoin_lock);
	ret = host->rejoin_dial(host, comm->rejoin, s->index, &ns);
	pthread_mutex_unlock(&comm->rejoin_lock);
	if (!ret)
		return send_adopt(comm, s, &ns);
	if (ret == -EAGAIN)
		return 0;
	if (ret == -ESRCH || ret == -EACCES) {
		snprintf(what, sizeof(what), "%s after the stream broke (%s)",
			 ret == -ESRCH ?
			 "the peer keeps no such connection any more (it closed or failed it)" :
			 "the peer refused a stream dialed anew (another key)",
			 s->cause);
		return xdc_stream_fail(comm, s, -ECONNRESET, what);
	}
	/* Refused: nothing listens there any more.  A dial taken and never
	 * answered is not a refusal: a host that took it lives, and the
	 * path that lost the answer is an outage like any other. */
	if (ret != -ECONNREFUSED) {
		s->refused_ns = 0;
		return 0;
	}
	if (!s->refused_ns)
		s->refused_ns = now;
	if (now - s->refused_ns < (uint64_t)comm->timeout_ms * 500000ULL)
		return 0;
	snprintf(what, sizeof(what),
		 "the peer's host refused new streams for %llu ms (the peer process is gone) after the stream broke (%s)",
		 ms_since(s->refused_ns, now), s->cause);
	return xdc_stream_fail(comm, s, -ECONNREFUSED, what);
}

/*
 * A socket the peer's core took but the receiver never spoke on: the
 * path lost the answer, or the receiver is stuck.  Dialed anew; the
 * outage budget bounds it.
 */
static int send_unanswered(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			   uint64_t now)
{
	/* now may be older than resume_ns: the lane's clock, taken before
	 * the dial that set it in the same step */
	if (now < s->resume_ns || now - s->resume_ns < RESUME_ANSWER_NS)
		return 0;
	return xdc_stream_break(comm, s, ECONNRESET,
				"the peer took a stream dialed anew and never answered");
}

/* A new send socket: the receiver's count in, the confirmation out. */
static int send_resume(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		       uint64_t now)
{
	uint64_t chunks, tail = atomic_load(&s->sent_tail);
	char what[160];

	while (s->resume_done < TCP_XDC_RESUME_SIZE) {
		ssize_t n = recv(s->fd, s->resume + s->resume_done,
				 TCP_XDC_RESUME_SIZE - s->resume_done,
				 MSG_DONTWAIT);

		if (n == 0)
			return xdc_stream_syscall_fail(comm, s, ECONNRESET);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ?
			       send_unanswered(comm, s, now) :
			       xdc_stream_syscall_fail(comm, s, errno);
		s->resume_done += (size_t)n;
	}
	if (s->resume_done == TCP_XDC_RESUME_SIZE) {
		if (tcp_xdc_resume_parse(s->resume, TCP_XDC_RESUME_ASK,
					 &chunks))
			return xdc_stream_fail(comm, s, -EPROTO,
					       "malformed resume message");
		if (chunks > tail || chunks + TCP_XDC_SENT_MAX < s->sent_head) {
			snprintf(what, sizeof(what),
				 "the peer resumes at chunk %llu, kept are %llu to %llu",
				 (unsigned long long)chunks,
				 (unsigned long long)s->sent_head,
				 (unsigned long long)tail);
			return xdc_stream_fail(comm, s, -EPROTO, what);
		}
		/* what it has whole is done, though not acknowledged here;
		 * what its kernel acknowledged it reads from the old socket */
		while (s->sent_head < chunks)
			sent_pop(s);
		chunks = s->sent_head;
		s->sent_next = chunks;
		for (uint64_t n = chunks; n != tail; n++) {
			atomic_fetch_add(&comm->resent_chunks, 1);
			atomic_fetch_add(&comm->resent_bytes,
					 s->sent[n % TCP_XDC_SENT_MAX].len);
		}
		tcp_xdc_resume_encode(s->resume, TCP_XDC_RESUME_CONFIRM,
				      chunks);
	}
	while (s->resume_done < 2 * TCP_XDC_RESUME_SIZE) {
		size_t off = s->resume_done - TCP_XDC_RESUME_SIZE;
		struct iovec iov = { s->resume + off,
				     TCP_XDC_RESUME_SIZE - off };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n = xdc_stream_send(s, &msg);

		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 :
			       xdc_stream_syscall_fail(comm, s, errno);
		s->resume_done += (size_t)n;
	}
	s->state = TCP_XDC_IDLE;
	s->refused_ns = 0;
	outage_end(comm, s, "resumed");
	return 0;
}

int xdc_send_resume_step(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 uint64_t now, int *sleep_ms)
{
	int ret = 0;

	if (s->state == TCP_XDC_BROKEN)
		ret = send_redial(comm, s, now);
	if (!ret && s->state == TCP_XDC_RESUMING)
		ret = send_resume(comm, s, now);
	if (!ret && s->broken_ns)
		ret = xdc_outage_check(comm, s, now);
	if ((s->state == TCP_XDC_BROKEN || s->state == TCP_XDC_RESUMING) &&
	    *sleep_ms != 0 &&
	    (*sleep_ms < 0 || *sleep_ms > RESUME_TICK_MS))
		*sleep_ms = RESUME_TICK_MS;
	return ret;
}

/* ---- receive side ---- */

/* Lane 0 of a receiving comm takes what was dialed anew for its streams. */
void xdc_recv_take(struct tcp_xdc_comm *comm, uint64_t now, int *sleep_ms)
{
	const struct mesh_host *host = tcp_xdc_host;
	uint64_t period = atomic_load(&comm->broken) ?
			  RESUME_TICK_MS * 1000000ULL : TAKE_IDLE_NS;
	struct mesh_stream_new ns;
	int left;

	if (now >= comm->next_take_ns) {
		comm->next_take_ns = now + period;
		while (!host->rejoin_take(host, comm->rejoin, &ns)) {
			struct tcp_xdc_stream *s;
			int old;

			if (ns.index < 0 || ns.index >= comm->nstreams) {
				close(ns.fd);
				continue;
			}
			s = &comm->streams[ns.index];
			pthread_mutex_lock(&comm->rejoin_lock);
			old = atomic_exchange(&s->next_fd, -1);
			memcpy(s->next_secret, ns.secret, sizeof(ns.secret));
			s->next_secret_len = ns.secret_len;
			atomic_store(&s->next_fd, ns.fd);
			pthread_mutex_unlock(&comm->rejoin_lock);
			explicit_bzero(ns.secret, sizeof(ns.secret));
			/* the sender gave up on the older one */
			if (old >= 0)
				close(old);
			xdc_lane_wake(s->lane);
		}
	}
	left = (int)((comm->next_take_ns - now) / 1000000) + 1;
	if (*sleep_ms < 0 || *sleep_ms > left)
		*sleep_ms = left;
}

/*
 * A receive stream and a socket dialed anew.  The receiver asks at once,
 * with the chunks it has whole; the sender answers with where it goes on,
 * which is later when chunks it saw acknowledged still wait, unread, in
 * the old socket (a chunk held back for a receive not yet posted, and
 * what follows it).  The stream reads the old socket up to there, as it
 * would have anyway, and only then moves to the new one: no chunk the
 * sender may have completed is lost, and no wait is added.
 */
static void recv_new_drop(struct tcp_xdc_stream *s)
{
	socket_abort(s->new_fd);
	s->new_fd = -1;
	xdc_crypt_free(&s->new_crypt);
}

/*
 * The socket dialed anew ended, or never answered, before it resumed
 * anything.  Whoever dialed it (the sender, or a party that saw the
 * rejoin key go by in clear), that is one more outage event of the
 * stream and no end of the connection: an old socket that still works,
 * or that had ended in order, goes on as before and the event ends here;
 * only a stream whose socket broke stays out for the next dial, within
 * the outage's budget (outage_ms) from its break.
 */
static void recv_new_lost(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	recv_new_drop(s);
	if (s->was_ended) {
		s->was_ended = false;
		s->state = TCP_XDC_ENDED;
		atomic_fetch_add(&comm->ended, 1);
	}
	/* ended while parked, and parked still (read on, it counts its end
	 * when it reads it) */
	if (s->was_early && s->state == TCP_XDC_PARKED) {
		s->end_early = true;
		atomic_store(&s->early_seq, s->seq);
		atomic_fetch_add(&comm->ended, 1);
	}
	s->was_early = false;
	if (s->state == TCP_XDC_BROKEN || !s->broken_ns)
		return;
	/* no sign of the sender after all: a reset may mean it is gone */
	s->dialed = false;
	outage_end(comm, s,
		   "went on: the socket dialed anew was lost before it answered");
}

static int recv_ask(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	uint8_t secret[32], ask[TCP_XDC_RESUME_SIZE];
	size_t secret_len;
	int fd, ret = 0;
	bool was;

	pthread_mutex_lock(&comm->rejoin_lock);
	fd = atomic_exchange(&s->next_fd, -1);
	memcpy(secret, s->next_secret, sizeof(secret));
	secret_len = s->next_secret_len;
	explicit_bzero(s->next_secret, sizeof(s->next_secret));
	pthread_mutex_unlock(&comm->rejoin_lock);
	if (fd < 0)
		return 0;
	/* a newer one: the sender gave up on the one we asked on */
	recv_new_drop(s);
	if (!s->broken_ns) {
		snprintf(s->cause, sizeof(s->cause),
			 "the sender dialed it anew");
		outage_begin(comm, s, xdc_now_ns());
	}
	tcp_xdc_stream_setup(comm->ctx, fd, s->index, comm->peer, false,
			     comm->traffic_class);
	s->new_fd = fd;
	was = reset_out(s);
	s->dialed = true;	/* the sender lives */
	resets_out_update(comm, s, was);
	s->confirmed = false;
	s->asked = s->chunks;
	s->resume_done = 0;
	if (s->crypt)
		ret = rekey(comm, s, secret, secret_len, &s->new_crypt);
	explicit_bzero(secret, sizeof(secret));
	if (ret)
		return ret;
	tcp_xdc_resume_encode(ask, TCP_XDC_RESUME_ASK, s->asked);
	s->resume_ns = xdc_now_ns();
	/* a fresh socket takes 16 bytes; one that does not broke again */
	if (send(fd, ask, sizeof(ask), MSG_DONTWAIT | MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(ask))
		recv_new_lost(comm, s);
	return 0;
}

/* The sender's answer on the new socket: 0 once read or not yet.  A
 * live sender answers within a round trip of our question; the old
 * socket waits for it unread, so one that does not come is given up. */
static int recv_confirm(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			uint64_t now)
{
	uint64_t chunks;
	char what[160];

	while (s->resume_done < TCP_XDC_RESUME_SIZE) {
		struct iovec iov = { s->resume + s->resume_done,
				     TCP_XDC_RESUME_SIZE - s->resume_done };
		uint64_t wire = 0;
		ssize_t n = s->new_crypt ?
			tcp_xdc_crypt_recv(s->new_crypt, s->new_fd, &iov, 1,
					   &wire) :
			tcp_xdc_readv(s->new_fd, &iov, 1, &wire);

		if (n == -EAGAIN) {
			/* now may be older than resume_ns (the lane's clock) */
			if (now > s->resume_ns &&
			    now - s->resume_ns >= RESUME_ANSWER_NS)
				recv_new_lost(comm, s);
			return 0;
		}
		if (n == -EBADMSG)
			return xdc_stream_fail(comm, s, -EBADMSG,
					       s->new_crypt->why);
		if (n <= 0) {
			/* that socket broke too: wait for the next one */
			recv_new_lost(comm, s);
			return 0;
		}
		s->resume_done += (size_t)n;
	}
	if (tcp_xdc_resume_parse(s->resume, TCP_XDC_RESUME_CONFIRM,
				 &chunks) || chunks < s->asked ||
	    chunks > s->asked + TCP_XDC_SENT_MAX) {
		snprintf(what, sizeof(what),
			 "the sender resumes at chunk %llu, asked for %llu",
			 (unsigned long long)chunks,
			 (unsigned long long)s->asked);
		return xdc_stream_fail(comm, s, -EPROTO, what);
	}
	s->confirmed = true;
	s->resume_to = chunks;
	s->was_ended = false;	/* the end we read was none */
	s->was_early = false;
	return 0;
}

/* Leaves the old socket for the new one: the sender writes chunk
 * resume_to next there; a chunk begun on the old one counts for nothing. */
static void recv_switch(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	bool was = reset_out(s);

	socket_abort(s->fd);
	s->fd = s->new_fd;
	s->new_fd = -1;
	if (s->crypt) {
		xdc_crypt_free(&s->crypt);
		s->crypt = s->new_crypt;
		s->new_crypt = NULL;
	}
	s->req = NULL;
	stored_drop_partial(s);
	s->hdr_done = 0;
	s->payload_done = 0;
	s->peer_done = false;
	s->confirmed = false;
	s->reset = false;
	s->parked_out = false;
	s->dialed = false;
	s->quiet_since = 0;
	s->state = TCP_XDC_IDLE;
	resets_out_update(comm, s, was);
	outage_end(comm, s, "resumed");
}

int xdc_recv_parked_reset(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	bool was = reset_out(s);

	snprintf(s->cause, sizeof(s->cause),
		 "reset while its next chunk waits for a receive");
	s->reset = true;
	s->parked_out = true;
	if (!s->broken_ns)
		outage_begin(comm, s, xdc_now_ns());
	resets_out_update(comm, s, was);
	return 0;
}

void xdc_recv_unpark(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	bool was = reset_out(s);

	s->state = TCP_XDC_PAYLOAD;
	s->parked_out = false;
	resets_out_update(comm, s, was);
}

bool xdc_recv_switch_due(const struct tcp_xdc_stream *s)
{
	return s->confirmed && s->chunks >= s->resume_to;
}

int xdc_recv_resume_step(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
			 uint64_t now)
{
	int ret = 0;

	if (atomic_load_explicit(&s->next_fd, memory_order_relaxed) >= 0 &&
	    (s->state == TCP_XDC_ENDED || s->end_early)) {
		/* dialed anew: the end we read may be none (an end in order
		 * is a FIN, so no reset is counted), unless the new socket
		 * is lost before it answers (recv_new_lost); a parked
		 * stream stays parked on what its old socket holds */
		atomic_fetch_sub(&comm->ended, 1);
		if (s->end_early) {
			s->end_early = false;
			s->was_early = true;
			atomic_store(&s->early_seq, NO_WAIT);
		} else {
			s->state = TCP_XDC_BROKEN;
			s->was_ended = true;
		}
	}
	if (atomic_load_explicit(&s->next_fd, memory_order_relaxed) >= 0)
		ret = recv_ask(comm, s);
	if (!ret && s->new_fd >= 0 && !s->confirmed)
		ret = recv_confirm(comm, s, now);
	if (!ret && s->new_fd >= 0 && s->confirmed) {
		if (xdc_recv_switch_due(s))
			recv_switch(comm, s);
		else if (s->state == TCP_XDC_BROKEN)
			ret = xdc_stream_fail(comm, s, -EPROTO,
				"the old socket ended before the chunks the sender saw acknowledged");
	}
	if (!ret && s->broken_ns)
		ret = xdc_outage_check(comm, s, now);
	return ret;
}
