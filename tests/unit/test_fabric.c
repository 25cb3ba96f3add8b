/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the pure logic under the control plane: fabricIds and path
 * classes, the handle codec (including what does not fit in 128 bytes and
 * what is not a handle at all), the subnet matching that orders dials, and
 * the size grammar.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "fabric.h"
#include "handle.h"
#include "netaddr.h"
#include "size.h"

static struct mesh_addr addr(const char *text)
{
	struct mesh_addr a;

	if (util_addr_parse(text, &a)) {
		fprintf(stderr, "bad test address %s\n", text);
		exit(2);
	}
	return a;
}

static void test_fabric_ids(void)
{
	const uint64_t max = 16;
	uint64_t dc0r1 = core_fabric_id(0, max, 1);
	uint64_t dc1r1 = core_fabric_id(1, max, 1);
	uint64_t dc1r2 = core_fabric_id(1, max, 2);

	CHECK(dc0r1 == 1);
	CHECK(dc1r1 == 17);
	CHECK(core_fabric_dc(dc1r2, max) == 1);
	CHECK(core_fabric_rail(dc1r2, max) == 2);
	CHECK(core_fabric_id(5, 1, 0) == 5);	/* one rail per dc */
	CHECK(core_path_class(dc0r1, dc0r1, max) == CORE_PATH_SAME_DC);
	CHECK(core_path_class(dc0r1, dc1r1, max) == CORE_PATH_CROSS_DC);
	CHECK(core_path_class(dc1r1, dc0r1, max) == CORE_PATH_CROSS_DC);
	CHECK(core_path_class(dc1r1, dc1r2, max) == CORE_PATH_DISCONNECTED);
	CHECK(core_path_class(dc0r1, dc1r2, max) == CORE_PATH_DISCONNECTED);
	CHECK_STR(core_path_class_name(CORE_PATH_SAME_DC), "same-DC");
	CHECK_STR(core_path_class_name(CORE_PATH_CROSS_DC), "cross-DC");
	CHECK_STR(core_path_class_name(CORE_PATH_DISCONNECTED), "disconnected");
}

static void test_handle_roundtrip(void)
{
	struct core_handle h = { .nonce = 0x0123456789abcdefull,
				 .fabric_id = 17,
				 .nmembers = 2,
				 .members = { core_module_tag("tcp-xdc"),
					      core_module_tag("ib-fabric") } };
	struct core_handle back;
	uint8_t buf[CORE_HANDLE_SIZE];
	const char *why = NULL;

	h.addrs[h.naddrs++] = addr("10.1.2.3:40000/24");
	h.addrs[h.naddrs++] = addr("[fd00::7]:40001/64");
	CHECK(core_handle_encode(&h, buf) == 2);
	CHECK(core_handle_decode(buf, &back, &why) == 0);
	CHECK(back.nonce == h.nonce);
	CHECK(back.fabric_id == 17);
	CHECK(back.nmembers == 2);
	CHECK(back.members[1] == core_module_tag("ib-fabric"));
	CHECK(back.naddrs == 2);
	CHECK(util_addr_equal_ip(&back.addrs[0], &h.addrs[0]));
	CHECK(back.addrs[0].port == 40000 && back.addrs[0].prefix_len == 24);
	CHECK(util_addr_equal_ip(&back.addrs[1], &h.addrs[1]));
	CHECK(back.addrs[1].port == 40001 && back.addrs[1].prefix_len == 64);
	CHECK(core_module_tag("tcp-xdc") != core_module_tag("ib-fabric"));
}

/* 11 IPv4 addresses fill the 88 bytes; IPv6 ones that do not fit are
 * skipped while a later IPv4 one still goes in. */
static void test_handle_capacity(void)
{
	struct core_handle h = { .nonce = 1 }, back;
	uint8_t buf[CORE_HANDLE_SIZE];
	const char *why;
	char text[32];

	for (int i = 0; i < CORE_HANDLE_ADDRS_MAX; i++) {
		snprintf(text, sizeof(text), "10.0.%d.1:4000", i);
		h.addrs[h.naddrs++] = addr(text);
	}
	CHECK(core_handle_encode(&h, buf) == CORE_HANDLE_ADDRS_MAX);
	CHECK(core_handle_decode(buf, &back, &why) == 0);
	CHECK(back.naddrs == CORE_HANDLE_ADDRS_MAX);

	h.naddrs = 0;
	for (int i = 0; i < 4; i++)
		h.addrs[h.naddrs++] = addr("[fd00::1]:1");
	h.addrs[h.naddrs++] = addr("10.9.9.9:2");
	CHECK(core_handle_encode(&h, buf) == 5);
	h.naddrs = 0;
	for (int i = 0; i < 5; i++)
		h.addrs[h.naddrs++] = addr("[fd00::1]:1");
	h.addrs[h.naddrs++] = addr("10.9.9.9:2");
	/* 4 IPv6 (80 bytes) + 1 IPv4 (8) = 88: the fifth IPv6 is dropped. */
	CHECK(core_handle_encode(&h, buf) == 5);
	CHECK(core_handle_decode(buf, &back, &why) == 0);
	CHECK(back.addrs[4].family == AF_INET);
	/* The connect state slot stays clear for the connecting side. */
	for (int i = CORE_HANDLE_STATE_OFFSET; i < CORE_HANDLE_SIZE; i++)
		CHECK(buf[i] == 0);
	h.naddrs = 0;
	CHECK(core_handle_encode(&h, buf) == -E2BIG);
}

