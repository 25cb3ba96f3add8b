/* SPDX-License-Identifier: MIT */
/*
 * meshinfo --cluster: this host's facts (config and plugin hashes, dc,
 * rails), the plugin's logger, and rank 0's schedule: every rail, every
 * pair, one at a time, each step bounded.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "loader.h"
#include "meshinfo.h"
#include "sysctl.h"

#define CL_PLUGIN_FILE "libnccl-net-mesh.so"
#define CL_DEFAULT_CONNECT_MS "5000"
/* Most bursts of a direction; its bandwidth is the best of them. */
#define CL_BURSTS 3
/* Bytes of each of the probe's four messages. */
#define CL_PROBE (256 << 10)
/* Rounds of the ping-pong that takes a pair's round trip. */
#define CL_RTT_ROUNDS 4

static int cl_rank = -1;
static int cl_verbose;

/* ---- logging: the plugin's lines kept while a step runs ---- */

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cap_buf;
static size_t cap_len, cap_size;
static bool capturing;

void cl_log_capture(bool on)
{
	pthread_mutex_lock(&cap_lock);
	if (on)
		cap_len = 0;
	if (cap_buf)
		cap_buf[cap_len] = '\0';
	capturing = on;
	pthread_mutex_unlock(&cap_lock);
}

const char *cl_log_lines(void)
{
	return cap_buf ? cap_buf : "";
}

static void cap_add(char level, const char *text)
{
	size_t n = strlen(text) + 4;

	pthread_mutex_lock(&cap_lock);
	if (capturing && cap_len + n > cap_size) {
		size_t size = (cap_size ? cap_size * 2 : 16384) + n;
		char *b = realloc(cap_buf, size);

		if (b) {
			cap_buf = b;
			cap_size = size;
		}
	}
	if (capturing && cap_len + n <= cap_size)
		cap_len += (size_t)snprintf(cap_buf + cap_len,
					    cap_size - cap_len, "%c %s\n",
					    level, text);
	pthread_mutex_unlock(&cap_lock);
}

static void say(const char *level, const char *msg)
{
	fprintf(stderr, "meshinfo[%d] %s %s\n", cl_rank, level, msg);
}

static void vlog(char level, const char *name, bool print, const char *fmt,
		 va_list ap)
{
	char msg[2048];
	size_t len;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	len = strlen(msg);
	while (len && msg[len - 1] == ' ')
		msg[--len] = '\0';
	cap_add(level, meshinfo_untagged(msg));
	if (print)
		say(name, msg);
}

/* The logger handed to the plugin: NCCL_DEBUG has no say, every INFO
 * line reaches us, and the report carries what matters. */
static void plugin_logger(ncclDebugLogLevel level, unsigned long flags,
			  const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	(void)flags, (void)file, (void)line;
	if (level != NCCL_LOG_WARN && level != NCCL_LOG_INFO)
		return;
	va_start(ap, fmt);
	/* a WARN outside a step (init, config) is not in any report */
	vlog(level == NCCL_LOG_WARN ? 'W' : 'I',
	     level == NCCL_LOG_WARN ? "WARN" : "INFO",
	     cl_verbose > 1 || (level == NCCL_LOG_WARN && (cl_verbose ||
							     !capturing)),
	     fmt, ap);
	va_end(ap);
}

/* perf_err, perf_warn and perf_info, netdrive's own and ours */
static void netdrive_log(enum perf_log_level level, const char *fmt,
			 va_list ap)
{
	if (level == PERF_LOG_INFO)
		vlog('I', "INFO", cl_verbose > 0, fmt, ap);
	else
		vlog('W', level == PERF_LOG_ERROR ? "ERROR" : "WARN", true,
		     fmt, ap);
}

/* The clock stays netdrive's, and no watchdog is armed: every step is
 * bounded by its own timeouts. */
static const struct perf_hooks cl_hooks = {
	.vlog = netdrive_log,
	.plugin_logger = plugin_logger,
};

/* ---- hashes ---- */

