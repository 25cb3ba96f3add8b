/* SPDX-License-Identifier: MIT */
/*
 * The packet side of the delay line (delayline_pkt.c): how many packets
 * on the wire one packet read from the TUN device stands for, and a TCP
 * segmentation offload packet cut into the segments a NIC would have
 * sent, so that loss can take one of them (delayline.c has the rest).
 */
#ifndef DELAYLINE_H
#define DELAYLINE_H

#include <linux/virtio_net.h>
#include <stddef.h>
#include <stdint.h>

/* What the kernel hands us: the virtio header, then the IP packet. */
#define DL_VNET_LEN sizeof(struct virtio_net_hdr)
/* The largest IP packet a TUN device without BIG TCP passes (64 KiB). */
#define DL_IP_MAX 65536u

/* A TCP packet of TSO: the headers, and its payload in gso_size pieces. */
struct dl_tso {
	size_t len;		/* the IP packet, headers included */
	size_t hdr;		/* IP and TCP headers */
	size_t mss;		/* payload bytes per segment */
	unsigned segs;		/* segments on the wire */
	int v6;
};

/*
 * Fills *t for an IP packet of LEN bytes at IP whose virtio header VH says
 * it is TCP segmentation offload (IPv4, or IPv6 with TCP right after the
 * fixed header).  Returns 0, or -1 for anything else or a packet whose
 * lengths do not add up.
 */
int dl_tso_layout(const struct virtio_net_hdr *vh, const uint8_t *ip,
		  size_t len, struct dl_tso *t);

/* Segments on the wire of a packet (1 unless offloaded). */
unsigned dl_wire_packets(const struct virtio_net_hdr *vh, const uint8_t *ip,
			 size_t len);

/*
 * Segment K (0 .. t->segs - 1) of the TSO packet at IP, as the kernel's
 * segmentation would have made it: the headers copied, lengths, IPv4 id
 * and checksum, TCP sequence number, flags (CWR on the first only, PSH
 * and FIN on the last only) and the full TCP checksum set.  Written to
 * OUT, which holds at least t->hdr + t->mss bytes; returns its length.
 */
size_t dl_tso_segment(const uint8_t *ip, const struct dl_tso *t, unsigned k,
		      uint8_t *out);

#endif
