/* SPDX-License-Identifier: MIT */
/*
 * The human-readable report.  Section headers and column titles start with
 * '#', so a report pasted into a config file is inert.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfo.h"

#define CELL_MAX 128

static int max_int(int a, int b)
{
	return a > b ? a : b;
}

static void print_header(FILE *out, const struct meshinfo *mi)
{
	const struct core_config *cfg = mi->st->cfg;

	fprintf(out, "# nccl-mesh %s, module ABI %d.%d\n", MESHINFO_VERSION,
		MESH_MODULE_ABI_MAJOR, MESH_MODULE_ABI_MINOR);
	fprintf(out, "# config: %s\n", core_config_path(cfg));
	fprintf(out, "# host: %s\n", core_config_hostname(cfg));
}

static const char *module_version(const struct core_module *m)
{
	return m->desc && m->desc->version ? m->desc->version : "-";
}

static void print_modules(FILE *out, const struct meshinfo *mi)
{
	const struct core_state *st = mi->st;
	int wname = strlen("# name"), wver = strlen("version");
	int wstat = strlen("status");

	fprintf(out, "#\n# modules\n");
	if (!st->nmodules) {
		fprintf(out, "# (the config names no module)\n");
		return;
	}
	for (int i = 0; i < st->nmodules; i++) {
		const struct core_module *m = &st->modules[i];

		wname = max_int(wname, strlen(m->name));
		wver = max_int(wver, strlen(module_version(m)));
		wstat = max_int(wstat,
				strlen(core_module_status_name(m->status)));
	}
	fprintf(out, "# %-*s  %-*s  %-*s  %s\n", wname - 2, "name", wver,
		"version", wstat, "status", "path");
	for (int i = 0; i < st->nmodules; i++) {
		const struct core_module *m = &st->modules[i];

		fprintf(out, "%-*s  %-*s  %-*s  %s\n", wname, m->name, wver,
			module_version(m), wstat,
			core_module_status_name(m->status),
			m->path[0] ? m->path : "-");
		if (m->status != CORE_MODULE_READY && m->reason[0])
			fprintf(out, "    reason: %s\n", m->reason);
	}
}

static void print_member(FILE *out, const struct core_member *mb)
{
	const struct mesh_dev_props *p = &mb->props;
	char addr[MESH_ADDR_TEXT_MAX];

	fprintf(out, "    member %s %s  %d Mb/s  addresses", mb->module->name,
		p->name, p->speed_mbps);
	if (!p->naddrs)
		fprintf(out, " -");
	for (int i = 0; i < p->naddrs && i < MESH_DEV_ADDRS_MAX; i++)
		fprintf(out, " %s",
			meshinfo_addr_text(&p->addrs[i], addr, sizeof(addr)));
	fprintf(out, "  pci %s\n", p->pci_path[0] ? p->pci_path : "-");
}

static void print_rails(FILE *out, const struct meshinfo *mi)
{
	const struct core_state *st = mi->st;

	fprintf(out, "#\n# rails (the devices NCCL sees)\n");
	if (!st->nrails) {
		fprintf(out, "# (none: NCCL would get no device)\n");
		return;
	}
	for (int i = 0; i < st->nrails; i++) {
		const struct core_rail *r = &st->rails[i];

		fprintf(out, "%d  %s  fabricId %" PRIu64 "  dc %" PRIu64
			"  rail %" PRIu64 "  %d Mb/s\n", i, r->name,
			r->fabric_id,
			core_fabric_dc(r->fabric_id, st->max_rails),
			core_fabric_rail(r->fabric_id, st->max_rails),
			r->props.speed_mbps);
		for (int m = 0; m < r->nmembers; m++)
			print_member(out, &r->members[m]);
	}
}

static void column_title(const struct meshinfo *mi, int col, char *buf,
			 size_t len)
{
	uint64_t fid = meshinfo_column_fabric_id(mi, col);
	uint64_t max_rails = mi->st->max_rails;

	snprintf(buf, len, "%" PRIu64 " (dc%" PRIu64 " rail%" PRIu64 ")", fid,
		 core_fabric_dc(fid, max_rails),
		 core_fabric_rail(fid, max_rails));
}

static void cell_text(const struct meshinfo *mi, const struct core_rail *r,
		      int col, char *buf, size_t len)
{
	uint64_t fid = meshinfo_column_fabric_id(mi, col);
	enum core_path_class cls = core_path_class(r->fabric_id, fid,
						   mi->st->max_rails);
	const char *class, *module = meshinfo_path_module(mi, r, cls, &class);

	snprintf(buf, len, "%s %s", class, module ? module : "-");
}

static int column_width(const struct meshinfo *mi, int col)
{
	char buf[CELL_MAX];
	int w;

	column_title(mi, col, buf, sizeof(buf));
	w = strlen(buf);
	for (int i = 0; i < mi->st->nrails; i++) {
		cell_text(mi, &mi->st->rails[i], col, buf, sizeof(buf));
		w = max_int(w, strlen(buf));
	}
	return w;
}

static int row_label_width(const struct meshinfo *mi)
{
	int w = strlen("# rail");

	for (int i = 0; i < mi->st->nrails; i++)
		w = max_int(w, strlen(mi->st->rails[i].name));
	return w;
}

/* The last column is not padded: no trailing blanks. */
static void print_cell(FILE *out, const char *text, int col, int ncols,
		       int width)
{
	fprintf(out, "  %-*s", col + 1 < ncols ? width : 0, text);
}

