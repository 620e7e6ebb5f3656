/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_topk.c -- the hot-key sketch: a hot key among 100 k others comes first with its
 * share within 5 %, merged over two worker sketches; the space-saving bounds against an
 * exact count (every reported key's true weight between weight_min and weight_max, every
 * key heavier than total/k reported); many distinct keys keep memory fixed (no allocation
 * at all on the update path); epochs (current + previous, idle workers, long gaps);
 * rejections and raw keys; and readers racing a writer see consistent counters.
 */
#include "t.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/topk.h"
#include "sluice.h"

#define S(x) ((int64_t)(x) * 1000000000)

static const sl_hash_key hk = {0x1111222233334444ull, 0x5555666677778888ull};

static uint64_t kh(uint64_t id) {
    return sl_topk_key_hash(&hk, &id, sizeof(id));
}

static sl_topk *mk(unsigned k, int64_t interval, unsigned raw) {
    sl_topk_config c = {k, interval, raw};
    sl_topk *t = NULL;
    T_EQ_I(sl_topk_create(&t, &c), 0);
    return t;
}

static void test_config_checked(void) {
    sl_topk *t = NULL;
    sl_topk_config bad[] = {{4, S(10), 0}, {SL_TOPK_MAX + 1, S(10), 0}, {64, 0, 0}, {64, S(10), SL_TOPK_RAW_MAX + 1}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        T_EQ_I(sl_topk_create(&t, &bad[i]), SLUICE_EINVAL);
        T_CHECK(t == NULL);
    }
    t = mk(64, S(10), 0);
    sl_topk_entry e[4];
    sl_topk_totals tot;
    sl_topk *const one[1] = {t};
    T_EQ_I(sl_topk_read(one, 1, S(5), e, 4, &tot), 0); /* nothing yet */
    T_EQ_U(tot.weight, 0);
    sl_topk_destroy(t);
}

/* The case: 10 % of 1 M requests (random costs 1..4) from one key, the rest
 * spread over 100 000 others, split over two workers at random. */
static void test_hot_key_first_with_share(void) {
    sl_topk *w[2] = {mk(256, S(10), 0), mk(256, S(10), 0)};
    uint64_t s = t_seed();
    uint64_t hot = kh(999999999), hot_w = 0, total = 0;
    int64_t now = S(100);
    for (int i = 0; i < 1000000; i++) {
        uint64_t r = t_rand(&s);
        uint64_t cost = 1 + (r >> 8) % 4;
        uint64_t key = r % 10 == 0 ? hot : kh((r >> 20) % 100000);
        if (key == hot) hot_w += cost;
        total += cost;
        sl_topk_add(w[(r >> 40) & 1], now + i, key, NULL, 0, cost, 0);
    }
    sl_topk_entry e[10];
    sl_topk_totals tot;
    int n = sl_topk_read(w, 2, now + 1000000, e, 10, &tot);
    T_EQ_I(n, 10);
    T_EQ_U(tot.weight, total);
    T_EQ_U(tot.updates, 1000000);
    T_EQ_U(e[0].key_hash, hot);
    double share = (double)e[0].weight / (double)tot.weight, want = (double)hot_w / (double)total;
    printf("  hot key share %.4f (true %.4f), next %.4f\n", share, want, (double)e[1].weight / tot.weight);
    T_CHECK(share >= want * 0.95 && share <= want * 1.05);
    T_CHECK(e[0].weight_min <= hot_w && hot_w <= e[0].weight_max);
    for (int i = 1; i < n; i++) T_CHECK(e[i].weight <= e[i - 1].weight);
    sl_topk_destroy(w[0]);
    sl_topk_destroy(w[1]);
}

/* Space-saving's guarantees against an exact count over skewed random traffic. */
static void test_bounds_against_exact_count(void) {
    enum { KEYS = 5000, K = 64 };
    static uint64_t exact[KEYS];
    uint64_t s = t_seed() ^ 0x77;
    for (int round = 0; round < 5; round++) {
        memset(exact, 0, sizeof(exact));
        sl_topk *t = mk(K, S(3600), 0);
        uint64_t total = 0;
        for (int i = 0; i < 200000; i++) {
            uint64_t r = t_rand(&s);
            /* skewed: a key id is the minimum of 1..4 uniform draws */
            uint64_t id = r % KEYS;
            for (int d = 0; d < (int)(r >> 60) % 4; d++) {
                uint64_t x = t_rand(&s) % KEYS;
                if (x < id) id = x;
            }
            uint64_t w = 1 + (r >> 32) % 10;
            exact[id] += w;
            total += w;
            sl_topk_add(t, S(1), kh(id), NULL, 0, w, 0);
        }
        sl_topk_entry e[K];
        sl_topk_totals tot;
        sl_topk *const one[1] = {t};
        int n = sl_topk_read(one, 1, S(2), e, K, &tot);
        T_EQ_I(n, K);
        T_EQ_U(tot.weight, total);
        uint64_t sum = 0;
        int bad = 0;
        for (int i = 0; i < n; i++) {
            sum += e[i].weight;
            uint64_t id = KEYS;
            for (uint64_t j = 0; j < KEYS; j++)
                if (kh(j) == e[i].key_hash) id = j;
            if (id == KEYS || exact[id] < e[i].weight_min || exact[id] > e[i].weight_max) bad++;
        }
        T_EQ_I(bad, 0);
        T_EQ_U(sum, total); /* the counters hold all the weight, no more */
        for (uint64_t j = 0; j < KEYS; j++) {
            if (exact[j] * K <= total) continue;
            int found = 0;
            for (int i = 0; i < n; i++) found |= e[i].key_hash == kh(j);
            if (!found) T_FAIL("key %llu (%llu of %llu) missing", (unsigned long long)j,
                               (unsigned long long)exact[j], (unsigned long long)total);
        }
        sl_topk_destroy(t);
    }
}

