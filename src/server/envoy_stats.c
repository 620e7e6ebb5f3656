/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envoy_stats.c -- envoyproxy/ratelimit's statistics (compat mode): what each call adds
 * (upstream's base limiter: total_hits always; over/near/within/shadow from the counter
 * before and after the call's hits, near_limit at floor(limit * NEAR_LIMIT_RATIO) in
 * float32 as upstream computes it), kept per worker, rendered as upstream's statsd_exporter
 * mapping names them, and handed to the statsd sender.
 * Invariants: a worker writes only its own table (relaxed atomics; the scraper and the
 * statsd thread read); a path is published (its hash stored with release) after its bytes;
 * tables are allocated once per worker (first count), never freed while the process runs.
 * No raw key reaches a metric unless a rule asks for it (detailed_metric, value_to_metric:
 * the operator's choice, as upstream).
 */
#include "server/envoy_stats.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

#define ES_SLOTS 4096 /* paths per worker (a power of two) */
#define ES_PATH 208   /* bytes of a sanitised path (longer ones are cut, then hashed apart) */
#define ES_PROBES 32

const char *const sl_es_stat_names[SL_ES_NSTATS] = {
    "total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode",
    "over_limit_with_local_cache", "domain_not_found"};
const char *const sl_esv_names[SL_ESV_N] = {
    "ratelimit_server.ShouldRateLimit.total_requests",
    "ratelimit.service.call.should_rate_limit.redis_error",
    "ratelimit.service.call.should_rate_limit.service_error",
    "ratelimit.service.global_shadow_mode"};

typedef struct es_ent {
    _Atomic uint64_t hash; /* 0 = free; stored last (release) */
    uint16_t len;
    char path[ES_PATH];
    _Atomic uint64_t c[SL_ES_NSTATS];
    uint64_t sent[SL_ES_NSTATS]; /* the statsd sender's */
} es_ent;

typedef struct es_table {
    es_ent e[ES_SLOTS];
    _Atomic uint64_t svc[SL_ESV_N];
    uint64_t svc_sent[SL_ESV_N];
    _Atomic uint64_t dropped; /* paths that found no slot */
} es_table;

/* A counter's value (a function of its own: gcc 12 at -O0 takes an inline atomic load's
 * temporary for a dangling pointer when other pointers are live across it). */
static uint64_t load_stat(const _Atomic uint64_t *c) {
    return atomic_load_explicit(c, memory_order_relaxed);
}
static uint64_t load_hash(const _Atomic uint64_t *h) {
    return atomic_load_explicit(h, memory_order_acquire);
}

static _Atomic(es_table *) g_tab[SL_MAX_WORKERS];
/* A worker's table (a function: see load_stat). */
static es_table *table_at(unsigned wi) {
    return atomic_load_explicit(&g_tab[wi], memory_order_acquire);
}
static uint64_t g_loads_sent[2]; /* the statsd sender's */

#define ES_MAX_TAGS 16
static char g_tagbuf[1024];
static const char *g_tag_k[ES_MAX_TAGS], *g_tag_v[ES_MAX_TAGS];
static size_t g_ntags;

static void add(_Atomic uint64_t *c, uint64_t v) {
    if (v) atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + v, memory_order_relaxed);
}

static es_table *table_of(sl_worker *w) {
    if (w == NULL || w->id >= SL_MAX_WORKERS) return NULL;
    es_table *t = table_at(w->id);
    if (t == NULL) {
        t = calloc(1, sizeof(*t)); /* once per worker, on its first count */
        if (t != NULL) atomic_store_explicit(&g_tab[w->id], t, memory_order_release);
    }
    return t;
}

/* ---- the path as upstream names it ---- */

/* An IPv4-shaped run at s[i..]: \d{1,3}(\.\d{1,3}){3}; returns its end or 0. */
static size_t ipv4_at(const char *s, size_t len, size_t i) {
    for (int g = 0; g < 4; g++) {
        size_t r = 0;
        while (i + r < len && s[i + r] >= '0' && s[i + r] <= '9') r++;
        if (r == 0) return 0;
        if (g < 3) {
            if (r > 3 || i + r >= len || s[i + r] != '.') return 0;
            i += r + 1;
        } else {
            i += r > 3 ? 3 : r;
        }
    }
    return i;
}

