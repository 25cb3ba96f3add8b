/* SPDX-License-Identifier: MIT */
/*
 * Connection setup over the core's control channel, for every module on
 * the verbs layer:
 *
 *   connector                          acceptor
 *   QPs to INIT, info  ------------->  QPs to INIT, RTR, RTS, receives posted
 *                      <-------------  info (or a refusal with the reason)
 *   QPs to RTR, RTS    ------------->  "ready": only now may the acceptor
 *                                      write into the connector's FIFO
 *   stream 0           ============>   the side channel (verbs_side.c)
 *
 * Every step is non-blocking; progress lives in ctrl->module_state.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

#define IB_MAGIC 0x49424654u	/* "IBFT" */
/* 3: close notices, 4: check words, 5: records and the side channel */
#define IB_PROTO_VERSION 5

/* One link's end; integers big-endian. */
struct ib_wire_link {
	uint8_t gid[16];
	uint32_t gid_index;
	uint32_t rkey;		/* connector: FIFO; acceptor: sizes */
	uint16_t lid;
	uint8_t roce_version;
	uint8_t ethernet;
	uint8_t mtu;		/* enum ibv_mtu */
	uint8_t port;
	uint8_t target_family;	/* connector: which acceptor address */
	uint8_t pad;
	uint8_t target[16];
};

/* Both directions; integers big-endian. */
struct ib_wire_info {
	uint32_t magic;
	uint16_t version;
	uint16_t status;	/* 0, or a positive errno refusing */
	uint16_t nqps;
	uint16_t nlinks;
	/* connector: the largest eager message it can send; acceptor: the
	 * largest it takes (0: no eager path) */
	uint32_t eager_max;
	uint64_t addr;		/* connector: FIFO; acceptor: sizes */
	struct ib_wire_link link[VL_MAX_LINKS];
	uint32_t qpn[VL_MAX_QPS];
	uint32_t psn[VL_MAX_QPS];
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
	IB_STREAM,
};

struct ib_pending {
	enum ib_phase phase;
	struct vl_comm *comm;
	struct ib_wire_info info;	/* ours, until queued */
	struct mesh_addr target[VL_MAX_LINKS];	/* connector's plan */
};

static void pending_free(struct mesh_ctrl *ctrl)
{
	struct ib_pending *p = ctrl->module_state;

	if (!p)
		return;
	vl_comm_free(p->comm);
	free(p);
	ctrl->module_state = NULL;
}

void vl_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	(void)mctx;
	pending_free(ctrl);
}

/*
 * The largest eager message a receive comm over these links takes from a
 * sender that can send up to peer_max: none where receives may be grouped
 * or land in GPU memory, which the receiver could not copy into.
 */
static uint32_t eager_accept_max(const struct vl_ctx *ctx,
				 struct vl_dev *const *links, int nlinks,
				 uint32_t peer_max)
{
	uint32_t max = (uint32_t)ctx->eager_max;

	if (ctx->max_recvs != 1)
		return 0;
	for (int l = 0; l < nlinks; l++)
		if (links[l]->gpu)
			return 0;
	return peer_max < max ? peer_max : max;
}

/* ---- QP state transitions ---- */

/* quiet: a repair's fresh QP, whose failure is only one more round
 * (verbs_path.c), logged as a trace. */
static int qp_rtr_rts(struct vl_comm *c, int i, struct ibv_qp *qp,
		      const struct vl_peer_link *peer, uint32_t qpn,
		      uint32_t psn, bool quiet)
{
	struct vl_ctx *ctx = c->ctx;
	struct vl_dev *d = c->links[vl_qp_link(c, i)];
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = peer->mtu,
		.dest_qp_num = qpn,
		.rq_psn = psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = {
			.dlid = peer->lid,
			.sl = (uint8_t)ctx->sl,
			.port_num = (uint8_t)d->port,
		},
	};

	if (peer->ethernet) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid.index;
		a.ah_attr.grh.hop_limit = 255;
		a.ah_attr.grh.traffic_class = (uint8_t)c->traffic_class;
	}
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
			  IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
		int e = errno;

		if (quiet)
			MESH_TRACE("peer %s: %s: queue pair %d to RTR (remote QPN %u): %s",
				   c->peer, d->name, i, a.dest_qp_num,
				   strerror(e));
		else
			MESH_WARN("peer %s: %s: queue pair %d to RTR (remote QPN %u): %s",
				  c->peer, d->name, i, a.dest_qp_num,
				  strerror(e));
		return e ? -e : -EIO;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = (uint8_t)ctx->timeout;
	a.retry_cnt = (uint8_t)ctx->retry_cnt;
	a.rnr_retry = 7;
	a.sq_psn = c->psn[i];
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			  IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			  IBV_QP_MAX_QP_RD_ATOMIC)) {
		int e = errno;

		if (quiet)
			MESH_TRACE("peer %s: %s: queue pair %d to RTS: %s",
				   c->peer, d->name, i, strerror(e));
		else
			MESH_WARN("peer %s: %s: queue pair %d to RTS: %s",
				  c->peer, d->name, i, strerror(e));
		return e ? -e : -EIO;
	}
	return 0;
}

