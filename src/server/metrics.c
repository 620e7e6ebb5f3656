/*
 * metrics.c -- the Prometheus text exposition (format 0.0.4) of the server's counters:
 * decisions by deciding policy and result, a sampled request latency histogram, store
 * keys/evictions, connections and reloads. Sums the per-worker counters at scrape time
 * (workers never share a counter, so counting takes no lock and no atomic RMW).
 * Labels carry policy names only, never a key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/envoy_stats.h"
#include "server/grpc_conn.h"
#include "redis/store.h"
#include "server/server.h"

const int64_t *sl__lat_bounds(void);

static const char *const result_names[SL_MET_RESULTS] = {"allowed", "limited", "shadow_limited",
                                                         "fail_open", "error"};

static void label_escaped(sl_wbuf *w, const char *s) {
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            sl_wbuf_printf(w, "\\%c", *s);
        else if (*s == '\n')
            sl_wbuf_puts(w, "\\n");
        else
            sl_wbuf_putc(w, *s);
    }
}

static uint64_t sum_worker(sl_server *s, size_t off) {
    uint64_t t = 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        t += atomic_load_explicit((_Atomic uint64_t *)((char *)s->workers[i]->met + off),
                                  memory_order_relaxed);
    return t;
}

#define SUM(field) sum_worker(s, offsetof(sl_wmetrics, field))

char *sl_metrics_render(sl_server *s, size_t *len) {
    unsigned nn = atomic_load(&s->met_nnames);
    size_t cap = 32768 + (size_t)nn * SL_MET_RESULTS * 200 + sl_envoy_stats_render_size();
    char *buf = malloc(cap);
    if (buf == NULL) return NULL;
    sl_wbuf w;
    sl_wbuf_init(&w, buf, cap);
    sl_wbuf_puts(&w, "# HELP sluice_decisions_total Decisions by deciding policy and result.\n"
                     "# TYPE sluice_decisions_total counter\n");
    for (unsigned p = 0; p < nn; p++) {
        for (int r = 0; r < SL_MET_RESULTS; r++) {
            uint64_t t = 0;
            for (unsigned i = 0; i < s->nworkers; i++)
                t += atomic_load_explicit(&s->workers[i]->met->dec[p][r], memory_order_relaxed);
            if (p == 0 && t == 0) continue;
            sl_wbuf_puts(&w, "sluice_decisions_total{policy=\"");
            label_escaped(&w, s->met_names[p]);
            sl_wbuf_printf(&w, "\",result=\"%s\"} %llu\n", result_names[r], (unsigned long long)t);
        }
    }
    const int64_t *b = sl__lat_bounds();
    sl_wbuf_puts(&w, "# HELP sluice_request_duration_seconds Time to parse, decide and encode one "
                     "request (sampled 1 in 16).\n# TYPE sluice_request_duration_seconds histogram\n");
    uint64_t cum = 0;
    for (int k = 0; k <= SL_LAT_BUCKETS; k++) {
        cum += SUM(lat[k]);
        if (k < SL_LAT_BUCKETS)
            sl_wbuf_printf(&w, "sluice_request_duration_seconds_bucket{le=\"%lld.%09lld\"} %llu\n",
                           (long long)(b[k] / SLUICE_NS_PER_S), (long long)(b[k] % SLUICE_NS_PER_S),
                           (unsigned long long)cum);
        else
            sl_wbuf_printf(&w, "sluice_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
                           (unsigned long long)cum);
    }
    uint64_t sum_ns = SUM(lat_sum_ns);
    sl_wbuf_printf(&w, "sluice_request_duration_seconds_sum %llu.%09llu\n",
                   (unsigned long long)(sum_ns / 1000000000ull), (unsigned long long)(sum_ns % 1000000000ull));
    sl_wbuf_printf(&w, "sluice_request_duration_seconds_count %llu\n", (unsigned long long)SUM(lat_count));

    sluice_store_stats st;
    sluice_store_stats_get(s->store, &st);
    sl_wbuf_printf(&w,
                   "# HELP sluice_keys Keys held by the store.\n# TYPE sluice_keys gauge\nsluice_keys %llu\n"
                   "# TYPE sluice_store_capacity_keys gauge\nsluice_store_capacity_keys %llu\n"
                   "# TYPE sluice_store_bytes gauge\nsluice_store_bytes %llu\n"
                   "# HELP sluice_evictions_total Keys evicted (LRU) under memory pressure.\n"
                   "# TYPE sluice_evictions_total counter\nsluice_evictions_total %llu\n"
                   "# TYPE sluice_expired_total counter\nsluice_expired_total %llu\n"
                   "# HELP sluice_refused_total New keys refused at capacity.\n"
                   "# TYPE sluice_refused_total counter\nsluice_refused_total %llu\n",
                   (unsigned long long)st.keys, (unsigned long long)st.capacity,
                   (unsigned long long)st.bytes, (unsigned long long)st.evicted,
                   (unsigned long long)st.expired, (unsigned long long)st.refused);
    sl_wbuf_printf(&w,
                   "# TYPE sluice_connections gauge\nsluice_connections %u\n"
                   "# TYPE sluice_connections_refused_total counter\nsluice_connections_refused_total %llu\n"
                   "# TYPE sluice_http_requests_total counter\nsluice_http_requests_total %llu\n"
                   "# TYPE sluice_resp_commands_total counter\nsluice_resp_commands_total %llu\n"
                   "# TYPE sluice_bad_requests_total counter\nsluice_bad_requests_total %llu\n"
                   "# TYPE sluice_timeouts_total counter\nsluice_timeouts_total %llu\n"
                   "# TYPE sluice_reloads_total counter\nsluice_reloads_total{result=\"ok\"} %llu\n"
                   "sluice_reloads_total{result=\"failed\"} %llu\n"
                   "# TYPE sluice_config_generation gauge\nsluice_config_generation %llu\n"
                   "# TYPE sluice_workers gauge\nsluice_workers %u\n",
                   atomic_load(&s->nconns), (unsigned long long)SUM(conns_refused),
                   (unsigned long long)SUM(http_requests), (unsigned long long)SUM(resp_commands),
                   (unsigned long long)SUM(bad_requests), (unsigned long long)SUM(timeouts),
                   (unsigned long long)atomic_load(&s->reloads_ok),
                   (unsigned long long)atomic_load(&s->reloads_failed),
                   (unsigned long long)atomic_load(&s->gen)->id, s->nworkers);
    sl_grpc_metrics_render(s, &w);
    sl_envoy_stats_render(s, &w); /* config loads; envoyproxy/ratelimit's families in compat mode */
    if (w.overflow) {
        free(buf);
        return NULL;
    }
    if (s->redis && w.cap - w.len > 4096) {
        int rn = sl_redis_store_metrics(w.data + w.len, w.cap - w.len);
        if (rn > 0) w.len += (size_t)rn;
    }
    *len = w.len;
    return buf;
}

/* The metrics result of a verdict, counted under the deciding policy's slot. */
void sl_server_count_verdict(sl_worker *w, int rc, const sl_verdict *v) {
    unsigned slot = 0;
    if (rc == 0 && v->deciding >= 0 && (size_t)v->deciding < v->n && v->items[v->deciding].info)
        slot = sl_gen_slot(w->gen, v->items[v->deciding].info->policy);
    sl_met_result r;
    if (rc != 0 || v->action == SL_FAIL || v->action == SL_ERROR)
        r = SL_MET_ERROR;
    else if (v->action == SL_REJECT)
        r = SL_MET_LIMITED;
    else if (v->store_error)
        r = SL_MET_FAIL_OPEN;
    else if (v->shadow_limited)
        r = SL_MET_SHADOW;
    else
        r = SL_MET_ALLOWED;
    sl_server_count(w, slot, r);
}
