/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc wire formats and their parsers.  Pure functions on bytes: no
 * sockets, no logging, no module state, so that the fuzz target can drive
 * them directly.  All integers on the wire are big-endian.
 */
#ifndef TCP_XDC_WIRE_H
#define TCP_XDC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define TCP_XDC_MAX_STREAMS 64
#define TCP_XDC_MIN_CHUNK (4ULL << 10)
#define TCP_XDC_MAX_CHUNK (64ULL << 20)
/* The send cursor packs a message number and an offset into 64 bits. */
#define TCP_XDC_OFFSET_BITS 40
#define TCP_XDC_MAX_MESSAGE (1ULL << TCP_XDC_OFFSET_BITS)

#define TCP_XDC_MAGIC 0x54584443u	/* "TXDC" */
/* 2: the receiver may write ping bytes on a data stream, the sender drops
 * them (version 1 senders took any byte from the receiver as a close).
 * 3: the hello carries the record size of encrypted streams (0: clear); a
 * version 2 peer would ignore it and misread the records.
 * 4: the hello carries the connector's rejoin key (0: it does not resume),
 * and a stream dialed anew starts with the resume messages below. */
#define TCP_XDC_PROTO_VERSION 4

/*
 * The receiver's pings on a data stream it has not read from for a while:
 * one byte each, which the sender drops.  PARKED: the receiver holds the
 * stream back (no receive posted for what comes next), so data the sender
 * has in flight may stay unacknowledged without the peer being gone.  A
 * sender of version 2 takes either as a ping.
 */
#define TCP_XDC_PING 'p'
#define TCP_XDC_PING_PARKED 'w'

/* Connector -> acceptor, over the core's control channel. */
struct tcp_xdc_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t nstreams;
	uint32_t chunk_size;
	uint32_t record_size;	/* encrypted records of at most this many
				 * plaintext bytes (tcp_xdc_crypt.h); 0: the
				 * streams carry chunks in clear */
	uint64_t rejoin_key;	/* names the connection when a stream is
				 * dialed anew; 0: the connector does not */
};

/* Acceptor -> connector: status 0 accepts, else a positive errno. */
struct tcp_xdc_reply {
	uint32_t magic;
	uint16_t version;
	uint16_t status;
	char reason[112];
};

/* Precedes every chunk on a data stream. */
struct tcp_xdc_chunk_hdr {
	uint64_t seq;		/* message number on this connection */
	uint64_t total;		/* size of the whole message */
	uint64_t offset;	/* of this chunk within the message */
	uint32_t len;		/* payload bytes following the header */
	int32_t tag;
};

_Static_assert(sizeof(struct tcp_xdc_hello) == 24, "wire hello size");
_Static_assert(sizeof(struct tcp_xdc_reply) == 120, "wire reply size");
_Static_assert(sizeof(struct tcp_xdc_chunk_hdr) == 32, "wire header size");

/* A chunk header in host order. */
struct tcp_xdc_chunk {
	uint64_t seq;
	uint64_t total;
	uint64_t offset;
	uint32_t len;
	int32_t tag;
};

void tcp_xdc_hello_encode(struct tcp_xdc_hello *h, int nstreams,
			  uint32_t chunk_size);
/*
 * Checks a hello of len bytes.  Returns 0 and the connection's stream
 * count and chunk size, or a positive errno with the reason in words.
 */
int tcp_xdc_hello_parse(const void *buf, size_t len, int *nstreams,
			uint32_t *chunk_size, char *reason, size_t cap);

/* The record size a hello of len bytes asks for (0: in clear). */
uint32_t tcp_xdc_hello_record_size(const void *buf, size_t len);
void tcp_xdc_hello_set_record_size(struct tcp_xdc_hello *h, uint32_t size);

void tcp_xdc_reply_encode(struct tcp_xdc_reply *r, int status,
			  const char *reason);
/*
 * Checks a reply of len bytes.  Returns 0 for an acceptance, the peer's
 * positive errno for a refusal (its reason, NUL-terminated, in reason), or
 * -EPROTO when the bytes are no reply at all.
 */
int tcp_xdc_reply_parse(const void *buf, size_t len, char *reason,
			size_t cap);

uint64_t tcp_xdc_hello_rejoin_key(const void *buf, size_t len);
void tcp_xdc_hello_set_rejoin_key(struct tcp_xdc_hello *h, uint64_t key);

/*
 * A stream dialed anew (after its socket broke) starts with two messages
 * of 16 bytes: "XRSM" | 0[4] | chunks[8] from the receiver, in clear: how
 * many chunks of this stream it has whole, over all its sockets; then
 * "XRSC" | 0[4] | chunks[8] from the sender, through the new socket's
 * records when encrypted: the chunk it writes next on the new socket.
 * That is the receiver's count, or more where the sender saw chunks
 * acknowledged that the receiver has not read yet: it reads them from the
 * old socket first.  A count changed on the way fails the connection
 * instead of losing or doubling a chunk.
 */
#define TCP_XDC_RESUME_SIZE 16
#define TCP_XDC_RESUME_ASK 0x5852534du	/* "XRSM" */
#define TCP_XDC_RESUME_CONFIRM 0x58525343u	/* "XRSC" */

void tcp_xdc_resume_encode(uint8_t *buf, uint32_t magic, uint64_t chunks);
/* 0 with *chunks for a message of this magic, else -EPROTO. */
int tcp_xdc_resume_parse(const uint8_t *buf, uint32_t magic,
			 uint64_t *chunks);

void tcp_xdc_chunk_encode(struct tcp_xdc_chunk_hdr *wire,
			  const struct tcp_xdc_chunk *c);
/*
 * Decodes and checks a chunk header read from a stream whose previous chunk
 * was of message last_seq, on a connection with chunks of at most
 * chunk_size bytes.  Returns 0 or -EPROTO; *c is filled either way, for the
 * error message.
 */
int tcp_xdc_chunk_parse(const struct tcp_xdc_chunk_hdr *wire,
			uint64_t chunk_size, uint64_t last_seq,
			struct tcp_xdc_chunk *c);

#endif
