/* SPDX-License-Identifier: MIT */
/*
 * The core's rules beyond one value's type: between values (a port offset
 * that pushes the range past 65535), about the world (the key file), and
 * about the modules (rails naming devices that exist).  The plugin's init
 * and meshinfo both run them through core_state_build; every broken rule
 * is a config error at the value's file and line, so a config that would
 * fail init never passes `meshinfo --check`.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "loader.h"
#include "netaddr.h"
#include "params.h"
#include "size.h"
#include "state.h"

#define INSTALLED_MAX 256	/* module files looked at for a typo */
#define CORE_VALUE(st, id) (&core_config_core((st)->cfg)->values[id])

/* "tcp-xdc", "ib-fabric", "my_mod.2": names a file mesh-<name>.so. */
static bool module_name_ok(const char *name)
{
	if (!*name || *name == '.' || strlen(name) >= MESH_NAME_MAX)
		return false;
	for (const char *p = name; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("-_.", *p))
			return false;
	return true;
}

/* Installed module names, at most `max`, from mesh-<name>.so files. */
static int installed_modules(char **dirs, int ndirs, char **names, int max)
{
	int n = 0;

	for (int i = 0; i < ndirs; i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *e;

		while (d && n < max && (e = readdir(d))) {
			size_t len = strlen(e->d_name);

			if (len > 8 && !strncmp(e->d_name, "mesh-", 5) &&
			    !strcmp(e->d_name + len - 3, ".so") &&
			    (names[n] = strndup(e->d_name + 5, len - 8)))
				n++;
		}
		if (d)
			closedir(d);
	}
	return n;
}

static bool module_installed(char **dirs, int ndirs, const char *name)
{
	char path[PATH_MAX];

	for (int i = 0; i < ndirs; i++)
		if ((size_t)snprintf(path, sizeof(path), "%s/mesh-%s.so",
				     dirs[i], name) < sizeof(path) &&
		    !access(path, F_OK))
			return true;
	return false;
}

/*
 * A module found nowhere whose name is a typo of an installed one is an
 * error: `tcp-xdcc` would leave init with fewer modules than meant.  One
 * found nowhere and near none stays the loader's warning.
 */
