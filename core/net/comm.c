/* SPDX-License-Identifier: MIT */
/*
 * What NCCL holds as a comm, and the module's exchange that builds one,
 * the same for connect and accept: the module steps over the control
 * channel, the channel flushes, the comm is made and its path logged.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "metrics.h"
#include "netaddr.h"
#include "net_priv.h"

/* A direct connection's path: what its INFO line and tools show. */
static struct core_comm_path direct_path(const struct core_rail *rail,
					 const struct core_member *m,
					 const struct core_conn *c)
{
	const struct core_state *st = core_current_state();
	uint64_t mine = rail->fabric_id, theirs = c->peer_fabric_id;
	enum core_path_class pc = core_path_class(mine, theirs,
						  st->max_rails);
	struct core_comm_path p = {
		.module = m->module->name,
		/* a layered module's accept: the last relay is the one
		 * dialing */
		.path_class = m->module->has_route ? "relayed" :
			core_path_class_name(pc),
		.direct = 1, .local = c->local, .remote = c->remote,
		.fabric_id = mine, .peer_fabric_id = theirs };

	/* The handshake and the module's setup crossed the path, so the
	 * kernel knows its round trip; a relayed one's is the last hop's. */
	if (!m->module->has_route && !core_conn_rtt_us(c, &p.rtt_us))
		core_rtt_note(pc, p.rtt_us, &st->tuning);
	return p;
}

static void log_connection(const char *dir, const struct core_rail *rail,
			   const struct core_comm *comm)
{
	const struct core_comm_path *p = &comm->path;
	char local[UTIL_ADDR_STRLEN], remote[UTIL_ADDR_STRLEN], rtt[32] = "";

	if (p->rtt_us)
		snprintf(rtt, sizeof(rtt), ", rtt %u us", p->rtt_us);
	CORE_INFO("%s %s: %s, %s -> %s, %s%s (fabricId %llu -> %llu)", dir,
		  rail->name, p->module,
		  util_addr_str(&p->local, local, sizeof(local)),
		  util_addr_str(&p->remote, remote, sizeof(remote)),
		  p->path_class, rtt, (unsigned long long)p->fabric_id,
		  (unsigned long long)p->peer_fabric_id);
}

/*
 * The peer its counters are labelled with: the address it reached
 * without the port (one series per host, not per connection), or a
 * relayed comm's destination as its module describes it.
 */
static void metrics_peer(const struct core_comm *c, char *buf, size_t cap)
{
	struct mesh_conn_info info = { 0 };
	struct mesh_addr a;

	buf[0] = '\0';
	if (c->path.direct) {
		a = c->path.remote;
		a.port = 0;
		util_addr_str(&a, buf, cap);
		return;
	}
	if (c->desc->describe(c->mcomm, &info) || info.nhops < 1 ||
	    info.nhops > MESH_CONN_HOPS_MAX)
		return;
	info.hops[info.nhops - 1].addr[MESH_CONN_ADDR_MAX - 1] = '\0';
	if (util_addr_parse(info.hops[info.nhops - 1].addr, &a))
		return;
	a.port = 0;
	util_addr_str(&a, buf, cap);
}

struct core_comm *core_comm_new(const struct mesh_module *d, void *mcomm,
				const struct core_comm_path *path, bool send)
{
	struct core_comm *c = malloc(sizeof(*c));
	char peer[UTIL_ADDR_STRLEN];

	if (c) {
		c->desc = d;
		c->mcomm = mcomm;
		c->path = *path;
		metrics_peer(c, peer, sizeof(peer));
		c->metrics = core_metrics_comm_open(d, mcomm, path->module,
						    peer, send);
		core_metrics_comm_rtt(c->metrics, path->rtt_us);
	}
	return c;
}

int core_net_conn_info(void *comm, struct mesh_conn_info *info)
{
	const struct core_comm *c = comm;
	const struct core_comm_path *p;

	if (!c || !info)
		return -EINVAL;
	p = &c->path;
	memset(info, 0, sizeof(*info));
	snprintf(info->module, sizeof(info->module), "%s", p->module);
	snprintf(info->path_class, sizeof(info->path_class), "%s",
		 p->path_class);
	if (p->direct) {
		util_addr_str(&p->local, info->local, sizeof(info->local));
		util_addr_str(&p->remote, info->remote, sizeof(info->remote));
		info->fabric_id = p->fabric_id;
		info->peer_fabric_id = p->peer_fabric_id;
	}
	return c->desc->describe(c->mcomm, info);
}

/* The module's comm is built; the control channel still has to deliver
 * what the module queued last before the comm goes to NCCL. */
static int finish_step(const struct core_rail *rail,
		       const struct core_member *m, struct core_conn *c,
		       void **mcomm, void **comm)
{
	const struct mesh_module *d = m->module->desc;
	int err = core_ctrl_flush(c);

	if (err == -EAGAIN && core_now_ns() <= c->deadline_ns)
		return 0;
	if (err == -EAGAIN)
		err = -ETIMEDOUT;
	if (!err) {
		struct core_comm_path path = direct_path(rail, m, c);

		*comm = core_comm_new(d, *mcomm, &path, c->connector);
		if (*comm)
			return 0;
		err = -ENOMEM;
	}
	CORE_WARN("%s with %s: module %s: the last control message: %s",
		  c->connector ? "connect" : "accept", c->peer_text,
		  m->module->name, err == -ETIMEDOUT ? "not sent in time" :
		  strerror(-err));
	(c->connector ? d->close_send : d->close_recv)(*mcomm);
	*mcomm = NULL;
	return err;
}

/*
 * Runs the chosen module's exchange.  0 with *comm set when done, 0 with
 * *comm NULL while in progress, else the error (logged).
 */
int core_module_step(const char *dir, const struct core_rail *rail,
		       const struct core_member *m, struct core_conn *c,
		       void **mcomm, void **comm)
{
	const struct mesh_module *d = m->module->desc;
	int err = 0;

	/* A module logs its own errors where it decides them (module.h);
	 * the core logs only what it decides itself. */
	if (!*mcomm)
		err = (c->connector ? d->connect : d->accept)(
			m->module->mctx, m->dev, &c->ctrl, mcomm);
	if (!err && *mcomm) {
		err = finish_step(rail, m, c, mcomm, comm);
	} else if (!err && core_now_ns() > c->deadline_ns) {
		CORE_WARN("%s %s with %s: module %s did not finish its setup "
			  "within %d ms", dir, rail->name, c->peer_text,
			  m->module->name, core_current_state()->connect_timeout_ms);
		err = -ETIMEDOUT;
	}
	if (*comm)
		log_connection(dir, rail, *comm);
	return err == -EAGAIN ? 0 : err;
}


int core_net_close_comm(void *comm, int send)
{
	struct core_comm *c = comm;
	int err;

	if (!c)
		return 0;
	/* its last counters into the totals, while the comm is there */
	core_metrics_comm_close(c->metrics);
	err = send ? c->desc->close_send(c->mcomm) :
		     c->desc->close_recv(c->mcomm);
	free(c);
	return err;
}
