/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client_int.h -- what the Redis client's files share (client.c: creation, the timer, the
 * breakers, the public calls; node.c: connections, sentinel, topology; request.c: a
 * decision from items to EVALSHA to answer, the over-limit cache, refunds and late
 * replies; lease.c: leasing). Internal to src/redis.
 */
#ifndef SL_REDIS_CLIENT_INT_H
#define SL_REDIS_CLIENT_INT_H

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
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
#include "store/redis/conn.h"
#include "store/redis/redis.h"
#include "store/redis/sentinel.h"
#include "store/decision.h"
#include "store/group.h"

#define MAX_NODES 64
#define MAX_REDIRECTS 5
/* TRYAGAIN / CLUSTERDOWN (a slot migrating, a failover in the cluster): the call goes
 * again after 1, 2, 4, 8, 16, 32 ms... while the decision's deadline allows, then fails
 * as an error without counting toward the breaker (Redis answered; the cluster is busy). */
#define MAX_RETRIES 10
#define RETRY_MIN_NS (1 * SLUICE_NS_PER_MS)
#define RETRY_SLOTS 256
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
#define CMD_MAX (8 + CMD_ARGS * (SL_REDIS_KEY_MAX + 8) + SLUICE_MAX_ITEMS * SL_REDIS_X_MAX + XKEY_ARENA)
/* envoy compat keys (SL_REDIS_ENVOY_TAG) are longer than a hash: one request's live in
 * its own arena (allocated with the pool only when opts.envoy_keys): a verdict's keys
 * (4096 bytes) plus a prefix and a window per item. */
#define XKEY_ARENA (4096 + SLUICE_MAX_ITEMS * (128 + 24))

typedef struct sl_redis_node sl_redis_node;

struct sl_redis_node {
    sl_redis *r;
    int idx;
    char host[SL_REDIS_HOST_MAX]; /* "" with a sentinel until the primary is known */
    int port;
    sl_rconn *c;           /* NULL when down */
    int state;            /* 0 down, 1 connecting, 2 up */
    int64_t retry_at;     /* down: next connection attempt (local monotonic ns) */
    int64_t connect_by;   /* connecting: give up then */
    int64_t backoff;
    unsigned attempt;     /* connection attempts (rotates over a name's addresses) */
    bool logged;          /* its last error was logged (its recovery will be too) */
    /* breaker, one per node: after breaker_failures consecutive failures (errors,
     * timeouts) decisions routed here are refused at once for breaker_open_ns, then one
     * probe goes through (half-open). A dead cluster master opens its own breaker only:
     * the other slots keep being decided. */
    unsigned fails;
    int64_t open_until; /* refusing until then (0 = closed) */
    bool half_open;
    /* health, written by the owner thread under r->hmu, read by anyone under it */
    bool open_pub;        /* the breaker is open (for sl_redis_health) */
    char err[200];
    uint64_t auth_failures, tls_failures;
    /* decisions on this connection go as FCALL of the function library (node.c), else
     * as EVALSHA of the same code (Redis 6, FUNCTION renamed away or forbidden) */
    bool fcall;
    bool fn_ok; /* the last FUNCTION LOAD on this connection succeeded */
};

typedef struct retry_ent {
    struct rq *q;
    uint32_t gen;
    uint8_t g;
    int64_t at;
} retry_ent;

typedef struct rq_item {
    const sluice_limiter *lim;
    int64_t cost;
    uint64_t limit;      /* a limit override (fixed windows), 0 = the limiter's */
    bool par;            /* a per-key override's numbers (sl_sitem.params) replace the limiter's */
    uint32_t par_qp;
    uint64_t par_limit, par_capacity;
    int64_t par_period, par_delay, par_lease, par_emission;
    uint8_t sgroup;      /* store group: 0 enforced, g > 0 shadow group g */
    uint8_t sflags;      /* SL_SI_* */
    sl_redis_capx cx;    /* capacity protection (its x argument) */
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
    bool fcall; /* last sent as FCALL (else EVALSHA) */
    int8_t node; /* the node it was last handed to (-1: none): its breaker hears the outcome */
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
    bool refused; /* a group was refused at once (breaker open, node down): counted once */
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
    int64_t since;    /* caller monotonic ns when cached: an answer asked for earlier is
                         a clock that went back (the caller's "monotonic" time is its
                         wall clock in time: local), and the entry is not trusted */
    uint64_t min_cost;
    uint64_t limit;
    uint32_t rgen;    /* the refund generation of its slot when cached (request.c) */
} cache_ent;

