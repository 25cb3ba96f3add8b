/* SPDX-License-Identifier: MIT */
/*
 * One cycle, in NCCL's order: init, devices, getProperties, listen, the
 * handle out of band, connect/accept polled until both ends exist, regMr,
 * the size sweep, deregMr, close*, finalize, dlclose.
 *
 * The forward connection (client sends, server receives) carries the
 * bandwidth test.  A reverse one (server sends) carries the ping-pong
 * replies and, with --bidir, bandwidth the other way at the same time.
 *
 * With --channels N there are N of each, as NCCL opens one per channel:
 * N listens and handles, every connect and accept polled together, and the
 * bandwidth streams of all channels driven at once.  Latency uses channel 0.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meshperf.h"

#define PERF_POLL_NS (200 * 1000)
#define PERF_PAGE 4096
/* "closeListen on channel 2147483647" and the like */
#define CALL_NAME_MAX 48


struct cycle {
	const struct perf_opts *o;
	const struct perf_params *p;
	struct perf_net net;
	struct perf_props props;
	int oob;
	uint32_t index;
	bool client;
	bool need_rev;
	int group;		/* our grouped-receive count */
	int nch;		/* channels */
	/* per channel: --iters, --budget and --mem split across channels */
	struct perf_params chp;
	bool has_send, has_recv;
	void *listen_comm[PERF_MAX_CHANNELS];
	uint8_t handle[PERF_MAX_CHANNELS][NCCL_NET_HANDLE_MAXSIZE];
	uint8_t peer_handle[PERF_MAX_CHANNELS][NCCL_NET_HANDLE_MAXSIZE];
	struct perf_dir send[PERF_MAX_CHANNELS], recv[PERF_MAX_CHANNELS];
};

struct handle_msg {
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	uint32_t group;
};

struct result_msg {
	uint64_t bw_ns;
	uint64_t lat_ns;
	uint64_t lat_overhead_ns;
};

static int timeout_s(const struct cycle *c)
{
	return (int)c->p->timeout;
}

static void arm(const struct cycle *c, const char *phase)
{
	/* twice the progress timeout: our own checks should fire first */
	perf_watchdog(phase, 2 * c->p->timeout + 10);
}

static bool latency_on(const struct perf_params *p, uint64_t size)
{
	return p->lat_max >= 0 && size <= (uint64_t)p->lat_max;
}

static bool any_latency(const struct perf_params *p)
{
	for (uint32_t i = 0; i < p->nsizes; i++)
		if (latency_on(p, p->sizes[i]))
			return true;
	return false;
}

/* ---- device report ---- */

static const char *ptr_str(int ptr, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s", ptr & NCCL_PTR_HOST ? "HOST " : "",
		 ptr & NCCL_PTR_CUDA ? "CUDA " : "",
		 ptr & NCCL_PTR_DMABUF ? "DMABUF " : "",
		 ptr & ~7 ? "? " : "");
	if (*buf)
		buf[strlen(buf) - 1] = '\0';
	return buf;
}

/* Plugin strings may hold anything: keep the JSON line valid. */
static const char *json_str(const char *s, char *buf, size_t len)
{
	size_t o = 0;

	for (; s && *s && o + 7 < len; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			o += snprintf(buf + o, len - o, "\\%c", ch);
		else if (ch < 0x20)
			o += snprintf(buf + o, len - o, "\\u%04x", ch);
		else
			buf[o++] = (char)ch;
	}
	buf[o] = '\0';
	return buf;
}

