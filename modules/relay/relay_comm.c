/* SPDX-License-Identifier: MIT */
#include "relay_comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long a close waits for the leg to take its end marker. */
#define RELAY_END_WAIT_NS 200000000
/* An origin that found no route waits this long before the next try. */
#define RELAY_RETRY_NS 250000000
/* A destination whose route works looks for a new one this often. */
#define RELAY_PUMP_NS 10000000

static int relay_test(void *request, int *done, int *sizes);

static const char *side(const struct relay_comm *c)
{
	return c->is_send ? "send" : "recv";
}

static const char *dir(const struct relay_comm *c)
{
	return c->is_send ? "to" : "from";
}

static void join_drop(struct relay_comm *c);

/* The first failure of a comm, logged once: its requests fail from then.
 * A destination lets go of its rejoin: a new route the origin tries
 * finds no such connection, and the origin fails at once. */
static int comm_fail(struct relay_comm *c, int err, const char *what)
{
	if (!c->err) {
		c->err = err ? err : -EIO;
		MESH_WARN("%s comm %u %s %s: %s (route: %s)", side(c), c->id,
			  dir(c), c->peer, what, c->route);
		if (c->inbox.rj) {
			join_drop(c);
			relay_inbox_drop(&c->inbox);
			relay_host->rejoin_close(relay_host, c->inbox.rj);
			c->inbox.rj = NULL;
		}
	}
	return c->err;
}

static long long ms_since(int64_t t)
{
	return (long long)((relay_now_ns() - t) / 1000000);
}

static struct relay_comm *comm_new(struct relay_ctx *x, bool is_send,
				   const char *peer, const char *route)
{
	struct relay_comm *c = calloc(1, sizeof(*c));
	/* send: a header slot per request and one for the end */
	size_t nslots = is_send ? RELAY_REQS + 1 : RELAY_HDR_SLOTS;

	if (!c)
		return NULL;
	c->x = x;
	c->is_send = is_send;
	c->id = atomic_fetch_add(&x->next_id, 1);
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	snprintf(c->route, sizeof(c->route), "%s", route);
	c->chunk = x->conf.chunk;
	c->inline_max = x->conf.inline_max;
	c->slot_size = (sizeof(struct relay_hdr) + c->inline_max + 63) &
		       ~(size_t)63;
	c->stage_len = (c->slot_size * nslots + 4095) & ~(size_t)4095;
	c->stage = aligned_alloc(4096, c->stage_len);
	if (!c->stage) {
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->reg_lock, NULL);
	for (int i = 0; i < RELAY_REQS; i++) {
		c->reqs[i].base.test = relay_test;
		c->reqs[i].comm = c;
	}
	return c;
}

/* ---- the leg: NCCL's registrations follow it from route to route ---- */

static int mh_reg(struct relay_comm *c, struct relay_mh *mh)
{
	const struct mesh_module *m = c->leg.module;

	return mh->fd < 0 ?
		m->reg_mr(c->lcomm, mh->data, mh->size, mh->type,
			  &mh->leg_mh) :
		m->reg_mr_dmabuf(c->lcomm, mh->data, mh->size, mh->type,
				 mh->offset, mh->fd, &mh->leg_mh);
}

/* A new route's leg becomes the comm's: the header slots and every
 * registration go onto it. */
static int leg_attach(struct relay_comm *c, const struct mesh_leg *leg,
		      void *lcomm)
{
	int err;

	pthread_mutex_lock(&c->reg_lock);
	c->leg = *leg;
	c->lcomm = lcomm;
	err = leg->module->reg_mr(lcomm, c->stage, c->stage_len,
				  MESH_PTR_HOST, &c->stage_mh);
	for (struct relay_mh *mh = c->mhs; mh && !err; mh = mh->next)
		err = mh_reg(c, mh);
	pthread_mutex_unlock(&c->reg_lock);
	return err;
}

/* The leg goes, with what was registered on it and every request in
 * flight on it. */
static void leg_detach(struct relay_comm *c)
{
	const struct mesh_module *m = c->leg.module;

	if (!c->lcomm)
		return;
	pthread_mutex_lock(&c->reg_lock);
	for (struct relay_mh *mh = c->mhs; mh; mh = mh->next) {
		if (mh->leg_mh)
			m->dereg_mr(c->lcomm, mh->leg_mh);
		mh->leg_mh = NULL;
	}
	if (c->stage_mh)
		m->dereg_mr(c->lcomm, c->stage_mh);
	c->stage_mh = NULL;
	(c->is_send ? m->close_send : m->close_recv)(c->lcomm);
	c->lcomm = NULL;
	pthread_mutex_unlock(&c->reg_lock);
	for (uint64_t i = c->op_head; i < c->op_tail; i++)
		c->ops[i % RELAY_OPS].leg_req = NULL;
	c->op_head = c->op_tail;
	for (int i = 0; i < RELAY_REQS; i++)
		c->reqs[i].outstanding = 0;
	c->hdr_posted = false;
}

/* ---- the requests' ring of leg requests ---- */

static char *slot(struct relay_comm *c, uint64_t i, size_t nslots)
{
	return c->stage + (i % nslots) * c->slot_size;
}

static bool ops_full(const struct relay_comm *c)
{
	return c->op_tail - c->op_head == RELAY_OPS;
}

static void op_push(struct relay_comm *c, void *leg_req,
		    struct relay_req *owner, uint64_t mseq)
{
	c->ops[c->op_tail++ % RELAY_OPS] = (struct relay_op){
		leg_req, owner, mseq };
	if (owner)
		owner->outstanding++;
}

/* Completed leg requests: their owners count down, a header that came is
 * held.  -errno when the leg failed; *leg_ended when the header receive
 * found the leg's end. */
