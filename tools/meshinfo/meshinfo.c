/* SPDX-License-Identifier: MIT */
/*
 * meshinfo: preflight check of an nccl-mesh installation.  Builds the
 * process state exactly as the plugin does (config, modules, rails) and
 * reports it, or validates one config file (--check).
 */
#include <errno.h>
#include <getopt.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "meshinfo.h"

#include "layer.h"
#include "netaddr.h"

enum meshinfo_mode {
	MODE_REPORT,
	MODE_CHECK,
};

struct meshinfo_opts {
	enum meshinfo_mode mode;
	bool json;
	bool verbose;
	const char *config;
};

/*
 * The core logs every problem once as it finds it.  meshinfo shows the
 * same problems from the state (config messages, module reasons), so it
 * keeps the logged warnings aside and later prints only those the state
 * does not already explain.  NCCL's logger type carries no context
 * pointer, hence the file-scope list.
 */
static struct meshinfo_strv logged_warnings;

int meshinfo_strv_add(struct meshinfo_strv *v, const char *text)
{
	char **items = realloc(v->items, (v->n + 1) * sizeof(*items));
	char *copy;

	if (!items)
		return -ENOMEM;
	v->items = items;
	copy = strdup(text);
	if (!copy)
		return -ENOMEM;
	v->items[v->n++] = copy;
	return 0;
}

void meshinfo_strv_free(struct meshinfo_strv *v)
{
	for (int i = 0; i < v->n; i++)
		free(v->items[i]);
	free(v->items);
	v->items = NULL;
	v->n = 0;
}

/*
 * "NET/Mesh: x" -> "x", "NET/Mesh/tcp-xdc: x" -> "tcp-xdc: x": the tag
 * tells NCCL's log apart from NCCL's own lines, here it is noise.
 */
const char *meshinfo_untagged(const char *line)
{
	static const char tag[] = "NET/Mesh";
	size_t n = strlen(tag);

	if (strncmp(line, tag, n))
		return line;
	if (line[n] == '/')
		return line + n + 1;
	if (line[n] == ':' && line[n + 1] == ' ')
		return line + n + 2;
	return line;
}

static void capture_log(ncclDebugLogLevel level, unsigned long flags,
			const char *file, int line, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	size_t len;

	(void)flags;
	(void)file;
	(void)line;
	if (level != NCCL_LOG_WARN)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	len = strlen(buf);
	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		buf[--len] = '\0';
	if (len && meshinfo_strv_add(&logged_warnings, meshinfo_untagged(buf)))
		fprintf(stderr, "meshinfo: out of memory keeping a log line\n");
}

const struct core_scope *meshinfo_scope(const struct meshinfo *mi, int i)
{
	const struct core_state *st = mi->st;

	if (i == 0)
		return core_config_core(st->cfg);
	for (int m = 0; m < st->nmodules; m++) {
		if (!st->modules[m].params)
			continue;
		if (--i == 0)
			return st->modules[m].params;
	}
	return NULL;
}

const char *meshinfo_path_module(const struct meshinfo *mi,
				 const struct core_rail *rail,
				 enum core_path_class cls, const char **class)
{
	const char *const *names;
	int n = core_path_preference(mi->st->cfg, cls, &names);
	const struct core_module *layer = core_layer_module(mi->st);

	*class = core_path_class_name(cls);
	for (int i = 0; i < n; i++)
		if (core_rail_member(rail, names[i]))
			return names[i];
	/* what no member serves, the layered module (relay) carries */
	if (layer)
		*class = "relayed";
	return layer ? layer->name : NULL;
}

/* The layered module's view (relay: the relays and routes from here). */
char *meshinfo_layer_report(const struct meshinfo *mi)
{
	const struct core_module *m = core_layer_module(mi->st);
	size_t cap = 16384;
	char *buf;

	if (!m || !(buf = calloc(1, cap)))
		return NULL;
	core_layer_bind(mi->st);
	m->desc->report(m->mctx, buf, cap);
	core_layer_unbind(mi->st);
	return buf;
}

int meshinfo_ncolumns(const struct meshinfo *mi)
{
	return mi->ndcs * mi->st->nrails;
}

uint64_t meshinfo_column_fabric_id(const struct meshinfo *mi, int col)
{
	const struct core_state *st = mi->st;
	uint64_t dc = mi->dcs[col / st->nrails];

	return core_fabric_id(dc, st->max_rails,
			      st->rails[col % st->nrails].rail);
}

