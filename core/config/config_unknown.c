/* SPDX-License-Identifier: MIT */
/*
 * Keys in the file and NCCL_MESH_* variables that no parameter table
 * declares: warnings with the nearest valid name.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_priv.h"
#include "params.h"

extern char **environ;

/* ---- edit distance hints ---- */

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, diag, up, *row;
	size_t best;

	row = malloc((lb + 1) * sizeof(*row));
	if (!row)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= lb; j++) {
			up = row[j];
			best = diag + (tolower((unsigned char)a[i - 1]) !=
				       tolower((unsigned char)b[j - 1]));
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	best = row[lb];
	free(row);
	return best;
}

/*
 * The closest candidate, if it is close enough to be a likely typo: up to
 * a third of the name's length, at least 1 and at most 3 edits.  `skip`
 * characters of common prefix (NCCL_MESH_) do not count toward the length.
 */
static const char *nearest(const char *name, const struct str_list *cands,
			   size_t skip)
{
	size_t len = strlen(name), limit, d, best_d = SIZE_MAX;
	const char *best = NULL;
	int i;

	limit = (len > skip ? len - skip : 0) / 3;
	limit = limit < 1 ? 1 : limit > 3 ? 3 : limit;
	for (i = 0; i < cands->n; i++) {
		d = edit_distance(name, cands->v[i]);
		if (d <= limit && d < best_d) {
			best_d = d;
			best = cands->v[i];
		}
	}
	return best;
}

const char *core_nearest_name(const char *name, const char *const *cands,
			      int n)
{
	struct str_list l = { (const char **)cands, n };

	return nearest(name, &l, 0);
}

/* " (did you mean 'x'?)" or "". */
static void hint_text(const char *best, const char *quote, char *buf,
		      size_t len)
{
	if (best)
		snprintf(buf, len, " (did you mean %s%s%s?)", quote, best,
			 quote);
	else if (len)
		buf[0] = '\0';
}

/* ---- unknown keys and variables ---- */

static bool listed(const char *name, const char *const *modules, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (modules[i] && !strcmp(modules[i], name))
			return true;
	return false;
}

struct unknown_check {
	struct core_config *cfg;
	const char *const *modules;
	int nmodules;
	struct str_list top_names;	/* keys valid at top level */
	struct str_list host_names;	/* keys valid in a hosts entry */
};

/* " in hosts entry 'glob'" for messages about an entry, else "". */
static void where_text(const struct host_entry *host, char *buf, size_t len)
{
	if (host)
		snprintf(buf, len, " in hosts entry '%s'", host->match);
	else
		buf[0] = '\0';
}

static void check_module_keys(struct unknown_check *uc,
			      const struct module_scope *ms,
			      const config_setting_t *group,
			      const struct host_entry *host)
{
	struct str_list names = { 0 };
	const config_setting_t *s;
	char where[256], hint[128];
	int i, n = config_setting_length(group);

	for (i = 0; ms->params && ms->params[i].name; i++)
		if (!cfg_str_list_add(uc->cfg, &names, ms->params[i].name))
			goto out;
	for (i = 0; i < n; i++) {
		s = config_setting_get_elem(group, i);
		if (cfg_in_table(ms->params, config_setting_name(s)))
			continue;
		where_text(host, where, sizeof(where));
		hint_text(nearest(config_setting_name(s), &names, 0), "'",
			  hint, sizeof(hint));
		cfg_warning(uc->cfg, "%s:%d: unknown key '%s.%s'%s%s",
			    cfg_setting_file(uc->cfg, s),
			    cfg_setting_line(uc->cfg, s), ms->name,
			    config_setting_name(s), where, hint);
	}
out:
	free(names.v);
}

/* True when `s` is a module's section (checked or knowingly skipped). */
static bool check_module_section(struct unknown_check *uc,
				 const config_setting_t *s,
				 const struct host_entry *host)
{
	const char *name = config_setting_name(s);
	const struct module_scope *ms = cfg_find_module(uc->cfg, name);

	if (ms) {
		/* Not a group: core_config_module already said so. */
		if (config_setting_is_group(s))
			check_module_keys(uc, ms, s, host);
		return true;
	}
	return listed(name, uc->modules, uc->nmodules);
}