/* A rail's members all go in the handle, or the encode fails: the peer
 * must never choose among fewer modules than the rail has.  A rail can
 * have no more members than the handle holds (refused at init). */
static void test_handle_members(void)
{
	struct core_handle h = { .nonce = 1, .naddrs = 1 }, back;
	uint8_t buf[CORE_HANDLE_SIZE];
	const char *why;

	_Static_assert(CORE_RAIL_MEMBERS_MAX <= CORE_HANDLE_MEMBERS_MAX,
		       "a rail's members fit in the handle");
	h.addrs[0] = addr("10.0.0.1:4000");
	for (int i = 0; i < CORE_HANDLE_MEMBERS_MAX; i++)
		h.members[h.nmembers++] = (uint16_t)(100 + i);
	CHECK(core_handle_encode(&h, buf) == 1);
	CHECK(core_handle_decode(buf, &back, &why) == 0);
	CHECK(back.nmembers == CORE_HANDLE_MEMBERS_MAX);
	CHECK(back.members[CORE_HANDLE_MEMBERS_MAX - 1] ==
	      100 + CORE_HANDLE_MEMBERS_MAX - 1);
	h.nmembers = CORE_HANDLE_MEMBERS_MAX + 1;
	CHECK(core_handle_encode(&h, buf) == -E2BIG);
}

static void test_handle_garbage(void)
{
	struct core_handle h = { .nonce = 1, .naddrs = 1 }, back;
	uint8_t buf[CORE_HANDLE_SIZE], bad[CORE_HANDLE_SIZE];
	const char *why = NULL;

	h.addrs[0] = addr("127.0.0.1:5");
	CHECK(core_handle_encode(&h, buf) == 1);
	memset(bad, 0xa5, sizeof(bad));
	CHECK(core_handle_decode(bad, &back, &why) == -EPROTO && why);
	memcpy(bad, buf, sizeof(bad));
	bad[4] = 99;	/* version */
	CHECK(core_handle_decode(bad, &back, &why) == -EPROTO);
	memcpy(bad, buf, sizeof(bad));
	bad[5] = 200;	/* address count */
	CHECK(core_handle_decode(bad, &back, &why) == -EPROTO);
	memcpy(bad, buf, sizeof(bad));
	bad[32] = 7;	/* family */
	CHECK(core_handle_decode(bad, &back, &why) == -EPROTO);
	memcpy(bad, buf, sizeof(bad));
	bad[5] = CORE_HANDLE_ADDRS_MAX;	/* claims more than were written */
	CHECK(core_handle_decode(bad, &back, &why) == -EPROTO);
}

/* Decode reads no byte of the slot, whatever the count claims: a relay
 * carries handles without it (120 bytes on the heap, so a sanitized build
 * sees a read past them). */
static void test_handle_without_slot(void)
{
	struct core_handle h = { .nonce = 1 }, back;
	uint8_t buf[CORE_HANDLE_SIZE], *cut = malloc(CORE_HANDLE_STATE_OFFSET);
	const char *why = NULL;

	CHECK(cut != NULL);
	if (!cut)
		return;
	/* 6 IPv4 and 2 IPv6 fill the address bytes exactly */
	for (int i = 0; i < 6; i++)
		h.addrs[h.naddrs++] = addr("10.0.0.1:4000");
	for (int i = 0; i < 2; i++)
		h.addrs[h.naddrs++] = addr("[fd00::1]:4000");
	CHECK(core_handle_encode(&h, buf) == 8);
	memcpy(cut, buf, CORE_HANDLE_STATE_OFFSET);
	CHECK(core_handle_decode(cut, &back, &why) == 0 && back.naddrs == 8);
	cut[5] = 9;	/* one more than the bytes hold */
	why = NULL;
	CHECK(core_handle_decode(cut, &back, &why) == -EPROTO && why);
	free(cut);
}

