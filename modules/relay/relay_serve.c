/* SPDX-License-Identifier: MIT */
/*
 * A relay: one thread per process that serves the relay port.  It takes
 * requests from origins and other relays, sets up the leg onwards
 * (relay_hop.c) before it accepts the leg in, then forwards every leg
 * message from the one to the other through registered bounce buffers,
 * several in flight, in order.  The control channels of both sides stay
 * open while the pair lives: they carry the notes (acknowledgements
 * towards the origin, the end of the connection onwards), and either one
 * ending is the route breaking, which the pair passes on by closing the
 * other.
 */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include "netaddr.h"
#include "relay_hop.h"
#include "relay_wire.h"

struct relay_setup {
	struct relay_setup *next;
	struct mesh_ctrl *up;		/* NULL once a pair took it */
	struct relay_msg req;
	int stage;
	struct relay_hop hop;
	bool hop_live;
	struct mesh_leg up_leg;
	void *up_comm;
	char from[UTIL_ADDR_STRLEN];
	struct mesh_addr src;		/* who sent it, port cleared */
	int64_t accepted_ns, deadline_ns;
	int64_t next_read_ns;		/* S_READ: no look before then */
};

/* How long after the last data a relay keeps polling without sleeping. */
#define RELAY_SPIN_NS 50000000

/*
 * A channel to the relay costs nothing to open without a key (the
 * service's nonce is public), so what one that has not sent its request
 * holds is bounded: a few per source address, a few dozen in all, the
 * oldest dropped first, and a short time to send it in.  A real origin
 * sends its request as soon as the channel is up, so it is read while
 * it is the newest and never the one dropped.
 */
#define RELAY_UNREAD_PER_SOURCE 4
#define RELAY_UNREAD_MAX 32
#define RELAY_REQUEST_NS 5000000000ll
/* An unread channel is looked at again after up to this long. */
#define RELAY_READ_BACKOFF_NS 16000000
/* Dropped channels are logged once, then summed up this often. */
#define RELAY_DROP_LOG_NS 5000000000ll

enum { S_READ, S_HOP, S_ACCEPT, S_FLUSH, S_REFUSED, S_END };

/* What step_all did: a setup went on, a pair moved data. */
enum { STEP_SETUP = 1, STEP_DATA = 2 };

struct bounce {
	void *req;
	size_t size;
};

struct relay_pair {
	struct relay_pair *next;
	unsigned int id;
	char desc[RELAY_ROUTE_MAX + 160];
	struct mesh_leg in_leg, out_leg;
	void *in_comm, *out_comm;
	char *buf;			/* the bounce buffers, buf_len */
	size_t buf_len;
	void *in_mh, *out_mh;
	int nb;
	size_t chunk;
	struct bounce *b;
	uint64_t rpost, rdone, spost, sdone;
	uint64_t chunks_due;		/* data messages before a header */
	bool in_closed, failed, ended;
	bool out_direct;		/* the leg out reaches the destination */
	atomic_uint_fast64_t bytes, msgs;
	/* the control channels: back towards the origin, on towards the
	 * destination; notes pass between them */
	struct relay_chan up, down;
	bool resumable;			/* the origin resumes: a channel that
					 * ends is the route breaking */
	bool down_up;			/* the side onwards said UP */
	bool down_bye;			/* the destination closed its end */
	bool up_orderly;		/* the side back said END first */
	bool ack_due, bye_due, end_noted;
	uint64_t ack, end_seq;
	int64_t end_wait_ns;		/* how long an END waits for UP */
	const char *broke;		/* why the route broke here */
	/* a channel to another relay (not to an end, which only speaks
	 * when NCCL drives it): KEEP notes each way, silence is a break */
	bool up_relay, down_relay;
	int64_t up_heard_ns, down_heard_ns, keep_sent_ns, silence_ns;
	/* the first relay, whose way back is the origin itself: its
	 * channel and its leg ending together is the origin's process
	 * gone (GONE onwards), one of them alone a break (a new route) */
	bool in_failed, gone;
	int64_t up_lost_ns, in_failed_ns;
	/* metrics: the origin as it names itself, the destination's
	 * address */
	char m_origin[64], m_dest[UTIL_ADDR_STRLEN];
};

/* What the pairs that ended forwarded, per origin and destination; the
 * last entry takes every pair past the others (origin and destination
 * "other"), so that strangers' names cannot grow the table. */
#define RELAY_FLOWS_MAX 256

struct relay_flow {
	char origin[64], dest[UTIL_ADDR_STRLEN];
	uint64_t bytes, msgs;
};

/* How long the first relay waits for the other sign of the origin's end. */
#define RELAY_VERDICT_NS 1000000000ll

/* How often a relay tells the relays next to it that it is there. */
#define RELAY_KEEP_NS 1000000000ll

/* How long an orderly end waits for the side onwards to take its note. */
#define RELAY_END_NOTE_NS 5000000000ll
/* Notes read from one channel per step, at most. */
#define RELAY_NOTES_PER_STEP 64

/* ---- forwarding ---- */

