/* SPDX-License-Identifier: MIT */
/*
 * One host's side of one pair: the plugin driven through netdrive's ABI
 * adapters and benchmark, as NCCL's proxy drives it.  Each command of
 * rank 0 is one bounded step.  The plugin says which path a connection
 * took (MESH_CONN_INFO_SYMBOL); its own log lines, captured while a
 * connect runs, say why one failed.
 */
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster.h"

/* What NCCL would pass as the communicator's hash: the same on every rank. */
#define CL_COMM_ID 0x6d657368696e666fULL
/* Bytes of buffers per direction: bounds the window of a burst. */
#define CL_BURST_MEM (32ULL << 20)
/* A transfer that moves nothing for this long has failed. */
#define CL_STALL_S 5

int cl_node_start(struct cl_node *n, const char *plugin, struct cl_host *me)
{
	struct perf_props props;
	Dl_info info;
	int rc;

	n->sdir.dir_id = n->rdir.dir_id = -1;
	rc = perf_net_open(&n->net, plugin, 0);
	if (rc) {
		snprintf(me->error, sizeof(me->error),
			 "cannot load the plugin %s", plugin);
		return rc;
	}
	snprintf(me->net_name, sizeof(me->net_name), "%s",
		 perf_net_name(&n->net));
	if (dladdr(n->net.api.any, &info) && info.dli_fname)
		snprintf(me->plugin_path, sizeof(me->plugin_path), "%s",
			 info.dli_fname);
	/* POSIX's way to take a function from dlsym */
	*(void **)&n->conn_info = dlsym(n->net.lib, MESH_CONN_INFO_SYMBOL);
	if (perf_net_init(&n->net, CL_COMM_ID) != ncclSuccess) {
		snprintf(me->error, sizeof(me->error),
			 "the plugin's init failed (its WARN lines say why)");
		perf_net_close(&n->net);
		return -EIO;
	}
	n->net_up = true;
	if (perf_net_devices(&n->net, &n->ndev) != ncclSuccess || n->ndev < 0)
		n->ndev = 0;
	if (n->ndev > CL_MAX_RAILS)
		n->ndev = CL_MAX_RAILS;
	me->nrails = n->ndev;
	for (int d = 0; d < n->ndev; d++) {
		struct cl_rail *r = &me->rails[d];

		memset(&props, 0, sizeof(props));
		if (perf_net_get_props(&n->net, d, &props) != ncclSuccess)
			continue;
		snprintf(r->name, sizeof(r->name), "%s",
			 props.name ? props.name : "?");
		r->speed_mbps = props.speed;
	}
	if (!n->ndev)
		snprintf(me->error, sizeof(me->error),
			 "the plugin has no devices");
	return 0;
}

void cl_node_stop(struct cl_node *n)
{
	for (int i = 0; i < 2; i++) {
		free(n->bufs[i]);
		n->bufs[i] = NULL;
	}
	if (!n->net_up)
		return;
	perf_net_finalize(&n->net);
	perf_net_close(&n->net);
	n->net_up = false;
}

/* ---- the parameters of netdrive's benchmark for one burst ---- */

static void burst_params(const struct cl_opts *o, uint64_t size,
			 uint64_t iters, struct perf_params *p)
{
	memset(p, 0, sizeof(*p));
	p->window = NCCL_NET_MAX_REQUESTS;
	p->iters = (uint32_t)(iters ? iters : 1);
	p->budget = size * p->iters;
	p->mem = CL_BURST_MEM < o->msg_bytes ? o->msg_bytes : CL_BURST_MEM;
	p->lat_max = 8;
	p->reload = 1;
	p->timeout = CL_STALL_S;
	p->comm_id = CL_COMM_ID;
	p->channels = 1;
	p->nsizes = 1;
	p->sizes[0] = size ? size : 8;
}

/* The buffers of a direction, kept for every pair: touching them anew
 * for each would cost more than the pair's bursts. */
static uint8_t *pair_buffer(struct cl_node *n, int which, size_t len)
{
	void *buf;

	if (!n->bufs[which]) {
		if (posix_memalign(&buf, 4096, len))
			return NULL;
		memset(buf, 0, len);
		n->bufs[which] = buf;
	}
	return n->bufs[which];
}