static int ops_test(struct relay_comm *c, bool *leg_ended)
{
	for (uint64_t i = c->op_head; i < c->op_tail; i++) {
		struct relay_op *op = &c->ops[i % RELAY_OPS];
		int done = 0, size = 0, err;

		if (!op->leg_req)
			continue;
		err = ((struct mesh_request *)op->leg_req)->test(op->leg_req,
								 &done, &size);
		if (err && !op->owner) {
			/* the header receive waits for what comes next:
			 * the leg ending there is the route's end (or its
			 * break); what came before it is still delivered */
			op->leg_req = NULL;
			c->hdr_posted = false;
			*leg_ended = true;
			continue;
		}
		if (err)
			return err;
		if (!done)
			continue;
		op->leg_req = NULL;
		if (op->owner)
			op->owner->outstanding--;
		else
			c->hdr_posted = false, c->hdr_have++;
		c->bytes += (uint64_t)size;
	}
	while (c->op_head < c->op_tail && !c->ops[c->op_head % RELAY_OPS].leg_req)
		c->op_head++;
	return 0;
}

/* ---- the route breaking, and the origin's new one ---- */

/*
 * The route broke: a connection that does not resume fails; one that
 * does drops the leg and its channel and starts counting its outage
 * (one line), the origin to set up a new route, the destination to wait
 * for it.
 */
static int route_lost(struct relay_comm *c, int err, const char *why);

static int outage_fail(struct relay_comm *c, int err, const char *fmt,
		       long long ms)
{
	char what[1400];

	snprintf(what, sizeof(what), fmt, ms);
	return comm_fail(c, err, what);
}

static void origin_rewind(struct relay_comm *c, uint64_t pos,
			  uint64_t *msgs, uint64_t *bytes);

/* A new route is up: the comm sends on it from the first message the
 * destination does not have. */
static int origin_resumed(struct relay_comm *c, struct relay_hop *h)
{
	uint64_t msgs = 0, bytes = 0;
	long long ms = ms_since(c->out_since_ns);
	int err;

	if (h->pos > c->seq) {
		/* it cannot have what was never sent */
		h->leg.module->close_send(h->comm);
		return comm_fail(c, -EPROTO, "the destination said it has "
				 "messages never sent");
	}
	relay_hop_take(h, &c->chan);
	snprintf(c->route, sizeof(c->route), "via %s", h->route);
	c->inline_ok = h->flags & RELAY_FLAG_INLINE;
	err = leg_attach(c, &h->leg, h->comm);
	if (err) {
		char what[64];

		snprintf(what, sizeof(what), "%s on the new route",
			 strerror(-err));
		return route_lost(c, err, what);
	}
	if (h->pos > c->acked)
		c->acked = h->pos;
	origin_rewind(c, c->acked, &msgs, &bytes);
	c->resent_msgs += msgs;
	c->resent_bytes += bytes;
	atomic_fetch_add(&c->x->resumed, 1);
	atomic_fetch_add(&c->x->resent_msgs, msgs);
	atomic_fetch_add(&c->x->resent_bytes, bytes);
	/* "out for N ms (cause), resumed" as every module says it */
	MESH_INFO("send comm %u to %s: out for %lld ms (%s), resumed; resent "
		  "%llu messages (%llu bytes) from message %llu, now %s",
		  c->id, c->peer, ms, c->cause, (unsigned long long)msgs,
		  (unsigned long long)bytes, (unsigned long long)c->acked + 1,
		  c->route);
	c->out_since_ns = 0;
	c->far_up = false;
	return 0;
}

/* One step of the origin's way back: a new route, or past the budget
 * the comm's failure. */
static int origin_reroute(struct relay_comm *c)
{
	const struct relay_conf *conf = &c->x->conf;
	int64_t now = relay_now_ns(), budget_end;
	long long ms;
	int err;

	if (!c->rh) {
		if (now < c->next_try_ns)
			return 0;
		/* the same request as the first route's, but for a
		 * destination reached through its rejoin */
		c->rh = relay_hop_origin(c->x, c->handle, c->key, ++c->attempt,
					 RELAY_FLAG_RESUMABLE |
					 RELAY_FLAG_RESUME);
		if (!c->rh)
			return comm_fail(c, -ENOMEM, "no memory for a new route");
		/* an attempt ends with the budget, for the line to come then */
		budget_end = c->out_since_ns +
			     (int64_t)conf->outage_ms * 1000000;
		if (c->rh->deadline_ns > budget_end)
			c->rh->deadline_ns = budget_end;
	}
	err = relay_hop_step(c->rh);
	if (err == -EAGAIN)
		return 0;
	if (!err) {
		err = origin_resumed(c, c->rh);
		relay_hop_free(c->rh);	/* what the comm did not take */
		free(c->rh);
		c->rh = NULL;
		return err;
	}
	snprintf(c->tried, sizeof(c->tried), "%s", c->rh->tried[0] ?
		 c->rh->tried : "'relays' lists no relay for it");
	relay_hop_free(c->rh);
	free(c->rh);
	c->rh = NULL;
	ms = ms_since(c->out_since_ns);
	if (err == -ESRCH)
		return outage_fail(c, -ECONNRESET, "the destination has no "
				   "such connection any more (it closed or "
				   "failed it): out for %lld ms", ms);
	/* refusals for half of timeout_ms, as tcp-xdc counts them: nothing
	 * listens there any more (a reset middlebox refuses for moments) */
	if (err != -ECONNREFUSED)
		c->refused_ns = 0;
	else if (!c->refused_ns)
		c->refused_ns = now;
	if (c->refused_ns && now - c->refused_ns >=
			     (int64_t)conf->timeout_ms * 500000)
		return outage_fail(c, -ECONNREFUSED, "the destination refused "
				   "new routes for half of timeout_ms (its "
				   "process is gone): out for %lld ms", ms);
	if (ms >= conf->outage_ms) {
		char what[1400];

		snprintf(what, sizeof(what), "no route for the connection: "
			 "out for %lld ms, past outage_ms %d, since %s; "
			 "relays tried: %s", ms, conf->outage_ms, c->cause,
			 c->tried);
		return comm_fail(c, -ETIMEDOUT, what);
	}
	c->next_try_ns = now + RELAY_RETRY_NS;
	return 0;
}

/* ---- send ---- */

