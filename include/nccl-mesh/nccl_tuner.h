/* SPDX-License-Identifier: MIT */
/*
 * NCCL's tuner plugin ABI, version 4, declared from the published facts of
 * the interface.  NCCL looks for a tuner in the network plugin's library
 * when NCCL_TUNER_PLUGIN names none, trying the newest version it knows
 * first and older ones down to 2; NCCL 2.28 takes version 4 from ours.
 * Not installed: modules never see NCCL types.
 */
#ifndef NCCL_MESH_NCCL_TUNER_H
#define NCCL_MESH_NCCL_TUNER_H

#include <stddef.h>

#include "nccl-mesh/nccl_net.h"

typedef enum {
	ncclFuncBroadcast = 0,
	ncclFuncReduce = 1,
	ncclFuncAllGather = 2,
	ncclFuncReduceScatter = 3,
	ncclFuncAllReduce = 4,
	ncclFuncSendRecv = 5,
	ncclFuncSend = 6,
	ncclFuncRecv = 7,
} ncclFunc_t;

/* Rows and columns of the cost table getCollInfo is given, and the cost
 * of what NCCL must not run. */
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_ALGO_PROTO_IGNORE -1.0f

typedef struct {
	const char *name;
	/* Once per communicator, after the network's init. */
	ncclResult_t (*init)(size_t nRanks, size_t nNodes,
			     ncclDebugLogger_t logFunction, void **context);
	/*
	 * Once per collective.  collCostTable is float[numAlgo][numProto] of
	 * NCCL's estimated times (-1: not possible), which the tuner may
	 * change; *nChannels, left 0, keeps NCCL's channel count, else it
	 * replaces it (NCCL still uses no more than the communicator has,
	 * and a collective too small to fill them uses fewer).
	 */
	ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType,
				    size_t nBytes, int numPipeOps,
				    float **collCostTable, int numAlgo,
				    int numProto, int regBuff, int *nChannels);
	ncclResult_t (*destroy)(void *context);
} ncclTuner_v4_t;

#endif
