/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_store_shards.c -- a small memory store still has several shards (issue 28: with
 * max_keys 1,000 the store had one shard, so two threads on 1,000 hot keys waited on one
 * lock and decided slower than one). The shard count is structural, so this checks it
 * without timing; bench/run_lib.sh shows the scaling. `shards: 1` still gives one.
 */
#include "sluice.h"
#include "store/memory/memory.h"
#include "t.h"

static unsigned shards_of(uint64_t max_keys, unsigned shards) {
    sluice_store_options o = {.max_keys = max_keys, .shards = shards};
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    sluice_limit_spec sp = {.algo = SLUICE_GCRA, .name = "g", .limit = 10,
                            .period_ns = SLUICE_NS_PER_S};
    sluice_limiter *lim = sluice_limiter_create(&sp, &err, NULL, 0);
    if (st == NULL || lim == NULL || sluice_store_register(st, lim) != SLUICE_OK) {
        T_FAIL("setup %d", err);
        return 0;
    }
    T_CHECK(st->ntables >= 1);
    unsigned n = st->ntables ? st->tables[0]->nshards : 0;
    /* and it decides: every one of max_keys keys fits */
    sluice_time now = {SLUICE_NS_PER_S, INT64_C(1767225600) * SLUICE_NS_PER_S};
    sluice_decision d;
    char k[32];
    for (uint64_t i = 0; i < max_keys; i++) {
        int kl = snprintf(k, sizeof(k), "k%llu", (unsigned long long)i);
        sluice_item it = {lim, k, (size_t)kl, 1};
        if (sluice_decide(st, &it, 1, now, &d) != SLUICE_OK || !d.allowed) {
            T_FAIL("key %llu of %llu", (unsigned long long)i, (unsigned long long)max_keys);
            break;
        }
    }
    sluice_store_stats ss;
    sluice_store_stats_get(st, &ss);
    T_EQ_U(ss.keys, max_keys);
    T_EQ_U(ss.evicted, 0);
    sluice_store_destroy(st);
    sluice_limiter_destroy(lim);
    return n;
}

static void test_small_store_has_shards(void) {
    T_CHECK(shards_of(1000, 0) >= 16);
    T_CHECK(shards_of(100, 0) >= 16);
    T_EQ_U(shards_of(1000, 1), 1);
    T_EQ_U(shards_of(1000, 8), 8);
    T_EQ_U(shards_of(1000000, 0), 256);
}

int main(void) {
    T_RUN(test_small_store_has_shards);
    return T_DONE();
}