const char *meshinfo_addr_text(const struct mesh_addr *a, char *buf,
			       size_t len)
{
	char ip[UTIL_ADDR_STRLEN];

	util_addr_str(a, ip, sizeof(ip));
	if (a->prefix_len)
		snprintf(buf, len, "%s/%u", ip, (unsigned)a->prefix_len);
	else
		snprintf(buf, len, "%s", ip);
	return buf;
}

static int add_dc(struct meshinfo *mi, uint64_t dc)
{
	uint64_t *dcs;

	for (int i = 0; i < mi->ndcs; i++)
		if (mi->dcs[i] == dc)
			return 0;
	dcs = realloc(mi->dcs, (mi->ndcs + 1) * sizeof(*dcs));
	if (!dcs)
		return -ENOMEM;
	mi->dcs = dcs;
	mi->dcs[mi->ndcs++] = dc;
	return 0;
}

static int compare_dc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static int add_host_dcs(struct meshinfo *mi, const config_t *conf)
{
	config_setting_t *hosts = config_lookup(conf, "hosts");
	int n = hosts ? config_setting_length(hosts) : 0;

	for (int i = 0; i < n; i++) {
		config_setting_t *entry = config_setting_get_elem(hosts, i);
		long long dc;

		/* A malformed entry is already a config error of the core. */
		if (!config_setting_is_group(entry) ||
		    !config_setting_lookup_int64(entry, "dc", &dc) || dc < 0)
			continue;
		if (add_dc(mi, (uint64_t)dc))
			return -ENOMEM;
	}
	return 0;
}

/*
 * The datacenters a peer may be in: ours and every dc a hosts entry sets,
 * from the file the core parsed (read once: it may be no regular file).
 */
static int collect_dcs(struct meshinfo *mi)
{
	const config_t *conf = core_config_parsed(mi->st->cfg);
	int ret = 0;

	if (add_dc(mi, mi->st->dc))
		return -ENOMEM;
	if (conf)
		ret = add_host_dcs(mi, conf);
	qsort(mi->dcs, mi->ndcs, sizeof(*mi->dcs), compare_dc);
	return ret;
}

static bool mentions(const char *line, const char *msg)
{
	return msg[0] && (strstr(line, msg) || strstr(msg, line));
}

static bool explained_by_state(const struct meshinfo *mi, const char *line)
{
	const struct core_state *st = mi->st;
	const char *const *msgs;
	int n;

	n = core_config_errors(st->cfg, &msgs);
	for (int i = 0; i < n; i++)
		if (mentions(line, msgs[i]))
			return true;
	n = core_config_warnings(st->cfg, &msgs);
	for (int i = 0; i < n; i++)
		if (mentions(line, msgs[i]))
			return true;
	for (int i = 0; i < st->nmodules; i++)
		if (mentions(line, st->modules[i].reason))
			return true;
	return false;
}

static int keep_unexplained_log(struct meshinfo *mi)
{
	for (int i = 0; i < logged_warnings.n; i++) {
		const char *line = logged_warnings.items[i];

		if (!explained_by_state(mi, line) &&
		    meshinfo_strv_add(&mi->log, line))
			return -ENOMEM;
	}
	meshinfo_strv_free(&logged_warnings);
	return 0;
}

static bool warned_already(const struct meshinfo *mi, const char *reason)
{
	const char *const *msgs;
	int n = core_config_warnings(mi->st->cfg, &msgs);

	for (int i = 0; i < n; i++)
		if (mentions(msgs[i], reason))
			return true;
	return false;
}

/* "file:line: " of the `modules` setting, "" when it is not from a file. */
static void modules_location(const struct meshinfo *mi, char *buf, size_t len)
{
	const struct core_value *v =
		core_scope_get(core_config_core(mi->st->cfg), "modules");

	buf[0] = '\0';
	if (v && v->file &&
	    (v->source == CORE_SRC_FILE || v->source == CORE_SRC_HOST))
		snprintf(buf, len, "%s:%d: ", v->file, v->line);
}

/*
 * A module that failed is a warning while others still load (the status
 * says whether any rail is left); under --check it also means the
 * module's section went unchecked.  Under --check a module without
 * devices is a warning too: --check judges the file, but init on this
 * host would go without that module (the report shows it as a status).
 */
