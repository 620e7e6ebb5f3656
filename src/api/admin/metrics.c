/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c -- GET /metrics: the Prometheus text exposition (format 0.0.4), written with
 * src/core/prom.c so that no family goes out without HELP and TYPE. Per-worker counters
 * (single writer each) are summed at scrape time: counting takes no lock and no atomic
 * read-modify-write. Series are bounded by the configuration (policies, windows, stores,
 * listeners, Redis seeds) and the hot-key top N, never by keys, paths or hosts; labels
 * carry names from the config and keyed hashes, never a raw key.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/prom.h"
#include "store/redis/store.h"
#include "server/capacity_metrics.h"
#include "server/envoy_stats.h"
#include "server/grpc_conn.h"
#include "server/observe.h"
#include "server/server.h"
#include "store/memory/override.h"
#include "store/redis/override.h"
#include "api/admin/overrides.h"

#ifndef SLUICE_COMMIT
#define SLUICE_COMMIT "unknown"
#endif

static uint64_t sum_worker(sl_server *s, size_t off) {
    uint64_t t = 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        t += atomic_load_explicit((_Atomic uint64_t *)((char *)s->workers[i]->met + off),
                                  memory_order_relaxed);
    return t;
}

#define SUM(field) sum_worker(s, offsetof(sl_wmetrics, field))

static uint64_t sum_obs(sl_server *s, size_t off) {
    uint64_t t = 0;
    for (unsigned i = 0; i < s->nworkers; i++)
        t += atomic_load_explicit((_Atomic uint64_t *)((char *)s->workers[i]->obs + off),
                                  memory_order_relaxed);
    return t;
}

#define OSUM(field) sum_obs(s, offsetof(sl_obs_w, field))

static void decisions(sl_server *s, sl_prom *p) {
    sl_obs *o = s->obs;
    unsigned n = atomic_load(&o->nseries);
    sl_prom_family(p, "sluice_decisions_total", SL_PROM_COUNTER,
                   "Decisions, counted under every policy that saw the request, by that policy's "
                   "result and the name of the window that decided (empty when none did); "
                   "policy=\"(no rule)\": requests no policy or rule matched.");
    for (unsigned i = 0; i < n; i++)
        for (int r = 0; r < SL_MET_RESULTS; r++) {
            uint64_t t = OSUM(dec[i][r]);
            if (t == 0) continue;
            const char *l[] = {"policy", o->series[i].policy, "result", sl_obs_result_names[r],
                               "window", o->series[i].window, NULL};
            sl_prom_u64(p, l, t);
        }
    sl_prom_family(p, "sluice_near_limit_total", SL_PROM_COUNTER,
                   "Decisions a policy did not limit that left its deciding window at or beyond "
                   "the near-limit ratio (observe.near_limit, default 80 % used).");
    for (unsigned i = 1; i < n; i++) {
        uint64_t t = OSUM(near[i]);
        if (t == 0) continue;
        const char *l[] = {"policy", o->series[i].policy, "window", o->series[i].window, NULL};
        sl_prom_u64(p, l, t);
    }
    sl_prom_family(p, "sluice_window_info", SL_PROM_GAUGE,
                   "1 for every window of the config: its `window` label (the window's name) "
                   "and its rate as written (rate), to join on (policy, window).");
    const sl_config *wcfg = sl_obs_gen_now(s)->cfg;
    for (unsigned i = 1; i < n; i++) {
        if (o->series[i].window[0] == '\0' || o->series[i].rate[0] == '\0' ||
            !sl_obs_in_config(wcfg, o->series[i].policy))
            continue;
        const char *l[] = {"policy", o->series[i].policy, "window", o->series[i].window, "rate",
                           o->series[i].rate, NULL};
        sl_prom_u64(p, l, 1);
    }
    sl_prom_family(p, "sluice_admitted_cost_total", SL_PROM_COUNTER,
                   "Cost units admitted by the policy (1 per request, the operation's weight, "
                   "plus what settles charged above a reservation).");
    const sl_config *cfg = sl_obs_gen_now(s)->cfg;
    for (unsigned i = 1; i < n; i++) {
        if (o->series[i].window[0] != '\0') continue;
        uint64_t t = OSUM(cost[i]);
        if (t == 0 && !sl_obs_in_config(cfg, o->series[i].policy)) continue;
        const char *l[] = {"policy", o->series[i].policy, NULL};
        sl_prom_u64(p, l, t);
    }
}

