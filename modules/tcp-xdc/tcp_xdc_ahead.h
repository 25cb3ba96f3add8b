/* SPDX-License-Identifier: MIT */
/*
 * Reading a stream socket.  The clear path reads straight into the
 * caller's buffers (tcp_xdc_readv).  The record layer reads ahead: a
 * receive also takes what follows on the wire, up to a small buffer's
 * room, so a record (its length and body) costs one system call, not two;
 * a record must be whole before it is opened anyway.  No module state, so
 * the record layer's unit test and fuzzer link it alone.
 */
#ifndef TCP_XDC_AHEAD_H
#define TCP_XDC_AHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* What a receive takes beyond what it asked for. */
#define TCP_XDC_READ_AHEAD 4096

struct tcp_xdc_ahead {
	uint8_t *buf;		/* TCP_XDC_READ_AHEAD bytes */
	uint32_t pos, len;	/* buf[pos, len): read, not yet taken */
};

/*
 * Bytes read from the socket and not yet taken: poll will not announce
 * them, so whoever reads the stream must come back for them.
 */
static inline bool tcp_xdc_ahead_pending(const struct tcp_xdc_ahead *a)
{
	return a->pos < a->len;
}

/*
 * Reads into iov from fd (non-blocking).  Returns bytes read (> 0), 0 at
 * the end of the stream, or -errno (-EAGAIN: nothing there); *wire counts
 * them.
 */
ssize_t tcp_xdc_readv(int fd, const struct iovec *iov, int iovcnt,
		      uint64_t *wire);

/*
 * Fills buf with up to want bytes from what was read ahead or else from fd
 * (non-blocking), in the latter case with up to `room` (1 to
 * TCP_XDC_READ_AHEAD) bytes that follow into a's buffer.  Returns bytes
 * placed in buf (> 0), 0 at the end of the stream, or -errno (-EAGAIN:
 * nothing there).  *wire counts the bytes read from the socket.
 */
ssize_t tcp_xdc_ahead_read(struct tcp_xdc_ahead *a, int fd, void *buf,
			   size_t want, size_t room, uint64_t *wire);

#endif
