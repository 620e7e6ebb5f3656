/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_capacity_lib.c -- adaptive concurrency through the public library: a limiter made
 * with sluice_limiter_create_adaptive, decided with sluice_decide in a memory store and
 * released with sluice_release_sample, against the simulated backend of
 * tests/sim/sim_adaptive.h (knee 20 at 10 ms, halved from 40 s to 60 s, offered 1.5 x the
 * full capacity). Each controller must converge within 25 % of the knee, swing less than
 * 20 % of it, track the halving and recover; an unreleased lease counts as a drop; the
 * learned limit survives a snapshot and a reload. Fake clock; SLUICE_SEED varies traffic.
 */
#include "sim/sim_adaptive.h"
#include "t.h"

#include <unistd.h>

typedef struct inflight {
    uint32_t n;
    int64_t done[SIM_MAX_INFLIGHT];
    int64_t lat[SIM_MAX_INFLIGHT];
    uint64_t lease[SIM_MAX_INFLIGHT];
} inflight;

static inflight fl;
static sim_adapt_run run;

static void fl_push(int64_t done, int64_t lat, uint64_t lease) {
    fl.done[fl.n] = done;
    fl.lat[fl.n] = lat;
    fl.lease[fl.n] = lease;
    fl.n++;
}

/* The earliest completion (a linear scan: at most a few hundred in flight). */
static uint32_t fl_min(void) {
    uint32_t m = 0;
    for (uint32_t i = 1; i < fl.n; i++)
        if (fl.done[i] < fl.done[m]) m = i;
    return m;
}

static void fl_del(uint32_t i) {
    fl.n--;
    fl.done[i] = fl.done[fl.n];
    fl.lat[i] = fl.lat[fl.n];
    fl.lease[i] = fl.lease[fl.n];
}

static uint64_t seed(void) {
    const char *s = getenv("SLUICE_SEED");
    return s ? strtoull(s, NULL, 10) : 42;
}

static sluice_limiter *adaptive(sluice_controller c, int64_t timeout_ns) {
    sluice_limit_spec spec = {.algo = SLUICE_ADAPTIVE_CONCURRENCY, .name = "backend", .lease_ns = 30 * SLUICE_NS_PER_S};
    sluice_adaptive_spec a = {.controller = c, .min = 2, .max = 200, .initial = 10, .timeout_ns = timeout_ns};
    int err = 0;
    char msg[200];
    sluice_limiter *l = sluice_limiter_create_adaptive(&spec, &a, &err, msg, sizeof(msg));
    if (l == NULL) T_FAIL("create: %s", msg);
    return l;
}

/* sim_adapt's scenario with the store deciding and learning: open-loop arrivals, each
 * admitted by sluice_decide (cost 1) holds its lease until the backend answers, then
 * sluice_release_sample reports its latency. The trace samples sluice_adaptive_get. */
