/* SPDX-License-Identifier: MIT */
/*
 * Loader test: builds the core state from a config naming the fake modules
 * (tests/modules) and checks that every broken module is skipped with the
 * reason a user needs, while the good one still loads and gives rails.
 *
 * usage: test_loader mixed|allbad|params|ops|check|nccl-env|channel-rules
 *        MODULE_DIR
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layer.h"
#include "state.h"

struct tmp_files {
	char dir[4096];
	char conf[4200];
	char log[4200];
};

/* What one module of the mixed config must end up as. */
struct expect {
	const char *name;
	enum core_module_status status;
	const char *words[3];	/* all must occur in the reason */
	int logged;		/* "module NAME: REASON" on stderr, once */
};

static int failures;

#define CHECK(cond, ...) check((cond), __LINE__, #cond, __VA_ARGS__)

__attribute__((format(printf, 4, 5)))
static void check(int ok, int line, const char *what, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return;
	failures++;
	fprintf(stderr, "FAIL line %d: %s: ", line, what);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

/* A stray NCCL_MESH_* from the caller's shell must not change the result. */
static void clear_mesh_env(void)
{
	extern char **environ;
	char name[256];
	int i = 0;

	while (environ[i]) {
		const char *eq = strchr(environ[i], '=');
		size_t len = eq ? (size_t)(eq - environ[i]) : 0;

		if (strncmp(environ[i], "NCCL_MESH_", 10) || !eq ||
		    len >= sizeof(name)) {
			i++;
			continue;
		}
		memcpy(name, environ[i], len);
		name[len] = '\0';
		unsetenv(name);	/* shifts environ down: do not advance */
	}
	unsetenv("NCCL_DEBUG");
}

static void tmp_make(struct tmp_files *t)
{
	const char *base = getenv("TMPDIR");

	snprintf(t->dir, sizeof(t->dir), "%s/mesh-loader-XXXXXX",
		 base && *base ? base : P_tmpdir);
	if (!mkdtemp(t->dir))
		die("mkdtemp");
	snprintf(t->conf, sizeof(t->conf), "%s/nccl-mesh.conf", t->dir);
	snprintf(t->log, sizeof(t->log), "%s/stderr.log", t->dir);
}

static void tmp_remove(const struct tmp_files *t)
{
	unlink(t->conf);
	unlink(t->log);
	rmdir(t->dir);
}

static void write_conf(const struct tmp_files *t, const char *text)
{
	FILE *f = fopen(t->conf, "w");

	if (!f || fputs(text, f) < 0 || fclose(f))
		die(t->conf);
	if (setenv("NCCL_MESH_CONF", t->conf, 1))
		die("setenv");
}

/*
 * Builds the state with stderr going to a file, so the test can check what
 * a user would have seen; the text is copied to the real stderr afterwards.
 */
static struct core_state *build_capturing(const struct tmp_files *t,
					  char **log_out)
{
	struct core_state *st;
	int saved, fd;
	FILE *f;
	long len = 0;
	char *text;

	fflush(stderr);
	saved = dup(STDERR_FILENO);
	fd = open(t->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (saved < 0 || fd < 0 || dup2(fd, STDERR_FILENO) < 0)
		die("redirect stderr");
	close(fd);

	st = core_state_build(NULL);

	fflush(stderr);
	if (dup2(saved, STDERR_FILENO) < 0)
		die("restore stderr");
	close(saved);

	f = fopen(t->log, "r");
	if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0)
		die(t->log);
	rewind(f);
	text = calloc(1, (size_t)len + 1);
	if (!text || fread(text, 1, (size_t)len, f) != (size_t)len)
		die(t->log);
	fclose(f);
	fputs(text, stderr);
	*log_out = text;
	if (!st) {
		fprintf(stderr, "core_state_build returned NULL\n");
		exit(1);
	}
	return st;
}

static int count_occurrences(const char *hay, const char *needle)
{
	int n = 0;

	while ((hay = strstr(hay, needle))) {
		n++;
		hay += strlen(needle);
	}
	return n;
}

static struct core_module *find_module(struct core_state *st,
				       const char *name)
{
	for (int i = 0; i < st->nmodules; i++)
		if (!strcmp(st->modules[i].name, name))
			return &st->modules[i];
	return NULL;
}

static void check_module(struct core_state *st, const char *log,
			 const struct expect *e)
{
	struct core_module *m = find_module(st, e->name);
	char line[1024];

	CHECK(m != NULL, "module %s is not in the state", e->name);
	if (!m)
		return;
	CHECK(m->status == e->status, "module %s is %s, expected %s",
	      e->name, core_module_status_name(m->status),
	      core_module_status_name(e->status));
	for (int i = 0; i < 3 && e->words[i]; i++)
		CHECK(strstr(m->reason, e->words[i]) != NULL,
		      "module %s: reason \"%s\" lacks \"%s\"", e->name,
		      m->reason, e->words[i]);
	if (!e->logged)
		return;
	snprintf(line, sizeof(line), "module %s: %s", e->name, m->reason);
	CHECK(count_occurrences(log, line) == 1,
	      "\"%s\" logged %d times, expected once", line,
	      count_occurrences(log, line));
}

static void check_good_rails(struct core_state *st, struct core_module *good)
{
	CHECK(st->nrails == 2, "%d rails, expected 2 (one per fake device)",
	      st->nrails);
	for (int r = 0; r < st->nrails && r < 2; r++) {
		const struct core_rail *rail = &st->rails[r];
		char want[16];

		snprintf(want, sizeof(want), "fake%d", r);
		CHECK(rail->nmembers == 1, "rail %d has %d members", r,
		      rail->nmembers);
		if (rail->nmembers < 1)
			continue;
		CHECK(rail->members[0].module == good,
		      "rail %d member is not from module good", r);
		CHECK(!strcmp(rail->members[0].props.name, want),
		      "rail %d member is %s, expected %s", r,
		      rail->members[0].props.name, want);
	}
}

static void test_mixed(const struct tmp_files *t, const char *moddir)
{
	static const char *const order[] = { "good", "nosym", "badabi",
		"initfail", "nodev", "badname", "needslib", "missing",
		"newminor" };
	const struct expect expects[] = {
		{ "good", CORE_MODULE_READY, { NULL }, 0 },
		{ "nosym", CORE_MODULE_FAILED, { "mesh-nosym.so",
		  "has no symbol mesh_module_v1",
		  "(not a nccl-mesh module?)" }, 1 },
		{ "badabi", CORE_MODULE_FAILED, { "mesh-badabi.so",
		  "was built for module ABI 99.0",
		  "this core supports 1.x" }, 1 },
		{ "initfail", CORE_MODULE_FAILED, { "init failed: ",
		  strerror(EIO) }, 1 },
		{ "nodev", CORE_MODULE_NODEV, { "no devices" }, 0 },
		{ "badname", CORE_MODULE_FAILED, { "mesh-badname.so",
		  "calls itself 'impostor'" }, 1 },
		{ "needslib", CORE_MODULE_FAILED, { "cannot load ",
		  "mesh-needslib.so: ", "libmesh-fakedep-absent.so.0" }, 1 },
		{ "missing", CORE_MODULE_FAILED, { "not found (searched: ",
		  moddir }, 1 },
		{ "newminor", CORE_MODULE_FAILED, { "mesh-newminor.so",
		  "was built for module ABI 1.99",
		  "newer than this core's 1." }, 1 },
	};
	struct core_state *st;
	struct core_module *good;
	char *logtext;

	write_conf(t, "version = 1;\n"
		   "modules = [ \"good\", \"nosym\", \"badabi\",\n"
		   "  \"initfail\", \"nodev\", \"badname\", \"needslib\",\n"
		   "  \"missing\", \"newminor\" ];\n");
	st = build_capturing(t, &logtext);

	CHECK(st->nmodules == 9, "%d modules in the state", st->nmodules);
	for (int i = 0; i < st->nmodules && i < 9; i++)
		CHECK(!strcmp(st->modules[i].name, order[i]),
		      "module %d is %s, expected %s", i, st->modules[i].name,
		      order[i]);
	for (size_t i = 0; i < sizeof(expects) / sizeof(expects[0]); i++)
		check_module(st, logtext, &expects[i]);

	good = find_module(st, "good");
	if (good) {
		CHECK(good->ndevs == 2, "good has %d devices", good->ndevs);
		CHECK(good->desc != NULL, "good has no descriptor");
	}
	CHECK(st->usable, "state not usable though module good is ready");
	check_good_rails(st, good);

	core_state_free(st);
	free(logtext);
}

static void test_allbad(const struct tmp_files *t)
{
	struct core_state *st;
	char *logtext;

	write_conf(t, "version = 1;\n"
		   "modules = [ \"nosym\", \"badabi\", \"initfail\",\n"
		   "  \"nodev\", \"badname\", \"needslib\", \"missing\" ];\n");
	st = build_capturing(t, &logtext);

	CHECK(st->nmodules == 7, "%d modules in the state", st->nmodules);
	for (int i = 0; i < st->nmodules; i++)
		CHECK(st->modules[i].status != CORE_MODULE_READY,
		      "module %s is ready", st->modules[i].name);
	CHECK(!st->usable, "state is usable with no module ready");
	CHECK(st->nrails == 0, "%d rails without a ready module", st->nrails);

	core_state_free(st);
	free(logtext);
}

/* Builds a state for module good alone and checks where `level` came from. */
static void check_level(const struct tmp_files *t, long long want,
			enum core_source source, int line)
{
	const struct core_value *v;
	struct core_module *good;
	struct core_state *st;
	char *logtext;

	st = build_capturing(t, &logtext);
	good = find_module(st, "good");
	CHECK(good && good->status == CORE_MODULE_READY, "good not ready");
	if (!good || !good->params) {
		CHECK(0, "module good has no resolved parameters");
		goto out;
	}
	v = core_scope_get(good->params, "level");
	CHECK(v != NULL, "no value for good.level");
	if (!v)
		goto out;
	CHECK(v->num == want, "good.level is %lld, expected %lld", v->num,
	      want);
	CHECK(v->source == source, "good.level has source %d, expected %d",
	      (int)v->source, (int)source);
	if (source == CORE_SRC_FILE) {
		CHECK(v->line == line, "good.level from line %d, expected %d",
		      v->line, line);
		CHECK(v->file && !strcmp(v->file, t->conf),
		      "good.level from file %s", v->file ? v->file : "(null)");
	}
	if (source == CORE_SRC_ENV)
		CHECK(v->env && !strcmp(v->env, "NCCL_MESH_GOOD_LEVEL"),
		      "good.level from env %s", v->env ? v->env : "(null)");
	/* The module reads the value through the host and reports it back. */
	CHECK(st->nrails >= 1 && st->rails[0].nmembers >= 1 &&
	      st->rails[0].members[0].props.speed_mbps == want * 1000,
	      "module good did not see level %lld", want);
out:
	core_state_free(st);
	free(logtext);
}

static void test_params(const struct tmp_files *t)
{
	write_conf(t, "version = 1;\nmodules = [ \"good\" ];\n");
	check_level(t, 3, CORE_SRC_DEFAULT, 0);

	write_conf(t, "version = 1;\n"
		   "modules = [ \"good\" ];\n"
		   "good: {\n"
		   "  level = 7;\n"
		   "};\n");
	check_level(t, 7, CORE_SRC_FILE, 4);

	if (setenv("NCCL_MESH_GOOD_LEVEL", "9", 1))
		die("setenv");
	check_level(t, 9, CORE_SRC_ENV, 0);
	unsetenv("NCCL_MESH_GOOD_LEVEL");
}

/* One case of core_offer_nccl_buffsize: CONF_EXTRA added to a config of
 * the good module, the environment as given (NULL: unset). */
static void check_nccl_offer(const struct tmp_files *t, const char *conf_extra,
			     const char *net, const char *preset,
			     enum core_nccl_offer want, const char *want_env)
{
	struct core_state *st;
	const char *got;
	char text[512];

	snprintf(text, sizeof(text), "version = 1;\nmodules = [ \"good\" ];\n%s",
		 conf_extra);
	write_conf(t, text);
	unsetenv("NCCL_BUFFSIZE");
	unsetenv("NCCL_NET");
	if ((net && setenv("NCCL_NET", net, 1)) ||
	    (preset && setenv("NCCL_BUFFSIZE", preset, 1)))
		die("setenv");
	st = core_state_build(NULL);
	if (!st)
		die("core_state_build");
	CHECK(st->usable, "config '%s' not usable", conf_extra);
	CHECK(core_offer_nccl_buffsize(st) == want, "config '%s', NCCL_NET=%s, "
	      "NCCL_BUFFSIZE=%s: not outcome %d", conf_extra, net ? net : "-",
	      preset ? preset : "-", (int)want);
	got = getenv("NCCL_BUFFSIZE");
	CHECK(want_env ? got && !strcmp(got, want_env) : !got,
	      "config '%s', NCCL_NET=%s: NCCL_BUFFSIZE is %s, expected %s",
	      conf_extra, net ? net : "-", got ? got : "unset",
	      want_env ? want_env : "unset");
	core_state_free(st);
}

/*
 * nccl_buffsize reaches NCCL as NCCL_BUFFSIZE (8 MiB by default, more for
 * a long WAN declared in xdc_rtt_ms), never over a value the user set,
 * never for a job that asked NCCL for another network, and not at all
 * when it is 0.
 */
static void test_nccl_env(const struct tmp_files *t)
{
	check_nccl_offer(t, "", NULL, NULL, CORE_NCCL_OFFER_SET, "8388608");
	check_nccl_offer(t, "", "Mesh", NULL, CORE_NCCL_OFFER_SET, "8388608");
	check_nccl_offer(t, "", "mesh", NULL, CORE_NCCL_OFFER_SET, "8388608");
	check_nccl_offer(t, "nccl_buffsize = \"16M\";\n", NULL, NULL,
			 CORE_NCCL_OFFER_SET, "16777216");
	check_nccl_offer(t, "", NULL, "2097152", CORE_NCCL_OFFER_USER_SET,
			 "2097152");
	check_nccl_offer(t, "", "Socket", NULL, CORE_NCCL_OFFER_OTHER_NET,
			 NULL);
	check_nccl_offer(t, "nccl_buffsize = 0;\n", NULL, NULL,
			 CORE_NCCL_OFFER_OFF, NULL);
	/* a declared long WAN: the power of two past half the product of
	 * the fastest rail (good's level 10: 10 Gbit/s), up to the limit */
	check_nccl_offer(t, "xdc_rtt_ms = 50;\ngood: { level = 10; };\n",
			 NULL, NULL, CORE_NCCL_OFFER_SET, "33554432");
	check_nccl_offer(t, "xdc_rtt_ms = 1;\n", NULL, NULL,
			 CORE_NCCL_OFFER_SET, "8388608");
	check_nccl_offer(t, "xdc_rtt_ms = 200;\ngood: { level = 10; };\n",
			 NULL, NULL, CORE_NCCL_OFFER_SET, "67108864");
	check_nccl_offer(t, "xdc_rtt_ms = 200;\nnccl_buffsize_max = \"24M\";\n"
			 "good: { level = 10; };\n", NULL, NULL,
			 CORE_NCCL_OFFER_SET, "25165824");
	check_nccl_offer(t, "xdc_rtt_ms = 50;\nnccl_buffsize = 0;\n", NULL,
			 NULL, CORE_NCCL_OFFER_OFF, NULL);
	check_nccl_offer(t, "xdc_rtt_ms = 50;\n", NULL, "2097152",
			 CORE_NCCL_OFFER_USER_SET, "2097152");
	unsetenv("NCCL_BUFFSIZE");
	unsetenv("NCCL_NET");
}

/* nccl_channels_by_size = [ ITEMS ] on line 3: accepted as nrules
 * entries (want NULL), or rejected with the one error "<file>:3:
 * nccl_channels_by_size: <want>". */
static void check_channel_rules(const struct tmp_files *t, const char *items,
				const char *want, int nrules)
{
	const char *const *msgs;
	struct core_state *st;
	char text[1024], full[4700];
	int n;

	snprintf(text, sizeof(text), "version = 1;\nmodules = [ \"good\" ];\n"
		 "nccl_channels_by_size = [ %s ];\n", items);
	write_conf(t, text);
	st = core_state_build(NULL);
	if (!st)
		die("core_state_build");
	n = core_config_errors(st->cfg, &msgs);
	if (!want) {
		CHECK(st->usable && !n && st->tuning.channels.n == nrules,
		      "[ %s ]: usable %d, %d errors, %d rules", items,
		      st->usable, n, st->tuning.channels.n);
	} else {
		snprintf(full, sizeof(full), "%s:3: nccl_channels_by_size: %s",
			 t->conf, want);
		CHECK(!st->usable && n == 1 && !strcmp(msgs[0], full),
		      "[ %s ]: error \"%s\", want \"%s\"", items,
		      n ? msgs[0] : "(none)", full);
		CHECK(st->tuning.channels.n == 0, "[ %s ]: rules kept", items);
	}
	core_state_free(st);
}

#define RULE_SYNTAX ": expected [tree:|ring:]<size>:<channels>, as " \
	"\"64K:2\" (size in bytes or with a K, M or G suffix)"
#define RULE_ALGO ": unknown algorithm before the size (tree or ring)"
#define RULE_RANGE ": expected a size above 0 and 0..64 channels"

/* Every broken nccl_channels_by_size entry is an error at its line that
 * names the entry; good lists are taken whole. */
static void test_channel_rules(const struct tmp_files *t)
{
	static const struct {
		const char *items, *want;
	} bad[] = {
		{ "\"64K\"", "entry 1 \"64K\"" RULE_SYNTAX },
		{ "\"64K:\"", "entry 1 \"64K:\"" RULE_SYNTAX },
		{ "\"64K:2x\"", "entry 1 \"64K:2x\"" RULE_SYNTAX },
		{ "\"64K:-1\"", "entry 1 \"64K:-1\"" RULE_SYNTAX },
		{ "\"64K: 2\"", "entry 1 \"64K: 2\"" RULE_SYNTAX },
		{ "\"64KB:2\"", "entry 1 \"64KB:2\"" RULE_SYNTAX },
		{ "\"4K:0\", \":2\"", "entry 2 \":2\"" RULE_SYNTAX },
		{ "\"64K:99999999999999999999\"",
		  "entry 1 \"64K:99999999999999999999\"" RULE_RANGE },
		{ "\"64K:65\"", "entry 1 \"64K:65\"" RULE_RANGE },
		{ "\"0:2\"", "entry 1 \"0:2\"" RULE_RANGE },
		{ "\"64K:2\", \"64K:4\"", "entry 2 \"64K:4\": sizes must "
		  "rise, and entry 1 is as large" },
		{ "\"1M:2\", \"64K:4\"", "entry 2 \"64K:4\": sizes must "
		  "rise, and entry 1 is as large" },
		{ "\"mesh:64K:2\"", "entry 1 \"mesh:64K:2\"" RULE_ALGO },
		{ "\"K:2\"", "entry 1 \"K:2\"" RULE_ALGO },
		{ "\"tree:64K\"", "entry 1 \"tree:64K\"" RULE_SYNTAX },
		{ "\"ring:0:2\"", "entry 1 \"ring:0:2\"" RULE_RANGE },
		/* sizes rise per algorithm */
		{ "\"tree:16K:2\", \"64K:2\", \"tree:8K:2\"", "entry 3 "
		  "\"tree:8K:2\": sizes must rise, and entry 1 is as large" },
	};
	char many[1024] = "";

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_channel_rules(t, bad[i].items, bad[i].want, 0);
	for (int i = 1; i <= 17; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many),
			 "%s\"%dK:1\"", i > 1 ? ", " : "", i);
	check_channel_rules(t, many, "expected at most 16 entries, got 17", 0);
	check_channel_rules(t, "", NULL, 0);
	check_channel_rules(t, "\"4K:0\", \"64k:2\", \"1048576:64\"", NULL,
			    3);
	check_channel_rules(t, "\"8K:0\", \"64K:2\", \"tree:8K:0\", "
			    "\"TREE:16K:2\", \"ring:1M:4\"", NULL, 5);
	setenv("NCCL_MESH_NCCL_CHANNELS_BY_SIZE", "8K:1,16M:4", 1);
	check_channel_rules(t, "", NULL, 2);
	unsetenv("NCCL_MESH_NCCL_CHANNELS_BY_SIZE");
}

