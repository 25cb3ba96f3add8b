/* SPDX-License-Identifier: MIT */
/*
 * The plugin as the tests see it: init and properties, connections set up
 * by polling connect and accept together, and streams of messages driven
 * the way NCCL's proxy drives them (post while the window allows, test the
 * oldest request, NULL means try again), every byte checked.
 */
#include <endian.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conform.h"

/* ---- init ---- */

void conf_net_up(struct conf_ctx *c)
{
	ncclResult_t res;
	int ndev = 0;

	conf_phase(c, "loading the plugin");
	if (perf_net_open(&c->net, c->o->plugin, c->o->abi))
		conf_fail(c, "cannot load plugin %s (see the error above)",
			  c->o->plugin);
	res = perf_net_init(&c->net, c->o->seed);
	if (res != ncclSuccess)
		conf_fail(c, "init of %s returned %s: the plugin cannot start here (see its WARN lines)",
			  c->o->plugin, perf_result_str(res));
	res = perf_net_devices(&c->net, &ndev);
	if (res != ncclSuccess || ndev < 1)
		conf_fail(c, "devices() returned %s with %d devices, expected success and at least one",
			  perf_result_str(res), ndev);
	if (c->o->dev >= ndev)
		conf_fail(c, "--dev %d: the plugin has %d devices", c->o->dev,
			  ndev);
	res = perf_net_get_props(&c->net, c->o->dev, &c->props);
	if (res != ncclSuccess)
		conf_fail(c, "getProperties(%d) returned %s", c->o->dev,
			  perf_result_str(res));
	if (c->props.max_recvs < 1 || c->props.max_recvs > CONF_MAX_GROUP)
		conf_fail(c, "maxRecvs is %d; NCCL needs 1..%d",
			  c->props.max_recvs, CONF_MAX_GROUP);
	if (!(c->props.ptr_support & NCCL_PTR_HOST))
		conf_fail(c, "ptrSupport %#x lacks NCCL_PTR_HOST: the suite drives host memory only",
			  (unsigned)c->props.ptr_support);
	conf_note(c, "plugin %s (ncclNetPlugin_v%d), %d devices, device %d: %s, maxRecvs %d",
		  perf_net_name(&c->net), c->net.abi, ndev, c->o->dev,
		  c->props.name ? c->props.name : "(null)",
		  c->props.max_recvs);
}

void conf_net_down(struct conf_ctx *c)
{
	ncclResult_t res = perf_net_finalize(&c->net);

	if (res != ncclSuccess)
		conf_fail(c, "finalize returned %s, expected success after every comm was closed",
			  perf_result_str(res));
	perf_net_close(&c->net);
}

/* ---- connections ---- */

/* Spins politely: two ranks and the plugin's threads share few cores. */
static void idle(unsigned *spins)
{
	struct timespec ts = { 0, 20000 };

	if (++*spins % 64 == 0)
		nanosleep(&ts, NULL);
	else
		sched_yield();
}

void conf_listen(struct conf_ctx *c, void *handle, void **lcomm)
{
	ncclResult_t res;

	memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
	*lcomm = NULL;
	res = perf_net_listen(&c->net, c->o->dev, handle, lcomm);
	if (res != ncclSuccess || !*lcomm)
		conf_fail(c, "listen returned %s with listen comm %p, expected success and a comm",
			  perf_result_str(res), *lcomm);
}

bool conf_poll_connect(struct conf_ctx *c, void *handle, void **scomm)
{
	ncclResult_t res = perf_net_connect(&c->net, c->o->dev, handle, scomm);

	if (res != ncclSuccess)
		conf_fail(c, "connect returned %s (see the plugin's WARN lines)",
			  perf_result_str(res));
	return *scomm != NULL;
}

bool conf_poll_accept(struct conf_ctx *c, void *lcomm, void **rcomm)
{
	ncclResult_t res = perf_net_accept(&c->net, lcomm, rcomm);

	if (res != ncclSuccess)
		conf_fail(c, "accept returned %s (see the plugin's WARN lines)",
			  perf_result_str(res));
	return *rcomm != NULL;
}

void conf_close_listen(struct conf_ctx *c, void *lcomm)
{
	ncclResult_t res = perf_net_close_listen(&c->net, lcomm);

	if (res != ncclSuccess)
		conf_fail(c, "closeListen returned %s", perf_result_str(res));
}

