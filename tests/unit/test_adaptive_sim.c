/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_adaptive_sim.c -- each adaptive controller against the simulated backend of
 * tests/sim/sim_adaptive.h (latency grows beyond a knee; the knee halves at 40 s and comes
 * back at 60 s; offered load 1.5 x the full capacity): it converges to within 25 % of the
 * knee, swings less than 20 % of it peak to peak, tracks the halving and the recovery within
 * a few seconds, and keeps latency near the no-load value. A fixed limit fails the same
 * checks (the harness can tell). Deterministic; SLUICE_SEED varies the traffic.
 * tests/sim/capacity_sim.c prints the same figures and draws them.
 */
#include "../sim/sim_adaptive.h"
#include "t.h"

static sim_adapt_run run;

static const char *name(sl_adapt_ctl c) {
    return c == SL_ADAPT_GRADIENT2 ? "gradient2" : c == SL_ADAPT_VEGAS ? "vegas" : "aimd";
}

/* Whether the mean (x1000) is within pct of the knee. */
static bool mean_within(uint64_t mean_milli, uint32_t knee, uint32_t pct) {
    uint64_t k = (uint64_t)knee * 1000, d = mean_milli > k ? mean_milli - k : k - mean_milli;
    return d * 100 <= k * pct;
}

/* The criteria on one run; returns how many failed (reported with context). */
static int judge(const sim_adapt_run *r, const char *what, bool report) {
    sim_adapt_figures f;
    sim_adapt_measure(r, &f);
    uint32_t k = r->backend.knee, hk = k / 2;
    int bad = 0;
#define CRIT(cond, ...)                                                     \
    do {                                                                    \
        if (!(cond)) {                                                      \
            bad++;                                                          \
            if (report) {                                                   \
                T_FAIL("%s knee %u seed %llu: %s", what, k,                 \
                       (unsigned long long)r->seed, #cond);                 \
                fprintf(stderr, "  " __VA_ARGS__);                          \
                fputc('\n', stderr);                                        \
            }                                                               \
        }                                                                   \
    } while (0)
    CRIT(f.settle_ns <= 10 * SLUICE_NS_PER_S, "settle %.1f s", f.settle_ns / 1e9);
    CRIT(mean_within(f.steady_mean_milli, k, 25), "steady mean %.2f", f.steady_mean_milli / 1e3);
    CRIT(sim_within(f.steady_min, k, 25) && sim_within(f.steady_max, k, 25), "steady %u..%u", f.steady_min,
         f.steady_max);
    CRIT((f.steady_max - f.steady_min) * 100 <= k * 20, "steady peak-to-peak %u", f.steady_max - f.steady_min);
    CRIT(f.track_ns <= 5 * SLUICE_NS_PER_S, "tracking the halving took %.1f s", f.track_ns / 1e9);
    CRIT(mean_within(f.halved_mean_milli, hk, 25), "halved mean %.2f", f.halved_mean_milli / 1e3);
    CRIT((f.halved_max - f.halved_min) * 100 <= hk * 20 + 100, "halved %u..%u", f.halved_min, f.halved_max);
    CRIT(f.recover_ns <= 5 * SLUICE_NS_PER_S, "recovery took %.1f s", f.recover_ns / 1e9);
    CRIT(mean_within(f.recovered_mean_milli, k, 25), "recovered mean %.2f", f.recovered_mean_milli / 1e3);
    /* What the limit is for: requests run near their no-load latency, even halved. */
    CRIT(f.steady_latency_ns * 100 <= r->backend.base_ns * 125, "steady latency %.2f ms", f.steady_latency_ns / 1e6);
    CRIT(f.halved_latency_ns * 100 <= r->backend.base_ns * 125, "halved latency %.2f ms", f.halved_latency_ns / 1e6);
#undef CRIT
    return bad;
}

/* The scenario of the issue (knee 20) and a larger one (knee 100), two seeds each. */
static void test_controllers_converge_and_track(void) {
    uint64_t seed = t_seed();
    for (int c = SL_ADAPT_GRADIENT2; c <= SL_ADAPT_AIMD; c++) {
        for (int knee = 20; knee <= 100; knee += 80) {
            for (uint64_t s = seed; s < seed + 2; s++) {
                sim_adapt_default(&run, (sl_adapt_ctl)c, s);
                run.backend.knee = (uint32_t)knee;
                run.rate_per_s = 150 * (uint64_t)knee;
                run.params.initial = (uint32_t)knee / 2;
                run.params.max = 20 * (uint32_t)knee;
                sim_adapt(&run);
                judge(&run, name((sl_adapt_ctl)c), true);
                T_CHECK(run.admitted > 0 && run.rejected > 0); /* it was overloaded */
            }
        }
    }
}

/* The same checks fail for a limit that does not adapt: too high for the halved backend
 * (latency doubles), and a limit at the knee cannot follow the halving at all. */
static void test_fixed_limit_fails_the_checks(void) {
    for (uint32_t fixed = 20; fixed <= 40; fixed += 20) {
        sim_adapt_default(&run, SL_ADAPT_GRADIENT2, t_seed());
        run.params.min = run.params.max = run.params.initial = fixed;
        sim_adapt(&run);
        T_CHECK(judge(&run, "fixed", false) > 0);
    }
}

/* The trace is deterministic for a seed and changes with it. */
static void test_deterministic(void) {
    static sim_adapt_run other;
    sim_adapt_default(&run, SL_ADAPT_VEGAS, 7);
    sim_adapt(&run);
    sim_adapt_default(&other, SL_ADAPT_VEGAS, 7);
    sim_adapt(&other);
    T_EQ_U(run.admitted, other.admitted);
    T_CHECK(memcmp(run.trace, other.trace, sizeof(run.trace[0]) * run.npoints) == 0);
    sim_adapt_default(&other, SL_ADAPT_VEGAS, 8);
    sim_adapt(&other);
    T_CHECK(run.admitted != other.admitted);
}

int main(void) {
    T_RUN(test_controllers_converge_and_track);
    T_RUN(test_fixed_limit_fails_the_checks);
    T_RUN(test_deterministic);
    return T_DONE();
}