static void print_paths(FILE *out, const struct meshinfo *mi)
{
	int ncols = meshinfo_ncolumns(mi), wrow = row_label_width(mi);
	char buf[CELL_MAX];

	fprintf(out, "#\n# path classes: this host's rails (rows) to peer "
		"fabricIds (columns), with the module chosen\n");
	if (!ncols) {
		fprintf(out, "# (no rails)\n");
		return;
	}
	fprintf(out, "%-*s", wrow, "# rail");
	for (int c = 0; c < ncols; c++) {
		column_title(mi, c, buf, sizeof(buf));
		print_cell(out, buf, c, ncols, column_width(mi, c));
	}
	fputc('\n', out);
	for (int i = 0; i < mi->st->nrails; i++) {
		const struct core_rail *r = &mi->st->rails[i];

		fprintf(out, "%-*s", wrow, r->name);
		for (int c = 0; c < ncols; c++) {
			cell_text(mi, r, c, buf, sizeof(buf));
			print_cell(out, buf, c, ncols, column_width(mi, c));
		}
		fputc('\n', out);
	}
}

/* Values are printed so the line can be pasted into a shell. */
static bool needs_quotes(const char *s)
{
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
			    "0123456789_,./:@%+=-", *s))
			return true;
	return false;
}

static int assignment_text(const struct core_scope *scope,
			   const struct core_value *v, char *buf, size_t len)
{
	char env[256];
	size_t n;

	core_env_name(scope->module, v->param->name, env, sizeof(env));
	if (!needs_quotes(v->text))
		return snprintf(buf, len, "%s=%s", env, v->text);
	n = snprintf(buf, len, "%s='", env);
	for (const char *s = v->text; *s && n + 5 < len; s++) {
		if (*s == '\'')
			n += snprintf(buf + n, len - n, "'\\''");
		else
			buf[n++] = *s;
	}
	snprintf(buf + n, len - n, "'");
	return strlen(buf);
}

static void print_scope(FILE *out, const struct core_scope *scope)
{
	char line[1024], src[512];
	int w = 0;

	fprintf(out, "#\n# effective config: %s\n",
		scope->module ? scope->module : "core");
	for (int i = 0; i < scope->nvalues; i++)
		w = max_int(w, assignment_text(scope, &scope->values[i], line,
					       sizeof(line)));
	for (int i = 0; i < scope->nvalues; i++) {
		const struct core_value *v = &scope->values[i];

		assignment_text(scope, v, line, sizeof(line));
		fprintf(out, "%-*s   # %s\n", w, line,
			core_value_source(v, src, sizeof(src)));
	}
}

static void print_config(FILE *out, const struct meshinfo *mi)
{
	const struct core_scope *scope;

	for (int i = 0; (scope = meshinfo_scope(mi, i)); i++)
		print_scope(out, scope);
}

static void print_messages(FILE *out, const char *title, const char *kind,
			   const char *const *msgs, int n,
			   const struct meshinfo_strv *more)
{
	int extra = more ? more->n : 0;

	fprintf(out, "#\n# %s%s\n", title, n + extra ? "" : ": none");
	for (int i = 0; i < n; i++)
		meshinfo_print_diagnostic(out, kind, msgs[i]);
	for (int i = 0; i < extra; i++)
		meshinfo_print_diagnostic(out, kind, more->items[i]);
}

static void print_status(FILE *out, const struct meshinfo *mi, int nerr)
{
	const struct core_state *st = mi->st;

	fprintf(out, "#\n");
	if (st->usable) {
		fprintf(out, "# status: usable, %d rail%s\n", st->nrails,
			st->nrails == 1 ? "" : "s");
		return;
	}
	fprintf(out, "# status: NOT usable, NCCL init would fail:");
	if (nerr)
		fprintf(out, " %d config error%s", nerr, nerr == 1 ? "" : "s");
	if (nerr && !st->nrails)
		fprintf(out, ",");
	if (!st->nrails)
		fprintf(out, " no rails");
	if (!nerr && st->nrails)
		fprintf(out, " see the warnings above");
	fprintf(out, "\n");
}

static void print_layer(FILE *out, const struct meshinfo *mi)
{
	char *report = meshinfo_layer_report(mi);

	if (!report)
		return;
	fprintf(out, "#\n# routes through relays from this host\n%s", report);
	free(report);
}

void meshinfo_print_text(FILE *out, const struct meshinfo *mi)
{
	const char *const *errs, *const *warns;
	int nerr = core_config_errors(mi->st->cfg, &errs);
	int nwarn = core_config_warnings(mi->st->cfg, &warns);

	print_header(out, mi);
	print_modules(out, mi);
	print_rails(out, mi);
	print_paths(out, mi);
	print_layer(out, mi);
	print_config(out, mi);
	print_messages(out, "errors", "error", errs, nerr, NULL);
	print_messages(out, "warnings", "warning", warns, nwarn,
		       &mi->module_warnings);
	if (mi->log.n)
		print_messages(out, "also logged by the core", "warning",
			       NULL, 0, &mi->log);
	print_status(out, mi, nerr);
}
