/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the config resolver's error and warning texts: bad values,
 * unreadable or mistyped files, unknown keys, broken module tables, and the
 * order errors come in.  Apart from test_config.c (which has main()) to keep
 * each file short; test_config.h has what the two share.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "config.h"

#include "test_config.h"

void test_bad_values(void)
{
	const char *path = tc_fixture("bad-values.conf");
	const struct core_scope *tcp;
	struct core_config *cfg;
	const char *const *msgs;
	char want[4608];
	int n;

	tc_reset_env();
	setenv("NCCL_MESH_HOSTNAME", "gpu1", 1);
	cfg = tc_open_ok(path);
	tcp = core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	core_config_module(cfg, "relay", NULL);
	n = errors_of(cfg, &msgs);

#define WANT(fmt, ...)                                                   \
	do {                                                             \
		snprintf(want, sizeof(want), fmt, path, __VA_ARGS__);    \
		CHECK_MSG(msgs, n, want);                                \
	} while (0)
	WANT("%s:%d: hosts entry 1: expected a group with match = "
	     "\"<hostname glob>\"", 14);
	WANT("%s:%d: hosts entry 2: expected a group with match = "
	     "\"<hostname glob>\"", 15);
	WANT("%s:%d: dc: expected an integer in 0..1048575, got 2000000", 3);
	WANT("%s:%d: module_path: expected a string, got 3", 4);
	WANT("%s:%d: max_rails: expected an integer in 1..65536, got 0", 16);
	WANT("%s:%d: tcp-xdc.streams: expected an integer in 1..256, "
	     "got \"eight\"", 7);
	WANT("%s:%d: tcp-xdc.streams: expected an integer in 1..256, "
	     "got 300", 16);
	WANT("%s:%d: tcp-xdc.nodelay: expected true or false, got 1", 8);
	WANT("%s:%d: tcp-xdc.buffer: expected a size in 4K..4G (bytes, or "
	     "with a K, M or G suffix), got \"12Q\"", 9);
	WANT("%s:%d: tcp-xdc.peers: expected a list of strings, got 5 as "
	     "item 2", 10);
	WANT("%s:%d: tcp-xdc.window: expected an integer, got 1.5", 11);
	WANT("%s:%d: relay: expected a group of the module's keys "
	     "('relay: { key = value; };')", 5);
#undef WANT
	if (n != 12)
		print_msgs("error", msgs, n);
	CHECK(n == 12);
	/* A rejected value leaves the layer below in place. */
	CHECK_VALUE(tcp, "streams", "8", 8, "default");
	CHECK_VALUE(core_config_core(cfg), "dc", "0", 0, "default");
	core_config_free(cfg);

	path = tc_write_tmp("hosts-group.conf", "version = 1;\n"
			    "hosts = { match = \"*\"; };\n");
	cfg = tc_open_ok(path);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s:2: hosts: expected a list of groups "
		 "( { match = \"<glob>\"; ... }, ... )", path);
	CHECK(n == 1);
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);
}

void test_parse_error(void)
{
	const char *path = tc_fixture("parse-error.conf");
	struct core_config *cfg;
	const char *const *msgs;
	char want[4608];
	int n;

	tc_reset_env();
	setenv("NCCL_MESH_DC", "5", 1);
	cfg = tc_open_ok(path);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s:3: ", path);
	if (n != 1 || strncmp(msgs[0], want, strlen(want)) ||
	    strlen(msgs[0]) == strlen(want)) {
		fprintf(stderr, "%s:%d: want one error starting \"%s\"\n",
			__FILE__, __LINE__, want);
		print_msgs("error", msgs, n);
		failures++;
	}
	/* The environment still applies, so tools can show something. */
	CHECK_VALUE(core_config_core(cfg), "dc", "5", 5, "env NCCL_MESH_DC");
	CHECK_VALUE(core_config_core(cfg), "max_rails", "16", 16, "default");
	core_config_free(cfg);
	tc_reset_env();
}

void test_missing_file(void)
{
	struct core_config *cfg;
	const char *const *msgs;
	char path[4200], want[4600];
	int n;

	tc_reset_env();
	snprintf(path, sizeof(path), "%s/missing.conf", tc_tmp_dir);
	cfg = tc_open_ok(path);
	CHECK_STR(core_config_path(cfg), path);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s: cannot read: %s", path,
		 strerror(ENOENT));
	CHECK(n == 1);
	CHECK_MSG(msgs, n, want);
	CHECK_VALUE(core_config_core(cfg), "dc", "0", 0, "default");
	core_config_free(cfg);

	setenv("NCCL_MESH_CONF", path, 1);
	cfg = tc_open_ok(NULL);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s (named by NCCL_MESH_CONF): cannot "
		 "read: %s", path, strerror(ENOENT));
	CHECK(n == 1);
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);

	/* A directory is not a config file either. */
	cfg = tc_open_ok(tc_tmp_dir);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s: cannot read: %s", tc_tmp_dir,
		 strerror(EISDIR));
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);
	tc_reset_env();
}

