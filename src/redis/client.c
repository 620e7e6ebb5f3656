/*
 * client.c -- the Redis store's client: one per worker, bound to the worker's sl_loop.
 * Each node gets one hiredis async connection attached through a small adapter (the hooks
 * map onto sl_loop_add/mod/del); commands issued during one loop turn are written
 * together on the next writable event, so concurrent decisions share round trips.
 * A decision is split by cluster slot into groups, one EVALSHA each; replies are decoded
 * into the C algorithms' results. Failure handling: a deadline per decision (a timerfd
 * in the same loop), a circuit breaker over consecutive failures, reconnection with
 * exponential backoff, MOVED/ASK/NOSCRIPT recovery, every degraded answer counted.
 *
 * Allocation: requests live in a fixed pool created with the client; hiredis allocates
 * per command (its output buffer growth and one callback node) and per reply (the reply
 * tree), which we cannot avoid without replacing hiredis.
 * Cross-slot decisions: every group consumes in its own call; if one rejects, the groups
 * that admitted are refunded by a second call. Between the two calls (one round trip) the
 * refunded units look consumed to other decisions (under-admission, never over-admission);
 * a refund that is lost (Redis fails in between) leaves those units consumed until the
 * window or bucket refills on its own.
 */
#include <errno.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "algo/algo.h"
#include "algo/algo_impl.h"
#include "algo/limiter.h"
#include "redis/redis.h"
#include "store/decision.h"
#include "store/group.h"

#define MAX_NODES 64
#define MAX_REDIRECTS 5
#define MAX_RANGES 4096
/* A decision that timed out waits this long for the replies still in flight, to undo
 * what Redis applied after the caller had its answer; beyond it they are forgotten. */
#define ORPHAN_NS (10 * SLUICE_NS_PER_S)
#define EXACT_COST_MAX (INT64_C(1) << 40) /* costs and deltas the scripts take */
/* Sliding-log states of one call, carved by size from one arena per direction: the same
 * bound the config checks per decision (src/config/config.c, LOG_ARENA_BYTES). */
#define BIG_ARENA (2 * (sizeof(sl_log_state) + 8 * SL_SLIDING_LOG_MAX))
#define SMALL_STATE 32 /* inline per item; larger states come from the arena */
/* An EVALSHA of SLUICE_MAX_ITEMS items: every argument is at most a 63-byte key or a
 * 21-byte number plus 8 bytes of RESP framing, the array header 8 more. */
#define CMD_ARGS (3 + SLUICE_MAX_ITEMS + SL_REDIS_HEAD_ARGS + SLUICE_MAX_ITEMS * SL_REDIS_ITEM_ARGS)
#define CMD_MAX (8 + CMD_ARGS * (SL_REDIS_KEY_MAX + 8) + XKEY_ARENA)
/* envoy compat keys (SL_REDIS_ENVOY_TAG) are longer than a hash: one request's live in
 * its own arena (allocated with the pool only when opts.envoy_keys): a verdict's keys
 * (4096 bytes) plus a prefix and a window per item. */
#define XKEY_ARENA (4096 + SLUICE_MAX_ITEMS * (128 + 24))

typedef struct sl_redis_node sl_redis_node;

struct sl_redis_node {
    sl_redis *r;
    int idx;
    char host[SL_REDIS_HOST_MAX];
    int port;
    redisAsyncContext *ac;
    sl_io io;
    uint32_t events;
    bool in_loop;
    bool unsent;          /* commands appended since the last flush */
    int state;            /* 0 down, 1 connecting, 2 up */
    int64_t retry_at;     /* down: next connection attempt (local monotonic ns) */
    int64_t connect_by;   /* connecting: give up then */
    int64_t backoff;
};

typedef struct rq_item {
    const sluice_limiter *lim;
    int64_t cost;
    uint64_t limit;      /* a limit override (fixed windows), 0 = the limiter's */
    uint8_t sgroup;      /* store group: 0 enforced, g > 0 shadow group g */
    uint8_t sflags;      /* SL_SI_* */
    int64_t p[4];
    char key[SL_REDIS_KEY_MAX];
    uint8_t klen;
    uint16_t slot;
    int8_t group;        /* -1: not sent (served from a held slice) */
    int8_t prev; /* earlier item with the same key, or -1 */
    uint8_t lease;       /* LEASE_NONE, LEASE_TAKE (cost is a slice), LEASE_LOCAL */
    int64_t want;        /* the units the caller asked (LEASE_TAKE, LEASE_LOCAL) */
    uint32_t lent;       /* LEASE_LOCAL: the lease entry the units came from */
    uint16_t xoff, xlen; /* envoy compat: the Redis key is rq.xk[xoff..+xlen) (key[] holds
                            its hash, the item's identity); xlen 0 = key[] is the name */
} rq_item;

enum { LEASE_NONE = 0, LEASE_TAKE = 1, LEASE_LOCAL = 2 };

typedef struct rq_group {
    uint16_t slot;
    uint8_t n;
    uint8_t idx[SLUICE_MAX_ITEMS];
    bool done, failed, all_ok;
    uint32_t groups_ok; /* its shadow groups that admitted */
    bool sent;  /* handed to a connection at least once */
    bool late;  /* its decision timed out while it was in flight: the reply is awaited
                   only to undo what it applied (see late_reply) */
    int redirects;
} rq_group;

typedef struct rq {
    uint32_t gen;
    bool busy;
    char op; /* 'd' decide, 's' settle, 'l' release, 'x' reset, 'c' claim (no limiter) */
    uint8_t n, ngroups, pending;
    rq_item it[SLUICE_MAX_ITEMS];
    rq_group g[SLUICE_MAX_ITEMS];
    sluice_time now;
    sl_redis_cb cb;
    void *ud;
    sl_dnode dl;
    bool failed;
    bool got_time;
    sluice_time rnow; /* the time the script used */
    unsigned flags;   /* SL_SREQ_* */
    bool held;        /* its items' limiters are referenced (rq_hold) */
    sl_sresult res;   /* the answer being assembled */
    sl_sresult alt;   /* decisions over several calls: each call's items as they stand
                         once a rejection elsewhere undid them (its refunds) */
    bool leasing; /* some item takes a slice or is served from one */
    uint8_t orphans; /* groups still in flight after a timeout (the rq stays busy) */
    char *xk;        /* envoy compat keys (XKEY_ARENA bytes), NULL unless opts.envoy_keys */
    size_t xk_used;
    struct rq *next_free;
} rq;

typedef struct lease_ent {
    uint64_t taking;    /* fp of a key whose slice request is in flight (0: none): at most
                           one per key per client, so the overshoot bound holds (a key
                           sharing the slot meanwhile decides strictly) */
    uint64_t fp;
    const sluice_limiter *lim;
    int64_t expires;    /* caller monotonic ns: spent locally until then */
    int64_t sweep_at;   /* the same instant on the process's CLOCK_MONOTONIC (the timer's) */
    uint64_t left;      /* units held */
    sluice_time taken;  /* when the slice was taken (its window, for giving back) */
    rq_item it;         /* to return them */
} lease_ent;

#define LEASE_SLOTS 1024

typedef struct cache_ent {
    uint64_t fp;
    uint64_t epoch;   /* g_cache_epoch when cached: a reset anywhere in the process voids it */
    int64_t until;    /* caller monotonic ns: rejected until then (the retry time) */
    int64_t trust;    /* caller monotonic ns: answered from here until then (at most
                         cache_max_ns: a reset or refund elsewhere is seen that soon) */
    int64_t reset_at;
    uint64_t min_cost;
    uint64_t limit;
} cache_ent;

static void rq_hold(rq *q) {
    for (int i = 0; i < q->n; i++) sl_limiter_ref(q->it[i].lim);
    q->held = true;
}

struct sl_redis {
    sl_loop *loop;
    sl_redis_opts o;
    sl_hash_key sk;
    const char *script;
    size_t script_len;
    const char *sha;
    sl_redis_node nodes[MAX_NODES];
    int nnodes;
    uint8_t slotmap[SL_REDIS_SLOTS]; /* node index, 0xFF = unknown (seed 0) */
    int64_t topo_at;                 /* last refresh request */
    bool topo_pending;
    sl_io tio;
    int tfd;
    int64_t armed;
    sl_dlist deadlines;
    sl_dlist orphans;        /* timed-out decisions awaiting their late replies */
    rq *pool;
    rq *free;
    unsigned npool;
    cache_ent *cache;
    unsigned cache_mask;
    lease_ent *leases;       /* LEASE_SLOTS, by key fingerprint */
    uint64_t held;           /* units held in leases */
    int64_t lease_sweep_at;  /* earliest sweep_at of a held lease (0: none) */
    sl_sresult lease_scratch;
    rq scratch; /* submit(): the items being prepared (not in the pool) */
    /* sliding-log scratch (decode_group): states as stored; states decided plus a peek */
    _Alignas(8) unsigned char big[2][BIG_ARENA + BIG_ARENA / 2];
    char cmd[CMD_MAX]; /* one EVALSHA being formatted (send_group) */
    uint64_t jitter_rng; /* envoy compat: expiry jitter (xorshift64) */
    char *xk_all;        /* the pool's and the scratch's envoy key arenas, one allocation */
    unsigned fails;
    int64_t open_until; /* breaker: refusing until then (0 = closed) */
    bool half_open;
    sl_redis_stats st;
    _Atomic bool ready; /* every node up and the breaker closed (read by other threads) */
    char last_error[128];
};

static void update_ready(sl_redis *r) {
    bool ok = r->open_until == 0 && r->nnodes > 0;
    for (int i = 0; i < r->nnodes && ok; i++)
        if (r->nodes[i].state != 2) ok = false;
    atomic_store_explicit(&r->ready, ok, memory_order_relaxed);
}

static void add(_Atomic uint64_t *c, uint64_t v) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}

static void inc(_Atomic uint64_t *c) { add(c, 1); }

static int64_t mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_S + ts.tv_nsec;
}

void sl_redis_opts_default(sl_redis_opts *o) {
    memset(o, 0, sizeof(*o));
    snprintf(o->seeds, sizeof(o->seeds), "127.0.0.1:6379");
}

