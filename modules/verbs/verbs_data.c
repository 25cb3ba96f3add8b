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
 *
 * Every piece is kept (verbs.h: struct vl_piece) until its write with
 * immediate completed, or the receiver's count of a QP that failed shows
 * it took it: one it did not take is posted again on a QP that is up
 * (verbs_path.c).  Only QPs that are up take new work.
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
		mesh_count(&c->m_bytes, r->size);
		mesh_count(&c->m_requests, 1);
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
				ret = vl_comm_fail(c, -ECONNRESET, "recv comm %u from %s: the peer closed the connection without sending into a posted receive (receive %d: %d of %d pieces in)",
						      c->id, c->peer,
						      (int)(r - c->rreqs),
						      r->pieces_done[0],
						      r->pieces[0]);
		}
		if (got < 0)
			return got;
	}
	if (!got)
		return ret;
	for (int i = 0; !r->flush && i < r->n; i++)
		mesh_count(&c->m_bytes, recv_size(r, i));
	if (!r->flush)
		mesh_count(&c->m_requests, 1);
	r->in_use = false;
	*done = 1;
	return 0;
}

int vl_comm_counters(void *comm, mesh_counter_fn emit, void *arg)
{
	const struct vl_comm *c = comm;

	emit(arg, &(struct mesh_counter){ .name = "bytes",
		.value = mesh_count_read(&c->m_bytes) });
	emit(arg, &(struct mesh_counter){ .name = "requests",
		.value = mesh_count_read(&c->m_requests) });
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

/*
 * Posts a chain on slot q.  A full send queue leaves the work for later;
 * any other refusal is the QP's failure (a path fault with an outage
 * budget: the slot is rebuilt, the work posted elsewhere).  0 when
 * posted, 1 when not (try later or elsewhere), -errno when the comm failed.
 */
static int post_on(struct vl_comm *c, int q, struct ibv_send_wr *wr)
{
	int ret = vl_post_send(c, q, wr);

	if (!ret)
		return 0;
	if (ret == -ENOMEM)
		return 1;
	if (c->outage_ms) {
		vl_path_break(c, q, VL_CAUSE_POST);
		return 1;
	}
	return vl_comm_fail(c, ret, "%s comm %u %s %s: cannot post on QP %d: %s",
			    c->is_send ? "send" : "recv", c->id,
			    c->is_send ? "to" : "from", c->peer, q,
			    strerror(-ret));
}

/* Data writes of a piece before its last chunk, one max_msg at a time:
 * unsignaled, so a full queue part way is no harm (written again whole). */
static int piece_head(struct vl_comm *c, int q, uint64_t *laddr,
		      uint32_t lkey, uint64_t *raddr, uint32_t rkey,
		      uint64_t *len)
{
	while (*len > c->max_msg) {
		struct ibv_sge sge = { *laddr, c->max_msg, lkey };
		struct ibv_send_wr wr = {
			.wr_id = vl_wr(VL_WR_PLAIN, q, c->path[q].epoch, 0),
			.sg_list = &sge,
			.num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.wr.rdma = { *raddr, rkey },
		};
		int ret = post_on(c, q, &wr);

		if (ret)
			return ret;
		*laddr += c->max_msg;
		*raddr += c->max_msg;
		*len -= c->max_msg;
	}
	return 0;
}

/*
 * Piece i of send request s on slot q: its data writes, the size write
 * (sizes that do not fit the immediate), the write with immediate; or an
 * eager message's one write of header and data.  0 when posted, 1 when
 * not, -errno.
 */
static int piece_post(struct vl_comm *c, int s, int i, int q)
{
	struct ib_send_req *r = &c->sreqs[s];
	struct vl_path *p = &c->path[q];
	int link = vl_qp_link(c, q);
	size_t off = r->eager ? 0 : (size_t)i * r->piece_len;
	uint64_t len = r->eager ? r->size :
		       (r->size - off < r->piece_len ? r->size - off :
						       r->piece_len);
	uint64_t laddr = (uint64_t)(uintptr_t)r->data + off;
	uint32_t lkey = r->mh && len ? r->mh->ent[link]->mr->lkey : 0;
	uint64_t raddr = r->raddr + off;
	struct ibv_sge sge[2], ssge;
	struct ibv_send_wr last = {
		.wr_id = vl_wr(VL_WR_PIECE, q, p->epoch, vl_piece_id(s, i)),
		.sg_list = sge,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(r->imm),
	};
	struct ibv_send_wr size_wr = {
		.wr_id = vl_wr(VL_WR_PLAIN, q, p->epoch, 0),
		.next = &last,
		.sg_list = &ssge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
	};
	int ret;

	if (r->eager) {
		struct ib_eager_hdr *h = &c->sizes->hdr[s];

		sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)h, sizeof(*h),
					   c->sizes_mr[link]->lkey };
		sge[1] = (struct ibv_sge){ laddr, (uint32_t)len, lkey };
		last.num_sge = len ? 2 : 1;
		if (sizeof(*h) + len <= c->max_inline)
			last.send_flags |= IBV_SEND_INLINE;
		last.wr.rdma.remote_addr = c->rem_addr + sizeof(struct ib_sizes) +
			r->bounce * sizeof(struct ib_eager_slot);
		last.wr.rdma.rkey = c->rem_rkey[link];
		ret = post_on(c, q, &last);
	} else {
		ret = piece_head(c, q, &laddr, lkey, &raddr, r->rkey[link],
				 &len);
		if (ret)
			return ret;
		sge[0] = (struct ibv_sge){ laddr, (uint32_t)len, lkey };
		last.num_sge = len ? 1 : 0;
		if (len <= c->max_inline)
			last.send_flags |= IBV_SEND_INLINE;
		last.wr.rdma.remote_addr = raddr;
		last.wr.rdma.rkey = r->rkey[link];
		ssge = (struct ibv_sge){
			(uint64_t)(uintptr_t)&c->sizes->s[r->slot][r->elem], 8,
			c->sizes_mr[link]->lkey };
		size_wr.wr.rdma.remote_addr = c->rem_addr +
			(uint64_t)((char *)&c->sizes->s[r->slot][r->elem] -
				   (char *)c->sizes);
		size_wr.wr.rdma.rkey = c->rem_rkey[link];
		ret = post_on(c, q, r->far ? &size_wr : &last);
	}
	if (ret)
		return ret;
	r->pc[i] = (struct vl_piece){ .st = VL_PC_POSTED, .qp = (uint8_t)q,
				      .epoch = (uint16_t)p->epoch,
				      .seq = (uint32_t)p->imm_sent++ };
	return 0;
}

