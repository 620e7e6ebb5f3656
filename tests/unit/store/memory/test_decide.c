/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_decide.c -- decisions over the memory store: no lost updates under threads,
 * all-or-nothing across limits in different shards, peeks, repeats, settle, release,
 * errors, the deciding item, and agreement with a slow reference model (pure algorithm
 * calls over a plain array) over random multi-limit traffic. Fake time only.
 */
#include <pthread.h>

#include "t.h"

#include "store/memory/memory.h"

static sluice_limiter *mk(sluice_algo algo, const char *name, uint32_t index, uint64_t limit,
                          int64_t period_ns, uint64_t burst) {
    sluice_limit_spec s;
    memset(&s, 0, sizeof(s));
    s.algo = algo;
    s.name = name;
    s.index = index;
    s.limit = limit;
    s.period_ns = period_ns;
    s.burst = burst;
    if (algo == SLUICE_CONCURRENCY) s.lease_ns = 30 * SLUICE_NS_PER_S;
    if (algo == SLUICE_LEAKY_BUCKET) s.max_delay_ns = SLUICE_NS_PER_S;
    if (algo == SLUICE_QUOTA) s.quota_period = SLUICE_PERIOD_DAY;
    int err = 0;
    char eb[200] = "";
    sluice_limiter *l = sluice_limiter_create(&s, &err, eb, sizeof(eb));
    if (l == NULL) T_FAIL("limiter %s: %d %s", name, err, eb);
    return l;
}

static sluice_store *mkstore(uint64_t max_keys, unsigned shards, sluice_on_full mode) {
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = max_keys;
    o.shards = shards;
    o.on_full = mode;
    int err = -100;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    T_EQ_I(err, SLUICE_OK);
    return st;
}

static const sluice_time T0 = {1000 * SLUICE_NS_PER_S, INT64_C(1764633600) * SLUICE_NS_PER_S};

static sluice_time at(int64_t dt_ns) {
    sluice_time t = T0;
    t.mono_ns += dt_ns;
    t.wall_ns += dt_ns;
    return t;
}

static int decide1(sluice_store *st, const sluice_limiter *l, const char *key, uint64_t cost,
                   sluice_time now, sluice_result *r) {
    sluice_item it = {l, key, strlen(key), cost};
    sluice_decision d;
    int rc = sluice_decide(st, &it, 1, now, &d);
    if (rc == SLUICE_OK && r != NULL) *r = d.results[0];
    return rc == SLUICE_OK ? d.allowed : rc;
}

static uint64_t remaining(sluice_store *st, const sluice_limiter *l, const char *key,
                          sluice_time now) {
    sluice_result r;
    memset(&r, 0, sizeof(r));
    T_CHECK(decide1(st, l, key, 0, now, &r) >= 0);
    return r.remaining;
}

/* ---- threads ---------------------------------------------------------------------- */

typedef struct hammer {
    sluice_store *st;
    const sluice_limiter *l;
    const char *key;
    int attempts;
    int admitted;
} hammer;

static void *hammer_run(void *arg) {
    hammer *h = arg;
    for (int i = 0; i < h->attempts; i++)
        if (decide1(h->st, h->l, h->key, 1, at(0), NULL) == 1) h->admitted++;
    return NULL;
}

/* 4 threads, one key, a fixed window of 1000: exactly 1000 of 40000 admitted (a lost
 * update would admit more); the same for GCRA with burst 1000. */
static void test_threads_one_key(void) {
    sluice_algo algos[2] = {SLUICE_FIXED_WINDOW, SLUICE_GCRA};
    for (int a = 0; a < 2; a++) {
        sluice_store *st = mkstore(0, 0, SLUICE_EVICT_LRU);
        sluice_limiter *l = mk(algos[a], "hot", 0, 1000, 3600 * SLUICE_NS_PER_S, 1000);
        T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
        hammer h[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            h[i] = (hammer){st, l, "user:1", 10000, 0};
            pthread_create(&th[i], NULL, hammer_run, &h[i]);
        }
        int total = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            total += h[i].admitted;
        }
        T_EQ_I(total, 1000);
        T_EQ_U(remaining(st, l, "user:1", at(0)), 0);
        sluice_store_destroy(st);
        sluice_limiter_destroy(l);
    }
}

/* Two-limit decisions in both orders from several threads over keys in many shards:
 * no deadlock (address-ordered locking) and each limit admits exactly its capacity. */
typedef struct pair_arg {
    sluice_store *st;
    const sluice_limiter *a, *b;
    int reversed;
    int admitted;
} pair_arg;