int vl_qp_connect(struct vl_comm *c, int q, struct ibv_qp *qp,
		  uint32_t qpn, uint32_t psn)
{
	return qp_rtr_rts(c, q, qp, &c->rlink[vl_qp_link(c, q)], qpn, psn,
			  true);
}

static void link_fill(const struct vl_dev *d, struct ib_wire_link *w)
{
	w->lid = htons(d->pattr.lid);
	memcpy(w->gid, d->gid.raw, 16);
	w->gid_index = htonl((uint32_t)d->gid.index);
	w->roce_version = (uint8_t)d->gid.roce_version;
	w->ethernet = d->pinfo.ethernet;
	w->mtu = (uint8_t)d->pattr.active_mtu;
	w->port = (uint8_t)d->port;
}

/*
 * A loopback QP for GPU flushes: an RDMA READ through the HCA makes the
 * data it wrote into GPU memory visible, as NCCL does.  Only when the
 * device registers GPU memory; on link 0, like the FIFO.
 */
static int flush_setup(struct vl_comm *c)
{
	struct vl_peer_link self = {
		.lid = c->dev->pattr.lid,
		.ethernet = c->dev->pinfo.ethernet,
		.mtu = c->dev->pattr.active_mtu,
	};

	if (!c->dev->gpu)
		return 0;
	c->flush_mr = ibv_reg_mr(c->dev->pd, &c->flush_buf,
				 sizeof(c->flush_buf), IBV_ACCESS_LOCAL_WRITE);
	/* as many reads as iflush hands out requests (freqs) */
	c->flush_qp = c->flush_mr ?
		      vl_qp_create(c, 0, VL_MAX_REQUESTS, 1) : NULL;
	if (!c->flush_qp)
		return -ENOMEM;
	memcpy(self.gid, c->dev->gid.raw, 16);
	return qp_rtr_rts(c, 0, c->flush_qp, &self, c->flush_qp->qp_num,
			  c->psn[0], false);
}

/* ---- wire info ---- */

static void wire_header(struct ib_wire_info *w)
{
	memset(w, 0, sizeof(*w));
	w->magic = htonl(IB_MAGIC);
	w->version = htons(IB_PROTO_VERSION);
}

static void info_fill(const struct vl_comm *c,
		      const struct mesh_addr *targets, struct ib_wire_info *w)
{
	struct ibv_mr *const *mr = c->is_send ? c->fifo_mr : c->sizes_mr;

	wire_header(w);
	w->eager_max = htonl(c->is_send ? (uint32_t)c->ctx->eager_max :
			     c->eager_max);
	w->nqps = htons((uint16_t)c->nqps);
	w->nlinks = htons((uint16_t)c->nlinks);
	w->addr = htobe64((uint64_t)(uintptr_t)mr[0]->addr);
	for (int l = 0; l < c->nlinks; l++) {
		struct ib_wire_link *wl = &w->link[l];

		link_fill(c->links[l], wl);
		wl->rkey = htonl(mr[l]->rkey);
		if (targets && targets[l].family) {
			wl->target_family = targets[l].family == AF_INET ? 4 : 6;
			memcpy(wl->target, targets[l].ip, 16);
		}
	}
	for (int i = 0; i < c->nqps; i++) {
		w->qpn[i] = htonl(c->qps[i]->qp_num);
		w->psn[i] = htonl(c->psn[i]);
	}
}

