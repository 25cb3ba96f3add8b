/* SPDX-License-Identifier: MIT */
/*
 * One cycle, in NCCL's order: init, devices, getProperties, listen, the
 * handle out of band, connect/accept polled until both ends exist, regMr,
 * the size sweep, deregMr, close*, finalize, dlclose.  init through regMr
 * are in meshperf_setup.c; the sweep, its results and the teardown here.
 *
 * The forward connection (client sends, server receives) carries the
 * bandwidth test.  A reverse one (server sends) carries the ping-pong
 * replies and, with --bidir, bandwidth the other way at the same time.
 *
 * With --channels N there are N of each, as NCCL opens one per channel:
 * N listens and handles, every connect and accept polled together, and the
 * bandwidth streams of all channels driven at once.  Latency uses channel 0.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meshperf_cycle.h"
#include "tcp_rtt.h"

/* Rounds of the 8-byte ping-pong that takes the round trip first. */
#define RTT_ROUNDS 8

struct result_msg {
	uint64_t bw_ns;
	uint64_t lat_ns;
	uint64_t lat_overhead_ns;
	uint64_t lat_round_ns;
};

struct perf_rtt perf_rtt;

static void arm(const struct cycle *c, const char *phase)
{
	/* twice the progress timeout: our own checks should fire first */
	perf_watchdog(phase, 2 * c->p->timeout + 10);
}

/* ---- results ---- */

struct size_result {
	uint64_t size;
	struct perf_plan fwd, rev;
	double bw_s[2];		/* [0] ours, [1] the peer's */
	double first_channel_share; /* ours: when the first was through */
	double lat_s[2];
	double lat_overhead_s[2];
	double lat_round_s[2];	/* the shortest round of the ping-pong */
	uint32_t lat_iters;
	struct perf_proc proc;	/* this process, after the bandwidth run */
};

static int exchange_results(struct cycle *c, struct size_result *r)
{
	struct result_msg out = {
		.bw_ns = htobe64((uint64_t)(r->bw_s[0] * 1e9)),
		.lat_ns = htobe64((uint64_t)(r->lat_s[0] * 1e9)),
		.lat_overhead_ns = htobe64((uint64_t)(r->lat_overhead_s[0] * 1e9)),
		.lat_round_ns = htobe64((uint64_t)(r->lat_round_s[0] * 1e9)),
	}, in;
	int rc;

	rc = oob_send_msg(c->oob, PERF_MSG_RESULT, &out, sizeof(out),
			  timeout_s(c));
	if (!rc)
		rc = oob_recv_msg(c->oob, PERF_MSG_RESULT, &in, sizeof(in),
				  timeout_s(c));
	if (rc)
		return rc;
	r->bw_s[1] = be64toh(in.bw_ns) * 1e-9;
	r->lat_s[1] = be64toh(in.lat_ns) * 1e-9;
	r->lat_overhead_s[1] = be64toh(in.lat_overhead_ns) * 1e-9;
	r->lat_round_s[1] = be64toh(in.lat_round_ns) * 1e-9;
	return 0;
}

/* The round trip into the cycle and the run's least; its JSON event. */
static void note_rtt(struct cycle *c, double s, const char *through)
{
	c->rtt_s = s;
	c->rtt_through = through;
	if (!perf_rtt.s || s < perf_rtt.s) {
		perf_rtt.s = s;
		perf_rtt.through = through;
	}
	if (c->o->json)
		printf("{\"event\":\"rtt\",\"role\":\"%s\",\"cycle\":%u,"
		       "\"rtt_us\":%.3f,\"through\":\"%s\"}\n",
		       c->client ? "client" : "server", c->index, s * 1e6,
		       through);
}

/*
 * The path's round trip, before the sweep: the client's shortest of a few
 * 8-byte rounds through the plugin where a reverse connection carries the
 * replies, else the kernel's of the bootstrap connection (TCP_INFO),
 * which may take another path.  A fault run keeps its first transfer for
 * the fault.
 */
