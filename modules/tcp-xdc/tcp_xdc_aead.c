/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's AES-256-GCM (tcp_xdc_aead.h): one table of calls per library,
 * libcrypto's EVP interface and, where the build has the library
 * (TCP_XDC_IPSEC_MB) and it starts on this CPU, intel-ipsec-mb's direct
 * GCM calls.  The tag check and the wiping of secrets are libcrypto's
 * either way (CRYPTO_memcmp, OPENSSL_cleanse).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "tcp_xdc_aead.h"

#ifdef TCP_XDC_IPSEC_MB
#include <pthread.h>

#include <intel-ipsec-mb.h>
#endif

struct aead_ops {
	bool (*init)(struct tcp_xdc_aead *a, const uint8_t *key);
	bool (*begin)(struct tcp_xdc_aead *a, const uint8_t *nonce,
		      const uint8_t *aad, size_t aad_len);
	bool (*update)(struct tcp_xdc_aead *a, uint8_t *out,
		       const uint8_t *in, size_t len);
	bool (*finish)(struct tcp_xdc_aead *a, uint8_t *tag);
};

struct tcp_xdc_aead {
#ifdef TCP_XDC_IPSEC_MB
	struct gcm_key_data key;	/* first: the library wants it aligned */
	struct gcm_context_data rec;	/* the record under way */
#endif
	EVP_CIPHER_CTX *ctx;		/* OpenSSL's, key set */
	const struct aead_ops *ops;
	bool seal;
};

/* ------------------------------------------------------------ libcrypto */

static bool ossl_init(struct tcp_xdc_aead *a, const uint8_t *key)
{
	a->ctx = EVP_CIPHER_CTX_new();
	return a->ctx && EVP_CipherInit_ex(a->ctx, EVP_aes_256_gcm(), NULL,
					   key, NULL, a->seal) == 1;
}

static bool ossl_begin(struct tcp_xdc_aead *a, const uint8_t *nonce,
		       const uint8_t *aad, size_t aad_len)
{
	int n;

	return EVP_CipherInit_ex(a->ctx, NULL, NULL, NULL, nonce,
				 a->seal) == 1 &&
	       EVP_CipherUpdate(a->ctx, NULL, &n, aad, (int)aad_len) == 1;
}

static bool ossl_update(struct tcp_xdc_aead *a, uint8_t *out,
			const uint8_t *in, size_t len)
{
	int n;

	return EVP_CipherUpdate(a->ctx, out, &n, in, (int)len) == 1;
}

static bool ossl_finish(struct tcp_xdc_aead *a, uint8_t *tag)
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

static const struct aead_ops ossl_ops = {
	ossl_init, ossl_begin, ossl_update, ossl_finish,
};

/* ------------------------------------------------------- intel-ipsec-mb */

#ifdef TCP_XDC_IPSEC_MB

/* The manager only holds the GCM functions for this CPU; they keep no
 * state of their own, so every thread shares one. */
static IMB_MGR *imb;
static bool imb_wide;		/* its GCM runs on VAES and AVX-512 */
static pthread_once_t imb_once = PTHREAD_ONCE_INIT;
static char imb_name[64];

static void imb_setup(void)
{
	static const char *const arch[] = {
		[IMB_ARCH_NOAESNI] = "no AES-NI", [IMB_ARCH_SSE] = "SSE",
		[IMB_ARCH_AVX] = "AVX", [IMB_ARCH_AVX2] = "AVX2",
		[IMB_ARCH_AVX512] = "AVX-512",
	};
	const uint64_t vaes = IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
	IMB_MGR *m = alloc_mb_mgr(0);

	if (!m)
		return;
	init_mb_mgr_auto(m, NULL);
	if (imb_get_errno(m)) {
		free_mb_mgr(m);
		return;
	}
	imb_wide = m->used_arch == IMB_ARCH_AVX512 &&
		   (m->features & vaes) == vaes;
	snprintf(imb_name, sizeof(imb_name), "intel-ipsec-mb %s, %s%s",
		 imb_get_version_str(),
		 m->used_arch > IMB_ARCH_NONE && m->used_arch < IMB_ARCH_NUM ?
		 arch[m->used_arch] : "?", imb_wide ? ", VAES" : "");
	imb = m;
}

/* The module is unloaded with the plugin: no manager outlives it. */
__attribute__((destructor)) static void imb_teardown(void)
{
	if (imb)
		free_mb_mgr(imb);
	imb = NULL;
}

