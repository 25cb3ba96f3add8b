/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: descriptor, parameters and devices.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp_xdc_conn.h"
#include "tcp_xdc_crypt.h"
#include "tcp_xdc_data.h"
#include "tcp_xdc_linger.h"
#include "tcp_xdc_pool.h"
#include "tcp_xdc_window.h"

/* streams auto: at least this many; more where the path needs them */
#define TCP_XDC_STREAMS_AUTO 8
/* memory_max is at most this part of the host's memory */
#define TCP_XDC_MEMORY_SHARE 4

static const struct mesh_param tcp_xdc_params[] = {
	{ "ifname", MESH_PARAM_STR, "", 0, 0,
	  "Interfaces to use, NCCL_SOCKET_IFNAME syntax; empty picks all that are up." },
	{ "streams", MESH_PARAM_INT, "0", 0, TCP_XDC_MAX_STREAMS,
	  "TCP data connections per NCCL connection; 0: 8, or more (up to 64) where the control connection's round trip says the path's bandwidth-delay product needs them." },
	{ "threads", MESH_PARAM_INT, "0", 0, TCP_XDC_MAX_THREADS,
	  "Data-path threads of the process, shared by all connections; 0: two per core it may run on." },
	{ "chunk_size", MESH_PARAM_SIZE, "512K", TCP_XDC_MIN_CHUNK,
	  TCP_XDC_MAX_CHUNK,
	  "Messages are cut into chunks of this size, each sent on whichever stream is free." },
	{ "min_chunk", MESH_PARAM_SIZE, "64K", TCP_XDC_MIN_CHUNK,
	  TCP_XDC_MAX_CHUNK,
	  "Smallest piece a message is cut into to spread it over the streams." },
	{ "sndbuf", MESH_PARAM_SIZE, "0", 0, 1LL << 30,
	  "SO_SNDBUF of each data stream; 0 keeps kernel autotuning." },
	{ "rcvbuf", MESH_PARAM_SIZE, "0", 0, 1LL << 30,
	  "SO_RCVBUF of each data stream; 0 keeps kernel autotuning." },
	{ "speed_mbps", MESH_PARAM_INT, "0", 0, 100000000,
	  "Speed reported to NCCL; 0 reads it from sysfs (10000 when unknown)." },
	{ "keepalive_idle_s", MESH_PARAM_INT, "60", 1, 32767,
	  "Seconds a data stream may be silent before TCP keepalive probes it." },
	{ "keepalive_interval_s", MESH_PARAM_INT, "10", 1, 32767,
	  "Seconds between TCP keepalive probes." },
	{ "keepalive_count", MESH_PARAM_INT, "6", 1, 127,
	  "Unanswered keepalive probes before a stream counts as dead." },
	{ "timeout_ms", MESH_PARAM_INT, "30000", 0, 3600000,
	  "A stream whose peer acknowledges nothing for this long fails (the sender: no write and no acknowledgement; the receiver: TCP_USER_TIMEOUT and its pings); 0 turns it off." },
	{ "outage_ms", MESH_PARAM_INT, "300000", 0, 86400000,
	  "How long a connection whose path stops answering or whose streams are reset holds its requests and dials its streams again before it fails; 0: the first such fault fails it." },
	{ "encrypt", MESH_PARAM_BOOL, "false", 0, 0,
	  "Every data stream carries AES-256-GCM records keyed per connection from the authentication handshake; needs auth_key_file, and the same setting on both sides." },
	{ "record_size", MESH_PARAM_SIZE, "256K", TCP_XDC_RECORD_MIN,
	  TCP_XDC_RECORD_MAX,
	  "Plaintext bytes per encrypted record (encrypt = true); a record is verified whole before any of it is delivered." },
	{ "cipher_library", MESH_PARAM_STR, "auto", 0, 0,
	  "Whose AES-256-GCM code seals and opens the records: auto (intel-ipsec-mb where it runs on VAES and AVX-512, else OpenSSL), openssl or ipsec-mb; the wire is the same either way." },
	{ "spin_us", MESH_PARAM_INT, "0", 0, 10000,
	  "Microseconds an idle data thread keeps looking for work before it sleeps." },
	{ "inline_max", MESH_PARAM_SIZE, "16K", 0, TCP_XDC_MAX_CHUNK,
	  "Messages up to this size are written by NCCL's proxy thread and read in its test() when their stream is free, without waking a data thread; 0 turns that off." },
	{ "window", MESH_PARAM_SIZE, "0", 0, 1LL << 40,
	  "Bytes a resuming send connection keeps copies of, so that its sends complete once written, not once acknowledged; a receiving connection stores twice that of chunks that come before their receive; 0: the path's bandwidth-delay product, none below 2 MiB." },
	{ "window_max", MESH_PARAM_SIZE, "256M", 64LL << 10, 1LL << 40,
	  "Most bytes of rings (copies, stored chunks) one connection has." },
	{ "memory_max", MESH_PARAM_SIZE, "1G", 0, 1LL << 40,
	  "Most bytes of rings the process has in all connections (at most a quarter of the host's memory), receive rings at most half of it; 0: none, every resuming send completes once acknowledged and no chunk is stored." },
	{ "traffic_class", MESH_PARAM_INT, "-1", -1, 255,
	  "IP TOS / IPv6 traffic class byte (DSCP << 2) of every data stream's packets where NCCL's communicator config sets none (it wins where it does); -1 leaves the system's." },
	{ NULL, 0, NULL, 0, 0, NULL },
};

