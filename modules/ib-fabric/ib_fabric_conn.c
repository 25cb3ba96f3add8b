/* SPDX-License-Identifier: MIT */
/*
 * ib-fabric connection setup over the core's control channel:
 *
 *   connector                          acceptor
 *   QPs to INIT, info  ------------->  QPs to INIT, RTR, RTS, receives posted
 *                      <-------------  info (or a refusal with the reason)
 *   QPs to RTR, RTS    ------------->  "ready": only now may the acceptor
 *                                      write into the connector's FIFO
 *
 * Every step is non-blocking; progress lives in ctrl->module_state.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ib_fabric.h"

#define IB_MAGIC 0x49424654u	/* "IBFT" */
#define IB_PROTO_VERSION 1

/* Both directions; integers big-endian. */
struct ib_wire_info {
	uint32_t magic;
	uint16_t version;
	uint16_t status;	/* 0, or a positive errno refusing */
	uint16_t nqps;
	uint16_t lid;
	uint8_t gid[16];
	uint32_t gid_index;
	uint8_t roce_version;
	uint8_t ethernet;
	uint8_t mtu;		/* enum ibv_mtu */
	uint8_t port;
	uint64_t addr;		/* connector: FIFO; acceptor: sizes */
	uint32_t rkey;
	uint32_t qpn[IB_FABRIC_MAX_QPS];
	uint32_t psn[IB_FABRIC_MAX_QPS];
	char reason[128];
};

struct ib_wire_ready {
	uint32_t magic;
	uint32_t status;
};

enum ib_phase {
	IB_CREATE,
	IB_SEND_INFO,
	IB_WAIT_INFO,
	IB_SEND_READY,
	IB_SEND_REPLY,
	IB_WAIT_READY,
};

struct ib_pending {
	enum ib_phase phase;
	struct ib_fabric_comm *comm;
	struct ib_wire_info info;	/* ours, until queued */
};

/* ---- comm resources ---- */

void ib_fabric_comm_free(struct ib_fabric_comm *comm)
{
	if (!comm)
		return;
	for (int i = 0; i < comm->nqps; i++)
		if (comm->qps[i])
			ibv_destroy_qp(comm->qps[i]);
	if (comm->flush_qp)
		ibv_destroy_qp(comm->flush_qp);
	if (comm->cq)
		ibv_destroy_cq(comm->cq);
	if (comm->fifo_mr)
		ibv_dereg_mr(comm->fifo_mr);
	if (comm->sizes_mr)
		ibv_dereg_mr(comm->sizes_mr);
	if (comm->flush_mr)
		ibv_dereg_mr(comm->flush_mr);
	free(comm->fifo);
	free(comm->sizes);
	free(comm);
}

static void pending_free(struct mesh_ctrl *ctrl)
{
	struct ib_pending *p = ctrl->module_state;

	if (!p)
		return;
	ib_fabric_comm_free(p->comm);
	free(p);
	ctrl->module_state = NULL;
}

void ib_fabric_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	(void)mctx;
	pending_free(ctrl);
}

static struct ibv_qp *qp_create(struct ib_fabric_comm *c, int sq, int rq)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.qp_type = IBV_QPT_RC,
		.cap = {
			.max_send_wr = (uint32_t)sq,
			.max_recv_wr = (uint32_t)rq,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = (uint8_t)c->dev->port,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
	};
	struct ibv_qp *qp;

	/* Small writes go inline when the device allows: no DMA read of the
	 * source, which is most of a tiny write's cost. */
	qa.cap.max_inline_data = IB_FABRIC_INLINE;
	qp = ibv_create_qp(c->dev->pd, &qa);
	if (!qp) {
		qa.cap.max_inline_data = 0;
		qp = ibv_create_qp(c->dev->pd, &qa);
	}
	if (!qp) {
		MESH_WARN("peer %s: %s: cannot create a queue pair: %s",
			  c->peer, c->dev->name, strerror(errno));
		return NULL;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		MESH_WARN("peer %s: %s: queue pair to INIT: %s", c->peer,
			  c->dev->name, strerror(errno));
		ibv_destroy_qp(qp);
		return NULL;
	}
	if (qa.cap.max_inline_data < c->max_inline)
		c->max_inline = qa.cap.max_inline_data;
	return qp;
}

