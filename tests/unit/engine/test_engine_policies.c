/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_policies.c -- policies end to end: YAML -> engine -> memory store on a
 * manual clock. Each case is something a user relies on: the validation plan's token
 * bucket, fallback keys, all-or-nothing across windows and across rules, plans,
 * per-operation and settled costs, shadow and rollout, delay, reload, failure modes.
 */
#include <stdarg.h>

#include "engine/engine.h"
#include "t.h"

#define MS SLUICE_NS_PER_MS
#define SEC SLUICE_NS_PER_S

typedef struct fx {
    sluice_clock *clk;
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static sl_config *load(const char *yaml) {
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    int rc = sl_config_load_buffer(yaml, strlen(yaml), "test.yaml", &cfg, &dl);
    if (rc != SLUICE_OK) {
        char line[600];
        for (size_t i = 0; i < dl.n; i++) {
            sl_diag_format(&dl, i, line, sizeof(line));
            fprintf(stderr, "  %s\n", line);
        }
        T_FAIL("config did not load: %s", sluice_strerror(rc));
    }
    return cfg;
}

static bool fx_open_store(fx *f, const char *yaml, const sluice_store_options *opt) {
    memset(f, 0, sizeof(*f));
    f->clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC); /* 2026-01-01 UTC */
    int err = 0;
    static const uint8_t seed[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    sluice_store_options o = opt ? *opt : (sluice_store_options){0};
    o.seed = seed;
    f->st = sluice_store_create(&o, &err);
    f->cfg = load(yaml);
    if (f->cfg == NULL || f->st == NULL) return false;
    char msg[256];
    f->e = sl_engine_create(f->cfg, f->st, &err, msg, sizeof(msg));
    if (f->e == NULL) T_FAIL("engine: %s", msg);
    return f->e != NULL;
}

static bool fx_open(fx *f, const char *yaml) { return fx_open_store(f, yaml, NULL); }

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
    sluice_clock_destroy(f->clk);
}

static sluice_time now(fx *f) { return sluice_clock_now(f->clk); }
static void adv(fx *f, int64_t ns) { sluice_clock_advance(f->clk, ns); }

static sl_str S(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

typedef struct treq {
    sl_header h[8];
    sl_request r;
} treq;

/* A request: method, path, client ip, then header name/value pairs, NULL-terminated. */
static const sl_request *R(treq *t, const char *m, const char *p, const char *ip, ...) {
    memset(t, 0, sizeof(*t));
    t->r.method = S(m);
    t->r.path = S(p);
    t->r.client_ip = S(ip);
    va_list ap;
    va_start(ap, ip);
    size_t n = 0;
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL && n < 8) {
        t->h[n].name = S(name);
        t->h[n].value = S(va_arg(ap, const char *));
        n++;
    }
    va_end(ap);
    t->r.headers = t->h;
    t->r.n_headers = n;
    return &t->r;
}

static sl_verdict V; /* big: keep it off the stack */

static const sl_verdict_item *item(const sl_verdict *v, const char *name) {
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->items[i].info->name, name) == 0) return &v->items[i];
    return NULL;
}

static uint64_t remaining(const sl_verdict *v, const char *name) {
    const sl_verdict_item *it = item(v, name);
    if (it == NULL) {
        T_FAIL("no item %s", name);
        return UINT64_MAX;
    }
    return it->result.remaining;
}

/* Peeks a named window without consuming: the explicit form with cost 0. */
static uint64_t peek_named(fx *f, const char *policy, const char *key, const char *window) {
    sl_engine_check_named(f->e, policy, key, strlen(key), true, 0, now(f), &V);
    return remaining(&V, window);
}

static const char *API =
    "policies:\n"
    "  - name: api\n"
    "    objective: fairness\n"
    "    key: [header.x-api-key]\n"
    "    on_missing_key: { use: [client_ip/64] }\n"
    "    algorithm: token_bucket\n"
    "    limits: [ { rate: 10/s, burst: 20 } ]\n";

/* Validation plan 2: a burst of 30 after idle admits exactly 20; the rest are rejected
 * with an exact Retry-After (one token every 100 ms). */