size_t sl_envoy_stats_sanitize(const char *in, size_t len, char *out, size_t cap) {
    size_t o = 0;
    if (cap == 0) return 0;
    for (size_t i = 0; i < len && o + 1 < cap;) {
        size_t end = (in[i] >= '0' && in[i] <= '9') ? ipv4_at(in, len, i) : 0;
        if (end > 0) {
            for (; i < end && o + 1 < cap; i++) out[o++] = in[i] == '.' ? '_' : in[i];
            continue;
        }
        char ch = in[i++];
        out[o++] = (ch == ':' || ch == '|') ? '_' : ch;
    }
    out[o] = '\0';
    return o;
}

static uint64_t path_hash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h | 1;
}

/* The slot of a (sanitised) path in t, created on first sight; NULL when full. */
static es_ent *slot_of(es_table *t, const char *raw, size_t raw_len) {
    char p[ES_PATH];
    size_t n = sl_envoy_stats_sanitize(raw, raw_len, p, sizeof(p));
    uint64_t h = path_hash(raw, raw_len);
    for (size_t k = 0; k < ES_PROBES; k++) {
        es_ent *e = &t->e[(h + k) & (ES_SLOTS - 1)];
        uint64_t eh = atomic_load_explicit(&e->hash, memory_order_relaxed);
        if (eh == h && e->len == n && memcmp(e->path, p, n) == 0) return e;
        if (eh == 0) {
            memcpy(e->path, p, n + 1);
            e->len = (uint16_t)n;
            atomic_store_explicit(&e->hash, h, memory_order_release);
            return e;
        }
    }
    add(&t->dropped, 1);
    return NULL;
}

/* ---- counting (upstream's base_limiter.go, GetResponseDescriptorStatus) ---- */

/* floor(limit * NEAR_LIMIT_RATIO) computed as upstream does: a float32 product. This is a
 * metrics threshold, not rate arithmetic: decisions never read it. */
static uint64_t near_threshold(uint32_t limit) {
    float r = sl_config_envoy()->near_ratio;
    float prod = (float)limit * r;
    return (uint64_t)floorf(prod);
}

static void count_rule(es_table *t, const sl_rls_rule_hits *h) {
    es_ent *e = slot_of(t, h->path, h->path_len);
    if (e == NULL) return;
    uint64_t hits = h->hits, L = h->limit;
    add(&e->c[SL_ES_TOTAL], hits);
    if (h->limit == UINT32_MAX && h->shadow) return; /* a store failure: only total_hits */
    bool over = false;
    if (h->local) {
        over = true;
        add(&e->c[SL_ES_OVER], hits);
        add(&e->c[SL_ES_LOCAL], hits);
    } else {
        uint64_t before = h->before, after = h->after;
        uint64_t near = near_threshold(h->limit);
        if (after > L) {
            over = true;
            if (before >= L) {
                add(&e->c[SL_ES_OVER], hits);
            } else {
                add(&e->c[SL_ES_OVER], after - L);
                add(&e->c[SL_ES_NEAR], L - (near > before ? near : before));
            }
        } else {
            if (after > near) add(&e->c[SL_ES_NEAR], before >= near ? hits : after - near);
            add(&e->c[SL_ES_WITHIN], hits);
        }
    }
    if (over && h->shadow) {
        if (h->local || h->before >= L) add(&e->c[SL_ES_SHADOW], hits);
        else add(&e->c[SL_ES_SHADOW], h->after - L);
    }
}

void sl_envoy_stats_count(sl_worker *w, int grpc_status, const sl_rls_answer *a) {
    es_table *t = table_of(w);
    if (t == NULL || a == NULL || !a->compat) return;
    add(&t->svc[SL_ESV_REQUESTS], 1);
    if (a->store_error) add(&t->svc[SL_ESV_REDIS_ERROR], 1);
    else if (grpc_status == SL_GRPC_INVALID_ARGUMENT) add(&t->svc[SL_ESV_SERVICE_ERROR], 1);
    if (a->global_shadow) add(&t->svc[SL_ESV_GLOBAL_SHADOW], 1);
    for (size_t i = 0; i < a->nrules; i++) count_rule(t, &a->rules[i]);
    if (a->notfound_len > 0) {
        es_ent *e = slot_of(t, a->notfound, a->notfound_len);
        if (e != NULL) add(&e->c[SL_ES_NOTFOUND], a->notfound_n);
    }
}

void sl_envoy_stats_service_error(sl_worker *w) {
    es_table *t = table_of(w);
    if (t == NULL) return;
    add(&t->svc[SL_ESV_REQUESTS], 1);
    add(&t->svc[SL_ESV_SERVICE_ERROR], 1);
}

