/* SPDX-License-Identifier: MIT */
/*
 * Tests of orderly use: closing right after completion, connection set-up
 * in every order, message shapes (zero bytes, larger receives, groups,
 * flush) and the full request window.  Tests with one direction swap it
 * every loop: even loops rank 1 sends, odd loops rank 0 does.
 */
#include <string.h>

#include "conform.h"

#define NSIZES(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* One direction: connect, run m, both done, close. */
static void one_way(struct conf_ctx *c, struct conf_msgs *m,
		    bool close_early, const char *phase)
{
	struct conf_stream s, *sp = &s;

	conf_one_way_open(c, m, &s);
	s.close_on_done = close_early;
	conf_run(c, &sp, 1, phase);
	/* unless closed early on purpose, close once both are done */
	conf_barrier(c, 1);
	if (s.comm)
		conf_stream_close(&s);
}

int conf_t_close_after_send(struct conf_ctx *c)
{
	struct conf_msgs m;

	conf_msgs_mixed(c, &m, 200);
	/* the sender closes the moment its last isend tests done; the
	 * receiver still has receives posted and data in flight */
	one_way(c, &m, conf_sender(c), "streaming; the sender closes on completion");
	return 0;
}

int conf_t_close_after_recv(struct conf_ctx *c)
{
	struct conf_msgs m;

	/* every other pair of loops: 4 MiB messages, so the sender's last
	 * one is often still in flight when the receiver closes */
	if ((c->loop / 2) & 1) {
		conf_msgs_one(&m, 16, 4 << 20, 0);
		m.window = 8;
	} else {
		conf_msgs_mixed(c, &m, 200);
	}
	one_way(c, &m, !conf_sender(c),
		"streaming; the receiver closes on completion");
	return 0;
}

/*
 * The race of close-after-recv, narrowed to its moment: a short burst,
 * every send posted at once, so that the sender is still testing its last
 * sends, their bytes already taken, when the receiver closes; each loop a
 * new connection, so a bench loop counts connections.
 */
int conf_t_close_last_recv(struct conf_ctx *c)
{
	static const size_t sizes[] = { 8, 65536 + 3, 1, 4096, 0, 100,
					(256 << 10) + 1, 17 };
	struct conf_msgs m;

	memset(&m, 0, sizeof(m));
	/* 1 to 8 messages: the last one of each size and of none */
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	m.n = 1 + c->loop / 2 % NSIZES(sizes);
	m.group = 1;
	m.window = NCCL_NET_MAX_REQUESTS;
	one_way(c, &m, !conf_sender(c),
		"a burst; the receiver closes the moment its last receive completes");
	return 0;
}

/*
 * What a job that only sets up its connections does: connect, send
 * nothing or a little, and both sides close at once.  Every close is
 * orderly, so nothing of it may be a WARN (relay.sh checks the logs).
 */
int conf_t_connect_close(struct conf_ctx *c)
{
	static const size_t sizes[] = { 8, 100, 4096 };
	struct conf_msgs m;

	memset(&m, 0, sizeof(m));
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	/* nothing, one message, three */
	m.n = (uint32_t[]){ 0, 1, 3 }[c->loop / 2 % 3];
	m.group = 1;
	m.window = NCCL_NET_MAX_REQUESTS;
	one_way(c, &m, true, "connected; both close once their few messages are done");
	return 0;
}

int conf_t_close_bidir(struct conf_ctx *c)
{
	struct conf_stream s, r, *sp[2] = { &s, &r };
	struct conf_msgs ms, mr;
	struct conf_link l;

	conf_msgs_mixed(c, &ms, 200);
	conf_msgs_mixed(c, &mr, 200);
	ms.seed = conf_dir_seed(c, true);
	mr.seed = conf_dir_seed(c, false);
	conf_connect(c, true, true, &l);
	conf_stream_init(&s, c, "send", true, l.send, &ms);
	conf_stream_init(&r, c, "recv", false, l.recv, &mr);
	s.close_on_done = true;	/* while our receives are still posted */
	r.close_on_done = true;
	conf_run(c, sp, 2, "streaming both ways; each closes on completion");
	conf_barrier(c, 1);
	return 0;
}