/*
 * Modules lacking one optional operation each load and work through the
 * core's defaults; older descriptors (ABI 1.0, 1.2) load without their
 * later members being read; a module lacking a required operation or with
 * a descriptor too short for them is refused with a line naming why; a
 * module with no fini and no devices crashes nothing.
 */
static void test_ops(const struct tmp_files *t)
{
	static const char *const ready[] = { "nofini2", "noabandon",
		"nodmabuf", "noreach", "nocheck", "abi12", "abi10", "abi13",
		"abi14", "good" };
	const struct expect refused[] = {
		{ "noisend", CORE_MODULE_FAILED, { "mesh-noisend.so",
		  "lacks the required operation isend" }, 1 },
		{ "shortdesc", CORE_MODULE_FAILED, { "mesh-shortdesc.so",
		  "descriptor of", "is too short" }, 1 },
		{ "nofini", CORE_MODULE_NODEV, { "no devices: " }, 0 },
		{ "nodevwhy", CORE_MODULE_NODEV, { "no devices: the fake "
		  "module was told to find none" }, 0 },
	};
	struct core_state *st;
	char *logtext;

	write_conf(t, "version = 1;\n"
		   "modules = [ \"nofini\", \"nofini2\", \"noabandon\",\n"
		   "  \"nodmabuf\", \"noreach\", \"nocheck\", \"abi12\",\n"
		   "  \"abi10\", \"noisend\", \"shortdesc\", \"nodevwhy\",\n"
		   "  \"abi13\", \"abi14\", \"good\" ];\n"
		   "rails = [ \"nofini2/fake0+noabandon/fake0+nodmabuf/fake0+"
		   "noreach/fake0\",\n"
		   "  \"nocheck/fake0+abi12/fake0+abi10/fake0+good/fake0\",\n"
		   "  \"abi13/fake0\" ];\n");
	st = build_capturing(t, &logtext);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		check_module(st, logtext, &refused[i]);
	for (size_t i = 0; i < sizeof(ready) / sizeof(ready[0]); i++) {
		struct core_module *m = find_module(st, ready[i]);
		const struct mesh_module *d = m ? m->desc : NULL;
		struct mesh_addr peer = { .family = 2 };
		struct mesh_conn_info info;
		void *req = (void *)1, *mh = (void *)1;
		char why[64] = "x";

		CHECK(m && m->status == CORE_MODULE_READY, "%s not ready: %s",
		      ready[i], m ? m->reason : "absent");
		if (!d)
			continue;
		/* Call sites test no pointer: every member is set. */
		CHECK(d->size == sizeof(struct mesh_module), "%s: size %u",
		      ready[i], d->size);
		CHECK(d->fini && d->abandon && d->reg_mr_dmabuf && d->iflush &&
		      d->reach && d->check && d->start && d->route &&
		      d->route_abandon && d->routes_to && d->report &&
		      d->describe, "%s: an operation is NULL", ready[i]);
		CHECK(!m->has_route, "%s: a route past its size", ready[i]);
		d->abandon(m->mctx, NULL);
		/* the fakes describe nothing; abi14's poisoned one fails */
		CHECK(d->describe(NULL, &info) == 0, "%s: describe past its "
		      "size, or not the default", ready[i]);
		CHECK(d->iflush(NULL, 1, NULL, NULL, NULL, &req) == 0 &&
		      req == NULL, "%s: iflush", ready[i]);
		if (!strcmp(ready[i], "nodmabuf"))
			CHECK(d->reg_mr_dmabuf(NULL, NULL, 0, 0, 0, -1, &mh) ==
			      -EOPNOTSUPP, "nodmabuf: reg_mr_dmabuf stub");
		/* The fakes' own reach refuses; the default (noreach, and
		 * the older ABIs that have no reach) lets the core try. */
		CHECK((d->reach(m->mctx, 0, &peer, 1, why, sizeof(why)) == 0) ==
		      (!strcmp(ready[i], "noreach") ||
		       !strcmp(ready[i], "abi10")),
		      "%s: reach", ready[i]);
	}
	CHECK(core_config_errors(st->cfg, NULL) == 0,
	      "a config error: the poisoned check past the size was read?");
	CHECK(st->usable && st->nrails == 3 && st->rails[0].nmembers == 4 &&
	      st->rails[1].nmembers == 4 && st->rails[2].nmembers == 1,
	      "three rails of 4, 4 and 1 members from the modules that loaded");
	/* start past an ABI 1.3 descriptor's size is never called: the
	 * poisoned one would fail the module */
	core_layer_start(st);
	CHECK(find_module(st, "abi13")->status == CORE_MODULE_READY &&
	      !core_layer_module(st), "abi13: a start or route past its size "
	      "was used");
	core_layer_unbind(st);
	core_state_free(st);
	free(logtext);
}

