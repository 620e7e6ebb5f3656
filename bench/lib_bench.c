/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lib_bench.c -- libsluice decision cost over the memory store, shaped like the naive
 * table's "str+hash" case (bench/naive_tb.c) so the two compare: keys "user:<n>" drawn
 * uniformly at random (same xorshift64* and pick), formatted without snprintf, the clock
 * read once per 256 decisions, one limit per decision, rate 100/s with capacity 100.
 * Cases: GCRA and token bucket x key counts x 1 and 2 threads (2 threads on disjoint
 * key halves, so they share no key but do share shards), plus the hash alone. The
 * "batch16" rows decide the same traffic 16 items per sluice_decide_batch call (a
 * pipelined caller); the per-decision "str+hash" rows are the comparison with naive.
 *
 * Usage: lib_bench [-s SECONDS] [-T 1|2] [-a gcra|token_bucket] [-n DECISIONS] [NKEYS...]
 *        defaults: 1.5 s, up to 2 threads, both algorithms, 1000 100000 10000000;
 *        -T 1 skips the 2-thread cases; -n runs each case for exactly DECISIONS (a
 *        multiple of 4096 * 256 = 1048576 per thread) instead of SECONDS, which makes
 *        instruction counts repeatable:
 *          valgrind --tool=callgrind --toggle-collect=run lib_bench -T 1 -a gcra -n 1 100000
 *          callgrind_annotate --inclusive=yes callgrind.out.* | grep sluice_decide
 *        then Ir / 1048576 per decision (sluice_decide: str+hash, sluice_decide_batch: batch16).
 *        lib_bench -hash [-s SECONDS]         the hash alone, SipHash-1-3 vs -2-4
 *        lib_bench -mem [-T 1|2] [NKEYS...]   the host's 2T/1T ceiling, nothing shared
 *        lib_bench -flood [NFLOOD]            a key flood at full speed on the real clock:
 *            max_keys 100,000, NFLOOD (default 10,000,000) rotating attacker keys on two
 *            limiters, 1,000 keys active at 1 request/s and 400 exhausted keys retrying
 *            each second, every victim decision compared with an unflooded store;
 *            prints resets, evictions, bytes, RSS and the attacker's ns/decision
 * Output: RESULT lines, one per case (bench/run_lib.sh turns them into a table).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/hash.h"
#include "sluice.h"

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU time of the calling thread: on shared cores, time spent descheduled is not the
 * store's cost; the "cpu" figures leave it out (cache effects of other work stay in). */
static inline int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "user:<n>", as in the naive benchmark */
static inline size_t fmt_key(char *buf, uint64_t n) {
    char tmp[24];
    size_t len = 0;
    memcpy(buf, "user:", 5);
    do {
        tmp[len++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    for (size_t i = 0; i < len; i++) buf[5 + i] = tmp[len - 1 - i];
    return 5 + len;
}

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t xrand(rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

static inline uint64_t pick(rng *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)xrand(r) * n) >> 64);
}

static uint64_t fixed_chunks; /* -n: rounds of 4096 * 256 decisions per case, 0 = timed */

#define MAX_BATCH 16 /* divides 256: a batch never spans a clock reading */

typedef struct run_arg {
    sluice_store *st;
    const sluice_limiter *lim;
    uint64_t nkeys;
    int nthreads, tid;
    int batch; /* 0: one sluice_decide per decision; else items per sluice_decide_batch */
    double secs;
    uint64_t ops, allowed, errors;
    int64_t elapsed, cpu; /* wall and this thread's CPU time, ns */
    pthread_barrier_t *bar;
} run_arg;

