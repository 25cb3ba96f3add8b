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
 *
 * Repair (verbs_path.c): with outage_ms > 0 a QP that fails is rebuilt
 * instead of failing the connection.  Both ends of a QP slot move their
 * QP to the error state, tell each other how many writes with immediate
 * they took on it (in-band over a working QP, and over the side channel,
 * a TCP stream of the core's control connection), and each resends exactly
 * what the other did not take, over the QPs that still work; then the
 * slot gets fresh QPs and rejoins once a probe write passes on them.
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
	int outage_ms;		/* 0: a QP error fails the connection */
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

/*
 * One piece of a message as the sender tracks it until the receiver has
 * it: not posted (no working QP or a full send queue, or taken back from a
 * QP that failed), or posted as write-with-immediate number seq on QP slot
 * qp's incarnation epoch.
 */
enum vl_piece_state { VL_PC_QUEUED, VL_PC_POSTED, VL_PC_DONE };

struct vl_piece {
	uint8_t st;		/* enum vl_piece_state */
	uint8_t qp;
	uint16_t epoch;
	uint32_t seq;
};

struct ib_send_req {
	struct mesh_request base;
	struct vl_comm *comm;
	bool in_use;
	bool failed;		/* a completion error, or handed out failed */
	bool eager;		/* one write into bounce slot `bounce` */
	bool far;		/* the size goes through sizes[][] */
	int pieces;
	int pieces_done;
	size_t size;
	/* what it takes to post a piece again */
	char *data;
	const struct vl_mh *mh;
	uint64_t raddr;		/* the posted buffer (FIFO path) */
	uint32_t rkey[VL_MAX_LINKS];
	size_t piece_len;
	int slot, elem;
	uint32_t imm;		/* the same for every piece */
	uint32_t bounce;
	struct vl_piece pc[VL_MAX_QPS];
};

struct ib_recv_req {
	struct mesh_request base;
	struct vl_comm *comm;
	bool in_use;
	bool failed;		/* handed out on a comm that had ended */
	bool flush;		/* an iflush request */
	bool flush_done;
	bool announced;		/* its FIFO entry was written (not small) */
	int n;
	int pieces[VL_MAX_RECVS];	/* expected, 0 until known */
	int pieces_done[VL_MAX_RECVS];
	uint32_t imm_size[VL_MAX_RECVS];
	unsigned int idle;	/* eager comms: tests while small and empty */
};

#define IB_SEND_REQS (VL_MAX_REQUESTS * VL_MAX_RECVS)

/* ---- QP slots and their repair (verbs_path.c) ---- */

/* Where a QP slot is.  The send comm leads a repair, the recv comm
 * follows (verbs_path.c has the whole protocol). */
enum vl_qp_state {
	VL_QP_UP,	/* in service */
	VL_QP_DRAIN,	/* moved to the error state; receives still flushing */
	VL_QP_DEAD,	/* our end is dead and the peer told so */
	VL_QP_NEW,	/* leader: a fresh QP offered, waiting for the follower's */
	VL_QP_PROBE,	/* leader: both at RTS, a probe write tests the path */
	VL_QP_RTS,	/* follower: at RTS, waiting for the leader's probe */
};

/* A record's phase: what its side did with incarnation `epoch`. */
enum { VL_REC_NONE, VL_REC_NEW, VL_REC_UP, VL_REC_BROKEN };

/*
 * What a side tells the peer about one QP slot; the newest (epoch, phase)
 * wins.  In-band it is written into the peer's record area (check: a torn
 * copy reads as "not yet"), on the side channel it travels big-endian.
 */
struct vl_rec {
	uint32_t epoch;
	uint32_t phase;
	uint32_t qpn, psn;	/* NEW: the fresh QP */
	uint32_t got_epoch;	/* got counts the peer's writes with */
	uint32_t cause;		/*   immediate taken on incarnation got_epoch */
	uint32_t seen;		/* the peer's newest record taken: epoch << 2 |
				   phase; a record is told until it is seen */
	uint32_t pad;
	uint64_t got;
	uint64_t check;		/* vl_rec_check() of the rest */
};

_Static_assert(sizeof(struct vl_rec) == 48, "record layout");

/* Why a QP slot broke, besides a work completion status (< 0x100); the
 * peer's causes carry VL_CAUSE_PEER. */
#define VL_CAUSE_STALL 0x100	/* no completion for VL_PROBE_DEAD_MS */
#define VL_CAUSE_SETUP 0x101	/* a fresh QP could not be brought up */
#define VL_CAUSE_POST 0x102	/* a work request could not be posted */
#define VL_CAUSE_PEER 0x1000

struct vl_path {
	enum vl_qp_state state;
	uint32_t epoch;		/* incarnation of qps[q] */
	uint32_t rposted, rdone;	/* its receives posted, completed */
	uint32_t sig_posted, sig_done;	/* its signaled sends */
	uint64_t imm_sent;	/* writes with immediate posted on it */
	uint64_t imm_got;	/* ... taken from it */
	uint32_t dead_epoch;	/* the incarnation being replaced */
	uint64_t dead_got;	/* what we took on it */
	bool settled;		/* its resends are done */
	bool dirty;		/* mine is not yet on the side channel */
	struct vl_rec mine;	/* what we last told the peer */
	struct vl_rec peer;	/* the newest the peer told us */
	uint64_t told_ns;	/* mine last written in-band */
	uint64_t not_before_ns;	/* leader: no fresh QP before (backoff) */
	uint32_t stall_mark;	/* sig_done at stall_ns */
	uint64_t stall_ns;
	int rounds;		/* fresh QPs tried since it was last up */
	uint32_t cause;
	bool probe_sent;	/* PROBE: the test write is posted */
	bool ctrl_used;		/* recv: FIFO or credit writes went on it */
};

/* An outage of one link (some of its QP slots not up), for the log. */
struct vl_outage {
	uint64_t since_ns;	/* 0: every QP of the link is up */
	uint32_t cause;
	int qp;			/* the first slot that broke */
	uint64_t pieces, bytes, fifo;	/* resent meanwhile */
};

/* ---- the side channel (verbs_side.c) ---- */

#define VL_SIDE_MSG 256
enum { VL_SIDE_REC = 1, VL_SIDE_FAIL, VL_SIDE_BYE };

/* The peer's end of one link, as a fresh QP needs it for RTR. */
struct vl_peer_link {
	uint8_t gid[16];
	uint16_t lid;
	bool ethernet;
	enum ibv_mtu mtu;	/* the smaller of both ends' */
};

/*
 * Words each side's peer writes into on close and when probing: the
 * receiver's in the sender's FIFO region, the sender's in the receiver's
 * sizes region, at the same offset on both sides.  src holds the magic
 * and is the source of both writes.  rec[] takes the peer's records; on
 * the other region its twin holds ours, the source of those writes.
 */
#define VL_CLOSE_MAGIC 0x434c4f5345440a00ULL	/* "CLOSED\n" */
struct vl_notice {
	uint64_t closed;	/* VL_CLOSE_MAGIC once the peer closes */
	uint64_t probe;		/* target of liveness probes, never read */
	uint64_t src;		/* VL_CLOSE_MAGIC */
	struct vl_rec rec[VL_MAX_QPS];
};

/*
 * wr_id of every work request: what it is (kind), its QP slot and that
 * slot's incarnation (so completions of a QP that was replaced are known
 * as such), and an id: send request and piece, or flush request.
 */
enum vl_wr_kind {
	VL_WR_PIECE = 1,	/* a piece's (or eager message's) last write */
	VL_WR_PLAIN,		/* unsignaled: data, sizes, FIFO, credit */
	VL_WR_CTRL,		/* a signaled FIFO or credit write */
	VL_WR_PROBE,		/* liveness, or the test of a fresh QP */
	VL_WR_CLOSE,		/* the close notice */
	VL_WR_REC,		/* a record, in-band */
	VL_WR_FLUSH,		/* a GPU flush on the loopback QP */
	VL_WR_RECV,		/* a receive */
};

static inline uint64_t vl_wr(enum vl_wr_kind kind, int qp, uint32_t epoch,
			     unsigned int id)
{
	return (uint64_t)(id & 0xfff) | (uint64_t)kind << 12 |
	       (uint64_t)(qp & 15) << 16 | (uint64_t)(epoch & 0xffff) << 20;
}

static inline unsigned int vl_wr_id(uint64_t w) { return w & 0xfff; }
static inline unsigned int vl_wr_kind(uint64_t w) { return (w >> 12) & 15; }
static inline int vl_wr_qp(uint64_t w) { return (int)((w >> 16) & 15); }
static inline uint32_t vl_wr_epoch(uint64_t w) { return (w >> 20) & 0xffff; }
/* a piece id: send request and piece */
static inline unsigned int vl_piece_id(int sreq, int piece)
{
	return (unsigned int)sreq | (unsigned int)piece << 8;
}

/* An idle comm (requests waiting, no completion) probes its peer this
 * often: a dead peer fails the probe's write, a live one answers it. */
#define VL_PROBE_MS 1000
/* A probe unanswered this long, with no completion at all, means the peer
 * is gone: longer than any one write takes on a slow link.  With an
 * outage budget, a QP whose signaled writes see no completion this long
 * is taken for broken instead. */
#define VL_PROBE_DEAD_MS 10000
/* Empty polls between looks at the clock. */
#define VL_PROBE_POLLS 256
/* Polls between looks at the side channel and the peer's records. */
#define VL_TICK_POLLS 64
/* How often a healthy comm looks at them; one under repair, every tick. */
#define VL_TICK_MS 1
/* A record not yet answered is written in-band again this often. */
#define VL_RETELL_MS 200
/* Backoff between fresh QPs for a slot whose last one failed. */
#define VL_RETRY_MIN_MS 100
#define VL_RETRY_MAX_MS 1000

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
	struct vl_dev *dev;		/* links[0]: flushes, the log */
	int nlinks;
	struct vl_dev *links[VL_MAX_LINKS];
	struct ibv_cq *cqs[VL_MAX_LINKS];
	bool is_send;
	unsigned int id;
	char peer[128];
	int nqps;			/* QP q runs on link q % nlinks */
	/* of its QPs' GRH at RTR, also of those a repair rebuilds */
	int traffic_class;
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
	struct vl_peer_link rlink[VL_MAX_LINKS];
	char rwhere[VL_MAX_LINKS][48];	/* the peer's end of each link */
	/* QP slots (verbs_path.c) */
	struct vl_path path[VL_MAX_QPS];
	int nup;		/* slots up */
	int ctrl_qp;		/* recv: the slot of FIFO and credit writes */
	int outage_ms;		/* 0: no repair on this comm */
	uint64_t none_since_ns;	/* no slot up since (0: one is) */
	uint32_t none_cause;
	struct vl_outage out[VL_MAX_LINKS];
	int queued;		/* send: pieces waiting to be posted */
	bool fifo_resend;	/* recv: FIFO entries and credit to write again */
	bool peer_failed;	/* the peer said its end failed */
	bool repairing;		/* some slot is not up */
	unsigned int polls;
	uint64_t tick_ns;	/* the last full tick */
	/* the side channel (verbs_side.c) */
	int side_fd;		/* -1: none (any more) */
	size_t side_in_len;
	size_t side_out_len, side_out_off;
	bool side_fail;		/* a FAIL to send */
	bool side_bye;		/* a BYE to send */
	bool peer_bye;		/* the peer closed in order */
	uint8_t side_in[VL_SIDE_MSG];
	uint8_t side_out[VL_SIDE_MSG];
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
	bool leg;		/* another module's leg (module.h 1.10): the
				 * same, that module decides */
	bool probe_out;		/* a probe write is outstanding */
	int probe_qp;		/* ... on this slot */
	bool busy;		/* a completion since the last clock look */
	bool close_out;		/* our close notice is posted ... */
	int close_qp;		/* ... on this slot */
	bool close_done;	/* our close notice completed */
	unsigned int idle_polls;
	uint64_t live_ns;	/* when the comm last saw progress */
	int error;		/* first failure, negative errno */
	bool warned;
	char errmsg[384];
	/* metrics: what test() saw complete (mesh_count) */
	uint64_t m_bytes, m_requests;
};