/*
 * The bounce buffers are anonymous pages from the kernel, not malloc's:
 * nothing writes them at setup (glibc's MALLOC_PERTURB_ fills every
 * block malloc hands out, the ones it maps itself too: 32 MiB per
 * connection by default), and a page costs memory only once a message
 * filled it, unless a leg's registration pins it (verbs does), so a pair
 * that carries small messages holds a few pages per buffer, not chunks x
 * chunk_size.
 */
static char *bounce_map(size_t len)
{
	void *b = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return b == MAP_FAILED ? NULL : b;
}

static void pair_free(struct relay_pair *p)
{
	if (p->in_mh)
		p->in_leg.module->dereg_mr(p->in_comm, p->in_mh);
	if (p->out_mh)
		p->out_leg.module->dereg_mr(p->out_comm, p->out_mh);
	if (p->in_comm)
		p->in_leg.module->close_recv(p->in_comm);
	if (p->out_comm)
		p->out_leg.module->close_send(p->out_comm);
	/* the sides see their channel end: the route broke, unless they
	 * were told the end */
	relay_chan_close(&p->up);
	relay_chan_close(&p->down);
	if (p->buf)
		munmap(p->buf, p->buf_len);
	free(p->b);
	free(p);
}

/* The labels its counters get: the origin's name (from the wire: cut
 * at its field's end, escaped by the core) and the destination's first
 * address without the port. */
static void pair_labels(struct relay_pair *p, const struct relay_setup *s)
{
	struct mesh_addr a[4];
	int n = relay_host->handle_addrs(relay_host, s->req.handle, a, 4);

	snprintf(p->m_origin, sizeof(p->m_origin), "%.*s",
		 (int)sizeof(s->req.origin), s->req.origin[0] ?
		 s->req.origin : s->from);
	if (n > 0) {
		a[0].port = 0;
		util_addr_str(&a[0], p->m_dest, sizeof(p->m_dest));
	} else {
		snprintf(p->m_dest, sizeof(p->m_dest), "?");
	}
}

/* Adds an ended pair's counts to its flow; under x->lock. */
static void flow_add(struct relay_ctx *x, const struct relay_pair *p)
{
	struct relay_flow *f = NULL;

	if (!x->flows) {
		x->flows = calloc(RELAY_FLOWS_MAX, sizeof(*x->flows));
		if (!x->flows)
			return;		/* the totals go without this one */
	}
	for (int i = 0; i < x->nflows && !f; i++)
		if (!strcmp(x->flows[i].origin, p->m_origin) &&
		    !strcmp(x->flows[i].dest, p->m_dest))
			f = &x->flows[i];
	if (!f && x->nflows < RELAY_FLOWS_MAX - 1) {
		f = &x->flows[x->nflows++];
		snprintf(f->origin, sizeof(f->origin), "%s", p->m_origin);
		snprintf(f->dest, sizeof(f->dest), "%s", p->m_dest);
	}
	if (!f) {
		f = &x->flows[RELAY_FLOWS_MAX - 1];
		snprintf(f->origin, sizeof(f->origin), "other");
		snprintf(f->dest, sizeof(f->dest), "other");
	}
	f->bytes += atomic_load(&p->bytes);
	f->msgs += atomic_load(&p->msgs);
}

/* One origin-destination pair's three counters. */
static void flow_emit(mesh_counter_fn emit, void *arg, const char *origin,
		      const char *dest, uint64_t bytes, uint64_t msgs)
{
	emit(arg, &(struct mesh_counter){ .name = "relayed_bytes",
		.peer = origin, .direction = MESH_DIR_RECV, .value = bytes });
	emit(arg, &(struct mesh_counter){ .name = "relayed_bytes",
		.peer = dest, .direction = MESH_DIR_SEND, .value = bytes });
	emit(arg, &(struct mesh_counter){ .name = "relayed_messages",
		.peer = dest, .direction = MESH_DIR_SEND, .value = msgs });
}

void relay_serve_counters(struct relay_ctx *x, mesh_counter_fn emit,
			  void *arg)
{
	uint64_t n = 0;
	bool other;

	pthread_mutex_lock(&x->lock);
	for (struct relay_pair *p = x->pairs; p; p = p->next, n++)
		flow_emit(emit, arg, p->m_origin, p->m_dest,
			  atomic_load(&p->bytes), atomic_load(&p->msgs));
	for (int i = 0; x->flows && i < RELAY_FLOWS_MAX; i++) {
		const struct relay_flow *f = &x->flows[i];

		other = i == RELAY_FLOWS_MAX - 1;
		if (i < x->nflows || (other && f->msgs))
			flow_emit(emit, arg, f->origin, f->dest, f->bytes,
				  f->msgs);
	}
	if (x->serving) {
		emit(arg, &(struct mesh_counter){ .name = "relay_pairs",
			.kind = MESH_COUNTER_GAUGE, .value = n });
		emit(arg, &(struct mesh_counter){ .name = "relay_refused",
			.value = mesh_count_read(&x->refused) });
	}
	pthread_mutex_unlock(&x->lock);
}

