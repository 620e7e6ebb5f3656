/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simulate.c -- `sluice simulate [PATTERN|FILE] [-c CONFIG] [--svg DIR] [--html FILE]`:
 * replays a traffic pattern on a manual clock, side by side, against every algorithm
 * (10 units/s, buckets of 20, comparable parameters) or, with -c, against each of the
 * config's policies (each on its own fresh store, through the engine), and prints per
 * row what was admitted in each second and in total; --svg draws the same.
 * Patterns: the built-in ones below or a pattern file (docs/replay.md). Times in ns.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/opts.h"
#include "engine/engine.h"
#include "sluice.h"
#include "svg.h"

#define SIM_MAX_SECONDS 120
#define SIM_MAX_IDS 8
#define SIM_MAX_HELD 4096
#define SIM_MAX_EVENTS 200000
#define SIM_MAX_ROWS 16

typedef struct sim_event {
    int64_t at_ns;
    int id;
    uint64_t cost; /* 0 = the subject's default (1 for algorithms) */
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
        ev[n++] = (sim_event){t, 0, 0};
    return n;
}

static size_t gen_burst(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* Idle for 5 s, then 30 requests within 30 ms, then 8/s until the end. */
    int64_t start = 5 * SLUICE_NS_PER_S;
    for (int i = 0; i < 30 && n < cap; i++) ev[n++] = (sim_event){start + i * SLUICE_NS_PER_MS, 0, 0};
    for (int64_t t = start + SLUICE_NS_PER_S; t < (int64_t)seconds * SLUICE_NS_PER_S && n < cap;
         t += 125 * SLUICE_NS_PER_MS)
        ev[n++] = (sim_event){t, 0, 0};
    return n;
}

static size_t gen_boundary(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* Idle, then 20 requests in the last 100 ms of second 3 and 20 in the first 100 ms
     * of second 4: a fixed window sees two half-empty windows. */
    (void)seconds;
    int64_t edge = 4 * SLUICE_NS_PER_S;
    for (int i = 0; i < 20 && n < cap; i++)
        ev[n++] = (sim_event){edge - 100 * SLUICE_NS_PER_MS + i * 5 * SLUICE_NS_PER_MS, 0, 0};
    for (int i = 0; i < 20 && n < cap; i++) ev[n++] = (sim_event){edge + i * 5 * SLUICE_NS_PER_MS, 0, 0};
    return n;
}

