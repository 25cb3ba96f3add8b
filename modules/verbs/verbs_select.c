/* SPDX-License-Identifier: MIT */
/*
 * GID and port selection over a sysfs tree.  It reads files only, so the
 * tests can point it at a fake tree with the holes, unreadable attributes
 * and odd tables that containers and VLAN setups show.  The HCA lists that
 * choose the devices are in verbs_hca_list.c.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs_select.h"

/* Far above any real table (mlx5 has 256 entries, rxe fewer). */
#define GID_TABLE_MAX 4096
/* Entries listed one by one in a "nothing fits" error. */
#define FOUND_LIST_MAX 8

void vl_seterr(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!err || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* Strictly decimal digits, so "+1", " 1" and "1x" are all refused. */
int vl_parse_num(const char *s, size_t len, long long max, long long *out)
{
	char buf[24];
	char *end;

	if (!len || len >= sizeof(buf))
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	errno = 0;
	*out = strtoll(buf, &end, 10);
	if (errno || *end || *out > max)
		return -EINVAL;
	return 0;
}

/* Appends to a string that may already be full; truncation is fine. */
static void append(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t len, const char *fmt, ...)
{
	size_t used = strnlen(buf, len);
	va_list ap;

	if (used + 1 >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + used, len - used, fmt, ap);
	va_end(ap);
}

/* ---- sysfs reading ---- */

/* Reads a small attribute, trailing whitespace cut; -errno on failure. */
static int read_attr(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n;
	int fd, e;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	e = errno;
	close(fd);
	if (n < 0)
		return -e;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ' ||
			 buf[n - 1] == '\t'))
		n--;
	buf[n] = '\0';
	return 0;
}

static bool dev_name_ok(const char *dev)
{
	return dev && *dev && !strchr(dev, '/') && strcmp(dev, ".") &&
	       strcmp(dev, "..") && strlen(dev) < VL_NAME_MAX;
}

static int port_dir(const char *root, const char *dev, int port, char *buf,
		    size_t len)
{
	if (!root || !dev_name_ok(dev) || port < 1 || port > VL_PORT_MAX)
		return -EINVAL;
	if (snprintf(buf, len, "%s/%s/ports/%d", root, dev, port) >= (int)len)
		return -ENAMETOOLONG;
	if (access(buf, F_OK))
		return -ENOENT;
	return 0;
}

static bool link_is_ethernet(const char *pdir)
{
	char buf[64];

	/* Kernels without the attribute only knew InfiniBand. */
	return !read_attr(pdir, "link_layer", buf, sizeof(buf)) &&
	       !strcmp(buf, "Ethernet");
}

/* ---- GID table ---- */

enum gid_state {
	GID_OK,
	GID_UNREADABLE,
	GID_ZERO,
	GID_LINK_LOCAL,
	GID_OUTSIDE,
};

struct gid_entry {
	int index;
	enum gid_state state;
	int version;		/* 0 unknown */
	uint8_t raw[16];
	char ndev[VL_NAME_MAX];
};

struct gid_table {
	int n;
	struct gid_entry *e;
};

static bool gid_is_zero(const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return false;
	return true;
}

static bool gid_is_v4mapped(const uint8_t *g)
{
	for (int i = 0; i < 10; i++)
		if (g[i])
			return false;
	return g[10] == 0xff && g[11] == 0xff;
}

static bool gid_is_link_local(const uint8_t *g)
{
	return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

static bool prefix_equal(const uint8_t *a, const uint8_t *b, int bits)
{
	int bytes = bits / 8, rest = bits % 8;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));

	if (memcmp(a, b, (size_t)bytes))
		return false;
	if (!rest)
		return true;
	return (a[bytes] & mask) == (b[bytes] & mask);
}

static bool gid_in_range(const uint8_t *g, const struct vl_gid_prefs *p)
{
	if (!p->range_prefix)
		return true;
	if (p->range_family == AF_INET)
		return gid_is_v4mapped(g) &&
		       prefix_equal(g + 12, p->range_ip, p->range_prefix);
	return prefix_equal(g, p->range_ip, p->range_prefix);
}

