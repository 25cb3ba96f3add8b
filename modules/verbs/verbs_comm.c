/* SPDX-License-Identifier: MIT */
/*
 * A connection's verbs resources: its QPs (created in INIT), completion
 * queues and the registered FIFO and sizes buffers, sized from what every
 * link's device allows; and their release.  verbs_conn.c brings the QPs
 * up once the peer's info is in; verbs_path.c makes fresh ones in place of
 * QPs that failed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "verbs.h"

void vl_comm_free(struct vl_comm *comm)
{
	if (!comm)
		return;
	vl_side_close(comm);
	for (int i = 0; i < comm->nqps; i++)
		if (comm->qps[i])
			ibv_destroy_qp(comm->qps[i]);
	if (comm->flush_qp)
		ibv_destroy_qp(comm->flush_qp);
	for (int l = 0; l < comm->nlinks; l++) {
		if (comm->cqs[l])
			ibv_destroy_cq(comm->cqs[l]);
		if (comm->fifo_mr[l])
			ibv_dereg_mr(comm->fifo_mr[l]);
		if (comm->sizes_mr[l])
			ibv_dereg_mr(comm->sizes_mr[l]);
	}
	if (comm->flush_mr)
		ibv_dereg_mr(comm->flush_mr);
	free(comm->fifo);
	free(comm->sizes);
	free(comm);
}

struct ibv_qp *vl_qp_create(struct vl_comm *c, int link, int sq, int rq)
{
	struct vl_dev *d = c->links[link];
	struct ibv_qp_init_attr qa = {
		.send_cq = c->cqs[link],
		.recv_cq = c->cqs[link],
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = (uint32_t)sq,
			.max_recv_wr = (uint32_t)rq,
			.max_send_sge = 2,	/* eager: header, data */
			.max_recv_sge = 1,
		},
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = (uint8_t)d->port,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
	};
	struct ibv_qp *qp;

	/* Small writes go inline when the device allows: no DMA read of the
	 * source, which is most of a tiny write's cost. */
	qa.cap.max_inline_data = VL_INLINE;
	qp = ibv_create_qp(d->pd, &qa);
	if (!qp) {
		qa.cap.max_inline_data = 0;
		qp = ibv_create_qp(d->pd, &qa);
	}
	if (!qp) {
		MESH_WARN("peer %s: %s: cannot create a queue pair: %s",
			  c->peer, d->name, strerror(errno));
		return NULL;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		MESH_WARN("peer %s: %s: queue pair to INIT: %s", c->peer,
			  d->name, strerror(errno));
		ibv_destroy_qp(qp);
		return NULL;
	}
	if (qa.cap.max_inline_data < c->max_inline)
		c->max_inline = qa.cap.max_inline_data;
	return qp;
}

/* A buffer registered on every link's device (keys per link). */
static void *buf_reg(struct vl_comm *c, size_t size, int access,
		     struct ibv_mr **mr)
{
	void *buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);

	if (!buf)
		return NULL;
	memset(buf, 0, size);
	for (int l = 0; l < c->nlinks; l++) {
		mr[l] = ibv_reg_mr(c->links[l]->pd, buf, size, access);
		if (!mr[l]) {
			MESH_WARN("peer %s: %s: cannot register %zu bytes: %s",
				  c->peer, c->links[l]->name, size,
				  strerror(errno));
			return buf;	/* freed with the comm */
		}
	}
	return buf;
}

static int clamp(int v, int max)
{
	return max > 0 && v > max ? max : v;
}

