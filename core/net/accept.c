/* SPDX-License-Identifier: MIT */
/*
 * NCCL's accept: a dialer taken from the control listener, the member
 * (or the layered module) its module tag names, that module's exchange.
 */
#include <errno.h>
#include <stddef.h>

#include "core_log.h"
#include "net_priv.h"

static const struct core_member *member_by_tag(const struct core_rail *rail,
					       uint16_t tag)
{
	for (int i = 0; i < rail->nmembers; i++)
		if (core_module_tag(rail->members[i].module->name) == tag)
			return &rail->members[i];
	return NULL;
}

/* A connection a layered module set up (a relay's last leg): its accept
 * gets the rail as its device. */
static const struct core_member *layered_by_tag(struct core_listen *ml,
						uint16_t tag)
{
	struct core_module *layer = core_layer_module(core_current_state());

	if (!layer || core_module_tag(layer->name) != tag)
		return NULL;
	ml->layered = (struct core_member){ .module = layer,
					    .dev = ml->rail->rail };
	return &ml->layered;
}

int core_net_accept(void *listen_comm, void **recv_comm)
{
	struct core_listen *ml = listen_comm;
	int err;

	*recv_comm = NULL;
	if (!ml->conn) {
		err = core_ctrl_accept(ml->lc, core_current_state()->connect_timeout_ms,
				       &ml->conn);
		if (err)
			return err == -EAGAIN ? 0 : err;
		ml->member = member_by_tag(ml->rail, ml->conn->module_tag);
		if (!ml->member)
			ml->member = layered_by_tag(ml, ml->conn->module_tag);
		if (!ml->member) {
			CORE_WARN("accept %s: %s asked for a module this rail "
				  "does not have (different module lists on "
				  "the two hosts?)", ml->rail->name,
				  ml->conn->peer_text);
			core_conn_free(ml->conn);
			ml->conn = NULL;
			return -ENOPROTOOPT;
		}
	}
	err = core_module_step("recv", ml->rail, ml->member, ml->conn, &ml->mcomm,
			  recv_comm);
	if (err || *recv_comm) {
		if (err && !ml->mcomm)
			ml->member->module->desc->abandon(
				ml->member->module->mctx, &ml->conn->ctrl);
		core_conn_free(ml->conn);
		ml->conn = NULL;
		ml->mcomm = NULL;
	}
	return err;
}