static void store(sl_server *s, sl_prom *p) {
    const char *sname = s->inner_ops ? s->inner_ops->name : "memory";
    sl_prom_family(p, "sluice_store_latency_seconds", SL_PROM_HISTOGRAM,
                   "Store operations, from the call to the answer (sampled: 1 call in 16 per "
                   "worker).");
    const sl_prom_hist *hs[SL_MAX_WORKERS];
    for (int op = 0; op < SL_OBS_OPS; op++) {
        if (op == 4 && (s->inner_ops == NULL || s->inner_ops->claim == NULL)) continue;
        for (unsigned i = 0; i < s->nworkers; i++) hs[i] = &s->workers[i]->obs->store_lat[op];
        const char *l[] = {"store", sname, "op", sl_obs_op_names[op], NULL};
        sl_prom_histogram(p, l, sl_obs_lat_bounds, SL_OBS_LAT_BOUNDS, hs, s->nworkers,
                          SLUICE_NS_PER_S);
    }
    sl_prom_family(p, "sluice_store_errors_total", SL_PROM_COUNTER,
                   "Store failures by kind (a decision then follows its policies' "
                   "on_store_error).");
    if (s->redis) {
        sl_redis_totals t;
        sl_redis_store_totals(&t);
        const struct {
            const char *kind;
            uint64_t v;
        } k[] = {{"timeout", t.timeouts},         {"error", t.errors},
                 {"breaker_open", t.breaker_open}, {"node_down", t.node_down},
                 {"pool_full", t.pool_full}};
        for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
            const char *l[] = {"store", sname, "kind", k[i].kind, NULL};
            sl_prom_u64(p, l, k[i].v);
        }
    } else {
        for (int e = 0; e < SL_OBS_STORE_ERRS; e++) {
            const char *l[] = {"store", sname, "kind", sl_obs_store_err_names[e], NULL};
            sl_prom_u64(p, l, OSUM(store_err[e]));
        }
    }
    sl_obs_prom_keys(s, p); /* sluice_keys and sluice_evictions_total, by policy */
    sluice_store_stats st;
    sluice_store_stats_get(s->store, &st);
    sl_prom_family(p, "sluice_store_capacity_keys", SL_PROM_GAUGE,
                   "Entries the memory store may hold (store.max_keys).");
    sl_prom_u64(p, NULL, st.capacity);
    sl_prom_family(p, "sluice_store_entries", SL_PROM_GAUGE,
                   "Entries the memory store holds now, all policies together.");
    sl_prom_u64(p, NULL, st.keys);
    sl_prom_family(p, "sluice_store_bytes", SL_PROM_GAUGE, "Memory held by the store's tables.");
    sl_prom_u64(p, NULL, st.bytes);
    /* sluice_redis_node_up{node,role}: per node, from the Redis store's own text (below) */
}

typedef struct ovr_scrape {
    sl_prom *p;
    const sl_config *cfg;
    uint64_t orphaned;
    bool values;
} ovr_scrape;

static void ovr_policy(void *ud, const char *policy, int64_t n) {
    ovr_scrape *o = ud;
    bool in = sl_obs_in_config(o->cfg, policy);
    if (!o->values) {
        if (!in && n > 0) o->orphaned += (uint64_t)n;
        return;
    }
    if (!in) return; /* a removed policy's overrides are counted as orphaned, not by name */
    const char *l[] = {"policy", policy, NULL};
    sl_prom_u64(o->p, l, n > 0 ? (uint64_t)n : 0);
}

/* Per-key overrides: how many per policy in force (bounded by the config), how many
 * dormant because their policy is gone, and decisions decided under one, by kind. */
