/* SPDX-License-Identifier: MIT */
/*
 * The rendezvous of meshinfo --cluster: where rank 0 listens, from the
 * arguments or the variables torchrun, Slurm, Open MPI and PMI set; the
 * star of control sockets around rank 0 (meshperf's bootstrap socket);
 * and the fixed-size encoding of the messages on it.
 */
#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"

#define CL_PROTO 1

/* ---- encoding: big-endian integers, strings with a length ---- */

struct cl_buf {
	uint8_t *p;
	size_t off, cap;
	bool bad;
};

static void put_bytes(struct cl_buf *b, const void *v, size_t n)
{
	if (b->off + n > b->cap) {
		b->bad = true;
		return;
	}
	memcpy(b->p + b->off, v, n);
	b->off += n;
}

static void get_bytes(struct cl_buf *b, void *v, size_t n)
{
	if (b->off + n > b->cap) {
		b->bad = true;
		memset(v, 0, n);
		return;
	}
	memcpy(v, b->p + b->off, n);
	b->off += n;
}

static void put64(struct cl_buf *b, uint64_t v)
{
	v = htobe64(v);
	put_bytes(b, &v, sizeof(v));
}

static uint64_t get64(struct cl_buf *b)
{
	uint64_t v;

	get_bytes(b, &v, sizeof(v));
	return be64toh(v);
}

static void put_int(struct cl_buf *b, int v)
{
	put64(b, (uint64_t)(int64_t)v);
}

static int get_int(struct cl_buf *b)
{
	return (int)(int64_t)get64(b);
}

static void put_dbl(struct cl_buf *b, double d)
{
	uint64_t v;

	memcpy(&v, &d, sizeof(v));
	put64(b, v);
}

static double get_dbl(struct cl_buf *b)
{
	uint64_t v = get64(b);
	double d;

	memcpy(&d, &v, sizeof(d));
	return d;
}

static void put_str(struct cl_buf *b, const char *s)
{
	size_t n = strlen(s);

	put64(b, n);
	put_bytes(b, s, n);
}

/* Into a field of `cap` bytes, cut to fit, always terminated. */
static void get_str(struct cl_buf *b, char *s, size_t cap)
{
	uint64_t n = get64(b);

	if (n > b->cap - b->off) {
		b->bad = true;
		s[0] = '\0';
		return;
	}
	memcpy(s, b->p + b->off, n < cap ? n : cap - 1);
	s[n < cap ? n : cap - 1] = '\0';
	b->off += n;
}

static int send_buf(int fd, enum perf_msg type, struct cl_buf *b,
		    int timeout_s)
{
	if (b->bad) {
		fprintf(stderr, "meshinfo: a control message does not fit\n");
		return -EOVERFLOW;
	}
	return oob_send_msg(fd, type, b->p, CL_MSG_BYTES, timeout_s);
}

int cl_send_cmd(int fd, const struct cl_cmd *c, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES] = { 0 };
	struct cl_buf b = { msg, 0, sizeof(msg), false };

	put_int(&b, c->kind);
	put_int(&b, c->rail);
	put_int(&b, c->peer);
	put_int(&b, c->status);
	put_int(&b, c->sender);
	put64(&b, c->size);
	put64(&b, c->iters);
	put_bytes(&b, c->handle, sizeof(c->handle));
	return send_buf(fd, PERF_MSG_HANDLE, &b, timeout_s);
}

int cl_recv_cmd(int fd, struct cl_cmd *c, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	struct cl_buf b = { msg, 0, sizeof(msg), false };
	int rc = oob_recv_msg(fd, PERF_MSG_HANDLE, msg, sizeof(msg),
			      timeout_s);

	if (rc)
		return rc;
	c->kind = get_int(&b);
	c->rail = get_int(&b);
	c->peer = get_int(&b);
	c->status = get_int(&b);
	c->sender = get_int(&b);
	c->size = get64(&b);
	c->iters = get64(&b);
	get_bytes(&b, c->handle, sizeof(c->handle));
	return b.bad ? -EPROTO : 0;
}

