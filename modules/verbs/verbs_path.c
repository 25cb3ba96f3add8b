/* SPDX-License-Identifier: MIT */
/*
 * QP slots and their repair: a connection keeps going on the QPs that work
 * while one that failed is rebuilt, and holds its requests for up to
 * outage_ms while none works.
 *
 * A slot's QP breaks on a completion error that speaks of the path (the
 * peer unreachable, a flush; never a protection or length error, which no
 * rebuilt QP would cure), on signaled writes that see no completion for
 * VL_PROBE_DEAD_MS, or when the peer says its end broke.  Then, per slot,
 * the send comm leading and the recv comm following:
 *
 *   1. each end moves its QP to the error state, so nothing more lands
 *      through it, and once its receives have flushed tells the other end
 *      BROKEN(e) with the number of writes with immediate it took on
 *      incarnation e;
 *   2. with both counts known, each end settles: the sender resends
 *      exactly the pieces the receiver did not take (write-with-immediate
 *      number >= that count) over the slots that are up, and counts the
 *      others done; the receiver writes its FIFO entries and credit again
 *      (rewriting them changes nothing the sender took);
 *   3. the leader makes a fresh QP (INIT) and tells NEW(e + 1) with its
 *      QPN and PSN; the follower makes its own, moves it to RTR and RTS
 *      towards the leader's and tells NEW(e + 1) in turn; the leader
 *      moves its QP to RTR and RTS and writes a probe through it;
 *   4. once the probe completes the path works both ways: the leader
 *      tells UP(e + 1) and uses the slot, the follower does when it sees
 *      that.  A fresh QP that fails goes round again, the leader waiting
 *      VL_RETRY_MIN_MS doubling up to VL_RETRY_MAX_MS between rounds.
 *
 * Records travel in-band (an RDMA write into the peer's record area, over
 * any slot that is up, told again every VL_RETELL_MS until the peer's own
 * record says it saw it) and over the side channel (verbs_side.c), so a
 * repair works with any one path left, and with none when the control
 * network still does.  A record replaces the side's previous one; the
 * order of the steps makes sure no count is overwritten before the peer
 * took it (a NEW record repeats the count of the incarnation it follows).
 *
 * While no slot is up, requests wait; past outage_ms test() fails naming
 * the peer, the paths and how long they were out.  Each link's outage
 * gives one INFO line when it starts and one when all its slots are back.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "verbs.h"

#define MS 1000000ULL

/* Time from t to now; 0 where t was taken after now (a step of this tick
 * read the clock again). */
static uint64_t since(uint64_t now, uint64_t t)
{
	return now > t ? now - t : 0;
}

static const char *dir_str(const struct vl_comm *c)
{
	return c->is_send ? "send" : "recv";
}

static const char *to_str(const struct vl_comm *c)
{
	return c->is_send ? "to" : "from";
}

bool vl_path_fault(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_WR_FLUSH_ERR:
	case IBV_WC_LOC_QP_OP_ERR:	/* Soft-RoCE: no route (link down) */
	case IBV_WC_RESP_TIMEOUT_ERR:
	case IBV_WC_BAD_RESP_ERR:
	case IBV_WC_REM_ABORT_ERR:
	case IBV_WC_FATAL_ERR:
	case IBV_WC_GENERAL_ERR:
		return true;
	default:
		return false;
	}
}

static const char *cause_str(uint32_t cause, char *buf, size_t cap)
{
	const char *peer = cause & VL_CAUSE_PEER ? "the peer's end: " : "";

	switch (cause & ~VL_CAUSE_PEER) {
	case VL_CAUSE_STALL:
		snprintf(buf, cap, "%sno completion for %d ms", peer,
			 VL_PROBE_DEAD_MS);
		break;
	case VL_CAUSE_SETUP:
		snprintf(buf, cap, "%sa fresh queue pair did not come up",
			 peer);
		break;
	case VL_CAUSE_POST:
		snprintf(buf, cap, "%scannot post on it", peer);
		break;
	default:
		if ((cause & ~VL_CAUSE_PEER) < 0x100)
			snprintf(buf, cap, "%swork completion error: %s (status %u)",
				 peer, ibv_wc_status_str((enum ibv_wc_status)
					(cause & 0xff)), cause & 0xff);
		else
			snprintf(buf, cap, "%sbroken", peer);
	}
	return buf;
}

