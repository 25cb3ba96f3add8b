/* SPDX-License-Identifier: MIT */
#include "relay_hop.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "netaddr.h"

enum {
	HOP_PICK, HOP_DIAL, HOP_HOLD, HOP_WAIT, HOP_REJOIN, HOP_CONNECT,
	HOP_FLUSH, HOP_DONE
};

/* A relay whose port does not answer within this long is passed over
 * when another could carry the route (the last one gets the timeout):
 * a relay that is down must not cost the next one its chance. */
#define RELAY_DIAL_SKIP_MS 2000

int64_t relay_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- kept channels ---- */

struct mesh_ctrl *relay_chan_ctrl(const struct relay_chan *ch)
{
	return ch->v ? relay_vctrl_ctrl(ch->v) : ch->ctrl;
}

int relay_chan_flush(const struct relay_chan *ch)
{
	if (ch->v)
		return relay_vctrl_flush(ch->v);
	return ch->ctrl ? relay_host->ctrl_flush(relay_host, ch->ctrl) : 0;
}

void relay_chan_close(struct relay_chan *ch)
{
	if (ch->v)
		relay_vctrl_free(ch->v);
	if (ch->ctrl)
		relay_host->ctrl_close(relay_host, ch->ctrl);
	if (ch->rj)
		relay_host->rejoin_close(relay_host, ch->rj);
	free(ch->hello);
	*ch = (struct relay_chan){ 0 };
}

/*
 * The destination takes streams dialed through its key only when NCCL
 * drives it, so this never holds up a route: the route works meanwhile,
 * and its notes (acknowledgements, the end) wait for the channel.  A
 * refusal or "no such connection" is the destination's own answer; the
 * network's errors are tried again until timeout_ms.
 */
int relay_chan_connect(struct relay_chan *ch, const char **why)
{
	struct mesh_stream_new s;
	int err;

	*why = NULL;
	if (!ch->rj)
		return 0;
	err = relay_host->rejoin_dial(relay_host, ch->rj,
				      relay_stream_index(ch->epoch, 0), &s);
	if (err == -ESRCH || err == -ECONNREFUSED || err == -EACCES ||
	    (err && err != -EAGAIN && relay_now_ns() > ch->deadline_ns)) {
		*why = err == -ESRCH ? "the destination has no such "
		       "connection any more" : "the destination did not take "
		       "the notes' channel";
		return err;
	}
	if (err)
		return -EAGAIN;
	ch->v = relay_vctrl_new(ch->rj, true, ch->epoch, &s,
				"the destination", NULL, 0);
	if (!ch->v) {
		close(s.fd);
		*why = "no memory for the notes' channel";
		return -ENOMEM;
	}
	ch->rj = NULL;		/* the channel's now */
	err = relay_vctrl_ctrl(ch->v)->send(relay_vctrl_ctrl(ch->v), ch->hello,
					    ch->hello_len);
	free(ch->hello);
	ch->hello = NULL;
	*why = err ? "the notes' channel failed" : NULL;
	return err;
}

int relay_chan_note(const struct relay_chan *ch, enum relay_note_type type,
		    uint64_t seq)
{
	struct mesh_ctrl *c = relay_chan_ctrl(ch);
	struct relay_note n = { .type = type, .seq = seq };
	uint8_t buf[RELAY_NOTE_SIZE];

	if (!c)
		return -ENOTCONN;
	return c->send(c, buf, relay_note_encode(&n, buf));
}

int relay_chan_read(const struct relay_chan *ch, struct relay_note *n,
		    const char **why)
{
	struct mesh_ctrl *c = relay_chan_ctrl(ch);
	uint8_t buf[RELAY_MSG_MAX];
	int len;

	*why = "the channel is closed";
	if (!c)
		return -ENOTCONN;
	len = c->recv(c, buf, sizeof(buf));
	if (len == -EAGAIN)
		return 0;
	if (len < 0) {
		*why = len == -ECONNRESET ? "the channel ended" :
					    "the channel failed";
		return len;
	}
	*why = relay_note_decode(buf, (size_t)len, n);
	return *why ? -EPROTO : 1;
}

/* ---- candidates ---- */

static bool visited(const struct relay_msg *m, const char *name)
{
	for (int i = 0; i < m->nvisited; i++)
		if (!strcmp(m->visited[i], name))
			return true;
	return false;
}

