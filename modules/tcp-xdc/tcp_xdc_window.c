/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's window.  A resuming send stream keeps each chunk until the
 * peer's kernel acknowledged it (tcp_xdc_resume.c); were its send done
 * only then, every isend would take a round trip and NCCL's steps in
 * flight per channel would be the window: 8 MiB a round trip.  So each
 * stream copies its chunks into a ring of its own and their sends complete
 * once written; the ring is sized to the stream's share of the path's
 * bandwidth-delay product, plus a chunk being written, and no larger than
 * what its socket can hold unacknowledged.  Below KEEP_MIN_BDP NCCL's own
 * steps already cover the round trip and there is no copy (window auto).
 *
 * The product comes from the device's speed and the round trip, the
 * kernel's (util_tcp_rtt_us) of the data streams just set up, whose
 * handshakes it measured; the stream count, fixed in the hello before any
 * stream exists, from the control connection's (mesh_ctrl.rtt_us).  What
 * the rings take comes from the process's budget (memory_max), and a
 * connection's rings hold at most window_max.
 *
 * A receive stream on such a path has a ring as well, for the chunks that
 * come before NCCL posts their receives (struct tcp_xdc_stored); receive
 * rings take at most half of memory_max, so that send rings always find
 * room.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "sysctl.h"
#include "tcp_rtt.h"
#include "tcp_xdc_window.h"

/*
 * Window auto: below this product, NCCL's 8 steps per channel of 1 MiB
 * (NCCL_BUFFSIZE 8 MiB) in flight cover the round trip 4 times over, and
 * a send done on acknowledgement costs nothing measurable (10 Gbit/s at
 * 1.7 ms, 2 Gbit/s at 8 ms), while the copy would.
 */
#define KEEP_MIN_BDP (2ULL << 20)
/* A stream whose ring the budget could not give asks again this late. */
#define KEEP_RETRY_NS 1000000000ULL
/* NCCL's Socket transport assumes this when sysfs has no speed. */
#define TCP_XDC_DEFAULT_SPEED_MBPS 10000

void tcp_xdc_window_init(struct tcp_xdc_ctx *ctx)
{
	/* Linux's defaults where /proc does not say */
	ctx->wmem_max = util_sysctl_last("/proc/sys/net/ipv4/tcp_wmem", 4 << 20);
	ctx->rmem_max = util_sysctl_last("/proc/sys/net/ipv4/tcp_rmem", 6 << 20);
	ctx->idle_restart = util_sysctl_last(
		"/proc/sys/net/ipv4/tcp_slow_start_after_idle", 1) != 0;
}

/* The speed of device dev, as NCCL is told it and the product takes it. */
int tcp_xdc_speed(const struct tcp_xdc_ctx *ctx, int dev)
{
	const struct util_netif *nif = &ctx->devs[dev];

	if (ctx->speed_mbps > 0)
		return ctx->speed_mbps;
	return nif->speed_mbps > 0 ? nif->speed_mbps :
				     TCP_XDC_DEFAULT_SPEED_MBPS;
}

uint64_t tcp_xdc_bdp(int rate_mbps, uint32_t rtt_us)
{
	/* Mbit/s times microseconds is bits */
	return rate_mbps > 0 ? (uint64_t)rate_mbps * rtt_us / 8 : 0;
}

/* What one stream's sockets keep unacknowledged at most: the send buffer
 * (the kernel doubles a set SO_SNDBUF, autotuning stops at tcp_wmem). */
static uint64_t stream_send_max(const struct tcp_xdc_ctx *ctx)
{
	return ctx->sndbuf ? 2ULL * (uint64_t)ctx->sndbuf : ctx->wmem_max;
}

/* What one stream carries a round trip: its send buffer, and the window
 * the receiver opens, about half its buffer (the rest is overhead). */
