/* SPDX-License-Identifier: Apache-2.0 */
/*
 * observe.c -- the server's observability (see observe.h): the logger and its events,
 * decisions counted under every policy that saw them, sampled store latency, the hot-key
 * sketches fed (their reports: hotkeys.c), the audit trail, and the main thread's watchers.
 * Decision path (sl_server_count_verdict): per policy application one probe of the
 * generation's window map, relaxed single-writer counter stores, one sketch update when
 * hot keys are on, one relaxed load when the decision log is off; no lock, no allocation,
 * no clock read (the verdict carries its decision time).
 * Units: ns internally; metrics render seconds.
 */
#include "server/observe.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "clock.h"
#include "engine/explain.h"
#include "store/redis/store.h"
#include "server/capacity_metrics.h"
#include "server/rejections.h"
#include "server/series.h"
#include "store/decision.h"
#include "store/memory/famstats.h"

const char *const sl_obs_result_names[SL_MET_RESULTS] = {
    "allowed", "limited", "shadow_limited", "fail_open", "error",
    "rollout_limited", "fail_closed", "delayed", "recheck", "local", "local_limited"};
const char *const sl_obs_op_names[SL_OBS_OPS] = {"decide", "settle", "release", "reset", "claim"};
const char *const sl_obs_store_err_names[SL_OBS_STORE_ERRS] = {"unavailable", "full", "memory",
                                                               "io", "other"};
/* Store round trips: 1 us (memory) .. 1 s (a Redis timeout is 20 ms by default). */
const int64_t sl_obs_lat_bounds[SL_OBS_LAT_BOUNDS] = {
    1000,     2500,     5000,     10000,    25000,     50000,     100000,    250000,    500000,
    1000000,  2500000,  5000000,  10000000, 25000000,  50000000,  100000000, 250000000, 1000000000};
/* Requests (parse, decide, encode): 1 us .. 100 ms. */
const int64_t sl_obs_req_bounds[SL_OBS_REQ_BOUNDS] = {
    1000,    2500,    5000,    10000,   25000,    50000,    100000,
    250000,  500000,  1000000, 2500000, 10000000, 25000000, 100000000};

static const char *const source_names[SL_OBS_SOURCES] = {"startup", "sighup", "admin-api",
                                                         "file-change"};

static _Atomic int g_last_format = -1; /* the format of the last logger made (sl_obs_last_format) */

int sl_obs_last_format(void) { return atomic_load(&g_last_format); }

static _Thread_local sl_worker *tls_worker; /* the worker this thread runs (NULL: main) */

static inline void inc(_Atomic uint64_t *c, uint64_t by) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

/* ---- series ---------------------------------------------------------------------------- */

unsigned sl_obs_series_for(sl_obs *o, const char *policy, const char *window) {
    if (policy == NULL) policy = "";
    if (window == NULL) window = "";
    if (policy[0] == '\0' && window[0] == '\0') return 0;
    pthread_mutex_lock(&o->mu);
    unsigned n = atomic_load(&o->nseries), found = 0;
    for (unsigned i = 1; i < n && !found; i++)
        if (strcmp(o->series[i].policy, policy) == 0 && strcmp(o->series[i].window, window) == 0)
            found = i;
    if (!found && n < SL_OBS_SERIES) {
        snprintf(o->series[n].policy, sizeof(o->series[n].policy), "%s", policy);
        snprintf(o->series[n].window, sizeof(o->series[n].window), "%s", window);
        found = n;
        atomic_store(&o->nseries, n + 1); /* published after the names */
    }
    pthread_mutex_unlock(&o->mu);
    return found; /* 0 when the table is full: counted under policy="" */
}

/* Why not s->gen: on a worker (admin requests), only the generation it pinned is safe
 * from being freed under it; the main thread frees generations itself. */
sl_gen *sl_obs_gen_now(sl_server *s) {
    return tls_worker != NULL && tls_worker->srv == s && tls_worker->gen != NULL ? tls_worker->gen
                                                                                 : atomic_load(&s->gen);
}

bool sl_obs_in_config(const sl_config *cfg, const char *policy) {
    size_t n = sl_config_policy_count(cfg);
    for (size_t i = 0; i < n; i++)
        if (strcmp(sl_config_policy_name(cfg, i), policy) == 0) return true;
    return false;
}

int sl_obs_policy_series(sl_obs *o, const char *policy) {
    int r = -1;
    pthread_mutex_lock(&o->mu);
    unsigned n = atomic_load(&o->nseries);
    for (unsigned i = 1; i < n && r < 0; i++)
        if (strcmp(o->series[i].policy, policy) == 0 && o->series[i].window[0] == '\0') r = (int)i;
    pthread_mutex_unlock(&o->mu);
    return r;
}

/* ---- lifetime ----------------------------------------------------------------------------- */