static int leg_send(struct relay_comm *c, void *data, size_t size,
		    void *mh, struct relay_req *owner)
{
	void *req = NULL;
	int err;

	if (ops_full(c))
		return -EAGAIN;
	err = c->leg.module->isend(c->lcomm, data, size, RELAY_LEG_TAG, mh,
				   &req);
	if (err) {
		route_lost(c, err, "the leg refused a send");
		return -ECONNRESET;
	}
	if (!req)
		return -EAGAIN;
	op_push(c, req, owner, owner ? owner->seq : 0);
	return 0;
}

static int post_header(struct relay_comm *c, struct relay_req *r)
{
	char *s = slot(c, (uint64_t)(r - c->reqs), RELAY_REQS);
	struct relay_hdr h;
	size_t len;
	int err;

	/* data inside the header is copied by the CPU at both ends: host
	 * memory here, and a destination that said it takes it (this
	 * route's: a new one may end on another module) */
	r->inline_data = !r->size ||
		(c->inline_ok && r->size <= c->inline_max &&
		 r->mh->type == MESH_PTR_HOST);
	h = (struct relay_hdr){
		.magic = RELAY_HDR_MAGIC, .tag = r->tag, .size = r->size,
		.flags = r->inline_data ? RELAY_HDR_INLINE : 0,
		.seq = (uint32_t)r->seq, .chunk = (uint32_t)c->chunk,
	};
	len = sizeof(h) + (r->inline_data ? r->size : 0);
	memcpy(s, &h, sizeof(h));
	if (r->inline_data && r->size)
		memcpy(s + sizeof(h), r->data, r->size);
	err = leg_send(c, s, len, c->stage_mh, r);
	if (!err)
		r->hdr_posted = true;
	return err;
}

/* The notes from the first relay: acknowledgements, and its UP. */
static int origin_notes(struct relay_comm *c)
{
	struct relay_note n;
	const char *why;
	char what[160];
	int r;

	/* a note is only waited for with a send not yet acknowledged,
	 * or to find the route broken while nothing is sent */
	for (int i = 0; i < 64; i++) {
		r = relay_chan_read(&c->chan, &n, &why);
		if (r == 0)
			return 0;
		if (r < 0)
			break;
		if (n.type == RELAY_NOTE_UP) {
			c->far_up = true;
		} else if (n.type == RELAY_NOTE_BYE) {
			c->far_closed = true;
		} else if (n.type == RELAY_NOTE_ACK && n.seq <= c->seq) {
			if (n.seq > c->acked)
				c->acked = n.seq;
		} else {
			why = "it sent a note out of place";
			r = -EPROTO;
			break;
		}
	}
	if (r > 0)
		return 0;
	snprintf(what, sizeof(what), "the channel to the first relay: %s",
		 why);
	return route_lost(c, r, what);
}

/* Hands the leg what it takes, in order: headers, then chunks. */
static int send_progress(struct relay_comm *c)
{
	bool leg_ended = false;
	int err = 0;

	if (c->err)
		return c->err;
	if (!c->lcomm)
		return origin_reroute(c);
	if (c->resumable) {
		err = origin_notes(c);
		if (err || !c->lcomm)
			return err;
	}
	if (c->far_closed && c->acked < c->seq) {
		char what[128];

		snprintf(what, sizeof(what), "the destination closed its end "
			 "before message %llu arrived",
			 (unsigned long long)c->acked + 1);
		return comm_fail(c, -ECONNRESET, what);
	}
	while (!err && c->req_post < c->req_tail) {
		struct relay_req *r = &c->reqs[c->req_post % RELAY_REQS];

		if (!r->hdr_posted)
			err = post_header(c, r);
		while (!err && !r->inline_data && r->posted < r->size) {
			size_t len = r->size - r->posted;

			if (len > c->chunk)
				len = c->chunk;
			err = leg_send(c, r->data + r->posted, len,
				       r->mh->leg_mh, r);
			if (!err)
				r->posted += len;
		}
		if (!err)
			c->req_post++;
	}
	if (!c->lcomm || (err && err != -EAGAIN))
		return c->err;
	err = ops_test(c, &leg_ended);
	if (err)
		return route_lost(c, err, "the leg failed");
	return 0;
}

/* After a new route came up: everything the destination does not have
 * goes again, from the first such message on. */
static void origin_rewind(struct relay_comm *c, uint64_t pos,
			  uint64_t *msgs, uint64_t *bytes)
{
	uint64_t first = c->req_tail;

	for (int i = 0; i < RELAY_REQS; i++) {
		struct relay_req *r = &c->reqs[i];

		if (!r->in_use || r->failed || r->seq <= pos)
			continue;
		if (r->hdr_posted) {
			(*msgs)++;
			*bytes += r->inline_data ? r->size : r->posted;
		}
		r->hdr_posted = false;
		r->posted = 0;
		r->outstanding = 0;
		if (r->idx < first)
			first = r->idx;
	}
	c->req_post = first;
}

static struct relay_req *req_alloc(struct relay_comm *c)
{
	struct relay_req *r = &c->reqs[c->req_tail % RELAY_REQS];

	if (r->in_use)
		return NULL;
	memset((char *)r + sizeof(r->base) + sizeof(r->comm), 0,
	       sizeof(*r) - sizeof(r->base) - sizeof(r->comm));
	r->in_use = true;
	r->idx = c->req_tail++;
	return r;
}

/* A request on a failed comm: it fails when tested (errors come from
 * test, not from isend or irecv). */
static void *req_failed(struct relay_comm *c)
{
	struct relay_req *r = req_alloc(c);

	if (r)
		r->failed = true;
	return r;
}

int relay_isend(void *send_comm, void *data, size_t size, int tag,
		void *mhandle, void **request)
{
	struct relay_comm *c = send_comm;
	struct relay_mh *mh = mhandle;
	struct relay_req *r;

	*request = NULL;
	if (c->err) {
		*request = req_failed(c);
		return 0;
	}
	if (size && !mh) {
		MESH_WARN("send comm %u to %s: %zu bytes not registered", c->id,
			  c->peer, size);
		return -EINVAL;
	}
	r = req_alloc(c);
	if (!r)
		return 0;
	r->data = data;
	r->size = size;
	r->tag = tag;
	r->mh = mh;
	r->seq = ++c->seq;
	send_progress(c);
	*request = r;
	return 0;
}

