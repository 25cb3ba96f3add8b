/* SPDX-License-Identifier: MIT */
#include "handle.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#define ADDRS_OFFSET 32

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static size_t addr_wire_len(const struct mesh_addr *a)
{
	return 4 + (a->family == AF_INET ? 4 : 16);
}

int core_handle_encode(const struct core_handle *h, uint8_t *buf)
{
	size_t off = ADDRS_OFFSET;
	int n = 0;

	/* members are never dropped: the peer would choose among fewer */
	if (h->nmembers < 0 || h->nmembers > CORE_HANDLE_MEMBERS_MAX)
		return -E2BIG;
	memset(buf, 0, CORE_HANDLE_SIZE);
	put64(buf, CORE_HANDLE_MAGIC);	/* low 4 bytes: magic */
	buf[4] = CORE_HANDLE_VERSION;
	buf[6] = (uint8_t)h->nmembers;
	put64(buf + 8, h->nonce);
	put64(buf + 16, h->fabric_id);
	for (int i = 0; i < h->nmembers; i++)
		put16(buf + 24 + 2 * i, h->members[i]);
	for (int i = 0; i < h->naddrs && i < CORE_HANDLE_ADDRS_MAX; i++) {
		const struct mesh_addr *a = &h->addrs[i];
		size_t len = addr_wire_len(a);

		if (off + len > CORE_HANDLE_STATE_OFFSET)
			continue;	/* an IPv4 address may still fit */
		buf[off] = a->family == AF_INET ? 4 : 6;
		buf[off + 1] = a->prefix_len;
		buf[off + 2] = (uint8_t)(a->port >> 8);
		buf[off + 3] = (uint8_t)a->port;
		memcpy(buf + off + 4, a->ip, len - 4);
		off += len;
		n++;
	}
	buf[5] = (uint8_t)n;
	return n ? n : -E2BIG;
}

int core_handle_decode(const uint8_t *buf, struct core_handle *h,
		       const char **why)
{
	size_t off = ADDRS_OFFSET;

	memset(h, 0, sizeof(*h));
	if ((uint32_t)get64(buf) != CORE_HANDLE_MAGIC) {
		*why = "bad magic (not a nccl-mesh handle)";
		return -EPROTO;
	}
	if (buf[4] != CORE_HANDLE_VERSION) {
		*why = "unsupported handle version (mixed nccl-mesh versions?)";
		return -EPROTO;
	}
	if (buf[5] == 0 || buf[5] > CORE_HANDLE_ADDRS_MAX ||
	    buf[6] > CORE_HANDLE_MEMBERS_MAX) {
		*why = "address or module count out of range";
		return -EPROTO;
	}
	h->nonce = get64(buf + 8);
	h->fabric_id = get64(buf + 16);
	h->nmembers = buf[6];
	for (int i = 0; i < h->nmembers; i++)
		h->members[i] = get16(buf + 24 + 2 * i);
	for (int i = 0; i < buf[5]; i++) {
		struct mesh_addr *a = &h->addrs[i];
		size_t len;

		/* the count may promise more than the bytes hold: the
		 * family byte of one more would be the slot's */
		if (off + 4 > CORE_HANDLE_STATE_OFFSET) {
			*why = "addresses overrun the handle";
			return -EPROTO;
		}
		if (buf[off] != 4 && buf[off] != 6) {
			*why = "bad address family";
			return -EPROTO;
		}
		a->family = buf[off] == 4 ? AF_INET : AF_INET6;
		len = addr_wire_len(a);
		if (off + len > CORE_HANDLE_STATE_OFFSET) {
			*why = "addresses overrun the handle";
			return -EPROTO;
		}
		a->prefix_len = buf[off + 1];
		a->port = (uint16_t)(buf[off + 2] << 8 | buf[off + 3]);
		memcpy(a->ip, buf + off + 4, len - 4);
		off += len;
	}
	h->naddrs = buf[5];
	return 0;
}

uint16_t core_module_tag(const char *name)
{
	uint32_t h = 2166136261u;	/* FNV-1a */

	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return (uint16_t)(h ^ h >> 16);
}
