/* SPDX-License-Identifier: MIT */
/*
 * Configuration resolver: resolves parameter tables layer by layer
 * (default < file < matching host entries < environment), remembering
 * where every value came from.  Reading the file and mapping its lines is
 * config_read.c, names and messages config_msg.c, unknown keys
 * config_unknown.c; only config_unknown.c calls in here (cfg_find_module),
 * so no two of these files call each other.  Errors and
 * warnings are collected as text; printing them is the caller's call.
 */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_priv.h"
#include "params.h"
#include "param_parse.h"

#define EMBEDDED_NAME "<embedded default>"

/* ---- values ---- */

static void value_take(struct core_value *v, struct param_parsed *parsed)
{
	free(v->text);
	if (v->items) {
		char **items = (char **)v->items;
		int i;

		for (i = 0; i < v->nitems; i++)
			free(items[i]);
		free(items);
	}
	v->text = parsed->text;
	v->num = parsed->num;
	v->items = (const char *const *)parsed->items;
	v->nitems = parsed->nitems;
	memset(parsed, 0, sizeof(*parsed));
}

static void value_free(struct core_value *v)
{
	struct param_parsed none = { 0 };

	value_take(v, &none);
}

static void scope_free(struct core_scope *scope)
{
	int i;

	for (i = 0; i < scope->nvalues; i++)
		value_free(&scope->values[i]);
	free(scope->values);
	scope->values = NULL;
	scope->nvalues = 0;
}

static void set_default(struct core_config *cfg, const char *module,
			struct core_value *v)
{
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX];
	int rc;

	v->source = CORE_SRC_DEFAULT;
	rc = param_parse_default(v->param, &parsed, why, sizeof(why));
	if (rc == -ENOMEM) {
		cfg->nomem = true;
		return;
	}
	if (rc) {
		cfg_error(cfg, "%s%s: parameter '%s' has an invalid default: %s",
			  module ? "module " : "core",
			  module ? module : "", v->param->name, why);
		return;
	}
	value_take(v, &parsed);
}

/* A value from the file: top level (host NULL) or a matching host entry. */
static void apply_setting(struct core_config *cfg, const char *module,
			  struct core_value *v, const config_setting_t *group,
			  const struct host_entry *host)
{
	const config_setting_t *s;
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX], key[256];
	int rc;

	s = group ? config_setting_get_member(group, v->param->name) : NULL;
	if (!s)
		return;
	rc = param_parse_setting(v->param, s, &parsed, why, sizeof(why));
	if (rc == -ENOMEM) {
		cfg->nomem = true;
		return;
	}
	if (rc) {
		cfg_key_name(module, v->param->name, key, sizeof(key));
		cfg_error(cfg, "%s:%d: %s: %s", cfg_setting_file(cfg, s),
			  cfg_setting_line(cfg, s), key, why);
		return;
	}
	value_take(v, &parsed);
	v->source = host ? CORE_SRC_HOST : CORE_SRC_FILE;
	v->file = cfg_setting_file(cfg, s);
	v->line = cfg_setting_line(cfg, s);
	/* The header has no field for the glob; source text needs it. */
	v->env = host ? host->match : NULL;
}

static void apply_env(struct core_config *cfg, const char *module,
		      struct core_value *v)
{
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX], name[ENV_NAME_MAX];
	const char *text;
	int rc;

	core_env_name(module, v->param->name, name, sizeof(name));
	text = getenv(name);
	if (!text)
		return;
	rc = param_parse_text(v->param, text, &parsed, why, sizeof(why));
	if (rc == -ENOMEM) {
		cfg->nomem = true;
		return;
	}
	if (rc) {
		cfg_error(cfg, "environment %s: %s", name, why);
		return;
	}
	value_take(v, &parsed);
	v->source = CORE_SRC_ENV;
	v->file = NULL;
	v->line = 0;
	v->env = cfg_keep(cfg, name);
}

/* The group holding a scope's keys inside `container`, if any. */
static const config_setting_t *scope_group(const config_setting_t *container,
					   const char *module)
{
	const config_setting_t *s;

	if (!module)
		return container;
	s = config_setting_get_member(container, module);
	return s && config_setting_is_group(s) ? s : NULL;
}

