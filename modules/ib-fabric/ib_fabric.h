/* SPDX-License-Identifier: MIT */
/*
 * ib-fabric: verbs over switched InfiniBand and RoCE.  Private to the module.
 *
 * Data path (as NCCL's IB transport): the receiver RDMA-writes one FIFO slot
 * per irecv into the sender's memory (address, rkey, size, tag of each posted
 * buffer); the sender matches its isend's tag there and RDMA-writes the data
 * straight into the posted buffer, ending with a write-with-immediate that
 * tells the receiver which slot and buffer it filled.  Large messages are cut
 * into pieces spread over the connection's QPs; small ones go round-robin.
 */
#ifndef IB_FABRIC_H
#define IB_FABRIC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include <nccl-mesh/module.h>

#include "ib_fabric_select.h"

extern const struct mesh_host *ib_fabric_host;
#define MESH_LOG_HOST ib_fabric_host
#include <nccl-mesh/log.h>

#define IB_FABRIC_MAX_QPS 16
/* NCCL_NET_MAX_REQUESTS and NCCL_NET_IB_MAX_RECVS. */
#define IB_FABRIC_MAX_REQUESTS 32
#define IB_FABRIC_MAX_RECVS 8
/* Inline data asked of each QP (a FIFO slot of 8 receives fits). */
#define IB_FABRIC_INLINE 256
/* Every this many FIFO writes one is signaled, so the send queue drains
 * without a completion per receive. */
#define IB_FIFO_SIGNAL_EVERY 8
#define IB_FABRIC_MAX_MESSAGE ((1ULL << 31) - 1)
/* Below this a message is not cut: a WR per QP costs more than it gains. */
#define IB_FABRIC_MIN_PIECE (128U << 10)

/* ---- immediate data: which buffer a piece filled ---- */
#define IB_IMM_SLOT_SHIFT 27	/* 5 bits: FIFO slot (request) */
#define IB_IMM_ELEM_SHIFT 24	/* 3 bits: buffer of a grouped receive */
#define IB_IMM_PIECES_SHIFT 20	/* 4 bits: pieces - 1 */
#define IB_IMM_SIZE_MASK 0xfffffU	/* message size, or ... */
#define IB_IMM_SIZE_FAR IB_IMM_SIZE_MASK /* ... written to sizes[][] */

_Static_assert(IB_FABRIC_MAX_REQUESTS == 32, "5 slot bits");
_Static_assert(IB_FABRIC_MAX_RECVS == 8, "3 element bits");
_Static_assert(IB_FABRIC_MAX_QPS == 16, "4 piece bits");

/* One posted buffer, as the receiver writes it into the sender's FIFO. */
struct ib_fifo_elem {
	uint64_t addr;
	uint64_t size;
	uint32_t rkey;
	int32_t tag;
	uint32_t nreqs;		/* buffers in this receive */
	uint32_t seq;		/* request number + 1: the slot is fresh */
};

struct ib_fifo_slot {
	struct ib_fifo_elem e[IB_FABRIC_MAX_RECVS];
};

_Static_assert(sizeof(struct ib_fifo_elem) == 32, "FIFO element layout");

/* ---- devices ---- */

struct ib_mr_ent {
	struct ib_mr_ent *next;
	struct ib_fabric_dev *dev;
	uintptr_t start, end;	/* page-aligned range registered */
	struct ibv_mr *mr;
	int refs;
	bool cached;
};

