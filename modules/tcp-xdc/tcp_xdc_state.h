/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc: many TCP streams per NCCL connection, for long fat links between
 * datacenters.  Private to the module.
 *
 * The bottom of the module's own layers (docs/architecture.md, "Inside
 * modules/tcp-xdc"): the module's context, a comm with its requests,
 * streams and lanes, as every layer above shares them; the host every
 * file logs through; a comm's failure, a stream's holding and a lane's
 * wake-up, which any thread may need and which touch nothing above.
 */
#ifndef TCP_XDC_STATE_H
#define TCP_XDC_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nccl-mesh/module.h>

#include "netaddr.h"
#include "tcp_xdc_aead.h"
#include "tcp_xdc_keep.h"
#include "tcp_xdc_wire.h"

extern const struct mesh_host *tcp_xdc_host;
#define MESH_LOG_HOST tcp_xdc_host
#include <nccl-mesh/log.h>

/* Data-path threads of a process (the pool), whatever the comm count. */
#define TCP_XDC_MAX_THREADS 64
/* NCCL_NET_MAX_REQUESTS: NCCL never keeps more in flight per comm. */
#define TCP_XDC_MAX_REQUESTS 32

/* A message number and an offset in the send cursor (tcp_xdc_send.c). */
#define SEQ_BITS (64 - TCP_XDC_OFFSET_BITS)
#define SEQ_MASK ((1ULL << SEQ_BITS) - 1)
#define OFFSET_MASK (TCP_XDC_MAX_MESSAGE - 1)
#define TOTAL_UNKNOWN UINT64_MAX
#define NO_WAIT UINT64_MAX

/* ---- module context ---- */

struct tcp_xdc_crypt;
/* The context's threads, started with the first comm that needs them:
 * the layers above own them (tcp_xdc_pool.c, tcp_xdc_linger.c), and no
 * file below looks into them. */
struct tcp_xdc_pool;
struct tcp_xdc_linger;

struct tcp_xdc_ctx {
	int ndevs;
	struct util_netif *devs;
	int streams;
	int threads;			/* pool size, resolved from the cores */
	size_t chunk_size;
	size_t min_chunk;
	int sndbuf;
	int rcvbuf;
	int speed_mbps;
	int traffic_class;		/* the config's; -1: leave as is */
	int keepalive_idle_s;
	int keepalive_interval_s;
	int keepalive_count;
	int timeout_ms;
	int outage_ms;			/* 0: no resuming */
	/* the window of a resuming send (tcp_xdc_window.c) */
	bool streams_auto;		/* streams not set: the path may
					 * take more */
	uint64_t window;		/* bytes per connection; 0: auto */
	uint64_t window_max;
	uint64_t wmem_max, rmem_max;	/* tcp_wmem, tcp_rmem of our netns */
	bool idle_restart;		/* tcp_slow_start_after_idle there */
	atomic_bool idle_said;		/* ... said once, on a long path */
	struct tcp_xdc_budget keep_budget;	/* memory_max */
	struct tcp_xdc_budget store_budget;	/* of it, what receive rings
						 * may take: half */
	int spin_us;
	size_t inline_max;
	bool encrypt;
	size_t record_size;
	enum tcp_xdc_aead_lib aead_lib;	/* whose code seals and opens */
	atomic_uint next_comm_id;
	struct tcp_xdc_linger *linger;	/* closed send streams, draining */
	struct tcp_xdc_pool *pool;	/* the data-path threads */
	pthread_mutex_t linger_lock;	/* guards starting either */
	bool finished;			/* fini ran with comms still open */
	_Atomic uint64_t outages;	/* resumed, for report */
	_Atomic uint64_t resumed_streams;
};

/* ---- data path ---- */

/* Progress of a send stream, as the dead-peer check (tcp_xdc_stall.c)
 * last saw it. */