/* ---- slots ---- */

int vl_next_up(const struct vl_comm *c, int from)
{
	for (int k = 0; k < c->nqps; k++) {
		int q = (from + k) % c->nqps;

		if (c->path[q].state == VL_QP_UP)
			return q;
	}
	return -1;
}

void vl_paths_init(struct vl_comm *c)
{
	memset(c->path, 0, sizeof(c->path));
	for (int q = 0; q < c->nqps; q++)
		c->path[q].state = VL_QP_UP;
	c->nup = c->nqps;
	c->ctrl_qp = 0;
	c->probe_qp = -1;
	c->close_qp = -1;
	c->outage_ms = c->ctx->outage_ms;
}

static bool link_all_up(const struct vl_comm *c, int l)
{
	for (int q = l; q < c->nqps; q += c->nlinks)
		if (c->path[q].state != VL_QP_UP)
			return false;
	return true;
}

/* The slots that are up, for the log: "rxe12 QP 0, rxe13 QP 3". */
static void up_names(const struct vl_comm *c, char *buf, size_t cap)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int q = 0; q < c->nqps && len < cap; q++)
		if (c->path[q].state == VL_QP_UP)
			len += (size_t)snprintf(buf + len, cap - len,
						"%s%s QP %d", len ? ", " : "",
						c->links[vl_qp_link(c, q)]->name,
						q);
}

static void outage_begin(struct vl_comm *c, int q, uint32_t cause)
{
	int l = vl_qp_link(c, q);
	struct vl_outage *o = &c->out[l];
	char why[160], rest[256];

	if (o->since_ns)
		return;
	*o = (struct vl_outage){ .since_ns = vl_now_ns(), .cause = cause,
				 .qp = q };
	if (c->nup) {
		char names[192];

		up_names(c, names, sizeof(names));
		snprintf(rest, sizeof(rest), "its traffic moves to %s", names);
	} else {
		snprintf(rest, sizeof(rest), "no other path works: requests held for up to outage_ms %d",
			 c->outage_ms);
	}
	MESH_INFO("%s comm %u %s %s: path %s -> %s down (QP %d: %s); %s",
		  dir_str(c), c->id, to_str(c), c->peer, c->links[l]->name,
		  c->rwhere[l], q, cause_str(cause, why, sizeof(why)), rest);
}

static void outage_end(struct vl_comm *c, int l)
{
	struct vl_outage *o = &c->out[l];
	char why[160], what[160];

	if (!o->since_ns || !link_all_up(c, l))
		return;
	if (c->is_send)
		snprintf(what, sizeof(what), "resent %llu pieces (%llu bytes)",
			 (unsigned long long)o->pieces,
			 (unsigned long long)o->bytes);
	else
		snprintf(what, sizeof(what), "rewrote %llu FIFO entries",
			 (unsigned long long)o->fifo);
	MESH_INFO("%s comm %u %s %s: path %s -> %s back after %llu ms (down since QP %d: %s); %s",
		  dir_str(c), c->id, to_str(c), c->peer, c->links[l]->name,
		  c->rwhere[l],
		  (unsigned long long)(since(vl_now_ns(), o->since_ns) / MS), o->qp,
		  cause_str(o->cause, why, sizeof(why)), what);
	o->since_ns = 0;
}

static void update_repairing(struct vl_comm *c)
{
	c->repairing = c->nup < c->nqps;
}

static void slot_up(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];

	MESH_TRACE("%s comm %u: QP %d incarnation %u up", dir_str(c), c->id, q,
		   p->epoch);
	p->state = VL_QP_UP;
	p->rounds = 0;
	p->stall_mark = p->sig_done;
	p->stall_ns = vl_now_ns();
	if (c->nup++ == 0)
		c->none_since_ns = 0;
	if (!c->is_send && c->ctrl_qp < 0)
		c->ctrl_qp = q;
	update_repairing(c);
	outage_end(c, vl_qp_link(c, q));
}

