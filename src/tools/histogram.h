/* SPDX-License-Identifier: Apache-2.0 */
/*
 * histogram.h -- the log-linear histogram `sluice replay` counts per-key peaks in
 * (histogram.c): exact below 64, then 32 buckets per power of 2 (3 % resolution), fixed
 * size, no allocation. Used by the run (replay.c) and read by the reports (replay_report.c).
 */
#ifndef SL_TOOLS_HISTOGRAM_H
#define SL_TOOLS_HISTOGRAM_H

#include <stdint.h>

#define RP_HIST 1920       /* log-linear buckets: exact below 64, then 32 per power of 2 */

typedef struct rp_hist {
    uint64_t n;
    uint64_t max;
    uint64_t c[RP_HIST];
} rp_hist;

void rp_hist_add(rp_hist *h, uint64_t v);
/* The least value bucket i holds. */
uint64_t rp_hist_lower(unsigned i);
/* The q-quantile (q in 0..1): the least v with at least ceil(q*n) entries <= v, exact
 * below 64 and to a bucket's upper bound (3 %) above, never above the maximum. */
uint64_t rp_hist_quantile(const rp_hist *h, double q);
/* Entries strictly above v (exact below 64, bucket-resolution above). */
uint64_t rp_hist_above(const rp_hist *h, uint64_t v);
/* The least limit L with at most floor(share*n) entries above it. */
uint64_t rp_hist_suggest(const rp_hist *h, double share);

#endif
