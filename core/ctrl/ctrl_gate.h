/* SPDX-License-Identifier: MIT */
/*
 * What a listener does with a socket that connected and has not said who
 * it is yet, with no I/O: the caller reads at most ctrl_gate_want() bytes,
 * feeds them, and sends what the gate queued (the auth engine's out[]).
 * Reading no more than wanted matters: bytes after the handshake belong to
 * the module.  The same code runs over sockets and under a fuzzer.
 */
#ifndef CORE_CTRL_GATE_H
#define CORE_CTRL_GATE_H

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
	CTRL_REFUSE_CROWDED,		/* made room for a newer one */
	CTRL_REFUSE_NO_REJOIN,		/* resumes no kept connection */
	CTRL_REFUSE_REJOIN_CLOSED,	/* resumes one closed here lately */
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
/*
 * What the listener tells a connector it refuses, as an ack status (0:
 * nothing, it just closes).  Only where the connector reads an ack next,
 * so an honest peer reads it as such.
 */
uint32_t ctrl_refusal_status(enum ctrl_refusal why);
/*
 * Whether a refusal is logged at INFO, not WARN: one that asks nothing of
 * a person, as a stream dialed anew for a connection this process closed
 * (a peer's last dial, a relay's notes' channel for a receive that was
 * closed first).
 */
int ctrl_refusal_quiet(enum ctrl_refusal why);

/*
 * The connections kept for resuming that this process closed lately, by
 * the names a REJOIN gives (the NCCL listen's nonce, the module's key and
 * tag), so that a REJOIN for one of them is told apart from one nothing
 * here ever kept (another process's, a wrong key).  A ring of the last
 * CTRL_CLOSED_MAX closed: bounded whatever the number of connections, and
 * a REJOIN comes within seconds of the close it races.
 */
#define CTRL_CLOSED_MAX 1024

struct ctrl_closed_id {
	uint64_t nonce;
	uint64_t key;
	uint16_t module_tag;
};

struct ctrl_closed_set {
	struct ctrl_closed_id ids[CTRL_CLOSED_MAX];
	unsigned n;		/* in use, up to CTRL_CLOSED_MAX */
	unsigned next;		/* the slot the next one takes */
};

void ctrl_closed_add(struct ctrl_closed_set *s, uint64_t nonce, uint64_t key,
		     uint16_t module_tag);
int ctrl_closed_has(const struct ctrl_closed_set *s, uint64_t nonce,
		    uint64_t key, uint16_t module_tag);

/*
 * Rate limit of a listener's refusal log: a storm must not flood NCCL's
 * log.  The first refusal after a quiet interval is logged on its own;
 * later ones are counted by reason and summarised once per interval, so a
 * storm of any length leaves well under a line a second.
 */
#define CTRL_REFUSAL_LOG_INTERVAL_NS 5000000000ll

struct ctrl_refusal_log {
	int64_t next_ns;	/* no line before this */
	int64_t since_ns;	/* first refusal counted */
	unsigned total;
	unsigned counts[CTRL_REFUSE_COUNT];
};

/* 1 when this refusal may be logged on its own now, 0 when counted. */
int ctrl_refusal_note(struct ctrl_refusal_log *r, enum ctrl_refusal why,
		      int64_t now);
/* 1 with a summary of what was counted in buf (and counts reset) when one
 * is due (or `force` and anything was counted), else 0. */
int ctrl_refusal_summary(struct ctrl_refusal_log *r, int64_t now, int force,
			 char *buf, size_t len);

/*
 * How long a socket may take to finish its hello and authentication when
 * `pending` sockets are waiting and at most `max` may: the full time while
 * there is room, less as the listener fills, so that a storm of silent
 * connections is shed in well under a second while real peers, which send
 * their hello at once, pass.
 */
int64_t ctrl_gate_timeout_ns(int pending, int max);
/* The most sockets a listener keeps pending for a descriptor limit. */
int ctrl_gate_pending_max(long nofile);

#endif
