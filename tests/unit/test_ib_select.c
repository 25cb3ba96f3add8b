/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of ib-fabric's HCA and GID selection.  The sysfs trees are
 * built here in a temp dir: a plain RoCE NIC, what a container shows
 * (holes in the table, type files that cannot be read), IPv6-only,
 * InfiniBand, v1-only, so each rule is tried against the layout that
 * made it necessary.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "verbs_select.h"
#include "netaddr.h"

static char root[256];
static char err[512];

#define CHECK_HAS(text, part)                                            \
	do {                                                             \
		if (!strstr((text), (part))) {                           \
			fprintf(stderr, "%s:%d: \"%s\" lacks \"%s\"\n",   \
				__FILE__, __LINE__, (text), (part));     \
			failures++;                                      \
		}                                                        \
	} while (0)

/* ---- building fake trees ---- */

static void die(const char *what, const char *path)
{
	fprintf(stderr, "fixture: %s %s: %s\n", what, path, strerror(errno));
	exit(2);
}

static void mkdirs(const char *path)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			die("mkdir", buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		die("mkdir", buf);
}

/* Writes <root>/<rel> with text + "\n", as sysfs shows attributes. */
static void put(const char *rel, const char *text)
{
	char path[512];
	char *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	slash = strrchr(path, '/');
	*slash = '\0';
	mkdirs(path);
	*slash = '/';
	f = fopen(path, "w");
	if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f))
		die("write", path);
}

/*
 * A file that cannot be read: a directory in its place.  Root reads
 * mode-000 files anyway, and read() on a directory fails with EISDIR for
 * everyone, as EINVAL does for a real empty type entry.
 */
static void unreadable(const char *rel)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	mkdirs(path);
}

static void port(const char *dev, int p, const char *state, const char *ll,
		 const char *rate)
{
	char rel[256];

	snprintf(rel, sizeof(rel), "%s/ports/%d/state", dev, p);
	put(rel, state);
	snprintf(rel, sizeof(rel), "%s/ports/%d/link_layer", dev, p);
	put(rel, ll);
	if (rate) {
		snprintf(rel, sizeof(rel), "%s/ports/%d/rate", dev, p);
		put(rel, rate);
	}
	snprintf(rel, sizeof(rel), "%s/ports/%d/gids", dev, p);
	unreadable(rel);	/* the gids/ dir itself, maybe left empty */
}

#define TYPE_NONE NULL		/* no type file at all */
#define TYPE_BAD "(unreadable)"	/* a type file that fails to read */
#define ZERO_GID "0000:0000:0000:0000:0000:0000:0000:0000"

/* One GID entry; type "RoCE v2", "IB/RoCE v1", TYPE_BAD or TYPE_NONE. */
static void gid(const char *dev, int p, int i, const char *g,
		const char *type, const char *ndev)
{
	char rel[256];

	snprintf(rel, sizeof(rel), "%s/ports/%d/gids/%d", dev, p, i);
	put(rel, g);
	snprintf(rel, sizeof(rel), "%s/ports/%d/gid_attrs/types/%d", dev, p, i);
	if (type && !strcmp(type, TYPE_BAD))
		unreadable(rel);
	else if (type)
		put(rel, type);
	snprintf(rel, sizeof(rel), "%s/ports/%d/gid_attrs/ndevs/%d", dev, p, i);
	if (ndev)
		put(rel, ndev);
}

