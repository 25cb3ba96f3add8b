/* SPDX-License-Identifier: MIT */
/*
 * What the measured matrix says is wrong: pairs that do not connect, one
 * way or both, a pair far slower than the others of its path class,
 * hosts whose config or plugin differ from rank 0's, rails whose reported
 * speed disagrees with what was measured, paths longer than tcp-xdc's
 * window reaches.  And the NCCL environment a job on these hosts needs.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

/* Below this share of its class's median a pair is degraded. */
#define CL_DEGRADED 0.5
/* Directions apart by more than this factor are asymmetric. */
#define CL_ASYMMETRIC 2.0
/* A rail's reported speed more than this factor above the measure. */
#define CL_SPEED_HIGH 4.0
/* Measurement noise allowed above a reported speed. */
#define CL_SPEED_SLACK 1.05

static const struct cl_pair *at(const struct cl_report *r, int rail, int i,
				int j)
{
	return &r->pairs[((size_t)rail * r->nhosts + i) * r->nhosts + j];
}

static struct cl_finding *add(struct cl_report *r, const char *kind,
			      int rail, int from, int to, const char *fmt,
			      ...) __attribute__((format(printf, 6, 7)));

static struct cl_finding *add(struct cl_report *r, const char *kind,
			      int rail, int from, int to, const char *fmt,
			      ...)
{
	struct cl_finding *f = realloc(r->findings, (r->nfindings + 1) *
						    sizeof(*f));
	va_list ap;

	if (!f)
		return NULL;
	r->findings = f;
	f += r->nfindings++;
	memset(f, 0, sizeof(*f));
	f->kind = kind;
	f->rail = rail, f->from = from, f->to = to;
	va_start(ap, fmt);
	vsnprintf(f->text, sizeof(f->text), fmt, ap);
	va_end(ap);
	if (from >= 0 && (f->hosts = malloc(2 * sizeof(int)))) {
		f->hosts[0] = from;
		f->hosts[1] = to;
		f->nhosts = 2;
	}
	return f;
}

static void add_host(struct cl_finding *f, int rank)
{
	int *h = f ? realloc(f->hosts, (f->nhosts + 1) * sizeof(*h)) : NULL;

	if (h) {
		f->hosts = h;
		h[f->nhosts++] = rank;
	}
}

const char *cl_label(const struct cl_report *r, int k, char *buf,
		     size_t cap)
{
	for (int i = 0; i < r->nhosts; i++)
		if (i != k && !strcmp(r->hosts[i].host, r->hosts[k].host)) {
			snprintf(buf, cap, "%s#%d", r->hosts[k].host, k);
			return buf;
		}
	return r->hosts[k].host;
}

/* Up to four labels at once in one message. */
static const char *name(const struct cl_report *r, int rank)
{
	static char bufs[4][CL_NAME_MAX + 16];
	static int next;

	next = (next + 1) % 4;
	return cl_label(r, rank, bufs[next], sizeof(bufs[next]));
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * Links are judged by each pair's fastest burst, not by its rate over all
 * of them: on hosts that bound the transfer themselves the bursts of one
 * pair spread by 2-4x, and a hiccup is the host's, not the cable's.
 */

/* Median of the fastest bursts of the rail's connected pairs of a class;
 * 0: none. */
static double median(const struct cl_report *r, int rail, const char *cls)
{
	int n = r->nhosts, m = 0;
	double *v = malloc((size_t)n * n * sizeof(*v)), med;

	if (!v)
		return 0;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			const struct cl_pair *p = at(r, rail, i, j);

			if (i != j && p->ok && p->peak_gbps >= 0 &&
			    !strcmp(p->cls, cls))
				v[m++] = p->peak_gbps;
		}
	qsort(v, (size_t)m, sizeof(*v), cmp_dbl);
	med = !m ? 0 : m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
	free(v);
	return med;
}

static bool degraded(const struct cl_report *r, const struct cl_pair *p)
{
	double med = p->ok && p->peak_gbps >= 0 ?
		median(r, p->rail, p->cls) : 0;

	return med > 0 && p->peak_gbps < CL_DEGRADED * med;
}

