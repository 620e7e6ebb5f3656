/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_explain.c -- the engine's account of itself (src/engine/explain.c, describe.c):
 * explanations of matched, unmatched, missing-key, fallback, plan, shadow and rollout
 * requests as an operator reads them, that explaining consumes nothing (the state after is
 * the state before), keys hashed unless raw keys are allowed, the effective config, the
 * config difference the audit trail records, and window names for metric labels.
 * Memory store on a manual clock; explanations parsed with jansson.
 */
#include <jansson.h>

#include "engine/explain.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static const char *CONFIG =
    "policies:\n"
    "  - name: api\n"                                   /* line 2 */
    "    objective: fairness\n"
    "    key: [header.x-api-key]\n"
    "    on_missing_key: { use: [client_ip] }\n"
    "    cost: { default: 1, \"POST /export\": 50 }\n"
    "    algorithm: token_bucket\n"
    "    limits:\n"
    "      - { rate: 10/s, burst: 100 }\n"
    "      - { rate: 1000/min }\n"
    "  - name: login\n"
    "    objective: security\n"
    "    match: { method: POST, path: /login }\n"
    "    key: [client_ip]\n"
    "    algorithm: gcra\n"
    "    limits: [ { rate: 3/min, burst: 3 } ]\n"
    "  - name: tenant\n"
    "    objective: plan\n"
    "    match: { path_prefix: /t/ }\n"
    "    key: [header.x-tenant]\n"
    "    plan_from: header.x-plan\n"
    "    algorithm: fixed_window\n"
    "    limits: [ { rate: 5/min } ]\n"
    "    plans:\n"
    "      pro: { limits: [ { rate: 50/min } ] }\n"
    "  - name: guard\n"
    "    objective: protection\n"
    "    match: { host: \"*.example.com\" }\n"
    "    key: []\n"
    "    algorithm: fixed_window\n"
    "    limits: [ { rate: 2/min } ]\n"
    "    mode: shadow\n"
    "  - name: beta\n"
    "    objective: protection\n"
    "    match: { headers: { x-beta: \"yes\" } }\n"
    "    key: [header.x-user]\n"
    "    algorithm: fixed_window\n"
    "    limits: [ { rate: 1/min } ]\n"
    "    mode: { rollout: 50% }\n";

typedef struct fx {
    sluice_clock *clk;
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
    sl_hash_key hk;
} fx;

static sl_config *load(const char *yaml) {
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    if (sl_config_load_buffer(yaml, strlen(yaml), "test.yaml", &cfg, &dl) != SLUICE_OK) {
        char line[600];
        for (size_t i = 0; i < dl.n; i++) {
            sl_diag_format(&dl, i, line, sizeof(line));
            fprintf(stderr, "  %s\n", line);
        }
        T_FAIL("config did not load");
    }
    return cfg;
}

static bool fx_open(fx *f, const char *yaml) {
    memset(f, 0, sizeof(*f));
    f->clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC);
    int err = 0;
    f->st = sluice_store_create(NULL, &err);
    f->cfg = load(yaml);
    f->hk = (sl_hash_key){0x1234, 0x5678};
    if (f->cfg == NULL || f->st == NULL) return false;
    f->e = sl_engine_create(f->cfg, f->st, &err, NULL, 0);
    return f->e != NULL;
}

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
    sluice_clock_destroy(f->clk);
}

static void done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    *(int *)ud = rc;
}

/* Explains x (peek through the store, then render), returning the parsed JSON. */
static json_t *run(fx *f, sl_explain *x, bool raw, char **text) {
    T_CHECK(x != NULL);
    if (x == NULL) return NULL;
    int rc = 99;
    sl_engine_decide(f->e, f->st, sl_explain_verdict(x), sluice_clock_now(f->clk), done, &rc);
    T_CHECK(rc != 99); /* the memory store answers at once */
    sl_explain_opts o = {.raw_keys = raw, .hash_key = &f->hk, .store = "memory"};
    size_t len = 0;
    char *s = sl_explain_render(x, rc, &o, &len);
    sl_explain_free(x);
    T_CHECK(s != NULL && strlen(s) == len);
    json_error_t je;
    json_t *j = s ? json_loads(s, 0, &je) : NULL;
    if (j == NULL) T_FAIL("not JSON: %s", s ? s : "(null)");
    if (text) *text = s;
    else free(s);
    return j;
}

