/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: a send socket's signs of a peer that is gone (tcp_xdc_stall.c),
 * from the kernel and the receiver's pings, for the data threads and the
 * lingering of closed streams alike.  Over a socket and its struct
 * tcp_xdc_stall only.
 */
#ifndef TCP_XDC_STALL_H
#define TCP_XDC_STALL_H

#include <stdbool.h>
#include <stdint.h>

#include "tcp_xdc_state.h"

/* Reads the receiver's pings off a send stream: 0 once none is left, 1
 * when the peer closed it, else -errno. */
int tcp_xdc_pings_take(int fd, struct tcp_xdc_stall *st);
bool tcp_xdc_stall_check(int fd, uint64_t tx, struct tcp_xdc_stall *st,
			 uint64_t now, int timeout_ms, bool restart);
/*
 * Whether a read's end of file is the peer's FIN, not a socket that
 * failed (timed out, reset) after another call took its error.
 */
bool tcp_xdc_peer_fin(int fd);

#endif
