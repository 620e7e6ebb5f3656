/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topk_bench.c -- the cost of hot-key tracking on the decision path: ns per sl_topk_add
 * for sketches of 64, 256 and 1024 counters under three traffics over 100 000 keys (one
 * hot key taking 90 %, a Zipf(1) skew, and every key new: each update evicts, the worst
 * case), with key hashes computed beforehand (the decision path already has the key's
 * hash) and, for reference, with the SipHash of "user:<n>" included; the epoch turnover
 * (once per interval per sketch) and a merged read of two worker sketches (scrape time).
 * Usage: topk_bench [-s SECONDS per case] (default 0.3). One thread; times are the thread's
 * CPU time (time descheduled by other work on the shared cores left out).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"
#include "core/topk.h"

#define NKEYS 100000
#define STREAM (1 << 20) /* precomputed updates, replayed */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* This thread's CPU time: on shared cores, time spent descheduled is not the sketch's. */
static int64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t xr(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static size_t fmt_key(char *buf, uint64_t n) {
    char tmp[24];
    size_t len = 0;
    memcpy(buf, "user:", 5);
    do tmp[len++] = (char)('0' + n % 10); while ((n /= 10) != 0);
    for (size_t i = 0; i < len; i++) buf[5 + i] = tmp[len - 1 - i];
    return 5 + len;
}

static sl_hash_key hk = {0x0123456789abcdefull, 0x0fedcba987654321ull};
static uint64_t *ids, *hashes, *weights;
static uint64_t sink;
static int distinct; /* the traffic of new keys: each replay shifts them to unseen ones */

static void make_stream(const char *traffic) {
    uint64_t s = 0x9e3779b97f4a7c15ull;
    double *cdf = NULL;
    if (strcmp(traffic, "zipf") == 0) {
        cdf = malloc(NKEYS * sizeof(double));
        double acc = 0;
        for (int i = 0; i < NKEYS; i++) cdf[i] = (acc += 1.0 / (i + 1));
        for (int i = 0; i < NKEYS; i++) cdf[i] /= acc;
    }
    for (uint64_t i = 0; i < STREAM; i++) {
        uint64_t r = xr(&s), id;
        if (strcmp(traffic, "hot90") == 0) {
            id = r % 10 ? 0 : 1 + (r >> 8) % (NKEYS - 1);
        } else if (cdf) {
            double u = (double)(r >> 11) / 9007199254740992.0;
            size_t lo = 0, hi = NKEYS - 1;
            while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (cdf[mid] < u)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            id = lo;
        } else { /* distinct: never the same key twice */
            id = (uint64_t)1000000000 + i;
        }
        ids[i] = id;
        hashes[i] = sl_topk_key_hash(&hk, &id, sizeof(id));
        weights[i] = 1 + (r >> 40) % 4;
    }
    free(cdf);
    distinct = strcmp(traffic, "distinct") == 0;
}

/* Replays the stream for `secs`, the clock read once per 256 updates (as the decision
 * path passes its one reading down). Returns CPU ns per update. */
static double run(sl_topk *t, double secs, int with_hash) {
    char kb[32];
    uint64_t n = 0;
    int64_t start = now_ns(), end = start + (int64_t)(secs * 1e9), now = start, cpu0 = cpu_ns();
    int distinct_offset = 0;
    while (now < end) {
        for (uint64_t i = 0; i < STREAM; i += 256) {
            now = now_ns();
            for (uint64_t j = i; j < i + 256; j++) {
                uint64_t h = hashes[j];
                if (with_hash) {
                    size_t len = fmt_key(kb, ids[j] + (uint64_t)distinct_offset);
                    h = sl_hash128_of(&hk, kb, len).lo;
                } else if (distinct_offset) {
                    h ^= (uint64_t)distinct_offset * 0x9E3779B97F4A7C15ull; /* new keys again */
                }
                sl_topk_add(t, now, h, NULL, 0, weights[j], (int)(h & 1));
            }
            n += 256;
            if (now >= end) break;
        }
        distinct_offset += distinct;
    }
    return (double)(cpu_ns() - cpu0) / (double)n;
}

int main(int argc, char **argv) {
    double secs = 0.3;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-s") && i + 1 < argc) secs = atof(argv[++i]);
    if (secs <= 0 || secs > 30) secs = 0.3;
    ids = malloc(STREAM * sizeof(uint64_t));
    hashes = malloc(STREAM * sizeof(uint64_t));
    weights = malloc(STREAM * sizeof(uint64_t));
    if (!ids || !hashes || !weights) return 1;
    const char *traffics[] = {"hot90", "zipf", "distinct"};
    const unsigned ks[] = {64, 256, 1024};
    printf("-- hot keys (sl_topk_add), one thread, key hash given (+ with SipHash of the key)\n");
    for (int tr = 0; tr < 3; tr++) {
        make_stream(traffics[tr]);
        for (int ki = 0; ki < 3; ki++) {
            sl_topk_config c = {ks[ki], 10 * 1000000000ll, 0};
            sl_topk *t;
            if (sl_topk_create(&t, &c) != 0) return 1;
            run(t, secs / 4, 0); /* warm */
            double ns = run(t, secs, 0);
            double nsh = run(t, secs, 1);
            printf("topk k=%-4u traffic=%-8s | %6.1f ns/update | %6.1f ns with the key's hash | %zu bytes\n",
                   ks[ki], traffics[tr], ns, nsh, sl_topk_bytes(t));
            sl_topk_destroy(t);
        }
    }
    /* the epoch turnover: one update that starts a new epoch (clears a bank) */
    for (int ki = 0; ki < 3; ki++) {
        sl_topk_config c = {ks[ki], 1000, 0};
        sl_topk *t;
        if (sl_topk_create(&t, &c) != 0) return 1;
        for (uint64_t i = 0; i < 4 * ks[ki]; i++) sl_topk_add(t, 0, hashes[i], NULL, 0, 1, 0);
        int64_t start = cpu_ns();
        int rounds = 2000;
        for (int r = 1; r <= rounds; r++) {
            sl_topk_add(t, (int64_t)r * 1000, hashes[r], NULL, 0, 1, 0);
            for (unsigned i = 0; i < ks[ki]; i++) sl_topk_add(t, (int64_t)r * 1000, hashes[i + r], NULL, 0, 1, 0);
        }
        double per_round = (double)(cpu_ns() - start) / rounds;
        printf("topk k=%-4u epoch turnover + %u updates | %8.1f ns per epoch\n", ks[ki], ks[ki], per_round);
        sl_topk_destroy(t);
    }
    /* scrape: merge two full worker sketches */
    for (int ki = 0; ki < 3; ki++) {
        sl_topk_config c = {ks[ki], 10 * 1000000000ll, 0};
        sl_topk *w[2];
        for (int i = 0; i < 2; i++) {
            if (sl_topk_create(&w[i], &c) != 0) return 1;
            for (uint64_t j = 0; j < STREAM / 4; j++) sl_topk_add(w[i], 5, hashes[j] + (uint64_t)i * (j & 1), NULL, 0, 1, 0);
        }
        sl_topk_entry e[10];
        sl_topk_totals tot;
        int64_t start = cpu_ns();
        int reads = 200;
        for (int r = 0; r < reads; r++) sink += (uint64_t)sl_topk_read(w, 2, 6, e, 10, &tot);
        printf("topk k=%-4u read (merge of 2 sketches, top 10) | %8.1f us\n", ks[ki],
               (double)(cpu_ns() - start) / reads / 1000.0);
        sl_topk_destroy(w[0]);
        sl_topk_destroy(w[1]);
    }
    free(ids);
    free(hashes);
    free(weights);
    return sink == 42 ? 1 : 0;
}
