/* SPDX-License-Identifier: MIT */
/*
 * The listen handle NCCL carries between ranks (128 bytes at most):
 * magic and version, a nonce naming the listener, the listener's fabricId,
 * the modules of its rail, and the addresses a peer may dial.  The last 8
 * bytes (the slot) are left to the connecting side, because NCCL hands the
 * same buffer to every call of one connect: connect writes there the key of
 * its connect in progress (core/mesh.c).  The slot arrives from the peer
 * with the rest of the handle, so it is data like the rest: never a
 * pointer, only a key that connect looks up in its own table and ignores
 * (starting afresh) when it names no connect of this process started for
 * this handle and device.  Encode zeroes it; decode never reads it.
 */
#ifndef CORE_HANDLE_H
#define CORE_HANDLE_H

#include <stdint.h>

#include <nccl-mesh/module.h>

#define CORE_HANDLE_SIZE 128
#define CORE_HANDLE_MAGIC 0x4853454du	/* "MESH" little-endian */
#define CORE_HANDLE_VERSION 1
#define CORE_HANDLE_MEMBERS_MAX 4
#define CORE_HANDLE_ADDRS_MAX 11
#define CORE_HANDLE_STATE_OFFSET 120

struct core_handle {
	uint64_t nonce;
	uint64_t fabric_id;
	int nmembers;
	uint16_t members[CORE_HANDLE_MEMBERS_MAX];	/* core_module_tag() */
	int naddrs;
	struct mesh_addr addrs[CORE_HANDLE_ADDRS_MAX];
};

/*
 * Encodes as many addresses as fit (IPv4 take 8 bytes, IPv6 20); returns
 * how many were encoded, or -E2BIG when not even one fits.
 */
int core_handle_encode(const struct core_handle *h, uint8_t *buf);
/*
 * -EPROTO with a reason in `why` for anything that is not our handle.
 * Reads only the first CORE_HANDLE_STATE_OFFSET bytes: a relay carries
 * handles without their slot.
 */
int core_handle_decode(const uint8_t *buf, struct core_handle *h,
		       const char **why);
/* A short stable tag for a module name, carried in handles and hellos. */
uint16_t core_module_tag(const char *name);

#endif
