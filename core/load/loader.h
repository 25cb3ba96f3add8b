/* SPDX-License-Identifier: MIT */
/*
 * Module loader: finds mesh-<name>.so on the search path, checks its
 * descriptor, resolves its parameters and runs its init.  A module that
 * fails is recorded with one clear reason; the others still load.
 */
#ifndef CORE_LOADER_H
#define CORE_LOADER_H

#include <stdbool.h>

#include <nccl-mesh/module.h>
#include "config.h"

enum core_module_status {
	CORE_MODULE_READY,	/* loaded, initialised, has devices */
	CORE_MODULE_NODEV,	/* loaded, but no usable device */
	CORE_MODULE_FAILED,	/* not usable; reason says why */
};

struct core_module {
	char name[MESH_NAME_MAX];
	char path[4096];		/* file loaded or last tried */
	void *dl;
	/* Points at ops: the module's descriptor with every optional
	 * operation it lacks filled with the core's default. */
	const struct mesh_module *desc;
	struct mesh_module ops;
	struct mesh_host host;
	struct core_config *cfg;
	const struct core_scope *params;
	void *mctx;
	int ndevs;
	enum core_module_status status;
	char reason[512];
	bool quiet;			/* only inspected: log nothing */
	bool in_init;			/* inside check, init or devices */
	bool has_route;			/* carries what no rail member reaches */
	int param_errors;		/* from check, through param_error */
	char said[256];			/* last line it logged in init */
	char nodev[256];		/* why no devices, from no_devices */
};

/*
 * Search path: NCCL_MESH_MODULE_PATH (it is also the module_path key) when
 * it names a directory, and then nothing else; else the directory
 * `nccl-mesh/` next to the library holding the core, then the install
 * directory.
 */
int core_loader_search_path(const struct core_config *cfg, char ***dirs_out);

/* Loads every module named by the config, in order. */
int core_loader_load(struct core_config *cfg, struct core_module **mods_out,
		     int *nmods_out);
void core_loader_unload(struct core_module *mods, int nmods);

/*
 * For a config section naming a module that is not enabled: when
 * mesh-<name>.so is on the search path, opens it (no init), resolves its
 * parameters and runs its check, so the section is validated like an
 * enabled module's.  Returns 0 when mod holds the opened module (unload it
 * with core_loader_unload), -ENOENT when it is not installed or not a
 * module.
 */
int core_loader_inspect(struct core_config *cfg, const char *name,
			struct core_module *mod);

const char *core_module_status_name(enum core_module_status s);

#endif
