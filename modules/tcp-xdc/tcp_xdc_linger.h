/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: closed send streams that still owe the peer data, and closing
 * send comms whose completed sends the peer has not acknowledged
 * (tcp_xdc_linger.c), kept by one thread per module context.
 */
#ifndef TCP_XDC_LINGER_H
#define TCP_XDC_LINGER_H

#include <stdbool.h>

#include "tcp_xdc_state.h"

int tcp_xdc_linger_add(struct tcp_xdc_ctx *ctx, const char *peer,
		       const int *fds, int n);
/* The step of a closing comm that the linger thread takes until it is
 * gone (true; expired: fini's wait ran out).  The comm's owner hands it
 * over with the comm: this thread knows no more of comms. */
typedef bool tcp_xdc_close_fn(struct tcp_xdc_comm *comm, bool expired);
/* A closing comm, with the step that finishes it; 0 or -ENOMEM. */
int tcp_xdc_linger_add_comm(struct tcp_xdc_ctx *ctx,
			    struct tcp_xdc_comm *comm,
			    tcp_xdc_close_fn *close_step);
void tcp_xdc_linger_fini(struct tcp_xdc_ctx *ctx);

#endif
