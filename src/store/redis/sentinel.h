/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sentinel.h -- finding and following a Redis primary through sentinels (sentinel.c):
 * one connection to one sentinel at a time (the first that answers, in the configured
 * order), which asks SENTINEL get-master-addr-by-name and then listens to +switch-master.
 * Runs on the client's loop with its own timer; reports each primary address it learns.
 */
#ifndef SL_REDIS_SENTINEL_H
#define SL_REDIS_SENTINEL_H

#include <pthread.h>

#include "store/redis/conn.h"
#include "store/redis/redis.h"

typedef struct sl_sentinel sl_sentinel;
/* The primary is at host:port (reported on every answer, changed or not). */
typedef void (*sl_sentinel_fn)(void *ud, const char *host, int port);

/* o (seeds = the sentinels, master, sentinel credentials, timeout) and tls are borrowed
 * for the sentinel's lifetime; `mu` guards the health fields (the client's lock). NULL
 * when the addresses cannot be used. Starts asking at once. */
sl_sentinel *sl_sentinel_create(sl_loop *loop, const sl_redis_opts *o, sl_rconn_tls *tls, pthread_mutex_t *mu,
                                sl_sentinel_fn fn, void *ud);
void sl_sentinel_destroy(sl_sentinel *s);
/* Asks again soon (at most every 100 ms): the primary went away or is not one any more. */
void sl_sentinel_refresh(sl_sentinel *s);
/* The sentinel in use (or last tried), for the metrics; call with `mu` held. */
void sl_sentinel_health(const sl_sentinel *s, sl_redis_node_health *out);

#endif
