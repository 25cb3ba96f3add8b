/* SPDX-License-Identifier: MIT */
/*
 * The core's parameter table and the typed parsing shared by every table:
 * text from defaults and NCCL_MESH_* variables, settings from the file.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "config.h"
#include "netaddr.h"
#include "params.h"
#include "size.h"
#include "param_parse.h"

const struct mesh_param core_params[CP_COUNT + 1] = {
#define CORE_PARAM_ROW(id, key, type, dflt, min, max, help) \
	[id] = { key, type, dflt, min, max, help },
	CORE_PARAMS(CORE_PARAM_ROW)
#undef CORE_PARAM_ROW
	[CP_COUNT] = { .name = NULL },
};

/* Values quoted in messages are cut here, so one bad line stays one line. */
#define QUOTE_MAX 200

#define KIB 1024LL
#define MIB (1024LL * KIB)
#define GIB (1024LL * MIB)

bool param_type_valid(enum mesh_param_type type)
{
	switch (type) {
	case MESH_PARAM_STR:
	case MESH_PARAM_INT:
	case MESH_PARAM_BOOL:
	case MESH_PARAM_SIZE:
	case MESH_PARAM_LIST:
	case MESH_PARAM_PORT_RANGE:
	case MESH_PARAM_ADDR_LIST:
	case MESH_PARAM_PORT_MAP:
	case MESH_PARAM_ADDR_PORT:
		return true;
	}
	return false;
}

const char *core_param_type_name(enum mesh_param_type type)
{
	switch (type) {
	case MESH_PARAM_STR:
		return "string";
	case MESH_PARAM_INT:
		return "integer";
	case MESH_PARAM_BOOL:
		return "boolean";
	case MESH_PARAM_SIZE:
		return "size";
	case MESH_PARAM_LIST:
		return "list";
	case MESH_PARAM_PORT_RANGE:
		return "port range";
	case MESH_PARAM_ADDR_LIST:
		return "address list";
	case MESH_PARAM_PORT_MAP:
		return "port map";
	case MESH_PARAM_ADDR_PORT:
		return "address and port";
	}
	return "unknown";
}

void param_size_text(long long bytes, char *buf, size_t len)
{
	static const struct {
		long long unit;
		char suffix;
	} units[] = { { GIB, 'G' }, { MIB, 'M' }, { KIB, 'K' } };
	size_t i;

	for (i = 0; bytes != 0 && i < sizeof(units) / sizeof(units[0]); i++) {
		if (bytes % units[i].unit == 0) {
			snprintf(buf, len, "%lld%c", bytes / units[i].unit,
				 units[i].suffix);
			return;
		}
	}
	snprintf(buf, len, "%lld", bytes);
}

static bool has_range(const struct mesh_param *p)
{
	return p->min != p->max;
}

static bool in_range(const struct mesh_param *p, long long n)
{
	return !has_range(p) || (n >= p->min && n <= p->max);
}

/* "a list of at most 11 IP addresses ..." for ADDR_LIST and PORT_MAP. */
static void describe_items(const struct mesh_param *p, bool from_file,
			   const char *item, char *buf, size_t len)
{
	char most[48] = "";

	if (p->max > 0)
		snprintf(most, sizeof(most), "at most %lld ", p->max);
	snprintf(buf, len, "%s of %s%s", from_file ? "a string or a list" :
		 "a comma-separated list", most, item);
}

/* What a valid value looks like, for "expected ..." messages. */
static void describe_expected(const struct mesh_param *p, bool from_file,
			      char *buf, size_t len)
{
	char lo[32], hi[32];

	switch (p->type) {
	case MESH_PARAM_STR:
		snprintf(buf, len, "a string");
		break;
	case MESH_PARAM_INT:
		if (has_range(p))
			snprintf(buf, len, "an integer in %lld..%lld", p->min,
				 p->max);
		else
			snprintf(buf, len, "an integer");
		break;
	case MESH_PARAM_BOOL:
		snprintf(buf, len, from_file ? "true or false" :
			 "true, false, yes, no, on, off, 1 or 0");
		break;
	case MESH_PARAM_SIZE:
		if (has_range(p)) {
			param_size_text(p->min, lo, sizeof(lo));
			param_size_text(p->max, hi, sizeof(hi));
			snprintf(buf, len,
				 "a size in %s..%s (bytes, or with a K, M or G suffix)",
				 lo, hi);
		} else {
			snprintf(buf, len,
				 "a size (bytes, or with a K, M or G suffix)");
		}
		break;
	case MESH_PARAM_LIST:
		snprintf(buf, len, from_file ? "a string or a list of strings" :
			 "a comma-separated list");
		break;
	case MESH_PARAM_PORT_RANGE:
		snprintf(buf, len, "\"<low>-<high>\" with 1 <= low <= high "
			 "<= 65535, or \"\"");
		break;
	case MESH_PARAM_ADDR_LIST:
		describe_items(p, from_file, "IP addresses without port or "
			       "prefix", buf, len);
		break;
	case MESH_PARAM_PORT_MAP:
		describe_items(p, from_file, "\"<listen port>=<external port>\" "
			       "pairs, ports in 1..65535", buf, len);
		break;
	case MESH_PARAM_ADDR_PORT:
		snprintf(buf, len, "\"<ip>:<port>\" or \"[<ipv6>]:<port>\" "
			 "(port 1..65535, no multicast or broadcast address), "
			 "or \"\"");
		break;
	default:
		snprintf(buf, len, "a value of a known type");
		break;
	}
}