void test_version(void)
{
	struct core_config *cfg;
	const char *const *msgs;
	char want[4608];
	const char *path = tc_fixture("version2.conf");
	int n;

	tc_reset_env();
	cfg = tc_open_ok(path);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s:1: version: expected 1, got 2 (this "
		 "build reads version 1 files)", path);
	CHECK(n == 1);
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);

	path = tc_write_tmp("version-str.conf", "dc = 1;\nversion = \"1\";\n");
	cfg = tc_open_ok(path);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s:2: version: expected 1, got a value "
		 "that is not an integer (this build reads version 1 files)",
		 path);
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);

	/* No version at all is read as version 1. */
	path = tc_write_tmp("no-version.conf", "dc = 1;\n");
	cfg = tc_open_ok(path);
	CHECK(errors_of(cfg, &msgs) == 0);
	core_config_free(cfg);
}

void test_unknown(void)
{
	static const char *const modules[] = { "tcp-xdc", "relay" };
	const char *path = tc_fixture("unknown-keys.conf");
	struct core_config *cfg;
	const char *const *msgs;
	char want[4608];
	int n;

	tc_reset_env();
	setenv("NCCL_MESH_TCP_XDC_STREAM", "1", 1);
	setenv("NCCL_MESH_RELAY_OVER", "tcp-xdc", 1);
	setenv("NCCL_MESH_TEST_ANYTHING", "1", 1);
	setenv("NCCL_MESH_LOG", "info", 1);
	setenv("NCCL_MESH_HOSTNAME", "h1", 1);
	setenv("NCCL_MESH_BOGUS_THING", "1", 1);
	setenv("NCCL_MESH_MAXRAILS", "4", 1);
	cfg = tc_open_ok(path);
	core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	core_config_check_unknown(cfg, modules, 2);
	n = core_config_warnings(cfg, &msgs);

#define WANT(fmt, ...)                                                   \
	do {                                                             \
		snprintf(want, sizeof(want), fmt, path, __VA_ARGS__);    \
		CHECK_MSG(msgs, n, want);                                \
	} while (0)
	WANT("%s:%d: unknown key 'dcc' (did you mean 'dc'?)", 3);
	WANT("%s:%d: unknown key 'tcp-xdc.stream' (did you mean 'streams'?)",
	     4);
	WANT("%s:%d: unknown key 'tcp-xcd' (did you mean 'tcp-xdc'?)", 5);
	WANT("%s:%d: unknown key 'zzzzzzzz'", 7);
	WANT("%s:%d: unknown key 'tcp-xdc.bufer' in hosts entry '*' (did you "
	     "mean 'buffer'?)", 9);
	WANT("%s:%d: unknown key 'max_rail' in hosts entry '*' (did you mean "
	     "'max_rails'?)", 9);
#undef WANT
	CHECK_MSG(msgs, n, "unknown environment variable "
		  "NCCL_MESH_TCP_XDC_STREAM (did you mean "
		  "NCCL_MESH_TCP_XDC_STREAMS?)");
	CHECK_MSG(msgs, n, "unknown environment variable "
		  "NCCL_MESH_MAXRAILS (did you mean NCCL_MESH_MAX_RAILS?)");
	CHECK_MSG(msgs, n, "unknown environment variable "
		  "NCCL_MESH_BOGUS_THING");
	if (n != 9)
		print_msgs("warning", msgs, n);
	CHECK(n == 9);
	/* Warnings are not errors. */
	CHECK(errors_of(cfg, &msgs) == 0);

	/* Checking again does not repeat anything. */
	core_config_check_unknown(cfg, modules, 2);
	CHECK(core_config_warnings(cfg, &msgs) == 9);

	/* A section for a module nobody knows about is unknown itself. */
	core_config_check_unknown(cfg, modules, 1);
	n = core_config_warnings(cfg, &msgs);
	snprintf(want, sizeof(want), "%s:6: unknown key 'relay'", path);
	CHECK_MSG(msgs, n, want);
	CHECK_MSG(msgs, n, "unknown environment variable NCCL_MESH_RELAY_OVER");
	CHECK(n == 11);
	core_config_free(cfg);
	tc_reset_env();
}

