/* SPDX-License-Identifier: MIT */
#include "ctrl_gate.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The listener reads exactly the connector's RESPONSE during the
 * handshake (auth.h), so no module byte is swallowed. */
#define AUTH_LISTENER_READS 52

static const char *const refusal_text[CTRL_REFUSE_COUNT] = {
	[CTRL_REFUSE_CLOSED] = "closed before a complete hello",
	[CTRL_REFUSE_HELLO_TIMEOUT] = "no complete hello in time",
	[CTRL_REFUSE_AUTH_TIMEOUT] = "no complete authentication in time",
	[CTRL_REFUSE_BAD_HELLO] = "bad hello",
	[CTRL_REFUSE_NEEDS_AUTH] = "it does not authenticate and "
				   "auth_key_file is set here",
	[CTRL_REFUSE_NO_KEY] = "it authenticates but no auth_key_file is set "
			       "here",
	[CTRL_REFUSE_AUTH_FAILED] = "authentication failed (wrong key, or a "
				    "replay)",
	[CTRL_REFUSE_AUTH_GARBAGE] = "garbage in the authentication handshake",
	[CTRL_REFUSE_AUTH_CLOSED] = "closed during the authentication "
				    "handshake",
	[CTRL_REFUSE_NO_LISTEN] = "it names no open listen (stale or forged "
				  "handle)",
	[CTRL_REFUSE_EVICTED] = "dropped unfinished to make room (too many "
				"pending connections)",
	[CTRL_REFUSE_SHUTDOWN] = "the listener closed before it completed its "
				 "hello",
	[CTRL_REFUSE_CROWDED] = "dropped unaccepted to make room (too many "
				"control connections waiting for an accept, "
				"from its source or in all)",
	[CTRL_REFUSE_NO_REJOIN] = "it resumes a connection not kept here "
				  "(another process's, a wrong key, or one "
				  "closed long ago)",
	[CTRL_REFUSE_REJOIN_CLOSED] = "it resumes a connection closed here",
};

const char *ctrl_refusal_text(enum ctrl_refusal why)
{
	return why < CTRL_REFUSE_COUNT ? refusal_text[why] : "?";
}

void ctrl_gate_init(struct ctrl_gate *g, const struct core_auth_key *key)
{
	memset(g, 0, sizeof(*g));
	g->key = key && key->len ? key : NULL;
}

size_t ctrl_gate_want(const struct ctrl_gate *g)
{
	if (g->passed)
		return 0;
	if (g->got < CTRL_HELLO_SIZE)
		return CTRL_HELLO_SIZE - g->got;
	if (g->authing)
		return AUTH_LISTENER_READS - g->auth_recvd;
	return 0;
}

static int refused(enum ctrl_refusal why)
{
	return 1 + (int)why;
}

/* After the hello: 0 to go on (authenticating if configured), else the
 * refusal. */
static int check_hello(struct ctrl_gate *g)
{
	g->detail = ctrl_hello_decode(g->buf, &g->h);
	if (g->detail)
		return refused(CTRL_REFUSE_BAD_HELLO);
	if (g->h.auth && !g->key)
		return refused(CTRL_REFUSE_NO_KEY);
	if (!g->h.auth && g->key)
		return refused(CTRL_REFUSE_NEEDS_AUTH);
	if (g->key) {
		core_auth_start(&g->auth, CORE_AUTH_LISTENER, g->key, g->buf);
		g->authing = 1;
		return -EAGAIN;
	}
	return 0;
}

int ctrl_gate_feed(struct ctrl_gate *g, const uint8_t *buf, size_t len)
{
	size_t used;
	int err;

	if (len > ctrl_gate_want(g))
		return refused(CTRL_REFUSE_AUTH_GARBAGE);	/* caller's bug */
	if (g->got < CTRL_HELLO_SIZE) {
		memcpy(g->buf + g->got, buf, len);
		g->got += len;
		if (g->got < CTRL_HELLO_SIZE)
			return -EAGAIN;
		err = check_hello(g);
		g->passed = err == 0;
		return err;
	}
	if (!len)
		return -EAGAIN;
	g->auth_recvd += len;
	err = core_auth_feed(&g->auth, buf, len, &used);
	if (err == 0) {
		g->authing = 0;
		g->passed = 1;
		return 0;
	}
	if (err == -EAGAIN)
		return g->auth_recvd == AUTH_LISTENER_READS ?
			       refused(CTRL_REFUSE_AUTH_GARBAGE) : -EAGAIN;
	return refused(err == -EACCES ? CTRL_REFUSE_AUTH_FAILED :
					CTRL_REFUSE_AUTH_GARBAGE);
}

