/* SPDX-License-Identifier: MIT */
/*
 * meshinfo --cluster: one process per host connects every pair of hosts
 * through the plugin, as NCCL would, on every rail, measures each pair and
 * reports the matrix, findings and a picture.
 *
 * cluster.c       command line, this host's facts, the run of rank 0
 * cluster_rdv.c   rendezvous (environment or arguments), the star of
 *                 control sockets around rank 0 and its messages
 * cluster_wire.c  the bytes of those messages and of the rendezvous,
 *                 without I/O (tests/fuzz/fuzz_cluster.c runs it)
 * cluster_pair.c  one step of one pair on this host: listen, connect,
 *                 burst, ping-pong, close; the path the plugin took
 * cluster_boot.c  what NCCL's own bootstrap needs: the interface and
 *                 address NCCL picks on each host, and a plain TCP connect
 *                 from every host to every other host's
 * cluster_find.c  findings and the NCCL environment
 * cluster_out.c   text, JSON, DOT, and SVG/PNG through Graphviz
 */
#ifndef MESHINFO_CLUSTER_H
#define MESHINFO_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <nccl-mesh/conn_info.h>

#include "auth.h"
#include "netdrive.h"

#define CL_MAX_RAILS 16
#define CL_MAX_RELAYS 8
#define CL_MAX_DEVICES 8
#define CL_NAME_MAX 64
#define CL_ADDR_MAX 72
#define CL_PATH_MAX 512
#define CL_REASON_MAX 768
#define CL_SHA_HEX 65
/* Every control message has one size: the bootstrap reads exact lengths. */
#define CL_MSG_BYTES 8192
#define CL_PORT_SLURM 29510

struct cl_opts {
	const char *rdv_host;
	int rdv_port;		/* 0: not given */
	int rank, size;		/* -1: not given */
	const char *plugin;	/* NULL: the one of this build or install */
	const char *config;
	const char *json, *dot, *svg, *png;
	unsigned burst_ms;
	uint64_t burst_bytes;
	uint64_t msg_bytes;
	unsigned lat_iters;
	unsigned timeout_s;	/* rendezvous and any control wait */
	int verbose;
	/* the config's auth_key_file: the rendezvous proves it both ways;
	 * NULL: no key, anyone who reaches rank 0's port may join */
	const struct core_auth_key *key;
};

struct cl_rail {
	char name[CL_NAME_MAX];
	int speed_mbps;
	uint64_t fabric_id;
};

/*
 * Where NCCL's bootstrap will be on a host: the interface and address
 * NCCL picks there (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY, else its
 * default order), and the port meshinfo listens on at that address for
 * the others to try.  An empty addr: no interface, `error` says why.
 */
struct cl_boot_host {
	char ifname[CL_NAME_MAX];
	char addr[CL_ADDR_MAX];	/* numeric, no port */
	int port;
	uint64_t token;		/* its listener's word: the host, not a copy */
	char rule[128];		/* what chose the interface */
	char error[256];
};

/*
 * What one tcp-xdc connection to or from a host can keep in flight, from
 * its resolved config and the TCP limits of its network namespace
 * (cluster_find.c does the arithmetic).  Not known: tcp-xdc is not
 * installed there, or an older meshinfo did not say.
 */
#define CL_XDC_STREAMS_MAX 4096
#define CL_XDC_BYTES_MAX (1ULL << 40)
struct cl_xdc {
	bool known;
	int streams;		/* data streams per connection; 0: auto */
	int streams_max;	/* the most auto may dial */
	uint64_t send_max;	/* one stream's send buffer at most */
	uint64_t recv_max;	/* one stream's receive buffer at most */
	bool send_set, recv_set;	/* by sndbuf/rcvbuf, not tcp_[wr]mem */
	/* the copies one connection's window may keep (window_max,
	 * memory_max, window); 0: no such limit in this build */
	uint64_t keep_max;
};

/* What each host tells rank 0 about itself. */
struct cl_host {
	int rank;
	char host[CL_NAME_MAX];
	uint64_t dc;
	char config_path[CL_PATH_MAX];
	char config_sha[CL_SHA_HEX];
	char plugin_path[CL_PATH_MAX];
	char plugin_sha[CL_SHA_HEX];
	char net_name[CL_NAME_MAX];	/* the plugin's own name: "Mesh" */
	char error[CL_REASON_MAX];	/* the plugin did not start: why */
	int nrails;
	struct cl_rail rails[CL_MAX_RAILS];
	struct cl_boot_host boot;
	struct cl_xdc xdc;
	bool lost;		/* its control connection failed mid-run */
};

