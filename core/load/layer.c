/* SPDX-License-Identifier: MIT */
#include "layer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl.h"
#include "handle.h"
#include "core_log.h"
#include "pick.h"

/* The services run on other threads than NCCL's (a relay's forwarder);
 * the state they read is the plugin's, bound between start and teardown. */
static pthread_mutex_t layer_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct core_state *layer_state;

/* A service listener: one per module that serves, on its port. */
struct service {
	const struct mesh_host *host;
	struct core_listen_comm *lc;
	struct service *next;
};
static struct service *services;

uint64_t core_service_nonce(const char *module)
{
	return 0x5345525600000000ULL | core_module_tag(module);
}

struct core_module *core_layer_module(const struct core_state *st)
{
	for (int i = 0; st && i < st->nmodules; i++) {
		struct core_module *m = &st->modules[i];

		if (m->status != CORE_MODULE_FAILED && m->has_route)
			return m;
	}
	return NULL;
}

void core_layer_bind(const struct core_state *st)
{
	pthread_mutex_lock(&layer_lock);
	layer_state = st;
	pthread_mutex_unlock(&layer_lock);
}

int core_layer_start(struct core_state *st)
{
	core_layer_bind(st);
	for (int i = 0; i < st->nmodules; i++) {
		struct core_module *m = &st->modules[i];
		int err;

		if (m->status == CORE_MODULE_FAILED)
			continue;
		err = m->desc->start(m->mctx);
		/* a module that cannot start carries nothing; the others
		 * still do (it said why) */
		if (err) {
			m->status = CORE_MODULE_FAILED;
			snprintf(m->reason, sizeof(m->reason),
				 "start failed: %s", strerror(-err));
			CORE_WARN("module %s: %s", m->name, m->reason);
		}
	}
	return 0;
}

void core_layer_unbind(const struct core_state *st)
{
	pthread_mutex_lock(&layer_lock);
	if (layer_state == st)
		layer_state = NULL;
	pthread_mutex_unlock(&layer_lock);
}

void core_layer_close_services(void)
{
	pthread_mutex_lock(&layer_lock);
	while (services) {
		struct service *s = services;

		services = s->next;
		core_ctrl_close_listen(s->lc);
		free(s);
	}
	pthread_mutex_unlock(&layer_lock);
}

static void leg_fill(const struct core_member *m, int rail,
		     struct mesh_leg *leg)
{
	*leg = (struct mesh_leg){
		.module = m->module->desc,
		.mctx = m->module->mctx,
		.dev = m->dev,
		.rail = rail,
		.props = &m->props,
	};
}

/* Asks every rail (or the one named) for a member that reaches h's peer;
 * the reasons of all refusals go into why. */
static int pick_leg(const struct core_state *st, int rail,
		    const struct core_handle *h, struct mesh_leg *leg,
		    char *why, size_t cap)
{
	size_t len = 0;

	if (cap)
		why[0] = '\0';
	for (int r = 0; r < st->nrails; r++) {
		const struct core_rail *cr = &st->rails[r];
		struct core_handle hh = *h;
		const struct core_member *m;
		char one[768];

		if (rail >= 0 && r != rail)
			continue;
		/* addresses alone (a relay host): a peer of this rail */
		if (!h->fabric_id && !h->nmembers)
			hh.fabric_id = cr->fabric_id;
		m = core_pick_member(st, cr, &hh, one, sizeof(one));
		if (m) {
			leg_fill(m, r, leg);
			return 0;
		}
		if (len < cap)
			len += (size_t)snprintf(why + len, cap - len, "%s%s: %s",
						len ? "; " : "", cr->name, one);
	}
	if (!st->nrails && cap)
		snprintf(why, cap, "this process has no rails");
	return -EHOSTUNREACH;
}

/* Runs fn on the bound state, or says there is none. */
#define WITH_STATE(st, body) do {					\
	pthread_mutex_lock(&layer_lock);				\
	const struct core_state *st = layer_state;			\
	int err_ = st ? 0 : -ESHUTDOWN;					\
	if (st) { body; }						\
	pthread_mutex_unlock(&layer_lock);				\
	return err_;							\
} while (0)

static int leg_to_addrs(const struct mesh_host *host, int rail,
			const struct mesh_addr *peer, int npeer,
			struct mesh_leg *leg, char *why, size_t cap)
{
	struct core_handle h = { .naddrs = 0 };

	(void)host;
	for (int i = 0; i < npeer && h.naddrs < CORE_HANDLE_ADDRS_MAX; i++)
		h.addrs[h.naddrs++] = peer[i];
	WITH_STATE(st, err_ = pick_leg(st, rail, &h, leg, why, cap));
}

