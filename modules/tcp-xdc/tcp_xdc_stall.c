/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: whether a blocked send stream's peer is gone, from what the
 * kernel knows of the connection and the receiver's pings.  Both the data
 * threads and the lingering of closed streams ask.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "tcp_xdc_stall.h"

int tcp_xdc_pings_take(int fd, struct tcp_xdc_stall *st)
{
	char buf[512];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			if (memchr(buf, TCP_XDC_PING_PARKED, (size_t)n))
				st->parked = xdc_now_ns();
			continue;
		}
		if (n == 0)
			return 1;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/*
 * A send stream looks dead when for timeout_ms it wrote nothing and the
 * peer acknowledged nothing (its unacknowledged byte count stayed the
 * same), and either the peer sent nothing at all in that time (no
 * acknowledgement, no ping), or data is in flight that the peer does not
 * acknowledge although it reads: retransmitted in vain, while the peer's
 * pings may still get through a link that loses everything we send.  A
 * receiver that holds the stream back says so in its pings: its kernel
 * may then drop what we send once its buffer is full (in memory, before
 * the window closes), and that data stays in flight until it reads again.
 * Pings are data, which Linux's fast path takes without touching the time
 * of the last acknowledgement, so both times count.
 */
bool tcp_xdc_stall_check(int fd, uint64_t tx, struct tcp_xdc_stall *st,
			 uint64_t now, int timeout_ms, bool restart)
{
	uint64_t timeout_ns = (uint64_t)timeout_ms * 1000000ULL;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int outq = -1;
	bool heard, held_back;

	if (ioctl(fd, SIOCOUTQ, &outq))
		outq = -1;
	if (restart || tx != st->tx || outq != st->outq) {
		st->tx = tx;
		st->outq = outq;
		st->since = now;
		return false;
	}
	if (now - st->since < timeout_ns)
		return false;
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return false;
	heard = ti.tcpi_last_ack_recv < (uint32_t)timeout_ms ||
		ti.tcpi_last_data_recv < (uint32_t)timeout_ms;
	held_back = st->parked && now - st->parked < timeout_ns;
	return !heard || (ti.tcpi_unacked && !held_back);
}

bool tcp_xdc_peer_fin(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
	       ti.tcpi_state != TCP_CLOSE;
}
