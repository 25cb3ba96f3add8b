/* SPDX-License-Identifier: MIT */
/*
 * Process-wide state, built once: config, modules, rails.  Both the NCCL
 * plugin and meshinfo build it with the same code.
 */
#ifndef CORE_STATE_H
#define CORE_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "auth.h"
#include "config.h"
#include "fabric.h"
#include "handle.h"
#include "loader.h"
#include "params.h"

/* Where peers must dial us when they cannot reach us directly (NAT). */
struct core_advertise {
	int naddrs;
	struct mesh_addr addrs[CORE_HANDLE_ADDRS_MAX];
	int port_offset;
	int nports;
	struct { uint16_t listen, external; } *ports;
	bool local;		/* also our own addresses, after these */
};

/* The external port a peer dials for our listen port `port`: its
 * advertise_ports entry, else port + advertise_port_offset.  May fall
 * outside 1..65535; the config check and listen both refuse that. */
int core_advertise_port(const struct core_advertise *adv, int port);

/* The algorithm a channel rule is for (nccl_channels_by_size's prefix).
 * The rules' parser (validate.c) owns the names; the tuner above reads
 * them, so the state never reaches up into the tuner. */
enum core_algo { CORE_ALGO_ANY, CORE_ALGO_TREE, CORE_ALGO_RING, CORE_ALGOS };

/* The prefix naming algo ("tree"); NULL for CORE_ALGO_ANY. */
const char *core_algo_name(enum core_algo algo);

/* One entry of nccl_channels_by_size: collectives NCCL runs with `algo`,
 * of more bytes than the entry before for that algorithm and at most
 * max_bytes, are given `channels` channels (0: NCCL's own count). */
struct core_channel_rule {
	uint64_t max_bytes;
	int channels;
	enum core_algo algo;
};

/* The whole list, sizes rising per algorithm. */
struct core_channel_rules {
	int n;
	struct core_channel_rule rule[CORE_CHANNEL_RULES_MAX];
};

/* What the plugin's tuner tells NCCL; what a tuner context copies. */
struct core_tuning {
	struct core_channel_rules channels;	/* nccl_channels_by_size */
	uint64_t ll_max;			/* nccl_ll_max; 0: NCCL's */
	uint32_t xdc_rtt_ms;			/* xdc_rtt_ms; 0: none */
	bool algo_by_distance;			/* nccl_algo_by_distance */
};

struct core_state {
	struct core_config *cfg;
	struct core_module *modules;
	int nmodules;
	/* Installed but not enabled modules whose config section was
	 * checked against their table (never initialised). */
	struct core_module *inspected;
	int ninspected;
	struct core_rail *rails;
	int nrails;
	uint64_t dc;
	uint64_t max_rails;
	int connect_timeout_ms;
	long long nccl_buffsize;	/* 0: leave NCCL's default */
	long long nccl_buffsize_max;	/* what a long WAN raises it to */
	struct core_tuning tuning;
	int port_low, port_high;	/* 0, 0: any port */
	struct core_advertise advertise;
	struct core_auth_key auth_key;	/* len 0: no authentication */
	bool usable;			/* no config error, >= 1 rail */
	bool rails_bad;			/* rails failed its syntax check */
	bool modules_bad;		/* modules broke a rule of its own */
};

/*
 * Reads the config (path NULL: the usual search), loads the modules and
 * builds the rails.  Always returns a state (NULL only when out of memory);
 * `usable` says whether NCCL may use it, and every reason it is not was
 * logged once.
 */
struct core_state *core_state_build(const char *conf_path);
void core_state_free(struct core_state *st);

/* What core_offer_nccl_buffsize did (core/mesh.c): nccl_buffsize given to
 * NCCL as NCCL_BUFFSIZE, or why not. */
enum core_nccl_offer {
	CORE_NCCL_OFFER_SET,
	CORE_NCCL_OFFER_OFF,		/* nccl_buffsize = 0 */
	CORE_NCCL_OFFER_USER_SET,	/* NCCL_BUFFSIZE already set */
	CORE_NCCL_OFFER_OTHER_NET,	/* NCCL_NET names another network */
	CORE_NCCL_OFFER_FAILED,
};
enum core_nccl_offer core_offer_nccl_buffsize(const struct core_state *st);
/* The NCCL_BUFFSIZE that offer gives: nccl_buffsize, or more for a long
 * WAN declared in xdc_rtt_ms (core/net/offer.c). */
long long core_nccl_buffsize(const struct core_state *st);

/*
 * The core's rules (core/validate.c).  core_validate_config fills dc,
 * max_rails, ports, advertise and the key from the resolved core values
 * and checks what a value's type cannot (modules, rails syntax, port
 * mapping, the key file); core_validate_rails checks, once the modules
 * are loaded, that every rails member names a ready module's device and
 * that some module in the list loaded at all.
 * Each records config errors at the value's location; -EINVAL when any.
 */
int core_validate_config(struct core_state *st);
int core_validate_rails(struct core_state *st);

#endif
