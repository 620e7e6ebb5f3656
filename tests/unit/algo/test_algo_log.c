/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_algo_log.c -- sliding log: exact against a brute-force list of every admitted
 * unit (no window of length W ever holds more than the limit), exact retry-after from the
 * oldest entries that must leave, the limit cap, settle (refund the newest, charge capped
 * by the ring), carry (keep the newest that fit), rebase and fresh_at.
 */
#include "algo.h"
#include "t.h"
#include "t_algo.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

typedef union {
    sl_log_state s;
    unsigned char bytes[sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX];
} log_buf;

static sl_limit mk(uint64_t limit, int64_t period_ns) {
    return t_limit((sluice_limit_spec){.algo = SLUICE_SLIDING_LOG, .name = "log", .limit = limit, .period_ns = period_ns});
}

static sluice_time at(int64_t mono_ns) {
    sluice_time t = {mono_ns, INT64_C(1700000000) * S}; /* wall time is not used */
    return t;
}

static bool admits(const sl_limit *lim, const log_buf *st, int64_t t, uint64_t cost) {
    return t_admits(lim, st, at(t), cost);
}

static void test_init_cap(void) {
    sl_limit lim = mk(SL_SLIDING_LOG_MAX, 1 * S);
    T_EQ_U(lim.state_size, sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX);
    lim = mk(7, 1 * S);
    T_EQ_U(lim.state_size, sizeof(sl_log_state) + 8 * 7);
    T_EQ_U(lim.capacity, 7);
    sluice_limit_spec spec = {0};
    spec.algo = SLUICE_SLIDING_LOG;
    spec.name = "big";
    spec.limit = SL_SLIDING_LOG_MAX + 1;
    spec.period_ns = S;
    char err[256];
    T_EQ_I(sl_limit_init(&lim, &spec, NULL, err, sizeof(err)), SLUICE_ERANGE);
    T_CHECK(strstr(err, "1025") != NULL);
    T_CHECK(strstr(err, "1024") != NULL);
    T_CHECK(strstr(err, "sliding_window") != NULL);
}

static void test_basics(void) {
    sl_limit lim = mk(3, 10 * S);
    log_buf st;
    sl_result r;
    T_CHECK(sl_algo_decide(&lim, NULL, &st, at(1 * S), 1, &r));
    T_CHECK(sl_algo_decide(&lim, &st, &st, at(4 * S), 2, &r));
    T_EQ_U(r.remaining, 0);
    T_EQ_I(r.reset_after_ns, 10 * S); /* the newest leaves at 14 s */
    /* One more: the oldest (1 s) must leave, at 11 s. */
    T_CHECK(!sl_algo_decide(&lim, &st, &st, at(5 * S), 1, &r));
    T_EQ_I(r.retry_after_ns, 6 * S);
    /* Two more: the second oldest (4 s) must leave too, at 14 s. */
    T_CHECK(!sl_algo_decide(&lim, &st, &st, at(5 * S), 2, &r));
    T_EQ_I(r.retry_after_ns, 9 * S);
    T_CHECK(!sl_algo_decide(&lim, &st, &st, at(5 * S), 4, &r));
    T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
    /* (now - W, now]: an entry exactly W old is gone. */
    T_CHECK(!admits(&lim, &st, 11 * S - 1, 1));
    T_CHECK(admits(&lim, &st, 11 * S, 1));
    T_EQ_I(sl_algo_fresh_at(&lim, &st, at(5 * S)), 14 * S);
}

static void test_property_vs_brute_force(void) {
    uint64_t seed = t_seed();
    enum { N = 3000 };
    static int64_t units[N * 8]; /* one entry per admitted unit */
    for (int round = 0; round < 30; round++) {
        uint64_t limit = 1 + t_rand(&seed) % (round % 5 == 0 ? SL_SLIDING_LOG_MAX : 20);
        int64_t period = (int64_t)(1 + t_rand(&seed) % 3) * S + (int64_t)(t_rand(&seed) % 999);
        sl_limit lim = mk(limit, period);
        int64_t t = 2 * S;
        int64_t gap = 2 * period / (int64_t)limit;
        static log_buf st;
        bool have = false;
        int nu = 0;
        for (int i = 0; i < N; i++) {
            t += (int64_t)(t_rand(&seed) % (uint64_t)(gap + 1));
            uint64_t cost = t_rand(&seed) % 5 == 0 ? t_rand(&seed) % (limit < 8 ? limit + 2 : 8) : 1;
            uint64_t live = 0;
            for (int j = 0; j < nu; j++)
                if (units[j] > t - period) live++;
            bool want = live + cost <= limit;
            sl_result r;
            static log_buf next;
            bool changed = sl_algo_decide(&lim, have ? &st : NULL, &next, at(t), cost, &r);
            if (r.allowed != want) {
                T_FAIL("round %d step %d: allowed %d, reference %d", round, i, r.allowed, want);
                return;
            }
            T_EQ_I(changed, want && cost > 0);
            T_EQ_U(r.remaining, limit - (want ? live + cost : live));
            if (changed) {
                memcpy(&st, &next, lim.state_size);
                have = true;
                for (uint64_t k = 0; k < cost && nu < N * 8; k++) units[nu++] = t;
            }
            if (!have) continue;
            if (!r.allowed && cost > limit) {
                T_EQ_I(r.retry_after_ns, SLUICE_NEVER);
            } else if (!r.allowed) {
                T_CHECK(r.retry_after_ns > 0);
                T_CHECK(!admits(&lim, &st, t + r.retry_after_ns - 1, cost));
                T_CHECK(admits(&lim, &st, t + r.retry_after_ns, cost));
            }
        }
        /* Exact: no window of length W holds more than the limit. */
        int j = 0;
        for (int i = 0; i < nu; i++) {
            while (units[i] - units[j] >= period) j++;
            if (i - j + 1 > (int)limit) {
                T_FAIL("round %d: %d units within W", round, i - j + 1);
                break;
            }
        }
    }
}

