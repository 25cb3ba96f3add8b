/* SPDX-License-Identifier: MIT */
/*
 * One cycle's state, private to meshperf_run.c and meshperf_setup.c: a
 * cycle is set up in one and measured and torn down in the other, so both
 * need the same struct and the few helpers below.
 */
#ifndef MESHPERF_CYCLE_H
#define MESHPERF_CYCLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "meshperf.h"

/* "closeListen on channel 2147483647" and the like */
#define CALL_NAME_MAX 48

struct cycle {
	const struct perf_opts *o;
	const struct perf_params *p;
	struct perf_net net;
	struct perf_props props;
	int oob;
	uint32_t index;
	bool client;
	bool need_rev;
	int group;		/* our grouped-receive count */
	int nch;		/* channels */
	/* per channel: --iters, --budget and --mem split across channels */
	struct perf_params chp;
	bool has_send, has_recv;
	void *listen_comm[PERF_MAX_CHANNELS];
	uint8_t handle[PERF_MAX_CHANNELS][NCCL_NET_HANDLE_MAXSIZE];
	uint8_t peer_handle[PERF_MAX_CHANNELS][NCCL_NET_HANDLE_MAXSIZE];
	struct perf_dir send[PERF_MAX_CHANNELS], recv[PERF_MAX_CHANNELS];
	/* the round trip measured before the sweep; through NULL: none */
	double rtt_s;
	const char *rtt_through;
};

static inline int timeout_s(const struct cycle *c)
{
	return (int)c->p->timeout;
}

static inline bool latency_on(const struct perf_params *p, uint64_t size)
{
	return p->lat_max >= 0 && size <= (uint64_t)p->lat_max;
}

/*
 * A failed call's name for its error line, with the channel where there
 * are several; a single channel keeps the bare name ("connect failed").
 */
static inline const char *call_name(const struct cycle *c, const char *call,
				    int ch, char *buf, size_t len)
{
	if (c->nch == 1)
		return call;
	snprintf(buf, len, "%s on channel %d", call, ch);
	return buf;
}

/* ---- meshperf_setup.c ---- */

/* Which comms this side opens on each channel, before the plugin loads. */
void perf_plan_roles(struct cycle *c);
/* init, devices and getProperties; fails on a device it cannot drive. */
int perf_open_device(struct cycle *c);
/* Every channel's listen, handles, connect/accept and regMr. */
int perf_connect_all(struct cycle *c);

#endif
