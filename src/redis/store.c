/*
 * store.c -- the Redis store as the server's workers use it: one client per worker thread
 * on a private sl_loop (which the worker's loop watches: an epoll fd is pollable), the
 * store operations over it, and the server-wide pieces: the settings (URL, timeout,
 * secret, time mode), readiness over every worker's client and the counters for
 * /metrics. Nothing here waits: every operation's answer arrives from the lane's loop
 * (or at once when the client answers locally).
 */
#include "redis/store.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "algo/limiter.h"
#include "redis/redis.h"

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

bool sl_redis_store_url(const char *url) {
    return strncmp(url, "redis://", 8) == 0 || strncmp(url, "redis-cluster://", 16) == 0 ||
           strcmp(url, "redis:") == 0;
}

int sl_redis_store_config(const char *url, const sl_settings *st, bool test_clock, char *err,
                          size_t errlen) {
    sl_redis_opts_default(&g_opts);
    if (st->store.redis_time_local) g_opts.time_mode = SL_REDIS_TIME_CALLER; /* the URL may still say */
    if (url != NULL && url[0] != '\0' && strcmp(url, "redis:") != 0) {
        if (sl_redis_parse_url(url, &g_opts) != SLUICE_OK) {
            snprintf(err, errlen, "bad store URL (expected redis://HOST:PORT or "
                                  "redis-cluster://HOST:PORT[,HOST:PORT...], optionally ?time=local)");
            return SLUICE_EINVAL;
        }
    } else {
        if (st->store.redis_addr[0] == '\0') {
            snprintf(err, errlen, "a redis store needs an address");
            return SLUICE_EINVAL;
        }
        snprintf(g_opts.seeds, sizeof(g_opts.seeds), "%s", st->store.redis_addr);
        g_opts.cluster = st->store.type == SL_STORE_REDIS_CLUSTER;
    }
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
    g_on = true;
    return SLUICE_OK;
}

bool sl_redis_store_default_secret(void) { return g_opts.secret_len == 0; }
const char *sl_redis_store_seeds(void) { return g_opts.seeds; }

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

const sl_store_ops sl_redis_ops = {
    .name = "redis",
    .immediate = false,
    .shared = true,
    .decide = r_decide,
    .settle = r_settle,
    .release = r_release,
    .reset = r_reset,
    .claim = r_claim,
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

int sl_redis_store_metrics(char *buf, size_t cap) {
    if (!g_on) return 0;
    enum { NF = 23 };
    uint64_t sum[NF] = {0};
    static const char *const names[NF] = {
        "decisions", "calls", "local_rejects", "never_rejects", "timeouts", "errors",
        "breaker_open", "node_down", "pool_full", "refunds", "moved", "ask", "noscript",
        "tryagain", "reconnects", "topology", "mismatches", "leases", "lease_local",
        "lease_returned", "lease_lapsed", "late_refunds", "late_unknown"};
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
                                         &s->lease_lapsed, &s->late_refunds, &s->late_unknown};
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
                 "# TYPE sluice_redis_ready gauge\nsluice_redis_ready %d\n"
                 "# HELP sluice_redis_lease_held_units Units this instance holds in leases now: what it "
                 "may admit beyond the shared limit at this moment.\n"
                 "# TYPE sluice_redis_lease_held_units gauge\nsluice_redis_lease_held_units %llu\n",
                 sl_redis_store_ready() ? 1 : 0, (unsigned long long)held);
    if (n > 0 && (size_t)n < cap - off) off += (size_t)n;
    return (int)off;
}