static size_t gen_identities(sim_event *ev, size_t cap, int seconds) {
    size_t n = 0;
    /* 4 identities; identity k sends (5 + 5k) requests per second. */
    for (int64_t ms = 0; ms < (int64_t)seconds * 1000 && n < cap; ms++)
        for (int k = 0; k < 4 && n < cap; k++) {
            int per_s = 5 + 5 * k;
            if (ms % (1000 / per_s) == 0) ev[n++] = (sim_event){ms * SLUICE_NS_PER_MS, k, 0};
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

/* ---- pattern files ------------------------------------------------------------------------ */

/* A pattern read from a file: its own name, description, identities and events. */
typedef struct file_pattern {
    char name[64];
    char what[256];
    int seconds;
    int ids;
    char idnames[SIM_MAX_IDS][48];
    size_t n;
    sim_event *ev;
} file_pattern;

static bool parse_time_ns(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return false;
    if (strcmp(end, "ms") == 0) *out = (int64_t)(v * 1e6);
    else if (strcmp(end, "s") == 0 || *end == '\0') *out = (int64_t)(v * 1e9);
    else if (strcmp(end, "min") == 0 || strcmp(end, "m") == 0) *out = (int64_t)(v * 60e9);
    else return false;
    return true;
}

/* "8/s", "120/min", "2/500ms": `n` events per `per_ns` */
static bool parse_rate(const char *s, double *n, int64_t *per_ns) {
    char *end;
    *n = strtod(s, &end);
    if (end == s || *n <= 0 || *end != '/') return false;
    const char *u = end + 1;
    if (strcmp(u, "s") == 0) *per_ns = SLUICE_NS_PER_S;
    else if (strcmp(u, "min") == 0 || strcmp(u, "m") == 0) *per_ns = 60 * SLUICE_NS_PER_S;
    else if (!parse_time_ns(u, per_ns) || *per_ns <= 0) return false;
    return *per_ns / *n >= 1;
}

static int id_of(file_pattern *fp, const char *key) {
    for (int i = 0; i < fp->ids; i++)
        if (strcmp(fp->idnames[i], key) == 0) return i;
    if (fp->ids >= SIM_MAX_IDS || strlen(key) >= sizeof(fp->idnames[0])) return -1;
    strcpy(fp->idnames[fp->ids], key);
    return fp->ids++;
}

static int cmp_event(const void *a, const void *b) {
    const sim_event *x = a, *y = b;
    return x->at_ns < y->at_ns ? -1 : x->at_ns > y->at_ns ? 1 : 0;
}

static bool add_event(file_pattern *fp, int64_t at, int id, uint64_t cost) {
    if (fp->n >= SIM_MAX_EVENTS) return false;
    fp->ev[fp->n++] = (sim_event){at, id, cost};
    return true;
}

/* Lines: `name N`, `describe TEXT`, `seconds N`, and events:
 *   steady RATE [from T] [to T] [key K] [cost N]     evenly spaced
 *   burst COUNT at T [within D] [key K] [cost N]     COUNT spread over D (default 10 ms)
 *   at T [key K] [cost N]                            one request
 * '#' starts a comment. Errors are reported as FILE:LINE: message. */
static int load_pattern(const char *path, file_pattern *fp) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "simulate: %s: %s\n", path, strerror(errno));
        return -1;
    }
    memset(fp, 0, sizeof(*fp));
    fp->ev = calloc(SIM_MAX_EVENTS, sizeof(sim_event));
    if (fp->ev == NULL) {
        fclose(f);
        return -1;
    }
    const char *base = strrchr(path, '/');
    snprintf(fp->name, sizeof(fp->name), "%s", base ? base + 1 : path);
    snprintf(fp->what, sizeof(fp->what), "pattern file %s", path);
    char line[1024];
    int lineno = 0, rc = 0;
    int64_t end_ns = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *tok[16];
        int nt = 0;
        for (char *s = strtok(line, " \t\r\n"); s && nt < 16; s = strtok(NULL, " \t\r\n")) tok[nt++] = s;
        if (nt == 0) continue;
        const char *err = NULL;
        if (strcmp(tok[0], "name") == 0 && nt == 2) {
            snprintf(fp->name, sizeof(fp->name), "%s", tok[1]);
            continue;
        }
        if (strcmp(tok[0], "describe") == 0 && nt >= 2) {
            fp->what[0] = '\0';
            for (int i = 1; i < nt; i++) {
                size_t o = strlen(fp->what);
                snprintf(fp->what + o, sizeof(fp->what) - o, "%s%s", i > 1 ? " " : "", tok[i]);
            }
            continue;
        }
        if (strcmp(tok[0], "seconds") == 0 && nt == 2) {
            fp->seconds = atoi(tok[1]);
            if (fp->seconds < 1 || fp->seconds > SIM_MAX_SECONDS) err = "seconds: 1..120";
        } else if (strcmp(tok[0], "steady") == 0 || strcmp(tok[0], "burst") == 0 ||
                   strcmp(tok[0], "at") == 0) {
            const char *key = "client-0";
            uint64_t cost = 0;
            int64_t from = 0, to = -1, at = -1, within = 10 * SLUICE_NS_PER_MS, per = 0;
            double rate = 0;
            long count = 0;
            int i = 1;
            if (strcmp(tok[0], "steady") == 0) {
                if (nt < 2 || !parse_rate(tok[1], &rate, &per)) err = "steady RATE: a rate like 8/s";
                i = 2;
            } else if (strcmp(tok[0], "burst") == 0) {
                count = nt >= 2 ? strtol(tok[1], NULL, 10) : 0;
                if (count < 1 || count > SIM_MAX_EVENTS) err = "burst COUNT: a count from 1";
                i = 2;
            } else {
                if (nt < 2 || !parse_time_ns(tok[1], &at)) err = "at T: a time like 1.5s";
                i = 2;
            }
            for (; err == NULL && i < nt; i += 2) {
                const char *k = tok[i], *v = i + 1 < nt ? tok[i + 1] : NULL;
                if (v == NULL) err = "a keyword without its value";
                else if (strcmp(k, "key") == 0) key = v;
                else if (strcmp(k, "cost") == 0) cost = strtoull(v, NULL, 10);
                else if (strcmp(k, "from") == 0 && parse_time_ns(v, &from)) {
                } else if (strcmp(k, "to") == 0 && parse_time_ns(v, &to)) {
                } else if (strcmp(k, "at") == 0 && parse_time_ns(v, &at)) {
                } else if (strcmp(k, "within") == 0 && parse_time_ns(v, &within)) {
                } else err = "unknown keyword or bad value (key, cost, from, to, at, within)";
            }
            int id = err ? 0 : id_of(fp, key);
            if (id < 0) err = "at most 8 keys per pattern";
            if (err == NULL && tok[0][0] == 's') {
                if (to < 0) to = (fp->seconds ? fp->seconds : 10) * SLUICE_NS_PER_S;
                /* rate x duration events, evenly spaced from `from` (no rounding drift) */
                double span = (double)(to > from ? to - from : 0);
                int64_t count = (int64_t)(span * rate / (double)per + 1e-9);
                for (int64_t c = 0; c < count && err == NULL; c++)
                    if (!add_event(fp, from + (int64_t)((double)c * (double)per / rate), id, cost))
                        err = "too many events (200000)";
                if (to > end_ns) end_ns = to;
            } else if (err == NULL && tok[0][0] == 'b') {
                if (at < 0) err = "burst needs 'at T'";
                for (long c = 0; err == NULL && c < count; c++)
                    if (!add_event(fp, at + within * c / count, id, cost)) err = "too many events (200000)";
                if (at + within > end_ns) end_ns = at + within;
            } else if (err == NULL) {
                if (!add_event(fp, at, id, cost)) err = "too many events (200000)";
                if (at > end_ns) end_ns = at;
            }
        } else {
            err = "unknown line (name, describe, seconds, steady, burst, at)";
        }
        if (err != NULL) {
            fprintf(stderr, "simulate: %s:%d: %s\n", path, lineno, err);
            rc = -1;
        }
    }
    fclose(f);
    if (rc == 0 && fp->n == 0) {
        fprintf(stderr, "simulate: %s: no requests in the pattern\n", path);
        rc = -1;
    }
    if (rc != 0) {
        free(fp->ev);
        fp->ev = NULL;
        return rc;
    }
    qsort(fp->ev, fp->n, sizeof(sim_event), cmp_event);
    if (fp->seconds == 0) {
        int64_t s = (end_ns + SLUICE_NS_PER_S - 1) / SLUICE_NS_PER_S;
        fp->seconds = (int)(s < 1 ? 1 : s > SIM_MAX_SECONDS ? SIM_MAX_SECONDS : s);
    }
    return 0;
}

