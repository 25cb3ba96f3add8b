/* SPDX-License-Identifier: MIT */
/* A byte queue kept at the front of a fixed buffer: what a non-blocking
 * sender has yet to send. */
#ifndef UTIL_BUF_H
#define UTIL_BUF_H

#include <stdint.h>
#include <string.h>

/* Drops the first n bytes (at most all of them) after they were sent. */
static inline void util_buf_drain(uint8_t *buf, size_t *len, size_t n)
{
	if (n > *len)
		n = *len;
	memmove(buf, buf + n, *len - n);
	*len -= n;
}

#endif
