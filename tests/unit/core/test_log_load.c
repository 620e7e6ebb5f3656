/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_log_load.c -- the logger under load: two threads send 100 k decisions/s (on a fake
 * clock they move themselves) into a decision log limited to 1000 lines/s while the
 * destination (a pipe nobody reads yet) is blocked: the callers never wait, the lines
 * written stay within the rate, every line not written is counted as a drop of one kind,
 * and no raw key appears. Then the same on the real clock into /dev/null, printing the
 * throughput (shown, never asserted).
 */
#include "t.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

#define S(x) ((int64_t)(x) * 1000000000)

static _Atomic int64_t fake_mono = S(1000);

static int64_t f_mono(void *ud) {
    (void)ud;
    return atomic_load(&fake_mono);
}

static int64_t f_wall(void *ud) {
    (void)ud;
    return S(1700000000) + atomic_load(&fake_mono);
}

static int64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct prod {
    sl_log *l;
    int id, n;
    int64_t step_ns; /* fake time per event, per thread */
    int decisions;   /* 1: sl_log_decision, 0: sl_log_write */
    int64_t cpu_ns;  /* out: this thread's CPU time for its n events */
} prod;

static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *producer(void *arg) {
    prod *p = arg;
    char key[48];
    int64_t cpu0 = thread_cpu_ns();
    for (int i = 0; i < p->n; i++) {
        snprintf(key, sizeof(key), "secret-%d-%d@example.com", p->id, i);
        if (p->decisions) {
            sl_log_dec d;
            memset(&d, 0, sizeof(d));
            d.policy = "api";
            d.window = "100/s";
            d.rejected = i & 1;
            d.verdict = d.rejected ? "limited" : "allowed";
            d.cost = 1, d.remaining = 0, d.limit = 100, d.retry_after_ns = -1;
            d.key = key, d.key_len = strlen(key);
            sl_log_decision(p->l, &d);
        } else {
            SL_LOG(p->l, SL_LOG_INFO, "load", "an event", SL_LOG_INT("i", i), SL_LOG_KEY("key", key, strlen(key)));
        }
        if (p->step_ns) atomic_fetch_add(&fake_mono, p->step_ns);
    }
    p->cpu_ns = thread_cpu_ns() - cpu0;
    return NULL;
}

typedef struct reader {
    int fd;
    char *buf;
    size_t len, cap;
} reader;

static void *drain(void *arg) {
    reader *r = arg;
    for (;;) {
        if (r->cap - r->len < 65536) {
            r->cap = r->cap ? 2 * r->cap : 1 << 20;
            r->buf = realloc(r->buf, r->cap);
        }
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len - 1);
        if (n <= 0) break;
        r->len += (size_t)n;
    }
    r->buf[r->len] = 0;
    return NULL;
}

