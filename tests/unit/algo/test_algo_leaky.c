/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_leaky.c -- leaky bucket shaper: nginx's worked example and a replay against
 * nginx limit_req's own integer arithmetic (burst=N there is burst N+1 here), a property
 * test against an exact rational model (admission, queue bound, delay bound, exact
 * retry-after, and output never faster than the rate), settle, carry and peeks.
 */
#include "algo.h"
#include "t.h"
#include "t_algo.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

typedef __int128 i128;

static sl_limit mk(uint64_t limit, int64_t period_ns, uint64_t burst, int64_t max_delay_ns) {
    return t_limit((sluice_limit_spec){.algo = SLUICE_LEAKY_BUCKET, .name = "leaky", .limit = limit, .period_ns = period_ns, .burst = burst, .max_delay_ns = max_delay_ns});
}

static sluice_time at(int64_t mono_ns) {
    sluice_time t = {mono_ns, INT64_C(1700000000) * S}; /* wall time is not used */
    return t;
}

static bool admits(const sl_limit *lim, const sl_leaky_state *st, int64_t t, uint64_t cost) {
    return t_admits(lim, st, at(t), cost);
}

/* SPECS §7.4: 10 r/s; a second request 50 ms after the first is delayed 50 ms (nginx
 * excess 500 = our level 1.5); with nginx burst=0 (our burst 1) it is rejected. */