/* The first relay of alternative a that the request has not passed. */
static int alt_first(const struct relay_hop *h, int a)
{
	const struct relay_route *r = h->alt[a];

	for (int v = 0; v < r->nvia; v++)
		if (!visited(&h->req, r->via[v]))
			return v;
	return -1;
}

void relay_hop_init(struct relay_hop *h, struct relay_ctx *x,
		    const struct relay_msg *req,
		    const struct relay_route *const *alts, int nalt)
{
	const struct relay_conf *c = &x->conf;

	memset(h, 0, sizeof(*h));
	h->x = x;
	h->req = *req;
	h->started_ns = relay_now_ns();
	h->deadline_ns = h->started_ns + (int64_t)c->timeout_ms * 1000000;
	if (req->npath) {
		/* an explicit route: only its next relay, and no shortcut */
		const struct relay_peer *p = relay_conf_peer(c, req->path[0]);

		h->direct_tried = true;
		if (p) {
			h->cand_alt[h->ncand] = -1;
			h->cand[h->ncand++] = (int)(p - c->peers);
		}
		return;
	}
	for (int a = 0; a < nalt && h->nalt < RELAY_ALTS_MAX; a++)
		h->alt[h->nalt++] = alts[a];
	for (int a = 0; a < h->nalt && h->ncand < 64; a++) {
		int v = alt_first(h, a);
		const struct relay_peer *p = v < 0 ? NULL :
			relay_conf_peer(c, h->alt[a]->via[v]);

		if (p) {
			h->cand_alt[h->ncand] = a;
			h->cand[h->ncand++] = (int)(p - c->peers);
		}
	}
	if (h->ncand) {
		h->direct_tried = true;	/* explicit routes: no shortcut */
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
	for (int k = 0; k < nreach; k++) {
		h->cand_alt[h->ncand] = -1;
		h->cand[h->ncand++] = reach[(start + (unsigned)k) %
					    (unsigned)nreach];
	}
	for (int k = 0; k < nfar; k++) {
		h->cand_alt[h->ncand] = -1;
		h->cand[h->ncand++] = far[k];
	}
}

struct relay_hop *relay_hop_origin(struct relay_ctx *x, const void *handle,
				   uint64_t key, uint32_t attempt,
				   uint32_t flags)
{
	struct relay_hop *h = malloc(sizeof(*h));
	struct relay_msg *m = calloc(1, sizeof(*m));
	const struct relay_route *alts[RELAY_ALTS_MAX];
	struct mesh_addr a[16];
	int n = relay_host->handle_addrs(relay_host, handle, a, 16);
	int nalt = n > 0 ? relay_conf_routes(&x->conf, a, n, alts,
					     RELAY_ALTS_MAX) : 0;

	if (!h || !m) {
		free(h);
		free(m);
		return NULL;
	}
	m->type = RELAY_MSG_REQ;
	m->hops_left = x->conf.max_hops;
	m->flags = flags;
	m->key = key;
	m->attempt = attempt;
	memcpy(m->handle, handle, RELAY_HANDLE_BYTES);
	snprintf(m->origin, sizeof(m->origin), "%s", x->conf.name);
	snprintf(m->text, sizeof(m->text), "%s", x->conf.name);
	snprintf(m->visited[m->nvisited++], RELAY_NAME_MAX, "%s",
		 x->conf.name);
	relay_hop_init(h, x, m, alts, nalt);
	h->direct_tried = true;
	free(m);
	return h;
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

static bool resuming(const struct relay_hop *h)
{
	return h->req.flags & RELAY_FLAG_RESUME;
}

/* The channel the leg's module runs on: the core's (to a relay, or a
 * first route's to the destination's NCCL listen), else the one through
 * the destination's rejoin. */
static struct mesh_ctrl *leg_ctrl(struct relay_hop *h)
{
	if (h->direct && resuming(h))
		return h->v ? relay_vctrl_ctrl(h->v) : NULL;
	return h->ctrl;
}

static void drop_ctrl(struct relay_hop *h)
{
	struct mesh_ctrl *lc = leg_ctrl(h);

	if (lc && !h->comm)
		h->leg.module->abandon(h->leg.mctx, lc);
	relay_vctrl_free(h->v);
	h->v = NULL;
	if (h->rj)
		relay_host->rejoin_close(relay_host, h->rj);
	h->rj = NULL;
	if (h->ctrl)
		relay_host->ctrl_close(relay_host, h->ctrl);
	h->ctrl = NULL;
	free(h->notes_hello);
	h->notes_hello = NULL;
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
			h->dial_deadline_ns = relay_now_ns() +
					      RELAY_DIAL_SKIP_MS * 1000000ll;
			/* a route that replaces a broken one finds the
			 * destination through its rejoin: its NCCL listen
			 * may be closed by now */
			if (resuming(h)) {
				err = relay_host->rejoin_to(relay_host, NULL,
					h->req.handle, h->req.key, &h->rj);
				if (!err)
					h->stage = HOP_REJOIN;
			} else {
				err = relay_host->dial(relay_host, NULL, 0,
						       h->req.handle, &h->ctrl);
			}
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
		const struct relay_peer *p = &c->peers[h->cand[h->cur]];

		h->cur_alt = h->cand_alt[h->cur++];
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
		h->dial_deadline_ns = relay_now_ns() +
				      RELAY_DIAL_SKIP_MS * 1000000ll;
		return relay_host->dial(relay_host, p->addrs, p->naddrs, NULL,
					&h->ctrl);
	}
	return -EHOSTUNREACH;
}

static const char *target(const struct relay_hop *h)
{
	return h->peer ? h->peer->name : "the destination";
}

/* The path after the relay dialed: the request's, or the rest of the
 * alternative route it was picked from (less the relays passed). */
static void next_path(const struct relay_hop *h, struct relay_msg *m)
{
	const struct relay_route *r;
	int v;

	if (h->cur_alt < 0) {
		/* the next relay is the path's head: the rest stays */
		if (m->npath) {
			memmove(m->path[0], m->path[1],
				sizeof(m->path[0]) * (size_t)(m->npath - 1));
			m->npath--;
		}
		return;
	}
	r = h->alt[h->cur_alt];
	m->npath = 0;
	for (v = alt_first(h, h->cur_alt) + 1; v < r->nvia; v++)
		if (!visited(m, r->via[v]) && m->npath < RELAY_HOPS_MAX)
			snprintf(m->path[m->npath++], RELAY_NAME_MAX, "%s",
				 r->via[v]);
}

/* What goes to the target once the channel is up (on c; into buf only,
 * for the notes' channel of a first route, which gets LAST again, marked);
 * its length, 0 when sent. */
static size_t encode_first(struct relay_hop *h, bool notes, uint8_t *buf)
{
	struct relay_msg m = h->req;

	snprintf(m.leg, sizeof(m.leg), "%s", h->leg.module->name);
	if (notes)
		m.flags |= RELAY_FLAG_NOTES;
	if (h->direct) {
		size_t len = strlen(m.text);

		m.type = RELAY_MSG_LAST;
		snprintf(m.text + len, sizeof(m.text) - len, " -(%s)-> here",
			 m.leg);
	} else {
		m.type = RELAY_MSG_REQ;
		m.hops_left--;
		next_path(h, &m);
	}
	return relay_msg_encode(&m, buf);
}

static int send_first(struct relay_hop *h, struct mesh_ctrl *c)
{
	uint8_t buf[RELAY_MSG_MAX];

	return c->send(c, buf, encode_first(h, false, buf));
}

/* The destination itself said no: remembered over the other targets,
 * since no relay can do better. */
static void verdict(struct relay_hop *h, int status)
{
	if (status == ESRCH || (status == ECONNREFUSED && !h->verdict))
		h->verdict = status;
}

/* READY from the destination, RESP from a relay. */
static int take_answer(struct relay_hop *h)
{
	uint8_t buf[RELAY_MSG_MAX];
	char addr[UTIL_ADDR_STRLEN];
	struct mesh_ctrl *c = leg_ctrl(h);
	struct relay_msg m;
	const char *bad;
	int n = c->recv(c, buf, sizeof(buf));

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
		verdict(h, m.status);
		return -m.status;
	}
	h->flags = m.flags;
	h->pos = m.pos;
	util_addr_str(c->remote, addr, sizeof(addr));
	if (h->direct)
		snprintf(h->route, sizeof(h->route), "destination (%s %s)",
			 h->leg.module->name, addr);
	else
		snprintf(h->route, sizeof(h->route), "%s (%s %s) -> %.*s",
			 h->peer->name, h->leg.module->name, addr,
			 (int)(sizeof(h->route) / 2), m.text);
	return 0;
}

