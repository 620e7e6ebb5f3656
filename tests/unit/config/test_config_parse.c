/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config_parse.c -- what the loader reads: rates, durations and quotas as people
 * write them, every server setting (and its default), every policy field, the two
 * formats side by side, and the rule that nothing is accepted silently (unknown or
 * misplaced fields anywhere are errors with a position).
 */
#include "config/compiled.h"
#include "engine/internal.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S
#define MS SLUICE_NS_PER_MS

static sl_diag_list DL;

static sl_config *load_ok(const char *yaml) {
    sl_config *cfg = NULL;
    int rc = sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &cfg, &DL);
    if (rc != SLUICE_OK) {
        char line[600];
        for (size_t i = 0; i < DL.n; i++) {
            sl_diag_format(&DL, i, line, sizeof(line));
            fprintf(stderr, "  %s\n", line);
        }
        T_FAIL("did not load");
    }
    return cfg;
}

/* Loads a broken config and checks that one diagnostic reads `want` ("L:C: text..."). */
static void load_err(const char *yaml, const char *want) {
    sl_config *cfg = NULL;
    int rc = sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &cfg, &DL);
    T_EQ_I(rc, SLUICE_EINVAL);
    T_CHECK(cfg == NULL);
    char line[600], first[600] = "";
    for (size_t i = 0; i < DL.n; i++) {
        sl_diag_format(&DL, i, line, sizeof(line));
        if (i == 0) snprintf(first, sizeof(first), "%s", line);
        if (strstr(line, want) != NULL) return;
    }
    T_FAIL("no diagnostic '%s' (got %zu, first: %s)", want, DL.n, first);
}

static void rates(void) {
    static const struct {
        const char *s;
        uint64_t limit;
        int64_t period;
    } ok[] = {
        {"10/s", 10, SEC},          {"1000/min", 1000, 60 * SEC}, {"50000/day", 50000, 86400 * SEC},
        {"5/m", 5, 60 * SEC},       {"100/5m", 100, 300 * SEC},   {"3/h", 3, 3600 * SEC},
        {"7/hour", 7, 3600 * SEC},  {"2/week", 2, 604800 * SEC},  {"1/500ms", 1, 500 * MS},
        {"1_000/s", 1000, SEC},     {"10 / second", 10, SEC},     {"9/30s", 9, 30 * SEC},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t l = 0;
        int64_t p = 0;
        if (!sl__parse_rate(ok[i].s, &l, &p)) T_FAIL("rate %s refused", ok[i].s);
        T_EQ_U(l, ok[i].limit);
        T_EQ_I(p, ok[i].period);
    }
    static const char *const bad[] = {"10",     "/s",   "10/",     "10/fortnight", "x/s",
                                      "10/0s",  "-1/s", "10/month", "99999999999999999999/s",
                                      "10/s/s", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t l;
        int64_t p;
        if (sl__parse_rate(bad[i], &l, &p)) T_FAIL("rate '%s' accepted", bad[i]);
    }
}

static void durations_and_quotas(void) {
    static const struct {
        const char *s;
        int64_t ns;
    } ok[] = {{"30s", 30 * SEC}, {"5m", 300 * SEC}, {"1h", 3600 * SEC}, {"500ms", 500 * MS},
              {"2d", 172800 * SEC}, {"10us", 10000}, {"0s", 0}, {"1 min", 60 * SEC}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        int64_t ns = -1;
        if (!sl__parse_duration(ok[i].s, &ns)) T_FAIL("duration %s refused", ok[i].s);
        T_EQ_I(ns, ok[i].ns);
    }
    static const char *const bad[] = {"30", "s", "5 parsecs", "-1s", "1.5s", "99999999999999d"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int64_t ns;
        if (sl__parse_duration(bad[i], &ns)) T_FAIL("duration '%s' accepted", bad[i]);
    }
    uint64_t l;
    sluice_period p;
    T_CHECK(sl__parse_quota("50000/day", &l, &p) && l == 50000 && p == SLUICE_PERIOD_DAY);
    T_CHECK(sl__parse_quota("1/month", &l, &p) && p == SLUICE_PERIOD_MONTH);
    T_CHECK(sl__parse_quota("3/week", &l, &p) && p == SLUICE_PERIOD_WEEK);
    T_CHECK(sl__parse_quota("4/hour", &l, &p) && p == SLUICE_PERIOD_HOUR);
    T_CHECK(!sl__parse_quota("4/5m", &l, &p)); /* calendar periods only */
}

