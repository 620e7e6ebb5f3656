/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity_metrics.c -- what capacity protection tells /metrics, by policy: the adaptive
 * limit, its no-load latency estimate and the slots in flight as of the policy's last
 * decision (gauges), the requests shed per class and reason, and the refusals
 * and violations of penalties (counters). Series are (policy) x (class index, reason):
 * bounded by the config like every other family; no key ever appears. Counting is one
 * relaxed atomic add (workers share these counters: shedding is rare next to decisions);
 * gauges are relaxed stores of the latest value.
 */
#include <stdio.h>
#include <string.h>

#include "server/capacity_metrics.h"
#include "server/observe.h"

enum { N_REASONS = 4, N_PEN = 3 }; /* shed: -, priority, reserved, full; penalty: block, challenge, violation */

typedef struct cap_series {
    _Atomic int32_t seen;        /* 1 once an adaptive decision was counted here */
    _Atomic uint32_t limit;
    _Atomic uint32_t in_flight;
    _Atomic int64_t noload_ns;
    _Atomic uint64_t shed[SL_SHED_MAX_CLASSES][N_REASONS];
    _Atomic uint64_t pen[N_PEN];
} cap_series;

static cap_series g_series[SL_OBS_SERIES];

static void add(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

static void gauges(cap_series *cs, const sl_cap_info *x) {
    atomic_store_explicit(&cs->limit, x->limit, memory_order_relaxed);
    atomic_store_explicit(&cs->in_flight, x->in_flight, memory_order_relaxed);
    atomic_store_explicit(&cs->noload_ns, x->noload_ns, memory_order_relaxed);
    atomic_store_explicit(&cs->seen, 1, memory_order_relaxed);
}

void sl_cap_count(sl_worker *w, const sl_verdict *v, size_t i, size_t j, unsigned pseries) {
    (void)w;
    if (!v->run.capacity || pseries >= SL_OBS_SERIES) return;
    cap_series *cs = &g_series[pseries];
    for (size_t k = i; k < j; k++) {
        const sl_verdict_item *it = &v->items[k];
        const sl_cap_info *x = &it->x;
        if (x->kind == 0) continue;
        if (x->kind & SL_CAPI_ADAPT) gauges(cs, x);
        if ((x->kind & SL_CAPI_SHED) && x->shed_reason != 0 && !it->result.allowed && x->shed_cls < SL_SHED_MAX_CLASSES)
            add(&cs->shed[x->shed_cls][x->shed_reason < N_REASONS ? x->shed_reason : N_REASONS - 1]);
        if ((x->kind & SL_CAPI_PENALTY) && !it->result.allowed) {
            if (x->violation) add(&cs->pen[2]);
            else if (x->pen_action == SL_PENALTY_BLOCK) add(&cs->pen[0]);
            else if (x->pen_action == SL_PENALTY_CHALLENGE) add(&cs->pen[1]);
        }
    }
}

void sl_cap_prom(sl_server *s, sl_prom *p) {
    sl_obs *o = s->obs;
    unsigned n = atomic_load(&o->nseries);
    const sl_engine *e = sl_obs_gen_now(s)->engine;
    static const char *const rnames[N_REASONS] = {"", "priority", "reserved", "full"};
    sl_prom_family(p, "sluice_adaptive_limit", SL_PROM_GAUGE,
                   "Adaptive concurrency: the limit enforced as of the policy's last decision.");
    for (unsigned i = 1; i < n; i++)
        if (atomic_load_explicit(&g_series[i].seen, memory_order_relaxed) && o->series[i].window[0] == '\0') {
            const char *l[] = {"policy", o->series[i].policy, NULL};
            sl_prom_u64(p, l, atomic_load_explicit(&g_series[i].limit, memory_order_relaxed));
        }
    sl_prom_family(p, "sluice_adaptive_noload_seconds", SL_PROM_GAUGE,
                   "Adaptive concurrency: the estimated no-load latency of the backend (0: not measured yet).");
    for (unsigned i = 1; i < n; i++)
        if (atomic_load_explicit(&g_series[i].seen, memory_order_relaxed) && o->series[i].window[0] == '\0') {
            const char *l[] = {"policy", o->series[i].policy, NULL};
            sl_prom_fixed(p, l, atomic_load_explicit(&g_series[i].noload_ns, memory_order_relaxed), SLUICE_NS_PER_S);
        }
    sl_prom_family(p, "sluice_in_flight", SL_PROM_GAUGE,
                   "Adaptive concurrency: requests holding a slot as of the policy's last decision.");
    for (unsigned i = 1; i < n; i++)
        if (atomic_load_explicit(&g_series[i].seen, memory_order_relaxed) && o->series[i].window[0] == '\0') {
            const char *l[] = {"policy", o->series[i].policy, NULL};
            sl_prom_u64(p, l, atomic_load_explicit(&g_series[i].in_flight, memory_order_relaxed));
        }
    sl_prom_family(p, "sluice_shed_total", SL_PROM_COUNTER,
                   "Requests refused by priority shedding, by the class shed and why (priority: the budget is "
                   "filled beyond the class's share; reserved: what is left is other classes' reserve; full).");
    for (unsigned i = 1; i < n; i++) {
        for (int c = 0; c < SL_SHED_MAX_CLASSES; c++)
            for (int r = 1; r < N_REASONS; r++) {
                uint64_t v = atomic_load_explicit(&g_series[i].shed[c][r], memory_order_relaxed);
                if (v == 0) continue;
                char cls[48];
                const char *name = sl_engine_class_name(e, o->series[i].policy, (unsigned)c);
                if (name != NULL) snprintf(cls, sizeof(cls), "%s", name);
                else snprintf(cls, sizeof(cls), "class%d", c);
                const char *l[] = {"policy", o->series[i].policy, "class", cls, "reason", rnames[r], NULL};
                sl_prom_u64(p, l, v);
            }
    }
    sl_prom_family(p, "sluice_penalties_total", SL_PROM_COUNTER,
                   "Progressive penalties: violations recorded (a key the limit refused starts or extends a "
                   "period), and requests refused by a running block or challenge.");
    static const char *const pnames[N_PEN] = {"block", "challenge", "violation"};
    for (unsigned i = 1; i < n; i++)
        for (int k = 0; k < N_PEN; k++) {
            uint64_t v = atomic_load_explicit(&g_series[i].pen[k], memory_order_relaxed);
            if (v == 0) continue;
            const char *l[] = {"policy", o->series[i].policy, "event", pnames[k], NULL};
            sl_prom_u64(p, l, v);
        }
}
