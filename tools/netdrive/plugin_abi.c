/* SPDX-License-Identifier: MIT */
/*
 * One internal interface over ncclNetPlugin_v8..v12: the benchmark never
 * looks at the ABI version, these adapters absorb the differences (int vs
 * size_t sizes, phandles, init/connect signatures, the v11+ context).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "netdrive.h"

static const int abi_probe_order[] = { 12, 11, 10, 9, 8 };

/*
 * NCCL hands isend/irecv a profiler handle per request and a callback that
 * is a no-op unless a profiler is loaded.  We do the same so a plugin's
 * profiler path runs, and count its events for the verbose report.  The
 * recording one gives each started event a handle, as a profiler plugin
 * does, so that the plugin also reports its parts and stops.
 */
static unsigned long prof_event_count;
static int prof_phandle_anchor;
static int prof_event_anchor;

static ncclResult_t perf_profiler(void **ehandle, int type, void *phandle,
				  int64_t plugin_id, void *ext_data)
{
	(void)phandle;
	(void)plugin_id;
	(void)ext_data;
	__atomic_add_fetch(&prof_event_count, 1, __ATOMIC_RELAXED);
	if (ehandle && type == 0)
		*ehandle = NULL;
	return ncclSuccess;
}

static ncclResult_t perf_profiler_record(void **ehandle, int type,
					 void *phandle, int64_t plugin_id,
					 void *ext_data)
{
	(void)perf_profiler(ehandle, type, phandle, plugin_id, ext_data);
	if (ehandle && type == 0)
		*ehandle = &prof_event_anchor;
	return ncclSuccess;
}

static ncclProfilerCallback_t perf_profiler_of(const struct perf_net *net)
{
	static const ncclProfilerCallback_t fns[] = {
		[PERF_PROF_NCCL] = perf_profiler,
		[PERF_PROF_NONE] = NULL,
		[PERF_PROF_RECORD] = perf_profiler_record,
	};

	return fns[net->prof];
}

const char *perf_result_str(ncclResult_t res)
{
	static const char *const names[] = {
		"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
		"ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage",
		"ncclRemoteError", "ncclInProgress", "ncclTimeout",
	};

	if ((unsigned)res < sizeof(names) / sizeof(names[0]))
		return names[res];
	return "unknown ncclResult_t";
}

static const char *dl_error(void)
{
	const char *err = dlerror();

	return err ? err : "unknown error";
}

/* NCCL's rule: the name as given, else libnccl-net-NAME.so for bare names. */
static void *plugin_dlopen(const char *plugin)
{
	char alt[PATH_MAX];
	size_t len = strlen(plugin);
	void *lib;

	lib = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
	if (lib)
		return lib;
	perf_info("dlopen %s: %s", plugin, dl_error());
	if (strchr(plugin, '/') ||
	    (strncmp(plugin, "lib", 3) == 0 && len > 3 &&
	     strcmp(plugin + len - 3, ".so") == 0))
		return NULL;
	snprintf(alt, sizeof(alt), "libnccl-net-%s.so", plugin);
	lib = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		perf_info("dlopen %s: %s", alt, dl_error());
	return lib;
}

int perf_net_open(struct perf_net *net, const char *plugin, int abi)
{
	char sym[32];
	size_t i;

	memset(net, 0, sizeof(*net));
	net->config.trafficClass = -1;
	net->lib = plugin_dlopen(plugin);
	if (!net->lib) {
		perf_err("cannot load plugin %s (run with -v for the dlopen errors)",
			 plugin);
		return -ENOENT;
	}
	for (i = 0; i < sizeof(abi_probe_order) / sizeof(abi_probe_order[0]);
	     i++) {
		int v = abi_probe_order[i];

		if (abi && abi != v)
			continue;
		snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
		net->api.any = dlsym(net->lib, sym);
		if (net->api.any) {
			net->abi = v;
			return 0;
		}
	}
	if (abi)
		perf_err("plugin %s does not export ncclNetPlugin_v%d", plugin,
			 abi);
	else
		perf_err("plugin %s exports no ncclNetPlugin_v8..v12", plugin);
	dlclose(net->lib);
	net->lib = NULL;
	return -ENOENT;
}