void conf_exchange_handle(struct conf_ctx *c, bool listener, void *handle,
			  void **lcomm)
{
	conf_phase(c, "exchanging a listen handle");
	*lcomm = NULL;
	if (listener) {
		conf_listen(c, handle, lcomm);
		if (oob_send_msg(c->oob, PERF_MSG_HANDLE, handle,
				 NCCL_NET_HANDLE_MAXSIZE, 60))
			conf_fail(c, "bootstrap: cannot send the handle");
	} else if (oob_recv_msg(c->oob, PERF_MSG_HANDLE, handle,
				NCCL_NET_HANDLE_MAXSIZE, 600)) {
		conf_fail(c, "bootstrap: no handle from the peer");
	}
}

void conf_connect(struct conf_ctx *c, bool i_send, bool i_recv,
		  struct conf_link *l)
{
	uint8_t mine[NCCL_NET_HANDLE_MAXSIZE], peer[NCCL_NET_HANDLE_MAXSIZE];
	void *lcomm = NULL;
	unsigned spins = 0;

	memset(l, 0, sizeof(*l));
	/* handles go out before any is read: both ranks may listen */
	if (i_recv)
		conf_exchange_handle(c, true, mine, &lcomm);
	if (i_send)
		conf_exchange_handle(c, false, peer, &(void *){ NULL });
	conf_phase(c, "connecting (%s%s)", i_send ? "connect" : "",
		   i_recv ? " accept" : "");
	for (;;) {
		bool sdone = !i_send || l->send ||
			     conf_poll_connect(c, peer, &l->send);
		bool rdone = !i_recv || l->recv ||
			     conf_poll_accept(c, lcomm, &l->recv);

		if (sdone && rdone)
			break;
		idle(&spins);
		if (spins % 1024 == 0)
			conf_check_peer(c);
	}
	if (lcomm)
		conf_close_listen(c, lcomm);
}

bool conf_sender(const struct conf_ctx *c)
{
	return c->rank == (int)((c->loop & 1) ? 0 : 1);
}

uint64_t conf_dir_seed(const struct conf_ctx *c, bool send)
{
	return conf_seed(c, (uint32_t)(send ? c->rank : !c->rank));
}

bool conf_one_way_open(struct conf_ctx *c, struct conf_msgs *m,
		       struct conf_stream *s)
{
	bool send = conf_sender(c);
	struct conf_link l;

	m->seed = conf_dir_seed(c, send);
	conf_connect(c, send, !send, &l);
	conf_stream_init(s, c, send ? "send" : "recv", send,
			 send ? l.send : l.recv, m);
	return send;
}

static void close_comm(struct conf_ctx *c, void *comm, bool send)
{
	double t0 = perf_now(), took;
	ncclResult_t res;

	if (!comm)
		return;
	conf_phase(c, "in %s", send ? "closeSend" : "closeRecv");
	res = send ? perf_net_close_send(&c->net, comm)
		   : perf_net_close_recv(&c->net, comm);
	took = (perf_now() - t0) * 1000;
	if (res != ncclSuccess)
		conf_fail(c, "%s returned %s, expected success",
			  send ? "closeSend" : "closeRecv", perf_result_str(res));
	/* a hang, not a slow close: --close-ms is far above what any
	 * plugin's close may wait for by design */
	if (took > c->o->close_ms)
		conf_fail(c, "%s took %.0f ms, more than --close-ms %u",
			  send ? "closeSend" : "closeRecv", took,
			  c->o->close_ms);
}

void conf_close_send(struct conf_ctx *c, void *comm)
{
	close_comm(c, comm, true);
}

void conf_close_recv(struct conf_ctx *c, void *comm)
{
	close_comm(c, comm, false);
}

/* ---- patterns ---- */

static uint64_t pat_state(uint64_t seed, uint32_t idx)
{
	uint64_t x = seed ^ ((uint64_t)idx * 0xd1b54a32d192ed03ULL);

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x | 1;	/* xorshift needs a non-zero state */
}

static uint64_t pat_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

void conf_pattern_fill(uint8_t *p, size_t len, uint64_t seed, uint32_t idx)
{
	uint64_t s = pat_state(seed, idx), v;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		v = pat_next(&s);
		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		v = pat_next(&s);
		memcpy(p + i, &v, len - i);
	}
}

