/* SPDX-License-Identifier: MIT */
#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "params.h"

const char *core_module_status_name(enum core_module_status s)
{
	switch (s) {
	case CORE_MODULE_READY:
		return "ready";
	case CORE_MODULE_NODEV:
		return "no devices";
	default:
		return "failed";
	}
}

static void host_log(const struct mesh_host *host, enum mesh_log_level level,
		     const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	core_vlog(host->module, level, file, line, fmt, ap);
	va_end(ap);
}

static const struct core_value *host_value(const struct mesh_host *host,
					   const char *name)
{
	const struct core_module *mod =
		(const void *)((const char *)host -
			       offsetof(struct core_module, host));
	const struct core_value *v = core_scope_get(mod->params, name);

	if (!v)
		core_log(host->module, MESH_LOG_WARN, __FILE__, __LINE__,
			 "asked for parameter '%s', which its table does not "
			 "declare", name);
	return v;
}

static const char *host_param_str(const struct mesh_host *host,
				  const char *name)
{
	const struct core_value *v = host_value(host, name);

	return v ? v->text : "";
}

static long long host_param_int(const struct mesh_host *host,
				const char *name)
{
	const struct core_value *v = host_value(host, name);

	return v ? v->num : 0;
}

static int host_param_list(const struct mesh_host *host, const char *name,
			   const char *const **items)
{
	static const char *const empty[] = { NULL };
	const struct core_value *v = host_value(host, name);

	*items = v && v->items ? v->items : empty;
	return v ? v->nitems : 0;
}

static int add_dir(char ***dirs, int *n, const char *dir)
{
	char **grown;

	if (!*dir)
		return 0;
	for (int i = 0; i < *n; i++)
		if (!strcmp((*dirs)[i], dir))
			return 0;
	grown = realloc(*dirs, (size_t)(*n + 2) * sizeof(**dirs));
	if (!grown)
		return -ENOMEM;
	*dirs = grown;
	grown[*n] = strdup(dir);
	if (!grown[*n])
		return -ENOMEM;
	grown[++*n] = NULL;
	return 0;
}

static int add_path_list(char ***dirs, int *n, const char *list)
{
	char *copy = strdup(list), *save = NULL;
	int err = copy ? 0 : -ENOMEM;

	for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && !err;
	     d = strtok_r(NULL, ":", &save))
		err = add_dir(dirs, n, d);
	free(copy);
	return err;
}

/* nccl-mesh/ next to the library (or program) that holds this code. */
static int add_beside_core(char ***dirs, int *n)
{
	Dl_info info;
	char path[PATH_MAX], dir[PATH_MAX + 16];

	if (!dladdr((void *)core_loader_search_path, &info) || !info.dli_fname)
		return 0;
	if (!realpath(info.dli_fname, path))
		return 0;
	snprintf(dir, sizeof(dir), "%s/nccl-mesh", dirname(path));
	return add_dir(dirs, n, dir);
}

int core_loader_search_path(const struct core_config *cfg, char ***dirs_out)
{
	const struct core_scope *core = core_config_core(cfg);
	char **dirs = NULL;
	int n = 0, err;

	err = add_path_list(&dirs, &n, core->values[CP_MODULE_PATH].text);
	if (!err)
		err = add_beside_core(&dirs, &n);
	if (!err)
		err = add_dir(&dirs, &n, MESH_MODULE_DIR);
	if (err) {
		for (int i = 0; i < n; i++)
			free(dirs[i]);
		free(dirs);
		return err;
	}
	*dirs_out = dirs;
	return n;
}

