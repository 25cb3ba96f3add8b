/* SPDX-License-Identifier: MIT */
/*
 * Data path of the verbs layer: isend, irecv, iflush and test, all on NCCL's proxy
 * thread.  test() polls the comm's completion queue; nothing blocks and no
 * thread of ours runs.
 *
 * A piece of a message is a chain on one QP: its data writes, then (sizes
 * that do not fit the immediate) an 8-byte write of the size into the
 * receiver's sizes[][], then a write-with-immediate.  RC keeps a QP's writes
 * in order, so when the receiver sees the immediate, the data and the size
 * of that piece are in place.
 *
 * Eager messages (verbs.h) are one write-with-immediate of header and data
 * into a bounce slot; the receiver matches them to receives by number.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

/* ---- requests ---- */

/*
 * A send is done once its last write completed, even on a comm that failed
 * since.  One that failed (a completion error, or handed out by isend on a
 * comm that had ended) reports the comm's failure, or that the peer closed
 * before taking it.
 */
static int send_test(void *request, int *done, int *sizes)
{
	struct ib_send_req *r = request;
	struct vl_comm *c = r->comm;
	int ret = vl_comm_poll(c);

	*done = 0;
	if (!r->failed && r->pieces_done >= r->pieces) {
		r->in_use = false;
		*done = 1;
		if (sizes)
			*sizes = (int)r->size;
		return 0;
	}
	/* after the peer's notice, what it never acknowledged fails */
	if (!r->failed && (ret || !vl_send_orphaned(c)))
		return ret;
	r->in_use = false;
	if (ret)
		return ret;
	return vl_comm_fail(c, -ECONNRESET, "send comm %u to %s: the peer closed the connection before it took the message of %zu bytes",
			       c->id, c->peer, r->size);
}

static uint64_t recv_size(const struct ib_recv_req *r, int i)
{
	const struct vl_comm *c = r->comm;
	int slot = (int)(r - c->rreqs);

	if (r->imm_size[i] != IB_IMM_SIZE_FAR)
		return r->imm_size[i];
	return __atomic_load_n(&c->sizes->s[slot][i], __ATOMIC_ACQUIRE);
}

/* The buffer a receive posted, as its FIFO element holds it (written for
 * every receive, sent only for those that are not small). */
static const struct ib_fifo_elem *recv_posted(const struct ib_recv_req *r)
{
	const struct vl_comm *c = r->comm;

	return &c->fifo->slot[r - c->rreqs].e[0];
}

/*
 * Copies the eager message of this receive out of its bounce slot (its
 * receive number, seq - 1, modulo the slots): 1 when done, 0 when none came
 * (yet), -errno when it does not fit.
 */
static int eager_take(struct ib_recv_req *r)
{
	struct vl_comm *c = r->comm;
	const struct ib_fifo_elem *p = recv_posted(r);
	unsigned int b = (p->seq - 1) % VL_EAGER_SLOTS;
	const struct ib_eager_slot *e = &c->bounce[b];

	if (!c->eager_in[b])
		return 0;
	if (e->hdr.tag != p->tag)
		return vl_comm_fail(c, -EPROTO, "recv comm %u from %s: message with tag %d for a receive posted with tag %d",
				       c->id, c->peer, e->hdr.tag, p->tag);
	if (e->hdr.size > p->size || e->hdr.size > VL_EAGER_MAX)
		return vl_comm_fail(c, -EMSGSIZE, "recv comm %u from %s: message of %u bytes (tag %d) exceeds the %llu bytes posted",
				       c->id, c->peer, e->hdr.size, p->tag,
				       (unsigned long long)p->size);
	if (e->hdr.size)
		memcpy((void *)(uintptr_t)p->addr, e->data, e->hdr.size);
	c->eager_in[b] = false;
	r->pieces[0] = r->pieces_done[0] = 1;
	r->imm_size[0] = e->hdr.size;
	return 1;
}

static int credit_flush(struct vl_comm *c);

/* 1 when every buffer of the receive is in, 0 not yet, -errno. */
static int recv_arrived(struct ib_recv_req *r)
{
	struct vl_comm *c = r->comm;

	if (c->eager_max) {
		int ret = eager_take(r);

		if (ret)
			return ret;
		/* a receive without a FIFO entry can only be eager; a
		 * sender with a bigger message learns from the credit */
		if (recv_posted(r)->size <= c->eager_max) {
			if (++r->idle < VL_CREDIT_VALVE ||
			    c->credit_sent == c->recv_seq)
				return 0;
			return credit_flush(c);
		}
	}
	for (int i = 0; i < r->n; i++)
		if (!r->pieces[i] || r->pieces_done[i] < r->pieces[i])
			return 0;
	return 1;
}