/* ---- receive ---- */

/* Messages 1..this arrived whole: none of theirs is in flight. */
static uint64_t recv_whole(const struct relay_comm *c)
{
	uint64_t whole = c->chunk_req ? c->seq - 1 : c->seq;

	for (uint64_t i = c->op_head; i < c->op_tail; i++) {
		const struct relay_op *op = &c->ops[i % RELAY_OPS];

		if (op->leg_req && op->owner) {
			if (op->mseq - 1 < whole)
				whole = op->mseq - 1;
			break;	/* posted in order: the oldest is first */
		}
	}
	return whole;
}

/* Posts the chunk receives of the current message, straight into
 * NCCL's buffer; -EAGAIN while the leg takes no more. */
static int post_chunks(struct relay_comm *c)
{
	struct relay_req *r = c->chunk_req;

	while (c->chunk_off < c->chunk_size) {
		size_t len = c->chunk_size - c->chunk_off;
		char *dst = r->bufs[c->chunk_buf] + c->chunk_off;
		struct relay_mh *mh = r->mhs[c->chunk_buf];
		void *leg_mh = mh ? mh->leg_mh : NULL;
		int tag = RELAY_LEG_TAG, err;
		void *req = NULL;

		if (len > r->got[c->chunk_buf])	/* chunk of the sender */
			len = r->got[c->chunk_buf];
		if (ops_full(c))
			return -EAGAIN;
		err = c->leg.module->irecv(c->lcomm, 1, (void **)&dst, &len,
					   &tag, &leg_mh, &req);
		if (err) {
			route_lost(c, err, "the leg refused a receive");
			return -ECONNRESET;
		}
		if (!req)
			return -EAGAIN;
		op_push(c, req, r, c->seq);
		c->chunk_off += len;
	}
	r->got[c->chunk_buf] = c->chunk_size;
	c->chunk_req = NULL;
	c->hdr_used++;
	return 0;
}

/* The receive the next header goes to.  recv_head moves past a receive
 * as soon as it is filled (take_header): once tested, its slot may hold a
 * newer receive. */
static struct relay_req *oldest_open(struct relay_comm *c)
{
	return c->recv_head < c->req_tail ?
		       &c->reqs[c->recv_head % RELAY_REQS] : NULL;
}

/* Gives the oldest held header to NCCL's oldest open receive. */
static int take_header(struct relay_comm *c, struct relay_req *r)
{
	const char *s = slot(c, c->hdr_used, RELAY_HDR_SLOTS);
	struct relay_hdr h;
	char what[160];
	int i;

	memcpy(&h, s, sizeof(h));
	if (h.magic != RELAY_HDR_MAGIC || h.seq != (uint32_t)(c->seq + 1) ||
	    (!(h.flags & (RELAY_HDR_INLINE | RELAY_HDR_END)) && !h.chunk)) {
		snprintf(what, sizeof(what), "message %llu came with a broken "
			 "header", (unsigned long long)c->seq + 1);
		return comm_fail(c, -EPROTO, what);
	}
	if (h.flags & RELAY_HDR_END) {
		c->ended = true;
		c->hdr_used++;
		return 0;
	}
	for (i = 0; i < r->n; i++)
		if (!r->filled[i] && r->tags[i] == h.tag)
			break;
	if (i == r->n) {
		snprintf(what, sizeof(what), "message %llu has tag %d, which "
			 "no posted buffer has", (unsigned long long)c->seq + 1,
			 h.tag);
		return comm_fail(c, -EPROTO, what);
	}
	if (h.size > r->sizes[i]) {
		snprintf(what, sizeof(what), "message %llu of %llu bytes "
			 "exceeds the %zu bytes posted",
			 (unsigned long long)c->seq + 1,
			 (unsigned long long)h.size, r->sizes[i]);
		return comm_fail(c, -EMSGSIZE, what);
	}
	c->seq++;
	r->filled[i] = true;
	r->mseq[i] = c->seq;
	if (++r->nfilled == r->n)
		c->recv_head++;
	if (h.flags & RELAY_HDR_INLINE) {
		if (h.size)
			memcpy(r->bufs[i], s + sizeof(h), h.size);
		r->got[i] = h.size;
		c->hdr_used++;
		return 0;
	}
	/* got[] holds the chunk size while the chunks are posted */
	r->got[i] = h.chunk;
	c->chunk_req = r;
	c->chunk_buf = i;
	c->chunk_off = 0;
	c->chunk_size = h.size;
	return 0;
}

static int post_header_recv(struct relay_comm *c)
{
	char *dst = slot(c, c->hdr_have, RELAY_HDR_SLOTS);
	size_t len = c->slot_size;
	int tag = RELAY_LEG_TAG, err;
	void *req = NULL;

	if (ops_full(c))
		return -EAGAIN;
	err = c->leg.module->irecv(c->lcomm, 1, (void **)&dst, &len, &tag,
				   &c->stage_mh, &req);
	if (err) {
		route_lost(c, err, "the leg refused a receive");
		return -ECONNRESET;
	}
	if (!req)
		return -EAGAIN;
	op_push(c, req, NULL, 0);
	c->hdr_posted = true;
	return 0;
}

/* Whether the header just held announces chunks: nothing may be posted
 * behind it before they are. */
static bool last_has_chunks(struct relay_comm *c)
{
	struct relay_hdr h;

	if (c->hdr_have == c->hdr_used)
		return false;
	memcpy(&h, slot(c, c->hdr_have - 1, RELAY_HDR_SLOTS), sizeof(h));
	return !(h.flags & RELAY_HDR_INLINE) && h.size;
}

/*
 * The destination drops a broken route: what did not arrive whole goes
 * back to the receives it was given to, to come again on the next route
 * (into the same buffers: a message lands where it would have).
 */
