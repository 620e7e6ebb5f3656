/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_gcra.c -- GCRA: the redis-cell test vector (SPECS.md §5) case by case in ns,
 * exact retry-after, peeks, settle, carry, and a property test against a brute-force
 * token bucket of B tokens refilled one per T (the model GCRA is equivalent to).
 */
#include "algo.h"
#include "t.h"
#include "t_algo.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

static sl_limit mk(uint64_t limit, int64_t period_ns, uint64_t burst) {
    return t_limit((sluice_limit_spec){.algo = SLUICE_GCRA, .name = "gcra", .limit = limit, .period_ns = period_ns, .burst = burst});
}

static sluice_time at(int64_t mono_ns) {
    sluice_time t = {mono_ns, mono_ns + INT64_C(1700000000) * S};
    return t;
}

/* redis-cell rounds a duration to seconds: truncate, +1 if the remainder is >= 1 ms. */
static int64_t cell_seconds(int64_t ns) {
    if (ns == SLUICE_NEVER) return -1;
    int64_t s = ns / S;
    if (ns % S >= MS) s++;
    return s;
}

/* redis-cell's it_rate_limits: max_burst=4 (our burst 5) at 1/s. Columns: offset from
 * start (ms), quantity, limited, remaining, reset (ns), retry (ns, -1 = never, 0 when
 * allowed: redis-cell's -1 for "allowed" is a RESP-layer rendering). */
static void test_redis_cell_vector(void) {
    static const struct {
        int n;
        int64_t off_ms;
        uint64_t qty;
        int limited;
        uint64_t remaining;
        int64_t reset_ns, retry_ns;
        int64_t reset_s, retry_s; /* the table's seconds */
    } cases[] = {
        {0, 0, 6, 1, 5, 0, SLUICE_NEVER, 0, -1},
        {1, 0, 1, 0, 4, 1 * S, 0, 1, -1},
        {2, 0, 1, 0, 3, 2 * S, 0, 2, -1},
        {3, 0, 1, 0, 2, 3 * S, 0, 3, -1},
        {4, 0, 1, 0, 1, 4 * S, 0, 4, -1},
        {5, 0, 1, 0, 0, 5 * S, 0, 5, -1},
        {6, 0, 1, 1, 0, 5 * S, 1 * S, 5, 1},
        {7, 3000, 1, 0, 2, 3 * S, 0, 3, -1},
        {8, 3100, 1, 0, 1, 3900 * MS, 0, 4, -1},
        {9, 4000, 1, 0, 1, 4 * S, 0, 4, -1},
        {10, 8000, 1, 0, 4, 1 * S, 0, 1, -1},
        {11, 9500, 1, 0, 4, 1 * S, 0, 1, -1},
        {12, 9500, 0, 0, 4, 1 * S, 0, 1, -1},
        {13, 9500, 2, 0, 2, 3 * S, 0, 3, -1},
        {14, 9500, 5, 1, 2, 3 * S, 3 * S, 3, 3},
    };
    sl_limit lim = mk(1, 1 * S, 5);
    T_EQ_U(lim.capacity, 5);
    T_EQ_I(lim.emission_ns, 1 * S);
    int64_t start = 1000 * S;
    sl_gcra_state st;
    bool have = false;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_result r;
        sl_gcra_state next;
        bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, at(start + cases[i].off_ms * MS),
                                      cases[i].qty, &r);
        if (changed) {
            st = next;
            have = true;
        }
        int n = cases[i].n;
        if (r.allowed == (cases[i].limited != 0)) T_FAIL("case %d: allowed %d", n, r.allowed);
        if (r.limit != 5) T_FAIL("case %d: limit %llu", n, (unsigned long long)r.limit);
        if (r.remaining != cases[i].remaining)
            T_FAIL("case %d: remaining %llu != %llu", n, (unsigned long long)r.remaining,
                   (unsigned long long)cases[i].remaining);
        if (r.reset_after_ns != cases[i].reset_ns)
            T_FAIL("case %d: reset %lld != %lld", n, (long long)r.reset_after_ns,
                   (long long)cases[i].reset_ns);
        if (r.retry_after_ns != cases[i].retry_ns)
            T_FAIL("case %d: retry %lld != %lld", n, (long long)r.retry_after_ns,
                   (long long)cases[i].retry_ns);
        /* The ns values are the ones behind the table's seconds. */
        if (cell_seconds(r.reset_after_ns) != cases[i].reset_s)
            T_FAIL("case %d: reset %lld s", n, (long long)cell_seconds(r.reset_after_ns));
        int64_t retry_s = r.allowed ? -1 : cell_seconds(r.retry_after_ns);
        if (retry_s != cases[i].retry_s) T_FAIL("case %d: retry %lld s", n, (long long)retry_s);
        /* Only admissions with a cost change the state. */
        T_EQ_I(changed, !cases[i].limited && cases[i].qty > 0);
    }
}

