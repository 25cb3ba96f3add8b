/* SPDX-License-Identifier: MIT */
/*
 * The relay module: its parameters, its life, the origin's route and the
 * destination's accept.  It has no device of its own: the core hands it
 * the connections no rail member reaches (module.h, layering).
 */
#include "relay.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "netaddr.h"
#include "relay_comm.h"
#include "relay_hop.h"
#include "relay_wire.h"

const struct mesh_host *relay_host;

int relay_serve_start(struct relay_ctx *x);
void relay_serve_stop(struct relay_ctx *x);
int relay_serve_report(struct relay_ctx *x, char *buf, size_t cap);

static const struct mesh_param relay_params[] = {
	{ "name", MESH_PARAM_STR, "", 0, 0,
	  "This host's name among the relays; empty: the short hostname." },
	{ "port", MESH_PARAM_INT, "29400", 1, 65535,
	  "Port this host's relay serves (one process per host takes it)." },
	{ "serve", MESH_PARAM_BOOL, "true", 0, 0,
	  "Relay for others from this process when the port is free." },
	{ "serve_required", MESH_PARAM_BOOL, "false", 0, 0,
	  "Fail instead of relaying nothing when the port is taken (meshrelay sets it)." },
	{ "relays", MESH_PARAM_LIST, "", 0, 0,
	  "Hosts that relay: \"NAME ADDR[:PORT] ...\" each." },
	{ "members", MESH_PARAM_LIST, "", 0, 0,
	  "The cluster, as ADDR or ADDR/PREFIX: the only destinations a relay forwards to." },
	{ "routes", MESH_PARAM_LIST, "", 0, 0,
	  "Explicit routes, \"PREFIX via NAME [NAME...]\": used even where a module claims to reach." },
	{ "max_hops", MESH_PARAM_INT, "4", 1, RELAY_HOPS_MAX - 1,
	  "Most relays one connection passes through." },
	{ "chunk_size", MESH_PARAM_SIZE, "4M", 64 * 1024, 64 << 20,
	  "Size of the pieces a message is forwarded in, and of each bounce buffer." },
	{ "chunks", MESH_PARAM_INT, "8", 2, 256,
	  "Bounce buffers per relayed connection at a relay (pieces in flight)." },
	{ "inline_max", MESH_PARAM_SIZE, "16K", 0, 1 << 20,
	  "Messages up to this size travel inside their header (host memory only)." },
	{ "timeout_ms", MESH_PARAM_INT, "30000", 100, 3600000,
	  "Time one hop of a route may take to be set up; a destination that refuses this long is gone." },
	{ "outage_ms", MESH_PARAM_INT, "300000", 0, 86400000,
	  "How long a connection whose route broke may wait for a new one; 0: it fails at once." },
	{ NULL, 0, NULL, 0, 0, NULL },
};

static int relay_check(const struct mesh_host *host)
{
	struct relay_conf c;
	int err = relay_conf_read(host, &c, true);

	relay_conf_free(&c);
	return err;
}

static int relay_init(const struct mesh_host *host, void **mctx)
{
	struct relay_ctx *x = calloc(1, sizeof(*x));
	int err;

	if (!x)
		return -ENOMEM;
	relay_host = host;
	err = relay_conf_read(host, &x->conf, false);
	if (err) {
		relay_conf_free(&x->conf);
		free(x);
		return err;
	}
	pthread_mutex_init(&x->lock, NULL);
	/* every process starts its rotation over the relays elsewhere, so
	 * that processes with one connection each still spread */
	atomic_store(&x->next_pick, (unsigned)getpid() * 2654435761u);
	*mctx = x;
	return 0;
}

static void relay_fini(void *mctx)
{
	struct relay_ctx *x = mctx;

	relay_serve_stop(x);
	free(x->flows);
	pthread_mutex_destroy(&x->lock);
	relay_conf_free(&x->conf);
	free(x);
}

static int relay_devices(void *mctx, int *ndev)
{
	(void)mctx;
	*ndev = 0;	/* it carries connections over the others' */
	return 0;
}

static int relay_get_properties(void *mctx, int dev,
				struct mesh_dev_props *props)
{
	(void)mctx, (void)dev, (void)props;
	return -ENODEV;
}

static int relay_start(void *mctx)
{
	struct relay_ctx *x = mctx;

	return x->conf.serve ? relay_serve_start(x) : 0;
}

