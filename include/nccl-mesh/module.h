/* SPDX-License-Identifier: MIT */
/*
 * The contract between the nccl-mesh core and its transport modules.
 *
 * A module is a shared object that exports exactly one data symbol,
 * MESH_MODULE_SYMBOL, a const struct mesh_module.  The core dlopens it,
 * checks abi_version and size, and hands it a struct mesh_host with the
 * services it needs: NCCL loads the core RTLD_LOCAL, so a module can never
 * link back to core symbols.
 *
 * Every function returns 0 or a negative errno; only the core maps errors to
 * NCCL's result codes.  A module logs the reason for an error where it
 * decides it, once, through host->log.
 *
 * ABI: any change to a struct in this file bumps MESH_MODULE_ABI_MINOR (a
 * member appended at the end) or MESH_MODULE_ABI_MAJOR (anything else, which
 * also renames the symbol).  The core loads modules of any minor up to its
 * own; members a module's minor lacks are never read (the descriptor's size
 * says which it has).
 *
 * 1.1: mesh_dev_props.fabric_id_set/fabric_id.
 * 1.2: mesh_ctrl.peer_addrs/npeer_addrs, mesh_module.reach.
 * 1.3: parameter types PORT_RANGE, ADDR_LIST, PORT_MAP; mesh_host.param_error
 *      and mesh_host.no_devices; mesh_module.check.
 * 1.4: layering: struct mesh_leg, the mesh_host leg_*, dial*, ctrl_*,
 *      handle_addrs and serve* services; mesh_module.start, route, route_abandon,
 *      routes_to and report; mesh_ctrl.secret/secret_len,
 *      mesh_host.authenticated.
 * 1.5: mesh_module.describe.
 * 1.6: resuming: struct mesh_rejoin, struct mesh_stream_new and the
 *      mesh_host rejoin_* services.
 * 1.7: metrics: struct mesh_counter, mesh_module.comm_counters and
 *      mesh_module.counters.
 * 1.8: profiler events: struct mesh_prof_part and the mesh_host prof_*
 *      services.
 * 1.9: mesh_ctrl.traffic_class_set/traffic_class.
 * 1.10: mesh_ctrl.leg.
 * 1.11: parameter type ADDR_PORT.
 * 1.12: mesh_ctrl.rtt_us.
 *
 * Optional members.  The core reads a descriptor member only when the
 * descriptor's size covers it (MESH_MODULE_HAS), so appending members never
 * makes an older module too short.  Every operation from fini on except
 * the required ones below may be NULL or absent; the core puts its own
 * default in its place (fini and abandon do nothing, iflush reports
 * nothing to flush, reg_mr_dmabuf answers -EOPNOTSUPP, reach says yes,
 * check finds nothing wrong, describe adds nothing), so no call site
 * tests for NULL.  Required:
 * init, devices, get_properties, connect, accept, reg_mr, dereg_mr,
 * isend, irecv, close_send, close_recv; a module lacking one is refused
 * with a line naming it.
 *
 * Threads.  The core serialises the module-wide calls: check, init,
 * devices, get_properties and fini run under the core's init lock, never
 * two at once, from whichever thread NCCL calls init or finalize on.
 * reach, connect, accept and abandon come from the threads NCCL sets up
 * connections on (its main thread or a proxy thread), several at once for
 * different connections, never two at once for one ctrl.  reg_mr,
 * reg_mr_dmabuf and dereg_mr may run on any thread, concurrently with the
 * data path of the same comm.  isend, irecv, iflush, the requests' test
 * and close_send/close_recv come from NCCL's proxy threads; one comm is
 * driven by one thread at a time, but different comms of one module run
 * in parallel.  host->log may be called from any thread; param_* and
 * param_error from check and init (their values stay valid until fini);
 * no_devices from init and devices only.
 *
 * Layering (1.4).  A module may drive the other loaded modules: the host's
 * leg_* services hand it another module's device (its descriptor with
 * every operation filled, the same instance the core loaded), dial and
 * serve_accept give it control channels to hosts other than the NCCL peer.
 * These services work from start on, never from check or init, from any
 * thread; what the module then calls on a leg module follows that module's
 * rules above (one thread per comm at a time).  start runs once, under the
 * init lock, in processes that carry traffic (the plugin after its first
 * init, meshrelay), never in meshinfo --check.  route and route_abandon
 * come from the threads NCCL connects on, like connect.  report may be
 * called from any thread at any time after start.
 *
 * Resuming (1.6).  A module that survives a broken stream keeps its
 * connection reachable with the host's rejoin_* services: the accepting
 * side registers a key on the listener its connection came through
 * (rejoin_listen), the connecting side dials a new socket for stream N
 * through the same address, port, gate and key (rejoin_dial), and the
 * accepting side takes it (rejoin_take).  What the two ends then say to
 * each other to resume exactly is the module's.  From any thread, from
 * start on; one rejoin is driven by one thread at a time.
 */