static struct relay_pair *pair_new(struct relay_ctx *x,
				   struct relay_setup *s)
{
	struct relay_pair *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->id = atomic_fetch_add(&x->next_id, 1);
	p->in_leg = s->up_leg;
	p->in_comm = s->up_comm;
	p->out_leg = s->hop.leg;
	p->out_comm = s->hop.comm;
	p->out_direct = s->hop.direct;
	s->up_comm = s->hop.comm = NULL;
	p->up.ctrl = s->up;
	s->up = NULL;
	relay_hop_take(&s->hop, &p->down);
	p->resumable = s->req.flags & RELAY_FLAG_RESUMABLE;
	/* visited: the origin, the relays before, this one */
	p->up_relay = s->req.nvisited > 2;
	p->down_relay = !p->out_direct;
	p->up_heard_ns = p->down_heard_ns = relay_now_ns();
	p->silence_ns = (int64_t)x->conf.timeout_ms * 1000000;
	p->nb = x->conf.chunks;
	p->chunk = x->conf.chunk;
	snprintf(p->desc, sizeof(p->desc), "%s from %s (%s) -> %s",
		 s->req.origin, s->from, p->in_leg.module->name, s->hop.route);
	pair_labels(p, s);
	p->buf_len = p->chunk * (size_t)p->nb;
	p->buf = bounce_map(p->buf_len);
	p->b = calloc((size_t)p->nb, sizeof(*p->b));
	if (!p->buf || !p->b ||
	    p->in_leg.module->reg_mr(p->in_comm, p->buf, p->buf_len,
				     MESH_PTR_HOST, &p->in_mh) ||
	    p->out_leg.module->reg_mr(p->out_comm, p->buf, p->buf_len,
				      MESH_PTR_HOST, &p->out_mh)) {
		MESH_WARN("pair %u (%s): cannot set up %d bounce buffers of "
			  "%zu bytes", p->id, p->desc, p->nb, p->chunk);
		pair_free(p);
		return NULL;
	}
	/* notes may come this way from now: the leg's accept is done */
	relay_chan_note(&p->up, RELAY_NOTE_UP, 0);
	MESH_INFO("pair %u: forwarding %s", p->id, p->desc);
	return p;
}

static int test_one(void *req, int *done, size_t *size)
{
	int sz = 0, err = ((struct mesh_request *)req)->test(req, done, &sz);

	*size = (size_t)sz;
	return err;
}

/*
 * Follows the framing of what passes (a header, then its chunks) for one
 * thing only: the origin's end marker (true), after which the leg in is
 * over and the receives still posted on it are dropped, not failed.  The
 * last relay keeps the marker: closing the leg out tells the destination,
 * which then has no marker to miss when its receiver closed first.
 */
static bool frame(struct relay_pair *p, const struct bounce *b,
		  const char *data)
{
	struct relay_hdr h;

	if (p->chunks_due) {
		p->chunks_due--;
		return false;
	}
	if (b->size < sizeof(h))
		return false;
	memcpy(&h, data, sizeof(h));
	if (h.magic != RELAY_HDR_MAGIC)
		return false;
	if (h.flags & RELAY_HDR_END) {
		p->ended = p->in_closed = true;
		p->end_seq = (uint32_t)(h.seq - 1);
		return true;
	}
	p->chunks_due = relay_hdr_chunks(&h);
	return false;
}

/*
 * The notes: acknowledgements and the destination's BYE from onwards go
 * back, UP from onwards opens the way for the END note, END from back
 * says its channel ends in order (as BYE does for the one onwards).
 * Anything else, or a channel that ends when it should not, is the route
 * breaking (p->broke).
 */
static void pair_notes(struct relay_pair *p)
{
	struct relay_note n;
	const char *why;
	int r = 1;

	/* a first route's notes' channel to the destination, dialed now */
	r = relay_chan_connect(&p->down, &why);
	if (r && r != -EAGAIN) {
		p->broke = why;
		return;
	}
	r = 1;
	for (int i = 0; i < RELAY_NOTES_PER_STEP && relay_chan_ctrl(&p->down) &&
			!p->broke && r > 0; i++) {
		r = relay_chan_read(&p->down, &n, &why);
		if (r > 0)
			p->down_heard_ns = relay_now_ns();
		if (r > 0 && n.type == RELAY_NOTE_KEEP && p->down_relay) {
			continue;
		} else if (r > 0 && n.type == RELAY_NOTE_ACK && n.seq > p->ack) {
			p->ack = n.seq;
			p->ack_due = true;
		} else if (r > 0 && n.type == RELAY_NOTE_UP) {
			p->down_up = true;
		} else if (r > 0 && n.type == RELAY_NOTE_BYE) {
			p->down_bye = p->bye_due = true;
		} else if (r > 0 && n.type != RELAY_NOTE_ACK) {
			/* GONE only ever goes onwards */
			p->broke = "the way on sent a note out of place";
		} else if (r < 0) {
			/* after BYE: the origin's end still comes this way
			 * (nothing to pass on), and then the pair ends */
			relay_chan_close(&p->down);
			if (!p->down_bye)
				p->broke = "the way on ended";
		}
	}
	r = 1;
	for (int i = 0; i < RELAY_NOTES_PER_STEP && p->up.ctrl && !p->broke &&
			r > 0; i++) {
		r = relay_chan_read(&p->up, &n, &why);
		if (r > 0)
			p->up_heard_ns = relay_now_ns();
		if (r > 0 && n.type == RELAY_NOTE_KEEP && p->up_relay) {
			continue;
		} else if (r > 0 && n.type == RELAY_NOTE_END) {
			/* the origin closed after message seq: onwards the
			 * same, even if its leg ends without its marker */
			p->up_orderly = true;
			p->end_seq = n.seq;
		} else if (r > 0 && n.type == RELAY_NOTE_GONE && p->up_relay) {
			p->gone = true;
			p->broke = "the origin is gone";
		} else if (r > 0) {
			p->broke = "the way back sent a note out of place";
		} else if (r < 0) {
			/* its leg decides in order: what came before the
			 * end goes on; a resumable route is over now, or,
			 * from the origin itself, once its leg said too */
			relay_chan_close(&p->up);
			if (p->resumable && !p->up_orderly && p->up_relay)
				p->broke = "the way back ended";
			else if (p->resumable && !p->up_orderly)
				p->up_lost_ns = relay_now_ns();
		}
	}
	if (p->ack_due && p->up.ctrl &&
	    !relay_chan_note(&p->up, RELAY_NOTE_ACK, p->ack))
		p->ack_due = false;
	if (p->bye_due && !p->ack_due && p->up.ctrl &&
	    !relay_chan_note(&p->up, RELAY_NOTE_BYE, 0))
		p->bye_due = false;
}

