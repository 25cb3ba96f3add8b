/* SPDX-License-Identifier: MIT */
/*
 * Listeners: one socket per rail and process, shared by every NCCL listen
 * on the rail.  New sockets pass the gate (ctrl_gate.c), then go to the
 * listen their hello names.
 */
#include "ctrl_priv.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrl_gate.h"
#include "core_log.h"
#include "netaddr.h"

/* A socket that connected to a listener and has not said who it is yet. */
struct incoming {
	int fd;
	uint64_t seq;		/* accept order on its listener */
	int64_t accepted_ns;
	struct mesh_addr from;
	struct ctrl_gate gate;
};

struct routed {
	int fd;
	uint64_t seq;
	struct ctrl_hello h;
	struct mesh_addr from;
	uint8_t secret[CORE_AUTH_SECRET_SIZE];	/* from the handshake */
	size_t secret_len;
};

struct core_listener {
	int fd;
	int rail;
	uint16_t port;
	int refs;
	struct incoming *in;	/* at most pending_max */
	int nin, pending_max;
	uint64_t next_seq;
	struct ctrl_refusal_log log;
	struct core_listen_comm *comms;
	struct mesh_rejoin *rejoins;	/* each holds a reference */
	struct core_listener *next;
};

struct core_listen_comm {
	struct core_listener *l;
	uint64_t nonce;
	struct core_listen_comm *next;
	struct routed *q;
	int nq;
	/* Control connections routed here, oldest first: several connects
	 * may reach one listen before its accepts come.  Given ones stay
	 * listed so that their streams are still routed to them. */
	struct ctrl_conn *conns;
	int nconns;
};

/* Connections one listen holds before its accepts take them, in all and
 * from one source.  Those an accept took are the module's to bound (a
 * relay's setups), not these. */
#define LISTEN_CONNS_MAX 64
#define LISTEN_CONNS_PER_SOURCE 8

/* Listeners are touched only while connections are set up, never on the
 * data path, so one lock for all of them is enough. */
static pthread_mutex_t listeners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct core_listener *listeners;
/* rejoins closed here lately: their late REJOINs are refused quietly */
static struct ctrl_closed_set rejoins_closed;

/* A new dual-stack (else IPv4) socket listening on port (0: any); its fd
 * or -errno. */
static int listen_on(int port)
{
	int family = AF_INET6, fd, zero = 0, one = 1, err = 0;
	struct sockaddr_storage ss;
	struct mesh_addr any = { .port = (uint16_t)port };
	socklen_t len;

	fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
				 sizeof(zero))) {
		if (fd >= 0)
			close(fd);
		family = AF_INET;
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	}
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	any.family = (uint8_t)family;
	len = util_addr_to_sockaddr(&any, &ss);
	/* bind and listen both claim the port: two processes may bind the
	 * same one (SO_REUSEADDR) and only the first to listen keeps it */
	if (bind(fd, (struct sockaddr *)&ss, len) || listen(fd, SOMAXCONN))
		err = -errno;
	if (!err)
		err = ctrl_set_nonblocking(fd);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/*
 * Lowest free port of the range, so operators can predict it.  A failure
 * is the caller's to log: NCCL's listen needs a person then, a module's
 * service that another process on the host serves does not.
 */
static int open_listener_socket(int port_low, int port_high, uint16_t *port)
{
	struct mesh_addr bound;
	int fd = listen_on(port_low);

	for (int p = port_low + 1; port_low && fd == -EADDRINUSE &&
	     p <= port_high; p++)
		fd = listen_on(p);
	if (fd < 0)
		return fd;
	ctrl_sock_name(fd, &bound, 0);
	*port = bound.port;
	return fd;
}

/* Bounded by the descriptors this process may open, so that sockets that
 * never say who they are cannot take them all. */