static int measure_rtt(struct cycle *c)
{
	struct perf_side side = { &c->net, &c->chp, c->oob };
	struct perf_lat_times t;
	uint64_t out, in;
	uint32_t us;
	int rc;

	if (!c->need_rev || c->o->fault != PERF_FAULT_NONE) {
		if (!util_tcp_rtt_us(c->oob, &us))
			note_rtt(c, us * 1e-6, "bootstrap");
		return 0;
	}
	rc = oob_barrier(c->oob, c->index << 16 | 0xfffe, timeout_s(c));
	if (!rc)
		rc = perf_run_latency(&side, &c->send[0], &c->recv[0],
				      c->client, 8, RTT_ROUNDS, &t);
	if (rc)
		return rc;
	/* the client's rounds are the ones that start at a send */
	out = htobe64((uint64_t)(t.min_round * 1e9));
	rc = oob_send_msg(c->oob, PERF_MSG_RESULT, &out, sizeof(out),
			  timeout_s(c));
	if (!rc)
		rc = oob_recv_msg(c->oob, PERF_MSG_RESULT, &in, sizeof(in),
				  timeout_s(c));
	if (!rc)
		note_rtt(c, c->client ? t.min_round : be64toh(in) * 1e-9,
			 "plugin");
	return rc;
}

static void print_header(const struct cycle *c)
{
	char t[32];

	if (c->o->json)
		return;
	if (c->p->reload > 1)
		printf("# cycle %u of %u\n", c->index + 1, c->p->reload);
	if (c->rtt_through && !strcmp(c->rtt_through, "plugin"))
		printf("# rtt %s: the shortest of %d round trips of 8 bytes through the plugin\n",
		       perf_rtt_text(c->rtt_s, t, sizeof(t)), RTT_ROUNDS);
	else if (c->rtt_through)
		printf("# rtt %s: the kernel's of the bootstrap connection (no ping-pong through the plugin in this run)\n",
		       perf_rtt_text(c->rtt_s, t, sizeof(t)));
	printf("# %s%s%s\n", c->p->bidir ? "bandwidth is both directions together; " : "",
	       "latency is half the ping-pong round trip; rtt_us its shortest round",
	       c->p->unverified ? "; message bytes NOT verified" : "");
	if (c->nch > 1)
		printf("# %d channels per direction: group, window and iters are per channel, the rates over all; latency on channel 0\n",
		       c->nch);
	printf("#%13s %5s %6s %7s %10s %10s %9s %10s %10s\n", "size", "group",
	       "window", "iters", "GB/s", "Gb/s", "Mmsg/s", "lat_us",
	       "rtt_us");
}

static void print_result(const struct cycle *c, const struct size_result *r)
{
	/* every channel of a direction runs the same plan */
	uint64_t msgs = (uint64_t)r->fwd.iters * r->fwd.group * c->nch;
	double t = r->bw_s[0] > r->bw_s[1] ? r->bw_s[0] : r->bw_s[1];
	double bytes, gbs, lat_us = -1, rtt_us = -1;
	/* the client initiates the ping-pong and timed it */
	int ini = c->client ? 0 : 1;

	if (c->p->bidir)
		msgs += (uint64_t)r->rev.iters * r->rev.group * c->nch;
	bytes = (double)msgs * r->size;
	gbs = t > 0 ? bytes / t / 1e9 : 0;
	if (r->lat_iters) {
		double net = r->lat_s[ini] - r->lat_overhead_s[0] -
			     r->lat_overhead_s[1];

		lat_us = (net > 0 ? net : 0) / r->lat_iters / 2 * 1e6;
		rtt_us = r->lat_round_s[ini] * 1e6;
	}
	if (c->o->json) {
		printf("{\"event\":\"result\",\"role\":\"%s\",\"cycle\":%u,"
		       "\"size\":%" PRIu64 ",\"group\":%d,\"window\":%d,"
		       "\"iters\":%u,\"bidir\":%s,\"verified\":%s,"
		       "\"channels\":%d,\"bytes\":%.0f,"
		       "\"seconds\":%.6f,\"gbytes_per_s\":%.4f,"
		       "\"gbits_per_s\":%.4f,\"mmsgs_per_s\":%.4f,"
		       "\"first_channel_share\":%.4f,"
		       "\"threads\":%ld,\"fds\":%ld,\"peak_rss_kib\":%ld,"
		       "\"lat_iters\":%u,\"lat_us\":",
		       c->client ? "client" : "server", c->index, r->size,
		       r->fwd.group, r->fwd.window, r->fwd.iters,
		       c->p->bidir ? "true" : "false",
		       c->p->unverified ? "false" : "true", c->nch, bytes, t, gbs,
		       gbs * 8, t > 0 ? msgs / t / 1e6 : 0,
		       r->first_channel_share, r->proc.threads,
		       r->proc.fds, r->proc.peak_rss_kib, r->lat_iters);
		if (r->lat_iters)
			printf("%.3f,\"rtt_us\":%.3f}\n", lat_us, rtt_us);
		else
			printf("null,\"rtt_us\":null}\n");
		return;
	}
	printf("%14" PRIu64 " %5d %6d %7u %10.3f %10.3f %9.4f ", r->size,
	       r->fwd.group, r->fwd.window, r->fwd.iters, gbs, gbs * 8,
	       t > 0 ? msgs / t / 1e6 : 0);
	if (r->lat_iters)
		printf("%10.2f %10.2f\n", lat_us, rtt_us);
	else
		printf("%10s %10s\n", "-", "-");
	if (c->nch > 1)
		printf("#%13s first of %d channels through at %.3f of the run\n",
		       "", c->nch, r->first_channel_share);
}

