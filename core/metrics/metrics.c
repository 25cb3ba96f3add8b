/* SPDX-License-Identifier: MIT */
/*
 * The comms NCCL holds, the totals of those it closed, and the text that
 * sums them with the modules' own counters (metrics.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "metrics.h"
#include "state.h"

/* Bounds on what modules may hand us: a name, a label, the series. */
#define NAME_MAX_LEN 48
#define LABEL_MAX_LEN 128
#define SERIES_MAX 65536

/* The round trip's gauge: the least of its values, not their sum, since
 * a round trip does not add up over connections. */
#define RTT_NAME "rtt_microseconds"

/* The names the core documents (docs/observe.md), with their help. */
static const struct known {
	const char *name, *help;
	enum mesh_counter_kind kind;
} known[] = {
	{ "bytes", "Payload bytes of completed requests.", MESH_COUNTER_TOTAL },
	{ "requests", "Completed requests (isend, irecv).", MESH_COUNTER_TOTAL },
	{ "comms_open", "Comms NCCL holds open now.", MESH_COUNTER_GAUGE },
	{ "stalls", "Streams that went without an acknowledgement or a word "
	  "from the peer for the stall time.", MESH_COUNTER_TOTAL },
	{ "reconnects", "Streams dialed anew after they broke.",
	  MESH_COUNTER_TOTAL },
	{ "resumes", "Outages survived: connections whose path broke and "
	  "that resumed.", MESH_COUNTER_TOTAL },
	{ "encrypted_bytes", "Plaintext bytes sealed into encrypted records.",
	  MESH_COUNTER_TOTAL },
	{ "decrypted_bytes", "Plaintext bytes of encrypted records opened "
	  "and verified.", MESH_COUNTER_TOTAL },
	{ "auth_failures", "Encrypted records whose authentication tag did "
	  "not verify (tampering or corruption); each fails its connection.",
	  MESH_COUNTER_TOTAL },
	{ "relayed_bytes", "Bytes this host's relay forwarded, by the origin "
	  "(recv) and the destination (send) of each route.",
	  MESH_COUNTER_TOTAL },
	{ "relayed_messages", "Leg messages this host's relay forwarded.",
	  MESH_COUNTER_TOTAL },
	{ "relay_pairs", "Routes this host's relay forwards now.",
	  MESH_COUNTER_GAUGE },
	{ "relay_refused", "Route requests this host's relay refused.",
	  MESH_COUNTER_TOTAL },
	{ RTT_NAME, "Round trip to the peer in microseconds, the least of its "
	  "open connections': the kernel's on each one's control socket when "
	  "it was set up, or its module's own.", MESH_COUNTER_GAUGE },
};

/* One series: a name and its labels, and their sum. */
struct series {
	char *name, *module, *peer;
	const char *help;		/* known[] or the module's, copied */
	char *help_own;
	enum mesh_direction dir;
	enum mesh_counter_kind kind;
	uint64_t value;
};

struct series_set {
	struct series *v;
	size_t n, cap;
	size_t *slot;			/* open addressing: index + 1, 0 free */
	size_t nslots;
	bool full;			/* SERIES_MAX reached, some dropped */
};

struct core_metrics_comm {
	struct core_metrics_comm *prev, *next;
	const struct mesh_module *desc;
	void *mcomm;
	char module[MESH_NAME_MAX];
	char peer[LABEL_MAX_LEN];
	enum mesh_direction dir;
	uint32_t rtt_us;		/* its control socket's; 0 unknown */
	bool detached;			/* folded at teardown, not listed */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct core_metrics_comm *open_comms;
static struct series_set closed;	/* totals of the comms closed */
static bool warned_full, warned_nomem;

static uint64_t hash_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (h ^ 0xff) * 1099511628211ULL;
}

static uint64_t series_hash(const char *name, const char *module,
			    const char *peer, enum mesh_direction dir)
{
	uint64_t h = 14695981039346656037ULL;

	h = hash_str(h, name);
	h = hash_str(h, module);
	h = hash_str(h, peer);
	return (h ^ (uint64_t)dir) * 1099511628211ULL;
}

static bool series_is(const struct series *s, const char *name,
		      const char *module, const char *peer,
		      enum mesh_direction dir)
{
	return s->dir == dir && !strcmp(s->name, name) &&
	       !strcmp(s->module, module) && !strcmp(s->peer, peer);
}

static int rehash(struct series_set *set, size_t nslots)
{
	size_t *slot = calloc(nslots, sizeof(*slot));

	if (!slot)
		return -ENOMEM;
	for (size_t i = 0; i < set->n; i++) {
		const struct series *s = &set->v[i];
		size_t j = series_hash(s->name, s->module, s->peer, s->dir) &
			   (nslots - 1);

		while (slot[j])
			j = (j + 1) & (nslots - 1);
		slot[j] = i + 1;
	}
	free(set->slot);
	set->slot = slot;
	set->nslots = nslots;
	return 0;
}