static int pending_max(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return ctrl_gate_pending_max(0);
	return ctrl_gate_pending_max(rl.rlim_cur == RLIM_INFINITY ?
					     1 << 20 : (long)rl.rlim_cur);
}

int core_ctrl_listen(int rail, uint64_t nonce, int port_low, int port_high,
		     uint16_t *port_out, struct core_listen_comm **out)
{
	struct core_listen_comm *lc = calloc(1, sizeof(*lc));
	struct core_listener *l;
	int err = 0;

	if (!lc)
		return -ENOMEM;
	pthread_mutex_lock(&listeners_lock);
	for (l = listeners; l && l->rail != rail; l = l->next)
		;
	if (!l) {
		l = calloc(1, sizeof(*l));
		err = l ? open_listener_socket(port_low, port_high, &l->port) :
			  -ENOMEM;
		if (err < 0) {
			free(l);
			goto out_unlock;
		}
		l->fd = err;
		err = 0;
		l->pending_max = pending_max();
		l->rail = rail;
		l->next = listeners;
		listeners = l;
	}
	l->refs++;
	lc->l = l;
	lc->nonce = nonce;
	lc->next = l->comms;
	l->comms = lc;
	*port_out = l->port;
	*out = lc;
out_unlock:
	pthread_mutex_unlock(&listeners_lock);
	if (err)
		free(lc);
	return err;
}

static void log_summary(struct core_listener *l, int64_t now, int force)
{
	char buf[768];

	if (ctrl_refusal_summary(&l->log, now, force, buf, sizeof(buf)))
		CORE_WARN("listener on port %u %s", l->port, buf);
}

/* Tells the connector why where it can read it, and logs the refusal
 * (rate-limited: a storm must not flood the log). */
static void refuse(struct core_listener *l, struct incoming *in,
		   enum ctrl_refusal why, int64_t now)
{
	uint32_t status = ctrl_refusal_status(why);
	char from[UTIL_ADDR_STRLEN];

