/* SPDX-License-Identifier: Apache-2.0 */
/*
 * algo_impl.h -- what each algorithm file provides to the dispatcher in algo.c.
 * Same contracts as the sl_algo_* functions in algo.h, one set per algorithm:
 *   fixed.c sliding.c log.c tb.c gcra.c leaky.c conc.c quota.c, capacity.c (aconc, pen)
 * sl_X_init validates the algorithm-specific fields of `spec` and fills `out`
 * (algo, limit, capacity, period_ns, state_size, ...); tz is resolved by the caller.
 */
#ifndef SL_ALGO_IMPL_H
#define SL_ALGO_IMPL_H

#include <stdio.h>

#include "algo.h"

#define SL_ALGO_DECLARE(X)                                                                   \
    int sl_##X##_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf,            \
                      size_t errbuf_len);                                                    \
    bool sl_##X##_decide(const sl_limit *lim, const void *state, void *next, sluice_time now, \
                         uint64_t cost, sl_result *r);                                       \
    void sl_##X##_settle(const sl_limit *lim, const void *state, void *next, sluice_time now, \
                         int64_t delta, sl_result *r);                                       \
    int64_t sl_##X##_fresh_at(const sl_limit *lim, const void *state, sluice_time now);      \
    void sl_##X##_rebase(const sl_limit *lim, void *state, int64_t delta_ns);                \
    void sl_##X##_carry(const sl_limit *old, const void *state, const sl_limit *lim,         \
                        void *next, sluice_time now);

SL_ALGO_DECLARE(fixed)
SL_ALGO_DECLARE(sliding)
SL_ALGO_DECLARE(log)
SL_ALGO_DECLARE(tb)
SL_ALGO_DECLARE(gcra)
SL_ALGO_DECLARE(leaky)
SL_ALGO_DECLARE(conc)
SL_ALGO_DECLARE(quota)
SL_ALGO_DECLARE(aconc)   /* capacity.c: adaptive concurrency */
SL_ALGO_DECLARE(pen)     /* capacity.c: SL_ALGO_PENALTY */

/* capacity.c: the tails after an algorithm's state (SL_TAIL_*), kept by the dispatcher:
 * after a decision or settle wrote next's own part, its tails are copied from `state`
 * (fresh when state is NULL) and a class count clamped to the slots in flight. */
void sl__cap_tail(const sl_limit *lim, const void *state, void *next);
int64_t sl__cap_tail_fresh_at(const sl_limit *lim, const void *state, int64_t at);
void sl__cap_tail_rebase(const sl_limit *lim, void *state, int64_t delta_ns);
/* After a carry wrote next's own part: tails from the old state when it had them (NULL
 * state: fresh tails; also writes a fresh own part when the algorithm changed). */
void sl__cap_tail_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                        sluice_time now);
/* A reload between concurrency and adaptive concurrency (either way): next keeps the
 * slots in flight and their classes; false (nothing written) for any other pair. */
bool sl__cap_conc_cross(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                        sluice_time now);

/* The start of the wall-clock-aligned window of `period` ns holding `wall`:
 * floor(wall / period) * period, also before 1970. Fixed and sliding windows use it so
 * every instance and every restart agree on the boundaries. */
static inline int64_t sl_window_start(int64_t wall, int64_t period) {
    int64_t q = wall / period;
    if (wall % period < 0) q--;
    return (int64_t)((__int128)q * period);
}

/* The parameters of the window algorithms: `limit` per window of `period_ns`. */
static inline int sl_window_init(sl_limit *out, const sluice_limit_spec *spec,
                                 uint32_t state_size) {
    out->limit = spec->limit;
    out->capacity = spec->limit;
    out->period_ns = spec->period_ns;
    out->state_size = state_size;
    return SLUICE_OK;
}

/* Formats an error into errbuf (when not NULL) and returns `code`. */
int sl_algo_error(char *errbuf, size_t errbuf_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* SL_ALGO_IMPL_H */