/* A real table is full of zero entries whose type reads fail. */
static void zero_gids(const char *dev, int p, int from, int to)
{
	for (int i = from; i <= to; i++)
		gid(dev, p, i, ZERO_GID, TYPE_BAD, NULL);
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void cleanup(void)
{
	if (root[0])
		nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- helpers ---- */

static struct vl_gid_prefs prefs(int version, int family)
{
	struct vl_gid_prefs p = { .roce_version = version,
					 .family = family,
					 .force_index = -1 };
	return p;
}

static void set_range(struct vl_gid_prefs *p, const char *text)
{
	struct mesh_addr a;

	if (util_addr_parse(text, &a)) {
		fprintf(stderr, "bad test range %s\n", text);
		exit(2);
	}
	p->range_family = a.family;
	p->range_prefix = a.prefix_len;
	memcpy(p->range_ip, a.ip, sizeof(p->range_ip));
}

static int pick(const char *dev, int p, const struct vl_gid_prefs *pr,
		struct vl_gid *g)
{
	int rc = vl_gid_pick(root, dev, p, pr, g, err, sizeof(err));

	if (getenv("TEST_VERBOSE"))
		fprintf(stderr, "%s:%d -> %d index %d v%d [%s]\n", dev, p, rc,
			g->index, g->roce_version, err);
	return rc;
}

static bool raw_is(const struct vl_gid *g, const char *text)
{
	uint8_t want[16];

	return inet_pton(AF_INET6, text, want) == 1 &&
	       !memcmp(want, g->raw, sizeof(want));
}

/* ---- HCA lists ---- */

static int parse(const char *spec, struct vl_hca_filter *f)
{
	return vl_hca_parse(spec, f, err, sizeof(err));
}

static bool match(const struct vl_hca_filter *f, const char *dev,
		  int p, int64_t *fid)
{
	int64_t dummy;

	return vl_hca_match(f, dev, p, fid ? fid : &dummy);
}

static void test_hca_prefix_and_ports(void)
{
	struct vl_hca_filter f;
	int64_t fid = 99;

	CHECK(parse("mlx5_0:1,mlx5_1", &f) == 0);
	CHECK_STR(err, "");
	CHECK(f.n == 2 && !f.exclude && !f.exact);
	CHECK_STR(f.e[0].name, "mlx5_0");
	CHECK(f.e[0].port == 1 && f.e[0].fabric_id == -1);
	CHECK(f.e[1].port == 0 && f.e[1].fabric_id == -1);
	CHECK(match(&f, "mlx5_0", 1, &fid) && fid == -1);
	CHECK(!match(&f, "mlx5_0", 2, NULL));
	CHECK(match(&f, "mlx5_1", 2, NULL));
	CHECK(match(&f, "mlx5_10", 1, NULL));	/* prefix, as NCCL */
	CHECK(!match(&f, "mlx5_2", 1, NULL));
	CHECK(!match(&f, "mlx4_0", 1, NULL));

	CHECK(parse(" rxe0 ,\trxe1:2 ", &f) == 0 && f.n == 2);
	CHECK_STR(f.e[0].name, "rxe0");
	CHECK(f.e[1].port == 2);

	/* Empty means every device. */
	CHECK(parse("", &f) == 0 && f.n == 0);
	CHECK(match(&f, "anything", 3, &fid) && fid == -1);
	CHECK(parse(NULL, &f) == 0 && f.n == 0);
}

static void test_hca_exact_and_exclude(void)
{
	struct vl_hca_filter f;

	CHECK(parse("=mlx5_1", &f) == 0 && f.exact && !f.exclude);
	CHECK(match(&f, "mlx5_1", 1, NULL));
	CHECK(!match(&f, "mlx5_10", 1, NULL));

	CHECK(parse("^mlx5_1", &f) == 0 && f.exclude && !f.exact);
	CHECK(!match(&f, "mlx5_1", 1, NULL));
	/* The prefix excludes mlx5_10 too. */
	CHECK(!match(&f, "mlx5_10", 1, NULL));
	CHECK(match(&f, "mlx5_0", 1, NULL));

	CHECK(parse("^=mlx5_1", &f) == 0 && f.exclude && f.exact);
	CHECK(!match(&f, "mlx5_1", 1, NULL));
	CHECK(match(&f, "mlx5_10", 1, NULL));

	CHECK(parse("^rxe0:2", &f) == 0);
	CHECK(match(&f, "rxe0", 1, NULL));
	CHECK(!match(&f, "rxe0", 2, NULL));
}

static void test_hca_fabric(void)
{
	struct vl_hca_filter f;
	int64_t fid = 0;

	CHECK(parse("rxe12:1:17", &f) == 0 && f.n == 1);
	CHECK(f.e[0].port == 1 && f.e[0].fabric_id == 17);
	CHECK(match(&f, "rxe12", 1, &fid) && fid == 17);
	CHECK(!match(&f, "rxe12", 2, &fid) && fid == -1);

	CHECK(parse("rxe0::5", &f) == 0);	/* any port, fabric 5 */
	CHECK(f.e[0].port == 0 && f.e[0].fabric_id == 5);
	CHECK(match(&f, "rxe0", 7, &fid) && fid == 5);

	/* The closest entry gives the fabric, not merely the first prefix. */
	CHECK(parse("mlx5_1:1:1,mlx5_10:1:2,mlx5_3:2:4,mlx5_3:7", &f) == 0);
	CHECK(match(&f, "mlx5_10", 1, &fid) && fid == 2);
	CHECK(match(&f, "mlx5_1", 1, &fid) && fid == 1);
	CHECK(match(&f, "mlx5_11", 1, &fid) && fid == 1);
	CHECK(match(&f, "mlx5_3", 2, &fid) && fid == 4);
	CHECK(match(&f, "mlx5_3", 7, &fid) && fid == -1);
	CHECK(!match(&f, "mlx5_3", 1, NULL));

	CHECK(parse("=a:1:9223372036854775807", &f) == 0);
	CHECK(f.e[0].fabric_id == INT64_MAX);
}

static void bad_hca(const char *spec, const char *why)
{
	struct vl_hca_filter f;

	err[0] = '\0';
	CHECK(parse(spec, &f) == -EINVAL);
	CHECK_HAS(err, why);
}

static void test_hca_bad(void)
{
	char many[33 * 8 + 1] = "", name[16];
	struct vl_hca_filter f;
	char longname[VL_NAME_MAX + 2];

	bad_hca("mlx5_0:", "port \"\" is not 1..255");
	bad_hca("mlx5_0:0", "port \"0\" is not 1..255");
	bad_hca("mlx5_0:256", "port \"256\"");
	bad_hca("mlx5_0:x", "port \"x\"");
	bad_hca("mlx5_0:+1", "port \"+1\"");
	bad_hca("mlx5_0:1:2:3", "more than name:port:fabric");
	bad_hca("rxe0:1:-1", "fabric id \"-1\"");
	bad_hca("rxe0:1:", "fabric id \"\"");
	bad_hca("rxe0:1:99999999999999999999", "fabric id");
	bad_hca("^rxe0:1:3", "exclude");
	bad_hca("a,,b", "empty entry");
	bad_hca(",", "empty entry");
	bad_hca("mlx5_0,", "empty entry");
	bad_hca("^", "no device after");
	bad_hca("=", "no device after");
	bad_hca("^=", "no device after");
	bad_hca("=^mlx5", "'^' cannot be in a device name");
	bad_hca("mlx5/0", "'/' cannot be");
	bad_hca(":1", "no device name");
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	bad_hca(longname, "name longer than 63");
	CHECK_HAS(err, "HCA list");

	/* 32 entries fit, the 33rd does not. */
	for (int i = 0; i < 33; i++) {
		snprintf(name, sizeof(name), "%sd%d", i ? "," : "", i);
		strcat(many, name);
		if (i == 31) {
			CHECK(parse(many, &f) == 0 && f.n == 32);
			CHECK_STR(f.e[31].name, "d31");
		}
	}
	bad_hca(many, "more than 32 entries");
}

/* ---- GID selection ---- */

/*
 * A RoCE NIC as the kernel shows it: v1 and v2 entries for the IPv6
 * link-local, the IPv4 and an IPv6 global address, then zero entries.
 */
static void tree_normal(void)
{
	port("mlx5_0", 1, "4: ACTIVE", "Ethernet", "100 Gb/sec (4X EDR)");
	gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:5054:00ff:fe12:3456",
	    "IB/RoCE v1", "eth2");
	gid("mlx5_0", 1, 1, "fe80:0000:0000:0000:5054:00ff:fe12:3456",
	    "RoCE v2", "eth2");
	gid("mlx5_0", 1, 2, "0000:0000:0000:0000:0000:ffff:0a01:0005",
	    "IB/RoCE v1", "eth2");
	gid("mlx5_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a01:0005",
	    "RoCE v2", "eth2");
	gid("mlx5_0", 1, 4, "fd00:0000:0000:0000:0000:0000:0000:0005",
	    "IB/RoCE v1", "eth2");
	gid("mlx5_0", 1, 5, "fd00:0000:0000:0000:0000:0000:0000:0005",
	    "RoCE v2", "eth2");
	zero_gids("mlx5_0", 1, 6, 15);
}

static void test_gid_normal(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);

	CHECK(pick("mlx5_0", 1, &p, &g) == 0);
	CHECK(g.index == 3 && g.roce_version == 2);
	CHECK(raw_is(&g, "::ffff:10.1.0.5"));
	CHECK_STR(g.netdev, "eth2");
	CHECK_STR(err, "");	/* every preference met: no note */

	CHECK(pick("mlx5_0", 1, NULL, &g) == 0 && g.index == 3);
	p = prefs(0, 0);	/* zero means default */
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 3);

	p = prefs(2, AF_INET6);
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 5);
	CHECK(raw_is(&g, "fd00::5"));
	p = prefs(1, AF_INET);
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 2);
	CHECK(g.roce_version == 1);
	CHECK_STR(err, "");
	p = prefs(1, AF_INET6);
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 4);

	p = prefs(3, AF_INET);
	CHECK(pick("mlx5_0", 1, &p, &g) == -EINVAL);
	CHECK_HAS(err, "roce_version 3");
}