/* Stream 0 of a route that replaces another, through the destination's
 * rejoin: the channel its leg is set up on.  A refusal or "no such
 * connection" is the destination's own answer, and so is a port where
 * something else answers (below); anything else is the network's, tried
 * again until the hop's deadline. */
static int rejoin_step(struct relay_hop *h)
{
	struct mesh_stream_new s;
	struct mesh_addr peers[RELAY_ADDRS_MAX];
	int err, n;

	if (!h->rj) {
		err = relay_host->rejoin_to(relay_host, h->ctrl, NULL,
					    h->req.key, &h->rj);
		if (err) {
			note(h, "the destination: cannot rejoin (%s)",
			     strerror(-err));
			return err;
		}
	}
	err = relay_host->rejoin_dial(relay_host, h->rj,
				      relay_stream_index((int)h->req.attempt,
							 0), &s);
	if (err == -EPROTO || err == -ECONNRESET || err == -EPIPE) {
		/*
		 * No nccl-mesh listener answered at the destination's port:
		 * something else did, or it closed with no word.  The
		 * connection's process is gone there as surely as when
		 * nothing listens, and whoever asked must not learn which
		 * (a member could map the port range), so it is the same
		 * refusal, at once; only this relay's log says what
		 * answered.  A listener of ours that sheds the socket for
		 * a moment is ridden out as a refusal is: the origin gives
		 * up only after half of timeout_ms of them.
		 */
		snprintf(h->aside, sizeof(h->aside), "the destination's port "
			 "%s", err == -EPROTO ? "answered with something else "
			 "than an nccl-mesh listener" : "closed the connection "
			 "with no answer");
		err = -ECONNREFUSED;
	}
	if (err == -ESRCH || err == -ECONNREFUSED) {
		note(h, "the destination: %s", err == -ESRCH ?
		     "has no such connection (it closed or failed it)" :
		     "refused (nothing listens there: its process is gone?)");
		verdict(h, -err);
		return err;
	}
	if (err == -EACCES) {
		note(h, "the destination: refused the key");
		return err;
	}
	if (err)
		return -EAGAIN;	/* the network's: another attempt */
	n = relay_host->handle_addrs(relay_host, h->req.handle, peers,
				     RELAY_ADDRS_MAX);
	h->v = relay_vctrl_new(h->rj, true, (int)h->req.attempt, &s,
			       "the destination", peers, n > 0 ? n : 0);
	if (!h->v)
		return -ENOMEM;
	h->rj = NULL;		/* the channel's now */
	err = send_first(h, relay_vctrl_ctrl(h->v));
	if (!err)
		h->stage = HOP_WAIT;
	return err;
}

