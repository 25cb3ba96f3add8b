/* SPDX-License-Identifier: MIT */
/*
 * The rejoin services (module.h, 1.6) over loopback, in one thread so
 * that the order is exact, without and with a key.  A connection is set
 * up, both ends keep it for resuming, then its control connections and
 * its NCCL listen are gone: new sockets for its streams must still reach
 * the accepting side through the listener (kept open by the rejoins),
 * each with its own secret; a connector with another rejoin key hears
 * "no such connection"; once the last rejoin closed, or where nothing
 * listens, a dial is refused.  A stream dialed twice before its take
 * leaves one socket, the newest; the listener queues a bounded number
 * and is closed by the last finalize under the rejoins kept on it.  No
 * call may wait for the network.
 */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrl_loopback.h"

#define KEY 0x72656a6f696eull		/* the module's name for it */
#define PUMP_KEY (KEY + 100)		/* another connection's */
#define STREAM 3
/* A call that waited for the network would take a second (a connect's
 * limit) or forever (a blocking read); loaded runners take a few ms. */
#define CALL_NS_MAX 500000000ll
#define DIAL_NS (2 * 1000000000ll)

static bool with_key;
static int next_rail = 20;

/* A connection gone (its control connections and its NCCL listen), kept
 * for resuming on both sides. */
struct kept {
	struct mesh_rejoin *acc;	/* accepting side's, key KEY */
	/* another rejoin on the same listener: its takes move the listener
	 * (as another connection's module does) and take nothing of acc's */
	struct mesh_rejoin *pump;
	struct mesh_rejoin *dial;	/* connecting side's */
	uint16_t port;
};

static int keep(uint64_t dial_key, struct kept *k)
{
	struct core_listen_comm *lc = NULL;
	struct core_conn *dial, *acc = NULL;
	struct mesh_rejoin *wrong = NULL;

	*k = (struct kept){ 0 };
	CHECK(core_ctrl_listen(next_rail++, NONCE, 0, 0, &k->port, &lc) == 0);
	if (!lc)
		return -1;
	dial = dial_acked(lc, k->port);
	CHECK(accept_within(lc, WAIT_NS, &acc) == 0 && acc);
	if (dial && acc) {
		CHECK(core_rejoin_listen(acc, KEY, &k->acc) == 0);
		CHECK(core_rejoin_listen(acc, PUMP_KEY, &k->pump) == 0);
		CHECK(core_rejoin_to_conn(dial, dial_key, &k->dial) == 0);
		/* each side has its own half */
		CHECK(core_rejoin_to_conn(acc, KEY, &wrong) == -EINVAL);
		core_rejoin_close(wrong);
	}
	core_conn_free(dial);
	core_conn_free(acc);
	core_ctrl_close_listen(lc);
	return k->acc && k->pump && k->dial ? 0 : -1;
}

static void unkeep(struct kept *k)
{
	core_rejoin_close(k->dial);
	core_rejoin_close(k->pump);
	core_rejoin_close(k->acc);
	*k = (struct kept){ 0 };
}

static void check_prompt(int64_t since, const char *what)
{
	int64_t ns = core_now_ns() - since;

	if (ns > CALL_NS_MAX) {
		fprintf(stderr, "%s took %lld ms\n", what,
			(long long)(ns / 1000000));
		failures++;
	}
}

/*
 * Dials stream `index` until the attempt ends, polling `pump` between
 * calls as an accepting side does (the listener moves only when one of
 * its owners polls it).  A socket pump takes meanwhile lands in *taken
 * (fd -1: none).
 */
static int dial_end(struct mesh_rejoin *rj, int index,
		    struct mesh_rejoin *pump, struct mesh_stream_new *out,
		    struct mesh_stream_new *taken)
{
	int64_t end = core_now_ns() + DIAL_NS;
	int err;

	*taken = (struct mesh_stream_new){ .fd = -1 };
	*out = (struct mesh_stream_new){ .fd = -1 };
	for (;;) {
		struct mesh_stream_new got;
		int64_t t0 = core_now_ns();

		err = core_rejoin_dial(rj, index, out);
		check_prompt(t0, "core_rejoin_dial");
		if (err != -EAGAIN || core_now_ns() > end)
			break;
		if (pump) {
			t0 = core_now_ns();
			if (core_rejoin_take(pump, &got) == 0) {
				CHECK(taken->fd < 0);	/* one per dial */
				if (taken->fd >= 0)
					close(taken->fd);
				*taken = got;
			}
			check_prompt(t0, "core_rejoin_take");
		}
		usleep(100);
	}
	return err;
}

