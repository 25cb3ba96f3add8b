/* SPDX-License-Identifier: MIT */
/*
 * The delay line's packet side (tools/delayline/delayline_pkt.c): an
 * offloaded TCP packet, IPv4 and IPv6, cut into the segments the kernel's
 * segmentation would have sent, each checked on its own as a receiver
 * would (both checksums, lengths, sequence numbers, flags, payload); and
 * what is not cut, or counted as one segment.
 */
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "delayline.h"

#define MSS 1000
#define PAYLOAD 3500	/* 3 full segments and a half */
#define TCP_LEN 32	/* 20 bytes and 12 of options (timestamps) */

static uint8_t pkt[DL_IP_MAX];
static uint8_t seg[DL_IP_MAX];

static unsigned get16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

/* The ones' complement sum of N bytes, folded: 0xffff where a header or
 * segment with its checksum in place is whole. */
static unsigned csum(const uint8_t *p, size_t n, uint32_t acc)
{
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		acc += get16(p + i);
	if (n & 1)
		acc += (uint32_t)p[n - 1] << 8;
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return acc;
}

static uint8_t payload_byte(size_t i)
{
	return (uint8_t)(i * 7 + 3);
}

/* A TSO packet of PAYLOAD bytes at pkt: returns the IP header's length. */
static size_t build(int v6, uint32_t seq, unsigned id, uint8_t flags)
{
	size_t l3 = v6 ? 40 : 20, i;
	uint8_t *th = pkt + l3;

	memset(pkt, 0, sizeof(pkt));
	if (v6) {
		pkt[0] = 0x60;
		pkt[4] = (TCP_LEN + PAYLOAD) >> 8;
		pkt[5] = (TCP_LEN + PAYLOAD) & 0xff;
		pkt[6] = IPPROTO_TCP;
		pkt[7] = 64;
		for (i = 0; i < 32; i++)
			pkt[8 + i] = (uint8_t)(0x20 + i);
	} else {
		pkt[0] = 0x45;
		pkt[2] = (20 + TCP_LEN + PAYLOAD) >> 8;
		pkt[3] = (20 + TCP_LEN + PAYLOAD) & 0xff;
		pkt[4] = (uint8_t)(id >> 8);
		pkt[5] = (uint8_t)id;
		pkt[6] = 0x40;	/* DF */
		pkt[8] = 64;
		pkt[9] = IPPROTO_TCP;
		memcpy(pkt + 12, "\x0a\x4d\x01\x01\x0a\x4d\x02\x01", 8);
	}
	th[0] = 0x9c;		/* ports 40000 -> 50000 */
	th[1] = 0x40;
	th[2] = 0xc3;
	th[3] = 0x50;
	th[4] = (uint8_t)(seq >> 24);
	th[5] = (uint8_t)(seq >> 16);
	th[6] = (uint8_t)(seq >> 8);
	th[7] = (uint8_t)seq;
	th[12] = (TCP_LEN / 4) << 4;
	th[13] = flags;
	th[14] = 0xff;
	memcpy(th + 20, "\x01\x01\x08\x0a\x11\x22\x33\x44\x55\x66\x77\x88", 12);
	for (i = 0; i < PAYLOAD; i++)
		th[TCP_LEN + i] = payload_byte(i);
	return l3;
}

