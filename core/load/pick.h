/* SPDX-License-Identifier: MIT */
#ifndef CORE_PICK_H
#define CORE_PICK_H

#include <stddef.h>

#include "fabric.h"
#include "handle.h"
#include "state.h"

/*
 * The member of `rail` that carries a connection to the peer `h`
 * describes: by the config's preference for the path class, listed in the
 * handle (a handle without members lists every module) and reaching its
 * addresses.  NULL with the reason in why, one sentence: each module's
 * refusal, or that no module is shared.
 */
const struct core_member *core_pick_member(const struct core_state *st,
					   const struct core_rail *rail,
					   const struct core_handle *h,
					   char *why, size_t cap);

#endif
