/* SPDX-License-Identifier: MIT */
/*
 * The verbs layer shared by the RDMA modules (ib-fabric, rdma-mesh): devices,
 * memory registration, connection setup over the core's control channel and
 * the data path.  Each module links its own copy and sets vl_host.
 *
 * A connection runs over one or more links, each a device port (a cable);
 * its QPs are dealt round-robin over the links.
 *
 * Data path (as NCCL's IB transport): the receiver RDMA-writes one FIFO slot
 * per irecv into the sender's memory (address, rkey, size, tag of each posted
 * buffer); the sender matches its isend's tag there and RDMA-writes the data
 * straight into the posted buffer, ending with a write-with-immediate that
 * tells the receiver which slot and buffer it filled.  Large messages are cut
 * into pieces spread over the connection's QPs; small ones go round-robin.
 *
 * Eager path: when the receiver can copy (host memory only) and never
 * groups receives, messages up to eager_max bytes skip the FIFO.  The sender
 * writes them, behind a header with tag and size, into a ring of bounce
 * slots in the receiver's memory, slot = message number % VL_EAGER_SLOTS;
 * the receiver copies them out when the matching receive is tested.  A
 * receive posted for at most eager_max bytes then costs no FIFO write: only
 * every VL_CREDIT_EVERY receives the receiver writes its count of posted
 * receives (the credit) to the sender, which frees bounce slots.
 *
 * Close (verbs_close.c): a side that closes first drains its sends, then
 * RDMA-writes a close notice into the peer (behind everything it wrote on
 * that QP) and waits, bounded, for that write to complete before its QPs
 * go.  A peer that finds the notice takes the errors of its own later
 * writes as the end of the connection, not a failure; what it still waits
 * for fails with "closed by the peer".  A peer that dies writes no notice:
 * the survivor's writes (or the probe an idle comm sends every
 * VL_PROBE_MS) fail, and so does its test().
 */
#ifndef MESH_VERBS_H
#define MESH_VERBS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include <nccl-mesh/module.h>

#include "verbs_select.h"

extern const struct mesh_host *vl_host;
#define MESH_LOG_HOST vl_host
#include <nccl-mesh/log.h>

#define VL_MAX_QPS 16
/* Devices one connection may run over (cables to one peer). */
#define VL_MAX_LINKS 4
/* NCCL_NET_MAX_REQUESTS and NCCL_NET_IB_MAX_RECVS. */
#define VL_MAX_REQUESTS 32
#define VL_MAX_RECVS 8
/* Inline data asked of each QP (a FIFO slot of 8 receives fits). */
#define VL_INLINE 256
/* Every this many FIFO writes one is signaled, so the send queue drains
 * without a completion per receive. */
#define IB_FIFO_SIGNAL_EVERY 8
#define VL_MAX_MESSAGE ((1ULL << 31) - 1)
/* Below this a message is not cut: a WR per QP costs more than it gains. */
#define VL_MIN_PIECE (128U << 10)

/* ---- the eager path ---- */
#define VL_EAGER_MAX 1024	/* largest eager_max */
#define VL_EAGER_SLOTS 64	/* bounce slots: two FIFOs' worth */
#define VL_CREDIT_EVERY 16	/* receives posted per credit write */
/* Tests of a pending small receive before its credit goes out anyway: a
 * sender whose message is too big for it waits for that credit to fail. */
#define VL_CREDIT_VALVE 1024

struct ib_eager_hdr {
	int32_t tag;
	uint32_t size;
};

struct ib_eager_slot {
	struct ib_eager_hdr hdr;
	uint8_t data[VL_EAGER_MAX];
};

/* ---- immediate data: which buffer a piece filled ---- */
#define IB_IMM_SLOT_SHIFT 27	/* 5 bits: FIFO slot (request) */
#define IB_IMM_ELEM_SHIFT 24	/* 3 bits: buffer of a grouped receive */
#define IB_IMM_PIECES_SHIFT 20	/* 4 bits: pieces - 1 */
#define IB_IMM_SIZE_MASK 0xfffffU	/* message size, or ... */
#define IB_IMM_SIZE_FAR IB_IMM_SIZE_MASK /* ... written to sizes[][] */
/* An eager message: element 7 (eager comms never group receives), the
 * bounce slot in the size bits. */
