/* SPDX-License-Identifier: MIT */
/*
 * The one implementation behind every exported NCCL ABI version.  Negative
 * errno everywhere; core/nccl/plugin.c maps to ncclResult_t.
 */
#ifndef CORE_NET_H
#define CORE_NET_H

#include <stdbool.h>
#include <stdint.h>

#include <nccl-mesh/module.h>
#include "nccl-mesh/nccl_net.h"
#include "fabric.h"

/* The network's name as NCCL knows it (NCCL_NET=Mesh). */
#define CORE_NCCL_NET_NAME "Mesh"

/* Where a comm goes, as its INFO line says and tools ask (conn_info.h). */
struct core_comm_path {
	const char *module;
	const char *path_class;
	int direct;		/* the fields below are known */
	struct mesh_addr local, remote;
	uint64_t fabric_id, peer_fabric_id;
	uint32_t rtt_us;	/* the control connection's; 0: unknown */
};

struct core_metrics_comm;

/* What NCCL holds as a send or receive comm: one hop to the module. */
struct core_comm {
	const struct mesh_module *desc;
	void *mcomm;
	struct core_comm_path path;	/* cold: set up, logs and tools */
	struct core_metrics_comm *metrics;	/* its counters' entry */
};

int core_net_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger);
int core_net_finalize(void *ctx);
int core_net_devices(int *ndev);
const struct core_rail *core_net_rail(int dev);
/* The state between the first init and the last finalize (meshrelay). */
struct core_state;
const struct core_state *core_current_state(void);
/* The round trips the control connections of a path class measured
 * (rtt.c), in us, 0 before the first: the largest and the latest. */
struct core_rtt_seen {
	uint32_t max_us, latest_us;
};
struct core_rtt_seen core_rtt_seen(enum core_path_class c);
/* NCCL_NET unset or Mesh: what the plugin tells NCCL applies. */
bool core_nccl_net_is_ours(void);
/* A copy of what the tuner tells NCCL; nothing outside init and finalize. */
struct core_tuning;
void core_net_tuning(struct core_tuning *tuning);
int core_net_listen(void *ctx, int dev, void *handle, void **listen_comm);
/* traffic_class: NCCL's for this connection (0..255), -1 for none. */
int core_net_connect(void *ctx, int dev, void *handle, int traffic_class,
		     void **send_comm);
int core_net_accept(void *listen_comm, void **recv_comm);
int core_net_close_listen(void *listen_comm);
int core_net_close_comm(void *comm, int send);
/* What an open comm runs over (mesh_conn_info_fn). */
int core_net_conn_info(void *comm, struct mesh_conn_info *info);

#endif
