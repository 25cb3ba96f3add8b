/* SPDX-License-Identifier: MIT */
/*
 * What NCCL's own bootstrap needs, checked before the job: NCCL connects
 * its ranks (the root, the ring, the peer-to-peer messages of transport
 * setup) with plain TCP sockets to each rank's address on one interface,
 * before any net plugin runs.  Where one host cannot reach another's
 * address there, every rank hangs in ncclCommInitRank, and nothing of the
 * plugin says why.  So each host picks that interface and address the way
 * NCCL does, listens there on a port of its own, and every host tries a
 * plain TCP connect to every other host's, all at once, each bounded.
 *
 * The listener answers each connection with a 16-byte word (a magic and
 * the host's random token) and closes it: a connect that reaches some
 * other listener at the same address (every container's 172.17.0.2, a
 * loopback address) is not taken for the host.  The connecting side reads
 * exactly those 16 bytes and compares them; nothing else from the wire is
 * read.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

#define BOOT_MAGIC "MESHBOOT"
#define BOOT_WORD 16
/* NCCL reads at most this many names from NCCL_SOCKET_IFNAME (MAX_IFS). */
#define BOOT_MAX_NAMES 16

/* ---- the interface, as NCCL picks it ---- */

/*
 * NCCL_SOCKET_IFNAME, as NCCL's documentation describes it (User Guide,
 * Environment Variables): a comma-separated list of name prefixes; a
 * leading '^' excludes the interfaces that match instead; a leading '='
 * (after the '^', if any) makes every entry an exact name.  NCCL drops a
 * ":port" suffix of an entry and reads at most 16 entries.
 */
struct if_rule {
	bool exclude, exact;
	int n;
	char names[BOOT_MAX_NAMES][IF_NAMESIZE + 48];
};

static void rule_parse(const char *list, struct if_rule *r)
{
	memset(r, 0, sizeof(*r));
	if (*list == '^') {
		r->exclude = true;
		list++;
	}
	if (*list == '=') {
		r->exact = true;
		list++;
	}
	while (*list && r->n < BOOT_MAX_NAMES) {
		size_t len = strcspn(list, ",");
		size_t name = strcspn(list, ",:");

		if (name > len)
			name = len;
		if (name && name < sizeof(r->names[0]))
			snprintf(r->names[r->n++], sizeof(r->names[0]), "%.*s",
				 (int)name, list);
		list += len;
		if (*list == ',')
			list++;
	}
}

static bool rule_match(const struct if_rule *r, const char *ifname)
{
	bool hit = false;

	for (int i = 0; i < r->n && !hit; i++)
		hit = r->exact ? !strcmp(ifname, r->names[i]) :
				 !strncmp(ifname, r->names[i],
					  strlen(r->names[i]));
	return hit != r->exclude;
}

/* An address NCCL would consider: IPv4 or IPv6 of the family asked for
 * (-1: either), not IPv6's loopback. */
static bool usable(const struct ifaddrs *a, int family)
{
	int f;

	if (!a->ifa_addr)
		return false;
	f = a->ifa_addr->sa_family;
	if ((f != AF_INET && f != AF_INET6) || (family != -1 && f != family))
		return false;
	return f != AF_INET6 ||
	       !IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)
				       a->ifa_addr)->sin6_addr);
}

/*
 * The first address, in getifaddrs' order as NCCL walks it, whose
 * interface the rule takes.  The bootstrap uses only NCCL's first
 * interface, and getifaddrs lists IPv4 addresses before IPv6 ones.
 */
static const struct ifaddrs *find_rule(const struct ifaddrs *all,
				       const char *list, int family)
{
	struct if_rule r;

	rule_parse(list, &r);
	for (const struct ifaddrs *a = all; a; a = a->ifa_next)
		if (usable(a, family) && rule_match(&r, a->ifa_name))
			return a;
	return NULL;
}

