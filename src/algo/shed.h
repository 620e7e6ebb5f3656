/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shed.h -- priority shedding: classes of requests (critical, default, sheddable, batch, in
 * a configurable order) share one budget; as it fills, lower classes are rejected first, and
 * a class may hold a reserve no other class can take. A pure function of
 * (capacity, use, per-class use, class, cost) -> admit/reject and why, so it composes with
 * any budget: fixed or adaptive concurrency (capacity = the limit, use = in flight) and rate
 * budgets (capacity = burst, use = burst - tokens available). Shares in parts per million.
 * Thread-safety: stateless; sl_shed_use (the per-class counters) is guarded by its caller.
 */
#ifndef SL_ALGO_SHED_H
#define SL_ALGO_SHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_SHED_MAX_CLASSES 8
#define SL_PPM UINT32_C(1000000)

typedef struct sl_shed_class {
    uint32_t fill_ppm;    /* rejected when admitting would fill the budget beyond this share
                             (batch 500000, sheddable 700000, default 900000, critical SL_PPM) */
    uint32_t reserve_ppm; /* share only this class may use (0 = none) */
} sl_shed_class;

/* Classes in priority order: index 0 is the most important. */
typedef struct sl_shed_params {
    uint32_t nclasses;
    sl_shed_class cls[SL_SHED_MAX_CLASSES];
} sl_shed_params;

typedef enum sl_shed_reason {
    SL_SHED_ADMIT = 0,    /* admitted */
    SL_SHED_PRIORITY = 1, /* shed: the budget is filled beyond this class's share */
    SL_SHED_RESERVED = 2, /* shed: what is left is other classes' reserve */
    SL_SHED_FULL = 3      /* the budget itself is exhausted (any class would be refused) */
} sl_shed_reason;

typedef struct sl_shed_verdict {
    bool admit;
    uint8_t cls;       /* the class decided (the class shed when !admit) */
    uint8_t reason;    /* sl_shed_reason */
    uint64_t room;     /* units this class could take now (before this request) */
    uint32_t fill_ppm; /* budget fill before this request, ppm of capacity */
} sl_shed_verdict;

/* Per-class use of a concurrency budget (what is in flight per class). Rate budgets can
 * pass NULL instead: every other class's reserve is then treated as unused (a floor the
 * class cannot take), and a class's own reserve gives it nothing beyond its fill share. */
typedef struct sl_shed_use {
    uint32_t by_class[SL_SHED_MAX_CLASSES]; /* slots in flight per class (32 bytes) */
} sl_shed_use;

/* The defaults for n classes (1..4): critical 100 %, default 90 %, sheddable 70 %,
 * batch 50 %, no reserves; the first n of them. */
void sl_shed_params_default(sl_shed_params *p, uint32_t n);

/* SLUICE_OK, or SLUICE_EINVAL with a reason: 1..8 classes, shares <= 100 %, fill shares
 * not increasing with lower priority (a lower class is never admitted where a higher one
 * would be shed), reserves summing to at most 100 %. */
int sl_shed_params_check(const sl_shed_params *p, char *errbuf, size_t errbuf_len);

/* Units class `cls` may take now from a budget of `capacity` with `used` units taken
 * (used_by_class may be NULL, see sl_shed_use). An out-of-range class gets the lowest. */
uint64_t sl_shed_room(const sl_shed_params *p, uint64_t capacity, uint64_t used,
                      const sl_shed_use *use, uint32_t cls);

/* Decides `cost` units for class `cls`. Nothing is consumed: the caller takes the units
 * from the budget (and sl_shed_take) only if everything else in the decision admits. */
void sl_shed_decide(const sl_shed_params *p, uint64_t capacity, uint64_t used,
                    const sl_shed_use *use, uint32_t cls, uint64_t cost, sl_shed_verdict *v);

/* Per-class accounting for concurrency budgets (saturating, never below zero). */
void sl_shed_take(sl_shed_use *use, uint32_t cls, uint32_t n);
void sl_shed_give(sl_shed_use *use, uint32_t cls, uint32_t n);

#endif /* SL_ALGO_SHED_H */