/* "RoCE v2" -> 2, "IB/RoCE v1" -> 1, anything else or unreadable -> 0. */
static int gid_version(const char *pdir, int index)
{
	char name[64], buf[64];

	snprintf(name, sizeof(name), "gid_attrs/types/%d", index);
	if (read_attr(pdir, name, buf, sizeof(buf)))
		return 0;
	if (!strcmp(buf, "RoCE v2"))
		return 2;
	if (!strcmp(buf, "IB/RoCE v1") || !strcmp(buf, "RoCE v1"))
		return 1;
	return 0;
}

static int gid_read_raw(const char *pdir, int index, uint8_t *raw)
{
	char name[64], buf[128];
	int rc;

	snprintf(name, sizeof(name), "gids/%d", index);
	rc = read_attr(pdir, name, buf, sizeof(buf));
	if (rc)
		return rc;
	return inet_pton(AF_INET6, buf, raw) == 1 ? 0 : -EINVAL;
}

static void gid_read_entry(const char *pdir, int index,
			   const struct vl_gid_prefs *p,
			   struct gid_entry *e)
{
	char name[64];

	memset(e, 0, sizeof(*e));
	e->index = index;
	if (gid_read_raw(pdir, index, e->raw))
		e->state = GID_UNREADABLE;
	else if (gid_is_zero(e->raw))
		e->state = GID_ZERO;
	else if (gid_is_link_local(e->raw))
		e->state = GID_LINK_LOCAL;
	else if (p && !gid_in_range(e->raw, p))
		e->state = GID_OUTSIDE;
	else
		e->state = GID_OK;
	if (e->state == GID_UNREADABLE || e->state == GID_ZERO)
		return;
	e->version = gid_version(pdir, index);
	snprintf(name, sizeof(name), "gid_attrs/ndevs/%d", index);
	if (read_attr(pdir, name, e->ndev, sizeof(e->ndev)))
		e->ndev[0] = '\0';
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;

	return (x > y) - (x < y);
}

/*
 * Indexes are the numeric names under gids/, not 0..count-1: a container's
 * view may hold only some of them, and nothing must be skipped for a hole.
 */
