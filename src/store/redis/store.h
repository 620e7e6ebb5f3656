/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store.h -- the Redis store for the server: process-wide settings, one client per
 * worker thread (the worker's lane, on a private loop the worker's loop watches), the
 * store operations (store.h's interface: answers arrive from the lane's loop), readiness
 * and metrics over every worker's client.
 */
#ifndef SL_REDIS_STORE_H
#define SL_REDIS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/loop.h"
#include "store/store.h"

/* The store operations; their lane is what sl_redis_lane_start returned. */
extern const sl_store_ops sl_redis_ops;

/* Whether a --store URL (or "redis:" for the config's own) names the Redis store. */
bool sl_redis_store_url(const char *url);
/* url: any store URL of redis.h (redis://, rediss://, unix://, redis-cluster://,
 * redis-sentinel://...) or "redis:" to use the config's store settings (`st`: address,
 * credentials, TLS, sentinel); test_clock forces caller time (the scripts then follow the
 * test clock). Returns SLUICE_OK or SLUICE_EINVAL with err (which never repeats the URL
 * or a credential). */
int sl_redis_store_config(const char *url, const sl_settings *st, bool test_clock, char *err,
                          size_t errlen);
bool sl_redis_store_default_secret(void);
/* The client options of the configured store (NULL: not configured); overrides.c's
 * sync thread (src/store/redis/override.h) opens its own client with them. */
struct sl_redis_opts;
const struct sl_redis_opts *sl_redis_store_opts(void);
/* What the store connects to, for the start-up line: never a credential. */
const char *sl_redis_store_seeds(void);

/* In the worker's thread: its client on a private loop that `outer` (the worker's loop)
 * watches, so replies and timers are handled as soon as the worker wakes; NULL when it
 * cannot be created. */
void *sl_redis_lane_start(unsigned id, sl_loop *outer);
/* End of the worker's loop turn: sends the Redis commands the turn queued. */
void sl_redis_lane_flush(void *lane);
/* Answers (SLUICE_ESTORE) what is still in flight, then frees the lane. */
void sl_redis_lane_stop(void *lane);

/* Every worker's client connected with its breaker closed. */
bool sl_redis_store_ready(void);
/* Prometheus text of the summed counters and the per-node gauges into buf; returns bytes
 * written. */
int sl_redis_store_metrics(char *buf, size_t cap);
/* One line per node that is not up ("redis 127.0.0.1:6379 down: <Redis's error>"), for
 * a readiness body; returns bytes written ("" when every node is up). No credential. */
int sl_redis_store_health(char *buf, size_t cap);

/* Every worker's client's failure counters summed (store errors by kind). */
typedef struct sl_redis_totals {
    uint64_t timeouts, errors, breaker_open, node_down, pool_full, reconnects;
} sl_redis_totals;
void sl_redis_store_totals(sl_redis_totals *t);

/* Main thread, every ~100 ms: logs outages and recoveries (store_down / store_up) and
 * breaker transitions (breaker_open / breaker_closed) on `log`. */
struct sl_log;
void sl_redis_store_watch(struct sl_log *log);

#endif
