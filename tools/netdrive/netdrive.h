/* SPDX-License-Identifier: MIT */
/*
 * netdrive: drives any NCCL net plugin the way NCCL's proxy does, through
 * its ABI (plugin_abi.c), with a bootstrap socket between two processes
 * (bootstrap_socket.c), a verified benchmark (bench.c) and what the
 * process costs meanwhile (proc_usage.c).  meshperf, meshinfo --cluster
 * and nccl-conform share it; each hands it its hooks (hooks.c).
 */
#ifndef NETDRIVE_H
#define NETDRIVE_H

#include <endian.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nccl-mesh/nccl_net.h>

#define PERF_MAX_SIZES 64
#define PERF_MAX_GROUP 8
#define PERF_MAX_CHANNELS 128
#define PERF_DEFAULT_PLUGIN "libnccl-net-mesh.so"

/* ---- what the library asks of its program (hooks.c) ---- */

/*
 * Where the library's messages go, its clock and the watchdog it pushes
 * out: handed over in one struct, as the core hands its modules a struct
 * mesh_host, rather than by functions every program must define.  A
 * member left NULL takes the default named beside it.
 */
enum perf_log_level {
	PERF_LOG_ERROR,
	PERF_LOG_WARN,
	PERF_LOG_INFO,
};

struct perf_hooks {
	/* perf_err, perf_warn and perf_info.  NULL: a line on stderr per
	 * error or warning, info dropped. */
	void (*vlog)(enum perf_log_level level, const char *fmt, va_list ap);
	/* Handed to the plugin's init as NCCL's logger.  NULL: its WARN
	 * and ABORT lines through vlog, the rest dropped. */
	ncclDebugLogger_t plugin_logger;
	/* Seconds on a clock that never steps back.  NULL: CLOCK_MONOTONIC. */
	double (*now)(void);
	/* The benchmark made progress.  NULL: no watchdog to push out. */
	void (*watchdog_kick)(void);
};

/* Copies *hooks (NULL: every default).  Call it before the library's first
 * use and before any thread starts: the hooks are read unlocked. */
void perf_hooks_set(const struct perf_hooks *hooks);

/* The hooks, or their defaults where the program left them NULL. */
void perf_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void perf_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void perf_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double perf_now(void);
ncclDebugLogger_t perf_plugin_logger(void);
void perf_watchdog_kick(void);

/* proc_usage.c: the process's threads, descriptors and peak RSS;
 * -1 where /proc does not say. */
struct perf_proc {
	long threads;
	long fds;
	long peak_rss_kib;
};
/* The most seen by any sample so far (peak RSS: the last sample's). */
extern struct perf_proc perf_proc_max;
void perf_proc_sample(struct perf_proc *now);

/* What both processes must agree on; the client's values win. */
struct perf_params {
	uint32_t window;	/* outstanding requests per comm */
	/* iters, budget and mem are per direction, shared by its channels */
	uint32_t iters;		/* most iterations per size */
	uint64_t budget;	/* bytes moved per size, bounds iterations */
	uint64_t mem;		/* buffer bytes, bounds window */
	int64_t lat_max;	/* largest size with a ping-pong, -1: none */
	uint64_t recv_size;	/* receives post at least this many bytes */
	uint32_t bidir;
	uint32_t unverified;	/* neither fill nor check message bytes */
	uint32_t reload;	/* init..dlclose cycles */
	uint32_t timeout;	/* seconds without progress before giving up */
	uint64_t comm_id;	/* what NCCL would pass as commHash */
	uint32_t channels;	/* connections per direction, as NCCL's channels */
	uint32_t nsizes;
	uint64_t sizes[PERF_MAX_SIZES];
};

/*
 * Faults injected on purpose (--fault), to check that a plugin turns them
 * into clean errors.  Per process: the server and the client choose apart.
 */
enum perf_fault {
	PERF_FAULT_NONE,
	/* every isend is PERF_FAULT_OVERSIZE_EXTRA bytes longer than the
	 * peer's irecv; _SMALL: 8 bytes, so a small message stays small */
	PERF_FAULT_OVERSIZE,
	PERF_FAULT_OVERSIZE_SMALL,
	/* the receive buffer is deregistered once receives are posted */
	PERF_FAULT_DEREG_RECV,
};
#define PERF_FAULT_OVERSIZE_EXTRA 4096
#define PERF_FAULT_OVERSIZE_SMALL_EXTRA 8

/* Bytes an oversize fault adds to every isend. */
static inline uint64_t perf_fault_extra(enum perf_fault fault)
{
	return fault == PERF_FAULT_OVERSIZE ? PERF_FAULT_OVERSIZE_EXTRA :
	       fault == PERF_FAULT_OVERSIZE_SMALL ?
	       PERF_FAULT_OVERSIZE_SMALL_EXTRA : 0;
}