/* Whether x and y share the prefix of mask (all of one family). */
static bool same_subnet(const struct sockaddr *x, const struct sockaddr *y,
			const struct sockaddr *mask)
{
	const uint8_t *a, *b, *m;
	size_t len;

	if (!mask || x->sa_family != y->sa_family)
		return false;
	if (x->sa_family == AF_INET) {
		a = (const uint8_t *)&((const struct sockaddr_in *)x)->sin_addr;
		b = (const uint8_t *)&((const struct sockaddr_in *)y)->sin_addr;
		m = (const uint8_t *)&((const struct sockaddr_in *)mask)->sin_addr;
		len = 4;
	} else {
		a = (const uint8_t *)&((const struct sockaddr_in6 *)x)->sin6_addr;
		b = (const uint8_t *)&((const struct sockaddr_in6 *)y)->sin6_addr;
		m = (const uint8_t *)&((const struct sockaddr_in6 *)mask)->sin6_addr;
		len = 16;
	}
	for (size_t i = 0; i < len; i++)
		if ((a[i] ^ b[i]) & m[i])
			return false;
	return true;
}

/* NCCL_COMM_ID ("host:port", "[v6]:port"): the interface in its subnet. */
static const struct ifaddrs *find_comm_id(const struct ifaddrs *all,
					  const char *id)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	const struct ifaddrs *hit = NULL;
	char host[256];
	const char *colon = strrchr(id, ':');
	size_t len = colon ? (size_t)(colon - id) : strlen(id);

	if (len >= sizeof(host))
		return NULL;
	snprintf(host, sizeof(host), "%.*s", (int)len, id);
	if (host[0] == '[' && len > 2 && host[len - 1] == ']') {
		memmove(host, host + 1, len - 2);
		host[len - 2] = '\0';
	}
	if (getaddrinfo(host, NULL, &hints, &res) || !res)
		return NULL;
	for (const struct ifaddrs *a = all; a && !hit; a = a->ifa_next)
		if (usable(a, -1) &&
		    same_subnet(a->ifa_addr, res->ai_addr, a->ifa_netmask))
			hit = a;
	freeaddrinfo(res);
	return hit;
}

/*
 * NCCL's choice (its documentation, NCCL_SOCKET_IFNAME and
 * NCCL_SOCKET_FAMILY): the list the user gave, when it is longer than one
 * character, and nothing else; otherwise interfaces starting with "ib"
 * first, then the one in NCCL_COMM_ID's subnet, then any but docker* and
 * lo, and only when there is none of those docker*, then lo.
 * NCCL_SOCKET_FAMILY=AF_INET or AF_INET6 keeps to that family.
 */
static const struct ifaddrs *pick(const struct ifaddrs *all,
				  struct cl_boot_host *b)
{
	const char *env = getenv("NCCL_SOCKET_IFNAME");
	const char *fam = getenv("NCCL_SOCKET_FAMILY");
	const char *id = getenv("NCCL_COMM_ID");
	static const struct {
		const char *list, *rule;
	} order[] = {
		{ "ib", "NCCL's default: ib* first" },
		{ NULL, "NCCL's default: NCCL_COMM_ID's subnet" },
		{ "^docker,lo", "NCCL's default: not docker* or lo" },
		{ "docker", "NCCL's default: docker*, no other interface" },
		{ "lo", "NCCL's default: lo, no other interface" },
	};
	const struct ifaddrs *a = NULL;
	int family = -1;
	size_t len;

	if (fam && !strcmp(fam, "AF_INET"))
		family = AF_INET;
	else if (fam && !strcmp(fam, "AF_INET6"))
		family = AF_INET6;
	if (env && strlen(env) > 1) {
		snprintf(b->rule, sizeof(b->rule), "NCCL_SOCKET_IFNAME=%.90s",
			 env);
		a = find_rule(all, env, family);
	} else {
		for (size_t i = 0; !a && i < sizeof(order) / sizeof(order[0]);
		     i++) {
			if (order[i].list)
				a = find_rule(all, order[i].list, family);
			else if (id && strlen(id) > 1)
				a = find_comm_id(all, id);
			if (a)
				snprintf(b->rule, sizeof(b->rule), "%s",
					 order[i].rule);
		}
	}
	len = strlen(b->rule);
	if (family != -1)
		snprintf(b->rule + len, sizeof(b->rule) - len,
			 ", NCCL_SOCKET_FAMILY=%s", fam);
	if (!a)
		snprintf(b->error, sizeof(b->error),
			 "no interface for NCCL's bootstrap: %s matches none with an %s address (NCCL: \"Bootstrap : no socket interface found\")",
			 b->rule[0] ? b->rule : "NCCL's default order",
			 family == AF_INET ? "IPv4" :
			 family == AF_INET6 ? "IPv6" : "IP");
	return a;
}