/* Slot q stops carrying anything new. */
static void slot_leave_up(struct vl_comm *c, int q, uint32_t cause)
{
	int l = vl_qp_link(c, q);
	bool logged = c->out[l].since_ns != 0;

	c->nup--;
	if (!c->nup) {
		c->none_since_ns = vl_now_ns();
		c->none_cause = cause;
	}
	if (c->ctrl_qp == q)
		c->ctrl_qp = vl_next_up(c, q);
	if (c->probe_out && c->probe_qp == q)
		c->probe_out = false;
	if (c->close_out && c->close_qp == q)
		c->close_out = false;
	update_repairing(c);
	outage_begin(c, q, cause);
	/* the link's line said traffic moves on; now nothing is left */
	if (!c->nup && logged) {
		char why[160];

		MESH_INFO("%s comm %u %s %s: no path works any more (QP %d on %s: %s): requests held for up to outage_ms %d",
			  dir_str(c), c->id, to_str(c), c->peer, q,
			  c->links[l]->name, cause_str(cause, why, sizeof(why)),
			  c->outage_ms);
	}
}

/* ---- records ---- */

static const char *state_str(enum vl_qp_state st)
{
	static const char *const names[] = { "up", "drain", "dead", "new",
					     "probe", "rts" };

	return (unsigned int)st < 6 ? names[st] : "?";
}

static const char *phase_str(uint32_t phase)
{
	static const char *const names[] = { "NONE", "NEW", "UP", "BROKEN" };

	return phase < 4 ? names[phase] : "?";
}

static uint32_t rec_key(uint32_t epoch, uint32_t phase)
{
	return epoch << 2 | phase;
}

/* Writes our record of slot q into the peer's record area over a slot
 * that is up (q itself first). */
static void rec_write(struct vl_comm *c, int q)
{
	struct vl_rec *src = &vl_note_out(c)->rec[q];
	int u = c->path[q].state == VL_QP_UP ? q : vl_next_up(c, q);
	struct ibv_sge sge;
	struct ibv_send_wr wr = {
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
	};
	int l;

	if (u < 0)
		return;
	l = vl_qp_link(c, u);
	*src = c->path[q].mine;
	sge = (struct ibv_sge){ (uint64_t)(uintptr_t)src, sizeof(*src),
				vl_note_lkey(c, l) };
	wr.wr_id = vl_wr(VL_WR_REC, u, c->path[u].epoch, 0);
	wr.wr.rdma.remote_addr = vl_note_remote(c, src);
	wr.wr.rdma.rkey = c->rem_rkey[l];
	if (sizeof(*src) <= c->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	/* a full queue or a QP that just failed: told again later */
	if (!vl_post_send(c, u, &wr))
		c->path[q].told_ns = vl_now_ns();
}

/* Makes our record of slot q say phase, and tells the peer. */
static void tell(struct vl_comm *c, int q, uint32_t phase)
{
	struct vl_path *p = &c->path[q];
	struct vl_rec *r = &p->mine;

	r->epoch = p->epoch;
	r->phase = phase;
	r->qpn = c->qps[q] ? c->qps[q]->qp_num : 0;
	r->psn = c->psn[q];
	r->got_epoch = p->dead_epoch;
	r->got = p->dead_got;
	r->cause = p->cause;
	r->seen = rec_key(p->peer.epoch, p->peer.phase);
	r->pad = 0;
	r->check = vl_rec_check(r);
	p->dirty = true;
	p->told_ns = 0;
	MESH_TRACE("%s comm %u: QP %d tells %s(%u) qpn %u got %llu of %u",
		   dir_str(c), c->id, q, phase_str(phase), r->epoch, r->qpn,
		   (unsigned long long)r->got, r->got_epoch);
	rec_write(c, q);
}

/* Whether the peer has not yet seen our latest record of slot q. */
static bool unseen(const struct vl_path *p)
{
	return p->mine.phase != VL_REC_NONE &&
	       p->peer.seen < rec_key(p->mine.epoch, p->mine.phase);
}

/* ---- breaking ---- */

static void qp_to_error(struct vl_comm *c, int q)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	if (c->qps[q] && ibv_modify_qp(c->qps[q], &a, IBV_QP_STATE))
		MESH_TRACE("%s comm %u: QP %d to the error state: %s",
			   dir_str(c), c->id, q, strerror(errno));
}