int sl_redis_parse_url(const char *url, sl_redis_opts *o) {
    const char *rest;
    if (strncmp(url, "redis://", 8) == 0) o->cluster = false, rest = url + 8;
    else if (strncmp(url, "redis-cluster://", 16) == 0) o->cluster = true, rest = url + 16;
    else return SLUICE_EINVAL;
    size_t n = strlen(rest);
    while (n > 0 && rest[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof(o->seeds)) return SLUICE_EINVAL;
    /* options after '?': time=local|redis, timeout_ms=N */
    const char *q = memchr(rest, '?', n);
    size_t hn = q ? (size_t)(q - rest) : n;
    if (hn == 0 || memchr(rest, ':', hn) == NULL) return SLUICE_EINVAL;
    memcpy(o->seeds, rest, hn);
    o->seeds[hn] = '\0';
    while (q != NULL && (size_t)(q - rest) < n) {
        const char *p = q + 1, *end = rest + n;
        const char *amp = memchr(p, '&', (size_t)(end - p));
        size_t l = (size_t)((amp ? amp : end) - p);
        if (l == 10 && memcmp(p, "time=local", 10) == 0) o->time_mode = SL_REDIS_TIME_CALLER;
        else if (l == 10 && memcmp(p, "time=redis", 10) == 0) o->time_mode = SL_REDIS_TIME_SERVER;
        else if (l > 6 && memcmp(p, "lease=", 6) == 0) {
            unsigned long v = 0;
            for (size_t k = 6; k < l; k++) {
                if (p[k] < '0' || p[k] > '9' || v > 1000000) return SLUICE_EINVAL;
                v = v * 10 + (unsigned long)(p[k] - '0');
            }
            o->lease_slice = (unsigned)v;
        } else if (l > 11 && memcmp(p, "timeout_ms=", 11) == 0) {
            long ms = 0;
            for (size_t k = 11; k < l; k++) {
                if (p[k] < '0' || p[k] > '9' || ms > 100000) return SLUICE_EINVAL;
                ms = ms * 10 + (p[k] - '0');
            }
            if (ms <= 0) return SLUICE_EINVAL;
            o->timeout_ns = ms * SLUICE_NS_PER_MS;
        } else return SLUICE_EINVAL;
        q = amp;
    }
    return SLUICE_OK;
}

/* ---- timer ------------------------------------------------------------------------ */

static void arm(sl_redis *r, int64_t at) {
    if (r->armed != 0 && r->armed <= at) return;
    struct itimerspec its = {0};
    if (at <= 0) at = 1;
    its.it_value.tv_sec = at / SLUICE_NS_PER_S;
    its.it_value.tv_nsec = at % SLUICE_NS_PER_S;
    timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    r->armed = at;
}

/* ---- breaker ---------------------------------------------------------------------- */

static void note_ok(sl_redis *r) {
    bool was = r->open_until != 0;
    r->fails = 0;
    r->open_until = 0;
    r->half_open = false;
    if (was) update_ready(r);
}

static void note_fail(sl_redis *r) {
    r->fails++;
    if (r->half_open || r->fails >= r->o.breaker_failures) {
        r->open_until = mono_now() + r->o.breaker_open_ns;
        r->half_open = false;
        arm(r, r->open_until);
        update_ready(r);
    }
}

/* Whether a new decision may go to Redis now. After the open period, one probe goes
 * through (half-open); its outcome closes or reopens the breaker. */
static bool breaker_allows(sl_redis *r) {
    if (r->open_until == 0) return true;
    if (r->half_open) return false;
    if (mono_now() < r->open_until) return false;
    r->half_open = true;
    return true;
}

/* ---- adapter: hiredis hooks onto sl_loop ------------------------------------------- */

static void node_io(void *ud, uint32_t ev);

static void ev_update(sl_redis_node *nd, uint32_t want) {
    if (nd->ac == NULL) return;
    if (want == nd->events && nd->in_loop) return;
    nd->io.fd = nd->ac->c.fd;
    nd->io.cb = node_io;
    nd->io.ud = nd;
    if (!nd->in_loop) {
        if (sl_loop_add(nd->r->loop, &nd->io, want) == 0) nd->in_loop = true;
    } else {
        sl_loop_mod(nd->r->loop, &nd->io, want);
    }
    nd->events = want;
}

static void ev_add_read(void *p) { sl_redis_node *nd = p; ev_update(nd, nd->events | EPOLLIN); }
static void ev_del_read(void *p) { sl_redis_node *nd = p; ev_update(nd, nd->events & ~(uint32_t)EPOLLIN); }
static void ev_add_write(void *p) {
    sl_redis_node *nd = p;
    nd->unsent = true;
    ev_update(nd, nd->events | EPOLLOUT);
}
static void ev_del_write(void *p) { sl_redis_node *nd = p; ev_update(nd, nd->events & ~(uint32_t)EPOLLOUT); }

static void ev_cleanup(void *p) {
    sl_redis_node *nd = p;
    if (nd->in_loop) sl_loop_del(nd->r->loop, &nd->io);
    nd->in_loop = false;
    nd->events = 0;
    nd->ac = NULL;
}

static void node_io(void *ud, uint32_t ev) {
    sl_redis_node *nd = ud;
    if (nd->ac != NULL && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))) redisAsyncHandleRead(nd->ac);
    if (nd->ac != NULL && (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) redisAsyncHandleWrite(nd->ac);
}

/* ---- connections ------------------------------------------------------------------ */

static void node_down(sl_redis_node *nd) {
    if (nd->state == 0) return;
    nd->state = 0;
    sl_redis *r = nd->r;
    nd->backoff = nd->backoff == 0 ? r->o.backoff_min_ns : nd->backoff * 2;
    if (nd->backoff > r->o.backoff_max_ns) nd->backoff = r->o.backoff_max_ns;
    nd->retry_at = mono_now() + nd->backoff;
    arm(r, nd->retry_at);
    update_ready(r);
}

static void on_connect(const redisAsyncContext *ac, int status) {
    sl_redis_node *nd = ac->data;
    if (nd == NULL) return;
    if (status != REDIS_OK) {
        node_down(nd);
        return;
    }
    nd->state = 2;
    nd->backoff = 0;
    inc(&nd->r->st.reconnects);
    /* a fresh connection closes the breaker (failures count again from zero) */
    nd->r->open_until = 0, nd->r->half_open = false, nd->r->fails = 0;
    update_ready(nd->r);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
    (void)status;
    sl_redis_node *nd = ac->data;
    if (nd != NULL) node_down(nd);
}

static void on_script_load(redisAsyncContext *ac, void *reply, void *priv) {
    (void)priv;
    redisReply *rep = reply;
    sl_redis_node *nd = ac->data;
    if (nd != NULL && rep != NULL && rep->type == REDIS_REPLY_ERROR)
        snprintf(nd->r->last_error, sizeof(nd->r->last_error), "SCRIPT LOAD: %.100s", rep->str);
}

static void queue_script_load(sl_redis_node *nd) {
    const char *argv[3] = {"SCRIPT", "LOAD", nd->r->script};
    size_t len[3] = {6, 4, nd->r->script_len};
    redisAsyncCommandArgv(nd->ac, on_script_load, NULL, 3, argv, len);
}

static void refresh_topology(sl_redis *r, bool force);

/* Starts a non-blocking connection; SCRIPT LOAD is queued first so every EVALSHA sent
 * on this connection finds the script (NOSCRIPT stays possible after SCRIPT FLUSH). */
static void node_connect(sl_redis_node *nd) {
    sl_redis *r = nd->r;
    redisAsyncContext *ac = redisAsyncConnect(nd->host, nd->port);
    if (ac == NULL || ac->err) {
        if (ac) redisAsyncFree(ac);
        nd->state = 1;
        node_down(nd);
        return;
    }
    sl_redis_reader_guard(ac->c.reader);
    nd->ac = ac;
    ac->data = nd;
    ac->ev.data = nd;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    nd->events = 0;
    nd->in_loop = false;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    nd->state = 1;
    nd->connect_by = mono_now() + 4 * r->o.timeout_ns + 100 * SLUICE_NS_PER_MS;
    arm(r, nd->connect_by);
    queue_script_load(nd);
    if (r->o.cluster && !r->topo_pending) refresh_topology(r, true);
}

static int node_find(sl_redis *r, const char *host, int port, bool create) {
    for (int i = 0; i < r->nnodes; i++)
        if (r->nodes[i].port == port && strcmp(r->nodes[i].host, host) == 0) return i;
    if (!create || r->nnodes >= MAX_NODES || strlen(host) >= SL_REDIS_HOST_MAX) return -1;
    sl_redis_node *nd = &r->nodes[r->nnodes];
    memset(nd, 0, sizeof(*nd));
    nd->r = r;
    nd->idx = r->nnodes;
    snprintf(nd->host, sizeof(nd->host), "%s", host);
    nd->port = port;
    r->nnodes++;
    node_connect(nd);
    return nd->idx;
}

/* ---- topology --------------------------------------------------------------------- */

static void apply_topology(sl_redis *r, sl_redis_node *from, const redisReply *rep, bool shards) {
    /* off the decision path: a topology reply is parsed into a temporary array */
    sl_redis_range *ranges = malloc(MAX_RANGES * sizeof(*ranges));
    if (ranges == NULL) return;
    int n = sl_redis_parse_topology(rep, shards, ranges, MAX_RANGES);
    if (n <= 0) {
        free(ranges);
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *host = ranges[i].host[0] ? ranges[i].host : from->host;
        int idx = node_find(r, host, ranges[i].port, true);
        if (idx < 0) continue;
        memset(r->slotmap + ranges[i].lo, idx, (size_t)ranges[i].hi - ranges[i].lo + 1);
    }
    free(ranges);
    inc(&r->st.topology);
}

static void on_slots(redisAsyncContext *ac, void *reply, void *priv) {
    (void)priv;
    sl_redis_node *nd = ac->data;
    if (nd == NULL) return;
    nd->r->topo_pending = false;
    if (reply != NULL) apply_topology(nd->r, nd, reply, false);
}

static void on_shards(redisAsyncContext *ac, void *reply, void *priv) {
    (void)priv;
    sl_redis_node *nd = ac->data;
    if (nd == NULL) return;
    redisReply *rep = reply;
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR && nd->ac != NULL) {
        /* before Redis 7: CLUSTER SHARDS is unknown, ask CLUSTER SLOTS */
        redisAsyncCommand(nd->ac, on_slots, NULL, "CLUSTER SLOTS");
        return;
    }
    nd->r->topo_pending = false;
    if (rep != NULL) apply_topology(nd->r, nd, rep, true);
}

/* Asks a connected (or connecting) node for the slot map, at most every 100 ms unless
 * forced. */
static void refresh_topology(sl_redis *r, bool force) {
    int64_t t = mono_now();
    if (!force && (r->topo_pending || t - r->topo_at < 100 * SLUICE_NS_PER_MS)) return;
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (nd->ac == NULL) continue;
        r->topo_pending = true;
        r->topo_at = t;
        redisAsyncCommand(nd->ac, on_shards, NULL, "CLUSTER SHARDS");
        return;
    }
}