static void put_pair(struct cl_buf *b, const struct cl_pair *p)
{
	put_int(b, p->ok);
	put_str(b, p->cls);
	put_str(b, p->module);
	put_str(b, p->local);
	put_str(b, p->remote);
	put_int(b, p->nrelays);
	for (int i = 0; i < p->nrelays; i++) {
		put_str(b, p->relays[i]);
		put_str(b, p->relay_addrs[i]);
	}
	put_int(b, p->ndevices);
	for (int i = 0; i < p->ndevices; i++)
		put_str(b, p->devices[i]);
	put_str(b, p->cipher);
	put_str(b, p->reason);
}

static void get_pair(struct cl_buf *b, struct cl_pair *p)
{
	p->ok = get_int(b);
	get_str(b, p->cls, sizeof(p->cls));
	get_str(b, p->module, sizeof(p->module));
	get_str(b, p->local, sizeof(p->local));
	get_str(b, p->remote, sizeof(p->remote));
	p->nrelays = get_int(b);
	if (p->nrelays < 0 || p->nrelays > CL_MAX_RELAYS) {
		b->bad = true;
		p->nrelays = 0;
	}
	for (int i = 0; i < p->nrelays; i++) {
		get_str(b, p->relays[i], sizeof(p->relays[i]));
		get_str(b, p->relay_addrs[i], sizeof(p->relay_addrs[i]));
	}
	p->ndevices = get_int(b);
	if (p->ndevices < 0 || p->ndevices > CL_MAX_DEVICES) {
		b->bad = true;
		p->ndevices = 0;
	}
	for (int i = 0; i < p->ndevices; i++)
		get_str(b, p->devices[i], sizeof(p->devices[i]));
	get_str(b, p->cipher, sizeof(p->cipher));
	get_str(b, p->reason, sizeof(p->reason));
}

int cl_send_step(int fd, const struct cl_step *s, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES] = { 0 };
	struct cl_buf b = { msg, 0, sizeof(msg), false };

	put_int(&b, s->rc);
	put_bytes(&b, s->handle, sizeof(s->handle));
	put_int(&b, s->send_ok);
	put_int(&b, s->recv_ok);
	put_pair(&b, &s->path);
	put_str(&b, s->recv_reason);
	put_dbl(&b, s->elapsed);
	put_dbl(&b, s->overhead);
	return send_buf(fd, PERF_MSG_RESULT, &b, timeout_s);
}

int cl_recv_step(int fd, struct cl_step *s, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	struct cl_buf b = { msg, 0, sizeof(msg), false };
	int rc = oob_recv_msg(fd, PERF_MSG_RESULT, msg, sizeof(msg),
			      timeout_s);

	memset(s, 0, sizeof(*s));
	if (rc)
		return rc;
	s->rc = get_int(&b);
	get_bytes(&b, s->handle, sizeof(s->handle));
	s->send_ok = get_int(&b);
	s->recv_ok = get_int(&b);
	get_pair(&b, &s->path);
	get_str(&b, s->recv_reason, sizeof(s->recv_reason));
	s->elapsed = get_dbl(&b);
	s->overhead = get_dbl(&b);
	return b.bad ? -EPROTO : 0;
}

int cl_send_host(int fd, const struct cl_host *h, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES] = { 0 };
	struct cl_buf b = { msg, 0, sizeof(msg), false };

	put_int(&b, h->rank);
	put_str(&b, h->host);
	put64(&b, h->dc);
	put_str(&b, h->config_path);
	put_str(&b, h->config_sha);
	put_str(&b, h->plugin_path);
	put_str(&b, h->plugin_sha);
	put_str(&b, h->net_name);
	put_str(&b, h->error);
	put_int(&b, h->nrails);
	for (int i = 0; i < h->nrails; i++) {
		put_str(&b, h->rails[i].name);
		put_int(&b, h->rails[i].speed_mbps);
		put64(&b, h->rails[i].fabric_id);
	}
	return send_buf(fd, PERF_MSG_RESULT, &b, timeout_s);
}