static void series_set_free(struct series_set *set)
{
	for (size_t i = 0; i < set->n; i++) {
		free(set->v[i].name);
		free(set->v[i].module);
		free(set->v[i].peer);
		free(set->v[i].help_own);
	}
	free(set->v);
	free(set->slot);
	memset(set, 0, sizeof(*set));
}

/* The totals of closed comms live as long as the library: NCCL may close
 * comms after its last finalize, and tools read them until they exit.
 * Unloaded, nothing can read them again. */
__attribute__((destructor)) static void closed_free(void)
{
	pthread_mutex_lock(&reg_lock);
	series_set_free(&closed);
	pthread_mutex_unlock(&reg_lock);
}

static const struct known *known_name(const char *name)
{
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(known[i].name, name))
			return &known[i];
	return NULL;
}

/* [a-z][a-z0-9_]*, and not so long that a line gets silly. */
static bool name_ok(const char *name)
{
	size_t n = 0;

	if (!name || !(*name >= 'a' && *name <= 'z'))
		return false;
	for (; name[n]; n++)
		if (n >= NAME_MAX_LEN ||
		    !((name[n] >= 'a' && name[n] <= 'z') ||
		      (name[n] >= '0' && name[n] <= '9') || name[n] == '_'))
			return false;
	return true;
}

/* A new series at the end of set, not yet in the index. */
static struct series *series_append(struct series_set *set, const char *name,
				    const char *module, const char *peer,
				    enum mesh_direction dir,
				    const struct mesh_counter *c)
{
	const struct known *k = known_name(name);
	struct series *s;

	if (set->n == set->cap) {
		size_t cap = set->cap ? set->cap * 2 : 64;
		struct series *v = realloc(set->v, cap * sizeof(*v));

		if (!v)
			return NULL;
		set->v = v;
		set->cap = cap;
	}
	s = &set->v[set->n];
	memset(s, 0, sizeof(*s));
	s->dir = dir;
	s->kind = k ? k->kind : c->kind;
	s->name = strdup(name);
	s->module = strdup(module);
	s->peer = strndup(peer, LABEL_MAX_LEN);
	if (k) {
		s->help = k->help;
	} else {
		s->help_own = strndup(c->help ? c->help : "", 200);
		s->help = s->help_own;
	}
	if (!s->name || !s->module || !s->peer || !s->help) {
		free(s->name);
		free(s->module);
		free(s->peer);
		free(s->help_own);
		return NULL;
	}
	set->n++;
	return s;
}

/*
 * Adds value to the series of c's name and these labels, made when new.
 * A counter of a known name must have that name's kind; one with a bad
 * name is dropped.  -ENOMEM or -ENOSPC (SERIES_MAX) drop it too.
 */
static int series_add(struct series_set *set, const struct mesh_counter *c,
		      const char *module, const char *peer,
		      enum mesh_direction dir)
{
	const struct known *k = known_name(c->name ? c->name : "");
	struct series *s;
	size_t j;

	if (!name_ok(c->name) || (k && k->kind != c->kind) ||
	    (dir != MESH_DIR_NONE && dir != MESH_DIR_SEND &&
	     dir != MESH_DIR_RECV))
		return -EINVAL;
	if (set->nslots < 2 * (set->n + 1) &&
	    rehash(set, set->nslots ? set->nslots * 2 : 256))
		return -ENOMEM;
	j = series_hash(c->name, module, peer, dir) & (set->nslots - 1);
	for (; set->slot[j]; j = (j + 1) & (set->nslots - 1)) {
		s = &set->v[set->slot[j] - 1];
		if (series_is(s, c->name, module, peer, dir)) {
			if (strcmp(c->name, RTT_NAME))
				s->value += c->value;
			else if (c->value && (!s->value || c->value < s->value))
				s->value = c->value;
			return 0;
		}
	}
	if (set->n >= SERIES_MAX) {
		set->full = true;
		return -ENOSPC;
	}
	s = series_append(set, c->name, module, peer, dir, c);
	if (!s)
		return -ENOMEM;
	s->value = c->value;
	set->slot[j] = set->n;
	return 0;
}

/* What emit adds to, and the labels a counter leaves unset. */
struct collect {
	struct series_set *set;
	const char *module, *peer;
	enum mesh_direction dir;
	bool totals_only;		/* folding: gauges end with the comm */
};

static void collect_one(void *arg, const struct mesh_counter *c)
{
	struct collect *co = arg;
	const char *peer;

	if (!c || (co->totals_only && c->kind != MESH_COUNTER_TOTAL))
		return;
	peer = c->peer ? c->peer : co->peer;
	series_add(co->set, c, co->module, peer ? peer : "",
		   c->direction != MESH_DIR_NONE ? c->direction : co->dir);
}

