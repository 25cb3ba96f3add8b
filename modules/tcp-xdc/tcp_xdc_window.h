/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's window (tcp_xdc_window.c): what a resuming send keeps in
 * flight, sized to its path's bandwidth-delay product, and the streams a
 * path needs to carry it.
 */
#ifndef TCP_XDC_WINDOW_H
#define TCP_XDC_WINDOW_H

#include "tcp_xdc_state.h"

/* The largest chunk NCCL's proxy thread copies (isend's fast path). */
#define TCP_XDC_KEEP_PROXY_MAX (64u << 10)

/* The speed of device dev, as NCCL is told it. */
int tcp_xdc_speed(const struct tcp_xdc_ctx *ctx, int dev);
/* Reads the host's socket buffer maxima (our netns's tcp_wmem, tcp_rmem). */
void tcp_xdc_window_init(struct tcp_xdc_ctx *ctx);
/* Bytes a path of rate_mbps and rtt_us holds in flight. */
uint64_t tcp_xdc_bdp(int rate_mbps, uint32_t rtt_us);
/* The streams a connection asks for: the configured count, or, with
 * streams auto and a known round trip, as many as its product needs. */
int tcp_xdc_window_streams(const struct tcp_xdc_ctx *ctx, uint32_t rtt_us,
			   int rate_mbps);
/* At a comm's start, its streams connected: the round trip, the product
 * and, sending with resuming on, the size of each stream's ring. */
void xdc_window_start(struct tcp_xdc_comm *comm, int rate_mbps);
/* A send socket of the comm, also one dialed anew: what it may hold
 * unsent (on a long path). */
void xdc_window_socket(const struct tcp_xdc_comm *comm, int fd);
/* The holder of s: makes its ring from the budget; 0 or -errno (no ring:
 * its chunks complete once acknowledged; asked again a second later). */
int xdc_keep_make(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s);
/* Frees s's ring and gives its bytes back. */
void xdc_keep_drop(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s);

#endif
