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
			if (util_addr_same_subnet(&local[j], &h->addrs[i])) {
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
	struct ctrl_conn *c;

	/* the address count drives the dial's rotation (a modulo) and its
	 * time slices (a division): a handle with none has nothing to dial */
	if (h->naddrs < 1 || h->naddrs > CORE_HANDLE_ADDRS_MAX)
		return -EINVAL;
	c = ctrl_conn_new(-1, 1);
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

/* Adds "address (why)" to what a failed dial reports, once. */
static void note_tried(struct ctrl_conn *c, const struct mesh_addr *a,
		       const char *why)
{
	char text[UTIL_ADDR_STRLEN], entry[UTIL_ADDR_STRLEN + 200];
	size_t len = strlen(c->tried);

	snprintf(entry, sizeof(entry), "%s (%s)",
		 util_addr_str(a, text, sizeof(text)), why);
	if (strstr(c->tried, entry))
		return;
	snprintf(c->tried + len, sizeof(c->tried) - len, "%s%s",
		 len ? ", " : "", entry);
}

static int noted(const struct ctrl_conn *c, const struct mesh_addr *a)
{
	char text[UTIL_ADDR_STRLEN + 2];

	util_addr_str(a, text, UTIL_ADDR_STRLEN);
	strcat(text, " (");
	return strstr(c->tried, text) != NULL;
}

/* The next address not known to be something else than our listener. */
static int dial_start_next(struct ctrl_conn *c)
{
	const struct mesh_addr *a;
	int64_t now = core_now_ns(), slice;
	int err;

	/* next_address() failed the dial once every address was wrong */
	for (int i = 0; i < c->target.naddrs && c->wrong[c->dial_next]; i++)
		c->dial_next = (c->dial_next + 1) % c->target.naddrs;
	c->dial_cur = c->dial_next;
	a = &c->target.addrs[c->dial_cur];
	c->dial_next = (c->dial_next + 1) % c->target.naddrs;
	if (c->dial_next == 0)
		c->dial_round++;
	slice = (c->pub.deadline_ns - now) / c->target.naddrs;
	if (slice < 1000000000ll)
		slice = 1000000000ll;
	c->dial_attempt_end_ns = now + slice;
	err = ctrl_dial_addr(a, &c->fd);
	if (err) {
		note_tried(c, a, strerror(-err));
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
		uint8_t *grown = realloc(c->out, 256);

		if (!grown)
			return -ENOMEM;
		c->out = grown;
		c->out_cap = 256;
	}
	memcpy(c->out, b, CTRL_HELLO_SIZE);
	c->out_len = CTRL_HELLO_SIZE;
	c->in_len = 0;
	free(c->auth);
	c->auth = NULL;
	if (key) {
		c->auth = calloc(1, sizeof(*c->auth));
		if (!c->auth)
			return -ENOMEM;
		ctrl_auth_begin(c->auth, b);
	}
	/* A silent answer waits longer each round: our listener answers
	 * only while its process accepts, a wrong service never. */
	c->dial_attempt_end_ns = core_now_ns() +
				 (int64_t)(1 + c->dial_round) * 1000000000ll;
	return 0;
}

/*
 * Gives up on the current address: -EAGAIN to go on with the next one,
 * or, once every address turned out to be something else than our
 * listener, -EPROTO.
 */
static int next_address(struct ctrl_conn *c, const char *why, int wrong)
{
	note_tried(c, &c->pub.remote, why);
	close(c->fd);
	c->fd = -1;
	c->dial_stage = DIAL_NEXT;
	if (!wrong)
		return -EAGAIN;
	c->wrong[c->dial_cur] = 1;
	for (int i = 0; i < c->target.naddrs; i++)
		if (!c->wrong[i])
			return -EAGAIN;
	return -EPROTO;
}

/* Our listener's refusal: it decides, no other address will say else. */
static int refused(struct ctrl_conn *c, uint32_t status)
{
	switch (status) {
	case CTRL_STATUS_NEEDS_AUTH:
		note_tried(c, &c->pub.remote, "the listener requires "
			   "authentication: auth_key_file is set there, not "
			   "here");
		return -EACCES;
	case CTRL_STATUS_NO_KEY:
		note_tried(c, &c->pub.remote, "the listener does not "
			   "authenticate: auth_key_file is set here, not "
			   "there");
		return -EACCES;
	case CTRL_STATUS_NO_LISTEN:
		note_tried(c, &c->pub.remote, "no such listen is open there "
			   "(closed, or a stale handle)");
		return -ECONNREFUSED;
	case CTRL_STATUS_AUTH_FAILED:
		note_tried(c, &c->pub.remote, "the listener refused our "
			   "authentication: is its auth_key_file the same?");
		return -EACCES;
	default:
		note_tried(c, &c->pub.remote, strerror((int)status));
		return status > 0 && status < 4096 ? -(int)status : -EPROTO;
	}
}

#define NOT_OURS "answered with something else than an nccl-mesh " \
		 "listener (a wrong advertised address or port?)"
#define CLOSED "closed the connection after our hello (a wrong advertised " \
	       "port, or a listener that refused us)"
#define GAVE_UP "closed the connection during the authentication (a " \
		"listener that gave up waiting for us)"

/*
 * A listener that refuses our key says so (CTRL_STATUS_AUTH_FAILED); one
 * that closes with no word after its challenge gave up waiting (it timed
 * out a connector paused for a while, or it closed): we dial again.
 */
static int auth_failed(struct ctrl_conn *c, int err)
{
	uint32_t status = ctrl_auth_refusal(c->auth);

	if (status)
		return refused(c, status);
	if (err == -EACCES) {
		note_tried(c, &c->pub.remote, "the listener's proof is wrong: "
			   "its auth_key_file holds another key");
		return -EACCES;
	}
	if ((err == -ECONNRESET || err == -EPIPE) && c->auth->recvd)
		return next_address(c, GAVE_UP, 0);
	if (err == -ECONNRESET || err == -EPIPE)
		return next_address(c, CLOSED, 0);
	if (err == -EPROTO)
		return next_address(c, NOT_OURS, 1);
	return next_address(c, strerror(-err), 0);
}

static int read_ack(struct ctrl_conn *c)
{
	uint8_t ack[CTRL_ACK_SIZE];
	uint32_t status;
	int n = ctrl_read_frame(c, ack, sizeof(ack));

	if (n == -EAGAIN)
		return n;
	if (n == -ECONNRESET || n == -EPIPE)
		return next_address(c, CLOSED, 0);
	if (n == -EPROTO || n == -EMSGSIZE ||
	    (n >= 0 && ctrl_ack_decode(ack, (size_t)n, &status)))
		return next_address(c, NOT_OURS, 1);
	if (n < 0)
		return next_address(c, strerror(-n), 0);
	if (status)
		return refused(c, status);
	c->dial_stage = DIAL_DONE;
	return ctrl_queue_heard(c);
}

/* Waiting for the listener's answer: past this attempt's time, the next
 * address has its turn (where there is one). */
static int answer_late(struct ctrl_conn *c)
{
	if (c->target.naddrs < 2 || core_now_ns() <= c->dial_attempt_end_ns)
		return -EAGAIN;
	return next_address(c, "no answer to our hello in time", 0);
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
		if (err)
			return next_address(c, strerror(-err), 0);
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
			return answer_late(c);
		if (err)
			return auth_failed(c, err);
		ctrl_conn_set_secret(c, c->auth->a.secret,
				     c->auth->a.secret_len);
		c->dial_stage = DIAL_ACK;
		return -EAGAIN;
	case DIAL_ACK:
		err = read_ack(c);
		return err == -EAGAIN && c->dial_stage == DIAL_ACK ?
			       answer_late(c) : err;
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
	/* what the address said before counts more than this last try */
	if (c->dial_stage == DIAL_CONNECTING && !noted(c, &c->pub.remote))
		note_tried(c, &c->pub.remote, strerror(ETIMEDOUT));
	else if (c->dial_stage != DIAL_NEXT &&
		 c->dial_stage != DIAL_CONNECTING)
		note_tried(c, &c->pub.remote, "no answer to our hello");
	return -ETIMEDOUT;
}

const char *core_conn_tried(const struct core_conn *pub)
{
	const struct ctrl_conn *c = (const struct ctrl_conn *)pub;

	return c->tried[0] ? c->tried : "no address answered";
}