/* Positive errno and the reason when the peer's info is not usable. */
static int info_check(const struct ib_wire_info *w, int len, int nqps,
		      int nlinks, char *why, size_t cap)
{
	int n;

	if (len != (int)sizeof(*w) || ntohl(w->magic) != IB_MAGIC) {
		snprintf(why, cap, "malformed verbs info (%d bytes)", len);
		return EPROTO;
	}
	if (ntohs(w->version) != IB_PROTO_VERSION) {
		snprintf(why, cap, "verbs protocol %u, this side speaks %u",
			 ntohs(w->version), IB_PROTO_VERSION);
		return EPROTONOSUPPORT;
	}
	if (w->status)
		return 0;
	n = ntohs(w->nqps);
	if ((nqps && n != nqps) || n < 1 || n > VL_MAX_QPS) {
		snprintf(why, cap, "%d queue pairs, expected %d", n,
			 nqps ? nqps : VL_MAX_QPS);
		return EPROTO;
	}
	n = ntohs(w->nlinks);
	if ((nlinks && n != nlinks) || n < 1 || n > VL_MAX_LINKS ||
	    n > ntohs(w->nqps)) {
		snprintf(why, cap, "%d links for %u queue pairs, expected %d",
			 n, ntohs(w->nqps), nlinks ? nlinks : VL_MAX_LINKS);
		return EPROTO;
	}
	return 0;
}

/* Whether our device d and the peer's end w can form one link.  The
 * reason names the roles, as it is logged on both sides. */
static int link_check(const struct vl_dev *d, const struct ib_wire_link *w,
		      bool acceptor, char *why, size_t cap)
{
	const char *us = acceptor ? "acceptor" : "connector";
	const char *them = acceptor ? "connector" : "acceptor";

	if (!w->ethernet != !d->pinfo.ethernet) {
		snprintf(why, cap, "link layers differ: the %s's %s is %s, the %s's is %s",
			 us, d->name, d->pinfo.ethernet ? "RoCE" : "InfiniBand",
			 them, w->ethernet ? "RoCE" : "InfiniBand");
		return EPROTO;
	}
	if (d->pinfo.ethernet && w->roce_version && d->gid.roce_version &&
	    w->roce_version != d->gid.roce_version) {
		snprintf(why, cap,
			 "GID types differ: the %s's GID %d on %s is RoCE v%d, the %s's GID %u is RoCE v%u; set gid_index or roce_version alike on both",
			 us, d->gid.index, d->name, d->gid.roce_version, them,
			 ntohl(w->gid_index), w->roce_version);
		return EPROTO;
	}
	return 0;
}

static int links_check(const struct vl_comm *c,
		       const struct ib_wire_info *w, char *why, size_t cap)
{
	for (int l = 0; l < c->nlinks; l++) {
		int st = link_check(c->links[l], &w->link[l], false, why,
				    cap);

		if (st)
			return st;
	}
	return 0;
}

static enum ibv_mtu mtu_min(const struct vl_dev *d,
			    const struct ib_wire_link *w)
{
	enum ibv_mtu m = d->pattr.active_mtu;

	return w->mtu && w->mtu < m ? (enum ibv_mtu)w->mtu : m;
}

/* The peer's end of a link, printable: its IPv4 address where the GID
 * maps one, else the GID. */
static void where_fill(const uint8_t gid[16], char *buf, size_t cap)
{
	static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					0xff, 0xff };
	char g[INET6_ADDRSTRLEN];

	if (!memcmp(gid, v4, sizeof(v4)))
		snprintf(buf, cap, "%u.%u.%u.%u", gid[12], gid[13], gid[14],
			 gid[15]);
	else
		snprintf(buf, cap, "%s", vl_gid_str(gid, g, sizeof(g)));
}

static int qps_up(struct vl_comm *c, const struct ib_wire_info *w)
{
	int ret;

	c->rem_addr = be64toh(w->addr);
	for (int l = 0; l < c->nlinks; l++) {
		struct vl_peer_link *pl = &c->rlink[l];

		c->rem_rkey[l] = ntohl(w->link[l].rkey);
		memcpy(pl->gid, w->link[l].gid, 16);
		pl->lid = ntohs(w->link[l].lid);
		pl->ethernet = w->link[l].ethernet;
		pl->mtu = mtu_min(c->links[l], &w->link[l]);
		where_fill(pl->gid, c->rwhere[l], sizeof(c->rwhere[l]));
	}
	for (int i = 0; i < c->nqps; i++) {
		ret = qp_rtr_rts(c, i, c->qps[i], &c->rlink[vl_qp_link(c, i)],
				 ntohl(w->qpn[i]), ntohl(w->psn[i]), false);
		if (ret)
			return ret;
	}
	return 0;
}

