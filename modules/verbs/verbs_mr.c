/* SPDX-License-Identifier: MIT */
/*
 * Memory registration.  A comm may run over several devices (links), so a
 * handle holds one region per link; regions are cached per device and
 * shared by every handle that covers the same pages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs.h"

#define IB_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		   IBV_ACCESS_REMOTE_READ)

static uintptr_t page_size(void)
{
	static uintptr_t ps;

	if (!ps)
		ps = (uintptr_t)sysconf(_SC_PAGESIZE);
	return ps;
}

/* Caller holds dev->mr_lock. */
static struct ib_mr_ent *mr_lookup(struct vl_dev *d, uintptr_t start,
				   uintptr_t end)
{
	for (struct ib_mr_ent *e = d->mrs; e; e = e->next)
		if (e->cached && e->start <= start && end <= e->end)
			return e;
	return NULL;
}

/* Caller holds dev->mr_lock. */
static struct ib_mr_ent *mr_insert(struct vl_dev *d, struct ibv_mr *mr,
				   uintptr_t start, uintptr_t end, bool cached)
{
	struct ib_mr_ent *e = calloc(1, sizeof(*e));

	if (!e) {
		ibv_dereg_mr(mr);
		return NULL;
	}
	e->dev = d;
	e->start = start;
	e->end = end;
	e->mr = mr;
	e->refs = 1;
	e->cached = cached;
	e->next = d->mrs;
	d->mrs = e;
	return e;
}

static void mr_put(struct ib_mr_ent *e)
{
	struct vl_dev *d = e->dev;
	struct ib_mr_ent **pp;

	pthread_mutex_lock(&d->mr_lock);
	if (--e->refs > 0) {
		pthread_mutex_unlock(&d->mr_lock);
		return;
	}
	for (pp = &d->mrs; *pp && *pp != e; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = e->next;
	pthread_mutex_unlock(&d->mr_lock);
	if (ibv_dereg_mr(e->mr))
		MESH_WARN("%s: cannot deregister memory: %s", d->name,
			  strerror(errno));
	free(e);
}

/* What to register: plain memory (fd < 0) or a dma-buf. */
struct mr_src {
	void *data;
	size_t size;
	int type;
	int fd;
	uint64_t offset;
};

static struct ib_mr_ent *mr_get_plain(struct vl_dev *d, bool cache,
				      const struct mr_src *s)
{
	uintptr_t ps = page_size();
	uintptr_t start = (uintptr_t)s->data & ~(ps - 1);
	uintptr_t end = ((uintptr_t)s->data + s->size + ps - 1) & ~(ps - 1);
	struct ib_mr_ent *e;
	struct ibv_mr *mr;

	if (end == start)
		end = start + ps;
	pthread_mutex_lock(&d->mr_lock);
	e = cache ? mr_lookup(d, start, end) : NULL;
	if (e) {
		e->refs++;
	} else {
		mr = ibv_reg_mr(d->pd, (void *)start, end - start, IB_ACCESS);
		if (!mr)
			MESH_WARN("%s: cannot register %zu bytes at %p: %s",
				  d->name, s->size, s->data, strerror(errno));
		e = mr ? mr_insert(d, mr, start, end, cache) : NULL;
	}
	pthread_mutex_unlock(&d->mr_lock);
	return e;
}

/* Never cached: another fd may later back the same addresses. */
static struct ib_mr_ent *mr_get_dmabuf(struct vl_dev *d,
				       const struct mr_src *s)
{
	struct ib_mr_ent *e;
	struct ibv_mr *mr;

	if (!d->dmabuf) {
		MESH_WARN("%s: dma-buf registration is not supported", d->name);
		return NULL;
	}
	mr = ibv_reg_dmabuf_mr(d->pd, s->offset, s->size,
			       (uint64_t)(uintptr_t)s->data, s->fd, IB_ACCESS);
	if (!mr) {
		MESH_WARN("%s: cannot register dma-buf fd %d (%zu bytes at offset %llu): %s",
			  d->name, s->fd, s->size,
			  (unsigned long long)s->offset, strerror(errno));
		return NULL;
	}
	pthread_mutex_lock(&d->mr_lock);
	e = mr_insert(d, mr, (uintptr_t)s->data,
		      (uintptr_t)s->data + s->size, false);
	pthread_mutex_unlock(&d->mr_lock);
	return e;
}

static int mh_release(struct vl_mh *mh)
{
	for (int l = 0; l < mh->n; l++)
		if (mh->ent[l])
			mr_put(mh->ent[l]);
	free(mh);
	return 0;
}

/* One region on every link's device. */
static int mh_register(struct vl_comm *c, const struct mr_src *s,
		       void **mhandle)
{
	struct vl_mh *mh = calloc(1, sizeof(*mh));

	*mhandle = NULL;
	if (!mh)
		return -ENOMEM;
	mh->start = (uintptr_t)s->data;
	mh->end = (uintptr_t)s->data + s->size;
	for (int l = 0; l < c->nlinks; l++) {
		struct vl_dev *d = c->links[l];

		if (s->type != MESH_PTR_HOST &&
		    !(s->type == MESH_PTR_CUDA && d->gpu)) {
			MESH_WARN("%s: cannot register pointer type %d (host%s only)",
				  d->name, s->type, d->gpu ? " and CUDA" : "");
			mh_release(mh);
			return -EINVAL;
		}
		mh->ent[mh->n] = s->fd >= 0 && s->type != MESH_PTR_HOST ?
				 mr_get_dmabuf(d, s) :
				 mr_get_plain(d, c->ctx->mr_cache, s);
		if (!mh->ent[mh->n]) {
			mh_release(mh);
			return -EIO;
		}
		mh->n++;
	}
	*mhandle = mh;
	return 0;
}

int vl_reg_mr(void *comm, void *data, size_t size, int type,
		 void **mhandle)
{
	struct mr_src s = { data, size, type, -1, 0 };

	return mh_register(comm, &s, mhandle);
}

int vl_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			uint64_t offset, int fd, void **mhandle)
{
	struct mr_src s = { data, size, type, fd, offset };

	return mh_register(comm, &s, mhandle);
}

int vl_dereg_mr(void *comm, void *mhandle)
{
	(void)comm;
	return mhandle ? mh_release(mhandle) : 0;
}