void perf_net_close(struct perf_net *net)
{
	if (net->lib && dlclose(net->lib))
		perf_err("dlclose: %s", dl_error());
	net->lib = NULL;
	net->api.any = NULL;
}

const char *perf_net_name(const struct perf_net *net)
{
	/* name is the first member in every version */
	return net->api.v8->name ? net->api.v8->name : "(null)";
}

/* v11 and v12 share every slot used here except getProperties. */
#define V11_LIKE(net, fn, ...)                                                 \
	((net)->abi == 11 ? (net)->api.v11->fn(__VA_ARGS__)                    \
			  : (net)->api.v12->fn(__VA_ARGS__))

ncclResult_t perf_net_init(struct perf_net *net, uint64_t comm_id)
{
	ncclResult_t res;
	/* NCCL passes a config on its stack: the plugin must copy it. */
	ncclNetCommConfig_t config = net->config;

	prof_event_count = 0;
	switch (net->abi) {
	case 8:
		return net->api.v8->init(perf_plugin_logger());
	case 9:
		return net->api.v9->init(perf_plugin_logger());
	case 10:
		return net->api.v10->init(perf_plugin_logger(),
					  perf_profiler_of(net));
	default:
		res = V11_LIKE(net, init, &net->ctx, comm_id, &config,
			       perf_plugin_logger(), perf_profiler_of(net));
		net->ctx_valid = res == ncclSuccess;
		/* a plugin that kept the pointer now reads garbage */
		memset(&config, 0xa5, sizeof(config));
		__asm__ volatile("" : : "r"(&config) : "memory");
		return res;
	}
}

ncclResult_t perf_net_finalize(struct perf_net *net)
{
	ncclResult_t res = ncclSuccess;

	if (net->abi >= 11 && net->ctx_valid) {
		res = V11_LIKE(net, finalize, net->ctx);
		net->ctx_valid = false;
		net->ctx = NULL;
	}
	net->prof_events = prof_event_count;
	return res;
}

ncclResult_t perf_net_devices(struct perf_net *net, int *ndev)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->devices(ndev);
	case 9:
		return net->api.v9->devices(ndev);
	case 10:
		return net->api.v10->devices(ndev);
	default:
		return V11_LIKE(net, devices, ndev);
	}
}

static void props_from_v8(struct perf_props *p, const ncclNetProperties_v8_t *s)
{
	p->name = s->name;
	p->pci_path = s->pciPath;
	p->guid = s->guid;
	p->ptr_support = s->ptrSupport;
	p->reg_is_global = s->regIsGlobal;
	p->speed = s->speed;
	p->port = s->port;
	p->latency = s->latency;
	p->max_comms = s->maxComms;
	p->max_recvs = s->maxRecvs;
	p->net_device_type = s->netDeviceType;
	p->net_device_version = s->netDeviceVersion;
}

/* The v9/v10 prefix is shared by v11 and v12 except vProps' width. */
#define PROPS_FROM_V10_LIKE(p, s)                                              \
	do {                                                                   \
		(p)->name = (s)->name;                                         \
		(p)->pci_path = (s)->pciPath;                                  \
		(p)->guid = (s)->guid;                                         \
		(p)->ptr_support = (s)->ptrSupport;                            \
		(p)->reg_is_global = (s)->regIsGlobal;                         \
		(p)->force_flush = (s)->forceFlush;                            \
		(p)->speed = (s)->speed;                                       \
		(p)->port = (s)->port;                                         \
		(p)->latency = (s)->latency;                                   \
		(p)->max_comms = (s)->maxComms;                                \
		(p)->max_recvs = (s)->maxRecvs;                                \
		(p)->net_device_type = (s)->netDeviceType;                     \
		(p)->net_device_version = (s)->netDeviceVersion;               \
		(p)->vdev_ndevs = (s)->vProps.ndevs;                           \
		(p)->max_p2p_bytes = (s)->maxP2pBytes;                         \
		(p)->max_coll_bytes = (s)->maxCollBytes;                       \
		(p)->has_v9 = true;                                            \
	} while (0)

ncclResult_t perf_net_get_props(struct perf_net *net, int dev,
				struct perf_props *props)
{
	ncclNetProperties_v8_t p8;
	ncclNetProperties_v10_t p10;
	ncclNetProperties_v11_t p11;
	ncclNetProperties_v12_t p12;
	ncclResult_t res;

