/* SPDX-License-Identifier: MIT */
/*
 * Setup messages on a relay's control channels (each one mesh_ctrl
 * message), and the header that starts every relayed message on a leg.
 *
 *   REQ    origin or relay -> relay: carry this connection onwards
 *   RESP   relay -> the side that asked: the route from here, or why not
 *   LAST   last relay -> destination: the leg's module, the whole route
 *   READY  destination -> last relay: what it takes (inline data or not)
 *
 * A resumable connection (the origin's outage_ms > 0) also names its
 * route key, which the destination registers for rejoining, and every
 * route that replaces a broken one carries RELAY_FLAG_RESUME; READY and
 * RESP then bring back where the destination stands (pos).  Once a
 * route is up, its control channels carry notes (struct relay_note).
 *
 * Integers travel in network byte order; strings are NUL-terminated
 * inside their fields (a decoder refuses one that is not).
 */
#ifndef MESH_RELAY_WIRE_H
#define MESH_RELAY_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "relay.h"

#define RELAY_MAGIC 0x524c5931u		/* "RLY1" */

enum relay_msg_type {
	RELAY_MSG_REQ = 1,
	RELAY_MSG_RESP = 2,
	RELAY_MSG_LAST = 3,
	RELAY_MSG_READY = 4,
};

/* The destination takes small messages inside the header (host memory). */
#define RELAY_FLAG_INLINE 0x1u
/* REQ, LAST: the origin resumes this connection when its route breaks:
 * the destination keeps a rejoin for `key` and acknowledges what came. */
#define RELAY_FLAG_RESUMABLE 0x2u
/* REQ, LAST: this route replaces a broken one; the destination is
 * reached through its rejoin, no longer through its NCCL listen. */
#define RELAY_FLAG_RESUME 0x4u
/* LAST on a channel through the destination's rejoin that only carries
 * the notes of a route whose leg came through the NCCL listen. */
#define RELAY_FLAG_NOTES 0x8u
#define RELAY_FLAGS_KNOWN 0xfu

struct relay_msg {
	enum relay_msg_type type;
	/* REQ */
	int hops_left;
	int nvisited, npath;
	char visited[RELAY_HOPS_MAX][RELAY_NAME_MAX];
	char path[RELAY_HOPS_MAX][RELAY_NAME_MAX];
	uint8_t handle[RELAY_HANDLE_BYTES];
	/* REQ, LAST: the leg's module and who asked first */
	char leg[RELAY_NAME_MAX];
	char origin[64];
	/* RESP: 0 or a positive errno; READY, RESP: RELAY_FLAG_* */
	int status;
	uint32_t flags;
	/* REQ, LAST: the route's key and which route of the connection
	 * this is (0 the first); READY, RESP: the messages the destination
	 * has whole, the first pos of them (the resend starts after) */
	uint64_t key, pos;
	uint32_t attempt;
	/* RESP: the route from the answering relay on, or why not;
	 * LAST: the whole route */
	char text[RELAY_ROUTE_MAX + 512];
};

#define RELAY_MSG_MAX 4096

/* Encodes m into buf (RELAY_MSG_MAX bytes); returns the length. */
size_t relay_msg_encode(const struct relay_msg *m, uint8_t *buf);
/* Decodes; NULL when well-formed, else what is wrong. */
const char *relay_msg_decode(const uint8_t *buf, size_t len,
			     struct relay_msg *m);

/*
 * The hops of a route as RESP and LAST carry it, "NAME (MODULE ADDR) ->
 * ... -> destination (MODULE ADDR)" (each relay puts its leg in front of
 * the next one's answer): how many whole ones, at most max.
 */
int relay_route_hops(const char *route, struct mesh_conn_hop *hops, int max);

/*
 * Notes: what the ends of a route tell each other once it is up, on the
 * control channels every hop keeps.  Each is 16 bytes (magic, type, 0,
 * seq); a relay forwards ACK towards the origin.
 *
 *   ACK  destination -> origin: messages 1..seq arrived whole
 *   END  last relay -> destination: the origin closed after message seq
 *   UP   destination -> last relay: its leg is accepted, notes may come
 *   BYE  destination -> origin: it closed its end; the channels ending
 *        after this are no break
 *   KEEP relay <-> relay, every second: the channel between two relays
 *        is alive (a NAT table flushed on the way stalls it silently)
 *   GONE first relay -> destination: the origin's process is gone (its
 *        channel and its leg ended together), no new route will come
 */
#define RELAY_NOTE_MAGIC 0x524c4e31u	/* "RLN1" */
#define RELAY_NOTE_SIZE 16

enum relay_note_type {
	RELAY_NOTE_ACK = 1,
	RELAY_NOTE_END = 2,
	RELAY_NOTE_UP = 3,
	RELAY_NOTE_BYE = 4,
	RELAY_NOTE_KEEP = 5,
	RELAY_NOTE_GONE = 6,
};

struct relay_note {
	enum relay_note_type type;
	uint64_t seq;
};

/* Encodes n into buf (RELAY_NOTE_SIZE bytes); returns the length. */
size_t relay_note_encode(const struct relay_note *n, uint8_t *buf);
/* Decodes; NULL when well-formed, else what is wrong. */
const char *relay_note_decode(const uint8_t *buf, size_t len,
			      struct relay_note *n);

#define RELAY_HDR_MAGIC 0x524c4d31u	/* "RLM1" */

/* Starts every relayed message on a leg; `size` bytes follow inline
 * (RELAY_HDR_INLINE) or as ceil(size / chunk) messages of their own. */
struct relay_hdr {
	uint32_t magic;
	int32_t tag;
	uint64_t size;
	uint32_t flags;
	uint32_t seq;		/* message number, to catch a lost one */
	uint32_t chunk;		/* the sender's chunk size */
	uint32_t pad;
};
#define RELAY_HDR_INLINE 0x1u
/* The sender closed its comm: nothing follows on this connection. */
#define RELAY_HDR_END 0x2u

/* Leg messages of data that follow a header. */
static inline uint64_t relay_hdr_chunks(const struct relay_hdr *h)
{
	if (h->flags & (RELAY_HDR_INLINE | RELAY_HDR_END) || !h->chunk)
		return 0;
	return h->size / h->chunk + (h->size % h->chunk != 0);
}

#endif
