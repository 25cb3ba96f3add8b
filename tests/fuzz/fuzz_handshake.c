/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for everything that parses bytes from the network before
 * a peer is authenticated: the auth engine (both roles), the connection
 * hello and the listen handle.
 *
 * Input: 4 bytes that seed the split points, then the payload.  Besides
 * "no crash, no sanitizer report" it checks properties that must hold for
 * any input:
 *  - neither role ever accepts fuzzed bytes (that would be a forged MAC
 *    or a parser that lets garbage through);
 *  - -EAGAIN means every byte offered was taken, an error is sticky;
 *  - an honest handshake, split anywhere and followed by connection data,
 *    succeeds and consumes exactly its own bytes (or, with mismatched
 *    keys, fails with -EACCES on the listener);
 *  - a decoded handle encodes back to a handle that decodes the same.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ctrl.h"
#include "handle.h"

#include "fuzz_util.h"

static struct core_auth_key key, other_key;

static void init_keys(void)
{
	static const char k[] = "fuzz-test-key-0123456789abcdef!!";

	key.len = sizeof(k) - 1;
	memcpy(key.bytes, k, key.len);
	other_key = key;
	other_key.bytes[0] ^= 1;
}


/* Feeds untrusted bytes to one engine, piece by piece. */
static void feed_untrusted(enum core_auth_role role, struct splitter *sp,
			   const uint8_t *hello, const uint8_t *p, size_t n)
{
	struct core_auth a;
	int err = 0;

	core_auth_start(&a, role, &key, hello);
	REQUIRE(a.out_len == (role == CORE_AUTH_LISTENER ? 20u : 0u));
	while (n) {
		size_t len = 1 + next(sp, n < 80 ? n : 80), used = 0;
		int rc = core_auth_feed(&a, p, len, &used);

		REQUIRE(rc != 0);
		REQUIRE(rc == -EAGAIN || rc == -EACCES || rc == -EPROTO);
		REQUIRE(used <= len);
		REQUIRE(a.out_len <= sizeof(a.out));
		if (err) {
			REQUIRE(rc == err && used == 0);
		} else if (rc == -EAGAIN) {
			REQUIRE(used == len);
		} else {
			err = rc;
			REQUIRE(a.out_len == 0);
		}
		/* A partial send now and then. */
		core_auth_sent(&a, next(sp, a.out_len + 1));
		p += len;
		n -= len;
	}
}

/* Moves `from`'s queued bytes to `to` in input-chosen pieces, followed by
 * `extra` bytes that belong to the connection after the handshake. */
static int deliver(struct core_auth *from, struct core_auth *to,
		   struct splitter *sp, const uint8_t *extra, size_t nextra)
{
	uint8_t buf[64 + 128];
	size_t n = 0, off = 0, msg;
	int rc = -EAGAIN;

	while (from->out_len) {
		size_t k = 1 + next(sp, from->out_len);

		memcpy(buf + n, from->out, k);
		core_auth_sent(from, k);
		n += k;
	}
	msg = n;
	if (nextra)
		memcpy(buf + n, extra, nextra);
	n += nextra;
	while (off < n) {
		size_t len = 1 + next(sp, n - off), used;

		rc = core_auth_feed(to, buf + off, len, &used);
		if (rc == -EAGAIN) {
			REQUIRE(used == len);
		} else {
			REQUIRE(off + used <= msg);
			if (rc == 0)
				REQUIRE(off + used == msg);
			return rc;
		}
		off += len;
	}
	return rc;
}

static void honest(struct splitter *sp, const uint8_t *hello,
		   const uint8_t *extra, size_t nextra)
{
	int mismatch = next(sp, 8) == 0;
	struct core_auth l, c;
	int rc;

	core_auth_start(&l, CORE_AUTH_LISTENER, &key, hello);
	core_auth_start(&c, CORE_AUTH_CONNECTOR, mismatch ? &other_key : &key,
			hello);
	/* The listener sends nothing after its challenge until answered. */
	REQUIRE(deliver(&l, &c, sp, NULL, 0) == -EAGAIN);
	REQUIRE(c.out_len == 52);
	rc = deliver(&c, &l, sp, extra, nextra);
	if (mismatch) {
		REQUIRE(rc == -EACCES);
		REQUIRE(l.out_len == 0);
		return;
	}
	REQUIRE(rc == 0);
	REQUIRE(l.out_len == 36);
	REQUIRE(deliver(&l, &c, sp, extra, nextra) == 0);
}

static void handle_roundtrip(const uint8_t *p, size_t n)
{
	uint8_t buf[CORE_HANDLE_SIZE] = { 0 }, again[CORE_HANDLE_SIZE];
	struct core_handle h, h2;
	const char *why = NULL;

	memcpy(buf, p, n < sizeof(buf) ? n : sizeof(buf));
	if (core_handle_decode(buf, &h, &why)) {
		REQUIRE(why != NULL);
		return;
	}
	REQUIRE(h.naddrs >= 1 && h.naddrs <= CORE_HANDLE_ADDRS_MAX);
	REQUIRE(h.nmembers >= 0 && h.nmembers <= CORE_HANDLE_MEMBERS_MAX);
	REQUIRE(core_handle_encode(&h, again) == h.naddrs);
	REQUIRE(core_handle_decode(again, &h2, &why) == 0);
	REQUIRE(!memcmp(&h, &h2, sizeof(h)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t hello[CORE_AUTH_HELLO_SIZE] = { 0 };
	struct splitter sp = { 0x9e3779b9u };
	const uint8_t *p = data;
	size_t n = size;

	if (!key.len)
		init_keys();
	if (n >= 4) {
		sp.x ^= (uint32_t)p[0] | (uint32_t)p[1] << 8 |
			(uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
		if (!sp.x)
			sp.x = 1;
		p += 4;
		n -= 4;
	}
	memcpy(hello, p, n < sizeof(hello) ? n : sizeof(hello));

	(void)core_ctrl_hello_check(p, n);
	(void)core_ctrl_hello_check(hello, sizeof(hello));
	handle_roundtrip(p, n);
	feed_untrusted(CORE_AUTH_LISTENER, &sp, hello, p, n);
	feed_untrusted(CORE_AUTH_CONNECTOR, &sp, hello, p, n);
	honest(&sp, hello, p, n < 128 ? n : 128);
	return 0;
}
