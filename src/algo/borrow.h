/* SPDX-License-Identifier: Apache-2.0 */
/*
 * borrow.h -- borrowing between tiers of a hierarchy (platform > product > tenant): each tier
 * has a guaranteed share of its parent and a cap; a tier may use its siblings' idle shares up
 * to its cap. When an owner asking within its share is refused because siblings hold borrowed
 * units, its parent stops all new borrowing (reclaim) for as long as that owner keeps asking
 * or using its share, so the borrowed units only flow back.
 * The core (sl_borrow_decide) is a pure function of each tier's use and marks, so the engine
 * can count use with its own limits; sl_borrow_state (40 bytes per tier key) counts here
 * instead. A decision reads and writes every tier on its path, all or nothing. Units: whatever
 * the budget counts (requests, slots); nanoseconds of the monotonic clock. Thread-safety: the
 * caller holds every tier's state on the path (the memory store locks their shards together,
 * as for any multi-limit decision).
 */
#ifndef SL_ALGO_BORROW_H
#define SL_ALGO_BORROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_BORROW_MAX_DEPTH 8

/* One tier's place in its parent. The root's share is the whole budget (its cap == share). */
typedef struct sl_borrow_tier {
    uint64_t share; /* units guaranteed to it: the parent never lends them for good */
    uint64_t cap;   /* most units it may hold, borrowed ones included (>= share) */
} sl_borrow_tier;

typedef struct sl_borrow_params {
    int64_t window_ns;  /* > 0: a rate budget, use counts per window aligned to multiples of
                           window_ns on the monotonic clock (every tier the same window);
                           0: a concurrency budget, units come back by sl_borrow_release */
    int64_t reclaim_ns; /* how long a reclaim lasts after the owner's last refused or
                           in-share request (>= window_ns for rate budgets, so it spans a
                           window boundary) */
} sl_borrow_params;

/* What the decision needs to know of one tier now. */
typedef struct sl_borrow_mark {
    int64_t reclaim_until_ns; /* as a parent: until then no child may go beyond its share */
    int64_t owed_until_ns;    /* as a child: it is an owner being repaid until then (its
                                 in-share requests renew its parent's reclaim) */
} sl_borrow_mark;

/* Per tier key, when the counting is done here. */
typedef struct sl_borrow_state {
    int64_t window_start_ns; /* the window `use` belongs to (rate budgets) */
    uint64_t use;            /* units held by this tier, its children's included */
    uint64_t lent;           /* units its children hold beyond their shares (a metric) */
    sl_borrow_mark mark;     /* times, not counts: they survive a window change */
} sl_borrow_state;

typedef enum sl_borrow_reason {
    SL_BORROW_ADMIT = 0,
    SL_BORROW_CAP = 1,     /* the tier at `level` would exceed its cap */
    SL_BORROW_FULL = 2,    /* the root's budget is spent */
    SL_BORROW_RECLAIM = 3  /* the tier at `level` would go beyond its share while its parent
                              reclaims for an owner */
} sl_borrow_reason;

typedef struct sl_borrow_verdict {
    bool admit;
    uint8_t reason;         /* sl_borrow_reason */
    int8_t level;           /* the tier that refused (0 = leaf), -1 when admitted */
    int8_t reclaim_level;   /* >= 1: this tier reclaims for its child on the path (an owner
                               refused within its share, or a repaid owner admitted within
                               it): sl_borrow_apply marks both; -1 none */
    int8_t borrow_level;    /* the lowest tier this request takes beyond its share, -1 none */
    uint64_t borrowed;      /* units of it taken beyond that tier's share */
    int64_t retry_after_ns; /* rate budgets: until the window turns; 0 = unknown */
} sl_borrow_verdict;

/* SLUICE_OK, or SLUICE_EINVAL with a reason: 1..SL_BORROW_MAX_DEPTH tiers, leaf first,
 * share <= cap for each, the root's cap == share, no tier's share or cap above its
 * parent's (the sibling check, sum of shares <= parent share, is the config's). */
int sl_borrow_path_check(const sl_borrow_tier *tiers, unsigned depth, char *errbuf,
                         size_t errbuf_len);

/* The core, for tiers whose use is counted elsewhere (the engine's own limits: a tier's
 * limit is its cap, the root's its share, and use = limit - remaining before this request):
 * whether `cost` units fit along tiers[0] (leaf) .. tiers[depth-1] (root) given each tier's
 * use and marks (fresh marks: INT64_MIN). Pure. */
void sl_borrow_decide(const sl_borrow_tier *tiers, const uint64_t *use, const sl_borrow_mark *marks,
                      unsigned depth, int64_t now_ns, uint64_t cost, sl_borrow_verdict *v);

/* Applies verdict.reclaim_level to the marks of that tier (parent) and of the tier below it
 * (the owner). Part of sl_borrow_apply; for callers counting elsewhere. */
void sl_borrow_mark_apply(const sl_borrow_params *p, sl_borrow_mark *parent, sl_borrow_mark *owner,
                          int64_t now_ns);

/* The same with the counting done here: states[i] (NULL = fresh) belong to tiers[i].
 * Changes nothing. */
void sl_borrow_check(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                     const sl_borrow_state *const *states, unsigned depth, int64_t now_ns,
                     uint64_t cost, sl_borrow_verdict *v);

/* Applies a verdict: admitted -> every tier takes the units; reclaim_level >= 0 -> the marks.
 * Call it with the same arguments as the check, once the whole decision is final (when
 * another limit refuses, apply a copy with admit = false: marks kept, nothing taken). */
void sl_borrow_apply(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                     sl_borrow_state *const *states, unsigned depth, int64_t now_ns, uint64_t cost,
                     const sl_borrow_verdict *v);

/* Gives `cost` units back along the path (a finished request of a concurrency budget; a
 * refund within the same window of a rate budget). Never below zero. */
void sl_borrow_release(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                       sl_borrow_state *const *states, unsigned depth, int64_t now_ns,
                       uint64_t cost);

/* When the state is equivalent to fresh (the store may drop it); INT64_MAX while slots of
 * a concurrency budget are held. */
int64_t sl_borrow_fresh_at(const sl_borrow_params *p, const sl_borrow_state *s, int64_t now_ns);

#endif /* SL_ALGO_BORROW_H */
