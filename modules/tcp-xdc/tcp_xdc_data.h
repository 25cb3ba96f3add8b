/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's comms (tcp_xdc_data.c): requests, test(), and the life of a
 * connection from its streams connected to its close: the module's data
 * operations, and the start that connection setup calls.
 */
#ifndef TCP_XDC_DATA_H
#define TCP_XDC_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tcp_xdc_state.h"

/* ctrl: the control connection it was set up on (its peer, secret and
 * leg mark); record_size 0: streams in clear. */
/* rejoin: kept for resuming (NULL: none), the comm's from here on. */
/* traffic_class: of the streams' sockets (-1: left as is), kept for
 * those dialed anew.  rate_mbps: the device's speed, for the window. */
int tcp_xdc_comm_start(struct tcp_xdc_ctx *ctx, bool is_send,
		       const struct mesh_ctrl *ctrl, size_t chunk_size,
		       int nstreams, const int *fds, uint32_t record_size,
		       struct mesh_rejoin *rejoin, int traffic_class,
		       int rate_mbps, struct tcp_xdc_comm **comm_out);
int tcp_xdc_isend(void *send_comm, void *data, size_t size, int tag,
		  void *mhandle, void **request);
int tcp_xdc_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		  int *tags, void **mhandles, void **request);
int tcp_xdc_close_send(void *send_comm);
int tcp_xdc_close_recv(void *recv_comm);
int tcp_xdc_describe(void *comm, struct mesh_conn_info *info);
int tcp_xdc_comm_counters(void *comm, mesh_counter_fn emit, void *arg);

#endif