/* One rail and ordered pair, as measured. */
struct cl_pair {
	int rail, from, to;
	bool ok;
	char cls[16];		/* same-DC, cross-DC, relayed */
	char module[CL_NAME_MAX];
	char local[CL_ADDR_MAX], remote[CL_ADDR_MAX];
	int nrelays;
	char relays[CL_MAX_RELAYS][CL_NAME_MAX];
	char relay_addrs[CL_MAX_RELAYS][CL_ADDR_MAX];
	/* a verbs module's local devices for the pair, one per cable */
	int ndevices;
	char devices[CL_MAX_DEVICES][CL_NAME_MAX];
	/* the cipher the connection's bytes cross the link under, "none"
	 * in clear; empty where the module says neither (verbs) */
	char cipher[24];
	double gbps;		/* < 0: not measured */
	/* the fastest burst: what the link carries when neither host gets
	 * in the way; the findings judge links by it, not by gbps */
	double peak_gbps;
	double lat_us;		/* < 0: not measured */
	/* the shortest round of the pair's ping-pongs, the same both ways */
	double rtt_us;		/* < 0: not measured */
	/* rank 0's arithmetic (cl_find), 0 where a figure is missing: the
	 * bandwidth-delay product at the rail's speed (the slower end's)
	 * and at the measured rate, and what a tcp-xdc connection this way
	 * keeps in flight at most (direct tcp-xdc pairs only) */
	uint64_t bdp_rail, bdp_measured, inflight_max;
	const char *error;	/* failure class, NULL when ok */
	char reason[CL_REASON_MAX];
};

struct cl_finding {
	const char *kind;
	int rail, from, to;	/* -1: not about one rail or pair */
	int nhosts;
	int *hosts;
	char text[1024];
};

/* One host's try of another's bootstrap address. */
enum cl_boot_status {
	CL_BOOT_UNTRIED,	/* an end has no address, or was lost */
	CL_BOOT_OK,
	CL_BOOT_REFUSED,
	CL_BOOT_TIMEDOUT,
	CL_BOOT_UNREACHABLE,
	CL_BOOT_WRONG_HOST,	/* another host answered at that address */
	CL_BOOT_NO_ANSWER,	/* connected, but not to a meshinfo */
	CL_BOOT_OTHER,
	CL_BOOT_NSTATUS
};

struct cl_boot_result {
	int to;
	int status;		/* enum cl_boot_status */
	double ms;		/* how long the connect took */
	char detail[112];
};

/* What rank 0 sends every host to try: each host's address. */
struct cl_boot_target {
	int rank;
	char addr[CL_ADDR_MAX];	/* "": none, not tried */
	int port;
	uint64_t token;
};

struct cl_report {
	int nhosts;
	struct cl_host *hosts;
	/* NCCL's bootstrap: [from * nhosts + to], and the check's time */
	struct cl_boot_result *boot;
	double boot_elapsed_s;
	int nrails;		/* the most rails of any host */
	int npairs;
	struct cl_pair *pairs;
	int nfindings;
	struct cl_finding *findings;
	int nenv;
	char env[8][2][CL_PATH_MAX];
	double elapsed_s;
};

/* ---- messages (cluster_rdv.c) ---- */

enum cl_cmd_kind {
	CL_CMD_LISTEN = 1,
	CL_CMD_CONNECT,
	CL_CMD_BURST,
	CL_CMD_PINGPONG,
	CL_CMD_CLOSE,
	CL_CMD_DONE,
	CL_CMD_BOOT,		/* iters: the hosts; the targets follow */
};

/* An order from rank 0 to one host, about its pair with `peer`. */
struct cl_cmd {
	int kind;
	int rail, peer;
	int status;		/* DONE: the exit status */
	int sender;		/* BURST: who sends; PINGPONG: who starts */
	uint64_t size, iters;
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];	/* CONNECT: the peer's */
};

/* A host's answer to one command. */
struct cl_step {
	int rc;			/* 0 or negative errno */
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];	/* LISTEN */
	/* CONNECT: this host's connect to the peer and accept from it */
	bool send_ok, recv_ok;
	struct cl_pair path;	/* this host's connect: what it logged */
	char recv_reason[CL_REASON_MAX];
	double elapsed, overhead;	/* BURST, PINGPONG */
	double min_round;	/* PINGPONG: its shortest round, 0 none */
};

/* A connect's early word to the peer: it finished, well or not. */
#define CL_NOTE_OK 1u
#define CL_NOTE_FAILED 2u

int cl_send_cmd(int fd, const struct cl_cmd *c, int timeout_s);
int cl_recv_cmd(int fd, struct cl_cmd *c, int timeout_s);
int cl_send_step(int fd, const struct cl_step *s, int timeout_s);
int cl_recv_step(int fd, struct cl_step *s, int timeout_s);

