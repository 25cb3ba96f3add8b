/* SPDX-License-Identifier: MIT */
/*
 * nccl-conform: command line, reporting, the watchdog, the bootstrap with
 * the peer and the loop over tests.  See docs/testing-conformance.md.
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conform.h"

/* ---- the log handed to netdrive (tools/netdrive) and the plugin ---- */

static int conf_verbose;
static int conf_rank = -1;

static void vlog(const char *level, const char *fmt, va_list ap)
{
	char msg[1024];
	size_t len;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len && msg[len - 1] == '\n')
		msg[--len] = '\0';
	/* one call per line: plugin threads log concurrently */
	fprintf(stderr, "rank %d %s %s\n", conf_rank, level, msg);
}

static void plugin_logger(ncclDebugLogLevel level, unsigned long flags,
			  const char *file, int line, const char *fmt, ...)
{
	const char *name = "WARN";
	va_list ap;

	(void)flags;
	(void)file;
	(void)line;
	if (level == NCCL_LOG_INFO || level == NCCL_LOG_VERSION) {
		if (conf_verbose < 1)
			return;
		name = "INFO";
	} else if (level == NCCL_LOG_TRACE) {
		if (conf_verbose < 2)
			return;
		name = "TRACE";
	} else if (level != NCCL_LOG_WARN && level != NCCL_LOG_ABORT) {
		return;
	}
	va_start(ap, fmt);
	vlog(name, fmt, ap);
	va_end(ap);
}

/* perf_err, perf_warn and perf_info */
static void netdrive_log(enum perf_log_level level, const char *fmt,
			 va_list ap)
{
	if (level == PERF_LOG_INFO && conf_verbose < 1)
		return;
	vlog(level == PERF_LOG_ERROR ? "error:" :
	     level == PERF_LOG_WARN ? "warning:" : "info:", fmt, ap);
}

/* The clock stays netdrive's; no benchmark runs, so no watchdog_kick. */
static const struct perf_hooks conf_hooks = {
	.vlog = netdrive_log,
	.plugin_logger = plugin_logger,
};

/* ---- reporting and the watchdog ---- */

/*
 * The alarm handler may only write(): the line it prints is formatted
 * ahead, at every phase change, into the buffer not being read.
 */
static char wd_line[2][512];
static volatile sig_atomic_t wd_cur;

static void wd_handler(int sig)
{
	const char *l = wd_line[wd_cur];
	ssize_t rc;

	(void)sig;
	rc = write(STDOUT_FILENO, l, strlen(l));
	(void)rc;
	_exit(3);
}

void conf_phase(struct conf_ctx *c, const char *fmt, ...)
{
	int next = !wd_cur;
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(wd_line[next], sizeof(wd_line[next]),
		 "FAIL %s loop %u rank %d: hung: the loop did not finish within its watchdog (%u s) while %s\n",
		 c->test ? c->test->name : "setup", c->loop, c->rank,
		 c->o->timeout_s, what);
	wd_cur = next;
	if (conf_verbose >= 2)
		fprintf(stderr, "rank %d %.3f phase: %s\n", c->rank, perf_now(), what);
}

void conf_fail(struct conf_ctx *c, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fflush(stderr);
	printf("FAIL %s loop %u rank %d: %s\n",
	       c->test ? c->test->name : "setup", c->loop, c->rank, msg);
	fflush(stdout);
	/* the plugin's threads may be mid-call: no exit handlers */
	_exit(1);
}

int conf_skip(struct conf_ctx *c, const char *fmt, ...)
{
	va_list ap;

	printf("SKIP %s rank %d: ", c->test->name, c->rank);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return CONF_SKIP;
}