static void *buf_reg(struct ib_fabric_comm *c, size_t size, int access,
		     struct ibv_mr **mr)
{
	void *buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);

	if (!buf)
		return NULL;
	memset(buf, 0, size);
	*mr = ibv_reg_mr(c->dev->pd, buf, size, access);
	if (!*mr) {
		MESH_WARN("peer %s: %s: cannot register %zu bytes: %s",
			  c->peer, c->dev->name, size, strerror(errno));
		free(buf);
		return NULL;
	}
	return buf;
}

static int clamp(int v, int max)
{
	return max > 0 && v > max ? max : v;
}

/* QPs (in INIT), CQ and the FIFO / sizes buffers of a new connection. */
static struct ib_fabric_comm *comm_create(struct ib_fabric_ctx *ctx, int dev,
					  bool is_send, int nqps,
					  const char *peer)
{
	struct ib_fabric_comm *c = calloc(1, sizeof(*c));
	struct ib_fabric_dev *d = &ctx->devs[dev];
	int ncqe;

	if (!c)
		return NULL;
	c->ctx = ctx;
	c->dev = d;
	c->is_send = is_send;
	c->id = __atomic_fetch_add(&ctx->next_comm_id, 1, __ATOMIC_RELAXED);
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->nqps = nqps;
	c->max_msg = d->pattr.max_msg_sz ? d->pattr.max_msg_sz : 1U << 30;
	c->max_inline = IB_FABRIC_INLINE;	/* lowered by qp_create */
	/* Per QP at most every outstanding piece: data writes (more than
	 * one when a piece exceeds max_msg), a size write, the last write. */
	c->sq_depth = clamp(is_send ? IB_SEND_REQS *
			    (int)(2 + IB_FABRIC_MAX_MESSAGE / c->max_msg + 1) :
			    2 * IB_FABRIC_MAX_REQUESTS + 2, d->max_qp_wr);
	c->rq_depth = clamp(is_send ? 1 : IB_SEND_REQS, d->max_qp_wr);
	ncqe = clamp(nqps * IB_SEND_REQS + 2 * IB_FABRIC_MAX_REQUESTS + 4,
		     d->max_cqe);
	ib_fabric_comm_init_reqs(c);
	c->cq = ibv_create_cq(d->ctx, ncqe, NULL, NULL, 0);
	if (!c->cq) {
		MESH_WARN("peer %s: %s: cannot create a completion queue of %d: %s",
			  peer, d->name, ncqe, strerror(errno));
		goto err;
	}
	for (int i = 0; i < nqps; i++) {
		c->qps[i] = qp_create(c, c->sq_depth, c->rq_depth);
		if (!c->qps[i])
			goto err;
		if (getrandom(&c->psn[i], sizeof(c->psn[i]), 0) < 0)
			c->psn[i] = (uint32_t)i * 7919;
		c->psn[i] &= 0xffffff;
	}
	c->fifo = buf_reg(c, sizeof(struct ib_fifo_slot) *
			  IB_FABRIC_MAX_REQUESTS, IBV_ACCESS_LOCAL_WRITE |
			  (is_send ? IBV_ACCESS_REMOTE_WRITE : 0), &c->fifo_mr);
	c->sizes = buf_reg(c, sizeof(struct ib_sizes), IBV_ACCESS_LOCAL_WRITE |
			   (is_send ? 0 : IBV_ACCESS_REMOTE_WRITE),
			   &c->sizes_mr);
	if (!c->fifo || !c->sizes)
		goto err;
	return c;
err:
	ib_fabric_comm_free(c);
	return NULL;
}

/* ---- QP state transitions ---- */

static int qp_rtr_rts(struct ib_fabric_comm *c, int i,
		      const struct ib_wire_info *peer, enum ibv_mtu mtu)
{
	struct ib_fabric_ctx *ctx = c->ctx;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = ntohl(peer->qpn[i]),
		.rq_psn = ntohl(peer->psn[i]),
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {
			.dlid = ntohs(peer->lid),
			.sl = (uint8_t)ctx->sl,
			.port_num = (uint8_t)c->dev->port,
		},
	};

	if (peer->ethernet) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)c->dev->gid.index;
		a.ah_attr.grh.hop_limit = 255;
		a.ah_attr.grh.traffic_class = (uint8_t)ctx->traffic_class;
	}
	if (ibv_modify_qp(c->qps[i], &a, IBV_QP_STATE | IBV_QP_AV |
			  IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		int e = errno;

		MESH_WARN("peer %s: %s: queue pair %d to RTR (remote QPN %u): %s",
			  c->peer, c->dev->name, i, a.dest_qp_num, strerror(e));
		return e ? -e : -EIO;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)ctx->timeout;
	a.retry_cnt = (uint8_t)ctx->retry_cnt;
	a.rnr_retry = 7;
	a.sq_psn = c->psn[i];
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(c->qps[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC)) {
		int e = errno;

		MESH_WARN("peer %s: %s: queue pair %d to RTS: %s", c->peer,
			  c->dev->name, i, strerror(e));
		return e ? -e : -EIO;
	}
	return 0;
}

