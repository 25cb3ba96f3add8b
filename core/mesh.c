/* SPDX-License-Identifier: MIT */
#include "mesh.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "ctrl.h"
#include "handle.h"
#include "layer.h"
#include "log.h"
#include "netaddr.h"
#include "params.h"
#include "pick.h"
#include "state.h"

/* ----------------------------------------------------------------- state */

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

/* -------------------------------------------------------- NCCL's settings */

/*
 * NCCL's SIMPLE protocol moves a channel's data in 8 steps of
 * NCCL_BUFFSIZE / 8, and a step is refilled only once its last one has
 * crossed.  Through host memory and TCP that round trip is long enough
 * that NCCL's 4 MiB leaves its pipeline short (docs/benchmarks.md).  NCCL
 * reads the variable once, after its first net plugin init, so setting it
 * here reaches every communicator of the process.  What the user set, in
 * the environment or NCCL's own config file, always wins, and a job that
 * asked NCCL for another network is left alone.
 */
enum core_nccl_offer core_offer_nccl_buffsize(const struct core_state *st)
{
	const char *set = getenv("NCCL_BUFFSIZE");
	char text[32];

	if (!st->nccl_buffsize)
		return CORE_NCCL_OFFER_OFF;
	if (!mesh_nccl_net_is_ours())
		return CORE_NCCL_OFFER_OTHER_NET;
	if (set && *set) {
		CORE_INFO("NCCL_BUFFSIZE=%s from the environment kept "
			  "(nccl_buffsize would give %lld)", set,
			  st->nccl_buffsize);
		return CORE_NCCL_OFFER_USER_SET;
	}
	snprintf(text, sizeof(text), "%lld", st->nccl_buffsize);
	if (setenv("NCCL_BUFFSIZE", text, 0)) {
		CORE_WARN("could not set NCCL_BUFFSIZE=%s: %s", text,
			  strerror(errno));
		return CORE_NCCL_OFFER_FAILED;
	}
	CORE_INFO("NCCL_BUFFSIZE=%s set for NCCL (nccl_buffsize; 0 leaves "
		  "NCCL's default)", text);
	return CORE_NCCL_OFFER_SET;
}

/* What we tell NCCL (its buffer size, the tuner's channels) is for a job
 * whose network is ours: NCCL_NET unset or Mesh. */
bool mesh_nccl_net_is_ours(void)
{
	const char *net = getenv("NCCL_NET");

	return !net || !*net || !strcasecmp(net, MESH_NCCL_NET_NAME);
}

/* ------------------------------------------------------------- lifecycle */

static pthread_mutex_t mesh_lock = PTHREAD_MUTEX_INITIALIZER;
static struct core_state *mesh_state;
static int mesh_refs;
static bool nccl_offered;

struct mesh_ctx {
	uint64_t comm_id;
};

static void connects_drop(const void *ctx);

static void teardown(void)
{
	/* connects NCCL left in progress, while their modules are here */
	connects_drop(NULL);
	/* modules first: a layered one stops using its channels and
	 * service listeners in fini, before they close */
	core_layer_unbind(mesh_state);
	core_state_free(mesh_state);
	mesh_state = NULL;
	core_layer_close_services();
	core_ctrl_shutdown();
	core_ctrl_set_auth_key(NULL);
}

int mesh_init(void **ctx, uint64_t comm_id, ncclDebugLogger_t logger)
{
	struct mesh_ctx *c = calloc(1, sizeof(*c));
	int err = 0;

	*ctx = NULL;
	if (!c)
		return -ENOMEM;
	core_log_set_nccl(logger);
	pthread_mutex_lock(&mesh_lock);
	if (!mesh_state) {
		mesh_state = core_state_build(NULL);
		if (!mesh_state)
			err = -ENOMEM;
	}
	if (!err && !mesh_state->usable) {
		CORE_WARN("init failed: the configuration of %s is not usable "
			  "(reasons above; `meshinfo` shows them too)",
			  core_config_path(mesh_state->cfg));
		err = -ENOTSUP;	/* a configuration error (plugin.c) */
	}
	if (err && !mesh_refs && mesh_state)
		teardown();	/* the next init reads the config again */
	if (!err) {
		core_ctrl_set_auth_key(&mesh_state->auth_key);
		if (!mesh_refs)
			err = core_layer_start(mesh_state);
	}
	if (!err && !nccl_offered) {
		nccl_offered = true;	/* NCCL reads it once per process */
		core_offer_nccl_buffsize(mesh_state);
	}
	if (err && !mesh_refs && mesh_state)
		teardown();
	if (!err) {
		mesh_refs++;
		c->comm_id = comm_id;
		*ctx = c;
	}
	pthread_mutex_unlock(&mesh_lock);
	if (err)
		free(c);
	return err;
}

