/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prom.c -- the Prometheus text exposition writer (see prom.h). Output grows in one
 * buffer (doubling); every check that fails records its reason once and stops all output,
 * so a scrape gets either a valid exposition or an error, never half of a wrong one.
 * Units: histogram values and sums are integers in the caller's unit, divided by `scale`
 * (a power of ten) only when printed.
 */
#include "core/prom.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/json.h"
#include "core/log.h"

static void fail(sl_prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(sl_prom *p, const char *fmt, ...) {
    if (p->err) return;
    p->err = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
    va_end(ap);
}

void sl_prom_init(sl_prom *p) {
    memset(p, 0, sizeof(*p));
}

void sl_prom_deinit(sl_prom *p) {
    free(p->buf);
    for (size_t i = 0; i < p->nseen; i++) free(p->seen[i]);
    free(p->seen);
    memset(p, 0, sizeof(*p));
}

static void put(sl_prom *p, const void *s, size_t n) {
    if (p->err) return;
    if (n + 1 > p->cap - p->len) {
        size_t nc = p->cap ? p->cap : 4096;
        while (n + 1 > nc - p->len) nc *= 2;
        char *nb = realloc(p->buf, nc);
        if (nb == NULL) {
            fail(p, "out of memory");
            return;
        }
        p->buf = nb, p->cap = nc;
    }
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = 0;
}

static void puts_(sl_prom *p, const char *s) {
    put(p, s, strlen(s));
}

static void put_u64(sl_prom *p, uint64_t v) {
    char t[24];
    int i = 24;
    do t[--i] = (char)('0' + v % 10); while ((v /= 10) != 0);
    put(p, t + i, (size_t)(24 - i));
}

/* v / scale, exactly, trailing zeros of the fraction dropped ("0.005", "2"). */
static void put_fixed(sl_prom *p, int64_t v, int64_t scale) {
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v < 0) put(p, "-", 1);
    if (scale <= 1) {
        put_u64(p, u);
        return;
    }
    put_u64(p, u / (uint64_t)scale);
    uint64_t f = u % (uint64_t)scale;
    if (f == 0) return;
    char t[24];
    int n = 0;
    for (uint64_t s = (uint64_t)scale / 10; s > 0; s /= 10) t[n++] = (char)('0' + (f / s) % 10);
    while (n > 0 && t[n - 1] == '0') n--;
    put(p, ".", 1);
    put(p, t, (size_t)n);
}

static int scale_ok(int64_t scale) {
    if (scale < 1) return 0;
    while (scale % 10 == 0) scale /= 10;
    return scale == 1;
}

static int name_ok(const char *s, int colon) {
    if (s == NULL || *s == 0) return 0;
    for (const char *c = s; *c; c++) {
        int alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' ||
                    (colon && *c == ':');
        if (!alpha && !(c != s && *c >= '0' && *c <= '9')) return 0;
    }
    return 1;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int sl_prom_family(sl_prom *p, const char *name, sl_prom_type type, const char *help) {
    static const char *const tn[] = {"counter", "gauge", "histogram", "untyped"};
    if (p->err) return -1;
    if (!name_ok(name, 1) || strlen(name) >= sizeof(p->family)) {
        fail(p, "invalid metric name '%.64s'", name ? name : "(null)");
        return -1;
    }
    if ((unsigned)type > SL_PROM_UNTYPED) {
        fail(p, "%s: invalid type", name);
        return -1;
    }
    if (help == NULL || help[0] == 0) {
        fail(p, "%s: no HELP text", name);
        return -1;
    }
    if (type == SL_PROM_COUNTER && !ends_with(name, "_total")) {
        fail(p, "%s: a counter's name ends in _total", name);
        return -1;
    }
    if (type != SL_PROM_COUNTER && ends_with(name, "_total")) {
        fail(p, "%s: only counters end in _total", name);
        return -1;
    }
    for (size_t i = 0; i < p->nseen; i++) {
        if (strcmp(p->seen[i], name) == 0) {
            fail(p, "%s: family declared twice", name);
            return -1;
        }
    }
    if (p->nseen == p->capseen) {
        size_t nc = p->capseen ? 2 * p->capseen : 32;
        char **ns = realloc(p->seen, nc * sizeof(char *));
        if (ns == NULL) return fail(p, "out of memory"), -1;
        p->seen = ns, p->capseen = nc;
    }
    if ((p->seen[p->nseen] = strdup(name)) == NULL) return fail(p, "out of memory"), -1;
    p->nseen++;
    snprintf(p->family, sizeof(p->family), "%s", name);
    p->type = type;
    puts_(p, "# HELP ");
    puts_(p, name);
    put(p, " ", 1);
    for (const char *c = help; *c; c++) {
        if (*c == '\\')
            put(p, "\\\\", 2);
        else if (*c == '\n')
            put(p, "\\n", 2);
        else
            put(p, c, 1);
    }
    puts_(p, "\n# TYPE ");
    puts_(p, name);
    put(p, " ", 1);
    puts_(p, tn[type]);
    put(p, "\n", 1);
    return p->err ? -1 : 0;
}

/* A label value: '\\', '"' and newline escaped as the format says; bytes that are not
 * well-formed UTF-8 become U+FFFD (the format is UTF-8; a parser would reject them). */
static void put_label_value(sl_prom *p, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') {
            put(p, "\\\\", 2), i++;
        } else if (c == '"') {
            put(p, "\\\"", 2), i++;
        } else if (c == '\n') {
            put(p, "\\n", 2), i++;
        } else {
            size_t k = sl_utf8_len(s + i, n - i);
            if (k == 0)
                put(p, "\xEF\xBF\xBD", 3), i++;
            else
                put(p, s + i, k), i += k;
        }
    }
}