/* The same, as bytes of CL_MSG_BYTES: 0, -EOVERFLOW (encode: it does not
 * fit) or -EPROTO (decode: no message we sent; strings are cut to their
 * fields, counts bounded, control bytes made '?'). */
int cl_encode_cmd(const struct cl_cmd *c, uint8_t msg[CL_MSG_BYTES]);
int cl_decode_cmd(const uint8_t msg[CL_MSG_BYTES], struct cl_cmd *c);
int cl_encode_step(const struct cl_step *s, uint8_t msg[CL_MSG_BYTES]);
int cl_decode_step(const uint8_t msg[CL_MSG_BYTES], struct cl_step *s);
int cl_encode_host(const struct cl_host *h, uint8_t msg[CL_MSG_BYTES]);
int cl_decode_host(const uint8_t msg[CL_MSG_BYTES], struct cl_host *h);

/* The bootstrap check's lists, in batches of one message each: targets
 * from `first` on (at most CL_BOOT_TARGETS), results likewise (at most
 * CL_BOOT_RESULTS).  Decoding says how many came and from where; a count
 * or index outside [0, total) is -EPROTO. */
#define CL_BOOT_TARGETS 64
#define CL_BOOT_RESULTS 48
int cl_encode_boot_targets(const struct cl_boot_target *t, int first, int n,
			   uint8_t msg[CL_MSG_BYTES]);
int cl_decode_boot_targets(const uint8_t msg[CL_MSG_BYTES], int total,
			   struct cl_boot_target *t, int *first, int *n);
int cl_encode_boot_results(const struct cl_boot_result *r, int first, int n,
			   uint8_t msg[CL_MSG_BYTES]);
int cl_decode_boot_results(const uint8_t msg[CL_MSG_BYTES], int total,
			   struct cl_boot_result *r, int *first, int *n);

/* ---- the rendezvous, without I/O (cluster_wire.c) ---- */

/* An rdv message: code | length | data (auth messages fit the data). */
#define CL_RDV_DATA 56
#define CL_RDV_BYTES (16 + CL_RDV_DATA)

/* Rank 0's answer to a joining rank. */
enum cl_rdv_status {
	CL_RDV_OK,
	CL_RDV_TAKEN,		/* another process has that rank */
	CL_RDV_MISMATCH,	/* version, size or rank out of range */
	CL_RDV_KEYLESS,		/* a key on one side only */
	CL_RDV_AUTH,		/* the key differs */
};
const char *cl_rdv_status_text(int status);

/* Rank 0's greeting of one connection: hello, the key's proof where
 * there is a key, the rank it claims, its facts. */
struct cl_greet {
	int state;
	int size;
	const struct core_auth_key *key;	/* NULL: none */
	int rank;		/* claimed, once CL_GREET_CLAIM came */
	const char *why;	/* why it was refused */
	struct core_auth auth;
	uint8_t hello[CORE_AUTH_HELLO_SIZE];
	uint8_t in[OOB_HDR_BYTES + CL_MSG_BYTES];
	size_t in_len;
	uint8_t out[2 * (OOB_HDR_BYTES + CL_RDV_BYTES)];	/* to send */
	size_t out_len;
	struct cl_host host;	/* once done */
};

#define CL_GREET_CLAIM 1

void cl_greet_start(struct cl_greet *g, int size,
		    const struct core_auth_key *key);
/* Bytes the current message still lacks (0: none wanted). */
size_t cl_greet_want(const struct cl_greet *g);
/*
 * Feeds received bytes, at most cl_greet_want() of them (*used says how
 * many).  -EAGAIN: more wanted (send out[] first); CL_GREET_CLAIM: g->rank
 * is claimed (by the key's holder, where there is a key), call
 * cl_greet_verdict; 0: joined, g->host holds its facts; else refused
 * (g->why says why; out[] may hold the answer that tells it).
 */
int cl_greet_feed(struct cl_greet *g, const uint8_t *buf, size_t len,
		  size_t *used);
/* Whether the claimed rank is another's: the answer goes to out[]. */
int cl_greet_verdict(struct cl_greet *g, bool taken);
void cl_greet_sent(struct cl_greet *g, size_t n);

/* A joining rank: send out[], then hand each answer to cl_join_answer. */
struct cl_join {
	int state;
	const struct core_auth_key *key;
	int status;		/* rank 0's refusal, or -1 unknown */
	const char *why;
	struct core_auth auth;
	uint8_t out[CL_RDV_BYTES];	/* the next HELLO message's body */
};

#define CL_JOIN_SEND 1

void cl_join_start(struct cl_join *j, int rank, int size,
		   const struct core_auth_key *key);
/* One answer's body: 0 joined, CL_JOIN_SEND (send out[] and wait for the
 * next answer), or a negative errno with j->why. */
