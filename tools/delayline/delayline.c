/* SPDX-License-Identifier: MIT */
/*
 * delayline: a long WAN for the namespace tiers on kernels without
 * sch_netem.  It opens a multi-queue TUN device, holds every packet the
 * kernel routes into it for a fixed delay, drops some at random if asked,
 * and writes the rest back into the same device, where the kernel routes
 * them on as if they had just arrived (docs/testing-netns.md shows how
 * the tiers route a router's WAN traffic through it).
 *
 *   delayline --dev NAME [--queues N] [--delay TIME] [--loss PERCENT]
 *             [--limit SIZE] [--limit-packets N] [--mtu N] [--txqlen N]
 *             [--seed N] [--stats FILE] [--interval MS] [--pid-file FILE]
 *             [--realtime]
 *
 * With IFF_VNET_HDR and the TSO offloads a 64 KiB TCP segmentation
 * offload packet passes whole, so a packet costs two system calls
 * whatever its size.  Each queue has a thread of its own and the kernel
 * keeps a flow on one queue; a queue is a FIFO in chunks of memory, in
 * the order of arrival, which with one delay for all is the order of
 * release, and takes as many chunks as it holds packets for.  Loss is per packet on the wire: an offloaded TCP packet of N
 * segments loses each with the given probability, and one that loses any
 * is written back as its other segments (delayline_pkt.c), so 0.01% loss
 * is one segment in 10,000 whatever the offload made of them.
 *
 * What it held and dropped is printed as one line of KEY=VALUE words on
 * SIGUSR1 and at the end (SIGTERM, SIGINT), to stderr and to the stats
 * file, which --interval rewrites every MS as well.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/if_tun.h>
#include <math.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "delayline.h"
#include "size.h"

#define MAX_QUEUES 64
/* packets taken in a row before due ones are written again */
#define READ_BATCH 32
/* the longest sleep, so that a stop is seen within it */
#define IDLE_NS 100000000ull
/* one read: the virtio header and the largest packet, with room to spare
 * so that a longer one shows as such rather than cut short */
#define READ_MAX (DL_VNET_LEN + DL_IP_MAX + 256)

/* A packet held in a queue, its bytes right after. */
struct slot {
	uint64_t due_ns;
	uint32_t len;		/* virtio header and IP packet */
	uint32_t size;		/* bytes of its chunk it takes */
};

#define SLOT_ALIGN 16
#define SLOT_MAX ((sizeof(struct slot) + READ_MAX + SLOT_ALIGN - 1) & \
		  ~(size_t)(SLOT_ALIGN - 1))

/* Packets follow each other in a chunk; a queue's chunks in a list.  A
 * packet that does not fit in what is left of one starts the next, so at
 * most SLOT_MAX of a chunk's 2 MiB go unused. */
#define CHUNK_BYTES (2u << 20)
struct chunk {
	struct chunk *next;
	size_t used;
	uint8_t data[] __attribute__((aligned(SLOT_ALIGN)));
};
#define CHUNK_DATA (CHUNK_BYTES - sizeof(struct chunk))

/* Counters of one queue; only its thread writes them. */
struct counts {
	_Atomic uint64_t in_pkts, in_wire, in_bytes;
	_Atomic uint64_t out_pkts, out_wire, out_bytes;
	_Atomic uint64_t loss_pkts, loss_wire, loss_bytes, split_pkts;
	_Atomic uint64_t over_pkts, over_wire, over_bytes;
	_Atomic uint64_t bad_pkts, write_errs, exit_pkts, exit_bytes;
	_Atomic uint64_t late_max_ns, late_sum_ns;
};

struct queue {
	int fd;
	unsigned index;
	pthread_t thread;
	/* the FIFO: from offset rd of the first chunk to the last's end */
	struct chunk *first, *last, *spare;
	size_t rd, count;
	uint64_t rng;
	uint8_t *scratch;	/* a segment being written */
	struct counts c;
};