#define IB_IMM_ELEM_EAGER 7

_Static_assert(VL_MAX_REQUESTS == 32, "5 slot bits");
_Static_assert(VL_MAX_RECVS == 8, "3 element bits");
_Static_assert(VL_MAX_QPS == 16, "4 piece bits");

/* One posted buffer, as the receiver writes it into the sender's FIFO. */
struct ib_fifo_elem {
	uint64_t addr;
	uint64_t size;
	uint32_t rkey[VL_MAX_LINKS];	/* the buffer's key on each link */
	int32_t tag;
	uint32_t nreqs;		/* buffers in this receive */
	uint32_t check;		/* vl_elem_check() of the rest */
	uint32_t seq;		/* request number + 1: the slot is fresh */
};

struct ib_fifo_slot {
	struct ib_fifo_elem e[VL_MAX_RECVS];
};

_Static_assert(sizeof(struct ib_fifo_elem) == 48, "FIFO element layout");

/* The receiver's count of posted receives, as it writes it to the sender. */
struct ib_credit {
	uint64_t value;
	uint64_t check;		/* vl_credit_check(value) */
};

/*
 * An RDMA write lands in no defined byte order: Soft-RoCE copies with
 * string instructions whose stores may become visible out of order, and
 * PCIe relaxed ordering does the same on hardware.  A reader that polls
 * memory for a FIFO entry or a credit therefore trusts it only once its
 * check word matches the rest; a torn one simply reads as "not yet".
 */
static inline uint64_t vl_mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

static inline uint32_t vl_elem_check(const volatile struct ib_fifo_elem *e)
{
	uint64_t h = vl_mix(0x6e63636c6d657368ULL, e->addr);

	h = vl_mix(h, e->size);
	for (int l = 0; l < VL_MAX_LINKS; l++)
		h = vl_mix(h, e->rkey[l]);
	h = vl_mix(h, (uint32_t)e->tag);
	h = vl_mix(h, (uint64_t)e->nreqs << 32 | e->seq);
	return (uint32_t)(h ^ h >> 32);
}

static inline uint64_t vl_credit_check(uint64_t value)
{
	return ~vl_mix(0x63726564697473ULL, value);
}

/* ---- devices ---- */

struct ib_mr_ent {
	struct ib_mr_ent *next;
	struct vl_dev *dev;
	uintptr_t start, end;	/* page-aligned range registered */
	struct ibv_mr *mr;
	int refs;
	bool cached;
};

struct vl_dev {
	char name[MESH_NAME_MAX];	/* "rxe12" or "mlx5_0:1" */
	char ibname[VL_NAME_MAX];
	int port;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_port_attr pattr;
	struct vl_port_info pinfo;
	struct vl_gid gid;
	int64_t fabric_id;
	char pci_path[256];
	uint64_t guid;
	int max_qp_wr;
	int max_cqe;
	bool gpu;		/* GPU memory can be registered */
	bool dmabuf;
	int naddrs;
	struct mesh_addr addrs[MESH_DEV_ADDRS_MAX];
	pthread_mutex_t mr_lock;
	struct ib_mr_ent *mrs;
};

struct vl_ctx {
	int ndevs;
	struct vl_dev *devs;
	int nqps;
	int timeout;
	int retry_cnt;
	int sl;
	int traffic_class;
	bool mr_cache;
	int max_recvs;
	int eager_max;
	unsigned int next_comm_id;
};

/* A registration: one region per link of the comm it was made on. */
struct vl_mh {
	uintptr_t start, end;	/* the range asked for */
	int n;
	struct ib_mr_ent *ent[VL_MAX_LINKS];
};

/* ---- connections ---- */

/*
 * What one link of a new connection runs over: a local device and, on the
 * connecting side, the peer address whose device the acceptor must use
 * (family 0: the acceptor picks, as ib-fabric does).
 */
struct vl_link_plan {
	struct vl_dev *dev;
	struct mesh_addr target;
};