static void print_props_json(const struct cycle *c, int dev,
			     const struct perf_props *pr)
{
	char net[128], name[256], pci[512];

	printf("{\"event\":\"device\",\"role\":\"%s\",\"net\":\"%s\",\"abi\":%d,"
	       "\"dev\":%d,\"name\":\"%s\",\"pci_path\":\"%s\",\"guid\":%" PRIu64
	       ",\"ptr_support\":%d,\"reg_is_global\":%d,\"speed_mbps\":%d,"
	       "\"port\":%d,\"latency_us\":%.3f,\"max_comms\":%d,"
	       "\"max_recvs\":%d,\"net_device_type\":%d",
	       c->client ? "client" : "server",
	       json_str(perf_net_name(&c->net), net, sizeof(net)), c->net.abi,
	       dev, json_str(pr->name, name, sizeof(name)),
	       json_str(pr->pci_path, pci, sizeof(pci)), pr->guid,
	       pr->ptr_support,
	       pr->reg_is_global, pr->speed, pr->port, pr->latency,
	       pr->max_comms, pr->max_recvs, pr->net_device_type);
	if (pr->has_v9)
		printf(",\"force_flush\":%d,\"vdevs\":%d,\"max_p2p_bytes\":%" PRIu64
		       ",\"max_coll_bytes\":%" PRIu64,
		       pr->force_flush, pr->vdev_ndevs, pr->max_p2p_bytes,
		       pr->max_coll_bytes);
	if (pr->has_v11)
		printf(",\"max_multi_request_size\":%d",
		       pr->max_multi_request_size);
	if (pr->has_v12)
		printf(",\"rail_id\":%d,\"plane_id\":%d", pr->rail_id,
		       pr->plane_id);
	printf("}\n");
}

static void print_props(const struct cycle *c, int dev,
			const struct perf_props *pr)
{
	char ptr[64];

	if (c->o->json) {
		print_props_json(c, dev, pr);
		return;
	}
	printf("# dev %d: %s, pci %s, guid 0x%" PRIx64 ", speed %d Mb/s, "
	       "latency %.1f us, port %d\n",
	       dev, pr->name ? pr->name : "(null)",
	       pr->pci_path ? pr->pci_path : "-", pr->guid, pr->speed,
	       pr->latency, pr->port);
	printf("#   ptrSupport %s, regIsGlobal %d, maxComms %d, maxRecvs %d, "
	       "netDeviceType %d\n",
	       ptr_str(pr->ptr_support, ptr, sizeof(ptr)), pr->reg_is_global,
	       pr->max_comms, pr->max_recvs, pr->net_device_type);
	if (pr->has_v9)
		printf("#   forceFlush %d, vdevs %d, maxP2pBytes %" PRIu64
		       ", maxCollBytes %" PRIu64 "\n",
		       pr->force_flush, pr->vdev_ndevs, pr->max_p2p_bytes,
		       pr->max_coll_bytes);
	if (pr->has_v11)
		printf("#   maxMultiRequestSize %d", pr->max_multi_request_size);
	if (pr->has_v12)
		printf(", railId %d, planeId %d", pr->rail_id, pr->plane_id);
	if (pr->has_v11)
		printf("\n");
}

/* What this benchmark needs from the device, checked before connecting. */
static int check_props(const struct cycle *c)
{
	const struct perf_props *pr = &c->props;

	if (!(pr->ptr_support & NCCL_PTR_HOST)) {
		perf_err("device %d does not support host memory (ptrSupport 0x%x)",
			 c->o->dev, pr->ptr_support);
		return -ENOTSUP;
	}
	if (pr->net_device_type != NCCL_NET_DEVICE_HOST) {
		perf_err("device %d has netDeviceType %d; only host devices are driven",
			 c->o->dev, pr->net_device_type);
		return -ENOTSUP;
	}
	for (uint32_t i = 0; i < c->p->nsizes; i++) {
		if (pr->has_v9 && c->p->sizes[i] > pr->max_p2p_bytes) {
			perf_err("size %" PRIu64 " exceeds the device's maxP2pBytes %" PRIu64,
				 c->p->sizes[i], pr->max_p2p_bytes);
			return -EMSGSIZE;
		}
	}
	return 0;
}

static int open_device(struct cycle *c)
{
	int ndev = 0, rc;

	rc = NET_CALL("init", perf_net_init(&c->net, c->p->comm_id + c->index));
	if (rc)
		return rc;
	rc = NET_CALL("devices", perf_net_devices(&c->net, &ndev));
	if (rc)
		return rc;
	if (ndev <= 0 || c->o->dev >= ndev) {
		perf_err("plugin reports %d device(s); device %d does not exist",
			 ndev, c->o->dev);
		return -ENODEV;
	}
	if (c->index == 0 || perf_verbose) {
		if (!c->o->json)
			printf("# %s: net \"%s\" from %s, ABI v%d, %d device(s)\n",
			       perf_role, perf_net_name(&c->net), c->o->plugin,
			       c->net.abi, ndev);
		for (int d = 0; d < ndev; d++) {
			struct perf_props pr;

			if (d != c->o->dev && !perf_verbose)
				continue;
			rc = NET_CALL("getProperties",
				       perf_net_get_props(&c->net, d, &pr));
			if (rc)
				return rc;
			print_props(c, d, &pr);
		}
	}
	rc = NET_CALL("getProperties",
		       perf_net_get_props(&c->net, c->o->dev, &c->props));
	if (rc)
		return rc;
	c->group = c->props.max_recvs > 1 ? c->props.max_recvs : 1;
	if (c->group > PERF_MAX_GROUP)
		c->group = PERF_MAX_GROUP;
	return check_props(c);
}

