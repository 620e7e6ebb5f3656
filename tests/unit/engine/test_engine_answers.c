/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_answers.c -- answers that say what happened, and configs the engine can
 * always decide: a recheck delay is not a shaped admission (429 + Retry-After, action
 * "recheck"); a peek never takes a concurrency slot; a fail-open admission carries no
 * RateLimit fields (the store's state is unknown); named windows keep their counters
 * when reordered; policies that cannot match one request are not added up against the
 * per-decision bound, policies that can are refused at load; a cost above 2^40 is the
 * engine's 400, before any store.
 */
#include "config/compiled.h"
#include "engine/internal.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static sluice_time at_s(int64_t s) {
    return (sluice_time){.mono_ns = SEC + s * SEC, .wall_ns = INT64_C(1767225600) * SEC + s * SEC};
}

typedef struct fx {
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static bool open_fx(fx *f, const char *yaml, const sl_store_ops *ops) {
    static sl_diag_list dl;
    memset(f, 0, sizeof(*f));
    if (sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &f->cfg, &dl) != SLUICE_OK) {
        char line[600];
        sl_diag_format(&dl, 0, line, sizeof(line));
        T_FAIL("load: %s", line);
        return false;
    }
    int err;
    f->st = sluice_store_create(NULL, &err);
    f->e = sl_engine_create_ops(f->cfg, f->st, ops, &err, NULL, 0);
    T_CHECK(f->e != NULL);
    return f->e != NULL;
}

static void close_fx(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
}

static sl_verdict V;