static void describe_setting(const config_setting_t *s, char *buf,
			     size_t len)
{
	switch (config_setting_type(s)) {
	case CONFIG_TYPE_STRING:
		snprintf(buf, len, "\"%.*s\"", QUOTE_MAX,
			 config_setting_get_string(s));
		break;
	case CONFIG_TYPE_INT:
	case CONFIG_TYPE_INT64:
		snprintf(buf, len, "%lld",
			 (long long)config_setting_get_int64(s));
		break;
	case CONFIG_TYPE_FLOAT:
		snprintf(buf, len, "%g", config_setting_get_float(s));
		break;
	case CONFIG_TYPE_BOOL:
		snprintf(buf, len, "%s",
			 config_setting_get_bool(s) ? "true" : "false");
		break;
	case CONFIG_TYPE_GROUP:
		snprintf(buf, len, "a group");
		break;
	case CONFIG_TYPE_ARRAY:
		snprintf(buf, len, "an array");
		break;
	case CONFIG_TYPE_LIST:
		snprintf(buf, len, "a list");
		break;
	default:
		snprintf(buf, len, "nothing");
		break;
	}
}

static int reject(const struct mesh_param *p, bool from_file, const char *got,
		  char *why, size_t len)
{
	char expected[256];

	describe_expected(p, from_file, expected, sizeof(expected));
	snprintf(why, len, "expected %s, got %s", expected, got);
	return -EINVAL;
}

static int reject_text(const struct mesh_param *p, const char *text,
		       char *why, size_t len)
{
	char got[QUOTE_MAX + 8];

	snprintf(got, sizeof(got), "\"%.*s\"", QUOTE_MAX, text);
	return reject(p, false, got, why, len);
}

static int reject_setting(const struct mesh_param *p,
			  const config_setting_t *s, char *why, size_t len)
{
	char got[QUOTE_MAX + 8];

	describe_setting(s, got, sizeof(got));
	return reject(p, true, got, why, len);
}

static int set_text(struct param_parsed *out, const char *text)
{
	out->text = strdup(text);
	return out->text ? 0 : -ENOMEM;
}

static int set_number(struct param_parsed *out, long long n)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%lld", n);
	out->num = n;
	return set_text(out, buf);
}

static int set_size(struct param_parsed *out, long long n)
{
	char buf[32];

	param_size_text(n, buf, sizeof(buf));
	out->num = n;
	return set_text(out, buf);
}

static int set_bool(struct param_parsed *out, bool b)
{
	out->num = b;
	return set_text(out, b ? "true" : "false");
}

/* Strict decimal: optional sign, digits, nothing else. */
static bool text_to_int(const char *text, long long *out)
{
	char *end;

	if (!*text || isspace((unsigned char)*text))
		return false;
	errno = 0;
	*out = strtoll(text, &end, 10);
	return errno == 0 && *end == '\0' && end != text;
}

/* A size as the config, the tools and the benchmarks read it (size.h). */
static bool text_to_size(const char *text, long long *out)
{
	uint64_t n;

	if (util_size_parse(text, &n) || n > LLONG_MAX)
		return false;
	*out = (long long)n;
	return true;
}

static bool text_to_bool(const char *text, bool *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(text, yes[i])) {
			*out = true;
			return true;
		}
		if (!strcasecmp(text, no[i])) {
			*out = false;
			return true;
		}
	}
	return false;
}

static int push_item(struct param_parsed *out, const char *s, size_t n)
{
	char **items;

	items = realloc(out->items, (out->nitems + 2) * sizeof(*items));
	if (!items)
		return -ENOMEM;
	out->items = items;
	items[out->nitems] = strndup(s, n);
	if (!items[out->nitems])
		return -ENOMEM;
	items[++out->nitems] = NULL;
	return 0;
}

