/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics on metrics_listen, for meshrelay: a small HTTP/1.x server
 * on a thread of its own that answers one request per connection and
 * closes it.  Whoever reaches the address is a stranger, and a scraper
 * must get through whatever strangers do there, so one poll() loop serves
 * every connection at once, blocking on none, and bounds what any of
 * them holds (DESIGN.md, decision 12):
 *  - at most CONNS_MAX connections, CONNS_PER_SOURCE of them from one
 *    source (one IPv4 address, one IPv6 /64); a newcomer always gets a
 *    slot: when its source holds its share the oldest of that source
 *    goes, and when all slots are taken the oldest of the source that
 *    holds most;
 *  - a client has CLIENT_MS from its accept to send its request and take
 *    the answer, then LINGER_MS to close its end;
 *  - the request is read into a fixed buffer (a header that does not end
 *    within it is refused), and only GET /metrics gets the counters.
 * A scraper sends its request at once and reads the answer at once, so
 * it is never the oldest for long: whoever holds connections open only
 * crowds out its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "core_log.h"
#include "metrics.h"
#include "netaddr.h"
#include "params.h"
#include "state.h"

/* The most a request's line and headers may take. */
#define REQUEST_MAX 8192
/* Connections served at once, in all and from one source. */
#define CONNS_MAX 64
#define CONNS_PER_SOURCE 8
/* How long one client may take, from accept to the last byte sent. */
#define CLIENT_MS 5000
/* How long after the answer the client has to close its end. */
#define LINGER_MS 1000
/* Accepts per wake-up, so that a storm of connects leaves the loop time
 * for those it holds; and the pause when the process is out of fds. */
#define ACCEPT_BURST 64
#define ACCEPT_PAUSE_MS 100
/* Connections ended unanswered are summed up this often, never a line
 * each: anyone may open them. */
#define LOG_MS 5000

enum conn_stage { C_FREE, C_READ, C_WRITE, C_LINGER };

struct http_conn {
	enum conn_stage stage;
	int fd;
	struct mesh_addr src;	/* who connected, for the per-source bound */
	uint64_t seq;		/* accept order: the lower, the older */
	int64_t deadline;	/* ms; ended then, answered or not */
	size_t len;		/* of req read so far */
	char *out;		/* C_WRITE: the answer, malloc'd */
	size_t out_len, sent;
	char req[REQUEST_MAX];
};

struct core_metrics_http {
	const struct core_state *st;
	int fd;
	int wake[2];			/* a byte here stops the thread */
	pthread_t thread;
	char where[UTIL_ADDR_STRLEN];
	/* the thread's own from here on */
	uint64_t next_seq;
	int64_t accept_after;		/* ms; no accept before then */
	unsigned crowded, slow;		/* ended unanswered, not yet told */
	int64_t log_after;		/* ms; no summary before then */
	bool poll_failed;		/* told once */
	struct http_conn conns[CONNS_MAX];
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_end(struct http_conn *c)
{
	close(c->fd);
	free(c->out);
	c->out = NULL;
	c->fd = -1;
	c->stage = C_FREE;
}

/* The answer into c->out: a head, then len bytes of body. */
static int compose(struct http_conn *c, const char *status,
		   const char *extra, const char *type, const char *body,
		   size_t len)
{
	char head[512];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 status, type, len, extra);

	c->out = malloc((size_t)n + len);
	if (!c->out)
		return -ENOMEM;
	memcpy(c->out, head, (size_t)n);
	memcpy(c->out + n, body, len);
	c->out_len = (size_t)n + len;
	c->sent = 0;
	return 0;
}

static int compose_text(struct http_conn *c, const char *status,
			const char *extra, const char *msg)
{
	return compose(c, status, extra, "text/plain; charset=utf-8", msg,
		       strlen(msg));
}

static int compose_answer(struct core_metrics_http *h, struct http_conn *c,
			  enum core_http_verdict v)
{
	char *text;
	size_t tlen;
	int err;

	switch (v) {
	case CORE_HTTP_METRICS:
		if (core_metrics_render(h->st, NULL, &text, &tlen))
			return compose_text(c, "503 Service Unavailable", "",
					    "out of memory\n");
		err = compose(c, "200 OK", "", "text/plain; version=0.0.4; "
			      "charset=utf-8", text, tlen);
		free(text);
		return err;
	case CORE_HTTP_NOT_FOUND:
		return compose_text(c, "404 Not Found", "",
				    "not found: only /metrics is here\n");
	case CORE_HTTP_BAD_METHOD:
		return compose_text(c, "405 Method Not Allowed",
				    "Allow: GET\r\n", "only GET\n");
	case CORE_HTTP_TOO_LARGE:
		return compose_text(c, "431 Request Header Fields Too Large",
				    "", "request too large\n");
	default:
		return compose_text(c, "400 Bad Request", "",
				    "bad request\n");
	}
}

/* Sends what the socket takes now; once all is sent, only our side is
 * shut: a close with the client's bytes unread would reset the
 * connection, and the answer with it. */