/*
 * Between two relays both sides always run, so a channel that brings
 * nothing for timeout_ms has stalled (its packets dropped on the way, a
 * NAT table flushed), where its end would only show after the kernel's
 * retransmissions gave up: the route is over, its ends set up another.
 */
static void pair_keepalive(struct relay_pair *p)
{
	int64_t now = relay_now_ns();

	if (!p->resumable)
		return;
	if (now - p->keep_sent_ns >= RELAY_KEEP_NS) {
		if (p->up_relay && p->up.ctrl)
			relay_chan_note(&p->up, RELAY_NOTE_KEEP, 0);
		if (p->down_relay && relay_chan_ctrl(&p->down))
			relay_chan_note(&p->down, RELAY_NOTE_KEEP, 0);
		p->keep_sent_ns = now;
	}
	if (p->up_relay && p->up.ctrl && now - p->up_heard_ns > p->silence_ns)
		p->broke = "the way back went silent for timeout_ms";
	if (p->down_relay && relay_chan_ctrl(&p->down) &&
	    now - p->down_heard_ns > p->silence_ns)
		p->broke = "the way on went silent for timeout_ms";
}

/*
 * The first relay's verdict on the origin.  A process that ends closes
 * all its sockets: its channel and its leg to here end together, and no
 * new route will come (GONE, so that the destination fails now, not after
 * outage_ms).  A network that breaks them (a reset, a relay on the way)
 * leaves the origin running: one of them alone is a break, and the origin
 * sets up a new route.  1 while the verdict waits.
 */
static int pair_origin(struct relay_pair *p)
{
	int64_t now = relay_now_ns();

	if (!p->resumable || p->up_relay || p->ended || p->up_orderly ||
	    p->broke)
		return 0;
	if (p->in_failed && !p->in_failed_ns)
		p->in_failed_ns = now;
	if (p->up_lost_ns && p->in_failed) {
		p->gone = true;
		p->broke = "the origin is gone (its channel and its leg ended "
			   "together)";
		return 0;
	}
	if (p->up_lost_ns && now - p->up_lost_ns > RELAY_VERDICT_NS)
		p->broke = "the way back ended";
	else if (p->in_failed_ns && now - p->in_failed_ns > RELAY_VERDICT_NS)
		p->broke = "the leg in failed";
	return !p->broke && (p->up_lost_ns || p->in_failed_ns);
}

/* The origin is gone: the side onwards hears it before its channel ends. */
static void pair_gone(struct relay_pair *p)
{
	int64_t until = relay_now_ns() + RELAY_VERDICT_NS;

	if (!relay_chan_ctrl(&p->down) ||
	    relay_chan_note(&p->down, RELAY_NOTE_GONE, 0))
		return;
	while (relay_chan_flush(&p->down) == -EAGAIN && relay_now_ns() < until)
		;
}

/* Once everything before the origin's end went on: the side onwards is
 * told, so that its channel ending after this is no break.  1 while
 * that waits. */
static int pair_end_note(struct relay_pair *p)
{
	int64_t now = relay_now_ns();
	int err;

	if (!p->ended)
		return 0;
	if (!p->end_wait_ns)
		p->end_wait_ns = now + RELAY_END_NOTE_NS;
	if (now > p->end_wait_ns)
		return 0;
	if (!p->end_noted && p->down_up) {
		err = relay_chan_note(&p->down, RELAY_NOTE_END, p->end_seq);
		p->end_noted = err != -EAGAIN;
	}
	if (!p->end_noted && (relay_chan_ctrl(&p->down) || p->down.rj))
		return 1;
	if (relay_chan_flush(&p->down) == -EAGAIN)
		return 1;
	/* the leg in stays open until the side back closes its own: its
	 * module may still owe the marker's acknowledgement */
	return p->up.ctrl != NULL;
}