int cl_recv_host(int fd, struct cl_host *h, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	struct cl_buf b = { msg, 0, sizeof(msg), false };
	int rc = oob_recv_msg(fd, PERF_MSG_RESULT, msg, sizeof(msg),
			      timeout_s);

	memset(h, 0, sizeof(*h));
	if (rc)
		return rc;
	h->rank = get_int(&b);
	get_str(&b, h->host, sizeof(h->host));
	h->dc = get64(&b);
	get_str(&b, h->config_path, sizeof(h->config_path));
	get_str(&b, h->config_sha, sizeof(h->config_sha));
	get_str(&b, h->plugin_path, sizeof(h->plugin_path));
	get_str(&b, h->plugin_sha, sizeof(h->plugin_sha));
	get_str(&b, h->net_name, sizeof(h->net_name));
	get_str(&b, h->error, sizeof(h->error));
	h->nrails = get_int(&b);
	if (h->nrails < 0 || h->nrails > CL_MAX_RAILS)
		return -EPROTO;
	for (int i = 0; i < h->nrails; i++) {
		get_str(&b, h->rails[i].name, sizeof(h->rails[i].name));
		h->rails[i].speed_mbps = get_int(&b);
		h->rails[i].fabric_id = get64(&b);
	}
	return b.bad ? -EPROTO : 0;
}

/* ---- where the rendezvous is ---- */

static bool env_int(const char *name, int *out)
{
	const char *v = getenv(name);
	char *end;
	long n;

	if (!v || !*v)
		return false;
	n = strtol(v, &end, 10);
	if (*end || n < 0 || n > 1 << 24)
		return false;
	*out = (int)n;
	return true;
}

/* The first host of a Slurm node list: "gpu[07-09,12],cpu1" -> "gpu07". */
static char *slurm_first_host(const char *list)
{
	size_t n = strcspn(list, ",[");
	char *host;

	if (list[n] != '[')
		return strndup(list, n);
	host = malloc(n + strlen(list) + 1);
	if (!host)
		return NULL;
	memcpy(host, list, n);
	list += n + 1;
	/* the first number of the range, zero padding kept */
	size_t m = strspn(list, "0123456789");

	memcpy(host + n, list, m);
	host[n + m] = '\0';
	return host;
}

static char slurm_master[256];

/* MASTER_ADDR/MASTER_PORT, else (Slurm) the first node and port 29510. */
static int master_from_env(struct cl_opts *o, bool slurm)
{
	const char *addr = getenv("MASTER_ADDR");
	const char *nodes = getenv("SLURM_JOB_NODELIST");
	int port = CL_PORT_SLURM;

	if (!o->rdv_host && addr && *addr)
		o->rdv_host = addr;
	if (!o->rdv_host && slurm && nodes) {
		char *first = slurm_first_host(nodes);

		if (first) {
			snprintf(slurm_master, sizeof(slurm_master), "%s",
				 first);
			free(first);
			o->rdv_host = slurm_master;
		}
	}
	if (!o->rdv_port && env_int("MASTER_PORT", &port))
		o->rdv_port = port;
	else if (!o->rdv_port && slurm)
		o->rdv_port = CL_PORT_SLURM;
	return o->rdv_host && o->rdv_port ? 0 : -EINVAL;
}

int cl_rdv_resolve(struct cl_opts *o)
{
	static const struct {
		const char *rank, *size, *who;
		bool slurm;
	} launchers[] = {
		{ "RANK", "WORLD_SIZE", "torchrun", false },
		{ "SLURM_PROCID", "SLURM_NTASKS", "Slurm", true },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI",
		  false },
		{ "PMI_RANK", "PMI_SIZE", "PMI", false },
	};
	bool slurm = false;

	for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
		int rank, size;

		if (o->rank >= 0 && o->size > 0)
			break;
		if (!env_int(launchers[i].rank, &rank) ||
		    !env_int(launchers[i].size, &size))
			continue;
		if (o->rank < 0)
			o->rank = rank;
		if (o->size <= 0)
			o->size = size;
		slurm = launchers[i].slurm;
		if (o->verbose)
			fprintf(stderr, "meshinfo: rank %d of %d from %s\n",
				o->rank, o->size, launchers[i].who);
	}
	if (o->rank < 0 || o->size <= 0) {
		fprintf(stderr, "meshinfo: --cluster needs --rank and --size, or a launcher's RANK/WORLD_SIZE (torchrun), SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/PMI_SIZE\n");
		return -EINVAL;
	}
	if (o->rank >= o->size) {
		fprintf(stderr, "meshinfo: rank %d is not below the size %d\n",
			o->rank, o->size);
		return -EINVAL;
	}
	if (master_from_env(o, slurm || getenv("SLURM_JOB_NODELIST"))) {
		fprintf(stderr, "meshinfo: --cluster needs --rendezvous HOST:PORT, or MASTER_ADDR and MASTER_PORT\n");
		return -EINVAL;
	}
	return 0;
}