/* ---- the listener: one thread, a word to every connection ---- */

static int boot_lfd = -1;
static int boot_stop[2] = { -1, -1 };
static pthread_t boot_thread;
static bool boot_running;
static uint8_t boot_word[BOOT_WORD];

static void word_put(uint8_t out[BOOT_WORD], uint64_t token)
{
	memcpy(out, BOOT_MAGIC, 8);
	token = htobe64(token);
	memcpy(out + 8, &token, 8);
}

static void *serve(void *arg)
{
	struct pollfd p[2] = { { .fd = boot_lfd, .events = POLLIN },
			       { .fd = boot_stop[0], .events = POLLIN } };

	(void)arg;
	for (;;) {
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!p[0].revents)
			continue;
		int fd = accept4(boot_lfd, NULL, NULL,
				 SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0)
			continue;
		/* 16 bytes to a fresh socket always fit its buffer: no
		 * connection can hold this thread */
		send(fd, boot_word, sizeof(boot_word),
		     MSG_DONTWAIT | MSG_NOSIGNAL);
		close(fd);
	}
	return NULL;
}

static void addr_text(const struct sockaddr *sa, char *buf, size_t cap)
{
	socklen_t len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) :
						   sizeof(struct sockaddr_in6);

	if (getnameinfo(sa, len, buf, (socklen_t)cap, NULL, 0, NI_NUMERICHOST))
		snprintf(buf, cap, "?");
}

