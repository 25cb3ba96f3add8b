/* SPDX-License-Identifier: MIT */
/*
 * refnet: a small NCCL net plugin over loopback TCP, exporting
 * ncclNetPlugin_v8..v12, used only to test meshperf itself: it lets the
 * tests cover the ABI adapters our own plugin does not export (v8, v9),
 * grouped receives matched by tag, NULL requests, flush requests, and
 * faults on demand.  The conformance suite (tests/conformance) holds it to
 * the same rules as any plugin.
 *
 * Wire format per message: 4-byte tag, 4-byte size, payload.  Progress
 * happens in test(), single-threaded.
 *
 * Environment:
 *   REFNET_MAX_RECVS     maxRecvs reported (default 4)
 *   REFNET_CORRUPT_MSG   flip one byte of the Nth received message
 *   REFNET_EXIT_AT_MSG   _exit(9) on the Nth received message (peer death)
 *   REFNET_MISROUTE      deliver grouped messages by arrival, not by tag
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nccl-mesh/nccl_net.h>

#define EXPORT __attribute__((visibility("default")))
#define REF_MAGIC 0x52454631u
#define REF_MAX_GROUP 8
#define REF_POOL 512

struct ref_handle {
	uint32_t magic;
	uint16_t port;
	uint8_t stage;		/* connect returns NULL once, as real ones do */
};

struct ref_listen {
	int fd;
};

struct ref_comm;

struct ref_req {
	bool used;
	bool done;
	uint64_t seq;
	int n;
	void *data[REF_MAX_GROUP];
	size_t size[REF_MAX_GROUP];
	int tag[REF_MAX_GROUP];
	int got[REF_MAX_GROUP];
	bool filled[REF_MAX_GROUP];
	int nfilled;
	size_t off;		/* send: bytes of header and payload written */
	struct ref_comm *comm;
};

struct ref_comm {
	int fd;
	bool is_send;
	uint64_t next_seq;
	unsigned long posts;
	/* receive side: the message being read */
	uint32_t hdr[2];
	size_t hdr_off;
	struct ref_req *target;
	int target_slot;
	size_t payload_off;
	struct ref_req pool[REF_POOL];
};

static ncclDebugLogger_t ref_log;
static unsigned long ref_msgs_received;

#define REF_WARN(...)                                                          \
	do {                                                                   \
		if (ref_log)                                                   \
			ref_log(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__,   \
				__VA_ARGS__);                                  \
	} while (0)

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 10) : def;
}

static ncclResult_t ref_init(ncclDebugLogger_t log)
{
	ref_log = log;
	ref_msgs_received = 0;
	return ncclSuccess;
}

static ncclResult_t ref_devices(int *ndev)
{
	*ndev = 1;
	return ncclSuccess;
}

static void ref_props(ncclNetProperties_v12_t *p)
{
	memset(p, 0, sizeof(*p));
	p->name = "refnet-lo";
	p->ptrSupport = NCCL_PTR_HOST;
	p->speed = 10000;
	p->maxComms = 1024;
	p->maxRecvs = (int)env_long("REFNET_MAX_RECVS", 4);
	p->netDeviceType = NCCL_NET_DEVICE_HOST;
	p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
	p->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
	p->maxMultiRequestSize = 1;
	p->railId = p->planeId = NCCL_NET_ID_UNDEF;
}

static int nonblock(int fd)
{
	int one = 1, fl = fcntl(fd, F_GETFL);

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static ncclResult_t ref_listen(int dev, void *handle, void **listen_comm)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct ref_handle *h = handle;
	socklen_t len = sizeof(sa);
	struct ref_listen *l;
	int fd;

	if (dev != 0)
		return ncclInvalidArgument;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(fd, 16) || getsockname(fd, (struct sockaddr *)&sa, &len) ||
	    nonblock(fd)) {
		REF_WARN("refnet: listen: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return ncclSystemError;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return ncclSystemError;
	}
	l->fd = fd;
	memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
	h->magic = REF_MAGIC;
	h->port = ntohs(sa.sin_port);
	*listen_comm = l;
	return ncclSuccess;
}

static struct ref_comm *comm_new(int fd, bool is_send)
{
	struct ref_comm *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->fd = fd;
	c->is_send = is_send;
	return c;
}

