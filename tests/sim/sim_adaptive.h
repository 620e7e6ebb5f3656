/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_adaptive.h -- a simulated backend for the adaptive concurrency controllers, shared by
 * tests/unit/algo/test_adaptive_sim.c (which asserts) and tests/sim/capacity_sim.c (which prints
 * the figures and draws the plots). Event-driven on a fake clock, integer nanoseconds,
 * deterministic for a given seed (SLUICE_SEED varies it).
 *
 * The backend: `knee` requests run in parallel at `base_ns` each (plus or minus jitter);
 * beyond the knee they share it, so a request admitted as the n-th in flight takes
 * base x max(n, knee) / knee (processor sharing, Little's law: throughput stays at
 * knee / base and only latency grows). Its knee halves at `halve_at` and comes back at
 * `restore_at`. Clients arrive open-loop at `rate` per second (uniform inter-arrival
 * gaps), are admitted while in flight < the controller's limit, rejected otherwise.
 */
#ifndef SL_SIM_ADAPTIVE_H
#define SL_SIM_ADAPTIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "algo/adaptive.h"
#include "sluice.h"

#define SIM_MAX_INFLIGHT 4096
#define SIM_TRACE_MAX 4096

typedef struct sim_rng {
    uint64_t s;
} sim_rng;

static inline uint64_t sim_next(sim_rng *r) {
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * UINT64_C(2685821657736338717);
}

/* Uniform in [0, n). */
static inline uint64_t sim_below(sim_rng *r, uint64_t n) {
    return n ? sim_next(r) % n : 0;
}

typedef struct sim_backend {
    int64_t base_ns;     /* latency at or below the knee */
    uint32_t knee;       /* parallelism before latency grows */
    uint32_t jitter_pct; /* each latency is scaled by a uniform factor in 1 +- jitter */
    int64_t halve_at_ns, restore_at_ns; /* the knee is knee/2 in [halve_at, restore_at) */
} sim_backend;

static inline uint32_t sim_knee_at(const sim_backend *b, int64_t t) {
    return (t >= b->halve_at_ns && t < b->restore_at_ns) ? b->knee / 2 : b->knee;
}

static inline int64_t sim_latency(const sim_backend *b, sim_rng *r, int64_t t, uint32_t n) {
    uint32_t k = sim_knee_at(b, t);
    int64_t lat = b->base_ns * (int64_t)(n > k ? n : k) / (int64_t)k;
    int64_t j = (int64_t)sim_below(r, 2 * (uint64_t)b->jitter_pct * 100 + 1) - (int64_t)b->jitter_pct * 100;
    return lat + lat * j / 10000;
}

/* A min-heap of completion times. */
typedef struct sim_heap {
    uint32_t n;
    int64_t done[SIM_MAX_INFLIGHT];
    int64_t lat[SIM_MAX_INFLIGHT];
    uint8_t cls[SIM_MAX_INFLIGHT];
} sim_heap;

static inline void sim_swap(sim_heap *h, uint32_t a, uint32_t b) {
    int64_t d = h->done[a], l = h->lat[a];
    uint8_t c = h->cls[a];
    h->done[a] = h->done[b];
    h->lat[a] = h->lat[b];
    h->cls[a] = h->cls[b];
    h->done[b] = d;
    h->lat[b] = l;
    h->cls[b] = c;
}

static inline void sim_push(sim_heap *h, int64_t done, int64_t lat, uint8_t cls) {
    uint32_t i = h->n++;
    h->done[i] = done;
    h->lat[i] = lat;
    h->cls[i] = cls;
    while (i > 0 && h->done[(i - 1) / 2] > h->done[i]) {
        sim_swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static inline void sim_pop(sim_heap *h) {
    h->n--;
    sim_swap(h, 0, h->n);
    uint32_t i = 0;
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->done[l] < h->done[m]) m = l;
        if (r < h->n && h->done[r] < h->done[m]) m = r;
        if (m == i) break;
        sim_swap(h, i, m);
        i = m;
    }
}

typedef struct sim_point {
    int64_t t_ns;
    uint32_t limit;    /* the enforced limit */
    uint32_t knee;     /* the backend's knee at t */
    int64_t noload_ns; /* the controller's no-load estimate */
    int64_t avg_ns;    /* average latency of the requests that finished in the last step */
    bool probing;      /* the controller is measuring its no-load latency at min */
} sim_point;