/* ---- the star around rank 0 ---- */

static int hello(int fd, const struct cl_opts *o)
{
	uint64_t msg[3] = { htobe64(CL_PROTO), htobe64((uint64_t)o->rank),
			    htobe64((uint64_t)o->size) };
	uint64_t ack;
	int rc = oob_send_msg(fd, PERF_MSG_HELLO, msg, sizeof(msg),
			      (int)o->timeout_s);

	if (!rc)
		rc = oob_recv_msg(fd, PERF_MSG_HELLO_ACK, &ack, sizeof(ack),
				  (int)o->timeout_s);
	if (!rc && be64toh(ack) != 0) {
		fprintf(stderr, "meshinfo: rank 0 refused rank %d: %s\n",
			o->rank, be64toh(ack) == 1 ? "another process has that rank" :
			"another meshinfo version or size");
		rc = -EPROTO;
	}
	return rc;
}

/* Rank 0: one hello; the rank it names, or negative. */
static int welcome(int fd, const struct cl_opts *o, const int *fds)
{
	uint64_t msg[3], ack = 0;
	int rank;
	int rc = oob_recv_msg(fd, PERF_MSG_HELLO, msg, sizeof(msg),
			      (int)o->timeout_s);

	if (rc)
		return rc;
	rank = (int)be64toh(msg[1]);
	if (be64toh(msg[0]) != CL_PROTO || (int)be64toh(msg[2]) != o->size ||
	    rank <= 0 || rank >= o->size)
		ack = 2;
	else if (fds[rank] >= 0)
		ack = 1;
	ack = htobe64(ack);
	rc = oob_send_msg(fd, PERF_MSG_HELLO_ACK, &ack, sizeof(ack),
			  (int)o->timeout_s);
	if (rc || ack)
		return rc ? rc : -EPROTO;
	return rank;
}

int cl_rdv_connect(const struct cl_opts *o, int *fds)
{
	const char *bind_host = strchr(o->rdv_host, ':') ? "::" : "0.0.0.0";
	double deadline = perf_now() + o->timeout_s;
	int lfd, port, joined = 1;

	for (int i = 0; i < o->size; i++)
		fds[i] = -1;
	if (o->rank) {
		fds[0] = oob_connect(o->rdv_host, o->rdv_port,
				     (int)o->timeout_s);
		if (fds[0] < 0)
			return fds[0];
		return hello(fds[0], o);
	}
	lfd = oob_listen(bind_host, o->rdv_port, &port);
	if (lfd < 0)
		return lfd;
	/* every other rank may knock at once */
	listen(lfd, o->size < 4096 ? o->size : 4096);
	while (joined < o->size) {
		int left = (int)(deadline - perf_now());
		int fd = left > 0 ? oob_accept(lfd, left) : -ETIMEDOUT;
		int rank;

		if (fd < 0) {
			fprintf(stderr, "meshinfo: %d of %d ranks joined within %u s; missing:",
				joined, o->size, o->timeout_s);
			for (int k = 1; k < o->size; k++)
				if (fds[k] < 0)
					fprintf(stderr, " %d", k);
			fprintf(stderr, "\n");
			close(lfd);
			return -ETIMEDOUT;
		}
		rank = welcome(fd, o, fds);
		if (rank < 0) {
			close(fd);	/* a stray or a duplicate */
			continue;
		}
		fds[rank] = fd;
		joined++;
	}
	close(lfd);
	return 0;
}