static void check_cut(int v6)
{
	struct virtio_net_hdr vh = {
		.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM,
		.gso_type = v6 ? VIRTIO_NET_HDR_GSO_TCPV6 :
			VIRTIO_NET_HDR_GSO_TCPV4,
		.gso_size = MSS,
	};
	/* the sequence number wraps inside the packet, the IPv4 id too */
	uint32_t seq0 = 0xfffff000;
	size_t l3 = build(v6, seq0, 0xfffe, 0x80 | 0x10 | 0x08 | 0x01);
	size_t len = l3 + TCP_LEN + PAYLOAD, got = 0;
	struct dl_tso t;
	unsigned k;

	CHECK(dl_tso_layout(&vh, pkt, len, &t) == 0);
	CHECK(t.segs == 4 && t.mss == MSS && t.hdr == l3 + TCP_LEN);
	CHECK(t.len == len && t.v6 == v6);
	CHECK(dl_wire_packets(&vh, pkt, len) == 4);
	for (k = 0; k < t.segs; k++) {
		size_t plen = k < 3 ? MSS : PAYLOAD - 3 * MSS;
		size_t n = dl_tso_segment(pkt, &t, k, seg);
		const uint8_t *th = seg + l3;
		uint32_t pseudo;

		CHECK(n == l3 + TCP_LEN + plen);
		if (v6) {
			CHECK(get16(seg + 4) == TCP_LEN + plen);
			CHECK(memcmp(seg + 6, pkt + 6, 34) == 0);
			pseudo = csum(seg + 8, 32, 0);
		} else {
			CHECK(get16(seg + 2) == n);
			CHECK(get16(seg + 4) == ((0xfffe + k) & 0xffff));
			CHECK(csum(seg, 20, 0) == 0xffff);
			pseudo = csum(seg + 12, 8, 0);
		}
		pseudo += IPPROTO_TCP + TCP_LEN + plen;
		CHECK(csum(th, TCP_LEN + plen, pseudo) == 0xffff);
		CHECK(get32(th + 4) == (uint32_t)(seq0 + k * MSS));
		/* CWR on the first only, PSH and FIN on the last only */
		CHECK(th[13] == (k == 0 ? 0x90 : k == 3 ? 0x19 : 0x10));
		CHECK(memcmp(th + 14, pkt + l3 + 14, 2) == 0);
		CHECK(memcmp(th + 20, pkt + l3 + 20, 12) == 0);
		CHECK(memcmp(th + TCP_LEN, pkt + l3 + TCP_LEN + k * MSS,
			     plen) == 0);
		got += plen;
	}
	CHECK(got == PAYLOAD);
}

static void check_not_cut(void)
{
	struct virtio_net_hdr vh = {
		.gso_type = VIRTIO_NET_HDR_GSO_TCPV4, .gso_size = MSS,
	};
	size_t len = build(0, 1, 1, 0x10) + TCP_LEN + PAYLOAD;
	struct dl_tso t;

	/* lengths that do not add up */
	CHECK(dl_tso_layout(&vh, pkt, len - 1, &t) == -1);
	pkt[20 + 12] = 4 << 4;	/* a TCP header of 16 bytes */
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == -1);
	build(0, 1, 1, 0x10);
	pkt[0] = 0x44;		/* IHL below 20 bytes */
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == -1);
	build(0, 1, 1, 0x10);
	vh.gso_size = 0;
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == -1);
	/* the headers and no payload */
	vh.gso_size = MSS;
	pkt[2] = 0;
	pkt[3] = 20 + TCP_LEN;
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == -1);
	/* IPv6 with a hop-by-hop header first */
	len = build(1, 1, 1, 0x10) + TCP_LEN + PAYLOAD;
	vh.gso_type = VIRTIO_NET_HDR_GSO_TCPV6;
	pkt[6] = 0;
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == -1);
	/* another offload: counted from the kernel's header length */
	vh.gso_type = VIRTIO_NET_HDR_GSO_UDP;
	vh.hdr_len = 48;
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == -1);
	CHECK(dl_wire_packets(&vh, pkt, 48 + 2500) == 3);
	vh.hdr_len = 60000;
	CHECK(dl_wire_packets(&vh, pkt, 48 + 2500) == 1);
	vh.gso_type = VIRTIO_NET_HDR_GSO_NONE;
	CHECK(dl_wire_packets(&vh, pkt, len) == 1);
	/* ECN's bit does not stop the cut */
	len = build(0, 1, 1, 0x10) + TCP_LEN + PAYLOAD;
	vh.gso_type = VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_ECN;
	CHECK(dl_tso_layout(&vh, pkt, len, &t) == 0 && t.segs == 4);
}

int main(void)
{
	check_cut(0);
	check_cut(1);
	check_not_cut();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("delay line packets: all checks passed\n");
	return 0;
}