static void try_dead(struct vl_comm *c, int q);

void vl_path_break(struct vl_comm *c, int q, uint32_t cause)
{
	struct vl_path *p = &c->path[q];
	bool was_up = p->state == VL_QP_UP;

	if (p->state == VL_QP_DRAIN || p->state == VL_QP_DEAD || c->error)
		return;
	p->state = VL_QP_DRAIN;
	if (was_up)
		slot_leave_up(c, q, cause);
	else
		MESH_TRACE("%s comm %u %s %s: fresh QP %d (round %d) failed: %s",
			   dir_str(c), c->id, to_str(c), c->peer, q, p->rounds,
			   cause_str(cause, (char[160]){ 0 }, 160));
	p->cause = cause;
	p->settled = false;
	p->probe_sent = false;
	p->dead_epoch = p->epoch;
	c->repairing = true;
	qp_to_error(c, q);
	try_dead(c, q);
}

/* Settles slot q's dead incarnation once the peer's count of it is in. */
static void try_settle(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];
	const struct vl_rec *r = &p->peer;

	if (p->state != VL_QP_DEAD || p->settled ||
	    r->phase == VL_REC_NONE || r->got_epoch != p->dead_epoch ||
	    r->epoch < p->dead_epoch)
		return;
	p->settled = true;
	MESH_TRACE("%s comm %u: QP %d incarnation %u settled: the peer took %llu, we posted %llu",
		   dir_str(c), c->id, q, p->dead_epoch,
		   (unsigned long long)r->got, (unsigned long long)p->imm_sent);
	if (c->is_send) {
		if (vl_settle_send(c, q, r->got))
			return;
	} else {
		vl_settle_recv(c, q);
	}
}

/* Once every receive of the broken QP has come back, our count of what we
 * took on it is final: tell it. */
static void try_dead(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];

	if (p->state != VL_QP_DRAIN || p->rdone < p->rposted)
		return;
	p->state = VL_QP_DEAD;
	p->dead_got = p->imm_got;
	p->dead_epoch = p->epoch;
	if (c->is_send && p->rounds) {
		uint64_t wait = (uint64_t)VL_RETRY_MIN_MS << (p->rounds - 1);

		if (p->rounds > 8 || wait > VL_RETRY_MAX_MS)
			wait = VL_RETRY_MAX_MS;
		p->not_before_ns = vl_now_ns() + wait * MS;
	}
	tell(c, q, VL_REC_BROKEN);
	try_settle(c, q);
}

/* ---- fresh QPs ---- */

/*
 * Replaces slot q's QP with a fresh one in INIT, receives posted: the
 * incarnation `epoch`, even when that fails (a QP that never came to be
 * took nothing and is told dead like any other).
 */
static int fresh_qp(struct vl_comm *c, int q, uint32_t epoch)
{
	struct vl_path *p = &c->path[q];
	struct ibv_qp *qp;

	p->epoch = epoch;
	p->rposted = p->rdone = 0;
	p->sig_posted = p->sig_done = 0;
	p->imm_sent = p->imm_got = 0;
	p->ctrl_used = false;
	p->probe_sent = false;
	p->rounds++;
	if (c->qps[q] && ibv_destroy_qp(c->qps[q]))
		MESH_TRACE("%s comm %u: destroying QP %d: %s", dir_str(c),
			   c->id, q, strerror(errno));
	c->qps[q] = NULL;
	qp = vl_qp_create(c, vl_qp_link(c, q), c->sq_depth, c->rq_depth);
	if (!qp)
		return -ENOMEM;
	c->qps[q] = qp;
	if (getrandom(&c->psn[q], sizeof(c->psn[q]), 0) < 0)
		c->psn[q] = epoch * 7919u + (uint32_t)q;
	c->psn[q] &= 0xffffff;
	if (!c->is_send)
		for (int i = 0; i < c->rq_depth; i++)
			if (vl_post_recv(c, q))
				return -EIO;
	return 0;
}

