/* SPDX-License-Identifier: MIT */
/*
 * Which HCA ports ib-fabric uses and which GID on each: pure logic over a
 * sysfs tree (the real /sys/class/infiniband or a fake one in tests), so
 * the choices can be tested against what containers show.
 */
#ifndef IB_FABRIC_SELECT_H
#define IB_FABRIC_SELECT_H

#include <stdbool.h>
#include <stdint.h>

#define IB_FABRIC_HCA_MAX 32
#define IB_FABRIC_NAME_MAX 64

/* One entry of an NCCL_IB_HCA-style list: name[:port[:fabricId]]. */
struct ib_fabric_hca_entry {
	char name[IB_FABRIC_NAME_MAX];
	int port;		/* 0: any */
	int64_t fabric_id;	/* -1: unset (dc * max_rails + rail) */
};

struct ib_fabric_hca_filter {
	bool exclude;		/* leading '^' */
	bool exact;		/* leading '=' (after '^' if both) */
	int n;			/* 0 and !exclude: every device */
	struct ib_fabric_hca_entry e[IB_FABRIC_HCA_MAX];
};

/* Parses "mlx5_0:1,mlx5_1", "^=mlx5_2", "rxe12:1:17"; -EINVAL with why. */
int ib_fabric_hca_parse(const char *spec, struct ib_fabric_hca_filter *out,
			char *err, size_t errlen);
/*
 * Does device `dev` port `port` pass?  Prefix match unless exact (so
 * "mlx5_1" also matches "mlx5_10", as in NCCL).  *fabric_id gets the
 * matching entry's fabric field, -1 if none.
 */
bool ib_fabric_hca_match(const struct ib_fabric_hca_filter *f,
			 const char *dev, int port, int64_t *fabric_id);

struct ib_fabric_gid_prefs {
	int roce_version;	/* preferred RoCE version, default 2 */
	int family;		/* AF_INET (default) or AF_INET6 */
	/* optional range, e.g. 10.0.0.0/8: prefix_len 0 = none */
	uint8_t range_family;
	uint8_t range_prefix;
	uint8_t range_ip[16];
	int force_index;	/* >= 0: use this index (the override) */
};

struct ib_fabric_gid {
	int index;
	uint8_t raw[16];
	int roce_version;	/* 1 or 2; 0 when the type file is unreadable */
};

/*
 * Picks the GID of `dev`/`port` under sysfs_root (".../infiniband"):
 * valid entries only (not zero, not fe80::/10 link-local), then RoCE v2
 * over v1, the preferred family over the other, inside the range if one is
 * set; unreadable type files (containers) are tolerated and count as the
 * preferred version only when no entry has a readable type; sparse tables
 * (holes, unreadable entries) are skipped.  -ENOENT with why when nothing
 * fits.  For InfiniBand link layer: index 0.
 */
int ib_fabric_gid_pick(const char *sysfs_root, const char *dev, int port,
		       const struct ib_fabric_gid_prefs *prefs,
		       struct ib_fabric_gid *out, char *err, size_t errlen);

/* Port facts from sysfs: state ACTIVE?, link layer, rate in Mbit/s. */
struct ib_fabric_port_info {
	bool active;
	bool ethernet;		/* RoCE; else InfiniBand */
	int speed_mbps;
	char netdev[IB_FABRIC_NAME_MAX];	/* "" if none */
};
int ib_fabric_port_info(const char *sysfs_root, const char *dev, int port,
			struct ib_fabric_port_info *out);

#endif
