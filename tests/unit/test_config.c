/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the config resolver: file choice, precedence and sources,
 * every parameter type; test_config_diag.c has the error and warning
 * texts.  Fixtures live in tests/data (NCCL_MESH_TEST_DATA names the
 * directory); cases that need a file of their own write it into a
 * temporary directory.
 */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "config.h"
#include "param_parse.h"
#include "params.h"

#include "test_config.h"

const struct mesh_param tc_tcp_params[] = {
	{ "streams", MESH_PARAM_INT, "8", 1, 256, "Streams per connection" },
	{ "window", MESH_PARAM_INT, "0", 0, 0, "Unbounded integer" },
	{ "ifname", MESH_PARAM_STR, "", 0, 0, "Interfaces" },
	{ "buffer", MESH_PARAM_SIZE, "4M", 4096, 1LL << 32, "Socket buffer" },
	{ "nodelay", MESH_PARAM_BOOL, "true", 0, 0, "TCP_NODELAY" },
	{ "peers", MESH_PARAM_LIST, "a,b", 0, 0, "Peers" },
	{ NULL, 0, NULL, 0, 0, NULL },
};

static const char *data_dir;
char tc_tmp_dir[4096];

void tc_check_value(const char *file, int line,
		    const struct core_scope *scope, const char *key,
		    const char *text, long long num, const char *source)
{
	const struct core_value *v = core_scope_get(scope, key);
	char src[512];

	if (!v) {
		fprintf(stderr, "%s:%d: no value '%s'\n", file, line, key);
		failures++;
		return;
	}
	core_value_source(v, src, sizeof(src));
	if (!v->text || strcmp(v->text, text) || v->num != num ||
	    strcmp(src, source)) {
		fprintf(stderr, "%s:%d: %s = \"%s\" (%lld) from %s, want \"%s\" "
			"(%lld) from %s\n", file, line, key,
			v->text ? v->text : "(null)", v->num, src, text, num,
			source);
		failures++;
	}
}

void tc_check_msg(const char *file, int line, const char *const *msgs,
		  int n, const char *want)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(msgs[i], want))
			return;
	fprintf(stderr, "%s:%d: missing message \"%s\"; have:\n", file, line,
		want);
	for (i = 0; i < n; i++)
		fprintf(stderr, "    %s\n", msgs[i]);
	failures++;
}

/* Every NCCL_MESH_* variable goes, except the ones the test runner sets. */
void tc_reset_env(void)
{
	extern char **environ;
	char name[256];
	const char *eq;
	int i = 0;

	while (environ[i]) {
		eq = strchr(environ[i], '=');
		if (strncmp(environ[i], "NCCL_MESH_", 10) ||
		    !strncmp(environ[i], "NCCL_MESH_TEST_", 15) || !eq ||
		    (size_t)(eq - environ[i]) >= sizeof(name)) {
			i++;
			continue;
		}
		snprintf(name, sizeof(name), "%.*s", (int)(eq - environ[i]),
			 environ[i]);
		unsetenv(name);
	}
}

const char *tc_fixture(const char *name)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/%s", data_dir, name);
	return path;
}

const char *tc_write_tmp(const char *name, const char *text)
{
	static char path[8192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tc_tmp_dir, name);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(2);
	}
	fputs(text, f);
	fclose(f);
	return path;
}

struct core_config *tc_open_ok(const char *path)
{
	struct core_config *cfg = NULL;
	int rc = core_config_open(path, &cfg);

	if (rc || !cfg) {
		fprintf(stderr, "core_config_open(%s): %d\n", path, rc);
		exit(2);
	}
	return cfg;
}

static void test_params_table(void)
{
	int i;

	for (i = 0; i < CP_COUNT; i++)
		CHECK(core_params[i].name != NULL);
	CHECK(core_params[CP_COUNT].name == NULL);
	CHECK_STR(core_params[CP_DC].name, "dc");
	CHECK(core_params[CP_DC].type == MESH_PARAM_INT);
	CHECK(core_params[CP_DC].max == 1048575);
	CHECK_STR(core_params[CP_CONNECT_TIMEOUT_MS].dflt, "60000");
}

