/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_series.c -- the console's per-second ring (src/server/series.c) fed directly:
 * 100 000 decisions per second over several series and results give exact totals per
 * second against a reference count; memory stays what sl_series_bytes says (nothing is
 * allocated while counting); a ring of N seconds answers the last N and forgets older
 * ones when it wraps; a clock that jumps back or forward beyond the ring loses nothing of
 * the seconds it then holds; two workers' rings sum; a reader racing the writer never
 * sees more than was written.
 */
#include "t.h"

#include <malloc.h>
#include <pthread.h>

#include "server/series.h"

#define S(x) ((int64_t)(x) * SLUICE_NS_PER_S)
#define NR SL_MET_RESULTS

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* 100 k decisions a second for 30 s, spread over 5 series and 4 results, against a
 * reference table; memory does not move while counting. */
static void test_rate_totals_memory(void) {
    enum { SECS = 30, PER_S = 100000, NSER = 8 };
    sl_series_w *sw = sl_series_worker_new(60, NSER);
    T_CHECK(sw != NULL);
    if (sw == NULL) return;
    static uint64_t ref[SECS][NSER][NR];
    memset(ref, 0, sizeof(ref));
    uint64_t seed = 42;
    int64_t t0 = S(1800000000);
    struct mallinfo2 before = mallinfo2();
    for (int s = 0; s < SECS; s++) {
        for (int i = 0; i < PER_S; i++) {
            unsigned slot = 1 + (unsigned)(lcg(&seed) % 5), r = (unsigned)(lcg(&seed) % 4);
            int64_t t = t0 + S(s) + (int64_t)i * (SLUICE_NS_PER_S / PER_S);
            sl_series_count(sw, t, slot, r);
            ref[s][slot][r]++;
        }
    }
    struct mallinfo2 after = mallinfo2();
    T_EQ_U(after.uordblks, before.uordblks);
    T_EQ_U(sl_series_bytes(60, NSER), sizeof(sl_series_w) + 60 * 8 + 60 * NSER * NR * 4);
    uint64_t out[SECS * NR];
    uint64_t grand = 0;
    for (unsigned slot = 0; slot < NSER; slot++) {
        sl_series_read(&sw, 1, slot, t0 / SLUICE_NS_PER_S + SECS - 1, SECS, out);
        for (int s = 0; s < SECS; s++)
            for (unsigned r = 0; r < NR; r++) {
                if (out[s * NR + r] != ref[s][slot][r])
                    T_FAIL("slot %u second %d result %u: %llu != %llu", slot, s, r,
                           (unsigned long long)out[s * NR + r], (unsigned long long)ref[s][slot][r]);
                grand += out[s * NR + r];
            }
    }
    T_EQ_U(grand, (uint64_t)SECS * PER_S);
    /* a slot beyond the ring's series is not counted, nor a bad result */
    sl_series_count(sw, t0 + S(SECS - 1), NSER + 3, 0);
    sl_series_count(sw, t0 + S(SECS - 1), 1, NR);
    sl_series_read(&sw, 1, 1, t0 / SLUICE_NS_PER_S + SECS - 1, 1, out);
    uint64_t last = 0;
    for (unsigned r = 0; r < NR; r++) last += out[r];
    uint64_t want = 0;
    for (unsigned r = 0; r < NR; r++) want += ref[SECS - 1][1][r];
    T_EQ_U(last, want);
    sl_series_worker_free(sw);
}

/* A 10-second ring: the last 10 seconds exact, older ones read as zero; asking for more
 * seconds than the ring holds answers what it holds (the caller clamps: read 20, the
 * first 10 are zero). */
static void test_wrap(void) {
    sl_series_w *sw = sl_series_worker_new(10, 2);
    int64_t b = 1700000000;
    for (int s = 0; s < 25; s++)
        for (int i = 0; i <= s; i++) sl_series_count(sw, S(b + s) + i, 1, 0); /* s+1 in second s */
    uint64_t out[20 * NR];
    sl_series_read(&sw, 1, 1, b + 24, 20, out);
    for (int k = 0; k < 20; k++) {
        int s = 24 - 19 + k; /* the second of out[k] */
        uint64_t want = s > 24 - 10 ? (uint64_t)(s + 1) : 0;
        if (out[k * NR] != want) T_FAIL("second %d: %llu != %llu", s, (unsigned long long)out[k * NR], (unsigned long long)want);
    }
    sl_series_worker_free(sw);
}