static ncclResult_t ref_connect(int dev, void *handle, void **send_comm)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct ref_handle *h = handle;
	int fd;

	*send_comm = NULL;
	if (dev != 0 || h->magic != REF_MAGIC)
		return ncclInvalidArgument;
	if (h->stage++ == 0)
		return ncclSuccess;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons(h->port);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    nonblock(fd)) {
		REF_WARN("refnet: connect: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return ncclSystemError;
	}
	*send_comm = comm_new(fd, true);
	return *send_comm ? ncclSuccess : ncclSystemError;
}

static ncclResult_t ref_accept(void *listen_comm, void **recv_comm)
{
	struct ref_listen *l = listen_comm;
	int fd;

	*recv_comm = NULL;
	fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? ncclSuccess
							       : ncclSystemError;
	if (nonblock(fd)) {
		close(fd);
		return ncclSystemError;
	}
	*recv_comm = comm_new(fd, false);
	return *recv_comm ? ncclSuccess : ncclSystemError;
}

static ncclResult_t ref_reg_mr(void *comm, void *data, size_t size, int type,
			       void **mhandle)
{
	(void)comm;
	(void)data;
	(void)size;
	if (type != NCCL_PTR_HOST)
		return ncclInternalError;
	*mhandle = &ref_msgs_received;	/* any non-NULL token */
	return ncclSuccess;
}

static ncclResult_t ref_reg_mr_dmabuf(void *comm, void *data, size_t size,
				      int type, uint64_t offset, int fd,
				      void **mhandle)
{
	(void)comm;
	(void)data;
	(void)size;
	(void)type;
	(void)offset;
	(void)fd;
	(void)mhandle;
	return ncclInternalError;
}

static ncclResult_t ref_dereg_mr(void *comm, void *mhandle)
{
	(void)comm;
	return mhandle == &ref_msgs_received ? ncclSuccess : ncclInternalError;
}

static struct ref_req *req_get(struct ref_comm *c)
{
	/* every 5th post is refused, to exercise the caller's retry */
	if (++c->posts % 5 == 0)
		return NULL;
	for (int i = 0; i < REF_POOL; i++) {
		if (!c->pool[i].used) {
			struct ref_req *r = &c->pool[i];

			memset(r, 0, sizeof(*r));
			r->used = true;
			r->comm = c;
			r->seq = c->next_seq++;
			return r;
		}
	}
	return NULL;
}

static ncclResult_t ref_isend(void *send_comm, void *data, size_t size,
			      int tag, void *mhandle, void **request)
{
	struct ref_comm *c = send_comm;
	struct ref_req *r;

	(void)mhandle;
	if (size > UINT32_MAX)
		return ncclInvalidArgument;
	r = req_get(c);
	*request = r;
	if (!r)
		return ncclSuccess;
	r->n = 1;
	r->data[0] = data;
	r->size[0] = size;
	r->tag[0] = tag;
	return ncclSuccess;
}

static ncclResult_t ref_irecv(void *recv_comm, int n, void **data,
			      size_t *sizes, int *tags, void **request)
{
	struct ref_comm *c = recv_comm;
	struct ref_req *r;

	if (n < 1 || n > REF_MAX_GROUP)
		return ncclInvalidArgument;
	r = req_get(c);
	*request = r;
	if (!r)
		return ncclSuccess;
	r->n = n;
	for (int i = 0; i < n; i++) {
		r->data[i] = data[i];
		r->size[i] = sizes[i];
		r->tag[i] = tags[i];
	}
	return ncclSuccess;
}

static struct ref_req *oldest(struct ref_comm *c, bool (*want)(struct ref_req *))
{
	struct ref_req *best = NULL;

	for (int i = 0; i < REF_POOL; i++) {
		struct ref_req *r = &c->pool[i];

		if (r->used && !r->done && want(r) &&
		    (!best || r->seq < best->seq))
			best = r;
	}
	return best;
}

static bool any_req(struct ref_req *r)
{
	(void)r;
	return true;
}

static int send_progress(struct ref_comm *c)
{
	struct ref_req *r;

	while ((r = oldest(c, any_req))) {
		uint32_t hdr[2] = { (uint32_t)r->tag[0], (uint32_t)r->size[0] };
		size_t total = sizeof(hdr) + r->size[0];
		ssize_t n;

		while (r->off < total) {
			if (r->off < sizeof(hdr))
				n = send(c->fd, (char *)hdr + r->off,
					 sizeof(hdr) - r->off, MSG_NOSIGNAL);
			else
				n = send(c->fd,
					 (char *)r->data[0] + r->off - sizeof(hdr),
					 total - r->off, MSG_NOSIGNAL);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return 0;
			if (n <= 0)
				return -1;
			r->off += n;
		}
		r->done = true;
	}
	return 0;
}