static unsigned nworkers_of(const sl_server *s) {
    unsigned nw = s->opt.workers;
    if (nw == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        nw = n > 0 ? (unsigned)n : 1;
    }
    return nw > SL_MAX_WORKERS ? SL_MAX_WORKERS : nw;
}

static void apply_decision_log(sl_obs *o, const sl_settings *st) {
    sl_log_decisions_set(o->log, st->log.decisions, st->log.decisions_rejections_only,
                         st->log.decisions_sample_ppm, st->log.decisions_per_s,
                         st->log.decisions_burst, st->log_raw_keys);
    atomic_store(&o->dec_on, st->log.decisions ? 1 : 0);
    atomic_store(&o->raw_keys, st->log_raw_keys ? 1 : 0);
    atomic_store(&o->near_ppm, st->observe.near_limit_ppm);
}

int sl_obs_create(sl_server *s, const sl_settings *st, char *err, size_t errlen) {
    sl_obs *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    o->srv = s;
    pthread_mutex_init(&o->mu, NULL);
    pthread_mutex_init(&o->census_mu, NULL);
    atomic_store(&o->nseries, 1); /* series 0: nothing matched, or an error before a policy */
    snprintf(o->series[0].policy, sizeof(o->series[0].policy), "%s", SL_OBS_NO_RULE);
    s->obs = o;
    if (sl_hash_random_key(&o->hkey) != 0) {
        snprintf(err, errlen, "cannot read random bytes for the key hash");
        return -1;
    }
    o->nworkers = nworkers_of(s);
    o->hot_counters = st->observe.hot_counters;
    o->hot_top = st->observe.hot_top;
    o->hot_interval_ns = st->observe.hot_interval_ns;

    sl_log_config lc;
    sl_log_config_default(&lc);
    lc.level = (sl_log_level)st->log.level;
    lc.format = (sl_log_format)st->log.format;
    if (s->opt.log_level[0] && sl_log_level_parse(s->opt.log_level, &lc.level) != 0) {
        snprintf(err, errlen, "bad --log-level '%s' (expected error, warn, info or debug)",
                 s->opt.log_level);
        return -1;
    }
    if (s->opt.log_format[0] && sl_log_format_parse(s->opt.log_format, &lc.format) != 0) {
        snprintf(err, errlen, "bad --log-format '%s' (expected text or json)", s->opt.log_format);
        return -1;
    }
    snprintf(o->log_file, sizeof(o->log_file), "%s",
             s->opt.log_file[0] ? s->opt.log_file : st->log.file);
    o->log_format = (int)lc.format;
    atomic_store(&g_last_format, (int)lc.format);
    lc.path = o->log_file;
    lc.hash_key = &o->hkey;
    lc.raw_keys = st->log_raw_keys;
    /* The writer thread must not take the signals the main thread waits for (SIGTERM
     * would kill the process instead of draining it): it inherits this mask. */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    int rc = sl_log_create(&o->log, &lc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot open the log file %s: %s", o->log_file, strerror(-rc));
        return -1;
    }
    sl_log_set_default(o->log);
    apply_decision_log(o, st);
    /* count-only: one summary line per interval, never one per connection */
    sl_log_kind_set(o->log, "conn_refused", SL_LOG_WARN, 0, 0, "connections refused");
    /* a client without its key can send thousands a second: 1 line/s, the rest summarised */
    sl_log_kind_set(o->log, "missing_key", SL_LOG_WARN, 1, 5, NULL);
    /* the rejection summary: one line per refusing policy per interval, every one of them
     * (bounded by the config's policies, SL_OBS_SERIES) */
    sl_log_kind_set(o->log, "rejections", SL_LOG_WARN, 1000, SL_OBS_SERIES, NULL);

    sl_audit_config ac = {.path = st->audit.file[0] ? st->audit.file : NULL, .ring = st->audit.keep};
    rc = sl_audit_create(&o->audit, &ac);
    if (rc != 0) {
        snprintf(err, errlen, "cannot create the audit trail: %s", strerror(-rc));
        return -1;
    }
    s->cell_slot = sl_obs_series_for(o, "cl.throttle", "");
    return 0;
}

void sl_obs_destroy(sl_server *s) {
    sl_obs *o = s->obs;
    if (o == NULL) return;
    for (unsigned i = 0; i < SL_OBS_SERIES; i++) {
        sl_topk **sk = atomic_load(&o->topk[i]);
        if (sk == NULL) continue;
        for (unsigned k = 0; k < o->nworkers; k++) sl_topk_destroy(sk[k]);
        free(sk);
    }
    sl_audit_destroy(o->audit);
    if (o->log != NULL) {
        sl_log_flush(o->log, SLUICE_NS_PER_S);
        sl_log_destroy(o->log); /* also clears the process default */
    }
    free(o->census);
    pthread_mutex_destroy(&o->mu);
    pthread_mutex_destroy(&o->census_mu);
    free(o);
    s->obs = NULL;
}

