/* SPDX-License-Identifier: MIT */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "buf.h"

/* ---- primitives: OpenSSL's libcrypto, never our own ---- */

int core_sha256(const uint8_t *data, size_t len, uint8_t digest[32])
{
	unsigned int n = 0;

	return EVP_Digest(data, len, digest, &n, EVP_sha256(), NULL) == 1 &&
		       n == 32 ? 0 : -ENOMEM;
}

int core_hmac_sha256(const uint8_t *key, size_t key_len,
		     const uint8_t *const *parts, const size_t *lens,
		     int nparts, uint8_t mac[32])
{
	static const uint8_t no_key[1];
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest,
						 0),
		OSSL_PARAM_construct_end(),
	};
	EVP_MAC *m = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = m ? EVP_MAC_CTX_new(m) : NULL;
	size_t n = 0;
	int ok;

	/* An empty key is a valid HMAC key; OpenSSL wants a non-NULL one. */
	ok = ctx && EVP_MAC_init(ctx, key_len ? key : no_key, key_len,
				 params) == 1;
	for (int i = 0; ok && i < nparts; i++)
		ok = EVP_MAC_update(ctx, parts[i], lens[i]) == 1;
	ok = ok && EVP_MAC_final(ctx, mac, &n, 32) == 1 && n == 32;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(m);
	return ok ? 0 : -ENOMEM;
}

int core_hkdf_sha256(const uint8_t *ikm, size_t ikm_len,
		     const uint8_t *salt, size_t salt_len,
		     const uint8_t *info, size_t info_len,
		     uint8_t *out, size_t out_len)
{
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t n = out_len;
	int ok;

	ok = ctx && EVP_PKEY_derive_init(ctx) == 1 &&
	     EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) == 1 &&
	     EVP_PKEY_CTX_set1_hkdf_salt(ctx, salt, (int)salt_len) == 1 &&
	     EVP_PKEY_CTX_set1_hkdf_key(ctx, ikm, (int)ikm_len) == 1 &&
	     EVP_PKEY_CTX_add1_hkdf_info(ctx, info, (int)info_len) == 1 &&
	     EVP_PKEY_derive(ctx, out, &n) == 1 && n == out_len;
	EVP_PKEY_CTX_free(ctx);
	return ok ? 0 : -ENOMEM;
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
	return RAND_bytes(nonce, CORE_AUTH_NONCE_SIZE) == 1 ? 0 : -EIO;
}

/* Both MACs have the same shape; only label and nonce order differ. */
static int make_mac(const struct core_auth *a, const char *label,
		     const uint8_t *first, const uint8_t *second,
		     uint8_t mac[CORE_AUTH_MAC_SIZE])
{
	const uint8_t *parts[4] = { (const uint8_t *)label, a->hello, first,
				    second };
	const size_t lens[4] = { strlen(label), CORE_AUTH_HELLO_SIZE,
				 CORE_AUTH_NONCE_SIZE, CORE_AUTH_NONCE_SIZE };

	return core_hmac_sha256(a->key->bytes, a->key->len, parts, lens, 4,
				mac);
}

/* CRYPTO_memcmp takes as long for any difference as for none, so timing
 * tells an attacker nothing about how much of a forged MAC was right. */
static int mac_equal(const uint8_t *x, const uint8_t *y, size_t n)
{
	return CRYPTO_memcmp(x, y, n) == 0;
}

/*
 * The connection's secret, once both sides proved the key: HKDF over the
 * key, salted with both nonces (listener's first), bound to the hello, so
 * every connection gets its own and a recorded one says nothing of the key.
 */
static int derive_secret(struct core_auth *a)
{
	static const char label[] = "nccl-mesh connection secret";
	uint8_t salt[2 * CORE_AUTH_NONCE_SIZE], info[sizeof(label) - 1 +
						     CORE_AUTH_HELLO_SIZE];
	const uint8_t *nl = a->role == CORE_AUTH_LISTENER ? a->mine : a->theirs;
	const uint8_t *nc = a->role == CORE_AUTH_LISTENER ? a->theirs : a->mine;
	int rc;

	memcpy(salt, nl, CORE_AUTH_NONCE_SIZE);
	memcpy(salt + CORE_AUTH_NONCE_SIZE, nc, CORE_AUTH_NONCE_SIZE);
	memcpy(info, label, sizeof(label) - 1);
	memcpy(info + sizeof(label) - 1, a->hello, CORE_AUTH_HELLO_SIZE);
	rc = core_hkdf_sha256(a->key->bytes, a->key->len, salt, sizeof(salt),
			      info, sizeof(info), a->secret,
			      CORE_AUTH_SECRET_SIZE);
	if (rc)
		return rc;
	a->secret_len = CORE_AUTH_SECRET_SIZE;
	return 0;
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
	explicit_bzero(a->secret, sizeof(a->secret));
	a->secret_len = 0;
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
	if (make_mac(a, label_connector, a->theirs, a->mine, mac))
		return fail(a, -ENOMEM);
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
	if (make_mac(a, label_connector, a->mine, a->theirs, want))
		return fail(a, -ENOMEM);
	if (!mac_equal(want, got, sizeof(want)))
		return fail(a, -EACCES);
	if (make_mac(a, label_listener, a->theirs, a->mine, want) ||
	    derive_secret(a))
		return fail(a, -ENOMEM);
	queue(a, magic_proof, want, sizeof(want), NULL, 0);
	a->state = ST_DONE;
	return 0;
}

/* Connector: a whole PROOF is in a->in. */
static int on_proof(struct core_auth *a)
{
	uint8_t want[CORE_AUTH_MAC_SIZE];

	if (make_mac(a, label_listener, a->mine, a->theirs, want))
		return fail(a, -ENOMEM);
	if (!mac_equal(want, a->in + MSG_MAGIC_SIZE, sizeof(want)))
		return fail(a, -EACCES);
	if (derive_secret(a))
		return fail(a, -ENOMEM);
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
	util_buf_drain(a->out, &a->out_len, n);
}