/* Config loads: the first at start, then every reload (watcher, SIGHUP, admin). */
static void loads(const sl_server *s, uint64_t *ok, uint64_t *err) {
    *ok = 1 + atomic_load(&((sl_server *)s)->reloads_ok);
    *err = atomic_load(&((sl_server *)s)->reloads_failed);
}

/* ---- tags ---- */

void sl_envoy_stats_set_tags(const char *s) {
    g_ntags = 0;
    if (s == NULL) return;
    snprintf(g_tagbuf, sizeof(g_tagbuf), "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(g_tagbuf, ",", &save); tok && g_ntags < ES_MAX_TAGS;
         tok = strtok_r(NULL, ",", &save)) {
        char *c = strchr(tok, ':');
        if (c == NULL || c == tok) continue;
        *c = '\0';
        g_tag_k[g_ntags] = tok;
        g_tag_v[g_ntags] = c + 1;
        g_ntags++;
    }
}

size_t sl_envoy_stats_ntags(void) { return g_ntags; }
void sl_envoy_stats_tag(size_t i, const char **k, const char **v) {
    *k = i < g_ntags ? g_tag_k[i] : "";
    *v = i < g_ntags ? g_tag_v[i] : "";
}

/* ---- statsd view ---- */

void sl_envoy_stats_each(const sl_server *s, sl_es_visit fn, void *ud) {
    char name[ES_PATH + 96];
    uint64_t ok, er;
    loads(s, &ok, &er);
    fn(ud, "ratelimit.service.config_load_success", 37, ok, &g_loads_sent[0]);
    fn(ud, "ratelimit.service.config_load_error", 35, er, &g_loads_sent[1]);
    for (unsigned wi = 0; wi < SL_MAX_WORKERS; wi++) {
        es_table *t = table_at(wi);
        if (t == NULL) continue;
        for (int k = 0; k < SL_ESV_N; k++)
            fn(ud, sl_esv_names[k], strlen(sl_esv_names[k]),
               atomic_load_explicit(&t->svc[k], memory_order_relaxed), &t->svc_sent[k]);
        for (size_t i = 0; i < ES_SLOTS; i++) {
            es_ent *e = &t->e[i];
            if (atomic_load_explicit(&e->hash, memory_order_acquire) == 0) continue;
            for (int k = 0; k < SL_ES_NSTATS; k++) {
                uint64_t v = atomic_load_explicit(&e->c[k], memory_order_relaxed);
                if (v == e->sent[k]) continue;
                int n = snprintf(name, sizeof(name), "ratelimit.service.rate_limit.%.*s.%s",
                                 (int)e->len, e->path, sl_es_stat_names[k]);
                if (n > 0) fn(ud, name, (size_t)n < sizeof(name) ? (size_t)n : sizeof(name) - 1, v, &e->sent[k]);
            }
        }
    }
}

/* ---- Prometheus (upstream's default statsd_exporter mapping) ---- */

typedef struct series {
    int stat;
    const char *domain, *k1, *k2; /* into a path copy; k2 NULL for two components */
    size_t dl, k1l, k2l;
    const char *raw;              /* unmapped: the whole path */
    size_t rawl;
    uint64_t v;
} series;

static int cmp_str(const char *a, size_t al, const char *b, size_t bl) {
    size_t n = al < bl ? al : bl;
    int c = memcmp(a, b, n);
    return c ? c : (al < bl ? -1 : al > bl);
}

static int series_cmp(const void *x, const void *y) {
    const series *a = x, *b = y;
    if (a->stat != b->stat) return a->stat - b->stat;
    int c;
    if ((c = cmp_str(a->raw ? a->raw : "", a->rawl, b->raw ? b->raw : "", b->rawl)) != 0) return c;
    if ((c = cmp_str(a->domain ? a->domain : "", a->dl, b->domain ? b->domain : "", b->dl)) != 0) return c;
    if ((c = cmp_str(a->k1 ? a->k1 : "", a->k1l, b->k1 ? b->k1 : "", b->k1l)) != 0) return c;
    if ((a->k2 == NULL) != (b->k2 == NULL)) return a->k2 == NULL ? -1 : 1;
    return cmp_str(a->k2 ? a->k2 : "", a->k2l, b->k2 ? b->k2 : "", b->k2l);
}

static void label(sl_wbuf *w, const char *name, const char *v, size_t n, bool first) {
    sl_wbuf_printf(w, "%s%s=\"", first ? "" : ",", name);
    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\\' || v[i] == '"') sl_wbuf_printf(w, "\\%c", v[i]);
        else if (v[i] == '\n') sl_wbuf_puts(w, "\\n");
        else sl_wbuf_putc(w, v[i]);
    }
    sl_wbuf_putc(w, '"');
}