/*
 * Posts piece i on slot q if it is up, else on the next one that is;
 * leaves it queued when none takes it now.  The slot after the one used
 * (where the next piece goes), or -errno.
 */
static int piece_send(struct vl_comm *c, int s, int i, int q)
{
	for (int tries = 0; tries < c->nqps; tries++) {
		int ret;

		q = vl_next_up(c, q);
		if (q < 0)
			break;
		ret = piece_post(c, s, i, q);
		if (ret < 0)
			return ret;
		if (!ret)
			return (q + 1) % c->nqps;
		if (c->path[q].state == VL_QP_UP)
			break;		/* its queue is full: later */
		q = (q + 1) % c->nqps;
	}
	c->sreqs[s].pc[i].st = VL_PC_QUEUED;
	c->queued++;
	return q < 0 ? 0 : q;
}

/* Pieces that wait for a QP: posted where there is room now. */
void vl_post_queued(struct vl_comm *c)
{
	for (int s = 0; s < IB_SEND_REQS && c->queued > 0 && c->nup; s++) {
		struct ib_send_req *r = &c->sreqs[s];

		if (!r->in_use || r->failed)
			continue;
		for (int i = 0; i < r->pieces; i++) {
			int q, ret;

			if (r->pc[i].st != VL_PC_QUEUED)
				continue;
			q = vl_next_up(c, c->next_qp);
			if (q < 0)
				return;
			ret = piece_post(c, s, i, q);
			if (ret < 0)
				return;
			if (ret > 0) {
				/* full or broken: the next slot next time */
				c->next_qp = (q + 1) % c->nqps;
				return;
			}
			c->queued--;
			c->next_qp = (q + 1) % c->nqps;
		}
	}
}