static void *pair_run(void *arg) {
    pair_arg *p = arg;
    char ka[32], kb[32];
    for (int i = 0; i < 20000; i++) {
        int k = i % 64;
        snprintf(ka, sizeof(ka), "a%d", k);
        snprintf(kb, sizeof(kb), "b%d", (k * 7) % 64);
        sluice_item it[2] = {{p->a, ka, strlen(ka), 1}, {p->b, kb, strlen(kb), 1}};
        if (p->reversed) {
            sluice_item t = it[0];
            it[0] = it[1];
            it[1] = t;
        }
        sluice_decision d;
        if (sluice_decide(p->st, it, 2, at(0), &d) == SLUICE_OK && d.allowed) p->admitted++;
    }
    return NULL;
}

static void test_threads_two_limits(void) {
    sluice_store *st = mkstore(0, 16, SLUICE_EVICT_LRU);
    sluice_limiter *a = mk(SLUICE_FIXED_WINDOW, "pa", 0, 50, 3600 * SLUICE_NS_PER_S, 0);
    sluice_limiter *b = mk(SLUICE_FIXED_WINDOW, "pb", 0, 50, 3600 * SLUICE_NS_PER_S, 0);
    sluice_store_register(st, a);
    sluice_store_register(st, b);
    pair_arg p[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        p[i] = (pair_arg){st, a, b, i & 1, 0};
        pthread_create(&th[i], NULL, pair_run, &p[i]);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        total += p[i].admitted;
    }
    /* key ai is paired only with b(7i mod 64), a bijection: each pair admits 50 */
    T_EQ_I(total, 64 * 50);
    sluice_store_destroy(st);
    sluice_limiter_destroy(a);
    sluice_limiter_destroy(b);
}

/* ---- all-or-nothing ------------------------------------------------------------------ */

/* Finds a key of `l` whose shard differs from `avoid`'s shard. */
static void key_in_other_shard(sluice_store *st, const sluice_limiter *l, uint32_t avoid,
                               char *out, size_t n, uint32_t *shard) {
    sl_family *f = sl_store_family_of(st, l);
    for (int i = 0;; i++) {
        snprintf(out, n, "k%d", i);
        sl_hash128 h = sl_family_hash(f, out, strlen(out));
        sl_loc loc;
        sl_table_locate(sl_family_cur(f)->table, h, f->id, &loc);
        uint32_t s = (uint32_t)(loc.sh - loc.t->shards);
        if (s != avoid) {
            *shard = s;
            return;
        }
    }
}