/* A fresh QP that could not be made or brought up: its incarnation is
 * dead like any other. */
static void fresh_failed(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];

	p->state = VL_QP_NEW;	/* not up: no outage line again */
	vl_path_break(c, q, VL_CAUSE_SETUP);
}

/* Leader: the probe write tests the fresh QP in both directions. */
static void probe_fresh(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];
	int ret = vl_notice_post(c, q, offsetof(struct vl_notice, probe),
				 VL_WR_PROBE);

	if (ret == ENOMEM)
		return;		/* the next tick posts it */
	if (ret) {
		vl_path_break(c, q, VL_CAUSE_POST);
		return;
	}
	MESH_TRACE("%s comm %u: QP %d incarnation %u probed", dir_str(c),
		   c->id, q, p->epoch);
	p->probe_sent = true;
}

void vl_path_probed(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];

	if (p->state == VL_QP_PROBE) {
		slot_up(c, q);
		tell(c, q, VL_REC_UP);
	} else if (c->probe_out && c->probe_qp == q) {
		c->probe_out = false;
	}
}

/*
 * Whether slot q's local port is up.  A fresh QP waits for it: on a port
 * that is down, moving a QP to RTR resolves the peer's address in vain,
 * and on Soft-RoCE blocks the calling thread for a second doing so.
 */
static bool port_up(struct vl_comm *c, int q, uint64_t now)
{
	struct vl_dev *d = c->links[vl_qp_link(c, q)];
	struct ibv_port_attr a;

	if (!ibv_query_port(d->ctx, (uint8_t)d->port, &a) &&
	    a.state == IBV_PORT_ACTIVE)
		return true;
	c->path[q].not_before_ns = now + VL_RETRY_MIN_MS * MS;
	return false;
}

/* One step of slot q's repair, as far as it can go now. */
static void slot_step(struct vl_comm *c, int q, uint64_t now)
{
	struct vl_path *p = &c->path[q];
	const struct vl_rec *r = &p->peer;
	uint32_t next = p->dead_epoch + 1;

	switch (p->state) {
	case VL_QP_UP:
		return;
	case VL_QP_DRAIN:
		try_dead(c, q);
		return;
	case VL_QP_DEAD:
		try_settle(c, q);
		if (!p->settled || now < p->not_before_ns ||
		    !port_up(c, q, now))
			return;
		if (c->is_send) {
			if (fresh_qp(c, q, next)) {
				/* no QP now: try again after a while */
				p->not_before_ns = now + VL_RETRY_MAX_MS * MS;
				return;
			}
			p->state = VL_QP_NEW;
			tell(c, q, VL_REC_NEW);
			return;
		}
		if (r->epoch != next || r->phase != VL_REC_NEW)
			return;
		if (fresh_qp(c, q, next) ||
		    vl_qp_connect(c, q, c->qps[q], r->qpn, r->psn)) {
			fresh_failed(c, q);
			return;
		}
		p->state = VL_QP_RTS;
		tell(c, q, VL_REC_NEW);
		return;
	case VL_QP_NEW:		/* leader */
		if (r->epoch != p->epoch || r->phase != VL_REC_NEW)
			return;
		if (vl_qp_connect(c, q, c->qps[q], r->qpn, r->psn)) {
			vl_path_break(c, q, VL_CAUSE_SETUP);
			return;
		}
		p->state = VL_QP_PROBE;
		p->stall_mark = p->sig_done;
		p->stall_ns = now;
		probe_fresh(c, q);
		return;
	case VL_QP_PROBE:
		if (!p->probe_sent)
			probe_fresh(c, q);
		return;
	case VL_QP_RTS:		/* follower */
		if (r->epoch == p->epoch && r->phase == VL_REC_UP) {
			slot_up(c, q);
			tell(c, q, VL_REC_UP);
		}
		return;
	}
}

