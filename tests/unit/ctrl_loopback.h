/* SPDX-License-Identifier: MIT */
/*
 * A control connection over loopback, driven by hand from one thread:
 * the connector dials a listen of this process and the test routes and
 * accepts it, so that every step happens in an order the test chose.
 */
#ifndef MESH_TEST_CTRL_LOOPBACK_H
#define MESH_TEST_CTRL_LOOPBACK_H

#include <errno.h>
#include <netinet/in.h>

#include "check.h"
#include "ctrl.h"
#include "ctrl_priv.h"

#define NONCE 0x6d657368u
#define WAIT_NS (5 * 1000000000ll)

/* A connector dialing the listen on loopback, its dial started. */
static inline struct core_conn *dial_start(uint16_t port)
{
	struct core_handle h = { .nonce = NONCE, .naddrs = 1 };
	struct core_conn *c = NULL;

	h.addrs[0] = (struct mesh_addr){ .family = AF_INET, .port = port,
					 .ip = { 127, 0, 0, 1 } };
	CHECK(core_ctrl_dial(&h, NULL, 0, core_module_tag("example"), 0,
			     5000, &c) == 0);
	return c;
}

static inline struct core_conn *dial_acked(struct core_listen_comm *lc,
					   uint16_t port)
{
	struct core_conn *c = dial_start(port);
	int64_t end = core_now_ns() + WAIT_NS;
	int err;

	if (!c)
		return NULL;
	do {
		/* only routing: another accept of this listen polling */
		ctrl_accept_progress(lc);
		err = core_ctrl_dial_progress(c);
	} while (err == -EAGAIN && core_now_ns() < end);
	CHECK(err == 0);
	return c;
}

static inline int accept_within(struct core_listen_comm *lc, int64_t ns,
				struct core_conn **conn)
{
	int64_t end = core_now_ns() + ns;
	int err;

	do
		err = core_ctrl_accept(lc, 5000, conn);
	while (err == -EAGAIN && core_now_ns() < end);
	return err;
}

#endif