static void test_gid_range(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);

	set_range(&p, "10.0.0.0/8");
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 3);
	set_range(&p, "10.1.0.5/32");
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 3);

	set_range(&p, "192.168.0.0/16");
	CHECK(pick("mlx5_0", 1, &p, &g) == -ENOENT);
	CHECK_HAS(err, "mlx5_0 port 1: 16 GID entries, none IPv4 RoCE v2 "
		       "inside 192.168.0.0/16 (found:");
	CHECK_HAS(err, "#0 fe80::5054:ff:fe12:3456 RoCE v1 link-local");
	CHECK_HAS(err, "#3 10.1.0.5 RoCE v2 outside range");
	CHECK_HAS(err, "#5 fd00::5 RoCE v2 outside range");
	CHECK_HAS(err, "; 10 zero, 0 unreadable)");

	/* An IPv6 range wins over the IPv4 preference, with a note. */
	set_range(&p, "fd00::/8");
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 5);
	CHECK_HAS(err, "using GID #5 (RoCE v2 fd00::5): no usable IPv4 entry");

	set_range(&p, "10.0.0.0/8");
	p.range_prefix = 33;
	CHECK(pick("mlx5_0", 1, &p, &g) == -EINVAL);
	CHECK_HAS(err, "prefix /33 does not fit an IPv4 address");
}