/* A module's check names the broken key; the config error has its line. */
static void test_check(const struct tmp_files *t)
{
	const char *const *msgs;
	struct core_state *st;
	struct core_module *good;
	char *logtext, want[4600];
	int n;

	write_conf(t, "version = 1;\nmodules = [ \"good\" ];\n"
		   "good: {\n  max_level = 5;\n  level = 7;\n};\n");
	st = build_capturing(t, &logtext);
	good = find_module(st, "good");
	CHECK(good && good->status == CORE_MODULE_FAILED,
	      "good with level > max_level must not load");
	CHECK(!st->usable, "a broken rule makes the state unusable");
	n = core_config_errors(st->cfg, &msgs);
	snprintf(want, sizeof(want), "%s:5: good.level: expected at most "
		 "max_level (5), got 7", t->conf);
	CHECK(n == 1 && !strcmp(msgs[0], want), "error \"%s\", want \"%s\"",
	      n ? msgs[0] : "(none)", want);
	CHECK(count_occurrences(logtext, want) == 1,
	      "the error is logged once");
	core_state_free(st);
	free(logtext);
}

/* search_dirs PATH: the loader's search path with NCCL_MESH_MODULE_PATH
 * set to PATH; the count, or -1. */
static int search_dirs(const struct tmp_files *t, const char *path,
		       char ***dirs)
{
	struct core_config *cfg = NULL;
	int n;

	write_conf(t, "version = 1;\nmodules = [ \"good\" ];\n");
	if (setenv("NCCL_MESH_MODULE_PATH", path, 1))
		die("setenv");
	if (core_config_open(NULL, &cfg))
		die("core_config_open");
	n = core_loader_search_path(cfg, dirs);
	core_config_free(cfg);
	return n;
}