#ifndef NCCL_MESH_MODULE_H
#define NCCL_MESH_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <nccl-mesh/conn_info.h>

#define MESH_MODULE_ABI_MAJOR 1
#define MESH_MODULE_ABI_MINOR 12
#define MESH_MODULE_ABI_VERSION \
	(((uint32_t)MESH_MODULE_ABI_MAJOR << 16) | MESH_MODULE_ABI_MINOR)
/** Name of the one symbol a module exports; carries the ABI major. */
#define MESH_MODULE_SYMBOL "mesh_module_v1"
#define MESH_MODULE_DESCRIPTOR mesh_module_v1
#define MESH_EXPORT __attribute__((visibility("default")))

/** Pointer kinds a device can send from / receive into (NCCL's bits). */
#define MESH_PTR_HOST 0x1
#define MESH_PTR_CUDA 0x2
#define MESH_PTR_DMABUF 0x4

enum mesh_log_level {
	MESH_LOG_WARN = 2,
	MESH_LOG_INFO = 3,
	MESH_LOG_TRACE = 5,
};

/** An IP endpoint.  ip[] is in network byte order, port in host order. */
struct mesh_addr {
	uint8_t family;		/**< AF_INET or AF_INET6 */
	uint8_t prefix_len;	/**< subnet prefix of a local address, 0 unknown */
	uint16_t port;		/**< 0 when not a dialable endpoint */
	uint8_t ip[16];		/**< IPv4 in the first 4 bytes */
};

#define MESH_DEV_ADDRS_MAX 8
#define MESH_NAME_MAX 64

/** What a module reports about one of its devices. */
struct mesh_dev_props {
	char name[MESH_NAME_MAX];	/**< "eth0", "mlx5_0" */
	char pci_path[256];		/**< sysfs device path, "" if virtual */
	uint64_t guid;
	int ptr_support;		/**< MESH_PTR_* bits */
	int reg_is_global;
	int force_flush;
	int speed_mbps;
	int port;
	float latency_us;
	int max_comms;
	int max_recvs;			/**< grouped receives per irecv */
	size_t max_p2p_bytes;
	size_t max_coll_bytes;
	int naddrs;			/**< local IP addresses of the device */
	struct mesh_addr addrs[MESH_DEV_ADDRS_MAX];
	/* ABI 1.1 */
	int fabric_id_set;		/**< nonzero: fabric_id is declared */
	uint64_t fabric_id;		/**< dc * max_rails + rail the device
					     declares itself in (a zeroed
					     struct declares nothing) */
};

