/* SPDX-License-Identifier: MIT */
/*
 * What the cipher of tcp-xdc's records can do on one core: AES-256-GCM
 * through libcrypto, as the record layer calls it (a 4-byte length as
 * associated data, a 12-byte nonce, a 16-byte tag), sealing and opening
 * records of one size back to back from buffers in cache.  The encryption
 * benchmark turns it into about what encryption can leave of clear
 * throughput where both are bound by the cores.
 *
 *   aead_speed [RECORD] [SECS]      (RECORD takes K or M; 256K, 1)
 *
 * Prints one line: "seal GB/s open GB/s" (10^9 bytes of plaintext).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#include "size.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One record sealed (or opened, tag checked) with a fresh nonce. */
static int one_record(EVP_CIPHER_CTX *ctx, int seal, uint64_t counter,
		      const uint8_t *in, uint8_t *out, size_t len, uint8_t *tag)
{
	uint8_t nonce[12] = { 0 };
	uint8_t aad[4] = { 0 };
	int n;

	memcpy(nonce + 4, &counter, 8);
	if (seal)
		return EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1 &&
		       EVP_EncryptUpdate(ctx, NULL, &n, aad, 4) == 1 &&
		       EVP_EncryptUpdate(ctx, out, &n, in, (int)len) == 1 &&
		       EVP_EncryptFinal_ex(ctx, out + len, &n) == 1 &&
		       EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16,
					   tag) == 1;
	return EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) == 1 &&
	       EVP_DecryptUpdate(ctx, NULL, &n, aad, 4) == 1 &&
	       EVP_DecryptUpdate(ctx, out, &n, in, (int)len) == 1 &&
	       EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, tag) == 1 &&
	       EVP_DecryptFinal_ex(ctx, out + len, &n) == 1;
}

/* GB/s of plaintext over secs.  Opening takes one sealed record again and
 * again, its tag checked each time (nothing here is secret). */
static double run(int seal, size_t len, double secs)
{
	static const uint8_t key[32] = { 1 };
	EVP_CIPHER_CTX *s = EVP_CIPHER_CTX_new(), *o = EVP_CIPHER_CTX_new();
	uint8_t *pt = calloc(1, len), *ct = malloc(len), *back = malloc(len);
	uint8_t tag[16], seal_tag[16];
	uint64_t records = 0;
	double t0, t;

	if (!s || !o || !pt || !ct || !back ||
	    EVP_EncryptInit_ex(s, EVP_aes_256_gcm(), NULL, key, NULL) != 1 ||
	    EVP_DecryptInit_ex(o, EVP_aes_256_gcm(), NULL, key, NULL) != 1 ||
	    !one_record(s, 1, 0, pt, ct, len, tag)) {
		fprintf(stderr, "aead_speed: libcrypto setup failed\n");
		exit(1);
	}
	t0 = now_s();
	do {
		for (int i = 0; i < 16; i++, records++) {
			int ok = seal ? one_record(s, 1, records + 1, pt,
						   back, len, seal_tag) :
					one_record(o, 0, 0, ct, back, len,
						   tag);
			if (!ok) {
				fprintf(stderr, "aead_speed: record %llu "
					"failed\n",
					(unsigned long long)records);
				exit(1);
			}
		}
		t = now_s() - t0;
	} while (t < secs);
	EVP_CIPHER_CTX_free(s);
	EVP_CIPHER_CTX_free(o);
	free(pt);
	free(ct);
	free(back);
	return (double)records * (double)len / t / 1e9;
}

int main(int argc, char **argv)
{
	uint64_t len;
	double secs = argc > 2 ? atof(argv[2]) : 1.0;

	if (mesh_size_parse(argc > 1 ? argv[1] : "256K", &len) || !len ||
	    len > (64u << 20) || secs <= 0) {
		fprintf(stderr, "usage: aead_speed [RECORD] [SECS]\n");
		return 2;
	}
	printf("%.3f %.3f\n", run(1, (size_t)len, secs), run(0, (size_t)len, secs));
	return 0;
}
