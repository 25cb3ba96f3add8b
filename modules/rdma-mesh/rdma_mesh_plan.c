/* SPDX-License-Identifier: MIT */
#include "rdma_mesh_plan.h"

#include <stdbool.h>
#include <stdio.h>

#include "netaddr.h"

static bool end_reaches(const struct rm_end *e, const struct mesh_addr *peer)
{
	return e->addr.prefix_len && !util_addr_is_loopback(peer) &&
	       util_addr_same_subnet(&e->addr, peer);
}

int rm_plan(const struct rm_end *ends, int nends, const struct mesh_addr *peer,
	    int npeer, struct rm_cable *out, int max)
{
	bool taken[MESH_DEV_ADDRS_MAX * 2] = { false };
	int n = 0;

	if (npeer > (int)(sizeof(taken) / sizeof(taken[0])))
		npeer = (int)(sizeof(taken) / sizeof(taken[0]));
	for (int e = 0; e < nends && n < max; e++)
		for (int p = 0; p < npeer; p++) {
			if (taken[p] || !end_reaches(&ends[e], &peer[p]))
				continue;
			taken[p] = true;
			out[n].end = e;
			out[n].peer = peer[p];
			out[n].peer.port = 0;
			n++;
			break;
		}
	return n;
}

/* Appends "a, b, c" of the addresses, prefixes shown when known. */
static size_t list_addrs(char *buf, size_t cap, size_t len,
			 const struct mesh_addr *a, int n, const char *none)
{
	if (!n && len < cap)
		len += (size_t)snprintf(buf + len, cap - len, "%s", none);
	for (int i = 0; i < n && len < cap; i++) {
		struct mesh_addr ip = a[i];
		char s[64];

		ip.port = 0;
		util_addr_str(&ip, s, sizeof(s));
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", s);
		if (a[i].prefix_len && len < cap)
			len += (size_t)snprintf(buf + len, cap - len, "/%u",
						a[i].prefix_len);
	}
	return len;
}

void rm_unreachable(const struct rm_end *ends, int nends,
		    const struct mesh_addr *peer, int npeer, char *why,
		    size_t cap)
{
	size_t len;

	if (!cap)
		return;
	len = (size_t)snprintf(why, cap, "no cable reaches the peer: it advertises ");
	len = list_addrs(why, cap, len, peer, npeer, "no address");
	if (len < cap)
		len += (size_t)snprintf(why + len, cap - len, "; local cables ");
	for (int e = 0; e < nends && len < cap; e++) {
		len += (size_t)snprintf(why + len, cap - len, "%s%s ",
					e ? ", " : "", ends[e].name);
		len = list_addrs(why, cap, len, &ends[e].addr, 1, "");
	}
	if (!nends && len < cap)
		len += (size_t)snprintf(why + len, cap - len, "none");
	if (len < cap)
		snprintf(why + len, cap - len,
			 "; no subnet in common (peers without a shared cable need the relay module, once it exists)");
}
