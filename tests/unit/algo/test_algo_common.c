/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_common.c -- what every rate algorithm shares, through the dispatcher and
 * sluice_limiter: validation errors and their messages, the copied spec, capacity, cost 0
 * as a pure peek, settle without double counting, the carry rule (raising a limit keeps
 * the absolute usage, lowering keeps the fraction), across algorithms too, fresh_at.
 */
#include "algo.h"
#include "algo/limiter.h"
#include "t.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

typedef union {
    int64_t align;
    unsigned char bytes[sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX];
} state_buf;

static const sluice_algo rate_algos[] = {SLUICE_FIXED_WINDOW, SLUICE_SLIDING_WINDOW,
                                         SLUICE_SLIDING_LOG,  SLUICE_TOKEN_BUCKET,
                                         SLUICE_GCRA,         SLUICE_LEAKY_BUCKET};
#define N_RATE (sizeof(rate_algos) / sizeof(rate_algos[0]))

/* Offset 0 is the start of an aligned 10 s window, so windows and buckets start alike. */
static sluice_time at(int64_t off_ns) {
    sluice_time t = {5 * S + off_ns, INT64_C(1700000000) * S + off_ns};
    return t;
}

static sl_limit mk(sluice_algo algo, uint64_t limit, int64_t period_ns) {
    sluice_limit_spec spec = {0};
    spec.algo = algo;
    spec.name = "common";
    spec.limit = limit;
    spec.period_ns = period_ns;
    sl_limit lim;
    char err[256];
    int rc = sl_limit_init(&lim, &spec, NULL, err, sizeof(err));
    if (rc != SLUICE_OK) T_FAIL("%s: sl_limit_init: %s", sluice_algo_name(algo), err);
    return lim;
}

static int create_err(const sluice_limit_spec *spec, char *err, size_t len) {
    int rc = 12345;
    sluice_limiter *l = sluice_limiter_create(spec, &rc, err, len);
    if (l != NULL) {
        sluice_limiter_destroy(l);
        T_EQ_I(rc, SLUICE_OK);
    }
    return rc;
}

static void test_validation_errors(void) {
    char err[256];
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_TOKEN_BUCKET;
    spec.name = "api";
    spec.limit = 10;
    spec.period_ns = S;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_OK);
    T_EQ_I(create_err(NULL, err, sizeof(err)), SLUICE_EINVAL);

    spec.name = NULL;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "name") != NULL);
    spec.name = "";
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
    char longname[300];
    memset(longname, 'n', sizeof(longname));
    longname[256] = '\0';
    spec.name = longname;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "255") != NULL);
    longname[255] = '\0';
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_OK);
    spec.name = "api";

    spec.algo = (sluice_algo)0;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "unknown algorithm") != NULL);
    spec.algo = (sluice_algo)99;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);

    for (size_t i = 0; i < N_RATE; i++) {
        spec.algo = rate_algos[i];
        spec.limit = 0;
        T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
        T_CHECK(strstr(err, "'api'") != NULL); /* messages name the limit */
        spec.limit = UINT64_C(1000000000001);
        T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_ERANGE);
        spec.limit = 10;
        spec.period_ns = 0;
        T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
        T_CHECK(strstr(err, "period") != NULL);
        spec.period_ns = -S;
        T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
        spec.period_ns = S;
        spec.burst = UINT64_C(1000000000001);
        T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_ERANGE);
        spec.burst = 0;
        T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_OK);
    }
    spec.algo = SLUICE_SLIDING_LOG;
    spec.limit = SL_SLIDING_LOG_MAX + 1;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_ERANGE);
    T_CHECK(strstr(err, "maximum") != NULL);
    spec.algo = SLUICE_GCRA;
    spec.limit = 1000;
    spec.period_ns = 999; /* under 1 ns per unit */
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_ERANGE);
    spec.algo = SLUICE_LEAKY_BUCKET;
    spec.period_ns = S;
    spec.max_delay_ns = -1;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
    spec.max_delay_ns = 0;

    /* Quotas resolve their zone when the limiter is created. */
    spec.algo = SLUICE_QUOTA;
    spec.limit = 1000;
    spec.period_ns = 0;
    spec.quota_period = SLUICE_PERIOD_DAY;
    spec.tz = "Nowhere/Atlantis";
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_ENOTFOUND);
    T_CHECK(strstr(err, "Nowhere/Atlantis") != NULL);
    spec.tz = "../../etc/passwd";
    T_CHECK(create_err(&spec, err, sizeof(err)) < 0);
    char longtz[200];
    memset(longtz, 'z', sizeof(longtz));
    longtz[199] = '\0';
    spec.tz = longtz;
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_EINVAL);
    spec.tz = "Europe/Madrid";
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_OK);
    spec.tz = NULL; /* UTC */
    T_EQ_I(create_err(&spec, err, sizeof(err)), SLUICE_OK);

    /* A small or absent error buffer, an absent err pointer. */
    spec.algo = SLUICE_TOKEN_BUCKET;
    spec.limit = 0;
    spec.period_ns = S;
    char tiny[8];
    T_EQ_I(create_err(&spec, tiny, sizeof(tiny)), SLUICE_EINVAL);
    T_EQ_U(strlen(tiny), 7);
    T_EQ_I(create_err(&spec, NULL, 0), SLUICE_EINVAL);
    T_CHECK(sluice_limiter_create(&spec, NULL, NULL, 0) == NULL);
}

