/* SPDX-License-Identifier: Apache-2.0 */
/*
 * statsd.c -- the statsd sender of compat mode: one thread that wakes every flush interval,
 * walks the statistics (envoy_stats.c) and sends each counter's growth since the last
 * flush as "name:delta|c" (gostats' tag style: ".__k=v" appended to the name, keys in
 * order; DogStatsD: "|#k:v,..."), several lines per datagram (at most 1432 bytes: no IP
 * fragmentation on a 1500-byte path). Counters that did not move send nothing, as gostats.
 * Fire and forget over UDP: a lost datagram loses those deltas (statsd's own trade-off).
 * envoyproxy/ratelimit's plain statsd sink (gostats) speaks TCP; statsd daemons and
 * statsd_exporter listen on UDP as well, which is what sluice sends.
 */
#include "server/statsd.h"

#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/envoy_stats.h"
#include "server/server.h"

#define DGRAM_MAX 1432

static sl_statsd_opts g_o;
static pthread_t g_th;
static bool g_running;
static _Atomic bool g_stop;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_fd = -1;
static struct sockaddr_storage g_to;
static socklen_t g_tolen;
static sl_server *g_srv;

void sl_statsd_configure(const sl_statsd_opts *o) { g_o = *o; }

/* gostats sanitises tag values: it replaces characters statsd uses as separators. */
static void put_tag_value(char *buf, size_t cap, size_t *o, const char *v) {
    for (; *v && *o + 1 < cap; v++) {
        char c = *v;
        buf[(*o)++] = (c == ':' || c == '|' || c == ',' || c == '=' || c == '.') ? '_' : c;
    }
}

static void puts_n(char *buf, size_t cap, size_t *o, const char *s, size_t n) {
    for (size_t i = 0; i < n && *o + 1 < cap; i++) buf[(*o)++] = s[i];
}

size_t sl_statsd_line(const sl_statsd_opts *o, const char *name, size_t name_len, uint64_t delta,
                      char *buf, size_t cap) {
    size_t n = 0, nt = sl_envoy_stats_ntags();
    /* keys in byte order, as gostats serialises them */
    size_t order[32];
    size_t m = nt < 32 ? nt : 32;
    for (size_t i = 0; i < m; i++) order[i] = i;
    for (size_t i = 1; i < m; i++)
        for (size_t j = i; j > 0; j--) {
            const char *ka, *kb, *va, *vb;
            sl_envoy_stats_tag(order[j - 1], &ka, &va);
            sl_envoy_stats_tag(order[j], &kb, &vb);
            if (strcmp(ka, kb) <= 0) break;
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    puts_n(buf, cap, &n, name, name_len);
    if (!o->dog)
        for (size_t i = 0; i < m; i++) {
            const char *k, *v;
            sl_envoy_stats_tag(order[i], &k, &v);
            puts_n(buf, cap, &n, ".__", 3);
            puts_n(buf, cap, &n, k, strlen(k));
            puts_n(buf, cap, &n, "=", 1);
            put_tag_value(buf, cap, &n, v);
        }
    char num[32];
    int l = snprintf(num, sizeof(num), ":%llu|c", (unsigned long long)delta);
    puts_n(buf, cap, &n, num, (size_t)l);
    if (o->dog && m > 0) {
        puts_n(buf, cap, &n, "|#", 2);
        for (size_t i = 0; i < m; i++) {
            const char *k, *v;
            sl_envoy_stats_tag(order[i], &k, &v);
            if (i) puts_n(buf, cap, &n, ",", 1);
            puts_n(buf, cap, &n, k, strlen(k));
            puts_n(buf, cap, &n, ":", 1);
            puts_n(buf, cap, &n, v, strlen(v));
        }
    }
    if (n + 1 >= cap) return 0;
    buf[n] = '\0';
    return n;
}

typedef struct batch {
    char buf[DGRAM_MAX];
    size_t len;
} batch;

static void send_batch(batch *b) {
    if (b->len == 0) return;
    (void)sendto(g_fd, b->buf, b->len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&g_to, g_tolen);
    b->len = 0;
}

static void visit(void *ud, const char *name, size_t name_len, uint64_t total, uint64_t *sent) {
    batch *b = ud;
    if (total <= *sent) return;
    char line[1024];
    size_t l = sl_statsd_line(&g_o, name, name_len, total - *sent, line, sizeof(line));
    *sent = total;
    if (l == 0 || l >= DGRAM_MAX) return;
    if (b->len + (b->len ? 1 : 0) + l > DGRAM_MAX) send_batch(b);
    if (b->len) b->buf[b->len++] = '\n';
    memcpy(b->buf + b->len, line, l);
    b->len += l;
}

static void flush_all(void) {
    static batch b; /* the sender thread's only */
    b.len = 0;
    sl_envoy_stats_each(g_srv, visit, &b);
    send_batch(&b);
}

static void *sender(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_mu);
    while (!atomic_load(&g_stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + g_o.flush_ns % 1000000000;
        ts.tv_sec += (time_t)(g_o.flush_ns / 1000000000 + ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
        pthread_mutex_unlock(&g_mu);
        flush_all();
        pthread_mutex_lock(&g_mu);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

int sl_statsd_start(sl_server *s, char *err, size_t errlen) {
    if (!g_o.on || g_running) return 0;
    char port[16];
    snprintf(port, sizeof(port), "%d", g_o.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    int rc = getaddrinfo(g_o.host, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "statsd host %s:%d: %s", g_o.host, g_o.port, gai_strerror(rc));
        return -1;
    }
    g_fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (g_fd >= 0) {
        memcpy(&g_to, res->ai_addr, res->ai_addrlen);
        g_tolen = res->ai_addrlen;
    }
    freeaddrinfo(res);
    if (g_fd < 0) {
        snprintf(err, errlen, "statsd socket failed");
        return -1;
    }
    if (g_o.flush_ns <= 0) g_o.flush_ns = 10 * (int64_t)1000000000;
    g_srv = s;
    atomic_store(&g_stop, false);
    if (pthread_create(&g_th, NULL, sender, NULL) != 0) {
        close(g_fd);
        g_fd = -1;
        snprintf(err, errlen, "cannot start the statsd thread");
        return -1;
    }
    g_running = true;
    return 0;
}

void sl_statsd_stop(void) {
    if (!g_running) return;
    pthread_mutex_lock(&g_mu);
    atomic_store(&g_stop, true);
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(g_th, NULL);
    flush_all(); /* what the last interval counted */
    close(g_fd);
    g_fd = -1;
    g_running = false;
}
