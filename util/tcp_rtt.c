/* SPDX-License-Identifier: MIT */
/* A TCP socket's round trip from TCP_INFO (tcp_rtt.h). */
#include <errno.h>
/* the kernel's struct: glibc's netinet/tcp.h stops before tcpi_min_rtt */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_rtt.h"

int util_tcp_rtt_us(int fd, uint32_t *us)
{
	const socklen_t min_end = offsetof(struct tcp_info, tcpi_min_rtt) +
				  sizeof(((struct tcp_info *)0)->tcpi_min_rtt);
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return -errno;
	/* an older kernel fills less; ~0U: no sample in the window yet */
	if (len >= min_end && ti.tcpi_min_rtt && ti.tcpi_min_rtt != ~0U)
		*us = ti.tcpi_min_rtt;
	else
		*us = ti.tcpi_rtt;
	return *us ? 0 : -ENODATA;
}
