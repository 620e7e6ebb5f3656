/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h -- the interface every store implements (the memory store here, the Redis
 * store in src/store/redis) and the engine decides through: one request per decision, answered
 * by a completion that runs at once (memory) or later, from the lane's event loop (Redis).
 * A "lane" is the store's per-thread handle: the sluice_store itself for the memory
 * store, a worker's client for Redis. Items name limiters that outlive the call (the
 * caller holds them; see sl_limiter_ref for what outlives the caller).
 */
#ifndef SL_STORE_STORE_H
#define SL_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"
#include "sluice.h"

/* ---- one decision ------------------------------------------------------------------- */

#define SL_SGROUPS 32       /* group 0 (enforced) and up to 31 shadow groups */
#define SL_SI_CHARGE 0x1u   /* charged even when the decision rejects (count_rejected) */
#define SL_SREQ_REJECT 0x1u /* the decision rejects whatever its items say (an Envoy rule
                               with requests_per_unit 0): only charges apply */
#define SL_SREQ_PASS 0x2u   /* not a decision: a solved challenge; each penalty item's
                               challenge period ends (allowed: it was in one) */
/* Capacity roles of an item (sl_sitem.cap; store/group.c applies them): */
#define SL_SIC_PENALTY 0x1u /* the penalty of its pgrp: refuses while the offender is blocked
                               or challenged; a refusal by another item of its pgrp records a
                               violation (written even though the decision rejects) */
#define SL_SIC_SAMPLE 0x2u  /* release: latency_ns and outcome are a sample */

/* One (limiter, key, cost) of a decision. */
typedef struct sl_sitem {
    const sluice_limiter *lim;
    const void *key;
    size_t key_len;
    uint64_t cost;
    uint64_t limit; /* 0: the limiter's own; else this item's limit (fixed windows only: an
                       Envoy limit override, counted in the unit's one shared window) */
    uint8_t group;  /* 0: enforced, all-or-nothing; g > 0: shadow group g, consumed only
                       when group 0 admits and every item of group g admits */
    uint8_t flags;  /* SL_SI_* */
    /* capacity protection (0 for plain items; enforced items only) */
    uint8_t cls;     /* priority class + 1 (0: none): shedding over this item's budget */
    uint8_t cap;     /* SL_SIC_* */
    uint8_t pgrp;    /* penalty group: a penalty item watches the other items of its group */
    uint8_t bpath;   /* borrowing: the tiers of one path share a bpath (0: none) */
    uint8_t blevel;  /* borrowing: 0 = leaf ... the path's root */
    uint8_t outcome; /* release with SL_SIC_SAMPLE: sluice_outcome */
    uint64_t share;  /* borrowing: this tier's guaranteed share (the root: its capacity) */
    int64_t latency_ns; /* release with SL_SIC_SAMPLE: the request's latency (< 0: unknown) */
    /* per-key overrides (store/memory/override.h; the memory store only): */
    const sl_limit *params; /* NULL: the limiter's own numbers; else an override's (same
                               algorithm and state size: the same counters, other numbers) */
    const sl_limit *carry;  /* NULL, or the numbers the stored state was written under: it
                               is carried to this item's numbers before deciding */
    const struct sl_ovr_guard *guard; /* with params or carry: claimed under the shard
                               locks (a change since the override was read: SL_OVR_EAGAIN) */
} sl_sitem;

/*
 * The answer. Per item: when consumed (group 0 admitted; a shadow group that admitted
 * with it; a charge), what the decision left; otherwise the true state (nothing decided
 * twice: a store reports it in the same request), with `allowed` telling whether the
 * item alone would have admitted its cost and, when not, the exact retry-after.
 */
