/* SPDX-License-Identifier: MIT */
/*
 * Configuration: one libconfig file (NCCL_MESH_CONF, else
 * /etc/nccl-mesh.conf, else the embedded default), per-host sections
 * matched by hostname, and NCCL_MESH_* environment overrides.
 *
 * Precedence: default < file top level < matching host sections (in file
 * order) < environment.  Every resolved value keeps its source.  Errors are
 * collected (file:line: what is wrong, what is expected) for the caller to
 * print; a config with errors must make init fail.
 */
#ifndef CORE_CONFIG_H
#define CORE_CONFIG_H

#include <stdarg.h>
#include <stdbool.h>

#include <libconfig.h>
#include <nccl-mesh/module.h>

enum core_source {
	CORE_SRC_DEFAULT,
	CORE_SRC_FILE,		/* top level of the file */
	CORE_SRC_HOST,		/* a hosts entry that matched */
	CORE_SRC_ENV,
};

struct core_value {
	const struct mesh_param *param;
	char *text;		/* canonical text: "8", "true", "a,b" */
	long long num;		/* INT, BOOL (0/1), SIZE (bytes) */
	const char *const *items; /* LIST, NULL-terminated */
	int nitems;
	enum core_source source;
	const char *file;	/* FILE, HOST */
	int line;		/* FILE, HOST */
	const char *env;	/* ENV: the variable's name; HOST: the glob */
};

/* The resolved parameters of the core (module == NULL) or one module. */
struct core_scope {
	const char *module;
	int nvalues;
	struct core_value *values;	/* in table order */
};

struct core_config;

/*
 * Reads the config file (path NULL: NCCL_MESH_CONF, else
 * /etc/nccl-mesh.conf, else embedded default) and resolves the core's own
 * parameters.  Returns 0 or -ENOMEM; parse and value errors are kept in
 * the config (see core_config_errors), not returned.
 */
int core_config_open(const char *path, struct core_config **out);
void core_config_free(struct core_config *cfg);

/* Where the text came from: a path, or "<embedded default>". */
const char *core_config_path(const struct core_config *cfg);
const char *core_config_hostname(const struct core_config *cfg);
/* The parsed file (or embedded default), NULL when it did not parse. */
const config_t *core_config_parsed(const struct core_config *cfg);

const struct core_scope *core_config_core(const struct core_config *cfg);
/*
 * Resolves a module's parameter table.  A table entry whose default does
 * not parse is reported as an error naming the module.  The scope lives as
 * long as the config.
 */
const struct core_scope *core_config_module(struct core_config *cfg,
					    const char *module,
					    const struct mesh_param *params);
const struct core_value *core_scope_get(const struct core_scope *scope,
					const char *name);

/*
 * Warn about keys in the file and NCCL_MESH_* variables that no resolved
 * scope declares (call after every module is resolved), each with a
 * nearest-name hint.  `modules` lists module names known to exist, so a
 * section for a module that is not loaded is not called unknown.
 */
void core_config_check_unknown(struct core_config *cfg,
			       const char *const *modules, int nmodules);

/*
 * An error (or warning) about value v of `module` (NULL: the core), where
 * it came from: "file:line: tcp-xdc.min_chunk: <what>", "environment
 * NCCL_MESH_X: key: <what>" or "key (default \"v\"): <what>".
 */
void core_config_value_error(struct core_config *cfg, const char *module,
			     const struct core_value *v, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void core_config_value_errorv(struct core_config *cfg, const char *module,
			      const struct core_value *v, const char *fmt,
			      va_list ap) __attribute__((format(printf, 4, 0)));
void core_config_value_warning(struct core_config *cfg, const char *module,
			       const struct core_value *v, const char *fmt,
			       ...) __attribute__((format(printf, 4, 5)));

/* The candidate a likely typo of `name` meant, or NULL. */
const char *core_nearest_name(const char *name, const char *const *cands,
			      int n);

/*
 * Names of the settings in the file, at top level and in every hosts
 * entry, that are not core keys: the sections of modules, enabled or not
 * (a module's name on a scalar is an error of that module).  The
 * array is malloc'd (free it), the names live as long as the config.
 */
int core_config_sections(struct core_config *cfg, const char ***names);

/* Collected messages, sorted by file and line (messages without a
 * location last), in the order found within one line. */
int core_config_errors(const struct core_config *cfg,
		       const char *const **msgs);
int core_config_warnings(const struct core_config *cfg,
			 const char *const **msgs);

/* "default", "/etc/nccl-mesh.conf:12", "host 'dc1-*' at /etc/...:30",
 * "env NCCL_MESH_DC" */
const char *core_value_source(const struct core_value *v, char *buf,
			      unsigned len);
/* NCCL_MESH_<KEY> or NCCL_MESH_<MODULE>_<KEY>. */
void core_env_name(const char *module, const char *key, char *buf,
		   unsigned len);

/* A parameter type as docs/config.md names it: "integer", "port range". */
const char *core_param_type_name(enum mesh_param_type type);

/* The embedded default config text (conf/nccl-mesh.conf). */
extern const char core_default_config[];

/* Length of a message's leading "file:line: " (0 when it has none), with
 * the file name's length and the line. */
size_t core_msg_location(const char *msg, size_t *file_len, long *line);

#endif