sl_obs_w *sl_obs_worker_new(void) {
    sl_obs_w *ow = calloc(1, sizeof(sl_obs_w));
    if (ow != NULL && (ow->rej = sl_rej_worker_new()) == NULL) {
        free(ow);
        return NULL;
    }
    return ow;
}
void sl_obs_worker_free(sl_obs_w *ow) {
    if (ow == NULL) return;
    sl_rej_worker_free(ow->rej);
    for (int i = 0; i < SL_OBS_EXPLAINS; i++) sl_explain_free(ow->xs_x[i]);
    free(ow);
}

/* ---- store latency: the operations wrapped, 1 call in 16 timed ----------------------------- */

/* Why a per-thread pool: a sampled call's completion must find its start time and the
 * caller's callback, and the store's own completion argument is the caller's. A pool of
 * records per worker thread (single writer, no lock) carries them; when it is empty the
 * call simply is not sampled. Completions run on the thread that started the call (the
 * worker watches its lane's loop). */
typedef struct lat_rec {
    sl_store_cb cb;
    void *ud;
    int64_t t0;
    uint8_t op;
    bool used;
} lat_rec;

#define LAT_RECS 32
static _Thread_local sl_obs_w *tls_w;
static _Thread_local const sl_store_ops *tls_inner;
static _Thread_local uint32_t tls_seq;
static _Thread_local lat_rec tls_rec[LAT_RECS];
static const sl_store_ops *g_inner;

void sl_obs_thread_attach(sl_worker *w) {
    tls_worker = w;
    tls_w = w->obs;
    tls_inner = w->srv->inner_ops;
}

static const sl_store_ops *inner(void) { return tls_inner ? tls_inner : g_inner; }

static lat_rec *sample(unsigned op, sl_store_cb cb, void *ud) {
    if (tls_w == NULL || (tls_seq++ & 15) != 0) return NULL;
    for (int i = 0; i < LAT_RECS; i++)
        if (!tls_rec[i].used) {
            lat_rec *r = &tls_rec[i];
            *r = (lat_rec){cb, ud, sl_clock_mono_ns(), (uint8_t)op, true};
            return r;
        }
    return NULL;
}

static void lat_done(void *ud, int rc, const sl_sresult *res) {
    lat_rec *r = ud;
    int64_t ns = sl_clock_mono_ns() - r->t0;
    if (tls_w != NULL)
        sl_prom_hist_observe(&tls_w->store_lat[r->op], sl_obs_lat_bounds, SL_OBS_LAT_BOUNDS, ns);
    sl_store_cb cb = r->cb;
    void *cud = r->ud;
    r->used = false;
    cb(cud, rc, res);
}

static void w_decide(void *lane, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                     sl_store_cb cb, void *ud) {
    lat_rec *r = sample(0, cb, ud);
    if (r == NULL) inner()->decide(lane, items, n, flags, now, cb, ud);
    else inner()->decide(lane, items, n, flags, now, lat_done, r);
}

static void w_settle(void *lane, const sl_sitem *item, uint64_t actual, sluice_time reserved_at,
                     sluice_time now, sl_store_cb cb, void *ud) {
    lat_rec *r = sample(1, cb, ud);
    if (r == NULL) inner()->settle(lane, item, actual, reserved_at, now, cb, ud);
    else inner()->settle(lane, item, actual, reserved_at, now, lat_done, r);
}

static void w_release(void *lane, const sl_sitem *item, uint64_t lease, sluice_time now,
                      sl_store_cb cb, void *ud) {
    lat_rec *r = sample(2, cb, ud);
    if (r == NULL) inner()->release(lane, item, lease, now, cb, ud);
    else inner()->release(lane, item, lease, now, lat_done, r);
}

static void w_reset(void *lane, const sl_sitem *items, size_t n, sluice_time now, sl_store_cb cb,
                    void *ud) {
    lat_rec *r = sample(3, cb, ud);
    if (r == NULL) inner()->reset(lane, items, n, now, cb, ud);
    else inner()->reset(lane, items, n, now, lat_done, r);
}

static void w_claim(void *lane, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now,
                    sl_store_cb cb, void *ud) {
    lat_rec *r = sample(4, cb, ud);
    if (r == NULL) inner()->claim(lane, id, op, ttl_ns, now, cb, ud);
    else inner()->claim(lane, id, op, ttl_ns, now, lat_done, r);
}

/* A batch (pipelined RESP checks) is timed as a whole, 1 batch in 16, and each of its
 * decisions counted at the batch's average: the batch path must survive the wrapping
 * (without it every pipelined check lost its prefetching, 0.6x the throughput). */
