/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_borrow.h -- a tier idle then busy, shared by tests/unit/algo/test_borrow.c (asserts) and
 * tests/sim/capacity_sim.c (figures, plot). Fake clock, no randomness.
 *
 * Rate budget, 1 s windows: a platform of 100/s; products A and B with shares of 50 and caps
 * of 80. B asks 250/s all along; A is idle until 5.3 s, then asks 83/s (more than its share).
 * Counted per window: what each got, B's highest use, and when A was first and last refused
 * as an owner (while within its share).
 */
#ifndef SL_SIM_BORROW_H
#define SL_SIM_BORROW_H

#include <string.h>

#include "algo/borrow.h"
#include "sluice.h"

#define SIM_BORROW_WINDOWS 12

typedef struct sim_borrow_run {
    sl_borrow_params params;
    sl_borrow_tier a[2], b[2];
    int64_t a_from_ns;
    /* outputs */
    uint64_t got_a[SIM_BORROW_WINDOWS], got_b[SIM_BORROW_WINDOWS];
    uint64_t max_use_b[SIM_BORROW_WINDOWS];
    uint64_t refused_a_owner;            /* A refused while within its share */
    int64_t first_owner_refusal_ns;      /* -1: never */
    int64_t last_owner_refusal_ns;       /* -1: never */
} sim_borrow_run;

static inline void sim_borrow_default(sim_borrow_run *r) {
    memset(r, 0, sizeof(*r));
    r->params = (sl_borrow_params){1 * SLUICE_NS_PER_S, 1 * SLUICE_NS_PER_S};
    r->a[0] = (sl_borrow_tier){50, 80};
    r->a[1] = (sl_borrow_tier){100, 100};
    r->b[0] = r->a[0];
    r->b[1] = r->a[1];
    r->a_from_ns = 5300 * SLUICE_NS_PER_MS;
}

static inline void sim_borrow(sim_borrow_run *r) {
    sl_borrow_state sa = {0, 0, 0, {INT64_MIN, INT64_MIN}}, sb = sa, sroot = sa;
    sl_borrow_state *pa[2] = {&sa, &sroot}, *pb[2] = {&sb, &sroot};
    const int64_t tick = 2 * SLUICE_NS_PER_MS;
    r->first_owner_refusal_ns = r->last_owner_refusal_ns = -1;
    for (int64_t now = 0; now < SIM_BORROW_WINDOWS * SLUICE_NS_PER_S; now += tick) {
        int w = (int)(now / SLUICE_NS_PER_S);
        sl_borrow_verdict v;
        if ((now / tick) % 2 == 0) { /* B: 250/s */
            sl_borrow_check(&r->params, r->b, (const sl_borrow_state *const *)pb, 2, now, 1, &v);
            sl_borrow_apply(&r->params, r->b, pb, 2, now, 1, &v);
            r->got_b[w] += v.admit;
            if (sb.use > r->max_use_b[w]) r->max_use_b[w] = sb.use;
        }
        if (now >= r->a_from_ns && (now / tick) % 6 == 1) { /* A: 83/s */
            sl_borrow_check(&r->params, r->a, (const sl_borrow_state *const *)pa, 2, now, 1, &v);
            if (!v.admit && v.reclaim_level >= 0) {
                r->refused_a_owner++;
                if (r->first_owner_refusal_ns < 0) r->first_owner_refusal_ns = now;
                r->last_owner_refusal_ns = now;
            }
            sl_borrow_apply(&r->params, r->a, pa, 2, now, 1, &v);
            r->got_a[w] += v.admit;
        }
    }
}

#endif /* SL_SIM_BORROW_H */