static void run_store(sluice_controller c) {
    sl_adapt_ctl ctl = c == SLUICE_GRADIENT2 ? SL_ADAPT_GRADIENT2 : c == SLUICE_VEGAS ? SL_ADAPT_VEGAS : SL_ADAPT_AIMD;
    sim_adapt_default(&run, ctl, seed());
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sluice_limiter *lim = adaptive(c, ctl == SL_ADAPT_AIMD ? run.params.timeout_ns : 0);
    T_EQ_I(sluice_store_register(st, lim), SLUICE_OK);
    sim_rng rng = {run.seed};
    int64_t now = 0, next_arrival = 0, next_trace = 0;
    int64_t gap_max = 2 * SLUICE_NS_PER_S / (int64_t)run.rate_per_s;
    int64_t step_sum = 0, step_n = 0;
    const int64_t base = INT64_C(1000) * SLUICE_NS_PER_S; /* the store's clock starts here */
    fl.n = 0;
    while (now < run.duration_ns) {
        uint32_t m = fl.n ? fl_min() : 0;
        bool completion = fl.n > 0 && fl.done[m] <= next_arrival;
        now = completion ? fl.done[m] : next_arrival;
        sluice_time t = {base + now, base + now};
        while (now >= next_trace && run.npoints < SIM_TRACE_MAX) {
            sluice_adaptive_state a;
            T_EQ_I(sluice_adaptive_get(st, lim, "", 0, t, &a), SLUICE_OK);
            sim_point *pt = &run.trace[run.npoints++];
            pt->t_ns = next_trace;
            pt->limit = a.limit;
            pt->knee = sim_knee_at(&run.backend, next_trace);
            pt->noload_ns = a.noload_ns;
            pt->probing = a.probing != 0;
            pt->avg_ns = step_n ? step_sum / step_n : 0;
            step_sum = step_n = 0;
            next_trace += run.step_ns;
        }
        if (completion) {
            step_sum += fl.lat[m];
            step_n++;
            T_EQ_I(sluice_release_sample(st, lim, "", 0, fl.lease[m], fl.lat[m], SLUICE_OUTCOME_OK, t), SLUICE_OK);
            fl_del(m);
        } else {
            sluice_item it = {lim, "", 0, 1};
            sluice_decision d;
            T_EQ_I(sluice_decide(st, &it, 1, t, &d), SLUICE_OK);
            if (d.allowed && fl.n < SIM_MAX_INFLIGHT) {
                int64_t lat = sim_latency(&run.backend, &rng, now, fl.n + 1);
                fl_push(now + lat, lat, d.results[0].lease);
                run.admitted++;
            } else {
                run.rejected++;
            }
            next_arrival = now + 1 + (int64_t)sim_below(&rng, (uint64_t)gap_max);
        }
    }
    sluice_limiter_destroy(lim);
    sluice_store_destroy(st);
}

static bool mean_within(uint64_t mean_milli, uint32_t knee, uint32_t pct) {
    uint64_t k = (uint64_t)knee * 1000, d = mean_milli > k ? mean_milli - k : k - mean_milli;
    return d * 100 <= k * pct;
}

static void judge(const char *name) {
    sim_adapt_figures f;
    sim_adapt_measure(&run, &f);
    uint32_t k = run.backend.knee, hk = k / 2;
    printf("%-9s settle %.1f s, steady %.2f (%u..%u), halving tracked in %.1f s, halved %.2f (%u..%u), "
           "recovered in %.1f s (%.2f), latency %.2f / %.2f ms\n",
           name, f.settle_ns / 1e9, f.steady_mean_milli / 1e3, f.steady_min, f.steady_max, f.track_ns / 1e9,
           f.halved_mean_milli / 1e3, f.halved_min, f.halved_max, f.recover_ns / 1e9, f.recovered_mean_milli / 1e3,
           f.steady_latency_ns / 1e6, f.halved_latency_ns / 1e6);
    T_CHECK(f.settle_ns <= 10 * SLUICE_NS_PER_S);
    T_CHECK(mean_within(f.steady_mean_milli, k, 25));
    T_CHECK(sim_within(f.steady_min, k, 25) && sim_within(f.steady_max, k, 25));
    T_CHECK((f.steady_max - f.steady_min) * 100 <= k * 20);
    T_CHECK(f.track_ns <= 5 * SLUICE_NS_PER_S);
    T_CHECK(mean_within(f.halved_mean_milli, hk, 25));
    T_CHECK(f.recover_ns <= 5 * SLUICE_NS_PER_S);
    T_CHECK(mean_within(f.recovered_mean_milli, k, 25));
    T_CHECK(f.steady_latency_ns * 100 <= run.backend.base_ns * 125);
    T_CHECK(run.admitted > 0 && run.rejected > 0);
}

static void test_gradient2_through_the_store(void) {
    run_store(SLUICE_GRADIENT2);
    judge("gradient2");
}

static void test_vegas_through_the_store(void) {
    run_store(SLUICE_VEGAS);
    judge("vegas");
}

static void test_aimd_through_the_store(void) {
    run_store(SLUICE_AIMD);
    judge("aimd");
}

/* The fresh state probes at min; a window of fast samples moves it off min, a window of
 * drops then backs it off; an expired lease is a drop too. */
