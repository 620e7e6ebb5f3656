// SPDX-License-Identifier: Apache-2.0
/*
 * overrides_bench.c -- per-key overrides at scale (bench/run_overrides.sh, docs/overrides.md):
 *   overrides_bench load N             N overrides with their own numbers into the memory
 *                                      store: time, memory per override (RSS), snapshot
 *                                      write and restore time and size
 *   overrides_bench decide N M K [own] M decisions over K warm keys with N overrides loaded
 *                                      (own: the decided keys have overrides themselves);
 *                                      CPU ns per decision (for callgrind: instructions)
 * The engine and the memory store as the server drives them, without the server's I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/compiled.h"
#include "config/config.h"
#include "engine/engine.h"
#include "sluice.h"
#include "store/memory/override.h"

static const char cfg_text[] =
    "policies:\n"
    "  - { name: api, key: [], algorithm: gcra, limits: [ { rate: 1000000/s, burst: 1000000 } ] }\n";

static double now_s(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) v = atol(line + 6);
    if (f) fclose(f);
    return v;
}

typedef struct fx {
    sl_config *cfg;
    sluice_store *st;
    sl_engine *e;
    sl_ovr_table *t;
} fx;

static int open_fx(fx *f) {
    sl_diag_list *dl = calloc(1, sizeof(*dl));
    if (sl_config_load_buffer(cfg_text, strlen(cfg_text), "bench", &f->cfg, dl) != 0) return 1;
    free(dl);
    int err;
    char eb[256];
    sluice_store_options o = {0};
    o.max_keys = 4000000;
    f->st = sluice_store_create(&o, &err);
    f->e = sl_engine_create(f->cfg, f->st, &err, eb, sizeof(eb));
    if (f->e == NULL) return 1;
    f->t = sl_store_overrides(f->st);
    sl_ovr_set_max(f->t, 100000000);
    return 0;
}

/* Override i: its own numbers (1000 + i % 5000 per second), as an import line makes it. */
static int put_one(fx *f, long i, int64_t now_wall) {
    char key[32], txt[96];
    snprintf(key, sizeof(key), "cust-%ld", i);
    snprintf(txt, sizeof(txt), "{\"rate\": \"%ld/s\", \"burst\": %ld}", 1000 + i % 5000, 1000 + i % 5000);
    sl_cwindow w;
    char label[64], err[256], why[256];
    if (sl_config_override_window(txt, strlen(txt), SLUICE_GCRA, &w, label, sizeof(label), err,
                                  sizeof(err)) != 0)
        return 1;
    sl_ovr_rec tm;
    memset(&tm, 0, sizeof(tm));
    const char *names[1] = {NULL};
    if (sl_engine_ovr_compile(f->e, "api", &w, names, 1, tm.win, why, sizeof(why)) != 0) return 1;
    tm.nwin = 1;
    tm.kind = SL_OVR_LIMITS;
    const void *parts[1] = {key};
    size_t lens[1] = {strlen(key)};
    tm.h = sl_ovr_hash_parts(f->t, "api", parts, lens, 1);
    tm.set_at_ns = now_wall;
    char label2[40];
    snprintf(label2, sizeof(label2), "Customer %ld", i);
    sl_ovr_rec *r = sl_ovr_rec_new(&tm, "api", NULL, 0, NULL, NULL, label2, "bench", txt);
    bool created;
    sl_ovr_rec *old;
    if (r == NULL || sl_ovr_put(f->t, r, now_wall, &created, &old) != 0) return 1;
    sl_ovr_rec_free(old);
    return 0;
}

static int load(long n) {
    fx f;
    if (open_fx(&f)) return 1;
    sluice_time t = {1000000000, INT64_C(1767225600) * 1000000000};
    long r0 = rss_kib();
    double t0 = now_s(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++)
        if (put_one(&f, i, t.wall_ns)) return 1;
    double t1 = now_s(CLOCK_MONOTONIC);
    long r1 = rss_kib();
    printf("load: %ld overrides in %.2f s (%.0f per second), memory %.0f bytes per override\n", n,
           t1 - t0, n / (t1 - t0), (double)(r1 - r0) * 1024.0 / (double)n);
    char path[] = "/tmp/sl_ovr_benchXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    double t2 = now_s(CLOCK_MONOTONIC);
    if (sluice_store_snapshot(f.st, path, t) != 0) return 1;
    double t3 = now_s(CLOCK_MONOTONIC);
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fclose(fp);
    fx g;
    if (open_fx(&g)) return 1;
    uint64_t skipped;
    char eb[256];
    double t4 = now_s(CLOCK_MONOTONIC);
    if (sluice_store_restore(g.st, path, t, &skipped, eb, sizeof(eb)) != 0) return 1;
    double t5 = now_s(CLOCK_MONOTONIC);
    printf("persist: snapshot %.2f s, %ld bytes (%.0f per override); restore %.2f s, %llu back\n",
           t3 - t2, sz, (double)sz / (double)n, t5 - t4, (unsigned long long)sl_ovr_count(g.t));
    unlink(path);
    return sl_ovr_count(g.t) == (uint64_t)n ? 0 : 1;
}

static int decide(long n, long m, long k, bool own) {
    fx f;
    if (open_fx(&f)) return 1;
    sluice_time t = {1000000000, INT64_C(1767225600) * 1000000000};
    for (long i = 0; i < n; i++)
        if (put_one(&f, i, t.wall_ns)) return 1;
    char (*keys)[32] = calloc((size_t)k, 32);
    for (long i = 0; i < k; i++) snprintf(keys[i], 32, own ? "cust-%ld" : "warm-%ld", i);
    static sl_verdict v;
    for (long i = 0; i < k; i++) /* warm: every key has its state and its lines cached */
        sl_engine_check_named(f.e, "api", keys[i], strlen(keys[i]), true, 1, t, &v);
    double c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    long allowed = 0;
    for (long i = 0; i < m; i++) {
        const char *key = keys[i % k];
        t.mono_ns += 1000;
        t.wall_ns += 1000;
        sl_engine_check_named(f.e, "api", key, strlen(key), true, 1, t, &v);
        allowed += v.action == SL_ALLOW;
    }
    double c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    printf("decide: %ld overrides loaded, %ld decisions over %ld %s keys: %.1f ns CPU per decision "
           "(%ld allowed)\n", n, m, k, own ? "overridden" : "plain", (c1 - c0) * 1e9 / (double)m, allowed);
    free(keys);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "load") == 0) return load(atol(argv[2]));
    if (argc >= 5 && strcmp(argv[1], "decide") == 0)
        return decide(atol(argv[2]), atol(argv[3]), atol(argv[4]), argc > 5 && strcmp(argv[5], "own") == 0);
    fprintf(stderr, "usage: overrides_bench load N | decide N M K [own]\n");
    return 2;
}
