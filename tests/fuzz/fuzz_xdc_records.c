/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for tcp-xdc's record layer (encrypt = true): what the
 * receiver makes of a stream of records that an attacker on the path
 * edited.
 *
 * Input: the first byte picks how many records (1..6) are sealed, the next
 * six their plaintext lengths; the rest is an edit script of up to four
 * 4-byte edits applied to the wire bytes: flip a byte, drop a record,
 * replay one (insert a copy elsewhere), swap two, cut the stream, or
 * insert a byte.  The receiver reads the result from a socketpair in
 * pieces whose sizes come from the input too.
 *
 * Properties, for any input:
 *  - what the receiver delivers is a prefix of the plaintext that was
 *    sealed: nothing altered, nothing reordered, nothing replayed ever
 *    reaches the caller;
 *  - an unedited stream is delivered whole and ends cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_xdc_crypt.h"

#include "fuzz_util.h"

#define RECORDS_MAX 6
#define RECORD TCP_XDC_RECORD_MIN
#define WIRE_MAX (RECORDS_MAX * (RECORD + 2 * (TCP_XDC_RECORD_HDR + TCP_XDC_RECORD_TAG)) * 2)

static const uint8_t secret[32] = { 7, 1, 2, 3, 5, 8, 13, 21 };

struct wire {
	uint8_t bytes[WIRE_MAX];
	size_t len;
	size_t start[RECORDS_MAX + 1];	/* record i spans start[i]..start[i+1] */
	int n;
};

static uint8_t plain_byte(size_t i)
{
	return (uint8_t)(i * 131 + (i >> 8) * 7 + 1);
}

/* Seals n records of the given lengths; returns the plaintext length. */
static size_t seal_all(struct wire *w, const size_t *lens, int n)
{
	static uint8_t pt[RECORD];
	struct tcp_xdc_crypt tx;
	size_t off = 0;

	REQUIRE(tcp_xdc_crypt_init(&tx, secret, sizeof(secret), true, 3,
				   RECORD, TCP_XDC_AEAD_BEST) == 0);
	w->len = 0;
	w->n = n;
	for (int r = 0; r < n; r++) {
		struct iovec iov = { pt, lens[r] };

		for (size_t i = 0; i < lens[r]; i++)
			pt[i] = plain_byte(off + i);
		REQUIRE(tcp_xdc_crypt_seal(&tx, &iov, 1) == 0);
		w->start[r] = w->len;
		memcpy(w->bytes + w->len, tx.buf, tx.buf_len);
		w->len += tx.buf_len;
		off += lens[r];
	}
	w->start[n] = w->len;
	tcp_xdc_crypt_fini(&tx);
	return off;
}

/* Inserts len bytes at `at` (replay, an inserted byte). */
static void splice_in(struct wire *w, size_t at, const uint8_t *src,
		      size_t len)
{
	if (w->len + len > WIRE_MAX)
		return;
	memmove(w->bytes + at + len, w->bytes + at, w->len - at);
	memcpy(w->bytes + at, src, len);
	w->len += len;
}

static void cut_out(struct wire *w, size_t at, size_t len)
{
	memmove(w->bytes + at, w->bytes + at + len, w->len - at - len);
	w->len -= len;
}

/* One edit; record boundaries are those of the unedited stream, clamped. */
static void edit(struct wire *w, const uint8_t *e)
{
	static uint8_t copy[RECORD + 64];
	int r1 = e[1] % w->n, r2 = e[2] % w->n;
	size_t s1 = w->start[r1], l1 = w->start[r1 + 1] - s1;
	size_t pos = w->len ? ((size_t)e[1] << 8 | e[2]) % w->len : 0;

	if (s1 + l1 > w->len)
		return;
	switch (e[0] % 6) {
	case 0:			/* flip */
		if (w->len)
			w->bytes[pos] ^= e[3] ? e[3] : 1;
		break;
	case 1:			/* drop */
		cut_out(w, s1, l1);
		break;
	case 2:			/* replay r1 before r2 */
		memcpy(copy, w->bytes + s1, l1);
		splice_in(w, w->start[r2] <= w->len ? w->start[r2] : w->len,
			  copy, l1);
		break;
	case 3:			/* swap r1 with its successor */
		if (r1 + 1 < w->n && w->start[r1 + 2] <= w->len) {
			size_t l2 = w->start[r1 + 2] - w->start[r1 + 1];

			memcpy(copy, w->bytes + s1, l1);
			memmove(w->bytes + s1, w->bytes + s1 + l1, l2);
			memcpy(w->bytes + s1 + l2, copy, l1);
		}
		break;
	case 4:			/* cut */
		w->len = pos;
		break;
	default:		/* insert a byte */
		splice_in(w, pos, &e[3], 1);
		break;
	}
}

static void receive(const struct wire *w, const uint8_t *steer,
		    size_t nsteer, size_t plain_len, bool edited)
{
	static uint8_t out[RECORDS_MAX * RECORD + 1];
	struct splitter sp = { 0x9e3779b9u };
	struct tcp_xdc_crypt rx;
	size_t got = 0;
	uint64_t wire = 0;
	ssize_t n;
	int fd[2];

	for (size_t i = 0; i < nsteer; i++)
		sp.x = sp.x * 31 + steer[i];
	REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fd) == 0);
	REQUIRE(fcntl(fd[1], F_SETFL, O_NONBLOCK) == 0);
	/* The whole stream fits the socketpair's buffer. */
	REQUIRE(write(fd[0], w->bytes, w->len) == (ssize_t)w->len ||
		!w->len);
	close(fd[0]);
	REQUIRE(tcp_xdc_crypt_init(&rx, secret, sizeof(secret), false, 3,
				   RECORD, TCP_XDC_AEAD_BEST) == 0);
	for (;;) {
		struct iovec iov[2];
		size_t room = sizeof(out) - got, a = 1 + next(&sp, room);

		if (!room)
			break;
		iov[0] = (struct iovec){ out + got, a };
		iov[1] = (struct iovec){ out + got + a, room - a };
		n = tcp_xdc_crypt_recv(&rx, fd[1], iov, room > a ? 2 : 1,
				       &wire);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	REQUIRE(got <= plain_len);
	for (size_t i = 0; i < got; i++)
		REQUIRE(out[i] == plain_byte(i));
	if (!edited)
		REQUIRE(got == plain_len && n == 0);
	tcp_xdc_crypt_fini(&rx);
	close(fd[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wire w;
	size_t lens[RECORDS_MAX], plain_len, nedits;
	int n;

	if (size < 1 + RECORDS_MAX)
		return 0;
	n = 1 + data[0] % RECORDS_MAX;
	for (int r = 0; r < RECORDS_MAX; r++)
		lens[r] = 1 + (size_t)data[1 + r] * 997 % RECORD;
	data += 1 + RECORDS_MAX;
	size -= 1 + RECORDS_MAX;
	plain_len = seal_all(&w, lens, n);
	nedits = size / 4 < 4 ? size / 4 : 4;
	for (size_t i = 0; i < nedits; i++)
		edit(&w, data + 4 * i);
	receive(&w, data + 4 * nedits, size - 4 * nedits, plain_len,
		nedits > 0);
	return 0;
}
