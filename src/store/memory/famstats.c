/* SPDX-License-Identifier: Apache-2.0 */
/*
 * famstats.c -- entries and evictions per limiter family (see famstats.h), from the
 * counters the store keeps as it goes (memory.c).
 */
#include "store/memory/famstats.h"

#include "store/memory/memory.h"

int sl_store_family_counts(sluice_store *st, sl_fam_count *out, size_t max) {
    if (st == NULL) return 0;
    int n = 0;
    pthread_mutex_lock(&st->reg_lock);
    for (unsigned id = 1; id <= st->nfams; id++) {
        sl_family *f = sl_store_family(st, (uint16_t)id);
        if (f == NULL) continue;
        int64_t keys = atomic_load_explicit(&f->keys, memory_order_relaxed);
        sl_fam_count c = {f->name, f->index, keys > 0 ? (uint64_t)keys : 0,
                          atomic_load_explicit(&f->evicted, memory_order_relaxed),
                          atomic_load_explicit(&f->expired, memory_order_relaxed),
                          atomic_load_explicit(&f->refused, memory_order_relaxed)};
        if (c.entries == 0 && c.evicted == 0 && c.expired == 0 && c.refused == 0) continue;
        if ((size_t)n < max) out[n] = c;
        n++;
    }
    pthread_mutex_unlock(&st->reg_lock);
    return n;
}