enum mesh_param_type {
	MESH_PARAM_STR,
	MESH_PARAM_INT,		/**< decimal, range-checked against min..max */
	MESH_PARAM_BOOL,	/**< true/false, yes/no, on/off, 1/0 */
	MESH_PARAM_SIZE,	/**< bytes with optional K, M, G suffix (base 1024) */
	MESH_PARAM_LIST,	/**< list of strings; comma-separated in env */
	/* ABI 1.3 */
	MESH_PARAM_PORT_RANGE,	/**< "<low>-<high>", 1 <= low <= high <= 65535,
				     or "" for none; param_int gives
				     low << 16 | high (0 for none) */
	MESH_PARAM_ADDR_LIST,	/**< list of IPv4/IPv6 addresses without port
				     or prefix; max > 0 caps the count */
	MESH_PARAM_PORT_MAP,	/**< list of "<port>=<port>" pairs, each port
				     in 1..65535; max > 0 caps the count */
	/* ABI 1.11 */
	MESH_PARAM_ADDR_PORT,	/**< "<ip>:<port>" ("[<ipv6>]:<port>"), port in
				     1..65535, no multicast or broadcast
				     address, or "" for none; param_int gives
				     the port (0 for none) */
};

/**
 * One row of a module's parameter table.  The core resolves each value
 * (default < file < host section < environment), validates it, remembers
 * where it came from and serves it through mesh_host.  In the file it is
 * `<module>: { <name> = ...; }`, in the environment
 * NCCL_MESH_<MODULE>_<NAME> with '-' turned into '_' and upper-cased.
 */
struct mesh_param {
	const char *name;
	enum mesh_param_type type;
	const char *dflt;	/**< parsed like an env value; "" for none */
	long long min, max;	/**< INT and SIZE: the range; ADDR_LIST and
				     PORT_MAP: max is the most items;
				     min == max: no limit */
	const char *help;	/**< one sentence */
};

struct mesh_ctrl;
struct mesh_leg;
struct mesh_rejoin;

/** A new stream of a connection, from rejoin_dial or rejoin_take (1.6). */
struct mesh_stream_new {
	int index;		/**< which of the connection's streams */
	int fd;			/**< non-blocking, TCP_NODELAY; the caller's */
	/** This socket's own secret from its authentication (fresh for
	 *  every socket, like mesh_ctrl.secret); secret_len 0 without a key. */
	uint8_t secret[32];
	size_t secret_len;
};

/** What carried a part of a request, for profiler events (ABI 1.8). */
enum mesh_prof_kind {
	MESH_PROF_STREAM = 1,	/**< a chunk on one of a comm's streams */
	MESH_PROF_QP = 2,	/**< a work request on one queue pair */
	MESH_PROF_HOP = 3,	/**< a relay's hop */
};

/** One part of a request: what a module reports with prof_start (1.8). */
struct mesh_prof_part {
	enum mesh_prof_kind kind;
	int index;		/**< the stream's index, the QP number, the hop */
	size_t bytes;		/**< what this part moves */
};