static void overrides_metrics(sl_server *s, sl_prom *p) {
    sl_ovr_table *t = sl_store_overrides(s->store); /* Redis: the local copy */
    if (t == NULL) return;
    ovr_scrape o = {p, sl_obs_gen_now(s)->cfg, 0, true};
    sl_prom_family(p, "sluice_overrides", SL_PROM_GAUGE,
                   "Per-key overrides set, by policy of the configuration in force.");
    sl_ovr_policy_each(t, ovr_policy, &o);
    o.values = false;
    sl_ovr_policy_each(t, ovr_policy, &o);
    sl_prom_family(p, "sluice_overrides_orphaned", SL_PROM_GAUGE,
                   "Overrides kept dormant because their policy is not in the configuration.");
    sl_prom_u64(p, NULL, o.orphaned);
    sl_prom_family(p, "sluice_override_decisions_total", SL_PROM_COUNTER,
                   "Decisions of a key under a per-key override, by the override's kind.");
    static const char *const kinds[5] = {"none", "plan", "limits", "block", "exempt"};
    for (int k = 1; k < 5; k++) {
        const char *l[] = {"kind", kinds[k], NULL};
        sl_prom_u64(p, l, OSUM(ovr_dec[k]));
    }
    if (!s->redis) return;
    /* the Redis store: the feed that keeps this instance's copy (store/redis/override.c) */
    sl_redis_ovr_stats st;
    sl_redis_ovr_stats_get(&st);
    static const struct { const char *name, *help; } fc[] = {
        {"sluice_overrides_redis_polls_total", "Polls of the overrides' change feed in Redis."},
        {"sluice_overrides_redis_changes_total", "Override changes read from the feed into this copy."},
        {"sluice_overrides_redis_writes_total", "Override changes this instance wrote to Redis."},
        {"sluice_overrides_redis_errors_total", "Feed polls or writes that failed (Redis unreachable, an error reply)."},
        {"sluice_overrides_redis_full_passes_total",
         "Full reads of Redis's overrides: at start, after a reload, behind a trim, or when Redis lost its data."},
        {"sluice_overrides_redis_refused_total", "Feed changes this instance's configuration could not take."},
    };
    uint64_t fv[6] = {st.polls, st.changes, st.writes, st.errors, st.full_passes, sl_ovr_redis_refused()};
    for (size_t i = 0; i < 6; i++) {
        sl_prom_family(p, fc[i].name, SL_PROM_COUNTER, fc[i].help);
        sl_prom_u64(p, NULL, fv[i]);
    }
    sl_prom_family(p, "sluice_overrides_redis_synced", SL_PROM_GAUGE,
                   "1 once this instance's copy has read Redis's overrides whole, else 0.");
    sl_prom_u64(p, NULL, st.synced ? 1 : 0);
    sl_prom_family(p, "sluice_overrides_redis_version", SL_PROM_GAUGE,
                   "The feed version this instance's copy has reached.");
    sl_prom_u64(p, NULL, st.version);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * SLUICE_NS_PER_S + ts.tv_nsec;
    sl_prom_family(p, "sluice_overrides_redis_last_poll_age_seconds", SL_PROM_GAUGE,
                   "Seconds since the last successful poll of the feed (+Inf: none yet).");
    sl_prom_f64(p, NULL, st.last_ok_ns > 0 ? (double)(now - st.last_ok_ns) / 1e9 : INFINITY);
}