struct tcp_xdc_stall {
	uint64_t tx;			/* bytes written */
	int outq;			/* bytes not yet acknowledged */
	uint64_t since;			/* when either last changed */
	uint64_t parked;		/* the last ping of a receiver that
					 * holds the stream back */
};

struct tcp_xdc_comm;

/*
 * One slot per outstanding request.  The proxy thread owns in_use and fills
 * the message fields before publishing the message through comm->posted; data
 * threads only update the atomic counters.
 */
struct tcp_xdc_req {
	struct mesh_request base;
	struct tcp_xdc_comm *comm;
	bool in_use;
	uint64_t seq;
	char *data;
	size_t size;
	int tag;
	size_t piece;			/* send: chunk length for this message */
	uint64_t nchunks;		/* send: chunks the message is cut into */
	_Atomic uint64_t chunks_done;
	_Atomic uint64_t bytes_done;	/* recv */
	_Atomic uint64_t total;		/* recv: size the sender announced */
	void *prof;			/* profiler token; NULL: unprofiled */
};

enum tcp_xdc_stream_state {
	TCP_XDC_IDLE,		/* send: no chunk; recv: reading a header */
	TCP_XDC_PARKED,		/* recv: header read, its irecv not posted */
	TCP_XDC_PAYLOAD,	/* moving a chunk's payload */
	TCP_XDC_ENDED,		/* recv: the peer ended it between chunks */
	TCP_XDC_DEAD,
	/* resuming (tcp_xdc_resume.c) */
	TCP_XDC_BROKEN,		/* no socket: send dials, recv waits */
	TCP_XDC_RESUMING,	/* send: a new socket, the receiver's count
				 * and our answer on it */
};

/*
 * Send side, resuming: a chunk this stream took, kept until the peer's
 * kernel acknowledged all of it (then it is in the receiver's socket and
 * survives a break), so that it can be written again on a new socket.
 * Its bytes are a copy in the stream's ring (kept: its request counts it
 * once it is written whole) or, where the ring had no room, NCCL's buffer
 * (its request counts it once acknowledged).
 */
struct tcp_xdc_sent {
	struct tcp_xdc_req *req;	/* NULL once counted */
	uint64_t seq, total, offset;
	uint32_t len;
	int32_t tag;
	uint64_t end;			/* tx_bytes after its last byte; 0:
					 * not written whole on this socket */
	size_t keep_off;		/* kept: where its copy starts */
	bool kept;
	bool counted;			/* its request counted it */
};

#define TCP_XDC_SENT_MAX 128		/* chunks a stream keeps at most */

/*
 * Receive side, on a long path: a chunk that came before its receive was
 * posted, read into the stream's ring (its keep) rather than left in the
 * socket, where it would close the stream's window and hold back the
 * kernel's receive autotuning, which grows a buffer only as fast as the
 * reader drains it.  It goes where it belongs once its receive is posted
 * (tcp_xdc_recv.c).
 */
struct tcp_xdc_stored {
	uint64_t seq, total, offset;
	uint32_t len;
	int32_t tag;
	size_t keep_off;		/* where its bytes start in the ring */
	bool lost;			/* begun on a socket left for one dialed
					 * anew: counts for nothing */
};

#define TCP_XDC_STORED_MAX 256		/* chunks a stream stores at most */

