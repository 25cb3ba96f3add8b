/* SPDX-License-Identifier: MIT */
/*
 * The data path, as NCCL's proxy runs it: a ring of request slots per comm,
 * isend/irecv retried while the plugin hands back NULL, outstanding requests
 * tested round-robin, grouped receives matched by tag, every channel's
 * streams driven together.  Every received byte is checked against a
 * pattern of (size, iteration, message, direction, channel, offset), so a
 * stale, swapped, shifted or crossed chunk cannot pass.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netdrive.h"

#define PERF_MIN_ITERS 2
#define PERF_MIN_REGION 4096
/* Tag of group member k: member 0 carries the sender's rank, as in NCCL. */
#define PERF_TAG(rank, k) ((rank) + 2 * (k))
/* Idle passes between checks that the peer is still alive. */
#define PERF_IDLE_CHECK 4096


static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

void perf_plan_size(const struct perf_params *p, uint64_t size, int group,
		    struct perf_plan *plan)
{
	uint64_t unit = max_u64(size, 1);
	uint64_t per_iter;

	plan->size = size;
	plan->recv_size = max_u64(size, p->recv_size);
	plan->verify = !p->unverified;
	plan->group = (int)min_u64(group, max_u64(1, p->mem / unit));
	per_iter = plan->group * size;
	plan->window = per_iter ? (int)min_u64(p->window,
					       max_u64(1, p->mem / per_iter))
				: (int)p->window;
	if (!per_iter)
		plan->iters = p->iters;
	else
		plan->iters = (uint32_t)min_u64(
			p->iters, max_u64(PERF_MIN_ITERS, p->budget / per_iter));
}

/*
 * A direction's iterations, byte budget and buffer memory are shared by its
 * channels, so a size moves about the same bytes whatever their number.
 */
void perf_channel_params(const struct perf_params *p,
			 struct perf_params *per_channel)
{
	uint32_t n = p->channels ? p->channels : 1;

	*per_channel = *p;
	per_channel->iters = (p->iters + n - 1) / n;
	per_channel->budget = p->budget / n;
	per_channel->mem = max_u64(1, p->mem / n);
}

uint32_t perf_latency_iters(const struct perf_params *p, uint64_t size)
{
	if (!size)
		return p->iters;
	return (uint32_t)min_u64(p->iters,
				 max_u64(PERF_MIN_ITERS, p->budget / size));
}

size_t perf_region_len(const struct perf_params *p, int group, bool for_bw,
		       bool for_latency)
{
	struct perf_plan plan;
	uint64_t len = PERF_MIN_REGION, need;
	uint32_t i;

	for (i = 0; i < p->nsizes; i++) {
		uint64_t size = p->sizes[i];

		need = 0;
		if (for_latency && p->lat_max >= 0 &&
		    size <= (uint64_t)p->lat_max)
			need = size;
		if (for_bw) {
			perf_plan_size(p, size, group, &plan);
			need = max_u64(need, (uint64_t)plan.window *
						     plan.group * size);
		}
		len = max_u64(len, need);
	}
	/* the last buffer's receive may reach recv_size beyond its start */
	len += p->recv_size;
	return (len + PERF_MIN_REGION - 1) / PERF_MIN_REGION * PERF_MIN_REGION;
}

/* ---- data pattern ---- */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Direction and channel both go in, so crossed channels cannot pass;
 * channel 0 keeps the seeds of a single-channel run. */
static uint64_t pattern_seed(uint64_t size, uint64_t iter, int member,
			     const struct perf_dir *d)
{
	uint64_t path = (uint64_t)d->dir_id | (uint64_t)d->channel << 1;

	return mix64(mix64(size) ^ mix64(iter + 1) ^
		     ((uint64_t)member << 48) ^ (path << 56));
}

static inline uint64_t pattern_word(uint64_t seed, uint64_t index)
{
	return seed + index * 0x9e3779b97f4a7c15ULL;
}

static void pattern_fill(uint8_t *p, uint64_t len, uint64_t seed)
{
	uint64_t i, words = len / 8, w;

	for (i = 0; i < words; i++) {
		w = pattern_word(seed, i);
		memcpy(p + 8 * i, &w, 8);
	}
	if (len % 8) {
		w = pattern_word(seed, words);
		memcpy(p + 8 * words, &w, len % 8);
	}
}

static uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	uint64_t w = pattern_word(seed, off / 8);
	uint8_t b[8];

	memcpy(b, &w, 8);
	return b[off % 8];
}

/* Returns the offset of the first wrong byte, or len if all are right. */
static uint64_t pattern_find_bad(const uint8_t *p, uint64_t len, uint64_t seed)
{
	uint64_t i, words = len / 8, w, off;

	for (i = 0; i < words; i++) {
		memcpy(&w, p + 8 * i, 8);
		if (w != pattern_word(seed, i))
			break;
	}
	for (off = 8 * i; off < len; off++)
		if (p[off] != pattern_byte(seed, off))
			return off;
	return len;
}

static int verify_message(const struct perf_dir *d, const uint8_t *p,
			  uint64_t size, int got_size, uint64_t iter,
			  int member, bool bytes_too)
{
	uint64_t seed = pattern_seed(size, iter, member, d);
	uint64_t bad, nbad = 0, off;

	if (got_size < 0 || (uint64_t)got_size != size) {
		perf_err("size mismatch (%s): posted and sent %" PRIu64
			 " bytes, test() reported %d (iteration %" PRIu64
			 ", message %d, tag %d)",
			 d->name, size, got_size, iter, member,
			 PERF_TAG(d->sender_rank, member));
		return -EBADMSG;
	}
	if (!bytes_too)
		return 0;
	bad = pattern_find_bad(p, size, seed);
	if (bad == size)
		return 0;
	for (off = bad; off < size; off++)
		nbad += p[off] != pattern_byte(seed, off);
	perf_err("data mismatch (%s): size %" PRIu64 ", iteration %" PRIu64
		 ", message %d (tag %d), first bad byte at offset %" PRIu64
		 ": expected 0x%02x, got 0x%02x; %" PRIu64 " bad bytes",
		 d->name, size, iter, member,
		 PERF_TAG(d->sender_rank, member), bad, pattern_byte(seed, bad),
		 p[bad], nbad);
	return -EBADMSG;
}

/* ---- request slots ---- */

struct slot {
	bool busy;
	uint64_t iter;
	int posted;		/* messages posted so far (sends: one per member) */
	int pending;		/* requests not yet completed */
	void *req[PERF_MAX_GROUP];
};

struct stream {
	struct perf_net *net;
	struct perf_dir *dir;
	struct perf_plan plan;
	bool sender;
	uint64_t next;		/* next iteration to post */
	uint64_t completed;
	uint64_t oldest;	/* lowest iteration not yet completed */
	struct slot slots[NCCL_NET_MAX_REQUESTS];
	double overhead;	/* time spent filling and verifying */
	bool stamp_done;	/* bandwidth runs: note when it completes */
	double done_at;		/* when its last request completed */
};

static uint8_t *slot_data(struct stream *st, int slot, int member)
{
	return st->dir->buf +
	       ((uint64_t)slot * st->plan.group + member) * st->plan.size;
}

static void stream_init(struct stream *st, struct perf_net *net,
			struct perf_dir *dir, const struct perf_plan *plan,
			bool sender)
{
	memset(st, 0, sizeof(*st));
	st->net = net;
	st->dir = dir;
	st->plan = *plan;
	st->sender = sender;
}

static bool stream_done(const struct stream *st)
{
	return st->completed == st->plan.iters;
}

/*
 * Members go out last first, so a plugin matching grouped receives by
 * arrival order rather than by tag delivers them to the wrong buffers.
 */
