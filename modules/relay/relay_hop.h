/* SPDX-License-Identifier: MIT */
/*
 * One hop onwards: from the origin or a relay, to the destination's NCCL
 * listen directly when a module here reaches it, else to the next relay.
 * Non-blocking; both the origin's route and a relay's setup drive it.
 */
#ifndef MESH_RELAY_HOP_H
#define MESH_RELAY_HOP_H

#include "relay.h"
#include "relay_wire.h"

struct relay_hop {
	struct relay_ctx *x;
	struct relay_msg req;		/* REQ to send onwards: handle,
					 * visited (this host last), path,
					 * hops_left, origin */
	int stage;
	bool direct_tried, direct;
	int cand[64], ncand, cur;
	const struct relay_peer *peer;	/* the relay dialed, NULL direct */
	struct mesh_leg leg;
	struct mesh_ctrl *ctrl;
	void *comm;			/* the leg's send comm, once done */
	uint32_t flags;			/* RELAY_FLAG_* of the far end */
	int64_t deadline_ns;
	char route[RELAY_ROUTE_MAX];	/* from here to the destination
					 * (relay_route_hops reads it) */
	char tried[1024];		/* every attempt that failed, why */
	size_t tried_len;
};

/* Prepares h for req (copied); candidates from path, routes or relays. */
void relay_hop_init(struct relay_hop *h, struct relay_ctx *x,
		    const struct relay_msg *req);
/* 0 once h->comm is set, -EAGAIN before, else failed: h->tried says why. */
int relay_hop_step(struct relay_hop *h);
/* Releases what an unfinished hop holds (a finished one: its ctrl). */
void relay_hop_free(struct relay_hop *h);

int64_t relay_now_ns(void);

#endif