/* name{labels[,extra="..."]} -- extra is the histogram's le. */
static void put_series(sl_prom *p, const char *suffix, const char *const *labels,
                       const char *extra_name, const char *extra_value) {
    if (p->err) return;
    puts_(p, p->family);
    if (suffix) puts_(p, suffix);
    int any = 0;
    for (size_t i = 0; labels && labels[i]; i += 2) {
        const char *ln = labels[i], *lv = labels[i + 1];
        if (lv == NULL) {
            fail(p, "%s: label '%.64s' has no value", p->family, ln);
            return;
        }
        if (!name_ok(ln, 0) || strncmp(ln, "__", 2) == 0 || strcmp(ln, "le") == 0 ||
            strcmp(ln, "quantile") == 0)
            {
                fail(p, "%s: invalid label name '%.64s'", p->family, ln);
                return;
            }
        for (size_t j = 0; j < i; j += 2)
            if (strcmp(labels[j], ln) == 0)
                {
                    fail(p, "%s: label '%.64s' twice", p->family, ln);
                    return;
                }
        put(p, any ? "," : "{", 1);
        puts_(p, ln);
        put(p, "=\"", 2);
        put_label_value(p, lv);
        put(p, "\"", 1);
        any = 1;
    }
    if (extra_name) {
        put(p, any ? "," : "{", 1);
        puts_(p, extra_name);
        put(p, "=\"", 2);
        puts_(p, extra_value);
        put(p, "\"", 1);
        any = 1;
    }
    if (any) put(p, "}", 1);
    put(p, " ", 1);
}

static int sample_ok(sl_prom *p) {
    if (p->err) return 0;
    if (p->family[0] == 0) return fail(p, "a sample before any HELP/TYPE"), 0;
    if (p->type == SL_PROM_HISTOGRAM)
        return fail(p, "%s: histogram samples come from sl_prom_histogram", p->family), 0;
    return 1;
}

void sl_prom_u64(sl_prom *p, const char *const *labels, uint64_t v) {
    if (!sample_ok(p)) return;
    put_series(p, NULL, labels, NULL, NULL);
    put_u64(p, v);
    put(p, "\n", 1);
}

void sl_prom_i64(sl_prom *p, const char *const *labels, int64_t v) {
    if (!sample_ok(p)) return;
    put_series(p, NULL, labels, NULL, NULL);
    put_fixed(p, v, 1);
    put(p, "\n", 1);
}

void sl_prom_fixed(sl_prom *p, const char *const *labels, int64_t v, int64_t scale) {
    if (!sample_ok(p)) return;
    if (!scale_ok(scale)) {
        fail(p, "%s: scale is not a power of ten", p->family);
        return;
    }
    put_series(p, NULL, labels, NULL, NULL);
    put_fixed(p, v, scale);
    put(p, "\n", 1);
}