struct tcp_xdc_stream {
	int fd;
	int index;
	enum tcp_xdc_stream_state state;
	struct tcp_xdc_chunk_hdr wire;	/* header as it is on the wire */
	size_t hdr_done;
	struct tcp_xdc_req *req;
	uint64_t seq;
	uint64_t total;
	uint64_t offset;
	uint32_t len;
	int32_t tag;
	size_t payload_done;
	const char *src;		/* send: the chunk's payload */
	uint64_t last_seq;
	uint64_t rx_bytes;		/* recv: everything read, pings' clock */
	uint64_t rx_seen;		/* recv: rx_bytes at quiet_since */
	uint64_t quiet_since;		/* recv: last byte or ping */
	uint64_t tx_bytes;		/* send: everything written */
	struct tcp_xdc_stall stall;	/* send: progress of a blocked chunk */
	bool peer_done;			/* recv: hangup seen while parked */
	bool end_early;			/* recv: that hangup counted in
					 * comm->ended already */
	bool was_early;			/* recv: so before a dial anew */
	_Atomic uint64_t early_seq;	/* recv: counted so while parked on
					 * this message, which it may still
					 * serve; NO_WAIT: none */
	bool parked_out;		/* recv, resuming: reset while
					 * parked, its old socket kept */
	bool reset;			/* recv: ended by a reset, not a FIN */
	bool dialed;			/* recv: dialed anew in this outage:
					 * the sender lives */
	struct tcp_xdc_crypt *crypt;	/* records; NULL: in clear */
	void *prof_ev;			/* the chunk's profiler event */
	/*
	 * Whoever moves the stream (its pool thread, or the proxy thread on
	 * the fast path) holds it; the other one passes by and never waits.
	 * Every field above belongs to the holder.
	 */
	atomic_bool held;
	atomic_bool passed;		/* the pool thread found it held */
	atomic_bool proxy_reads;	/* recv: test() watches it for now */
	short revents;			/* pool thread only: last poll result */
	struct tcp_xdc_lane *lane;	/* the pool thread's share it is in */
	/* resuming, both sides: chunks of this stream in all its sockets */
	uint64_t chunks;		/* recv: finished; send: taken */
	uint64_t broken_ns;		/* when the socket broke; 0: fine */
	uint64_t refused_ns;		/* send: first refusal of a dial in a
					 * row; 0: none */
	uint64_t resume_ns;		/* when the new socket came (recv:
					 * when we asked on it) */
	char cause[96];			/* what broke it */
	uint8_t resume[16];		/* the message of a new socket */
	size_t resume_done;
	/* send: the chunks kept, by number: [head, tail) kept, next the
	 * one to write (< tail: written again after a break) */
	struct tcp_xdc_sent *sent;
	_Atomic uint64_t sent_head;	/* written by the holder only */
	uint64_t sent_next;
	_Atomic uint64_t sent_tail;
	atomic_uint sent_bare;		/* of those, chunks with no copy: their
					 * requests count them once
					 * acknowledged (test() reaps them) */
	struct tcp_xdc_keep keep;	/* send: the copies of kept chunks;
					 * recv: the stored chunks' bytes */
	uint64_t keep_retry_ns;		/* send: no ring yet, the budget is
					 * asked again then */
	/* recv: the chunks stored, [head, tail), oldest first; storing:
	 * the chunk being read is the newest, not whole yet */
	struct tcp_xdc_stored *stored;
	uint64_t stored_head, stored_tail;
	bool storing;
	_Atomic uint64_t stored_seq;	/* the oldest stored chunk's message;
					 * NO_WAIT: none */
	int outq;			/* send: unacknowledged bytes as the
					 * holder last saw them (metrics) */
	/* recv: a socket dialed anew, handed over by lane 0's thread */
	atomic_int next_fd;
	uint8_t next_secret[32];
	size_t next_secret_len;
	/* recv: the one asked on, while the old socket still counts */
	int new_fd;
	struct tcp_xdc_crypt *new_crypt;
	uint64_t asked;			/* chunks we had whole */
	bool confirmed;			/* the sender answered: */
	uint64_t resume_to;		/* it writes this chunk next */
	bool was_ended;			/* the old socket had ended in order */
	bool polls_new;			/* revents are the new socket's */
	/* metrics, the holder's (mesh_count): plaintext through the record
	 * layer, records that failed their tag, stalls found */
	uint64_t m_crypt_bytes, m_auth_failures, m_stalls;
};