static void test_gid_forced(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);

	p.force_index = 4;
	CHECK(pick("mlx5_0", 1, &p, &g) == 0);
	CHECK(g.index == 4 && g.roce_version == 1 && raw_is(&g, "fd00::5"));
	CHECK_STR(g.netdev, "eth2");
	CHECK_STR(err, "");

	/* The override is taken as is, link-local too, with a warning. */
	p.force_index = 1;
	CHECK(pick("mlx5_0", 1, &p, &g) == 0 && g.index == 1);
	CHECK_HAS(err, "forced GID index 1 is link-local");

	p.force_index = 8;
	CHECK(pick("mlx5_0", 1, &p, &g) == -ENOENT);
	CHECK_HAS(err, "mlx5_0 port 1: forced GID index 8 is empty (all zero)");
	p.force_index = 99;
	CHECK(pick("mlx5_0", 1, &p, &g) == -ENOENT);
	CHECK_HAS(err, "forced GID index 99: no such entry");
	p.force_index = 100000;
	CHECK(pick("mlx5_0", 1, &p, &g) == -ENOENT);
	CHECK_HAS(err, "100000");
}

/*
 * What a container shows: only indexes 0, 3, 5 and 6 present (the others
 * belong to netdevs it cannot see), no ndevs, type files missing or
 * failing to read, zero entries at the end.
 */
