/* SPDX-License-Identifier: MIT */
#include "ctrl.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "netaddr.h"

#define HELLO_MAGIC 0x4348534du		/* "MSHC" */
#define HELLO_VERSION 1
#define HELLO_SIZE CORE_AUTH_HELLO_SIZE
#define ACK_MAGIC 0x4b41534du		/* "MSAK" */
#define FRAME_MAX 4096
#define HELLO_TIMEOUT_NS (10 * 1000000000ll)
#define STREAMS_MAX 1024

enum hello_kind { HELLO_CTRL = 1, HELLO_STREAM = 2 };

struct hello {
	uint8_t kind;
	uint8_t auth;		/* the connector will authenticate */
	uint16_t module_tag;
	uint32_t stream_index;
	uint64_t nonce;
	uint64_t conn_id;
	uint64_t fabric_id;
};

/*
 * One side of a handshake over a non-blocking socket.  Each side reads
 * exactly the bytes the other sends before the socket changes hands
 * (listener: RESPONSE; connector: CHALLENGE and PROOF), so no byte meant
 * for the module is ever swallowed here.
 */
#define AUTH_LISTENER_READS 52
#define AUTH_CONNECTOR_READS (20 + 36)

struct auth_io {
	struct core_auth a;
	size_t recvd, recv_total;
	int done;
};

struct core_stream {
	int fd;
	int stage;	/* connector: 0 idle, 1 dialing, 2 hello, 3 auth, 4 given */
	size_t hello_sent;
	uint8_t hello[HELLO_SIZE];
	struct auth_io auth;
};

/* A socket that connected to a listener and has not said who it is yet. */
struct incoming {
	int fd;
	size_t got;
	int64_t deadline_ns;
	struct mesh_addr from;
	uint8_t buf[HELLO_SIZE];
	struct hello h;
	int authing;
	struct auth_io auth;
};

struct routed {
	int fd;
	struct hello h;
	struct mesh_addr from;
};

struct core_listener {
	int fd;
	int rail;
	uint16_t port;
	int refs;
	struct incoming *in;
	int nin;
	struct core_listen_comm *comms;
	struct core_listener *next;
};

struct core_listen_comm {
	struct core_listener *l;
	uint64_t nonce;
	struct core_listen_comm *next;
	struct routed *q;
	int nq;
	struct core_conn *conn;
	int conn_given;		/* conn now owned by the caller of accept */
};

/* Listeners are touched only while connections are set up, never on the
 * data path, so one lock for all of them is enough. */
static pthread_mutex_t listeners_lock = PTHREAD_MUTEX_INITIALIZER;
static struct core_listener *listeners;
static const struct core_auth_key *auth_key;	/* NULL: no authentication */

void core_ctrl_set_auth_key(const struct core_auth_key *key)
{
	auth_key = key && key->len ? key : NULL;
}

int64_t core_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void hello_encode(const struct hello *h, uint8_t *b)
{
	memset(b, 0, HELLO_SIZE);
	put32(b, HELLO_MAGIC);
	b[4] = HELLO_VERSION;
	b[5] = h->kind;
	b[36] = h->auth;
	b[6] = (uint8_t)h->module_tag;
	b[7] = (uint8_t)(h->module_tag >> 8);
	put32(b + 8, h->stream_index);
	put64(b + 12, h->nonce);
	put64(b + 20, h->conn_id);
	put64(b + 28, h->fabric_id);
}

static const char *hello_decode(const uint8_t *b, struct hello *h)
{
	if (get32(b) != HELLO_MAGIC)
		return "bad magic";
	if (b[4] != HELLO_VERSION)
		return "unsupported protocol version";
	h->kind = b[5];
	if (h->kind != HELLO_CTRL && h->kind != HELLO_STREAM)
		return "bad connection kind";
	h->module_tag = (uint16_t)(b[6] | b[7] << 8);
	h->stream_index = get32(b + 8);
	if (h->stream_index >= STREAMS_MAX)
		return "stream index out of range";
	h->nonce = get64(b + 12);
	h->conn_id = get64(b + 20);
	h->fabric_id = get64(b + 28);
	if (b[36] > 1)
		return "bad authentication flag";
	h->auth = b[36];
	return NULL;
}