static inline int vl_qp_link(const struct vl_comm *c, int qp)
{
	return qp % c->nlinks;
}

/* The notice words the peer writes into, and our own: the source of our
 * writes, whose twin in the peer's region (rem_addr) is where they go. */
static inline struct vl_notice *vl_note_in(struct vl_comm *c)
{
	return c->is_send ? &c->fifo->note : &c->sizes->note;
}

static inline struct vl_notice *vl_note_out(struct vl_comm *c)
{
	return c->is_send ? &c->sizes->note : &c->fifo->note;
}

/* Where a word of our region (the one vl_note_out lies in) has its twin
 * on the peer's side, and its key on link l. */
static inline uint64_t vl_note_remote(struct vl_comm *c, const void *src)
{
	const char *base = c->is_send ? (const char *)c->sizes :
					(const char *)c->fifo;

	return c->rem_addr + (uint64_t)((const char *)src - base);
}

static inline uint32_t vl_note_lkey(const struct vl_comm *c, int link)
{
	return (c->is_send ? c->sizes_mr : c->fifo_mr)[link]->lkey;
}

static inline uint64_t vl_rec_check(const struct vl_rec *r)
{
	uint64_t h = vl_mix(0x7265636f72647321ULL, r->epoch);

	h = vl_mix(h, (uint64_t)r->phase << 32 | r->qpn);
	h = vl_mix(h, (uint64_t)r->psn << 32 | r->got_epoch);
	h = vl_mix(h, (uint64_t)r->cause << 32 | r->seen);
	return vl_mix(h, r->got);
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
	  "Where HCA port and GID tables are read from." }, \
	{ "outage_ms", MESH_PARAM_INT, "300000", 0, 86400000, \
	  "How long a connection may have no working path to its peer while it rebuilds its queue pairs, holding its requests; past it test() fails. A queue pair that fails while another works hands its traffic over and is rebuilt. 0: the first queue-pair error fails the connection." }

