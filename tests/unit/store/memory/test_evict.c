/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_evict.c -- what memory pressure evicts, and whose: a key used once before one used
 * repeatedly, an idle one before a recently active one, a limited (exhausted) key last;
 * least recently used first at fine resolution (keys 20 ms apart, which one stamp of the
 * old 4.3 s LRU could not tell apart); limiters kept apart by their shares, with the
 * evictions counted per limiter (sluice_store_limiter_stats). Fake time only.
 */
#include "t.h"

#include "sluice.h"

#define S SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

static sluice_limiter *mk(const char *name, uint64_t limit, int64_t period_ns, uint64_t burst) {
    sluice_limit_spec s;
    memset(&s, 0, sizeof(s));
    s.algo = SLUICE_GCRA;
    s.name = name;
    s.limit = limit;
    s.period_ns = period_ns;
    s.burst = burst;
    int err = 0;
    sluice_limiter *l = sluice_limiter_create(&s, &err, NULL, 0);
    if (l == NULL) T_FAIL("limiter %s: %d", name, err);
    return l;
}

static sluice_store *mkstore(uint64_t max_keys, unsigned shards) {
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = max_keys;
    o.shards = shards;
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    return st;
}

static sluice_time at(int64_t ns) {
    sluice_time t = {1000 * S + ns, INT64_C(1764633600) * S + ns};
    return t;
}

static int take(sluice_store *st, const sluice_limiter *l, const char *key, uint64_t cost,
                int64_t t, sluice_result *r) {
    sluice_item it = {l, key, strlen(key), cost};
    sluice_decision d;
    int rc = sluice_decide(st, &it, 1, at(t), &d);
    if (rc == SLUICE_OK && r != NULL) *r = d.results[0];
    return rc == SLUICE_OK ? d.allowed : rc;
}

/* Remaining after a peek: the burst (5) means the key's state is gone. */
static uint64_t left(sluice_store *st, const sluice_limiter *l, const char *key, int64_t t) {
    sluice_result r;
    memset(&r, 0, sizeof(r));
    T_CHECK(take(st, l, key, 0, t, &r) >= 0);
    return r.remaining;
}

/* 8 keys of 4 kinds in an 8-key store (one shard: every scan sees all of them); then
 * 2, 4, 6, 8 new exhausted keys (protected themselves, newer than the old exhausted ones)
 * each evict exactly one: the kinds go in order. A fresh store per round, so that the
 * checks (peeks are uses too) do not change the next round. */
static void test_order_by_cost(void) {
    const char *once[2] = {"once-a", "once-b"}, *idle[2] = {"idle-a", "idle-b"},
               *busy[2] = {"busy-a", "busy-b"}, *done[2] = {"done-a", "done-b"};
    const char **kinds[4] = {once, idle, busy, done};
    for (int k = 0; k < 4; k++) {
        sluice_store *st = mkstore(8, 1);
        sluice_limiter *l = mk("acct", 1, 3600 * S, 5); /* one unit per hour: none goes fresh */
        T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
        for (int i = 0; i < 2; i++) {
            T_EQ_I(take(st, l, done[i], 5, 0, NULL), 1);       /* exhausted: limited */
            T_EQ_I(take(st, l, idle[i], 1, 0, NULL), 1);       /* twice, long ago */
            T_EQ_I(take(st, l, idle[i], 1, 1 * S, NULL), 1);
            T_EQ_I(take(st, l, busy[i], 1, 49 * S, NULL), 1);  /* twice, recently */
            T_EQ_I(take(st, l, busy[i], 1, 50 * S, NULL), 1);
            T_EQ_I(take(st, l, once[i], 1, 50 * S, NULL), 1);  /* once, recently */
        }
        for (int n = 0; n < 2 * (k + 1); n++) {
            char key[16];
            snprintf(key, sizeof(key), "new%d", n);
            T_EQ_I(take(st, l, key, 5, 51 * S, NULL), 1);
        }
        /* kinds up to k are gone (fresh again: 5 left), every later kind is intact */
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 2; i++) {
                uint64_t rem = left(st, l, kinds[j][i], 51 * S);
                if ((j <= k) != (rem == 5))
                    T_FAIL("after %d new keys: %s has %llu left", 2 * (k + 1), kinds[j][i],
                           (unsigned long long)rem);
            }
        sluice_store_stats s;
        sluice_store_stats_get(st, &s);
        T_EQ_U(s.evicted, 2 * (k + 1));
        sluice_store_destroy(st);
        sluice_limiter_destroy(l);
    }
}