static int relay_report(void *mctx, char *buf, size_t cap)
{
	struct relay_ctx *x = mctx;
	size_t len;
	int err = relay_serve_report(x, buf, cap);

	len = strnlen(buf, cap);
	/* the ends of this process (a rank's), once a route of theirs broke */
	if (!err && len < cap && atomic_load(&x->outages))
		snprintf(buf + len, cap - len, "relay %s: connections of this "
			 "process: %llu routes broke, %llu resumed, %llu "
			 "messages (%llu bytes) sent again\n", x->conf.name,
			 (unsigned long long)atomic_load(&x->outages),
			 (unsigned long long)atomic_load(&x->resumed),
			 (unsigned long long)atomic_load(&x->resent_msgs),
			 (unsigned long long)atomic_load(&x->resent_bytes));
	return err;
}

/* Forwarded here, and this process's routes that broke and resumed. */
static int relay_counters(void *mctx, mesh_counter_fn emit, void *arg)
{
	struct relay_ctx *x = mctx;

	relay_serve_counters(x, emit, arg);
	emit(arg, &(struct mesh_counter){ .name = "resumes",
		.value = atomic_load(&x->resumed) });
	return 0;
}

/* ---- the origin ---- */

static void dest_text(const void *handle, char *buf, size_t cap)
{
	struct mesh_addr a[4];
	int n = relay_host->handle_addrs(relay_host, handle, a, 4);

	if (n > 0)
		util_addr_str(&a[0], buf, cap);
	else
		snprintf(buf, cap, "?");
}

static int relay_routes_to(void *mctx, int rail, const void *handle)
{
	struct relay_ctx *x = mctx;
	struct mesh_addr a[16];
	int n = relay_host->handle_addrs(relay_host, handle, a, 16);

	(void)rail;
	return n > 0 && relay_conf_route(&x->conf, a, n) != NULL;
}

static struct relay_hop *route_begin(struct relay_ctx *x, const void *handle)
{
	uint64_t key = 0;

	/* the destination keeps the route's key: the last leg comes
	 * through it, and every route after a break */
	while (!key)
		if (getrandom(&key, sizeof(key), 0) != sizeof(key))
			return NULL;
	return relay_hop_origin(x, handle, key, 0, x->conf.outage_ms ?
				RELAY_FLAG_RESUMABLE : 0);
}

static int relay_route(void *mctx, int rail, const void *handle,
		       const char *unreached, void **state, void **send_comm)
{
	struct relay_ctx *x = mctx;
	struct relay_hop *h = *state;
	char dest[UTIL_ADDR_STRLEN], route[RELAY_ROUTE_MAX + 8];
	struct relay_comm *c;
	int err;

	(void)rail, (void)unreached;
	*send_comm = NULL;
	if (!h) {
		h = route_begin(x, handle);
		if (!h)
			return -ENOMEM;
		*state = h;
	}
	err = relay_hop_step(h);
	if (err == -EAGAIN)
		return 0;
	dest_text(handle, dest, sizeof(dest));
	if (err) {
		MESH_WARN("connect to %s: no relay carries the connection: %s",
			  dest, h->tried[0] ? h->tried :
			  "'relays' lists no other relay");
		relay_hop_free(h);
		free(h);
		*state = NULL;
		return -EHOSTUNREACH;
	}
	snprintf(route, sizeof(route), "via %s", h->route);
	c = relay_comm_send(x, h, dest, route, handle);
	if (!c) {
		h->leg.module->close_send(h->comm);
		err = -ENOMEM;
	} else {
		MESH_INFO("send comm %u to %s: %s", c->id, dest, route);
	}
	relay_hop_free(h);	/* its channel, when the comm did not take it */
	free(h);
	*state = NULL;
	*send_comm = c;
	return err;
}

static void relay_route_abandon(void *mctx, void *state)
{
	(void)mctx;
	if (state) {
		relay_hop_free(state);
		free(state);
	}
}

static int relay_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
			 void **send_comm)
{
	(void)mctx, (void)dev, (void)ctrl;
	*send_comm = NULL;
	return -EOPNOTSUPP;	/* relay has no rail of its own */
}

/* ---- the destination ---- */

/*
 * The destination's accept runs on the core's channel from the last
 * relay, which announces the route (LAST).  The destination keeps the
 * route's key on its listener, says READY, and the leg's module runs its
 * own accept on the same channel (the channel's module_state is the
 * leg's while it runs, ours between calls).  The last relay then opens
 * the channel for the route's notes through the key (relay_comm_join),
 * as every later route of the connection reaches the destination.
 */
struct relay_accepting {
	struct relay_msg last;
	struct relay_comm *c;
	struct mesh_leg leg;
	void *leg_state;		/* the leg module's module_state */
	bool leg_started;
};

