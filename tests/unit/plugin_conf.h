/* SPDX-License-Identifier: MIT */
/*
 * For tests that load the plugin itself: its config written to a new
 * temporary folder and named by NCCL_MESH_CONF, removed at the end.
 */
#ifndef MESH_TEST_PLUGIN_CONF_H
#define MESH_TEST_PLUGIN_CONF_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct plugin_conf {
	char dir[64];
	char path[96];
};

/* 0, or -1 when the folder or the file cannot be made. */
static inline int plugin_conf_write(struct plugin_conf *pc, const char *name,
				    const char *text)
{
	FILE *f;

	snprintf(pc->dir, sizeof(pc->dir), "/tmp/mesh-%s-XXXXXX", name);
	if (!mkdtemp(pc->dir))
		return -1;
	snprintf(pc->path, sizeof(pc->path), "%s/nccl-mesh.conf", pc->dir);
	f = fopen(pc->path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	fclose(f);
	setenv("NCCL_MESH_CONF", pc->path, 1);
	return 0;
}

static inline void plugin_conf_remove(const struct plugin_conf *pc)
{
	unlink(pc->path);
	rmdir(pc->dir);
}

#endif
