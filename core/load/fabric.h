/* SPDX-License-Identifier: MIT */
/*
 * Rails, fabricIds and path classes.  NCCL sees one device per rail; a rail
 * bundles member devices of several modules.  A member's fabricId is
 * dc * max_rails + rail.  Between two fabricIds: same dc and rail ->
 * same-DC, same rail in another dc -> cross-DC, another rail ->
 * disconnected.
 */
#ifndef CORE_FABRIC_H
#define CORE_FABRIC_H

#include <stdint.h>

#include "config.h"
#include "handle.h"
#include "loader.h"

enum core_path_class {
	CORE_PATH_SAME_DC,
	CORE_PATH_CROSS_DC,
	CORE_PATH_DISCONNECTED,
	CORE_PATH_COUNT
};

/* The listen handle names every member of a rail for the peer to choose
 * from, so a rail has no more members than the handle holds. */
#define CORE_RAIL_MEMBERS_MAX CORE_HANDLE_MEMBERS_MAX

struct core_member {
	struct core_module *module;
	int dev;			/* module-local device index */
	struct mesh_dev_props props;
};

struct core_rail {
	int rail;
	uint64_t fabric_id;
	char name[MESH_NAME_MAX];	/* "mesh0" */
	int nmembers;
	struct core_member members[CORE_RAIL_MEMBERS_MAX];
	struct mesh_dev_props props;	/* what NCCL is told */
};

uint64_t core_fabric_id(uint64_t dc, uint64_t max_rails, uint64_t rail);
uint64_t core_fabric_dc(uint64_t fabric_id, uint64_t max_rails);
uint64_t core_fabric_rail(uint64_t fabric_id, uint64_t max_rails);
enum core_path_class core_path_class(uint64_t a, uint64_t b,
				     uint64_t max_rails);
const char *core_path_class_name(enum core_path_class c);

/*
 * Builds the rails from the config's `rails` (or, when empty, rail i =
 * device i of every ready module).  Errors (unknown module or device in a
 * rail, too many members) are logged and return -EINVAL.
 */
int core_fabric_build(const struct core_config *cfg, struct core_module *mods,
		      int nmods, struct core_rail **rails_out, int *nrails_out);

/* The member of `rail` from module `name`, or NULL. */
const struct core_member *core_rail_member(const struct core_rail *rail,
					   const char *name);

/*
 * The preference list for a class (config prefer_*), as module names.
 */
int core_path_preference(const struct core_config *cfg,
			 enum core_path_class c, const char *const **names);

#endif