/** Services the core gives a module.  One instance per module. */
struct mesh_host {
	uint32_t abi_version;
	uint32_t size;
	const char *module;	/**< the module's own name */
	void (*log)(const struct mesh_host *host, enum mesh_log_level level,
		    const char *file, int line, const char *fmt, ...)
		__attribute__((format(printf, 5, 6)));
	/* Parameters from the module's table, already validated. */
	const char *(*param_str)(const struct mesh_host *host, const char *name);
	long long (*param_int)(const struct mesh_host *host, const char *name);
	int (*param_list)(const struct mesh_host *host, const char *name,
			  const char *const **items);
	/* ABI 1.3 */
	/**
	 * From check: the value of parameter `name` breaks a rule of the
	 * module (fmt says which, e.g. "must not exceed chunk_size (4K)").
	 * The core adds where the value came from (file:line, environment
	 * variable) and makes init fail.
	 */
	void (*param_error)(const struct mesh_host *host, const char *name,
			    const char *fmt, ...)
		__attribute__((format(printf, 3, 4)));
	/**
	 * From init or devices, before returning -ENODEV or zero devices:
	 * why there is no usable device ("no interface matches 'eth9'").
	 * meshinfo and the log show it with the module's status.
	 */
	void (*no_devices)(const struct mesh_host *host, const char *fmt, ...)
		__attribute__((format(printf, 2, 3)));
	/* ABI 1.4: layering, from start on (see the top of this file). */
	/**
	 * The device that reaches a peer advertising these addresses: on
	 * `rail` (-1: any rail), by the config's preference for the path
	 * class, asking each module's reach.  0, or -EHOSTUNREACH with every
	 * module's reason in why.
	 */
	int (*leg_to_addrs)(const struct mesh_host *host, int rail,
			    const struct mesh_addr *peer, int npeer,
			    struct mesh_leg *leg, char *why, size_t cap);
	/** The same for the peer of an NCCL listen handle (128 bytes). */
	int (*leg_to_handle)(const struct mesh_host *host, int rail,
			     const void *handle, struct mesh_leg *leg,
			     char *why, size_t cap);
	/** The member of `rail` from module `name`: -ENOENT when none. */
	int (*leg_of_rail)(const struct mesh_host *host, int rail,
			   const char *name, struct mesh_leg *leg);
	/**
	 * Opens a control channel, authenticated with the core's key, with
	 * this module's tag: to the NCCL listen of `handle` (its accept then
	 * runs this module's accept), or with handle NULL to the module's
	 * service (serve) at one of addrs.  Progress with dial_progress.
	 * Of a handle only the endpoints at a port where a listener of
	 * the cluster can be (port_range, its advertised mapping, else
	 * the kernel's ephemeral range) are dialed: -EPERM when none is.
	 */
	int (*dial)(const struct mesh_host *host, const struct mesh_addr *addrs,
		    int naddrs, const void *handle, struct mesh_ctrl **ctrl);
	/** 0 once connected, -EAGAIN before, else fails with why. */
	int (*dial_progress)(const struct mesh_host *host,
			     struct mesh_ctrl *ctrl, char *why, size_t cap);
	/** 0 once everything queued on ctrl was written, -EAGAIN before. */
	int (*ctrl_flush)(const struct mesh_host *host, struct mesh_ctrl *ctrl);
	/** The addresses an NCCL listen handle advertises (at most max);
	 *  their count, or -EINVAL for what is not a handle. */
	int (*handle_addrs)(const struct mesh_host *host, const void *handle,
			    struct mesh_addr *addrs, int max);
	/** Closes a channel from dial or serve_accept, and its streams. */
	void (*ctrl_close)(const struct mesh_host *host, struct mesh_ctrl *ctrl);
	/**
	 * Listens for this module's service on `port` (all addresses), behind
	 * the same gate and key as the NCCL listeners.  -EADDRINUSE when
	 * another process serves it, unlogged: the module says what that
	 * means; other failures are logged with their cause.
	 */
	int (*serve)(const struct mesh_host *host, int port);
	/** The next authenticated channel to the service; -EAGAIN if none. */
	int (*serve_accept)(const struct mesh_host *host,
			    struct mesh_ctrl **ctrl);
	/**
	 * From check on: 1 when this host's config sets auth_key_file, so
	 * every control connection is authenticated and carries a secret
	 * (mesh_ctrl.secret); 0 when none is set.
	 */
	int (*authenticated)(const struct mesh_host *host);
	/* ABI 1.6: resuming (see the top of this file). */
	/**
	 * Accepting side, from the accept that finished on ctrl: the peer
	 * may open new streams of this connection later, named by `key`,
	 * through the listener ctrl came in on, after ctrl and its NCCL
	 * listen are gone.  The listener stays open while a rejoin is kept.
	 * -EOPNOTSUPP for a channel the core did not make (a relay's
	 * virtual one: the relay resumes the route itself).
	 */
	int (*rejoin_listen)(const struct mesh_host *host,
			     struct mesh_ctrl *ctrl, uint64_t key,
			     struct mesh_rejoin **rj);
	/**
	 * Connecting side: where rejoin_dial goes.  From a ctrl that
	 * dialed an NCCL listen (its address, the handle's nonce) or, with
	 * ctrl NULL, from an NCCL listen handle (128 bytes; any of its
	 * addresses at a port where a listener can be), for a module that
	 * opens streams for another host (a relay).  `key` names the
	 * rejoin_listen on the other side.
	 */
	int (*rejoin_to)(const struct mesh_host *host, struct mesh_ctrl *ctrl,
			 const void *handle, uint64_t key,
			 struct mesh_rejoin **rj);
	/**
	 * Connecting side: dials stream `index` anew, through the same gate
	 * and key as the first.  Progress across calls: 0 with *out once the
	 * peer's listener took it, -EAGAIN before.  Each attempt lasts at
	 * most a second, so that a path that comes back is found within a
	 * second; a failed attempt returns its error once and the next call
	 * starts another: -ECONNREFUSED (the host refused: nothing listens),
	 * -ESRCH (the listener answered and has no such rejoin: the peer
	 * closed or failed the connection), -EREMOTEIO (the listener took
	 * the socket and said nothing for 3 s: nothing there serves it),
	 * -EACCES (a key mismatch), or what the network said (-ETIMEDOUT,
	 * -ENETUNREACH, ...).
	 */
	int (*rejoin_dial)(const struct mesh_host *host, struct mesh_rejoin *rj,
			   int index, struct mesh_stream_new *out);
	/** Accepting side: 0 with *out for a stream the peer dialed anew,
	 *  -EAGAIN when none waits.  Any thread; never blocks. */
	int (*rejoin_take)(const struct mesh_host *host, struct mesh_rejoin *rj,
			   struct mesh_stream_new *out);
	/** Either side; closes what it holds (a dial in progress, streams
	 *  not taken) and, the last one, the listener it kept open. */
	void (*rejoin_close)(const struct mesh_host *host,
			     struct mesh_rejoin *rj);
	/* ABI 1.8: profiler events (docs/observe.md). */
	/**
	 * From isend or irecv, on the thread that called it: the token of
	 * the request being posted when a profiler records it, else NULL
	 * (the common case: then report nothing for it).  Keep it with the
	 * request; it is valid until test() says the request is done.
	 */
	void *(*prof_request)(const struct mesh_host *host);
	/**
	 * Starts the event of one part of a request (token from
	 * prof_request, never NULL): a chunk on a stream, a work request
	 * on a queue pair, a hop.  Start it before its bytes count towards
	 * the request's completion.  Returns the event for prof_stop, or
	 * NULL when the profiler keeps none.  Any thread; never blocks,
	 * never allocates.
	 */
	void *(*prof_start)(const struct mesh_host *host, void *token,
			    const struct mesh_prof_part *part);
	/** Stops an event prof_start returned (not NULL).  Any thread. */
	void (*prof_stop)(const struct mesh_host *host, void *event);
};

