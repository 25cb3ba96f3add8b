/* SPDX-License-Identifier: MIT */
/*
 * Which config file is read, and reading it: the file and every file it
 * includes read here, without blocking, required to be regular files and
 * under one budget, so that no config hangs or stalls NCCL's init;
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
#ifdef CORE_SYSCONF_PATH
	if (strcmp(CORE_SYSCONF_PATH, SYSTEM_CONF) &&
	    file_exists(CORE_SYSCONF_PATH))
		return CORE_SYSCONF_PATH;
#endif
	return NULL;
}

/*
 * One budget for reading a config, its file and every file it includes
 * together (docs/config.md says why these numbers).  Bytes and files bound
 * the reading; settings bound libconfig's parse, which looks for a
 * duplicate name on every setting it adds, so a group of n settings costs
 * n * n / 2 name comparisons.
 */
#define CONF_BYTES_MAX (1 << 20)
#define CONF_FILES_MAX 64
#define INCLUDE_DEPTH_MAX 10		/* libconfig's own limit */
#define CONF_NEST_MAX 32
#define GROUP_SETTINGS_MAX 1024
#define CONF_SETTINGS_MAX 16384

/*
 * Reads a whole config file, at most `max` bytes.  Opened non-blocking and
 * checked to be a regular file first: a FIFO or a device in the config's
 * place must give an error, not hang NCCL's init.  Read to its end rather
 * than to the size stat gives: files under /proc say 0.  Returns 0 or
 * -errno with `why` set.
 */
static int slurp_file(const char *path, size_t max, char **text, size_t *len,
		      char *why, size_t whylen)
{
	size_t got = 0, cap = 4096;
	struct stat st;
	char *buf = NULL, *more;
	ssize_t n;
	int fd, rc = 0;

	*text = NULL;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0 || fstat(fd, &st)) {
		rc = -errno;
		snprintf(why, whylen, "cannot read: %s", strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		snprintf(why, whylen, "cannot read: %s",
			 S_ISDIR(st.st_mode) ? strerror(EISDIR) :
			 S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file" :
			 "not a regular file");
	} else if (st.st_size > 0 && (size_t)st.st_size < max) {
		cap = (size_t)st.st_size + 2;	/* + EOF's read + NUL */
	}
	while (!rc) {
		if (got + 1 >= cap || !buf) {
			if (buf)
				cap = cap > max / 2 ? max + 2 : 2 * cap;
			more = realloc(buf, cap);
			if (!more) {
				rc = -ENOMEM;
				break;
			}
			buf = more;
		}
		n = read(fd, buf + got, cap - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			snprintf(why, whylen, "cannot read: %s", strerror(-rc));
		} else if (n == 0) {
			break;
		} else if ((got += (size_t)n) > max) {
			rc = -EFBIG;
			snprintf(why, whylen, "cannot read: more than %d bytes "
				 "in the config and its @include files",
				 CONF_BYTES_MAX);
		}
	}
	if (fd >= 0)
		close(fd);
	if (rc) {
		free(buf);
		return rc;
	}
	buf[got] = '\0';
	*text = buf;
	*len = got;
	return 0;
}

/*
 * The config with every @include replaced by the file it names, found as
 * libconfig 1.5's scanner finds it: `@include "name"` at the start of a
 * line outside comments and strings, `\\` and `\"` the name's only escapes.
 * libconfig then parses this text and opens nothing itself, so every file
 * is read here, non-blocking and under the budget; lines map back to the
 * files (cfg_map_line).  Settings are counted as the scanner's '=' and ':'
 * outside comments and strings, one per named setting.
 */
enum lex_state { LEX_CODE, LEX_COMMENT, LEX_STRING };

struct expand {
	struct core_config *cfg;
	char *out;
	size_t len, cap;
	int out_line;
	size_t bytes;			/* read, of CONF_BYTES_MAX */
	int files, settings, nest;
	int group[CONF_NEST_MAX + 1];	/* settings per open group */
	enum lex_state state;
	bool failed;
};

static void expand_fail(struct expand *x, const char *file, int line,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void expand_fail(struct expand *x, const char *file, int line,
			const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line)
		cfg_error(x->cfg, "%s:%d: %s", file, line, msg);
	else
		cfg_error(x->cfg, "%s: %s", file, msg);
	x->failed = true;
}