static int send_post(struct stream *st, struct slot *sl, int idx, bool *progress)
{
	int group = st->plan.group;
	uint64_t size = st->plan.size;
	double t0;

	if (!sl->posted && st->plan.verify) {
		t0 = perf_now();
		for (int k = 0; k < group; k++)
			pattern_fill(slot_data(st, idx, k), st->plan.size,
				     pattern_seed(st->plan.size, sl->iter, k,
						  st->dir));
		st->overhead += perf_now() - t0;
	}
	while (sl->posted < group) {
		int k = group - 1 - sl->posted;
		void *req = NULL;
		int rc;

		size = st->plan.size + perf_fault_extra(st->dir->fault);
		rc = NET_CALL("isend",
			      perf_net_isend(st->net, st->dir->comm,
					     slot_data(st, idx, k), size,
					     PERF_TAG(st->dir->sender_rank, k),
					     st->dir->mhandle, &req));
		if (rc)
			return rc;
		if (!req)
			return 0;	/* not ready: NCCL retries later */
		sl->req[k] = req;
		sl->posted++;
		sl->pending++;
		*progress = true;
	}
	return 0;
}

static int recv_post(struct stream *st, struct slot *sl, int idx, bool *progress)
{
	void *data[PERF_MAX_GROUP], *mh[PERF_MAX_GROUP], *req = NULL;
	size_t sizes[PERF_MAX_GROUP];
	int tags[PERF_MAX_GROUP];
	int group = st->plan.group, rc;

	for (int k = 0; k < group; k++) {
		data[k] = slot_data(st, idx, k);
		/* larger receives overlap the next buffer, but only the
		 * message's bytes are ever written */
		sizes[k] = st->plan.recv_size;
		tags[k] = PERF_TAG(st->dir->sender_rank, k);
		mh[k] = st->dir->mhandle;
	}
	rc = NET_CALL("irecv", perf_net_irecv(st->net, st->dir->comm, group,
					      data, sizes, tags, mh, &req));
	if (rc || !req)
		return rc;
	sl->req[0] = req;
	sl->posted = group;
	sl->pending = 1;
	*progress = true;
	return 0;
}

/* Posts iterations until the ring is full or the plugin says "later". */
static int stream_post_batch(struct stream *st, bool *progress)
{
	while (st->next < st->plan.iters) {
		int idx = (int)(st->next % st->plan.window);
		struct slot *sl = &st->slots[idx];
		int rc;

		if (sl->busy && sl->iter != st->next)
			return 0;	/* ring full */
		if (!sl->busy) {
			memset(sl, 0, sizeof(*sl));
			sl->busy = true;
			sl->iter = st->next;
		}
		rc = st->sender ? send_post(st, sl, idx, progress)
				: recv_post(st, sl, idx, progress);
		if (rc)
			return rc;
		if (sl->posted < st->plan.group)
			return 0;
		st->next++;
	}
	return 0;
}

/*
 * The dereg-recv fault: the buffer of the receives just posted loses its
 * registration, so the peer's writes into it meet a stale key.  Done after
 * a whole batch of receives rather than the first, so at least the later
 * writes of the batch cannot have landed before it.
 */
static int drop_recv_mr(struct stream *st)
{
	struct perf_dir *d = st->dir;
	int rc;

	perf_warn("fault injection: deregistering the receive buffer (%s) after posting %" PRIu64 " receive(s)",
		  d->name, st->next);
	rc = NET_CALL("deregMr", perf_net_dereg_mr(st->net, d->comm,
						   d->mhandle));
	d->mhandle = NULL;
	d->mr_dropped = true;
	return rc;
}

static int stream_post(struct stream *st, bool *progress)
{
	int rc;

	/* after the fault no receive is posted: those out wait for the
	 * plugin to fail them */
	if (st->dir->mr_dropped)
		return 0;
	rc = stream_post_batch(st, progress);
	if (!rc && !st->sender && st->next &&
	    st->dir->fault == PERF_FAULT_DEREG_RECV)
		rc = drop_recv_mr(st);
	return rc;
}

static int recv_complete(struct stream *st, int idx, const int *sizes)
{
	struct slot *sl = &st->slots[idx];
	double t0 = perf_now();
	int rc = 0;

	for (int k = 0; k < st->plan.group && !rc; k++)
		rc = verify_message(st->dir, slot_data(st, idx, k),
				    st->plan.size, sizes[k], sl->iter, k,
				    st->plan.verify);
	st->overhead += perf_now() - t0;
	return rc;
}

