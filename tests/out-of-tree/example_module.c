/* SPDX-License-Identifier: MIT */
/*
 * example: the smallest complete nccl-mesh module, built outside the
 * project against the installed <nccl-mesh/module.h> and nccl-mesh-module.pc:
 *
 *   cc -shared -fPIC $(pkg-config --cflags nccl-mesh-module) \
 *      -o mesh-example.so example_module.c
 *
 * It has one device whose address comes from its `addr` parameter, and it
 * moves host memory over one TCP stream per connection, which the core
 * opens through the peer's control port.  Each message is an 8-byte length
 * followed by the payload; sends and receives complete in posting order.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <nccl-mesh/module.h>

static const struct mesh_host *example_host;
#define MESH_LOG_HOST example_host
#include <nccl-mesh/log.h>

#define EX_MAX_REQS 32
#define EX_HDR_BYTES sizeof(uint64_t)

struct ex_ctx {
	struct mesh_addr addr;
};

struct ex_comm;

struct ex_req {
	struct mesh_request base;	/* first: the core calls base.test */
	struct ex_comm *comm;
	int used, is_send, complete;
	char *buf;
	size_t cap;			/* posted size */
	size_t len;			/* message size, once known */
	size_t done;			/* payload bytes moved */
	unsigned char hdr[EX_HDR_BYTES];
	size_t hdr_done;
};

struct ex_comm {
	int fd;
	int error;			/* sticky, negative errno */
	struct ex_req reqs[EX_MAX_REQS];
	struct ex_req *queue[EX_MAX_REQS];	/* in flight, oldest first */
	int qhead, qcount;
};

static const struct mesh_param ex_params[] = {
	{ .name = "addr", .type = MESH_PARAM_STR, .dflt = "127.0.0.1",
	  .help = "IPv4 or IPv6 address of the example device" },
	{ .name = NULL },
};

/*
 * Run before init by the plugin and by `meshinfo --check` alike (module
 * ABI 1.3), so a value init would refuse is a config error with its file
 * and line instead of a failed init.
 */
static int ex_check(const struct mesh_host *host)
{
	const char *text = host->param_str(host, "addr");
	unsigned char ip[16];

	if (inet_pton(AF_INET, text, ip) == 1 ||
	    inet_pton(AF_INET6, text, ip) == 1)
		return 0;
	host->param_error(host, "addr", "expected an IPv4 or IPv6 address, "
			  "got \"%s\"", text);
	return -EINVAL;
}

static int ex_init(const struct mesh_host *host, void **mctx)
{
	const char *text = host->param_str(host, "addr");
	struct ex_ctx *ctx;

	example_host = host;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	if (inet_pton(AF_INET, text, ctx->addr.ip) == 1) {
		ctx->addr.family = AF_INET;
		ctx->addr.prefix_len = 32;
	} else if (inet_pton(AF_INET6, text, ctx->addr.ip) == 1) {
		ctx->addr.family = AF_INET6;
		ctx->addr.prefix_len = 128;
	} else {
		MESH_WARN("addr '%s' is not an IP address", text);
		free(ctx);
		return -EINVAL;
	}
	*mctx = ctx;
	return 0;
}

static void ex_fini(void *mctx)
{
	free(mctx);
}

static int ex_devices(void *mctx, int *ndev)
{
	(void)mctx;
	*ndev = 1;
	return 0;
}

static int ex_get_properties(void *mctx, int dev, struct mesh_dev_props *p)
{
	const struct ex_ctx *ctx = mctx;

	if (dev != 0)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	strcpy(p->name, "example0");
	p->ptr_support = MESH_PTR_HOST;
	p->speed_mbps = 10000;
	p->latency_us = 10.0f;
	p->max_comms = 65536;
	p->max_recvs = 1;
	p->max_p2p_bytes = (size_t)1 << 31;
	p->max_coll_bytes = (size_t)1 << 31;
	p->naddrs = 1;
	p->addrs[0] = ctx->addr;
	return 0;
}

/* Both sides ask the core for stream 0; it is ready when both have it. */
static int ex_open(struct mesh_ctrl *ctrl, void **comm_out)
{
	struct ex_comm *comm;
	int fd, rc;

	*comm_out = NULL;
	rc = ctrl->stream(ctrl, 0, &fd);
	if (rc == -EAGAIN)
		return 0;
	if (rc) {
		MESH_WARN("no data stream to %s: %s", ctrl->peer,
			  strerror(-rc));
		return rc;
	}
	comm = calloc(1, sizeof(*comm));
	if (!comm) {
		close(fd);
		return -ENOMEM;
	}
	comm->fd = fd;
	*comm_out = comm;
	return 0;
}

static int ex_connect(void *mctx, int dev, struct mesh_ctrl *ctrl,
		      void **send_comm)
{
	(void)mctx, (void)dev;
	return ex_open(ctrl, send_comm);
}

static int ex_accept(void *mctx, int dev, struct mesh_ctrl *ctrl,
		     void **recv_comm)
{
	(void)mctx, (void)dev;
	return ex_open(ctrl, recv_comm);
}