int mesh_finalize(void *ctx)
{
	if (!ctx)
		return 0;	/* NCCL 2.28 finalizes after a failed init */
	pthread_mutex_lock(&mesh_lock);
	connects_drop(ctx);
	free(ctx);
	if (mesh_refs > 0 && --mesh_refs == 0)
		teardown();
	pthread_mutex_unlock(&mesh_lock);
	return 0;
}

/* NCCL's v10 path has no finalize: unloading the library must still leave
 * nothing behind. */
__attribute__((destructor)) static void mesh_unload(void)
{
	pthread_mutex_lock(&mesh_lock);
	if (mesh_state)
		teardown();
	mesh_refs = 0;
	pthread_mutex_unlock(&mesh_lock);
}

const struct core_state *mesh_current_state(void)
{
	return mesh_state;
}

void mesh_tuning(struct core_tuning *tuning)
{
	pthread_mutex_lock(&mesh_lock);
	*tuning = mesh_state ? mesh_state->tuning : (struct core_tuning){ 0 };
	pthread_mutex_unlock(&mesh_lock);
}

int mesh_devices(int *ndev)
{
	*ndev = mesh_state ? mesh_state->nrails : 0;
	return mesh_state ? 0 : -EINVAL;
}

const struct core_rail *mesh_rail(int dev)
{
	if (!mesh_state || dev < 0 || dev >= mesh_state->nrails)
		return NULL;
	return &mesh_state->rails[dev];
}

/* ----------------------------------------------------------------- listen */

struct mesh_listen {
	struct core_listen_comm *lc;
	const struct core_rail *rail;
	struct core_conn *conn;
	const struct core_member *member;
	void *mcomm;		/* built, waiting for the control flush */
	struct core_member layered;	/* member when the layer carries it */
};

/* The port a peer behind the same NAT rules must dial for `port`. */
static int external_port(const struct core_advertise *adv, uint16_t port)
{
	for (int i = 0; i < adv->nports; i++)
		if (adv->ports[i].listen == port)
			return adv->ports[i].external;
	return port + adv->port_offset;
}

static void add_addr(struct core_handle *h, const struct mesh_addr *a,
		     int port)
{
	if (h->naddrs == CORE_HANDLE_ADDRS_MAX)
		return;
	h->addrs[h->naddrs] = *a;
	h->addrs[h->naddrs++].port = (uint16_t)port;
}

/* Local addresses: the rail's members', IPv4 first (they take less room
 * in the handle); members with no IP (verbs-only) fall back to every
 * interface's. */
static void add_local_addrs(const struct core_rail *rail, uint16_t port,
			    struct core_handle *h)
{
	const struct mesh_dev_props *p = &rail->props;
	struct mesh_netif *ifs = NULL;
	int nifs, before = h->naddrs;

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < p->naddrs; i++)
			if ((p->addrs[i].family == AF_INET) == !pass)
				add_addr(h, &p->addrs[i], port);
	if (h->naddrs > before)
		return;
	nifs = mesh_netif_list("", &ifs);
	for (int i = 0; i < nifs; i++)
		for (int a = 0; a < ifs[i].naddrs; a++)
			add_addr(h, &ifs[i].addrs[a], port);
	free(ifs);
}

static int handle_addresses(const struct core_rail *rail, uint16_t port,
			    struct core_handle *h)
{
	const struct core_advertise *adv = &mesh_state->advertise;
	int ext = external_port(adv, port);

