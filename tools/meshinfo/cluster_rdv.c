/* SPDX-License-Identifier: MIT */
/*
 * The rendezvous of meshinfo --cluster: where rank 0 listens, from the
 * arguments or the variables torchrun, Slurm, Open MPI and PMI set; the
 * star of control sockets around rank 0 (netdrive's bootstrap socket),
 * rank 0 greeting every connection at once, each with its own deadline;
 * and the messages on it (their bytes: cluster_wire.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"

/* ---- messages: cluster_wire.c's bytes over netdrive's framing ---- */

static int send_encoded(int fd, enum perf_msg type, int rc,
			const uint8_t *msg, int timeout_s)
{
	if (rc) {
		fprintf(stderr, "meshinfo: a control message does not fit\n");
		return rc;
	}
	return oob_send_msg(fd, type, msg, CL_MSG_BYTES, timeout_s);
}

int cl_send_cmd(int fd, const struct cl_cmd *c, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];

	return send_encoded(fd, PERF_MSG_HANDLE, cl_encode_cmd(c, msg), msg,
			    timeout_s);
}

int cl_recv_cmd(int fd, struct cl_cmd *c, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	int rc = oob_recv_msg(fd, PERF_MSG_HANDLE, msg, sizeof(msg),
			      timeout_s);

	return rc ? rc : cl_decode_cmd(msg, c);
}

int cl_send_step(int fd, const struct cl_step *s, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];

	return send_encoded(fd, PERF_MSG_RESULT, cl_encode_step(s, msg), msg,
			    timeout_s);
}

int cl_recv_step(int fd, struct cl_step *s, int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	int rc = oob_recv_msg(fd, PERF_MSG_RESULT, msg, sizeof(msg),
			      timeout_s);

	if (rc) {
		memset(s, 0, sizeof(*s));
		return rc;
	}
	return cl_decode_step(msg, s);
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

/*
 * How long one connection may take from its accept to its facts: a
 * joining rank sends each message as soon as it has rank 0's answer, so
 * a connection this slow is no rank of ours; the others are greeted
 * meanwhile.
 */
#define CL_GREET_S 10
/* Connections greeted at once; more wait in the listen backlog. */
#define CL_GREET_MAX 64

/* A joining rank: the hello, the key's proof both ways, our facts. */
static int join(int fd, const struct cl_opts *o, const struct cl_host *me)
{
	uint8_t body[CL_RDV_BYTES], msg[CL_MSG_BYTES];
	int t = (int)o->timeout_s, rc;
	struct cl_join j;

	cl_join_start(&j, o->rank, o->size, o->key);
	do {
		rc = oob_send_msg(fd, PERF_MSG_HELLO, j.out, sizeof(j.out), t);
		if (!rc)
			rc = oob_recv_msg(fd, PERF_MSG_HELLO_ACK, body,
					  sizeof(body), t);
		if (rc)
			return rc;	/* said by the bootstrap */
		rc = cl_join_answer(&j, body);
	} while (rc == CL_JOIN_SEND);
	explicit_bzero(&j.auth, sizeof(j.auth));
	if (rc) {
		fprintf(stderr, "meshinfo: rank %d could not join rank 0: %s\n",
			o->rank, j.why);
		return rc;
	}
	return send_encoded(fd, PERF_MSG_RESULT, cl_encode_host(me, msg), msg,
			    t);
}

/* One connection being greeted by rank 0. */
struct greeting {
	int fd;
	double deadline;
	bool claimed;		/* holds g->rank in claim[] */
	char addr[CL_ADDR_MAX];
	struct cl_greet *g;
};

struct star {
	const struct cl_opts *o;
	int *fds;
	struct cl_host *hosts;
	/* who claimed each rank, by address: a second claim names both */
	bool *claim;
	char (*claim_addr)[CL_ADDR_MAX];
	int joined;
	int n;
	struct greeting gr[CL_GREET_MAX];
};

static void addr_text(const struct sockaddr_storage *ss, socklen_t len,
		      char *buf, size_t cap)
{
	char host[INET6_ADDRSTRLEN], port[8];

	if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host),
			port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV))
		snprintf(buf, cap, "an unknown address");
	else
		snprintf(buf, cap, ss->ss_family == AF_INET6 ? "[%s]:%s" :
			 "%s:%s", host, port);
}

