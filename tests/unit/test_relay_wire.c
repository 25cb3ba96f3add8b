/* SPDX-License-Identifier: MIT */
/*
 * What the relay's resuming added to its wire (relay_wire.c): the notes a
 * route's hops send each other once it is up (ACK, END, UP, BYE, KEEP,
 * GONE), the route's key, attempt and the destination's position in the
 * setup messages, and what a peer may send instead: cut short, too long, a
 * type or flag this version does not know, bits that must be zero.  And
 * the stream indices an attempt owns on the destination's rejoin, the
 * explicit routes one destination has as alternatives, and which
 * destinations are inside the cluster (relay_conf.c).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "netaddr.h"
#include "relay.h"
#include "relay_vctrl.h"
#include "relay_wire.h"

const struct mesh_host *relay_host;	/* relay_conf.c's; not called here */

static void notes(void)
{
	static const enum relay_note_type types[] = {
		RELAY_NOTE_ACK, RELAY_NOTE_END, RELAY_NOTE_UP, RELAY_NOTE_BYE,
		RELAY_NOTE_KEEP, RELAY_NOTE_GONE };
	uint8_t buf[RELAY_NOTE_SIZE + 1], bad[RELAY_NOTE_SIZE];
	struct relay_note n, got;
	uint32_t w;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		/* a position past 2^32: messages are counted in 64 bits */
		n = (struct relay_note){ types[i], (1ull << 40) + 5 + i };
		CHECK(relay_note_encode(&n, buf) == RELAY_NOTE_SIZE);
		CHECK(!relay_note_decode(buf, RELAY_NOTE_SIZE, &got));
		CHECK(got.type == n.type && got.seq == n.seq);
	}
	n = (struct relay_note){ RELAY_NOTE_ACK, 7 };
	relay_note_encode(&n, buf);
	/* cut short, or with a byte more */
	CHECK_STR(relay_note_decode(buf, RELAY_NOTE_SIZE - 1, &got),
		  "a note of the wrong length");
	CHECK_STR(relay_note_decode(buf, RELAY_NOTE_SIZE + 1, &got),
		  "a note of the wrong length");
	CHECK_STR(relay_note_decode(buf, 0, &got), "a note of the wrong length");
	/* a setup message where a note belongs */
	memcpy(bad, buf, sizeof(bad));
	bad[3] ^= 1;
	CHECK_STR(relay_note_decode(bad, sizeof(bad), &got), "not a relay note");
	/* the type word's low half must be zero */
	memcpy(bad, buf, sizeof(bad));
	bad[7] = 1;
	CHECK_STR(relay_note_decode(bad, sizeof(bad), &got),
		  "a note with bits set that must be zero");
	/* types this version does not know */
	for (uint32_t t = 0; t < 8; t += 7) {
		memcpy(bad, buf, sizeof(bad));
		w = htonl(t << 16);
		memcpy(bad + 4, &w, 4);
		CHECK_STR(relay_note_decode(bad, sizeof(bad), &got),
			  "an unknown note type");
	}
	w = htonl(0xffffu << 16);
	memcpy(bad + 4, &w, 4);
	CHECK(relay_note_decode(bad, sizeof(bad), &got) != NULL);
}

static void messages(void)
{
	static uint8_t buf[RELAY_MSG_MAX];
	static struct relay_msg m, got;
	struct relay_note n;
	size_t len;

	memset(&m, 0, sizeof(m));
	m.type = RELAY_MSG_REQ;
	m.flags = RELAY_FLAG_RESUMABLE | RELAY_FLAG_RESUME;
	m.key = 0x8877665544332211ull;
	m.pos = (1ull << 33) + 9;
	m.attempt = 0xfffffffeu;
	m.hops_left = 3;
	snprintf(m.origin, sizeof(m.origin), "a0");
	len = relay_msg_encode(&m, buf);
	CHECK(len <= RELAY_MSG_MAX);
	CHECK(!relay_msg_decode(buf, len, &got));
	CHECK(got.key == m.key && got.pos == m.pos &&
	      got.attempt == m.attempt && got.flags == m.flags &&
	      got.hops_left == 3 && !strcmp(got.origin, "a0"));
	/* every flag this version knows, and only those */
	m.flags = RELAY_FLAGS_KNOWN;
	len = relay_msg_encode(&m, buf);
	CHECK(!relay_msg_decode(buf, len, &got) &&
	      got.flags == RELAY_FLAGS_KNOWN);
	m.flags = RELAY_FLAGS_KNOWN + 1;
	len = relay_msg_encode(&m, buf);
	CHECK_STR(relay_msg_decode(buf, len, &got),
		  "a flag this version does not know");
	/* a note where a setup message belongs, and the other way round */
	m.flags = 0;
	len = relay_msg_encode(&m, buf);
	CHECK_STR(relay_msg_decode(buf, RELAY_NOTE_SIZE, &got),
		  "a message of the wrong length");
	CHECK_STR(relay_note_decode(buf, len, &n), "a note of the wrong length");
	CHECK_STR(relay_msg_decode(buf, len - 1, &got),
		  "a message of the wrong length");
}