/* ---- local over-limit cache ------------------------------------------------------- */

static uint64_t fp_of(const rq_item *it) {
    /* the key string already is a keyed hash: fold its bytes */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < it->klen; i++) h = (h ^ (unsigned char)it->key[i]) * 1099511628211ull;
    return h | 1;
}

static bool cacheable(sluice_algo a) {
    /* state only gets worse for other instances' decisions until the retry time; not
     * concurrency (a release frees slots at any time) */
    return a == SLUICE_GCRA || a == SLUICE_TOKEN_BUCKET || a == SLUICE_FIXED_WINDOW ||
           a == SLUICE_SLIDING_WINDOW || a == SLUICE_QUOTA;
}

/* Bumped by every reset (SL.RESET) in this process: the over-limit answers every client
 * cached before it are void (a reset is rare; the caches refill with the next rejection).
 * Other instances trust theirs for at most cache_max_ns. */
static _Atomic uint64_t g_cache_epoch;

static cache_ent *cache_get(sl_redis *r, uint64_t fp) {
    if (r->cache == NULL) return NULL;
    cache_ent *e = &r->cache[fp & r->cache_mask];
    if (e->fp != fp || e->epoch != atomic_load_explicit(&g_cache_epoch, memory_order_relaxed)) return NULL;
    return e;
}

static void cache_put(sl_redis *r, const rq_item *it, const sluice_result *res, sluice_time now) {
    if (r->cache == NULL || !cacheable(it->lim->spec.algo)) return;
    if (res->allowed || res->retry_after_ns <= 0 || res->retry_after_ns == SLUICE_NEVER) return;
    uint64_t fp = fp_of(it);
    cache_ent *e = &r->cache[fp & r->cache_mask];
    e->fp = fp;
    e->epoch = atomic_load_explicit(&g_cache_epoch, memory_order_relaxed);
    e->until = now.mono_ns + res->retry_after_ns;
    e->trust = now.mono_ns + (res->retry_after_ns < r->o.cache_max_ns ? res->retry_after_ns : r->o.cache_max_ns);
    e->reset_at = now.mono_ns + res->reset_after_ns;
    e->min_cost = (uint64_t)it->cost;
    e->limit = res->limit;
}

/* ---- requests --------------------------------------------------------------------- */

static rq *rq_get(sl_redis *r) {
    rq *q = r->free;
    if (q == NULL) return NULL;
    r->free = q->next_free;
    q->busy = true;
    q->gen++;
    q->failed = false;
    q->got_time = false;
    q->leasing = false;
    q->orphans = 0;
    q->held = false;
    q->flags = 0;
    sl_dnode_init(&q->dl);
    return q;
}

static void rq_put(sl_redis *r, rq *q) {
    sl_dnode_disarm(&q->dl);
    if (q->held)
        for (int i = 0; i < q->n; i++) sl_limiter_unref(q->it[i].lim);
    q->held = false;
    q->busy = false;
    q->gen++;
    q->next_free = r->free;
    r->free = q;
}

static void *priv_of(sl_redis *r, rq *q, int g) {
    uintptr_t idx = (uintptr_t)(q - r->pool);
    return (void *)((idx << 40) | ((uintptr_t)(q->gen & 0xFFFFFFFFu) << 8) | (uintptr_t)g);
}

static rq *rq_of(sl_redis *r, void *priv, int *g) {
    uintptr_t v = (uintptr_t)priv;
    uintptr_t idx = v >> 40;
    if (idx >= r->npool) return NULL;
    rq *q = &r->pool[idx];
    if (!q->busy || (q->gen & 0xFFFFFFFFu) != ((v >> 8) & 0xFFFFFFFFu)) return NULL;
    *g = (int)(v & 0xFF);
    return q;
}

static void on_group_reply(redisAsyncContext *ac, void *reply, void *priv);
static void late_reply(sl_redis *r, rq *q, int g, const redisReply *rep);

static sl_redis_node *route(sl_redis *r, unsigned slot) {
    unsigned idx = r->o.cluster ? r->slotmap[slot] : 0;
    if (idx >= (unsigned)r->nnodes) idx = 0;
    return &r->nodes[idx];
}

static void split_ns(int64_t ns, int64_t *s, int64_t *n) {
    *s = ns / SLUICE_NS_PER_S;
    *n = ns % SLUICE_NS_PER_S;
    if (*n < 0) *n += SLUICE_NS_PER_S, (*s)--;
}

/* RESP bulk strings, written straight into the command buffer (no printf, no sds). */
static char *put_bulk(char *p, const char *s, size_t n) {
    *p++ = '$';
    p = sl_redis_put_u64(p, n);
    *p++ = '\r', *p++ = '\n';
    memcpy(p, s, n);
    p += n;
    *p++ = '\r', *p++ = '\n';
    return p;
}

static char *put_bulk_i(char *p, int64_t v) {
    char num[24];
    return put_bulk(p, num, (size_t)(sl_redis_put_i64(num, v) - num));
}

/* Sends group g of q to node nd (ASKING first when asked to). The EVALSHA is formatted
 * here as RESP and handed to hiredis whole, which appends it to the connection's output
 * buffer (written at the end of the loop turn by sl_redis_flush, or on EPOLLOUT).
 * Returns false when the node cannot take commands now. */
static bool send_group(sl_redis *r, rq *q, int g, sl_redis_node *nd, bool asking) {
    if (nd->ac == NULL) return false;
    rq_group *gr = &q->g[g];
    char *p = r->cmd;
    *p++ = '*';
    p = sl_redis_put_u64(p, 3 + (uint64_t)gr->n + SL_REDIS_HEAD_ARGS + (uint64_t)gr->n * SL_REDIS_ITEM_ARGS);
    *p++ = '\r', *p++ = '\n';
    p = put_bulk(p, "EVALSHA", 7);
    p = put_bulk(p, r->sha, 40);
    p = put_bulk_i(p, gr->n);
    for (int k = 0; k < gr->n; k++) {
        rq_item *it = &q->it[gr->idx[k]];
        p = it->xlen ? put_bulk(p, q->xk + it->xoff, it->xlen) : put_bulk(p, it->key, it->klen);
    }
    p = put_bulk(p, &q->op, 1); /* 'd', 's', 'l' or 'x' */
    p = put_bulk(p, r->o.time_mode == SL_REDIS_TIME_SERVER ? "r" : "c", 1);
    int64_t ms, mn, ws, wn;
    split_ns(q->now.mono_ns, &ms, &mn);
    split_ns(q->now.wall_ns, &ws, &wn);
    p = put_bulk_i(p, ms);
    p = put_bulk_i(p, mn);
    p = put_bulk_i(p, ws);
    p = put_bulk_i(p, wn);
    p = put_bulk_i(p, r->o.expiry_slack_ms);
    p = put_bulk_i(p, (int64_t)q->flags);
    for (int k = 0; k < gr->n; k++) {
        rq_item *it = &q->it[gr->idx[k]];
        p = put_bulk_i(p, it->xlen ? SL_REDIS_ALGO_ENVOY : it->lim != NULL ? it->lim->spec.algo : 0);
        p = put_bulk_i(p, it->cost);
        p = put_bulk_i(p, it->sgroup);
        p = put_bulk_i(p, it->sflags);
        for (int j = 0; j < 4; j++) p = put_bulk_i(p, it->p[j]);
    }
    if (asking) redisAsyncCommand(nd->ac, NULL, NULL, "ASKING");
    if (redisAsyncFormattedCommand(nd->ac, on_group_reply, priv_of(r, q, g), r->cmd, (size_t)(p - r->cmd)) !=
        REDIS_OK)
        return false;
    gr->sent = true;
    inc(&r->st.calls);
    return true;
}

/* The compiled parameters an item decides with (its limit override applied). */
static sl_limit item_limit(const rq_item *it) {
    sl_limit l = it->lim->lim;
    if (it->limit != 0) l.limit = l.capacity = it->limit;
    return l;
}

static bool key_same(const void *ctx, size_t a, size_t b) {
    const rq_item *const *x = ctx;
    return x[a]->lim == x[b]->lim && x[a]->klen == x[b]->klen &&
           memcmp(x[a]->key, x[b]->key, x[a]->klen) == 0;
}

/*
 * A decision's call: the script applied store/group.h's rules to the states it read and
 * returned them ("before"); the same rules run here over those states, so the results are
 * exactly the memory store's. For a decision spread over several calls (cluster slots),
 * the same states also give `alt`: the items as they stand should another call reject.
 */
