/* SPDX-License-Identifier: MIT */
#include "ctrl_wire.h"

#include <errno.h>
#include <string.h>

#define HELLO_MAGIC 0x4348534du		/* "MSHC" */
#define HELLO_VERSION 2		/* 2: the connector says CTRL_ACK_HEARD */
#define ACK_MAGIC 0x4b41534du		/* "MSAK" */

void ctrl_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t ctrl_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
	ctrl_put32(p, (uint32_t)v);
	ctrl_put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)ctrl_get32(p) | (uint64_t)ctrl_get32(p + 4) << 32;
}

void ctrl_hello_encode(const struct ctrl_hello *h, uint8_t *b)
{
	memset(b, 0, CTRL_HELLO_SIZE);
	ctrl_put32(b, HELLO_MAGIC);
	b[4] = HELLO_VERSION;
	b[5] = h->kind;
	b[36] = h->auth;
	b[6] = (uint8_t)h->module_tag;
	b[7] = (uint8_t)(h->module_tag >> 8);
	ctrl_put32(b + 8, h->stream_index);
	put64(b + 12, h->nonce);
	put64(b + 20, h->conn_id);
	put64(b + 28, h->fabric_id);
}

const char *ctrl_hello_decode(const uint8_t *b, struct ctrl_hello *h)
{
	if (ctrl_get32(b) != HELLO_MAGIC)
		return "bad magic (not an nccl-mesh peer)";
	if (b[4] != HELLO_VERSION)
		return "unsupported protocol version";
	h->kind = b[5];
	if (h->kind != CTRL_HELLO_CTRL && h->kind != CTRL_HELLO_STREAM &&
	    h->kind != CTRL_HELLO_REJOIN)
		return "bad connection kind";
	h->module_tag = (uint16_t)(b[6] | b[7] << 8);
	h->stream_index = ctrl_get32(b + 8);
	if (h->stream_index >= CTRL_STREAMS_MAX)
		return "stream index out of range";
	h->nonce = get64(b + 12);
	h->conn_id = get64(b + 20);
	h->fabric_id = get64(b + 28);
	if (b[36] > 1)
		return "bad authentication flag";
	h->auth = b[36];
	return NULL;
}

int ctrl_frame_peek(const uint8_t *buf, size_t len, size_t *payload_len)
{
	uint32_t n;

	if (len < 4)
		return -EAGAIN;
	n = ctrl_get32(buf);
	if (n == CTRL_ACK_HEARD) {
		*payload_len = 0;
		return CTRL_FRAME_HEARD;
	}
	if (n > CTRL_FRAME_MAX)
		return -EPROTO;
	if (len - 4 < n)
		return -EAGAIN;
	*payload_len = n;
	return 0;
}

void ctrl_ack_encode(uint8_t *ack, uint32_t status)
{
	ctrl_put32(ack, ACK_MAGIC);
	ctrl_put32(ack + 4, status);
}

int ctrl_ack_decode(const uint8_t *payload, size_t len, uint32_t *status)
{
	if (len != CTRL_ACK_SIZE || ctrl_get32(payload) != ACK_MAGIC)
		return -EPROTO;
	*status = ctrl_get32(payload + 4);
	return 0;
}