/* ---- connection set-up ---- */

#define MULTI_CONNS 4

static void multi_traffic(struct conf_ctx *c, bool send, void **comms,
			  int n, uint32_t msgs)
{
	struct conf_stream st[MULTI_CONNS], *sp[MULTI_CONNS];
	uint64_t ids[MULTI_CONNS];
	bool seen[MULTI_CONNS] = { false };

	/* accept may hand the comms out in any order: each connection
	 * first says which one it is */
	for (int j = 0; j < n; j++)
		ids[j] = (uint64_t)j;
	conf_xfer_words(c, comms, n, send, ids);
	for (int j = 0; j < n; j++) {
		if (ids[j] >= (uint64_t)n || seen[ids[j]])
			conf_fail(c, "accepted comm %d says it is connection %llu: expected each of 0..%d once",
				  j, (unsigned long long)ids[j], n - 1);
		seen[ids[j]] = true;
	}
	for (int j = 0; j < n; j++) {
		struct conf_msgs m;

		conf_msgs_mixed(c, &m, msgs);
		m.seed = conf_seed(c, 100 + (uint32_t)ids[j]);
		conf_stream_init(&st[j], c, send ? "send" : "recv", send,
				 comms[j], &m);
		sp[j] = &st[j];
	}
	conf_run(c, sp, n, "streaming on every connection");
	conf_barrier(c, 2);
	for (int j = 0; j < n; j++)
		conf_stream_close(&st[j]);
}

int conf_t_multi_accept(struct conf_ctx *c)
{
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE], h[MULTI_CONNS][NCCL_NET_HANDLE_MAXSIZE];
	void *comms[MULTI_CONNS] = { NULL }, *lcomm = NULL;
	bool send = conf_sender(c);
	unsigned spins = 0;
	int ndone = 0;

	conf_exchange_handle(c, !send, handle, &lcomm);
	/* a plugin may keep its connect stage in the handle: each connect
	 * gets its own copy, as each NCCL connection does */
	for (int j = 0; j < MULTI_CONNS; j++)
		memcpy(h[j], handle, sizeof(handle));
	conf_phase(c, "%s %d connections back to back on one listen comm",
		   send ? "connecting" : "accepting", MULTI_CONNS);
	while (ndone < MULTI_CONNS) {
		bool progress = false;

		for (int j = 0; j < MULTI_CONNS; j++) {
			if (comms[j])
				continue;
			if (send ? conf_poll_connect(c, h[j], &comms[j])
				 : conf_poll_accept(c, lcomm, &comms[j])) {
				ndone++;
				progress = true;
			}
			if (!send)
				break;	/* accept fills in order */
		}
		if (!progress && ++spins % 1024 == 0)
			conf_check_peer(c);
	}
	multi_traffic(c, send, comms, MULTI_CONNS, 20);
	/* and one more, later, on the same listen comm */
	memcpy(h[0], handle, sizeof(handle));
	comms[0] = NULL;
	conf_phase(c, "%s one more connection on the same listen comm",
		   send ? "connecting" : "accepting");
	while (!(send ? conf_poll_connect(c, h[0], &comms[0])
		      : conf_poll_accept(c, lcomm, &comms[0])))
		if (++spins % 1024 == 0)
			conf_check_peer(c);
	multi_traffic(c, send, comms, 1, 10);
	if (lcomm)
		conf_close_listen(c, lcomm);
	conf_barrier(c, 3);
	return 0;
}

/*
 * One side polls alone for a while before telling the other to start:
 * accept-first has the receiver poll accept with nobody connecting yet,
 * connect-first the sender poll connect with nobody accepting yet.
 */
