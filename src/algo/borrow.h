/*
 * borrow.h -- borrowing between tiers of a hierarchy (platform > product > tenant): each tier
 * has a guaranteed share of its parent and a cap; a tier may use its siblings' idle shares up
 * to its cap, and when an owner within its share is refused because siblings hold borrowed
 * units, its parent stops all new borrowing until the units come back (reclaim).
 * The core (sl_borrow_decide) is a pure function of each tier's use and reclaim mark, so the
 * engine can count use with its own limits; sl_borrow_state (32 bytes per tier key) counts
 * here instead. A decision reads and writes every tier on its path, all or nothing. Units: whatever the budget counts (requests, slots),
 * nanoseconds of the monotonic clock. Thread-safety: the caller holds every tier's state on
 * the path (the memory store locks their shards together, as for any multi-limit decision).
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
    int64_t reclaim_ns; /* how long one refused owner stops new borrowing at its parent; a
                           waiting owner renews it with every refused attempt */
} sl_borrow_params;

/* Per tier key. */
typedef struct sl_borrow_state {
    int64_t window_start_ns;  /* the window `use` belongs to (rate budgets) */
    uint64_t use;             /* units held by this tier, its children's included */
    uint64_t lent;            /* units its children hold beyond their shares */
    int64_t reclaim_until_ns; /* until then no child may go beyond its share */
} sl_borrow_state;

typedef enum sl_borrow_reason {
    SL_BORROW_ADMIT = 0,
    SL_BORROW_CAP = 1,     /* the tier at `level` would exceed its cap */
    SL_BORROW_FULL = 2,    /* the root's budget is spent */
    SL_BORROW_RECLAIM = 3  /* borrowing is stopped at `level`'s parent: an owner waits */
} sl_borrow_reason;

typedef struct sl_borrow_verdict {
    bool admit;
    uint8_t reason;          /* sl_borrow_reason */
    int8_t level;            /* the tier that refused (0 = leaf), -1 when admitted */
    int8_t reclaim_level;    /* >= 0: refused while within its share below this tier, so this
                                tier must reclaim (sl_borrow_apply marks it), else -1 */
    int8_t borrow_level;     /* the lowest tier this request takes beyond its share, -1 none */
    uint64_t borrowed;       /* units of it taken beyond that tier's share */
    int64_t retry_after_ns;  /* rate budgets: until the window turns; 0 = unknown (concurrency) */
} sl_borrow_verdict;

/* SLUICE_OK, or SLUICE_EINVAL with a reason: 1..SL_BORROW_MAX_DEPTH tiers, leaf first,
 * share <= cap for each, the root's cap == share, and each tier's share no more than its
 * parent's (a sibling-by-sibling check, sum of shares <= parent share, is the config's). */
int sl_borrow_path_check(const sl_borrow_tier *tiers, unsigned depth, char *errbuf,
                         size_t errbuf_len);

/* The core, for tiers whose use is counted elsewhere (the engine's own limits: a tier's
 * limit is its cap, the root's its share, and use = limit - remaining before this request):
 * whether `cost` units fit along tiers[0] (leaf) .. tiers[depth-1] (root) given each tier's
 * use and reclaim mark (INT64_MIN = none). Pure. */
void sl_borrow_decide(const sl_borrow_tier *tiers, const uint64_t *use, const int64_t *reclaim_until_ns,
                      unsigned depth, int64_t now_ns, uint64_t cost, sl_borrow_verdict *v);

/* The reclaim mark a refused owner leaves on the tier at verdict.reclaim_level. */
int64_t sl_borrow_mark(const sl_borrow_params *p, int64_t reclaim_until_ns, int64_t now_ns);

/* The same with the counting done here (sl_borrow_state per tier: use per window or in
 * flight): states[i] (NULL = fresh) belong to tiers[i]. Changes nothing. */
void sl_borrow_check(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                     const sl_borrow_state *const *states, unsigned depth, int64_t now_ns,
                     uint64_t cost, sl_borrow_verdict *v);

/* Applies a verdict: admitted -> every tier takes the units; refused with reclaim_level >= 0
 * -> that tier stops borrowing for reclaim_ns. Call it with the same arguments as the check
 * and only when the whole decision is final (other limits may still refuse: then apply a
 * copy of the verdict with admit = false, so the reclaim mark is kept and nothing taken). */
void sl_borrow_apply(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                     sl_borrow_state *const *states, unsigned depth, int64_t now_ns, uint64_t cost,
                     const sl_borrow_verdict *v);

/* Gives `cost` units back along the path (a finished request of a concurrency budget; a
 * refund within the same window of a rate budget). Never below zero. */
void sl_borrow_release(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                       sl_borrow_state *const *states, unsigned depth, int64_t now_ns,
                       uint64_t cost);

/* When the state is equivalent to fresh (the store may drop it). */
int64_t sl_borrow_fresh_at(const sl_borrow_params *p, const sl_borrow_state *s, int64_t now_ns);

#endif /* SL_ALGO_BORROW_H */