/* oldest() takes a predicate without context: single-threaded plugin */
static int match_tag;
static bool match_any;

static bool wants_tag(struct ref_req *r)
{
	for (int k = 0; k < r->n; k++)
		if (!r->filled[k] && (r->tag[k] == match_tag || match_any))
			return true;
	return false;
}

static int message_arrived(struct ref_comm *c)
{
	struct ref_req *r = c->target;
	int k = c->target_slot;
	long corrupt = env_long("REFNET_CORRUPT_MSG", 0);
	long die = env_long("REFNET_EXIT_AT_MSG", 0);

	ref_msgs_received++;
	if (die && (long)ref_msgs_received == die)
		_exit(9);
	if (corrupt && (long)ref_msgs_received == corrupt && r->size[k])
		((unsigned char *)r->data[k])[c->hdr[1] / 2] ^= 0x40;
	r->filled[k] = true;
	r->got[k] = (int)c->hdr[1];
	if (++r->nfilled == r->n)
		r->done = true;
	c->hdr_off = 0;
	c->target = NULL;
	return 0;
}

static int find_target(struct ref_comm *c)
{
	bool misroute = env_long("REFNET_MISROUTE", 0) != 0;
	struct ref_req *r;

	match_any = misroute;
	match_tag = (int)c->hdr[0];
	r = oldest(c, wants_tag);
	if (!r)
		return 0;	/* not posted yet: leave it in the socket */
	for (int k = 0; k < r->n; k++) {
		if (!r->filled[k] && (r->tag[k] == match_tag || misroute)) {
			if (c->hdr[1] > r->size[k]) {
				REF_WARN("refnet: message of %u bytes for a %zu byte receive",
					 c->hdr[1], r->size[k]);
				return -1;
			}
			c->target = r;
			c->target_slot = k;
			c->payload_off = 0;
			return 0;
		}
	}
	return -1;
}

static int recv_progress(struct ref_comm *c)
{
	ssize_t n;

	for (;;) {
		if (c->hdr_off < sizeof(c->hdr)) {
			n = recv(c->fd, (char *)c->hdr + c->hdr_off,
				 sizeof(c->hdr) - c->hdr_off, 0);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return 0;
			if (n <= 0)
				return -1;
			c->hdr_off += n;
			continue;
		}
		if (!c->target) {
			if (find_target(c))
				return -1;
			if (!c->target)
				return 0;
		}
		if (c->payload_off < c->hdr[1]) {
			n = recv(c->fd,
				 (char *)c->target->data[c->target_slot] +
					 c->payload_off,
				 c->hdr[1] - c->payload_off, 0);
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return 0;
			if (n <= 0)
				return -1;
			c->payload_off += n;
			continue;
		}
		message_arrived(c);
	}
}

static ncclResult_t ref_test(void *request, int *done, int *sizes)
{
	struct ref_req *r = request;
	struct ref_comm *c = r->comm;

	*done = 0;
	if ((c->is_send ? send_progress(c) : recv_progress(c)) && !r->done) {
		REF_WARN("refnet: connection lost");
		return ncclSystemError;
	}
	if (!r->done)
		return ncclSuccess;
	*done = 1;
	if (sizes) {
		for (int k = 0; k < r->n; k++)
			sizes[k] = c->is_send ? (int)r->size[k] : r->got[k];
	}
	r->used = false;
	return ncclSuccess;
}

static ncclResult_t ref_close(void *comm)
{
	struct ref_comm *c = comm;

	close(c->fd);
	free(c);
	return ncclSuccess;
}

static ncclResult_t ref_close_listen(void *listen_comm)
{
	struct ref_listen *l = listen_comm;

	close(l->fd);
	free(l);
	return ncclSuccess;
}

/* ---- ABI adapters ---- */

static ncclResult_t get_props_v8(int dev, ncclNetProperties_v8_t *p)
{
	ncclNetProperties_v12_t q;

	if (dev != 0)
		return ncclInvalidArgument;
	ref_props(&q);
	memset(p, 0, sizeof(*p));
	p->name = q.name;
	p->ptrSupport = q.ptrSupport;
	p->speed = q.speed;
	p->maxComms = q.maxComms;
	p->maxRecvs = q.maxRecvs;
	p->netDeviceType = q.netDeviceType;
	return ncclSuccess;
}

