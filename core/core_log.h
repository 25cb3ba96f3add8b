/* SPDX-License-Identifier: MIT */
/*
 * The core's logger.  Inside NCCL it forwards to NCCL's logger with the
 * prefix NET/Mesh (NET/Mesh/<module> for modules); in the tools and tests it
 * prints to stderr, WARN always, INFO when NCCL_MESH_LOG=info or NCCL_DEBUG=INFO.
 */
#ifndef CORE_LOG_H
#define CORE_LOG_H

#include <stdarg.h>

#include <nccl-mesh/module.h>
#include "nccl-mesh/nccl_net.h"

/* NULL: log to stderr. */
void core_log_set_nccl(ncclDebugLogger_t logger);
void core_log(const char *module, enum mesh_log_level level, const char *file,
	      int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void core_vlog(const char *module, enum mesh_log_level level, const char *file,
	       int line, const char *fmt, va_list ap);

#define CORE_WARN(...) core_log(NULL, MESH_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define CORE_INFO(...) core_log(NULL, MESH_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define CORE_TRACE(...) core_log(NULL, MESH_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

#endif