/* Keys of thread t are those with n % nthreads == t: disjoint sets of keys. */
static void *run(void *p) {
    run_arg *a = p;
    rng r = {88172645463325252ull + (uint64_t)a->tid * 0x9e3779b97f4a7c15ull};
    uint64_t per = a->nkeys / (uint64_t)a->nthreads;
    char buf[32];
    sluice_decision d;
    char bbuf[MAX_BATCH][32];
    sluice_item its[MAX_BATCH];
    sluice_result res[MAX_BATCH];
    pthread_barrier_wait(a->bar);
    int64_t c0 = thread_cpu_ns();
    int64_t t0 = now_ns(), end = t0 + (int64_t)(a->secs * 1e9), t1;
    do {
        for (int chunk = 0; chunk < 4096; chunk++) {
            sluice_time now = {now_ns(), 0};
            now.wall_ns = now.mono_ns; /* unused by these algorithms */
            if (a->batch > 0) {
                /* the same keys and clock, handed over BATCH at a time */
                for (int j = 0; j < 256; j += a->batch) {
                    for (int b = 0; b < a->batch; b++) {
                        uint64_t n = pick(&r, per) * (uint64_t)a->nthreads + (uint64_t)a->tid;
                        its[b] = (sluice_item){a->lim, bbuf[b], fmt_key(bbuf[b], n), 1};
                    }
                    int got = sluice_decide_batch(a->st, its, (size_t)a->batch, now, res);
                    for (int b = 0; b < got; b++) a->allowed += (uint64_t)res[b].allowed;
                    a->errors += (uint64_t)(got != a->batch);
                }
            } else {
                for (int j = 0; j < 256; j++) {
                    uint64_t n = pick(&r, per) * (uint64_t)a->nthreads + (uint64_t)a->tid;
                    sluice_item it = {a->lim, buf, fmt_key(buf, n), 1};
                    int rc = sluice_decide(a->st, &it, 1, now, &d);
                    a->allowed += (uint64_t)(rc == SLUICE_OK && d.allowed);
                    a->errors += (uint64_t)(rc != SLUICE_OK);
                }
            }
            a->ops += 256;
        }
        t1 = now_ns();
    } while (fixed_chunks ? a->ops < fixed_chunks * 4096 * 256 : t1 < end);
    a->elapsed = t1 - t0;
    a->cpu = thread_cpu_ns() - c0;
    return NULL;
}

static int max_threads = 2;

static void bench_case(sluice_algo algo, uint64_t nkeys, double secs) {
    sluice_store_options o = {.max_keys = nkeys, .on_full = SLUICE_EVICT_LRU};
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err);
    sluice_limit_spec s = {.algo = algo, .name = "bench", .limit = 100,
                           .period_ns = SLUICE_NS_PER_S, .burst = 100};
    sluice_limiter *lim = sluice_limiter_create(&s, &err, NULL, 0);
    if (st == NULL || lim == NULL || sluice_store_register(st, lim) != SLUICE_OK) {
        fprintf(stderr, "lib_bench: setup failed (%d)\n", err);
        exit(1);
    }
    const char *name = sluice_algo_name(algo);
    /* insert every key once, in order (first touch of the table's pages) */
    char buf[32];
    sluice_decision d;
    int64_t t0 = now_ns();
    sluice_time now = {t0, wall_ns()};
    for (uint64_t n = 0; n < nkeys; n++) {
        if ((n & 255) == 0) now.mono_ns = now_ns();
        sluice_item it = {lim, buf, fmt_key(buf, n), 1};
        sluice_decide(st, &it, 1, now, &d);
    }
    double ins = (double)(now_ns() - t0) / (double)nkeys;
    sluice_store_stats ss;
    sluice_store_stats_get(st, &ss);
    double bpk = ss.keys ? (double)ss.bytes / (double)ss.keys : 0;
    printf("RESULT | sluice %-12s insert       keys=%-9llu threads=1 | %8.1f ns/decision | "
           "bytes/key %.1f | keys %llu\n",
           name, (unsigned long long)nkeys, ins, bpk, (unsigned long long)ss.keys);
    for (int batch = 0; batch <= MAX_BATCH; batch += MAX_BATCH) {
    double one_rate = 0, one_cpu = 0;
    for (int nt = 1; nt <= max_threads; nt++) {
        run_arg a[2];
        pthread_t th[2];
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nt);
        for (int t = 0; t < nt; t++) {
            a[t] = (run_arg){st, lim, nkeys, nt, t, batch, secs, 0, 0, 0, 0, 0, &bar};
            pthread_create(&th[t], NULL, run, &a[t]);
        }
        uint64_t ops = 0, allowed = 0, errors = 0;
        int64_t el = 0, cpu = 0;
        for (int t = 0; t < nt; t++) {
            pthread_join(th[t], NULL);
            ops += a[t].ops, allowed += a[t].allowed, errors += a[t].errors;
            if (a[t].elapsed > el) el = a[t].elapsed;
            cpu += a[t].cpu;
        }
        double cpu_ns = (double)cpu / (double)ops; /* CPU ns per decision, per thread */
        if (nt == 1) one_cpu = cpu_ns;
        pthread_barrier_destroy(&bar);
        double rate = (double)ops / ((double)el / 1e9);
        double ns = 1e9 / rate * nt; /* per decision, per thread */
        if (nt == 1) one_rate = rate;
        printf("RESULT | sluice %-12s %-12s keys=%-9llu threads=%d | %8.1f ns/decision | "
               "%12.0f decisions/s | allowed %.1f%% | scaling %.2fx | errors %llu | "
               "cpu %.1f ns/decision, cpu scaling %.2fx\n",
               name, batch ? "batch16" : "str+hash", (unsigned long long)nkeys, nt, ns, rate,
               100.0 * (double)allowed / (double)ops, rate / one_rate,
               (unsigned long long)errors, cpu_ns, nt * one_cpu / cpu_ns);
    }
    }
    sluice_store_stats_get(st, &ss);
    printf("STATS  | sluice %-12s keys=%llu bytes=%llu expired=%llu evicted=%llu refused=%llu\n",
           name, (unsigned long long)ss.keys, (unsigned long long)ss.bytes,
           (unsigned long long)ss.expired, (unsigned long long)ss.evicted,
           (unsigned long long)ss.refused);
    fflush(stdout);
    sluice_store_destroy(st);
    sluice_limiter_destroy(lim);
}

