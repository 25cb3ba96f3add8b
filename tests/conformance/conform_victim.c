/* SPDX-License-Identifier: MIT */
/*
 * The peer that gets killed: rank 1 starts this program again as a child
 * (--victim send|recv), hands it a seed and a handle over its stdin, waits
 * until it streams and kills it with SIGKILL, as a crashed rank dies.  A
 * child, not rank 1 itself, so the loops go on after each kill.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conform.h"

#define VICTIM_READY_AFTER 20	/* messages completed before the kill */
#define VICTIM_START_S 60	/* bound on its start (plugin init) */

extern char **environ;

static int read_full(int fd, void *buf, size_t len, int timeout_ms)
{
	uint8_t *p = buf;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	while (len) {
		ssize_t n;

		if (timeout_ms >= 0 && poll(&pfd, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		n = read(fd, p, len);
		if (n == 0)
			return -EPIPE;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void conf_victim_spawn(struct conf_ctx *c, const char *role, uint64_t seed,
		       struct conf_victim *v)
{
	char dev[16], abi[16], timeout[16];
	const char *argv[16];
	posix_spawn_file_actions_t fa;
	int in[2], out[2], n = 0, rc;

	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		conf_fail(c, "pipe: %s", strerror(errno));
	snprintf(dev, sizeof(dev), "%d", c->o->dev);
	snprintf(abi, sizeof(abi), "%d", c->net.abi);
	snprintf(timeout, sizeof(timeout), "%u",
		 c->o->timeout_s + c->o->dead_ms / 1000 + VICTIM_START_S);
	argv[n++] = "nccl-conform";
	argv[n++] = "--victim";
	argv[n++] = role;
	argv[n++] = "--plugin";
	argv[n++] = c->o->plugin;
	argv[n++] = "--dev";
	argv[n++] = dev;
	argv[n++] = "--abi";
	argv[n++] = abi;
	argv[n++] = "--timeout";
	argv[n++] = timeout;
	if (c->o->verbose)
		argv[n++] = "-v";
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
	posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
	rc = posix_spawn(&v->pid, "/proc/self/exe", &fa, NULL,
			 (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (rc)
		conf_fail(c, "cannot start the victim process: %s",
			  strerror(rc));
	v->to = in[1];
	v->from = out[0];
	if (write_full(v->to, &seed, sizeof(seed)))
		conf_fail(c, "the victim process exited at once");
}

void conf_victim_give(struct conf_ctx *c, struct conf_victim *v,
		      const void *buf, size_t len)
{
	if (write_full(v->to, buf, len))
		conf_fail(c, "the victim process exited before it took the handle (see its lines above)");
}

void conf_victim_take(struct conf_ctx *c, struct conf_victim *v, void *buf,
		      size_t len)
{
	conf_phase(c, "waiting for the victim's handle");
	if (read_full(v->from, buf, len, VICTIM_START_S * 1000))
		conf_fail(c, "no listen handle from the victim process within %d s (see its lines above)",
			  VICTIM_START_S);
}

void conf_victim_wait_streaming(struct conf_ctx *c, struct conf_victim *v)
{
	char ready;

	conf_phase(c, "waiting for the victim to stream");
	if (read_full(v->from, &ready, 1, VICTIM_START_S * 1000) ||
	    ready != 'R')
		conf_fail(c, "the victim process did not stream within %d s (see its lines above)",
			  VICTIM_START_S);
}

void conf_victim_kill(struct conf_ctx *c, struct conf_victim *v)
{
	int status;

	kill(v->pid, SIGKILL);
	while (waitpid(v->pid, &status, 0) < 0 && errno == EINTR)
		;
	close(v->to);
	close(v->from);
	if (!WIFSIGNALED(status))
		conf_fail(c, "the victim process ended by itself (status %#x) before it was killed: see its FAIL line",
			  status);
}

/* ---- the child ---- */

static uint32_t victim_extra(const struct conf_opts *o)
{
	(void)o;
	return 0;
}

int conf_victim_main(const struct conf_opts *o)
{
	static const struct conf_test vt = { "victim", "", NULL, victim_extra };
	struct conf_ctx c = { .o = o, .rank = 2, .oob = -1, .test = &vt };
	uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
	bool send = !strcmp(o->victim, "send");
	void *lcomm = NULL, *comm = NULL;
	struct conf_stream s;
	struct conf_msgs m;
	uint64_t seed;
	int out;

	if (!send && strcmp(o->victim, "recv")) {
		fprintf(stderr, "nccl-conform: --victim send|recv\n");
		return 2;
	}
	/* stdout is the pipe to the parent: our lines go to stderr */
	out = dup(STDOUT_FILENO);
	dup2(STDERR_FILENO, STDOUT_FILENO);
	signal(SIGPIPE, SIG_IGN);
	alarm(o->timeout_s);	/* never outlive a parent that died */
	if (read_full(STDIN_FILENO, &seed, sizeof(seed), -1))
		return 1;
	conf_net_up(&c);
	if (send) {
		if (read_full(STDIN_FILENO, handle, sizeof(handle), -1))
			return 1;
		while (!conf_poll_connect(&c, handle, &comm))
			;
	} else {
		conf_listen(&c, handle, &lcomm);
		if (write_full(out, handle, sizeof(handle)))
			return 1;
		while (!conf_poll_accept(&c, lcomm, &comm))
			;
	}
	conf_victim_msgs(&m, seed);
	conf_stream_init(&s, &c, send ? "victim send" : "victim recv", send,
			 comm, &m);
	for (bool told = false;;) {
		conf_stream_step(&s);
		if (!told && s.done >= VICTIM_READY_AFTER) {
			if (write_full(out, "R", 1))
				return 1;
			told = true;
		}
	}
}