static void comm_collect(struct core_metrics_comm *mc, struct series_set *set,
			 bool totals_only)
{
	struct collect co = { .set = set, .module = mc->module,
			      .peer = mc->peer, .dir = mc->dir,
			      .totals_only = totals_only };

	mc->desc->comm_counters(mc->mcomm, collect_one, &co);
}

struct core_metrics_comm *core_metrics_comm_open(const struct mesh_module *desc,
						 void *mcomm,
						 const char *module,
						 const char *peer, bool send)
{
	struct core_metrics_comm *mc = calloc(1, sizeof(*mc));

	if (!mc) {
		pthread_mutex_lock(&reg_lock);
		if (!warned_nomem)
			CORE_WARN("metrics: out of memory, a comm of %s is not "
				  "counted", module);
		warned_nomem = true;
		pthread_mutex_unlock(&reg_lock);
		return NULL;
	}
	mc->desc = desc;
	mc->mcomm = mcomm;
	snprintf(mc->module, sizeof(mc->module), "%s", module);
	snprintf(mc->peer, sizeof(mc->peer), "%s", peer ? peer : "");
	mc->dir = send ? MESH_DIR_SEND : MESH_DIR_RECV;
	pthread_mutex_lock(&reg_lock);
	mc->next = open_comms;
	if (open_comms)
		open_comms->prev = mc;
	open_comms = mc;
	pthread_mutex_unlock(&reg_lock);
	return mc;
}

void core_metrics_comm_rtt(struct core_metrics_comm *mc, uint32_t us)
{
	if (!mc)
		return;
	pthread_mutex_lock(&reg_lock);
	mc->rtt_us = us;
	pthread_mutex_unlock(&reg_lock);
}

static void unlink_comm(struct core_metrics_comm *mc)
{
	if (mc->prev)
		mc->prev->next = mc->next;
	else
		open_comms = mc->next;
	if (mc->next)
		mc->next->prev = mc->prev;
	mc->prev = mc->next = NULL;
}

/* Its last counters into the totals; under reg_lock. */
static void fold(struct core_metrics_comm *mc)
{
	comm_collect(mc, &closed, true);
	if (closed.full && !warned_full) {
		warned_full = true;
		CORE_WARN("metrics: more than %d series, the rest are not "
			  "counted", SERIES_MAX);
	}
	unlink_comm(mc);
}

void core_metrics_comm_close(struct core_metrics_comm *mc)
{
	if (!mc)
		return;
	pthread_mutex_lock(&reg_lock);
	if (!mc->detached)
		fold(mc);
	pthread_mutex_unlock(&reg_lock);
	free(mc);
}

void core_metrics_detach_all(void)
{
	pthread_mutex_lock(&reg_lock);
	while (open_comms) {
		struct core_metrics_comm *mc = open_comms;

		fold(mc);
		mc->detached = true;
	}
	pthread_mutex_unlock(&reg_lock);
}

/* ---- the text ---- */

static int by_name_then_labels(const void *a, const void *b)
{
	const struct series *x = a, *y = b;
	int d = strcmp(x->name, y->name);

	if (!d)
		d = strcmp(x->module, y->module);
	if (!d)
		d = strcmp(x->peer, y->peer);
	return d ? d : (int)x->dir - (int)y->dir;
}

struct text {
	char *buf;
	size_t len, cap;
	bool nomem;
};

static void put(struct text *t, const char *s, size_t n)
{
	if (t->nomem)
		return;
	if (t->len + n + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 4096;
		char *b;

		while (t->len + n + 1 > cap)
			cap *= 2;
		b = realloc(t->buf, cap);
		if (!b) {
			t->nomem = true;
			return;
		}
		t->buf = b;
		t->cap = cap;
	}
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = '\0';
}

static void puts_(struct text *t, const char *s)
{
	put(t, s, strlen(s));
}

/* The length of the UTF-8 character s starts with (1 to 4), or 0 where
 * none does: a stray byte, an overlong form, a surrogate, past U+10FFFF,
 * cut short.  The NUL that ends s fails the range, so no read passes it. */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	/* the second byte's range is what shuts out the forms above */
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

/* A label value or help text, escaped as the format wants: backslash
 * and newline always, the double quote in label values.  The text is
 * UTF-8, and Prometheus refuses a whole scrape for one label that is not
 * (a relay's origin is any bytes from the wire, a name cut at its bound
 * may end inside a character): a byte that starts none is U+FFFD. */
static void put_escaped(struct text *t, const char *s, bool quote)
{
	while (*s) {
		size_t n = utf8_len((const unsigned char *)s);

		if (!n)
			puts_(t, "\xef\xbf\xbd");
		else if (*s == '\\')
			puts_(t, "\\\\");
		else if (*s == '\n')
			puts_(t, "\\n");
		else if (*s == '"' && quote)
			puts_(t, "\\\"");
		else
			put(t, s, n);
		s += n ? n : 1;
	}
}