long conf_pattern_check(const uint8_t *p, size_t len, uint64_t seed,
			uint32_t idx, uint8_t *want)
{
	uint64_t s = pat_state(seed, idx), v;
	size_t i, k;

	for (i = 0; i < len; i += 8) {
		v = pat_next(&s);
		k = len - i < 8 ? len - i : 8;
		if (memcmp(p + i, &v, k)) {
			const uint8_t *w = (const uint8_t *)&v;

			for (size_t j = 0; j < k; j++) {
				if (p[i + j] != w[j]) {
					*want = w[j];
					return (long)(i + j);
				}
			}
		}
	}
	return -1;
}

/* ---- message sets ---- */

void conf_msgs_sizes(struct conf_msgs *m, const size_t *sizes, uint32_t n)
{
	m->nsizes = n;
	memcpy(m->sizes, sizes, n * sizeof(*sizes));
}

void conf_msgs_one(struct conf_msgs *m, uint32_t n, size_t size,
		   uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->n = n;
	m->nsizes = 1;
	m->sizes[0] = size;
	m->group = 1;
	m->window = NCCL_NET_MAX_REQUESTS;
	m->seed = seed;
}

/* Many small messages with a few large ones: the mix that lost data at
 * close, and the one where a stream may overtake another. */
void conf_msgs_mixed(struct conf_ctx *c, struct conf_msgs *m, uint32_t n)
{
	static const size_t sizes[] = { 1, 8, 100, 4096, 0, 65536 + 3, 512,
					1 << 20, 17, (256 << 10) + 1 };

	(void)c;
	memset(m, 0, sizeof(*m));
	m->n = n;
	conf_msgs_sizes(m, sizes, sizeof(sizes) / sizeof(sizes[0]));
	m->group = 1;
	m->window = NCCL_NET_MAX_REQUESTS;
}

/* ---- buffers ---- */

/*
 * Loops reuse their buffers: a fresh 32 MiB per stream and loop costs more
 * in page faults than the loop itself on a busy machine.  Freed buffers
 * hold old patterns, which no message of a later loop matches.
 */
#define BUF_CACHE 16

static struct {
	uint8_t *p;
	size_t len;
	bool used;
} buf_cache[BUF_CACHE];

static uint8_t *buf_get(size_t len)
{
	int best = -1, spare = -1;

	for (int i = 0; i < BUF_CACHE; i++) {
		if (!buf_cache[i].p) {
			spare = spare < 0 ? i : spare;
		} else if (!buf_cache[i].used && buf_cache[i].len >= len &&
			   (best < 0 || buf_cache[i].len < buf_cache[best].len)) {
			best = i;
		}
	}
	if (best < 0) {
		if (spare < 0) {	/* full: drop an unused one */
			for (int i = 0; i < BUF_CACHE && spare < 0; i++)
				if (!buf_cache[i].used)
					spare = i;
			if (spare < 0)
				return NULL;
			free(buf_cache[spare].p);
		}
		len = (len + 4095) & ~4095UL;
		buf_cache[spare].p = aligned_alloc(4096, len);
		buf_cache[spare].len = buf_cache[spare].p ? len : 0;
		best = spare;
	}
	buf_cache[best].used = buf_cache[best].p != NULL;
	return buf_cache[best].p;
}

static void buf_put(uint8_t *p)
{
	for (int i = 0; i < BUF_CACHE; i++)
		if (buf_cache[i].p == p)
			buf_cache[i].used = false;
}

/* ---- streams ---- */

static size_t msg_size(const struct conf_msgs *m, uint32_t i)
{
	return m->sizes[i % m->nsizes];
}

static int msg_tag(const struct conf_msgs *m, uint32_t i)
{
	return m->group > 1 ? (int)(i % (uint32_t)m->group) + 1 : 0x2a;
}

/* The message the sender's p-th post carries. */
static uint32_t send_order(const struct conf_msgs *m, uint32_t p)
{
	uint32_t g = p / (uint32_t)m->group, k = p % (uint32_t)m->group;

	if (m->reverse && (g & 1))
		k = (uint32_t)m->group - 1 - k;
	return g * (uint32_t)m->group + k;
}