static void server_families(sl_server *s, sl_prom *p) {
    sl_obs *o = s->obs;
    static const char *const listeners[SL_KINDS] = {"http", "resp", "admin", "grpc"};
    sl_prom_family(p, "sluice_connections", SL_PROM_GAUGE, "Open client connections.");
    sl_prom_u64(p, NULL, atomic_load(&s->nconns));
    sl_prom_family(p, "sluice_connections_refused_total", SL_PROM_COUNTER,
                   "Connections refused at the connection cap, by listener.");
    for (int k = 0; k < SL_KINDS; k++) {
        const char *l[] = {"listener", listeners[k], NULL};
        sl_prom_u64(p, l, OSUM(refused[k]));
    }
    sl_prom_family(p, "sluice_connection_buffer_bytes", SL_PROM_GAUGE,
                   "Bytes of every connection's read and write buffers (bounded by --max-buffered).");
    sl_prom_u64(p, NULL, atomic_load(&s->buffered));
    sl_prom_family(p, "sluice_connections_evicted_total", SL_PROM_COUNTER,
                   "Stalled connections closed (oldest first) to keep buffers within --max-buffered.");
    sl_prom_u64(p, NULL, atomic_load(&s->evicted));
    sl_prom_family(p, "sluice_http_requests_total", SL_PROM_COUNTER, "HTTP/1.1 requests parsed.");
    sl_prom_u64(p, NULL, SUM(http_requests));
    sl_prom_family(p, "sluice_resp_commands_total", SL_PROM_COUNTER, "RESP commands parsed.");
    sl_prom_u64(p, NULL, SUM(resp_commands));
    sl_prom_family(p, "sluice_bad_requests_total", SL_PROM_COUNTER,
                   "Bad requests by reason: parse (could not be parsed; the connection is "
                   "closed), missing_key (a policy's key is missing and it says on_missing_key: "
                   "reject; answered 400).");
    const char *br_parse[] = {"reason", "parse", NULL}, *br_key[] = {"reason", "missing_key", NULL};
    sl_prom_u64(p, br_parse, SUM(bad_requests));
    sl_prom_u64(p, br_key, SUM(bad_missing_key));
    sl_prom_family(p, "sluice_timeouts_total", SL_PROM_COUNTER,
                   "Connections closed by a read, idle or write timeout.");
    sl_prom_u64(p, NULL, SUM(timeouts));
    sl_prom_family(p, "sluice_request_duration_seconds", SL_PROM_HISTOGRAM,
                   "Time to parse, decide and encode one request answered at once (sampled: 1 "
                   "request in 16).");
    const sl_prom_hist *hs[SL_MAX_WORKERS];
    for (unsigned i = 0; i < s->nworkers; i++) hs[i] = &s->workers[i]->obs->req_lat;
    sl_prom_histogram(p, NULL, sl_obs_req_bounds, SL_OBS_REQ_BOUNDS, hs, s->nworkers,
                      SLUICE_NS_PER_S);
    if (s->snapshot_path[0] != '\0') {
        pthread_mutex_lock(&s->snap_mu);
        uint64_t ok = s->snap_ok, failed = s->snap_failed, damaged = s->snap_damaged;
        int64_t last = s->snap_last_ok_wall_ns;
        bool empty = s->snap_started_empty[0] != '\0';
        pthread_mutex_unlock(&s->snap_mu);
        sl_prom_family(p, "sluice_snapshot_writes_total", SL_PROM_COUNTER,
                       "Snapshots of the memory store written (ok) or not (failed; the log and "
                       "/readyz say why, with the system's error).");
        const char *lo[] = {"outcome", "ok", NULL}, *lf[] = {"outcome", "failed", NULL};
        sl_prom_u64(p, lo, ok);
        sl_prom_u64(p, lf, failed);
        sl_prom_family(p, "sluice_snapshot_last_success_timestamp_seconds", SL_PROM_GAUGE,
                       "When this process last wrote a snapshot (Unix time; 0: not yet). What a "
                       "crash would lose is the traffic since then.");
        sl_prom_u64(p, NULL, (uint64_t)(last / SLUICE_NS_PER_S));
        sl_prom_family(p, "sluice_snapshot_damaged_total", SL_PROM_COUNTER,
                       "Damaged snapshots found at start (moved aside, never overwritten).");
        sl_prom_u64(p, NULL, damaged);
        sl_prom_family(p, "sluice_snapshot_started_empty", SL_PROM_GAUGE,
                       "1 when this process started with no state because its snapshot was damaged "
                       "or unreadable (store.snapshot.on_damaged: start_empty).");
        sl_prom_u64(p, NULL, empty ? 1 : 0);
    }
    sl_prom_family(p, "sluice_reloads_total", SL_PROM_COUNTER,
                   "Configuration loads by source (startup, sighup, admin-api, file-change) and "
                   "outcome (ok, refused).");
    static const char *const sources[SL_OBS_SOURCES] = {"startup", "sighup", "admin-api",
                                                        "file-change"};
    for (int src = 0; src < SL_OBS_SOURCES; src++)
        for (int oc = 0; oc < 2; oc++) {
            uint64_t v = atomic_load(&o->reloads[src][oc]);
            if (v == 0 && src == 3) continue; /* a config directory's watcher only */
            const char *l[] = {"source", sources[src], "outcome", oc ? "refused" : "ok", NULL};
            sl_prom_u64(p, l, v);
        }
    overrides_metrics(s, p);
    sl_prom_family(p, "sluice_config_generation", SL_PROM_GAUGE,
                   "The configuration generation in force (1 at start, +1 per applied reload).");
    sl_prom_u64(p, NULL, sl_obs_gen_now(s)->id);
    sl_prom_family(p, "sluice_workers", SL_PROM_GAUGE, "Event loop threads.");
    sl_prom_u64(p, NULL, s->nworkers);
    sl_prom_family(p, "sluice_log_dropped_total", SL_PROM_COUNTER,
                   "Log lines lost: queue full, over an event's rate limit, decision lines over "
                   "the decision log's rate, or the destination failing.");
    sl_prom_u64(p, NULL, sl_log_dropped(o->log));
    sl_log_stats ls;
    sl_log_stats_get(o->log, &ls);
    sl_prom_family(p, "sluice_log_decisions_total", SL_PROM_COUNTER,
                   "Decision log: lines queued (logged), eligible decisions left out of the "
                   "sample (sampled_out) and sampled ones over the rate (rate_limited).");
    const char *l1[] = {"outcome", "logged", NULL}, *l2[] = {"outcome", "sampled_out", NULL},
               *l3[] = {"outcome", "rate_limited", NULL};
    sl_prom_u64(p, l1, ls.decisions_logged);
    sl_prom_u64(p, l2, ls.decisions_sampled_out);
    sl_prom_u64(p, l3, ls.decisions_rate_limited);
    sl_prom_family(p, "sluice_audit_entries_total", SL_PROM_COUNTER,
                   "Audit trail entries recorded (every configuration change attempt).");
    sl_prom_u64(p, NULL, sl_audit_total(o->audit));
}