/* The keyed hash alone over pre-formatted "user:<n>" keys with a 16-byte prefix
 * absorbed once, as the store does: SipHash-1-3 (the store's) against SipHash-2-4. */
static void bench_hash(double secs) {
    sl_hash_key k = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    const int cd[2][2] = {{1, 3}, {2, 4}};
    static char keys[4096][16];
    static size_t lens[4096];
    rng r = {88172645463325252ull};
    for (int i = 0; i < 4096; i++) lens[i] = fmt_key(keys[i], pick(&r, 10000000));
    for (int v = 0; v < 2; v++) {
        sl_sip pre;
        sl_sip_init(&pre, &k);
        sl_sip_blocks(&pre, "0123456789abcdef", 2, cd[v][0]);
        uint64_t acc = 0, ops = 0;
        int64_t t0 = now_ns(), end = t0 + (int64_t)(secs * 1e9), t1;
        do {
            for (int j = 0; j < 4096; j++) {
                sl_hash128 h = v == 0 ? sl_sip_finish_store(&pre, keys[j], lens[j])
                                      : sl_sip_finish(&pre, keys[j], lens[j], 2, 4);
                acc += h.lo ^ h.hi;
            }
            ops += 4096;
            t1 = now_ns();
        } while (t1 < end);
        printf("RESULT | hash siphash-%d-%d-128 of \"user:<n>\" | %8.1f ns/hash | (%llx)\n",
               cd[v][0], cd[v][1], (double)(t1 - t0) / (double)ops,
               (unsigned long long)(acc & 0xf));
    }
}

/*
 * The machine's own two-thread ceiling for this kind of work, with nothing shared: each
 * thread walks a private array (together as large as the store's table at this key
 * count) with dependent random read-modify-writes, one 64-byte line per step, like a
 * decision's miss on its entry. Each thread's array is as large as the whole table: in
 * the store each thread's keys are spread over (nearly) every line of it, so that is its
 * footprint; here no line is shared. Why: on shared 2-core hosts the L3 and memory are
 * shared too, so even code with no shared line at all may scale below 2x; the store's
 * 2T/1T figure is to be read against this one, not against 2.00.
 */
typedef struct mem_arg {
    unsigned char *buf;
    size_t lines;
    uint64_t steps, acc;
    int64_t cpu;
    pthread_barrier_t *bar;
} mem_arg;

static void *mem_run(void *p) {
    mem_arg *a = p;
    rng r = {88172645463325252ull ^ (uint64_t)(uintptr_t)a};
    uint64_t v = 0;
    pthread_barrier_wait(a->bar);
    int64_t c0 = thread_cpu_ns();
    for (uint64_t i = 0; i < a->steps; i++) {
        /* the next line depends on the value just read: misses do not overlap */
        uint64_t *w = (uint64_t *)(a->buf + pick(&r, a->lines) * 64 + (v & 7) * 8);
        v = *w + 1;
        *w = v;
        r.s ^= v;
        if (r.s == 0) r.s = 1;
    }
    a->cpu = thread_cpu_ns() - c0;
    a->acc = v;
    return NULL;
}

