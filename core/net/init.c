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
#include "metrics.h"
#include "net_priv.h"

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static struct core_state *net_state;
static int net_refs;
static bool nccl_offered;

struct core_net_ctx {
	uint64_t comm_id;
};

static void teardown(void)
{
	/* the file's last counts, and the counters of the comms NCCL left
	 * open, while their modules are here */
	core_metrics_file_stop();
	core_metrics_detach_all();
	/* connects NCCL left in progress, while their modules are here */
	core_connects_drop(NULL);
	/* modules first: a layered one stops using its channels and
	 * service listeners in fini, before they close */
	core_layer_unbind(net_state);
	core_state_free(net_state);
	net_state = NULL;
	core_layer_close_services();
	core_ctrl_shutdown();
	core_ctrl_set_auth_key(NULL);
	core_rtt_forget();
}

int core_net_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger)
{
	struct core_net_ctx *c = calloc(1, sizeof(*c));
	int err = 0;

	*ctx = NULL;
	if (!c)
		return -ENOMEM;
	core_log_set_nccl(logger);
	pthread_mutex_lock(&net_lock);
	if (!net_state) {
		net_state = core_state_build(NULL);
		if (!net_state)
			err = -ENOMEM;
	}
	if (!err && !net_state->usable) {
		CORE_WARN("init failed: the configuration of %s is not usable "
			  "(reasons above; `meshinfo` shows them too)",
			  core_config_path(net_state->cfg));
		err = -ENOTSUP;	/* a configuration error (plugin.c) */
	}
	if (err && !net_refs && net_state)
		teardown();	/* the next init reads the config again */
	if (!err) {
		core_ctrl_set_auth_key(&net_state->auth_key);
		if (!net_refs)
			err = core_layer_start(net_state);
		if (!err && !net_refs)
			core_metrics_file_start(net_state);
	}
	if (!err && !nccl_offered) {
		nccl_offered = true;	/* NCCL reads it once per process */
		core_offer_nccl_buffsize(net_state);
	}
	if (err && !net_refs && net_state)
		teardown();
	if (!err) {
		net_refs++;
		c->comm_id = comm_id;
		*ctx = c;
	}
	pthread_mutex_unlock(&net_lock);
	if (err)
		free(c);
	return err;
}

int core_net_finalize(void *ctx)
{
	if (!ctx)
		return 0;	/* NCCL 2.28 finalizes after a failed init */
	pthread_mutex_lock(&net_lock);
	core_connects_drop(ctx);
	free(ctx);
	if (net_refs > 0 && --net_refs == 0)
		teardown();
	pthread_mutex_unlock(&net_lock);
	return 0;
}

/* NCCL's v10 path has no finalize: unloading the library must still leave
 * nothing behind. */
__attribute__((destructor)) static void net_unload(void)
{
	pthread_mutex_lock(&net_lock);
	if (net_state)
		teardown();
	net_refs = 0;
	pthread_mutex_unlock(&net_lock);
}

const struct core_state *core_current_state(void)
{
	return net_state;
}

void core_net_tuning(struct core_tuning *tuning)
{
	pthread_mutex_lock(&net_lock);
	*tuning = net_state ? net_state->tuning : (struct core_tuning){ 0 };
	pthread_mutex_unlock(&net_lock);
}

int core_net_devices(int *ndev)
{
	*ndev = net_state ? net_state->nrails : 0;
	return net_state ? 0 : -EINVAL;
}

const struct core_rail *core_net_rail(int dev)
{
	if (!net_state || dev < 0 || dev >= net_state->nrails)
		return NULL;
	return &net_state->rails[dev];
}