static bool decode_decide(sl_redis *r, rq *q, int g, const redisReply *rep, sluice_time now) {
    rq_group *gr = &q->g[g];
    const rq_item *its[SLUICE_MAX_ITEMS];
    sl_sitem si[SLUICE_MAX_ITEMS];
    sl_limit lims[SLUICE_MAX_ITEMS];
    for (int k = 0; k < gr->n; k++) {
        const rq_item *it = &q->it[gr->idx[k]];
        its[k] = it;
        si[k] = (sl_sitem){.lim = it->lim, .cost = (uint64_t)it->cost, .limit = it->limit,
                           .group = it->sgroup, .flags = it->sflags};
        lims[k] = item_limit(it);
    }
    uint8_t kidx[SLUICE_MAX_ITEMS];
    size_t nk = sl_group_keys(gr->n, key_same, its, kidx);
    /* scratch: states as stored (per key) and per item, small inline, sliding logs from
     * the client's arenas (beyond what the config allows per decision: an error, as in
     * the memory store) */
    uint64_t small_st[SLUICE_MAX_ITEMS][SMALL_STATE / 8], small_w[SLUICE_MAX_ITEMS + 1][SMALL_STATE / 8];
    const void *stored[SLUICE_MAX_ITEMS];
    void *work[SLUICE_MAX_ITEMS];
    void *peek = small_w[SLUICE_MAX_ITEMS];
    size_t used0 = 0, used1 = 0;
    uint32_t peek_size = 0;
    bool seen[SLUICE_MAX_ITEMS] = {false};
    for (int k = 0; k < gr->n; k++) {
        size_t ss = lims[k].state_size;
        if (ss > peek_size) peek_size = (uint32_t)ss;
        size_t a8 = (ss + 7) & ~(size_t)7;
        if (ss <= SMALL_STATE) {
            work[k] = small_w[k];
        } else {
            if (a8 > BIG_ARENA - used1) return false;
            work[k] = r->big[1] + used1;
            used1 += a8;
        }
        unsigned key = kidx[k];
        if (seen[key]) continue;
        seen[key] = true;
        const redisReply *b = rep->element[3 + gr->n + k];
        if (b->type != REDIS_REPLY_STRING) return false;
        void *dst;
        if (ss <= SMALL_STATE) {
            dst = small_st[key];
        } else {
            if (a8 > BIG_ARENA - used0) return false;
            dst = r->big[0] + used0;
            used0 += a8;
        }
        int pr = its[k]->xlen
                     ? sl_redis_envoy_state_parse(b->str, b->len,
                                                  sl_window_start(now.wall_ns, lims[k].period_ns), dst)
                     : sl_redis_state_parse(its[k]->lim, b->str, b->len, dst);
        if (pr < 0) return false;
        stored[key] = pr == 1 ? dst : NULL;
    }
    if (peek_size > SMALL_STATE) {
        size_t a8 = ((size_t)peek_size + 7) & ~(size_t)7;
        if (a8 > sizeof(r->big[1]) - used1) return false;
        peek = r->big[1] + used1;
        used1 += a8;
    }
    sl_group_run run = {.items = si, .lims = lims, .n = gr->n, .flags = q->flags, .kidx = kidx,
                        .nkeys = nk, .stored = stored, .work = work, .peek = peek, .now = now};
    sl_group_decide(&run);
    gr->all_ok = run.res.allowed != 0;
    gr->groups_ok = run.res.groups_ok;
    if ((rep->element[0]->integer == 1) != gr->all_ok) inc(&r->st.mismatches);
    for (int k = 0; k < gr->n; k++) q->res.r[gr->idx[k]] = run.res.r[k];
    if (q->ngroups > 1 && gr->all_ok) {
        /* what these items report if another call rejects (their refunds undo them) */
        sl_group_run alt = run;
        alt.flags |= SL_SREQ_REJECT;
        sl_group_decide(&alt);
        for (int k = 0; k < gr->n; k++) q->alt.r[gr->idx[k]] = alt.res.r[k];
    }
    return true;
}

/* Computes the results of group g from the states the script saw, with the C algorithms
 * (so they are exactly the memory store's), chaining repeated keys. */
static bool decode_group(sl_redis *r, rq *q, int g, const redisReply *rep) {
    rq_group *gr = &q->g[g];
    size_t need = 3 + 2 * (size_t)gr->n;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != need) return false;
    for (size_t i = 0; i < 3 + (size_t)gr->n; i++)
        if (rep->element[i]->type != REDIS_REPLY_INTEGER) return false;
    int64_t ts = rep->element[1]->integer, tn = rep->element[2]->integer;
    sluice_time now = q->now;
    if (r->o.time_mode == SL_REDIS_TIME_SERVER) {
        now.mono_ns = now.wall_ns = ts * SLUICE_NS_PER_S + tn;
        q->rnow = now;
        q->got_time = true;
    }
    gr->all_ok = rep->element[0]->integer == 1;
    if (q->op == 'c') { /* a claim: no state, no limiter */
        memset(&q->res.r[0], 0, sizeof(q->res.r[0]));
        q->res.r[0].allowed = gr->all_ok;
        return true;
    }
    if (q->op == 'd') return decode_decide(r, q, g, rep, now);
    /* settle, release, reset: one operation per item, chaining repeated keys */
    uint64_t small_src[SLUICE_MAX_ITEMS][SMALL_STATE / 8], small_dst[SLUICE_MAX_ITEMS][SMALL_STATE / 8];
    void *srcp[SLUICE_MAX_ITEMS], *dstp[SLUICE_MAX_ITEMS];
    bool has[SLUICE_MAX_ITEMS], changed[SLUICE_MAX_ITEMS];
    size_t used = 0;
    for (int k = 0; k < gr->n; k++) {
        size_t ss = q->it[gr->idx[k]].lim->lim.state_size;
        if (ss <= SMALL_STATE) {
            srcp[k] = small_src[k], dstp[k] = small_dst[k];
            continue;
        }
        ss = (ss + 7) & ~(size_t)7;
        if (ss > BIG_ARENA - used) return false;
        srcp[k] = r->big[0] + used, dstp[k] = r->big[1] + used;
        used += ss;
    }
    for (int k = 0; k < gr->n; k++) {
        int i = gr->idx[k];
        rq_item *it = &q->it[i];
        const sl_limit *l = &it->lim->lim;
        size_t ss = l->state_size;
        const redisReply *b = rep->element[3 + gr->n + k];
        int pk = -1;
        for (int j = k - 1; j >= 0; j--)
            if (q->it[gr->idx[j]].klen == it->klen && memcmp(q->it[gr->idx[j]].key, it->key, it->klen) == 0) {
                pk = j;
                break;
            }
        if (pk >= 0) {
            has[k] = has[pk] || changed[pk];
            if (srcp[k] != srcp[pk]) memcpy(srcp[k], changed[pk] ? dstp[pk] : srcp[pk], ss);
            else if (changed[pk]) memcpy(srcp[k], dstp[pk], ss);
        } else {
            if (b->type != REDIS_REPLY_STRING) return false;
            int pr = it->xlen ? sl_redis_envoy_state_parse(b->str, b->len,
                                                           sl_window_start(now.wall_ns, l->period_ns), srcp[k])
                              : sl_redis_state_parse(it->lim, b->str, b->len, srcp[k]);
            if (pr < 0) return false;
            has[k] = pr == 1;
        }
        sl_result res;
        bool script_ok = rep->element[3 + k]->integer == 1;
        if (q->op == 's') {
            sl_algo_settle(l, has[k] ? srcp[k] : NULL, dstp[k], now, it->cost, &res);
            changed[k] = true;
        } else {
            memset(&res, 0, sizeof(res));
            res.allowed = script_ok;
            changed[k] = false;
        }
        sluice_result *o = &q->res.r[i];
        o->allowed = res.allowed ? 1 : 0;
        o->limit = res.limit;
        o->remaining = res.remaining;
        o->reset_after_ns = res.reset_after_ns;
        o->retry_after_ns = res.retry_after_ns;
        o->delay_ns = res.delay_ns;
        o->lease = res.lease;
    }
    return true;
}

static void send_refunds(sl_redis *r, rq *q);

/* Every group answered (or the request failed): refund what must be, answer, recycle. */
static void launch(sl_redis *r, rq *q);
static void regroup(const sl_redis *r, rq *q);
static bool lease_retry(sl_redis *r, rq *q);
static void lease_settle(sl_redis *r, rq *q, bool admitted);

static void finish(sl_redis *r, rq *q, int rc) {
    if (q->op == 'd') {
        bool all = !q->failed;
        uint32_t groups_ok = 0;
        for (int g = 0; g < q->ngroups; g++) {
            if (!q->g[g].all_ok) all = false;
            groups_ok |= q->g[g].groups_ok;
        }
        /* a slice that did not fit: refund what the groups took, decide what was asked */
        if (!all && !q->failed && q->leasing && lease_retry(r, q)) return;
        if (!all && q->ngroups > 1) {
            /* calls that admitted while another rejected (or failed) are undone; their
             * items report the state the refund leaves */
            send_refunds(r, q);
            for (int g = 0; g < q->ngroups && !q->failed; g++)
                if (q->g[g].done && !q->g[g].failed && q->g[g].all_ok)
                    for (int k = 0; k < q->g[g].n; k++) q->res.r[q->g[g].idx[k]] = q->alt.r[q->g[g].idx[k]];
        }
        if (q->leasing) lease_settle(r, q, all);
        if (!q->failed) {
            q->res.allowed = all ? 1 : 0;
            q->res.groups_ok = all ? groups_ok : groups_ok; /* reported either way */
            q->res.n = q->n;
            sluice_time t = q->now;
            for (int i = 0; i < q->n; i++)
                if (q->it[i].lease != LEASE_LOCAL && q->it[i].sgroup == 0)
                    cache_put(r, &q->it[i], &q->res.r[i], t);
        }
    }
    if (q->op != 'd') { /* settle, release, reset, claim: whether every call applied */
        bool all = !q->failed;
        for (int g = 0; g < q->ngroups; g++)
            if (!q->g[g].all_ok) all = false;
        q->res.allowed = all ? 1 : 0;
    }
    sl_redis_cb cb = q->cb;
    void *ud = q->ud;
    const sl_sresult *d = &q->res;
    if (q->failed && rc == SLUICE_OK) rc = SLUICE_ESTORE;
    q->res.n = q->n;
    /* the callback may start new decisions: keep q out of the free list until it returns */
    sl_dnode_disarm(&q->dl);
    if (cb) cb(ud, rc, rc == SLUICE_OK ? d : NULL);
    if (q->orphans > 0) { /* answered; what is still in flight may yet be applied */
        q->cb = NULL;
        sl_dlist_arm(&r->orphans, &q->dl, mono_now());
        arm(r, q->dl.deadline_ns);
        return;
    }
    rq_put(r, q);
}

static void group_fail(sl_redis *r, rq *q, int g) {
    rq_group *gr = &q->g[g];
    if (gr->done) return;
    gr->done = gr->failed = true;
    q->failed = true;
    if (--q->pending == 0) finish(r, q, SLUICE_ESTORE);
}

static void on_group_reply(redisAsyncContext *ac, void *reply, void *priv) {
    sl_redis_node *nd = ac->data;
    if (nd == NULL) return;
    sl_redis *r = nd->r;
    int g;
    rq *q = rq_of(r, priv, &g);
    if (q != NULL && g < q->ngroups && q->g[g].late) {
        late_reply(r, q, g, reply);
        return;
    }
    if (q == NULL || g >= q->ngroups || q->g[g].done) return; /* timed out already */
    redisReply *rep = reply;
    rq_group *gr = &q->g[g];
    if (rep == NULL) { /* connection lost */
        inc(&r->st.errors);
        note_fail(r);
        group_fail(r, q, g);
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        unsigned slot;
        char host[SL_REDIS_HOST_MAX];
        int port;
        int kind = sl_redis_parse_redirect(rep->str, rep->len, &slot, host, sizeof(host), &port);
        if (kind != 0 && ++gr->redirects <= MAX_REDIRECTS) {
            int idx = node_find(r, host[0] ? host : nd->host, port, true);
            if (idx >= 0) {
                if (kind == 1) {
                    inc(&r->st.moved);
                    r->slotmap[slot] = (uint8_t)idx;
                    refresh_topology(r, false);
                } else {
                    inc(&r->st.ask);
                }
                if (send_group(r, q, g, &r->nodes[idx], kind == 2)) return;
            }
        } else if (rep->len >= 8 && memcmp(rep->str, "NOSCRIPT", 8) == 0 && ++gr->redirects <= MAX_REDIRECTS) {
            inc(&r->st.noscript);
            queue_script_load(nd);
            if (send_group(r, q, g, nd, false)) return;
        } else if (rep->len >= 8 && memcmp(rep->str, "TRYAGAIN", 8) == 0) {
            inc(&r->st.tryagain);
        }
        snprintf(r->last_error, sizeof(r->last_error), "%.120s", rep->str);
        inc(&r->st.errors);
        note_fail(r);
        group_fail(r, q, g);
        return;
    }
    if (!decode_group(r, q, g, rep)) {
        snprintf(r->last_error, sizeof(r->last_error), "unexpected script reply");
        inc(&r->st.errors);
        note_fail(r);
        group_fail(r, q, g);
        return;
    }
    note_ok(r);
    gr->done = true;
    if (--q->pending == 0) finish(r, q, SLUICE_OK);
}