/**
 * The core's control channel to one peer, handed to a module's connect and
 * accept.  All calls are non-blocking: -EAGAIN means "call again later".
 * Messages keep their boundaries; the channel may be authenticated by the
 * core before the module sees it.
 */
struct mesh_ctrl {
	/** Queue one message (up to 4096 bytes); 0 once queued. */
	int (*send)(struct mesh_ctrl *ctrl, const void *msg, size_t len);
	/** Take the next message if it has arrived; returns its length. */
	int (*recv)(struct mesh_ctrl *ctrl, void *buf, size_t cap);
	/**
	 * Another TCP connection to the same peer, through the same listening
	 * port (so NAT rules and port ranges cover it).  Both sides ask for the
	 * same indices; the connecting side dials, the accepting side waits.
	 * On 0 the caller owns *fd_out (non-blocking, TCP_NODELAY).
	 */
	int (*stream)(struct mesh_ctrl *ctrl, int index, int *fd_out);
	const struct mesh_addr *local;	/**< our end of the control connection */
	const struct mesh_addr *remote;	/**< the peer's end */
	const char *peer;		/**< printable peer, for messages */
	void *module_state;		/**< the module's, while connecting */
	/* ABI 1.2 */
	/** Connecting side: the addresses the peer advertised in its handle
	 *  (with prefix_len and port); accepting side: NULL and 0. */
	const struct mesh_addr *peer_addrs;
	int npeer_addrs;
	/* ABI 1.4 */
	/**
	 * A secret only the two ends of this control connection know, from
	 * the authentication handshake (HKDF over the shared key and both
	 * sides' fresh nonces, bound to the connection's hello): the same
	 * bytes on both sides, new for every connection.  A module derives
	 * its own keys from it (HKDF with its own labels), never uses it
	 * as a key directly.  NULL and 0 when no auth_key_file is set.
	 * Valid as long as the mesh_ctrl.
	 */
	const uint8_t *secret;
	size_t secret_len;
	/* ABI 1.9 */
	/**
	 * Connecting side: the traffic class NCCL asks for this connection
	 * (ncclNetCommConfig_t.trafficClass of the communicator, NCCL_IB_TC
	 * style): the whole IP TOS / IPv6 traffic class byte, DSCP << 2 |
	 * ECN, as the GRH of RoCE and IB carries it.  traffic_class_set 0:
	 * NCCL gave none, and always on the accepting side (NCCL gives the
	 * accepting side no config) and on a channel a module made (a
	 * relay's); the module's own config then decides.
	 */
	int traffic_class_set;
	int traffic_class;	/**< 0..255 where set */
	/* ABI 1.10 */
	/**
	 * Nonzero: the comm set up on this channel is a leg of another
	 * module's connection (layering, 1.4), not one NCCL holds.  The
	 * module above decides whether the leg's failure is fatal (a relay
	 * sets up another route) and logs its own line, so the leg's module
	 * returns the error from test() and logs it at INFO, not WARN.  The
	 * core sets it on the channels of dial and serve_accept; a module
	 * that hands a leg's module a channel of its own making, or the
	 * channel of its own accept, sets it there.
	 */
	int leg;
	/* ABI 1.12 */
	/**
	 * Connecting side: the round trip of the control connection in
	 * microseconds as its kernel measured it through the handshake
	 * (util_tcp_rtt_us), from the first connect call on: what the path
	 * costs before any stream of the module's own exists.  0: unknown
	 * (the accepting side, a channel a module made).
	 */
	uint32_t rtt_us;
};