static void hex(const unsigned char *md, unsigned n, char out[CL_SHA_HEX])
{
	for (unsigned i = 0; i < n && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

void cl_sha256_hex(const void *data, size_t len, char out[CL_SHA_HEX])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned n = 0;

	out[0] = '\0';
	if (EVP_Digest(data, len, md, &n, EVP_sha256(), NULL))
		hex(md, n, out);
}

int cl_sha256_file(const char *path, char out[CL_SHA_HEX])
{
	unsigned char md[EVP_MAX_MD_SIZE], buf[65536];
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	FILE *f = fopen(path, "rb");
	unsigned n = 0;
	size_t got;
	int ok;

	out[0] = '\0';
	ok = f && ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	while (ok && (got = fread(buf, 1, sizeof(buf), f)) > 0)
		ok = EVP_DigestUpdate(ctx, buf, got);
	ok = ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &n);
	if (ok)
		hex(md, n, out);
	if (f)
		fclose(f);
	EVP_MD_CTX_free(ctx);
	return ok ? 0 : -EIO;
}

/* ---- this host ---- */

/* The plugin of the build or installation this meshinfo belongs to. */
static const char *default_plugin(char *buf, size_t cap)
{
	static const char *const rel[] = {
		"/../../core/" CL_PLUGIN_FILE,		/* build tree */
		"/../" MESHINFO_LIBDIR "/" CL_PLUGIN_FILE,	/* installed */
	};
	const char *env = getenv("NCCL_NET_PLUGIN");
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env)
		return env;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash)
			*slash = '\0';
		for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
			int len = snprintf(buf, cap, "%s%s", exe, rel[i]);

			if (len > 0 && (size_t)len < cap && !access(buf, R_OK))
				return buf;
		}
	}
	return CL_PLUGIN_FILE;
}

/* The config's auth_key_file, the one the plugin proves: the rendezvous
 * proves it too.  No key file: key->len stays 0. */
static int load_key(const struct core_scope *core, struct core_auth_key *key)
{
	const char *path = core_scope_get(core, "auth_key_file")->text;
	char err[512];

	if (!path || !*path || !core_auth_load_key(path, key, err, sizeof(err)))
		return 0;
	fprintf(stderr, "meshinfo: auth_key_file: %s\n", err);
	return -EINVAL;
}

/* One stream's buffer at most: a set SO_SNDBUF/SO_RCVBUF is capped at
 * net.core's maximum and doubled by the kernel, else autotuning grows
 * it to tcp_wmem's/tcp_rmem's third number. */
static uint64_t stream_buffer(long long set, const char *core_max,
			      const char *tcp_mem)
{
	uint64_t cap = util_sysctl_last(core_max, 0);
	uint64_t v;

	if (set <= 0)
		v = util_sysctl_last(tcp_mem, 0);
	else
		v = 2 * (cap && (uint64_t)set > cap ? cap : (uint64_t)set);
	return v < CL_XDC_BYTES_MAX ? v : CL_XDC_BYTES_MAX;
}

/* A key of the scope, 0 where this build of the module has none. */
static long long xdc_num(const struct core_scope *scope, const char *key)
{
	const struct core_value *v = core_scope_get(scope, key);

	return v ? v->num : 0;
}

/*
 * What a tcp-xdc connection of this host keeps in flight at most: its
 * resolved streams, sndbuf and rcvbuf (and the window's keys where the
 * module has them), and this namespace's TCP limits.  The module is only
 * opened for its table, as meshinfo --check opens one: no init.
 */
