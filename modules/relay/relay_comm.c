/* SPDX-License-Identifier: MIT */
#include "relay_comm.h"

#include "relay_hop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a close waits for the leg to take its end marker. */
#define RELAY_END_WAIT_NS 200000000

static int relay_test(void *request, int *done, int *sizes);

/* The first failure of a comm, logged once: its requests fail from then. */
static int comm_fail(struct relay_comm *c, int err, const char *what)
{
	if (!c->err) {
		c->err = err ? err : -EIO;
		MESH_WARN("%s comm %u %s %s: %s (route: %s)",
			  c->is_send ? "send" : "recv", c->id,
			  c->is_send ? "to" : "from", c->peer, what, c->route);
	}
	return c->err;
}

struct relay_comm *relay_comm_new(struct relay_ctx *x,
				  const struct mesh_leg *leg, void *lcomm,
				  bool is_send, uint32_t flags,
				  const char *peer, const char *route)
{
	struct relay_comm *c = calloc(1, sizeof(*c));
	/* send: a header slot per request and one for the end */
	size_t nslots = is_send ? RELAY_REQS + 1 : RELAY_HDR_SLOTS, len;

	if (!c)
		return NULL;
	c->leg = *leg;
	c->lcomm = lcomm;
	c->is_send = is_send;
	c->id = atomic_fetch_add(&x->next_id, 1);
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	snprintf(c->route, sizeof(c->route), "%s", route);
	c->chunk = x->conf.chunk;
	c->inline_max = x->conf.inline_max;
	c->inline_ok = flags & RELAY_FLAG_INLINE;
	c->slot_size = (sizeof(struct relay_hdr) + c->inline_max + 63) &
		       ~(size_t)63;
	len = (c->slot_size * nslots + 4095) & ~(size_t)4095;
	c->stage = aligned_alloc(4096, len);
	if (!c->stage || leg->module->reg_mr(lcomm, c->stage, len,
					     MESH_PTR_HOST, &c->stage_mh)) {
		free(c->stage);
		free(c);
		return NULL;
	}
	for (int i = 0; i < RELAY_REQS; i++) {
		c->reqs[i].base.test = relay_test;
		c->reqs[i].comm = c;
	}
	return c;
}

static char *slot(struct relay_comm *c, uint64_t i, size_t nslots)
{
	return c->stage + (i % nslots) * c->slot_size;
}

static bool ops_full(const struct relay_comm *c)
{
	return c->op_tail - c->op_head == RELAY_OPS;
}

static void op_push(struct relay_comm *c, void *leg_req,
		    struct relay_req *owner, int slot_no)
{
	c->ops[c->op_tail++ % RELAY_OPS] = (struct relay_op){
		leg_req, owner, slot_no };
	if (owner)
		owner->outstanding++;
}

/* Completed leg requests: their owners count down, a header that came is
 * held.  -errno when the leg failed. */
static int ops_test(struct relay_comm *c)
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
			 * the leg ending there is the connection's end,
			 * what came before it is still delivered, and
			 * recv_progress fails the receive it leaves open */
			op->leg_req = NULL;
			c->hdr_posted = false;
			c->ended = true;
			continue;
		}
		if (err)
			return comm_fail(c, err, "the leg failed");
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
	if (err)
		return comm_fail(c, err, "the leg refused a send");
	if (!req)
		return -EAGAIN;
	op_push(c, req, owner, -1);
	return 0;
}

static int post_header(struct relay_comm *c, struct relay_req *r)
{
	char *s = slot(c, (uint64_t)(r - c->reqs), RELAY_REQS);
	struct relay_hdr h = {
		.magic = RELAY_HDR_MAGIC, .tag = r->tag, .size = r->size,
		.flags = r->inline_data ? RELAY_HDR_INLINE : 0,
		.seq = c->seq + 1, .chunk = (uint32_t)c->chunk,
	};
	size_t len = sizeof(h) + (r->inline_data ? r->size : 0);
	int err;

	memcpy(s, &h, sizeof(h));
	if (r->inline_data && r->size)
		memcpy(s + sizeof(h), r->data, r->size);
	err = leg_send(c, s, len, c->stage_mh, r);
	if (!err) {
		r->hdr_posted = true;
		c->seq++;
	}
	return err;
}