/* The canonical text of a list: its items joined by commas. */
static int join_items(struct param_parsed *out)
{
	size_t len = 1;
	char *p;
	int i;

	for (i = 0; i < out->nitems; i++)
		len += strlen(out->items[i]) + 1;
	out->text = malloc(len);
	if (!out->text)
		return -ENOMEM;
	p = out->text;
	*p = '\0';
	for (i = 0; i < out->nitems; i++)
		p += sprintf(p, "%s%s", i ? "," : "", out->items[i]);
	return 0;
}

/* An empty list still has its NULL terminator, so callers can iterate. */
static int start_list(struct param_parsed *out)
{
	out->items = calloc(1, sizeof(*out->items));
	return out->items ? 0 : -ENOMEM;
}

/* Items are trimmed; empty items ("a,,b", a trailing comma) are dropped. */
static int text_to_list(const char *text, struct param_parsed *out)
{
	const char *s = text, *end;
	int rc = start_list(out);

	while (!rc && *s) {
		end = strchrnul(s, ',');
		while (s < end && isspace((unsigned char)*s))
			s++;
		while (end > s && isspace((unsigned char)end[-1]))
			end--;
		if (end > s)
			rc = push_item(out, s, end - s);
		s = strchrnul(s, ',');
		if (*s)
			s++;
	}
	return rc ? rc : join_items(out);
}

static bool item_is_addr(const char *item)
{
	struct mesh_addr a;

	return !util_addr_parse(item, &a) && !a.port && !a.prefix_len &&
	       !strchr(item, '/') && item[0] != '[';
}

static bool addr_unspecified(const struct mesh_addr *a)
{
	static const uint8_t zero[16];

	return !memcmp(a->ip, zero, a->family == AF_INET ? 4 : 16);
}

/* A broadcast or multicast address: one no stream socket connects to or
 * listens on. */
static const char *addr_group(const struct mesh_addr *a)
{
	if (a->family == AF_INET) {
		if (!memcmp(a->ip, "\xff\xff\xff\xff", 4))
			return "the broadcast address";
		if (a->ip[0] >= 224 && a->ip[0] < 240)
			return "a multicast address";
	} else if (a->ip[0] == 0xff) {
		return "a multicast address";
	}
	return NULL;
}

/*
 * Why a peer cannot dial the address `item`, or NULL: a handle that
 * advertises 0.0.0.0 or a broadcast address sends every peer nowhere.
 */
static const char *addr_undialable(const char *item)
{
	struct mesh_addr a;

	if (util_addr_parse(item, &a))
		return NULL;
	return addr_unspecified(&a) ? "the unspecified address" :
	       addr_group(&a);
}

static bool item_is_port(const char *s, const char *end)
{
	long long n = 0;

	if (s == end || end - s > 5)
		return false;
	for (; s < end; s++) {
		if (!isdigit((unsigned char)*s))
			return false;
		n = n * 10 + (*s - '0');
	}
	return n >= 1 && n <= 65535;
}

/* "<low>-<high>" with 1 <= low <= high <= 65535; "" is no range. */
static bool text_to_port_range(const char *text, long long *out)
{
	const char *dash = strchr(text, '-');
	long long lo, hi;

	if (!*text) {
		*out = 0;
		return true;
	}
	if (!dash || !item_is_port(text, dash) ||
	    !item_is_port(dash + 1, dash + strlen(dash)))
		return false;
	lo = atoll(text);
	hi = atoll(dash + 1);
	if (lo > hi)
		return false;
	*out = lo << 16 | hi;
	return true;
}

/*
 * "<ip>:<port>" or "[<ipv6>]:<port>", the port in plain digits: an address
 * to listen on, so 0.0.0.0 and :: (every address) but no multicast or
 * broadcast address, which no stream socket binds.
 */
static bool text_to_addr_port(const char *text, struct mesh_addr *a)
{
	const char *colon = strrchr(text, ':');

	return colon && item_is_port(colon + 1, colon + strlen(colon)) &&
	       !strchr(text, '/') && !util_addr_parse(text, a) &&
	       (a->family == AF_INET6) == (text[0] == '[') && !addr_group(a);
}

static bool item_is_port_pair(const char *item)
{
	const char *eq = strchr(item, '=');

	return eq && item_is_port(item, eq) &&
	       item_is_port(eq + 1, eq + strlen(eq));
}

