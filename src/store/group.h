/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.h -- one all-or-nothing decision over states already loaded: the rules every store
 * shares (the memory store runs it under its shard locks; the Redis store's script applies
 * the same rules in Redis and the client runs this over the states the script saw, to
 * report exactly what the memory store would). Pure: no clock, no allocation, no locks.
 *
 * Order: group 0 items in item order, then each shadow group in increasing group order,
 * items in item order; an item whose key repeats an earlier one's decides on that one's
 * new state. Group 0 admits iff every item admits (and no SL_SREQ_REJECT); then each
 * shadow group commits iff all its items admit. A rejection commits nothing but the
 * SL_SI_CHARGE items' costs (settled onto the stored state, past the limit if need be).
 */
#ifndef SL_STORE_GROUP_H
#define SL_STORE_GROUP_H

#include "algo/algo.h"
#include "store/store.h"

typedef struct sl_group_run {
    /* in */
    const sl_sitem *items;
    const sl_limit *const *lims; /* per item, its limit override already applied (pointers:
                                    no copy of the parameters per decision) */
    size_t n;
    unsigned flags;             /* SL_SREQ_* */
    const uint8_t *kidx;        /* per item: index of its distinct (limiter family, key) */
    size_t nkeys;
    const void *const *stored;  /* per key: the stored state, NULL = fresh */
    void *const *work;          /* per item: state_size bytes of scratch */
    void *peek;                 /* scratch of the largest state_size */
    sluice_time now;
    /* out */
    sl_sresult *res;            /* the caller's answer, written in place */
    const void *final[SLUICE_MAX_ITEMS]; /* per key: the state to store (== stored[k]: none) */
    bool consumed[SLUICE_MAX_ITEMS];     /* per item */
} sl_group_run;

/* Runs the decision; fills res, final and consumed. */
void sl_group_decide(sl_group_run *g);

/* Distinct keys of items: kidx[i] = index of the first item with the same key, renumbered
 * from 0; `same(a, b)` tells whether items a and b share limiter family and key. Returns
 * the number of distinct keys. */
size_t sl_group_keys(size_t n, bool (*same)(const void *ctx, size_t a, size_t b),
                     const void *ctx, uint8_t *kidx);

#endif /* SL_STORE_GROUP_H */