/*
 * The peer's record of slot q, in-band or from the side channel.  The
 * peer is never more than one incarnation ahead: the leader starts e + 1
 * only once both ends told BROKEN(e), the follower only after the leader.
 */
void vl_rec_take(struct vl_comm *c, int q, const struct vl_rec *r)
{
	struct vl_path *p = &c->path[q];
	uint32_t have = rec_key(p->peer.epoch, p->peer.phase);
	uint32_t key = rec_key(r->epoch, r->phase);

	if (c->error || q < 0 || q >= c->nqps)
		return;
	if (r->phase < VL_REC_NEW || r->phase > VL_REC_BROKEN ||
	    r->epoch > p->epoch + 1 || r->epoch >= (1U << 30)) {
		vl_comm_fail(c, -EPROTO, "%s comm %u %s %s: the peer's record of QP %d (incarnation %u, phase %u) does not follow ours (incarnation %u)",
			     dir_str(c), c->id, to_str(c), c->peer, q,
			     r->epoch, r->phase, p->epoch);
		return;
	}
	if (key < have || (key == have && r->seen <= p->peer.seen))
		return;
	p->peer = *r;
	if (key == have)
		return;		/* only what it saw of ours moved */
	MESH_TRACE("%s comm %u: QP %d (%s, incarnation %u) takes the peer's %s(%u) qpn %u got %llu of %u",
		   dir_str(c), c->id, q, state_str(p->state), p->epoch,
		   phase_str(r->phase), r->epoch, r->qpn,
		   (unsigned long long)r->got, r->got_epoch);
	/* say we saw it (the peer tells it again until we do) */
	if (p->mine.phase != VL_REC_NONE) {
		p->mine.seen = key;
		p->mine.check = vl_rec_check(&p->mine);
		p->dirty = true;
		rec_write(c, q);
	}
	if (r->phase == VL_REC_BROKEN && r->epoch == p->epoch &&
	    p->state != VL_QP_DRAIN && p->state != VL_QP_DEAD) {
		if (!c->outage_ms) {
			char why[160];

			vl_comm_fail(c, -ECONNRESET, "%s comm %u %s %s: the peer's end of QP %d failed (%s)",
				     dir_str(c), c->id, to_str(c), c->peer, q,
				     cause_str(r->cause, why, sizeof(why)));
			return;
		}
		vl_path_break(c, q, VL_CAUSE_PEER | (r->cause & 0xfff));
	}
	slot_step(c, q, vl_now_ns());
}

/* Reads the peer's records that landed in-band. */
static void recs_read(struct vl_comm *c)
{
	const struct vl_notice *n = vl_note_in(c);

	for (int q = 0; q < c->nqps; q++) {
		struct vl_rec r;

		memcpy(&r, (const void *)&n->rec[q], sizeof(r));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (r.phase == VL_REC_NONE || r.check != vl_rec_check(&r))
			continue;
		if (rec_key(r.epoch, r.phase) < rec_key(c->path[q].peer.epoch,
							c->path[q].peer.phase))
			continue;
		vl_rec_take(c, q, &r);
	}
}

/* ---- the clock ---- */

/*
 * Whether slot q's signaled writes are small words only, so that none of
 * them going unanswered for VL_PROBE_DEAD_MS means the path is gone (even
 * where the QP retries forever: Soft-RoCE at retry_cnt 7).  A piece of a
 * big message may take longer than that on a slow link, and the HCA's own
 * retries, which see its progress, judge it: a send comm's slot is
 * watched only while a probe is all it waits for.
 */
static bool stall_watched(const struct vl_comm *c, int q)
{
	const struct vl_path *p = &c->path[q];

	if (p->state == VL_QP_PROBE)
		return true;
	if (p->state != VL_QP_UP)
		return false;
	if (!c->is_send)
		return true;
	return c->probe_out && c->probe_qp == q &&
	       p->sig_posted - p->sig_done == 1;
}