static sl_header H(const char *n, const char *v) {
    return (sl_header){{n, strlen(n)}, {v, strlen(v)}};
}

static sl_str S(const char *s) { return (sl_str){s, strlen(s)}; }

static json_t *policy(json_t *j, const char *name) {
    json_t *a = json_object_get(j, "policies");
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *p = json_array_get(a, i);
        if (strcmp(json_string_value(json_object_get(p, "policy")), name) == 0) return p;
    }
    T_FAIL("policy %s not in the explanation", name);
    return NULL;
}

static const char *sget(json_t *o, const char *path) {
    /* "a.b.c": objects only */
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *cur = o;
    for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && cur; k = strtok_r(NULL, ".", &save))
        cur = json_object_get(cur, k);
    return cur && json_is_string(cur) ? json_string_value(cur) : NULL;
}

static long long iget(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return v && json_is_integer(v) ? (long long)json_integer_value(v) : -12345;
}

/* ---- cases ------------------------------------------------------------------------------ */

static void matched_unmatched_and_why(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    sl_header h[] = {H("x-api-key", "alice")};
    sl_request r = {.method = S("GET"), .path = S("/t/../login?x=1"), .host = S("api.other.org"),
                    .client_ip = S("10.0.0.1"), .headers = h, .n_headers = 1};
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    json_t *api = policy(j, "api"), *login = policy(j, "login"), *guard = policy(j, "guard"),
           *beta = policy(j, "beta");
    T_CHECK(json_is_true(json_object_get(api, "matched")));
    T_CHECK(json_is_false(json_object_get(login, "matched")));
    /* the method decided, and the request's own method is named */
    T_EQ_S(sget(login, "why"), "method GET is not POST");
    T_CHECK(json_is_false(json_object_get(guard, "matched")));
    T_EQ_S(sget(guard, "why"), "host api.other.org does not match *.example.com");
    T_CHECK(strstr(sget(beta, "why"), "header x-beta") != NULL);
    /* the path as policies see it: normalised, query cut */
    T_EQ_S(sget(j, "request.path"), "/login");
    T_EQ_S(sget(j, "answer.action"), "allow");
    T_EQ_S(sget(api, "result"), "allowed");
    json_decref(j);

    sl_request r2 = {.method = S("POST"), .path = S("/login"), .client_ip = S("10.0.0.1")};
    j = run(&f, sl_explain_request(f.e, &r2), false, NULL);
    login = policy(j, "login");
    T_CHECK(json_is_true(json_object_get(login, "matched")));
    T_CHECK(strstr(sget(login, "why"), "method POST") != NULL);
    T_CHECK(strstr(sget(login, "why"), "path matches /login exactly") != NULL);
    json_decref(j);
    fx_close(&f);
}

static void key_fallback_and_hashes(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    sl_request r = {.method = S("GET"), .path = S("/a"), .client_ip = S("192.0.2.7")};
    char *text = NULL;
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, &text);
    json_t *key = json_object_get(policy(j, "api"), "key");
    T_CHECK(json_is_true(json_object_get(key, "fallback")));
    T_EQ_I(iget(key, "chain"), 1);
    json_t *ch = json_object_get(key, "chains");
    T_EQ_S(sget(json_array_get(ch, 0), "status"), "incomplete");
    T_EQ_S(sget(json_array_get(ch, 0), "missing"), "header.x-api-key");
    T_EQ_S(sget(json_array_get(ch, 1), "status"), "used");
    const char *h = sget(key, "hash");
    T_CHECK(h != NULL && strncmp(h, "k:", 2) == 0 && strlen(h) == 18);
    T_CHECK(json_object_get(key, "raw") == NULL);
    T_CHECK(text && strstr(text, "192.0.2.7") == NULL); /* the address is a key: hashed */
    free(text);
    json_decref(j);
    /* with raw keys: the composed key as text */
    j = run(&f, sl_explain_request(f.e, &r), true, &text);
    T_EQ_S(sget(json_object_get(policy(j, "api"), "key"), "raw"), "192.0.2.7");
    free(text);
    json_decref(j);
    /* the same key hashes the same way every time (logs and /v1/top agree) */
    sl_header hh[] = {H("x-api-key", "k1")};
    sl_request r2 = {.method = S("GET"), .path = S("/a"), .headers = hh, .n_headers = 1};
    json_t *a = run(&f, sl_explain_request(f.e, &r2), false, NULL);
    json_t *b = run(&f, sl_explain_request(f.e, &r2), false, NULL);
    T_EQ_S(sget(json_object_get(policy(a, "api"), "key"), "hash"),
           sget(json_object_get(policy(b, "api"), "key"), "hash"));
    T_CHECK(json_is_false(json_object_get(json_object_get(policy(a, "api"), "key"), "fallback")));
    json_decref(a);
    json_decref(b);
    fx_close(&f);
}

