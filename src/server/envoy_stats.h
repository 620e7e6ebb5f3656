/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envoy_stats.h -- envoyproxy/ratelimit's statistics in compat mode: per rule path
 * (ratelimit.service.rate_limit.<domain>.<key_value>...) total_hits, over_limit,
 * near_limit, within_limit, shadow_mode, over_limit_with_local_cache, computed from each
 * call's counts exactly as upstream's base limiter does; the service counters; their
 * Prometheus families as upstream's statsd_exporter mapping names them, and an iterator
 * for the statsd sender (statsd.c).
 * Counting: one table per worker (single writer, read by the scraper and the statsd
 * thread), bounded (SL_ESTATS_SLOTS paths per worker; beyond, counted as dropped).
 */
#ifndef SL_SERVER_ENVOY_STATS_H
#define SL_SERVER_ENVOY_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/grpc/rls.h"
#include "proto/wbuf.h"

struct sl_worker;
struct sl_server;

enum {
    SL_ES_TOTAL = 0,
    SL_ES_OVER,
    SL_ES_NEAR,
    SL_ES_WITHIN,
    SL_ES_SHADOW,
    SL_ES_LOCAL,     /* over_limit_with_local_cache */
    SL_ES_NOTFOUND,  /* domain_not_found (the path is the domain) */
    SL_ES_NSTATS
};

/* Service counters (per worker). */
enum {
    SL_ESV_REQUESTS = 0, /* ratelimit_server.ShouldRateLimit.total_requests */
    SL_ESV_REDIS_ERROR,  /* ratelimit.service.call.should_rate_limit.redis_error */
    SL_ESV_SERVICE_ERROR,
    SL_ESV_GLOBAL_SHADOW,
    SL_ESV_N
};

extern const char *const sl_es_stat_names[SL_ES_NSTATS];
extern const char *const sl_esv_names[SL_ESV_N];

/* Counts one answered ShouldRateLimit (or /json) call in compat mode: its status and, for
 * every rule it reached, the hits as upstream classifies them. Worker thread only. */
void sl_envoy_stats_count(struct sl_worker *w, int grpc_status, const sl_rls_answer *a);
/* A call refused before it was decided (a bad request: upstream's service_error). */
void sl_envoy_stats_service_error(struct sl_worker *w);

/* The Prometheus text: sluice_config_load_{success,error}_total always; in compat mode
 * upstream's families (ratelimit_service_rate_limit_*{domain,key1[,key2]}, the service
 * counters) with EXTRA_TAGS as labels. Called from metrics.c. */
void sl_envoy_stats_render(const struct sl_server *s, sl_wbuf *out);
/* An upper bound of what sl_envoy_stats_render writes now (the caller's buffer size). */
size_t sl_envoy_stats_render_size(void);

/* The statsd sender's view: every counter with its statsd name (without tags), the
 * total counted so far, and a per-series slot the sender keeps its last-sent total in
 * (only the sender writes it). */
typedef void (*sl_es_visit)(void *ud, const char *name, size_t name_len, uint64_t total,
                            uint64_t *sent);
void sl_envoy_stats_each(const struct sl_server *s, sl_es_visit fn, void *ud);

/* EXTRA_TAGS ("k1:v1,k2:v2"), parsed once at start (compat.c); NULL/"" = none. */
void sl_envoy_stats_set_tags(const char *extra_tags);
size_t sl_envoy_stats_ntags(void);
void sl_envoy_stats_tag(size_t i, const char **k, const char **v);

/* The statistics path as upstream sanitises it: ':' and '|' become '_', and so do the
 * dots of anything shaped like an IPv4 address. Returns the length written (< cap). */
size_t sl_envoy_stats_sanitize(const char *in, size_t len, char *out, size_t cap);

#endif /* SL_SERVER_ENVOY_STATS_H */