static uint64_t stream_carry(const struct tcp_xdc_ctx *ctx)
{
	uint64_t rcv = (ctx->rcvbuf ? 2ULL * (uint64_t)ctx->rcvbuf :
				      ctx->rmem_max) / 2;
	uint64_t snd = stream_send_max(ctx);

	return rcv < snd ? rcv : snd;
}

int tcp_xdc_window_streams(const struct tcp_xdc_ctx *ctx, uint32_t rtt_us,
			   int rate_mbps)
{
	uint64_t carry = stream_carry(ctx), need;

	if (!ctx->streams_auto || !rtt_us || !carry)
		return ctx->streams;
	need = (tcp_xdc_bdp(rate_mbps, rtt_us) + carry - 1) / carry;
	if (need <= (uint64_t)ctx->streams)
		return ctx->streams;
	return need > TCP_XDC_MAX_STREAMS ? TCP_XDC_MAX_STREAMS : (int)need;
}

/* The least round trip of the comm's streams (util_tcp_rtt_us), 0
 * unknown. */
static uint32_t streams_rtt_us(const struct tcp_xdc_comm *comm)
{
	uint32_t rtt = 0, us;

	for (int i = 0; i < comm->nstreams; i++)
		if (!util_tcp_rtt_us(comm->streams[i].fd, &us) &&
		    (!rtt || us < rtt))
			rtt = us;
	return rtt;
}

void xdc_window_socket(const struct tcp_xdc_comm *comm, int fd)
{
	if (comm->notsent_lowat &&
	    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT,
		       &comm->notsent_lowat, sizeof(comm->notsent_lowat)))
		MESH_INFO("peer %s: cannot set TCP_NOTSENT_LOWAT to %d: %s",
			  comm->peer, comm->notsent_lowat, strerror(errno));
}

/*
 * A long path: a socket takes no more than a little unsent data beyond
 * what its congestion window has in flight.  Otherwise the send buffer,
 * which autotuning grows to twice the window, takes chunks a stream will
 * send only a round trip later, while a stream whose window is small
 * after a loss finds none left to claim and stays small: on a 100 ms
 * path with 8 streams, two took 8 of every 10 bytes and the rest idled
 * for seconds, at 0.4 of iperf3.  Each stream then claims chunks as fast
 * as its own window sends them, and what is kept is what is in flight.
 */
static void window_long(struct tcp_xdc_comm *comm)
{
	size_t lowat = 2 * comm->chunk_size;

	comm->notsent_lowat = lowat > INT32_MAX ? INT32_MAX : (int)lowat;
	for (int i = 0; i < comm->nstreams; i++)
		xdc_window_socket(comm, comm->streams[i].fd);
	/* no socket option keeps a window through a pause: only the host's
	 * (or its namespace's) setting does */
	if (comm->ctx->idle_restart &&
	    !atomic_exchange(&comm->ctx->idle_said, true))
		MESH_INFO("send comm %u to %s: a round trip of %u us; net.ipv4.tcp_slow_start_after_idle is 1 here, so every stream idle for longer than its retransmission timeout (a pause between collectives) starts its window over: set it to 0 on both sides for long paths",
			  comm->id, comm->peer, comm->rtt_us);
}

/*
 * Both sides size their rings alike: a share of the product (or of the
 * configured window) per stream, plus a chunk being moved.  A sender's
 * ring holds what is in flight; a receiver's takes what comes before
 * NCCL posts its receives, which on a long path is up to what the sender
 * has in flight.  That is shared among the streams as unevenly as their
 * windows are (each claims as fast as its own window sends), so a
 * receive stream's share is twice the even one: a full ring parks its
 * stream, which closes its window.
 */