static void missing_key(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    /* api needs x-api-key, else the client address: neither is there */
    sl_request r = {.method = S("GET"), .path = S("/a")};
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    json_t *api = policy(j, "api");
    T_EQ_S(sget(api, "result"), "missing_key");
    T_CHECK(json_is_true(json_object_get(json_object_get(api, "key"), "missing")));
    T_EQ_S(sget(json_object_get(api, "key"), "when_missing"), "reject (400)");
    T_EQ_S(sget(j, "answer.action"), "reject");
    T_EQ_I(iget(json_object_get(j, "answer"), "status"), 400);
    T_EQ_S(sget(j, "answer.policy"), "api");
    json_decref(j);
    fx_close(&f);
}

static void costs_and_sources(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    sl_header h[] = {H("x-api-key", "alice")};
    sl_request r = {.method = S("POST"), .path = S("/export"), .headers = h, .n_headers = 1};
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    json_t *c = json_object_get(policy(j, "api"), "cost");
    T_EQ_I(iget(c, "units"), 50);
    T_EQ_S(sget(c, "from"), "operation POST /export");
    json_decref(j);
    r.path = S("/other");
    j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    c = json_object_get(policy(j, "api"), "cost");
    T_EQ_I(iget(c, "units"), 1);
    T_EQ_S(sget(c, "from"), "default");
    json_decref(j);
    fx_close(&f);
}

static void plans(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    sl_header h[] = {H("x-tenant", "acme"), H("x-plan", "pro")};
    sl_request r = {.method = S("GET"), .path = S("/t/x"), .headers = h, .n_headers = 2};
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    json_t *t = policy(j, "tenant");
    T_EQ_S(sget(t, "plan"), "pro");
    json_t *w = json_array_get(json_object_get(t, "windows"), 0);
    T_EQ_S(sget(w, "window"), "50/min");
    T_EQ_I(iget(w, "limit"), 50);
    json_decref(j);
    r.n_headers = 1; /* no plan header: the default windows */
    j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    t = policy(j, "tenant");
    T_CHECK(json_is_null(json_object_get(t, "plan")));
    T_EQ_S(sget(json_array_get(json_object_get(t, "windows"), 0), "window"), "5/min");
    json_decref(j);
    fx_close(&f);
}

/* Exhaust a window, then explain: the state is read, the answer is a rejection naming
 * the window; and nothing the explanations did shows in the state afterwards. */
