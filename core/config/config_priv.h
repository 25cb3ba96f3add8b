/* SPDX-License-Identifier: MIT */
/*
 * What the config code's files share: the config itself, its message lists
 * and the helpers of more than one file.  Private to core/config*.c.
 */
#ifndef CORE_CONFIG_PRIV_H
#define CORE_CONFIG_PRIV_H

#include <stdarg.h>
#include <stdbool.h>

#include <libconfig.h>

#include "config.h"

#define ENV_PREFIX "NCCL_MESH_"
#define ENV_NAME_MAX 320

struct msg_list {
	char **msgs;
	bool *from_check;	/* added by core_config_check_unknown */
	int n;
};

/* Files in the order messages first named them, to sort by (file, line). */
#define MSG_FILES_MAX 16

struct str_list {
	const char **v;
	int n;
};

struct module_scope {
	char *name;
	const struct mesh_param *params;
	struct core_scope scope;
};

/* Lines of the config with its @include files expanded, from out_line on,
 * are `file`'s from `line` on. */
struct cfg_seg {
	int out_line;
	const char *file;
	int line;
};

/* A valid entry of the `hosts` list, matching this host or not. */
struct host_entry {
	config_setting_t *group;
	const char *match;
	bool matches;
};

struct core_config {
	config_t lc;
	bool parsed;		/* lc holds the file's settings */
	char *path;
	char *include_dir;
	struct cfg_seg *segs;		/* where libconfig's lines came from */
	int nsegs;
	char *hostname;
	struct host_entry *hosts;
	int nhosts;
	struct core_scope core;
	struct module_scope **mods;	/* pointers: scopes must not move */
	int nmods;
	struct msg_list errors, warnings;
	char *msg_files[MSG_FILES_MAX];
	int nmsg_files;
	bool checking;			/* inside check_unknown */
	char **pool;			/* strings values point at */
	int npool;
	bool nomem;
};

/* config_msg.c: messages, kept sorted by file and line as they come. */
void cfg_msg_addv(struct core_config *cfg, struct msg_list *list,
		  const char *fmt, va_list ap);
void cfg_error(struct core_config *cfg, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void cfg_warning(struct core_config *cfg, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void cfg_msg_drop_checked(struct msg_list *list);
void cfg_msg_free(struct msg_list *list);
const char *cfg_keep(struct core_config *cfg, const char *s);
bool cfg_str_list_add(struct core_config *cfg, struct str_list *l,
		      const char *s);

/* config.c */
void cfg_key_name(const char *module, const char *key, char *buf,
		  size_t len);
const char *cfg_setting_file(const struct core_config *cfg,
			     const config_setting_t *s);
int cfg_setting_line(const struct core_config *cfg,
		     const config_setting_t *s);
struct module_scope *cfg_find_module(const struct core_config *cfg,
				     const char *module);

/* config_read.c: which file, and reading it without blocking. */
const char *cfg_choose_file(const char *path, const char **named_by);
void cfg_read_file(struct core_config *cfg, const char *named_by);
void cfg_read_embedded(struct core_config *cfg);
void cfg_check_version(struct core_config *cfg);
int cfg_map_line(const struct core_config *cfg, int line, const char **file);

/* config_unknown.c */
bool cfg_in_table(const struct mesh_param *params, const char *name);

#endif