static int note_module_failures(struct meshinfo *mi)
{
	char loc[512], buf[1536];

	modules_location(mi, loc, sizeof(loc));
	for (int i = 0; i < mi->st->nmodules; i++) {
		const struct core_module *m = &mi->st->modules[i];

		if (mi->check_file && m->status == CORE_MODULE_NODEV) {
			snprintf(buf, sizeof(buf), "%smodule %s on this host: "
				 "%s (this host's state, not an error of the "
				 "file)", loc, m->name, m->reason);
			if (meshinfo_strv_add(&mi->module_warnings, buf))
				return -ENOMEM;
			continue;
		}
		/* Failed on its parameters: the config errors say which. */
		if (m->status != CORE_MODULE_FAILED || m->param_errors ||
		    warned_already(mi, m->reason))
			continue;
		snprintf(buf, sizeof(buf), "%smodule %s not loaded%s: %s", loc,
			 m->name,
			 mi->check_file ? ", its keys were not checked" : "",
			 m->reason);
		if (meshinfo_strv_add(&mi->module_warnings, buf))
			return -ENOMEM;
	}
	return 0;
}


void meshinfo_print_diagnostic(FILE *out, const char *kind, const char *msg)
{
	size_t flen;
	long line;
	size_t loc = core_msg_location(msg, &flen, &line);

	fprintf(out, "%.*s%s: %s\n", (int)loc, msg, kind, msg + loc);
}

static int gather(struct meshinfo *mi, const struct meshinfo_opts *o)
{
	if (!o->verbose)
		core_log_set_nccl(capture_log);
	else
		core_log_set_nccl(NULL);
	mi->check_file = o->mode == MODE_CHECK ? o->config : NULL;
	mi->st = core_state_build(o->config);
	if (!mi->st)
		return -ENOMEM;
	if (collect_dcs(mi) || keep_unexplained_log(mi) ||
	    note_module_failures(mi))
		return -ENOMEM;
	return 0;
}

static void meshinfo_free(struct meshinfo *mi)
{
	if (mi->st)
		core_state_free(mi->st);
	free(mi->dcs);
	meshinfo_strv_free(&mi->log);
	meshinfo_strv_free(&mi->module_warnings);
	meshinfo_strv_free(&logged_warnings);
}

struct diagnostic {
	const char *kind;
	const char *msg;
	int order;		/* keeps the sort stable */
	int file;		/* rank of its file, first seen first */
	long line;		/* LONG_MAX: no location */
};

struct diagnostics {
	struct diagnostic *v;
	int n;
	const char *files[16];
	size_t file_len[16];
	int nfiles;
};

static int file_rank(struct diagnostics *d, const char *msg, size_t len)
{
	for (int i = 0; i < d->nfiles; i++)
		if (d->file_len[i] == len && !strncmp(d->files[i], msg, len))
			return i;
	if (d->nfiles == 16)
		return 16;
	d->files[d->nfiles] = msg;
	d->file_len[d->nfiles] = len;
	return d->nfiles++;
}

static void add_diagnostics(struct diagnostics *d, const char *kind,
			    const char *const *msgs, int n)
{
	for (int i = 0; i < n; i++) {
		struct diagnostic *x = &d->v[d->n];
		size_t flen;
		long line;

		x->kind = kind;
		x->msg = msgs[i];
		x->order = d->n++;
		x->file = 17;
		x->line = LONG_MAX;
		if (core_msg_location(msgs[i], &flen, &line)) {
			x->line = line;
			x->file = file_rank(d, msgs[i], flen);
		}
	}
}

static int compare_diagnostics(const void *a, const void *b)
{
	const struct diagnostic *x = a, *y = b;

	if (x->file != y->file)
		return x->file - y->file;
	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	return x->order - y->order;
}

/* Errors and warnings of every origin, in one list sorted by line. */
static void print_sorted(FILE *out, const struct meshinfo *mi,
			 const char *const *errs, int nerr,
			 const char *const *warns, int nwarn)
{
	struct diagnostics d = { 0 };
	int total = nerr + nwarn + mi->module_warnings.n + mi->log.n;

	d.v = calloc((size_t)total + 1, sizeof(*d.v));
	if (!d.v) {
		fprintf(out, "meshinfo: out of memory\n");
		return;
	}
	add_diagnostics(&d, "error", errs, nerr);
	add_diagnostics(&d, "warning", warns, nwarn);
	add_diagnostics(&d, "warning",
			(const char *const *)mi->module_warnings.items,
			mi->module_warnings.n);
	add_diagnostics(&d, "warning", (const char *const *)mi->log.items,
			mi->log.n);
	qsort(d.v, (size_t)d.n, sizeof(*d.v), compare_diagnostics);
	for (int i = 0; i < d.n; i++)
		meshinfo_print_diagnostic(out, d.v[i].kind, d.v[i].msg);
	free(d.v);
}