static int check_module_typos(struct core_state *st,
			      const struct core_value *v)
{
	char **dirs = NULL, *names[INSTALLED_MAX];
	int ndirs = core_loader_search_path(st->cfg, &dirs), n = 0, err = 0;

	for (int i = 0; ndirs > 0 && i < v->nitems; i++) {
		const char *best;

		if (module_installed(dirs, ndirs, v->items[i]))
			continue;
		if (!n)
			n = installed_modules(dirs, ndirs, names,
					      INSTALLED_MAX);
		best = core_nearest_name(v->items[i],
					 (const char *const *)names, n);
		if (!best)
			continue;
		core_config_value_error(st->cfg, NULL, v, "module %s is not "
					"on the module search path (did you "
					"mean '%s'?)", v->items[i], best);
		err = -EINVAL;
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	for (int i = 0; ndirs > 0 && dirs[i]; i++)
		free(dirs[i]);
	free(dirs);
	return err;
}

static int check_modules(struct core_state *st)
{
	const struct core_value *v = CORE_VALUE(st, CP_MODULES);
	int err = 0;

	if (!v->nitems) {
		core_config_value_error(st->cfg, NULL, v, "expected at least one "
					"module name, got an empty list");
		return -EINVAL;
	}
	for (int i = 0; i < v->nitems; i++) {
		if (!module_name_ok(v->items[i])) {
			core_config_value_error(st->cfg, NULL, v,
				"expected module names of letters, digits, "
				"'-', '_' and '.', got \"%s\" as item %d",
				v->items[i], i + 1);
			err = -EINVAL;
			continue;
		}
		for (int j = 0; j < i; j++) {
			if (strcmp(v->items[i], v->items[j]))
				continue;
			core_config_value_error(st->cfg, NULL, v,
				"module %s is listed twice (items %d and %d)",
				v->items[i], j + 1, i + 1);
			err = -EINVAL;
			break;
		}
	}
	return err ? err : check_module_typos(st, v);
}

static bool in_modules(const struct core_value *mods, const char *name,
		       size_t len)
{
	for (int i = 0; i < mods->nitems; i++)
		if (strlen(mods->items[i]) == len &&
		    !strncmp(mods->items[i], name, len))
			return true;
	return false;
}

/* One rails entry, "tcp-xdc/eth0+ib-fabric/mlx5_0", without devices. */
static int check_rail_syntax(struct core_state *st, int r, const char *spec)
{
	const struct core_value *v = CORE_VALUE(st, CP_RAILS);
	const struct core_value *mods = CORE_VALUE(st, CP_MODULES);
	const char *p = spec, *seen[CORE_RAIL_MEMBERS_MAX];
	size_t seen_len[CORE_RAIL_MEMBERS_MAX];
	int n = 0;

	for (;;) {
		const char *end = strchrnul(p, '+');
		const char *slash = memchr(p, '/', (size_t)(end - p));

		if (!slash || slash == p || slash + 1 >= end ||
		    end - slash > MESH_NAME_MAX) {
			core_config_value_error(st->cfg, NULL, v,
				"entry %d \"%s\": expected module/device "
				"members joined by '+', got \"%.*s\"", r + 1,
				spec, (int)(end - p), p);
			return -EINVAL;
		}
		if (!in_modules(mods, p, (size_t)(slash - p))) {
			core_config_value_error(st->cfg, NULL, v,
				"entry %d \"%s\": module %.*s is not in "
				"'modules'", r + 1, spec, (int)(slash - p), p);
			return -EINVAL;
		}
		for (int i = 0; i < n; i++) {
			if (seen_len[i] != (size_t)(slash - p) ||
			    strncmp(seen[i], p, seen_len[i]))
				continue;
			core_config_value_error(st->cfg, NULL, v,
				"entry %d \"%s\": two members from module "
				"%.*s; a rail takes one device per module",
				r + 1, spec, (int)(slash - p), p);
			return -EINVAL;
		}
		if (n == CORE_RAIL_MEMBERS_MAX) {
			core_config_value_error(st->cfg, NULL, v,
				"entry %d \"%s\": expected at most %d members",
				r + 1, spec, CORE_RAIL_MEMBERS_MAX);
			return -EINVAL;
		}
		seen[n] = p;
		seen_len[n++] = (size_t)(slash - p);
		if (!*end)
			return 0;
		p = end + 1;
	}
}

static int check_rails(struct core_state *st)
{
	const struct core_value *v = CORE_VALUE(st, CP_RAILS);
	int err = 0;

	for (int r = 0; r < v->nitems; r++)
		if (check_rail_syntax(st, r, v->items[r]))
			err = -EINVAL;
	if ((uint64_t)v->nitems > st->max_rails) {
		core_config_value_error(st->cfg, NULL, v,
			"%d rails, but max_rails is %llu", v->nitems,
			(unsigned long long)st->max_rails);
		err = -EINVAL;
	}
	return err;
}

static int take_advertise(struct core_state *st)
{
	const struct core_value *addrs = CORE_VALUE(st, CP_ADVERTISE_ADDRS);
	const struct core_value *ports = CORE_VALUE(st, CP_ADVERTISE_PORTS);
	struct core_advertise *adv = &st->advertise;

	adv->port_offset = (int)CORE_VALUE(st, CP_ADVERTISE_PORT_OFFSET)->num;
	adv->local = CORE_VALUE(st, CP_ADVERTISE_LOCAL)->num != 0;
	/* The table's type checked every item already. */
	for (int i = 0; i < addrs->nitems && i < CORE_HANDLE_ADDRS_MAX; i++)
		if (!util_addr_parse(addrs->items[i], &adv->addrs[adv->naddrs]))
			adv->naddrs++;
	adv->ports = calloc((size_t)ports->nitems + 1, sizeof(*adv->ports));
	if (!adv->ports)
		return -ENOMEM;
	for (int i = 0; i < ports->nitems; i++) {
		unsigned from = 0, to = 0;

		if (sscanf(ports->items[i], "%u=%u", &from, &to) != 2)
			continue;
		adv->ports[adv->nports].listen = (uint16_t)from;
		adv->ports[adv->nports++].external = (uint16_t)to;
	}
	return 0;
}

int core_advertise_port(const struct core_advertise *adv, int port)
{
	for (int i = 0; i < adv->nports; i++)
		if (adv->ports[i].listen == port)
			return adv->ports[i].external;
	return port + adv->port_offset;
}

/* Every listen port must map to an external port a peer can dial. */
static int check_advertise(struct core_state *st)
{
	const struct core_value *offset =
		CORE_VALUE(st, CP_ADVERTISE_PORT_OFFSET);
	const struct core_value *ports = CORE_VALUE(st, CP_ADVERTISE_PORTS);
	const struct core_advertise *adv = &st->advertise;
	int err = 0;

	for (int i = 0; i < adv->nports; i++) {
		for (int j = 0; j < i; j++) {
			if (adv->ports[i].listen != adv->ports[j].listen)
				continue;
			core_config_value_error(st->cfg, NULL, ports,
				"listen port %u is mapped twice (items %d and "
				"%d)", adv->ports[i].listen, j + 1, i + 1);
			err = -EINVAL;
			break;
		}
	}
	if (!adv->naddrs) {
		if (adv->port_offset || adv->nports)
			core_config_value_warning(st->cfg, NULL,
				adv->nports ? ports : offset,
				"has no effect without advertise_addrs");
		return err;
	}
	if (adv->port_offset && !st->port_low) {
		core_config_value_error(st->cfg, NULL, offset,
			"needs port_range: a port the kernel picks cannot be "
			"mapped by an offset");
		return -EINVAL;
	}
	for (int p = st->port_low; p && p <= st->port_high; p++) {
		int ext = core_advertise_port(adv, p);

		if (ext >= 1 && ext <= 65535)
			continue;
		core_config_value_error(st->cfg, NULL, offset,
			"listen port %d + %d gives external port %d, expected "
			"1..65535", p, adv->port_offset, ext);
		return -EINVAL;
	}
	return err;
}

static int load_key(struct core_state *st)
{
	const struct core_value *v = CORE_VALUE(st, CP_AUTH_KEY_FILE);
	char why[512];

	if (!*v->text)
		return 0;
	/* Opens non-blocking and wants a regular, owner-only file. */
	if (!core_auth_load_key(v->text, &st->auth_key, why, sizeof(why)))
		return 0;
	core_config_value_error(st->cfg, NULL, v, "%s", why);
	return -EINVAL;
}

const char *core_algo_name(enum core_algo algo)
{
	static const char *const names[CORE_ALGOS] = {
		[CORE_ALGO_TREE] = "tree",
		[CORE_ALGO_RING] = "ring",
	};

	return algo < CORE_ALGOS ? names[algo] : NULL;
}

/* An entry's algorithm prefix ("tree:"), stepped over; else ANY. */
static int take_algo(const char **item, enum core_algo *algo)
{
	const char *colon = strchr(*item, ':');

	*algo = CORE_ALGO_ANY;
	if (!colon || !isalpha((unsigned char)**item))
		return 0;
	for (int a = CORE_ALGO_TREE; a < CORE_ALGOS; a++) {
		const char *name = core_algo_name((enum core_algo)a);

		if ((size_t)(colon - *item) == strlen(name) &&
		    !strncasecmp(*item, name, strlen(name))) {
			*algo = (enum core_algo)a;
			*item = colon + 1;
			return 0;
		}
	}
	return -EINVAL;
}

/* One nccl_channels_by_size entry, "64K:2" or "tree:16K:2", into rule;
 * else an error. */
static int take_channel_rule(struct core_state *st, int i,
			     struct core_channel_rule *rule)
{
	const struct core_value *v = CORE_VALUE(st, CP_NCCL_CHANNELS_BY_SIZE);
	const char *item = v->items[i], *colon;
	char size[32], *end;
	long n;

	if (take_algo(&item, &rule->algo)) {
		core_config_value_error(st->cfg, NULL, v, "entry %d \"%s\": "
			"unknown algorithm before the size (tree or ring)",
			i + 1, v->items[i]);
		return -EINVAL;
	}
	colon = strchr(item, ':');
	if (!colon || (size_t)(colon - item) >= sizeof(size))
		goto syntax;
	memcpy(size, item, (size_t)(colon - item));
	size[colon - item] = '\0';
	n = strtol(colon + 1, &end, 10);	/* past LONG_MAX: LONG_MAX */
	if (util_size_parse(size, &rule->max_bytes) ||
	    !isdigit((unsigned char)colon[1]) || *end)
		goto syntax;
	if (!rule->max_bytes || n > CORE_NCCL_CHANNELS_MAX) {
		core_config_value_error(st->cfg, NULL, v, "entry %d \"%s\": "
			"expected a size above 0 and 0..%d channels", i + 1,
			v->items[i], CORE_NCCL_CHANNELS_MAX);
		return -EINVAL;
	}
	rule->channels = (int)n;
	return 0;
syntax:
	core_config_value_error(st->cfg, NULL, v, "entry %d \"%s\": expected "
		"[tree:|ring:]<size>:<channels>, as \"64K:2\" (size in bytes "
		"or with a K, M or G suffix)", i + 1, v->items[i]);
	return -EINVAL;
}

/* nccl_channels_by_size: entries that parse, at most
 * CORE_CHANNEL_RULES_MAX, sizes strictly rising per algorithm. */
static int take_channel_rules(struct core_state *st)
{
	const struct core_value *v = CORE_VALUE(st, CP_NCCL_CHANNELS_BY_SIZE);
	struct core_channel_rule *rules = st->tuning.channels.rule;
	int last[CORE_ALGOS] = { -1, -1, -1 };
	int err = 0;

	if (v->nitems > CORE_CHANNEL_RULES_MAX) {
		core_config_value_error(st->cfg, NULL, v, "expected at most %d "
			"entries, got %d", CORE_CHANNEL_RULES_MAX, v->nitems);
		return -EINVAL;
	}
	for (int i = 0; i < v->nitems; i++) {
		int *prev;

		if (take_channel_rule(st, i, &rules[i])) {
			err = -EINVAL;
			continue;
		}
		prev = &last[rules[i].algo];
		if (*prev >= 0 && !err &&
		    rules[i].max_bytes <= rules[*prev].max_bytes) {
			core_config_value_error(st->cfg, NULL, v, "entry %d "
				"\"%s\": sizes must rise, and entry %d is as "
				"large", i + 1, v->items[i], *prev + 1);
			err = -EINVAL;
		}
		*prev = i;
	}
	st->tuning.channels.n = err ? 0 : v->nitems;
	return err;
}

int core_validate_config(struct core_state *st)
{
	long long range = CORE_VALUE(st, CP_PORT_RANGE)->num;
	int err = 0;

	st->dc = (uint64_t)CORE_VALUE(st, CP_DC)->num;
	st->max_rails = (uint64_t)CORE_VALUE(st, CP_MAX_RAILS)->num;
	st->connect_timeout_ms = (int)CORE_VALUE(st, CP_CONNECT_TIMEOUT_MS)->num;
	st->nccl_buffsize = CORE_VALUE(st, CP_NCCL_BUFFSIZE)->num;
	st->nccl_buffsize_max = CORE_VALUE(st, CP_NCCL_BUFFSIZE_MAX)->num;
	st->tuning.ll_max = (uint64_t)CORE_VALUE(st, CP_NCCL_LL_MAX)->num;
	st->tuning.xdc_rtt_ms = (uint32_t)CORE_VALUE(st, CP_XDC_RTT_MS)->num;
	st->tuning.algo_by_distance =
		CORE_VALUE(st, CP_NCCL_ALGO_BY_DISTANCE)->num != 0;
	st->port_low = (int)(range >> 16);
	st->port_high = (int)(range & 0xffff);
	if (take_advertise(st))
		return -ENOMEM;
	st->rails_bad = check_rails(st) != 0;
	st->modules_bad = check_modules(st) != 0;
	if (check_advertise(st) | load_key(st) | take_channel_rules(st) ||
	    st->rails_bad || st->modules_bad)
		err = -EINVAL;
	return err;
}

/*
 * A list of which no module loaded, each not found or not loadable here,
 * leaves init nothing, whatever the rest of the file says: an error, so
 * that --check fails it as init does.  One module that loads, with
 * devices or without, is enough to pass: the others stay the loader's
 * warnings, and devices are this host's state, not the file's.  A module
 * that failed on its parameters, or a list that broke its own rules, has
 * its errors already.
 */
static int check_some_module_loads(struct core_state *st)
{
	const struct core_value *v = CORE_VALUE(st, CP_MODULES);

	if (st->modules_bad || !st->nmodules)
		return 0;
	for (int i = 0; i < st->nmodules; i++)
		if (st->modules[i].status != CORE_MODULE_FAILED ||
		    st->modules[i].param_errors)
			return 0;
	core_config_value_error(st->cfg, NULL, v, "no module in the list "
		"loads on this host, so init has no device (each module's "
		"warning says why)");
	return -EINVAL;
}

/* The member's module, when it is ready; else an error naming why not. */
static const struct core_module *rail_module(struct core_state *st, int r,
					     const char *spec, const char *p,
					     size_t len)
{
	const struct core_value *v = CORE_VALUE(st, CP_RAILS);

	for (int i = 0; i < st->nmodules; i++) {
		const struct core_module *m = &st->modules[i];

		if (strlen(m->name) != len || strncmp(m->name, p, len))
			continue;
		if (m->status == CORE_MODULE_READY)
			return m;
		core_config_value_error(st->cfg, NULL, v,
			"entry %d \"%s\": module %s %s (%s)", r + 1, spec,
			m->name, m->status == CORE_MODULE_NODEV ?
			"has no usable device" : "did not load", m->reason);
		return NULL;
	}
	return NULL;	/* not in modules: check_rails said so */
}

static int rail_devices(struct core_state *st, int r, const char *spec)
{
	const struct core_value *v = CORE_VALUE(st, CP_RAILS);
	const char *p = spec;

	for (;;) {
		const char *end = strchrnul(p, '+');
		const char *slash = memchr(p, '/', (size_t)(end - p));
		const struct core_module *m;
		char names[256] = "";
		size_t used = 0;
		int d;

		m = rail_module(st, r, spec, p, (size_t)(slash - p));
		if (!m)
			return -EINVAL;
		for (d = 0; d < m->ndevs; d++) {
			struct mesh_dev_props props;

			if (m->desc->get_properties(m->mctx, d, &props))
				continue;
			if ((size_t)(end - slash - 1) == strlen(props.name) &&
			    !strncmp(props.name, slash + 1, strlen(props.name)))
				break;
			used += (size_t)snprintf(names + used,
				used < sizeof(names) ? sizeof(names) - used : 0,
				"%s%s", used ? ", " : "", props.name);
		}
		if (d == m->ndevs) {
			core_config_value_error(st->cfg, NULL, v,
				"entry %d \"%s\": module %s has no device "
				"'%.*s' (it has: %s)", r + 1, spec, m->name,
				(int)(end - slash - 1), slash + 1, names);
			return -EINVAL;
		}
		if (!*end)
			return 0;
		p = end + 1;
	}
}

int core_validate_rails(struct core_state *st)
{
	const struct core_value *v = CORE_VALUE(st, CP_RAILS);
	int err = 0, most = 0;

	/* rails entries name the module that did not load themselves */
	for (int r = 0; r < v->nitems; r++)
		if (rail_devices(st, r, v->items[r]))
			err = -EINVAL;
	if (v->nitems)
		return err;
	if (check_some_module_loads(st))
		return -EINVAL;
	for (int i = 0; i < st->nmodules; i++)
		if (st->modules[i].status == CORE_MODULE_READY &&
		    st->modules[i].ndevs > most)
			most = st->modules[i].ndevs;
	if ((uint64_t)most > st->max_rails) {
		core_config_value_error(st->cfg, NULL,
			CORE_VALUE(st, CP_MAX_RAILS),
			"a module has %d devices, so %d rails, more than "
			"max_rails", most, most);
		return -EINVAL;
	}
	return 0;
}