/* The expanded text's line out_line and on are file's from `line`. */
static void add_seg(struct expand *x, const char *file, int line)
{
	struct core_config *cfg = x->cfg;
	struct cfg_seg *segs;
	const char *kept = cfg_keep(cfg, file);

	segs = kept ? realloc(cfg->segs, (cfg->nsegs + 1) * sizeof(*segs)) :
		NULL;
	if (!segs) {
		cfg->nomem = x->failed = true;
		return;
	}
	cfg->segs = segs;
	segs[cfg->nsegs++] = (struct cfg_seg){ x->out_line, kept, line };
}

/* The whole text fits: the budget bounds what the files hold. */
static void emit(struct expand *x, char c)
{
	x->out[x->len++] = c;
	if (c == '\n')
		x->out_line++;
}

/* Length of `[ \t]*@include[ \t]+"` at p, or 0. */
static size_t include_open(const char *p, const char *end)
{
	const char *q = p;

	while (q < end && (*q == ' ' || *q == '\t'))
		q++;
	if (end - q < 8 || memcmp(q, "@include", 8))
		return 0;
	q += 8;
	if (q == end || (*q != ' ' && *q != '\t'))
		return 0;
	while (q < end && (*q == ' ' || *q == '\t'))
		q++;
	return q < end && *q == '"' ? (size_t)(q + 1 - p) : 0;
}

static void expand_file(struct expand *x, const char *path, int depth,
			const char *from, int from_line);

/* Counts a named setting against the budget. */
static void count_setting(struct expand *x, const char *file, int line)
{
	if (++x->group[x->nest] > GROUP_SETTINGS_MAX)
		expand_fail(x, file, line, "expected at most %d settings in "
			    "one group", GROUP_SETTINGS_MAX);
	else if (++x->settings > CONF_SETTINGS_MAX)
		expand_fail(x, file, line, "expected at most %d settings in "
			    "the config and its @include files",
			    CONF_SETTINGS_MAX);
}

/*
 * The @include name that starts at *pp into name, read as libconfig reads
 * it; false (the error told) for a name libconfig would read otherwise
 * than it is written, or not at all.
 */
static bool include_name(struct expand *x, const char *file, int *line,
			 const char **pp, const char *end, char *name,
			 size_t size)
{
	const char *p = *pp;
	size_t n = 0;

	for (; p < end && *p != '"'; p++) {
		/* libconfig drops a lone '\\' (writing it on stdout) */
		if (*p == '\\' && (p + 1 == end || (p[1] != '\\' &&
						    p[1] != '"'))) {
			expand_fail(x, file, *line, "@include: expected \\\\ "
				    "or \\\" after '\\' in the file name");
			return false;
		}
		p += *p == '\\';
		*line += *p == '\n';
		if (!*p || n + 1 == size) {
			expand_fail(x, file, *line, "@include: expected a file "
				    "name of at most %zu bytes, without NUL",
				    size - 1);
			return false;
		}
		name[n++] = *p;
	}
	if (p == end) {
		expand_fail(x, file, *line, "@include: expected '\"' after "
			    "the file name");
		return false;
	}
	name[n] = '\0';
	*pp = p + 1;
	return true;
}

/* The @include whose name starts at *pp: the file it names in its place. */
static void expand_include(struct expand *x, const char *file, int *line,
			   const char **pp, const char *end, int depth)
{
	char name[PATH_MAX], *path;

	if (!include_name(x, file, line, pp, end, name, sizeof(name)))
		return;
	/* Relative to the config's directory, as libconfig takes it; a
	 * name from '/' as it is (libconfig 1.5 would put the directory
	 * before that too, naming a file nobody meant). */
	if (asprintf(&path, "%s%s%s", name[0] == '/' ? "" :
		     x->cfg->include_dir, name[0] == '/' ? "" : "/",
		     name) < 0) {
		x->cfg->nomem = x->failed = true;
		return;
	}
	expand_file(x, path, depth + 1, file, *line);
	free(path);
	if (!x->failed && x->state != LEX_CODE)
		expand_fail(x, file, *line, "@include \"%s\": expected the "
			    "file's last %s closed in it", name,
			    x->state == LEX_STRING ? "string" : "comment");
	if (x->failed)
		return;
	/* The rest of the line follows on a line of its own, so it must
	 * not start a second @include (libconfig takes one per line). */
	if (x->len && x->out[x->len - 1] != '\n')
		emit(x, '\n');
	if (include_open(*pp, strchrnul(*pp, '\n')))
		expand_fail(x, file, *line, "expected one @include per line");
	else
		add_seg(x, file, *line);
}