/*
 * The acceptor's choice of local device for a link the connector asked
 * for; 0, or -errno with the reason in why.
 */
typedef int (*vl_resolve_fn)(void *arg, const struct mesh_addr *target,
				struct vl_dev **dev, char *why, size_t cap);

struct vl_comm;

struct ib_send_req {
	struct mesh_request base;
	struct vl_comm *comm;
	bool in_use;
	bool failed;		/* a completion error, or handed out failed */
	int pieces;
	int pieces_done;
	size_t size;
};

struct ib_recv_req {
	struct mesh_request base;
	struct vl_comm *comm;
	bool in_use;
	bool failed;		/* handed out on a comm that had ended */
	bool flush;		/* an iflush request */
	bool flush_done;
	int n;
	int pieces[VL_MAX_RECVS];	/* expected, 0 until known */
	int pieces_done[VL_MAX_RECVS];
	uint32_t imm_size[VL_MAX_RECVS];
	unsigned int idle;	/* eager comms: tests while small and empty */
};

#define IB_SEND_REQS (VL_MAX_REQUESTS * VL_MAX_RECVS)

/*
 * Words each side's peer writes into on close and when probing: the
 * receiver's in the sender's FIFO region, the sender's in the receiver's
 * sizes region, at the same offset on both sides.  src holds the magic
 * and is the source of both writes.
 */
#define VL_CLOSE_MAGIC 0x434c4f5345440a00ULL	/* "CLOSED\n" */
struct vl_notice {
	uint64_t closed;	/* VL_CLOSE_MAGIC once the peer closes */
	uint64_t probe;		/* target of liveness probes, never read */
	uint64_t src;		/* VL_CLOSE_MAGIC */
};

/* wr_ids that are not a send request or a QP's receive. */
#define VL_WR_FIFO (~0ULL)
#define VL_WR_PROBE (~0ULL - 1)
#define VL_WR_CLOSE (~0ULL - 2)
#define VL_WR_FLUSH_BASE (1ULL << 32)

/* An idle comm (requests waiting, no completion) probes its peer this
 * often: a dead peer fails the probe's write, a live one answers it. */
#define VL_PROBE_MS 1000
/* A probe unanswered this long, with no completion at all, means the peer
 * is gone: longer than any one write takes on a slow link. */
#define VL_PROBE_DEAD_MS 10000
/* Empty polls between looks at the clock. */
#define VL_PROBE_POLLS 256

/* The receive-side's 64-bit sizes, written by the sender for big messages;
 * on the send side the sources of those writes and of eager headers.  An
 * eager receiver's bounce slots follow it. */
struct ib_sizes {
	uint64_t s[VL_MAX_REQUESTS][VL_MAX_RECVS];
	struct ib_eager_hdr hdr[IB_SEND_REQS];
	struct vl_notice note;
};

/* The FIFO region: slots, then the credit word (on the send side written
 * by the peer, on the receive side the source of those writes). */
struct ib_fifo {
	struct ib_fifo_slot slot[VL_MAX_REQUESTS];
	struct ib_credit credit;
	struct vl_notice note;
};