	if (adv->naddrs && (ext < 1 || ext > 65535)) {
		CORE_WARN("listen on %s: port %u maps to %d, outside 1..65535 "
			  "(advertise_port_offset, advertise_ports)",
			  rail->name, port, ext);
		return -ENOTSUP;	/* the configuration cannot work */
	}
	for (int i = 0; i < adv->naddrs; i++)
		add_addr(h, &adv->addrs[i], ext);
	if (!adv->naddrs || adv->local)
		add_local_addrs(rail, port, h);
	return 0;
}

int mesh_listen(void *ctx, int dev, void *handle, void **listen_comm)
{
	const struct core_rail *rail = mesh_rail(dev);
	struct mesh_listen *ml;
	struct core_handle h = { 0 };
	uint16_t port;
	int err;

	(void)ctx;
	if (!rail)
		return -EINVAL;
	ml = calloc(1, sizeof(*ml));
	if (!ml)
		return -ENOMEM;
	h.nonce = core_random_u64();
	h.fabric_id = rail->fabric_id;
	/* core_fabric_build refused rails with more members than this */
	for (int i = 0; i < rail->nmembers; i++)
		h.members[h.nmembers++] =
			core_module_tag(rail->members[i].module->name);
	err = core_ctrl_listen(dev, h.nonce, mesh_state->port_low,
			       mesh_state->port_high, &port, &ml->lc);
	if (err) {
		free(ml);
		return err;
	}
	err = handle_addresses(rail, port, &h);
	if (!err)
		err = core_handle_encode(&h, handle);
	if (err < 0) {
		if (err == -E2BIG)
			CORE_WARN("listen on %s: no address fits in the handle",
				  rail->name);
		core_ctrl_close_listen(ml->lc);
		free(ml);
		return err;
	}
	ml->rail = rail;
	*listen_comm = ml;
	return 0;
}

int mesh_close_listen(void *listen_comm)
{
	struct mesh_listen *ml = listen_comm;

	if (!ml)
		return 0;
	if (ml->conn && ml->member)
		ml->member->module->desc->abandon(ml->member->module->mctx,
						  &ml->conn->ctrl);
	core_conn_free(ml->conn);
	core_ctrl_close_listen(ml->lc);
	free(ml);
	return 0;
}

/* ------------------------------------------------------------ connection */

/* A direct connection's path: what its INFO line and tools show. */
static struct core_comm_path direct_path(const struct core_rail *rail,
					 const struct core_member *m,
					 const struct core_conn *c)
{
	uint64_t mine = rail->fabric_id, theirs = c->peer_fabric_id;

	return (struct core_comm_path){
		.module = m->module->name,
		/* a layered module's accept: the last relay is the one
		 * dialing */
		.path_class = m->module->has_route ? "relayed" :
			core_path_class_name(core_path_class(
				mine, theirs, mesh_state->max_rails)),
		.direct = 1, .local = c->local, .remote = c->remote,
		.fabric_id = mine, .peer_fabric_id = theirs };
}

static void log_connection(const char *dir, const struct core_rail *rail,
			   const struct core_comm *comm)
{
	const struct core_comm_path *p = &comm->path;
	char local[MESH_ADDR_STRLEN], remote[MESH_ADDR_STRLEN];

	CORE_INFO("%s %s: %s, %s -> %s, %s (fabricId %llu -> %llu)", dir,
		  rail->name, p->module,
		  mesh_addr_str(&p->local, local, sizeof(local)),
		  mesh_addr_str(&p->remote, remote, sizeof(remote)),
		  p->path_class, (unsigned long long)p->fabric_id,
		  (unsigned long long)p->peer_fabric_id);
}

static struct core_comm *comm_new(const struct mesh_module *d, void *mcomm,
				  const struct core_comm_path *path)
{
	struct core_comm *c = malloc(sizeof(*c));

	if (c) {
		c->desc = d;
		c->mcomm = mcomm;
		c->path = *path;
	}
	return c;
}