static void xdc_facts(struct core_config *cfg, struct cl_xdc *x)
{
	struct core_module *mod = calloc(1, sizeof(*mod));
	const struct core_value *streams;
	long long keep;

	memset(x, 0, sizeof(*x));
	if (!mod)
		return;
	if (core_loader_inspect(cfg, "tcp-xdc", mod)) {
		free(mod);
		return;
	}
	streams = core_scope_get(mod->params, "streams");
	if (mod->params && streams) {
		x->known = true;
		x->streams = (int)streams->num;
		x->streams_max = streams->param->max < CL_XDC_STREAMS_MAX ?
				 (int)streams->param->max : CL_XDC_STREAMS_MAX;
		x->send_set = xdc_num(mod->params, "sndbuf") > 0;
		x->recv_set = xdc_num(mod->params, "rcvbuf") > 0;
		x->send_max = stream_buffer(xdc_num(mod->params, "sndbuf"),
					    "/proc/sys/net/core/wmem_max",
					    "/proc/sys/net/ipv4/tcp_wmem");
		x->recv_max = stream_buffer(xdc_num(mod->params, "rcvbuf"),
					    "/proc/sys/net/core/rmem_max",
					    "/proc/sys/net/ipv4/tcp_rmem");
		/* copies kept while resuming, within the process's budget */
		keep = xdc_num(mod->params, "window_max");
		if (keep > 0 && xdc_num(mod->params, "outage_ms") > 0 &&
		    xdc_num(mod->params, "memory_max") > 0) {
			if (xdc_num(mod->params, "memory_max") < keep)
				keep = xdc_num(mod->params, "memory_max");
			if (xdc_num(mod->params, "window") > 0 &&
			    xdc_num(mod->params, "window") < keep)
				keep = xdc_num(mod->params, "window");
			x->keep_max = (uint64_t)keep < CL_XDC_BYTES_MAX ?
				      (uint64_t)keep : CL_XDC_BYTES_MAX;
		}
	}
	core_loader_unload(mod, 1);
}

/* Host name, dc, config hash, the key, and what the core's config says
 * about the connect timeout and fabricIds. */
static int host_facts(struct cl_host *me, int *connect_ms,
		      uint64_t *max_rails, struct core_auth_key *key)
{
	struct core_config *cfg;
	const struct core_scope *core;
	const char *path;

	if (core_config_open(NULL, &cfg))
		return -ENOMEM;
	core = core_config_core(cfg);
	if (load_key(core, key)) {
		core_config_free(cfg);
		return -EINVAL;
	}
	snprintf(me->host, sizeof(me->host), "%s", core_config_hostname(cfg));
	xdc_facts(cfg, &me->xdc);
	me->dc = (uint64_t)core_scope_get(core, "dc")->num;
	*max_rails = (uint64_t)core_scope_get(core, "max_rails")->num;
	/* 0: nobody set it (neither the file nor the environment) */
	*connect_ms = core_scope_get(core, "connect_timeout_ms")->source ==
			      CORE_SRC_DEFAULT ? 0 :
		(int)core_scope_get(core, "connect_timeout_ms")->num;
	path = core_config_path(cfg);
	snprintf(me->config_path, sizeof(me->config_path), "%s", path);
	if (path[0] == MESHINFO_EMBEDDED_PREFIX)
		cl_sha256_hex(core_default_config, strlen(core_default_config),
			      me->config_sha);
	else
		cl_sha256_file(path, me->config_sha);
	core_config_free(cfg);
	return 0;
}

static int start_host(const struct cl_opts *o, struct cl_node *n,
		      struct cl_host *me, struct core_auth_key *key)
{
	char buf[PATH_MAX];
	uint64_t max_rails = 1;
	int rc;

	memset(me, 0, sizeof(*me));
	me->rank = o->rank;
	/* the plugin reads the same config; a firewalled pair must cost
	 * seconds, not the default minute, unless the user says so */
	if (o->config)
		setenv("NCCL_MESH_CONF", o->config, 1);
	rc = host_facts(me, &n->connect_timeout_ms, &max_rails, key);
	if (rc)
		return rc;
	if (!n->connect_timeout_ms) {
		setenv("NCCL_MESH_CONNECT_TIMEOUT_MS", CL_DEFAULT_CONNECT_MS, 1);
		n->connect_timeout_ms = atoi(CL_DEFAULT_CONNECT_MS);
	}
	/* NCCL's bootstrap needs none of the plugin: checked either way */
	cl_boot_start(me);
	if (cl_node_start(n, o->plugin ? o->plugin :
			  default_plugin(buf, sizeof(buf)), me))
		return 0;	/* said in me->error: the report shows it */
	if (me->plugin_path[0]) {
		char real[PATH_MAX];

		/* "bin/../lib/x.so" and its link name one file: the same */
		if (realpath(me->plugin_path, real))
			snprintf(me->plugin_path, sizeof(me->plugin_path),
				 "%.*s", CL_PATH_MAX - 1, real);
		cl_sha256_file(me->plugin_path, me->plugin_sha);
	}
	for (int r = 0; r < me->nrails; r++)
		me->rails[r].fabric_id = core_fabric_id(me->dc, max_rails,
							(uint64_t)r);
	return 0;
}

