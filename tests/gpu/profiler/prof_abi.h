/* SPDX-License-Identifier: MIT */
/*
 * NCCL's profiler plugin ABI, versions 4 and 5, declared from the
 * documented layout (NCCL's ext-profiler/README.md and the example
 * plugin's description of each version): what our test profiler needs,
 * no more.  NCCL loads the newest ncclProfiler_vN it knows from the
 * library NCCL_PROFILER_PLUGIN names; 2.26 and 2.27 know v4, 2.28 v5.
 */
#ifndef MESHPROF_ABI_H
#define MESHPROF_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl-mesh/nccl_net.h"	/* ncclResult_t, ncclDebugLogger_t */

/* Event types, the bits of eActivationMask. */
enum {
	ncclProfileGroup = 1 << 0,
	ncclProfileColl = 1 << 1,
	ncclProfileP2p = 1 << 2,
	ncclProfileProxyOp = 1 << 3,
	ncclProfileProxyStep = 1 << 4,
	ncclProfileProxyCtrl = 1 << 5,
	ncclProfileKernelCh = 1 << 6,
	ncclProfileNetPlugin = 1 << 7,
};

/* States recordEventState reports: a ProxyStep's send posted, its
 * receive done, and a net plugin's update. */
#define MESHPROF_STATE_SEND_WAIT 9
#define MESHPROF_STATE_RECV_FLUSH_WAIT 11
#define MESHPROF_STATE_NET_UPDATE 21

/* The union both versions share, from its offset on (8-aligned). */
union meshprof_descr_u {
	struct {
		pid_t pid;
		uint8_t channelId;
		int peer;
		int nSteps;
		int chunkSize;
		int isSend;
	} proxyOp;
	struct {
		int step;
	} proxyStep;
	struct {
		int64_t id;
		void *data;
	} netPlugin;
	/* the largest member of v5's union (coll) bounds it */
	uint8_t pad[96];
};

typedef struct {
	uint8_t type;
	void *parentObj;
	int rank;
	union meshprof_descr_u u;
} ncclProfilerEventDescr_v4_t;

typedef struct {
	uint64_t type;
	void *parentObj;
	int rank;
	union meshprof_descr_u u;
} ncclProfilerEventDescr_v5_t;

typedef union {
	struct {
		size_t transSize;
	} proxyStep;
	struct {
		int appendedProxyOps;
	} proxyCtrl;
	struct {
		void *data;
	} netPlugin;
	struct {
		uint64_t pTimer;
	} kernelCh;
} ncclProfilerEventStateArgs_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **context, int *eActivationMask,
			     const char *commName, uint64_t commHash,
			     int nNodes, int nranks, int rank,
			     ncclDebugLogger_t logfn);
	ncclResult_t (*startEvent)(void *context, void **eHandle,
				   ncclProfilerEventDescr_v4_t *eDescr);
	ncclResult_t (*stopEvent)(void *eHandle);
	ncclResult_t (*recordEventState)(void *eHandle, int eState,
					 ncclProfilerEventStateArgs_t *args);
	ncclResult_t (*finalize)(void *context);
} ncclProfiler_v4_t;

typedef struct {
	const char *name;
	ncclResult_t (*init)(void **context, uint64_t commId,
			     int *eActivationMask, const char *commName,
			     int nNodes, int nranks, int rank,
			     ncclDebugLogger_t logfn);
	ncclResult_t (*startEvent)(void *context, void **eHandle,
				   ncclProfilerEventDescr_v5_t *eDescr);
	ncclResult_t (*stopEvent)(void *eHandle);
	ncclResult_t (*recordEventState)(void *eHandle, int eState,
					 ncclProfilerEventStateArgs_t *args);
	ncclResult_t (*finalize)(void *context);
} ncclProfiler_v5_t;

#endif