static void bench_mem(uint64_t nkeys) {
    size_t total = (size_t)nkeys * 42; /* about the store's bytes at this key count */
    if (total < 4096) total = 4096;
    const uint64_t steps = nkeys >= 1000000 ? 4000000 : 16000000; /* ~0.3 s or more per case */
    double one = 0;
    for (int nt = 1; nt <= max_threads; nt++) {
        mem_arg a[2];
        pthread_t th[2];
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nt);
        for (int t = 0; t < nt; t++) {
            /* 2 MiB aligned and huge-page advised, as the store's tables are (at 10M keys
             * 4 KiB pages would make this a TLB benchmark) */
            size_t bytes = (total + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
            a[t] = (mem_arg){aligned_alloc(2u << 20, bytes), bytes / 64, steps, 0, 0, &bar};
            if (a[t].buf == NULL) exit(1);
#ifdef MADV_HUGEPAGE
            (void)madvise(a[t].buf, bytes, MADV_HUGEPAGE);
#endif
            memset(a[t].buf, 0, bytes);
            pthread_create(&th[t], NULL, mem_run, &a[t]);
        }
        double cpu = 0;
        for (int t = 0; t < nt; t++) {
            pthread_join(th[t], NULL);
            cpu += (double)a[t].cpu / (double)steps;
            free(a[t].buf);
        }
        cpu /= nt;
        if (nt == 1) one = cpu;
        pthread_barrier_destroy(&bar);
        printf("RESULT | private memory walk   keys=%-9llu threads=%d | cpu %.1f ns/step, "
               "cpu scaling %.2fx (nothing shared: the host's own ceiling)\n",
               (unsigned long long)nkeys, nt, cpu, nt * one / cpu);
    }
    fflush(stdout);
}

/* ---- -flood -------------------------------------------------------------------------- */

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    if (f != NULL) fclose(f);
    return kb;
}

typedef struct fvictim {
    int lim;
    char key[16];
    int64_t next;
    int exhausted;
} fvictim;