/* Ends a greeting: fd closed unless it joined, its claim let go. */
static void end_greeting(struct star *st, struct greeting *gr, bool joined)
{
	if (gr->claimed && !joined)
		st->claim[gr->g->rank] = false;
	if (!joined)
		close(gr->fd);
	free(gr->g);
	gr->g = NULL;
	gr->fd = -1;
}

static void refuse(struct star *st, struct greeting *gr, const char *why)
{
	fprintf(stderr, "meshinfo: rank 0 refused the connection from %s: %s\n",
		gr->addr, why);
	end_greeting(st, gr, false);
}

static void accept_one(struct star *st, int lfd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct greeting *gr = &st->gr[st->n];
	int fd = accept4(lfd, (struct sockaddr *)&ss, &len,
			 SOCK_CLOEXEC | SOCK_NONBLOCK), one = 1;
	unsigned s = st->o->timeout_s < CL_GREET_S ? st->o->timeout_s :
						    CL_GREET_S;

	if (fd < 0)
		return;		/* gone before we took it, or no fds: later */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	memset(gr, 0, sizeof(*gr));
	gr->fd = fd;
	gr->deadline = perf_now() + s;
	addr_text(&ss, len, gr->addr, sizeof(gr->addr));
	gr->g = malloc(sizeof(*gr->g));
	if (!gr->g) {
		close(fd);
		return;
	}
	cl_greet_start(gr->g, st->o->size, st->o->key);
	st->n++;
}

/*
 * Reads what a connection sent and answers it: 0 while it goes on or
 * ended (gr->fd < 0), -EEXIST when it claims a rank another holds.
 */
static int serve(struct star *st, struct greeting *gr)
{
	struct cl_greet *g = gr->g;
	uint8_t buf[4096];
	size_t want = cl_greet_want(g), used;
	ssize_t n = recv(gr->fd, buf, want < sizeof(buf) ? want : sizeof(buf),
			 0);
	int rc;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		refuse(st, gr, n ? strerror(errno) :
		       "it closed the connection before it joined");
		return 0;
	}
	rc = cl_greet_feed(g, buf, (size_t)n, &used);
	if (rc == CL_GREET_CLAIM && st->claim[g->rank]) {
		fprintf(stderr, "meshinfo: rank %d is claimed twice: by %s and by %s\n",
			g->rank, st->claim_addr[g->rank], gr->addr);
		cl_greet_verdict(g, true);
		send(gr->fd, g->out, g->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
		end_greeting(st, gr, false);
		return -EEXIST;
	}
	if (rc == CL_GREET_CLAIM) {
		st->claim[g->rank] = gr->claimed = true;
		snprintf(st->claim_addr[g->rank], CL_ADDR_MAX, "%s", gr->addr);
		cl_greet_verdict(g, false);
		rc = -EAGAIN;
	}
	/* a few dozen bytes to a fresh socket: all go, or it is not ours */
	if (g->out_len && send(gr->fd, g->out, g->out_len,
			       MSG_NOSIGNAL | MSG_DONTWAIT) !=
			  (ssize_t)g->out_len && rc == -EAGAIN) {
		refuse(st, gr, "it does not read what rank 0 sends");
		return 0;
	}
	cl_greet_sent(g, g->out_len);
	if (!rc) {
		if (st->o->verbose)
			fprintf(stderr, "meshinfo: rank %d (%s) joined from %s\n",
				g->rank, g->host.host, gr->addr);
		st->fds[g->rank] = gr->fd;
		st->hosts[g->rank] = g->host;
		st->joined++;
		end_greeting(st, gr, true);
	} else if (rc != -EAGAIN) {
		refuse(st, gr, g->why);
	}
	return 0;
}

/* Drops what is over its deadline; the time until the next deadline. */
static double expire(struct star *st, double now)
{
	double next = 1e9;

	for (int i = 0; i < st->n; i++) {
		struct greeting *gr = &st->gr[i];

		if (now < gr->deadline) {
			next = gr->deadline - now < next ? gr->deadline - now :
							   next;
			continue;
		}
		fprintf(stderr, "meshinfo: rank 0 dropped the connection from %s: it did not join within %d s\n",
			gr->addr, (int)(st->o->timeout_s < CL_GREET_S ?
					st->o->timeout_s : CL_GREET_S));
		end_greeting(st, gr, false);
	}
	return next;
}

