/* SPDX-License-Identifier: MIT */
/* What the benchmarks' reference programs share. */
#ifndef BENCH_H
#define BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* A reference that cannot do its part has no figure to print. */
static inline void bench_die(const char *what)
{
	perror(what);
	exit(1);
}

static inline double bench_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
