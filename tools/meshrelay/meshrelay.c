/* SPDX-License-Identifier: MIT */
/*
 * meshrelay: the relay module without NCCL, for hosts that run no rank
 * (gateways between datacenters).  It runs the same init as the plugin
 * (config, modules, rails, every module's start, where the relay module
 * begins to serve on a thread of its own), then only waits for signals:
 * SIGUSR1 prints the relay's counters, SIGTERM and SIGINT stop it.  With
 * metrics_listen set, a thread of the core serves the counters over
 * HTTP for Prometheus (core/metrics/metrics_http.c).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core_log.h"
#include "metrics.h"
#include "net.h"
#include "layer.h"
#include "state.h"

/* Exit statuses besides 0 and 1 (the help text lists them). */
#define EXIT_NO_RELAY 2
#define EXIT_USAGE 64

/* A report is one line per relayed pair; grow up to this before cutting. */
#define REPORT_START (64 * 1024)
#define REPORT_MAX (16 * 1024 * 1024)

struct meshrelay_opts {
	const char *config;
	long every_s;		/* 0: only on request */
	bool once;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: meshrelay [--config FILE] [--report-every SECONDS] "
		"[--once-report]\n"
		"Runs the relay module of nccl-mesh on a host that runs no "
		"rank, with the\n"
		"config, modules and rails the plugin would use there.\n"
		"\n"
		"  -c, --config FILE         the config (default: as the "
		"plugin finds it,\n"
		"                            NCCL_MESH_CONF or "
		"/etc/nccl-mesh.conf)\n"
		"  -r, --report-every SECS   print the counters every SECS "
		"seconds\n"
		"  -1, --once-report         start, print the counters once, "
		"stop\n"
		"  -h, --help                this text\n"
		"\n"
		"SIGUSR1 prints the counters to stdout; SIGTERM or SIGINT "
		"prints them once\n"
		"more and stops.  Logs go to stderr (NCCL_DEBUG=INFO for "
		"more).\n"
		"With metrics_listen set in the config, serves the counters "
		"for Prometheus\n"
		"at http://ADDR:PORT/metrics.\n"
		"Exit status: 0 stopped by a signal, 1 init failed (reasons "
		"logged; also\n"
		"when metrics_listen cannot be served), 2 the config does not "
		"enable the\n"
		"relay module, 64 bad usage.\n");
}

