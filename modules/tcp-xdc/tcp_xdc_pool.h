/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's data-path threads (tcp_xdc_pool.c): the engine that steps the
 * send and receive lanes of every comm.  The lanes wake their thread
 * through the eventfd they keep (xdc_lane_wake), never through the pool.
 */
#ifndef TCP_XDC_POOL_H
#define TCP_XDC_POOL_H

#include <stdbool.h>

#include "tcp_xdc_state.h"

/* The pool size for a threads setting (0: two per core). */
int tcp_xdc_pool_size(int threads);
int tcp_xdc_pool_start(struct tcp_xdc_ctx *ctx);
/* Stops the threads; returns how many comms are still open (their last
 * close frees the pool and the context). */
int tcp_xdc_pool_fini(struct tcp_xdc_ctx *ctx);
/* Frees the pool and the module's context. */
void tcp_xdc_ctx_free(struct tcp_xdc_ctx *ctx);

int xdc_pool_attach(struct tcp_xdc_ctx *ctx, struct tcp_xdc_comm *comm);
/* Returns once no pool thread looks at the comm's streams any more; true
 * when it was the last comm open at the module's fini, which left the
 * context to it (tcp_xdc_ctx_free). */
bool xdc_pool_detach(struct tcp_xdc_comm *comm);
int xdc_pool_workers(const struct tcp_xdc_ctx *ctx);

#endif
