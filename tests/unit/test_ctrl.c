/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the control plane's socket-free parts and of the NCCL
 * error boundary: the listener's gate (hello, authentication, what it
 * tells a refused connector), its refusal log's rate limit, its pressure
 * policy, the frame and ack codec, and the errno -> ncclResult_t mapping
 * that docs/nccl.md documents.
 */
#include <errno.h>
#include <stdlib.h>

#include "auth.h"
#include "check.h"
#include "ctrl_gate.h"
#include "ctrl_wire.h"
#include "nccl-mesh/nccl_net.h"

ncclResult_t core_to_nccl(int err);	/* core/nccl/plugin.c */

static struct core_auth_key key = { .len = 20,
				    .bytes = "0123456789abcdefghij" };

static void hello_bytes(uint8_t *b, int auth)
{
	struct ctrl_hello h = { .kind = CTRL_HELLO_CTRL, .auth = (uint8_t)auth,
				.nonce = 99, .conn_id = 7 };

	ctrl_hello_encode(&h, b);
}

static int feed_hello(struct ctrl_gate *g, const uint8_t *b)
{
	int rc = -EAGAIN;

	/* a byte at a time: the gate must not care how the bytes come */
	for (int i = 0; i < CTRL_HELLO_SIZE && rc == -EAGAIN; i++)
		rc = ctrl_gate_feed(g, b + i, 1);
	return rc;
}

static void test_gate(void)
{
	struct ctrl_gate g;
	uint8_t b[CTRL_HELLO_SIZE];

	/* no key on either side: the hello alone passes */
	hello_bytes(b, 0);
	ctrl_gate_init(&g, NULL);
	CHECK(ctrl_gate_want(&g) == CTRL_HELLO_SIZE);
	CHECK(feed_hello(&g, b) == 0);
	CHECK(g.h.nonce == 99 && g.h.conn_id == 7);
	CHECK(ctrl_gate_want(&g) == 0);

	/* a key here, none there: refused, and the connector is told */
	ctrl_gate_init(&g, &key);
	CHECK(feed_hello(&g, b) == 1 + CTRL_REFUSE_NEEDS_AUTH);
	CHECK(ctrl_refusal_status(CTRL_REFUSE_NEEDS_AUTH) ==
	      CTRL_STATUS_NEEDS_AUTH);
	CHECK(strstr(ctrl_refusal_text(CTRL_REFUSE_NEEDS_AUTH),
		     "auth_key_file is set here") != NULL);

	/* a key there, none here */
	hello_bytes(b, 1);
	ctrl_gate_init(&g, NULL);
	CHECK(feed_hello(&g, b) == 1 + CTRL_REFUSE_NO_KEY);

	/* a key on both sides: the challenge is queued, the gate then wants
	 * exactly the 52-byte response */
	ctrl_gate_init(&g, &key);
	CHECK(feed_hello(&g, b) == -EAGAIN);
	CHECK(g.auth.out_len == 20);
	CHECK(ctrl_gate_want(&g) == 52);

	/* garbage */
	memset(b, 0, sizeof(b));
	ctrl_gate_init(&g, NULL);
	CHECK(feed_hello(&g, b) == 1 + CTRL_REFUSE_BAD_HELLO);
	CHECK(g.detail && strstr(g.detail, "magic"));
	ctrl_gate_init(&g, NULL);
	CHECK(ctrl_gate_feed(&g, b, 10) == -EAGAIN);
	CHECK(ctrl_gate_closed(&g) == CTRL_REFUSE_CLOSED);
	CHECK(ctrl_refusal_status(CTRL_REFUSE_HELLO_TIMEOUT) == 0);
}

static void test_refusal_log(void)
{
	struct ctrl_refusal_log r = { 0 };
	const int64_t s = 1000000000ll;
	int64_t now = 5 * s;
	char buf[512];
	int lines = 0;

	/* the first refusal is logged on its own */
	CHECK(ctrl_refusal_note(&r, CTRL_REFUSE_BAD_HELLO, now) == 1);
	/* 1000 a second for 15 s: counted, one summary per interval */
	for (int i = 0; i < 15000; i++) {
		now += s / 1000;
		lines += ctrl_refusal_note(&r, i % 3 ? CTRL_REFUSE_EVICTED :
					   CTRL_REFUSE_HELLO_TIMEOUT, now);
		lines += ctrl_refusal_summary(&r, now, 0, buf, sizeof(buf));
	}
	CHECK(lines == 3);
	CHECK(strstr(buf, "refused 5000 more connections in 5.0 s:") == buf);
	CHECK(strstr(buf, "1666 no complete hello in time") != NULL);
	CHECK(strstr(buf, "3334 dropped unfinished to make room") != NULL);
	/* nothing counted: no summary, forced or not */
	CHECK(ctrl_refusal_summary(&r, now + 10 * s, 1, buf, sizeof(buf)) == 0);
	/* a quiet interval later, one is logged on its own again */
	CHECK(ctrl_refusal_note(&r, CTRL_REFUSE_CLOSED, now + 10 * s) == 1);
	CHECK(ctrl_refusal_note(&r, CTRL_REFUSE_CLOSED, now + 10 * s) == 0);
	CHECK(ctrl_refusal_summary(&r, now + 10 * s, 1, buf, sizeof(buf)) == 1);
	CHECK(strstr(buf, "refused 1 more connection in") == buf);
}

/* The rejoins closed here: found by all three names, bounded, and a
 * late REJOIN for one refused as for an unknown one, but quietly. */