static void globs(void) {
    T_CHECK(sl__glob("/api/*", "/api/v1/x", 9));
    T_CHECK(sl__glob("*", "", 0));
    T_CHECK(sl__glob("a*b*c", "aXbYc", 5));
    T_CHECK(!sl__glob("a*b*c", "aXbY", 4));
    T_CHECK(sl__glob("value*", "value", 5));
    T_CHECK(!sl__glob("/api", "/api/", 5));
    /* a pathological pattern finishes (no exponential backtracking) */
    char s[4001];
    memset(s, 'a', 4000);
    s[4000] = '\0';
    T_CHECK(!sl__glob("*a*a*a*a*a*a*a*a*b", s, 4000));
}

static const char *FULL =
    "listen: { http: '0.0.0.0:8080', resp: '[::1]:6380', grpc: 127.0.0.1:8081, admin: off }\n"
    "workers: 4\n"
    "admin: { token: s3cret }\n"
    "auth: { deny_status: 403 }\n"
    "headers: { legacy: true }\n"
    "log: { raw_keys: true }\n"
    "store:\n"
    "  type: memory\n"
    "  max_keys: 5_000\n"
    "  on_full: refuse_new\n"
    "  shards: 16\n"
    "  snapshot: { path: /tmp/s.state, every: 1m }\n"
    "policies:\n"
    "  - name: everything\n"
    "    description: every field at once\n"
    "    objective: plan\n"
    "    match:\n"
    "      method: [GET, POST]\n"
    "      path: \"/v1/*\"\n"
    "      host: API.example.com\n"
    "      headers: { X-Env: prod, x-beta: { present: true } }\n"
    "    key: [header.X-Tenant, client_ip/48, method, path, route, host]\n"
    "    on_missing_key: { use: [[header.x-user], [client_ip]], otherwise: skip }\n"
    "    cost: { default: 2, \"POST /v1/export\": 50, \"* /v1/bulk/*\": 9, from: header.x-cost,\n"
    "            settle: true, unit: tokens }\n"
    "    algorithm: gcra\n"
    "    limits:\n"
    "      - { name: e-burst, rate: 10/s, burst: 60 }\n"
    "      - { name: e-day, quota: 1000/day, tz: Europe/Madrid }\n"
    "      - { name: e-conc, max: 3, lease: 5s }\n"
    "      - { name: e-shape, rate: 5/s, algorithm: leaky_bucket, burst: 60, max_delay: 200ms }\n"
    "    plan_from: header.x-plan\n"
    "    plans:\n"
    "      gold: { algorithm: token_bucket, limits: [ { rate: 100/s, burst: 100 } ] }\n"
    "    on_exceed: { delay: 1s }\n"
    "    mode: { rollout: 25% }\n"
    "    on_store_error: closed\n"
    "    headers: false\n";