void sl_prom_f64(sl_prom *p, const char *const *labels, double v) {
    if (!sample_ok(p)) return;
    put_series(p, NULL, labels, NULL, NULL);
    char t[40];
    if (isnan(v))
        snprintf(t, sizeof(t), "NaN");
    else if (isinf(v))
        snprintf(t, sizeof(t), v > 0 ? "+Inf" : "-Inf");
    else
        snprintf(t, sizeof(t), "%.17g", v);
    puts_(p, t);
    put(p, "\n", 1);
}

void sl_prom_raw(sl_prom *p, const char *text, size_t len) {
    put(p, text, len);
}

char *sl_prom_finish(sl_prom *p, size_t *len) {
    if (p->err) return NULL;
    if (p->buf == NULL) put(p, "", 0);
    if (p->err) return NULL;
    char *b = p->buf;
    *len = p->len;
    p->buf = NULL, p->len = p->cap = 0;
    return b;
}

/* ---- histograms ---------------------------------------------------------------------------- */

static unsigned bucket_of(const int64_t *bounds, unsigned nb, int64_t v) {
    unsigned lo = 0, hi = nb; /* first bound >= v, or nb */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (bounds[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void sl_prom_hist_observe(sl_prom_hist *h, const int64_t *bounds, unsigned nb, int64_t v) {
    if (v < 0) v = 0;
    if (nb > SL_PROM_HIST_MAX) nb = SL_PROM_HIST_MAX;
    _Atomic uint64_t *b = &h->bucket[bucket_of(bounds, nb, v)];
    atomic_store_explicit(b, atomic_load_explicit(b, memory_order_relaxed) + 1, memory_order_relaxed);
    atomic_store_explicit(&h->sum, atomic_load_explicit(&h->sum, memory_order_relaxed) + (uint64_t)v,
                          memory_order_relaxed);
}

void sl_prom_hist_observe_shared(sl_prom_hist *h, const int64_t *bounds, unsigned nb, int64_t v) {
    if (v < 0) v = 0;
    if (nb > SL_PROM_HIST_MAX) nb = SL_PROM_HIST_MAX;
    atomic_fetch_add_explicit(&h->bucket[bucket_of(bounds, nb, v)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, (uint64_t)v, memory_order_relaxed);
}

void sl_prom_histogram(sl_prom *p, const char *const *labels, const int64_t *bounds, unsigned nb,
                       const sl_prom_hist *const *hs, size_t nh, int64_t scale) {
    if (p->err) return;
    if (p->family[0] == 0 || p->type != SL_PROM_HISTOGRAM)
        {
            fail(p, "%s: not a histogram family", p->family[0] ? p->family : "(none)");
            return;
        }
    if (nb > SL_PROM_HIST_MAX) {
        fail(p, "%s: more than %d buckets", p->family, SL_PROM_HIST_MAX);
        return;
    }
    if (!scale_ok(scale)) {
        fail(p, "%s: scale is not a power of ten", p->family);
        return;
    }
    for (unsigned i = 1; i < nb; i++)
        if (bounds[i] <= bounds[i - 1]) {
            fail(p, "%s: bounds not ascending", p->family);
            return;
        }
    uint64_t cum = 0, sum = 0;
    for (unsigned k = 0; k <= nb; k++) {
        for (size_t w = 0; w < nh; w++)
            cum += atomic_load_explicit(&((sl_prom_hist *)hs[w])->bucket[k], memory_order_relaxed);
        char le[40];
        if (k < nb) {
            /* the bound as text, through a scratch writer so it is formatted like values */
            sl_prom t;
            sl_prom_init(&t);
            put_fixed(&t, bounds[k], scale);
            if (t.err) {
                sl_prom_deinit(&t);
                {
                    fail(p, "out of memory");
                    return;
                }
            }
            snprintf(le, sizeof(le), "%s", t.buf);
            sl_prom_deinit(&t);
        } else {
            snprintf(le, sizeof(le), "+Inf");
        }
        put_series(p, "_bucket", labels, "le", le);
        put_u64(p, cum);
        put(p, "\n", 1);
    }
    for (size_t w = 0; w < nh; w++)
        sum += atomic_load_explicit(&((sl_prom_hist *)hs[w])->sum, memory_order_relaxed);
    put_series(p, "_sum", labels, NULL, NULL);
    put_fixed(p, sum > INT64_MAX ? INT64_MAX : (int64_t)sum, scale);
    put(p, "\n", 1);
    put_series(p, "_count", labels, NULL, NULL);
    put_u64(p, cum);
    put(p, "\n", 1);
}

/* ---- process metrics ---------------------------------------------------------------------- */

static int read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "re");
    if (f == NULL) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return (int)n;
}

/* /proc/self/stat after the command name (which may hold spaces and parentheses: the last
 * ')' ends it); field 3 (state) is the first word. */
static int self_stat(unsigned long long *starttime, unsigned long long *vsize, long long *rss) {
    char buf[2048];
    if (read_file("/proc/self/stat", buf, sizeof(buf)) <= 0) return -1;
    char *s = strrchr(buf, ')');
    if (s == NULL) return -1;
    s++;
    /* fields 3..: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss */
    char *save = NULL;
    int field = 3;
    int got = 0;
    for (char *tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
        if (field == 22) *starttime = strtoull(tok, NULL, 10), got++;
        if (field == 23) *vsize = strtoull(tok, NULL, 10), got++;
        if (field == 24) {
            *rss = strtoll(tok, NULL, 10), got++;
            break;
        }
    }
    return got == 3 ? 0 : -1;
}

static long long boot_time(void) {
    char buf[8192];
    if (read_file("/proc/stat", buf, sizeof(buf)) <= 0) return -1;
    char *b = strstr(buf, "\nbtime ");
    return b ? strtoll(b + 7, NULL, 10) : -1;
}

static long long open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) return -1;
    long long n = 0;
    int own = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (atoi(e->d_name) == own) continue; /* the directory being listed */
        n++;
    }
    closedir(d);
    return n;
}

