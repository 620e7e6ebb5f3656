/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_quota.c -- calendar quotas: resets exactly at local calendar boundaries in
 * Europe/Madrid and America/New_York across DST (23- and 25-hour days), February in
 * leap and common years, month ends and ISO weeks across the new year; then a property
 * test against a brute-force reference that walks UTC in 15-minute steps and reads local
 * civil time from glibc (single-threaded test, so TZ + localtime_r are fine here).
 */
#include <time.h>

#include "algo.h"
#include "algo_impl.h"
#include "t.h"
#include "tz.h"

#define S SLUICE_NS_PER_S
#define H 3600
#define DAY 86400

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
static int mdays(int y, int m) {
    static const int len[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : len[m - 1];
}
static int64_t days_of(int y, int m, int d) {
    int64_t days = 0;
    for (int yy = 1970; yy < y; yy++) days += leap(yy) ? 366 : 365;
    for (int yy = y; yy < 1970; yy++) days -= leap(yy) ? 366 : 365;
    for (int mm = 1; mm < m; mm++) days += mdays(y, mm);
    return days + d - 1;
}
static int64_t U(int y, int m, int d, int hh) { return days_of(y, m, d) * DAY + hh * H; }

static sluice_time at(int64_t wall_s) {
    sluice_time t = {INT64_C(5) * S, wall_s * S}; /* monotonic time is not used */
    return t;
}

static sl_limit mk(uint64_t limit, sluice_period p, const char *zone) {
    const sl_tz *tz = NULL;
    if (zone != NULL) {
        int err = 0;
        tz = sl_tz_get(zone, &err);
        if (tz == NULL) T_FAIL("sl_tz_get(%s): %d (is tzdata installed?)", zone, err);
    }
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_QUOTA;
    spec.name = "quota";
    spec.limit = limit;
    spec.quota_period = p;
    spec.tz = zone;
    sl_limit lim;
    char msg[256];
    if (sl_limit_init(&lim, &spec, tz, msg, sizeof(msg)) != SLUICE_OK) T_FAIL("sl_limit_init: %s", msg);
    return lim;
}

typedef struct boundary_case {
    const char *zone;
    sluice_period period;
    int64_t start, next; /* a period, from independently computed UTC instants */
    const char *what;
} boundary_case;

/* Fill a period at its first second; one second before its end still refused (retry
 * after exactly that second), fresh at the end; its last second before its start is
 * the previous period. */
static void test_boundaries(void) {
    const boundary_case cases[] = {
        {"Europe/Madrid", SLUICE_PERIOD_DAY, U(2026, 3, 28, 23), U(2026, 3, 29, 22), "Madrid 23 h day"},
        {"Europe/Madrid", SLUICE_PERIOD_DAY, U(2026, 10, 24, 22), U(2026, 10, 25, 23), "Madrid 25 h day"},
        {"America/New_York", SLUICE_PERIOD_DAY, U(2026, 3, 8, 5), U(2026, 3, 9, 4), "New York 23 h day"},
        {"America/New_York", SLUICE_PERIOD_DAY, U(2026, 11, 1, 4), U(2026, 11, 2, 5), "New York 25 h day"},
        {"Europe/Madrid", SLUICE_PERIOD_MONTH, U(2028, 1, 31, 23), U(2028, 2, 29, 23), "Madrid Feb 2028"},
        {"Europe/Madrid", SLUICE_PERIOD_MONTH, U(2027, 1, 31, 23), U(2027, 2, 28, 23), "Madrid Feb 2027"},
        {"America/New_York", SLUICE_PERIOD_MONTH, U(2028, 2, 1, 5), U(2028, 3, 1, 5), "New York Feb 2028"},
        {"America/New_York", SLUICE_PERIOD_MONTH, U(2100, 2, 1, 5), U(2100, 3, 1, 5), "New York Feb 2100"},
        {"America/New_York", SLUICE_PERIOD_MONTH, U(2026, 12, 1, 5), U(2027, 1, 1, 5), "New York Dec 2026"},
        {"Europe/Madrid", SLUICE_PERIOD_MONTH, U(2026, 2, 28, 23), U(2026, 3, 31, 22), "Madrid Mar 2026"},
        {"Europe/Madrid", SLUICE_PERIOD_MONTH, U(2026, 3, 31, 22), U(2026, 4, 30, 22), "Madrid Apr 2026"},
        {"Europe/Madrid", SLUICE_PERIOD_MONTH, U(2026, 9, 30, 22), U(2026, 10, 31, 23), "Madrid Oct 2026"},
        {"America/New_York", SLUICE_PERIOD_WEEK, U(2026, 12, 28, 5), U(2027, 1, 4, 5), "New York week 2026-53"},
        {"Europe/Madrid", SLUICE_PERIOD_WEEK, U(2020, 12, 27, 23), U(2021, 1, 3, 23), "Madrid week 2020-53"},
        {"Europe/Madrid", SLUICE_PERIOD_WEEK, U(2023, 12, 31, 23), U(2024, 1, 7, 23), "Madrid week 2024-01"},
        {"Europe/Madrid", SLUICE_PERIOD_WEEK, U(2026, 10, 18, 22), U(2026, 10, 25, 23), "Madrid week with 25 h day"},
        {"Europe/Madrid", SLUICE_PERIOD_HOUR, U(2026, 10, 25, 0), U(2026, 10, 25, 1), "Madrid repeated hour (CEST)"},
        {"Europe/Madrid", SLUICE_PERIOD_HOUR, U(2026, 10, 25, 1), U(2026, 10, 25, 2), "Madrid repeated hour (CET)"},
        {"America/New_York", SLUICE_PERIOD_HOUR, U(2024, 11, 3, 5), U(2024, 11, 3, 6), "New York 01:00 EDT"},
        {"America/New_York", SLUICE_PERIOD_HOUR, U(2024, 11, 3, 6), U(2024, 11, 3, 7), "New York 01:00 EST"},
        {"America/New_York", SLUICE_PERIOD_HOUR, U(2026, 3, 8, 6), U(2026, 3, 8, 7), "New York hour before the jump"},
        {"America/New_York", SLUICE_PERIOD_DAY, U(2090, 3, 12, 5), U(2090, 3, 13, 4), "New York 2090 (footer)"},
        {NULL, SLUICE_PERIOD_DAY, U(2028, 2, 29, 0), U(2028, 3, 1, 0), "UTC Feb 29"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const boundary_case *c = &cases[i];
        sl_limit lim = mk(3, c->period, c->zone);
        sl_quota_state st, next;
        sl_result r;
        int fails = t_failed_checks;
        /* the second before the start belongs to the previous period */
        T_CHECK(sl_quota_decide(&lim, NULL, &st, at(c->start - 1), 3, &r));
        T_EQ_I(r.reset_after_ns, 1 * S);
        T_CHECK(sl_quota_decide(&lim, &st, &st, at(c->start), 3, &r));
        T_CHECK(r.allowed);
        T_EQ_U(r.remaining, 0);
        T_EQ_I(r.reset_after_ns, (c->next - c->start) * S); /* e.g. exactly 23 h */
        T_EQ_I(st.period_start_s, c->start);
        T_CHECK(!sl_quota_decide(&lim, &st, &next, at(c->next - 1), 1, &r));
        T_CHECK(!r.allowed);
        T_EQ_I(r.retry_after_ns, 1 * S);
        T_EQ_I(r.reset_after_ns, 1 * S);
        sluice_time last_ns = {0, c->next * S - 1};
        T_CHECK(!sl_quota_decide(&lim, &st, &next, last_ns, 1, &r));
        T_EQ_I(r.retry_after_ns, 1);
        T_CHECK(sl_quota_decide(&lim, &st, &next, at(c->next), 1, &r));
        T_CHECK(r.allowed);
        T_EQ_U(r.remaining, 2);
        T_EQ_I(next.period_start_s, c->next);
        if (t_failed_checks != fails) fprintf(stderr, "  in case: %s\n", c->what);
    }
}

static void test_results(void) {
    sl_limit lim = mk(10, SLUICE_PERIOD_DAY, "Europe/Madrid");
    int64_t t = U(2026, 6, 10, 8);
    int64_t end = U(2026, 6, 10, 22);
    sl_quota_state st;
    sl_result r;
    /* a peek on a fresh key consumes nothing */
    T_CHECK(!sl_quota_decide(&lim, NULL, &st, at(t), 0, &r));
    T_CHECK(r.allowed);
    T_EQ_U(r.limit, 10);
    T_EQ_U(r.remaining, 10);
    T_EQ_I(r.reset_after_ns, (end - t) * S);
    T_EQ_U(r.lease, 0);
    T_CHECK(sl_quota_decide(&lim, &st, &st, at(t), 7, &r));
    T_EQ_U(r.remaining, 3);
    T_EQ_I(r.retry_after_ns, 0);
    /* 4 does not fit today: retry at the next local midnight */
    sl_quota_state before = st;
    T_CHECK(!sl_quota_decide(&lim, &st, &st, at(t + 60), 4, &r));
    T_CHECK(memcmp(&before, &st, sizeof(st)) == 0);
    T_EQ_I(r.retry_after_ns, (end - t - 60) * S);
    /* more than the whole budget: never */
    T_CHECK(!sl_quota_decide(&lim, &st, &st, at(t), 11, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
    T_CHECK(!sl_quota_decide(&lim, NULL, &st, at(t), 11, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
}

static void test_settle(void) {
    sl_limit lim = mk(10, SLUICE_PERIOD_HOUR, "America/New_York");
    int64_t t = U(2026, 6, 10, 14) + 600;
    sl_quota_state st, next;
    sl_result r;
    T_CHECK(sl_quota_decide(&lim, NULL, &st, at(t), 8, &r));
    /* refund 5 of the 8 within the hour */
    sl_quota_settle(&lim, &st, &next, at(t + 60), -5, &r);
    T_EQ_U(next.used, 3);
    T_EQ_U(r.remaining, 7);
    /* a refund never goes below zero */
    sl_quota_settle(&lim, &next, &next, at(t + 60), -50, &r);
    T_EQ_U(next.used, 0);
    /* a charge goes past the limit (the work was done) */
    sl_quota_settle(&lim, &st, &next, at(t + 60), 7, &r);
    T_EQ_U(next.used, 15);
    T_EQ_U(r.remaining, 0);
    T_CHECK(!sl_quota_decide(&lim, &next, &next, at(t + 120), 0, &r));
    T_CHECK(!r.allowed); /* over the limit: even a peek reports "limited" */
    /* a refund after the hour ended does not reach the new hour */
    sl_quota_settle(&lim, &st, &next, at(t + H), -5, &r);
    T_EQ_U(next.used, 0);
    T_EQ_I(next.period_start_s, U(2026, 6, 10, 15));
    T_EQ_U(r.remaining, 10);
    /* a charge after the hour ended lands in the new one */
    sl_quota_settle(&lim, &st, &next, at(t + H), 4, &r);
    T_EQ_U(next.used, 4);
    T_EQ_I(next.period_start_s, U(2026, 6, 10, 15));
}

static void test_fresh_at_carry_rebase(void) {
    sl_limit lim = mk(100, SLUICE_PERIOD_MONTH, "Europe/Madrid");
    int64_t t = U(2026, 3, 15, 12);
    sluice_time now = {INT64_C(777) * S, t * S};
    sl_quota_state st, next;
    sl_result r;
    T_EQ_I(sl_quota_fresh_at(&lim, NULL, now), now.mono_ns);
    T_CHECK(sl_quota_decide(&lim, NULL, &st, now, 40, &r));
    /* fresh at the end of March (local), in monotonic time */
    T_EQ_I(sl_quota_fresh_at(&lim, &st, now), now.mono_ns + (U(2026, 3, 31, 22) - t) * S);
    /* rebase: nothing monotonic inside */
    sl_quota_state copy = st;
    sl_quota_rebase(&lim, &copy, 123456789);
    T_CHECK(memcmp(&copy, &st, sizeof(st)) == 0);
    /* carry: the units used are kept, clamped to the new budget; raising and reverting
     * (100 -> 200 -> 100) leaves them as they were */
    sl_limit more = mk(200, SLUICE_PERIOD_MONTH, "Europe/Madrid");
    sl_limit less = mk(50, SLUICE_PERIOD_MONTH, "Europe/Madrid");
    sl_limit tiny = mk(30, SLUICE_PERIOD_MONTH, "Europe/Madrid");
    sl_quota_carry(&lim, &st, &more, &next, now);
    T_EQ_U(next.used, 40);
    T_EQ_I(next.period_start_s, st.period_start_s);
    sl_quota_state back_st;
    sl_quota_carry(&more, &next, &lim, &back_st, now);
    T_EQ_U(back_st.used, 40);
    sl_quota_carry(&lim, &st, &less, &next, now);
    T_EQ_U(next.used, 40);
    sl_quota_carry(&lim, &st, &tiny, &next, now);
    T_EQ_U(next.used, 30);
    /* ... through the dispatcher too */
    sl_algo_carry(&lim, &st, &tiny, &next, now);
    T_EQ_U(next.used, 30);
    /* a carry from a period that has ended starts fresh */
    sluice_time april = {now.mono_ns, U(2026, 4, 2, 0) * S};
    sl_quota_carry(&lim, &st, &more, &next, april);
    T_EQ_U(next.used, 0);
    T_EQ_I(next.period_start_s, U(2026, 3, 31, 22));
    /* the wall clock stepping back into the previous month keeps this month's usage, in
     * the month in force (a state from the future is clamped, and written back: true),
     * so the key waits until the end of February, not of March */
    sluice_time back = {now.mono_ns, U(2026, 2, 27, 0) * S};
    T_CHECK(sl_quota_decide(&lim, &st, &next, back, 61, &r));
    T_CHECK(!r.allowed);
    T_EQ_U(r.remaining, 60);
    T_EQ_U(next.used, 40);
    T_EQ_I(next.period_start_s, U(2026, 1, 31, 23));
    T_EQ_I(r.retry_after_ns, (U(2026, 2, 28, 23) - U(2026, 2, 27, 0)) * S);
}

static void test_init(void) {
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_QUOTA;
    spec.name = "q";
    spec.limit = 0;
    spec.quota_period = SLUICE_PERIOD_DAY;
    sl_limit lim;
    char msg[256];
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    spec.limit = 5;
    spec.quota_period = (sluice_period)0;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    spec.quota_period = (sluice_period)5;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    spec.quota_period = SLUICE_PERIOD_WEEK;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, msg, sizeof(msg)), SLUICE_OK);
    T_EQ_U(lim.capacity, 5);
    T_EQ_U(lim.state_size, sizeof(sl_quota_state));
    /* the public constructor resolves the zone */
    spec.tz = "Europe/Madrid";
    int err = 0;
    sluice_limiter *l = sluice_limiter_create(&spec, &err, msg, sizeof(msg));
    T_CHECK(l != NULL);
    sluice_limiter_destroy(l);
    spec.tz = "Mars/Olympus_Mons";
    T_CHECK(sluice_limiter_create(&spec, &err, msg, sizeof(msg)) == NULL);
    T_EQ_I(err, SLUICE_ENOTFOUND);
    spec.tz = "../../etc/passwd";
    T_CHECK(sluice_limiter_create(&spec, &err, msg, sizeof(msg)) == NULL);
}

/* ---- the brute-force reference -------------------------------------------------- */

#define STEP 900 /* every offset and change of these zones in these years is on a 15-min grid */

typedef struct ref {
    int64_t *b; /* boundaries (UTC), ascending */
    size_t n, cap;
} ref;

/* Period keys of the latest local time reached so far: a period starts at the first
 * instant whose local time reaches its first second, so after clocks go back the
 * period does not go back with them. */
static int64_t key_of(sluice_period p, const struct tm *tm) {
    int64_t days = days_of(tm->tm_year + 1900, tm->tm_mon + 1, tm->tm_mday);
    switch (p) {
    case SLUICE_PERIOD_HOUR: return days * 24 + tm->tm_hour;
    case SLUICE_PERIOD_DAY: return days;
    case SLUICE_PERIOD_WEEK: return (days + 3 - ((days + 3) % 7 + 7) % 7) / 7; /* Mondays */
    default: return (int64_t)(tm->tm_year + 1900) * 12 + tm->tm_mon;
    }
}

static int64_t local_s(const struct tm *tm) {
    return days_of(tm->tm_year + 1900, tm->tm_mon + 1, tm->tm_mday) * DAY + tm->tm_hour * H +
           tm->tm_min * 60 + tm->tm_sec;
}

static void build_ref(ref *r, sluice_period p, int64_t from, int64_t to) {
    r->n = 0;
    int64_t max_local = INT64_MIN, prev_key = INT64_MIN;
    struct tm max_tm;
    memset(&max_tm, 0, sizeof(max_tm));
    for (int64_t u = from; u <= to; u += STEP) {
        time_t tt = (time_t)u;
        struct tm tm;
        localtime_r(&tt, &tm);
        if (local_s(&tm) > max_local) max_local = local_s(&tm), max_tm = tm;
        int64_t k = key_of(p, &max_tm);
        if (p == SLUICE_PERIOD_HOUR) {
            /* a local hour is a real hour: one begins at each hh:00:00 of the local clock
             * and at each change of offset */
            static long prev_off;
            if (u == from || (tm.tm_min == 0 && tm.tm_sec == 0) || tm.tm_gmtoff != prev_off)
                k = prev_key + 1;
            else
                k = prev_key;
            prev_off = tm.tm_gmtoff;
        }
        if (k != prev_key) {
            if (r->n == r->cap) {
                r->cap = r->cap ? r->cap * 2 : 1024;
                r->b = realloc(r->b, r->cap * sizeof(r->b[0]));
            }
            r->b[r->n++] = u;
            prev_key = k;
        }
    }
}

static void test_property(void) {
    static const char *zones[] = {"Europe/Madrid", "America/New_York", "Australia/Lord_Howe",
                                  "Asia/Kathmandu", "Pacific/Apia", "America/Havana", "UTC"};
    static const sluice_period periods[] = {SLUICE_PERIOD_HOUR, SLUICE_PERIOD_DAY, SLUICE_PERIOD_WEEK,
                                            SLUICE_PERIOD_MONTH};
    static const int ranges[][2] = {{2011, 2013}, {2026, 2029}};
    uint64_t seed = t_seed();
    ref rf = {0};
    const char *saved = getenv("TZ");
    char *saved_copy = saved ? strdup(saved) : NULL;
    for (size_t z = 0; z < sizeof(zones) / sizeof(zones[0]); z++) {
        setenv("TZ", zones[z], 1);
        tzset();
        for (size_t pi = 0; pi < 4; pi++) {
            sluice_period p = periods[pi];
            const uint64_t L = 5;
            sl_limit lim = mk(L, p, zones[z]);
            for (size_t ri = 0; ri < 2; ri++) {
                int64_t from = U(ranges[ri][0], 1, 1, 0), to = U(ranges[ri][1], 1, 1, 0);
                build_ref(&rf, p, from - 40 * DAY, to + 40 * DAY);
                int bad = 0;
                /* every step (and a random second inside it) against the boundaries */
                size_t i = 0;
                for (int64_t u = from; u < to && bad < 5; u += STEP) {
                    while (i + 1 < rf.n && rf.b[i + 1] <= u) i++;
                    int64_t t = u + (int64_t)(t_rand(&seed) % STEP);
                    int64_t s = sl_cal_period_start(lim.tz, p, t), n = sl_cal_period_next(lim.tz, p, t);
                    if (s != rf.b[i] || n != rf.b[i + 1]) {
                        T_FAIL("%s period %d at %lld: [%lld, %lld), reference [%lld, %lld)", zones[z],
                               (int)p, (long long)t, (long long)s, (long long)n, (long long)rf.b[i],
                               (long long)rf.b[i + 1]);
                        bad++;
                    }
                }
                /* random traffic: the quota against a counter reset at each boundary */
                sl_quota_state st;
                bool have = false;
                uint64_t used = 0;
                size_t ref_period = SIZE_MAX;
                i = 0;
                int64_t t = from;
                while (t < to && bad < 5) {
                    /* mostly small steps, sometimes landing exactly on a boundary */
                    while (i + 1 < rf.n && rf.b[i + 1] <= t) i++;
                    uint64_t cost = t_rand(&seed) % (L + 2);
                    sl_result r;
                    sl_quota_state next;
                    bool changed = sl_quota_decide(&lim, have ? &st : NULL, &next, at(t), cost, &r);
                    if (i != ref_period) used = 0, ref_period = i;
                    bool fits = cost <= L && used + cost <= L;
                    int64_t reset = (rf.b[i + 1] - t) * S;
                    int64_t retry = fits ? 0 : cost > L ? SLUICE_NEVER : reset;
                    if (fits) used += cost;
                    if (r.allowed != fits || r.remaining != L - used || r.reset_after_ns != reset ||
                        r.retry_after_ns != retry || changed != (fits && cost > 0)) {
                        T_FAIL("%s quota %d at %lld cost %llu: allowed %d remaining %llu reset %lld retry "
                               "%lld; reference %d %llu %lld %lld",
                               zones[z], (int)p, (long long)t, (unsigned long long)cost, r.allowed,
                               (unsigned long long)r.remaining, (long long)r.reset_after_ns,
                               (long long)r.retry_after_ns, fits, (unsigned long long)(L - used),
                               (long long)reset, (long long)retry);
                        bad++;
                    }
                    st = next, have = true;
                    uint64_t k = t_rand(&seed) % 8;
                    int64_t span = p == SLUICE_PERIOD_HOUR ? 1200 : p == SLUICE_PERIOD_DAY ? 4 * H : 2 * DAY;
                    if (k == 0) t = rf.b[i + 1] - 1;       /* the last second of the period */
                    else if (k == 1) t = rf.b[i + 1];      /* its end */
                    else t += 1 + (int64_t)(t_rand(&seed) % (uint64_t)span);
                }
            }
        }
    }
    free(rf.b);
    if (saved_copy) setenv("TZ", saved_copy, 1);
    else unsetenv("TZ");
    free(saved_copy);
    tzset();
}

int main(void) {
    T_RUN(test_boundaries);
    T_RUN(test_results);
    T_RUN(test_settle);
    T_RUN(test_fresh_at_carry_rebase);
    T_RUN(test_init);
    T_RUN(test_property);
    return T_DONE();
}