/* ---- what is simulated: an algorithm or a policy -------------------------------------------- */

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
    const sluice_limiter *lim;
    uint64_t lease;
    unsigned char key[64];
    size_t key_len;
} held;

/* One row: an algorithm (its own limiter and store) or a config policy (an engine on its
 * own store, decided with the policy's explicit form). */
typedef struct subject {
    const char *label;
    const sim_algo *algo;      /* or */
    const sl_config *cfg;
    const char *policy;
    /* state for one run */
    sluice_store *st;
    sluice_limiter *lim;
    sl_engine *e;
} subject;

enum { OUT_ADMITTED = 0, OUT_DELAYED = 1, OUT_REJECTED = 2 };

typedef struct row {
    uint64_t per_s[3][SIM_MAX_IDS][SIM_MAX_SECONDS];
    uint64_t total[SIM_MAX_IDS];
    int64_t max_delay;
} row;

static int subject_open(subject *s) {
    int err = 0;
    char msg[256] = "";
    sluice_store_options opt = {.max_keys = 1024};
    s->st = sluice_store_create(&opt, &err);
    if (s->st == NULL) {
        fprintf(stderr, "simulate: store: %s\n", sluice_strerror(err));
        return -1;
    }
    if (s->algo != NULL) {
        s->lim = sluice_limiter_create(&s->algo->spec, &err, msg, sizeof(msg));
        if (s->lim == NULL || (err = sluice_store_register(s->st, s->lim)) != SLUICE_OK) {
            fprintf(stderr, "simulate: %s: %s (%s)\n", s->label, sluice_strerror(err), msg);
            return -1;
        }
        return 0;
    }
    s->e = sl_engine_create(s->cfg, s->st, &err, msg, sizeof(msg));
    if (s->e == NULL) {
        fprintf(stderr, "simulate: %s\n", msg);
        return -1;
    }
    return 0;
}

