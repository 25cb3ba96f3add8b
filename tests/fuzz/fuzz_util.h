/* SPDX-License-Identifier: MIT */
/* What every fuzz target shares: a property check that aborts (so the
 * fuzzer keeps the input), and split points drawn from the input. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define REQUIRE(cond)                                                    \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "%s:%d: property violated: %s\n", \
				__FILE__, __LINE__, #cond);              \
			abort();                                         \
		}                                                        \
	} while (0)

/* Split points come from the input, so the fuzzer can steer them. */
struct splitter {
	uint32_t x;
};

static inline size_t next(struct splitter *s, size_t max)
{
	s->x ^= s->x << 13;
	s->x ^= s->x >> 17;
	s->x ^= s->x << 5;
	return max ? s->x % max : 0;
}

#endif
