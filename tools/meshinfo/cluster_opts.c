/* SPDX-License-Identifier: MIT */
/* meshinfo --cluster: its command line. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "size.h"

static void usage(FILE *out)
{
	fprintf(out,
"Usage: meshinfo --cluster [--rendezvous HOST:PORT --rank R --size N]\n"
"                [--plugin LIB] [--json FILE|-] [--dot FILE] [--svg FILE]\n"
"                [--png FILE] [--burst-ms MS] [--burst-bytes SIZE]\n"
"                [--lat-iters N] [--timeout S] [--config FILE] [-v]\n"
"\n"
"One process per host connects every pair of hosts through the plugin,\n"
"on every rail, and rank 0 reports each pair's path, bandwidth, latency,\n"
"round trip and bandwidth-delay product, what looks wrong (a path the\n"
"configured window cannot fill among it), and the NCCL environment for\n"
"the job.\n"
"First every host tries a TCP connect to every other host's address on\n"
"the interface NCCL's own bootstrap takes (NCCL_SOCKET_IFNAME, else\n"
"NCCL's default order): where one fails, NCCL's init would hang.\n"
"Without --rendezvous, the launcher's variables say where rank 0 is:\n"
"MASTER_ADDR/MASTER_PORT with RANK/WORLD_SIZE (torchrun), SLURM_PROCID/\n"
"SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/PMI_SIZE.\n"
"\n"
"Exit status: 0 every pair connected, 1 a pair did not, 2 bad usage or\n"
"the rendezvous failed, 3 NCCL's bootstrap would not connect a pair.\n");
}

/* Bytes, at least 1 and at most 1 TiB. */
static int parse_size(const char *s, uint64_t *out)
{
	uint64_t v;

	if (util_size_parse(s, &v) || !v || v > (1ULL << 40))
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static int parse_rdv(const char *s, struct cl_opts *o)
{
	static char host[256];
	const char *colon = strrchr(s, ':');
	unsigned port;

	if (!colon || colon == s || parse_uint(colon + 1, 1, 65535, &port))
		return -EINVAL;
	snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
	/* "[::1]:29500" */
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	o->rdv_host = host;
	o->rdv_port = (int)port;
	return 0;
}

static int parse_opt(int c, const char *arg, struct cl_opts *o)
{
	unsigned v;

	switch (c) {
	case 'r':
		return parse_rdv(arg, o);
	case 'R':
		if (parse_uint(arg, 0, 1 << 24, &v))
			return -EINVAL;
		o->rank = (int)v;
		return 0;
	case 'N':
		if (parse_uint(arg, 1, 1 << 24, &v))
			return -EINVAL;
		o->size = (int)v;
		return 0;
	case 'P': o->plugin = arg; return 0;
	case 'c': o->config = arg; return 0;
	case 'j': o->json = arg; return 0;
	case 'd': o->dot = arg; return 0;
	case 's': o->svg = arg; return 0;
	case 'p': o->png = arg; return 0;
	case 'b': return parse_uint(arg, 1, 600000, &o->burst_ms);
	case 'B': return parse_size(arg, &o->burst_bytes);
	case 'l': return parse_uint(arg, 0, 1000000, &o->lat_iters);
	case 't': return parse_uint(arg, 1, 86400, &o->timeout_s);
	case 'v': o->verbose++; return 0;
	}
	return -EINVAL;
}

int cl_parse_args(int argc, char **argv, struct cl_opts *o)
{
	static const struct option longopts[] = {
		{ "cluster", no_argument, NULL, 'C' },
		{ "rendezvous", required_argument, NULL, 'r' },
		{ "rank", required_argument, NULL, 'R' },
		{ "size", required_argument, NULL, 'N' },
		{ "plugin", required_argument, NULL, 'P' },
		{ "config", required_argument, NULL, 'c' },
		{ "json", required_argument, NULL, 'j' },
		{ "dot", required_argument, NULL, 'd' },
		{ "svg", required_argument, NULL, 's' },
		{ "png", required_argument, NULL, 'p' },
		{ "burst-ms", required_argument, NULL, 'b' },
		{ "burst-bytes", required_argument, NULL, 'B' },
		{ "lat-iters", required_argument, NULL, 'l' },
		{ "timeout", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, li;

	opterr = 0;
	optind = 1;
	while ((li = -1, c = getopt_long(argc, argv, ":vh", longopts, &li)) !=
	       -1) {
		if (c == 'C')
			continue;
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == ':' || c == '?') {
			fprintf(stderr, "meshinfo: %s '%s'\n",
				c == ':' ? "missing value for" : "unknown option",
				argv[optind - 1]);
			usage(stderr);
			return 2;
		}
		if (parse_opt(c, optarg, o)) {
			fprintf(stderr, "meshinfo: invalid value for --%s: '%s'\n",
				li >= 0 ? longopts[li].name : "?", optarg);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "meshinfo: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	return cl_rdv_resolve(o) ? 2 : -1;
}
