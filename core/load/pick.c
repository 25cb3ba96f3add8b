/* SPDX-License-Identifier: MIT */
/*
 * Which member of a rail carries a connection to a peer: the one NCCL's
 * connect uses, and the one a layered module asks for through the host's
 * leg services, so both decide alike.
 */
#include "pick.h"

#include <stdbool.h>
#include <stdio.h>

static int handle_lists(const struct core_handle *h, const char *name)
{
	uint16_t tag = core_module_tag(name);

	for (int i = 0; i < h->nmembers; i++)
		if (h->members[i] == tag)
			return 1;
	return 0;
}

/* What the members asked so far refused: each member is asked once, though
 * the preference and the rail may both name it. */
struct refusals {
	char *text;
	size_t cap, len;
	bool asked[CORE_RAIL_MEMBERS_MAX];
};

/* "no module reaches the peer: a: why; b: why" */
static void refusal_note(struct refusals *r, const char *module,
			 const char *why)
{
	if (r->len < r->cap)
		r->len += (size_t)snprintf(r->text + r->len, r->cap - r->len,
					   "%s%s: %s", r->len ? "; " :
					   "no module reaches the peer: ",
					   module, why);
}

/* Whether member i may serve the peer: listed in its handle (when there is
 * one) and, where the module can tell (reach), able to reach its addresses. */
static bool member_serves(const struct core_rail *rail, int i,
			  const struct core_handle *h, struct refusals *r)
{
	const struct core_member *m = &rail->members[i];
	const struct mesh_module *d = m->module->desc;
	char why[512] = "";

	if (r->asked[i])
		return false;
	r->asked[i] = true;
	if (h->nmembers && !handle_lists(h, d->name))
		return false;
	if (!d->reach(m->module->mctx, m->dev, h->addrs, h->naddrs, why,
		      sizeof(why)))
		return true;
	refusal_note(r, d->name, why[0] ? why : "unreachable");
	return false;
}

const struct core_member *core_pick_member(const struct core_state *st,
					   const struct core_rail *rail,
					   const struct core_handle *h,
					   char *why, size_t cap)
{
	enum core_path_class cls = core_path_class(rail->fabric_id,
						   h->fabric_id, st->max_rails);
	const char *const *pref;
	int npref = core_path_preference(st->cfg, cls, &pref);
	struct refusals refused = { .text = why, .cap = cap };
	char members[256] = "";
	size_t len = 0;

	if (cap)
		why[0] = '\0';
	for (int i = 0; i < npref; i++) {
		const struct core_member *m = core_rail_member(rail, pref[i]);

		if (m && member_serves(rail, (int)(m - rail->members), h,
				       &refused))
			return m;
	}
	/* Inside a DC any shared module will do, listed or not (a new
	 * module works without editing the list); across DCs only those
	 * the operator named. */
	for (int i = 0; cls == CORE_PATH_SAME_DC && i < rail->nmembers; i++)
		if (member_serves(rail, i, h, &refused))
			return &rail->members[i];
	if (refused.len)
		return NULL;
	for (int i = 0; i < rail->nmembers; i++)
		len += (size_t)snprintf(members + len, sizeof(members) - len,
					"%s%s", i ? "," : "",
					rail->members[i].module->name);
	snprintf(why, cap, "no module serves a %s peer (fabricId %llu -> "
		 "%llu): this rail has [%s], the preference for %s lists %d "
		 "module(s), and the peer must have the same one",
		 core_path_class_name(cls),
		 (unsigned long long)rail->fabric_id,
		 (unsigned long long)h->fabric_id, members,
		 core_path_class_name(cls), npref);
	return NULL;
}