void conf_stream_init(struct conf_stream *s, struct conf_ctx *c,
		      const char *name, bool is_send, void *comm,
		      const struct conf_msgs *m)
{
	size_t most = 0, len;
	ncclResult_t res;

	memset(s, 0, sizeof(*s));
	s->c = c;
	s->name = name;
	s->is_send = is_send;
	s->comm = comm;
	s->m = *m;
	if (s->m.group < 1 || s->m.n % (uint32_t)s->m.group ||
	    s->m.window < 1 || s->m.window > NCCL_NET_MAX_REQUESTS)
		conf_fail(c, "internal: bad message set for %s", name);
	for (uint32_t i = 0; i < s->m.nsizes; i++)
		if (s->m.sizes[i] > most)
			most = s->m.sizes[i];
	s->slot_len = (most + (is_send ? 0 : s->m.recv_extra) + 63) & ~63UL;
	if (!s->slot_len)
		s->slot_len = 64;
	s->nslots = (uint32_t)(s->m.window * s->m.group);
	len = s->slot_len * s->nslots;
	s->buf = buf_get(len);
	if (!s->buf)
		conf_fail(c, "out of memory for %zu bytes of buffers", len);
	res = perf_net_reg_mr(&c->net, comm, s->buf, len, &s->mh);
	if (res != ncclSuccess)
		conf_fail(c, "regMr of %zu bytes of host memory on the %s comm returned %s",
			  len, name, perf_result_str(res));
}

void conf_stream_free(struct conf_stream *s)
{
	buf_put(s->buf);
	s->buf = NULL;
}

/* Deregisters (before the comm closes, as NCCL does). */
static void stream_dereg(struct conf_stream *s)
{
	ncclResult_t res;

	if (!s->mh)
		return;
	res = perf_net_dereg_mr(&s->c->net, s->comm, s->mh);
	if (res != ncclSuccess)
		conf_fail(s->c, "deregMr on the %s comm returned %s", s->name,
			  perf_result_str(res));
	s->mh = NULL;
}

void conf_stream_release(struct conf_stream *s)
{
	stream_dereg(s);
	conf_stream_free(s);
}

void conf_stream_close(struct conf_stream *s)
{
	stream_dereg(s);
	close_comm(s->c, s->comm, s->is_send);
	s->comm = NULL;
	conf_stream_free(s);
}

uint32_t conf_outstanding(const struct conf_stream *s)
{
	return s->tail - s->head;
}

static uint8_t *slot(struct conf_stream *s, uint32_t msg)
{
	return s->buf + (size_t)(msg % s->nslots) * s->slot_len;
}

static void note_outstanding(struct conf_stream *s)
{
	int n = (int)conf_outstanding(s);

	if (n > s->c->max_outstanding)
		s->c->max_outstanding = n;
}

/* One post attempt; true when a request was taken. */
static bool post_send(struct conf_stream *s)
{
	struct conf_ctx *c = s->c;
	uint32_t msg = send_order(&s->m, s->posted);
	size_t size = msg_size(&s->m, msg);
	void *req = NULL;
	ncclResult_t res;

	if (s->staged != msg + 1) {	/* not again after a NULL request */
		conf_pattern_fill(slot(s, msg), size, s->m.seed, msg);
		s->staged = msg + 1;
	}
	res = perf_net_isend(&c->net, s->comm, slot(s, msg), size,
			     msg_tag(&s->m, msg), s->mh, &req);
	if (res != ncclSuccess)
		conf_fail(c, "isend of message %u (%zu bytes) on the %s comm returned %s; isend may fail only on misuse, errors belong to test()",
			  msg, size, s->name, perf_result_str(res));
	if (!req) {
		c->nulls++;
		return false;
	}
	s->reqs[s->tail++ % CONF_MAX_REQS] = (struct conf_req){ req, msg };
	s->posted++;
	note_outstanding(s);
	return true;
}

