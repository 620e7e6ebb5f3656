/* SPDX-License-Identifier: Apache-2.0 */
/*
 * algo.h -- the algorithms as pure state transitions:
 *   (limit parameters, state, now, cost) -> (new state, result)
 * No clock reads, no allocation, no locks, integer arithmetic only (nanoseconds,
 * micro-units). A NULL/absent state means "fresh" (a key never seen); every algorithm
 * can say from when its state is equivalent to fresh, so the store may drop it.
 */
#ifndef SL_ALGO_H
#define SL_ALGO_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "adaptive.h"
#include "borrow.h"
#include "penalty.h"
#include "shed.h"
#include "sluice.h"

struct sl_tz; /* src/core/tz.h */

/* Fixed-point scale of token and level amounts: 1 unit = SL_MICRO micro-units. */
#define SL_MICRO INT64_C(1000000)

/* Sliding log: the largest limit it accepts (one int64 timestamp per admitted unit). */
#define SL_SLIDING_LOG_MAX 1024

/* Concurrency: leases are counted in this many time buckets of
 * w = ceil(lease / (SL_CONC_BUCKETS - 1)) each, so a lost lease is reclaimed after more
 * than lease and at most lease + w (1.2 x lease for 6 buckets); see conc.c for why. */
#define SL_CONC_BUCKETS 6

/* ---- per-algorithm state (what the store keeps per key) ------------------------ */

typedef struct sl_fixed_state {
    int64_t window_start_ns; /* start of the window `count` belongs to */
    uint64_t count;
} sl_fixed_state;

typedef struct sl_sliding_state {
    int64_t window_start_ns; /* start of the current window */
    uint64_t cur;            /* units admitted in the current window */
    uint64_t prev;           /* units admitted in the window before it */
} sl_sliding_state;

typedef struct sl_log_state {
    uint32_t head;  /* index of the oldest timestamp */
    uint32_t count; /* timestamps held */
    int64_t ts[];   /* ring of capacity `limit`, one per admitted unit */
} sl_log_state;

typedef struct sl_tb_state {
    int64_t last_ns;    /* time of `tokens_u` */
    int64_t tokens_u;   /* tokens in micro-units at last_ns */
} sl_tb_state;

typedef struct sl_gcra_state {
    int64_t tat_ns;     /* theoretical arrival time */
} sl_gcra_state;

typedef struct sl_leaky_state {
    int64_t last_ns;    /* time of `level_u` */
    int64_t level_u;    /* queued work in micro-units at last_ns (nginx's "excess") */
} sl_leaky_state;

typedef struct sl_conc_state {
    int64_t base_ns;    /* start of bucket 0: leases acquired in [base + i*w, base + (i+1)*w) */
    uint32_t counts[SL_CONC_BUCKETS];
} sl_conc_state;

typedef struct sl_quota_state {
    int64_t period_start_s; /* UTC seconds at which the current calendar period began */
    uint64_t used;
} sl_quota_state;

/* Adaptive concurrency (capacity.c): the concurrency algorithm's leases, the controller,
 * and the slots in flight per priority class (144 bytes). */
typedef struct sl_aconc_state {
    sl_conc_state conc;
    sl_adapt_state ad;
    sl_shed_use use;
} sl_aconc_state;

/* ---- capacity protection (issue 17; capacity.c) ----------------------------------------- */

/* An internal algorithm (not in sluice.h): the progressive penalty of one offender key
 * (state sl_penalty_state). Its decision admits unless the key is blocked or challenged;
 * violations and passes are applied by the store's decision rules (store/group.c). */
#define SL_ALGO_PENALTY ((sluice_algo)100)

/* Extra state some limits keep after their algorithm's own, in this order: */
#define SL_TAIL_SHED 0x1u  /* sl_shed_use: slots in flight per class (concurrency + classes) */
#define SL_TAIL_MARKS 0x2u /* sl_borrow_mark: a borrowing tier's reclaim marks */

/* What a limit adds for capacity protection; all zero for a plain limit. */
typedef struct sl_cap {
    uint8_t tail;          /* SL_TAIL_* */
    uint16_t base_size;    /* the algorithm's own state bytes (state_size without tails) */
    int64_t reclaim_ns;    /* borrowing tiers: how long a reclaim lasts */
    sl_shed_params shed;   /* classes sharing this budget (nclasses 0: none) */
    sl_adapt_params adapt; /* SLUICE_ADAPTIVE_CONCURRENCY */
    sl_penalty_params pen; /* SL_ALGO_PENALTY */
} sl_cap;