static int w_decide_batch(void *lane, const sluice_item *items, size_t n, sluice_time now,
                          sluice_result *out) {
    bool s = tls_w != NULL && (tls_seq++ & 15) == 0;
    int64_t t0 = s ? sl_clock_mono_ns() : 0;
    int k = inner()->decide_batch(lane, items, n, now, out);
    if (s && k > 0) {
        int64_t per = (sl_clock_mono_ns() - t0) / k;
        for (int i = 0; i < k; i++)
            sl_prom_hist_observe(&tls_w->store_lat[0], sl_obs_lat_bounds, SL_OBS_LAT_BOUNDS, per);
    }
    return k;
}

static sl_store_ops g_wrapped;

const sl_store_ops *sl_obs_wrap_ops(const sl_store_ops *in) {
    g_inner = in;
    g_wrapped = (sl_store_ops){.name = in->name, .immediate = in->immediate, .shared = in->shared,
                               .decide = w_decide, .settle = w_settle, .release = w_release,
                               .reset = w_reset, .claim = in->claim ? w_claim : NULL,
                               .decide_batch = in->decide_batch ? w_decide_batch : NULL,
                               .check = in->check};
    return &g_wrapped;
}

/* ---- generations ------------------------------------------------------------------------- */

static size_t ptr_hash(const void *p, size_t mask) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & mask;
}

static const sl_obs_gen_ent *gen_find(const sl_obs_gen *g, const void *key) {
    if (g == NULL) return NULL;
    size_t mask = g->cap - 1;
    for (size_t i = ptr_hash(key, mask), k = 0; k < g->cap; k++, i = (i + 1) & mask) {
        if (g->ent[i].key == key) return &g->ent[i];
        if (g->ent[i].key == NULL) return NULL;
    }
    return NULL;
}

static void gen_put(sl_obs_gen *g, const sl_obs_gen_ent *e) {
    size_t mask = g->cap - 1;
    for (size_t i = ptr_hash(e->key, mask);; i = (i + 1) & mask)
        if (g->ent[i].key == NULL || g->ent[i].key == e->key) {
            g->ent[i] = *e;
            return;
        }
}

void sl_obs_window_label(const sl_window_info *wi, char *out, size_t cap) {
    char d[48];
    sl_window_describe(wi, d, sizeof(d));
    if (strncmp(d, "override/", 9) == 0 || wi == NULL || wi->name == NULL || wi->name[0] == '\0')
        snprintf(out, cap, "%s", d);
    else if (wi->plan != NULL)
        snprintf(out, cap, "%s/%s", wi->plan, wi->name);
    else
        snprintf(out, cap, "%s", wi->name);
}

/* Sketches for a policy seen for the first time (memory fixed by observe.hot_keys). */
static void ensure_topk(sl_obs *o, unsigned pslot) {
    if (o->hot_counters == 0 || pslot == 0 || atomic_load(&o->topk[pslot]) != NULL) return;
    sl_topk **sk = calloc(o->nworkers, sizeof(*sk));
    if (sk == NULL) return;
    sl_topk_config c = {o->hot_counters, o->hot_interval_ns, SL_TOPK_RAW_MAX};
    for (unsigned k = 0; k < o->nworkers; k++)
        if (sl_topk_create(&sk[k], &c) != 0) {
            for (unsigned j = 0; j < k; j++) sl_topk_destroy(sk[j]);
            free(sk);
            return;
        }
    atomic_store_explicit(&o->topk[pslot], sk, memory_order_release);
}

sl_obs_gen *sl_obs_gen_create(sl_server *s, const sl_engine *e) {
    sl_obs *o = s->obs;
    size_t nw = sl_engine_windows(e, NULL, 0);
    const sl_window_info **wins = calloc(nw + 1, sizeof(*wins));
    sl_obs_gen *g = calloc(1, sizeof(*g));
    if (wins == NULL || g == NULL) goto oom;
    sl_engine_windows(e, wins, nw);
    g->cap = 16;
    while (g->cap < 4 * (nw + 1)) g->cap *= 2; /* windows and policy names, load <= 1/2 */
    g->ent = calloc(g->cap, sizeof(*g->ent));
    if (g->ent == NULL) goto oom;
    for (size_t i = 0; i < nw; i++) {
        sl_window_meta m;
        sl_window_meta_get(wins[i], &m);
        char label[128], rate[48];
        sl_obs_window_label(wins[i], label, sizeof(label));
        sl_window_describe(wins[i], rate, sizeof(rate));
        unsigned ps = sl_obs_series_for(o, m.policy, "");
        unsigned ws = sl_obs_series_for(o, m.policy, label);
        if (ws != 0 && o->series[ws].rate[0] == '\0') /* set once, before any scrape reads it */
            snprintf(o->series[ws].rate, sizeof(o->series[ws].rate), "%s", rate);
        uint8_t f = (uint8_t)((m.shadow ? SL_OBSF_SHADOW : 0) |
                              (!m.shadow && m.rollout_pct < 100 ? SL_OBSF_ROLLOUT : 0) |
                              (m.fail_closed ? SL_OBSF_CLOSED : 0) | (m.delay ? SL_OBSF_DELAY : 0));
        sl_obs_gen_ent ent = {wins[i], (uint16_t)ws, (uint16_t)ps, f};
        gen_put(g, &ent);
        /* the policy's name: missing-key rejections carry only it */
        sl_obs_gen_ent pe = {m.policy, (uint16_t)ps, (uint16_t)ps, f};
        if (m.policy != NULL && gen_find(g, m.policy) == NULL) gen_put(g, &pe);
        ensure_topk(o, ps);
    }
    free(wins);
    return g;
oom:
    free(wins);
    if (g) free(g->ent);
    free(g);
    return NULL;
}

