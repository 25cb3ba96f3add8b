/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc data path internals shared by its three parts: requests and
 * lifecycle (tcp_xdc_data.c), send threads (tcp_xdc_send.c) and receive
 * threads (tcp_xdc_recv.c).
 */
#ifndef TCP_XDC_PATH_H
#define TCP_XDC_PATH_H

#include <poll.h>

#include "tcp_xdc.h"

#define SEQ_BITS (64 - TCP_XDC_OFFSET_BITS)
#define SEQ_MASK ((1ULL << SEQ_BITS) - 1)
#define OFFSET_MASK (TCP_XDC_MAX_MESSAGE - 1)
#define TOTAL_UNKNOWN UINT64_MAX
#define NO_WAIT UINT64_MAX

uint64_t xdc_now_ns(void);
const char *xdc_comm_kind(const struct tcp_xdc_comm *comm);
void xdc_thread_wake(struct tcp_xdc_thread *t);
/* Records the first failure of a comm (logged when a request sees it). */
int xdc_comm_fail(struct tcp_xdc_comm *comm, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The comm's failure, WARNed the first time a request runs into it. */
int xdc_comm_error(struct tcp_xdc_comm *comm);
int xdc_stream_fail(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		    int err, const char *what);
int xdc_stream_syscall_fail(struct tcp_xdc_comm *comm,
			    struct tcp_xdc_stream *s, int err);
int xdc_stream_pending_error(struct tcp_xdc_comm *comm,
			     struct tcp_xdc_stream *s);
bool xdc_thread_should_exit(struct tcp_xdc_comm *comm);
int xdc_thread_poll(struct tcp_xdc_thread *t, struct pollfd *pfd, int n,
		    int timeout_ms);

void *xdc_send_thread(void *arg);
void *xdc_recv_thread(void *arg);

#endif
