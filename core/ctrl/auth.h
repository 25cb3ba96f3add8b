/* SPDX-License-Identifier: MIT */
/*
 * Mutual authentication of control-plane connections with a pre-shared key:
 * a challenge-response with HMAC-SHA256 over fresh nonces from both sides,
 * bound to the connection's hello, before any data moves.
 *
 * The engine does no I/O ("sans-I/O"): the caller feeds it the bytes it
 * received and sends what it queued, so the same code runs over
 * non-blocking sockets and under a fuzzer.
 *
 * Wire (after the 40-byte hello, which the connector sends first):
 *   listener  -> connector  CHALLENGE  "MSA1" | Nl[16]              (20 B)
 *   connector -> listener   RESPONSE   "MSA2" | Nc[16] | Mc[32]     (52 B)
 *   listener  -> connector  PROOF      "MSA3" | Ml[32]              (36 B)
 *   Mc = HMAC(K, "nccl-mesh connector" | hello | Nl | Nc)
 *   Ml = HMAC(K, "nccl-mesh listener"  | hello | Nc | Nl)
 * A fresh Nl makes a replayed response useless, a fresh Nc a replayed proof.
 * Once done, both sides hold the connection's secret (no wire bytes):
 *   S  = HKDF-SHA256(K, salt = Nl | Nc, info = "nccl-mesh connection secret"
 *                    | hello)                                       (32 B)
 * which modules get through mesh_ctrl to key their own streams.
 * Every primitive (HMAC, HKDF, SHA-256, randomness, constant-time compare)
 * is OpenSSL's libcrypto.
 */
#ifndef CORE_AUTH_H
#define CORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define CORE_AUTH_HELLO_SIZE 40
#define CORE_AUTH_NONCE_SIZE 16
#define CORE_AUTH_MAC_SIZE 32
#define CORE_AUTH_KEY_MAX 1024
#define CORE_AUTH_KEY_MIN 16
#define CORE_AUTH_SECRET_SIZE 32

struct core_auth_key {
	size_t len;		/* 0: authentication off */
	uint8_t bytes[CORE_AUTH_KEY_MAX];
};

enum core_auth_role { CORE_AUTH_LISTENER, CORE_AUTH_CONNECTOR };

struct core_auth {
	enum core_auth_role role;
	int state;			/* private to auth.c */
	const struct core_auth_key *key;
	uint8_t hello[CORE_AUTH_HELLO_SIZE];
	uint8_t mine[CORE_AUTH_NONCE_SIZE];
	uint8_t theirs[CORE_AUTH_NONCE_SIZE];
	uint8_t in[64];			/* a partial message */
	size_t in_len;
	uint8_t out[64];		/* to send; the caller drains it */
	size_t out_len;
	uint8_t secret[CORE_AUTH_SECRET_SIZE];	/* once done with a key */
	size_t secret_len;		/* 0: no key, or not done */
};

/*
 * Reads the key file: its bytes, less one trailing newline, at least
 * CORE_AUTH_KEY_MIN of them.  A file readable by group or others is
 * refused.  On error returns -errno and writes why into err.
 */
int core_auth_load_key(const char *path, struct core_auth_key *key,
		       char *err, size_t errlen);

/* Starts a handshake for the connection whose hello is given; a listener
 * queues its challenge in out[] at once. */
void core_auth_start(struct core_auth *a, enum core_auth_role role,
		     const struct core_auth_key *key,
		     const uint8_t hello[CORE_AUTH_HELLO_SIZE]);

/*
 * Feeds received bytes.  Consumes only handshake bytes (*used says how
 * many; the rest belongs to the connection).  Returns 0 once this side is
 * sure of the peer (a listener still has the proof in out[] to send),
 * -EAGAIN while more is needed, -EACCES for a wrong MAC, -EPROTO for bytes
 * that are no handshake message.  After an error every call fails.
 */
int core_auth_feed(struct core_auth *a, const uint8_t *buf, size_t len,
		   size_t *used);

/* Consumes n bytes of out[] after the caller sent them. */
void core_auth_sent(struct core_auth *a, size_t n);

/* HMAC-SHA256 over the concatenated parts, SHA-256 and HKDF-SHA256
 * (RFC 5869), all libcrypto's; 0, or -ENOMEM when libcrypto fails. */
int core_hmac_sha256(const uint8_t *key, size_t key_len,
		     const uint8_t *const *parts, const size_t *lens,
		     int nparts, uint8_t mac[32]);
int core_sha256(const uint8_t *data, size_t len, uint8_t digest[32]);
int core_hkdf_sha256(const uint8_t *ikm, size_t ikm_len,
		     const uint8_t *salt, size_t salt_len,
		     const uint8_t *info, size_t info_len,
		     uint8_t *out, size_t out_len);

#endif