static void subject_close(subject *s) {
    sl_engine_destroy(s->e);
    sluice_store_destroy(s->st);
    sluice_limiter_destroy(s->lim);
    s->e = NULL;
    s->st = NULL;
    s->lim = NULL;
}

/* Decides one event; fills at most one lease to hold. Returns OUT_*, -1 on error. */
static int subject_decide(subject *s, const char *key, size_t klen, uint64_t cost,
                          sluice_time now, int64_t *delay, held *h) {
    *delay = 0;
    h->lease = 0;
    if (s->algo != NULL) {
        sluice_item item = {.limiter = s->lim, .key = key, .key_len = klen, .cost = cost ? cost : 1};
        sluice_decision d;
        if (sluice_decide(s->st, &item, 1, now, &d) != SLUICE_OK) return -1;
        if (!d.allowed) return OUT_REJECTED;
        *delay = d.results[0].delay_ns;
        if (d.results[0].lease != 0) {
            h->lim = s->lim;
            h->lease = d.results[0].lease;
            memcpy(h->key, key, klen);
            h->key_len = klen;
        }
        return *delay > 0 ? OUT_DELAYED : OUT_ADMITTED;
    }
    static sl_verdict v;
    int rc = sl_engine_check_named(s->e, s->policy, key, klen, cost != 0, cost, now, &v);
    if (rc != SLUICE_OK) return -1;
    if (v.action == SL_REJECT || v.action == SL_FAIL || v.action == SL_ERROR) return OUT_REJECTED;
    if (v.action == SL_DELAY && v.recheck) {
        /* "hold and check again": shown as a delay of that long (nothing was consumed) */
        *delay = v.delay_ns;
        return OUT_DELAYED;
    }
    *delay = v.action == SL_DELAY ? v.delay_ns : 0;
    for (size_t i = 0; i < v.n; i++) {
        const sl_verdict_item *it = &v.items[i];
        if (it->result.lease != 0 && it->consumed && it->info->limiter != NULL &&
            it->key_len <= sizeof(h->key)) {
            h->lim = it->info->limiter;
            h->lease = it->result.lease;
            memcpy(h->key, v.keys + it->key_off, it->key_len);
            h->key_len = it->key_len;
            break; /* one concurrency window per policy in practice */
        }
    }
    return *delay > 0 ? OUT_DELAYED : OUT_ADMITTED;
}