static void test_spec_copied_and_capacity(void) {
    char name[32] = "per-user";
    char tz[32] = "America/New_York";
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_TOKEN_BUCKET;
    spec.name = name;
    spec.limit = 10;
    spec.period_ns = S;
    spec.burst = 25;
    spec.tz = tz; /* not used by a bucket, still copied */
    int rc;
    sluice_limiter *l = sluice_limiter_create(&spec, &rc, NULL, 0);
    T_CHECK(l != NULL);
    if (l == NULL) return;
    memset(name, 'x', 8);
    memset(tz, 'x', 8);
    const sluice_limit_spec *copy = sluice_limiter_spec(l);
    T_EQ_S(copy->name, "per-user");
    T_EQ_S(copy->tz, "America/New_York");
    T_CHECK(copy->name != name);
    T_EQ_U(copy->burst, 25);
    T_EQ_U(sluice_limiter_capacity(l), 25);
    T_EQ_U(l->lim.capacity, 25);
    T_EQ_I(l->lim.algo, SLUICE_TOKEN_BUCKET);
    sluice_limiter_destroy(l);

    spec.name = "win";
    spec.algo = SLUICE_FIXED_WINDOW;
    spec.tz = NULL;
    l = sluice_limiter_create(&spec, &rc, NULL, 0);
    T_CHECK(l != NULL && sluice_limiter_capacity(l) == 10); /* windows: the limit */
    T_CHECK(l != NULL && sluice_limiter_spec(l)->tz == NULL);
    sluice_limiter_destroy(l);
    sluice_limiter_destroy(NULL);
    T_EQ_U(sluice_limiter_capacity(NULL), 0);
}

static uint64_t peek_remaining(const sl_limit *lim, const void *st, sluice_time t) {
    state_buf tmp;
    sl_result r;
    sl_algo_decide(lim, st, tmp.bytes, t, 0, &r);
    return r.remaining;
}

/* Cost 0 reports without consuming: repeated peeks change nothing, and the state after
 * them decides like the one before. */
static void test_peek_everywhere(void) {
    for (size_t i = 0; i < N_RATE; i++) {
        sl_limit lim = mk(rate_algos[i], 10, 10 * S);
        state_buf st, copy, next;
        sl_result r, r2;
        sl_algo_decide(&lim, NULL, st.bytes, at(1 * S), 4, &r);
        memcpy(copy.bytes, st.bytes, lim.state_size);
        for (int k = 0; k < 5; k++) {
            bool changed = sl_algo_decide(&lim, st.bytes, next.bytes, at(2 * S), 0, &r);
            T_CHECK(!changed);
            T_CHECK(r.allowed);
            T_CHECK(memcmp(next.bytes, copy.bytes, lim.state_size) == 0);
            T_CHECK(memcmp(st.bytes, copy.bytes, lim.state_size) == 0);
        }
        sl_algo_decide(&lim, copy.bytes, next.bytes, at(2 * S), 0, &r2);
        T_EQ_U(r.remaining, r2.remaining);
        T_EQ_I(r.reset_after_ns, r2.reset_after_ns);
        /* A peek on a fresh key reports the whole capacity. */
        sl_algo_decide(&lim, NULL, next.bytes, at(2 * S), 0, &r);
        T_CHECK(r.allowed);
        T_EQ_U(r.remaining, lim.capacity);
        T_EQ_U(r.limit, lim.capacity);
        T_EQ_I(r.reset_after_ns, 0);
    }
}

/* Reserve 10 then settle to 3 == spend 3, for every algorithm, observed through later
 * decisions (remaining, retry-after, reset-after) rather than bytes. */
