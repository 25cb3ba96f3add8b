/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for meshrelay's metrics endpoint: the request parser
 * that reads a stranger's bytes, and the text it serves, whose label
 * values (a peer's name a relay took from the wire, module names) and
 * help texts are any bytes.  Any input: no crash, no sanitizer report, and
 *  - the parser's verdict is the one a plain reading of the request line
 *    gives: GET /metrics (a query allowed) over HTTP/1.0 or 1.1 only for
 *    that line; INCOMPLETE only while no header end has come and the
 *    buffer has room, TOO_LARGE only when it is full;
 *  - read in pieces as the endpoint reads them, with a few buffer sizes,
 *    each piece's verdict is that reading's, and the first one given is
 *    the verdict of the whole input: more bytes never change it;
 *  - the input as a comm's peer, a counter's own peer, a module name and
 *    a help text: the rendered text parses as Prometheus text, every
 *    label value and help valid UTF-8 with only the escapes the format
 *    knows, of bounded length, and a value that was valid UTF-8 comes
 *    back as it was (cut at its bound).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "metrics.h"

#include "fuzz_util.h"

/* metrics_http.c's buffer; metrics.c's bounds on a label and a help */
#define REQUEST_MAX 8192
#define LABEL_MAX_LEN 128
#define HELP_MAX_LEN 200

/* ---- the request parser ---- */

/* The verdict, read plainly: the line split at its spaces. */
static enum core_http_verdict expected(const char *buf, size_t len,
				       size_t cap)
{
	const char *f[3], *eol;
	size_t flen[3], n = 0, line;

	if (!memmem(buf, len, "\n\n", 2) && !memmem(buf, len, "\r\n\r\n", 4))
		return len >= cap ? CORE_HTTP_TOO_LARGE : CORE_HTTP_INCOMPLETE;
	eol = memchr(buf, '\n', len);
	line = (size_t)(eol - buf);
	if (line && buf[line - 1] == '\r')
		line--;
	for (size_t i = 0, start = 0; i <= line; i++) {
		if (i < line && buf[i] != ' ')
			continue;
		if (n == 3)
			return CORE_HTTP_BAD_REQUEST;	/* a fourth field */
		f[n] = buf + start;
		flen[n++] = i - start;
		start = i + 1;
	}
	if (n != 3 || !flen[0] || !flen[1] || f[1][0] != '/' ||
	    flen[2] != 8 || (memcmp(f[2], "HTTP/1.0", 8) &&
			     memcmp(f[2], "HTTP/1.1", 8)))
		return CORE_HTTP_BAD_REQUEST;
	for (size_t i = 0; i < flen[0]; i++)
		if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZ", f[0][i]) || !f[0][i])
			return CORE_HTTP_BAD_REQUEST;
	for (size_t i = 0; i < flen[1]; i++)
		if ((unsigned char)f[1][i] < 0x21 ||
		    (unsigned char)f[1][i] > 0x7e)
			return CORE_HTTP_BAD_REQUEST;
	if (flen[0] != 3 || memcmp(f[0], "GET", 3))
		return CORE_HTTP_BAD_METHOD;
	if ((flen[1] == 8 || (flen[1] > 8 && f[1][8] == '?')) &&
	    !memcmp(f[1], "/metrics", 8))
		return CORE_HTTP_METRICS;
	return CORE_HTTP_NOT_FOUND;
}

/* Parsed from a copy of exactly len bytes, so a read past them shows. */
static enum core_http_verdict parse(const uint8_t *data, size_t len,
				    size_t cap)
{
	char *b = malloc(len ? len : 1);
	enum core_http_verdict v;

	REQUIRE(b);
	memcpy(b, data, len);
	v = core_metrics_http_parse(b, len, cap);
	free(b);
	REQUIRE(v == expected((const char *)data, len, cap));
	return v;
}

/* The endpoint's reads (read_request in metrics_http.c): of any size
 * into a buffer of cap bytes, until a verdict or the client's end. */
static void serve(struct splitter *sp, const uint8_t *data, size_t size,
		  size_t cap)
{
	enum core_http_verdict v = CORE_HTTP_INCOMPLETE;
	size_t len = 0;

	while (v == CORE_HTTP_INCOMPLETE && len < size) {
		size_t room = cap - len, left = size - len;

		REQUIRE(len < cap);	/* a read always has room */
		len += 1 + next(sp, room < left ? room : left);
		v = parse(data, len, cap);
		REQUIRE(v != CORE_HTTP_TOO_LARGE || len == cap);
	}
	if (v != CORE_HTTP_INCOMPLETE && v != CORE_HTTP_TOO_LARGE)
		REQUIRE(parse(data, size, SIZE_MAX) == v);
}

/* ---- the text ---- */

/* The length of the valid UTF-8 character at s (n bytes left), or 0:
 * decoded, then held against the ranges the encoding allows. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
	static const uint32_t least[] = { 0, 0, 0x80, 0x800, 0x10000 };
	size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 :
		     s[0] >= 0xc0 ? 2 : 0;
	uint32_t cp;

	if (!len || len > n || s[0] >= 0xf8)
		return 0;
	cp = len == 1 ? s[0] : s[0] & (0x7fu >> len);
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < least[len] || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_char((const unsigned char *)s + i, n - i)))
			return false;
	return true;
}

/* An escaped value from p up to its end (a quote, or the line's end for
 * a help), unescaped into out; returns where it stopped. */
static const char *unescape(const char *p, const char *end, bool quoted,
			    char *out, size_t *olen)
{
	const char *from = p;

	*olen = 0;
	while (p < end && *p != '\n' && !(quoted && *p == '"')) {
		char c = *p++;

		if (c == '\\') {
			REQUIRE(p < end);
			c = *p++;
			REQUIRE(c == '\\' || c == 'n' || (quoted && c == '"'));
			c = c == 'n' ? '\n' : c;
		}
		REQUIRE(*olen < 3 * HELP_MAX_LEN);	/* bounded */
		out[(*olen)++] = c;
	}
	REQUIRE(utf8_valid(from, (size_t)(p - from)));
	return p;
}

static const char *name(const char *p, const char *end)
{
	const char *from = p;

	while (p < end && (strchr("abcdefghijklmnopqrstuvwxyz0123456789_", *p)
			   && *p))
		p++;
	REQUIRE(p > from);
	return p;
}

/* What the input should come back as: cut at bound, when valid UTF-8. */
struct want {
	const char *label;	/* "peer", "module", or NULL for the help */
	char text[3 * HELP_MAX_LEN];
	size_t len;
	bool check, seen;
};

static void want_init(struct want *w, const char *label, const char *s,
		      size_t bound)
{
	w->label = label;
	w->len = strnlen(s, bound);
	memcpy(w->text, s, w->len);
	w->check = utf8_valid(w->text, w->len);
	w->seen = !w->check;
}

static void seen(struct want *w, int nw, const char *label, const char *v,
		 size_t len)
{
	for (int i = 0; i < nw; i++)
		if (((!label && !w[i].label) ||
		     (label && w[i].label && !strcmp(label, w[i].label))) &&
		    w[i].len == len && !memcmp(w[i].text, v, len))
			w[i].seen = true;
}

/* One sample: name{label="value",...} number */
static void sample(const char *p, const char *end, struct want *w, int nw)
{
	static char v[3 * HELP_MAX_LEN];
	size_t vlen;

	p = name(p, end);
	REQUIRE(p < end && *p++ == '{');
	for (;;) {
		const char *l = p;
		char label[16] = "";

		p = name(p, end);
		if ((size_t)(p - l) < sizeof(label))
			memcpy(label, l, (size_t)(p - l));
		REQUIRE(p + 1 < end && p[0] == '=' && p[1] == '"');
		p = unescape(p + 2, end, true, v, &vlen);
		REQUIRE(p < end && *p++ == '"');
		REQUIRE(vlen <= 3 * LABEL_MAX_LEN);
		seen(w, nw, label, v, vlen);
		REQUIRE(p < end);
		if (*p++ == '}')
			break;
		REQUIRE(p[-1] == ',');
	}
	REQUIRE(p < end && *p++ == ' ');
	REQUIRE(p < end && *p >= '0' && *p <= '9');
	while (p < end && *p >= '0' && *p <= '9')
		p++;
	REQUIRE(p < end && *p == '\n');
}

static void check_text(const char *t, size_t len, struct want *w, int nw)
{
	static char v[3 * HELP_MAX_LEN];
	const char *end = t + len;

	REQUIRE(strlen(t) == len);
	while (t < end) {
		const char *eol = memchr(t, '\n', (size_t)(end - t));
		size_t vlen;

		REQUIRE(eol);	/* every line ends */
		if (!strncmp(t, "# HELP ", 7)) {
			t = name(t + 7, eol);
			REQUIRE(t < eol && *t == ' ');
			REQUIRE(unescape(t + 1, eol, false, v, &vlen) == eol);
			seen(w, nw, NULL, v, vlen);
		} else if (!strncmp(t, "# TYPE ", 7)) {
			t = name(t + 7, eol);
			REQUIRE(!strncmp(t, " counter\n", 9) ||
				!strncmp(t, " gauge\n", 7));
		} else {
			sample(t, eol + 1, w, nw);
		}
		t = eol + 1;
	}
	for (int i = 0; i < nw; i++)
		REQUIRE(w[i].seen);
}

/* The fake module's comm: gauges only, so closing it leaves no totals
 * behind to grow from one input to the next. */
struct fake_comm {
	const char *peer, *help;
};

static int fake_comm_counters(void *comm, mesh_counter_fn emit, void *arg)
{
	struct fake_comm *c = comm;

	emit(arg, &(struct mesh_counter){ .name = "fuzz_level",
		.help = c->help, .kind = MESH_COUNTER_GAUGE, .value = 1 });
	emit(arg, &(struct mesh_counter){ .name = "fuzz_peer_level",
		.help = "A counter's own peer.", .peer = c->peer,
		.direction = MESH_DIR_RECV, .kind = MESH_COUNTER_GAUGE,
		.value = 2 });
	return 0;
}

static const struct mesh_module fake = {
	.name = "fake",
	.comm_counters = fake_comm_counters,
};

static char *cstr(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);

	REQUIRE(s);
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

static void render(struct splitter *sp, const uint8_t *data, size_t size)
{
	size_t cut = next(sp, size + 1);
	char *peer = cstr(data, cut), *own = cstr(data + cut, size - cut);
	char *all = cstr(data, size), *text;
	struct fake_comm c = { .peer = own, .help = all };
	struct core_metrics_comm *mc;
	struct want w[4];
	size_t len;

	/* the comm keeps its peer and module in fields of their own */
	want_init(&w[0], "peer", peer, LABEL_MAX_LEN - 1);
	want_init(&w[1], "peer", own, LABEL_MAX_LEN);
	want_init(&w[2], "module", all, MESH_NAME_MAX - 1);
	want_init(&w[3], NULL, all, HELP_MAX_LEN);
	/* an empty value: no peer label, a help that says there is none */
	w[0].seen |= !*peer;
	w[1].seen |= !*own;
	w[3].seen |= !*all;
	mc = core_metrics_comm_open(&fake, &c, all, peer, next(sp, 2));
	REQUIRE(mc);
	REQUIRE(!core_metrics_render(NULL, next(sp, 2) ? "pid=\"7\"" : NULL,
				     &text, &len));
	check_text(text, len, w, 4);
	free(text);
	core_metrics_comm_close(mc);
	free(peer);
	free(own);
	free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* split points from the bytes themselves, so the seeds stay plain
	 * requests; xorshift must not start at 0 */
	struct splitter sp = { 0x811c9dc5u };

	for (size_t i = 0; i < size; i++)
		sp.x = (sp.x ^ data[i]) * 0x01000193u;
	sp.x |= 1;
	serve(&sp, data, size, REQUEST_MAX);
	serve(&sp, data, size, 1 + next(&sp, 64));
	serve(&sp, data, size, 1 + next(&sp, size + 1));
	render(&sp, data, size);
	return 0;
}
