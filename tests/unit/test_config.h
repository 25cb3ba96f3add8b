/* SPDX-License-Identifier: MIT */
/*
 * What test_config.c and test_config_diag.c share: the fixture, temp-file
 * and check helpers (tc_, defined in test_config.c), and the cases
 * test_config_diag.c holds for test_config.c's main.
 */
#ifndef MESH_TEST_CONFIG_H
#define MESH_TEST_CONFIG_H

#include <stdio.h>

#include "config.h"

#include "check.h"

/* Checks a value's text, number and source text in one line. */
#define CHECK_VALUE(scope, key, text, num, source)                        \
	tc_check_value(__FILE__, __LINE__, scope, key, text, num, source)

#define CHECK_MSG(msgs, n, want)                                         \
	tc_check_msg(__FILE__, __LINE__, msgs, n, want)

/* The tcp-xdc table the cases of both files resolve against. */
extern const struct mesh_param tc_tcp_params[];
extern char tc_tmp_dir[4096];

void tc_check_value(const char *file, int line,
		    const struct core_scope *scope, const char *key,
		    const char *text, long long num, const char *source);
void tc_check_msg(const char *file, int line, const char *const *msgs,
		  int n, const char *want);
void tc_reset_env(void);
const char *tc_fixture(const char *name);
const char *tc_write_tmp(const char *name, const char *text);
struct core_config *tc_open_ok(const char *path);

static inline void print_msgs(const char *what, const char *const *msgs,
			      int n)
{
	int i;

	for (i = 0; i < n; i++)
		fprintf(stderr, "    %s: %s\n", what, msgs[i]);
}

static inline int errors_of(const struct core_config *cfg,
			    const char *const **msgs)
{
	return core_config_errors(cfg, msgs);
}

/* In test_config_diag.c. */
void test_bad_values(void);
void test_parse_error(void);
void test_missing_file(void);
void test_version(void);
void test_unknown(void);
void test_module_tables(void);
void test_fifo(void);
void test_order_and_hosts(void);

#endif