/* Clock jumps: back by more than the ring (a test clock set earlier) and forward by much
 * more; each second then counted is exact, and a second from before the jump that the
 * ring no longer holds reads as zero. */
static void test_clock_jumps(void) {
    sl_series_w *sw = sl_series_worker_new(10, 2);
    int64_t b = 1700000000;
    for (int i = 0; i < 7; i++) sl_series_count(sw, S(b) + i, 1, 1);
    for (int i = 0; i < 3; i++) sl_series_count(sw, S(b - 100) + i, 1, 1);  /* back 100 s */
    for (int i = 0; i < 5; i++) sl_series_count(sw, S(b + 5003) + i, 1, 1); /* forward */
    sl_series_count(sw, S(b + 5003) - 1, 1, 1);                              /* 1 ns before */
    uint64_t out[2 * NR];
    sl_series_read(&sw, 1, 1, b + 5003, 2, out);
    T_EQ_U(out[0 * NR + 1], 1);
    T_EQ_U(out[1 * NR + 1], 5);
    sl_series_read(&sw, 1, 1, b - 100, 1, out);
    T_EQ_U(out[1], 3);
    sl_series_read(&sw, 1, 1, b, 1, out); /* b's row was taken by b-100 (same row) */
    T_EQ_U(out[1], 0);
    /* before 1970 (a manual clock can be set there): floor division, no negative row */
    sl_series_count(sw, -1, 1, 2);
    sl_series_read(&sw, 1, 1, -1, 1, out);
    T_EQ_U(out[2], 1);
    sl_series_worker_free(sw);
}

/* Two workers' rings are summed per second. */
static void test_two_workers(void) {
    sl_series_w *w[2] = {sl_series_worker_new(30, 4), sl_series_worker_new(30, 4)};
    int64_t b = 1750000000;
    for (int s = 0; s < 5; s++) {
        for (int i = 0; i < 100; i++) sl_series_count(w[0], S(b + s) + i, 2, 0);
        for (int i = 0; i < 50 * s; i++) sl_series_count(w[1], S(b + s) + i, 2, 0);
    }
    uint64_t out[5 * NR];
    sl_series_read(w, 2, 2, b + 4, 5, out);
    for (int s = 0; s < 5; s++) T_EQ_U(out[s * NR], 100 + 50 * (uint64_t)s);
    sl_series_worker_free(w[0]);
    sl_series_worker_free(w[1]);
    T_CHECK(sl_series_worker_new(0, 4) == NULL); /* seconds 0: the ring is off */
}

/* A reader racing the writer: every read of a second is at most what was written in it,
 * and once the writer is done the totals are exact. */
typedef struct race {
    sl_series_w *sw;
    int64_t b;
    _Atomic int done;
} race;

static void *writer(void *arg) {
    race *rc = arg;
    for (int s = 0; s < 40; s++)
        for (int i = 0; i < 20000; i++) sl_series_count(rc->sw, S(rc->b + s) + i, 1, 0);
    atomic_store(&rc->done, 1);
    return NULL;
}

static void test_reader_races_writer(void) {
    race rc = {sl_series_worker_new(16, 2), 1760000000, 0};
    pthread_t th;
    pthread_create(&th, NULL, writer, &rc);
    uint64_t out[16 * NR];
    int reads = 0;
    while (!atomic_load(&rc.done) && reads < 1000000) {
        sl_series_read(&rc.sw, 1, 1, rc.b + 39, 16, out);
        for (int k = 0; k < 16; k++)
            if (out[k * NR] > 20000) T_FAIL("a second read as %llu", (unsigned long long)out[k * NR]);
        reads++;
    }
    pthread_join(th, NULL);
    sl_series_read(&rc.sw, 1, 1, rc.b + 39, 16, out);
    for (int k = 0; k < 16; k++) T_EQ_U(out[k * NR], 20000);
    sl_series_worker_free(rc.sw);
}

int main(void) {
    T_RUN(test_rate_totals_memory);
    T_RUN(test_wrap);
    T_RUN(test_clock_jumps);
    T_RUN(test_two_workers);
    T_RUN(test_reader_races_writer);
    return T_DONE();
}