static void state_answer_and_nothing_consumed(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    sluice_time now = sluice_clock_now(f.clk);
    sl_request r = {.method = S("POST"), .path = S("/login"), .client_ip = S("10.9.9.9")};
    sl_verdict v;
    for (int i = 0; i < 2; i++) sl_engine_check(f.e, &r, now, &v);
    for (int k = 0; k < 5; k++) {
        json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
        json_t *w = json_array_get(json_object_get(policy(j, "login"), "windows"), 0);
        T_EQ_I(iget(w, "remaining"), 1); /* 3 - 2, whatever the explanations before */
        T_CHECK(json_is_true(json_object_get(w, "would_admit")));
        T_CHECK(json_is_false(json_object_get(j, "consumed")));
        json_decref(j);
    }
    T_EQ_I(sl_engine_check(f.e, &r, now, &v), SLUICE_OK);
    T_EQ_I(v.action, SL_ALLOW); /* the third of 3: explanations took nothing */
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    json_t *login = policy(j, "login");
    T_EQ_S(sget(login, "result"), "limited");
    T_CHECK(json_is_false(json_object_get(json_array_get(json_object_get(login, "windows"), 0),
                                          "would_admit")));
    T_EQ_S(sget(j, "answer.action"), "reject");
    T_EQ_S(sget(j, "answer.deciding.policy"), "login");
    T_EQ_S(sget(j, "answer.deciding.window"), "3/min");
    json_decref(j);
    T_EQ_I(sl_engine_check(f.e, &r, now, &v), SLUICE_OK);
    T_EQ_I(v.action, SL_REJECT); /* what the explanation said */
    /* explaining never created a key: an unseen key stays unseen */
    sluice_store_stats before, after;
    sluice_store_stats_get(f.st, &before);
    sl_request fresh = {.method = S("POST"), .path = S("/login"), .client_ip = S("10.1.1.1")};
    json_decref(run(&f, sl_explain_request(f.e, &fresh), false, NULL));
    sluice_store_stats_get(f.st, &after);
    T_EQ_U(after.keys, before.keys);
    fx_close(&f);
}

static void shadow_and_rollout(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    sluice_time now = sluice_clock_now(f.clk);
    sl_header h[] = {H("x-api-key", "a")};
    sl_request r = {.method = S("GET"), .path = S("/"), .host = S("www.example.com"),
                    .headers = h, .n_headers = 1};
    sl_verdict v;
    for (int i = 0; i < 3; i++) sl_engine_check(f.e, &r, now, &v); /* guard: 2/min, shadow */
    T_CHECK(v.shadow_limited && v.action == SL_ALLOW);
    json_t *j = run(&f, sl_explain_request(f.e, &r), false, NULL);
    json_t *g = policy(j, "guard");
    T_EQ_S(sget(g, "mode"), "shadow");
    T_EQ_S(sget(g, "result"), "shadow_limited");
    T_EQ_S(sget(j, "answer.action"), "allow"); /* a shadow policy never rejects */
    json_decref(j);
    /* rollout 50 %: some users are in, some out; out of it a limit is rollout_limited */
    int in = 0, out = 0;
    for (int u = 0; u < 40; u++) {
        char user[16];
        snprintf(user, sizeof(user), "u%d", u);
        sl_header hb[] = {H("x-beta", "yes"), H("x-user", user), H("x-api-key", user)};
        sl_request rb = {.method = S("GET"), .path = S("/"), .headers = hb, .n_headers = 3};
        for (int i = 0; i < 2; i++) sl_engine_check(f.e, &rb, now, &v);
        j = run(&f, sl_explain_request(f.e, &rb), false, NULL);
        json_t *b = policy(j, "beta");
        T_EQ_S(sget(b, "mode"), "rollout 50%");
        bool inr = json_is_true(json_object_get(b, "in_rollout"));
        T_EQ_S(sget(b, "result"), inr ? "limited" : "rollout_limited");
        in += inr;
        out += !inr;
        json_decref(j);
    }
    T_CHECK(in > 5 && out > 5);
    fx_close(&f);
}

static void named_form_and_unknown_policy(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    json_t *j = run(&f, sl_explain_named(f.e, "login", "bob", 3, true, 2), false, NULL);
    json_t *p = policy(j, "login");
    T_EQ_S(sget(p, "why"), "named explicitly (policy and key given)");
    T_EQ_I(iget(json_object_get(p, "cost"), "units"), 2);
    T_EQ_I(json_array_size(json_object_get(j, "policies")), 1);
    json_decref(j);
    j = run(&f, sl_explain_named(f.e, "nope", "bob", 3, false, 0), false, NULL);
    T_EQ_S(sget(j, "answer.action"), "error");
    T_EQ_I(iget(json_object_get(j, "answer"), "status"), 404);
    json_decref(j);
    fx_close(&f);
}

/* ---- effective config, differences, names --------------------------------------------- */

