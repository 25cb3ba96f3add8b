/* SPDX-License-Identifier: MIT */
/*
 * relay: carries a connection between ranks that share no link, through
 * other hosts.  The ends hand NCCL's buffers straight to the first and
 * last leg's module; each relay on the way forwards leg messages through
 * registered bounce buffers, pipelined.  docs/relay.md has the design.
 */
#ifndef MESH_RELAY_H
#define MESH_RELAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nccl-mesh/module.h>

extern const struct mesh_host *relay_host;
#define MESH_LOG_HOST relay_host
#include <nccl-mesh/log.h>

#define RELAY_NAME_MAX 32
#define RELAY_ADDRS_MAX 8
#define RELAY_HOPS_MAX 8
#define RELAY_HANDLE_BYTES 120	/* the handle without the caller's slot */
#define RELAY_REQS 32		/* NCCL's most outstanding requests */
#define RELAY_RECVS_MAX 8
#define RELAY_OPS 128		/* leg requests in flight per comm */
#define RELAY_LEG_TAG 0x524c	/* every leg message; order does the rest */
#define RELAY_ROUTE_MAX 512

/* One host that relays, as the config lists it. */
struct relay_peer {
	char name[RELAY_NAME_MAX];
	int naddrs;
	struct mesh_addr addrs[RELAY_ADDRS_MAX];
};

/* An explicit route: destinations in prefix go through via[0], via[1]... */
struct relay_route {
	struct mesh_addr prefix;
	int nvia;
	char via[RELAY_HOPS_MAX][RELAY_NAME_MAX];
};

struct relay_conf {
	char name[RELAY_NAME_MAX];
	int port;
	bool serve, serve_required;
	int npeers;
	struct relay_peer *peers;
	int nmembers;
	struct mesh_addr *members;
	int nroutes;
	struct relay_route *routes;
	int max_hops;
	size_t chunk, inline_max;
	int chunks;
	int timeout_ms;
	int outage_ms;			/* 0: a broken route fails */
};

/* relay_conf.c: reads and checks the parameters (the same rules for the
 * module's check and init). */
int relay_conf_read(const struct mesh_host *host, struct relay_conf *c,
		    bool report);
void relay_conf_free(struct relay_conf *c);
const struct relay_peer *relay_conf_peer(const struct relay_conf *c,
					 const char *name);
/* The explicit route for a destination advertising these addresses. */
const struct relay_route *relay_conf_route(const struct relay_conf *c,
					   const struct mesh_addr *a, int n);
/* Every explicit route for it, the config's order (alternatives): how
 * many, at most max. */
int relay_conf_routes(const struct relay_conf *c, const struct mesh_addr *a,
		      int n, const struct relay_route **out, int max);
/* NULL when every address is inside the cluster, else the first outside;
 * 127.0.0.1 and ::1, the host's own, count as one. */
const struct mesh_addr *relay_conf_outsider(const struct relay_conf *c,
					    const struct mesh_addr *a, int n);

struct relay_pair;
struct relay_setup;
struct relay_flow;

struct relay_ctx {
	struct relay_conf conf;
	atomic_uint next_pick;		/* spreads routes over relays */
	atomic_uint next_id;
	/* serving */
	bool serving;
	pthread_t thread;
	atomic_bool stop;
	pthread_mutex_t lock;		/* pairs list, for report */
	struct relay_pair *pairs;
	struct relay_setup *setups;
	uint64_t pairs_done, bytes_done, refused;
	uint64_t reroutes;		/* routes set up here that replace
					 * broken ones */
	/* channels ended before a usable request, and their log's pace */
	uint64_t unread_dropped, drop_log_count;
	int64_t drop_log_ns;
	/* this process's ends: routes that broke, came back, and what
	 * went again */
	atomic_uint_fast64_t outages, resumed, resent_msgs, resent_bytes;
	/* metrics: what the pairs that ended forwarded, per origin and
	 * destination (under lock) */
	struct relay_flow *flows;
	int nflows;
};

/* relay_serve.c: the forwarding's counters (mesh_module.counters). */
void relay_serve_counters(struct relay_ctx *x, mesh_counter_fn emit,
			  void *arg);

extern struct relay_ctx *relay_ctx_of_process;

#endif
