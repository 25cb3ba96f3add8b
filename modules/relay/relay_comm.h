/* SPDX-License-Identifier: MIT */
/*
 * A relayed connection's end: NCCL's send or recv comm over the first or
 * last leg.  Each message goes as a header (tag, size, small data inline)
 * and then, when not inline, as chunks sent straight from and received
 * straight into NCCL's buffers.
 *
 * A resumable connection (the origin's outage_ms > 0) survives its route
 * breaking: a send completes only once the destination acknowledged it
 * (a note back along the route), so whatever a new route must carry again
 * is still in NCCL's buffers.  The origin sets up a new route, through
 * the same relays or others, to the destination's rejoin; the
 * destination says which messages it has whole, and the origin sends
 * from the next one on.
 */
#ifndef MESH_RELAY_COMM_H
#define MESH_RELAY_COMM_H

#include "relay.h"
#include "relay_hop.h"
#include "relay_wire.h"

/* NCCL's registration, kept to register again on a new route's leg. */
struct relay_mh {
	struct relay_mh *next;
	void *leg_mh;		/* on the comm's leg now; NULL: none */
	int type;		/* MESH_PTR_*: only host memory goes inline */
	void *data;
	size_t size;
	uint64_t offset;
	int fd;			/* our dup of a dma-buf, -1 none */
};

struct relay_comm;

struct relay_req {
	struct mesh_request base;	/* first: the core calls base.test */
	struct relay_comm *comm;
	bool in_use, failed;
	uint64_t idx;			/* which request of the comm */
	int outstanding;		/* leg requests not complete */
	/* send */
	char *data;
	size_t size, posted;		/* bytes handed to the leg */
	int tag;
	uint64_t seq;			/* its message number */
	struct relay_mh *mh;
	bool inline_data, hdr_posted;
	/* recv */
	int n, nfilled;
	char *bufs[RELAY_RECVS_MAX];
	size_t sizes[RELAY_RECVS_MAX], got[RELAY_RECVS_MAX];
	int tags[RELAY_RECVS_MAX];
	struct relay_mh *mhs[RELAY_RECVS_MAX];
	bool filled[RELAY_RECVS_MAX];
	uint64_t mseq[RELAY_RECVS_MAX];	/* the message each one took */
};

/* A leg request in flight and the relay request it serves (NULL: a
 * header receive). */
struct relay_op {
	void *leg_req;
	struct relay_req *owner;
	uint64_t mseq;			/* the message it carries */
};

/* Header slots of a receiving end: headers held until NCCL's receive. */
#define RELAY_HDR_SLOTS 16

/* The destination's join of a new route, stage by stage. */
enum { JOIN_NONE, JOIN_LAST, JOIN_ACCEPT };

struct relay_comm {
	struct relay_ctx *x;
	bool is_send;
	unsigned int id;
	char peer[64];
	char route[RELAY_ROUTE_MAX + 64];
	size_t chunk, inline_max, slot_size, stage_len;
	bool inline_ok;
	int err;			/* the comm failed: requests fail */
	/* the route now: no leg while it is out */
	struct mesh_leg leg;
	void *lcomm;
	struct relay_chan chan;		/* origin: to the first relay;
					 * destination: the last leg's */
	char *stage;			/* header slots, registered */
	void *stage_mh;
	pthread_mutex_t reg_lock;	/* mhs, and the leg they are on */
	struct relay_mh *mhs;
	struct relay_req reqs[RELAY_REQS];
	uint64_t req_tail, req_post;	/* allocated; next to post */
	struct relay_op ops[RELAY_OPS];
	uint64_t op_head, op_tail;
	uint64_t seq;			/* messages numbered (send) or
					 * taken by a receive (recv) */
	/* receive: one header receive at a time; headers that came wait
	 * (in order) for NCCL's receive; chunks of the current one */
	bool hdr_posted;
	uint64_t hdr_have, hdr_used;	/* ring of slots */
	struct relay_req *chunk_req;	/* receive getting chunks posted */
	int chunk_buf;
	size_t chunk_off, chunk_size;
	uint64_t recv_head;		/* oldest receive not filled */
	bool ended;			/* the sender closed */
	bool end_known;			/* an END note came: after end_seq */
	uint64_t end_seq;
	uint64_t bytes;
	/* resuming */
	bool resumable;
	uint64_t key;
	uint32_t attempt;
	uint64_t acked;			/* origin: the destination has 1..acked;
					 * destination: ACKed that far */
	bool far_up;			/* origin: the first relay said UP */
	bool far_closed;		/* origin: the destination said BYE */
	int64_t out_since_ns;		/* 0 while the route works */
	int64_t next_try_ns, next_pump_ns;
	int64_t refused_ns;		/* origin: refused since, this outage */
	char cause[192];		/* why the route broke */
	char tried[1024];		/* origin: the last attempt's failures */
	uint8_t handle[RELAY_HANDLE_BYTES];	/* origin: the destination */
	struct relay_hop *rh;		/* origin: the route being set up */
	int rail;			/* destination: for the leg's module */
	struct relay_inbox inbox;	/* destination: streams dialed anew */
	struct relay_vctrl *jv;		/* destination: a route joining */
	int jstage;
	struct relay_msg *jlast;
	struct mesh_leg jleg;
	uint64_t outages, resent_msgs, resent_bytes;
	/* metrics: what test() saw complete (mesh_count) */
	uint64_t m_bytes, m_requests;
};

/* An origin's send comm over a route that is up (h finished), or NULL. */
struct relay_comm *relay_comm_send(struct relay_ctx *x, struct relay_hop *h,
				   const char *peer, const char *route,
				   const void *handle);
/* A destination's recv comm, before its first route joined; the rejoin
 * is kept on ctrl (the NCCL listen's channel the announcement came on). */
int relay_comm_recv(struct relay_ctx *x, struct mesh_ctrl *ctrl, int rail,
		    const struct relay_msg *last, struct relay_comm **out);
/* The first route's leg, accepted on the NCCL listen's channel. */
int relay_comm_first_leg(struct relay_comm *c, const struct mesh_leg *leg,
			 void *lcomm);
/* Destination: takes the streams dialed anew through its key: the first
 * route's notes' channel, or a new route, which it joins; 0 once a new
 * route's leg is up, -EAGAIN before or when there was none. */
int relay_comm_join(struct relay_comm *c);
void relay_comm_free(struct relay_comm *c);

int relay_reg_mr(void *comm, void *data, size_t size, int type,
		 void **mhandle);
int relay_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			uint64_t offset, int fd, void **mhandle);
int relay_dereg_mr(void *comm, void *mhandle);
int relay_isend(void *send_comm, void *data, size_t size, int tag,
		void *mhandle, void **request);
int relay_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		int *tags, void **mhandles, void **request);
int relay_iflush(void *recv_comm, int n, void **data, int *sizes,
		 void **mhandles, void **request);
int relay_close_send(void *send_comm);
int relay_close_recv(void *recv_comm);
/* The first or last leg's cipher and devices, the far end, and for a
 * send comm the relays of its route. */
int relay_describe(void *comm, struct mesh_conn_info *info);
int relay_comm_counters(void *comm, mesh_counter_fn emit, void *arg);

#endif