static void dest_rewind(struct relay_comm *c)
{
	uint64_t whole = recv_whole(c), head = c->req_tail;

	leg_detach(c);
	c->hdr_have = c->hdr_used = 0;
	c->chunk_req = NULL;
	for (int i = 0; i < RELAY_REQS; i++) {
		struct relay_req *r = &c->reqs[i];

		if (!r->in_use || r->failed)
			continue;
		for (int k = 0; k < r->n; k++)
			if (r->filled[k] && r->mseq[k] > whole) {
				r->filled[k] = false;
				r->got[k] = 0;
				r->nfilled--;
			}
		if (r->nfilled < r->n && r->idx < head)
			head = r->idx;
	}
	c->recv_head = head;
	c->seq = whole;
}

static int route_lost(struct relay_comm *c, int err, const char *why)
{
	if (c->far_closed && c->acked == c->seq) {
		/* the destination closed, and has everything: its route
		 * ending is no outage (a send after it fails) */
		leg_detach(c);
		relay_chan_close(&c->chan);
		return 0;
	}
	if (!c->resumable || c->ended || c->err || c->far_closed)
		return comm_fail(c, err, why);
	if (!c->out_since_ns) {
		c->out_since_ns = relay_now_ns();
		c->refused_ns = 0;
		c->outages++;
		atomic_fetch_add(&c->x->outages, 1);
		snprintf(c->cause, sizeof(c->cause), "%s", why);
		MESH_INFO("%s comm %u %s %s: the route broke (%s); %s within "
			  "outage_ms %d (route: %s)", side(c), c->id, dir(c),
			  c->peer, why, c->is_send ? "setting up another" :
			  "waiting for the origin's new route",
			  c->x->conf.outage_ms, c->route);
	}
	if (c->is_send)
		leg_detach(c);
	else
		dest_rewind(c);
	relay_chan_close(&c->chan);
	c->far_up = false;
	return 0;
}

/* The notes on the last leg's channel: the origin's END, or that the
 * origin is gone. */
static int dest_notes(struct relay_comm *c)
{
	struct relay_note n;
	const char *why;
	char what[160];
	int r = 1;

	for (int i = 0; i < 64 && r > 0; i++) {
		r = relay_chan_read(&c->chan, &n, &why);
		if (r > 0 && n.type == RELAY_NOTE_END) {
			c->end_known = true;
			c->end_seq = n.seq;
		} else if (r > 0 && n.type == RELAY_NOTE_GONE) {
			return comm_fail(c, -ECONNRESET, "the origin is gone: "
					 "its process ended (its first relay saw "
					 "its channel and its leg end together)");
		} else if (r > 0) {
			why = "it sent a note out of place";
			r = -EPROTO;
		}
	}
	if (r >= 0)
		return 0;
	if (c->end_known) {
		/* the origin closed: the channel's end is the route's */
		relay_chan_close(&c->chan);
		c->ended = true;
		return 0;
	}
	/* without resuming, as before channels were kept: the leg failed */
	snprintf(what, sizeof(what), c->resumable ? "the last relay's "
		 "channel: %s" : "the leg failed", why);
	return route_lost(c, r, what);
}

/* Drops a route that was joining (a newer one came, or it failed). */
static void join_drop(struct relay_comm *c)
{
	if (c->jv && c->jstage == JOIN_ACCEPT)
		c->jleg.module->abandon(c->jleg.mctx, relay_vctrl_ctrl(c->jv));
	relay_vctrl_free(c->jv);
	c->jv = NULL;
	c->jstage = JOIN_NONE;
}

/* The notes' channel of the route whose leg is up (a first route's,
 * whose leg came through the NCCL listen): it says UP, and the
 * acknowledgements owed go out on it from now. */
static void join_notes(struct relay_comm *c)
{
	if (!c->lcomm || relay_chan_ctrl(&c->chan) ||
	    c->jlast->attempt != c->attempt) {
		join_drop(c);	/* a route given up */
		return;
	}
	c->chan.v = c->jv;
	c->jv = NULL;
	c->jstage = JOIN_NONE;
	c->inbox.cur = NULL;
	if (relay_chan_note(&c->chan, RELAY_NOTE_UP, c->seq))
		route_lost(c, -ECONNRESET, "its notes' channel failed");
}

/* LAST on a new route's channel: the destination drops the route it
 * has (the origin moved on) and says from where the resend starts. */
static int join_last(struct relay_comm *c)
{
	struct mesh_ctrl *jc = relay_vctrl_ctrl(c->jv);
	struct relay_msg ready = { .type = RELAY_MSG_READY };
	uint8_t buf[RELAY_MSG_MAX];
	const char *bad;
	int n = jc->recv(jc, buf, sizeof(buf));

	if (n == -EAGAIN)
		return n;
	bad = n < 0 ? "its channel failed" :
		      relay_msg_decode(buf, (size_t)n, c->jlast);
	if (!bad && (c->jlast->type != RELAY_MSG_LAST ||
		     c->jlast->key != c->key))
		bad = "it did not announce itself";
	if (!bad && relay_host->leg_of_rail(relay_host, c->rail, c->jlast->leg,
					    &c->jleg))
		bad = "this rail has no module for its leg";
	if (bad) {
		MESH_WARN("recv comm %u from %s: a new route: %s", c->id,
			  c->peer, bad);
		return -EPROTO;
	}
	if (c->jlast->flags & RELAY_FLAG_NOTES) {
		join_notes(c);
		return 0;
	}
	if (c->lcomm)
		route_lost(c, -ECONNRESET, "the origin set up a new route");
	/* small messages are copied out of the header by the CPU: only
	 * where NCCL hands us host memory */
	if (!(c->jleg.props->ptr_support & MESH_PTR_CUDA))
		ready.flags = RELAY_FLAG_INLINE;
	ready.pos = c->seq;
	n = jc->send(jc, buf, relay_msg_encode(&ready, buf));
	if (!n)
		c->jstage = JOIN_ACCEPT;
	return n;
}

