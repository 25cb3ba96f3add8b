/* SPDX-License-Identifier: MIT */
/*
 * Orderly close and liveness of a verbs connection.
 *
 * Today's peer may still be writing into us when we close: the receiver
 * its FIFO entries and credits, the sender the last piece of a message
 * the receiver already counted.  Tearing our QPs down under those writes
 * makes the peer's HCA retry into nothing and fail its comm, though it was
 * owed nothing.  So a side that closes first:
 *
 *   1. (sender) waits for its outstanding sends: a completed isend must
 *      arrive whole, and the notice below must come after every piece;
 *   2. RDMA-writes VL_CLOSE_MAGIC into the peer's notice word on a QP
 *      that is up (a recv comm: the one of its FIFO writes, behind them);
 *   3. waits until that write completes (the peer's HCA has it), the
 *      peer's own notice shows up (both closing), or a bound derived from
 *      the QP's retry timeout passes; says BYE on the side channel
 *      (verbs_side.c); then destroys the QPs.
 *
 * The peer sees the notice before any error its later writes can bring
 * (they fail only after our QPs are gone), so it takes those errors as the
 * end of the connection.  A peer that dies writes no notice: its side
 * channel ends without BYE, and the survivor's writes fail with the
 * reason.  A survivor that writes nothing (a receiver waiting for data)
 * and has no side channel to tell it would never learn of the death, so
 * an idle comm probes: every VL_PROBE_MS without a completion it writes
 * one word into the peer, which a live peer's HCA answers even while the
 * process is busy elsewhere or late, and a dead one leaves unanswered.
 *
 * All of it runs on the thread driving the comm; nothing takes a lock.
 */
#include <errno.h>
#include <stddef.h>
#include <time.h>

#include "verbs.h"

uint64_t vl_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

bool vl_peer_closed(struct vl_comm *c)
{
	if (c->peer_closed)
		return true;
	if (__atomic_load_n(&vl_note_in(c)->closed, __ATOMIC_ACQUIRE) !=
	    VL_CLOSE_MAGIC)
		return false;
	c->peer_closed = true;
	c->peer_closed_ns = vl_now_ns();
	return true;
}

/* What the QP itself retries a write for: 4.096 us << timeout, retry_cnt
 * + 1 times. */
static uint64_t qp_retry_ns(const struct vl_ctx *ctx)
{
	return (4096ULL << ctx->timeout) * ((uint64_t)ctx->retry_cnt + 1);
}

/*
 * Whether a send still waiting for its completions will never get them:
 * the peer closed, and long enough ago.  The peer destroys its QPs once
 * its notice is acknowledged, so a write of ours it took before that is
 * acknowledged within a round trip; one it did not take is retried into
 * nothing.  Hardware fails such a write after its retries (a completion
 * error), but Soft-RoCE at retry_cnt 7 retries forever, and no probe runs
 * after the notice: without this the send would never end.  The grace is
 * the QP's own retry time plus VL_PROBE_MS, at most 10 s.
 */
bool vl_send_orphaned(struct vl_comm *c)
{
	uint64_t grace;

	if (!vl_peer_closed(c))
		return false;
	grace = qp_retry_ns(c->ctx) + VL_PROBE_MS * 1000000ULL;
	if (grace > 10000000000ULL)
		grace = 10000000000ULL;
	return vl_now_ns() - c->peer_closed_ns > grace;
}

int vl_notice_post(struct vl_comm *c, int q, size_t field,
		   enum vl_wr_kind kind)
{
	struct vl_notice *src = vl_note_out(c);
	int l = vl_qp_link(c, q);
	struct ibv_sge sge = { (uint64_t)(uintptr_t)&src->src,
			       sizeof(src->src), vl_note_lkey(c, l) };
	struct ibv_send_wr wr = {
		.wr_id = vl_wr(kind, q, c->path[q].epoch, 0),
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED |
			      (c->max_inline >= sizeof(src->src) ?
			       IBV_SEND_INLINE : 0),
		.wr.rdma = { vl_note_remote(c, src) + field, c->rem_rkey[l] },
	};

	src->src = VL_CLOSE_MAGIC;
	return -vl_post_send(c, q, &wr);
}

/* The slot for a probe or the close notice: the control slot of a recv
 * comm (behind its FIFO writes), else the first that is up; -1 if none. */
static int notice_qp(const struct vl_comm *c)
{
	if (!c->is_send && c->ctrl_qp >= 0)
		return c->ctrl_qp;
	return vl_next_up(c, 0);
}

/*
 * The slot for a liveness probe.  With an outage budget a send comm
 * probes a slot with nothing else outstanding, so an unanswered probe
 * speaks of the path, not of a big write ahead of it (verbs_path.c);
 * -1 when every slot is busy (their own completions will tell).
 */
static int probe_qp(const struct vl_comm *c)
{
	if (!c->outage_ms || !c->is_send)
		return notice_qp(c);
	for (int q = 0; q < c->nqps; q++)
		if (c->path[q].state == VL_QP_UP &&
		    c->path[q].sig_posted == c->path[q].sig_done)
			return q;
	return -1;
}

/*
 * Called by a poll that found nothing.  Every VL_PROBE_POLLS empty
 * polls it looks at the clock; after VL_PROBE_MS without a completion
 * it sends a probe.  A dead peer fails the probe's write once the QP's
 * retries run out, but Soft-RoCE retries forever at retry_cnt 7, and a
 * probe may also wait behind a write that never completes: so a probe
 * still unanswered, with no completion at all, after VL_PROBE_DEAD_MS
 * fails the comm too.  With an outage budget it only breaks the probe's
 * QP slot (the repair's stall check), and a dead peer shows as the end
 * of its side channel.
 */
