/* SPDX-License-Identifier: MIT */
/*
 * AES-256-GCM for tcp-xdc's records, from one of two well-kept libraries.
 * Intel's ipsec-mb (Debian's libipsec-mb) where the build has it and its
 * GCM runs on this CPU's VAES and AVX-512: there it seals and opens at
 * about four times OpenSSL 3.0's speed on AMD's cores and level with it on
 * Intel's, and that speed is what bounds encrypted throughput on a host's
 * cores.  Elsewhere OpenSSL's libcrypto: ipsec-mb's narrower code paths
 * have no measured advantage to outweigh the system's own library.  Both
 * compute the same standard AEAD, so the bytes on the wire do not depend
 * on which library either peer uses, and a config may name one
 * (cipher_library), say for a validated libcrypto.
 *
 * A record is sealed or opened in steps: begin (nonce, additional data),
 * update over its pieces in order (out may equal in), then finish, which
 * writes the tag when sealing and checks it, in constant time, when
 * opening.  One object is one direction under one key, used by one thread
 * at a time.
 */
#ifndef TCP_XDC_AEAD_H
#define TCP_XDC_AEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TCP_XDC_AEAD_KEY 32
#define TCP_XDC_AEAD_NONCE 12
#define TCP_XDC_AEAD_TAG 16

struct tcp_xdc_aead;

enum tcp_xdc_aead_lib {
	TCP_XDC_AEAD_BEST,		/* ipsec-mb on VAES, else OpenSSL */
	TCP_XDC_AEAD_OPENSSL,
	TCP_XDC_AEAD_IPSEC_MB,
};

/* "auto" (BEST), "openssl", "ipsec-mb"; false for any other name. */
bool tcp_xdc_aead_lib_parse(const char *name, enum tcp_xdc_aead_lib *lib);

/* NULL when out of memory, or lib is not in this build or on this CPU. */
struct tcp_xdc_aead *tcp_xdc_aead_new(const uint8_t key[TCP_XDC_AEAD_KEY],
				      bool seal, enum tcp_xdc_aead_lib lib);
void tcp_xdc_aead_free(struct tcp_xdc_aead *a);

bool tcp_xdc_aead_begin(struct tcp_xdc_aead *a,
			const uint8_t nonce[TCP_XDC_AEAD_NONCE],
			const uint8_t *aad, size_t aad_len);
bool tcp_xdc_aead_update(struct tcp_xdc_aead *a, uint8_t *out,
			 const uint8_t *in, size_t len);
/* Seal: writes the tag.  Open: whether tag is the record's. */
bool tcp_xdc_aead_finish(struct tcp_xdc_aead *a,
			 uint8_t tag[TCP_XDC_AEAD_TAG]);

/* The library lib stands for, with its version and code path, in words
 * (for the connection's INFO line, meshinfo and the benchmark); NULL when
 * lib is not in this build or on this CPU. */
const char *tcp_xdc_aead_library(enum tcp_xdc_aead_lib lib);

/* Why lib cannot seal here, in words; NULL where it can. */
const char *tcp_xdc_aead_unusable(enum tcp_xdc_aead_lib lib);

#endif