/* README example: CL.THROTTLE user123 15 30 60 -> 0, 16, 15, -1, 2. */
static void test_readme_example(void) {
    sl_limit lim = mk(30, 60 * S, 16);
    sl_result r;
    sl_gcra_state next;
    T_CHECK(sl_algo_decide(&lim, NULL, &next, at(5 * S), 1, &r));
    T_CHECK(r.allowed);
    T_EQ_U(r.limit, 16);
    T_EQ_U(r.remaining, 15);
    T_EQ_I(r.reset_after_ns, 2 * S);
}

static void test_init_errors(void) {
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_GCRA;
    spec.name = "g";
    spec.limit = 10;
    spec.period_ns = 5; /* T = 0 */
    sl_limit lim;
    char err[256];
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, err, sizeof(err)), SLUICE_ERANGE);
    T_CHECK(strstr(err, "rate too high") != NULL);
    spec.period_ns = INT64_C(1000000000000000000); /* 1e18 ns */
    spec.limit = 1;
    spec.burst = 1000;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, err, sizeof(err)), SLUICE_ERANGE);
    spec.burst = 0;
    spec.period_ns = 0;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, err, sizeof(err)), SLUICE_EINVAL);
    /* T truncated to 1 ns would run 1e6 per 1999999 ns at twice the rate: refused */
    spec.limit = 1000000;
    spec.period_ns = 1999999;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, err, sizeof(err)), SLUICE_ERANGE);
    T_CHECK(strstr(err, "use token_bucket") != NULL);
    /* 1 MiB per minute truncates T by 8 ppm: accepted, and a period from idle admits
     * no more than B + limit * (1 + 1e-4) */
    spec.limit = 1048576;
    spec.period_ns = 60 * SLUICE_NS_PER_S;
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, err, sizeof(err)), SLUICE_OK);
    sl_gcra_state st = {0};
    sl_result r;
    uint64_t admitted = 0;
    bool fresh = true;
    for (int64_t t = 0; t <= spec.period_ns; t += 1000000) { /* every ms, cost 1000 */
        sl_gcra_state next;
        if (sl_algo_decide(&lim, fresh ? NULL : &st, &next, at(t), 1000, &r) && r.allowed) {
            st = next;
            fresh = false;
            admitted += 1000;
        }
    }
    T_CHECK(admitted <= 2 * spec.limit + spec.limit / 10000);
}

/* Whether `cost` at `t` is admitted from state `st` (on a copy: nothing stored). */
static bool admits(const sl_limit *lim, const sl_gcra_state *st, int64_t t, uint64_t cost) {
    return t_admits(lim, st, at(t), cost);
}

/*
 * Reference: a token bucket of B*T "time credit" in exact integers. Credit c (ns) at time
 * last; refill 1 ns per ns, cap B*T; a request of cost n needs n*T ns of credit. This is
 * GCRA by definition (credit = B*T - (TAT - now)), computed the other way round.
 */
typedef struct {
    __int128 credit;
    int64_t last;
} ref_model;