/*
 * A loopback QP for GPU flushes: an RDMA READ through the HCA makes the
 * data it wrote into GPU memory visible, as NCCL does.  Only when the
 * device registers GPU memory.
 */
static int flush_setup(struct ib_fabric_comm *c)
{
	struct ib_wire_info self = { 0 };
	struct ibv_qp *data0 = c->qps[0];
	uint32_t psn0 = c->psn[0];
	int ret;

	if (!c->dev->gpu)
		return 0;
	c->flush_mr = ibv_reg_mr(c->dev->pd, &c->flush_buf,
				 sizeof(c->flush_buf), IBV_ACCESS_LOCAL_WRITE);
	c->flush_qp = c->flush_mr ? qp_create(c, 4, 1) : NULL;
	if (!c->flush_qp)
		return -ENOMEM;
	self.ethernet = c->dev->pinfo.ethernet;
	self.lid = htons(c->dev->pattr.lid);
	memcpy(self.gid, c->dev->gid.raw, 16);
	self.qpn[0] = htonl(c->flush_qp->qp_num);
	self.psn[0] = htonl(psn0);
	/* Reuse the transition code with the flush QP in slot 0. */
	c->qps[0] = c->flush_qp;
	ret = qp_rtr_rts(c, 0, &self, c->dev->pattr.active_mtu);
	c->qps[0] = data0;
	return ret;
}

/* ---- wire info ---- */

static void info_fill(const struct ib_fabric_comm *c, struct ib_wire_info *w)
{
	const struct ib_fabric_dev *d = c->dev;
	const struct ibv_mr *mr = c->is_send ? c->fifo_mr : c->sizes_mr;

	memset(w, 0, sizeof(*w));
	w->magic = htonl(IB_MAGIC);
	w->version = htons(IB_PROTO_VERSION);
	w->nqps = htons((uint16_t)c->nqps);
	w->lid = htons(d->pattr.lid);
	memcpy(w->gid, d->gid.raw, 16);
	w->gid_index = htonl((uint32_t)d->gid.index);
	w->roce_version = (uint8_t)d->gid.roce_version;
	w->ethernet = d->pinfo.ethernet;
	w->mtu = (uint8_t)d->pattr.active_mtu;
	w->port = (uint8_t)d->port;
	w->addr = htobe64((uint64_t)(uintptr_t)mr->addr);
	w->rkey = htonl(mr->rkey);
	for (int i = 0; i < c->nqps; i++) {
		w->qpn[i] = htonl(c->qps[i]->qp_num);
		w->psn[i] = htonl(c->psn[i]);
	}
}

/* Positive errno and the reason when the peer's info does not fit ours. */
static int info_check(const struct ib_fabric_dev *d,
		      const struct ib_wire_info *w, int len, int nqps,
		      char *why, size_t cap)
{
	if (len != (int)sizeof(*w) || ntohl(w->magic) != IB_MAGIC) {
		snprintf(why, cap, "malformed ib-fabric info (%d bytes)", len);
		return EPROTO;
	}
	if (ntohs(w->version) != IB_PROTO_VERSION) {
		snprintf(why, cap, "ib-fabric protocol %u, this side speaks %u",
			 ntohs(w->version), IB_PROTO_VERSION);
		return EPROTONOSUPPORT;
	}
	if (w->status)
		return 0;
	if (nqps && ntohs(w->nqps) != nqps) {
		snprintf(why, cap, "%u queue pairs, this side has %d",
			 ntohs(w->nqps), nqps);
		return EPROTO;
	}
	if (ntohs(w->nqps) < 1 || ntohs(w->nqps) > IB_FABRIC_MAX_QPS) {
		snprintf(why, cap, "%u queue pairs, expected 1..%d",
			 ntohs(w->nqps), IB_FABRIC_MAX_QPS);
		return EPROTO;
	}
	if (!w->ethernet != !d->pinfo.ethernet) {
		snprintf(why, cap, "link layers differ: %s here, %s there",
			 d->pinfo.ethernet ? "RoCE" : "InfiniBand",
			 w->ethernet ? "RoCE" : "InfiniBand");
		return EPROTO;
	}
	if (d->pinfo.ethernet && w->roce_version && d->gid.roce_version &&
	    w->roce_version != d->gid.roce_version) {
		snprintf(why, cap,
			 "GID types differ: RoCE v%d (index %d) here, RoCE v%u (index %u) there; set gid_index or roce_version alike on both",
			 d->gid.roce_version, d->gid.index, w->roce_version,
			 ntohl(w->gid_index));
		return EPROTO;
	}
	return 0;
}