/* The streams of one comm that one pool thread serves. */
struct tcp_xdc_lane {
	struct tcp_xdc_comm *comm;
	/* its pool thread, set once at attach and kept: a thread failing
	 * the comm may still wake it while another detaches the lane */
	unsigned int worker;		/* the thread's index in the pool */
	int wake_fd;			/* its eventfd; -1: none yet */
	bool attached;			/* in its thread's lane list */
	int nstreams;
	struct tcp_xdc_stream **streams;
	atomic_int want_work;		/* send: an idle stream waits for work */
	_Atomic uint64_t wait_seq;	/* recv: first message a parked stream needs */
	uint64_t next_check_ns;		/* send: next look at blocked streams */
};

enum tcp_xdc_fail_state {
	TCP_XDC_HEALTHY,
	TCP_XDC_FAILED,		/* errmsg written, not yet warned about */
	TCP_XDC_WARNED,
};

struct tcp_xdc_comm {
	struct tcp_xdc_ctx *ctx;
	bool is_send;
	unsigned int id;
	char peer[128];
	size_t chunk_size;
	size_t min_chunk;
	int nstreams;
	int nlanes;
	int timeout_ms;
	size_t inline_max;
	bool recv_inline;		/* proxy: test() reads stream 0 */
	uint64_t ping_busy_ns;		/* recv: quiet time before a ping;
					 * send: period of the stall check */
	uint64_t ping_idle_ns;		/* the same with no receive posted */
	struct tcp_xdc_stream *streams;
	struct tcp_xdc_lane *lanes;
	struct tcp_xdc_req reqs[TCP_XDC_MAX_REQUESTS];
	uint64_t next_seq;		/* proxy only */
	_Atomic uint64_t posted;	/* messages published to the threads */
	_Atomic uint64_t cursor;	/* send: next chunk to claim */
	_Atomic uint64_t completed;	/* requests test() saw finish */
	atomic_int stop;
	bool frees_ctx;			/* the last comm open at fini */
	atomic_int error;		/* first failure, negative errno */
	atomic_int ended;		/* recv: streams the peer ended */
	atomic_int ended_reset;		/* recv: of those, ended by a reset */
	atomic_int resets_out;		/* recv: streams out by a reset and
					 * not dialed anew (reset_out) */
	atomic_int fail_state;		/* enum tcp_xdc_fail_state */
	char errmsg[384];
	bool leg;			/* another module's leg (module.h
					 * 1.10): that module decides */
	/* resuming: NULL when not (outage_ms 0, or the peer does not) */
	struct mesh_rejoin *rejoin;
	pthread_mutex_t rejoin_lock;	/* its dials; a taken socket's handoff */
	int outage_ms;
	uint64_t stall_ms;		/* send: a blocked stream with no word
					 * for this long is dialed anew */
	uint32_t record_size;		/* of a new socket's records */
	int traffic_class;		/* of its sockets, -1: left as is */
	atomic_int broken;		/* streams out now */
	_Atomic uint64_t outage_ns;	/* when the outage began */
	_Atomic uint64_t resent_chunks, resent_bytes;	/* in this outage */
	/* send, resuming: the window (tcp_xdc_window.c), sized at start */
	uint32_t rtt_us;		/* the path's round trip; 0: unknown */
	int rate_mbps;			/* the device's */
	uint64_t bdp;			/* rate x round trip, bytes */
	size_t keep_ring;		/* each stream's ring; 0: none (send:
					 * no copies, a send is done once
					 * acknowledged; recv: nothing is
					 * stored, a chunk waits in its
					 * socket for its receive) */
	int notsent_lowat;		/* send: TCP_NOTSENT_LOWAT of its
					 * sockets; 0: the system's */
	_Atomic uint64_t keep_held;	/* bytes of its rings */
	atomic_bool keep_short;		/* the budget gave a stream no ring
					 * (logged once) */
	atomic_int cause_set;
	char outage_cause[128];		/* the first break's */
	uint64_t next_take_ns;		/* recv: next look for new sockets */
	/* metrics: what test() saw complete (the proxy thread's,
	 * mesh_count) */
	uint64_t m_bytes, m_requests;
};

