/* SPDX-License-Identifier: MIT */
/*
 * The report as one JSON document: the same content as the text report,
 * for scripts and cluster preflight checks.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "meshinfo.h"

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
static int utf8_length(const unsigned char *s)
{
	int n;
	unsigned int cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and values past U+10FFFF. */
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) ||
	    (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/*
 * Paths, hostnames and messages are bytes, not necessarily UTF-8: a byte
 * that is not part of valid UTF-8 becomes U+FFFD so the document still
 * parses.
 */
void json_string(FILE *out, const char *text)
{
	const unsigned char *s = (const unsigned char *)text;

	fputc('"', out);
	while (*s) {
		int n = utf8_length(s);

		if (*s == '"' || *s == '\\') {
			fprintf(out, "\\%c", *s);
		} else if (*s == '\n') {
			fputs("\\n", out);
		} else if (*s == '\t') {
			fputs("\\t", out);
		} else if (*s < 0x20 || *s == 0x7f) {
			fprintf(out, "\\u%04x", *s);
		} else if (!n) {
			fputs("\\ufffd", out);
			n = 1;
		} else {
			fwrite(s, 1, n, out);
		}
		s += n ? n : 1;
	}
	fputc('"', out);
}

static void json_indent(struct json *j)
{
	fputc('\n', j->out);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->out);
}

/* Starts one member of the current container; key NULL in arrays. */
void json_key(struct json *j, const char *key)
{
	if (j->depth > 0) {
		if (j->has_items[j->depth])
			fputc(',', j->out);
		j->has_items[j->depth] = true;
		json_indent(j);
	}
	if (key) {
		json_string(j->out, key);
		fputs(": ", j->out);
	}
}

void json_open(struct json *j, const char *key, char bracket)
{
	json_key(j, key);
	fputc(bracket, j->out);
	j->depth++;
	j->has_items[j->depth] = false;
}

void json_close(struct json *j, char bracket)
{
	bool had_items = j->has_items[j->depth];

	j->depth--;
	if (had_items)
		json_indent(j);
	fputc(bracket, j->out);
}

void json_str(struct json *j, const char *key, const char *value)
{
	json_key(j, key);
	if (value)
		json_string(j->out, value);
	else
		fputs("null", j->out);
}

void json_int(struct json *j, const char *key, long long value)
{
	json_key(j, key);
	fprintf(j->out, "%lld", value);
}

void json_u64(struct json *j, const char *key, uint64_t value)
{
	json_key(j, key);
	fprintf(j->out, "%" PRIu64, value);
}

void json_bool(struct json *j, const char *key, bool value)
{
	json_key(j, key);
	fputs(value ? "true" : "false", j->out);
}

static void json_strings(struct json *j, const char *key,
			 const char *const *items, int n)
{
	json_open(j, key, '[');
	for (int i = 0; i < n; i++)
		json_str(j, NULL, items[i]);
	json_close(j, ']');
}

static void print_modules(struct json *j, const struct core_state *st)
{
	json_open(j, "modules", '[');
	for (int i = 0; i < st->nmodules; i++) {
		const struct core_module *m = &st->modules[i];

		json_open(j, NULL, '{');
		json_str(j, "name", m->name);
		json_str(j, "version", m->desc ? m->desc->version : NULL);
		json_str(j, "status", core_module_status_name(m->status));
		json_str(j, "path", m->path[0] ? m->path : NULL);
		json_int(j, "devices", m->ndevs);
		json_str(j, "reason", m->reason[0] ? m->reason : NULL);
		json_close(j, '}');
	}
	json_close(j, ']');
}

static void print_member(struct json *j, const struct core_member *mb)
{
	const struct mesh_dev_props *p = &mb->props;
	char addr[MESH_ADDR_TEXT_MAX];

	json_open(j, NULL, '{');
	json_str(j, "module", mb->module->name);
	json_str(j, "device", p->name);
	json_int(j, "speed_mbps", p->speed_mbps);
	json_open(j, "addresses", '[');
	for (int i = 0; i < p->naddrs && i < MESH_DEV_ADDRS_MAX; i++)
		json_str(j, NULL,
			 meshinfo_addr_text(&p->addrs[i], addr, sizeof(addr)));
	json_close(j, ']');
	json_str(j, "pci_path", p->pci_path[0] ? p->pci_path : NULL);
	json_close(j, '}');
}

static void print_rails(struct json *j, const struct core_state *st)
{
	json_open(j, "rails", '[');
	for (int i = 0; i < st->nrails; i++) {
		const struct core_rail *r = &st->rails[i];

		json_open(j, NULL, '{');
		json_int(j, "index", i);
		json_str(j, "name", r->name);
		json_u64(j, "fabric_id", r->fabric_id);
		json_u64(j, "dc", core_fabric_dc(r->fabric_id, st->max_rails));
		json_u64(j, "rail",
			 core_fabric_rail(r->fabric_id, st->max_rails));
		json_int(j, "speed_mbps", r->props.speed_mbps);
		json_open(j, "members", '[');
		for (int m = 0; m < r->nmembers; m++)
			print_member(j, &r->members[m]);
		json_close(j, ']');
		json_close(j, '}');
	}
	json_close(j, ']');
}