static void streams(void)
{
	/* attempt 0 is the first route; an attempt's indices never meet
	 * another's within RELAY_EPOCHS attempts, and all stay under the
	 * core's 1024 */
	CHECK(relay_stream_index(0, 0) == 0);
	CHECK(relay_stream_index(1, 3) == RELAY_EPOCH_STREAMS + 3);
	CHECK(relay_stream_index(RELAY_EPOCHS + 1, 3) == relay_stream_index(1, 3));
	CHECK(relay_stream_index(RELAY_EPOCHS - 1, RELAY_EPOCH_STREAMS - 1) <
	      1024);
	for (int a = 0; a < 3 * RELAY_EPOCHS; a++)
		CHECK(relay_stream_epoch(relay_stream_index(a, 5)) ==
		      a % RELAY_EPOCHS);
}

static void alternatives(void)
{
	struct relay_route routes[3];
	struct relay_conf c = { .routes = routes, .nroutes = 3 };
	const struct relay_route *got[4];
	struct mesh_addr d[2];

	memset(routes, 0, sizeof(routes));
	util_addr_parse("10.1.0.0", &routes[0].prefix);
	routes[0].prefix.prefix_len = 16;
	snprintf(routes[0].via[routes[0].nvia++], RELAY_NAME_MAX, "g0");
	util_addr_parse("10.2.0.0", &routes[1].prefix);
	routes[1].prefix.prefix_len = 16;
	snprintf(routes[1].via[routes[1].nvia++], RELAY_NAME_MAX, "g9");
	routes[2] = routes[0];
	snprintf(routes[2].via[0], RELAY_NAME_MAX, "g0b");
	util_addr_parse("10.1.3.4", &d[0]);
	util_addr_parse("10.2.3.4", &d[1]);
	/* both routes for 10.1/16, the config's order; the first alone */
	CHECK(relay_conf_routes(&c, d, 1, got, 4) == 2 &&
	      got[0] == &routes[0] && got[1] == &routes[2]);
	CHECK(relay_conf_route(&c, d, 1) == &routes[0]);
	/* a destination with both addresses: each route once */
	CHECK(relay_conf_routes(&c, d, 2, got, 4) == 3);
	CHECK(relay_conf_routes(&c, d, 2, got, 1) == 1 && got[0] == &routes[0]);
	CHECK(relay_conf_routes(&c, d + 1, 1, got, 4) == 1 &&
	      got[0] == &routes[1]);
	util_addr_parse("10.3.0.1", &d[0]);
	CHECK(relay_conf_routes(&c, d, 1, got, 4) == 0 &&
	      !relay_conf_route(&c, d, 1));
}

/* Whether the destination advertising each of addrs (a ' '-separated
 * list) is inside the cluster of members (another). */
static bool inside_cluster(const char *members, const char *addrs)
{
	struct mesh_addr m[8], a[8];
	struct relay_conf c = { .members = m };
	char buf[256], *save = NULL;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", members);
	for (char *w = strtok_r(buf, " ", &save); w;
	     w = strtok_r(NULL, " ", &save)) {
		CHECK(!util_addr_parse(w, &m[c.nmembers]));
		if (!strchr(w, '/'))
			m[c.nmembers].prefix_len =
				m[c.nmembers].family == AF_INET ? 32 : 128;
		c.nmembers++;
	}
	snprintf(buf, sizeof(buf), "%s", addrs);
	for (char *w = strtok_r(buf, " ", &save); w;
	     w = strtok_r(NULL, " ", &save))
		CHECK(!util_addr_parse(w, &a[n++]));
	return !relay_conf_outsider(&c, a, n);
}

static void members(void)
{
	CHECK(inside_cluster("10.0.0.0/8", "10.1.2.3:40000"));
	CHECK(!inside_cluster("10.0.0.0/8", "10.1.2.3:40000 11.0.0.1:40000"));
	/* a loopback handle names the host twice: 127.0.0.1 and ::1 are one */
	CHECK(inside_cluster("127.0.0.0/8",
			     "127.0.0.3:40000 127.0.0.1:40000 [::1]:40000"));
	CHECK(inside_cluster("::1", "127.0.0.1:40000 [::1]:40000"));
	CHECK(inside_cluster("127.0.0.1", "[::1]:40000"));
	/* and no more: not another loopback address, nor anything else */
	CHECK(!inside_cluster("127.0.0.2/32", "[::1]:40000"));
	CHECK(!inside_cluster("::1", "127.0.0.2:40000"));
	CHECK(!inside_cluster("127.0.0.0/8", "[::2]:40000"));
	CHECK(!inside_cluster("127.0.0.0/8", "[::ffff:127.0.0.1]:40000"));
	CHECK(!inside_cluster("10.0.0.0/8", "[::1]:40000"));
}

int main(void)
{
	notes();
	messages();
	streams();
	alternatives();
	members();
	return failures ? 1 : 0;
}