void sl_obs_gen_destroy(sl_obs_gen *g) {
    if (g == NULL) return;
    free(g->ent);
    free(g);
}

/* ---- counting (the decision path) ----------------------------------------------------------- */

void sl_server_count(sl_worker *w, unsigned series, sl_met_result r) {
    if (w->obs == NULL) return;
    if (series >= SL_OBS_SERIES) series = 0;
    inc(&w->obs->dec[series][r], 1);
}

void sl_server_observe_latency(sl_worker *w, int64_t ns) {
    if (w->obs) sl_prom_hist_observe(&w->obs->req_lat, sl_obs_req_bounds, SL_OBS_REQ_BOUNDS, ns);
}

void sl_obs_conn_refused(sl_worker *w, sl_conn_kind kind) {
    if (w->obs && (unsigned)kind < SL_KINDS) inc(&w->obs->refused[kind], 1);
    sl_log_count(w->srv->obs ? w->srv->obs->log : NULL, "conn_refused");
}

static unsigned store_err_kind(int e) {
    switch (e) {
    case SLUICE_ESTORE: return 0;
    case SLUICE_EFULL: return 1;
    case SLUICE_ENOMEM: return 2;
    case SLUICE_EIO: return 3;
    default: return 4;
    }
}

/* The W3C trace id (32 hex digits) of a traceparent, into out[33]; NULL when malformed. */
static const char *trace_id(const char *tp, char out[33]) {
    if (tp == NULL || strlen(tp) < 55 || tp[2] != '-' || tp[35] != '-') return NULL;
    for (int i = 0; i < 32; i++) {
        char c = tp[3 + i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return NULL;
        out[i] = c;
    }
    out[32] = '\0';
    return out;
}

/* One policy application (items [i, j) of v: one policy, one key) counted, sketched and
 * maybe logged. */
static void count_run(sl_worker *w, const sl_obs_gen *gm, const sl_verdict *v, size_t i, size_t j,
                      const char *tp) {
    sl_obs *o = w->srv->obs;
    sl_obs_w *ow = w->obs;
    const sl_verdict_item *first = &v->items[i];
    const sl_obs_gen_ent *pe = gen_find(gm, first->info);
    if (pe == NULL) return; /* a window this generation does not know: not counted */
    unsigned pslot = pe->pseries;
    sl_met_result r;
    size_t dec = i;
    bool lim = false, consumed = false;
    uint64_t cost = 0;
    int64_t delay = 0;
    for (size_t k = i; k < j; k++) {
        const sl_verdict_item *it = &v->items[k];
        lim |= it->would_limit;
        consumed |= it->consumed;
        if (it->cost > cost) cost = it->cost;
        if (it->result.delay_ns > delay) delay = it->result.delay_ns;
    }
    /* the deciding window of this policy: the limiting one with the longest retry-after,
     * else the one closest to exhaustion (the engine's rule, within the policy) */
    for (size_t k = i + 1; k < j; k++) {
        if (sl_window_decides_over(&v->items[k].result, v->items[k].would_limit ? SL_RANK_LIMITS : 0,
                                   &v->items[dec].result, v->items[dec].would_limit ? SL_RANK_LIMITS : 0))
            dec = k;
    }
    const sl_obs_gen_ent *de = gen_find(gm, v->items[dec].info);
    unsigned wslot = de ? de->series : pslot;
    bool shadow = first->shadow || (pe->flags & SL_OBSF_SHADOW);
    if (v->store_error) {
        r = (pe->flags & SL_OBSF_CLOSED) && !shadow ? SL_MET_FAIL_CLOSED : SL_MET_FAIL_OPEN;
        wslot = pslot;
    } else if (v->store_local && !shadow) { /* the store was down: decided at the share */
        r = lim ? SL_MET_LOCAL_LIMITED : SL_MET_LOCAL;
    } else if (lim) {
        if (shadow) r = (pe->flags & SL_OBSF_SHADOW) ? SL_MET_SHADOW : SL_MET_ROLLOUT;
        else if (v->action == SL_DELAY && v->recheck) r = SL_MET_RECHECK;
        else r = SL_MET_LIMITED;
    } else if (v->action == SL_DELAY && !v->recheck && delay > 0) {
        r = SL_MET_DELAYED;
    } else {
        r = SL_MET_ALLOWED;
    }
    inc(&ow->dec[wslot][r], 1);
    if (!v->store_error && !lim) {
        /* near limit: the deciding window left at or beyond the ratio used */
        const sluice_result *dr = &v->items[dec].result;
        uint64_t limit = v->items[dec].override ? v->items[dec].override_limit : dr->limit;
        uint64_t used = limit > dr->remaining ? limit - dr->remaining : 0;
        if (limit > 0 && (unsigned __int128)used * 1000000 >=
                             (unsigned __int128)limit * atomic_load_explicit(&o->near_ppm, memory_order_relaxed))
            inc(&ow->near[wslot], 1);
    }
    if (consumed && !v->store_error) inc(&ow->cost[pslot], cost);
    const unsigned char *key = v->keys + first->key_off;
    size_t klen = first->key_len;
    bool rejected = lim || r == SL_MET_FAIL_CLOSED;
    sl_series_note(w, v, i, dec, wslot, r, rejected); /* the console's ring (series.c) */
    sl_topk **sk = atomic_load_explicit(&o->topk[pslot], memory_order_acquire);
    bool refused = (r == SL_MET_LIMITED || r == SL_MET_FAIL_CLOSED || r == SL_MET_LOCAL_LIMITED) &&
                   sl_rej_enabled();
    uint64_t kh = (sk != NULL || refused) ? sl_topk_key_hash(&o->hkey, key, klen) : 0;
    if (sk != NULL && w->id < o->nworkers)
        sl_topk_add(sk[w->id], v->decided_at.mono_ns, kh, key, klen, cost ? cost : 1, rejected);
    if (refused) sl_rej_count(w, pslot, kh); /* the rejection summary (rejections.c) */
    if (atomic_load_explicit(&o->dec_on, memory_order_relaxed) && sl_log_enabled(o->log, SL_LOG_INFO)) {
        const sluice_result *dr = &v->items[dec].result;
        char tid[33];
        char raw[512];
        sl_log_dec d = {.trace_id = trace_id(tp, tid),
                        .policy = first->info->policy,
                        .window = de ? o->series[de->series].window : NULL,
                        .verdict = sl_obs_result_names[r],
                        .rejected = rejected,
                        .cost = (int64_t)cost,
                        .remaining = (int64_t)dr->remaining,
                        .limit = (int64_t)dr->limit,
                        .retry_after_ns = lim ? dr->retry_after_ns : -1,
                        .key = key,
                        .key_len = klen};
        if (atomic_load_explicit(&o->raw_keys, memory_order_relaxed)) {
            d.key_len = sl_key_text(key, klen, raw, sizeof(raw));
            d.key = raw;
        }
        sl_log_decision(o->log, &d);
    }
}

void sl_server_count_verdict_tp(sl_worker *w, int rc, const sl_verdict *v, const char *tp) {
    sl_obs_w *ow = w->obs;
    const sl_obs_gen *gm = w->gen ? w->gen->obs : NULL;
    if (ow == NULL) return;
    for (size_t g = 0; g < v->n_ovr; g++) /* per-key overrides: by kind, never by key */
        if (v->ovr[g].kind != 0 && v->ovr[g].kind < 5) inc(&ow->ovr_dec[v->ovr[g].kind], 1);
    if (v->missing_key_policy != NULL && rc == SLUICE_OK) {
        /* the client's fault, not the server's: a bad request (reason missing_key), and
         * one line (rate-limited per second, the rest summarised) naming the policy */
        const sl_obs_gen_ent *e = gen_find(gm, v->missing_key_policy);
        inc(&ow->dec[e ? e->pseries : 0][SL_MET_ERROR], 1);
        sl_met_inc(&w->met->bad_missing_key, 1);
        sl_obs *o = w->srv->obs;
        SL_LOG(o->log, SL_LOG_WARN, "missing_key",
               "request refused with 400: the policy's key is missing (on_missing_key: reject)",
               SL_LOG_STR("policy", v->missing_key_policy));
        return;
    }
    if (v->store_error) inc(&ow->store_err[store_err_kind(v->error)], 1);
    if (rc != SLUICE_OK || v->action == SL_ERROR) {
        /* an engine error: under every policy it reached, else under policy="" */
        bool any = false;
        for (size_t i = 0; i < v->n;) {
            size_t j = i + 1;
            while (j < v->n && v->items[j].info->policy == v->items[i].info->policy) j++;
            const sl_obs_gen_ent *e = gen_find(gm, v->items[i].info);
            if (e != NULL) {
                inc(&ow->dec[e->pseries][SL_MET_ERROR], 1);
                any = true;
            }
            i = j;
        }
        if (!any) inc(&ow->dec[0][SL_MET_ERROR], 1);
        return;
    }
    if (v->n == 0) {
        inc(&ow->dec[0][SL_MET_ALLOWED], 1); /* no policy matched */
        return;
    }
    /* prepare.c appends each policy application's windows together */
    for (size_t i = 0; i < v->n;) {
        size_t j = i + 1;
        while (j < v->n && v->items[j].info->policy == v->items[i].info->policy &&
               v->items[j].descriptor == v->items[i].descriptor &&
               (v->items[j].key_off == v->items[i].key_off || v->items[j].extra))
            j++;
        count_run(w, gm, v, i, j, tp);
        const sl_obs_gen_ent *pe = gen_find(gm, v->items[i].info);
        if (pe != NULL) sl_cap_count(w, v, i, j, pe->pseries); /* capacity_metrics.c */
        i = j;
    }
}

void sl_server_count_verdict(sl_worker *w, int rc, const sl_verdict *v) {
    sl_server_count_verdict_tp(w, rc, v, NULL);
}

void sl_server_count_settle(sl_worker *w, int rc, const sl_verdict *v) {
    if (rc != SLUICE_OK || w->obs == NULL || v->run.tok_op != SL_TOKEN_SETTLE) return;
    const sl_obs_gen *gm = w->gen ? w->gen->obs : NULL;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!it->settle || !it->consumed || v->run.actual <= it->cost) continue;
        const sl_obs_gen_ent *e = gen_find(gm, it->info);
        if (e != NULL) inc(&w->obs->cost[e->pseries], v->run.actual - it->cost);
        break; /* one policy's windows share the reservation: count it once */
    }
}

