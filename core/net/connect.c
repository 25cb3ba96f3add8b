/* SPDX-License-Identifier: MIT */
/*
 * NCCL's connect: the handle decoded, the member that reaches the peer
 * picked (or the layered module's route when none does), the control
 * channel dialed and the module's exchange stepped, one call at a time,
 * the state kept in the connects table (connects.c) between calls.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "net_priv.h"
#include "pick.h"

/* No member of the rail reaches the peer: the layered module (relay) may
 * still carry the connection, else this is the one line that says why. */
static int connect_unreached(const struct core_rail *rail,
			     struct core_connecting *cs)
{
	cs->layer = core_layer_module(core_current_state());
	if (cs->layer) {
		CORE_INFO("connect %s: %s; %s carries it", rail->name,
			  cs->unreached, cs->layer->name);
		return 0;
	}
	CORE_WARN("connect %s: %s; a peer that no link joins needs the relay "
		  "module in 'modules'", rail->name, cs->unreached);
	return -ENOPROTOOPT;	/* the two hosts' modules or links differ */
}

/*
 * NCCL's traffic class goes to the module with the channel: only the
 * connecting side has one (module.h, 1.9).  A routed connection goes
 * without it: the layered module dials its legs itself.
 */
static void connect_hint(struct core_conn *conn, int traffic_class)
{
	if (traffic_class < 0)
		return;
	conn->ctrl.traffic_class_set = 1;
	conn->ctrl.traffic_class = traffic_class;
}

static int connect_start(const struct core_rail *rail, const uint8_t *handle,
			 int traffic_class, struct core_connecting **out)
{
	struct core_connecting *cs;
	struct core_handle h;
	const char *why;
	int err = core_handle_decode(handle, &h, &why);

	if (err) {
		CORE_WARN("connect %s: the handle is not usable: %s", rail->name,
			  why);
		return -EINVAL;	/* not a handle of ours: a wrong argument */
	}
	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	cs->layer = core_layer_module(core_current_state());
	if (cs->layer && cs->layer->desc->routes_to(cs->layer->mctx,
						    rail->rail, handle))
		snprintf(cs->unreached, sizeof(cs->unreached),
			 "the config routes the peer through %s",
			 cs->layer->name);
	else
		cs->member = core_pick_member(core_current_state(), rail, &h,
					      cs->unreached,
					      sizeof(cs->unreached));
	if (!cs->member) {
		err = connect_unreached(rail, cs);
	} else {
		cs->layer = NULL;
		err = core_ctrl_dial(&h, rail->props.addrs, rail->props.naddrs,
				     core_module_tag(cs->member->module->name),
				     rail->fabric_id,
				     core_current_state()->connect_timeout_ms, &cs->conn);
		if (!err)
			connect_hint(cs->conn, traffic_class);
	}
	if (err) {
		free(cs);
		return err;
	}
	*out = cs;
	return 0;
}

/* The layered module's route: it logs its own errors and the route. */
static int route_step(const struct core_rail *rail,
		      struct core_connecting *cs, const void *handle,
		      void **send_comm)
{
	const struct mesh_module *d = cs->layer->desc;
	void *mcomm = NULL;
	int err = d->route(cs->layer->mctx, rail->rail, handle, cs->unreached,
			   &cs->route_state, &mcomm);

	if (err == -EAGAIN)
		return 0;
	if (!err && mcomm) {
		struct core_comm_path path = { .module = cs->layer->name,
					       .path_class = "relayed" };

		cs->route_state = NULL;	/* the comm took it */
		*send_comm = core_comm_new(d, mcomm, &path, true);
		if (!*send_comm) {
			d->close_send(mcomm);
			return -ENOMEM;
		}
	}
	return err;
}

static int connect_step(const struct core_rail *rail,
			struct core_connecting *cs, const void *handle,
			void **send_comm)
{
	int err;

	if (cs->layer)
		return route_step(rail, cs, handle, send_comm);
	if (!cs->dialed) {
		err = core_ctrl_dial_progress(cs->conn);
		if (err == -EAGAIN)
			return 0;
		/* the dialer decides and notes, per address; this is
		 * the one line that says so */
		if (err == -ETIMEDOUT)
			CORE_WARN("connect %s: cannot reach the peer within "
				  "%d ms: tried %s", rail->name,
				  core_current_state()->connect_timeout_ms,
				  core_conn_tried(cs->conn));
		else if (err)
			CORE_WARN("connect %s: setup with the peer failed (%s): "
				  "tried %s", rail->name, strerror(-err),
				  core_conn_tried(cs->conn));
		if (err)
			return err;
		cs->dialed = 1;
		/* what the module sizes its connection by, from its first
		 * call on (module.h, 1.12) */
		if (core_conn_rtt_us(cs->conn, &cs->conn->ctrl.rtt_us))
			cs->conn->ctrl.rtt_us = 0;
	}
	return core_module_step("send", rail, cs->member, cs->conn, &cs->mcomm,
			   send_comm);
}

int core_net_connect(void *ctx, int dev, void *handle, int traffic_class,
		     void **send_comm)
{
	const struct core_rail *rail = core_net_rail(dev);
	uint8_t *slot = (uint8_t *)handle + CORE_HANDLE_STATE_OFFSET;
	struct connect_entry *e = NULL;
	struct core_connecting *cs;
	bool done;
	int err;

	*send_comm = NULL;
	if (!rail)
		return -EINVAL;
	err = core_connects_claim(ctx, dev, handle, &e);
	if (err == -EBUSY)
		return 0;	/* another call on this handle steps it */
	if (err) {
		/* whatever the slot held, it was not ours */
		err = connect_start(rail, handle, traffic_class, &cs);
		if (err)
			return err;
		err = core_connects_add(ctx, dev, handle, cs, &e);
		if (err) {
			core_connecting_free(cs);
			return err;
		}
		memcpy(slot, &e->key, sizeof(e->key));
	}
	err = connect_step(rail, e->cs, handle, send_comm);
	done = err || *send_comm;
	if (done) {
		if (*send_comm)
			e->cs->mcomm = NULL;	/* now owned by the comm */
		memset(slot, 0, sizeof(e->key));
	}
	core_connects_release(e, done);
	return err;
}
