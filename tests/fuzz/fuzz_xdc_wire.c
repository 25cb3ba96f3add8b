/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what tcp-xdc reads from the wire: the connector's
 * hello, the acceptor's reply and the chunk headers on data streams.
 *
 * Input: the bytes are offered to each parser.  Besides "no crash, no
 * sanitizer report" it checks properties that must hold for any input:
 *  - an accepted hello has a stream count and chunk size in range, and
 *    encodes back to a hello that parses the same;
 *  - a reply parses to an acceptance, a refusal with a NUL-terminated
 *    reason that fits, or -EPROTO; an encoded refusal parses back;
 *  - read as a stream of chunk headers (the first 4 bytes give the chunk
 *    size), every accepted header keeps its payload inside its message,
 *    its length within the chunk size, its message number from going
 *    back, and encodes back to exactly the bytes it came from.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcp_xdc_wire.h"

#include "fuzz_util.h"

static void check_hello(const uint8_t *data, size_t size)
{
	struct tcp_xdc_hello again;
	char reason[112];
	uint32_t chunk = 0, chunk2 = 0;
	int n = 0, n2 = 0, rc;

	rc = tcp_xdc_hello_parse(data, size, &n, &chunk, reason,
				 sizeof(reason));
	REQUIRE(rc == 0 || rc == EPROTO || rc == EPROTONOSUPPORT ||
		rc == EINVAL);
	if (rc) {
		REQUIRE(memchr(reason, '\0', sizeof(reason)));
		return;
	}
	REQUIRE(size == sizeof(struct tcp_xdc_hello));
	REQUIRE(n >= 1 && n <= TCP_XDC_MAX_STREAMS);
	REQUIRE(chunk >= TCP_XDC_MIN_CHUNK && chunk <= TCP_XDC_MAX_CHUNK);
	tcp_xdc_hello_encode(&again, n, chunk);
	REQUIRE(tcp_xdc_hello_parse(&again, sizeof(again), &n2, &chunk2,
				    reason, sizeof(reason)) == 0);
	REQUIRE(n2 == n && chunk2 == chunk);
}

static void check_reply(const uint8_t *data, size_t size)
{
	struct tcp_xdc_reply r;
	char reason[sizeof(r.reason) + 1], small[8];
	int rc;

	rc = tcp_xdc_reply_parse(data, size, reason, sizeof(reason));
	REQUIRE(rc == -EPROTO || (rc >= 0 && rc <= 0xffff));
	REQUIRE(memchr(reason, '\0', sizeof(reason)));
	REQUIRE(tcp_xdc_reply_parse(data, size, small, sizeof(small)) == rc);
	REQUIRE(memchr(small, '\0', sizeof(small)));
	if (rc <= 0)
		return;
	/* A refusal travels back unchanged, reason cut to what fits. */
	tcp_xdc_reply_encode(&r, rc, reason);
	REQUIRE(tcp_xdc_reply_parse(&r, sizeof(r), small, sizeof(small)) ==
		rc);
	REQUIRE(!strncmp(small, reason, sizeof(small) - 1));
}

static void check_chunks(const uint8_t *data, size_t size)
{
	uint64_t last = 0, chunk_size;
	uint32_t c32;

	if (size < 4)
		return;
	memcpy(&c32, data, 4);
	chunk_size = c32 % (2 * TCP_XDC_MAX_CHUNK);
	data += 4;
	size -= 4;
	for (; size >= sizeof(struct tcp_xdc_chunk_hdr);
	     data += sizeof(struct tcp_xdc_chunk_hdr),
	     size -= sizeof(struct tcp_xdc_chunk_hdr)) {
		struct tcp_xdc_chunk_hdr wire, again;
		struct tcp_xdc_chunk c;
		int rc;

		memcpy(&wire, data, sizeof(wire));
		rc = tcp_xdc_chunk_parse(&wire, chunk_size, last, &c);
		REQUIRE(rc == 0 || rc == -EPROTO);
		tcp_xdc_chunk_encode(&again, &c);
		REQUIRE(!memcmp(&again, &wire, sizeof(wire)));
		if (rc)
			return;	/* the stream fails here */
		REQUIRE(c.len <= chunk_size);
		REQUIRE(c.total <= TCP_XDC_MAX_MESSAGE);
		REQUIRE(c.offset <= c.total && c.len <= c.total - c.offset);
		REQUIRE(c.len || !c.total);
		REQUIRE(c.seq >= last);
		last = c.seq;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_hello(data, size);
	check_reply(data, size);
	check_chunks(data, size);
	return 0;
}
