/* SPDX-License-Identifier: MIT */
/*
 * Sizes as people write them, shared by the config, the tools and the
 * benchmarks so that "256K" means the same everywhere (linked in as a
 * static PIC library, never exported).
 */
#ifndef UTIL_SIZE_H
#define UTIL_SIZE_H

#include <stdint.h>

/*
 * Decimal digits with an optional K, M, G or T (any case, powers of 1024):
 * "4096", "256K", "16m".  Returns 0 with *out set, -EINVAL for anything
 * else (sign, space, empty, "KB" or "KiB", which some read as powers of
 * 1000), -ERANGE past 2^64 - 1.  Callers check their own range.
 */
int util_size_parse(const char *text, uint64_t *out);

#endif
