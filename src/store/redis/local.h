/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local.h -- on_store_error: local (local.c): decisions at this instance's share while
 * Redis is unreachable, the heartbeats that give the shares, the reconciliation after.
 */
#ifndef SL_REDIS_LOCAL_H
#define SL_REDIS_LOCAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* store.local: instances when no view was read (0: none: fail closed), the floor of a
 * share in ppm (0: 1/(2N)), the heartbeat period (TTL: three periods). */
void sl_redis_local_setup(unsigned instances, uint32_t floor_ppm, int64_t heartbeat_ns);
/* The memory store local decisions are made in (the server's limiter registry). */
void sl_redis_local_attach(sluice_store *mem);

typedef struct sl_redis_local_stats {
    _Atomic uint64_t local, local_limited; /* decisions made locally: admitted, refused */
    _Atomic uint64_t no_share;             /* could not decide locally: failed closed */
    _Atomic uint64_t heartbeats, heartbeat_errors;
    _Atomic uint64_t reconcile_calls, reconcile_units; /* written into Redis after an outage */
    _Atomic uint64_t reconcile_errors, reconcile_dropped; /* calls failed, units not written */
} sl_redis_local_stats;
const sl_redis_local_stats *sl_redis_local_stats_get(void);
/* Instances in the last heartbeat view (0: none yet). */
unsigned sl_redis_local_view(void);
/* "deciding locally (on_store_error: local): a, b\n" for /readyz, or why it cannot. */
int sl_redis_local_health(char *buf, size_t cap);

#endif
