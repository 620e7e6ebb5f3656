/*
 * bridge.c -- the Redis store as the server's workers use it: one client per worker
 * thread on a private sl_loop (which the worker's loop watches), the policy engine's
 * store hooks (decide, settle, release, reset, token claims), and the server-wide pieces:
 * the settings (URL, timeout, secret, time mode), readiness over every worker's client and
 * the degraded-decision counters for /metrics.
 * Requests handled inside enter/leave (HTTP, RESP, gRPC calls) never wait: their store
 * call goes out and they are handled again when it is answered (see the end of this
 * file). Outside a request (or with every record in use) a call waits for its answer,
 * bounded by the timeout. Settles and releases are sent and not waited for.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "engine/limiter.h"
#include "redis/bridge.h"

#define BR_MAX_WORKERS 64

/* asynchronous decisions (see the end of this file) */
#define AREC_CALLS 4
#define AREC_MAX 256 /* suspended requests per worker (beyond: synchronous) */

typedef struct arec {
    void *conn;      /* the waiting request's key (a connection, or a gRPC stream);
                        NULL: free (or it went away) */
    void *owner;     /* the connection resumed when the answer arrives */
    bool waiting;    /* a call is in flight */
    bool ready;      /* queued for resume */
    int ncalls;      /* recorded answers */
    int k;           /* next call index in the current pass */
    int16_t next;    /* the chain of its index bucket, or of the free list; -1 ends */
    bool indexed;    /* in the index (conn != NULL) */
    bool is_free;    /* on the free list */
    int rc[AREC_CALLS];
    sluice_decision dec[AREC_CALLS];
} arec;

#define AREC_BUCKETS 512 /* index by key: chains stay about one record long */

typedef struct async_tl {
    sl_redis_worker *w;
    arec *recs;      /* AREC_MAX, allocated at the worker's start */
    int16_t bucket[AREC_BUCKETS]; /* key -> first record of its chain, -1 none */
    int16_t free_head;            /* first free record, -1 none */
    void *cur;       /* request being handled (NULL: synchronous calls) */
    void *cur_owner; /* its connection */
    arec *cur_rec;
    bool issuing;
    int nready;
    arec *ready[AREC_MAX];
} async_tl;

static __thread async_tl tl;

/* In caller-time mode every instance must read the same clock: the wall clock (monotonic
 * readings of different machines are unrelated). */
static sluice_time shared_time(sluice_time t);

struct sl_redis_worker {
    sl_loop loop;      /* private: the client's connections and timer */
    sl_loop *outer;    /* the worker's loop, which watches ours (an epoll fd is pollable) */
    sl_io outer_io;
    sl_redis *r;
    int slot;
};

static void run_ready(void);

static void on_outer(void *ud, uint32_t ev) {
    (void)ev;
    sl_redis_worker *w = ud;
    sl_loop_poll(&w->loop, 0);
    run_ready();
}

static sl_redis_opts g_opts;
static bool g_on;
static _Atomic(sl_redis *) g_clients[BR_MAX_WORKERS];

static char g_desc[700]; /* what the store connects to, without credentials */

int sl_redis_bridge_config(const char *url, const char *addr, bool cluster, int64_t timeout_ns,
                           const char *secret, bool time_local, bool test_clock,
                           const struct sl_redis_conn_cfg *conn, char *err, size_t errlen) {
    sl_redis_opts_default(&g_opts);
    if (time_local) g_opts.time_mode = SL_REDIS_TIME_CALLER; /* the URL may still say */
    g_opts.log = sl_redis_log_stderr; /* node errors and recoveries, never a credential */
    /* the URL (never repeated in a message: it may hold a password) or addr, over the
     * config file's credentials, TLS and sentinel settings */
    if (sl_redis_opts_configure(&g_opts, url, addr, cluster, conn, err, errlen) != SLUICE_OK) return SLUICE_EINVAL;
    sl_redis_opts_describe(&g_opts, g_desc, sizeof(g_desc));
    /* on the test clock the scripts must see the test's time, not Redis's */
    if (test_clock) g_opts.time_mode = SL_REDIS_TIME_CALLER;
    if (g_opts.timeout_ns == 0) g_opts.timeout_ns = timeout_ns > 0 ? timeout_ns : 20 * SLUICE_NS_PER_MS;
    static char sec[128];
    snprintf(sec, sizeof(sec), "%s", secret ? secret : "");
    g_opts.secret = sec;
    g_opts.secret_len = strlen(sec);
    g_on = true;
    return SLUICE_OK;
}

bool sl_redis_bridge_enabled(void) { return g_on; }

