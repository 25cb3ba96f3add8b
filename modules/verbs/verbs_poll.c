/* SPDX-License-Identifier: MIT */
/*
 * Completions of the verbs layer: every call on a comm first polls its
 * completion queues here.  A write with immediate marks a piece (or an
 * eager message) of a receive in and reposts its receive; a send's last
 * write counts its piece; errors fail the comm with the reason, unless the
 * peer closed in order (verbs_close.c) or they are the path's and an
 * outage budget lets the QP be rebuilt (verbs_path.c).  Every wr_id says
 * its QP slot and incarnation (verbs.h), so what a replaced QP still
 * reports is told apart.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "verbs.h"

/* ---- errors ---- */

/* Records the first failure; every later call on the comm returns it.
 * During close a failure only ends the wait, so it is no warning; nor is
 * a leg's, whose module above decides whether it is fatal and says so
 * (module.h 1.10). */
int vl_comm_fail(struct vl_comm *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (c->error)
		return c->error;
	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	c->error = err;
	if (c->closing)
		MESH_INFO("%s (while closing)", c->errmsg);
	else if (c->leg)
		MESH_INFO("%s", c->errmsg);
	else
		MESH_WARN("%s", c->errmsg);
	/* the peer learns at once, with the reason, rather than when its
	 * own writes fail */
	if (!c->peer_failed)
		vl_side_fail(c);
	return err;
}

static const char *dir_str(const struct vl_comm *c)
{
	return c->is_send ? "send" : "recv";
}

/* ---- completions ---- */

/* Receives go back to a slot whose QP may still be written to. */
static bool takes_writes(const struct vl_path *p)
{
	return p->state == VL_QP_UP || p->state == VL_QP_RTS ||
	       p->state == VL_QP_PROBE;
}

/* An eager message is in bounce slot b; its receive may not be posted
 * yet, so it waits there until that receive is tested. */
static int eager_arrived(struct vl_comm *c, uint32_t b)
{
	if (b >= VL_EAGER_SLOTS || c->eager_in[b])
		return vl_comm_fail(c, -EPROTO, "recv comm %u from %s: eager message for bounce slot %u, which is %s",
				       c->id, c->peer, b,
				       b >= VL_EAGER_SLOTS ? "out of range" : "still full");
	c->eager_in[b] = true;
	return 0;
}

static int imm_arrived(struct vl_comm *c, const struct ibv_wc *wc)
{
	uint32_t imm = ntohl(wc->imm_data);
	unsigned int slot = imm >> IB_IMM_SLOT_SHIFT;
	unsigned int elem = (imm >> IB_IMM_ELEM_SHIFT) & 7;
	int pieces = (int)((imm >> IB_IMM_PIECES_SHIFT) & 15) + 1;
	struct ib_recv_req *r = &c->rreqs[slot];

	if (c->eager_max && elem == IB_IMM_ELEM_EAGER)
		return eager_arrived(c, imm & IB_IMM_SIZE_MASK);
	if (!r->in_use || (int)elem >= r->n)
		return vl_comm_fail(c, -EPROTO, "recv comm %u from %s: data for receive %u buffer %u, which is not posted",
				       c->id, c->peer, slot, elem);
	r->pieces[elem] = pieces;
	r->pieces_done[elem]++;
	r->imm_size[elem] = imm & IB_IMM_SIZE_MASK;
	return 0;
}

/* What a completion error most likely means for the connection. */
static const char *wc_hint(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_RETRY_EXC_ERR:
		return ": the peer is gone or unreachable";
	case IBV_WC_REM_ACCESS_ERR:
		return ": the peer's buffer is not registered (any more): deregistered early, or the peer died";
	default:
		return "";
	}
}

/*
 * A completion error.  After the peer's close notice it is the end of the
 * connection (the peer's QPs are gone), not a failure: what it leaves
 * undone fails when tested.  Flushes behind a decided failure add nothing.
 * With an outage budget, an error of the path breaks only its QP slot,
 * which is rebuilt (verbs_path.c); any other fails the comm.
 */
static int wc_error(struct vl_comm *c, int q, const struct ibv_wc *wc)
{
	unsigned int kind = vl_wr_kind(wc->wr_id);

	if (kind == VL_WR_PROBE && c->probe_qp == q)
		c->probe_out = false;
	else if (kind == VL_WR_CLOSE)
		c->close_done = true;
	if (c->error || vl_peer_closed(c))
		return 0;
	if (c->outage_ms && vl_path_fault(wc->status)) {
		vl_path_break(c, q, wc->status);
		return 0;
	}
	if (kind == VL_WR_PIECE && c->is_send)
		c->sreqs[vl_wr_id(wc->wr_id) & 0xff].failed = true;
	return vl_comm_fail(c, wc->status == IBV_WC_RETRY_EXC_ERR ||
			       wc->status == IBV_WC_REM_ACCESS_ERR ?
			       -ECONNRESET : -EIO,
			       "%s comm %u %s %s on %s: work completion error: %s (status %d, vendor error 0x%x, QP %u)%s",
			       dir_str(c), c->id, c->is_send ? "to" : "from",
			       c->peer, c->links[vl_qp_link(c, q)]->name,
			       ibv_wc_status_str(wc->status), wc->status,
			       wc->vendor_err, wc->qp_num, wc_hint(wc->status));
}