static void put_label(struct text *t, bool *first, const char *name,
		      const char *value)
{
	puts_(t, *first ? "{" : ",");
	*first = false;
	puts_(t, name);
	puts_(t, "=\"");
	put_escaped(t, value, true);
	puts_(t, "\"");
}

static const char *dir_name(enum mesh_direction dir)
{
	return dir == MESH_DIR_SEND ? "send" : dir == MESH_DIR_RECV ? "recv" :
	       "";
}

static void put_sample(struct text *t, const struct series *s,
		       const char *extra_label)
{
	bool first = true;
	char num[32];

	puts_(t, CORE_METRICS_PREFIX);
	puts_(t, s->name);
	if (s->kind == MESH_COUNTER_TOTAL)
		puts_(t, "_total");
	put_label(t, &first, "module", s->module);
	if (*s->peer)
		put_label(t, &first, "peer", s->peer);
	if (s->dir != MESH_DIR_NONE)
		put_label(t, &first, "direction", dir_name(s->dir));
	if (extra_label) {
		puts_(t, ",");
		puts_(t, extra_label);
	}
	snprintf(num, sizeof(num), "} %" PRIu64 "\n", s->value);
	puts_(t, num);
}

/* HELP and TYPE once per name, then its samples; set sorted by name. */
static void put_all(struct text *t, const struct series_set *set,
		    const char *extra_label)
{
	for (size_t i = 0; i < set->n; i++) {
		const struct series *s = &set->v[i];
		const char *suffix = s->kind == MESH_COUNTER_TOTAL ? "_total" :
				     "";

		if (!i || strcmp(set->v[i - 1].name, s->name)) {
			puts_(t, "# HELP " CORE_METRICS_PREFIX);
			puts_(t, s->name);
			puts_(t, suffix);
			puts_(t, " ");
			put_escaped(t, *s->help ? s->help : "(no help)",
				    false);
			puts_(t, "\n# TYPE " CORE_METRICS_PREFIX);
			puts_(t, s->name);
			puts_(t, suffix);
			puts_(t, s->kind == MESH_COUNTER_TOTAL ? " counter\n" :
				 " gauge\n");
		}
		put_sample(t, s, extra_label);
	}
}

/* A copy of the totals, then every open comm and the open counts. */
static int collect_comms(struct series_set *set)
{
	int err = 0;

	pthread_mutex_lock(&reg_lock);
	for (size_t i = 0; i < closed.n && !err; i++) {
		const struct series *s = &closed.v[i];
		struct mesh_counter c = { .name = s->name, .help = s->help,
					  .kind = s->kind, .value = s->value };

		err = series_add(set, &c, s->module, s->peer, s->dir);
	}
	for (struct core_metrics_comm *mc = open_comms; mc && !err;
	     mc = mc->next) {
		struct mesh_counter open = { .name = "comms_open",
					     .kind = MESH_COUNTER_GAUGE,
					     .value = 1 };

		struct mesh_counter rtt = { .name = RTT_NAME,
					    .kind = MESH_COUNTER_GAUGE,
					    .value = mc->rtt_us };

		comm_collect(mc, set, false);
		series_add(set, &open, mc->module, "", mc->dir);
		/* one series per peer, whichever way the comm goes */
		if (mc->rtt_us)
			series_add(set, &rtt, mc->module, mc->peer,
				   MESH_DIR_NONE);
	}
	pthread_mutex_unlock(&reg_lock);
	return err == -ENOMEM ? err : 0;
}

static void collect_modules(const struct core_state *st,
			    struct series_set *set)
{
	for (int i = 0; st && i < st->nmodules; i++) {
		const struct core_module *m = &st->modules[i];
		struct collect co = { .set = set, .module = m->name };

		if (m->status == CORE_MODULE_FAILED || !m->mctx)
			continue;
		m->desc->counters(m->mctx, collect_one, &co);
	}
}

int core_metrics_render(const struct core_state *st, const char *extra_label,
			char **text, size_t *len)
{
	struct series_set set = { 0 };
	struct text t = { 0 };
	int err;

	*text = NULL;
	*len = 0;
	err = collect_comms(&set);
	if (!err)
		collect_modules(st, &set);
	if (!err && set.n)
		qsort(set.v, set.n, sizeof(set.v[0]), by_name_then_labels);
	if (!err)
		put_all(&t, &set, extra_label);
	put(&t, "", 0);		/* an empty text is still a string */
	series_set_free(&set);
	if (err || t.nomem) {
		free(t.buf);
		return -ENOMEM;
	}
	*text = t.buf;
	*len = t.len;
	return 0;
}
