/* SPDX-License-Identifier: MIT */
/*
 * The cluster report three ways: a text matrix for people, JSON for
 * scripts (docs/meshinfo-cluster.schema.json), and Graphviz DOT for the
 * picture, rendered to SVG or PNG by Graphviz's `dot` when it is there.
 */
#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "meshinfo.h"

extern char **environ;

static const struct cl_pair *at(const struct cl_report *r, int rail, int i,
				int j)
{
	return &r->pairs[((size_t)rail * r->nhosts + i) * r->nhosts + j];
}

static char class_letter(const char *cls)
{
	return !strcmp(cls, "same-DC") ? 'S' : !strcmp(cls, "cross-DC") ? 'X' :
	       !strcmp(cls, "relayed") ? 'R' : '?';
}

static const char *rail_name(const struct cl_report *r, int rail)
{
	for (int k = 0; k < r->nhosts; k++)
		if (rail < r->hosts[k].nrails)
			return r->hosts[k].rails[rail].name;
	return "?";
}

/* ---- text ---- */

static void text_hosts(FILE *out, const struct cl_report *r)
{
	char b[CL_NAME_MAX + 16];

	fprintf(out, "\nhosts\n  %4s  %-20s %3s  %-12s  %-12s  %s\n", "rank",
		"host", "dc", "config", "plugin", "rails (speed told to NCCL)");
	for (int k = 0; k < r->nhosts; k++) {
		const struct cl_host *h = &r->hosts[k];

		fprintf(out, "  %4d  %-20s %3llu  %-12.12s  %-12.12s ", k,
			cl_label(r, k, b, sizeof(b)), (unsigned long long)h->dc,
			h->config_sha[0] ? h->config_sha : "-",
			h->plugin_sha[0] ? h->plugin_sha : "-");
		for (int i = 0; i < h->nrails; i++)
			fprintf(out, " %s %.1f Gb/s", h->rails[i].name,
				h->rails[i].speed_mbps / 1000.0);
		if (h->error[0] || h->lost)
			fprintf(out, " [%s]", h->error[0] ? h->error : "lost");
		fputc('\n', out);
	}
}

/* Tried and reached, of the bootstrap's ordered pairs. */
static void boot_counts(const struct cl_report *r, int *tried, int *ok)
{
	*tried = *ok = 0;
	for (size_t i = 0; r->boot && i < (size_t)r->nhosts * r->nhosts; i++) {
		*tried += r->boot[i].status != CL_BOOT_UNTRIED;
		*ok += r->boot[i].status == CL_BOOT_OK;
	}
}

static void text_boot(FILE *out, const struct cl_report *r)
{
	char a[CL_NAME_MAX + 16], b[CL_NAME_MAX + 16];
	int n = r->nhosts, tried, ok;

	boot_counts(r, &tried, &ok);
	fprintf(out, "\nNCCL bootstrap (plain TCP to the address NCCL advertises, before any plugin): %d of %d pairs connect, %.1f s\n",
		ok, tried, r->boot_elapsed_s);
	fprintf(out, "  %4s  %-20s %-16s %-28s %s\n", "rank", "host",
		"interface", "address", "chosen by");
	for (int k = 0; k < n; k++) {
		const struct cl_boot_host *h = &r->hosts[k].boot;

		fprintf(out, "  %4d  %-20s %-16s %-28s %s\n", k,
			cl_label(r, k, a, sizeof(a)), h->ifname[0] ? h->ifname :
			"-", h->addr[0] ? h->addr : "-",
			h->error[0] ? h->error : h->rule);
	}
	for (int i = 0; r->boot && i < n; i++)
		for (int j = 0; j < n; j++) {
			const struct cl_boot_result *x = &r->boot[(size_t)i * n + j];

			if (x->status <= CL_BOOT_OK)
				continue;
			fprintf(out, "  %s -> %s  %s:%d on %s  FAILED %s: %s\n",
				cl_label(r, i, a, sizeof(a)),
				cl_label(r, j, b, sizeof(b)),
				r->hosts[j].boot.addr, r->hosts[j].boot.port,
				r->hosts[j].boot.ifname,
				cl_boot_status_text(x->status), x->detail);
		}
}