int cl_join_answer(struct cl_join *j, const uint8_t body[CL_RDV_BYTES]);

/* Rendezvous: fills rdv host/port, rank and size from the arguments or
 * the launcher's environment; 0, or -EINVAL after saying what is missing. */
int cl_rdv_resolve(struct cl_opts *o);

/* cluster_opts.c: parses the command line into o (whose defaults are set);
 * returns -1 to go on, else the exit status. */
int cl_parse_args(int argc, char **argv, struct cl_opts *o);
/* Rank 0: fds[k] and hosts[k] for k = 1..size-1 (fds[0] = -1); others:
 * fds[0] = the socket to rank 0, `me` told to it (hosts unused).  0 or
 * negative errno, said on stderr. */
int cl_rdv_connect(const struct cl_opts *o, const struct cl_host *me,
		   int *fds, struct cl_host *hosts);

/* ---- this host's plugin and the steps (cluster_pair.c) ---- */

struct cl_node {
	const struct cl_opts *o;
	int rank;
	struct perf_net net;
	bool net_up;
	mesh_conn_info_fn conn_info;	/* NULL: the plugin does not tell */
	int ndev;
	int connect_timeout_ms;
	/* the pair under way */
	void *listen, *send, *recv;
	struct perf_dir sdir, rdir;
	uint8_t *bufs[2];	/* what sdir and rdir point into */
	int rail, peer;
};

int cl_node_start(struct cl_node *n, const char *plugin, struct cl_host *me);
void cl_node_stop(struct cl_node *n);
/* Runs one command; note_fd carries the CONNECT notes to and from the
 * peer (through rank 0, or the peer's own socket on rank 0), and oob_fd
 * is watched for a dead peer during transfers. */
void cl_exec(struct cl_node *n, const struct cl_cmd *c, struct cl_step *s,
	     int note_fd, int oob_fd);

/* The plugin's log lines, kept while a step runs (cluster.c). */
void cl_log_capture(bool on);
/* The captured lines, each ending in '\n' (valid until the next capture). */
const char *cl_log_lines(void);

/* The failure class of a plugin's line: "refused", "timed out", ... */
const char *cl_classify(const char *reason);

/* ---- NCCL's bootstrap (cluster_boot.c) ---- */

/* Each connect's limit: a routable address answers in milliseconds, and
 * a lost SYN is sent again after 1 s. */
#define CL_BOOT_CONNECT_MS 2000
/* Connects in flight at once on one host. */
#define CL_BOOT_PARALLEL 256

/* Picks the interface and address as NCCL does, and listens there (a
 * thread answers every connection with the token); fills me->boot.
 * Failing to is not an error of meshinfo: boot.error says why. */
void cl_boot_start(struct cl_host *me);
void cl_boot_stop(void);
/* Rank 0: every host tries every other's address, all at once; fills
 * r->boot and r->boot_elapsed_s.  Hosts whose control connection fails
 * are lost (cl_lose). */
void cl_boot_run(struct cl_report *r, int *fds, int timeout_s);
/* Another rank: rank 0's CL_CMD_BOOT; 0 or a negative errno. */
int cl_boot_member(int fd, const struct cl_cmd *c, int rank, int size,
		   int timeout_s);
const char *cl_boot_status_text(int status);
/* Whether NCCL's init would hang or fail: a pair or a host without one. */
bool cl_boot_failed(const struct cl_report *r);
/* A host rank 0 lost: its fd closed, the reason kept. */
void cl_lose(struct cl_report *r, int *fds, int rank);

/* ---- findings and outputs ---- */

void cl_find(struct cl_report *r);
/* "40.1 us", "20.13 ms"; "512 KiB", "3.0 MiB": figures as people read them. */
const char *cl_rtt_text(double us, char *buf, size_t cap);
const char *cl_bytes_text(uint64_t n, char *buf, size_t cap);
/* The host's name, with "#rank" where several ranks share the name. */
const char *cl_label(const struct cl_report *r, int k, char *buf,
		     size_t cap);
void cl_report_free(struct cl_report *r);
void cl_print_text(FILE *out, const struct cl_report *r);
void cl_print_json(FILE *out, const struct cl_report *r);
void cl_print_dot(FILE *out, const struct cl_report *r);
/* --json/--dot/--svg/--png; 0, or 2 when one could not be written. */
int cl_write_outputs(const struct cl_opts *o, const struct cl_report *r);

/* ---- shared ---- */

void cl_sha256_hex(const void *data, size_t len, char out[CL_SHA_HEX]);
int cl_sha256_file(const char *path, char out[CL_SHA_HEX]);
int meshinfo_cluster_main(int argc, char **argv);

#endif