struct ib_fabric_dev {
	char name[MESH_NAME_MAX];	/* "rxe12" or "mlx5_0:1" */
	char ibname[IB_FABRIC_NAME_MAX];
	int port;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_port_attr pattr;
	struct ib_fabric_port_info pinfo;
	struct ib_fabric_gid gid;
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

struct ib_fabric_ctx {
	int ndevs;
	struct ib_fabric_dev *devs;
	int nqps;
	int timeout;
	int retry_cnt;
	int sl;
	int traffic_class;
	bool mr_cache;
	int max_recvs;
	unsigned int next_comm_id;
};

/* ---- connections ---- */

struct ib_fabric_comm;

struct ib_send_req {
	struct mesh_request base;
	struct ib_fabric_comm *comm;
	bool in_use;
	int pieces;
	int pieces_done;
	size_t size;
};

struct ib_recv_req {
	struct mesh_request base;
	struct ib_fabric_comm *comm;
	bool in_use;
	bool flush;		/* an iflush request */
	bool flush_done;
	int n;
	int pieces[IB_FABRIC_MAX_RECVS];	/* expected, 0 until known */
	int pieces_done[IB_FABRIC_MAX_RECVS];
	uint32_t imm_size[IB_FABRIC_MAX_RECVS];
};

/* The receive-side's 64-bit sizes, written by the sender for big messages. */
struct ib_sizes {
	uint64_t s[IB_FABRIC_MAX_REQUESTS][IB_FABRIC_MAX_RECVS];
};

#define IB_SEND_REQS (IB_FABRIC_MAX_REQUESTS * IB_FABRIC_MAX_RECVS)

struct ib_fabric_comm {
	struct ib_fabric_ctx *ctx;
	struct ib_fabric_dev *dev;
	bool is_send;
	unsigned int id;
	char peer[128];
	int nqps;
	struct ibv_cq *cq;
	struct ibv_qp *qps[IB_FABRIC_MAX_QPS];
	uint32_t psn[IB_FABRIC_MAX_QPS];
	int sq_depth;
	int rq_depth;
	/*
	 * Send: fifo[] is written by the peer; sizes_src[] the source of
	 * size writes.  Recv: fifo[] is the source of our FIFO writes;
	 * sizes[] written by the peer.
	 */
	struct ib_fifo_slot *fifo;
	struct ibv_mr *fifo_mr;
	struct ib_sizes *sizes;
	struct ibv_mr *sizes_mr;
	uint64_t rem_addr;	/* the peer's FIFO (recv) or sizes (send) */
	uint32_t rem_rkey;
	/* send */
	uint64_t slot_seq;	/* FIFO slot being consumed */
	uint8_t used[IB_FABRIC_MAX_RECVS];
	int next_qp;
	int next_sreq;
	uint32_t max_msg;	/* largest single RDMA write */
	uint32_t max_inline;	/* largest inline write, every QP */
	struct ib_send_req sreqs[IB_SEND_REQS];
	/* recv */
	uint64_t recv_seq;
	struct ib_recv_req rreqs[IB_FABRIC_MAX_REQUESTS];
	struct ibv_qp *flush_qp;	/* loopback QP for GPU flushes */
	struct ibv_mr *flush_mr;
	uint32_t flush_buf;
	int next_flush;
	struct ib_recv_req freqs[IB_FABRIC_MAX_REQUESTS];
	int error;		/* first failure, negative errno */
	bool warned;
	char errmsg[384];
};

/* ib_fabric.c */
int ib_fabric_reg_mr(void *comm, void *data, size_t size, int type,
		     void **mhandle);
int ib_fabric_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			    uint64_t offset, int fd, void **mhandle);
int ib_fabric_dereg_mr(void *comm, void *mhandle);

/* ib_fabric_conn.c */
int ib_fabric_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
		      void **send_comm);
int ib_fabric_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
		     void **recv_comm);
void ib_fabric_abandon(void *mctx, struct mesh_ctrl *ctrl);
void ib_fabric_comm_free(struct ib_fabric_comm *comm);

/* ib_fabric_data.c */
void ib_fabric_comm_init_reqs(struct ib_fabric_comm *comm);
int ib_fabric_post_recvs(struct ib_fabric_comm *comm);
int ib_fabric_isend(void *send_comm, void *data, size_t size, int tag,
		    void *mhandle, void **request);
int ib_fabric_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		    int *tags, void **mhandles, void **request);
int ib_fabric_iflush(void *recv_comm, int n, void **data, int *sizes,
		     void **mhandles, void **request);
int ib_fabric_close_send(void *send_comm);
int ib_fabric_close_recv(void *recv_comm);

#endif
