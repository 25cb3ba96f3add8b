/* SPDX-License-Identifier: MIT */
#include "relay_wire.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/* Layout: magic, type, then per type; strings in fixed fields. */
struct wire_head {
	uint32_t magic;
	uint16_t type;
	uint16_t hops_left;
	uint16_t nvisited, npath;
	int32_t status;
	uint32_t flags;
	uint32_t attempt;
	uint32_t key_hi, key_lo, pos_hi, pos_lo;
};

static size_t put_str(uint8_t *p, const char *s, size_t field)
{
	size_t n = strnlen(s, field - 1);

	memset(p, 0, field);
	memcpy(p, s, n);
	return field;
}

/* NULL when the field holds a NUL, so it is a string. */
static const char *get_str(const uint8_t *p, size_t field, char *out,
			   const char *what)
{
	if (!memchr(p, '\0', field))
		return what;
	memcpy(out, p, field);
	return NULL;
}

size_t relay_msg_encode(const struct relay_msg *m, uint8_t *buf)
{
	struct wire_head h = {
		.magic = htonl(RELAY_MAGIC),
		.type = htons((uint16_t)m->type),
		.hops_left = htons((uint16_t)m->hops_left),
		.nvisited = htons((uint16_t)m->nvisited),
		.npath = htons((uint16_t)m->npath),
		.status = (int32_t)htonl((uint32_t)m->status),
		.flags = htonl(m->flags),
		.attempt = htonl(m->attempt),
		.key_hi = htonl((uint32_t)(m->key >> 32)),
		.key_lo = htonl((uint32_t)m->key),
		.pos_hi = htonl((uint32_t)(m->pos >> 32)),
		.pos_lo = htonl((uint32_t)m->pos),
	};
	size_t off = sizeof(h);

	memcpy(buf, &h, sizeof(h));
	for (int i = 0; i < RELAY_HOPS_MAX; i++)
		off += put_str(buf + off, m->visited[i], RELAY_NAME_MAX);
	for (int i = 0; i < RELAY_HOPS_MAX; i++)
		off += put_str(buf + off, m->path[i], RELAY_NAME_MAX);
	memcpy(buf + off, m->handle, RELAY_HANDLE_BYTES);
	off += RELAY_HANDLE_BYTES;
	off += put_str(buf + off, m->leg, sizeof(m->leg));
	off += put_str(buf + off, m->origin, sizeof(m->origin));
	off += put_str(buf + off, m->text, sizeof(m->text));
	return off;
}

const char *relay_msg_decode(const uint8_t *buf, size_t len,
			     struct relay_msg *m)
{
	struct wire_head h;
	size_t off = sizeof(h);
	const char *bad = NULL;

	if (len != sizeof(h) + 2 * RELAY_HOPS_MAX * RELAY_NAME_MAX +
		   RELAY_HANDLE_BYTES + sizeof(m->leg) + sizeof(m->origin) +
		   sizeof(m->text))
		return "a message of the wrong length";
	memcpy(&h, buf, sizeof(h));
	if (ntohl(h.magic) != RELAY_MAGIC)
		return "not a relay message";
	memset(m, 0, sizeof(*m));
	m->type = (enum relay_msg_type)ntohs(h.type);
	m->hops_left = ntohs(h.hops_left);
	m->nvisited = ntohs(h.nvisited);
	m->npath = ntohs(h.npath);
	m->status = (int32_t)ntohl((uint32_t)h.status);
	m->flags = ntohl(h.flags);
	m->attempt = ntohl(h.attempt);
	m->key = (uint64_t)ntohl(h.key_hi) << 32 | ntohl(h.key_lo);
	m->pos = (uint64_t)ntohl(h.pos_hi) << 32 | ntohl(h.pos_lo);
	if (m->type < RELAY_MSG_REQ || m->type > RELAY_MSG_READY)
		return "an unknown message type";
	if (m->flags & ~RELAY_FLAGS_KNOWN)
		return "a flag this version does not know";
	if (m->nvisited > RELAY_HOPS_MAX || m->npath > RELAY_HOPS_MAX ||
	    m->hops_left > RELAY_HOPS_MAX)
		return "more hops than a route may have";
	if (m->status < 0 || m->status > 4095)
		return "a status that is no errno";
	for (int i = 0; !bad && i < RELAY_HOPS_MAX; i++, off += RELAY_NAME_MAX)
		bad = get_str(buf + off, RELAY_NAME_MAX, m->visited[i],
			      "an unterminated relay name");
	for (int i = 0; !bad && i < RELAY_HOPS_MAX; i++, off += RELAY_NAME_MAX)
		bad = get_str(buf + off, RELAY_NAME_MAX, m->path[i],
			      "an unterminated relay name");
	if (bad)
		return bad;
	memcpy(m->handle, buf + off, RELAY_HANDLE_BYTES);
	off += RELAY_HANDLE_BYTES;
	bad = get_str(buf + off, sizeof(m->leg), m->leg,
		      "an unterminated module name");
	off += sizeof(m->leg);
	if (!bad)
		bad = get_str(buf + off, sizeof(m->origin), m->origin,
			      "an unterminated origin");
	off += sizeof(m->origin);
	if (!bad)
		bad = get_str(buf + off, sizeof(m->text), m->text,
			      "an unterminated text");
	return bad;
}

/* magic, type, a zero, seq: all in network byte order */
size_t relay_note_encode(const struct relay_note *n, uint8_t *buf)
{
	uint32_t w[4] = {
		htonl(RELAY_NOTE_MAGIC), htonl((uint32_t)n->type << 16),
		htonl((uint32_t)(n->seq >> 32)), htonl((uint32_t)n->seq),
	};

	memcpy(buf, w, sizeof(w));
	return RELAY_NOTE_SIZE;
}

const char *relay_note_decode(const uint8_t *buf, size_t len,
			      struct relay_note *n)
{
	uint32_t w[4];
	uint32_t type;

	if (len != RELAY_NOTE_SIZE)
		return "a note of the wrong length";
	memcpy(w, buf, sizeof(w));
	if (ntohl(w[0]) != RELAY_NOTE_MAGIC)
		return "not a relay note";
	type = ntohl(w[1]);
	if (type & 0xffff)
		return "a note with bits set that must be zero";
	type >>= 16;
	if (type < RELAY_NOTE_ACK || type > RELAY_NOTE_GONE)
		return "an unknown note type";
	n->type = (enum relay_note_type)type;
	n->seq = (uint64_t)ntohl(w[2]) << 32 | ntohl(w[3]);
	return NULL;
}

int relay_route_hops(const char *route, struct mesh_conn_hop *hops, int max)
{
	const char *s = route;
	int n = 0;

	while (s && n < max) {
		const char *open = strstr(s, " ("), *close, *sp;
		struct mesh_conn_hop *h = &hops[n];

		if (!open || !(close = strchr(open, ')')))
			break;
		sp = memchr(open + 2, ' ', (size_t)(close - open - 2));
		if (!sp)
			break;
		snprintf(h->name, sizeof(h->name), "%.*s", (int)(open - s), s);
		snprintf(h->module, sizeof(h->module), "%.*s",
			 (int)(sp - open - 2), open + 2);
		snprintf(h->addr, sizeof(h->addr), "%.*s",
			 (int)(close - sp - 1), sp + 1);
		n++;
		s = strstr(close, " -> ");
		s = s ? s + 4 : NULL;
	}
	return n;
}
