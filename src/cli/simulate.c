/*
 * simulate.c -- `sluice simulate [PATTERN] [--seconds N]`: replays a named traffic pattern
 * against every algorithm on a manual clock and prints, per algorithm, what was admitted
 * in each second and in total, so the differences the docs describe can be seen
 * (boundary bursts of fixed windows, bursts after idle, shaping delays, leases).
 * All algorithms get comparable parameters: 10 units/s; buckets hold 20.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sluice.h"

#define SIM_MAX_SECONDS 120
#define SIM_MAX_IDS 8
#define SIM_MAX_HELD 4096

typedef struct sim_event {
    int64_t at_ns;
    int id;
} sim_event;

typedef struct sim_pattern {
    const char *name;
    const char *what;
    int ids;
    int seconds;
    /* Fills `ev` (sorted by time) and returns how many; `cap` bounds it. */
    size_t (*gen)(sim_event *ev, size_t cap, int seconds);
} sim_pattern;

static size_t gen_steady(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* 8 requests per second, evenly spaced: 125 ms apart. */
    for (int64_t t = 0; t < (int64_t)seconds * SLUICE_NS_PER_S && n < cap; t += 125 * SLUICE_NS_PER_MS)
        ev[n++] = (sim_event){t, 0};
    return n;
}

static size_t gen_burst(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* Idle for 5 s, then 30 requests within 30 ms, then 8/s until the end. */
    int64_t start = 5 * SLUICE_NS_PER_S;
    for (int i = 0; i < 30 && n < cap; i++) ev[n++] = (sim_event){start + i * SLUICE_NS_PER_MS, 0};
    for (int64_t t = start + SLUICE_NS_PER_S; t < (int64_t)seconds * SLUICE_NS_PER_S && n < cap;
         t += 125 * SLUICE_NS_PER_MS)
        ev[n++] = (sim_event){t, 0};
    return n;
}

static size_t gen_boundary(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* Idle, then 20 requests in the last 100 ms of second 3 and 20 in the first 100 ms
     * of second 4: a fixed window sees two half-empty windows. */
    (void)seconds;
    int64_t edge = 4 * SLUICE_NS_PER_S;
    for (int i = 0; i < 20 && n < cap; i++)
        ev[n++] = (sim_event){edge - 100 * SLUICE_NS_PER_MS + i * 5 * SLUICE_NS_PER_MS, 0};
    for (int i = 0; i < 20 && n < cap; i++) ev[n++] = (sim_event){edge + i * 5 * SLUICE_NS_PER_MS, 0};
    return n;
}

static size_t gen_identities(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* 4 identities; identity k sends (5 + 5k) requests per second. */
    for (int64_t ms = 0; ms < (int64_t)seconds * 1000 && n < cap; ms++)
        for (int k = 0; k < 4 && n < cap; k++) {
            int per_s = 5 + 5 * k;
            if (ms % (1000 / per_s) == 0) ev[n++] = (sim_event){ms * SLUICE_NS_PER_MS, k};
        }
    return n;
}

static const sim_pattern patterns[] = {
    {"steady", "8 req/s for the whole run (under the 10/s rate: nothing should be rejected)", 1,
     30, gen_steady},
    {"burst", "idle 5 s, then 30 requests at once, then 8 req/s", 1, 10, gen_burst},
    {"boundary", "20 requests just before a second boundary and 20 just after", 1, 6,
     gen_boundary},
    {"identities", "4 identities at 5, 10, 15 and 20 req/s, each limited on its own", 4, 10,
     gen_identities},
};
#define NPATTERNS (sizeof(patterns) / sizeof(patterns[0]))

typedef struct sim_algo {
    const char *label;
    sluice_limit_spec spec;
} sim_algo;