/**
 * A connect's or accept's state between calls: ctrl->module_state, made
 * zeroed (size bytes) and stored there on the first call, which *fresh
 * tells.  NULL, with nothing stored, when out of memory.  The module frees
 * it and clears module_state when it finishes or abandons the connection.
 */
static inline void *mesh_ctrl_state(struct mesh_ctrl *ctrl, size_t size,
				    bool *fresh)
{
	*fresh = !ctrl->module_state;
	if (*fresh)
		ctrl->module_state = calloc(1, size);
	return ctrl->module_state;
}

/**
 * The traffic class of a connection's packets (ABI 1.9): NCCL's where
 * ctrl carries one, else `own`, the module's config (-1: none).
 */
static inline int mesh_ctrl_traffic_class(const struct mesh_ctrl *ctrl,
					  int own)
{
	if (ctrl->traffic_class_set && ctrl->traffic_class >= 0 &&
	    ctrl->traffic_class <= 255)
		return ctrl->traffic_class;
	return own;
}

/**
 * One device of another loaded module, for a module that layers over it
 * (ABI 1.4).  module has every operation filled (none is NULL); pass mctx
 * and dev to its connect and accept.
 */
struct mesh_leg {
	const struct mesh_module *module;
	void *mctx;
	int dev;			/**< the module's own device index */
	int rail;			/**< the NCCL device (rail) it serves */
	const struct mesh_dev_props *props;
};

/** What a counter is (ABI 1.7): one that only grows, or a level. */
enum mesh_counter_kind {
	MESH_COUNTER_TOTAL,	/**< never goes back while the process lives */
	MESH_COUNTER_GAUGE,	/**< goes up and down (comms open now) */
};

/** Which way a counter's bytes or requests went (ABI 1.7). */
enum mesh_direction {
	MESH_DIR_NONE,
	MESH_DIR_SEND,
	MESH_DIR_RECV,
};

/**
 * One named counter (ABI 1.7), as the core's metrics show it:
 * nccl_mesh_<name>_total{module, peer, direction} (a gauge without
 * _total; docs/observe.md lists the names).  Counters of one name and
 * the same labels add up, so a module may give one per comm or per pair.
 * Only valid during the call to the mesh_counter_fn that receives it.
 */