/* Issues every group of q; a group whose node is down fails at once (no waiting). */
static void launch(sl_redis *r, rq *q) {
    q->pending = q->ngroups;
    sl_dlist_arm(&r->deadlines, &q->dl, mono_now());
    arm(r, q->dl.deadline_ns);
    int ng = q->ngroups;
    for (int g = 0; g < ng; g++) {
        if (!q->busy) return; /* finished inside the loop (all failed) */
        sl_redis_node *nd = route(r, q->g[g].slot);
        /* a connecting node queues the call (bounded by the deadline); a down one fails */
        if (nd->state == 0 || !send_group(r, q, g, nd, false)) {
            inc(&r->st.node_down);
            note_fail(r);
            group_fail(r, q, g);
        }
    }
}

/* An envoy compat item: upstream's key for the window `now` is in (the instance's clock,
 * as upstream reads its own), a plain integer counter living one unit plus a jitter. */
static int envoy_item(sl_redis *r, rq *q, rq_item *it, const sl_sitem *in, const sl_limit *l,
                      sluice_time now) {
    int64_t per_s = l->period_ns / SLUICE_NS_PER_S;
    if (per_s <= 0) return SLUICE_EINVAL;
    int64_t win = sl_window_start(now.wall_ns, per_s * SLUICE_NS_PER_S) / SLUICE_NS_PER_S;
    char *out = q->xk + q->xk_used;
    size_t n = sl_redis_envoy_key(r->o.envoy_prefix, in->key, in->key_len, win, out,
                                  XKEY_ARENA - q->xk_used);
    if (n == 0 || n > SL_REDIS_ENVOY_KEY_MAX) return SLUICE_ERANGE;
    it->xoff = (uint16_t)q->xk_used;
    it->xlen = (uint16_t)n;
    q->xk_used += n;
    /* the item's identity (repeats, caches) is a hash of the whole name */
    it->klen = (uint8_t)sl_redis_key(&r->sk, it->lim, out, n, it->key);
    it->slot = (uint16_t)sl_redis_keyslot(out, n);
    int64_t ttl = per_s;
    if (r->o.envoy_jitter_s > 0) {
        uint64_t x = r->jitter_rng;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        r->jitter_rng = x;
        ttl += (int64_t)(x % (uint64_t)r->o.envoy_jitter_s);
    }
    it->p[0] = (int64_t)l->limit;
    it->p[1] = ttl * 1000; /* ms */
    it->p[2] = it->p[3] = 0;
    it->lease = LEASE_NONE;
    it->want = it->cost;
    return SLUICE_OK;
}

static int build(sl_redis *r, rq *q, const sl_sitem *items, size_t n, unsigned flags, sluice_time now) {
    q->n = (uint8_t)n;
    q->xk_used = 0;
    q->ngroups = 0;
    q->now = now;
    q->flags = flags;
    q->res.n = n;
    q->res.allowed = 1;
    q->res.groups_ok = 0;
    for (size_t i = 0; i < n; i++) {
        rq_item *it = &q->it[i];
        if (items[i].lim == NULL || (items[i].key == NULL && items[i].key_len > 0)) return SLUICE_EINVAL;
        if (items[i].cost > (uint64_t)EXACT_COST_MAX) return SLUICE_ERANGE;
        if (items[i].limit != 0 && items[i].lim->spec.algo != SLUICE_FIXED_WINDOW) return SLUICE_EINVAL;
        it->lim = items[i].lim;
        it->cost = (int64_t)items[i].cost;
        it->limit = items[i].limit;
        it->sgroup = items[i].group;
        it->sflags = items[i].flags;
        sl_limit l = item_limit(it);
        int rc = sl_redis_params_of(&l, now, it->p);
        if (rc != SLUICE_OK) return rc;
        it->xoff = it->xlen = 0;
        if (r->o.envoy_keys && q->xk != NULL && items[i].key_len > 1 &&
            ((const unsigned char *)items[i].key)[0] == SL_REDIS_ENVOY_TAG &&
            it->lim->spec.algo == SLUICE_FIXED_WINDOW) {
            rc = envoy_item(r, q, it, &items[i], &l, now);
            if (rc != SLUICE_OK) return rc;
            continue;
        }
        it->klen = (uint8_t)sl_redis_key(&r->sk, it->lim, items[i].key != NULL ? items[i].key : "",
                                         items[i].key_len, it->key);
        it->slot = (uint16_t)sl_redis_keyslot(it->key, it->klen);
        it->lease = LEASE_NONE;
        it->want = it->cost;
    }
    regroup(r, q);
    return SLUICE_OK;
}

/* One group per cluster slot over the items that go to Redis (not those served from a
 * held slice), in item order. A single node has no slots to respect: one group, one
 * call, every limit of the decision in one atomic script. */
static void regroup(const sl_redis *r, rq *q) {
    q->ngroups = 0;
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        if (it->lease == LEASE_LOCAL) {
            it->group = -1;
            continue;
        }
        int g = -1;
        for (int k = 0; k < q->ngroups; k++)
            if (q->g[k].slot == it->slot || !(r->o.cluster || r->o.per_slot)) g = k;
        if (g < 0) {
            g = q->ngroups++;
            memset(&q->g[g], 0, sizeof(q->g[g]));
            q->g[g].slot = it->slot;
        }
        it->group = (int8_t)g;
        q->g[g].idx[q->g[g].n++] = (uint8_t)i;
    }
}

/* ---- leasing (hot keys) -------------------------------------------------------------
 * A rate limit with a lease slice S (the policy's `leasing`, else the store URL's
 * ?lease=S) takes S units in one call instead of the cost asked, and spends the rest
 * from this client's lease table for up to its hold time, without a round trip; what is
 * not spent goes back (a settle with a negative delta) when the slice expires, unless
 * its window has passed. In a decision of several limits, items covered by a held slice
 * are reserved here and the others go to Redis; the reservations stand only if Redis
 * admits the rest (all-or-nothing). Overshoot bound: every client (one per worker and
 * instance) holds at most one slice per key, so at most clients x S units beyond the
 * limit can be admitted (units taken near a window's end and spent after it); held
 * slices can as well make the others under-admit by as much.
 */

static bool leasable(const sluice_limiter *l) {
    sluice_algo a = l->spec.algo;
    return a == SLUICE_GCRA || a == SLUICE_TOKEN_BUCKET || a == SLUICE_FIXED_WINDOW ||
           a == SLUICE_SLIDING_WINDOW;
}

/* The slice of l's leases (0: none) and their hold time. */
static uint32_t slice_of(const sl_redis *r, const sluice_limiter *l, int64_t *hold) {
    if (!leasable(l)) return 0;
    *hold = l->lease_hold_ns > 0 ? l->lease_hold_ns : r->o.lease_ns;
    return l->lease_slice ? l->lease_slice : r->o.lease_slice;
}

static void held_add(sl_redis *r, int64_t units) {
    r->held = (uint64_t)((int64_t)r->held + units);
    atomic_store_explicit(&r->st.lease_held, r->held, memory_order_relaxed);
}

/* Gives `units` of `it` back (settle with a negative delta), fire and forget; nothing
 * when the window or period that counted them has passed (`taken`: when they were). */
static void give_back(sl_redis *r, const rq_item *it, uint64_t units, sluice_time taken, sluice_time now) {
    if (units == 0) return;
    if (!sl_algo_refundable(&it->lim->lim, taken, now)) {
        atomic_store_explicit(&r->st.lease_lapsed,
                              atomic_load_explicit(&r->st.lease_lapsed, memory_order_relaxed) + units,
                              memory_order_relaxed);
        return;
    }
    rq *f = rq_get(r);
    if (f == NULL) return;
    f->op = 's';
    f->cb = NULL;
    f->n = 1;
    f->now = now;
    f->it[0] = *it;
    f->it[0].cost = -(int64_t)units;
    f->it[0].lease = LEASE_NONE;
    f->res.n = 1;
    rq_hold(f);
    regroup(r, f);
    atomic_store_explicit(&r->st.lease_returned,
                          atomic_load_explicit(&r->st.lease_returned, memory_order_relaxed) + units,
                          memory_order_relaxed);
    launch(r, f);
}

/* Ends a lease: its unspent units go back. */
static void lease_end(sl_redis *r, lease_ent *e, sluice_time now) {
    uint64_t left = e->left;
    e->left = 0;
    e->fp = 0;
    held_add(r, -(int64_t)left);
    give_back(r, &e->it, left, e->taken, now);
    sl_limiter_unref(e->lim); /* the lease's reference (the give-back holds its own) */
    e->lim = NULL;
}

/* The live lease of `it` (same key and limiter, not expired), or NULL; an expired one
 * found on the way is ended. */
static lease_ent *lease_find(sl_redis *r, const rq_item *it, sluice_time now) {
    lease_ent *e = &r->leases[fp_of(it) & (LEASE_SLOTS - 1)];
    if (e->fp != fp_of(it) || e->lim != it->lim) return NULL;
    if (now.mono_ns < e->expires) return e;
    lease_end(r, e, now);
    return NULL;
}

/* Before a decision goes out: items a held slice covers are reserved from it (and not
 * sent); leasable items without one ask for a slice instead of their cost. Returns true
 * when every item was covered (the decision is admitted without a round trip). */