/* --check: diagnostics on stderr, the verdict on stdout. */
static int run_check(const struct meshinfo *mi, bool json)
{
	const char *const *errs, *const *warns;
	int nerr = core_config_errors(mi->st->cfg, &errs);
	int nwarn = core_config_warnings(mi->st->cfg, &warns);

	/* A config without errors can still leave init nothing to use
	 * (modules that load but find no device here): that is for
	 * `meshinfo` to say, --check judges the file.  But every value init
	 * would refuse, a list of which no module loads included, is an
	 * error above. */
	if (json) {
		meshinfo_print_check_json(stdout, mi, nerr == 0);
		return nerr ? 1 : 0;
	}
	print_sorted(stderr, mi, errs, nerr, warns, nwarn);
	if (nerr) {
		fprintf(stderr, "%s: %d error%s\n", mi->check_file, nerr,
			nerr == 1 ? "" : "s");
		return 1;
	}
	printf("%s: OK\n", mi->check_file);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: meshinfo [--json] [--config FILE] [-v]\n"
		"       meshinfo --check FILE [--json]\n"
		"       meshinfo --cluster ... (meshinfo --cluster --help)\n"
		"\n"
		"Shows what the nccl-mesh NCCL plugin would do on this host:\n"
		"modules, rails, fabricIds, path classes and the effective\n"
		"config with the source of every value.\n"
		"\n"
		"  --json         print one JSON document instead of text\n"
		"  --config FILE  use FILE instead of NCCL_MESH_CONF or the\n"
		"                 default config\n"
		"  --check FILE   validate FILE (syntax, values, unknown keys)\n"
		"                 and exit 1 if it has errors\n"
		"  -v, --verbose  let the core log to stderr as it works\n"
		"  -V, --version  print the version and exit\n"
		"  -h, --help     print this help and exit\n"
		"\n"
		"Exit status: 0 usable, 1 not usable (config errors or no\n"
		"rails) or check failed, 2 bad usage.\n");
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct meshinfo_opts *o)
{
	enum { OPT_JSON = 256, OPT_CHECK, OPT_CONFIG };
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, OPT_JSON },
		{ "check", required_argument, NULL, OPT_CHECK },
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *check = NULL;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":vVh", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_CHECK:
			check = optarg;
			break;
		case OPT_CONFIG:
			o->config = optarg;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'V':
			printf("meshinfo (nccl-mesh) %s, module ABI %d.%d\n",
			       MESHINFO_VERSION, MESH_MODULE_ABI_MAJOR,
			       MESH_MODULE_ABI_MINOR);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fprintf(stderr, "meshinfo: %s needs an argument\n",
				argv[optind - 1]);
			usage(stderr);
			return 2;
		default:
			if (optopt)
				fprintf(stderr,
					"meshinfo: unknown option '-%c'\n",
					optopt);
			else
				fprintf(stderr,
					"meshinfo: unknown option '%s'\n",
					argv[optind - 1]);
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "meshinfo: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}
	if (check && o->config) {
		fprintf(stderr,
			"meshinfo: --check and --config both name a file\n");
		usage(stderr);
		return 2;
	}
	if (check) {
		o->mode = MODE_CHECK;
		o->config = check;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct meshinfo_opts opts = { .mode = MODE_REPORT };
	struct meshinfo mi = { 0 };
	int status;

	/* --cluster is a mode of its own, with its own options */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--cluster"))
			return meshinfo_cluster_main(argc, argv);
	status = parse_args(argc, argv, &opts);

	if (status >= 0)
		return status;
	if (gather(&mi, &opts)) {
		fprintf(stderr, "meshinfo: out of memory\n");
		meshinfo_free(&mi);
		return 1;
	}
	if (opts.mode == MODE_CHECK) {
		status = run_check(&mi, opts.json);
	} else {
		if (opts.json)
			meshinfo_print_json(stdout, &mi);
		else
			meshinfo_print_text(stdout, &mi);
		status = mi.st->usable ? 0 : 1;
	}
	meshinfo_free(&mi);
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "meshinfo: writing output: %s\n",
			strerror(errno));
		return 1;
	}
	return status;
}
