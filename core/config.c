/* SPDX-License-Identifier: MIT */
/*
 * Configuration resolver: picks the file, parses it with libconfig, and
 * resolves parameter tables layer by layer (default < file < matching host
 * entries < environment), remembering where every value came from.  Errors
 * and warnings are collected as text; printing them is the caller's call.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libconfig.h>

#include "config.h"
#include "params.h"
#include "param_parse.h"

#define SYSTEM_CONF "/etc/nccl-mesh.conf"
#define EMBEDDED_NAME "<embedded default>"
#define ENV_PREFIX "NCCL_MESH_"
#define CONF_VERSION 1
#define ENV_NAME_MAX 320

extern char **environ;

struct msg_list {
	char **msgs;
	bool *from_check;	/* added by core_config_check_unknown */
	int n;
};

/* Files in the order messages first named them, to sort by (file, line). */
#define MSG_FILES_MAX 16

struct str_list {
	const char **v;
	int n;
};

struct module_scope {
	char *name;
	const struct mesh_param *params;
	struct core_scope scope;
};

/* A valid entry of the `hosts` list, matching this host or not. */
struct host_entry {
	config_setting_t *group;
	const char *match;
	bool matches;
};

struct core_config {
	config_t lc;
	bool parsed;		/* lc holds the file's settings */
	char *path;
	char *hostname;
	struct host_entry *hosts;
	int nhosts;
	struct core_scope core;
	struct module_scope **mods;	/* pointers: scopes must not move */
	int nmods;
	struct msg_list errors, warnings;
	char *msg_files[MSG_FILES_MAX];
	int nmsg_files;
	bool checking;			/* inside check_unknown */
	char **pool;			/* strings values point at */
	int npool;
	bool nomem;
};

/* ---- messages and owned strings ---- */

static bool in_table(const struct mesh_param *params, const char *name);

/* Length of a leading "file:line: ", 0 when the message has none. */
static size_t location_length(const char *msg, long *line)
{
	for (const char *p = msg; *p && *p != ' '; p++) {
		const char *d = p + 1;

		if (*p != ':' || *d < '0' || *d > '9')
			continue;
		*line = strtol(d, NULL, 10);
		while (*d >= '0' && *d <= '9')
			d++;
		if (d[0] == ':' && d[1] == ' ')
			return (size_t)(p - msg);
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
	size_t flen = location_length(msg, &line);
	int f;

	if (!flen)
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

static void msg_addv(struct core_config *cfg, struct msg_list *list,
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
	msg_addv(cfg, list, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 2, 3)))
static void add_error(struct core_config *cfg, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	msg_addv(cfg, &cfg->errors, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 2, 3)))
static void add_warning(struct core_config *cfg, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	msg_addv(cfg, &cfg->warnings, fmt, ap);
	va_end(ap);
}

/* Drops the messages of an earlier core_config_check_unknown. */
static void msg_drop_checked(struct msg_list *list)
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

static void msg_free(struct msg_list *list)
{
	for (int i = 0; i < list->n; i++)
		free(list->msgs[i]);
	free(list->msgs);
	free(list->from_check);
}

/* A copy that lives as long as the config; NULL when out of memory. */
static const char *keep(struct core_config *cfg, const char *s)
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

static bool str_list_add(struct core_config *cfg, struct str_list *l,
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

/* ---- names ---- */

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
static void key_name(const char *module, const char *key, char *buf,
		     size_t len)
{
	if (module)
		snprintf(buf, len, "%s.%s", module, key);
	else
		snprintf(buf, len, "%s", key);
}

static const char *setting_file(const struct core_config *cfg,
				const config_setting_t *s)
{
	const char *file = config_setting_source_file(s);

	return file ? file : cfg->path;
}

static int setting_line(const config_setting_t *s)
{
	return config_setting_source_line(s);
}

/* ---- edit distance hints ---- */

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, diag, up, *row;
	size_t best;

	row = malloc((lb + 1) * sizeof(*row));
	if (!row)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			up = row[j];
			best = diag + (tolower((unsigned char)a[i - 1]) !=
				       tolower((unsigned char)b[j - 1]));
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	best = row[lb];
	free(row);
	return best;
}

/*
 * The closest candidate, if it is close enough to be a likely typo: up to
 * a third of the name's length, at least 1 and at most 3 edits.  `skip`
 * characters of common prefix (NCCL_MESH_) do not count toward the length.
 */
static const char *nearest(const char *name, const struct str_list *cands,
			   size_t skip)
{
	size_t len = strlen(name), limit, d, best_d = SIZE_MAX;
	const char *best = NULL;
	int i;

	limit = (len > skip ? len - skip : 0) / 3;
	limit = limit < 1 ? 1 : limit > 3 ? 3 : limit;
	for (i = 0; i < cands->n; i++) {
		d = edit_distance(name, cands->v[i]);
		if (d <= limit && d < best_d) {
			best_d = d;
			best = cands->v[i];
		}
	}
	return best;
}

/* " (did you mean 'x'?)" or "". */
static void hint_text(const char *best, const char *quote, char *buf,
		      size_t len)
{
	if (best)
		snprintf(buf, len, " (did you mean %s%s%s?)", quote, best,
			 quote);
	else if (len)
		buf[0] = '\0';
}

