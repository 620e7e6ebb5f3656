/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_embed_api.c -- the policy engine in sluice.h (issue 25; overrides, issue 21): load
 * errors as `config check` prints them, both decision forms and their answer (status,
 * header pairs, numbers), settle/release and tokens, reloads keeping counters (and a bad
 * reload changing nothing), overrides set/get/remove/iterate, decisions racing reloads on
 * several threads; that libsluice.so exports exactly the functions of the public headers
 * (nm -D against src/libsluice.map), and that examples/embed runs.
 * Uses sluice.h only (no internal header).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "sluice.h"
#include "t.h"

#define STR(s) ((sluice_str){(s), sizeof(s) - 1})
#define T0 (INT64_C(1767225600) * SLUICE_NS_PER_S)

static const char *CFG =
    "policies:\n"
    "  - name: api\n"
    "    objective: fairness\n"
    "    match: { path_prefix: /api/ }\n"
    "    key: [header.x-k]\n"
    "    algorithm: gcra\n"
    "    limits:\n"
    "      - { name: api-rate, rate: 3/min, burst: 3 }\n"
    "    plan_from: header.x-plan\n"
    "    plans:\n"
    "      gold:\n"
    "        limits:\n"
    "          - { name: api-gold, rate: 10/min, burst: 10 }\n"
    "  - name: work\n"
    "    objective: protection\n"
    "    match: { path_prefix: /work/ }\n"
    "    key: []\n"
    "    algorithm: concurrency\n"
    "    limits:\n"
    "      - { name: in-flight, max: 1, lease: 30s }\n"
    "  - name: tok\n"
    "    objective: cost\n"
    "    match: { path_prefix: /tok/ }\n"
    "    key: [header.x-k]\n"
    "    algorithm: token_bucket\n"
    "    cost: { from: header.x-cost, default: 100, settle: true, unit: tokens }\n"
    "    limits:\n"
    "      - { name: tok-min, rate: 1000/min, burst: 1000 }\n";

static sluice_time at(int64_t s) {
    sluice_time t = {SLUICE_NS_PER_S * (1 + s), T0 + s * SLUICE_NS_PER_S};
    return t;
}

static sluice_engine *load_cfg(const char *text) {
    int err = 1;
    char eb[1024];
    sluice_engine *e = sluice_engine_load_string(text, strlen(text), "t.yaml", &err, eb, sizeof(eb));
    if (e == NULL) T_FAIL("load: %d %s", err, eb);
    T_EQ_I(err, SLUICE_OK);
    return e;
}

static void test_load_errors(void) {
    int err = 0;
    char eb[1024];
    const char *bad = "policies:\n  - name: p\n    key: []\n    limits: [{rate: 3/min, burts: 2}]\n";
    sluice_engine *e = sluice_engine_load_string(bad, strlen(bad), "bad.yaml", &err, eb, sizeof(eb));
    T_CHECK(e == NULL);
    T_CHECK(err != SLUICE_OK);
    /* "file:line:col: message", as `sluice config check` prints it */
    T_CHECK(strncmp(eb, "bad.yaml:4:", 11) == 0);
    T_CHECK(strstr(eb, "burts") != NULL);
    e = sluice_engine_load_file("/nonexistent/sluice.yaml", &err, eb, sizeof(eb));
    T_CHECK(e == NULL);
    T_CHECK(strstr(eb, "/nonexistent/sluice.yaml") != NULL);
    const char *redis = "store: {type: redis, addr: 127.0.0.1:1}\npolicies:\n  - name: p\n"
                        "    key: []\n    algorithm: gcra\n    limits: [{rate: 3/min}]\n";
    e = sluice_engine_load_string(redis, strlen(redis), "r.yaml", &err, eb, sizeof(eb));
    T_CHECK(e == NULL);
    T_EQ_I(err, SLUICE_EINVAL);
    if (strstr(eb, "memory") == NULL) T_FAIL("%s", eb);
    T_CHECK(sluice_engine_load_string(NULL, 0, NULL, &err, NULL, 0) == NULL);
}

static const sluice_header *hdr(const sluice_answer *a, const char *name) {
    for (size_t i = 0; i < a->n_headers; i++)
        if (a->headers[i].name.len == strlen(name) &&
            memcmp(a->headers[i].name.p, name, a->headers[i].name.len) == 0)
            return &a->headers[i];
    return NULL;
}