static void find_pair(struct cl_report *r, int rail, int i, int j)
{
	const struct cl_pair *a = at(r, rail, i, j), *b = at(r, rail, j, i);
	const char *x = name(r, i), *y = name(r, j);
	bool da = degraded(r, a), db = degraded(r, b);

	if (!a->ok && !b->ok) {
		add(r, "unreachable", rail, i, j,
		    "rail %d: %s <-> %s do not connect: %s -> %s %s (%s)%s%s%s",
		    rail, x, y, x, y, a->error, a->reason,
		    strcmp(a->reason, b->reason) ? "; the other way " : "",
		    strcmp(a->reason, b->reason) ? b->error : "",
		    strcmp(a->reason, b->reason) ? "" : "; the same the other way");
	} else if (!a->ok || !b->ok) {
		const struct cl_pair *bad = a->ok ? b : a;

		add(r, "asymmetric", rail, bad->from, bad->to,
		    "rail %d: %s -> %s connects, %s -> %s does not: %s (%s)",
		    rail, name(r, bad->to), name(r, bad->from),
		    name(r, bad->from), name(r, bad->to), bad->error,
		    bad->reason);
	} else if (da || db) {
		const struct cl_pair *slow = da ? a : b;

		add(r, "degraded", rail, slow->from, slow->to,
		    "rail %d: %s -> %s at best %.2f Gb/s%s, below %.0f%% of the %s median %.2f Gb/s",
		    rail, name(r, slow->from), name(r, slow->to),
		    slow->peak_gbps,
		    da && db ? " (and the other way)" : "",
		    CL_DEGRADED * 100, slow->cls, median(r, rail, slow->cls));
	} else if (a->peak_gbps > 0 && b->peak_gbps > 0 &&
		   (a->peak_gbps > CL_ASYMMETRIC * b->peak_gbps ||
		    b->peak_gbps > CL_ASYMMETRIC * a->peak_gbps)) {
		const struct cl_pair *slow = a->peak_gbps < b->peak_gbps ? a : b;
		const struct cl_pair *fast = slow == a ? b : a;

		add(r, "asymmetric", rail, slow->from, slow->to,
		    "rail %d: %s -> %s at best %.2f Gb/s but %.2f Gb/s the other way",
		    rail, name(r, slow->from), name(r, slow->to),
		    slow->peak_gbps, fast->peak_gbps);
	}
}

/* Hosts whose hash differs from rank 0's, in one finding. */
static void find_differs(struct cl_report *r, const char *kind,
			 size_t offset, const char *what)
{
	const char *ref = (const char *)&r->hosts[0] + offset;
	struct cl_finding *f = NULL;

	for (int k = 1; k < r->nhosts; k++) {
		const char *h = (const char *)&r->hosts[k] + offset;

		if (!h[0] || !ref[0] || !strcmp(h, ref))
			continue;
		if (!f)
			f = add(r, kind, -1, -1, -1,
				"%s differs from rank 0's (%s, sha256 %.12s):",
				what, r->hosts[0].host, ref);
		if (!f)
			return;
		add_host(f, k);
		snprintf(f->text + strlen(f->text),
			 sizeof(f->text) - strlen(f->text), " %s (%.12s)",
			 name(r, k), h);
	}
}

/* The fastest burst on a rail with the host at either end. */
static double best_of(const struct cl_report *r, int rail, int h)
{
	double best = 0;

	for (int k = 0; k < r->nhosts; k++) {
		if (k == h)
			continue;
		if (at(r, rail, h, k)->peak_gbps > best)
			best = at(r, rail, h, k)->peak_gbps;
		if (at(r, rail, k, h)->peak_gbps > best)
			best = at(r, rail, k, h)->peak_gbps;
	}
	return best;
}

static void find_rail_speed(struct cl_report *r, int rail)
{
	struct cl_finding *low = NULL, *high = NULL;
	double best_all = 0;

	for (int h = 0; h < r->nhosts; h++)
		if (best_of(r, rail, h) > best_all)
			best_all = best_of(r, rail, h);
	for (int h = 0; h < r->nhosts; h++) {
		const struct cl_host *x = &r->hosts[h];
		double best = best_of(r, rail, h);
		double told = rail < x->nrails ?
			x->rails[rail].speed_mbps / 1000.0 : 0;
		struct cl_finding **f;

		if (best <= 0 || told <= 0)
			continue;
		if (told * CL_SPEED_SLACK < best)
			f = &low;
		else if (told > CL_SPEED_HIGH * best)
			f = &high;
		else
			continue;
		if (!*f)
			*f = add(r, "rail-speed", rail, -1, -1,
				 "rail %d: the speed told to NCCL is %s what was measured (best %.2f Gb/s):",
				 rail, f == &low ? "below" : "more than 4x",
				 best_all);
		if (!*f)
			return;
		add_host(*f, h);
		snprintf((*f)->text + strlen((*f)->text),
			 sizeof((*f)->text) - strlen((*f)->text),
			 " %s %s %.1f Gb/s (measured %.2f)", name(r, h),
			 x->rails[rail].name, told, best);
	}
}

