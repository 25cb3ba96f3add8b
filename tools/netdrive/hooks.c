/* SPDX-License-Identifier: MIT */
/*
 * The hooks a program hands the library (struct perf_hooks), and the
 * defaults behind those it leaves NULL: a program that wants nothing of
 * its own (no log format, no watchdog) needs to define nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "netdrive.h"

static struct perf_hooks hooks;

void perf_hooks_set(const struct perf_hooks *h)
{
	hooks = h ? *h : (struct perf_hooks){ 0 };
}

/* A line on stderr per error or warning; info needs a program that knows
 * how verbose it was asked to be. */
static void default_vlog(enum perf_log_level level, const char *fmt,
			 va_list ap)
{
	char msg[1024];

	if (level == PERF_LOG_INFO)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* one call per line: plugin threads log concurrently */
	fprintf(stderr, "%s %s\n", level == PERF_LOG_ERROR ? "ERROR" : "WARN",
		msg);
}

static void vlog(enum perf_log_level level, const char *fmt, va_list ap)
{
	(hooks.vlog ? hooks.vlog : default_vlog)(level, fmt, ap);
}

void perf_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(PERF_LOG_ERROR, fmt, ap);
	va_end(ap);
}

void perf_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(PERF_LOG_WARN, fmt, ap);
	va_end(ap);
}

void perf_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(PERF_LOG_INFO, fmt, ap);
	va_end(ap);
}

/* The plugin's WARN and ABORT lines, as the library's own warnings. */
static void default_plugin_logger(ncclDebugLogLevel level, unsigned long flags,
				  const char *file, int line,
				  const char *fmt, ...)
{
	va_list ap;

	(void)flags, (void)file, (void)line;
	if (level != NCCL_LOG_WARN && level != NCCL_LOG_ABORT)
		return;
	va_start(ap, fmt);
	vlog(PERF_LOG_WARN, fmt, ap);
	va_end(ap);
}

ncclDebugLogger_t perf_plugin_logger(void)
{
	return hooks.plugin_logger ? hooks.plugin_logger
				   : default_plugin_logger;
}

double perf_now(void)
{
	struct timespec ts;

	if (hooks.now)
		return hooks.now();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void perf_watchdog_kick(void)
{
	if (hooks.watchdog_kick)
		hooks.watchdog_kick();
}