static void ordered_pair(struct conf_ctx *c, bool accept_first,
			 uint32_t alone_ms)
{
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	void *lcomm = NULL, *comm = NULL;
	bool send = conf_sender(c), early = send != accept_first;
	struct conf_stream s, *sp = &s;
	struct conf_msgs m;
	unsigned spins = 0;
	double until;

	conf_exchange_handle(c, !send, handle, &lcomm);
	if (early) {
		conf_phase(c, "polling %s for %u ms before the peer starts",
			   send ? "connect" : "accept", alone_ms);
		until = perf_now() + alone_ms / 1000.0;
		/* the peer stays away for all of it, even once connect
		 * has returned a comm */
		while (perf_now() < until) {
			if (send && !comm)
				conf_poll_connect(c, handle, &comm);
			else if (!send && conf_poll_accept(c, lcomm, &comm))
				conf_fail(c, "accept returned a comm before the peer called connect");
			conf_sleep_ms(1);
		}
		conf_send_word(c, 1);
	} else {
		conf_phase(c, "waiting for the peer to poll %s first",
			   send ? "accept" : "connect");
		conf_recv_word(c);
	}
	conf_phase(c, "completing the %s", send ? "connect" : "accept");
	while (!comm && !(send ? conf_poll_connect(c, handle, &comm)
			       : conf_poll_accept(c, lcomm, &comm)))
		if (++spins % 1024 == 0)
			conf_check_peer(c);
	if (lcomm)
		conf_close_listen(c, lcomm);
	conf_msgs_mixed(c, &m, 20);
	m.seed = conf_dir_seed(c, send);
	conf_stream_init(&s, c, send ? "send" : "recv", send, comm, &m);
	conf_run(c, &sp, 1, "streaming");
	conf_barrier(c, 1);
	conf_stream_close(&s);
}

int conf_t_accept_first(struct conf_ctx *c)
{
	ordered_pair(c, true, 100);
	return 0;
}

int conf_t_connect_first(struct conf_ctx *c)
{
	ordered_pair(c, false, 100);
	return 0;
}

/* A rank still busy elsewhere is late to accept (or to connect) by
 * --late-ms: NCCL ranks reach their set-up calls minutes apart. */
int conf_t_late_accept(struct conf_ctx *c)
{
	ordered_pair(c, false, c->o->late_ms);
	return 0;
}

int conf_t_late_connect(struct conf_ctx *c)
{
	ordered_pair(c, true, c->o->late_ms);
	return 0;
}

int conf_t_connect_self(struct conf_ctx *c)
{
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	void *lcomm, *scomm = NULL, *rcomm = NULL;
	struct conf_stream s, r, *sp[2] = { &s, &r };
	struct conf_msgs m;
	unsigned spins = 0;

	conf_listen(c, handle, &lcomm);
	conf_phase(c, "connecting to our own listen comm");
	while (!scomm || !rcomm) {
		if (!scomm)
			conf_poll_connect(c, handle, &scomm);
		if (!rcomm)
			conf_poll_accept(c, lcomm, &rcomm);
		if (++spins % 1024 == 0)
			conf_check_peer(c);
	}
	conf_close_listen(c, lcomm);
	conf_msgs_mixed(c, &m, 40);
	m.seed = conf_seed(c, 10 + (uint32_t)c->rank);
	conf_stream_init(&s, c, "send to self", true, scomm, &m);
	conf_stream_init(&r, c, "recv from self", false, rcomm, &m);
	conf_run(c, sp, 2, "talking to ourselves");
	conf_stream_close(&s);
	conf_stream_close(&r);
	return 0;
}

/* ---- message shapes ---- */

int conf_t_zero_byte(struct conf_ctx *c)
{
	static const size_t sizes[] = { 0, 0, 1, 0, 4096, 0, 0, 65536 };
	struct conf_msgs m;

	conf_msgs_mixed(c, &m, 64);
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	/* every other pair of loops: zero bytes into larger receives */
	m.recv_extra = (c->loop & 2) ? 4096 : 0;
	one_way(c, &m, false, "streaming zero-byte messages");
	return 0;
}

