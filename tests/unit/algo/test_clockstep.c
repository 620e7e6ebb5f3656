/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_clockstep.c -- time that steps: for every algorithm, an exhausted key after a
 * one-hour backward step of the wall clock (what an NTP correction or a VM restore does),
 * and after restoring a snapshot written while the clock was a year ahead, waits no
 * longer than its own window (+1 s): the longest retry-after seen while polling once a
 * second until the key is admitted is printed and asserted, and so is the time it really
 * waited. Also: the manual clock refuses values outside 1970..2200, never wraps; a
 * multi-limit decision clamps its state once, not once per window. Fake time only.
 */
#include <unistd.h>

#include "t.h"

#include "sluice.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

typedef struct acase {
    const char *what;
    sluice_limit_spec spec;
    uint64_t exhaust; /* units to spend (cost 1 each) */
    int64_t bound_ns; /* the longest wait the algorithm gives with no step at all */
} acase;

static acase cases[8];
static int ncases;

static void add(const char *what, sluice_algo algo, uint64_t limit, int64_t period_ns,
                uint64_t burst, int64_t bound_ns) {
    acase *c = &cases[ncases++];
    memset(c, 0, sizeof(*c));
    c->what = what;
    c->spec.algo = algo;
    c->spec.name = what;
    c->spec.limit = limit;
    c->spec.period_ns = period_ns;
    c->spec.burst = burst;
    c->exhaust = limit;
    c->bound_ns = bound_ns;
    if (algo == SLUICE_CONCURRENCY) c->spec.period_ns = 0, c->spec.lease_ns = period_ns;
    if (algo == SLUICE_QUOTA) c->spec.period_ns = 0, c->spec.quota_period = SLUICE_PERIOD_DAY;
}

static void setup(void) {
    if (ncases) return;
    /* 5 per minute everywhere: the window is 60 s */
    add("fixed_window", SLUICE_FIXED_WINDOW, 5, 60 * S, 0, 60 * S);
    /* the sliding counter's own longest wait is W + W * cost / limit (a window exhausted
     * at its start: the estimate lets the next unit in at W / limit into the next one) */
    add("sliding_window", SLUICE_SLIDING_WINDOW, 5, 60 * S, 0, 60 * S + 12 * S);
    add("sliding_log", SLUICE_SLIDING_LOG, 5, 60 * S, 0, 60 * S);
    add("token_bucket", SLUICE_TOKEN_BUCKET, 5, 60 * S, 5, 60 * S);
    add("gcra", SLUICE_GCRA, 5, 60 * S, 5, 60 * S);
    add("leaky_bucket", SLUICE_LEAKY_BUCKET, 5, 60 * S, 5, 60 * S);
    /* concurrency: lease 60 s, reclaimed within lease + w (w = lease / 5); a restored
     * state may be up to one bucket (w) later, as a rebase rounds up */
    add("concurrency", SLUICE_CONCURRENCY, 3, 60 * S, 0, 60 * S + 2 * 12 * S);
    /* a day's quota: the period is the day */
    add("quota_day", SLUICE_QUOTA, 5, 86400 * S, 0, 86400 * S);
}

static sluice_store *mkstore(const sluice_limiter *lim) {
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = 1000;
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    if (st != NULL) T_EQ_I(sluice_store_register(st, lim), SLUICE_OK);
    return st;
}

static int decide(sluice_store *st, const sluice_limiter *lim, sluice_time now, sluice_result *r) {
    sluice_item it = {lim, "victim", 6, 1};
    sluice_decision d;
    int rc = sluice_decide(st, &it, 1, now, &d);
    if (rc == SLUICE_OK) *r = d.results[0];
    return rc;
}

/* Polls the key once a second (a real request: cost 1) until it is admitted; returns the
 * longest retry-after seen and, in *waited, the monotonic time until the admission. */
static int64_t poll_until_admitted(sluice_store *st, const sluice_limiter *lim,
                                   sluice_clock *clk, int64_t *waited) {
    int64_t longest = 0, t0 = sluice_clock_now(clk).mono_ns;
    for (int i = 0; i < 3 * 86400; i++) {
        sluice_result r = {0};
        if (decide(st, lim, sluice_clock_now(clk), &r) != SLUICE_OK) break;
        if (r.allowed) {
            *waited = sluice_clock_now(clk).mono_ns - t0;
            return longest;
        }
        if (r.retry_after_ns == SLUICE_NEVER) longest = INT64_MAX;
        else if (r.retry_after_ns > longest) longest = r.retry_after_ns;
        /* jump to the retry-after when it is long (a day's quota), else poll each second */
        int64_t step = r.retry_after_ns > 10 * S ? r.retry_after_ns - 5 * S : S;
        sluice_clock_advance(clk, step);
    }
    *waited = INT64_MAX;
    return longest;
}

