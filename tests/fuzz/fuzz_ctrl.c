/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the control plane's listener side and framing: the
 * gate every new socket passes (hello, then authentication where a key is
 * set), the frame parser and ack, and the listener's refusal log and
 * pressure policy.  All of it without sockets.
 *
 * Input: 1 byte of mode (which key the listener holds), 4 bytes that seed
 * the split points, then the payload.  Properties checked for any input:
 *  - the gate never asks for more than the hello and the handshake, never
 *    accepts fuzzed bytes where a key is set, and accepts without a key
 *    exactly the hellos that decode and do not ask to authenticate;
 *  - after a refusal or a pass the gate wants nothing more;
 *  - an honest connector passes the gate however its bytes are split;
 *  - frames parse to at most CTRL_FRAME_MAX bytes and consume the stream
 *    exactly; an ack decodes only from 8 bytes;
 *  - the refusal log writes at most one line per interval (plus the
 *    first), and its summaries count every refusal not logged alone.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ctrl_gate.h"
#include "ctrl_wire.h"

#include "fuzz_util.h"

static struct core_auth_key key;


/* Untrusted bytes through a gate, split as the input says. */
static void gate_untrusted(const struct core_auth_key *k, struct splitter *sp,
			   const uint8_t *p, size_t n)
{
	struct ctrl_gate g;
	int rc = -EAGAIN;

	ctrl_gate_init(&g, k);
	while (n && rc == -EAGAIN) {
		size_t want = ctrl_gate_want(&g), len;

		REQUIRE(want > 0 && want <= CTRL_HELLO_SIZE + 52);
		len = 1 + next(sp, want < n ? want : n);
		rc = ctrl_gate_feed(&g, p, len);
		REQUIRE(rc == -EAGAIN || rc >= 0);
		REQUIRE(rc < 1 + CTRL_REFUSE_COUNT);
		p += len;
		n -= len;
	}
	if (rc == -EAGAIN)
		return;
	REQUIRE(ctrl_gate_want(&g) == 0 || rc > 0);
	if (rc == 0) {
		/* a fuzzer cannot forge a MAC */
		REQUIRE(k == NULL);
		REQUIRE(ctrl_hello_decode(g.buf, &g.h) == NULL);
		REQUIRE(g.h.auth == 0);
		REQUIRE(g.passed);
	} else {
		REQUIRE(ctrl_refusal_text((enum ctrl_refusal)(rc - 1)) != NULL);
		if (rc - 1 == CTRL_REFUSE_BAD_HELLO)
			REQUIRE(g.detail != NULL);
	}
}

/* An honest connector's hello and response, split anywhere. */
static void gate_honest(struct splitter *sp, const uint8_t *p, size_t n)
{
	struct ctrl_hello h = { .kind = CTRL_HELLO_CTRL, .auth = 1 };
	uint8_t hello[CTRL_HELLO_SIZE], stream[CTRL_HELLO_SIZE + 64];
	struct core_auth c;
	struct ctrl_gate g;
	size_t len = 0, off = 0, used;
	int rc = -EAGAIN;

	memcpy(&h.nonce, p, n < 8 ? n : 8);
	h.module_tag = (uint16_t)next(sp, 65536);
	h.stream_index = (uint32_t)next(sp, CTRL_STREAMS_MAX);
	ctrl_hello_encode(&h, hello);
	ctrl_gate_init(&g, &key);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, &key, hello);
	memcpy(stream, hello, sizeof(hello));
	len = sizeof(hello);
	while (off < len && rc == -EAGAIN) {
		size_t want = ctrl_gate_want(&g), k;

		REQUIRE(want > 0);
		k = 1 + next(sp, want < len - off ? want : len - off);
		rc = ctrl_gate_feed(&g, stream + off, k);
		off += k;
		if (off == len && rc == -EAGAIN && g.auth.out_len) {
			/* challenge to the connector, its response back */
			REQUIRE(core_auth_feed(&c, g.auth.out, g.auth.out_len,
					       &used) == -EAGAIN);
			core_auth_sent(&g.auth, g.auth.out_len);
			memcpy(stream + len, c.out, c.out_len);
			len += c.out_len;
			core_auth_sent(&c, c.out_len);
		}
	}
	REQUIRE(rc == 0 && off == len);
	REQUIRE(g.h.nonce == h.nonce && g.h.module_tag == h.module_tag);
	REQUIRE(g.auth.out_len == 36);	/* the proof, for the caller */
}

static void frames(const uint8_t *p, size_t n)
{
	size_t off = 0, len;
	int rc;

	while ((rc = ctrl_frame_peek(p + off, n - off, &len)) >= 0) {
		uint32_t status;

		REQUIRE(len <= CTRL_FRAME_MAX && off + 4 + len <= n);
		REQUIRE(rc == 0 || (rc == CTRL_FRAME_HEARD && len == 0 &&
				    ctrl_get32(p + off) == CTRL_ACK_HEARD));
		if (rc == 0 && !ctrl_ack_decode(p + off + 4, len, &status))
			REQUIRE(len == CTRL_ACK_SIZE);
		off += 4 + len;
	}
	REQUIRE(rc == -EAGAIN || rc == -EPROTO);
	if (rc == -EAGAIN)
		REQUIRE(n - off < 4 || ctrl_get32(p + off) > n - off - 4);
}

static void refusal_log(const uint8_t *p, size_t n)
{
	struct ctrl_refusal_log r = { 0 };
	int64_t now = 1000000000ll, start = now;
	unsigned alone = 0, lines = 0, total = 0, summed = 0;
	char buf[1024];

	for (size_t i = 0; i + 1 < n; i += 2) {
		unsigned s;

		now += (int64_t)p[i] * 10000000ll;	/* 0 to 2.55 s */
		total++;
		if (ctrl_refusal_note(&r, (enum ctrl_refusal)(p[i + 1] %
							     CTRL_REFUSE_COUNT),
				      now)) {
			alone++;
			lines++;
		}
		if (ctrl_refusal_summary(&r, now, 0, buf, sizeof(buf))) {
			REQUIRE(sscanf(buf, "refused %u more", &s) == 1);
			summed += s;
			lines++;
		}
		REQUIRE(lines <= 2 + (unsigned)((now - start) /
						CTRL_REFUSAL_LOG_INTERVAL_NS));
		REQUIRE(ctrl_gate_timeout_ns((int)p[i], 256) >=
			ctrl_gate_timeout_ns((int)p[i] + 1, 256));
	}
	if (ctrl_refusal_summary(&r, now, 1, buf, sizeof(buf))) {
		unsigned s;

		REQUIRE(sscanf(buf, "refused %u more", &s) == 1);
		summed += s;
	}
	REQUIRE(alone + summed == total);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct splitter sp = { 0x9e3779b9u };
	const struct core_auth_key *k = NULL;

	if (!key.len) {
		static const char text[] = "fuzz-ctrl-key-0123456789abcdef!!";

		key.len = sizeof(text) - 1;
		memcpy(key.bytes, text, key.len);
	}
	if (size < 5)
		return 0;
	if (data[0] & 1)
		k = &key;
	sp.x ^= (uint32_t)data[1] | (uint32_t)data[2] << 8 |
		(uint32_t)data[3] << 16 | (uint32_t)data[4] << 24;
	if (!sp.x)
		sp.x = 1;
	data += 5;
	size -= 5;
	gate_untrusted(k, &sp, data, size);
	gate_honest(&sp, data, size);
	frames(data, size);
	refusal_log(data, size);
	return 0;
}