static int setup_dir(struct cl_node *n, struct perf_dir *d, void *comm,
		     int sender, int receiver)
{
	struct perf_params p;

	/* room for a burst of any size up to the buffer memory, not only of
	 * our own --burst-bytes: rank 0 picks the size, from its own */
	burst_params(n->o, 1, 2, &p);
	p.sizes[0] = p.mem;
	memset(d, 0, sizeof(*d));
	d->comm = comm;
	d->group = 1;
	d->sender_rank = sender;
	/* the sender's send and the receiver's receive share the pattern */
	d->dir_id = sender < receiver ? 0 : 1;
	snprintf(d->name, sizeof(d->name), "%d->%d", sender, receiver);
	d->buf_len = perf_region_len(&p, 1, true, true);
	d->buf = pair_buffer(n, sender == n->rank ? 0 : 1, d->buf_len);
	if (!d->buf)
		return -ENOMEM;
	return NET_CALL("regMr", perf_net_reg_mr(&n->net, comm, d->buf,
						 d->buf_len, &d->mhandle));
}

static void release_dir(struct cl_node *n, struct perf_dir *d, bool send)
{
	if (d->comm && d->buf)
		NET_CALL("deregMr", perf_net_dereg_mr(&n->net, d->comm,
						      d->mhandle));
	if (d->comm)
		NET_CALL(send ? "closeSend" : "closeRecv",
			 send ? perf_net_close_send(&n->net, d->comm) :
				perf_net_close_recv(&n->net, d->comm));
	memset(d, 0, sizeof(*d));
}

static void pair_close(struct cl_node *n)
{
	release_dir(n, &n->sdir, true);
	release_dir(n, &n->rdir, false);
	n->send = n->recv = NULL;
	if (n->listen)
		NET_CALL("closeListen",
			 perf_net_close_listen(&n->net, n->listen));
	n->listen = NULL;
}

/* ---- connect: ours to the peer, the peer's to us, at once ---- */

struct conn_wait {
	int note_fd;
	bool sent_note, got_note;
	uint32_t peer_note;
};

static bool readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return fd >= 0 && poll(&p, 1, 0) > 0;
}

static void note_send(struct conn_wait *w, bool ok)
{
	uint32_t v = htobe32(ok ? CL_NOTE_OK : CL_NOTE_FAILED);

	if (w->sent_note)
		return;
	w->sent_note = true;
	if (w->note_fd >= 0)
		oob_send_msg(w->note_fd, PERF_MSG_BARRIER, &v, sizeof(v), 5);
}

static void note_poll(struct conn_wait *w)
{
	uint32_t v;

	if (w->got_note || !readable(w->note_fd))
		return;
	w->got_note = true;
	w->peer_note = CL_NOTE_FAILED;
	if (!oob_recv_msg(w->note_fd, PERF_MSG_BARRIER, &v, sizeof(v), 5))
		w->peer_note = be32toh(v);
}

/* Lines of our connect side: the core's one line first, else the first
 * WARN that is not about an accept. */
static void connect_reason(const char *lines, char *out, size_t cap)
{
	const char *best = NULL, *first = NULL;

	out[0] = '\0';
	for (const char *l = lines; *l; l = strchr(l, '\n') + 1) {
		const char *text = l + 2;

		if (l[0] != 'W')
			continue;
		if (!strncmp(text, "connect ", 8) ||
		    strstr(text, "no relay carries"))
			best = best ? best : text;
		else if (strncmp(text, "accept ", 7) &&
			 strncmp(text, "recv ", 5) && !strstr(text, "refused connection from") &&
			 !strstr(text, "refusing connection"))
			first = first ? first : text;
	}
	if (!best)
		best = first;
	if (best)
		snprintf(out, cap, "%.*s", (int)strcspn(best, "\n"), best);
}

static void accept_reason(const char *lines, char *out, size_t cap)
{
	out[0] = '\0';
	for (const char *l = lines; *l; l = strchr(l, '\n') + 1) {
		const char *text = l + 2;

		if (l[0] == 'W' && (!strncmp(text, "accept ", 7) ||
				    !strncmp(text, "recv ", 5) ||
				    strstr(text, "refus"))) {
			snprintf(out, cap, "%.*s", (int)strcspn(text, "\n"),
				 text);
			return;
		}
	}
}

