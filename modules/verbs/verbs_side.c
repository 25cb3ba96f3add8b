/* SPDX-License-Identifier: MIT */
/*
 * The side channel: one TCP stream per connection, taken from the core's
 * control connection at setup (mesh_ctrl.stream), so it crosses the same
 * NAT rules and port ranges.  It carries fixed-size messages:
 *
 *   REC   a QP slot's record (verbs_path.c), for repairs when no QP works
 *         or the in-band copy is lost;
 *   FAIL  our end failed, with the reason: the peer fails at once instead
 *         of when its own writes do;
 *   BYE   our end closes in order (as the close notice says in-band).
 *
 * It also tells a dead peer from a lost path: when the peer's process
 * dies its kernel closes the stream, so an end without BYE or close
 * notice fails the comm at once, outage budget or not.  Everything here
 * is non-blocking and runs on the thread that drives the comm.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "verbs.h"

#define SIDE_MAGIC 0x564c5343u	/* "VLSC" */

/* One message; integers big-endian. */
struct side_msg {
	uint32_t magic;
	uint16_t type;		/* VL_SIDE_* */
	uint16_t qp;
	uint32_t epoch, phase, qpn, psn, got_epoch, cause, seen, pad;
	uint64_t got;
	char text[VL_SIDE_MSG - 48];	/* FAIL: the reason */
};

_Static_assert(sizeof(struct side_msg) == VL_SIDE_MSG, "side message size");

static const char *dir_str(const struct vl_comm *c)
{
	return c->is_send ? "send" : "recv";
}

static const char *to_str(const struct vl_comm *c)
{
	return c->is_send ? "to" : "from";
}

static void encode_rec(struct side_msg *m, int q, const struct vl_rec *r)
{
	memset(m, 0, sizeof(*m));
	m->magic = htonl(SIDE_MAGIC);
	m->type = htons(VL_SIDE_REC);
	m->qp = htons((uint16_t)q);
	m->epoch = htonl(r->epoch);
	m->phase = htonl(r->phase);
	m->qpn = htonl(r->qpn);
	m->psn = htonl(r->psn);
	m->got_epoch = htonl(r->got_epoch);
	m->cause = htonl(r->cause);
	m->seen = htonl(r->seen);
	m->got = htobe64(r->got);
}

static void encode_text(struct side_msg *m, int type, const char *text)
{
	memset(m, 0, sizeof(*m));
	m->magic = htonl(SIDE_MAGIC);
	m->type = htons((uint16_t)type);
	snprintf(m->text, sizeof(m->text), "%.*s", (int)sizeof(m->text) - 1,
		 text);
}

/* The stream ended or failed: without the peer's word of an orderly
 * close, its process is gone. */
static void side_gone(struct vl_comm *c, int err)
{
	close(c->side_fd);
	c->side_fd = -1;
	c->side_out_len = c->side_out_off = c->side_in_len = 0;
	if (c->peer_bye || c->closing || c->error || vl_peer_closed(c))
		return;
	c->peer_failed = true;	/* nobody left to tell */
	vl_comm_fail(c, -ECONNRESET, "%s comm %u %s %s: the peer's process is gone: its side channel %s%s without a close",
		     dir_str(c), c->id, to_str(c), c->peer,
		     err ? "failed: " : "closed", err ? strerror(err) : "");
}

/* What one send or recv did: true when it moved bytes; false when the
 * socket takes or holds no more now, or the stream ended (handled). */
static bool io_moved(struct vl_comm *c, ssize_t n)
{
	if (n > 0)
		return true;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		      errno == EINTR))
		return false;
	side_gone(c, n < 0 ? errno : 0);
	return false;
}

/* Fills the empty out buffer with the next message due; false if none. */
static bool next_out(struct vl_comm *c)
{
	struct side_msg m;

	if (c->side_fail) {
		c->side_fail = false;
		encode_text(&m, VL_SIDE_FAIL, c->errmsg);
	} else if (c->side_bye) {
		c->side_bye = false;
		encode_text(&m, VL_SIDE_BYE, "");
	} else {
		int q;

		for (q = 0; q < c->nqps; q++)
			if (c->path[q].dirty)
				break;
		if (q == c->nqps)
			return false;
		c->path[q].dirty = false;
		encode_rec(&m, q, &c->path[q].mine);
	}
	memcpy(c->side_out, &m, sizeof(m));
	c->side_out_len = sizeof(m);
	c->side_out_off = 0;
	return true;
}

