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
 *   2. RDMA-writes VL_CLOSE_MAGIC into the peer's notice word on QP 0,
 *      behind everything else it wrote there;
 *   3. waits until that write completes (the peer's HCA has it), the
 *      peer's own notice shows up (both closing), or a bound derived from
 *      the QP's retry timeout passes; then destroys the QPs.
 *
 * The peer sees the notice before any error its later writes can bring
 * (they fail only after our QPs are gone), so it takes those errors as the
 * end of the connection.  A peer that dies writes no notice: the
 * survivor's writes fail with the reason.  A survivor that writes nothing
 * (a receiver waiting for data) would never learn of the death, so an
 * idle comm probes: every VL_PROBE_MS without a completion it writes
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

/* Where the peer writes its notice to us (fifo region on the send side,
 * sizes region on the receive side), and the region holding it. */
static struct vl_notice *notice_of(struct vl_comm *c, void **base,
				      struct ibv_mr **mr)
{
	if (c->is_send) {
		*base = c->fifo;
		*mr = c->fifo_mr[0];
		return &c->fifo->note;
	}
	*base = c->sizes;
	*mr = c->sizes_mr[0];
	return &c->sizes->note;
}

/* Our source word lies in the region the peer writes into on our side;
 * its twin on the peer's side is where our write goes.  Same layout. */
static struct vl_notice *src_notice(struct vl_comm *c, void **base,
				       struct ibv_mr **mr)
{
	if (c->is_send) {
		*base = c->sizes;
		*mr = c->sizes_mr[0];
		return &c->sizes->note;
	}
	*base = c->fifo;
	*mr = c->fifo_mr[0];
	return &c->fifo->note;
}

bool vl_peer_closed(struct vl_comm *c)
{
	void *base;
	struct ibv_mr *mr;

	if (c->peer_closed)
		return true;
	if (__atomic_load_n(&notice_of(c, &base, &mr)->closed,
			    __ATOMIC_ACQUIRE) != VL_CLOSE_MAGIC)
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

/*
 * One signalled 8-byte write of the magic into field (closed or probe) of
 * the peer's notice, on QP 0 behind what we wrote there before.  The
 * peer's region at rem_addr is the twin of the one our source lies in.
 */
static int notice_post(struct vl_comm *c, size_t field, uint64_t wr_id)
{
	void *base;
	struct ibv_mr *mr;
	struct vl_notice *src = src_notice(c, &base, &mr);
	uint64_t off = (uint64_t)((char *)src - (char *)base) + field;
	struct ibv_sge sge = { (uint64_t)(uintptr_t)&src->src,
			       sizeof(src->src), mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED |
			      (c->max_inline >= sizeof(src->src) ?
			       IBV_SEND_INLINE : 0),
		.wr.rdma = { c->rem_addr + off, c->rem_rkey[0] },
	}, *bad;

	src->src = VL_CLOSE_MAGIC;
	return ibv_post_send(c->qps[0], &wr, &bad);
}

/*
 * Called by a poll that found nothing.  Every VL_PROBE_POLLS empty
 * polls it looks at the clock; after VL_PROBE_MS without a completion
 * it sends a probe.  A dead peer fails the probe's write once the QP's
 * retries run out, but Soft-RoCE retries forever at retry_cnt 7, and a
 * probe may also wait behind a write that never completes: so a probe
 * still unanswered, with no completion at all, after VL_PROBE_DEAD_MS
 * fails the comm too.
 */
void vl_idle(struct vl_comm *c)
{
	uint64_t now;

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
		if (now - c->live_ns >= VL_PROBE_DEAD_MS * 1000000ULL)
			vl_comm_fail(c, -ECONNRESET, "%s comm %u %s %s: no answer from the peer for %llu ms (a probe write is not acknowledged): the peer is gone or unreachable",
					c->is_send ? "send" : "recv", c->id,
					c->is_send ? "to" : "from", c->peer,
					(unsigned long long)((now - c->live_ns) / 1000000));
		return;
	}
	if (now - c->live_ns < VL_PROBE_MS * 1000000ULL)
		return;
	/* a full send queue is no failure: the next idle look tries again */
	if (!notice_post(c, offsetof(struct vl_notice, probe),
			 VL_WR_PROBE))
		c->probe_out = true;
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

static bool notice_done(struct vl_comm *c)
{
	return c->close_done;
}

/*
 * Posts the close notice.  A receiver's send queue may be full of FIFO
 * writes (only every IB_FIFO_SIGNAL_EVERY-th is signalled): polling frees
 * it, so a full queue is retried until the deadline instead of leaving the
 * peer without a notice.
 */
static int notice_post_wait(struct vl_comm *c, uint64_t deadline)
{
	const struct timespec nap = { 0, 20000 };

	for (;;) {
		int ret = notice_post(c, offsetof(struct vl_notice, closed),
				      VL_WR_CLOSE);

		if (ret != ENOMEM || vl_now_ns() > deadline)
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

		if (ret)
			how = "cannot post the close notice";
		else if (!close_wait(c, notice_done, deadline) &&
			 !c->error && !c->peer_closed)
			how = "the close notice not acknowledged";
	}
	if (how)
		MESH_INFO("%s comm %u %s %s: closing after %llu ms with %s",
			  c->is_send ? "send" : "recv", c->id,
			  c->is_send ? "to" : "from", c->peer,
			  (unsigned long long)((vl_now_ns() - t0) / 1000000),
			  how);
	vl_comm_free(c);
	return 0;
}
