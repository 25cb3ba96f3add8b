/* SPDX-License-Identifier: MIT */
#include "relay_vctrl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netaddr.h"
#include "relay_wire.h"

/* What may wait to be written: a few notes and setup messages. */
#define VCTRL_OUT_MAX (256 * 1024)

struct relay_vctrl {
	struct mesh_ctrl ctrl;		/* first: the leg module's ctrl */
	struct mesh_rejoin *rj;		/* connecting side: ours */
	struct relay_inbox *inbox;	/* accepting side: the comm's */
	bool connector;
	int epoch;
	int fd;
	int err;			/* sticky, once the stream failed */
	uint8_t secret[32];
	size_t secret_len;
	struct mesh_addr local, remote;
	struct mesh_addr peers[RELAY_ADDRS_MAX];
	char peer[64];
	uint8_t *out;
	size_t out_len, out_cap;
	uint8_t in[4 + RELAY_MSG_MAX];
	size_t in_len;
	int taken[RELAY_EPOCH_STREAMS];	/* accepting side, -1: not yet */
};

static struct relay_vctrl *of(struct mesh_ctrl *c)
{
	return (struct relay_vctrl *)c;
}

int relay_vctrl_flush(struct relay_vctrl *v)
{
	while (!v->err && v->out_len) {
		ssize_t n = send(v->fd, v->out, v->out_len,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return -EAGAIN;
		if (n <= 0) {
			v->err = n < 0 ? -errno : -ECONNRESET;
			break;
		}
		memmove(v->out, v->out + n, v->out_len - (size_t)n);
		v->out_len -= (size_t)n;
	}
	return v->err;
}

static int vc_send(struct mesh_ctrl *c, const void *msg, size_t len)
{
	struct relay_vctrl *v = of(c);
	uint32_t word = htonl((uint32_t)len);
	int err;

	if (len > RELAY_MSG_MAX)
		return -EMSGSIZE;
	if (v->err)
		return v->err;
	if (v->out_len + 4 + len > VCTRL_OUT_MAX)
		return -ENOBUFS;
	if (v->out_len + 4 + len > v->out_cap) {
		size_t cap = (v->out_len + 4 + len) * 2;
		uint8_t *grown = realloc(v->out, cap);

		if (!grown)
			return -ENOMEM;
		v->out = grown;
		v->out_cap = cap;
	}
	memcpy(v->out + v->out_len, &word, 4);
	memcpy(v->out + v->out_len + 4, msg, len);
	v->out_len += 4 + len;
	err = relay_vctrl_flush(v);
	return err == -EAGAIN ? 0 : err;
}

static int vc_recv(struct mesh_ctrl *c, void *buf, size_t cap)
{
	struct relay_vctrl *v = of(c);
	uint32_t word;
	size_t len;
	int err = relay_vctrl_flush(v);

	if (err && err != -EAGAIN)
		return err;
	for (;;) {
		if (v->in_len >= 4) {
			memcpy(&word, v->in, 4);
			len = ntohl(word);
			if (len > RELAY_MSG_MAX)
				return v->err = -EPROTO;
			if (v->in_len >= 4 + len)
				break;
		}
		ssize_t n = recv(v->fd, v->in + v->in_len,
				 sizeof(v->in) - v->in_len, MSG_DONTWAIT);

		if (n == 0)
			return v->err = -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ?
				       -EAGAIN : (v->err = -errno);
		v->in_len += (size_t)n;
	}
	if (len > cap)
		return -EMSGSIZE;
	memcpy(buf, v->in + 4, len);
	memmove(v->in, v->in + 4 + len, v->in_len - 4 - len);
	v->in_len -= 4 + len;
	return (int)len;
}

/* Whether a failed dial is worth another: the network's answer, not the
 * peer's (no such connection, a key mismatch). */
static bool transient(int err)
{
	return err == -ETIMEDOUT || err == -ECONNREFUSED ||
	       err == -ECONNRESET || err == -ENETUNREACH ||
	       err == -EHOSTUNREACH || err == -ECONNABORTED ||
	       err == -EPIPE || err == -EPROTO;
}

static int vc_stream(struct mesh_ctrl *c, int index, int *fd_out)
{
	struct relay_vctrl *v = of(c);
	struct mesh_stream_new s;
	int k = index + 1, err;

	if (index < 0 || k >= RELAY_EPOCH_STREAMS)
		return -EINVAL;
	if (!v->connector) {
		err = relay_inbox_pump(v->inbox);
		if (err)
			return err;
		if (v->taken[k] < 0)
			return -EAGAIN;
		*fd_out = v->taken[k];
		v->taken[k] = -1;
		return 0;
	}
	err = relay_host->rejoin_dial(relay_host, v->rj,
				      relay_stream_index(v->epoch, k), &s);
	if (!err) {
		*fd_out = s.fd;
		return 0;
	}
	/* a dial that failed starts again on the next call; the setup's
	 * deadline bounds them */
	return transient(err) ? -EAGAIN : err;
}

struct relay_vctrl *relay_vctrl_new(struct mesh_rejoin *rj, bool connector,
				    int epoch,
				    const struct mesh_stream_new *s0,
				    const char *peer,
				    const struct mesh_addr *peers, int npeers)
{
	struct relay_vctrl *v = calloc(1, sizeof(*v));
	struct sockaddr_storage ss;
	socklen_t len;

	if (!v)
		return NULL;
	v->rj = connector ? rj : NULL;
	v->connector = connector;
	v->epoch = epoch;
	v->fd = s0->fd;
	v->secret_len = s0->secret_len <= sizeof(v->secret) ?
				s0->secret_len : 0;
	memcpy(v->secret, s0->secret, v->secret_len);
	for (int i = 0; i < RELAY_EPOCH_STREAMS; i++)
		v->taken[i] = -1;
	len = sizeof(ss);
	if (!getsockname(v->fd, (struct sockaddr *)&ss, &len))
		util_addr_from_sockaddr((struct sockaddr *)&ss, &v->local);
	len = sizeof(ss);
	if (!getpeername(v->fd, (struct sockaddr *)&ss, &len))
		util_addr_from_sockaddr((struct sockaddr *)&ss, &v->remote);
	snprintf(v->peer, sizeof(v->peer), "%s", peer);
	if (npeers > RELAY_ADDRS_MAX)
		npeers = RELAY_ADDRS_MAX;
	if (npeers > 0)
		memcpy(v->peers, peers, sizeof(*peers) * (size_t)npeers);
	v->ctrl = (struct mesh_ctrl){
		.send = vc_send, .recv = vc_recv, .stream = vc_stream,
		.local = &v->local, .remote = &v->remote, .peer = v->peer,
		/* like the core's: the connecting side knows the handle's */
		.peer_addrs = connector && npeers > 0 ? v->peers : NULL,
		.npeer_addrs = connector && npeers > 0 ? npeers : 0,
		.secret = v->secret_len ? v->secret : NULL,
		.secret_len = v->secret_len,
		.leg = 1,	/* only ever a leg's: the relay resumes it */
	};
	return v;
}

struct mesh_ctrl *relay_vctrl_ctrl(struct relay_vctrl *v)
{
	return &v->ctrl;
}

int relay_vctrl_epoch(const struct relay_vctrl *v)
{
	return v->epoch;
}

void relay_vctrl_free(struct relay_vctrl *v)
{
	if (!v)
		return;
	if (v->inbox && v->inbox->cur == v)
		v->inbox->cur = NULL;
	close(v->fd);
	for (int i = 0; i < RELAY_EPOCH_STREAMS; i++)
		if (v->taken[i] >= 0)
			close(v->taken[i]);
	if (v->rj)
		relay_host->rejoin_close(relay_host, v->rj);
	explicit_bzero(v->secret, sizeof(v->secret));
	free(v->out);
	free(v);
}

/* ---- the destination's inbox ---- */

int relay_inbox_pump(struct relay_inbox *in)
{
	struct mesh_stream_new s;
	int err, k;

	/* bounded: the core queues at most a few dozen per rejoin */
	for (int n = 0; n < 4 * RELAY_EPOCH_STREAMS; n++) {
		err = relay_host->rejoin_take(relay_host, in->rj, &s);
		if (err == -EAGAIN)
			return 0;
		if (err)
			return err;
		k = s.index % RELAY_EPOCH_STREAMS;
		if (k == 0) {
			/* a newer attempt: the comm takes it when it can */
			if (in->has_next)
				close(in->next.fd);
			in->next = s;
			in->has_next = true;
			continue;
		}
		if (!in->cur || relay_stream_epoch(s.index) !=
				in->cur->epoch % RELAY_EPOCHS) {
			close(s.fd);	/* an attempt given up */
			continue;
		}
		if (in->cur->taken[k] >= 0)
			close(in->cur->taken[k]);
		in->cur->taken[k] = s.fd;
	}
	return 0;
}

int relay_inbox_next(struct relay_inbox *in, struct mesh_stream_new *s0)
{
	if (!in->has_next)
		return 0;
	*s0 = in->next;
	in->has_next = false;
	return 1;
}

void relay_inbox_drop(struct relay_inbox *in)
{
	if (in->has_next)
		close(in->next.fd);
	in->has_next = false;
}

struct relay_vctrl *relay_inbox_join(struct relay_inbox *in,
				     const struct mesh_stream_new *s0)
{
	struct relay_vctrl *v = relay_vctrl_new(NULL, false,
						relay_stream_epoch(s0->index),
						s0, in->peer, NULL, 0);

	if (!v) {
		close(s0->fd);
		return NULL;
	}
	v->inbox = in;
	in->cur = v;
	return v;
}