/* ---- values ---- */

static void value_take(struct core_value *v, struct param_parsed *parsed)
{
	free(v->text);
	if (v->items) {
		char **items = (char **)v->items;
		int i;

		for (i = 0; i < v->nitems; i++)
			free(items[i]);
		free(items);
	}
	v->text = parsed->text;
	v->num = parsed->num;
	v->items = (const char *const *)parsed->items;
	v->nitems = parsed->nitems;
	memset(parsed, 0, sizeof(*parsed));
}

static void value_free(struct core_value *v)
{
	struct param_parsed none = { 0 };

	value_take(v, &none);
}

static void scope_free(struct core_scope *scope)
{
	int i;

	for (i = 0; i < scope->nvalues; i++)
		value_free(&scope->values[i]);
	free(scope->values);
	scope->values = NULL;
	scope->nvalues = 0;
}

static void set_default(struct core_config *cfg, const char *module,
			struct core_value *v)
{
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX];
	int rc;

	v->source = CORE_SRC_DEFAULT;
	rc = param_parse_default(v->param, &parsed, why, sizeof(why));
	if (rc == -ENOMEM) {
		cfg->nomem = true;
		return;
	}
	if (rc) {
		add_error(cfg, "%s%s: parameter '%s' has an invalid default: %s",
			  module ? "module " : "core",
			  module ? module : "", v->param->name, why);
		return;
	}
	value_take(v, &parsed);
}

/* A value from the file: top level (host NULL) or a matching host entry. */
static void apply_setting(struct core_config *cfg, const char *module,
			  struct core_value *v, const config_setting_t *group,
			  const struct host_entry *host)
{
	const config_setting_t *s;
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX], key[256];
	int rc;

	s = group ? config_setting_get_member(group, v->param->name) : NULL;
	if (!s)
		return;
	rc = param_parse_setting(v->param, s, &parsed, why, sizeof(why));
	if (rc == -ENOMEM) {
		cfg->nomem = true;
		return;
	}
	if (rc) {
		key_name(module, v->param->name, key, sizeof(key));
		add_error(cfg, "%s:%d: %s: %s", setting_file(cfg, s),
			  setting_line(s), key, why);
		return;
	}
	value_take(v, &parsed);
	v->source = host ? CORE_SRC_HOST : CORE_SRC_FILE;
	v->file = setting_file(cfg, s);
	v->line = setting_line(s);
	/* The header has no field for the glob; source text needs it. */
	v->env = host ? host->match : NULL;
}

static void apply_env(struct core_config *cfg, const char *module,
		      struct core_value *v)
{
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX], name[ENV_NAME_MAX];
	const char *text;
	int rc;

	core_env_name(module, v->param->name, name, sizeof(name));
	text = getenv(name);
	if (!text)
		return;
	rc = param_parse_text(v->param, text, &parsed, why, sizeof(why));
	if (rc == -ENOMEM) {
		cfg->nomem = true;
		return;
	}
	if (rc) {
		add_error(cfg, "environment %s: %s", name, why);
		return;
	}
	value_take(v, &parsed);
	v->source = CORE_SRC_ENV;
	v->file = NULL;
	v->line = 0;
	v->env = keep(cfg, name);
}

/* The group holding a scope's keys inside `container`, if any. */
static const config_setting_t *scope_group(const config_setting_t *container,
					   const char *module)
{
	const config_setting_t *s;

	if (!module)
		return container;
	s = config_setting_get_member(container, module);
	return s && config_setting_is_group(s) ? s : NULL;
}

/*
 * A hosts entry for other hosts sets nothing here, but one file serves
 * the whole cluster: a value that would fail there fails here too.
 */
static void check_other_host(struct core_config *cfg, const char *module,
			     const struct mesh_param *p,
			     const config_setting_t *group)
{
	const config_setting_t *s;
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX], key[256];
	int rc;

	s = group ? config_setting_get_member(group, p->name) : NULL;
	if (!s)
		return;
	rc = param_parse_setting(p, s, &parsed, why, sizeof(why));
	if (rc == -ENOMEM)
		cfg->nomem = true;
	if (rc == -EINVAL) {
		key_name(module, p->name, key, sizeof(key));
		add_error(cfg, "%s:%d: %s: %s", setting_file(cfg, s),
			  setting_line(s), key, why);
	}
	if (!rc)
		param_parsed_free(&parsed);
}

static void resolve_value(struct core_config *cfg, const char *module,
			  struct core_value *v)
{
	const config_setting_t *root;
	int i;

	set_default(cfg, module, v);
	if (cfg->parsed) {
		root = config_root_setting(&cfg->lc);
		apply_setting(cfg, module, v, scope_group(root, module), NULL);
		for (i = 0; i < cfg->nhosts; i++) {
			const config_setting_t *group =
				scope_group(cfg->hosts[i].group, module);

			if (cfg->hosts[i].matches)
				apply_setting(cfg, module, v, group,
					      &cfg->hosts[i]);
			else
				check_other_host(cfg, module, v->param, group);
		}
	}
	apply_env(cfg, module, v);
}

