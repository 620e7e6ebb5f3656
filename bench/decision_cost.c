// SPDX-License-Identifier: Apache-2.0
/*
 * decision_cost.c -- exactly N decisions of one plain policy through the engine and the
 * memory store (the server's path without its I/O), or through sluice_decide alone, for
 * instruction counts under callgrind (bench/run_decision_cost.sh): counts do not depend
 * on what else runs on the machine, times do.
 *   decision_cost engine one|three|conc N     one gcra window, three windows, a concurrency
 *                                             window acquired and released
 *   decision_cost lib 1|2 N                   sluice_decide of 1 or 2 items
 * Only stable interfaces are used, so one source builds against two trees (before/after).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "engine/engine.h"
#include "sluice.h"

static const char cfg_text[] =
    "policies:\n"
    "  - { name: one, key: [], algorithm: gcra, limits: [ { rate: 1000000000/s, burst: 1000000000 } ] }\n"
    "  - name: three\n    key: []\n    limits:\n"
    "      - { rate: 1000000000/s, burst: 1000000000, algorithm: gcra }\n"
    "      - { rate: 1000000000/s, algorithm: fixed_window }\n"
    "      - { rate: 1000000000/s, algorithm: sliding_window }\n"
    "  - { name: conc, key: [], algorithm: concurrency, limits: [ { max: 1000000 } ] }\n";

static int engine(const char *pol, long n) {
    sl_config *cfg;
    sl_diag_list dl;
    if (sl_config_load_buffer(cfg_text, strlen(cfg_text), "bench", &cfg, &dl) != 0) return 1;
    int err;
    char eb[256];
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *e = sl_engine_create(cfg, st, &err, eb, sizeof(eb));
    if (e == NULL) return 1;
    static sl_verdict v;
    sluice_time t = {1000000000, INT64_C(1700000000000000000)};
    for (long i = 0; i < n; i++) {
        char key[16];
        int kl = snprintf(key, sizeof(key), "k%d", (int)(i % 1000));
        t.mono_ns += 10;
        t.wall_ns += 10;
        sl_engine_check_named(e, pol, key, (size_t)kl, false, 0, t, &v);
        if (v.items[0].result.lease) sl_engine_release(e, &v, t);
    }
    sl_engine_destroy(e);
    sluice_store_destroy(st);
    sl_config_destroy(cfg);
    return 0;
}

static int lib(int items, long n) {
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sluice_limit_spec g = {.algo = SLUICE_GCRA, .name = "g", .limit = 1000000000, .period_ns = 1000000000,
                           .burst = 1000000000};
    sluice_limit_spec f = {.algo = SLUICE_FIXED_WINDOW, .name = "f", .limit = 1000000000, .period_ns = 1000000000};
    sluice_limiter *l1 = sluice_limiter_create(&g, &err, NULL, 0), *l2 = sluice_limiter_create(&f, &err, NULL, 0);
    sluice_store_register(st, l1);
    sluice_store_register(st, l2);
    sluice_time t = {1000000000, INT64_C(1700000000000000000)};
    sluice_decision d;
    for (long i = 0; i < n; i++) {
        unsigned k = (unsigned)(i % 1000);
        sluice_item it[2] = {{l1, &k, sizeof(k), 1}, {l2, &k, sizeof(k), 1}};
        t.mono_ns += 10;
        t.wall_ns += 10;
        sluice_decide(st, it, (size_t)items, t, &d);
    }
    sluice_limiter_destroy(l1);
    sluice_limiter_destroy(l2);
    sluice_store_destroy(st);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: decision_cost engine one|three|conc N | decision_cost lib 1|2 N\n");
        return 2;
    }
    long n = atol(argv[3]);
    if (strcmp(argv[1], "engine") == 0) return engine(argv[2], n);
    return lib(atoi(argv[2]) == 2 ? 2 : 1, n);
}
