/* SPDX-License-Identifier: MIT */
/*
 * What anyone who reaches a relay's port can send it, without a key:
 *
 *   relay_knock idle HOST PORT COUNT SECONDS [SOURCE [REOPEN_MS [HEARD]]]
 *       holds COUNT channels to the relay service, each a plain hello and
 *       then silence, from SOURCE (an address to bind); one the relay
 *       closes is opened again after REOPEN_MS (default 100).  With HEARD
 *       1 each also says it heard the ack, as a real connector does, so
 *       that the relay's accept takes it.  Prints {"event":"held",...}
 *       once COUNT are open and a summary at the end.
 *   relay_knock request HOST PORT DEST [TIMEOUT_S [RELAY...]]
 *       asks the relay, as an origin would, to carry a connection to a
 *       handle that advertises DEST (ADDR:PORT), through the relays
 *       named (an explicit route) or by the relay's choice, and prints
 *       the answer and how long it took; exit 0 once an answer came, 1
 *       if none.
 *   relay_knock resume HOST PORT DEST [TIMEOUT_S [RELAY...]]
 *       the same, for a route that replaces a broken one (RESUME): the
 *       relay reaches DEST through its rejoin, not its NCCL listen.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctrl.h"
#include "ctrl_wire.h"
#include "handle.h"
#include "layer.h"
#include "netaddr.h"
#include "relay_wire.h"

const struct mesh_host *relay_host;	/* relay.h wants one; unused here */

static int usage(void)
{
	fprintf(stderr, "usage: relay_knock idle HOST PORT COUNT SECONDS "
		"[SOURCE [REOPEN_MS [HEARD]]]\n"
		"       relay_knock request|resume HOST PORT DEST "
		"[TIMEOUT_S [RELAY...]]\n");
	return 64;
}

static int parse_endpoint(const char *host, const char *port,
			  struct mesh_addr *a)
{
	char text[128];

	snprintf(text, sizeof(text), "%s", host);
	if (util_addr_parse(text, a))
		return -EINVAL;
	a->port = (uint16_t)atoi(port);
	return a->port ? 0 : -EINVAL;
}

/* A socket that connected and sent a service hello (and the marker that
 * says the ack was heard, without waiting for it); -1 when it failed. */
