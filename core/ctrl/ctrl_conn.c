/* SPDX-License-Identifier: MIT */
/*
 * A control connection once it is set up: its framed messages, the extra
 * streams a module asks for, and the socket helpers the listener and the
 * dialer share.
 */
#include "ctrl_priv.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netaddr.h"
#include "tcp_rtt.h"

static const struct core_auth_key *auth_key;	/* NULL: no authentication */

void core_ctrl_set_auth_key(const struct core_auth_key *key)
{
	auth_key = key && key->len ? key : NULL;
}

const struct core_auth_key *ctrl_auth_key(void)
{
	return auth_key;
}

int64_t core_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
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

const char *core_ctrl_hello_check(const uint8_t *buf, size_t len)
{
	struct ctrl_hello h;

	if (len != CTRL_HELLO_SIZE)
		return "a hello is 40 bytes";
	return ctrl_hello_decode(buf, &h);
}

/* ---------------------------------------------------------------- sockets */

int ctrl_set_nonblocking(int fd)
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

void ctrl_sock_name(int fd, struct mesh_addr *a, int peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	memset(a, 0, sizeof(*a));
	if (!(peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss,
						&len))
		util_addr_from_sockaddr((struct sockaddr *)&ss, a);
}

int ctrl_dial_addr(const struct mesh_addr *to, int *fd_out)
{
	struct sockaddr_storage ss;
	socklen_t len = util_addr_to_sockaddr(to, &ss);
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

int ctrl_dial_done(int fd)
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

/* ------------------------------------------------------ connector's auth */

void ctrl_auth_begin(struct auth_io *io, const uint8_t *hello)
{
	memset(io, 0, sizeof(*io));
	io->recv_total = AUTH_CONNECTOR_READS;
	core_auth_start(&io->a, CORE_AUTH_CONNECTOR, auth_key, hello);
}

int ctrl_auth_step(int fd, struct auth_io *io)
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
		memcpy(io->got + io->recvd, buf, (size_t)n);
		io->recvd += (size_t)n;
		err = core_auth_feed(&io->a, buf, (size_t)n, &used);
		if (err == 0)
			io->done = 1;
		else if (err != -EAGAIN)
			return err;
	}
}

uint32_t ctrl_auth_refusal(const struct auth_io *io)
{
	static const size_t at[] = { 0, AUTH_CHALLENGE_SIZE };
	uint32_t status;
	size_t len;

	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		if (io->recvd >= at[i] + 4 + CTRL_ACK_SIZE &&
		    !ctrl_frame_peek(io->got + at[i], 4 + CTRL_ACK_SIZE, &len) &&
		    !ctrl_ack_decode(io->got + at[i] + 4, len, &status) &&
		    status)
			return status;
	return 0;
}

/* ------------------------------------------------------------ connection */

struct ctrl_conn *ctrl_conn_new(int fd, int connector)
{
	struct ctrl_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->fd = fd;
	c->pub.connector = connector;
	if (fd >= 0)
		tune_socket(fd);
	return c;
}

void ctrl_conn_set_peer(struct ctrl_conn *c)
{
	ctrl_sock_name(c->fd, &c->pub.local, 0);
	ctrl_sock_name(c->fd, &c->pub.remote, 1);
	util_addr_str(&c->pub.remote, c->pub.peer_text,
		      sizeof(c->pub.peer_text));
}

int core_ctrl_flush(struct core_conn *pub)
{
	struct ctrl_conn *c = ctrl_conn_of(pub);

	while (c->out_len) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	return 0;
}

/* Queues a length word and len bytes of msg, and sends what it can. */
static int queue_out(struct ctrl_conn *c, uint32_t word, const void *msg,
		     size_t len)
{
	int err;

	if (c->out_len + 4 + len > c->out_cap) {
		size_t cap = (c->out_len + 4 + len) * 2;
		uint8_t *grown = realloc(c->out, cap);

		if (!grown)
			return -ENOMEM;
		c->out = grown;
		c->out_cap = cap;
	}
	ctrl_put32(c->out + c->out_len, word);
	if (len)
		memcpy(c->out + c->out_len + 4, msg, len);
	c->out_len += 4 + len;
	err = core_ctrl_flush(&c->pub);
	return err == -EAGAIN ? 0 : err;
}

int ctrl_queue_frame(struct ctrl_conn *c, const void *msg, size_t len)
{
	if (len > CTRL_FRAME_MAX)
		return -EMSGSIZE;
	return queue_out(c, (uint32_t)len, msg, len);
}

int ctrl_queue_heard(struct ctrl_conn *c)
{
	return queue_out(c, CTRL_ACK_HEARD, NULL, 0);
}

static void drop_in(struct ctrl_conn *c, size_t n)
{
	memmove(c->in, c->in + n, c->in_len - n);
	c->in_len -= n;
}

int ctrl_read_frame(struct ctrl_conn *c, void *buf, size_t cap)
{
	size_t len;
	int err = core_ctrl_flush(&c->pub);

	if (err && err != -EAGAIN)
		return err;
	if (!c->in) {
		c->in_cap = 4 + CTRL_FRAME_MAX;
		c->in = malloc(c->in_cap);
		if (!c->in)
			return -ENOMEM;
	}
	while ((err = ctrl_frame_peek(c->in, c->in_len, &len)) == -EAGAIN ||
	       err == CTRL_FRAME_HEARD) {
		ssize_t n;

		if (err == CTRL_FRAME_HEARD) {	/* for the accept, not us */
			drop_in(c, 4);
			continue;
		}
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		c->in_len += (size_t)n;
	}
	if (err)
		return err;
	if (len > cap)
		return -EMSGSIZE;
	memcpy(buf, c->in + 4, len);
	drop_in(c, 4 + len);
	return (int)len;
}

