/* SPDX-License-Identifier: MIT */
/* Shared by the ctrl_*.c files only: a connection's private state and the
 * socket helpers they all use. */
#ifndef CORE_CTRL_PRIV_H
#define CORE_CTRL_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "ctrl.h"
#include "ctrl_wire.h"
#include "handle.h"

/* The connector reads the listener's CHALLENGE and PROOF (auth.h). */
#define AUTH_CHALLENGE_SIZE 20
#define AUTH_CONNECTOR_READS (AUTH_CHALLENGE_SIZE + 36)

/*
 * One side of a handshake over a non-blocking socket, connector side:
 * it reads exactly the listener's CHALLENGE and PROOF, so no byte meant
 * for the module is ever swallowed here.
 */
struct auth_io {
	struct core_auth a;
	size_t recvd, recv_total;
	int done;
	uint8_t got[AUTH_CONNECTOR_READS];	/* what was received: a refusal
						 * frame instead of a challenge
						 * or a proof is told apart */
};

struct core_stream {
	int fd;
	int stage;	/* connector: 0 idle, 1 dialing, 2 hello, 3 auth, 4 given */
	size_t hello_sent;
	uint8_t hello[CTRL_HELLO_SIZE];
	struct auth_io auth;
};

/*
 * What the listen that accepted a connection does for it.  The listener
 * (ctrl_listen.c) sets it when it lists the connection, so the
 * connection's own code calls the listener only through it, never by
 * name: the listener uses the connection, not the other way round.
 */
struct ctrl_conn;

struct ctrl_listen_ops {
	/* routes what reached the listener: a stream the conn waits for */
	int (*progress)(struct core_listen_comm *lc);
	/* detaches the conn from its listen before it is freed */
	void (*forget)(struct ctrl_conn *c);
};

struct ctrl_conn {
	struct core_conn pub;		/* first: core_conn * converts */
	int fd;
	uint64_t conn_id;
	uint64_t local_fabric_id;
	/* accepting side: the listen it came through, in arrival order */
	struct core_listen_comm *lc;
	const struct ctrl_listen_ops *lc_ops;	/* set with lc */
	struct ctrl_conn *lc_next;
	uint64_t lc_seq;		/* the listener's accept order */
	int lc_given;			/* handed out by an accept */
	/* dialing */
	int dial_stage, dial_next, dial_cur, dial_round;
	int64_t dial_attempt_end_ns;
	struct core_handle target;
	char tried[768];
	uint8_t wrong[CORE_HANDLE_ADDRS_MAX];	/* not an nccl-mesh listener */
	/* buffers */
	uint8_t *out;
	size_t out_len, out_cap;
	uint8_t *in;
	size_t in_len, in_cap;
	struct auth_io *auth;		/* connecting side, while authenticating */
	uint8_t secret[CORE_AUTH_SECRET_SIZE];	/* mesh_ctrl.secret points here */
	/* extra streams by index */
	struct core_stream *streams;
	int nstreams;
};

/*
 * A connection kept for resuming (module.h, 1.6).  The accepting side's
 * sits on the listener its connection came through (ctrl_listen.c), which
 * queues the sockets dialed anew for it; the connecting side's dials them
 * (ctrl_rejoin.c).
 */
#define REJOIN_QUEUE_MAX 64

struct rejoin_dial;
struct core_listener;

struct mesh_rejoin {
	int connector;
	uint64_t nonce;			/* the NCCL listen's */
	uint64_t key;			/* the module's name for it */
	uint16_t module_tag;
	/* accepting side */
	struct core_listener *l;	/* NULL once the listener closed */
	struct mesh_rejoin *next;	/* on its listener */
	struct mesh_stream_new q[REJOIN_QUEUE_MAX];
	int nq;
	/* connecting side: the address that worked first */
	uint64_t fabric_id;
	struct mesh_addr addrs[CORE_HANDLE_ADDRS_MAX];
	int naddrs;
	struct rejoin_dial *dials;	/* by stream index */
	int ndials;
};

/* ctrl_listen.c: the accepting side's rejoin on c's listener. */
int ctrl_rejoin_register(struct ctrl_conn *c, struct mesh_rejoin *rj);
void ctrl_rejoin_unregister(struct mesh_rejoin *rj);
/* Moves the listener on; 0 with *out for a queued socket, or -EAGAIN. */
int ctrl_rejoin_poll(struct mesh_rejoin *rj, struct mesh_stream_new *out);

static inline struct ctrl_conn *ctrl_conn_of(struct core_conn *c)
{
	return (struct ctrl_conn *)c;
}

/* The key every connection must prove (NULL: none). */
const struct core_auth_key *ctrl_auth_key(void);

int ctrl_set_nonblocking(int fd);
void ctrl_sock_name(int fd, struct mesh_addr *a, int peer);
/* Starts a non-blocking connect; 0 with *fd_out, or -errno. */
int ctrl_dial_addr(const struct mesh_addr *to, int *fd_out);
/* 0 connected, -EAGAIN still trying, else the connect error. */
int ctrl_dial_done(int fd);

void ctrl_auth_begin(struct auth_io *io, const uint8_t *hello);
/* 0 once authenticated and everything queued was sent, -EAGAIN before. */
int ctrl_auth_step(int fd, struct auth_io *io);
/* The status of the refusal frame the listener sent instead of its
 * challenge or its proof; 0 when it sent none. */
uint32_t ctrl_auth_refusal(const struct auth_io *io);

struct ctrl_conn *ctrl_conn_new(int fd, int connector);
void ctrl_conn_set_peer(struct ctrl_conn *c);
void ctrl_conn_bind_ops(struct ctrl_conn *c);
/* Keeps the handshake's secret for the module (none: no key). */
void ctrl_conn_set_secret(struct ctrl_conn *c, const uint8_t *secret,
			  size_t len);
int ctrl_queue_frame(struct ctrl_conn *c, const void *msg, size_t len);
/* Tells the listener its ack was read (CTRL_ACK_HEARD). */
int ctrl_queue_heard(struct ctrl_conn *c);
int ctrl_read_frame(struct ctrl_conn *c, void *buf, size_t cap);
int ctrl_add_stream_fd(struct ctrl_conn *c, uint32_t index, int fd);
/*
 * Dials one more socket to `to` that starts with hello h (a stream or a
 * rejoin), through the key's handshake where one is set: 0 once done
 * (s->fd is connected; s->auth.a.secret holds its secret), -EAGAIN
 * before, else the error (the socket is the caller's to close).
 */
int ctrl_stream_dial(struct core_stream *s, const struct ctrl_hello *h,
		     const struct mesh_addr *to);
/* Routes what reached the listener; for a stream the accepting side waits for. */
int ctrl_accept_progress(struct core_listen_comm *lc);

#endif