/* Runs the events against one subject; fills per-second outcomes per identity. Requests
 * holding a concurrency slot finish 300 ms after they were admitted. */
static int run_one(subject *s, const sim_event *ev, size_t nev, int seconds,
                   char idnames[][48], row *out) {
    if (subject_open(s) != 0) {
        subject_close(s);
        return -1;
    }
    /* A fixed wall-clock origin at midnight UTC keeps windows and days aligned. */
    const int64_t wall0 = INT64_C(1798761600) * SLUICE_NS_PER_S;
    static held h[SIM_MAX_HELD];
    size_t nheld = 0;
    int rc = 0;
    for (size_t i = 0; i < nev && rc == 0; i++) {
        int64_t at = ev[i].at_ns;
        sluice_time now = {SLUICE_NS_PER_S + at, wall0 + at};
        for (size_t j = 0; j < nheld;) {
            if (h[j].until_ns <= at) {
                sluice_release(s->st, h[j].lim, h[j].key, h[j].key_len, h[j].lease, now);
                h[j] = h[--nheld];
            } else {
                j++;
            }
        }
        const char *key = idnames[ev[i].id];
        int64_t delay;
        held nh;
        int o = subject_decide(s, key, strlen(key), ev[i].cost, now, &delay, &nh);
        if (o < 0) {
            fprintf(stderr, "simulate: %s: the request could not be decided\n", s->label);
            rc = -1;
            break;
        }
        int sec = (int)(at / SLUICE_NS_PER_S);
        if (sec < seconds) out->per_s[o][ev[i].id][sec]++;
        if (o != OUT_REJECTED) out->total[ev[i].id]++;
        if (delay > out->max_delay) out->max_delay = delay;
        if (nh.lease != 0 && nheld < SIM_MAX_HELD) {
            nh.until_ns = at + 300 * SLUICE_NS_PER_MS;
            h[nheld++] = nh;
        }
    }
    subject_close(s);
    return rc;
}

/* ---- output ----------------------------------------------------------------------------------- */

typedef struct sim_opts {
    const sl_config *cfg;
    const char *config_path;
    const char *svg_dir;
    sl_buf *html;       /* NULL unless --html */
    int seconds;        /* 0 = the pattern's */
} sim_opts;

static size_t subjects_for(const sim_opts *o, subject *subj, sim_algo *algos) {
    size_t n = 0;
    if (o->cfg == NULL) {
        size_t na;
        fill_algos(algos, &na);
        for (size_t i = 0; i < na; i++) subj[n++] = (subject){.label = algos[i].label, .algo = &algos[i]};
        return n;
    }
    for (size_t i = 0; i < sl_config_policy_count(o->cfg) && n < SIM_MAX_ROWS; i++) {
        const char *name = sl_config_policy_name(o->cfg, i);
        subj[n++] = (subject){.label = name, .cfg = o->cfg, .policy = name};
    }
    return n;
}

