/* SPDX-License-Identifier: MIT */
#include "fabric.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_log.h"
#include "params.h"

uint64_t core_fabric_id(uint64_t dc, uint64_t max_rails, uint64_t rail)
{
	return dc * max_rails + rail;
}

uint64_t core_fabric_dc(uint64_t fabric_id, uint64_t max_rails)
{
	return fabric_id / max_rails;
}

uint64_t core_fabric_rail(uint64_t fabric_id, uint64_t max_rails)
{
	return fabric_id % max_rails;
}

enum core_path_class core_path_class(uint64_t a, uint64_t b,
				     uint64_t max_rails)
{
	if (core_fabric_rail(a, max_rails) != core_fabric_rail(b, max_rails))
		return CORE_PATH_DISCONNECTED;
	if (core_fabric_dc(a, max_rails) != core_fabric_dc(b, max_rails))
		return CORE_PATH_CROSS_DC;
	return CORE_PATH_SAME_DC;
}

const char *core_path_class_name(enum core_path_class c)
{
	static const char *const names[] = { "same-DC", "cross-DC",
					     "disconnected" };

	return c < CORE_PATH_COUNT ? names[c] : "?";
}

int core_path_preference(const struct core_config *cfg,
			 enum core_path_class c, const char *const **names)
{
	static const enum core_param_id ids[] = { CP_PREFER_SAME_DC,
						  CP_PREFER_CROSS_DC,
						  CP_PREFER_DISCONNECTED };
	const struct core_value *v = &core_config_core(cfg)->values[ids[c]];

	*names = v->items;
	return v->nitems;
}

const struct core_member *core_rail_member(const struct core_rail *rail,
					   const char *name)
{
	for (int i = 0; i < rail->nmembers; i++)
		if (!strcmp(rail->members[i].module->name, name))
			return &rail->members[i];
	return NULL;
}

static int add_member(struct core_rail *rail, struct core_module *mod,
		      int dev)
{
	struct core_member *m;
	int err;

	/* The listen handle names every member for the peer to choose
	 * from; a rail with more than it holds is refused here, at init. */
	if (rail->nmembers == CORE_RAIL_MEMBERS_MAX) {
		CORE_WARN("rail %d: more than %d members: a listen handle (%d "
			  "bytes) names at most %d modules; adding %s does not "
			  "fit", rail->rail, CORE_HANDLE_MEMBERS_MAX,
			  CORE_HANDLE_SIZE, CORE_HANDLE_MEMBERS_MAX, mod->name);
		return -EINVAL;
	}
	if (core_rail_member(rail, mod->name)) {
		CORE_WARN("rail %d: two members from module %s; a rail takes "
			  "one device per module", rail->rail, mod->name);
		return -EINVAL;
	}
	m = &rail->members[rail->nmembers];
	memset(m, 0, sizeof(*m));
	m->module = mod;
	m->dev = dev;
	err = mod->desc->get_properties(mod->mctx, dev, &m->props);
	if (err) {
		CORE_WARN("module %s: properties of device %d: %s", mod->name,
			  dev, strerror(-err));
		return err;
	}
	rail->nmembers++;
	return 0;
}

static struct core_module *find_ready(struct core_module *mods, int nmods,
				      const char *name, int len)
{
	for (int i = 0; i < nmods; i++)
		if ((int)strlen(mods[i].name) == len &&
		    !strncmp(mods[i].name, name, (size_t)len) &&
		    mods[i].status == CORE_MODULE_READY)
			return &mods[i];
	return NULL;
}

static int find_device(struct core_module *mod, const char *name)
{
	for (int d = 0; d < mod->ndevs; d++) {
		struct mesh_dev_props p;

		if (!mod->desc->get_properties(mod->mctx, d, &p) &&
		    !strcmp(p.name, name))
			return d;
	}
	return -1;
}

/* One rails entry: "tcp-xdc/eth0+ib-fabric/mlx5_0". */
static int parse_rail(const char *spec, struct core_module *mods, int nmods,
		      struct core_rail *rail)
{
	const char *p = spec;

	while (*p) {
		const char *plus = strchr(p, '+');
		const char *end = plus ? plus : p + strlen(p);
		const char *slash = memchr(p, '/', (size_t)(end - p));
		struct core_module *mod;
		char dev[MESH_NAME_MAX];
		int d, err;

		if (!slash || slash == p || slash + 1 >= end ||
		    end - slash > (long)sizeof(dev)) {
			CORE_WARN("rails entry '%s': expected module/device "
				  "joined by '+'", spec);
			return -EINVAL;
		}
		mod = find_ready(mods, nmods, p, (int)(slash - p));
		if (!mod) {
			CORE_WARN("rails entry '%s': module '%.*s' is not loaded "
				  "or has no devices", spec, (int)(slash - p), p);
			return -EINVAL;
		}
		snprintf(dev, sizeof(dev), "%.*s", (int)(end - slash - 1),
			 slash + 1);
		d = find_device(mod, dev);
		if (d < 0) {
			CORE_WARN("rails entry '%s': module %s has no device '%s'",
				  spec, mod->name, dev);
			return -EINVAL;
		}
		err = add_member(rail, mod, d);
		if (err)
			return err;
		p = plus ? plus + 1 : end;
	}
	return 0;
}

