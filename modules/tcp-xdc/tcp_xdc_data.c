/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc data path: requests and the life of a connection.
 *
 * A message is cut into chunks; each chunk travels on one stream as a header
 * followed by its payload.  Pool threads (tcp_xdc_pool.c) claim chunks for
 * send streams from one shared cursor with a compare-and-swap, so a stream
 * that drains faster simply takes more chunks (tcp_xdc_send.c), and read
 * each chunk straight into the posted buffer (tcp_xdc_recv.c).
 *
 * The proxy thread (isend, irecv, test) never blocks and shares no lock with
 * the pool threads: it publishes a message by bumping comm->posted, wakes
 * sleeping threads through their eventfd, and reads completion counters.
 * A small message skips the hand-off: isend writes it and test() reads it
 * on stream 0 when no pool thread holds that stream.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_xdc_crypt.h"
#include "tcp_xdc_data.h"
#include "tcp_xdc_linger.h"
#include "tcp_xdc_pool.h"
#include "tcp_xdc_recv.h"
#include "tcp_xdc_resume.h"
#include "tcp_xdc_send.h"
#include "tcp_xdc_stall.h"
#include "tcp_xdc_stream.h"
#include "tcp_xdc_window.h"

/* ---- requests (proxy thread) ---- */

/*
 * The comm's failure, WARNed the first time a request runs into it.  A
 * leg's stays the INFO line of xdc_comm_fail: the module it serves
 * decides whether it is fatal and says so (module.h 1.10).
 */
static int comm_error(struct tcp_xdc_comm *comm)
{
	int err = atomic_load_explicit(&comm->error, memory_order_acquire);
	int expected = TCP_XDC_FAILED;

	if (err && !comm->leg &&
	    atomic_compare_exchange_strong(&comm->fail_state, &expected,
					   TCP_XDC_WARNED))
		MESH_WARN("%s", comm->errmsg);
	return err;
}

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
 * receive still unfinished after that is short for good.  On the sending
 * side the receiver closed every stream: it takes nothing more.
 */
static int peer_closed(struct tcp_xdc_req *req)
{
	struct tcp_xdc_comm *comm = req->comm;
	uint64_t total = atomic_load(&req->total);
	const char *how = atomic_load(&comm->ended_reset) ? "reset" : "closed";

	if (comm->is_send)
		xdc_comm_fail(comm, -EPIPE,
			      "the peer closed the connection before receiving message %llu",
			      (unsigned long long)req->seq);
	else if (total == TOTAL_UNKNOWN || !atomic_load(&req->bytes_done))
		xdc_comm_fail(comm, -ECONNRESET,
			  "the peer %s the connection before sending message %llu",
			  how, (unsigned long long)req->seq);
	else
		xdc_comm_fail(comm, -ECONNRESET,
			  "the peer %s the connection with message %llu incomplete (%llu of %llu bytes)",
			  how, (unsigned long long)req->seq,
			  (unsigned long long)atomic_load(&req->bytes_done),
			  (unsigned long long)total);
	return comm_error(comm);
}

/*
 * test() reads stream 0 itself while the messages are small.  In a run of
 * large ones it would only take headers away from the data threads and
 * spend system calls of the proxy thread, which serves every channel.
 */
static void recv_inline_follow(struct tcp_xdc_comm *comm, size_t size)
{
	bool small = size <= comm->inline_max;

	if (!comm->inline_max || small == comm->recv_inline)
		return;
	comm->recv_inline = small;
	if (!small)
		xdc_recv_inline_stop(comm);
}