static int take_within(struct mesh_rejoin *rj, struct mesh_stream_new *out)
{
	int64_t end = core_now_ns() + WAIT_NS;
	int err;

	*out = (struct mesh_stream_new){ .fd = -1 };
	while ((err = core_rejoin_take(rj, out)) == -EAGAIN &&
	       core_now_ns() < end)
		usleep(100);
	return err;
}

static void close_fd(int fd)
{
	if (fd >= 0)
		close(fd);
}

/* As module.h promises a module: non-blocking, TCP_NODELAY. */
static void check_socket(int fd)
{
	int nodelay = 0;
	socklen_t len = sizeof(nodelay);

	CHECK(fd >= 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK));
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len) == 0 &&
	      nodelay);
}

/* 1 when `fd` turns readable within a second. */
static int readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 1000) == 1;
}

/* Bytes written on one end arrive on the other, both ways. */
static void check_carries(int a, int b)
{
	char buf[16] = { 0 };

	CHECK(send(a, "resumed", 7, MSG_NOSIGNAL) == 7);
	CHECK(readable(b) && recv(b, buf, sizeof(buf), 0) == 7 &&
	      !memcmp(buf, "resumed", 7));
	CHECK(send(b, "back", 4, MSG_NOSIGNAL) == 4);
	CHECK(readable(a) && recv(a, buf, sizeof(buf), 0) == 4 &&
	      !memcmp(buf, "back", 4));
}

/* Both ends of one socket hold its secret: the same 32 bytes with a key,
 * none without. */
static void check_secrets(const struct mesh_stream_new *out,
			  const struct mesh_stream_new *in)
{
	if (!with_key) {
		CHECK(out->secret_len == 0 && in->secret_len == 0);
		return;
	}
	CHECK(out->secret_len == 32 && in->secret_len == 32);
	CHECK(!memcmp(out->secret, in->secret, sizeof(out->secret)));
}

static void test_resume(void)
{
	struct mesh_stream_new out, in, out2, in2, none;
	struct kept k;

	if (keep(KEY, &k))
		goto done;
	CHECK(dial_end(k.dial, STREAM, k.acc, &out, &in) == 0);
	if (in.fd < 0)
		CHECK(take_within(k.acc, &in) == 0);
	CHECK(out.index == STREAM && in.index == STREAM);
	check_socket(out.fd);
	check_socket(in.fd);
	if (out.fd >= 0 && in.fd >= 0)
		check_carries(out.fd, in.fd);
	check_secrets(&out, &in);

	CHECK(dial_end(k.dial, STREAM + 1, k.acc, &out2, &in2) == 0);
	if (in2.fd < 0)
		CHECK(take_within(k.acc, &in2) == 0);
	CHECK(out2.index == STREAM + 1 && in2.index == STREAM + 1);
	if (out2.fd >= 0 && in2.fd >= 0)
		check_carries(out2.fd, in2.fd);
	check_secrets(&out2, &in2);
	if (with_key)	/* fresh for every socket */
		CHECK(memcmp(out.secret, out2.secret, sizeof(out.secret)));
	CHECK(core_rejoin_take(k.acc, &none) == -EAGAIN);
	CHECK(core_rejoin_take(k.pump, &none) == -EAGAIN);
	/* each side's calls only */
	CHECK(core_rejoin_take(k.dial, &none) == -EINVAL);
	CHECK(core_rejoin_dial(k.acc, 0, &none) == -EINVAL);
	CHECK(core_rejoin_dial(k.dial, -1, &none) == -EINVAL);
	CHECK(core_rejoin_dial(k.dial, CTRL_STREAMS_MAX, &none) == -EINVAL);
	close_fd(out.fd);
	close_fd(in.fd);
	close_fd(out2.fd);
	close_fd(in2.fd);
done:
	unkeep(&k);
}

/* The listener answers and keeps no such connection: -ESRCH, at once
 * and again on the next attempt. */
static void test_wrong_key(void)
{
	struct mesh_stream_new out, taken;
	struct kept k;
	int64_t t0 = core_now_ns();

	if (keep(KEY + 1, &k))
		goto done;
	for (int i = 0; i < 2; i++) {
		CHECK(dial_end(k.dial, STREAM, k.pump, &out, &taken) ==
		      -ESRCH);
		CHECK(taken.fd < 0 && out.fd < 0);
	}
	check_prompt(t0, "two refused rejoins");
	CHECK(core_rejoin_take(k.acc, &taken) == -EAGAIN);
done:
	unkeep(&k);
}

