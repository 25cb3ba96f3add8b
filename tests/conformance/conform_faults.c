/* SPDX-License-Identifier: MIT */
/*
 * Tests of the unusual but legal: closing with requests in flight, a peer
 * late by --late-ms, a peer killed mid-stream, and the plugin unloaded and
 * loaded again.  What may fail fails only from test(), and within a bound.
 */
#include <stdlib.h>
#include <string.h>

#include "conform.h"

/* Large messages, a short window: requests stay in flight for a while. */
static void big_msgs(struct conf_msgs *m, uint32_t n, size_t size)
{
	conf_msgs_one(m, n, size, 0);
	m->window = 8;
}

/*
 * After the peer's word that it closed or died: the requests still
 * outstanding each end, done or with an error, within --dead-ms.  Nothing
 * new is posted (NCCL stops too).  Returns when all ended or the error
 * came.
 */
static void drain_after_peer(struct conf_ctx *c, struct conf_stream *s,
			     double since, const char *what)
{
	unsigned spins = 0;
	double ms;

	s->m.n = s->posted;	/* post nothing more */
	conf_phase(c, "draining outstanding requests after %s", what);
	while (!conf_stream_step(s)) {
		ms = (perf_now() - since) * 1000;
		if (ms > c->o->dead_ms)
			conf_fail(c, "%u %s requests still pending %.0f ms after %s (--dead-ms %u): neither completed nor failed, NCCL would hang",
				  conf_outstanding(s), s->is_send ? "send" : "receive",
				  ms, what, c->o->dead_ms);
		if (++spins % 64 == 0)
			conf_sleep_ms(0);
	}
	ms = (perf_now() - since) * 1000;
	if (s->failed && ms > c->first_error_ms)
		c->first_error_ms = ms;
}

/* Steps s until it has done at least n messages. */
static void run_until(struct conf_ctx *c, struct conf_stream *s, uint32_t n,
		      const char *phase)
{
	unsigned spins = 0;

	conf_phase(c, "%s", phase);
	while (s->done < n && !conf_stream_step(s))
		if (++spins % 2048 == 0)
			conf_check_peer(c);
}

/* ---- closing with requests in flight ---- */

enum inflight { CLOSE_SENDER, CLOSE_RECEIVER, CLOSE_BOTH };

/* Keeps s going (NCCL's proxy never stops testing) until the peer's word. */
static void step_until_word(struct conf_ctx *c, struct conf_stream *s,
			    const char *phase)
{
	unsigned spins = 0;
	uint64_t word;

	conf_phase(c, "%s", phase);
	while (!conf_poll_word(c, &word)) {
		conf_stream_step(s);
		if (++spins % 2048 == 0)
			conf_check_peer(c);
		if (spins % 64 == 0)
			conf_sleep_ms(0);
	}
}

/*
 * The closer closes only once the survivor has said it takes errors from
 * now on: the bootstrap word and the plugin's own news of the close race
 * each other, and an error before the word would look like a real one.
 */
static void close_inflight(struct conf_ctx *c, enum inflight who)
{
	struct conf_stream s;
	struct conf_msgs m;
	bool send, closes;

	big_msgs(&m, 64, 1 << 20);
	send = conf_one_way_open(c, &m, &s);
	closes = who == CLOSE_BOTH || (who == CLOSE_SENDER) == send;
	if (send) {
		step_until_word(c, &s, "streaming until the receiver has 4 messages");
		if (who != CLOSE_SENDER) {
			s.expect_error = true;	/* the receiver will close */
			conf_send_word(c, 1);
		}
	} else {
		/* both sides have requests outstanding once 4 arrived */
		run_until(c, &s, 4, "receiving the first 4 messages");
		conf_stream_fill(&s, perf_now() + 5);
		s.expect_error = who != CLOSE_RECEIVER;
		conf_send_word(c, 1);
		if (who != CLOSE_SENDER)
			step_until_word(c, &s, "waiting for the sender to take errors");
	}
	if (closes) {
		conf_note(c, "closing with %u requests in flight",
			  conf_outstanding(&s));
		conf_stream_close(&s);
		if (who != CLOSE_BOTH)
			conf_send_word(c, 2);
	} else {
		step_until_word(c, &s, "streaming until the peer has closed");
		drain_after_peer(c, &s, perf_now(), "the peer closed its comm");
		conf_stream_close(&s);
	}
	conf_barrier(c, 1);
}

int conf_t_close_inflight_send(struct conf_ctx *c)
{
	close_inflight(c, CLOSE_SENDER);
	return 0;
}