/*
 * A hosts entry for other hosts sets nothing here, but one file serves
 * the whole cluster: a value that would fail there fails here too.
 */
static void check_other_host(struct core_config *cfg, const char *module,
			     const struct mesh_param *p,
			     const config_setting_t *group)
{
	const config_setting_t *s;
	struct param_parsed parsed;
	char why[PARAM_WHY_MAX], key[256];
	int rc;

	s = group ? config_setting_get_member(group, p->name) : NULL;
	if (!s)
		return;
	rc = param_parse_setting(p, s, &parsed, why, sizeof(why));
	if (rc == -ENOMEM)
		cfg->nomem = true;
	if (rc == -EINVAL) {
		cfg_key_name(module, p->name, key, sizeof(key));
		cfg_error(cfg, "%s:%d: %s: %s", cfg_setting_file(cfg, s),
			  cfg_setting_line(cfg, s), key, why);
	}
	if (!rc)
		param_parsed_free(&parsed);
}

static void resolve_value(struct core_config *cfg, const char *module,
			  struct core_value *v)
{
	const config_setting_t *root;
	int i;

	set_default(cfg, module, v);
	if (cfg->parsed) {
		root = config_root_setting(&cfg->lc);
		apply_setting(cfg, module, v, scope_group(root, module), NULL);
		for (i = 0; i < cfg->nhosts; i++) {
			const config_setting_t *group =
				scope_group(cfg->hosts[i].group, module);

			if (cfg->hosts[i].matches)
				apply_setting(cfg, module, v, group,
					      &cfg->hosts[i]);
			else
				check_other_host(cfg, module, v->param, group);
		}
	}
	apply_env(cfg, module, v);
}

/* `tcp-xdc = 5;` where a group is due would silently hide every key. */
static void check_module_is_group(struct core_config *cfg,
				  const config_setting_t *container,
				  const char *module)
{
	const config_setting_t *s;

	s = config_setting_get_member(container, module);
	if (s && !config_setting_is_group(s))
		cfg_error(cfg, "%s:%d: %s: expected a group of the module's keys "
			  "('%s: { key = value; };')", cfg_setting_file(cfg, s),
			  cfg_setting_line(cfg, s), module, module);
}

static int count_params(struct core_config *cfg, const char *module,
			const struct mesh_param *params)
{
	int n;

	for (n = 0; params && params[n].name; n++) {
		if (!param_type_valid(params[n].type))
			cfg_error(cfg, "%s%s: parameter '%s' has unknown "
				  "type %d", module ? "module " : "core",
				  module ? module : "", params[n].name,
				  (int)params[n].type);
	}
	return n;
}

static int resolve_scope(struct core_config *cfg, struct core_scope *scope,
			 const struct mesh_param *params)
{
	int i, n = count_params(cfg, scope->module, params);

	if (cfg->parsed && scope->module) {
		check_module_is_group(cfg, config_root_setting(&cfg->lc),
				      scope->module);
		for (i = 0; i < cfg->nhosts; i++)
			check_module_is_group(cfg, cfg->hosts[i].group,
					      scope->module);
	}
	scope->values = calloc(n ? n : 1, sizeof(*scope->values));
	if (!scope->values)
		return -ENOMEM;
	scope->nvalues = n;
	for (i = 0; i < n; i++) {
		scope->values[i].param = &params[i];
		if (param_type_valid(params[i].type))
			resolve_value(cfg, scope->module, &scope->values[i]);
	}
	return cfg->nomem ? -ENOMEM : 0;
}

/* ---- hosts ---- */

static bool host_matches(const char *glob, const char *hostname)
{
	const char *dot = strchr(hostname, '.');
	char shortname[HOST_NAME_MAX + 1];

	if (!fnmatch(glob, hostname, 0))
		return true;
	if (!dot || (size_t)(dot - hostname) >= sizeof(shortname))
		return false;
	/* "gpu7" in a file still matches "gpu7.cluster.example". */
	snprintf(shortname, sizeof(shortname), "%.*s", (int)(dot - hostname),
		 hostname);
	return !fnmatch(glob, shortname, 0);
}