/* A receive of slot q came back: data with its immediate, or flushed. */
static int wc_recv(struct vl_comm *c, int q, const struct ibv_wc *wc)
{
	struct vl_path *p = &c->path[q];
	int ret;

	p->rdone++;
	if (wc->status != IBV_WC_SUCCESS)
		return wc_error(c, q, wc);
	if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM)
		return vl_comm_fail(c, -EPROTO, "%s comm %u with %s: unexpected receive (opcode %d) on QP %d",
				    dir_str(c), c->id, c->peer, wc->opcode, q);
	p->imm_got++;
	ret = imm_arrived(c, wc);
	if (ret || !takes_writes(p))
		return ret;
	return vl_post_recv(c, q);
}

static int wc_handle(struct vl_comm *c, const struct ibv_wc *wc)
{
	unsigned int kind = vl_wr_kind(wc->wr_id);
	int q = vl_wr_qp(wc->wr_id);
	struct vl_path *p;

	if (kind == VL_WR_FLUSH) {
		unsigned int i = vl_wr_id(wc->wr_id);

		if (wc->status != IBV_WC_SUCCESS && !c->error)
			return vl_comm_fail(c, -EIO, "recv comm %u from %s: the flush read failed: %s (status %d)",
					    c->id, c->peer,
					    ibv_wc_status_str(wc->status),
					    wc->status);
		if (i < VL_MAX_REQUESTS)
			c->freqs[i].flush_done = true;
		return 0;
	}
	if (kind < VL_WR_PIECE || kind > VL_WR_RECV || q >= c->nqps)
		return vl_comm_fail(c, -EPROTO, "%s comm %u with %s: unexpected completion (opcode %d, wr %llu)",
				    dir_str(c), c->id, c->peer, wc->opcode,
				    (unsigned long long)wc->wr_id);
	p = &c->path[q];
	/* a QP since replaced: its flushes are of no more interest */
	if (vl_wr_epoch(wc->wr_id) != (p->epoch & 0xffff))
		return 0;
	if (kind == VL_WR_RECV)
		return wc_recv(c, q, wc);
	if (kind != VL_WR_PLAIN)
		p->sig_done++;
	if (wc->status != IBV_WC_SUCCESS)
		return wc_error(c, q, wc);
	switch (kind) {
	case VL_WR_PIECE:
		vl_piece_done(c, q, p->epoch, vl_wr_id(wc->wr_id));
		return 0;
	case VL_WR_PROBE:
		vl_path_probed(c, q);
		return 0;
	case VL_WR_CLOSE:
		c->close_done = true;
		return 0;
	default:
		return 0;
	}
}

/*
 * Takes every completion there is, also past a failure in the batch: a
 * request whose data came in before it is still done.  Then pieces that
 * wait for a QP, and the repair's clockwork.  The comm's first failure,
 * or 0.
 */
int vl_comm_poll(struct vl_comm *c)
{
	struct ibv_wc wc[16];
	bool any = false;
	int n;

	if (c->error)
		return c->error;
	for (int l = 0; l < c->nlinks; l++) {
		do {
			n = ibv_poll_cq(c->cqs[l], 16, wc);
			if (n < 0)
				return vl_comm_fail(c, -EIO, "%s comm %u with %s: polling the completion queue of %s failed",
						       dir_str(c), c->id, c->peer,
						       c->links[l]->name);
			for (int i = 0; i < n; i++)
				wc_handle(c, &wc[i]);
			any |= n > 0;
		} while (n == 16);
	}
	if (any)
		c->busy = true;
	else
		vl_idle(c);
	if (c->queued > 0 && c->nup && !c->error)
		vl_post_queued(c);
	if (c->repairing || ++c->polls % VL_TICK_POLLS == 0)
		vl_tick(c);
	return c->error;
}

/* Fills every receive queue: each piece that arrives consumes one. */
int vl_post_recvs(struct vl_comm *c)
{
	for (int q = 0; q < c->nqps; q++)
		for (int i = 0; i < c->rq_depth; i++) {
			int ret = vl_post_recv(c, q);

			if (ret)
				return ret;
		}
	return 0;
}