static void every_field(void) {
    sl_config *cfg = load_ok(FULL);
    if (cfg == NULL) return;
    const sl_settings *s = sl_config_settings(cfg);
    T_EQ_S(s->listen_http, "0.0.0.0:8080");
    T_EQ_S(s->listen_resp, "[::1]:6380");
    T_EQ_S(s->listen_grpc, "127.0.0.1:8081");
    T_EQ_S(s->listen_admin, "");
    T_EQ_U(s->workers, 4);
    T_EQ_S(s->admin_token, "s3cret");
    T_EQ_I(s->auth_deny_status, 403);
    T_CHECK(s->legacy_headers);
    T_CHECK(s->log_raw_keys);
    T_EQ_I(s->store.type, SL_STORE_MEMORY);
    T_EQ_U(s->store.max_keys, 5000);
    T_EQ_I(s->store.on_full, SLUICE_REFUSE_NEW);
    T_EQ_U(s->store.shards, 16);
    T_EQ_S(s->store.snapshot_path, "/tmp/s.state");
    T_EQ_I(s->store.snapshot_every_ns, 60 * SEC);
    T_EQ_U(sl_config_policy_count(cfg), 1);
    T_EQ_U(sl_config_limiter_count(cfg), 5);
    T_EQ_S(sl_config_policy_name(cfg, 0), "everything");
    T_CHECK(!sl_config_is_envoy(cfg));
    const sl_cpolicy *p = &cfg->pol[0];
    T_EQ_S(p->objective, "plan");
    T_EQ_U(p->n_methods, 2);
    T_EQ_I(p->path_kind, SL_PATH_GLOB);
    T_EQ_S(p->host, "api.example.com");
    T_EQ_U(p->n_hdr, 2);
    T_EQ_S(p->hdr[0].name, "x-env");
    T_EQ_U(p->n_chains, 3);
    T_EQ_U(p->chains[0].n, 6);
    T_EQ_S(p->chains[0].parts[0].name, "x-tenant");
    T_EQ_U(p->chains[0].parts[1].v6_prefix, 48);
    T_EQ_I(p->on_missing, SL_MISSING_SKIP);
    T_EQ_U(p->cost_default, 2);
    T_EQ_U(p->n_ops, 2);
    T_EQ_S(p->ops[1].method, "*");
    T_CHECK(p->settle);
    T_EQ_I(p->qu, SL_QU_OTHER);
    T_EQ_S(p->unit_name, "tokens");
    T_EQ_U(p->nwin, 4);
    T_EQ_I(p->win[0].spec.algo, SLUICE_GCRA);
    T_EQ_I(p->win[1].spec.algo, SLUICE_QUOTA);
    T_EQ_S(p->win[1].spec.tz, "Europe/Madrid");
    T_EQ_I(p->win[2].spec.algo, SLUICE_CONCURRENCY);
    T_EQ_I(p->win[2].spec.lease_ns, 5 * SEC);
    T_EQ_I(p->win[3].spec.algo, SLUICE_LEAKY_BUCKET);
    T_EQ_I(p->win[3].spec.max_delay_ns, 200 * MS);
    T_EQ_U(p->n_plans, 1);
    T_EQ_I(p->plans[0].win[0].spec.algo, SLUICE_TOKEN_BUCKET);
    T_EQ_I(p->react, SL_REACT_DELAY);
    T_EQ_I(p->max_delay_ns, SEC);
    T_EQ_U(p->rollout_pct, 25);
    T_CHECK(p->fail_closed);
    T_CHECK(!p->headers);
    sl_config_destroy(cfg);
}

static void defaults(void) {
    sl_config *cfg = load_ok("policies:\n"
                             "  - { name: a, objective: fairness, key: [client_ip], algorithm: gcra,\n"
                             "      limits: [{rate: 1/s}] }\n");
    if (cfg == NULL) return;
    const sl_settings *s = sl_config_settings(cfg);
    T_EQ_S(s->listen_http, "127.0.0.1:8080");
    T_EQ_S(s->listen_resp, "127.0.0.1:6380");
    T_EQ_S(s->listen_grpc, "127.0.0.1:8081"); /* issue 4: the default gRPC listener */
    T_EQ_S(s->listen_admin, "127.0.0.1:8082");
    T_EQ_I(s->auth_deny_status, 429);
    T_CHECK(!s->legacy_headers);
    T_CHECK(!s->log_raw_keys); /* keys are personal data */
    T_EQ_I(s->store.type, SL_STORE_MEMORY);
    T_EQ_I(s->store.redis_timeout_ns, 20 * MS);
    const sl_cpolicy *p = &cfg->pol[0];
    T_EQ_U(p->cost_default, 1);
    T_EQ_I(p->react, SL_REACT_REJECT);
    T_EQ_U(p->rollout_pct, 100);
    T_CHECK(!p->fail_closed);
    T_CHECK(p->headers);
    T_EQ_I(p->on_missing, SL_MISSING_REJECT);
    T_EQ_S(p->win[0].label, "a");
    sl_config_destroy(cfg);
}

