/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc connection setup (tcp_xdc_conn.c): the hello and reply over the
 * core's control channel and the data streams, up to the comm's start.
 */
#ifndef TCP_XDC_CONN_H
#define TCP_XDC_CONN_H

#include <nccl-mesh/module.h>

int tcp_xdc_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
		    void **send_comm);
int tcp_xdc_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
		   void **recv_comm);
void tcp_xdc_abandon(void *mctx, struct mesh_ctrl *ctrl);

#endif