	memset(props, 0, sizeof(*props));
	props->max_multi_request_size = 1;
	props->rail_id = props->plane_id = NCCL_NET_ID_UNDEF;
	switch (net->abi) {
	case 8:
		memset(&p8, 0, sizeof(p8));
		res = net->api.v8->getProperties(dev, &p8);
		props_from_v8(props, &p8);
		break;
	case 9:
	case 10:
		memset(&p10, 0, sizeof(p10));
		res = net->abi == 9 ? net->api.v9->getProperties(dev, &p10)
				    : net->api.v10->getProperties(dev, &p10);
		PROPS_FROM_V10_LIKE(props, &p10);
		break;
	case 11:
		memset(&p11, 0, sizeof(p11));
		res = net->api.v11->getProperties(dev, &p11);
		PROPS_FROM_V10_LIKE(props, &p11);
		props->max_multi_request_size = p11.maxMultiRequestSize;
		props->has_v11 = true;
		break;
	default:
		memset(&p12, 0, sizeof(p12));
		res = net->api.v12->getProperties(dev, &p12);
		PROPS_FROM_V10_LIKE(props, &p12);
		props->max_multi_request_size = p12.maxMultiRequestSize;
		props->rail_id = p12.railId;
		props->plane_id = p12.planeId;
		props->has_v11 = props->has_v12 = true;
		break;
	}
	return res;
}

ncclResult_t perf_net_listen(struct perf_net *net, int dev, void *handle,
			     void **listen_comm)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->listen(dev, handle, listen_comm);
	case 9:
		return net->api.v9->listen(dev, handle, listen_comm);
	case 10:
		return net->api.v10->listen(dev, handle, listen_comm);
	default:
		return V11_LIKE(net, listen, net->ctx, dev, handle,
				listen_comm);
	}
}

/*
 * The handle is passed back unchanged on every poll: plugins may keep their
 * connection stage in it, as NCCL's socket transport does.
 */
ncclResult_t perf_net_connect(struct perf_net *net, int dev, void *handle,
			      void **send_comm)
{
	ncclNetDeviceHandle_t *dev_handle = NULL;

	switch (net->abi) {
	case 8:
		return net->api.v8->connect(dev, handle, send_comm,
					    &dev_handle);
	case 9:
		return net->api.v9->connect(dev, handle, send_comm,
					    &dev_handle);
	case 10:
		return net->api.v10->connect(dev, &net->config, handle, send_comm,
					     &dev_handle);
	default:
		return V11_LIKE(net, connect, net->ctx, dev, handle, send_comm,
				&dev_handle);
	}
}

ncclResult_t perf_net_accept(struct perf_net *net, void *listen_comm,
			     void **recv_comm)
{
	ncclNetDeviceHandle_t *dev_handle = NULL;

	switch (net->abi) {
	case 8:
		return net->api.v8->accept(listen_comm, recv_comm, &dev_handle);
	case 9:
		return net->api.v9->accept(listen_comm, recv_comm, &dev_handle);
	case 10:
		return net->api.v10->accept(listen_comm, recv_comm,
					    &dev_handle);
	default:
		return V11_LIKE(net, accept, listen_comm, recv_comm,
				&dev_handle);
	}
}

ncclResult_t perf_net_reg_mr(struct perf_net *net, void *comm, void *data,
			     size_t size, void **mhandle)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->regMr(comm, data, size, NCCL_PTR_HOST,
					  mhandle);
	case 9:
		return net->api.v9->regMr(comm, data, size, NCCL_PTR_HOST,
					  mhandle);
	case 10:
		return net->api.v10->regMr(comm, data, size, NCCL_PTR_HOST,
					   mhandle);
	default:
		return V11_LIKE(net, regMr, comm, data, size, NCCL_PTR_HOST,
				mhandle);
	}
}

ncclResult_t perf_net_dereg_mr(struct perf_net *net, void *comm,
			       void *mhandle)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->deregMr(comm, mhandle);
	case 9:
		return net->api.v9->deregMr(comm, mhandle);
	case 10:
		return net->api.v10->deregMr(comm, mhandle);
	default:
		return V11_LIKE(net, deregMr, comm, mhandle);
	}
}