/* ---- rank 0: the schedule ---- */

struct coord {
	const struct cl_opts *o;
	struct cl_node *node;
	int *fds;
	struct cl_report *r;
};

static int step_timeout(const struct coord *c, int kind)
{
	int connect = 2 * c->node->connect_timeout_ms / 1000 + 15;

	switch (kind) {
	case CL_CMD_CONNECT:
		return connect;
	case CL_CMD_BURST:
		return 4 * (int)c->o->burst_ms / 1000 + 30;
	default:
		return 30;
	}
}

void cl_lose(struct cl_report *r, int *fds, int rank)
{
	struct cl_host *h = &r->hosts[rank];

	if (h->lost)
		return;
	h->lost = true;
	if (fds[rank] >= 0)
		close(fds[rank]);
	fds[rank] = -1;
	if (!h->error[0])
		snprintf(h->error, sizeof(h->error),
			 "its control connection to rank 0 failed");
}

static void lose(struct coord *c, int rank)
{
	cl_lose(c->r, c->fds, rank);
}

/*
 * A step between two other hosts: each note goes to the other host.
 * CONNECT: both say when their connect finished; BURST and PINGPONG: the
 * receiver says it is ready, so the sender's clock never starts first.
 */
static void forward_notes(struct coord *c, const int rk[2],
			  const struct cl_cmd cmd[2])
{
	bool done[2] = { cmd[0].kind != CL_CMD_CONNECT &&
			 cmd[0].sender == rk[0],
			 cmd[1].kind != CL_CMD_CONNECT &&
			 cmd[1].sender == rk[1] };
	double deadline = perf_now() + step_timeout(c, CL_CMD_CONNECT);

	while ((!done[0] || !done[1]) && perf_now() < deadline) {
		struct pollfd p[2];
		uint32_t v;

		for (int k = 0; k < 2; k++) {
			p[k].fd = done[k] ? -1 : c->fds[rk[k]];
			p[k].events = POLLIN;
			p[k].revents = 0;
		}
		if (poll(p, 2, 200) <= 0)
			continue;
		for (int k = 0; k < 2; k++) {
			if (!p[k].revents)
				continue;
			done[k] = true;
			if (oob_recv_msg(c->fds[rk[k]], PERF_MSG_BARRIER, &v,
					 sizeof(v), 5)) {
				lose(c, rk[k]);
				v = htobe32(CL_NOTE_FAILED);
			}
			if (c->fds[rk[!k]] >= 0)
				oob_send_msg(c->fds[rk[!k]], PERF_MSG_BARRIER,
					     &v, sizeof(v), 5);
		}
	}
}

/* One command to both hosts of a pair, rank 0 running its own part. */
static void step(struct coord *c, const int rk[2], struct cl_cmd cmd[2],
		 struct cl_step s[2])
{
	int kind = cmd[0].kind, local = -1;

