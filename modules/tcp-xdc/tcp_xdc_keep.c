/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's kept bytes (tcp_xdc_keep.h): the budget of the process and
 * the ring of one send stream.
 */
#include <errno.h>
#include <stdlib.h>

#include "tcp_xdc_keep.h"

uint64_t tcp_xdc_budget_take(struct tcp_xdc_budget *b, uint64_t want,
			     uint64_t least)
{
	uint64_t held = atomic_load(&b->held);

	for (;;) {
		uint64_t left = held < b->max ? b->max - held : 0;
		uint64_t take = want < left ? want : left;

		if (!take || take < least)
			return 0;
		if (atomic_compare_exchange_weak(&b->held, &held, held + take))
			return take;
	}
}

void tcp_xdc_budget_give(struct tcp_xdc_budget *b, uint64_t n)
{
	atomic_fetch_sub(&b->held, n);
}

int tcp_xdc_keep_init(struct tcp_xdc_keep *k, size_t cap)
{
	/* malloc maps a ring this large afresh: its pages cost nothing
	 * until a chunk lands there */
	*k = (struct tcp_xdc_keep){ .buf = cap ? malloc(cap) : NULL,
				    .cap = cap };
	return cap && !k->buf ? -ENOMEM : 0;
}

void tcp_xdc_keep_fini(struct tcp_xdc_keep *k)
{
	free(k->buf);
	*k = (struct tcp_xdc_keep){ 0 };
}

static void set_used(struct tcp_xdc_keep *k, size_t used)
{
	__atomic_store_n(&k->used, used, __ATOMIC_RELAXED);
}

bool tcp_xdc_keep_alloc(struct tcp_xdc_keep *k, size_t len, size_t *off)
{
	if (!k->buf || len > k->cap)
		return false;
	if (!len) {
		*off = k->head;
		return true;
	}
	if (!k->used)
		k->head = k->tail = 0;
	if (k->head > k->tail || !k->used) {
		/* free: [head, cap) and [0, tail) */
		if (k->cap - k->head >= len) {
			*off = k->head;
			k->head += len;
			set_used(k, k->used + len);
			return true;
		}
		if (k->tail < len)
			return false;
		/* the end is skipped: it counts as used until this piece
		 * is freed */
		*off = 0;
		set_used(k, k->used + (k->cap - k->head) + len);
		k->head = len;
		return true;
	}
	/* free: [head, tail), nothing when head == tail (full) */
	if (k->tail - k->head < len)
		return false;
	*off = k->head;
	k->head += len;
	set_used(k, k->used + len);
	return true;
}

void tcp_xdc_keep_free(struct tcp_xdc_keep *k, size_t off, size_t len)
{
	if (!len)
		return;
	if (off == k->tail) {
		k->tail += len;
		set_used(k, k->used - len);
	} else {
		/* it wrapped: the end after tail was skipped */
		set_used(k, k->used - (k->cap - k->tail) - len);
		k->tail = len;
	}
	if (!k->used)
		k->head = k->tail = 0;
}
