/* SPDX-License-Identifier: MIT */
#include "loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layer.h"
#include "core_log.h"
#include "params.h"
#include "profile.h"

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

/* Every host the core hands out is the member of a core_module. */
static struct core_module *host_module(const struct mesh_host *host)
{
	return (struct core_module *)((char *)(uintptr_t)host -
				      offsetof(struct core_module, host));
}

static void host_log(const struct mesh_host *host, enum mesh_log_level level,
		     const char *file, int line, const char *fmt, ...)
{
	struct core_module *mod = host_module(host);
	va_list ap;

	va_start(ap, fmt);
	/* What a module said last while starting is often why it found no
	 * device: kept for modules that do not call no_devices. */
	if (mod->in_init) {
		va_list copy;

		va_copy(copy, ap);
		vsnprintf(mod->said, sizeof(mod->said), fmt, copy);
		va_end(copy);
	}
	if (!mod->quiet)
		core_vlog(host->module, level, file, line, fmt, ap);
	va_end(ap);
}

static const struct core_value *host_value(const struct mesh_host *host,
					   const char *name)
{
	const struct core_module *mod = host_module(host);
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

static void host_param_error(const struct mesh_host *host, const char *name,
			     const char *fmt, ...)
{
	struct core_module *mod = host_module(host);
	const struct core_value *v = core_scope_get(mod->params, name);
	va_list ap;

	mod->param_errors++;
	va_start(ap, fmt);
	if (v) {
		core_config_value_errorv(mod->cfg, mod->name, v, fmt, ap);
	} else {
		char what[256];

		vsnprintf(what, sizeof(what), fmt, ap);
		core_config_value_error(mod->cfg, mod->name,
			&(struct core_value){
				.param = &(struct mesh_param){ .name = name },
				.text = "" },
			"%s (a parameter its table does not declare)", what);
	}
	va_end(ap);
}

static void host_no_devices(const struct mesh_host *host, const char *fmt,
			    ...)
{
	struct core_module *mod = host_module(host);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(mod->nodev, sizeof(mod->nodev), fmt, ap);
	va_end(ap);
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
	const char *path = core_config_core(cfg)->values[CP_MODULE_PATH].text;
	char **dirs = NULL;
	int n = 0, err;

	/* A path that is set is the whole search: a build tree's tests, or a
	 * job that pins its modules, must never load whatever else happens
	 * to be installed. */
	err = add_path_list(&dirs, &n, path);
	if (!err && !n) {
		err = add_beside_core(&dirs, &n);
		if (!err)
			err = add_dir(&dirs, &n, CORE_MODULE_DIR);
	}
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
	if (!mod->quiet)
		CORE_WARN("module %s: %s", mod->name, mod->reason);
}

static int find_file(struct core_module *mod, char **dirs, int ndirs)
{
	char searched[1024] = "";
	size_t len = 0;

	for (int i = 0; i < ndirs; i++) {
		int len_path = snprintf(mod->path, sizeof(mod->path),
					"%s/mesh-%s.so", dirs[i], mod->name);

		/* a cut name would be some other file: never open it */
		if (len_path >= 0 && (size_t)len_path < sizeof(mod->path) &&
		    !access(mod->path, F_OK))
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

/* ---- the core's defaults for optional operations ---- */

static void stub_fini(void *mctx)
{
	(void)mctx;
}

static void stub_abandon(void *mctx, struct mesh_ctrl *ctrl)
{
	(void)mctx, (void)ctrl;
}

static int stub_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
			      uint64_t offset, int fd, void **mhandle)
{
	(void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd;
	*mhandle = NULL;
	return -EOPNOTSUPP;
}

/* A module without iflush never needs one: NCCL takes a NULL request as
 * "nothing to wait for". */
static int stub_iflush(void *recv_comm, int n, void **data, int *sizes,
		       void **mhandles, void **request)
{
	(void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
	*request = NULL;
	return 0;
}

/* A module that cannot tell is tried; its connect says the rest. */
static int stub_reach(void *mctx, int dev, const struct mesh_addr *peer,
		      int npeer, char *why, size_t cap)
{
	(void)mctx, (void)dev, (void)peer, (void)npeer;
	if (cap)
		why[0] = '\0';
	return 0;
}

static int stub_check(const struct mesh_host *host)
{
	(void)host;
	return 0;
}

static int stub_start(void *mctx)
{
	(void)mctx;
	return 0;
}

/* Only a module with its own route is ever asked (core_layer_module). */
static int stub_route(void *mctx, int rail, const void *handle,
		      const char *unreached, void **state, void **send_comm)
{
	(void)mctx, (void)rail, (void)handle, (void)unreached, (void)state;
	*send_comm = NULL;
	return -EHOSTUNREACH;
}

static void stub_route_abandon(void *mctx, void *state)
{
	(void)mctx, (void)state;
}

static int stub_routes_to(void *mctx, int rail, const void *handle)
{
	(void)mctx, (void)rail, (void)handle;
	return 0;
}

static int stub_report(void *mctx, char *buf, size_t cap)
{
	(void)mctx;
	if (cap)
		buf[0] = '\0';
	return 0;
}

/* A module that does not describe its comms leaves the core's part. */
static int stub_describe(void *comm, struct mesh_conn_info *info)
{
	(void)comm, (void)info;
	return 0;
}

/* A module that counts nothing gives no counters (metrics show the
 * core's own for it). */
static int stub_comm_counters(void *comm, mesh_counter_fn emit, void *arg)
{
	(void)comm, (void)emit, (void)arg;
	return 0;
}

static int stub_counters(void *mctx, mesh_counter_fn emit, void *arg)
{
	(void)mctx, (void)emit, (void)arg;
	return 0;
}

/* The descriptor's data members, before its operations. */
#define DATA_MEMBERS(X) X(abi_version) X(size) X(name) X(version) X(params)

/* The required operations, by name, for the refusal line. */
#define REQUIRED_OPS(X) X(init) X(devices) X(get_properties) X(connect) \
	X(accept) X(reg_mr) X(dereg_mr) X(isend) X(irecv) X(close_send)  \
	X(close_recv)

/* The optional ones: each has its stub_<member> above. */
#define OPTIONAL_OPS(X) X(fini) X(abandon) X(reg_mr_dmabuf) X(iflush)   \
	X(reach) X(check) X(start) X(route) X(route_abandon) X(routes_to) \
	X(report) X(describe) X(comm_counters) X(counters)

/*
 * The stubs as one descriptor, as rdma-core's dummy_ops.c: what a module
 * leaves NULL, or predates, is taken from here, so call sites never test
 * for NULL.  Naming stub_<member> makes a member listed without its stub
 * an undeclared identifier.  And the lists above must add up to the whole
 * descriptor (the members are all pointers or two uint32_t, so there is no
 * padding to count): a member appended to struct mesh_module and listed in
 * neither list fails the build here instead of reaching a call site as
 * NULL.  A _Static_assert rather than a positional initializer under
 * -Wmissing-field-initializers: it is an error, not a warning, whatever
 * the warning flags of the build.
 */
#define STUB(m) .m = stub_##m,
static const struct mesh_module stubs = { OPTIONAL_OPS(STUB) };
#undef STUB

#define MEMBER_SIZE(m) + sizeof(((struct mesh_module *)0)->m)
_Static_assert(0 DATA_MEMBERS(MEMBER_SIZE) REQUIRED_OPS(MEMBER_SIZE)
	       OPTIONAL_OPS(MEMBER_SIZE) == sizeof(struct mesh_module),
	       "a member of struct mesh_module is in no list here: a new "
	       "optional operation needs its stub and an OPTIONAL_OPS entry");
#undef MEMBER_SIZE

/* Room the required members take: a descriptor must hold them all. */
#define REQUIRED_SIZE \
	(offsetof(struct mesh_module, close_recv) + \
	 sizeof(((struct mesh_module *)0)->close_recv))

static int fill_ops(struct core_module *mod, const struct mesh_module *d)
{
	struct mesh_module *ops = &mod->ops;

	memset(ops, 0, sizeof(*ops));
	memcpy(ops, d, REQUIRED_SIZE);
#define MISSING(m) if (!d->m) { \
		fail(mod, "%s lacks the required operation " #m, mod->path); \
		return -ENOEXEC; \
	}
	REQUIRED_OPS(MISSING)
#undef MISSING
	/* A member is read only when the descriptor's size covers it. */
#define OPTIONAL(m) ops->m = MESH_MODULE_HAS(d, m) && d->m ? d->m : stubs.m;
	OPTIONAL_OPS(OPTIONAL)
#undef OPTIONAL
	mod->has_route = ops->route != stub_route;
	/* Call sites see a descriptor of this core's ABI, all members set. */
	ops->size = sizeof(*ops);
	mod->desc = ops;
	return 0;
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
	/* Optional members are gated one by one (fill_ops); only the
	 * required ones must all be there. */
	if (d->size < REQUIRED_SIZE) {
		fail(mod, "%s: descriptor of %u bytes is too short for module "
			  "ABI %u.%u (the required operations take %zu)",
		     mod->path, d->size, d->abi_version >> 16,
		     d->abi_version & 0xffff, (size_t)REQUIRED_SIZE);
		return -ENOEXEC;
	}
	if (!d->name || strcmp(d->name, mod->name)) {
		fail(mod, "%s calls itself '%s'", mod->path,
		     d->name ? d->name : "(null)");
		return -ENOEXEC;
	}
	return fill_ops(mod, d);
}

/* Whether this host's config names an auth_key_file (loaded or not: a
 * bad one is the core's own config error). */
static int host_authenticated(const struct mesh_host *host)
{
	const struct core_module *mod = host_module(host);
	const char *path =
		core_config_core(mod->cfg)->values[CP_AUTH_KEY_FILE].text;

	return path && *path;
}

static void set_host(struct core_config *cfg, struct core_module *mod)
{
	mod->cfg = cfg;
	mod->host = (struct mesh_host){
		.abi_version = MESH_MODULE_ABI_VERSION,
		.size = sizeof(struct mesh_host),
		.module = mod->name,
		.log = host_log,
		.param_str = host_param_str,
		.param_int = host_param_int,
		.param_list = host_param_list,
		.param_error = host_param_error,
		.no_devices = host_no_devices,
		.authenticated = host_authenticated,
	};
	core_layer_host(&mod->host);
	core_prof_host(&mod->host);
}

/* Resolves the module's parameters and runs its check: 0 when valid. */
static int check_params(struct core_config *cfg, struct core_module *mod)
{
	int err;

	set_host(cfg, mod);
	mod->params = core_config_module(cfg, mod->name, mod->desc->params);
	if (!mod->params) {
		fail(mod, "cannot resolve its parameters");
		return -ENOMEM;
	}
	mod->in_init = true;
	err = mod->desc->check(&mod->host);
	mod->in_init = false;
	if (err || mod->param_errors) {
		/* Each broken rule is a config error with its location. */
		fail(mod, "its parameters break %d rule%s (config errors)",
		     mod->param_errors ? mod->param_errors : 1,
		     mod->param_errors == 1 || !mod->param_errors ? "" : "s");
		if (!mod->param_errors) {
			core_config_value_error(cfg, mod->name,
				&(struct core_value){
					.param = &(struct mesh_param){
						.name = "check" },
					.text = "" },
				"the module's check failed (%s) without "
				"naming a parameter", strerror(err < 0 ?
							       -err : EINVAL));
			/* that error says why it failed, as theirs would */
			mod->param_errors = 1;
		}
		return -EINVAL;
	}
	return 0;
}

static void no_devices(struct core_module *mod)
{
	const char *why = mod->nodev[0] ? mod->nodev : mod->said;

	mod->status = CORE_MODULE_NODEV;
	snprintf(mod->reason, sizeof(mod->reason), "no devices: %s",
		 why[0] ? why : "the module gave no reason");
	CORE_INFO("module %s: %s", mod->name, mod->reason);
}

static void init_module(struct core_config *cfg, struct core_module *mod)
{
	int err;

	if (check_params(cfg, mod))
		return;
	mod->in_init = true;
	mod->said[0] = '\0';
	err = mod->desc->init(&mod->host, &mod->mctx);
	if (err == -ENODEV) {
		mod->in_init = false;
		mod->mctx = NULL;
		no_devices(mod);
		return;
	}
	if (err) {
		mod->in_init = false;
		mod->mctx = NULL;
		fail(mod, "init failed: %s%s%s", strerror(-err),
		     mod->said[0] ? ": " : "", mod->said);
		return;
	}
	err = mod->desc->devices(mod->mctx, &mod->ndevs);
	mod->in_init = false;
	/* a layered module carries connections over the others' devices:
	 * none of its own is its normal state */
	if (!err && mod->ndevs == 0 && mod->has_route) {
		mod->status = CORE_MODULE_READY;
		CORE_INFO("module %s %s from %s: layered over the other "
			  "modules", mod->name, mod->desc->version ?
			  mod->desc->version : "", mod->path);
		return;
	}
	if (err || mod->ndevs <= 0) {
		if (err && !mod->nodev[0])
			snprintf(mod->nodev, sizeof(mod->nodev),
				 "listing devices failed: %s", strerror(-err));
		mod->desc->fini(mod->mctx);
		mod->mctx = NULL;
		mod->ndevs = 0;
		no_devices(mod);
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

int core_loader_inspect(struct core_config *cfg, const char *name,
			struct core_module *mod)
{
	char **dirs = NULL;
	int ndirs = core_loader_search_path(cfg, &dirs), err = -ENOENT;

	if (ndirs < 0)
		return ndirs;
	memset(mod, 0, sizeof(*mod));
	mod->quiet = true;
	snprintf(mod->name, sizeof(mod->name), "%s", name);
	if (strlen(name) < sizeof(mod->name) && !strchr(name, '/') &&
	    !find_file(mod, dirs, ndirs) && !open_descriptor(mod)) {
		check_params(cfg, mod);
		err = 0;
	}
	if (err && mod->dl)
		dlclose(mod->dl);
	for (int i = 0; dirs && dirs[i]; i++)
		free(dirs[i]);
	free(dirs);
	return err;
}

void core_loader_unload(struct core_module *mods, int nmods)
{
	/* layered modules first: a relay's thread drives the others'
	 * comms until its fini stops it */
	for (int pass = 0; pass < 2; pass++)
		for (int i = nmods - 1; mods && i >= 0; i--) {
			if (mods[i].has_route != !pass)
				continue;
			if (mods[i].mctx)
				mods[i].desc->fini(mods[i].mctx);
			/* Called after NCCL closed every comm: nothing
			 * points into the module any more. */
			if (mods[i].dl)
				dlclose(mods[i].dl);
		}
	free(mods);
}