static void check_container(struct unknown_check *uc,
			    const config_setting_t *container,
			    const struct host_entry *host)
{
	const struct str_list *valid = host ? &uc->host_names : &uc->top_names;
	const config_setting_t *s;
	char where[256], hint[128];
	const char *name;
	int i, j, n = config_setting_length(container);

	for (i = 0; i < n; i++) {
		s = config_setting_get_elem(container, i);
		name = config_setting_name(s);
		if (check_module_section(uc, s, host))
			continue;
		for (j = 0; j < valid->n; j++)
			if (!strcmp(valid->v[j], name))
				break;
		if (j < valid->n)
			continue;
		where_text(host, where, sizeof(where));
		hint_text(nearest(name, valid, 0), "'", hint, sizeof(hint));
		cfg_warning(uc->cfg, "%s:%d: unknown key '%s'%s%s",
			    cfg_setting_file(uc->cfg, s),
			    cfg_setting_line(uc->cfg, s), name, where, hint);
	}
}

static bool build_key_names(struct unknown_check *uc)
{
	struct core_config *cfg = uc->cfg;
	bool ok = true;
	int i;

	for (i = 0; core_params[i].name; i++) {
		ok &= cfg_str_list_add(cfg, &uc->top_names, core_params[i].name);
		ok &= cfg_str_list_add(cfg, &uc->host_names, core_params[i].name);
	}
	ok &= cfg_str_list_add(cfg, &uc->top_names, "version");
	ok &= cfg_str_list_add(cfg, &uc->top_names, "hosts");
	ok &= cfg_str_list_add(cfg, &uc->host_names, "match");
	/* Module names are valid only as sections but are good hints. */
	for (i = 0; i < cfg->nmods; i++) {
		ok &= cfg_str_list_add(cfg, &uc->top_names, cfg->mods[i]->name);
		ok &= cfg_str_list_add(cfg, &uc->host_names, cfg->mods[i]->name);
	}
	for (i = 0; i < uc->nmodules; i++) {
		if (!uc->modules[i] || cfg_find_module(cfg, uc->modules[i]))
			continue;
		ok &= cfg_str_list_add(cfg, &uc->top_names, uc->modules[i]);
		ok &= cfg_str_list_add(cfg, &uc->host_names, uc->modules[i]);
	}
	return ok;
}

static void check_file(struct unknown_check *uc)
{
	struct core_config *cfg = uc->cfg;
	int i;

	if (!cfg->parsed || !build_key_names(uc))
		return;
	check_container(uc, config_root_setting(&cfg->lc), NULL);
	for (i = 0; i < cfg->nhosts; i++)
		check_container(uc, cfg->hosts[i].group, &cfg->hosts[i]);
}

/* ---- environment ---- */

struct env_names {
	struct str_list known;		/* every resolvable variable */
	struct str_list skipped;	/* prefixes of unresolved modules */
	struct str_list resolved;	/* prefixes of resolved modules */
	char **owned;
	int nowned;
};

static const char *env_own(struct core_config *cfg, struct env_names *en,
			   const char *module, const char *key)
{
	char name[ENV_NAME_MAX], **owned, *copy;

	core_env_name(module, key, name, sizeof(name));
	owned = realloc(en->owned, (en->nowned + 1) * sizeof(*owned));
	copy = owned ? strdup(name) : NULL;
	if (owned)
		en->owned = owned;
	if (!copy) {
		cfg->nomem = true;
		return NULL;
	}
	owned[en->nowned++] = copy;
	return copy;
}

static bool add_env_name(struct core_config *cfg, struct env_names *en,
			 struct str_list *to, const char *module,
			 const char *key)
{
	const char *name = env_own(cfg, en, module, key);

	return name && cfg_str_list_add(cfg, to, name);
}