int relay_comm_join(struct relay_comm *c)
{
	struct mesh_stream_new s0;
	void *lcomm = NULL;
	int err;

	if (c->err)
		return c->err;
	err = relay_inbox_pump(&c->inbox);
	if (err)
		return comm_fail(c, err, "its rejoin failed");
	if (relay_inbox_next(&c->inbox, &s0)) {
		join_drop(c);
		c->jv = relay_inbox_join(&c->inbox, &s0);
		c->jstage = c->jv ? JOIN_LAST : JOIN_NONE;
	}
	if (c->jstage == JOIN_LAST) {
		err = join_last(c);
		if (err && err != -EAGAIN)
			join_drop(c);
	}
	if (c->jstage != JOIN_ACCEPT)
		return -EAGAIN;
	err = c->jleg.module->accept(c->jleg.mctx, c->jleg.dev,
				     relay_vctrl_ctrl(c->jv), &lcomm);
	if (err && err != -EAGAIN) {
		MESH_WARN("recv comm %u from %s: a new route: %s did not "
			  "accept its leg (%s)", c->id, c->peer,
			  c->jleg.module->name, strerror(-err));
		join_drop(c);
	}
	if (!lcomm)
		return -EAGAIN;
	c->chan.v = c->jv;
	c->jv = NULL;
	c->jstage = JOIN_NONE;
	c->inbox.cur = NULL;	/* its streams are all in */
	c->inline_ok = !(c->jleg.props->ptr_support & MESH_PTR_CUDA);
	snprintf(c->route, sizeof(c->route), "%.*s",
		 (int)sizeof(c->route) - 1, c->jlast->text);
	err = leg_attach(c, &c->jleg, lcomm);
	if (!err)
		err = relay_chan_note(&c->chan, RELAY_NOTE_UP, c->seq);
	if (err) {
		leg_detach(c);
		relay_chan_close(&c->chan);
		return -EAGAIN;
	}
	c->acked = c->seq;
	c->attempt = c->jlast->attempt;
	if (c->out_since_ns) {
		atomic_fetch_add(&c->x->resumed, 1);
		MESH_INFO("recv comm %u from %s: out for %lld ms (%s), "
			  "resumed from message %llu, now %s", c->id, c->peer,
			  ms_since(c->out_since_ns), c->cause,
			  (unsigned long long)c->seq + 1, c->route);
		c->out_since_ns = 0;
	}
	return 0;
}

/* While the route is out: a new one joining, or past the budget the
 * comm's failure. */
static int dest_out(struct relay_comm *c)
{
	long long ms;

	if (!relay_comm_join(c))
		return 0;
	ms = ms_since(c->out_since_ns);
	if (!c->err && ms > c->x->conf.outage_ms) {
		char what[512];

		snprintf(what, sizeof(what), "no route for the connection: "
			 "out for %lld ms, past outage_ms %d, since %s; the "
			 "origin set up none", ms, c->x->conf.outage_ms,
			 c->cause);
		return comm_fail(c, -ETIMEDOUT, what);
	}
	return c->err;
}

static int recv_progress(struct relay_comm *c)
{
	struct relay_req *r;
	bool leg_ended = false;
	int64_t now;
	int err;

	if (c->err)
		return c->err;
	if (!c->lcomm)
		return dest_out(c);
	/* the route's notes' channel, and a new route that may come before
	 * this end sees the old one break: looked for now and then */
	now = relay_now_ns();
	if (now >= c->next_pump_ns || (c->jv && c->jstage)) {
		c->next_pump_ns = now + RELAY_PUMP_NS;
		relay_comm_join(c);
		if (!c->lcomm)
			return c->err;
	}
	err = relay_chan_ctrl(&c->chan) ? dest_notes(c) : 0;
	if (!err && c->lcomm)
		err = ops_test(c, &leg_ended);
	else if (!err)
		return c->err;
	if (err)
		return route_lost(c, err, "the leg failed");
	while (!err) {
		if (c->chunk_req) {
			err = post_chunks(c);
			if (err)
				break;
		}
		if (c->hdr_used == c->hdr_have || !(r = oldest_open(c)))
			break;
		err = take_header(c, r);
	}
	if (!c->lcomm || (err && err != -EAGAIN))
		return c->err;
	if (c->resumable && recv_whole(c) > c->acked &&
	    relay_chan_ctrl(&c->chan) &&
	    !relay_chan_note(&c->chan, RELAY_NOTE_ACK, recv_whole(c)))
		c->acked = recv_whole(c);
	if (c->end_known && (uint32_t)c->seq == (uint32_t)c->end_seq &&
	    c->hdr_used == c->hdr_have)
		c->ended = true;
	if (leg_ended && !c->ended) {
		/* the last relay's end note may still be on its way */
		if (relay_chan_ctrl(&c->chan))
			dest_notes(c);
		/* after the origin's END its leg's end is the end, with
		 * or without what it did not send */
		if (c->end_known)
			c->ended = true;
		else if (c->resumable)
			return route_lost(c, -ECONNRESET, "the leg ended");
		else
			c->ended = true;
	}
	if (c->ended) {
		/* an orderly close with nothing owed is no error; a
		 * receive it leaves open is */
		if (oldest_open(c) && c->hdr_used == c->hdr_have) {
			char what[160];

			snprintf(what, sizeof(what), "the connection ended "
				 "(the peer or a relay on the route closed or "
				 "failed) before message %llu came",
				 (unsigned long long)c->seq + 1);
			return comm_fail(c, -ECONNRESET, what);
		}
		return 0;
	}
	/* A header is only asked of the leg for a receive NCCL has open:
	 * the last relay ends an orderly close by closing the leg, and a
	 * leg receive posted then, for nobody, would fail there as a
	 * message the peer never sent (and the leg would log it so). */
	if (!c->hdr_posted && !c->chunk_req && !last_has_chunks(c) &&
	    oldest_open(c) && c->hdr_have - c->hdr_used < RELAY_HDR_SLOTS) {
		post_header_recv(c);
	}
	return c->err;
}