/* ---- the plugin behind one interface, whatever its ABI (plugin_abi.c) ---- */

/* Properties of every version, widened; has_* say what the ABI reported. */
struct perf_props {
	const char *name;
	const char *pci_path;
	uint64_t guid;
	int ptr_support;
	int reg_is_global;
	int force_flush;
	int speed;
	int port;
	float latency;
	int max_comms;
	int max_recvs;
	int net_device_type;
	int net_device_version;
	int vdev_ndevs;
	uint64_t max_p2p_bytes;
	uint64_t max_coll_bytes;
	int max_multi_request_size;
	int rail_id;
	int plane_id;
	bool has_v9;		/* forceFlush, vProps, max*Bytes */
	bool has_v11;		/* maxMultiRequestSize */
	bool has_v12;		/* railId, planeId */
};

/*
 * The profiler callback handed to init, as NCCL would: NCCL's own without a
 * profiler plugin (events get no handle, the default), none at all (ABI v9
 * and older NCCL), or one that records every event as a profiler plugin
 * would (a handle for each, its stop counted).
 */
enum perf_prof { PERF_PROF_NCCL, PERF_PROF_NONE, PERF_PROF_RECORD };

struct perf_net {
	void *lib;
	int abi;
	union {
		const void *any;
		const ncclNet_v8_t *v8;
		const ncclNet_v9_t *v9;
		const ncclNet_v10_t *v10;
		const ncclNet_v11_t *v11;
		const ncclNet_v12_t *v12;
	} api;
	ncclNetCommConfig_t config;
	void *ctx;		/* v11+: from init, given back to finalize */
	bool ctx_valid;
	enum perf_prof prof;	/* set before init */
	unsigned long prof_events;
};

int perf_net_open(struct perf_net *net, const char *plugin, int abi);
void perf_net_close(struct perf_net *net);
const char *perf_net_name(const struct perf_net *net);
const char *perf_result_str(ncclResult_t res);

ncclResult_t perf_net_init(struct perf_net *net, uint64_t comm_id);
ncclResult_t perf_net_finalize(struct perf_net *net);
ncclResult_t perf_net_devices(struct perf_net *net, int *ndev);
ncclResult_t perf_net_get_props(struct perf_net *net, int dev,
				struct perf_props *props);
ncclResult_t perf_net_listen(struct perf_net *net, int dev, void *handle,
			     void **listen_comm);
ncclResult_t perf_net_connect(struct perf_net *net, int dev, void *handle,
			      void **send_comm);
ncclResult_t perf_net_accept(struct perf_net *net, void *listen_comm,
			     void **recv_comm);
ncclResult_t perf_net_reg_mr(struct perf_net *net, void *comm, void *data,
			     size_t size, void **mhandle);
ncclResult_t perf_net_dereg_mr(struct perf_net *net, void *comm,
			       void *mhandle);
ncclResult_t perf_net_isend(struct perf_net *net, void *send_comm, void *data,
			    size_t size, int tag, void *mhandle,
			    void **request);
ncclResult_t perf_net_irecv(struct perf_net *net, void *recv_comm, int n,
			    void **data, size_t *sizes, int *tags,
			    void **mhandles, void **request);
bool perf_net_has_iflush(const struct perf_net *net);
ncclResult_t perf_net_iflush(struct perf_net *net, void *recv_comm, int n,
			     void **data, int *sizes, void **mhandles,
			     void **request);
ncclResult_t perf_net_test(struct perf_net *net, void *request, int *done,
			   int *sizes);
ncclResult_t perf_net_close_send(struct perf_net *net, void *send_comm);
ncclResult_t perf_net_close_recv(struct perf_net *net, void *recv_comm);
ncclResult_t perf_net_close_listen(struct perf_net *net, void *listen_comm);

/* ---- out-of-band bootstrap socket (bootstrap_socket.c) ---- */

enum perf_msg {
	PERF_MSG_HELLO = 1,
	PERF_MSG_HELLO_ACK,
	PERF_MSG_HANDLE,
	PERF_MSG_BARRIER,
	PERF_MSG_RESULT,
};

/*
 * Every message starts with a header: "MPRF", the type and the body's
 * length, each 32 bits big-endian.  Here, not in bootstrap_socket.c, so that
 * a caller reading its sockets itself (meshinfo --cluster's rank 0, which
 * greets many at once) frames and checks the very same bytes.
 */
#define OOB_HDR_BYTES 12
#define OOB_MAGIC 0x4d505246u

