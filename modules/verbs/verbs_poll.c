/* SPDX-License-Identifier: MIT */
/*
 * Completions of the verbs layer: every call on a comm first polls its
 * completion queues here.  A write with immediate marks a piece (or an
 * eager message) of a receive in and reposts its receive; a send's last
 * write counts its piece; errors fail the comm with the reason, unless the
 * peer closed in order (verbs_close.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "verbs.h"

/* ---- errors ---- */

/* Records the first failure; every later call on the comm returns it.
 * During close a failure only ends the wait, so it is no warning. */
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
	else
		MESH_WARN("%s", c->errmsg);
	return err;
}

static const char *dir_str(const struct vl_comm *c)
{
	return c->is_send ? "send" : "recv";
}

/* ---- completions ---- */

static int repost_recv(struct vl_comm *c, int qp)
{
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)qp }, *bad;
	int ret = ibv_post_recv(c->qps[qp], &wr, &bad);

	if (ret)
		return vl_comm_fail(c, -ret, "recv comm %u from %s: cannot post a receive on QP %d: %s",
				       c->id, c->peer, qp, strerror(ret));
	return 0;
}

static int wr_recv_repost(struct vl_comm *c, const struct ibv_wc *wc)
{
	if (wc->wr_id >= (uint64_t)c->nqps)
		return vl_comm_fail(c, -EPROTO, "recv comm %u from %s: completion of unknown receive %llu",
				       c->id, c->peer, (unsigned long long)wc->wr_id);
	return repost_recv(c, (int)wc->wr_id);
}

/* An eager message is in bounce slot b; its receive may not be posted
 * yet, so it waits there until that receive is tested. */
static int eager_arrived(struct vl_comm *c, const struct ibv_wc *wc,
			 uint32_t b)
{
	if (b >= VL_EAGER_SLOTS || c->eager_in[b])
		return vl_comm_fail(c, -EPROTO, "recv comm %u from %s: eager message for bounce slot %u, which is %s",
				       c->id, c->peer, b,
				       b >= VL_EAGER_SLOTS ? "out of range" : "still full");
	c->eager_in[b] = true;
	return wr_recv_repost(c, wc);
}

static int imm_arrived(struct vl_comm *c, const struct ibv_wc *wc)
{
	uint32_t imm = ntohl(wc->imm_data);
	unsigned int slot = imm >> IB_IMM_SLOT_SHIFT;
	unsigned int elem = (imm >> IB_IMM_ELEM_SHIFT) & 7;
	int pieces = (int)((imm >> IB_IMM_PIECES_SHIFT) & 15) + 1;
	struct ib_recv_req *r = &c->rreqs[slot];

	if (c->eager_max && elem == IB_IMM_ELEM_EAGER)
		return eager_arrived(c, wc, imm & IB_IMM_SIZE_MASK);
	if (!r->in_use || (int)elem >= r->n)
		return vl_comm_fail(c, -EPROTO, "recv comm %u from %s: data for receive %u buffer %u, which is not posted",
				       c->id, c->peer, slot, elem);
	r->pieces[elem] = pieces;
	r->pieces_done[elem]++;
	r->imm_size[elem] = imm & IB_IMM_SIZE_MASK;
	return wr_recv_repost(c, wc);
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
 */
static int wc_error(struct vl_comm *c, const struct ibv_wc *wc)
{
	if (c->is_send && wc->wr_id < IB_SEND_REQS)
		c->sreqs[wc->wr_id].failed = true;
	else if (wc->wr_id == VL_WR_PROBE)
		c->probe_out = false;
	else if (wc->wr_id == VL_WR_CLOSE)
		c->close_done = true;
	if (c->error || vl_peer_closed(c))
		return 0;
	return vl_comm_fail(c, wc->status == IBV_WC_RETRY_EXC_ERR ||
			       wc->status == IBV_WC_REM_ACCESS_ERR ?
			       -ECONNRESET : -EIO,
			       "%s comm %u %s %s on %s: work completion error: %s (status %d, vendor error 0x%x, QP %u)%s",
			       dir_str(c), c->id, c->is_send ? "to" : "from",
			       c->peer, c->dev->name,
			       ibv_wc_status_str(wc->status), wc->status,
			       wc->vendor_err, wc->qp_num, wc_hint(wc->status));
}

static int wc_handle(struct vl_comm *c, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS)
		return wc_error(c, wc);
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		return imm_arrived(c, wc);
	switch (wc->wr_id) {
	case VL_WR_FIFO:
		return 0;
	case VL_WR_PROBE:
		c->probe_out = false;
		return 0;
	case VL_WR_CLOSE:
		c->close_done = true;
		return 0;
	}
	if (wc->wr_id >= VL_WR_FLUSH_BASE) {
		uint64_t i = wc->wr_id - VL_WR_FLUSH_BASE;

		if (i < VL_MAX_REQUESTS)
			c->freqs[i].flush_done = true;
		return 0;
	}
	if (c->is_send && wc->wr_id < IB_SEND_REQS) {
		c->sreqs[wc->wr_id].pieces_done++;
		return 0;
	}
	return vl_comm_fail(c, -EPROTO, "%s comm %u with %s: unexpected completion (opcode %d, wr %llu)",
			       dir_str(c), c->id, c->peer, wc->opcode,
			       (unsigned long long)wc->wr_id);
}

/*
 * Takes every completion there is, also past a failure in the batch: a
 * request whose data came in before it is still done.  The comm's first
 * failure, or 0.
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
	return c->error;
}

/* Fills every receive queue: each piece that arrives consumes one. */
int vl_post_recvs(struct vl_comm *c)
{
	for (int q = 0; q < c->nqps; q++)
		for (int i = 0; i < c->rq_depth; i++) {
			int ret = repost_recv(c, q);

			if (ret)
				return ret;
		}
	return 0;
}
