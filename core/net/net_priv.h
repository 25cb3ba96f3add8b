/* SPDX-License-Identifier: MIT */
/*
 * What the files of NCCL's net calls share: the listen and connect state,
 * the connects table (connects.c) and the module exchange (comm.c).
 */
#ifndef CORE_NET_PRIV_H
#define CORE_NET_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "ctrl.h"
#include "handle.h"
#include "layer.h"
#include "net.h"
#include "state.h"

/* A listen comm: the control listener, and the dialer being accepted. */
struct core_listen {
	struct core_listen_comm *lc;
	const struct core_rail *rail;
	struct core_conn *conn;
	const struct core_member *member;
	void *mcomm;		/* built, waiting for the control flush */
	struct core_member layered;	/* member when the layer carries it */
};

/* A connect in progress. */
struct core_connecting {
	struct core_conn *conn;
	const struct core_member *member;
	void *mcomm;
	int dialed;
	/* no member reaches the peer: the layered module carries it */
	struct core_module *layer;
	void *route_state;
	char unreached[768];
};

/* connects.c: frees a connect that will not finish. */
void core_connecting_free(struct core_connecting *cs);

/* An entry of the connects table (connects.c), claimed by one call at a
 * time. */
struct connect_entry {
	struct connect_entry *next;
	uint64_t key;
	const void *ctx;
	int dev;
	bool busy;		/* a connect call is stepping it */
	uint8_t handle[CORE_HANDLE_STATE_OFFSET];	/* what it answers to */
	struct core_connecting *cs;
};

/* The connect this handle's slot names, marked busy: 0; -EBUSY while
 * another call steps it; -ENOENT when the slot names none of ours. */
int core_connects_claim(const void *ctx, int dev, const uint8_t *handle,
			struct connect_entry **out);
/* Files a connect just started, busy, under a fresh key. */
int core_connects_add(const void *ctx, int dev, const uint8_t *handle,
		      struct core_connecting *cs, struct connect_entry **out);
/* The call that claimed e is done with it: kept, or (done) freed. */
void core_connects_release(struct connect_entry *e, bool done);
/* Frees the connects of ctx (NULL: every one) NCCL left in progress. */
void core_connects_drop(const void *ctx);

/* comm.c: send says which way, for the comm's counters. */
struct core_comm *core_comm_new(const struct mesh_module *d, void *mcomm,
				const struct core_comm_path *path, bool send);
/* Runs the chosen module's exchange.  0 with *comm set when done, 0 with
 * *comm NULL while in progress, else the error (logged). */
int core_module_step(const char *dir, const struct core_rail *rail,
		     const struct core_member *m, struct core_conn *c,
		     void **mcomm, void **comm);

/* rtt.c: a connection's round trip into its class's record (t: what the
 * config declares, for the one line that compares); the record emptied
 * at the last finalize. */
void core_rtt_note(enum core_path_class c, uint32_t us,
		   const struct core_tuning *t);
void core_rtt_forget(void);

#endif