void test_module_tables(void)
{
	static const struct mesh_param bad[] = {
		{ "n", MESH_PARAM_INT, "abc", 0, 0, "Bad default" },
		{ "size", MESH_PARAM_SIZE, "", 0, 0, "No default" },
		{ "weird", (enum mesh_param_type)42, "", 0, 0, "Bad type" },
		{ NULL, 0, NULL, 0, 0, NULL },
	};
	const struct core_scope *scope;
	struct core_config *cfg;
	const char *const *msgs;
	int n;

	tc_reset_env();
	cfg = tc_open_ok(tc_write_tmp("empty.conf", "version = 1;\n"));
	scope = core_config_module(cfg, "badmod", bad);
	CHECK(scope && scope->nvalues == 3);
	CHECK_VALUE(scope, "size", "", 0, "default");
	n = errors_of(cfg, &msgs);
	CHECK(n == 2);
	CHECK_MSG(msgs, n, "module badmod: parameter 'n' has an invalid "
		  "default: expected an integer, got \"abc\"");
	CHECK_MSG(msgs, n, "module badmod: parameter 'weird' has unknown "
		  "type 42");
	scope = core_config_module(cfg, "empty", NULL);
	CHECK(scope && scope->nvalues == 0);
	core_config_free(cfg);
}

/* A FIFO as the config or as an @include fails at once, it never blocks. */
void test_fifo(void)
{
	char fifo[4200], want[12600], conf[8192];
	struct core_config *cfg;
	const char *const *msgs;
	int n;

	tc_reset_env();
	snprintf(fifo, sizeof(fifo), "%s/fifo", tc_tmp_dir);
	if (mkfifo(fifo, 0600)) {
		perror("mkfifo");
		failures++;
		return;
	}
	alarm(10);	/* a hang fails the test instead of the whole run */
	cfg = tc_open_ok(fifo);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s: cannot read: a FIFO, not a regular "
		 "file", fifo);
	CHECK(n == 1);
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);

	snprintf(conf, sizeof(conf), "%s", tc_write_tmp("inc.conf",
		 "version = 1;\n@include \"fifo\"\n"));
	cfg = tc_open_ok(conf);
	n = errors_of(cfg, &msgs);
	snprintf(want, sizeof(want), "%s:2: @include \"%s\": cannot read: a "
		 "FIFO, not a regular file", conf, fifo);
	CHECK(n == 1);
	CHECK_MSG(msgs, n, want);
	core_config_free(cfg);
	alarm(0);
}

/* Errors come sorted by line whatever order they were found in; entries of
 * other hosts are checked; value errors name their source. */
void test_order_and_hosts(void)
{
	const struct core_scope *tcp;
	struct core_config *cfg;
	const char *const *msgs;
	const char *path;
	char want[4608];
	int n;

	tc_reset_env();
	setenv("NCCL_MESH_HOSTNAME", "gpu1", 1);
	setenv("NCCL_MESH_TCP_XDC_WINDOW", "7", 1);
	path = tc_write_tmp("order.conf", "version = 1;\n"
			    "tcp-xdc: { streams = 0; };\n"
			    "dc = -1;\n"
			    "hosts = ( { match = \"other*\"; max_rails = 0;\n"
			    "  tcp-xdc: { nodelay = 3; }; } );\n");
	cfg = tc_open_ok(path);
	tcp = core_config_module(cfg, "tcp-xdc", tc_tcp_params);
	core_config_value_error(cfg, "tcp-xdc",
				core_scope_get(tcp, "window"), "too %s", "big");
	core_config_value_error(cfg, "tcp-xdc",
				core_scope_get(tcp, "buffer"), "too small");
	n = errors_of(cfg, &msgs);
	if (n != 6)
		print_msgs("error", msgs, n);
	CHECK(n == 6);
	if (n == 6) {
		snprintf(want, sizeof(want), "%s:2: tcp-xdc.streams: ", path);
		CHECK(!strncmp(msgs[0], want, strlen(want)));
		snprintf(want, sizeof(want), "%s:3: dc: ", path);
		CHECK(!strncmp(msgs[1], want, strlen(want)));
		snprintf(want, sizeof(want), "%s:4: max_rails: ", path);
		CHECK(!strncmp(msgs[2], want, strlen(want)));
		snprintf(want, sizeof(want), "%s:5: tcp-xdc.nodelay: ", path);
		CHECK(!strncmp(msgs[3], want, strlen(want)));
		CHECK_STR(msgs[4], "environment NCCL_MESH_TCP_XDC_WINDOW: "
			  "tcp-xdc.window: too big");
		CHECK_STR(msgs[5], "tcp-xdc.buffer (default \"4M\"): too small");
	}
	/* Other hosts' values set nothing here. */
	CHECK_VALUE(core_config_core(cfg), "max_rails", "16", 16, "default");
	core_config_free(cfg);
	tc_reset_env();
}
