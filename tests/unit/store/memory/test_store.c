/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store.c -- the memory store's capacity and expiry behaviour: refuse and evict
 * under pressure (with counts), fresh-equivalent entries dropped before anything else,
 * busy keys never reset, LRU order, re-registration carrying state, memory per key,
 * and hash flooding resistance (chosen keys spread over shards). Fake time only.
 */
#include <pthread.h>

#include "t.h"

#include "store/memory/memory.h"

static sluice_limiter *mk(sluice_algo algo, const char *name, uint64_t limit, int64_t period_ns,
                          uint64_t burst) {
    sluice_limit_spec s;
    memset(&s, 0, sizeof(s));
    s.algo = algo;
    s.name = name;
    s.limit = limit;
    s.period_ns = period_ns;
    s.burst = burst;
    int err = 0;
    sluice_limiter *l = sluice_limiter_create(&s, &err, NULL, 0);
    if (l == NULL) T_FAIL("limiter %s: %d", name, err);
    return l;
}

static sluice_store *mkstore(uint64_t max_keys, unsigned shards, sluice_on_full mode) {
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = max_keys;
    o.shards = shards;
    o.on_full = mode;
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    return st;
}

static sluice_time at(int64_t s) {
    sluice_time t = {1000 * SLUICE_NS_PER_S + s * SLUICE_NS_PER_S,
                     INT64_C(1764633600) * SLUICE_NS_PER_S + s * SLUICE_NS_PER_S};
    return t;
}

static int take(sluice_store *st, const sluice_limiter *l, int key, uint64_t cost, sluice_time now,
                sluice_result *r) {
    char k[32];
    snprintf(k, sizeof(k), "user:%d", key);
    sluice_item it = {l, k, strlen(k), cost};
    sluice_decision d;
    int rc = sluice_decide(st, &it, 1, now, &d);
    if (rc == SLUICE_OK && r != NULL) *r = d.results[0];
    return rc == SLUICE_OK ? d.allowed : rc;
}

static uint64_t left(sluice_store *st, const sluice_limiter *l, int key, sluice_time now) {
    sluice_result r;
    memset(&r, 0, sizeof(r));
    T_CHECK(take(st, l, key, 0, now, &r) >= 0);
    return r.remaining;
}

static sluice_store_stats stats(sluice_store *st) {
    sluice_store_stats s;
    sluice_store_stats_get(st, &s);
    return s;
}

/* GCRA 1/hour with burst 5: one admission keeps a key busy (not fresh) for an hour. */
#define SLOW(name) mk(SLUICE_GCRA, name, 1, 3600 * SLUICE_NS_PER_S, 5)

/* Refuse mode: the 9th key of 8 is refused with SLUICE_EFULL and counted; existing busy
 * keys keep their state and keep being limited; once entries are fresh again, new keys
 * get room by dropping those (counted as expired, not evicted). */
