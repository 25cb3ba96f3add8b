/* SPDX-License-Identifier: MIT */
/*
 * The bytes of meshinfo --cluster's control sockets, with no I/O, so a
 * fuzzer runs the very code that reads them: the fixed-size messages
 * (commands, answers, a host's facts) and both ends of the rendezvous,
 * rank 0's greeting of one connection and a joining rank's side.
 *
 * Rendezvous (every message framed as netdrive's bootstrap frames them):
 *   joiner -> rank 0  HELLO  rdv message, data = the 40-byte hello:
 *                     proto | rank | size | flags (1: has a key) | 0
 *   rank 0 -> joiner  ANSWER rdv message: a status, and with a key the
 *                     auth CHALLENGE (core/auth.h)
 *   joiner -> rank 0  HELLO  rdv message, data = the auth RESPONSE
 *   rank 0 -> joiner  ANSWER status, and the auth PROOF
 *   joiner -> rank 0  RESULT the joiner's facts (struct cl_host)
 * An rdv message is code | length | data[CL_RDV_DATA]; without a key the
 * second pair is left out.  The MACs cover the hello, so a rank claimed
 * under the key is the rank the key's holder asked for.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "buf.h"
#include "cluster.h"

/* ---- encoding: big-endian integers, strings with a length ---- */

struct cl_buf {
	uint8_t *p;
	size_t off, cap;
	bool bad;
};

static void put_bytes(struct cl_buf *b, const void *v, size_t n)
{
	if (n > b->cap - b->off) {
		b->bad = true;
		return;
	}
	if (n)		/* v may be NULL then: memcpy wants it not to be */
		memcpy(b->p + b->off, v, n);
	b->off += n;
}

static void get_bytes(struct cl_buf *b, void *v, size_t n)
{
	if (n > b->cap - b->off) {
		b->bad = true;
		memset(v, 0, n);
		return;
	}
	memcpy(v, b->p + b->off, n);
	b->off += n;
}

static void put64(struct cl_buf *b, uint64_t v)
{
	v = htobe64(v);
	put_bytes(b, &v, sizeof(v));
}

static uint64_t get64(struct cl_buf *b)
{
	uint64_t v;

	get_bytes(b, &v, sizeof(v));
	return be64toh(v);
}

static void put_int(struct cl_buf *b, int v)
{
	put64(b, (uint64_t)(int64_t)v);
}

/* An int that does not fit one is no int we sent. */
static int get_int(struct cl_buf *b)
{
	int64_t v = (int64_t)get64(b);

	if (v < INT32_MIN || v > INT32_MAX) {
		b->bad = true;
		return 0;
	}
	return (int)v;
}

static void put_dbl(struct cl_buf *b, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof(v));
	put64(b, v);
}

/* Times: finite and not negative, or the message is bad (an infinity
 * would reach the report's figures and its JSON). */
static double get_time(struct cl_buf *b)
{
	uint64_t v = get64(b);
	double d;

	memcpy(&d, &v, sizeof(d));
	if (!isfinite(d) || d < 0) {
		b->bad = true;
		return 0;
	}
	return d;
}

static void put_str(struct cl_buf *b, const char *s)
{
	size_t n = strlen(s);

	put64(b, n);
	put_bytes(b, s, n);
}

/*
 * Into a field of `cap` bytes, cut to fit, always terminated; control
 * bytes become '?', since names and reasons go to a terminal and into
 * DOT as they are.
 */
