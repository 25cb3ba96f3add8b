/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's record layer over a socketpair: round trips of every shape,
 * small records read whole in one call, and each way a record can go wrong
 * in flight (a flipped byte, a dropped, replayed or reordered record, a bad
 * length, a cut stream, another key) fails with its own error before a
 * byte of it is handed out.  First, the cipher layer computes standard
 * AES-256-GCM whichever library the build chose: a published test vector,
 * and libcrypto's own result, fed in uneven pieces.  Where the build has
 * both libraries, the record tests run again with records sealed by one
 * and opened by the other, as between peers that chose apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "tcp_xdc_aead.h"
#include "tcp_xdc_crypt.h"
#include "check.h"

#define RECORD (4u << 10)
#define WIRE_MAX (TCP_XDC_RECORD_HDR + RECORD + TCP_XDC_RECORD_TAG)

static uint8_t secret[32], other[32];
/* whose code seals and opens the records of the tests below */
static enum tcp_xdc_aead_lib tx_lib = TCP_XDC_AEAD_BEST,
			     rx_lib = TCP_XDC_AEAD_BEST;

struct pair {
	int fd[2];			/* 0 writes, 1 reads */
	struct tcp_xdc_crypt tx, rx;
};

static void pair_open(struct pair *p, const uint8_t *rx_secret, int rx_stream)
{
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fd) == 0);
	CHECK(fcntl(p->fd[1], F_SETFL, O_NONBLOCK) == 0);
	CHECK(tcp_xdc_crypt_init(&p->tx, secret, 32, true, 2, RECORD,
				 tx_lib) == 0);
	CHECK(tcp_xdc_crypt_init(&p->rx, rx_secret, 32, false, rx_stream,
				 RECORD, rx_lib) == 0);
}

static void pair_close(struct pair *p)
{
	if (p->fd[0] >= 0)
		close(p->fd[0]);
	close(p->fd[1]);
	tcp_xdc_crypt_fini(&p->tx);
	tcp_xdc_crypt_fini(&p->rx);
}

/* Reads until n bytes came, the socket is dry, or an error; returns the
 * last result (> 0 once all came). */
static ssize_t read_all(struct pair *p, uint8_t *buf, size_t n, size_t *got)
{
	uint64_t wire = 0;
	ssize_t r = 0;

	*got = 0;
	while (*got < n) {
		struct iovec iov = { buf + *got, n - *got };

		r = tcp_xdc_crypt_recv(&p->rx, p->fd[1], &iov, 1, &wire);
		if (r <= 0)
			return r;
		*got += (size_t)r;
	}
	return r;
}

/* Seals `count` records of distinct content into wire[i], lens in len[i]. */
static void seal_records(struct pair *p, uint8_t wire[][WIRE_MAX],
			 size_t *len, int count)
{
	uint8_t pt[RECORD];

	for (int i = 0; i < count; i++) {
		struct iovec iov = { pt, sizeof(pt) };

		memset(pt, 'a' + i, sizeof(pt));
		CHECK(tcp_xdc_crypt_seal(&p->tx, &iov, 1) == 0);
		memcpy(wire[i], p->tx.buf, p->tx.buf_len);
		len[i] = p->tx.buf_len;
		p->tx.buf_len = 0;
	}
}

static void put(struct pair *p, const uint8_t *b, size_t n)
{
	CHECK(write(p->fd[0], b, n) == (ssize_t)n);
}

static void unhex(const char *h, uint8_t *out)
{
	for (size_t i = 0; h[2 * i]; i++)
		CHECK(sscanf(h + 2 * i, "%2hhx", &out[i]) == 1);
}

/* Seals n bytes in pieces of the given sizes (cycled) with the module's
 * cipher layer; the tag into tag. */
static void aead_pieces(struct tcp_xdc_aead *a, const uint8_t *nonce,
			const uint8_t *aad, size_t aad_len, uint8_t *out,
			const uint8_t *in, size_t n, uint8_t *tag)
{
	static const size_t piece[] = { 1, 15, 17, 27, 4096, 3 };
	size_t done = 0;

	CHECK(tcp_xdc_aead_begin(a, nonce, aad, aad_len));
	for (int i = 0; done < n; i++) {
		size_t take = piece[i % 6] < n - done ? piece[i % 6] : n - done;

		CHECK(tcp_xdc_aead_update(a, out + done, in + done, take));
		done += take;
	}
	CHECK(tcp_xdc_aead_finish(a, tag));
}