/* ---- the sweep ---- */

static int release_dir(struct cycle *c, struct perf_dir *d, bool is_send);

/* --recv-delay: a receiver that starts late, its sender already sending. */
static void recv_delay(const struct cycle *c)
{
	struct timespec ts = { (time_t)c->o->recv_delay, 0 };

	if (!c->o->recv_delay || !(!c->client || c->p->bidir))
		return;
	perf_watchdog("receive delay", c->o->recv_delay + 2 * c->p->timeout + 10);
	perf_info("posting receives %u s late", c->o->recv_delay);
	nanosleep(&ts, NULL);
	arm(c, "transfers");
}

/* --close-early: the send comms go as soon as the last sends test done,
 * while the peer may still be receiving. */
static int close_early(struct cycle *c, uint32_t i)
{
	int rc = 0;

	if (!c->o->close_early || i + 1 != c->p->nsizes ||
	    !(c->client || c->p->bidir))
		return 0;
	for (int ch = 0; ch < c->nch && !rc; ch++)
		rc = release_dir(c, &c->send[ch], true);
	return rc;
}

static int run_size(struct cycle *c, uint32_t i)
{
	/* the per-channel plan; its timeout is the one latency needs too */
	struct perf_side side = { &c->net, &c->chp, c->oob };
	struct size_result r = { .size = c->p->sizes[i] };
	struct perf_bw_times times;
	uint32_t tag = c->index << 16 | i << 1;
	/* one device per process: all channels of a direction share a group */
	int fwd_group = c->client ? c->send[0].group : c->recv[0].group;
	int rev_group = c->client ? c->recv[0].group : c->send[0].group;
	int rc;

	perf_plan_size(&c->chp, r.size, fwd_group, &r.fwd);
	if (c->need_rev)
		perf_plan_size(&c->chp, r.size, rev_group, &r.rev);
	rc = oob_barrier(c->oob, tag, timeout_s(c));
	if (rc)
		return rc;
	if (latency_on(c->p, r.size)) {
		r.lat_iters = perf_latency_iters(c->p, r.size);
		struct perf_lat_times lt;

		rc = perf_run_latency(&side, &c->send[0], &c->recv[0], c->client,
				      r.size, r.lat_iters, &lt);
		r.lat_s[0] = lt.elapsed;
		r.lat_overhead_s[0] = lt.overhead;
		r.lat_round_s[0] = lt.min_round;
		if (!rc)
			rc = oob_barrier(c->oob, tag | 1, timeout_s(c));
		if (rc)
			return rc;
	}
	recv_delay(c);
	rc = perf_run_bw(&side,
			 c->client || c->p->bidir ? c->send : NULL,
			 !c->client || c->p->bidir ? c->recv : NULL, c->nch,
			 r.size, &times);
	r.bw_s[0] = times.elapsed;
	/* 1: every channel finished with the run, none got ahead */
	r.first_channel_share = times.elapsed > 0 ?
				times.first_channel / times.elapsed : 1;
	/* every comm still open, the plugin's threads at work */
	perf_proc_sample(&r.proc);
	if (!rc)
		rc = close_early(c, i);
	if (!rc)
		rc = exchange_results(c, &r);
	if (!rc)
		print_result(c, &r);
	return rc;
}