static void test_expired_lease_is_a_drop(void) {
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sluice_limit_spec spec = {.algo = SLUICE_ADAPTIVE_CONCURRENCY, .name = "b", .lease_ns = SLUICE_NS_PER_S};
    sluice_adaptive_spec a = {.controller = SLUICE_AIMD, .min = 1, .max = 100, .initial = 20,
                              .timeout_ns = 50 * SLUICE_NS_PER_MS, .min_samples = 1,
                              .window_ns = 10 * SLUICE_NS_PER_MS, .probe_after = SLUICE_NO_PROBE};
    sluice_limiter *lim = sluice_limiter_create_adaptive(&spec, &a, &err, NULL, 0);
    T_CHECK(lim != NULL);
    sluice_store_register(st, lim);
    sluice_time t = {SLUICE_NS_PER_S, SLUICE_NS_PER_S};
    sluice_adaptive_state s;
    T_EQ_I(sluice_adaptive_get(st, lim, "k", 1, t, &s), SLUICE_OK);
    T_EQ_U(s.limit, 1); /* probing at min */
    T_EQ_I(s.probing, 1);
    /* the probe: 4 ok samples at min concurrency */
    for (int i = 0; i < 4; i++) {
        sluice_item it = {lim, "k", 1, 1};
        sluice_decision d;
        sluice_decide(st, &it, 1, t, &d);
        T_EQ_I(d.allowed, 1);
        t.mono_ns += 5 * SLUICE_NS_PER_MS;
        t.wall_ns = t.mono_ns;
        T_EQ_I(sluice_release_sample(st, lim, "k", 1, d.results[0].lease, 5 * SLUICE_NS_PER_MS, SLUICE_OUTCOME_OK, t),
               SLUICE_OK);
        t.mono_ns += 5 * SLUICE_NS_PER_MS;
        t.wall_ns = t.mono_ns;
    }
    T_EQ_I(sluice_adaptive_get(st, lim, "k", 1, t, &s), SLUICE_OK);
    T_EQ_I(s.probing, 0);
    T_EQ_U(s.limit, 20);
    T_EQ_I(s.noload_ns, 5 * SLUICE_NS_PER_MS);
    /* 20 slots taken and never released: after the lease they are reclaimed as drops */
    for (int i = 0; i < 20; i++) {
        sluice_item it = {lim, "k", 1, 1};
        sluice_decision d;
        sluice_decide(st, &it, 1, t, &d);
        T_EQ_I(d.allowed, 1);
    }
    sluice_item it = {lim, "k", 1, 1};
    sluice_decision d;
    sluice_decide(st, &it, 1, t, &d);
    T_EQ_I(d.allowed, 0); /* full */
    T_EQ_U(d.results[0].limit, 20);
    t.mono_ns += 2 * SLUICE_NS_PER_S; /* beyond the lease (reclaimed within 1.2 x lease) */
    t.wall_ns = t.mono_ns;
    sluice_decide(st, &it, 1, t, &d);
    T_EQ_I(d.allowed, 1);
    /* backed off once: 20 x 0.9 in Q16.16 */
    T_EQ_U(d.results[0].limit, ((UINT64_C(20) << 16) * (65536 * 9 / 10)) >> 32);
    /* a release of a reclaimed lease is refused: it already counted */
    T_EQ_I(sluice_adaptive_get(st, lim, "k", 1, t, &s), SLUICE_OK);
    T_EQ_U(s.in_flight, 1);
    sluice_limiter_destroy(lim);
    sluice_store_destroy(st);
}

/* The learned limit and no-load latency survive a snapshot, and a reload that narrows the
 * bounds clamps the limit into them. */
