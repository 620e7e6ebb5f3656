/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_validation_plan.c -- ../shared/DESIGN.md "Validation plan" items 1-3 on the manual
 * clock, for the token bucket and GCRA (both B = 20, r = 10/s), through sluice_limiter:
 *   1. 8 req/s for 30 s: no rejection;
 *   2. a burst of 30 after idle: exactly 20 admitted, each rejection's Retry-After exact;
 *   3. 4 identities: each limited independently, none affected by the others.
 * Each identity is its own state, as the store keeps one per key.
 */
#include "algo.h"
#include "algo/limiter.h"
#include "t.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

static const sluice_algo algos[] = {SLUICE_TOKEN_BUCKET, SLUICE_GCRA};

typedef union {
    sl_tb_state tb;
    sl_gcra_state gcra;
} key_state;

typedef struct {
    key_state st;
    bool have; /* false: never seen (fresh) */
} identity;

static sluice_limiter *bucket(sluice_algo algo) {
    sluice_limit_spec spec = {0};
    spec.algo = algo;
    spec.name = "validation";
    spec.limit = 10;
    spec.period_ns = S;
    spec.burst = 20;
    int err;
    char msg[256];
    sluice_limiter *l = sluice_limiter_create(&spec, &err, msg, sizeof(msg));
    if (l == NULL) T_FAIL("sluice_limiter_create: %s", msg);
    return l;
}

/* One request of cost 1 for `id` now; commits the state when admitted. */
static sl_result request(const sluice_limiter *l, identity *id, sluice_time now) {
    sl_result r;
    key_state next;
    if (sl_algo_decide(&l->lim, id->have ? &id->st : NULL, &next, now, 1, &r)) {
        id->st = next;
        id->have = true;
    }
    return r;
}

/* The same request on a copy of the state, at `now` + dt: admitted? */
static bool would_admit(const sluice_limiter *l, const identity *id, sluice_time now, int64_t dt) {
    key_state copy = id->st, next;
    sl_result r;
    now.mono_ns += dt;
    now.wall_ns += dt;
    sl_algo_decide(&l->lim, id->have ? &copy : NULL, &next, now, 1, &r);
    T_CHECK(memcmp(&copy, &id->st, sizeof(copy)) == 0);
    return r.allowed;
}

/* Retry-After as a client sees it: whole seconds, rounded up. */
static int64_t retry_after_header(int64_t ns) { return (ns + S - 1) / S; }

static void test_1_steady_8_per_second(void) {
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        sluice_limiter *l = bucket(algos[a]);
        if (l == NULL) return;
        sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * S);
        identity id = {0};
        int admitted = 0, rejected = 0;
        for (int i = 0; i < 8 * 30; i++) {
            sl_result r = request(l, &id, sluice_clock_now(clk));
            if (r.allowed) admitted++;
            else rejected++;
            T_EQ_U(r.limit, 20);
            /* The bucket never runs low: 8/s in, 10/s refill. */
            T_CHECK(r.remaining >= 18);
            sluice_clock_advance(clk, S / 8);
        }
        T_EQ_I(admitted, 240);
        T_EQ_I(rejected, 0);
        sluice_clock_destroy(clk);
        sluice_limiter_destroy(l);
    }
}

static void test_2_burst_after_idle(void) {
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        sluice_limiter *l = bucket(algos[a]);
        if (l == NULL) return;
        sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * S);
        identity id = {0};
        /* Some earlier traffic, then a long idle: the bucket is full again. */
        for (int i = 0; i < 25; i++) request(l, &id, sluice_clock_now(clk));
        sluice_clock_advance(clk, 60 * S);
        sluice_time now = sluice_clock_now(clk);
        int admitted = 0;
        for (int i = 0; i < 30; i++) {
            sl_result r = request(l, &id, now);
            if (r.allowed) {
                admitted++;
                T_EQ_I(r.retry_after_ns, 0);
                continue;
            }
            /* Rejected: one token every 100 ms, the next is exactly 100 ms away. */
            T_EQ_I(r.retry_after_ns, 100 * MS);
            T_EQ_I(retry_after_header(r.retry_after_ns), 1);
            T_EQ_U(r.remaining, 0);
            T_CHECK(!would_admit(l, &id, now, r.retry_after_ns - 1));
            T_CHECK(would_admit(l, &id, now, r.retry_after_ns));
        }
        T_EQ_I(admitted, 20);
        /* Within the burst (requests 10 ms apart): the 21st waits for the refill. */
        sluice_clock_advance(clk, 60 * S);
        admitted = 0;
        int first_rejection = -1;
        for (int i = 0; i < 30; i++) {
            now = sluice_clock_now(clk);
            sl_result r = request(l, &id, now);
            if (r.allowed) {
                admitted++;
            } else {
                if (first_rejection < 0) first_rejection = i;
                T_CHECK(r.retry_after_ns > 0);
                T_CHECK(!would_admit(l, &id, now, r.retry_after_ns - 1));
                T_CHECK(would_admit(l, &id, now, r.retry_after_ns));
            }
            sluice_clock_advance(clk, 10 * MS);
        }
        /* 290 ms of requests refill 2 tokens (at 100 and 200 ms after the first). */
        T_EQ_I(admitted, 22);
        T_CHECK(first_rejection >= 20);
        sluice_clock_destroy(clk);
        sluice_limiter_destroy(l);
    }
}

static void test_3_four_identities(void) {
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        sluice_limiter *l = bucket(algos[a]);
        if (l == NULL) return;
        sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * S);
        identity ids[4];
        memset(ids, 0, sizeof(ids));
        /* The burst of 30 to each of the 4, interleaved: each gets exactly its 20. */
        int admitted[4] = {0};
        sluice_time now = sluice_clock_now(clk);
        for (int i = 0; i < 30; i++)
            for (int k = 0; k < 4; k++) admitted[k] += request(l, &ids[k], now).allowed;
        for (int k = 0; k < 4; k++) T_EQ_I(admitted[k], 20);
        sluice_clock_advance(clk, 60 * S);
        /* Identity 0 hammers at 100 req/s while 1..3 send 8 req/s, for 30 s: the others
         * are never rejected; identity 0 gets B + what the refill brings, no more. */
        int rej[4] = {0}, adm[4] = {0};
        for (int step = 0; step < 3000; step++) {
            now = sluice_clock_now(clk);
            sl_result r = request(l, &ids[0], now);
            adm[0] += r.allowed;
            rej[0] += !r.allowed;
            if (step % 12 == 6) { /* every 120 ms: a little over 8/s */
                for (int k = 1; k < 4; k++) {
                    r = request(l, &ids[k], now);
                    adm[k] += r.allowed;
                    rej[k] += !r.allowed;
                }
            }
            sluice_clock_advance(clk, 10 * MS);
        }
        for (int k = 1; k < 4; k++) {
            T_EQ_I(rej[k], 0);
            T_EQ_I(adm[k], 250);
        }
        /* 20 at once, then one per token: tokens arrive every 100 ms over 29.99 s,
         * and a request is there at each arrival: 20 + 299. */
        T_EQ_I(adm[0], 20 + 299);
        T_EQ_I(rej[0], 3000 - 319);
        sluice_clock_destroy(clk);
        sluice_limiter_destroy(l);
    }
}

int main(void) {
    T_RUN(test_1_steady_8_per_second);
    T_RUN(test_2_burst_after_idle);
    T_RUN(test_3_four_identities);
    return T_DONE();
}
