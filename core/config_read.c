/* SPDX-License-Identifier: MIT */
/*
 * Which config file is read, and reading it: opened without blocking and
 * required to be a regular file (as is every file it includes), so a FIFO
 * or a device in its place is an error instead of a hang of NCCL's init;
 * libconfig's parse errors told with what was expected.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_priv.h"

#define SYSTEM_CONF "/etc/nccl-mesh.conf"
#define CONF_VERSION 1

/* ---- the file ---- */

static bool file_exists(const char *path)
{
	return access(path, F_OK) == 0;
}

/* Names the file, or NULL for the embedded default. */
const char *cfg_choose_file(const char *path, const char **named_by)
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
		cfg_error(cfg, "%s:%d: @include \"%s\": expected at most %d "
			  "levels of @include", file, line, name,
			  INCLUDE_DEPTH_MAX);
		free(path);
		return false;
	}
	if (slurp_file(path, &text, why, sizeof(why))) {
		cfg_error(cfg, "%s:%d: @include \"%s\": %s", file, line, path,
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
		cfg_error(cfg, "%s: cannot read: %s", file ? file : cfg->path,
			  msg);
		return;
	}
	if (!file && text && msg && !strcmp(msg, "syntax error")) {
		text_line(text, line, src, sizeof(src));
		syntax_hint(src, hint, sizeof(hint));
		cfg_error(cfg, "%s:%d: syntax error: %s, got '%s'", cfg->path,
			  line, hint, src);
		return;
	}
	cfg_error(cfg, "%s:%d: %s%s", file ? file : cfg->path, line, msg,
		  parse_error_hint(msg));
}

void cfg_read_file(struct core_config *cfg, const char *named_by)
{
	char why[256], *text, *dir;
	int rc = slurp_file(cfg->path, &text, why, sizeof(why));

	if (rc) {
		if (named_by)
			cfg_error(cfg, "%s (named by %s): %s", cfg->path,
				  named_by, why);
		else
			cfg_error(cfg, "%s: %s", cfg->path, why);
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

void cfg_read_embedded(struct core_config *cfg)
{
	if (config_read_string(&cfg->lc, core_default_config) == CONFIG_TRUE)
		cfg->parsed = true;
	else
		record_parse_error(cfg, core_default_config);
}

void cfg_check_version(struct core_config *cfg)
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
	cfg_error(cfg, "%s:%d: version: expected %d, got %s (this build reads "
		  "version %d files)", cfg_setting_file(cfg, s), cfg_setting_line(s),
		  CONF_VERSION, got, CONF_VERSION);
}