static bool imb_init(struct tcp_xdc_aead *a, const uint8_t *key)
{
	IMB_AES256_GCM_PRE(imb, key, &a->key);
	return true;
}

static bool imb_begin(struct tcp_xdc_aead *a, const uint8_t *nonce,
		      const uint8_t *aad, size_t aad_len)
{
	IMB_AES256_GCM_INIT(imb, &a->key, &a->rec, nonce, aad, aad_len);
	return true;
}

static bool imb_update(struct tcp_xdc_aead *a, uint8_t *out,
		       const uint8_t *in, size_t len)
{
	if (a->seal)
		IMB_AES256_GCM_ENC_UPDATE(imb, &a->key, &a->rec, out, in, len);
	else
		IMB_AES256_GCM_DEC_UPDATE(imb, &a->key, &a->rec, out, in, len);
	return true;
}

static bool imb_finish(struct tcp_xdc_aead *a, uint8_t *tag)
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

static const struct aead_ops imb_ops = {
	imb_init, imb_begin, imb_update, imb_finish,
};

/* ipsec-mb's table where the library started on this CPU, else NULL;
 * *wide: it started and its GCM runs on VAES. */
static const struct aead_ops *imb_usable(bool *wide)
{
	pthread_once(&imb_once, imb_setup);
	*wide = imb_wide;
	return imb ? &imb_ops : NULL;
}

#else
static const struct aead_ops *imb_usable(bool *wide)
{
	*wide = false;
	return NULL;
}
#endif

/* ------------------------------------------------------------- the calls */

/* lib's table; NULL where lib is not in this build or on this CPU. */
static const struct aead_ops *ops_of(enum tcp_xdc_aead_lib lib)
{
	bool wide;
	const struct aead_ops *imb_ops_here = imb_usable(&wide);

	if (lib == TCP_XDC_AEAD_IPSEC_MB || (lib == TCP_XDC_AEAD_BEST && wide))
		return imb_ops_here;
	return &ossl_ops;
}

bool tcp_xdc_aead_lib_parse(const char *name, enum tcp_xdc_aead_lib *lib)
{
	static const char *const names[] = {
		[TCP_XDC_AEAD_BEST] = "auto",
		[TCP_XDC_AEAD_OPENSSL] = "openssl",
		[TCP_XDC_AEAD_IPSEC_MB] = "ipsec-mb",
	};

	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i])) {
			*lib = (enum tcp_xdc_aead_lib)i;
			return true;
		}
	return false;
}

const char *tcp_xdc_aead_library(enum tcp_xdc_aead_lib lib)
{
	const struct aead_ops *ops = ops_of(lib);

	if (ops == &ossl_ops)
		return OpenSSL_version(OPENSSL_VERSION);
#ifdef TCP_XDC_IPSEC_MB
	if (ops)
		return imb_name;
#endif
	return NULL;
}

const char *tcp_xdc_aead_unusable(enum tcp_xdc_aead_lib lib)
{
	if (ops_of(lib))
		return NULL;
#ifdef TCP_XDC_IPSEC_MB
	return "intel-ipsec-mb does not start on this CPU";
#else
	return "this tcp-xdc was built without intel-ipsec-mb";
#endif
}

struct tcp_xdc_aead *tcp_xdc_aead_new(const uint8_t key[TCP_XDC_AEAD_KEY],
				      bool seal, enum tcp_xdc_aead_lib lib)
{
	size_t size = (sizeof(struct tcp_xdc_aead) + 63) & ~(size_t)63;
	const struct aead_ops *ops = ops_of(lib);
	struct tcp_xdc_aead *a;

	if (!ops)
		return NULL;
	a = aligned_alloc(64, size);
	if (!a)
		return NULL;
	memset(a, 0, size);
	a->ops = ops;
	a->seal = seal;
	if (!ops->init(a, key)) {
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
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}

bool tcp_xdc_aead_begin(struct tcp_xdc_aead *a,
			const uint8_t nonce[TCP_XDC_AEAD_NONCE],
			const uint8_t *aad, size_t aad_len)
{
	return a->ops->begin(a, nonce, aad, aad_len);
}

bool tcp_xdc_aead_update(struct tcp_xdc_aead *a, uint8_t *out,
			 const uint8_t *in, size_t len)
{
	return !len || a->ops->update(a, out, in, len);
}

bool tcp_xdc_aead_finish(struct tcp_xdc_aead *a,
			 uint8_t tag[TCP_XDC_AEAD_TAG])
{
	return a->ops->finish(a, tag);
}