static void redis_store(void) {
    sl_config *cfg = load_ok("store: { type: redis-cluster, addr: 10.0.0.1:7000, timeout: 50ms,\n"
                             "         key_secret: abc }\n"
                             "policies:\n"
                             "  - { name: a, objective: fairness, key: [], algorithm: gcra,\n"
                             "      limits: [{rate: 1/s}] }\n");
    if (cfg == NULL) return;
    const sl_settings *s = sl_config_settings(cfg);
    T_EQ_I(s->store.type, SL_STORE_REDIS_CLUSTER);
    T_EQ_S(s->store.redis_addr, "10.0.0.1:7000");
    T_EQ_I(s->store.redis_timeout_ns, 50 * MS);
    T_EQ_S(s->store.redis_key_secret, "abc");
    T_CHECK(!s->store.redis_time_local); /* Redis TIME by default */
    sl_config_destroy(cfg);
    cfg = load_ok("store: { type: redis, addr: r:6379, time: local }\npolicies: []\n");
    if (cfg != NULL) T_CHECK(sl_config_settings(cfg)->store.redis_time_local);
    sl_config_destroy(cfg);
    load_err("store: { type: redis, addr: r:1, time: ntp }\npolicies: []\n", "1:40: bad store time 'ntp'");
    load_err("store: { time: local }\npolicies: []\n", "field 'time' does not apply to a memory store");
    /* no addr: the command line gives it (serve refuses to start when it does not) */
    cfg = load_ok("store: { type: redis }\npolicies: []\n");
    if (cfg != NULL) T_EQ_S(sl_config_settings(cfg)->store.redis_addr, "");
    sl_config_destroy(cfg);
    load_err("store: { type: redis, addr: r:1, max_keys: 5 }\npolicies: []\n",
             "field 'max_keys' does not apply to a redis store");
}

/* leasing: per policy (sluice format) and per rule (Envoy format), on rates only, a
 * slice that fits every window of the policy, plans included. */