static void test_subnets(void)
{
	struct mesh_addr local = addr("192.168.7.1/30");
	struct mesh_addr peer_in = addr("192.168.7.2");
	struct mesh_addr peer_out = addr("192.168.7.5");
	struct mesh_addr v6_local = addr("fd00:1::1/64");
	struct mesh_addr v6_peer = addr("fd00:1::9");
	char text[UTIL_ADDR_STRLEN];

	CHECK(util_addr_same_subnet(&local, &peer_in));
	CHECK(!util_addr_same_subnet(&local, &peer_out));
	CHECK(util_addr_same_subnet(&v6_local, &v6_peer));
	CHECK(!util_addr_same_subnet(&local, &v6_peer));
	CHECK(util_addr_is_link_local(&(struct mesh_addr){ 0 }) == false);
	CHECK(util_addr_is_link_local(&(struct mesh_addr){
		.family = AF_INET, .ip = { 169, 254, 1, 1 } }));
	CHECK(util_addr_is_loopback(&(struct mesh_addr){
		.family = AF_INET, .ip = { 127, 0, 0, 2 } }));
	CHECK_STR(util_addr_str(&(struct mesh_addr){ .family = AF_INET6,
						      .port = 80,
						      .ip = { [15] = 1 } },
				text, sizeof(text)),
		  "[::1]:80");
	CHECK(util_addr_parse("300.1.1.1", &local) == -EINVAL);
	CHECK(util_addr_parse("1.2.3.4:99999", &local) == -EINVAL);
	CHECK(util_addr_parse("1.2.3.4/33", &local) == -EINVAL);
}

static void test_ifname_filter(void)
{
	CHECK(util_netif_match("eth", "eth0"));
	CHECK(!util_netif_match("=eth", "eth0"));
	CHECK(util_netif_match("=eth0,ib0", "ib0"));
	CHECK(!util_netif_match("^eth", "eth1"));
	CHECK(util_netif_match("^eth", "ib0"));
	CHECK(util_netif_match("^=eth0", "eth00"));
	CHECK(util_netif_match("ib0:1", "ib0"));
}

/* The filter's syntax, as tcp-xdc's check refuses it. */
static void test_ifname_syntax(void)
{
	static const char *const good[] = {
		"", "eth", "=eth0", "^docker,veth", "^=lo", "ib0:1",
		"eth0,,eth1,", "abcdefghijklmno", "eth0:65535",
	};
	static const char *const bad[] = {
		"^", "=", "^=", ",", "lo eth0", "a/b", "=lo\tx", "=lo\x01zz",
		"abcdefghijklmnop", ":1", "eth0:", "eth0:0", "eth0:65536",
		"eth0:123456", "eth0:1:2", "eth0:x",
	};
	char why[512], longest[UTIL_NETIF_FILTER_MAX + 2];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (util_netif_filter_check(good[i], why, sizeof(why))) {
			fprintf(stderr, "%s:%d: \"%s\" refused: %s\n", __FILE__,
				__LINE__, good[i], why);
			failures++;
		}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (util_netif_filter_check(bad[i], why, sizeof(why)) !=
		    -EINVAL) {
			fprintf(stderr, "%s:%d: \"%s\" taken\n", __FILE__,
				__LINE__, bad[i]);
			failures++;
		}
	/* entries of 7 bytes and a comma, up to one byte past the most */
	for (size_t i = 0; i < sizeof(longest) - 1; i++)
		longest[i] = i % 8 == 7 ? ',' : 'e';
	longest[UTIL_NETIF_FILTER_MAX] = '\0';
	CHECK(util_netif_filter_check(longest, why, sizeof(why)) == 0);
	longest[UTIL_NETIF_FILTER_MAX] = 'e';
	longest[UTIL_NETIF_FILTER_MAX + 1] = '\0';
	CHECK(util_netif_filter_check(longest, why, sizeof(why)) == -EINVAL);
}

/* The one size grammar of the config, the tools and the benchmarks. */
static void test_sizes(void)
{
	static const struct {
		const char *text;
		int rc;
		uint64_t bytes;
	} cases[] = {
		{ "0", 0, 0 },
		{ "4096", 0, 4096 },
		{ "256K", 0, 256 << 10 },
		{ "3m", 0, 3 << 20 },
		{ "4G", 0, 4ULL << 30 },
		{ "2t", 0, 2ULL << 40 },
		{ "16777215T", 0, 16777215ULL << 40 },
		{ "16777216T", -ERANGE, 0 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "K", -EINVAL, 0 },
		{ "-8K", -EINVAL, 0 },
		{ "+8", -EINVAL, 0 },
		{ " 8", -EINVAL, 0 },
		{ "8 ", -EINVAL, 0 },
		{ "8KB", -EINVAL, 0 },
		{ "8KiB", -EINVAL, 0 },
		{ "8Q", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
		{ "1.5M", -EINVAL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t got = 7;
		int rc = util_size_parse(cases[i].text, &got);

		if (rc != cases[i].rc || (!rc && got != cases[i].bytes)) {
			fprintf(stderr, "%s:%d: \"%s\": rc %d, %llu\n",
				__FILE__, __LINE__, cases[i].text, rc,
				(unsigned long long)got);
			failures++;
		}
	}
}

int main(void)
{
	test_fabric_ids();
	test_handle_roundtrip();
	test_handle_capacity();
	test_handle_members();
	test_handle_garbage();
	test_handle_without_slot();
	test_subnets();
	test_ifname_filter();
	test_ifname_syntax();
	test_sizes();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	return failures ? 1 : 0;
}