static void burst_after_idle(void) {
    fx f;
    if (!fx_open(&f, API)) return;
    treq t;
    int admitted = 0;
    for (int i = 0; i < 30; i++) {
        T_EQ_I(sl_engine_check(f.e, R(&t, "GET", "/", "10.0.0.1", "x-api-key", "k1", NULL),
                               now(&f), &V), SLUICE_OK);
        if (V.action == SL_ALLOW) admitted++;
        else {
            T_EQ_I(V.action, SL_REJECT);
            T_EQ_I(V.status, 429);
            T_EQ_I(V.retry_after_ns, 100 * MS);
            T_EQ_S(V.items[V.deciding].info->name, "api");
        }
    }
    T_EQ_I(admitted, 20);
    adv(&f, 100 * MS);
    sl_engine_check(f.e, R(&t, "GET", "/", "10.0.0.1", "x-api-key", "k1", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    fx_close(&f);
}

/* Validation plan 1 and 3: 8 req/s for 30 s is never limited, and 4 identities are
 * limited independently. */
static void steady_and_independent(void) {
    fx f;
    if (!fx_open(&f, API)) return;
    treq t;
    int rejected = 0;
    for (int i = 0; i < 240; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", "10.0.0.1", "x-api-key", "steady", NULL), now(&f),
                        &V);
        if (V.action != SL_ALLOW) rejected++;
        adv(&f, 125 * MS);
    }
    T_EQ_I(rejected, 0);
    const char *keys[4] = {"a", "b", "c", "d"};
    for (int k = 0; k < 4; k++) {
        int ok = 0;
        for (int i = 0; i < 25; i++) {
            sl_engine_check(f.e, R(&t, "GET", "/", "10.0.0.1", "x-api-key", keys[k], NULL),
                            now(&f), &V);
            ok += V.action == SL_ALLOW;
        }
        T_EQ_I(ok, 20);
    }
    fx_close(&f);
}

/* Requests without the API key fall back to the client address: separate buckets per
 * address, one bucket per IPv6 /64, and an API key equal to an address text does not
 * share its bucket. */
static void fallback_keys(void) {
    fx f;
    if (!fx_open(&f, API)) return;
    treq t;
    for (int i = 0; i < 20; i++)
        sl_engine_check(f.e, R(&t, "GET", "/", "2001:db8:1:2::1", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(V.items[0].result.remaining, 0);
    /* same /64, other host: the same bucket */
    sl_engine_check(f.e, R(&t, "GET", "/", "2001:db8:1:2:ffff::9", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_REJECT);
    /* another /64: a fresh bucket */
    sl_engine_check(f.e, R(&t, "GET", "/", "2001:db8:1:3::1", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(V.items[0].result.remaining, 19);
    /* an API key that reads like the exhausted address is its own client */
    sl_engine_check(f.e, R(&t, "GET", "/", "2001:db8:1:2::1", "x-api-key", "2001:db8:1:2::1", NULL),
                    now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    /* an empty key is missing, not a shared "" bucket */
    sl_engine_check(f.e, R(&t, "GET", "/", "2001:db8:1:2::7", "x-api-key", "", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_REJECT);
    fx_close(&f);
}

static void missing_key_skip_and_reject(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: per-user, objective: fairness, key: [header.x-user],\n"
                     "      on_missing_key: skip, algorithm: gcra, limits: [{rate: 1/s}] }\n"
                     "  - { name: per-tenant, objective: fairness, key: [header.x-tenant],\n"
                     "      match: { path_prefix: /t/ },\n"
                     "      on_missing_key: reject, algorithm: gcra, limits: [{rate: 1/s}] }\n"))
        return;
    treq t;
    sl_engine_check(f.e, R(&t, "GET", "/x", "10.0.0.1", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(V.n, 0); /* skipped: nothing counted */
    sl_engine_check(f.e, R(&t, "GET", "/t/1", "10.0.0.1", "x-user", "u", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_I(V.status, 400);
    T_EQ_S(V.missing_key_policy, "per-tenant");
    /* the problem body states the status actually sent, also when a gateway asks for 403 */
    char body[1024];
    T_CHECK(sl_render_problem(&V, NULL, body, sizeof(body)) > 0);
    T_CHECK(strstr(body, "\"title\":\"Bad Request\",\"status\":400") != NULL);
    V.status = 403;
    T_CHECK(sl_render_problem(&V, NULL, body, sizeof(body)) > 0);
    T_CHECK(strstr(body, "\"title\":\"Forbidden\",\"status\":403") != NULL);
    V.status = 400;
    /* nothing was consumed from per-user by the rejected request */
    sl_engine_check(f.e, R(&t, "GET", "/x", "10.0.0.1", "x-user", "u", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    fx_close(&f);
}

/* 3 windows on one rule: a rejection by one consumes nothing from the others. */
static void multi_window_all_or_nothing(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: w\n"
                     "    objective: fairness\n"
                     "    key: [header.x-k]\n"
                     "    algorithm: token_bucket\n"
                     "    limits:\n"
                     "      - { name: w-burst, rate: 10/s, burst: 20 }\n"
                     "      - { name: w-min, rate: 30/min, burst: 30 }\n"
                     "      - { name: w-day, quota: 50000/day, tz: Europe/Madrid }\n"))
        return;
    treq t;
    for (int i = 0; i < 20; i++)
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(remaining(&V, "w-min"), 10);
    T_EQ_U(remaining(&V, "w-day"), 49980);
    for (int i = 0; i < 5; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
        T_EQ_I(V.action, SL_REJECT);
        T_EQ_S(V.items[V.deciding].info->name, "w-burst");
    }
    /* the rejected requests took nothing from the minute and day windows */
    T_EQ_U(remaining(&V, "w-min"), 10);
    T_EQ_U(remaining(&V, "w-day"), 49980);
    /* 2 s later the burst is back but the minute window rejects after 10 more */
    adv(&f, 2 * SEC);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 11); /* 10 left + 1 refilled (30/min = one per 2 s) */
    T_EQ_S(V.items[V.deciding].info->name, "w-min");
    T_EQ_U(remaining(&V, "w-day"), 49969);
    fx_close(&f);
}

/* global, tenant, user: the user's rejection consumes nothing from tenant or global. */
static void hierarchy_all_or_nothing(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: global, objective: protection, key: [], algorithm: gcra,\n"
                     "      limits: [{rate: 1000/s, burst: 1000}] }\n"
                     "  - { name: tenant, objective: fairness, key: [header.x-tenant],\n"
                     "      algorithm: gcra, limits: [{rate: 100/s, burst: 100}] }\n"
                     "  - { name: user, objective: fairness, key: [header.x-tenant, header.x-user],\n"
                     "      algorithm: gcra, limits: [{rate: 5/s, burst: 5}] }\n"))
        return;
    treq t;
    for (int i = 0; i < 5; i++)
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-tenant", "t1", "x-user", "u1", NULL),
                        now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(remaining(&V, "global"), 995);
    T_EQ_U(remaining(&V, "tenant"), 95);
    for (int i = 0; i < 10; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-tenant", "t1", "x-user", "u1", NULL),
                        now(&f), &V);
        T_EQ_I(V.action, SL_REJECT);
    }
    T_EQ_S(V.items[V.deciding].info->name, "user");
    /* another user of the same tenant sees the tenant and global budgets untouched */
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-tenant", "t1", "x-user", "u2", NULL), now(&f),
                    &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(remaining(&V, "global"), 994);
    T_EQ_U(remaining(&V, "tenant"), 94);
    T_EQ_U(remaining(&V, "user"), 4);
    /* on admission the deciding rule is the one nearest exhaustion */
    T_EQ_S(V.items[V.deciding].info->name, "user");
    /* key parts are length-prefixed: (t1, u2) differs from (t1u, 2) */
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-tenant", "t1u", "x-user", "2", NULL), now(&f),
                    &V);
    T_EQ_U(remaining(&V, "user"), 4);
    fx_close(&f);
}

static void plans_override_defaults(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: p\n"
                     "    objective: plan\n"
                     "    key: [header.x-k]\n"
                     "    algorithm: gcra\n"
                     "    limits: [{rate: 2/s, burst: 2}]\n"
                     "    plan_from: header.x-plan\n"
                     "    plans:\n"
                     "      pro: { limits: [{name: p-pro, rate: 10/s, burst: 10}] }\n"))
        return;
    treq t;
    int ok = 0;
    for (int i = 0; i < 12; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", "x-plan", "pro", NULL), now(&f), &V);
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 10);
    T_EQ_S(V.items[0].info->name, "p-pro");
    T_EQ_S(V.items[0].info->plan, "pro");
    /* an unknown plan or none: the defaults */
    ok = 0;
    for (int i = 0; i < 5; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "b", "x-plan", "gold", NULL), now(&f),
                        &V);
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 2);
    T_EQ_S(V.items[0].info->name, "p");
    fx_close(&f);
}

static void per_operation_and_attribute_costs(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: c\n"
                     "    objective: cost\n"
                     "    key: [header.x-k]\n"
                     "    cost: { default: 1, \"POST /export\": 50, \"GET /reports/*\": 5,\n"
                     "            from: header.x-cost }\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 100/min}]\n"))
        return;
    treq t;
    sl_engine_check(f.e, R(&t, "POST", "/export", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_U(V.items[0].cost, 50);
    T_EQ_U(V.items[0].result.remaining, 50);
    sl_engine_check(f.e, R(&t, "GET", "/reports/2026?x=1", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 45);
    sl_engine_check(f.e, R(&t, "GET", "/other", NULL, "x-k", "a", "x-cost", "7", NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 38);
    sl_engine_check(f.e, R(&t, "GET", "/other", NULL, "x-k", "a", "x-cost", "junk", NULL), now(&f),
                    &V);
    T_EQ_U(V.items[0].result.remaining, 37); /* unparsable attribute: the default */
    /* an export no longer fits: rejected, nothing consumed */
    sl_engine_check(f.e, R(&t, "POST", "/export", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_REJECT);
    sl_engine_check(f.e, R(&t, "GET", "/x", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 36);
    fx_close(&f);
}

/* Reserve-then-settle: the estimate is consumed at check time and corrected after. */
static void settled_costs(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: tokens\n"
                     "    objective: cost\n"
                     "    key: [header.x-k]\n"
                     "    cost: { from: header.x-estimate, default: 100, settle: true, unit: tokens }\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 1000/min}]\n"))
        return;
    treq t;
    sl_engine_check(f.e, R(&t, "POST", "/chat", NULL, "x-k", "a", "x-estimate", "400", NULL),
                    now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(V.items[0].result.remaining, 600);
    T_CHECK(V.items[0].settle);
    T_EQ_I(sl_engine_settle(f.e, &V, 150, now(&f)), SLUICE_OK); /* refund 250 */
    T_EQ_U(peek_named(&f, "tokens", "unused", "tokens"), 1000);
    sl_engine_check(f.e, R(&t, "POST", "/chat", NULL, "x-k", "a", "x-estimate", "1", NULL),
                    now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 849);
    /* the token form: settle from another connection, charging more than reserved */
    char tok[SL_TOKEN_MAX];
    T_CHECK(sl_verdict_token(&V, tok, sizeof(tok)) > 2);
    T_EQ_I(sl_engine_settle_token(f.e, tok, strlen(tok), 301, now(&f)), SLUICE_OK);
    sl_engine_check(f.e, R(&t, "POST", "/chat", NULL, "x-k", "a", "x-estimate", "0", NULL),
                    now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 548); /* a client's 0 costs 1 */
    T_CHECK(sl_engine_settle_token(f.e, "t1;zz", 5, 1, now(&f)) != SLUICE_OK);
    /* a forged token (another cost, another key) is refused and refunds nothing */
    size_t tl = strlen(tok);
    tok[tl / 2] = tok[tl / 2] == 'A' ? 'B' : 'A'; /* change one character of the sealed text */
    T_EQ_I(sl_engine_settle_token(f.e, tok, tl, 0, now(&f)), SLUICE_EINVAL);
    sl_engine_check(f.e, R(&t, "POST", "/chat", NULL, "x-k", "a", "x-estimate", "0", NULL),
                    now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 547);
    fx_close(&f);
}

/* Settling touches only what was consumed: a shadow window that would have limited took
 * nothing, so nothing of it is refunded. */
static void settle_only_what_was_consumed(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: real, objective: cost, key: [header.x-k], algorithm: fixed_window,\n"
                     "      cost: {from: header.x-n, settle: true}, limits: [{rate: 1000/h}] }\n"
                     "  - { name: trial, objective: cost, key: [header.x-k], algorithm: fixed_window,\n"
                     "      cost: {from: header.x-n, settle: true}, limits: [{rate: 10/h}],\n"
                     "      mode: shadow }\n"))
        return;
    treq t;
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", "x-n", "8", NULL), now(&f), &V);
    T_CHECK(item(&V, "trial")->consumed);
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", "x-n", "8", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    T_CHECK(item(&V, "trial")->would_limit);
    T_CHECK(!item(&V, "trial")->consumed);
    T_CHECK(item(&V, "real")->consumed);
    T_EQ_I(sl_engine_settle(f.e, &V, 0, now(&f)), SLUICE_OK);
    /* a client-chosen 0 still costs 1 (it cannot turn its request into a peek) */
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", "x-n", "0", NULL), now(&f), &V);
    T_EQ_U(remaining(&V, "real"), 991);
    T_EQ_U(remaining(&V, "trial"), 1);
    fx_close(&f);
}

static void shadow_never_rejects(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: enforced, objective: protection, key: [header.x-k],\n"
                     "      algorithm: gcra, limits: [{rate: 10/s, burst: 10}] }\n"
                     "  - { name: trial, objective: protection, key: [header.x-k],\n"
                     "      algorithm: gcra, limits: [{rate: 3/s, burst: 3}], mode: shadow }\n"))
        return;
    treq t;
    int ok = 0, would = 0;
    for (int i = 0; i < 10; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
        ok += V.action == SL_ALLOW;
        would += V.shadow_limited;
    }
    T_EQ_I(ok, 10);
    T_EQ_I(would, 7);
    T_CHECK(item(&V, "trial")->shadow);
    T_CHECK(item(&V, "trial")->would_limit);
    T_EQ_S(V.items[V.deciding].info->name, "enforced");
    /* headers only describe enforced windows */
    char hdr[512];
    T_CHECK(sl_render_headers(&V, hdr, sizeof(hdr), 0) > 0);
    T_CHECK(strstr(hdr, "trial") == NULL);
    fx_close(&f);
}

