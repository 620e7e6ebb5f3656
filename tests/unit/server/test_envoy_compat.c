/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_envoy_compat.c -- envoyproxy/ratelimit compat mode below the server: a config
 * directory (files in name order, a duplicate domain named in its file, MERGE_DOMAIN_CONFIG,
 * dotfiles), the answers against a slow reference model of upstream's counters over random
 * traffic on a fake clock (every descriptor counted, over or not, shadow or not; statuses,
 * remaining and duration_until_reset from the count), upstream's statistics arithmetic
 * (near/over/within/shadow splits), its stat-name sanitising, and statsd lines.
 * SLUICE_SEED varies the traffic.
 */
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/grpc/rls.h"
#include "server/envoy_stats.h"
#include "server/server.h"
#include "server/statsd.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static void write_file(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static void rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

static const char A[] = "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
static const char A2[] = "domain: a\ndescriptors:\n  - key: j\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
static const char B[] = "domain: b\ndescriptors:\n";

static void config_directory(void) {
    char dir[] = "/tmp/sluice-dir-XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL);
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    sl_envoy_settings es = {0};
    sl_config_set_envoy(&es);
    write_file(dir, "a.yaml", A);
    write_file(dir, "b.yml", B);
    write_file(dir, "readme.txt", "not yaml: [");
    T_EQ_I(sl_config_load(dir, &cfg, &dl), SLUICE_OK); /* sl_config_load on a directory */
    T_EQ_U(sl_config_domain_count(cfg), 2);
    T_EQ_U(sl_config_policy_count(cfg), 1);
    sl_config_destroy(cfg);
    /* a domain twice: refused at the second file's domain, named with its file */
    write_file(dir, "c.yaml", A2);
    T_EQ_I(sl_config_load_dir(dir, &cfg, &dl), SLUICE_EINVAL);
    T_CHECK(cfg == NULL);
    char line[1024];
    sl_diag_format(&dl, 0, line, sizeof(line));
    T_CHECK(strstr(line, "/c.yaml:1:9: duplicate domain 'a'") != NULL);
    /* MERGE_DOMAIN_CONFIG: one domain, both files' rules */
    es.compat = true;
    es.merge_domains = true;
    sl_config_set_envoy(&es);
    T_EQ_I(sl_config_load_dir(dir, &cfg, &dl), SLUICE_OK);
    T_EQ_U(sl_config_domain_count(cfg), 2);
    T_EQ_U(sl_config_policy_count(cfg), 2);
    sl_config_destroy(cfg);
    /* a dotfile loads in compat mode unless RUNTIME_IGNOREDOTFILES; sluice skips it */
    write_file(dir, ".x.yaml", "domain: [broken\n");
    T_EQ_I(sl_config_load_dir(dir, &cfg, &dl), SLUICE_EINVAL);
    sl_diag_format(&dl, 0, line, sizeof(line));
    T_CHECK(strstr(line, "/.x.yaml:") != NULL);
    es.ignore_dotfiles = true;
    sl_config_set_envoy(&es);
    T_EQ_I(sl_config_load_dir(dir, &cfg, &dl), SLUICE_OK);
    sl_config_destroy(cfg);
    es = (sl_envoy_settings){0};
    sl_config_set_envoy(&es);
    write_file(dir, "c.yaml", B); /* replaces A2: b twice */
    T_EQ_I(sl_config_load_dir(dir, &cfg, &dl), SLUICE_EINVAL);
    sl_diag_format(&dl, 0, line, sizeof(line));
    T_CHECK(strstr(line, "/c.yaml:1:9: duplicate domain 'b'") != NULL);
    rm_dir(dir);
}

/* ---- answers against upstream's counters ---------------------------------------------- */

static const char RULES[] =
    "domain: m\n"
    "descriptors:\n"
    "  - key: user\n"
    "    rate_limit: {unit: second, requests_per_unit: 4}\n"
    "  - key: user\n"
    "    value: vip\n"
    "    shadow_mode: true\n"
    "    rate_limit: {unit: second, requests_per_unit: 2}\n"
    "  - key: route\n"
    "    value: a\n"
    "    descriptors:\n"
    "      - key: user\n"
    "        rate_limit: {unit: minute, requests_per_unit: 7}\n"
    "  - key: free\n"
    "    rate_limit: {unlimited: true}\n";

/* The model: upstream's fixed windows, one counter per (rule, value, window start). */
#define MCOUNTERS 4096
typedef struct mc {
    int rule;
    int value;
    int64_t win;
    uint64_t count;
} mc;
static mc model[MCOUNTERS];
static size_t nmodel;

static uint64_t *counter(int rule, int value, int64_t win) {
    for (size_t i = 0; i < nmodel; i++)
        if (model[i].rule == rule && model[i].value == value && model[i].win == win) return &model[i].count;
    if (nmodel == MCOUNTERS) return NULL;
    model[nmodel] = (mc){rule, value, win, 0};
    return &model[nmodel++].count;
}

static uint64_t rng_state;
static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state % n;
}

static void sync_done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    *(int *)ud = rc;
}