static bool post_recv(struct conf_stream *s)
{
	struct conf_ctx *c = s->c;
	void *data[CONF_MAX_GROUP], *mhs[CONF_MAX_GROUP], *req = NULL;
	size_t sizes[CONF_MAX_GROUP];
	int tags[CONF_MAX_GROUP];
	uint32_t first = s->posted;
	ncclResult_t res;

	for (int k = 0; k < s->m.group; k++) {
		data[k] = slot(s, first + (uint32_t)k);
		sizes[k] = msg_size(&s->m, first + (uint32_t)k) + s->m.recv_extra;
		tags[k] = msg_tag(&s->m, first + (uint32_t)k);
		mhs[k] = s->mh;
	}
	res = perf_net_irecv(&c->net, s->comm, s->m.group, data, sizes, tags,
			     mhs, &req);
	if (res != ncclSuccess)
		conf_fail(c, "irecv of messages %u..%u on the %s comm returned %s; irecv may fail only on misuse, errors belong to test()",
			  first, first + (uint32_t)s->m.group - 1, s->name,
			  perf_result_str(res));
	if (!req) {
		c->nulls++;
		return false;
	}
	s->reqs[s->tail++ % CONF_MAX_REQS] = (struct conf_req){ req, first };
	s->posted += (uint32_t)s->m.group;
	note_outstanding(s);
	return true;
}

static bool window_open(const struct conf_stream *s)
{
	uint32_t most = (uint32_t)s->m.window *
			(s->is_send ? (uint32_t)s->m.group : 1);

	return s->posted < s->m.n && conf_outstanding(s) < most;
}

static void flush_recv(struct conf_stream *s, uint32_t first)
{
	struct conf_ctx *c = s->c;
	void *data[CONF_MAX_GROUP], *mhs[CONF_MAX_GROUP], *req = NULL;
	int sizes[CONF_MAX_GROUP], done = 0;
	unsigned spins = 0;
	ncclResult_t res;

	for (int k = 0; k < s->m.group; k++) {
		data[k] = slot(s, first + (uint32_t)k);
		sizes[k] = (int)msg_size(&s->m, first + (uint32_t)k);
		mhs[k] = s->mh;
	}
	res = perf_net_iflush(&c->net, s->comm, s->m.group, data, sizes, mhs,
			      &req);
	if (res != ncclSuccess)
		conf_fail(c, "iflush of messages %u.. returned %s, expected success (a NULL request when there is nothing to flush)",
			  first, perf_result_str(res));
	c->flushes++;
	while (req && !done) {
		res = perf_net_test(&c->net, req, &done, NULL);
		if (res != ncclSuccess)
			conf_fail(c, "test() of the flush of messages %u.. returned %s",
				  first, perf_result_str(res));
		idle(&spins);
	}
}

static void check_recv(struct conf_stream *s, uint32_t first,
		       const int *got)
{
	struct conf_ctx *c = s->c;

	for (int k = 0; k < s->m.group; k++) {
		uint32_t msg = first + (uint32_t)k;
		size_t want = msg_size(&s->m, msg);
		uint8_t wb = 0;
		long bad;

		if (got[k] < 0 || (size_t)got[k] != want)
			conf_fail(c, "test() reported %d bytes received for message %u (tag %d) on the %s comm, %zu were sent (receive posted %zu bytes)",
				  got[k], msg, msg_tag(&s->m, msg), s->name,
				  want, want + s->m.recv_extra);
		bad = conf_pattern_check(slot(s, msg), want, s->m.seed, msg,
					 &wb);
		if (bad >= 0)
			conf_fail(c, "data mismatch in message %u (tag %d, %zu bytes) on the %s comm: first bad byte at offset %ld is %#04x, expected %#04x",
				  msg, msg_tag(&s->m, msg), want, s->name, bad,
				  slot(s, msg)[bad], wb);
	}
	if (s->m.flush)
		flush_recv(s, first);
}

int conf_stream_step(struct conf_stream *s)
{
	struct conf_ctx *c = s->c;
	int got[CONF_MAX_GROUP], done = 0;
	struct conf_req *r;
	ncclResult_t res;

	if (s->failed || !s->comm)
		return 1;
	if (window_open(s))
		(void)(s->is_send ? post_send(s) : post_recv(s));
	if (s->head == s->tail)
		return s->done >= s->m.n;
	r = &s->reqs[s->head % CONF_MAX_REQS];
	for (int k = 0; k < CONF_MAX_GROUP; k++)
		got[k] = -1;
	res = perf_net_test(&c->net, r->req, &done, got);
	if (res != ncclSuccess) {
		if (s->expect_error) {
			s->failed = true;
			s->error = res;
			return 1;
		}
		conf_fail(c, "test() of %s message %u on the %s comm returned %s, expected progress or completion (%u of %u messages done)",
			  s->is_send ? "sent" : "received", r->first, s->name,
			  perf_result_str(res), s->done, s->m.n);
	}
	if (!done)
		return 0;
	if (!s->is_send)
		check_recv(s, r->first, got);
	s->head++;
	s->done += s->is_send ? 1 : (uint32_t)s->m.group;
	return s->done >= s->m.n && s->head == s->tail;
}

