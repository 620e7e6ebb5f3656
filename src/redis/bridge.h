/*
 * bridge.h -- the Redis store for the server (see bridge.c): process-wide settings, one
 * client per worker thread, synchronous store calls with the signatures of the policy
 * engine's store hooks, readiness and metrics over all workers.
 */
#ifndef SL_REDIS_BRIDGE_H
#define SL_REDIS_BRIDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redis/redis.h"

typedef struct sl_redis_worker sl_redis_worker;

/* url: any store URL of redis.h (redis://, rediss://, unix://, redis-cluster://,
 * redis-sentinel://...) or "" / "redis:" to use addr + cluster from the config file;
 * conn: the config file's credentials, TLS and sentinel settings (may be NULL);
 * time_local is the config's `store.time: local` (a URL's ?time= overrides it);
 * test_clock forces caller time (the scripts then follow the test clock). Returns
 * SLUICE_OK or SLUICE_EINVAL (err never repeats the URL or a credential). */
struct sl_redis_conn_cfg;
int sl_redis_bridge_config(const char *url, const char *addr, bool cluster, int64_t timeout_ns,
                           const char *secret, bool time_local, bool test_clock,
                           const struct sl_redis_conn_cfg *conn, char *err, size_t errlen);
bool sl_redis_bridge_enabled(void);
bool sl_redis_bridge_default_secret(void);
/* What the store connects to, for the start-up line: never a credential. */
const char *sl_redis_bridge_seeds(void);

/* In the worker's thread: its client (NULL when the store is not Redis), on a private loop
 * that `outer` (the worker's loop, may be NULL) watches, so replies and timers are
 * handled as soon as the worker wakes. */
sl_redis_worker *sl_redis_bridge_worker_start(unsigned id, sl_loop *outer);
void sl_redis_bridge_worker_stop(sl_redis_worker *w);
void sl_redis_bridge_worker_tick(sl_redis_worker *w);
/* End of the worker's loop turn: sends the Redis commands the turn queued. */
void sl_redis_bridge_worker_flush(sl_redis_worker *w);

/* Store hooks (ctx = the worker's sl_redis_worker). */
int sl_redis_bridge_decide(void *ctx, const sluice_item *items, size_t n, sluice_time now,
                           sluice_decision *out);
int sl_redis_bridge_settle(void *ctx, const sluice_limiter *lim, const void *key, size_t key_len,
                           uint64_t reserved, uint64_t actual, sluice_time now, sluice_result *out);
int sl_redis_bridge_release(void *ctx, const sluice_limiter *lim, const void *key, size_t key_len,
                            uint64_t lease, sluice_time now);

/* Asynchronous form for HTTP and RESP connections (suspend and replay, see bridge.c):
 * the server calls enter(conn) before handling a request and leave(conn) after it; a
 * true from leave means the request waits for the store (do not consume it; the resume
 * function registered with set_resume handles it again later). forget(conn) when the
 * connection closes. The store hook returns SL_REDIS_PENDING to the engine meanwhile. */
#define SL_REDIS_PENDING (-1000)
void sl_redis_bridge_set_resume(void (*fn)(void *owner, void *key));
void sl_redis_bridge_enter(void *conn);
bool sl_redis_bridge_leave(void *conn);
void sl_redis_bridge_forget(void *conn);
/* The same for requests that are not a whole connection (a gRPC stream): `key` names
 * the request, `owner` its connection; the resume function gets (owner, key). A
 * connection that closes forgets everything it owns. */
void sl_redis_bridge_enter_owned(void *key, void *owner);
void sl_redis_bridge_forget_owned(void *owner);
/* True inside a handler whose request now waits for the store: reply nothing, count
 * nothing (the request is handled again when the answer is there). */
bool sl_redis_bridge_pending(void);
int sl_redis_bridge_decide_async(void *ctx, const sluice_item *items, size_t n, sluice_time now,
                                 sluice_decision *out);
int sl_redis_bridge_reset_async(void *ctx, const sluice_item *items, size_t n, sluice_time now);
/* Claims operation `bit` of token `id` in Redis: SLUICE_OK the first time anywhere,
 * SLUICE_ENOTFOUND after, SL_REDIS_PENDING while the answer is on its way. */
int sl_redis_bridge_claim_async(void *ctx, uint64_t id, unsigned bit, int64_t ttl_ns, sluice_time now);

/* Every worker's client connected with its breaker closed (true when not Redis). */
bool sl_redis_bridge_ready(void);
/* Prometheus text of the summed counters and the per-node gauges into buf; returns bytes
 * written. */
int sl_redis_bridge_metrics(char *buf, size_t cap);
/* One line per node that is not up ("redis 127.0.0.1:6379 down: <Redis's error>"), for
 * a readiness body; returns bytes written ("" when every node is up). No credential. */
int sl_redis_bridge_health(char *buf, size_t cap);

#endif