ncclResult_t perf_net_isend(struct perf_net *net, void *send_comm, void *data,
			    size_t size, int tag, void *mhandle,
			    void **request)
{
	void *phandle = &prof_phandle_anchor;

	switch (net->abi) {
	case 8:
		if (size > INT_MAX)
			return ncclInvalidArgument;
		return net->api.v8->isend(send_comm, data, (int)size, tag,
					  mhandle, request);
	case 9:
		return net->api.v9->isend(send_comm, data, size, tag, mhandle,
					  request);
	case 10:
		return net->api.v10->isend(send_comm, data, size, tag, mhandle,
					   phandle, request);
	default:
		return V11_LIKE(net, isend, send_comm, data, size, tag, mhandle,
				phandle, request);
	}
}

ncclResult_t perf_net_irecv(struct perf_net *net, void *recv_comm, int n,
			    void **data, size_t *sizes, int *tags,
			    void **mhandles, void **request)
{
	void *phandles[PERF_MAX_GROUP];
	int isizes[PERF_MAX_GROUP];
	int i;

	if (n < 1 || n > PERF_MAX_GROUP)
		return ncclInvalidArgument;
	for (i = 0; i < n; i++)
		phandles[i] = &prof_phandle_anchor;
	switch (net->abi) {
	case 8:
		for (i = 0; i < n; i++) {
			if (sizes[i] > INT_MAX)
				return ncclInvalidArgument;
			isizes[i] = (int)sizes[i];
		}
		return net->api.v8->irecv(recv_comm, n, data, isizes, tags,
					  mhandles, request);
	case 9:
		return net->api.v9->irecv(recv_comm, n, data, sizes, tags,
					  mhandles, request);
	case 10:
		return net->api.v10->irecv(recv_comm, n, data, sizes, tags,
					   mhandles, phandles, request);
	default:
		return V11_LIKE(net, irecv, recv_comm, n, data, sizes, tags,
				mhandles, phandles, request);
	}
}

/* The same slot in every version; NULL when the plugin has no flush. */
bool perf_net_has_iflush(const struct perf_net *net)
{
	return net->api.v8->iflush != NULL;
}

ncclResult_t perf_net_iflush(struct perf_net *net, void *recv_comm, int n,
			     void **data, int *sizes, void **mhandles,
			     void **request)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->iflush(recv_comm, n, data, sizes, mhandles,
					   request);
	case 9:
		return net->api.v9->iflush(recv_comm, n, data, sizes, mhandles,
					   request);
	case 10:
		return net->api.v10->iflush(recv_comm, n, data, sizes, mhandles,
					    request);
	default:
		return V11_LIKE(net, iflush, recv_comm, n, data, sizes,
				mhandles, request);
	}
}

ncclResult_t perf_net_test(struct perf_net *net, void *request, int *done,
			   int *sizes)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->test(request, done, sizes);
	case 9:
		return net->api.v9->test(request, done, sizes);
	case 10:
		return net->api.v10->test(request, done, sizes);
	default:
		return V11_LIKE(net, test, request, done, sizes);
	}
}

ncclResult_t perf_net_close_send(struct perf_net *net, void *send_comm)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->closeSend(send_comm);
	case 9:
		return net->api.v9->closeSend(send_comm);
	case 10:
		return net->api.v10->closeSend(send_comm);
	default:
		return V11_LIKE(net, closeSend, send_comm);
	}
}

ncclResult_t perf_net_close_recv(struct perf_net *net, void *recv_comm)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->closeRecv(recv_comm);
	case 9:
		return net->api.v9->closeRecv(recv_comm);
	case 10:
		return net->api.v10->closeRecv(recv_comm);
	default:
		return V11_LIKE(net, closeRecv, recv_comm);
	}
}

ncclResult_t perf_net_close_listen(struct perf_net *net, void *listen_comm)
{
	switch (net->abi) {
	case 8:
		return net->api.v8->closeListen(listen_comm);
	case 9:
		return net->api.v9->closeListen(listen_comm);
	case 10:
		return net->api.v10->closeListen(listen_comm);
	default:
		return V11_LIKE(net, closeListen, listen_comm);
	}
}