static int gid_indexes(const char *pdir, int **out)
{
	char path[PATH_MAX];
	struct dirent *d;
	int *idx, n = 0;
	DIR *dir;

	if (snprintf(path, sizeof(path), "%s/gids", pdir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	dir = opendir(path);
	if (!dir)
		return -errno;
	idx = malloc(sizeof(*idx) * GID_TABLE_MAX);
	if (!idx) {
		closedir(dir);
		return -ENOMEM;
	}
	while ((d = readdir(dir)) && n < GID_TABLE_MAX) {
		long long v;

		if (!vl_parse_num(d->d_name, strlen(d->d_name),
			       GID_TABLE_MAX - 1, &v))
			idx[n++] = (int)v;
	}
	closedir(dir);
	qsort(idx, (size_t)n, sizeof(*idx), cmp_int);
	*out = idx;
	return n;
}

static int gid_table_load(const char *pdir, const struct vl_gid_prefs *p,
			  struct gid_table *t)
{
	int *idx = NULL;
	int n = gid_indexes(pdir, &idx);

	t->n = 0;
	t->e = NULL;
	if (n < 0)
		return n;
	t->e = calloc((size_t)(n ? n : 1), sizeof(*t->e));
	if (!t->e) {
		free(idx);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		gid_read_entry(pdir, idx[i], p, &t->e[i]);
	t->n = n;
	free(idx);
	return 0;
}

/* Higher is better: preferred version, unknown, other version. */
static int version_rank(int version, int want)
{
	if (version == want)
		return 2;
	return version ? 0 : 1;
}

static int family_rank(const uint8_t *raw, int family)
{
	return gid_is_v4mapped(raw) == (family == AF_INET);
}

static const struct gid_entry *gid_best(const struct gid_table *t,
					const struct vl_gid_prefs *p)
{
	const struct gid_entry *best = NULL;
	int best_rank = -1;

	for (int i = 0; i < t->n; i++) {
		const struct gid_entry *e = &t->e[i];
		int rank;

		if (e->state != GID_OK)
			continue;
		rank = version_rank(e->version, p->roce_version) * 2 +
		       family_rank(e->raw, p->family);
		if (rank > best_rank) {
			best_rank = rank;
			best = e;
		}
	}
	return best;
}

/* "10.1.0.5" for IPv4-mapped GIDs, the IPv6 text otherwise. */
static const char *gid_str(const uint8_t *raw, char *buf, size_t len)
{
	if (gid_is_v4mapped(raw))
		return inet_ntop(AF_INET, raw + 12, buf, (socklen_t)len);
	return inet_ntop(AF_INET6, raw, buf, (socklen_t)len);
}

static const char *version_str(int v)
{
	return v == 2 ? "RoCE v2" : v == 1 ? "RoCE v1" : "RoCE v?";
}

static const char *family_str(int family)
{
	return family == AF_INET ? "IPv4" : "IPv6";
}

static void range_str(const struct vl_gid_prefs *p, char *buf,
		      size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	buf[0] = '\0';
	if (!p->range_prefix)
		return;
	inet_ntop(p->range_family == AF_INET ? AF_INET : AF_INET6, p->range_ip,
		  ip, sizeof(ip));
	snprintf(buf, len, " inside %s/%u", ip, p->range_prefix);
}

static void describe_none(const char *dev, int port, const struct gid_table *t,
			  const struct vl_gid_prefs *p, char *err,
			  size_t errlen)
{
	static const char *const why[] = {
		[GID_LINK_LOCAL] = "link-local",
		[GID_OUTSIDE] = "outside range",
	};
	int zero = 0, unreadable = 0, listed = 0, more = 0;
	char range[INET6_ADDRSTRLEN + 16], ip[INET6_ADDRSTRLEN];

	range_str(p, range, sizeof(range));
	vl_seterr(err, errlen, "%s port %d: %d GID entries, none %s %s%s (found:",
	       dev, port, t->n, family_str(p->family),
	       version_str(p->roce_version), range);
	for (int i = 0; i < t->n; i++) {
		const struct gid_entry *e = &t->e[i];

		if (e->state == GID_ZERO) {
			zero++;
		} else if (e->state == GID_UNREADABLE) {
			unreadable++;
		} else if (listed == FOUND_LIST_MAX) {
			more++;
		} else {
			append(err, errlen, "%s #%d %s %s %s",
			       listed ? "," : "",
			       e->index, gid_str(e->raw, ip, sizeof(ip)),
			       version_str(e->version),
			       why[e->state] ? why[e->state] : "usable");
			listed++;
		}
	}
	if (more)
		append(err, errlen, ", %d more", more);
	append(err, errlen, "%s %d zero, %d unreadable)", listed ? ";" : "",
	       zero, unreadable);
}

/* Success, but say which preference the pick misses, if any. */
static void describe_fallback(const char *dev, int port,
			      const struct gid_entry *e,
			      const struct vl_gid_prefs *p, char *err,
			      size_t errlen)
{
	bool v_ok = e->version == p->roce_version;
	bool f_ok = family_rank(e->raw, p->family);
	char ip[INET6_ADDRSTRLEN];

	vl_seterr(err, errlen, "%s", "");
	if (v_ok && f_ok)
		return;
	vl_seterr(err, errlen, "%s port %d: using GID #%d (%s %s):", dev, port,
	       e->index, version_str(e->version),
	       gid_str(e->raw, ip, sizeof(ip)));
	if (!e->version)
		append(err, errlen,
		       " RoCE version unknown (type file unreadable)");
	else if (!v_ok)
		append(err, errlen, " no usable %s entry",
		       version_str(p->roce_version));
	if (!f_ok)
		append(err, errlen, "%s no usable %s entry", v_ok ? "" : ";",
		       family_str(p->family));
}

static void fill_out(const struct gid_entry *e, struct vl_gid *out)
{
	memset(out, 0, sizeof(*out));
	out->index = e->index;
	memcpy(out->raw, e->raw, sizeof(out->raw));
	out->roce_version = e->version;
	memcpy(out->netdev, e->ndev, sizeof(out->netdev));
}

static int gid_forced(const char *pdir, const char *dev, int port, int index,
		      struct vl_gid *out, char *err, size_t errlen)
{
	struct gid_entry e;
	char ip[INET6_ADDRSTRLEN];
	int rc;

	if (index >= GID_TABLE_MAX) {
		vl_seterr(err, errlen, "%s port %d: forced GID index %d is past "
		       "any GID table", dev, port, index);
		return -ENOENT;
	}
	rc = gid_read_raw(pdir, index, e.raw);
	if (rc) {
		vl_seterr(err, errlen, "%s port %d: forced GID index %d: %s",
		       dev, port, index, rc == -ENOENT ? "no such entry" :
		       "entry unreadable");
		return -ENOENT;
	}
	gid_read_entry(pdir, index, NULL, &e);
	if (e.state == GID_ZERO) {
		vl_seterr(err, errlen, "%s port %d: forced GID index %d is empty "
		       "(all zero)", dev, port, index);
		return -ENOENT;
	}
	fill_out(&e, out);
	vl_seterr(err, errlen, "%s", "");
	if (e.state == GID_LINK_LOCAL)
		vl_seterr(err, errlen, "%s port %d: forced GID index %d is "
		       "link-local %s: it reaches only its own L2 segment",
		       dev, port, index, gid_str(e.raw, ip, sizeof(ip)));
	return 0;
}

static int prefs_check(const struct vl_gid_prefs *in,
		       struct vl_gid_prefs *p, char *err, size_t errlen)
{
	if (in) {
		*p = *in;
	} else {
		memset(p, 0, sizeof(*p));
		p->force_index = -1;
	}
	if (!p->roce_version)
		p->roce_version = 2;
	if (!p->family)
		p->family = AF_INET;
	if ((p->roce_version != 1 && p->roce_version != 2) ||
	    (p->family != AF_INET && p->family != AF_INET6)) {
		vl_seterr(err, errlen, "GID preferences: roce_version %d (1 or 2) "
		       "or family %d (AF_INET or AF_INET6) not supported",
		       p->roce_version, p->family);
		return -EINVAL;
	}
	if (p->range_prefix &&
	    ((p->range_family != AF_INET && p->range_family != AF_INET6) ||
	     p->range_prefix > (p->range_family == AF_INET ? 32 : 128))) {
		vl_seterr(err, errlen, "GID range: prefix /%u does not fit %s",
		       p->range_prefix, p->range_family == AF_INET ?
		       "an IPv4 address" : p->range_family == AF_INET6 ?
		       "an IPv6 address" : "an unknown family");
		return -EINVAL;
	}
	return 0;
}

static int gid_auto(const char *pdir, const char *dev, int port,
		    const struct vl_gid_prefs *p,
		    struct vl_gid *out, char *err, size_t errlen)
{
	const struct gid_entry *best;
	struct gid_table t;
	int rc = gid_table_load(pdir, p, &t);

	if (rc) {
		vl_seterr(err, errlen, "%s port %d: cannot list the GID table: %s",
		       dev, port, strerror(-rc));
		return rc == -ENOMEM ? rc : -ENOENT;
	}
	best = gid_best(&t, p);
	if (best) {
		fill_out(best, out);
		describe_fallback(dev, port, best, p, err, errlen);
		rc = 0;
	} else {
		describe_none(dev, port, &t, p, err, errlen);
		rc = -ENOENT;
	}
	free(t.e);
	return rc;
}

int vl_gid_pick(const char *sysfs_root, const char *dev, int port,
		       const struct vl_gid_prefs *prefs,
		       struct vl_gid *out, char *err, size_t errlen)
{
	struct vl_gid_prefs p;
	char pdir[PATH_MAX];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = port_dir(sysfs_root, dev, port, pdir, sizeof(pdir));
	if (rc) {
		vl_seterr(err, errlen, "%s port %d: %s", dev ? dev : "(null)",
		       port, rc == -ENOENT ? "no such device or port" :
		       strerror(-rc));
		return rc;
	}
	rc = prefs_check(prefs, &p, err, errlen);
	if (rc)
		return rc;
	if (p.force_index >= 0)
		return gid_forced(pdir, dev, port, p.force_index, out, err,
				  errlen);
	if (!link_is_ethernet(pdir)) {
		/* IB routes by LID; GID 0 carries the subnet prefix. */
		vl_seterr(err, errlen, "%s", "");
		out->index = 0;
		if (gid_read_raw(pdir, 0, out->raw))
			memset(out->raw, 0, sizeof(out->raw));
		return 0;
	}
	return gid_auto(pdir, dev, port, &p, out, err, errlen);
}

/* ---- port facts ---- */

/* "4: ACTIVE" -> true; the number is the verbs port state. */
static bool parse_state(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (end != s && *end == ':')
		return v == 4;
	return !strcmp(s, "ACTIVE");
}

/*
 * "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "53.125 Gb/sec (1X HDR)":
 * parsed by hand, as strtod would follow the process locale.
 */
static int parse_rate(const char *s)
{
	long long whole = 0, frac = 0, scale = 1;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++) {
		whole = whole * 10 + (*p - '0');
		if (whole > 10000000)
			return 0;
	}
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			if (scale < 1000) {
				frac = frac * 10 + (*p - '0');
				scale *= 10;
			}
	while (*p == ' ')
		p++;
	if (!strncmp(p, "Gb/sec", 6))
		return (int)(whole * 1000 + frac * 1000 / scale);
	if (!strncmp(p, "Mb/sec", 6))
		return (int)whole;
	return 0;
}

/* First entry (by name) of <dev>/device/net/, the PCI function's netdev. */
static void first_net(const char *root, const char *dev, char *out, size_t len)
{
	char path[PATH_MAX];
	struct dirent *d;
	DIR *dir;

	out[0] = '\0';
	if (snprintf(path, sizeof(path), "%s/%s/device/net", root, dev) >=
	    (int)sizeof(path))
		return;
	dir = opendir(path);
	if (!dir)
		return;
	while ((d = readdir(dir))) {
		if (d->d_name[0] == '.' || strlen(d->d_name) >= len)
			continue;
		if (!out[0] || strcmp(d->d_name, out) < 0)
			snprintf(out, len, "%s", d->d_name);
	}
	closedir(dir);
}

static void port_netdev(const char *root, const char *dev, const char *pdir,
			char *out, size_t len)
{
	struct vl_gid_prefs p;
	const struct gid_entry *best;
	struct gid_table t;

	out[0] = '\0';
	prefs_check(NULL, &p, NULL, 0);
	if (gid_table_load(pdir, &p, &t))
		t.n = 0;
	best = t.n ? gid_best(&t, &p) : NULL;
	if (best && best->ndev[0])
		snprintf(out, len, "%s", best->ndev);
	if (!out[0])
		first_net(root, dev, out, len);
	for (int i = 0; !out[0] && i < t.n; i++)
		if (t.e[i].ndev[0])
			snprintf(out, len, "%s", t.e[i].ndev);
	free(t.e);
}

int vl_port_info(const char *sysfs_root, const char *dev, int port,
			struct vl_port_info *out)
{
	char pdir[PATH_MAX], buf[128];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = port_dir(sysfs_root, dev, port, pdir, sizeof(pdir));
	if (rc)
		return rc;
	out->active = !read_attr(pdir, "state", buf, sizeof(buf)) &&
		      parse_state(buf);
	out->ethernet = link_is_ethernet(pdir);
	if (!read_attr(pdir, "rate", buf, sizeof(buf)))
		out->speed_mbps = parse_rate(buf);
	port_netdev(sysfs_root, dev, pdir, out->netdev, sizeof(out->netdev));
	return 0;
}
