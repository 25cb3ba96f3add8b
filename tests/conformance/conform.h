/* SPDX-License-Identifier: MIT */
/*
 * nccl-conform: two processes drive an NCCL net plugin through the
 * behaviours NCCL relies on, one named test at a time, each repeated in a
 * loop so that races show.  The plugin is reached through netdrive's ABI
 * adapters (any plugin exporting ncclNetPlugin_v8..v12) and the two ranks
 * meet over netdrive's TCP bootstrap channel.
 *
 * Every failure prints one "FAIL <test> loop <n> rank <r>: ..." line that
 * says what was expected and what happened, and ends the process; the peer
 * sees the bootstrap socket close and ends too.  Each loop runs under a
 * watchdog, so a hang is a failure naming the test and the phase.
 */
#ifndef CONFORM_H
#define CONFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netdrive.h"

#define CONF_MAX_GROUP 8
#define CONF_MAX_REQS (NCCL_NET_MAX_REQUESTS * CONF_MAX_GROUP)
#define CONF_MAX_SIZES 16
#define CONF_SKIP 77

struct conf_opts {
	int rank;
	const char *oob_host;
	int oob_port;
	const char *port_file;
	const char *plugin;
	int abi;
	int dev;
	uint32_t loops;
	const char *tests;	/* comma list, NULL: all */
	uint32_t late_ms;	/* late-* tests: how late the late side is */
	uint32_t dead_ms;	/* bound on an error after a peer dies */
	uint32_t close_ms;	/* bound on one close call */
	uint32_t timeout_s;	/* watchdog per loop, beyond late/dead */
	uint64_t seed;
	int verbose;
	const char *victim;	/* internal: "send" or "recv" */
};

struct conf_ctx;

struct conf_test {
	const char *name;
	const char *what;
	/* one loop; returns 0 or CONF_SKIP, any failure ends the process */
	int (*run)(struct conf_ctx *c);
	uint32_t (*extra_s)(const struct conf_opts *o);	/* watchdog slack */
};

struct conf_ctx {
	const struct conf_opts *o;
	struct perf_net net;
	struct perf_props props;
	int rank;
	int oob;
	const struct conf_test *test;
	uint32_t loop;
	/* figures summed over the loops of one test, for the PASS line */
	unsigned long nulls;
	unsigned long flushes;
	int max_outstanding;
	double first_error_ms;	/* worst delay of an expected error */
};

/* ---- conform.c: process, reporting ---- */

extern const struct conf_test conf_tests[];
extern const size_t conf_ntests;