static bool ref_decide(ref_model *m, const sl_limit *lim, int64_t t, uint64_t cost) {
    __int128 bt = (__int128)lim->capacity * lim->emission_ns;
    __int128 c = m->credit + (t - m->last);
    if (c > bt) c = bt;
    __int128 need = (__int128)cost * lim->emission_ns;
    if (cost > lim->capacity || c < need) return false;
    m->credit = c - need;
    m->last = t;
    return true;
}

static void test_property_vs_reference(void) {
    uint64_t seed = t_seed();
    for (int round = 0; round < 40; round++) {
        uint64_t limit = 1 + t_rand(&seed) % 50;
        int64_t period = (int64_t)(1 + t_rand(&seed) % 5) * S + (int64_t)(t_rand(&seed) % 1000);
        uint64_t burst = t_rand(&seed) % 3 == 0 ? 0 : 1 + t_rand(&seed) % 60;
        sl_limit lim = mk(limit, period, burst);
        int64_t t = 7 * S + (int64_t)(t_rand(&seed) % S);
        sl_gcra_state st = {0};
        bool have = false;
        ref_model m = {(__int128)lim.capacity * lim.emission_ns, t};
        static int64_t adm_t[2000];
        static uint64_t adm_c[2000];
        int na = 0;
        for (int i = 0; i < 2000; i++) {
            t += (int64_t)(t_rand(&seed) % (uint64_t)(2 * lim.emission_ns + 1));
            if (t_rand(&seed) % 50 == 0) t += period * (int64_t)(t_rand(&seed) % 3);
            uint64_t cost = t_rand(&seed) % 4 == 0 ? t_rand(&seed) % (lim.capacity + 2) : 1;
            sl_result r;
            sl_gcra_state next;
            bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, at(t), cost, &r);
            bool want = ref_decide(&m, &lim, t, cost);
            if (r.allowed != want) {
                T_FAIL("round %d step %d: allowed %d, reference %d", round, i, r.allowed, want);
                return;
            }
            if (changed) {
                st = next;
                have = true;
                adm_t[na] = t;
                adm_c[na++] = cost;
            }
            if (!have) continue;
            if (!r.allowed) {
                if (cost > lim.capacity) {
                    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
                } else {
                    /* Exact: rejected 1 ns before, admitted at now + retry. */
                    T_CHECK(r.retry_after_ns > 0);
                    T_CHECK(!admits(&lim, &st, t + r.retry_after_ns - 1, cost));
                    T_CHECK(admits(&lim, &st, t + r.retry_after_ns, cost));
                }
            } else {
                T_EQ_I(r.retry_after_ns, 0);
                /* remaining more units would pass now, one more would not. */
                T_CHECK(admits(&lim, &st, t, r.remaining));
                T_CHECK(!admits(&lim, &st, t, r.remaining + 1));
            }
            /* reset_after: from then on the state is fresh. */
            int64_t fresh_in = sl_algo_fresh_at(&lim, &st, at(t)) - t;
            T_EQ_I(fresh_in > 0 ? fresh_in : 0, r.reset_after_ns);
        }
        /* Token bucket bound: at most B + floor(W / T) units in any window of length W. */
        for (int k = 1; k <= 3; k++) {
            int64_t w = period * k;
            uint64_t bound = lim.capacity + (uint64_t)(w / lim.emission_ns);
            int j = 0;
            uint64_t sum = 0;
            for (int i = 0; i < na; i++) {
                sum += adm_c[i];
                while (adm_t[i] - adm_t[j] >= w) sum -= adm_c[j++];
                if (sum > bound) {
                    T_FAIL("round %d: %llu admitted within %lld ns (bound %llu)", round,
                           (unsigned long long)sum, (long long)w, (unsigned long long)bound);
                    break;
                }
            }
        }
    }
}

static void test_peek_leaves_state(void) {
    sl_limit lim = mk(10, 1 * S, 0);
    sl_gcra_state st = {5 * S + 300 * MS}, next = {0};
    sl_result r;
    T_CHECK(!sl_algo_decide(&lim, &st, &next, at(5 * S), 0, &r));
    T_CHECK(r.allowed);
    T_EQ_I(next.tat_ns, st.tat_ns);
    T_EQ_U(r.remaining, 7);
    T_EQ_I(r.reset_after_ns, 300 * MS);
}