/* The GCM specification's test case 16 (AES-256, 60 bytes, 20 of
 * additional data), sealed and opened in place in pieces; a changed tag
 * fails.  Then 20 KiB against libcrypto's one-shot result.  For each
 * library this build and CPU have. */
static void test_cipher_is_standard(enum tcp_xdc_aead_lib lib)
{
	uint8_t key[32], nonce[12], pt[60], aad[20], ct[60], tag[16];
	uint8_t out[60], mine[16];
	struct tcp_xdc_aead *s, *o;
	size_t big = 20u << 10;
	uint8_t *in, *a, *b;
	EVP_CIPHER_CTX *e;
	int n;

	if (tcp_xdc_aead_unusable(lib)) {
		CHECK(!tcp_xdc_aead_library(lib));
		printf("cipher library %d: %s\n", (int)lib,
		       tcp_xdc_aead_unusable(lib));
		return;
	}
	printf("cipher: AES-256-GCM by %s\n", tcp_xdc_aead_library(lib));
	unhex("feffe9928665731c6d6a8f9467308308"
	      "feffe9928665731c6d6a8f9467308308", key);
	unhex("cafebabefacedbaddecaf888", nonce);
	unhex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d"
	      "8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657"
	      "ba637b39", pt);
	unhex("feedfacedeadbeeffeedfacedeadbeefabaddad2", aad);
	unhex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd"
	      "2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0a"
	      "bcc9f662", ct);
	unhex("76fc6ece0f4e1768cddf8853bb2d551b", tag);
	s = tcp_xdc_aead_new(key, true, lib);
	o = tcp_xdc_aead_new(key, false, lib);
	in = malloc(big);
	a = malloc(big);
	b = malloc(big);
	e = EVP_CIPHER_CTX_new();
	CHECK(s && o && in && a && b && e);
	if (!s || !o || !in || !a || !b || !e)
		return;
	aead_pieces(s, nonce, aad, sizeof(aad), out, pt, sizeof(pt), mine);
	CHECK(!memcmp(out, ct, sizeof(ct)));
	CHECK(!memcmp(mine, tag, sizeof(tag)));
	aead_pieces(o, nonce, aad, sizeof(aad), out, out, sizeof(out), tag);
	CHECK(!memcmp(out, pt, sizeof(pt)));
	tag[5] ^= 0x10;
	CHECK(tcp_xdc_aead_begin(o, nonce, aad, sizeof(aad)));
	CHECK(tcp_xdc_aead_update(o, out, ct, sizeof(ct)));
	CHECK(!tcp_xdc_aead_finish(o, tag));

	for (size_t i = 0; i < big; i++)
		in[i] = (uint8_t)(i * 7 + (i >> 9));
	aead_pieces(s, nonce, aad, 4, a, in, big, mine);
	CHECK(EVP_EncryptInit_ex(e, EVP_aes_256_gcm(), NULL, key, nonce) == 1);
	CHECK(EVP_EncryptUpdate(e, NULL, &n, aad, 4) == 1);
	CHECK(EVP_EncryptUpdate(e, b, &n, in, (int)big) == 1);
	CHECK(EVP_EncryptFinal_ex(e, tag, &n) == 1);
	CHECK(EVP_CIPHER_CTX_ctrl(e, EVP_CTRL_GCM_GET_TAG, 16, tag) == 1);
	CHECK(!memcmp(a, b, big));
	CHECK(!memcmp(mine, tag, sizeof(tag)));
	EVP_CIPHER_CTX_free(e);
	tcp_xdc_aead_free(s);
	tcp_xdc_aead_free(o);
	free(in);
	free(a);
	free(b);
}

/* A chunk header and payload in two pieces, as the sender's iov has them,
 * across record boundaries; read back through iovs of other shapes. */