static void test_decide_request(void) {
    sluice_engine *e = load_cfg(CFG);
    sluice_verdict *v = sluice_verdict_create();
    T_CHECK(v != NULL);
    if (e == NULL || v == NULL) return;
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_ERROR);
    sluice_header h[] = {{STR("X-K"), STR("alice")}};
    sluice_request r = {0};
    r.method = STR("GET");
    r.path = STR("/api/x");
    r.headers = h;
    r.n_headers = 1;
    const sluice_answer *a = NULL;
    for (int i = 0; i < 3; i++) {
        T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
        a = sluice_verdict_answer(v);
        T_EQ_I(a->action, SLUICE_ACTION_ALLOW);
        T_EQ_I(a->status, 200);
        T_EQ_U(a->remaining, (uint64_t)(2 - i));
    }
    T_EQ_U(a->limit, 3);
    T_EQ_S(a->policy, "api");
    T_EQ_S(a->window, "api-rate");
    T_EQ_I(a->n_windows, 1);
    T_CHECK(a->body.len == 0 && a->content_type == NULL);
    const sluice_header *p = hdr(a, "RateLimit-Policy");
    T_CHECK(p != NULL);
    if (p) T_CHECK(p->value.len == 19 && memcmp(p->value.p, "\"api-rate\";q=3;w=60", 19) == 0);
    T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
    a = sluice_verdict_answer(v);
    T_EQ_I(a->action, SLUICE_ACTION_REJECT);
    T_EQ_I(a->status, 429);
    T_EQ_I(a->retry_after_ns, 20 * SLUICE_NS_PER_S);
    T_EQ_U(a->remaining, 0);
    const sluice_header *ra = hdr(a, "Retry-After");
    T_CHECK(ra != NULL);
    if (ra) T_CHECK(ra->value.len == 2 && memcmp(ra->value.p, "20", 2) == 0);
    T_CHECK(a->body.len > 0 && strstr(a->body.p, "quota-exceeded") != NULL);
    T_EQ_S(a->content_type, "application/problem+json");
    /* another key, and a plan chosen by header */
    sluice_header h2[] = {{STR("x-k"), STR("bob")}, {STR("x-plan"), STR("gold")}};
    r.headers = h2;
    r.n_headers = 2;
    T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
    a = sluice_verdict_answer(v);
    T_EQ_I(a->action, SLUICE_ACTION_ALLOW);
    T_EQ_S(a->plan, "gold");
    T_EQ_U(a->limit, 10);
    /* nothing matches */
    r.path = STR("/other");
    T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
    a = sluice_verdict_answer(v);
    T_EQ_I(a->action, SLUICE_ACTION_ALLOW);
    T_CHECK(a->window == NULL);
    T_EQ_I(a->n_windows, 0);
    /* the policy/key form; an unknown policy */
    T_EQ_I(sluice_engine_decide_key(e, "api", "alice", 5, 0, 0, at(0), v), SLUICE_OK);
    T_EQ_U(sluice_verdict_answer(v)->remaining, 2);
    T_EQ_I(sluice_engine_decide_key(e, "api", "alice", 5, 1, 2, at(0), v), SLUICE_OK);
    T_EQ_U(sluice_verdict_answer(v)->remaining, 0);
    T_EQ_I(sluice_engine_decide_key(e, "nope", "x", 1, 0, 0, at(0), v), SLUICE_ENOTFOUND);
    T_EQ_I(sluice_verdict_answer(v)->status, 404);
    T_EQ_I(sluice_engine_decide(NULL, &r, at(0), v), SLUICE_EINVAL);
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_ERROR);
    T_CHECK(sluice_engine_store(e) != NULL);
    sluice_verdict_destroy(v);
    sluice_engine_destroy(e);
}