	for (int k = 0; k < 2; k++) {
		memset(&s[k], 0, sizeof(s[k]));
		s[k].rc = -EPIPE;
		if (rk[k] == 0)
			local = k;
		else if (c->fds[rk[k]] < 0 ||
			 cl_send_cmd(c->fds[rk[k]], &cmd[k], 10))
			lose(c, rk[k]);
	}
	/* without its peer, rank 0's part would only wait for it */
	if (local >= 0 && c->fds[rk[!local]] >= 0)
		cl_exec(c->node, &cmd[local], &s[local], c->fds[rk[!local]],
			c->fds[rk[!local]]);
	else if (kind == CL_CMD_CONNECT || kind == CL_CMD_BURST ||
		 kind == CL_CMD_PINGPONG)
		forward_notes(c, rk, cmd);
	for (int k = 0; k < 2; k++)
		if (k != local && c->fds[rk[k]] >= 0 &&
		    cl_recv_step(c->fds[rk[k]], &s[k], step_timeout(c, kind)))
			lose(c, rk[k]);
}

static struct cl_pair *pair_at(struct cl_report *r, int rail, int from,
			       int to)
{
	int n = r->nhosts;

	return &r->pairs[((size_t)rail * n + from) * n + to];
}

static void fail(struct cl_pair *p, const char *why)
{
	p->ok = false;
	p->gbps = p->lat_us = p->peak_gbps = p->rtt_us = -1;
	if (!p->reason[0])
		snprintf(p->reason, sizeof(p->reason), "%s", why);
	p->error = cl_classify(p->reason);
}

static void simple_cmds(struct cl_cmd cmd[2], int kind, int rail,
			const int rk[2])
{
	for (int k = 0; k < 2; k++)
		cmd[k] = (struct cl_cmd){ .kind = kind, .rail = rail,
					  .peer = rk[!k] };
}

/* A burst from rk[dir] to rk[!dir]; seconds, or < 0 on failure. */
static double burst(struct coord *c, const int rk[2], int rail, int dir,
		    uint64_t size, uint64_t iters)
{
	struct cl_cmd cmd[2];
	struct cl_step s[2];

	simple_cmds(cmd, CL_CMD_BURST, rail, rk);
	for (int k = 0; k < 2; k++) {
		cmd[k].sender = rk[dir];
		cmd[k].size = size;
		cmd[k].iters = iters;
	}
	step(c, rk, cmd, s);
	if (s[0].rc || s[1].rc)
		return -1;
	/* as meshperf: the slower side's clock */
	return s[0].elapsed > s[1].elapsed ? s[0].elapsed : s[1].elapsed;
}

/*
 * A short probe sizes the burst so a slow link stays within --burst-ms;
 * then up to CL_BURSTS bursts while another fits in half of it.  The Gb/s
 * is all their bytes over all their time, the rate a longer transfer gets:
 * the best of them would pick the top of the burst-to-burst spread (2-4x
 * on a link bound by the hosts' CPUs) and read well above it.  The first
 * burst of a fresh connection runs cold (socket buffers, the data threads'
 * first work) and counts only when no second one fits: where one burst
 * takes the budget, the link, not the ramp, sets its time.  The fastest
 * burst is kept apart for the findings: a host's hiccup is not the link's.
 */
static void measure(struct coord *c, const int rk[2], int rail, int dir,
		    struct cl_pair *p)
{
	const struct cl_opts *o = c->o;
	double budget = o->burst_ms / 1000.0, spent = 0, first = 0;
	uint64_t probe = o->msg_bytes < CL_PROBE ? o->msg_bytes : CL_PROBE;
	uint64_t size = o->msg_bytes, iters = 2, bytes = o->burst_bytes;
	double t = burst(c, rk, rail, dir, probe, 4);
	int n = 0;