/* Keys used once, 20 ms apart (all within one 4.3 s unit of the old LRU stamp): the
 * oldest goes first, in order. */
static void test_lru_fine(void) {
    sluice_store *st = mkstore(8, 1);
    sluice_limiter *l = mk("lru", 1, 3600 * S, 5);
    T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
    char key[16];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", 7 - i); /* k7 oldest ... k0 newest */
        T_EQ_I(take(st, l, key, 1, (int64_t)i * 20 * MS, NULL), 1);
    }
    for (int n = 0; n < 4; n++) {
        snprintf(key, sizeof(key), "new%d", n);
        T_EQ_I(take(st, l, key, 1, 200 * MS, NULL), 1);
    }
    /* the four oldest (k7..k4) are gone, the four newest kept (checked once: peeks are
     * uses too) */
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        T_EQ_U(left(st, l, key, 200 * MS), i >= 4 ? 5 : 4);
    }
    sluice_store_destroy(st);
    sluice_limiter_destroy(l);
}

/* Shares: with two limiters holding keys each is guaranteed half. A flood on "flood"
 * never evicts a key of "quiet" (within its share), and its evictions are counted on
 * "flood"; "quiet" growing past what it holds takes room back from "flood" (over its
 * share) until it reaches its half, then evicts its own. */
static void test_shares(void) {
    sluice_store *st = mkstore(1000, 1);
    sluice_limiter *a = mk("flood", 1, 3600 * S, 5), *b = mk("quiet", 1, 3600 * S, 5);
    T_EQ_I(sluice_store_register(st, a), SLUICE_OK);
    T_EQ_I(sluice_store_register(st, b), SLUICE_OK);
    char key[24];
    for (int i = 0; i < 100; i++) { /* quiet's keys: used once, as cheap as the flood's */
        snprintf(key, sizeof(key), "q%d", i);
        T_EQ_I(take(st, b, key, 1, 0, NULL), 1);
    }
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        T_EQ_I(take(st, a, key, 1, 1 * S + i * MS, NULL), 1);
    }
    sluice_limiter_stats sa, sb;
    T_EQ_I(sluice_store_limiter_stats(st, a, &sa), SLUICE_OK);
    T_EQ_I(sluice_store_limiter_stats(st, b, &sb), SLUICE_OK);
    T_EQ_U(sb.keys, 100);
    T_EQ_U(sb.evicted, 0);
    T_EQ_U(sa.keys, 900);
    T_EQ_U(sa.evicted, 20000 - 900);
    T_EQ_U(sa.share, 500);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "q%d", i);
        T_EQ_U(left(st, b, key, 30 * S), 4);
    }
    /* quiet grows: it takes flood's keys until it holds its 500, then its own go */
    for (int i = 100; i < 700; i++) {
        snprintf(key, sizeof(key), "q%d", i);
        T_EQ_I(take(st, b, key, 1, 40 * S + i * MS, NULL), 1);
    }
    T_EQ_I(sluice_store_limiter_stats(st, a, &sa), SLUICE_OK);
    T_EQ_I(sluice_store_limiter_stats(st, b, &sb), SLUICE_OK);
    T_EQ_U(sa.keys, 500);
    T_EQ_U(sb.keys, 500);
    T_EQ_U(sb.evicted, 200);
    T_EQ_U(sa.evicted, 20000 - 900 + 400);
    sluice_store_stats s;
    sluice_store_stats_get(st, &s);
    T_EQ_U(s.evicted, sa.evicted + sb.evicted);
    T_EQ_U(s.keys, 1000);
    /* errors */
    sluice_limiter *unreg = mk("never", 1, S, 1);
    T_EQ_I(sluice_store_limiter_stats(st, unreg, &sa), SLUICE_EINVAL);
    T_EQ_I(sluice_store_limiter_stats(NULL, a, &sa), SLUICE_EINVAL);
    T_EQ_I(sluice_store_limiter_stats(st, a, NULL), SLUICE_EINVAL);
    sluice_limiter_destroy(unreg);
    sluice_store_destroy(st);
    sluice_limiter_destroy(a);
    sluice_limiter_destroy(b);
}

