/* SPDX-License-Identifier: MIT */
/* Checks shared by the unit tests: count failures, report file:line. */
#ifndef MESH_TEST_CHECK_H
#define MESH_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

/* One count per test program, however many files it is built from: the
 * files' weak definitions become one. */
__attribute__((weak)) int failures;

#define CHECK(cond)                                                      \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "%s:%d: check failed: %s\n",     \
				__FILE__, __LINE__, #cond);              \
			failures++;                                      \
		}                                                        \
	} while (0)

#define CHECK_STR(got, want)                                             \
	do {                                                             \
		const char *got_ = (got), *want_ = (want);               \
		if (!got_ || strcmp(got_, want_)) {                      \
			fprintf(stderr, "%s:%d: %s is \"%s\", want \"%s\"\n", \
				__FILE__, __LINE__, #got,                \
				got_ ? got_ : "(null)", want_);          \
			failures++;                                      \
		}                                                        \
	} while (0)

#endif
