/* SPDX-License-Identifier: MIT */
/*
 * Packets as the delay line sees them (delayline.h): offloaded TCP
 * packets counted and cut into their wire segments.  The kernel is the
 * only writer of what we read, but every length is still checked against
 * what was read before it is used.
 */
#include <netinet/in.h>
#include <string.h>

#include "delayline.h"

#define TCP_CWR 0x80
#define TCP_PSH 0x08
#define TCP_FIN 0x01

static unsigned be16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, v >> 16);
	put16(p + 2, v & 0xffff);
}

/* The ones' complement sum of N bytes at P (RFC 1071), added to ACC. */
static uint64_t sum16(const uint8_t *p, size_t n, uint64_t acc)
{
	for (; n > 1; p += 2, n -= 2)
		acc += be16(p);
	if (n)
		acc += (unsigned)p[0] << 8;
	return acc;
}

static unsigned fold(uint64_t acc)
{
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return ~(unsigned)acc & 0xffff;
}

int dl_tso_layout(const struct virtio_net_hdr *vh, const uint8_t *ip,
		  size_t len, struct dl_tso *t)
{
	unsigned type = vh->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
	size_t l3, tot, thl;

	if (vh->gso_size == 0)
		return -1;
	if (type == VIRTIO_NET_HDR_GSO_TCPV4) {
		if (len < 20 || ip[0] >> 4 != 4 || ip[9] != IPPROTO_TCP)
			return -1;
		l3 = (size_t)(ip[0] & 15) * 4;
		tot = be16(ip + 2);
		t->v6 = 0;
	} else if (type == VIRTIO_NET_HDR_GSO_TCPV6) {
		/* extension headers (and BIG TCP's jumbogram) are not cut */
		if (len < 40 || ip[0] >> 4 != 6 || ip[6] != IPPROTO_TCP)
			return -1;
		l3 = 40;
		tot = 40 + be16(ip + 4);
		t->v6 = 1;
	} else {
		return -1;
	}
	if (l3 < 20 || tot > len || tot < l3 + 20)
		return -1;
	thl = (size_t)(ip[l3 + 12] >> 4) * 4;
	if (thl < 20 || l3 + thl >= tot)
		return -1;
	t->len = tot;
	t->hdr = l3 + thl;
	t->mss = vh->gso_size;
	t->segs = (unsigned)((tot - t->hdr + t->mss - 1) / t->mss);
	return 0;
}

unsigned dl_wire_packets(const struct virtio_net_hdr *vh, const uint8_t *ip,
			 size_t len)
{
	struct dl_tso t;

	if (vh->gso_type == VIRTIO_NET_HDR_GSO_NONE)
		return 1;
	if (dl_tso_layout(vh, ip, len, &t) == 0)
		return t.segs;
	/* other offloads: the header length the kernel gave, if it fits */
	if (vh->gso_size && vh->hdr_len < len)
		return (unsigned)((len - vh->hdr_len + vh->gso_size - 1) /
				  vh->gso_size);
	return 1;
}

size_t dl_tso_segment(const uint8_t *ip, const struct dl_tso *t, unsigned k,
		      uint8_t *out)
{
	size_t off = t->hdr + (size_t)k * t->mss;
	size_t plen = t->len - off < t->mss ? t->len - off : t->mss;
	size_t l3 = t->v6 ? 40 : (size_t)(ip[0] & 15) * 4;
	size_t tcp_len = t->hdr - l3 + plen;
	uint8_t *th = out + l3;
	uint64_t acc;

	memcpy(out, ip, t->hdr);
	memcpy(out + t->hdr, ip + off, plen);
	if (t->v6) {
		put16(out + 4, (unsigned)tcp_len);
		acc = sum16(out + 8, 32, 0);
	} else {
		put16(out + 2, (unsigned)(l3 + tcp_len));
		put16(out + 4, (be16(ip + 4) + k) & 0xffff);
		put16(out + 10, 0);
		put16(out + 10, fold(sum16(out, l3, 0)));
		acc = sum16(out + 12, 8, 0);
	}
	put32(th + 4, be32(th + 4) + (uint32_t)(k * t->mss));
	if (k != 0)
		th[13] &= (uint8_t)~TCP_CWR;
	if (k + 1 != t->segs)
		th[13] &= (uint8_t)~(TCP_PSH | TCP_FIN);
	put16(th + 16, 0);
	acc += IPPROTO_TCP + tcp_len;
	put16(th + 16, fold(sum16(th, tcp_len, acc)));
	return t->hdr + plen;
}
