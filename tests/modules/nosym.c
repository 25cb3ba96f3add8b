/* SPDX-License-Identifier: MIT */
/*
 * A shared object that is not a nccl-mesh module: it exports a symbol,
 * but not the descriptor the loader looks for.
 */
#include <nccl-mesh/module.h>

MESH_EXPORT int mesh_nosym_is_not_a_module(void);

int mesh_nosym_is_not_a_module(void)
{
	return 1;
}
