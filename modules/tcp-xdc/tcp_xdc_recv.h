/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc receive lanes (tcp_xdc_recv.c): what a pool thread does with the
 * receive streams of a lane, and test()'s fast path on stream 0.
 */
#ifndef TCP_XDC_RECV_H
#define TCP_XDC_RECV_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>

#include "tcp_xdc_state.h"

/* One step of a receive lane, as xdc_send_lane_step. */
int xdc_recv_lane_step(struct tcp_xdc_lane *l, struct pollfd *pfd);
/* Any thread: every stream ended, none of them left with a chunk of
 * message seq or earlier: what seq lacks never comes. */
bool xdc_recv_all_ended(struct tcp_xdc_comm *comm, uint64_t seq);
/* test()'s fast path: reads small chunks on stream 0 itself. */
void xdc_recv_inline(struct tcp_xdc_comm *comm);
/* ... and no more: stream 0 goes back to its data thread. */
void xdc_recv_inline_stop(struct tcp_xdc_comm *comm);

#endif