/* The items of an ADDR_LIST or PORT_MAP, once split like any list. */
static int check_items(const struct mesh_param *p, bool from_file,
		       struct param_parsed *out, char *why, size_t len)
{
	bool (*valid)(const char *) = p->type == MESH_PARAM_ADDR_LIST ?
		item_is_addr : item_is_port_pair;
	char expected[256];
	int i;

	if (p->type != MESH_PARAM_ADDR_LIST && p->type != MESH_PARAM_PORT_MAP)
		return 0;
	describe_expected(p, from_file, expected, sizeof(expected));
	for (i = 0; i < out->nitems; i++) {
		if (!valid(out->items[i])) {
			snprintf(why, len, "expected %s, got \"%.*s\" as item %d",
				 expected, QUOTE_MAX, out->items[i], i + 1);
			return -EINVAL;
		}
		if (p->type == MESH_PARAM_ADDR_LIST &&
		    addr_undialable(out->items[i])) {
			snprintf(why, len, "expected %s, got \"%.*s\" as item "
				 "%d: %s, which no peer can dial", expected,
				 QUOTE_MAX, out->items[i], i + 1,
				 addr_undialable(out->items[i]));
			return -EINVAL;
		}
	}
	if (p->max > 0 && out->nitems > p->max) {
		snprintf(why, len, "expected %s, got %d items", expected,
			 out->nitems);
		return -EINVAL;
	}
	return 0;
}

static int parse_port_range_text(const struct mesh_param *p,
				 const char *text, bool from_file,
				 struct param_parsed *out, char *why,
				 size_t len)
{
	long long n;

	if (!text_to_port_range(text, &n)) {
		char got[QUOTE_MAX + 8];

		snprintf(got, sizeof(got), "\"%.*s\"", QUOTE_MAX, text);
		return reject(p, from_file, got, why, len);
	}
	out->num = n;
	return set_text(out, text);
}

/* An ADDR_PORT value; its canonical text is the address as the core
 * writes it ("[::1]:9464"), "" for none. */
static int parse_addr_port_text(const struct mesh_param *p, const char *text,
				bool from_file, struct param_parsed *out,
				char *why, size_t len)
{
	char got[QUOTE_MAX + 8], canon[UTIL_ADDR_STRLEN];
	struct mesh_addr a;

	if (!*text)
		return set_text(out, "");
	if (!text_to_addr_port(text, &a)) {
		snprintf(got, sizeof(got), "\"%.*s\"", QUOTE_MAX, text);
		return reject(p, from_file, got, why, len);
	}
	out->num = a.port;
	return set_text(out, util_addr_str(&a, canon, sizeof(canon)));
}

static int parse_text_value(const struct mesh_param *p, const char *text,
			    struct param_parsed *out, char *why, size_t len)
{
	long long n;
	bool b;
	int rc;

	switch (p->type) {
	case MESH_PARAM_STR:
		return set_text(out, text);
	case MESH_PARAM_INT:
		if (!text_to_int(text, &n) || !in_range(p, n))
			return reject_text(p, text, why, len);
		return set_number(out, n);
	case MESH_PARAM_BOOL:
		if (!text_to_bool(text, &b))
			return reject_text(p, text, why, len);
		return set_bool(out, b);
	case MESH_PARAM_SIZE:
		if (!text_to_size(text, &n) || !in_range(p, n))
			return reject_text(p, text, why, len);
		return set_size(out, n);
	case MESH_PARAM_LIST:
		return text_to_list(text, out);
	case MESH_PARAM_PORT_RANGE:
		return parse_port_range_text(p, text, false, out, why, len);
	case MESH_PARAM_ADDR_PORT:
		return parse_addr_port_text(p, text, false, out, why, len);
	case MESH_PARAM_ADDR_LIST:
	case MESH_PARAM_PORT_MAP:
		rc = text_to_list(text, out);
		return rc ? rc : check_items(p, false, out, why, len);
	}
	snprintf(why, len, "unknown parameter type %d", (int)p->type);
	return -EINVAL;
}

int param_parse_text(const struct mesh_param *p, const char *text,
		     struct param_parsed *out, char *why, size_t len)
{
	int rc;

	memset(out, 0, sizeof(*out));
	rc = parse_text_value(p, text, out, why, len);
	if (rc)
		param_parsed_free(out);
	return rc;
}

int param_parse_default(const struct mesh_param *p,
			struct param_parsed *out, char *why, size_t len)
{
	const char *text = p->dflt ? p->dflt : "";