/* cipher_library names one this build has, where records are sealed. */
static int check_cipher_library(const struct mesh_host *host)
{
	const char *name = host->param_str(host, "cipher_library");
	enum tcp_xdc_aead_lib lib;
	const char *why;

	if (!tcp_xdc_aead_lib_parse(name, &lib)) {
		host->param_error(host, "cipher_library", "expected auto, "
				  "openssl or ipsec-mb, got '%s'", name);
		return -EINVAL;
	}
	why = tcp_xdc_aead_unusable(lib);
	if (host->param_int(host, "encrypt") && why) {
		host->param_error(host, "cipher_library", "%s", why);
		return -EINVAL;
	}
	return 0;
}

/* ifname in NCCL_SOCKET_IFNAME syntax; that this host has no such
 * interface is init's "no devices", not an error of the value. */
static int check_ifname(const struct mesh_host *host)
{
	const char *ifname = host->param_str(host, "ifname");
	char why[512];

	if (!util_netif_filter_check(ifname ? ifname : "", why, sizeof(why)))
		return 0;
	host->param_error(host, "ifname", "%s", why);
	return -EINVAL;
}

/* Each value's syntax and the rules between keys, checked before init
 * (and by meshinfo --check). */
static int tcp_xdc_check(const struct mesh_host *host)
{
	long long chunk = host->param_int(host, "chunk_size");
	long long min = host->param_int(host, "min_chunk");
	int err = check_ifname(host);
	char text[32];

	/* The keys come from the authentication handshake: no key, no
	 * encryption, and no silent fallback to clear text. */
	if (host->param_int(host, "encrypt") && !host->authenticated(host)) {
		host->param_error(host, "encrypt", "encrypt = true needs "
				  "auth_key_file (the stream keys are derived "
				  "from its handshake)");
		return -EINVAL;
	}
	if (check_cipher_library(host))
		return -EINVAL;
	if (min <= chunk)
		return err;
	snprintf(text, sizeof(text), "%s", host->param_str(host, "chunk_size"));
	host->param_error(host, "min_chunk", "expected at most chunk_size "
			  "(%s), got %s", text, host->param_str(host, "min_chunk"));
	return -EINVAL;
}

/* The window's keys, and the host's limits on them. */
static void window_params(const struct mesh_host *host,
			  struct tcp_xdc_ctx *ctx)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t mem = (uint64_t)host->param_int(host, "memory_max");
	uint64_t share = pages > 0 && page > 0 ?
		(uint64_t)pages * (uint64_t)page / TCP_XDC_MEMORY_SHARE : 0;

	ctx->window = (uint64_t)host->param_int(host, "window");
	ctx->window_max = (uint64_t)host->param_int(host, "window_max");
	if (share && mem > share) {
		MESH_INFO("memory_max %llu MiB is more than a quarter of this host's memory: %llu MiB",
			  (unsigned long long)(mem >> 20),
			  (unsigned long long)(share >> 20));
		mem = share;
	}
	ctx->keep_budget.max = mem;
	/* receive rings fill only where NCCL's receives lag: they never
	 * crowd out the send rings, which every long path needs */
	ctx->store_budget.max = mem / 2;
	tcp_xdc_window_init(ctx);
}

