/* SPDX-License-Identifier: MIT */
/*
 * The control plane: one listening TCP socket per rail and process, shared
 * by every NCCL listen on that rail and routed by the handle's nonce, so a
 * process needs one port per rail whatever the number of connections (what
 * port ranges and NAT rules want).  Every connection to it starts with a
 * fixed hello that says which listen it is for and whether it is a control
 * connection or another stream of one.  Nothing here blocks.
 */
#ifndef CORE_CTRL_H
#define CORE_CTRL_H

#include <stdbool.h>
#include <stdint.h>

#include <nccl-mesh/module.h>
#include "auth.h"
#include "handle.h"

struct core_listen_comm;

/*
 * A control connection as the rest of the core sees it; its mesh_ctrl is
 * what a module sees.  The rest of it is private to the ctrl_*.c files.
 */
struct core_conn {
	struct mesh_ctrl ctrl;		/* first: modules get &conn->ctrl */
	int connector;
	uint16_t module_tag;		/* module the connector chose */
	uint64_t peer_fabric_id;
	struct mesh_addr local, remote;
	char peer_text[64];
	int64_t deadline_ns;
};

int64_t core_now_ns(void);
uint64_t core_random_u64(void);

/* The key every connection must prove (NULL or empty: none). */
void core_ctrl_set_auth_key(const struct core_auth_key *key);

/* Registers a listen on `rail`, binding the rail's listener on first use
 * (the lowest free port of port_low..port_high, any with 0); a listener
 * that cannot bind says nothing: the caller logs what it means. */
int core_ctrl_listen(int rail, uint64_t nonce, int port_low, int port_high,
		     uint16_t *port_out, struct core_listen_comm **out);
void core_ctrl_close_listen(struct core_listen_comm *lc);
/*
 * Routes whatever arrived; returns 0 with *conn set once a valid control
 * connection for this listen has arrived (it is acknowledged and owned by
 * the caller), -EAGAIN before.
 */
int core_ctrl_accept(struct core_listen_comm *lc, int timeout_ms,
		     struct core_conn **conn);

/* Starts dialing the handle's addresses, `local` ones on a shared subnet first. */
int core_ctrl_dial(const struct core_handle *h, const struct mesh_addr *local,
		   int nlocal, uint16_t module_tag, uint64_t fabric_id,
		   int timeout_ms, struct core_conn **out);
/* 0 once connected and acknowledged, -EAGAIN before, else fails (logged). */
int core_ctrl_dial_progress(struct core_conn *c);
/* The addresses a failed dial tried, each with its error. */
const char *core_conn_tried(const struct core_conn *c);
/* The round trip the kernel measured on the connection's socket, in us
 * (util_tcp_rtt_us): the handshake and the setup's messages give it. */
int core_conn_rtt_us(const struct core_conn *c, uint32_t *us);
/* 0 once everything queued has been written. */
int core_ctrl_flush(struct core_conn *c);
void core_conn_free(struct core_conn *c);

/*
 * Resuming (module.h, 1.6; ctrl_rejoin.c).  The accepting side keeps key
 * on the listener conn came through; the connecting side dials where
 * conn went, or to a handle's addresses (first: the one to try first).
 */
/* Whether a module's ctrl is a connection of the core's (not a channel
 * another module made, such as a relay's). */
bool core_ctrl_is_ours(const struct mesh_ctrl *ctrl);
int core_rejoin_listen(struct core_conn *conn, uint64_t key,
		       struct mesh_rejoin **out);
int core_rejoin_to_conn(struct core_conn *conn, uint64_t key,
			struct mesh_rejoin **out);
int core_rejoin_to(const struct core_handle *h, const struct mesh_addr *first,
		   uint16_t module_tag, uint64_t fabric_id, uint64_t key,
		   struct mesh_rejoin **out);
int core_rejoin_dial(struct mesh_rejoin *rj, int index,
		     struct mesh_stream_new *out);
int core_rejoin_take(struct mesh_rejoin *rj, struct mesh_stream_new *out);
void core_rejoin_close(struct mesh_rejoin *rj);

/* NULL if buf is a well-formed hello, else what is wrong (for fuzzing). */
const char *core_ctrl_hello_check(const uint8_t *buf, size_t len);

/* Closes every listener; for the last finalize. */
void core_ctrl_shutdown(void);

#endif