static void fail(struct core_module *mod, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fail(struct core_module *mod, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(mod->reason, sizeof(mod->reason), fmt, ap);
	va_end(ap);
	mod->status = CORE_MODULE_FAILED;
	CORE_WARN("module %s: %s", mod->name, mod->reason);
}

static int find_file(struct core_module *mod, char **dirs, int ndirs)
{
	char searched[1024] = "";
	size_t len = 0;

	for (int i = 0; i < ndirs; i++) {
		snprintf(mod->path, sizeof(mod->path), "%s/mesh-%s.so", dirs[i],
			 mod->name);
		if (!access(mod->path, F_OK))
			return 0;
		len += (size_t)snprintf(searched + len,
					len < sizeof(searched) ?
						sizeof(searched) - len : 0,
					"%s%s", i ? ", " : "", dirs[i]);
	}
	mod->path[0] = '\0';
	fail(mod, "not found (searched: %s)", ndirs ? searched : "nothing");
	return -ENOENT;
}

static int open_descriptor(struct core_module *mod)
{
	const struct mesh_module *d;

	mod->dl = dlopen(mod->path, RTLD_NOW | RTLD_LOCAL);
	if (!mod->dl) {
		fail(mod, "cannot load %s: %s", mod->path, dlerror());
		return -ENOEXEC;
	}
	d = dlsym(mod->dl, MESH_MODULE_SYMBOL);
	if (!d) {
		fail(mod, "%s has no symbol " MESH_MODULE_SYMBOL
			  " (not a nccl-mesh module?)", mod->path);
		return -ENOEXEC;
	}
	if (d->abi_version >> 16 != MESH_MODULE_ABI_MAJOR) {
		fail(mod, "%s was built for module ABI %u.%u, this core "
			  "supports %d.x", mod->path, d->abi_version >> 16,
		     d->abi_version & 0xffff, MESH_MODULE_ABI_MAJOR);
		return -ENOEXEC;
	}
	if ((d->abi_version & 0xffff) > MESH_MODULE_ABI_MINOR) {
		fail(mod, "%s was built for module ABI %u.%u, newer than this "
			  "core's %d.%d", mod->path, d->abi_version >> 16,
		     d->abi_version & 0xffff, MESH_MODULE_ABI_MAJOR,
		     MESH_MODULE_ABI_MINOR);
		return -ENOEXEC;
	}
	if (d->size < MESH_MODULE_SIZE_1_0 ||
	    ((d->abi_version & 0xffff) >= 2 &&
	     d->size < sizeof(struct mesh_module))) {
		fail(mod, "%s: descriptor of %u bytes is too short for module "
			  "ABI %u.%u", mod->path, d->size, d->abi_version >> 16,
		     d->abi_version & 0xffff);
		return -ENOEXEC;
	}
	if (!d->name || strcmp(d->name, mod->name)) {
		fail(mod, "%s calls itself '%s'", mod->path,
		     d->name ? d->name : "(null)");
		return -ENOEXEC;
	}
	if (!d->init || !d->devices || !d->get_properties || !d->connect ||
	    !d->accept || !d->isend || !d->irecv || !d->close_send ||
	    !d->close_recv || !d->reg_mr || !d->dereg_mr) {
		fail(mod, "%s lacks a required operation", mod->path);
		return -ENOEXEC;
	}
	mod->desc = d;
	return 0;
}

static void init_module(struct core_config *cfg, struct core_module *mod)
{
	int err;

	mod->host = (struct mesh_host){
		.abi_version = MESH_MODULE_ABI_VERSION,
		.size = sizeof(struct mesh_host),
		.module = mod->name,
		.log = host_log,
		.param_str = host_param_str,
		.param_int = host_param_int,
		.param_list = host_param_list,
	};
	mod->params = core_config_module(cfg, mod->name, mod->desc->params);
	if (!mod->params) {
		fail(mod, "cannot resolve its parameters");
		return;
	}
	err = mod->desc->init(&mod->host, &mod->mctx);
	if (err == -ENODEV) {
		mod->status = CORE_MODULE_NODEV;
		snprintf(mod->reason, sizeof(mod->reason), "no devices");
		CORE_INFO("module %s: no devices", mod->name);
		return;
	}
	if (err) {
		fail(mod, "init failed: %s", strerror(-err));
		return;
	}
	err = mod->desc->devices(mod->mctx, &mod->ndevs);
	if (err || mod->ndevs <= 0) {
		mod->desc->fini(mod->mctx);
		mod->mctx = NULL;
		mod->status = CORE_MODULE_NODEV;
		snprintf(mod->reason, sizeof(mod->reason), "no devices");
		CORE_INFO("module %s: no devices", mod->name);
		return;
	}
	mod->status = CORE_MODULE_READY;
	CORE_INFO("module %s %s: %d device(s) from %s", mod->name,
		  mod->desc->version ? mod->desc->version : "", mod->ndevs,
		  mod->path);
}

static void load_one(struct core_config *cfg, struct core_module *mod,
		     char **dirs, int ndirs)
{
	if (find_file(mod, dirs, ndirs) || open_descriptor(mod))
		return;
	init_module(cfg, mod);
}

int core_loader_load(struct core_config *cfg, struct core_module **mods_out,
		     int *nmods_out)
{
	const struct core_value *names =
		&core_config_core(cfg)->values[CP_MODULES];
	struct core_module *mods;
	char **dirs = NULL;
	int ndirs = core_loader_search_path(cfg, &dirs);

	if (ndirs < 0)
		return ndirs;
	mods = calloc((size_t)names->nitems + 1, sizeof(*mods));
	if (!mods) {
		ndirs = -ENOMEM;
		goto out_free_dirs;
	}
	for (int i = 0; i < names->nitems; i++) {
		snprintf(mods[i].name, sizeof(mods[i].name), "%s",
			 names->items[i]);
		load_one(cfg, &mods[i], dirs, ndirs);
	}
	*mods_out = mods;
	*nmods_out = names->nitems;
out_free_dirs:
	for (int i = 0; dirs && dirs[i]; i++)
		free(dirs[i]);
	free(dirs);
	return ndirs < 0 ? ndirs : 0;
}

void core_loader_unload(struct core_module *mods, int nmods)
{
	for (int i = nmods - 1; i >= 0; i--) {
		if (mods[i].mctx && mods[i].desc->fini)
			mods[i].desc->fini(mods[i].mctx);
		/* Called after NCCL closed every comm: nothing points into
		 * the module any more. */
		if (mods[i].dl)
			dlclose(mods[i].dl);
	}
	free(mods);
}