typedef struct sim_adapt_run {
    /* inputs */
    sl_adapt_params params;
    sim_backend backend;
    uint64_t rate_per_s;
    int64_t duration_ns, step_ns; /* trace every step */
    uint64_t seed;
    /* a poisoning client (0: none): releases attack_per_s times a second, evenly spaced,
     * reporting an ok sample of attack_latency_ns (issue 27) */
    uint64_t attack_per_s;
    int64_t attack_latency_ns;
    int64_t attack_until_ns; /* it stops then (0: never) */
    /* outputs */
    uint32_t npoints;
    sim_point trace[SIM_TRACE_MAX];
    uint64_t admitted, rejected;
} sim_adapt_run;

/* Runs the scenario and fills the trace. */
static inline void sim_adapt(sim_adapt_run *run) {
    static sim_heap h;
    sim_rng rng = {run->seed ? run->seed : 1};
    sl_adapt_state st;
    int64_t now = 0, next_arrival = 0, next_trace = 0;
    int64_t attack_gap = run->attack_per_s ? SLUICE_NS_PER_S / (int64_t)run->attack_per_s : 0;
    int64_t next_attack = attack_gap ? attack_gap / 2 : INT64_MAX;
    int64_t gap_max = 2 * SLUICE_NS_PER_S / (int64_t)run->rate_per_s;
    int64_t step_sum = 0;
    uint64_t step_n = 0;
    memset(&h, 0, sizeof(h));
    sl_adapt_init(&run->params, &st, now);
    run->npoints = 0;
    run->admitted = run->rejected = 0;
    while (now < run->duration_ns) {
        bool completion = h.n > 0 && h.done[0] <= next_arrival && h.done[0] <= next_attack;
        bool attack = !completion && next_attack < next_arrival;
        now = completion ? h.done[0] : attack ? next_attack : next_arrival;
        while (now >= next_trace && run->npoints < SIM_TRACE_MAX) {
            sim_point *pt = &run->trace[run->npoints++];
            pt->t_ns = next_trace;
            pt->limit = sl_adapt_limit(&run->params, &st);
            pt->knee = sim_knee_at(&run->backend, next_trace);
            pt->noload_ns = st.noload_ns;
            pt->probing = st.probing != 0;
            pt->avg_ns = step_n ? step_sum / (int64_t)step_n : 0;
            step_sum = 0;
            step_n = 0;
            next_trace += run->step_ns;
        }
        if (completion) {
            int64_t lat = h.lat[0];
            uint32_t inflight = h.n;
            sim_pop(&h);
            step_sum += lat;
            step_n++;
            sl_adapt_sample(&run->params, &st, now, lat, SL_ADAPT_OK, inflight);
        } else if (attack) {
            /* what it reports is the lie; the slot it held is not modelled (it may have
             * waited for one, or acquired while the limit was higher) */
            sl_adapt_sample(&run->params, &st, now, run->attack_latency_ns, SL_ADAPT_OK, h.n + 1);
            next_attack = now + attack_gap;
            if (run->attack_until_ns != 0 && next_attack >= run->attack_until_ns) next_attack = INT64_MAX;
        } else {
            uint32_t limit = sl_adapt_limit(&run->params, &st);
            if (h.n < limit && h.n < SIM_MAX_INFLIGHT) {
                int64_t lat = sim_latency(&run->backend, &rng, now, h.n + 1);
                sim_push(&h, now + lat, lat, 0);
                run->admitted++;
            } else {
                run->rejected++;
            }
            next_arrival = now + 1 + (int64_t)sim_below(&rng, (uint64_t)gap_max);
        }
    }
}

/* The figures the issue asks for, read from a trace. */
typedef struct sim_adapt_figures {
    int64_t settle_ns;          /* from start until the limit stays within 25 % of the knee */
    uint32_t steady_min, steady_max; /* over the second half of the first phase */
    uint64_t steady_mean_milli; /* mean limit x 1000 over it */
    int64_t track_ns;           /* from the halving until it stays within 25 % of the new knee */
    uint32_t halved_min, halved_max;
    uint64_t halved_mean_milli;
    int64_t recover_ns;         /* from the restore until it stays within 25 % of the knee */
    uint32_t recovered_min, recovered_max;
    uint64_t recovered_mean_milli;
    int64_t steady_latency_ns, halved_latency_ns; /* mean latency over those spans */
} sim_adapt_figures;