static void test_round_trip(void)
{
	static const size_t sizes[] = { 1, 31, 32, RECORD - 1, RECORD,
					RECORD + 1, 5 * RECORD + 77 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k], sent = 0, got = 0;
		uint8_t *in = malloc(n + 32), *out = calloc(1, n + 32);
		uint64_t wire = 0;
		struct pair p;

		pair_open(&p, secret, 2);
		for (size_t i = 0; i < n + 32; i++)
			in[i] = (uint8_t)(i * 7 + k);
		while (sent < n + 32) {
			/* header (32) then payload, like send_progress */
			struct iovec iov[2];
			int cnt = 0;
			ssize_t r;

			if (sent < 32)
				iov[cnt++] = (struct iovec){ in + sent,
							     32 - sent };
			iov[cnt++] = (struct iovec){
				in + (sent > 32 ? sent : 32),
				n + 32 - (sent > 32 ? sent : 32) };
			r = tcp_xdc_crypt_send(&p.tx, p.fd[0], iov, cnt, &wire);
			CHECK(r > 0 && (size_t)r <= RECORD +
					   TCP_XDC_RECORD_LEAD);
			if (r <= 0)
				break;
			sent += (size_t)r;
			/* drain as we go: the socketpair's buffer is small */
			while (got < sent) {
				struct iovec o[2] = { { out + got, 7 },
						      { out + got + 7,
							n + 32 - got - 7 } };
				uint64_t w = 0;
				ssize_t q = tcp_xdc_crypt_recv(&p.rx, p.fd[1],
							       o, 2, &w);

				if (q <= 0) {
					CHECK(q == -EAGAIN);
					break;
				}
				got += (size_t)q;
			}
		}
		CHECK(got == n + 32 && !memcmp(in, out, n + 32));
		/* each record has 20 bytes more; the header has its own
		 * when a payload of a small record's worth follows */
		CHECK(wire == n + 32 + 20 * (n >= TCP_XDC_RECORD_MIN ?
			1 + (n + RECORD - 1) / RECORD :
			(n + 32 + RECORD - 1) / RECORD));
		pair_close(&p);
		free(in);
		free(out);
	}
}

/* A header, then a payload of whole records: read as the receiver reads
 * them (the header, then the payload into its place), every record opens
 * straight into the reader's buffer and none is left to copy out. */
static void test_opens_in_place(void)
{
	enum { PAYLOAD = 3 * RECORD - 5 };
	static uint8_t in[32 + PAYLOAD], hdr[32], out[PAYLOAD];
	struct iovec iov[2] = { { in, 32 }, { in + 32, PAYLOAD } };
	size_t sent = 0, got = 0;
	uint64_t wire = 0;
	struct pair p;
	ssize_t r;

	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 13 + 5);
	pair_open(&p, secret, 2);
	/* the header's record is written with the payload's first */
	r = tcp_xdc_crypt_send(&p.tx, p.fd[0], iov, 2, &wire);
	CHECK(r == 32 + RECORD);
	sent = r > 0 ? (size_t)r : sizeof(in);
	while (sent < sizeof(in)) {
		struct iovec rest = { in + sent, sizeof(in) - sent };

		r = tcp_xdc_crypt_send(&p.tx, p.fd[0], &rest, 1, &wire);
		CHECK(r > 0);
		sent += r > 0 ? (size_t)r : sizeof(in);
	}
	r = tcp_xdc_crypt_recv(&p.rx, p.fd[1], &(struct iovec){ hdr, 32 }, 1,
			       &wire);
	CHECK(r == 32 && !memcmp(hdr, in, 32));
	CHECK(p.rx.pt_off == p.rx.pt_len);
	while (got < PAYLOAD) {
		struct iovec o = { out + got, PAYLOAD - got };

		r = tcp_xdc_crypt_recv(&p.rx, p.fd[1], &o, 1, &wire);
		CHECK(r > 0 && p.rx.pt_off == p.rx.pt_len);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	CHECK(got == PAYLOAD && !memcmp(out, in + 32, PAYLOAD));
	pair_close(&p);
}

/* Small records, as small messages make them: a reader takes one whole
 * with its length in a single call, and one that came behind it waits in
 * the record layer (buffered) after the socket has run dry. */