/* Moves what it can; 1 when anything moved, -1 once the pair is over. */
static int pair_step(struct relay_pair *p)
{
	uint64_t before = p->rpost + p->rdone + p->spost + p->sdone;
	int done, tag = RELAY_LEG_TAG, err;
	size_t size;

	while (!p->in_closed && p->rpost - p->sdone < (uint64_t)p->nb) {
		struct bounce *b = &p->b[p->rpost % (uint64_t)p->nb];
		void *dst = p->buf + (p->rpost % (uint64_t)p->nb) * p->chunk;

		size = p->chunk;
		err = p->in_leg.module->irecv(p->in_comm, 1, &dst, &size, &tag,
					      &p->in_mh, &b->req);
		if (err || !b->req) {
			p->in_closed = p->in_failed = err != 0;
			break;
		}
		p->rpost++;
	}
	while (!p->in_closed && p->rdone < p->rpost) {
		struct bounce *b = &p->b[p->rdone % (uint64_t)p->nb];

		/* a failed receive is the origin side closing or gone:
		 * what came is still forwarded, then the leg out closes */
		if (test_one(b->req, &done, &size)) {
			p->in_closed = p->in_failed = true;
			break;
		}
		if (!done)
			break;
		b->size = size;
		/* the origin's end goes on to the next relay, and stops
		 * at the last one: the leg to the destination closes as
		 * orderly once everything before it went on */
		if (frame(p, b, p->buf + (p->rdone % (uint64_t)p->nb) *
					     p->chunk)) {
			p->rdone += !p->out_direct;
			break;
		}
		p->rdone++;
	}
	while (!p->failed && p->spost < p->rdone) {
		struct bounce *b = &p->b[p->spost % (uint64_t)p->nb];
		void *src = p->buf + (p->spost % (uint64_t)p->nb) * p->chunk;

		b->req = NULL;
		err = p->out_leg.module->isend(p->out_comm, src, b->size,
					       RELAY_LEG_TAG, p->out_mh,
					       &b->req);
		if (err)
			p->failed = true;
		if (err || !b->req)
			break;
		p->spost++;
	}
	while (!p->failed && p->sdone < p->spost) {
		struct bounce *b = &p->b[p->sdone % (uint64_t)p->nb];

		if (test_one(b->req, &done, &size)) {
			p->failed = true;
			break;
		}
		if (!done)
			break;
		atomic_fetch_add(&p->bytes, size);
		atomic_fetch_add(&p->msgs, 1);
		p->sdone++;
	}
	pair_notes(p);
	pair_keepalive(p);
	if (!p->failed && pair_origin(p))
		return 0;
	if (p->up_orderly && p->in_failed)
		p->ended = true;
	if (p->gone)
		pair_gone(p);
	if (p->failed || p->broke)
		return -1;
	if (p->in_closed && p->sdone == p->rdone)
		return pair_end_note(p) ? 0 : -1;
	return p->rpost + p->rdone + p->spost + p->sdone != before;
}

/* ---- setup ---- */

static int respond(struct relay_setup *s, int status, uint32_t flags,
		   const char *text)
{
	struct relay_msg m = { .type = RELAY_MSG_RESP, .status = status,
			       .flags = flags, .pos = s->hop.pos };
	uint8_t buf[RELAY_MSG_MAX];

	snprintf(m.text, sizeof(m.text), "%s", text);
	return s->up->send(s->up, buf, relay_msg_encode(&m, buf));
}

static void refuse(struct relay_ctx *x, struct relay_setup *s, int err,
		   const char *why)
{
	/* what answered at the destination's port, for this log alone */
	const char *told = s->hop.aside[0] ? "; not told: " : "";

	/* the destination's own answer to a route that replaces a broken
	 * one (it closed, or its process is gone) is no refusal of ours */
	if ((err == -ESRCH || err == -ECONNREFUSED) &&
	    s->req.flags & RELAY_FLAG_RESUME)
		MESH_INFO("no new route for %s (%s): %s%s%s", s->req.origin,
			  s->from, why, told, s->hop.aside);
	else
		MESH_WARN("refused to relay for %s (%s): %s%s%s",
			  s->req.origin[0] ? s->req.origin : "?", s->from,
			  why, told, s->hop.aside);
	mesh_count(&x->refused, 1);
	respond(s, -err, 0, why);
	s->stage = S_REFUSED;
}

/* The leg in: this host's device of the module the origin side chose. */
static int up_leg(struct relay_setup *s)
{
	for (int r = 0; r < 64; r++)
		if (!relay_host->leg_of_rail(relay_host, r, s->req.leg,
					     &s->up_leg))
			return 0;
	return -ENOPROTOOPT;
}

/*
 * Ends a channel that brought no usable request.  Anyone can open such
 * channels, so the log gets the first one and then a sum per interval,
 * never a line each.
 */
