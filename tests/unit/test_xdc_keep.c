/* SPDX-License-Identifier: MIT */
/*
 * tcp-xdc's kept bytes (tcp_xdc_keep.c): the ring of a send stream filled,
 * emptied and wrapped, with a piece that skips the end; pieces that never
 * overlap one that is still kept, over a long random run checked against a
 * model; and the process's budget, which two threads taking and giving
 * back never push past its limit.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tcp_xdc_keep.h"

static void test_fill_and_wrap(void)
{
	struct tcp_xdc_keep k;
	size_t a, b, c, d;

	CHECK(tcp_xdc_keep_init(&k, 100) == 0 && k.buf);
	CHECK(!tcp_xdc_keep_alloc(&k, 101, &a));	/* never fits */
	CHECK(tcp_xdc_keep_alloc(&k, 40, &a) && a == 0);
	CHECK(tcp_xdc_keep_alloc(&k, 40, &b) && b == 40);
	CHECK(tcp_xdc_keep_used(&k) == 80);
	/* 20 left at the end, nothing at the start yet */
	CHECK(!tcp_xdc_keep_alloc(&k, 30, &c));
	CHECK(tcp_xdc_keep_alloc(&k, 0, &c));		/* a 0-byte chunk */
	tcp_xdc_keep_free(&k, c, 0);
	CHECK(tcp_xdc_keep_used(&k) == 80);
	tcp_xdc_keep_free(&k, a, 40);
	CHECK(tcp_xdc_keep_used(&k) == 40);
	/* 30 do not fit the end: they go to the start, the end is skipped */
	CHECK(tcp_xdc_keep_alloc(&k, 30, &c) && c == 0);
	CHECK(tcp_xdc_keep_used(&k) == 40 + 20 + 30);
	/* between the new piece and the one still kept: 10 */
	CHECK(!tcp_xdc_keep_alloc(&k, 11, &d));
	CHECK(tcp_xdc_keep_alloc(&k, 10, &d) && d == 30);
	CHECK(tcp_xdc_keep_used(&k) == 100);
	CHECK(!tcp_xdc_keep_alloc(&k, 1, &a));		/* full */
	tcp_xdc_keep_free(&k, b, 40);
	/* the skipped end counts until the piece that skipped it goes */
	CHECK(tcp_xdc_keep_used(&k) == 60);
	tcp_xdc_keep_free(&k, c, 30);
	CHECK(tcp_xdc_keep_used(&k) == 10);
	tcp_xdc_keep_free(&k, d, 10);
	CHECK(tcp_xdc_keep_used(&k) == 0);
	/* empty: the next piece starts at the start again */
	CHECK(tcp_xdc_keep_alloc(&k, 100, &a) && a == 0);
	tcp_xdc_keep_free(&k, a, 100);
	tcp_xdc_keep_fini(&k);
	CHECK(!k.buf && !k.cap);
	/* no ring: nothing fits */
	CHECK(!tcp_xdc_keep_alloc(&k, 0, &a));
}

/* A piece as the model keeps it. */
struct piece {
	size_t off, len;
	uint8_t fill;
};

/* Random pieces taken and freed oldest first: no live piece is ever
 * written over, used is never above the ring, and it counts what the
 * model says it should. */