/* Rollout 30%: each key is consistently in or out; about 30% of keys are enforced. */
static void rollout_by_key_hash(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: r, objective: protection, key: [header.x-k], algorithm: gcra,\n"
                     "      limits: [{rate: 1/min, burst: 1}], mode: {rollout: 30%} }\n"))
        return;
    treq t;
    int enforced = 0;
    for (int k = 0; k < 400; k++) {
        char key[16];
        snprintf(key, sizeof(key), "key-%d", k);
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", key, NULL), now(&f), &V);
        bool in = !V.items[0].shadow;
        T_EQ_I(V.action, SL_ALLOW);
        for (int rep = 0; rep < 3; rep++) {
            sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", key, NULL), now(&f), &V);
            T_EQ_I(!V.items[0].shadow, in); /* consistent */
            T_EQ_I(V.action, in ? SL_REJECT : SL_ALLOW);
            if (!in) T_CHECK(V.shadow_limited);
        }
        enforced += in;
    }
    T_CHECK(enforced > 90 && enforced < 150);
    fx_close(&f);
}

static void delay_bounded_else_reject(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: d, objective: protection, key: [header.x-k], algorithm: gcra,\n"
                     "      limits: [{rate: 2/s, burst: 1}], on_exceed: {delay: 600ms} }\n"))
        return;
    treq t;
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_DELAY);
    T_CHECK(V.recheck);
    T_EQ_I(V.delay_ns, 500 * MS);
    adv(&f, V.delay_ns);
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    fx_close(&f);

    if (!fx_open(&f, "policies:\n"
                     "  - { name: d, objective: protection, key: [header.x-k], algorithm: gcra,\n"
                     "      limits: [{rate: 1/s, burst: 1}], on_exceed: {delay: 600ms} }\n"))
        return;
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
    sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
    T_EQ_I(V.action, SL_REJECT); /* 1 s wait is beyond the 600 ms bound */
    T_EQ_I(V.retry_after_ns, SEC);
    fx_close(&f);
}