enum ctrl_refusal ctrl_gate_closed(const struct ctrl_gate *g)
{
	return g->got < CTRL_HELLO_SIZE ? CTRL_REFUSE_CLOSED :
					  CTRL_REFUSE_AUTH_CLOSED;
}

uint32_t ctrl_refusal_status(enum ctrl_refusal why)
{
	switch (why) {
	case CTRL_REFUSE_NEEDS_AUTH:
		return CTRL_STATUS_NEEDS_AUTH;
	case CTRL_REFUSE_NO_KEY:
		return CTRL_STATUS_NO_KEY;
	case CTRL_REFUSE_NO_LISTEN:
	case CTRL_REFUSE_NO_REJOIN:
	case CTRL_REFUSE_REJOIN_CLOSED:
		return CTRL_STATUS_NO_LISTEN;
	case CTRL_REFUSE_AUTH_FAILED:
		return CTRL_STATUS_AUTH_FAILED;
	default:
		return 0;
	}
}

int ctrl_refusal_quiet(enum ctrl_refusal why)
{
	return why == CTRL_REFUSE_REJOIN_CLOSED;
}

void ctrl_closed_add(struct ctrl_closed_set *s, uint64_t nonce, uint64_t key,
		     uint16_t module_tag)
{
	s->ids[s->next] = (struct ctrl_closed_id){ nonce, key, module_tag };
	s->next = (s->next + 1) % CTRL_CLOSED_MAX;
	if (s->n < CTRL_CLOSED_MAX)
		s->n++;
}

int ctrl_closed_has(const struct ctrl_closed_set *s, uint64_t nonce,
		    uint64_t key, uint16_t module_tag)
{
	for (unsigned i = 0; i < s->n; i++) {
		const struct ctrl_closed_id *c = &s->ids[i];

		if (c->nonce == nonce && c->key == key &&
		    c->module_tag == module_tag)
			return 1;
	}
	return 0;
}

int ctrl_refusal_note(struct ctrl_refusal_log *r, enum ctrl_refusal why,
		      int64_t now)
{
	if (!r->total && now >= r->next_ns) {
		r->next_ns = now + CTRL_REFUSAL_LOG_INTERVAL_NS;
		return 1;
	}
	if (!r->total)
		r->since_ns = now;
	r->total++;
	r->counts[why < CTRL_REFUSE_COUNT ? why : CTRL_REFUSE_BAD_HELLO]++;
	return 0;
}

int ctrl_refusal_summary(struct ctrl_refusal_log *r, int64_t now, int force,
			 char *buf, size_t len)
{
	size_t off;

	if (!r->total || (!force && now < r->next_ns))
		return 0;
	off = (size_t)snprintf(buf, len, "refused %u more connection%s in "
			       "%.1f s:", r->total, r->total == 1 ? "" : "s",
			       (double)(now - r->since_ns) / 1e9);
	for (int i = 0; i < CTRL_REFUSE_COUNT; i++) {
		if (!r->counts[i] || off >= len)
			continue;
		off += (size_t)snprintf(buf + off, len - off, "%s %u %s",
					off && buf[off - 1] == ':' ? "" : ",",
					r->counts[i], refusal_text[i]);
	}
	memset(r->counts, 0, sizeof(r->counts));
	r->total = 0;
	r->next_ns = now + CTRL_REFUSAL_LOG_INTERVAL_NS;
	return 1;
}

int64_t ctrl_gate_timeout_ns(int pending, int max)
{
	if (pending <= max / 4)
		return 10 * 1000000000ll;
	if (pending <= max / 2)
		return 2 * 1000000000ll;
	return 250 * 1000000ll;
}

int ctrl_gate_pending_max(long nofile)
{
	/* A quarter of the descriptors: the rest are the job's own (NCCL,
	 * CUDA, the modules' streams). */
	long max = nofile > 0 ? nofile / 4 : 256;

	if (max < 16)
		max = 16;
	if (max > 4096)
		max = 4096;
	return (int)max;
}
