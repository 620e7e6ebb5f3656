/*
 * quota.c -- a budget of `limit` units per calendar period (hour, day, ISO week, month)
 * in the limit's time zone (lim->tz, NULL = UTC), counted on the wall clock.
 * The state is (period start in UTC seconds, used); a later period starts at 0. Period
 * boundaries come from sl_cal_* (tz.c), so 23- and 25-hour days and month lengths are
 * exact. Retry-after of a refused request is the start of the next period.
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

/* The state in effect at `now`: the stored one while its period lasts, else a fresh
 * one for the current period. If the wall clock stepped back into an earlier period,
 * the stored (later) period is kept: a clock step must not hand out a second budget.
 * Both cases are "now is before the stored period's end", which costs one calendar
 * computation on the common path. *end receives the end of the returned period. */
static sl_quota_state current(const sl_limit *lim, const void *state, sluice_time now, int64_t *end) {
    int64_t t = wall_s(now);
    if (state != NULL) {
        const sl_quota_state *old = state;
        *end = sl_cal_period_next(lim->tz, lim->quota_period, old->period_start_s);
        if (t < *end) return *old;
    }
    sl_quota_state s = {sl_cal_period_start(lim->tz, lim->quota_period, t), 0};
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
    sl_quota_state s = current(lim, state, now, &end);
    bool fits = cost <= lim->limit && s.used <= lim->limit - cost;
    if (fits) s.used += cost;
    report(lim, &s, end, now, r);
    r->allowed = fits;
    if (!fits) r->retry_after_ns = cost > lim->limit ? SLUICE_NEVER : r->reset_after_ns;
    *(sl_quota_state *)next = s;
    return fits && cost > 0;
}

/* A charge lands in the current period even past the limit (the work was done); a
 * refund only reaches units of the current period, never one that has ended. */
void sl_quota_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     int64_t delta, sl_result *r) {
    int64_t end;
    sl_quota_state s = current(lim, state, now, &end);
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
    const sl_quota_state *s = state;
    if (s == NULL || s->used == 0) return now.mono_ns;
    int64_t d = until(sl_cal_period_next(lim->tz, lim->quota_period, s->period_start_s), now), t;
    return __builtin_add_overflow(now.mono_ns, d, &t) ? INT64_MAX : t;
}

void sl_quota_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim, (void)state, (void)delta_ns; /* wall-clock based: nothing monotonic inside */
}

/* Raising the budget keeps what was used; lowering it keeps the fraction used. A change
 * of period or zone carries `used` into the new period that contains now. */
void sl_quota_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                    sluice_time now) {
    int64_t end, old_end;
    sl_quota_state s = current(lim, NULL, now, &end);
    if (state != NULL && old->limit > 0) {
        sl_quota_state o = current(old, state, now, &old_end);
        unsigned __int128 scaled = (unsigned __int128)o.used * lim->limit / old->limit;
        s.used = scaled < o.used ? (uint64_t)scaled : o.used;
        if (old->quota_period == lim->quota_period && old->tz == lim->tz) s.period_start_s = o.period_start_s;
    }
    *(sl_quota_state *)next = s;
}