static bool lease_plan(sl_redis *r, rq *q) {
    bool all_local = q->n > 0;
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        int64_t hold = 0;
        /* enforced items of their own limit only: a shadow group, a charge or an override
         * decides in Redis */
        uint32_t slice = it->sgroup == 0 && it->sflags == 0 && it->limit == 0 && it->xlen == 0
                             ? slice_of(r, it->lim, &hold) : 0;
        if (slice == 0 || it->cost <= 0) {
            all_local = false;
            continue;
        }
        lease_ent *e = lease_find(r, it, q->now);
        if (e != NULL && e->left >= (uint64_t)it->cost) {
            e->left -= (uint64_t)it->cost;
            held_add(r, -it->cost);
            it->lease = LEASE_LOCAL;
            it->lent = (uint32_t)(e - r->leases);
            q->leasing = true;
            continue;
        }
        all_local = false;
        uint64_t fp = fp_of(it);
        lease_ent *slot = &r->leases[fp & (LEASE_SLOTS - 1)];
        /* Why one slice request at a time: decisions that arrive while a slice is on its
         * way would each take one and the client would hold several (merged when they
         * come back), past the documented bound. They decide their own cost instead. */
        if (slot->taking != 0) continue;
        if (e != NULL) lease_end(r, e, q->now); /* too small: give the rest back, take anew */
        if ((uint64_t)slice > (uint64_t)it->cost && slice <= sluice_limiter_capacity(it->lim)) {
            it->lease = LEASE_TAKE;
            it->cost = slice;
            slot->taking = fp;
            q->leasing = true;
        }
    }
    if (q->leasing) regroup(r, q);
    return all_local;
}

/* The slice request of `it` is over (answered, refused, failed): others may ask again. */
static void taking_done(sl_redis *r, const rq_item *it) {
    lease_ent *slot = &r->leases[fp_of(it) & (LEASE_SLOTS - 1)];
    if (slot->taking == fp_of(it)) slot->taking = 0;
}

/* A rejected decision that asked for slices: when every rejected item was a slice
 * larger than its cost, refund what the other groups took and decide the costs asked
 * (a second round trip, only on the way to a rejection; later ones are answered from
 * the over-limit cache). Returns true when the decision went out again. */
static bool lease_retry(sl_redis *r, rq *q) {
    bool any = false;
    for (int i = 0; i < q->n; i++) {
        const rq_item *it = &q->it[i];
        if (it->lease == LEASE_LOCAL || q->res.r[i].allowed || it->sgroup != 0) continue;
        if (it->lease != LEASE_TAKE || it->cost <= it->want) return false; /* a real rejection */
        any = true;
    }
    if (!any) return false;
    if (q->ngroups > 1) send_refunds(r, q);
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        if (it->lease != LEASE_TAKE) continue;
        taking_done(r, it);
        it->lease = LEASE_NONE;
        it->cost = it->want;
    }
    regroup(r, q);
    launch(r, q);
    return true;
}

/* The decision is over: on admission the slices taken go to the lease table and items
 * served locally report what their lease holds; otherwise the local reservations go
 * back to their leases. */
static void lease_settle(sl_redis *r, rq *q, bool admitted) {
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        sluice_result *o = &q->res.r[i];
        if (it->lease == LEASE_LOCAL) {
            lease_ent *e = &r->leases[it->lent];
            bool same = e->lim == it->lim && e->fp == fp_of(it);
            if (!admitted) {
                if (same) e->left += (uint64_t)it->cost, held_add(r, it->cost);
                else give_back(r, it, (uint64_t)it->cost, q->now, q->now); /* its lease ended meanwhile */
            } else {
                inc(&r->st.lease_local);
            }
            memset(o, 0, sizeof(*o));
            o->allowed = 1;
            o->limit = sluice_limiter_capacity(it->lim);
            o->remaining = same ? e->left : 0;
            continue;
        }
        if (it->lease == LEASE_TAKE) taking_done(r, it);
        if (it->lease != LEASE_TAKE || !admitted) continue;
        int64_t hold = 0;
        slice_of(r, it->lim, &hold);
        uint64_t fp = fp_of(it), extra = (uint64_t)(it->cost - it->want);
        lease_ent *e = &r->leases[fp & (LEASE_SLOTS - 1)];
        if (e->fp == fp && e->lim == it->lim) {
            e->left += extra; /* the same key twice in one decision */
        } else {
            if (e->lim != NULL) lease_end(r, e, q->now); /* another key held this slot */
            e->fp = fp;
            e->lim = it->lim;
            sl_limiter_ref(e->lim); /* outlives the engine that made it if need be */
            e->left = extra;
            e->it = *it;
            e->it.lease = LEASE_NONE;
        }
        e->taken = q->now;
        e->expires = q->now.mono_ns + hold;
        e->sweep_at = mono_now() + hold;
        held_add(r, (int64_t)extra);
        if (r->lease_sweep_at == 0 || e->sweep_at < r->lease_sweep_at) {
            r->lease_sweep_at = e->sweep_at;
            arm(r, e->sweep_at);
        }
        inc(&r->st.leases);
        /* the caller sees what it would have seen plus what this client holds */
        o->remaining += e->left;
    }
}

/* From the timer: ends the leases whose hold has passed (a key that went quiet gives its
 * units back within its hold time, not when it is next decided). */
static void lease_sweep(sl_redis *r, int64_t t) {
    if (r->lease_sweep_at == 0 || t < r->lease_sweep_at) return;
    int64_t next = 0;
    for (unsigned i = 0; i < LEASE_SLOTS; i++) {
        lease_ent *e = &r->leases[i];
        if (e->lim == NULL) continue;
        if (t >= e->sweep_at) {
            /* the caller's time now, for the give-back's window check */
            int64_t el = t - (e->sweep_at - (e->expires - e->taken.mono_ns));
            sluice_time at = {.mono_ns = e->taken.mono_ns + el, .wall_ns = e->taken.wall_ns + el};
            lease_end(r, e, at);
        } else if (next == 0 || e->sweep_at < next) {
            next = e->sweep_at;
        }
    }
    r->lease_sweep_at = next;
    if (next) arm(r, next);
}

/* Gives back what call g of q applied to the items whose bit (position in the call) is
 * in `mask` (a settle of -cost each), fire and forget. */
static void refund_group(sl_redis *r, rq *q, int g, uint32_t mask) {
    rq_group *gr = &q->g[g];
    rq *f = rq_get(r);
    if (f == NULL) return;
    f->op = 's';
    f->cb = NULL;
    f->n = 0;
    f->xk_used = 0;
    f->ngroups = 1;
    f->now = q->got_time ? q->rnow : q->now;
    memset(&f->g[0], 0, sizeof(f->g[0]));
    f->g[0].slot = gr->slot;
    for (int k = 0; k < gr->n; k++) {
        rq_item *it = &q->it[gr->idx[k]];
        if (it->cost == 0 || !(mask >> k & 1u)) continue;
        f->it[f->n] = *it;
        if (it->xlen) { /* an envoy compat counter: its name moves to f's arena */
            if (f->xk == NULL || f->xk_used + it->xlen > XKEY_ARENA) continue;
            memcpy(f->xk + f->xk_used, q->xk + it->xoff, it->xlen);
            f->it[f->n].xoff = (uint16_t)f->xk_used;
            f->xk_used += it->xlen;
        }
        f->it[f->n].cost = -it->cost;
        f->it[f->n].limit = 0;
        f->it[f->n].sgroup = 0;
        f->it[f->n].sflags = 0;
        f->g[0].idx[f->g[0].n++] = f->n;
        f->n++;
    }
    f->res.n = f->n;
    if (f->n == 0) {
        rq_put(r, f);
        return;
    }
    rq_hold(f);
    launch(r, f);
}

/* The items of call g that an admitting call consumed: group 0 and the shadow groups
 * that committed with it; `charges` whether count_rejected charges count too. */
static uint32_t consumed_mask(const rq *q, int g, uint32_t groups_ok, bool charges) {
    const rq_group *gr = &q->g[g];
    uint32_t m = 0;
    for (int k = 0; k < gr->n; k++) {
        const rq_item *it = &q->it[gr->idx[k]];
        bool took = it->sgroup == 0 ? (charges || !(it->sflags & SL_SI_CHARGE))
                                    : (groups_ok >> it->sgroup & 1u) != 0;
        if (took) m |= 1u << k;
    }
    return m;
}

/* A decision over several calls that one of them rejected (or failed): the calls that
 * admitted are undone, but for what count_rejected charges (the attempt counts). */
static void send_refunds(sl_redis *r, rq *q) {
    for (int g = 0; g < q->ngroups; g++) {
        rq_group *gr = &q->g[g];
        if (!gr->done || gr->failed || !gr->all_ok) continue;
        inc(&r->st.refunds);
        refund_group(r, q, g, consumed_mask(q, g, gr->groups_ok, false));
    }
}

/* The reply of a call whose decision timed out: the caller was answered as if nothing
 * had been applied (its failure mode), so what the script did apply is given back: an
 * admission's items (and its shadow groups that committed), or a rejection's charges.
 * A lost connection leaves the outcome unknown (counted). */
static void late_reply(sl_redis *r, rq *q, int g, const redisReply *rep) {
    rq_group *gr = &q->g[g];
    gr->late = false;
    if (rep == NULL) {
        inc(&r->st.late_unknown);
    } else if (q->op == 'd' && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 + 2 * (size_t)gr->n &&
               rep->element[0]->type == REDIS_REPLY_INTEGER) {
        bool all = rep->element[0]->integer == 1;
        uint32_t mask = 0;
        if (all) {
            /* a shadow group committed when each of its items was admitted */
            uint32_t bad = 0;
            for (int k = 0; k < gr->n; k++) {
                const redisReply *ok = rep->element[3 + k];
                if (ok->type != REDIS_REPLY_INTEGER || ok->integer != 1) bad |= 1u << q->it[gr->idx[k]].sgroup;
            }
            mask = consumed_mask(q, g, ~bad, true);
        } else {
            for (int k = 0; k < gr->n; k++) {
                const rq_item *it = &q->it[gr->idx[k]];
                if (it->sgroup == 0 && (it->sflags & SL_SI_CHARGE)) mask |= 1u << k;
            }
        }
        if (mask != 0) {
            inc(&r->st.late_refunds);
            refund_group(r, q, g, mask);
        }
    }
    if (--q->orphans == 0) rq_put(r, q);
}

/* ---- timer: deadlines, reconnection, connect timeouts ------------------------------- */