/* Appends to a finding's text, cut where it is full. */
static void append(struct cl_finding *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void append(struct cl_finding *f, const char *fmt, ...)
{
	size_t len = strlen(f->text);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->text + len, sizeof(f->text) - len, fmt, ap);
	va_end(ap);
}

#define BOOT_FIX "set NCCL_SOCKET_IFNAME on every host to an interface all hosts reach (a management network or VPN), see docs/deploy.md"

/*
 * NCCL's own bootstrap: a host without an interface for it (NCCL's init
 * fails there), and per host whose address others cannot reach, who
 * cannot and how (NCCL's init hangs).  One finding per such host: when
 * a DC cannot reach another, each of its hosts is one line, not each pair.
 */
static void find_bootstrap(struct cl_report *r)
{
	int n = r->nhosts;

	for (int k = 0; k < n; k++) {
		const struct cl_host *h = &r->hosts[k];

		if (!h->lost && h->boot.error[0])
			add_host(add(r, "bootstrap", -1, -1, -1,
				     "NCCL's init will fail on %s: %s; %s",
				     name(r, k), h->boot.error, BOOT_FIX), k);
	}
	for (int j = 0; r->boot && j < n; j++) {
		const struct cl_boot_host *b = &r->hosts[j].boot;
		struct cl_finding *f = NULL;
		int nfrom = 0, last = -1;

		for (int i = 0; i < n; i++)
			if (r->boot[(size_t)i * n + j].status > CL_BOOT_OK) {
				nfrom++;
				last = i;
			}
		if (!nfrom)
			continue;
		f = add(r, "bootstrap", -1, nfrom == 1 ? last : -1,
			nfrom == 1 ? j : -1,
			"NCCL's init will hang in ncclCommInitRank: %s's bootstrap address %s on %s (%s) is not reached from",
			name(r, j), b->addr, b->ifname, b->rule);
		if (!f)
			return;
		if (nfrom > 1) {
			f->to = j;	/* the pairs all end here */
			add_host(f, j);
		}
		for (int i = 0, said = 0; i < n; i++) {
			const struct cl_boot_result *x =
				&r->boot[(size_t)i * n + j];

			if (x->status <= CL_BOOT_OK)
				continue;
			if (nfrom > 1)
				add_host(f, i);
			/* the first one's detail in full, the others' class */
			if (said++ < 8)
				append(f, "%s %s (%s%s%s)", said > 1 ? "," : "",
				       name(r, i), cl_boot_status_text(x->status),
				       said == 1 ? ": " : "",
				       said == 1 ? x->detail : "");
			else if (said == 9)
				append(f, " and %d more", nfrom - 8);
		}
		append(f, "; %s", BOOT_FIX);
	}
}

/* ---- distance: round trips, bandwidth-delay products, windows ---- */

const char *cl_rtt_text(double us, char *buf, size_t cap)
{
	if (us < 1000)
		snprintf(buf, cap, "%.1f us", us);
	else
		snprintf(buf, cap, "%.2f ms", us / 1000);
	return buf;
}

const char *cl_bytes_text(uint64_t n, char *buf, size_t cap)
{
	if (n >= 10ULL << 20)
		snprintf(buf, cap, "%.0f MiB", n / 1048576.0);
	else if (n >= 1ULL << 20)
		snprintf(buf, cap, "%.1f MiB", n / 1048576.0);
	else if (n >= 1ULL << 10)
		snprintf(buf, cap, "%.0f KiB", n / 1024.0);
	else
		snprintf(buf, cap, "%llu B", (unsigned long long)n);
	return buf;
}

/* The speed both ends of a rail tell NCCL, the slower one's; 0 unknown. */
static int rail_mbps(const struct cl_report *r, const struct cl_pair *p)
{
	const struct cl_host *a = &r->hosts[p->from], *b = &r->hosts[p->to];
	int x = p->rail < a->nrails ? a->rails[p->rail].speed_mbps : 0;
	int y = p->rail < b->nrails ? b->rails[p->rail].speed_mbps : 0;

	return x <= 0 ? (y > 0 ? y : 0) : y <= 0 || x < y ? x : y;
}

/* One stream's share of what a connection from a to b keeps in flight:
 * a's send buffer, and the window b opens, about half its receive
 * buffer (the rest is the kernel's overhead), as tcp-xdc counts them. */