/* What the plugin says our send comm runs over (conn_info.h). */
static void describe_send(const struct cl_node *n, struct cl_pair *p)
{
	struct mesh_conn_info info;
	int relays;

	if (!n->conn_info || !n->send || n->conn_info(n->send, &info))
		return;
	snprintf(p->cls, sizeof(p->cls), "%s", info.path_class);
	/* a relayed pair is named for the module of its first leg */
	snprintf(p->module, sizeof(p->module), "%s",
		 info.nhops ? info.hops[0].module : info.module);
	snprintf(p->local, sizeof(p->local), "%s", info.local);
	snprintf(p->remote, sizeof(p->remote), "%s", info.remote);
	snprintf(p->cipher, sizeof(p->cipher), "%s", info.cipher);
	p->ndevices = info.ndevices < CL_MAX_DEVICES ? info.ndevices :
						       CL_MAX_DEVICES;
	for (int i = 0; i < p->ndevices; i++)
		snprintf(p->devices[i], sizeof(p->devices[i]), "%s",
			 info.devices[i]);
	/* the last hop is the destination */
	relays = info.nhops - 1;
	p->nrelays = relays < 0 ? 0 : relays < CL_MAX_RELAYS ? relays :
							     CL_MAX_RELAYS;
	for (int i = 0; i < p->nrelays; i++) {
		snprintf(p->relays[i], sizeof(p->relays[i]), "%s",
			 info.hops[i].name);
		snprintf(p->relay_addrs[i], sizeof(p->relay_addrs[i]), "%s",
			 info.hops[i].addr);
	}
}

static void exec_connect(struct cl_node *n, const struct cl_cmd *c,
			 struct cl_step *s, int note_fd)
{
	struct conn_wait w = { .note_fd = note_fd };
	/* the plugin gives up on its own first: its timeout, relays' too */
	double deadline = perf_now() + 2.0 * n->connect_timeout_ms / 1000 + 3;
	struct timespec nap = { 0, 200 * 1000 };
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	bool sent = false, rcvd = false;
	int send_rc = 0, recv_rc = 0;

	memcpy(handle, c->handle, sizeof(handle));
	cl_log_capture(true);
	while (perf_now() < deadline) {
		if (!sent) {
			ncclResult_t r = perf_net_connect(&n->net, c->rail,
							  handle, &n->send);

			sent = r != ncclSuccess || n->send;
			send_rc = r == ncclSuccess ? 0 : -EIO;
			if (sent)
				note_send(&w, n->send != NULL);
		}
		if (!rcvd && n->listen) {
			ncclResult_t r = perf_net_accept(&n->net, n->listen,
							 &n->recv);

			rcvd = r != ncclSuccess || n->recv;
			recv_rc = r == ncclSuccess ? 0 : -EIO;
		}
		note_poll(&w);
		/* the peer's connect failed: nothing will come to accept */
		if (sent && w.got_note && (rcvd || w.peer_note != CL_NOTE_OK))
			break;
		nanosleep(&nap, NULL);
	}
	note_send(&w, false);
	/* the peer may still say its word: take it, so the next command is
	 * what comes next on the socket */
	if (!w.got_note && note_fd >= 0 && w.sent_note) {
		uint32_t v;

		w.got_note = !oob_recv_msg(note_fd, PERF_MSG_BARRIER, &v,
					   sizeof(v), 5);
	}
	cl_log_capture(false);
	s->send_ok = n->send != NULL;
	s->recv_ok = n->recv != NULL;
	s->path.rail = c->rail;
	describe_send(n, &s->path);
	if (!s->send_ok) {
		connect_reason(cl_log_lines(), s->path.reason,
			       sizeof(s->path.reason));
		if (!s->path.reason[0])
			snprintf(s->path.reason, sizeof(s->path.reason),
				 send_rc ? "connect failed, the plugin logged no reason" :
				 "connect did not finish within %.0f s",
				 2.0 * n->connect_timeout_ms / 1000 + 3);
	}
	if (!s->recv_ok)
		accept_reason(cl_log_lines(), s->recv_reason,
			      sizeof(s->recv_reason));
	if (!s->recv_ok && !s->recv_reason[0] && recv_rc)
		snprintf(s->recv_reason, sizeof(s->recv_reason),
			 "accept failed, the plugin logged no reason");
	if (n->send && setup_dir(n, &n->sdir, n->send, n->rank, c->peer))
		s->rc = -ENOMEM;
	if (n->recv && setup_dir(n, &n->rdir, n->recv, c->peer, n->rank))
		s->rc = -ENOMEM;
}

/*
 * Bursts and ping-pongs are timed from both ends; the receiver (the
 * responder) says when it is ready and the sender waits for that word, so
 * the transfer cannot start before the receiver's clock does.
 */