static int run_sweep(struct cycle *c)
{
	int rc;

	arm(c, "round trip");
	rc = measure_rtt(c);
	if (rc)
		return rc;
	print_header(c);
	for (uint32_t i = 0; i < c->p->nsizes && !rc; i++) {
		arm(c, "transfers");
		rc = run_size(c, i);
	}
	return rc;
}

/* ---- teardown ---- */

static int release_dir(struct cycle *c, struct perf_dir *d, bool is_send)
{
	char name[CALL_NAME_MAX];
	int rc = 0, rc2;

	if (d->comm && d->buf && !d->mr_dropped)
		rc = NET_CALL(call_name(c, "deregMr", d->channel, name,
					sizeof(name)),
			      perf_net_dereg_mr(&c->net, d->comm, d->mhandle));
	if (d->comm) {
		rc2 = is_send ? NET_CALL(call_name(c, "closeSend", d->channel,
						   name, sizeof(name)),
					 perf_net_close_send(&c->net, d->comm))
			      : NET_CALL(call_name(c, "closeRecv", d->channel,
						   name, sizeof(name)),
					 perf_net_close_recv(&c->net, d->comm));
		rc = rc ? rc : rc2;
	}
	free(d->buf);
	d->buf = NULL;
	d->comm = NULL;
	return rc;
}

/* Everything is released even after a failure; the first error counts. */
static int release_channels(struct cycle *c)
{
	char name[CALL_NAME_MAX];
	int rc = 0, rc2;

	for (int ch = 0; ch < c->nch; ch++) {
		rc2 = release_dir(c, &c->send[ch], true);
		rc = rc ? rc : rc2;
		rc2 = release_dir(c, &c->recv[ch], false);
		rc = rc ? rc : rc2;
		if (!c->listen_comm[ch])
			continue;
		rc2 = NET_CALL(call_name(c, "closeListen", ch, name,
					 sizeof(name)),
			       perf_net_close_listen(&c->net,
						     c->listen_comm[ch]));
		rc = rc ? rc : rc2;
		c->listen_comm[ch] = NULL;
	}
	return rc;
}

static int teardown(struct cycle *c)
{
	int rc, rc2;

	arm(c, "teardown");
	rc = release_channels(c);
	rc2 = NET_CALL("finalize", perf_net_finalize(&c->net));
	rc = rc ? rc : rc2;
	if (c->net.prof_events)
		perf_info("plugin reported %lu profiler events",
			  c->net.prof_events);
	return rc;
}

int perf_run_cycle(const struct perf_opts *o, int oob, uint32_t index)
{
	struct cycle *c;
	int rc, rc2;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = o;
	c->p = &o->params;
	c->oob = oob;
	c->index = index;
	c->client = !o->server;
	perf_plan_roles(c);

	arm(c, "plugin load");
	rc = perf_net_open(&c->net, o->plugin, o->abi);
	if (rc)
		goto out;
	c->net.config.trafficClass = o->traffic_class;
	c->net.prof = o->prof;
	arm(c, "init");
	rc = perf_open_device(c);
	if (!rc) {
		arm(c, "connection setup");
		rc = perf_connect_all(c);
	}
	if (!rc)
		rc = run_sweep(c);
	if (!rc) {
		arm(c, "final barrier");
		rc = oob_barrier(c->oob, 0xffffffffu - index, timeout_s(c));
	}
	rc2 = teardown(c);
	/*
	 * After a failure the plugin may still run threads on its code:
	 * leave it mapped, the process is about to exit anyway.
	 */
	if (!rc && !rc2) {
		arm(c, "dlclose");
		perf_net_close(&c->net);
	}
	rc = rc ? rc : rc2;
out:
	perf_watchdog("idle", 0);
	free(c);
	return rc;
}
