/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics on metrics_listen, for meshrelay: a small HTTP/1.x server
 * on a thread of its own that answers one request per connection and
 * closes it.  Whoever reaches the address is a stranger: the request is
 * read into a fixed buffer (a header that does not end within it is
 * refused), a client has CLIENT_MS in all to send its request and take
 * the answer, one client at a time (a scraper asks every few seconds;
 * nothing here is worth serving many at once), and only GET /metrics is
 * answered with the counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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
/* How long one client may take, from accept to the last byte sent. */
#define CLIENT_MS 5000

struct core_metrics_http {
	const struct core_state *st;
	int fd;
	int wake[2];			/* a byte here stops the thread */
	pthread_t thread;
	char where[UTIL_ADDR_STRLEN];
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline: 1 ready, 0 out of time. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		struct pollfd p = { .fd = fd, .events = events };
		int n;

		if (left <= 0)
			return 0;
		n = poll(&p, 1, (int)left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return 0;
	}
}

static void send_all(int fd, const char *buf, size_t len, int64_t deadline)
{
	while (len && wait_fd(fd, POLLOUT, deadline)) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

static void respond(int fd, const char *status, const char *extra,
		    const char *type, const char *body, size_t len,
		    int64_t deadline)
{
	char head[512];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
			 "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
			 status, type, len, extra);

	send_all(fd, head, (size_t)n, deadline);
	send_all(fd, body, len, deadline);
}

static void respond_text(int fd, const char *status, const char *extra,
			 const char *msg, int64_t deadline)
{
	respond(fd, status, extra, "text/plain; charset=utf-8", msg,
		strlen(msg), deadline);
}

/* Reads one request, answers it; the caller closes fd. */
static void serve_client(struct core_metrics_http *h, int fd)
{
	int64_t deadline = now_ms() + CLIENT_MS;
	enum core_http_verdict v = CORE_HTTP_INCOMPLETE;
	char buf[REQUEST_MAX];
	size_t len = 0;
	char *text;
	size_t tlen;

	while (v == CORE_HTTP_INCOMPLETE) {
		ssize_t n;

		if (!wait_fd(fd, POLLIN, deadline))
			return;		/* too slow: no answer at all */
		n = recv(fd, buf + len, sizeof(buf) - len, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return;
		len += (size_t)n;
		v = core_metrics_http_parse(buf, len, sizeof(buf));
	}
	switch (v) {
	case CORE_HTTP_METRICS:
		if (core_metrics_render(h->st, NULL, &text, &tlen)) {
			respond_text(fd, "503 Service Unavailable", "",
				     "out of memory\n", deadline);
			return;
		}
		respond(fd, "200 OK", "", "text/plain; version=0.0.4; "
			"charset=utf-8", text, tlen, deadline);
		free(text);
		break;
	case CORE_HTTP_NOT_FOUND:
		respond_text(fd, "404 Not Found", "",
			     "not found: only /metrics is here\n", deadline);
		break;
	case CORE_HTTP_BAD_METHOD:
		respond_text(fd, "405 Method Not Allowed", "Allow: GET\r\n",
			     "only GET\n", deadline);
		break;
	case CORE_HTTP_TOO_LARGE:
		respond_text(fd, "431 Request Header Fields Too Large", "",
			     "request too large\n", deadline);
		break;
	default:
		respond_text(fd, "400 Bad Request", "", "bad request\n",
			     deadline);
		break;
	}
}

static void *http_thread(void *arg)
{
	struct core_metrics_http *h = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = h->fd, .events = POLLIN },
				       { .fd = h->wake[0], .events = POLLIN } };
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(h->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			continue;	/* gone before we took it, or no fds */
		serve_client(h, fd);
		/* the client reads a whole answer before our end's reset */
		shutdown(fd, SHUT_WR);
		close(fd);
	}
	return NULL;
}

static int listen_on(const struct mesh_addr *a, const char *text)
{
	struct sockaddr_storage ss;
	socklen_t sl = util_addr_to_sockaddr(a, &ss);
	int one = 1, err;
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
			SOCK_CLOEXEC, 0);

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
				 sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 16)) {
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
