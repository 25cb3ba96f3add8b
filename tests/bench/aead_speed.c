/* SPDX-License-Identifier: MIT */
/*
 * What the cipher of tcp-xdc's records can do on one core: AES-256-GCM
 * through the module's cipher layer (tcp_xdc_aead.h), as the record layer
 * calls it (a 4-byte length as associated data, a 12-byte nonce, a 16-byte
 * tag), sealing and opening records of one size back to back from buffers
 * in cache.  The encryption benchmark turns it into about what encryption
 * can leave of clear throughput where both are bound by the cores.
 *
 *   aead_speed [RECORD] [SECS]      (RECORD takes K or M; 256K, 1)
 *
 * Prints one line: "seal GB/s open GB/s" (10^9 bytes of plaintext) of the
 * library tcp-xdc uses here; on stderr which one that is, and the same
 * figures of the other library the build has.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "size.h"
#include "tcp_xdc_aead.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One record sealed (or opened, tag checked) with a fresh nonce. */
static bool one_record(struct tcp_xdc_aead *a, uint64_t counter,
		       const uint8_t *in, uint8_t *out, size_t len,
		       uint8_t *tag)
{
	uint8_t nonce[TCP_XDC_AEAD_NONCE] = { 0 };
	uint8_t aad[4] = { 0 };

	memcpy(nonce + 4, &counter, 8);
	return tcp_xdc_aead_begin(a, nonce, aad, sizeof(aad)) &&
	       tcp_xdc_aead_update(a, out, in, len) &&
	       tcp_xdc_aead_finish(a, tag);
}

/* GB/s of plaintext over secs.  Opening takes one sealed record again and
 * again, its tag checked each time (nothing here is secret). */
static double run(enum tcp_xdc_aead_lib lib, bool seal, size_t len,
		  double secs)
{
	static const uint8_t key[TCP_XDC_AEAD_KEY] = { 1 };
	struct tcp_xdc_aead *s = tcp_xdc_aead_new(key, true, lib);
	struct tcp_xdc_aead *o = tcp_xdc_aead_new(key, false, lib);
	uint8_t *pt = calloc(1, len), *ct = malloc(len), *back = malloc(len);
	uint8_t tag[TCP_XDC_AEAD_TAG], seal_tag[TCP_XDC_AEAD_TAG];
	uint64_t records = 0;
	double t0, t;

	if (!s || !o || !pt || !ct || !back ||
	    !one_record(s, 0, pt, ct, len, tag)) {
		fprintf(stderr, "aead_speed: %s: setup failed\n",
			tcp_xdc_aead_library(lib));
		exit(1);
	}
	t0 = now_s();
	do {
		for (int i = 0; i < 16; i++, records++) {
			bool ok = seal ? one_record(s, records + 1, pt, back,
						    len, seal_tag) :
					 one_record(o, 0, ct, back, len, tag);
			if (!ok) {
				fprintf(stderr, "aead_speed: record %llu "
					"failed\n",
					(unsigned long long)records);
				exit(1);
			}
		}
		t = now_s() - t0;
	} while (t < secs);
	tcp_xdc_aead_free(s);
	tcp_xdc_aead_free(o);
	free(pt);
	free(ct);
	free(back);
	return (double)records * (double)len / t / 1e9;
}

int main(int argc, char **argv)
{
	static const enum tcp_xdc_aead_lib other[] = { TCP_XDC_AEAD_OPENSSL,
						       TCP_XDC_AEAD_IPSEC_MB };
	const char *best = tcp_xdc_aead_library(TCP_XDC_AEAD_BEST);
	uint64_t len;
	double secs = argc > 2 ? atof(argv[2]) : 1.0;

	if (util_size_parse(argc > 1 ? argv[1] : "256K", &len) || !len ||
	    len > (64u << 20) || secs <= 0) {
		fprintf(stderr, "usage: aead_speed [RECORD] [SECS]\n");
		return 2;
	}
	for (int i = 0; i < 2; i++) {
		const char *name = tcp_xdc_aead_library(other[i]);

		if (name && strcmp(name, best))
			fprintf(stderr, "aead_speed: %s: seal %.3f open %.3f "
				"GB/s\n", name,
				run(other[i], true, (size_t)len, secs),
				run(other[i], false, (size_t)len, secs));
	}
	printf("%.3f %.3f\n", run(TCP_XDC_AEAD_BEST, true, (size_t)len, secs),
	       run(TCP_XDC_AEAD_BEST, false, (size_t)len, secs));
	fprintf(stderr, "aead_speed: %s: the line above, used by tcp-xdc\n",
		best);
	return 0;
}