int mesh_conn_info(void *comm, struct mesh_conn_info *info)
{
	const struct core_comm *c = comm;
	const struct core_comm_path *p;

	if (!c || !info)
		return -EINVAL;
	p = &c->path;
	memset(info, 0, sizeof(*info));
	snprintf(info->module, sizeof(info->module), "%s", p->module);
	snprintf(info->path_class, sizeof(info->path_class), "%s",
		 p->path_class);
	if (p->direct) {
		mesh_addr_str(&p->local, info->local, sizeof(info->local));
		mesh_addr_str(&p->remote, info->remote, sizeof(info->remote));
		info->fabric_id = p->fabric_id;
		info->peer_fabric_id = p->peer_fabric_id;
	}
	return c->desc->describe(c->mcomm, info);
}

/* The module's comm is built; the control channel still has to deliver
 * what the module queued last before the comm goes to NCCL. */
static int finish_step(const struct core_rail *rail,
		       const struct core_member *m, struct core_conn *c,
		       void **mcomm, void **comm)
{
	const struct mesh_module *d = m->module->desc;
	int err = core_ctrl_flush(c);

	if (err == -EAGAIN && core_now_ns() <= c->deadline_ns)
		return 0;
	if (err == -EAGAIN)
		err = -ETIMEDOUT;
	if (!err) {
		struct core_comm_path path = direct_path(rail, m, c);

		*comm = comm_new(d, *mcomm, &path);
		if (*comm)
			return 0;
		err = -ENOMEM;
	}
	CORE_WARN("%s with %s: module %s: the last control message: %s",
		  c->connector ? "connect" : "accept", c->peer_text,
		  m->module->name, err == -ETIMEDOUT ? "not sent in time" :
		  strerror(-err));
	(c->connector ? d->close_send : d->close_recv)(*mcomm);
	*mcomm = NULL;
	return err;
}

/*
 * Runs the chosen module's exchange.  0 with *comm set when done, 0 with
 * *comm NULL while in progress, else the error (logged).
 */
static int module_step(const char *dir, const struct core_rail *rail,
		       const struct core_member *m, struct core_conn *c,
		       void **mcomm, void **comm)
{
	const struct mesh_module *d = m->module->desc;
	int err = 0;

	/* A module logs its own errors where it decides them (module.h);
	 * the core logs only what it decides itself. */
	if (!*mcomm)
		err = (c->connector ? d->connect : d->accept)(
			m->module->mctx, m->dev, &c->ctrl, mcomm);
	if (!err && *mcomm) {
		err = finish_step(rail, m, c, mcomm, comm);
	} else if (!err && core_now_ns() > c->deadline_ns) {
		CORE_WARN("%s %s with %s: module %s did not finish its setup "
			  "within %d ms", dir, rail->name, c->peer_text,
			  m->module->name, mesh_state->connect_timeout_ms);
		err = -ETIMEDOUT;
	}
	if (*comm)
		log_connection(dir, rail, *comm);
	return err == -EAGAIN ? 0 : err;
}

struct mesh_connecting {
	struct core_conn *conn;
	const struct core_member *member;
	void *mcomm;
	int dialed;
	/* no member reaches the peer: the layered module carries it */
	struct core_module *layer;
	void *route_state;
	char unreached[768];
};

/* No member of the rail reaches the peer: the layered module (relay) may
 * still carry the connection, else this is the one line that says why. */
static int connect_unreached(const struct core_rail *rail,
			     struct mesh_connecting *cs)
{
	cs->layer = core_layer_module(mesh_state);
	if (cs->layer) {
		CORE_INFO("connect %s: %s; %s carries it", rail->name,
			  cs->unreached, cs->layer->name);
		return 0;
	}
	CORE_WARN("connect %s: %s; a peer that no link joins needs the relay "
		  "module in 'modules'", rail->name, cs->unreached);
	return -ENOPROTOOPT;	/* the two hosts' modules or links differ */
}

static int connect_start(const struct core_rail *rail, const uint8_t *handle,
			 struct mesh_connecting **out)
{
	struct mesh_connecting *cs;
	struct core_handle h;
	const char *why;
	int err = core_handle_decode(handle, &h, &why);

