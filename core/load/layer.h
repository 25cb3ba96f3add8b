/* SPDX-License-Identifier: MIT */
/*
 * Layering: the host services through which one module (relay) drives the
 * others and opens channels to hosts other than the NCCL peer (module.h,
 * ABI 1.4).
 */
#ifndef CORE_LAYER_H
#define CORE_LAYER_H

#include <nccl-mesh/module.h>
#include "state.h"

/* The nonce a hello names to reach a module's service instead of an NCCL
 * listen ("SERV" and the module's tag): public, anyone may dial it. */
uint64_t core_service_nonce(const char *module);
/* Fills the layering members of a module's host (loader.c). */
void core_layer_host(struct mesh_host *host);
/* The services work on st from now (meshinfo: without start). */
void core_layer_bind(const struct core_state *st);
/* Binds st and runs every module's start. */
int core_layer_start(struct core_state *st);
/* The services stop working on st (before it is freed). */
void core_layer_unbind(const struct core_state *st);
/* Closes the service listeners (after the modules' fini). */
void core_layer_close_services(void);
/* The loaded module that carries connections no rail member reaches (the
 * first with a route operation), or NULL. */
struct core_module *core_layer_module(const struct core_state *st);

#endif