static void tags(sl_wbuf *w, bool first) {
    for (size_t i = 0; i < g_ntags; i++) {
        label(w, g_tag_k[i], g_tag_v[i], strlen(g_tag_v[i]), first);
        first = false;
    }
}

/* statsd_exporter's name for an unmapped metric: every byte outside [a-zA-Z0-9_] is '_'. */
static void escaped(sl_wbuf *w, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        sl_wbuf_putc(w, ok ? c : '_');
    }
}

static void simple(sl_wbuf *w, const char *name, const char *help, const char *extra_label,
                   const char *extra_value, uint64_t v) {
    sl_wbuf_printf(w, "# HELP %s %s\n# TYPE %s counter\n%s", name, help, name, name);
    if (extra_label != NULL || g_ntags > 0) {
        sl_wbuf_putc(w, '{');
        if (extra_label != NULL) label(w, extra_label, extra_value, strlen(extra_value), true);
        tags(w, extra_label == NULL);
        sl_wbuf_putc(w, '}');
    }
    sl_wbuf_printf(w, " %llu\n", (unsigned long long)v);
}

void sl_envoy_stats_render(const sl_server *s, sl_wbuf *out) {
    uint64_t ok, er;
    loads(s, &ok, &er);
    sl_wbuf_printf(out,
                   "# HELP sluice_config_load_success_total Deprecated (removed in the next "
                   "release): sum of sluice_reloads_total{outcome=\"ok\"}. Config loads that took "
                   "effect (the first at start included).\n"
                   "# TYPE sluice_config_load_success_total counter\n"
                   "sluice_config_load_success_total %llu\n"
                   "# HELP sluice_config_load_error_total Deprecated (removed in the next "
                   "release): sum of sluice_reloads_total{outcome=\"refused\"}. Config loads "
                   "refused (the previous config stayed).\n"
                   "# TYPE sluice_config_load_error_total counter\n"
                   "sluice_config_load_error_total %llu\n",
                   (unsigned long long)ok, (unsigned long long)er);
    if (!sl_config_envoy()->compat) return;
    uint64_t svc[SL_ESV_N] = {0}, dropped = 0;
    size_t cap = 0, n = 0;
    for (unsigned wi = 0; wi < SL_MAX_WORKERS; wi++) {
        es_table *t = table_at(wi);
        if (t == NULL) continue;
        for (int k = 0; k < SL_ESV_N; k++) svc[k] += atomic_load_explicit(&t->svc[k], memory_order_relaxed);
        dropped += atomic_load_explicit(&t->dropped, memory_order_relaxed);
        cap += ES_SLOTS * SL_ES_NSTATS;
    }
    series *sv = cap ? malloc(cap * sizeof(*sv)) : NULL;
    for (unsigned wi = 0; wi < SL_MAX_WORKERS && sv != NULL; wi++) {
        es_table *t = table_at(wi);
        if (t == NULL) continue;
        for (size_t i = 0; i < ES_SLOTS; i++) {
            es_ent *e = &t->e[i];
            if (load_hash(&e->hash) == 0) continue;
            /* components: domain.key1[.key2[...]] */
            const char *p = e->path, *d1 = memchr(p, '.', e->len);
            for (int k = 0; k < SL_ES_NSTATS; k++) {
                uint64_t v = load_stat(&e->c[k]);
                /* statsd_exporter makes a series on a counter's first event: a stat
                 * never moved has none */
                if (v == 0 && k != SL_ES_TOTAL) continue;
                series x = {.stat = k, .v = v};
                if (k >= SL_ES_LOCAL || d1 == NULL) { /* unmapped upstream */
                    x.raw = p;
                    x.rawl = e->len;
                } else {
                    x.domain = p;
                    x.dl = (size_t)(d1 - p);
                    x.k1 = d1 + 1;
                    const char *end = p + e->len, *d2 = memchr(x.k1, '.', (size_t)(end - x.k1));
                    x.k1l = (size_t)((d2 ? d2 : end) - x.k1);
                    if (d2 != NULL) {
                        x.k2 = d2 + 1;
                        const char *d3 = memchr(x.k2, '.', (size_t)(end - x.k2));
                        x.k2l = (size_t)((d3 ? d3 : end) - x.k2);
                    }
                }
                sv[n++] = x;
            }
        }
    }
    if (sv != NULL) qsort(sv, n, sizeof(*sv), series_cmp);
    static const char *const fam[SL_ES_LOCAL] = {
        "ratelimit_service_rate_limit_total_hits", "ratelimit_service_rate_limit_over_limit",
        "ratelimit_service_rate_limit_near_limit", "ratelimit_service_rate_limit_within_limit",
        "ratelimit_service_rate_limit_shadow_mode"};
    int shown = -1;
    for (size_t i = 0; i < n;) {
        series x = sv[i];
        size_t j = i + 1;
        while (j < n && series_cmp(&sv[j], &x) == 0) x.v += sv[j++].v; /* one series, summed */
        i = j;
        if (x.raw != NULL) {
            /* over_limit_with_local_cache, domain_not_found: unmapped upstream, named by
             * statsd_exporter from the whole statsd name */
            sl_wbuf_puts(out, "# TYPE ");
            escaped(out, "ratelimit.service.rate_limit.", 29);
            escaped(out, x.raw, x.rawl);
            sl_wbuf_putc(out, '_');
            sl_wbuf_puts(out, sl_es_stat_names[x.stat]);
            sl_wbuf_puts(out, " counter\n");
            escaped(out, "ratelimit.service.rate_limit.", 29);
            escaped(out, x.raw, x.rawl);
            sl_wbuf_putc(out, '_');
            sl_wbuf_puts(out, sl_es_stat_names[x.stat]);
            if (g_ntags > 0) {
                sl_wbuf_putc(out, '{');
                tags(out, true);
                sl_wbuf_putc(out, '}');
            }
            sl_wbuf_printf(out, " %llu\n", (unsigned long long)x.v);
            continue;
        }
        if (shown != x.stat) {
            sl_wbuf_printf(out, "# HELP %s envoyproxy/ratelimit's %s per rule (domain, key1, key2).\n"
                                "# TYPE %s counter\n",
                           fam[x.stat], sl_es_stat_names[x.stat], fam[x.stat]);
            shown = x.stat;
        }
        sl_wbuf_printf(out, "%s{", fam[x.stat]);
        label(out, "domain", x.domain, x.dl, true);
        label(out, "key1", x.k1, x.k1l, false);
        if (x.k2 != NULL) label(out, "key2", x.k2, x.k2l, false);
        tags(out, false);
        sl_wbuf_printf(out, "} %llu\n", (unsigned long long)x.v);
    }
    free(sv);
    simple(out, "ratelimit_service_config_load_success", "Config loads that took effect.", NULL,
           NULL, ok);
    simple(out, "ratelimit_service_config_load_error", "Config loads refused.", NULL, NULL, er);
    sl_wbuf_printf(out, "# HELP ratelimit_service_should_rate_limit_error ShouldRateLimit calls "
                        "answered with an error.\n# TYPE ratelimit_service_should_rate_limit_error "
                        "counter\n");
    const char *errs[2] = {"redis_error", "service_error"};
    for (int k = 0; k < 2; k++) {
        sl_wbuf_puts(out, "ratelimit_service_should_rate_limit_error{");
        label(out, "err_type", errs[k], strlen(errs[k]), true);
        tags(out, false);
        sl_wbuf_printf(out, "} %llu\n", (unsigned long long)svc[SL_ESV_REDIS_ERROR + k]);
    }
    simple(out, "ratelimit_service_total_requests", "ShouldRateLimit calls.", "grpc_method",
           "ShouldRateLimit", svc[SL_ESV_REQUESTS]);
    simple(out, "ratelimit_service_global_shadow_mode",
           "OVER_LIMIT answers SHADOW_MODE turned into OK.", NULL, NULL, svc[SL_ESV_GLOBAL_SHADOW]);
    sl_wbuf_printf(out, "# HELP sluice_envoy_stats_dropped_total Statistics paths not counted "
                        "(more than %d per worker).\n# TYPE sluice_envoy_stats_dropped_total "
                        "counter\nsluice_envoy_stats_dropped_total %llu\n",
                   ES_SLOTS, (unsigned long long)dropped);
}

size_t sl_envoy_stats_render_size(void) {
    size_t paths = 0;
    for (unsigned wi = 0; wi < SL_MAX_WORKERS; wi++) {
        es_table *t = table_at(wi);
        if (t == NULL) continue;
        for (size_t i = 0; i < ES_SLOTS; i++)
            if (atomic_load_explicit(&t->e[i].hash, memory_order_relaxed) != 0) paths++;
    }
    /* per path: five mapped lines and two unmapped ones (with TYPE), tags on each */
    return 8192 + g_ntags * 64 * 16 + paths * SL_ES_NSTATS * (2 * ES_PATH + 160 + g_ntags * 64);
}