	if (err) {
		CORE_WARN("connect %s: the handle is not usable: %s", rail->name,
			  why);
		return -EINVAL;	/* not a handle of ours: a wrong argument */
	}
	cs = calloc(1, sizeof(*cs));
	if (!cs)
		return -ENOMEM;
	cs->layer = core_layer_module(mesh_state);
	if (cs->layer && cs->layer->desc->routes_to(cs->layer->mctx,
						    rail->rail, handle))
		snprintf(cs->unreached, sizeof(cs->unreached),
			 "the config routes the peer through %s",
			 cs->layer->name);
	else
		cs->member = core_pick_member(mesh_state, rail, &h,
					      cs->unreached,
					      sizeof(cs->unreached));
	if (!cs->member) {
		err = connect_unreached(rail, cs);
	} else {
		cs->layer = NULL;
		err = core_ctrl_dial(&h, rail->props.addrs, rail->props.naddrs,
				     core_module_tag(cs->member->module->name),
				     rail->fabric_id,
				     mesh_state->connect_timeout_ms, &cs->conn);
	}
	if (err) {
		free(cs);
		return err;
	}
	*out = cs;
	return 0;
}

static void connecting_free(struct mesh_connecting *cs)
{
	if (cs->layer) {
		if (cs->route_state)
			cs->layer->desc->route_abandon(cs->layer->mctx,
						       cs->route_state);
	} else if (!cs->mcomm) {
		cs->member->module->desc->abandon(cs->member->module->mctx,
						  &cs->conn->ctrl);
	}
	core_conn_free(cs->conn);
	free(cs);
}

/*
 * Connects in progress.  NCCL calls connect with the same handle buffer
 * until it gives a comm, and the handle leaves us room (its slot, handle.h)
 * to find our state again.  But the whole handle, slot included, came from
 * the peer through a bootstrap nobody authenticates: the slot only ever
 * holds a key into this table, and an entry answers to it only for the
 * context, device and handle bytes it was started for.  A slot that names
 * no entry is not ours: a fresh connect starts and overwrites it.
 *
 * The table is the process's, beside mesh_state: a finalize frees the
 * entries of its context (connects NCCL gave up on), the last one (or the
 * library's unload) all of them, while their modules are still loaded.
 * NCCL connects from more than one thread for different comms; connect is
 * setup, not the data path, so one mutex guards the table, never held
 * across a module's call.  Keys are random, so a chain holds about
 * n / CONNECTS_BUCKETS entries whatever the peers send.
 */
#define CONNECTS_BUCKETS 4096u
#define CONNECTS_MAX (1 << 20)

struct connect_entry {
	struct connect_entry *next;
	uint64_t key;
	const void *ctx;
	int dev;
	bool busy;		/* a connect call is stepping it */
	uint8_t handle[CORE_HANDLE_STATE_OFFSET];	/* what it answers to */
	struct mesh_connecting *cs;
};

static pthread_mutex_t connects_lock = PTHREAD_MUTEX_INITIALIZER;
static struct connect_entry *connects[CONNECTS_BUCKETS];
static int nconnects;

static struct connect_entry **connects_bucket(uint64_t key)
{
	return &connects[key % CONNECTS_BUCKETS];
}

static struct connect_entry *connects_find(uint64_t key)
{
	struct connect_entry *e = *connects_bucket(key);

	while (e && e->key != key)
		e = e->next;
	return e;
}

/*
 * The connect this handle's slot names, marked busy: 0; -EBUSY while
 * another call steps it; -ENOENT when the slot names none of ours.
 */
static int connects_claim(const void *ctx, int dev, const uint8_t *handle,
			  struct connect_entry **out)
{
	struct connect_entry *e;
	uint64_t key;
	int err = -ENOENT;

	memcpy(&key, handle + CORE_HANDLE_STATE_OFFSET, sizeof(key));
	if (!key)
		return -ENOENT;
	pthread_mutex_lock(&connects_lock);
	e = connects_find(key);
	if (e && e->ctx == ctx && e->dev == dev &&
	    !memcmp(e->handle, handle, sizeof(e->handle))) {
		err = e->busy ? -EBUSY : 0;
		e->busy = true;
		*out = e;
	}
	pthread_mutex_unlock(&connects_lock);
	if (err == -ENOENT)
		CORE_INFO("connect: the handle's slot holds %#llx, no connect "
			  "of ours: a new one starts", (unsigned long long)key);
	return err;
}