static void test_env_name(void)
{
	char buf[64];

	core_env_name("tcp-xdc", "streams", buf, sizeof(buf));
	CHECK_STR(buf, "NCCL_MESH_TCP_XDC_STREAMS");
	core_env_name(NULL, "max_rails", buf, sizeof(buf));
	CHECK_STR(buf, "NCCL_MESH_MAX_RAILS");
	core_env_name("tcp-xdc", "streams", buf, 12);
	CHECK_STR(buf, "NCCL_MESH_T");
}

static void test_precedence(void)
{
	const char *path = tc_fixture("precedence.conf");
	const struct core_scope *core, *tcp;
	const struct core_value *v;
	struct core_config *cfg;
	const char *const *msgs;
	char want[4608];
	int n;

	tc_reset_env();
	setenv("NCCL_MESH_CONF", path, 1);
	setenv("NCCL_MESH_HOSTNAME", "gpu7.cluster.example", 1);
	setenv("NCCL_MESH_MAX_RAILS", "32", 1);
	setenv("NCCL_MESH_TCP_XDC_PEERS", " x, y,,z ", 1);
	cfg = tc_open_ok(NULL);
	CHECK_STR(core_config_path(cfg), path);
	CHECK_STR(core_config_hostname(cfg), "gpu7.cluster.example");
	core = core_config_core(cfg);
	CHECK(core->module == NULL);
	CHECK(core->nvalues == CP_COUNT);
	CHECK(core->values[CP_DC].param == &core_params[CP_DC]);

	/* Later matching entries win; "gpu7" matches the short name. */
	snprintf(want, sizeof(want), "host 'gpu7' at %s:17", path);
	CHECK_VALUE(core, "dc", "3", 3, want);
	CHECK_VALUE(core, "max_rails", "32", 32,
		    "env NCCL_MESH_MAX_RAILS");
	snprintf(want, sizeof(want), "%s:6", path);
	CHECK_VALUE(core, "port_range", "40000-40100", 40000LL << 16 | 40100, want);
	CHECK_VALUE(core, "connect_timeout_ms", "60000", 60000, "default");
	snprintf(want, sizeof(want), "%s:3", path);
	CHECK_VALUE(core, "modules", "tcp-xdc,relay", 0, want);
	v = core_scope_get(core, "modules");
	CHECK(v && v->nitems == 2 && !strcmp(v->items[1], "relay") &&
	      v->items[2] == NULL);
	v = core_scope_get(core, "rails");
	CHECK(v && v->nitems == 0 && v->items && v->items[0] == NULL);
	CHECK(core_scope_get(core, "nosuchkey") == NULL);

	tcp = core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	CHECK(tcp && tcp->nvalues == 6 && !strcmp(tcp->module, "tcp-xdc"));
	CHECK(core_config_module(cfg, "tcp-xdc", tc_tcp_params) == tcp);
	snprintf(want, sizeof(want), "host 'gpu*' at %s:16", path);
	CHECK_VALUE(tcp, "streams", "16", 16, want);
	CHECK_VALUE(tcp, "buffer", "64K", 65536, want);
	snprintf(want, sizeof(want), "%s:11", path);
	CHECK_VALUE(tcp, "nodelay", "false", 0, want);
	CHECK_VALUE(tcp, "peers", "x,y,z", 0, "env NCCL_MESH_TCP_XDC_PEERS");
	v = core_scope_get(tcp, "peers");
	CHECK(v && v->nitems == 3 && !strcmp(v->items[0], "x") &&
	      !strcmp(v->items[2], "z"));
	CHECK_VALUE(tcp, "ifname", "", 0, "default");
	CHECK_VALUE(tcp, "window", "0", 0, "default");

	n = errors_of(cfg, &msgs);
	print_msgs("unexpected error", msgs, n);
	CHECK(n == 0);
	core_config_free(cfg);

	/* A host no entry matches sees only the top level. */
	setenv("NCCL_MESH_HOSTNAME", "login1", 1);
	cfg = tc_open_ok(path);
	snprintf(want, sizeof(want), "%s:4", path);
	CHECK_VALUE(core_config_core(cfg), "dc", "1", 1, want);
	tcp = core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	snprintf(want, sizeof(want), "%s:9", path);
	CHECK_VALUE(tcp, "streams", "4", 4, want);
	snprintf(want, sizeof(want), "%s:10", path);
	CHECK_VALUE(tcp, "buffer", "8M", 8 << 20, want);
	CHECK_VALUE(tcp, "peers", "x,y,z", 0, "env NCCL_MESH_TCP_XDC_PEERS");
	core_config_free(cfg);

	/* The hostname comes from the system when not given. */
	unsetenv("NCCL_MESH_HOSTNAME");
	cfg = tc_open_ok(path);
	CHECK(core_config_hostname(cfg)[0] != '\0');
	core_config_free(cfg);
}