int relay_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		int *tags, void **mhandles, void **request)
{
	struct relay_comm *c = recv_comm;
	struct relay_req *r;

	*request = NULL;
	if (c->err) {
		*request = req_failed(c);
		return 0;
	}
	if (n < 1 || n > RELAY_RECVS_MAX) {
		MESH_WARN("recv comm %u from %s: %d grouped receives, 1..%d "
			  "supported", c->id, c->peer, n, RELAY_RECVS_MAX);
		return -EINVAL;
	}
	r = req_alloc(c);
	if (!r)
		return 0;
	r->n = n;
	for (int i = 0; i < n; i++) {
		r->bufs[i] = data[i];
		r->sizes[i] = sizes[i];
		r->tags[i] = tags[i];
		r->mhs[i] = mhandles ? mhandles[i] : NULL;
	}
	recv_progress(c);
	*request = r;
	return 0;
}

static int relay_test(void *request, int *done, int *sizes)
{
	struct relay_req *r = request;
	struct relay_comm *c = r->comm;
	bool finished = false;
	uint64_t whole;

	*done = 0;
	if (!r->failed && !c->err)
		(c->is_send ? send_progress : recv_progress)(c);
	if (r->failed || c->err) {
		r->in_use = false;
		return c->err ? c->err : -ECONNRESET;
	}
	if (c->is_send) {
		finished = r->hdr_posted && r->outstanding == 0 &&
			   (r->inline_data || r->posted == r->size) &&
			   (!c->resumable || c->acked >= r->seq);
	} else if (r->nfilled == r->n && r->outstanding == 0 &&
		   c->chunk_req != r) {
		/* whole, and nothing before it owed: a route that breaks
		 * never takes back what NCCL was given */
		/* The origin's send completes on this end's acknowledgement,
		 * and NCCL may not call test() here again once this is done:
		 * the acknowledgement leaves before the receive completes
		 * (unless the origin closed: nobody waits for it then). */
		bool owed = c->resumable && !c->end_known;

		whole = recv_whole(c);
		finished = true;
		for (int i = 0; i < r->n; i++)
			finished &= r->mseq[i] <= whole &&
				    (!owed || r->mseq[i] <= c->acked);
		if (finished && owed && relay_chan_flush(&c->chan) == -EAGAIN)
			finished = false;
	}
	if (!finished)
		return 0;
	*done = 1;
	if (sizes) {
		if (c->is_send)
			sizes[0] = (int)r->size;
		for (int i = 0; !c->is_send && i < r->n; i++)
			sizes[i] = (int)(r->filled[i] ? r->got[i] : 0);
	}
	if (c->is_send)
		mesh_count(&c->m_bytes, r->size);
	for (int i = 0; !c->is_send && i < r->n; i++)
		mesh_count(&c->m_bytes, r->filled[i] ? r->got[i] : 0);
	mesh_count(&c->m_requests, 1);
	r->in_use = false;
	return 0;
}

int relay_comm_counters(void *comm, mesh_counter_fn emit, void *arg)
{
	const struct relay_comm *c = comm;

	emit(arg, &(struct mesh_counter){ .name = "bytes",
		.value = mesh_count_read(&c->m_bytes) });
	emit(arg, &(struct mesh_counter){ .name = "requests",
		.value = mesh_count_read(&c->m_requests) });
	return 0;
}

/* ---- memory, flush, close ---- */

/* Registers with the leg's module (a dma-buf when fd >= 0) and keeps
 * what a new route's leg needs to register it again. */
int relay_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			uint64_t offset, int fd, void **mhandle)
{
	struct relay_comm *c = comm;
	struct relay_mh *mh = calloc(1, sizeof(*mh));
	int err = 0;

	if (!mh)
		return -ENOMEM;
	*mh = (struct relay_mh){ .type = type, .data = data, .size = size,
				 .offset = offset, .fd = -1 };
	if (fd >= 0) {
		mh->fd = dup(fd);	/* NCCL may close its own */
		if (mh->fd < 0) {
			err = -errno;
			free(mh);
			return err;
		}
	}
	pthread_mutex_lock(&c->reg_lock);
	if (c->lcomm)
		err = mh_reg(c, mh);
	if (!err) {
		mh->next = c->mhs;
		c->mhs = mh;
	}
	pthread_mutex_unlock(&c->reg_lock);
	if (err) {
		if (mh->fd >= 0)
			close(mh->fd);
		free(mh);
		return err;
	}
	*mhandle = mh;
	return 0;
}

int relay_reg_mr(void *comm, void *data, size_t size, int type,
		 void **mhandle)
{
	return relay_reg_mr_dmabuf(comm, data, size, type, 0, -1, mhandle);
}