static inline bool sim_within(uint32_t limit, uint32_t knee, uint32_t pct) {
    uint64_t d = limit > knee ? limit - knee : knee - limit;
    return d * 100 <= (uint64_t)knee * pct;
}

/* Time from `from` until the limit stays within pct of the knee up to `to`
 * (to - from when it never does). */
static inline int64_t sim_settle(const sim_adapt_run *run, int64_t from, int64_t to, uint32_t pct) {
    int64_t last_out = from - 1;
    for (uint32_t i = 0; i < run->npoints; i++) {
        const sim_point *p = &run->trace[i];
        if (p->t_ns < from || p->t_ns >= to) continue;
        if (!sim_within(p->limit, p->knee, pct)) last_out = p->t_ns;
    }
    if (last_out < from) return 0;
    return last_out + run->step_ns - from;
}

static inline void sim_stats(const sim_adapt_run *run, int64_t from, int64_t to, uint32_t *mn,
                             uint32_t *mx, uint64_t *mean_milli) {
    uint64_t sum = 0, n = 0;
    *mn = UINT32_MAX;
    *mx = 0;
    for (uint32_t i = 0; i < run->npoints; i++) {
        const sim_point *p = &run->trace[i];
        if (p->t_ns < from || p->t_ns >= to) continue;
        if (p->limit < *mn) *mn = p->limit;
        if (p->limit > *mx) *mx = p->limit;
        sum += p->limit;
        n++;
    }
    *mean_milli = n ? sum * 1000 / n : 0;
}

static inline int64_t sim_mean_latency(const sim_adapt_run *run, int64_t from, int64_t to) {
    int64_t sum = 0, n = 0;
    for (uint32_t i = 0; i < run->npoints; i++) {
        const sim_point *p = &run->trace[i];
        if (p->t_ns < from || p->t_ns >= to || p->avg_ns == 0) continue;
        sum += p->avg_ns;
        n++;
    }
    return n ? sum / n : 0;
}

static inline void sim_adapt_measure(const sim_adapt_run *run, sim_adapt_figures *f) {
    int64_t h = run->backend.halve_at_ns, r = run->backend.restore_at_ns, end = run->duration_ns;
    f->settle_ns = sim_settle(run, 0, h, 25);
    sim_stats(run, h / 2, h, &f->steady_min, &f->steady_max, &f->steady_mean_milli);
    f->track_ns = sim_settle(run, h, r, 25);
    sim_stats(run, h + (r - h) / 2, r, &f->halved_min, &f->halved_max, &f->halved_mean_milli);
    f->steady_latency_ns = sim_mean_latency(run, h / 2, h);
    f->halved_latency_ns = sim_mean_latency(run, h + (r - h) / 2, r);
    f->recover_ns = sim_settle(run, r, end, 25);
    sim_stats(run, r + (end - r) / 2, end, &f->recovered_min, &f->recovered_max, &f->recovered_mean_milli);
}

/* The scenario of the issue: knee 20 at 10 ms, halved from 40 s to 60 s, 80 s in all,
 * offered 3000 requests/s (1.5 x the full capacity of 2000/s, 3 x the halved one). */
static inline void sim_adapt_default(sim_adapt_run *run, sl_adapt_ctl ctl, uint64_t seed) {
    memset(run, 0, sizeof(*run));
    sl_adapt_params_default(&run->params, ctl, 2, 200, 10);
    run->backend.base_ns = 10 * SLUICE_NS_PER_MS;
    run->backend.knee = 20;
    run->backend.jitter_pct = 10;
    run->backend.halve_at_ns = 40 * SLUICE_NS_PER_S;
    run->backend.restore_at_ns = 60 * SLUICE_NS_PER_S;
    if (ctl == SL_ADAPT_AIMD) run->params.timeout_ns = run->backend.base_ns * 5 / 4;
    run->rate_per_s = 3000;
    run->duration_ns = 80 * SLUICE_NS_PER_S;
    run->step_ns = 100 * SLUICE_NS_PER_MS;
    run->seed = seed;
}

#endif /* SL_SIM_ADAPTIVE_H */