static void drop_unread(struct relay_ctx *x, struct relay_setup *s,
			const char *why)
{
	int64_t now = relay_now_ns();

	s->stage = S_END;
	x->unread_dropped++;
	if (!x->drop_log_ns || now - x->drop_log_ns >= RELAY_DROP_LOG_NS) {
		if (x->drop_log_count)
			MESH_WARN("ended %llu more channels that brought no "
				  "request (too many waiting, too slow, not a "
				  "request, closed)",
				  (unsigned long long)x->drop_log_count);
		else
			MESH_WARN("a channel from %s: %s", s->from, why);
		x->drop_log_ns = now;
		x->drop_log_count = 0;
		return;
	}
	x->drop_log_count++;
}

/*
 * Before a new channel s waits for its request: the oldest unread one of
 * its source goes when the source has its share, and the oldest of all
 * when all are taken.  The list is newest first, so the last match is the
 * oldest.
 */
static void bound_unread(struct relay_ctx *x, struct relay_setup *s)
{
	struct relay_setup *oldest_src = NULL, *oldest = NULL;
	int nsrc = 0, n = 0;

	for (struct relay_setup *o = x->setups; o; o = o->next) {
		if (o->stage != S_READ)
			continue;
		n++;
		oldest = o;
		if (util_addr_same_source(&o->src, &s->src)) {
			nsrc++;
			oldest_src = o;
		}
	}
	if (nsrc >= RELAY_UNREAD_PER_SOURCE)
		drop_unread(x, oldest_src, "its source has too many channels "
			    "waiting for their request");
	else if (n >= RELAY_UNREAD_MAX)
		drop_unread(x, oldest, "too many channels waiting for their "
			    "request");
}

static void read_request(struct relay_ctx *x, struct relay_setup *s)
{
	const struct relay_conf *c = &x->conf;
	struct mesh_addr dest[16];
	char why[256], a[UTIL_ADDR_STRLEN];
	const struct mesh_addr *out;
	const struct relay_route *alts[RELAY_ALTS_MAX];
	uint8_t buf[RELAY_MSG_MAX];
	const char *bad;
	int64_t now = relay_now_ns(), wait;
	int n, nd, nalt = 0;
	size_t len;

	if (now < s->next_read_ns)
		return;
	n = s->up->recv(s->up, buf, sizeof(buf));
	if (n == -EAGAIN && now - s->accepted_ns > RELAY_REQUEST_NS) {
		drop_unread(x, s, "no request in time");
		return;
	}
	if (n == -EAGAIN) {
		/* a real request comes at once: a channel that brought
		 * none is looked at less and less often */
		wait = (now - s->accepted_ns) / 4;
		s->next_read_ns = now + (wait < RELAY_READ_BACKOFF_NS ? wait :
					 RELAY_READ_BACKOFF_NS);
		return;
	}
	bad = n < 0 ? "the channel failed" :
		      relay_msg_decode(buf, (size_t)n, &s->req);
	if (!bad && s->req.type != RELAY_MSG_REQ)
		bad = "not a relay request";
	if (bad) {
		drop_unread(x, s, bad);
		return;
	}
	nd = relay_host->handle_addrs(relay_host, s->req.handle, dest, 16);
	out = nd > 0 ? relay_conf_outsider(c, dest, nd) : NULL;
	if (nd <= 0) {
		refuse(x, s, -EINVAL, "the destination handle is not valid");
	} else if (out) {
		snprintf(why, sizeof(why), "destination %s is outside the "
			 "cluster (relay.members)",
			 util_addr_str(out, a, sizeof(a)));
		refuse(x, s, -EACCES, why);
	} else if (s->req.nvisited >= RELAY_HOPS_MAX ||
		   s->req.hops_left < 0) {
		refuse(x, s, -ELOOP, "the route is longer than the hop limit");
	} else if (up_leg(s)) {
		snprintf(why, sizeof(why), "%s has no module '%s'", c->name,
			 s->req.leg);
		refuse(x, s, -ENOPROTOOPT, why);
	} else {
		for (int i = 0; i < s->req.nvisited; i++)
			if (!strcmp(s->req.visited[i], c->name)) {
				refuse(x, s, -ELOOP, "the route loops back here");
				return;
			}
		snprintf(s->req.visited[s->req.nvisited++], RELAY_NAME_MAX,
			 "%s", c->name);
		/* a request that names no path takes this relay's own
		 * explicit routes for the destination (a gateway's "the
		 * other DC via its gateway"), less the relays it passed */
		if (!s->req.npath)
			nalt = relay_conf_routes(c, dest, nd, alts,
						 RELAY_ALTS_MAX);
		/* the route so far, for the destination's log line */
		len = strlen(s->req.text);
		snprintf(s->req.text + len, sizeof(s->req.text) - len,
			 " -(%s)-> %s", s->req.leg, c->name);
		relay_hop_init(&s->hop, x, &s->req, alts, nalt);
		s->hop_live = true;
		s->stage = S_HOP;
	}
}

