/* SPDX-License-Identifier: MIT */
/*
 * Turning one parameter value into its typed form, from text (defaults and
 * the environment) or from a libconfig setting (the file).  Private to the
 * config code; core/config.c decides where values come from and params.c
 * how each type is read and written back as canonical text.
 */
#ifndef CORE_PARAM_PARSE_H
#define CORE_PARAM_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include <libconfig.h>
#include <nccl-mesh/module.h>

/* Room for "expected ..., got ..." explanations. */
#define PARAM_WHY_MAX 512

struct param_parsed {
	char *text;		/* canonical text */
	long long num;		/* INT, BOOL (0/1), SIZE (bytes) */
	char **items;		/* LIST: NULL-terminated; else NULL */
	int nitems;
};

/*
 * Each returns 0, -ENOMEM, or -EINVAL with `why` holding
 * "expected <what>, got <value>".  On error *out is left empty.
 */
int param_parse_text(const struct mesh_param *p, const char *text,
		     struct param_parsed *out, char *why, size_t len);
int param_parse_setting(const struct mesh_param *p,
			const config_setting_t *s, struct param_parsed *out,
			char *why, size_t len);
/* Like param_parse_text, but "" (or NULL) means "no default": text "". */
int param_parse_default(const struct mesh_param *p,
			struct param_parsed *out, char *why, size_t len);
void param_parsed_free(struct param_parsed *v);

/* "1073741824" -> "1G": the shortest exact K/M/G form. */
void param_size_text(long long bytes, char *buf, size_t len);
/* False for a value outside the enum (tables come from other objects). */
bool param_type_valid(enum mesh_param_type type);

#endif
