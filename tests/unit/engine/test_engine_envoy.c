/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_envoy.c -- the envoyproxy/ratelimit README configurations (examples/envoy/)
 * load unchanged and match as that README documents: depth, exact over wildcard over
 * bare key, unlimited, shadow_mode, replaces, wildcards, and a logical OR over the
 * descriptors of one request. Plus sluice's extensions to the format.
 */
#include "engine/engine.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

typedef struct fx {
    sluice_clock *clk;
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static bool fx_open(fx *f, const char *example) {
    memset(f, 0, sizeof(*f));
    const char *src = getenv("SLUICE_SRC");
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/envoy/%s", src ? src : ".", example);
    static sl_diag_list dl;
    int rc = sl_config_load(path, &f->cfg, &dl);
    if (rc != SLUICE_OK) {
        char line[600];
        for (size_t i = 0; i < dl.n; i++) {
            sl_diag_format(&dl, i, line, sizeof(line));
            fprintf(stderr, "  %s\n", line);
        }
        T_FAIL("%s did not load", path);
        return false;
    }
    T_CHECK(sl_config_is_envoy(f->cfg));
    f->clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC);
    int err;
    f->st = sluice_store_create(NULL, &err);
    char msg[200];
    f->e = sl_engine_create(f->cfg, f->st, &err, msg, sizeof(msg));
    if (f->e == NULL) T_FAIL("engine: %s", msg);
    return f->e != NULL;
}

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
    sluice_clock_destroy(f->clk);
}