/* Files a connect just started, busy, under a fresh key. */
static int connects_add(const void *ctx, int dev, const uint8_t *handle,
			struct mesh_connecting *cs, struct connect_entry **out)
{
	struct connect_entry *e = calloc(1, sizeof(*e));
	struct connect_entry **b;

	if (!e)
		return -ENOMEM;
	e->ctx = ctx;
	e->dev = dev;
	e->busy = true;
	memcpy(e->handle, handle, sizeof(e->handle));
	e->cs = cs;
	pthread_mutex_lock(&connects_lock);
	if (nconnects >= CONNECTS_MAX) {
		pthread_mutex_unlock(&connects_lock);
		CORE_WARN("connect: %d connects in progress already",
			  nconnects);
		free(e);
		return -EMFILE;
	}
	do
		e->key = core_random_u64();
	while (!e->key || connects_find(e->key));
	b = connects_bucket(e->key);
	e->next = *b;
	*b = e;
	nconnects++;
	pthread_mutex_unlock(&connects_lock);
	*out = e;
	return 0;
}

static void connects_unlink(struct connect_entry *e)
{
	struct connect_entry **p = connects_bucket(e->key);

	while (*p != e)
		p = &(*p)->next;
	*p = e->next;
	nconnects--;
}

/* The call that claimed e is done with it: kept for the next call, or
 * (finished or failed) gone. */
static void connects_release(struct connect_entry *e, bool done)
{
	pthread_mutex_lock(&connects_lock);
	if (done)
		connects_unlink(e);
	else
		e->busy = false;
	pthread_mutex_unlock(&connects_lock);
	if (done) {
		connecting_free(e->cs);
		free(e);
	}
}

/*
 * Frees the connects of ctx (NULL: every one) that NCCL left in progress.
 * NCCL finalizes a context once no call on it runs; an entry a call still
 * steps is left to that call, which frees it when it ends.  The last
 * finalize (NULL) frees everything: no call may run across it.
 */
static void connects_drop(const void *ctx)
{
	struct connect_entry *gone = NULL;

	pthread_mutex_lock(&connects_lock);
	for (unsigned i = 0; i < CONNECTS_BUCKETS; i++) {
		struct connect_entry **p = &connects[i];

		while (*p) {
			struct connect_entry *e = *p;

			if (ctx && (e->ctx != ctx || e->busy)) {
				p = &e->next;
				continue;
			}
			*p = e->next;
			nconnects--;
			e->next = gone;
			gone = e;
		}
	}
	pthread_mutex_unlock(&connects_lock);
	while (gone) {
		struct connect_entry *e = gone;

		gone = e->next;
		connecting_free(e->cs);
		free(e);
	}
}

/* The layered module's route: it logs its own errors and the route. */
static int route_step(const struct core_rail *rail,
		      struct mesh_connecting *cs, const void *handle,
		      void **send_comm)
{
	const struct mesh_module *d = cs->layer->desc;
	void *mcomm = NULL;
	int err = d->route(cs->layer->mctx, rail->rail, handle, cs->unreached,
			   &cs->route_state, &mcomm);

	if (err == -EAGAIN)
		return 0;
	if (!err && mcomm) {
		struct core_comm_path path = { .module = cs->layer->name,
					       .path_class = "relayed" };

		cs->route_state = NULL;	/* the comm took it */
		*send_comm = comm_new(d, mcomm, &path);
		if (!*send_comm) {
			d->close_send(mcomm);
			return -ENOMEM;
		}
	}
	return err;
}