static sluice_time shared_time(sluice_time t) {
    if (g_opts.time_mode == SL_REDIS_TIME_CALLER) t.mono_ns = t.wall_ns;
    return t;
}
bool sl_redis_bridge_default_secret(void) { return g_opts.secret_len == 0; }
const char *sl_redis_bridge_seeds(void) { return g_desc; }

sl_redis_worker *sl_redis_bridge_worker_start(unsigned id, sl_loop *outer) {
    if (!g_on) return NULL;
    sl_redis_worker *w = calloc(1, sizeof(*w));
    if (w == NULL || sl_loop_init(&w->loop) != 0) {
        free(w);
        return NULL;
    }
    int err = 0;
    w->r = sl_redis_create(&w->loop, &g_opts, &err);
    if (w->r == NULL) {
        sl_loop_deinit(&w->loop);
        free(w);
        return NULL;
    }
    w->slot = (int)(id % BR_MAX_WORKERS);
    if (outer != NULL) {
        w->outer_io = (sl_io){w->loop.epfd, on_outer, w};
        if (sl_loop_add(outer, &w->outer_io, EPOLLIN) == 0) w->outer = outer;
    }
    atomic_store(&g_clients[w->slot], w->r);
    tl.w = w;
    tl.recs = calloc(AREC_MAX, sizeof(*tl.recs));
    for (int i = 0; i < AREC_BUCKETS; i++) tl.bucket[i] = -1;
    tl.free_head = -1;
    for (int i = AREC_MAX - 1; tl.recs != NULL && i >= 0; i--) {
        tl.recs[i].next = tl.free_head;
        tl.recs[i].is_free = true;
        tl.free_head = (int16_t)i;
    }
    /* connect now, so that the first decision finds the connection up */
    sl_loop_poll(&w->loop, 0);
    return w;
}

void sl_redis_bridge_worker_stop(sl_redis_worker *w) {
    if (w == NULL) return;
    atomic_store(&g_clients[w->slot], NULL);
    if (tl.w == w) {
        free(tl.recs);
        memset(&tl, 0, sizeof(tl));
    }
    if (w->outer != NULL) sl_loop_del(w->outer, &w->outer_io);
    sl_redis_destroy(w->r);
    sl_loop_deinit(&w->loop);
    free(w);
}

void sl_redis_bridge_worker_flush(sl_redis_worker *w) {
    if (w != NULL) sl_redis_flush(w->r);
}

/* Lets the connections make progress between decisions (reconnection, late replies). */
void sl_redis_bridge_worker_tick(sl_redis_worker *w) {
    if (w != NULL) sl_loop_poll(&w->loop, 0);
}

int sl_redis_bridge_decide(void *ctx, const sluice_item *items, size_t n, sluice_time now,
                           sluice_decision *out) {
    sl_redis_worker *w = ctx;
    if (w == NULL) return SLUICE_ESTORE;
    sl_loop_poll(&w->loop, 0);
    return sl_redis_decide_sync(w->r, items, n, shared_time(now), out);
}

int sl_redis_bridge_settle(void *ctx, const sluice_limiter *lim, const void *key, size_t key_len,
                           uint64_t reserved, uint64_t actual, sluice_time now, sluice_result *out) {
    sl_redis_worker *w = ctx;
    if (w == NULL) return SLUICE_ESTORE;
    if (reserved > (uint64_t)INT64_MAX || actual > (uint64_t)INT64_MAX) return SLUICE_ERANGE;
    int rc = sl_redis_settle(w->r, lim, key, key_len, (int64_t)actual - (int64_t)reserved, shared_time(now),
                             NULL, NULL);
    if (out != NULL) {
        memset(out, 0, sizeof(*out));
        out->allowed = 1;
        out->limit = sluice_limiter_capacity(lim);
    }
    sl_loop_poll(&w->loop, 0);
    return rc;
}

int sl_redis_bridge_release(void *ctx, const sluice_limiter *lim, const void *key, size_t key_len,
                            uint64_t lease, sluice_time now) {
    sl_redis_worker *w = ctx;
    if (w == NULL) return SLUICE_ESTORE;
    int rc = sl_redis_release(w->r, lim, key, key_len, lease, shared_time(now), NULL, NULL);
    sl_loop_poll(&w->loop, 0);
    return rc;
}

bool sl_redis_bridge_ready(void) {
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
            if (one[j].state != 2) all[m].down = true;
        }
    }
    size_t off = 0;
    static const char *const head[3] = {
        ("# HELP sluice_redis_node_up 1 when every worker is connected to this Redis node (role: node, "
         "primary behind sentinels, or the sentinel in use).\n# TYPE sluice_redis_node_up gauge\n"),
        "# TYPE sluice_redis_node_auth_failures_total counter\n",
        "# TYPE sluice_redis_node_tls_failures_total counter\n"};
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