/*
 * libconfig reads "\x00" in a string as a NUL and drops it, so "=lo\x00zz"
 * would become "=lozz", a value nobody wrote: an error instead.  p is at a
 * string's backslash.
 */
static bool escaped_nul(const char *p, const char *end)
{
	return end - p >= 4 && (p[1] == 'x' || p[1] == 'X') && p[2] == '0' &&
	       p[3] == '0';
}

static void expand_text(struct expand *x, const char *file, const char *text,
			size_t len, int depth)
{
	const char *p = text, *end = text + len;
	bool bol = true;	/* libconfig's scanner at a line's start */
	int line = 1;
	size_t k;

	add_seg(x, file, 1);
	while (p < end && !x->failed) {
		char c = *p;

		if (x->state == LEX_CODE && bol &&
		    (k = include_open(p, end))) {
			p += k;
			expand_include(x, file, &line, &p, end, depth);
			bol = false;
			continue;
		}
		if (x->state == LEX_COMMENT && c == '*' && p + 1 < end &&
		    p[1] == '/') {
			x->state = LEX_CODE;
			emit(x, *p++);
		} else if (x->state == LEX_STRING && c == '\\' && p + 1 < end) {
			/* told, and read on: the rest is checked too */
			if (escaped_nul(p, end))
				cfg_error(x->cfg, "%s:%d: expected text in a "
					  "string, got \"\\x00\", a NUL (which "
					  "libconfig would drop, leaving a "
					  "string nobody wrote)", file, line);
			emit(x, *p++);
		} else if (x->state == LEX_STRING && c == '"') {
			x->state = LEX_CODE;
		} else if (x->state != LEX_CODE) {
			/* inside a comment or string: copied */
		} else if (c == '"') {
			x->state = LEX_STRING;
		} else if (c == '/' && p + 1 < end && p[1] == '*') {
			x->state = LEX_COMMENT;
			emit(x, *p++);
		} else if (c == '#' || (c == '/' && p + 1 < end && p[1] == '/')) {
			while (p + 1 < end && p[1] != '\n')
				emit(x, *p++);
		} else if (c == '=' || c == ':') {
			count_setting(x, file, line);
		} else if (c == '{' || c == '(' || c == '[') {
			if (x->nest == CONF_NEST_MAX)
				expand_fail(x, file, line, "expected groups, "
					    "lists and arrays nested at most "
					    "%d deep", CONF_NEST_MAX);
			else
				x->group[++x->nest] = 0;
		} else if ((c == '}' || c == ')' || c == ']') && x->nest) {
			x->nest--;
		}
		bol = *p == '\n';
		line += *p == '\n';
		emit(x, *p++);
	}
}

/* A NUL would end libconfig's text there, dropping the rest unread. */
static int nul_line(const char *text, size_t len)
{
	const char *nul = memchr(text, '\0', len);
	int line = 1;

	if (!nul)
		return 0;
	for (const char *p = text; p < nul; p++)
		line += *p == '\n';
	return line;
}

static void expand_file(struct expand *x, const char *path, int depth,
			const char *from, int from_line)
{
	char why[256], *text;
	size_t len;
	int line;

	if (depth > INCLUDE_DEPTH_MAX) {
		expand_fail(x, from, from_line, "@include \"%s\": expected at "
			    "most %d levels of @include", path,
			    INCLUDE_DEPTH_MAX);
	} else if (++x->files > CONF_FILES_MAX) {
		expand_fail(x, from, from_line, "@include \"%s\": expected at "
			    "most %d files read for one config (each "
			    "@include counts)", path, CONF_FILES_MAX);
	} else if (slurp_file(path, CONF_BYTES_MAX - x->bytes, &text, &len,
			      why, sizeof(why))) {
		expand_fail(x, from, from_line, "@include \"%s\": %s", path,
			    why);
	} else {
		x->bytes += len;
		line = nul_line(text, len);
		if (line)
			expand_fail(x, path, line, "expected text, got a NUL "
				    "byte");
		else
			expand_text(x, path, text, len, depth);
		free(text);
	}
}