void conf_stream_fill(struct conf_stream *s, double deadline)
{
	unsigned spins = 0;

	while (window_open(s) && perf_now() < deadline) {
		if (!(s->is_send ? post_send(s) : post_recv(s)))
			idle(&spins);
	}
}

void conf_run(struct conf_ctx *c, struct conf_stream **s, int n,
	      const char *phase)
{
	unsigned spins = 0, rounds = 0;

	conf_phase(c, "%s", phase);
	for (;;) {
		int finished = 0;
		uint32_t before = 0, after = 0;

		for (int i = 0; i < n; i++)
			before += s[i]->done + s[i]->posted;
		for (int i = 0; i < n; i++) {
			int f = conf_stream_step(s[i]);

			if (f && s[i]->close_on_done && s[i]->comm)
				conf_stream_close(s[i]);
			finished += f;
		}
		if (finished == n)
			return;
		for (int i = 0; i < n; i++)
			after += s[i]->done + s[i]->posted;
		if (after == before)
			idle(&spins);
		if (++rounds % 2048 == 0)
			conf_check_peer(c);
	}
}

/*
 * Every comm carries one 8-byte value at once: accept may pair the comms
 * in any order, and a plugin may complete a send only once its receive is
 * posted, so one at a time could wait on each other forever.
 */
void conf_xfer_words(struct conf_ctx *c, void **comms, int n, bool is_send,
		     uint64_t *v)
{
	uint64_t *buf = aligned_alloc(4096, 4096);
	void *mh[CONF_MAX_GROUP] = { NULL }, *req[CONF_MAX_GROUP] = { NULL };
	bool done[CONF_MAX_GROUP] = { false };
	size_t size = sizeof(*v);
	int tag = 0x2a, left = n;
	unsigned spins = 0;
	ncclResult_t res;

	if (!buf || n > CONF_MAX_GROUP)
		conf_fail(c, "internal: out of memory or too many comms");
	for (int j = 0; j < n; j++) {
		buf[j * 8] = is_send ? htobe64(v[j]) : 0;
		res = perf_net_reg_mr(&c->net, comms[j], buf, 4096, &mh[j]);
		if (res != ncclSuccess)
			conf_fail(c, "regMr returned %s", perf_result_str(res));
	}
	conf_phase(c, "%s the names of %d connections",
		   is_send ? "sending" : "receiving", n);
	while (left) {
		for (int j = 0; j < n; j++) {
			void *data = &buf[j * 8];
			int flag = 0, got = -1;

			if (done[j])
				continue;
			if (!req[j]) {
				res = is_send ? perf_net_isend(&c->net, comms[j], data,
							       size, tag, mh[j], &req[j])
					      : perf_net_irecv(&c->net, comms[j], 1,
							       &data, &size, &tag,
							       &mh[j], &req[j]);
				if (res != ncclSuccess)
					conf_fail(c, "%s of 8 bytes returned %s, expected success or a NULL request",
						  is_send ? "isend" : "irecv",
						  perf_result_str(res));
				if (!req[j]) {
					c->nulls++;
					continue;
				}
			}
			res = perf_net_test(&c->net, req[j], &flag, &got);
			if (res != ncclSuccess)
				conf_fail(c, "test() of an 8-byte %s returned %s",
					  is_send ? "send" : "receive",
					  perf_result_str(res));
			if (!flag)
				continue;
			if (!is_send && got != (int)size)
				conf_fail(c, "test() reported %d bytes for an 8-byte message",
					  got);
			if (!is_send)
				v[j] = be64toh(buf[j * 8]);
			done[j] = true;
			left--;
		}
		idle(&spins);
		if (spins % 1024 == 0)
			conf_check_peer(c);
	}
	for (int j = 0; j < n; j++) {
		res = perf_net_dereg_mr(&c->net, comms[j], mh[j]);
		if (res != ncclSuccess)
			conf_fail(c, "deregMr returned %s", perf_result_str(res));
	}
	free(buf);
}
