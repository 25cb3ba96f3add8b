/* SPDX-License-Identifier: MIT */
/*
 * One hop onwards: from the origin or a relay, to the destination's NCCL
 * listen directly when a module here reaches it, else to the next relay.
 * Non-blocking; both the origin's route and a relay's setup drive it.
 *
 * To the destination: a first route announces itself on the NCCL listen
 * (LAST, answered by READY once the destination keeps the route's key),
 * sets its leg up there, and then opens the channel for its notes through
 * that key (relay_vctrl.h); a route that replaces a broken one reaches the
 * destination through the key alone, and its leg runs on that channel.
 */
#ifndef MESH_RELAY_HOP_H
#define MESH_RELAY_HOP_H

#include "relay.h"
#include "relay_vctrl.h"
#include "relay_wire.h"

/* Explicit routes for one destination: alternatives, in the config's
 * order. */
#define RELAY_ALTS_MAX 8

/* A control channel a route keeps once it is up: the core's, or the
 * last leg's over the destination's rejoin; or, for a first route whose
 * leg came through the NCCL listen, one still to be dialed through the
 * rejoin (rj), which then says `hello` (LAST, marked as the notes'). */
struct relay_chan {
	struct mesh_ctrl *ctrl;
	struct relay_vctrl *v;
	struct mesh_rejoin *rj;
	uint8_t *hello;
	size_t hello_len;
	int epoch;
	int64_t deadline_ns;
};

/* NULL while there is no channel (yet). */
struct mesh_ctrl *relay_chan_ctrl(const struct relay_chan *ch);
/* Dials a channel still to be dialed: 0 once it is up (or none was
 * pending), -EAGAIN before, else it failed (*why says so). */
int relay_chan_connect(struct relay_chan *ch, const char **why);
/* 0 once all queued was written, -EAGAIN before, else -errno. */
int relay_chan_flush(const struct relay_chan *ch);
void relay_chan_close(struct relay_chan *ch);
/* Queues a note; 0, -EAGAIN (try again), or -errno. */
int relay_chan_note(const struct relay_chan *ch, enum relay_note_type type,
		    uint64_t seq);
/* The next note: 1 with *n, 0 none yet, -errno when the channel ended
 * or brought something that is no note (*why says which). */
int relay_chan_read(const struct relay_chan *ch, struct relay_note *n,
		    const char **why);

struct relay_hop {
	struct relay_ctx *x;
	struct relay_msg req;		/* REQ to send onwards: handle,
					 * visited (this host last), path,
					 * hops_left, origin, key, flags */
	int stage;
	bool direct_tried, direct;
	int cand[64], cand_alt[64], ncand, cur;
	const struct relay_route *alt[RELAY_ALTS_MAX];
	int nalt, cur_alt;
	const struct relay_peer *peer;	/* the relay dialed, NULL direct */
	struct mesh_leg leg;
	struct mesh_ctrl *ctrl;		/* the core's channel */
	struct mesh_rejoin *rj;		/* direct: to the destination's key */
	struct relay_vctrl *v;		/* direct: the last leg's channel */
	uint8_t *notes_hello;		/* direct, a first route: LAST for
					 * its notes' channel, dialed later */
	size_t notes_hello_len;
	void *comm;			/* the leg's send comm, once done */
	uint32_t flags;			/* RELAY_FLAG_* of the far end */
	uint64_t pos;			/* messages the destination has */
	int verdict;			/* the destination's own refusal:
					 * ESRCH, ECONNREFUSED or 0 */
	int64_t started_ns, deadline_ns;
	int64_t dial_deadline_ns;	/* the relay dialed, when another
					 * waits behind it */
	char route[RELAY_ROUTE_MAX];	/* from here to the destination
					 * (relay_route_hops reads it) */
	char tried[1024];		/* every attempt that failed, why */
	size_t tried_len;
	char aside[256];		/* for this relay's log alone: what
					 * answered at the destination's port
					 * that is no nccl-mesh listener */
};

/* Prepares h for req (copied); candidates from req's path, else the
 * alternatives given (explicit routes), else every relay. */
void relay_hop_init(struct relay_hop *h, struct relay_ctx *x,
		    const struct relay_msg *req,
		    const struct relay_route *const *alts, int nalt);
/* 0 once h->comm is set, -EAGAIN before, else failed: h->tried says why;
 * -ESRCH or -ECONNREFUSED when the destination itself said so. */
int relay_hop_step(struct relay_hop *h);
/* The origin's first hop to the destination of `handle`: a REQ naming
 * the route's key and attempt, through the explicit routes for it
 * (alternatives) or any relay; never directly (the core asked because no
 * module reaches it, or a route says not to).  NULL without memory. */
struct relay_hop *relay_hop_origin(struct relay_ctx *x, const void *handle,
				   uint64_t key, uint32_t attempt,
				   uint32_t flags);
/* A finished hop's channel onwards, kept for notes: the caller owns it. */
void relay_hop_take(struct relay_hop *h, struct relay_chan *ch);
/* Releases what an unfinished hop holds (a finished one: its channel). */
void relay_hop_free(struct relay_hop *h);

int64_t relay_now_ns(void);

#endif
