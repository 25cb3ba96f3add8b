/* SPDX-License-Identifier: MIT */
#include "core_log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Atomic(ncclDebugLogger_t) nccl_logger;

void core_log_set_nccl(ncclDebugLogger_t logger)
{
	atomic_store(&nccl_logger, logger);
}

/* Outside NCCL: WARN always, INFO on request, like NCCL_DEBUG would. */
static int stderr_level(void)
{
	static int level = -1;
	const char *v;

	if (level >= 0)
		return level;
	level = MESH_LOG_WARN;
	v = getenv("NCCL_MESH_LOG");
	if (!v)
		v = getenv("NCCL_DEBUG");
	if (v && !strcasecmp(v, "info"))
		level = MESH_LOG_INFO;
	else if (v && !strcasecmp(v, "trace"))
		level = MESH_LOG_TRACE;
	return level;
}

void core_vlog(const char *module, enum mesh_log_level level, const char *file,
	       int line, const char *fmt, va_list ap)
{
	ncclDebugLogger_t logger = atomic_load(&nccl_logger);
	int saved_errno = errno;
	char msg[2048];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (logger) {
		unsigned long flags = level == MESH_LOG_WARN ? NCCL_NET :
							       NCCL_NET | NCCL_INIT;

		if (module)
			logger((ncclDebugLogLevel)level, flags, file, line,
			       "NET/Mesh/%s: %s", module, msg);
		else
			logger((ncclDebugLogLevel)level, flags, file, line,
			       "NET/Mesh: %s", msg);
	} else if ((int)level <= stderr_level()) {
		const char *tag = level == MESH_LOG_WARN ? "WARN" :
				  level == MESH_LOG_INFO ? "INFO" : "TRACE";

		fprintf(stderr, "%s NET/Mesh%s%s: %s\n", tag, module ? "/" : "",
			module ? module : "", msg);
	}
	errno = saved_errno;
}

void core_log(const char *module, enum mesh_log_level level, const char *file,
	      int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	core_vlog(module, level, file, line, fmt, ap);
	va_end(ap);
}