static int add_host(struct core_config *cfg, config_setting_t *entry,
		    int index)
{
	const config_setting_t *match;
	struct host_entry *hosts;

	match = config_setting_is_group(entry) ?
		config_setting_get_member(entry, "match") : NULL;
	if (!match || config_setting_type(match) != CONFIG_TYPE_STRING) {
		cfg_error(cfg, "%s:%d: hosts entry %d: expected a group with "
			  "match = \"<hostname glob>\"", cfg_setting_file(cfg, entry),
			  cfg_setting_line(cfg, entry), index + 1);
		return 0;
	}
	hosts = realloc(cfg->hosts, (cfg->nhosts + 1) * sizeof(*hosts));
	if (!hosts)
		return -ENOMEM;
	cfg->hosts = hosts;
	hosts[cfg->nhosts].group = entry;
	hosts[cfg->nhosts].match = config_setting_get_string(match);
	hosts[cfg->nhosts].matches =
		host_matches(hosts[cfg->nhosts].match, cfg->hostname);
	cfg->nhosts++;
	return 0;
}

static int read_hosts(struct core_config *cfg)
{
	config_setting_t *hosts;
	int i, n, rc;

	hosts = config_setting_get_member(config_root_setting(&cfg->lc),
					  "hosts");
	if (!hosts)
		return 0;
	/* `hosts = [];` parses as an empty array; allow it. */
	if (!config_setting_is_list(hosts) &&
	    !(config_setting_is_array(hosts) &&
	      !config_setting_length(hosts))) {
		cfg_error(cfg, "%s:%d: hosts: expected a list of groups "
			  "( { match = \"<glob>\"; ... }, ... )",
			  cfg_setting_file(cfg, hosts),
			  cfg_setting_line(cfg, hosts));
		return 0;
	}
	n = config_setting_length(hosts);
	for (i = 0; i < n; i++) {
		rc = add_host(cfg, config_setting_get_elem(hosts, i), i);
		if (rc)
			return rc;
	}
	return 0;
}

static int find_hostname(struct core_config *cfg)
{
	const char *env = getenv("NCCL_MESH_HOSTNAME");
	char name[HOST_NAME_MAX + 1];

	if (env && *env) {
		cfg->hostname = strdup(env);
	} else {
		if (gethostname(name, sizeof(name)))
			name[0] = '\0';
		name[sizeof(name) - 1] = '\0';
		cfg->hostname = strdup(name);
	}
	return cfg->hostname ? 0 : -ENOMEM;
}

/* ---- public ---- */

int core_config_open(const char *path, struct core_config **out)
{
	struct core_config *cfg;
	const char *file, *named_by;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	config_init(&cfg->lc);
	file = cfg_choose_file(path, &named_by);
	cfg->path = strdup(file ? file : EMBEDDED_NAME);
	rc = cfg->path ? find_hostname(cfg) : -ENOMEM;
	if (rc)
		goto fail;
	if (file)
		cfg_read_file(cfg, named_by);
	else
		cfg_read_embedded(cfg);
	if (cfg->parsed) {
		cfg_check_version(cfg);
		rc = read_hosts(cfg);
		if (rc)
			goto fail;
	}
	rc = resolve_scope(cfg, &cfg->core, core_params);
	if (rc || cfg->nomem)
		goto fail;
	*out = cfg;
	return 0;
fail:
	core_config_free(cfg);
	return -ENOMEM;
}

void core_config_free(struct core_config *cfg)
{
	int i;

	if (!cfg)
		return;
	scope_free(&cfg->core);
	for (i = 0; i < cfg->nmods; i++) {
		scope_free(&cfg->mods[i]->scope);
		free(cfg->mods[i]->name);
		free(cfg->mods[i]);
	}
	free(cfg->mods);
	for (i = 0; i < cfg->npool; i++)
		free(cfg->pool[i]);
	free(cfg->pool);
	free(cfg->hosts);
	cfg_msg_free(&cfg->errors);
	cfg_msg_free(&cfg->warnings);
	for (i = 0; i < cfg->nmsg_files; i++)
		free(cfg->msg_files[i]);
	config_destroy(&cfg->lc);
	free(cfg->segs);
	free(cfg->include_dir);
	free(cfg->hostname);
	free(cfg->path);
	free(cfg);
}

const char *core_config_path(const struct core_config *cfg)
{
	return cfg->path;
}

