/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: one data stream's socket (tcp_xdc_stream.c): its options, its
 * records' keys and a write of its bytes, for whichever thread holds the
 * stream; above the module's state, below resuming and the lanes.
 */
#ifndef TCP_XDC_STREAM_H
#define TCP_XDC_STREAM_H

#include <sys/socket.h>
#include <sys/types.h>

#include "tcp_xdc_state.h"

/* Options of a data stream, also of one dialed anew; traffic_class -1
 * leaves the socket's TOS as the system set it. */
void tcp_xdc_stream_setup(const struct tcp_xdc_ctx *ctx, int fd, int index,
			  const char *peer, bool is_send, int traffic_class);
/* The records of stream `index` keyed from a socket's secret; 0 or -errno. */
int xdc_crypt_new(const struct tcp_xdc_comm *comm, int index,
		  const uint8_t *secret, size_t secret_len,
		  uint32_t record_size, struct tcp_xdc_crypt **out);
void xdc_crypt_free(struct tcp_xdc_crypt **c);
/* Writes msg in clear or as records; bytes out or -1 with errno (an
 * encrypted stream counts only records written whole). */
ssize_t xdc_stream_send(struct tcp_xdc_stream *s, struct msghdr *msg);

#endif
