/*
 * famstats.h -- a read-only census of the memory store: how many entries each limiter
 * family (limiter name + window index) holds now, for metrics by policy (sluice_keys).
 * Not on the decision path: it walks every slot of every table, taking each shard's
 * lock for the time of that shard's walk.
 */
#ifndef SL_STORE_FAMSTATS_H
#define SL_STORE_FAMSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

typedef struct sl_fam_count {
    const char *name;  /* the limiter's name (lives as long as the store) */
    uint32_t index;    /* its window index */
    uint64_t entries;  /* entries held now (one per key) */
} sl_fam_count;

/* Fills out[] with every family holding at least one entry (at most max of them) and
 * returns how many there are; SLUICE_ENOMEM (negative) without memory. */
int sl_store_family_counts(sluice_store *st, sl_fam_count *out, size_t max);

#endif /* SL_STORE_FAMSTATS_H */
