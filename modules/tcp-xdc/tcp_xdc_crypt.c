/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc record layer (tcp_xdc_crypt.h): AES-256-GCM (tcp_xdc_aead.h),
 * keys from libcrypto's HKDF.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "tcp_xdc_crypt.h"

/* key = HKDF-SHA256(secret, info = label | direction | stream) */
static int derive_key(const uint8_t *secret, size_t secret_len, int stream,
		      uint8_t key[TCP_XDC_AEAD_KEY])
{
	static const char label[] = "nccl-mesh tcp-xdc stream key, "
				    "connector to acceptor";
	uint8_t info[sizeof(label) - 1 + 4];
	uint32_t be = htobe32((uint32_t)stream);
	EVP_PKEY_CTX *k = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t n = TCP_XDC_AEAD_KEY;
	int ok;

	memcpy(info, label, sizeof(label) - 1);
	memcpy(info + sizeof(label) - 1, &be, 4);
	ok = k && EVP_PKEY_derive_init(k) == 1 &&
	     EVP_PKEY_CTX_set_hkdf_md(k, EVP_sha256()) == 1 &&
	     EVP_PKEY_CTX_set1_hkdf_key(k, secret, (int)secret_len) == 1 &&
	     EVP_PKEY_CTX_add1_hkdf_info(k, info, (int)sizeof(info)) == 1 &&
	     EVP_PKEY_derive(k, key, &n) == 1 && n == TCP_XDC_AEAD_KEY;
	EVP_PKEY_CTX_free(k);
	return ok ? 0 : -ENOMEM;
}

/* Room for a full record behind a short leading one (tcp_xdc_crypt_seal). */
static size_t buf_size(size_t record_max)
{
	return 2 * (TCP_XDC_RECORD_HDR + TCP_XDC_RECORD_TAG) +
	       TCP_XDC_RECORD_LEAD + record_max;
}

int tcp_xdc_crypt_init(struct tcp_xdc_crypt *c, const uint8_t *secret,
		       size_t secret_len, bool seal, int stream,
		       size_t record_max, enum tcp_xdc_aead_lib lib)
{
	uint8_t key[TCP_XDC_AEAD_KEY];

	memset(c, 0, sizeof(*c));
	if (!secret || !secret_len || record_max < TCP_XDC_RECORD_MIN ||
	    record_max > TCP_XDC_RECORD_MAX)
		return -EINVAL;
	c->stream = (uint32_t)stream;
	c->record_max = record_max;
	c->buf = malloc(buf_size(record_max) +
			(seal ? 0 : TCP_XDC_READ_AHEAD));
	if (c->buf && !seal)
		c->ahead.buf = c->buf + buf_size(record_max);
	if (c->buf && !derive_key(secret, secret_len, stream, key))
		c->aead = tcp_xdc_aead_new(key, seal, lib);
	OPENSSL_cleanse(key, sizeof(key));
	if (!c->aead) {
		tcp_xdc_crypt_fini(c);
		return -ENOMEM;
	}
	return 0;
}

void tcp_xdc_crypt_fini(struct tcp_xdc_crypt *c)
{
	tcp_xdc_aead_free(c->aead);
	if (c->buf)
		OPENSSL_cleanse(c->buf, buf_size(c->record_max));
	free(c->buf);
	memset(c, 0, sizeof(*c));
}

/* The stream index and the record number: unique for the key's life. */
static void make_nonce(const struct tcp_xdc_crypt *c,
		       uint8_t n[TCP_XDC_AEAD_NONCE])
{
	uint32_t s = htobe32(c->stream);
	uint64_t r = htobe64(c->counter);

	memcpy(n, &s, 4);
	memcpy(n + 4, &r, 8);
}