static void on_timer(void *ud, uint32_t ev) {
    (void)ev;
    sl_redis *r = ud;
    uint64_t x;
    while (read(r->tfd, &x, sizeof(x)) > 0) {
    }
    r->armed = 0;
    int64_t t = mono_now();
    lease_sweep(r, t);
    sl_dnode *d;
    while ((d = sl_dlist_expired(&r->orphans, t)) != NULL) {
        rq *q = (rq *)((char *)d - offsetof(rq, dl));
        add(&r->st.late_unknown, q->orphans); /* no reply within ORPHAN_NS */
        q->orphans = 0;
        rq_put(r, q);
    }
    while ((d = sl_dlist_expired(&r->deadlines, t)) != NULL) {
        rq *q = (rq *)((char *)d - offsetof(rq, dl));
        sl_dnode_disarm(d);
        if (q->cb != NULL) inc(&r->st.timeouts);
        note_fail(r);
        q->failed = true;
        for (int g = 0; g < q->ngroups; g++) {
            rq_group *gr = &q->g[g];
            if (gr->done) continue;
            gr->done = gr->failed = true;
            if (q->op == 'd' && gr->sent) gr->late = true, q->orphans++;
        }
        q->pending = 0;
        finish(r, q, SLUICE_ESTORE);
    }
    int64_t next = 0;
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (nd->state == 1 && nd->ac != NULL && t >= nd->connect_by) {
            redisAsyncContext *ac = nd->ac;
            ac->data = NULL; /* its callbacks now ignore this node */
            redisAsyncFree(ac);
            nd->ac = NULL;
            node_down(nd);
        }
        if (nd->state == 0 && nd->ac == NULL && t >= nd->retry_at) node_connect(nd);
        int64_t at = nd->state == 0 ? nd->retry_at : nd->state == 1 ? nd->connect_by : 0;
        if (at && (next == 0 || at < next)) next = at;
    }
    sl_dnode *h = r->deadlines.head.next;
    if (h != &r->deadlines.head && (next == 0 || h->deadline_ns < next)) next = h->deadline_ns;
    h = r->orphans.head.next;
    if (h != &r->orphans.head && (next == 0 || h->deadline_ns < next)) next = h->deadline_ns;
    if (r->open_until && (next == 0 || r->open_until < next) && r->open_until > t) next = r->open_until;
    if (r->lease_sweep_at && (next == 0 || r->lease_sweep_at < next)) next = r->lease_sweep_at;
    if (next) arm(r, next);
}

/* ---- public ----------------------------------------------------------------------- */

sl_redis *sl_redis_create(sl_loop *loop, const sl_redis_opts *o, int *err) {
    int e = SLUICE_OK;
    sl_redis *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    r->loop = loop;
    r->o = *o;
    r->tfd = -1;
    if (r->o.timeout_ns <= 0) r->o.timeout_ns = 20 * SLUICE_NS_PER_MS;
    if (r->o.expiry_slack_ms <= 0)
        r->o.expiry_slack_ms = r->o.time_mode == SL_REDIS_TIME_SERVER ? 1000 : 3600 * 1000;
    if (r->o.breaker_failures == 0) r->o.breaker_failures = 5;
    if (r->o.breaker_open_ns <= 0) r->o.breaker_open_ns = 200 * SLUICE_NS_PER_MS;
    if (r->o.backoff_min_ns <= 0) r->o.backoff_min_ns = 20 * SLUICE_NS_PER_MS;
    if (r->o.backoff_max_ns <= 0) r->o.backoff_max_ns = 320 * SLUICE_NS_PER_MS;
    if (r->o.max_pending == 0) r->o.max_pending = 1024;
    if (r->o.cache_max_ns <= 0) r->o.cache_max_ns = SLUICE_NS_PER_S;
    unsigned cs = r->o.cache_slots ? r->o.cache_slots : 4096;
    r->o.secret = NULL; /* not kept: only the derived key */
    r->sk = sl_redis_secret_key(o->secret, o->secret_len);
    r->script = sl_redis_script(&r->script_len);
    r->sha = sl_redis_script_sha();
    if (r->script == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    r->npool = r->o.max_pending;
    r->pool = calloc(r->npool, sizeof(rq));
    if (r->pool == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    for (unsigned i = r->npool; i-- > 0;) {
        r->pool[i].next_free = r->free;
        r->free = &r->pool[i];
    }
    if (r->o.envoy_keys) { /* envoy compat key arenas: one per pooled request + scratch */
        r->xk_all = malloc((size_t)(r->npool + 1) * XKEY_ARENA);
        if (r->xk_all == NULL) {
            e = SLUICE_ENOMEM;
            goto fail;
        }
        for (unsigned i = 0; i < r->npool; i++) r->pool[i].xk = r->xk_all + (size_t)i * XKEY_ARENA;
        r->scratch.xk = r->xk_all + (size_t)r->npool * XKEY_ARENA;
        r->jitter_rng = (uint64_t)mono_now() * 0x9e3779b97f4a7c15ull | 1;
    }
    if (cs > 1) {
        if (cs & (cs - 1)) {
            e = SLUICE_EINVAL;
            goto fail;
        }
        r->cache = calloc(cs, sizeof(cache_ent));
        if (r->cache == NULL) {
            e = SLUICE_ENOMEM;
            goto fail;
        }
        r->cache_mask = cs - 1;
    }
    if (r->o.lease_ns <= 0) r->o.lease_ns = 100 * SLUICE_NS_PER_MS;
    r->leases = calloc(LEASE_SLOTS, sizeof(lease_ent)); /* policies may lease on their own */
    if (r->leases == NULL) {
        e = SLUICE_ENOMEM;
        goto fail;
    }
    memset(r->slotmap, 0xFF, sizeof(r->slotmap));
    sl_dlist_init(&r->deadlines, 0, r->o.timeout_ns);
    sl_dlist_init(&r->orphans, 1, ORPHAN_NS);
    r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (r->tfd < 0) {
        e = SLUICE_EIO;
        goto fail;
    }
    r->tio = (sl_io){r->tfd, on_timer, r};
    if (sl_loop_add(loop, &r->tio, EPOLLIN) != 0) {
        e = SLUICE_EIO;
        goto fail;
    }
    /* seeds: "h:p,h:p" */
    char buf[sizeof(r->o.seeds)];
    snprintf(buf, sizeof(buf), "%s", r->o.seeds);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *c = strrchr(tok, ':');
        if (c == NULL || c == tok) {
            e = SLUICE_EINVAL;
            goto fail;
        }
        *c = '\0';
        int port = atoi(c + 1);
        if (port <= 0 || port > 65535) {
            e = SLUICE_EINVAL;
            goto fail;
        }
        node_find(r, tok, port, true);
        if (!r->o.cluster) break;
    }
    if (r->nnodes == 0) {
        e = SLUICE_EINVAL;
        goto fail;
    }
    return r;
fail:
    if (err) *err = e;
    sl_redis_destroy(r);
    return NULL;
}

void sl_redis_destroy(sl_redis *r) {
    if (r == NULL) return;
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (nd->ac != NULL) {
            redisAsyncContext *ac = nd->ac;
            ac->data = NULL;
            redisAsyncFree(ac); /* pending callbacks run with NULL and are ignored */
            nd->ac = NULL;
        }
    }
    /* decisions still in flight are answered (failed) so their owners can clean up */
    for (unsigned i = 0; r->pool && i < r->npool; i++) {
        rq *q = &r->pool[i];
        if (!q->busy) continue;
        q->failed = true;
        q->ngroups = 0;
        sl_redis_cb cb = q->cb;
        q->cb = NULL;
        if (cb) cb(q->ud, SLUICE_ESTORE, NULL);
        if (q->held)
            for (int k = 0; k < q->n; k++) sl_limiter_unref(q->it[k].lim);
        q->held = false;
        q->busy = false;
    }
    /* slices held: their units stay taken until their window ends (nothing to give them
     * back with); the references go */
    for (unsigned i = 0; r->leases != NULL && i < LEASE_SLOTS; i++)
        if (r->leases[i].lim != NULL) sl_limiter_unref(r->leases[i].lim);
    if (r->tfd >= 0) {
        sl_loop_del(r->loop, &r->tio);
        close(r->tfd);
    }
    free(r->cache);
    free(r->leases);
    free(r->pool);
    free(r->xk_all);
    free(r);
}

const sl_redis_stats *sl_redis_stats_get(const sl_redis *r) { return &r->st; }

bool sl_redis_ready(const sl_redis *r) {
    return atomic_load_explicit(&((sl_redis *)r)->ready, memory_order_relaxed);
}

/* Writes what this loop turn queued on every connected node now, instead of in the
 * next turn's EPOLLOUT: one write per node per turn, and the round trip starts before
 * the loop sleeps. EPOLLOUT stays armed by hiredis until its buffer is empty, so a
 * caller that never flushes still gets its commands sent (one turn later). */
void sl_redis_flush(sl_redis *r) {
    for (int i = 0; i < r->nnodes; i++) {
        sl_redis_node *nd = &r->nodes[i];
        if (!nd->unsent) continue;
        nd->unsent = false;
        if (nd->ac != NULL && nd->state == 2) redisAsyncHandleWrite(nd->ac);
    }
}

/* A decision certain to be rejected, answered without Redis: an enforced item's cost
 * above its capacity, or an enforced item still inside the retry time of an earlier
 * rejection of at most this cost (trusted for at most cache_max_ns). `b` holds the items
 * as build() prepared them. Trade-off: a rejection answered here charges no
 * count_rejected window (a fixed window or quota already over its limit stays so until
 * it ends: what a client is told does not change). */
static bool answer_locally(sl_redis *r, const rq *b, sluice_time now, sl_sresult *d) {
    int hit = -1;
    int64_t retry = 0, reset = 0;
    if (r->cache == NULL) return false;
    for (int i = 0; i < b->n && hit < 0; i++) {
        const rq_item *it = &b->it[i];
        if (it->sgroup != 0) continue;
        uint64_t cap = it->limit != 0 ? it->limit : sluice_limiter_capacity(it->lim);
        if ((uint64_t)it->cost > cap) {
            hit = i, retry = SLUICE_NEVER, reset = 0;
            inc(&r->st.never_rejects);
            break;
        }
        if (!cacheable(it->lim->spec.algo) || it->limit != 0) continue;
        cache_ent *e = cache_get(r, fp_of(it));
        if (e != NULL && now.mono_ns < e->trust && (uint64_t)it->cost >= e->min_cost && it->cost > 0) {
            hit = i, retry = e->until - now.mono_ns;
            reset = e->reset_at > now.mono_ns ? e->reset_at - now.mono_ns : 0;
            inc(&r->st.local_rejects);
        }
    }
    if (hit < 0) return false;
    /* Only the rejecting item is known; the others are reported at their capacity
     * (their state was not read: nothing was consumed anywhere). */
    d->n = b->n;
    d->allowed = 0;
    d->groups_ok = 0;
    for (int i = 0; i < b->n; i++) {
        sluice_result *o = &d->r[i];
        memset(o, 0, sizeof(*o));
        o->limit = b->it[i].limit != 0 ? b->it[i].limit : sluice_limiter_capacity(b->it[i].lim);
        o->allowed = i != hit;
        o->remaining = i != hit ? o->limit : 0;
    }
    d->r[hit].retry_after_ns = retry;
    d->r[hit].reset_after_ns = reset;
    return true;
}

