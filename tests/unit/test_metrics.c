/* SPDX-License-Identifier: MIT */
/*
 * core/metrics: comms' counters summed per name and labels, kept after
 * the comms close, gauges that end with them, the modules' own counters,
 * the round trip per peer (the least, not the sum), what a module may not
 * name, the text's escaping, and the requests the HTTP endpoint answers.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "metrics.h"
#include "state.h"

/* A comm of the fake module: what its comm_counters hands out. */
struct fake_comm {
	uint64_t bytes, requests, level;
	const char *peer;		/* a counter's own peer, or NULL */
	bool odd_names;
};

static int fake_comm_counters(void *comm, mesh_counter_fn emit, void *arg)
{
	struct fake_comm *c = comm;

	emit(arg, &(struct mesh_counter){ .name = "bytes", .peer = c->peer,
					  .value = c->bytes });
	emit(arg, &(struct mesh_counter){ .name = "requests",
					  .value = c->requests });
	emit(arg, &(struct mesh_counter){ .name = "queue_depth",
		.help = "Requests \\ waiting\nnow.",
		.kind = MESH_COUNTER_GAUGE, .value = c->level });
	if (c->odd_names) {
		/* none of these may reach the text */
		emit(arg, &(struct mesh_counter){ .name = "Bytes", .value = 1 });
		emit(arg, &(struct mesh_counter){ .name = "a-b", .value = 1 });
		emit(arg, &(struct mesh_counter){ .name = "", .value = 1 });
		emit(arg, &(struct mesh_counter){ .name = NULL, .value = 1 });
		emit(arg, &(struct mesh_counter){ .name = "x23456789012345678"
			"90123456789012345678901234567890", .value = 1 });
		/* a documented name of the other kind */
		emit(arg, &(struct mesh_counter){ .name = "stalls",
			.kind = MESH_COUNTER_GAUGE, .value = 1 });
		emit(arg, &(struct mesh_counter){ .name = "weird",
			.direction = (enum mesh_direction)7, .value = 1 });
	}
	return 0;
}

static int fake_counters(void *mctx, mesh_counter_fn emit, void *arg)
{
	(void)mctx;
	emit(arg, &(struct mesh_counter){ .name = "resumes", .value = 3 });
	emit(arg, &(struct mesh_counter){ .name = "relayed_bytes",
		.peer = "gw\"1", .direction = MESH_DIR_SEND, .value = 10 });
	return 0;
}

static const struct mesh_module fake = {
	.name = "fake",
	.comm_counters = fake_comm_counters,
	.counters = fake_counters,
};

static char *render(const struct core_state *st, const char *extra)
{
	char *text = NULL;
	size_t len = 0;

	CHECK(core_metrics_render(st, extra, &text, &len) == 0);
	CHECK(text && strlen(text) == len);
	return text;
}

/* Whether text has this line, whole. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p += !!p)
		if (!strncmp(p, line, n) && (p[n] == '\n' || !p[n]))
			return true;
	return false;
}

#define CHECK_LINE(text, line)                                           \
	do {                                                             \
		if (!has_line(text, line)) {                             \
			fprintf(stderr, "%s:%d: no line \"%s\" in:\n%s", \
				__FILE__, __LINE__, line, text);         \
			failures++;                                      \
		}                                                        \
	} while (0)

static void test_comms(void)
{
	struct fake_comm a = { .bytes = 100, .requests = 2, .level = 5 };
	struct fake_comm b = { .bytes = 50, .requests = 1, .level = 1,
			       .odd_names = true };
	struct fake_comm r = { .bytes = 7, .requests = 1 };
	struct core_metrics_comm *ma, *mb, *mr;
	char *t;

	ma = core_metrics_comm_open(&fake, &a, "fake", "10.0.0.2", true);
	mb = core_metrics_comm_open(&fake, &b, "fake", "10.0.0.2", true);
	mr = core_metrics_comm_open(&fake, &r, "fake", "10.0.0.2", false);
	CHECK(ma && mb && mr);
	t = render(NULL, NULL);
	/* two send comms to one peer add up; the receive is its own */
	CHECK_LINE(t, "# HELP nccl_mesh_bytes_total Payload bytes of "
		   "completed requests.");
	CHECK_LINE(t, "# TYPE nccl_mesh_bytes_total counter");
	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"send\"} 150");
	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"recv\"} 7");
	CHECK_LINE(t, "nccl_mesh_requests_total{module=\"fake\",peer="
		   "\"10.0.0.2\",direction=\"send\"} 3");
	CHECK_LINE(t, "# TYPE nccl_mesh_queue_depth gauge");
	CHECK_LINE(t, "# HELP nccl_mesh_queue_depth Requests \\\\ waiting\\n"
		   "now.");
	CHECK_LINE(t, "nccl_mesh_queue_depth{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"send\"} 6");
	CHECK_LINE(t, "nccl_mesh_comms_open{module=\"fake\",direction=\"send\"} 2");
	CHECK_LINE(t, "nccl_mesh_comms_open{module=\"fake\",direction=\"recv\"} 1");
	/* one HELP per name however many series */
	{
		const char *first = strstr(t, "# HELP nccl_mesh_bytes_total");

		CHECK(first && !strstr(first + 1,
				       "# HELP nccl_mesh_bytes_total"));
	}
	/* what a module may not name is dropped, the rest stays */
	CHECK(!strstr(t, "Bytes") && !strstr(t, "a-b") &&
	      !strstr(t, "x2345") && !strstr(t, "weird") &&
	      !strstr(t, "stalls"));
	free(t);

	/* the counters move on; a comm's closing keeps its last counts,
	 * its gauge goes */
	a.bytes = 1000;
	core_metrics_comm_close(ma);
	a.bytes = 99999;	/* freed as far as metrics know */
	t = render(NULL, NULL);
	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"send\"} 1050");
	CHECK_LINE(t, "nccl_mesh_queue_depth{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"send\"} 1");
	CHECK_LINE(t, "nccl_mesh_comms_open{module=\"fake\",direction=\"send\"} 1");
	free(t);

	/* teardown folds what NCCL left open; a close after it counts
	 * nothing twice */
	core_metrics_detach_all();
	b.bytes = r.bytes = 5000;
	core_metrics_comm_close(mb);
	core_metrics_comm_close(mr);
	core_metrics_comm_close(NULL);
	t = render(NULL, NULL);
	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"send\"} 1050");
	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\",peer=\"10.0.0.2\","
		   "direction=\"recv\"} 7");
	CHECK(!strstr(t, "comms_open") && !strstr(t, "queue_depth"));
	free(t);
}