static void tree_container(void)
{
	port("rxe0", 1, "4: ACTIVE", "Ethernet", "10 Gb/sec (1X QDR)");
	gid("rxe0", 1, 0, "fe80:0000:0000:0000:0250:56ff:fe8a:0001",
	    TYPE_NONE, NULL);
	gid("rxe0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a02:0007",
	    TYPE_BAD, NULL);
	gid("rxe0", 1, 5, ZERO_GID, TYPE_BAD, NULL);
	gid("rxe0", 1, 6, ZERO_GID, TYPE_NONE, NULL);
	put("rxe0/device/net/veth9/ifindex", "9");
	put("rxe0/device/net/eth0/ifindex", "2");
}

static void test_gid_container(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);
	struct vl_port_info pi;

	CHECK(pick("rxe0", 1, &p, &g) == 0);
	CHECK(g.index == 3 && g.roce_version == 0);
	CHECK(raw_is(&g, "::ffff:10.2.0.7"));
	CHECK_STR(g.netdev, "");
	CHECK_HAS(err, "rxe0 port 1: using GID #3 (RoCE v? 10.2.0.7): RoCE "
		       "version unknown (type file unreadable)");

	p.force_index = 3;
	CHECK(pick("rxe0", 1, &p, &g) == 0 && g.index == 3);
	p.force_index = 1;	/* a hole */
	CHECK(pick("rxe0", 1, &p, &g) == -ENOENT);
	CHECK_HAS(err, "forced GID index 1: no such entry");

	CHECK(vl_port_info(root, "rxe0", 1, &pi) == 0);
	CHECK(pi.active && pi.ethernet && pi.speed_mbps == 10000);
	CHECK_STR(pi.netdev, "eth0");	/* no ndevs: first of device/net */
}

/*
 * Unknown types rank between: below a readable v2, above a readable v1,
 * and an unreadable gid file is a hole like a missing one.
 */
static void tree_mixed(void)
{
	port("mlx5_1", 1, "4: ACTIVE", "Ethernet", "25 Gb/sec (1X EDR)");
	gid("mlx5_1", 1, 0, "0000:0000:0000:0000:0000:ffff:0a05:0001",
	    "IB/RoCE v1", "eth5");
	gid("mlx5_1", 1, 1, "0000:0000:0000:0000:0000:ffff:0a05:0001",
	    TYPE_BAD, "eth5");
	unreadable("mlx5_1/ports/1/gids/2");
	gid("mlx5_1", 1, 3, "not a gid", "RoCE v2", "eth5");
	port("mlx5_2", 1, "4: ACTIVE", "Ethernet", "25 Gb/sec (1X EDR)");
	gid("mlx5_2", 1, 0, "0000:0000:0000:0000:0000:ffff:0a05:0002",
	    "IB/RoCE v1", "eth6.100");
	gid("mlx5_2", 1, 1, "0000:0000:0000:0000:0000:ffff:0a05:0002",
	    TYPE_BAD, "eth6.100");
	gid("mlx5_2", 1, 2, "0000:0000:0000:0000:0000:ffff:0a05:0002",
	    "RoCE v2", "eth6.100");
	/* Ranks as #2 does: the lower index wins, whatever readdir says. */
	gid("mlx5_2", 1, 10, "0000:0000:0000:0000:0000:ffff:0a05:000a",
	    "RoCE v2", "eth6.200");
	gid("mlx5_2", 1, 9, "0000:0000:0000:0000:0000:ffff:0a05:0009",
	    "RoCE v1", "eth6.200");
}

static void test_gid_unknown_rank(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);

	CHECK(pick("mlx5_1", 1, &p, &g) == 0 && g.index == 1);
	CHECK(g.roce_version == 0);
	CHECK(pick("mlx5_2", 1, &p, &g) == 0 && g.index == 2);
	CHECK(g.roce_version == 2);
	CHECK_STR(g.netdev, "eth6.100");
	CHECK_STR(err, "");
	p = prefs(1, AF_INET);
	CHECK(pick("mlx5_2", 1, &p, &g) == 0 && g.index == 0);
}

