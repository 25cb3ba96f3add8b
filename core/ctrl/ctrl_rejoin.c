/* SPDX-License-Identifier: MIT */
/*
 * Connections kept for resuming (module.h, 1.6): a module whose stream
 * broke dials a new socket for it to the listener the connection came
 * through, with a REJOIN hello naming the handle's nonce and the
 * module's key, through the same gate and key as any connection; the
 * listener queues it for the accepting side (ctrl_listen.c) and says so
 * with an ack.  The address, port and NAT mapping are the ones the
 * connection was set up with.
 */
#include "ctrl_priv.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netaddr.h"

/*
 * One attempt's connect may take this long: a SYN that gets no answer in
 * a second is not retried by the kernel's backoff but by a new attempt,
 * so that a path that comes back is found within a second of it.  Once
 * connected, the handshake has longer (several round trips on a long
 * link).
 */
#define REJOIN_CONNECT_NS 1000000000ll
/*
 * A connection kept for resuming is served within milliseconds (its
 * module looks for new sockets every 50 ms at most), so a listener that
 * takes the socket and says nothing for this long serves no such
 * connection: its process lives but keeps no rejoin there, or is stuck.
 */
#define REJOIN_ANSWER_NS 3000000000ll

struct rejoin_dial {
	struct core_stream s;
	int64_t started_ns;
	int attempt;			/* picks the address */
	uint8_t ack[4 + CTRL_ACK_SIZE];
	size_t ack_got;
};

_Static_assert(sizeof(((struct mesh_stream_new *)0)->secret) >=
	       CORE_AUTH_SECRET_SIZE, "a socket's secret fits mesh_stream_new");

static bool same_endpoint(const struct mesh_addr *a, const struct mesh_addr *b)
{
	return a->port == b->port && util_addr_equal_ip(a, b);
}

static struct mesh_rejoin *rejoin_new(int connector, uint64_t key,
				      uint16_t module_tag)
{
	struct mesh_rejoin *rj = calloc(1, sizeof(*rj));

	if (!rj)
		return NULL;
	rj->connector = connector;
	rj->key = key;
	rj->module_tag = module_tag;
	return rj;
}

int core_rejoin_listen(struct core_conn *conn, uint64_t key,
		       struct mesh_rejoin **out)
{
	struct mesh_rejoin *rj = rejoin_new(0, key, conn->module_tag);
	int err;

	if (!rj)
		return -ENOMEM;
	err = ctrl_rejoin_register(ctrl_conn_of(conn), rj);
	if (err) {
		free(rj);
		return err;
	}
	*out = rj;
	return 0;
}

int core_rejoin_to(const struct core_handle *h, const struct mesh_addr *first,
		   uint16_t module_tag, uint64_t fabric_id, uint64_t key,
		   struct mesh_rejoin **out)
{
	struct mesh_rejoin *rj;

	if (!h->naddrs && !first)
		return -EINVAL;
	rj = rejoin_new(1, key, module_tag);
	if (!rj)
		return -ENOMEM;
	rj->nonce = h->nonce;
	rj->fabric_id = fabric_id;
	if (first)
		rj->addrs[rj->naddrs++] = *first;
	for (int i = 0; i < h->naddrs && rj->naddrs < CORE_HANDLE_ADDRS_MAX;
	     i++)
		if (!first || !same_endpoint(&h->addrs[i], first))
			rj->addrs[rj->naddrs++] = h->addrs[i];
	*out = rj;
	return 0;
}

int core_rejoin_to_conn(struct core_conn *conn, uint64_t key,
			struct mesh_rejoin **out)
{
	struct ctrl_conn *c = ctrl_conn_of(conn);

	if (!conn->connector)
		return -EINVAL;
	return core_rejoin_to(&c->target, &conn->remote, conn->module_tag,
			      c->local_fabric_id, key, out);
}

static void dial_reset(struct rejoin_dial *d)
{
	if (d->s.fd >= 0)
		close(d->s.fd);
	explicit_bzero(&d->s.auth, sizeof(d->s.auth));
	d->s = (struct core_stream){ .fd = -1 };
	d->ack_got = 0;
	d->started_ns = 0;
	d->attempt++;
}

static struct rejoin_dial *dial_of(struct mesh_rejoin *rj, int index)
{
	struct rejoin_dial *grown;