int sl_redis_bridge_health(char *buf, size_t cap) {
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
            if (one[j].state == 2) continue;
            int w = snprintf(buf + off, cap - off, "redis %s %s%s%s\n", one[j].addr,
                             one[j].state == 1 ? "connecting" : "down", one[j].last_error[0] ? ": " : "",
                             one[j].last_error);
            if (w < 0 || (size_t)w >= cap - off) break;
            off += (size_t)w;
        }
        break;
    }
    free(one);
    return (int)off;
}

int sl_redis_bridge_metrics(char *buf, size_t cap) {
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
                 "# TYPE sluice_redis_ready gauge\nsluice_redis_ready %d\n"
                 "# HELP sluice_redis_lease_held_units Units this instance holds in leases now: what it "
                 "may admit beyond the shared limit at this moment.\n"
                 "# TYPE sluice_redis_lease_held_units gauge\nsluice_redis_lease_held_units %llu\n",
                 sl_redis_bridge_ready() ? 1 : 0, (unsigned long long)held);
    if (n > 0 && (size_t)n < cap - off) off += (size_t)n;
    off += render_nodes(buf + off, cap - off);
    return (int)off;
}

/* ---- asynchronous decisions for HTTP and RESP connections (suspend and replay) -------
 * A connection's handler runs with sl_redis_bridge_enter(conn): its first store call
 * is sent asynchronously and answered SL_REDIS_PENDING, the handler returns without
 * replying and the connection suspends (stops processing its input). When the answer
 * arrives, the connection is resumed from the worker's loop and the same request is
 * handled again: this time the recorded answer is returned in order (a request needing
 * several store calls, e.g. a rejection's peek, suspends once per call). Decisions of
 * all connections of one loop turn thus travel in one pipelined write per Redis node.
 * Resumes never run inside another handler (they are queued and run from the worker's
 * loop), so the worker's scratch verdict is never shared by two requests.
 */

static void (*g_resume)(void *owner, void *key);

void sl_redis_bridge_set_resume(void (*fn)(void *owner, void *key)) { g_resume = fn; }

/* Records are found by key through a chained index (every request's enter looks its
 * key up: this must not scan the table), and allocated from a free list. */
static size_t key_bucket(const void *key) {
    uintptr_t v = (uintptr_t)key >> 4;
    return (size_t)((v ^ (v >> 9) ^ (v >> 18)) % AREC_BUCKETS);
}

static void index_del(arec *a) {
    if (!a->indexed) return;
    int16_t *p = &tl.bucket[key_bucket(a->conn)];
    int16_t me = (int16_t)(a - tl.recs);
    while (*p != -1 && *p != me) p = &tl.recs[*p].next;
    if (*p == me) *p = a->next;
    a->indexed = false;
}

static arec *arec_find(void *conn, bool create) {
    if (tl.recs == NULL) return NULL;
    size_t b = key_bucket(conn);
    for (int16_t i = tl.bucket[b]; i != -1; i = tl.recs[i].next)
        if (tl.recs[i].conn == conn) return &tl.recs[i];
    if (!create || tl.free_head == -1) return NULL;
    arec *a = &tl.recs[tl.free_head];
    tl.free_head = a->next;
    memset(a, 0, offsetof(arec, dec));
    a->conn = conn;
    a->indexed = true;
    a->next = tl.bucket[b];
    tl.bucket[b] = (int16_t)(a - tl.recs);
    return a;
}

/* Unindexes a record; when nothing refers to it any more (no call in flight, not queued
 * for resume) it goes back to the free list. */
static void arec_free(arec *a) {
    index_del(a);
    a->conn = a->owner = NULL;
    a->ncalls = a->k = 0;
    if (a->waiting || a->ready || a->is_free) return;
    a->is_free = true;
    a->next = tl.free_head;
    tl.free_head = (int16_t)(a - tl.recs);
}

void sl_redis_bridge_enter_owned(void *key, void *owner) {
    if (tl.w == NULL || g_resume == NULL) return;
    tl.cur = key;
    tl.cur_owner = owner;
    tl.cur_rec = arec_find(key, false);
    if (tl.cur_rec) tl.cur_rec->k = 0;
}

void sl_redis_bridge_enter(void *conn) { sl_redis_bridge_enter_owned(conn, conn); }