static int parse_seconds(const char *text, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < 1 || v > 366L * 86400)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_opts(int argc, char **argv, struct meshrelay_opts *o)
{
	static const struct option longs[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "report-every", required_argument, NULL, 'r' },
		{ "once-report", no_argument, NULL, '1' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "c:r:1h", longs, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'r':
			if (parse_seconds(optarg, &o->every_s)) {
				fprintf(stderr, "meshrelay: --report-every "
					"wants whole seconds (1 or more), not "
					"'%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case '1':
			o->once = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "meshrelay: unexpected argument '%s'\n",
			argv[optind]);
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* The module named "relay" when the config enables it but it failed. */
static const struct core_module *failed_relay(const struct core_state *st)
{
	for (int i = 0; i < st->nmodules; i++)
		if (!strcmp(st->modules[i].name, "relay"))
			return &st->modules[i];
	return NULL;
}

/* Prints the counters under a timestamp line; why says what asked. */
static void print_report(const struct core_module *m, const char *why)
{
	size_t cap = REPORT_START;
	char stamp[64], *buf = NULL;
	struct tm tm;
	time_t now = time(NULL);
	int rc;

	for (;;) {
		char *grown = realloc(buf, cap);

		if (!grown) {
			fprintf(stderr, "meshrelay: no memory for a report of "
				"%zu bytes\n", cap);
			free(buf);
			return;
		}
		buf = grown;
		buf[0] = '\0';
		rc = m->desc->report(m->mctx, buf, cap);
		buf[cap - 1] = '\0';
		/* A full buffer may have cut the text: ask again with more. */
		if (rc < 0 || strlen(buf) < cap - 1 || cap >= REPORT_MAX)
			break;
		cap *= 2;
	}
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S %z", &tm);
	printf("--- meshrelay report %s (%s) ---\n", stamp, why);
	if (rc < 0) {
		printf("(%s gave no report: %s)\n", m->name, strerror(-rc));
	} else {
		size_t len = strlen(buf);

		fputs(buf, stdout);
		if (len && buf[len - 1] != '\n')
			putchar('\n');
	}
	fflush(stdout);
	free(buf);
}

/*
 * Waits for the next signal of set, or for the next periodic report.
 * Returns the signal, or 0 when the period ran out.
 */
static int next_event(const sigset_t *set, long every_s,
		      struct timespec *due)
{
	for (;;) {
		struct timespec now, left;
		int sig;

		if (!every_s) {
			sig = sigwaitinfo(set, NULL);
		} else {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec > due->tv_sec ||
			    (now.tv_sec == due->tv_sec &&
			     now.tv_nsec >= due->tv_nsec)) {
				due->tv_sec += every_s;
				return 0;
			}
			left.tv_sec = due->tv_sec - now.tv_sec;
			left.tv_nsec = due->tv_nsec - now.tv_nsec;
			if (left.tv_nsec < 0) {
				left.tv_sec--;
				left.tv_nsec += 1000000000L;
			}
			sig = sigtimedwait(set, NULL, &left);
		}
		if (sig > 0)
			return sig;
		/* EAGAIN: the period ran out (checked above); EINTR: a
		 * signal outside the set, say SIGSTOP/SIGCONT. */
	}
}

static void serve(const struct core_module *m, const sigset_t *set,
		  long every_s)
{
	struct timespec due;

	clock_gettime(CLOCK_MONOTONIC, &due);
	due.tv_sec += every_s;
	for (;;) {
		int sig = next_event(set, every_s, &due);

		if (sig == SIGUSR1) {
			print_report(m, "on request");
		} else if (sig == 0) {
			print_report(m, "periodic");
		} else {
			CORE_INFO("meshrelay: %s, stopping", strsignal(sig));
			print_report(m, "at exit");
			return;
		}
	}
}

int main(int argc, char **argv)
{
	struct meshrelay_opts o = { 0 };
	struct core_metrics_http *http = NULL;
	const struct core_state *st;
	const struct core_module *m;
	sigset_t set;
	void *ctx;
	int err, status = 0;

	if (parse_opts(argc, argv, &o))
		return EXIT_USAGE;
	if (o.config && setenv("NCCL_MESH_CONF", o.config, 1)) {
		perror("meshrelay: setenv");
		return 1;
	}
	/* a standalone relay that cannot take its port is a failure (so
	 * that systemd retries), not a process that relays nothing */
	setenv("NCCL_MESH_RELAY_SERVE_REQUIRED", "true", 0);
	setenv("NCCL_MESH_RELAY_SERVE", "true", 1);
	/* Blocked before init, so that every thread the core and the
	 * modules start inherits the mask and only sigwait sees them. */
	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	/* A peer that goes away must not kill the relay for all others. */
	signal(SIGPIPE, SIG_IGN);

	err = core_net_init(&ctx, 0, NULL);
	if (err) {
		/* -ENOTSUP: the config is not usable (mesh.c). */
		fprintf(stderr, "meshrelay: init failed: %s (reasons "
			"logged above)\n", err == -ENOTSUP ?
			"the configuration is not usable" : strerror(-err));
		return 1;
	}
	st = core_current_state();
	m = core_layer_module(st);
	if (!m) {
		const struct core_module *r = failed_relay(st);

		/* The core logged why the module failed. */
		if (r)
			fprintf(stderr, "meshrelay: the relay module failed "
				"(reason logged above)\n");
		else
			fprintf(stderr, "meshrelay: the relay module is not "
				"enabled in %s (add \"relay\" to modules)\n",
				core_config_path(st->cfg));
		status = r ? 1 : EXIT_NO_RELAY;
	} else if (o.once) {
		print_report(m, "once");
	} else if (core_metrics_http_start(st, &http)) {
		/* logged; like a relay port it cannot take, a failure, so
		 * that systemd retries */
		fprintf(stderr, "meshrelay: cannot serve metrics_listen "
			"(reason logged above)\n");
		status = 1;
	} else {
		CORE_INFO("meshrelay: running with %s (pid %ld); SIGUSR1 "
			  "prints the counters", core_config_path(st->cfg),
			  (long)getpid());
		serve(m, &set, o.every_s);
		core_metrics_http_stop(http);
	}
	core_net_finalize(ctx);
	return status;
}
