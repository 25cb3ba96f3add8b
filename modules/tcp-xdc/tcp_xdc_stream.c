/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: one data stream's socket, whoever moves it: its options (also
 * of one dialed anew), its records' keys, and a write of its bytes in
 * clear or as records.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tcp_xdc_crypt.h"
#include "tcp_xdc_stream.h"

static void set_opt(int fd, int level, int name, int value, const char *what,
		    const char *peer)
{
	if (setsockopt(fd, level, name, &value, sizeof(value)))
		MESH_INFO("peer %s: cannot set %s to %d: %s", peer, what, value,
			  strerror(errno));
}

/*
 * The class marks what this socket sends: the data on the sending side,
 * acknowledgements and pings on the receiving one.  An IPv6 socket may
 * carry IPv4 (a mapped address), where IP_TOS is the one that counts: it
 * gets both, and a refusal of IP_TOS on it says nothing (a socket bound
 * to IPv6 only has no IPv4 header to mark).
 */
static void set_traffic_class(int fd, int traffic_class, const char *peer)
{
	int domain = AF_UNSPEC;
	socklen_t len = sizeof(domain);
	int level = IPPROTO_IP, name = IP_TOS;
	const char *what = "IP_TOS";

	if (traffic_class < 0)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
	    domain == AF_INET6) {
		(void)setsockopt(fd, IPPROTO_IP, IP_TOS, &traffic_class,
				 sizeof(traffic_class));
		level = IPPROTO_IPV6;
		name = IPV6_TCLASS;
		what = "IPV6_TCLASS";
	}
	if (setsockopt(fd, level, name, &traffic_class, sizeof(traffic_class)))
		MESH_WARN("peer %s: cannot set %s to %d (DSCP %d): %s; its "
			  "packets go unmarked", peer, what, traffic_class,
			  traffic_class >> 2, strerror(errno));
}

/*
 * Resuming, a sender probes a stream after a second without a word from
 * its peer.  A receiver whose stream was reset gives the sender timeout_ms
 * to dial it anew, one whose socket gave up waits out outage_ms, and a
 * sender with nothing to write on that stream learns of either only from
 * its probe: the peer's reset at once, or silence after a few probes (at
 * most a fifth of outage_ms, as the receiver's own timeout comes first).
 * The peer's kernel answers probes, so a live but busy peer never fails
 * them, and a probe lost to a lossy path only costs a resume.
 */
#define RESUME_KEEPALIVE_S 1
#define RESUME_KEEPALIVE_MIN_COUNT 3

static int keepalive_count(const struct tcp_xdc_ctx *ctx, bool resuming)
{
	/* probes a second apart after the idle second */
	int cap = ctx->outage_ms / 5000 - RESUME_KEEPALIVE_S;

	if (!resuming || cap >= ctx->keepalive_count)
		return ctx->keepalive_count;
	return cap < RESUME_KEEPALIVE_MIN_COUNT ? RESUME_KEEPALIVE_MIN_COUNT :
						   cap;
}

/* Options are tuning: a refusal is worth a note, not a failed connection. */
void tcp_xdc_stream_setup(const struct tcp_xdc_ctx *ctx, int fd, int index,
			  const char *peer, bool is_send, int traffic_class)
{
	bool resuming = is_send && ctx->outage_ms;

	set_traffic_class(fd, traffic_class, peer);
	if (ctx->sndbuf)
		set_opt(fd, SOL_SOCKET, SO_SNDBUF, ctx->sndbuf, "SO_SNDBUF",
			peer);
	if (ctx->rcvbuf)
		set_opt(fd, SOL_SOCKET, SO_RCVBUF, ctx->rcvbuf, "SO_RCVBUF",
			peer);
	set_opt(fd, IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY", peer);
	/* Keeps NAT and firewall state of a quiet stream alive. */
	set_opt(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE", peer);
	set_opt(fd, IPPROTO_TCP, TCP_KEEPIDLE, resuming &&
		ctx->keepalive_idle_s > RESUME_KEEPALIVE_S ?
		RESUME_KEEPALIVE_S : ctx->keepalive_idle_s,
		"TCP_KEEPIDLE", peer);
	set_opt(fd, IPPROTO_TCP, TCP_KEEPINTVL, resuming ?
		1 : ctx->keepalive_interval_s, "TCP_KEEPINTVL", peer);
	set_opt(fd, IPPROTO_TCP, TCP_KEEPCNT, keepalive_count(ctx, resuming),
		"TCP_KEEPCNT", peer);
	/*
	 * A receiver's unacknowledged ping older than this fails the socket
	 * with ETIMEDOUT instead of retrying for minutes.  Not on the sending
	 * side: Linux also ends a zero window that lasts this long, so a late
	 * receiver would kill the connection (send_check_stalls instead).
	 */
	if (ctx->timeout_ms && !is_send)
		set_opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, ctx->timeout_ms,
			"TCP_USER_TIMEOUT", peer);
	/*
	 * Stream 0 carries the small messages.  Left to itself, a receiving
	 * socket that never sends data acknowledges each one at once, and on
	 * a busy host that acknowledgement costs the reply its time; with
	 * delayed acknowledgements the kernel sends one for every other
	 * small segment.  Bulk streams get quick ones (NCCL's large messages
	 * moved a few percent less with delayed ones on every stream), also
	 * where the stream's authentication, the receiver writing at setup,
	 * has put the kernel into its interactive mode.  Resuming, stream 0
	 * gets quick ones too: a send completes only once acknowledged.
	 */
	if (!is_send)
		set_opt(fd, IPPROTO_TCP, TCP_QUICKACK,
			index || ctx->outage_ms ? 1 : 0, "TCP_QUICKACK", peer);
}

/* Keys every stream of an encrypted comm: one key per stream. */
int xdc_crypt_new(const struct tcp_xdc_comm *comm, int index,
		  const uint8_t *secret, size_t secret_len,
		  uint32_t record_size, struct tcp_xdc_crypt **out)
{
	struct tcp_xdc_crypt *c = calloc(1, sizeof(*c));
	int ret = c ? tcp_xdc_crypt_init(c, secret, secret_len, comm->is_send,
					 index, record_size,
					 comm->ctx->aead_lib) : -ENOMEM;

	if (ret) {
		free(c);
		return ret;
	}
	*out = c;
	return 0;
}

void xdc_crypt_free(struct tcp_xdc_crypt **c)
{
	if (*c)
		tcp_xdc_crypt_fini(*c);
	free(*c);
	*c = NULL;
}

/*
 * Writes msg's bytes, in clear or as records; how many of them are out
 * (an encrypted stream counts only records written whole, so a chunk is
 * done only once all of it is on the socket), or -1 with errno.
 */
ssize_t xdc_stream_send(struct tcp_xdc_stream *s, struct msghdr *msg)
{
	ssize_t n;

	if (s->crypt) {
		n = tcp_xdc_crypt_send(s->crypt, s->fd, msg->msg_iov,
				       (int)msg->msg_iovlen, &s->tx_bytes);
		if (n < 0) {
			errno = (int)-n;
			return -1;
		}
		mesh_count(&s->m_crypt_bytes, (uint64_t)n);
		return n;
	}
	n = sendmsg(s->fd, msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n > 0)
		s->tx_bytes += (uint64_t)n;
	return n;
}