static void plot_rows(const sim_opts *o, const char *name, const char *what, int seconds,
                      const subject *subj, size_t nsubj, row *const *rows, int ids, sl_buf *b) {
    static sl_plot p;
    memset(&p, 0, sizeof(p));
    static char title[256], sub[320], ptitle[SIM_MAX_ROWS][160];
    static double y[SIM_MAX_ROWS][3][SIM_MAX_SECONDS];
    snprintf(title, sizeof(title), "sluice simulate: %s", name);
    snprintf(sub, sizeof(sub), "%s%s%s; each row on its own fresh state", what,
             o->cfg ? "; policies of " : "; algorithms at 10/s (buckets of 20)",
             o->cfg ? o->config_path : "");
    p.id = name;
    p.title = title;
    p.subtitle = sub;
    p.xlabel = "time since the start of the pattern (s)";
    p.x0 = 0;
    p.dx = 1;
    p.panel_height = 110;
    for (size_t r = 0; r < nsubj && p.npanels < SL_PLOT_PANELS; r++) {
        sl_plot_panel *pn = &p.panels[p.npanels++];
        uint64_t sent = 0, ok = 0;
        for (int k = 0; k < 3; k++)
            for (int s = 0; s < seconds; s++) {
                double v = 0;
                for (int id = 0; id < ids; id++) v += (double)rows[r]->per_s[k][id][s];
                y[r][k][s] = v;
                sent += (uint64_t)v;
                if (k != OUT_REJECTED) ok += (uint64_t)v;
            }
        snprintf(ptitle[r], sizeof(ptitle[r]), "%s: %" PRIu64 " of %" PRIu64 " admitted%s", subj[r].label,
                 ok, sent, ids > 1 ? " (all identities)" : "");
        pn->title = ptitle[r];
        pn->ylabel = "requests/s";
        /* the legend once, above the first row */
        pn->series[pn->nseries++] = (sl_plot_series){r ? NULL : "admitted", SL_COLOR_ADMITTED, y[r][OUT_ADMITTED], NULL, (size_t)seconds, SL_PLOT_BARS, false};
        pn->series[pn->nseries++] = (sl_plot_series){r ? NULL : "admitted after a delay", SL_COLOR_DELAYED, y[r][OUT_DELAYED], NULL, (size_t)seconds, SL_PLOT_BARS, false};
        pn->series[pn->nseries++] = (sl_plot_series){r ? NULL : "rejected", SL_COLOR_REJECTED, y[r][OUT_REJECTED], NULL, (size_t)seconds, SL_PLOT_BARS, false};
    }
    sl_svg_plot(b, &p);
}

static int simulate(const sim_opts *o, const char *name, const char *what, int seconds,
                    const sim_event *ev, size_t nev, int ids, char idnames[][48]) {
    uint64_t sent[SIM_MAX_IDS] = {0};
    for (size_t i = 0; i < nev; i++) sent[ev[i].id]++;
    int shown = seconds > 30 ? 30 : seconds;
    sl_buf txt = {0};

    sl_buf_printf(&txt, "\n== %s: %s (%d s, %zu requests)\n", name, what, seconds, nev);
    sl_buf_printf(&txt, "admitted per second");
    if (ids > 1) sl_buf_printf(&txt, " (per identity: %s..%s)", idnames[0], idnames[ids - 1]);
    sl_buf_printf(&txt, "\n%-31s", o->cfg ? "policy" : "algorithm");
    for (int s = 0; s < shown; s++) sl_buf_printf(&txt, "%4d", s);
    sl_buf_printf(&txt, "   total\n");

    static sim_algo algos[16];
    static subject subj[SIM_MAX_ROWS];
    size_t nsubj = subjects_for(o, subj, algos);
    row *rows[SIM_MAX_ROWS] = {0};
    int rc = 0;
    for (size_t a = 0; a < nsubj && rc == 0; a++) {
        rows[a] = calloc(1, sizeof(row));
        if (rows[a] == NULL || run_one(&subj[a], ev, nev, seconds, idnames, rows[a]) != 0) {
            rc = 1;
            break;
        }
        const row *rw = rows[a];
        for (int id = 0; id < ids; id++) {
            if (ids > 1)
                sl_buf_printf(&txt, "%-22.22s %-8.8s", id == 0 ? subj[a].label : "", idnames[id]);
            else
                sl_buf_printf(&txt, "%-31.31s", subj[a].label);
            for (int s = 0; s < shown; s++)
                sl_buf_printf(&txt, "%4" PRIu64, rw->per_s[OUT_ADMITTED][id][s] + rw->per_s[OUT_DELAYED][id][s]);
            sl_buf_printf(&txt, "  %3" PRIu64 "/%-3" PRIu64, rw->total[id], sent[id]);
            if (id == 0 && rw->max_delay > 0)
                sl_buf_printf(&txt, "  longest delay %" PRId64 " ms", rw->max_delay / SLUICE_NS_PER_MS);
            sl_buf_printf(&txt, "\n");
        }
    }
    if (txt.p) fputs(txt.p, stdout);
    if (rc == 0 && (o->svg_dir != NULL || o->html != NULL)) {
        sl_buf svg = {0};
        plot_rows(o, name, what, seconds, subj, nsubj, rows, ids, &svg);
        if (o->svg_dir != NULL) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/simulate-%s.svg", o->svg_dir, name);
            if (sl_buf_write(&svg, path) != 0) {
                fprintf(stderr, "simulate: cannot write %s: %s\n", path, strerror(errno));
                rc = 1;
            }
        }
        if (o->html != NULL && svg.p != NULL) {
            sl_buf_printf(o->html, "<h2>");
            sl_buf_xml(o->html, name);
            sl_buf_printf(o->html, "</h2>\n<pre>");
            sl_buf_xml(o->html, txt.p ? txt.p : "");
            sl_buf_printf(o->html, "</pre>\n%s\n", strstr(svg.p, "<svg") ? strstr(svg.p, "<svg") : svg.p);
        }
        sl_buf_free(&svg);
    }
    sl_buf_free(&txt);
    for (size_t a = 0; a < nsubj; a++) free(rows[a]);
    return rc;
}

