/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc connection setup: a hello / reply exchange over the core's control
 * channel, and the data streams through ctrl->stream(), which the connecting
 * side dials all at once, as soon as its hello is out: the setup costs the
 * round trips of one stream, not of each, and they overlap the reply's
 * (docs/modules/tcp-xdc.md, "Setup round trips").  Every step is
 * non-blocking; progress lives in ctrl->module_state between calls.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_xdc_conn.h"
#include "tcp_xdc_crypt.h"
#include "tcp_xdc_data.h"
#include "tcp_xdc_stream.h"
#include "tcp_xdc_window.h"

enum tcp_xdc_phase {
	TCP_XDC_SEND_HELLO,
	TCP_XDC_WAIT_HELLO,
	TCP_XDC_WAIT_REPLY,
	TCP_XDC_SEND_REPLY,
	TCP_XDC_STREAMS,
};

struct tcp_xdc_pending {
	enum tcp_xdc_phase phase;
	int nstreams;
	size_t chunk_size;
	uint32_t record_size;		/* 0: streams in clear */
	struct tcp_xdc_reply reply;	/* acceptor: until it is queued */
	uint64_t rejoin_key;		/* 0: no resuming */
	int traffic_class;		/* of the streams; -1: left as is */
	int rate_mbps;			/* the device's speed */
	int nfds;			/* streams taken; 0 once the comm has them */
	int fds[TCP_XDC_MAX_STREAMS];	/* by index; -1: not yet */
	int stream_err;			/* connector: a dial that failed while */
	int stream_bad;			/* the reply was due, and its index */
};

static struct tcp_xdc_pending *pending_get(const struct tcp_xdc_ctx *ctx,
					   int dev, struct mesh_ctrl *ctrl,
					   enum tcp_xdc_phase first)
{
	bool fresh;
	struct tcp_xdc_pending *p = mesh_ctrl_state(ctrl, sizeof(*p), &fresh);

	if (!p) {
		MESH_WARN("out of memory");
	} else if (fresh) {
		for (int i = 0; i < TCP_XDC_MAX_STREAMS; i++)
			p->fds[i] = -1;
		p->phase = first;
		/* NCCL's where it gave one: only ever the connecting
		 * side, the data's direction (module.h 1.9) */
		p->traffic_class = mesh_ctrl_traffic_class(ctrl,
							   ctx->traffic_class);
		p->rate_mbps = dev >= 0 && dev < ctx->ndevs ?
			       tcp_xdc_speed(ctx, dev) : 0;
	}
	return p;
}

static void pending_free(struct mesh_ctrl *ctrl)
{
	struct tcp_xdc_pending *p = ctrl->module_state;

	if (!p)
		return;
	for (int i = 0; p->nfds && i < TCP_XDC_MAX_STREAMS; i++)
		if (p->fds[i] >= 0)
			close(p->fds[i]);
	free(p);
	ctrl->module_state = NULL;
}

void tcp_xdc_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	(void)mctx;
	pending_free(ctrl);
}

static int stream_failed(const struct mesh_ctrl *ctrl,
			 const struct tcp_xdc_pending *p, int index, int err)
{
	MESH_WARN("peer %s: cannot open data stream %d/%d: %s", ctrl->peer,
		  index, p->nstreams, strerror(-err));
	return err;
}

/*
 * Returns 1 when all streams are there, 0 to come back later, or -errno
 * with the failed stream's index in *bad.  The connecting side steps
 * every stream's dial on each call, so that all are in flight at once;
 * the accepting side stops at the first one missing: asking for it moved
 * the listener on, which routed every stream that had arrived.
 */
static int streams_collect(struct tcp_xdc_ctx *ctx, struct mesh_ctrl *ctrl,
			   struct tcp_xdc_pending *p, bool is_send, int *bad)
{
	for (int i = 0; i < p->nstreams && p->nfds < p->nstreams; i++) {
		int fd = -1, ret;

		if (p->fds[i] >= 0)
			continue;
		ret = ctrl->stream(ctrl, i, &fd);
		if (ret == -EAGAIN && is_send)
			continue;
		if (ret == -EAGAIN)
			return 0;
		if (ret < 0) {
			*bad = i;
			return ret;
		}
		tcp_xdc_stream_setup(ctx, fd, i, ctrl->peer, is_send,
				     p->traffic_class);
		p->fds[i] = fd;
		p->nfds++;
	}
	return p->nfds == p->nstreams;
}