static void test_settle_no_double_count(void) {
    for (size_t i = 0; i < N_RATE; i++) {
        sl_limit lim = mk(rate_algos[i], 20, 10 * S);
        state_buf a, b;
        sl_result ra, rb;
        sl_algo_decide(&lim, NULL, a.bytes, at(1 * S), 10, &ra);
        sl_algo_settle(&lim, a.bytes, a.bytes, at(1 * S), 3 - 10, &ra);
        sl_algo_decide(&lim, NULL, b.bytes, at(1 * S), 3, &rb);
        T_EQ_U(ra.remaining, rb.remaining);
        T_EQ_U(ra.remaining, 17);
        for (int64_t dt = 0; dt <= 12 * S; dt += 1500 * MS) {
            state_buf na, nb;
            sl_algo_decide(&lim, a.bytes, na.bytes, at(1 * S + dt), 18, &ra);
            sl_algo_decide(&lim, b.bytes, nb.bytes, at(1 * S + dt), 18, &rb);
            if (ra.allowed != rb.allowed || ra.remaining != rb.remaining ||
                ra.retry_after_ns != rb.retry_after_ns || ra.reset_after_ns != rb.reset_after_ns)
                T_FAIL("%s at +%lld ns: settled and spent differ", sluice_algo_name(lim.algo),
                       (long long)dt);
        }
        /* Settle then charge back: reserve 3, settle to 10 == spend 10. */
        sl_algo_decide(&lim, NULL, a.bytes, at(1 * S), 3, &ra);
        sl_algo_settle(&lim, a.bytes, a.bytes, at(1 * S), 10 - 3, &ra);
        sl_algo_decide(&lim, NULL, b.bytes, at(1 * S), 10, &rb);
        T_EQ_U(ra.remaining, rb.remaining);
        T_EQ_U(peek_remaining(&lim, a.bytes, at(2 * S)), peek_remaining(&lim, b.bytes, at(2 * S)));
    }
}

/* new_used = min(used, new_capacity): absolute usage, clamped. Lowering below what was
 * used leaves the key exhausted; raising and reverting (10 -> 20 -> 10) is neutral. */
static void test_carry_rule(void) {
    for (size_t i = 0; i < N_RATE; i++) {
        for (size_t j = 0; j < N_RATE; j++) {
            sl_limit old = mk(rate_algos[i], 10, 10 * S);
            state_buf st, next;
            sl_result r;
            sl_algo_decide(&old, NULL, st.bytes, at(1 * S), 6, &r);
            T_EQ_U(r.remaining, 4);
            sl_limit up = mk(rate_algos[j], 20, 10 * S);
            sl_algo_carry(&old, st.bytes, &up, next.bytes, at(1 * S));
            uint64_t rem_up = peek_remaining(&up, next.bytes, at(1 * S));
            state_buf back;
            sl_limit again = mk(rate_algos[i], 10, 10 * S);
            sl_algo_carry(&up, next.bytes, &again, back.bytes, at(1 * S));
            uint64_t rem_back = peek_remaining(&again, back.bytes, at(1 * S));
            sl_limit down = mk(rate_algos[j], 5, 10 * S), down8 = mk(rate_algos[j], 8, 10 * S);
            sl_algo_carry(&old, st.bytes, &down, next.bytes, at(1 * S));
            uint64_t rem_down = peek_remaining(&down, next.bytes, at(1 * S));
            sl_algo_carry(&old, st.bytes, &down8, next.bytes, at(1 * S));
            uint64_t rem_down8 = peek_remaining(&down8, next.bytes, at(1 * S));
            if (rem_up != 14 || rem_back != 4 || rem_down != 0 || rem_down8 != 2)
                T_FAIL("carry %s -> %s: remaining %llu of 20 (want 14), back to 10: %llu (want "
                       "4), %llu of 5 (want 0), %llu of 8 (want 2)",
                       sluice_algo_name(old.algo), sluice_algo_name(up.algo),
                       (unsigned long long)rem_up, (unsigned long long)rem_back,
                       (unsigned long long)rem_down, (unsigned long long)rem_down8);
            /* Carrying to the same parameters changes nothing. */
            sl_limit same = mk(rate_algos[j], 10, 10 * S);
            if (i == j) {
                sl_algo_carry(&old, st.bytes, &same, next.bytes, at(1 * S));
                T_EQ_U(peek_remaining(&same, next.bytes, at(1 * S)), 4);
            }
        }
    }
    /* Nothing used carries as nothing used; to or from a non-rate algorithm: fresh. */
    sl_limit tb = mk(SLUICE_TOKEN_BUCKET, 10, 10 * S);
    sl_limit quota;
    sluice_limit_spec qs = {0};
    qs.algo = SLUICE_QUOTA;
    qs.name = "q";
    qs.limit = 100;
    qs.quota_period = SLUICE_PERIOD_DAY;
    char err[256];
    T_EQ_I(sl_limit_init(&quota, &qs, NULL, err, sizeof(err)), SLUICE_OK);
    state_buf st, next;
    sl_result r;
    sl_algo_decide(&tb, NULL, st.bytes, at(1 * S), 6, &r);
    sl_algo_carry(&tb, st.bytes, &quota, next.bytes, at(1 * S));
    T_EQ_U(peek_remaining(&quota, next.bytes, at(1 * S)), 100);
    sl_algo_carry(&tb, NULL, &tb, next.bytes, at(1 * S));
    T_EQ_U(peek_remaining(&tb, next.bytes, at(1 * S)), 10);
}