static int auto_rails(struct core_module *mods, int nmods,
		      struct core_rail *rails, int nrails)
{
	for (int r = 0; r < nrails; r++)
		for (int i = 0; i < nmods; i++) {
			int err;

			if (mods[i].status != CORE_MODULE_READY ||
			    r >= mods[i].ndevs)
				continue;
			err = add_member(&rails[r], &mods[i], r);
			if (err)
				return err;
		}
	return 0;
}

/* A member may declare its fabricId (ib-fabric's HCA fabric field); it
 * then sets the rail's rail and dc, and members must agree. */
static int declared_fabric_id(struct core_rail *rail)
{
	const struct mesh_dev_props *first = NULL;

	for (int i = 0; i < rail->nmembers; i++) {
		const struct mesh_dev_props *m = &rail->members[i].props;

		if (!m->fabric_id_set)
			continue;
		if (first && m->fabric_id != first->fabric_id) {
			CORE_WARN("rail %d: %s and %s declare fabricIds %llu and "
				  "%llu; one rail has one fabricId", rail->rail,
				  first->name, m->name,
				  (unsigned long long)first->fabric_id,
				  (unsigned long long)m->fabric_id);
			return -EINVAL;
		}
		first = m;
	}
	if (first)
		rail->fabric_id = first->fabric_id;
	return 0;
}

/*
 * What NCCL is told about a rail must hold for every member it may end up
 * using: capabilities are the intersection, limits the minimum.  The speed
 * is that of the member preferred for same-DC peers, which carry the bulk
 * of a job's traffic.
 */
static void rail_props(const struct core_config *cfg, struct core_rail *rail)
{
	struct mesh_dev_props *p = &rail->props;
	const struct core_member *first = &rail->members[0];
	const struct core_member *fast = NULL;
	const char *const *pref;
	int npref = core_path_preference(cfg, CORE_PATH_SAME_DC, &pref);
	int len = 0;

	*p = first->props;
	p->naddrs = 0;
	for (int i = 0; i < npref && !fast; i++)
		fast = core_rail_member(rail, pref[i]);
	p->speed_mbps = (fast ? fast : first)->props.speed_mbps;
	for (int i = 0; i < rail->nmembers; i++) {
		const struct mesh_dev_props *m = &rail->members[i].props;

		p->ptr_support &= m->ptr_support;
		p->reg_is_global &= m->reg_is_global;
		p->force_flush |= m->force_flush;
		if (m->latency_us > p->latency_us)
			p->latency_us = m->latency_us;
#define MIN_INTO(f) if (m->f < p->f) p->f = m->f
		MIN_INTO(max_comms);
		MIN_INTO(max_recvs);
		MIN_INTO(max_p2p_bytes);
		MIN_INTO(max_coll_bytes);
#undef MIN_INTO
		for (int a = 0; a < m->naddrs; a++)
			if (p->naddrs < MESH_DEV_ADDRS_MAX)
				p->addrs[p->naddrs++] = m->addrs[a];
		len += snprintf(p->name + len,
				len < MESH_NAME_MAX ? MESH_NAME_MAX - (size_t)len : 0,
				"%s%s/%s", i ? "+" : "",
				rail->members[i].module->name, m->name);
	}
	p->guid = 0x4d45534800000000ull | (uint64_t)rail->rail;
	snprintf(rail->name, sizeof(rail->name), "mesh%d", rail->rail);
}

int core_fabric_build(const struct core_config *cfg, struct core_module *mods,
		      int nmods, struct core_rail **rails_out, int *nrails_out)
{
	const struct core_value *spec = &core_config_core(cfg)->values[CP_RAILS];
	uint64_t dc = (uint64_t)core_config_core(cfg)->values[CP_DC].num;
	uint64_t max_rails =
		(uint64_t)core_config_core(cfg)->values[CP_MAX_RAILS].num;
	struct core_rail *rails;
	int nrails = spec->nitems, err = 0;

	if (!nrails)
		for (int i = 0; i < nmods; i++)
			if (mods[i].status == CORE_MODULE_READY &&
			    mods[i].ndevs > nrails)
				nrails = mods[i].ndevs;
	if ((uint64_t)nrails > max_rails) {
		CORE_WARN("%d rails but max_rails is %llu", nrails,
			  (unsigned long long)max_rails);
		return -EINVAL;
	}
	rails = calloc((size_t)nrails + 1, sizeof(*rails));
	if (!rails)
		return -ENOMEM;
	for (int r = 0; r < nrails; r++) {
		rails[r].rail = r;
		rails[r].fabric_id = core_fabric_id(dc, max_rails, (uint64_t)r);
	}
	if (spec->nitems)
		for (int r = 0; r < nrails && !err; r++)
			err = parse_rail(spec->items[r], mods, nmods, &rails[r]);
	else
		err = auto_rails(mods, nmods, rails, nrails);
	if (err) {
		free(rails);
		return err;
	}
	for (int r = 0; r < nrails && !err; r++)
		err = declared_fabric_id(&rails[r]);
	if (err) {
		free(rails);
		return err;
	}
	for (int r = 0; r < nrails; r++)
		rail_props(cfg, &rails[r]);
	*rails_out = rails;
	*nrails_out = nrails;
	return 0;
}