int conf_t_recv_larger(struct conf_ctx *c)
{
	static const size_t sizes[] = { 1, 100, 4096, 65536 + 5, 1 << 20 };
	static const size_t extra[] = { 1, 4096, 1 << 20 };
	struct conf_msgs m;

	conf_msgs_mixed(c, &m, 40);
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	m.recv_extra = extra[(c->loop / 2) % 3];
	m.window = 8;	/* 2 MiB slots */
	one_way(c, &m, false, "streaming into larger receives");
	return 0;
}

int conf_t_grouped(struct conf_ctx *c)
{
	static const size_t sizes[] = { 4096, 0, 100, 65536, 7, 1 << 20, 3,
					8192 };
	struct conf_msgs m;

	if (c->props.max_recvs < 2)
		return conf_skip(c, "maxRecvs is 1: the plugin offers no grouped receives");
	conf_msgs_mixed(c, &m, 0);
	m.group = c->props.max_recvs;
	m.n = (uint32_t)m.group * 16;
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	m.reverse = (c->loop / 2) & 1;	/* sends in reverse tag order */
	one_way(c, &m, false, "streaming grouped receives");
	return 0;
}

int conf_t_flush(struct conf_ctx *c)
{
	struct conf_msgs m;

	if (!perf_net_has_iflush(&c->net))
		return conf_skip(c, "the plugin has no iflush");
	conf_msgs_mixed(c, &m, 0);
	m.group = c->props.max_recvs;
	m.n = (uint32_t)m.group * 10;
	m.flush = true;
	one_way(c, &m, false, "streaming with a flush after each receive");
	return 0;
}

/* ---- the request window ---- */

int conf_t_window(struct conf_ctx *c)
{
	static const size_t sizes[] = { 4096, 1, 0, 65536 };
	struct conf_stream s, *sp = &s;
	struct conf_msgs m;
	uint32_t want;
	bool send;

	conf_msgs_mixed(c, &m, 0);
	m.group = c->props.max_recvs;
	m.n = (uint32_t)m.group * NCCL_NET_MAX_REQUESTS * 4;
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	send = conf_one_way_open(c, &m, &s);
	want = send ? NCCL_NET_MAX_REQUESTS * (uint32_t)m.group
		    : NCCL_NET_MAX_REQUESTS;
	/* the receiver posts its whole window first, then the sender
	 * posts all of its own before testing any */
	if (send) {
		conf_phase(c, "waiting for the receiver's window");
		conf_recv_word(c);
	}
	conf_phase(c, "posting the full window");
	conf_stream_fill(&s, perf_now() + 10);
	if (conf_outstanding(&s) != want)
		conf_fail(c, "only %u of the %u requests NCCL may keep outstanding could be posted in 10 s (the rest returned NULL)",
			  conf_outstanding(&s), want);
	if (!send)
		conf_send_word(c, 1);
	conf_run(c, &sp, 1, "draining the window");
	conf_barrier(c, 1);
	conf_stream_close(&s);
	return 0;
}

int conf_t_null_request(struct conf_ctx *c)
{
	static const size_t sizes[] = { 1, 8, 4096, 100 };
	struct conf_stream s, *sp = &s;
	struct conf_msgs m;

	conf_msgs_mixed(c, &m, 64);
	conf_msgs_sizes(&m, sizes, NSIZES(sizes));
	if (conf_one_way_open(c, &m, &s)) {
		/* post before the receiver has any receive: a plugin that
		 * needs one answers NULL, and each retry must send once */
		conf_phase(c, "posting before the receiver is ready");
		conf_stream_fill(&s, perf_now() + 0.2);
		conf_send_word(c, 1);
	} else {
		conf_recv_word(c);
	}
	conf_run(c, &sp, 1, "streaming after early posts");
	conf_barrier(c, 1);
	conf_stream_close(&s);
	return 0;
}
