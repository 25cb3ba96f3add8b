/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's AES-256-GCM (tcp_xdc_aead.h): intel-ipsec-mb's direct GCM
 * calls where the build has the library (TCP_XDC_IPSEC_MB), else
 * libcrypto's EVP interface.  The tag check and the wiping of secrets are
 * libcrypto's either way (CRYPTO_memcmp, OPENSSL_cleanse).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "tcp_xdc_aead.h"

void tcp_xdc_aead_cleanse(void *p, size_t n)
{
	OPENSSL_cleanse(p, n);
}

#ifdef TCP_XDC_IPSEC_MB

#include <pthread.h>

#include <intel-ipsec-mb.h>

/* The manager only holds the GCM functions for this CPU; they keep no
 * state of their own, so every thread shares one. */
static IMB_MGR *imb;
static pthread_once_t imb_once = PTHREAD_ONCE_INIT;
static char imb_name[64];

static void imb_setup(void)
{
	static const char *const arch[] = {
		[IMB_ARCH_NOAESNI] = "no AES-NI", [IMB_ARCH_SSE] = "SSE",
		[IMB_ARCH_AVX] = "AVX", [IMB_ARCH_AVX2] = "AVX2",
		[IMB_ARCH_AVX512] = "AVX-512",
	};
	IMB_MGR *m = alloc_mb_mgr(0);

	if (!m)
		return;
	init_mb_mgr_auto(m, NULL);
	if (imb_get_errno(m)) {
		free_mb_mgr(m);
		return;
	}
	snprintf(imb_name, sizeof(imb_name), "intel-ipsec-mb %s, %s",
		 imb_get_version_str(),
		 m->used_arch > IMB_ARCH_NONE && m->used_arch < IMB_ARCH_NUM ?
		 arch[m->used_arch] : "?");
	imb = m;
}

struct tcp_xdc_aead {
	struct gcm_key_data key;	/* first: the library wants it aligned */
	struct gcm_context_data rec;	/* the record under way */
	bool seal;
};

struct tcp_xdc_aead *tcp_xdc_aead_new(const uint8_t key[TCP_XDC_AEAD_KEY],
				      bool seal)
{
	size_t size = (sizeof(struct tcp_xdc_aead) + 63) & ~(size_t)63;
	struct tcp_xdc_aead *a;

	pthread_once(&imb_once, imb_setup);
	if (!imb)
		return NULL;
	a = aligned_alloc(64, size);
	if (!a)
		return NULL;
	memset(a, 0, size);
	IMB_AES256_GCM_PRE(imb, key, &a->key);
	a->seal = seal;
	return a;
}

void tcp_xdc_aead_free(struct tcp_xdc_aead *a)
{
	if (!a)
		return;
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}

bool tcp_xdc_aead_begin(struct tcp_xdc_aead *a,
			const uint8_t nonce[TCP_XDC_AEAD_NONCE],
			const uint8_t *aad, size_t aad_len)
{
	IMB_AES256_GCM_INIT(imb, &a->key, &a->rec, nonce, aad, aad_len);
	return true;
}

bool tcp_xdc_aead_update(struct tcp_xdc_aead *a, uint8_t *out,
			 const uint8_t *in, size_t len)
{
	if (!len)
		return true;
	if (a->seal)
		IMB_AES256_GCM_ENC_UPDATE(imb, &a->key, &a->rec, out, in, len);
	else
		IMB_AES256_GCM_DEC_UPDATE(imb, &a->key, &a->rec, out, in, len);
	return true;
}

bool tcp_xdc_aead_finish(struct tcp_xdc_aead *a,
			 uint8_t tag[TCP_XDC_AEAD_TAG])
{
	uint8_t mine[TCP_XDC_AEAD_TAG];

	if (a->seal) {
		IMB_AES256_GCM_ENC_FINALIZE(imb, &a->key, &a->rec, tag,
					    TCP_XDC_AEAD_TAG);
		return true;
	}
	IMB_AES256_GCM_DEC_FINALIZE(imb, &a->key, &a->rec, mine,
				    TCP_XDC_AEAD_TAG);
	return CRYPTO_memcmp(mine, tag, TCP_XDC_AEAD_TAG) == 0;
}

const char *tcp_xdc_aead_library(void)
{
	pthread_once(&imb_once, imb_setup);
	return imb ? imb_name : "intel-ipsec-mb (cannot start)";
}

#else /* libcrypto */

struct tcp_xdc_aead {
	EVP_CIPHER_CTX *ctx;
	bool seal;
};

struct tcp_xdc_aead *tcp_xdc_aead_new(const uint8_t key[TCP_XDC_AEAD_KEY],
				      bool seal)
{
	struct tcp_xdc_aead *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->seal = seal;
	a->ctx = EVP_CIPHER_CTX_new();
	if (!a->ctx ||
	    EVP_CipherInit_ex(a->ctx, EVP_aes_256_gcm(), NULL, key, NULL,
			      seal) != 1) {
		tcp_xdc_aead_free(a);
		return NULL;
	}
	return a;
}

void tcp_xdc_aead_free(struct tcp_xdc_aead *a)
{
	if (!a)
		return;
	EVP_CIPHER_CTX_free(a->ctx);
	free(a);
}

bool tcp_xdc_aead_begin(struct tcp_xdc_aead *a,
			const uint8_t nonce[TCP_XDC_AEAD_NONCE],
			const uint8_t *aad, size_t aad_len)
{
	int n;

	return EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, nonce, a->seal) ==
		       1 &&
	       EVP_CipherUpdate(a->ctx, NULL, &n, aad, (int)aad_len) == 1;
}

bool tcp_xdc_aead_update(struct tcp_xdc_aead *a, uint8_t *out,
			 const uint8_t *in, size_t len)
{
	int n;

	return !len || EVP_CipherUpdate(a->ctx, out, &n, in, (int)len) == 1;
}

bool tcp_xdc_aead_finish(struct tcp_xdc_aead *a,
			 uint8_t tag[TCP_XDC_AEAD_TAG])
{
	uint8_t none[16];
	int n;

	if (a->seal)
		return EVP_CipherFinal_ex(a->ctx, none, &n) == 1 &&
		       EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_GCM_GET_TAG,
					   TCP_XDC_AEAD_TAG, tag) == 1;
	return EVP_CIPHER_CTX_ctrl(a->ctx, EVP_CTRL_GCM_SET_TAG,
				   TCP_XDC_AEAD_TAG, tag) == 1 &&
	       EVP_CipherFinal_ex(a->ctx, none, &n) == 1;
}

const char *tcp_xdc_aead_library(void)
{
	return OpenSSL_version(OPENSSL_VERSION);
}

#endif