/* ---- connection setup ---- */

/*
 * A failed call's name for its error line, with the channel where there
 * are several; a single channel keeps the bare name ("connect failed").
 */
static const char *call_name(const struct cycle *c, const char *call, int ch,
			     char *buf, size_t len)
{
	if (c->nch == 1)
		return call;
	snprintf(buf, len, "%s on channel %d", call, ch);
	return buf;
}

static int send_handle(struct cycle *c, int ch)
{
	struct handle_msg m;

	memcpy(m.handle, c->handle[ch], sizeof(m.handle));
	m.group = htobe32((uint32_t)c->group);
	return oob_send_msg(c->oob, PERF_MSG_HANDLE, &m, sizeof(m),
			    timeout_s(c));
}

static int recv_handle(struct cycle *c, int ch)
{
	struct handle_msg m;
	int rc;

	rc = oob_recv_msg(c->oob, PERF_MSG_HANDLE, &m, sizeof(m),
			  timeout_s(c));
	if (rc)
		return rc;
	memcpy(c->peer_handle[ch], m.handle, sizeof(m.handle));
	c->send[ch].group = (int)be32toh(m.group);
	if (c->send[ch].group < 1 || c->send[ch].group > PERF_MAX_GROUP) {
		perf_err("peer announced %d grouped receives", c->send[ch].group);
		return -EPROTO;
	}
	return 0;
}

/* The handles travel in channel order; the bootstrap socket keeps it. */
static int send_handles(struct cycle *c)
{
	int rc = 0;

	for (int ch = 0; ch < c->nch && !rc; ch++)
		rc = send_handle(c, ch);
	return rc;
}

static int recv_handles(struct cycle *c)
{
	int rc = 0;

	for (int ch = 0; ch < c->nch && !rc; ch++)
		rc = recv_handle(c, ch);
	return rc;
}

