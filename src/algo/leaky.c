/* SPDX-License-Identifier: Apache-2.0 */
/*
 * leaky.c -- leaky bucket as a shaper: nginx limit_req's arithmetic (SPECS.md §7.4) in
 * micro-units and ns. The bucket drains at limit units per period_ns; its capacity,
 * burst (0 means limit), is how many units it holds *including the one being served*.
 * A request of cost n at `now`: drained = max(0, level - elapsed * rate); new = drained + n;
 * rejected iff new > capacity, or max_delay_ns > 0 and the delay exceeds it; otherwise
 * level = new and the request is held for delay_ns = the time to drain the queue ahead of
 * it (drained). A fresh key is empty, so its first request passes without delay.
 * Mapping to nginx: our level is nginx's "excess" + 1 request (nginx does not count the
 * request in service), so nginx `burst=N` is our burst N+1, and nginx `burst=0` (reject
 * anything sooner than 1/rate after the last) is our burst 1. nginx's `delay=` threshold
 * (pass the first few queued at once) has no equivalent here; max_delay_ns bounds the wait.
 * The drain is truncated to the micro-unit (conservative: never faster than the ideal).
 */
#include "algo_impl.h"

typedef __int128 i128;

/* Highest level kept (settle charges beyond it are dropped), in micro-units. */
#define LEAKY_LEVEL_MAX INT64_C(4000000000000000000)

int sl_leaky_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf,
                  size_t errbuf_len) {
    if (spec->max_delay_ns < 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                             "max_delay must not be negative (got %lld ns)",
                             (long long)spec->max_delay_ns);
    out->limit = spec->limit;
    out->capacity = spec->burst ? spec->burst : spec->limit;
    out->period_ns = spec->period_ns;
    out->max_delay_ns = spec->max_delay_ns;
    out->state_size = sizeof(sl_leaky_state);
    return SLUICE_OK;
}

static int64_t clamp64(i128 v) {
    if (v > INT64_MAX) return INT64_MAX;
    if (v < INT64_MIN) return INT64_MIN;
    return (int64_t)v;
}

/* The smallest d (ns) whose drain, floor(d * limit * M / period), reaches amount_u. */
static i128 ns_for(const sl_limit *lim, i128 amount_u) {
    if (amount_u <= 0) return 0;
    i128 den = (i128)lim->limit * SL_MICRO;
    return (amount_u * lim->period_ns + den - 1) / den;
}

/* Micro-units drained in `el` ns (truncated); callers cap el first. */
static i128 drain_u(const sl_limit *lim, i128 el) {
    return el * lim->limit * SL_MICRO / lim->period_ns;
}

static sl_leaky_state load(const void *state, int64_t now) {
    if (state == NULL) return (sl_leaky_state){now, 0};
    return *(const sl_leaky_state *)state;
}

static int64_t level_at(const sl_limit *lim, const sl_leaky_state *s, int64_t now) {
    i128 el = (i128)now - s->last_ns;
    if (el <= 0 || s->level_u <= 0) return s->level_u > 0 ? s->level_u : 0;
    if (el >= ns_for(lim, s->level_u)) return 0;
    return (int64_t)(s->level_u - drain_u(lim, el));
}

/* ns from `now` until the stored level has drained (0 when it has): the delay of a
 * request admitted now, and the reset-after of an unchanged state. Taken from last_ns,
 * not from the truncated level at now, so it is exact for the stored state. */
static int64_t drained_after(const sl_limit *lim, const sl_leaky_state *s, int64_t now) {
    i128 at = (i128)s->last_ns + ns_for(lim, s->level_u);
    return at > now ? clamp64(at - now) : 0;
}

static void report(const sl_limit *lim, int64_t level_u, sl_result *r) {
    i128 room = (i128)lim->capacity * SL_MICRO - level_u;
    r->remaining = room > 0 ? (uint64_t)(room / SL_MICRO) : 0;
}

/*
 * Exact retry-after: from the stored state (l0 at last) the level at t is
 * l0 - drain_u(t - last), so "new <= capacity" holds from drain >= l0 - (capacity-cost),
 * and "delay <= max_delay" from t >= last + ns_for(l0) - max_delay; both are monotone
 * in t, so the later of the two is the answer.
 */
static int64_t retry_after(const sl_limit *lim, const sl_leaky_state *s, int64_t now,
                           uint64_t cost) {
    i128 l0 = s->level_u > 0 ? s->level_u : 0;
    i128 el = ns_for(lim, l0 - ((i128)lim->capacity - cost) * SL_MICRO);
    if (lim->max_delay_ns > 0) {
        i128 el2 = ns_for(lim, l0) - lim->max_delay_ns;
        if (el2 > el) el = el2;
    }
    return clamp64((i128)s->last_ns + el - now);
}

bool sl_leaky_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     uint64_t cost, sl_result *r) {
    int64_t t = now.mono_ns;
    sl_leaky_state s = load(state, t);
    int64_t level = level_at(lim, &s, t);
    int64_t delay = drained_after(lim, &s, t);
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    i128 nu = (i128)level + (i128)cost * SL_MICRO;
    if (cost > lim->capacity) {
        r->retry_after_ns = SLUICE_NEVER;
    } else if (nu > (i128)lim->capacity * SL_MICRO ||
               (lim->max_delay_ns > 0 && delay > lim->max_delay_ns)) {
        r->retry_after_ns = retry_after(lim, &s, t, cost);
    } else {
        r->allowed = true;
        r->delay_ns = delay;
        if (cost > 0) {
            sl_leaky_state n = {t, (int64_t)nu};
            *(sl_leaky_state *)next = n;
            report(lim, n.level_u, r);
            r->reset_after_ns = drained_after(lim, &n, t);
            return true;
        }
    }
    *(sl_leaky_state *)next = s;
    report(lim, level, r);
    r->reset_after_ns = delay;
    return false;
}

/* Adjusts the level: charges add (past the capacity if need be), refunds remove, >= 0. */
void sl_leaky_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     int64_t delta, sl_result *r) {
    int64_t t = now.mono_ns;
    sl_leaky_state s = load(state, t);
    i128 level = (i128)level_at(lim, &s, t) + (i128)delta * SL_MICRO;
    if (level < 0) level = 0;
    if (level > LEAKY_LEVEL_MAX) level = LEAKY_LEVEL_MAX;
    sl_leaky_state n = {t, (int64_t)level};
    *(sl_leaky_state *)next = n;
    sl_leaky_decide(lim, next, next, now, 0, r);
}

/* Empty once the level has drained. */
int64_t sl_leaky_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    const sl_leaky_state *s = state;
    return clamp64((i128)s->last_ns + ns_for(lim, s->level_u));
}

void sl_leaky_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim;
    sl_leaky_state *s = state;
    s->last_ns = clamp64((i128)s->last_ns + delta_ns);
}

/* The level is what is used: kept as it is, clamped to the new capacity (absolute usage:
 * raising a limit and reverting it changes nothing). */
void sl_leaky_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                    sluice_time now) {
    int64_t t = now.mono_ns;
    sl_leaky_state s = load(state, t);
    i128 level = level_at(old, &s, t);
    if (level > (i128)lim->capacity * SL_MICRO) level = (i128)lim->capacity * SL_MICRO;
    sl_leaky_state n = {t, (int64_t)level};
    *(sl_leaky_state *)next = n;
}