static int leg_to_handle(const struct mesh_host *host, int rail,
			 const void *handle, struct mesh_leg *leg, char *why,
			 size_t cap)
{
	struct core_handle h;
	const char *bad;

	(void)host;
	if (core_handle_decode(handle, &h, &bad)) {
		snprintf(why, cap, "not a handle: %s", bad);
		return -EINVAL;
	}
	WITH_STATE(st, err_ = pick_leg(st, rail, &h, leg, why, cap));
}

static int leg_of_rail(const struct mesh_host *host, int rail,
		       const char *name, struct mesh_leg *leg)
{
	(void)host;
	WITH_STATE(st, {
		const struct core_member *m = rail >= 0 && rail < st->nrails ?
			core_rail_member(&st->rails[rail], name) : NULL;

		if (m)
			leg_fill(m, rail, leg);
		else
			err_ = -ENOENT;
	});
}

/* The ports the kernel gives a listener that asks for none. */
static void ephemeral_ports(int *low, int *high)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");

	if (!f || fscanf(f, "%d %d", low, high) != 2 || *low < 1 ||
	    *high > 65535 || *low > *high) {
		/* unknown: anything but the privileged ports */
		*low = 1024;
		*high = 65535;
	}
	if (f)
		fclose(f);
}

/*
 * Whether an nccl-mesh listener of this cluster can be at `port`: inside
 * port_range or what the advertised mapping makes of it, or without a
 * range where the kernel puts a listener.  The one config serves every
 * host, so this host's reading of it stands for the peer's.
 */
static int listener_port(const struct core_state *st, int port)
{
	const struct core_advertise *adv = &st->advertise;
	int low = st->port_low, high = st->port_high;

	if (!low)
		ephemeral_ports(&low, &high);
	if (port >= low && port <= high)
		return 1;
	if (!adv->naddrs)
		return 0;
	for (int i = 0; i < adv->nports; i++)
		if (adv->ports[i].external == port)
			return 1;
	return st->port_low && port - adv->port_offset >= low &&
	       port - adv->port_offset <= high;
}

/*
 * A module dials an NCCL listen from a handle someone sent it (a relay's
 * request): only the endpoints where a listener can be, so that it never
 * knocks on another service's port for whoever wrote the handle.
 */
static int keep_listener_ports(const struct core_state *st,
			       struct core_handle *h)
{
	int n = 0;

	for (int i = 0; i < h->naddrs; i++)
		if (listener_port(st, h->addrs[i].port))
			h->addrs[n++] = h->addrs[i];
	h->naddrs = n;
	return n ? 0 : -EPERM;
}

static int dial(const struct mesh_host *host, const struct mesh_addr *addrs,
		int naddrs, const void *handle, struct mesh_ctrl **ctrl)
{
	struct core_handle h = { .naddrs = 0 };
	const char *bad;

	if (handle && core_handle_decode(handle, &h, &bad)) {
		host->log(host, MESH_LOG_WARN, __FILE__, __LINE__,
			  "dial: not a handle: %s", bad);
		return -EINVAL;
	}
	if (!handle) {
		h.nonce = core_service_nonce(host->module);
		for (int i = 0; i < naddrs && i < CORE_HANDLE_ADDRS_MAX; i++)
			h.addrs[h.naddrs++] = addrs[i];
	}
	WITH_STATE(st, {
		struct core_conn *c;

		err_ = handle ? keep_listener_ports(st, &h) : 0;
		if (!err_)
			err_ = core_ctrl_dial(&h, NULL, 0,
					      core_module_tag(host->module),
					      st->dc * st->max_rails,
					      st->connect_timeout_ms, &c);
		if (!err_) {
			/* only a layering module dials: what it sets up
			 * on the channel is its leg (module.h 1.10) */
			c->ctrl.leg = 1;
			*ctrl = &c->ctrl;
		}
	});
}

static int dial_progress(const struct mesh_host *host, struct mesh_ctrl *ctrl,
			 char *why, size_t cap)
{
	struct core_conn *c = (struct core_conn *)ctrl;
	int err = core_ctrl_dial_progress(c);

	(void)host;
	if (err && err != -EAGAIN)
		snprintf(why, cap, "%s%s", err == -ETIMEDOUT ?
			 "no answer in time from " : "", core_conn_tried(c));
	return err;
}

static int ctrl_flush(const struct mesh_host *host, struct mesh_ctrl *ctrl)
{
	(void)host;
	return core_ctrl_flush((struct core_conn *)ctrl);
}

static int handle_addrs(const struct mesh_host *host, const void *handle,
			struct mesh_addr *addrs, int max)
{
	struct core_handle h;
	const char *bad;