int sl_prom_process(sl_prom *p) {
    unsigned long long start = 0, vsize = 0;
    long long rss = 0;
    int have_stat = self_stat(&start, &vsize, &rss) == 0;
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);

    sl_prom_family(p, "process_cpu_seconds_total", SL_PROM_COUNTER,
                   "Total user and system CPU time spent in seconds.");
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        int64_t us = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
                     ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
        sl_prom_fixed(p, NULL, us, 1000000);
    }
    sl_prom_family(p, "process_resident_memory_bytes", SL_PROM_GAUGE, "Resident memory size in bytes.");
    if (have_stat && page > 0) sl_prom_i64(p, NULL, rss * page);
    sl_prom_family(p, "process_virtual_memory_bytes", SL_PROM_GAUGE, "Virtual memory size in bytes.");
    if (have_stat) sl_prom_u64(p, NULL, vsize);
    sl_prom_family(p, "process_open_fds", SL_PROM_GAUGE, "Number of open file descriptors.");
    long long fds = open_fds();
    if (fds >= 0) sl_prom_i64(p, NULL, fds);
    sl_prom_family(p, "process_max_fds", SL_PROM_GAUGE, "Maximum number of open file descriptors.");
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        sl_prom_u64(p, NULL, rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur);
    sl_prom_family(p, "process_start_time_seconds", SL_PROM_GAUGE,
                   "Start time of the process since unix epoch in seconds.");
    long long bt = boot_time();
    if (have_stat && bt >= 0 && tck > 0) {
        /* in hundredths, exact for the usual CLK_TCK of 100 */
        int64_t cs = (int64_t)bt * 100 + (int64_t)(start * 100 / (unsigned long long)tck);
        sl_prom_fixed(p, NULL, cs, 100);
    }
    return p->err ? -1 : 0;
}

void sl_prom_build_info(sl_prom *p, const char *prefix, const char *version, const char *commit) {
    char name[96];
    snprintf(name, sizeof(name), "%s_build_info", prefix ? prefix : "sluice");
    if (sl_prom_family(p, name, SL_PROM_GAUGE,
                       "A metric with a constant '1' value labeled by version and commit.") != 0)
        return;
    const char *l[] = {"version", version ? version : "unknown", "commit", commit ? commit : "unknown",
                       NULL};
    sl_prom_u64(p, l, 1);
}
