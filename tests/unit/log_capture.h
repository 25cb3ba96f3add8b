/* SPDX-License-Identifier: MIT */
/*
 * NCCL's logger as the plugin gets it, for the tests that read what the
 * plugin logs: pass test_logger where NCCL passes its logger, and each
 * line, formatted, goes to test_log_sink.
 */
#ifndef TEST_LOG_CAPTURE_H
#define TEST_LOG_CAPTURE_H

#include <stdarg.h>
#include <stdio.h>

#include "nccl-mesh/nccl_net.h"

static void (*test_log_sink)(const char *text);

static void test_logger(ncclDebugLogLevel level, unsigned long flags,
			const char *file, int line, const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	(void)level, (void)flags, (void)file, (void)line;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (test_log_sink)
		test_log_sink(text);
}

#endif
