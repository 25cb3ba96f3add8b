/* SPDX-License-Identifier: MIT */
/*
 * NCCL_IB_HCA-style lists ("mlx5_0:1,mlx5_1", "^=mlx5_2", "rxe12:1:17"):
 * parsing with errors that say what is wrong, and matching a device and
 * port against them as NCCL does (prefix unless '=').
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "verbs_select.h"

static bool name_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static int parse_name(const char *s, size_t nlen, size_t len,
		      struct vl_hca_entry *e, char *err, size_t errlen)
{
	if (!nlen) {
		vl_seterr(err, errlen, "entry \"%.*s\": no device name",
		       (int)len, s);
		return -EINVAL;
	}
	if (nlen >= VL_NAME_MAX) {
		vl_seterr(err, errlen, "entry \"%.*s\": name longer than %d",
		       (int)len, s, VL_NAME_MAX - 1);
		return -EINVAL;
	}
	for (size_t i = 0; i < nlen; i++) {
		if (name_char_ok(s[i]))
			continue;
		vl_seterr(err, errlen,
		       "entry \"%.*s\": '%c' cannot be in a device name "
		       "('^' and '=' only lead the whole list)",
		       (int)len, s, s[i]);
		return -EINVAL;
	}
	memcpy(e->name, s, nlen);
	e->name[nlen] = '\0';
	return 0;
}

/* One "name[:port[:fabric]]" token of length len, already trimmed. */
static int parse_entry(const char *s, size_t len, bool exclude,
		       struct vl_hca_entry *e, char *err, size_t errlen)
{
	const char *end = s + len;
	const char *c1 = memchr(s, ':', len);
	const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1))
			    : NULL;
	const char *port = c1 ? c1 + 1 : end;
	size_t plen = (size_t)((c2 ? c2 : end) - port);
	const char *fab = c2 ? c2 + 1 : end;
	size_t flen = (size_t)(end - fab);
	long long v;

	e->port = 0;
	e->fabric_id = -1;
	if (parse_name(s, (size_t)((c1 ? c1 : end) - s), len, e, err, errlen))
		return -EINVAL;
	/* "rxe0::17": any port, fabric 17; a bare trailing ':' is a typo. */
	if (c1 && (plen || !c2)) {
		if (vl_parse_num(port, plen, VL_PORT_MAX, &v) || v < 1) {
			vl_seterr(err, errlen,
			       "entry \"%.*s\": port \"%.*s\" is not 1..%d",
			       (int)len, s, (int)plen, port, VL_PORT_MAX);
			return -EINVAL;
		}
		e->port = (int)v;
	}
	if (!c2)
		return 0;
	if (memchr(fab, ':', flen)) {
		vl_seterr(err, errlen, "entry \"%.*s\": more than "
		       "name:port:fabric", (int)len, s);
		return -EINVAL;
	}
	if (exclude) {
		vl_seterr(err, errlen, "entry \"%.*s\": a fabric id means "
		       "nothing in a '^' (exclude) list", (int)len, s);
		return -EINVAL;
	}
	if (vl_parse_num(fab, flen, INT64_MAX, &v)) {
		vl_seterr(err, errlen, "entry \"%.*s\": fabric id \"%.*s\" is "
		       "not a number >= 0", (int)len, s, (int)flen, fab);
		return -EINVAL;
	}
	e->fabric_id = v;
	return 0;
}

/* Trims blanks off both ends of [*s, *s + *len). */
static void trim(const char **s, size_t *len)
{
	while (*len && is_blank(**s)) {
		(*s)++;
		(*len)--;
	}
	while (*len && is_blank((*s)[*len - 1]))
		(*len)--;
}

/* Adds the token [s, s + len) to out, or says why not. */
static int add_entry(const char *spec, const char *s, size_t len,
		     struct vl_hca_filter *out, char *err,
		     size_t errlen)
{
	char why[160];

	trim(&s, &len);
	if (!len) {
		bool lead = !out->n && (out->exclude || out->exact);

		vl_seterr(err, errlen, "HCA list \"%s\": empty entry%s", spec,
		       lead ? " (no device after '^' or '=')" : "");
		return -EINVAL;
	}
	if (out->n == VL_HCA_MAX) {
		vl_seterr(err, errlen, "HCA list \"%s\": more than %d entries",
		       spec, VL_HCA_MAX);
		return -EINVAL;
	}
	if (parse_entry(s, len, out->exclude, &out->e[out->n], why,
			sizeof(why))) {
		vl_seterr(err, errlen, "HCA list \"%s\": %s", spec, why);
		return -EINVAL;
	}
	out->n++;
	return 0;
}

int vl_hca_parse(const char *spec, struct vl_hca_filter *out,
			char *err, size_t errlen)
{
	const char *s = spec ? spec : "";
	const char *end;

	memset(out, 0, sizeof(*out));
	vl_seterr(err, errlen, "%s", "");
	while (is_blank(*s))
		s++;
	if (!*s)
		return 0;		/* every device */
	if (*s == '^') {
		out->exclude = true;
		s++;
	}
	if (*s == '=') {
		out->exact = true;
		s++;
	}
	for (;; s = end + 1) {
		end = strchr(s, ',');
		if (add_entry(spec, s, end ? (size_t)(end - s) : strlen(s), out,
			      err, errlen))
			return -EINVAL;
		if (!end)
			return 0;
	}
}

/*
 * How well entry e names dev/port: -1 no match, else higher for an exact
 * name and for a named port, so "mlx5_1:1:1,mlx5_10:1:2" gives mlx5_10
 * fabric 2 even though "mlx5_1" is also its prefix.
 */
static int entry_score(const struct vl_hca_entry *e, bool exact,
		       const char *dev, int port)
{
	size_t n = strlen(e->name);
	bool same = !strcmp(e->name, dev);

	if (exact ? !same : strncmp(e->name, dev, n))
		return -1;
	if (e->port && e->port != port)
		return -1;
	return (same ? 2 : 0) + (e->port ? 1 : 0);
}

bool vl_hca_match(const struct vl_hca_filter *f,
			 const char *dev, int port, int64_t *fabric_id)
{
	int best = -1, best_score = -1;

	if (fabric_id)
		*fabric_id = -1;
	if (!f->n)
		return true;
	for (int i = 0; i < f->n; i++) {
		int sc = entry_score(&f->e[i], f->exact, dev, port);

		if (sc > best_score) {
			best_score = sc;
			best = i;
		}
	}
	if (f->exclude)
		return best < 0;
	if (best < 0)
		return false;
	if (fabric_id)
		*fabric_id = f->e[best].fabric_id;
	return true;
}