/* 1 and the sizes when every buffer of the receive is in, 0 not yet,
 * -errno. */
static int recv_done(struct ib_recv_req *r, int *sizes)
{
	int ret = recv_arrived(r);

	for (int i = 0; ret > 0 && sizes && i < r->n; i++)
		sizes[i] = (int)recv_size(r, i);
	return ret;
}

/*
 * A receive is done once its data is in, even on a comm that failed since.
 * After the peer's close notice nothing more comes (the peer's writes all
 * completed before it wrote the notice, so their completions are in the
 * queue once the notice is seen): a receive still short fails.
 */
static int recv_test(void *request, int *done, int *sizes)
{
	struct ib_recv_req *r = request;
	struct vl_comm *c = r->comm;
	int ret = vl_comm_poll(c), got;

	*done = 0;
	if (r->failed) {
		r->in_use = false;
		return ret;
	}
	if (r->flush) {
		if (!r->flush_done)
			return ret;
		got = 1;
	} else {
		got = recv_done(r, sizes);
		if (!got && !ret && vl_peer_closed(c)) {
			ret = vl_comm_poll(c);
			got = recv_done(r, sizes);
			if (!got && !ret)
				ret = vl_comm_fail(c, -ECONNRESET, "recv comm %u from %s: the peer closed the connection without sending into a posted receive",
						      c->id, c->peer);
		}
		if (got < 0)
			return got;
	}
	if (!got)
		return ret;
	r->in_use = false;
	*done = 1;
	return 0;
}

void vl_comm_init_reqs(struct vl_comm *c)
{
	for (int i = 0; i < IB_SEND_REQS; i++) {
		c->sreqs[i].base.test = send_test;
		c->sreqs[i].comm = c;
	}
	for (int i = 0; i < VL_MAX_REQUESTS; i++) {
		c->rreqs[i].base.test = recv_test;
		c->rreqs[i].comm = c;
		c->freqs[i].base.test = recv_test;
		c->freqs[i].comm = c;
		c->freqs[i].flush = true;
	}
}

/* ---- send ---- */

/*
 * Copies the FIFO slot the next send goes to into *s: its element count,
 * 0 while the peer has not posted it (or not all of its buffers, or their
 * entries have not landed whole).
 */
static int fifo_ready(struct vl_comm *c, struct ib_fifo_slot *s)
{
	const volatile struct ib_fifo_elem *e =
		c->fifo->slot[c->slot_seq % VL_MAX_REQUESTS].e;
	uint32_t want = (uint32_t)(c->slot_seq + 1);
	int n = 1;

	for (int i = 0; i < n; i++) {
		if (__atomic_load_n(&e[i].seq, __ATOMIC_ACQUIRE) != want)
			return 0;
		s->e[i] = (struct ib_fifo_elem){
			.addr = e[i].addr, .size = e[i].size, .tag = e[i].tag,
			.nreqs = e[i].nreqs, .check = e[i].check, .seq = want,
		};
		for (int l = 0; l < VL_MAX_LINKS; l++)
			s->e[i].rkey[l] = e[i].rkey[l];
		if (s->e[i].check != vl_elem_check(&s->e[i]) ||
		    s->e[i].nreqs < 1 || s->e[i].nreqs > VL_MAX_RECVS)
			return 0;
		n = (int)s->e[0].nreqs;
	}
	return n;
}

/* Receives the peer has posted, as far as its last whole credit says. */
static uint64_t credit_posted(struct vl_comm *c)
{
	const volatile struct ib_credit *k = &c->fifo->credit;
	uint64_t value = __atomic_load_n(&k->value, __ATOMIC_ACQUIRE);

	if (k->check == vl_credit_check(value) && value > c->credit_seen)
		c->credit_seen = value;
	return c->credit_seen;
}