/* Prints the FAIL line for the current test and loop, ends the process. */
void conf_fail(struct conf_ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
void conf_note(struct conf_ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Prints why the test cannot run here; returns CONF_SKIP. */
int conf_skip(struct conf_ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Names what the process is doing, for the watchdog's message. */
void conf_phase(struct conf_ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Fails the test when the peer's bootstrap socket closed. */
void conf_check_peer(struct conf_ctx *c);
void conf_sleep_ms(uint32_t ms);
/* Both ranks meet; tag must match on both sides. */
void conf_barrier(struct conf_ctx *c, uint32_t tag);
/* A small value to the peer, and its counterpart. */
void conf_send_word(struct conf_ctx *c, uint64_t v);
uint64_t conf_recv_word(struct conf_ctx *c);
/* True (and *v set) when the peer's word is already waiting. */
bool conf_poll_word(struct conf_ctx *c, uint64_t *v);
/* Seeded per test, loop and stream so no two messages look alike. */
uint64_t conf_seed(const struct conf_ctx *c, uint32_t stream);

/* ---- conform_lib.c: plugin calls, connections, streams ---- */

/* Plugin open and init, devices and properties of the chosen device. */
void conf_net_up(struct conf_ctx *c);
void conf_net_down(struct conf_ctx *c);

/* One direction between the ranks, or inside one process. */
struct conf_link {
	void *send;		/* our send comm */
	void *recv;		/* our recv comm */
};

/* Sets up the comms of this loop: sender sends to the other rank; with
 * both set, every rank both sends and receives.  Connects and accepts are
 * polled together, as NCCL's proxy does. */
void conf_connect(struct conf_ctx *c, bool i_send, bool i_recv,
		  struct conf_link *l);
void conf_listen(struct conf_ctx *c, void *handle, void **lcomm);
/* The listener listens and sends its handle; the other reads it. */
void conf_exchange_handle(struct conf_ctx *c, bool listener, void *handle,
			  void **lcomm);
/* One-direction tests swap it each loop: even loops rank 1 sends. */
bool conf_sender(const struct conf_ctx *c);
/* The seed of the direction we send (send) or receive, on both ranks. */
uint64_t conf_dir_seed(const struct conf_ctx *c, bool send);
/* One poll of connect/accept; fails the test on an error. */
bool conf_poll_connect(struct conf_ctx *c, void *handle, void **scomm);
bool conf_poll_accept(struct conf_ctx *c, void *lcomm, void **rcomm);
void conf_close_listen(struct conf_ctx *c, void *lcomm);
/* Closes within --close-ms or fails; NULL comms are skipped. */
void conf_close_send(struct conf_ctx *c, void *comm);
void conf_close_recv(struct conf_ctx *c, void *comm);

/* What one direction carries in one loop. */
struct conf_msgs {
	uint32_t n;		/* messages; a multiple of group */
	uint32_t nsizes;
	size_t sizes[CONF_MAX_SIZES];	/* message i: sizes[i % nsizes] */
	size_t recv_extra;	/* receives post this many bytes more */
	int group;		/* receives per irecv, tags 1..group */
	int window;		/* outstanding irecvs (isends: x group) */
	bool reverse;		/* sender: odd groups in reverse tag order */
	bool flush;		/* receiver: iflush each completed receive */
	uint64_t seed;
};

struct conf_req {
	void *req;
	uint32_t first;		/* first message (send: the message) */
};

struct conf_stream {
	struct conf_ctx *c;
	const char *name;
	bool is_send;
	void *comm;
	void *mh;
	uint8_t *buf;
	size_t slot_len;
	uint32_t nslots;
	struct conf_msgs m;
	uint32_t posted;	/* messages posted */
	uint32_t done;		/* messages completed */
	uint32_t staged;	/* send: 1 + the message in its slot */
	struct conf_req reqs[CONF_MAX_REQS];
	uint32_t head, tail;	/* reqs ring: oldest, next free */
	/* peer-death tests: an error from test() ends the stream */
	bool expect_error;
	bool close_on_done;	/* conf_run closes it the moment it completes */
	bool failed;
	ncclResult_t error;
};

void conf_stream_init(struct conf_stream *s, struct conf_ctx *c,
		      const char *name, bool is_send, void *comm,
		      const struct conf_msgs *m);
void conf_stream_free(struct conf_stream *s);
/* deregMr and free the buffers, the comm stays open. */
void conf_stream_release(struct conf_stream *s);
/* deregMr, close the comm (bounded, must succeed), free the buffers. */
void conf_stream_close(struct conf_stream *s);
/* One post attempt and one test of the oldest request: 1 when every
 * message completed (or the expected error came), else 0. */
int conf_stream_step(struct conf_stream *s);
/* Posts as far as the window allows without testing (NULL: retried). */
void conf_stream_fill(struct conf_stream *s, double deadline);
/* Runs streams together until all completed; phase names the wait. */
void conf_run(struct conf_ctx *c, struct conf_stream **s, int n,
	      const char *phase);
uint32_t conf_outstanding(const struct conf_stream *s);

/* One 8-byte value over each comm, all at once (multi-accept names its
 * connections with it); n <= CONF_MAX_GROUP. */
void conf_xfer_words(struct conf_ctx *c, void **comms, int n, bool is_send,
		     uint64_t *v);

/* Connects the loop's one direction and sets s up on it with m (seeded
 * here); true on the sending rank. */
bool conf_one_way_open(struct conf_ctx *c, struct conf_msgs *m,
		       struct conf_stream *s);

/* Standard message sets. */
void conf_msgs_sizes(struct conf_msgs *m, const size_t *sizes, uint32_t n);
void conf_msgs_mixed(struct conf_ctx *c, struct conf_msgs *m, uint32_t n);
void conf_msgs_one(struct conf_msgs *m, uint32_t n, size_t size,
		   uint64_t seed);

/* Pattern of message idx of a stream seeded with seed. */
void conf_pattern_fill(uint8_t *p, size_t len, uint64_t seed, uint32_t idx);
/* -1 when equal, else the first differing offset; *want the byte. */
long conf_pattern_check(const uint8_t *p, size_t len, uint64_t seed,
			uint32_t idx, uint8_t *want);

/* ---- conform_victim.c: a peer killed on purpose ---- */

/* Runs the process to be killed (--victim send|recv). */
int conf_victim_main(const struct conf_opts *o);
/* What it streams, and its survivor expects. */
void conf_victim_msgs(struct conf_msgs *m, uint64_t seed);
struct conf_victim {
	int pid;
	int to;			/* its stdin */
	int from;		/* its stdout */
};
void conf_victim_spawn(struct conf_ctx *c, const char *role, uint64_t seed,
		       struct conf_victim *v);
/* The peer's listen handle to a sending victim, a receiving one's out. */
void conf_victim_give(struct conf_ctx *c, struct conf_victim *v,
		      const void *buf, size_t len);
void conf_victim_take(struct conf_ctx *c, struct conf_victim *v, void *buf,
		      size_t len);
/* Returns once it has completed its first messages. */
void conf_victim_wait_streaming(struct conf_ctx *c, struct conf_victim *v);
void conf_victim_kill(struct conf_ctx *c, struct conf_victim *v);

/* ---- the tests ---- */

int conf_t_close_after_send(struct conf_ctx *c);
int conf_t_close_after_recv(struct conf_ctx *c);
int conf_t_close_last_recv(struct conf_ctx *c);
int conf_t_connect_close(struct conf_ctx *c);
int conf_t_close_bidir(struct conf_ctx *c);
int conf_t_multi_accept(struct conf_ctx *c);
int conf_t_accept_first(struct conf_ctx *c);
int conf_t_connect_first(struct conf_ctx *c);
int conf_t_late_accept(struct conf_ctx *c);
int conf_t_late_connect(struct conf_ctx *c);
int conf_t_connect_self(struct conf_ctx *c);
int conf_t_zero_byte(struct conf_ctx *c);
int conf_t_window(struct conf_ctx *c);
int conf_t_null_request(struct conf_ctx *c);
int conf_t_recv_larger(struct conf_ctx *c);
int conf_t_grouped(struct conf_ctx *c);
int conf_t_flush(struct conf_ctx *c);
int conf_t_close_inflight_send(struct conf_ctx *c);
int conf_t_close_inflight_recv(struct conf_ctx *c);
int conf_t_close_inflight_both(struct conf_ctx *c);
int conf_t_late_recv(struct conf_ctx *c);
int conf_t_late_recv_close(struct conf_ctx *c);
int conf_t_late_send(struct conf_ctx *c);
int conf_t_killed_sender(struct conf_ctx *c);
int conf_t_killed_receiver(struct conf_ctx *c);
int conf_t_reload(struct conf_ctx *c);
int conf_t_multi_init(struct conf_ctx *c);

#endif
