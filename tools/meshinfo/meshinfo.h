/* SPDX-License-Identifier: MIT */
/*
 * meshinfo: what the plugin would do on this host, built with the same
 * config, loader and fabric code NCCL runs.  meshinfo.c gathers a report,
 * meshinfo_text.c and meshinfo_json.c print it.
 */
#ifndef MESHINFO_H
#define MESHINFO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "fabric.h"
#include "netaddr.h"
#include "state.h"

/* An address with its prefix: "[ffff:...:ffff]/128". */
#define MESH_ADDR_TEXT_MAX (UTIL_ADDR_STRLEN + 8)

/* Path of the config when the core fell back to its embedded copy. */
#define MESHINFO_EMBEDDED_PREFIX '<'

struct meshinfo_strv {
	char **items;
	int n;
};

struct meshinfo {
	struct core_state *st;
	const char *check_file;	/* --check: the file under test */
	uint64_t *dcs;		/* every dc the config mentions, sorted */
	int ndcs;
	/* Core log warnings that no config message or module reason covers. */
	struct meshinfo_strv log;
	/* Modules that failed to load, as warnings. */
	struct meshinfo_strv module_warnings;
};

int meshinfo_strv_add(struct meshinfo_strv *v, const char *text);
void meshinfo_strv_free(struct meshinfo_strv *v);

/*
 * The i-th scope of the effective config: the core's first, then each
 * loaded module's.  NULL past the end.
 */
const struct core_scope *meshinfo_scope(const struct meshinfo *mi, int i);

/* The module the preference list picks among the rail's members, else
 * the layered module (class "relayed"), or NULL; *class names the path. */
const char *meshinfo_path_module(const struct meshinfo *mi,
				 const struct core_rail *rail,
				 enum core_path_class cls, const char **class);
/* The layered module's report (malloc'd), NULL when none is loaded. */
char *meshinfo_layer_report(const struct meshinfo *mi);

/*
 * Columns of the path matrix: every dc the config mentions times this
 * host's rails, dc-major.
 */
int meshinfo_ncolumns(const struct meshinfo *mi);
uint64_t meshinfo_column_fabric_id(const struct meshinfo *mi, int col);

/* "10.0.0.1/24" (the prefix is left out when unknown). */
const char *meshinfo_addr_text(const struct mesh_addr *a, char *buf,
			       size_t len);

/* "file:line: kind: what" when msg starts with a location. */
void meshinfo_print_diagnostic(FILE *out, const char *kind, const char *msg);

/* The JSON writer of meshinfo_json.c, pretty-printing: it only has to
 * remember where commas go.  Keys are NULL inside arrays. */
#define JSON_DEPTH_MAX 16
struct json {
	FILE *out;
	int depth;
	bool has_items[JSON_DEPTH_MAX];
};

void json_string(FILE *out, const char *text);
void json_key(struct json *j, const char *key);
void json_open(struct json *j, const char *key, char bracket);
void json_close(struct json *j, char bracket);
void json_str(struct json *j, const char *key, const char *value);
void json_int(struct json *j, const char *key, long long value);
void json_u64(struct json *j, const char *key, uint64_t value);
void json_bool(struct json *j, const char *key, bool value);

/* "NET/Mesh: x" -> "x", "NET/Mesh/tcp-xdc: x" -> "tcp-xdc: x". */
const char *meshinfo_untagged(const char *line);

/* meshinfo --cluster (cluster.c): argv as given to main. */
int meshinfo_cluster_main(int argc, char **argv);

void meshinfo_print_text(FILE *out, const struct meshinfo *mi);
void meshinfo_print_json(FILE *out, const struct meshinfo *mi);
void meshinfo_print_check_json(FILE *out, const struct meshinfo *mi,
			       bool ok);

#endif