/* Seals len bytes of iov as the next record at out; its size, 0 on error. */
static size_t seal_record(struct tcp_xdc_crypt *c, uint8_t *out,
			  const struct iovec *iov, int iovcnt, size_t len)
{
	uint8_t nonce[TCP_XDC_AEAD_NONCE];
	uint8_t *p = out + TCP_XDC_RECORD_HDR;
	uint32_t be = htobe32((uint32_t)len);
	size_t left = len;
	bool ok;

	make_nonce(c, nonce);
	memcpy(out, &be, 4);
	ok = tcp_xdc_aead_begin(c->aead, nonce, out, 4);
	for (int i = 0; ok && i < iovcnt && left; i++) {
		size_t take = iov[i].iov_len < left ? iov[i].iov_len : left;

		ok = tcp_xdc_aead_update(c->aead, p, iov[i].iov_base, take);
		p += take;
		left -= take;
	}
	ok = ok && !left && tcp_xdc_aead_finish(c->aead, p);
	if (!ok)
		return 0;
	c->counter++;
	return TCP_XDC_RECORD_HDR + len + TCP_XDC_RECORD_TAG;
}

/* A header sealed alone lets the payload's records line up with the
 * receiver's buffer, so it opens them straight into it. */
int tcp_xdc_crypt_seal(struct tcp_xdc_crypt *c, const struct iovec *iov,
		       int iovcnt)
{
	size_t len = 0, lead = 0, wire = 0, n;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (iovcnt > 1 && iov[0].iov_len &&
	    iov[0].iov_len <= TCP_XDC_RECORD_LEAD &&
	    len - iov[0].iov_len >= TCP_XDC_RECORD_MIN) {
		lead = iov[0].iov_len;
		wire = seal_record(c, c->buf, iov, 1, lead);
		if (!wire)
			return -EIO;
		iov++;
		iovcnt--;
		len -= lead;
	}
	if (len > c->record_max)
		len = c->record_max;
	if (!len)
		return -EINVAL;
	n = seal_record(c, c->buf + wire, iov, iovcnt, len);
	if (!n)
		return -EIO;
	c->buf_len = wire + n;
	c->buf_done = 0;
	c->pt_len = lead + len;
	return 0;
}

