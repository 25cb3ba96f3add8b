/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what the relay module reads from its control
 * channels (REQ, RESP, LAST, READY, and the notes of a route that is up:
 * ACK, END, UP, BYE, KEEP, GONE) and the headers of relayed messages.
 * Any input: no crash, no sanitizer report, and
 *  - an accepted message has a known type, hop counts within the limit, a
 *    status that is an errno, only flags this version knows, every string
 *    NUL-terminated in its field, and encodes back to bytes that decode
 *    to the same message (the route's key, attempt and position too);
 *  - an accepted note is 16 bytes of a known type and encodes back to
 *    the same bytes;
 *  - a message header never announces more chunks than its size can fill;
 *  - a route's text (any bytes) splits into at most the hops asked for,
 *    each field NUL-terminated.
 */
#include <stdint.h>
#include <string.h>

#include "relay_wire.h"

#include "fuzz_util.h"

static void check_msg(const uint8_t *data, size_t size)
{
	static uint8_t buf[RELAY_MSG_MAX];
	static struct relay_msg m, again;
	size_t len;

	if (relay_msg_decode(data, size, &m))
		return;
	REQUIRE(m.type >= RELAY_MSG_REQ && m.type <= RELAY_MSG_READY);
	REQUIRE(m.nvisited <= RELAY_HOPS_MAX && m.npath <= RELAY_HOPS_MAX);
	REQUIRE(m.hops_left <= RELAY_HOPS_MAX);
	REQUIRE(m.status >= 0 && m.status <= 4095);
	REQUIRE(!(m.flags & ~RELAY_FLAGS_KNOWN));
	REQUIRE(memchr(m.leg, '\0', sizeof(m.leg)));
	REQUIRE(memchr(m.origin, '\0', sizeof(m.origin)));
	REQUIRE(memchr(m.text, '\0', sizeof(m.text)));
	for (int i = 0; i < RELAY_HOPS_MAX; i++)
		REQUIRE(memchr(m.visited[i], '\0', RELAY_NAME_MAX) &&
			memchr(m.path[i], '\0', RELAY_NAME_MAX));
	len = relay_msg_encode(&m, buf);
	REQUIRE(len == size && len <= RELAY_MSG_MAX);
	REQUIRE(!relay_msg_decode(buf, len, &again));
	REQUIRE(again.type == m.type && again.hops_left == m.hops_left &&
		again.status == m.status && again.flags == m.flags &&
		again.key == m.key && again.pos == m.pos &&
		again.attempt == m.attempt &&
		!memcmp(again.handle, m.handle, sizeof(m.handle)) &&
		!strcmp(again.text, m.text) && !strcmp(again.leg, m.leg));
}

static void check_note(const uint8_t *data, size_t size)
{
	uint8_t buf[RELAY_NOTE_SIZE];
	struct relay_note n, again;

	if (relay_note_decode(data, size, &n))
		return;
	REQUIRE(size == RELAY_NOTE_SIZE);
	REQUIRE(n.type >= RELAY_NOTE_ACK && n.type <= RELAY_NOTE_GONE);
	REQUIRE(relay_note_encode(&n, buf) == RELAY_NOTE_SIZE);
	REQUIRE(!memcmp(buf, data, RELAY_NOTE_SIZE));
	REQUIRE(!relay_note_decode(buf, sizeof(buf), &again) &&
		again.type == n.type && again.seq == n.seq);
}

static void check_route(const uint8_t *data, size_t size)
{
	static char text[RELAY_MSG_MAX + 1];
	static struct mesh_conn_hop hops[MESH_CONN_HOPS_MAX];
	int n;

	if (size > RELAY_MSG_MAX)
		size = RELAY_MSG_MAX;
	memcpy(text, data, size);
	text[size] = '\0';
	n = relay_route_hops(text, hops, MESH_CONN_HOPS_MAX);
	REQUIRE(n >= 0 && n <= MESH_CONN_HOPS_MAX);
	for (int i = 0; i < n; i++)
		REQUIRE(memchr(hops[i].name, '\0', sizeof(hops[i].name)) &&
			memchr(hops[i].module, '\0', sizeof(hops[i].module)) &&
			memchr(hops[i].addr, '\0', sizeof(hops[i].addr)));
}

static void check_hdr(const uint8_t *data, size_t size)
{
	struct relay_hdr h;
	uint64_t n;

	if (size < sizeof(h))
		return;
	memcpy(&h, data, sizeof(h));
	n = relay_hdr_chunks(&h);
	if (!n)
		return;
	/* the last chunk holds at least a byte, none runs past the size */
	REQUIRE(h.chunk);
	REQUIRE((__uint128_t)(n - 1) * h.chunk < h.size);
	REQUIRE((__uint128_t)n * h.chunk >= h.size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_msg(data, size);
	check_note(data, size);
	check_hdr(data, size);
	check_route(data, size);
	return 0;
}
