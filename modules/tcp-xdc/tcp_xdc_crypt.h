/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc record layer: with encrypt = true every data stream carries
 * AES-256-GCM records (tcp_xdc_aead.h) instead of plain chunks.
 *
 *   record = len (u32, big-endian, 1..record size) | ciphertext[len] | tag[16]
 *
 * The plaintext of the records of a stream is exactly the byte stream an
 * unencrypted stream carries (chunk header, payload, header, ...); a record
 * never spans two chunks.  Each stream has its own key, derived with HKDF
 * from the control connection's secret (mesh_ctrl.secret), the direction
 * and the stream index.  The nonce is the stream index and the record's
 * number on that stream, never sent and never reused: a record flipped,
 * dropped, replayed or reordered fails its tag.  The length is
 * authenticated too (additional data).  A chunk's header travels in a
 * record of its own when a payload of at least TCP_XDC_RECORD_MIN follows,
 * so the payload's records line up with the receiver's buffer and open
 * straight into it, with no copy.  No byte is counted as received before
 * its record's tag is verified: a bad record fails the call (and the
 * connection), whatever it wrote into the buffer.
 *
 * Pure functions over buffers and one socket; no module state, so the unit
 * test drives them over a socketpair.
 */
#ifndef TCP_XDC_CRYPT_H
#define TCP_XDC_CRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "tcp_xdc_aead.h"
#include "tcp_xdc_ahead.h"

#define TCP_XDC_RECORD_HDR 4
#define TCP_XDC_RECORD_TAG TCP_XDC_AEAD_TAG
#define TCP_XDC_RECORD_MIN (4u << 10)
#define TCP_XDC_RECORD_MAX (16u << 20)
#define TCP_XDC_RECORD_LEAD 64		/* a leading record (a header) */
#define TCP_XDC_CIPHER_NAME "AES-256-GCM"

/* One direction of one stream. */
struct tcp_xdc_crypt {
	struct tcp_xdc_aead *aead;	/* key set */
	uint32_t stream;
	uint64_t counter;		/* records sealed or opened so far */
	size_t record_max;		/* plaintext bytes per record */
	uint8_t *buf;			/* records as on the wire: send, one
					 * behind a leading one; recv, one */
	size_t buf_len;			/* send: sealed record size, 0: none;
					 * recv: whole record size, 0: unknown */
	size_t buf_done;		/* send: bytes written; recv: read */
	size_t pt_len;			/* send: plaintext in the sealed record;
					 * recv: the record's plaintext */
	size_t pt_off;			/* recv: of it, handed out (what
					 * is left is verified, at buf+4) */
	struct tcp_xdc_ahead ahead;	/* recv: wire bytes read past what
					 * buf wanted */
	char why[160];			/* the last error, in words */
	int cut;			/* recv: what cut a record (the read's
					 * -errno; 0: the end of the stream) */
};

/*
 * Keys c for stream `stream` of a connection whose control channel had
 * this secret, sending side (seal) or receiving side, sealing or opening
 * with lib's code.  0 or -errno.
 */
int tcp_xdc_crypt_init(struct tcp_xdc_crypt *c, const uint8_t *secret,
		       size_t secret_len, bool seal, int stream,
		       size_t record_max, enum tcp_xdc_aead_lib lib);
void tcp_xdc_crypt_fini(struct tcp_xdc_crypt *c);

/*
 * Writes the bytes of iov to fd as records.  Returns how many plaintext
 * bytes of iov went out in whole records (> 0), or -errno (-EAGAIN when
 * the socket is full: call again with iov advanced by nothing, the sealed
 * record waits).  *wire counts the bytes written.
 */
ssize_t tcp_xdc_crypt_send(struct tcp_xdc_crypt *c, int fd,
			   const struct iovec *iov, int iovcnt,
			   uint64_t *wire);

/*
 * Reads verified plaintext from fd into iov: bytes placed (> 0), 0 at a
 * clean end of stream (between records), -EAGAIN, -ECONNRESET (reset
 * between records), -EBADMSG for a record that fails authentication or is
 * malformed (what it wrote into iov is then garbage), -ECONNABORTED for a
 * stream cut inside a record (why says which, cut how), or another -errno
 * of recv.
 * *wire counts the bytes read.
 */
ssize_t tcp_xdc_crypt_recv(struct tcp_xdc_crypt *c, int fd,
			   const struct iovec *iov, int iovcnt,
			   uint64_t *wire);

/*
 * Whether c holds bytes it read from the socket and has not handed out:
 * poll will not announce them, so whoever reads must come back for them.
 */
static inline bool tcp_xdc_crypt_buffered(const struct tcp_xdc_crypt *c)
{
	return c->pt_off < c->pt_len || tcp_xdc_ahead_pending(&c->ahead);
}

/*
 * Seals what of iov goes out next into c->buf (buf_len, pt_len): one record
 * of up to record_max bytes, behind a record of iov[0] alone when that is a
 * short header followed by at least TCP_XDC_RECORD_MIN bytes.  The sender
 * writes what it seals; tests take the wire bytes from buf.  0 or -errno.
 */
int tcp_xdc_crypt_seal(struct tcp_xdc_crypt *c, const struct iovec *iov,
		       int iovcnt);

#endif
