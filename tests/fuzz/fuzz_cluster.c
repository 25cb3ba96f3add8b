/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what meshinfo --cluster reads from its peers
 * (tools/meshinfo/cluster_wire.c): rank 0's greeting of a joining rank,
 * a joining rank's reading of rank 0's answers, and the fixed-size
 * messages (commands, steps, a host's facts).  Any input: no crash, no
 * sanitizer report, and
 *  - the greeting takes no more than it asked for, claims only a rank of
 *    the job, never passes a key's check without the key, and hands over
 *    facts of the claimed rank whose strings are terminated and clean;
 *  - a joining rank never takes rank 0's answers as proof of a key it
 *    cannot have computed;
 *  - a decoded message has its counts within their arrays, its strings
 *    terminated and free of control bytes, its times finite, and encodes
 *    to bytes that decode to the same message;
 *  - an honest exchange, one bit of it flipped in transit where the input
 *    says: with the key, rank 0 claims no rank but the one the joiner
 *    asked for; with no bit flipped, both ends finish with the facts.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cluster.h"

#include "fuzz_util.h"

#define KEY_TEXT "fuzz-cluster-key-0123456789abcdef"
static const struct core_auth_key key = { sizeof(KEY_TEXT) - 1, KEY_TEXT };

static void clean_str(const char *s, size_t cap)
{
	REQUIRE(memchr(s, '\0', cap));
	for (; *s; s++)
		REQUIRE((unsigned char)*s >= 0x20 && *s != 0x7f);
}

static void check_host(const struct cl_host *h)
{
	REQUIRE(h->nrails >= 0 && h->nrails <= CL_MAX_RAILS);
	clean_str(h->host, sizeof(h->host));
	clean_str(h->config_path, sizeof(h->config_path));
	clean_str(h->config_sha, sizeof(h->config_sha));
	clean_str(h->plugin_path, sizeof(h->plugin_path));
	clean_str(h->plugin_sha, sizeof(h->plugin_sha));
	clean_str(h->net_name, sizeof(h->net_name));
	clean_str(h->error, sizeof(h->error));
	for (int i = 0; i < h->nrails; i++)
		clean_str(h->rails[i].name, sizeof(h->rails[i].name));
	/* the window's figures multiply without overflow */
	REQUIRE(h->xdc.streams >= 0 && h->xdc.streams <= CL_XDC_STREAMS_MAX);
	REQUIRE(h->xdc.streams_max >= 0 &&
		h->xdc.streams_max <= CL_XDC_STREAMS_MAX);
	REQUIRE(h->xdc.send_max <= CL_XDC_BYTES_MAX &&
		h->xdc.recv_max <= CL_XDC_BYTES_MAX &&
		h->xdc.keep_max <= CL_XDC_BYTES_MAX);
}

/* Rank 0 greets whatever the input says, split anywhere. */
static void greet_untrusted(const struct core_auth_key *k,
			    struct splitter *sp, int size, const uint8_t *p,
			    size_t n)
{
	static struct cl_greet g;
	int rc = -EAGAIN;

	cl_greet_start(&g, size, k);
	while (n && (rc == -EAGAIN || rc == CL_GREET_CLAIM)) {
		size_t want = cl_greet_want(&g), len, used;

		if (rc == CL_GREET_CLAIM) {
			/* no MAC is made without the key */
			REQUIRE(!k);
			REQUIRE(g.rank >= 1 && g.rank < size);
			rc = cl_greet_verdict(&g, next(sp, 2));
			REQUIRE(rc == 0 || rc == -EEXIST);
			rc = rc ? rc : -EAGAIN;
			continue;
		}
		REQUIRE(want > 0 && want <= sizeof(g.in));
		len = 1 + next(sp, want < n ? want : n);
		rc = cl_greet_feed(&g, p, len, &used);
		REQUIRE(used == len);
		REQUIRE(g.out_len <= sizeof(g.out));
		cl_greet_sent(&g, next(sp, g.out_len + 1));
		p += len;
		n -= len;
	}
	if (rc == 0) {
		REQUIRE(!k);
		REQUIRE(g.host.rank == g.rank && g.rank >= 1 && g.rank < size);
		check_host(&g.host);
	} else if (rc != -EAGAIN && rc != CL_GREET_CLAIM) {
		REQUIRE(rc < 0 && g.why);
	}
}

/* A joining rank reads the input as rank 0's answers. */
static void join_untrusted(const struct core_auth_key *k, const uint8_t *p,
			   size_t n)
{
	struct cl_join j;
	int rc = CL_JOIN_SEND;

	cl_join_start(&j, 1, 3, k);
	for (; n >= CL_RDV_BYTES && rc == CL_JOIN_SEND;
	     p += CL_RDV_BYTES, n -= CL_RDV_BYTES) {
		rc = cl_join_answer(&j, p);
		REQUIRE(rc == 0 || rc == CL_JOIN_SEND || (rc < 0 && j.why));
		/* a challenge is answered; a proof cannot be forged */
		REQUIRE(rc != CL_JOIN_SEND || k);
		REQUIRE(rc != 0 || !k);
	}
}

/* The bootstrap check's batches: what decodes lies within total and
 * encodes back to itself. */
static void boot_batches(const uint8_t msg[CL_MSG_BYTES], int total)
{
	static struct cl_boot_target t[CL_BOOT_TARGETS], t2[CL_BOOT_TARGETS];
	static struct cl_boot_result r[CL_BOOT_RESULTS], r2[CL_BOOT_RESULTS];
	static uint8_t again[CL_MSG_BYTES];
	int first, n, first2, n2;

	if (!cl_decode_boot_targets(msg, total, t, &first, &n)) {
		REQUIRE(first >= 0 && n >= 0 && n <= CL_BOOT_TARGETS &&
			n <= total - first);
		for (int i = 0; i < n; i++) {
			clean_str(t[i].addr, sizeof(t[i].addr));
			REQUIRE(t[i].rank == first + i);
			REQUIRE(t[i].port >= 0 && t[i].port <= 65535);
		}
		REQUIRE(!cl_encode_boot_targets(t, first, n, again) &&
			!cl_decode_boot_targets(again, total, t2, &first2,
						&n2));
		REQUIRE(first2 == first && n2 == n);
		for (int i = 0; i < n; i++)
			REQUIRE(!strcmp(t[i].addr, t2[i].addr) &&
				t[i].port == t2[i].port &&
				t[i].token == t2[i].token);
	}
	if (!cl_decode_boot_results(msg, total, r, &first, &n)) {
		REQUIRE(first >= 0 && n >= 0 && n <= CL_BOOT_RESULTS &&
			n <= total - first);
		for (int i = 0; i < n; i++) {
			clean_str(r[i].detail, sizeof(r[i].detail));
			REQUIRE(r[i].to == first + i && r[i].status >= 0 &&
				r[i].status < CL_BOOT_NSTATUS);
			REQUIRE(isfinite(r[i].ms) && r[i].ms >= 0);
		}
		REQUIRE(!cl_encode_boot_results(r, first, n, again) &&
			!cl_decode_boot_results(again, total, r2, &first2,
						&n2));
		REQUIRE(first2 == first && n2 == n);
		for (int i = 0; i < n; i++)
			REQUIRE(r[i].status == r2[i].status &&
				r[i].ms == r2[i].ms &&
				!strcmp(r[i].detail, r2[i].detail));
	}
}

static void decoders(const uint8_t *p, size_t n)
{
	static uint8_t msg[CL_MSG_BYTES], again[CL_MSG_BYTES];
	static struct cl_host h, h2;
	static struct cl_step s, s2;
	struct cl_cmd c, c2;

	memset(msg, 0, sizeof(msg));
	memcpy(msg, p, n < sizeof(msg) ? n : sizeof(msg));
	if (!cl_decode_host(msg, &h)) {
		check_host(&h);
		REQUIRE(!cl_encode_host(&h, again) && !cl_decode_host(again, &h2));
		/* both zeroed first by the decoder: padding compares too */
		REQUIRE(!memcmp(&h, &h2, sizeof(h)));
	}
	if (!cl_decode_step(msg, &s)) {
		REQUIRE(isfinite(s.elapsed) && s.elapsed >= 0);
		REQUIRE(isfinite(s.overhead) && s.overhead >= 0);
		REQUIRE(isfinite(s.min_round) && s.min_round >= 0);
		REQUIRE(s.path.nrelays >= 0 && s.path.nrelays <= CL_MAX_RELAYS);
		REQUIRE(s.path.ndevices >= 0 &&
			s.path.ndevices <= CL_MAX_DEVICES);
		clean_str(s.path.reason, sizeof(s.path.reason));
		clean_str(s.recv_reason, sizeof(s.recv_reason));
		for (int i = 0; i < s.path.nrelays; i++)
			clean_str(s.path.relay_addrs[i],
				  sizeof(s.path.relay_addrs[i]));
		REQUIRE(!cl_encode_step(&s, again) && !cl_decode_step(again, &s2));
		REQUIRE(!strcmp(s.path.reason, s2.path.reason) &&
			s.path.nrelays == s2.path.nrelays &&
			s.elapsed == s2.elapsed && s.rc == s2.rc);
	}
	/* the job's size from the input's last byte: 1..256 hosts */
	boot_batches(msg, n ? p[n - 1] + 1 : 1);
	if (!cl_decode_cmd(msg, &c)) {
		REQUIRE(!cl_encode_cmd(&c, again) && !cl_decode_cmd(again, &c2));
		REQUIRE(c.kind == c2.kind && c.rail == c2.rail &&
			c.peer == c2.peer && c.status == c2.status &&
			c.sender == c2.sender && c.size == c2.size &&
			c.iters == c2.iters &&
			!memcmp(c.handle, c2.handle, sizeof(c.handle)));
	}
}

/* Frames a joiner's message as the bootstrap does: into buf, its length. */
static size_t frame(uint8_t *buf, enum perf_msg type, const uint8_t *body,
		    size_t len)
{
	oob_hdr_put(buf, type, len);
	memcpy(buf + OOB_HDR_BYTES, body, len);
	return OOB_HDR_BYTES + len;
}

/* Flips bit `at` of buf[0..len) when it falls there (true), else counts
 * it down past these bytes. */
static bool tamper(uint8_t *buf, size_t len, size_t *at)
{
	if (*at >= 8 * len) {
		*at = *at == SIZE_MAX ? SIZE_MAX : *at - 8 * len;
		return false;
	}
	buf[*at / 8] ^= (uint8_t)(1u << (*at % 8));
	*at = SIZE_MAX;
	return true;
}

/* An honest joiner and rank 0, one bit of their exchange flipped. */
static void honest(const struct core_auth_key *k, struct splitter *sp,
		   size_t flip)
{
	static struct cl_greet g;
	static struct cl_host me;
	static uint8_t buf[OOB_HDR_BYTES + CL_MSG_BYTES], body[CL_MSG_BYTES];
	bool flipped = false;
	int rank = 1 + (int)next(sp, 6), grc = -EAGAIN, jrc = CL_JOIN_SEND;
	struct cl_join j;
	size_t len, used;

	memset(&me, 0, sizeof(me));
	me.rank = rank;
	me.nrails = 1;
	snprintf(me.host, sizeof(me.host), "host%d", rank);
	cl_greet_start(&g, 7, k);
	cl_join_start(&j, rank, 7, k);
	while (jrc == CL_JOIN_SEND && grc == -EAGAIN) {
		len = frame(buf, PERF_MSG_HELLO, j.out, sizeof(j.out));
		flipped |= tamper(buf, len, &flip);
		grc = cl_greet_feed(&g, buf, len, &used);
		if (grc == CL_GREET_CLAIM) {
			if (k)
				REQUIRE(g.rank == rank);
			grc = cl_greet_verdict(&g, false);
			grc = grc ? grc : -EAGAIN;
		}
		if (!g.out_len)
			break;
		/* rank 0's answers, one at a time, each checked as framed */
		len = g.out_len;
		memcpy(buf, g.out, len);
		cl_greet_sent(&g, len);
		flipped |= tamper(buf, len, &flip);
		if (!oob_hdr_ok(buf, PERF_MSG_HELLO_ACK, CL_RDV_BYTES))
			return;
		jrc = cl_join_answer(&j, buf + OOB_HDR_BYTES);
	}
	if (jrc != 0 || grc != -EAGAIN) {
		REQUIRE(flipped);
		return;
	}
	REQUIRE(!cl_encode_host(&me, body));
	len = frame(buf, PERF_MSG_RESULT, body, sizeof(body));
	grc = cl_greet_feed(&g, buf, len, &used);
	/* unkeyed, a flipped rank is claimed and then its facts refused */
	REQUIRE(grc != 0 || g.host.rank == g.rank);
	if (!flipped)
		REQUIRE(grc == 0 && g.rank == rank &&
			!strcmp(g.host.host, me.host));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct core_auth_key *k;
	struct splitter sp;
	size_t flip;

	if (size < 7)
		return 0;
	k = data[0] & 1 ? &key : NULL;
	/* split points from data[1..4]; xorshift must not start at 0 */
	memcpy(&sp.x, data + 1, sizeof(sp.x));
	sp.x |= 1;
	/* bit 1 of data[0]: an honest exchange with no bit flipped */
	flip = data[0] & 2 ? SIZE_MAX : (size_t)data[5] << 8 | data[6];
	data += 7;
	size -= 7;
	greet_untrusted(k, &sp, 2 + (int)next(&sp, 8), data, size);
	join_untrusted(k, data, size);
	decoders(data, size);
	honest(k, &sp, flip);
	return 0;
}