const char *core_ctrl_hello_check(const uint8_t *buf, size_t len)
{
	struct hello h;

	if (len != HELLO_SIZE)
		return "a hello is 40 bytes";
	return hello_decode(buf, &h);
}

static int set_nonblocking(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static void tune_socket(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

static void sock_name(int fd, struct mesh_addr *a, int peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	memset(a, 0, sizeof(*a));
	if (!(peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss,
						&len))
		mesh_addr_from_sockaddr((struct sockaddr *)&ss, a);
}

static void auth_begin(struct auth_io *io, enum core_auth_role role,
		       const uint8_t *hello)
{
	memset(io, 0, sizeof(*io));
	io->recv_total = role == CORE_AUTH_LISTENER ? AUTH_LISTENER_READS :
						      AUTH_CONNECTOR_READS;
	core_auth_start(&io->a, role, auth_key, hello);
}

/* 0 once authenticated and everything queued was sent, -EAGAIN before. */
static int auth_step(int fd, struct auth_io *io)
{
	for (;;) {
		uint8_t buf[AUTH_CONNECTOR_READS];
		size_t used;
		ssize_t n;
		int err;

		while (io->a.out_len) {
			n = send(fd, io->a.out, io->a.out_len, MSG_NOSIGNAL);
			if (n < 0)
				return errno == EAGAIN ? -EAGAIN : -errno;
			core_auth_sent(&io->a, (size_t)n);
		}
		if (io->done)
			return 0;
		if (io->recvd == io->recv_total)
			return -EPROTO;
		n = recv(fd, buf, io->recv_total - io->recvd, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		io->recvd += (size_t)n;
		err = core_auth_feed(&io->a, buf, (size_t)n, &used);
		if (err == 0)
			io->done = 1;
		else if (err != -EAGAIN)
			return err;
	}
}

static const char *auth_failure(int err)
{
	switch (err) {
	case -EACCES:
		return "authentication failed (wrong key, or a replay)";
	case -EPROTO:
		return "garbage in the authentication handshake";
	case -ECONNRESET:
		return "closed during the authentication handshake";
	default:
		return strerror(-err);
	}
}

/* ---------------------------------------------------------------- listen */

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
	len = mesh_addr_to_sockaddr(&any, &ss);
	/* bind and listen both claim the port: two processes may bind the
	 * same one (SO_REUSEADDR) and only the first to listen keeps it */
	if (bind(fd, (struct sockaddr *)&ss, len) || listen(fd, SOMAXCONN))
		err = -errno;
	if (!err)
		err = set_nonblocking(fd);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/* Lowest free port of the range, so operators can predict it. */
static int open_listener_socket(int port_low, int port_high, uint16_t *port)
{
	struct mesh_addr bound;
	int fd = listen_on(port_low);

	for (int p = port_low + 1; port_low && fd == -EADDRINUSE &&
	     p <= port_high; p++)
		fd = listen_on(p);
	if (fd < 0) {
		if (port_low)
			CORE_WARN("no free port to listen on in range %d-%d: %s",
				  port_low, port_high, strerror(-fd));
		else
			CORE_WARN("cannot listen: %s", strerror(-fd));
		return fd;
	}
	sock_name(fd, &bound, 0);
	*port = bound.port;
	return fd;
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

static void listener_progress(struct core_listener *l);
static void refuse(struct core_listener *l, struct incoming *in,
		   const char *why);

static void listener_free(struct core_listener *l)
{
	struct core_listener **pp;

	for (pp = &listeners; *pp != l; pp = &(*pp)->next)
		;
	*pp = l->next;
	/* Whatever knocked since the last accept is refused and logged too,
	 * not silently dropped with the port. */
	listener_progress(l);
	for (int i = 0; i < l->nin; i++) {
		refuse(l, &l->in[i], "the listener closed before it completed "
				     "its hello");
		close(l->in[i].fd);
	}
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
	if (lc->conn && !lc->conn_given)
		core_conn_free(lc->conn);
	else if (lc->conn)
		lc->conn->lc = NULL;
	free(lc);
}

void core_ctrl_shutdown(void)
{
	pthread_mutex_lock(&listeners_lock);
	while (listeners) {
		while (listeners->comms) {
			struct core_listen_comm *lc = listeners->comms;

			listeners->comms = lc->next;
			lc->l = NULL;
		}
		listener_free(listeners);
	}
	pthread_mutex_unlock(&listeners_lock);
}

static void accept_new(struct core_listener *l)
{
	for (;;) {
		struct incoming *grown;
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return;
		grown = realloc(l->in, (size_t)(l->nin + 1) * sizeof(*grown));
		if (!grown) {
			close(fd);
			return;
		}
		l->in = grown;
		memset(&grown[l->nin], 0, sizeof(grown[l->nin]));
		grown[l->nin].fd = fd;
		grown[l->nin].deadline_ns = core_now_ns() + HELLO_TIMEOUT_NS;
		sock_name(fd, &grown[l->nin].from, 1);
		l->nin++;
	}
}

static struct core_listen_comm *comm_by_nonce(struct core_listener *l,
					      uint64_t nonce)
{
	struct core_listen_comm *lc;

	for (lc = l->comms; lc && lc->nonce != nonce; lc = lc->next)
		;
	return lc;
}

static void refuse(struct core_listener *l, struct incoming *in,
		   const char *why)
{
	char from[MESH_ADDR_STRLEN];

	CORE_WARN("refused connection from %s on port %u: %s",
		  mesh_addr_str(&in->from, from, sizeof(from)), l->port, why);
}

/* After the hello: 0 to go on (authenticating if configured), else refuse. */
static int check_hello(struct core_listener *l, struct incoming *in)
{
	const char *bad = hello_decode(in->buf, &in->h);

	if (!bad && in->h.auth && !auth_key)
		bad = "it authenticates but no auth_key_file is set here";
	if (!bad && !in->h.auth && auth_key)
		bad = "it does not authenticate and auth_key_file is set here";
	if (bad) {
		refuse(l, in, bad);
		return -EPROTO;
	}
	if (auth_key) {
		auth_begin(&in->auth, CORE_AUTH_LISTENER, in->buf);
		in->authing = 1;
	}
	return 0;
}

static int route(struct core_listener *l, struct incoming *in)
{
	char from[MESH_ADDR_STRLEN];
	struct core_listen_comm *lc;
	struct routed *grown;
	struct hello h = in->h;

	mesh_addr_str(&in->from, from, sizeof(from));
	lc = comm_by_nonce(l, h.nonce);
	if (!lc) {
		CORE_WARN("refused connection from %s on port %u: it names no "
			  "open listen (stale or forged handle)", from, l->port);
		return -EPROTO;
	}
	grown = realloc(lc->q, (size_t)(lc->nq + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	lc->q = grown;
	grown[lc->nq++] = (struct routed){ in->fd, h, in->from };
	return 0;
}

static int still_waiting(struct core_listener *l, struct incoming *in,
			 int64_t now)
{
	if (now <= in->deadline_ns)
		return 1;
	refuse(l, in, in->got < HELLO_SIZE ?
			      "no complete hello within 10 s" :
			      "no complete authentication within 10 s");
	return 0;
}

/* 1 while the socket is still saying who it is, 0 to drop it, -1 once it
 * was handed to a listen. */
static int incoming_step(struct core_listener *l, struct incoming *in,
			 int64_t now)
{
	int err;

	if (in->got < HELLO_SIZE) {
		ssize_t n = recv(in->fd, in->buf + in->got,
				 HELLO_SIZE - in->got, 0);

		if (n > 0)
			in->got += (size_t)n;
		if (n == 0 || (n < 0 && errno != EAGAIN)) {
			refuse(l, in, "closed before a complete hello");
			return 0;
		}
		if (in->got < HELLO_SIZE)
			return still_waiting(l, in, now);
		if (check_hello(l, in))
			return 0;
	}
	if (in->authing) {
		err = auth_step(in->fd, &in->auth);
		if (err == -EAGAIN)
			return still_waiting(l, in, now);
		if (err) {
			refuse(l, in, auth_failure(err));
			return 0;
		}
	}
	return route(l, in) ? 0 : -1;
}

/* Reads hellos of new sockets and hands each to the listen it names. */
static void listener_progress(struct core_listener *l)
{
	int64_t now = core_now_ns();

	accept_new(l);
	for (int i = 0; i < l->nin; i++) {
		struct incoming *in = &l->in[i];
		int keep = incoming_step(l, in, now);

		if (keep == 1)
			continue;
		if (keep == 0)
			close(in->fd);
		l->in[i--] = l->in[--l->nin];
	}
}

static struct core_conn *conn_new(int fd, int connector)
{
	struct core_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->fd = fd;
	c->connector = connector;
	return c;
}

static void conn_set_peer(struct core_conn *c)
{
	sock_name(c->fd, &c->local, 0);
	sock_name(c->fd, &c->remote, 1);
	mesh_addr_str(&c->remote, c->peer_text, sizeof(c->peer_text));
}

static int queue_frame(struct core_conn *c, const void *msg, size_t len);
static int add_stream_fd(struct core_conn *c, uint32_t index, int fd);
static void ctrl_bind_ops(struct core_conn *c);

static int take_ctrl(struct core_listen_comm *lc, struct routed *r)
{
	uint8_t ack[8];
	struct core_conn *c;

	if (lc->conn) {
		CORE_WARN("refused a second control connection from %s for one "
			  "listen", lc->conn->peer_text);
		close(r->fd);
		return 0;
	}
	c = conn_new(r->fd, 0);
	if (!c)
		return -ENOMEM;
	c->conn_id = r->h.conn_id;
	c->module_tag = r->h.module_tag;
	c->peer_fabric_id = r->h.fabric_id;
	c->lc = lc;
	tune_socket(c->fd);
	conn_set_peer(c);
	ctrl_bind_ops(c);
	put32(ack, ACK_MAGIC);
	put32(ack + 4, 0);
	lc->conn = c;
	return queue_frame(c, ack, sizeof(ack));
}

/* Moves what was routed to this listen onto its connection. */
static int drain_queue(struct core_listen_comm *lc)
{
	int err = 0;

	for (int i = 0; i < lc->nq && !err; i++) {
		struct routed *r = &lc->q[i];

		if (r->h.kind == HELLO_CTRL) {
			err = take_ctrl(lc, r);
		} else if (!lc->conn) {
			continue;	/* stream before its control connection */
		} else if (r->h.conn_id != lc->conn->conn_id) {
			close(r->fd);
		} else {
			err = add_stream_fd(lc->conn, r->h.stream_index, r->fd);
		}
		lc->q[i--] = lc->q[--lc->nq];
	}
	return err;
}

static int accept_progress(struct core_listen_comm *lc)
{
	int err;

	pthread_mutex_lock(&listeners_lock);
	if (lc->l)
		listener_progress(lc->l);
	err = drain_queue(lc);
	pthread_mutex_unlock(&listeners_lock);
	return err;
}

int core_ctrl_accept(struct core_listen_comm *lc, int timeout_ms,
		     struct core_conn **conn)
{
	int err = accept_progress(lc);

	if (err)
		return err;
	if (!lc->conn || lc->conn_given)
		return -EAGAIN;
	/* lc->conn stays set so that its streams are still routed to it. */
	lc->conn->deadline_ns = core_now_ns() + (int64_t)timeout_ms * 1000000;
	lc->conn_given = 1;
	*conn = lc->conn;
	return 0;
}

/* ------------------------------------------------------------ connection */

int core_ctrl_flush(struct core_conn *c)
{
	while (c->out_len) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	return 0;
}

static int queue_frame(struct core_conn *c, const void *msg, size_t len)
{
	int err;

	if (len > FRAME_MAX)
		return -EMSGSIZE;
	if (c->out_len + 4 + len > c->out_cap) {
		size_t cap = (c->out_len + 4 + len) * 2;
		uint8_t *grown = realloc(c->out, cap);

		if (!grown)
			return -ENOMEM;
		c->out = grown;
		c->out_cap = cap;
	}
	put32(c->out + c->out_len, (uint32_t)len);
	memcpy(c->out + c->out_len + 4, msg, len);
	c->out_len += 4 + len;
	err = core_ctrl_flush(c);
	return err == -EAGAIN ? 0 : err;
}

static int read_frame(struct core_conn *c, void *buf, size_t cap)
{
	uint32_t len;
	int err = core_ctrl_flush(c);

	if (err && err != -EAGAIN)
		return err;
	if (!c->in) {
		c->in_cap = 4 + FRAME_MAX;
		c->in = malloc(c->in_cap);
		if (!c->in)
			return -ENOMEM;
	}
	for (;;) {
		if (c->in_len >= 4) {
			len = get32(c->in);
			if (len > FRAME_MAX)
				return -EPROTO;
			if (c->in_len >= 4 + len)
				break;
		}
		ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len,
				 0);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		c->in_len += (size_t)n;
	}
	if (len > cap)
		return -EMSGSIZE;
	memcpy(buf, c->in + 4, len);
	memmove(c->in, c->in + 4 + len, c->in_len - 4 - len);
	c->in_len -= 4 + len;
	return (int)len;
}

static struct core_conn *conn_of(struct mesh_ctrl *ctrl)
{
	return (struct core_conn *)ctrl;
}

static int ctrl_send(struct mesh_ctrl *ctrl, const void *msg, size_t len)
{
	return queue_frame(conn_of(ctrl), msg, len);
}

static int ctrl_recv(struct mesh_ctrl *ctrl, void *buf, size_t cap)
{
	return read_frame(conn_of(ctrl), buf, cap);
}

static int grow_streams(struct core_conn *c, uint32_t index)
{
	struct core_stream *grown;

	if (index >= STREAMS_MAX)
		return -EINVAL;
	if ((int)index < c->nstreams)
		return 0;
	grown = realloc(c->streams, (index + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	for (int i = c->nstreams; i <= (int)index; i++)
		grown[i] = (struct core_stream){ .fd = -1 };
	c->streams = grown;
	c->nstreams = (int)index + 1;
	return 0;
}

static int add_stream_fd(struct core_conn *c, uint32_t index, int fd)
{
	int err = grow_streams(c, index);

	if (err || c->streams[index].fd >= 0 || c->streams[index].stage) {
		close(fd);	/* a duplicate index is not ours to keep */
		return err;
	}
	c->streams[index].fd = fd;
	return 0;
}

static int dial(const struct mesh_addr *to, int *fd_out)
{
	struct sockaddr_storage ss;
	socklen_t len = mesh_addr_to_sockaddr(to, &ss);
	int fd = socket(to->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);

	if (fd < 0)
		return -errno;
	tune_socket(fd);
	if (connect(fd, (struct sockaddr *)&ss, len) && errno != EINPROGRESS) {
		int err = -errno;

		close(fd);
		return err;
	}
	*fd_out = fd;
	return 0;
}

/* 0 connected, -EAGAIN still trying, else the connect error. */
static int dial_done(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t len = sizeof(err);

	if (poll(&p, 1, 0) == 0)
		return -EAGAIN;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
		return -errno;
	return -err;
}

static int stream_connect_side(struct core_conn *c, struct core_stream *s,
			       int index)
{
	int err;

	if (s->stage == 0) {
		struct hello h = { .kind = HELLO_STREAM,
				   .auth = auth_key != NULL,
				   .module_tag = c->module_tag,
				   .stream_index = (uint32_t)index,
				   .nonce = c->target.nonce,
				   .conn_id = c->conn_id };

		hello_encode(&h, s->hello);
		err = dial(&c->remote, &s->fd);
		if (err)
			return err;
		s->stage = 1;
	}
	if (s->stage == 1) {
		err = dial_done(s->fd);
		if (err)
			return err;
		s->stage = 2;
	}
	while (s->hello_sent < HELLO_SIZE) {
		ssize_t n = send(s->fd, s->hello + s->hello_sent,
				 HELLO_SIZE - s->hello_sent, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		s->hello_sent += (size_t)n;
	}
	if (!auth_key)
		return 0;
	if (s->stage == 2) {
		auth_begin(&s->auth, CORE_AUTH_CONNECTOR, s->hello);
		s->stage = 3;
	}
	err = auth_step(s->fd, &s->auth);
	if (err && err != -EAGAIN)
		CORE_WARN("stream %d to %s: %s", index, c->peer_text,
			  auth_failure(err));
	return err;
}

static int ctrl_stream(struct mesh_ctrl *ctrl, int index, int *fd_out)
{
	struct core_conn *c = conn_of(ctrl);
	struct core_stream *s;
	int err = grow_streams(c, (uint32_t)index);

	if (err)
		return err;
	s = &c->streams[index];
	if (s->stage == 4)
		return -EINVAL;	/* already handed out */
	if (c->connector) {
		err = stream_connect_side(c, s, index);
	} else {
		if (s->fd < 0 && c->lc) {
			err = accept_progress(c->lc);
			s = &c->streams[index];
		}
		if (!err && s->fd < 0)
			err = -EAGAIN;
	}
	if (err)
		return err;
	*fd_out = s->fd;
	s->fd = -1;
	s->stage = 4;
	return 0;
}

static void ctrl_bind_ops(struct core_conn *c)
{
	c->ctrl.send = ctrl_send;
	c->ctrl.recv = ctrl_recv;
	c->ctrl.stream = ctrl_stream;
	c->ctrl.local = &c->local;
	c->ctrl.remote = &c->remote;
	c->ctrl.peer = c->peer_text;
	c->ctrl.peer_addrs = c->connector ? c->target.addrs : NULL;
	c->ctrl.npeer_addrs = c->connector ? c->target.naddrs : 0;
}

void core_conn_free(struct core_conn *c)
{
	if (!c)
		return;
	if (c->lc && c->lc->conn == c) {
		c->lc->conn = NULL;
		c->lc->conn_given = 0;
	}
	for (int i = 0; i < c->nstreams; i++)
		if (c->streams[i].fd >= 0)
			close(c->streams[i].fd);
	if (c->fd >= 0)
		close(c->fd);
	free(c->streams);
	free(c->auth);
	free(c->out);
	free(c->in);
	free(c);
}

/* ---------------------------------------------------------------- dial */

enum dial_stage { DIAL_NEXT, DIAL_CONNECTING, DIAL_AUTH, DIAL_ACK,
		  DIAL_DONE };

/* Peer addresses on a subnet we are on come first: a direct cable or the
 * local fabric beats a routed detour. */
static void order_targets(struct core_handle *h, const struct mesh_addr *local,
			  int nlocal)
{
	int next = 0;

	for (int i = 0; i < h->naddrs; i++)
		for (int j = 0; j < nlocal; j++)
			if (mesh_addr_same_subnet(&local[j], &h->addrs[i])) {
				struct mesh_addr t = h->addrs[next];

				h->addrs[next++] = h->addrs[i];
				h->addrs[i] = t;
				break;
			}
}

/* Nonces and connection ids: unguessable, so a stranger cannot name a
 * listen or join a connection. */
uint64_t core_random_u64(void)
{
	static _Atomic uint64_t counter;
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) == sizeof(v))
		return v;
	v = (uint64_t)core_now_ns() ^ ((uint64_t)getpid() << 32);
	v ^= ++counter * 0x9e3779b97f4a7c15ull;
	v ^= v >> 31;
	return v * 0xbf58476d1ce4e5b9ull;
}

int core_ctrl_dial(const struct core_handle *h, const struct mesh_addr *local,
		   int nlocal, uint16_t module_tag, uint64_t fabric_id,
		   int timeout_ms, struct core_conn **out)
{
	struct core_conn *c = conn_new(-1, 1);

	if (!c)
		return -ENOMEM;
	c->target = *h;
	order_targets(&c->target, local, nlocal);
	c->module_tag = module_tag;
	c->local_fabric_id = fabric_id;
	c->peer_fabric_id = h->fabric_id;
	c->conn_id = core_random_u64();
	c->deadline_ns = core_now_ns() + (int64_t)timeout_ms * 1000000;
	c->dial_stage = DIAL_NEXT;
	ctrl_bind_ops(c);
	*out = c;
	return 0;
}

static void note_tried(struct core_conn *c, const struct mesh_addr *a,
		       int err)
{
	char text[MESH_ADDR_STRLEN];
	size_t len = strlen(c->tried);

	if (strstr(c->tried, mesh_addr_str(a, text, sizeof(text))))
		return;
	snprintf(c->tried + len, sizeof(c->tried) - len, "%s%s (%s)",
		 len ? ", " : "", text, strerror(-err));
}

static int dial_start_next(struct core_conn *c)
{
	const struct mesh_addr *a = &c->target.addrs[c->dial_next];
	int64_t now = core_now_ns(), slice;
	int err;

	c->dial_next = (c->dial_next + 1) % c->target.naddrs;
	slice = (c->deadline_ns - now) / c->target.naddrs;
	if (slice < 1000000000ll)
		slice = 1000000000ll;
	c->dial_attempt_end_ns = now + slice;
	err = dial(a, &c->fd);
	if (err) {
		note_tried(c, a, err);
		return err;
	}
	c->remote = *a;
	c->dial_stage = DIAL_CONNECTING;
	return 0;
}

static int send_hello(struct core_conn *c)
{
	uint8_t b[HELLO_SIZE];
	struct hello h = { .kind = HELLO_CTRL,
			   .auth = auth_key != NULL,
			   .module_tag = c->module_tag,
			   .nonce = c->target.nonce,
			   .conn_id = c->conn_id,
			   .fabric_id = c->local_fabric_id };

	hello_encode(&h, b);
	/* The hello is raw, not framed: listeners read it before routing. */
	if (c->out_cap < HELLO_SIZE) {
		c->out = realloc(c->out, 256);
		if (!c->out)
			return -ENOMEM;
		c->out_cap = 256;
	}
	memcpy(c->out, b, HELLO_SIZE);
	c->out_len = HELLO_SIZE;
	if (auth_key) {
		c->auth = calloc(1, sizeof(*c->auth));
		if (!c->auth)
			return -ENOMEM;
		auth_begin(c->auth, CORE_AUTH_CONNECTOR, b);
	}
	return 0;
}

static int dial_step(struct core_conn *c)
{
	int err;

	switch (c->dial_stage) {
	case DIAL_NEXT:
		dial_start_next(c);	/* a failure is noted; next try later */
		return -EAGAIN;
	case DIAL_CONNECTING:
		err = dial_done(c->fd);
		if (err == -EAGAIN && core_now_ns() > c->dial_attempt_end_ns)
			err = -ETIMEDOUT;
		if (err == -EAGAIN)
			return err;
		if (err) {
			note_tried(c, &c->remote, err);
			close(c->fd);
			c->fd = -1;
			c->dial_stage = DIAL_NEXT;
			return -EAGAIN;
		}
		conn_set_peer(c);
		err = send_hello(c);
		if (err)
			return err;
		c->dial_stage = c->auth ? DIAL_AUTH : DIAL_ACK;
		return -EAGAIN;
	case DIAL_AUTH:
		err = core_ctrl_flush(c);
		if (!err)
			err = auth_step(c->fd, c->auth);
		if (err == -EAGAIN)
			return err;
		if (err) {
			CORE_WARN("connect to %s: %s", c->peer_text,
				  err == -ECONNRESET ?
					  "the peer refused our authentication "
					  "(is its auth_key_file the same?)" :
					  auth_failure(err));
			return -EACCES;
		}
		c->dial_stage = DIAL_ACK;
		return -EAGAIN;
	case DIAL_ACK: {
		uint8_t ack[8];
		int n = read_frame(c, ack, sizeof(ack));

		if (n == -EAGAIN)
			return n;
		if (n != (int)sizeof(ack) || get32(ack) != ACK_MAGIC)
			return n < 0 ? n : -EPROTO;
		if (get32(ack + 4))
			return -(int)get32(ack + 4);
		c->dial_stage = DIAL_DONE;
		return 0;
	}
	default:
		return 0;
	}
}

int core_ctrl_dial_progress(struct core_conn *c)
{
	int err = dial_step(c);

	if (err != -EAGAIN)
		return err;
	if (core_now_ns() < c->deadline_ns)
		return -EAGAIN;
	if (c->dial_stage == DIAL_CONNECTING)
		note_tried(c, &c->remote, -ETIMEDOUT);
	return -ETIMEDOUT;
}

const char *core_conn_tried(const struct core_conn *c)
{
	return c->tried[0] ? c->tried : "no address answered";
}