static void text_matrix(FILE *out, const struct cl_report *r, int rail)
{
	char b[CL_NAME_MAX + 16];

	fprintf(out, "\nrail %d (%s): Gb/s from row to column\n  %-20s", rail,
		rail_name(r, rail), "");
	for (int j = 0; j < r->nhosts; j++)
		fprintf(out, " %10.10s", cl_label(r, j, b, sizeof(b)));
	fputc('\n', out);
	for (int i = 0; i < r->nhosts; i++) {
		fprintf(out, "  %-20s", cl_label(r, i, b, sizeof(b)));
		for (int j = 0; j < r->nhosts; j++) {
			const struct cl_pair *p = at(r, rail, i, j);

			if (i == j)
				fprintf(out, " %10s", "-");
			else if (!p->ok)
				fprintf(out, " %10s", "FAIL");
			else if (p->gbps < 0)
				fprintf(out, " %8s %c", "?",
					class_letter(p->cls));
			else
				fprintf(out, " %8.2f %c", p->gbps,
					class_letter(p->cls));
		}
		fputc('\n', out);
	}
	fprintf(out, "  S same-DC, X cross-DC, R relayed, FAIL did not connect\n");
}

/* A way's round trip, its product at the rail's speed and what its
 * window keeps in flight: "  rtt 20.31 ms  bdp 3.0 MiB, window 512 KiB". */
static void text_distance(FILE *out, const struct cl_pair *p)
{
	char b[32];

	if (p->rtt_us < 0)
		return;
	fprintf(out, "  rtt %s", cl_rtt_text(p->rtt_us, b, sizeof(b)));
	if (p->bdp_rail)
		fprintf(out, "  bdp %s", cl_bytes_text(p->bdp_rail, b,
						       sizeof(b)));
	if (p->inflight_max)
		fprintf(out, "%swindow %s", p->bdp_rail ? ", " : "  ",
			cl_bytes_text(p->inflight_max, b, sizeof(b)));
}

static void text_pairs(FILE *out, const struct cl_report *r, int rail)
{
	char a[CL_NAME_MAX + 16], b[CL_NAME_MAX + 16];

	for (int i = 0; i < r->nhosts; i++)
		for (int j = 0; j < r->nhosts; j++) {
			const struct cl_pair *p = at(r, rail, i, j);

			if (i == j)
				continue;
			fprintf(out, "  %s -> %s  ", cl_label(r, i, a, sizeof(a)),
				cl_label(r, j, b, sizeof(b)));
			if (!p->ok) {
				fprintf(out, "FAILED %s: %s\n", p->error,
					p->reason);
				continue;
			}
			fprintf(out, "%s %s ", p->cls, p->module);
			for (int k = 0; k < p->ndevices; k++)
				fprintf(out, "%s%s%s", k ? "+" : "over ",
					p->devices[k],
					k + 1 == p->ndevices ? " " : "");
			if (p->nrelays) {
				fprintf(out, "via");
				for (int k = 0; k < p->nrelays; k++)
					fprintf(out, " %s", p->relays[k]);
				fprintf(out, " to %s", p->remote);
			} else {
				fprintf(out, "%s -> %s", p->local, p->remote);
			}
			if (p->cipher[0])
				fprintf(out, "  %s", strcmp(p->cipher, "none") ?
					p->cipher : "clear");
			if (p->gbps >= 0)
				fprintf(out, "  %.2f Gb/s", p->gbps);
			if (p->lat_us >= 0)
				fprintf(out, "  %.1f us", p->lat_us);
			text_distance(out, p);
			fputc('\n', out);
		}
}

void cl_print_text(FILE *out, const struct cl_report *r)
{
	int total = 0, ok = 0;

	for (int i = 0; i < r->npairs; i++)
		if (r->pairs[i].from != r->pairs[i].to) {
			total++;
			ok += r->pairs[i].ok;
		}
	fprintf(out, "meshinfo --cluster: %d hosts, %d rail%s, %d of %d pairs connected, %.1f s\n",
		r->nhosts, r->nrails, r->nrails == 1 ? "" : "s", ok, total,
		r->elapsed_s);
	text_hosts(out, r);
	text_boot(out, r);
	for (int rail = 0; rail < r->nrails; rail++) {
		text_matrix(out, r, rail);
		text_pairs(out, r, rail);
	}
	fprintf(out, "\nfindings\n");
	if (!r->nfindings)
		fprintf(out, "  none\n");
	for (int i = 0; i < r->nfindings; i++)
		fprintf(out, "  %s: %s\n", r->findings[i].kind,
			r->findings[i].text);
	fprintf(out, "\nNCCL environment for a job on these hosts\n");
	for (int i = 0; i < r->nenv; i++)
		fprintf(out, "  export %s=%s\n", r->env[i][0], r->env[i][1]);
}

