/* SPDX-License-Identifier: MIT */
/*
 * What one NCCL connection of the plugin runs over, for tools such as
 * meshinfo --cluster: the plugin exports MESH_CONN_INFO_SYMBOL, a
 * mesh_conn_info_fn, which takes a comm NCCL got from the plugin's connect
 * or accept.  The core fills the path; the module that carries the
 * connection fills the rest (mesh_module.describe).  Strings are empty
 * where nobody knows.
 */
#ifndef NCCL_MESH_CONN_INFO_H
#define NCCL_MESH_CONN_INFO_H

#include <stdint.h>

/** The plugin's exported function; the suffix is this struct's version. */
#define MESH_CONN_INFO_SYMBOL "mesh_conn_info_v1"

#define MESH_CONN_NAME_MAX 64
#define MESH_CONN_ADDR_MAX 64
#define MESH_CONN_DEVICES_MAX 8
#define MESH_CONN_HOPS_MAX 8

/** One relay a relayed connection crosses, or its destination (last). */
struct mesh_conn_hop {
	char name[MESH_CONN_NAME_MAX];		/**< "destination" last */
	char module[MESH_CONN_NAME_MAX];	/**< the leg's module */
	char addr[MESH_CONN_ADDR_MAX];		/**< where the leg goes */
};

struct mesh_conn_info {
	/* the core */
	char module[MESH_CONN_NAME_MAX];	/**< the module carrying it */
	char path_class[16];	/**< same-DC, cross-DC, disconnected, relayed */
	char local[MESH_CONN_ADDR_MAX];		/**< direct: our end */
	char remote[MESH_CONN_ADDR_MAX];	/**< the peer's end */
	uint64_t fabric_id, peer_fabric_id;	/**< direct only */
	/* the module */
	/** "AES-256-GCM", "none" where bytes cross in clear, empty where
	 *  the module has no say (verbs) */
	char cipher[24];
	/** the local device of each cable the connection uses (verbs) */
	int ndevices;
	char devices[MESH_CONN_DEVICES_MAX][MESH_CONN_NAME_MAX];
	/** a relayed connection: the relays in order, then the destination */
	int nhops;
	struct mesh_conn_hop hops[MESH_CONN_HOPS_MAX];
};

/** 0, or -EINVAL for what is not a comm of this plugin. */
typedef int (*mesh_conn_info_fn)(void *comm, struct mesh_conn_info *info);

#endif
