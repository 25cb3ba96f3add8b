/* SPDX-License-Identifier: MIT */
/*
 * Logging for modules: everything goes through the host's logger, which the
 * core routes to NCCL's (prefix NET/Mesh/<module>) or to stderr in the tools.
 * A module keeps the host pointer it got at init in MESH_LOG_HOST.
 */
#ifndef NCCL_MESH_LOG_H
#define NCCL_MESH_LOG_H

#include <nccl-mesh/module.h>

#ifndef MESH_LOG_HOST
#error "define MESH_LOG_HOST to the module's struct mesh_host pointer"
#endif

#define MESH_WARN(...) \
	MESH_LOG_HOST->log(MESH_LOG_HOST, MESH_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define MESH_INFO(...) \
	MESH_LOG_HOST->log(MESH_LOG_HOST, MESH_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define MESH_TRACE(...) \
	MESH_LOG_HOST->log(MESH_LOG_HOST, MESH_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

#endif