static void leaky_bucket_shapes(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: l, objective: protection, key: [], algorithm: leaky_bucket,\n"
                     "      limits: [{rate: 10/s, burst: 5, max_delay: 1s}] }\n"))
        return;
    treq t;
    bool delayed = false;
    for (int i = 0; i < 6; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, NULL), now(&f), &V);
        if (V.action == SL_DELAY) {
            delayed = true;
            T_CHECK(!V.recheck);
            T_CHECK(V.delay_ns > 0 && V.delay_ns <= SEC);
        }
    }
    T_CHECK(delayed);
    fx_close(&f);
}

/* A reload with an unchanged rule keeps its counters; a changed rule carries them over. */
static void reload_keeps_counters(void) {
    fx f;
    if (!fx_open(&f, API)) return;
    treq t;
    for (int i = 0; i < 15; i++)
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-api-key", "k", NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 5);
    sl_config *cfg2 = load(API);
    int err;
    char msg[200];
    sl_engine *e2 = sl_engine_create(cfg2, f.st, &err, msg, sizeof(msg));
    T_CHECK(e2 != NULL);
    if (e2 == NULL) return;
    sl_engine_check(e2, R(&t, "GET", "/", NULL, "x-api-key", "k", NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 4);
    /* the old engine can be dropped after the swap */
    sl_engine_destroy(f.e);
    sl_config_destroy(f.cfg);
    f.e = e2;
    f.cfg = cfg2;
    /* raise the burst: the client keeps what it had used, and gains the difference */
    const char *raised =
        "policies:\n"
        "  - name: api\n"
        "    objective: fairness\n"
        "    key: [header.x-api-key]\n"
        "    on_missing_key: { use: [client_ip/64] }\n"
        "    algorithm: token_bucket\n"
        "    limits: [ { rate: 10/s, burst: 40 } ]\n";
    sl_config *cfg3 = load(raised);
    sl_engine *e3 = sl_engine_create(cfg3, f.st, &err, msg, sizeof(msg));
    T_CHECK(e3 != NULL);
    if (e3 == NULL) return;
    sl_engine_check(e3, R(&t, "GET", "/", NULL, "x-api-key", "k", NULL), now(&f), &V);
    T_CHECK(V.action == SL_ALLOW);
    T_CHECK(V.items[0].result.remaining >= 4 && V.items[0].result.remaining < 39);
    sl_engine_destroy(e3);
    sl_config_destroy(cfg3);
    fx_close(&f);
}

/* Changing a quota mid-period: raised, the client keeps what it used (the rejected
 * requests never counted) and gets exactly the difference, other windows untouched;
 * lowered, the fraction used carries over. */
static void reload_changes_quota(void) {
    fx f;
    const char *v1 = "policies:\n"
                     "  - { name: q, objective: contract, key: [header.x-k],\n"
                     "      limits: [{quota: 10/day, tz: UTC}, {rate: 100/min, algorithm: fixed_window}] }\n";
    const char *v2 = "policies:\n"
                     "  - { name: q, objective: contract, key: [header.x-k],\n"
                     "      limits: [{quota: 20/day, tz: UTC}, {rate: 100/min, algorithm: fixed_window}] }\n";
    if (!fx_open(&f, v1)) return;
    treq t;
    int ok = 0;
    for (int i = 0; i < 13; i++) {
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 10);
    sl_config *cfg2 = load(v2);
    int err;
    sl_engine *e2 = cfg2 ? sl_engine_create(cfg2, f.st, &err, NULL, 0) : NULL;
    T_CHECK(e2 != NULL);
    if (e2 == NULL) return;
    ok = 0;
    for (int i = 0; i < 15; i++) {
        sl_engine_check(e2, R(&t, "GET", "/", NULL, "x-k", "a", NULL), now(&f), &V);
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 10);
    T_EQ_U(remaining(&V, "q.1"), 80); /* the unchanged minute window kept its 20 */
    sl_engine_destroy(e2);
    sl_config_destroy(cfg2);
    fx_close(&f);

    /* lowering keeps the units used, clamped to the new budget (issue 12: absolute usage,
     * so raise-then-revert is neutral): 10 of 20 used becomes 10 of 10 */
    const char *big = "policies:\n  - { name: q, objective: contract, key: [], "
                      "limits: [{quota: 20/day, tz: UTC}] }\n";
    const char *small = "policies:\n  - { name: q, objective: contract, key: [], "
                        "limits: [{quota: 10/day, tz: UTC}] }\n";
    if (!fx_open(&f, big)) return;
    for (int i = 0; i < 10; i++) sl_engine_check(f.e, R(&t, "GET", "/", NULL, NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 10);
    cfg2 = load(small);
    e2 = cfg2 ? sl_engine_create(cfg2, f.st, &err, NULL, 0) : NULL;
    T_CHECK(e2 != NULL);
    if (e2 == NULL) return;
    ok = 0;
    for (int i = 0; i < 8; i++) {
        sl_engine_check(e2, R(&t, "GET", "/", NULL, NULL), now(&f), &V);
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 0);
    sl_engine_destroy(e2);
    sl_config_destroy(cfg2);
    fx_close(&f);
}

static void explicit_form_and_concurrency(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: gpu, objective: protection, key: [header.x-k],\n"
                     "      algorithm: concurrency, limits: [{max: 2, lease: 30s}] }\n"
                     "  - { name: named, objective: fairness, key: [header.x-k], algorithm: gcra,\n"
                     "      limits: [{rate: 1/s, burst: 3}] }\n"))
        return;
    T_EQ_I(sl_engine_check_named(f.e, "nope", "k", 1, false, 0, now(&f), &V), SLUICE_ENOTFOUND);
    T_EQ_I(sl_engine_check_named(f.e, "named", "k", 1, true, 2, now(&f), &V), SLUICE_OK);
    T_EQ_U(V.items[0].result.remaining, 1);
    T_EQ_I(sl_engine_check_named(f.e, "named", "k", 1, true, 2, now(&f), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_REJECT);
    static sl_verdict a, b;
    T_EQ_I(sl_engine_acquire(f.e, "gpu", "t", 1, now(&f), &a), SLUICE_OK);
    T_EQ_I(sl_engine_acquire(f.e, "gpu", "t", 1, now(&f), &b), SLUICE_OK);
    T_EQ_I(a.action, SL_ALLOW);
    T_EQ_I(b.action, SL_ALLOW);
    T_CHECK(a.items[0].result.lease != 0);
    sl_engine_acquire(f.e, "gpu", "t", 1, now(&f), &V);
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_I(sl_engine_release(f.e, &a, now(&f)), SLUICE_OK);
    sl_engine_acquire(f.e, "gpu", "t", 1, now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    /* release by token, as /v1/release would */
    char tok[SL_TOKEN_MAX];
    T_CHECK(sl_verdict_token(&b, tok, sizeof(tok)) > 2);
    T_EQ_I(sl_engine_release_token(f.e, tok, strlen(tok), now(&f)), SLUICE_OK);
    sl_engine_acquire(f.e, "gpu", "t", 1, now(&f), &V);
    T_EQ_I(V.action, SL_ALLOW);
    /* a concurrency window renders as concurrent-requests */
    char hdr[512];
    sl_render_headers(&V, hdr, sizeof(hdr), 0);
    T_EQ_S(hdr, "RateLimit-Policy: \"gpu\";q=2;qu=\"concurrent-requests\"\r\n"
                "RateLimit: \"gpu\";r=0\r\n");
    fx_close(&f);
}

/* Store failure: fail-open policies admit, fail-closed ones answer 503. The store is
 * made to fail by refusing new keys once full. */
static void failure_modes(void) {
    fx f;
    sluice_store_options o = {.max_keys = 1, .on_full = SLUICE_REFUSE_NEW, .shards = 1};
    if (!fx_open_store(&f, "policies:\n"
                           "  - { name: open, objective: protection, key: [header.x-k],\n"
                           "      algorithm: gcra, limits: [{rate: 10/s}], on_store_error: open }\n"
                           "  - { name: closed, objective: protection, key: [header.x-c],\n"
                           "      on_missing_key: skip, algorithm: gcra, limits: [{rate: 10/s}],\n"
                           "      on_store_error: closed }\n",
                       &o))
        return;
    treq t;
    int fails = 0;
    for (int i = 0; i < 64 && fails == 0; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", key, NULL), now(&f), &V);
        T_EQ_I(V.action, SL_ALLOW);
        fails += V.store_error;
    }
    T_CHECK(fails > 0);
    T_EQ_I(V.error, SLUICE_EFULL);
    int closed = 0;
    for (int i = 0; i < 64 && closed == 0; i++) {
        char key[16];
        snprintf(key, sizeof(key), "c%d", i);
        sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "k0", "x-c", key, NULL), now(&f), &V);
        closed += V.action == SL_FAIL;
    }
    T_CHECK(closed > 0);
    T_EQ_I(V.status, 503);
    char body[1024];
    T_CHECK(sl_render_problem(&V, NULL, body, sizeof(body)) > 0);
    T_CHECK(strstr(body, "temporary-reduced-capacity") != NULL);
    T_CHECK(strstr(body, "\"violated-policies\":[\"closed\"]") != NULL);
    fx_close(&f);
}