static void free_dirs(char **dirs)
{
	for (int i = 0; dirs && dirs[i]; i++)
		free(dirs[i]);
	free(dirs);
}

/* A path that is set is the whole search path: nothing installed (the
 * install directory, nccl-mesh/ beside the core) may stand in for the
 * modules it names.  Unset, the two defaults are searched. */
static void test_search_path(const struct tmp_files *t, const char *moddir)
{
	char path[8192], none[4200], **dirs = NULL;
	int n;

	n = search_dirs(t, moddir, &dirs);
	CHECK(n == 1 && !strcmp(dirs[0], moddir),
	      "path %s: %d dir(s), first %s", moddir, n,
	      n > 0 ? dirs[0] : "(none)");
	free_dirs(dirs);

	snprintf(none, sizeof(none), "%s/none", moddir);
	snprintf(path, sizeof(path), "%s:%s:%s", moddir, none, moddir);
	n = search_dirs(t, path, &dirs);
	CHECK(n == 2 && !strcmp(dirs[0], moddir) && !strcmp(dirs[1], none),
	      "path %s: %d dir(s), want the two named, once each", path, n);
	free_dirs(dirs);

	/* no directory named: the defaults, beside the core first */
	n = search_dirs(t, "::", &dirs);
	CHECK(n == 2, "path '::': %d dir(s), want the two defaults", n);
	for (int i = 0; i < n; i++)
		CHECK(strlen(dirs[i]) > 10 &&
		      !strcmp(dirs[i] + strlen(dirs[i]) - 10, "/nccl-mesh"),
		      "default dir %s is not a nccl-mesh/ directory", dirs[i]);
	free_dirs(dirs);
	if (setenv("NCCL_MESH_MODULE_PATH", moddir, 1))
		die("setenv");
}