/* A first route's leg is up on the NCCL listen's channel: its notes'
 * channel goes through the key the destination keeps now, dialed by the
 * pair (relay_chan_connect). */
static int notes_later(struct relay_hop *h)
{
	int err = relay_host->rejoin_to(relay_host, h->ctrl, NULL, h->req.key,
					&h->rj);

	if (err) {
		note(h, "the destination: cannot rejoin (%s)", strerror(-err));
		return err;
	}
	h->notes_hello = malloc(RELAY_MSG_MAX);
	if (!h->notes_hello)
		return -ENOMEM;
	h->notes_hello_len = encode_first(h, true, h->notes_hello);
	h->stage = HOP_DONE;
	return 0;
}

/*
 * The destination's port brought no nccl-mesh listener: something else
 * answered there, or nothing did before the core's dial gave up.  Whoever
 * asked must not learn which (a member could scan the port range through
 * the relay), so the hop waits as for a closed port, where the dial is
 * tried again until the hop's time is up, and ends with the same note;
 * only this relay's log says what answered.
 */
static int hold(struct relay_hop *h, const char *why)
{
	snprintf(h->aside, sizeof(h->aside), "%.*s",
		 (int)sizeof(h->aside) - 1, why);
	drop_ctrl(h);
	h->stage = HOP_HOLD;
	return -EAGAIN;
}