static void matching_rules(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: m, objective: security, key: [], algorithm: gcra,\n"
                     "      limits: [{rate: 1/s}],\n"
                     "      match: { method: [POST, PUT], path: \"/api/*/items\", host: \"*.example.com\",\n"
                     "               headers: { x-env: \"prod*\", x-debug: { present: false } } } }\n"))
        return;
    treq t;
    struct {
        const char *m, *p, *host, *env, *dbg;
        bool hit;
    } cases[] = {
        {"POST", "/api/v1/items", "a.example.com", "production", NULL, true},
        {"PUT", "/api/v1/x/items?q=1", "A.Example.COM:8443", "prod", NULL, true},
        {"PUT", "/api/v1/items", "a.example.com.", "prod", NULL, true},
        {"GET", "/api/v1/items", "a.example.com", "prod", NULL, false},
        {"POST", "/api/v1/items/2", "a.example.com", "prod", NULL, false},
        {"POST", "/api/v1/items", "example.org", "prod", NULL, false},
        {"POST", "/api/v1/items", "a.example.com", "staging", NULL, false},
        {"POST", "/api/v1/items", "a.example.com", "prod", "1", false},
        {"POST", "/api/v1/items", "a.example.com", NULL, NULL, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        R(&t, cases[i].m, cases[i].p, NULL, NULL);
        size_t n = 0;
        if (cases[i].env) t.h[n++] = (sl_header){S("X-Env"), S(cases[i].env)};
        if (cases[i].dbg) t.h[n++] = (sl_header){S("x-debug"), S(cases[i].dbg)};
        t.r.n_headers = n;
        t.r.host = S(cases[i].host);
        sl_engine_check(f.e, &t.r, now(&f), &V);
        if ((V.n == 1) != cases[i].hit) T_FAIL("case %zu: matched %zu", i, V.n);
    }
    fx_close(&f);
}