/* ---- JSON ---- */

static void json_num(struct json *j, const char *key, double v, bool valid)
{
	json_key(j, key);
	/* JSON has no infinity or NaN */
	if (valid && isfinite(v))
		fprintf(j->out, "%.3f", v);
	else
		fputs("null", j->out);
}

static void json_rank(struct json *j, const char *key, int v)
{
	json_key(j, key);
	if (v >= 0)
		fprintf(j->out, "%d", v);
	else
		fputs("null", j->out);
}

/* A byte count, or null where it is not known (0). */
static void json_bytes(struct json *j, const char *key, uint64_t v)
{
	if (v)
		json_u64(j, key, v);
	else
		json_str(j, key, NULL);
}

/* What a tcp-xdc connection of the host keeps in flight (cl_xdc). */
static void json_xdc(struct json *j, const struct cl_xdc *x)
{
	if (!x->known) {
		json_str(j, "tcp_xdc", NULL);
		return;
	}
	json_open(j, "tcp_xdc", '{');
	json_int(j, "streams", x->streams);
	json_int(j, "streams_max", x->streams_max);
	json_bytes(j, "send_buffer_max", x->send_max);
	json_str(j, "send_buffer_by", x->send_set ? "sndbuf" : "tcp_wmem");
	json_bytes(j, "recv_buffer_max", x->recv_max);
	json_str(j, "recv_buffer_by", x->recv_set ? "rcvbuf" : "tcp_rmem");
	json_bytes(j, "keep_max", x->keep_max);
	json_close(j, '}');
}

static void json_host(struct json *j, const struct cl_host *h)
{
	json_open(j, NULL, '{');
	json_int(j, "rank", h->rank);
	json_str(j, "host", h->host);
	json_u64(j, "dc", h->dc);
	json_str(j, "config_sha256", h->config_sha[0] ? h->config_sha : NULL);
	json_str(j, "plugin_sha256", h->plugin_sha[0] ? h->plugin_sha : NULL);
	json_open(j, "bootstrap", '{');
	json_str(j, "interface", h->boot.ifname[0] ? h->boot.ifname : NULL);
	json_str(j, "address", h->boot.addr[0] ? h->boot.addr : NULL);
	json_key(j, "port");
	if (h->boot.addr[0] && h->boot.port)
		fprintf(j->out, "%d", h->boot.port);
	else
		fputs("null", j->out);
	json_str(j, "chosen_by", h->boot.rule[0] ? h->boot.rule : NULL);
	json_str(j, "error", h->boot.error[0] ? h->boot.error : NULL);
	json_close(j, '}');
	json_open(j, "rails", '[');
	for (int i = 0; i < h->nrails; i++) {
		json_open(j, NULL, '{');
		json_str(j, "name", h->rails[i].name);
		json_u64(j, "fabric_id", h->rails[i].fabric_id);
		json_int(j, "speed_mbps", h->rails[i].speed_mbps);
		json_close(j, '}');
	}
	json_close(j, ']');
	json_xdc(j, &h->xdc);
	json_close(j, '}');
}

static void json_pair(struct json *j, const struct cl_pair *p)
{
	json_open(j, NULL, '{');
	json_int(j, "rail", p->rail);
	json_int(j, "from", p->from);
	json_int(j, "to", p->to);
	json_bool(j, "ok", p->ok);
	json_str(j, "class", p->ok ? p->cls : NULL);
	json_str(j, "module", p->ok && p->module[0] ? p->module : NULL);
	json_open(j, "devices", '[');
	for (int k = 0; p->ok && k < p->ndevices; k++)
		json_str(j, NULL, p->devices[k]);
	json_close(j, ']');
	json_str(j, "local", p->ok && p->local[0] ? p->local : NULL);
	json_str(j, "remote", p->ok && p->remote[0] ? p->remote : NULL);
	json_open(j, "relays", '[');
	for (int k = 0; p->ok && k < p->nrelays; k++)
		json_str(j, NULL, p->relays[k]);
	json_close(j, ']');
	json_str(j, "encryption", p->ok && p->cipher[0] ? p->cipher : NULL);
	json_num(j, "gbps", p->gbps, p->ok && p->gbps >= 0);
	json_num(j, "lat_us", p->lat_us, p->ok && p->lat_us >= 0);
	json_num(j, "rtt_us", p->rtt_us, p->ok && p->rtt_us >= 0);
	json_bytes(j, "bdp_bytes", p->ok ? p->bdp_rail : 0);
	json_bytes(j, "bdp_measured_bytes", p->ok ? p->bdp_measured : 0);
	json_bytes(j, "inflight_max_bytes", p->ok ? p->inflight_max : 0);
	json_str(j, "error", p->ok ? NULL : p->error);
	json_str(j, "reason", p->ok ? NULL : p->reason);
	json_close(j, '}');
}