/* Reserve 10 then settle to 3 leaves the same state as spending 3. */
static void test_settle_no_double_count(void) {
    sl_limit lim = mk(10, 1 * S, 20);
    sl_gcra_state a, b;
    sl_result r;
    sl_algo_decide(&lim, NULL, &a, at(3 * S), 10, &r);
    sl_algo_settle(&lim, &a, &a, at(3 * S + 5 * MS), 3 - 10, &r);
    sl_algo_decide(&lim, NULL, &b, at(3 * S), 3, &r);
    T_EQ_I(a.tat_ns, b.tat_ns);
    /* A refund never goes below now; a charge goes past the limit (debt). */
    sl_algo_settle(&lim, &a, &a, at(3 * S + 5 * MS), -100, &r);
    T_EQ_I(a.tat_ns, 3 * S + 5 * MS);
    T_EQ_U(r.remaining, 20);
    sl_algo_settle(&lim, &a, &a, at(3 * S + 5 * MS), 25, &r);
    T_EQ_I(a.tat_ns, 3 * S + 5 * MS + 25 * 100 * MS);
    T_CHECK(!r.allowed);
    T_EQ_U(r.remaining, 0);
    T_EQ_I(r.retry_after_ns, 5 * 100 * MS); /* a peek passes once the debt is repaid */
}

static void test_carry(void) {
    sl_limit old = mk(10, 1 * S, 10);
    sl_gcra_state st, next;
    sl_result r;
    sl_algo_decide(&old, NULL, &st, at(1 * S), 6, &r); /* used 6 of 10 */
    /* Raising the limit keeps the absolute usage: 6 used of 20. */
    sl_limit up = mk(20, 1 * S, 20);
    sl_algo_carry(&old, &st, &up, &next, at(1 * S));
    sl_algo_decide(&up, &next, &next, at(1 * S), 0, &r);
    T_EQ_U(r.remaining, 14);
    /* Reverting to 10 gives back exactly the 6 used (raise then revert is neutral). */
    sl_gcra_state back;
    sl_algo_carry(&up, &next, &old, &back, at(1 * S));
    T_EQ_I(back.tat_ns, st.tat_ns);
    /* Lowering keeps the absolute usage clamped to the new capacity: 5 of 5 (exhausted),
     * 6 of 8. */
    sl_limit down = mk(5, 1 * S, 5), down8 = mk(8, 1 * S, 8);
    sl_algo_carry(&old, &st, &down, &next, at(1 * S));
    sl_algo_decide(&down, &next, &next, at(1 * S), 0, &r);
    T_EQ_U(r.remaining, 0);
    T_EQ_I(next.tat_ns, 1 * S + 5 * 200 * MS);
    sl_algo_carry(&old, &st, &down8, &next, at(1 * S));
    sl_algo_decide(&down8, &next, &next, at(1 * S), 0, &r);
    T_EQ_U(r.remaining, 2);
}

static void test_rebase_and_fresh(void) {
    sl_limit lim = mk(10, 1 * S, 0);
    sl_gcra_state st;
    sl_result r;
    sl_algo_decide(&lim, NULL, &st, at(2 * S), 4, &r);
    T_EQ_I(sl_algo_fresh_at(&lim, &st, at(2 * S)), 2 * S + 400 * MS);
    sl_algo_rebase(&lim, &st, -1 * S);
    T_EQ_I(st.tat_ns, 1 * S + 400 * MS);
    T_EQ_I(sl_algo_fresh_at(&lim, NULL, at(9 * S)), 9 * S);
}

int main(void) {
    T_RUN(test_redis_cell_vector);
    T_RUN(test_readme_example);
    T_RUN(test_init_errors);
    T_RUN(test_property_vs_reference);
    T_RUN(test_peek_leaves_state);
    T_RUN(test_settle_no_double_count);
    T_RUN(test_carry);
    T_RUN(test_rebase_and_fresh);
    return T_DONE();
}