typedef struct sl_sresult {
    int allowed;        /* group 0 admitted: the decision's answer */
    uint32_t groups_ok; /* bit g: shadow group g admitted (consumed when `allowed`) */
    bool local;         /* decided in this instance's memory at its share (on_store_error:
                           local, src/store/redis/local.c): the shared store was unreachable */
    size_t n;
    sluice_result r[SLUICE_MAX_ITEMS];
    /* per item: what the capacity mechanisms said (kind 0: nothing; set for every item of
     * a decision that went through store/group.c, and for a release) */
    struct sl_cap_info x[SLUICE_MAX_ITEMS];
} sl_sresult;

/* Whether item i consumed (its cost was taken or, for a charge, counted). */
static inline bool sl_sresult_consumed(const sl_sresult *r, const sl_sitem *it) {
    if (it->group == 0) return r->allowed || (it->flags & SL_SI_CHARGE) != 0;
    return r->allowed && (r->groups_ok >> it->group & 1u);
}

/* rc: SLUICE_OK (res valid for the duration of the call), or SLUICE_ESTORE (unreachable,
 * timed out: the policy's failure mode applies) or another error; res NULL then. */
typedef void (*sl_store_cb)(void *ud, int rc, const sl_sresult *res);

/*
 * A store's operations. Each calls `cb` exactly once: before returning when the store
 * answers at once (memory; a Redis answer from its local caches; any argument error),
 * otherwise later from the lane's event loop.
 */
typedef struct sl_store_ops {
    const char *name;  /* "memory", "redis": metrics and logs */
    bool immediate;    /* every answer comes before the call returns (synchronous use ok) */
    bool shared;       /* state shared between instances: single-use tokens are claimed in it */
    void (*decide)(void *lane, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                  sl_store_cb cb, void *ud);
    /* Settles a reservation of item->cost units made at `reserved_at` to `actual`: refunds
     * only while the window that counted it lasts; res->r[0] the state after. */
    void (*settle)(void *lane, const sl_sitem *item, uint64_t actual, sluice_time reserved_at,
                  sluice_time now, sl_store_cb cb, void *ud);
    /* Releases a concurrency lease (res->r[0].allowed 0: it had already expired). */
    void (*release)(void *lane, const sl_sitem *item, uint64_t lease, sluice_time now,
                   sl_store_cb cb, void *ud);
    /* Forgets every item's state (costs ignored). */
    void (*reset)(void *lane, const sl_sitem *items, size_t n, sluice_time now, sl_store_cb cb,
                 void *ud);
    /* Claims operation `op` (a bit) of settle/release token `id` for ttl_ns: res->allowed
     * 1 the first time anywhere, 0 after. NULL when tokens are this process's own. */
    void (*claim)(void *lane, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now,
                 sl_store_cb cb, void *ud);
    /* Optional (NULL: none): n independent one-item decisions (group 0, no flags, no
     * limit override) in order, answered at once into out[]; returns how many were
     * decided (k < n: item k failed with the error sluice_decide_batch describes). For
     * pipelined requests: the store can overlap their memory accesses. */
    int (*decide_batch)(void *lane, const sluice_item *items, size_t n, sluice_time now,
                        sluice_result *out);
    /* Optional (NULL: every limit): whether this store can decide limit `lim` (SLUICE_OK),
     * else why not into why[len]. Asked for each window when a config is loaded, so a
     * limit the store cannot represent refuses the start or the reload, instead of
     * failing every decision that reaches it. */
    int (*check)(const sluice_limiter *lim, char *why, size_t len);
} sl_store_ops;

/* The memory store (lane: the sluice_store). */
extern const sl_store_ops sl_memory_ops;

/* The memory store's release, with an adaptive limit's sample (store/memory/decide.c). */
int sl_mem_release(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                   uint64_t lease, bool has_sample, int64_t latency_ns, unsigned outcome,
                   sluice_time now, struct sl_cap_info *x);

/* Direct form of the memory store's decide (the lane's answer, synchronously). */
int sl_mem_decide(sluice_store *st, const sl_sitem *items, size_t n, unsigned flags,
                  sluice_time now, sl_sresult *out);

#endif /* SL_STORE_STORE_H */
