/* SPDX-License-Identifier: MIT */
/*
 * What a resuming send stream keeps of the chunks it wrote until the
 * peer's kernel acknowledged them: a ring of plugin-owned bytes per
 * stream, so that a send completes once its chunks are written (the copy
 * survives a break and is what a new socket gets), not one round trip
 * later (docs/modules/tcp-xdc.md, "Long haul").  The bytes come from a
 * budget of the process (memory_max), taken whole when a ring is made and
 * given back when it goes, so what the plugin holds never passes it.
 *
 * No module state: the unit test links this file alone.  A ring belongs
 * to whoever holds its stream; a budget is shared (atomic).
 */
#ifndef TCP_XDC_KEEP_H
#define TCP_XDC_KEEP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes the plugin may hold, and holds, in all its rings. */
struct tcp_xdc_budget {
	uint64_t max;
	_Atomic uint64_t held;
};

/*
 * Takes up to `want` bytes, at least `least`: what it took (0 when not
 * even `least` is left).  held never passes max.
 */
uint64_t tcp_xdc_budget_take(struct tcp_xdc_budget *b, uint64_t want,
			     uint64_t least);
void tcp_xdc_budget_give(struct tcp_xdc_budget *b, uint64_t n);

/*
 * A ring of cap bytes; each piece is contiguous, pieces are freed oldest
 * first.  used counts the bytes from the oldest piece to the newest,
 * with the end that a piece skipped because it did not fit there until
 * that piece is freed; it is stored relaxed so that another thread may
 * read it for the metrics.
 */
struct tcp_xdc_keep {
	uint8_t *buf;			/* NULL: none */
	size_t cap;
	size_t head;			/* where the next piece goes */
	size_t tail;			/* where the oldest piece starts */
	size_t used;
};

/* Makes the ring's bytes (not touched until used); 0 or -ENOMEM. */
int tcp_xdc_keep_init(struct tcp_xdc_keep *k, size_t cap);
void tcp_xdc_keep_fini(struct tcp_xdc_keep *k);

/* Room for len contiguous bytes: the piece's offset, or false. */
bool tcp_xdc_keep_alloc(struct tcp_xdc_keep *k, size_t len, size_t *off);
/* Frees the oldest piece, which starts at off and is len long. */
void tcp_xdc_keep_free(struct tcp_xdc_keep *k, size_t off, size_t len);

/* Bytes of the ring in use, from any thread. */
static inline size_t tcp_xdc_keep_used(const struct tcp_xdc_keep *k)
{
	return __atomic_load_n(&k->used, __ATOMIC_RELAXED);
}

#endif
