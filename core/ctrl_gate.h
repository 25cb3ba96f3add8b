/* SPDX-License-Identifier: MIT */
/*
 * What a listener does with a socket that connected and has not said who
 * it is yet, with no I/O: the caller reads at most ctrl_gate_want() bytes,
 * feeds them, and sends what the gate queued (the auth engine's out[]).
 * Reading no more than wanted matters: bytes after the handshake belong to
 * the module.  The same code runs over sockets and under a fuzzer.
 */
#ifndef MESH_CORE_CTRL_GATE_H
#define MESH_CORE_CTRL_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "ctrl_wire.h"

/* Why a listener turned a connection away; counted per reason in its log. */
enum ctrl_refusal {
	CTRL_REFUSE_CLOSED,		/* closed before a complete hello */
	CTRL_REFUSE_HELLO_TIMEOUT,
	CTRL_REFUSE_AUTH_TIMEOUT,
	CTRL_REFUSE_BAD_HELLO,
	CTRL_REFUSE_NEEDS_AUTH,		/* no key there, a key here */
	CTRL_REFUSE_NO_KEY,		/* a key there, none here */
	CTRL_REFUSE_AUTH_FAILED,
	CTRL_REFUSE_AUTH_GARBAGE,
	CTRL_REFUSE_AUTH_CLOSED,
	CTRL_REFUSE_NO_LISTEN,
	CTRL_REFUSE_EVICTED,
	CTRL_REFUSE_SHUTDOWN,
	CTRL_REFUSE_COUNT
};

/* A short text for the reason, as the log prints it. */
const char *ctrl_refusal_text(enum ctrl_refusal why);

struct ctrl_gate {
	const struct core_auth_key *key;	/* NULL: no authentication */
	size_t got;
	uint8_t buf[CTRL_HELLO_SIZE];
	struct ctrl_hello h;
	int authing;
	size_t auth_recvd;
	struct core_auth auth;
	const char *detail;	/* what was wrong with a bad hello */
	int passed;
};

void ctrl_gate_init(struct ctrl_gate *g, const struct core_auth_key *key);
/* How many bytes the gate may take now without swallowing the module's. */
size_t ctrl_gate_want(const struct ctrl_gate *g);
/*
 * Feeds received bytes (at most ctrl_gate_want()).  -EAGAIN while more is
 * needed, 0 once the hello (in g->h) is good and the peer authenticated
 * (the caller still sends g->auth.out), else a refusal as 1 + its reason.
 */
int ctrl_gate_feed(struct ctrl_gate *g, const uint8_t *buf, size_t len);
/* The refusal for a peer that closed with the gate still wanting bytes. */
enum ctrl_refusal ctrl_gate_closed(const struct ctrl_gate *g);

#endif