/*
 * A module's say on one port the hca filter let through: 1 to open it
 * with the GID preferences it fills in, 0 to skip it, -errno to fail init.
 */
typedef int (*vl_port_fn)(void *arg, const char *sysfs_root,
			     const char *dev, int port,
			     struct vl_gid_prefs *prefs);

/* verbs_ctx.c: the module check of the VL_PARAM_ROWS (hca's syntax), 0
 * or -EINVAL after param_error; the context, -ENODEV (logged) when no
 * port is usable. */
int vl_check_params(const struct mesh_host *host);
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
/* QPs (in INIT), CQs and the FIFO / sizes buffers of a new connection
 * set up on ctrl; eager_max > 0 adds the bounce slots of an eager
 * receiver. */
struct vl_comm *vl_comm_create(struct vl_ctx *ctx,
				     struct vl_dev *const *links,
				     int nlinks, bool is_send, int nqps,
				     uint32_t eager_max,
				     const struct mesh_ctrl *ctrl);
/* One RC QP on link `link`, in INIT; lowers c->max_inline to what the
 * device grants. */
struct ibv_qp *vl_qp_create(struct vl_comm *c, int link, int sq, int rq);
void vl_comm_free(struct vl_comm *comm);

/* One RC QP's RTR and RTS towards the peer's QP qpn on slot q's link. */
int vl_qp_connect(struct vl_comm *c, int q, struct ibv_qp *qp,
		  uint32_t qpn, uint32_t psn);