	(void)host;
	if (core_handle_decode(handle, &h, &bad))
		return -EINVAL;
	for (int i = 0; i < h.naddrs && i < max; i++)
		addrs[i] = h.addrs[i];
	return h.naddrs < max ? h.naddrs : max;
}

static void ctrl_close(const struct mesh_host *host, struct mesh_ctrl *ctrl)
{
	(void)host;
	core_conn_free((struct core_conn *)ctrl);
}

static struct service *service_of(const struct mesh_host *host)
{
	struct service *s;

	for (s = services; s && s->host != host; s = s->next)
		;
	return s;
}

static int serve(const struct mesh_host *host, int port)
{
	struct service *s;
	uint16_t bound;
	int err;

	if (port < 1 || port > 65535)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	pthread_mutex_lock(&layer_lock);
	/* its own listener (rail -port), so its port is the one asked */
	err = service_of(host) ? -EALREADY :
		core_ctrl_listen(-port, core_service_nonce(host->module), port,
				 port, &bound, &s->lc);
	if (!err) {
		s->host = host;
		s->next = services;
		services = s;
	}
	pthread_mutex_unlock(&layer_lock);
	/* a port another process serves is the module's to judge (the
	 * relay: the normal case of several ranks on a host) */
	if (err && err != -EADDRINUSE)
		host->log(host, MESH_LOG_WARN, __FILE__, __LINE__,
			  "cannot serve port %d: %s", port, strerror(-err));
	if (err)
		free(s);
	return err;
}

static int serve_accept(const struct mesh_host *host, struct mesh_ctrl **ctrl)
{
	struct core_conn *c = NULL;
	struct service *s;
	int err = -ENOTCONN;

	pthread_mutex_lock(&layer_lock);
	s = service_of(host);
	if (s && layer_state)
		err = core_ctrl_accept(s->lc, layer_state->connect_timeout_ms,
				       &c);
	pthread_mutex_unlock(&layer_lock);
	if (!err) {
		c->ctrl.leg = 1;	/* as dial's */
		*ctrl = &c->ctrl;
	}
	return err;
}

static int rejoin_listen(const struct mesh_host *host, struct mesh_ctrl *ctrl,
			 uint64_t key, struct mesh_rejoin **rj)
{
	(void)host;
	if (!core_ctrl_is_ours(ctrl))
		return -EOPNOTSUPP;	/* a relay's: it resumes its route */
	return core_rejoin_listen((struct core_conn *)ctrl, key, rj);
}

static int rejoin_to(const struct mesh_host *host, struct mesh_ctrl *ctrl,
		     const void *handle, uint64_t key, struct mesh_rejoin **rj)
{
	struct core_handle h;
	const char *bad;

	if (ctrl && !core_ctrl_is_ours(ctrl))
		return -EOPNOTSUPP;	/* a relay's: it resumes its route */
	if (ctrl)
		return core_rejoin_to_conn((struct core_conn *)ctrl, key, rj);
	if (!handle || core_handle_decode(handle, &h, &bad)) {
		host->log(host, MESH_LOG_WARN, __FILE__, __LINE__,
			  "rejoin: not a handle: %s", handle ? bad : "none");
		return -EINVAL;
	}
	WITH_STATE(st, {
		err_ = keep_listener_ports(st, &h);
		if (!err_)
			err_ = core_rejoin_to(&h, NULL,
					      core_module_tag(host->module),
					      st->dc * st->max_rails, key, rj);
	});
}

static int rejoin_dial(const struct mesh_host *host, struct mesh_rejoin *rj,
		       int index, struct mesh_stream_new *out)
{
	(void)host;
	return core_rejoin_dial(rj, index, out);
}

static int rejoin_take(const struct mesh_host *host, struct mesh_rejoin *rj,
		       struct mesh_stream_new *out)
{
	(void)host;
	return core_rejoin_take(rj, out);
}

static void rejoin_close(const struct mesh_host *host, struct mesh_rejoin *rj)
{
	(void)host;
	core_rejoin_close(rj);
}

void core_layer_host(struct mesh_host *host)
{
	host->leg_to_addrs = leg_to_addrs;
	host->leg_to_handle = leg_to_handle;
	host->leg_of_rail = leg_of_rail;
	host->dial = dial;
	host->dial_progress = dial_progress;
	host->ctrl_flush = ctrl_flush;
	host->handle_addrs = handle_addrs;
	host->ctrl_close = ctrl_close;
	host->serve = serve;
	host->serve_accept = serve_accept;
	host->rejoin_listen = rejoin_listen;
	host->rejoin_to = rejoin_to;
	host->rejoin_dial = rejoin_dial;
	host->rejoin_take = rejoin_take;
	host->rejoin_close = rejoin_close;
}
