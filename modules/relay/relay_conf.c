/* SPDX-License-Identifier: MIT */
/*
 * The relay's parameters: the hosts that relay, the cluster's members,
 * explicit routes.  One reader for check (which reports each broken rule
 * with its location) and init (which runs after check passed).
 */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netaddr.h"

#define bad(report, host, name, ...) do {				\
	if (report)							\
		(host)->param_error(host, name, __VA_ARGS__);		\
	err = -EINVAL;							\
} while (0)

/* Copies the next space-separated word of *s into w; 0 when none. */
static int word(const char **s, char *w, size_t cap)
{
	size_t n = 0;

	while (**s == ' ' || **s == '\t')
		(*s)++;
	while (**s && **s != ' ' && **s != '\t') {
		if (n + 1 < cap)
			w[n++] = **s;
		(*s)++;
	}
	w[n] = '\0';
	return n > 0;
}

static int valid_name(const char *w)
{
	size_t n = strlen(w);

	if (!n || n >= RELAY_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(w[i] == '-' || w[i] == '_' || w[i] == '.' ||
		      (w[i] >= '0' && w[i] <= '9') ||
		      (w[i] >= 'a' && w[i] <= 'z') ||
		      (w[i] >= 'A' && w[i] <= 'Z')))
			return 0;
	return 1;
}

/* "NAME ADDR[:PORT] ..." */
static int parse_peer(const char *item, int port, struct relay_peer *p,
		      const char **why)
{
	char w[128];

	memset(p, 0, sizeof(*p));
	if (!word(&item, w, sizeof(w)) || !valid_name(w)) {
		*why = "must start with a relay name (letters, digits, '-', "
		       "'_', '.', at most 31)";
		return -EINVAL;
	}
	strcpy(p->name, w);
	while (word(&item, w, sizeof(w))) {
		struct mesh_addr a;

		if (p->naddrs == RELAY_ADDRS_MAX) {
			*why = "lists more than 8 addresses";
			return -EINVAL;
		}
		if (util_addr_parse(w, &a) || a.prefix_len) {
			*why = "has an item that is no ADDR or ADDR:PORT";
			return -EINVAL;
		}
		if (!a.port)
			a.port = (uint16_t)port;
		p->addrs[p->naddrs++] = a;
	}
	if (!p->naddrs) {
		*why = "names no address";
		return -EINVAL;
	}
	return 0;
}

/* "PREFIX via NAME [NAME...]" */
static int parse_route(const char *item, struct relay_route *r,
		       const char **why)
{
	char w[128];

	memset(r, 0, sizeof(*r));
	if (!word(&item, w, sizeof(w)) || util_addr_parse(w, &r->prefix) ||
	    r->prefix.port) {
		*why = "must start with a destination ADDR or ADDR/PREFIX";
		return -EINVAL;
	}
	if (!strchr(w, '/'))
		r->prefix.prefix_len = r->prefix.family == AF_INET ?
					       32 : 128;
	if (!word(&item, w, sizeof(w)) || strcmp(w, "via")) {
		*why = "must read PREFIX via NAME [NAME...]";
		return -EINVAL;
	}
	while (word(&item, w, sizeof(w))) {
		if (r->nvia == RELAY_HOPS_MAX || !valid_name(w)) {
			*why = "names an invalid relay or more than 8";
			return -EINVAL;
		}
		strcpy(r->via[r->nvia++], w);
	}
	if (!r->nvia) {
		*why = "names no relay after 'via'";
		return -EINVAL;
	}
	return 0;
}

static int read_peers(const struct mesh_host *host, struct relay_conf *c,
		      bool report)
{
	const char *const *items;
	int n = host->param_list(host, "relays", &items), err = 0;

	c->peers = calloc((size_t)n + 1, sizeof(*c->peers));
	if (!c->peers)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		const char *why;

		if (parse_peer(items[i], c->port, &c->peers[c->npeers], &why)) {
			bad(report, host, "relays", "item %d ('%s') %s", i + 1,
			    items[i], why);
			continue;
		}
		if (relay_conf_peer(c, c->peers[c->npeers].name))
			bad(report, host, "relays",
			    "item %d names relay '%s' a second time", i + 1,
			    c->peers[c->npeers].name);
		else
			c->npeers++;
	}
	return err;
}

static int read_routes(const struct mesh_host *host, struct relay_conf *c,
		       bool report)
{
	const char *const *items;
	int n = host->param_list(host, "routes", &items), err = 0;

	c->routes = calloc((size_t)n + 1, sizeof(*c->routes));
	if (!c->routes)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		struct relay_route *r = &c->routes[c->nroutes];
		const char *why;

		if (parse_route(items[i], r, &why)) {
			bad(report, host, "routes", "item %d ('%s') %s", i + 1,
			    items[i], why);
			continue;
		}
		if (r->nvia > c->max_hops) {
			bad(report, host, "routes", "item %d ('%s') names %d "
			    "relays, more than max_hops (%d)", i + 1, items[i],
			    r->nvia, c->max_hops);
			continue;
		}
		for (int v = 0; v < r->nvia; v++)
			for (int w = 0; w < v; w++)
				if (!strcmp(r->via[w], r->via[v])) {
					bad(report, host, "routes", "item %d "
					    "('%s') names relay '%s' twice",
					    i + 1, items[i], r->via[v]);
					r->nvia = 0;
				}
		for (int v = 0; v < r->nvia; v++)
			if (!relay_conf_peer(c, r->via[v])) {
				bad(report, host, "routes",
				    "item %d ('%s') names relay '%s', which "
				    "'relays' does not list", i + 1, items[i],
				    r->via[v]);
				r->nvia = 0;
			}
		if (r->nvia)
			c->nroutes++;
	}
	return err;
}

