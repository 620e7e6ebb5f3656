/* SPDX-License-Identifier: Apache-2.0 */
/*
 * penalty.c -- progressive penalties (see penalty.h for the contract).
 * Invariants: level <= the first level whose period reaches max (more would only make
 * forgiveness slower without a longer block), period <= max_ns; time is monotonic
 * nanoseconds, the factor Q16.16 with unsigned __int128 products (a period is rounded
 * down by < 1 ns per level).
 *
 * Forgiveness counts from the end of the last period, not from the violation: a key that
 * sits out a 1 h block has not behaved for that hour, it was made to wait.
 */
#include "penalty.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "algo/algo_impl.h"

#define PERIOD_MAX (INT64_C(366) * 86400 * SLUICE_NS_PER_S)

void sl_penalty_params_default(sl_penalty_params *p) {
    memset(p, 0, sizeof(*p));
    p->first_ns = 60 * SLUICE_NS_PER_S;
    p->factor_q16 = 2 << 16;
    p->max_ns = 3600 * SLUICE_NS_PER_S;
    p->forgive_after_ns = 86400 * SLUICE_NS_PER_S;
    p->challenge_levels = 0;
}

int sl_penalty_params_check(const sl_penalty_params *p, char *errbuf, size_t errbuf_len) {
    if (p->first_ns <= 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "penalty: first must be positive");
    if (p->max_ns < p->first_ns)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "penalty: max must be at least first");
    if (p->max_ns > PERIOD_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "penalty: max is above 366 days");
    if (p->factor_q16 < (1u << 16) || p->factor_q16 > (16u << 16))
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "penalty: factor must be within [1, 16]");
    if (p->forgive_after_ns <= 0 || p->forgive_after_ns > PERIOD_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "penalty: forgive_after must be within (0, 366 days]");
    return SLUICE_OK;
}

/* Why a loop and not a power: the period saturates at max after at most 64 doublings,
 * and a factor of 1 never grows, so the loop is bounded by the level cap (255) and needs
 * no exponent arithmetic that could overflow. */
int64_t sl_penalty_period(const sl_penalty_params *p, uint32_t level) {
    if (level == 0) return 0;
    int64_t d = p->first_ns;
    for (uint32_t i = 1; i < level && d < p->max_ns; i++) {
        unsigned __int128 n = ((unsigned __int128)(uint64_t)d * p->factor_q16) >> 16;
        d = n >= (unsigned __int128)(uint64_t)p->max_ns ? p->max_ns : (int64_t)n;
    }
    return d > p->max_ns ? p->max_ns : d;
}

/* The first level whose period is max: levels beyond it would only delay forgiveness. */
static uint32_t level_cap(const sl_penalty_params *p) {
    uint32_t l = 1;
    int64_t d = p->first_ns;
    if (p->factor_q16 <= (1u << 16)) return 1; /* never grows: one level says it all */
    while (l < SL_PENALTY_LEVEL_MAX && d < p->max_ns) {
        unsigned __int128 n = ((unsigned __int128)(uint64_t)d * p->factor_q16) >> 16;
        d = n >= (unsigned __int128)(uint64_t)p->max_ns ? p->max_ns : (int64_t)n;
        l++;
    }
    return l;
}

/* Levels held at now: those at the last violation minus one per forgive_after elapsed
 * since the period ended. */
static uint32_t level_at(const sl_penalty_params *p, const sl_penalty_state *s, int64_t now_ns) {
    if (s == NULL || s->level == 0) return 0;
    int64_t from = s->until_ns > s->last_ns ? s->until_ns : s->last_ns;
    if (now_ns <= from) return s->level;
    int64_t spans = (now_ns - from) / p->forgive_after_ns;
    return spans >= (int64_t)s->level ? 0 : s->level - (uint32_t)spans;
}

static uint8_t action_for(const sl_penalty_params *p, uint32_t level) {
    if (level == 0) return SL_PENALTY_NONE;
    return level <= p->challenge_levels ? SL_PENALTY_CHALLENGE : SL_PENALTY_BLOCK;
}

void sl_penalty_check(const sl_penalty_params *p, const sl_penalty_state *s, int64_t now_ns,
                      sl_penalty_result *r) {
    memset(r, 0, sizeof(*r));
    r->level = level_at(p, s, now_ns);
    if (s == NULL || now_ns >= s->until_ns || s->level == 0) return;
    r->action = action_for(p, s->level);
    r->retry_after_ns = s->until_ns - now_ns;
    r->period_ns = sl_penalty_period(p, s->level);
}

void sl_penalty_violation(const sl_penalty_params *p, const sl_penalty_state *s,
                          sl_penalty_state *next, int64_t now_ns, sl_penalty_result *r) {
    if (s != NULL && s->level > 0 && now_ns < s->until_ns) {
        if (next != s) *next = *s;
        sl_penalty_check(p, s, now_ns, r);
        return;
    }
    uint32_t level = level_at(p, s, now_ns) + 1, cap = level_cap(p);
    if (level > cap) level = cap;
    int64_t period = sl_penalty_period(p, level), until;
    if (__builtin_add_overflow(now_ns, period, &until)) until = INT64_MAX;
    sl_penalty_state n = {.until_ns = until, .last_ns = now_ns, .level = level, .pad = 0};
    *next = n;
    memset(r, 0, sizeof(*r));
    r->action = action_for(p, level);
    r->level = level;
    r->retry_after_ns = until - now_ns;
    r->period_ns = period;
}

bool sl_penalty_pass(const sl_penalty_params *p, const sl_penalty_state *s,
                     sl_penalty_state *next, int64_t now_ns) {
    if (s == NULL) return false;
    if (next != s) *next = *s;
    if (s->level == 0 || now_ns >= s->until_ns || action_for(p, s->level) != SL_PENALTY_CHALLENGE)
        return false;
    next->until_ns = now_ns;
    return true;
}

int64_t sl_penalty_fresh_at(const sl_penalty_params *p, const sl_penalty_state *s, int64_t now_ns) {
    if (s == NULL || s->level == 0) return now_ns;
    int64_t from = s->until_ns > s->last_ns ? s->until_ns : s->last_ns, at;
    unsigned __int128 span = (unsigned __int128)s->level * (uint64_t)p->forgive_after_ns;
    if (span > (unsigned __int128)INT64_MAX || __builtin_add_overflow(from, (int64_t)span, &at)) return INT64_MAX;
    return at > now_ns ? at : now_ns;
}

void sl_penalty_rebase(sl_penalty_state *s, int64_t delta_ns) {
    int64_t a, b;
    if (__builtin_add_overflow(s->until_ns, delta_ns, &a)) a = delta_ns < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
    if (__builtin_add_overflow(s->last_ns, delta_ns, &b)) b = delta_ns < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
    s->until_ns = a;
    s->last_ns = b;
}
