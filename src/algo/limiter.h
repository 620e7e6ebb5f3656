/* SPDX-License-Identifier: Apache-2.0 */
/*
 * limiter.h -- the layout of sluice_limiter (opaque in the public API). Immutable after
 * sluice_limiter_create, so any number of threads may share one. Reference-counted:
 * whatever outlives the engine that created a limiter (a Redis lease slice, a late reply
 * awaited after a timeout) holds a reference; sluice_limiter_destroy drops the creator's.
 */
#ifndef SL_LIMITER_H
#define SL_LIMITER_H

#include <stdatomic.h>

#include "algo.h"
#include "sluice.h"

struct sluice_limiter {
    sluice_limit_spec spec; /* copied; spec.name and spec.tz point into the buffers below */
    char name[256];
    char tz_name[128];
    sl_limit lim;           /* compiled parameters used by the algorithms */
    /* Leasing on a shared store (set by the policy engine before the limiter is used;
     * the memory store ignores it): units per slice (0 = the store's default) and how
     * long a slice is spent locally. */
    uint32_t lease_slice;
    int64_t lease_hold_ns;
    /* on_store_error: local (set like the leasing fields; src/store/redis/local.c): decided
     * in this instance's memory at its share of the limit while Redis is unreachable */
    bool fail_local;
    _Atomic uint32_t refs; /* 1 from create; freed when the last reference goes */
};

/* sluice_limiter_create with capacity parameters (NULL: none), for the policy engine:
 * an adaptive controller, priority classes, a borrowing tier's marks, or the internal
 * penalty algorithm (SL_ALGO_PENALTY). */
sluice_limiter *sl_limiter_create_cap(const sluice_limit_spec *spec, const sl_cap *cap, int *err,
                                      char *errbuf, size_t errbuf_len);

/* Takes / drops a reference (NULL is ignored). */
void sl_limiter_ref(const sluice_limiter *lim);
void sl_limiter_unref(const sluice_limiter *lim);

#endif /* SL_LIMITER_H */
