/* SPDX-License-Identifier: Apache-2.0 */
/*
 * histogram.c -- the replay's log-linear histogram (histogram.h): bucket i < 64 holds the
 * value i; above, the bucket of v is its power of 2 and the next 5 bits below its top bit.
 */
#include "histogram.h"

static unsigned hist_index(uint64_t v) {
    if (v < 64) return (unsigned)v;
    unsigned k = 63u - (unsigned)__builtin_clzll(v);
    unsigned sub = (unsigned)(v >> (k - 5)) & 31u;
    return 64 + (k - 6) * 32 + sub;
}

uint64_t rp_hist_lower(unsigned i) {
    if (i < 64) return i;
    unsigned k = (i - 64) / 32 + 6, sub = (i - 64) % 32;
    return (uint64_t)(32 + sub) << (k - 5);
}

static uint64_t hist_upper(unsigned i) {
    if (i < 64) return i;
    return rp_hist_lower(i) + ((uint64_t)1 << ((i - 64) / 32 + 1)) - 1;
}

void rp_hist_add(rp_hist *h, uint64_t v) {
    h->c[hist_index(v)]++;
    h->n++;
    if (v > h->max) h->max = v;
}

uint64_t rp_hist_quantile(const rp_hist *h, double q) {
    if (h->n == 0) return 0;
    uint64_t want = (uint64_t)(q * (double)h->n);
    if ((double)want < q * (double)h->n) want++;
    if (want == 0) want = 1;
    uint64_t acc = 0;
    for (unsigned i = 0; i < RP_HIST; i++) {
        acc += h->c[i];
        if (acc >= want) {
            uint64_t u = hist_upper(i);
            return u < h->max ? u : h->max;
        }
    }
    return h->max;
}

uint64_t rp_hist_above(const rp_hist *h, uint64_t v) {
    uint64_t n = 0;
    for (unsigned i = RP_HIST; i-- > 0;) {
        if (hist_upper(i) <= v) break;
        n += h->c[i];
    }
    return n;
}

uint64_t rp_hist_suggest(const rp_hist *h, double share) {
    if (h->n == 0) return 0;
    uint64_t allowed = (uint64_t)(share * (double)h->n);
    uint64_t above = 0;
    for (unsigned i = RP_HIST; i-- > 0;) {
        if (h->c[i] == 0) continue;
        if (above + h->c[i] > allowed) {
            uint64_t u = hist_upper(i);
            return u < h->max ? u : h->max;
        }
        above += h->c[i];
    }
    return 0;
}