struct mesh_counter {
	const char *name;	/**< [a-z][a-z0-9_]*, at most 48: "bytes" */
	/** one line, for a name the core does not document itself */
	const char *help;
	/** the other end, an address or a host name; NULL: none (from
	 *  comm_counters: the core's, the comm's peer) */
	const char *peer;
	/** from comm_counters, MESH_DIR_NONE: the comm's own direction */
	enum mesh_direction direction;
	enum mesh_counter_kind kind;
	uint64_t value;
};

/** Receives counters, one call each, on the caller's thread. */
typedef void (*mesh_counter_fn)(void *arg, const struct mesh_counter *c);

/*
 * Counting on the data path (ABI 1.7): a counter that only the thread
 * driving a comm writes, while another thread may read it.  A relaxed
 * load and store, no lock and no locked instruction; counters written by
 * more than one thread take __atomic_fetch_add(..., __ATOMIC_RELAXED).
 */
static inline void mesh_count(uint64_t *counter, uint64_t n)
{
	__atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) +
			 n, __ATOMIC_RELAXED);
}

/** A counter another thread writes, read whole. */
static inline uint64_t mesh_count_read(const uint64_t *counter)
{
	return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/**
 * Every request a module returns starts with this, so the core can reach the
 * module's test() with one indirection and no allocation.
 */
struct mesh_request {
	int (*test)(void *request, int *done, int *sizes);
};

/** A module's descriptor.  MINOR additions are appended at the end. */
struct mesh_module {
	uint32_t abi_version;	/**< MESH_MODULE_ABI_VERSION as compiled */
	uint32_t size;		/**< sizeof(struct mesh_module) as compiled */
	const char *name;	/**< "tcp-xdc"; file is mesh-<name>.so */
	const char *version;
	const struct mesh_param *params; /**< ends with name == NULL */

	/** -ENODEV: no usable device (a skip, not an error). */
	int (*init)(const struct mesh_host *host, void **mctx);
	void (*fini)(void *mctx);
	int (*devices)(void *mctx, int *ndev);
	int (*get_properties)(void *mctx, int dev, struct mesh_dev_props *props);

	/**
	 * Run the module's own exchange over ctrl.  Return 0 with *comm NULL
	 * while in progress, 0 with *comm set when done.  Called again with the
	 * same ctrl until then; keep in-progress state in ctrl->module_state.
	 */
	int (*connect)(void *mctx, int dev, struct mesh_ctrl *ctrl,
		       void **send_comm);
	int (*accept)(void *mctx, int dev, struct mesh_ctrl *ctrl,
		      void **recv_comm);
	/** Drop the in-progress state of a connection that will not finish. */
	void (*abandon)(void *mctx, struct mesh_ctrl *ctrl);

	int (*reg_mr)(void *comm, void *data, size_t size, int type,
		      void **mhandle);
	int (*reg_mr_dmabuf)(void *comm, void *data, size_t size, int type,
			     uint64_t offset, int fd, void **mhandle);
	int (*dereg_mr)(void *comm, void *mhandle);
	int (*isend)(void *send_comm, void *data, size_t size, int tag,
		     void *mhandle, void **request);
	int (*irecv)(void *recv_comm, int n, void **data, size_t *sizes,
		     int *tags, void **mhandles, void **request);
	/** NULL when the module never needs a flush. */
	int (*iflush)(void *recv_comm, int n, void **data, int *sizes,
		      void **mhandles, void **request);
	int (*close_send)(void *send_comm);
	int (*close_recv)(void *recv_comm);
	/* ABI 1.2 */
	/**
	 * Optional: whether device dev reaches a peer that advertises these
	 * addresses.  0 yes; -EHOSTUNREACH with a one-line reason in why.  The
	 * core asks before dialing and tries the next module when refused.
	 */
	int (*reach)(void *mctx, int dev, const struct mesh_addr *peer,
		     int npeer, char *why, size_t cap);
	/* ABI 1.3 */
	/**
	 * Optional: rules between the module's parameters (min_chunk <=
	 * chunk_size), checked before init by the plugin and by meshinfo,
	 * also for a module that is installed but not enabled and has a
	 * section in the config.  Only host->param_* and host->param_error
	 * may be used, no mctx exists yet.  Returns 0, or -EINVAL after one
	 * param_error per broken rule.
	 */
	int (*check)(const struct mesh_host *host);
	/* ABI 1.4 */
	/** Optional: the rails are built; layering services work from now. */
	int (*start)(void *mctx);
	/**
	 * Optional: carry a connection to the listener of `handle` that no
	 * other module on `rail` reaches (unreached says why).  Progress as
	 * connect, in-progress state in *state.  The peer's core runs this
	 * module's accept, with dev = the rail, on a channel the module
	 * opened with dial.  -EHOSTUNREACH (logged) when it cannot.
	 */
	int (*route)(void *mctx, int rail, const void *handle,
		     const char *unreached, void **state, void **send_comm);
	/** Drop the state of a route that will not finish. */
	void (*route_abandon)(void *mctx, void *state);
	/**
	 * Optional: 1 when the config sends connections to the listener of
	 * `handle` through this module's route even where a rail member
	 * would reach it (explicit routes: a default route that does not
	 * forward), 0 otherwise.  Asked before any rail member.
	 */
	int (*routes_to)(void *mctx, int rail, const void *handle);
	/** Optional: counters as text, e.g. bytes per leg. */
	int (*report)(void *mctx, char *buf, size_t cap);
	/* ABI 1.5 */
	/**
	 * Optional: what a comm of this module runs over, for tools: the
	 * cipher, the devices, a layered module's hops and remote end.
	 * info arrives with the core's part filled; the module writes only
	 * what it knows.  Any thread, while the comm is open.
	 */
	int (*describe)(void *comm, struct mesh_conn_info *info);
	/* ABI 1.7 */
	/**
	 * Optional: the counters of one open comm, through emit: "bytes"
	 * and "requests" of its completed requests, and whatever else the
	 * module counts per comm (mesh_count on the data path, never a
	 * lock).  The core labels them with the module, the comm's peer
	 * and direction, and at close folds the comm's last counters into
	 * the process's totals, so they never go back.  Any thread, while
	 * the comm is open, concurrently with its data path.
	 */
	int (*comm_counters)(void *comm, mesh_counter_fn emit, void *arg);
	/**
	 * Optional: counters of the module as a whole, not of one comm NCCL
	 * holds (outages resumed, a relay's forwarded pairs), totals that
	 * never go back.  Any thread, from start until fini.
	 */
	int (*counters)(void *mctx, mesh_counter_fn emit, void *arg);
};

/** Nonzero when descriptor d (of any minor) has member m. */
#define MESH_MODULE_HAS(d, m) \
	((d)->size >= offsetof(struct mesh_module, m) + sizeof((d)->m))

/** Size of a module descriptor of ABI 1.0 and 1.1 (before reach). */
#define MESH_MODULE_SIZE_1_0 offsetof(struct mesh_module, reach)
/** Size of a module descriptor of ABI 1.2 (before check). */
#define MESH_MODULE_SIZE_1_2 offsetof(struct mesh_module, check)
/** Size of a module descriptor of ABI 1.3 (before start). */
#define MESH_MODULE_SIZE_1_3 offsetof(struct mesh_module, start)
/** Size of a module descriptor of ABI 1.4 (before describe). */
#define MESH_MODULE_SIZE_1_4 offsetof(struct mesh_module, describe)
/** Size of a module descriptor of ABI 1.5 and 1.6 (before comm_counters). */
#define MESH_MODULE_SIZE_1_5 offsetof(struct mesh_module, comm_counters)

/** Nonzero when host h (of any minor) offers service m. */
#define MESH_HOST_HAS(h, m) \
	((h)->size >= offsetof(struct mesh_host, m) + sizeof((h)->m))

#endif
