/* SPDX-License-Identifier: MIT */
#include "netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *util_addr_str(const struct mesh_addr *a, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (a->family == AF_INET || a->family == AF_INET6)
		inet_ntop(a->family, a->ip, ip, sizeof(ip));
	if (!a->port)
		snprintf(buf, len, "%s", ip);
	else if (a->family == AF_INET6)
		snprintf(buf, len, "[%s]:%u", ip, a->port);
	else
		snprintf(buf, len, "%s:%u", ip, a->port);
	return buf;
}

static int parse_port(const char *text, uint16_t *port)
{
	char *end;
	long v = strtol(text, &end, 10);

	if (!*text || *end || v < 0 || v > 65535)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

int util_addr_parse(const char *text, struct mesh_addr *out)
{
	char buf[UTIL_ADDR_STRLEN];
	char *host = buf, *port = NULL, *slash;
	struct mesh_addr a = { 0 };

	if (strlen(text) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, text);
	slash = strchr(buf, '/');
	if (slash) {
		char *end;
		long p = strtol(slash + 1, &end, 10);

		if (!slash[1] || *end || p < 0 || p > 128)
			return -EINVAL;
		a.prefix_len = (uint8_t)p;
		*slash = '\0';
	}
	if (buf[0] == '[') {
		char *close = strchr(buf, ']');

		if (!close)
			return -EINVAL;
		*close = '\0';
		host = buf + 1;
		if (close[1] == ':')
			port = close + 2;
		else if (close[1])
			return -EINVAL;
	} else if (strchr(buf, ':') == strrchr(buf, ':') && strchr(buf, ':')) {
		port = strchr(buf, ':');
		*port++ = '\0';
	}
	if (port && parse_port(port, &a.port))
		return -EINVAL;
	if (inet_pton(AF_INET, host, a.ip) == 1)
		a.family = AF_INET;
	else if (inet_pton(AF_INET6, host, a.ip) == 1)
		a.family = AF_INET6;
	else
		return -EINVAL;
	if (a.family == AF_INET && a.prefix_len > 32)
		return -EINVAL;
	*out = a;
	return 0;
}

void util_addr_from_sockaddr(const struct sockaddr *sa, struct mesh_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;

		out->family = AF_INET;
		out->port = ntohs(in->sin_port);
		memcpy(out->ip, &in->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;

		out->port = ntohs(in6->sin6_port);
		/* A dual-stack listener sees IPv4 peers as ::ffff:a.b.c.d;
		 * they are IPv4 peers. */
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			out->family = AF_INET;
			memcpy(out->ip, &in6->sin6_addr.s6_addr[12], 4);
		} else {
			out->family = AF_INET6;
			memcpy(out->ip, &in6->sin6_addr, 16);
		}
	}
}

socklen_t util_addr_to_sockaddr(const struct mesh_addr *a,
				struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == AF_INET) {
		struct sockaddr_in *in = (void *)ss;

		in->sin_family = AF_INET;
		in->sin_port = htons(a->port);
		memcpy(&in->sin_addr, a->ip, 4);
		return sizeof(*in);
	}
	struct sockaddr_in6 *in6 = (void *)ss;

	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(a->port);
	memcpy(&in6->sin6_addr, a->ip, 16);
	return sizeof(*in6);
}

static size_t addr_len(const struct mesh_addr *a)
{
	return a->family == AF_INET ? 4 : 16;
}

bool util_addr_equal_ip(const struct mesh_addr *a, const struct mesh_addr *b)
{
	return a->family == b->family && !memcmp(a->ip, b->ip, addr_len(a));
}

bool util_addr_same_source(const struct mesh_addr *a,
			   const struct mesh_addr *b)
{
	return a->family == b->family &&
	       !memcmp(a->ip, b->ip, a->family == AF_INET6 ? 8 : 4);
}

bool util_addr_same_subnet(const struct mesh_addr *local,
			   const struct mesh_addr *peer)
{
	unsigned bits = local->prefix_len;

	if (local->family != peer->family)
		return false;
	if (bits > addr_len(local) * 8)
		bits = (unsigned)addr_len(local) * 8;
	for (unsigned i = 0; i < bits / 8; i++)
		if (local->ip[i] != peer->ip[i])
			return false;
	if (bits % 8) {
		uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));

		if ((local->ip[bits / 8] ^ peer->ip[bits / 8]) & mask)
			return false;
	}
	return true;
}

bool util_addr_is_loopback(const struct mesh_addr *a)
{
	static const uint8_t v6_loop[16] = { [15] = 1 };

	if (a->family == AF_INET)
		return a->ip[0] == 127;
	return !memcmp(a->ip, v6_loop, 16);
}

bool util_addr_is_link_local(const struct mesh_addr *a)
{
	if (a->family == AF_INET)
		return a->ip[0] == 169 && a->ip[1] == 254;
	return a->ip[0] == 0xfe && (a->ip[1] & 0xc0) == 0x80;
}

static int prefix_of(const struct sockaddr *mask)
{
	struct mesh_addr m;
	int bits = 0;

	if (!mask)
		return 0;
	util_addr_from_sockaddr(mask, &m);
	for (size_t i = 0; i < addr_len(&m); i++)
		bits += __builtin_popcount(m.ip[i]);
	return bits;
}

bool util_netif_match(const char *filter, const char *name)
{
	bool exclude = false, exact = false, hit = false;
	char list[UTIL_NETIF_FILTER_MAX + 1], *save = NULL;

	if (*filter == '^') {
		exclude = true;
		filter++;
	}
	if (*filter == '=') {
		exact = true;
		filter++;
	}
	snprintf(list, sizeof(list), "%s", filter);
	for (char *tok = strtok_r(list, ",", &save); tok && !hit;
	     tok = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(tok, ':');	/* NCCL's ":port" suffix */

		if (colon)
			*colon = '\0';
		hit = exact ? !strcmp(tok, name) :
			      !strncmp(tok, name, strlen(tok));
	}
	return exclude ? !hit : hit;
}