static enum ibv_mtu mtu_min(const struct ib_fabric_dev *d,
			    const struct ib_wire_info *w)
{
	enum ibv_mtu m = d->pattr.active_mtu;

	return w->mtu && w->mtu < m ? (enum ibv_mtu)w->mtu : m;
}

static int qps_up(struct ib_fabric_comm *c, const struct ib_wire_info *w)
{
	enum ibv_mtu mtu = mtu_min(c->dev, w);
	int ret;

	c->rem_addr = be64toh(w->addr);
	c->rem_rkey = ntohl(w->rkey);
	for (int i = 0; i < c->nqps; i++) {
		ret = qp_rtr_rts(c, i, w, mtu);
		if (ret)
			return ret;
	}
	return 0;
}

static void conn_log(const struct ib_fabric_comm *c,
		     const struct ib_wire_info *w)
{
	char g[INET6_ADDRSTRLEN] = "?";

	inet_ntop(AF_INET6, w->gid, g, sizeof(g));
	MESH_INFO("%s comm %u %s peer %s: %s GID %d -> %s (index %u), %d QPs, MTU %d",
		  c->is_send ? "send" : "recv", c->id,
		  c->is_send ? "to" : "from", c->peer, c->dev->name,
		  c->dev->gid.index, g, ntohl(w->gid_index), c->nqps,
		  128 << mtu_min(c->dev, w));
}

static struct ib_pending *pending_get(struct mesh_ctrl *ctrl,
				      enum ib_phase first)
{
	struct ib_pending *p = ctrl->module_state;

	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p) {
		MESH_WARN("out of memory");
		return NULL;
	}
	p->phase = first;
	ctrl->module_state = p;
	return p;
}

/* 0 once handed to the channel, 1 to come back later, -errno. */
static int ctrl_send(struct mesh_ctrl *ctrl, const void *m, size_t len,
		     const char *what)
{
	int ret = ctrl->send(ctrl, m, len);

	if (ret == -EAGAIN)
		return 1;
	if (ret < 0)
		MESH_WARN("peer %s: cannot send the ib-fabric %s: %s",
			  ctrl->peer, what, strerror(-ret));
	return ret;
}

/* Length, 0 when nothing arrived yet (never a valid message), -errno. */
static int ctrl_recv(struct mesh_ctrl *ctrl, void *m, size_t cap,
		     const char *what)
{
	int ret = ctrl->recv(ctrl, m, cap);

	if (ret == -EAGAIN)
		return 0;
	if (ret < 0)
		MESH_WARN("peer %s: no ib-fabric %s: %s", ctrl->peer, what,
			  strerror(-ret));
	else if (ret == 0)
		ret = -EPROTO;
	return ret;
}

static int connect_reply(struct mesh_ctrl *ctrl, struct ib_pending *p)
{
	struct ib_wire_info w;
	char why[160] = "";
	int ret, st;

	ret = ctrl_recv(ctrl, &w, sizeof(w), "reply");
	if (ret <= 0)
		return ret ? ret : 1;
	st = info_check(p->comm->dev, &w, ret, p->comm->nqps, why,
			sizeof(why));
	if (!st && w.status) {
		w.reason[sizeof(w.reason) - 1] = '\0';
		MESH_WARN("peer %s refused the ib-fabric connection: %s",
			  ctrl->peer, w.reason[0] ? w.reason :
			  strerror(ntohs(w.status)));
		return -ECONNREFUSED;
	}
	if (st) {
		MESH_WARN("peer %s: %s", ctrl->peer, why);
		return -st;
	}
	ret = qps_up(p->comm, &w);
	if (ret)
		return ret;
	conn_log(p->comm, &w);
	return 0;
}

/* Where both setup state machines end a call: positive means "come back
 * later" and keeps the state; done (0) or failed frees it. */
static int step_end(struct mesh_ctrl *ctrl, int ret)
{
	if (ret > 0)
		return 0;
	pending_free(ctrl);
	return ret;
}