static void ex_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	(void)mctx, (void)ctrl;	/* nothing is kept while connecting */
}

static int ex_reg_mr(void *comm, void *data, size_t size, int type,
		     void **mhandle)
{
	(void)data, (void)size;
	if (type != MESH_PTR_HOST)
		return -EINVAL;
	*mhandle = comm;	/* host memory needs no registration */
	return 0;
}

static int ex_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			    uint64_t offset, int fd, void **mhandle)
{
	(void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd;
	(void)mhandle;
	return -EOPNOTSUPP;
}

static int ex_dereg_mr(void *comm, void *mhandle)
{
	(void)comm, (void)mhandle;
	return 0;
}

/* Moves bytes on a non-blocking socket: 1 done, 0 try later, <0 error. */
static int ex_io(struct ex_comm *comm, int is_send, void *buf, size_t len,
		 size_t *done)
{
	while (*done < len) {
		char *at = (char *)buf + *done;
		ssize_t n = is_send ?
			send(comm->fd, at, len - *done, MSG_NOSIGNAL) :
			recv(comm->fd, at, len - *done, 0);

		if (n > 0) {
			*done += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
	return 1;
}

static int ex_step(struct ex_req *r)
{
	struct ex_comm *comm = r->comm;
	uint64_t wire;
	int rc;

	if (r->is_send && r->hdr_done == 0) {
		wire = htobe64(r->len);
		memcpy(r->hdr, &wire, sizeof(wire));
	}
	rc = ex_io(comm, r->is_send, r->hdr, EX_HDR_BYTES, &r->hdr_done);
	if (rc <= 0)
		return rc;
	if (!r->is_send) {
		memcpy(&wire, r->hdr, sizeof(wire));
		r->len = be64toh(wire);
		if (r->len > r->cap) {
			MESH_WARN("message of %zu bytes for a %zu-byte receive",
				  r->len, r->cap);
			return -EMSGSIZE;
		}
	}
	return ex_io(comm, r->is_send, r->buf, r->len, &r->done);
}

static int ex_progress(struct ex_comm *comm)
{
	while (!comm->error && comm->qcount) {
		struct ex_req *r = comm->queue[comm->qhead];
		int rc = ex_step(r);

		if (rc < 0)
			comm->error = rc;
		if (rc <= 0)
			break;
		r->complete = 1;
		comm->qhead = (comm->qhead + 1) % EX_MAX_REQS;
		comm->qcount--;
	}
	return comm->error;
}

static int ex_test(void *request, int *done, int *sizes)
{
	struct ex_req *r = request;
	int rc = ex_progress(r->comm);

	*done = r->complete;
	if (r->complete) {
		if (sizes)
			sizes[0] = (int)r->len;
		r->used = 0;
		return 0;
	}
	return rc;
}

static int ex_post(struct ex_comm *comm, int is_send, void *buf, size_t size,
		   void **request)
{
	struct ex_req *r = NULL;

	*request = NULL;
	if (comm->error)
		return comm->error;
	for (int i = 0; i < EX_MAX_REQS && !r; i++)
		if (!comm->reqs[i].used)
			r = &comm->reqs[i];
	if (!r)
		return 0;	/* NULL request: the caller retries later */
	memset(r, 0, sizeof(*r));
	r->base.test = ex_test;
	r->comm = comm;
	r->used = 1;
	r->is_send = is_send;
	r->buf = buf;
	r->cap = size;
	r->len = is_send ? size : 0;
	comm->queue[(comm->qhead + comm->qcount) % EX_MAX_REQS] = r;
	comm->qcount++;
	*request = r;
	return 0;
}

static int ex_isend(void *send_comm, void *data, size_t size, int tag,
		    void *mhandle, void **request)
{
	(void)tag, (void)mhandle;
	return ex_post(send_comm, 1, data, size, request);
}

static int ex_irecv(void *recv_comm, int n, void **data, size_t *sizes,
		    int *tags, void **mhandles, void **request)
{
	(void)tags, (void)mhandles;
	if (n != 1)
		return -EINVAL;	/* max_recvs is 1 */
	return ex_post(recv_comm, 0, data[0], sizes[0], request);
}

static int ex_close(void *comm_ptr)
{
	struct ex_comm *comm = comm_ptr;

	close(comm->fd);
	free(comm);
	return 0;
}

MESH_EXPORT const struct mesh_module MESH_MODULE_DESCRIPTOR = {
	.abi_version = MESH_MODULE_ABI_VERSION,
	.size = sizeof(struct mesh_module),
	.name = "example",
	.version = "1.0",
	.params = ex_params,
	.init = ex_init,
	.fini = ex_fini,
	.devices = ex_devices,
	.get_properties = ex_get_properties,
	.connect = ex_connect,
	.accept = ex_accept,
	.abandon = ex_abandon,
	.reg_mr = ex_reg_mr,
	.reg_mr_dmabuf = ex_reg_mr_dmabuf,
	.dereg_mr = ex_dereg_mr,
	.isend = ex_isend,
	.irecv = ex_irecv,
	.iflush = NULL,
	.close_send = ex_close,
	.close_recv = ex_close,
	.check = ex_check,
};