/* A limit on a path holds for every spelling of that path. */
static void path_spellings(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: login, objective: security, key: [client_ip], algorithm: gcra,\n"
                     "      match: { method: POST, path: /api/login }, limits: [{rate: 1/min, burst: 8}] }\n"
                     "  - { name: by-path, objective: fairness, key: [path], algorithm: gcra,\n"
                     "      match: { path_prefix: /files/ }, limits: [{rate: 1/min, burst: 3}] }\n"))
        return;
    treq t;
    static const char *const same[] = {
        "/api/login", "//api//login", "/api/./login", "/api/x/../login", "/%61pi/%6Cogin",
        "/api/login?x=1", "/api/login#frag", "/x/../../api/login",
    };
    for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++) {
        sl_engine_check(f.e, R(&t, "POST", same[i], "10.0.0.1", NULL), now(&f), &V);
        if (V.n != 1) T_FAIL("%s did not match", same[i]);
        T_EQ_U(V.items[0].result.remaining, 7 - i);
    }
    static const char *const other[] = {"/api/login/", "/api/Login", "/api/login%2F", "/api%2Flogin"};
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
        sl_engine_check(f.e, R(&t, "POST", other[i], "10.0.0.1", NULL), now(&f), &V);
        if (V.n != 0) T_FAIL("%s matched", other[i]);
    }
    /* the path as a key part is the normalised one, reserved escapes kept */
    sl_engine_check(f.e, R(&t, "GET", "/files/a%2fb", NULL, NULL), now(&f), &V);
    sl_engine_check(f.e, R(&t, "GET", "/files/./a%2Fb", NULL, NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 1);
    sl_engine_check(f.e, R(&t, "GET", "/files/a/b", NULL, NULL), now(&f), &V);
    T_EQ_U(V.items[0].result.remaining, 2);
    fx_close(&f);
}