/* fresh_at: from then on the state decides exactly like a fresh key. */
static void test_fresh_at(void) {
    for (size_t i = 0; i < N_RATE; i++) {
        sl_limit lim = mk(rate_algos[i], 10, 10 * S);
        state_buf st, n1, n2;
        sl_result r, rf;
        sl_algo_decide(&lim, NULL, st.bytes, at(1 * S), 7, &r);
        int64_t fa = sl_algo_fresh_at(&lim, st.bytes, at(1 * S));
        T_CHECK(fa > at(1 * S).mono_ns);
        int64_t off = fa - at(0).mono_ns;
        sl_algo_decide(&lim, st.bytes, n1.bytes, at(off), 10, &r);
        sl_algo_decide(&lim, NULL, n2.bytes, at(off), 10, &rf);
        T_CHECK(r.allowed && rf.allowed);
        T_EQ_U(r.remaining, rf.remaining);
        /* ... and not a ns before (the full capacity does not fit yet). */
        sl_algo_decide(&lim, st.bytes, n1.bytes, at(off - 1), 10, &r);
        T_CHECK(!r.allowed);
        T_EQ_I(sl_algo_fresh_at(&lim, NULL, at(3 * S)), at(3 * S).mono_ns);
    }
}


/* Extreme parameters, costs, charges and times: no overflow (UBSan runs this too), and
 * the answers stay sane. */
static void test_extremes(void) {
    static const int64_t periods[] = {1, 999, INT64_MAX};
    static const uint64_t limits[] = {1, SL_SLIDING_LOG_MAX, UINT64_C(1000000000000)};
    static const int64_t times[] = {0, 1, INT64_MAX / 4, INT64_MAX / 2};
    for (size_t i = 0; i < N_RATE; i++) {
        for (size_t p = 0; p < sizeof(periods) / sizeof(periods[0]); p++) {
            for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
                if (rate_algos[i] == SLUICE_SLIDING_LOG && limits[l] > SL_SLIDING_LOG_MAX)
                    continue;
                sluice_limit_spec spec = {0};
                spec.algo = rate_algos[i];
                spec.name = "x";
                spec.limit = limits[l];
                spec.period_ns = periods[p];
                sl_limit lim;
                if (sl_limit_init(&lim, &spec, NULL, NULL, 0) != SLUICE_OK) {
                    /* Only GCRA refuses some: T < 1 ns, or B*T beyond its bound. */
                    T_EQ_I(spec.algo, SLUICE_GCRA);
                    continue;
                }
                state_buf st;
                sl_result r;
                bool have = false;
                for (size_t k = 0; k < sizeof(times) / sizeof(times[0]); k++) {
                    sluice_time t = {times[k], times[k]};
                    sl_algo_decide(&lim, have ? st.bytes : NULL, st.bytes, t, 1, &r);
                    have = true;
                    sl_algo_decide(&lim, st.bytes, st.bytes, t, UINT64_MAX, &r);
                    T_CHECK(!r.allowed && r.retry_after_ns == SLUICE_NEVER);
                    sl_algo_settle(&lim, st.bytes, st.bytes, t, INT64_MAX, &r);
                    sl_algo_settle(&lim, st.bytes, st.bytes, t, INT64_MAX, &r);
                    T_EQ_U(r.remaining, 0);
                    sl_algo_decide(&lim, st.bytes, st.bytes, t, limits[l], &r);
                    T_CHECK(!r.allowed && r.retry_after_ns != 0);
                    T_CHECK(r.reset_after_ns >= 0);
                    (void)sl_algo_fresh_at(&lim, st.bytes, t);
                    sl_algo_settle(&lim, st.bytes, st.bytes, t, INT64_MIN, &r);
                    sl_algo_rebase(&lim, st.bytes, INT64_MAX);
                    sl_algo_rebase(&lim, st.bytes, INT64_MIN);
                    (void)sl_algo_fresh_at(&lim, st.bytes, t);
                    state_buf next;
                    sl_algo_carry(&lim, st.bytes, &lim, next.bytes, t);
                }
            }
        }
    }
}

int main(void) {
    T_RUN(test_validation_errors);
    T_RUN(test_spec_copied_and_capacity);
    T_RUN(test_peek_everywhere);
    T_RUN(test_settle_no_double_count);
    T_RUN(test_carry_rule);
    T_RUN(test_fresh_at);
    T_RUN(test_extremes);
    return T_DONE();
}