/* The tried pairs of NCCL's bootstrap, each way. */
static void json_boot(struct json *j, const struct cl_report *r)
{
	int n = r->nhosts, tried, ok;

	boot_counts(r, &tried, &ok);
	json_open(j, "bootstrap", '{');
	json_bool(j, "ok", !cl_boot_failed(r));
	json_int(j, "connect_timeout_ms", CL_BOOT_CONNECT_MS);
	json_num(j, "elapsed_s", r->boot_elapsed_s, true);
	json_open(j, "pairs", '[');
	for (int i = 0; r->boot && i < n; i++)
		for (int k = 0; k < n; k++) {
			const struct cl_boot_result *x = &r->boot[(size_t)i * n + k];

			if (x->status == CL_BOOT_UNTRIED)
				continue;
			json_open(j, NULL, '{');
			json_int(j, "from", i);
			json_int(j, "to", k);
			json_bool(j, "ok", x->status == CL_BOOT_OK);
			json_num(j, "ms", x->ms, true);
			json_str(j, "error", x->status == CL_BOOT_OK ? NULL :
				 cl_boot_status_text(x->status));
			json_str(j, "reason", x->status == CL_BOOT_OK ? NULL :
				 x->detail);
			json_close(j, '}');
		}
	json_close(j, ']');
	json_close(j, '}');
}

void cl_print_json(FILE *out, const struct cl_report *r)
{
	struct json j = { .out = out };

	json_open(&j, NULL, '{');
	json_int(&j, "version", 1);
	json_open(&j, "hosts", '[');
	for (int k = 0; k < r->nhosts; k++)
		json_host(&j, &r->hosts[k]);
	json_close(&j, ']');
	json_open(&j, "pairs", '[');
	for (int i = 0; i < r->npairs; i++)
		if (r->pairs[i].from != r->pairs[i].to)
			json_pair(&j, &r->pairs[i]);
	json_close(&j, ']');
	json_boot(&j, r);
	json_open(&j, "findings", '[');
	for (int i = 0; i < r->nfindings; i++) {
		const struct cl_finding *f = &r->findings[i];

		json_open(&j, NULL, '{');
		json_str(&j, "kind", f->kind);
		json_rank(&j, "rail", f->rail);
		json_rank(&j, "from", f->from);
		json_rank(&j, "to", f->to);
		json_open(&j, "hosts", '[');
		for (int k = 0; k < f->nhosts; k++)
			json_int(&j, NULL, f->hosts[k]);
		json_close(&j, ']');
		json_str(&j, "text", f->text);
		json_close(&j, '}');
	}
	json_close(&j, ']');
	json_open(&j, "nccl_env", '{');
	for (int i = 0; i < r->nenv; i++)
		json_str(&j, r->env[i][0], r->env[i][1]);
	json_close(&j, '}');
	json_num(&j, "elapsed_s", r->elapsed_s, true);
	json_close(&j, '}');
	fputc('\n', out);
}

/* ---- DOT ---- */

static const char *color(const char *cls)
{
	return !strcmp(cls, "same-DC") ? "green3" :
	       !strcmp(cls, "cross-DC") ? "blue" :
	       !strcmp(cls, "relayed") ? "orange" : "gray";
}

/* DOT strings: quotes and backslashes escaped, the rest as is. */
static void dot_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		fputc(*s == '\n' ? ' ' : *s, out);
	}
	fputc('"', out);
}

/* The host a relay runs on, when it is one of the report's: by name, or
 * by the address other hosts reached it at. */