int conf_t_close_inflight_recv(struct conf_ctx *c)
{
	close_inflight(c, CLOSE_RECEIVER);
	return 0;
}

int conf_t_close_inflight_both(struct conf_ctx *c)
{
	close_inflight(c, CLOSE_BOTH);
	return 0;
}

/* ---- late peers ---- */

static void late(struct conf_ctx *c, bool late_is_sender, bool close_early,
		 uint32_t n, size_t size)
{
	struct conf_stream s, *sp = &s;
	struct conf_msgs m;
	bool send;

	big_msgs(&m, n, size);
	send = conf_one_way_open(c, &m, &s);
	if (send == late_is_sender) {
		/* a rank busy elsewhere (model loading): not a single call
		 * into the plugin for --late-ms */
		conf_phase(c, "being late on purpose (%u ms)", c->o->late_ms);
		conf_sleep_ms(c->o->late_ms);
	}
	s.close_on_done = close_early && send;
	conf_run(c, &sp, 1, send == late_is_sender ? "streaming, late"
						    : "streaming to a late peer");
	/* lateness alone here: close-after-* test closing early */
	conf_barrier(c, 1);
	if (s.comm)
		conf_stream_close(&s);
}

int conf_t_late_recv(struct conf_ctx *c)
{
	/* more than the socket buffers hold: the sender stalls on a full
	 * window while the receiver is away */
	late(c, false, false, 16, 4 << 20);
	return 0;
}

int conf_t_late_recv_close(struct conf_ctx *c)
{
	/* small enough to complete into buffers: the sender is done and
	 * gone before the receiver posts anything */
	late(c, false, true, 8, 256 << 10);
	return 0;
}

int conf_t_late_send(struct conf_ctx *c)
{
	late(c, true, false, 16, 4 << 20);
	return 0;
}

/* ---- killed peers ---- */

void conf_victim_msgs(struct conf_msgs *m, uint64_t seed)
{
	static const size_t sizes[] = { 4096, 65536, 1 << 20, 1, 100 };

	conf_msgs_one(m, 1u << 30, 0, seed);
	conf_msgs_sizes(m, sizes, sizeof(sizes) / sizeof(sizes[0]));
	m->window = 8;
}

/*
 * Rank 1 runs the victim as a child process and kills it with SIGKILL
 * once it streams; rank 0 is the survivor and must see the error from
 * test() within --dead-ms of the kill, without isend/irecv failing.
 */
static void killed(struct conf_ctx *c, bool victim_sends)
{
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	struct conf_stream s;
	struct conf_msgs m;
	struct conf_victim v;
	void *lcomm = NULL, *comm = NULL;
	uint64_t seed = conf_seed(c, 7), word;
	unsigned spins = 0;
	double killed_at = 0;

	if (c->rank == 1) {
		conf_victim_spawn(c, victim_sends ? "send" : "recv", seed, &v);
		if (victim_sends) {
			conf_exchange_handle(c, false, handle, &lcomm);
			conf_victim_give(c, &v, handle, sizeof(handle));
		} else {
			conf_victim_take(c, &v, handle, sizeof(handle));
			if (oob_send_msg(c->oob, PERF_MSG_HANDLE, handle,
					 sizeof(handle), 60))
				conf_fail(c, "bootstrap: cannot send the handle");
		}
		conf_victim_wait_streaming(c, &v);
		conf_sleep_ms((uint32_t)(random() % 20));
		conf_victim_kill(c, &v);
		conf_send_word(c, 1);
		conf_barrier(c, 1);
		return;
	}
	conf_exchange_handle(c, victim_sends, handle, &lcomm);
	conf_phase(c, "connecting to the process that will be killed");
	while (!(victim_sends ? conf_poll_accept(c, lcomm, &comm)
			      : conf_poll_connect(c, handle, &comm)))
		if (++spins % 1024 == 0)
			conf_check_peer(c);
	if (lcomm)
		conf_close_listen(c, lcomm);
	conf_victim_msgs(&m, seed);
	conf_stream_init(&s, c, victim_sends ? "recv" : "send", !victim_sends,
			 comm, &m);
	s.expect_error = true;
	conf_phase(c, "streaming until the peer is killed");
	while (!conf_stream_step(&s)) {
		if (!killed_at && conf_poll_word(c, &word)) {
			killed_at = perf_now();
			conf_phase(c, "waiting for test() to report the killed peer");
		}
		if (killed_at &&
		    (perf_now() - killed_at) * 1000 > c->o->dead_ms)
			conf_fail(c, "the peer was killed %u ms ago and test() still reports no error (%u %s requests pending): NCCL would hang",
				  c->o->dead_ms, conf_outstanding(&s),
				  s.is_send ? "send" : "receive");
	}
	if (!killed_at) {
		/* the error came before the word: it still must be real */
		killed_at = perf_now();
		conf_recv_word(c);
	}
	if ((perf_now() - killed_at) * 1000 > c->first_error_ms)
		c->first_error_ms = (perf_now() - killed_at) * 1000;
	conf_note(c, "test() reported %s after %u messages",
		  perf_result_str(s.error), s.done);
	conf_stream_close(&s);
	conf_barrier(c, 1);
}