struct options {
	const char *dev;
	unsigned queues;
	uint64_t delay_ns;
	double loss;		/* probability per packet on the wire */
	uint64_t limit_bytes;
	uint64_t limit_pkts;	/* 0: none */
	unsigned mtu;		/* 0: leave it */
	unsigned txqlen;	/* packets each queue of the device takes */
	uint64_t seed;
	bool seeded;
	const char *stats;
	const char *pid_file;
	unsigned interval_ms;
	bool realtime;
};

static struct options opt = {
	.queues = 1,
	.limit_bytes = 64ull << 20,
	.txqlen = 4096,
};
static uint64_t loss_threshold;	/* loss as a fraction of 2^64 */
static bool loss_all;
static struct queue queues[MAX_QUEUES];
static atomic_bool stopping;
/* held in all queues, the most ever held, and the chunks holding them */
static _Atomic uint64_t held_bytes, held_pkts, max_held_bytes, max_held_pkts;
static _Atomic uint64_t chunk_bytes;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t get(_Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static void raise_max(_Atomic uint64_t *max, uint64_t v)
{
	uint64_t m = get(max);

	while (v > m && !atomic_compare_exchange_weak_explicit(max, &m, v,
			memory_order_relaxed, memory_order_relaxed))
		;
}

/* splitmix64: one generator per queue, no state shared */
static uint64_t next_random(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static bool lost(struct queue *q)
{
	return loss_all || next_random(&q->rng) < loss_threshold;
}

/* ------------------------------------------------------------ the FIFO */

/* Room for the longest packet at the end of the FIFO, or NULL when no
 * chunk could be had.  A chunk taken here and left empty (a packet read
 * and then dropped) is the next one's. */
static struct slot *fifo_reserve(struct queue *q)
{
	struct chunk *c = q->last;

	if (c && CHUNK_DATA - c->used >= SLOT_MAX)
		return (struct slot *)(c->data + c->used);
	c = q->spare;
	if (c) {
		q->spare = c->next;
	} else {
		c = malloc(CHUNK_BYTES);
		if (!c)
			return NULL;
		add(&chunk_bytes, CHUNK_BYTES);
	}
	c->next = NULL;
	c->used = 0;
	if (q->last)
		q->last->next = c;
	else
		q->first = c;
	q->last = c;
	return (struct slot *)c->data;
}

static void fifo_commit(struct queue *q, struct slot *s)
{
	q->last->used += s->size;
	q->count++;
}

static struct slot *fifo_head(struct queue *q)
{
	return q->count ? (struct slot *)(q->first->data + q->rd) : NULL;
}

static void fifo_pop(struct queue *q, struct slot *s)
{
	struct chunk *c = q->first;

	q->rd += s->size;
	q->count--;
	if (q->rd < c->used)
		return;
	q->rd = 0;
	if (c == q->last) {
		c->used = 0;	/* empty: the chunk starts over */
		return;
	}
	q->first = c->next;
	c->next = q->spare;
	q->spare = c;
}

static void fifo_free(struct queue *q)
{
	struct chunk *lists[] = { q->first, q->spare }, *c, *next;
	size_t i;

	for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		for (c = lists[i]; c; c = next) {
			next = c->next;
			free(c);
		}
	q->first = q->last = q->spare = NULL;
}

/* ------------------------------------------------------- the data path */

static size_t ip_len(size_t len)
{
	return len > DL_VNET_LEN ? len - DL_VNET_LEN : 0;
}

static void write_packet(struct queue *q, const uint8_t *buf, size_t len,
			 unsigned wire)
{
	ssize_t n = write(q->fd, buf, len);

	if (n == (ssize_t)len) {
		add(&q->c.out_pkts, 1);
		add(&q->c.out_wire, wire);
		add(&q->c.out_bytes, ip_len(len));
	} else {
		add(&q->c.write_errs, 1);
	}
}

/*
 * The loss of packet BUF (LEN bytes, WIRE segments): true when it was
 * dealt with here (dropped, or written back as the segments it kept).
 */
static bool apply_loss(struct queue *q, const uint8_t *buf, size_t len,
		       unsigned wire)
{
	const struct virtio_net_hdr *vh = (const void *)buf;
	const uint8_t *ip = buf + DL_VNET_LEN;
	struct dl_tso t;
	unsigned k, gone = 0;
	bool keep[DL_IP_MAX / 8];	/* segments of 8 bytes or more */

	if (wire == 1 || dl_tso_layout(vh, ip, len - DL_VNET_LEN, &t) != 0 ||
	    t.segs > sizeof(keep) / sizeof(keep[0])) {
		/* one segment, or an offload not cut here: any segment
		 * lost loses all, as the wire packets go together */
		for (k = 0; k < wire; k++)
			gone += lost(q);
		if (!gone)
			return false;
		add(&q->c.loss_pkts, 1);
		add(&q->c.loss_wire, wire);
		add(&q->c.loss_bytes, ip_len(len));
		return true;
	}
	for (k = 0; k < t.segs; k++) {
		keep[k] = !lost(q);
		gone += !keep[k];
	}
	if (!gone)
		return false;
	add(&q->c.loss_pkts, 1);
	add(&q->c.loss_wire, gone);
	add(&q->c.split_pkts, 1);
	/* every segment its own packet with its checksum complete: the
	 * zeroed virtio header asks the kernel for nothing */
	memset(q->scratch, 0, DL_VNET_LEN);
	for (k = 0; k < t.segs; k++) {
		size_t n = dl_tso_segment(ip, &t, k, q->scratch + DL_VNET_LEN);

		if (keep[k])
			write_packet(q, q->scratch, DL_VNET_LEN + n, 1);
		else
			add(&q->c.loss_bytes, n);
	}
	return true;
}

static void unhold(uint64_t size)
{
	atomic_fetch_sub_explicit(&held_bytes, size, memory_order_relaxed);
	atomic_fetch_sub_explicit(&held_pkts, 1, memory_order_relaxed);
}

static void release(struct queue *q, struct slot *s, uint64_t now)
{
	const uint8_t *buf = (const uint8_t *)(s + 1);
	unsigned wire = dl_wire_packets((const void *)buf,
					buf + DL_VNET_LEN, ip_len(s->len));
	uint64_t late = now > s->due_ns ? now - s->due_ns : 0;

	unhold(s->size);
	add(&q->c.late_sum_ns, late);
	if (late > get(&q->c.late_max_ns))
		atomic_store_explicit(&q->c.late_max_ns, late,
				      memory_order_relaxed);
	if (loss_threshold || loss_all) {
		if (apply_loss(q, buf, s->len, wire))
			return;
	}
	write_packet(q, buf, s->len, wire);
}

/* A packet of SIZE bytes counted as held, unless that passes a limit:
 * taken first and given back, so that no two queues pass it together. */
static bool hold(uint64_t size)
{
	uint64_t b = atomic_fetch_add_explicit(&held_bytes, size,
					       memory_order_relaxed) + size;
	uint64_t p = atomic_fetch_add_explicit(&held_pkts, 1,
					       memory_order_relaxed) + 1;

	if (b > opt.limit_bytes || (opt.limit_pkts && p > opt.limit_pkts)) {
		unhold(size);
		return false;
	}
	raise_max(&max_held_bytes, b);
	raise_max(&max_held_pkts, p);
	return true;
}

/* The device failed under us (deleted): the line stops, and says so. */
static void lost_device(struct queue *q)
{
	fprintf(stderr, "delayline: %s: queue %u: %s; stopping\n", opt.dev,
		q->index, strerror(errno));
	atomic_store(&stopping, true);
	kill(getpid(), SIGTERM);
}

/* Takes one packet from the device: 1, or 0 when none was there. */
static int take(struct queue *q)
{
	struct slot *s = fifo_reserve(q);
	uint8_t *buf = s ? (uint8_t *)(s + 1) : q->scratch;
	ssize_t n = read(q->fd, buf, READ_MAX);
	uint64_t size, now;
	unsigned wire;

	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			lost_device(q);
		return 0;
	}
	now = now_ns();
	if ((size_t)n < DL_VNET_LEN + 20 || (size_t)n > DL_VNET_LEN + DL_IP_MAX) {
		add(&q->c.bad_pkts, 1);
		return 1;
	}
	wire = dl_wire_packets((const void *)buf, buf + DL_VNET_LEN,
			       (size_t)n - DL_VNET_LEN);
	add(&q->c.in_pkts, 1);
	add(&q->c.in_wire, wire);
	add(&q->c.in_bytes, (uint64_t)n - DL_VNET_LEN);
	size = (sizeof(struct slot) + (size_t)n + SLOT_ALIGN - 1) &
	       ~(uint64_t)(SLOT_ALIGN - 1);
	if (!s || !hold(size)) {
		add(&q->c.over_pkts, 1);
		add(&q->c.over_wire, wire);
		add(&q->c.over_bytes, (uint64_t)n - DL_VNET_LEN);
		return 1;
	}
	s->due_ns = now + opt.delay_ns;
	s->len = (uint32_t)n;
	s->size = (uint32_t)size;
	fifo_commit(q, s);
	return 1;
}

static void *run_queue(void *arg)
{
	struct queue *q = arg;
	struct pollfd pfd = { .fd = q->fd, .events = POLLIN };

	/* wake-ups within a microsecond of the due time, not the 50 us
	 * a thread gets by default */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	if (opt.realtime) {
		struct sched_param sp = { .sched_priority = 1 };

		errno = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
		if (errno && q->index == 0)
			fprintf(stderr, "delayline: SCHED_FIFO: %s; the "
				"threads run at normal priority\n",
				strerror(errno));
	}
	while (!atomic_load_explicit(&stopping, memory_order_relaxed)) {
		uint64_t now = now_ns(), wait = IDLE_NS;
		struct slot *s;
		struct timespec ts;
		int taken = 0;

		while ((s = fifo_head(q)) && s->due_ns <= now) {
			release(q, s, now);
			fifo_pop(q, s);
			now = now_ns();
		}
		while (taken < READ_BATCH && take(q))
			taken++;
		if (taken)
			continue;
		if (s)
			wait = s->due_ns - now < wait ? s->due_ns - now : wait;
		ts.tv_sec = (time_t)(wait / 1000000000ull);
		ts.tv_nsec = (long)(wait % 1000000000ull);
		ppoll(&pfd, 1, &ts, NULL);
	}
	/* what is still held is not written: the line is going away */
	while (fifo_head(q)) {
		struct slot *s = fifo_head(q);

		add(&q->c.exit_pkts, 1);
		add(&q->c.exit_bytes, ip_len(s->len));
		unhold(s->size);
		fifo_pop(q, s);
	}
	return NULL;
}

/* ------------------------------------------------------------- reports */

/*
 * What the kernel dropped because a queue of ours was full, a drop of the
 * line as well: the device's transmit drops in /proc/net/dev (which shows
 * the namespace we run in, as sysfs does only where it was mounted for
 * it).  0 where it cannot be read.
 */
static uint64_t dev_drops(void)
{
	char line[512], name[IFNAMSIZ + 1];
	unsigned long long f[12], v = 0;
	FILE *in = fopen("/proc/net/dev", "r");

	if (!in)
		return 0;
	while (fgets(line, sizeof(line), in)) {
		char *colon = strchr(line, ':');
		const char *p = line;
		size_t n;

		if (!colon)
			continue;
		while (*p == ' ')
			p++;
		n = (size_t)(colon - p);
		if (n >= sizeof(name))
			continue;
		memcpy(name, p, n);
		name[n] = '\0';
		/* receive: 8 fields; transmit: bytes, packets, errs, drop */
		if (strcmp(name, opt.dev) == 0 &&
		    sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu "
			   "%llu %llu %llu %llu %llu", &f[0], &f[1], &f[2],
			   &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], &f[9],
			   &f[10], &f[11]) == 12) {
			v = f[11];
			break;
		}
	}
	fclose(in);
	return v;
}