/* What a decision tells about the capacity mechanisms of one item (store results). */
#define SL_CAPI_SHED 0x1u    /* shed_* are set (the item has a class) */
#define SL_CAPI_ADAPT 0x2u   /* limit/noload/in_flight of an adaptive limit */
#define SL_CAPI_PENALTY 0x4u /* pen_* are set */
#define SL_CAPI_BORROW 0x8u  /* borrow_* are set */
typedef struct sl_cap_info {
    uint8_t kind;          /* SL_CAPI_* */
    uint8_t shed_cls;      /* the item's class (index) */
    uint8_t shed_reason;   /* sl_shed_reason: 0 admitted, else why its class was shed */
    uint8_t pen_action;    /* sl_penalty_action after this decision */
    uint8_t borrow_reason; /* sl_borrow_reason: 0, or why this tier refused */
    uint8_t violation;     /* penalty: this decision recorded a violation */
    uint16_t pen_level;
    uint32_t in_flight;    /* concurrency: slots held after this decision */
    uint32_t limit;        /* adaptive: the limit enforced now */
    int64_t noload_ns;     /* adaptive: the estimated no-load latency */
} sl_cap_info;

/* ---- compiled parameters --------------------------------------------------------- */

typedef struct sl_limit {
    sluice_algo algo;
    uint32_t state_size;    /* bytes of state per key (sl_*_state, sliding log: + 8*limit) */
    uint64_t limit;         /* spec.limit */
    uint64_t capacity;      /* what the client sees as the limit (burst or limit) */
    int64_t period_ns;      /* spec.period_ns */
    int64_t max_delay_ns;   /* leaky bucket */
    int64_t lease_ns;       /* concurrency */
    sluice_period quota_period;
    const struct sl_tz *tz; /* quota; NULL = UTC */
    /* derived by sl_limit_init: */
    int64_t emission_ns;    /* GCRA: period/limit, truncated (redis-cell) */
    bool cell;              /* GCRA for CL.THROTTLE: redis-cell's integer results (gcra.c) */
    /* last, so the fields every decision reads share the first cache line */
    sl_cap cap;             /* capacity protection (zero for a plain limit) */
} sl_limit;

typedef struct sl_result {
    bool allowed;
    uint64_t limit;
    uint64_t remaining;
    int64_t reset_after_ns;
    int64_t retry_after_ns; /* 0 when allowed, SLUICE_NEVER when it can never fit */
    int64_t delay_ns;
    uint64_t lease;
} sl_result;

/* Validates `spec` and fills `out` (tz must already be resolved by the caller for
 * quotas). Returns SLUICE_OK or SLUICE_EINVAL/ERANGE with a message in errbuf. */
int sl_limit_init(sl_limit *out, const sluice_limit_spec *spec, const struct sl_tz *tz,
                  char *errbuf, size_t errbuf_len);

/* A GCRA limit with redis-cell's CL.THROTTLE arithmetic: burst max_burst + 1,
 * T = period/count truncated to the ns with no accuracy check, and `remaining` computed
 * from whole microseconds as redis-cell computes it (see gcra.c). Fills `out` (algo,
 * capacity, ...); SLUICE_EINVAL/ERANGE with a message as sl_limit_init. */
int sl_gcra_cell_init(sl_limit *out, int64_t max_burst, int64_t count, int64_t period_s,
                      char *errbuf, size_t errbuf_len);

/* Decides `cost` units at `now`. `state` is the stored state or NULL when the key is
 * fresh; `next` (state_size bytes, may alias `state`) receives the state to store if
 * the caller commits. Returns true when `next` differs from the stored state (an
 * admission that consumed something, or a rejected/peek decision that only normalised
 * the state returns false: nothing needs writing). */
bool sl_algo_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    uint64_t cost, sl_result *r);

/* Settles a reservation: `delta` > 0 charges more (even past the limit), < 0 refunds
 * (never above capacity, never into a window or period that has passed). */
void sl_algo_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    int64_t delta, sl_result *r);

/* Whether a refund of a reservation made at `reserved_at` is still valid at `now` (the
 * window or calendar period that counted it is still current; always for buckets). */
bool sl_algo_refundable(const sl_limit *lim, sluice_time reserved_at, sluice_time now);

/* Concurrency: releases `lease` (from sl_result.lease). Returns false when the lease
 * already expired (nothing changed). */
bool sl_conc_release(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     uint64_t lease);

/* ---- capacity protection (capacity.c) ---------------------------------------------------- */

/* Validates `cap` for `spec` and fills out->cap (after sl_limit_init's own checks): an
 * adaptive limit's controller, a penalty's parameters, classes and tails; state_size
 * grows by the tails. SLUICE_OK or an error with a message. */