static void policies_json(void) {
    fx f;
    if (!fx_open(&f, CONFIG)) return;
    size_t len;
    char *s = sl_engine_policies_json(f.e, "conf.yaml", &len);
    json_t *a = s ? json_loads(s, 0, NULL) : NULL;
    T_CHECK(json_is_array(a) && json_array_size(a) == 5);
    json_t *api = json_array_get(a, 0);
    T_EQ_S(sget(api, "name"), "api");
    T_EQ_S(sget(api, "source"), "conf.yaml:2");
    json_t *w = json_array_get(json_object_get(api, "windows"), 0);
    T_EQ_S(sget(w, "rate"), "10/s");
    T_EQ_I(iget(w, "burst"), 100);
    T_EQ_S(sget(w, "source"), "conf.yaml:9");
    T_EQ_S(sget(json_array_get(a, 3), "mode"), "shadow");
    T_EQ_S(sget(json_array_get(a, 4), "mode"), "rollout");
    T_EQ_I(iget(json_array_get(a, 4), "rollout_percent"), 50);
    json_t *plans = json_object_get(json_array_get(a, 2), "plans");
    T_EQ_S(sget(json_array_get(plans, 0), "name"), "pro");
    T_EQ_S(sget(json_array_get(a, 1), "scope.path"), "/login");
    json_decref(a);
    free(s);
    fx_close(&f);
}

static void config_diff(void) {
    sl_config *a = load(CONFIG);
    char *b_text = malloc(strlen(CONFIG) + 200);
    strcpy(b_text, CONFIG);
    /* api: burst 100 -> 200; guard: shadow -> enforce; login removed; new policy */
    char *p = strstr(b_text, "burst: 100");
    memcpy(p, "burst: 200", 10);
    p = strstr(b_text, "    mode: shadow\n");
    memmove(p, p + 17, strlen(p + 17) + 1);
    p = strstr(b_text, "  - name: login\n");
    char *end = strstr(p, "  - name: tenant\n");
    memmove(p, end, strlen(end) + 1);
    strcat(b_text, "  - name: extra\n    objective: cost\n    key: []\n    algorithm: gcra\n"
                   "    limits: [ { rate: 1/s } ]\n");
    sl_config *b = load(b_text);
    sl_config_diff d;
    T_EQ_I(sl_config_diff_make(a, b, &d), SLUICE_OK);
    T_EQ_U(d.nadded, 1);
    T_EQ_S(d.added[0], "extra");
    T_EQ_U(d.nremoved, 1);
    T_EQ_S(d.removed[0], "login");
    T_EQ_U(d.nchanged, 2);
    T_EQ_S(d.changed[0].policy, "api");
    T_EQ_S(d.changed[0].how,
           "limits: 10/s burst 100 (token_bucket), 1000/min (token_bucket) -> 10/s burst 200 "
           "(token_bucket), 1000/min (token_bucket)");
    T_EQ_S(d.changed[1].policy, "guard");
    T_EQ_S(d.changed[1].how, "mode: shadow -> enforce");
    sl_config_diff_free(&d);
    /* from nothing: every policy is added; to itself: nothing changed */
    T_EQ_I(sl_config_diff_make(NULL, a, &d), SLUICE_OK);
    T_EQ_U(d.nadded, 5);
    sl_config_diff_free(&d);
    T_EQ_I(sl_config_diff_make(a, a, &d), SLUICE_OK);
    T_EQ_U(d.nadded + d.nremoved + d.nchanged, 0);
    sl_config_diff_free(&d);
    sl_config_destroy(a);
    sl_config_destroy(b);
    free(b_text);
}

/* Capacity protection is named in a reload's changes (it read "changed=0" when classes or
 * a penalty were added). */