static int simulate_builtin(const sim_opts *o, const sim_pattern *p) {
    static sim_event ev[SIM_MAX_EVENTS];
    int seconds = o->seconds ? o->seconds : p->seconds;
    size_t nev = p->gen(ev, SIM_MAX_EVENTS, seconds);
    char idnames[SIM_MAX_IDS][48];
    for (int i = 0; i < SIM_MAX_IDS; i++) snprintf(idnames[i], sizeof(idnames[i]), "client-%d", i);
    return simulate(o, p->name, p->what, seconds, ev, nev, p->ids, idnames);
}

static void usage(FILE *f) {
    fprintf(f, "usage: sluice simulate [PATTERN|validation|all|FILE] [-c CONFIG] [--seconds N]\n"
               "                       [--svg DIR] [--html FILE]\n"
               "  runs a traffic pattern on a fake clock against every algorithm (10 units/s,\n"
               "  buckets of 20) or, with -c, against each policy of CONFIG, side by side.\n"
               "  FILE: a pattern file (docs/replay.md): steady/burst/at lines.\n"
               "patterns:\n");
    for (size_t i = 0; i < NPATTERNS; i++)
        fprintf(f, "  %-11s %s (%d s)\n", patterns[i].name, patterns[i].what, patterns[i].seconds);
    sl_sim_cap_usage(f); /* capacity protection: simulate_cap.c */
    fprintf(f, "  %-11s steady, burst and identities (the validation plan)\n", "validation");
    fprintf(f, "  %-11s every pattern\n", "all");
}