/* A pooled request for a call of `op` that may go to Redis now, or NULL when it may not
 * (the breaker is open, or max_pending calls are in flight): then the callback has
 * already been told (SLUICE_ESTORE) and the degraded call counted. */
static rq *rq_start(sl_redis *r, char op, sl_redis_cb cb, void *ud) {
    if (!breaker_allows(r)) {
        inc(&r->st.breaker_open);
        if (cb) cb(ud, SLUICE_ESTORE, NULL);
        return NULL;
    }
    rq *q = rq_get(r);
    if (q == NULL) {
        inc(&r->st.pool_full);
        if (cb) cb(ud, SLUICE_ESTORE, NULL);
        return NULL;
    }
    q->op = op;
    q->cb = cb;
    q->ud = ud;
    return q;
}

/* Copies what build() prepared in the scratch request into a pooled one. */
static void rq_take_built(rq *q, const rq *b) {
    q->n = b->n;
    q->ngroups = b->ngroups;
    q->now = b->now;
    q->flags = b->flags;
    q->res.n = b->res.n;
    q->res.allowed = b->res.allowed;
    q->res.groups_ok = 0;
    memcpy(q->it, b->it, b->n * sizeof(b->it[0]));
    memcpy(q->g, b->g, b->ngroups * sizeof(b->g[0]));
    q->xk_used = b->xk_used;
    if (b->xk_used > 0) memcpy(q->xk, b->xk, b->xk_used);
    rq_hold(q);
}

static int submit(sl_redis *r, char op, const sl_sitem *items, size_t n, unsigned flags,
                  sluice_time now, sl_redis_cb cb, void *ud, uint64_t lease) {
    if (r == NULL || (items == NULL && n > 0)) return SLUICE_EINVAL;
    if (n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    /* the items are prepared once (keys hashed, parameters, slots), in the scratch
     * request, so that a local answer needs no pooled request */
    rq *b = &r->scratch;
    int rc = build(r, b, items, n, flags, now);
    if (rc != SLUICE_OK) return rc;
    if (op == 'd') {
        inc(&r->st.decisions);
        static __thread sl_sresult local;
        if (answer_locally(r, b, now, &local)) {
            if (cb) cb(ud, SLUICE_OK, &local);
            return SLUICE_OK;
        }
    }
    rq *q = rq_start(r, op, cb, ud);
    if (q == NULL) return SLUICE_OK;
    rq_take_built(q, b);
    if (op == 'd' && lease_plan(r, q)) {
        /* every item spent from a held slice: admitted here, no round trip */
        lease_settle(r, q, true);
        sl_sresult *d = &r->lease_scratch;
        memcpy(d->r, q->res.r, n * sizeof(d->r[0]));
        d->n = n;
        d->allowed = 1;
        d->groups_ok = 0;
        rq_put(r, q);
        if (cb) cb(ud, SLUICE_OK, d);
        return SLUICE_OK;
    }
    if (op == 'l') {
        /* release: cost = the lease's bucket number (mod 2^40), p[3] = its slots */
        q->it[0].cost = (int64_t)(lease >> 24);
        q->it[0].p[3] = (int64_t)(lease & 0xFFFFFF);
    }
    if (n == 0) {
        q->pending = 0;
        finish(r, q, SLUICE_OK);
        return SLUICE_OK;
    }
    launch(r, q);
    return SLUICE_OK;
}

int sl_redis_decide(sl_redis *r, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                    sl_redis_cb cb, void *ud) {
    return submit(r, 'd', items, n, flags, now, cb, ud, 0);
}

int sl_redis_settle(sl_redis *r, const sl_sitem *item, int64_t delta, sluice_time now,
                    sl_redis_cb cb, void *ud) {
    if (delta > EXACT_COST_MAX || delta < -EXACT_COST_MAX) return SLUICE_ERANGE;
    if (r == NULL || item == NULL || item->lim == NULL) return SLUICE_EINVAL;
    sl_sitem it = *item;
    it.cost = 0; /* build() takes costs from items; the signed delta is patched in after */
    it.limit = 0;
    rq *q = rq_start(r, 's', cb, ud);
    if (q == NULL) return SLUICE_OK;
    int rc = build(r, q, &it, 1, 0, now);
    if (rc != SLUICE_OK) {
        rq_put(r, q);
        return rc;
    }
    rq_hold(q);
    q->it[0].cost = delta;
    launch(r, q);
    return SLUICE_OK;
}

int sl_redis_reset(sl_redis *r, const sl_sitem *items, size_t n, sluice_time now, sl_redis_cb cb,
                   void *ud) {
    if (r == NULL || n > SLUICE_MAX_ITEMS || (items == NULL && n > 0)) return SLUICE_EINVAL;
    atomic_fetch_add_explicit(&g_cache_epoch, 1, memory_order_relaxed);
    /* this client's slices of those keys are dropped, not given back (nothing to give
     * back to: the state is gone) */
    for (size_t i = 0; i < n; i++) {
        if (items[i].lim == NULL) return SLUICE_EINVAL;
        rq_item it;
        it.lim = items[i].lim;
        it.klen = (uint8_t)sl_redis_key(&r->sk, it.lim, items[i].key ? items[i].key : "", items[i].key_len,
                                        it.key);
        lease_ent *e = &r->leases[fp_of(&it) & (LEASE_SLOTS - 1)];
        if (e->fp == fp_of(&it) && e->lim == it.lim) {
            held_add(r, -(int64_t)e->left);
            sl_limiter_unref(e->lim);
            e->left = 0, e->fp = 0, e->lim = NULL;
        }
    }
    sl_sitem zero[SLUICE_MAX_ITEMS];
    for (size_t i = 0; i < n; i++) zero[i] = (sl_sitem){.lim = items[i].lim, .key = items[i].key,
                                                        .key_len = items[i].key_len};
    return submit(r, 'x', zero, n, 0, now, cb, ud, 0);
}

int sl_redis_claim(sl_redis *r, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now, sl_redis_cb cb,
                   void *ud) {
    if (r == NULL || id == 0 || ttl_ns <= 0) return SLUICE_EINVAL;
    rq *q = rq_start(r, 'c', cb, ud);
    if (q == NULL) return SLUICE_OK;
    q->n = 1;
    q->now = now;
    q->flags = 0;
    q->res.n = 1;
    q->res.allowed = 0;
    rq_item *it = &q->it[0];
    memset(it, 0, sizeof(*it));
    /* "sl:{t<id>}:<op>": its own slot; the hash tag keeps the name cluster-safe */
    static const char hex[16] = "0123456789abcdef";
    char *p = it->key;
    memcpy(p, "sl:{t", 5), p += 5;
    for (int i = 60; i >= 0; i -= 4) *p++ = hex[(id >> i) & 0xF];
    memcpy(p, "}:", 2), p += 2;
    p = sl_redis_put_u64(p, op);
    it->klen = (uint8_t)(p - it->key);
    it->slot = (uint16_t)sl_redis_keyslot(it->key, it->klen);
    int64_t ms = (ttl_ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS;
    it->cost = ms > EXACT_COST_MAX ? EXACT_COST_MAX : ms;
    it->want = it->cost;
    regroup(r, q);
    launch(r, q);
    return SLUICE_OK;
}

int sl_redis_release(sl_redis *r, const sl_sitem *item, uint64_t lease, sluice_time now,
                     sl_redis_cb cb, void *ud) {
    if (item == NULL || item->lim == NULL || item->lim->spec.algo != SLUICE_CONCURRENCY) return SLUICE_EINVAL;
    sl_sitem it = {.lim = item->lim, .key = item->key, .key_len = item->key_len};
    return submit(r, 'l', &it, 1, 0, now, cb, ud, lease);
}

typedef struct sync_wait {
    bool done;
    int rc;
    sluice_decision *out;
} sync_wait;

static void sync_cb(void *ud, int rc, const sl_sresult *d) {
    sync_wait *w = ud;
    w->done = true;
    w->rc = rc;
    if (d != NULL && w->out != NULL) {
        w->out->n = d->n;
        w->out->allowed = d->allowed;
        memcpy(w->out->results, d->r, d->n * sizeof(d->r[0]));
        w->out->deciding = d->n ? sl_decision_deciding(w->out) : -1;
    }
}

int sl_redis_decide_sync(sl_redis *r, const sluice_item *items, size_t n, sluice_time now,
                         sluice_decision *out) {
    sl_redis_args a = {.op = 'd', .items = items, .n = n};
    return sl_redis_wait(r, sl_redis_issue, &a, now, out);
}

int sl_redis_issue(sl_redis *r, const void *args, sluice_time now, sl_redis_cb cb, void *ud) {
    const sl_redis_args *a = args;
    sl_sitem si[SLUICE_MAX_ITEMS];
    if (a->n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    for (size_t i = 0; i < a->n; i++)
        si[i] = (sl_sitem){.lim = a->items[i].limiter, .key = a->items[i].key,
                           .key_len = a->items[i].key_len, .cost = a->items[i].cost};
    switch (a->op) {
    case 'd': return sl_redis_decide(r, si, a->n, 0, now, cb, ud);
    case 'x': return sl_redis_reset(r, si, a->n, now, cb, ud);
    case 'c': return sl_redis_claim(r, a->id, a->bit, a->ttl_ns, now, cb, ud);
    default: return SLUICE_EINVAL;
    }
}

int sl_redis_wait(sl_redis *r, sl_redis_issue_fn issue, const void *arg, sluice_time now,
                  sluice_decision *out) {
    sync_wait w = {false, SLUICE_OK, out};
    int rc = issue(r, arg, now, sync_cb, &w);
    if (rc != SLUICE_OK) return rc;
    sl_redis_flush(r);
    int64_t until = mono_now() + 2 * r->o.timeout_ns + 50 * SLUICE_NS_PER_MS;
    while (!w.done && mono_now() < until) sl_loop_poll(r->loop, 1);
    return w.done ? w.rc : SLUICE_ESTORE;
}

void sl_redis_run(sl_redis *r, int ms) {
    int64_t until = mono_now() + (int64_t)ms * SLUICE_NS_PER_MS;
    while (mono_now() < until) sl_loop_poll(r->loop, 2);
}