struct vl_comm {
	struct vl_ctx *ctx;
	struct vl_dev *dev;		/* links[0]: FIFO, flushes */
	int nlinks;
	struct vl_dev *links[VL_MAX_LINKS];
	struct ibv_cq *cqs[VL_MAX_LINKS];
	bool is_send;
	unsigned int id;
	char peer[128];
	int nqps;			/* QP q runs on link q % nlinks */
	struct ibv_qp *qps[VL_MAX_QPS];
	uint32_t psn[VL_MAX_QPS];
	int sq_depth;
	int rq_depth;
	/*
	 * Send: fifo[] is written by the peer; sizes_src[] the source of
	 * size writes.  Recv: fifo[] is the source of our FIFO writes;
	 * sizes[] written by the peer.
	 */
	struct ib_fifo *fifo;
	struct ibv_mr *fifo_mr[VL_MAX_LINKS];
	struct ib_sizes *sizes;
	struct ib_eager_slot *bounce;	/* eager recv: after sizes */
	uint32_t eager_max;	/* 0: no eager path on this comm */
	struct ibv_mr *sizes_mr[VL_MAX_LINKS];
	uint64_t rem_addr;	/* the peer's FIFO (recv) or sizes (send) */
	uint32_t rem_rkey[VL_MAX_LINKS];
	/* send */
	uint64_t slot_seq;	/* FIFO slot being consumed */
	uint64_t credit_seen;	/* the last whole credit the peer wrote */
	uint8_t used[VL_MAX_RECVS];
	int next_qp;
	int next_sreq;
	uint32_t max_msg;	/* largest single RDMA write */
	uint32_t max_inline;	/* largest inline write, every QP */
	struct ib_send_req sreqs[IB_SEND_REQS];
	/* recv */
	uint64_t recv_seq;
	uint64_t credit_sent;	/* receives posted as the peer knows */
	unsigned int ctrl_writes;	/* FIFO and credit writes posted */
	bool eager_in[VL_EAGER_SLOTS];	/* bounce slot filled */
	struct ib_recv_req rreqs[VL_MAX_REQUESTS];
	struct ibv_qp *flush_qp;	/* loopback QP for GPU flushes */
	struct ibv_mr *flush_mr;
	uint32_t flush_buf;
	int next_flush;
	struct ib_recv_req freqs[VL_MAX_REQUESTS];
	/* close and liveness (verbs_close.c) */
	bool peer_closed;	/* the peer's close notice is in */
	uint64_t peer_closed_ns;	/* when we first saw it */
	bool closing;		/* in close: failures are logged as INFO */
	bool probe_out;		/* a probe write is outstanding */
	bool busy;		/* a completion since the last clock look */
	bool close_done;	/* our close notice completed */
	unsigned int idle_polls;
	uint64_t live_ns;	/* when the comm last saw progress */
	int error;		/* first failure, negative errno */
	bool warned;
	char errmsg[384];
};

static inline int vl_qp_link(const struct vl_comm *c, int qp)
{
	return qp % c->nlinks;
}

/*
 * Parameters every module on this layer has; a module's table lists these
 * rows (VL_PARAM_ROWS) next to its own.
 */
#define VL_PARAM_ROWS \
	{ "hca", MESH_PARAM_STR, "", 0, 0, \
	  "HCA ports to use, NCCL_IB_HCA syntax (prefix, '=' exact, '^' exclude, name:port[:fabricId]); empty uses all; order does not matter." }, \
	{ "qps_per_conn", MESH_PARAM_INT, "2", 1, VL_MAX_QPS, \
	  "Queue pairs per connection, dealt over its links; messages are spread over them." }, \
	{ "timeout", MESH_PARAM_INT, "14", 1, 31, \
	  "IB transport timeout exponent (4.096 us * 2^timeout)." }, \
	{ "retry_cnt", MESH_PARAM_INT, "7", 0, 7, \
	  "IB transport retries before a send fails." }, \
	{ "sl", MESH_PARAM_INT, "0", 0, 15, \
	  "IB service level." }, \
	{ "traffic_class", MESH_PARAM_INT, "0", 0, 255, \
	  "Traffic class (RoCE: DSCP << 2) of every packet." }, \
	{ "max_recvs", MESH_PARAM_INT, "8", 1, VL_MAX_RECVS, \
	  "Grouped receives per irecv reported to NCCL." }, \
	{ "eager_max", MESH_PARAM_INT, "1024", 0, VL_EAGER_MAX, \
	  "Messages up to this size skip the receive FIFO, copied through bounce buffers; only where receives are never grouped (max_recvs = 1) and in host memory (no GPU registration). 0: off." }, \
	{ "mr_cache", MESH_PARAM_BOOL, "true", 0, 0, \
	  "Reuse one memory region for registrations of the same range." }, \
	{ "sysfs_root", MESH_PARAM_STR, "/sys/class/infiniband", 0, 0, \
	  "Where HCA port and GID tables are read from." }

/*
 * A module's say on one port the hca filter let through: 1 to open it
 * with the GID preferences it fills in, 0 to skip it, -errno to fail init.
 */