void conf_note(struct conf_ctx *c, const char *fmt, ...)
{
	va_list ap;

	if (conf_verbose < 1)
		return;
	fprintf(stderr, "rank %d %s loop %u: ", c->rank,
		c->test ? c->test->name : "setup", c->loop);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void conf_check_peer(struct conf_ctx *c)
{
	if (oob_peer_gone(c->oob))
		conf_fail(c, "the peer (rank %d) exited before the loop ended; its FAIL line says why",
			  !c->rank);
}

void conf_sleep_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

#define OOB_WAIT_S 600	/* the watchdog ends a real hang sooner */

void conf_barrier(struct conf_ctx *c, uint32_t tag)
{
	if (oob_barrier(c->oob, tag, OOB_WAIT_S))
		conf_fail(c, "bootstrap barrier %#x with the peer failed (the peer exited or is out of step)",
			  tag);
}

void conf_send_word(struct conf_ctx *c, uint64_t v)
{
	uint64_t be = htobe64(v);

	if (oob_send_msg(c->oob, PERF_MSG_RESULT, &be, sizeof(be), OOB_WAIT_S))
		conf_fail(c, "bootstrap: cannot reach the peer");
}

uint64_t conf_recv_word(struct conf_ctx *c)
{
	uint64_t be;

	if (oob_recv_msg(c->oob, PERF_MSG_RESULT, &be, sizeof(be), OOB_WAIT_S))
		conf_fail(c, "bootstrap: no word from the peer (it exited or is out of step)");
	return be64toh(be);
}

bool conf_poll_word(struct conf_ctx *c, uint64_t *v)
{
	uint8_t peek[12 + 8];
	ssize_t n = recv(c->oob, peek, sizeof(peek), MSG_PEEK | MSG_DONTWAIT);

	if (n < (ssize_t)sizeof(peek))
		return false;
	*v = conf_recv_word(c);
	return true;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t conf_seed(const struct conf_ctx *c, uint32_t stream)
{
	uint64_t t = c->test ? (uint64_t)(c->test - conf_tests) : 0;

	return mix64(c->o->seed ^ mix64(t << 40 ^ (uint64_t)c->loop << 8 ^
					stream));
}

/* ---- the tests ---- */

static uint32_t late_slack(const struct conf_opts *o)
{
	return o->late_ms / 1000 + 1;
}

static uint32_t dead_slack(const struct conf_opts *o)
{
	return o->dead_ms / 1000 + 1;
}

static uint32_t close_slack(const struct conf_opts *o)
{
	return 2 * (o->dead_ms / 1000 + o->close_ms / 1000 + 1);
}

const struct conf_test conf_tests[] = {
	{ "close-after-send", "the sender closes right after its last isend completes; every byte still arrives",
	  conf_t_close_after_send, NULL },
	{ "close-after-recv", "the receiver closes right after its last receive; the sender's requests still complete without error",
	  conf_t_close_after_recv, NULL },
	{ "close-last-recv", "a new connection each loop, a burst; the receiver closes the moment its last receive completes, while the sender still tests its last sends, which must complete",
	  conf_t_close_last_recv, NULL },
	{ "connect-close", "connect, send nothing or a little, and both close at once: no error, and no WARN through a relay",
	  conf_t_connect_close, NULL },
	{ "close-bidir", "both ranks send and receive and close their send comms as soon as their sends complete, receives still posted",
	  conf_t_close_bidir, NULL },
	{ "multi-accept", "one listen comm serves several connects in a row (back to back, then one more later)",
	  conf_t_multi_accept, NULL },
	{ "accept-first", "accept is polled before the peer starts to connect",
	  conf_t_accept_first, NULL },
	{ "connect-first", "connect is polled before the peer calls accept",
	  conf_t_connect_first, NULL },
	{ "late-accept", "the receiver calls accept only --late-ms after the peer started to connect",
	  conf_t_late_accept, late_slack },
	{ "late-connect", "the sender calls connect only --late-ms after the peer started to poll accept",
	  conf_t_late_connect, late_slack },
	{ "connect-self", "a process connects to its own listen comm and talks to itself",
	  conf_t_connect_self, NULL },
	{ "zero-byte", "zero-byte messages, alone and among others, into empty and larger receives",
	  conf_t_zero_byte, NULL },
	{ "window", "the full window: NCCL_NET_MAX_REQUESTS receives (x maxRecvs sends) posted before any is tested",
	  conf_t_window, NULL },
	{ "null-request", "isends posted before the receiver is ready; a NULL request means try again, nothing lost or doubled",
	  conf_t_null_request, NULL },
	{ "recv-larger", "receives larger than the message: test() reports the size sent",
	  conf_t_recv_larger, NULL },
	{ "grouped", "grouped receives (maxRecvs > 1) matched by tag, sends in either order",
	  conf_t_grouped, NULL },
	{ "flush", "iflush of every completed receive (a NULL request: nothing to flush)",
	  conf_t_flush, NULL },
	{ "close-inflight-send", "the sender closes with sends in flight: bounded close, the receiver's requests end (done or error)",
	  conf_t_close_inflight_send, close_slack },
	{ "close-inflight-recv", "the receiver closes with receives in flight: bounded close, the sender's requests end (done or error)",
	  conf_t_close_inflight_recv, close_slack },
	{ "close-inflight-both", "both close at once with requests in flight: bounded, no crash",
	  conf_t_close_inflight_both, close_slack },
	{ "late-recv", "the receiver posts --late-ms after the sender's data is in flight",
	  conf_t_late_recv, late_slack },
	{ "late-recv-close", "as late-recv, and the sender closes as soon as its sends complete",
	  conf_t_late_recv_close, late_slack },
	{ "late-send", "the sender starts --late-ms after the receives are posted",
	  conf_t_late_send, late_slack },
	{ "killed-sender", "the sending process is killed mid-stream: test() reports the error within --dead-ms, irecv never fails",
	  conf_t_killed_sender, dead_slack },
	{ "killed-receiver", "the receiving process is killed mid-stream: test() reports the error within --dead-ms, isend never fails",
	  conf_t_killed_receiver, dead_slack },
	{ "reload", "finalize, dlclose, dlopen and init again after the last comm, then traffic",
	  conf_t_reload, NULL },
	{ "multi-init", "v11+: two contexts at once (one per communicator), one finalized while the other carries traffic",
	  conf_t_multi_init, NULL },
};
const size_t conf_ntests = sizeof(conf_tests) / sizeof(conf_tests[0]);

static const struct conf_test *find_test(const char *name, size_t len)
{
	for (size_t i = 0; i < conf_ntests; i++)
		if (strlen(conf_tests[i].name) == len &&
		    !strncmp(conf_tests[i].name, name, len))
			return &conf_tests[i];
	return NULL;
}

/* ---- command line ---- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nccl-conform --rank 0|1 --oob HOST:PORT [options]\n"
		"  --rank R          0 listens on the bootstrap address, 1 connects to it\n"
		"  --oob HOST:PORT   bootstrap address (rank 0 binds it; port 0: any, see --port-file)\n"
		"  --port-file F     rank 0 writes the bootstrap port it bound to F\n"
		"  --plugin P        plugin name or path (default %s)\n"
		"  --abi N           use ncclNetPlugin_vN (8..12; default: newest exported)\n"
		"  --dev N           device index (default 0)\n"
		"  --test A,B        run these tests (default: all; see --list)\n"
		"  --loops N         loops of each test (default 10)\n"
		"  --late-ms MS      delay of the late side in late-* tests (default 5000)\n"
		"  --dead-ms MS      bound on the error after a peer dies or closes (default 30000)\n"
		"  --close-ms MS     bound on one close call (default 60000)\n"
		"  --timeout S       watchdog per loop, on top of the above (default 60)\n"
		"  --seed N          pattern seed (default 1)\n"
		"  --list            print the tests and exit\n"
		"  -v                plugin INFO lines and progress notes (-vv: phases)\n"
		"Both ranks must get the same options except --rank and --port-file.\n",
		PERF_DEFAULT_PLUGIN);
}

static uint32_t parse_u32(const char *opt, const char *v, uint32_t min,
			  uint32_t max)
{
	char *end;
	unsigned long x;

	errno = 0;
	x = strtoul(v, &end, 0);
	if (errno || end == v || *end || x < min || x > max) {
		fprintf(stderr, "nccl-conform: %s: expected an integer %u..%u, got '%s'\n",
			opt, min, max, v);
		exit(2);
	}
	return (uint32_t)x;
}

static void parse_oob(struct conf_opts *o, char *arg)
{
	char *colon = strrchr(arg, ':');

	if (!colon || colon == arg) {
		fprintf(stderr, "nccl-conform: --oob: expected HOST:PORT, got '%s'\n",
			arg);
		exit(2);
	}
	*colon = '\0';
	o->oob_port = (int)parse_u32("--oob port", colon + 1, 0, 65535);
	if (arg[0] == '[' && colon[-1] == ']') {
		colon[-1] = '\0';
		arg++;
	}
	o->oob_host = arg;
}

enum { OPT_PORT_FILE = 256, OPT_LATE, OPT_DEAD, OPT_CLOSE, OPT_SEED,
       OPT_VICTIM, OPT_LIST };

static void parse_args(struct conf_opts *o, int argc, char **argv,
		       bool *list)
{
	static const struct option longopts[] = {
		{ "rank", required_argument, NULL, 'r' },
		{ "oob", required_argument, NULL, 'o' },
		{ "port-file", required_argument, NULL, OPT_PORT_FILE },
		{ "plugin", required_argument, NULL, 'p' },
		{ "abi", required_argument, NULL, 'a' },
		{ "dev", required_argument, NULL, 'd' },
		{ "test", required_argument, NULL, 't' },
		{ "loops", required_argument, NULL, 'n' },
		{ "late-ms", required_argument, NULL, OPT_LATE },
		{ "dead-ms", required_argument, NULL, OPT_DEAD },
		{ "close-ms", required_argument, NULL, OPT_CLOSE },
		{ "timeout", required_argument, NULL, 'T' },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "victim", required_argument, NULL, OPT_VICTIM },
		{ "list", no_argument, NULL, OPT_LIST },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'r':
			o->rank = (int)parse_u32("--rank", optarg, 0, 1);
			break;
		case 'o':
			parse_oob(o, optarg);
			break;
		case OPT_PORT_FILE:
			o->port_file = optarg;
			break;
		case 'p':
			o->plugin = optarg;
			break;
		case 'a':
			o->abi = (int)parse_u32("--abi", optarg, 8, 12);
			break;
		case 'd':
			o->dev = (int)parse_u32("--dev", optarg, 0, 1023);
			break;
		case 't':
			o->tests = optarg;
			break;
		case 'n':
			o->loops = parse_u32("--loops", optarg, 1, 1000000);
			break;
		case OPT_LATE:
			o->late_ms = parse_u32("--late-ms", optarg, 0, 3600000);
			break;
		case OPT_DEAD:
			o->dead_ms = parse_u32("--dead-ms", optarg, 1, 3600000);
			break;
		case OPT_CLOSE:
			o->close_ms = parse_u32("--close-ms", optarg, 1, 3600000);
			break;
		case 'T':
			o->timeout_s = parse_u32("--timeout", optarg, 1, 86400);
			break;
		case OPT_SEED:
			o->seed = parse_u32("--seed", optarg, 0, UINT32_MAX);
			break;
		case OPT_VICTIM:
			o->victim = optarg;
			break;
		case OPT_LIST:
			*list = true;
			break;
		case 'v':
			o->verbose++;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nccl-conform: unexpected argument '%s'\n",
			argv[optind]);
		exit(2);
	}
}

/* Picks the tests named by --test, in the suite's order. */
static size_t select_tests(const char *list, const struct conf_test **out)
{
	size_t n = 0;

	if (!list) {
		for (size_t i = 0; i < conf_ntests; i++)
			out[n++] = &conf_tests[i];
		return n;
	}
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		const struct conf_test *t = find_test(p, len);

		if (!t) {
			fprintf(stderr, "nccl-conform: unknown test '%.*s' (see --list)\n",
				(int)len, p);
			exit(2);
		}
		out[n++] = t;
		p += len;
		if (*p)
			p++;
	}
	return n;
}

/* ---- bootstrap ---- */

/* Both ranks must run the same tests the same way. */
static void options_line(const struct conf_opts *o, char *buf, size_t cap)
{
	memset(buf, 0, cap);
	snprintf(buf, cap,
		 "tests=%s loops=%u late=%u dead=%u close=%u timeout=%u seed=%" PRIu64 " abi=%d",
		 o->tests ? o->tests : "all", o->loops, o->late_ms, o->dead_ms,
		 o->close_ms, o->timeout_s, o->seed, o->abi);
}

#define HELLO_LEN 512

static int bootstrap(const struct conf_opts *o)
{
	char mine[HELLO_LEN], theirs[HELLO_LEN];
	int fd, lfd, port;

	if (o->rank == 0) {
		lfd = oob_listen(o->oob_host, o->oob_port, &port);
		if (lfd < 0)
			return -1;
		if (o->port_file) {
			FILE *f = fopen(o->port_file, "w");

			if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f)) {
				fprintf(stderr, "nccl-conform: cannot write %s\n",
					o->port_file);
				return -1;
			}
		}
		fd = oob_accept(lfd, 120);
		close(lfd);
	} else {
		fd = oob_connect(o->oob_host, o->oob_port, 120);
	}
	if (fd < 0)
		return -1;
	options_line(o, mine, sizeof(mine));
	if (oob_send_msg(fd, PERF_MSG_HELLO, mine, sizeof(mine), 60) ||
	    oob_recv_msg(fd, PERF_MSG_HELLO, theirs, sizeof(theirs), 60)) {
		close(fd);
		return -1;
	}
	theirs[HELLO_LEN - 1] = '\0';
	if (strcmp(mine, theirs)) {
		fprintf(stderr, "nccl-conform: the ranks run different options:\n  rank %d: %s\n  rank %d: %s\n",
			o->rank, mine, !o->rank, theirs);
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- main ---- */

static int run_test(struct conf_ctx *c, const struct conf_test *t,
		    uint32_t index)
{
	uint32_t extra = t->extra_s ? t->extra_s(c->o) : 0;
	double t0 = perf_now();
	int rc = 0;

	c->test = t;
	c->nulls = c->flushes = 0;
	c->max_outstanding = 0;
	c->first_error_ms = 0;
	for (c->loop = 0; c->loop < c->o->loops; c->loop++) {
		conf_phase(c, "waiting for the peer to start the loop");
		alarm(c->o->timeout_s + extra);
		conf_barrier(c, index << 20 | (c->loop & 0xfffff));
		conf_phase(c, "running");
		rc = t->run(c);
		conf_phase(c, "waiting for the peer to end the loop");
		conf_barrier(c, index << 20 | 0x80000 | (rc == CONF_SKIP));
		if (rc == CONF_SKIP)
			break;
	}
	alarm(0);
	if (rc == CONF_SKIP)
		return rc;
	printf("PASS %s: %u loops in %.2f s, rank %d (NULL requests %lu, most outstanding %d",
	       t->name, c->o->loops, perf_now() - t0, c->rank, c->nulls,
	       c->max_outstanding);
	if (c->flushes)
		printf(", flushes %lu", c->flushes);
	if (c->first_error_ms > 0)
		printf(", slowest expected error %.0f ms", c->first_error_ms);
	printf(")\n");
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	struct conf_opts o = {
		.rank = -1,
		.plugin = PERF_DEFAULT_PLUGIN,
		.loops = 10,
		.late_ms = 5000,
		.dead_ms = 30000,
		/* a close may wait for the peer by design (a verbs close
		 * up to 10 s for its notice): this only ends a hang */
		.close_ms = 60000,
		.timeout_s = 60,
		.seed = 1,
	};
	const struct conf_test *sel[64];
	struct conf_ctx c = { .o = &o };
	struct sigaction sa = { .sa_handler = wd_handler };
	size_t n, skipped = 0;
	bool list = false;

	setvbuf(stdout, NULL, _IOLBF, 0);
	perf_hooks_set(&conf_hooks);
	parse_args(&o, argc, argv, &list);
	conf_verbose = o.verbose;
	if (list) {
		for (size_t i = 0; i < conf_ntests; i++)
			printf("%-20s %s\n", conf_tests[i].name,
			       conf_tests[i].what);
		return 0;
	}
	if (o.victim) {
		conf_rank = 2;
		return conf_victim_main(&o);
	}
	if (o.rank < 0 || !o.oob_host) {
		usage(stderr);
		return 2;
	}
	conf_rank = c.rank = o.rank;
	n = select_tests(o.tests, sel);
	sigaction(SIGALRM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	conf_phase(&c, "meeting the peer on the bootstrap socket");
	alarm(180);
	c.oob = bootstrap(&o);
	if (c.oob < 0)
		return 2;
	conf_net_up(&c);
	alarm(0);
	for (size_t i = 0; i < n; i++) {
		if (run_test(&c, sel[i], (uint32_t)(sel[i] - conf_tests)) ==
		    CONF_SKIP) {
			skipped++;
		}
	}
	c.test = NULL;
	conf_phase(&c, "finalizing the plugin");
	alarm(o.timeout_s);
	conf_net_down(&c);
	close(c.oob);
	return skipped == n ? CONF_SKIP : 0;
}
