/* SPDX-License-Identifier: MIT */
/*
 * The last leg's control channel, over the destination's rejoin (module.h,
 * 1.6): stream 0 of an attempt carries messages framed like the core's
 * (a length word, at most RELAY_MSG_MAX bytes), and the leg's module gets
 * its streams through stream(), dialed anew by the last relay and taken
 * by the destination.  Both sides hand it to the leg's module as its
 * mesh_ctrl, and keep it for notes once the leg is up.
 *
 * Every route to a destination is one attempt of its connection; an
 * attempt owns RELAY_EPOCH_STREAMS stream indices, so that streams a
 * relay of a route given up still dials are told from the new route's.
 */
#ifndef MESH_RELAY_VCTRL_H
#define MESH_RELAY_VCTRL_H

#include "relay.h"

#define RELAY_EPOCH_STREAMS 128	/* stream 0 and up to 127 of the leg */
#define RELAY_EPOCHS 8		/* the core takes stream indices < 1024 */

struct relay_vctrl;

/* Connecting side: a channel over stream 0 of `epoch`, dialed on rj
 * (the vctrl owns rj from here).  peers: the destination's addresses. */
struct relay_vctrl *relay_vctrl_new(struct mesh_rejoin *rj, bool connector,
				    int epoch,
				    const struct mesh_stream_new *s0,
				    const char *peer,
				    const struct mesh_addr *peers, int npeers);
struct mesh_ctrl *relay_vctrl_ctrl(struct relay_vctrl *v);
int relay_vctrl_epoch(const struct relay_vctrl *v);
/* 0 once everything queued was written, -EAGAIN before, else -errno. */
int relay_vctrl_flush(struct relay_vctrl *v);
/* Closes the streams it holds and, on the connecting side, its rejoin. */
void relay_vctrl_free(struct relay_vctrl *v);

/*
 * The destination's side: every stream dialed anew for its connection,
 * taken from its rejoin.  A stream 0 starts an attempt: the newest one
 * waits in `next` for the comm to take it (relay_inbox_next); streams of
 * the attempt now joining (`cur`) go to it, any other is closed.
 */
struct relay_inbox {
	struct mesh_rejoin *rj;
	struct relay_vctrl *cur;	/* the attempt joining, if any */
	bool has_next;
	struct mesh_stream_new next;	/* a newer attempt's stream 0 */
	const char *peer;
};

/* Takes what came; -errno only when the rejoin itself failed. */
int relay_inbox_pump(struct relay_inbox *in);
/* The newest attempt's stream 0, when one came: 1 and *s0, else 0. */
int relay_inbox_next(struct relay_inbox *in, struct mesh_stream_new *s0);
/* The accepting side's channel for the attempt that s0 starts: it
 * becomes cur and gets that attempt's streams; NULL (s0 closed) when
 * out of memory. */
struct relay_vctrl *relay_inbox_join(struct relay_inbox *in,
				     const struct mesh_stream_new *s0);
/* Closes whatever waits (not cur, which its owner frees). */
void relay_inbox_drop(struct relay_inbox *in);

/* Which attempt a stream index belongs to, and which of its streams. */
static inline int relay_stream_epoch(int index)
{
	return index / RELAY_EPOCH_STREAMS;
}

static inline int relay_stream_index(int epoch, int k)
{
	return (epoch % RELAY_EPOCHS) * RELAY_EPOCH_STREAMS + k;
}

#endif