/* Hands the leg what it takes, in order: headers, then chunks. */
static int send_progress(struct relay_comm *c)
{
	int err = 0;

	while (!err && c->req_post < c->req_tail) {
		struct relay_req *r = &c->reqs[c->req_post % RELAY_REQS];

		if (!r->hdr_posted)
			err = post_header(c, r);
		while (!err && !r->inline_data && r->posted < r->size) {
			size_t len = r->size - r->posted;

			if (len > c->chunk)
				len = c->chunk;
			err = leg_send(c, r->data + r->posted, len, r->leg_mh,
				       r);
			if (!err)
				r->posted += len;
		}
		if (!err)
			c->req_post++;
	}
	if (err && err != -EAGAIN)
		return err;
	return ops_test(c);
}

static struct relay_req *req_alloc(struct relay_comm *c)
{
	struct relay_req *r = &c->reqs[c->req_tail % RELAY_REQS];

	if (r->in_use)
		return NULL;
	memset((char *)r + sizeof(r->base) + sizeof(r->comm), 0,
	       sizeof(*r) - sizeof(r->base) - sizeof(r->comm));
	r->in_use = true;
	c->req_tail++;
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
	r->leg_mh = mh ? mh->leg_mh : NULL;
	/* data inside the header is copied by the CPU at both ends: host
	 * memory here, and a peer that said it takes it */
	r->inline_data = !size || (c->inline_ok && size <= c->inline_max &&
				   mh->type == MESH_PTR_HOST);
	send_progress(c);
	*request = r;
	return 0;
}

/* ---- receive ---- */

static bool recv_filled(const struct relay_req *r)
{
	return r->nfilled == r->n;
}

/* Posts the chunk receives of the current message, straight into
 * NCCL's buffer; -EAGAIN while the leg takes no more. */