static int ready(struct cl_node *n, bool sender, int note_fd)
{
	uint32_t v = htobe32(CL_NOTE_OK);

	if (note_fd < 0)
		return 0;
	if (!sender)
		return oob_send_msg(note_fd, PERF_MSG_BARRIER, &v, sizeof(v),
				    5);
	return oob_recv_msg(note_fd, PERF_MSG_BARRIER, &v, sizeof(v),
			    2 * n->connect_timeout_ms / 1000 + 10);
}

/*
 * Whether a burst from rank 0 fits the buffers its direction registered:
 * rank 0 may run with another --burst-bytes, and a size past them would
 * have the plugin and the pattern write past their end.
 */
static bool burst_fits(const struct cl_node *n, const struct cl_cmd *c,
		       const struct perf_params *p, bool me)
{
	size_t have = me ? n->sdir.buf_len : n->rdir.buf_len;

	return c->size && c->iters <= UINT32_MAX &&
	       perf_region_len(p, 1, true, false) <= have;
}

void cl_exec(struct cl_node *n, const struct cl_cmd *c, struct cl_step *s,
	     int note_fd, int oob_fd)
{
	struct perf_params p;
	struct perf_side side = { &n->net, &p, oob_fd };
	bool me = c->sender == n->rank;

	memset(s, 0, sizeof(*s));
	n->rail = c->rail;
	n->peer = c->peer;
	switch (c->kind) {
	case CL_CMD_LISTEN:
		pair_close(n);
		if (c->rail < 0 || c->rail >= n->ndev) {
			s->rc = -ENODEV;
			break;
		}
		s->rc = NET_CALL("listen", perf_net_listen(&n->net, c->rail,
							   s->handle,
							   &n->listen));
		break;
	case CL_CMD_CONNECT:
		if (c->rail < 0 || c->rail >= n->ndev) {
			s->rc = -ENODEV;
			break;
		}
		exec_connect(n, c, s, note_fd);
		break;
	case CL_CMD_BURST:
	case CL_CMD_PINGPONG:
		burst_params(n->o, c->kind == CL_CMD_BURST ? c->size : 8,
			     c->iters, &p);
		/* the receiver's word goes out whatever happens next */
		s->rc = me ? 0 : ready(n, false, note_fd);
		if (!s->rc && !(c->kind == CL_CMD_BURST ?
				(me ? n->sdir.comm : n->rdir.comm) != NULL :
				n->sdir.comm && n->rdir.comm))
			s->rc = -ENOTCONN;
		if (!s->rc && me)
			s->rc = ready(n, true, note_fd);
		/* after the words, so the note socket stays in step */
		if (!s->rc && (c->kind == CL_CMD_BURST ?
			       !burst_fits(n, c, &p, me) :
			       c->iters > UINT32_MAX))
			s->rc = -EMSGSIZE;
		if (s->rc)
			break;
		if (c->kind == CL_CMD_BURST) {
			struct perf_bw_times t = { 0 };

			s->rc = perf_run_bw(&side, me ? &n->sdir : NULL,
					    me ? NULL : &n->rdir, 1, c->size,
					    &t);
			s->elapsed = t.elapsed;
		} else {
			struct perf_lat_times t = { 0 };

			s->rc = perf_run_latency(&side, &n->sdir, &n->rdir, me,
						 8, (uint32_t)c->iters, &t);
			s->elapsed = t.elapsed;
			s->overhead = t.overhead;
			s->min_round = t.min_round;
		}
		break;
	case CL_CMD_CLOSE:
	case CL_CMD_DONE:
		pair_close(n);
		break;
	default:
		s->rc = -EPROTO;
	}
}

/* ---- failure classes ---- */

const char *cl_classify(const char *r)
{
	if (strstr(r, "no relay carries") || strstr(r, "refused to relay"))
		return "no relay";
	if (strstr(r, "auth"))
		return "auth refused";
	if (strstr(r, "no route to") || strstr(r, "no module reaches") ||
	    strstr(r, "no module serves") || strstr(r, "needs the relay module"))
		return "no subnet in common";
	/* a dial notes each address tried: one that timed out is the
	 * firewall's drop, the others (a NAT's public address) refuse */
	if (strstr(r, "timed out"))
		return "timed out";
	if (strstr(r, "refused") || strstr(r, "Connection reset"))
		return "refused";
	if (strstr(r, "within") ||
	    strstr(r, "in time") || strstr(r, "no answer") ||
	    strstr(r, "did not finish"))
		return "timed out";
	return "other";
}