static inline void oob_hdr_put(uint8_t out[OOB_HDR_BYTES],
			       enum perf_msg type, size_t len)
{
	const uint32_t v[3] = { htobe32(OOB_MAGIC), htobe32(type),
				htobe32((uint32_t)len) };

	memcpy(out, v, sizeof(v));
}

/* The header's word i: 0 magic, 1 type, 2 length. */
static inline uint32_t oob_hdr_word(const uint8_t in[OOB_HDR_BYTES], int i)
{
	uint32_t v;

	memcpy(&v, in + 4 * i, sizeof(v));
	return be32toh(v);
}

static inline bool oob_hdr_ok(const uint8_t in[OOB_HDR_BYTES],
			      enum perf_msg type, size_t len)
{
	return oob_hdr_word(in, 0) == OOB_MAGIC &&
	       oob_hdr_word(in, 1) == (uint32_t)type &&
	       oob_hdr_word(in, 2) == len;
}

int oob_listen(const char *bind_host, int port, int *port_out);
int oob_accept(int listen_fd, int timeout_s);
int oob_connect(const char *host, int port, int timeout_s);
int oob_send_msg(int fd, enum perf_msg type, const void *buf, size_t len,
		 int timeout_s);
int oob_recv_msg(int fd, enum perf_msg type, void *buf, size_t len,
		 int timeout_s);
int oob_barrier(int fd, uint32_t tag, int timeout_s);
int oob_peer_gone(int fd);
bool oob_peer_gone_long(int fd, double *gone_at);

/* Fixed-width big-endian encoding of the messages above. */
size_t perf_params_encode(const struct perf_params *p, uint8_t *buf);
int perf_params_decode(struct perf_params *p, const uint8_t *buf, size_t len);
#define PERF_PARAMS_WIRE_MAX (8 * 12 + 8 * PERF_MAX_SIZES)

/* ---- benchmark (bench.c) ---- */

/* One direction of traffic on one channel: a send comm on one side, a recv
 * comm on the other, with the receiver's group size (grouped irecv). */
struct perf_dir {
	void *comm;
	void *mhandle;
	uint8_t *buf;
	size_t buf_len;
	int group;		/* receiver's grouped-receive count */
	int sender_rank;	/* whose rank the tags carry */
	int dir_id;		/* 0: client->server, 1: server->client */
	int channel;		/* 0 .. channels-1, folded into the pattern */
	char name[48];		/* for errors: "client->server", and the
				 * channel when there are several */
	enum perf_fault fault;	/* injected into this direction, if any */
	bool mr_dropped;	/* PERF_FAULT_DEREG_RECV done: mhandle is gone */
};

/* Per-size plan, computed identically on both sides. */
struct perf_plan {
	uint64_t size;
	int group;
	int window;
	uint32_t iters;
	uint64_t recv_size;	/* bytes each receive posts */
	bool verify;		/* fill every message, check every byte */
};

void perf_plan_size(const struct perf_params *p, uint64_t size, int group,
		    struct perf_plan *plan);
void perf_channel_params(const struct perf_params *p,
			 struct perf_params *per_channel);
size_t perf_region_len(const struct perf_params *p, int group, bool for_bw,
		       bool for_latency);

struct perf_side {
	struct perf_net *net;
	const struct perf_params *params;
	int oob;		/* watched for a dead peer while waiting */
};

/* What a bandwidth run took: all of it, and until the first channel was
 * through (its receives where this side receives, else its sends): with
 * connections served evenly, every channel finishes near the end. */
struct perf_bw_times {
	double elapsed;
	double first_channel;
};

/* send and recv: arrays of nch channels each, or NULL for no traffic that
 * way; all their streams run concurrently. */
int perf_run_bw(struct perf_side *s, struct perf_dir *send,
		struct perf_dir *recv, int nch, uint64_t size,
		struct perf_bw_times *times);
/* What a ping-pong took: all of it, the time spent writing and checking
 * patterns, and its shortest round (0 when none completed). */
struct perf_lat_times {
	double elapsed;
	double overhead;
	double min_round;
};

int perf_run_latency(struct perf_side *s, struct perf_dir *send,
		     struct perf_dir *recv, bool initiator, uint64_t size,
		     uint32_t iters, struct perf_lat_times *times);
uint32_t perf_latency_iters(const struct perf_params *p, uint64_t size);

/* Runs one plugin call; reports a failure with its name, -EIO. */
#define NET_CALL(name, call)                                                   \
	({                                                                     \
		ncclResult_t res_ = (call);                                    \
		if (res_ != ncclSuccess)                                       \
			perf_err("%s failed: %s (%d)", name,                   \
				 perf_result_str(res_), (int)res_);            \
		res_ == ncclSuccess ? 0 : -EIO;                                \
	})

#endif