static int tcp_xdc_init(const struct mesh_host *host, void **mctx)
{
	const char *ifname;
	struct tcp_xdc_ctx *ctx;
	int n;

	tcp_xdc_host = host;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		MESH_WARN("out of memory");
		return -ENOMEM;
	}
	ctx->streams = (int)host->param_int(host, "streams");
	ctx->streams_auto = !ctx->streams;
	if (ctx->streams_auto)
		ctx->streams = TCP_XDC_STREAMS_AUTO;
	ctx->threads = tcp_xdc_pool_size((int)host->param_int(host, "threads"));
	ctx->inline_max = (size_t)host->param_int(host, "inline_max");
	ctx->chunk_size = (size_t)host->param_int(host, "chunk_size");
	ctx->min_chunk = (size_t)host->param_int(host, "min_chunk");
	ctx->keepalive_idle_s = (int)host->param_int(host, "keepalive_idle_s");
	ctx->keepalive_interval_s =
		(int)host->param_int(host, "keepalive_interval_s");
	ctx->keepalive_count = (int)host->param_int(host, "keepalive_count");
	ctx->timeout_ms = (int)host->param_int(host, "timeout_ms");
	ctx->outage_ms = (int)host->param_int(host, "outage_ms");
	ctx->spin_us = (int)host->param_int(host, "spin_us");
	ctx->encrypt = host->param_int(host, "encrypt") != 0;
	ctx->record_size = (size_t)host->param_int(host, "record_size");
	/* checked by tcp_xdc_check */
	tcp_xdc_aead_lib_parse(host->param_str(host, "cipher_library"),
			       &ctx->aead_lib);
	ctx->sndbuf = (int)host->param_int(host, "sndbuf");
	ctx->rcvbuf = (int)host->param_int(host, "rcvbuf");
	ctx->speed_mbps = (int)host->param_int(host, "speed_mbps");
	ctx->traffic_class = (int)host->param_int(host, "traffic_class");
	window_params(host, ctx);
	pthread_mutex_init(&ctx->linger_lock, NULL);
	ifname = host->param_str(host, "ifname");
	if (!ifname)
		ifname = "";

	n = util_netif_list(ifname, &ctx->devs);
	if (n < 0) {
		MESH_WARN("cannot list network interfaces: %s", strerror(-n));
		pthread_mutex_destroy(&ctx->linger_lock);
		free(ctx);
		return n;
	}
	if (n == 0) {
		MESH_INFO("no usable interface%s%s%s", *ifname ? " matches '" : "",
			  ifname, *ifname ? "'" : "");
		free(ctx->devs);
		pthread_mutex_destroy(&ctx->linger_lock);
		free(ctx);
		return -ENODEV;
	}
	ctx->ndevs = n;
	for (int i = 0; i < n; i++)
		MESH_INFO("device %d: %s, %d addresses", i, ctx->devs[i].name,
			  ctx->devs[i].naddrs);
	*mctx = ctx;
	return 0;
}

/* What this process lived through, for meshinfo and the log. */
static int tcp_xdc_report(void *mctx, char *buf, size_t cap)
{
	struct tcp_xdc_ctx *ctx = mctx;
	int n = snprintf(buf, cap,
			 "tcp-xdc: %llu outages resumed, %llu streams dialed anew\n",
			 (unsigned long long)atomic_load(&ctx->outages),
			 (unsigned long long)atomic_load(&ctx->resumed_streams));

	return n < 0 ? -EIO : 0;
}

/* The module's own: outages this process's comms survived, and the
 * streams they dialed anew (counted by the resuming code, in ctx); the
 * most the process keeps of copies. */
static int tcp_xdc_counters(void *mctx, mesh_counter_fn emit, void *arg)
{
	struct tcp_xdc_ctx *ctx = mctx;

	emit(arg, &(struct mesh_counter){ .name = "resumes",
		.value = atomic_load(&ctx->outages) });
	emit(arg, &(struct mesh_counter){ .name = "reconnects",
		.value = atomic_load(&ctx->resumed_streams) });
	emit(arg, &(struct mesh_counter){ .name = "window_limit_bytes",
		.help = "tcp-xdc: most bytes of rings (copies of completed sends, chunks stored before their receive) the process may hold (memory_max).",
		.kind = MESH_COUNTER_GAUGE, .value = ctx->keep_budget.max });
	return 0;
}

static void tcp_xdc_fini(void *mctx)
{
	struct tcp_xdc_ctx *ctx = mctx;
	int open;

	if (!ctx)
		return;
	if (atomic_load(&ctx->outages))
		MESH_INFO("%llu outages resumed, %llu streams dialed anew",
			  (unsigned long long)atomic_load(&ctx->outages),
			  (unsigned long long)atomic_load(&ctx->resumed_streams));
	/* No thread of ours outlives the module.  A comm NCCL left open
	 * still points at the context: it stays, and closing the comm later
	 * closes its sockets without lingering. */
	pthread_mutex_lock(&ctx->linger_lock);
	ctx->finished = true;
	pthread_mutex_unlock(&ctx->linger_lock);
	/* closing comms still need the pool: they go first */
	tcp_xdc_linger_fini(ctx);
	open = tcp_xdc_pool_fini(ctx);
	if (!open)
		tcp_xdc_ctx_free(ctx);
}