static void test_blocked_destination_rate_and_drops(void) {
    int pfd[2];
    T_EQ_I(pipe(pfd), 0);
    fcntl(pfd[1], F_SETPIPE_SZ, 4096); /* a small pipe: it fills at once */
    sl_log_config c;
    sl_log_config_default(&c);
    c.format = SL_LOG_JSON;
    c.fd = pfd[1];
    c.queue_lines = 64;
    c.write_timeout_ns = S(60); /* the writer waits for the reader rather than dropping */
    c.decisions = 1;
    c.decisions_per_s = 1000;
    c.decisions_burst = 100;
    c.mono_ns = f_mono, c.wall_ns = f_wall;
    sl_log *l = NULL;
    T_EQ_I(sl_log_create(&l, &c), 0);
    if (!l) return;

    /* 2 threads x 100 000 events, 10 us of fake time each: 100 k events/s for 2 s */
    const int per_thread = 100000;
    prod p[2] = {{l, 0, per_thread, 10000, 1, 0}, {l, 1, per_thread, 10000, 1, 0}};
    pthread_t th[2];
    int64_t t0 = real_ns();
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, producer, &p[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    int64_t took = real_ns() - t0;
    int64_t fake_s_x1000 = (atomic_load(&fake_mono) - S(1000)) / 1000000; /* ms */

    sl_log_stats st;
    sl_log_stats_get(l, &st);
    uint64_t total = 2 * (uint64_t)per_thread;
    uint64_t passed = st.decisions_logged + st.dropped_full; /* through the rate limit */
    printf("  blocked pipe: %llu events in %.1f ms real (%.0f k/s), %lld ms fake: %llu queued, "
           "%llu dropped (queue full), %llu over the rate\n",
           (unsigned long long)total, took / 1e6, total / (took / 1e9) / 1e3, (long long)fake_s_x1000,
           (unsigned long long)st.decisions_logged, (unsigned long long)st.dropped_full,
           (unsigned long long)st.decisions_rate_limited);
    T_EQ_U(st.decisions_logged + st.dropped_full + st.decisions_rate_limited, total);
    T_EQ_U(st.decisions_sampled_out, 0);
    /* the rate: 1000 lines/s over the fake duration, plus the burst */
    uint64_t bound = (uint64_t)(1000 * fake_s_x1000 / 1000) + 100 + 1;
    T_CHECK(passed <= bound);
    T_CHECK(passed >= bound - 150); /* and the limiter does not starve either */
    T_CHECK(st.dropped_full > 0);   /* the destination was blocked: the queue filled */
    T_EQ_U(sl_log_dropped(l), st.dropped_full + st.decisions_rate_limited + st.dropped_write);

    /* now read the pipe: everything queued arrives, then the summaries */
    reader r = {pfd[0], NULL, 0, 0};
    pthread_t rt;
    pthread_create(&rt, NULL, drain, &r);
    atomic_fetch_add(&fake_mono, S(10)); /* a summary interval */
    T_EQ_I(sl_log_flush(l, S(60)), 0);
    sl_log_stats_get(l, &st);
    sl_log_destroy(l);
    close(pfd[1]);
    pthread_join(rt, NULL);
    close(pfd[0]);

    uint64_t decisions = 0, summaries = 0, lines = 0;
    for (char *s = r.buf, *e; s && *s; s = e + 1) {
        e = strchr(s, '\n');
        if (e == NULL) {
            T_FAIL("an unterminated line");
            break;
        }
        lines++;
        json_t *j = json_loadb(s, (size_t)(e - s), 0, NULL);
        if (j == NULL) {
            T_FAIL("not JSON: %.*s", (int)(e - s), s);
            continue;
        }
        const char *ev = json_string_value(json_object_get(j, "event"));
        if (ev && strcmp(ev, "decision") == 0) decisions++;
        if (ev && strcmp(ev, "log_dropped") == 0) {
            summaries++;
            T_EQ_U(json_integer_value(json_object_get(j, "dropped")), st.dropped_full);
        }
        json_decref(j);
    }
    T_EQ_U(decisions, st.decisions_logged);
    T_EQ_U(st.dropped_write, 0);
    T_EQ_U(summaries, 1);
    T_CHECK(lines >= decisions + 2); /* + the queue-full and over-rate summaries */
    T_CHECK(r.buf && strstr(r.buf, "secret-") == NULL);
    free(r.buf);
}

/* Real clock, /dev/null, no rate limit: how many events/s two threads get through, and
 * what happens to the rest (counted). Shown, not asserted (speed belongs to make bench). */
static void test_throughput_shown(void) {
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    sl_log_config c;
    sl_log_config_default(&c);
    c.format = SL_LOG_JSON;
    c.fd = fd;
    c.queue_lines = 4096;
    sl_log *l = NULL;
    T_EQ_I(sl_log_create(&l, &c), 0);
    if (!l) return;
    T_EQ_I(sl_log_kind_set(l, "load", SL_LOG_INFO, 4000000000u, 4000000000u, NULL), 0);
    const int per_thread = 300000;
    prod p[2] = {{l, 0, per_thread, 0, 0, 0}, {l, 1, per_thread, 0, 0, 0}};
    pthread_t th[2];
    int64_t t0 = real_ns();
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, producer, &p[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    int64_t took = real_ns() - t0;
    sl_log_flush(l, S(30));
    sl_log_stats st;
    sl_log_stats_get(l, &st);
    printf("  /dev/null: %d events from 2 threads in %.1f ms: %.0f k events/s offered, %.0f ns CPU per call; "
           "%llu written, %llu dropped (queue full)\n",
           2 * per_thread, took / 1e6, 2.0 * per_thread / (took / 1e9) / 1e3,
           (double)(p[0].cpu_ns + p[1].cpu_ns) / (2.0 * per_thread), (unsigned long long)st.written,
           (unsigned long long)st.dropped_full);
    T_EQ_U(st.written + st.dropped_full + st.dropped_rate, 2 * (uint64_t)per_thread);
    T_EQ_U(st.dropped_rate, 0);
    sl_log_destroy(l);
    close(fd);
}

int main(void) {
    T_RUN(test_blocked_destination_rate_and_drops);
    T_RUN(test_throughput_shown);
    return T_DONE();
}