static void test_refuse_new(void) {
    sluice_store *st = mkstore(8, 1, SLUICE_REFUSE_NEW);
    sluice_limiter *l = SLOW("r");
    sluice_store_register(st, l);
    for (int k = 0; k < 8; k++) T_EQ_I(take(st, l, k, 2, at(0), NULL), 1);
    T_EQ_I(take(st, l, 100, 1, at(1), NULL), SLUICE_EFULL);
    T_EQ_I(take(st, l, 101, 1, at(1), NULL), SLUICE_EFULL);
    sluice_store_stats s = stats(st);
    T_EQ_U(s.keys, 8);
    T_EQ_U(s.refused, 2);
    T_EQ_U(s.evicted, 0);
    /* peeks and rejections on new keys need no room */
    T_EQ_U(left(st, l, 100, at(1)), 5);
    for (int k = 0; k < 8; k++) T_EQ_U(left(st, l, k, at(1)), 3);
    T_EQ_I(take(st, l, 0, 4, at(1), NULL), 0); /* still limited */
    /* three hours later every key is fresh-equivalent: new keys are admitted */
    T_EQ_I(take(st, l, 100, 1, at(3 * 3600), NULL), 1);
    s = stats(st);
    T_CHECK(s.expired >= 1);
    T_EQ_U(s.evicted, 0);
    T_CHECK(s.keys <= 8);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Evict mode: a new key evicts the least recently used busy key (counted); the others
 * keep their state. Key 1 is the oldest after key 0 is used again. */
static void test_evict_lru(void) {
    sluice_store *st = mkstore(8, 1, SLUICE_EVICT_LRU);
    sluice_limiter *l = SLOW("e");
    sluice_store_register(st, l);
    for (int k = 0; k < 8; k++) T_EQ_I(take(st, l, k, 2, at(10 * k), NULL), 1);
    T_EQ_I(take(st, l, 0, 1, at(100), NULL), 1);
    T_EQ_I(take(st, l, 8, 1, at(110), NULL), 1);
    sluice_store_stats s = stats(st);
    T_EQ_U(s.keys, 8);
    T_EQ_U(s.evicted, 1);
    T_EQ_U(s.expired, 0);
    T_EQ_U(left(st, l, 1, at(110)), 5); /* evicted: back to fresh */
    T_EQ_U(left(st, l, 0, at(110)), 2);
    for (int k = 2; k < 8; k++) T_CHECK(left(st, l, k, at(110)) < 5);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Under pressure, fresh-equivalent entries go first: with 4 fresh and 4 busy keys, 4
 * new keys take the fresh ones' room; no busy key is evicted or reset. The fresh keys
 * belong to a limiter of another state size (another table) or of the same one. */
static void test_fresh_dropped_first(void) {
    for (int same = 0; same < 2; same++) {
        sluice_store *st = mkstore(8, 1, SLUICE_EVICT_LRU);
        sluice_limiter *slow = SLOW("busy");
        sluice_limiter *fast = same ? mk(SLUICE_GCRA, "quick", 10, SLUICE_NS_PER_S, 10)
                                    : mk(SLUICE_TOKEN_BUCKET, "quick", 10, SLUICE_NS_PER_S, 10);
        sluice_store_register(st, slow);
        sluice_store_register(st, fast);
        for (int k = 0; k < 4; k++) T_EQ_I(take(st, fast, k, 1, at(0), NULL), 1); /* fresh in 0.1 s */
        for (int k = 0; k < 4; k++) T_EQ_I(take(st, slow, k, 3, at(0), NULL), 1); /* busy 3 h */
        for (int k = 10; k < 14; k++) T_EQ_I(take(st, slow, k, 1, at(5), NULL), 1);
        sluice_store_stats s = stats(st);
        T_EQ_U(s.keys, 8);
        T_EQ_U(s.expired, 4);
        T_EQ_U(s.evicted, 0);
        for (int k = 0; k < 4; k++) T_EQ_U(left(st, slow, k, at(5)), 2);
        sluice_store_destroy(st);
        sluice_limiter_destroy(slow);
        sluice_limiter_destroy(fast);
    }
}

/* A full store in refuse mode never resets a busy key, whatever the traffic of new
 * keys: the 8 busy keys' states are exactly as the algorithm left them. */
static void test_busy_never_reset(void) {
    sluice_store *st = mkstore(8, 1, SLUICE_REFUSE_NEW);
    sluice_limiter *l = SLOW("b");
    sluice_store_register(st, l);
    for (int k = 0; k < 8; k++) T_EQ_I(take(st, l, k, 5, at(0), NULL), 1);
    int refused = 0;
    for (int k = 100; k < 1100; k++)
        if (take(st, l, k, 1, at(1), NULL) == SLUICE_EFULL) refused++;
    T_EQ_I(refused, 1000);
    T_EQ_U(stats(st).refused, 1000);
    for (int k = 0; k < 8; k++) T_EQ_I(take(st, l, k, 1, at(2), NULL), 0);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Many shards: capacity is global and exact; the LRU/fresh logic works per shard. */
static void test_capacity_many_shards(void) {
    sluice_store *st = mkstore(4096, 16, SLUICE_REFUSE_NEW);
    sluice_limiter *l = SLOW("m");
    sluice_store_register(st, l);
    int ok = 0, full = 0;
    for (int k = 0; k < 5000; k++) {
        int r = take(st, l, k, 1, at(0), NULL);
        ok += r == 1;
        full += r == SLUICE_EFULL;
    }
    T_EQ_I(ok, 4096);
    T_EQ_I(full, 5000 - 4096);
    T_EQ_U(stats(st).keys, 4096);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Registering a changed limit under the same name carries state (the algorithm's carry
 * rule: the absolute usage, clamped to the new capacity, so raising a limit and reverting
 * it is neutral), including into another state size. */
static void test_register_carry(void) {
    sluice_store *st = mkstore(0, 0, SLUICE_EVICT_LRU);
    sluice_limiter *a = mk(SLUICE_TOKEN_BUCKET, "api", 100, 3600 * SLUICE_NS_PER_S, 100);
    sluice_store_register(st, a);
    T_EQ_I(take(st, a, 1, 60, at(0), NULL), 1);
    sluice_limiter *b = mk(SLUICE_TOKEN_BUCKET, "api", 200, 3600 * SLUICE_NS_PER_S, 200);
    T_EQ_I(sluice_store_register(st, b), SLUICE_OK);
    T_EQ_U(left(st, b, 1, at(0)), 140); /* 60 used of 200 */
    T_EQ_U(left(st, a, 1, at(0)), 140); /* the old object now means the new parameters */
    sluice_limiter *a2 = mk(SLUICE_TOKEN_BUCKET, "api", 100, 3600 * SLUICE_NS_PER_S, 100);
    T_EQ_I(sluice_store_register(st, a2), SLUICE_OK);
    T_EQ_U(left(st, a2, 1, at(0)), 40); /* reverted: 60 used of 100, as before */
    sluice_limiter *c = mk(SLUICE_GCRA, "api", 50, 3600 * SLUICE_NS_PER_S, 50);
    T_EQ_I(sluice_store_register(st, c), SLUICE_OK);
    T_EQ_U(left(st, c, 1, at(0)), 0); /* 60 used, clamped to 50: exhausted */
    T_EQ_U(stats(st).keys, 1);
    sluice_store_destroy(st);
    sluice_limiter_destroy(a);
    sluice_limiter_destroy(a2);
    sluice_limiter_destroy(b);
    sluice_limiter_destroy(c);
}

/* Memory per tracked key at full capacity: <= 48 bytes for GCRA and token bucket. */
static void test_bytes_per_key(void) {
    sluice_algo algos[2] = {SLUICE_GCRA, SLUICE_TOKEN_BUCKET};
    for (int a = 0; a < 2; a++) {
        sluice_store *st = mkstore(100000, 0, SLUICE_REFUSE_NEW);
        sluice_limiter *l = mk(algos[a], "mem", 1, 3600 * SLUICE_NS_PER_S, 5);
        sluice_store_register(st, l);
        int full = 0;
        for (int k = 0; k < 100000; k++) full += take(st, l, k, 1, at(0), NULL) == SLUICE_EFULL;
        sluice_store_stats s = stats(st);
        T_EQ_I(full, 0);
        T_EQ_U(s.keys, 100000);
        double per = (double)s.bytes / (double)s.keys;
        if (per > 48.0) T_FAIL("%s: %.1f bytes per key", sluice_algo_name(algos[a]), per);
        sluice_store_destroy(st);
        sluice_limiter_destroy(l);
    }
}

/* Memory follows the keys held, not max_keys: a store of 1 M keys holds ~1 page per shard
 * when empty, grows as keys arrive (shards double under their lock), and every key stays
 * found across the growths (each keeps its spent budget). */
static void test_grows_with_keys(void) {
    sluice_store *st = mkstore(1000000, 0, SLUICE_REFUSE_NEW);
    sluice_limiter *l = SLOW("grow");
    T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
    uint64_t b0 = stats(st).bytes;
    T_CHECK(b0 < (UINT64_C(2) << 20)); /* it was 57 MB: max_keys * 57 bytes up front */
    uint64_t prev = b0;
    int n = 0;
    /* growth is by doubling: x4 more keys per step makes every shard grow at least once */
    for (int upto = 40000; upto <= 640000; upto *= 4) {
        for (; n < upto; n++) T_EQ_I(take(st, l, n, 1, at(0), NULL), 1);
        sluice_store_stats s = stats(st);
        T_EQ_U(s.keys, (uint64_t)upto);
        if (upto > 40000) T_CHECK(s.bytes > prev);
        T_CHECK(s.bytes >= 24 * (uint64_t)upto); /* an entry is 24 bytes: they are all held */
        /* within 2x of the full-size density (a shard is between half and full load) */
        T_CHECK(s.bytes <= b0 + 2 * 48 * (uint64_t)upto);
        prev = s.bytes;
    }
    /* every key is still there with its budget spent: 5 tokens each, one taken */
    for (int k = 0; k < n; k += 7) T_EQ_U(left(st, l, k, at(0)), 4);
    /* a key never seen has its full budget */
    T_EQ_U(left(st, l, n + 1, at(0)), 5);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Shards growing while other threads decide in them (and in multi-key decisions): every
 * new key lands once, every key is found afterwards with its budget spent. */
typedef struct grower {
    sluice_store *st;
    const sluice_limiter *l;
    int base, n, errors;
} grower;

static void *grow_run(void *p) {
    grower *g = p;
    for (int i = 0; i < g->n; i++) {
        char k1[32], k2[32];
        snprintf(k1, sizeof(k1), "user:%d", g->base + 2 * i);
        snprintf(k2, sizeof(k2), "user:%d", g->base + 2 * i + 1);
        sluice_item it[2] = {{g->l, k1, strlen(k1), 1}, {g->l, k2, strlen(k2), 1}};
        sluice_decision d;
        /* one and two keys per decision: the single-item and the general path */
        int rc = sluice_decide(g->st, it, (size_t)(i % 2 ? 2 : 1), at(0), &d);
        if (rc != SLUICE_OK || !d.allowed) g->errors++;
        if (i % 2 == 0 && (sluice_decide(g->st, &it[1], 1, at(0), &d) != SLUICE_OK || !d.allowed))
            g->errors++;
    }
    return NULL;
}

static void test_grows_under_concurrency(void) {
    sluice_store *st = mkstore(1000000, 0, SLUICE_REFUSE_NEW);
    sluice_limiter *l = SLOW("grow-mt");
    T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
    enum { T = 4, N = 15000 };
    grower g[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        g[t] = (grower){st, l, t * 2 * N, N, 0};
        pthread_create(&th[t], NULL, grow_run, &g[t]);
    }
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < T; t++) T_EQ_I(g[t].errors, 0);
    T_EQ_U(stats(st).keys, (uint64_t)T * 2 * N);
    for (int k = 0; k < T * 2 * N; k += 3) T_EQ_U(left(st, l, k, at(0)), 4);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Keys chosen to collide under an unkeyed hash still spread: with a keyed hash, 64k
 * keys over 256 shards leave no shard above 2x its mean. */
static void test_spread(void) {
    sluice_store *st = mkstore(1 << 20, 256, SLUICE_REFUSE_NEW);
    sluice_limiter *l = SLOW("spread");
    sluice_store_register(st, l);
    sl_family *f = sl_store_family_of(st, l);
    static uint32_t per[256];
    for (int k = 0; k < 65536; k++) {
        char key[16];
        snprintf(key, sizeof(key), "%08x", k * 256); /* same low byte everywhere */
        sl_hash128 h = sl_family_hash(f, key, strlen(key));
        sl_loc loc;
        sl_table_locate(sl_family_cur(f)->table, h, f->id, &loc);
        per[loc.sh - loc.t->shards]++;
    }
    uint32_t mx = 0;
    for (int i = 0; i < 256; i++) mx = per[i] > mx ? per[i] : mx;
    T_CHECK(mx < 512);
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Re-registration while other threads decide: the swap happens under every shard lock,
 * so decisions see either version, never a torn one; the store stays consistent (each
 * key once, counts right) and every decision succeeds. */
typedef struct churn {
    sluice_store *st;
    sluice_limiter *const *lims;
    int errors, admitted;
} churn;

static void *churn_run(void *p) {
    churn *c = p;
    for (int i = 0; i < 20000; i++) {
        int r = take(c->st, c->lims[i % 2], i % 50, 1, at(0), NULL);
        if (r < 0) c->errors++;
        if (r == 1) c->admitted++;
    }
    return NULL;
}

static void test_register_while_deciding(void) {
    sluice_store *st = mkstore(1000, 4, SLUICE_REFUSE_NEW);
    sluice_limiter *v[4] = {mk(SLUICE_FIXED_WINDOW, "live", 100, 3600 * SLUICE_NS_PER_S, 0),
                            mk(SLUICE_FIXED_WINDOW, "live", 300, 3600 * SLUICE_NS_PER_S, 0),
                            mk(SLUICE_TOKEN_BUCKET, "live", 100, 3600 * SLUICE_NS_PER_S, 100),
                            mk(SLUICE_GCRA, "live", 100, 3600 * SLUICE_NS_PER_S, 100)};
    sluice_store_register(st, v[0]);
    sluice_store_register(st, v[1]);
    churn c[2] = {{st, v, 0, 0}, {st, v + 2, 0, 0}};
    sluice_store_register(st, v[2]);
    sluice_store_register(st, v[3]);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, churn_run, &c[i]);
    for (int i = 0; i < 200; i++) T_EQ_I(sluice_store_register(st, v[i % 4]), SLUICE_OK);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    T_EQ_I(c[0].errors + c[1].errors, 0);
    T_CHECK(c[0].admitted + c[1].admitted > 0);
    T_CHECK(stats(st).keys <= 50);
    sluice_store_destroy(st);
    for (int i = 0; i < 4; i++) sluice_limiter_destroy(v[i]);
}

int main(void) {
    T_RUN(test_refuse_new);
    T_RUN(test_evict_lru);
    T_RUN(test_fresh_dropped_first);
    T_RUN(test_busy_never_reset);
    T_RUN(test_capacity_many_shards);
    T_RUN(test_register_carry);
    T_RUN(test_bytes_per_key);
    T_RUN(test_grows_with_keys);
    T_RUN(test_grows_under_concurrency);
    T_RUN(test_spread);
    T_RUN(test_register_while_deciding);
    return T_DONE();
}