static void conn_log(const struct vl_comm *c, const struct ib_wire_info *w)
{
	char line[512];
	size_t len = 0;

	for (int l = 0; l < c->nlinks && len < sizeof(line); l++) {
		const struct vl_dev *d = c->links[l];
		char g[INET6_ADDRSTRLEN];

		len += (size_t)snprintf(line + len, sizeof(line) - len,
			"%s%s GID %d -> %s (index %u), MTU %d",
			l ? "; " : "", d->name, d->gid.index,
			vl_gid_str(w->link[l].gid, g, sizeof(g)),
			ntohl(w->link[l].gid_index),
			128 << mtu_min(d, &w->link[l]));
	}
	MESH_INFO("%s comm %u %s peer %s: %d QPs over %s, eager up to %u bytes, traffic class %d (DSCP %d)",
		  c->is_send ? "send" : "recv", c->id,
		  c->is_send ? "to" : "from", c->peer, c->nqps, line,
		  c->eager_max, c->traffic_class, c->traffic_class >> 2);
}

int vl_describe(void *comm, struct mesh_conn_info *info)
{
	const struct vl_comm *c = comm;

	for (int l = 0; l < c->nlinks && l < MESH_CONN_DEVICES_MAX; l++)
		snprintf(info->devices[l], sizeof(info->devices[l]), "%s",
			 c->links[l]->name);
	info->ndevices = c->nlinks < MESH_CONN_DEVICES_MAX ?
				 c->nlinks : MESH_CONN_DEVICES_MAX;
	return 0;
}

static struct ib_pending *pending_get(struct mesh_ctrl *ctrl,
				      enum ib_phase first)
{
	bool fresh;
	struct ib_pending *p = mesh_ctrl_state(ctrl, sizeof(*p), &fresh);