static void test_nginx_worked_example(void) {
    sl_limit lim = mk(10, 1 * S, 2, 0); /* nginx burst=1 */
    sl_leaky_state st;
    sl_result r;
    T_CHECK(sl_algo_decide(&lim, NULL, &st, at(1 * S), 1, &r));
    T_EQ_I(r.delay_ns, 0); /* a fresh key is empty */
    T_EQ_I(st.level_u, 1 * SL_MICRO);
    T_CHECK(sl_algo_decide(&lim, &st, &st, at(1 * S + 50 * MS), 1, &r));
    T_EQ_I(st.level_u, 1500000);
    T_EQ_I(r.delay_ns, 50 * MS);
    T_EQ_U(r.remaining, 0);
    T_EQ_I(r.reset_after_ns, 150 * MS);
    sl_limit strict = mk(10, 1 * S, 1, 0); /* nginx burst=0 */
    T_CHECK(sl_algo_decide(&strict, NULL, &st, at(1 * S), 1, &r));
    T_CHECK(!sl_algo_decide(&strict, &st, &st, at(1 * S + 50 * MS), 1, &r));
    T_EQ_I(r.retry_after_ns, 50 * MS); /* 1/rate after the last accepted one */
    T_CHECK(sl_algo_decide(&strict, &st, &st, at(1 * S + 100 * MS), 1, &r));
    T_EQ_I(r.delay_ns, 0);
    /* Capacity 0 means limit; cost above the capacity never fits. */
    sl_limit dflt = mk(7, 1 * S, 0, 0);
    T_EQ_U(dflt.capacity, 7);
    T_CHECK(!sl_algo_decide(&dflt, NULL, &st, at(1 * S), 8, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
}

/* nginx limit_req in its own units (milli-requests, ms): excess and last. */
typedef struct {
    int64_t excess, last;
    bool have;
} nginx_node;

/* Returns -1 when rejected, else the delay in ms. */
static int64_t nginx_request(nginx_node *n, int64_t rate_milli, int64_t burst, int64_t now_ms) {
    int64_t e = 0;
    if (n->have) {
        int64_t ms = now_ms - n->last;
        e = n->excess - rate_milli * ms / 1000 + 1000;
        if (e < 0) e = 0;
    }
    if (e > burst * 1000) return -1;
    n->excess = e;
    n->last = now_ms;
    n->have = true;
    return e * 1000 / rate_milli;
}

static void test_replay_against_nginx(void) {
    uint64_t seed = t_seed();
    for (int round = 0; round < 20; round++) {
        int64_t rps = 1 + (int64_t)(t_rand(&seed) % 20) * 5; /* 1, 6, ... r/s */
        if (1000 % rps != 0) rps = 10;
        int64_t burst = (int64_t)(t_rand(&seed) % 8); /* nginx burst */
        sl_limit lim = mk((uint64_t)rps, 1 * S, (uint64_t)burst + 1, 0);
        nginx_node n = {0, 0, false};
        sl_leaky_state st;
        bool have = false;
        int64_t now_ms = 5000;
        for (int i = 0; i < 2000; i++) {
            now_ms += (int64_t)(t_rand(&seed) % (uint64_t)(2000 / rps + 1));
            int64_t want = nginx_request(&n, rps * 1000, burst, now_ms);
            sl_result r;
            sl_leaky_state next;
            bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, at(now_ms * MS), 1, &r);
            if (r.allowed != (want >= 0)) {
                T_FAIL("round %d step %d: allowed %d, nginx %lld", round, i, r.allowed,
                       (long long)want);
                return;
            }
            if (changed) {
                st = next;
                have = true;
            }
            /* nginx delays in whole ms, truncated; we in ns, rounded up. */
            if (r.allowed && (r.delay_ns < want * MS || r.delay_ns >= (want + 1) * MS)) {
                T_FAIL("round %d step %d: delay %lld ns, nginx %lld ms", round, i,
                       (long long)r.delay_ns, (long long)want);
                return;
            }
        }
    }
}

/* Exact model from the stored state: level(t) = max(0, l0/M - (t - last) * rate). */
typedef struct {
    bool admit;
    i128 ahead_num; /* queue ahead * period * M (units * ns * M) */
} ref_out;

static ref_out ref_decide(const sl_limit *lim, const sl_leaky_state *s, int64_t t, uint64_t cost) {
    i128 p = lim->period_ns, m = SL_MICRO;
    i128 lvl = (i128)s->level_u * p; /* micro-units * ns */
    if (t > s->last_ns) lvl -= (i128)(t - s->last_ns) * lim->limit * m;
    if (lvl < 0) lvl = 0;
    ref_out o = {false, lvl};
    if (cost > lim->capacity) return o;
    if (lvl + (i128)cost * m * p > (i128)lim->capacity * m * p) return o;
    /* delay = lvl / (limit * M) ns */
    if (lim->max_delay_ns > 0 && lvl > (i128)lim->max_delay_ns * lim->limit * m) return o;
    o.admit = true;
    return o;
}

static void test_property_vs_exact_model(void) {
    uint64_t seed = t_seed();
    int decisions = 0, rejections = 0;
    for (int round = 0; round < 40; round++) {
        uint64_t limit = 1 + t_rand(&seed) % 40;
        int64_t period = (int64_t)(1 + t_rand(&seed) % 3) * S + (int64_t)(t_rand(&seed) % 777);
        uint64_t burst = t_rand(&seed) % 3 == 0 ? 0 : 1 + t_rand(&seed) % 30;
        int64_t max_delay = t_rand(&seed) % 2 ? 0 : (int64_t)(t_rand(&seed) % (uint64_t)period);
        sl_limit lim = mk(limit, period, burst, max_delay);
        int64_t gap = period / (int64_t)limit;
        int64_t t = 3 * S;
        sl_leaky_state st = {t, 0};
        bool have = false;
        int64_t prev_start = 0;
        uint64_t prev_cost = 0;
        for (int i = 0; i < 1500; i++) {
            t += (int64_t)(t_rand(&seed) % (uint64_t)(2 * gap + 1));
            uint64_t cost = t_rand(&seed) % 4 == 0 ? t_rand(&seed) % (lim.capacity + 2) : 1;
            ref_out want = ref_decide(&lim, &st, t, cost);
            sl_result r;
            sl_leaky_state next;
            bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, at(t), cost, &r);
            decisions++;
            if (r.allowed != want.admit) {
                T_FAIL("round %d step %d: allowed %d, model %d", round, i, r.allowed,
                       want.admit);
                return;
            }
            if (!r.allowed) rejections++;
            if (r.allowed) {
                T_CHECK(lim.max_delay_ns == 0 || r.delay_ns <= lim.max_delay_ns);
                /* The delay is the time to drain the queue ahead, rounded up to the ns. */
                i128 den = (i128)lim.limit * SL_MICRO;
                T_CHECK((i128)r.delay_ns * den >= want.ahead_num);
                T_CHECK((i128)(r.delay_ns - 1) * den < want.ahead_num);
                if (cost > 0) {
                    /* Output never faster than the rate: service starts spaced by at
                     * least the previous request's cost / rate (1 ns of rounding). */
                    int64_t start = t + r.delay_ns;
                    if (prev_cost > 0)
                        T_CHECK((i128)(start - prev_start + 1) * lim.limit >=
                                (i128)prev_cost * period);
                    prev_start = start;
                    prev_cost = cost;
                }
            }
            if (changed) {
                st = next;
                have = true;
                T_CHECK(st.level_u <= (int64_t)lim.capacity * SL_MICRO); /* queue bound */
            }
            if (!have) continue;
            if (!r.allowed && cost > lim.capacity) {
                T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
            } else if (!r.allowed) {
                T_CHECK(r.retry_after_ns > 0);
                T_CHECK(!admits(&lim, &st, t + r.retry_after_ns - 1, cost));
                T_CHECK(admits(&lim, &st, t + r.retry_after_ns, cost));
            } else {
                T_EQ_I(r.retry_after_ns, 0);
            }
            int64_t fa = sl_algo_fresh_at(&lim, &st, at(t));
            T_EQ_I(fa - t > 0 ? fa - t : 0, r.reset_after_ns);
        }
    }
    T_CHECK(rejections > decisions / 20);
}