static void bench_flood(uint64_t nflood) {
    enum { NV = 1400 };
    sluice_store_options o = {.max_keys = 100000, .on_full = SLUICE_EVICT_LRU};
    sluice_store_options ro = {.max_keys = 1000000, .on_full = SLUICE_EVICT_LRU};
    int err = 0;
    sluice_store *st = sluice_store_create(&o, &err), *ref = sluice_store_create(&ro, &err);
    sluice_limit_spec specs[2] = {
        {.algo = SLUICE_GCRA, .name = "login", .limit = 3, .period_ns = 3600 * SLUICE_NS_PER_S, .burst = 3},
        {.algo = SLUICE_TOKEN_BUCKET, .name = "api", .limit = 1800, .period_ns = 3600 * SLUICE_NS_PER_S,
         .burst = 3600}};
    sluice_limiter *lim[2];
    for (int i = 0; i < 2; i++) {
        lim[i] = sluice_limiter_create(&specs[i], &err, NULL, 0);
        if (st == NULL || ref == NULL || lim[i] == NULL || sluice_store_register(st, lim[i]) != 0 ||
            sluice_store_register(ref, lim[i]) != 0) {
            fprintf(stderr, "lib_bench: flood setup failed\n");
            exit(1);
        }
    }
    static fvictim v[NV];
    rng r = {88172645463325252ull};
    int64_t t0 = now_ns(), w0 = wall_ns();
    for (int i = 0; i < NV; i++) {
        v[i].exhausted = i < 400;
        v[i].lim = v[i].exhausted ? 0 : 1;
        snprintf(v[i].key, sizeof(v[i].key), "victim%d", i);
        v[i].next = t0 + (int64_t)pick(&r, 1000000000);
    }
    uint64_t decisions = 0, resets = 0;
    /* before the flood: exhausted keys spend everything, active ones are used twice */
    for (int i = 0; i < NV; i++) {
        for (int k = 0; k < (v[i].exhausted ? 4 : 2); k++) {
            sluice_time now = {now_ns(), wall_ns()};
            sluice_item it = {lim[v[i].lim], v[i].key, strlen(v[i].key), 1};
            sluice_decision a, b;
            sluice_decide(st, &it, 1, now, &a);
            sluice_decide(ref, &it, 1, now, &b);
        }
    }
    sluice_store_stats s0;
    sluice_store_stats_get(st, &s0);
    long rss0 = rss_kib();
    char key[32];
    int64_t f0 = now_ns(), victim_ns = 0;
    sluice_time now = {f0, wall_ns()};
    for (uint64_t n = 0; n < nflood; n++) {
        if ((n & 255) == 0) {
            now.mono_ns = now_ns();
            now.wall_ns = w0 + (now.mono_ns - t0);
            int64_t vs = now.mono_ns;
            for (int i = 0; i < NV; i++) { /* victims due: once a second each */
                if (v[i].next > now.mono_ns) continue;
                v[i].next += 1000000000;
                sluice_item it = {lim[v[i].lim], v[i].key, strlen(v[i].key), 1};
                sluice_decision a, b;
                int ra = sluice_decide(st, &it, 1, now, &a), rb = sluice_decide(ref, &it, 1, now, &b);
                decisions++;
                resets += ra != rb || a.allowed != b.allowed ||
                          a.results[0].remaining != b.results[0].remaining;
            }
            victim_ns += now_ns() - vs;
        }
        sluice_item it = {lim[n & 1], key, fmt_key(key, n + 1000000000ull), 1};
        sluice_decision d;
        sluice_decide(st, &it, 1, now, &d);
    }
    int64_t el = now_ns() - f0 - victim_ns;
    sluice_store_stats s1;
    sluice_store_stats_get(st, &s1);
    printf("RESULT | flood keys=%llu max_keys=100000 | %.1f ns/attacker decision | %.1f s | victims "
           "%llu decisions, %llu resets | evicted %llu expired %llu refused %llu | bytes %llu -> %llu "
           "(%.1f/key of capacity) | RSS %ld -> %ld KiB (both stores)\n",
           (unsigned long long)nflood, (double)el / (double)nflood, (double)(now_ns() - f0) / 1e9,
           (unsigned long long)decisions, (unsigned long long)resets,
           (unsigned long long)s1.evicted, (unsigned long long)s1.expired,
           (unsigned long long)s1.refused, (unsigned long long)s0.bytes,
           (unsigned long long)s1.bytes, (double)s1.bytes / 100000.0, rss0, rss_kib());
    for (int i = 0; i < 2; i++) {
        sluice_limiter_stats ls;
        sluice_store_limiter_stats(st, lim[i], &ls);
        printf("STATS  | flood %-6s keys %llu share %llu evicted %llu expired %llu refused %llu\n",
               specs[i].name, (unsigned long long)ls.keys, (unsigned long long)ls.share,
               (unsigned long long)ls.evicted, (unsigned long long)ls.expired,
               (unsigned long long)ls.refused);
    }
    sluice_store_destroy(st);
    sluice_store_destroy(ref);
    for (int i = 0; i < 2; i++) sluice_limiter_destroy(lim[i]);
}

int main(int argc, char **argv) {
    double secs = 1.5;
    uint64_t list[16];
    int nl = 0, hash_only = 0, mem_only = 0, flood = 0;
    const char *only_algo = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            fixed_chunks = (strtoull(argv[++i], NULL, 10) + 1048575) / 1048576;
        else if (!strcmp(argv[i], "-a") && i + 1 < argc)
            only_algo = argv[++i];
        else if (!strcmp(argv[i], "-T") && i + 1 < argc)
            max_threads = atoi(argv[++i]) == 1 ? 1 : 2;
        else if (!strcmp(argv[i], "-hash"))
            hash_only = 1;
        else if (!strcmp(argv[i], "-mem"))
            mem_only = 1;
        else if (!strcmp(argv[i], "-flood"))
            flood = 1;
        else if (nl < 16)
            list[nl++] = strtoull(argv[i], NULL, 10);
    }
    if (nl == 0) {
        list[nl++] = 1000;
        list[nl++] = 100000;
        list[nl++] = 10000000;
    }
    if (secs <= 0 || secs > 60) secs = 1.5;
    if (hash_only) {
        bench_hash(secs);
        return 0;
    }
    if (flood) {
        bench_flood(nl > 0 ? list[0] : 10000000);
        return 0;
    }
    if (mem_only) {
        for (int i = 0; i < nl; i++) bench_mem(list[i]);
        return 0;
    }
    for (int i = 0; i < nl; i++) {
        if (only_algo == NULL || !strcmp(only_algo, "gcra")) bench_case(SLUICE_GCRA, list[i], secs);
        if (only_algo == NULL || !strcmp(only_algo, "token_bucket"))
            bench_case(SLUICE_TOKEN_BUCKET, list[i], secs);
    }
    return 0;
}