static void test_file_types(void)
{
	const char *path = tc_fixture("types.conf");
	const struct core_scope *core, *tcp;
	const struct core_value *v;
	struct core_config *cfg;
	const char *const *msgs;
	char want[4608];
	int n;

	tc_reset_env();
	setenv("NCCL_MESH_HOSTNAME", "h1", 1);
	cfg = tc_open_ok(path);
	core = core_config_core(cfg);
	snprintf(want, sizeof(want), "%s:4", path);
	CHECK_VALUE(core, "rails", "", 0, want);
	v = core_scope_get(core, "rails");
	CHECK(v && v->nitems == 0 && v->items && !v->items[0]);
	snprintf(want, sizeof(want), "%s:5", path);
	CHECK_VALUE(core, "prefer_same_dc", "tcp-xdc", 0, want);
	v = core_scope_get(core, "prefer_same_dc");
	CHECK(v && v->nitems == 1);
	snprintf(want, sizeof(want), "%s:6", path);
	CHECK_VALUE(core, "prefer_cross_dc", "a,,c", 0, want);
	v = core_scope_get(core, "prefer_cross_dc");
	CHECK(v && v->nitems == 3 && v->items[1][0] == '\0');
	snprintf(want, sizeof(want), "%s:7", path);
	CHECK_VALUE(core, "connect_timeout_ms", "120000", 120000, want);
	snprintf(want, sizeof(want), "%s:8", path);
	CHECK_VALUE(core, "module_path", "/opt/mesh:/usr/lib/mesh", 0, want);
	snprintf(want, sizeof(want), "%s:3", path);
	CHECK_VALUE(core, "modules", "tcp-xdc,relay", 0, want);

	tcp = core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	snprintf(want, sizeof(want), "%s:11", path);
	CHECK_VALUE(tcp, "buffer", "2G", 2LL << 30, want);
	snprintf(want, sizeof(want), "%s:12", path);
	CHECK_VALUE(tcp, "window", "12345", 12345, want);
	snprintf(want, sizeof(want), "%s:13", path);
	CHECK_VALUE(tcp, "nodelay", "true", 1, want);
	snprintf(want, sizeof(want), "%s:14", path);
	CHECK_VALUE(tcp, "peers", "p1,p2", 0, want);
	snprintf(want, sizeof(want), "%s:15", path);
	CHECK_VALUE(tcp, "ifname", "=eth1", 0, want);
	n = errors_of(cfg, &msgs);
	print_msgs("unexpected error", msgs, n);
	CHECK(n == 0);
	core_config_free(cfg);
}

struct env_case {
	const char *var;
	const char *value;
	const char *key;	/* in tc_tcp_params, or a core key */
	bool module;
	const char *text;	/* NULL: must be rejected */
	long long num;
};