static void test_max_delay(void) {
    /* 10/s, room for 20, but never hold a request more than 300 ms. */
    sl_limit lim = mk(10, 1 * S, 20, 300 * MS);
    sl_leaky_state st;
    sl_result r;
    bool have = false;
    int admitted = 0;
    for (int i = 0; i < 10; i++) {
        sl_leaky_state next;
        if (sl_algo_decide(&lim, have ? &st : NULL, &next, at(1 * S), 1, &r)) {
            st = next;
            have = true;
        }
        if (r.allowed) {
            T_EQ_I(r.delay_ns, admitted * 100 * MS);
            admitted++;
        }
    }
    T_EQ_I(admitted, 4); /* delays 0, 100, 200, 300 ms */
    T_CHECK(!r.allowed);
    T_EQ_I(r.retry_after_ns, 100 * MS); /* the queue ahead must drain to 300 ms */
    sl_algo_decide(&lim, &st, &st, at(1 * S + 100 * MS), 1, &r);
    T_CHECK(r.allowed);
    T_EQ_I(r.delay_ns, 300 * MS);
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_LEAKY_BUCKET;
    spec.name = "bad";
    spec.limit = 1;
    spec.period_ns = S;
    spec.max_delay_ns = -1;
    char err[256];
    sl_limit bad;
    T_EQ_I(sl_limit_init(&bad, &spec, NULL, err, sizeof(err)), SLUICE_EINVAL);
    T_CHECK(strstr(err, "max_delay") != NULL);
}

static void test_settle_carry_peek(void) {
    sl_limit lim = mk(10, 1 * S, 20, 0);
    sl_leaky_state a, b;
    sl_result r;
    sl_algo_decide(&lim, NULL, &a, at(1 * S), 10, &r);
    sl_algo_settle(&lim, &a, &a, at(1 * S), -7, &r);
    sl_algo_decide(&lim, NULL, &b, at(1 * S), 3, &r);
    T_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    T_EQ_U(r.remaining, 17);
    sl_algo_settle(&lim, &a, &a, at(1 * S), -50, &r);
    T_EQ_I(a.level_u, 0);
    sl_algo_settle(&lim, &a, &a, at(1 * S), 25, &r);
    T_EQ_I(a.level_u, 25 * SL_MICRO);
    T_CHECK(!r.allowed);
    T_EQ_I(r.retry_after_ns, 500 * MS); /* drained to 20 */
    /* Peek leaves the state alone. */
    sl_leaky_state c = a;
    T_CHECK(!sl_algo_decide(&lim, &c, &c, at(2 * S), 0, &r));
    T_CHECK(memcmp(&c, &a, sizeof(a)) == 0);
    T_CHECK(r.allowed);
    T_EQ_I(r.delay_ns, 1500 * MS);
    /* Carry: level 8 of 20 kept as it is, clamped: to 10: 8; to 5: 5; to 40: 8. */
    sl_leaky_state st = {1 * S, 8 * SL_MICRO}, next;
    sl_limit down = mk(10, 1 * S, 10, 0), down5 = mk(10, 1 * S, 5, 0), up = mk(10, 1 * S, 40, 0);
    sl_algo_carry(&lim, &st, &down, &next, at(1 * S));
    T_EQ_I(next.level_u, 8 * SL_MICRO);
    sl_algo_carry(&lim, &st, &down5, &next, at(1 * S));
    T_EQ_I(next.level_u, 5 * SL_MICRO);
    sl_algo_carry(&lim, &st, &up, &next, at(1 * S + 300 * MS));
    T_EQ_I(next.level_u, 5 * SL_MICRO);
    sl_algo_rebase(&lim, &st, 2 * S);
    T_EQ_I(st.last_ns, 3 * S);
    T_EQ_I(sl_algo_fresh_at(&lim, &st, at(0)), 3 * S + 800 * MS);
}

int main(void) {
    T_RUN(test_nginx_worked_example);
    T_RUN(test_replay_against_nginx);
    T_RUN(test_property_vs_exact_model);
    T_RUN(test_max_delay);
    T_RUN(test_settle_carry_peek);
    return T_DONE();
}
