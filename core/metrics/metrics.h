/* SPDX-License-Identifier: MIT */
/*
 * Metrics for operators: the counters of every comm NCCL holds and of
 * every module, summed per name, module, peer and direction, in
 * Prometheus's text exposition format (0.0.4); the textfile the plugin
 * writes for node_exporter (metrics_file.c) and the HTTP endpoint
 * meshrelay serves (metrics_http.c).  docs/observe.md lists the names.
 *
 * Nothing here runs on the data path: a comm is registered when it is
 * made and unregistered when it closes, under one mutex; the modules
 * count on the data path without locks (mesh_count) and the readers here
 * only load those counters.
 */
#ifndef CORE_METRICS_H
#define CORE_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nccl-mesh/module.h>

struct core_state;
struct core_metrics_comm;

/* Every metric's prefix. */
#define CORE_METRICS_PREFIX "nccl_mesh_"

/*
 * A comm NCCL now holds, carried by module desc as mcomm: its counters
 * are read from now on and, at core_metrics_comm_close, folded into the
 * process's totals.  peer is the label its counters get ("" for none).
 * NULL when out of memory: the comm works, uncounted (logged once).
 */
struct core_metrics_comm *core_metrics_comm_open(const struct mesh_module *desc,
						 void *mcomm,
						 const char *module,
						 const char *peer, bool send);
/* The comm's round trip in microseconds (its control socket's, 0:
 * unknown), a gauge of its peer while it is open.  NULL does nothing. */
void core_metrics_comm_rtt(struct core_metrics_comm *mc, uint32_t us);
/* Before the module closes the comm.  NULL does nothing. */
void core_metrics_comm_close(struct core_metrics_comm *mc);
/* Before the modules are unloaded: folds every open comm into the totals;
 * a comm closed after that only frees its entry. */
void core_metrics_detach_all(void);

/*
 * The process's counters as Prometheus text, malloc'd and NUL-terminated
 * in *text (its length in *len): the totals of closed comms, every open
 * comm, comms open now, and each module's own counters (st NULL: none).
 * extra_label, when not NULL, is one more label for every sample, as
 * name="value" (the textfile's pid).  0 or -ENOMEM.
 */
int core_metrics_render(const struct core_state *st, const char *extra_label,
			char **text, size_t *len);

/* metrics_file.c: the writer of metrics_file, started with the state's
 * first init when the key is set, stopped (after a last write) before
 * teardown.  Errors writing the file are logged, never fatal. */
int core_metrics_file_start(const struct core_state *st);
void core_metrics_file_stop(void);

/* metrics_http.c: GET /metrics on metrics_listen, for meshrelay. */
struct core_metrics_http;
/* 0 with *out (NULL when metrics_listen is empty), or the error, logged. */
int core_metrics_http_start(const struct core_state *st,
			    struct core_metrics_http **out);
void core_metrics_http_stop(struct core_metrics_http *h);

/* What a request (the bytes read so far) asks for. */
enum core_http_verdict {
	CORE_HTTP_INCOMPLETE,	/* no end of the header yet */
	CORE_HTTP_METRICS,	/* GET /metrics */
	CORE_HTTP_NOT_FOUND,	/* GET of anything else: 404 */
	CORE_HTTP_BAD_METHOD,	/* another method: 405 */
	CORE_HTTP_BAD_REQUEST,	/* not HTTP/1.x: 400 */
	CORE_HTTP_TOO_LARGE,	/* no end within cap bytes: 431 */
};
/* Parses a request read into buf (len bytes, cap the most it may take);
 * metrics_http_parse.c. */
enum core_http_verdict core_metrics_http_parse(const char *buf, size_t len,
					       size_t cap);

#endif
