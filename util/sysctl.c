/* SPDX-License-Identifier: MIT */
#include <stdio.h>

#include "sysctl.h"

uint64_t util_sysctl_last(const char *path, uint64_t dflt)
{
	unsigned long long v[3] = { 0 };
	FILE *f = fopen(path, "re");
	int n;

	if (!f)
		return dflt;
	n = fscanf(f, "%llu %llu %llu", &v[0], &v[1], &v[2]);
	fclose(f);
	return n > 0 ? (uint64_t)v[n - 1] : dflt;
}