/* One step of a setup; true when it went on to another stage. */
static bool setup_step(struct relay_ctx *x, struct relay_setup *s)
{
	int stage = s->stage, err;

	if (s->stage != S_END && relay_now_ns() > s->deadline_ns) {
		MESH_WARN("setup for %s (%s) did not finish in time",
			  s->req.origin, s->from);
		s->stage = S_END;
	}
	switch (s->stage) {
	case S_READ:
		read_request(x, s);
		break;
	case S_HOP:
		err = relay_hop_step(&s->hop);
		if (err == -EAGAIN)
			break;
		if (err) {
			/* a route whose next relay is not listed here
			 * leaves nothing tried, so nothing noted */
			if (!s->hop.tried[0] && s->req.npath)
				snprintf(s->hop.tried, sizeof(s->hop.tried),
					 "the route's next relay '%s' is not "
					 "in %s's relay.relays",
					 s->req.path[0], x->conf.name);
			refuse(x, s, err, s->hop.tried[0] ? s->hop.tried :
			       "no module or relay here reaches it");
			break;
		}
		respond(s, 0, s->hop.flags, s->hop.route);
		if (s->req.flags & RELAY_FLAG_RESUME) {
			pthread_mutex_lock(&x->lock);
			x->reroutes++;
			pthread_mutex_unlock(&x->lock);
		}
		s->stage = S_ACCEPT;
		break;
	case S_ACCEPT:
		err = s->up_leg.module->accept(s->up_leg.mctx, s->up_leg.dev,
					       s->up, &s->up_comm);
		if (err && err != -EAGAIN) {
			MESH_WARN("setup for %s (%s): %s did not accept the "
				  "leg in", s->req.origin, s->from,
				  s->up_leg.module->name);
			s->stage = S_END;
		} else if (s->up_comm) {
			s->stage = S_FLUSH;
		}
		break;
	case S_FLUSH:
	case S_REFUSED:
		err = relay_host->ctrl_flush(relay_host, s->up);
		if (err == -EAGAIN)
			break;
		if (!err && s->stage == S_FLUSH) {
			struct relay_pair *p = pair_new(x, s);

			if (p) {
				pthread_mutex_lock(&x->lock);
				p->next = x->pairs;
				x->pairs = p;
				pthread_mutex_unlock(&x->lock);
			}
		}
		s->stage = S_END;
		break;
	}
	return s->stage != stage;
}

static void setup_free(struct relay_setup *s)
{
	if (s->up_comm)
		s->up_leg.module->close_recv(s->up_comm);
	else if (s->stage == S_ACCEPT)
		s->up_leg.module->abandon(s->up_leg.mctx, s->up);
	if (s->hop_live)
		relay_hop_free(&s->hop);
	if (s->up)
		relay_host->ctrl_close(relay_host, s->up);
	free(s);
}

static void accept_new(struct relay_ctx *x)
{
	struct mesh_ctrl *ctrl;

	while (relay_host->serve_accept(relay_host, &ctrl) == 0) {
		struct relay_setup *s = calloc(1, sizeof(*s));

		if (!s) {
			relay_host->ctrl_close(relay_host, ctrl);
			return;
		}
		s->up = ctrl;
		util_addr_str(ctrl->remote, s->from, sizeof(s->from));
		s->src = *ctrl->remote;
		s->src.port = 0;
		s->accepted_ns = relay_now_ns();
		/* the whole route may take the timeout at every hop */
		s->deadline_ns = s->accepted_ns +
				 (int64_t)x->conf.timeout_ms * 2000000;
		bound_unread(x, s);
		s->next = x->setups;
		x->setups = s;
	}
}

/* ---- the thread ---- */

/*
 * Steps everything once; STEP_* for what went on.  Setups that only wait
 * (for a request, an answer, a flush) are no work: the thread sleeps
 * between looks at them as when it is idle.
 */
static int step_all(struct relay_ctx *x)
{
	struct relay_setup **sp = &x->setups;
	struct relay_pair **pp = &x->pairs;
	int busy = 0;

	accept_new(x);
	while (*sp) {
		struct relay_setup *s = *sp;

		if (setup_step(x, s) && s->stage != S_END)
			busy |= STEP_SETUP;
		if (s->stage == S_END) {
			*sp = s->next;
			setup_free(s);
		} else {
			sp = &s->next;
		}
	}
	while (*pp) {
		struct relay_pair *p = *pp;
		int r = pair_step(p);

		busy |= r > 0 ? STEP_DATA : 0;
		if (r < 0) {
			MESH_INFO("pair %u: %s after %llu bytes in %llu "
				  "messages (%s)", p->id, p->failed ?
				  "the leg out failed" : p->broke ? p->broke :
				  p->ended ? "closed by the origin" :
				  "the leg in ended",
				  (unsigned long long)p->bytes,
				  (unsigned long long)p->msgs, p->desc);
			pthread_mutex_lock(&x->lock);
			*pp = p->next;
			x->pairs_done++;
			x->bytes_done += p->bytes;
			flow_add(x, p);
			pthread_mutex_unlock(&x->lock);
			pair_free(p);
		} else {
			pp = &p->next;
		}
	}
	return busy;
}