static int test_slot(struct stream *st, int idx, bool *progress)
{
	struct slot *sl = &st->slots[idx];
	int sizes[PERF_MAX_GROUP];
	int nreq = st->sender ? st->plan.group : 1;
	int rc;

	for (int k = 0; k < nreq; k++) {
		int done = 0;

		if (!sl->req[k])
			continue;
		for (int j = 0; j < PERF_MAX_GROUP; j++)
			sizes[j] = -1;
		rc = NET_CALL("test", perf_net_test(st->net, sl->req[k], &done,
						    sizes));
		if (rc)
			return rc;
		if (!done)
			continue;
		sl->req[k] = NULL;
		sl->pending--;
		*progress = true;
		if (!st->sender) {
			rc = recv_complete(st, idx, sizes);
			if (rc)
				return rc;
		}
	}
	if (sl->posted == st->plan.group && !sl->pending) {
		sl->busy = false;
		st->completed++;
	}
	return 0;
}

static bool iter_complete(const struct stream *st, uint64_t it)
{
	const struct slot *sl = &st->slots[it % st->plan.window];

	return !sl->busy || sl->iter != it;
}

/*
 * One pass over the outstanding requests, oldest first.  Requests may
 * complete out of order, so the oldest is tracked apart from the count.
 */
static int stream_test(struct stream *st, bool *progress)
{
	uint64_t it;
	int rc;

	for (it = st->oldest; it <= st->next && it < st->plan.iters; it++) {
		int idx = (int)(it % st->plan.window);
		struct slot *sl = &st->slots[idx];

		if (!sl->busy || sl->iter != it || !sl->pending)
			continue;
		rc = test_slot(st, idx, progress);
		if (rc)
			return rc;
	}
	while (st->oldest < st->next && iter_complete(st, st->oldest))
		st->oldest++;
	return 0;
}

struct waiter {
	const struct perf_side *side;
	double last_progress;
	double peer_gone_at;	/* 0 while the bootstrap connection is open */
	unsigned idle;
	const char *what;
};

static void waiter_init(struct waiter *w, const struct perf_side *s,
			const char *what)
{
	w->side = s;
	w->last_progress = perf_now();
	w->peer_gone_at = 0;
	w->idle = 0;
	w->what = what;
}

/* Gives up when the plugin makes no progress for the timeout or the peer
 * is gone; yields meanwhile, since plugin threads may need the CPU. */
static int waiter_idle(struct waiter *w, bool progress)
{
	if (progress) {
		w->idle = 0;
		w->last_progress = perf_now();
		perf_watchdog_kick();
		return 0;
	}
	if (w->peer_gone_at <= 0 && ++w->idle % PERF_IDLE_CHECK)
		goto out;
	if (oob_peer_gone_long(w->side->oob, &w->peer_gone_at)) {
		perf_err("%s: peer closed the bootstrap connection (it died or failed)",
			 w->what);
		return -ECONNRESET;
	}
	if (w->peer_gone_at > 0)
		goto out;
	if (perf_now() - w->last_progress > w->side->params->timeout) {
		perf_err("%s: no progress for %u s", w->what,
			 w->side->params->timeout);
		return -ETIMEDOUT;
	}
out:
	sched_yield();
	return 0;
}

