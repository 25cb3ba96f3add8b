/* SPDX-License-Identifier: MIT */
/*
 * meshperf: command line, logging, the bootstrap handshake and the
 * --reload loop.  One cycle (init .. dlclose) lives in meshperf_run.c,
 * its device and connection setup in meshperf_setup.c.
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "meshperf.h"
#include "size.h"

int perf_verbose;
const char *perf_role = "meshperf";

/* ---- logging ---- */

static void log_line(const char *level, const char *file, int line,
		     const char *fmt, va_list ap)
{
	char msg[1024];
	size_t len;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	len = strlen(msg);
	while (len && msg[len - 1] == '\n')
		msg[--len] = '\0';
	/* one fprintf per line: plugin threads log concurrently */
	if (file && perf_verbose >= 2)
		fprintf(stderr, "%s %s %s:%d %s\n", perf_role, level, file,
			line, msg);
	else
		fprintf(stderr, "%s %s %s\n", perf_role, level, msg);
}

/*
 * Outages the plugin lived through: each module says one ends with one
 * INFO line "... out for N ms (...), resumed" (docs/config.md, the
 * outage budget).  Counted whatever the verbosity.
 */
static unsigned long outages_resumed;

static void count_outage(ncclDebugLogLevel level, const char *fmt,
			 va_list ap)
{
	char msg[512];

	if (level != NCCL_LOG_INFO)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (strstr(msg, "), resumed"))
		outages_resumed++;
}

/* The logger handed to the plugin, in NCCL's signature. */
static void plugin_logger(ncclDebugLogLevel level, unsigned long flags,
			  const char *file, int line, const char *fmt, ...)
{
	const char *name;
	va_list ap;

	(void)flags;
	va_start(ap, fmt);
	count_outage(level, fmt, ap);
	va_end(ap);
	switch (level) {
	case NCCL_LOG_WARN:
		name = "WARN";
		break;
	case NCCL_LOG_ABORT:
		name = "ABORT";
		break;
	case NCCL_LOG_VERSION:
	case NCCL_LOG_INFO:
		if (perf_verbose < 1)
			return;
		name = level == NCCL_LOG_INFO ? "INFO" : "VERSION";
		break;
	case NCCL_LOG_TRACE:
		if (perf_verbose < 2)
			return;
		name = "TRACE";
		break;
	default:
		return;
	}
	va_start(ap, fmt);
	log_line(name, file, line, fmt, ap);
	va_end(ap);
}

/* perf_err, perf_warn and perf_info, netdrive's own and ours */
static void netdrive_log(enum perf_log_level level, const char *fmt,
			 va_list ap)
{
	if (level == PERF_LOG_INFO && perf_verbose < 1)
		return;
	log_line(level == PERF_LOG_ERROR ? "ERROR" :
		 level == PERF_LOG_WARN ? "WARN" : "INFO", NULL, 0, fmt, ap);
}

/* ---- watchdog: a plugin call that blocks must not hang us forever ---- */

static const char *volatile watchdog_phase = "start";

static void watchdog_fire(int sig)
{
	static const char pre[] = "meshperf: watchdog: stuck in ";
	const char *phase = watchdog_phase;
	ssize_t rc;

	(void)sig;
	rc = write(STDERR_FILENO, pre, sizeof(pre) - 1);
	rc = write(STDERR_FILENO, phase, strlen(phase));
	rc = write(STDERR_FILENO, "\n", 1);
	(void)rc;
	_exit(3);
}

static unsigned watchdog_seconds;
static double watchdog_armed_at;

void perf_watchdog(const char *phase, unsigned seconds)
{
	watchdog_phase = phase;
	watchdog_seconds = seconds;
	watchdog_armed_at = perf_now();
	alarm(seconds);
}

/* The benchmark's progress pushes the deadline out; once a second is
 * often enough. */
static void watchdog_kick(void)
{
	double now = perf_now();

	if (watchdog_seconds && now - watchdog_armed_at > 1.0) {
		watchdog_armed_at = now;
		alarm(watchdog_seconds);
	}
}

/* The clock stays netdrive's. */
static const struct perf_hooks meshperf_hooks = {
	.vlog = netdrive_log,
	.plugin_logger = plugin_logger,
	.watchdog_kick = watchdog_kick,
};