static inline void rq_hold(rq *q) {
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
    const char *lib; /* the same code as a function library, and its function's name */
    size_t lib_len;
    const char *fname;
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
    sl_sresult group_scratch; /* decode_decide: a call's answer as the group rules give it */
    rq scratch; /* submit(): the items being prepared (not in the pool) */
    /* sliding-log scratch (decode_group): states as stored; states decided plus a peek */
    _Alignas(8) unsigned char big[2][BIG_ARENA + BIG_ARENA / 2];
    char cmd[CMD_MAX]; /* one EVALSHA being formatted (sl__redis_send_group) */
    uint64_t jitter_rng; /* envoy compat: expiry jitter (xorshift64) */
    char *xk_all;        /* the pool's and the scratch's envoy key arenas, one allocation */
    sl_redis_stats st;
    _Atomic bool ready; /* every node up and its breaker closed (read by other threads) */
    char last_error[128];
    sl_rconn_tls *tls;        /* TLS context shared by the nodes (NULL: plain) */
    sl_sentinel *sen;        /* with sentinels: finds node 0's address */
    pthread_mutex_t hmu;     /* node addresses, states and errors for sl_redis_health */
    _Atomic int nnodes_pub;  /* nodes visible to sl_redis_health */
    retry_ent retries[RETRY_SLOTS]; /* groups waiting to be sent again (TRYAGAIN...) */
    unsigned nretries;
    bool switching;          /* node 0 is being moved to the primary the sentinel named */
    /* on_store_error: local (local.c) */
    sluice_time last_now;    /* the caller's time of its latest decision (reconciliation) */
    int64_t hb_next, hb_sent; /* heartbeats (the owner client only): next due, last sent */
    bool hb_inflight;
    unsigned rec_tick;       /* answers while local admissions wait to be written */
};

static inline void update_ready(sl_redis *r) {
    bool ok = r->nnodes > 0;
    for (int i = 0; i < r->nnodes && ok; i++)
        if (r->nodes[i].state != 2 || r->nodes[i].open_until != 0) ok = false;
    atomic_store_explicit(&r->ready, ok, memory_order_relaxed);
}

static inline void add(_Atomic uint64_t *c, uint64_t v) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}

static inline void inc(_Atomic uint64_t *c) { add(c, 1); }

static inline int64_t mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_S + ts.tv_nsec;
}

/* ---- shared between the client's files --------------------------------------------- */

/* client.c */
void sl__redis_arm(sl_redis *r, int64_t at);
bool sl__redis_breaker_allows(sl_redis *r, sl_redis_node *nd);
void sl__redis_note_ok(sl_redis *r, sl_redis_node *nd);
void sl__redis_note_fail(sl_redis *r, sl_redis_node *nd);
void sl__redis_group_outcome(sl_redis *r, const rq_group *gr, bool ok);
/* node.c */
void sl__redis_node_connect(sl_redis_node *nd);
int sl__redis_node_find(sl_redis *r, const char *host, int port, bool create);
void sl__redis_queue_script_load(sl_redis_node *nd);
void sl__redis_queue_function_load(sl_redis_node *nd);
void sl__redis_refresh_topology(sl_redis *r, bool force);
void sl__redis_on_primary(void *ud, const char *host, int port);
/* request.c */
void sl__redis_finish(sl_redis *r, rq *q, int rc);
uint64_t sl__redis_fp_of(const rq_item *it);
void sl__redis_group_fail(sl_redis *r, rq *q, int g);
void sl__redis_launch(sl_redis *r, rq *q);
void sl__redis_regroup(const sl_redis *r, rq *q);
sl_redis_node *sl__redis_route(sl_redis *r, unsigned slot);
rq *sl__redis_rq_get(sl_redis *r);
void sl__redis_rq_put(sl_redis *r, rq *q);
bool sl__redis_send_group(sl_redis *r, rq *q, int g, sl_redis_node *nd, bool asking);
void sl__redis_send_refunds(sl_redis *r, rq *q);
/* local.c */
void sl__redis_local_count(sl_redis *r, const rq *b);
void sl__redis_local_seen(sl_redis *r, const rq *q);
bool sl__redis_local_decide(sl_redis *r, rq *q, sl_sresult *out);
int64_t sl__redis_local_tick(sl_redis *r, int64_t t);
void sl__redis_local_forget(sl_redis *r);
/* lease.c */
void sl__redis_held_add(sl_redis *r, int64_t units);
bool sl__redis_lease_plan(sl_redis *r, rq *q);
void sl__redis_lease_sweep(sl_redis *r, int64_t t);
void sl__redis_lease_settle(sl_redis *r, rq *q, bool admitted);
bool sl__redis_lease_retry(sl_redis *r, rq *q);
void sl__redis_taking_done(sl_redis *r, const rq_item *it);

#endif