/*
 * The connecting side dials its streams while its hello's reply is on
 * the way.  A dial that fails then waits for the reply: a peer that
 * refused the connection may be gone already (its streams refused), and
 * its reason is the one to tell.
 */
static void streams_early(struct tcp_xdc_ctx *ctx, struct mesh_ctrl *ctrl,
			  struct tcp_xdc_pending *p)
{
	int ret;

	if (p->stream_err)
		return;
	ret = streams_collect(ctx, ctrl, p, true, &p->stream_bad);
	if (ret < 0)
		p->stream_err = ret;
}

/*
 * Keeps the connection reachable for streams dialed anew, when both ends
 * resume: the connector sent a key, the acceptor has an outage budget.
 * Without it the connection works as before, failing at the first fault.
 */
static struct mesh_rejoin *rejoin_keep(struct tcp_xdc_ctx *ctx,
				       struct mesh_ctrl *ctrl,
				       uint64_t key, bool is_send)
{
	const struct mesh_host *host = tcp_xdc_host;
	struct mesh_rejoin *rj = NULL;
	int ret;

	if (!key || !ctx->outage_ms || !MESH_HOST_HAS(host, rejoin_close) ||
	    !host->rejoin_close)
		return NULL;
	ret = is_send ? host->rejoin_to(host, ctrl, NULL, key, &rj) :
			host->rejoin_listen(host, ctrl, key, &rj);
	if (ret == -EOPNOTSUPP) {
		/* a leg of a relayed route: the relay resumes the route */
		MESH_INFO("peer %s: a relay's channel: the relay resumes it",
			  ctrl->peer);
		return NULL;
	}
	if (ret) {
		MESH_WARN("peer %s: cannot keep the connection for resuming (%s): it fails at the first fault",
			  ctrl->peer, strerror(-ret));
		return NULL;
	}
	return rj;
}

/* The comm owns the fds from here on, whatever the outcome. */
static int finish(struct tcp_xdc_ctx *ctx, struct mesh_ctrl *ctrl,
		  struct tcp_xdc_pending *p, bool is_send, void **comm_out)
{
	struct tcp_xdc_comm *comm;
	int ret;

	ret = tcp_xdc_comm_start(ctx, is_send, ctrl, p->chunk_size,
				 p->nstreams, p->fds, p->record_size,
				 rejoin_keep(ctx, ctrl, p->rejoin_key, is_send),
				 p->traffic_class, p->rate_mbps, &comm);
	p->nfds = 0;
	pending_free(ctrl);
	if (ret)
		return ret;
	*comm_out = comm;
	return 0;
}

/* Last phase of both sides: 0 while streams are missing or once the comm
 * is built, -errno on failure (the caller frees the pending state). */
static int streams_then_finish(struct tcp_xdc_ctx *ctx, struct mesh_ctrl *ctrl,
			       struct tcp_xdc_pending *p, bool is_send,
			       void **comm_out)
{
	int bad = 0, ret = p->stream_err;

	if (ret)
		return stream_failed(ctrl, p, p->stream_bad, ret);
	ret = streams_collect(ctx, ctrl, p, is_send, &bad);
	if (ret < 0)
		return stream_failed(ctrl, p, bad, ret);
	if (ret == 0)
		return ret;
	return finish(ctx, ctrl, p, is_send, comm_out);
}

/*
 * Keys come from the control connection's authentication: without a key
 * there is nothing to derive them from, and sending in clear what the
 * config says to encrypt is no fallback.
 */
static int encrypt_needs_key(const struct tcp_xdc_ctx *ctx,
			     const struct mesh_ctrl *ctrl)
{
	if (!ctx->encrypt || (ctrl->secret && ctrl->secret_len))
		return 0;
	MESH_WARN("peer %s: encrypt = true needs auth_key_file (the keys come "
		  "from its handshake); set one on both sides", ctrl->peer);
	return -EINVAL;
}