static int knock(const struct mesh_addr *to, const struct mesh_addr *src,
		 int heard)
{
	struct sockaddr_storage ss;
	struct ctrl_hello h = {
		.kind = CTRL_HELLO_CTRL,
		.module_tag = core_module_tag("relay"),
		.nonce = core_service_nonce("relay"),
		.conn_id = core_random_u64(),
	};
	uint8_t hello[CTRL_HELLO_SIZE + 4];
	size_t n = heard ? sizeof(hello) : CTRL_HELLO_SIZE;
	socklen_t len;
	int fd = socket(to->family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (src) {
		len = util_addr_to_sockaddr(src, &ss);
		if (bind(fd, (struct sockaddr *)&ss, len))
			goto fail;
	}
	len = util_addr_to_sockaddr(to, &ss);
	ctrl_hello_encode(&h, hello);
	ctrl_put32(hello + CTRL_HELLO_SIZE, CTRL_ACK_HEARD);
	if (connect(fd, (struct sockaddr *)&ss, len) ||
	    send(fd, hello, n, MSG_NOSIGNAL) != (ssize_t)n)
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int idle(int argc, char **argv)
{
	struct mesh_addr to, src = { 0 };
	int count, reopen_ms = argc > 7 ? atoi(argv[7]) : 100, held = 0;
	int heard = argc > 8 && atoi(argv[8]);
	double seconds, end, *closed_at;
	unsigned long opened = 0, closed = 0, failed = 0;
	struct pollfd *p;

	if (argc < 6 || parse_endpoint(argv[2], argv[3], &to))
		return usage();
	count = atoi(argv[4]);
	seconds = atof(argv[5]);
	if (count < 1 || count > 100000 || seconds <= 0)
		return usage();
	if (argc > 6 && util_addr_parse(argv[6], &src))
		return usage();
	p = calloc((size_t)count, sizeof(*p));
	closed_at = calloc((size_t)count, sizeof(*closed_at));
	if (!p || !closed_at)
		return 1;
	for (int i = 0; i < count; i++)
		p[i].fd = -1;
	end = now_s() + seconds;
	while (now_s() < end) {
		double now = now_s();

		for (int i = 0; i < count; i++) {
			if (p[i].fd >= 0 ||
			    now - closed_at[i] < reopen_ms / 1000.0)
				continue;
			p[i].fd = knock(&to, argc > 6 ? &src : NULL, heard);
			p[i].events = POLLIN;
			if (p[i].fd < 0) {
				failed++;
				closed_at[i] = now;
			} else {
				opened++;
			}
		}
		if (!held && opened >= (unsigned long)count) {
			held = 1;
			printf("{\"event\":\"held\",\"count\":%d}\n", count);
			fflush(stdout);
		}
		if (poll(p, (nfds_t)count, 20) < 0 && errno != EINTR)
			break;
		for (int i = 0; i < count; i++) {
			uint8_t buf[256];

			if (p[i].fd < 0 || !p[i].revents)
				continue;
			/* the ack and whatever else: read, never answered */
			if (recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
				continue;
			close(p[i].fd);
			p[i].fd = -1;
			closed_at[i] = now_s();
			closed++;
		}
	}
	printf("{\"event\":\"summary\",\"opened\":%lu,\"closed_by_relay\":%lu,"
	       "\"failed\":%lu}\n", opened, closed, failed);
	for (int i = 0; i < count; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	free(p);
	free(closed_at);
	return 0;
}

/* Prints text as a JSON string's contents. */
static void json_text(const char *s)
{
	for (; *s; s++)
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			putchar(*s);
}

static int request(int argc, char **argv, uint32_t flags)
{
	struct core_handle relay = { .naddrs = 1 }, dest = { .naddrs = 1 };
	struct relay_msg m = { .type = RELAY_MSG_REQ, .hops_left = 4,
			       .flags = flags };
	uint8_t handle[CORE_HANDLE_SIZE], buf[RELAY_MSG_MAX];
	char text[128], *colon;
	struct core_conn *c;
	double t0, timeout = argc > 5 ? atof(argv[5]) : 30;
	int err, n = -EAGAIN;

	if (argc < 5 || parse_endpoint(argv[2], argv[3], &relay.addrs[0]))
		return usage();
	snprintf(text, sizeof(text), "%s", argv[4]);
	colon = strrchr(text, ':');
	if (!colon)
		return usage();
	*colon = '\0';
	if (parse_endpoint(text, colon + 1, &dest.addrs[0]))
		return usage();
	dest.nonce = core_random_u64();
	memset(handle, 0, sizeof(handle));
	if (core_handle_encode(&dest, handle) < 1)
		return usage();
	memcpy(m.handle, handle, RELAY_HANDLE_BYTES);
	for (int i = 6; i < argc; i++) {
		if (m.npath == RELAY_HOPS_MAX ||
		    strlen(argv[i]) >= RELAY_NAME_MAX)
			return usage();
		snprintf(m.path[m.npath++], RELAY_NAME_MAX, "%s", argv[i]);
	}
	snprintf(m.leg, sizeof(m.leg), "tcp-xdc");
	snprintf(m.origin, sizeof(m.origin), "knock");
	snprintf(m.text, sizeof(m.text), "knock");
	relay.nonce = core_service_nonce("relay");
	t0 = now_s();
	err = core_ctrl_dial(&relay, NULL, 0, core_module_tag("relay"), 0,
			     (int)(timeout * 1000), &c);
	if (err)
		return 1;
	while ((err = core_ctrl_dial_progress(c)) == -EAGAIN &&
	       now_s() - t0 < timeout)
		usleep(1000);
	if (!err)
		err = c->ctrl.send(&c->ctrl, buf, relay_msg_encode(&m, buf));
	while (!err && (n = c->ctrl.recv(&c->ctrl, buf, sizeof(buf))) ==
	       -EAGAIN && now_s() - t0 < timeout)
		usleep(1000);
	if (err || n < 0 || relay_msg_decode(buf, (size_t)n, &m) ||
	    m.type != RELAY_MSG_RESP) {
		printf("{\"event\":\"no-answer\",\"error\":\"%s\",\"ms\":%.1f}\n",
		       strerror(err ? -err : n < 0 ? -n : EPROTO),
		       (now_s() - t0) * 1000);
		core_conn_free(c);
		return 1;
	}
	printf("{\"event\":\"answer\",\"status\":%d,\"ms\":%.1f,\"text\":\"",
	       m.status, (now_s() - t0) * 1000);
	json_text(m.text);
	printf("\"}\n");
	core_conn_free(c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "idle"))
		return idle(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "request"))
		return request(argc, argv, 0);
	if (argc > 1 && !strcmp(argv[1], "resume"))
		return request(argc, argv, RELAY_FLAG_RESUMABLE |
				     RELAY_FLAG_RESUME);
	return usage();
}
