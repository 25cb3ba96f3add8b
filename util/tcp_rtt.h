/* SPDX-License-Identifier: MIT */
/*
 * A TCP socket's round trip as its kernel has measured it, for the core's
 * connection lines and tuner and for modules that size by distance.
 */
#ifndef UTIL_TCP_RTT_H
#define UTIL_TCP_RTT_H

#include <stdint.h>

/*
 * The round trip of connected TCP socket fd in microseconds: the least
 * the kernel has seen (tcpi_min_rtt, Linux 4.6 on: what the path costs
 * without the queues in it) where it keeps one, else its smoothed
 * estimate (tcpi_rtt).  0 with *us set; -ENODATA before any sample,
 * -errno of TCP_INFO otherwise (-EOPNOTSUPP for a socket that is not
 * TCP, -ENOTSOCK for no socket).
 */
int util_tcp_rtt_us(int fd, uint32_t *us);

#endif
