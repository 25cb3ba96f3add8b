/* SPDX-License-Identifier: MIT */
/*
 * Transport harness shared by the transport tests: a host for one module,
 * a loopback control channel, connection pairs and request helpers, all
 * driving the module the way the core does.
 */
#ifndef TRANSPORT_HARNESS_H
#define TRANSPORT_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <nccl-mesh/module.h>

#define MAX_STREAMS 64
#define MAX_OVERRIDES 8
#define DEADLINE_S 30.0

extern const struct mesh_module *mod;
extern int failures;
extern int log_level;
extern int warnings;	/* WARN lines the module logged, shown or not */
extern bool ctrl_leg;	/* ctrl_init marks channels as a leg's (1.10) */
extern const struct mesh_host host;

#define CHECK(cond, ...)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                    \
			fputc('\n', stderr);                             \
			failures++;                                      \
		}                                                        \
	} while (0)

struct test_ctrl {
	struct mesh_ctrl base;
	int msg_fd;		/* socketpair end, length-prefixed messages */
	bool dialer;
	int listen_fd;		/* shared by the pair */
	uint16_t port;
	int streams[MAX_STREAMS];
	struct mesh_addr local, remote;
};

struct pair {
	void *mctx;
	void *send_comm;
	void *recv_comm;
};

double now_s(void);
void param_set(const char *name, const char *value);
void params_reset(void);
/* Loads the module from path; exits on failure. */
void harness_load(const char *path);
void ctrl_init(struct test_ctrl *tc, int msg_fd, bool dialer, int listen_fd,
	       uint16_t port);
void ctrl_fini(struct test_ctrl *tc);
int listener_open(uint16_t *port);
/* init, then one connection; pair_close closes it and calls fini. */
int pair_open(struct pair *p);
/* One more connection on the module context already in p->mctx. */
int pair_connect(struct pair *p);
/* Closes the send comm first, then the receive comm; no fini. */
void pair_close_comms(struct pair *p);
void pair_close(struct pair *p);
int req_test(void *req, int *done, int *size);
void *post_send(struct pair *p, void *buf, size_t size, int tag);
void *post_recv(struct pair *p, void *buf, size_t size, int tag);
/* Polls until done; returns the test() error, or -ETIMEDOUT. */
int wait_req(void *req, int *size, double timeout_s);
void fill(unsigned char *buf, size_t size, unsigned int seed);

#endif
