/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_shed.h -- priority shedding under overload, shared by tests/unit/algo/test_shed_sim.c
 * (asserts) and tests/sim/capacity_sim.c (figures, plots). Event-driven on a fake clock,
 * deterministic per seed. Traffic arrives open-loop in classes (index 0 = critical) with
 * fixed weights; one budget is shared:
 *   FIXED     a concurrency limit of `capacity` slots, requests hold a slot `base_ns`
 *   ADAPTIVE  the limit of a gradient2 controller over sim_adaptive.h's backend
 *   BUCKET    a token bucket (libsluice's own algorithm): capacity = burst, use = burst -
 *             tokens; per-class use unknown (reserves act as floors)
 * Each arrival asks sl_shed_decide with the budget's capacity and use; admitted requests
 * take the budget (and, for concurrency, a per-class count) until they finish.
 */
#ifndef SL_SIM_SHED_H
#define SL_SIM_SHED_H

#include "algo/algo.h"
#include "algo/shed.h"
#include "sim_adaptive.h"

typedef enum sim_budget { SIM_FIXED = 1, SIM_ADAPTIVE = 2, SIM_BUCKET = 3 } sim_budget;

typedef struct sim_shed_run {
    /* inputs */
    sim_budget budget;
    sl_shed_params shed;
    uint32_t nclasses;
    uint32_t weight[SL_SHED_MAX_CLASSES];   /* share of arrivals per class, any unit */
    int64_t start_ns[SL_SHED_MAX_CLASSES];  /* a class sends nothing before this */
    uint64_t rate_per_s;                    /* all classes together */
    uint32_t capacity;                      /* FIXED: slots; BUCKET: burst */
    uint64_t bucket_rate_per_s;             /* BUCKET: refill */
    int64_t base_ns;                        /* FIXED: how long a request holds its slot */
    sim_backend backend;                    /* ADAPTIVE */
    sl_adapt_params adapt;                  /* ADAPTIVE */
    int64_t duration_ns, measure_from_ns;   /* count admissions from measure_from on */
    uint64_t seed;
    /* outputs, per class, counted from measure_from_ns */
    uint64_t offered[SL_SHED_MAX_CLASSES], admitted[SL_SHED_MAX_CLASSES];
    uint64_t shed_reason[SL_SHED_MAX_CLASSES][4];
    uint64_t inflight_sum[SL_SHED_MAX_CLASSES], inflight_samples; /* sampled every ms */
    uint32_t inflight_max[SL_SHED_MAX_CLASSES];
    /* the first `early_ns` after each class's start (counted whatever measure_from) */
    int64_t early_ns;
    uint64_t early_offered[SL_SHED_MAX_CLASSES], early_admitted[SL_SHED_MAX_CLASSES];
} sim_shed_run;

/* Admission of class c in per-mille (1000 = all). */
static inline uint64_t sim_shed_admit_permille(const sim_shed_run *r, uint32_t c) {
    return r->offered[c] ? r->admitted[c] * 1000 / r->offered[c] : 1000;
}

static inline void sim_shed(sim_shed_run *run) {
    static sim_heap h;
    sim_rng rng = {run->seed ? run->seed : 1};
    sl_shed_use use;
    sl_adapt_state ast;
    sl_limit tb;
    sl_tb_state tbs;
    bool tb_fresh = true;
    int64_t now = 0, next_arrival = 0, next_sample = run->measure_from_ns;
    int64_t gap_max = 2 * SLUICE_NS_PER_S / (int64_t)run->rate_per_s;
    uint32_t wsum = 0;
    memset(&h, 0, sizeof(h));
    memset(&use, 0, sizeof(use));
    memset(run->offered, 0, sizeof(run->offered));
    memset(run->admitted, 0, sizeof(run->admitted));
    memset(run->shed_reason, 0, sizeof(run->shed_reason));
    memset(run->inflight_sum, 0, sizeof(run->inflight_sum));
    memset(run->inflight_max, 0, sizeof(run->inflight_max));
    memset(run->early_offered, 0, sizeof(run->early_offered));
    memset(run->early_admitted, 0, sizeof(run->early_admitted));
    run->inflight_samples = 0;
    for (uint32_t c = 0; c < run->nclasses; c++) wsum += run->weight[c];
    if (run->budget == SIM_ADAPTIVE) sl_adapt_init(&run->adapt, &ast, 0);
    if (run->budget == SIM_BUCKET) {
        sluice_limit_spec spec;
        char err[128];
        memset(&spec, 0, sizeof(spec));
        spec.algo = SLUICE_TOKEN_BUCKET;
        spec.name = "sim";
        spec.limit = run->bucket_rate_per_s;
        spec.period_ns = SLUICE_NS_PER_S;
        spec.burst = run->capacity;
        memset(&tb, 0, sizeof(tb));
        sl_limit_init(&tb, &spec, NULL, err, sizeof(err));
    }
    while (now < run->duration_ns) {
        bool completion = h.n > 0 && h.done[0] <= next_arrival;
        now = completion ? h.done[0] : next_arrival;
        while (now >= next_sample) {
            for (uint32_t c = 0; c < run->nclasses; c++) {
                run->inflight_sum[c] += use.by_class[c];
                if (use.by_class[c] > run->inflight_max[c]) run->inflight_max[c] = use.by_class[c];
            }
            run->inflight_samples++;
            next_sample += SLUICE_NS_PER_MS;
        }
        if (completion) {
            uint8_t c = h.cls[0];
            int64_t lat = h.lat[0];
            uint32_t inflight = h.n;
            sim_pop(&h);
            sl_shed_give(&use, c, 1);
            if (run->budget == SIM_ADAPTIVE) sl_adapt_sample(&run->adapt, &ast, now, lat, SL_ADAPT_OK, inflight);
            continue;
        }
        next_arrival = now + 1 + (int64_t)sim_below(&rng, (uint64_t)gap_max);
        uint32_t pick = (uint32_t)sim_below(&rng, wsum), c = 0;
        while (c + 1 < run->nclasses && pick >= run->weight[c]) pick -= run->weight[c++];
        if (now < run->start_ns[c]) continue;
        bool counted = now >= run->measure_from_ns, early = now < run->start_ns[c] + run->early_ns;
        if (counted) run->offered[c]++;
        if (early) run->early_offered[c]++;
        uint64_t capacity, used;
        sluice_time t = {now, now};
        sl_result res;
        if (run->budget == SIM_BUCKET) {
            sl_algo_decide(&tb, tb_fresh ? NULL : &tbs, &tbs, t, 0, &res); /* a peek */
            tb_fresh = false;
            capacity = res.limit;
            used = res.limit - res.remaining;
        } else {
            capacity = run->budget == SIM_FIXED ? run->capacity : sl_adapt_limit(&run->adapt, &ast);
            used = h.n;
        }
        sl_shed_verdict v;
        sl_shed_decide(&run->shed, capacity, used, run->budget == SIM_BUCKET ? NULL : &use, c, 1, &v);
        if (v.admit && run->budget == SIM_BUCKET) {
            sl_algo_decide(&tb, &tbs, &tbs, t, 1, &res);
            v.admit = res.allowed;
        }
        if (!v.admit) {
            if (counted) run->shed_reason[c][v.reason < 4 ? v.reason : 3]++;
            continue;
        }
        if (counted) run->admitted[c]++;
        if (early) run->early_admitted[c]++;
        if (run->budget == SIM_BUCKET) continue; /* a rate: nothing held */
        int64_t lat = run->budget == SIM_FIXED ? sim_latency(&(sim_backend){run->base_ns, 1, 10, 0, 0}, &rng, now, 1)
                                               : sim_latency(&run->backend, &rng, now, h.n + 1);
        sim_push(&h, now + lat, lat, (uint8_t)c);
        sl_shed_take(&use, c, 1);
    }
}

/* The overload: 3 x capacity, 20 % critical, 20 % default, 40 % sheddable, 20 %
 * batch, default fill shares (100/90/70/50 %), measured after a 2 s warm-up of 20 s.
 * ADAPTIVE uses a knee of `knee` slots (the capacity is knee / 10 ms). */
static inline void sim_shed_default(sim_shed_run *run, sim_budget budget, uint32_t knee, uint64_t seed) {
    memset(run, 0, sizeof(*run));
    run->budget = budget;
    run->nclasses = 4;
    sl_shed_params_default(&run->shed, 4);
    run->weight[0] = 20;
    run->weight[1] = 20;
    run->weight[2] = 40;
    run->weight[3] = 20;
    run->duration_ns = 20 * SLUICE_NS_PER_S;
    run->measure_from_ns = 2 * SLUICE_NS_PER_S;
    run->seed = seed;
    switch (budget) {
    case SIM_FIXED: /* 100 slots of 50 ms: 2000/s */
        run->capacity = 100;
        run->base_ns = 50 * SLUICE_NS_PER_MS;
        run->rate_per_s = 6000;
        break;
    case SIM_ADAPTIVE: /* knee x 100/s */
        run->backend = (sim_backend){10 * SLUICE_NS_PER_MS, knee, 10, INT64_MAX, INT64_MAX};
        sl_adapt_params_default(&run->adapt, SL_ADAPT_GRADIENT2, 2, 10 * knee, knee / 2);
        run->rate_per_s = 300 * (uint64_t)knee;
        break;
    case SIM_BUCKET: /* 1000/s, burst 100 */
        run->capacity = 100;
        run->bucket_rate_per_s = 1000;
        run->rate_per_s = 3000;
        break;
    }
}

/* The reserve scenario: critical (reserve `reserve_ppm`) and sheddable share 100 slots of
 * 50 ms, both may fill to 100 %; sheddable floods at 3 x capacity from the start, critical
 * arrives from 2 s on at 20 % of the arrivals (its own demand: 0.2 x 6000/s x 50 ms = 60
 * slots, twice the reserve). */
static inline void sim_shed_reserve(sim_shed_run *run, uint32_t reserve_ppm, uint64_t seed) {
    memset(run, 0, sizeof(*run));
    run->budget = SIM_FIXED;
    run->nclasses = 2;
    run->shed.nclasses = 2;
    run->shed.cls[0] = (sl_shed_class){SL_PPM, reserve_ppm};
    run->shed.cls[1] = (sl_shed_class){SL_PPM, 0};
    run->weight[0] = 20;
    run->weight[1] = 80;
    run->start_ns[0] = 2 * SLUICE_NS_PER_S;
    run->capacity = 100;
    run->base_ns = 50 * SLUICE_NS_PER_MS;
    run->rate_per_s = 6000;
    run->duration_ns = 20 * SLUICE_NS_PER_S;
    run->measure_from_ns = 2 * SLUICE_NS_PER_S;
    run->early_ns = 25 * SLUICE_NS_PER_MS; /* ~30 critical arrivals: the reserve's worth */
    run->seed = seed;
}

#endif /* SL_SIM_SHED_H */