/* The rejoins keep the listener open: with the connection's closed the
 * listener answers "no such connection"; with the last closed too, the
 * host refuses. */
static void test_closed(void)
{
	struct mesh_stream_new out, taken;
	struct kept k;

	if (keep(KEY, &k))
		goto done;
	core_rejoin_close(k.acc);
	k.acc = NULL;
	CHECK(dial_end(k.dial, STREAM, k.pump, &out, &taken) == -ESRCH);
	core_rejoin_close(k.pump);
	k.pump = NULL;
	CHECK(dial_end(k.dial, STREAM, NULL, &out, &taken) == -ECONNREFUSED);
	CHECK(out.fd < 0);
done:
	unkeep(&k);
}

/* A bound port with no listen on it: the host refuses at once, on every
 * attempt, and the port stays ours for the test. */
static int dead_port(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	      getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static void test_nothing_listens(void)
{
	struct core_handle h = { .nonce = NONCE, .naddrs = 1 };
	struct mesh_stream_new out, taken;
	struct mesh_rejoin *rj = NULL;
	uint16_t port = 0;
	int fd = dead_port(&port);
	int64_t t0 = core_now_ns();

	h.addrs[0] = (struct mesh_addr){ .family = AF_INET, .port = port,
					 .ip = { 127, 0, 0, 1 } };
	CHECK(core_rejoin_to(&h, NULL, core_module_tag("example"), 0, KEY,
			     &rj) == 0);
	for (int i = 0; rj && i < 3; i++)
		CHECK(dial_end(rj, STREAM, NULL, &out, &taken) ==
		      -ECONNREFUSED);
	check_prompt(t0, "three refused dials");
	core_rejoin_close(rj);
	h.naddrs = 0;
	rj = NULL;
	CHECK(core_rejoin_to(&h, NULL, core_module_tag("example"), 0, KEY,
			     &rj) == -EINVAL && !rj);
	close_fd(fd);
}

/* The address given first is tried first, then the handle's: a refused
 * attempt moves on to the next one. */
static void test_next_address(void)
{
	struct core_handle h = { .nonce = NONCE, .naddrs = 1 };
	struct mesh_addr first = { .family = AF_INET, .ip = { 127, 0, 0, 1 } };
	struct mesh_stream_new out, in;
	struct mesh_rejoin *rj = NULL;
	struct kept k;
	int fd = dead_port(&first.port);

	if (keep(KEY, &k))
		goto done;
	h.addrs[0] = (struct mesh_addr){ .family = AF_INET, .port = k.port,
					 .ip = { 127, 0, 0, 1 } };
	CHECK(core_rejoin_to(&h, &first, core_module_tag("example"), 0, KEY,
			     &rj) == 0);
	if (!rj)
		goto done;
	CHECK(dial_end(rj, STREAM, k.acc, &out, &in) == -ECONNREFUSED);
	CHECK(dial_end(rj, STREAM, k.acc, &out, &in) == 0);
	if (in.fd < 0)
		CHECK(take_within(k.acc, &in) == 0);
	CHECK(in.index == STREAM);
	if (out.fd >= 0 && in.fd >= 0)
		check_carries(out.fd, in.fd);
	close_fd(out.fd);
	close_fd(in.fd);
done:
	core_rejoin_close(rj);
	unkeep(&k);
	close_fd(fd);
}

/* A stream dialed again before its take (its dialer gave up on the
 * first): the accepting side gets one socket for it, the newest. */
static void test_redial(void)
{
	struct mesh_stream_new a, b, in, taken;
	struct kept k;
	char c;

	if (keep(KEY, &k))
		goto done;
	CHECK(dial_end(k.dial, STREAM, k.pump, &a, &taken) == 0);
	CHECK(taken.fd < 0);
	CHECK(dial_end(k.dial, STREAM, k.pump, &b, &taken) == 0);
	CHECK(taken.fd < 0);
	CHECK(take_within(k.acc, &in) == 0 && in.index == STREAM);
	CHECK(core_rejoin_take(k.acc, &taken) == -EAGAIN);
	if (b.fd >= 0 && in.fd >= 0)
		check_carries(b.fd, in.fd);
	/* the listener closed the one it replaced */
	CHECK(a.fd >= 0 && readable(a.fd) && recv(a.fd, &c, 1, 0) == 0);
	if (with_key) {
		CHECK(!memcmp(in.secret, b.secret, sizeof(in.secret)));
		CHECK(memcmp(in.secret, a.secret, sizeof(in.secret)));
	}
	close_fd(a.fd);
	close_fd(b.fd);
	close_fd(in.fd);
done:
	unkeep(&k);
}

/* The listener queues REJOIN_QUEUE_MAX sockets for a connection that
 * does not take them; one more is refused until a take makes room. */
static void test_queue_bound(void)
{
	struct mesh_stream_new out[REJOIN_QUEUE_MAX], in, more, taken;
	bool seen[REJOIN_QUEUE_MAX + 1] = { false };
	struct kept k;
	int n = 0, err;

	for (int i = 0; i < REJOIN_QUEUE_MAX; i++)
		out[i].fd = -1;
	if (keep(KEY, &k))
		goto done;
	for (int i = 0; i < REJOIN_QUEUE_MAX; i++) {
		CHECK(dial_end(k.dial, i, k.pump, &out[i], &taken) == 0);
		CHECK(taken.fd < 0);
	}
	err = dial_end(k.dial, REJOIN_QUEUE_MAX, k.pump, &more, &taken);
	if (err == 0 || err == -EAGAIN) {
		fprintf(stderr, "a rejoin past the queue's bound: %d\n", err);
		failures++;
	}
	close_fd(more.fd);
	while (core_rejoin_take(k.acc, &in) == 0) {
		CHECK(in.index >= 0 && in.index < REJOIN_QUEUE_MAX &&
		      !seen[in.index]);
		if (in.index >= 0 && in.index < REJOIN_QUEUE_MAX)
			seen[in.index] = true;
		close_fd(in.fd);
		n++;
	}
	CHECK(n == REJOIN_QUEUE_MAX);
	/* room again */
	CHECK(dial_end(k.dial, REJOIN_QUEUE_MAX, k.pump, &more, &taken) == 0);
	CHECK(take_within(k.acc, &in) == 0 && in.index == REJOIN_QUEUE_MAX);
	close_fd(more.fd);
	close_fd(in.fd);
done:
	for (int i = 0; i < REJOIN_QUEUE_MAX; i++)
		close_fd(out[i].fd);
	unkeep(&k);
}

/* A connector whose auth key the listener does not hold: -EACCES. */
static void test_other_auth_key(const struct core_auth_key *other)
{
	const struct core_auth_key *mine = ctrl_auth_key();
	struct mesh_stream_new out, taken;
	struct kept k;
	int64_t end;

	if (keep(KEY, &k))
		goto done;
	/* the dial proves another key; the listener, moved only after,
	 * holds ours */
	core_ctrl_set_auth_key(other);
	end = core_now_ns() + 50000000ll;
	while (core_now_ns() < end)
		CHECK(core_rejoin_dial(k.dial, STREAM, &out) == -EAGAIN);
	core_ctrl_set_auth_key(mine);
	CHECK(dial_end(k.dial, STREAM, k.pump, &out, &taken) == -EACCES);
	CHECK(taken.fd < 0);
	CHECK(core_rejoin_take(k.acc, &taken) == -EAGAIN);
done:
	unkeep(&k);
}

/* The library's last finalize (or its destructor) closes every listener
 * while a module still keeps a rejoin: the listener is gone, the rejoins
 * close after it. */
static void test_shutdown_first(void)
{
	struct mesh_stream_new out, taken;
	struct kept k;

	if (keep(KEY, &k))
		goto done;
	core_ctrl_shutdown();
	CHECK(dial_end(k.dial, STREAM, k.acc, &out, &taken) == -ECONNREFUSED);
	CHECK(taken.fd < 0 && core_rejoin_take(k.acc, &taken) == -EAGAIN);
done:
	unkeep(&k);
}

static void run_all(const char *mode)
{
	int before = failures;

	test_resume();
	test_wrong_key();
	test_closed();
	test_nothing_listens();
	test_next_address();
	test_redial();
	test_queue_bound();
	if (failures != before)
		fprintf(stderr, "the failures above: %s\n", mode);
}

int main(void)
{
	static struct core_auth_key key = { .len = 32 }, other = { .len = 32 };

	run_all("without a key");
	memset(key.bytes, 'k', key.len);
	memset(other.bytes, 'o', other.len);
	core_ctrl_set_auth_key(&key);
	with_key = true;
	run_all("with a key");
	test_other_auth_key(&other);
	test_shutdown_first();
	core_ctrl_set_auth_key(NULL);
	core_ctrl_shutdown();
	return failures ? 1 : 0;
}