/* A limiter whose first key comes after a flood of another filled the store gets room:
 * a newcomer counts among the limiters holding keys (before, its share was 0 and the
 * flooder's the whole store, so every new key of it was refused). */
static void test_newcomer_after_flood(void) {
    sluice_store *st = mkstore(1000, 1);
    sluice_limiter *a = mk("flood2", 1, 3600 * S, 5), *b = mk("late", 1, 3600 * S, 5);
    T_EQ_I(sluice_store_register(st, a), SLUICE_OK);
    T_EQ_I(sluice_store_register(st, b), SLUICE_OK);
    char key[24];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        T_EQ_I(take(st, a, key, 1, i * MS, NULL), 1);
    }
    int refused = 0;
    for (int i = 0; i < 50; i++) {
        snprintf(key, sizeof(key), "l%d", i);
        if (take(st, b, key, 1, 10 * S + i * MS, NULL) != 1) refused++;
    }
    T_EQ_I(refused, 0);
    sluice_limiter_stats sa, sb;
    T_EQ_I(sluice_store_limiter_stats(st, a, &sa), SLUICE_OK);
    T_EQ_I(sluice_store_limiter_stats(st, b, &sb), SLUICE_OK);
    T_EQ_U(sb.keys, 50);
    T_EQ_U(sb.refused, 0);
    T_EQ_U(sa.keys, 950);
    sluice_store_destroy(st);
    sluice_limiter_destroy(a);
    sluice_limiter_destroy(b);
}

/* A limited key outlasts every cheaper one even when the cheap ones are few: with 7 of 8
 * keys exhausted, new keys keep evicting each other (the one cheap slot), never an
 * exhausted key; refuse mode refuses instead, counted on the limiter. */
static void test_limited_last(void) {
    for (int refuse = 0; refuse < 2; refuse++) {
        sluice_store_options o;
        memset(&o, 0, sizeof(o));
        o.max_keys = 8;
        o.shards = 1;
        o.on_full = refuse ? SLUICE_REFUSE_NEW : SLUICE_EVICT_LRU;
        int err = 0;
        sluice_store *st = sluice_store_create(&o, &err);
        sluice_limiter *l = mk("x", 1, 3600 * S, 5);
        T_EQ_I(sluice_store_register(st, l), SLUICE_OK);
        char key[16];
        for (int i = 0; i < 7; i++) {
            snprintf(key, sizeof(key), "done%d", i);
            T_EQ_I(take(st, l, key, 5, 0, NULL), 1);
        }
        for (int i = 0; i < 50; i++) {
            snprintf(key, sizeof(key), "n%d", i);
            int r = take(st, l, key, 1, S + i * MS, NULL);
            T_EQ_I(r, refuse && i > 0 ? SLUICE_EFULL : 1);
        }
        for (int i = 0; i < 7; i++) {
            snprintf(key, sizeof(key), "done%d", i);
            T_EQ_U(left(st, l, key, 2 * S), 0);
        }
        sluice_limiter_stats ls;
        T_EQ_I(sluice_store_limiter_stats(st, l, &ls), SLUICE_OK);
        T_EQ_U(ls.evicted, refuse ? 0 : 49);
        T_EQ_U(ls.refused, refuse ? 49 : 0);
        sluice_store_destroy(st);
        sluice_limiter_destroy(l);
    }
}

int main(void) {
    T_RUN(test_order_by_cost);
    T_RUN(test_lru_fine);
    T_RUN(test_shares);
    T_RUN(test_newcomer_after_flood);
    T_RUN(test_limited_last);
    return T_DONE();
}
