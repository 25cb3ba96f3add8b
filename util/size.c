/* SPDX-License-Identifier: MIT */
/* Sizes with binary suffixes (size.h). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "size.h"

int util_size_parse(const char *text, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *unit;
	unsigned long long v;
	char *end;
	int shift = 0;

	if (!text || *text < '0' || *text > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(text, &end, 10);
	if (errno)
		return -ERANGE;
	if (*end) {
		unit = memchr(units, toupper((unsigned char)*end),
			      sizeof(units) - 1);
		if (!unit)
			return -EINVAL;
		shift = 10 * (int)(unit - units + 1);
		if (end[1])
			return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}