static void test_small_records_ahead(void)
{
	uint8_t a[40], b[40], out[40];
	struct iovec ia = { a, sizeof(a) }, ib = { b, sizeof(b) };
	struct iovec io = { out, sizeof(out) };
	uint64_t wire = 0;
	struct pair p;
	int queued = -1;

	memset(a, 'x', sizeof(a));
	memset(b, 'y', sizeof(b));
	pair_open(&p, secret, 2);
	CHECK(tcp_xdc_crypt_send(&p.tx, p.fd[0], &ia, 1, &wire) == 40);
	CHECK(tcp_xdc_crypt_send(&p.tx, p.fd[0], &ib, 1, &wire) == 40);
	CHECK(!tcp_xdc_crypt_buffered(&p.rx));
	CHECK(tcp_xdc_crypt_recv(&p.rx, p.fd[1], &io, 1, &wire) == 40 &&
	      !memcmp(out, a, 40));
	CHECK(ioctl(p.fd[1], FIONREAD, &queued) == 0 && queued == 0);
	CHECK(tcp_xdc_crypt_buffered(&p.rx));
	CHECK(tcp_xdc_crypt_recv(&p.rx, p.fd[1], &io, 1, &wire) == 40 &&
	      !memcmp(out, b, 40));
	CHECK(!tcp_xdc_crypt_buffered(&p.rx));
	CHECK(tcp_xdc_crypt_recv(&p.rx, p.fd[1], &io, 1, &wire) == -EAGAIN);
	pair_close(&p);
}

/* What a receiver of the given wire bytes sees: the error and its words;
 * no byte of a bad record is handed out. */
static ssize_t receive(struct pair *p, size_t good_records, const char *why)
{
	uint8_t buf[8 * RECORD];
	size_t got;
	ssize_t r;

	shutdown(p->fd[0], SHUT_WR);
	r = read_all(p, buf, sizeof(buf), &got);
	CHECK(got == good_records * RECORD);
	for (size_t i = 0; i < got; i++)
		if (buf[i] != 'a' + i / RECORD) {
			CHECK(!"a wrong byte was handed out");
			break;
		}
	if (why && !strstr(p->rx.why, why)) {
		fprintf(stderr, "why is \"%s\", want \"%s\"\n", p->rx.why, why);
		failures++;
	}
	return r;
}

static void test_tampered(void)
{
	uint8_t w[4][WIRE_MAX];
	size_t len[4];
	struct pair p;

	/* every byte position class: length, ciphertext, tag */
	static const size_t flips[] = { 0, 3, 4, 100, WIRE_MAX - 1 };

	for (size_t k = 0; k < sizeof(flips) / sizeof(flips[0]); k++) {
		pair_open(&p, secret, 2);
		seal_records(&p, w, len, 3);
		w[1][flips[k]] ^= 0x01;
		put(&p, w[0], len[0]);
		put(&p, w[1], len[1]);
		put(&p, w[2], len[2]);
		CHECK(receive(&p, 1, flips[k] < 4 ? "record 1 " :
			      "record 1 failed authentication: data corrupted "
			      "or tampered in flight") == -EBADMSG);
		pair_close(&p);
	}
}

static void test_dropped_replayed_reordered(void)
{
	uint8_t w[4][WIRE_MAX];
	size_t len[4];
	struct pair p;

	pair_open(&p, secret, 2);		/* record 1 dropped */
	seal_records(&p, w, len, 3);
	put(&p, w[0], len[0]);
	put(&p, w[2], len[2]);
	CHECK(receive(&p, 1, "record 1 failed authentication") == -EBADMSG);
	pair_close(&p);

	pair_open(&p, secret, 2);		/* record 0 replayed */
	seal_records(&p, w, len, 2);
	put(&p, w[0], len[0]);
	put(&p, w[0], len[0]);
	CHECK(receive(&p, 1, "record 1 failed authentication") == -EBADMSG);
	pair_close(&p);

	pair_open(&p, secret, 2);		/* 1 before 0 */
	seal_records(&p, w, len, 2);
	put(&p, w[1], len[1]);
	put(&p, w[0], len[0]);
	CHECK(receive(&p, 0, "record 0 failed authentication") == -EBADMSG);
	pair_close(&p);
}