static void answers_follow_upstream_counters(void) {
    const char *seed = getenv("SLUICE_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) | 1 : 0x9e3779b97f4a7c15ull;
    sl_envoy_settings es = {.compat = true, .near_ratio = 0.8f};
    sl_config_set_envoy(&es);
    static sl_diag_list dl;
    sl_config *cfg;
    T_EQ_I(sl_config_load_buffer(RULES, sizeof(RULES) - 1, "m.yaml", &cfg, &dl), SLUICE_OK);
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *e = sl_engine_create(cfg, st, &err, NULL, 0);
    T_CHECK(e != NULL && sl_rls_compat(e));
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC + 123);
    static const char *const vals[] = {"alice", "vip", "bob"};
    static sl_rls_req rq;
    static sl_rls_answer a;
    static sl_verdict v;
    static sl_rls_call call;
    sl_entry ents[3][2];
    int mismatches = 0;
    for (int step = 0; step < 4000 && mismatches < 5; step++) {
        sluice_clock_advance(clk, (int64_t)rnd(300) * SLUICE_NS_PER_MS);
        sluice_time now = sluice_clock_now(clk);
        int64_t now_s = now.wall_ns / SEC;
        memset(&rq, 0, sizeof(rq));
        size_t nd = 1 + rnd(3);
        int kind[3], val[3];
        for (size_t d = 0; d < nd; d++) {
            kind[d] = (int)rnd(4); /* 0 user, 1 route a + user, 2 free, 3 unmatched */
            val[d] = (int)rnd(3);
            sl_str u = {"user", 4}, vv = {vals[val[d]], strlen(vals[val[d]])};
            if (kind[d] == 1) {
                ents[d][0] = (sl_entry){{"route", 5}, {"a", 1}};
                ents[d][1] = (sl_entry){u, vv};
                rq.d[d].n = 2;
            } else {
                ents[d][0] = (sl_entry){kind[d] == 2 ? (sl_str){"free", 4}
                                                     : kind[d] == 3 ? (sl_str){"other", 5} : u,
                                        vv};
                rq.d[d].n = 1;
            }
            rq.d[d].entries = ents[d];
            if (rnd(3) == 0) {
                rq.d[d].has_hits_addend = true;
                rq.d[d].hits_addend = rnd(3); /* 0: only look */
            }
        }
        rq.r.domain = (sl_str){"m", 1};
        rq.r.descriptors = rq.d;
        rq.r.n_descriptors = nd;
        rq.r.hits_addend = (uint32_t)rnd(3);
        char msg[160];
        T_EQ_I(sl_rls_prepare(e, &rq, &v, msg, sizeof(msg)), SL_GRPC_OK);
        sl_rls_compat_prepare(e, &rq, &v, now, &call);
        int rc = -1;
        sl_engine_decide(e, st, &v, now, sync_done, &rc);
        T_EQ_I(sl_rls_answer_ex(&v, rc, nd, 0, &call, &a, msg, sizeof(msg)), SL_GRPC_OK);
        /* the model: every matched rule counts its hits, in request order */
        bool over_any = false;
        for (size_t d = 0; d < nd; d++) {
            uint64_t hits = rq.d[d].has_hits_addend ? rq.d[d].hits_addend
                                                     : (rq.r.hits_addend ? rq.r.hits_addend : 1);
            const sl_rls_status *s = &a.st[d];
            if (kind[d] == 3) {
                if (s->has_limit || s->code != SL_RLS_OK) mismatches++;
                T_CHECK(!s->has_limit && s->code == SL_RLS_OK);
                continue;
            }
            if (kind[d] == 2) {
                T_CHECK(!s->has_limit && s->code == SL_RLS_OK && s->remaining == UINT32_MAX);
                continue;
            }
            int rule = kind[d] == 1 ? 2 : (val[d] == 1 ? 1 : 0);
            uint32_t limit = rule == 0 ? 4 : rule == 1 ? 2 : 7;
            int64_t unit = rule == 2 ? 60 : 1;
            bool shadow = rule == 1;
            int64_t win = now_s / unit * unit;
            uint64_t *c = counter(rule, val[d], win);
            if (c == NULL) break;
            *c += hits;
            bool over = *c > limit;
            int code = over && !shadow ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
            uint32_t rem = over ? 0 : limit - (uint32_t)*c;
            int64_t reset = (unit - now_s % unit) * SEC;
            if (code == SL_RLS_OVER_LIMIT) over_any = true;
            if (!s->has_limit || s->code != code || s->remaining != rem || s->requests_per_unit != limit ||
                s->reset_ns != reset) {
                mismatches++;
                T_FAIL("step %d descriptor %zu (rule %d, %s, hits %llu): got code %d rem %u limit %u "
                       "reset %lld, want %d %u %u %lld (count %llu)",
                       step, d, rule, vals[val[d]], (unsigned long long)hits, s->code, s->remaining,
                       s->requests_per_unit, (long long)s->reset_ns, code, rem, limit,
                       (long long)reset, (unsigned long long)*c);
            }
        }
        T_EQ_I(a.overall, over_any ? SL_RLS_OVER_LIMIT : SL_RLS_OK);
        T_EQ_U(a.nh, 0);       /* no headers unless LIMIT_RESPONSE_HEADERS_ENABLED */
        T_EQ_U(a.body_len, 0); /* never a body */
    }
    sluice_clock_destroy(clk);
    sl_engine_destroy(e);
    sl_config_destroy(cfg);
    sluice_store_destroy(st);
    es = (sl_envoy_settings){0};
    sl_config_set_envoy(&es);
}