/* ---- command line ---- */

enum {
	OPT_PORT_FILE = 256,
	OPT_SIZES,
	OPT_MIN,
	OPT_MAX,
	OPT_BUDGET,
	OPT_MEM,
	OPT_LAT_MAX,
	OPT_NO_LATENCY,
	OPT_BIDIR,
	OPT_NO_VERIFY,
	OPT_RELOAD,
	OPT_TC,
	OPT_PROFILER,
	OPT_JSON,
	OPT_FAULT,
	OPT_CHANNELS,
	OPT_RECV_SIZE,
	OPT_RECV_DELAY,
	OPT_CLOSE_EARLY,
};

static const struct option long_opts[] = {
	{ "server", no_argument, NULL, 's' },
	{ "client", required_argument, NULL, 'c' },
	{ "port", required_argument, NULL, 'p' },
	{ "bind", required_argument, NULL, 'b' },
	{ "port-file", required_argument, NULL, OPT_PORT_FILE },
	{ "plugin", required_argument, NULL, 'P' },
	{ "abi", required_argument, NULL, 'a' },
	{ "dev", required_argument, NULL, 'd' },
	{ "window", required_argument, NULL, 'w' },
	{ "sizes", required_argument, NULL, OPT_SIZES },
	{ "min", required_argument, NULL, OPT_MIN },
	{ "max", required_argument, NULL, OPT_MAX },
	{ "iters", required_argument, NULL, 'n' },
	{ "budget", required_argument, NULL, OPT_BUDGET },
	{ "mem", required_argument, NULL, OPT_MEM },
	{ "lat-max", required_argument, NULL, OPT_LAT_MAX },
	{ "no-latency", no_argument, NULL, OPT_NO_LATENCY },
	{ "bidir", no_argument, NULL, OPT_BIDIR },
	{ "no-verify", no_argument, NULL, OPT_NO_VERIFY },
	{ "channels", required_argument, NULL, OPT_CHANNELS },
	{ "recv-size", required_argument, NULL, OPT_RECV_SIZE },
	{ "recv-delay", required_argument, NULL, OPT_RECV_DELAY },
	{ "close-early", no_argument, NULL, OPT_CLOSE_EARLY },
	{ "timeout", required_argument, NULL, 't' },
	{ "reload", required_argument, NULL, OPT_RELOAD },
	{ "traffic-class", required_argument, NULL, OPT_TC },
	{ "profiler", required_argument, NULL, OPT_PROFILER },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "fault", required_argument, NULL, OPT_FAULT },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void usage(FILE *out)
{
	fprintf(out,
"usage: meshperf --server [options]\n"
"       meshperf --client HOST [options]\n"
"Drives an NCCL net plugin between two processes as NCCL does and\n"
"measures bandwidth, latency and the round trip, verifying every\n"
"received byte.\n"
"\n"
"  -s, --server            wait for a client on the bootstrap port\n"
"  -c, --client HOST       connect to the server's bootstrap port on HOST\n"
"  -p, --port N            bootstrap TCP port (default %d; server: 0 = any)\n"
"  -b, --bind ADDR         server: bootstrap bind address (default 127.0.0.1)\n"
"      --port-file FILE    server: write the bootstrap port to FILE\n"
"  -P, --plugin LIB        plugin path or name (default %s)\n"
"  -a, --abi N             use ncclNetPlugin_vN, N in 8..12 (default newest)\n"
"  -d, --dev N             plugin device (default 0)\n"
"      --traffic-class N   trafficClass in the comm config (default -1)\n"
"      --profiler MODE     profiler callback at init: nccl (NCCL's without a\n"
"                          profiler plugin, the default), none, or record (a\n"
"                          handle for every event, as with a profiler plugin)\n"
"Run parameters (the client's are used by both sides):\n"
"  -w, --window N          outstanding requests per comm (default %d)\n"
"      --sizes LIST        message sizes, e.g. 0,8,64K,1M,1G\n"
"      --min SIZE          sweep from SIZE (power of two, or 0) ...\n"
"      --max SIZE          ... doubling up to SIZE (power of two)\n"
"                          default sweep: 0, 8 B .. 128 MiB by 4, 256 MiB\n"
"  -n, --iters N           most iterations per size (default 1000)\n"
"      --budget SIZE       bytes per size and direction, bounds iterations\n"
"                          of large sizes (default 2G)\n"
"      --mem SIZE          buffer bytes per direction, bounds the window of\n"
"                          large sizes (default 512M)\n"
"      --lat-max SIZE      ping-pong latency up to SIZE (default 64K)\n"
"      --no-latency        no ping-pong (and no reverse connection\n"
"                          unless --bidir: the round trip printed is then\n"
"                          the kernel's of the bootstrap connection)\n"
"      --bidir             traffic in both directions at once\n"
"      --no-verify         neither fill messages nor check their bytes (sizes\n"
"                          still are): where one thread filling and checking\n"
"                          every byte is slower than the transport\n"
"      --channels N        connections per direction, 1..%d (default 1);\n"
"                          iterations, budget and memory are split across\n"
"                          them, latency runs on channel 0\n"
"      --recv-size SIZE    receives post at least SIZE bytes, as NCCL posts\n"
"                          whole step buffers for smaller messages (default 0)\n"
"  -t, --timeout S         give up after S seconds without progress (60)\n"
"Per process (stragglers and closing):\n"
"      --recv-delay S      post the bandwidth receives of every size S\n"
"                          seconds late, as a rank that starts late\n"
"      --close-early       close the send comms as soon as the last sends\n"
"                          of the sweep test done, before the peer is done\n"
"      --reload N          run init .. finalize, dlclose N times (default 1)\n"
"Output:\n"
"      --json              JSON lines instead of the table\n"
"  -v, --verbose           plugin INFO logs; twice: TRACE and file:line\n"
"Fault injection (tests of the plugin's error paths; the run must fail):\n"
"      --fault oversize    this process's isends are %d bytes longer than\n"
"                          the receives the peer posted\n"
"      --fault oversize-small  the same by %d bytes\n"
"      --fault dereg-recv  this process deregisters its receive buffer\n"
"                          once its first receives are posted\n"
"Exit status 0 only if every transfer completed and verified.\n",
		PERF_DEFAULT_PORT, PERF_DEFAULT_PLUGIN, NCCL_NET_MAX_REQUESTS,
		PERF_MAX_CHANNELS, PERF_FAULT_OVERSIZE_EXTRA,
		PERF_FAULT_OVERSIZE_SMALL_EXTRA);
}