void vl_idle(struct vl_comm *c)
{
	uint64_t now;
	int q;

	if (++c->idle_polls % VL_PROBE_POLLS || c->closing)
		return;
	now = vl_now_ns();
	if (c->busy || !c->live_ns) {
		c->busy = false;
		c->live_ns = now;
		return;
	}
	if (vl_peer_closed(c))
		return;
	if (c->probe_out) {
		if (!c->outage_ms &&
		    now - c->live_ns >= VL_PROBE_DEAD_MS * 1000000ULL)
			vl_comm_fail(c, -ECONNRESET, "%s comm %u %s %s: no answer from the peer for %llu ms (a probe write is not acknowledged): the peer is gone or unreachable",
					c->is_send ? "send" : "recv", c->id,
					c->is_send ? "to" : "from", c->peer,
					(unsigned long long)((now - c->live_ns) / 1000000));
		return;
	}
	if (now - c->live_ns < VL_PROBE_MS * 1000000ULL)
		return;
	/* a full send queue, or no slot up, is no failure: the next idle
	 * look tries again */
	q = probe_qp(c);
	if (q >= 0 && !vl_notice_post(c, q, offsetof(struct vl_notice, probe),
				      VL_WR_PROBE)) {
		c->probe_out = true;
		c->probe_qp = q;
	}
	c->live_ns = now;
}

/* How long close waits for the peer: what the QP itself would retry for
 * (4.096 us << timeout, retry_cnt + 1 times), twice, plus 2 s for sends
 * still in flight on a slow link; at most 10 s. */
static uint64_t close_bound_ns(const struct vl_ctx *ctx)
{
	uint64_t t = 2 * qp_retry_ns(ctx) + 2000000000ULL;

	return t < 10000000000ULL ? t : 10000000000ULL;
}

static bool sends_outstanding(const struct vl_comm *c)
{
	for (int i = 0; i < IB_SEND_REQS; i++) {
		const struct ib_send_req *r = &c->sreqs[i];

		if (r->in_use && !r->failed && r->pieces_done < r->pieces)
			return true;
	}
	return false;
}

/* Polls until done(c), a failure, the peer's notice or the deadline; true
 * when done(c) came. */
static bool close_wait(struct vl_comm *c, bool (*done)(struct vl_comm *),
		       uint64_t deadline)
{
	const struct timespec nap = { 0, 20000 };

	for (;;) {
		int ret = vl_comm_poll(c);

		if (done(c))
			return true;
		if (ret || vl_peer_closed(c) || vl_now_ns() > deadline)
			return false;
		nanosleep(&nap, NULL);
	}
}

static bool sends_drained(struct vl_comm *c)
{
	return !sends_outstanding(c);
}

/* Posts the close notice on a slot that is up: 0, ENOMEM (queue full),
 * ENOTCONN (none is up), or post's error. */
static int notice_post_any(struct vl_comm *c)
{
	int q = notice_qp(c), ret;

	if (q < 0)
		return ENOTCONN;
	ret = vl_notice_post(c, q, offsetof(struct vl_notice, closed),
			     VL_WR_CLOSE);
	if (!ret) {
		c->close_out = true;
		c->close_qp = q;
	}
	return ret;
}

/* Done once the notice completed; a notice whose slot broke goes again
 * on another one. */
static bool notice_done(struct vl_comm *c)
{
	if (!c->close_done && !c->close_out)
		notice_post_any(c);
	return c->close_done;
}

/*
 * Posts the close notice.  A receiver's send queue may be full of FIFO
 * writes (only every IB_FIFO_SIGNAL_EVERY-th is signalled): polling frees
 * it, so a full queue (or, under repair, no slot up yet) is retried until
 * the deadline instead of leaving the peer without a notice.
 */
static int notice_post_wait(struct vl_comm *c, uint64_t deadline)
{
	const struct timespec nap = { 0, 20000 };

	for (;;) {
		int ret = notice_post_any(c);

		if ((ret != ENOMEM && ret != ENOTCONN) ||
		    vl_now_ns() > deadline)
			return ret;
		if (vl_comm_poll(c) || vl_peer_closed(c))
			return 0;
		nanosleep(&nap, NULL);
	}
}

int vl_close_comm(struct vl_comm *c)
{
	uint64_t t0, deadline;
	const char *how = NULL;

	if (!c)
		return 0;
	c->closing = true;
	t0 = vl_now_ns();
	deadline = t0 + close_bound_ns(c->ctx);
	if (c->is_send && !close_wait(c, sends_drained, deadline) &&
	    !c->error && !c->peer_closed)
		how = "sends still in flight";
	if (!c->error && !vl_peer_closed(c)) {
		int ret = notice_post_wait(c, deadline);

		if (ret == ENOTCONN)
			how = "no path up for the close notice";
		else if (ret)
			how = "cannot post the close notice";
		else if (!close_wait(c, notice_done, deadline) &&
			 !c->error && !c->peer_closed)
			how = "the close notice not acknowledged";
	}
	/* the side channel says it too: the peer takes its end for an
	 * orderly close, not its process gone */
	if (!c->error)
		vl_side_bye(c);
	if (how)
		MESH_INFO("%s comm %u %s %s: closing after %llu ms with %s",
			  c->is_send ? "send" : "recv", c->id,
			  c->is_send ? "to" : "from", c->peer,
			  (unsigned long long)((vl_now_ns() - t0) / 1000000),
			  how);
	vl_comm_free(c);
	return 0;
}
