/* SPDX-License-Identifier: MIT */
/*
 * NCCL's init and finalize: the process state is built at the first init
 * and freed at the last finalize, counted, under one lock; the accessors
 * the other net calls read it through.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "config.h"
#include "ctrl.h"
#include "layer.h"
#include "core_log.h"
#include "net_priv.h"

static pthread_mutex_t mesh_lock = PTHREAD_MUTEX_INITIALIZER;
static struct core_state *mesh_state;
static int mesh_refs;
static bool nccl_offered;

struct mesh_ctx {
	uint64_t comm_id;
};

static void teardown(void)
{
	/* connects NCCL left in progress, while their modules are here */
	core_connects_drop(NULL);
	/* modules first: a layered one stops using its channels and
	 * service listeners in fini, before they close */
	core_layer_unbind(mesh_state);
	core_state_free(mesh_state);
	mesh_state = NULL;
	core_layer_close_services();
	core_ctrl_shutdown();
	core_ctrl_set_auth_key(NULL);
}

int mesh_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger)
{
	struct mesh_ctx *c = calloc(1, sizeof(*c));
	int err = 0;

	*ctx = NULL;
	if (!c)
		return -ENOMEM;
	core_log_set_nccl(logger);
	pthread_mutex_lock(&mesh_lock);
	if (!mesh_state) {
		mesh_state = core_state_build(NULL);
		if (!mesh_state)
			err = -ENOMEM;
	}
	if (!err && !mesh_state->usable) {
		CORE_WARN("init failed: the configuration of %s is not usable "
			  "(reasons above; `meshinfo` shows them too)",
			  core_config_path(mesh_state->cfg));
		err = -ENOTSUP;	/* a configuration error (plugin.c) */
	}
	if (err && !mesh_refs && mesh_state)
		teardown();	/* the next init reads the config again */
	if (!err) {
		core_ctrl_set_auth_key(&mesh_state->auth_key);
		if (!mesh_refs)
			err = core_layer_start(mesh_state);
	}
	if (!err && !nccl_offered) {
		nccl_offered = true;	/* NCCL reads it once per process */
		core_offer_nccl_buffsize(mesh_state);
	}
	if (err && !mesh_refs && mesh_state)
		teardown();
	if (!err) {
		mesh_refs++;
		c->comm_id = comm_id;
		*ctx = c;
	}
	pthread_mutex_unlock(&mesh_lock);
	if (err)
		free(c);
	return err;
}

int mesh_finalize(void *ctx)
{
	if (!ctx)
		return 0;	/* NCCL 2.28 finalizes after a failed init */
	pthread_mutex_lock(&mesh_lock);
	core_connects_drop(ctx);
	free(ctx);
	if (mesh_refs > 0 && --mesh_refs == 0)
		teardown();
	pthread_mutex_unlock(&mesh_lock);
	return 0;
}

/* NCCL's v10 path has no finalize: unloading the library must still leave
 * nothing behind. */
__attribute__((destructor)) static void mesh_unload(void)
{
	pthread_mutex_lock(&mesh_lock);
	if (mesh_state)
		teardown();
	mesh_refs = 0;
	pthread_mutex_unlock(&mesh_lock);
}

const struct core_state *mesh_current_state(void)
{
	return mesh_state;
}

void mesh_tuning(struct core_tuning *tuning)
{
	pthread_mutex_lock(&mesh_lock);
	*tuning = mesh_state ? mesh_state->tuning : (struct core_tuning){ 0 };
	pthread_mutex_unlock(&mesh_lock);
}

int mesh_devices(int *ndev)
{
	*ndev = mesh_state ? mesh_state->nrails : 0;
	return mesh_state ? 0 : -EINVAL;
}

const struct core_rail *mesh_rail(int dev)
{
	if (!mesh_state || dev < 0 || dev >= mesh_state->nrails)
		return NULL;
	return &mesh_state->rails[dev];
}