/* One stage; -EAGAIN to come back, 0 when the stage moved on. */
static int stage_step(struct relay_hop *h)
{
	char why[1024];
	int err;

	switch (h->stage) {
	case HOP_PICK:
		err = pick(h);
		if (!err && h->stage == HOP_PICK)
			h->stage = HOP_DIAL;
		return err;
	case HOP_DIAL:
		err = relay_host->dial_progress(relay_host, h->ctrl, why,
						sizeof(why));
		if (err == -EAGAIN)
			return err;
		if (h->direct && (err == -EPROTO || err == -ETIMEDOUT))
			return hold(h, why);
		if (err) {
			note(h, "%s: %s", target(h), why);
			return err;
		}
		err = send_first(h, h->ctrl);
		if (!err)
			h->stage = HOP_WAIT;
		return err;
	case HOP_HOLD:
		return -EAGAIN;
	case HOP_WAIT:
		err = take_answer(h);
		if (!err)
			h->stage = HOP_CONNECT;
		return err;
	case HOP_REJOIN:
		return rejoin_step(h);
	case HOP_CONNECT:
		err = h->leg.module->connect(h->leg.mctx, h->leg.dev,
					     leg_ctrl(h), &h->comm);
		if (err && err != -EAGAIN)
			note(h, "%s: %s could not set up the leg (%s)",
			     target(h), h->leg.module->name, strerror(-err));
		if (!err && h->comm)
			h->stage = HOP_FLUSH;
		return err ? err : (h->comm ? 0 : -EAGAIN);
	case HOP_FLUSH:
		err = h->v ? relay_vctrl_flush(h->v) :
			     relay_host->ctrl_flush(relay_host, h->ctrl);
		if (err)
			return err;
		if (h->direct && !resuming(h))
			return notes_later(h);
		h->stage = HOP_DONE;
		return 0;
	}
	return 0;
}

int relay_hop_step(struct relay_hop *h)
{
	int err = 0;

	while (h->stage != HOP_DONE) {
		bool picking = h->stage == HOP_PICK;

		err = stage_step(h);
		if (err == -EAGAIN) {
			int64_t now = relay_now_ns();
			bool skip = (h->stage == HOP_DIAL ||
				     h->stage == HOP_HOLD) &&
				    h->cur < h->ncand &&
				    now > h->dial_deadline_ns;
			char a[UTIL_ADDR_STRLEN] = "";

			if (now > h->deadline_ns || skip) {
				if (h->peer)
					util_addr_str(&h->peer->addrs[0], a,
						      sizeof(a));
				note(h, "%s%s%s: no answer within %lld ms",
				     target(h), a[0] ? " at " : "", a,
				     now > h->deadline_ns ?
				     (long long)(now - h->started_ns) / 1000000 :
				     RELAY_DIAL_SKIP_MS);
				err = now > h->deadline_ns ? -ETIMEDOUT :
							     -EHOSTUNREACH;
			}
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
		if (h->verdict == ESRCH)
			return -ESRCH;	/* no route can do better */
		if (err == -ETIMEDOUT || picking)
			return h->verdict ? -h->verdict :
			       err == -ETIMEDOUT ? err : -EHOSTUNREACH;
		h->stage = HOP_PICK;
	}
	/* the destination's NCCL listen's channel has done its part */
	if (h->direct && h->ctrl) {
		relay_host->ctrl_close(relay_host, h->ctrl);
		h->ctrl = NULL;
	}
	return 0;
}

void relay_hop_take(struct relay_hop *h, struct relay_chan *ch)
{
	*ch = (struct relay_chan){
		.ctrl = h->ctrl, .v = h->v, .rj = h->rj,
		.hello = h->notes_hello, .hello_len = h->notes_hello_len,
		.epoch = (int)h->req.attempt,
		.deadline_ns = relay_now_ns() +
			       (int64_t)h->x->conf.timeout_ms * 1000000,
	};
	h->ctrl = NULL;
	h->v = NULL;
	h->rj = NULL;
	h->notes_hello = NULL;
}

void relay_hop_free(struct relay_hop *h)
{
	if (h->comm && h->stage != HOP_DONE) {
		h->leg.module->close_send(h->comm);
		h->comm = NULL;
	}
	drop_ctrl(h);
}