/* The counters of every queue, summed, as one line of KEY=VALUE; SEQ
 * tells a reader of the stats file that a new report is there. */
static void report(FILE *f, unsigned seq)
{
	struct counts s = { 0 };
	struct rusage ru;
	uint64_t drops = dev_drops();
	uint64_t late_max = 0, released;
	unsigned i, k;

	for (i = 0; i < opt.queues; i++) {
		_Atomic uint64_t *from = (_Atomic uint64_t *)&queues[i].c;
		_Atomic uint64_t *to = (_Atomic uint64_t *)&s;

		/* struct counts is nothing but counters */
		for (k = 0; k < sizeof(s) / sizeof(*to); k++)
			add(&to[k], get(&from[k]));
		if (get(&queues[i].c.late_max_ns) > late_max)
			late_max = get(&queues[i].c.late_max_ns);
	}
	released = get(&s.in_pkts) - get(&s.over_pkts) - get(&held_pkts) -
		   get(&s.exit_pkts);
	const struct { const char *key; uint64_t v; } out[] = {
		{ "in_pkts", get(&s.in_pkts) },
		{ "in_wire", get(&s.in_wire) },
		{ "in_bytes", get(&s.in_bytes) },
		{ "out_pkts", get(&s.out_pkts) },
		{ "out_wire", get(&s.out_wire) },
		{ "out_bytes", get(&s.out_bytes) },
		{ "held_pkts", get(&held_pkts) },
		{ "held_bytes", get(&held_bytes) },
		{ "max_held_pkts", get(&max_held_pkts) },
		{ "max_held_bytes", get(&max_held_bytes) },
		{ "limit_bytes", opt.limit_bytes },
		{ "mem_bytes", get(&chunk_bytes) },
		{ "loss_pkts", get(&s.loss_pkts) },
		{ "loss_wire", get(&s.loss_wire) },
		{ "loss_bytes", get(&s.loss_bytes) },
		{ "split_pkts", get(&s.split_pkts) },
		{ "over_pkts", get(&s.over_pkts) },
		{ "over_wire", get(&s.over_wire) },
		{ "over_bytes", get(&s.over_bytes) },
		{ "bad_pkts", get(&s.bad_pkts) },
		{ "write_errs", get(&s.write_errs) },
		{ "exit_pkts", get(&s.exit_pkts) },
		{ "exit_bytes", get(&s.exit_bytes) },
		{ "dev_drops", drops },
	};

	getrusage(RUSAGE_SELF, &ru);
	fprintf(f, "delayline dev=%s report=%u queues=%u delay_us=%.1f "
		"loss_pct=%g cpu_user_s=%.2f cpu_sys_s=%.2f", opt.dev, seq,
		opt.queues, (double)opt.delay_ns / 1e3, opt.loss * 100,
		(double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
		(double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
	for (k = 0; k < sizeof(out) / sizeof(out[0]); k++)
		fprintf(f, " %s=%" PRIu64, out[k].key, out[k].v);
	fprintf(f, " late_max_us=%.1f late_mean_us=%.1f\n",
		(double)late_max / 1e3, released ?
		(double)get(&s.late_sum_ns) / (double)released / 1e3 : 0.0);
	fflush(f);
}

/* The stats file rewritten whole, so a reader never sees half a line. */
static void report_file(unsigned seq)
{
	char tmp[PATH_MAX];
	FILE *f;

	if (!opt.stats)
		return;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", opt.stats) >=
	    (int)sizeof(tmp)) {
		fprintf(stderr, "delayline: stats path too long\n");
		return;
	}
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "delayline: %s: %s\n", tmp, strerror(errno));
		return;
	}
	report(f, seq);
	if (fclose(f) != 0 || rename(tmp, opt.stats) != 0)
		fprintf(stderr, "delayline: %s: %s\n", opt.stats,
			strerror(errno));
}