static void recheck_is_not_a_shaped_admission(void) {
    fx f;
    if (!open_fx(&f, "policies:\n"
                     "  - { name: d, key: [client_ip], algorithm: gcra, limits: [{rate: 1/s, burst: 1}],\n"
                     "      on_exceed: { delay: 2s } }\n", NULL))
        return;
    T_EQ_I(sl_engine_check_named(f.e, "d", "k", 1, true, 1, at_s(0), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_I(sl_engine_check_named(f.e, "d", "k", 1, true, 1, at_s(0), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_DELAY);
    T_CHECK(V.recheck);
    T_EQ_I(V.status, 429); /* nothing consumed: not an admission */
    char buf[2048];
    T_CHECK(sl_render_json(&V, false, buf, sizeof(buf)) > 0);
    T_CHECK(strstr(buf, "\"action\":\"recheck\"") != NULL);
    T_CHECK(strstr(buf, "\"allowed\":false") != NULL);
    T_CHECK(sl_render_headers(&V, buf, sizeof(buf), 0) >= 0);
    T_CHECK(strstr(buf, "Retry-After: 1\r\n") != NULL);
    close_fx(&f);
}

static void peek_takes_no_slot(void) {
    fx f;
    if (!open_fx(&f, "policies:\n"
                     "  - { name: c, key: [client_ip], algorithm: concurrency, limits: [{max: 3, lease: 60s}] }\n",
                 NULL))
        return;
    for (int i = 0; i < 3; i++) {
        T_EQ_I(sl_engine_check_named(f.e, "c", "t", 1, true, 0, at_s(0), &V), SLUICE_OK);
        T_EQ_I(V.action, SL_ALLOW);
        T_EQ_U(V.items[0].result.lease, 0);
    }
    for (int i = 0; i < 3; i++) {
        T_EQ_I(sl_engine_acquire(f.e, "c", "t", 1, at_s(0), &V), SLUICE_OK);
        T_EQ_I(V.action, SL_ALLOW);
    }
    T_EQ_I(sl_engine_acquire(f.e, "c", "t", 1, at_s(0), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_REJECT);
    close_fx(&f);
}

/* A store that is down: every decision fails (answers at once, like an open breaker). */
static void down_decide(void *lane, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                        sl_store_cb cb, void *ud) {
    (void)lane, (void)items, (void)n, (void)flags, (void)now;
    cb(ud, SLUICE_ESTORE, NULL);
}

static void fail_open_has_no_ratelimit_fields(void) {
    sl_store_ops down = sl_memory_ops;
    down.decide = down_decide;
    fx f;
    if (!open_fx(&f, "policies:\n"
                     "  - { name: o, key: [client_ip], algorithm: gcra, limits: [{rate: 10/s}],\n"
                     "      on_store_error: open }\n", &down))
        return;
    T_EQ_I(sl_engine_check_named(f.e, "o", "k", 1, true, 1, at_s(0), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_ALLOW);
    T_CHECK(V.store_error);
    char buf[2048];
    T_CHECK(sl_render_headers(&V, buf, sizeof(buf), SL_RENDER_LEGACY) >= 0);
    T_CHECK(strstr(buf, "RateLimit") == NULL);
    close_fx(&f);
}

static const char NAMED_A[] = "policies:\n"
                              "  - name: n\n"
                              "    key: [client_ip]\n"
                              "    algorithm: fixed_window\n"
                              "    limits:\n"
                              "      - { name: burst, rate: 5/min }\n"
                              "      - { name: hourly, rate: 100/h }\n";
static const char NAMED_B[] = "policies:\n"
                              "  - name: n\n"
                              "    key: [client_ip]\n"
                              "    algorithm: fixed_window\n"
                              "    limits:\n"
                              "      - { name: hourly, rate: 100/h }\n"
                              "      - { name: extra, rate: 1000/d }\n"
                              "      - { name: burst, rate: 5/min }\n";

static uint64_t remaining_of(const sl_verdict *v, const char *name) {
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->items[i].info->name, name) == 0) return v->items[i].result.remaining;
    T_FAIL("no window %s", name);
    return 0;
}

static void named_windows_keep_counters_when_reordered(void) {
    static sl_diag_list dl;
    sl_config *a, *b;
    T_EQ_I(sl_config_load_buffer(NAMED_A, sizeof(NAMED_A) - 1, "a.yaml", &a, &dl), SLUICE_OK);
    T_EQ_I(sl_config_load_buffer(NAMED_B, sizeof(NAMED_B) - 1, "b.yaml", &b, &dl), SLUICE_OK);
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sl_engine *ea = sl_engine_create(a, st, &err, NULL, 0);
    for (int i = 0; i < 3; i++) T_EQ_I(sl_engine_check_named(ea, "n", "k", 1, true, 1, at_s(1), &V), SLUICE_OK);
    T_EQ_U(remaining_of(&V, "burst"), 2);
    T_EQ_U(remaining_of(&V, "hourly"), 97);
    /* reordered, a window inserted before one: each keeps its own counter */
    sl_engine *eb = sl_engine_create(b, st, &err, NULL, 0);
    sl_engine_destroy(ea);
    T_EQ_I(sl_engine_check_named(eb, "n", "k", 1, true, 1, at_s(2), &V), SLUICE_OK);
    T_EQ_U(remaining_of(&V, "burst"), 1);
    T_EQ_U(remaining_of(&V, "hourly"), 96);
    T_EQ_U(remaining_of(&V, "extra"), 999);
    sl_engine_destroy(eb);
    sl_config_destroy(a);
    sl_config_destroy(b);
    sluice_store_destroy(st);
}

static void disjoint_policies_are_not_added_up(void) {
    /* 40 one-window policies on distinct exact paths, 20 more on distinct methods: any
     * request meets at most a few of them */
    char yaml[16384] = "policies:\n";
    size_t off = strlen(yaml);
    for (int i = 0; i < 40; i++)
        off += (size_t)snprintf(yaml + off, sizeof(yaml) - off,
                                "  - { name: p%d, match: { path: /api/v%d }, key: [client_ip],\n"
                                "      algorithm: gcra, limits: [{rate: 10/s}] }\n",
                                i, i);
    static const char *methods[] = {"GET", "PUT", "POST", "PATCH", "DELETE"};
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(yaml + off, sizeof(yaml) - off,
                                "  - { name: m%d, match: { method: %s, path_prefix: /m/ }, key: [client_ip],\n"
                                "      algorithm: gcra, limits: [{rate: 10/s}, {rate: 100/min}] }\n",
                                i, methods[i % 5]);
    static sl_diag_list dl;
    sl_config *c = NULL;
    int rc = sl_config_load_buffer(yaml, strlen(yaml), "d.yaml", &c, &dl);
    if (rc != SLUICE_OK) {
        char line[600];
        sl_diag_format(&dl, 0, line, sizeof(line));
        T_FAIL("disjoint policies refused: %s", line);
    }
    T_EQ_I(rc, SLUICE_OK);
    sl_config_destroy(c);
    /* the same 20 method policies all on one method: 40 windows can meet */
    off = strlen("policies:\n");
    yaml[off] = '\0';
    for (int i = 0; i < 20; i++)
        off += (size_t)snprintf(yaml + off, sizeof(yaml) - off,
                                "  - { name: m%d, match: { method: GET, path_prefix: /m/ }, key: [client_ip],\n"
                                "      algorithm: gcra, limits: [{rate: 10/s}, {rate: 100/min}] }\n",
                                i);
    T_EQ_I(sl_config_load_buffer(yaml, strlen(yaml), "o.yaml", &c, &dl), SLUICE_EINVAL);
    T_CHECK(dl.n >= 1 && strstr(dl.items[0].msg, "can match one request: 40 windows") != NULL);
}

/* Issue 27: a cost above SL_COST_MAX is the engine's refusal (400, one text), before any
 * store: the memory store answered 429, the Redis store 400 about key parts. 2^40 itself
 * is decided; a refusal takes nothing. */
static void cost_above_the_bound_is_refused_before_the_store(void) {
    fx f;
    if (!open_fx(&f, "policies:\n"
                     "  - { name: w, key: [client_ip], algorithm: fixed_window, limits: [{rate: 100/m}] }\n",
                 NULL))
        return;
    T_EQ_I(sl_engine_check_named(f.e, "w", "k", 1, true, SL_COST_MAX, at_s(0), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_U(V.items[0].result.remaining, 100);
    uint64_t bad[] = {SL_COST_MAX + 1, UINT64_C(1) << 53, UINT64_MAX};
    for (size_t i = 0; i < 3; i++) {
        T_EQ_I(sl_engine_check_named(f.e, "w", "k", 1, true, bad[i], at_s(0), &V), SL_ECOST);
        T_EQ_I(V.action, SL_ERROR);
        T_EQ_I(V.status, 400);
    }
    T_CHECK(strstr(sl_engine_error_text(SL_ECOST), "2^40") != NULL);
    T_EQ_I(sl_engine_check_named(f.e, "w", "k", 1, true, 1, at_s(0), &V), SLUICE_OK);
    T_EQ_U(V.items[0].result.remaining, 99);
    close_fx(&f);
}

int main(void) {
    T_RUN(cost_above_the_bound_is_refused_before_the_store);
    T_RUN(recheck_is_not_a_shaped_admission);
    T_RUN(peek_takes_no_slot);
    T_RUN(fail_open_has_no_ratelimit_fields);
    T_RUN(named_windows_keep_counters_when_reordered);
    T_RUN(disjoint_policies_are_not_added_up);
    return T_DONE();
}