/* count_rejected: attempts made while limited still count (brute-force protection), so
 * only waiting for the window to end helps; without it they cost nothing. */
static void rejected_attempts_count_when_asked(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - { name: login, objective: security, key: [header.x-user], algorithm: fixed_window,\n"
                     "      on_missing_key: skip, limits: [{rate: 3/min}, {quota: 5/day}],\n"
                     "      count_rejected: true }\n"
                     "  - { name: api, objective: fairness, key: [header.x-k], algorithm: fixed_window,\n"
                     "      on_missing_key: skip, limits: [{rate: 3/min}, {quota: 5/day}] }\n"))
        return;
    treq t;
    int ok_login = 0, ok_api = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 4; i++) {
            sl_engine_check(f.e, R(&t, "POST", "/login", NULL, "x-user", "bob", NULL), now(&f), &V);
            ok_login += V.action == SL_ALLOW;
            sl_engine_check(f.e, R(&t, "GET", "/", NULL, "x-k", "bob", NULL), now(&f), &V);
            ok_api += V.action == SL_ALLOW;
        }
        adv(&f, 61 * SEC);
    }
    /* minute 1: 3 admitted, the 4th counted: the day (5) has 1 left; minute 2: 1 more,
     * then nothing for the rest of the day */
    T_EQ_I(ok_login, 4);
    T_EQ_I(ok_api, 5); /* 3 + 2 before the day quota ran out */
    fx_close(&f);
    /* only algorithms whose Retry-After cannot move */
    static sl_diag_list dl;
    sl_config *cfg = NULL;
    const char *bad = "policies:\n  - { name: a, objective: security, key: [], algorithm: gcra,\n"
                      "      limits: [{rate: 1/s}], count_rejected: true }\n";
    T_EQ_I(sl_config_load_buffer(bad, strlen(bad), "b.yaml", &cfg, &dl), SLUICE_EINVAL);
    T_CHECK(dl.n == 1 && strstr(dl.items[0].msg, "count_rejected needs fixed_window") != NULL);
}

int main(void) {
    T_RUN(rejected_attempts_count_when_asked);
    T_RUN(path_spellings);
    T_RUN(burst_after_idle);
    T_RUN(steady_and_independent);
    T_RUN(fallback_keys);
    T_RUN(missing_key_skip_and_reject);
    T_RUN(multi_window_all_or_nothing);
    T_RUN(hierarchy_all_or_nothing);
    T_RUN(plans_override_defaults);
    T_RUN(per_operation_and_attribute_costs);
    T_RUN(settled_costs);
    T_RUN(settle_only_what_was_consumed);
    T_RUN(shadow_never_rejects);
    T_RUN(rollout_by_key_hash);
    T_RUN(delay_bounded_else_reject);
    T_RUN(leaky_bucket_shapes);
    T_RUN(reload_keeps_counters);
    T_RUN(reload_changes_quota);
    T_RUN(explicit_form_and_concurrency);
    T_RUN(failure_modes);
    T_RUN(matching_rules);
    return T_DONE();
}
