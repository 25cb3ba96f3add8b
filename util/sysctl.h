/* SPDX-License-Identifier: MIT */
/*
 * A kernel setting of one to three numbers, read from /proc/sys, for what
 * sizes itself by the host's limits (tcp-xdc's window, meshinfo's window
 * finding): both must read the same number the same way.
 */
#ifndef UTIL_SYSCTL_H
#define UTIL_SYSCTL_H

#include <stdint.h>

/*
 * The last number of the file at path (tcp_wmem's maximum, wmem_max's
 * one value, tcp_slow_start_after_idle's flag); dflt where it cannot be
 * read or holds no number.
 */
uint64_t util_sysctl_last(const char *path, uint64_t dflt);

#endif
