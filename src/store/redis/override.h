/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override.h -- per-key overrides kept in Redis (docs/overrides.md, "what each store
 * guarantees"): every instance keeps a full local copy (the store's override table, read
 * by decisions without a round trip) and follows a change feed: one thread per process,
 * its own client (one node, Cluster or Sentinel, TLS and ACL as the store's), polls a
 * version key every poll interval and reads the changes since its copy's version.
 * Redis layout, one hash slot (tag {sluice-ovr}):
 *   sl:{sluice-ovr}:data  hash   32-hex keyed hash of (policy, key) -> the override (JSON)
 *   sl:{sluice-ovr}:ver   int    the version: +1 per change
 *   sl:{sluice-ovr}:log   zset   hash -> the version of its last change (removals too)
 *   sl:{sluice-ovr}:low   int    the highest version of a removal trimmed from the log
 * Invariants: no decision waits on this; a change is answered only once Redis has it; the
 * copy converges to Redis's set (a full pass when it fell behind a trim or Redis lost it).
 */
#ifndef SL_REDIS_OVERRIDE_H
#define SL_REDIS_OVERRIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis/redis.h"

typedef struct sl_redis_ovr_hooks {
    void *ud;
    /* One override as Redis holds it now (val NULL: none), called on the sync thread. */
    void (*apply)(void *ud, const char *hex, const char *val, size_t len);
    /* A full pass: begin, apply for every override Redis holds, end (drop the others). */
    void (*full_begin)(void *ud);
    void (*full_end)(void *ud);
} sl_redis_ovr_hooks;

/* Starts the sync thread (poll_ns 0: 100 ms). SLUICE_OK or an error with a message. */
int sl_redis_ovr_start(const sl_redis_opts *o, const sl_redis_ovr_hooks *h, int64_t poll_ns,
                       char *err, size_t errlen);
void sl_redis_ovr_stop(void);
bool sl_redis_ovr_running(void);

/* Writes n changes (val NULL or "": removed) in one call and waits for Redis's answer
 * for up to timeout_ns. SLUICE_OK, SLUICE_ESTORE (not taken, or not known to be). Any
 * thread except the sync thread; at most SL_REDIS_OVR_BATCH changes. */
#define SL_REDIS_OVR_BATCH 512
int sl_redis_ovr_write(const char *const *hex, const char *const *val, size_t n,
                       int64_t timeout_ns, uint64_t *version);
/* Waits until the local copy has followed the feed up to `version` (what a write
 * answered): the change is then in the local table in Redis's order. false on timeout. */
bool sl_redis_ovr_wait(uint64_t version, int64_t timeout_ns);
/* The next poll is a full pass (after a reload: overrides of a policy that returns). */
void sl_redis_ovr_resync(void);

typedef struct sl_redis_ovr_stats {
    uint64_t version;  /* of the local copy */
    uint64_t polls, changes, writes, errors, full_passes;
    bool synced;       /* a first pass completed */
    int64_t last_ok_ns; /* CLOCK_MONOTONIC of the last successful poll */
} sl_redis_ovr_stats;
void sl_redis_ovr_stats_get(sl_redis_ovr_stats *out);

#endif /* SL_REDIS_OVERRIDE_H */