/* A label value with a quote, a backslash and a newline, and a counter
 * that names its own peer. */
static void test_escaping(void)
{
	struct fake_comm c = { .bytes = 1, .peer = "h\"x\\y\nz" };
	struct core_metrics_comm *mc =
		core_metrics_comm_open(&fake, &c, "fake", "10.0.0.9", true);
	char *t = render(NULL, "pid=\"42\"");

	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\","
		   "peer=\"h\\\"x\\\\y\\nz\",direction=\"send\",pid=\"42\"} 1");
	CHECK_LINE(t, "nccl_mesh_requests_total{module=\"fake\",peer="
		   "\"10.0.0.9\",direction=\"send\",pid=\"42\"} 0");
	free(t);
	core_metrics_comm_close(mc);
	/* bytes that are not UTF-8 (a stray one, a character cut short)
	 * become U+FFFD, which a scraper takes; a whole character stays */
	c.peer = "caf\xc3\xa9\xff\xe2\x82";
	mc = core_metrics_comm_open(&fake, &c, "fake", "10.0.0.9", true);
	t = render(NULL, NULL);
	CHECK_LINE(t, "nccl_mesh_bytes_total{module=\"fake\",peer=\"caf\xc3\xa9"
		   "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\",direction=\"send\"} 1");
	free(t);
	core_metrics_comm_close(mc);
}

/* The modules' own counters, from a state's ready modules only. */
static void test_modules(void)
{
	struct core_module mods[2];
	struct core_state st = { .modules = mods, .nmodules = 2 };
	int ctx = 0;
	char *t;

	memset(mods, 0, sizeof(mods));
	snprintf(mods[0].name, sizeof(mods[0].name), "fake");
	mods[0].desc = &fake;
	mods[0].mctx = &ctx;
	mods[0].status = CORE_MODULE_READY;
	snprintf(mods[1].name, sizeof(mods[1].name), "broken");
	mods[1].desc = &fake;
	mods[1].mctx = &ctx;
	mods[1].status = CORE_MODULE_FAILED;
	t = render(&st, NULL);
	CHECK_LINE(t, "nccl_mesh_resumes_total{module=\"fake\"} 3");
	CHECK_LINE(t, "nccl_mesh_relayed_bytes_total{module=\"fake\","
		   "peer=\"gw\\\"1\",direction=\"send\"} 10");
	CHECK(!strstr(t, "broken"));
	free(t);
}

/* A module's own round trip to a peer, as tcp-xdc's window may give. */
static int rtt_counters(void *mctx, mesh_counter_fn emit, void *arg)
{
	emit(arg, &(struct mesh_counter){ .name = "rtt_microseconds",
		.peer = "10.0.0.3", .kind = MESH_COUNTER_GAUGE,
		.value = *(uint64_t *)mctx });
	return 0;
}

static const struct mesh_module rtt_fake = {
	.name = "fake",
	.comm_counters = fake_comm_counters,
	.counters = rtt_counters,
};

/*
 * The comms' round trips: one series per peer whichever way its comms
 * go, the least of theirs and the module's own, gone with the comms;
 * a comm that knows none adds none.
 */