static void test_closed_rejoins(void)
{
	static struct ctrl_closed_set set;

	ctrl_closed_add(&set, 1, 10, 3);
	CHECK(ctrl_closed_has(&set, 1, 10, 3));
	CHECK(!ctrl_closed_has(&set, 1, 11, 3));
	CHECK(!ctrl_closed_has(&set, 2, 10, 3));
	CHECK(!ctrl_closed_has(&set, 1, 10, 4));
	for (uint64_t i = 0; i < CTRL_CLOSED_MAX - 1; i++)
		ctrl_closed_add(&set, 100 + i, 7, 3);
	CHECK(set.n == CTRL_CLOSED_MAX && ctrl_closed_has(&set, 1, 10, 3));
	ctrl_closed_add(&set, 99, 7, 3);	/* the oldest goes */
	CHECK(set.n == CTRL_CLOSED_MAX && !ctrl_closed_has(&set, 1, 10, 3));
	CHECK(ctrl_closed_has(&set, 99, 7, 3) && ctrl_closed_has(&set, 100, 7, 3));
	CHECK(ctrl_refusal_status(CTRL_REFUSE_REJOIN_CLOSED) ==
	      ctrl_refusal_status(CTRL_REFUSE_NO_REJOIN));
	CHECK(ctrl_refusal_quiet(CTRL_REFUSE_REJOIN_CLOSED));
	CHECK(!ctrl_refusal_quiet(CTRL_REFUSE_NO_REJOIN));
}

static void test_pressure(void)
{
	CHECK(ctrl_gate_pending_max(1024) == 256);
	CHECK(ctrl_gate_pending_max(20) == 16);
	CHECK(ctrl_gate_pending_max(1 << 20) == 4096);
	CHECK(ctrl_gate_pending_max(0) >= 16);
	/* the full 10 s while there is room, well under a second when full */
	CHECK(ctrl_gate_timeout_ns(3, 256) == 10 * 1000000000ll);
	CHECK(ctrl_gate_timeout_ns(100, 256) < 10 * 1000000000ll);
	CHECK(ctrl_gate_timeout_ns(256, 256) < 1000000000ll);
}

static void test_frames(void)
{
	uint8_t buf[4 + CTRL_ACK_SIZE + 4];
	size_t len;
	uint32_t status;

	ctrl_put32(buf, CTRL_ACK_SIZE);
	ctrl_ack_encode(buf + 4, CTRL_STATUS_NEEDS_AUTH);
	CHECK(ctrl_frame_peek(buf, 3, &len) == -EAGAIN);
	CHECK(ctrl_frame_peek(buf, 11, &len) == -EAGAIN);
	CHECK(ctrl_frame_peek(buf, 12, &len) == 0 && len == CTRL_ACK_SIZE);
	CHECK(ctrl_ack_decode(buf + 4, len, &status) == 0 &&
	      status == CTRL_STATUS_NEEDS_AUTH);
	CHECK(ctrl_ack_decode(buf + 4, 7, &status) == -EPROTO);
	/* the connector's marker: a length word alone */
	ctrl_put32(buf, CTRL_ACK_HEARD);
	CHECK(ctrl_frame_peek(buf, 3, &len) == -EAGAIN);
	CHECK(ctrl_frame_peek(buf, 4, &len) == CTRL_FRAME_HEARD && len == 0);
	/* "SSH-" read as a length is out of bounds: not our protocol */
	memcpy(buf, "SSH-2.0-", 8);
	CHECK(ctrl_frame_peek(buf, 8, &len) == -EPROTO);
}

static void test_error_mapping(void)
{
	/* the peer or the network between us */
	CHECK(core_to_nccl(-ECONNRESET) == ncclRemoteError);
	CHECK(core_to_nccl(-ECONNREFUSED) == ncclRemoteError);
	CHECK(core_to_nccl(-EPIPE) == ncclRemoteError);
	CHECK(core_to_nccl(-ETIMEDOUT) == ncclRemoteError);
	CHECK(core_to_nccl(-EPROTO) == ncclRemoteError);
	CHECK(core_to_nccl(-EHOSTUNREACH) == ncclRemoteError);
	/* misuse: a wrong argument */
	CHECK(core_to_nccl(-EINVAL) == ncclInvalidArgument);
	CHECK(core_to_nccl(-EBADF) == ncclInvalidArgument);
	/* configuration, or two hosts configured apart */
	CHECK(core_to_nccl(-ENOTSUP) == ncclInvalidUsage);
	CHECK(core_to_nccl(-EACCES) == ncclInvalidUsage);
	CHECK(core_to_nccl(-ENOPROTOOPT) == ncclInvalidUsage);
	CHECK(core_to_nccl(-ENOENT) == ncclInvalidUsage);
	CHECK(core_to_nccl(-EMSGSIZE) == ncclInvalidUsage);
	/* this host */
	CHECK(core_to_nccl(-ENOMEM) == ncclSystemError);
	CHECK(core_to_nccl(-EIO) == ncclSystemError);
	CHECK(core_to_nccl(-EMFILE) == ncclSystemError);
	/* a code no layer may return */
	CHECK(core_to_nccl(5) == ncclInternalError);
	CHECK(core_to_nccl(0) == ncclSuccess);
	/* never a code NCCL 2.28 does not know */
	for (int e = 0; e < 200; e++)
		CHECK((int)core_to_nccl(-e) >= 0 && (int)core_to_nccl(-e) <= 6);
}

int main(void)
{
	test_gate();
	test_refusal_log();
	test_closed_rejoins();
	test_pressure();
	test_frames();
	test_error_mapping();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
