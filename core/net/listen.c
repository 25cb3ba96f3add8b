/* SPDX-License-Identifier: MIT */
/*
 * NCCL's listen: a control listener on the rail, and the handle that
 * tells peers where to dial it: the advertised (NAT) addresses with their
 * mapped ports, our own addresses, or both.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "netaddr.h"
#include "net_priv.h"

static void add_addr(struct core_handle *h, const struct mesh_addr *a,
		     int port)
{
	if (h->naddrs == CORE_HANDLE_ADDRS_MAX)
		return;
	h->addrs[h->naddrs] = *a;
	h->addrs[h->naddrs++].port = (uint16_t)port;
}

/* Local addresses: the rail's members', IPv4 first (they take less room
 * in the handle); members with no IP (verbs-only) fall back to every
 * interface's. */
static void add_local_addrs(const struct core_rail *rail, uint16_t port,
			    struct core_handle *h)
{
	const struct mesh_dev_props *p = &rail->props;
	struct util_netif *ifs = NULL;
	int nifs, before = h->naddrs;

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < p->naddrs; i++)
			if ((p->addrs[i].family == AF_INET) == !pass)
				add_addr(h, &p->addrs[i], port);
	if (h->naddrs > before)
		return;
	nifs = util_netif_list("", &ifs);
	for (int i = 0; i < nifs; i++)
		for (int a = 0; a < ifs[i].naddrs; a++)
			add_addr(h, &ifs[i].addrs[a], port);
	free(ifs);
}

static int handle_addresses(const struct core_rail *rail, uint16_t port,
			    struct core_handle *h)
{
	const struct core_advertise *adv = &core_current_state()->advertise;
	int ext = core_advertise_port(adv, port);

	if (adv->naddrs && (ext < 1 || ext > 65535)) {
		CORE_WARN("listen on %s: port %u maps to %d, outside 1..65535 "
			  "(advertise_port_offset, advertise_ports)",
			  rail->name, port, ext);
		return -ENOTSUP;	/* the configuration cannot work */
	}
	for (int i = 0; i < adv->naddrs; i++)
		add_addr(h, &adv->addrs[i], ext);
	if (!adv->naddrs || adv->local)
		add_local_addrs(rail, port, h);
	return 0;
}

int core_net_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
	const struct core_rail *rail = core_net_rail(dev);
	struct core_listen *ml;
	struct core_handle h = { 0 };
	uint16_t port;
	int err;

	(void)ctx;
	if (!rail)
		return -EINVAL;
	ml = calloc(1, sizeof(*ml));
	if (!ml)
		return -ENOMEM;
	h.nonce = core_random_u64();
	h.fabric_id = rail->fabric_id;
	/* core_fabric_build refused rails with more members than this */
	for (int i = 0; i < rail->nmembers; i++)
		h.members[h.nmembers++] =
			core_module_tag(rail->members[i].module->name);
	err = core_ctrl_listen(dev, h.nonce, core_current_state()->port_low,
			       core_current_state()->port_high, &port, &ml->lc);
	if (err) {
		/* NCCL's listen without a port: a person must free one */
		if (core_current_state()->port_low)
			CORE_WARN("no free port to listen on in range %d-%d: %s",
				  core_current_state()->port_low,
				  core_current_state()->port_high,
				  strerror(-err));
		else
			CORE_WARN("cannot listen: %s", strerror(-err));
		free(ml);
		return err;
	}
	err = handle_addresses(rail, port, &h);
	if (!err)
		err = core_handle_encode(&h, handle);
	if (err < 0) {
		if (err == -E2BIG)
			CORE_WARN("listen on %s: no address fits in the handle",
				  rail->name);
		core_ctrl_close_listen(ml->lc);
		free(ml);
		return err;
	}
	ml->rail = rail;
	*listen_comm = ml;
	return 0;
}

int core_net_close_listen(void *listen_comm)
{
	struct core_listen *ml = listen_comm;

	if (!ml)
		return 0;
	if (ml->conn && ml->member)
		ml->member->module->desc->abandon(ml->member->module->mctx,
						  &ml->conn->ctrl);
	core_conn_free(ml->conn);
	core_ctrl_close_listen(ml->lc);
	free(ml);
	return 0;
}