static int ctrl_send(struct mesh_ctrl *ctrl, const void *msg, size_t len)
{
	return ctrl_queue_frame(ctrl_conn_of((struct core_conn *)ctrl), msg,
				len);
}

static int ctrl_recv(struct mesh_ctrl *ctrl, void *buf, size_t cap)
{
	return ctrl_read_frame(ctrl_conn_of((struct core_conn *)ctrl), buf,
			       cap);
}

/* --------------------------------------------------------------- streams */

static int grow_streams(struct ctrl_conn *c, uint32_t index)
{
	struct core_stream *grown;

	if (index >= CTRL_STREAMS_MAX)
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

int ctrl_add_stream_fd(struct ctrl_conn *c, uint32_t index, int fd)
{
	int err = grow_streams(c, index);

	if (err || c->streams[index].fd >= 0 || c->streams[index].stage) {
		close(fd);	/* a duplicate index is not ours to keep */
		return err;
	}
	c->streams[index].fd = fd;
	return 0;
}

int ctrl_stream_dial(struct core_stream *s, const struct ctrl_hello *h,
		     const struct mesh_addr *to)
{
	int err;

	if (s->stage == 0) {
		ctrl_hello_encode(h, s->hello);
		err = ctrl_dial_addr(to, &s->fd);
		if (err)
			return err;
		s->stage = 1;
	}
	if (s->stage == 1) {
		err = ctrl_dial_done(s->fd);
		if (err)
			return err;
		s->stage = 2;
	}
	while (s->hello_sent < CTRL_HELLO_SIZE) {
		ssize_t n = send(s->fd, s->hello + s->hello_sent,
				 CTRL_HELLO_SIZE - s->hello_sent, MSG_NOSIGNAL);

		if (n < 0)
			return errno == EAGAIN ? -EAGAIN : -errno;
		s->hello_sent += (size_t)n;
	}
	if (!auth_key)
		return 0;
	if (s->stage == 2) {
		ctrl_auth_begin(&s->auth, s->hello);
		s->stage = 3;
	}
	/* a failure goes back to the module, which logs it once */
	err = ctrl_auth_step(s->fd, &s->auth);
	if (err == 0 || err == -EAGAIN)
		return err;
	if (ctrl_auth_refusal(&s->auth) == CTRL_STATUS_AUTH_FAILED)
		return -EACCES;
	if ((err == -ECONNRESET || err == -EPIPE) && s->auth.recvd) {
		/* closed with no word after its challenge: the listener gave
		 * up waiting for us (paused for a while); the module's
		 * deadline bounds how often this stream is dialed again */
		close(s->fd);
		*s = (struct core_stream){ .fd = -1 };
		return -EAGAIN;
	}
	return err;
}

static int ctrl_stream(struct mesh_ctrl *ctrl, int index, int *fd_out)
{
	struct ctrl_conn *c = ctrl_conn_of((struct core_conn *)ctrl);
	struct core_stream *s;
	int err = grow_streams(c, (uint32_t)index);

	if (err)
		return err;
	s = &c->streams[index];
	if (s->stage == 4)
		return -EINVAL;	/* already handed out */
	if (c->pub.connector) {
		struct ctrl_hello h = { .kind = CTRL_HELLO_STREAM,
					.auth = auth_key != NULL,
					.module_tag = c->pub.module_tag,
					.stream_index = (uint32_t)index,
					.nonce = c->target.nonce,
					.conn_id = c->conn_id };

		err = ctrl_stream_dial(s, &h, &c->pub.remote);
	} else {
		if (s->fd < 0 && c->lc) {
			err = c->lc_ops->progress(c->lc);
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

bool core_ctrl_is_ours(const struct mesh_ctrl *ctrl)
{
	return ctrl && ctrl->send == ctrl_send;
}

void ctrl_conn_bind_ops(struct ctrl_conn *c)
{
	c->pub.ctrl.send = ctrl_send;
	c->pub.ctrl.recv = ctrl_recv;
	c->pub.ctrl.stream = ctrl_stream;
	c->pub.ctrl.local = &c->pub.local;
	c->pub.ctrl.remote = &c->pub.remote;
	c->pub.ctrl.peer = c->pub.peer_text;
	c->pub.ctrl.peer_addrs = c->pub.connector ? c->target.addrs : NULL;
	c->pub.ctrl.npeer_addrs = c->pub.connector ? c->target.naddrs : 0;
}

void ctrl_conn_set_secret(struct ctrl_conn *c, const uint8_t *secret,
			  size_t len)
{
	if (len > sizeof(c->secret))
		len = 0;	/* cannot happen: auth.h sizes both */
	memcpy(c->secret, secret, len);
	c->pub.ctrl.secret = len ? c->secret : NULL;
	c->pub.ctrl.secret_len = len;
}

int core_conn_rtt_us(const struct core_conn *pub, uint32_t *us)
{
	return util_tcp_rtt_us(((const struct ctrl_conn *)pub)->fd, us);
}

void core_conn_free(struct core_conn *pub)
{
	struct ctrl_conn *c = ctrl_conn_of(pub);

	if (!pub)
		return;
	if (c->lc)
		c->lc_ops->forget(c);
	for (int i = 0; i < c->nstreams; i++)
		if (c->streams[i].fd >= 0)
			close(c->streams[i].fd);
	if (c->fd >= 0)
		close(c->fd);
	free(c->streams);
	free(c->auth);
	free(c->out);
	free(c->in);
	explicit_bzero(c->secret, sizeof(c->secret));
	free(c);
}
