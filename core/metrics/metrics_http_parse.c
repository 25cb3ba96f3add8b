/* SPDX-License-Identifier: MIT */
/*
 * What a request for meshrelay's metrics asks for (metrics.h), from the
 * bytes a stranger sent: a file of its own that needs nothing else, so
 * the fuzzer (tests/fuzz/fuzz_metrics_http.c) builds it alone.
 */
#include <stdbool.h>
#include <string.h>

#include "metrics.h"

/* The end of the header ("\r\n\r\n", or "\n\n" from a terse client). */
static bool header_ends(const char *buf, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (buf[i] == '\n' && buf[i + 1] == '\n')
			return true;
		if (i + 3 < len && !memcmp(buf + i, "\r\n\r\n", 4))
			return true;
	}
	return false;
}

enum core_http_verdict core_metrics_http_parse(const char *buf, size_t len,
					       size_t cap)
{
	const char *sp1, *sp2, *eol, *target;
	size_t mlen, tlen, vlen;

	if (!header_ends(buf, len))
		return len >= cap ? CORE_HTTP_TOO_LARGE : CORE_HTTP_INCOMPLETE;
	eol = memchr(buf, '\n', len);
	sp1 = memchr(buf, ' ', (size_t)(eol - buf));
	if (!sp1)
		return CORE_HTTP_BAD_REQUEST;
	target = sp1 + 1;
	sp2 = memchr(target, ' ', (size_t)(eol - target));
	if (!sp2)
		return CORE_HTTP_BAD_REQUEST;
	mlen = (size_t)(sp1 - buf);
	tlen = (size_t)(sp2 - target);
	vlen = (size_t)(eol - sp2 - 1);
	if (vlen && sp2[vlen] == '\r')
		vlen--;
	/* "HTTP/1.0" or "HTTP/1.1", a method of capitals, an origin form */
	if (vlen != 8 || memcmp(sp2 + 1, "HTTP/1.", 7) ||
	    (sp2[8] != '0' && sp2[8] != '1') || !mlen || !tlen ||
	    *target != '/')
		return CORE_HTTP_BAD_REQUEST;
	for (size_t i = 0; i < mlen; i++)
		if (buf[i] < 'A' || buf[i] > 'Z')
			return CORE_HTTP_BAD_REQUEST;
	for (size_t i = 0; i < tlen; i++)
		if ((unsigned char)target[i] <= ' ' ||
		    (unsigned char)target[i] >= 0x7f)
			return CORE_HTTP_BAD_REQUEST;
	if (mlen != 3 || memcmp(buf, "GET", 3))
		return CORE_HTTP_BAD_METHOD;
	/* a scraper's own query (Prometheus's params) changes nothing */
	if ((tlen == 8 || (tlen > 8 && target[8] == '?')) &&
	    !memcmp(target, "/metrics", 8))
		return CORE_HTTP_METRICS;
	return CORE_HTTP_NOT_FOUND;
}