static int connect_step(const struct core_rail *rail,
			struct mesh_connecting *cs, const void *handle,
			void **send_comm)
{
	int err;

	if (cs->layer)
		return route_step(rail, cs, handle, send_comm);
	if (!cs->dialed) {
		err = core_ctrl_dial_progress(cs->conn);
		if (err == -EAGAIN)
			return 0;
		/* the dialer decides and notes, per address; this is
		 * the one line that says so */
		if (err == -ETIMEDOUT)
			CORE_WARN("connect %s: cannot reach the peer within "
				  "%d ms: tried %s", rail->name,
				  mesh_state->connect_timeout_ms,
				  core_conn_tried(cs->conn));
		else if (err)
			CORE_WARN("connect %s: setup with the peer failed (%s): "
				  "tried %s", rail->name, strerror(-err),
				  core_conn_tried(cs->conn));
		if (err)
			return err;
		cs->dialed = 1;
	}
	return module_step("send", rail, cs->member, cs->conn, &cs->mcomm,
			   send_comm);
}

int mesh_connect(void *ctx, int dev, void *handle, void **send_comm)
{
	const struct core_rail *rail = mesh_rail(dev);
	uint8_t *slot = (uint8_t *)handle + CORE_HANDLE_STATE_OFFSET;
	struct connect_entry *e = NULL;
	struct mesh_connecting *cs;
	bool done;
	int err;

	*send_comm = NULL;
	if (!rail)
		return -EINVAL;
	err = connects_claim(ctx, dev, handle, &e);
	if (err == -EBUSY)
		return 0;	/* another call on this handle steps it */
	if (err) {
		/* whatever the slot held, it was not ours */
		err = connect_start(rail, handle, &cs);
		if (err)
			return err;
		err = connects_add(ctx, dev, handle, cs, &e);
		if (err) {
			connecting_free(cs);
			return err;
		}
		memcpy(slot, &e->key, sizeof(e->key));
	}
	err = connect_step(rail, e->cs, handle, send_comm);
	done = err || *send_comm;
	if (done) {
		if (*send_comm)
			e->cs->mcomm = NULL;	/* now owned by the comm */
		memset(slot, 0, sizeof(e->key));
	}
	connects_release(e, done);
	return err;
}

static const struct core_member *member_by_tag(const struct core_rail *rail,
					       uint16_t tag)
{
	for (int i = 0; i < rail->nmembers; i++)
		if (core_module_tag(rail->members[i].module->name) == tag)
			return &rail->members[i];
	return NULL;
}

/* A connection a layered module set up (a relay's last leg): its accept
 * gets the rail as its device. */
static const struct core_member *layered_by_tag(struct mesh_listen *ml,
						uint16_t tag)
{
	struct core_module *layer = core_layer_module(mesh_state);

	if (!layer || core_module_tag(layer->name) != tag)
		return NULL;
	ml->layered = (struct core_member){ .module = layer,
					    .dev = ml->rail->rail };
	return &ml->layered;
}

int mesh_accept(void *listen_comm, void **recv_comm)
{
	struct mesh_listen *ml = listen_comm;
	int err;

	*recv_comm = NULL;
	if (!ml->conn) {
		err = core_ctrl_accept(ml->lc, mesh_state->connect_timeout_ms,
				       &ml->conn);
		if (err)
			return err == -EAGAIN ? 0 : err;
		ml->member = member_by_tag(ml->rail, ml->conn->module_tag);
		if (!ml->member)
			ml->member = layered_by_tag(ml, ml->conn->module_tag);
		if (!ml->member) {
			CORE_WARN("accept %s: %s asked for a module this rail "
				  "does not have (different module lists on "
				  "the two hosts?)", ml->rail->name,
				  ml->conn->peer_text);
			core_conn_free(ml->conn);
			ml->conn = NULL;
			return -ENOPROTOOPT;
		}
	}
	err = module_step("recv", ml->rail, ml->member, ml->conn, &ml->mcomm,
			  recv_comm);
	if (err || *recv_comm) {
		if (err && !ml->mcomm)
			ml->member->module->desc->abandon(
				ml->member->module->mctx, &ml->conn->ctrl);
		core_conn_free(ml->conn);
		ml->conn = NULL;
		ml->mcomm = NULL;
	}
	return err;
}

int mesh_close_comm(void *comm, int send)
{
	struct core_comm *c = comm;
	int err;

	if (!c)
		return 0;
	err = send ? c->desc->close_send(c->mcomm) :
		     c->desc->close_recv(c->mcomm);
	free(c);
	return err;
}