bool sl_redis_bridge_leave(void *conn) {
    (void)conn;
    arec *a = tl.cur_rec;
    tl.cur = NULL;
    tl.cur_rec = NULL;
    if (a == NULL) return false;
    if (a->waiting) return true; /* suspended: resumed when the answer arrives */
    arec_free(a);                /* the request is answered: its record goes */
    return false;
}

bool sl_redis_bridge_pending(void) { return tl.cur_rec != NULL && tl.cur_rec->waiting; }

static void arec_forget(arec *a) {
    /* a call in flight keeps the record until its answer (then it is dropped) */
    index_del(a);
    a->conn = a->owner = NULL;
    if (!a->waiting && !a->ready) arec_free(a);
}

void sl_redis_bridge_forget(void *key) {
    arec *a = arec_find(key, false);
    if (a != NULL) arec_forget(a);
}

void sl_redis_bridge_forget_owned(void *owner) {
    if (tl.recs == NULL) return;
    for (size_t i = 0; i < AREC_MAX; i++)
        if (tl.recs[i].conn != NULL && tl.recs[i].owner == owner) arec_forget(&tl.recs[i]);
}

static void async_cb(void *ud, int rc, const sluice_decision *d) {
    arec *a = ud;
    if (a->ncalls < AREC_CALLS) {
        a->rc[a->ncalls] = rc;
        if (d != NULL) a->dec[a->ncalls] = *d;
        a->ncalls++;
    }
    a->waiting = false;
    if (tl.issuing) return; /* answered at once: the caller reads it now */
    if (a->conn == NULL) {  /* the connection went away meanwhile */
        arec_free(a);
        return;
    }
    if (!a->ready && tl.nready < AREC_MAX) {
        a->ready = true;
        tl.ready[tl.nready++] = a;
    }
}

/* Resumes the connections whose answers arrived (from the worker's loop only). */
static void run_ready(void) {
    while (tl.nready > 0) {
        arec *a = tl.ready[--tl.nready];
        a->ready = false;
        if (a->conn == NULL) {
            arec_free(a);
            continue;
        }
        if (g_resume) g_resume(a->owner, a->conn);
    }
}

/* One store call of the request being handled (tl.cur): its recorded answer when the
 * request is being handled again, else the call goes out and SL_REDIS_PENDING comes back
 * (synchronous outside a request, or when the records are full). */
static int async_call(sl_redis_worker *w, const sl_redis_args *args, sluice_time now, sluice_decision *out) {
    if (w == NULL) return SLUICE_ESTORE;
    if (tl.cur == NULL) goto sync;
    arec *a = tl.cur_rec;
    if (a == NULL) {
        a = tl.cur_rec = arec_find(tl.cur, true);
        if (a == NULL) goto sync; /* table full */
        a->owner = tl.cur_owner;
    }
    int k = a->k++;
    if (k < a->ncalls) {
        *out = a->dec[k];
        return a->rc[k];
    }
    if (a->waiting) return SL_REDIS_PENDING; /* one call in flight per pass: the rest next pass */
    if (k >= AREC_CALLS) goto sync;
    a->waiting = true;
    tl.issuing = true;
    int rc = sl_redis_issue(w->r, args, shared_time(now), async_cb, a);
    tl.issuing = false;
    if (rc != SLUICE_OK) {
        a->waiting = false;
        return rc;
    }
    if (!a->waiting && k < a->ncalls) { /* answered without a round trip */
        *out = a->dec[k];
        return a->rc[k];
    }
    return SL_REDIS_PENDING;
sync:
    sl_loop_poll(&w->loop, 0);
    return sl_redis_wait(w->r, sl_redis_issue, args, shared_time(now), out);
}

int sl_redis_bridge_decide_async(void *ctx, const sluice_item *items, size_t n, sluice_time now,
                                 sluice_decision *out) {
    sl_redis_args a = {.op = 'd', .items = items, .n = n};
    return async_call(ctx, &a, now, out);
}

int sl_redis_bridge_reset_async(void *ctx, const sluice_item *items, size_t n, sluice_time now) {
    sluice_decision d;
    sl_redis_args a = {.op = 'x', .items = items, .n = n};
    return async_call(ctx, &a, now, &d);
}

int sl_redis_bridge_claim_async(void *ctx, uint64_t id, unsigned bit, int64_t ttl_ns, sluice_time now) {
    sluice_decision d;
    sl_redis_args a = {.op = 'c', .id = id, .bit = bit, .ttl_ns = ttl_ns};
    int rc = async_call(ctx, &a, now, &d);
    if (rc != SLUICE_OK) return rc;
    return d.results[0].allowed ? SLUICE_OK : SLUICE_ENOTFOUND;
}
