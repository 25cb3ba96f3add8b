/* SPDX-License-Identifier: MIT */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- SHA-256, FIPS 180-4 section 6.2 ---- */

struct sha256 {
	uint32_t h[8];
	uint64_t total;			/* bytes hashed so far */
	uint8_t block[64];
	size_t fill;
};

/* First 32 bits of the fractional parts of the cube roots of the first
 * 64 primes (FIPS 180-4 4.2.2). */
static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n)
{
	return x >> n | x << (32 - n);
}

static uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void store_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void sha256_init(struct sha256 *s)
{
	/* First 32 bits of the fractional parts of the square roots of the
	 * first 8 primes (FIPS 180-4 5.3.3). */
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(s->h, iv, sizeof(iv));
	s->total = 0;
	s->fill = 0;
}

static void sha256_block(struct sha256 *s, const uint8_t *p)
{
	uint32_t w[64], v[8], t1, t2;

	for (int t = 0; t < 16; t++)
		w[t] = load_be32(p + 4 * t);
	for (int t = 16; t < 64; t++) {
		uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^
			      w[t - 15] >> 3;
		uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^
			      w[t - 2] >> 10;

		w[t] = s1 + w[t - 7] + s0 + w[t - 16];
	}
	memcpy(v, s->h, sizeof(v));
	for (int t = 0; t < 64; t++) {
		/* v[0..7] are a..h of the specification */
		uint32_t e = v[4], a = v[0];
		uint32_t ch = (e & v[5]) ^ (~e & v[6]);
		uint32_t maj = (a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]);

		t1 = v[7] + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ch +
		     sha256_k[t] + w[t];
		t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + maj;
		memmove(v + 1, v, 7 * sizeof(v[0]));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		s->h[i] += v[i];
}