void vl_piece_done(struct vl_comm *c, int q, uint32_t epoch,
		   unsigned int id)
{
	unsigned int s = id & 0xff, i = id >> 8;
	struct ib_send_req *r;
	struct vl_piece *pc;

	if (!c->is_send || s >= IB_SEND_REQS || i >= VL_MAX_QPS) {
		vl_comm_fail(c, -EPROTO, "%s comm %u with %s: completion of unknown piece %u",
			     c->is_send ? "send" : "recv", c->id, c->peer, id);
		return;
	}
	r = &c->sreqs[s];
	pc = &r->pc[i];
	/* a piece since counted by the receiver, or posted again */
	if (!r->in_use || pc->st != VL_PC_POSTED || pc->qp != q ||
	    pc->epoch != (uint16_t)epoch)
		return;
	pc->st = VL_PC_DONE;
	r->pieces_done++;
}

/*
 * Slot q's dead incarnation: the receiver took `got` of the writes with
 * immediate we posted on it.  Pieces numbered below are in (done, whatever
 * their completion said); the others are posted again.
 */
int vl_settle_send(struct vl_comm *c, int q, uint64_t got)
{
	struct vl_path *p = &c->path[q];
	struct vl_outage *o = &c->out[vl_qp_link(c, q)];
	uint16_t ep = (uint16_t)p->dead_epoch;

	if (got > p->imm_sent)
		return vl_comm_fail(c, -EPROTO, "send comm %u to %s: the peer took %llu writes on QP %d, %llu were posted",
				    c->id, c->peer, (unsigned long long)got, q,
				    (unsigned long long)p->imm_sent);
	for (int s = 0; s < IB_SEND_REQS; s++) {
		struct ib_send_req *r = &c->sreqs[s];

		if (!r->in_use || r->failed)
			continue;
		for (int i = 0; i < r->pieces; i++) {
			struct vl_piece *pc = &r->pc[i];
			bool taken;

			if (pc->qp != q || pc->epoch != ep ||
			    pc->st == VL_PC_QUEUED)
				continue;
			/* pc->seq < got, in the window of writes in flight */
			taken = (int32_t)(pc->seq - (uint32_t)got) < 0;
			MESH_TRACE("send comm %u: QP %d settles request %d piece %d/%d (write %u, %s): %s",
				   c->id, q, s, i, r->pieces, pc->seq,
				   pc->st == VL_PC_DONE ? "completed" : "posted",
				   taken ? "taken" : "sent again");
			if (taken) {
				if (pc->st == VL_PC_POSTED)
					r->pieces_done++;
				pc->st = VL_PC_DONE;
				continue;
			}
			if (pc->st == VL_PC_DONE)
				return vl_comm_fail(c, -EPROTO, "send comm %u to %s: piece %d of a message completed on QP %d but the peer did not take it",
						    c->id, c->peer, i, q);
			pc->st = VL_PC_QUEUED;
			c->queued++;
			o->pieces++;
			o->bytes += r->eager ? r->size :
				    (r->size - (size_t)i * r->piece_len <
				     r->piece_len ? r->size - (size_t)i * r->piece_len :
						    r->piece_len);
		}
	}
	vl_post_queued(c);
	return 0;
}

/* Cuts a message into pieces, one per QP that is up, none below
 * VL_MIN_PIECE. */