static void get_str(struct cl_buf *b, char *s, size_t cap)
{
	uint64_t n = get64(b);
	size_t keep;

	s[0] = '\0';
	if (b->bad || n > b->cap - b->off) {
		b->bad = true;
		return;
	}
	keep = n < cap ? (size_t)n : cap - 1;
	memcpy(s, b->p + b->off, keep);
	s[keep] = '\0';
	for (size_t i = 0; i < keep; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			s[i] = '?';
	b->off += n;
}

/* A count of `max` at most; else the message is bad and the count 0. */
static int get_count(struct cl_buf *b, int max)
{
	int n = get_int(b);

	if (n < 0 || n > max) {
		b->bad = true;
		return 0;
	}
	return n;
}

static int put_end(const struct cl_buf *b)
{
	return b->bad ? -EOVERFLOW : 0;
}

int cl_encode_cmd(const struct cl_cmd *c, uint8_t msg[CL_MSG_BYTES])
{
	struct cl_buf b = { msg, 0, CL_MSG_BYTES, false };

	memset(msg, 0, CL_MSG_BYTES);
	put_int(&b, c->kind);
	put_int(&b, c->rail);
	put_int(&b, c->peer);
	put_int(&b, c->status);
	put_int(&b, c->sender);
	put64(&b, c->size);
	put64(&b, c->iters);
	put_bytes(&b, c->handle, sizeof(c->handle));
	return put_end(&b);
}

int cl_decode_cmd(const uint8_t msg[CL_MSG_BYTES], struct cl_cmd *c)
{
	struct cl_buf b = { (uint8_t *)msg, 0, CL_MSG_BYTES, false };

	c->kind = get_int(&b);
	c->rail = get_int(&b);
	c->peer = get_int(&b);
	c->status = get_int(&b);
	c->sender = get_int(&b);
	c->size = get64(&b);
	c->iters = get64(&b);
	get_bytes(&b, c->handle, sizeof(c->handle));
	return b.bad ? -EPROTO : 0;
}

static void put_pair(struct cl_buf *b, const struct cl_pair *p)
{
	put_int(b, p->ok);
	put_str(b, p->cls);
	put_str(b, p->module);
	put_str(b, p->local);
	put_str(b, p->remote);
	put_int(b, p->nrelays);
	for (int i = 0; i < p->nrelays; i++) {
		put_str(b, p->relays[i]);
		put_str(b, p->relay_addrs[i]);
	}
	put_int(b, p->ndevices);
	for (int i = 0; i < p->ndevices; i++)
		put_str(b, p->devices[i]);
	put_str(b, p->cipher);
	put_str(b, p->reason);
}

static void get_pair(struct cl_buf *b, struct cl_pair *p)
{
	p->ok = get_int(b) != 0;
	get_str(b, p->cls, sizeof(p->cls));
	get_str(b, p->module, sizeof(p->module));
	get_str(b, p->local, sizeof(p->local));
	get_str(b, p->remote, sizeof(p->remote));
	p->nrelays = get_count(b, CL_MAX_RELAYS);
	for (int i = 0; i < p->nrelays; i++) {
		get_str(b, p->relays[i], sizeof(p->relays[i]));
		get_str(b, p->relay_addrs[i], sizeof(p->relay_addrs[i]));
	}
	p->ndevices = get_count(b, CL_MAX_DEVICES);
	for (int i = 0; i < p->ndevices; i++)
		get_str(b, p->devices[i], sizeof(p->devices[i]));
	get_str(b, p->cipher, sizeof(p->cipher));
	get_str(b, p->reason, sizeof(p->reason));
}

int cl_encode_step(const struct cl_step *s, uint8_t msg[CL_MSG_BYTES])
{
	struct cl_buf b = { msg, 0, CL_MSG_BYTES, false };

	memset(msg, 0, CL_MSG_BYTES);
	put_int(&b, s->rc);
	put_bytes(&b, s->handle, sizeof(s->handle));
	put_int(&b, s->send_ok);
	put_int(&b, s->recv_ok);
	put_pair(&b, &s->path);
	put_str(&b, s->recv_reason);
	put_dbl(&b, s->elapsed);
	put_dbl(&b, s->overhead);
	put_dbl(&b, s->min_round);
	return put_end(&b);
}

int cl_decode_step(const uint8_t msg[CL_MSG_BYTES], struct cl_step *s)
{
	struct cl_buf b = { (uint8_t *)msg, 0, CL_MSG_BYTES, false };

	memset(s, 0, sizeof(*s));
	s->rc = get_int(&b);
	get_bytes(&b, s->handle, sizeof(s->handle));
	s->send_ok = get_int(&b) != 0;
	s->recv_ok = get_int(&b) != 0;
	get_pair(&b, &s->path);
	get_str(&b, s->recv_reason, sizeof(s->recv_reason));
	s->elapsed = get_time(&b);
	s->overhead = get_time(&b);
	/* zeros from a meshinfo that measured none */
	s->min_round = get_time(&b);
	return b.bad ? -EPROTO : 0;
}

int cl_encode_host(const struct cl_host *h, uint8_t msg[CL_MSG_BYTES])
{
	struct cl_buf b = { msg, 0, CL_MSG_BYTES, false };

	memset(msg, 0, CL_MSG_BYTES);
	put_int(&b, h->rank);
	put_str(&b, h->host);
	put64(&b, h->dc);
	put_str(&b, h->config_path);
	put_str(&b, h->config_sha);
	put_str(&b, h->plugin_path);
	put_str(&b, h->plugin_sha);
	put_str(&b, h->net_name);
	put_str(&b, h->error);
	put_int(&b, h->nrails);
	for (int i = 0; i < h->nrails; i++) {
		put_str(&b, h->rails[i].name);
		put_int(&b, h->rails[i].speed_mbps);
		put64(&b, h->rails[i].fabric_id);
	}
	put_str(&b, h->boot.ifname);
	put_str(&b, h->boot.addr);
	put_int(&b, h->boot.port);
	put64(&b, h->boot.token);
	put_str(&b, h->boot.rule);
	put_str(&b, h->boot.error);
	put_int(&b, h->xdc.known);
	put_int(&b, h->xdc.streams);
	put_int(&b, h->xdc.streams_max);
	put64(&b, h->xdc.send_max);
	put64(&b, h->xdc.recv_max);
	put_int(&b, h->xdc.send_set);
	put_int(&b, h->xdc.recv_set);
	put64(&b, h->xdc.keep_max);
	return put_end(&b);
}

/* A TCP port, or 0 for none; else the message is bad. */
static int get_port(struct cl_buf *b)
{
	int port = get_int(b);

	if (port < 0 || port > 65535) {
		b->bad = true;
		return 0;
	}
	return port;
}

/* A byte count the figures can multiply without overflow: 0 .. 1 TiB (the
 * largest socket buffer is 2 GiB, window_max's bound 1 TiB). */
static uint64_t get_bytes_count(struct cl_buf *b)
{
	uint64_t v = get64(b);

	if (v > CL_XDC_BYTES_MAX) {
		b->bad = true;
		return 0;
	}
	return v;
}

/* tcp-xdc's facts; all zeros (not known) from a meshinfo without them. */
static void get_xdc(struct cl_buf *b, struct cl_xdc *x)
{
	x->known = get_int(b) != 0;
	x->streams = get_count(b, CL_XDC_STREAMS_MAX);
	x->streams_max = get_count(b, CL_XDC_STREAMS_MAX);
	x->send_max = get_bytes_count(b);
	x->recv_max = get_bytes_count(b);
	x->send_set = get_int(b) != 0;
	x->recv_set = get_int(b) != 0;
	x->keep_max = get_bytes_count(b);
}

int cl_decode_host(const uint8_t msg[CL_MSG_BYTES], struct cl_host *h)
{
	struct cl_buf b = { (uint8_t *)msg, 0, CL_MSG_BYTES, false };

	memset(h, 0, sizeof(*h));
	h->rank = get_int(&b);
	get_str(&b, h->host, sizeof(h->host));
	h->dc = get64(&b);
	get_str(&b, h->config_path, sizeof(h->config_path));
	get_str(&b, h->config_sha, sizeof(h->config_sha));
	get_str(&b, h->plugin_path, sizeof(h->plugin_path));
	get_str(&b, h->plugin_sha, sizeof(h->plugin_sha));
	get_str(&b, h->net_name, sizeof(h->net_name));
	get_str(&b, h->error, sizeof(h->error));
	h->nrails = get_count(&b, CL_MAX_RAILS);
	for (int i = 0; i < h->nrails; i++) {
		get_str(&b, h->rails[i].name, sizeof(h->rails[i].name));
		h->rails[i].speed_mbps = get_int(&b);
		h->rails[i].fabric_id = get64(&b);
	}
	get_str(&b, h->boot.ifname, sizeof(h->boot.ifname));
	get_str(&b, h->boot.addr, sizeof(h->boot.addr));
	h->boot.port = get_port(&b);
	h->boot.token = get64(&b);
	get_str(&b, h->boot.rule, sizeof(h->boot.rule));
	get_str(&b, h->boot.error, sizeof(h->boot.error));
	get_xdc(&b, &h->xdc);
	return b.bad ? -EPROTO : 0;
}

/* ---- the bootstrap check's batches ---- */

/* A batch's head: where it starts and how many follow, within total. */
static void batch_head(struct cl_buf *b, int total, int max, int *first,
		       int *n)
{
	*first = get_int(b);
	*n = get_count(b, max);
	if (*first < 0 || *first >= total || *n > total - *first)
		b->bad = true;
}

int cl_encode_boot_targets(const struct cl_boot_target *t, int first, int n,
			   uint8_t msg[CL_MSG_BYTES])
{
	struct cl_buf b = { msg, 0, CL_MSG_BYTES, false };

	memset(msg, 0, CL_MSG_BYTES);
	put_int(&b, first);
	put_int(&b, n);
	for (int i = 0; i < n && i < CL_BOOT_TARGETS; i++) {
		put_int(&b, t[i].rank);
		put_str(&b, t[i].addr);
		put_int(&b, t[i].port);
		put64(&b, t[i].token);
	}
	return n > CL_BOOT_TARGETS ? -EOVERFLOW : put_end(&b);
}

int cl_decode_boot_targets(const uint8_t msg[CL_MSG_BYTES], int total,
			   struct cl_boot_target *t, int *first, int *n)
{
	struct cl_buf b = { (uint8_t *)msg, 0, CL_MSG_BYTES, false };

	batch_head(&b, total, CL_BOOT_TARGETS, first, n);
	for (int i = 0; !b.bad && i < *n; i++) {
		t[i].rank = get_int(&b);
		get_str(&b, t[i].addr, sizeof(t[i].addr));
		t[i].port = get_port(&b);
		t[i].token = get64(&b);
		/* in order: the i-th of the batch is rank first + i */
		if (t[i].rank != *first + i)
			b.bad = true;
	}
	return b.bad ? -EPROTO : 0;
}

int cl_encode_boot_results(const struct cl_boot_result *r, int first, int n,
			   uint8_t msg[CL_MSG_BYTES])
{
	struct cl_buf b = { msg, 0, CL_MSG_BYTES, false };

	memset(msg, 0, CL_MSG_BYTES);
	put_int(&b, first);
	put_int(&b, n);
	for (int i = 0; i < n && i < CL_BOOT_RESULTS; i++) {
		put_int(&b, r[i].to);
		put_int(&b, r[i].status);
		put_dbl(&b, r[i].ms);
		put_str(&b, r[i].detail);
	}
	return n > CL_BOOT_RESULTS ? -EOVERFLOW : put_end(&b);
}

int cl_decode_boot_results(const uint8_t msg[CL_MSG_BYTES], int total,
			   struct cl_boot_result *r, int *first, int *n)
{
	struct cl_buf b = { (uint8_t *)msg, 0, CL_MSG_BYTES, false };

	batch_head(&b, total, CL_BOOT_RESULTS, first, n);
	for (int i = 0; !b.bad && i < *n; i++) {
		r[i].to = get_int(&b);
		r[i].status = get_int(&b);
		r[i].ms = get_time(&b);
		get_str(&b, r[i].detail, sizeof(r[i].detail));
		if (r[i].to != *first + i || r[i].status < 0 ||
		    r[i].status >= CL_BOOT_NSTATUS)
			b.bad = true;
	}
	return b.bad ? -EPROTO : 0;
}

/* ---- the rendezvous ---- */

/* Bump when the rendezvous changes: both ends must run the same one. */
#define CL_PROTO 3
#define CL_HELLO_FLAG_KEY 1u
#define HELLO_FRAME (OOB_HDR_BYTES + CL_RDV_BYTES)
#define HOST_FRAME (OOB_HDR_BYTES + CL_MSG_BYTES)

enum { G_HELLO = 1, G_RESPONSE, G_CLAIM, G_HOST, G_DONE, G_FAILED };
enum { J_ANSWER = 1, J_PROOF, J_DONE, J_FAILED };

const char *cl_rdv_status_text(int status)
{
	switch (status) {
	case CL_RDV_OK:
		return "welcome";
	case CL_RDV_TAKEN:
		return "another process has that rank";
	case CL_RDV_MISMATCH:
		return "another meshinfo version or job size";
	case CL_RDV_KEYLESS:
		return "one side has the cluster's key (auth_key_file) and the other has none";
	case CL_RDV_AUTH:
		return "authentication failed: another key";
	}
	return "an unknown answer";
}

/* An rdv message: code | length | data, into out[CL_RDV_BYTES]. */
static void rdv_put(uint8_t out[CL_RDV_BYTES], uint64_t code,
		    const uint8_t *data, size_t len)
{
	struct cl_buf b = { out, 0, CL_RDV_BYTES, false };

	memset(out, 0, CL_RDV_BYTES);
	put64(&b, code);
	put64(&b, len);
	put_bytes(&b, data, len);
}

/* The code, and where its data lies and how long; -EPROTO when the
 * length is more than the data field holds. */
static int rdv_get(const uint8_t in[CL_RDV_BYTES], uint64_t *code,
		   const uint8_t **data, size_t *len)
{
	struct cl_buf b = { (uint8_t *)in, 0, CL_RDV_BYTES, false };
	uint64_t n;

	*code = get64(&b);
	n = get64(&b);
	if (n > CL_RDV_DATA)
		return -EPROTO;
	*data = in + b.off;
	*len = (size_t)n;
	return 0;
}

static void hello_put(uint8_t out[CORE_AUTH_HELLO_SIZE], int rank, int size,
		      bool has_key)
{
	struct cl_buf b = { out, 0, CORE_AUTH_HELLO_SIZE, false };

	memset(out, 0, CORE_AUTH_HELLO_SIZE);
	put64(&b, CL_PROTO);
	put64(&b, (uint64_t)rank);
	put64(&b, (uint64_t)size);
	put64(&b, has_key ? CL_HELLO_FLAG_KEY : 0);
}

/* ---- rank 0: one joining connection ---- */

void cl_greet_start(struct cl_greet *g, int size,
		    const struct core_auth_key *key)
{
	memset(g, 0, sizeof(*g));
	g->state = G_HELLO;
	g->size = size;
	g->key = key && key->len ? key : NULL;
	g->rank = -1;
}

size_t cl_greet_want(const struct cl_greet *g)
{
	switch (g->state) {
	case G_HELLO:
	case G_RESPONSE:
		return HELLO_FRAME - g->in_len;
	case G_HOST:
		return HOST_FRAME - g->in_len;
	default:
		return 0;
	}
}

/* An answer queued for the joiner: status, and auth bytes or none. */
static void answer(struct cl_greet *g, int status, const uint8_t *auth,
		   size_t len)
{
	if (g->out_len + OOB_HDR_BYTES + CL_RDV_BYTES > sizeof(g->out))
		return;		/* never: at most two answers are queued */
	oob_hdr_put(g->out + g->out_len, PERF_MSG_HELLO_ACK, CL_RDV_BYTES);
	rdv_put(g->out + g->out_len + OOB_HDR_BYTES, (uint64_t)status, auth,
		len);
	g->out_len += OOB_HDR_BYTES + CL_RDV_BYTES;
}

static int refuse(struct cl_greet *g, int err, int status, const char *why)
{
	if (status >= 0)
		answer(g, status, NULL, 0);
	g->state = G_FAILED;
	g->why = why;
	return err;
}

/* A whole hello frame is in g->in. */
static int on_hello(struct cl_greet *g)
{
	const uint8_t *data;
	uint8_t *hello;
	uint64_t code, v[5];
	size_t len;

	if (!oob_hdr_ok(g->in, PERF_MSG_HELLO, CL_RDV_BYTES) ||
	    rdv_get(g->in + OOB_HDR_BYTES, &code, &data, &len) || code ||
	    len != CORE_AUTH_HELLO_SIZE)
		return refuse(g, -EPROTO, -1, "not a meshinfo --cluster hello");
	hello = g->hello;
	memcpy(hello, data, CORE_AUTH_HELLO_SIZE);
	for (int i = 0; i < 5; i++) {
		memcpy(&v[i], hello + 8 * i, 8);
		v[i] = be64toh(v[i]);
	}
	if (v[0] != CL_PROTO || v[2] != (uint64_t)g->size || v[1] < 1 ||
	    v[1] >= (uint64_t)g->size || v[3] > CL_HELLO_FLAG_KEY || v[4])
		return refuse(g, -EPROTO, CL_RDV_MISMATCH,
			      "another meshinfo version or job size, or no rank of this job");
	if (!!(v[3] & CL_HELLO_FLAG_KEY) != (g->key != NULL))
		return refuse(g, -EACCES, CL_RDV_KEYLESS, g->key ?
			      "it has no key, and this cluster has one (auth_key_file)" :
			      "it has a key (auth_key_file), and rank 0 has none");
	g->rank = (int)v[1];
	if (!g->key) {
		g->state = G_CLAIM;
		return CL_GREET_CLAIM;
	}
	core_auth_start(&g->auth, CORE_AUTH_LISTENER, g->key, hello);
	if (g->auth.out_len != CORE_AUTH_NONCE_SIZE + 4)
		return refuse(g, -EIO, -1, "no randomness for a challenge");
	answer(g, CL_RDV_OK, g->auth.out, g->auth.out_len);
	core_auth_sent(&g->auth, g->auth.out_len);
	g->state = G_RESPONSE;
	return -EAGAIN;
}

/* A whole response frame is in g->in. */
static int on_response(struct cl_greet *g)
{
	const uint8_t *data;
	uint64_t code;
	size_t len, used;

	if (!oob_hdr_ok(g->in, PERF_MSG_HELLO, CL_RDV_BYTES) ||
	    rdv_get(g->in + OOB_HDR_BYTES, &code, &data, &len) || code)
		return refuse(g, -EPROTO, -1, "not a meshinfo --cluster answer to the challenge");
	if (core_auth_feed(&g->auth, data, len, &used) || used != len)
		return refuse(g, -EACCES, CL_RDV_AUTH,
			      "authentication failed (not the cluster's key)");
	g->state = G_CLAIM;
	return CL_GREET_CLAIM;
}

static int on_host(struct cl_greet *g)
{
	if (!oob_hdr_ok(g->in, PERF_MSG_RESULT, CL_MSG_BYTES) ||
	    cl_decode_host(g->in + OOB_HDR_BYTES, &g->host) ||
	    g->host.rank != g->rank)
		return refuse(g, -EPROTO, -1, "its facts about itself do not parse");
	g->state = G_DONE;
	return 0;
}

int cl_greet_feed(struct cl_greet *g, const uint8_t *buf, size_t len,
		  size_t *used)
{
	size_t want = cl_greet_want(g), take = len < want ? len : want;
	int rc;

	*used = take;
	if (!want)
		return g->state == G_DONE ? 0 : g->state == G_CLAIM ?
			CL_GREET_CLAIM : -EPROTO;
	memcpy(g->in + g->in_len, buf, take);
	g->in_len += take;
	/* refuse garbage by its first bytes, not after a frame of it */
	if (g->in_len >= 4 && oob_hdr_word(g->in, 0) != OOB_MAGIC)
		return refuse(g, -EPROTO, -1, "not a meshinfo --cluster hello");
	if (take < want)
		return -EAGAIN;
	if (g->state == G_HELLO)
		rc = on_hello(g);
	else if (g->state == G_RESPONSE)
		rc = on_response(g);
	else
		rc = on_host(g);
	g->in_len = 0;
	return rc;
}

int cl_greet_verdict(struct cl_greet *g, bool taken)
{
	if (g->state != G_CLAIM)
		return -EPROTO;
	if (taken)
		return refuse(g, -EEXIST, CL_RDV_TAKEN,
			      "it claims a rank another process has");
	/* the listener's proof is in auth.out (nothing without a key) */
	answer(g, CL_RDV_OK, g->auth.out, g->auth.out_len);
	core_auth_sent(&g->auth, g->auth.out_len);
	g->state = G_HOST;
	return 0;
}

void cl_greet_sent(struct cl_greet *g, size_t n)
{
	util_buf_drain(g->out, &g->out_len, n);
}

/* ---- a joining rank ---- */

void cl_join_start(struct cl_join *j, int rank, int size,
		   const struct core_auth_key *key)
{
	uint8_t hello[CORE_AUTH_HELLO_SIZE];

	memset(j, 0, sizeof(*j));
	j->key = key && key->len ? key : NULL;
	j->state = J_ANSWER;
	hello_put(hello, rank, size, j->key != NULL);
	rdv_put(j->out, 0, hello, sizeof(hello));
	if (j->key)
		core_auth_start(&j->auth, CORE_AUTH_CONNECTOR, j->key, hello);
}

static int join_fail(struct cl_join *j, int err, const char *why)
{
	j->state = J_FAILED;
	j->why = why;
	return err;
}

int cl_join_answer(struct cl_join *j, const uint8_t body[CL_RDV_BYTES])
{
	const uint8_t *data;
	uint64_t code;
	size_t len, used;
	int rc;

	if (j->state != J_ANSWER && j->state != J_PROOF)
		return -EPROTO;
	if (rdv_get(body, &code, &data, &len))
		return join_fail(j, -EPROTO, "rank 0's answer does not parse");
	if (code != CL_RDV_OK) {
		j->status = code <= CL_RDV_AUTH ? (int)code : -1;
		return join_fail(j, -EACCES, cl_rdv_status_text(j->status));
	}
	if (!j->key) {
		if (len)
			return join_fail(j, -EACCES, "rank 0 wants the cluster's key (auth_key_file), and this rank has none");
		j->state = J_DONE;
		return 0;
	}
	/* exactly the message the engine waits for, nothing left over: a
	 * whole challenge queues our response, a whole proof ends it */
	rc = core_auth_feed(&j->auth, data, len, &used);
	if (used != len || (j->state == J_ANSWER ?
			    rc != -EAGAIN || !j->auth.out_len : rc != 0))
		return join_fail(j, -EACCES, j->state == J_ANSWER ?
				 "rank 0 sent no challenge for the cluster's key" :
				 "rank 0 did not prove the cluster's key");
	if (j->state == J_PROOF) {
		j->state = J_DONE;
		return 0;
	}
	rdv_put(j->out, 0, j->auth.out, j->auth.out_len);
	core_auth_sent(&j->auth, j->auth.out_len);
	j->state = J_PROOF;
	return CL_JOIN_SEND;
}