/* `tcp-xdc = 5;` where a group is due would silently hide every key. */
static void check_module_is_group(struct core_config *cfg,
				  const config_setting_t *container,
				  const char *module)
{
	const config_setting_t *s;

	s = config_setting_get_member(container, module);
	if (s && !config_setting_is_group(s))
		add_error(cfg, "%s:%d: %s: expected a group of the module's keys "
			  "('%s: { key = value; };')", setting_file(cfg, s),
			  setting_line(s), module, module);
}

static int count_params(struct core_config *cfg, const char *module,
			const struct mesh_param *params)
{
	int n;

	for (n = 0; params && params[n].name; n++) {
		if (!param_type_valid(params[n].type))
			add_error(cfg, "%s%s: parameter '%s' has unknown "
				  "type %d", module ? "module " : "core",
				  module ? module : "", params[n].name,
				  (int)params[n].type);
	}
	return n;
}

static int resolve_scope(struct core_config *cfg, struct core_scope *scope,
			 const struct mesh_param *params)
{
	int i, n = count_params(cfg, scope->module, params);

	if (cfg->parsed && scope->module) {
		check_module_is_group(cfg, config_root_setting(&cfg->lc),
				      scope->module);
		for (i = 0; i < cfg->nhosts; i++)
			check_module_is_group(cfg, cfg->hosts[i].group,
					      scope->module);
	}
	scope->values = calloc(n ? n : 1, sizeof(*scope->values));
	if (!scope->values)
		return -ENOMEM;
	scope->nvalues = n;
	for (i = 0; i < n; i++) {
		scope->values[i].param = &params[i];
		if (param_type_valid(params[i].type))
			resolve_value(cfg, scope->module, &scope->values[i]);
	}
	return cfg->nomem ? -ENOMEM : 0;
}

/* ---- the file ---- */

static bool file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* Names the file, or NULL for the embedded default. */
static const char *choose_file(const char *path, const char **named_by)
{
	const char *env = getenv("NCCL_MESH_CONF");

	*named_by = NULL;
	if (path)
		return path;
	if (env && *env) {
		*named_by = "NCCL_MESH_CONF";
		return env;
	}
	if (file_exists(SYSTEM_CONF))
		return SYSTEM_CONF;
#ifdef MESH_SYSCONF_PATH
	if (strcmp(MESH_SYSCONF_PATH, SYSTEM_CONF) &&
	    file_exists(MESH_SYSCONF_PATH))
		return MESH_SYSCONF_PATH;
#endif
	return NULL;
}

/* A config file is small; more than this is not one. */
#define CONF_SIZE_MAX (1 << 20)
#define INCLUDE_DEPTH_MAX 10

/*
 * Reads a whole config file.  Opened non-blocking and checked to be a
 * regular file first: a FIFO or a device in the config's place must give
 * an error, not hang NCCL's init.  Returns 0 or -errno with `why` set.
 */