static int listen_at(const struct sockaddr *sa, struct cl_boot_host *b)
{
	struct sockaddr_storage ss;
	socklen_t len = sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) :
						   sizeof(struct sockaddr_in6);
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memcpy(&ss, sa, len);
	/* port 0: the kernel's pick, as NCCL's own bootstrap sockets do */
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&ss)->sin6_port = 0;
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) ||
	    listen(fd, 1024) || getsockname(fd, (struct sockaddr *)&ss, &len)) {
		snprintf(b->error, sizeof(b->error),
			 "cannot listen on %s (%s), nor can NCCL's bootstrap",
			 b->addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	b->port = ntohs(sa->sa_family == AF_INET ?
			((struct sockaddr_in *)&ss)->sin_port :
			((struct sockaddr_in6 *)&ss)->sin6_port);
	return fd;
}

void cl_boot_start(struct cl_host *me)
{
	struct cl_boot_host *b = &me->boot;
	struct ifaddrs *all = NULL;
	const struct ifaddrs *a;

	memset(b, 0, sizeof(*b));
	if (getifaddrs(&all)) {
		snprintf(b->error, sizeof(b->error),
			 "cannot list the interfaces: %s", strerror(errno));
		return;
	}
	a = pick(all, b);
	if (a) {
		snprintf(b->ifname, sizeof(b->ifname), "%s", a->ifa_name);
		addr_text(a->ifa_addr, b->addr, sizeof(b->addr));
		boot_lfd = listen_at(a->ifa_addr, b);
	}
	freeifaddrs(all);
	if (boot_lfd < 0)
		return;
	if (getrandom(&b->token, sizeof(b->token), 0) !=
	    (ssize_t)sizeof(b->token))
		b->token = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
	word_put(boot_word, b->token);
	if (pipe2(boot_stop, O_CLOEXEC) ||
	    pthread_create(&boot_thread, NULL, serve, NULL)) {
		snprintf(b->error, sizeof(b->error),
			 "meshinfo cannot serve its bootstrap port");
		b->addr[0] = '\0';
		return;
	}
	boot_running = true;
}

void cl_boot_stop(void)
{
	if (boot_running) {
		if (write(boot_stop[1], "x", 1) == 1)
			pthread_join(boot_thread, NULL);
		else
			pthread_cancel(boot_thread);
		boot_running = false;
	}
	for (int i = 0; i < 2; i++)
		if (boot_stop[i] >= 0) {
			close(boot_stop[i]);
			boot_stop[i] = -1;
		}
	if (boot_lfd >= 0)
		close(boot_lfd);
	boot_lfd = -1;
}

/* ---- one host's tries ---- */

const char *cl_boot_status_text(int status)
{
	static const char *const text[CL_BOOT_NSTATUS] = {
		[CL_BOOT_UNTRIED] = "not tried",
		[CL_BOOT_OK] = "ok",
		[CL_BOOT_REFUSED] = "refused",
		[CL_BOOT_TIMEDOUT] = "timed out",
		[CL_BOOT_UNREACHABLE] = "unreachable",
		[CL_BOOT_WRONG_HOST] = "another host",
		[CL_BOOT_NO_ANSWER] = "no answer",
		[CL_BOOT_OTHER] = "other",
	};

	return status >= 0 && status < CL_BOOT_NSTATUS ? text[status] : "?";
}

struct try {
	int fd;
	bool connected;
	size_t got;
	uint8_t word[BOOT_WORD];
	double start;
	const struct cl_boot_target *t;
	struct cl_boot_result *res;
};

static void settle(struct try *x, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void settle(struct try *x, int status, const char *fmt, ...)
{
	va_list ap;

	x->res->status = status;
	x->res->ms = (perf_now() - x->start) * 1e3;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(x->res->detail, sizeof(x->res->detail), fmt, ap);
		va_end(ap);
	}
	if (x->fd >= 0)
		close(x->fd);
	x->fd = -1;
}

static int errno_status(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return CL_BOOT_REFUSED;
	case ETIMEDOUT:
		return CL_BOOT_TIMEDOUT;
	case ENETUNREACH:
	case EHOSTUNREACH:
	case ENETDOWN:
	case EHOSTDOWN:
	case EADDRNOTAVAIL:
		return CL_BOOT_UNREACHABLE;
	}
	return CL_BOOT_OTHER;
}

static void begin(struct try *x)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST |
					      AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	char port[8];
	int rc;

	x->fd = -1;
	x->start = perf_now();
	snprintf(port, sizeof(port), "%d", x->t->port);
	if (getaddrinfo(x->t->addr, port, &hints, &res) || !res) {
		settle(x, CL_BOOT_UNREACHABLE, "%s: not an address here",
		       x->t->addr);
		return;
	}
	x->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
		       SOCK_CLOEXEC, 0);
	rc = x->fd < 0 ? -1 : connect(x->fd, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	if (x->fd < 0 || (rc && errno != EINPROGRESS))
		settle(x, errno_status(errno), "connect: %s", strerror(errno));
	else
		x->connected = rc == 0;
}

/* Something happened on x's socket. */
static void advance(struct try *x, short revents)
{
	int err = 0;
	socklen_t len = sizeof(err);
	ssize_t n;

	if (!x->connected) {
		if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &err, &len))
			err = errno;
		if (err) {
			settle(x, errno_status(err), "connect: %s",
			       strerror(err));
			return;
		}
		if (!(revents & POLLOUT))
			return;
		x->connected = true;
		return;
	}
	n = recv(x->fd, x->word + x->got, BOOT_WORD - x->got, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		settle(x, CL_BOOT_NO_ANSWER,
		       "connected, but the listener there closed it without meshinfo's word");
		return;
	}
	x->got += (size_t)n;
	if (x->got < BOOT_WORD)
		return;
	uint8_t want[BOOT_WORD];

	word_put(want, x->t->token);
	if (memcmp(x->word, want, BOOT_WORD))
		settle(x, CL_BOOT_WRONG_HOST,
		       "connected, but %s answered there",
		       memcmp(x->word, BOOT_MAGIC, 8) ? "something else" :
		       "another host's meshinfo");
	else
		settle(x, CL_BOOT_OK, NULL);
}