static int relay_host(const struct cl_report *r, const char *name,
		      const char *addr)
{
	size_t n = strcspn(addr, ":[");

	for (int k = 0; k < r->nhosts; k++)
		if (!strcmp(r->hosts[k].host, name))
			return k;
	for (int i = 0; n && i < r->npairs; i++) {
		const struct cl_pair *p = &r->pairs[i];

		if (!p->ok || p->nrelays)
			continue;
		if (!strncmp(p->remote, addr, n) && p->remote[n] == ':')
			return p->to;
		if (!strncmp(p->local, addr, n) && p->local[n] == ':')
			return p->from;
	}
	return -1;
}

/* Two digits below 1 Gb/s: a slow link's figures must not read 0.0. */
static void dot_rate(char *buf, size_t cap, const struct cl_pair *p)
{
	if (p->gbps >= 0)
		snprintf(buf, cap, p->gbps < 1 ? "%.2f" : "%.1f", p->gbps);
	else
		snprintf(buf, cap, "?");
}

/* One edge: its color, more attributes (each ", name=value"), a label. */
static void dot_edge(FILE *out, int a, int b, const char *color,
		     const char *attrs, const char *label)
{
	fprintf(out, "  h%d -- h%d [color=%s%s", a, b, color, attrs);
	if (label) {
		fputs(", label=", out);
		dot_str(out, label);
	}
	fputs("];\n", out);
}

/* What the findings say of a pair that connects: degraded, asymmetric
 * and window-bound pairs are drawn red and thick, the finding first in
 * the label; NULL when none. */
static const char *marked(const struct cl_report *r, int rail, int i, int j)
{
	for (int k = 0; k < r->nfindings; k++) {
		const struct cl_finding *f = &r->findings[k];

		if (f->rail == rail && ((f->from == i && f->to == j) ||
					(f->from == j && f->to == i)) &&
		    (!strcmp(f->kind, "degraded") ||
		     !strcmp(f->kind, "asymmetric") ||
		     !strcmp(f->kind, "window")))
			return f->kind;
	}
	return NULL;
}

#define MARK_ATTRS ", penwidth=3, fontcolor=red"

/* A relayed pair: through its relays' nodes when all are hosts here. */
static void dot_relayed(FILE *out, const struct cl_report *r,
			const struct cl_pair *p, const char *text, bool mark)
{
	const char *col = mark ? "red" : "orange";
	const char *bold = mark ? ", style=bold" MARK_ATTRS : ", style=bold";
	int via[CL_MAX_RELAYS], n = p->nrelays;

	for (int k = 0; k < n; k++)
		if ((via[k] = relay_host(r, p->relays[k],
					 p->relay_addrs[k])) < 0)
			n = -1;
	if (n <= 0) {
		dot_edge(out, p->from, p->to, col, mark ? MARK_ATTRS : "", text);
		return;
	}
	dot_edge(out, p->from, via[0], col, mark ? MARK_ATTRS : "", text);
	for (int k = 0; k < n; k++)
		dot_edge(out, via[k], k + 1 < n ? via[k + 1] : p->to, col, bold,
			 NULL);
}

/* Appends " via R1 R2" to text when the first relay is no host here. */
static void via_text(const struct cl_report *r, const struct cl_pair *p,
		     char *text, size_t cap)
{
	size_t len = strlen(text);

	if (!p->nrelays || relay_host(r, p->relays[0], p->relay_addrs[0]) >= 0)
		return;
	len += (size_t)snprintf(text + len, cap - len, " via");
	for (int k = 0; k < p->nrelays && len < cap; k++)
		len += (size_t)snprintf(text + len, cap - len, " %s",
					p->relays[k]);
}

/* Appends ", rtt 20.3 ms" to a label where the round trip is long enough
 * to matter (1 ms: a metro's fibre); a LAN's edges stay as they were. */
static void rtt_label(const struct cl_pair *p, char *text, size_t cap)
{
	size_t len = strlen(text);
	char b[32];

	if (p->rtt_us >= 1000 && len < cap)
		snprintf(text + len, cap - len, ", rtt %s",
			 cl_rtt_text(p->rtt_us, b, sizeof(b)));
}

/* Both ways take the same kind of path: one edge shows them. */
static bool same_path(const struct cl_pair *a, const struct cl_pair *b)
{
	return !strcmp(a->cls, b->cls) && a->nrelays == 0 && b->nrelays == 0;
}