typedef int (*vl_port_fn)(void *arg, const char *sysfs_root,
			     const char *dev, int port,
			     struct vl_gid_prefs *prefs);

/* verbs_ctx.c: -ENODEV (logged) when no port is usable. */
int vl_ctx_open(const struct mesh_host *host, vl_port_fn choose,
		   void *arg, struct vl_ctx **out);
void vl_ctx_free(struct vl_ctx *ctx);

/* verbs_dev.c */
int vl_dev_open(const char *sysfs_root, struct ibv_device *ibdev, int port,
		   const struct vl_gid_prefs *prefs, struct vl_dev *d);
void vl_dev_close(struct vl_dev *d);
int vl_port_speed_mbps(const struct vl_dev *d);
void vl_dev_props(const struct vl_ctx *ctx, const struct vl_dev *d,
		     struct mesh_dev_props *props);
char *vl_gid_str(const uint8_t raw[16], char *buf, size_t len);
bool vl_path_exists(const char *path);

/* verbs_mr.c */
int vl_reg_mr(void *comm, void *data, size_t size, int type,
		 void **mhandle);
int vl_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			uint64_t offset, int fd, void **mhandle);
int vl_dereg_mr(void *comm, void *mhandle);

/* verbs_conn.c: the setup state machines; call again while 0 and *comm is
 * NULL.  ctrl->module_state holds the progress. */
int vl_connect_links(struct vl_ctx *ctx,
			const struct vl_link_plan *plan, int nlinks,
			struct mesh_ctrl *ctrl, void **send_comm);
int vl_accept_links(struct vl_ctx *ctx, vl_resolve_fn resolve,
		       void *arg, struct mesh_ctrl *ctrl, void **recv_comm);
void vl_abandon(void *mctx, struct mesh_ctrl *ctrl);

/* verbs_comm.c */
/* QPs (in INIT), CQs and the FIFO / sizes buffers of a new connection;
 * eager_max > 0 adds the bounce slots of an eager receiver. */
struct vl_comm *vl_comm_create(struct vl_ctx *ctx,
				     struct vl_dev *const *links,
				     int nlinks, bool is_send, int nqps,
				     uint32_t eager_max, const char *peer);
/* One RC QP on link `link`, in INIT; lowers c->max_inline to what the
 * device grants. */
struct ibv_qp *vl_qp_create(struct vl_comm *c, int link, int sq, int rq);
void vl_comm_free(struct vl_comm *comm);

/* verbs_close.c */
uint64_t vl_now_ns(void);
bool vl_peer_closed(struct vl_comm *comm);
bool vl_send_orphaned(struct vl_comm *comm);
void vl_idle(struct vl_comm *comm);
int vl_close_comm(struct vl_comm *comm);

/* verbs_data.c */
int vl_comm_poll(struct vl_comm *comm);
int vl_comm_fail(struct vl_comm *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void vl_comm_init_reqs(struct vl_comm *comm);
int vl_post_recvs(struct vl_comm *comm);
int vl_isend(void *send_comm, void *data, size_t size, int tag,
		void *mhandle, void **request);
int vl_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		int *tags, void **mhandles, void **request);
int vl_iflush(void *recv_comm, int n, void **data, int *sizes,
		 void **mhandles, void **request);
int vl_close_send(void *send_comm);
int vl_close_recv(void *recv_comm);
/* verbs_conn.c: the local device of each link, for tools */
int vl_describe(void *comm, struct mesh_conn_info *info);

/* The entries of a module descriptor that every verbs module shares: the
 * modules differ in devices and setup, never in the data path. */
#define VL_MODULE_DATA_PATH                  \
	.abandon = vl_abandon,               \
	.reg_mr = vl_reg_mr,                 \
	.reg_mr_dmabuf = vl_reg_mr_dmabuf,   \
	.dereg_mr = vl_dereg_mr,             \
	.isend = vl_isend,                   \
	.irecv = vl_irecv,                   \
	.iflush = vl_iflush,                 \
	.close_send = vl_close_send,         \
	.close_recv = vl_close_recv,         \
	.describe = vl_describe

#endif