static int slurp_file(const char *path, char **text, char *why, size_t len)
{
	struct stat st;
	ssize_t got = 0, n;
	char *buf;
	int fd, rc = 0;

	*text = NULL;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, len, "cannot read: %s", strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st)) {
		rc = -errno;
		snprintf(why, len, "cannot read: %s", strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		snprintf(why, len, "cannot read: %s",
			 S_ISDIR(st.st_mode) ? strerror(EISDIR) :
			 S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file" :
			 "not a regular file");
	} else if (st.st_size > CONF_SIZE_MAX) {
		rc = -EFBIG;
		snprintf(why, len, "cannot read: larger than %d bytes",
			 CONF_SIZE_MAX);
	}
	buf = rc ? NULL : malloc((size_t)st.st_size + 1);
	if (!rc && !buf)
		rc = -ENOMEM;
	while (!rc && got < st.st_size) {
		n = read(fd, buf + got, (size_t)(st.st_size - got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;	/* shrank meanwhile: parse what is there */
		got += n;
	}
	close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[got] = '\0';
	*text = buf;
	return 0;
}

static bool check_includes(struct core_config *cfg, const char *file,
			   const char *text, const char *dir, int depth);

/*
 * libconfig opens @include files itself, blocking; so every file the
 * config would include is checked the same way before libconfig runs.
 */
static bool check_include(struct core_config *cfg, const char *file,
			  int line, const char *name, const char *dir,
			  int depth)
{
	char why[256], *text, *path;
	bool ok;

	if (asprintf(&path, "%s%s%s", name[0] == '/' ? "" : dir,
		     name[0] == '/' ? "" : "/", name) < 0) {
		cfg->nomem = true;
		return false;
	}
	if (depth >= INCLUDE_DEPTH_MAX) {
		add_error(cfg, "%s:%d: @include \"%s\": expected at most %d "
			  "levels of @include", file, line, name,
			  INCLUDE_DEPTH_MAX);
		free(path);
		return false;
	}
	if (slurp_file(path, &text, why, sizeof(why))) {
		add_error(cfg, "%s:%d: @include \"%s\": %s", file, line, path,
			  why);
		free(path);
		return false;
	}
	ok = check_includes(cfg, path, text, dir, depth + 1);
	free(text);
	free(path);
	return ok;
}

static bool check_includes(struct core_config *cfg, const char *file,
			   const char *text, const char *dir, int depth)
{
	const char *p = text, *q, *end;
	char name[PATH_MAX];
	int line = 1;
	bool ok = true;

	for (; *p; line++) {
		end = strchrnul(p, '\n');
		for (q = p; q < end && isspace((unsigned char)*q); q++)
			;
		if (!strncmp(q, "@include", 8)) {
			const char *open = memchr(q, '"', (size_t)(end - q));
			const char *close = open ? memchr(open + 1, '"',
				(size_t)(end - open - 1)) : NULL;

			if (close && close - open - 1 < (long)sizeof(name)) {
				snprintf(name, sizeof(name), "%.*s",
					 (int)(close - open - 1), open + 1);
				ok &= check_include(cfg, file, line, name, dir,
						    depth);
			}
		}
		p = *end ? end + 1 : end;
	}
	return ok;
}

/* @include paths are taken relative to the file's own directory. */
static void set_include_dir(struct core_config *cfg)
{
	char *copy = strdup(cfg->path);

	if (!copy) {
		cfg->nomem = true;
		return;
	}
	config_set_include_dir(&cfg->lc, dirname(copy));
	free(copy);
}

/* Line `line` (from 1) of text, trimmed, into buf. */
static void text_line(const char *text, int line, char *buf, size_t len)
{
	const char *p = text, *end;

	for (; *p && line > 1; line--)
		p = *strchrnul(p, '\n') ? strchrnul(p, '\n') + 1 : "";
	while (*p == ' ' || *p == '\t')
		p++;
	end = strchrnul(p, '\n');
	while (end > p && isspace((unsigned char)end[-1]))
		end--;
	snprintf(buf, len, "%.*s", (int)(end - p) > 120 ? 120 : (int)(end - p),
		 p);
}

/* A bare word where a value is due: `ifname = eth0;`. */
static bool unquoted_word(const char *line)
{
	const char *eq = strpbrk(line, "=:");
	const char *v = eq ? eq + 1 : "";

	while (*v == ' ' || *v == '\t')
		v++;
	if (!isalpha((unsigned char)*v) || !strncasecmp(v, "true", 4) ||
	    !strncasecmp(v, "false", 5))
		return false;
	return true;
}

/* What libconfig's "syntax error" was expecting, as far as one can tell. */
static void syntax_hint(const char *line, char *buf, size_t len)
{
	const char *eq = strpbrk(line, "=:");
	const char *v = eq ? eq + 1 : "";

	while (*v == ' ' || *v == '\t')
		v++;
	if (!eq && *line)
		snprintf(buf, len, "expected 'name = value;' (a name is a "
			 "letter or '*' followed by letters, digits, '-', "
			 "'_' or '*')");
	else if (!*v || *v == ';' || *v == ',')
		snprintf(buf, len, "expected a value after '%c'", *eq);
	else if (unquoted_word(line))
		snprintf(buf, len, "expected a value; strings need double "
			 "quotes (\"%.*s\")", (int)strcspn(v, " ;,\t"), v);
	else
		snprintf(buf, len, "expected a value: a number, a \"quoted "
			 "string\", true or false, [ array ], ( list ) or "
			 "{ group }, and ';' after it");
}

/* What libconfig's other parse errors expected instead. */
static const char *parse_error_hint(const char *msg)
{
	static const struct {
		const char *msg, *hint;
	} hints[] = {
		{ "duplicate setting name",
		  ": expected each name once in a group" },
		{ "mismatched element type in array",
		  ": expected [ items of one type ] (a ( list ) may mix "
		  "types)" },
		{ "integer value out of range",
		  ": expected an integer that fits in 64 bits" },
	};

	for (size_t i = 0; msg && i < sizeof(hints) / sizeof(hints[0]); i++)
		if (!strcmp(msg, hints[i].msg))
			return hints[i].hint;
	return "";
}

static void record_parse_error(struct core_config *cfg, const char *text)
{
	const char *file = config_error_file(&cfg->lc);
	const char *msg = config_error_text(&cfg->lc);
	int line = config_error_line(&cfg->lc);
	char src[160], hint[256];

	if (config_error_type(&cfg->lc) == CONFIG_ERR_FILE_IO) {
		add_error(cfg, "%s: cannot read: %s", file ? file : cfg->path,
			  msg);
		return;
	}
	if (!file && text && msg && !strcmp(msg, "syntax error")) {
		text_line(text, line, src, sizeof(src));
		syntax_hint(src, hint, sizeof(hint));
		add_error(cfg, "%s:%d: syntax error: %s, got '%s'", cfg->path,
			  line, hint, src);
		return;
	}
	add_error(cfg, "%s:%d: %s%s", file ? file : cfg->path, line, msg,
		  parse_error_hint(msg));
}

static void read_file(struct core_config *cfg, const char *named_by)
{
	char why[256], *text, *dir;
	int rc = slurp_file(cfg->path, &text, why, sizeof(why));

	if (rc) {
		if (named_by)
			add_error(cfg, "%s (named by %s): %s", cfg->path,
				  named_by, why);
		else
			add_error(cfg, "%s: %s", cfg->path, why);
		return;
	}
	set_include_dir(cfg);
	dir = strdup(cfg->path);
	if (!dir) {
		cfg->nomem = true;
	} else if (check_includes(cfg, cfg->path, text, dirname(dir), 0)) {
		if (config_read_string(&cfg->lc, text) == CONFIG_TRUE)
			cfg->parsed = true;
		else
			record_parse_error(cfg, text);
	}
	free(dir);
	free(text);
}

static void read_embedded(struct core_config *cfg)
{
	if (config_read_string(&cfg->lc, core_default_config) == CONFIG_TRUE)
		cfg->parsed = true;
	else
		record_parse_error(cfg, core_default_config);
}

static void check_version(struct core_config *cfg)
{
	const config_setting_t *s;
	char got[64];

	s = config_setting_get_member(config_root_setting(&cfg->lc),
				      "version");
	if (!s)
		return;
	if (config_setting_type(s) == CONFIG_TYPE_INT ||
	    config_setting_type(s) == CONFIG_TYPE_INT64) {
		if (config_setting_get_int64(s) == CONF_VERSION)
			return;
		snprintf(got, sizeof(got), "%lld",
			 (long long)config_setting_get_int64(s));
	} else {
		snprintf(got, sizeof(got), "a value that is not an integer");
	}
	add_error(cfg, "%s:%d: version: expected %d, got %s (this build reads "
		  "version %d files)", setting_file(cfg, s), setting_line(s),
		  CONF_VERSION, got, CONF_VERSION);
}

/* ---- hosts ---- */

static bool host_matches(const char *glob, const char *hostname)
{
	const char *dot = strchr(hostname, '.');
	char shortname[HOST_NAME_MAX + 1];

	if (!fnmatch(glob, hostname, 0))
		return true;
	if (!dot || (size_t)(dot - hostname) >= sizeof(shortname))
		return false;
	/* "gpu7" in a file still matches "gpu7.cluster.example". */
	snprintf(shortname, sizeof(shortname), "%.*s", (int)(dot - hostname),
		 hostname);
	return !fnmatch(glob, shortname, 0);
}

static int add_host(struct core_config *cfg, config_setting_t *entry,
		    int index)
{
	const config_setting_t *match;
	struct host_entry *hosts;

	match = config_setting_is_group(entry) ?
		config_setting_get_member(entry, "match") : NULL;
	if (!match || config_setting_type(match) != CONFIG_TYPE_STRING) {
		add_error(cfg, "%s:%d: hosts entry %d: expected a group with "
			  "match = \"<hostname glob>\"", setting_file(cfg, entry),
			  setting_line(entry), index + 1);
		return 0;
	}
	hosts = realloc(cfg->hosts, (cfg->nhosts + 1) * sizeof(*hosts));
	if (!hosts)
		return -ENOMEM;
	cfg->hosts = hosts;
	hosts[cfg->nhosts].group = entry;
	hosts[cfg->nhosts].match = config_setting_get_string(match);
	hosts[cfg->nhosts].matches =
		host_matches(hosts[cfg->nhosts].match, cfg->hostname);
	cfg->nhosts++;
	return 0;
}

static int read_hosts(struct core_config *cfg)
{
	config_setting_t *hosts;
	int i, n, rc;

	hosts = config_setting_get_member(config_root_setting(&cfg->lc),
					  "hosts");
	if (!hosts)
		return 0;
	/* `hosts = [];` parses as an empty array; allow it. */
	if (!config_setting_is_list(hosts) &&
	    !(config_setting_is_array(hosts) &&
	      !config_setting_length(hosts))) {
		add_error(cfg, "%s:%d: hosts: expected a list of groups "
			  "( { match = \"<glob>\"; ... }, ... )",
			  setting_file(cfg, hosts), setting_line(hosts));
		return 0;
	}
	n = config_setting_length(hosts);
	for (i = 0; i < n; i++) {
		rc = add_host(cfg, config_setting_get_elem(hosts, i), i);
		if (rc)
			return rc;
	}
	return 0;
}

static int find_hostname(struct core_config *cfg)
{
	const char *env = getenv("NCCL_MESH_HOSTNAME");
	char name[HOST_NAME_MAX + 1];

	if (env && *env) {
		cfg->hostname = strdup(env);
	} else {
		if (gethostname(name, sizeof(name)))
			name[0] = '\0';
		name[sizeof(name) - 1] = '\0';
		cfg->hostname = strdup(name);
	}
	return cfg->hostname ? 0 : -ENOMEM;
}

/* ---- public ---- */

int core_config_open(const char *path, struct core_config **out)
{
	struct core_config *cfg;
	const char *file, *named_by;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	config_init(&cfg->lc);
	file = choose_file(path, &named_by);
	cfg->path = strdup(file ? file : EMBEDDED_NAME);
	rc = cfg->path ? find_hostname(cfg) : -ENOMEM;
	if (rc)
		goto fail;
	if (file)
		read_file(cfg, named_by);
	else
		read_embedded(cfg);
	if (cfg->parsed) {
		check_version(cfg);
		rc = read_hosts(cfg);
		if (rc)
			goto fail;
	}
	rc = resolve_scope(cfg, &cfg->core, core_params);
	if (rc || cfg->nomem)
		goto fail;
	*out = cfg;
	return 0;
fail:
	core_config_free(cfg);
	return -ENOMEM;
}

void core_config_free(struct core_config *cfg)
{
	int i;

	if (!cfg)
		return;
	scope_free(&cfg->core);
	for (i = 0; i < cfg->nmods; i++) {
		scope_free(&cfg->mods[i]->scope);
		free(cfg->mods[i]->name);
		free(cfg->mods[i]);
	}
	free(cfg->mods);
	for (i = 0; i < cfg->npool; i++)
		free(cfg->pool[i]);
	free(cfg->pool);
	free(cfg->hosts);
	msg_free(&cfg->errors);
	msg_free(&cfg->warnings);
	for (i = 0; i < cfg->nmsg_files; i++)
		free(cfg->msg_files[i]);
	config_destroy(&cfg->lc);
	free(cfg->hostname);
	free(cfg->path);
	free(cfg);
}

const char *core_config_path(const struct core_config *cfg)
{
	return cfg->path;
}

const config_t *core_config_parsed(const struct core_config *cfg)
{
	return cfg->parsed ? &cfg->lc : NULL;
}

const char *core_config_hostname(const struct core_config *cfg)
{
	return cfg->hostname;
}

const struct core_scope *core_config_core(const struct core_config *cfg)
{
	return &cfg->core;
}

static struct module_scope *find_module(const struct core_config *cfg,
					const char *module)
{
	int i;

	for (i = 0; i < cfg->nmods; i++)
		if (!strcmp(cfg->mods[i]->name, module))
			return cfg->mods[i];
	return NULL;
}

static void module_scope_free(struct module_scope *ms)
{
	scope_free(&ms->scope);
	free(ms->name);
	free(ms);
}

const struct core_scope *core_config_module(struct core_config *cfg,
					    const char *module,
					    const struct mesh_param *params)
{
	struct module_scope *ms, **mods;

	if (!cfg || !module)
		return NULL;
	ms = find_module(cfg, module);
	if (ms)
		return &ms->scope;
	mods = realloc(cfg->mods, (cfg->nmods + 1) * sizeof(*mods));
	if (!mods)
		return NULL;
	cfg->mods = mods;
	ms = calloc(1, sizeof(*ms));
	if (!ms)
		return NULL;
	ms->name = strdup(module);
	ms->params = params;
	ms->scope.module = ms->name;
	if (!ms->name || resolve_scope(cfg, &ms->scope, params)) {
		module_scope_free(ms);
		return NULL;
	}
	mods[cfg->nmods++] = ms;
	return &ms->scope;
}

const struct core_value *core_scope_get(const struct core_scope *scope,
					const char *name)
{
	int i;

	if (!scope || !name)
		return NULL;
	for (i = 0; i < scope->nvalues; i++)
		if (!strcmp(scope->values[i].param->name, name))
			return &scope->values[i];
	return NULL;
}

int core_config_errors(const struct core_config *cfg,
		       const char *const **msgs)
{
	if (msgs)
		*msgs = (const char *const *)cfg->errors.msgs;
	return cfg->errors.n;
}

int core_config_warnings(const struct core_config *cfg,
			 const char *const **msgs)
{
	if (msgs)
		*msgs = (const char *const *)cfg->warnings.msgs;
	return cfg->warnings.n;
}

const char *core_value_source(const struct core_value *v, char *buf,
			      unsigned len)
{
	if (!len)
		return buf;
	switch (v ? v->source : CORE_SRC_DEFAULT) {
	case CORE_SRC_DEFAULT:
		snprintf(buf, len, "default");
		break;
	case CORE_SRC_FILE:
		snprintf(buf, len, "%s:%d", v->file, v->line);
		break;
	case CORE_SRC_HOST:
		snprintf(buf, len, "host '%s' at %s:%d", v->env, v->file,
			 v->line);
		break;
	case CORE_SRC_ENV:
		snprintf(buf, len, "env %s", v->env);
		break;
	}
	return buf;
}

static void value_messagev(struct core_config *cfg, struct msg_list *list,
			   const char *module, const struct core_value *v,
			   const char *fmt, va_list ap)
{
	char key[256], *what;

	key_name(module, v->param->name, key, sizeof(key));
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

static bool str_listed(const struct str_list *l, const char *s)
{
	for (int i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], s))
			return true;
	return false;
}

static void add_sections(struct core_config *cfg, struct str_list *names,
			 const config_setting_t *container)
{
	int n = container ? config_setting_length(container) : 0;

	for (int i = 0; i < n; i++) {
		const config_setting_t *s = config_setting_get_elem(container, i);
		const char *name = config_setting_name(s);

		if (name && config_setting_is_group(s) &&
		    !in_table(core_params, name) && !str_listed(names, name))
			str_list_add(cfg, names, name);
	}
}

int core_config_sections(struct core_config *cfg, const char ***names)
{
	struct str_list l = { 0 };

	*names = NULL;
	if (!cfg->parsed)
		return 0;
	add_sections(cfg, &l, config_root_setting(&cfg->lc));
	for (int i = 0; i < cfg->nhosts; i++)
		add_sections(cfg, &l, cfg->hosts[i].group);
	*names = l.v;
	return l.n;
}

/* ---- unknown keys and variables ---- */

static bool in_table(const struct mesh_param *params, const char *name)
{
	for (; params && params->name; params++)
		if (!strcmp(params->name, name))
			return true;
	return false;
}

static bool listed(const char *name, const char *const *modules, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (modules[i] && !strcmp(modules[i], name))
			return true;
	return false;
}

struct unknown_check {
	struct core_config *cfg;
	const char *const *modules;
	int nmodules;
	struct str_list top_names;	/* keys valid at top level */
	struct str_list host_names;	/* keys valid in a hosts entry */
};

/* " in hosts entry 'glob'" for messages about an entry, else "". */
static void where_text(const struct host_entry *host, char *buf, size_t len)
{
	if (host)
		snprintf(buf, len, " in hosts entry '%s'", host->match);
	else
		buf[0] = '\0';
}

static void check_module_keys(struct unknown_check *uc,
			      const struct module_scope *ms,
			      const config_setting_t *group,
			      const struct host_entry *host)
{
	struct str_list names = { 0 };
	const config_setting_t *s;
	char where[256], hint[128];
	int i, n = config_setting_length(group);

	for (i = 0; ms->params && ms->params[i].name; i++)
		if (!str_list_add(uc->cfg, &names, ms->params[i].name))
			goto out;
	for (i = 0; i < n; i++) {
		s = config_setting_get_elem(group, i);
		if (in_table(ms->params, config_setting_name(s)))
			continue;
		where_text(host, where, sizeof(where));
		hint_text(nearest(config_setting_name(s), &names, 0), "'",
			  hint, sizeof(hint));
		add_warning(uc->cfg, "%s:%d: unknown key '%s.%s'%s%s",
			    setting_file(uc->cfg, s), setting_line(s), ms->name,
			    config_setting_name(s), where, hint);
	}
out:
	free(names.v);
}

/* True when `s` is a module's section (checked or knowingly skipped). */
static bool check_module_section(struct unknown_check *uc,
				 const config_setting_t *s,
				 const struct host_entry *host)
{
	const char *name = config_setting_name(s);
	const struct module_scope *ms = find_module(uc->cfg, name);

	if (ms) {
		/* Not a group: core_config_module already said so. */
		if (config_setting_is_group(s))
			check_module_keys(uc, ms, s, host);
		return true;
	}
	return listed(name, uc->modules, uc->nmodules);
}

static void check_container(struct unknown_check *uc,
			    const config_setting_t *container,
			    const struct host_entry *host)
{
	const struct str_list *valid = host ? &uc->host_names : &uc->top_names;
	const config_setting_t *s;
	char where[256], hint[128];
	const char *name;
	int i, j, n = config_setting_length(container);

	for (i = 0; i < n; i++) {
		s = config_setting_get_elem(container, i);
		name = config_setting_name(s);
		if (check_module_section(uc, s, host))
			continue;
		for (j = 0; j < valid->n; j++)
			if (!strcmp(valid->v[j], name))
				break;
		if (j < valid->n)
			continue;
		where_text(host, where, sizeof(where));
		hint_text(nearest(name, valid, 0), "'", hint, sizeof(hint));
		add_warning(uc->cfg, "%s:%d: unknown key '%s'%s%s",
			    setting_file(uc->cfg, s), setting_line(s), name,
			    where, hint);
	}
}

static bool build_key_names(struct unknown_check *uc)
{
	struct core_config *cfg = uc->cfg;
	bool ok = true;
	int i;

	for (i = 0; core_params[i].name; i++) {
		ok &= str_list_add(cfg, &uc->top_names, core_params[i].name);
		ok &= str_list_add(cfg, &uc->host_names, core_params[i].name);
	}
	ok &= str_list_add(cfg, &uc->top_names, "version");
	ok &= str_list_add(cfg, &uc->top_names, "hosts");
	ok &= str_list_add(cfg, &uc->host_names, "match");
	/* Module names are valid only as sections but are good hints. */
	for (i = 0; i < cfg->nmods; i++) {
		ok &= str_list_add(cfg, &uc->top_names, cfg->mods[i]->name);
		ok &= str_list_add(cfg, &uc->host_names, cfg->mods[i]->name);
	}
	for (i = 0; i < uc->nmodules; i++) {
		if (!uc->modules[i] || find_module(cfg, uc->modules[i]))
			continue;
		ok &= str_list_add(cfg, &uc->top_names, uc->modules[i]);
		ok &= str_list_add(cfg, &uc->host_names, uc->modules[i]);
	}
	return ok;
}

static void check_file(struct unknown_check *uc)
{
	struct core_config *cfg = uc->cfg;
	int i;

	if (!cfg->parsed || !build_key_names(uc))
		return;
	check_container(uc, config_root_setting(&cfg->lc), NULL);
	for (i = 0; i < cfg->nhosts; i++)
		check_container(uc, cfg->hosts[i].group, &cfg->hosts[i]);
}

/* ---- environment ---- */

struct env_names {
	struct str_list known;		/* every resolvable variable */
	struct str_list skipped;	/* prefixes of unresolved modules */
	struct str_list resolved;	/* prefixes of resolved modules */
	char **owned;
	int nowned;
};

static const char *env_own(struct core_config *cfg, struct env_names *en,
			   const char *module, const char *key)
{
	char name[ENV_NAME_MAX], **owned, *copy;

	core_env_name(module, key, name, sizeof(name));
	owned = realloc(en->owned, (en->nowned + 1) * sizeof(*owned));
	copy = owned ? strdup(name) : NULL;
	if (owned)
		en->owned = owned;
	if (!copy) {
		cfg->nomem = true;
		return NULL;
	}
	owned[en->nowned++] = copy;
	return copy;
}

static bool add_env_name(struct core_config *cfg, struct env_names *en,
			 struct str_list *to, const char *module,
			 const char *key)
{
	const char *name = env_own(cfg, en, module, key);

	return name && str_list_add(cfg, to, name);
}

static bool build_env_names(struct unknown_check *uc, struct env_names *en)
{
	struct core_config *cfg = uc->cfg;
	const struct module_scope *ms;
	bool ok = true;
	int i, j;

	for (i = 0; core_params[i].name; i++)
		ok &= add_env_name(cfg, en, &en->known, NULL,
				   core_params[i].name);
	for (i = 0; i < cfg->nmods; i++) {
		ms = cfg->mods[i];
		for (j = 0; ms->params && ms->params[j].name; j++)
			ok &= add_env_name(cfg, en, &en->known, ms->name,
					   ms->params[j].name);
		ok &= add_env_name(cfg, en, &en->resolved, ms->name, "");
	}
	for (i = 0; i < uc->nmodules; i++) {
		if (uc->modules[i] && !find_module(cfg, uc->modules[i]))
			ok &= add_env_name(cfg, en, &en->skipped,
					   uc->modules[i], "");
	}
	return ok;
}

static size_t longest_prefix(const char *name, const struct str_list *l)
{
	size_t best = 0, n;
	int i;

	for (i = 0; i < l->n; i++) {
		n = strlen(l->v[i]);
		if (n > best && !strncmp(name, l->v[i], n))
			best = n;
	}
	return best;
}

/* Variables the core reads itself, or that tests own. */
static bool env_special(const char *name)
{
	return !strcmp(name, "NCCL_MESH_CONF") ||
	       !strcmp(name, "NCCL_MESH_HOSTNAME") ||
	       !strcmp(name, "NCCL_MESH_LOG") ||
	       !strncmp(name, "NCCL_MESH_TEST_", strlen("NCCL_MESH_TEST_"));
}

static bool env_known(const struct env_names *en, const char *name)
{
	int i;

	for (i = 0; i < en->known.n; i++)
		if (!strcmp(en->known.v[i], name))
			return true;
	/* A module that exists but was not resolved: nothing to check. */
	return longest_prefix(name, &en->skipped) >
	       longest_prefix(name, &en->resolved);
}

static int compare_strings(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* NCCL_MESH_* names in the environment, sorted for stable output. */
static char **env_mesh_names(struct core_config *cfg, int *count)
{
	char **names = NULL, **grown;
	const char *eq;
	int n = 0, i;

	for (i = 0; environ && environ[i]; i++) {
		if (strncmp(environ[i], ENV_PREFIX, strlen(ENV_PREFIX)))
			continue;
		eq = strchrnul(environ[i], '=');
		grown = realloc(names, (n + 1) * sizeof(*names));
		if (!grown)
			break;
		names = grown;
		names[n] = strndup(environ[i], eq - environ[i]);
		if (!names[n])
			break;
		n++;
	}
	if (environ && environ[i])
		cfg->nomem = true;
	if (n)
		qsort(names, n, sizeof(*names), compare_strings);
	*count = n;
	return names;
}

static void check_env(struct unknown_check *uc)
{
	struct env_names en = { 0 };
	char hint[ENV_NAME_MAX + 32];
	char **names;
	int i, n = 0;

	names = build_env_names(uc, &en) ? env_mesh_names(uc->cfg, &n) : NULL;
	for (i = 0; i < n; i++) {
		if (env_special(names[i]) || env_known(&en, names[i]))
			continue;
		hint_text(nearest(names[i], &en.known, strlen(ENV_PREFIX)), "",
			  hint, sizeof(hint));
		add_warning(uc->cfg, "unknown environment variable %s%s",
			    names[i], hint);
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	for (i = 0; i < en.nowned; i++)
		free(en.owned[i]);
	free(en.owned);
	free(en.known.v);
	free(en.skipped.v);
	free(en.resolved.v);
}

void core_config_check_unknown(struct core_config *cfg,
			       const char *const *modules, int nmodules)
{
	struct unknown_check uc = {
		.cfg = cfg,
		.modules = modules,
		.nmodules = modules ? nmodules : 0,
	};

	/* Checking again replaces the previous check's warnings. */
	msg_drop_checked(&cfg->warnings);
	cfg->checking = true;
	check_file(&uc);
	check_env(&uc);
	cfg->checking = false;
	free(uc.top_names.v);
	free(uc.host_names.v);
}
