/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_examples.c -- the shipped examples load and behave as their comments say:
 * examples/sluice.yaml (the validation plan's `api` policy), bank.yaml, open-finance.yaml
 * and ai-platform.yaml, driven through the engine on a manual clock.
 */
#include <stdarg.h>

#include "engine/engine.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

typedef struct fx {
    sluice_clock *clk;
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static bool fx_open(fx *f, const char *example, int64_t wall_s) {
    memset(f, 0, sizeof(*f));
    const char *src = getenv("SLUICE_SRC");
    char path[1024];
    snprintf(path, sizeof(path), "%s/examples/%s", src ? src : ".", example);
    static sl_diag_list dl;
    if (sl_config_load(path, &f->cfg, &dl) != SLUICE_OK) {
        char line[600];
        for (size_t i = 0; i < dl.n; i++) {
            sl_diag_format(&dl, i, line, sizeof(line));
            fprintf(stderr, "  %s\n", line);
        }
        T_FAIL("%s did not load", path);
        return false;
    }
    f->clk = sluice_clock_create_manual(wall_s * SEC);
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

typedef struct treq {
    sl_header h[8];
    sl_request r;
} treq;

static const sl_request *R(treq *t, const char *m, const char *p, ...) {
    memset(t, 0, sizeof(*t));
    t->r.method = S(m);
    t->r.path = S(p);
    t->r.client_ip = S("192.0.2.7");
    va_list ap;
    va_start(ap, p);
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

static sl_verdict V;

static const sl_verdict_item *item(const sl_verdict *v, const char *name) {
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->items[i].info->name, name) == 0) return &v->items[i];
    T_FAIL("no item %s", name);
    static sl_verdict_item none;
    return &none;
}

static void check(fx *f, const sl_request *r) {
    T_EQ_I(sl_engine_check(f->e, r, sluice_clock_now(f->clk), &V), SLUICE_OK);
}

/* The default config's `api` policy is the validation plan's token bucket. */
static void default_config(void) {
    fx f;
    if (!fx_open(&f, "sluice.yaml", INT64_C(1767225600))) return;
    const sl_settings *st = sl_config_settings(f.cfg);
    T_EQ_S(st->listen_http, "127.0.0.1:8080");
    T_EQ_S(st->listen_grpc, "127.0.0.1:8081");
    T_EQ_I(st->store.on_full, SLUICE_EVICT_LRU);
    T_EQ_S(st->store.snapshot_path, "sluice.state");
    T_EQ_I(st->store.snapshot_every_ns, 10 * SEC);
    T_CHECK(!st->log_raw_keys);
    treq t;
    int ok = 0;
    for (int i = 0; i < 30; i++) {
        check(&f, R(&t, "GET", "/v1/things", "x-api-key", "key-1", NULL));
        ok += !item(&V, "api")->would_limit;
    }
    T_EQ_I(ok, 20);
    /* login: POST /login per address, 5 per minute */
    ok = 0;
    for (int i = 0; i < 7; i++) {
        check(&f, R(&t, "POST", "/login", NULL));
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 5);
    fx_close(&f);
}

static void bank(void) {
    fx f;
    if (!fx_open(&f, "bank.yaml", INT64_C(1767225600))) return;
    T_CHECK(sl_config_settings(f.cfg)->legacy_headers);
    treq t;
    /* an export costs 20 of the user's burst of 30 */
    check(&f, R(&t, "GET", "/accounts/1/statements/export", "x-user-id", "u1", "x-client-id",
                "app", NULL));
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(item(&V, "user-burst")->result.remaining, 10);
    T_EQ_U(item(&V, "user-day")->result.remaining, 4980);
    T_EQ_U(item(&V, "client-rate")->result.remaining, 380);
    T_CHECK(sl_engine_release(f.e, &V, sluice_clock_now(f.clk)) == SLUICE_OK);
    for (int i = 0; i < 10; i++) {
        check(&f, R(&t, "GET", "/accounts/1/balance", "x-user-id", "u1", "x-client-id", "app",
                    NULL));
        sl_engine_release(f.e, &V, sluice_clock_now(f.clk));
    }
    /* the user is out: 429 before the backend, nothing taken from the client's budget */
    check(&f, R(&t, "GET", "/accounts/1/balance", "x-user-id", "u1", "x-client-id", "app", NULL));
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_S(V.items[V.deciding].info->name, "user-burst");
    T_EQ_U(item(&V, "backend-in-flight")->result.lease, 0);
    check(&f, R(&t, "GET", "/accounts/2/balance", "x-user-id", "u2", "x-client-id", "app", NULL));
    T_EQ_U(item(&V, "client-rate")->result.remaining, 369);
    sl_engine_release(f.e, &V, sluice_clock_now(f.clk));
    /* the backend guard: 64 in flight at most, across users */
    static sl_verdict held[64];
    for (int i = 0; i < 64; i++) {
        char user[16];
        snprintf(user, sizeof(user), "g%d", i);
        sl_engine_check(f.e, R(&t, "GET", "/accounts/3/balance", "x-user-id", user,
                               "x-client-id", "app", NULL),
                        sluice_clock_now(f.clk), &held[i]);
        T_EQ_I(held[i].action, SL_ALLOW);
    }
    check(&f, R(&t, "GET", "/accounts/3/balance", "x-user-id", "late", "x-client-id", "app",
                NULL));
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_S(V.items[V.deciding].info->name, "backend-in-flight");
    T_EQ_I(sl_engine_release(f.e, &held[0], sluice_clock_now(f.clk)), SLUICE_OK);
    check(&f, R(&t, "GET", "/accounts/3/balance", "x-user-id", "late", "x-client-id", "app",
                NULL));
    T_EQ_I(V.action, SL_ALLOW);
    /* legacy headers are what the old apps read */
    char h[1024];
    sl_render_headers(&V, h, sizeof(h), SL_RENDER_LEGACY);
    T_CHECK(strstr(h, "X-RateLimit-Limit: ") != NULL);
    /* no user: a gateway bug, answered 400 */
    check(&f, R(&t, "GET", "/accounts/3/balance", "x-client-id", "app", NULL));
    T_EQ_I(V.status, 400);
    fx_close(&f);
}

static void open_finance(void) {
    /* 2026-02-01 02:00 UTC is still January 31 in Sao Paulo (UTC-3) */
    fx f;
    if (!fx_open(&f, "open-finance.yaml", INT64_C(1769911200))) return;
    treq t;
    const char *ss = "x-software-statement-id", *cid = "x-client-id", *inst = "x-institution-id";
    int ok = 0;
    for (int i = 0; i < 60; i++) {
        check(&f, R(&t, "GET", "/open-banking/accounts", ss, "ss1", cid, "c1", inst, "bankA", NULL));
        ok += V.action == SL_ALLOW;
    }
    T_EQ_I(ok, 50);
    /* the same partner reading another institution is another key */
    check(&f, R(&t, "GET", "/open-banking/accounts", ss, "ss1", cid, "c1", inst, "bankB", NULL));
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(item(&V, "partner-month")->result.remaining, 99999);
    /* parts are length-prefixed: ("ss1","c1b","ankB") is not ("ss1","c1","bankB") */
    check(&f, R(&t, "GET", "/open-banking/accounts", ss, "ss1", cid, "c1b", inst, "ankB", NULL));
    T_EQ_U(item(&V, "partner-month")->result.remaining, 99999);
    /* the month used so far in January ... */
    check(&f, R(&t, "GET", "/open-banking/accounts", ss, "ss1", cid, "c1", inst, "bankB", NULL));
    T_EQ_U(item(&V, "partner-month")->result.remaining, 99998);
    /* ... is forgotten at local midnight of February 1st (03:00 UTC) */
    sluice_clock_set_wall(f.clk, INT64_C(1769914801) * SEC);
    sluice_clock_advance(f.clk, 3601 * SEC);
    check(&f, R(&t, "GET", "/open-banking/accounts", ss, "ss1", cid, "c1", inst, "bankB", NULL));
    T_EQ_U(item(&V, "partner-month")->result.remaining, 99999);
    /* premium partners have their own plan */
    check(&f, R(&t, "GET", "/open-banking/accounts", ss, "ss2", cid, "c2", inst, "bankA",
                "x-partner-tier", "premium", NULL));
    T_EQ_U(item(&V, "partner-premium-month")->result.remaining, 1999999);
    /* consents: both rules apply to a POST of a consent */
    check(&f, R(&t, "POST", "/open-banking/consents", ss, "ss1", cid, "c1", inst, "bankA", NULL));
    T_EQ_U(V.n, 3);
    fx_close(&f);
}

static void ai_platform(void) {
    fx f;
    if (!fx_open(&f, "ai-platform.yaml", INT64_C(1767225600))) return;
    treq t;
    /* reserve max_tokens, settle with the real count */
    check(&f, R(&t, "POST", "/v1/completions", "x-api-key", "a", "x-max-tokens", "2000", NULL));
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_U(item(&V, "tpm")->result.remaining, 38000);
    T_EQ_U(item(&V, "tokens-month")->result.remaining, 4998000);
    T_EQ_U(item(&V, "rpm")->result.remaining, 59);
    T_CHECK(item(&V, "gpu-in-flight")->result.lease != 0);
    char tok[SL_TOKEN_MAX];
    T_CHECK(sl_verdict_token(&V, tok, sizeof(tok)) > 0);
    /* after the response: 500 tokens were used; the GPU slot is given back */
    T_EQ_I(sl_engine_settle_token(f.e, tok, strlen(tok), 500, sluice_clock_now(f.clk)),
           SLUICE_OK);
    T_EQ_I(sl_engine_release_token(f.e, tok, strlen(tok), sluice_clock_now(f.clk)), SLUICE_OK);
    check(&f, R(&t, "POST", "/v1/completions", "x-api-key", "a", "x-max-tokens", "1", NULL));
    T_EQ_U(item(&V, "tpm")->result.remaining, 39499);
    T_EQ_U(item(&V, "tokens-month")->result.remaining, 4999499);
    sl_engine_release(f.e, &V, sluice_clock_now(f.clk));
    /* a request whose reservation does not fit is rejected and takes no request slot */
    check(&f, R(&t, "POST", "/v1/completions", "x-api-key", "a", "x-max-tokens", "39500", NULL));
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_S(V.items[V.deciding].info->name, "tpm");
    T_EQ_U(item(&V, "rpm")->result.remaining, 58);
    /* 8 generations at once, not 9 */
    static sl_verdict held[8];
    for (int i = 0; i < 8; i++) {
        char key[8];
        snprintf(key, sizeof(key), "k%d", i);
        sl_engine_check(f.e, R(&t, "POST", "/v1/completions", "x-api-key", key, NULL),
                        sluice_clock_now(f.clk), &held[i]);
        T_EQ_I(held[i].action, SL_ALLOW);
    }
    check(&f, R(&t, "POST", "/v1/completions", "x-api-key", "k9", NULL));
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_S(V.items[V.deciding].info->name, "gpu-in-flight");
    fx_close(&f);
}

int main(void) {
    T_RUN(default_config);
    T_RUN(bank);
    T_RUN(open_finance);
    T_RUN(ai_platform);
    return T_DONE();
}
