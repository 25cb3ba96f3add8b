/* SPDX-License-Identifier: MIT */
/*
 * A relayed connection's end: NCCL's send or recv comm over the first or
 * last leg.  Each message goes as a header (tag, size, small data inline)
 * and then, when not inline, as chunks sent straight from and received
 * straight into NCCL's buffers.
 */
#ifndef MESH_RELAY_COMM_H
#define MESH_RELAY_COMM_H

#include "relay.h"
#include "relay_wire.h"

struct relay_mh {
	void *leg_mh;
	int type;		/* MESH_PTR_*: only host memory goes inline */
};

struct relay_comm;

struct relay_req {
	struct mesh_request base;	/* first: the core calls base.test */
	struct relay_comm *comm;
	bool in_use, failed;
	int outstanding;		/* leg requests not complete */
	/* send */
	char *data;
	size_t size, posted;		/* bytes handed to the leg */
	int tag;
	void *leg_mh;
	bool inline_data, hdr_posted;
	/* recv */
	int n, nfilled;
	char *bufs[RELAY_RECVS_MAX];
	size_t sizes[RELAY_RECVS_MAX], got[RELAY_RECVS_MAX];
	int tags[RELAY_RECVS_MAX];
	void *leg_mhs[RELAY_RECVS_MAX];
	bool filled[RELAY_RECVS_MAX];
};

/* A leg request in flight and the relay request it serves (NULL: a
 * header receive). */
struct relay_op {
	void *leg_req;
	struct relay_req *owner;
	int slot;			/* header receive: its stage slot */
};

/* Header slots of a receiving end: headers held until NCCL's receive. */
#define RELAY_HDR_SLOTS 16

struct relay_comm {
	struct mesh_leg leg;
	void *lcomm;
	bool is_send;
	unsigned int id;
	char peer[64];
	char route[RELAY_ROUTE_MAX + 64];
	size_t chunk, inline_max, slot_size;
	bool inline_ok;
	int err;			/* the comm failed: requests fail */
	char *stage;			/* header slots, registered */
	void *stage_mh;
	struct relay_req reqs[RELAY_REQS];
	uint64_t req_tail, req_post;	/* allocated; next to post */
	struct relay_op ops[RELAY_OPS];
	uint64_t op_head, op_tail;
	uint32_t seq;			/* messages sent or received */
	/* receive: one header receive at a time; headers that came wait
	 * (in order) for NCCL's receive; chunks of the current one */
	bool hdr_posted;
	uint64_t hdr_have, hdr_used;	/* ring of slots */
	struct relay_req *chunk_req;	/* receive getting chunks posted */
	int chunk_buf;
	size_t chunk_off, chunk_size;
	uint64_t recv_head;		/* oldest receive not filled */
	bool ended;			/* the sender closed (RELAY_HDR_END) */
	uint64_t bytes;
};

struct relay_comm *relay_comm_new(struct relay_ctx *x,
				  const struct mesh_leg *leg, void *lcomm,
				  bool is_send, uint32_t flags,
				  const char *peer, const char *route);

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

#endif