/* The config's text with its @include files in place, or NULL (told). */
static char *expand_config(struct core_config *cfg, const char *top,
			   size_t toplen)
{
	struct expand x = { .cfg = cfg, .out_line = 1 };

	/* room for every file's bytes and a newline after each */
	x.cap = CONF_BYTES_MAX + CONF_FILES_MAX + 1;
	x.out = malloc(x.cap);
	x.files = 1;
	x.bytes = toplen;
	if (!x.out) {
		cfg->nomem = true;
		return NULL;
	}
	expand_text(&x, cfg->path, top, toplen, 0);
	if (x.failed) {
		free(x.out);
		return NULL;
	}
	x.out[x.len] = '\0';
	return x.out;
}

/* The file and line of the expanded text's line `line`. */
int cfg_map_line(const struct core_config *cfg, int line, const char **file)
{
	int i = cfg->nsegs - 1;

	while (i > 0 && cfg->segs[i].out_line > line)
		i--;
	if (i < 0 || line <= 0) {
		*file = cfg->path;
		return line;
	}
	*file = cfg->segs[i].file;
	return cfg->segs[i].line + line - cfg->segs[i].out_line;
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
	const char *msg = config_error_text(&cfg->lc), *file;
	int line = cfg_map_line(cfg, config_error_line(&cfg->lc), &file);
	char src[160], hint[256];

	if (text && msg && !strcmp(msg, "syntax error")) {
		text_line(text, config_error_line(&cfg->lc), src, sizeof(src));
		syntax_hint(src, hint, sizeof(hint));
		cfg_error(cfg, "%s:%d: syntax error: %s, got '%s'", file, line,
			  hint, src);
		return;
	}
	cfg_error(cfg, "%s:%d: %s%s", file, line, msg ? msg : "parse error",
		  parse_error_hint(msg));
}

/* @include names are taken relative to the config file's directory. */
static bool set_include_dir(struct core_config *cfg)
{
	char *copy = strdup(cfg->path);

	cfg->include_dir = copy ? strdup(dirname(copy)) : NULL;
	free(copy);
	if (!cfg->include_dir)
		cfg->nomem = true;
	return cfg->include_dir;
}

static void parse(struct core_config *cfg, const char *text)
{
	/* Every @include is expanded already; should libconfig still see
	 * one, it fails to open it below a file instead of opening it. */
	config_set_include_dir(&cfg->lc, "/dev/null");
	if (config_read_string(&cfg->lc, text) == CONFIG_TRUE)
		cfg->parsed = true;
	else
		record_parse_error(cfg, text);
}

void cfg_read_file(struct core_config *cfg, const char *named_by)
{
	char why[256], *text, *all;
	size_t len;
	int rc = slurp_file(cfg->path, CONF_BYTES_MAX, &text, &len, why,
			    sizeof(why));

	if (!rc && !len) {
		/* /proc/self/mem reads as nothing and so would give the
		 * defaults without a word; no file at all is the way to
		 * ask for them. */
		snprintf(why, sizeof(why), "cannot read: no text in it "
			 "(expected at least 'version = 1;')");
		rc = -ENODATA;
		free(text);
	}
	if (rc) {
		if (named_by)
			cfg_error(cfg, "%s (named by %s): %s", cfg->path,
				  named_by, why);
		else
			cfg_error(cfg, "%s: %s", cfg->path, why);
		return;
	}
	if (nul_line(text, len))
		cfg_error(cfg, "%s:%d: expected text, got a NUL byte",
			  cfg->path, nul_line(text, len));
	else if (set_include_dir(cfg) && (all = expand_config(cfg, text, len))) {
		parse(cfg, all);
		free(all);
	}
	free(text);
}

void cfg_read_embedded(struct core_config *cfg)
{
	parse(cfg, core_default_config);
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
		  "version %d files)", cfg_setting_file(cfg, s),
		  cfg_setting_line(cfg, s), CONF_VERSION, got, CONF_VERSION);
}

/* libconfig parsed the text with its @include files expanded: its lines
 * map back to theirs. */
const char *cfg_setting_file(const struct core_config *cfg,
				const config_setting_t *s)
{
	const char *file;

	cfg_map_line(cfg, config_setting_source_line(s), &file);
	return file;
}

int cfg_setting_line(const struct core_config *cfg,
		     const config_setting_t *s)
{
	const char *file;

	return cfg_map_line(cfg, config_setting_source_line(s), &file);
}
