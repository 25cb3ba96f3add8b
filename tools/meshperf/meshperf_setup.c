/* SPDX-License-Identifier: MIT */
/*
 * The cycle up to its first transfer, apart from the measuring in
 * meshperf_run.c: the device reported and checked before anything is
 * connected, so that a device this benchmark cannot drive fails with its
 * reason; then, in NCCL's order, every channel's listen, handle exchange,
 * connect and accept, and registered buffers.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meshperf_cycle.h"

#define PERF_POLL_NS (200 * 1000)
#define PERF_PAGE 4096

struct handle_msg {
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	uint32_t group;
};

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

int perf_open_device(struct cycle *c)
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

/* One connect (is_send) or accept, unless that end exists or is unused. */
static int poll_end(struct cycle *c, int ch, bool is_send, int *missing)
{
	struct perf_dir *d = is_send ? &c->send[ch] : &c->recv[ch];
	char name[CALL_NAME_MAX];
	const char *call;
	int rc;

	if (!(is_send ? c->has_send : c->has_recv) || d->comm)
		return 0;
	call = call_name(c, is_send ? "connect" : "accept", ch, name,
			 sizeof(name));
	if (is_send)
		rc = NET_CALL(call, perf_net_connect(&c->net, c->o->dev,
						     c->peer_handle[ch],
						     &d->comm));
	else
		rc = NET_CALL(call, perf_net_accept(&c->net,
						    c->listen_comm[ch],
						    &d->comm));
	*missing += !rc && !d->comm;
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

		rc = poll_end(c, ch, true, missing);
		if (!rc)
			rc = poll_end(c, ch, false, missing);
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
	double deadline = perf_now() + c->p->timeout, peer_gone_at = 0;
	int missing, rc;

	for (unsigned pass = 0;; pass++) {
		rc = poll_all(c, pass, &missing);
		if (rc || !missing)
			return rc;
		if (perf_now() > deadline) {
			report_stuck(c);
			return -ETIMEDOUT;
		}
		if (oob_peer_gone_long(c->oob, &peer_gone_at)) {
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

void perf_plan_roles(struct cycle *c)
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

/*
 * The setup's time is that of the connects and accepts alone, from the
 * first call to the last comm, as NCCL's connection setup takes it once
 * the handles have crossed: what the plugin's own round trips cost.
 */
int perf_connect_all(struct cycle *c)
{
	double t0 = 0, setup_s = 0;
	int rc;

	for (int ch = 0; ch < c->nch; ch++)
		c->recv[ch].group = c->group;
	rc = exchange_handles(c);
	if (!rc) {
		t0 = perf_now();
		rc = establish(c);
		setup_s = perf_now() - t0;
	}
	if (!rc)
		rc = setup_regions(c);
	if (rc)
		return rc;
	perf_info("connected: %s%s on %d channel(s) in %.1f ms",
		  c->has_send ? "send " : "", c->has_recv ? "recv" : "",
		  c->nch, setup_s * 1e3);
	if (c->o->json)
		printf("{\"event\":\"setup\",\"role\":\"%s\",\"cycle\":%u,"
		       "\"channels\":%d,\"send\":%s,\"recv\":%s,"
		       "\"setup_ms\":%.3f}\n", c->client ? "client" : "server",
		       c->index, c->nch, c->has_send ? "true" : "false",
		       c->has_recv ? "true" : "false", setup_s * 1e3);
	return 0;
}

