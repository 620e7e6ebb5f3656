/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_histogram.c -- the replay's log-linear histogram (src/tools/histogram.c, included to
 * reach its static bucket functions): every value lands in a bucket whose bounds hold it
 * (exact below 64, within 1/32 above), the bounds the reports draw (rp_hist_lower) tile
 * the range with no gap, and quantiles, counts above and suggested limits agree with an
 * exact sorted reference over random values to bucket resolution.
 */
#include "tools/histogram.c"

#include "t.h"

static rp_hist H;

static void test_buckets_hold_their_values_and_tile_the_range(void) {
    for (unsigned i = 0; i + 1 < RP_HIST; i++) {
        T_CHECK(rp_hist_lower(i) <= hist_upper(i));
        T_EQ_U(hist_upper(i) + 1, rp_hist_lower(i + 1));
        T_EQ_U(hist_index(rp_hist_lower(i)), i);
        T_EQ_U(hist_index(hist_upper(i)), i);
    }
    uint64_t s = t_seed();
    for (int k = 0; k < 200000; k++) {
        uint64_t v = t_rand(&s) >> (t_rand(&s) % 64);
        unsigned i = hist_index(v);
        T_CHECK(i < RP_HIST);
        T_CHECK(rp_hist_lower(i) <= v && v <= hist_upper(i));
        if (v < 64) T_EQ_U(rp_hist_lower(i), v);
        else T_CHECK(hist_upper(i) - rp_hist_lower(i) < v / 32 + 1);
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_quantiles_above_and_suggest_against_sorted_values(void) {
    enum { N = 20000 };
    static uint64_t v[N];
    uint64_t s = t_seed();
    memset(&H, 0, sizeof(H));
    for (int k = 0; k < N; k++) {
        v[k] = t_rand(&s) % 100000 >> (t_rand(&s) % 12);
        rp_hist_add(&H, v[k]);
    }
    qsort(v, N, sizeof(v[0]), cmp_u64);
    T_EQ_U(H.n, N);
    T_EQ_U(H.max, v[N - 1]);
    const double qs[] = {0.01, 0.5, 0.9, 0.99, 0.999, 1.0};
    for (size_t j = 0; j < sizeof(qs) / sizeof(qs[0]); j++) {
        size_t rank = (size_t)(qs[j] * N + 0.999999); /* ceil(q*n) */
        uint64_t exact = v[rank - 1], got = rp_hist_quantile(&H, qs[j]);
        T_CHECK(got >= exact && got <= exact + exact / 32 + 1);
    }
    for (uint64_t x = 0; x < 100000; x += 997) {
        size_t exact = 0;
        for (int k = 0; k < N; k++) exact += v[k] > x;
        uint64_t got = rp_hist_above(&H, x);
        if (x < 64) T_EQ_U(got, exact);
        /* bucket resolution: counts of the bucket holding x may be in or out */
        size_t lo = 0, hi = 0;
        for (int k = 0; k < N; k++) lo += v[k] > hist_upper(hist_index(x)), hi += v[k] >= rp_hist_lower(hist_index(x));
        T_CHECK(got >= lo && got <= hi);
    }
    uint64_t lim = rp_hist_suggest(&H, 0.01);
    size_t over = 0;
    for (int k = 0; k < N; k++) over += v[k] > lim;
    T_CHECK(over <= N / 100);
}

int main(void) {
    T_RUN(test_buckets_hold_their_values_and_tile_the_range);
    T_RUN(test_quantiles_above_and_suggest_against_sorted_values);
    return T_DONE();
}