int main(int argc, char **argv)
{
	struct tmp_files t;
	const char *which;

	if (argc != 3) {
		fprintf(stderr, "usage: %s mixed|allbad|params|ops|check|"
			"nccl-env|channel-rules|search-path MODULE_DIR\n",
			argv[0]);
		return 2;
	}
	which = argv[1];
	clear_mesh_env();
	if (setenv("NCCL_MESH_MODULE_PATH", argv[2], 1))
		die("setenv");
	tmp_make(&t);

	if (!strcmp(which, "mixed")) {
		test_mixed(&t, argv[2]);
	} else if (!strcmp(which, "allbad")) {
		test_allbad(&t);
	} else if (!strcmp(which, "params")) {
		test_params(&t);
	} else if (!strcmp(which, "ops")) {
		test_ops(&t);
	} else if (!strcmp(which, "check")) {
		test_check(&t);
	} else if (!strcmp(which, "nccl-env")) {
		test_nccl_env(&t);
	} else if (!strcmp(which, "channel-rules")) {
		test_channel_rules(&t);
	} else if (!strcmp(which, "search-path")) {
		test_search_path(&t, argv[2]);
	} else {
		fprintf(stderr, "unknown case %s\n", which);
		failures++;
	}

	tmp_remove(&t);
	if (failures)
		fprintf(stderr, "%s: %d check(s) failed\n", which, failures);
	return failures ? 1 : 0;
}