	if (index < 0 || index >= CTRL_STREAMS_MAX)
		return NULL;
	if (index < rj->ndials)
		return &rj->dials[index];
	grown = realloc(rj->dials, (size_t)(index + 1) * sizeof(*grown));
	if (!grown)
		return NULL;
	for (int i = rj->ndials; i <= index; i++)
		grown[i] = (struct rejoin_dial){ .s = { .fd = -1 } };
	rj->dials = grown;
	rj->ndials = index + 1;
	return &rj->dials[index];
}

/* The listener's answer: 0 taken, -EAGAIN not all here, else why not. */
static int read_ack(struct rejoin_dial *d)
{
	size_t len;
	uint32_t status;

	while (d->ack_got < sizeof(d->ack)) {
		ssize_t n = recv(d->s.fd, d->ack + d->ack_got,
				 sizeof(d->ack) - d->ack_got, MSG_DONTWAIT);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? -EAGAIN :
								    -errno;
		d->ack_got += (size_t)n;
	}
	if (ctrl_frame_peek(d->ack, sizeof(d->ack), &len) || len != CTRL_ACK_SIZE ||
	    ctrl_ack_decode(d->ack + 4, len, &status))
		return -EPROTO;
	if (status == CTRL_STATUS_NO_LISTEN)
		return -ESRCH;
	if (status == CTRL_STATUS_AUTH_FAILED || status == CTRL_STATUS_NO_KEY ||
	    status == CTRL_STATUS_NEEDS_AUTH)
		return -EACCES;
	return status ? -EPROTO : 0;
}

static int dial_step(struct mesh_rejoin *rj, struct rejoin_dial *d, int index)
{
	const struct ctrl_hello h = {
		.kind = CTRL_HELLO_REJOIN, .auth = ctrl_auth_key() != NULL,
		.module_tag = rj->module_tag, .stream_index = (uint32_t)index,
		.nonce = rj->nonce, .conn_id = rj->key,
		.fabric_id = rj->fabric_id,
	};
	int64_t now = core_now_ns();
	int err;

	if (!d->started_ns)
		d->started_ns = now;
	if (d->s.stage < 4) {
		err = ctrl_stream_dial(&d->s, &h,
				       &rj->addrs[d->attempt % rj->naddrs]);
		if (err)
			goto check_time;
		d->s.stage = 4;
	}
	err = read_ack(d);
check_time:
	if (err == -EAGAIN && d->s.stage <= 1 &&
	    now - d->started_ns > REJOIN_CONNECT_NS)
		err = -ETIMEDOUT;
	else if (err == -EAGAIN && now - d->started_ns > REJOIN_ANSWER_NS)
		err = -EREMOTEIO;
	/* the refusal status of a listener that wants another key */
	if (err && err != -EAGAIN && d->s.stage == 3 &&
	    ctrl_auth_refusal(&d->s.auth))
		err = -EACCES;
	return err;
}

int core_rejoin_dial(struct mesh_rejoin *rj, int index,
		     struct mesh_stream_new *out)
{
	struct rejoin_dial *d;
	int err;

	if (!rj->connector || !rj->naddrs)
		return -EINVAL;
	d = dial_of(rj, index);
	if (!d)
		return index < 0 || index >= CTRL_STREAMS_MAX ? -EINVAL :
								 -ENOMEM;
	err = dial_step(rj, d, index);
	if (err == -EAGAIN)
		return err;
	if (!err) {
		*out = (struct mesh_stream_new){ .index = index,
			.fd = d->s.fd, .secret_len = d->s.auth.a.secret_len };
		memcpy(out->secret, d->s.auth.a.secret, out->secret_len);
		d->s.fd = -1;
	}
	/* taken, or failed: the next call starts a new attempt */
	dial_reset(d);
	return err;
}

int core_rejoin_take(struct mesh_rejoin *rj, struct mesh_stream_new *out)
{
	if (rj->connector)
		return -EINVAL;
	return ctrl_rejoin_poll(rj, out);
}

void core_rejoin_close(struct mesh_rejoin *rj)
{
	if (!rj)
		return;
	if (rj->connector) {
		for (int i = 0; i < rj->ndials; i++)
			dial_reset(&rj->dials[i]);
		free(rj->dials);
	} else {
		ctrl_rejoin_unregister(rj);
	}
	explicit_bzero(rj, sizeof(*rj));
	free(rj);
}
