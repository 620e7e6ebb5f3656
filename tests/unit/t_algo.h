/* SPDX-License-Identifier: Apache-2.0 */
/*
 * t_algo.h -- helpers shared by the algorithm tests: compile a limit from a spec, and ask
 * whether a request would be admitted from a state without changing it.
 */
#ifndef SL_T_ALGO_H
#define SL_T_ALGO_H

#include <stdbool.h>
#include <string.h>

#include "algo.h"
#include "t.h"

/* The compiled parameters of `spec`; a spec the algorithm refuses fails the case. */
static inline sl_limit t_limit(sluice_limit_spec spec) {
    sl_limit lim;
    char err[256];
    memset(&lim, 0, sizeof(lim));
    int rc = sl_limit_init(&lim, &spec, NULL, err, sizeof(err));
    if (rc != SLUICE_OK) T_FAIL("sl_limit_init: %s", err);
    return lim;
}

/* Whether `cost` at `now` is admitted from state `st` (lim->state_size bytes), decided
 * on a copy; checks that the decision never writes through its input state. */
static inline bool t_admits(const sl_limit *lim, const void *st, sluice_time now, uint64_t cost) {
    static _Alignas(8) unsigned char copy[16 + 8 * SL_SLIDING_LOG_MAX + 64], next[sizeof(copy)];
    memcpy(copy, st, lim->state_size);
    sl_result r;
    sl_algo_decide(lim, copy, next, now, cost, &r);
    T_CHECK(memcmp(copy, st, lim->state_size) == 0);
    return r.allowed;
}

#endif /* SL_T_ALGO_H */