static void stall_check(struct vl_comm *c, uint64_t now, bool watched)
{
	for (int q = 0; q < c->nqps; q++) {
		struct vl_path *p = &c->path[q];

		if (!watched || !stall_watched(c, q) ||
		    p->sig_done == p->sig_posted ||
		    p->sig_done != p->stall_mark) {
			p->stall_mark = p->sig_done;
			p->stall_ns = now;
		} else if (since(now, p->stall_ns) > VL_PROBE_DEAD_MS * MS) {
			vl_path_break(c, q, VL_CAUSE_STALL);
		}
	}
}

/* "rxe12 -> 10.77.12.2, rxe13 -> 10.77.13.3" */
static void links_str(const struct vl_comm *c, char *buf, size_t cap)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int l = 0; l < c->nlinks && len < cap; l++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s -> %s",
					l ? ", " : "", c->links[l]->name,
					c->rwhere[l]);
}

static void budget_check(struct vl_comm *c, uint64_t now)
{
	char paths[256], why[160];

	if (c->nup || !c->none_since_ns ||
	    since(now, c->none_since_ns) <= (uint64_t)c->outage_ms * MS)
		return;
	links_str(c, paths, sizeof(paths));
	vl_comm_fail(c, -ETIMEDOUT, "%s comm %u %s %s: no path to the peer works: %s out for %llu ms, past outage_ms %d (first: %s)",
		     dir_str(c), c->id, to_str(c), c->peer, paths,
		     (unsigned long long)(since(now, c->none_since_ns) / MS),
		     c->outage_ms, cause_str(c->none_cause, why, sizeof(why)));
}

void vl_tick(struct vl_comm *c)
{
	uint64_t now, every = c->repairing ? 100000ULL : VL_TICK_MS * MS;
	bool watched;

	if (c->error)
		return;
	now = vl_now_ns();
	if (since(now, c->tick_ns) < every)
		return;
	/* a long gap means nobody polled: nothing stalled meanwhile */
	watched = c->tick_ns &&
		  since(now, c->tick_ns) < VL_PROBE_DEAD_MS * MS / 2;
	c->tick_ns = now;
	if (c->side_fd >= 0)
		vl_side_pump(c);
	if (c->outage_ms)
		recs_read(c);
	if (c->error || !c->outage_ms)
		return;
	now = vl_now_ns();
	stall_check(c, now, watched);
	for (int q = 0; q < c->nqps && !c->error; q++) {
		struct vl_path *p = &c->path[q];

		slot_step(c, q, now);
		if (unseen(p) && since(now, p->told_ns) > VL_RETELL_MS * MS)
			rec_write(c, q);
	}
	if (c->fifo_resend && !c->error)
		vl_fifo_rewrite(c);
	if (!c->error)
		budget_check(c, now);
	if (c->side_fd >= 0 && !c->error)
		vl_side_pump(c);
}

/* ---- posting ---- */

int vl_post_send(struct vl_comm *c, int q, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int ret = ibv_post_send(c->qps[q], wr, &bad);
	uint32_t sig = 0;

	for (struct ibv_send_wr *w = wr; w && w != bad; w = w->next)
		if (w->send_flags & IBV_SEND_SIGNALED)
			sig++;
	c->path[q].sig_posted += sig;
	return ret ? -ret : 0;
}

int vl_post_recv(struct vl_comm *c, int q)
{
	struct vl_path *p = &c->path[q];
	struct ibv_recv_wr wr = { .wr_id = vl_wr(VL_WR_RECV, q, p->epoch, 0) };
	struct ibv_recv_wr *bad;
	int ret = ibv_post_recv(c->qps[q], &wr, &bad);

	if (ret)
		return vl_comm_fail(c, -ret, "recv comm %u from %s: cannot post a receive on QP %d: %s",
				    c->id, c->peer, q, strerror(ret));
	p->rposted++;
	return 0;
}