	if (t > 0) {
		/* the probe's time counts against --burst-ms too */
		budget = budget > 2 * t ? budget - t : budget / 2;
		if (4.0 * probe / t * budget < (double)bytes)
			bytes = (uint64_t)(4.0 * probe / t * budget);
		if (bytes < 2 * size)
			size = (bytes / 2 + 4095) / 4096 * 4096;
		if (size < 65536)
			size = 65536;
		iters = bytes / size < 2 ? 2 : bytes / size;
		/* repeats only where they are cheap: a fast link's bursts
		 * are short, a slow one's first burst takes the budget */
		for (; n < CL_BURSTS && t > 0 && (!n || spent + t <= budget / 2);
		     n++) {
			t = burst(c, rk, rail, dir, size, iters);
			perf_info("burst %d -> %d rail %d: %" PRIu64 " x %" PRIu64 " B in %.4f s",
				  rk[dir], rk[!dir], rail, iters, size, t);
			if (!n)
				first = t;
			else if (t > 0)
				spent += t;
			if (t > 0 && 8.0 * size * iters / t / 1e9 > p->peak_gbps)
				p->peak_gbps = 8.0 * size * iters / t / 1e9;
		}
	}
	if (t <= 0) {
		fail(p, "connected, but the burst failed (the host's stderr says why)");
		return;
	}
	/* n - 1 timed bursts after the cold one, or the cold one alone */
	p->gbps = 8.0 * size * iters * (n > 1 ? n - 1 : 1) /
		  (n > 1 ? spent : first) / 1e9;
}

/* One ping-pong of `iters` 8-byte rounds, rk[0] starting; false when a
 * side failed. */
static bool pingpong(struct coord *c, const int rk[2], int rail,
		     uint64_t iters, struct cl_step s[2])
{
	struct cl_cmd cmd[2];

	simple_cmds(cmd, CL_CMD_PINGPONG, rail, rk);
	cmd[0].sender = cmd[1].sender = rk[0];
	cmd[0].iters = cmd[1].iters = iters;
	step(c, rk, cmd, s);
	return !s[0].rc && !s[1].rc;
}

/*
 * The pair's round trip and latency, one ping-pong for both ways.  A few
 * rounds first: their shortest is the round trip (rk[0]'s, whose rounds
 * each start at a send), and it bounds the --lat-iters rounds to what
 * fits in --burst-ms, so a long path costs what a short one does (200
 * rounds at 100 ms would be 20 s a pair).  Half a round over the whole
 * run, the patterns' time taken out, is the latency.
 */
static void latency(struct coord *c, const int rk[2], int rail)
{
	struct cl_pair *p[2] = { pair_at(c->r, rail, rk[0], rk[1]),
				 pair_at(c->r, rail, rk[1], rk[0]) };
	double budget = c->o->burst_ms / 1000.0, rtt, net;
	uint64_t iters = c->o->lat_iters;
	struct cl_step s[2];

	if (!pingpong(c, rk, rail, CL_RTT_ROUNDS, s) || !s[0].min_round)
		return;
	rtt = s[0].min_round;
	p[0]->rtt_us = p[1]->rtt_us = rtt * 1e6;
	if (iters > CL_RTT_ROUNDS && iters * rtt > budget)
		iters = budget / rtt > CL_RTT_ROUNDS ?
			(uint64_t)(budget / rtt) : CL_RTT_ROUNDS;
	if (!iters || !pingpong(c, rk, rail, iters, s))
		return;
	if (s[0].min_round && s[0].min_round < rtt)
		p[0]->rtt_us = p[1]->rtt_us = s[0].min_round * 1e6;
	net = s[0].elapsed - s[0].overhead - s[1].overhead;
	p[0]->lat_us = p[1]->lat_us = (net > 0 ? net : 0) / iters / 2 * 1e6;
}

/* Who cannot take part in a pair on this rail, and why ("" if both can). */
static bool unable(struct coord *c, const int rk[2], int rail, char *why,
		   size_t cap)
{
	for (int k = 0; k < 2; k++) {
		const struct cl_host *h = &c->r->hosts[rk[k]];

		if (h->error[0] || h->lost)
			snprintf(why, cap, "host %s (rank %d): %.500s", h->host,
				 rk[k], h->error[0] ? h->error : "lost");
		else if (rail >= h->nrails)
			snprintf(why, cap, "host %s (rank %d) has no rail %d",
				 h->host, rk[k], rail);
		else
			continue;
		return true;
	}
	return false;
}