/* Tries a batch of targets at once, every one within the limit. */
static void try_batch(struct try *x, int n)
{
	struct pollfd p[CL_BOOT_PARALLEL];
	double end = perf_now() + CL_BOOT_CONNECT_MS / 1e3;

	for (;;) {
		int live = 0;
		double now = perf_now();

		for (int i = 0; i < n; i++) {
			p[i].fd = x[i].fd;
			p[i].events = x[i].connected ? POLLIN : POLLOUT;
			p[i].revents = 0;
			live += x[i].fd >= 0;
		}
		if (!live)
			return;
		if (now >= end)
			break;
		if (poll(p, (nfds_t)n, (int)((end - now) * 1e3) + 1) < 0 &&
		    errno != EINTR)
			break;
		for (int i = 0; i < n; i++)
			if (x[i].fd >= 0 && p[i].revents)
				advance(&x[i], p[i].revents);
	}
	for (int i = 0; i < n; i++)
		if (x[i].fd >= 0)
			settle(&x[i], x[i].connected ? CL_BOOT_NO_ANSWER :
			       CL_BOOT_TIMEDOUT, x[i].connected ?
			       "connected, but no word within %d ms" :
			       "no answer to the connect within %d ms",
			       CL_BOOT_CONNECT_MS);
}

/* From host `rank` (address `own`) to every target but itself. */
static void probe(const struct cl_boot_target *t, int n, int rank,
		  const char *own, struct cl_boot_result *res)
{
	struct try *x = calloc(CL_BOOT_PARALLEL, sizeof(*x));
	int k = 0;

	for (int i = 0; i < n; i++) {
		memset(&res[i], 0, sizeof(res[i]));
		res[i].to = i;
	}
	if (!x || !own[0])
		goto out;	/* nothing tried: the host's own finding says why */
	for (int i = 0; i < n; i++) {
		if (i == rank || !t[i].addr[0] || !t[i].port)
			continue;
		x[k] = (struct try){ .t = &t[i], .res = &res[i] };
		begin(&x[k]);
		if (++k == CL_BOOT_PARALLEL) {
			try_batch(x, k);
			k = 0;
		}
	}
	try_batch(x, k);
	/* several ranks of one host share its address and all is well; a
	 * failure at one's own address is another host's copy of it */
	for (int i = 0; i < n; i++) {
		size_t len = strlen(res[i].detail);

		if (res[i].status > CL_BOOT_OK && !strcmp(t[i].addr, own))
			snprintf(res[i].detail + len,
				 sizeof(res[i].detail) - len,
				 " (this host has %s too)", own);
	}
out:
	free(x);
}

/* ---- rank 0 and the others ---- */

/* Rank 0's targets (t) or a host's results (res), n of them, in as
 * many messages as they take. */
static int send_batches(int fd, const struct cl_boot_target *t,
			const struct cl_boot_result *res, int n,
			int timeout_s)
{
	int per = t ? CL_BOOT_TARGETS : CL_BOOT_RESULTS, rc = 0;
	uint8_t msg[CL_MSG_BYTES];

	for (int first = 0; !rc && first < n; first += per) {
		int k = n - first < per ? n - first : per;

		rc = t ? cl_encode_boot_targets(t + first, first, k, msg) :
			 cl_encode_boot_results(res + first, first, k, msg);
		if (!rc)
			rc = oob_send_msg(fd, t ? PERF_MSG_HANDLE :
					  PERF_MSG_RESULT, msg, sizeof(msg),
					  timeout_s);
	}
	return rc;
}

/* Seconds a host's tries take at most: batches of CL_BOOT_PARALLEL. */
static int probe_bound_s(int n)
{
	return (n / CL_BOOT_PARALLEL + 1) * (CL_BOOT_CONNECT_MS / 1000 + 1);
}

