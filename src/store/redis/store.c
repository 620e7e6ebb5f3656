/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.c -- the Redis store as the server's workers use it: one client per worker thread
 * on a private sl_loop (which the worker's loop watches: an epoll fd is pollable), the
 * store operations over it, and the server-wide pieces: the settings (URL, timeout,
 * secret, time mode), readiness over every worker's client and the counters for
 * /metrics. Nothing here waits: every operation's answer arrives from the lane's loop
 * (or at once when the client answers locally).
 */
#include "store/redis/store.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "algo/limiter.h"
#include "core/clock.h"
#include "core/log.h"
#include "store/redis/local.h"
#include "store/redis/redis.h"

#define BR_MAX_WORKERS 64

typedef struct rlane {
    sl_loop loop;      /* private: the client's connections and timer */
    sl_loop *outer;    /* the worker's loop, which watches ours */
    sl_io outer_io;
    sl_redis *r;
    int slot;
} rlane;

static sl_redis_opts g_opts;
static bool g_on;
static _Atomic(sl_redis *) g_clients[BR_MAX_WORKERS];

static char g_desc[700]; /* what the store connects to, without credentials */

bool sl_redis_store_url(const char *url) {
    return sl_redis_url_is_redis(url) || strcmp(url, "redis:") == 0;
}

int sl_redis_store_config(const char *url, const sl_settings *st, bool test_clock, char *err,
                          size_t errlen) {
    sl_redis_opts_default(&g_opts);
    if (st->store.redis_time_local) g_opts.time_mode = SL_REDIS_TIME_CALLER; /* the URL may still say */
    g_opts.log = sl_redis_log_stderr; /* node errors and recoveries, never a credential */
    /* the URL (never repeated in a message: it may hold a password) or the config's
     * address, over the config file's credentials, TLS and sentinel settings */
    if (strcmp(url, "redis:") == 0) url = "";
    if (sl_redis_opts_configure(&g_opts, url, st->store.redis_addr, st->store.type == SL_STORE_REDIS_CLUSTER,
                                &st->store.redis, err, errlen) != SLUICE_OK)
        return SLUICE_EINVAL;
    sl_redis_opts_describe(&g_opts, g_desc, sizeof(g_desc));
    /* on the test clock the scripts must see the test's time, not Redis's */
    if (test_clock) g_opts.time_mode = SL_REDIS_TIME_CALLER;
    if (g_opts.timeout_ns == 0)
        g_opts.timeout_ns = st->store.redis_timeout_ns > 0 ? st->store.redis_timeout_ns : 20 * SLUICE_NS_PER_MS;
    if (st->envoy.compat) { /* envoyproxy/ratelimit's counters, shared with it */
        g_opts.envoy_keys = true;
        snprintf(g_opts.envoy_prefix, sizeof(g_opts.envoy_prefix), "%s", st->envoy.key_prefix);
        g_opts.envoy_jitter_s = st->envoy.jitter_s;
    }
    static char sec[128];
    snprintf(sec, sizeof(sec), "%s", st->store.redis_key_secret);
    g_opts.secret = sec;
    g_opts.secret_len = strlen(sec);
    sl_redis_local_setup(st->store.local.instances, st->store.local.floor_ppm,
                         st->store.local.heartbeat_ns); /* on_store_error: local */
    g_on = true;
    return SLUICE_OK;
}

bool sl_redis_store_default_secret(void) { return g_opts.secret_len == 0; }
const sl_redis_opts *sl_redis_store_opts(void) { return g_on ? &g_opts : NULL; }
const char *sl_redis_store_seeds(void) { return g_desc; }

/* In caller-time mode every instance must read the same clock: the wall clock (monotonic
 * readings of different machines are unrelated). */
static sluice_time shared_time(sluice_time t) {
    if (g_opts.time_mode == SL_REDIS_TIME_CALLER) t.mono_ns = t.wall_ns;
    return t;
}

static void on_outer(void *ud, uint32_t ev) {
    (void)ev;
    rlane *l = ud;
    sl_loop_poll(&l->loop, 0);
}

void *sl_redis_lane_start(unsigned id, sl_loop *outer) {
    if (!g_on) return NULL;
    rlane *l = calloc(1, sizeof(*l));
    if (l == NULL || sl_loop_init(&l->loop) != 0) {
        free(l);
        return NULL;
    }
    int err = 0;
    l->r = sl_redis_create(&l->loop, &g_opts, &err);
    if (l->r == NULL) {
        sl_loop_deinit(&l->loop);
        free(l);
        return NULL;
    }
    l->slot = (int)(id % BR_MAX_WORKERS);
    if (outer != NULL) {
        l->outer_io = (sl_io){l->loop.epfd, on_outer, l};
        if (sl_loop_add(outer, &l->outer_io, EPOLLIN) == 0) l->outer = outer;
    }
    atomic_store(&g_clients[l->slot], l->r);
    /* connect now, so that the first decision finds the connection up */
    sl_loop_poll(&l->loop, 0);
    return l;
}

void sl_redis_lane_stop(void *lane) {
    rlane *l = lane;
    if (l == NULL) return;
    atomic_store(&g_clients[l->slot], NULL);
    if (l->outer != NULL) sl_loop_del(l->outer, &l->outer_io);
    sl_redis_destroy(l->r);
    sl_loop_deinit(&l->loop);
    free(l);
}

void sl_redis_lane_flush(void *lane) {
    rlane *l = lane;
    if (l != NULL) sl_redis_flush(l->r);
}

/* ---- the operations --------------------------------------------------------------- */

static void r_decide(void *lane, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                     sl_store_cb cb, void *ud) {
    rlane *l = lane;
    int rc = l ? sl_redis_decide(l->r, items, n, flags, shared_time(now), cb, ud) : SLUICE_ESTORE;
    if (rc != SLUICE_OK) cb(ud, rc, NULL);
}

/* A refund whose window or period has passed is void (judged on the caller's clock), so
 * it is never sent; a settle that moves nothing needs no round trip. */
static void r_settle(void *lane, const sl_sitem *it, uint64_t actual, sluice_time reserved_at,
                     sluice_time now, sl_store_cb cb, void *ud) {
    rlane *l = lane;
    uint64_t reserved = it->cost;
    if (reserved > (uint64_t)INT64_MAX || actual > (uint64_t)INT64_MAX) {
        cb(ud, SLUICE_ERANGE, NULL);
        return;
    }
    if (actual < reserved && !sl_algo_refundable(&it->lim->lim, reserved_at, now)) actual = reserved;
    if (actual == reserved) {
        sl_sresult res = {.allowed = 1, .n = 1};
        res.r[0].allowed = 1;
        res.r[0].limit = sluice_limiter_capacity(it->lim);
        cb(ud, SLUICE_OK, &res);
        return;
    }
    int rc = l ? sl_redis_settle(l->r, it, (int64_t)actual - (int64_t)reserved, shared_time(now), cb, ud)
               : SLUICE_ESTORE;
    if (rc != SLUICE_OK) cb(ud, rc, NULL);
}

static void r_release(void *lane, const sl_sitem *it, uint64_t lease, sluice_time now, sl_store_cb cb,
                      void *ud) {
    rlane *l = lane;
    int rc = l ? sl_redis_release(l->r, it, lease, shared_time(now), cb, ud) : SLUICE_ESTORE;
    if (rc != SLUICE_OK) cb(ud, rc, NULL);
}

static void r_reset(void *lane, const sl_sitem *items, size_t n, sluice_time now, sl_store_cb cb,
                    void *ud) {
    rlane *l = lane;
    int rc = l ? sl_redis_reset(l->r, items, n, shared_time(now), cb, ud) : SLUICE_ESTORE;
    if (rc != SLUICE_OK) cb(ud, rc, NULL);
}

static void r_claim(void *lane, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now,
                    sl_store_cb cb, void *ud) {
    rlane *l = lane;
    int rc = l ? sl_redis_claim(l->r, id, op, ttl_ns, shared_time(now), cb, ud) : SLUICE_ESTORE;
    if (rc != SLUICE_OK) cb(ud, rc, NULL);
}

/* The scripts compute in doubles: every parameter must stay below 2^52 (codec.c). In
 * envoy compat mode fixed windows are upstream's counters, which carry no duration. */
static int r_check(const sluice_limiter *lim, char *why, size_t len) {
    if (g_opts.envoy_keys && lim->lim.algo == SLUICE_FIXED_WINDOW) return SLUICE_OK;
    int64_t p[4];
    sluice_time now = {0, 0};
    if (sl_redis_params_of(&lim->lim, now, p) == SLUICE_OK) return SLUICE_OK;
    snprintf(why, len, "beyond what the Redis store computes exactly (its scripts use "
             "numbers below 2^52: durations under about 52 days, and bucket sizes under 4.5 "
             "billion; expected a shorter period or a quota: N/month)");
    return SLUICE_ERANGE;
}

const sl_store_ops sl_redis_ops = {
    .name = "redis",
    .immediate = false,
    .shared = true,
    .decide = r_decide,
    .settle = r_settle,
    .release = r_release,
    .reset = r_reset,
    .claim = r_claim,
    .check = r_check,
};

bool sl_redis_store_ready(void) {
    if (!g_on) return true;
    bool any = false;
    for (int i = 0; i < BR_MAX_WORKERS; i++) {
        sl_redis *r = atomic_load(&g_clients[i]);
        if (r == NULL) continue;
        any = true;
        if (!sl_redis_ready(r)) return false;
    }
    return any;
}

/* Per node, over every worker's client: up (1 only when every worker's connection to
 * it is up), and its authentication and TLS failures. Addresses only, no credential. */
#define BR_NODES 80
typedef struct node_sum {
    sl_redis_node_health h;
    int role; /* 0 node, 1 sentinel */
    bool down;
} node_sum;

static size_t render_nodes(char *buf, size_t cap) {
    node_sum *all = calloc(BR_NODES, sizeof(*all));
    sl_redis_node_health *one = calloc(BR_NODES, sizeof(*one));
    if (all == NULL || one == NULL) {
        free(all);
        free(one);
        return 0;
    }
    int n = 0;
    for (int i = 0; i < BR_MAX_WORKERS; i++) {
        sl_redis *r = atomic_load(&g_clients[i]);
        if (r == NULL) continue;
        int k = sl_redis_health(r, one, BR_NODES);
        for (int j = 0; j < k; j++) {
            int role = g_opts.sentinel && j == k - 1 ? 1 : 0;
            int m = 0;
            while (m < n && (all[m].role != role || strcmp(all[m].h.addr, one[j].addr) != 0)) m++;
            if (m == n) {
                if (n == BR_NODES) continue;
                all[n].h = one[j];
                all[n].h.auth_failures = all[n].h.tls_failures = 0;
                all[n++].role = role;
            }
            all[m].h.auth_failures += one[j].auth_failures;
            all[m].h.tls_failures += one[j].tls_failures;
            if (one[j].state != 2 || one[j].not_answering) all[m].down = true;
        }
    }
    size_t off = 0;
    static const char *const head[3] = {
        ("# HELP sluice_redis_node_up 1 when every worker is connected to this Redis node and it "
         "answers (its breaker closed) (role: node, primary behind sentinels, or the sentinel in "
         "use).\n# TYPE sluice_redis_node_up gauge\n"),
        ("# HELP sluice_redis_node_auth_failures_total Connections to this Redis node refused "
         "for their credentials (WRONGPASS, NOAUTH, NOPERM).\n"
         "# TYPE sluice_redis_node_auth_failures_total counter\n"),
        ("# HELP sluice_redis_node_tls_failures_total TLS handshakes with this Redis node that "
         "failed (certificate, name, protocol).\n"
         "# TYPE sluice_redis_node_tls_failures_total counter\n")};
    for (int part = 0; part < 3; part++) {
        int w = snprintf(buf + off, cap - off, "%s", head[part]);
        if (w < 0 || (size_t)w >= cap - off) break;
        off += (size_t)w;
        for (int m = 0; m < n; m++) {
            const char *role = all[m].role ? "sentinel" : g_opts.sentinel ? "primary" : "node";
            uint64_t v = part == 0 ? !all[m].down : part == 1 ? all[m].h.auth_failures : all[m].h.tls_failures;
            char label[2 * sizeof(all[m].h.addr)], *p = label; /* Prometheus label escapes */
            for (const char *a = all[m].h.addr; *a; a++) {
                if (*a == '"' || *a == '\\' || *a == '\n') *p++ = '\\';
                *p++ = *a == '\n' ? 'n' : *a;
            }
            *p = '\0';
            w = snprintf(buf + off, cap - off, "%s{node=\"%s\",role=\"%s\"} %llu\n",
                         part == 0 ? "sluice_redis_node_up" : part == 1 ? "sluice_redis_node_auth_failures_total"
                                                                        : "sluice_redis_node_tls_failures_total",
                         label, role, (unsigned long long)v);
            if (w < 0 || (size_t)w >= cap - off) break;
            off += (size_t)w;
        }
    }
    free(all);
    free(one);
    return off;
}

int sl_redis_store_health(char *buf, size_t cap) {
    if (!g_on || cap == 0) return 0;
    sl_redis_node_health *one = calloc(BR_NODES, sizeof(*one));
    if (one == NULL) return 0;
    size_t off = 0;
    buf[0] = '\0';
    /* the first worker's view is every worker's (they connect to the same nodes) */
    for (int i = 0; i < BR_MAX_WORKERS; i++) {
        sl_redis *r = atomic_load(&g_clients[i]);
        if (r == NULL) continue;
        int k = sl_redis_health(r, one, BR_NODES);
        for (int j = 0; j < k; j++) {
            if (one[j].state == 2 && !one[j].not_answering) continue;
            int w = snprintf(buf + off, cap - off, "redis %s %s%s%s\n", one[j].addr,
                             one[j].state == 2 ? "not answering (timeouts or errors in a row: its circuit breaker is open)"
                             : one[j].state == 1 ? "connecting" : "down",
                             one[j].last_error[0] && one[j].state != 2 ? ": " : "",
                             one[j].state != 2 ? one[j].last_error : "");
            if (w < 0 || (size_t)w >= cap - off) break;
            off += (size_t)w;
        }
        break;
    }
    free(one);
    if (off < cap) off += (size_t)sl_redis_local_health(buf + off, cap - off);
    return (int)off;
}

int sl_redis_store_metrics(char *buf, size_t cap) {
    if (!g_on) return 0;
    enum { NF = 29 };
    uint64_t sum[NF] = {0};
    static const char *const names[NF] = {
        "decisions", "calls", "local_rejects", "never_rejects", "timeouts", "errors",
        "breaker_open", "node_down", "pool_full", "refunds", "moved", "ask", "noscript",
        "tryagain", "reconnects", "topology", "mismatches", "leases", "lease_local",
        "lease_returned", "lease_lapsed", "late_refunds", "late_unknown", "auth_failures",
        "tls_failures", "connect_failures", "clusterdown", "cluster_retries", "failovers"};
    uint64_t held = 0;
    for (int i = 0; i < BR_MAX_WORKERS; i++) {
        sl_redis *r = atomic_load(&g_clients[i]);
        if (r == NULL) continue;
        const sl_redis_stats *s = sl_redis_stats_get(r);
        const _Atomic uint64_t *f[NF] = {&s->decisions, &s->calls, &s->local_rejects, &s->never_rejects,
                                         &s->timeouts, &s->errors, &s->breaker_open, &s->node_down,
                                         &s->pool_full, &s->refunds, &s->moved, &s->ask, &s->noscript,
                                         &s->tryagain, &s->reconnects, &s->topology, &s->mismatches,
                                         &s->leases, &s->lease_local, &s->lease_returned,
                                         &s->lease_lapsed, &s->late_refunds, &s->late_unknown,
                                         &s->auth_failures, &s->tls_failures, &s->connect_failures,
                                         &s->clusterdown, &s->cluster_retries, &s->failovers};
        for (int k = 0; k < NF; k++) sum[k] += atomic_load_explicit(f[k], memory_order_relaxed);
        held += atomic_load_explicit(&s->lease_held, memory_order_relaxed);
    }
    size_t off = 0;
    int n = snprintf(buf, cap,
                     "# HELP sluice_redis_events_total Redis store events; timeouts, errors, breaker_open, "
                     "node_down and pool_full are degraded decisions.\n"
                     "# TYPE sluice_redis_events_total counter\n");
    if (n < 0 || (size_t)n >= cap) return 0;
    off = (size_t)n;
    for (int k = 0; k < NF; k++) {
        n = snprintf(buf + off, cap - off, "sluice_redis_events_total{event=\"%s\"} %llu\n", names[k],
                     (unsigned long long)sum[k]);
        if (n < 0 || (size_t)n >= cap - off) return (int)off;
        off += (size_t)n;
    }
    n = snprintf(buf + off, cap - off,
                 "# HELP sluice_redis_ready 1 when every worker's Redis client is connected with "
                 "its breaker closed.\n# TYPE sluice_redis_ready gauge\nsluice_redis_ready %d\n"
                 "# HELP sluice_redis_lease_held_units Units this instance holds in leases now: what it "
                 "may admit beyond the shared limit at this moment.\n"
                 "# TYPE sluice_redis_lease_held_units gauge\nsluice_redis_lease_held_units %llu\n",
                 sl_redis_store_ready() ? 1 : 0, (unsigned long long)held);
    if (n > 0 && (size_t)n < cap - off) off += (size_t)n;
    off += render_nodes(buf + off, cap - off);
    const sl_redis_local_stats *ls = sl_redis_local_stats_get(); /* on_store_error: local */
#define LV(f) (unsigned long long)atomic_load_explicit(&ls->f, memory_order_relaxed)
    n = snprintf(buf + off, cap - off,
                 "# HELP sluice_redis_local_total on_store_error: local: decisions made in this "
                 "instance's memory at its share while Redis was unreachable (admitted, limited), "
                 "and those that could not be (no share: failed closed).\n"
                 "# TYPE sluice_redis_local_total counter\n"
                 "sluice_redis_local_total{result=\"local\"} %llu\n"
                 "sluice_redis_local_total{result=\"local_limited\"} %llu\n"
                 "sluice_redis_local_total{result=\"no_share\"} %llu\n"
                 "# HELP sluice_redis_local_heartbeats_total Heartbeats (membership and demand) "
                 "written and read, and those that failed.\n"
                 "# TYPE sluice_redis_local_heartbeats_total counter\n"
                 "sluice_redis_local_heartbeats_total{outcome=\"ok\"} %llu\n"
                 "sluice_redis_local_heartbeats_total{outcome=\"error\"} %llu\n"
                 "# HELP sluice_redis_local_instances Instances in the last heartbeat view (0: none).\n"
                 "# TYPE sluice_redis_local_instances gauge\nsluice_redis_local_instances %u\n"
                 "# HELP sluice_redis_reconcile_total After an outage: what was admitted locally "
                 "written into the shared counters (calls, units), calls that failed, units not "
                 "written (failed, or no room to remember them).\n"
                 "# TYPE sluice_redis_reconcile_total counter\n"
                 "sluice_redis_reconcile_total{what=\"calls\"} %llu\n"
                 "sluice_redis_reconcile_total{what=\"units\"} %llu\n"
                 "sluice_redis_reconcile_total{what=\"errors\"} %llu\n"
                 "sluice_redis_reconcile_total{what=\"dropped_units\"} %llu\n",
                 LV(local), LV(local_limited), LV(no_share), LV(heartbeats), LV(heartbeat_errors),
                 sl_redis_local_view(), LV(reconcile_calls), LV(reconcile_units), LV(reconcile_errors),
                 LV(reconcile_dropped));
#undef LV
    if (n > 0 && (size_t)n < cap - off) off += (size_t)n;
    return (int)off;
}


/* ---- totals and transitions (main thread) ------------------------------------------------- */

void sl_redis_store_totals(sl_redis_totals *t) {
    memset(t, 0, sizeof(*t));
    if (!g_on) return;
    for (int i = 0; i < BR_MAX_WORKERS; i++) {
        sl_redis *r = atomic_load(&g_clients[i]);
        if (r == NULL) continue;
        const sl_redis_stats *s = sl_redis_stats_get(r);
        t->timeouts += atomic_load_explicit(&s->timeouts, memory_order_relaxed);
        t->errors += atomic_load_explicit(&s->errors, memory_order_relaxed);
        t->breaker_open += atomic_load_explicit(&s->breaker_open, memory_order_relaxed);
        t->node_down += atomic_load_explicit(&s->node_down, memory_order_relaxed);
        t->pool_full += atomic_load_explicit(&s->pool_full, memory_order_relaxed);
        t->reconnects += atomic_load_explicit(&s->reconnects, memory_order_relaxed);
    }
}

/* Why derived from readiness and counters: the client (client.c) keeps no transition
 * history, only whether it is ready now and how many decisions each kind of failure
 * refused. Down = not ready for 5 consecutive ticks (~0.5 s: a client still connecting at
 * start is not an outage); breaker open = decisions refused because it was open since
 * the last tick; closed again once ready with no such refusals. */
static int w_down_ticks;
static bool w_down, w_breaker;
static sl_redis_totals w_base, w_last;
static int64_t w_down_since;

void sl_redis_store_watch(sl_log *log) {
    if (!g_on) return;
    bool ready = sl_redis_store_ready();
    sl_redis_totals t;
    sl_redis_store_totals(&t);
    int64_t now = sl_clock_mono_ns();
    if (!ready) {
        /* counted from the first tick that saw it (the log comes 5 ticks later) */
        if (w_down_ticks++ == 0) w_base = w_last;
        if (w_down_ticks >= 5 && !w_down) {
            w_down = true;
            w_down_since = now;
            char why[512] = "";
            sl_redis_store_health(why, sizeof(why));
            char *nl = strchr(why, '\n');
            if (nl) *nl = '\0';
            SL_LOG(log, SL_LOG_WARN, "store_down",
                   "redis unreachable, policies follow their failure mode (on_store_error)",
                   SL_LOG_STR("node", g_opts.seeds), SL_LOG_STR("why", why),
                   SL_LOG_UINT("timeouts", t.timeouts - w_base.timeouts),
                   SL_LOG_UINT("errors", t.errors - w_base.errors),
                   SL_LOG_UINT("node_down", t.node_down - w_base.node_down),
                   SL_LOG_UINT("breaker_open", t.breaker_open - w_base.breaker_open));
        }
    } else {
        w_down_ticks = 0;
        if (w_down) {
            w_down = false;
            /* what the outage cost, all of it: decisions answered by the failure mode */
            SL_LOG(log, SL_LOG_INFO, "store_up", "redis reachable again",
                   SL_LOG_STR("node", g_opts.seeds), SL_LOG_DUR("down_for", now - w_down_since),
                   SL_LOG_UINT("timeouts", t.timeouts - w_base.timeouts),
                   SL_LOG_UINT("errors", t.errors - w_base.errors),
                   SL_LOG_UINT("node_down", t.node_down - w_base.node_down),
                   SL_LOG_UINT("breaker_open", t.breaker_open - w_base.breaker_open));
        }
    }
    if (t.breaker_open > w_last.breaker_open && !w_breaker) {
        w_breaker = true;
        SL_LOG(log, SL_LOG_WARN, "breaker_open",
               "circuit breaker open: decisions answered by the failure mode without trying redis",
               SL_LOG_STR("node", g_opts.seeds), SL_LOG_UINT("refused", t.breaker_open - w_last.breaker_open));
    } else if (w_breaker && ready && t.breaker_open == w_last.breaker_open) {
        w_breaker = false;
        SL_LOG(log, SL_LOG_INFO, "breaker_closed", "circuit breaker closed: redis answers again",
               SL_LOG_STR("node", g_opts.seeds));
    }
    w_last = t;
}