int relay_dereg_mr(void *comm, void *mhandle)
{
	struct relay_comm *c = comm;
	struct relay_mh *mh = mhandle, **pp;
	int err = 0;

	if (!mh)
		return 0;
	pthread_mutex_lock(&c->reg_lock);
	for (pp = &c->mhs; *pp && *pp != mh; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = mh->next;
	if (mh->leg_mh && c->lcomm)
		err = c->leg.module->dereg_mr(c->lcomm, mh->leg_mh);
	pthread_mutex_unlock(&c->reg_lock);
	if (mh->fd >= 0)
		close(mh->fd);
	free(mh);
	return err;
}

int relay_iflush(void *recv_comm, int n, void **data, int *sizes,
		 void **mhandles, void **request)
{
	struct relay_comm *c = recv_comm;
	void *leg_mhs[RELAY_RECVS_MAX];

	*request = NULL;
	if (n < 1 || n > RELAY_RECVS_MAX)
		return -EINVAL;
	/* data that arrived over a leg since dropped was flushed by its
	 * module when it completed: nothing is left to flush */
	if (!c->lcomm)
		return 0;
	for (int i = 0; i < n; i++)
		leg_mhs[i] = mhandles && mhandles[i] ?
			((struct relay_mh *)mhandles[i])->leg_mh : NULL;
	/* the leg's request starts with mesh_request too */
	return c->leg.module->iflush(c->lcomm, n, data, sizes, leg_mhs,
				     request);
}

/*
 * Tells the far end the connection ends here, behind everything sent:
 * relays then close their legs as orderly, and a receive still open at
 * the end fails there with that reason.  The first relay hears it on
 * the channel too, so that the channel's end is no break.  Waits a
 * little for the leg to take it; a close never blocks for long.
 */
static void send_end(struct relay_comm *c)
{
	char *s = slot(c, RELAY_REQS, RELAY_REQS + 1);
	struct relay_hdr h = { .magic = RELAY_HDR_MAGIC,
			       .seq = (uint32_t)(c->seq + 1),
			       .flags = RELAY_HDR_END };
	int64_t until = relay_now_ns() + RELAY_END_WAIT_NS;
	bool leg_ended = false;
	void *req = NULL;
	int done = 0, size;

	if (!c->lcomm || c->err)
		return;
	memcpy(s, &h, sizeof(h));
	while (!req && relay_now_ns() < until) {
		if (c->leg.module->isend(c->lcomm, s, sizeof(h), RELAY_LEG_TAG,
					 c->stage_mh, &req))
			return;
		if (!req && ops_test(c, &leg_ended))
			return;
	}
	while (req && !done && relay_now_ns() < until)
		if (((struct mesh_request *)req)->test(req, &done, &size))
			return;
	if (c->far_up && !relay_chan_note(&c->chan, RELAY_NOTE_END, c->seq))
		while (relay_chan_flush(&c->chan) == -EAGAIN &&
		       relay_now_ns() < until)
			;
}

void relay_comm_free(struct relay_comm *c)
{
	struct relay_mh *mh, *next;

	if (c->rh) {
		relay_hop_free(c->rh);
		free(c->rh);
	}
	join_drop(c);
	free(c->jlast);
	leg_detach(c);
	relay_chan_close(&c->chan);
	relay_inbox_drop(&c->inbox);
	if (c->inbox.rj)
		relay_host->rejoin_close(relay_host, c->inbox.rj);
	/* NCCL deregisters before it closes; what it left goes with us */
	for (mh = c->mhs; mh; mh = next) {
		next = mh->next;
		if (mh->fd >= 0)
			close(mh->fd);
		free(mh);
	}
	pthread_mutex_destroy(&c->reg_lock);
	free(c->stage);
	free(c);
}

/* The destination says it closed: its route ending is no break, and the
 * origin learns that what it sends from now on arrives nowhere. */
static void send_bye(struct relay_comm *c)
{
	int64_t until = relay_now_ns() + RELAY_END_WAIT_NS;

	if (!c->lcomm || c->err ||
	    relay_chan_note(&c->chan, RELAY_NOTE_BYE, c->seq))
		return;
	while (relay_chan_flush(&c->chan) == -EAGAIN && relay_now_ns() < until)
		;
}

static int comm_close(struct relay_comm *c)
{
	if (!c)
		return 0;
	if (c->is_send)
		send_end(c);
	else
		send_bye(c);
	MESH_INFO("%s comm %u %s %s closed after %llu bytes%s (route: %s)",
		  side(c), c->id, dir(c), c->peer,
		  (unsigned long long)c->bytes, c->outages ?
		  ", with outages" : "", c->route);
	relay_comm_free(c);
	return 0;
}

int relay_close_send(void *send_comm)
{
	return comm_close(send_comm);
}

int relay_close_recv(void *recv_comm)
{
	return comm_close(recv_comm);
}

int relay_describe(void *comm, struct mesh_conn_info *info)
{
	const struct relay_comm *c = comm;
	/* relay_route's "via " and relay_hop_step's route */
	const char *route = c->route;

	snprintf(info->remote, sizeof(info->remote), "%s", c->peer);
	if (c->is_send && !strncmp(route, "via ", 4))
		info->nhops = relay_route_hops(route + 4, info->hops,
					       MESH_CONN_HOPS_MAX);
	return c->lcomm ? c->leg.module->describe(c->lcomm, info) : 0;
}

/* ---- the ends' constructors ---- */

struct relay_comm *relay_comm_send(struct relay_ctx *x, struct relay_hop *h,
				   const char *peer, const char *route,
				   const void *handle)
{
	struct relay_comm *c = comm_new(x, true, peer, route);

	if (!c)
		return NULL;
	c->resumable = h->req.flags & RELAY_FLAG_RESUMABLE;
	c->key = h->req.key;
	memcpy(c->handle, handle, RELAY_HANDLE_BYTES);
	c->inline_ok = h->flags & RELAY_FLAG_INLINE;
	if (leg_attach(c, &h->leg, h->comm)) {
		c->lcomm = NULL;	/* the caller closes the leg */
		relay_comm_free(c);
		return NULL;
	}
	relay_hop_take(h, &c->chan);
	return c;
}

int relay_comm_first_leg(struct relay_comm *c, const struct mesh_leg *leg,
			 void *lcomm)
{
	c->inline_ok = !(leg->props->ptr_support & MESH_PTR_CUDA);
	return leg_attach(c, leg, lcomm);
}

int relay_comm_recv(struct relay_ctx *x, struct mesh_ctrl *ctrl, int rail,
		    const struct relay_msg *last, struct relay_comm **out)
{
	struct relay_comm *c = comm_new(x, false, last->origin, last->text);
	int err;

	if (!c)
		return -ENOMEM;
	c->jlast = malloc(sizeof(*c->jlast));
	if (!c->jlast) {
		relay_comm_free(c);
		return -ENOMEM;
	}
	c->rail = rail;
	c->resumable = last->flags & RELAY_FLAG_RESUMABLE;
	c->key = last->key;
	c->inbox.peer = c->peer;
	err = relay_host->rejoin_listen(relay_host, ctrl, last->key,
					&c->inbox.rj);
	if (err) {
		MESH_WARN("accept from %s: cannot keep the connection for its "
			  "leg (%s)", ctrl->peer, strerror(-err));
		relay_comm_free(c);
		return err;
	}
	*out = c;
	return 0;
}