int sl_cli_simulate(int argc, char **argv) {
    const char *which = "validation", *html_path = NULL;
    sim_opts o = {0};
    enum { O_SECONDS = 256, O_SVG, O_HTML };
    static const struct option lo[] = {
        {"config", required_argument, NULL, 'c'}, {"seconds", required_argument, NULL, O_SECONDS},
        {"svg", required_argument, NULL, O_SVG}, {"html", required_argument, NULL, O_HTML},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    sl_opts op;
    sl_opts_init(&op, "simulate", lo, "c:h", false);
    for (;;) {
        const char *v;
        int ch = sl_opts_next(&op, argc, argv, &v);
        if (ch == SL_OPT_END) break;
        if (ch == SL_OPT_ERR) return 2;
        if (ch == 'h') {
            usage(stdout);
            return 0;
        } else if (ch == O_SECONDS) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || n < 1 || n > SIM_MAX_SECONDS) {
                fprintf(stderr, "sluice simulate: --seconds takes 1..%d, got '%s'\n", SIM_MAX_SECONDS, v);
                return 2;
            }
            o.seconds = (int)n;
        } else if (ch == 'c') {
            o.config_path = v;
        } else if (ch == O_SVG) {
            o.svg_dir = v;
        } else if (ch == O_HTML) {
            html_path = v;
        }
    }
    if (optind < argc) which = argv[optind++];
    if (optind < argc) return sl_opts_usage_error(&op, "unexpected argument", argv[optind]);
    sl_config *cfg = NULL;
    if (o.config_path != NULL) {
        static sl_diag_list dl;
        if (sl_config_load(o.config_path, &cfg, &dl) != SLUICE_OK) {
            char msg[SL_DIAG_MSG + 300];
            for (size_t i = 0; i < dl.n; i++) {
                sl_diag_format(&dl, i, msg, sizeof(msg));
                fprintf(stderr, "%s\n", msg);
            }
            if (dl.n == 0) fprintf(stderr, "simulate: cannot load %s\n", o.config_path);
            return 1;
        }
        o.cfg = cfg;
    }
    if (o.svg_dir != NULL && mkdir(o.svg_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "simulate: cannot create %s: %s\n", o.svg_dir, strerror(errno));
        sl_config_destroy(cfg);
        return 1;
    }
    sl_buf html = {0};
    if (html_path != NULL) {
        o.html = &html;
        sl_buf_printf(&html, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                             "<title>sluice simulate</title>\n<style>body{font-family:DejaVu Sans,"
                             "Helvetica,Arial,sans-serif;margin:24px;max-width:1100px;color:#222}"
                             "pre{background:#f7f7f7;padding:10px;font-size:12px;overflow:auto}"
                             "svg{max-width:100%%;height:auto}</style></head><body>\n"
                             "<h1>sluice simulate</h1>\n");
    }
    int ran = 0, rc = 0;
    struct stat stt;
    bool is_file = strchr(which, '/') != NULL || strchr(which, '.') != NULL ||
                   (stat(which, &stt) == 0 && S_ISREG(stt.st_mode));
    bool known = sl_sim_cap_known(which);
    for (size_t i = 0; i < NPATTERNS; i++) known |= strcmp(which, patterns[i].name) == 0;
    if (is_file && !known && strcmp(which, "all") != 0 && strcmp(which, "validation") != 0) {
        file_pattern fp;
        if (load_pattern(which, &fp) != 0) {
            rc = 1;
        } else {
            ran = 1;
            rc = simulate(&o, fp.name, fp.what, o.seconds ? o.seconds : fp.seconds, fp.ev, fp.n,
                          fp.ids, fp.idnames);
            free(fp.ev);
        }
    } else {
        for (size_t i = 0; i < NPATTERNS && rc == 0; i++) {
            int in_validation = strcmp(patterns[i].name, "boundary") != 0;
            if (strcmp(which, "all") == 0 || strcmp(which, patterns[i].name) == 0 ||
                (strcmp(which, "validation") == 0 && in_validation)) {
                rc = simulate_builtin(&o, &patterns[i]);
                ran++;
            }
        }
        if (rc == 0 && (sl_sim_cap_known(which) || strcmp(which, "all") == 0))
            rc = sl_sim_cap_run(which, o.svg_dir, o.html, &ran);
        if (!ran) {
            fprintf(stderr, "simulate: unknown pattern '%s'\n", which);
            usage(stderr);
            rc = 2;
        }
    }
    if (html_path != NULL) {
        sl_buf_printf(&html, "<p>Generated by sluice %s.</p></body></html>\n", SLUICE_VERSION);
        if (rc == 0 && sl_buf_write(&html, html_path) != 0) {
            fprintf(stderr, "simulate: cannot write %s: %s\n", html_path, strerror(errno));
            rc = 1;
        }
        sl_buf_free(&html);
    }
    sl_config_destroy(cfg);
    return rc;
}
