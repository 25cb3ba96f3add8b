/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what a relay takes from whoever opens a channel to
 * it: the request, and the destination handle inside it, as the relay
 * reads them (relay_serve.c) before it dials anything.  fuzz_relay_wire
 * covers the message codec against any bytes; here the input is laid
 * over a well-formed request (after its magic), so that the length
 * matches and the fields themselves are what varies.  Any input: no
 * crash, no sanitizer report, and
 *  - a decoded request's counts stay within their arrays;
 *  - the handle's addresses are at most what a handle holds, each of a
 *    known family;
 *  - the cluster and route checks of relay_conf.c only ever return one
 *    of the addresses or routes they were given;
 *  - the request the relay sends onwards (this relay added to visited,
 *    the path's head taken off, the route text grown) encodes and
 *    decodes again.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "handle.h"
#include "netaddr.h"
#include "relay.h"
#include "relay_wire.h"

#include "fuzz_util.h"

const struct mesh_host *relay_host;	/* relay_conf.c's; not called here */

static struct relay_conf conf;
static struct mesh_addr members[2];
static struct relay_route routes[1];

static void setup(void)
{
	if (conf.nmembers)
		return;
	util_addr_parse("10.0.0.0", &members[0]);
	members[0].prefix_len = 8;
	util_addr_parse("fd00::", &members[1]);
	members[1].prefix_len = 64;
	util_addr_parse("10.1.0.0", &routes[0].prefix);
	routes[0].prefix.prefix_len = 16;
	routes[0].nvia = 1;
	snprintf(routes[0].via[0], RELAY_NAME_MAX, "g1");
	snprintf(conf.name, sizeof(conf.name), "g0");
	conf.members = members;
	conf.nmembers = 2;
	conf.routes = routes;
	conf.nroutes = 1;
}

/* A well-formed request to lay the input over. */
static size_t template(uint8_t *buf)
{
	struct core_handle h = { .nonce = 1, .naddrs = 1 };
	uint8_t handle[CORE_HANDLE_SIZE] = { 0 };
	static struct relay_msg m;

	memset(&m, 0, sizeof(m));
	m.type = RELAY_MSG_REQ;
	m.hops_left = 3;
	m.nvisited = 1;
	snprintf(m.visited[0], RELAY_NAME_MAX, "a0");
	util_addr_parse("10.1.0.5:40000", &h.addrs[0]);
	core_handle_encode(&h, handle);
	memcpy(m.handle, handle, RELAY_HANDLE_BYTES);
	snprintf(m.leg, sizeof(m.leg), "tcp-xdc");
	snprintf(m.origin, sizeof(m.origin), "a0");
	snprintf(m.text, sizeof(m.text), "a0");
	return relay_msg_encode(&m, buf);
}

static void check_request(struct relay_msg *m)
{
	static uint8_t buf[RELAY_MSG_MAX];
	static struct relay_msg again;
	uint8_t handle[CORE_HANDLE_SIZE] = { 0 };
	const struct relay_route *r;
	const struct mesh_addr *out;
	struct core_handle h;
	const char *why;
	size_t len;

	REQUIRE(m->nvisited >= 0 && m->nvisited <= RELAY_HOPS_MAX);
	REQUIRE(m->npath >= 0 && m->npath <= RELAY_HOPS_MAX);
	/* the handle travels without the caller's slot, as handle_addrs
	 * reads it */
	memcpy(handle, m->handle, RELAY_HANDLE_BYTES);
	if (core_handle_decode(handle, &h, &why))
		return;
	REQUIRE(h.naddrs >= 0 && h.naddrs <= CORE_HANDLE_ADDRS_MAX);
	for (int i = 0; i < h.naddrs; i++)
		REQUIRE(h.addrs[i].family == AF_INET ||
			h.addrs[i].family == AF_INET6);
	out = relay_conf_outsider(&conf, h.addrs, h.naddrs);
	REQUIRE(!out || (out >= h.addrs && out < h.addrs + h.naddrs));
	r = relay_conf_route(&conf, h.addrs, h.naddrs);
	REQUIRE(!r || r == &routes[0]);
	if (out || m->nvisited >= RELAY_HOPS_MAX || m->hops_left < 1)
		return;
	/* onwards, as read_request and relay_hop's send_first make it */
	snprintf(m->visited[m->nvisited++], RELAY_NAME_MAX, "%s", conf.name);
	len = strlen(m->text);
	snprintf(m->text + len, sizeof(m->text) - len, " -(%s)-> %s", m->leg,
		 conf.name);
	m->hops_left--;
	if (m->npath) {
		memmove(m->path[0], m->path[1],
			sizeof(m->path[0]) * (size_t)(m->npath - 1));
		m->npath--;
	}
	len = relay_msg_encode(m, buf);
	REQUIRE(!relay_msg_decode(buf, len, &again));
	REQUIRE(again.nvisited == m->nvisited && again.npath == m->npath);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[RELAY_MSG_MAX];
	static struct relay_msg m;
	size_t len;

	setup();
	len = template(buf);
	/* after the magic: a message that is at least a relay message */
	if (size > len - 4)
		size = len - 4;
	memcpy(buf + 4, data, size);
	if (relay_msg_decode(buf, len, &m) || m.type != RELAY_MSG_REQ)
		return 0;
	check_request(&m);
	return 0;
}