static void tree_ipv6_only(void)
{
	port("rxe1", 1, "4: ACTIVE", "Ethernet", "10 Gb/sec (1X QDR)");
	gid("rxe1", 1, 0, "fe80:0000:0000:0000:0250:56ff:fe8a:0002",
	    "IB/RoCE v1", "veth1");
	gid("rxe1", 1, 1, "fe80:0000:0000:0000:0250:56ff:fe8a:0002",
	    "RoCE v2", "veth1");
	gid("rxe1", 1, 2, "2001:0db8:0000:0000:0000:0000:0000:0007",
	    "IB/RoCE v1", "veth1");
	gid("rxe1", 1, 3, "2001:0db8:0000:0000:0000:0000:0000:0007",
	    "RoCE v2", "veth1");
}

static void test_gid_ipv6_only(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);

	CHECK(pick("rxe1", 1, &p, &g) == 0 && g.index == 3);
	CHECK(g.roce_version == 2 && raw_is(&g, "2001:db8::7"));
	CHECK_HAS(err, "using GID #3 (RoCE v2 2001:db8::7): no usable IPv4 "
		       "entry");
	set_range(&p, "10.0.0.0/8");
	CHECK(pick("rxe1", 1, &p, &g) == -ENOENT);
	CHECK_HAS(err, "rxe1 port 1: 4 GID entries, none IPv4 RoCE v2 inside "
		       "10.0.0.0/8 (found:");
	CHECK_HAS(err, "#3 2001:db8::7 RoCE v2 outside range");
	CHECK_HAS(err, "#1 fe80::250:56ff:fe8a:2 RoCE v2 link-local");
}

static void tree_v1_only(void)
{
	port("rxe2", 1, "4: ACTIVE", "Ethernet", "10 Gb/sec (1X QDR)");
	gid("rxe2", 1, 0, "fe80:0000:0000:0000:0250:56ff:fe8a:0003",
	    "IB/RoCE v1", "veth2");
	gid("rxe2", 1, 1, "0000:0000:0000:0000:0000:ffff:0a03:0001",
	    "IB/RoCE v1", "veth2");
}

static void test_gid_v1_only(void)
{
	struct vl_gid g;
	struct vl_gid_prefs p = prefs(2, AF_INET);

	CHECK(pick("rxe2", 1, &p, &g) == 0 && g.index == 1);
	CHECK(g.roce_version == 1);
	CHECK_HAS(err, "rxe2 port 1: using GID #1 (RoCE v1 10.3.0.1): no "
		       "usable RoCE v2 entry");
}

/* An IB port: GID 0 carries the subnet prefix, which looks link-local. */
static void tree_ib(void)
{
	port("mlx5_4", 1, "4: ACTIVE", "InfiniBand", "100 Gb/sec (4X EDR)");
	gid("mlx5_4", 1, 0, "fe80:0000:0000:0000:0002:c903:0001:2345",
	    TYPE_BAD, NULL);
	zero_gids("mlx5_4", 1, 1, 3);
	put("mlx5_4/device/net/ib0/ifindex", "4");
	port("mlx5_4", 2, "1: DOWN", "InfiniBand", "2.5 Gb/sec (1X SDR)");
}

static void test_gid_ib(void)
{
	struct vl_gid g;
	struct vl_port_info pi;

	CHECK(pick("mlx5_4", 1, NULL, &g) == 0 && g.index == 0);
	CHECK(raw_is(&g, "fe80::2:c903:1:2345"));
	CHECK_STR(err, "");

	CHECK(vl_port_info(root, "mlx5_4", 1, &pi) == 0);
	CHECK(pi.active && !pi.ethernet && pi.speed_mbps == 100000);
	CHECK_STR(pi.netdev, "ib0");
	CHECK(vl_port_info(root, "mlx5_4", 2, &pi) == 0);
	CHECK(!pi.active && !pi.ethernet && pi.speed_mbps == 2500);
}

