/* SPDX-License-Identifier: MIT */
/*
 * The core's own parameters: one table that the config resolver, meshinfo
 * and docs/config.md all follow.  Top-level keys in the file, NCCL_MESH_<KEY>
 * in the environment.
 */
#ifndef CORE_PARAMS_H
#define CORE_PARAMS_H

#include <nccl-mesh/module.h>

/* A handle has room for 11 addresses (CORE_HANDLE_ADDRS_MAX). */
#define CORE_ADVERTISE_ADDRS_MAX 11
#define CORE_ADVERTISE_PORTS_MAX 0	/* no limit */
/* nccl_channels_by_size: entries, and NCCL's most channels (MAXCHANNELS). */
#define CORE_CHANNEL_RULES_MAX 16
#define CORE_NCCL_CHANNELS_MAX 64

/* X(enum id, key, type, default, min, max, help) */
#define CORE_PARAMS(X)                                                         \
	X(CP_MODULES, "modules", MESH_PARAM_LIST, "tcp-xdc", 0, 0,             \
	  "Modules to load, in order; their devices are merged in this order") \
	X(CP_MODULE_PATH, "module_path", MESH_PARAM_STR, "", 0, 0,             \
	  "Colon-separated directories searched for mesh-<module>.so, "        \
	  "instead of the default ones")                                       \
	X(CP_DC, "dc", MESH_PARAM_INT, "0", 0, 1048575,                        \
	  "Datacenter id of this host")                                        \
	X(CP_MAX_RAILS, "max_rails", MESH_PARAM_INT, "16", 1, 65536,           \
	  "Rails per datacenter; fabricId = dc * max_rails + rail")            \
	X(CP_RAILS, "rails", MESH_PARAM_LIST, "", 0, 0,                        \
	  "One entry per rail: members as module/device joined by '+'; "       \
	  "empty: rail i holds device i of every module")                      \
	X(CP_PREFER_SAME_DC, "prefer_same_dc", MESH_PARAM_LIST,                \
	  "rdma-mesh,ib-fabric,tcp-xdc", 0, 0,                                 \
	  "Module preference for peers in the same datacenter and rail")       \
	X(CP_PREFER_CROSS_DC, "prefer_cross_dc", MESH_PARAM_LIST, "tcp-xdc",   \
	  0, 0, "Module preference for peers on the same rail in another "     \
	  "datacenter")                                                        \
	X(CP_PREFER_DISCONNECTED, "prefer_disconnected", MESH_PARAM_LIST,      \
	  "relay", 0, 0, "Module preference for peers on another rail")       \
	X(CP_PORT_RANGE, "port_range", MESH_PARAM_PORT_RANGE, "", 0, 0,        \
	  "Listen ports as <low>-<high>; empty: any free port")                \
	X(CP_CONNECT_TIMEOUT_MS, "connect_timeout_ms", MESH_PARAM_INT,         \
	  "60000", 100, 86400000,                                              \
	  "How long connect and accept may take before they fail")             \
	X(CP_ADVERTISE_ADDRS, "advertise_addrs", MESH_PARAM_ADDR_LIST, "", 0,  \
	  CORE_ADVERTISE_ADDRS_MAX,                                            \
	  "External addresses (NAT, port mapping) put first in every handle")  \
	X(CP_ADVERTISE_PORT_OFFSET, "advertise_port_offset", MESH_PARAM_INT,   \
	  "0", -65535, 65535,                                                  \
	  "External port = listen port + this offset, for advertise_addrs")   \
	X(CP_ADVERTISE_PORTS, "advertise_ports", MESH_PARAM_PORT_MAP, "", 0,   \
	  CORE_ADVERTISE_PORTS_MAX,                                            \
	  "Explicit port map for advertise_addrs as <listen>=<external>; "     \
	  "wins over the offset")                                              \
	X(CP_ADVERTISE_LOCAL, "advertise_local", MESH_PARAM_BOOL, "true", 0,   \
	  0, "Also advertise the rail's own addresses, after the external "    \
	  "ones")                                                              \
	X(CP_AUTH_KEY_FILE, "auth_key_file", MESH_PARAM_STR, "", 0, 0,         \
	  "File holding a pre-shared key; when set, every connection is "      \
	  "authenticated both ways before any data moves")                     \
	X(CP_NCCL_BUFFSIZE, "nccl_buffsize", MESH_PARAM_SIZE, "8M", 0,         \
	  1LL << 30, "NCCL_BUFFSIZE given to NCCL when the environment "       \
	  "leaves it unset and NCCL_NET is unset or Mesh; 0: NCCL's own "      \
	  "default; with xdc_rtt_ms, raised to follow the WAN's "             \
	  "bandwidth-delay product, up to nccl_buffsize_max")                   \
	X(CP_NCCL_BUFFSIZE_MAX, "nccl_buffsize_max", MESH_PARAM_SIZE, "64M",   \
	  1LL << 20, 1LL << 30, "Largest NCCL_BUFFSIZE the plugin gives NCCL " \
	  "for a long WAN (xdc_rtt_ms); NCCL holds one per channel and peer")   \
	X(CP_NCCL_CHANNELS_BY_SIZE, "nccl_channels_by_size", MESH_PARAM_LIST,  \
	  "", 0, 0, "Channels per collective size, told to NCCL by the "       \
	  "plugin's tuner: entries <size>:<channels>, sizes rising; a "        \
	  "collective up to <size> bytes (above the entry before) is given "   \
	  "<channels>, 0 leaving NCCL's count; empty: NCCL's counts")          \
	X(CP_NCCL_LL_MAX, "nccl_ll_max", MESH_PARAM_SIZE, "0", 0, 1LL << 30,   \
	  "Largest collective NCCL may run with its low-latency protocols "    \
	  "(LL, LL128), told to NCCL by the plugin's tuner; larger ones run "  \
	  "Simple; 0: NCCL's choice")                                       \
	X(CP_NCCL_ALGO_BY_DISTANCE, "nccl_algo_by_distance", MESH_PARAM_BOOL, \
	  "true", 0, 0, "Let the plugin's tuner choose NCCL's all-reduce "    \
	  "algorithm by the WAN crossings each makes at xdc_rtt_ms; false: "  \
	  "NCCL's choice")                                                    \
	X(CP_XDC_RTT_MS, "xdc_rtt_ms", MESH_PARAM_INT, "0", 0, 60000,          \
	  "Round trip between the datacenters in ms, as the tuner counts it; " \
	  "the same on every host; 0: none declared, NCCL's algorithms stand") \
	X(CP_METRICS_FILE, "metrics_file", MESH_PARAM_STR, "", 0, 0,           \
	  "File the plugin writes its counters to in Prometheus text, for "    \
	  "node_exporter's textfile collector: replaced whole every "          \
	  "metrics_interval_ms, %p in the name becomes the process id; "      \
	  "empty: none")                                                       \
	X(CP_METRICS_INTERVAL_MS, "metrics_interval_ms", MESH_PARAM_INT,       \
	  "15000", 100, 3600000, "How often metrics_file is written")          \
	X(CP_METRICS_LISTEN, "metrics_listen", MESH_PARAM_ADDR_PORT, "", 0,   \
	  0, "Address and port meshrelay serves its counters on over HTTP "    \
	  "(GET /metrics, Prometheus text), as <ip>:<port>; empty: none; "     \
	  "the plugin ignores it")

enum core_param_id {
#define CORE_PARAM_ENUM(id, ...) id,
	CORE_PARAMS(CORE_PARAM_ENUM)
#undef CORE_PARAM_ENUM
	CP_COUNT
};

/* Indexed by enum core_param_id, terminated by a NULL name. */
extern const struct mesh_param core_params[CP_COUNT + 1];

#endif