	if (!p)
		MESH_WARN("out of memory");
	else if (fresh)
		p->phase = first;
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
		MESH_WARN("peer %s: cannot send the verbs %s: %s",
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
		MESH_WARN("peer %s: no verbs %s: %s", ctrl->peer, what,
			  strerror(-ret));
	else if (ret == 0)
		ret = -EPROTO;
	return ret;
}

static int connect_reply(struct mesh_ctrl *ctrl, struct ib_pending *p)
{
	struct ib_wire_info w;
	char why[256] = "";
	int ret, st;

	ret = ctrl_recv(ctrl, &w, sizeof(w), "reply");
	if (ret <= 0)
		return ret ? ret : 1;
	st = info_check(&w, ret, p->comm->nqps, p->comm->nlinks, why,
			sizeof(why));
	if (!st && w.status) {
		w.reason[sizeof(w.reason) - 1] = '\0';
		MESH_WARN("peer %s refused the connection: %s", ctrl->peer,
			  w.reason[0] ? w.reason : strerror(ntohs(w.status)));
		return -ECONNREFUSED;
	}
	if (!st)
		st = links_check(p->comm, &w, why, sizeof(why));
	if (st) {
		MESH_WARN("peer %s: %s", ctrl->peer, why);
		return -st;
	}
	ret = qps_up(p->comm, &w);
	if (ret)
		return ret;
	/* never more than asked for: the peer's slots are that size */
	p->comm->eager_max = ntohl(w.eager_max);
	if (p->comm->eager_max > (uint32_t)p->comm->ctx->eager_max)
		p->comm->eager_max = (uint32_t)p->comm->ctx->eager_max;
	conn_log(p->comm, &w);
	return 0;
}

/*
 * The side channel: stream 0 of the control connection, dialed by the
 * connector, taken by the acceptor when it arrives.  0 once the comm owns
 * it, 1 to come back later, -errno.
 */
static int side_stream(struct mesh_ctrl *ctrl, struct ib_pending *p)
{
	int fd = -1, ret = ctrl->stream(ctrl, 0, &fd);

	if (ret == -EAGAIN)
		return 1;
	if (ret < 0) {
		MESH_WARN("peer %s: no verbs side channel: %s", ctrl->peer,
			  strerror(-ret));
		return ret;
	}
	p->comm->side_fd = fd;
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

static int connect_create(struct vl_ctx *ctx, struct ib_pending *p,
			  const struct vl_link_plan *plan, int nlinks,
			  const struct mesh_ctrl *ctrl)
{
	struct vl_dev *links[VL_MAX_LINKS];
	int nqps = ctx->nqps;

	if (nlinks < 1 || nlinks > VL_MAX_LINKS)
		return -EINVAL;
	for (int l = 0; l < nlinks; l++) {
		links[l] = plan[l].dev;
		p->target[l] = plan[l].target;
	}
	/* every link gets at least one QP */
	if (nqps < nlinks)
		nqps = nlinks;
	p->comm = vl_comm_create(ctx, links, nlinks, true, nqps, 0, ctrl);
	if (!p->comm)
		return -ENOMEM;
	/* NCCL's traffic class where it gave one: only ever on the
	 * connecting side (module.h 1.9), whose QPs send the data */
	p->comm->traffic_class = mesh_ctrl_traffic_class(ctrl,
							 ctx->traffic_class);
	info_fill(p->comm, p->target, &p->info);
	return 0;
}

int vl_connect_links(struct vl_ctx *ctx,
			const struct vl_link_plan *plan, int nlinks,
			struct mesh_ctrl *ctrl, void **send_comm)
{
	struct ib_wire_ready rd = { htonl(IB_MAGIC), 0 };
	struct ib_pending *p;
	int ret;

	*send_comm = NULL;
	p = pending_get(ctrl, IB_CREATE);
	if (!p)
		return -ENOMEM;
	switch (p->phase) {
	case IB_CREATE:
		ret = connect_create(ctx, p, plan, nlinks, ctrl);
		if (ret)
			break;
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
		p->phase = IB_STREAM;
		/* fall through */
	case IB_STREAM:
		ret = side_stream(ctrl, p);
		if (ret)
			break;
		*send_comm = p->comm;
		p->comm = NULL;
		break;
	default:
		ret = -EINVAL;
		break;
	}
	return step_end(ctrl, ret);
}

static void target_of(const struct ib_wire_link *w, struct mesh_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (w->target_family != 4 && w->target_family != 6)
		return;
	a->family = w->target_family == 4 ? AF_INET : AF_INET6;
	memcpy(a->ip, w->target, 16);
}

/* The acceptor's device for every link the connector asked for. */
static int accept_links(const struct ib_wire_info *w, vl_resolve_fn resolve,
			void *arg, struct vl_dev **links, char *why,
			size_t cap)
{
	int nlinks = ntohs(w->nlinks);

	for (int l = 0; l < nlinks; l++) {
		struct mesh_addr target;
		int ret, st;

		target_of(&w->link[l], &target);
		ret = resolve(arg, &target, &links[l], why, cap);
		if (ret)
			return -ret;
		st = link_check(links[l], &w->link[l], true, why, cap);
		if (st)
			return st;
	}
	return 0;
}

static void refusal_fill(struct ib_pending *p, int st, const char *why)
{
	wire_header(&p->info);
	p->info.status = htons((uint16_t)st);
	snprintf(p->info.reason, sizeof(p->info.reason), "%s", why);
}

/* Builds the acceptor's side from the connector's info, or a refusal. */
static int accept_info(struct vl_ctx *ctx, vl_resolve_fn resolve,
		       void *arg, struct mesh_ctrl *ctrl, struct ib_pending *p,
		       const struct ib_wire_info *w, int len)
{
	struct vl_dev *links[VL_MAX_LINKS];
	char why[256] = "";
	int st, ret;

	st = info_check(w, len, 0, 0, why, sizeof(why));
	if (!st && w->status)
		st = EPROTO;
	if (!st)
		st = accept_links(w, resolve, arg, links, why, sizeof(why));
	if (st) {
		MESH_WARN("peer %s: refusing the connection: %s", ctrl->peer,
			  why);
		refusal_fill(p, st, why);
		return 0;
	}
	p->comm = vl_comm_create(ctx, links, ntohs(w->nlinks), false,
			      ntohs(w->nqps),
			      eager_accept_max(ctx, links, ntohs(w->nlinks),
					       ntohl(w->eager_max)),
			      ctrl);
	if (!p->comm)
		return -ENOMEM;
	/* NCCL gives the accepting side no class: its QPs (FIFO writes,
	 * acknowledgements) keep the config's */
	p->comm->traffic_class = ctx->traffic_class;
	ret = qps_up(p->comm, w);
	if (!ret)
		ret = vl_post_recvs(p->comm);
	if (!ret)
		ret = flush_setup(p->comm);
	if (ret)
		return ret;
	info_fill(p->comm, NULL, &p->info);
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
		MESH_WARN("peer %s: malformed verbs ready (%d bytes)",
			  ctrl->peer, ret);
		return -EPROTO;
	}
	return 0;
}

int vl_accept_links(struct vl_ctx *ctx, vl_resolve_fn resolve,
		       void *arg, struct mesh_ctrl *ctrl, void **recv_comm)
{
	struct ib_wire_info w;
	struct ib_pending *p;
	int ret;

	*recv_comm = NULL;
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
		ret = accept_info(ctx, resolve, arg, ctrl, p, &w, ret);
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
		p->phase = IB_STREAM;
		/* fall through */
	case IB_STREAM:
		ret = side_stream(ctrl, p);
		if (ret)
			break;
		*recv_comm = p->comm;
		p->comm = NULL;
		break;
	default:
		ret = -EINVAL;
		break;
	}
	return step_end(ctrl, ret);
}
