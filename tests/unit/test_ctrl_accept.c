/* SPDX-License-Identifier: MIT */
/*
 * The control plane over loopback, in one thread so that the order is
 * exact: a connector whose module needs only a data stream gets the
 * listener's ack, opens its stream and closes the control socket before
 * the accept is called (the listen was routing for another accept of
 * it).  The accept must still get that connection and its stream, also
 * when the stream reaches the listener only after the close (its own
 * socket, another path through a real network); a connector that closes
 * before it read the ack gave up and is dropped, also when it gives up
 * after the accept was first called or before the ack could go out.
 * With a key: a listener that closes mid-handshake is no refusal of the
 * key, a wrong key is; and a process that exits with a handshake half
 * done closes it, it does not run it on (libcrypto is gone by then).
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctrl_loopback.h"

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

/* Dials until its hello went out, with nobody routing it. */
static struct core_conn *dial_hello(uint16_t port)
{
	struct core_conn *dial = dial_start(port);
	int64_t end = core_now_ns() + 50000000ll;

	while (dial && core_now_ns() < end)
		CHECK(core_ctrl_dial_progress(dial) == -EAGAIN);
	return dial;
}

/* A connector still waiting for the ack when the accept is called, that
 * gives up right after: the accept must not have handed it out, and the
 * connector's next dial is the one accepted. */
static void test_gave_up_during_accept(struct core_listen_comm *lc,
				       uint16_t port)
{
	struct core_conn *dial = dial_hello(port), *acc = NULL;

	if (!dial)
		return;
	CHECK(core_ctrl_accept(lc, 5000, &acc) == -EAGAIN && !acc);
	core_conn_free(dial);
	usleep(20000);
	CHECK(accept_within(lc, 200000000ll, &acc) == -EAGAIN && !acc);
	if (acc)
		core_conn_free(acc);
	dial = dial_acked(lc, port);
	acc = NULL;
	CHECK(accept_within(lc, WAIT_NS, &acc) == 0 && acc);
	core_conn_free(acc);
	core_conn_free(dial);
}

/* A hello, then a reset before the listener routed it: the ack cannot go
 * out, and that is no error of the accept. */
static void test_reset_before_ack(struct core_listen_comm *lc, uint16_t port)
{
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ctrl_hello h = { .kind = CTRL_HELLO_CTRL,
				.module_tag = core_module_tag("example"),
				.nonce = NONCE, .conn_id = 77 };
	struct linger reset = { .l_onoff = 1, .l_linger = 0 };
	uint8_t hello[CTRL_HELLO_SIZE];
	struct core_conn *acc = NULL;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	ctrl_hello_encode(&h, hello);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
	CHECK(send(fd, hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello));
	usleep(20000);	/* the hello is in before the reset */
	CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset,
			 sizeof(reset)) == 0);
	close(fd);
	usleep(20000);
	CHECK(accept_within(lc, 200000000ll, &acc) == -EAGAIN && !acc);
	if (acc)
		core_conn_free(acc);
}

/* With a key: the listener closes after its challenge (it gave up
 * waiting, or its process exits): the connector dials again, it does not
 * take that for a refusal of its key. */
static void test_closed_mid_auth(void)
{
	struct core_listen_comm *lc = NULL;
	struct core_conn *dial;
	uint16_t port = 0;
	int64_t end;
	int err = -EAGAIN;

	CHECK(core_ctrl_listen(1, NONCE, 0, 0, &port, &lc) == 0);
	if (!lc)
		return;
	dial = dial_hello(port);
	ctrl_accept_progress(lc);	/* the challenge goes out */
	core_ctrl_close_listen(lc);
	end = core_now_ns() + 100000000ll;
	while (dial && err == -EAGAIN && core_now_ns() < end)
		err = core_ctrl_dial_progress(dial);
	CHECK(err == -EAGAIN);
	core_conn_free(dial);
}

/* A key the listener does not hold is refused at once, and said so. */
static void test_wrong_key(const struct core_auth_key *other)
{
	const struct core_auth_key *mine = ctrl_auth_key();
	struct core_listen_comm *lc = NULL;
	struct core_conn *dial;
	uint16_t port = 0;
	int64_t end = core_now_ns() + WAIT_NS;
	int err = -EAGAIN;

	CHECK(core_ctrl_listen(1, NONCE, 0, 0, &port, &lc) == 0);
	if (!lc)
		return;
	dial = dial_hello(port);	/* it proves our key */
	core_ctrl_set_auth_key(other);	/* the listener wants another */
	while (dial && err == -EAGAIN && core_now_ns() < end) {
		ctrl_accept_progress(lc);
		err = core_ctrl_dial_progress(dial);
	}
	CHECK(err == -EACCES);
	CHECK(dial && strstr(core_conn_tried(dial), "auth_key_file the same"));
	core_conn_free(dial);
	core_ctrl_close_listen(lc);
	core_ctrl_set_auth_key(mine);
}

static int shutdown_at_exit;

/* As the library's destructor does, after libcrypto's own cleanup (an
 * atexit handler, which runs first). */
__attribute__((destructor)) static void unload(void)
{
	if (shutdown_at_exit)
		core_ctrl_shutdown();
}

/* A process that exits while a connector is mid-handshake with it: the
 * hello and a response wait unread, and the exit must not run them on. */
static void test_exit_mid_auth(void)
{
	struct core_listen_comm *lc = NULL;
	struct sockaddr_in to = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct ctrl_hello h = { .kind = CTRL_HELLO_CTRL, .auth = 1,
				.module_tag = core_module_tag("example"),
				.nonce = NONCE, .conn_id = 78 };
	uint8_t msg[CTRL_HELLO_SIZE + 52] = { 0 }, digest[32];
	uint16_t port = 0;
	int status = 0, fd;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid)
		goto wait;
	CHECK(core_ctrl_listen(2, NONCE, 0, 0, &port, &lc) == 0);
	CHECK(core_sha256(msg, 1, digest) == 0);	/* libcrypto is set up */
	ctrl_hello_encode(&h, msg);
	memcpy(msg + CTRL_HELLO_SIZE, "MSA2", 4);
	to.sin_port = htons(port);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
	CHECK(send(fd, msg, sizeof(msg), MSG_NOSIGNAL) == sizeof(msg));
	usleep(20000);
	shutdown_at_exit = 1;
	exit(failures ? 1 : 0);
wait:
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (WIFSIGNALED(status))
		fprintf(stderr, "the exiting process died of signal %d\n",
			WTERMSIG(status));
}

int main(void)
{
	static struct core_auth_key key = { .len = 20 }, other = { .len = 20 };
	struct core_listen_comm *lc = NULL;
	uint16_t port = 0;

	CHECK(core_ctrl_listen(0, NONCE, 0, 0, &port, &lc) == 0);
	if (lc) {
		test_done_before_accept(lc, port);
		test_stream_after_close(lc, port);
		test_gave_up(lc, port);
		test_gave_up_during_accept(lc, port);
		test_reset_before_ack(lc, port);
		core_ctrl_close_listen(lc);
	}
	memset(key.bytes, 'k', key.len);
	memset(other.bytes, 'o', other.len);
	core_ctrl_set_auth_key(&key);
	test_closed_mid_auth();
	test_wrong_key(&other);
	test_exit_mid_auth();
	core_ctrl_set_auth_key(NULL);
	core_ctrl_shutdown();
	return failures ? 1 : 0;
}
