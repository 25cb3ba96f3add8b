/* SPDX-License-Identifier: MIT */
/*
 * Profiler events of a network plugin, as NCCL's documentation lays them
 * out (ext-profiler/README.md, ext-net/README.md), and the events
 * nccl-mesh reports through them.
 *
 * NCCL (net ABI v10 on) hands the plugin ncclProfilerCallback_t at init
 * (nccl_net.h) and a pHandle with every isend and irecv: the ProxyStep
 * the request belongs to.  The plugin calls the callback with
 *
 *   callback(&eHandle, MESH_NCCL_PROF_NET_START, pHandle, pluginId, &descr)
 *
 * and NCCL, when a profiler plugin is loaded and asked for
 * ncclProfileNetPlugin events of that step, calls the profiler's
 * startEvent with a ncclProfileNetPlugin descriptor whose netPlugin.id is
 * pluginId and netPlugin.data points at descr (valid only during the
 * call: a profiler copies what it keeps), and sets eHandle.  Otherwise
 * eHandle is left as it was, so the plugin sets it to NULL first and
 * calls STOP or UPDATE_AND_STOP (pHandle and pluginId unused) only for an
 * event that started.  UPDATE passes a new descr to the profiler's
 * recordEventState (state ncclProfilerNetPluginUpdate, args.netPlugin.data).
 *
 * pluginId: the low 16 bits are the version of the plugin's descriptor,
 * the next 16 its type (NCCL's IB plugin 1, its Socket plugin 2).  A
 * profiler decodes netPlugin.data only for a type and version it knows.
 *
 * Used by the core to report events, and by profilers (our test profiler,
 * tests/gpu/profiler) to read them.  Modules never see NCCL types: they
 * report their parts through mesh_host (module.h, prof_*).
 */
#ifndef NCCL_MESH_NCCL_PROFILER_H
#define NCCL_MESH_NCCL_PROFILER_H

#include <stdint.h>

/* The callback's type argument. */
enum {
	MESH_NCCL_PROF_NET_START = 0,
	MESH_NCCL_PROF_NET_STOP = 1,
	MESH_NCCL_PROF_NET_UPDATE = 2,
	MESH_NCCL_PROF_NET_UPDATE_AND_STOP = 3,
};

/* pluginId's layout. */
#define MESH_NCCL_PROF_NET_VER_BITS 16
#define MESH_NCCL_PROF_NET_VER_MASK 0xffffU
#define MESH_NCCL_PROF_NET_TYPE_MASK 0xffff0000U
#define MESH_NCCL_PROF_NET_TYPE_IB (1U << MESH_NCCL_PROF_NET_VER_BITS)
#define MESH_NCCL_PROF_NET_TYPE_SOCK (2U << MESH_NCCL_PROF_NET_VER_BITS)

/* nccl-mesh's type, far from NCCL's own small numbers: "MH". */
#define MESH_PROF_NET_TYPE (0x4d48U << MESH_NCCL_PROF_NET_VER_BITS)
#define MESH_PROF_NET_VERSION 1
#define MESH_PROF_NET_ID ((int64_t)(MESH_PROF_NET_TYPE | MESH_PROF_NET_VERSION))

/* mesh_prof_event_v1.type */
enum {
	/* one isend, or one receive of an irecv: reported by the core,
	 * started when the request is posted, stopped (UPDATE_AND_STOP,
	 * bytes then what moved) when test() says done */
	MESH_PROF_REQUEST = 1,
	/* a share of a request that a module moved its own way (kind) */
	MESH_PROF_PART = 2,
};

/* mesh_prof_event_v1.flags */
#define MESH_PROF_FLAG_UNPOSTED 0x1	/* request: the module took no
					 * request after all; bytes 0 */
#define MESH_PROF_FLAG_FAILED 0x2	/* request: test() failed */

/*
 * What netPlugin.data points at when netPlugin.id is MESH_PROF_NET_ID.
 * Fixed size, no pointers: a profiler may copy it whole.
 */
struct mesh_prof_event_v1 {
	uint8_t type;		/* MESH_PROF_REQUEST or MESH_PROF_PART */
	uint8_t send;		/* 1: isend, 0: irecv */
	uint8_t kind;		/* a part: enum mesh_prof_kind (module.h) */
	uint8_t flags;		/* MESH_PROF_FLAG_* */
	int32_t index;		/* a part: stream index, QP number, hop */
	uint64_t request;	/* the request's id, the same in its parts;
				 * unique in the process */
	uint64_t bytes;		/* request: at start the size posted, at the
				 * update that stops it the size that moved;
				 * a part: its bytes */
	int32_t tag;		/* NCCL's tag of the request */
	uint8_t sub;		/* which receive of a grouped irecv */
	uint8_t peer_family;	/* AF_INET, AF_INET6; 0: not known here
				 * (a relayed comm's far end) */
	uint16_t peer_port;
	uint8_t peer_ip[16];	/* IPv4 in the first 4 bytes */
	char module[16];	/* the module that carries it, "tcp-xdc" */
};

#endif
