/* SPDX-License-Identifier: MIT */
#include "relay_hop.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "netaddr.h"

enum { HOP_PICK, HOP_DIAL, HOP_WAIT, HOP_CONNECT, HOP_FLUSH, HOP_DONE };

int64_t relay_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool visited(const struct relay_msg *m, const char *name)
{
	for (int i = 0; i < m->nvisited; i++)
		if (!strcmp(m->visited[i], name))
			return true;
	return false;
}

void relay_hop_init(struct relay_hop *h, struct relay_ctx *x,
		    const struct relay_msg *req)
{
	const struct relay_conf *c = &x->conf;

	memset(h, 0, sizeof(*h));
	h->x = x;
	h->req = *req;
	h->deadline_ns = relay_now_ns() + (int64_t)c->timeout_ms * 1000000;
	if (req->npath) {
		/* an explicit route: only its next relay, and no shortcut */
		const struct relay_peer *p = relay_conf_peer(c, req->path[0]);

		h->direct_tried = true;
		if (p)
			h->cand[h->ncand++] = (int)(p - c->peers);
		return;
	}
	/* every other relay: those this host reaches first, starting at a
	 * different one each time, so that the connections of a pair with
	 * two relays (a ring: both neighbours) spread evenly; then the
	 * others, so that the reason each is unreachable is noted */
	int reach[64], nreach = 0, far[64], nfar = 0;
	unsigned start;

	for (int i = 0; i < c->npeers && nreach + nfar < 64; i++) {
		struct mesh_leg leg;
		char why[8];

		if (!strcmp(c->peers[i].name, c->name) ||
		    visited(req, c->peers[i].name))
			continue;
		if (relay_host->leg_to_addrs(relay_host, -1, c->peers[i].addrs,
					     c->peers[i].naddrs, &leg, why,
					     sizeof(why)))
			far[nfar++] = i;
		else
			reach[nreach++] = i;
	}
	start = atomic_fetch_add(&x->next_pick, 1);
	for (int k = 0; k < nreach; k++)
		h->cand[h->ncand++] = reach[(start + (unsigned)k) %
					    (unsigned)nreach];
	for (int k = 0; k < nfar; k++)
		h->cand[h->ncand++] = far[k];
}

__attribute__((format(printf, 2, 3)))
static void note(struct relay_hop *h, const char *fmt, ...)
{
	va_list ap;

	if (h->tried_len >= sizeof(h->tried) - 1)
		return;
	if (h->tried_len)
		h->tried_len += (size_t)snprintf(h->tried + h->tried_len,
			sizeof(h->tried) - h->tried_len, "; ");
	va_start(ap, fmt);
	if (h->tried_len < sizeof(h->tried))
		h->tried_len += (size_t)vsnprintf(h->tried + h->tried_len,
			sizeof(h->tried) - h->tried_len, fmt, ap);
	va_end(ap);
}

static void drop_ctrl(struct relay_hop *h)
{
	if (h->ctrl) {
		if (!h->comm)
			h->leg.module->abandon(h->leg.mctx, h->ctrl);
		relay_host->ctrl_close(relay_host, h->ctrl);
		h->ctrl = NULL;
	}
}

/* Next target: the destination itself when a module here reaches it,
 * else the next relay we reach. */
static int pick(struct relay_hop *h)
{
	const struct relay_conf *c = &h->x->conf;
	char why[768];
	int err;

	if (!h->direct_tried) {
		h->direct_tried = true;
		err = relay_host->leg_to_handle(relay_host, -1, h->req.handle,
						&h->leg, why, sizeof(why));
		if (!err) {
			h->direct = true;
			h->peer = NULL;
			err = relay_host->dial(relay_host, NULL, 0,
					       h->req.handle, &h->ctrl);
			if (err == -EPERM)
				note(h, "the destination: its handle names no "
				     "port where an nccl-mesh listener can be "
				     "(port_range)");
			else if (err)
				note(h, "the destination: %s", strerror(-err));
			return err;
		}
		note(h, "%s: no module reaches the destination (%s)", c->name,
		     why);
	}
	h->direct = false;
	while (h->cur < h->ncand) {
		const struct relay_peer *p = &c->peers[h->cand[h->cur++]];

		if (h->req.hops_left < 1) {
			note(h, "%s: hop limit reached", p->name);
			continue;
		}
		err = relay_host->leg_to_addrs(relay_host, -1, p->addrs,
					       p->naddrs, &h->leg, why,
					       sizeof(why));
		if (err) {
			note(h, "%s: unreachable from %s (%s)", p->name,
			     c->name, why);
			continue;
		}
		h->peer = p;
		return relay_host->dial(relay_host, p->addrs, p->naddrs, NULL,
					&h->ctrl);
	}
	return -EHOSTUNREACH;
}

static const char *target(const struct relay_hop *h)
{
	return h->peer ? h->peer->name : "the destination";
}