static void test_settle_release(void) {
    sluice_engine *e = load_cfg(CFG);
    sluice_verdict *v = sluice_verdict_create(), *w = sluice_verdict_create();
    if (e == NULL || v == NULL || w == NULL) return;
    sluice_request r = {0};
    r.path = STR("/work/1");
    T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_ALLOW);
    T_EQ_I(sluice_engine_decide(e, &r, at(0), w), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(w)->action, SLUICE_ACTION_REJECT); /* max 1 in flight */
    T_EQ_I(sluice_engine_release(e, v, at(1)), SLUICE_OK);
    T_EQ_I(sluice_engine_release(e, v, at(1)), SLUICE_ENOTFOUND); /* single use */
    T_EQ_I(sluice_engine_decide(e, &r, at(1), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_ALLOW);
    /* the same through a token, from another verdict's thread */
    char tok[SLUICE_TOKEN_MAX + 1];
    int tl = sluice_verdict_token(v, tok, sizeof(tok));
    T_CHECK(tl > 0);
    T_EQ_I(sluice_engine_release_token(e, tok, (size_t)tl, at(2)), SLUICE_OK);
    T_EQ_I(sluice_engine_release_token(e, tok, (size_t)tl, at(2)), SLUICE_ENOTFOUND);
    T_EQ_I(sluice_engine_release_token(e, "garbage", 7, at(2)), SLUICE_EINVAL);
    /* reserve-then-settle */
    sluice_header h[] = {{STR("x-k"), STR("t1")}, {STR("x-cost"), STR("400")}};
    r.path = STR("/tok/x");
    r.headers = h;
    r.n_headers = 2;
    T_EQ_I(sluice_engine_decide(e, &r, at(3), v), SLUICE_OK);
    T_EQ_U(sluice_verdict_answer(v)->remaining, 600);
    T_EQ_I(sluice_engine_settle(e, v, 50, at(3)), SLUICE_OK);
    T_EQ_I(sluice_engine_settle(e, v, 50, at(3)), SLUICE_ENOTFOUND);
    r.has_cost = 1; /* a peek */
    r.cost = 0;
    T_EQ_I(sluice_engine_decide(e, &r, at(3), w), SLUICE_OK);
    T_EQ_U(sluice_verdict_answer(w)->remaining, 950);
    r.has_cost = 0;
    T_EQ_I(sluice_engine_decide(e, &r, at(3), v), SLUICE_OK);
    tl = sluice_verdict_token(v, tok, sizeof(tok));
    T_CHECK(tl > 0);
    T_EQ_I(sluice_engine_settle_token(e, tok, (size_t)tl, 0, at(3)), SLUICE_OK);
    r.has_cost = 1;
    T_EQ_I(sluice_engine_decide(e, &r, at(3), w), SLUICE_OK);
    T_EQ_U(sluice_verdict_answer(w)->remaining, 950);
    /* nothing to settle: no token */
    T_EQ_I(sluice_engine_decide_key(e, "api", "x", 1, 0, 0, at(3), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_token(v, tok, sizeof(tok)), 0);
    sluice_verdict_destroy(v);
    sluice_verdict_destroy(w);
    sluice_engine_destroy(e);
}

static void test_reload(void) {
    sluice_engine *e = load_cfg(CFG);
    sluice_verdict *v = sluice_verdict_create();
    if (e == NULL || v == NULL) return;
    T_EQ_I(sluice_engine_decide_key(e, "api", "k", 1, 1, 2, at(0), v), SLUICE_OK);
    T_EQ_U(sluice_verdict_answer(v)->remaining, 1);
    char eb[1024];
    /* a bad reload changes nothing and says why */
    T_CHECK(sluice_engine_reload_string(e, "policies: 3\n", 12, "new.yaml", eb, sizeof(eb)) != SLUICE_OK);
    T_CHECK(strncmp(eb, "new.yaml:1:", 11) == 0);
    T_EQ_U(sluice_engine_generation(e), 0);
    /* the same window under a new burst keeps its counter; a new policy appears */
    char cfg2[4096];
    snprintf(cfg2, sizeof(cfg2), "%s"
             "  - name: extra\n    objective: fairness\n    key: []\n    algorithm: fixed_window\n"
             "    limits: [{name: ex, rate: 1/min}]\n", CFG);
    T_EQ_I(sluice_engine_reload_string(e, cfg2, strlen(cfg2), "new.yaml", eb, sizeof(eb)), SLUICE_OK);
    T_EQ_U(sluice_engine_generation(e), 1);
    T_EQ_I(sluice_engine_decide_key(e, "api", "k", 1, 1, 0, at(0), v), SLUICE_OK); /* a peek */
    T_EQ_U(sluice_verdict_answer(v)->remaining, 1);
    T_EQ_I(sluice_engine_decide_key(e, "extra", "", 0, 0, 0, at(0), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_ALLOW);
    /* a second reload frees the first generation (the verdict holds the current one) */
    T_EQ_I(sluice_engine_reload_string(e, CFG, strlen(CFG), "t.yaml", eb, sizeof(eb)), SLUICE_OK);
    T_EQ_I(sluice_engine_reload_string(e, CFG, strlen(CFG), "t.yaml", eb, sizeof(eb)), SLUICE_OK);
    T_EQ_I(sluice_engine_decide_key(e, "extra", "", 0, 0, 0, at(0), v), SLUICE_ENOTFOUND);
    T_EQ_I(sluice_engine_decide_key(e, "api", "k", 1, 1, 0, at(0), v), SLUICE_OK); /* a peek */
    T_EQ_U(sluice_verdict_answer(v)->remaining, 1);
    sluice_verdict_destroy(v);
    sluice_engine_destroy(e);
}

static int count_cb(void *ud, const sluice_override_info *o) {
    int *n = ud;
    (*n)++;
    return o->kind == SLUICE_OVERRIDE_BLOCK ? 1 : 0; /* stop at a block (order is the table's) */
}

static int all_cb(void *ud, const sluice_override_info *o) {
    (void)o;
    (*(int *)ud)++;
    return 0;
}

static void test_overrides(void) {
    sluice_engine *e = load_cfg(CFG);
    sluice_verdict *v = sluice_verdict_create();
    if (e == NULL || v == NULL) return;
    sluice_header h[] = {{STR("x-k"), STR("cust|1")}};
    sluice_request r = {0};
    r.path = STR("/api/x");
    r.headers = h;
    r.n_headers = 1;
    for (int i = 0; i < 3; i++) sluice_engine_decide(e, &r, at(0), v);
    T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_REJECT);
    /* own numbers: 10/min, counters carried over (3 taken) */
    const char *lim[] = {"{\"rate\": \"10/min\", \"burst\": 10}"};
    sluice_override o = {0};
    o.kind = SLUICE_OVERRIDE_LIMITS;
    o.limits = lim;
    o.n_limits = 1;
    o.label = "Customer One";
    o.reason = "launch";
    o.expires_wall_ns = T0 + 3600 * SLUICE_NS_PER_S;
    int created = 0;
    char eb[512];
    /* the key in path form: '|' inside a part is percent-encoded */
    T_EQ_I(sluice_override_set(e, "api", "cust%7C1", 8, &o, at(0), &created, eb, sizeof(eb)), SLUICE_OK);
    T_EQ_I(created, 1);
    T_EQ_I(sluice_engine_decide(e, &r, at(0), v), SLUICE_OK);
    const sluice_answer *a = sluice_verdict_answer(v);
    T_EQ_I(a->action, SLUICE_ACTION_ALLOW);
    T_EQ_I(a->overridden, 1);
    T_EQ_U(a->limit, 10);
    T_EQ_U(a->remaining, 6);
    sluice_override_info *in = NULL;
    T_EQ_I(sluice_override_get(e, "api", "cust%7C1", 8, at(0), &in), SLUICE_OK);
    T_CHECK(in != NULL);
    if (in) {
        T_EQ_I(in->kind, SLUICE_OVERRIDE_LIMITS);
        T_EQ_S(in->policy, "api");
        T_CHECK(in->key == NULL); /* raw keys are not kept by default */
        T_EQ_U(strlen(in->key_hash), 32);
        T_EQ_S(in->label, "Customer One");
        T_EQ_S(in->reason, "launch");
        T_CHECK(in->limits != NULL && strstr(in->limits, "10/min") != NULL);
        T_EQ_I(in->expires_wall_ns, T0 + 3600 * SLUICE_NS_PER_S);
        T_EQ_I(in->set_wall_ns, T0);
    }
    sluice_override_info_free(in);
    /* replace by a block; another key exempt */
    sluice_override b = {0};
    b.kind = SLUICE_OVERRIDE_BLOCK;
    T_EQ_I(sluice_override_set(e, "api", "cust%7C1", 8, &b, at(1), &created, eb, sizeof(eb)), SLUICE_OK);
    T_EQ_I(created, 0);
    T_EQ_I(sluice_engine_decide(e, &r, at(1), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(v)->action, SLUICE_ACTION_REJECT);
    sluice_override x = {0};
    x.kind = SLUICE_OVERRIDE_EXEMPT;
    T_EQ_I(sluice_override_set(e, "api", "vip", 3, &x, at(1), NULL, eb, sizeof(eb)), SLUICE_OK);
    sluice_override pl = {0};
    pl.kind = SLUICE_OVERRIDE_PLAN;
    pl.plan = "gold";
    pl.expires_wall_ns = T0 + 10 * SLUICE_NS_PER_S;
    T_EQ_I(sluice_override_set(e, "api", "g", 1, &pl, at(1), NULL, eb, sizeof(eb)), SLUICE_OK);
    int n = 0;
    T_EQ_I(sluice_override_each(e, "api", at(1), all_cb, &n), 3);
    T_EQ_I(n, 3);
    n = 0;
    T_EQ_I(sluice_override_each(e, "work", at(1), all_cb, &n), 0);
    n = 0;
    int seen = sluice_override_each(e, NULL, at(1), count_cb, &n);
    T_CHECK(seen >= 1 && seen <= 3 && seen == n);
    /* expiry: the plan override is gone at +10 s */
    n = 0;
    T_EQ_I(sluice_override_each(e, NULL, at(20), all_cb, &n), 2);
    T_EQ_I(sluice_override_get(e, "api", "g", 1, at(20), &in), SLUICE_ENOTFOUND);
    T_CHECK(in == NULL);
    /* refusals */
    sluice_override bad = {0};
    bad.kind = SLUICE_OVERRIDE_PLAN;
    bad.plan = "platinum";
    T_EQ_I(sluice_override_set(e, "api", "k", 1, &bad, at(1), NULL, eb, sizeof(eb)), SLUICE_EINVAL);
    T_CHECK(strstr(eb, "platinum") != NULL);
    T_EQ_I(sluice_override_set(e, "nope", "k", 1, &b, at(1), NULL, eb, sizeof(eb)), SLUICE_ENOTFOUND);
    const char *alg[] = {"{\"rate\": \"10/min\", \"algorithm\": \"fixed_window\"}"};
    sluice_override ba = o;
    ba.limits = alg;
    T_EQ_I(sluice_override_set(e, "api", "k", 1, &ba, at(1), NULL, eb, sizeof(eb)), SLUICE_EINVAL);
    const char *neg[] = {"{\"rate\": \"0/min\"}"};
    ba.limits = neg;
    T_EQ_I(sluice_override_set(e, "api", "k", 1, &ba, at(1), NULL, eb, sizeof(eb)), SLUICE_EINVAL);
    sluice_override past = b;
    past.expires_wall_ns = T0 - 1;
    T_EQ_I(sluice_override_set(e, "api", "k", 1, &past, at(1), NULL, eb, sizeof(eb)), SLUICE_EINVAL);
    T_EQ_I(sluice_override_set(e, "api", "%zz", 3, &b, at(1), NULL, eb, sizeof(eb)), SLUICE_EINVAL);
    T_EQ_I(sluice_override_set(e, "api", "", 0, &b, at(1), NULL, eb, sizeof(eb)), SLUICE_EINVAL);
    /* remove: back to the policy's own numbers */
    T_EQ_I(sluice_override_remove(e, "api", "cust%7C1", 8, at(1)), SLUICE_OK);
    T_EQ_I(sluice_override_remove(e, "api", "cust%7C1", 8, at(1)), SLUICE_ENOTFOUND);
    T_EQ_I(sluice_engine_decide(e, &r, at(1), v), SLUICE_OK);
    T_EQ_I(sluice_verdict_answer(v)->overridden, 0);
    /* survives a reload */
    T_EQ_I(sluice_engine_reload_string(e, CFG, strlen(CFG), "t.yaml", eb, sizeof(eb)), SLUICE_OK);
    T_EQ_I(sluice_override_get(e, "api", "vip", 3, at(1), &in), SLUICE_OK);
    sluice_override_info_free(in);
    sluice_verdict_destroy(v);
    sluice_engine_destroy(e);
}

/* Decisions on several threads while another reloads: every decision answers, counters
 * add up (no decision is lost or counted twice), no leak or use after free (ASan). */
typedef struct race {
    sluice_engine *e;
    atomic_int stop;
    atomic_long allowed;
    atomic_long errors;
} race;

static void *decider(void *arg) {
    race *rc = arg;
    sluice_verdict *v = sluice_verdict_create();
    char key[16];
    for (int i = 0; i < 20000; i++) {
        int n = snprintf(key, sizeof(key), "k%d", i % 500);
        if (sluice_engine_decide_key(rc->e, "api", key, (size_t)n, 0, 0, at(0), v) != SLUICE_OK)
            atomic_fetch_add(&rc->errors, 1);
        else if (sluice_verdict_answer(v)->action == SLUICE_ACTION_ALLOW)
            atomic_fetch_add(&rc->allowed, 1);
    }
    sluice_verdict_destroy(v);
    return NULL;
}

static void *reloader(void *arg) {
    race *rc = arg;
    char eb[256];
    while (!atomic_load(&rc->stop))
        if (sluice_engine_reload_string(rc->e, CFG, strlen(CFG), "t.yaml", eb, sizeof(eb)) != SLUICE_OK)
            atomic_fetch_add(&rc->errors, 1);
    return NULL;
}

static void test_threads(void) {
    race rc = {.e = load_cfg(CFG)};
    if (rc.e == NULL) return;
    pthread_t d[3], r;
    pthread_create(&r, NULL, reloader, &rc);
    for (int i = 0; i < 3; i++) pthread_create(&d[i], NULL, decider, &rc);
    for (int i = 0; i < 3; i++) pthread_join(d[i], NULL);
    atomic_store(&rc.stop, 1);
    pthread_join(r, NULL);
    T_EQ_I(atomic_load(&rc.errors), 0);
    T_EQ_I(atomic_load(&rc.allowed), 500 * 3); /* burst 3 per key at one instant */
    T_CHECK(sluice_engine_generation(rc.e) > 0);
    sluice_engine_destroy(rc.e);
}

/* libsluice.so exports exactly src/libsluice.map's list, and each is declared in a public
 * header. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strdup(buf);
}

static void test_exports(void) {
    const char *src = getenv("SLUICE_SRC");
    T_CHECK(src != NULL);
    if (src == NULL) return;
    char p[1024];
    snprintf(p, sizeof(p), "%s/src/libsluice.map", src);
    char *map = slurp(p);
    snprintf(p, sizeof(p), "%s/include/sluice.h", src);
    char *h1 = slurp(p);
    snprintf(p, sizeof(p), "%s/include/sluice_client.h", src);
    char *h2 = slurp(p);
    T_CHECK(map && h1 && h2);
    if (!map || !h1 || !h2) return;
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", SLUICE_LIB_PATH);
    FILE *f = popen(cmd, "r");
    T_CHECK(f != NULL);
    if (f == NULL) return;
    char line[512];
    int n = 0, engine = 0;
    while (fgets(line, sizeof(line), f)) {
        char addr[64], type[8], name[400];
        if (sscanf(line, "%63s %7s %399s", addr, type, name) != 3) continue;
        n++;
        char pat[420];
        snprintf(pat, sizeof(pat), "    %s;\n", name);
        if (strstr(map, pat) == NULL) T_FAIL("exported but not in libsluice.map: %s", name);
        snprintf(pat, sizeof(pat), "%s(", name);
        if (strstr(h1, pat) == NULL && strstr(h2, pat) == NULL)
            T_FAIL("exported but declared in no public header: %s", name);
        if (strncmp(name, "sluice_engine_", 14) == 0) engine++;
    }
    T_EQ_I(pclose(f), 0);
    /* and every listed symbol is there */
    int listed = 0;
    for (const char *q = strstr(map, "global:"); q && (q = strstr(q, "\n    sluice_")); q++) listed++;
    T_EQ_I(listed, n);
    T_CHECK(engine >= 10);
    free(map);
    free(h1);
    free(h2);
}

static void test_example(void) {
    const char *src = getenv("SLUICE_SRC");
    if (src == NULL) return;
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "cd '%s/examples/embed' && '%s' > /dev/null", src, SLUICE_EMBED_BIN);
    T_EQ_I(system(cmd), 0);
}

int main(void) {
    T_RUN(test_load_errors);
    T_RUN(test_decide_request);
    T_RUN(test_settle_release);
    T_RUN(test_reload);
    T_RUN(test_overrides);
    T_RUN(test_threads);
    T_RUN(test_exports);
    T_RUN(test_example);
    return T_DONE();
}
