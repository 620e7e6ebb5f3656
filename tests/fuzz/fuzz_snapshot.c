/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_snapshot.c -- restore from arbitrary bytes must never crash, leak or load half a
 * file (inputs of odd length are re-sealed with a valid checksum to reach the parser): each input goes to sl_store_restore_buf on a fresh small store with the limiters
 * of tests/unit/store/memory/test_snapshot.c registered (so valid seeds reach the entry-loading
 * path), and a refused input must leave the store empty. A loaded store is then used
 * and snapshotted once, so whatever was loaded is also exercised.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/memory/memory.h"

#define NLIM 8

static sluice_limiter *L[NLIM];

static sluice_limiter *mk(sluice_algo algo, const char *name, uint64_t limit, int64_t period_ns,
                          uint64_t burst) {
    sluice_limit_spec s;
    memset(&s, 0, sizeof(s));
    s.algo = algo;
    s.name = name;
    s.limit = limit;
    s.period_ns = period_ns;
    s.burst = burst;
    if (algo == SLUICE_CONCURRENCY) s.lease_ns = 30 * SLUICE_NS_PER_S, s.period_ns = 0;
    if (algo == SLUICE_LEAKY_BUCKET) s.max_delay_ns = 2 * SLUICE_NS_PER_S;
    if (algo == SLUICE_QUOTA) s.quota_period = SLUICE_PERIOD_DAY, s.tz = "Europe/Madrid", s.period_ns = 0;
    int err = 0;
    return sluice_limiter_create(&s, &err, NULL, 0);
}

static void setup(void) {
    L[0] = mk(SLUICE_FIXED_WINDOW, "s-fixed", 20, 60 * SLUICE_NS_PER_S, 0);
    L[1] = mk(SLUICE_SLIDING_WINDOW, "s-sliding", 20, 60 * SLUICE_NS_PER_S, 0);
    L[2] = mk(SLUICE_SLIDING_LOG, "s-log", 10, 60 * SLUICE_NS_PER_S, 0);
    L[3] = mk(SLUICE_TOKEN_BUCKET, "s-tb", 5, 60 * SLUICE_NS_PER_S, 20);
    /* registered with other parameters than the seeds': the carry path */
    L[4] = mk(SLUICE_GCRA, "s-gcra", 7, 60 * SLUICE_NS_PER_S, 9);
    L[5] = mk(SLUICE_LEAKY_BUCKET, "s-leaky", 10, 60 * SLUICE_NS_PER_S, 10);
    L[6] = mk(SLUICE_CONCURRENCY, "s-conc", 8, 0, 0);
    L[7] = NULL; /* s-quota unregistered: the skip path */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        setup();
        ready = 1;
    }
    sluice_store_options o;
    memset(&o, 0, sizeof(o));
    o.max_keys = 512;
    o.shards = 2;
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    if (st == NULL) return 0;
    for (int i = 0; i < NLIM; i++)
        if (L[i] != NULL) sluice_store_register(st, L[i]);
    sluice_time now = {50 * SLUICE_NS_PER_S, INT64_C(1764633700) * SLUICE_NS_PER_S};
    char eb[256];
    uint64_t skipped = 0;
    /* Inputs of odd length get a valid checksum (sealing a valid file changes nothing),
     * so that mutations get past it into the header, limiter and entry parsing. */
    uint8_t *copy = malloc(size ? size : 1);
    if (copy == NULL) {
        sluice_store_destroy(st);
        return 0;
    }
    memcpy(copy, data, size);
    if (size > 16 && (size & 1)) sl_snapshot_seal(copy, size);
    int rc = sl_store_restore_buf(st, copy, size, now, &skipped, eb, sizeof(eb));
    free(copy);
    sluice_store_stats s;
    sluice_store_stats_get(st, &s);
    if (rc != SLUICE_OK && s.keys != 0) abort(); /* refused but partly loaded */
    if (rc == SLUICE_OK) {
        for (int i = 0; i < NLIM; i++) {
            if (L[i] == NULL) continue;
            sluice_item it = {L[i], "k1", 2, 1};
            sluice_decision d;
            sluice_decide(st, &it, 1, now, &d);
        }
        char path[64];
        snprintf(path, sizeof(path), "/tmp/fuzz_snapshot-%d.snap", (int)getpid());
        if (sluice_store_snapshot(st, path, now) == SLUICE_OK) unlink(path);
    }
    sluice_store_destroy(st);
    return 0;
}