int sl_cap_init(sl_limit *out, const sluice_limit_spec *spec, const sl_cap *cap, char *errbuf,
                size_t errbuf_len);

/* The per-class use of a limit's state (adaptive: its own; concurrency: its tail), NULL
 * when it has none. The borrowing marks of a tier's state, NULL when it has none. */
sl_shed_use *sl_cap_use(const sl_limit *lim, void *state);
sl_borrow_mark *sl_cap_marks(const sl_limit *lim, void *state);

/* A decision of `cost` for class `cls` (0: no class, else the class index + 1): priority
 * shedding over the limit's budget (concurrency: the limit and the slots in flight; a
 * rate: its capacity and capacity - remaining, from a cost-0 peek into `peek`), then the
 * algorithm's decision; an admitted class's slots are counted in the state and its lease
 * carries the class. x receives the class, the reason and the adaptive view. Same
 * contract as sl_algo_decide otherwise. */
bool sl_cap_decide(const sl_limit *lim, const void *state, void *next, void *peek, sluice_time now,
                   uint64_t cost, uint32_t cls, sl_result *r, sl_cap_info *x);

/* Releases `lease` of a concurrency or adaptive limit (sl_conc_release's contract); with a
 * sample (has_sample) an adaptive limit's controller learns from its latency (negative:
 * unknown) and outcome (sl_adapt_outcome). x (may be NULL) receives the view after. */
bool sl_cap_release(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    uint64_t lease, bool has_sample, int64_t latency_ns, unsigned outcome,
                    sl_cap_info *x);

/* Capacity parameters in a snapshot (store/memory/snapshot.c): whether a limit has any, and
 * SL_CAP_WORDS integers that rebuild them (sl_cap_init checks what decode returns). */
#define SL_CAP_WORDS 42
bool sl_cap_present(const sl_limit *lim);
size_t sl_cap_encode(const sl_limit *lim, uint64_t w[SL_CAP_WORDS]);
int sl_cap_decode(const uint64_t *w, size_t n, sl_cap *out);

/* The adaptive view of a state (limit, no-load latency, slots in flight) at now. */
void sl_cap_view(const sl_limit *lim, const void *state, sluice_time now, sl_cap_info *x);

/* Concurrency internals shared with the adaptive algorithm (conc.c): the state normalised
 * at now, returning the slots its expired leases held; the slots in flight; the lease of
 * `cost` slots just added to the newest bucket of a normalised state. */
uint32_t sl__conc_norm(const sl_limit *lim, const void *state, sluice_time now, sl_conc_state *s);
uint64_t sl__conc_in_flight(const sl_conc_state *s);
uint64_t sl__conc_lease(const sl_limit *lim, const sl_conc_state *s, uint64_t cost);
/* Retry-after for `need` more free slots (the oldest buckets expire first), or SLUICE_NEVER. */
int64_t sl__conc_retry(const sl_limit *lim, const sl_conc_state *s, sluice_time now, uint64_t need);
int64_t sl__conc_until_empty(const sl_limit *lim, const sl_conc_state *s, sluice_time now);
/* A lease's slots and class bits: limits with classes keep the class in the top 3 bits of
 * the 24-bit slot field (so slots <= SL_LEASE_CLASS_SLOTS). */
#define SL_LEASE_CLASS_SHIFT 21
#define SL_LEASE_CLASS_SLOTS ((UINT64_C(1) << SL_LEASE_CLASS_SHIFT) - 1)
bool sl__conc_classes(const sl_limit *lim);
/* The lease as a limit without classes reads it: class bits of a lease issued before a
 * reload removed the classes are dropped (see conc.c). */
uint64_t sl__conc_lease_plain(const sl_limit *lim, uint64_t lease);

/* The monotonic time from which `state` is equivalent to a fresh one (the store may
 * drop it then). Quotas answer in monotonic time too, computed from `now`. */
int64_t sl_algo_fresh_at(const sl_limit *lim, const void *state, sluice_time now);

/* Shifts every monotonic timestamp inside `state` by `delta_ns` (snapshots store
 * wall-clock-relative times and rebase them on restore). */
void sl_algo_rebase(const sl_limit *lim, void *state, int64_t delta_ns);

/* Carries state over when a limit changes under the same name (reload): the absolute
 * usage is kept, clamped to the new capacity, so raising a limit never penalises a
 * client and raising then reverting it is neutral (100 with 60 used -> 200 -> 100 leaves
 * 60 used). Concurrency keeps its in-flight slots. `next` has lim->state_size bytes. */
void sl_algo_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                   sluice_time now);

#endif /* SL_ALGO_H */