static void test_snapshot_and_reload_keep_the_limit(void) {
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sluice_limit_spec spec = {.algo = SLUICE_ADAPTIVE_CONCURRENCY, .name = "b", .lease_ns = SLUICE_NS_PER_S};
    sluice_adaptive_spec a = {.controller = SLUICE_AIMD, .min = 1, .max = 100, .initial = 40,
                              .timeout_ns = 50 * SLUICE_NS_PER_MS, .min_samples = 1,
                              .window_ns = 10 * SLUICE_NS_PER_MS, .probe_after = SLUICE_NO_PROBE};
    sluice_limiter *lim = sluice_limiter_create_adaptive(&spec, &a, &err, NULL, 0);
    sluice_store_register(st, lim);
    sluice_time t = {SLUICE_NS_PER_S, INT64_C(1700000000) * SLUICE_NS_PER_S};
    for (int i = 0; i < 4; i++) {
        sluice_item it = {lim, "k", 1, 1};
        sluice_decision d;
        sluice_decide(st, &it, 1, t, &d);
        t.mono_ns += 20 * SLUICE_NS_PER_MS;
        t.wall_ns += 20 * SLUICE_NS_PER_MS;
        sluice_release_sample(st, lim, "k", 1, d.results[0].lease, 7 * SLUICE_NS_PER_MS, SLUICE_OUTCOME_OK, t);
    }
    sluice_adaptive_state s0, s1;
    T_EQ_I(sluice_adaptive_get(st, lim, "k", 1, t, &s0), SLUICE_OK);
    T_EQ_U(s0.limit, 40);
    char path[] = "/tmp/sluice-capXXXXXX";
    int fd = mkstemp(path);
    T_CHECK(fd >= 0);
    close(fd);
    T_EQ_I(sluice_store_snapshot(st, path, t), SLUICE_OK);
    sluice_store *st2 = sluice_store_create(NULL, &err);
    sluice_store_register(st2, lim);
    T_EQ_I(sluice_store_restore(st2, path, t, NULL, NULL, 0), SLUICE_OK);
    T_EQ_I(sluice_adaptive_get(st2, lim, "k", 1, t, &s1), SLUICE_OK);
    T_EQ_U(s1.limit, s0.limit);
    T_EQ_I(s1.noload_ns, s0.noload_ns);
    unlink(path);
    /* reload: max 30 clamps the learned 40 */
    sluice_adaptive_spec b = a;
    b.max = 30;
    b.initial = 10;
    sluice_limiter *lim2 = sluice_limiter_create_adaptive(&spec, &b, &err, NULL, 0);
    T_EQ_I(sluice_store_register(st2, lim2), SLUICE_OK);
    T_EQ_I(sluice_adaptive_get(st2, lim2, "k", 1, t, &s1), SLUICE_OK);
    T_EQ_U(s1.limit, 30);
    T_EQ_I(s1.noload_ns, s0.noload_ns);
    sluice_limiter_destroy(lim2);
    sluice_limiter_destroy(lim);
    sluice_store_destroy(st2);
    sluice_store_destroy(st);
}

static void test_bad_parameters_are_refused(void) {
    sluice_limit_spec spec = {.algo = SLUICE_ADAPTIVE_CONCURRENCY, .name = "b", .lease_ns = SLUICE_NS_PER_S};
    sluice_adaptive_spec a = {.controller = SLUICE_AIMD, .min = 1, .max = 10, .initial = 5};
    int err = 0;
    char msg[200];
    T_CHECK(sluice_limiter_create_adaptive(&spec, &a, &err, msg, sizeof(msg)) == NULL);
    T_EQ_I(err, SLUICE_EINVAL);
    T_CHECK(strstr(msg, "timeout") != NULL);
    a.controller = SLUICE_GRADIENT2;
    a.initial = 11;
    T_CHECK(sluice_limiter_create_adaptive(&spec, &a, &err, msg, sizeof(msg)) == NULL);
    T_CHECK(strstr(msg, "min <= initial <= max") != NULL);
    spec.lease_ns = 0;
    a.initial = 5;
    T_CHECK(sluice_limiter_create_adaptive(&spec, &a, &err, msg, sizeof(msg)) == NULL);
    /* the name and the parser know it */
    sluice_algo al;
    T_EQ_I(sluice_algo_parse("adaptive_concurrency", &al), SLUICE_OK);
    T_EQ_I(al, SLUICE_ADAPTIVE_CONCURRENCY);
    T_EQ_S(sluice_algo_name(SLUICE_ADAPTIVE_CONCURRENCY), "adaptive_concurrency");
    /* the internal penalty algorithm is not a public one */
    sluice_limit_spec p = {.algo = (sluice_algo)100, .name = "p"};
    T_CHECK(sluice_limiter_create(&p, &err, NULL, 0) == NULL);
}

int main(void) {
    T_RUN(test_bad_parameters_are_refused);
    T_RUN(test_expired_lease_is_a_drop);
    T_RUN(test_snapshot_and_reload_keep_the_limit);
    T_RUN(test_gradient2_through_the_store);
    T_RUN(test_vegas_through_the_store);
    T_RUN(test_aimd_through_the_store);
    return T_DONE();
}