/* verbs_close.c */
uint64_t vl_now_ns(void);
bool vl_peer_closed(struct vl_comm *comm);
bool vl_send_orphaned(struct vl_comm *comm);
void vl_idle(struct vl_comm *comm);
int vl_close_comm(struct vl_comm *comm);
/* A signaled 8-byte write of the magic into field (closed or probe) of
 * the peer's notice, on slot q; ibv_post_send's status. */
int vl_notice_post(struct vl_comm *c, int q, size_t field,
		   enum vl_wr_kind kind);

/* verbs_path.c: QP slots, their repair and the outage budget */
void vl_paths_init(struct vl_comm *c);
/* Whether a completion status means the path failed (a QP rebuilt can
 * carry the work again), not the work itself. */
bool vl_path_fault(enum ibv_wc_status st);
void vl_path_break(struct vl_comm *c, int q, uint32_t cause);
/* A probe write on slot q completed. */
void vl_path_probed(struct vl_comm *c, int q);
/* The first slot up at or after `from` (round robin), -1 if none. */
int vl_next_up(const struct vl_comm *c, int from);
void vl_rec_take(struct vl_comm *c, int q, const struct vl_rec *r);
/* The repair's clockwork, from every poll (cheap unless due). */
void vl_tick(struct vl_comm *c);
/* Posts a chain on slot q, counting its signaled requests: 0, -ENOMEM
 * (queue full), or -errno.  Every wr_id must be vl_wr() of slot q. */
int vl_post_send(struct vl_comm *c, int q, struct ibv_send_wr *wr);
int vl_post_recv(struct vl_comm *c, int q);

/* verbs_side.c: the side channel */
void vl_side_pump(struct vl_comm *c);
void vl_side_fail(struct vl_comm *c);
void vl_side_bye(struct vl_comm *c);
void vl_side_close(struct vl_comm *c);

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
/* repair (verbs_data.c): a piece's write with immediate completed; what
 * the peer took of a dead incarnation settles what is sent again */
void vl_piece_done(struct vl_comm *c, int q, uint32_t epoch,
		   unsigned int id);
int vl_settle_send(struct vl_comm *c, int q, uint64_t got);
void vl_settle_recv(struct vl_comm *c, int q);
void vl_post_queued(struct vl_comm *c);
void vl_fifo_rewrite(struct vl_comm *c);
/* verbs_conn.c: the local device of each link, for tools */
int vl_describe(void *comm, struct mesh_conn_info *info);
/* verbs_data.c: bytes and requests completed, for metrics */
int vl_comm_counters(void *comm, mesh_counter_fn emit, void *arg);

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
	.describe = vl_describe,             \
	.comm_counters = vl_comm_counters

#endif