static int read_members(const struct mesh_host *host, struct relay_conf *c,
			bool report)
{
	const char *const *items;
	int n = host->param_list(host, "members", &items), err = 0;

	c->members = calloc((size_t)n + 1, sizeof(*c->members));
	if (!c->members)
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		struct mesh_addr *a = &c->members[c->nmembers];

		if (util_addr_parse(items[i], a) || a->port) {
			bad(report, host, "members",
			    "item %d ('%s') is no ADDR or ADDR/PREFIX", i + 1,
			    items[i]);
			continue;
		}
		if (!strchr(items[i], '/'))
			a->prefix_len = a->family == AF_INET ? 32 : 128;
		c->nmembers++;
	}
	return err;
}

int relay_conf_read(const struct mesh_host *host, struct relay_conf *c,
		    bool report)
{
	const char *name = host->param_str(host, "name");
	char hostname[RELAY_NAME_MAX] = "";
	int err = 0, e;

	memset(c, 0, sizeof(*c));
	if (!name[0] && gethostname(hostname, sizeof(hostname) - 1) == 0)
		hostname[strcspn(hostname, ".")] = '\0';
	snprintf(c->name, sizeof(c->name), "%s", name[0] ? name : hostname);
	if (!valid_name(c->name))
		bad(report, host, "name", "'%s' is no relay name (letters, "
		    "digits, '-', '_', '.', at most 31)", c->name);
	c->port = (int)host->param_int(host, "port");
	c->serve = host->param_int(host, "serve") != 0;
	c->serve_required = host->param_int(host, "serve_required") != 0;
	c->max_hops = (int)host->param_int(host, "max_hops");
	c->chunk = (size_t)host->param_int(host, "chunk_size");
	c->chunks = (int)host->param_int(host, "chunks");
	c->inline_max = (size_t)host->param_int(host, "inline_max");
	c->timeout_ms = (int)host->param_int(host, "timeout_ms");
	c->outage_ms = (int)host->param_int(host, "outage_ms");
	if (c->inline_max + 64 > c->chunk)
		bad(report, host, "inline_max", "must leave room for a header "
		    "in chunk_size (%zu)", c->chunk);
	e = read_peers(host, c, report);
	if (!e)
		e = read_routes(host, c, report);
	if (!e)
		e = read_members(host, c, report);
	return e ? e : err;
}

void relay_conf_free(struct relay_conf *c)
{
	free(c->peers);
	free(c->routes);
	free(c->members);
	memset(c, 0, sizeof(*c));
}

const struct relay_peer *relay_conf_peer(const struct relay_conf *c,
					 const char *name)
{
	for (int i = 0; i < c->npeers; i++)
		if (!strcmp(c->peers[i].name, name))
			return &c->peers[i];
	return NULL;
}

static bool inside(const struct mesh_addr *prefix, const struct mesh_addr *a)
{
	return prefix->family == a->family && util_addr_same_subnet(prefix, a);
}

int relay_conf_routes(const struct relay_conf *c, const struct mesh_addr *a,
		      int n, const struct relay_route **out, int max)
{
	int got = 0;

	for (int r = 0; r < c->nroutes && got < max; r++)
		for (int i = 0; i < n; i++)
			if (inside(&c->routes[r].prefix, &a[i])) {
				out[got++] = &c->routes[r];
				break;
			}
	return got;
}

const struct relay_route *relay_conf_route(const struct relay_conf *c,
					   const struct mesh_addr *a, int n)
{
	const struct relay_route *r = NULL;

	return relay_conf_routes(c, a, n, &r, 1) ? r : NULL;
}

static bool member(const struct relay_conf *c, const struct mesh_addr *a)
{
	for (int m = 0; m < c->nmembers; m++)
		if (inside(&c->members[m], a))
			return true;
	return false;
}

/*
 * 127.0.0.1 and ::1 are one endpoint, the relay's own host, which a
 * handle of an interface with both advertises twice: a cluster that
 * takes either takes the other.  No other address is widened (127.0.0.2
 * may stand for another host in a test on one machine).
 */
static bool loopback_twin(const struct mesh_addr *a, struct mesh_addr *twin)
{
	static const uint8_t v4[4] = { 127, 0, 0, 1 }, v6[16] = { [15] = 1 };

	*twin = (struct mesh_addr){ .port = a->port };
	if (a->family == AF_INET && !memcmp(a->ip, v4, 4)) {
		twin->family = AF_INET6;
		memcpy(twin->ip, v6, 16);
		return true;
	}
	if (a->family == AF_INET6 && !memcmp(a->ip, v6, 16)) {
		twin->family = AF_INET;
		memcpy(twin->ip, v4, 4);
		return true;
	}
	return false;
}

const struct mesh_addr *relay_conf_outsider(const struct relay_conf *c,
					    const struct mesh_addr *a, int n)
{
	struct mesh_addr twin;

	for (int i = 0; i < n; i++)
		if (!member(c, &a[i]) &&
		    !(loopback_twin(&a[i], &twin) && member(c, &twin)))
			return &a[i];
	return NULL;
}
