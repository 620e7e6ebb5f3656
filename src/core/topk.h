/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topk.h -- hot keys: the heaviest keys of one policy over a recent interval, from a
 * weighted space-saving sketch of k counters (memory fixed at creation, whatever the keys).
 * One sketch per worker thread: one writer, no lock and no atomic read-modify-write on the
 * update path; readers merge every worker's sketch. Time is cut into aligned epochs of
 * interval_ns; a sketch keeps the current and the previous epoch, so "recent" covers the
 * last one to two intervals. Weights are cost units; estimates are upper bounds whose
 * error is bounded (space-saving: overestimate <= total / k per sketch and epoch).
 */
#ifndef SL_TOPK_H
#define SL_TOPK_H

#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"

#define SL_TOPK_MIN 8
#define SL_TOPK_MAX 4096
#define SL_TOPK_RAW_MAX 64 /* raw key bytes kept per counter, at most */

typedef struct sl_topk sl_topk;

typedef struct sl_topk_config {
    unsigned counters;      /* k, SL_TOPK_MIN..SL_TOPK_MAX (e.g. 64..1024) */
    int64_t interval_ns;    /* epoch length, > 0 (e.g. 10 s) */
    unsigned raw_key_bytes; /* 0: hashes only (the default); else raw bytes kept per key */
} sl_topk_config;

/* 0, SLUICE_EINVAL (k or interval out of range) or SLUICE_ENOMEM. All memory is taken here. */
int sl_topk_create(sl_topk **out, const sl_topk_config *c);
void sl_topk_destroy(sl_topk *t);
/* Bytes held by the sketch (constant from creation on). */
size_t sl_topk_bytes(const sl_topk *t);

/* The hash that names a key in sketches, logs and /v1/top (the low word of the keyed
 * SipHash the store uses, under the given process key). */
uint64_t sl_topk_key_hash(const sl_hash_key *k, const void *key, size_t len);

/* The update, from the sketch's one writer thread: `weight` cost units for key_hash at
 * now_ns (the decision's clock reading; monotonic, any origin), `rejected` 1 when the
 * decision refused. raw/raw_len are copied (cut to raw_key_bytes) only when the key takes
 * a counter and raw keys are kept; otherwise ignored (may be NULL). Constant time:
 * O(log k) heap steps, no allocation. */
void sl_topk_add(sl_topk *t, int64_t now_ns, uint64_t key_hash, const void *raw, size_t raw_len,
                 uint64_t weight, int rejected);

typedef struct sl_topk_entry {
    uint64_t key_hash;
    uint64_t weight;     /* the estimate (space-saving counts summed over sketches) */
    uint64_t weight_min; /* the true weight is at least this ... */
    uint64_t weight_max; /* ... and at most this */
    uint64_t rejected;   /* rejections counted while the key held a counter (a lower bound) */
    uint32_t raw_len;    /* bytes in raw (0: none kept) */
    int raw_truncated;   /* the key was longer than raw_key_bytes */
    char raw[SL_TOPK_RAW_MAX];
} sl_topk_entry;

typedef struct sl_topk_totals {
    uint64_t weight;   /* all weight added in the epochs read (exact) */
    uint64_t rejected; /* all rejections in them (exact) */
    uint64_t updates;  /* sl_topk_add calls in them */
    int64_t from_ns;   /* start of the oldest epoch read (now_ns when none) */
} sl_topk_totals;

/* Merges the current and previous epochs of n sketches (one per worker) as of now_ns:
 * fills out[] with at most max entries, heaviest first (ties by hash), and *tot. Safe
 * while the writers update (each counter is read consistently; the whole is a near
 * snapshot). Allocates temporary memory (not for the decision path). Returns the number
 * of entries, or SLUICE_ENOMEM. A share is weight / tot->weight. */
int sl_topk_read(sl_topk *const *sk, size_t n, int64_t now_ns, sl_topk_entry *out, size_t max,
                 sl_topk_totals *tot);

#endif /* SL_TOPK_H */