static int pieces_of(const struct vl_comm *c, size_t size,
		     size_t *piece)
{
	int n = 1;

	if (size >= 2 * (size_t)VL_MIN_PIECE) {
		n = (int)(size / VL_MIN_PIECE);
		if (n > c->nup)
			n = c->nup > 0 ? c->nup : 1;
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
	int q = c->next_qp;

	if (far)
		c->sizes->s[slot][elem] = size;
	r->failed = false;
	r->eager = false;
	r->far = far;
	r->pieces = n;
	r->pieces_done = 0;
	r->size = size;
	r->data = data;
	r->mh = mh;
	r->raddr = e->addr;
	memcpy(r->rkey, e->rkey, sizeof(r->rkey));
	r->piece_len = piece;
	r->slot = slot;
	r->elem = elem;
	r->imm = ((uint32_t)slot << IB_IMM_SLOT_SHIFT) |
		 ((uint32_t)elem << IB_IMM_ELEM_SHIFT) |
		 ((uint32_t)(n - 1) << IB_IMM_PIECES_SHIFT) |
		 (far ? IB_IMM_SIZE_FAR : (uint32_t)size);
	for (int i = 0; i < n; i++)
		r->pc[i] = (struct vl_piece){ .st = VL_PC_QUEUED };
	for (int i = 0; i < n; i++) {
		q = piece_send(c, idx, i, q);
		if (q < 0)
			return q;
	}
	c->next_qp = q;
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
	struct ib_send_req *r;
	int idx, q;

	/* slot b last held message slot_seq - 64, whose receive is done
	 * once receive slot_seq - 32 is posted (it reuses the request) */
	if (c->slot_seq >= posted + VL_EAGER_SLOTS - VL_MAX_REQUESTS)
		return 0;
	r = sreq_get(c, &idx);
	if (!r)
		return 0;
	c->sizes->hdr[idx] = (struct ib_eager_hdr){ .tag = tag,
						    .size = (uint32_t)size };
	r->in_use = true;
	r->failed = false;
	r->eager = true;
	r->far = false;
	r->pieces = 1;
	r->pieces_done = 0;
	r->size = size;
	r->data = data;
	r->mh = mh;
	r->raddr = 0;
	r->imm = (uint32_t)IB_IMM_ELEM_EAGER << IB_IMM_ELEM_SHIFT | b;
	r->bounce = b;
	r->pc[0] = (struct vl_piece){ .st = VL_PC_QUEUED };
	q = piece_send(c, idx, 0, c->next_qp);
	if (q < 0) {
		r->in_use = false;
		return q;
	}
	c->next_qp = q;
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
 * credit) on the control slot, behind the ones before it.  -ENOMEM when
 * the send queue is full, which is no failure: the caller tries again
 * later.  1 when no slot took it: it is written again once one is up.
 */
static int ctrl_write(struct vl_comm *c, const void *src, uint32_t len,
		      const char *what)
{
	uint64_t off = (uint64_t)((const char *)src - (const char *)c->fifo);
	int q = c->ctrl_qp, l, ret;
	struct ibv_sge sge;
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
	};
	bool sig = c->ctrl_writes % IB_FIFO_SIGNAL_EVERY ==
		   IB_FIFO_SIGNAL_EVERY - 1;

	/* the peer's QPs are gone: its receives need no announcing */
	if (c->peer_closed)
		return 0;
	if (q < 0) {
		c->fifo_resend = true;
		return 1;
	}
	l = vl_qp_link(c, q);
	sge = (struct ibv_sge){ (uint64_t)(uintptr_t)src, len,
				c->fifo_mr[l]->lkey };
	wr.wr_id = vl_wr(sig ? VL_WR_CTRL : VL_WR_PLAIN, q,
			 c->path[q].epoch, 0);
	wr.wr.rdma.remote_addr = c->rem_addr + off;
	wr.wr.rdma.rkey = c->rem_rkey[l];
	if (len <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	if (sig)
		wr.send_flags |= IBV_SEND_SIGNALED;
	ret = vl_post_send(c, q, &wr);
	if (ret == -ENOMEM)
		return -ENOMEM;
	if (ret && c->outage_ms) {
		vl_path_break(c, q, VL_CAUSE_POST);
		c->fifo_resend = true;
		return 1;
	}
	if (ret)
		return vl_comm_fail(c, ret, "recv comm %u from %s: cannot post the %s write: %s",
				    c->id, c->peer, what, strerror(-ret));
	c->path[q].ctrl_used = true;
	c->ctrl_writes++;
	return 0;
}

/*
 * Whether a credit must wait: a FIFO entry before it may still be lost
 * with a QP that failed, and a credit that overtook it would make the
 * sender take that receive for a small one.  Until the dead QP is settled
 * and the entries are written again, credits wait.
 */
static bool credit_held(const struct vl_comm *c)
{
	if (c->fifo_resend || c->ctrl_qp < 0)
		return true;
	for (int q = 0; q < c->nqps; q++) {
		const struct vl_path *p = &c->path[q];

		if (p->ctrl_used && p->state != VL_QP_UP && !p->settled)
			return true;
	}
	return false;
}

/* Tells the sender how many receives are posted: that frees its bounce
 * slots and shows which receives have no FIFO entry.  Inline
 * (vl_comm_create makes sure), so the value is the one of this moment. */
static int credit_flush(struct vl_comm *c)
{
	int ret;

	if (credit_held(c))
		return 0;
	c->fifo->credit = (struct ib_credit){
		c->recv_seq, vl_credit_check(c->recv_seq) };
	ret = ctrl_write(c, &c->fifo->credit, sizeof(c->fifo->credit),
			 "credit");
	if (ret == -ENOMEM || ret > 0)
		return 0;
	if (!ret)
		c->credit_sent = c->recv_seq;
	return ret;
}

/* A dead QP carried FIFO writes: once the peer's end of it is dead too,
 * the entries of every receive still out are written again. */
void vl_settle_recv(struct vl_comm *c, int q)
{
	if (!c->path[q].ctrl_used)
		return;
	c->fifo_resend = true;
	vl_fifo_rewrite(c);
}

void vl_fifo_rewrite(struct vl_comm *c)
{
	uint64_t n = 0;

	if (c->peer_closed) {
		c->fifo_resend = false;
		return;
	}
	if (c->ctrl_qp < 0)
		return;
	for (int q = 0; q < c->nqps; q++) {
		const struct vl_path *p = &c->path[q];

		if (p->ctrl_used && p->state != VL_QP_UP && !p->settled)
			return;		/* its writes may still land */
	}
	for (int k = 0; k < VL_MAX_REQUESTS; k++) {
		const struct ib_recv_req *r = &c->rreqs[k];
		int ret;

		if (!r->in_use || r->failed || !r->announced)
			continue;
		ret = ctrl_write(c, &c->fifo->slot[k],
				 (uint32_t)(sizeof(c->fifo->slot[k].e[0]) *
					    (size_t)r->n), "FIFO");
		if (ret)
			return;		/* later, all again */
		n++;
	}
	c->fifo_resend = false;
	for (int l = 0; l < c->nlinks; l++)
		if (c->out[l].since_ns)
			c->out[l].fifo += n;
	if (c->eager_max)
		credit_flush(c);
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
	r->announced = !c->eager_max || sizes[0] > c->eager_max;
	if (r->announced) {
		ret = ctrl_write(c, f, (uint32_t)(sizeof(f->e[0]) * (size_t)n),
				 "FIFO");
		if (ret == -ENOMEM)
			return 0;	/* send queue full: NCCL retries */
		if (ret < 0)
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
	wr.wr_id = vl_wr(VL_WR_FLUSH, 0, 0, (unsigned int)k);
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