static void config_diff_capacity(void) {
    static const char plain[] =
        "policies:\n"
        "  - name: backend\n    key: []\n    algorithm: concurrency\n    limits: [ { max: 100 } ]\n"
        "  - name: login\n    key: [header.x-user]\n    algorithm: fixed_window\n"
        "    limits: [ { rate: 5/min } ]\n";
    static const char shed[] =
        "policies:\n"
        "  - name: backend\n    key: []\n    algorithm: concurrency\n    limits: [ { max: 100 } ]\n"
        "    priority_from: header.x-priority\n"
        "    classes:\n      - { name: critical, reserve: 20% }\n      - { name: default, fill: 90% }\n"
        "  - name: login\n    key: [header.x-user]\n    algorithm: fixed_window\n"
        "    limits: [ { rate: 5/min } ]\n"
        "    on_exceed: { penalty: { first: 1m, factor: 2, max: 1h, forgive_after: 24h } }\n";
    sl_config *a = load(plain), *b = load(shed);
    sl_config_diff d;
    T_EQ_I(sl_config_diff_make(a, b, &d), SLUICE_OK);
    T_EQ_U(d.nchanged, 2);
    if (d.nchanged == 2) {
        T_EQ_S(d.changed[0].policy, "backend");
        T_EQ_S(d.changed[0].how, "capacity: none -> classes from header.x-priority critical (fill "
                                 "100%, reserve 20%), default (fill 90%); missing: default");
        T_EQ_S(d.changed[1].policy, "login");
        T_EQ_S(d.changed[1].how, "capacity: none -> penalty first 1min, factor 2.00, max 1h, "
                                 "forgive after 1day, challenge levels 0");
    }
    sl_config_diff_free(&d);
    sl_config_destroy(a);
    sl_config_destroy(b);
}

static void window_names(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: a\n    objective: cost\n    key: []\n    algorithm: token_bucket\n"
                     "    limits: [ {rate: 10/s, burst: 20}, {rate: 100/5m}, {rate: 1000/min} ]\n"
                     "  - name: q\n    objective: cost\n    key: []\n    algorithm: quota\n"
                     "    limits: [ {quota: 50000/day, tz: Europe/Madrid} ]\n"
                     "  - name: c\n    objective: protection\n    key: []\n"
                     "    algorithm: concurrency\n    limits: [ {max: 10, lease: 30s} ]\n"))
        return;
    const sl_window_info *w[64];
    size_t n = sl_engine_windows(f.e, w, 64);
    T_EQ_U(n, 5 + 7); /* 5 windows and the 7 Envoy override units (SECOND..YEAR, WEEK) */
    const char *want[] = {"10/s", "100/5min", "1000/min", "50000/day", "10 concurrent"};
    for (size_t i = 0; i < 5; i++) {
        char b[48];
        sl_window_describe(w[i], b, sizeof(b));
        T_EQ_S(b, want[i]);
    }
    char b[48];
    sl_window_describe(w[5], b, sizeof(b));
    T_EQ_S(b, "override/second");
    sl_window_meta m;
    sl_window_meta_get(w[0], &m);
    T_EQ_S(m.policy, "a");
    T_CHECK(!m.shadow && m.rollout_pct == 100 && !m.fail_closed);
    fx_close(&f);
}

static void key_text(void) {
    /* prepare.c's encoding: chain byte, then tag, 2-byte length, bytes */
    const unsigned char k[] = {1, 'i', 0, 4, 10, 0, 0, 1, 'h', 0, 3, 'a', 'b', 'c'};
    char b[64];
    sl_key_text(k, sizeof(k), b, sizeof(b));
    T_EQ_S(b, "10.0.0.1|abc");
    const unsigned char named[] = {0xff, 'x', 0, 5, 'a', 'l', 'i', 'c', 'e'};
    sl_key_text(named, sizeof(named), b, sizeof(b));
    T_EQ_S(b, "alice");
    sl_key_text(k, sizeof(k), b, 5); /* cut to fit, NUL-terminated */
    T_EQ_S(b, "10.0");
    char h1[19], h2[19];
    sl_hash_key hk = {1, 2};
    sl_key_hash_text(&hk, "alice", 5, h1);
    sl_key_hash_text(&hk, "alicf", 5, h2);
    T_CHECK(strcmp(h1, h2) != 0 && strlen(h1) == 18);
}

int main(void) {
    T_RUN(matched_unmatched_and_why);
    T_RUN(key_fallback_and_hashes);
    T_RUN(missing_key);
    T_RUN(costs_and_sources);
    T_RUN(plans);
    T_RUN(state_answer_and_nothing_consumed);
    T_RUN(shadow_and_rollout);
    T_RUN(named_form_and_unknown_policy);
    T_RUN(policies_json);
    T_RUN(config_diff);
    T_RUN(config_diff_capacity);
    T_RUN(window_names);
    T_RUN(key_text);
    return T_DONE();
}