struct vl_comm *vl_comm_create(struct vl_ctx *ctx,
				     struct vl_dev *const *links,
				     int nlinks, bool is_send, int nqps,
				     uint32_t eager_max,
				     const struct mesh_ctrl *ctrl)
{
	size_t sizes_len = sizeof(struct ib_sizes);
	struct vl_comm *c = calloc(1, sizeof(*c));
	int ncqe, max_qp_wr = 0, max_cqe = 0;

	if (!c)
		return NULL;
	c->ctx = ctx;
	c->dev = links[0];
	c->nlinks = nlinks;
	c->max_msg = 1U << 30;
	for (int l = 0; l < nlinks; l++) {
		const struct vl_dev *d = links[l];

		c->links[l] = links[l];
		if (d->pattr.max_msg_sz && d->pattr.max_msg_sz < c->max_msg)
			c->max_msg = d->pattr.max_msg_sz;
		if (!l || d->max_qp_wr < max_qp_wr)
			max_qp_wr = d->max_qp_wr;
		if (!l || d->max_cqe < max_cqe)
			max_cqe = d->max_cqe;
	}
	c->is_send = is_send;
	c->id = __atomic_fetch_add(&ctx->next_comm_id, 1, __ATOMIC_RELAXED);
	snprintf(c->peer, sizeof(c->peer), "%s", ctrl->peer);
	c->leg = ctrl->leg != 0;
	c->nqps = nqps;
	c->side_fd = -1;
	vl_paths_init(c);
	c->max_inline = VL_INLINE;	/* lowered by vl_qp_create */
	/* Per QP at most every outstanding piece: data writes (more than
	 * one when a piece exceeds max_msg), a size write, the last write. */
	c->sq_depth = clamp(is_send ? IB_SEND_REQS *
			    (int)(2 + VL_MAX_MESSAGE / c->max_msg + 1) :
			    2 * VL_MAX_REQUESTS + 4, max_qp_wr);
	c->rq_depth = clamp(is_send ? 1 : IB_SEND_REQS, max_qp_wr);
	/* A QP that fails flushes every work request it holds, signaled or
	 * not, each with a completion: a queue sized for less overflows
	 * then, and a lost completion leaves the repair waiting for it
	 * (verbs_path.c).  The rest: the flush QP and probes. */
	ncqe = clamp(nqps * (c->sq_depth + c->rq_depth) +
		     2 * VL_MAX_REQUESTS + 4, max_cqe);
	vl_comm_init_reqs(c);
	for (int l = 0; l < nlinks; l++) {
		c->cqs[l] = ibv_create_cq(links[l]->ctx, ncqe, NULL, NULL, 0);
		if (!c->cqs[l]) {
			MESH_WARN("peer %s: %s: cannot create a completion queue of %d: %s",
				  c->peer, links[l]->name, ncqe,
				  strerror(errno));
			goto err;
		}
	}
	for (int i = 0; i < nqps; i++) {
		c->qps[i] = vl_qp_create(c, vl_qp_link(c, i), c->sq_depth,
				      c->rq_depth);
		if (!c->qps[i])
			goto err;
		if (getrandom(&c->psn[i], sizeof(c->psn[i]), 0) < 0)
			c->psn[i] = (uint32_t)i * 7919;
		c->psn[i] &= 0xffffff;
	}
	c->fifo = buf_reg(c, sizeof(struct ib_fifo), IBV_ACCESS_LOCAL_WRITE |
			  (is_send ? IBV_ACCESS_REMOTE_WRITE : 0), c->fifo_mr);
	/* credits must go inline: a later credit must not be read as an
	 * earlier write's source before the FIFO entries between them land */
	if (c->max_inline < sizeof(struct ib_credit))
		eager_max = 0;
	if (eager_max)
		sizes_len += VL_EAGER_SLOTS * sizeof(struct ib_eager_slot);
	c->sizes = buf_reg(c, sizes_len, IBV_ACCESS_LOCAL_WRITE |
			   (is_send ? 0 : IBV_ACCESS_REMOTE_WRITE),
			   c->sizes_mr);
	if (!c->fifo || !c->sizes || !c->fifo_mr[nlinks - 1] ||
	    !c->sizes_mr[nlinks - 1])
		goto err;
	if (eager_max) {
		c->eager_max = eager_max;
		c->bounce = (struct ib_eager_slot *)(c->sizes + 1);
	}
	return c;
err:
	vl_comm_free(c);
	return NULL;
}