static struct ib_send_req *sreq_get(struct vl_comm *c, int *idx)
{
	for (int k = 0; k < IB_SEND_REQS; k++) {
		int i = (c->next_sreq + k) % IB_SEND_REQS;

		if (!c->sreqs[i].in_use) {
			c->next_sreq = (i + 1) % IB_SEND_REQS;
			*idx = i;
			return &c->sreqs[i];
		}
	}
	return NULL;
}

static int post_send(struct vl_comm *c, int qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(c->qps[qp], wr, &bad);

	if (ret)
		return vl_comm_fail(c, -ret, "send comm %u to %s: cannot post on QP %d: %s",
				       c->id, c->peer, qp, strerror(ret));
	return 0;
}

struct piece {
	int qp;
	uint64_t laddr;
	uint32_t lkey;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t len;
	uint32_t imm;
	bool far;		/* the size goes through sizes[][] */
	int slot, elem;
	uint64_t wr_id;
};

/* Data writes of a piece but the last chunk, one max_msg at a time. */
static int piece_head(struct vl_comm *c, struct piece *p)
{
	while (p->len > c->max_msg) {
		struct ibv_sge sge = { p->laddr, c->max_msg, p->lkey };
		struct ibv_send_wr wr = {
			.wr_id = VL_WR_FIFO,
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.wr.rdma = { p->raddr, p->rkey },
		};
		int ret = post_send(c, p->qp, &wr);

		if (ret)
			return ret;
		p->laddr += c->max_msg;
		p->raddr += c->max_msg;
		p->len -= c->max_msg;
	}
	return 0;
}

static int piece_post(struct vl_comm *c, struct piece *p)
{
	struct ibv_sge sge = { p->laddr, (uint32_t)p->len, p->lkey };
	int link = vl_qp_link(c, p->qp);
	struct ibv_sge ssge = {
		(uint64_t)(uintptr_t)&c->sizes->s[p->slot][p->elem], 8,
		c->sizes_mr[link]->lkey,
	};
	struct ibv_send_wr last = {
		.wr_id = p->wr_id,
		.sg_list = p->len ? &sge : NULL,
		.num_sge = p->len ? 1 : 0,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED |
			      (p->len <= c->max_inline ? IBV_SEND_INLINE : 0),
		.imm_data = htonl(p->imm),
		.wr.rdma = { p->raddr, p->rkey },
	};
	struct ibv_send_wr size_wr = {
		.wr_id = VL_WR_FIFO,
		.next = &last,
		.sg_list = &ssge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.wr.rdma = {
			c->rem_addr + (uint64_t)((char *)&c->sizes->s[p->slot][p->elem] -
						 (char *)c->sizes),
			c->rem_rkey[link],
		},
	};
	int ret = piece_head(c, p);

	if (ret)
		return ret;
	sge.addr = p->laddr;
	sge.length = (uint32_t)p->len;
	last.wr.rdma.remote_addr = p->raddr;
	return post_send(c, p->qp, p->far ? &size_wr : &last);
}

/* Cuts a message into pieces, one per QP, none below VL_MIN_PIECE. */
static int pieces_of(const struct vl_comm *c, size_t size,
		     size_t *piece)
{
	int n = 1;

	if (size >= 2 * (size_t)VL_MIN_PIECE) {
		n = (int)(size / VL_MIN_PIECE);
		if (n > c->nqps)
			n = c->nqps;
	}
	*piece = (size + (size_t)n - 1) / (size_t)n;
	*piece = (*piece + 4095) & ~(size_t)4095;
	if (!*piece)
		return 1;
	n = (int)((size + *piece - 1) / *piece);
	return n ? n : 1;
}

static int send_post(struct vl_comm *c, struct ib_send_req *r,
		     int idx, void *data, size_t size,
		     const struct vl_mh *mh,
		     const struct ib_fifo_elem *e, int slot, int elem)
{
	size_t piece;
	int n = pieces_of(c, size, &piece);
	bool far = size >= IB_IMM_SIZE_FAR;

	if (far)
		c->sizes->s[slot][elem] = size;
	r->failed = false;
	r->pieces = n;
	r->pieces_done = 0;
	r->size = size;
	for (int i = 0; i < n; i++) {
		size_t off = (size_t)i * piece;
		int qp = (c->next_qp + i) % c->nqps;
		int link = vl_qp_link(c, qp);
		struct piece p = {
			.qp = qp,
			.laddr = (uint64_t)(uintptr_t)data + off,
			.lkey = mh ? mh->ent[link]->mr->lkey : 0,
			.raddr = e->addr + off,
			.rkey = e->rkey[link],
			.len = size - off < piece ? size - off : piece,
			.imm = ((uint32_t)slot << IB_IMM_SLOT_SHIFT) |
			       ((uint32_t)elem << IB_IMM_ELEM_SHIFT) |
			       ((uint32_t)(n - 1) << IB_IMM_PIECES_SHIFT) |
			       (far ? IB_IMM_SIZE_FAR : (uint32_t)size),
			.far = far,
			.slot = slot,
			.elem = elem,
			.wr_id = (uint64_t)idx,
		};
		int ret = piece_post(c, &p);

		if (ret)
			return ret;
	}
	c->next_qp = (c->next_qp + n) % c->nqps;
	return 0;
}