static void fill_algos(sim_algo *a, size_t *n) {
    size_t k = 0;
    const int64_t s = SLUICE_NS_PER_S;
    a[k++] = (sim_algo){"fixed_window 10/s",
                        {.algo = SLUICE_FIXED_WINDOW, .name = "fw", .limit = 10, .period_ns = s}};
    a[k++] = (sim_algo){"sliding_window 10/s",
                        {.algo = SLUICE_SLIDING_WINDOW, .name = "sw", .limit = 10, .period_ns = s}};
    a[k++] = (sim_algo){"sliding_log 10/s",
                        {.algo = SLUICE_SLIDING_LOG, .name = "sl", .limit = 10, .period_ns = s}};
    a[k++] = (sim_algo){"token_bucket 10/s b20", {.algo = SLUICE_TOKEN_BUCKET, .name = "tb",
                                                  .limit = 10, .period_ns = s, .burst = 20}};
    a[k++] = (sim_algo){"gcra 10/s b20",
                        {.algo = SLUICE_GCRA, .name = "gc", .limit = 10, .period_ns = s, .burst = 20}};
    a[k++] = (sim_algo){"leaky_bucket 10/s q20 (shaped)",
                        {.algo = SLUICE_LEAKY_BUCKET, .name = "lb", .limit = 10, .period_ns = s,
                         .burst = 20, .max_delay_ns = 2 * s}};
    a[k++] = (sim_algo){"concurrency 3 (300 ms each)", {.algo = SLUICE_CONCURRENCY, .name = "cc",
                                                        .limit = 3, .lease_ns = 30 * s}};
    a[k++] = (sim_algo){"quota 100/day UTC", {.algo = SLUICE_QUOTA, .name = "qt", .limit = 100,
                                              .quota_period = SLUICE_PERIOD_DAY}};
    *n = k;
}

typedef struct held {
    int64_t until_ns;
    uint64_t lease;
    int id;
} held;

/* Runs one pattern against one algorithm; fills per-second admitted counts per identity. */
static int run_one(const sim_pattern *p, const sim_algo *a, const sim_event *ev, size_t nev,
                   int seconds, uint64_t (*per_s)[SIM_MAX_SECONDS], uint64_t *total,
                   int64_t *max_delay) {
    int err = 0;
    char msg[256] = "";
    sluice_limiter *lim = sluice_limiter_create(&a->spec, &err, msg, sizeof(msg));
    if (lim == NULL) {
        fprintf(stderr, "simulate: %s: %s (%s)\n", a->label, sluice_strerror(err), msg);
        return -1;
    }
    sluice_store_options opt = {.max_keys = 1024};
    sluice_store *st = sluice_store_create(&opt, &err);
    if (st == NULL || (err = sluice_store_register(st, lim)) != SLUICE_OK) {
        fprintf(stderr, "simulate: store: %s\n", sluice_strerror(err));
        sluice_store_destroy(st);
        sluice_limiter_destroy(lim);
        return -1;
    }
    /* A fixed wall-clock origin at midnight UTC keeps windows and days aligned. */
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1798761600) * SLUICE_NS_PER_S);
    static held h[SIM_MAX_HELD];
    size_t nheld = 0;
    int64_t elapsed = 0;
    for (size_t i = 0; i < nev; i++) {
        sluice_clock_advance(clk, ev[i].at_ns - elapsed);
        elapsed = ev[i].at_ns;
        sluice_time now = sluice_clock_now(clk);
        char key[16];
        int klen = snprintf(key, sizeof(key), "client-%d", ev[i].id);
        /* Concurrency: requests finish 300 ms after they were admitted. */
        for (size_t j = 0; j < nheld;) {
            if (h[j].until_ns <= elapsed) {
                snprintf(key, sizeof(key), "client-%d", h[j].id);
                sluice_release(st, lim, key, (size_t)klen, h[j].lease, now);
                h[j] = h[--nheld];
            } else {
                j++;
            }
        }
        klen = snprintf(key, sizeof(key), "client-%d", ev[i].id);
        sluice_item item = {.limiter = lim, .key = key, .key_len = (size_t)klen, .cost = 1};
        sluice_decision d;
        if (sluice_decide(st, &item, 1, now, &d) != SLUICE_OK || !d.allowed) continue;
        int sec = (int)(ev[i].at_ns / SLUICE_NS_PER_S);
        if (sec < seconds) per_s[ev[i].id][sec]++;
        total[ev[i].id]++;
        if (d.results[0].delay_ns > *max_delay) *max_delay = d.results[0].delay_ns;
        if (a->spec.algo == SLUICE_CONCURRENCY && nheld < SIM_MAX_HELD)
            h[nheld++] = (held){elapsed + 300 * SLUICE_NS_PER_MS, d.results[0].lease, ev[i].id};
    }
    (void)p;
    sluice_clock_destroy(clk);
    sluice_store_destroy(st);
    sluice_limiter_destroy(lim);
    return 0;
}

