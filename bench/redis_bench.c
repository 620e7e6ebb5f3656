/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis_bench.c -- decisions/s of the Redis store client (one connection, one loop, the
 * way one server worker drives it): `inflight` decisions kept outstanding, so each loop
 * turn pipelines what the previous turn's replies released. Modes: "admit" (10,000 keys
 * with a high GCRA limit: every decision is one EVALSHA) and "reject" (one over-limit
 * key: answered by the local cache, counting the EVALSHAs that still went out).
 * usage: redis_bench PORT|URL SECONDS INFLIGHT admit|reject   (a URL such as
 * rediss://127.0.0.1:6380?tls_ca_file=ca.crt measures the same client over TLS)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "store/redis/redis.h"
#include "core/loop.h"
#include "sluice.h"

static long done_ok, done_err, outstanding;

static void cb(void *ud, int rc, const sl_sresult *d) {
    (void)ud;
    (void)d;
    outstanding--;
    if (rc == SLUICE_OK) done_ok++;
    else done_err++;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "script") == 0) { /* the script as the client sends it */
        size_t len;
        const char *body = sl_redis_script(&len);
        return fwrite(body, 1, len, stdout) == len ? 0 : 1;
    }
    if (argc == 2 && strcmp(argv[1], "library") == 0) { /* the Redis 7 function library */
        size_t len;
        const char *body = sl_redis_library(&len);
        printf("%s\n", sl_redis_function_name());
        return fwrite(body, 1, len, stdout) == len ? 0 : 1;
    }
    if (argc != 5) {
        fprintf(stderr, "usage: redis_bench PORT|URL SECONDS INFLIGHT admit|reject, or redis_bench script|library\n");
        return 2;
    }
    double secs = atof(argv[2]);
    long inflight = atol(argv[3]);
    int reject = strcmp(argv[4], "reject") == 0;
    sl_loop loop;
    sl_loop_init(&loop);
    sl_redis_opts o;
    sl_redis_opts_default(&o);
    if (strstr(argv[1], "://") != NULL) {
        char err[200];
        if (sl_redis_url_parse(argv[1], &o, err, sizeof(err)) != SLUICE_OK) {
            fprintf(stderr, "redis_bench: bad URL: %s\n", err);
            return 2;
        }
    } else {
        snprintf(o.seeds, sizeof(o.seeds), "127.0.0.1:%d", atoi(argv[1]));
    }
    o.timeout_ns = 500 * SLUICE_NS_PER_MS;
    o.max_pending = 4096;
    int err = 0;
    sl_redis *r = sl_redis_create(&loop, &o, &err);
    if (r == NULL) return 1;
    for (int i = 0; i < 200 && !sl_redis_ready(r); i++) sl_redis_run(r, 10);
    if (!sl_redis_ready(r)) {
        sl_redis_node_health h;
        sl_redis_health(r, &h, 1);
        fprintf(stderr, "redis_bench: not connected: %s\n", h.last_error);
        return 1;
    }
    sluice_limit_spec sp = {.algo = SLUICE_GCRA, .name = "bench", .limit = reject ? 10 : 1000000000,
                            .period_ns = reject ? 3600 * SLUICE_NS_PER_S : SLUICE_NS_PER_S};
    sluice_limiter *lim = sluice_limiter_create(&sp, &err, NULL, 0);
    sluice_clock *clk = sluice_clock_create_system();
    char keys[10000][12];
    for (int i = 0; i < 10000; i++) snprintf(keys[i], sizeof(keys[i]), "k%d", i);
    long issued = 0;
    double t0 = now_s(), end = t0 + secs, c0 = cpu_s();
    const sl_redis_stats *st = sl_redis_stats_get(r);
    uint64_t calls0 = atomic_load(&st->calls);
    while (now_s() < end) {
        while (outstanding < inflight) {
            const char *k = reject ? keys[0] : keys[issued % 10000];
            sl_sitem it = {.lim = lim, .key = k, .key_len = strlen(k), .cost = 1};
            outstanding++;
            issued++;
            sl_redis_decide(r, &it, 1, 0, sluice_clock_now(clk), cb, NULL);
        }
        sl_redis_flush(r);
        sl_loop_poll(&loop, 1);
    }
    double el = now_s() - t0, cpu = cpu_s() - c0;
    while (outstanding > 0 && now_s() < end + 2) sl_loop_poll(&loop, 1);
    uint64_t calls = atomic_load(&st->calls) - calls0;
    long done = done_ok + done_err;
    printf("sluice %s inflight=%ld: %.0f decisions/s, %.4f EVALSHA per decision, %.2f us client CPU per "
           "decision, %ld failed\n",
           argv[4], inflight, (double)done / el, issued ? (double)calls / (double)issued : 0.0,
           done ? cpu * 1e6 / (double)done : 0.0, done_err);
    sl_redis_destroy(r);
    sluice_limiter_destroy(lim);
    sluice_clock_destroy(clk);
    sl_loop_deinit(&loop);
    return 0;
}