/* Which posted buffer of the slot the tag goes to; -errno if none. */
static int tag_match(struct vl_comm *c,
		     const struct ib_fifo_slot *s, int n, int tag,
		     size_t size)
{
	int i;

	for (i = 0; i < n; i++)
		if (!c->used[i] && s->e[i].tag == tag)
			break;
	if (i == n)
		return vl_comm_fail(c, -EPROTO, "send comm %u to %s: message with tag %d matches none of the %d buffers the peer posted",
				       c->id, c->peer, tag, n);
	if (size > s->e[i].size)
		return vl_comm_fail(c, -EMSGSIZE, "send comm %u to %s: message of %zu bytes (tag %d) exceeds the %llu bytes the peer posted",
				       c->id, c->peer, size, tag,
				       (unsigned long long)s->e[i].size);
	return i;
}

/*
 * An eager message: header and data in one write-with-immediate into the
 * bounce slot of its number, once the peer's credit shows the slot empty.
 */
static int eager_send(struct vl_comm *c, void *data, size_t size,
		      int tag, const struct vl_mh *mh, void **request)
{
	uint64_t posted = credit_posted(c);
	uint32_t b = (uint32_t)(c->slot_seq % VL_EAGER_SLOTS);
	int qp = c->next_qp, link = vl_qp_link(c, qp), idx, ret;
	struct ib_eager_hdr *h;
	struct ib_send_req *r;
	struct ibv_sge sge[2];
	struct ibv_send_wr wr = {
		.sg_list = sge,
		.num_sge = size ? 2 : 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl((uint32_t)IB_IMM_ELEM_EAGER << IB_IMM_ELEM_SHIFT | b),
		.wr.rdma = {
			c->rem_addr + sizeof(struct ib_sizes) +
				b * sizeof(struct ib_eager_slot),
			c->rem_rkey[link],
		},
	};

	/* slot b last held message slot_seq - 64, whose receive is done
	 * once receive slot_seq - 32 is posted (it reuses the request) */
	if (c->slot_seq >= posted + VL_EAGER_SLOTS - VL_MAX_REQUESTS)
		return 0;
	r = sreq_get(c, &idx);
	if (!r)
		return 0;
	h = &c->sizes->hdr[idx];
	*h = (struct ib_eager_hdr){ .tag = tag, .size = (uint32_t)size };
	sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)h, sizeof(*h),
				   c->sizes_mr[link]->lkey };
	if (size)
		sge[1] = (struct ibv_sge){ (uint64_t)(uintptr_t)data,
					   (uint32_t)size,
					   mh->ent[link]->mr->lkey };
	if (sizeof(*h) + size <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	wr.wr_id = (uint64_t)idx;
	ret = post_send(c, qp, &wr);
	if (ret)
		return ret;
	r->in_use = true;
	r->failed = false;
	r->pieces = 1;
	r->pieces_done = 0;
	r->size = size;
	c->next_qp = (qp + 1) % c->nqps;
	c->slot_seq++;
	*request = r;
	return 0;
}

/*
 * No FIFO entry for this message's receive yet.  On an eager comm a
 * receive posted without one was posted for at most eager_max bytes: once
 * the credit counts it (credits travel behind the FIFO entries before
 * them), this message cannot fit.
 */
static int fifo_missing(struct vl_comm *c, size_t size, int tag)
{
	struct ib_fifo_slot s;

	if (credit_posted(c) <= c->slot_seq || fifo_ready(c, &s))
		return 0;
	return vl_comm_fail(c, -EMSGSIZE, "send comm %u to %s: message of %zu bytes (tag %d) exceeds the at most %u bytes the peer posted",
			       c->id, c->peer, size, tag, c->eager_max);
}