static void test_rtt(void)
{
	struct fake_comm a = { .bytes = 1 }, b = { .bytes = 1 };
	struct fake_comm c = { .bytes = 1 }, d = { .bytes = 1 };
	struct core_module mod;
	struct core_state st = { .modules = &mod, .nmodules = 1 };
	struct core_metrics_comm *ma, *mb, *mc, *md;
	uint64_t own = 90;
	char *t;

	ma = core_metrics_comm_open(&rtt_fake, &a, "fake", "10.0.0.3", true);
	mb = core_metrics_comm_open(&rtt_fake, &b, "fake", "10.0.0.3", false);
	mc = core_metrics_comm_open(&rtt_fake, &c, "fake", "10.0.0.4", true);
	md = core_metrics_comm_open(&rtt_fake, &d, "fake", "10.0.0.5", true);
	CHECK(ma && mb && mc && md);
	core_metrics_comm_rtt(ma, 300);
	core_metrics_comm_rtt(mb, 200);
	core_metrics_comm_rtt(mc, 50000);
	core_metrics_comm_rtt(NULL, 1);
	t = render(NULL, NULL);
	CHECK_LINE(t, "# TYPE nccl_mesh_rtt_microseconds gauge");
	CHECK_LINE(t, "nccl_mesh_rtt_microseconds{module=\"fake\","
		   "peer=\"10.0.0.3\"} 200");
	CHECK_LINE(t, "nccl_mesh_rtt_microseconds{module=\"fake\","
		   "peer=\"10.0.0.4\"} 50000");
	CHECK(!strstr(t, "rtt_microseconds{module=\"fake\",peer=\"10.0.0.5\""));
	free(t);

	/* the module's own round trip to a peer joins the least */
	memset(&mod, 0, sizeof(mod));
	snprintf(mod.name, sizeof(mod.name), "fake");
	mod.desc = &rtt_fake;
	mod.mctx = &own;
	mod.status = CORE_MODULE_READY;
	t = render(&st, NULL);
	CHECK_LINE(t, "nccl_mesh_rtt_microseconds{module=\"fake\","
		   "peer=\"10.0.0.3\"} 90");
	free(t);
	own = 400;
	t = render(&st, NULL);
	CHECK_LINE(t, "nccl_mesh_rtt_microseconds{module=\"fake\","
		   "peer=\"10.0.0.3\"} 200");
	free(t);

	/* a level ends with its comms */
	core_metrics_comm_close(ma);
	core_metrics_comm_close(mb);
	core_metrics_comm_close(mc);
	core_metrics_comm_close(md);
	t = render(NULL, NULL);
	CHECK(!strstr(t, "rtt_microseconds"));
	free(t);
}

static void test_http_parse(void)
{
	static const struct {
		const char *req;
		enum core_http_verdict want;
	} cases[] = {
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", CORE_HTTP_METRICS },
		{ "GET /metrics HTTP/1.0\n\n", CORE_HTTP_METRICS },
		{ "GET /metrics?a=b HTTP/1.1\r\n\r\n", CORE_HTTP_METRICS },
		{ "GET /metricsx HTTP/1.1\r\n\r\n", CORE_HTTP_NOT_FOUND },
		{ "GET / HTTP/1.1\r\n\r\n", CORE_HTTP_NOT_FOUND },
		{ "GET /metrics/../x HTTP/1.1\r\n\r\n", CORE_HTTP_NOT_FOUND },
		{ "POST /metrics HTTP/1.1\r\n\r\n", CORE_HTTP_BAD_METHOD },
		{ "HEAD /metrics HTTP/1.1\r\n\r\n", CORE_HTTP_BAD_METHOD },
		{ "get /metrics HTTP/1.1\r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "GET metrics HTTP/1.1\r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "GET /metrics HTTP/2.0\r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "GET /metrics\r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "GET /met\x01rics HTTP/1.1\r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "GET /metrics HTTP/1.1 \r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "\r\n\r\n", CORE_HTTP_BAD_REQUEST },
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\n", CORE_HTTP_INCOMPLETE },
		{ "GET /metr", CORE_HTTP_INCOMPLETE },
		{ "", CORE_HTTP_INCOMPLETE },
	};
	char big[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum core_http_verdict got = core_metrics_http_parse(
			cases[i].req, strlen(cases[i].req), 8192);

		if (got != cases[i].want) {
			fprintf(stderr, "request %zu: verdict %d, want %d\n",
				i, got, cases[i].want);
			failures++;
		}
	}
	/* a header that never ends within the buffer */
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	CHECK(core_metrics_http_parse(big, sizeof(big), sizeof(big)) ==
	      CORE_HTTP_TOO_LARGE);
	CHECK(core_metrics_http_parse(big, sizeof(big) - 1, sizeof(big)) ==
	      CORE_HTTP_INCOMPLETE);
}

int main(void)
{
	test_comms();
	test_escaping();
	test_modules();
	test_rtt();
	test_http_parse();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
