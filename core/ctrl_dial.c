/* SPDX-License-Identifier: MIT */
/*
 * Dialing a listen: the handle's addresses in turn, then the hello, the
 * authentication where configured and the listener's ack.
 */
#include "ctrl_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "netaddr.h"

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

int core_ctrl_dial(const struct core_handle *h, const struct mesh_addr *local,
		   int nlocal, uint16_t module_tag, uint64_t fabric_id,
		   int timeout_ms, struct core_conn **out)
{
	struct ctrl_conn *c = ctrl_conn_new(-1, 1);

	if (!c)
		return -ENOMEM;
	c->target = *h;
	order_targets(&c->target, local, nlocal);
	c->pub.module_tag = module_tag;
	c->local_fabric_id = fabric_id;
	c->pub.peer_fabric_id = h->fabric_id;
	c->conn_id = core_random_u64();
	c->pub.deadline_ns = core_now_ns() + (int64_t)timeout_ms * 1000000;
	c->dial_stage = DIAL_NEXT;
	ctrl_conn_bind_ops(c);
	*out = &c->pub;
	return 0;
}

static void note_tried(struct ctrl_conn *c, const struct mesh_addr *a,
		       int err)
{
	char text[MESH_ADDR_STRLEN];
	size_t len = strlen(c->tried);

	if (strstr(c->tried, mesh_addr_str(a, text, sizeof(text))))
		return;
	snprintf(c->tried + len, sizeof(c->tried) - len, "%s%s (%s)",
		 len ? ", " : "", text, strerror(-err));
}

static int dial_start_next(struct ctrl_conn *c)
{
	const struct mesh_addr *a = &c->target.addrs[c->dial_next];
	int64_t now = core_now_ns(), slice;
	int err;

	c->dial_next = (c->dial_next + 1) % c->target.naddrs;
	slice = (c->pub.deadline_ns - now) / c->target.naddrs;
	if (slice < 1000000000ll)
		slice = 1000000000ll;
	c->dial_attempt_end_ns = now + slice;
	err = ctrl_dial_addr(a, &c->fd);
	if (err) {
		note_tried(c, a, err);
		return err;
	}
	c->pub.remote = *a;
	c->dial_stage = DIAL_CONNECTING;
	return 0;
}

static int send_hello(struct ctrl_conn *c)
{
	const struct core_auth_key *key = ctrl_auth_key();
	uint8_t b[CTRL_HELLO_SIZE];
	struct ctrl_hello h = { .kind = CTRL_HELLO_CTRL,
				.auth = key != NULL,
				.module_tag = c->pub.module_tag,
				.nonce = c->target.nonce,
				.conn_id = c->conn_id,
				.fabric_id = c->local_fabric_id };

	ctrl_hello_encode(&h, b);
	/* The hello is raw, not framed: listeners read it before routing. */
	if (c->out_cap < CTRL_HELLO_SIZE) {
		c->out = realloc(c->out, 256);
		if (!c->out)
			return -ENOMEM;
		c->out_cap = 256;
	}
	memcpy(c->out, b, CTRL_HELLO_SIZE);
	c->out_len = CTRL_HELLO_SIZE;
	if (key) {
		c->auth = calloc(1, sizeof(*c->auth));
		if (!c->auth)
			return -ENOMEM;
		ctrl_auth_begin(c->auth, b);
	}
	return 0;
}

static int dial_step(struct ctrl_conn *c)
{
	int err;

	switch (c->dial_stage) {
	case DIAL_NEXT:
		dial_start_next(c);	/* a failure is noted; next try later */
		return -EAGAIN;
	case DIAL_CONNECTING:
		err = ctrl_dial_done(c->fd);
		if (err == -EAGAIN && core_now_ns() > c->dial_attempt_end_ns)
			err = -ETIMEDOUT;
		if (err == -EAGAIN)
			return err;
		if (err) {
			note_tried(c, &c->pub.remote, err);
			close(c->fd);
			c->fd = -1;
			c->dial_stage = DIAL_NEXT;
			return -EAGAIN;
		}
		ctrl_conn_set_peer(c);
		err = send_hello(c);
		if (err)
			return err;
		c->dial_stage = c->auth ? DIAL_AUTH : DIAL_ACK;
		return -EAGAIN;
	case DIAL_AUTH:
		err = core_ctrl_flush(&c->pub);
		if (!err)
			err = ctrl_auth_step(c->fd, c->auth);
		if (err == -EAGAIN)
			return err;
		if (err) {
			CORE_WARN("connect to %s: %s", c->pub.peer_text,
				  err == -ECONNRESET ?
					  "the peer refused our authentication "
					  "(is its auth_key_file the same?)" :
					  ctrl_auth_failure(err));
			return -EACCES;
		}
		c->dial_stage = DIAL_ACK;
		return -EAGAIN;
	case DIAL_ACK: {
		uint8_t ack[CTRL_ACK_SIZE];
		uint32_t status;
		int n = ctrl_read_frame(c, ack, sizeof(ack));

		if (n == -EAGAIN)
			return n;
		if (n < 0)
			return n;
		if (ctrl_ack_decode(ack, (size_t)n, &status))
			return -EPROTO;
		if (status)
			return -(int)status;
		c->dial_stage = DIAL_DONE;
		return 0;
	}
	default:
		return 0;
	}
}

int core_ctrl_dial_progress(struct core_conn *pub)
{
	struct ctrl_conn *c = ctrl_conn_of(pub);
	int err = dial_step(c);

	if (err != -EAGAIN)
		return err;
	if (core_now_ns() < c->pub.deadline_ns)
		return -EAGAIN;
	if (c->dial_stage == DIAL_CONNECTING)
		note_tried(c, &c->pub.remote, -ETIMEDOUT);
	return -ETIMEDOUT;
}

const char *core_conn_tried(const struct core_conn *pub)
{
	const struct ctrl_conn *c = (const struct ctrl_conn *)pub;

	return c->tried[0] ? c->tried : "no address answered";
}
