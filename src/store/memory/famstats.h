/* SPDX-License-Identifier: Apache-2.0 */
/*
 * famstats.h -- what the memory store holds and lost per limiter family (limiter name +
 * window index), for metrics by policy (sluice_keys, sluice_evictions_total). Read from
 * the families' own counters under the registry lock: nothing is walked, no shard is
 * locked, so it costs a decision nothing.
 */
#ifndef SL_STORE_FAMSTATS_H
#define SL_STORE_FAMSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

typedef struct sl_fam_count {
    const char *name;  /* the limiter's name (lives as long as the store) */
    uint32_t index;    /* its window index */
    uint64_t entries;  /* entries held now (one per key; room being reserved included) */
    uint64_t evicted;  /* live entries evicted under pressure (each a reset) */
    uint64_t expired;  /* fresh-equivalent entries dropped (no behaviour change) */
    uint64_t refused;  /* new keys refused for lack of room */
} sl_fam_count;

/* Fills out[] with every family that holds an entry or lost one (at most max of them)
 * and returns how many there are. */
int sl_store_family_counts(sluice_store *st, sl_fam_count *out, size_t max);

#endif /* SL_STORE_FAMSTATS_H */