static void test_cut_and_keys(void)
{
	uint8_t w[4][WIRE_MAX];
	size_t len[4];
	struct pair p;

	pair_open(&p, secret, 2);		/* cut inside record 1 */
	seal_records(&p, w, len, 2);
	put(&p, w[0], len[0]);
	put(&p, w[1], len[1] / 2);
	CHECK(receive(&p, 1, "in the middle of record 1") == -ECONNABORTED);
	pair_close(&p);

	pair_open(&p, secret, 2);		/* clean end between records */
	seal_records(&p, w, len, 2);
	put(&p, w[0], len[0]);
	put(&p, w[1], len[1]);
	CHECK(receive(&p, 2, NULL) == 0);
	pair_close(&p);

	pair_open(&p, other, 2);		/* another connection's key */
	seal_records(&p, w, len, 1);
	put(&p, w[0], len[0]);
	CHECK(receive(&p, 0, "record 0 failed authentication") == -EBADMSG);
	pair_close(&p);

	pair_open(&p, secret, 3);		/* another stream's key */
	seal_records(&p, w, len, 1);
	put(&p, w[0], len[0]);
	CHECK(receive(&p, 0, "record 0 failed authentication") == -EBADMSG);
	pair_close(&p);

	/* same plaintext, other stream: other ciphertext */
	{
		struct tcp_xdc_crypt a, b;
		uint8_t pt[64] = { 0 };
		struct iovec iov = { pt, sizeof(pt) };

		CHECK(tcp_xdc_crypt_init(&a, secret, 32, true, 0, RECORD,
					 tx_lib) == 0);
		CHECK(tcp_xdc_crypt_init(&b, secret, 32, true, 1, RECORD,
					 tx_lib) == 0);
		CHECK(tcp_xdc_crypt_seal(&a, &iov, 1) == 0);
		CHECK(tcp_xdc_crypt_seal(&b, &iov, 1) == 0);
		CHECK(memcmp(a.buf, b.buf, a.buf_len));
		CHECK(memcmp(a.buf + 4, pt, sizeof(pt)));
		/* and the next record of one stream differs from its first */
		memcpy(w[0], a.buf, a.buf_len);
		CHECK(tcp_xdc_crypt_seal(&a, &iov, 1) == 0);
		CHECK(memcmp(a.buf, w[0], a.buf_len));
		tcp_xdc_crypt_fini(&a);
		tcp_xdc_crypt_fini(&b);
	}
	CHECK(tcp_xdc_crypt_init(&p.tx, NULL, 0, true, 0, RECORD,
				 tx_lib) == -EINVAL);
	CHECK(tcp_xdc_crypt_init(&p.tx, secret, 32, true, 0, 1,
				 tx_lib) == -EINVAL);
}

static void test_records(void)
{
	printf("records sealed by %s, opened by %s\n",
	       tcp_xdc_aead_library(tx_lib), tcp_xdc_aead_library(rx_lib));
	test_round_trip();
	test_opens_in_place();
	test_small_records_ahead();
	test_tampered();
	test_dropped_replayed_reordered();
	test_cut_and_keys();
}

/* The names cipher_library takes, and that auto is one of the two. */
static void test_names(void)
{
	enum tcp_xdc_aead_lib lib = TCP_XDC_AEAD_OPENSSL;
	const char *best = tcp_xdc_aead_library(TCP_XDC_AEAD_BEST);

	CHECK(tcp_xdc_aead_lib_parse("auto", &lib) &&
	      lib == TCP_XDC_AEAD_BEST);
	CHECK(tcp_xdc_aead_lib_parse("openssl", &lib) &&
	      lib == TCP_XDC_AEAD_OPENSSL);
	CHECK(tcp_xdc_aead_lib_parse("ipsec-mb", &lib) &&
	      lib == TCP_XDC_AEAD_IPSEC_MB);
	CHECK(!tcp_xdc_aead_lib_parse("OpenSSL", &lib) &&
	      !tcp_xdc_aead_lib_parse("", &lib) &&
	      !tcp_xdc_aead_lib_parse(NULL, &lib));
	CHECK(best && (best == tcp_xdc_aead_library(TCP_XDC_AEAD_OPENSSL) ||
		       best == tcp_xdc_aead_library(TCP_XDC_AEAD_IPSEC_MB)));
}

int main(void)
{
	for (int i = 0; i < 32; i++) {
		secret[i] = (uint8_t)(i + 1);
		other[i] = (uint8_t)(i + 2);
	}
	test_cipher_is_standard(TCP_XDC_AEAD_OPENSSL);
	test_cipher_is_standard(TCP_XDC_AEAD_IPSEC_MB);
	test_names();
	test_records();
	/* peers choose their libraries apart: each must read the other */
	if (tcp_xdc_aead_library(TCP_XDC_AEAD_IPSEC_MB)) {
		tx_lib = TCP_XDC_AEAD_IPSEC_MB;
		rx_lib = TCP_XDC_AEAD_OPENSSL;
		test_records();
		tx_lib = TCP_XDC_AEAD_OPENSSL;
		rx_lib = TCP_XDC_AEAD_IPSEC_MB;
		test_records();
	}
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("tcp-xdc records: all checks passed\n");
	return 0;
}
