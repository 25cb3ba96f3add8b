/* SPDX-License-Identifier: MIT */
/*
 * The config's messages: errors and warnings kept sorted by file and line
 * as they are found, value errors that say where a value came from, and
 * the strings values point at; and the names keys and variables take.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"

/* ---- names: keys, variables, a name in a parameter table ---- */

static void env_append(char *buf, unsigned len, unsigned *pos, const char *s)
{
	for (; *s && *pos + 1 < len; s++)
		buf[(*pos)++] = *s == '-' ? '_' : toupper((unsigned char)*s);
	buf[*pos] = '\0';
}

void core_env_name(const char *module, const char *key, char *buf,
		   unsigned len)
{
	unsigned pos = 0;

	if (!len)
		return;
	buf[0] = '\0';
	env_append(buf, len, &pos, ENV_PREFIX);
	if (module) {
		env_append(buf, len, &pos, module);
		env_append(buf, len, &pos, "_");
	}
	env_append(buf, len, &pos, key);
}

/* "streams" for the core, "tcp-xdc.streams" for a module. */
void cfg_key_name(const char *module, const char *key, char *buf,
		     size_t len)
{
	if (module)
		snprintf(buf, len, "%s.%s", module, key);
	else
		snprintf(buf, len, "%s", key);
}

/* Whether a table declares the name. */
bool cfg_in_table(const struct mesh_param *params, const char *name)
{
	for (; params && params->name; params++)
		if (!strcmp(params->name, name))
			return true;
	return false;
}

/* ---- messages and owned strings ---- */

size_t core_msg_location(const char *msg, size_t *file_len, long *line)
{
	for (const char *p = msg; *p && *p != ' '; p++) {
		const char *d = p + 1;

		if (*p != ':' || *d < '0' || *d > '9')
			continue;
		*line = strtol(d, NULL, 10);
		while (*d >= '0' && *d <= '9')
			d++;
		if (d[0] == ':' && d[1] == ' ') {
			*file_len = (size_t)(p - msg);
			return (size_t)(d + 2 - msg);
		}
	}
	return 0;
}

/*
 * Where a message sorts: by file (in the order files were first named),
 * then line; messages without a location come after all others.
 */
static long long msg_rank(struct core_config *cfg, const char *msg)
{
	long line = 0;
	size_t flen = 0;
	int f;

	if (!core_msg_location(msg, &flen, &line))
		return LLONG_MAX;
	for (f = 0; f < cfg->nmsg_files; f++)
		if (strlen(cfg->msg_files[f]) == flen &&
		    !strncmp(cfg->msg_files[f], msg, flen))
			break;
	if (f == cfg->nmsg_files) {
		if (f == MSG_FILES_MAX)
			return LLONG_MAX - 1;
		cfg->msg_files[f] = strndup(msg, flen);
		if (!cfg->msg_files[f])
			return LLONG_MAX - 1;
		cfg->nmsg_files++;
	}
	return (long long)f << 32 | (line & 0x7fffffff);
}

void cfg_msg_addv(struct core_config *cfg, struct msg_list *list,
		     const char *fmt, va_list ap)
{
	char **msgs, *msg;
	bool *tags;
	long long rank;
	int at;

	if (vasprintf(&msg, fmt, ap) < 0) {
		cfg->nomem = true;
		return;
	}
	msgs = realloc(list->msgs, (list->n + 2) * sizeof(*msgs));
	if (msgs)
		list->msgs = msgs;
	tags = realloc(list->from_check, (list->n + 1) * sizeof(*tags));
	if (tags)
		list->from_check = tags;
	if (!msgs || !tags) {
		free(msg);
		cfg->nomem = true;
		return;
	}
	/* Sorted as they come, stable: the same line keeps its order. */
	rank = msg_rank(cfg, msg);
	for (at = list->n; at > 0 && msg_rank(cfg, msgs[at - 1]) > rank;
	     at--) {
		msgs[at] = msgs[at - 1];
		tags[at] = tags[at - 1];
	}
	msgs[at] = msg;
	tags[at] = cfg->checking;
	msgs[++list->n] = NULL;
}

__attribute__((format(printf, 3, 4)))
static void msg_add(struct core_config *cfg, struct msg_list *list,
		    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cfg_msg_addv(cfg, list, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 2, 3)))
void cfg_error(struct core_config *cfg, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cfg_msg_addv(cfg, &cfg->errors, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 2, 3)))
void cfg_warning(struct core_config *cfg, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cfg_msg_addv(cfg, &cfg->warnings, fmt, ap);
	va_end(ap);
}

/* Drops the messages of an earlier core_config_check_unknown. */
void cfg_msg_drop_checked(struct msg_list *list)
{
	int kept = 0;

	for (int i = 0; i < list->n; i++) {
		if (list->from_check[i]) {
			free(list->msgs[i]);
			continue;
		}
		list->from_check[kept] = false;
		list->msgs[kept++] = list->msgs[i];
	}
	list->n = kept;
	if (list->msgs)
		list->msgs[kept] = NULL;
}

void cfg_msg_free(struct msg_list *list)
{
	for (int i = 0; i < list->n; i++)
		free(list->msgs[i]);
	free(list->msgs);
	free(list->from_check);
}

/* A copy that lives as long as the config; NULL when out of memory. */
const char *cfg_keep(struct core_config *cfg, const char *s)
{
	char **pool, *copy;

	pool = realloc(cfg->pool, (cfg->npool + 1) * sizeof(*pool));
	if (!pool) {
		cfg->nomem = true;
		return NULL;
	}
	cfg->pool = pool;
	copy = strdup(s);
	if (!copy) {
		cfg->nomem = true;
		return NULL;
	}
	pool[cfg->npool++] = copy;
	return copy;
}

bool cfg_str_list_add(struct core_config *cfg, struct str_list *l,
			 const char *s)
{
	const char **v = realloc(l->v, (l->n + 1) * sizeof(*v));

	if (!v) {
		cfg->nomem = true;
		return false;
	}
	l->v = v;
	v[l->n++] = s;
	return true;
}

static void value_messagev(struct core_config *cfg, struct msg_list *list,
			   const char *module, const struct core_value *v,
			   const char *fmt, va_list ap)
{
	char key[256], *what;

	cfg_key_name(module, v->param->name, key, sizeof(key));
	if (vasprintf(&what, fmt, ap) < 0) {
		cfg->nomem = true;
		return;
	}
	switch (v->source) {
	case CORE_SRC_FILE:
	case CORE_SRC_HOST:
		msg_add(cfg, list, "%s:%d: %s: %s", v->file, v->line, key,
			what);
		break;
	case CORE_SRC_ENV:
		msg_add(cfg, list, "environment %s: %s: %s", v->env, key,
			what);
		break;
	default:
		msg_add(cfg, list, "%s (default \"%s\"): %s", key,
			v->text ? v->text : "", what);
		break;
	}
	free(what);
}

void core_config_value_error(struct core_config *cfg, const char *module,
			     const struct core_value *v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	value_messagev(cfg, &cfg->errors, module, v, fmt, ap);
	va_end(ap);
}

void core_config_value_errorv(struct core_config *cfg, const char *module,
			      const struct core_value *v, const char *fmt,
			      va_list ap)
{
	value_messagev(cfg, &cfg->errors, module, v, fmt, ap);
}

void core_config_value_warning(struct core_config *cfg, const char *module,
			       const struct core_value *v, const char *fmt,
			       ...)
{
	va_list ap;

	va_start(ap, fmt);
	value_messagev(cfg, &cfg->warnings, module, v, fmt, ap);
	va_end(ap);
}