static void test_random_against_model(void)
{
	enum { CAP = 1000, MAXP = 64, ROUNDS = 200000 };
	struct piece live[MAXP];
	struct tcp_xdc_keep k;
	unsigned int seed = 42;
	int head = 0, n = 0;
	long fits = 0, misses = 0;

	CHECK(tcp_xdc_keep_init(&k, CAP) == 0);
	for (int r = 0; r < ROUNDS && !failures; r++) {
		bool take = n < MAXP && (n == 0 || rand_r(&seed) % 3);

		if (take) {
			struct piece *p = &live[(head + n) % MAXP];
			size_t len = (size_t)(rand_r(&seed) % 300);

			if (!tcp_xdc_keep_alloc(&k, len, &p->off)) {
				misses++;
				/* an empty ring fits any piece */
				CHECK(n > 0);
				continue;
			}
			fits++;
			CHECK(p->off + len <= CAP);
			p->len = len;
			p->fill = (uint8_t)r;
			memset(k.buf + p->off, p->fill, len);
			n++;
		} else {
			struct piece *p = &live[head];

			for (size_t i = 0; i < p->len; i++)
				if (k.buf[p->off + i] != p->fill) {
					CHECK(!"a kept piece was written over");
					break;
				}
			tcp_xdc_keep_free(&k, p->off, p->len);
			head = (head + 1) % MAXP;
			n--;
		}
		CHECK(tcp_xdc_keep_used(&k) <= CAP);
		if (!n)
			CHECK(tcp_xdc_keep_used(&k) == 0);
	}
	CHECK(fits > ROUNDS / 4 && misses > 0);
	tcp_xdc_keep_fini(&k);
}

/* The model's misses above are real misses: a ring with a hole as large
 * as asked at the end or, wrapping, at the start, takes it. */
static void test_no_false_miss(void)
{
	struct tcp_xdc_keep k;
	size_t a, b, c;

	CHECK(tcp_xdc_keep_init(&k, 64) == 0);
	CHECK(tcp_xdc_keep_alloc(&k, 32, &a));
	CHECK(tcp_xdc_keep_alloc(&k, 32, &b));
	tcp_xdc_keep_free(&k, a, 32);
	CHECK(tcp_xdc_keep_alloc(&k, 32, &c) && c == 0);	/* exact fit */
	tcp_xdc_keep_free(&k, b, 32);
	tcp_xdc_keep_free(&k, c, 32);
	tcp_xdc_keep_fini(&k);
}

struct taker {
	struct tcp_xdc_budget *b;
	_Atomic int *over;
	unsigned int seed;
};

static void *taker_main(void *arg)
{
	struct taker *t = arg;

	for (int i = 0; i < 200000; i++) {
		uint64_t want = 1 + rand_r(&t->seed) % 4000;
		uint64_t got = tcp_xdc_budget_take(t->b, want, want / 2);

		if (got && (got > want || got < want / 2))
			atomic_fetch_add(t->over, 1);
		if (atomic_load(&t->b->held) > t->b->max)
			atomic_fetch_add(t->over, 1);
		if (got)
			tcp_xdc_budget_give(t->b, got);
	}
	return NULL;
}

static void test_budget(void)
{
	struct tcp_xdc_budget b = { .max = 10000 };
	struct taker t[2];
	pthread_t tid[2];
	_Atomic int over = 0;

	CHECK(tcp_xdc_budget_take(&b, 6000, 1) == 6000);
	/* 4000 left: a part, or nothing when less than least is left */
	CHECK(tcp_xdc_budget_take(&b, 6000, 5000) == 0);
	CHECK(tcp_xdc_budget_take(&b, 6000, 1000) == 4000);
	CHECK(atomic_load(&b.held) == 10000);
	CHECK(tcp_xdc_budget_take(&b, 1, 1) == 0);
	tcp_xdc_budget_give(&b, 10000);
	CHECK(atomic_load(&b.held) == 0);

	for (int i = 0; i < 2; i++) {
		t[i] = (struct taker){ .b = &b, .over = &over,
				       .seed = (unsigned int)i + 1 };
		CHECK(pthread_create(&tid[i], NULL, taker_main, &t[i]) == 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(tid[i], NULL);
	CHECK(atomic_load(&over) == 0);
	CHECK(atomic_load(&b.held) == 0);

	/* a budget of 0 gives nothing */
	b.max = 0;
	CHECK(tcp_xdc_budget_take(&b, 1, 0) == 0);
}

int main(void)
{
	test_fill_and_wrap();
	test_random_against_model();
	test_no_false_miss();
	test_budget();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