static int req_test(void *request, int *done, int *sizes)
{
	struct tcp_xdc_req *req = request;
	struct tcp_xdc_comm *comm = req->comm;
	bool closed = false;
	size_t size;
	int err;

	*done = 0;
	if (comm->recv_inline && !req_finished(req, &size))
		xdc_recv_inline(comm);
	/* resuming, a send is done once the peer's kernel has it all */
	if (comm->is_send && comm->rejoin && !req_finished(req, &size))
		xdc_send_reap_all(comm);
	for (;;) {
		if (req_finished(req, &size)) {
			if (!comm->is_send)
				recv_inline_follow(comm, size);
			req->in_use = false;
			atomic_fetch_add_explicit(&comm->completed, 1,
						  memory_order_relaxed);
			mesh_count(&comm->m_bytes, size);
			mesh_count(&comm->m_requests, 1);
			*done = 1;
			if (sizes)
				*sizes = (int)size;
			return 0;
		}
		err = comm_error(comm);
		if (err || closed)
			return err ? err : peer_closed(req);
		/* Once all ended, look at the request again: its last
		 * chunks may have landed since. */
		closed = comm->is_send ?
			 atomic_load_explicit(&comm->ended,
					      memory_order_acquire) ==
			 comm->nstreams :
			 xdc_recv_all_ended(comm, req->seq);
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
	__atomic_store_n(&req->prof, xdc_prof_request(), __ATOMIC_RELAXED);
	atomic_store(&comm->posted, req->seq + 1);
	*request = req;
	if (req->nchunks == 1 && size <= comm->inline_max &&
	    xdc_send_inline(comm, req))
		return 0;
	for (int i = 0; i < comm->nlanes && woken < req->nchunks; i++) {
		struct tcp_xdc_lane *l = &comm->lanes[i];

		/* seq_cst, like the store of posted above and the thread's
		 * want_work-then-posted: neither side misses the other */
		if (atomic_load(&l->want_work) &&
		    atomic_exchange(&l->want_work, 0)) {
			xdc_lane_wake(l);
			woken++;
		}
	}
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
	__atomic_store_n(&req->prof, xdc_prof_request(), __ATOMIC_RELAXED);
	atomic_store(&comm->posted, req->seq + 1);
	for (int i = 0; i < comm->nlanes; i++) {
		struct tcp_xdc_lane *l = &comm->lanes[i];

		if (atomic_load(&l->wait_seq) <= req->seq)
			xdc_lane_wake(l);
	}
	*request = req;
	return 0;
}

/* ---- lifecycle ---- */

/* From here on the proxy thread alone moves the streams. */
static void lanes_stop(struct tcp_xdc_comm *comm)
{
	atomic_store(&comm->stop, 1);
	if (xdc_pool_detach(comm))
		comm->frees_ctx = true;
}

static void comm_destroy(struct tcp_xdc_comm *comm)
{
	struct tcp_xdc_ctx *ctx = comm->ctx;
	bool frees_ctx;

	lanes_stop(comm);
	frees_ctx = comm->frees_ctx;
	for (int i = 0; i < comm->nlanes; i++)
		free(comm->lanes[i].streams);
	for (int i = 0; i < comm->nstreams; i++) {
		struct tcp_xdc_stream *s = &comm->streams[i];

		if (s->fd >= 0)
			close(s->fd);
		if (atomic_load(&s->next_fd) >= 0)
			close(atomic_load(&s->next_fd));
		if (s->new_fd >= 0)
			close(s->new_fd);
		xdc_crypt_free(&s->new_crypt);
		xdc_crypt_free(&s->crypt);
		xdc_keep_drop(comm, s);
		free(s->sent);
		free(s->stored);
	}
	if (comm->rejoin)
		tcp_xdc_host->rejoin_close(tcp_xdc_host, comm->rejoin);
	pthread_mutex_destroy(&comm->rejoin_lock);
	free(comm->lanes);
	free(comm->streams);
	free(comm);
	if (frees_ctx)
		tcp_xdc_ctx_free(ctx);
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

	if (!send_owes_nothing(comm)) {
		/* the receiver must read an end here, not a reset it would
		 * wait out as an outage: no ping left unread, a FIN behind
		 * what was written */
		for (int i = 0; i < comm->nstreams; i++) {
			struct tcp_xdc_stall st = { 0 };

			if (comm->streams[i].fd < 0)
				continue;
			tcp_xdc_pings_take(comm->streams[i].fd, &st);
			shutdown(comm->streams[i].fd, SHUT_WR);
		}
		return;
	}
	for (int i = 0; i < comm->nstreams; i++)
		if (comm->streams[i].fd < 0)
			return;		/* one is out: close them all */
	for (int i = 0; i < comm->nstreams; i++) {
		fds[i] = comm->streams[i].fd;
		shutdown(fds[i], SHUT_WR);
	}
	if (tcp_xdc_linger_add(comm->ctx, comm->peer, fds, comm->nstreams))
		return;
	for (int i = 0; i < comm->nstreams; i++)
		comm->streams[i].fd = -1;
}

/*
 * One lane per pool thread the comm uses, stream i in lane i % nlanes.
 * From here on the comm owns the fds, also when this fails.
 */
static int comm_alloc(struct tcp_xdc_ctx *ctx, bool is_send, int nstreams,
		      const int *fds, struct tcp_xdc_comm **comm_out)
{
	int workers = xdc_pool_workers(ctx);
	int nlanes = workers < nstreams ? workers : nstreams;
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
	comm->nstreams = nstreams;
	pthread_mutex_init(&comm->rejoin_lock, NULL);
	for (int i = 0; i < nstreams; i++) {
		comm->streams[i].fd = fds[i];
		comm->streams[i].index = i;
		comm->streams[i].revents = is_send ? POLLOUT : POLLIN;
		atomic_init(&comm->streams[i].next_fd, -1);
		comm->streams[i].new_fd = -1;
		atomic_init(&comm->streams[i].early_seq, NO_WAIT);
		atomic_init(&comm->streams[i].stored_seq, NO_WAIT);
	}
	for (int i = 0; i < TCP_XDC_MAX_REQUESTS; i++) {
		comm->reqs[i].base.test = req_test;
		comm->reqs[i].comm = comm;
	}
	*comm_out = comm;

	comm->lanes = calloc((size_t)nlanes, sizeof(*comm->lanes));
	if (!comm->lanes)
		return -ENOMEM;
	comm->nlanes = nlanes;
	for (int i = 0; i < nlanes; i++) {
		struct tcp_xdc_lane *l = &comm->lanes[i];

		l->comm = comm;
		l->wake_fd = -1;
		atomic_init(&l->wait_seq, NO_WAIT);
		l->streams = calloc((size_t)(nstreams + nlanes - 1) /
				    (size_t)nlanes, sizeof(*l->streams));
		if (!l->streams)
			return -ENOMEM;
	}
	for (int i = 0; i < nstreams; i++) {
		struct tcp_xdc_lane *l = &comm->lanes[i % nlanes];

		comm->streams[i].lane = l;
		l->streams[l->nstreams++] = &comm->streams[i];
	}
	return 0;
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

static int crypt_start(struct tcp_xdc_comm *comm, const uint8_t *secret,
		       size_t secret_len, uint32_t record_size)
{
	for (int i = 0; i < comm->nstreams; i++) {
		int ret = xdc_crypt_new(comm, i, secret, secret_len,
					record_size, &comm->streams[i].crypt);

		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Resuming: a send stream keeps its chunks until they are acknowledged,
 * and a blocked one with no word from the peer for stall_ms is dialed
 * anew: long enough for three of a live receiver's pings, so that only a
 * dead path or peer stays that silent, and no longer than timeout_ms.
 */
static int resume_start(struct tcp_xdc_comm *comm, struct mesh_rejoin *rejoin,
			uint32_t record_size)
{
	uint64_t stall = 3 * comm->ping_busy_ns / 1000000;

	comm->rejoin = rejoin;
	comm->outage_ms = comm->ctx->outage_ms;
	comm->record_size = record_size;
	if (stall < 1000)
		stall = 1000;
	if (comm->timeout_ms && stall > (uint64_t)comm->timeout_ms)
		stall = (uint64_t)comm->timeout_ms;
	comm->stall_ms = stall;
	for (int i = 0; comm->is_send && i < comm->nstreams; i++) {
		comm->streams[i].sent = calloc(TCP_XDC_SENT_MAX,
					       sizeof(struct tcp_xdc_sent));
		if (!comm->streams[i].sent)
			return -ENOMEM;
	}
	return 0;
}

/* The end of the comm's INFO line: its round trip and what it keeps. */
static void window_text(const struct tcp_xdc_comm *comm, char *buf,
			size_t cap)
{
	int n = snprintf(buf, cap, ", round trip %u.%03u ms",
			 comm->rtt_us / 1000, comm->rtt_us % 1000);

	if (n < 0 || (size_t)n >= cap)
		return;
	if (!comm->is_send) {
		if (comm->keep_ring)
			snprintf(buf + n, cap - (size_t)n,
				 ", stores up to %zu KiB a stream ahead of its receives (product %llu KiB)",
				 comm->keep_ring >> 10,
				 (unsigned long long)(comm->bdp >> 10));
		return;
	}
	if (!comm->rejoin)
		return;
	if (comm->keep_ring)
		snprintf(buf + n, cap - (size_t)n,
			 ", keeps %zu KiB a stream (product %llu KiB)",
			 comm->keep_ring >> 10,
			 (unsigned long long)(comm->bdp >> 10));
	else
		snprintf(buf + n, cap - (size_t)n,
			 ", sends done once acknowledged (product %llu KiB)",
			 (unsigned long long)(comm->bdp >> 10));
}

int tcp_xdc_comm_start(struct tcp_xdc_ctx *ctx, bool is_send,
		       const struct mesh_ctrl *ctrl, size_t chunk_size,
		       int nstreams, const int *fds, uint32_t record_size,
		       struct mesh_rejoin *rejoin, int traffic_class,
		       int rate_mbps, struct tcp_xdc_comm **comm_out)
{
	const char *peer = ctrl->peer;
	struct tcp_xdc_comm *comm = NULL;
	char sealed[128] = "not encrypted";
	char resumes[64] = "no resuming";
	char window[128] = "";
	char marked[48] = "";
	int ret;

	ret = tcp_xdc_pool_start(ctx);
	if (ret) {
		for (int i = 0; i < nstreams; i++)
			close(fds[i]);
		if (rejoin)
			tcp_xdc_host->rejoin_close(tcp_xdc_host, rejoin);
		return ret;
	}
	ret = comm_alloc(ctx, is_send, nstreams, fds, &comm);
	if (ret) {
		if (rejoin && !comm)
			tcp_xdc_host->rejoin_close(tcp_xdc_host, rejoin);
		else if (comm)
			comm->rejoin = rejoin;
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
	comm->inline_max = ctx->inline_max;
	comm->traffic_class = traffic_class;
	if (traffic_class >= 0)
		snprintf(marked, sizeof(marked), ", traffic class %d (DSCP %d)",
			 traffic_class, traffic_class >> 2);
	/* the record layer reads whole records (up to record_size): that
	 * work stays off NCCL's proxy thread */
	comm->recv_inline = !is_send && ctx->inline_max && !record_size;
	if (ctx->timeout_ms) {
		uint64_t busy = (uint64_t)ctx->timeout_ms / 8;

		busy = busy < 50 ? 50 : busy > 1000 ? 1000 : busy;
		comm->ping_busy_ns = busy * 1000000;
		comm->ping_idle_ns = (uint64_t)ctx->keepalive_idle_s *
				     500000000ULL;
	}
	snprintf(comm->peer, sizeof(comm->peer), "%s", peer ? peer : "?");
	comm->leg = ctrl->leg != 0;
	if (rejoin) {
		ret = resume_start(comm, rejoin, record_size);
		if (ret) {
			MESH_WARN("peer %s: out of memory for a connection",
				  comm->peer);
			goto err;
		}
		snprintf(resumes, sizeof(resumes), "outages up to %d ms",
			 comm->outage_ms);
	}
	if (record_size) {
		ret = crypt_start(comm, ctrl->secret, ctrl->secret_len,
				  record_size);
		if (ret) {
			MESH_WARN("peer %s: cannot key the encrypted streams: %s",
				  comm->peer, strerror(-ret));
			goto err;
		}
		snprintf(sealed, sizeof(sealed),
			 "encrypted (%s by %s, %u KiB records)",
			 TCP_XDC_CIPHER_NAME,
			 tcp_xdc_aead_library(ctx->aead_lib),
			 record_size >> 10);
	}
	ret = fds_nonblocking(comm);
	if (ret)
		goto err;
	xdc_window_start(comm, rate_mbps);
	window_text(comm, window, sizeof(window));
	ret = xdc_pool_attach(ctx, comm);
	if (ret)
		goto err;
	MESH_INFO("%s comm %u %s %s: %d streams on %d data threads, %zu-%zu KiB chunks, timeout %d ms, %s, %s%s%s",
		  xdc_comm_kind(comm), comm->id, is_send ? "to" : "from",
		  comm->peer, comm->nstreams, comm->nlanes,
		  comm->min_chunk >> 10, chunk_size >> 10, comm->timeout_ms,
		  resumes, sealed, marked, window);
	*comm_out = comm;
	return 0;
err:
	if (comm)
		comm_destroy(comm);
	return ret;
}

/*
 * Whether every stream's kept chunks are acknowledged, reaped here where
 * no data thread holds the stream (one that does is not done yet).
 */
static bool send_acked(struct tcp_xdc_comm *comm)
{
	for (int i = 0; i < comm->nstreams; i++) {
		struct tcp_xdc_stream *s = &comm->streams[i];
		bool left;

		if (!xdc_sent_unacked(s))
			continue;
		if (!xdc_stream_hold(s))
			return false;
		xdc_sent_reap(s);
		left = xdc_sent_unacked(s);
		xdc_stream_hand_back(s, false);
		if (left)
			return false;
	}
	return true;
}

static void send_close(struct tcp_xdc_comm *comm)
{
	lanes_stop(comm);
	send_close_streams(comm);
	comm_destroy(comm);
}

/*
 * The linger thread's step of a closing send comm (close_later): closed
 * as any other once its peer has everything, it failed, or fini's wait
 * ran out (expired); true once it is gone.
 */
static bool close_step(struct tcp_xdc_comm *comm, bool expired)
{
	int err = atomic_load(&comm->error);

	if (!err && !expired && !send_acked(comm))
		return false;
	/* no test() sees the failure of a comm NCCL closed: said here, at
	 * INFO, as the receiver sees for itself what it did not get */
	if (err)
		MESH_INFO("send comm %u to %s, closed: failed with copies of completed sends unacknowledged (%s)",
			  comm->id, comm->peer, comm->errmsg);
	else if (expired)
		MESH_INFO("send comm %u to %s, closed: unloading, dropping copies of completed sends the peer has not acknowledged",
			  comm->id, comm->peer);
	send_close(comm);
	return true;
}

/*
 * A completed send arrives whatever the sender does next.  Resuming, it
 * may have completed as a copy the peer has not acknowledged, which a
 * break of the path would lose were the comm gone: then the comm stays
 * in the pool, driven (and resumed) as before, and the linger thread
 * finishes the close once the peer has it all.  close_send returns at
 * once either way.
 */
static bool close_later(struct tcp_xdc_comm *comm)
{
	uint64_t kept = 0;

	if (!comm->keep_ring || !send_owes_nothing(comm) || send_acked(comm))
		return false;
	for (int i = 0; i < comm->nstreams; i++)
		kept += tcp_xdc_keep_used(&comm->streams[i].keep);
	/* the linger thread may finish it at once: no touch after this */
	MESH_INFO("send comm %u to %s: closed with about %llu KiB of completed sends not yet acknowledged: kept until the peer has them",
		  comm->id, comm->peer, (unsigned long long)(kept >> 10));
	return !tcp_xdc_linger_add_comm(comm->ctx, comm, close_step);
}

int tcp_xdc_close_send(void *send_comm)
{
	struct tcp_xdc_comm *comm = send_comm;

	if (comm && !close_later(comm))
		send_close(comm);
	return 0;
}

int tcp_xdc_close_recv(void *recv_comm)
{
	if (recv_comm)
		comm_destroy(recv_comm);
	return 0;
}

int tcp_xdc_describe(void *comm, struct mesh_conn_info *info)
{
	const struct tcp_xdc_comm *c = comm;

	snprintf(info->cipher, sizeof(info->cipher), "%s",
		 c->streams[0].crypt ? TCP_XDC_CIPHER_NAME : "none");
	return 0;
}

/* The window now: what the rings hold and keep (a resuming send's
 * copies, a receive's early chunks), and what a send's sockets have not
 * seen acknowledged (as the holders last saw it). */
static void window_counters(const struct tcp_xdc_comm *c, mesh_counter_fn emit,
			    void *arg)
{
	uint64_t kept = 0, unacked = 0;

	for (int i = 0; i < c->nstreams; i++) {
		kept += tcp_xdc_keep_used(&c->streams[i].keep);
		unacked += (uint64_t)__atomic_load_n(&c->streams[i].outq,
						     __ATOMIC_RELAXED);
	}
	emit(arg, &(struct mesh_counter){ .name = "window_bytes",
		.help = "tcp-xdc: bytes of the rings that keep copies of completed sends until the peer acknowledges them, or chunks that came before their receive was posted.",
		.kind = MESH_COUNTER_GAUGE,
		.value = atomic_load(&c->keep_held) });
	if (!c->is_send) {
		emit(arg, &(struct mesh_counter){ .name = "stored_bytes",
			.help = "tcp-xdc: bytes of chunks that came before their receive was posted, held until it is.",
			.kind = MESH_COUNTER_GAUGE, .value = kept });
		return;
	}
	emit(arg, &(struct mesh_counter){ .name = "kept_bytes",
		.help = "tcp-xdc: bytes of completed sends kept as copies the peer has not acknowledged yet.",
		.kind = MESH_COUNTER_GAUGE, .value = kept });
	emit(arg, &(struct mesh_counter){ .name = "unacked_bytes",
		.help = "tcp-xdc: bytes written to the data streams the peer has not acknowledged yet (in flight or queued), as last seen.",
		.kind = MESH_COUNTER_GAUGE, .value = unacked });
}

/* What the proxy thread and the streams' holders counted; loads only. */
int tcp_xdc_comm_counters(void *comm, mesh_counter_fn emit, void *arg)
{
	const struct tcp_xdc_comm *c = comm;
	/* record_size says whether the comm was keyed: a stream's crypt
	 * may be between sockets while it resumes */
	bool sealed = c->streams[0].crypt || c->record_size;
	uint64_t crypt = 0, bad = 0, stalls = 0;

	for (int i = 0; i < c->nstreams; i++) {
		crypt += mesh_count_read(&c->streams[i].m_crypt_bytes);
		bad += mesh_count_read(&c->streams[i].m_auth_failures);
		stalls += mesh_count_read(&c->streams[i].m_stalls);
	}
	emit(arg, &(struct mesh_counter){ .name = "bytes",
		.value = mesh_count_read(&c->m_bytes) });
	if (c->is_send ? c->rejoin != NULL : c->keep_ring != 0)
		window_counters(c, emit, arg);
	emit(arg, &(struct mesh_counter){ .name = "requests",
		.value = mesh_count_read(&c->m_requests) });
	if (c->is_send)
		emit(arg, &(struct mesh_counter){ .name = "stalls",
			.value = stalls });
	if (sealed)
		emit(arg, &(struct mesh_counter){ .name = c->is_send ?
			"encrypted_bytes" : "decrypted_bytes", .value = crypt });
	if (sealed && !c->is_send)
		emit(arg, &(struct mesh_counter){ .name = "auth_failures",
			.value = bad });
	return 0;
}