static void write_answer(struct http_conn *c, int64_t now)
{
	while (c->sent < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->sent, c->out_len - c->sent,
				 MSG_NOSIGNAL);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;		/* poll says when it takes more */
		if (n <= 0) {
			conn_end(c);
			return;
		}
		c->sent += (size_t)n;
	}
	free(c->out);
	c->out = NULL;
	shutdown(c->fd, SHUT_WR);
	c->stage = C_LINGER;
	c->deadline = now + LINGER_MS;
}

/* One read of the request; the answer once it is whole. */
static void read_request(struct core_metrics_http *h, struct http_conn *c,
			 int64_t now)
{
	enum core_http_verdict v;
	ssize_t n = recv(c->fd, c->req + c->len, sizeof(c->req) - c->len, 0);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_end(c);		/* gone before its request: no answer */
		return;
	}
	c->len += (size_t)n;
	/* A header ends with a newline: while none comes and there is room,
	 * the verdict stays INCOMPLETE, and a client sending a byte at a
	 * time does not make us scan its whole buffer each time. */
	if (c->len < sizeof(c->req) &&
	    !memchr(c->req + c->len - (size_t)n, '\n', (size_t)n))
		return;
	v = core_metrics_http_parse(c->req, c->len, sizeof(c->req));
	if (v == CORE_HTTP_INCOMPLETE)
		return;
	if (compose_answer(h, c, v)) {
		conn_end(c);		/* no memory even for an error */
		return;
	}
	c->stage = C_WRITE;
	write_answer(c, now);
}

/* After the answer: whatever the client still sends is dropped, until it
 * closes its end. */
static void linger(struct http_conn *c)
{
	ssize_t n = recv(c->fd, c->req, sizeof(c->req), 0);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		conn_end(c);
}

/* The oldest connection of the source that holds most (of sources that
 * hold as many, the one whose oldest is older); every slot is taken. */
static struct http_conn *most_held_oldest(struct core_metrics_http *h)
{
	struct http_conn *best = NULL;
	int most = 0;

	for (int i = 0; i < CONNS_MAX; i++) {
		struct http_conn *first = &h->conns[i];
		int n = 0;

		for (int j = 0; j < CONNS_MAX; j++) {
			struct http_conn *o = &h->conns[j];

			if (!util_addr_same_source(&o->src, &first->src))
				continue;
			n++;
			if (o->seq < first->seq)
				first = o;
		}
		if (n > most || (n == most && first->seq < best->seq)) {
			most = n;
			best = first;
		}
	}
	return best;
}

/* A free slot for a connection from src, made when there is none or its
 * source holds its share. */
static struct http_conn *make_room(struct core_metrics_http *h,
				   const struct mesh_addr *src)
{
	struct http_conn *free_slot = NULL, *oldest_src = NULL, *victim;
	int nsrc = 0;

	for (int i = 0; i < CONNS_MAX; i++) {
		struct http_conn *c = &h->conns[i];

		if (c->stage == C_FREE) {
			free_slot = free_slot ? free_slot : c;
		} else if (util_addr_same_source(&c->src, src)) {
			nsrc++;
			if (!oldest_src || c->seq < oldest_src->seq)
				oldest_src = c;
		}
	}
	if (nsrc < CONNS_PER_SOURCE && free_slot)
		return free_slot;
	victim = nsrc >= CONNS_PER_SOURCE ? oldest_src : most_held_oldest(h);
	if (victim->stage != C_LINGER)
		h->crowded++;
	conn_end(victim);
	return victim;
}

static void accept_some(struct core_metrics_http *h, int64_t now)
{
	for (int i = 0; i < ACCEPT_BURST; i++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct mesh_addr src;
		struct http_conn *c;
		int fd = accept4(h->fd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0 && (errno == EMFILE || errno == ENFILE ||
			       errno == ENOBUFS || errno == ENOMEM)) {
			/* the descriptors are the relay's too: what waits
			 * in the backlog is taken a little later, without
			 * spinning on it */
			h->accept_after = now + ACCEPT_PAUSE_MS;
			return;
		}
		if (fd < 0 && errno == EAGAIN)
			return;
		if (fd < 0)
			continue;	/* gone before we took it */
		util_addr_from_sockaddr((struct sockaddr *)&ss, &src);
		c = make_room(h, &src);
		c->stage = C_READ;
		c->fd = fd;
		c->src = src;
		c->seq = h->next_seq++;
		c->deadline = now + CLIENT_MS;
		c->len = 0;
	}
}

static void log_ended(struct core_metrics_http *h, int64_t now,
		      int64_t *wake)
{
	if (!h->crowded && !h->slow)
		return;
	if (now < h->log_after) {
		*wake = *wake < h->log_after ? *wake : h->log_after;
		return;
	}
	CORE_INFO("metrics: ended %u connections unanswered: %u crowded "
		  "out (%d at most from one source, %d in all), %u too slow "
		  "(%d ms to send a request and take the answer)",
		  h->crowded + h->slow, h->crowded, CONNS_PER_SOURCE,
		  CONNS_MAX, h->slow, CLIENT_MS);
	h->crowded = h->slow = 0;
	h->log_after = now + LOG_MS;
}

