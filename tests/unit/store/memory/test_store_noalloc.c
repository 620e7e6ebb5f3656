/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_noalloc.c -- "the decision path allocates nothing" (DEVELOPERS.md; issue 28):
 * every malloc/calloc/realloc/aligned_alloc/posix_memalign of the program is counted
 * (linked with -Wl,--wrap, see CMakeLists.txt), and deciding hundreds of thousands of new
 * keys -- which makes every shard of the memory store double several times -- must count
 * none: through sluice_decide, sluice_decide_batch and the policy engine's
 * sluice_engine_decide / _decide_key. Before the fix a shard's growth made one malloc
 * inside the decision that needed the room.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "sluice.h"
#include "t.h"

static atomic_long n_alloc;

void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t al, size_t n);
int __real_posix_memalign(void **p, size_t al, size_t n);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t a, size_t b);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t al, size_t n);
int __wrap_posix_memalign(void **p, size_t al, size_t n);

void *__wrap_malloc(size_t n) {
    atomic_fetch_add(&n_alloc, 1);
    return __real_malloc(n);
}
void *__wrap_calloc(size_t a, size_t b) {
    atomic_fetch_add(&n_alloc, 1);
    return __real_calloc(a, b);
}
void *__wrap_realloc(void *p, size_t n) {
    atomic_fetch_add(&n_alloc, 1);
    return __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t al, size_t n) {
    atomic_fetch_add(&n_alloc, 1);
    return __real_aligned_alloc(al, n);
}
int __wrap_posix_memalign(void **p, size_t al, size_t n) {
    atomic_fetch_add(&n_alloc, 1);
    return __real_posix_memalign(p, al, n);
}

static void test_counter_works(void) {
    long before = atomic_load(&n_alloc);
    void *volatile p = malloc(16); /* volatile: gcc may elide a malloc/free pair */
    T_CHECK(atomic_load(&n_alloc) == before + 1);
    free(p);
}

static void test_store_growth(void) {
    sluice_store_options o = {.max_keys = 1000000};
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    T_CHECK(st != NULL);
    sluice_limit_spec sp = {.algo = SLUICE_GCRA, .name = "g", .limit = 10,
                            .period_ns = SLUICE_NS_PER_S};
    sluice_limiter *lim = sluice_limiter_create(&sp, &err, NULL, 0);
    T_CHECK(lim != NULL);
    if (st == NULL || lim == NULL) return;
    T_EQ_I(sluice_store_register(st, lim), SLUICE_OK);
    sluice_store_stats s0, s1;
    sluice_store_stats_get(st, &s0);
    sluice_time now = {SLUICE_NS_PER_S, INT64_C(1767225600) * SLUICE_NS_PER_S};
    sluice_decision d;
    char key[32];
    long before = atomic_load(&n_alloc);
    for (int i = 0; i < 300000; i++) {
        int n = snprintf(key, sizeof(key), "key-%d", i);
        sluice_item it = {lim, key, (size_t)n, 1};
        if (sluice_decide(st, &it, 1, now, &d) != SLUICE_OK) {
            T_FAIL("decide %d", i);
            break;
        }
    }
    /* the batch path too */
    static sluice_item items[64];
    static char keys[64][32];
    sluice_result res[64];
    for (int b = 0; b < 1000; b++) {
        for (int j = 0; j < 64; j++) {
            int n = snprintf(keys[j], sizeof(keys[j]), "batch-%d-%d", b, j);
            items[j] = (sluice_item){lim, keys[j], (size_t)n, 1};
        }
        T_EQ_I(sluice_decide_batch(st, items, 64, now, res), 64);
    }
    long during = atomic_load(&n_alloc) - before;
    sluice_store_stats_get(st, &s1);
    /* the shards did grow (the table's memory in use went up many times over) */
    T_CHECK(s1.bytes > 8 * s0.bytes);
    T_EQ_U(s1.keys, 300000 + 64000);
    if (during != 0) T_FAIL("%ld allocations while deciding new keys", during);
    sluice_limiter_destroy(lim);
    sluice_store_destroy(st);
}

static const char *CFG = "policies:\n"
                         "  - name: api\n"
                         "    objective: fairness\n"
                         "    key: [header.x-k]\n"
                         "    algorithm: gcra\n"
                         "    limits: [{rate: 100/min, burst: 100}]\n";

static void test_engine(void) {
    int err = 0;
    char eb[512];
    sluice_engine *e = sluice_engine_load_string(CFG, strlen(CFG), "t.yaml", &err, eb, sizeof(eb));
    T_CHECK(e != NULL);
    sluice_verdict *v = sluice_verdict_create();
    if (e == NULL || v == NULL) return;
    sluice_time now = {SLUICE_NS_PER_S, INT64_C(1767225600) * SLUICE_NS_PER_S};
    char key[32];
    sluice_header h[1];
    sluice_request r = {0};
    r.method = (sluice_str){"GET", 3};
    r.path = (sluice_str){"/x", 2};
    r.headers = h;
    r.n_headers = 1;
    h[0].name = (sluice_str){"x-k", 3};
    long before = atomic_load(&n_alloc);
    for (int i = 0; i < 200000; i++) {
        int n = snprintf(key, sizeof(key), "k%d", i);
        h[0].value = (sluice_str){key, (size_t)n};
        if (sluice_engine_decide(e, &r, now, v) != SLUICE_OK ||
            sluice_engine_decide_key(e, "api", key, (size_t)n, 0, 0, now, v) != SLUICE_OK) {
            T_FAIL("decide %d", i);
            break;
        }
    }
    long during = atomic_load(&n_alloc) - before;
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_ALLOW);
    if (during != 0) T_FAIL("%ld allocations in 400000 engine decisions", during);
    sluice_verdict_destroy(v);
    sluice_engine_destroy(e);
}

int main(void) {
    T_RUN(test_counter_works);
    T_RUN(test_store_growth);
    T_RUN(test_engine);
    return T_DONE();
}