/* ------------------------------------------------------------- set-up */

static int tun_open(const char *dev)
{
	struct ifreq ifr = { 0 };
	unsigned offload = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 |
			   TUN_F_TSO_ECN;
	int hdr = (int)DL_VNET_LEN;
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "delayline: /dev/net/tun: %s\n",
			strerror(errno));
		return -1;
	}
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE | IFF_VNET_HDR;
	memcpy(ifr.ifr_name, dev, strlen(dev));
	if (ioctl(fd, TUNSETIFF, &ifr) != 0 ||
	    ioctl(fd, TUNSETVNETHDRSZ, &hdr) != 0 ||
	    ioctl(fd, TUNSETOFFLOAD, offload) != 0) {
		fprintf(stderr, "delayline: %s: cannot attach a queue: %s\n",
			dev, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/*
 * The device up, with the MTU asked for and TXQLEN packets a queue: what
 * the kernel keeps for a thread of ours that the scheduler holds back
 * (its default of 500 is 6 ms of 1500-byte packets at 1 Gbit/s).
 */
static int dev_up(const char *dev, unsigned mtu, unsigned txqlen)
{
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	if (s < 0) {
		fprintf(stderr, "delayline: socket: %s\n", strerror(errno));
		return -1;
	}
	memcpy(ifr.ifr_name, dev, strlen(dev));
	if (mtu) {
		ifr.ifr_mtu = (int)mtu;
		if (ioctl(s, SIOCSIFMTU, &ifr) != 0) {
			fprintf(stderr, "delayline: %s: MTU %u: %s\n", dev,
				mtu, strerror(errno));
			goto out;
		}
	}
	ifr.ifr_qlen = (int)txqlen;
	if (ioctl(s, SIOCSIFTXQLEN, &ifr) != 0) {
		fprintf(stderr, "delayline: %s: txqueuelen %u: %s\n", dev,
			txqlen, strerror(errno));
		goto out;
	}
	if (ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
		fprintf(stderr, "delayline: %s: %s\n", dev, strerror(errno));
		goto out;
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
		fprintf(stderr, "delayline: %s: cannot bring it up: %s\n", dev,
			strerror(errno));
		goto out;
	}
	rc = 0;
out:
	close(s);
	return rc;
}

static int queue_init(struct queue *q, unsigned index)
{
	q->index = index;
	q->fd = tun_open(opt.dev);
	if (q->fd < 0)
		return -1;
	q->scratch = malloc(READ_MAX);
	if (!q->scratch) {
		fprintf(stderr, "delayline: out of memory\n");
		return -1;
	}
	q->rng = opt.seed + 0x632be59bd9b4e019ull * (index + 1);
	return 0;
}

/* Our pid in FILE, for a caller whose child we are not (a shell that
 * starts us through nsenter in a subshell). */
static int write_pid(const char *file)
{
	FILE *f = fopen(file, "w");
	bool ok = f && fprintf(f, "%ld\n", (long)getpid()) > 0;

	if (f && fclose(f) != 0)
		ok = false;
	if (!ok) {
		fprintf(stderr, "delayline: %s: %s\n", file, strerror(errno));
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
	fprintf(f,
"usage: delayline --dev NAME [options]\n"
"Holds every packet routed into the TUN device NAME (made here, gone at\n"
"exit) for a fixed delay and writes it back into the device, which\n"
"routes it on; drops packets at random if asked.\n"
"\n"
"  -d, --dev NAME          the device (up to %d characters)\n"
"  -q, --queues N          queues, each with a thread (1..%d, default 1)\n"
"  -D, --delay TIME        held this long: 0, or a number with ns, us, ms\n"
"                          or s (25ms, 2.5ms; default 0)\n"
"  -l, --loss PERCENT      each packet on the wire lost with this\n"
"                          probability in percent (0.01 or 0.01%%; 0..100)\n"
"  -L, --limit SIZE        at most SIZE bytes held (K, M, G; default 64M);\n"
"                          beyond it packets are dropped and counted\n"
"      --limit-packets N   at most N packets held (default: no limit)\n"
"  -m, --mtu N             the device's MTU (default: the kernel's)\n"
"      --txqlen N          packets the kernel queues for each queue's thread\n"
"                          (default 4096)\n"
"  -s, --seed N            the loss's random seed (default: random)\n"
"  -S, --stats FILE        the report written to FILE as well\n"
"  -i, --interval MS       FILE rewritten every MS milliseconds\n"
"      --pid-file FILE     our pid written to FILE once the device is up\n"
"  -r, --realtime          the queues' threads at SCHED_FIFO priority 1, so\n"
"                          that a busy host does not hold packets longer;\n"
"                          they sleep but while packets are due or arrive\n"
"  -h, --help              this text\n"
"Prints a line when the device is up; SIGUSR1 prints what it held and\n"
"dropped, SIGTERM and SIGINT print it and stop.\n",
		IFNAMSIZ - 1, MAX_QUEUES);
}

static int bad(const char *name, const char *val)
{
	fprintf(stderr, "delayline: invalid value for --%s: '%s'\n", name, val);
	return -1;
}

static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

/* "0", or a non-negative number with ns, us, ms or s; at most an hour. */
static int parse_time(const char *s, uint64_t *ns)
{
	static const struct { const char *unit; double scale; } units[] = {
		{ "ns", 1 }, { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
	};
	char *end;
	double v;
	size_t i;

	if (strcmp(s, "0") == 0) {
		*ns = 0;
		return 0;
	}
	if ((*s < '0' || *s > '9') && *s != '.')
		return -1;
	v = strtod(s, &end);
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].unit) == 0) {
			v *= units[i].scale;
			if (!isfinite(v) || v > 3600e9)
				return -1;
			*ns = (uint64_t)llround(v);
			return 0;
		}
	}
	return -1;
}