#define FILTER_EXPECTED "expected interface names or prefixes joined by " \
	"',', after an optional '^' (exclude) and '=' (exact)"

/* What is wrong with the filter's entry [s, end), or NULL. */
static const char *netif_entry_wrong(const char *s, const char *end)
{
	const char *colon = memchr(s, ':', (size_t)(end - s));
	const char *name_end = colon ? colon : end, *p;
	long port = 0;

	if (name_end == s)
		return "an entry without a name before ':'";
	if (name_end - s >= IFNAMSIZ)
		return "a name longer than an interface name can be "
		       "(15 bytes)";
	for (p = s; p < name_end; p++)
		if (*p == '/' || *p == ' ' || (unsigned char)*p < 0x20 ||
		    *p == 0x7f)
			return "a name with a '/', a blank or a control byte, "
			       "which no interface name has";
	if (!colon)
		return NULL;
	for (p = colon + 1; p < end && p - colon <= 5 && *p >= '0' &&
	     *p <= '9'; p++)
		port = port * 10 + (*p - '0');
	return p == end && port >= 1 && port <= 65535 ? NULL :
	       "a port suffix that is not 1..65535";
}

int util_netif_filter_check(const char *filter, char *why, size_t len)
{
	const char *s = filter, *end, *wrong = NULL;
	int n = 0, names = 0;

	if (!*filter)
		return 0;
	if (strlen(filter) > UTIL_NETIF_FILTER_MAX) {
		snprintf(why, len, "expected at most %d bytes, got %zu",
			 UTIL_NETIF_FILTER_MAX, strlen(filter));
		return -EINVAL;
	}
	s += *s == '^';
	s += *s == '=';
	/* empty entries are skipped, as util_netif_match skips them */
	for (; !wrong; s = end + 1) {
		end = strchrnul(s, ',');
		n++;
		if (end > s) {
			names++;
			wrong = netif_entry_wrong(s, end);
		}
		if (!*end)
			break;
	}
	if (!wrong && names)
		return 0;
	if (wrong)
		snprintf(why, len, "%s, got \"%.200s\": entry %d is %s",
			 FILTER_EXPECTED, filter, n, wrong);
	else
		snprintf(why, len, "%s, got \"%.200s\", which names none",
			 FILTER_EXPECTED, filter);
	return -EINVAL;
}

static bool default_excluded(const char *name)
{
	static const char *const skip[] = { "docker", "veth", "virbr",
					    "lxcbr", "br-", "tailscale" };

	for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (!strncmp(name, skip[i], strlen(skip[i])))
			return true;
	return false;
}

static void read_sysfs(const char *ifname, struct util_netif *nif)
{
	char path[PATH_MAX], real[PATH_MAX];
	FILE *f;
	int speed = 0;

	snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", &speed) == 1 && speed > 0)
			nif->speed_mbps = speed;
		fclose(f);
	}
	snprintf(path, sizeof(path), "/sys/class/net/%s/device", ifname);
	if (realpath(path, real) && strlen(real) < sizeof(nif->pci_path))
		memcpy(nif->pci_path, real, strlen(real) + 1);
}

static struct util_netif *find_or_add(struct util_netif **list, int *n,
				      const char *name)
{
	struct util_netif *grown;

	for (int i = 0; i < *n; i++)
		if (!strcmp((*list)[i].name, name))
			return &(*list)[i];
	grown = realloc(*list, (size_t)(*n + 1) * sizeof(**list));
	if (!grown)
		return NULL;
	*list = grown;
	memset(&grown[*n], 0, sizeof(grown[*n]));
	snprintf(grown[*n].name, sizeof(grown[*n].name), "%s", name);
	return &grown[(*n)++];
}

static int collect(const char *filter, bool with_loopback,
		   struct util_netif **out)
{
	struct ifaddrs *ifa, *it;
	struct util_netif *list = NULL;
	int n = 0;

	if (getifaddrs(&ifa))
		return -errno;
	for (it = ifa; it; it = it->ifa_next) {
		struct util_netif *nif;
		struct mesh_addr a;
		bool loop = it->ifa_flags & IFF_LOOPBACK;

		if (!it->ifa_addr || !(it->ifa_flags & IFF_UP))
			continue;
		if (it->ifa_addr->sa_family != AF_INET &&
		    it->ifa_addr->sa_family != AF_INET6)
			continue;
		if (*filter ? !util_netif_match(filter, it->ifa_name) :
			      (loop && !with_loopback) ||
				      default_excluded(it->ifa_name))
			continue;
		util_addr_from_sockaddr(it->ifa_addr, &a);
		a.port = 0;
		a.prefix_len = (uint8_t)prefix_of(it->ifa_netmask);
		if (util_addr_is_link_local(&a))
			continue;
		nif = find_or_add(&list, &n, it->ifa_name);
		if (!nif) {
			free(list);
			freeifaddrs(ifa);
			return -ENOMEM;
		}
		nif->loopback = loop;
		if (nif->naddrs < MESH_DEV_ADDRS_MAX)
			nif->addrs[nif->naddrs++] = a;
	}
	freeifaddrs(ifa);
	for (int i = 0; i < n; i++)
		read_sysfs(list[i].name, &list[i]);
	*out = list;
	return n;
}

int util_netif_list(const char *filter, struct util_netif **out)
{
	int n;

	if (!filter)
		filter = "";
	n = collect(filter, false, out);
	if (n == 0 && !*filter) {
		free(*out);
		n = collect(filter, true, out);
	}
	return n;
}