static void test_gid_nothing(void)
{
	struct vl_gid g;

	port("rxe3", 1, "4: ACTIVE", "Ethernet", NULL);
	zero_gids("rxe3", 1, 0, 3);
	unreadable("rxe3/ports/1/gids/4");
	CHECK(pick("rxe3", 1, NULL, &g) == -ENOENT);
	CHECK_STR(err, "rxe3 port 1: 5 GID entries, none IPv4 RoCE v2 (found: "
		       "4 zero, 1 unreadable)");

	port("rxe4", 1, "4: ACTIVE", "Ethernet", NULL);	/* empty gids/ */
	CHECK(pick("rxe4", 1, NULL, &g) == -ENOENT);
	CHECK_HAS(err, "0 GID entries");

	CHECK(pick("nosuch", 1, NULL, &g) == -ENOENT);
	CHECK_STR(err, "nosuch port 1: no such device or port");
	CHECK(pick("rxe3", 2, NULL, &g) == -ENOENT);
	CHECK(pick("../rxe3", 1, NULL, &g) == -EINVAL);
	CHECK(pick("rxe3", 0, NULL, &g) == -EINVAL);
}

/* ---- port facts ---- */

static void test_port_info(void)
{
	static const struct {
		const char *rate;
		int mbps;
	} rates[] = {
		{ "100 Gb/sec (4X EDR)", 100000 },
		{ "10 Gb/sec (1X QDR)", 10000 },
		{ "2.5 Gb/sec (1X SDR)", 2500 },
		{ "53.125 Gb/sec (1X HDR)", 53125 },
		{ "400 Gb/sec (4X NDR)", 400000 },
		{ "100 Mb/sec", 100 },
		{ "fast", 0 },
		{ "", 0 },
	};
	struct vl_port_info pi;

	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		put("rxe5/ports/1/rate", rates[i].rate);
		put("rxe5/ports/1/state", i % 2 ? "4: ACTIVE" : "2: INIT");
		CHECK(vl_port_info(root, "rxe5", 1, &pi) == 0);
		if (pi.speed_mbps != rates[i].mbps)
			fprintf(stderr, "rate \"%s\" -> %d, want %d\n",
				rates[i].rate, pi.speed_mbps, rates[i].mbps);
		CHECK(pi.speed_mbps == rates[i].mbps);
		CHECK(pi.active == (i % 2 == 1));
	}
	/* No link_layer, no rate, no GIDs, no state: an inactive IB port. */
	CHECK(vl_port_info(root, "rxe5", 1, &pi) == 0);
	unreadable("rxe6/ports/1");
	CHECK(vl_port_info(root, "rxe6", 1, &pi) == 0);
	CHECK(!pi.active && !pi.ethernet && pi.speed_mbps == 0);
	CHECK_STR(pi.netdev, "");

	/* The picked GID's ndev, not another GID's or device/net's. */
	port("mlx5_3", 1, "4: ACTIVE", "Ethernet", "25 Gb/sec (1X EDR)");
	gid("mlx5_3", 1, 0, "fe80:0000:0000:0000:0250:56ff:fe8a:0009",
	    "RoCE v2", "eth3");
	gid("mlx5_3", 1, 1, "0000:0000:0000:0000:0000:ffff:0a09:0001",
	    "RoCE v2", "eth3.200");
	put("mlx5_3/device/net/eth3/ifindex", "3");
	CHECK(vl_port_info(root, "mlx5_3", 1, &pi) == 0);
	CHECK_STR(pi.netdev, "eth3.200");
	/* Tables where every GID has the same ndev. */
	CHECK(vl_port_info(root, "mlx5_0", 1, &pi) == 0);
	CHECK_STR(pi.netdev, "eth2");
	CHECK(vl_port_info(root, "rxe1", 1, &pi) == 0);
	CHECK_STR(pi.netdev, "veth1");

	CHECK(vl_port_info(root, "mlx5_0", 9, &pi) == -ENOENT);
	CHECK(vl_port_info(root, "nosuch", 1, &pi) == -ENOENT);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof(root), "%s/ib-select.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 2;
	}
	atexit(cleanup);
	tree_normal();
	tree_container();
	tree_mixed();
	tree_ipv6_only();
	tree_v1_only();
	tree_ib();

	test_hca_prefix_and_ports();
	test_hca_exact_and_exclude();
	test_hca_fabric();
	test_hca_bad();
	test_gid_normal();
	test_gid_range();
	test_gid_forced();
	test_gid_container();
	test_gid_unknown_rank();
	test_gid_ipv6_only();
	test_gid_v1_only();
	test_gid_ib();
	test_gid_nothing();
	test_port_info();

	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	return 0;
}