static void sha256_update(struct sha256 *s, const uint8_t *p, size_t len)
{
	s->total += len;
	if (s->fill) {
		size_t take = 64 - s->fill < len ? 64 - s->fill : len;

		memcpy(s->block + s->fill, p, take);
		s->fill += take;
		p += take;
		len -= take;
		if (s->fill < 64)
			return;
		sha256_block(s, s->block);
		s->fill = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		sha256_block(s, p);
	memcpy(s->block, p, len);
	s->fill = len;
}

static void sha256_final(struct sha256 *s, uint8_t digest[32])
{
	uint64_t bits = s->total * 8;

	/* Padding (FIPS 180-4 5.1.1): a 1 bit, zeros up to 56 mod 64, then
	 * the message length in bits as a big-endian 64-bit number. */
	s->block[s->fill++] = 0x80;
	if (s->fill > 56) {
		memset(s->block + s->fill, 0, 64 - s->fill);
		sha256_block(s, s->block);
		s->fill = 0;
	}
	memset(s->block + s->fill, 0, 56 - s->fill);
	store_be32(s->block + 56, (uint32_t)(bits >> 32));
	store_be32(s->block + 60, (uint32_t)bits);
	sha256_block(s, s->block);
	for (int i = 0; i < 8; i++)
		store_be32(digest + 4 * i, s->h[i]);
	explicit_bzero(s, sizeof(*s));
}

void core_sha256(const uint8_t *data, size_t len, uint8_t digest[32])
{
	struct sha256 s;

	sha256_init(&s);
	sha256_update(&s, data, len);
	sha256_final(&s, digest);
}

/* ---- HMAC-SHA256, RFC 2104 ---- */

void core_hmac_sha256(const uint8_t *key, size_t key_len,
		      const uint8_t *const *parts, const size_t *lens,
		      int nparts, uint8_t mac[32])
{
	uint8_t k[64] = { 0 }, pad[64], inner[32];
	struct sha256 s;

	/* Keys longer than the block are hashed first, shorter ones padded
	 * with zeros. */
	if (key_len > 64)
		core_sha256(key, key_len, k);
	else if (key_len)
		memcpy(k, key, key_len);

	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x36;
	sha256_init(&s);
	sha256_update(&s, pad, 64);
	for (int i = 0; i < nparts; i++)
		sha256_update(&s, parts[i], lens[i]);
	sha256_final(&s, inner);

	for (int i = 0; i < 64; i++)
		pad[i] = k[i] ^ 0x5c;
	sha256_init(&s);
	sha256_update(&s, pad, 64);
	sha256_update(&s, inner, 32);
	sha256_final(&s, mac);

	explicit_bzero(k, sizeof(k));
	explicit_bzero(pad, sizeof(pad));
	explicit_bzero(inner, sizeof(inner));
}

/* ---- key file ---- */

static int key_error(int err, char *buf, size_t len, const char *path,
		     const char *what)
{
	if (buf && len)
		snprintf(buf, len, "key file %s: %s", path, what);
	return err;
}

/* Reads the whole file, at most cap bytes; *n past cap means "too long". */
static int read_all(int fd, uint8_t *buf, size_t cap, size_t *n)
{
	*n = 0;
	while (*n < cap) {
		ssize_t r = read(fd, buf + *n, cap - *n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		*n += (size_t)r;
	}
	return 0;
}

/* Opens the key file if it is one we may trust: regular, owner-only. */
static int open_key_file(const char *path, char *why, size_t whylen)
{
	struct stat st;
	int fd, rc;

	/* O_NONBLOCK: a FIFO put in the key's place must not hang init. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, whylen, "cannot open: %s", strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		snprintf(why, whylen, "cannot stat: %s", strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(why, whylen, "not a regular file");
	} else if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		/* Anyone else who can read the key can pass the handshake. */
		rc = -EPERM;
		snprintf(why, whylen,
			 "mode %04o gives group or others access; chmod 600 it",
			 (unsigned)(st.st_mode & 07777));
	} else {
		return fd;
	}
	close(fd);
	return rc;
}

int core_auth_load_key(const char *path, struct core_auth_key *key,
		       char *err, size_t errlen)
{
	/* One byte more than a key may have, plus its newline, tells a key
	 * that is too long from one that just fits. */
	uint8_t buf[CORE_AUTH_KEY_MAX + 2];
	char why[160];
	size_t n = 0;
	int fd, rc;

	key->len = 0;
	if (!path || !*path)
		return key_error(-EINVAL, err, errlen, "(none)",
				 "no path given");
	fd = open_key_file(path, why, sizeof(why));
	if (fd < 0)
		return key_error(fd, err, errlen, path, why);
	rc = read_all(fd, buf, sizeof(buf), &n);
	close(fd);
	if (n && buf[n - 1] == '\n')
		n--;
	if (rc) {
		snprintf(why, sizeof(why), "cannot read: %s", strerror(-rc));
	} else if (n > CORE_AUTH_KEY_MAX) {
		rc = -EFBIG;
		snprintf(why, sizeof(why), "key is longer than %d bytes",
			 CORE_AUTH_KEY_MAX);
	} else if (n < CORE_AUTH_KEY_MIN) {
		rc = -EINVAL;
		snprintf(why, sizeof(why),
			 "key has %zu bytes, at least %d are needed", n,
			 CORE_AUTH_KEY_MIN);
	}
	if (!rc) {
		memcpy(key->bytes, buf, n);
		key->len = n;
	}
	explicit_bzero(buf, sizeof(buf));
	return rc ? key_error(rc, err, errlen, path, why) : 0;
}

/* ---- the handshake engine ---- */

#define MSG_MAGIC_SIZE 4
#define CHALLENGE_SIZE (MSG_MAGIC_SIZE + CORE_AUTH_NONCE_SIZE)
#define RESPONSE_SIZE (MSG_MAGIC_SIZE + CORE_AUTH_NONCE_SIZE + \
		       CORE_AUTH_MAC_SIZE)
#define PROOF_SIZE (MSG_MAGIC_SIZE + CORE_AUTH_MAC_SIZE)