static int tcp_xdc_devices(void *mctx, int *ndev)
{
	struct tcp_xdc_ctx *ctx = mctx;

	*ndev = ctx->ndevs;
	return 0;
}

static int tcp_xdc_get_properties(void *mctx, int dev,
				  struct mesh_dev_props *props)
{
	struct tcp_xdc_ctx *ctx = mctx;
	const struct util_netif *nif;

	if (dev < 0 || dev >= ctx->ndevs)
		return -EINVAL;
	nif = &ctx->devs[dev];
	memset(props, 0, sizeof(*props));
	snprintf(props->name, sizeof(props->name), "%s", nif->name);
	snprintf(props->pci_path, sizeof(props->pci_path), "%s",
		 nif->pci_path);
	props->guid = (uint64_t)dev;
	props->ptr_support = MESH_PTR_HOST;
	props->speed_mbps = tcp_xdc_speed(ctx, dev);
	props->max_comms = 65536;
	props->max_recvs = 1;
	props->max_p2p_bytes = TCP_XDC_MAX_MESSAGE;
	props->max_coll_bytes = 512ULL << 20;
	props->naddrs = nif->naddrs;
	memcpy(props->addrs, nif->addrs,
	       sizeof(props->addrs[0]) * (size_t)nif->naddrs);
	return 0;
}

/* Host memory needs no registration; the handle only has to be non-NULL. */
/*
 * Whether the kernel has a route to one of the peer's addresses: a peer
 * behind a link this host lacks (a gateway's other side) is refused at
 * once, so the core can hand it to relay, instead of failing to dial it
 * until the timeout.  A route is no promise that the peer answers.
 */
static int tcp_xdc_reach(void *mctx, int dev, const struct mesh_addr *peer,
			 int npeer, char *why, size_t cap)
{
	char addr[UTIL_ADDR_STRLEN];
	size_t len = 0;
	int first_err = 0;

	(void)mctx, (void)dev;
	for (int i = 0; i < npeer; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = util_addr_to_sockaddr(&peer[i], &ss);
		int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		int err = fd < 0 ? errno :
			  connect(fd, (struct sockaddr *)&ss, sl) ? errno : 0;

		if (fd >= 0)
			close(fd);
		if (!err || fd < 0)
			return 0;	/* routed, or cannot tell: try it */
		if (!first_err)
			first_err = err;
		if (len < cap)
			len += (size_t)snprintf(why + len, cap - len, "%s%s",
				len ? ", " : "no route to ",
				util_addr_str(&peer[i], addr, sizeof(addr)));
	}
	if (!npeer)
		return 0;
	if (len < cap)
		snprintf(why + len, cap - len, " (%s)", strerror(first_err));
	return -EHOSTUNREACH;
}

static int tcp_xdc_reg_mr(void *comm, void *data, size_t size, int type,
			  void **mhandle)
{
	(void)data;
	(void)size;
	if (type != MESH_PTR_HOST) {
		MESH_WARN("only host memory is supported (pointer type %d)",
			  type);
		return -EINVAL;
	}
	*mhandle = comm;
	return 0;
}

static int tcp_xdc_dereg_mr(void *comm, void *mhandle)
{
	(void)comm;
	(void)mhandle;
	return 0;
}

MESH_EXPORT const struct mesh_module MESH_MODULE_DESCRIPTOR = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_module),
	.name = "tcp-xdc",
	.version = "1.0",
	.params = tcp_xdc_params,
	.init = tcp_xdc_init,
	.fini = tcp_xdc_fini,
	.devices = tcp_xdc_devices,
	.get_properties = tcp_xdc_get_properties,
	.connect = tcp_xdc_connect,
	.accept = tcp_xdc_accept,
	.abandon = tcp_xdc_abandon,
	.reg_mr = tcp_xdc_reg_mr,
	.reg_mr_dmabuf = NULL,
	.dereg_mr = tcp_xdc_dereg_mr,
	.isend = tcp_xdc_isend,
	.irecv = tcp_xdc_irecv,
	.iflush = NULL,
	.close_send = tcp_xdc_close_send,
	.close_recv = tcp_xdc_close_recv,
	.check = tcp_xdc_check,
	.reach = tcp_xdc_reach,
	.describe = tcp_xdc_describe,
	.report = tcp_xdc_report,
	.comm_counters = tcp_xdc_comm_counters,
	.counters = tcp_xdc_counters,
};