static int parse_int(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_size_list(const char *list, struct perf_params *p)
{
	char *copy = strdup(list), *tok, *save = NULL;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	p->nsizes = 0;
	for (tok = strtok_r(copy, ",", &save); tok && !rc;
	     tok = strtok_r(NULL, ",", &save)) {
		if (p->nsizes == PERF_MAX_SIZES)
			rc = -E2BIG;
		else
			rc = util_size_parse(tok, &p->sizes[p->nsizes++]);
	}
	free(copy);
	if (!rc && !p->nsizes)
		rc = -EINVAL;
	return rc;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static int sweep_sizes(struct perf_params *p, uint64_t min, uint64_t max)
{
	uint64_t s;

	if ((min && !is_pow2(min)) || !is_pow2(max) || min > max) {
		fprintf(stderr,
			"meshperf: --min must be 0 or a power of two, --max a power of two not below it\n");
		return -EINVAL;
	}
	p->nsizes = 0;
	if (!min) {
		p->sizes[p->nsizes++] = 0;
		min = 1;
	}
	for (s = min; s <= max; s *= 2) {
		if (p->nsizes == PERF_MAX_SIZES)
			return -E2BIG;
		p->sizes[p->nsizes++] = s;
	}
	return 0;
}

static void default_sizes(struct perf_params *p)
{
	uint64_t s;

	p->nsizes = 0;
	p->sizes[p->nsizes++] = 0;
	for (s = 8; s <= (128ULL << 20); s *= 4)
		p->sizes[p->nsizes++] = s;
	p->sizes[p->nsizes++] = 256ULL << 20;
}

static void default_opts(struct perf_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->bind = "127.0.0.1";
	o->port = PERF_DEFAULT_PORT;
	o->plugin = PERF_DEFAULT_PLUGIN;
	o->traffic_class = -1;
	o->params.window = NCCL_NET_MAX_REQUESTS;
	o->params.iters = 1000;
	o->params.budget = 2ULL << 30;
	o->params.mem = 512ULL << 20;
	o->params.lat_max = 64 << 10;
	o->params.reload = 1;
	o->params.timeout = 60;
	o->params.channels = 1;
	default_sizes(&o->params);
}

static int bad_arg(const char *opt, const char *val)
{
	fprintf(stderr, "meshperf: invalid value for --%s: '%s'\n", opt, val);
	return -EINVAL;
}

static const char *opt_name(int c)
{
	for (const struct option *lo = long_opts; lo->name; lo++)
		if (lo->val == c)
			return lo->name;
	return "?";
}

static int parse_fault(const char *s, enum perf_fault *out)
{
	if (!strcmp(s, "oversize"))
		*out = PERF_FAULT_OVERSIZE;
	else if (!strcmp(s, "oversize-small"))
		*out = PERF_FAULT_OVERSIZE_SMALL;
	else if (!strcmp(s, "dereg-recv"))
		*out = PERF_FAULT_DEREG_RECV;
	else
		return -EINVAL;
	return 0;
}

/* Said once at the start, so a log of the failed run shows it was meant. */
static void announce_fault(enum perf_fault fault)
{
	switch (fault) {
	case PERF_FAULT_NONE:
		return;
	case PERF_FAULT_OVERSIZE:
	case PERF_FAULT_OVERSIZE_SMALL:
		perf_warn("fault injection: every isend is %llu bytes longer than the receive the peer posted; the run must fail",
			  (unsigned long long)perf_fault_extra(fault));
		return;
	case PERF_FAULT_DEREG_RECV:
		perf_warn("fault injection: the receive buffer is deregistered once the first receives are posted; a plugin that writes through the registration (RDMA) must fail the run");
		return;
	}
}

static int parse_opt(struct perf_opts *o, int c, const char *arg,
		     uint64_t *min, uint64_t *max)
{
	struct perf_params *p = &o->params;
	uint64_t v;
	long l;

	switch (c) {
	case 's':
		o->server = true;
		return 0;
	case 'c':
		o->peer = arg;
		return 0;
	case 'b':
		o->bind = arg;
		return 0;
	case OPT_PORT_FILE:
		o->port_file = arg;
		return 0;
	case 'P':
		o->plugin = arg;
		return 0;
	case OPT_BIDIR:
		p->bidir = 1;
		return 0;
	case OPT_NO_VERIFY:
		p->unverified = 1;
		return 0;
	case OPT_NO_LATENCY:
		p->lat_max = -1;
		return 0;
	case OPT_JSON:
		o->json = true;
		return 0;
	case OPT_FAULT:
		return parse_fault(arg, &o->fault) ? bad_arg("fault", arg) : 0;
	case OPT_CLOSE_EARLY:
		o->close_early = true;
		return 0;
	case 'v':
		o->verbose++;
		return 0;
	case OPT_SIZES:
		o->sizes_given = true;
		return parse_size_list(arg, p) ? bad_arg("sizes", arg) : 0;
	case OPT_MIN:
	case OPT_MAX:
	case OPT_BUDGET:
	case OPT_MEM:
	case OPT_LAT_MAX:
	case OPT_RECV_SIZE:
		if (util_size_parse(arg, &v) || (c == OPT_MEM && !v) ||
		    (c == OPT_LAT_MAX && v > INT64_MAX) ||
		    (c == OPT_RECV_SIZE && v > PERF_MAX_RECV_SIZE))
			return bad_arg(opt_name(c), arg);
		if (c == OPT_MIN)
			*min = v;
		else if (c == OPT_MAX)
			*max = v;
		else if (c == OPT_BUDGET)
			p->budget = v;
		else if (c == OPT_MEM)
			p->mem = v;
		else if (c == OPT_RECV_SIZE)
			p->recv_size = v;
		else
			p->lat_max = (int64_t)v;
		return 0;
	}
	/* the integer options */
	switch (c) {
	case 'p':
		if (parse_int(arg, 0, 65535, &l))
			return bad_arg("port", arg);
		o->port = (int)l;
		return 0;
	case 'a':
		if (parse_int(arg, 8, 12, &l))
			return bad_arg("abi", arg);
		o->abi = (int)l;
		return 0;
	case 'd':
		if (parse_int(arg, 0, INT_MAX, &l))
			return bad_arg("dev", arg);
		o->dev = (int)l;
		return 0;
	case OPT_PROFILER:
		if (!strcmp(arg, "nccl"))
			o->prof = PERF_PROF_NCCL;
		else if (!strcmp(arg, "none"))
			o->prof = PERF_PROF_NONE;
		else if (!strcmp(arg, "record"))
			o->prof = PERF_PROF_RECORD;
		else
			return bad_arg("profiler", arg);
		return 0;
	case OPT_TC:
		if (parse_int(arg, -1, INT_MAX, &l))
			return bad_arg("traffic-class", arg);
		o->traffic_class = (int)l;
		return 0;
	case 'w':
		if (parse_int(arg, 1, NCCL_NET_MAX_REQUESTS, &l))
			return bad_arg("window", arg);
		p->window = (uint32_t)l;
		return 0;
	case 'n':
		if (parse_int(arg, 1, 100000000, &l))
			return bad_arg("iters", arg);
		p->iters = (uint32_t)l;
		return 0;
	case 't':
		if (parse_int(arg, 1, 86400, &l))
			return bad_arg("timeout", arg);
		p->timeout = (uint32_t)l;
		return 0;
	case OPT_RELOAD:
		if (parse_int(arg, 1, 100000, &l))
			return bad_arg("reload", arg);
		p->reload = (uint32_t)l;
		return 0;
	case OPT_RECV_DELAY:
		if (parse_int(arg, 0, 86400, &l))
			return bad_arg("recv-delay", arg);
		o->recv_delay = (uint32_t)l;
		return 0;
	case OPT_CHANNELS:
		if (parse_int(arg, 1, PERF_MAX_CHANNELS, &l))
			return bad_arg("channels", arg);
		p->channels = (uint32_t)l;
		return 0;
	}
	usage(stderr);
	return -EINVAL;
}

static int parse_args(struct perf_opts *o, int argc, char **argv)
{
	uint64_t min = UINT64_MAX, max = UINT64_MAX;
	int c, rc;

	default_opts(o);
	while ((c = getopt_long(argc, argv, "sc:p:b:P:a:d:w:n:t:vh", long_opts,
				NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			exit(0);
		}
		rc = parse_opt(o, c, optarg, &min, &max);
		if (rc)
			return rc;
	}
	if (optind < argc) {
		fprintf(stderr, "meshperf: unexpected argument '%s'\n",
			argv[optind]);
		return -EINVAL;
	}
	if (o->server == !!o->peer) {
		fprintf(stderr, "meshperf: give exactly one of --server and --client HOST\n");
		return -EINVAL;
	}
	if (!o->server && !o->port) {
		fprintf(stderr, "meshperf: the client needs a --port other than 0\n");
		return -EINVAL;
	}
	if ((min != UINT64_MAX || max != UINT64_MAX) && o->sizes_given) {
		fprintf(stderr, "meshperf: give either --sizes or --min/--max\n");
		return -EINVAL;
	}
	if (min != UINT64_MAX || max != UINT64_MAX)
		return sweep_sizes(&o->params,
				   min == UINT64_MAX ? 0 : min,
				   max == UINT64_MAX ? 256ULL << 20 : max);
	return 0;
}

/* ---- bootstrap handshake ---- */

static int write_port_file(const char *path, int port)
{
	char tmp[PATH_MAX];
	FILE *f;

	/* rename makes the port appear all at once to a polling script */
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) ||
	    rename(tmp, path)) {
		perf_err("cannot write port file %s: %s", path,
			 strerror(errno));
		return -errno;
	}
	return 0;
}

static int server_bootstrap(struct perf_opts *o)
{
	uint8_t wire[PERF_PARAMS_WIRE_MAX];
	uint32_t status;
	int lfd, fd, port, rc;

	lfd = oob_listen(o->bind, o->port, &port);
	if (lfd < 0)
		return lfd;
	perf_info("bootstrap: listening on %s port %d", o->bind, port);
	if (o->port_file) {
		rc = write_port_file(o->port_file, port);
		if (rc) {
			close(lfd);
			return rc;
		}
	}
	fd = oob_accept(lfd, (int)o->params.timeout);
	close(lfd);
	if (fd < 0)
		return fd;
	rc = oob_recv_msg(fd, PERF_MSG_HELLO, wire, sizeof(wire),
			  (int)o->params.timeout);
	if (rc)
		goto err_close;
	rc = perf_params_decode(&o->params, wire, sizeof(wire));
	status = htobe32(rc ? 1 : 0);
	if (rc)
		perf_err("bootstrap: the client runs another meshperf protocol or sent bad parameters");
	if (oob_send_msg(fd, PERF_MSG_HELLO_ACK, &status, sizeof(status),
			 (int)o->params.timeout) && !rc)
		rc = -EIO;
	if (rc)
		goto err_close;
	return fd;

err_close:
	close(fd);
	return rc;
}

static int client_bootstrap(struct perf_opts *o)
{
	uint8_t wire[PERF_PARAMS_WIRE_MAX];
	struct timespec ts;
	uint32_t status;
	size_t len;
	int fd, rc;

	clock_gettime(CLOCK_REALTIME, &ts);
	o->params.comm_id = (uint64_t)ts.tv_nsec << 20 ^
			    (uint64_t)ts.tv_sec << 8 ^ (uint64_t)getpid();
	fd = oob_connect(o->peer, o->port, (int)o->params.timeout);
	if (fd < 0)
		return fd;
	len = perf_params_encode(&o->params, wire);
	rc = oob_send_msg(fd, PERF_MSG_HELLO, wire, len,
			  (int)o->params.timeout);
	if (!rc)
		rc = oob_recv_msg(fd, PERF_MSG_HELLO_ACK, &status,
				  sizeof(status), (int)o->params.timeout);
	if (!rc && status) {
		perf_err("bootstrap: the server refused our parameters");
		rc = -EPROTO;
	}
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

const char *perf_rtt_text(double s, char *buf, size_t cap)
{
	if (s < 1e-3)
		snprintf(buf, cap, "%.1f us", s * 1e6);
	else
		snprintf(buf, cap, "%.2f ms", s * 1e3);
	return buf;
}

int main(int argc, char **argv)
{
	struct perf_opts o;
	char rtt[64] = "", t[32];
	uint32_t cycle;
	int fd, rc = 0;

	perf_hooks_set(&meshperf_hooks);
	if (parse_args(&o, argc, argv))
		return 2;
	perf_verbose = o.verbose;
	perf_role = o.server ? "meshperf[server]" : "meshperf[client]";
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, watchdog_fire);
	announce_fault(o.fault);

	fd = o.server ? server_bootstrap(&o) : client_bootstrap(&o);
	if (fd < 0)
		return 1;
	for (cycle = 0; cycle < o.params.reload && !rc; cycle++)
		rc = perf_run_cycle(&o, fd, cycle);
	alarm(0);
	close(fd);
	if (o.json) {
		printf("{\"event\":\"summary\",\"role\":\"%s\",\"cycles\":%u,\"status\":\"%s\","
		       "\"threads_max\":%ld,\"fds_max\":%ld,\"peak_rss_kib\":%ld,"
		       "\"outages_resumed\":%lu,\"rtt_us\":",
		       o.server ? "server" : "client", cycle,
		       rc ? "fail" : "ok", perf_proc_max.threads,
		       perf_proc_max.fds, perf_proc_max.peak_rss_kib,
		       outages_resumed);
		if (perf_rtt.through)
			printf("%.3f,\"rtt_through\":\"%s\"}\n",
			       perf_rtt.s * 1e6, perf_rtt.through);
		else
			printf("null,\"rtt_through\":null}\n");
		return rc ? 1 : 0;
	}
	if (perf_rtt.through)
		snprintf(rtt, sizeof(rtt), "; rtt %s (%s)",
			 perf_rtt_text(perf_rtt.s, t, sizeof(t)),
			 strcmp(perf_rtt.through, "plugin") ?
			 "bootstrap connection" : "plugin");
	printf("# %s: %s after %u cycle(s); at most %ld threads and %ld descriptors, peak RSS %ld KiB; %lu outages resumed%s\n",
	       perf_role, rc ? "FAILED" :
	       o.params.unverified ? "all sizes right, bytes not verified" :
	       "all checks passed", cycle,
	       perf_proc_max.threads, perf_proc_max.fds,
	       perf_proc_max.peak_rss_kib, outages_resumed, rtt);
	return rc ? 1 : 0;
}