/* The shared tables a tenant could fill (docs/operations.md, "What an attacker can fill"):
 * what they hold and how often a full share or table refused a new request. */
static void table_families(sl_server *s, sl_prom *p) {
    const sl_gen *g = sl_obs_gen_now(s);
    sl_token_table *t = g ? sl_engine_tokens(g->engine) : NULL;
    uint64_t held = 0, refused = 0;
    sl_token_table_stats(t, &held, &refused);
    sl_prom_family(p, "sluice_tokens_outstanding", SL_PROM_GAUGE,
                   "Settle/release tokens live now (leases and reservations not yet given back).");
    sl_prom_u64(p, NULL, held);
    sl_prom_family(p, "sluice_tokens_capacity", SL_PROM_GAUGE,
                   "Live settle/release tokens the table holds (store.max_tokens); each policy "
                   "issuing tokens gets an equal share.");
    sl_prom_u64(p, NULL, sl_token_table_capacity(t));
    sl_prom_family(p, "sluice_table_refusals_total", SL_PROM_COUNTER,
                   "New requests refused because a shared table (or the requester's share of it) "
                   "was full, by table.");
    const char *lt[] = {"table", "tokens", NULL};
    sl_prom_u64(p, lt, refused);
    const char *lc[] = {"table", "cl_throttle", NULL};
    sl_prom_u64(p, lc, sl_cell_refused(s));
    const char *lp[] = {"table", "pending", NULL};
    sl_prom_u64(p, lp, SUM(pending_refused));
    const char *lx[] = {"table", "explain", NULL};
    sl_prom_u64(p, lx, SUM(explain_refused));
}

/* Renderers that write text themselves (gRPC, the Redis client's events, envoy statistics) go in as is:
 * each writes its own HELP and TYPE. */
static void raw_parts(sl_server *s, sl_prom *p) {
    char *buf = malloc(65536);
    if (buf == NULL) return;
    sl_wbuf w;
    sl_wbuf_init(&w, buf, 65536);
    sl_grpc_metrics_render(s, &w);
    if (!w.overflow) sl_prom_raw(p, buf, w.len);
    if (s->redis) {
        int n = sl_redis_store_metrics(buf, 65536);
        if (n > 0) sl_prom_raw(p, buf, (size_t)n);
    }
    free(buf);
    /* config loads; envoyproxy/ratelimit's families in compat mode */
    size_t cap = sl_envoy_stats_render_size();
    buf = malloc(cap);
    if (buf == NULL) return;
    sl_wbuf_init(&w, buf, cap);
    sl_envoy_stats_render(s, &w);
    if (!w.overflow) sl_prom_raw(p, buf, w.len);
    free(buf);
}

char *sl_metrics_render(sl_server *s, size_t *len) {
    sl_prom p;
    sl_prom_init(&p);
    decisions(s, &p);
    sl_cap_prom(s, &p); /* capacity_metrics.c */
    sl_obs_prom_hot_keys(s, &p);
    store(s, &p);
    server_families(s, &p);
    table_families(s, &p);
    raw_parts(s, &p);
    sl_prom_build_info(&p, "sluice", SLUICE_VERSION, SLUICE_COMMIT);
    sl_prom_process(&p);
    char *out = sl_prom_finish(&p, len);
    if (out == NULL) {
        sl_log_printf(s->obs->log, SL_LOG_ERROR, "metrics_failed", "metrics not rendered: %s",
                      p.errmsg);
    }
    sl_prom_deinit(&p);
    return out;
}