static bool build_env_names(struct unknown_check *uc, struct env_names *en)
{
	struct core_config *cfg = uc->cfg;
	const struct module_scope *ms;
	bool ok = true;
	int i, j;

	for (i = 0; core_params[i].name; i++)
		ok &= add_env_name(cfg, en, &en->known, NULL,
				   core_params[i].name);
	for (i = 0; i < cfg->nmods; i++) {
		ms = cfg->mods[i];
		for (j = 0; ms->params && ms->params[j].name; j++)
			ok &= add_env_name(cfg, en, &en->known, ms->name,
					   ms->params[j].name);
		ok &= add_env_name(cfg, en, &en->resolved, ms->name, "");
	}
	for (i = 0; i < uc->nmodules; i++) {
		if (uc->modules[i] && !cfg_find_module(cfg, uc->modules[i]))
			ok &= add_env_name(cfg, en, &en->skipped,
					   uc->modules[i], "");
	}
	return ok;
}

static size_t longest_prefix(const char *name, const struct str_list *l)
{
	size_t best = 0, n;
	int i;

	for (i = 0; i < l->n; i++) {
		n = strlen(l->v[i]);
		if (n > best && !strncmp(name, l->v[i], n))
			best = n;
	}
	return best;
}

/* Variables the core reads itself, or that tests own. */
static bool env_special(const char *name)
{
	return !strcmp(name, "NCCL_MESH_CONF") ||
	       !strcmp(name, "NCCL_MESH_HOSTNAME") ||
	       !strcmp(name, "NCCL_MESH_LOG") ||
	       !strncmp(name, "NCCL_MESH_TEST_", strlen("NCCL_MESH_TEST_"));
}

static bool env_known(const struct env_names *en, const char *name)
{
	int i;

	for (i = 0; i < en->known.n; i++)
		if (!strcmp(en->known.v[i], name))
			return true;
	/* A module that exists but was not resolved: nothing to check. */
	return longest_prefix(name, &en->skipped) >
	       longest_prefix(name, &en->resolved);
}

static int compare_strings(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* NCCL_MESH_* names in the environment, sorted for stable output. */
static char **env_mesh_names(struct core_config *cfg, int *count)
{
	char **names = NULL, **grown;
	const char *eq;
	int n = 0, i;

	for (i = 0; environ && environ[i]; i++) {
		if (strncmp(environ[i], ENV_PREFIX, strlen(ENV_PREFIX)))
			continue;
		eq = strchrnul(environ[i], '=');
		grown = realloc(names, (n + 1) * sizeof(*names));
		if (!grown)
			break;
		names = grown;
		names[n] = strndup(environ[i], eq - environ[i]);
		if (!names[n])
			break;
		n++;
	}
	if (environ && environ[i])
		cfg->nomem = true;
	if (n)
		qsort(names, n, sizeof(*names), compare_strings);
	*count = n;
	return names;
}

static void check_env(struct unknown_check *uc)
{
	struct env_names en = { 0 };
	char hint[ENV_NAME_MAX + 32];
	char **names;
	int i, n = 0;

	names = build_env_names(uc, &en) ? env_mesh_names(uc->cfg, &n) : NULL;
	for (i = 0; i < n; i++) {
		if (env_special(names[i]) || env_known(&en, names[i]))
			continue;
		hint_text(nearest(names[i], &en.known, strlen(ENV_PREFIX)), "",
			  hint, sizeof(hint));
		cfg_warning(uc->cfg, "unknown environment variable %s%s",
			    names[i], hint);
	}
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	for (i = 0; i < en.nowned; i++)
		free(en.owned[i]);
	free(en.owned);
	free(en.known.v);
	free(en.skipped.v);
	free(en.resolved.v);
}

void core_config_check_unknown(struct core_config *cfg,
			       const char *const *modules, int nmodules)
{
	struct unknown_check uc = {
		.cfg = cfg,
		.modules = modules,
		.nmodules = modules ? nmodules : 0,
	};

	/* Checking again replaces the previous check's warnings. */
	cfg_msg_drop_checked(&cfg->warnings);
	cfg->checking = true;
	check_file(&uc);
	check_env(&uc);
	cfg->checking = false;
	free(uc.top_names.v);
	free(uc.host_names.v);
}