static int streams_run(const struct perf_side *s, struct stream **st, int n,
		       const char *what)
{
	struct waiter w;
	bool all_done = false;
	int rc, i;

	waiter_init(&w, s, what);
	while (!all_done) {
		bool progress = false;

		all_done = true;
		for (i = 0; i < n; i++) {
			if (stream_done(st[i]))
				continue;
			rc = stream_post(st[i], &progress);
			if (!rc)
				rc = stream_test(st[i], &progress);
			if (rc)
				return rc;
			if (!stream_done(st[i]))
				all_done = false;
			else if (st[i]->stamp_done)
				st[i]->done_at = perf_now();
		}
		if (!all_done) {
			rc = waiter_idle(&w, progress);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static struct stream *bw_stream(const struct perf_side *s, struct stream *st,
				struct perf_dir *d, uint64_t size, bool sender)
{
	struct perf_plan plan;

	perf_plan_size(s->params, size, d->group, &plan);
	stream_init(st, s->net, d, &plan, sender);
	st->stamp_done = true;
	return st;
}

int perf_run_bw(struct perf_side *s, struct perf_dir *send,
		struct perf_dir *recv, int nch, uint64_t size,
		struct perf_bw_times *times)
{
	struct stream *pool, *st[2 * PERF_MAX_CHANNELS];
	char what[64];
	int n = 0, rc;
	double t0, first;

	pool = calloc(2 * (size_t)nch, sizeof(*pool));
	if (!pool) {
		perf_err("cannot allocate the state of %d channel(s)", nch);
		return -ENOMEM;
	}
	/* both directions of a channel side by side: each pass serves all */
	for (int ch = 0; ch < nch; ch++) {
		if (send) {
			st[n] = bw_stream(s, &pool[n], &send[ch], size, true);
			n++;
		}
		if (recv) {
			st[n] = bw_stream(s, &pool[n], &recv[ch], size, false);
			n++;
		}
	}
	snprintf(what, sizeof(what), "bandwidth, size %" PRIu64, size);
	t0 = perf_now();
	rc = streams_run(s, st, n, what);
	times->elapsed = perf_now() - t0;
	/* the channels of the direction whose completion means arrival here:
	 * our receives, or our sends where we only send */
	first = times->elapsed;
	for (int i = 0; i < n; i++) {
		bool counted = recv ? !st[i]->sender : st[i]->sender;

		if (counted && st[i]->done_at > 0 && st[i]->done_at - t0 < first)
			first = st[i]->done_at - t0;
	}
	times->first_channel = first;
	free(pool);
	return rc;
}

/* Waits for one stream's single outstanding request. */
static int stream_wait(const struct perf_side *s, struct stream *st,
		       const char *what)
{
	return streams_run(s, &st, 1, what);
}

/*
 * Ping-pong with a window of one.  Each side posts its send first and then
 * the receive for the next message, as NCCL keeps receives posted ahead of
 * the data: the receive's announcement then travels right behind the data
 * instead of after it on the critical path.  Time spent filling and
 * checking patterns, on either side, is reported apart so the caller can
 * take it out of the round trip.
 */
int perf_run_latency(struct perf_side *s, struct perf_dir *send,
		     struct perf_dir *recv, bool initiator, uint64_t size,
		     uint32_t iters, struct perf_lat_times *times)
{
	struct perf_plan plan = {
		.size = size, .group = 1, .window = 1, .iters = iters,
		.recv_size = max_u64(size, s->params->recv_size),
		.verify = !s->params->unverified,
	};
	struct stream tx, rx;
	struct stream *both[2] = { &tx, &rx };
	bool progress = false;
	char what[64];
	double t0, round, now;
	int rc = 0;

	snprintf(what, sizeof(what), "latency, size %" PRIu64, size);
	stream_init(&tx, s->net, send, &plan, true);
	stream_init(&rx, s->net, recv, &plan, false);
	times->min_round = 0;
	t0 = round = perf_now();
	if (!initiator) {
		rx.plan.iters = 1;
		rc = stream_post(&rx, &progress);
	}
	for (uint32_t i = 0; i < iters && !rc; i++) {
		if (initiator) {
			/* send, then post the receive for the reply */
			tx.plan.iters = rx.plan.iters = i + 1;
			rc = streams_run(s, both, 2, what);
		} else {
			/* the receive for this round is already posted */
			rc = stream_wait(s, &rx, what);
			tx.plan.iters = i + 1;
			if (!rc)
				rc = stream_post(&tx, &progress);
			if (!rc && i + 1 < iters) {
				rx.plan.iters = i + 2;
				rc = stream_post(&rx, &progress);
			}
			if (!rc)
				rc = stream_wait(s, &tx, what);
		}
		/*
		 * Each round of either side spans one round trip: the
		 * initiator's from its send to the reply, the responder's
		 * from its reply to the next message.  The least is the
		 * path's, without the queues and wake-ups of the others.
		 * The responder's first is left out: it starts wherever
		 * its side left the barrier, before or after the first
		 * message came.
		 */
		now = perf_now();
		if (!rc && (initiator || i) &&
		    (!times->min_round || now - round < times->min_round))
			times->min_round = now - round;
		round = now;
	}
	times->elapsed = perf_now() - t0;
	times->overhead = tx.overhead + rx.overhead;
	return rc;
}