static int parse_loss(const char *s, double *p)
{
	char *end;
	double v;

	if ((*s < '0' || *s > '9') && *s != '.')
		return -1;
	v = strtod(s, &end);
	if (*end == '%')
		end++;
	if (*end || !isfinite(v) || v < 0 || v > 100)
		return -1;
	*p = v / 100;
	return 0;
}

static int parse_options(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dev", required_argument, NULL, 'd' },
		{ "queues", required_argument, NULL, 'q' },
		{ "delay", required_argument, NULL, 'D' },
		{ "loss", required_argument, NULL, 'l' },
		{ "limit", required_argument, NULL, 'L' },
		{ "limit-packets", required_argument, NULL, 'P' },
		{ "mtu", required_argument, NULL, 'm' },
		{ "txqlen", required_argument, NULL, 'T' },
		{ "seed", required_argument, NULL, 's' },
		{ "stats", required_argument, NULL, 'S' },
		{ "interval", required_argument, NULL, 'i' },
		{ "realtime", no_argument, NULL, 'r' },
		{ "pid-file", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	int c;

	while ((c = getopt_long(argc, argv, "d:q:D:l:L:m:s:S:i:rh", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'd':
			if (!*optarg || strlen(optarg) >= IFNAMSIZ ||
			    strchr(optarg, '/'))
				return bad("dev", optarg);
			opt.dev = optarg;
			break;
		case 'q':
			if (parse_uint(optarg, MAX_QUEUES, &v) || v == 0)
				return bad("queues", optarg);
			opt.queues = (unsigned)v;
			break;
		case 'D':
			if (parse_time(optarg, &opt.delay_ns))
				return bad("delay", optarg);
			break;
		case 'l':
			if (parse_loss(optarg, &opt.loss))
				return bad("loss", optarg);
			break;
		case 'L':
			/* at most 1 TiB, a slot's size within 32 bits */
			if (util_size_parse(optarg, &opt.limit_bytes) ||
			    opt.limit_bytes < SLOT_MAX ||
			    opt.limit_bytes > (1ull << 40))
				return bad("limit", optarg);
			break;
		case 'P':
			if (parse_uint(optarg, UINT64_MAX, &opt.limit_pkts))
				return bad("limit-packets", optarg);
			break;
		case 'm':
			if (parse_uint(optarg, 65535, &v) || v < 68)
				return bad("mtu", optarg);
			opt.mtu = (unsigned)v;
			break;
		case 'T':
			if (parse_uint(optarg, 1u << 20, &v) || v == 0)
				return bad("txqlen", optarg);
			opt.txqlen = (unsigned)v;
			break;
		case 's':
			if (parse_uint(optarg, UINT64_MAX, &opt.seed))
				return bad("seed", optarg);
			opt.seeded = true;
			break;
		case 'S':
			opt.stats = optarg;
			break;
		case 'i':
			if (parse_uint(optarg, 3600000, &v))
				return bad("interval", optarg);
			opt.interval_ms = (unsigned)v;
			break;
		case 'r':
			opt.realtime = true;
			break;
		case 'p':
			opt.pid_file = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc || !opt.dev) {
		fprintf(stderr, "delayline: %s\n", optind != argc ?
			"unexpected arguments" : "--dev is required");
		usage(stderr);
		return -1;
	}
	if (opt.interval_ms && !opt.stats) {
		fprintf(stderr, "delayline: --interval needs --stats\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	sigset_t sigs;
	unsigned i, started = 0, seq = 0;
	int rc = 1;

	for (i = 0; i < MAX_QUEUES; i++)
		queues[i].fd = -1;
	if (parse_options(argc, argv))
		return 2;
	if (opt.loss >= 1)
		loss_all = true;
	else
		loss_threshold = (uint64_t)ldexp(opt.loss, 64);
	if (!opt.seeded && getrandom(&opt.seed, sizeof(opt.seed), 0) !=
	    (ssize_t)sizeof(opt.seed))
		opt.seed = now_ns();
	/* every thread inherits this: the signals come to sigtimedwait */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	for (i = 0; i < opt.queues; i++)
		if (queue_init(&queues[i], i))
			goto out;
	if (dev_up(opt.dev, opt.mtu, opt.txqlen))
		goto out;
	for (; started < opt.queues; started++) {
		errno = pthread_create(&queues[started].thread, NULL,
				       run_queue, &queues[started]);
		if (errno) {
			fprintf(stderr, "delayline: pthread_create: %s\n",
				strerror(errno));
			goto stop;
		}
	}
	if (opt.pid_file && write_pid(opt.pid_file))
		goto stop;
	fprintf(stderr, "delayline: %s up, %u queues, delay %.3f ms, loss "
		"%g%%, limit %" PRIu64 " bytes\n", opt.dev, opt.queues,
		(double)opt.delay_ns / 1e6, opt.loss * 100, opt.limit_bytes);
	rc = 0;
	for (;;) {
		struct timespec ts = {
			.tv_sec = opt.interval_ms / 1000,
			.tv_nsec = (long)(opt.interval_ms % 1000) * 1000000,
		};
		int sig = opt.interval_ms ? sigtimedwait(&sigs, NULL, &ts) :
					    sigwaitinfo(&sigs, NULL);

		if (sig < 0) {
			if (errno == EAGAIN)
				report_file(++seq);
			continue;
		}
		if (sig == SIGUSR1 || sig == SIGHUP) {
			report(stderr, ++seq);
			report_file(seq);
			continue;
		}
		break;
	}
stop:
	atomic_store(&stopping, true);
	for (i = 0; i < started; i++)
		pthread_join(queues[i].thread, NULL);
	report(stderr, ++seq);
	report_file(seq);
out:
	for (i = 0; i < opt.queues; i++) {
		if (queues[i].fd >= 0)
			close(queues[i].fd);
		fifo_free(&queues[i]);
		free(queues[i].scratch);
	}
	return rc;
}
