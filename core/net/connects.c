/* SPDX-License-Identifier: MIT */
/*
 * The connects in progress, between NCCL's calls to connect, and how one
 * that will not finish is freed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "net_priv.h"

void core_connecting_free(struct core_connecting *cs)
{
	if (cs->layer) {
		if (cs->route_state)
			cs->layer->desc->route_abandon(cs->layer->mctx,
						       cs->route_state);
	} else if (!cs->mcomm) {
		cs->member->module->desc->abandon(cs->member->module->mctx,
						  &cs->conn->ctrl);
	}
	core_conn_free(cs->conn);
	free(cs);
}

/*
 * Connects in progress.  NCCL calls connect with the same handle buffer
 * until it gives a comm, and the handle leaves us room (its slot, handle.h)
 * to find our state again.  But the whole handle, slot included, came from
 * the peer through a bootstrap nobody authenticates: the slot only ever
 * holds a key into this table, and an entry answers to it only for the
 * context, device and handle bytes it was started for.  A slot that names
 * no entry is not ours: a fresh connect starts and overwrites it.
 *
 * The table is the process's, beside net_state: a finalize frees the
 * entries of its context (connects NCCL gave up on), the last one (or the
 * library's unload) all of them, while their modules are still loaded.
 * NCCL connects from more than one thread for different comms; connect is
 * setup, not the data path, so one mutex guards the table, never held
 * across a module's call.  Keys are random, so a chain holds about
 * n / CONNECTS_BUCKETS entries whatever the peers send.
 */
#define CONNECTS_BUCKETS 4096u
#define CONNECTS_MAX (1 << 20)

static pthread_mutex_t connects_lock = PTHREAD_MUTEX_INITIALIZER;
static struct connect_entry *connects[CONNECTS_BUCKETS];
static int nconnects;

static struct connect_entry **connects_bucket(uint64_t key)
{
	return &connects[key % CONNECTS_BUCKETS];
}

static struct connect_entry *connects_find(uint64_t key)
{
	struct connect_entry *e = *connects_bucket(key);

	while (e && e->key != key)
		e = e->next;
	return e;
}

/*
 * The connect this handle's slot names, marked busy: 0; -EBUSY while
 * another call steps it; -ENOENT when the slot names none of ours.
 */
int core_connects_claim(const void *ctx, int dev, const uint8_t *handle,
			  struct connect_entry **out)
{
	struct connect_entry *e;
	uint64_t key;
	int err = -ENOENT;

	memcpy(&key, handle + CORE_HANDLE_STATE_OFFSET, sizeof(key));
	if (!key)
		return -ENOENT;
	pthread_mutex_lock(&connects_lock);
	e = connects_find(key);
	if (e && e->ctx == ctx && e->dev == dev &&
	    !memcmp(e->handle, handle, sizeof(e->handle))) {
		err = e->busy ? -EBUSY : 0;
		e->busy = true;
		*out = e;
	}
	pthread_mutex_unlock(&connects_lock);
	if (err == -ENOENT)
		CORE_INFO("connect: the handle's slot holds %#llx, no connect "
			  "of ours: a new one starts", (unsigned long long)key);
	return err;
}

/* Files a connect just started, busy, under a fresh key. */
int core_connects_add(const void *ctx, int dev, const uint8_t *handle,
			struct core_connecting *cs, struct connect_entry **out)
{
	struct connect_entry *e = calloc(1, sizeof(*e));
	struct connect_entry **b;

	if (!e)
		return -ENOMEM;
	e->ctx = ctx;
	e->dev = dev;
	e->busy = true;
	memcpy(e->handle, handle, sizeof(e->handle));
	e->cs = cs;
	pthread_mutex_lock(&connects_lock);
	if (nconnects >= CONNECTS_MAX) {
		pthread_mutex_unlock(&connects_lock);
		CORE_WARN("connect: %d connects in progress already",
			  nconnects);
		free(e);
		return -EMFILE;
	}
	do
		e->key = core_random_u64();
	while (!e->key || connects_find(e->key));
	b = connects_bucket(e->key);
	e->next = *b;
	*b = e;
	nconnects++;
	pthread_mutex_unlock(&connects_lock);
	*out = e;
	return 0;
}

static void connects_unlink(struct connect_entry *e)
{
	struct connect_entry **p = connects_bucket(e->key);

	while (*p != e)
		p = &(*p)->next;
	*p = e->next;
	nconnects--;
}

/* The call that claimed e is done with it: kept for the next call, or
 * (finished or failed) gone. */
void core_connects_release(struct connect_entry *e, bool done)
{
	pthread_mutex_lock(&connects_lock);
	if (done)
		connects_unlink(e);
	else
		e->busy = false;
	pthread_mutex_unlock(&connects_lock);
	if (done) {
		core_connecting_free(e->cs);
		free(e);
	}
}

/*
 * Frees the connects of ctx (NULL: every one) that NCCL left in progress.
 * NCCL finalizes a context once no call on it runs; an entry a call still
 * steps is left to that call, which frees it when it ends.  The last
 * finalize (NULL) frees everything: no call may run across it.
 */
void core_connects_drop(const void *ctx)
{
	struct connect_entry *gone = NULL;

	pthread_mutex_lock(&connects_lock);
	for (unsigned i = 0; i < CONNECTS_BUCKETS; i++) {
		struct connect_entry **p = &connects[i];

		while (*p) {
			struct connect_entry *e = *p;

			if (ctx && (e->ctx != ctx || e->busy)) {
				p = &e->next;
				continue;
			}
			*p = e->next;
			nconnects--;
			e->next = gone;
			gone = e;
		}
	}
	pthread_mutex_unlock(&connects_lock);
	while (gone) {
		struct connect_entry *e = gone;

		gone = e->next;
		core_connecting_free(e->cs);
		free(e);
	}
}