#define GET_PROPS_FROM_V12(p)                                                  \
	do {                                                                   \
		ncclNetProperties_v12_t q;                                     \
		if (dev != 0)                                                  \
			return ncclInvalidArgument;                            \
		ref_props(&q);                                                 \
		memset(p, 0, sizeof(*p));                                      \
		p->name = q.name;                                              \
		p->ptrSupport = q.ptrSupport;                                  \
		p->speed = q.speed;                                            \
		p->maxComms = q.maxComms;                                      \
		p->maxRecvs = q.maxRecvs;                                      \
		p->netDeviceType = q.netDeviceType;                            \
		p->maxP2pBytes = q.maxP2pBytes;                                \
		p->maxCollBytes = q.maxCollBytes;                              \
	} while (0)

static ncclResult_t get_props_v10(int dev, ncclNetProperties_v10_t *p)
{
	GET_PROPS_FROM_V12(p);
	return ncclSuccess;
}

static ncclResult_t get_props_v11(int dev, ncclNetProperties_v11_t *p)
{
	GET_PROPS_FROM_V12(p);
	p->maxMultiRequestSize = 1;
	return ncclSuccess;
}

static ncclResult_t get_props_v12(int dev, ncclNetProperties_v12_t *p)
{
	if (dev != 0)
		return ncclInvalidArgument;
	ref_props(p);
	return ncclSuccess;
}

static ncclResult_t connect_v8(int dev, void *handle, void **send_comm,
			       ncclNetDeviceHandle_t **dev_comm)
{
	(void)dev_comm;
	return ref_connect(dev, handle, send_comm);
}

static ncclResult_t connect_v10(int dev, ncclNetCommConfig_t *config,
				void *handle, void **send_comm,
				ncclNetDeviceHandle_t **dev_comm)
{
	(void)config;
	(void)dev_comm;
	return ref_connect(dev, handle, send_comm);
}

static ncclResult_t accept_any(void *listen_comm, void **recv_comm,
			       ncclNetDeviceHandle_t **dev_comm)
{
	(void)dev_comm;
	return ref_accept(listen_comm, recv_comm);
}

static ncclResult_t isend_v8(void *comm, void *data, int size, int tag,
			     void *mh, void **request)
{
	if (size < 0)
		return ncclInvalidArgument;
	return ref_isend(comm, data, (size_t)size, tag, mh, request);
}

static ncclResult_t irecv_v8(void *comm, int n, void **data, int *sizes,
			     int *tags, void **mhandles, void **request)
{
	size_t s[REF_MAX_GROUP];

	(void)mhandles;
	if (n < 1 || n > REF_MAX_GROUP)
		return ncclInvalidArgument;
	for (int i = 0; i < n; i++)
		s[i] = (size_t)sizes[i];
	return ref_irecv(comm, n, data, s, tags, request);
}

static ncclResult_t isend_v9(void *comm, void *data, size_t size, int tag,
			     void *mh, void **request)
{
	return ref_isend(comm, data, size, tag, mh, request);
}

static ncclResult_t irecv_v9(void *comm, int n, void **data, size_t *sizes,
			     int *tags, void **mhandles, void **request)
{
	(void)mhandles;
	return ref_irecv(comm, n, data, sizes, tags, request);
}

static ncclResult_t isend_v10(void *comm, void *data, size_t size, int tag,
			      void *mh, void *phandle, void **request)
{
	(void)phandle;
	return ref_isend(comm, data, size, tag, mh, request);
}

static ncclResult_t irecv_v10(void *comm, int n, void **data, size_t *sizes,
			      int *tags, void **mhandles, void **phandles,
			      void **request)
{
	(void)mhandles;
	(void)phandles;
	return ref_irecv(comm, n, data, sizes, tags, request);
}

/*
 * Host memory needs no flush, but a plugin may still hand back a request:
 * this one is done at its first test, so callers exercise the whole path.
 * Never NULL for a refusal: from iflush, NULL means "nothing to flush".
 */
static ncclResult_t iflush_any(void *comm, int n, void **data, int *sizes,
			       void **mhandles, void **request)
{
	struct ref_comm *c = comm;

	(void)data;
	(void)sizes;
	(void)mhandles;
	*request = NULL;
	if (c->is_send || n < 1 || n > REF_MAX_GROUP)
		return ncclInvalidArgument;
	for (int i = 0; i < REF_POOL; i++) {
		struct ref_req *r = &c->pool[i];

		if (!r->used) {
			memset(r, 0, sizeof(*r));
			r->used = r->done = true;
			r->comm = c;
			*request = r;
			return ncclSuccess;
		}
	}
	return ncclSuccess;	/* no slot: report nothing to wait for */
}

