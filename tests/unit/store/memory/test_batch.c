/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_batch.c -- sluice_decide_batch: the same results, state and pressure events as
 * one sluice_decide per item in order (random traffic over every algorithm, eviction and
 * refusal included, repeated keys within a batch), the partial-return contract (items
 * from the failing one on are not decided), argument errors, and no lost updates when
 * threads batch on one key. Fake time only.
 */
#include <pthread.h>

#include "t.h"

#include "sluice.h"

static sluice_limiter *mk(sluice_algo algo, const char *name, uint64_t limit, int64_t period_ns,
                          uint64_t burst) {
    sluice_limit_spec s;
    memset(&s, 0, sizeof(s));
    s.algo = algo;
    s.name = name;
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

static sluice_store *mkstore(uint64_t max_keys, sluice_on_full mode) {
    static const uint8_t seed[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = max_keys;
    o.on_full = mode;
    o.seed = seed;
    int err = -100;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    T_EQ_I(err, SLUICE_OK);
    return st;
}

static const sluice_time T0 = {1000 * SLUICE_NS_PER_S, INT64_C(1764633600) * SLUICE_NS_PER_S};

static void same_result(const sluice_result *a, const sluice_result *b, size_t i) {
    if (a->allowed != b->allowed || a->limit != b->limit || a->remaining != b->remaining ||
        a->reset_after_ns != b->reset_after_ns || a->retry_after_ns != b->retry_after_ns ||
        a->delay_ns != b->delay_ns || a->lease != b->lease)
        T_FAIL("item %zu: batch {%d %llu %llu %lld %lld %lld %llu} != one by one "
               "{%d %llu %llu %lld %lld %lld %llu}",
               i, a->allowed, (unsigned long long)a->limit, (unsigned long long)a->remaining,
               (long long)a->reset_after_ns, (long long)a->retry_after_ns,
               (long long)a->delay_ns, (unsigned long long)a->lease, b->allowed,
               (unsigned long long)b->limit, (unsigned long long)b->remaining,
               (long long)b->reset_after_ns, (long long)b->retry_after_ns,
               (long long)b->delay_ns, (unsigned long long)b->lease);
}

#define NLIM 8
#define NKEYS 120
#define MAXB 40

/* Two stores with the same seed and options receive the same traffic, one as batches
 * and one as single decisions; every result and every counter must agree. With
 * `refuse`, a refused new key ends the batch there: the one-by-one side stops at the
 * same item, and the rest of that batch is decided by neither. */
static void equivalence(sluice_on_full mode, uint64_t max_keys, int rounds) {
    sluice_store *a = mkstore(max_keys, mode), *b = mkstore(max_keys, mode);
    const sluice_algo algos[NLIM] = {SLUICE_GCRA,         SLUICE_TOKEN_BUCKET, SLUICE_FIXED_WINDOW,
                                     SLUICE_SLIDING_WINDOW, SLUICE_SLIDING_LOG, SLUICE_LEAKY_BUCKET,
                                     SLUICE_CONCURRENCY,  SLUICE_QUOTA};
    const char *names[NLIM] = {"g", "tb", "fw", "sw", "log", "lb", "cc", "q"};
    sluice_limiter *lim[NLIM];
    for (int i = 0; i < NLIM; i++) {
        lim[i] = mk(algos[i], names[i], 5, 2 * SLUICE_NS_PER_S, 0);
        T_EQ_I(sluice_store_register(a, lim[i]), SLUICE_OK);
        T_EQ_I(sluice_store_register(b, lim[i]), SLUICE_OK);
    }
    char keys[NKEYS][8];
    for (int k = 0; k < NKEYS; k++) snprintf(keys[k], sizeof(keys[k]), "k%d", k);
    uint64_t seed = t_seed();
    sluice_time now = T0;
    uint64_t decided = 0, allowed = 0, stopped = 0;
    int failed_before = t_failed_checks;
    for (int round = 0; round < rounds; round++) {
        sluice_item it[MAXB];
        size_t n = (size_t)(t_rand(&seed) % (MAXB + 1));
        for (size_t i = 0; i < n; i++) {
            /* a few hot keys, so batches often repeat a key */
            uint64_t k = t_rand(&seed) % 4 == 0 ? t_rand(&seed) % 3 : t_rand(&seed) % NKEYS;
            uint64_t c = t_rand(&seed) % 10;
            it[i] = (sluice_item){lim[t_rand(&seed) % NLIM], keys[k], strlen(keys[k]),
                                  c < 6 ? 1 : c < 8 ? 0 : c < 9 ? 3 : 7 /* > capacity */};
        }
        sluice_result ra[MAXB], rb[MAXB];
        memset(ra, 0x5a, sizeof(ra));
        int got = sluice_decide_batch(a, it, n, now, ra);
        size_t ok = 0;
        int err = SLUICE_OK;
        for (; ok < n; ok++) {
            sluice_decision d;
            err = sluice_decide(b, &it[ok], 1, now, &d);
            if (err != SLUICE_OK) break;
            rb[ok] = d.results[0];
        }
        T_EQ_I(got, (int)ok);
        if (ok < n) {
            T_EQ_I(err, SLUICE_EFULL);
            stopped++;
            /* out[k..] is left as it was */
            unsigned char pat[sizeof(sluice_result)];
            memset(pat, 0x5a, sizeof(pat));
            if (got >= 0 && (size_t)got < n) T_CHECK(memcmp(&ra[got], pat, sizeof(pat)) == 0);
        }
        for (size_t i = 0; i < ok && i < (size_t)(got < 0 ? 0 : got); i++) {
            same_result(&ra[i], &rb[i], i);
            allowed += (uint64_t)ra[i].allowed;
        }
        decided += ok;
        if (t_failed_checks > failed_before) break;
        now.mono_ns += (int64_t)(t_rand(&seed) % (SLUICE_NS_PER_S / 2));
        now.wall_ns += (int64_t)(t_rand(&seed) % (SLUICE_NS_PER_S / 2));
        if (round % 500 == 499) now.mono_ns += 5 * SLUICE_NS_PER_S; /* let keys go fresh */
    }
    sluice_store_stats sa, sb;
    sluice_store_stats_get(a, &sa);
    sluice_store_stats_get(b, &sb);
    T_EQ_U(sa.keys, sb.keys);
    T_EQ_U(sa.expired, sb.expired);
    T_EQ_U(sa.evicted, sb.evicted);
    T_EQ_U(sa.refused, sb.refused);
    /* the traffic must have exercised what it claims to */
    T_CHECK(decided > (mode == SLUICE_REFUSE_NEW ? (uint64_t)rounds / 2 : (uint64_t)rounds * 10));
    T_CHECK(allowed > 0 && allowed < decided);
    if (max_keys < NKEYS * NLIM) T_CHECK(sa.evicted + sa.expired + sa.refused > 0);
    if (mode == SLUICE_EVICT_LRU && max_keys < NKEYS * NLIM) T_CHECK(sa.evicted > 0);
    if (mode == SLUICE_REFUSE_NEW) T_CHECK(stopped > 0 && sa.refused > 0);
    for (int i = 0; i < NLIM; i++) sluice_limiter_destroy(lim[i]);
    sluice_store_destroy(a);
    sluice_store_destroy(b);
}

static void batch_matches_one_by_one(void) { equivalence(SLUICE_EVICT_LRU, 100000, 3000); }
static void batch_matches_one_by_one_under_eviction(void) {
    equivalence(SLUICE_EVICT_LRU, 60, 3000);
}
static void batch_stops_at_refused_key(void) { equivalence(SLUICE_REFUSE_NEW, 60, 3000); }

/* An unregistered limiter at index 3: items 0..2 are decided and consumed, 3 and later
 * (even valid ones) are not. */
static void batch_partial_on_invalid_item(void) {
    sluice_store *st = mkstore(1000, SLUICE_EVICT_LRU);
    sluice_limiter *g = mk(SLUICE_GCRA, "g", 10, 10 * SLUICE_NS_PER_S, 0);
    sluice_limiter *other = mk(SLUICE_GCRA, "unregistered", 10, 10 * SLUICE_NS_PER_S, 0);
    T_EQ_I(sluice_store_register(st, g), SLUICE_OK);
    sluice_item it[6] = {{g, "a", 1, 1}, {g, "a", 1, 1}, {g, "b", 1, 2}, {other, "a", 1, 1},
                         {g, "a", 1, 1}, {g, "c", 1, 1}};
    sluice_result out[6];
    memset(out, 0, sizeof(out));
    T_EQ_I(sluice_decide_batch(st, it, 6, T0, out), 3);
    T_EQ_I(out[0].allowed, 1);
    T_EQ_U(out[0].remaining, 9);
    T_EQ_U(out[1].remaining, 8);
    T_EQ_U(out[2].remaining, 8);
    T_EQ_I(out[4].allowed, 0); /* untouched */
    sluice_item peek[3] = {{g, "a", 1, 0}, {g, "b", 1, 0}, {g, "c", 1, 0}};
    T_EQ_I(sluice_decide_batch(st, peek, 3, T0, out), 3);
    T_EQ_U(out[0].remaining, 8);  /* item 4 not consumed */
    T_EQ_U(out[1].remaining, 8);
    T_EQ_U(out[2].remaining, 10); /* item 5 not consumed */
    sluice_store_stats ss;
    sluice_store_stats_get(st, &ss);
    T_EQ_U(ss.keys, 2);
    /* a NULL key with a length is invalid too */
    sluice_item bad[2] = {{g, "a", 1, 1}, {g, NULL, 3, 1}};
    T_EQ_I(sluice_decide_batch(st, bad, 2, T0, out), 1);
    sluice_limiter_destroy(g);
    sluice_limiter_destroy(other);
    sluice_store_destroy(st);
}

static void batch_argument_errors(void) {
    sluice_store *st = mkstore(1000, SLUICE_EVICT_LRU);
    sluice_limiter *g = mk(SLUICE_GCRA, "g", 10, 10 * SLUICE_NS_PER_S, 0);
    T_EQ_I(sluice_store_register(st, g), SLUICE_OK);
    sluice_item it = {g, "a", 1, 1};
    sluice_result r;
    T_EQ_I(sluice_decide_batch(NULL, &it, 1, T0, &r), SLUICE_EINVAL);
    T_EQ_I(sluice_decide_batch(st, NULL, 1, T0, &r), SLUICE_EINVAL);
    T_EQ_I(sluice_decide_batch(st, &it, 1, T0, NULL), SLUICE_EINVAL);
    T_EQ_I(sluice_decide_batch(st, NULL, 0, T0, NULL), 0);
    sluice_store_stats ss;
    sluice_store_stats_get(st, &ss);
    T_EQ_U(ss.keys, 0); /* nothing decided by the refused calls */
    sluice_limiter_destroy(g);
    sluice_store_destroy(st);
}

/* Threads batching on one hot key (and each on its own key) at one instant: exactly the
 * burst is admitted on each key, however the batches interleave. */
#define NTH 4
#define PER_THREAD 1600
typedef struct hammer {
    sluice_store *st;
    const sluice_limiter *lim;
    char own[8];
    uint64_t hot_ok, own_ok, errors;
} hammer;

static void *hammer_run(void *p) {
    hammer *h = p;
    for (int r = 0; r < PER_THREAD / 16; r++) {
        sluice_item it[16];
        for (int i = 0; i < 16; i++)
            it[i] = i % 2 ? (sluice_item){h->lim, "hot", 3, 1}
                          : (sluice_item){h->lim, h->own, strlen(h->own), 1};
        sluice_result out[16];
        int got = sluice_decide_batch(h->st, it, 16, T0, out);
        if (got != 16) h->errors++;
        for (int i = 0; i < got; i++) {
            if (i % 2) h->hot_ok += (uint64_t)out[i].allowed;
            else h->own_ok += (uint64_t)out[i].allowed;
        }
    }
    return NULL;
}

static void batch_threads_no_lost_updates(void) {
    const sluice_algo algos[2] = {SLUICE_GCRA, SLUICE_TOKEN_BUCKET};
    for (int ai = 0; ai < 2; ai++) {
        sluice_store *st = mkstore(1000, SLUICE_EVICT_LRU);
        /* 1000 per hour: no refill within the test's single instant */
        sluice_limiter *l = mk(algos[ai], "hot", 1000, 3600 * SLUICE_NS_PER_S, 0);
        T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
        hammer h[NTH];
        pthread_t th[NTH];
        for (int i = 0; i < NTH; i++) {
            h[i] = (hammer){st, l, "", 0, 0, 0};
            snprintf(h[i].own, sizeof(h[i].own), "own%d", i);
            pthread_create(&th[i], NULL, hammer_run, &h[i]);
        }
        uint64_t hot = 0;
        for (int i = 0; i < NTH; i++) {
            pthread_join(th[i], NULL);
            hot += h[i].hot_ok;
            T_EQ_U(h[i].own_ok, PER_THREAD / 2 < 1000 ? PER_THREAD / 2 : 1000);
            T_EQ_U(h[i].errors, 0);
        }
        T_EQ_U(hot, 1000); /* NTH * PER_THREAD / 2 = 3200 asked */
        sluice_limiter_destroy(l);
        sluice_store_destroy(st);
    }
}

int main(void) {
    T_RUN(batch_matches_one_by_one);
    T_RUN(batch_matches_one_by_one_under_eviction);
    T_RUN(batch_stops_at_refused_key);
    T_RUN(batch_partial_on_invalid_item);
    T_RUN(batch_argument_errors);
    T_RUN(batch_threads_no_lost_updates);
    return T_DONE();
}