static int recv_results(int fd, int n, struct cl_boot_result *row,
			int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	struct cl_boot_result r[CL_BOOT_RESULTS];

	for (int want = 0; want < n;) {
		int first, k, rc = oob_recv_msg(fd, PERF_MSG_RESULT, msg,
						sizeof(msg), timeout_s);

		if (!rc)
			rc = cl_decode_boot_results(msg, n, r, &first, &k);
		/* in order, and each batch whole: anything else is no
		 * answer of ours */
		if (!rc && (first != want || !k))
			rc = -EPROTO;
		if (rc)
			return rc;
		memcpy(row + first, r, (size_t)k * sizeof(*r));
		want += k;
	}
	return 0;
}

void cl_boot_run(struct cl_report *r, int *fds, int timeout_s)
{
	int n = r->nhosts;
	struct cl_boot_target *t = calloc((size_t)n, sizeof(*t));
	double t0 = perf_now();

	r->boot = calloc((size_t)n * n, sizeof(*r->boot));
	if (!t || !r->boot) {
		free(t);
		free(r->boot);
		r->boot = NULL;
		return;
	}
	for (int k = 0; k < n; k++) {
		const struct cl_host *h = &r->hosts[k];

		t[k].rank = k;
		t[k].port = h->boot.port;
		t[k].token = h->boot.token;
		if (!h->lost)
			snprintf(t[k].addr, sizeof(t[k].addr), "%s",
				 h->boot.addr);
	}
	/* every host first, so all try at once; rank 0 last */
	for (int k = 1; k < n; k++) {
		struct cl_cmd c = { .kind = CL_CMD_BOOT, .iters = (uint64_t)n };

		if (fds[k] >= 0 && (cl_send_cmd(fds[k], &c, 10) ||
				    send_batches(fds[k], t, NULL, n, 10)))
			cl_lose(r, fds, k);
	}
	probe(t, n, 0, t[0].addr, r->boot);
	for (int k = 1; k < n; k++)
		if (fds[k] >= 0 &&
		    recv_results(fds[k], n, r->boot + (size_t)k * n,
				 probe_bound_s(n) + timeout_s)) {
			cl_lose(r, fds, k);
			memset(r->boot + (size_t)k * n, 0, n * sizeof(*r->boot));
		}
	/* a lost host tried nothing, and nobody can be said to reach it */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			if (r->hosts[i].lost || r->hosts[j].lost)
				r->boot[(size_t)i * n + j].status =
					CL_BOOT_UNTRIED;
	r->boot_elapsed_s = perf_now() - t0;
	free(t);
}

int cl_boot_member(int fd, const struct cl_cmd *c, int rank, int size,
		   int timeout_s)
{
	uint8_t msg[CL_MSG_BYTES];
	struct cl_boot_target *t;
	struct cl_boot_result *res;
	int n = size, rc = 0;

	if (c->iters != (uint64_t)size)
		return -EPROTO;
	t = calloc((size_t)n, sizeof(*t));
	res = calloc((size_t)n, sizeof(*res));
	for (int want = 0; t && res && !rc && want < n;) {
		int first, k;

		rc = oob_recv_msg(fd, PERF_MSG_HANDLE, msg, sizeof(msg),
				  timeout_s);
		if (!rc)
			rc = cl_decode_boot_targets(msg, n, t + want, &first,
						    &k);
		if (!rc && (first != want || !k))
			rc = -EPROTO;
		want += rc ? 0 : k;
	}
	if (!t || !res)
		rc = -ENOMEM;
	if (!rc)
		probe(t, n, rank, t[rank].addr, res);
	if (!rc)
		rc = send_batches(fd, NULL, res, n, timeout_s);
	free(t);
	free(res);
	return rc;
}

bool cl_boot_failed(const struct cl_report *r)
{
	int n = r->nhosts;

	for (int k = 0; k < n; k++)
		if (!r->hosts[k].lost && r->hosts[k].boot.error[0])
			return true;
	for (size_t i = 0; r->boot && i < (size_t)n * n; i++)
		if (r->boot[i].status > CL_BOOT_OK)
			return true;
	return false;
}