int conf_t_killed_sender(struct conf_ctx *c)
{
	killed(c, true);
	return 0;
}

int conf_t_killed_receiver(struct conf_ctx *c)
{
	killed(c, false);
	return 0;
}

/* ---- unload and reload ---- */

static void both_ways(struct conf_ctx *c, uint32_t n, const char *phase)
{
	struct conf_stream s, r, *sp[2] = { &s, &r };
	struct conf_msgs ms, mr;
	struct conf_link l;

	conf_msgs_mixed(c, &ms, n);
	conf_msgs_mixed(c, &mr, n);
	ms.seed = conf_seed(c, (uint32_t)c->rank);
	mr.seed = conf_seed(c, (uint32_t)!c->rank);
	conf_connect(c, true, true, &l);
	conf_stream_init(&s, c, "send", true, l.send, &ms);
	conf_stream_init(&r, c, "recv", false, l.recv, &mr);
	conf_run(c, sp, 2, phase);
	conf_barrier(c, 1);
	conf_stream_close(&s);
	conf_stream_close(&r);
}

int conf_t_reload(struct conf_ctx *c)
{
	conf_phase(c, "finalizing and unloading the plugin");
	conf_net_down(c);
	conf_net_up(c);
	both_ways(c, 20, "streaming after a reload");
	return 0;
}

int conf_t_multi_init(struct conf_ctx *c)
{
	struct perf_net first, second;
	struct conf_stream s[4], *sp[4] = { &s[0], &s[1], &s[2], &s[3] };
	struct conf_link l1, l2;
	struct conf_msgs m;
	ncclResult_t res;

	if (c->net.abi < 11)
		return conf_skip(c, "ncclNetPlugin_v%d has one context per process (v11+ has one per communicator)",
				 c->net.abi);
	/* a second communicator: its own init, its own context */
	second = c->net;
	res = perf_net_init(&second, c->o->seed + 1 + c->loop);
	if (res != ncclSuccess)
		conf_fail(c, "a second init (another communicator) returned %s",
			  perf_result_str(res));
	if (second.ctx == c->net.ctx && second.ctx)
		conf_note(c, "both inits returned the same context %p",
			  second.ctx);
	first = c->net;
	conf_connect(c, true, true, &l1);
	c->net = second;
	conf_connect(c, true, true, &l2);
	c->net = first;
	conf_msgs_mixed(c, &m, 20);
	for (int i = 0; i < 4; i++) {
		bool send = i % 2 == 0;

		m.seed = conf_seed(c, 20 + (uint32_t)i / 2 * 2 +
					      (uint32_t)(send ? c->rank : !c->rank));
		conf_stream_init(&s[i], c, send ? "send" : "recv", send,
				 i < 2 ? (send ? l1.send : l1.recv)
				       : (send ? l2.send : l2.recv), &m);
	}
	conf_run(c, sp, 4, "streaming on two contexts");
	conf_barrier(c, 1);
	for (int i = 2; i < 4; i++)
		conf_stream_close(&s[i]);
	res = perf_net_finalize(&second);
	if (res != ncclSuccess)
		conf_fail(c, "finalize of the second context returned %s",
			  perf_result_str(res));
	/* the first communicator's comms live on */
	for (int i = 0; i < 2; i++) {
		bool send = i == 0;

		conf_stream_release(&s[i]);
		m.seed = conf_seed(c, 30 + (uint32_t)(send ? c->rank : !c->rank));
		conf_stream_init(&s[i], c, send ? "send" : "recv", send,
				 send ? l1.send : l1.recv, &m);
	}
	conf_run(c, sp, 2, "streaming on the first context after the second was finalized");
	conf_barrier(c, 2);
	conf_stream_close(&s[0]);
	conf_stream_close(&s[1]);
	return 0;
}