/* The attributes of a direct edge: an arrow unless both ways connect. */
static const char *direct_attrs(bool both, bool mark)
{
	return both ? (mark ? ", dir=none" MARK_ATTRS : ", dir=none") :
		      (mark ? ", dir=forward" MARK_ATTRS : ", dir=forward");
}

/* One way of a pair whose two ways differ: its own arrow. */
static void dot_way(FILE *out, const struct cl_report *r,
		    const struct cl_pair *p, const char *prefix, bool mark)
{
	char text[512], rate[16];

	dot_rate(rate, sizeof(rate), p);
	snprintf(text, sizeof(text), "%s%s Gb/s", prefix, rate);
	rtt_label(p, text, sizeof(text));
	via_text(r, p, text, sizeof(text));
	if (p->nrelays) {
		dot_relayed(out, r, p, text, mark);
		return;
	}
	dot_edge(out, p->from, p->to, mark ? "red" : color(p->cls),
		 direct_attrs(false, mark), text);
}

static void dot_pair(FILE *out, const struct cl_report *r, int rail, int i,
		     int j)
{
	const struct cl_pair *a = at(r, rail, i, j), *b = at(r, rail, j, i);
	const char *mark = marked(r, rail, i, j);
	char text[512], ra[16], rb[16], prefix[CL_NAME_MAX + 32] = "";

	if (r->nrails > 1)
		snprintf(prefix, sizeof(prefix), "%s: ", rail_name(r, rail));
	for (int k = 0; k < 2; k++) {
		const struct cl_pair *p = k ? b : a;

		if (p->ok)
			continue;
		/* one red edge for a pair that fails both ways */
		if (k && !a->ok && !strcmp(a->error, b->error))
			break;
		snprintf(text, sizeof(text), "%s%s", prefix, p->error);
		dot_edge(out, p->from, p->to, "red", a->ok || b->ok ?
			 ", style=dashed, dir=forward" :
			 ", style=dashed, dir=none", text);
	}
	if (!a->ok && !b->ok)
		return;
	if (mark) {
		size_t len = strlen(prefix);

		snprintf(prefix + len, sizeof(prefix) - len, "%s: ", mark);
	}
	if (a->ok && b->ok && !same_path(a, b)) {
		dot_way(out, r, a, prefix, mark != NULL);
		dot_way(out, r, b, prefix, mark != NULL);
		return;
	}
	dot_rate(ra, sizeof(ra), a);
	dot_rate(rb, sizeof(rb), b);
	if (a->ok && b->ok)
		snprintf(text, sizeof(text), "%s%s / %s Gb/s", prefix, ra, rb);
	else
		snprintf(text, sizeof(text), "%s%s Gb/s one way", prefix,
			 a->ok ? ra : rb);
	const struct cl_pair *p = a->ok ? a : b;

	rtt_label(p, text, sizeof(text));
	via_text(r, p, text, sizeof(text));
	if (!strcmp(p->cls, "relayed")) {
		dot_relayed(out, r, p, text, mark != NULL);
		return;
	}
	dot_edge(out, p->from, p->to, mark ? "red" : color(p->cls),
		 direct_attrs(a->ok && b->ok, mark != NULL), text);
}

/* Hosts that do not reach host k's bootstrap address. */
static int boot_missed(const struct cl_report *r, int k)
{
	int miss = 0;

	for (int i = 0; r->boot && i < r->nhosts; i++)
		miss += r->boot[(size_t)i * r->nhosts + k].status > CL_BOOT_OK;
	return miss;
}