/* Writes what is due until the socket takes no more. */
static void pump_out(struct vl_comm *c)
{
	for (int n = 0; n < VL_MAX_QPS + 2 && c->side_fd >= 0; n++) {
		ssize_t w;

		if (c->side_out_off == c->side_out_len && !next_out(c))
			return;
		w = send(c->side_fd, c->side_out + c->side_out_off,
			 c->side_out_len - c->side_out_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (!io_moved(c, w))
			return;
		c->side_out_off += (size_t)w;
		if (c->side_out_off < c->side_out_len)
			return;
	}
}

static void take(struct vl_comm *c, struct side_msg *m)
{
	int type = ntohs(m->type);

	if (ntohl(m->magic) != SIDE_MAGIC) {
		vl_comm_fail(c, -EPROTO, "%s comm %u %s %s: malformed message on the side channel",
			     dir_str(c), c->id, to_str(c), c->peer);
		return;
	}
	m->text[sizeof(m->text) - 1] = '\0';
	switch (type) {
	case VL_SIDE_REC: {
		struct vl_rec r = {
			.epoch = ntohl(m->epoch), .phase = ntohl(m->phase),
			.qpn = ntohl(m->qpn), .psn = ntohl(m->psn),
			.got_epoch = ntohl(m->got_epoch),
			.cause = ntohl(m->cause), .seen = ntohl(m->seen),
			.got = be64toh(m->got),
		};
		int q = ntohs(m->qp);

		if (q >= c->nqps) {
			vl_comm_fail(c, -EPROTO, "%s comm %u %s %s: side channel record of QP %d, the connection has %d",
				     dir_str(c), c->id, to_str(c), c->peer,
				     q, c->nqps);
			return;
		}
		if (c->outage_ms)
			vl_rec_take(c, q, &r);
		else if (r.phase == VL_REC_BROKEN)
			vl_comm_fail(c, -ECONNRESET, "%s comm %u %s %s: the peer's end of QP %d failed",
				     dir_str(c), c->id, to_str(c), c->peer, q);
		return;
	}
	case VL_SIDE_FAIL:
		c->peer_failed = true;
		vl_comm_fail(c, -ECONNRESET, "%s comm %u %s %s: the peer failed the connection: %s",
			     dir_str(c), c->id, to_str(c), c->peer, m->text);
		return;
	case VL_SIDE_BYE:
		c->peer_bye = true;
		if (!c->peer_closed) {
			c->peer_closed = true;
			c->peer_closed_ns = vl_now_ns();
		}
		return;
	default:
		vl_comm_fail(c, -EPROTO, "%s comm %u %s %s: side channel message of unknown type %d",
			     dir_str(c), c->id, to_str(c), c->peer, type);
	}
}

/* Reads what arrived, a bounded number of messages at a time. */
static void pump_in(struct vl_comm *c)
{
	for (int n = 0; n < 4 * VL_MAX_QPS && c->side_fd >= 0; n++) {
		ssize_t r = recv(c->side_fd, c->side_in + c->side_in_len,
				 VL_SIDE_MSG - c->side_in_len, MSG_DONTWAIT);

		if (!io_moved(c, r))
			return;
		c->side_in_len += (size_t)r;
		if (c->side_in_len < VL_SIDE_MSG)
			continue;
		c->side_in_len = 0;
		take(c, (struct side_msg *)(void *)c->side_in);
		if (c->error && !c->closing)
			return;
	}
}

void vl_side_pump(struct vl_comm *c)
{
	if (c->side_fd < 0)
		return;
	pump_in(c);
	pump_out(c);
}

/* From vl_comm_fail: the reason goes out now if the socket takes it (a
 * failed comm is polled no more). */
void vl_side_fail(struct vl_comm *c)
{
	if (c->side_fd < 0)
		return;
	c->side_fail = true;
	pump_out(c);
}

void vl_side_bye(struct vl_comm *c)
{
	if (c->side_fd < 0)
		return;
	c->side_bye = true;
	pump_out(c);
}

/*
 * Closes the stream, first trying for a short while to get out what is
 * still due (the BYE or FAIL), and reading what the peer sent: closing a
 * socket with unread data resets the connection, and a reset could reach
 * the peer before our last message.
 */
void vl_side_close(struct vl_comm *c)
{
	const struct timespec nap = { 0, 1000000 };
	char sink[VL_SIDE_MSG];

	if (c->side_fd < 0)
		return;
	for (int i = 0; i < 100 && c->side_fd >= 0 &&
	     (c->side_out_off < c->side_out_len || c->side_fail ||
	      c->side_bye); i++) {
		pump_out(c);
		if (c->side_out_off < c->side_out_len)
			nanosleep(&nap, NULL);
	}
	if (c->side_fd < 0)
		return;
	shutdown(c->side_fd, SHUT_WR);
	while (recv(c->side_fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
	close(c->side_fd);
	c->side_fd = -1;
}
