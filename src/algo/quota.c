/* SPDX-License-Identifier: Apache-2.0 */
/*
 * quota.c -- a budget of `limit` units per calendar period (hour, day, ISO week, month)
 * in the limit's time zone (lim->tz, NULL = UTC), counted on the wall clock.
 * The state is (period start in UTC seconds, used); a later period starts at 0. Period
 * boundaries come from sl_cal_* (tz.c), so 23- and 25-hour days and month lengths are
 * exact. Retry-after of a refused request is the start of the next period.
 * Time steps: periods are calendar alignment, so they follow the wall clock. A stored
 * period later than the wall clock's (a step back, or a snapshot from a host whose clock
 * was ahead) is state from the future: its `used` is moved into the period in force now
 * and written back, so a key waits at most until that period ends (one period) instead of
 * until the wall clock reaches the stored one; a step forward into a later period starts
 * it fresh (at most one fresh period gained).
 */
#include "algo_impl.h"
#include "tz.h"

static int64_t wall_s(sluice_time now) {
    int64_t q = now.wall_ns / SLUICE_NS_PER_S;
    return (now.wall_ns % SLUICE_NS_PER_S < 0) ? q - 1 : q;
}

/* Nanoseconds from now until UTC second `s` (saturating; periods are far from the
 * year 2262 limit of int64 nanoseconds, but a zone must not make this overflow). */
static int64_t until(int64_t s, sluice_time now) {
    if (s > INT64_MAX / SLUICE_NS_PER_S) return INT64_MAX;
    if (s < INT64_MIN / SLUICE_NS_PER_S) return INT64_MIN;
    int64_t ns = s * SLUICE_NS_PER_S, d;
    return __builtin_sub_overflow(ns, now.wall_ns, &d) ? INT64_MAX : d;
}

/* The state in effect at `now`: the stored one while its period lasts (one calendar
 * computation on the common path), else a fresh one for the current period. A stored
 * period that has not begun yet (the wall clock stepped back into an earlier period) is
 * from the future: its usage is kept, in the period in force now (*future is set), so a
 * clock step hands out no second budget and blocks nobody for longer than one period.
 * *end receives the end of the returned period. */
static sl_quota_state current(const sl_limit *lim, const void *state, sluice_time now,
                              int64_t *end, bool *future) {
    int64_t t = wall_s(now);
    uint64_t used = 0;
    *future = false;
    if (state != NULL) {
        const sl_quota_state *old = state;
        if (t >= old->period_start_s) {
            *end = sl_cal_period_next(lim->tz, lim->quota_period, old->period_start_s);
            if (t < *end) return *old;
        } else {
            used = old->used;
            *future = true;
        }
    }
    sl_quota_state s = {sl_cal_period_start(lim->tz, lim->quota_period, t), used};
    *end = sl_cal_period_next(lim->tz, lim->quota_period, t);
    return s;
}

static void report(const sl_limit *lim, const sl_quota_state *s, int64_t end, sluice_time now,
                   sl_result *r) {
    r->limit = lim->limit;
    r->remaining = s->used >= lim->limit ? 0 : lim->limit - s->used;
    r->reset_after_ns = until(end, now);
    r->retry_after_ns = 0;
    r->delay_ns = 0;
    r->lease = 0;
}

int sl_quota_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf, size_t errbuf_len) {
    if (spec->limit == 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "quota: the budget must be at least 1");
    if (spec->quota_period < SLUICE_PERIOD_HOUR || spec->quota_period > SLUICE_PERIOD_MONTH)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                             "quota: period must be hour, day, week or month");
    out->algo = SLUICE_QUOTA;
    out->limit = out->capacity = spec->limit;
    out->quota_period = spec->quota_period;
    out->state_size = sizeof(sl_quota_state);
    return SLUICE_OK; /* out->tz is the caller's (it resolves spec->tz with sl_tz_get) */
}

bool sl_quota_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     uint64_t cost, sl_result *r) {
    int64_t end;
    bool future;
    sl_quota_state s = current(lim, state, now, &end, &future);
    bool fits = cost <= lim->limit && s.used <= lim->limit - cost;
    if (fits) s.used += cost;
    report(lim, &s, end, now, r);
    r->allowed = fits;
    if (!fits) r->retry_after_ns = cost > lim->limit ? SLUICE_NEVER : r->reset_after_ns;
    *(sl_quota_state *)next = s;
    return (fits && cost > 0) || future; /* a clamped future state must be written back */
}

/* A charge lands in the current period even past the limit (the work was done); a
 * refund only reaches units of the current period, never one that has ended. */
void sl_quota_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     int64_t delta, sl_result *r) {
    int64_t end;
    bool future;
    sl_quota_state s = current(lim, state, now, &end, &future);
    if (delta > 0) {
        s.used = s.used > UINT64_MAX - (uint64_t)delta ? UINT64_MAX : s.used + (uint64_t)delta;
    } else if (delta < 0) {
        uint64_t back = delta == INT64_MIN ? (uint64_t)INT64_MAX + 1 : (uint64_t)-delta;
        s.used = s.used > back ? s.used - back : 0;
    }
    report(lim, &s, end, now, r);
    r->allowed = true;
    *(sl_quota_state *)next = s;
}

int64_t sl_quota_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    int64_t end, t;
    bool future;
    sl_quota_state s = current(lim, state, now, &end, &future);
    if (s.used == 0) return now.mono_ns;
    int64_t d = until(end, now);
    if (d <= 0) return now.mono_ns;
    return __builtin_add_overflow(now.mono_ns, d, &t) ? INT64_MAX : t;
}

void sl_quota_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim, (void)state, (void)delta_ns; /* wall-clock based: nothing monotonic inside */
}

/* The units used are kept as they are, clamped to the new budget (absolute usage:
 * raising a budget and reverting it changes nothing; lowering it below what was used
 * leaves the key exhausted). A change of period or zone carries `used` into the new
 * period that contains now. */
void sl_quota_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                    sluice_time now) {
    int64_t end, old_end;
    bool future;
    sl_quota_state s = current(lim, NULL, now, &end, &future);
    if (state != NULL) {
        sl_quota_state o = current(old, state, now, &old_end, &future);
        s.used = o.used < lim->limit ? o.used : lim->limit;
        if (old->quota_period == lim->quota_period && old->tz == lim->tz) s.period_start_s = o.period_start_s;
    }
    *(sl_quota_state *)next = s;
}