static uint64_t stream_carry(const struct cl_xdc *a, const struct cl_xdc *b)
{
	return a->send_max < b->recv_max / 2 ? a->send_max : b->recv_max / 2;
}

/* A tcp-xdc connection's streams: as set, or the most auto grows to. */
static int xdc_streams(const struct cl_xdc *x)
{
	return x->streams > 0 ? x->streams : x->streams_max;
}

/* What a direct tcp-xdc connection this way keeps in flight at most; 0
 * where a host did not say or another module carries the pair. */
static uint64_t inflight_max(const struct cl_report *r,
			     const struct cl_pair *p)
{
	const struct cl_xdc *a = &r->hosts[p->from].xdc;
	const struct cl_xdc *b = &r->hosts[p->to].xdc;
	uint64_t n;

	if (!p->ok || p->nrelays || strcmp(p->module, "tcp-xdc") ||
	    !a->known || !b->known)
		return 0;
	/* each factor bounded on the wire: no overflow */
	n = (uint64_t)xdc_streams(a) * stream_carry(a, b);
	return a->keep_max && a->keep_max < n ? a->keep_max : n;
}

/* A product in bytes, from figures the hosts sent: whatever they are, no
 * more than CL_XDC_BYTES_MAX, so the cast is defined and the sums hold. */
static uint64_t product(double bits_per_s, double rtt_s)
{
	double b = bits_per_s * rtt_s / 8;

	return b > 0 ? (b < CL_XDC_BYTES_MAX ? (uint64_t)b : CL_XDC_BYTES_MAX) :
		       0;
}

/* Each pair's products, from its round trip (0 where it has none). */
static void distance(struct cl_report *r)
{
	for (int i = 0; i < r->npairs; i++) {
		struct cl_pair *p = &r->pairs[i];
		double rtt_s = p->rtt_us > 0 ? p->rtt_us / 1e6 : 0;

		if (p->from == p->to || !p->ok)
			continue;
		p->bdp_rail = product(rail_mbps(r, p) * 1e6, rtt_s);
		p->bdp_measured = p->gbps > 0 ? product(p->gbps * 1e9, rtt_s) :
						0;
		p->inflight_max = inflight_max(r, p);
	}
}

/* Whether the way's window is short of its path. */
static bool short_window(const struct cl_pair *p)
{
	return p->inflight_max && p->bdp_rail > p->inflight_max;
}

/* What bounds a way's window, and what to raise, in words. */
static void window_cause(const struct cl_report *r, const struct cl_pair *p,
			 char *buf, size_t cap)
{
	const struct cl_xdc *a = &r->hosts[p->from].xdc;
	const struct cl_xdc *b = &r->hosts[p->to].xdc;
	bool by_send = stream_carry(a, b) == a->send_max;
	bool set = by_send ? a->send_set : b->recv_set;
	char carry[32], rcv[32], streams[64], limit[256], fix[96];

	if (a->keep_max && a->keep_max == p->inflight_max) {
		snprintf(buf, cap, "the copies %s's window may keep, %s; raise "
			 "tcp-xdc.window_max, memory_max or window there",
			 name(r, p->from),
			 cl_bytes_text(a->keep_max, carry, sizeof(carry)));
		return;
	}
	cl_bytes_text(stream_carry(a, b), carry, sizeof(carry));
	cl_bytes_text(b->recv_max, rcv, sizeof(rcv));
	snprintf(streams, sizeof(streams), a->streams > 0 ? "%d stream%s" :
		 "%d streams (tcp-xdc.streams auto at most)", xdc_streams(a),
		 xdc_streams(a) == 1 ? "" : "s");
	if (by_send)
		snprintf(limit, sizeof(limit), "the most of %s's send buffer "
			 "(%s)", name(r, p->from), set ? "tcp-xdc.sndbuf" :
			 "net.ipv4.tcp_wmem's maximum");
	else
		snprintf(limit, sizeof(limit), "the window half of %s's "
			 "receive buffer opens (%s, %s)", name(r, p->to),
			 set ? "tcp-xdc.rcvbuf" : "net.ipv4.tcp_rmem's maximum",
			 rcv);
	snprintf(fix, sizeof(fix), "%s%s", set ? (by_send ?
		 "tcp-xdc.sndbuf, or set it to 0 for autotuning" :
		 "tcp-xdc.rcvbuf, or set it to 0 for autotuning") : "it",
		 a->streams > 0 ? ", or tcp-xdc.streams" : "");
	snprintf(buf, cap, "%s x %s, %s; raise %s", streams, carry, limit,
		 fix);
}