/* Spends the key at `clk`'s time, half a minute after a UTC midnight plus `offset`. */
static void exhaust(sluice_store *st, const acase *c, const sluice_limiter *lim,
                    sluice_clock *clk) {
    for (uint64_t i = 0; i < c->exhaust; i++) {
        sluice_result r = {0};
        T_EQ_I(decide(st, lim, sluice_clock_now(clk), &r), SLUICE_OK);
        T_CHECK(r.allowed);
    }
    sluice_result r;
    T_EQ_I(decide(st, lim, sluice_clock_now(clk), &r), SLUICE_OK);
    T_CHECK(!r.allowed);
}

static void report(const char *how, const acase *c, int64_t longest, int64_t waited) {
    printf("   %-26s %-15s longest retry-after %9.3f s, admitted after %9.3f s "
           "(bound %.0f s + 1 s)\n",
           how, c->what, (double)longest / 1e9, (double)waited / 1e9, (double)c->bound_ns / 1e9);
    if (longest > c->bound_ns + S || waited > c->bound_ns + S)
        T_FAIL("%s, %s: waited %lld ns, retry-after up to %lld ns (bound %lld ns)", how, c->what,
               (long long)waited, (long long)longest, (long long)c->bound_ns);
}

/* 00:00:30 UTC on 2 Dec 2025: a one-hour step back crosses midnight into the day before. */
#define T0_WALL (INT64_C(1764633600) * S + 30 * S)

static void test_step_back_one_hour(void) {
    setup();
    for (int i = 0; i < ncases; i++) {
        const acase *c = &cases[i];
        int err = 0;
        sluice_limiter *lim = sluice_limiter_create(&c->spec, &err, NULL, 0);
        T_CHECK(lim != NULL);
        if (lim == NULL) continue;
        sluice_store *st = mkstore(lim);
        sluice_clock *clk = sluice_clock_create_manual(T0_WALL);
        exhaust(st, c, lim, clk);
        T_EQ_I(sluice_clock_set_wall(clk, T0_WALL - 3600 * S), SLUICE_OK);
        int64_t waited, longest = poll_until_admitted(st, lim, clk, &waited);
        report("one-hour step back:", c, longest, waited);
        sluice_clock_destroy(clk);
        sluice_store_destroy(st);
        sluice_limiter_destroy(lim);
    }
}

static void test_snapshot_from_a_year_ahead(void) {
    setup();
    char path[96];
    snprintf(path, sizeof(path), "/tmp/test_clockstep-%d.snap", (int)getpid());
    const int64_t year = INT64_C(365) * 86400 * S;
    for (int i = 0; i < ncases; i++) {
        const acase *c = &cases[i];
        int err = 0;
        sluice_limiter *lim = sluice_limiter_create(&c->spec, &err, NULL, 0);
        T_CHECK(lim != NULL);
        if (lim == NULL) continue;
        /* the writer's clock is a year ahead (and its monotonic clock far along) */
        sluice_store *a = mkstore(lim);
        sluice_clock *ahead = sluice_clock_create_manual(T0_WALL + year);
        sluice_clock_advance(ahead, 5000 * S);
        exhaust(a, c, lim, ahead);
        T_EQ_I(sluice_store_snapshot(a, path, sluice_clock_now(ahead)), SLUICE_OK);
        /* restored at the right time, on a host just booted (monotonic near 0) */
        sluice_store *b = mkstore(lim);
        sluice_clock *right = sluice_clock_create_manual(T0_WALL + 5000 * S + 2 * S);
        char eb[256] = "";
        uint64_t skipped = 0;
        T_EQ_I(sluice_store_restore(b, path, sluice_clock_now(right), &skipped, eb, sizeof(eb)),
               SLUICE_OK);
        /* still limited: the state was not lost */
        sluice_result r = {0};
        T_EQ_I(decide(b, lim, sluice_clock_now(right), &r), SLUICE_OK);
        T_CHECK(!r.allowed);
        int64_t waited, longest = poll_until_admitted(b, lim, right, &waited);
        if (r.retry_after_ns > longest) longest = r.retry_after_ns;
        report("snapshot a year ahead:", c, longest, waited);
        unlink(path);
        sluice_clock_destroy(ahead);
        sluice_clock_destroy(right);
        sluice_store_destroy(a);
        sluice_store_destroy(b);
        sluice_limiter_destroy(lim);
    }
}

/* Two windows decided together (the way a policy with two limits is): the refused
 * decision writes back the clamped minute window, so after a one-hour step the key is
 * limited for at most the rest of its minute, not for the hour the clock needs to catch
 * up (which is what re-clamping a never-written state once per minute would give). */
