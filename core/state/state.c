/* SPDX-License-Identifier: MIT */
/*
 * The process state (state.h): the config read and checked, the modules
 * loaded, the rails built.  The plugin's init and meshinfo build it with
 * this same code.
 */
#include "state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"

static void log_new_messages(const struct core_config *cfg, int *errors_seen,
			     int *warnings_seen)
{
	const char *const *msgs;
	int n = core_config_errors(cfg, &msgs);

	for (; *errors_seen < n; (*errors_seen)++)
		CORE_WARN("config error: %s", msgs[*errors_seen]);
	n = core_config_warnings(cfg, &msgs);
	for (; *warnings_seen < n; (*warnings_seen)++)
		CORE_WARN("config: %s", msgs[*warnings_seen]);
}

/* Names of the enabled and the inspected modules, for the unknown-key
 * check: their sections are checked against their own tables. */
static const char **module_names(const struct core_state *st, int *n)
{
	const char **names = calloc((size_t)(st->nmodules + st->ninspected) + 1,
				    sizeof(*names));

	*n = 0;
	for (int i = 0; names && i < st->nmodules; i++)
		names[(*n)++] = st->modules[i].name;
	for (int i = 0; names && i < st->ninspected; i++)
		names[(*n)++] = st->inspected[i].name;
	return names;
}

static bool enabled(const struct core_state *st, const char *name)
{
	for (int i = 0; i < st->nmodules; i++)
		if (!strcmp(st->modules[i].name, name))
			return true;
	return false;
}

/* Sections of installed modules that are not enabled: checked too. */
static int inspect_sections(struct core_state *st)
{
	const char **names;
	int n = core_config_sections(st->cfg, &names);

	st->inspected = calloc((size_t)n + 1, sizeof(*st->inspected));
	if (!st->inspected) {
		free(names);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		if (enabled(st, names[i]))
			continue;
		if (!core_loader_inspect(st->cfg, names[i],
					 &st->inspected[st->ninspected]))
			st->ninspected++;
	}
	free(names);
	return 0;
}

struct core_state *core_state_build(const char *conf_path)
{
	struct core_state *st = calloc(1, sizeof(*st));
	int errors_seen = 0, warnings_seen = 0, nnames, rails_ok;
	const char **names;

	if (!st || core_config_open(conf_path, &st->cfg)) {
		free(st);
		return NULL;
	}
	/* Every value is checked here, by the same code for NCCL's init and
	 * meshinfo; each failure is a config error with its location. */
	core_validate_config(st);
	rails_ok = !st->rails_bad;
	if (!st->advertise.ports ||
	    core_loader_load(st->cfg, &st->modules, &st->nmodules) ||
	    inspect_sections(st)) {
		core_state_free(st);
		return NULL;
	}
	names = module_names(st, &nnames);
	if (names)
		core_config_check_unknown(st->cfg, names, nnames);
	free(names);
	/* A rails entry that failed its syntax check is not looked up. */
	if (rails_ok && core_validate_rails(st))
		rails_ok = 0;
	log_new_messages(st->cfg, &errors_seen, &warnings_seen);
	st->usable = core_config_errors(st->cfg, NULL) == 0;
	if (!rails_ok || core_fabric_build(st->cfg, st->modules, st->nmodules,
					   &st->rails, &st->nrails))
		st->usable = 0;
	else if (!st->nrails) {
		/* After config errors this is their consequence, not news. */
		if (st->usable)
			CORE_WARN("no usable device: no module in 'modules' "
				  "loaded with devices (run meshinfo for the "
				  "reasons)");
		st->usable = 0;
	}
	return st;
}

void core_state_free(struct core_state *st)
{
	if (!st)
		return;
	free(st->rails);
	free(st->advertise.ports);
	core_loader_unload(st->modules, st->nmodules);
	core_loader_unload(st->inspected, st->ninspected);
	core_config_free(st->cfg);
	free(st);
}