static void print_path_row(struct json *j, const struct meshinfo *mi,
			   const struct core_rail *r)
{
	uint64_t max_rails = mi->st->max_rails;

	json_open(j, NULL, '{');
	json_str(j, "rail", r->name);
	json_u64(j, "fabric_id", r->fabric_id);
	json_open(j, "cells", '[');
	for (int c = 0; c < meshinfo_ncolumns(mi); c++) {
		uint64_t fid = meshinfo_column_fabric_id(mi, c);
		enum core_path_class cls = core_path_class(r->fabric_id, fid,
							   max_rails);
		const char *class, *module = meshinfo_path_module(mi, r, cls,
								  &class);

		json_open(j, NULL, '{');
		json_u64(j, "fabric_id", fid);
		json_str(j, "class", class);
		json_str(j, "module", module);
		json_close(j, '}');
	}
	json_close(j, ']');
	json_close(j, '}');
}

static void print_paths(struct json *j, const struct meshinfo *mi)
{
	uint64_t max_rails = mi->st->max_rails;

	json_open(j, "paths", '{');
	json_open(j, "dcs", '[');
	for (int i = 0; i < mi->ndcs; i++)
		json_u64(j, NULL, mi->dcs[i]);
	json_close(j, ']');
	json_open(j, "columns", '[');
	for (int c = 0; c < meshinfo_ncolumns(mi); c++) {
		uint64_t fid = meshinfo_column_fabric_id(mi, c);

		json_open(j, NULL, '{');
		json_u64(j, "fabric_id", fid);
		json_u64(j, "dc", core_fabric_dc(fid, max_rails));
		json_u64(j, "rail", core_fabric_rail(fid, max_rails));
		json_close(j, '}');
	}
	json_close(j, ']');
	json_open(j, "rows", '[');
	for (int i = 0; i < mi->st->nrails; i++)
		print_path_row(j, mi, &mi->st->rails[i]);
	json_close(j, ']');
	json_close(j, '}');
}

/* The value's type and its bounds, as the table declares them. */
static void print_type(struct json *j, const struct mesh_param *p)
{
	json_str(j, "type", core_param_type_name(p->type));
	if (p->min == p->max)
		return;		/* no range, no limit */
	if (p->type == MESH_PARAM_INT || p->type == MESH_PARAM_SIZE) {
		json_int(j, "min", p->min);
		json_int(j, "max", p->max);
	} else if ((p->type == MESH_PARAM_ADDR_LIST ||
		    p->type == MESH_PARAM_PORT_MAP) && p->max > 0) {
		json_int(j, "max_items", p->max);
	}
}

static void print_scope(struct json *j, const struct core_scope *scope)
{
	char env[256], src[512];

	json_open(j, NULL, '{');
	json_str(j, "scope", scope->module ? scope->module : "core");
	json_open(j, "values", '[');
	for (int i = 0; i < scope->nvalues; i++) {
		const struct core_value *v = &scope->values[i];

		core_env_name(scope->module, v->param->name, env, sizeof(env));
		json_open(j, NULL, '{');
		json_str(j, "key", v->param->name);
		json_str(j, "env", env);
		print_type(j, v->param);
		json_str(j, "value", v->text);
		json_str(j, "source", core_value_source(v, src, sizeof(src)));
		json_close(j, '}');
	}
	json_close(j, ']');
	json_close(j, '}');
}

static void print_messages(struct json *j, const struct meshinfo *mi)
{
	const char *const *msgs;
	int n;

	n = core_config_errors(mi->st->cfg, &msgs);
	json_strings(j, "errors", msgs, n);
	n = core_config_warnings(mi->st->cfg, &msgs);
	json_open(j, "warnings", '[');
	for (int i = 0; i < n; i++)
		json_str(j, NULL, msgs[i]);
	for (int i = 0; i < mi->module_warnings.n; i++)
		json_str(j, NULL, mi->module_warnings.items[i]);
	json_close(j, ']');
	json_strings(j, "log", (const char *const *)mi->log.items, mi->log.n);
}

void meshinfo_print_json(FILE *out, const struct meshinfo *mi)
{
	const struct core_state *st = mi->st;
	struct json j = { .out = out };
	const struct core_scope *scope;
	char abi[32], *report;

	snprintf(abi, sizeof(abi), "%d.%d", MESH_MODULE_ABI_MAJOR,
		 MESH_MODULE_ABI_MINOR);
	json_open(&j, NULL, '{');
	json_str(&j, "version", MESHINFO_VERSION);
	json_str(&j, "module_abi", abi);
	json_str(&j, "config", core_config_path(st->cfg));
	json_str(&j, "hostname", core_config_hostname(st->cfg));
	json_bool(&j, "usable", st->usable);
	json_u64(&j, "dc", st->dc);
	json_u64(&j, "max_rails", st->max_rails);
	print_modules(&j, st);
	print_rails(&j, st);
	print_paths(&j, mi);
	report = meshinfo_layer_report(mi);
	if (report)
		json_str(&j, "relay_report", report);
	free(report);
	json_open(&j, "effective_config", '[');
	for (int i = 0; (scope = meshinfo_scope(mi, i)); i++)
		print_scope(&j, scope);
	json_close(&j, ']');
	print_messages(&j, mi);
	json_close(&j, '}');
	fputc('\n', out);
}

void meshinfo_print_check_json(FILE *out, const struct meshinfo *mi,
			       bool ok)
{
	struct json j = { .out = out };

	json_open(&j, NULL, '{');
	json_str(&j, "file", mi->check_file);
	json_bool(&j, "ok", ok);
	print_messages(&j, mi);
	json_close(&j, '}');
	fputc('\n', out);
}