static const struct env_case env_cases[] = {
	{ "NCCL_MESH_TCP_XDC_STREAMS", "256", "streams", true, "256", 256 },
	{ "NCCL_MESH_TCP_XDC_STREAMS", "+1", "streams", true, "1", 1 },
	{ "NCCL_MESH_TCP_XDC_STREAMS", "0", "streams", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_STREAMS", "257", "streams", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_STREAMS", "1.5", "streams", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_STREAMS", "", "streams", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_WINDOW", "-7", "window", true, "-7", -7 },
	{ "NCCL_MESH_TCP_XDC_WINDOW", "99999999999999999999", "window", true,
	  NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "yes", "nodelay", true, "true", 1 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "OFF", "nodelay", true, "false", 0 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "on", "nodelay", true, "true", 1 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "0", "nodelay", true, "false", 0 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "1", "nodelay", true, "true", 1 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "no", "nodelay", true, "false", 0 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "False", "nodelay", true, "false", 0 },
	{ "NCCL_MESH_TCP_XDC_NODELAY", "maybe", "nodelay", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "4096", "buffer", true, "4K", 4096 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "3m", "buffer", true, "3M", 3 << 20 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "4G", "buffer", true, "4G", 4LL << 30 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "5000", "buffer", true, "5000", 5000 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "4095", "buffer", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "5G", "buffer", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "8KB", "buffer", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "-8K", "buffer", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_BUFFER", "99999999999G", "buffer", true, NULL, 0 },
	{ "NCCL_MESH_TCP_XDC_PEERS", "", "peers", true, "", 0 },
	{ "NCCL_MESH_TCP_XDC_PEERS", "one", "peers", true, "one", 0 },
	{ "NCCL_MESH_TCP_XDC_IFNAME", "^docker,lo", "ifname", true,
	  "^docker,lo", 0 },
	{ "NCCL_MESH_DC", "1048575", "dc", false, "1048575", 1048575 },
	{ "NCCL_MESH_DC", "1048576", "dc", false, NULL, 0 },
	{ "NCCL_MESH_MODULE_PATH", "/a:/b", "module_path", false, "/a:/b", 0 },
};

static void test_env_case(const char *path, const struct env_case *c)
{
	const struct core_scope *scope;
	const struct core_value *v;
	struct core_config *cfg;
	const char *const *msgs;
	char want[512], source[320];
	int n;

	setenv(c->var, c->value, 1);
	cfg = tc_open_ok(path);
	scope = c->module ? core_config_module(cfg, "tcp-xdc", tc_tcp_params) :
		core_config_core(cfg);
	v = core_scope_get(scope, c->key);
	n = errors_of(cfg, &msgs);
	if (c->text) {
		snprintf(source, sizeof(source), "env %s", c->var);
		CHECK_VALUE(scope, c->key, c->text, c->num, source);
		print_msgs(c->value, msgs, n);
		CHECK(n == 0);
	} else {
		/* Rejected: the value stays at its default. */
		CHECK(v && v->source == CORE_SRC_DEFAULT);
		snprintf(want, sizeof(want), "environment %s: ", c->var);
		if (n != 1 || strncmp(msgs[0], want, strlen(want))) {
			fprintf(stderr, "%s:%d: %s=\"%s\" not rejected once\n",
				__FILE__, __LINE__, c->var, c->value);
			print_msgs("error", msgs, n);
			failures++;
		}
	}
	if (v && c->module && !strcmp(c->key, "peers") && c->text)
		CHECK(v->items && v->items[v->nitems] == NULL &&
		      v->nitems == (c->value[0] ? 1 : 0));
	core_config_free(cfg);
	unsetenv(c->var);
}

static void test_env_types(void)
{
	const char *path = tc_write_tmp("empty.conf", "version = 1;\n");
	struct core_config *cfg;
	const char *const *msgs;
	size_t i;
	int n;

	tc_reset_env();
	for (i = 0; i < sizeof(env_cases) / sizeof(env_cases[0]); i++)
		test_env_case(path, &env_cases[i]);

	/* The exact texts of an env error. */
	setenv("NCCL_MESH_TCP_XDC_STREAMS", "x", 1);
	setenv("NCCL_MESH_TCP_XDC_BUFFER", "1K", 1);
	setenv("NCCL_MESH_TCP_XDC_NODELAY", "2", 1);
	cfg = tc_open_ok(path);
	core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	n = errors_of(cfg, &msgs);
	CHECK(n == 3);
	CHECK_MSG(msgs, n, "environment NCCL_MESH_TCP_XDC_STREAMS: expected "
		  "an integer in 1..256, got \"x\"");
	CHECK_MSG(msgs, n, "environment NCCL_MESH_TCP_XDC_BUFFER: expected "
		  "a size in 4K..4G (bytes, or with a K, M or G suffix), "
		  "got \"1K\"");
	CHECK_MSG(msgs, n, "environment NCCL_MESH_TCP_XDC_NODELAY: expected "
		  "true, false, yes, no, on, off, 1 or 0, got \"2\"");
	core_config_free(cfg);
	tc_reset_env();
}

static void test_embedded_default(void)
{
	static const char *const loaded[] = { "tcp-xdc" };
	const struct core_scope *core, *tcp;
	const struct core_value *v;
	struct core_config *cfg;
	const char *const *msgs;
	char src[256];
	int n;

	tc_reset_env();
	if (!access("/etc/nccl-mesh.conf", F_OK) ||
	    !access(CORE_SYSCONF_PATH, F_OK)) {
		printf("skip: a system config file exists\n");
		return;
	}
	cfg = tc_open_ok(NULL);
	CHECK_STR(core_config_path(cfg), "<embedded default>");
	n = errors_of(cfg, &msgs);
	print_msgs("error", msgs, n);
	CHECK(n == 0);
	core = core_config_core(cfg);
	v = core_scope_get(core, "modules");
	CHECK(v && v->source == CORE_SRC_FILE && v->nitems == 1);
	core_value_source(v, src, sizeof(src));
	CHECK(!strncmp(src, "<embedded default>:", 19));
	CHECK_VALUE(core, "prefer_disconnected", "relay", 0, "default");
	tcp = core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	v = core_scope_get(tcp, "streams");
	CHECK(v && v->source == CORE_SRC_FILE && v->num == 8);
	/* The shipped file only uses keys that exist. */
	core_config_check_unknown(cfg, loaded, 1);
	n = core_config_warnings(cfg, &msgs);
	/* Only `threads`, which the test's table lacks. */
	if (n != 1 || !strstr(msgs[0], ": unknown key 'tcp-xdc.threads'")) {
		fprintf(stderr, "%s:%d: want one warning about threads\n",
			__FILE__, __LINE__);
		print_msgs("warning", msgs, n);
		failures++;
	}
	core_config_free(cfg);
}

/* Port ranges, address lists, port maps and addresses with a port, from
 * text and from the file. */
static void test_net_types(void)
{
	static const struct mesh_param p[] = {
		{ "range", MESH_PARAM_PORT_RANGE, "", 0, 0, "Ports" },
		{ "addrs", MESH_PARAM_ADDR_LIST, "", 0, 2, "Addresses" },
		{ "map", MESH_PARAM_PORT_MAP, "", 0, 0, "Port map" },
		{ "listen", MESH_PARAM_ADDR_PORT, "", 0, 0, "Listen on" },
		{ NULL, 0, NULL, 0, 0, NULL },
	};
	static const struct {
		int param;
		const char *text;
		long long num;	/* -1: must be rejected */
	} cases[] = {
		{ 0, "", 0 }, { 0, "1-65535", 1LL << 16 | 65535 },
		{ 0, "40000-40000", 40000LL << 16 | 40000 }, { 0, "0-10", -1 },
		{ 0, "10-9", -1 }, { 0, "1-65536", -1 }, { 0, "5", -1 },
		{ 0, "-5", -1 }, { 0, "5-", -1 }, { 0, " 1-2", -1 },
		{ 0, "1-2x", -1 }, { 0, "+1-2", -1 }, { 0, "000001-2", -1 },
		{ 1, "192.0.2.1", 0 }, { 1, "192.0.2.1, 2001:db8::1", 0 },
		{ 1, "192.0.2.1:80", -1 }, { 1, "192.0.2.0/24", -1 },
		{ 1, "[::1]", -1 }, { 1, "host.example", -1 },
		{ 1, "192.0.2.1,192.0.2.2,192.0.2.3", -1 },
		{ 2, "1=2,65535=1", 0 }, { 2, "0=1", -1 }, { 2, "1=65536", -1 },
		{ 2, "1", -1 }, { 2, "a=b", -1 }, { 2, "1=2=3", -1 },
		{ 3, "", 0 }, { 3, "127.0.0.1:9464", 9464 },
		{ 3, "[::1]:1", 1 }, { 3, "0.0.0.0:65535", 65535 },
		{ 3, "[::]:80", 80 }, { 3, "garbage", -1 }, { 3, ":99999", -1 },
		{ 3, "%s%n", -1 }, { 3, "127.0.0.1", -1 },
		{ 3, "127.0.0.1:0", -1 }, { 3, "127.0.0.1:65536", -1 },
		{ 3, "127.0.0.1:+80", -1 }, { 3, "127.0.0.1: 80", -1 },
		{ 3, "::1:80", -1 }, { 3, "[::1]", -1 },
		{ 3, "[127.0.0.1]:80", -1 }, { 3, "10.0.0.1/8:80", -1 },
		{ 3, "224.0.0.1:80", -1 }, { 3, "255.255.255.255:80", -1 },
		{ 3, "[ff02::1]:80", -1 }, { 3, "host.example:80", -1 },
	};
	struct param_parsed out;
	char why[PARAM_WHY_MAX];
	const char *path;
	struct core_config *cfg;
	const char *const *msgs;
	int n;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = param_parse_text(&p[cases[i].param], cases[i].text,
					  &out, why, sizeof(why));

		if ((rc == 0) != (cases[i].num >= 0) ||
		    (!rc && (cases[i].param == 0 || cases[i].param == 3) &&
		     out.num != cases[i].num)) {
			fprintf(stderr, "%s:%d: %s \"%s\": rc %d num %lld (%s)\n",
				__FILE__, __LINE__, p[cases[i].param].name,
				cases[i].text, rc, rc ? 0 : out.num,
				rc ? why : "accepted");
			failures++;
		}
		if (!rc)
			param_parsed_free(&out);
	}

	tc_reset_env();
	path = tc_write_tmp("net.conf", "version = 1;\n"
			    "port_range = \"9-1\";\n"
			    "advertise_addrs = [ \"192.0.2.1\", \"x\" ];\n"
			    "advertise_ports = [ \"80=81\" ];\n");
	cfg = tc_open_ok(path);
	n = errors_of(cfg, &msgs);
	CHECK(n == 2);
	if (n == 2) {
		char want[4608];

		snprintf(want, sizeof(want), "%s:2: port_range: expected "
			 "\"<low>-<high>\" with 1 <= low <= high <= 65535, or "
			 "\"\", got \"9-1\"", path);
		CHECK_STR(msgs[0], want);
		snprintf(want, sizeof(want), "%s:3: advertise_addrs: expected "
			 "a string or a list of at most 11 IP addresses without "
			 "port or prefix, got \"x\" as item 2", path);
		CHECK_STR(msgs[1], want);
	}
	{
		char src[4608];

		snprintf(src, sizeof(src), "%s:4", path);
		CHECK_VALUE(core_config_core(cfg), "advertise_ports", "80=81",
			    0, src);
	}
	core_config_free(cfg);
}

static int remove_entry(const char *path, const struct stat *sb, int flag,
			struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

int main(void)
{
	const char *dir = getenv("NCCL_MESH_TEST_DATA");

	const char *tmp = getenv("TMPDIR");

	data_dir = dir ? dir : "tests/data";
	snprintf(tc_tmp_dir, sizeof(tc_tmp_dir), "%s/test_config.XXXXXX",
		 tmp && *tmp ? tmp : P_tmpdir);
	if (!mkdtemp(tc_tmp_dir)) {
		perror("mkdtemp");
		return 2;
	}
	test_params_table();
	test_env_name();
	test_precedence();
	test_file_types();
	test_env_types();
	test_bad_values();
	test_parse_error();
	test_missing_file();
	test_embedded_default();
	test_version();
	test_unknown();
	test_module_tables();
	test_net_types();
	test_fifo();
	test_order_and_hosts();
	nftw(tc_tmp_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	else
		printf("all config checks passed\n");
	return failures ? 1 : 0;
}