static int listen_all(struct cycle *c)
{
	char name[CALL_NAME_MAX];
	int rc;

	for (int ch = 0; ch < c->nch; ch++) {
		const char *call = call_name(c, "listen", ch, name,
					     sizeof(name));

		rc = NET_CALL(call, perf_net_listen(&c->net, c->o->dev,
						    c->handle[ch],
						    &c->listen_comm[ch]));
		if (!rc && !c->listen_comm[ch]) {
			perf_err("%s returned no listen comm", call);
			rc = -EIO;
		}
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Every listen comes first, as in NCCL.  The server speaks first: its
 * forward handles, then the client's reverse ones if there is a reverse
 * connection.
 */
static int exchange_handles(struct cycle *c)
{
	int rc = 0;

	if (c->has_recv)
		rc = listen_all(c);
	if (rc)
		return rc;
	if (!c->client) {
		rc = send_handles(c);
		if (!rc && c->has_send)
			rc = recv_handles(c);
	} else {
		rc = recv_handles(c);
		if (!rc && c->has_recv)
			rc = send_handles(c);
	}
	return rc;
}

static int poll_connect(struct cycle *c, int ch, int *missing)
{
	char name[CALL_NAME_MAX];
	int rc;

	if (!c->has_send || c->send[ch].comm)
		return 0;
	rc = NET_CALL(call_name(c, "connect", ch, name, sizeof(name)),
		      perf_net_connect(&c->net, c->o->dev, c->peer_handle[ch],
				       &c->send[ch].comm));
	*missing += !rc && !c->send[ch].comm;
	return rc;
}

static int poll_accept(struct cycle *c, int ch, int *missing)
{
	char name[CALL_NAME_MAX];
	int rc;

	if (!c->has_recv || c->recv[ch].comm)
		return 0;
	rc = NET_CALL(call_name(c, "accept", ch, name, sizeof(name)),
		      perf_net_accept(&c->net, c->listen_comm[ch],
				      &c->recv[ch].comm));
	*missing += !rc && !c->recv[ch].comm;
	return rc;
}

/*
 * One call to every connect and accept not done yet, starting at another
 * channel each pass so that no channel is always served first: the plugin
 * must not depend on any order between channels.
 */
static int poll_all(struct cycle *c, unsigned pass, int *missing)
{
	int rc = 0;

	*missing = 0;
	for (int i = 0; i < c->nch && !rc; i++) {
		int ch = (int)((pass + (unsigned)i) % (unsigned)c->nch);

		rc = poll_connect(c, ch, missing);
		if (!rc)
			rc = poll_accept(c, ch, missing);
	}
	return rc;
}

/* Names every comm still missing at the deadline. */
static void report_stuck(const struct cycle *c)
{
	char list[768];
	size_t len = 0;

	list[0] = '\0';
	for (int ch = 0; ch < c->nch && len < sizeof(list); ch++) {
		bool no_send = c->has_send && !c->send[ch].comm;
		bool no_recv = c->has_recv && !c->recv[ch].comm;

		if (!no_send && !no_recv)
			continue;
		len += snprintf(list + len, sizeof(list) - len,
				"%schannel %d %s", len ? ", " : "", ch,
				no_send && no_recv ? "connect and accept"
				: no_send	   ? "connect"
						   : "accept");
	}
	perf_err("no connection within %u s; still NULL: %s", c->p->timeout,
		 list);
}

/* connect and accept never block: poll all of them until each end exists. */
static int establish(struct cycle *c)
{
	struct timespec pause = { 0, PERF_POLL_NS };
	double deadline = perf_now() + c->p->timeout;
	int missing, rc;

	for (unsigned pass = 0;; pass++) {
		rc = poll_all(c, pass, &missing);
		if (rc || !missing)
			return rc;
		if (perf_now() > deadline) {
			report_stuck(c);
			return -ETIMEDOUT;
		}
		if (oob_peer_gone(c->oob)) {
			perf_err("peer closed the bootstrap connection during connection setup");
			return -ECONNRESET;
		}
		nanosleep(&pause, NULL);
	}
}

static int setup_region(struct cycle *c, struct perf_dir *d, bool for_bw)
{
	char name[CALL_NAME_MAX];
	void *buf;
	int rc;

	/* the ping-pong runs on channel 0 only */
	d->buf_len = perf_region_len(&c->chp, d->group, for_bw,
				     d->channel == 0);
	/* the longer messages of the oversize fault stay inside the buffer,
	 * so the plugin sees only the size mismatch */
	d->buf_len += perf_fault_extra(d->fault);
	if (posix_memalign(&buf, PERF_PAGE, d->buf_len)) {
		perf_err("cannot allocate %zu bytes of buffers (%s)",
			 d->buf_len, d->name);
		return -ENOMEM;
	}
	/* touch every page now, not during the timed transfers */
	memset(buf, 0, d->buf_len);
	d->buf = buf;
	rc = NET_CALL(call_name(c, "regMr", d->channel, name, sizeof(name)),
		      perf_net_reg_mr(&c->net, d->comm, d->buf, d->buf_len,
				      &d->mhandle));
	if (!rc && !d->mhandle)
		perf_info("regMr returned a NULL mhandle (allowed)");
	return rc;
}

static void plan_dir(struct cycle *c, struct perf_dir *d, int ch,
		     bool is_send)
{
	/* direction 0 is client->server, tagged with the client's rank */
	bool from_client = c->client == is_send;
	const char *way = from_client ? "client->server" : "server->client";

	d->channel = ch;
	d->dir_id = from_client ? 0 : 1;
	d->sender_rank = from_client ? PERF_RANK_CLIENT : PERF_RANK_SERVER;
	if (c->nch == 1)
		snprintf(d->name, sizeof(d->name), "%s", way);
	else
		snprintf(d->name, sizeof(d->name), "%s, channel %d", way, ch);
	if (is_send && perf_fault_extra(c->o->fault))
		d->fault = c->o->fault;
	if (!is_send && c->o->fault == PERF_FAULT_DEREG_RECV)
		d->fault = c->o->fault;
}

static void plan_roles(struct cycle *c)
{
	c->nch = (int)c->p->channels;
	perf_channel_params(c->p, &c->chp);
	c->need_rev = c->p->bidir || any_latency(c->p);
	c->has_send = c->client || c->need_rev;
	c->has_recv = !c->client || c->need_rev;
	for (int ch = 0; ch < c->nch; ch++) {
		plan_dir(c, &c->send[ch], ch, true);
		plan_dir(c, &c->recv[ch], ch, false);
	}
}

/* The forward direction always carries bandwidth; the reverse only with
 * --bidir. */
static int setup_regions(struct cycle *c)
{
	int rc = 0;

	for (int ch = 0; ch < c->nch && !rc; ch++) {
		if (c->has_send)
			rc = setup_region(c, &c->send[ch],
					  c->send[ch].dir_id == 0 ||
						  c->p->bidir);
		if (!rc && c->has_recv)
			rc = setup_region(c, &c->recv[ch],
					  c->recv[ch].dir_id == 0 ||
						  c->p->bidir);
	}
	return rc;
}

static int connect_all(struct cycle *c)
{
	int rc;

	for (int ch = 0; ch < c->nch; ch++)
		c->recv[ch].group = c->group;
	rc = exchange_handles(c);
	if (!rc)
		rc = establish(c);
	if (!rc)
		rc = setup_regions(c);
	if (!rc)
		perf_info("connected: %s%s on %d channel(s)",
			  c->has_send ? "send " : "",
			  c->has_recv ? "recv" : "", c->nch);
	return rc;
}

/* ---- results ---- */

struct size_result {
	uint64_t size;
	struct perf_plan fwd, rev;
	double bw_s[2];		/* [0] ours, [1] the peer's */
	double first_channel_share; /* ours: when the first was through */
	double lat_s[2];
	double lat_overhead_s[2];
	uint32_t lat_iters;
	struct perf_proc proc;	/* this process, after the bandwidth run */
};

static int exchange_results(struct cycle *c, struct size_result *r)
{
	struct result_msg out = {
		.bw_ns = htobe64((uint64_t)(r->bw_s[0] * 1e9)),
		.lat_ns = htobe64((uint64_t)(r->lat_s[0] * 1e9)),
		.lat_overhead_ns = htobe64((uint64_t)(r->lat_overhead_s[0] * 1e9)),
	}, in;
	int rc;

	rc = oob_send_msg(c->oob, PERF_MSG_RESULT, &out, sizeof(out),
			  timeout_s(c));
	if (!rc)
		rc = oob_recv_msg(c->oob, PERF_MSG_RESULT, &in, sizeof(in),
				  timeout_s(c));
	if (rc)
		return rc;
	r->bw_s[1] = be64toh(in.bw_ns) * 1e-9;
	r->lat_s[1] = be64toh(in.lat_ns) * 1e-9;
	r->lat_overhead_s[1] = be64toh(in.lat_overhead_ns) * 1e-9;
	return 0;
}

static void print_header(const struct cycle *c)
{
	if (c->o->json)
		return;
	if (c->p->reload > 1)
		printf("# cycle %u of %u\n", c->index + 1, c->p->reload);
	printf("# %s%s%s\n", c->p->bidir ? "bandwidth is both directions together; " : "",
	       "latency is half the ping-pong round trip",
	       c->p->unverified ? "; message bytes NOT verified" : "");
	if (c->nch > 1)
		printf("# %d channels per direction: group, window and iters are per channel, the rates over all; latency on channel 0\n",
		       c->nch);
	printf("#%13s %5s %6s %7s %10s %10s %9s %10s\n", "size", "group",
	       "window", "iters", "GB/s", "Gb/s", "Mmsg/s", "lat_us");
}

static void print_result(const struct cycle *c, const struct size_result *r)
{
	/* every channel of a direction runs the same plan */
	uint64_t msgs = (uint64_t)r->fwd.iters * r->fwd.group * c->nch;
	double t = r->bw_s[0] > r->bw_s[1] ? r->bw_s[0] : r->bw_s[1];
	double bytes, gbs, lat_us = -1;
	/* the client initiates the ping-pong and timed it */
	int ini = c->client ? 0 : 1;

	if (c->p->bidir)
		msgs += (uint64_t)r->rev.iters * r->rev.group * c->nch;
	bytes = (double)msgs * r->size;
	gbs = t > 0 ? bytes / t / 1e9 : 0;
	if (r->lat_iters) {
		double net = r->lat_s[ini] - r->lat_overhead_s[0] -
			     r->lat_overhead_s[1];

		lat_us = (net > 0 ? net : 0) / r->lat_iters / 2 * 1e6;
	}
	if (c->o->json) {
		printf("{\"event\":\"result\",\"role\":\"%s\",\"cycle\":%u,"
		       "\"size\":%" PRIu64 ",\"group\":%d,\"window\":%d,"
		       "\"iters\":%u,\"bidir\":%s,\"verified\":%s,"
		       "\"channels\":%d,\"bytes\":%.0f,"
		       "\"seconds\":%.6f,\"gbytes_per_s\":%.4f,"
		       "\"gbits_per_s\":%.4f,\"mmsgs_per_s\":%.4f,"
		       "\"first_channel_share\":%.4f,"
		       "\"threads\":%ld,\"fds\":%ld,\"peak_rss_kib\":%ld,"
		       "\"lat_iters\":%u,\"lat_us\":",
		       c->client ? "client" : "server", c->index, r->size,
		       r->fwd.group, r->fwd.window, r->fwd.iters,
		       c->p->bidir ? "true" : "false",
		       c->p->unverified ? "false" : "true", c->nch, bytes, t, gbs,
		       gbs * 8, t > 0 ? msgs / t / 1e6 : 0,
		       r->first_channel_share, r->proc.threads,
		       r->proc.fds, r->proc.peak_rss_kib, r->lat_iters);
		if (r->lat_iters)
			printf("%.3f}\n", lat_us);
		else
			printf("null}\n");
		return;
	}
	printf("%14" PRIu64 " %5d %6d %7u %10.3f %10.3f %9.4f ", r->size,
	       r->fwd.group, r->fwd.window, r->fwd.iters, gbs, gbs * 8,
	       t > 0 ? msgs / t / 1e6 : 0);
	if (r->lat_iters)
		printf("%10.2f\n", lat_us);
	else
		printf("%10s\n", "-");
	if (c->nch > 1)
		printf("#%13s first of %d channels through at %.3f of the run\n",
		       "", c->nch, r->first_channel_share);
}

/* ---- the sweep ---- */

static int release_dir(struct cycle *c, struct perf_dir *d, bool is_send);

/* --recv-delay: a receiver that starts late, its sender already sending. */
static void recv_delay(const struct cycle *c)
{
	struct timespec ts = { (time_t)c->o->recv_delay, 0 };

	if (!c->o->recv_delay || !(!c->client || c->p->bidir))
		return;
	perf_watchdog("receive delay", c->o->recv_delay + 2 * c->p->timeout + 10);
	perf_info("posting receives %u s late", c->o->recv_delay);
	nanosleep(&ts, NULL);
	arm(c, "transfers");
}

/* --close-early: the send comms go as soon as the last sends test done,
 * while the peer may still be receiving. */
static int close_early(struct cycle *c, uint32_t i)
{
	int rc = 0;

	if (!c->o->close_early || i + 1 != c->p->nsizes ||
	    !(c->client || c->p->bidir))
		return 0;
	for (int ch = 0; ch < c->nch && !rc; ch++)
		rc = release_dir(c, &c->send[ch], true);
	return rc;
}

static int run_size(struct cycle *c, uint32_t i)
{
	/* the per-channel plan; its timeout is the one latency needs too */
	struct perf_side side = { &c->net, &c->chp, c->oob };
	struct size_result r = { .size = c->p->sizes[i] };
	struct perf_bw_times times;
	uint32_t tag = c->index << 16 | i << 1;
	/* one device per process: all channels of a direction share a group */
	int fwd_group = c->client ? c->send[0].group : c->recv[0].group;
	int rev_group = c->client ? c->recv[0].group : c->send[0].group;
	int rc;

	perf_plan_size(&c->chp, r.size, fwd_group, &r.fwd);
	if (c->need_rev)
		perf_plan_size(&c->chp, r.size, rev_group, &r.rev);
	rc = oob_barrier(c->oob, tag, timeout_s(c));
	if (rc)
		return rc;
	if (latency_on(c->p, r.size)) {
		r.lat_iters = perf_latency_iters(c->p, r.size);
		rc = perf_run_latency(&side, &c->send[0], &c->recv[0], c->client,
				      r.size, r.lat_iters, &r.lat_s[0],
				      &r.lat_overhead_s[0]);
		if (!rc)
			rc = oob_barrier(c->oob, tag | 1, timeout_s(c));
		if (rc)
			return rc;
	}
	recv_delay(c);
	rc = perf_run_bw(&side,
			 c->client || c->p->bidir ? c->send : NULL,
			 !c->client || c->p->bidir ? c->recv : NULL, c->nch,
			 r.size, &times);
	r.bw_s[0] = times.elapsed;
	/* 1: every channel finished with the run, none got ahead */
	r.first_channel_share = times.elapsed > 0 ?
				times.first_channel / times.elapsed : 1;
	/* every comm still open, the plugin's threads at work */
	perf_proc_sample(&r.proc);
	if (!rc)
		rc = close_early(c, i);
	if (!rc)
		rc = exchange_results(c, &r);
	if (!rc)
		print_result(c, &r);
	return rc;
}

static int run_sweep(struct cycle *c)
{
	int rc = 0;

	print_header(c);
	for (uint32_t i = 0; i < c->p->nsizes && !rc; i++) {
		arm(c, "transfers");
		rc = run_size(c, i);
	}
	return rc;
}

/* ---- teardown ---- */

static int release_dir(struct cycle *c, struct perf_dir *d, bool is_send)
{
	char name[CALL_NAME_MAX];
	int rc = 0, rc2;

	if (d->comm && d->buf && !d->mr_dropped)
		rc = NET_CALL(call_name(c, "deregMr", d->channel, name,
					sizeof(name)),
			      perf_net_dereg_mr(&c->net, d->comm, d->mhandle));
	if (d->comm) {
		rc2 = is_send ? NET_CALL(call_name(c, "closeSend", d->channel,
						   name, sizeof(name)),
					 perf_net_close_send(&c->net, d->comm))
			      : NET_CALL(call_name(c, "closeRecv", d->channel,
						   name, sizeof(name)),
					 perf_net_close_recv(&c->net, d->comm));
		rc = rc ? rc : rc2;
	}
	free(d->buf);
	d->buf = NULL;
	d->comm = NULL;
	return rc;
}

/* Everything is released even after a failure; the first error counts. */
static int release_channels(struct cycle *c)
{
	char name[CALL_NAME_MAX];
	int rc = 0, rc2;

	for (int ch = 0; ch < c->nch; ch++) {
		rc2 = release_dir(c, &c->send[ch], true);
		rc = rc ? rc : rc2;
		rc2 = release_dir(c, &c->recv[ch], false);
		rc = rc ? rc : rc2;
		if (!c->listen_comm[ch])
			continue;
		rc2 = NET_CALL(call_name(c, "closeListen", ch, name,
					 sizeof(name)),
			       perf_net_close_listen(&c->net,
						     c->listen_comm[ch]));
		rc = rc ? rc : rc2;
		c->listen_comm[ch] = NULL;
	}
	return rc;
}

static int teardown(struct cycle *c)
{
	int rc, rc2;

	arm(c, "teardown");
	rc = release_channels(c);
	rc2 = NET_CALL("finalize", perf_net_finalize(&c->net));
	rc = rc ? rc : rc2;
	if (c->net.prof_events)
		perf_info("plugin reported %lu profiler events",
			  c->net.prof_events);
	return rc;
}

int perf_run_cycle(const struct perf_opts *o, int oob, uint32_t index)
{
	struct cycle *c;
	int rc, rc2;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = o;
	c->p = &o->params;
	c->oob = oob;
	c->index = index;
	c->client = !o->server;
	plan_roles(c);

	arm(c, "plugin load");
	rc = perf_net_open(&c->net, o->plugin, o->abi);
	if (rc)
		goto out;
	c->net.config.trafficClass = o->traffic_class;
	arm(c, "init");
	rc = open_device(c);
	if (!rc) {
		arm(c, "connection setup");
		rc = connect_all(c);
	}
	if (!rc)
		rc = run_sweep(c);
	if (!rc) {
		arm(c, "final barrier");
		rc = oob_barrier(c->oob, 0xffffffffu - index, timeout_s(c));
	}
	rc2 = teardown(c);
	/*
	 * After a failure the plugin may still run threads on its code:
	 * leave it mapped, the process is about to exit anyway.
	 */
	if (!rc && !rc2) {
		arm(c, "dlclose");
		perf_net_close(&c->net);
	}
	rc = rc ? rc : rc2;
out:
	perf_watchdog("idle", 0);
	free(c);
	return rc;
}
