/* SPDX-License-Identifier: MIT */
/*
 * metrics_file: the process's counters for node_exporter's textfile
 * collector, rewritten every metrics_interval_ms by a thread of its own,
 * never from NCCL's threads.  Each write goes to a temporary file in the
 * same directory and is renamed over the old one, so the collector reads
 * a whole file or the previous one, never half of one.  Every sample
 * carries pid="<pid>": node_exporter merges the files of every rank on
 * a host and refuses two samples with the same labels.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "core_log.h"
#include "metrics.h"
#include "params.h"
#include "state.h"

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool running, stop;
	const struct core_state *st;
	char path[PATH_MAX];
	char tmp[PATH_MAX + 32];
	char pid_label[32];
	long interval_ms;
	int last_err;			/* what was logged last; 0: fine */
} w = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The key's value with %p as the process id and %% as %; -ENAMETOOLONG. */
static int expand(const char *pattern, char *out, size_t cap)
{
	size_t len = 0;

	for (const char *p = pattern; *p; p++) {
		int n;

		if (p[0] == '%' && p[1] == 'p')
			n = snprintf(out + len, cap - len, "%ld", (long)getpid());
		else if (p[0] == '%' && p[1] == '%')
			n = snprintf(out + len, cap - len, "%%");
		else
			n = snprintf(out + len, cap - len, "%c", *p);
		if (n < 0 || (size_t)n >= cap - len)
			return -ENAMETOOLONG;
		len += (size_t)n;
		p += p[0] == '%' && (p[1] == 'p' || p[1] == '%');
	}
	return len ? 0 : -EINVAL;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One whole file; 0 or -errno, with what failed in *what. */
static int write_once(const char **what)
{
	char *text;
	size_t len;
	int fd, err;

	*what = "rendering the counters";
	err = core_metrics_render(w.st, w.pid_label, &text, &len);
	if (err)
		return err;
	*what = "creating the temporary file";
	fd = open(w.tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		free(text);
		return err;
	}
	*what = "writing the temporary file";
	err = write_all(fd, text, len);
	free(text);
	if (close(fd) && !err)
		err = -errno;
	if (!err) {
		*what = "renaming the temporary file over it";
		if (rename(w.tmp, w.path))
			err = -errno;
	}
	if (err)
		unlink(w.tmp);
	return err;
}

/* Writes, and says so once per change: a full disk every 15 s must not
 * fill the log too. */
static void write_and_tell(void)
{
	const char *what;
	int err = write_once(&what);

	if (err && err != w.last_err)
		CORE_WARN("metrics_file %s: %s: %s (the job goes on; said "
			  "again only when it changes)", w.path, what,
			  strerror(-err));
	else if (!err && w.last_err)
		CORE_INFO("metrics_file %s: written again", w.path);
	w.last_err = err;
}

static void *writer(void *arg)
{
	struct timespec due;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &due);
	pthread_mutex_lock(&w.lock);
	while (!w.stop) {
		pthread_mutex_unlock(&w.lock);
		write_and_tell();
		pthread_mutex_lock(&w.lock);
		due.tv_sec += w.interval_ms / 1000;
		due.tv_nsec += (w.interval_ms % 1000) * 1000000L;
		if (due.tv_nsec >= 1000000000L) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000L;
		}
		while (!w.stop &&
		       pthread_cond_timedwait(&w.cond, &w.lock, &due) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&w.lock);
	return NULL;
}

int core_metrics_file_start(const struct core_state *st)
{
	const struct core_scope *core = core_config_core(st->cfg);
	const char *pattern = core->values[CP_METRICS_FILE].text;
	pthread_condattr_t attr;
	size_t n;
	int err;

	if (w.running || !pattern || !*pattern)
		return 0;
	err = expand(pattern, w.path, sizeof(w.path));
	if (err) {
		CORE_WARN("metrics_file \"%.200s\": %s; no metrics file is "
			  "written", pattern, strerror(-err));
		return 0;
	}
	n = strlen(w.path);
	/* the collector reads *.prom only: say so before a day is lost */
	if (n < 5 || strcmp(w.path + n - 5, ".prom"))
		CORE_WARN("metrics_file %s: node_exporter's textfile collector "
			  "reads only files named *.prom", w.path);
	snprintf(w.tmp, sizeof(w.tmp), "%s.%ld.tmp", w.path, (long)getpid());
	snprintf(w.pid_label, sizeof(w.pid_label), "pid=\"%ld\"",
		 (long)getpid());
	w.st = st;
	w.interval_ms = (long)core->values[CP_METRICS_INTERVAL_MS].num;
	w.stop = false;
	w.last_err = 0;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&w.cond, &attr);
	pthread_condattr_destroy(&attr);
	err = pthread_create(&w.thread, NULL, writer, NULL);
	if (err) {
		pthread_cond_destroy(&w.cond);
		CORE_WARN("metrics_file %s: cannot start its writer: %s; no "
			  "metrics file is written", w.path, strerror(err));
		return 0;
	}
	w.running = true;
	CORE_INFO("metrics_file %s: the counters every %ld ms", w.path,
		  w.interval_ms);
	return 0;
}

void core_metrics_file_stop(void)
{
	if (!w.running)
		return;
	pthread_mutex_lock(&w.lock);
	w.stop = true;
	pthread_cond_signal(&w.cond);
	pthread_mutex_unlock(&w.lock);
	pthread_join(w.thread, NULL);
	pthread_cond_destroy(&w.cond);
	w.running = false;
	/* the last counts, with every module still there: a job shorter
	 * than the interval still leaves its file */
	write_and_tell();
	w.st = NULL;
}