static void leasing(void) {
    sl_config *cfg = load_ok("policies:\n"
                             "  - name: hot\n    objective: protection\n    key: []\n"
                             "    algorithm: token_bucket\n"
                             "    limits: [{rate: 1000/s, burst: 2000}, {rate: 50000/min, algorithm: fixed_window}]\n"
                             "    leasing: { slice: 20, hold: 250ms }\n"
                             "  - name: cold\n    objective: fairness\n    key: [client_ip]\n"
                             "    algorithm: gcra\n    limits: [{rate: 10/s}]\n"
                             "    leasing: off\n");
    if (cfg != NULL) {
        T_EQ_U(cfg->pol[0].lease_slice, 20);
        T_EQ_I(cfg->pol[0].lease_hold_ns, 250 * MS);
        T_EQ_U(cfg->pol[1].lease_slice, 0);
        sl_config_destroy(cfg);
    }
    cfg = load_ok("domain: rl\ndescriptors:\n  - key: k\n"
                  "    rate_limit: { unit: second, requests_per_unit: 500, leasing: { slice: 25 } }\n");
    if (cfg != NULL) {
        T_EQ_U(cfg->pol[0].lease_slice, 25);
        T_EQ_I(cfg->pol[0].lease_hold_ns, 100 * MS); /* the default hold */
        sl_config_destroy(cfg);
    }
    const char *head = "policies:\n  - name: a\n    objective: fairness\n    key: []\n";
    char buf[1024];
    static const struct {
        const char *extra, *want;
    } c[] = {
        {"    algorithm: gcra\n    limits: [{rate: 100/s}]\n    leasing: { slice: 1 }\n",
         "7:23: leasing slice 1 takes nothing ahead"},
        {"    algorithm: gcra\n    limits: [{rate: 100/s}]\n    leasing: { slize: 5 }\n",
         "unknown field 'slize' in leasing"},
        {"    algorithm: gcra\n    limits: [{rate: 100/s}]\n    leasing: { hold: 1s }\n",
         "leasing needs a slice"},
        {"    algorithm: gcra\n    limits: [{rate: 100/s}]\n    leasing: { slice: 5, hold: 2m }\n",
         "leasing hold must be above 0 and at most 60s"},
        {"    algorithm: gcra\n    limits: [{rate: 100/s}]\n    leasing: on\n",
         "leasing must be a mapping"},
        {"    algorithm: gcra\n    limits: [{rate: 100/s, burst: 10}]\n    leasing: { slice: 50 }\n",
         "leasing slice 50 is above the capacity 10 of limit 'a'"},
        {"    algorithm: quota\n    limits: [{quota: 1000/day}]\n    leasing: { slice: 5 }\n",
         "leasing needs rate limits, but limit 'a' is quota"},
        {"    algorithm: concurrency\n    limits: [{max: 100}]\n    leasing: { slice: 5 }\n",
         "leasing needs rate limits, but limit 'a' is concurrency"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s", head, c[i].extra);
        load_err(buf, c[i].want);
    }
    load_err("domain: rl\ndescriptors:\n  - key: k\n"
             "    rate_limit: { unit: second, requests_per_unit: 5, leasing: { slice: 10 } }\n",
             "leasing slice 10 is above the capacity 5");
    load_err("domain: rl\ndescriptors:\n  - key: k\n"
             "    rate_limit: { unlimited: true, leasing: { slice: 10 } }\n",
             "leasing given with unlimited: true");
}

static void both_formats_in_one_file(void) {
    sl_config *cfg = load_ok("policies:\n"
                             "  - name: per-user\n"
                             "    objective: fairness\n"
                             "    match: { domain: edge, descriptor: { user: \"*\" } }\n"
                             "    key: [descriptor.user]\n"
                             "    algorithm: gcra\n"
                             "    limits: [{rate: 2/s, burst: 2}]\n"
                             "domains:\n"
                             "  - domain: edge\n"
                             "    descriptors:\n"
                             "      - key: user\n"
                             "        rate_limit: { unit: minute, requests_per_unit: 100 }\n");
    if (cfg == NULL) return;
    T_EQ_U(sl_config_policy_count(cfg), 2);
    T_EQ_S(sl_config_policy_name(cfg, 1), "edge/user");
    /* both apply to one descriptor */
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *e = sl_engine_create(cfg, st, &err, NULL, 0);
    T_CHECK(e != NULL);
    static sl_verdict v;
    sl_entry en = {{"user", 4}, {"bob", 3}};
    sl_descriptor d = {.entries = &en, .n = 1};
    sl_request r = {.domain = {"edge", 4}, .descriptors = &d, .n_descriptors = 1};
    sluice_time now = {SEC, INT64_C(1767225600) * SEC};
    int ok = 0;
    for (int i = 0; i < 3; i++) {
        sl_engine_check(e, &r, now, &v);
        ok += v.action == SL_ALLOW;
    }
    T_EQ_I(ok, 2);
    T_EQ_U(v.n, 2);
    T_EQ_S(v.items[v.deciding].info->name, "per-user");
    sl_engine_destroy(e);
    sluice_store_destroy(st);
    sl_config_destroy(cfg);
}

/* Nothing is ignored silently: an unknown or misplaced field anywhere is an error. */
static void nothing_ignored(void) {
    const char *head = "policies:\n  - name: a\n    objective: fairness\n    key: [client_ip]\n"
                       "    algorithm: gcra\n    limits: [{rate: 1/s}]\n";
    char buf[1024];
    static const struct {
        const char *extra, *want;
    } c[] = {
        {"    colour: red\n", "7:5: unknown field 'colour' in a policy"},
        {"    match: { paht: /x }\n", "7:14: unknown field 'paht' in match"},
        {"    match: { path: /x, path_prefix: /y }\n", "path and path_prefix both given"},
        {"    match: { method: get }\n", "bad method 'get'"},
        {"    match: { path: x }\n", "bad path 'x'"},
        {"    match: { headers: { x-a: { present: maybe } } }\n", "bad boolean 'maybe'"},
        {"    match: { descriptor: { a: b } }\n", "match.descriptor needs match.domain"},
        {"    cost: { defualt: 2 }\n", "unknown field 'defualt' in cost"},
        {"    cost: { \"post /x\": 2 }\n", "bad operation 'post /x'"},
        {"    cost: { from: cookie }\n", "bad cost attribute 'cookie'"},
        {"    cost: 5000000000\n", "number 5000000000 is too large"},
        {"    cost: 2\n", "burst 1 of limit 'a' is below the cost 2"},
        {"    mode: canary\n", "bad mode 'canary'"},
        {"    mode: enforce\n    on_exceed: shadow\n", "mode enforce contradicts on_exceed"},
        {"    on_store_error: maybe\n", "bad on_store_error 'maybe'"},
        {"    on_missing_key: ignore\n", "bad on_missing_key 'ignore'"},
        {"    on_missing_key: { use: [client_ip], otherwise: allow }\n", "bad otherwise 'allow'"},
        {"    plan_from: header.x-plan\n    plans: { pro: { limit: [] } }\n",
         "unknown field 'limit' in a plan"},
        {"    plan_from: header.x-plan\n    plans: { pro: {} }\n", "plan 'pro' needs limits"},
        {"    headers: yes\n", "bad boolean 'yes'"},
        {"    description: [a]\n", "description must be a string"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s", head, c[i].extra);
        load_err(buf, c[i].want);
    }
    load_err("policies:\n  - { name: a, objective: fairness, key: [client_ip],\n"
             "      limits: [{rate: 1/s}] }\n",
             "no algorithm for this rate");
    load_err("policies:\n  - { name: a, objective: fairness, key: [client_ip], algorithm: gcra,\n"
             "      limits: [{rate: 1/s, quota: 5/day}] }\n",
             "a limit states one of rate, quota, max");
    load_err("policies:\n  - { name: a, objective: fairness, key: [client_ip], algorithm: gcra,\n"
             "      limits: [{rate: 1/s, tz: UTC}] }\n",
             "tz applies to calendar quotas only");
    load_err("policies:\n  - { name: a, objective: fairness, key: [client_ip], algorithm: gcra,\n"
             "      limits: [{rate: 1/s, lease: 1s}] }\n",
             "lease applies to concurrency limits only");
    load_err("policies:\n  - { name: a, objective: fairness, key: [client_ip], algorithm: gcra,\n"
             "      limits: [{rate: 1/s, max_delay: 1s}] }\n",
             "max_delay applies to leaky_bucket only");
    load_err("policies:\n  - { name: 'a b', objective: fairness, key: [], algorithm: gcra,\n"
             "      limits: [{rate: 1/s}] }\n",
             "bad policy name 'a b'");
    load_err("policies:\n  - { name: a, objective: fairness, key: [client_ip/129], algorithm: gcra,\n"
             "      limits: [{rate: 1/s}] }\n",
             "bad client_ip prefix 'client_ip/129'");
    load_err("policies:\n  - { name: a, objective: fairness, key: [], algorithm: gcra,\n"
             "      limits: [] }\n",
             "limits must be a non-empty list");
    load_err("policies:\n  - { name: a, objective: fairness, key: [], algorithm: gcra,\n"
             "      limits: [{rate: 0/s}] }\n",
             "rate 0/s admits nothing");
    load_err("policies:\n  - { name: a, objective: fairness, key: [], algorithm: sliding_log,\n"
             "      limits: [{rate: 100000/s}] }\n",
             "invalid limit:");
    load_err("policies:\n  - { name: a, objective: fairness, key: [descriptor.x], algorithm: gcra,\n"
             "      limits: [{rate: 1/s}] }\n",
             "key part descriptor.x needs match.domain");
    load_err("policies:\n  - { name: a, objective: fairness, key: [], algorithm: gcra,\n"
             "      limits: [{name: x, rate: 1/s}] }\n"
             "  - { name: b, objective: fairness, key: [], algorithm: gcra,\n"
             "      limits: [{name: x, rate: 1/s}] }\n",
             "limit name 'x' is used twice");
    load_err("workers: many\npolicies: []\n", "1:10: bad number 'many'");
    load_err("listen: { http: 1.2.3.4:99999 }\npolicies: []\n", "bad listen address");
    load_err("store: { type: disk }\npolicies: []\n", "unknown store type 'disk'");
    load_err("store: { shards: 3 }\npolicies: []\n", "shards 3 is not a power of two");
    load_err("store: { snapshot: { every: 1s } }\npolicies: []\n", "snapshot needs a path");
    load_err("", "1:1: empty config");
    load_err("- a\n- b\n", "the config must be a mapping");
    load_err("a: 1\n---\nb: 2\n", "several YAML documents");
    load_err("a: &x [1]\nb: *nope\n", "2:4: unknown YAML alias '*nope'");
    load_err("policies:\n  - {name: a}\n  - {name: a}\n", "3:12: duplicate policy name 'a'");
}

/* Anchors, aliases and merge keys as gopkg.in/yaml.v2 reads them (envoyproxy/ratelimit
 * files use them), and an alias bomb stopped by the expansion bound. */
static void yaml_aliases(void) {
    sl_config *cfg = load_ok("domain: d\n"
                             "descriptors:\n"
                             "  - key: a\n"
                             "    rate_limit: &rl {unit: minute, requests_per_unit: 5}\n"
                             "  - key: b\n"
                             "    rate_limit: *rl\n"
                             "  - key: c\n"
                             "    shadow_mode: true\n"
                             "    rate_limit:\n"
                             "      <<: *rl\n"
                             "      requests_per_unit: 7\n"
                             "  - &sub\n"
                             "    key: e\n"
                             "    descriptors: [{key: f, rate_limit: {<<: [*rl], unit: hour}}]\n");
    size_t n = 0;
    char *dump = sl_config_envoy_dump(cfg, &n);
    T_CHECK(dump != NULL);
    T_EQ_S(dump, "d.a: unit=MINUTE requests_per_unit=5, shadow_mode: false\n"
                 "d.b: unit=MINUTE requests_per_unit=5, shadow_mode: false\n"
                 "d.c: unit=MINUTE requests_per_unit=7, shadow_mode: true\n"
                 "d.e.f: unit=HOUR requests_per_unit=5, shadow_mode: false\n");
    T_EQ_U(n, strlen(dump));
    free(dump);
    sl_config_destroy(cfg);
    /* a sluice config: one policy's limits reused */
    cfg = load_ok("policies:\n"
                  "  - &p {name: a, objective: fairness, key: [], algorithm: gcra,\n"
                  "        limits: &l [{rate: 3/s}]}\n"
                  "  - {<<: *p, name: b, limits: *l}\n");
    T_EQ_U(sl_config_policy_count(cfg), 2);
    T_EQ_S(sl_config_policy_name(cfg, 1), "b");
    sl_config_destroy(cfg);
    /* billion laughs: 10 levels of 10 aliases would be 10^10 nodes */
    char bomb[2048];
    size_t off = (size_t)snprintf(bomb, sizeof(bomb), "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 10; i++)
        off += (size_t)snprintf(bomb + off, sizeof(bomb) - off,
                                "l%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n",
                                i, i, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
    load_err(bomb, "YAML aliases expand to more than 1000000 nodes");
    load_err("a: &m 1\nb: {<<: *m}\n", "a merge key '<<' takes a mapping");
    load_err("a: &x [*x]\n", "unknown YAML alias '*x'");
    /* merged maps are bounded: the keys are compared pairwise */
    char *big = malloc(40000);
    size_t bo = (size_t)snprintf(big, 40000, "a: &m {");
    for (int i = 0; i < 300; i++) bo += (size_t)snprintf(big + bo, 40000 - bo, "%sk%d: 1", i ? ", " : "", i);
    snprintf(big + bo, 40000 - bo, "}\nb: {<<: *m}\n");
    load_err(big, "more than 256 keys");
    free(big);
}

static void diagnostics_are_bounded(void) {
    /* many errors: the first SL_DIAG_MAX kept in order, the rest counted */
    char *buf = malloc(200000);
    size_t off = (size_t)snprintf(buf, 200000, "policies:\n");
    for (int i = 0; i < 100; i++)
        off += (size_t)snprintf(buf + off, 200000 - off, "  - { nme: p%d }\n", i);
    sl_config *cfg = NULL;
    T_EQ_I(sl_config_load_buffer(buf, off, "many.yaml", &cfg, &DL), SLUICE_EINVAL);
    T_EQ_U(DL.n, SL_DIAG_MAX);
    T_CHECK(DL.dropped > 0);
    T_EQ_I(DL.items[0].line, 2);
    T_CHECK(DL.items[1].line >= DL.items[0].line);
    char line[600];
    sl_diag_format(&DL, 0, line, sizeof(line));
    T_CHECK(strncmp(line, "many.yaml:2:7: unknown field 'nme' in a policy", 46) == 0);
    free(buf);
    /* deep nesting is refused, not recursed into */
    char deep[400];
    memset(deep, '[', 300);
    deep[300] = '\0';
    T_EQ_I(sl_config_load_buffer(deep, 300, "deep.yaml", &cfg, &DL), SLUICE_EINVAL);
    T_CHECK(DL.n >= 1);
    /* NULL diagnostics are allowed */
    T_EQ_I(sl_config_load_buffer("x: 1\n", 5, "x", &cfg, NULL), SLUICE_EINVAL);
}

/* The complete example in docs/config.md is a config that loads. */
static void docs_example_loads(void) {
    const char *src = getenv("SLUICE_SRC");
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/config.md", src ? src : ".");
    FILE *f = fopen(path, "r");
    T_CHECK(f != NULL);
    if (f == NULL) return;
    static char doc[65536], yaml[65536];
    size_t n = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[n] = '\0';
    const char *sec = strstr(doc, "## A complete example");
    const char *start = sec ? strstr(sec, "```yaml\n") : NULL;
    const char *end = start ? strstr(start + 8, "```") : NULL;
    T_CHECK(end != NULL);
    if (end == NULL) return;
    size_t len = (size_t)(end - (start + 8));
    memcpy(yaml, start + 8, len);
    yaml[len] = '\0';
    sl_config *cfg = load_ok(yaml);
    T_CHECK(cfg != NULL && sl_config_policy_count(cfg) == 8);
    sl_config_destroy(cfg);
}

int main(void) {
    T_RUN(docs_example_loads);
    T_RUN(rates);
    T_RUN(durations_and_quotas);
    T_RUN(globs);
    T_RUN(every_field);
    T_RUN(defaults);
    T_RUN(redis_store);
    T_RUN(leasing);
    T_RUN(both_formats_in_one_file);
    T_RUN(nothing_ignored);
    T_RUN(diagnostics_are_bounded);
    T_RUN(yaml_aliases);
    return T_DONE();
}