static void *serve_thread(void *arg)
{
	struct relay_ctx *x = arg;
	int64_t busy_ns = 0, now;
	long idle_ns = 0;
	int did;

	while (!atomic_load(&x->stop)) {
		now = relay_now_ns();
		did = step_all(x);
		if (did) {
			/* only data makes the thread keep looking: a setup
			 * that went on is looked at again at once */
			if (did & STEP_DATA)
				busy_ns = now;
			idle_ns = 0;
			continue;
		}
		/* a pair that moved data lately is likely to again soon
		 * (a ping-pong, the next collective): keep looking, as
		 * NCCL's proxy threads do; a quiet relay backs off to a
		 * millisecond and costs nothing */
		if (now - busy_ns < RELAY_SPIN_NS) {
			sched_yield();
			continue;
		}
		idle_ns = idle_ns ? idle_ns * 2 : 10000;
		if (idle_ns > 1000000)
			idle_ns = 1000000;
		nanosleep(&(struct timespec){ 0, idle_ns }, NULL);
	}
	while (x->setups) {
		struct relay_setup *s = x->setups;

		x->setups = s->next;
		setup_free(s);
	}
	while (x->pairs) {
		struct relay_pair *p = x->pairs;

		x->pairs = p->next;
		pair_free(p);
	}
	return NULL;
}

int relay_serve_start(struct relay_ctx *x)
{
	int err = relay_host->serve(relay_host, x->conf.port);

	/* several ranks on a host: one serves, the others use it */
	if (err == -EADDRINUSE && !x->conf.serve_required) {
		MESH_INFO("port %d is served by another process on this host; "
			  "this one relays nothing", x->conf.port);
		return 0;
	}
	if (err == -EADDRINUSE)
		MESH_WARN("port %d is served by another process on this host, "
			  "and relay.serve_required is set", x->conf.port);
	if (err)
		return err;	/* else the core said why */
	err = -pthread_create(&x->thread, NULL, serve_thread, x);
	if (err)
		return err;
	x->serving = true;
	MESH_INFO("relay %s serves port %d", x->conf.name, x->conf.port);
	return 0;
}

void relay_serve_stop(struct relay_ctx *x)
{
	if (!x->serving)
		return;
	atomic_store(&x->stop, true);
	pthread_join(x->thread, NULL);
	x->serving = false;
}

/* The relays this host would use, each with the module and address that
 * reach it or why none does, and the explicit routes. */
static size_t report_routes(struct relay_ctx *x, char *buf, size_t cap)
{
	const struct relay_conf *c = &x->conf;
	size_t len = 0;

#define ADD(...) do { if (len < cap) len += (size_t)snprintf(buf + len, \
		cap - len, __VA_ARGS__); } while (0)
	ADD("relay %s: port %d, max_hops %d, %d members, chunk %zu x %d\n",
	    c->name, c->port, c->max_hops, c->nmembers, c->chunk, c->chunks);
	for (int i = 0; i < c->npeers; i++) {
		const struct relay_peer *p = &c->peers[i];
		struct mesh_leg leg;
		char why[512], a[UTIL_ADDR_STRLEN];

		if (!strcmp(p->name, c->name)) {
			ADD("  via %s: this host\n", p->name);
			continue;
		}
		if (relay_host->leg_to_addrs(relay_host, -1, p->addrs,
					     p->naddrs, &leg, why, sizeof(why)))
			ADD("  via %s: unreachable from here: %s\n", p->name,
			    why);
		else
			ADD("  via %s: %s on rail %d, dialing %s%s\n", p->name,
			    leg.module->name, leg.rail,
			    util_addr_str(&p->addrs[0], a, sizeof(a)),
			    p->naddrs > 1 ? " (and more)" : "");
	}
	for (int i = 0; i < c->nroutes; i++) {
		const struct relay_route *r = &c->routes[i];
		char a[UTIL_ADDR_STRLEN];

		ADD("  route %s/%u via", util_addr_str(&r->prefix, a, sizeof(a)),
		    r->prefix.prefix_len);
		for (int v = 0; v < r->nvia; v++)
			ADD(" %s", r->via[v]);
		ADD("\n");
	}
#undef ADD
	return len;
}

int relay_serve_report(struct relay_ctx *x, char *buf, size_t cap)
{
	size_t len = report_routes(x, buf, cap);
	int n = 0;

	pthread_mutex_lock(&x->lock);
	for (struct relay_pair *p = x->pairs; p && len < cap; p = p->next, n++)
		len += (size_t)snprintf(buf + len, cap - len,
					"pair %u: %llu bytes, %llu messages: "
					"%s\n", p->id,
					(unsigned long long)p->bytes,
					(unsigned long long)p->msgs, p->desc);
	if (len < cap)
		len += (size_t)snprintf(buf + len, cap - len,
			"relay %s: %s port %d, %d pairs now, %llu done "
			"(%llu bytes), %llu requests refused, %llu channels "
			"ended without a request, %llu reroutes\n",
			x->conf.name, x->serving ? "serving" : "not serving",
			x->conf.port, n, (unsigned long long)x->pairs_done,
			(unsigned long long)x->bytes_done,
			(unsigned long long)x->refused,
			(unsigned long long)x->unread_dropped,
			(unsigned long long)x->reroutes);
	pthread_mutex_unlock(&x->lock);
	return 0;
}