/* ---- statistics ------------------------------------------------------------------------ */

typedef struct seen {
    char name[256];
    uint64_t v;
} seen;
static seen got[64];
static size_t ngot;

static void visit(void *ud, const char *name, size_t len, uint64_t total, uint64_t *sent) {
    (void)ud;
    (void)sent;
    if (ngot < 64 && len < 255) {
        memcpy(got[ngot].name, name, len);
        got[ngot].name[len] = '\0';
        got[ngot].v = total;
        ngot++;
    }
}

static uint64_t stat_of(const char *name) {
    for (size_t i = 0; i < ngot; i++)
        if (!strcmp(got[i].name, name)) return got[i].v;
    return 0;
}

/* upstream's GetResponseDescriptorStatus arithmetic, case by case (limit 10, ratio 0.8:
 * near threshold 8) */
static void statistics_arithmetic(void) {
    sl_envoy_settings es = {.compat = true, .near_ratio = 0.8f};
    sl_config_set_envoy(&es);
    static sl_worker w;
    static sl_server s;
    w.id = 7;
    static sl_rls_answer a;
    memset(&a, 0, sizeof(a));
    a.compat = true;
    struct {
        uint64_t before, after, hits;
        bool local, shadow;
    } calls[] = {
        {0, 5, 5, false, false},  /* within 5 */
        {5, 9, 4, false, false},  /* within 4, near 9 - 8 = 1 */
        {9, 12, 3, false, true},  /* over 12 - 10 = 2, near 10 - 9 = 1, shadow 2 */
        {12, 13, 1, false, false},/* over 1 */
        {13, 13, 2, true, false}, /* local cache: over 2, local 2 */
    };
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        a.nrules = 1;
        a.rules[0] = (sl_rls_rule_hits){.path = "d.k_10.0.0.1", .path_len = 12, .hits = calls[i].hits,
                                        .before = calls[i].before, .after = calls[i].after,
                                        .limit = 10, .local = calls[i].local, .shadow = calls[i].shadow};
        sl_envoy_stats_count(&w, SL_GRPC_OK, &a);
    }
    ngot = 0;
    sl_envoy_stats_each(&s, visit, NULL);
    const char *p = "ratelimit.service.rate_limit.d.k_10_0_0_1.";
    char n[256];
#define S(x) (snprintf(n, sizeof(n), "%s%s", p, x), stat_of(n))
    T_EQ_U(S("total_hits"), 15);
    T_EQ_U(S("within_limit"), 9);
    T_EQ_U(S("near_limit"), 2);
    T_EQ_U(S("over_limit"), 5);
    T_EQ_U(S("shadow_mode"), 2);
    T_EQ_U(S("over_limit_with_local_cache"), 2);
#undef S
    T_EQ_U(stat_of("ratelimit_server.ShouldRateLimit.total_requests"), 5);
    T_EQ_U(stat_of("ratelimit.service.config_load_success"), 1);
    es = (sl_envoy_settings){0};
    sl_config_set_envoy(&es);
}

static void sanitize_and_statsd_lines(void) {
    char out[128];
    sl_envoy_stats_sanitize("d.ip_10.0.0.1.x:y|z", 19, out, sizeof(out));
    T_EQ_S(out, "d.ip_10_0_0_1.x_y_z");
    sl_envoy_stats_sanitize("d.v_1234.5.6.7", 14, out, sizeof(out)); /* the match starts at 234 */
    T_EQ_S(out, "d.v_1234_5_6_7");
    sl_envoy_stats_sanitize("d.v_1.2.3", 9, out, sizeof(out)); /* three parts: not an address */
    T_EQ_S(out, "d.v_1.2.3");
    sl_envoy_stats_set_tags("zone:eu,app:rl");
    sl_statsd_opts o = {.on = true};
    char line[256];
    sl_statsd_line(&o, "a.b", 3, 7, line, sizeof(line));
    T_EQ_S(line, "a.b.__app=rl.__zone=eu:7|c");
    o.dog = true;
    sl_statsd_line(&o, "a.b", 3, 7, line, sizeof(line));
    T_EQ_S(line, "a.b:7|c|#app:rl,zone:eu");
    sl_envoy_stats_set_tags("");
    o.dog = false;
    sl_statsd_line(&o, "a.b", 3, 1, line, sizeof(line));
    T_EQ_S(line, "a.b:1|c");
}

int main(void) {
    T_RUN(config_directory);
    T_RUN(answers_follow_upstream_counters);
    T_RUN(statistics_arithmetic);
    T_RUN(sanitize_and_statsd_lines);
    return T_DONE();
}
