/* SPDX-License-Identifier: MIT */
/*
 * Address and interface helpers shared by the core and the modules (linked
 * into each as a static PIC library, never exported).
 */
#ifndef UTIL_NETADDR_H
#define UTIL_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include <nccl-mesh/module.h>

/* Long enough for "[ffff:...:ffff]:65535". */
#define UTIL_ADDR_STRLEN 64

struct util_netif {
	char name[MESH_NAME_MAX];
	bool loopback;
	int speed_mbps;		/* from sysfs, 0 unknown */
	char pci_path[256];	/* "" for virtual interfaces */
	int naddrs;
	struct mesh_addr addrs[MESH_DEV_ADDRS_MAX];
};

/* "1.2.3.4:80", "[::1]:80", or without ":port" when port is 0. */
const char *util_addr_str(const struct mesh_addr *a, char *buf, size_t len);
/* Parses "1.2.3.4", "1.2.3.4:80", "::1", "[::1]:80", "10.0.0.0/8". */
int util_addr_parse(const char *text, struct mesh_addr *out);
void util_addr_from_sockaddr(const struct sockaddr *sa, struct mesh_addr *out);
socklen_t util_addr_to_sockaddr(const struct mesh_addr *a,
				struct sockaddr_storage *ss);
bool util_addr_equal_ip(const struct mesh_addr *a, const struct mesh_addr *b);
/* Is peer inside local's subnet (local->prefix_len bits)? */
bool util_addr_same_subnet(const struct mesh_addr *local,
			   const struct mesh_addr *peer);
/* Do a and b count as one source for per-source bounds: one IPv4
 * address, or one IPv6 /64 (what a single host is usually given)? */
bool util_addr_same_source(const struct mesh_addr *a,
			   const struct mesh_addr *b);
bool util_addr_is_loopback(const struct mesh_addr *a);
bool util_addr_is_link_local(const struct mesh_addr *a);

/*
 * Up interfaces with at least one usable address (link-local skipped).
 * Interfaces matching `filter` in NCCL_SOCKET_IFNAME syntax (prefixes,
 * '^' excludes, '=' exact) when filter is non-empty; otherwise all but
 * loopback and container bridges, and loopback only when nothing else is up.
 * Returns the count (>= 0) or -errno; *out is malloc'd.
 */
int util_netif_list(const char *filter, struct util_netif **out);
/* Does `name` match `filter` (same syntax)? */
bool util_netif_match(const char *filter, const char *name);

/* The longest filter util_netif_match reads whole. */
#define UTIL_NETIF_FILTER_MAX 511
/*
 * Whether `filter` is one in that syntax: "" (none), or an optional '^',
 * an optional '=', then names or prefixes joined by commas, each of 1 to
 * IFNAMSIZ - 1 bytes without '/', ':', blanks or control bytes and maybe
 * with a ":<port>" suffix (NCCL's, ignored).  A name that no interface of
 * this host has is no error here.  0, or -EINVAL with why saying what is
 * wrong.
 */
int util_netif_filter_check(const char *filter, char *why, size_t len);

#endif