static void test_two_windows_one_decision(void) {
    sluice_limit_spec m = {.algo = SLUICE_FIXED_WINDOW, .name = "two", .index = 0, .limit = 5,
                           .period_ns = 60 * S};
    sluice_limit_spec h = m;
    h.index = 1, h.limit = 100, h.period_ns = 3600 * S;
    int err = 0;
    sluice_limiter *lm = sluice_limiter_create(&m, &err, NULL, 0);
    sluice_limiter *lh = sluice_limiter_create(&h, &err, NULL, 0);
    sluice_store *st = mkstore(lm);
    T_EQ_I(sluice_store_register(st, lh), SLUICE_OK);
    sluice_clock *clk = sluice_clock_create_manual(T0_WALL);
    sluice_item its[2] = {{lm, "k", 1, 1}, {lh, "k", 1, 1}};
    sluice_decision d;
    for (int i = 0; i < 5; i++) {
        T_EQ_I(sluice_decide(st, its, 2, sluice_clock_now(clk), &d), SLUICE_OK);
        T_CHECK(d.allowed);
    }
    T_EQ_I(sluice_clock_set_wall(clk, T0_WALL - 3600 * S), SLUICE_OK);
    int64_t t0 = sluice_clock_now(clk).mono_ns, waited = -1;
    for (int i = 0; i < 7200; i++) {
        T_EQ_I(sluice_decide(st, its, 2, sluice_clock_now(clk), &d), SLUICE_OK);
        if (d.allowed) {
            waited = sluice_clock_now(clk).mono_ns - t0;
            break;
        }
        sluice_clock_advance(clk, S);
    }
    printf("   two windows in one decision: admitted %.0f s after the step\n", (double)waited / 1e9);
    T_CHECK(waited >= 0 && waited <= 61 * S);
    /* and the hour window kept its 5 (+1 now): nothing was handed out */
    T_EQ_U(d.results[1].remaining, 94);
    sluice_clock_destroy(clk);
    sluice_store_destroy(st);
    sluice_limiter_destroy(lm);
    sluice_limiter_destroy(lh);
}

/* The manual clock: values outside 1970..2200 are refused and change nothing; no
 * sequence of calls makes a reading wrap. */
static void test_clock_range(void) {
    sluice_clock *c = sluice_clock_create_manual(T0_WALL);
    T_CHECK(c != NULL);
    sluice_time before = sluice_clock_now(c);
    T_EQ_I(sluice_clock_set_wall_ms(c, INT64_C(9223372036855)), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_set_wall_ms(c, INT64_MAX), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_set_wall_ms(c, -1), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_set_wall(c, -1), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_set_wall(c, SLUICE_CLOCK_WALL_MAX_NS + 1), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_advance_ms(c, INT64_MAX), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_advance(c, INT64_MAX), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_advance(c, -1), SLUICE_EINVAL);
    sluice_time after = sluice_clock_now(c);
    T_EQ_I(after.wall_ns, before.wall_ns);
    T_EQ_I(after.mono_ns, before.mono_ns);
    /* the edges themselves are fine */
    T_EQ_I(sluice_clock_set_wall_ms(c, SLUICE_CLOCK_WALL_MAX_NS / SLUICE_NS_PER_MS), SLUICE_OK);
    T_EQ_I(sluice_clock_now(c).wall_ns, SLUICE_CLOCK_WALL_MAX_NS);
    T_EQ_I(sluice_clock_advance(c, 1), SLUICE_ERANGE);
    T_EQ_I(sluice_clock_set_wall(c, 0), SLUICE_OK);
    /* jumping across the whole range again and again: refused before anything wraps */
    int refused = 0;
    for (int i = 0; i < 8 && !refused; i++) {
        if (sluice_clock_set_wall(c, SLUICE_CLOCK_WALL_MAX_NS) != SLUICE_OK) refused = 1;
        if (sluice_clock_set_wall(c, 0) != SLUICE_OK) refused = 1;
        T_CHECK(sluice_clock_now(c).mono_ns > 0);
    }
    T_CHECK(refused);
    T_CHECK(sluice_clock_now(c).mono_ns > before.mono_ns);
    /* the system clock is not settable */
    sluice_clock *sys = sluice_clock_create_system();
    T_EQ_I(sluice_clock_set_wall_ms(sys, 0), SLUICE_EINVAL);
    sluice_clock_destroy(sys);
    T_CHECK(sluice_clock_create_manual(-1) == NULL);
    T_CHECK(sluice_clock_create_manual(SLUICE_CLOCK_WALL_MAX_NS + 1) == NULL);
    sluice_clock_destroy(c);
}

int main(void) {
    T_RUN(test_step_back_one_hour);
    T_RUN(test_snapshot_from_a_year_ahead);
    T_RUN(test_two_windows_one_decision);
    T_RUN(test_clock_range);
    return T_DONE();
}