static void test_settle(void) {
    sl_limit lim = mk(10, 10 * S);
    log_buf a, b;
    sl_result r;
    sl_algo_decide(&lim, NULL, &a, at(1 * S), 10, &r);
    sl_algo_settle(&lim, &a, &a, at(1 * S), -7, &r);
    sl_algo_decide(&lim, NULL, &b, at(1 * S), 3, &r);
    T_EQ_U(a.s.count, 3);
    T_EQ_U(r.remaining, 7);
    /* Same entries (slots past count may hold stale values). */
    T_EQ_U(a.s.count, b.s.count);
    T_EQ_U(a.s.head, b.s.head);
    T_CHECK(memcmp(a.s.ts, b.s.ts, 8 * a.s.count) == 0);
    /* A refund removes the newest entries. */
    sl_algo_decide(&lim, &a, &a, at(5 * S), 2, &r);
    sl_algo_settle(&lim, &a, &a, at(6 * S), -3, &r);
    T_EQ_U(r.remaining, 8);
    T_EQ_I(sl_algo_fresh_at(&lim, &a, at(6 * S)), 11 * S); /* the two left are from 1 s */
    /* A charge adds entries at now, at most the ring's size. */
    sl_algo_settle(&lim, &a, &a, at(7 * S), 100, &r);
    T_EQ_U(a.s.count, 10);
    T_EQ_U(r.remaining, 0);
    T_CHECK(!r.allowed || r.remaining == 0);
    T_EQ_I(sl_algo_fresh_at(&lim, &a, at(7 * S)), 17 * S);
    T_CHECK(!admits(&lim, &a, 17 * S - 1, 1));
    T_CHECK(admits(&lim, &a, 17 * S, 10));
}

static void test_carry_rebase_peek(void) {
    sl_limit old = mk(10, 10 * S);
    log_buf st, next;
    sl_result r;
    for (int i = 0; i < 6; i++) sl_algo_decide(&old, i ? &st : NULL, &st, at((1 + i) * S), 1, &r);
    /* Lowering to 5 keeps min(6, 5) = 5: the newest five (2..6 s), exhausted; to 4 the
     * newest four (3..6 s). */
    sl_limit down = mk(5, 10 * S), down4 = mk(4, 10 * S);
    sl_algo_carry(&old, &st, &down, &next, at(7 * S));
    T_EQ_U(next.s.count, 5);
    T_CHECK(!admits(&down, &next, 7 * S, 1));
    T_CHECK(admits(&down, &next, 12 * S, 1)); /* 2 s has left at 12 s */
    T_CHECK(!admits(&down, &next, 12 * S - 1, 1));
    sl_algo_carry(&old, &st, &down4, &next, at(7 * S));
    T_EQ_U(next.s.count, 4);
    T_CHECK(admits(&down4, &next, 13 * S, 1)); /* 3 s has left at 13 s */
    T_CHECK(!admits(&down4, &next, 13 * S - 1, 1));
    /* Raising keeps all six. */
    sl_limit up = mk(20, 10 * S);
    sl_algo_carry(&old, &st, &up, &next, at(7 * S));
    T_EQ_U(next.s.count, 6);
    /* Rebase shifts every timestamp. */
    memcpy(&next, &st, old.state_size);
    sl_algo_rebase(&old, &next, 100 * S);
    T_EQ_I(sl_algo_fresh_at(&old, &next, at(0)), 116 * S);
    /* Peek: nothing changes. */
    memcpy(&next, &st, old.state_size);
    T_CHECK(!sl_algo_decide(&old, &next, &next, at(8 * S), 0, &r));
    T_CHECK(r.allowed);
    T_EQ_U(r.remaining, 4);
    T_CHECK(memcmp(&next, &st, old.state_size) == 0);
    /* A wrapped ring (head != 0) reads the same. */
    sl_limit l3 = mk(3, 10 * S);
    log_buf w;
    memset(&w, 0, sizeof(w));
    w.s.head = 2;
    w.s.count = 3;
    w.s.ts[2] = 1 * S;
    w.s.ts[0] = 2 * S;
    w.s.ts[1] = 3 * S;
    T_CHECK(!sl_algo_decide(&l3, &w, &w, at(4 * S), 1, &r));
    T_EQ_I(r.retry_after_ns, 7 * S);
    T_CHECK(sl_algo_decide(&l3, &w, &w, at(11 * S), 1, &r));
    T_EQ_U(r.remaining, 0);
    T_EQ_I(r.reset_after_ns, 10 * S);
}

int main(void) {
    T_RUN(test_init_cap);
    T_RUN(test_basics);
    T_RUN(test_property_vs_brute_force);
    T_RUN(test_settle);
    T_RUN(test_carry_rebase_peek);
    return T_DONE();
}