static ncclResult_t init_v10(ncclDebugLogger_t log, ncclProfilerCallback_t p)
{
	(void)p;
	return ref_init(log);
}

static int ref_ctx_token;

static ncclResult_t init_v11(void **ctx, uint64_t comm_id,
			     ncclNetCommConfig_t *config, ncclDebugLogger_t log,
			     ncclProfilerCallback_t prof)
{
	(void)comm_id;
	(void)config;
	(void)prof;
	*ctx = &ref_ctx_token;
	return ref_init(log);
}

static ncclResult_t listen_v11(void *ctx, int dev, void *handle,
			       void **listen_comm)
{
	if (ctx != &ref_ctx_token)
		return ncclInternalError;
	return ref_listen(dev, handle, listen_comm);
}

static ncclResult_t connect_v11(void *ctx, int dev, void *handle,
				void **send_comm,
				ncclNetDeviceHandle_t **dev_comm)
{
	(void)dev_comm;
	if (ctx != &ref_ctx_token)
		return ncclInternalError;
	return ref_connect(dev, handle, send_comm);
}

static ncclResult_t finalize_v11(void *ctx)
{
	return ctx == &ref_ctx_token || !ctx ? ncclSuccess : ncclInternalError;
}

EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
	.name = "RefNet",
	.init = ref_init,
	.devices = ref_devices,
	.getProperties = get_props_v8,
	.listen = ref_listen,
	.connect = connect_v8,
	.accept = accept_any,
	.regMr = ref_reg_mr,
	.regMrDmaBuf = ref_reg_mr_dmabuf,
	.deregMr = ref_dereg_mr,
	.isend = isend_v8,
	.irecv = irecv_v8,
	.iflush = iflush_any,
	.test = ref_test,
	.closeSend = ref_close,
	.closeRecv = ref_close,
	.closeListen = ref_close_listen,
};

EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
	.name = "RefNet",
	.init = ref_init,
	.devices = ref_devices,
	.getProperties = get_props_v10,
	.listen = ref_listen,
	.connect = connect_v8,
	.accept = accept_any,
	.regMr = ref_reg_mr,
	.regMrDmaBuf = ref_reg_mr_dmabuf,
	.deregMr = ref_dereg_mr,
	.isend = isend_v9,
	.irecv = irecv_v9,
	.iflush = iflush_any,
	.test = ref_test,
	.closeSend = ref_close,
	.closeRecv = ref_close,
	.closeListen = ref_close_listen,
};

EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
	.name = "RefNet",
	.init = init_v10,
	.devices = ref_devices,
	.getProperties = get_props_v10,
	.listen = ref_listen,
	.connect = connect_v10,
	.accept = accept_any,
	.regMr = ref_reg_mr,
	.regMrDmaBuf = ref_reg_mr_dmabuf,
	.deregMr = ref_dereg_mr,
	.isend = isend_v10,
	.irecv = irecv_v10,
	.iflush = iflush_any,
	.test = ref_test,
	.closeSend = ref_close,
	.closeRecv = ref_close,
	.closeListen = ref_close_listen,
};

#define REF_V11_LIKE(props_fn)                                                 \
	{                                                                      \
		.name = "RefNet",                                              \
		.init = init_v11,                                              \
		.devices = ref_devices,                                        \
		.getProperties = props_fn,                                     \
		.listen = listen_v11,                                          \
		.connect = connect_v11,                                        \
		.accept = accept_any,                                          \
		.regMr = ref_reg_mr,                                           \
		.regMrDmaBuf = ref_reg_mr_dmabuf,                              \
		.deregMr = ref_dereg_mr,                                       \
		.isend = isend_v10,                                            \
		.irecv = irecv_v10,                                            \
		.iflush = iflush_any,                                          \
		.test = ref_test,                                              \
		.closeSend = ref_close,                                        \
		.closeRecv = ref_close,                                        \
		.closeListen = ref_close_listen,                               \
		.finalize = finalize_v11,                                      \
	}

EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = REF_V11_LIKE(get_props_v11);
EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = REF_V11_LIKE(get_props_v12);