void xdc_window_start(struct tcp_xdc_comm *comm, int rate_mbps)
{
	const struct tcp_xdc_ctx *ctx = comm->ctx;
	uint64_t n = (uint64_t)comm->nstreams, window, send_max, total;

	comm->rate_mbps = rate_mbps;
	comm->rtt_us = streams_rtt_us(comm);
	comm->bdp = tcp_xdc_bdp(rate_mbps, comm->rtt_us);
	comm->keep_ring = 0;
	window = ctx->window;
	if (!window && comm->bdp >= KEEP_MIN_BDP)
		window = comm->bdp;
	if (!window)
		return;
	if (comm->is_send) {
		window_long(comm);
		if (!comm->rejoin)
			return;
		/* more than a socket holds unacknowledged is never kept */
		send_max = stream_send_max(ctx);
		if (window > send_max * n)
			window = send_max * n;
	} else {
		window *= 2;
	}
	total = window + n * comm->chunk_size;
	if (total > ctx->window_max)
		total = ctx->window_max;
	comm->keep_ring = (size_t)(total / n);
}

/* Once a comm: a stream of it got no ring (ret: why), and what is held. */
static void keep_short_say(const struct tcp_xdc_comm *comm,
			   const struct tcp_xdc_stream *s, int ret)
{
	const struct tcp_xdc_budget *b = comm->is_send ?
		&comm->ctx->keep_budget : &comm->ctx->store_budget;

	MESH_INFO("%s comm %u %s %s: %s for stream %d's %zu KiB of %s (%s %llu MiB, %llu MiB held): %s until there is",
		  xdc_comm_kind(comm), comm->id, comm->is_send ? "to" : "from",
		  comm->peer, ret == -ENOSPC ? "no room left" : "out of memory",
		  s->index, comm->keep_ring >> 10,
		  comm->is_send ? "copies" : "early chunks",
		  comm->is_send ? "memory_max" : "receive rings' half of memory_max",
		  (unsigned long long)(b->max >> 20),
		  (unsigned long long)(atomic_load(&b->held) >> 20),
		  comm->is_send ? "its sends complete once acknowledged" :
			"chunks that come before their receive wait in the socket");
}

/* A ring's bytes from the process's budget, a receive ring's also from
 * the part of it receive rings may take. */
static uint64_t budget_take(struct tcp_xdc_comm *comm, uint64_t want,
			    uint64_t least)
{
	struct tcp_xdc_ctx *ctx = comm->ctx;
	uint64_t took;

	if (comm->is_send)
		return tcp_xdc_budget_take(&ctx->keep_budget, want, least);
	took = tcp_xdc_budget_take(&ctx->store_budget, want, least);
	if (took && !tcp_xdc_budget_take(&ctx->keep_budget, took, took)) {
		tcp_xdc_budget_give(&ctx->store_budget, took);
		took = 0;
	}
	return took;
}

static void budget_give(struct tcp_xdc_comm *comm, uint64_t n)
{
	tcp_xdc_budget_give(&comm->ctx->keep_budget, n);
	if (!comm->is_send)
		tcp_xdc_budget_give(&comm->ctx->store_budget, n);
}

int xdc_keep_make(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	uint64_t now = xdc_now_ns(), least, took;
	int ret;

	if (now < s->keep_retry_ns)
		return -EAGAIN;
	/* a part of the ring is worth having if a chunk fits */
	least = comm->chunk_size < comm->keep_ring ? comm->chunk_size :
						      comm->keep_ring;
	took = budget_take(comm, comm->keep_ring, least);
	ret = took ? tcp_xdc_keep_init(&s->keep, (size_t)took) : -ENOSPC;
	if (ret) {
		if (took)
			budget_give(comm, took);
		s->keep_retry_ns = now + KEEP_RETRY_NS;
		if (!atomic_exchange(&comm->keep_short, true))
			keep_short_say(comm, s, ret);
		return ret;
	}
	atomic_fetch_add(&comm->keep_held, took);
	return 0;
}

void xdc_keep_drop(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s)
{
	if (!s->keep.buf)
		return;
	atomic_fetch_sub(&comm->keep_held, s->keep.cap);
	budget_give(comm, s->keep.cap);
	tcp_xdc_keep_fini(&s->keep);
}