static void *http_thread(void *arg)
{
	struct core_metrics_http *h = arg;
	struct pollfd p[2 + CONNS_MAX];
	struct http_conn *of[CONNS_MAX];

	for (;;) {
		int64_t now = now_ms(), wake = INT64_MAX;
		int np = 2, n;

		p[0] = (struct pollfd){ .fd = h->wake[0], .events = POLLIN };
		/* a negative fd is left out by poll */
		p[1] = (struct pollfd){ .fd = now < h->accept_after ? -1 :
					h->fd, .events = POLLIN };
		if (now < h->accept_after)
			wake = h->accept_after;
		for (int i = 0; i < CONNS_MAX; i++) {
			struct http_conn *c = &h->conns[i];

			if (c->stage == C_FREE)
				continue;
			if (now >= c->deadline) {
				h->slow += c->stage != C_LINGER;
				conn_end(c);
				continue;
			}
			wake = wake < c->deadline ? wake : c->deadline;
			of[np - 2] = c;
			p[np++] = (struct pollfd){ .fd = c->fd, .events =
				c->stage == C_WRITE ? POLLOUT : POLLIN };
		}
		log_ended(h, now, &wake);
		n = poll(p, (nfds_t)np, wake == INT64_MAX ? -1 :
			 (int)(wake - now));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			if (!h->poll_failed)
				CORE_WARN("metrics: poll failed: %s; trying "
					  "again", strerror(errno));
			h->poll_failed = true;
			/* no spinning on it; the pipe still stops us */
			poll(p, 1, ACCEPT_PAUSE_MS);
			continue;
		}
		if (p[0].revents)
			break;
		now = now_ms();
		for (int i = 2; i < np; i++) {
			struct http_conn *c = of[i - 2];

			if (!p[i].revents)
				continue;
			if (c->stage == C_READ)
				read_request(h, c, now);
			else if (c->stage == C_WRITE)
				write_answer(c, now);
			else
				linger(c);
		}
		if (p[1].revents)
			accept_some(h, now);
	}
	for (int i = 0; i < CONNS_MAX; i++)
		if (h->conns[i].stage != C_FREE)
			conn_end(&h->conns[i]);
	return NULL;
}

static int listen_on(const struct mesh_addr *a, const char *text)
{
	struct sockaddr_storage ss;
	socklen_t sl = util_addr_to_sockaddr(a, &ss);
	int one = 1, err;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
			SOCK_CLOEXEC, 0);

	/* the kernel's longest backlog: a connect waits there only until
	 * the next burst of accepts, and no crowd fills it */
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
				 sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, SOMAXCONN)) {
		err = -errno;
		CORE_WARN("metrics_listen %s: %s", text, strerror(-err));
		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

static void http_free(struct core_metrics_http *h)
{
	if (h->fd >= 0)
		close(h->fd);
	if (h->wake[0] >= 0)
		close(h->wake[0]);
	if (h->wake[1] >= 0)
		close(h->wake[1]);
	free(h);
}

int core_metrics_http_start(const struct core_state *st,
			    struct core_metrics_http **out)
{
	const char *text =
		core_config_core(st->cfg)->values[CP_METRICS_LISTEN].text;
	struct core_metrics_http *h;
	struct mesh_addr a;
	int err;

	*out = NULL;
	if (!text || !*text)
		return 0;
	if (util_addr_parse(text, &a) || !a.port || a.prefix_len) {
		CORE_WARN("metrics_listen \"%.200s\": expected <ip>:<port> "
			  "(\"127.0.0.1:9464\", \"[::1]:9464\")", text);
		return -EINVAL;
	}
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->st = st;
	h->wake[0] = h->wake[1] = -1;
	h->fd = listen_on(&a, text);
	if (h->fd < 0) {
		err = h->fd;
		free(h);
		return err;
	}
	if (pipe2(h->wake, O_CLOEXEC)) {
		err = -errno;
		CORE_WARN("metrics_listen %s: %s", text, strerror(-err));
		http_free(h);
		return err;
	}
	err = -pthread_create(&h->thread, NULL, http_thread, h);
	if (err) {
		CORE_WARN("metrics_listen %s: cannot start its thread: %s",
			  text, strerror(-err));
		http_free(h);
		return err;
	}
	util_addr_str(&a, h->where, sizeof(h->where));
	CORE_INFO("metrics: serving http://%s/metrics", h->where);
	*out = h;
	return 0;
}

void core_metrics_http_stop(struct core_metrics_http *h)
{
	if (!h)
		return;
	/* a pipe with nothing in it takes a byte; should it not, the thread
	 * keeps what it uses (a leak, not a use after free) */
	if (write(h->wake[1], "x", 1) != 1) {
		CORE_WARN("metrics: cannot stop the HTTP thread: %s",
			  strerror(errno));
		return;
	}
	pthread_join(h->thread, NULL);
	http_free(h);
}