/* A flood of distinct keys: the memory stays what it was, the update path allocates
 * nothing (glibc's heap statistics do not move), and a key above total/k still shows. */
static void test_adversarial_keys_memory_fixed(void) {
    sl_topk *t = mk(64, S(3600), 32);
    size_t bytes = sl_topk_bytes(t);
    char raw[40];
    struct mallinfo2 before = mallinfo2();
    uint64_t victim = kh(424242), vw = 0, total = 0;
    for (uint64_t i = 0; i < 2000000; i++) {
        if (i % 20 == 0) {
            sl_topk_add(t, S(1), victim, "victim", 6, 1, 1);
            vw++;
        } else {
            int n = snprintf(raw, sizeof(raw), "attacker-key-%llu", (unsigned long long)i);
            sl_topk_add(t, S(1), kh(i + 1000000000), raw, (size_t)n, 1, 0);
        }
        total++;
    }
    struct mallinfo2 after = mallinfo2();
    T_EQ_U(after.uordblks, before.uordblks);
    T_EQ_U(after.arena, before.arena);
    T_EQ_U(sl_topk_bytes(t), bytes);
    sl_topk_entry e[3];
    sl_topk_totals tot;
    sl_topk *const one[1] = {t};
    int n = sl_topk_read(one, 1, S(2), e, 3, &tot);
    T_CHECK(n == 3 && e[0].key_hash == victim);
    T_CHECK(e[0].weight_min <= vw && vw <= e[0].weight_max);
    T_EQ_U(tot.weight, total);
    sl_topk_destroy(t);
}

static int has(const sl_topk_entry *e, int n, uint64_t key, uint64_t *w) {
    for (int i = 0; i < n; i++)
        if (e[i].key_hash == key) return *w = e[i].weight, 1;
    return 0;
}

static void test_epochs(void) {
    const int64_t iv = S(10);
    sl_topk *a = mk(16, iv, 0), *b = mk(16, iv, 0);
    sl_topk *const both[2] = {a, b};
    sl_topk_entry e[16];
    sl_topk_totals tot;
    uint64_t w = 0;
    sl_topk_add(a, S(100), kh(1), NULL, 0, 5, 0); /* epoch 10 */
    sl_topk_add(b, S(101), kh(1), NULL, 0, 2, 0);
    sl_topk_add(a, S(112), kh(2), NULL, 0, 7, 0); /* epoch 11: 10 becomes previous */
    int n = sl_topk_read(both, 2, S(115), e, 16, &tot);
    T_EQ_I(n, 2);
    T_CHECK(has(e, n, kh(1), &w) && w == 7); /* a's previous + b's current-then (epoch 10) */
    T_CHECK(has(e, n, kh(2), &w) && w == 7);
    T_EQ_U(tot.weight, 14);
    T_EQ_I(tot.from_ns, S(100));
    /* epoch 12: epoch 10 is too old, from both a (rotated) and b (idle, never rotated) */
    n = sl_topk_read(both, 2, S(121), e, 16, &tot);
    T_EQ_I(n, 1);
    T_CHECK(has(e, n, kh(2), &w) && w == 7);
    T_EQ_U(tot.weight, 7);
    T_EQ_I(tot.from_ns, S(110));
    /* a long gap: both of a's epochs are stale and are emptied on the next update */
    sl_topk_add(a, S(500), kh(3), NULL, 0, 1, 0);
    n = sl_topk_read(both, 2, S(501), e, 16, &tot);
    T_EQ_I(n, 1);
    T_CHECK(has(e, n, kh(3), &w) && w == 1);
    T_EQ_U(tot.weight, 1);
    /* the next epoch keeps the previous one; the one after drops it */
    sl_topk_add(a, S(511), kh(3), NULL, 0, 1, 0);
    n = sl_topk_read(both, 2, S(512), e, 16, &tot);
    T_CHECK(n == 1 && has(e, n, kh(3), &w) && w == 2);
    sl_topk_add(a, S(521), kh(4), NULL, 0, 1, 0);
    n = sl_topk_read(both, 2, S(522), e, 16, &tot);
    T_EQ_I(n, 2);
    T_CHECK(has(e, n, kh(3), &w) && w == 1 && has(e, n, kh(4), &w) && w == 1);
    sl_topk_destroy(a);
    sl_topk_destroy(b);
}