ssize_t tcp_xdc_crypt_send(struct tcp_xdc_crypt *c, int fd,
			   const struct iovec *iov, int iovcnt,
			   uint64_t *wire)
{
	for (;;) {
		ssize_t n;

		if (!c->buf_len) {
			int rc = tcp_xdc_crypt_seal(c, iov, iovcnt);

			if (rc)
				return rc;
		}
		n = send(fd, c->buf + c->buf_done, c->buf_len - c->buf_done,
			 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
		*wire += (uint64_t)n;
		c->buf_done += (size_t)n;
		if (c->buf_done == c->buf_len) {
			c->buf_len = 0;
			return (ssize_t)c->pt_len;
		}
	}
}

static ssize_t fail(struct tcp_xdc_crypt *c, int err, const char *fmt,
		    unsigned long long a)
{
	snprintf(c->why, sizeof(c->why), fmt, a);
	OPENSSL_cleanse(c->buf, c->buf_done);
	return err;
}

/*
 * A whole record is in buf: decrypts it into iov as far as iov reaches and
 * the rest in place, then verifies it.  Returns the bytes it placed in iov
 * (counted only once the tag holds: on a bad tag the call fails, and
 * whatever it wrote there is never reported received) or -EBADMSG.
 */
static ssize_t open_record(struct tcp_xdc_crypt *c, const struct iovec *iov,
			   int iovcnt)
{
	uint8_t nonce[TCP_XDC_AEAD_NONCE];
	size_t len = c->buf_len - TCP_XDC_RECORD_HDR - TCP_XDC_RECORD_TAG;
	size_t placed = 0;
	uint8_t *p = c->buf + TCP_XDC_RECORD_HDR;
	bool ok;

	make_nonce(c, nonce);
	ok = tcp_xdc_aead_begin(c->aead, nonce, c->buf, 4);
	for (int i = 0; ok && i < iovcnt && placed < len; i++) {
		size_t take = len - placed;

		if (take > iov[i].iov_len)
			take = iov[i].iov_len;
		ok = tcp_xdc_aead_update(c->aead, iov[i].iov_base,
					 p + placed, take);
		placed += take;
	}
	ok = ok && tcp_xdc_aead_update(c->aead, p + placed, p + placed,
				       len - placed) &&
	     tcp_xdc_aead_finish(c->aead, p + len);
	if (!ok)
		return fail(c, -EBADMSG, "record %llu failed authentication: "
			    "data corrupted or tampered in flight",
			    (unsigned long long)c->counter);
	c->counter++;
	c->pt_off = placed;
	c->pt_len = len;
	c->buf_len = 0;
	c->buf_done = 0;
	return (ssize_t)placed;
}

/* Copies up to avail bytes of src into iov, in order; how many it copied. */
static size_t iov_fill(const struct iovec *iov, int iovcnt, const void *src,
		       size_t avail)
{
	size_t done = 0;

	for (int i = 0; i < iovcnt && done < avail; i++) {
		size_t n = avail - done;

		if (n > iov[i].iov_len)
			n = iov[i].iov_len;
		memcpy(iov[i].iov_base, (const uint8_t *)src + done, n);
		done += n;
	}
	return done;
}

/*
 * Reads up to want bytes of the record into buf, with what follows on the
 * wire behind them in the same call: behind a record's length, a small
 * record whole; behind a record, the next one's length.  One system call
 * a record instead of two.
 */
static ssize_t read_some(struct tcp_xdc_crypt *c, int fd, size_t want,
			 uint64_t *wire)
{
	return tcp_xdc_ahead_read(&c->ahead, fd, c->buf + c->buf_done, want,
				  c->buf_len ? TCP_XDC_RECORD_HDR :
					       TCP_XDC_READ_AHEAD, wire);
}

ssize_t tcp_xdc_crypt_recv(struct tcp_xdc_crypt *c, int fd,
			   const struct iovec *iov, int iovcnt,
			   uint64_t *wire)
{
	for (;;) {
		size_t want;
		ssize_t n;

		if (c->pt_off < c->pt_len) {
			/* verified plaintext left in buf */
			size_t done = iov_fill(iov, iovcnt,
					       c->buf + TCP_XDC_RECORD_HDR +
					       c->pt_off,
					       c->pt_len - c->pt_off);

			c->pt_off += done;
			return done ? (ssize_t)done : -EINVAL; /* empty iov */
		}
		want = c->buf_len ? c->buf_len - c->buf_done :
				    TCP_XDC_RECORD_HDR - c->buf_done;
		n = read_some(c, fd, want, wire);
		if (n == -EAGAIN)
			return -EAGAIN;
		if (n <= 0 && c->buf_done) {
			c->cut = (int)n;
			return fail(c, -ECONNABORTED, n ? "connection reset "
				    "in the middle of record %llu" :
				    "stream ended in the middle of record %llu"
				    " (truncated in flight?)",
				    (unsigned long long)c->counter);
		}
		if (n <= 0)
			return n;
		c->buf_done += (size_t)n;
		if (!c->buf_len && c->buf_done == TCP_XDC_RECORD_HDR) {
			uint32_t be, len;

			memcpy(&be, c->buf, 4);
			len = be32toh(be);
			if (!len || len > c->record_max)
				return fail(c, -EBADMSG, "record %llu has a "
					    "length out of range: data "
					    "corrupted or tampered in flight",
					    (unsigned long long)c->counter);
			c->buf_len = TCP_XDC_RECORD_HDR + len +
				     TCP_XDC_RECORD_TAG;
		}
		if (c->buf_len && c->buf_done == c->buf_len) {
			n = open_record(c, iov, iovcnt);
			if (n)
				return n;
		}
	}
}