/*
 * A send on a comm that failed or whose peer closed: a request that fails
 * when tested, so the error comes from test() (NULL while every request is
 * taken; those fail first).
 */
static int send_ended(struct vl_comm *c, size_t size, void **request)
{
	int idx;
	struct ib_send_req *r = sreq_get(c, &idx);

	if (r) {
		r->in_use = true;
		r->failed = true;
		r->size = size;
		*request = r;
	}
	return 0;
}

int vl_isend(void *send_comm, void *data, size_t size, int tag,
		    void *mhandle, void **request)
{
	struct vl_comm *c = send_comm;
	struct ib_fifo_slot s;
	const struct vl_mh *mh = mhandle;
	struct ib_send_req *r;
	int n, elem, idx, ret, slot;

	*request = NULL;
	ret = vl_comm_poll(c);
	if (ret || vl_peer_closed(c))
		return send_ended(c, size, request);
	if (size && (!mh || (uintptr_t)data < mh->start ||
		     (uintptr_t)data + size > mh->end))
		return vl_comm_fail(c, -EINVAL, "send comm %u to %s: %zu bytes at %p are not inside the registered memory",
				       c->id, c->peer, size, data);
	if (c->eager_max && size <= c->eager_max)
		return eager_send(c, data, size, tag, mh, request);
	n = fifo_ready(c, &s);
	if (!n)
		return c->eager_max ? fifo_missing(c, size, tag) : 0;
	r = sreq_get(c, &idx);
	if (!r)
		return 0;
	elem = tag_match(c, &s, n, tag, size);
	if (elem < 0)
		return elem;
	slot = (int)(c->slot_seq % VL_MAX_REQUESTS);
	r->in_use = true;
	ret = send_post(c, r, idx, data, size, mh, &s.e[elem], slot, elem);
	if (ret)
		return ret;
	c->used[elem] = 1;
	for (int i = 0; i < n; i++)
		if (!c->used[i])
			goto out;
	memset(c->used, 0, sizeof(c->used));
	c->slot_seq++;
out:
	*request = r;
	return 0;
}

/* ---- receive ---- */

/*
 * An RDMA write from our FIFO region into the peer's (a FIFO entry or the
 * credit) on QP 0, behind the ones before it.  -ENOMEM when the send queue
 * is full, which is no failure: the caller tries again later.
 */