/*
 * A path whose bandwidth-delay product at the rail's speed is more than
 * what a tcp-xdc connection keeps in flight: at that round trip it moves
 * at most window / RTT, whatever the link.  One finding per pair, about
 * the way with the shorter window.
 */
static void find_window(struct cl_report *r, int rail, int i, int j)
{
	const struct cl_pair *a = at(r, rail, i, j), *b = at(r, rail, j, i);
	const struct cl_pair *p = short_window(a) &&
		(!short_window(b) || a->inflight_max <= b->inflight_max) ? a :
		short_window(b) ? b : NULL;
	char rtt[32], bdp[32], win[32], cause[512], measured[48] = "";

	if (!p)
		return;
	window_cause(r, p, cause, sizeof(cause));
	if (p->gbps >= 0)
		snprintf(measured, sizeof(measured), " (measured %.2f Gb/s)",
			 p->gbps);
	add(r, "window", rail, p->from, p->to,
	    "rail %d: %s -> %s%s: round trip %s; at the rail's %.1f Gb/s the path holds %s in flight (its bandwidth-delay product), but a tcp-xdc connection keeps at most %s, %.2f Gb/s at this round trip%s; that is %s",
	    rail, name(r, p->from), name(r, p->to),
	    short_window(a) && short_window(b) ? " (and the other way)" : "",
	    cl_rtt_text(p->rtt_us, rtt, sizeof(rtt)),
	    rail_mbps(r, p) / 1000.0,
	    cl_bytes_text(p->bdp_rail, bdp, sizeof(bdp)),
	    cl_bytes_text(p->inflight_max, win, sizeof(win)),
	    8.0 * p->inflight_max / (p->rtt_us / 1e6) / 1e9, measured, cause);
}

static void set_env(struct cl_report *r, const char *k, const char *v)
{
	if (r->nenv >= 8 || !v || !*v)
		return;
	snprintf(r->env[r->nenv][0], CL_PATH_MAX, "%s", k);
	snprintf(r->env[r->nenv][1], CL_PATH_MAX, "%s", v);
	r->nenv++;
}

/* What a job on these hosts sets, as rank 0 ran it; nothing secret. */
static void find_env(struct cl_report *r)
{
	const struct cl_host *h0 = &r->hosts[0];
	bool same_plugin = h0->plugin_path[0] != '\0';

	for (int k = 1; k < r->nhosts; k++)
		same_plugin &= !strcmp(r->hosts[k].plugin_path,
				       h0->plugin_path);
	set_env(r, "NCCL_NET", h0->net_name[0] ? h0->net_name : "Mesh");
	set_env(r, "NCCL_NET_PLUGIN", same_plugin ? h0->plugin_path : "mesh");
	if (h0->config_path[0] != '<' &&
	    strcmp(h0->config_path, "/etc/nccl-mesh.conf"))
		set_env(r, "NCCL_MESH_CONF", h0->config_path);
	set_env(r, "NCCL_MESH_MODULE_PATH", getenv("NCCL_MESH_MODULE_PATH"));
	set_env(r, "NCCL_MESH_AUTH_KEY_FILE",
		getenv("NCCL_MESH_AUTH_KEY_FILE"));
	/* where NCCL's bootstrap goes: what the check above ran with */
	set_env(r, "NCCL_SOCKET_IFNAME", getenv("NCCL_SOCKET_IFNAME"));
	set_env(r, "NCCL_SOCKET_FAMILY", getenv("NCCL_SOCKET_FAMILY"));
}

void cl_find(struct cl_report *r)
{
	distance(r);
	find_bootstrap(r);
	for (int rail = 0; rail < r->nrails; rail++)
		for (int i = 0; i < r->nhosts; i++)
			for (int j = i + 1; j < r->nhosts; j++) {
				find_pair(r, rail, i, j);
				find_window(r, rail, i, j);
			}
	find_differs(r, "config-differs", offsetof(struct cl_host, config_sha),
		     "the config");
	find_differs(r, "plugin-differs", offsetof(struct cl_host, plugin_sha),
		     "the plugin library");
	for (int rail = 0; rail < r->nrails; rail++)
		find_rail_speed(r, rail);
	find_env(r);
}

void cl_report_free(struct cl_report *r)
{
	for (int i = 0; i < r->nfindings; i++)
		free(r->findings[i].hosts);
	free(r->findings);
	free(r->boot);
	free(r->pairs);
	free(r->hosts);
	memset(r, 0, sizeof(*r));
}
