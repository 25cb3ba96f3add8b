/* SPDX-License-Identifier: MIT */
/*
 * What the process costs while the plugin moves data: threads, open
 * descriptors and peak resident memory, from /proc/self.  A plugin whose
 * threads or sockets grow with the comm count shows it here.
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "netdrive.h"

struct perf_proc perf_proc_max;

/* A "Key:  value" line of /proc/self/status, or -1. */
static long status_field(const char *key)
{
	size_t klen = strlen(key);
	char line[256];
	long val = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			sscanf(line + klen + 1, "%ld", &val);
			break;
		}
	}
	fclose(f);
	return val;
}

static long count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;	/* the directory's own */
}

void perf_proc_sample(struct perf_proc *now)
{
	now->threads = status_field("Threads");
	now->fds = count_fds();
	now->peak_rss_kib = status_field("VmHWM");
	if (now->threads > perf_proc_max.threads)
		perf_proc_max.threads = now->threads;
	if (now->fds > perf_proc_max.fds)
		perf_proc_max.fds = now->fds;
	perf_proc_max.peak_rss_kib = now->peak_rss_kib;
}
