/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc wire formats: encoding and the checks on everything a peer sends
 * before or between chunks.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tcp_xdc_wire.h"

void tcp_xdc_hello_encode(struct tcp_xdc_hello *h, int nstreams,
			  uint32_t chunk_size)
{
	memset(h, 0, sizeof(*h));
	h->magic = htobe32(TCP_XDC_MAGIC);
	h->version = htobe16(TCP_XDC_PROTO_VERSION);
	h->nstreams = htobe16((uint16_t)nstreams);
	h->chunk_size = htobe32(chunk_size);
}

int tcp_xdc_hello_parse(const void *buf, size_t len, int *nstreams,
			uint32_t *chunk_size, char *reason, size_t cap)
{
	struct tcp_xdc_hello h;
	unsigned int n;
	uint32_t chunk;

	/* magic and version first: a peer of another version says so,
	 * whatever the size of its hello */
	memset(&h, 0, sizeof(h));
	memcpy(&h, buf, len < sizeof(h) ? len : sizeof(h));
	if (len < 8 || be32toh(h.magic) != TCP_XDC_MAGIC) {
		snprintf(reason, cap, "malformed tcp-xdc hello (bad magic)");
		return EPROTO;
	}
	if (be16toh(h.version) != TCP_XDC_PROTO_VERSION) {
		snprintf(reason, cap,
			 "tcp-xdc protocol version %u, this side speaks %u",
			 be16toh(h.version), TCP_XDC_PROTO_VERSION);
		return EPROTONOSUPPORT;
	}
	if (len != sizeof(h)) {
		snprintf(reason, cap, "malformed tcp-xdc hello (%zu bytes)",
			 len);
		return EPROTO;
	}
	n = be16toh(h.nstreams);
	chunk = be32toh(h.chunk_size);
	if (n < 1 || n > TCP_XDC_MAX_STREAMS) {
		snprintf(reason, cap, "%u streams, expected 1..%d", n,
			 TCP_XDC_MAX_STREAMS);
		return EINVAL;
	}
	if (chunk < TCP_XDC_MIN_CHUNK || chunk > TCP_XDC_MAX_CHUNK) {
		snprintf(reason, cap, "chunk size %u out of range", chunk);
		return EINVAL;
	}
	*nstreams = (int)n;
	*chunk_size = chunk;
	return 0;
}

uint32_t tcp_xdc_hello_record_size(const void *buf, size_t len)
{
	struct tcp_xdc_hello h;

	if (len != sizeof(h))
		return 0;
	memcpy(&h, buf, sizeof(h));
	return be32toh(h.record_size);
}

void tcp_xdc_hello_set_record_size(struct tcp_xdc_hello *h, uint32_t size)
{
	h->record_size = htobe32(size);
}

uint64_t tcp_xdc_hello_rejoin_key(const void *buf, size_t len)
{
	struct tcp_xdc_hello h;

	if (len != sizeof(h))
		return 0;
	memcpy(&h, buf, sizeof(h));
	return be64toh(h.rejoin_key);
}

void tcp_xdc_hello_set_rejoin_key(struct tcp_xdc_hello *h, uint64_t key)
{
	h->rejoin_key = htobe64(key);
}

void tcp_xdc_resume_encode(uint8_t *buf, uint32_t magic, uint64_t chunks)
{
	uint32_t m = htobe32(magic), zero = 0;
	uint64_t c = htobe64(chunks);

	memcpy(buf, &m, 4);
	memcpy(buf + 4, &zero, 4);
	memcpy(buf + 8, &c, 8);
}

int tcp_xdc_resume_parse(const uint8_t *buf, uint32_t magic,
			 uint64_t *chunks)
{
	uint32_t m, zero;
	uint64_t c;

	memcpy(&m, buf, 4);
	memcpy(&zero, buf + 4, 4);
	memcpy(&c, buf + 8, 8);
	if (be32toh(m) != magic || zero)
		return -EPROTO;
	*chunks = be64toh(c);
	return 0;
}

void tcp_xdc_reply_encode(struct tcp_xdc_reply *r, int status,
			  const char *reason)
{
	memset(r, 0, sizeof(*r));
	r->magic = htobe32(TCP_XDC_MAGIC);
	r->version = htobe16(TCP_XDC_PROTO_VERSION);
	r->status = htobe16((uint16_t)status);
	if (reason)
		strncpy(r->reason, reason, sizeof(r->reason) - 1);
}

int tcp_xdc_reply_parse(const void *buf, size_t len, char *reason,
			size_t cap)
{
	struct tcp_xdc_reply r;
	size_t n;

	if (cap)
		reason[0] = '\0';
	if (len < offsetof(struct tcp_xdc_reply, reason) ||
	    len > sizeof(r))
		return -EPROTO;
	memset(&r, 0, sizeof(r));
	memcpy(&r, buf, len);
	if (be32toh(r.magic) != TCP_XDC_MAGIC)
		return -EPROTO;
	if (!r.status)
		return 0;
	/* The reason is NUL-padded, but the peer may have filled it. */
	n = strnlen(r.reason, len - offsetof(struct tcp_xdc_reply, reason));
	if (cap) {
		if (n >= cap)
			n = cap - 1;
		memcpy(reason, r.reason, n);
		reason[n] = '\0';
	}
	return be16toh(r.status);
}

void tcp_xdc_chunk_encode(struct tcp_xdc_chunk_hdr *wire,
			  const struct tcp_xdc_chunk *c)
{
	wire->seq = htobe64(c->seq);
	wire->total = htobe64(c->total);
	wire->offset = htobe64(c->offset);
	wire->len = htobe32(c->len);
	wire->tag = (int32_t)htobe32((uint32_t)c->tag);
}

int tcp_xdc_chunk_parse(const struct tcp_xdc_chunk_hdr *wire,
			uint64_t chunk_size, uint64_t last_seq,
			struct tcp_xdc_chunk *c)
{
	c->seq = be64toh(wire->seq);
	c->total = be64toh(wire->total);
	c->offset = be64toh(wire->offset);
	c->len = be32toh(wire->len);
	c->tag = (int32_t)be32toh((uint32_t)wire->tag);
	/* Zero length only for the one chunk of an empty message. */
	if (c->len > chunk_size || c->total > TCP_XDC_MAX_MESSAGE ||
	    c->offset > c->total || c->len > c->total - c->offset ||
	    (!c->len && c->total) || c->seq < last_seq)
		return -EPROTO;
	return 0;
}