static void test_rejections_and_raw_keys(void) {
    sl_topk *t = mk(8, S(10), 16), *h = mk(8, S(10), 0);
    const char *k1 = "user-123", *k2 = "a-very-long-key-that-is-cut";
    for (int i = 0; i < 10; i++) {
        sl_topk_add(t, S(1), kh(1), k1, strlen(k1), 3, i >= 6);
        sl_topk_add(h, S(1), kh(1), k1, strlen(k1), 3, i >= 6);
    }
    sl_topk_add(t, S(1), kh(2), k2, strlen(k2), 1, 1);
    sl_topk_entry e[8];
    sl_topk_totals tot;
    sl_topk *const one[1] = {t};
    int n = sl_topk_read(one, 1, S(2), e, 8, &tot);
    T_EQ_I(n, 2);
    T_EQ_U(e[0].weight, 30);
    T_EQ_U(e[0].rejected, 4);
    T_EQ_U(e[0].raw_len, strlen(k1));
    T_CHECK(memcmp(e[0].raw, k1, strlen(k1)) == 0 && !e[0].raw_truncated);
    T_EQ_U(e[1].raw_len, 16);
    T_CHECK(memcmp(e[1].raw, k2, 16) == 0 && e[1].raw_truncated);
    T_EQ_U(tot.rejected, 5);
    sl_topk *const other[1] = {h};
    n = sl_topk_read(other, 1, S(2), e, 8, &tot);
    T_CHECK(n == 1 && e[0].raw_len == 0); /* no raw key kept unless configured */
    T_CHECK(sl_topk_bytes(t) > sl_topk_bytes(h));
    sl_topk_destroy(t);
    sl_topk_destroy(h);
}

/* ---- a reader racing the writer ---------------------------------------------------------- */

enum { RACE_KEYS = 24, RACE_K = 16 };

static _Atomic int race_done;

static uint64_t race_w(int i) {
    return (uint64_t)(i + 1) * 7;
}

typedef struct race {
    sl_topk *t;
    _Atomic int64_t now;
} race;

/* The writer: key i always adds race_w(i), so a consistent counter has
 * (weight - error) divisible by race_w(i); epochs turn over every few thousand updates. */
static void *race_writer(void *arg) {
    race *r = arg;
    uint64_t s = 12345;
    for (int i = 0; i < 3000000; i++) {
        int id = (int)(t_rand(&s) % RACE_KEYS);
        int64_t now = atomic_load_explicit(&r->now, memory_order_relaxed) + 1000;
        atomic_store_explicit(&r->now, now, memory_order_relaxed);
        sl_topk_add(r->t, now, kh((uint64_t)id), NULL, 0, race_w(id), 0);
    }
    atomic_store(&race_done, 1);
    return NULL;
}

static void test_reader_races_writer(void) {
    race r = {mk(RACE_K, 5000000, 0), 0};
    atomic_store(&race_done, 0);
    pthread_t th;
    pthread_create(&th, NULL, race_writer, &r);
    uint64_t ids[RACE_KEYS];
    for (int i = 0; i < RACE_KEYS; i++) ids[i] = kh((uint64_t)i);
    int reads = 0, bad = 0;
    sl_topk *const one[1] = {r.t};
    while (!atomic_load(&race_done) && reads < 200000) {
        sl_topk_entry e[RACE_K * 2];
        sl_topk_totals tot;
        int n = sl_topk_read(one, 1, atomic_load(&r.now), e, RACE_K * 2, &tot);
        reads++;
        for (int i = 0; i < n; i++) {
            int id = -1;
            for (int j = 0; j < RACE_KEYS; j++)
                if (ids[j] == e[i].key_hash) id = j;
            if (id < 0) {
                bad++;
                continue;
            }
            /* merged over two epochs: weight_min sums (weight - error) of both */
            if (e[i].weight_min % race_w(id) != 0) bad++;
            for (int j = 0; j < i; j++)
                if (e[j].key_hash == e[i].key_hash) bad++; /* one key, one entry */
        }
    }
    pthread_join(th, NULL);
    printf("  %d reads during the writer's run\n", reads);
    T_EQ_I(bad, 0);
    T_CHECK(reads > 0);
    sl_topk_destroy(r.t);
}

int main(void) {
    T_RUN(test_config_checked);
    T_RUN(test_hot_key_first_with_share);
    T_RUN(test_bounds_against_exact_count);
    T_RUN(test_adversarial_keys_memory_fixed);
    T_RUN(test_epochs);
    T_RUN(test_rejections_and_raw_keys);
    T_RUN(test_reader_races_writer);
    return T_DONE();
}