static sl_str S(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

static sl_verdict V;

/* One RLS request: domain and up to 4 descriptors of up to 4 "key=value" entries each,
 * given as strings "k=v,k2=v2". */
typedef struct rls {
    sl_entry ent[4][4];
    char buf[4][4][2][64];
    sl_descriptor d[4];
    sl_request r;
} rls;

static const sl_request *Q(rls *q, const char *domain, const char *d0, const char *d1) {
    memset(q, 0, sizeof(*q));
    const char *ds[2] = {d0, d1};
    size_t nd = 0;
    for (size_t i = 0; i < 2 && ds[i]; i++, nd++) {
        const char *p = ds[i];
        size_t ne = 0;
        while (*p && ne < 4) {
            const char *eq = strchr(p, '='), *comma = strchr(p, ',');
            if (comma == NULL) comma = p + strlen(p);
            snprintf(q->buf[i][ne][0], 64, "%.*s", (int)(eq - p), p);
            snprintf(q->buf[i][ne][1], 64, "%.*s", (int)(comma - eq - 1), eq + 1);
            q->ent[i][ne].key = S(q->buf[i][ne][0]);
            q->ent[i][ne].value = S(q->buf[i][ne][1]);
            ne++;
            p = *comma ? comma + 1 : comma;
        }
        q->d[i].entries = q->ent[i];
        q->d[i].n = ne;
    }
    q->r.domain = S(domain);
    q->r.descriptors = q->d;
    q->r.n_descriptors = nd;
    return &q->r;
}

/* Sends `n` identical requests and returns how many were admitted. */
static int admitted(fx *f, const sl_request *r, int n) {
    int ok = 0;
    for (int i = 0; i < n; i++) {
        T_EQ_I(sl_engine_check(f->e, r, sluice_clock_now(f->clk), &V), SLUICE_OK);
        ok += V.action == SL_ALLOW;
    }
    return ok;
}

static void example1_values(void) {
    fx f;
    if (!fx_open(&f, "01-mongo-cps.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "mongo_cps", "database=users", NULL), 510), 500);
    T_EQ_I(admitted(&f, Q(&q, "mongo_cps", "database=default", NULL), 510), 500);
    /* a value with no rule is not limited, nor is another domain */
    T_EQ_I(admitted(&f, Q(&q, "mongo_cps", "database=other", NULL), 600), 600);
    T_EQ_U(V.n, 0);
    T_EQ_I(admitted(&f, Q(&q, "nosuch", "database=users", NULL), 3), 3);
    /* the window is one second */
    sluice_clock_advance(f.clk, SEC);
    T_EQ_I(admitted(&f, Q(&q, "mongo_cps", "database=users", NULL), 1), 1);
    fx_close(&f);
}

static void example2_nested_and_or(void) {
    fx f;
    if (!fx_open(&f, "02-messaging.yaml")) return;
    rls q;
    /* marketing to one number: 5 a day (and each also counts as a message to it) */
    const sl_request *r = Q(&q, "messaging", "message_type=marketing,to_number=2061111111",
                            "to_number=2061111111");
    T_EQ_I(admitted(&f, r, 8), 5);
    T_EQ_S(V.items[V.deciding].info->policy, "messaging/message_type=marketing/to_number");
    /* per-descriptor statuses, as the RLS response reports them */
    const sl_verdict_item *it;
    T_EQ_I(sl_verdict_descriptor(&V, 0, &it), SL_DESC_OVER_LIMIT);
    T_EQ_U(it->info->requests_per_unit, 5);
    T_EQ_I(it->info->envoy_unit, 4); /* DAY */
    T_EQ_I(sl_verdict_descriptor(&V, 1, &it), SL_DESC_OK);
    T_EQ_U(it->result.remaining, 95);
    T_EQ_I(sl_verdict_descriptor(&V, 2, &it), SL_DESC_NO_LIMIT);
    T_CHECK(it == NULL);
    /* other numbers have their own counters */
    T_EQ_I(admitted(&f, Q(&q, "messaging", "message_type=marketing,to_number=2062222222", NULL),
                    6), 5);
    /* any message to the first number: 100 a day, 5 already used */
    T_EQ_I(admitted(&f, Q(&q, "messaging", "to_number=2061111111", NULL), 100), 95);
    fx_close(&f);
}

static void example3_exact_beats_bare(void) {
    fx f;
    if (!fx_open(&f, "03-edge-proxy-per-ip.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "edge_proxy_per_ip", "remote_address=50.0.0.1", NULL), 12), 10);
    T_EQ_I(admitted(&f, Q(&q, "edge_proxy_per_ip", "remote_address=50.0.0.5", NULL), 3), 0);
    T_EQ_I(V.action, SL_REJECT);
    fx_close(&f);
}

static void example4_depth(void) {
    fx f;
    rls q;
    if (!fx_open(&f, "04-depth-shallow.yaml")) return;
    T_EQ_I(admitted(&f, Q(&q, "example4", "key=value,subkey=subvalue", NULL), 400), 400);
    T_EQ_U(V.n, 0);
    T_EQ_I(admitted(&f, Q(&q, "example4", "key=value", NULL), 301), 300);
    fx_close(&f);
    if (!fx_open(&f, "04-depth.yaml")) return;
    T_EQ_I(admitted(&f, Q(&q, "example4", "key=value,subkey=subvalue", NULL), 301), 300);
    T_EQ_I(admitted(&f, Q(&q, "example4", "key=value", NULL), 5), 5);
    fx_close(&f);
}

static void example5_unlimited(void) {
    fx f;
    if (!fx_open(&f, "05-unlimited.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "internal", "ldap=x", NULL), 1000), 1000);
    T_EQ_U(V.n, 1);
    T_CHECK(V.items[0].unlimited);
    T_EQ_U(V.items[0].result.remaining, UINT32_MAX);
    const sl_verdict_item *it;
    T_EQ_I(sl_verdict_descriptor(&V, 0, &it), SL_DESC_OK);
    T_CHECK(it != NULL && it->unlimited);
    T_EQ_I(admitted(&f, Q(&q, "internal", "azure=y", NULL), 101), 100);
    fx_close(&f);
}

static void example6_shadow(void) {
    fx f;
    if (!fx_open(&f, "06-shadow.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "example6", "service=auth-service,user=user-a", NULL), 30), 30);
    T_CHECK(V.shadow_limited);
    T_EQ_I(sl_verdict_descriptor(&V, 0, NULL), SL_DESC_OK); /* shadow: reported OK */
    T_EQ_I(admitted(&f, Q(&q, "example6", "service=auth-service,user=user-b", NULL), 30), 20);
    fx_close(&f);
}

static void example7_replaces(void) {
    fx f;
    if (!fx_open(&f, "07-replaces.yaml")) return;
    rls q;
    /* both rules match: only the replacing one (10/s) applies ... */
    const sl_request *both = Q(&q, "example7", "key_1=value_1,user=bkthomps",
                               "key_2=value_2,user=bkthomps");
    T_EQ_I(admitted(&f, both, 12), 10);
    T_EQ_U(V.n, 1);
    sluice_clock_advance(f.clk, SEC);
    /* ... and the replaced 5/s counter was left alone */
    T_EQ_I(admitted(&f, Q(&q, "example7", "key_1=value_1,user=bkthomps", NULL), 7), 5);
    fx_close(&f);
}

static void example8_detailed_metric(void) {
    fx f;
    if (!fx_open(&f, "08-detailed-metric.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "example8", "key1=unspecified_value", NULL), 11), 10);
    T_CHECK(V.items[0].info->detailed_metric); /* for the server's metrics labels */
    T_EQ_I(admitted(&f, Q(&q, "example8", "key1=unspecified_value2", NULL), 11), 10);
    T_EQ_I(admitted(&f, Q(&q, "example8", "key1=value1", NULL), 21), 20);
    fx_close(&f);
}

static void example9_wildcard(void) {
    fx f;
    if (!fx_open(&f, "09-wildcard.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "example9", "key1=value_1", NULL), 21), 20);
    T_EQ_I(admitted(&f, Q(&q, "example9", "key1=value_2", NULL), 21), 20);
    T_EQ_I(admitted(&f, Q(&q, "example9", "key1=other", NULL), 30), 30);
    fx_close(&f);
}

static void sluice_extensions(void) {
    fx f;
    if (!fx_open(&f, "10-sluice-extensions.yaml")) return;
    rls q;
    T_EQ_I(admitted(&f, Q(&q, "edge", "remote_address=1.2.3.4", NULL), 25), 20);
    T_EQ_U(V.n, 3);
    /* share_threshold: every api-* value shares one counter */
    T_EQ_I(admitted(&f, Q(&q, "edge", "generic_key=api-a", NULL), 600), 600);
    T_EQ_I(admitted(&f, Q(&q, "edge", "generic_key=api-b", NULL), 401), 400);
    /* hits_addend: per descriptor first, then the request's */
    sluice_clock_advance(f.clk, 3600 * SEC);
    Q(&q, "edge", "generic_key=api-c", NULL);
    q.r.hits_addend = 600;
    T_EQ_I(admitted(&f, &q.r, 1), 1);
    T_EQ_U(V.items[0].cost, 600);
    q.d[0].has_hits_addend = true;
    q.d[0].hits_addend = 0; /* check only */
    T_EQ_I(admitted(&f, &q.r, 1), 1);
    T_EQ_U(V.items[0].result.remaining, 400);
    fx_close(&f);
}

/* A descriptor's own limit bypasses the config (SPECS 4.2), counts per domain + entries,
 * and a rejection by it consumes nothing elsewhere. */
static void descriptor_limit_override(void) {
    fx f;
    if (!fx_open(&f, "05-unlimited.yaml")) return;
    rls q;
    Q(&q, "internal", "ldap=x", NULL);
    q.d[0].has_limit = true;
    q.d[0].limit_requests_per_unit = 3;
    q.d[0].limit_unit = 2; /* MINUTE */
    T_EQ_I(admitted(&f, &q.r, 5), 3); /* ldap is unlimited in the config: bypassed */
    T_CHECK(V.items[0].override);
    T_EQ_U(V.items[0].result.limit, 3);
    T_EQ_I(sl_verdict_descriptor(&V, 0, NULL), SL_DESC_OVER_LIMIT);
    /* with a configured descriptor beside it: over by the override, azure untouched */
    Q(&q, "internal", "ldap=x", "azure=y");
    q.d[0].has_limit = true;
    q.d[0].limit_requests_per_unit = 3;
    q.d[0].limit_unit = 2;
    T_EQ_I(admitted(&f, &q.r, 2), 0);
    T_EQ_U(V.items[1].result.remaining, 100);
    /* an override still with room: both consume; then the override runs out and the
     * request's azure unit is given back */
    Q(&q, "internal", "ldap=z", "azure=y");
    q.d[0].has_limit = true;
    q.d[0].limit_requests_per_unit = 1;
    q.d[0].limit_unit = 1; /* SECOND */
    T_EQ_I(admitted(&f, &q.r, 1), 1);
    T_EQ_U(V.items[1].result.remaining, 99);
    T_EQ_I(admitted(&f, &q.r, 1), 0);
    Q(&q, "internal", "azure=y", NULL);
    T_EQ_I(admitted(&f, &q.r, 1), 1);
    T_EQ_U(V.items[0].result.remaining, 98);
    char h[512];
    Q(&q, "internal", "ldap=w", NULL);
    q.d[0].has_limit = true;
    q.d[0].limit_requests_per_unit = 7;
    q.d[0].limit_unit = 3; /* HOUR */
    admitted(&f, &q.r, 1);
    sl_render_headers(&V, h, sizeof(h), 0);
    T_EQ_S(h, "RateLimit-Policy: \"hour\";q=7;w=3600\r\nRateLimit: \"hour\";r=6;t=3600\r\n");
    fx_close(&f);
}

/* A long list of exact values (a per-address allow/block list) with a wildcard and a
 * bare key beside it: every value finds its own rule, the rest fall through in order. */
static void large_level(void) {
    enum { N = 5000 }; /* each rule is a limiter: the memory store holds 16383 of them */
    size_t cap = (size_t)N * 120 + 1000, off = 0;
    char *y = malloc(cap);
    off += (size_t)snprintf(y + off, cap - off, "domain: big\ndescriptors:\n");
    off += (size_t)snprintf(y + off, cap - off,
                            "  - key: ip\n    value: \"10.*\"\n"
                            "    rate_limit: {unit: minute, requests_per_unit: 2}\n"
                            "  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 3}\n");
    for (int i = 0; i < N; i++)
        off += (size_t)snprintf(y + off, cap - off,
                                "  - key: ip\n    value: 192.0.%d.%d\n"
                                "    rate_limit: {unit: minute, requests_per_unit: %d}\n",
                                i / 256, i % 256, 1 + i % 7);
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    T_EQ_I(sl_config_load_buffer(y, off, "big.yaml", &cfg, &dl), SLUICE_OK);
    free(y);
    if (cfg == NULL) return;
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    char msg[200];
    sl_engine *e = sl_engine_create(cfg, st, &err, msg, sizeof(msg));
    if (e == NULL) {
        T_FAIL("engine: %s", msg);
        sluice_store_destroy(st);
        sl_config_destroy(cfg);
        return;
    }
    sluice_time now = {SEC, INT64_C(1767225600) * SEC};
    rls q;
    uint64_t rng = t_seed();
    for (int k = 0; k < 300; k++) {
        int i = (int)(t_rand(&rng) % N);
        char d[64];
        snprintf(d, sizeof(d), "ip=192.0.%d.%d", i / 256, i % 256);
        Q(&q, "big", d, NULL);
        sl_engine_check(e, &q.r, now, &V);
        T_EQ_U(V.n, 1);
        T_EQ_U(V.items[0].info->requests_per_unit, (uint32_t)(1 + i % 7));
    }
    Q(&q, "big", "ip=10.1.2.3", NULL);
    sl_engine_check(e, &q.r, now, &V);
    T_EQ_U(V.items[0].info->requests_per_unit, 2); /* wildcard before bare key */
    Q(&q, "big", "ip=172.16.0.1", NULL);
    sl_engine_check(e, &q.r, now, &V);
    T_EQ_U(V.items[0].info->requests_per_unit, 3);
    sl_engine_destroy(e);
    sluice_store_destroy(st);
    sl_config_destroy(cfg);
}

static void format_errors(void) {
    static const struct {
        const char *yaml, *msg;
    } bad[] = {
        {"domain: ''\ndescriptors: []\n", "1:9: domain must not be empty"},
        {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
         "4:24: invalid rate limit unit 'fortnight'"},
        {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unlimited: true}\n",
         "4:24: unit given with unlimited: true"},
        {"domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "4:10: duplicate descriptor 'k'"},
        {"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
         "5:22: share_threshold needs a wildcard value"},
        {"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1,"
         " name: a, replaces: [{name: a}]}\n",
         "replaces itself"},
        {"domain: d\ndescriptors:\n  - key: k\n    colour: red\n",
         "4:5: unknown field 'colour' in a descriptor"},
        {"domain: d\ndescriptors:\n  - key: ''\n", "3:10: descriptor key must not be empty"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        static sl_diag_list dl;
        sl_config *cfg = NULL;
        int rc = sl_config_load_buffer(bad[i].yaml, strlen(bad[i].yaml), "e.yaml", &cfg, &dl);
        T_EQ_I(rc, SLUICE_EINVAL);
        T_CHECK(cfg == NULL);
        bool found = false;
        char line[600];
        for (size_t j = 0; j < dl.n; j++) {
            sl_diag_format(&dl, j, line, sizeof(line));
            if (strstr(line, bad[i].msg) != NULL) found = true;
        }
        if (!found) T_FAIL("case %zu: no '%s' (first: %s)", i, bad[i].msg, dl.n ? line : "-");
    }
}

int main(void) {
    T_RUN(example1_values);
    T_RUN(example2_nested_and_or);
    T_RUN(example3_exact_beats_bare);
    T_RUN(example4_depth);
    T_RUN(example5_unlimited);
    T_RUN(example6_shadow);
    T_RUN(example7_replaces);
    T_RUN(example8_detailed_metric);
    T_RUN(example9_wildcard);
    T_RUN(sluice_extensions);
    T_RUN(descriptor_limit_override);
    T_RUN(large_level);
    T_RUN(format_errors);
    return T_DONE();
}
