/* SPDX-License-Identifier: MIT */
/*
 * The control plane's wire format, with no I/O so that fuzzers and unit
 * tests reach it without sockets:
 *   hello  40 bytes, raw, first on every connection (connector -> listener)
 *     "MSHC" | version | kind | module tag[2] | stream index[4] |
 *     nonce[8] | conn id[8] | fabric id[8] | auth flag | 0[3]
 *   frame  length[4] | payload (at most CTRL_FRAME_MAX bytes)
 *   ack    the listener's first frame: "MSAK" | status[4]
 *   heard  the connector's first frame once it read an ack of status 0:
 *          the length word CTRL_ACK_HEARD alone, no payload
 * All integers little-endian.  A status other than 0 is a refusal the
 * listener tells the connector before it closes (CTRL_STATUS_*).
 */
#ifndef CORE_CTRL_WIRE_H
#define CORE_CTRL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define CTRL_HELLO_SIZE CORE_AUTH_HELLO_SIZE
#define CTRL_FRAME_MAX 4096
#define CTRL_STREAMS_MAX 1024
#define CTRL_ACK_SIZE 8
/*
 * Tells the acceptor the connection is set up on the connector's side, so
 * that one closed early (a module that needs only data streams) is told
 * apart from one that gave up before the ack and dials again.  Whoever
 * reads frames skips it.
 */
#define CTRL_ACK_HEARD 0xffffffffu

/* Ack statuses of a refusal; errno values, so that a peer that predates
 * them still prints something close. */
#define CTRL_STATUS_NEEDS_AUTH 13u	/* EACCES: the listener wants a key */
#define CTRL_STATUS_NO_KEY 95u		/* EOPNOTSUPP: it has none */
#define CTRL_STATUS_NO_LISTEN 3u	/* ESRCH: no such listen open */
/* EKEYREJECTED: the connector's response proves another key.  It comes
 * where the listener's proof was due, so that a connector tells a wrong
 * key from a listener that gave up waiting (then it dials again). */
#define CTRL_STATUS_AUTH_FAILED 129u

/* REJOIN: a new socket for stream `stream_index` of a connection kept
 * for resuming, named by the handle's nonce and the module's key (in
 * conn_id); the listener answers it with an ack like a control
 * connection's, status CTRL_STATUS_NO_LISTEN when no such rejoin is kept. */
enum ctrl_hello_kind {
	CTRL_HELLO_CTRL = 1, CTRL_HELLO_STREAM = 2, CTRL_HELLO_REJOIN = 3
};

struct ctrl_hello {
	uint8_t kind;
	uint8_t auth;		/* the connector will authenticate */
	uint16_t module_tag;
	uint32_t stream_index;
	uint64_t nonce;
	uint64_t conn_id;
	uint64_t fabric_id;
};

void ctrl_put32(uint8_t *p, uint32_t v);
uint32_t ctrl_get32(const uint8_t *p);

void ctrl_hello_encode(const struct ctrl_hello *h, uint8_t *b);
/* NULL once decoded, else what is wrong with it. */
const char *ctrl_hello_decode(const uint8_t *b, struct ctrl_hello *h);

/*
 * Whether buf starts with a whole frame: 0 with *payload_len set,
 * CTRL_FRAME_HEARD (4 bytes, *payload_len 0) for the marker, -EAGAIN while
 * it is incomplete, -EPROTO when its length is out of bounds.
 */
#define CTRL_FRAME_HEARD 1
int ctrl_frame_peek(const uint8_t *buf, size_t len, size_t *payload_len);

void ctrl_ack_encode(uint8_t *ack, uint32_t status);
/* 0 with *status set for an ack payload, -EPROTO for anything else. */
int ctrl_ack_decode(const uint8_t *payload, size_t len, uint32_t *status);

#endif