static int post_chunks(struct relay_comm *c)
{
	struct relay_req *r = c->chunk_req;

	while (c->chunk_off < c->chunk_size) {
		size_t len = c->chunk_size - c->chunk_off;
		char *dst = r->bufs[c->chunk_buf] + c->chunk_off;
		int tag = RELAY_LEG_TAG, err;
		void *req = NULL;

		if (len > r->got[c->chunk_buf])	/* chunk of the sender */
			len = r->got[c->chunk_buf];
		if (ops_full(c))
			return -EAGAIN;
		err = c->leg.module->irecv(c->lcomm, 1, (void **)&dst, &len,
					   &tag, &r->leg_mhs[c->chunk_buf],
					   &req);
		if (err)
			return comm_fail(c, err, "the leg refused a receive");
		if (!req)
			return -EAGAIN;
		op_push(c, req, r, -1);
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
	if (h.magic != RELAY_HDR_MAGIC || h.seq != c->seq + 1 ||
	    (!(h.flags & (RELAY_HDR_INLINE | RELAY_HDR_END)) && !h.chunk)) {
		snprintf(what, sizeof(what), "message %u came with a broken "
			 "header", c->seq + 1);
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
		snprintf(what, sizeof(what), "message %u has tag %d, which no "
			 "posted buffer has", h.seq, h.tag);
		return comm_fail(c, -EPROTO, what);
	}
	if (h.size > r->sizes[i]) {
		snprintf(what, sizeof(what), "message %u of %llu bytes exceeds "
			 "the %zu bytes posted", h.seq,
			 (unsigned long long)h.size, r->sizes[i]);
		return comm_fail(c, -EMSGSIZE, what);
	}
	c->seq++;
	r->filled[i] = true;
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
	if (err)
		return comm_fail(c, err, "the leg refused a receive");
	if (!req)
		return -EAGAIN;
	op_push(c, req, NULL, (int)(c->hdr_have % RELAY_HDR_SLOTS));
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

static int recv_progress(struct relay_comm *c)
{
	struct relay_req *r;
	int err = ops_test(c);

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
	if (err && err != -EAGAIN)
		return err;
	if (c->ended) {
		/* an orderly close with nothing owed is no error; a
		 * receive it leaves open is */
		if (oldest_open(c) && c->hdr_used == c->hdr_have) {
			char what[160];

			snprintf(what, sizeof(what), "the connection ended "
				 "(the peer or a relay on the route closed or "
				 "failed) before message %u came", c->seq + 1);
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
		err = post_header_recv(c);
		if (err && err != -EAGAIN)
			return err;
	}
	return 0;
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
		struct relay_mh *mh = mhandles ? mhandles[i] : NULL;

		r->bufs[i] = data[i];
		r->sizes[i] = sizes[i];
		r->tags[i] = tags[i];
		r->leg_mhs[i] = mh ? mh->leg_mh : NULL;
	}
	recv_progress(c);
	*request = r;
	return 0;
}

static int relay_test(void *request, int *done, int *sizes)
{
	struct relay_req *r = request;
	struct relay_comm *c = r->comm;
	bool finished;

	*done = 0;
	if (!r->failed && !c->err)
		(c->is_send ? send_progress : recv_progress)(c);
	if (r->failed || c->err) {
		r->in_use = false;
		return c->err ? c->err : -ECONNRESET;
	}
	if (c->is_send)
		finished = r->hdr_posted && r->outstanding == 0 &&
			   (r->inline_data || r->posted == r->size);
	else
		finished = recv_filled(r) && r->outstanding == 0 &&
			   c->chunk_req != r;
	if (!finished)
		return 0;
	*done = 1;
	if (sizes) {
		if (c->is_send)
			sizes[0] = (int)r->size;
		for (int i = 0; !c->is_send && i < r->n; i++)
			sizes[i] = (int)(r->filled[i] ? r->got[i] : 0);
	}
	r->in_use = false;
	return 0;
}

/* ---- memory, flush, close ---- */

/* Registers with the leg's module (a dma-buf when fd >= 0) and keeps the
 * memory type: only host memory goes inline. */
int relay_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			uint64_t offset, int fd, void **mhandle)
{
	struct relay_comm *c = comm;
	const struct mesh_module *m = c->leg.module;
	struct relay_mh *mh = calloc(1, sizeof(*mh));
	int err;

	if (!mh)
		return -ENOMEM;
	mh->type = type;
	err = fd < 0 ? m->reg_mr(c->lcomm, data, size, type, &mh->leg_mh) :
		       m->reg_mr_dmabuf(c->lcomm, data, size, type, offset, fd,
					&mh->leg_mh);
	if (err) {
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
	struct relay_mh *mh = mhandle;
	int err;

	if (!mh)
		return 0;
	err = c->leg.module->dereg_mr(c->lcomm, mh->leg_mh);
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
 * the end fails there with that reason.  Waits a little for the leg to
 * take it; a close never blocks for long.
 */
static void send_end(struct relay_comm *c)
{
	char *s = slot(c, RELAY_REQS, RELAY_REQS + 1);
	struct relay_hdr h = { .magic = RELAY_HDR_MAGIC, .seq = c->seq + 1,
			       .flags = RELAY_HDR_END };
	int64_t until = relay_now_ns() + RELAY_END_WAIT_NS;
	void *req = NULL;
	int done = 0, size;

	memcpy(s, &h, sizeof(h));
	while (!c->err && !req && relay_now_ns() < until) {
		if (c->leg.module->isend(c->lcomm, s, sizeof(h), RELAY_LEG_TAG,
					 c->stage_mh, &req))
			return;
		if (!req)
			ops_test(c);
	}
	while (req && !done && relay_now_ns() < until)
		if (((struct mesh_request *)req)->test(req, &done, &size))
			return;
}

static int comm_close(struct relay_comm *c)
{
	int err;

	if (!c)
		return 0;
	if (c->is_send)
		send_end(c);
	MESH_INFO("%s comm %u %s %s closed after %llu bytes (route: %s)",
		  c->is_send ? "send" : "recv", c->id,
		  c->is_send ? "to" : "from", c->peer,
		  (unsigned long long)c->bytes, c->route);
	c->leg.module->dereg_mr(c->lcomm, c->stage_mh);
	err = (c->is_send ? c->leg.module->close_send :
			    c->leg.module->close_recv)(c->lcomm);
	free(c->stage);
	free(c);
	return err;
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
	return c->leg.module->describe(c->lcomm, info);
}