static void connect_pair(struct coord *c, const int rk[2], int rail)
{
	struct cl_pair *p[2] = { pair_at(c->r, rail, rk[0], rk[1]),
				 pair_at(c->r, rail, rk[1], rk[0]) };
	struct cl_cmd cmd[2];
	struct cl_step s[2];
	char why[CL_REASON_MAX];

	if (unable(c, rk, rail, why, sizeof(why))) {
		fail(p[0], why);
		fail(p[1], why);
		return;
	}
	simple_cmds(cmd, CL_CMD_LISTEN, rail, rk);
	step(c, rk, cmd, s);
	if (s[0].rc || s[1].rc) {
		snprintf(why, sizeof(why), "listen failed on host %s",
			 c->r->hosts[rk[s[0].rc ? 0 : 1]].host);
		fail(p[0], why);
		fail(p[1], why);
		return;
	}
	simple_cmds(cmd, CL_CMD_CONNECT, rail, rk);
	memcpy(cmd[0].handle, s[1].handle, sizeof(cmd[0].handle));
	memcpy(cmd[1].handle, s[0].handle, sizeof(cmd[1].handle));
	step(c, rk, cmd, s);
	for (int k = 0; k < 2; k++) {
		const struct cl_step *from = &s[k], *to = &s[!k];
		int rail_ = p[k]->rail, f = p[k]->from, t = p[k]->to;

		*p[k] = from->path;
		p[k]->rail = rail_, p[k]->from = f, p[k]->to = t;
		p[k]->gbps = p[k]->lat_us = p[k]->peak_gbps = p[k]->rtt_us = -1;
		p[k]->ok = from->send_ok && to->recv_ok && !from->rc &&
			   !to->rc;
		if (p[k]->ok)
			continue;
		if (from->send_ok && !to->recv_reason[0])
			snprintf(p[k]->reason, sizeof(p[k]->reason),
				 "%s", from->rc == -EPIPE ? "a host was lost" :
				 "the connection never reached the peer's accept");
		else if (from->send_ok)
			snprintf(p[k]->reason, sizeof(p[k]->reason), "%s",
				 to->recv_reason);
		fail(p[k], "");
	}
	for (int k = 0; k < 2; k++)
		if (p[k]->ok)
			measure(c, k ? (int[2]){ rk[1], rk[0] } : rk, rail, 0,
				p[k]);
	if (p[0]->ok && p[1]->ok)
		latency(c, rk, rail);
	simple_cmds(cmd, CL_CMD_CLOSE, rail, rk);
	step(c, rk, cmd, s);
}

/* hosts: what each rank told the rendezvous (taken over) */
static int run_rank0(const struct cl_opts *o, struct cl_node *n, int *fds,
		     struct cl_host *hosts)
{
	struct cl_report r = { .nhosts = o->size, .hosts = hosts };
	struct coord c = { o, n, fds, &r };
	double t0 = perf_now();
	int status = 0, nh = o->size;

	for (int k = 0; k < nh; k++)
		if (r.hosts[k].nrails > r.nrails)
			r.nrails = r.hosts[k].nrails;
	r.npairs = r.nrails * nh * nh;
	r.pairs = calloc((size_t)r.npairs + 1, sizeof(*r.pairs));
	if (!r.pairs) {
		cl_report_free(&r);
		return 2;
	}
	for (int rail = 0; rail < r.nrails; rail++)
		for (int i = 0; i < nh; i++)
			for (int j = 0; j < nh; j++) {
				struct cl_pair *p = pair_at(&r, rail, i, j);

				p->rail = rail, p->from = i, p->to = j;
				p->gbps = p->lat_us = p->peak_gbps = -1;
				p->rtt_us = -1;
			}
	/* NCCL's own bootstrap first: without it the job never gets as far
	 * as the plugin, and the check is a few seconds at most */
	cl_boot_run(&r, fds, (int)o->timeout_s);
	for (int rail = 0; rail < r.nrails; rail++)
		for (int i = 0; i < nh; i++)
			for (int j = i + 1; j < nh; j++)
				connect_pair(&c, (int[2]){ i, j }, rail);
	for (int i = 0; i < r.npairs; i++)
		if (r.pairs[i].from != r.pairs[i].to && !r.pairs[i].ok)
			status = 1;
	if (!r.nrails)
		status = 1;	/* no rail anywhere: nothing connects */
	/* the job would hang in ncclCommInitRank whatever the pairs do */
	if (cl_boot_failed(&r))
		status = 3;
	for (int k = 1; k < nh; k++) {
		struct cl_cmd done = { .kind = CL_CMD_DONE, .status = status };

		if (fds[k] >= 0)
			cl_send_cmd(fds[k], &done, 5);
	}
	r.elapsed_s = perf_now() - t0;
	cl_find(&r);
	/* with --json -, stdout is the document's alone */
	cl_print_text(o->json && !strcmp(o->json, "-") ? stderr : stdout, &r);
	if (cl_write_outputs(o, &r))
		status = 2;
	cl_report_free(&r);
	return status;
}