int ib_fabric_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
		      void **send_comm)
{
	struct ib_fabric_ctx *ctx = mctx;
	struct ib_wire_ready rd = { htonl(IB_MAGIC), 0 };
	struct ib_pending *p;
	int ret;

	*send_comm = NULL;
	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	p = pending_get(ctrl, IB_CREATE);
	if (!p)
		return -ENOMEM;
	switch (p->phase) {
	case IB_CREATE:
		p->comm = comm_create(ctx, dev, true, ctx->nqps, ctrl->peer);
		if (!p->comm) {
			ret = -ENOMEM;
			break;
		}
		info_fill(p->comm, &p->info);
		p->phase = IB_SEND_INFO;
		/* fall through */
	case IB_SEND_INFO:
		ret = ctrl_send(ctrl, &p->info, sizeof(p->info), "info");
		if (ret)
			break;
		p->phase = IB_WAIT_INFO;
		/* fall through */
	case IB_WAIT_INFO:
		ret = connect_reply(ctrl, p);
		if (ret)
			break;
		p->phase = IB_SEND_READY;
		/* fall through */
	case IB_SEND_READY:
		ret = ctrl_send(ctrl, &rd, sizeof(rd), "ready");
		if (ret)
			break;
		*send_comm = p->comm;
		p->comm = NULL;
		ret = 0;
		break;
	default:
		ret = -EINVAL;
		break;
	}
	return step_end(ctrl, ret);
}

/* Builds the acceptor's side from the connector's info, or a refusal. */
static int accept_info(struct ib_fabric_ctx *ctx, int dev,
		       struct mesh_ctrl *ctrl, struct ib_pending *p,
		       const struct ib_wire_info *w, int len)
{
	struct ib_fabric_dev *d = &ctx->devs[dev];
	char why[160] = "";
	int st, ret;

	st = info_check(d, w, len, 0, why, sizeof(why));
	if (!st && w->status)
		st = EPROTO;
	if (st) {
		MESH_WARN("peer %s: refusing the ib-fabric connection: %s",
			  ctrl->peer, why);
		memset(&p->info, 0, sizeof(p->info));
		p->info.magic = htonl(IB_MAGIC);
		p->info.version = htons(IB_PROTO_VERSION);
		p->info.status = htons((uint16_t)st);
		snprintf(p->info.reason, sizeof(p->info.reason), "%s", why);
		return 0;
	}
	p->comm = comm_create(ctx, dev, false, ntohs(w->nqps), ctrl->peer);
	if (!p->comm)
		return -ENOMEM;
	ret = qps_up(p->comm, w);
	if (!ret)
		ret = ib_fabric_post_recvs(p->comm);
	if (!ret)
		ret = flush_setup(p->comm);
	if (ret)
		return ret;
	info_fill(p->comm, &p->info);
	conn_log(p->comm, w);
	return 0;
}

static int accept_ready(struct mesh_ctrl *ctrl)
{
	struct ib_wire_ready rd;
	int ret = ctrl_recv(ctrl, &rd, sizeof(rd), "ready");

	if (ret <= 0)
		return ret ? ret : 1;
	if (ret != (int)sizeof(rd) || ntohl(rd.magic) != IB_MAGIC) {
		MESH_WARN("peer %s: malformed ib-fabric ready (%d bytes)",
			  ctrl->peer, ret);
		return -EPROTO;
	}
	return 0;
}

int ib_fabric_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
		     void **recv_comm)
{
	struct ib_fabric_ctx *ctx = mctx;
	struct ib_wire_info w;
	struct ib_pending *p;
	int ret;

	*recv_comm = NULL;
	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	p = pending_get(ctrl, IB_WAIT_INFO);
	if (!p)
		return -ENOMEM;
	switch (p->phase) {
	case IB_WAIT_INFO:
		ret = ctrl_recv(ctrl, &w, sizeof(w), "info");
		if (ret <= 0) {
			ret = ret ? ret : 1;
			break;
		}
		ret = accept_info(ctx, dev, ctrl, p, &w, ret);
		if (ret)
			break;
		p->phase = IB_SEND_REPLY;
		/* fall through */
	case IB_SEND_REPLY:
		ret = ctrl_send(ctrl, &p->info, sizeof(p->info), "reply");
		if (ret)
			break;
		if (p->info.status) {
			ret = -(int)ntohs(p->info.status);
			break;
		}
		p->phase = IB_WAIT_READY;
		/* fall through */
	case IB_WAIT_READY:
		ret = accept_ready(ctrl);
		if (ret)
			break;
		*recv_comm = p->comm;
		p->comm = NULL;
		ret = 0;
		break;
	default:
		ret = -EINVAL;
		break;
	}
	return step_end(ctrl, ret);
}