static void test_all_or_nothing(void) {
    sluice_store *st = mkstore(0, 64, SLUICE_EVICT_LRU);
    sluice_limiter *user = mk(SLUICE_TOKEN_BUCKET, "user", 0, 10, SLUICE_NS_PER_S, 3);
    sluice_limiter *tenant = mk(SLUICE_GCRA, "tenant", 0, 100, SLUICE_NS_PER_S, 100);
    sluice_limiter *global = mk(SLUICE_FIXED_WINDOW, "global", 0, 1000, SLUICE_NS_PER_S, 0);
    sluice_store_register(st, user);
    sluice_store_register(st, tenant);
    sluice_store_register(st, global);
    char ku[16], kt[16], kg[16];
    uint32_t su, stn, sg;
    key_in_other_shard(st, user, UINT32_MAX, ku, sizeof(ku), &su);
    key_in_other_shard(st, tenant, su, kt, sizeof(kt), &stn);
    key_in_other_shard(st, global, stn, kg, sizeof(kg), &sg);
    T_CHECK(su != stn && stn != sg);
    sluice_item it[3] = {{user, ku, strlen(ku), 1}, {tenant, kt, strlen(kt), 1},
                         {global, kg, strlen(kg), 1}};
    sluice_decision d;
    for (int i = 0; i < 3; i++) {
        T_EQ_I(sluice_decide(st, it, 3, at(0), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 1);
    }
    /* the user's burst of 3 is spent: the 4th is rejected by it alone */
    for (int i = 0; i < 5; i++) {
        T_EQ_I(sluice_decide(st, it, 3, at(0), &d), SLUICE_OK);
        T_EQ_I(d.allowed, 0);
        T_EQ_I(d.deciding, 0);
        T_EQ_I(d.results[0].allowed, 0);
        T_EQ_I(d.results[1].allowed, 1); /* would have admitted, but nothing consumed: */
        T_EQ_I(d.results[0].retry_after_ns, SLUICE_NS_PER_S / 10);
    }
    T_EQ_U(remaining(st, tenant, kt, at(0)), 97);
    T_EQ_U(remaining(st, global, kg, at(0)), 997);
    T_EQ_U(remaining(st, user, ku, at(0)), 0);
    sluice_store_destroy(st);
    sluice_limiter_destroy(user);
    sluice_limiter_destroy(tenant);
    sluice_limiter_destroy(global);
}

/* On admission the deciding item is the one with the least remaining share; on
 * rejection the one with the longest retry-after. */
static void test_deciding(void) {
    sluice_store *st = mkstore(0, 0, SLUICE_EVICT_LRU);
    sluice_limiter *a = mk(SLUICE_FIXED_WINDOW, "da", 0, 100, 10 * SLUICE_NS_PER_S, 0);
    sluice_limiter *b = mk(SLUICE_FIXED_WINDOW, "db", 0, 10, 60 * SLUICE_NS_PER_S, 0);
    sluice_store_register(st, a);
    sluice_store_register(st, b);
    sluice_item it[2] = {{a, "x", 1, 20}, {b, "x", 1, 1}};
    sluice_decision d;
    T_EQ_I(sluice_decide(st, it, 2, at(0), &d), SLUICE_OK);
    /* a: 80/100, b: 9/10 -> a is closer to exhaustion */
    T_EQ_I(d.allowed, 1);
    T_EQ_I(d.deciding, 0);
    it[0].cost = 100; /* a rejects (retry within its 10 s window) */
    it[1].cost = 10;  /* b rejects too, retry at the end of its 60 s window */
    T_EQ_I(sluice_decide(st, it, 2, at(0), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 0);
    T_EQ_I(d.deciding, 1);
    T_CHECK(d.results[1].retry_after_ns > d.results[0].retry_after_ns);
    sluice_store_destroy(st);
    sluice_limiter_destroy(a);
    sluice_limiter_destroy(b);
}

/* A peek stores nothing (a new key stays absent) and reports the state; the same key
 * twice in one decision consumes twice. */
static void test_peek_and_repeat(void) {
    sluice_store *st = mkstore(0, 0, SLUICE_EVICT_LRU);
    sluice_limiter *l = mk(SLUICE_GCRA, "pk", 0, 10, SLUICE_NS_PER_S, 10);
    sluice_store_register(st, l);
    sluice_result r;
    T_EQ_I(decide1(st, l, "new", 0, at(0), &r), 1);
    T_EQ_U(r.remaining, 10);
    sluice_store_stats s;
    sluice_store_stats_get(st, &s);
    T_EQ_U(s.keys, 0);
    sluice_item it[3] = {{l, "k", 1, 2}, {l, "k", 1, 3}, {l, "other", 5, 1}};
    sluice_decision d;
    T_EQ_I(sluice_decide(st, it, 3, at(0), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 1);
    T_EQ_U(d.results[0].remaining, 8);
    T_EQ_U(d.results[1].remaining, 5);
    T_EQ_U(remaining(st, l, "k", at(0)), 5);
    sluice_store_stats_get(st, &s);
    T_EQ_U(s.keys, 2);
    /* 5 left: the pair 3+3 is refused as a whole, nothing consumed */
    it[0].cost = 3;
    it[1].cost = 3;
    T_EQ_I(sluice_decide(st, it, 2, at(0), &d), SLUICE_OK);
    T_EQ_I(d.allowed, 0);
    T_EQ_U(remaining(st, l, "k", at(0)), 5);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

static void test_settle_release_reset(void) {
    sluice_store *st = mkstore(0, 0, SLUICE_EVICT_LRU);
    sluice_limiter *tb = mk(SLUICE_TOKEN_BUCKET, "ai", 0, 1000, 3600 * SLUICE_NS_PER_S, 1000);
    sluice_limiter *cc = mk(SLUICE_CONCURRENCY, "inflight", 0, 2, 0, 0);
    sluice_store_register(st, tb);
    sluice_store_register(st, cc);
    sluice_result r;
    T_EQ_I(decide1(st, tb, "u", 100, at(0), &r), 1);
    T_EQ_U(r.remaining, 900);
    T_EQ_I(sluice_settle(st, tb, "u", 1, 100, 40, at(0), &r), SLUICE_OK);
    T_EQ_U(remaining(st, tb, "u", at(0)), 960);
    T_EQ_I(sluice_settle(st, tb, "u", 1, 10, 2000, at(0), &r), SLUICE_OK); /* charged past */
    T_EQ_U(remaining(st, tb, "u", at(0)), 0);
    /* a charge on a key without state is stored */
    T_EQ_I(sluice_settle(st, tb, "v", 1, 0, 300, at(0), &r), SLUICE_OK);
    T_EQ_U(remaining(st, tb, "v", at(0)), 700);
    T_EQ_I(sluice_reset(st, tb, "v", 1), SLUICE_OK);
    T_EQ_U(remaining(st, tb, "v", at(0)), 1000);

    sluice_result l1, l2, l3;
    T_EQ_I(decide1(st, cc, "t", 1, at(0), &l1), 1);
    T_EQ_I(decide1(st, cc, "t", 1, at(0), &l2), 1);
    T_EQ_I(decide1(st, cc, "t", 1, at(0), &l3), 0);
    T_CHECK(l1.lease != 0 && l2.lease != 0);
    T_EQ_I(sluice_release(st, cc, "t", 1, l1.lease, at(1)), SLUICE_OK);
    T_EQ_I(decide1(st, cc, "t", 1, at(2), &l3), 1);
    T_EQ_I(sluice_release(st, cc, "nobody", 6, l2.lease, at(3)), SLUICE_ENOTFOUND);
    sluice_store_destroy(st);
    sluice_limiter_destroy(tb);
    sluice_limiter_destroy(cc);
}

static void test_errors(void) {
    sluice_store *st = mkstore(0, 0, SLUICE_EVICT_LRU);
    sluice_limiter *l = mk(SLUICE_GCRA, "e", 0, 10, SLUICE_NS_PER_S, 10);
    sluice_limiter *unreg = mk(SLUICE_GCRA, "unregistered", 0, 10, SLUICE_NS_PER_S, 10);
    sluice_store_register(st, l);
    sluice_item it[SLUICE_MAX_ITEMS + 1];
    for (int i = 0; i <= SLUICE_MAX_ITEMS; i++) it[i] = (sluice_item){l, "k", 1, 1};
    sluice_decision d;
    T_EQ_I(sluice_decide(st, it, SLUICE_MAX_ITEMS + 1, at(0), &d), SLUICE_ETOOMANY);
    T_EQ_I(sluice_decide(NULL, it, 1, at(0), &d), SLUICE_EINVAL);
    T_EQ_I(sluice_decide(st, NULL, 1, at(0), &d), SLUICE_EINVAL);
    T_EQ_I(sluice_decide(st, it, 1, at(0), NULL), SLUICE_EINVAL);
    it[1].limiter = unreg;
    T_EQ_I(sluice_decide(st, it, 2, at(0), &d), SLUICE_EINVAL);
    T_EQ_U(remaining(st, l, "k", at(0)), 10); /* the failed call consumed nothing */
    it[1].limiter = NULL;
    T_EQ_I(sluice_decide(st, it, 2, at(0), &d), SLUICE_EINVAL);
    it[1] = (sluice_item){l, NULL, 3, 1};
    T_EQ_I(sluice_decide(st, it, 2, at(0), &d), SLUICE_EINVAL);
    T_EQ_I(sluice_settle(st, unreg, "k", 1, 1, 0, at(0), &d.results[0]), SLUICE_EINVAL);
    T_EQ_I(sluice_reset(st, unreg, "k", 1), SLUICE_EINVAL);
    T_EQ_I(sluice_store_register(st, NULL), SLUICE_EINVAL);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
    sluice_limiter_destroy(unreg);
}

/* ---- reference model -------------------------------------------------------------- */

#define MLIM 6
#define MKEYS 12

typedef union mstate {
    int64_t a;
    unsigned char b[sizeof(sl_log_state) + 8 * 16];
} mstate;

static mstate model_state[MLIM][MKEYS];
static bool model_has[MLIM][MKEYS];

/* The store must answer exactly like the algorithms applied to per-(limit, key) states
 * kept in a plain array, with all-or-nothing commits, over random multi-limit decisions
 * (repeats included) and random time steps. Pressure is out of the picture (room). */
static void test_against_model(void) {
    uint64_t seed = t_seed();
    sluice_store *st = mkstore(10000, 4, SLUICE_REFUSE_NEW);
    sluice_limiter *L[MLIM] = {
        mk(SLUICE_FIXED_WINDOW, "m-fixed", 0, 7, SLUICE_NS_PER_S, 0),
        mk(SLUICE_SLIDING_WINDOW, "m-sliding", 0, 9, SLUICE_NS_PER_S, 0),
        mk(SLUICE_SLIDING_LOG, "m-log", 0, 5, SLUICE_NS_PER_S, 0),
        mk(SLUICE_TOKEN_BUCKET, "m-tb", 0, 4, SLUICE_NS_PER_S, 6),
        mk(SLUICE_GCRA, "m-gcra", 0, 5, SLUICE_NS_PER_S, 3),
        mk(SLUICE_LEAKY_BUCKET, "m-leaky", 0, 10, SLUICE_NS_PER_S, 4),
    };
    for (int i = 0; i < MLIM; i++) T_EQ_I(sluice_store_register(st, L[i]), SLUICE_OK);
    memset(model_has, 0, sizeof(model_has));
    char keys[MKEYS][8];
    for (int k = 0; k < MKEYS; k++) snprintf(keys[k], sizeof(keys[k]), "key%d", k);
    int64_t t = 0;
    int mismatches = 0;
    for (int step = 0; step < 20000 && mismatches < 5; step++) {
        t += (int64_t)(t_rand(&seed) % (SLUICE_NS_PER_S / 5));
        sluice_time now = at(t);
        size_t n = 1 + t_rand(&seed) % 4;
        sluice_item it[4];
        int li[4], ki[4];
        for (size_t i = 0; i < n; i++) {
            li[i] = (int)(t_rand(&seed) % MLIM);
            ki[i] = (int)(t_rand(&seed) % MKEYS);
            it[i] = (sluice_item){L[li[i]], keys[ki[i]], strlen(keys[ki[i]]), t_rand(&seed) % 3};
        }
        /* model: decide each on the latest scratch of its (limit, key) */
        mstate scratch[4];
        const void *src[4];
        bool ch[4], all = true;
        sl_result mr[4];
        for (size_t i = 0; i < n; i++) {
            src[i] = model_has[li[i]][ki[i]] ? model_state[li[i]][ki[i]].b : NULL;
            for (size_t j = 0; j < i; j++)
                if (li[j] == li[i] && ki[j] == ki[i]) src[i] = ch[j] ? scratch[j].b : src[j];
            ch[i] = sl_algo_decide(&L[li[i]]->lim, src[i], scratch[i].b, now, it[i].cost, &mr[i]);
            ch[i] = ch[i] && it[i].cost > 0;
            if (!mr[i].allowed) all = false;
        }
        if (all)
            for (size_t i = 0; i < n; i++)
                if (ch[i]) {
                    memcpy(model_state[li[i]][ki[i]].b, scratch[i].b, L[li[i]]->lim.state_size);
                    model_has[li[i]][ki[i]] = true;
                }
        if (!all)
            for (size_t i = 0; i < n; i++) {
                /* nothing was consumed: every item reports the state as it stands (its
                 * verdict and retry-after from its own decision) */
                mstate tmp;
                sl_result pk;
                sl_algo_decide(&L[li[i]]->lim, model_has[li[i]][ki[i]] ? model_state[li[i]][ki[i]].b : NULL,
                               tmp.b, now, 0, &pk);
                mr[i].remaining = pk.remaining;
                mr[i].reset_after_ns = pk.reset_after_ns;
                mr[i].delay_ns = 0;
                mr[i].lease = 0;
            }
        sluice_decision d;
        int rc = sluice_decide(st, it, n, now, &d);
        T_EQ_I(rc, SLUICE_OK);
        bool same = d.allowed == (all ? 1 : 0);
        for (size_t i = 0; i < n; i++) {
            same = same && d.results[i].allowed == (mr[i].allowed ? 1 : 0) &&
                   d.results[i].remaining == mr[i].remaining &&
                   d.results[i].retry_after_ns == mr[i].retry_after_ns &&
                   d.results[i].reset_after_ns == mr[i].reset_after_ns &&
                   d.results[i].delay_ns == mr[i].delay_ns;
        }
        if (!same) {
            mismatches++;
            T_FAIL("step %d: store and model disagree", step);
        }
    }
    sluice_store_destroy(st);
    for (int i = 0; i < MLIM; i++) sluice_limiter_destroy(L[i]);
}

int main(void) {
    T_RUN(test_threads_one_key);
    T_RUN(test_threads_two_limits);
    T_RUN(test_all_or_nothing);
    T_RUN(test_deciding);
    T_RUN(test_peek_and_repeat);
    T_RUN(test_settle_release_reset);
    T_RUN(test_errors);
    T_RUN(test_against_model);
    return T_DONE();
}
