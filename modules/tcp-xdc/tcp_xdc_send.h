/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc send lanes (tcp_xdc_send.c): what a pool thread does with the
 * send streams of a lane, and isend's fast path on stream 0.
 */
#ifndef TCP_XDC_SEND_H
#define TCP_XDC_SEND_H

#include <poll.h>
#include <stdbool.h>

#include "tcp_xdc_state.h"

/* One step of a send lane, its poll set in pfd; returns how long its
 * thread may sleep (-1: until woken, 0: not at all). */
int xdc_send_lane_step(struct tcp_xdc_lane *l, struct pollfd *pfd);
bool xdc_send_lane_has_work(struct tcp_xdc_lane *l);
/* isend's fast path on stream 0: true when it took the message (written
 * whole, or left to the pool thread it woke). */
bool xdc_send_inline(struct tcp_xdc_comm *comm, struct tcp_xdc_req *req);

#endif
