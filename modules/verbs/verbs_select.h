/* SPDX-License-Identifier: MIT */
/*
 * Which HCA ports ib-fabric uses and which GID on each: pure logic over a
 * sysfs tree (the real /sys/class/infiniband or a fake one in tests), so
 * the choices can be tested against what containers show.
 */
#ifndef VL_SELECT_H
#define VL_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes an error text for the caller of a selection function; err may be
 * NULL.  Shared by verbs_select.c and verbs_hca_list.c. */
void vl_seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* s[0..len) as a number of decimal digits only, at most max; -EINVAL else. */
int vl_parse_num(const char *s, size_t len, long long max, long long *out);

#define VL_HCA_MAX 32
#define VL_PORT_MAX 255
#define VL_NAME_MAX 64

/* One entry of an NCCL_IB_HCA-style list: name[:port[:fabricId]]. */
struct vl_hca_entry {
	char name[VL_NAME_MAX];
	int port;		/* 0: any */
	int64_t fabric_id;	/* -1: unset (dc * max_rails + rail) */
};

struct vl_hca_filter {
	bool exclude;		/* leading '^' */
	bool exact;		/* leading '=' (after '^' if both) */
	int n;			/* 0 and !exclude: every device */
	struct vl_hca_entry e[VL_HCA_MAX];
};

/* Parses "mlx5_0:1,mlx5_1", "^=mlx5_2", "rxe12:1:17"; -EINVAL with why. */
int vl_hca_parse(const char *spec, struct vl_hca_filter *out,
			char *err, size_t errlen);
/*
 * Does device `dev` port `port` pass?  Prefix match unless exact (so
 * "mlx5_1" also matches "mlx5_10", as in NCCL).  *fabric_id gets the
 * matching entry's fabric field, -1 if none.
 */
bool vl_hca_match(const struct vl_hca_filter *f,
			 const char *dev, int port, int64_t *fabric_id);

struct vl_gid_prefs {
	int roce_version;	/* preferred RoCE version, default 2 */
	int family;		/* AF_INET (default) or AF_INET6 */
	/* optional range, e.g. 10.0.0.0/8: prefix_len 0 = none */
	uint8_t range_family;
	uint8_t range_prefix;
	uint8_t range_ip[16];
	int force_index;	/* >= 0: use this index (the override) */
};

struct vl_gid {
	int index;
	uint8_t raw[16];
	int roce_version;	/* 1 or 2; 0 when the type file is unreadable */
	char netdev[VL_NAME_MAX];	/* gid_attrs/ndevs entry, "" if none */
};

/*
 * Picks the GID of `dev`/`port` under sysfs_root (".../infiniband"):
 * valid entries only (not zero, not fe80::/10 link-local), inside the range
 * if one is set; among those RoCE v2 over v1, then the preferred family
 * over the other, ties to the lowest index.  Unreadable type files
 * (containers) are tolerated: such an entry ranks below a readable
 * preferred version and above a readable other one, so with no readable
 * type at all the family decides.  Sparse tables (holes, unreadable
 * entries) are skipped.  -ENOENT with why when nothing fits.  InfiniBand
 * link layer: index 0.  A forced index is taken as is (link-local too) if
 * it holds a non-zero GID, else -ENOENT naming it.
 *
 * prefs NULL means the defaults (v2, AF_INET, no range, force_index -1); a
 * zero roce_version or family also means the default, but force_index must
 * be -1 for an automatic pick.  range_ip holds IPv4 in its first 4 bytes,
 * as struct mesh_addr does.  On success err is "" when the entry meets
 * every preference, else a note saying which it misses (say, only RoCE v1
 * found), for the caller to log.
 */
int vl_gid_pick(const char *sysfs_root, const char *dev, int port,
		       const struct vl_gid_prefs *prefs,
		       struct vl_gid *out, char *err, size_t errlen);

/*
 * Port facts from sysfs: state ACTIVE?, link layer, rate in Mbit/s, and the
 * netdev: that of the GID the default preferences pick, else the first
 * name under <dev>/device/net/, else any GID's ndev.  -ENOENT if the port
 * is absent.
 */
struct vl_port_info {
	bool active;
	bool ethernet;		/* RoCE; else InfiniBand */
	int speed_mbps;
	char netdev[VL_NAME_MAX];	/* "" if none */
};
int vl_port_info(const char *sysfs_root, const char *dev, int port,
			struct vl_port_info *out);

#endif