/* ---- reloads and the audit trail ----------------------------------------------------------- */

static size_t first_line(const char *s, char *out, size_t cap) {
    size_t n = 0;
    while (s && s[n] && s[n] != '\n' && n + 1 < cap) {
        out[n] = s[n];
        n++;
    }
    out[n] = '\0';
    return n;
}

void sl_obs_reload(sl_server *s, sl_audit_source src, const char *caller, const sl_gen *old,
                   const sl_gen *cur, const char *error, int64_t started_ns) {
    sl_obs *o = s->obs;
    if (o == NULL) return;
    int64_t took = sl_clock_mono_ns() - started_ns;
    unsigned si = (unsigned)src < SL_OBS_SOURCES ? (unsigned)src : 0;
    atomic_fetch_add(&o->reloads[si][cur ? 0 : 1], 1);
    sl_audit_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.source = src;
    ev.caller = caller;
    ev.path = s->opt.config_path;
    /* a load's own checksum (gen_create); a refused load's: the file as it is now */
    if (cur != NULL) memcpy(ev.sha256, cur->sha256, sizeof(ev.sha256));
    else if (sl_audit_sha256_file(s->opt.config_path, ev.sha256) != 0) ev.sha256[0] = '\0';
    sl_config_diff diff;
    memset(&diff, 0, sizeof(diff));
    sl_audit_change *chg = NULL;
    if (cur != NULL) {
        ev.ok = 1;
        ev.generation = cur->id;
        if (sl_config_diff_make(old ? old->cfg : NULL, cur->cfg, &diff) == SLUICE_OK) {
            chg = calloc(diff.nchanged + 1, sizeof(*chg));
            if (chg != NULL) {
                for (size_t i = 0; i < diff.nchanged; i++)
                    chg[i] = (sl_audit_change){diff.changed[i].policy, diff.changed[i].how};
                ev.changed = chg;
                ev.nchanged = diff.nchanged;
            }
            ev.added = (const char *const *)diff.added;
            ev.nadded = diff.nadded;
            ev.removed = (const char *const *)diff.removed;
            ev.nremoved = diff.nremoved;
        }
        const sl_settings *st = sl_config_settings(cur->cfg);
        apply_decision_log(o, st);
        if (src != SL_AUDIT_STARTUP && (strcmp(st->log.file, o->log_file) != 0 && !s->opt.log_file[0]))
            SL_LOG(o->log, SL_LOG_WARN, "log_settings", "log.file changed: it takes effect at restart",
                   SL_LOG_STR("file", st->log.file));
        if (!s->opt.log_level[0]) sl_log_set_level(o->log, (sl_log_level)st->log.level);
    } else {
        ev.ok = 0;
        ev.error = error;
        ev.generation = old ? old->id : 0;
    }
    int arc = sl_audit_record(o->audit, &ev);
    if (arc != 0)
        SL_LOG(o->log, SL_LOG_ERROR, "audit_write_failed",
               "the audit entry is kept in memory only (GET /v1/audit)",
               SL_LOG_STR("file", sl_config_settings((cur ? cur : old)->cfg)->audit.file),
               SL_LOG_STR("error", strerror(-arc)));
    /* one line: what was loaded, or why not (the caller only when a token named one) */
    sl_log_field f[12];
    size_t nf = 0;
    f[nf++] = SL_LOG_STR("source", source_names[si]);
    f[nf++] = SL_LOG_STR("outcome", cur ? "ok" : "refused");
    char line[512];
    if (cur != NULL) {
        f[nf++] = SL_LOG_UINT("generation", cur->id);
        f[nf++] = SL_LOG_UINT("policies", sl_config_policy_count(cur->cfg));
        f[nf++] = SL_LOG_UINT("added", diff.nadded);
        f[nf++] = SL_LOG_UINT("removed", diff.nremoved);
        f[nf++] = SL_LOG_UINT("changed", diff.nchanged);
    } else {
        first_line(error, line, sizeof(line));
        f[nf++] = SL_LOG_STR("error", line);
    }
    if (caller != NULL) f[nf++] = SL_LOG_STR("caller", caller);
    if (src != SL_AUDIT_STARTUP) f[nf++] = SL_LOG_DUR("took", took);
    if (cur != NULL)
        sl_log_write(o->log, SL_LOG_INFO, src == SL_AUDIT_STARTUP ? "config" : "reload",
                     src == SL_AUDIT_STARTUP ? "config loaded" : "config reloaded", f, nf);
    else
        sl_log_write(o->log, SL_LOG_WARN, "reload_refused", "reload refused, the old config stays",
                     f, nf);
    free(chg);
    sl_config_diff_free(&diff);
}

