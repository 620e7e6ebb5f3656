/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decision.h -- rules shared by every store's decisions (memory in decide.c, Redis in
 * src/store/redis/request.c), so both name the same deciding limit.
 */
#ifndef SL_DECISION_H
#define SL_DECISION_H

#include <stdbool.h>

#include "sluice.h"

/* ---- which window decides: the one rule (issue 25) ----------------------------------
 * Used by the stores (the deciding item of a decision), the engine (the verdict's
 * deciding window), the metrics (the window a policy's count goes to) and gRPC (the item
 * that speaks for a descriptor). Window a "decides over" window b when, in this order:
 *   1. a is enforced and b is a shadow window (SL_RANK_SHADOW);
 *   2. a limits and b does not (SL_RANK_LIMITS: rejected, or would have been);
 *   3. both limit: a's retry-after is longer (SLUICE_NEVER is the longest of all);
 *   4. neither limits: a's remaining/limit share is smaller (closer to exhaustion); a
 *      limit of 0 is a share of 0 (a window that admits nothing is exhausted), exact
 *      (cross-multiplied in 128 bits, no division).
 * Ties (equal retry, equal share, both shares 0) keep b: the earlier window decides. */
#define SL_RANK_LIMITS 0x1u
#define SL_RANK_SHADOW 0x2u

static inline bool sl_window_decides_over(const sluice_result *a, unsigned af, const sluice_result *b,
                                          unsigned bf) {
    if ((af ^ bf) & SL_RANK_SHADOW) return !(af & SL_RANK_SHADOW);
    if ((af ^ bf) & SL_RANK_LIMITS) return (af & SL_RANK_LIMITS) != 0;
    if (af & SL_RANK_LIMITS) {
        if (a->retry_after_ns == SLUICE_NEVER) return b->retry_after_ns != SLUICE_NEVER;
        if (b->retry_after_ns == SLUICE_NEVER) return false;
        return a->retry_after_ns > b->retry_after_ns;
    }
    if (b->limit == 0 || b->remaining == 0) return false; /* b's share is 0: nothing is below */
    if (a->limit == 0) return true;
    return (unsigned __int128)a->remaining * b->limit < (unsigned __int128)b->remaining * a->limit;
}

/* The flags of a store result: it limits when it was not admitted. */
static inline unsigned sl_rank_of(const sluice_result *r) { return r->allowed ? 0u : SL_RANK_LIMITS; }

/* The deciding item of a filled decision (sl_window_decides_over over its results). */
int sl_decision_deciding(const sluice_decision *d);

#endif /* SL_DECISION_H */