/* Other ranks (joined, our facts told): rank 0's commands until DONE. */
static int run_member(const struct cl_opts *o, struct cl_node *n, int fd)
{
	struct cl_cmd cmd;
	struct cl_step s;

	/* rank 0 may be busy with other pairs for a long while */
	while (!cl_recv_cmd(fd, &cmd, 24 * 3600)) {
		if (cmd.kind == CL_CMD_BOOT) {
			if (cl_boot_member(fd, &cmd, o->rank, o->size,
					   (int)o->timeout_s))
				break;
			continue;
		}
		cl_exec(n, &cmd, &s, fd, fd);
		if (cmd.kind == CL_CMD_DONE)
			return cmd.status;
		if (cl_send_step(fd, &s, 30))
			break;
	}
	fprintf(stderr, "meshinfo[%d]: lost rank 0 before the end\n", o->rank);
	return 2;
}

int meshinfo_cluster_main(int argc, char **argv)
{
	struct cl_opts o = {
		.rank = -1, .size = -1, .burst_ms = 500,
		.burst_bytes = 64ULL << 20, .msg_bytes = 4ULL << 20,
		.lat_iters = 200, .timeout_s = 60,
	};
	/* static: a kilobyte, and wiped before the exit */
	static struct core_auth_key key;
	struct cl_node node = { .o = &o };
	struct cl_host me, *hosts = NULL;
	int status, *fds, rc = 0;

	perf_hooks_set(&cl_hooks);
	status = cl_parse_args(argc, argv, &o);
	if (status >= 0)
		return status;
	cl_rank = o.rank;
	/* a peer or dot that dies must fail a write, not end us */
	signal(SIGPIPE, SIG_IGN);
	cl_verbose = o.verbose;
	node.rank = o.rank;
	if (o.msg_bytes > o.burst_bytes)
		o.msg_bytes = o.burst_bytes;
	fds = calloc((size_t)o.size, sizeof(*fds));
	if (o.rank == 0)
		hosts = calloc((size_t)o.size, sizeof(*hosts));
	if (!fds || (o.rank == 0 && !hosts) ||
	    (rc = start_host(&o, &node, &me, &key))) {
		if (rc != -EINVAL)	/* a bad key file is said already */
			fprintf(stderr, "meshinfo: out of memory\n");
		free(fds);
		free(hosts);
		return 2;
	}
	o.key = key.len ? &key : NULL;
	if (me.error[0])
		say("WARN", me.error);
	if (hosts)
		hosts[0] = me;
	if (cl_rdv_connect(&o, &me, fds, hosts)) {
		status = 2;
	} else if (o.rank == 0) {
		status = run_rank0(&o, &node, fds, hosts);
		hosts = NULL;	/* the report's, freed with it */
	} else {
		status = run_member(&o, &node, fds[0]);
	}
	for (int k = 0; k < o.size; k++)
		if (fds[k] >= 0)
			close(fds[k]);
	free(fds);
	free(hosts);
	explicit_bzero(&key, sizeof(key));
	cl_boot_stop();
	cl_node_stop(&node);
	free(cap_buf);
	return status;
}