/* What goes to the target once the channel is up. */
static int send_first(struct relay_hop *h)
{
	struct relay_msg m = h->req;
	uint8_t buf[RELAY_MSG_MAX];

	snprintf(m.leg, sizeof(m.leg), "%s", h->leg.module->name);
	if (h->direct) {
		size_t len = strlen(m.text);

		m.type = RELAY_MSG_LAST;
		snprintf(m.text + len, sizeof(m.text) - len, " -(%s)-> here",
			 m.leg);
	} else {
		m.type = RELAY_MSG_REQ;
		m.hops_left--;
		/* the next relay is the path's head: the rest stays */
		if (m.npath) {
			memmove(m.path[0], m.path[1],
				sizeof(m.path[0]) * (size_t)(m.npath - 1));
			m.npath--;
		}
	}
	return h->ctrl->send(h->ctrl, buf, relay_msg_encode(&m, buf));
}

/* READY from the destination, RESP from a relay. */
static int take_answer(struct relay_hop *h)
{
	uint8_t buf[RELAY_MSG_MAX];
	char addr[UTIL_ADDR_STRLEN];
	struct relay_msg m;
	const char *bad;
	int n = h->ctrl->recv(h->ctrl, buf, sizeof(buf));

	if (n == -EAGAIN)
		return -EAGAIN;
	if (n < 0) {
		note(h, "%s: the channel failed (%s)", target(h),
		     strerror(-n));
		return n;
	}
	bad = relay_msg_decode(buf, (size_t)n, &m);
	if (!bad && m.type != (h->direct ? RELAY_MSG_READY : RELAY_MSG_RESP))
		bad = "an answer of the wrong type";
	if (bad) {
		note(h, "%s: sent %s", target(h), bad);
		return -EPROTO;
	}
	if (m.status) {
		note(h, "%s: refused: %s", target(h), m.text);
		return -m.status;
	}
	h->flags = m.flags;
	util_addr_str(h->ctrl->remote, addr, sizeof(addr));
	if (h->direct)
		snprintf(h->route, sizeof(h->route), "destination (%s %s)",
			 h->leg.module->name, addr);
	else
		snprintf(h->route, sizeof(h->route), "%s (%s %s) -> %.*s",
			 h->peer->name, h->leg.module->name, addr,
			 (int)(sizeof(h->route) / 2), m.text);
	return 0;
}

/* One stage; -EAGAIN to come back, 0 when the stage moved on. */
static int stage_step(struct relay_hop *h)
{
	char why[1024];
	int err;

	switch (h->stage) {
	case HOP_PICK:
		err = pick(h);
		if (!err)
			h->stage = HOP_DIAL;
		return err;
	case HOP_DIAL:
		err = relay_host->dial_progress(relay_host, h->ctrl, why,
						sizeof(why));
		if (err == -EAGAIN)
			return err;
		if (err) {
			note(h, "%s: %s", target(h), why);
			return err;
		}
		err = send_first(h);
		if (!err)
			h->stage = HOP_WAIT;
		return err;
	case HOP_WAIT:
		err = take_answer(h);
		if (!err)
			h->stage = HOP_CONNECT;
		return err;
	case HOP_CONNECT:
		err = h->leg.module->connect(h->leg.mctx, h->leg.dev, h->ctrl,
					     &h->comm);
		if (err && err != -EAGAIN)
			note(h, "%s: %s could not set up the leg (%s)",
			     target(h), h->leg.module->name, strerror(-err));
		if (!err && h->comm)
			h->stage = HOP_FLUSH;
		return err ? err : (h->comm ? 0 : -EAGAIN);
	case HOP_FLUSH:
		err = relay_host->ctrl_flush(relay_host, h->ctrl);
		if (!err)
			h->stage = HOP_DONE;
		return err;
	}
	return 0;
}

int relay_hop_step(struct relay_hop *h)
{
	int err = 0;

	while (h->stage != HOP_DONE) {
		err = stage_step(h);
		if (err == -EAGAIN && relay_now_ns() > h->deadline_ns) {
			char a[UTIL_ADDR_STRLEN] = "";

			if (h->peer)
				util_addr_str(&h->peer->addrs[0], a, sizeof(a));
			note(h, "%s%s%s: no answer within %d ms", target(h),
			     a[0] ? " at " : "", a, h->x->conf.timeout_ms);
			err = -ETIMEDOUT;
		}
		if (err == -EAGAIN)
			return err;
		if (!err)
			continue;
		/* this target failed: the next one, unless that was all */
		if (h->comm) {
			h->leg.module->close_send(h->comm);
			h->comm = NULL;
		}
		drop_ctrl(h);
		if (err == -ETIMEDOUT || h->stage == HOP_PICK)
			return err == -ETIMEDOUT ? err : -EHOSTUNREACH;
		h->stage = HOP_PICK;
	}
	drop_ctrl(h);
	return 0;
}

void relay_hop_free(struct relay_hop *h)
{
	if (h->comm && h->stage != HOP_DONE) {
		h->leg.module->close_send(h->comm);
		h->comm = NULL;
	}
	drop_ctrl(h);
}