const config_t *core_config_parsed(const struct core_config *cfg)
{
	return cfg->parsed ? &cfg->lc : NULL;
}

const char *core_config_hostname(const struct core_config *cfg)
{
	return cfg->hostname;
}

const struct core_scope *core_config_core(const struct core_config *cfg)
{
	return &cfg->core;
}

struct module_scope *cfg_find_module(const struct core_config *cfg,
					const char *module)
{
	int i;

	for (i = 0; i < cfg->nmods; i++)
		if (!strcmp(cfg->mods[i]->name, module))
			return cfg->mods[i];
	return NULL;
}

static void module_scope_free(struct module_scope *ms)
{
	scope_free(&ms->scope);
	free(ms->name);
	free(ms);
}

const struct core_scope *core_config_module(struct core_config *cfg,
					    const char *module,
					    const struct mesh_param *params)
{
	struct module_scope *ms, **mods;

	if (!cfg || !module)
		return NULL;
	ms = cfg_find_module(cfg, module);
	if (ms)
		return &ms->scope;
	mods = realloc(cfg->mods, (cfg->nmods + 1) * sizeof(*mods));
	if (!mods)
		return NULL;
	cfg->mods = mods;
	ms = calloc(1, sizeof(*ms));
	if (!ms)
		return NULL;
	ms->name = strdup(module);
	ms->params = params;
	ms->scope.module = ms->name;
	if (!ms->name || resolve_scope(cfg, &ms->scope, params)) {
		module_scope_free(ms);
		return NULL;
	}
	mods[cfg->nmods++] = ms;
	return &ms->scope;
}

const struct core_value *core_scope_get(const struct core_scope *scope,
					const char *name)
{
	int i;

	if (!scope || !name)
		return NULL;
	for (i = 0; i < scope->nvalues; i++)
		if (!strcmp(scope->values[i].param->name, name))
			return &scope->values[i];
	return NULL;
}

int core_config_errors(const struct core_config *cfg,
		       const char *const **msgs)
{
	if (msgs)
		*msgs = (const char *const *)cfg->errors.msgs;
	return cfg->errors.n;
}

int core_config_warnings(const struct core_config *cfg,
			 const char *const **msgs)
{
	if (msgs)
		*msgs = (const char *const *)cfg->warnings.msgs;
	return cfg->warnings.n;
}

const char *core_value_source(const struct core_value *v, char *buf,
			      unsigned len)
{
	if (!len)
		return buf;
	switch (v ? v->source : CORE_SRC_DEFAULT) {
	case CORE_SRC_DEFAULT:
		snprintf(buf, len, "default");
		break;
	case CORE_SRC_FILE:
		snprintf(buf, len, "%s:%d", v->file, v->line);
		break;
	case CORE_SRC_HOST:
		snprintf(buf, len, "host '%s' at %s:%d", v->env, v->file,
			 v->line);
		break;
	case CORE_SRC_ENV:
		snprintf(buf, len, "env %s", v->env);
		break;
	}
	return buf;
}

static bool str_listed(const struct str_list *l, const char *s)
{
	for (int i = 0; i < l->n; i++)
		if (!strcmp(l->v[i], s))
			return true;
	return false;
}

static void add_sections(struct core_config *cfg, struct str_list *names,
			 const config_setting_t *container)
{
	int n = container ? config_setting_length(container) : 0;

	for (int i = 0; i < n; i++) {
		const config_setting_t *s = config_setting_get_elem(container, i);
		const char *name = config_setting_name(s);

		/* Not only groups: `relay = 5;` where module relay is
		 * installed must be the error a module's scalar is. */
		if (name && strcmp(name, "version") && strcmp(name, "hosts") &&
		    !cfg_in_table(core_params, name) && !str_listed(names, name))
			cfg_str_list_add(cfg, names, name);
	}
}

int core_config_sections(struct core_config *cfg, const char ***names)
{
	struct str_list l = { 0 };

	*names = NULL;
	if (!cfg->parsed)
		return 0;
	add_sections(cfg, &l, config_root_setting(&cfg->lc));
	for (int i = 0; i < cfg->nhosts; i++)
		add_sections(cfg, &l, cfg->hosts[i].group);
	*names = l.v;
	return l.n;
}