/* LAST from the last relay: the route, its key, its leg's module. */
static int read_last(struct relay_ctx *x, struct relay_accepting *a,
		     struct mesh_ctrl *ctrl, int rail)
{
	uint8_t buf[RELAY_MSG_MAX];
	struct relay_msg ready = { .type = RELAY_MSG_READY };
	const char *bad;
	int n = ctrl->recv(ctrl, buf, sizeof(buf));

	if (n == -EAGAIN)
		return n;
	bad = n < 0 ? "the channel failed" :
		      relay_msg_decode(buf, (size_t)n, &a->last);
	if (!bad && a->last.type != RELAY_MSG_LAST)
		bad = "not the last leg's announcement";
	if (!bad && a->last.flags & (RELAY_FLAG_RESUME | RELAY_FLAG_NOTES))
		bad = "a later route's announcement came to the NCCL listen";
	if (!bad && !a->last.key)
		bad = "an announcement without a key";
	if (bad) {
		MESH_WARN("accept from %s: %s", ctrl->peer, bad);
		return -EPROTO;
	}
	if (relay_host->leg_of_rail(relay_host, rail, a->last.leg, &a->leg)) {
		MESH_WARN("accept from %s: this rail has no module '%s' for "
			  "the last leg", ctrl->peer, a->last.leg);
		return -ENOPROTOOPT;
	}
	n = relay_comm_recv(x, ctrl, rail, &a->last, &a->c);
	if (n)
		return n;
	/* small messages are copied out of the header by the CPU: only
	 * where NCCL hands us host memory */
	if (!(a->leg.props->ptr_support & MESH_PTR_CUDA))
		ready.flags = RELAY_FLAG_INLINE;
	return ctrl->send(ctrl, buf, relay_msg_encode(&ready, buf));
}

/* The leg module's accept on the core's channel, with its own state. */
static int leg_accept(struct relay_accepting *a, struct mesh_ctrl *ctrl,
		      void **lcomm)
{
	int err;

	ctrl->module_state = a->leg_state;
	/* NCCL's comm is ours; the one set up on this channel our leg */
	ctrl->leg = 1;
	err = a->leg.module->accept(a->leg.mctx, a->leg.dev, ctrl, lcomm);
	a->leg_state = ctrl->module_state;
	ctrl->module_state = a;
	a->leg_started = true;
	return err;
}

static int relay_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
			void **recv_comm)
{
	struct relay_ctx *x = mctx;
	struct relay_accepting *a = ctrl->module_state;
	struct relay_comm *c;
	void *lcomm = NULL;
	int err;

	*recv_comm = NULL;
	if (!a) {
		a = calloc(1, sizeof(*a));
		if (!a)
			return -ENOMEM;
		ctrl->module_state = a;
	}
	if (!a->c) {
		err = read_last(x, a, ctrl, dev);
		if (err)
			return err == -EAGAIN ? 0 : err;
	}
	err = leg_accept(a, ctrl, &lcomm);
	if (err || !lcomm)
		return err == -EAGAIN ? 0 : err;
	c = a->c;
	err = relay_comm_first_leg(c, &a->leg, lcomm);
	if (err) {
		relay_comm_free(c);
		a->c = NULL;
		return err;
	}
	MESH_INFO("recv comm %u from %s: %s", c->id, a->last.origin,
		  a->last.text);
	free(a);
	ctrl->module_state = NULL;
	*recv_comm = c;
	return 0;
}

static void relay_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	struct relay_accepting *a = ctrl->module_state;

	(void)mctx;
	if (!a)
		return;
	if (a->leg_started) {
		ctrl->module_state = a->leg_state;
		a->leg.module->abandon(a->leg.mctx, ctrl);
	}
	if (a->c)
		relay_comm_free(a->c);
	free(a);
	ctrl->module_state = NULL;
}

MESH_EXPORT const struct mesh_module MESH_MODULE_DESCRIPTOR = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_module),
	.name = "relay",
	.version = "1.0",
	.params = relay_params,
	.init = relay_init,
	.fini = relay_fini,
	.devices = relay_devices,
	.get_properties = relay_get_properties,
	.connect = relay_connect,
	.accept = relay_accept,
	.abandon = relay_abandon,
	.reg_mr = relay_reg_mr,
	.reg_mr_dmabuf = relay_reg_mr_dmabuf,
	.dereg_mr = relay_dereg_mr,
	.isend = relay_isend,
	.irecv = relay_irecv,
	.iflush = relay_iflush,
	.close_send = relay_close_send,
	.close_recv = relay_close_recv,
	.check = relay_check,
	.start = relay_start,
	.route = relay_route,
	.route_abandon = relay_route_abandon,
	.routes_to = relay_routes_to,
	.report = relay_report,
	.comm_counters = relay_comm_counters,
	.counters = relay_counters,
	.describe = relay_describe,
};