static int ctrl_write(struct vl_comm *c, const void *src, uint32_t len,
		      const char *what)
{
	uint64_t off = (uint64_t)((const char *)src - (const char *)c->fifo);
	struct ibv_sge sge = { (uint64_t)(uintptr_t)src, len,
			       c->fifo_mr[0]->lkey };
	struct ibv_send_wr wr = {
		.wr_id = VL_WR_FIFO,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.wr.rdma = { c->rem_addr + off, c->rem_rkey[0] },
	}, *bad;
	int ret;

	/* the peer's QPs are gone: its receives need no announcing */
	if (c->peer_closed)
		return 0;
	if (len <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	if (c->ctrl_writes % IB_FIFO_SIGNAL_EVERY == IB_FIFO_SIGNAL_EVERY - 1)
		wr.send_flags |= IBV_SEND_SIGNALED;
	ret = ibv_post_send(c->qps[0], &wr, &bad);
	if (ret == ENOMEM)
		return -ENOMEM;
	if (ret)
		return vl_comm_fail(c, -ret, "recv comm %u from %s: cannot post the %s write: %s",
				       c->id, c->peer, what, strerror(ret));
	c->ctrl_writes++;
	return 0;
}

/* Tells the sender how many receives are posted: that frees its bounce
 * slots and shows which receives have no FIFO entry.  Inline
 * (vl_comm_create makes sure), so the value is the one of this moment. */
static int credit_flush(struct vl_comm *c)
{
	int ret;

	c->fifo->credit = (struct ib_credit){
		c->recv_seq, vl_credit_check(c->recv_seq) };
	ret = ctrl_write(c, &c->fifo->credit, sizeof(c->fifo->credit),
			 "credit");
	if (ret == -ENOMEM)
		return 0;
	if (!ret)
		c->credit_sent = c->recv_seq;
	return ret;
}

int vl_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		    int *tags, void **mhandles, void **request)
{
	struct vl_comm *c = recv_comm;
	int slot = (int)(c->recv_seq % VL_MAX_REQUESTS);
	int max_n = c->eager_max ? 1 : VL_MAX_RECVS;
	struct ib_recv_req *r = &c->rreqs[slot];
	struct ib_fifo_slot *f = &c->fifo->slot[slot];
	int ret;

	*request = NULL;
	ret = vl_comm_poll(c);
	if (ret) {
		/* fails when tested, as a send on a failed comm */
		if (r->in_use)
			return 0;
		r->in_use = true;
		r->failed = true;
		*request = r;
		return 0;
	}
	if (n < 1 || n > max_n)
		return vl_comm_fail(c, -EINVAL, "recv comm %u from %s: %d grouped receives, 1..%d supported",
				       c->id, c->peer, n, max_n);
	if (r->in_use)
		return 0;
	for (int i = 0; i < n; i++) {
		const struct vl_mh *mh = mhandles ? mhandles[i] : NULL;

		if (sizes[i] && !mh)
			return vl_comm_fail(c, -EINVAL, "recv comm %u from %s: buffer %d of %zu bytes is not registered",
					       c->id, c->peer, i, sizes[i]);
		f->e[i] = (struct ib_fifo_elem){
			.addr = (uint64_t)(uintptr_t)data[i],
			.size = sizes[i],
			.tag = tags[i],
			.nreqs = (uint32_t)n,
			.seq = (uint32_t)(c->recv_seq + 1),
		};
		for (int l = 0; mh && l < mh->n; l++)
			f->e[i].rkey[l] = mh->ent[l]->mr->rkey;
		f->e[i].check = vl_elem_check(&f->e[i]);
	}
	memset(r->pieces, 0, sizeof(r->pieces));
	memset(r->pieces_done, 0, sizeof(r->pieces_done));
	r->n = n;
	r->idle = 0;
	r->failed = false;
	/* a small receive on an eager comm can only take an eager message */
	if (!c->eager_max || sizes[0] > c->eager_max) {
		ret = ctrl_write(c, f, (uint32_t)(sizeof(f->e[0]) * (size_t)n),
				 "FIFO");
		if (ret == -ENOMEM)
			return 0;	/* send queue full: NCCL retries */
		if (ret)
			return ret;
	}
	r->in_use = true;
	c->recv_seq++;
	if (c->eager_max &&
	    c->recv_seq - c->credit_sent >= VL_CREDIT_EVERY) {
		ret = credit_flush(c);
		if (ret)
			return ret;
	}
	*request = r;
	return 0;
}

int vl_iflush(void *recv_comm, int n, void **data, int *sizes,
		     void **mhandles, void **request)
{
	struct vl_comm *c = recv_comm;
	struct ib_recv_req *r;
	const struct vl_mh *mh;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_READ,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	int last = -1, ret, k;

	*request = NULL;
	if (!c->flush_qp)
		return 0;
	for (int i = 0; i < n; i++)
		if (sizes[i] > 0 && mhandles[i])
			last = i;
	if (last < 0)
		return 0;
	k = c->next_flush;
	r = &c->freqs[k];
	if (r->in_use)
		return vl_comm_fail(c, -EBUSY, "recv comm %u from %s: more than %d flushes outstanding",
				       c->id, c->peer, VL_MAX_REQUESTS);
	mh = mhandles[last];
	sge = (struct ibv_sge){ (uint64_t)(uintptr_t)&c->flush_buf, 1,
				c->flush_mr->lkey };
	wr.wr_id = VL_WR_FLUSH_BASE + (uint64_t)k;
	wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[last];
	wr.wr.rdma.rkey = mh->ent[0]->mr->rkey;
	ret = ibv_post_send(c->flush_qp, &wr, &bad);
	if (ret)
		return vl_comm_fail(c, -ret, "recv comm %u from %s: cannot post the flush: %s",
				       c->id, c->peer, strerror(ret));
	r->in_use = true;
	r->flush_done = false;
	c->next_flush = (k + 1) % VL_MAX_REQUESTS;
	*request = r;
	return 0;
}

/* ---- close ---- */

int vl_close_send(void *send_comm)
{
	return vl_close_comm(send_comm);
}

int vl_close_recv(void *recv_comm)
{
	return vl_close_comm(recv_comm);
}
