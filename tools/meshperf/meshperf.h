/* SPDX-License-Identifier: MIT */
/*
 * meshperf: drives any NCCL net plugin between two processes the way NCCL's
 * proxy does, and measures bandwidth and latency with every byte verified.
 */
#ifndef MESHPERF_H
#define MESHPERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the plugin driver, bootstrap socket and benchmark it shares */
#include "netdrive.h"

#define PERF_DEFAULT_PORT 18515
#define PERF_RANK_SERVER 0
#define PERF_RANK_CLIENT 1

/* --recv-size: buffers beyond a message are allocated, so keep it sane */
#define PERF_MAX_RECV_SIZE (1ULL << 30)

/* Per-process options. */
struct perf_opts {
	bool server;
	const char *peer;	/* client: host of the server */
	const char *bind;
	int port;
	const char *port_file;
	const char *plugin;
	int abi;		/* 0: newest exported */
	int dev;
	int traffic_class;
	enum perf_prof prof;	/* the profiler callback handed to init */
	int verbose;
	bool json;
	bool sizes_given;
	enum perf_fault fault;
	uint32_t recv_delay;	/* seconds before receives are posted */
	bool close_early;	/* close send comms right after the last send */
	struct perf_params params;
};

/* ---- logging and the watchdog (meshperf.c) ---- */

extern int perf_verbose;
extern const char *perf_role;
/* Arms a SIGALRM that ends the process, naming the phase that hung; the
 * benchmark's progress pushes it out through the watchdog_kick hook. */
void perf_watchdog(const char *phase, unsigned seconds);

/* One init .. finalize, dlclose cycle (meshperf_run.c). */
int perf_run_cycle(const struct perf_opts *o, int oob, uint32_t cycle);

/* The least round trip the cycles measured before their sweeps, and
 * through what: "plugin" (8-byte rounds) or "bootstrap" (the kernel's
 * of the bootstrap connection); through NULL: none (meshperf_run.c). */
struct perf_rtt {
	double s;
	const char *through;
};
extern struct perf_rtt perf_rtt;
/* "36.6 us", "20.13 ms": a round trip as people read it (meshperf.c). */
const char *perf_rtt_text(double s, char *buf, size_t cap);

#endif