	if (status) {
		uint8_t frame[4 + CTRL_ACK_SIZE];

		ctrl_put32(frame, CTRL_ACK_SIZE);
		ctrl_ack_encode(frame + 4, status);
		/* best effort: a fresh socket has room for 12 bytes */
		(void)!send(in->fd, frame, sizeof(frame),
			    MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	if (ctrl_refusal_quiet(why)) {
		CORE_INFO("refused connection from %s on port %u: %s",
			  util_addr_str(&in->from, from, sizeof(from)), l->port,
			  ctrl_refusal_text(why));
		return;
	}
	log_summary(l, now, 0);
	if (!ctrl_refusal_note(&l->log, why, now))
		return;
	if (why == CTRL_REFUSE_BAD_HELLO && in->gate.detail)
		CORE_WARN("refused connection from %s on port %u: %s: %s",
			  util_addr_str(&in->from, from, sizeof(from)), l->port,
			  ctrl_refusal_text(why), in->gate.detail);
	else
		CORE_WARN("refused connection from %s on port %u: %s",
			  util_addr_str(&in->from, from, sizeof(from)), l->port,
			  ctrl_refusal_text(why));
}

static void listener_free(struct core_listener *l)
{
	struct core_listener **pp;

	for (pp = &listeners; *pp != l; pp = &(*pp)->next)
		;
	*pp = l->next;
	/* Closing only: no handshake moves on here.  This also runs from
	 * the library's destructor, after libcrypto may have cleaned up,
	 * and a connector mid-handshake dials again or fails on its side.
	 * What the gate holds is refused and logged, not silently dropped. */
	for (int i = 0; i < l->nin; i++) {
		refuse(l, &l->in[i], CTRL_REFUSE_SHUTDOWN, core_now_ns());
		close(l->in[i].fd);
	}
	log_summary(l, core_now_ns(), 1);
	free(l->in);
	close(l->fd);
	free(l);
}

void core_ctrl_close_listen(struct core_listen_comm *lc)
{
	struct core_listener *l = lc->l;
	struct core_listen_comm **pp;

	pthread_mutex_lock(&listeners_lock);
	if (l) {	/* NULL once core_ctrl_shutdown closed its listener */
		for (pp = &l->comms; *pp != lc; pp = &(*pp)->next)
			;
		*pp = lc->next;
		if (--l->refs == 0)
			listener_free(l);
	}
	for (int i = 0; i < lc->nq; i++)
		close(lc->q[i].fd);
	pthread_mutex_unlock(&listeners_lock);
	free(lc->q);
	while (lc->conns) {
		struct ctrl_conn *c = lc->conns;

		lc->conns = c->lc_next;
		c->lc = NULL;
		if (!c->lc_given)
			core_conn_free(&c->pub);
	}
	free(lc);
}

void core_ctrl_shutdown(void)
{
	pthread_mutex_lock(&listeners_lock);
	while (listeners) {
		for (struct mesh_rejoin *rj = listeners->rejoins; rj;
		     rj = rj->next)
			rj->l = NULL;
		while (listeners->comms) {
			struct core_listen_comm *lc = listeners->comms;

			listeners->comms = lc->next;
			lc->l = NULL;
		}
		listener_free(listeners);
	}
	pthread_mutex_unlock(&listeners_lock);
}

/* The socket waiting longest: the first to go when the listener is full
 * (a real peer sends its hello at once and is never the oldest for long). */
static int oldest(const struct core_listener *l)
{
	int best = -1;

	for (int i = 0; i < l->nin; i++)
		if (!l->in[i].gate.passed &&
		    (best < 0 || l->in[i].accepted_ns < l->in[best].accepted_ns))
			best = i;
	return best;
}

static void drop(struct core_listener *l, int i)
{
	close(l->in[i].fd);
	l->in[i] = l->in[--l->nin];
}

/* Makes room for one more pending socket; 0 when there is none. */
static int make_room(struct core_listener *l, int64_t now)
{
	int victim;

	if (l->nin < l->pending_max)
		return 1;
	victim = oldest(l);
	if (victim < 0)
		return 0;
	refuse(l, &l->in[victim], CTRL_REFUSE_EVICTED, now);
	drop(l, victim);
	return 1;
}

/* Accepts one socket into l->in[l->nin - 1]; 0 when none is waiting. */
static int accept_one(struct core_listener *l, int64_t now)
{
	struct incoming *in;
	int fd;

	if (!make_room(l, now))
		return 0;
	fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0 && (errno == EMFILE || errno == ENFILE) && l->nin) {
		/* the rest of the process took the descriptors: shed ours */
		int victim = oldest(l);

		if (victim >= 0) {
			refuse(l, &l->in[victim], CTRL_REFUSE_EVICTED, now);
			drop(l, victim);
			fd = accept4(l->fd, NULL, NULL,
				     SOCK_NONBLOCK | SOCK_CLOEXEC);
		}
	}
	if (fd < 0)
		return 0;
	if (!l->in) {
		l->in = calloc((size_t)l->pending_max, sizeof(*l->in));
		if (!l->in) {
			close(fd);
			return 0;
		}
	}
	in = &l->in[l->nin++];
	memset(in, 0, sizeof(*in));
	in->fd = fd;
	in->seq = l->next_seq++;
	in->accepted_ns = now;
	ctrl_sock_name(fd, &in->from, 1);
	ctrl_gate_init(&in->gate, ctrl_auth_key());
	return 1;
}

static struct core_listen_comm *comm_by_nonce(struct core_listener *l,
					      uint64_t nonce)
{
	struct core_listen_comm *lc;

	for (lc = l->comms; lc && lc->nonce != nonce; lc = lc->next)
		;
	return lc;
}

/*
 * A socket dialed anew for a kept connection: queued for its module,
 * which takes it with ctrl_rejoin_poll, and acknowledged (the dialer
 * tells "taken" from "no such connection" by the status).  A newer one
 * for the same stream replaces a queued one: its dialer gave up on that.
 */
static int route_rejoin(struct core_listener *l, struct incoming *in)
{
	const struct ctrl_hello *h = &in->gate.h;
	struct mesh_rejoin *rj;
	struct mesh_stream_new *slot = NULL;
	uint8_t frame[4 + CTRL_ACK_SIZE];
	int one = 1;

	for (rj = l->rejoins; rj; rj = rj->next)
		if (rj->nonce == h->nonce && rj->key == h->conn_id &&
		    rj->module_tag == h->module_tag)
			break;
	if (!rj)
		return 1 + (ctrl_closed_has(&rejoins_closed, h->nonce,
					    h->conn_id, h->module_tag) ?
			    CTRL_REFUSE_REJOIN_CLOSED : CTRL_REFUSE_NO_REJOIN);
	for (int i = 0; i < rj->nq && !slot; i++)
		if (rj->q[i].index == (int)h->stream_index) {
			slot = &rj->q[i];
			close(slot->fd);
		}
	if (!slot && rj->nq == REJOIN_QUEUE_MAX)
		return 1 + CTRL_REFUSE_CROWDED;
	if (!slot)
		slot = &rj->q[rj->nq++];
	*slot = (struct mesh_stream_new){ .index = (int)h->stream_index,
					  .fd = in->fd,
					  .secret_len = in->gate.auth.secret_len };
	memcpy(slot->secret, in->gate.auth.secret, slot->secret_len);
	/* TCP_NODELAY as module.h promises the taker, and before the ack:
	 * with a key the ack follows the proof, and Nagle would hold it
	 * until the dialer's delayed ACK of the proof (40 ms on Linux) */
	setsockopt(in->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ctrl_put32(frame, CTRL_ACK_SIZE);
	ctrl_ack_encode(frame + 4, 0);
	/* a fresh socket has room for 12 bytes; a dialer that misses them
	 * gives up and dials again */
	(void)!send(in->fd, frame, sizeof(frame), MSG_NOSIGNAL | MSG_DONTWAIT);
	return 0;
}

/* 0 once handed to the listen its hello names, else the refusal. */
static int route(struct core_listener *l, struct incoming *in)
{
	struct core_listen_comm *lc = comm_by_nonce(l, in->gate.h.nonce);
	struct routed *grown, *r;

	if (in->gate.h.kind == CTRL_HELLO_REJOIN)
		return route_rejoin(l, in);
	if (!lc)
		return 1 + CTRL_REFUSE_NO_LISTEN;
	grown = realloc(lc->q, (size_t)(lc->nq + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	lc->q = grown;
	r = &grown[lc->nq++];
	*r = (struct routed){ in->fd, in->seq, in->gate.h, in->from, { 0 },
			      in->gate.auth.secret_len };
	memcpy(r->secret, in->gate.auth.secret, r->secret_len);
	return 0;
}

/* Sends what the gate queued: 0 once all is out, -EAGAIN, or -errno. */
static int gate_send(struct incoming *in)
{
	struct core_auth *a = &in->gate.auth;

	while (a->out_len) {
		ssize_t n = send(in->fd, a->out, a->out_len, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		core_auth_sent(a, (size_t)n);
	}
	return 0;
}

/*
 * Moves one socket through its gate: -EAGAIN while it is still saying who
 * it is, 0 once handed to a listen, a refusal (1 + reason) to drop it, or
 * -errno when it cannot be kept.
 */
static int incoming_step(struct core_listener *l, struct incoming *in)
{
	int rc = in->gate.passed ? 0 : -EAGAIN;

	for (;;) {
		uint8_t buf[CTRL_HELLO_SIZE + 64];
		size_t want = ctrl_gate_want(&in->gate);
		ssize_t n;

		if (gate_send(in) == -EAGAIN)
			return -EAGAIN;
		if (rc != -EAGAIN || !want)
			break;
		n = recv(in->fd, buf, want, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return 1 + ctrl_gate_closed(&in->gate);
		if (n < 0)
			return -EAGAIN;
		rc = ctrl_gate_feed(&in->gate, buf, (size_t)n);
	}
	if (rc)
		return rc;
	return route(l, in);
}

/* Steps l->in[i]: 1 while it stays pending, 0 once it left (handed to a
 * listen or refused; l->in[i] then holds another socket). */
static int settle(struct core_listener *l, int i, int64_t now)
{
	struct incoming *in = &l->in[i];
	int rc = incoming_step(l, in);

	if (rc == -EAGAIN &&
	    now - in->accepted_ns > ctrl_gate_timeout_ns(l->nin,
							  l->pending_max))
		rc = 1 + (in->gate.got < CTRL_HELLO_SIZE ?
				  CTRL_REFUSE_HELLO_TIMEOUT :
				  CTRL_REFUSE_AUTH_TIMEOUT);
	if (rc == -EAGAIN)
		return 1;
	if (rc > 0)
		refuse(l, in, (enum ctrl_refusal)(rc - 1), now);
	if (rc)
		close(in->fd);
	l->in[i] = l->in[--l->nin];
	return 0;
}

/*
 * Reads hellos of waiting sockets, then takes new ones, each read at once
 * (a real peer's hello is usually there already), and hands each to the
 * listen it names.  A bounded number per call, so that an accept returns
 * to NCCL even while a storm goes on.
 */
static void listener_progress(struct core_listener *l)
{
	int64_t now = core_now_ns();

	for (int i = 0; i < l->nin; i++)
		if (!settle(l, i, now))
			i--;
	for (int n = 0; n < 4 * l->pending_max && accept_one(l, now); n++)
		settle(l, l->nin - 1, now);
	log_summary(l, now, 0);
}

static struct ctrl_conn *conn_by_id(struct core_listen_comm *lc,
				    uint64_t conn_id)
{
	struct ctrl_conn *c;

	for (c = lc->conns; c && c->conn_id != conn_id; c = c->lc_next)
		;
	return c;
}

static void conn_unlist(struct ctrl_conn *c)
{
	struct ctrl_conn **pp;

	for (pp = &c->lc->conns; *pp && *pp != c; pp = &(*pp)->lc_next)
		;
	if (*pp) {
		*pp = c->lc_next;
		c->lc->nconns--;
	}
	c->lc = NULL;
}

static void conn_unlist(struct ctrl_conn *c);

static const struct ctrl_listen_ops listen_ops = {
	.progress = ctrl_accept_progress,
	.forget = conn_unlist,
};

/* Inserts c in accept order, so that accepts take the oldest first. */
static void conn_list(struct core_listen_comm *lc, struct ctrl_conn *c)
{
	struct ctrl_conn **pp;

	for (pp = &lc->conns; *pp && (*pp)->lc_seq < c->lc_seq;
	     pp = &(*pp)->lc_next)
		;
	c->lc_next = *pp;
	*pp = c;
	c->lc = lc;
	c->lc_ops = &listen_ops;
	lc->nconns++;
}

/*
 * Makes room for one more connection from `from` among those no accept
 * took yet: when its source holds its share, or the listen all it holds,
 * the oldest of them goes.  A service's nonce is public, so anyone may
 * fill these; a real connector says it heard the ack at once and is
 * taken by the next accept, so it is never the oldest for long.
 */
static void make_conn_room(struct core_listen_comm *lc,
			   const struct mesh_addr *from)
{
	struct ctrl_conn *oldest = NULL, *oldest_src = NULL, *victim;
	int n = 0, nsrc = 0;

	/* the list is in accept order: the first match is the oldest */
	for (struct ctrl_conn *c = lc->conns; c; c = c->lc_next) {
		if (c->lc_given)
			continue;
		n++;
		oldest = oldest ? oldest : c;
		if (util_addr_same_source(&c->pub.remote, from)) {
			nsrc++;
			oldest_src = oldest_src ? oldest_src : c;
		}
	}
	victim = nsrc >= LISTEN_CONNS_PER_SOURCE ? oldest_src :
		 n >= LISTEN_CONNS_MAX ? oldest : NULL;
	if (!victim)
		return;
	if (lc->l) {
		int64_t now = core_now_ns();
		char text[UTIL_ADDR_STRLEN];

		log_summary(lc->l, now, 0);
		if (ctrl_refusal_note(&lc->l->log, CTRL_REFUSE_CROWDED, now))
			CORE_WARN("refused connection from %s on port %u: %s",
				  util_addr_str(&victim->pub.remote, text,
						sizeof(text)), lc->l->port,
				  ctrl_refusal_text(CTRL_REFUSE_CROWDED));
	}
	core_conn_free(&victim->pub);
}

/*
 * A connector that heard no ack in time (its peer's accept came late)
 * closes the socket and dials again, perhaps another address: of the
 * sockets with one connection id only the newest counts.
 */
static int take_ctrl(struct core_listen_comm *lc, struct routed *r)
{
	uint8_t ack[CTRL_ACK_SIZE];
	struct ctrl_conn *c, *old = conn_by_id(lc, r->h.conn_id);
	int err;

	if (old && (old->lc_seq > r->seq || old->lc_given)) {
		/* older than what we hold, or the connection is set up */
		close(r->fd);
		return 0;
	}
	if (old)
		core_conn_free(&old->pub);
	else
		make_conn_room(lc, &r->from);
	c = ctrl_conn_new(r->fd, 0);
	if (!c)
		return -ENOMEM;
	c->conn_id = r->h.conn_id;
	c->lc_seq = r->seq;
	c->pub.module_tag = r->h.module_tag;
	c->pub.peer_fabric_id = r->h.fabric_id;
	ctrl_conn_set_peer(c);
	ctrl_conn_bind_ops(c);
	ctrl_conn_set_secret(c, r->secret, r->secret_len);
	conn_list(lc, c);
	ctrl_ack_encode(ack, 0);
	err = ctrl_queue_frame(c, ack, sizeof(ack));
	if (err && err != -ENOMEM)	/* it gave up already: dials again */
		core_conn_free(&c->pub);
	return err == -ENOMEM ? err : 0;
}

/* Moves what was routed to this listen onto its connections: control
 * connections first, so that a stream finds the one it belongs to. */
static int drain_queue(struct core_listen_comm *lc)
{
	int err = 0;

	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < lc->nq && !err; i++) {
			struct routed *r = &lc->q[i];
			struct ctrl_conn *c;

			if ((r->h.kind == CTRL_HELLO_CTRL) != (pass == 0))
				continue;
			if (pass == 0) {
				err = take_ctrl(lc, r);
			} else if (!(c = conn_by_id(lc, r->h.conn_id))) {
				close(r->fd);	/* its connection is gone */
			} else {
				err = ctrl_add_stream_fd(c, r->h.stream_index,
							 r->fd);
			}
			lc->q[i--] = lc->q[--lc->nq];
		}
	}
	return err;
}

int ctrl_accept_progress(struct core_listen_comm *lc)
{
	int err;

	pthread_mutex_lock(&listeners_lock);
	if (lc->l)
		listener_progress(lc->l);
	err = drain_queue(lc);
	pthread_mutex_unlock(&listeners_lock);
	return err;
}

/*
 * Whether the connector read our ack: it says so (CTRL_ACK_HEARD) before
 * anything else and from then on never dials this connection again.  1
 * once heard (the marker is taken off the socket), 0 not yet, -1 when it
 * gave up first: closed, reset, or our ack could not go out.  A reset
 * keeps what arrived before it readable, so a marker sent just before a
 * close still counts.
 */
static int ack_heard(struct ctrl_conn *c)
{
	uint8_t b[4];
	int err = core_ctrl_flush(&c->pub);
	ssize_t n;

	if (err && err != -EAGAIN)
		return -1;
	n = recv(c->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	if (n < (ssize_t)sizeof(b))
		return 0;
	if (ctrl_get32(b) != CTRL_ACK_HEARD)
		return -1;	/* not a connector of ours */
	return recv(c->fd, b, sizeof(b), MSG_DONTWAIT) == sizeof(b) ? 1 : -1;
}

/*
 * Only a connection whose connector heard the ack is handed out: before
 * that, the connector may still give up on this socket at any moment (it
 * waited too long for the ack) and dial again, perhaps another address.
 * Such an abandoned dial is dropped here, never an accept's error; one not
 * heard of within the accept's timeout is dropped too (its connector gave
 * up by then).  One that heard the ack is handed out even when it closed
 * already (a module that needs only data streams completes then), and its
 * streams, which travel on sockets of their own, are routed to it
 * whenever they come.  Accepts take the oldest first.
 */
int core_ctrl_accept(struct core_listen_comm *lc, int timeout_ms,
		     struct core_conn **conn)
{
	int err = ctrl_accept_progress(lc);
	int64_t now = core_now_ns();
	struct ctrl_conn *c, *next;

	if (err)
		return err;
	for (c = lc->conns; c; c = next) {
		next = c->lc_next;
		if (c->lc_given)
			continue;
		/* the accept side's deadline_ns: how long it waits for the
		 * marker, until it is handed out */
		if (!c->pub.deadline_ns)
			c->pub.deadline_ns = now + (int64_t)timeout_ms * 1000000;
		err = ack_heard(c);
		if (err > 0)
			break;
		if (err < 0 || now > c->pub.deadline_ns)
			core_conn_free(&c->pub);
	}
	if (!c)
		return -EAGAIN;
	c->pub.deadline_ns = now + (int64_t)timeout_ms * 1000000;
	c->lc_given = 1;
	*conn = &c->pub;
	return 0;
}

int ctrl_rejoin_register(struct ctrl_conn *c, struct mesh_rejoin *rj)
{
	int err = -ENOTCONN;

	pthread_mutex_lock(&listeners_lock);
	if (c->lc && c->lc->l) {
		rj->l = c->lc->l;
		rj->nonce = c->lc->nonce;
		rj->l->refs++;
		rj->next = rj->l->rejoins;
		rj->l->rejoins = rj;
		err = 0;
	}
	pthread_mutex_unlock(&listeners_lock);
	return err;
}

void ctrl_rejoin_unregister(struct mesh_rejoin *rj)
{
	struct core_listener *l;

	pthread_mutex_lock(&listeners_lock);
	ctrl_closed_add(&rejoins_closed, rj->nonce, rj->key, rj->module_tag);
	l = rj->l;
	if (l) {
		struct mesh_rejoin **pp;

		for (pp = &l->rejoins; *pp != rj; pp = &(*pp)->next)
			;
		*pp = rj->next;
		if (--l->refs == 0)
			listener_free(l);
	}
	for (int i = 0; i < rj->nq; i++)
		close(rj->q[i].fd);
	rj->nq = 0;
	pthread_mutex_unlock(&listeners_lock);
}

int ctrl_rejoin_poll(struct mesh_rejoin *rj, struct mesh_stream_new *out)
{
	int err = -EAGAIN;

	pthread_mutex_lock(&listeners_lock);
	if (rj->l)
		listener_progress(rj->l);
	if (rj->nq) {
		*out = rj->q[0];
		rj->q[0] = rj->q[--rj->nq];
		err = 0;
	}
	pthread_mutex_unlock(&listeners_lock);
	return err;
}