void cl_print_dot(FILE *out, const struct cl_report *r)
{
	char b[2 * CL_NAME_MAX + CL_ADDR_MAX + 96];
	int tried, ok;

	boot_counts(r, &tried, &ok);
	fprintf(out, "graph meshinfo_cluster {\n  graph [fontname=\"Helvetica\", overlap=false];\n"
		"  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n"
		"  edge [fontname=\"Helvetica\", fontsize=10];\n");
	/* the one fault that stops the job before any of the edges below */
	if (cl_boot_failed(r))
		fprintf(out, "  label=\"NCCL's bootstrap fails: %d of %d pairs do not connect%s; ncclCommInitRank will hang\";\n"
			"  labelloc=t; fontcolor=red;\n", tried - ok, tried,
			tried == ok ? ", a host has no interface for it" : "");
	for (int k = 0; k < r->nhosts; k++) {
		bool first = true;

		for (int i = 0; i < k; i++)
			first &= r->hosts[i].dc != r->hosts[k].dc;
		if (!first)
			continue;
		fprintf(out, "  subgraph cluster_dc%llu {\n    label=\"dc %llu\";\n",
			(unsigned long long)r->hosts[k].dc,
			(unsigned long long)r->hosts[k].dc);
		for (int i = k; i < r->nhosts; i++) {
			if (r->hosts[i].dc != r->hosts[k].dc)
				continue;
			int miss = boot_missed(r, i);
			const struct cl_boot_host *bh = &r->hosts[i].boot;

			/* the second line: where NCCL's bootstrap is, and
			 * whether the others reach it */
			if (bh->error[0])
				snprintf(b, sizeof(b),
					 "%s\nrank %d\nbootstrap: no interface",
					 r->hosts[i].host, i);
			else if (miss)
				snprintf(b, sizeof(b),
					 "%s\nrank %d\nbootstrap %s %s\nnot reached from %d host%s",
					 r->hosts[i].host, i, bh->ifname, bh->addr,
					 miss, miss == 1 ? "" : "s");
			else
				snprintf(b, sizeof(b), "%s\nrank %d\nbootstrap %s %s",
					 r->hosts[i].host, i, bh->ifname,
					 bh->addr);
			fprintf(out, "    h%d [label=\"", i);
			for (const char *s = b; *s; s++)
				fprintf(out, *s == '\n' ? "\\n" :
					*s == '"' || *s == '\\' ? "\\%c" : "%c",
					*s);
			fprintf(out, "\"%s%s];\n", r->hosts[i].error[0] ||
				r->hosts[i].lost ? ", color=red" : "",
				miss || bh->error[0] ?
				", fontcolor=red, style=\"rounded,dashed,bold\", color=red" : "");
		}
		fprintf(out, "  }\n");
	}
	for (int rail = 0; rail < r->nrails; rail++)
		for (int i = 0; i < r->nhosts; i++)
			for (int j = i + 1; j < r->nhosts; j++)
				dot_pair(out, r, rail, i, j);
	fprintf(out, "}\n");
}

/* ---- files ---- */

static int write_file(const char *path, const struct cl_report *r,
		      void (*print)(FILE *, const struct cl_report *))
{
	bool to_stdout = !strcmp(path, "-");
	FILE *f = to_stdout ? stdout : fopen(path, "w");
	int err;

	if (!f) {
		fprintf(stderr, "meshinfo: cannot write %s: %s\n", path,
			strerror(errno));
		return -errno;
	}
	print(f, r);
	err = ferror(f) ? -EIO : 0;
	if (to_stdout ? fflush(f) != 0 : fclose(f) != 0)
		err = -EIO;
	if (err)
		fprintf(stderr, "meshinfo: writing %s failed\n", path);
	return err;
}

/* `dot -T<format> -o <path>`, fed the DOT text on its stdin. */
static int render(const struct cl_report *r, const char *format,
		  const char *path)
{
	char type[16], *argv[] = { "dot", type, "-o", (char *)path, NULL };
	posix_spawn_file_actions_t fa;
	int fds[2], status = 0, rc;
	pid_t pid;
	FILE *in;

	snprintf(type, sizeof(type), "-T%s", format);
	if (pipe(fds))
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
	posix_spawn_file_actions_addclose(&fa, fds[1]);
	rc = posix_spawnp(&pid, "dot", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[0]);
	if (rc) {
		close(fds[1]);
		fprintf(stderr, "meshinfo: cannot write %s: Graphviz's dot is %s (%s)\n",
			path, rc == ENOENT ? "not installed" : "not usable",
			strerror(rc));
		return -rc;
	}
	in = fdopen(fds[1], "w");
	if (in) {
		cl_print_dot(in, r);
		fclose(in);
	} else {
		close(fds[1]);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "meshinfo: dot -T%s failed for %s\n", format,
			path);
		return -EIO;
	}
	return 0;
}

int cl_write_outputs(const struct cl_opts *o, const struct cl_report *r)
{
	int bad = 0;

	if (o->json)
		bad |= write_file(o->json, r, cl_print_json) != 0;
	if (o->dot)
		bad |= write_file(o->dot, r, cl_print_dot) != 0;
	if (o->svg)
		bad |= render(r, "svg", o->svg) != 0;
	if (o->png)
		bad |= render(r, "png", o->png) != 0;
	return bad ? 2 : 0;
}
