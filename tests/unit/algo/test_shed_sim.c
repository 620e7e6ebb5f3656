/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shed_sim.c -- priority shedding under 3 x overload (tests/sim/sim_shed.h): with 20 %
 * critical traffic, critical keeps >= 99 % admission on a fixed concurrency limit, an
 * adaptive one and a token bucket, while the lower classes absorb the rejections in order;
 * with a 30 % reserve, critical gets its reserve even though sheddable filled the budget
 * first (without the reserve it does not). Deterministic; SLUICE_SEED varies the traffic.
 */
#include "sim/sim_shed.h"
#include "t.h"

static sim_shed_run run;

static void test_overload_sheds_lowest_first(void) {
    static const sim_budget budgets[] = {SIM_FIXED, SIM_ADAPTIVE, SIM_BUCKET};
    for (size_t b = 0; b < sizeof(budgets) / sizeof(budgets[0]); b++) {
        sim_shed_default(&run, budgets[b], 100, t_seed());
        sim_shed(&run);
        uint64_t crit = sim_shed_admit_permille(&run, 0);
        if (crit < 990) T_FAIL("budget %d: critical admitted %llu permille", (int)budgets[b], (unsigned long long)crit);
        /* Lower classes never do better than higher ones, and the lowest two absorb
         * nearly everything that was refused. */
        for (uint32_t c = 1; c < run.nclasses; c++)
            T_CHECK(sim_shed_admit_permille(&run, c) <= sim_shed_admit_permille(&run, c - 1));
        uint64_t refused = 0, refused_low = 0, offered = 0, admitted = 0;
        for (uint32_t c = 0; c < run.nclasses; c++) {
            refused += run.offered[c] - run.admitted[c];
            offered += run.offered[c];
            admitted += run.admitted[c];
            if (c >= 2) refused_low += run.offered[c] - run.admitted[c];
        }
        T_CHECK(refused_low * 100 >= refused * 80);
        /* It was a real overload: about a third admitted. */
        T_CHECK(admitted * 100 >= offered * 25 && admitted * 100 <= offered * 45);
        /* Every refusal of a lower class says it was shed for its priority. */
        T_CHECK(run.shed_reason[3][SL_SHED_PRIORITY] > 0);
    }
}

/* The reserve: sheddable holds the whole budget when critical starts; with a 30 % reserve
 * the first critical requests are all admitted and critical holds at least its reserve on
 * average; without one it gets neither. */
static void test_reserve_when_sheddable_came_first(void) {
    sim_shed_reserve(&run, 300000, t_seed());
    sim_shed(&run);
    double crit = (double)run.inflight_sum[0] / (double)run.inflight_samples;
    /* The first 25 ms (shorter than a request): every critical request up to the 30
     * reserved slots is admitted at once (more when sheddable frees shared slots). */
    uint64_t due = run.early_offered[0] < 30 ? run.early_offered[0] : 30;
    T_CHECK(run.early_offered[0] > 10);
    T_CHECK(run.early_admitted[0] >= due);
    T_CHECK(crit >= 29.0);
    T_CHECK(run.inflight_max[1] <= 70); /* sheddable never took the reserve */

    sim_shed_reserve(&run, 0, t_seed());
    sim_shed(&run);
    crit = (double)run.inflight_sum[0] / (double)run.inflight_samples;
    due = run.early_offered[0] < 30 ? run.early_offered[0] : 30;
    T_CHECK(run.early_admitted[0] < due);
    T_CHECK(crit < 25.0);
}

int main(void) {
    T_RUN(test_overload_sheds_lowest_first);
    T_RUN(test_reserve_when_sheddable_came_first);
    return T_DONE();
}