static int hello_send(struct tcp_xdc_ctx *ctx, struct mesh_ctrl *ctrl,
		      const struct tcp_xdc_pending *p)
{
	struct tcp_xdc_hello h;

	tcp_xdc_hello_encode(&h, p->nstreams, (uint32_t)ctx->chunk_size);
	tcp_xdc_hello_set_record_size(&h, ctx->encrypt ?
				      (uint32_t)ctx->record_size : 0);
	tcp_xdc_hello_set_rejoin_key(&h, p->rejoin_key);
	return ctrl->send(ctrl, &h, sizeof(h));
}


/* A fresh key for a connection that resumes; 0 (none) without a budget. */
static uint64_t rejoin_key_new(const struct tcp_xdc_ctx *ctx)
{
	uint64_t key = 0;

	while (ctx->outage_ms && !key)
		if (getrandom(&key, sizeof(key), 0) != sizeof(key))
			return 0;
	return key;
}

static int reply_check(struct mesh_ctrl *ctrl, const struct tcp_xdc_reply *r,
		       int len)
{
	char reason[sizeof(r->reason) + 1];
	int status = tcp_xdc_reply_parse(r, (size_t)len, reason,
					 sizeof(reason));

	if (status < 0) {
		MESH_WARN("peer %s: malformed reply to the tcp-xdc hello (%d bytes)",
			  ctrl->peer, len);
		return -EPROTO;
	}
	if (status) {
		MESH_WARN("peer %s refused the connection: %s", ctrl->peer,
			  reason[0] ? reason : strerror(status));
		return -ECONNREFUSED;
	}
	return 0;
}

int tcp_xdc_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
		    void **send_comm)
{
	struct tcp_xdc_ctx *ctx = mctx;
	struct tcp_xdc_pending *p;
	struct tcp_xdc_reply r;
	int ret;

	*send_comm = NULL;
	p = pending_get(ctx, dev, ctrl, TCP_XDC_SEND_HELLO);
	if (!p)
		return -ENOMEM;
	switch (p->phase) {
	case TCP_XDC_SEND_HELLO:
		ret = encrypt_needs_key(ctx, ctrl);
		if (ret)
			goto err;
		if (!p->rejoin_key)
			p->rejoin_key = rejoin_key_new(ctx);
		/* sized by the control connection's round trip (module.h
		 * 1.12; 0, the configured count, where the core has none):
		 * the hello says the count before any stream exists */
		if (!p->nstreams)
			p->nstreams = tcp_xdc_window_streams(ctx, ctrl->rtt_us,
							     p->rate_mbps);
		ret = hello_send(ctx, ctrl, p);
		if (ret == -EAGAIN)
			return 0;
		if (ret < 0) {
			MESH_WARN("peer %s: cannot send the tcp-xdc hello: %s",
				  ctrl->peer, strerror(-ret));
			goto err;
		}
		p->chunk_size = ctx->chunk_size;
		p->record_size = ctx->encrypt ? (uint32_t)ctx->record_size : 0;
		p->phase = TCP_XDC_WAIT_REPLY;
		/* fall through */
	case TCP_XDC_WAIT_REPLY:
		streams_early(ctx, ctrl, p);
		ret = ctrl->recv(ctrl, &r, sizeof(r));
		if (ret == -EAGAIN)
			return 0;
		if (ret < 0) {
			MESH_WARN("peer %s: no reply to the tcp-xdc hello: %s",
				  ctrl->peer, strerror(-ret));
			goto err;
		}
		ret = reply_check(ctrl, &r, ret);
		if (ret)
			goto err;
		p->phase = TCP_XDC_STREAMS;
		/* fall through */
	case TCP_XDC_STREAMS:
		ret = streams_then_finish(ctx, ctrl, p, true, send_comm);
		if (ret < 0)
			goto err;
		return 0;
	default:
		ret = -EINVAL;
		break;
	}
err:
	pending_free(ctrl);
	return ret;
}