/* ---- start, stop, watchers ------------------------------------------------------------------ */

static const char *addr_or_off(const char *a) { return a[0] ? a : "off"; }

void sl_obs_started(sl_server *s) {
    sl_obs *o = s->obs;
    sl_gen *g = atomic_load(&s->gen);
    SL_LOG(o->log, SL_LOG_INFO, "start", "sluice serve started",
           SL_LOG_STR("version", SLUICE_VERSION), SL_LOG_STR("http", addr_or_off(s->opt.http)),
           SL_LOG_STR("resp", addr_or_off(s->opt.resp)), SL_LOG_STR("grpc", addr_or_off(s->opt.grpc)),
           SL_LOG_STR("admin", addr_or_off(s->opt.admin)), SL_LOG_UINT("workers", s->nworkers),
           SL_LOG_STR("store", s->inner_ops ? s->inner_ops->name : "memory"),
           SL_LOG_STR("config", s->opt.config_path), SL_LOG_UINT("generation", g ? g->id : 0),
           SL_LOG_BOOL("test_clock", s->opt.test_clock), SL_LOG_UINT("pid", (uint64_t)getpid()));
    sl_obs_reload(s, SL_AUDIT_STARTUP, NULL, NULL, g, NULL, sl_clock_mono_ns());
    sluice_store_stats_get(s->store, &o->last_stats);
    o->next_store_check_ns = sl_clock_mono_ns() + 10 * SLUICE_NS_PER_S;
}