/* Greetings that ended leave the array. */
static void compact(struct star *st)
{
	int k = 0;

	for (int i = 0; i < st->n; i++)
		if (st->gr[i].fd >= 0)
			st->gr[k++] = st->gr[i];
	st->n = k;
}

/* Rank 0: greets every connection at once until all ranks joined. */
static int greet_all(struct star *st, int lfd)
{
	const struct cl_opts *o = st->o;
	double end = perf_now() + o->timeout_s;
	struct pollfd p[1 + CL_GREET_MAX];
	int rc = 0;

	while (!rc && st->joined < o->size - 1) {
		double now = perf_now(), wait = end - now, next;

		if (wait <= 0) {
			fprintf(stderr, "meshinfo: %d of %d ranks joined within %u s; missing:",
				st->joined + 1, o->size, o->timeout_s);
			for (int k = 1; k < o->size; k++)
				if (st->fds[k] < 0)
					fprintf(stderr, " %d", k);
			fprintf(stderr, "\n");
			return -ETIMEDOUT;
		}
		next = expire(st, now);
		compact(st);
		p[0] = (struct pollfd){ .fd = st->n < CL_GREET_MAX ? lfd : -1,
					.events = POLLIN };
		for (int i = 0; i < st->n; i++)
			p[1 + i] = (struct pollfd){ .fd = st->gr[i].fd,
						    .events = POLLIN };
		wait = next < wait ? next : wait;
		if (poll(p, 1 + (nfds_t)st->n, (int)(wait * 1000) + 1) < 0 &&
		    errno != EINTR) {
			rc = -errno;
			perror("meshinfo: rendezvous poll");
			break;
		}
		for (int i = 0; !rc && i < st->n; i++)
			if (p[1 + i].revents)
				rc = serve(st, &st->gr[i]);
		if (p[0].revents && st->n < CL_GREET_MAX)
			accept_one(st, lfd);
		compact(st);
	}
	return rc;
}

/*
 * Where rank 0 listens: the address given, where it is one; a name may
 * resolve otherwise on rank 0 than on the others (/etc/hosts' 127.0.1.1
 * for the own name), so with a name every address listens.
 */
static const char *bind_host(const char *host)
{
	unsigned char a[sizeof(struct in6_addr)];

	if (inet_pton(AF_INET, host, a) == 1 ||
	    inet_pton(AF_INET6, host, a) == 1)
		return host;
	return "0.0.0.0";
}

int cl_rdv_connect(const struct cl_opts *o, const struct cl_host *me,
		   int *fds, struct cl_host *hosts)
{
	struct star *st;
	int lfd, port, rc;

	for (int i = 0; i < o->size; i++)
		fds[i] = -1;
	if (o->rank) {
		fds[0] = oob_connect(o->rdv_host, o->rdv_port,
				     (int)o->timeout_s);
		if (fds[0] < 0)
			return fds[0];
		return join(fds[0], o, me);
	}
	st = calloc(1, sizeof(*st));
	if (st) {
		st->claim = calloc((size_t)o->size, sizeof(*st->claim));
		st->claim_addr = calloc((size_t)o->size,
					sizeof(*st->claim_addr));
	}
	if (!st || !st->claim || !st->claim_addr) {
		fprintf(stderr, "meshinfo: out of memory\n");
		rc = -ENOMEM;
		goto out;
	}
	st->o = o, st->fds = fds, st->hosts = hosts;
	lfd = oob_listen(bind_host(o->rdv_host), o->rdv_port, &port);
	if (lfd < 0) {
		rc = lfd;
		goto out;
	}
	/* every other rank may knock at once */
	listen(lfd, o->size < 4096 ? o->size : 4096);
	rc = greet_all(st, lfd);
	close(lfd);
	for (int i = 0; i < st->n; i++)
		end_greeting(st, &st->gr[i], false);
out:
	if (st) {
		free(st->claim);
		free(st->claim_addr);
	}
	free(st);
	return rc;
}