static int simulate(const sim_pattern *p, int seconds) {
    static sim_event ev[200000];
    size_t nev = p->gen(ev, sizeof(ev) / sizeof(ev[0]), seconds);
    uint64_t sent[SIM_MAX_IDS] = {0};
    for (size_t i = 0; i < nev; i++) sent[ev[i].id]++;
    int shown = seconds > 30 ? 30 : seconds;

    printf("\n== %s: %s (%d s, %zu requests)\n", p->name, p->what, seconds, nev);
    printf("admitted per second");
    if (p->ids > 1) printf(" (per identity: client-0..client-%d)", p->ids - 1);
    printf("\n%-31s", "algorithm");
    for (int s = 0; s < shown; s++) printf("%4d", s);
    printf("   total\n");

    sim_algo algos[16];
    size_t nalgo;
    fill_algos(algos, &nalgo);
    for (size_t a = 0; a < nalgo; a++) {
        uint64_t per_s[SIM_MAX_IDS][SIM_MAX_SECONDS];
        uint64_t total[SIM_MAX_IDS] = {0};
        int64_t max_delay = 0;
        memset(per_s, 0, sizeof(per_s));
        if (run_one(p, &algos[a], ev, nev, seconds, per_s, total, &max_delay) != 0) return 1;
        for (int id = 0; id < p->ids; id++) {
            if (p->ids > 1)
                printf("%-22.22s client-%d", id == 0 ? algos[a].label : "", id);
            else
                printf("%-31.31s", algos[a].label);
            for (int s = 0; s < shown; s++) printf("%4" PRIu64, per_s[id][s]);
            printf("  %3" PRIu64 "/%-3" PRIu64, total[id], sent[id]);
            if (id == 0 && max_delay > 0)
                printf("  longest delay %" PRId64 " ms", max_delay / SLUICE_NS_PER_MS);
            printf("\n");
        }
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: sluice simulate [PATTERN|validation|all] [--seconds N]\npatterns:\n");
    for (size_t i = 0; i < NPATTERNS; i++)
        fprintf(f, "  %-11s %s (%d s)\n", patterns[i].name, patterns[i].what, patterns[i].seconds);
    fprintf(f, "  %-11s steady, burst and identities (the validation plan)\n", "validation");
    fprintf(f, "  %-11s every pattern\n", "all");
}

int sl_cli_simulate(int argc, char **argv) {
    const char *which = "validation";
    int seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end != '\0' || v < 1 || v > SIM_MAX_SECONDS) {
                fprintf(stderr, "simulate: --seconds takes 1..%d\n", SIM_MAX_SECONDS);
                return 2;
            }
            seconds = (int)v;
        } else if (argv[i][0] != '-') {
            which = argv[i];
        } else {
            fprintf(stderr, "simulate: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    int ran = 0;
    for (size_t i = 0; i < NPATTERNS; i++) {
        int in_validation = strcmp(patterns[i].name, "boundary") != 0;
        if (strcmp(which, "all") == 0 || strcmp(which, patterns[i].name) == 0 ||
            (strcmp(which, "validation") == 0 && in_validation)) {
            if (simulate(&patterns[i], seconds ? seconds : patterns[i].seconds) != 0) return 1;
            ran++;
        }
    }
    if (!ran) {
        fprintf(stderr, "simulate: unknown pattern '%s'\n", which);
        usage(stderr);
        return 2;
    }
    return 0;
}
