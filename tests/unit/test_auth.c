/* SPDX-License-Identifier: MIT */
/*
 * The authentication engine: SHA-256, HMAC-SHA256 and HKDF (libcrypto's,
 * through our glue) against published vectors, the connection secret, the handshake in every split, wrong keys, replays, garbage, and
 * the key file rules.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "check.h"

#define CHALLENGE_SIZE 20
#define RESPONSE_SIZE 52
#define PROOF_SIZE 36

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void check_sha(const char *file, int line, const uint8_t *msg,
		      size_t len, const char *want)
{
	uint8_t d[32];
	char got[65];

	core_sha256(msg, len, d);
	hex(d, 32, got);
	if (strcmp(got, want)) {
		fprintf(stderr, "%s:%d: sha256 %s, want %s\n", file, line, got,
			want);
		failures++;
	}
}

#define CHECK_SHA(msg, len, want) check_sha(__FILE__, __LINE__, msg, len, want)

/* FIPS 180-4 examples (NIST CSRC "SHA256.pdf", "SHA2_Additional.pdf"). */
static void test_sha256(void)
{
	static const char m448[] =
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	static const char m896[] =
		"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
		"hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
	uint8_t *million = malloc(1000000);

	CHECK_SHA((const uint8_t *)"", 0,
		  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	CHECK_SHA((const uint8_t *)"abc", 3,
		  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	CHECK_SHA((const uint8_t *)m448, strlen(m448),
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	CHECK_SHA((const uint8_t *)m896, strlen(m896),
		  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
	CHECK(million != NULL);
	if (million) {
		memset(million, 'a', 1000000);
		CHECK_SHA(million, 1000000,
			  "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
		free(million);
	}
}

static void check_hmac(const char *file, int line, const uint8_t *key,
		       size_t key_len, const uint8_t *data, size_t len,
		       const char *want)
{
	uint8_t mac[32], split_mac[32];
	const uint8_t *parts[3] = { data, data + len / 3, data + len / 2 };
	const size_t lens[3] = { len / 3, len / 2 - len / 3, len - len / 2 };
	char got[65];

	core_hmac_sha256(key, key_len, &data, &len, 1, mac);
	hex(mac, 32, got);
	if (strcmp(got, want)) {
		fprintf(stderr, "%s:%d: hmac %s, want %s\n", file, line, got,
			want);
		failures++;
	}
	/* The message given in parts is the same message. */
	core_hmac_sha256(key, key_len, parts, lens, 3, split_mac);
	if (memcmp(mac, split_mac, 32)) {
		fprintf(stderr, "%s:%d: hmac over parts differs\n", file, line);
		failures++;
	}
}

#define CHECK_HMAC(key, klen, data, dlen, want) \
	check_hmac(__FILE__, __LINE__, key, klen, (const uint8_t *)(data), dlen, want)

/* RFC 4231 section 4 (case 5 truncates the output; not our use). */
static void test_hmac(void)
{
	static const char d6[] =
		"Test Using Larger Than Block-Size Key - Hash Key First";
	static const char d7[] =
		"This is a test using a larger than block-size key and a larger "
		"than block-size data. The key needs to be hashed before being "
		"used by the HMAC algorithm.";
	uint8_t k[131], d[50];

	memset(k, 0x0b, 20);
	CHECK_HMAC(k, 20, "Hi There", 8,
		   "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	CHECK_HMAC((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
		   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, 20);
	memset(d, 0xdd, 50);
	CHECK_HMAC(k, 20, d, 50,
		   "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
	for (int i = 0; i < 25; i++)
		k[i] = (uint8_t)(i + 1);
	memset(d, 0xcd, 50);
	CHECK_HMAC(k, 25, d, 50,
		   "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
	memset(k, 0xaa, 131);
	CHECK_HMAC(k, 131, d6, strlen(d6),
		   "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
	CHECK_HMAC(k, 131, d7, strlen(d7),
		   "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* ---- handshake ---- */

static struct core_auth_key key_a, key_b;
static uint8_t hello[CORE_AUTH_HELLO_SIZE];

static void make_key(struct core_auth_key *k, uint8_t seed)
{
	k->len = 32;
	for (size_t i = 0; i < k->len; i++)
		k->bytes[i] = (uint8_t)(seed + 7 * i);
}

/* Moves what `from` queued into `to`, `chunk` bytes per feed. */
static int deliver(struct core_auth *from, struct core_auth *to, size_t chunk,
		   size_t *total_used)
{
	int rc = -EAGAIN;
	size_t off = 0;
	uint8_t buf[64];
	size_t n = from->out_len;

	memcpy(buf, from->out, n);
	core_auth_sent(from, n);
	*total_used = 0;
	while (off < n) {
		size_t take = n - off < chunk ? n - off : chunk, used;

		rc = core_auth_feed(to, buf + off, take, &used);
		*total_used += used;
		off += take;
		if (rc != -EAGAIN)
			break;
	}
	return rc;
}

/* The last handshake's secret on each side, for test_secret. */
static uint8_t secret_l[32], secret_c[32];
static size_t secret_l_len, secret_c_len;

static void keep_secrets(const struct core_auth *l, const struct core_auth *c)
{
	memcpy(secret_l, l->secret, sizeof(secret_l));
	memcpy(secret_c, c->secret, sizeof(secret_c));
	secret_l_len = l->secret_len;
	secret_c_len = c->secret_len;
}

/* A whole handshake; rcs of each side's last feed come back. */
static void handshake(const struct core_auth_key *kl,
		      const struct core_auth_key *kc, size_t chunk, int *rl,
		      int *rc)
{
	struct core_auth l, c;
	size_t used;

	secret_l_len = secret_c_len = 99;

	core_auth_start(&l, CORE_AUTH_LISTENER, kl, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, kc, hello);
	CHECK(l.out_len == CHALLENGE_SIZE);
	CHECK(c.out_len == 0);
	*rl = -EAGAIN;
	*rc = deliver(&l, &c, chunk, &used);
	CHECK(*rc == -EAGAIN);
	CHECK(used == CHALLENGE_SIZE);
	CHECK(c.out_len == RESPONSE_SIZE);
	*rl = deliver(&c, &l, chunk, &used);
	if (*rl) {
		keep_secrets(&l, &c);
		return;
	}
	CHECK(used == RESPONSE_SIZE);
	CHECK(l.out_len == PROOF_SIZE);
	*rc = deliver(&l, &c, chunk, &used);
	CHECK(used == PROOF_SIZE);
	CHECK(l.out_len == 0 && c.out_len == 0);
	keep_secrets(&l, &c);
}

/* Both sides derive the same per-connection secret, a new one for every
 * handshake, none without a key or after a failure. */
static void test_secret(void)
{
	static const uint8_t zero[32];
	uint8_t first[32];
	int rl, rc;

	handshake(&key_a, &key_a, 7, &rl, &rc);
	CHECK(!rl && !rc);
	CHECK(secret_l_len == 32 && secret_c_len == 32);
	CHECK(!memcmp(secret_l, secret_c, 32));
	CHECK(memcmp(secret_l, zero, 32));
	CHECK(memcmp(secret_l, key_a.bytes, 32));
	memcpy(first, secret_l, 32);
	handshake(&key_a, &key_a, 64, &rl, &rc);
	CHECK(!rl && !rc && !memcmp(secret_l, secret_c, 32));
	CHECK(memcmp(first, secret_l, 32));	/* fresh nonces, fresh secret */
	handshake(&key_a, &key_b, 64, &rl, &rc);
	CHECK(rl == -EACCES && secret_l_len == 0 && secret_c_len == 0);
}

/* RFC 5869 appendix A.1 through the HKDF the secret comes from. */
static void test_hkdf(void)
{
	uint8_t ikm[22], salt[13], info[10], okm[42];
	char got[85];

	memset(ikm, 0x0b, sizeof(ikm));
	for (int i = 0; i < 13; i++)
		salt[i] = (uint8_t)i;
	for (int i = 0; i < 10; i++)
		info[i] = (uint8_t)(0xf0 + i);
	CHECK(core_hkdf_sha256(ikm, sizeof(ikm), salt, sizeof(salt), info,
			       sizeof(info), okm, sizeof(okm)) == 0);
	hex(okm, sizeof(okm), got);
	CHECK(!strcmp(got, "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db0"
			   "2d56ecc4c5bf34007208d5b887185865"));
}

static void test_handshake_ok(void)
{
	static const size_t chunks[] = { 1, 3, 7, 19, 20, 64 };

	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		int rl, rc;

		handshake(&key_a, &key_a, chunks[i], &rl, &rc);
		if (rl || rc) {
			fprintf(stderr, "chunk %zu: listener %d connector %d\n",
				chunks[i], rl, rc);
			failures++;
		}
	}
}

static void test_wrong_key(void)
{
	int rl, rc;

	/* The listener sees the first MAC, so it is the one to notice. */
	handshake(&key_a, &key_b, 64, &rl, &rc);
	CHECK(rl == -EACCES);
	handshake(&key_b, &key_a, 1, &rl, &rc);
	CHECK(rl == -EACCES);
}

/* A listener that does not know the key cannot make a proof either:
 * play one that answers with a MAC under another key. */
static void test_forged_proof(void)
{
	struct core_auth l, c, fake;
	uint8_t proof[PROOF_SIZE], nc[CORE_AUTH_NONCE_SIZE];
	size_t used;
	int rc;

	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	memcpy(nc, c.out + 4, sizeof(nc));
	core_auth_sent(&c, c.out_len);
	{
		const uint8_t *parts[4] = {
			(const uint8_t *)"nccl-mesh listener", hello, nc, l.mine
		};
		const size_t lens[4] = { 18, CORE_AUTH_HELLO_SIZE,
					 CORE_AUTH_NONCE_SIZE,
					 CORE_AUTH_NONCE_SIZE };

		memcpy(proof, "MSA3", 4);
		core_hmac_sha256(key_b.bytes, key_b.len, parts, lens, 4,
				 proof + 4);
	}
	rc = core_auth_feed(&c, proof, sizeof(proof), &used);
	CHECK(rc == -EACCES);
	/* ... while the same computation with the right key passes, so the
	 * refusal above is about the key and nothing else. */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&fake, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &fake, 64, &used) == -EAGAIN);
	memcpy(nc, fake.out + 4, sizeof(nc));
	{
		const uint8_t *parts[4] = {
			(const uint8_t *)"nccl-mesh listener", hello, nc, l.mine
		};
		const size_t lens[4] = { 18, CORE_AUTH_HELLO_SIZE,
					 CORE_AUTH_NONCE_SIZE,
					 CORE_AUTH_NONCE_SIZE };

		core_hmac_sha256(key_a.bytes, key_a.len, parts, lens, 4,
				 proof + 4);
	}
	CHECK(core_auth_feed(&fake, proof, sizeof(proof), &used) == 0);
	CHECK(used == PROOF_SIZE);
}

static void test_hello_binding(void)
{
	struct core_auth l, c;
	uint8_t other[CORE_AUTH_HELLO_SIZE];
	size_t used;

	memcpy(other, hello, sizeof(other));
	other[20] ^= 1;		/* say, another connection id */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, other);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	CHECK(deliver(&c, &l, 64, &used) == -EACCES);
}

static void test_replay(void)
{
	struct core_auth l, c, l2, c2;
	uint8_t challenge[CHALLENGE_SIZE], response[RESPONSE_SIZE];
	uint8_t proof[PROOF_SIZE];
	size_t used;

	/* Record an honest handshake. */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	memcpy(challenge, l.out, sizeof(challenge));
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	memcpy(response, c.out, sizeof(response));
	CHECK(deliver(&c, &l, 64, &used) == 0);
	memcpy(proof, l.out, sizeof(proof));
	CHECK(deliver(&l, &c, 64, &used) == 0);

	/* A new listener challenges with a fresh nonce ... */
	core_auth_start(&l2, CORE_AUTH_LISTENER, &key_a, hello);
	CHECK(memcmp(l2.out, challenge, sizeof(challenge)));
	/* ... so the old response does not answer it. */
	CHECK(core_auth_feed(&l2, response, sizeof(response), &used) ==
	      -EACCES);
	CHECK(l2.out_len == 0);	/* no proof handed out */

	/* A new connector fed the old challenge answers with a fresh nonce,
	 * so the old proof does not prove anything to it. */
	core_auth_start(&c2, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(core_auth_feed(&c2, challenge, sizeof(challenge), &used) ==
	      -EAGAIN);
	CHECK(memcmp(c2.out, response, RESPONSE_SIZE));
	CHECK(core_auth_feed(&c2, proof, sizeof(proof), &used) == -EACCES);
}

/*
 * A listener's proof sent back to a listener as a response.  With the
 * nonces lined up (the second listener's nonce set to the first one's
 * peer nonce), only the role labels keep the two MACs apart.
 */
static void test_reflection(void)
{
	struct core_auth l, c, l2;
	uint8_t fake[RESPONSE_SIZE];
	size_t used;

	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	CHECK(deliver(&c, &l, 64, &used) == 0);
	core_auth_start(&l2, CORE_AUTH_LISTENER, &key_a, hello);
	memcpy(l2.mine, c.mine, CORE_AUTH_NONCE_SIZE);
	memcpy(fake, "MSA2", 4);
	memcpy(fake + 4, l.mine, CORE_AUTH_NONCE_SIZE);
	memcpy(fake + 20, l.out + 4, CORE_AUTH_MAC_SIZE);
	CHECK(core_auth_feed(&l2, fake, sizeof(fake), &used) == -EACCES);
}

static void test_garbage(void)
{
	struct core_auth l, c;
	uint8_t ok_response[RESPONSE_SIZE];
	size_t used;

	/* Not a handshake message at all: refused at the first wrong byte. */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	CHECK(core_auth_feed(&l, (const uint8_t *)"GET / HTTP/1.1\r\n", 16,
			     &used) == -EPROTO);
	/* ... and stays refused, whatever comes next. */
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	memcpy(ok_response, c.out, sizeof(ok_response));
	CHECK(core_auth_feed(&l, ok_response, sizeof(ok_response), &used) ==
	      -EPROTO);
	CHECK(used == 0);

	/* A prefix of the magic waits; the wrong next byte is refused. */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	CHECK(core_auth_feed(&l, (const uint8_t *)"MS", 2, &used) == -EAGAIN);
	CHECK(used == 2);
	CHECK(core_auth_feed(&l, (const uint8_t *)"A3", 2, &used) == -EPROTO);

	/* Each side only takes the message it waits for. */
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(core_auth_feed(&c, ok_response, sizeof(ok_response), &used) ==
	      -EPROTO);
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	CHECK(core_auth_feed(&l, l.out, CHALLENGE_SIZE, &used) == -EPROTO);

	/* Truncated: a response one byte short is still waited for, and
	 * completing it later succeeds. */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	CHECK(core_auth_feed(&l, c.out, RESPONSE_SIZE - 1, &used) == -EAGAIN);
	CHECK(used == RESPONSE_SIZE - 1);
	CHECK(l.out_len == 0);
	CHECK(core_auth_feed(&l, c.out + RESPONSE_SIZE - 1, 1, &used) == 0);
	CHECK(used == 1);

	/* Nothing fed: waits. */
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(core_auth_feed(&c, NULL, 0, &used) == -EAGAIN);
	CHECK(used == 0);

	/* A MAC that is wrong in its last byte only. */
	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	c.out[RESPONSE_SIZE - 1] ^= 0x80;
	CHECK(deliver(&c, &l, 64, &used) == -EACCES);
	CHECK(core_auth_feed(&l, (const uint8_t *)"x", 1, &used) == -EACCES);
}

/* Bytes after the handshake belong to the connection: never consumed. */
static void test_trailing(void)
{
	struct core_auth l, c;
	uint8_t buf[128];
	size_t used;

	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	memcpy(buf, l.out, CHALLENGE_SIZE);
	memcpy(buf + CHALLENGE_SIZE, "trailing", 8);
	core_auth_sent(&l, 5);		/* partial send keeps the rest */
	CHECK(l.out_len == CHALLENGE_SIZE - 5);
	CHECK(!memcmp(l.out, buf + 5, CHALLENGE_SIZE - 5));
	core_auth_sent(&l, l.out_len);
	/* A challenge and a garbage proof in one read: the challenge is
	 * answered, the garbage refused. */
	CHECK(core_auth_feed(&c, buf, CHALLENGE_SIZE + 8, &used) == -EPROTO);

	core_auth_start(&l, CORE_AUTH_LISTENER, &key_a, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key_a, hello);
	CHECK(deliver(&l, &c, 64, &used) == -EAGAIN);
	memcpy(buf, c.out, RESPONSE_SIZE);
	memcpy(buf + RESPONSE_SIZE, "data", 4);
	core_auth_sent(&c, RESPONSE_SIZE);
	CHECK(core_auth_feed(&l, buf, RESPONSE_SIZE + 4, &used) == 0);
	CHECK(used == RESPONSE_SIZE);
	memcpy(buf, l.out, PROOF_SIZE);
	memcpy(buf + PROOF_SIZE, "module exchange", 15);
	CHECK(core_auth_feed(&c, buf, PROOF_SIZE + 15, &used) == 0);
	CHECK(used == PROOF_SIZE);
	/* Once done, nothing more is taken. */
	CHECK(core_auth_feed(&c, buf, 10, &used) == 0);
	CHECK(used == 0);
	CHECK(core_auth_feed(&l, buf, 10, &used) == 0);
	CHECK(used == 0);
}

static void test_key_off(void)
{
	struct core_auth_key none = { .len = 0 };
	struct core_auth a;
	size_t used;

	core_auth_start(&a, CORE_AUTH_LISTENER, &none, hello);
	CHECK(a.out_len == 0);
	CHECK(core_auth_feed(&a, hello, 8, &used) == 0);
	CHECK(used == 0);
	core_auth_start(&a, CORE_AUTH_CONNECTOR, NULL, hello);
	CHECK(core_auth_feed(&a, hello, 8, &used) == 0);
	CHECK(used == 0);
}

/* ---- key file ---- */

static char dir[64];

static const char *write_key(const char *name, const void *bytes, size_t n,
			     mode_t mode)
{
	static char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	if (fd < 0)
		return path;
	CHECK(write(fd, bytes, n) == (ssize_t)n);
	CHECK(fchmod(fd, mode) == 0);
	close(fd);
	return path;
}

static void test_key_file(void)
{
	struct core_auth_key k;
	char err[256];
	const char *p;
	int rc;

	p = write_key("good", "0123456789abcdef0123456789abcdef\n", 33, 0600);
	CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == 0);
	CHECK(k.len == 32);
	CHECK(!memcmp(k.bytes, "0123456789abcdef0123456789abcdef", 32));

	/* Only one newline goes; binary keys keep every byte. */
	p = write_key("two-nl", "0123456789abcdef\n\n", 18, 0400);
	CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == 0);
	CHECK(k.len == 17 && k.bytes[16] == '\n');
	p = write_key("binary", "\0\1\2\3\4\5\6\7\0\1\2\3\4\5\6\7\r", 17,
		      0600);
	CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == 0);
	CHECK(k.len == 17 && k.bytes[0] == 0 && k.bytes[16] == '\r');

	p = write_key("world", "0123456789abcdef0123456789abcdef", 32, 0644);
	rc = core_auth_load_key(p, &k, err, sizeof(err));
	CHECK(rc == -EPERM);
	CHECK(k.len == 0);
	CHECK(strstr(err, p) != NULL);
	CHECK(strstr(err, "0644") != NULL);
	p = write_key("group", "0123456789abcdef0123456789abcdef", 32, 0640);
	CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == -EPERM);

	/* 15 bytes and a newline: short once the newline is gone. */
	p = write_key("short", "0123456789abcde\n", 16, 0600);
	rc = core_auth_load_key(p, &k, err, sizeof(err));
	CHECK(rc == -EINVAL);
	CHECK(strstr(err, p) != NULL);
	CHECK(strstr(err, "15 bytes") != NULL);
	p = write_key("empty", "", 0, 0600);
	CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == -EINVAL);
	p = write_key("min", "0123456789abcdef", 16, 0600);
	CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == 0);
	CHECK(k.len == 16);

	{
		static uint8_t big[CORE_AUTH_KEY_MAX + 2];

		memset(big, 'k', sizeof(big));
		big[CORE_AUTH_KEY_MAX] = '\n';
		p = write_key("max", big, CORE_AUTH_KEY_MAX + 1, 0600);
		CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == 0);
		CHECK(k.len == CORE_AUTH_KEY_MAX);
		p = write_key("long", big, CORE_AUTH_KEY_MAX + 2, 0600);
		CHECK(core_auth_load_key(p, &k, err, sizeof(err)) == -EFBIG);
		CHECK(k.len == 0);
	}

	{
		char path[128];

		snprintf(path, sizeof(path), "%s/missing", dir);
		CHECK(core_auth_load_key(path, &k, err, sizeof(err)) ==
		      -ENOENT);
		CHECK(strstr(err, path) != NULL);
	}
	CHECK(core_auth_load_key(dir, &k, err, sizeof(err)) == -EINVAL);
	{
		char path[128];

		/* Opening a FIFO for reading would wait for a writer. */
		snprintf(path, sizeof(path), "%s/fifo", dir);
		CHECK(mkfifo(path, 0600) == 0);
		CHECK(core_auth_load_key(path, &k, err, sizeof(err)) ==
		      -EINVAL);
		CHECK(strstr(err, "not a regular file") != NULL);
	}
	CHECK(core_auth_load_key("", &k, err, sizeof(err)) == -EINVAL);
}

static void cleanup_dir(void)
{
	static const char *names[] = { "good", "two-nl", "binary", "world",
				       "group", "short", "empty", "min",
				       "max", "long", "fifo" };
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/test_auth.XXXXXX",
		 tmp && strlen(tmp) < 40 ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	memset(hello, 0x5a, sizeof(hello));
	make_key(&key_a, 1);
	make_key(&key_b, 2);

	test_sha256();
	test_hmac();
	test_handshake_ok();
	test_secret();
	test_hkdf();
	test_wrong_key();
	test_forged_proof();
	test_hello_binding();
	test_replay();
	test_reflection();
	test_garbage();
	test_trailing();
	test_key_off();
	test_key_file();
	cleanup_dir();

	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("auth: all checks passed\n");
	return 0;
}
