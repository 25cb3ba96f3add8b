/* SPDX-License-Identifier: MIT */
/*
 * The control plane over loopback, in one thread so that the order is
 * exact: a connector whose module needs only a data stream gets the
 * listener's ack, opens its stream and closes the control socket before
 * the accept is called (the listen was routing for another accept of
 * it).  The accept must still get that connection and its stream, also
 * when the stream reaches the listener only after the close (its own
 * socket, another path through a real network); a connector that closes
 * before it read the ack gave up and is dropped.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "ctrl.h"
#include "ctrl_priv.h"

#define NONCE 0x6d657368u
#define WAIT_NS (5 * 1000000000ll)

/* A connector dialing the listen on loopback, its dial started. */
static struct core_conn *dial_start(uint16_t port)
{
	struct core_handle h = { .nonce = NONCE, .naddrs = 1 };
	struct core_conn *c = NULL;

	h.addrs[0] = (struct mesh_addr){ .family = AF_INET, .port = port,
					 .ip = { 127, 0, 0, 1 } };
	CHECK(core_ctrl_dial(&h, NULL, 0, core_module_tag("example"), 0,
			     5000, &c) == 0);
	return c;
}

static struct core_conn *dial_acked(struct core_listen_comm *lc,
				    uint16_t port)
{
	struct core_conn *c = dial_start(port);
	int64_t end = core_now_ns() + WAIT_NS;
	int err;

	if (!c)
		return NULL;
	do {
		/* only routing: another accept of this listen polling */
		ctrl_accept_progress(lc);
		err = core_ctrl_dial_progress(c);
	} while (err == -EAGAIN && core_now_ns() < end);
	CHECK(err == 0);
	return c;
}

static int accept_within(struct core_listen_comm *lc, int64_t ns,
			 struct core_conn **conn)
{
	int64_t end = core_now_ns() + ns;
	int err;

	do
		err = core_ctrl_accept(lc, 5000, conn);
	while (err == -EAGAIN && core_now_ns() < end);
	return err;
}

static void test_done_before_accept(struct core_listen_comm *lc,
				    uint16_t port)
{
	struct core_conn *dial = dial_acked(lc, port), *acc = NULL;
	int fd = -1, afd = -1, err;
	char b = 0;

	if (!dial)
		return;
	do
		err = dial->ctrl.stream(&dial->ctrl, 0, &fd);
	while (err == -EAGAIN);
	CHECK(err == 0 && fd >= 0);
	CHECK(send(fd, "x", 1, MSG_NOSIGNAL) == 1);
	core_conn_free(dial);	/* the connect is complete */
	usleep(20000);

	CHECK(accept_within(lc, WAIT_NS, &acc) == 0 && acc);
	if (acc) {
		CHECK(acc->ctrl.stream(&acc->ctrl, 0, &afd) == 0);
		CHECK(afd >= 0 && recv(afd, &b, 1, 0) == 1 && b == 'x');
		core_conn_free(acc);
	}
	if (afd >= 0)
		close(afd);
	if (fd >= 0)
		close(fd);
}

/* What a connector's stream sends, dialed by hand so that it can come
 * after its connection's control socket closed. */
static int stream_dial(uint16_t port, uint64_t conn_id)
{
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ctrl_hello h = { .kind = CTRL_HELLO_STREAM,
				.module_tag = core_module_tag("example"),
				.nonce = NONCE, .conn_id = conn_id };
	uint8_t hello[CTRL_HELLO_SIZE];
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ctrl_hello_encode(&h, hello);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
	CHECK(send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello));
	CHECK(send(fd, "y", 1, MSG_NOSIGNAL) == 1);
	return fd;
}

static void test_stream_after_close(struct core_listen_comm *lc,
				    uint16_t port)
{
	struct core_conn *dial = dial_acked(lc, port), *acc = NULL;
	int fd, afd = -1, err;
	uint64_t conn_id;
	char b = 0;

	if (!dial)
		return;
	conn_id = ctrl_conn_of(dial)->conn_id;
	core_conn_free(dial);	/* complete; its stream is still on its way */
	usleep(20000);
	CHECK(accept_within(lc, WAIT_NS, &acc) == 0 && acc);
	fd = stream_dial(port, conn_id);
	if (acc) {
		int64_t end = core_now_ns() + WAIT_NS;

		do
			err = acc->ctrl.stream(&acc->ctrl, 0, &afd);
		while (err == -EAGAIN && core_now_ns() < end);
		CHECK(err == 0 && afd >= 0);
		CHECK(afd >= 0 && recv(afd, &b, 1, 0) == 1 && b == 'y');
		core_conn_free(acc);
	}
	if (afd >= 0)
		close(afd);
	if (fd >= 0)
		close(fd);
}

/* Connected and said hello, and closes before it reads the listener's
 * ack, as a connector does that heard none in time. */
static void test_gave_up(struct core_listen_comm *lc, uint16_t port)
{
	struct core_conn *dial = dial_start(port), *acc = NULL;
	int64_t end = core_now_ns() + 50000000ll;

	if (!dial)
		return;
	while (core_now_ns() < end)	/* nobody routes: no ack comes */
		CHECK(core_ctrl_dial_progress(dial) == -EAGAIN);
	ctrl_accept_progress(lc);	/* routed and acked, not read */
	core_conn_free(dial);
	usleep(20000);
	CHECK(accept_within(lc, 200000000ll, &acc) == -EAGAIN && !acc);
	if (acc)
		core_conn_free(acc);
}

int main(void)
{
	struct core_listen_comm *lc = NULL;
	uint16_t port = 0;

	CHECK(core_ctrl_listen(0, NONCE, 0, 0, &port, &lc) == 0);
	if (lc) {
		test_done_before_accept(lc, port);
		test_stream_after_close(lc, port);
		test_gave_up(lc, port);
		core_ctrl_close_listen(lc);
	}
	core_ctrl_shutdown();
	return failures ? 1 : 0;
}