	if (*text || p->type == MESH_PARAM_STR || p->type == MESH_PARAM_LIST ||
	    p->type == MESH_PARAM_PORT_RANGE ||
	    p->type == MESH_PARAM_ADDR_LIST || p->type == MESH_PARAM_PORT_MAP ||
	    p->type == MESH_PARAM_ADDR_PORT)
		return param_parse_text(p, text, out, why, len);
	memset(out, 0, sizeof(*out));
	if (!param_type_valid(p->type))
		return param_parse_text(p, text, out, why, len);
	return set_text(out, "");
}

static int setting_to_list(const struct mesh_param *p,
			   const config_setting_t *s, struct param_parsed *out,
			   char *why, size_t len)
{
	const config_setting_t *item;
	char got[QUOTE_MAX + 8];
	int i, n, rc;

	rc = start_list(out);
	if (rc)
		return rc;
	if (config_setting_type(s) == CONFIG_TYPE_STRING) {
		rc = push_item(out, config_setting_get_string(s),
			       strlen(config_setting_get_string(s)));
		return rc ? rc : join_items(out);
	}
	if (!config_setting_is_array(s) && !config_setting_is_list(s))
		return reject_setting(p, s, why, len);
	n = config_setting_length(s);
	for (i = 0; i < n; i++) {
		item = config_setting_get_elem(s, i);
		if (config_setting_type(item) != CONFIG_TYPE_STRING) {
			describe_setting(item, got, sizeof(got));
			snprintf(why, len,
				 "expected a list of strings, got %s as item %d",
				 got, i + 1);
			return -EINVAL;
		}
		rc = push_item(out, config_setting_get_string(item),
			       strlen(config_setting_get_string(item)));
		if (rc)
			return rc;
	}
	return join_items(out);
}

static bool setting_is_int(const config_setting_t *s)
{
	int type = config_setting_type(s);

	return type == CONFIG_TYPE_INT || type == CONFIG_TYPE_INT64;
}

static int parse_setting_value(const struct mesh_param *p,
			       const config_setting_t *s,
			       struct param_parsed *out, char *why, size_t len)
{
	int type = config_setting_type(s);
	long long n;
	int rc;

	switch (p->type) {
	case MESH_PARAM_STR:
		if (type != CONFIG_TYPE_STRING)
			return reject_setting(p, s, why, len);
		return set_text(out, config_setting_get_string(s));
	case MESH_PARAM_INT:
		if (!setting_is_int(s))
			return reject_setting(p, s, why, len);
		n = config_setting_get_int64(s);
		if (!in_range(p, n))
			return reject_setting(p, s, why, len);
		return set_number(out, n);
	case MESH_PARAM_BOOL:
		if (type != CONFIG_TYPE_BOOL)
			return reject_setting(p, s, why, len);
		return set_bool(out, config_setting_get_bool(s));
	case MESH_PARAM_SIZE:
		if (setting_is_int(s))
			n = config_setting_get_int64(s);
		else if (type != CONFIG_TYPE_STRING ||
			 !text_to_size(config_setting_get_string(s), &n))
			return reject_setting(p, s, why, len);
		if (n < 0 || !in_range(p, n))
			return reject_setting(p, s, why, len);
		return set_size(out, n);
	case MESH_PARAM_LIST:
		return setting_to_list(p, s, out, why, len);
	case MESH_PARAM_PORT_RANGE:
		if (type != CONFIG_TYPE_STRING)
			return reject_setting(p, s, why, len);
		return parse_port_range_text(p, config_setting_get_string(s),
					     true, out, why, len);
	case MESH_PARAM_ADDR_PORT:
		if (type != CONFIG_TYPE_STRING)
			return reject_setting(p, s, why, len);
		return parse_addr_port_text(p, config_setting_get_string(s),
					    true, out, why, len);
	case MESH_PARAM_ADDR_LIST:
	case MESH_PARAM_PORT_MAP:
		rc = setting_to_list(p, s, out, why, len);
		return rc ? rc : check_items(p, true, out, why, len);
	}
	snprintf(why, len, "unknown parameter type %d", (int)p->type);
	return -EINVAL;
}

int param_parse_setting(const struct mesh_param *p,
			const config_setting_t *s, struct param_parsed *out,
			char *why, size_t len)
{
	int rc;

	memset(out, 0, sizeof(*out));
	rc = parse_setting_value(p, s, out, why, len);
	if (rc)
		param_parsed_free(out);
	return rc;
}

void param_parsed_free(struct param_parsed *v)
{
	int i;

	for (i = 0; v->items && i < v->nitems; i++)
		free(v->items[i]);
	free(v->items);
	free(v->text);
	memset(v, 0, sizeof(*v));
}