/*
 * Both sides must agree on encryption: one that sends in clear to a peer
 * that wants records (or the reverse) is refused with a reason both logs
 * show, never silently downgraded.  0 or a positive errno with the reason.
 */
static int encrypt_agree(const struct tcp_xdc_ctx *ctx,
			 const struct mesh_ctrl *ctrl, uint32_t record,
			 char *reason, size_t cap)
{
	if (record && !ctx->encrypt) {
		snprintf(reason, cap, "encryption mismatch: the connecting "
			 "side has encrypt = true, the accepting side false");
		return EPROTO;
	}
	if (!record && ctx->encrypt) {
		snprintf(reason, cap, "encryption mismatch: the connecting "
			 "side has encrypt = false, the accepting side true");
		return EPROTO;
	}
	if (record && (record < TCP_XDC_RECORD_MIN ||
		       record > TCP_XDC_RECORD_MAX)) {
		snprintf(reason, cap, "record size %u out of range", record);
		return EINVAL;
	}
	if (record && !(ctrl->secret && ctrl->secret_len)) {
		snprintf(reason, cap, "encrypt = true needs auth_key_file on "
			 "both sides");
		return EINVAL;
	}
	return 0;
}

/* Prepares the reply to a hello: acceptance or refusal with a reason. */
static void hello_answer(struct tcp_xdc_ctx *ctx, struct mesh_ctrl *ctrl,
			 struct tcp_xdc_pending *p,
			 const struct tcp_xdc_hello *h, int len)
{
	char reason[sizeof(p->reply.reason)] = "";
	uint32_t chunk = 0;
	int status;

	status = tcp_xdc_hello_parse(h, (size_t)len, &p->nstreams, &chunk,
				     reason, sizeof(reason));
	p->record_size = tcp_xdc_hello_record_size(h, (size_t)len);
	p->rejoin_key = tcp_xdc_hello_rejoin_key(h, (size_t)len);
	if (!status)
		status = encrypt_agree(ctx, ctrl, p->record_size, reason,
				       sizeof(reason));
	tcp_xdc_reply_encode(&p->reply, status, reason);
	if (status) {
		MESH_WARN("peer %s: refusing connection: %s", ctrl->peer,
			  reason);
		return;
	}
	p->chunk_size = chunk;
}

int tcp_xdc_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
		   void **recv_comm)
{
	struct tcp_xdc_ctx *ctx = mctx;
	struct tcp_xdc_pending *p;
	struct tcp_xdc_hello h;
	int ret;

	*recv_comm = NULL;
	p = pending_get(ctx, dev, ctrl, TCP_XDC_WAIT_HELLO);
	if (!p)
		return -ENOMEM;
	switch (p->phase) {
	case TCP_XDC_WAIT_HELLO:
		ret = ctrl->recv(ctrl, &h, sizeof(h));
		if (ret == -EAGAIN)
			return 0;
		if (ret < 0) {
			MESH_WARN("peer %s: no tcp-xdc hello: %s", ctrl->peer,
				  strerror(-ret));
			goto err;
		}
		hello_answer(ctx, ctrl, p, &h, ret);
		p->phase = TCP_XDC_SEND_REPLY;
		/* fall through */
	case TCP_XDC_SEND_REPLY:
		ret = ctrl->send(ctrl, &p->reply, sizeof(p->reply));
		if (ret == -EAGAIN)
			return 0;
		if (ret < 0) {
			MESH_WARN("peer %s: cannot send the tcp-xdc reply: %s",
				  ctrl->peer, strerror(-ret));
			goto err;
		}
		if (p->reply.status) {
			ret = -(int)ntohs(p->reply.status);
			goto err;
		}
		p->phase = TCP_XDC_STREAMS;
		/* fall through */
	case TCP_XDC_STREAMS:
		ret = streams_then_finish(ctx, ctrl, p, false, recv_comm);
		if (ret < 0)
			goto err;
		return 0;
	default:
		ret = -EINVAL;
		break;
	}
err:
	pending_free(ctrl);
	return ret;
}