void sl_obs_stopped(sl_server *s) {
    sl_obs *o = s->obs;
    sl_rej_flush(s); /* what the last interval refused */
    SL_LOG(o->log, SL_LOG_INFO, "stop", "sluice serve stopped",
           SL_LOG_STR("http", addr_or_off(s->opt.http)), SL_LOG_STR("resp", addr_or_off(s->opt.resp)),
           SL_LOG_STR("grpc", addr_or_off(s->opt.grpc)), SL_LOG_STR("admin", addr_or_off(s->opt.admin)),
           SL_LOG_DUR("uptime", sl_clock_wall_ns() - s->started_wall_ns));
}

/* Why deltas every 10 s: eviction is counted per shard by the store; what an operator
 * needs is "the store is under pressure now", once per interval, not once per key. */
void sl_obs_tick(sl_server *s) {
    sl_obs *o = s->obs;
    if (o == NULL) return;
    int64_t now = sl_clock_mono_ns();
    sl_rej_tick(s, now); /* the rejection summary's intervals */
    if (s->redis) sl_redis_store_watch(o->log);
    if (now < o->next_store_check_ns || s->redis) return;
    o->next_store_check_ns = now + 10 * SLUICE_NS_PER_S;
    sluice_store_stats st;
    sluice_store_stats_get(s->store, &st);
    uint64_t ev = st.evicted - o->last_stats.evicted, rf = st.refused - o->last_stats.refused;
    if (ev || rf)
        SL_LOG(o->log, SL_LOG_WARN, "eviction_pressure",
               rf ? "the memory store is full: new keys were refused"
                  : "the memory store is full: live keys were evicted (least recently used)",
               SL_LOG_UINT("evicted", ev), SL_LOG_UINT("refused", rf),
               SL_LOG_UINT("expired", st.expired - o->last_stats.expired),
               SL_LOG_UINT("keys", st.keys), SL_LOG_UINT("capacity", st.capacity),
               SL_LOG_DUR("interval", 10 * SLUICE_NS_PER_S));
    o->last_stats = st;
}