/*
 * Profiler events (docs/observe.md): each chunk a stream moves is a part
 * of its request, started before its bytes count towards the request and
 * stopped once they are written or read whole.  Nothing happens for a
 * request the core does not profile (req->prof NULL, the common case).
 */
static inline void *xdc_prof_request(void)
{
	/* a host of 1.7 or before, or a test's, has no such service */
	return MESH_HOST_HAS(tcp_xdc_host, prof_request) &&
		       tcp_xdc_host->prof_request ?
		       tcp_xdc_host->prof_request(tcp_xdc_host) : NULL;
}

static inline void *xdc_prof_part(struct tcp_xdc_req *req, int stream,
				  uint32_t len)
{
	void *token = __atomic_load_n(&req->prof, __ATOMIC_RELAXED);
	struct mesh_prof_part part = { MESH_PROF_STREAM, stream, len };

	return token ? tcp_xdc_host->prof_start(tcp_xdc_host, token, &part) :
		       NULL;
}

static inline void xdc_prof_stop(void *ev)
{
	if (ev)
		tcp_xdc_host->prof_stop(tcp_xdc_host, ev);
}

/* The chunk stream s moves now, as a part of req. */
static inline void xdc_prof_begin(struct tcp_xdc_stream *s,
				  struct tcp_xdc_req *req)
{
	s->prof_ev = xdc_prof_part(req, s->index, s->len);
}

static inline void xdc_prof_end(struct tcp_xdc_stream *s)
{
	xdc_prof_stop(s->prof_ev);
	s->prof_ev = NULL;
}

/* The stream's newest stored chunk (stored_tail > stored_head). */
static inline struct tcp_xdc_stored *
xdc_stored_newest(struct tcp_xdc_stream *s)
{
	return &s->stored[(s->stored_tail - 1) % TCP_XDC_STORED_MAX];
}

uint64_t xdc_now_ns(void);
const char *xdc_comm_kind(const struct tcp_xdc_comm *comm);

/* Wakes the thread that sleeps on eventfd efd (a lane's, the linger's). */
void xdc_efd_wake(int efd);
/* Wakes the pool thread of lane l, from any thread. */
void xdc_lane_wake(struct tcp_xdc_lane *l);

/* Records the first failure of a comm (logged when a request sees it). */
int xdc_comm_fail(struct tcp_xdc_comm *comm, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fails the comm with what stream s ran into (err: negative errno). */
int xdc_stream_fail(struct tcp_xdc_comm *comm, struct tcp_xdc_stream *s,
		    int err, const char *what);
/* Failed or closing: the pool threads leave it alone. */
bool xdc_comm_stopped(struct tcp_xdc_comm *comm);

/* Takes the stream if nobody holds it; never waits. */
static inline bool xdc_stream_hold(struct tcp_xdc_stream *s)
{
	return !atomic_exchange(&s->held, true);
}

/*
 * The pool thread's side: it marks the stream passed before it tries, so
 * that the proxy thread, releasing after, sees the mark and wakes it.
 */
static inline bool xdc_stream_hold_or_pass(struct tcp_xdc_stream *s)
{
	atomic_store(&s->passed, true);
	if (!xdc_stream_hold(s))
		return false;
	atomic_store_explicit(&s->passed, false, memory_order_relaxed);
	return true;
}

/*
 * The proxy thread's release after its fast path: the pool thread takes
 * over when it passed the stream by meanwhile or when work is left on it.
 */
static inline void xdc_stream_hand_back(struct tcp_xdc_stream *s,
					bool work_left)
{
	atomic_store(&s->held, false);
	if (atomic_exchange(&s->passed, false) || work_left)
		xdc_lane_wake(s->lane);
}

static inline void xdc_stream_release(struct tcp_xdc_stream *s)
{
	atomic_store_explicit(&s->held, false, memory_order_release);
}

#endif