static const uint8_t magic_challenge[MSG_MAGIC_SIZE] = "MSA1";
static const uint8_t magic_response[MSG_MAGIC_SIZE] = "MSA2";
static const uint8_t magic_proof[MSG_MAGIC_SIZE] = "MSA3";

/* Distinct labels keep a MAC made by one role from passing for the other
 * (a listener's proof reflected back as a response). */
static const char label_connector[] = "nccl-mesh connector";
static const char label_listener[] = "nccl-mesh listener";

/*
 * state: the message this side waits for, DONE, or a negative errno once
 * failed (kept so that every later call reports the same error).
 */
enum {
	ST_WAIT_RESPONSE = 1,	/* listener */
	ST_WAIT_CHALLENGE,	/* connector */
	ST_WAIT_PROOF,		/* connector */
	ST_DONE,
};

static int fill_nonce(uint8_t nonce[CORE_AUTH_NONCE_SIZE])
{
	size_t got = 0;

	while (got < CORE_AUTH_NONCE_SIZE) {
		ssize_t r = getrandom(nonce + got, CORE_AUTH_NONCE_SIZE - got,
				      0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		got += (size_t)r;
	}
	return 0;
}

/* Both MACs have the same shape; only label and nonce order differ. */
static void make_mac(const struct core_auth *a, const char *label,
		     const uint8_t *first, const uint8_t *second,
		     uint8_t mac[CORE_AUTH_MAC_SIZE])
{
	const uint8_t *parts[4] = { (const uint8_t *)label, a->hello, first,
				    second };
	const size_t lens[4] = { strlen(label), CORE_AUTH_HELLO_SIZE,
				 CORE_AUTH_NONCE_SIZE, CORE_AUTH_NONCE_SIZE };

	core_hmac_sha256(a->key->bytes, a->key->len, parts, lens, 4, mac);
}

/* Takes as long for any difference as for none, so timing tells an
 * attacker nothing about how much of a forged MAC was right. */
static int mac_equal(const uint8_t *x, const uint8_t *y, size_t n)
{
	volatile uint8_t diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

static void queue(struct core_auth *a, const uint8_t magic[MSG_MAGIC_SIZE],
		  const uint8_t *body1, size_t len1, const uint8_t *body2,
		  size_t len2)
{
	uint8_t *p = a->out + a->out_len;

	memcpy(p, magic, MSG_MAGIC_SIZE);
	memcpy(p + MSG_MAGIC_SIZE, body1, len1);
	if (len2)
		memcpy(p + MSG_MAGIC_SIZE + len1, body2, len2);
	a->out_len += MSG_MAGIC_SIZE + len1 + len2;
}

static int fail(struct core_auth *a, int err)
{
	a->state = err;
	a->out_len = 0;		/* nothing half-made goes out after a failure */
	explicit_bzero(a->in, sizeof(a->in));
	a->in_len = 0;
	return err;
}

void core_auth_start(struct core_auth *a, enum core_auth_role role,
		     const struct core_auth_key *key,
		     const uint8_t hello[CORE_AUTH_HELLO_SIZE])
{
	int rc;

	memset(a, 0, sizeof(*a));
	a->role = role;
	a->key = key;
	memcpy(a->hello, hello, CORE_AUTH_HELLO_SIZE);
	/* Without a key there is nothing to prove: done at once, with no
	 * bytes either way, so both sides must agree on auth being off. */
	if (!key || !key->len) {
		a->state = ST_DONE;
		return;
	}
	rc = fill_nonce(a->mine);
	if (rc) {
		fail(a, rc);
		return;
	}
	if (role == CORE_AUTH_LISTENER) {
		queue(a, magic_challenge, a->mine, CORE_AUTH_NONCE_SIZE, NULL,
		      0);
		a->state = ST_WAIT_RESPONSE;
	} else {
		a->state = ST_WAIT_CHALLENGE;
	}
}

static size_t expected_size(int state)
{
	switch (state) {
	case ST_WAIT_RESPONSE:
		return RESPONSE_SIZE;
	case ST_WAIT_CHALLENGE:
		return CHALLENGE_SIZE;
	case ST_WAIT_PROOF:
		return PROOF_SIZE;
	default:
		return 0;
	}
}

static const uint8_t *expected_magic(int state)
{
	switch (state) {
	case ST_WAIT_RESPONSE:
		return magic_response;
	case ST_WAIT_CHALLENGE:
		return magic_challenge;
	default:
		return magic_proof;
	}
}

/* Connector: a whole CHALLENGE is in a->in. */
static int on_challenge(struct core_auth *a)
{
	uint8_t mac[CORE_AUTH_MAC_SIZE];

	memcpy(a->theirs, a->in + MSG_MAGIC_SIZE, CORE_AUTH_NONCE_SIZE);
	make_mac(a, label_connector, a->theirs, a->mine, mac);
	queue(a, magic_response, a->mine, CORE_AUTH_NONCE_SIZE, mac,
	      sizeof(mac));
	a->state = ST_WAIT_PROOF;
	return -EAGAIN;
}

/* Listener: a whole RESPONSE is in a->in. */
static int on_response(struct core_auth *a)
{
	uint8_t want[CORE_AUTH_MAC_SIZE];
	const uint8_t *got = a->in + MSG_MAGIC_SIZE + CORE_AUTH_NONCE_SIZE;

	memcpy(a->theirs, a->in + MSG_MAGIC_SIZE, CORE_AUTH_NONCE_SIZE);
	make_mac(a, label_connector, a->mine, a->theirs, want);
	if (!mac_equal(want, got, sizeof(want)))
		return fail(a, -EACCES);
	make_mac(a, label_listener, a->theirs, a->mine, want);
	queue(a, magic_proof, want, sizeof(want), NULL, 0);
	a->state = ST_DONE;
	return 0;
}

/* Connector: a whole PROOF is in a->in. */
static int on_proof(struct core_auth *a)
{
	uint8_t want[CORE_AUTH_MAC_SIZE];

	make_mac(a, label_listener, a->mine, a->theirs, want);
	if (!mac_equal(want, a->in + MSG_MAGIC_SIZE, sizeof(want)))
		return fail(a, -EACCES);
	a->state = ST_DONE;
	return 0;
}

int core_auth_feed(struct core_auth *a, const uint8_t *buf, size_t len,
		   size_t *used)
{
	*used = 0;
	if (a->state < 0)
		return a->state;
	while (a->state != ST_DONE) {
		size_t want = expected_size(a->state);
		size_t take = want - a->in_len;
		const uint8_t *magic = expected_magic(a->state);
		int rc;

		if (!want)		/* never started */
			return fail(a, -EPROTO);
		if (take > len - *used)
			take = len - *used;
		if (!take)
			return -EAGAIN;
		memcpy(a->in + a->in_len, buf + *used, take);
		*used += take;
		a->in_len += take;
		/* Refuse garbage as soon as its first bytes show it, rather
		 * than wait for a message's worth of them. */
		if (memcmp(a->in, magic, a->in_len < MSG_MAGIC_SIZE ?
				       a->in_len : MSG_MAGIC_SIZE))
			return fail(a, -EPROTO);
		if (a->in_len < want)
			return -EAGAIN;
		if (a->state == ST_WAIT_RESPONSE)
			rc = on_response(a);
		else if (a->state == ST_WAIT_CHALLENGE)
			rc = on_challenge(a);
		else
			rc = on_proof(a);
		explicit_bzero(a->in, sizeof(a->in));
		a->in_len = 0;
		if (rc != -EAGAIN)
			return rc;
	}
	return 0;
}

void core_auth_sent(struct core_auth *a, size_t n)
{
	if (n > a->out_len)
		n = a->out_len;
	memmove(a->out, a->out + n, a->out_len - n);
	a->out_len -= n;
}
