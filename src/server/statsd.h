/* SPDX-License-Identifier: Apache-2.0 */
/*
 * statsd.h -- envoyproxy/ratelimit's statistics sent as statsd counters over UDP (compat
 * mode: USE_STATSD, or USE_DOG_STATSD for DogStatsD tags): every STATS_FLUSH_INTERVAL the
 * counters that moved since the last flush, as deltas, batched into datagrams.
 */
#ifndef SL_SERVER_STATSD_H
#define SL_SERVER_STATSD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sl_server;

typedef struct sl_statsd_opts {
    bool on;
    bool dog;            /* DogStatsD: tags as "|#k:v,..." (else gostats: ".__k=v" in names) */
    char host[256];      /* STATSD_HOST */
    int port;            /* STATSD_PORT */
    int64_t flush_ns;    /* STATS_FLUSH_INTERVAL */
} sl_statsd_opts;

/* Process-wide, before the server starts (compat.c). */
void sl_statsd_configure(const sl_statsd_opts *o);
/* Starts the sender thread when configured (nothing otherwise); 0, or -1 with err (the
 * host does not resolve). */
int sl_statsd_start(struct sl_server *s, char *err, size_t errlen);
/* Sends what is left and stops the thread. */
void sl_statsd_stop(void);

/* One statsd line for a counter delta, tags in the configured style, into buf (no newline);
 * the length, 0 when it does not fit. For tests. */
size_t sl_statsd_line(const sl_statsd_opts *o, const char *name, size_t name_len, uint64_t delta,
                      char *buf, size_t cap);

#endif /* SL_SERVER_STATSD_H */
