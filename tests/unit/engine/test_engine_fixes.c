/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_fixes.c -- regressions for the review of the policy layer: load-time
 * refusals of configs the engine could not honour (sliding-log state, limiter count,
 * zero costs and delays, contradictory modes), long paths and hosts still matched,
 * engine errors answered as errors (never fail-open), empty descriptor values.
 */
#include <pthread.h>
#include <stdarg.h>

#include "engine/engine.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static sl_diag_list DL;
static sl_verdict V; /* big: keep it off the stack */

static sl_config *try_load(const char *yaml) {
    sl_config *cfg = NULL;
    sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &cfg, &DL);
    return cfg;
}

static sl_config *load(const char *yaml) {
    sl_config *cfg = try_load(yaml);
    if (cfg == NULL) {
        char line[600];
        for (size_t i = 0; i < DL.n; i++) {
            sl_diag_format(&DL, i, line, sizeof(line));
            fprintf(stderr, "  %s\n", line);
        }
        T_FAIL("config did not load");
    }
    return cfg;
}

/* The config is refused with an error at line:col whose message contains `needle`. */
static void refused_at(const char *yaml, int line, int col, const char *needle) {
    sl_config *cfg = try_load(yaml);
    if (cfg != NULL) {
        T_FAIL("config loaded, expected an error containing '%s'", needle);
        sl_config_destroy(cfg);
        return;
    }
    for (size_t i = 0; i < DL.n; i++)
        if (strstr(DL.items[i].msg, needle) != NULL) {
            if (DL.items[i].line != line || DL.items[i].col != col)
                T_FAIL("'%s' at %d:%d, expected %d:%d", DL.items[i].msg, DL.items[i].line,
                       DL.items[i].col, line, col);
            return;
        }
    char l[600];
    for (size_t i = 0; i < DL.n; i++) {
        sl_diag_format(&DL, i, l, sizeof(l));
        fprintf(stderr, "  %s\n", l);
    }
    T_FAIL("no error containing '%s'", needle);
}

typedef struct fx {
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
} fx;

static bool fx_open(fx *f, const char *yaml) {
    memset(f, 0, sizeof(*f));
    int err = 0;
    static const uint8_t seed[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6};
    sluice_store_options o = {0};
    o.seed = seed;
    f->st = sluice_store_create(&o, &err);
    f->cfg = load(yaml);
    if (f->cfg == NULL || f->st == NULL) return false;
    char msg[256];
    f->e = sl_engine_create(f->cfg, f->st, &err, msg, sizeof(msg));
    if (f->e == NULL) T_FAIL("engine: %s", msg);
    return f->e != NULL;
}

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
}

static sluice_time at_s(int64_t s) {
    return (sluice_time){SEC + s * SEC, INT64_C(1767225600) * SEC + s * SEC};
}

static sl_str S(const char *s) { return (sl_str){s, s ? strlen(s) : 0}; }

static sl_request req(const char *method, const char *path, const char *host) {
    sl_request r;
    memset(&r, 0, sizeof(r));
    r.method = S(method);
    r.path = S(path);
    r.host = S(host);
    r.client_ip = S("10.1.2.3");
    return r;
}

/* ---- finding 1: sliding-log state per decision ------------------------------------- */

/* Three large logs on one request cannot be decided: refused at load, at the policy
 * that goes over; two full-size logs (what a decision holds) load and are enforced. */
static void sliding_log_state_bounded_at_load(void) {
    refused_at("policies:\n"
               "  - name: exact\n"
               "    objective: protection\n"
               "    key: []\n"
               "    algorithm: sliding_log\n"
               "    limits: [{rate: 1000/s}, {rate: 1000/min}, {rate: 1000/h}]\n",
               2, 5, "sliding_log windows too large");
    /* across policies too: each fits alone, together they do not */
    refused_at("policies:\n"
               "  - {name: a, objective: protection, key: [], algorithm: sliding_log,\n"
               "     limits: [{rate: 1024/s}]}\n"
               "  - {name: b, objective: protection, key: [], algorithm: sliding_log,\n"
               "     limits: [{rate: 1024/min}]}\n"
               "  - {name: c, objective: protection, key: [], algorithm: sliding_log,\n"
               "     limits: [{rate: 4/h}]}\n",
               6, 5, "sliding_log windows too large");
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - {name: a, objective: protection, key: [], algorithm: sliding_log,\n"
                     "     limits: [{rate: 1024/s}, {rate: 1024/min}]}\n"
                     "  - {name: b, objective: protection, key: [], algorithm: sliding_log,\n"
                     "     limits: [{rate: 3/s}]}\n"))
        return;
    int admitted = 0;
    for (int i = 0; i < 10; i++) {
        sl_request r = req("GET", "/", NULL);
        T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
        T_CHECK(!V.store_error);
        admitted += V.action == SL_ALLOW;
    }
    T_EQ_I(admitted, 3);
    fx_close(&f);
}

/* An engine error is an error: SL_ERROR with status 500, never fail-open admission, and
 * a problem body that says 500. ETOOMANY here: 33 windows match one request. */
static void engine_errors_are_not_store_failures(void) {
    /* three catch-all policies of 11 windows: 33 in one decision, refused at load */
    char yaml[8192] = "policies:\n";
    for (int p = 0; p < 3; p++) {
        size_t o = strlen(yaml);
        snprintf(yaml + o, sizeof(yaml) - o,
                 "  - name: p%d\n    objective: protection\n    key: []\n"
                 "    on_store_error: open\n    algorithm: fixed_window\n    limits:\n", p);
        for (int w = 0; w < 11; w++) {
            o = strlen(yaml);
            snprintf(yaml + o, sizeof(yaml) - o, "      - {rate: %d/min}\n", w + 1);
        }
    }
    static sl_diag_list dl;
    sl_config *c = NULL;
    T_EQ_I(sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &c, &dl), SLUICE_EINVAL);
    T_CHECK(dl.n == 1 && strstr(dl.items[0].msg, "33 windows in one decision") != NULL);
    /* a request can still bring more than a decision holds (11 descriptors on a rule of
     * 3 windows): an engine error (500), not a store failure, whatever on_store_error */
    fx f;
    if (!fx_open(&f, "domains:\n"
                     "  - domain: d\n"
                     "    descriptors:\n"
                     "      - key: k\n"
                     "        rate_limit:\n"
                     "          unit: second\n"
                     "          requests_per_unit: 10\n"
                     "          on_store_error: open\n"
                     "          extra_limits: [{rate: 100/min}, {rate: 1000/h}]\n"))
        return;
    sl_entry ent[11];
    sl_descriptor d[11];
    char vals[11][4];
    for (int i = 0; i < 11; i++) {
        snprintf(vals[i], sizeof(vals[i]), "v%d", i);
        ent[i] = (sl_entry){{"k", 1}, {vals[i], strlen(vals[i])}};
        d[i] = (sl_descriptor){.entries = &ent[i], .n = 1};
    }
    sl_request r = {.domain = {"d", 1}, .descriptors = d, .n_descriptors = 11};
    int rc = sl_engine_check(f.e, &r, at_s(0), &V);
    T_EQ_I(rc, SLUICE_ETOOMANY);
    T_EQ_I(V.action, SL_ERROR);
    T_EQ_I(V.status, 400); /* the request asks for more windows than one decision holds */
    T_CHECK(!V.store_error);
    char body[1024];
    T_CHECK(sl_render_problem(&V, NULL, body, sizeof(body)) > 0);
    T_CHECK(strstr(body, "\"status\":400") != NULL);
    fx_close(&f);
}

/* ---- finding 2: long paths and hosts ------------------------------------------------ */

static void long_paths_and_hosts_still_match(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: admin\n"
                     "    objective: security\n"
                     "    match: {path_prefix: /admin/}\n"
                     "    key: []\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 2/h}]\n"
                     "  - name: vhost\n"
                     "    objective: protection\n"
                     "    match: {host: '*.example.com'}\n"
                     "    key: [host]\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 1/h}]\n"))
        return;
    static char path[12000];
    memcpy(path, "//admin/", 8);
    memset(path + 8, 'a', sizeof(path) - 9);
    path[sizeof(path) - 1] = '\0';
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        sl_request r = req("GET", path, NULL);
        T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
        admitted += V.action == SL_ALLOW;
    }
    T_EQ_I(admitted, 2);
    /* longer than the stack buffer: with caller scratch it is normalised and matched,
     * without it an error, never a raw match that skips the policy */
    static char huge[40000], scratch[40000];
    memcpy(huge, "/./admin/", 9);
    memset(huge + 9, 'b', sizeof(huge) - 10);
    huge[sizeof(huge) - 1] = '\0';
    sl_request r = req("GET", huge, NULL);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_ERANGE);
    T_EQ_I(V.action, SL_ERROR);
    r.path_scratch = scratch;
    r.path_scratch_len = sizeof(scratch);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_REJECT);
    /* a Host of 300 bytes is matched (case-insensitively) and counted */
    static char host[400];
    memset(host, 'X', 300);
    strcpy(host + 300, ".Example.COM:8443");
    admitted = 0;
    for (int i = 0; i < 3; i++) {
        sl_request h = req("GET", "/", host);
        T_EQ_I(sl_engine_check(f.e, &h, at_s(0), &V), SLUICE_OK);
        T_EQ_U(V.n, 1);
        admitted += V.action == SL_ALLOW;
    }
    T_EQ_I(admitted, 1);
    fx_close(&f);
}

/* ---- finding 7: empty descriptor values ---------------------------------------------- */

static void empty_descriptor_value_is_missing(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: users\n"
                     "    objective: fairness\n"
                     "    match: {domain: edge}\n"
                     "    key: [descriptor.user]\n"
                     "    on_missing_key: skip\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 1/h}]\n"))
        return;
    sl_entry en = {S("user"), S("")};
    sl_descriptor d = {&en, 1, false, 0, false, 0, 0};
    for (int i = 0; i < 3; i++) {
        sl_request r;
        memset(&r, 0, sizeof(r));
        r.domain = S("edge");
        r.descriptors = &d;
        r.n_descriptors = 1;
        T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
        T_EQ_U(V.n, 0); /* skipped as missing: no shared "" bucket */
        T_EQ_I(V.action, SL_ALLOW);
    }
    fx_close(&f);
}

/* ---- findings 9, 13, 16: values accepted silently ------------------------------------ */

static const char *HEAD = "policies:\n  - name: p\n    objective: cost\n    key: []\n";

static void silent_values_refused(void) {
    char y[1024];
    snprintf(y, sizeof(y), "%s    algorithm: leaky_bucket\n"
             "    limits: [{rate: 1/s, burst: 10, max_delay: 0s}]\n", HEAD);
    refused_at(y, 6, 48, "max_delay 0s");
    snprintf(y, sizeof(y), "%s    cost: _\n    algorithm: fixed_window\n"
             "    limits: [{rate: 1/h}]\n", HEAD);
    refused_at(y, 5, 11, "bad number '_'");
    snprintf(y, sizeof(y), "%s    cost: 0\n    algorithm: fixed_window\n"
             "    limits: [{rate: 1/h}]\n", HEAD);
    refused_at(y, 5, 11, "cost 0");
    snprintf(y, sizeof(y), "%s    cost: {default: 0}\n    algorithm: fixed_window\n"
             "    limits: [{rate: 1/h}]\n", HEAD);
    refused_at(y, 5, 21, "cost 0");
    snprintf(y, sizeof(y), "%s    algorithm: fixed_window\n    limits: [{rate: 1/h}]\n"
             "    on_exceed: shadow\n    mode: {rollout: 50%%}\n", HEAD);
    refused_at(y, 8, 11, "contradicts on_exceed: shadow");
    snprintf(y, sizeof(y), "%s    cost: {from: descriptor.n}\n    algorithm: fixed_window\n"
             "    limits: [{rate: 10/h}]\n", HEAD);
    refused_at(y, 5, 18, "needs match.domain");
    snprintf(y, sizeof(y), "%s    algorithm: fixed_window\n    limits: [{rate: 1/h}]\n"
             "    plan_from: descriptor.plan\n    plans: {pro: {limits: [{rate: 5/h}]}}\n",
             HEAD);
    refused_at(y, 7, 16, "needs match.domain");
    /* underscores between digits still read as digit groups */
    snprintf(y, sizeof(y), "%s    cost: 1_000\n    algorithm: fixed_window\n"
             "    limits: [{rate: 1000/h}]\n", HEAD);
    sl_config *c = load(y);
    sl_config_destroy(c);
}

/* A config path is normalised as requests are, so it matches the requests it names. */
static void config_paths_normalised(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: tilde\n"
                     "    objective: protection\n"
                     "    match: {path: /files/%7euser}\n"
                     "    key: []\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 1/h}]\n"
                     "  - name: ops\n"
                     "    objective: cost\n"
                     "    match: {path_prefix: /a//b/./}\n"
                     "    key: []\n"
                     "    cost: {\"POST /a/x/../b/export\": 5}\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 100/h}]\n"))
        return;
    const char *ps[] = {"/files/%7euser", "/files/~user", "/files/%7Euser"};
    for (int i = 0; i < 3; i++) {
        sl_request r = req("GET", ps[i], NULL);
        T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
        T_EQ_U(V.n, 1);
    }
    sl_request r = req("POST", "/a/b/export", NULL);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
    T_EQ_U(V.n, 1);
    T_EQ_U(V.items[0].cost, 5);
    fx_close(&f);
    refused_at("policies:\n  - name: q\n    objective: cost\n    match: {path: '/x?y=1'}\n"
               "    key: []\n    algorithm: fixed_window\n    limits: [{rate: 1/h}]\n",
               4, 19, "query or fragment");
}

/* ---- findings 10, 11, 12: counts, linear checks, positions ---------------------------- */

static void limiter_count_refused_at_load(void) {
    /* 1024 policies of 16 windows: the 1024th brings it past the store's capacity */
    size_t cap = 1100 * 400;
    char *y = malloc(cap);
    if (y == NULL) return;
    size_t o = (size_t)snprintf(y, cap, "policies:\n");
    for (int p = 0; p < 1024; p++) {
        o += (size_t)snprintf(y + o, cap - o, " - {name: p%d, objective: cost, key: [], "
                              "algorithm: gcra, limits: [", p);
        for (int w = 0; w < 16; w++)
            o += (size_t)snprintf(y + o, cap - o, "%s{rate: %d/s}", w ? ", " : "", w + 1);
        o += (size_t)snprintf(y + o, cap - o, "]}\n");
    }
    refused_at(y, 1025, 4, "too many limits");
    free(y);
}

static void duplicate_window_names(void) {
    refused_at("policies:\n"
               "  - name: api\n"
               "    objective: fairness\n"
               "    key: [client_ip]\n"
               "    algorithm: token_bucket\n"
               "    limits:\n"
               "      - { name: same, rate: 10/s, burst: 20 }\n"
               "      - { name: same, rate: 1000/h }\n",
               8, 17, "used twice");
    refused_at("policies:\n"
               "  - name: api\n"
               "    objective: fairness\n"
               "    key: [client_ip]\n"
               "    algorithm: gcra\n"
               "    limits: [{rate: 1/s}]\n"
               "    plan_from: header.x-plan\n"
               "    plans:\n"
               "      pro: {limits: [{name: w, rate: 5/s}, {name: w, rate: 50/min}]}\n",
               9, 51, "used twice");
    /* across policies: at the repeat's name */
    refused_at("policies:\n"
               "  - {name: a, objective: cost, key: [], algorithm: gcra,\n"
               "     limits: [{name: shared, rate: 1/s}]}\n"
               "  - {name: b, objective: cost, key: [], algorithm: gcra,\n"
               "     limits: [{rate: 2/s, name: shared}]}\n",
               5, 33, "used twice");
}


/* ---- findings 3, 4: tokens are single use; refunds stay in their window ---------------- */

static int settle_tok(fx *f, const char *tok, uint64_t actual, sluice_time t) {
    return sl_engine_settle_token(f->e, tok, strlen(tok), actual, t);
}

static void settle_tokens_single_use(void) {
    const char *yaml = "policies:\n"
                       "  - name: llm\n"
                       "    objective: cost\n"
                       "    key: [header.x-k]\n"
                       "    cost: {default: 100, settle: true, unit: tokens}\n"
                       "    algorithm: fixed_window\n"
                       "    limits: [{rate: 1000/h}]\n";
    fx f;
    if (!fx_open(&f, yaml)) return;
    sl_header h = {S("x-k"), S("k")};
    sl_request r = req("POST", "/", NULL);
    r.headers = &h;
    r.n_headers = 1;
    char tok[SL_TOKEN_MAX];
    static sl_verdict a;
    T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &a), SLUICE_OK);
    T_CHECK(sl_verdict_token(&a, tok, sizeof(tok)) > 0);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
    T_EQ_U(V.items[0].result.remaining, 800);
    T_EQ_I(settle_tok(&f, tok, 0, at_s(1)), SLUICE_OK); /* refund 100: 900 */
    /* replays refund nothing more, and the verdict form shares the single use */
    for (int i = 0; i < 5; i++) T_EQ_I(settle_tok(&f, tok, 0, at_s(1)), SLUICE_ENOTFOUND);
    T_EQ_I(sl_engine_settle(f.e, &a, 0, at_s(1)), SLUICE_ENOTFOUND);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(1), &V), SLUICE_OK);
    T_EQ_U(V.items[0].result.remaining, 800);
    /* a token survives a reload on the same store (new engine before the old goes) */
    T_EQ_I(sl_engine_check(f.e, &r, at_s(2), &V), SLUICE_OK);
    T_EQ_U(V.items[0].result.remaining, 700);
    T_CHECK(sl_verdict_token(&V, tok, sizeof(tok)) > 0);
    sl_config *c2 = load(yaml);
    int err;
    sl_engine *e2 = sl_engine_create(c2, f.st, &err, NULL, 0);
    T_CHECK(e2 != NULL);
    sl_engine_destroy(f.e);
    sl_config_destroy(f.cfg);
    f.e = e2;
    f.cfg = c2;
    T_EQ_I(settle_tok(&f, tok, 50, at_s(3)), SLUICE_OK); /* 750 */
    T_EQ_I(settle_tok(&f, tok, 0, at_s(3)), SLUICE_ENOTFOUND);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(3), &V), SLUICE_OK);
    T_EQ_U(V.items[0].result.remaining, 650);
    fx_close(&f);
}

static void release_tokens_single_use(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: gpu\n"
                     "    objective: protection\n"
                     "    key: [header.x-user]\n"
                     "    algorithm: concurrency\n"
                     "    limits: [{max: 3, lease: 60s}]\n"))
        return;
    char tok[SL_TOKEN_MAX];
    int inflight = 0;
    for (int i = 0; i < 3; i++) {
        sl_engine_acquire(f.e, "gpu", "alice", 5, at_s(0), &V);
        inflight += V.action == SL_ALLOW;
        if (i == 0) T_CHECK(sl_verdict_token(&V, tok, sizeof(tok)) > 0);
    }
    T_EQ_I(inflight, 3);
    T_EQ_I(sl_engine_release_token(f.e, tok, strlen(tok), at_s(1)), SLUICE_OK);
    sl_engine_acquire(f.e, "gpu", "alice", 5, at_s(1), &V);
    T_EQ_I(V.action, SL_ALLOW); /* the freed slot */
    for (int i = 0; i < 4; i++) {
        T_EQ_I(sl_engine_release_token(f.e, tok, strlen(tok), at_s(1)), SLUICE_ENOTFOUND);
        sl_engine_acquire(f.e, "gpu", "alice", 5, at_s(1), &V);
        T_EQ_I(V.action, SL_REJECT); /* still 3 in flight */
    }
    fx_close(&f);
}

/* A token table of a given capacity holds that many outstanding tokens, refuses more
 * (nothing lost: the reservation stands), and an entry expires with its window. */
static void token_table_bounded(void) {
    int err;
    sl_token_table *t = sl_token_table_create(1, &err);
    T_CHECK(t != NULL);
    size_t cap = sl_token_table_capacity(t);
    T_CHECK(cap >= 1);
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: w\n"
                     "    objective: cost\n"
                     "    key: []\n"
                     "    cost: {default: 1, settle: true}\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 1000000/min}]\n"))
        return;
    sl_engine *e = sl_engine_create_with(f.cfg, f.st, t, &err, NULL, 0);
    sl_request r = req("GET", "/", NULL);
    size_t issued = 0;
    for (size_t i = 0; i < cap + 64; i++) {
        sl_engine_check(e, &r, at_s(0), &V);
        issued += V.token_id != 0;
    }
    T_CHECK(issued <= cap);
    T_CHECK(issued >= cap / 2);
    /* one minute on, the window (and every entry) has expired: ids are issued again */
    sl_engine_check(e, &r, at_s(61), &V);
    T_CHECK(V.token_id != 0);
    sl_engine_destroy(e);
    sl_token_table_destroy(t);
    fx_close(&f);
}

/* Reserve 1000 at 23:59:59, settle to 0 after midnight: the refund does not make room in
 * the new day (which has its own 1000). */
static void refund_stays_in_its_period(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: day\n"
                     "    objective: cost\n"
                     "    key: []\n"
                     "    cost: {default: 1000, settle: true}\n"
                     "    algorithm: quota\n"
                     "    limits: [{quota: 1000/day}]\n"))
        return;
    sl_request r = req("GET", "/", NULL);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(-1), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_ALLOW);
    char tok[SL_TOKEN_MAX];
    T_CHECK(sl_verdict_token(&V, tok, sizeof(tok)) > 0);
    T_EQ_I(sl_engine_check(f.e, &r, at_s(1), &V), SLUICE_OK); /* the new day: 1000 */
    T_EQ_I(V.action, SL_ALLOW);
    T_EQ_I(settle_tok(&f, tok, 0, at_s(2)), SLUICE_OK); /* applies no refund: its day ended */
    T_EQ_I(sl_engine_check(f.e, &r, at_s(2), &V), SLUICE_OK);
    T_EQ_I(V.action, SL_REJECT); /* the new day's 1000 are spent */
    fx_close(&f);
}

/* ---- finding 8: count_rejected with several windows ----------------------------------- */

/* Charging the rejected 4th attempt fills the day as well: Retry-After must be the end of
 * the day, not the end of the minute (a retry then would be refused again). */
static void count_rejected_retry_after_exact(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: login\n"
                     "    objective: security\n"
                     "    key: [client_ip]\n"
                     "    algorithm: fixed_window\n"
                     "    count_rejected: true\n"
                     "    limits:\n"
                     "      - { name: login-min, rate: 3/min }\n"
                     "      - { name: login-day, quota: 4/day }\n"))
        return;
    sl_request r = req("POST", "/login", NULL);
    for (int i = 0; i < 3; i++) {
        sl_engine_check(f.e, &r, at_s(100), &V);
        T_EQ_I(V.action, SL_ALLOW);
    }
    sl_engine_check(f.e, &r, at_s(100), &V);
    T_EQ_I(V.action, SL_REJECT);
    T_EQ_I(V.retry_after_ns, (86400 - 100) * SEC);
    T_EQ_S(V.items[V.deciding].info->name, "login-day");
    int64_t ra = V.retry_after_ns / SEC;
    sl_engine_check(f.e, &r, at_s(100 + ra - 1), &V);
    T_EQ_I(V.action, SL_REJECT);
    sl_engine_check(f.e, &r, at_s(100 + ra), &V);
    T_EQ_I(V.action, SL_ALLOW);
    fx_close(&f);
}

/* ---- finding 5: limiter identities never collide -------------------------------------- */

static void envoy_identities_distinct(void) {
    fx f;
    if (!fx_open(&f, "domain: d\n"
                     "descriptors:\n"
                     "  - key: k\n"
                     "    value: \"v/x=y\"\n"
                     "    rate_limit: { unit: second, requests_per_unit: 1000 }\n"
                     "  - key: k\n"
                     "    value: v\n"
                     "    descriptors:\n"
                     "      - key: x\n"
                     "        value: y\n"
                     "        rate_limit: { unit: hour, requests_per_unit: 1 }\n"))
        return;
    T_EQ_U(sl_config_policy_count(f.cfg), 2);
    T_CHECK(strcmp(sl_config_policy_name(f.cfg, 0), sl_config_policy_name(f.cfg, 1)) != 0);
    sl_entry one = {S("k"), S("v/x=y")};
    sl_descriptor d = {&one, 1, false, 0, false, 0, 0};
    for (int i = 0; i < 3; i++) {
        sl_request r;
        memset(&r, 0, sizeof(r));
        r.domain = S("d");
        r.descriptors = &d;
        r.n_descriptors = 1;
        T_EQ_I(sl_engine_check(f.e, &r, at_s(0), &V), SLUICE_OK);
        T_EQ_I(V.action, SL_ALLOW); /* 1000/s, not the nested rule's 1/hour */
        T_EQ_U(V.items[0].result.limit, 1000);
    }
    fx_close(&f);
    /* values that differ only past 1023 bytes are two rules, not one */
    static char y[8192];
    static char v1[1500], v2[1500];
    memset(v1, 'a', 1400);
    v1[1400] = '\0';
    memcpy(v2, v1, sizeof(v1));
    v1[1300] = 'b';
    snprintf(y, sizeof(y), "domain: d\ndescriptors:\n"
             "  - {key: k, value: %s, rate_limit: {unit: second, requests_per_unit: 1}}\n"
             "  - {key: k, value: %s, rate_limit: {unit: hour, requests_per_unit: 5}}\n", v1, v2);
    sl_config *c = load(y);
    if (c != NULL) {
        T_CHECK(strcmp(sl_config_policy_name(c, 0), sl_config_policy_name(c, 1)) != 0);
        sl_config_destroy(c);
    }
}

static void plan_identity_not_truncated(void) {
    static char y[4096], pol[201], plan[201];
    memset(pol, 'p', 200);
    memset(plan, 'q', 100);
    snprintf(y, sizeof(y), "policies:\n"
             "  - name: %s\n"
             "    objective: plan\n"
             "    key: []\n"
             "    algorithm: gcra\n"
             "    limits: [{rate: 1/s}]\n"
             "    plan_from: header.x-plan\n"
             "    plans:\n"
             "      %sa: {limits: [{rate: 5/s}]}\n"
             "      %sb: {limits: [{rate: 50/s}]}\n", pol, plan, plan);
    refused_at(y, 9, 7, "more than a limit's identity holds");
}

/* ---- finding 12: reader errors where they are -------------------------------------------- */

static void reader_error_positions(void) {
    static const struct {
        const char *buf;
        size_t len;
        int line, col;
    } cases[] = {
        {"policies:\n  - name: a\x01b\n", 23, 2, 12},      /* control character */
        {"policies:\n  - name: \xc3\xa9\xff\n", 24, 2, 12}, /* é then a bad octet */
        {"a: 1\nb: 2\nc: x\0y\n", 16, 3, 5},             /* NUL */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sl_config *cfg = NULL;
        int rc = sl_config_load_buffer(cases[i].buf, cases[i].len, "t.yaml", &cfg, &DL);
        T_EQ_I(rc, SLUICE_EINVAL);
        T_CHECK(DL.n >= 1);
        if (DL.n == 0) continue;
        T_CHECK(strstr(DL.items[0].msg, "YAML") != NULL);
        T_EQ_I(DL.items[0].line, cases[i].line);
        T_EQ_I(DL.items[0].col, cases[i].col);
    }
}

/* A cost the client controls (a header, the body size) that reads 0 still costs 1. */
static void client_zero_cost_costs_one(void) {
    fx f;
    if (!fx_open(&f, "policies:\n"
                     "  - name: up\n"
                     "    objective: cost\n"
                     "    key: []\n"
                     "    cost: {from: body_bytes}\n"
                     "    algorithm: fixed_window\n"
                     "    limits: [{rate: 2/h}]\n"))
        return;
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        sl_request r = req("POST", "/", NULL);
        r.has_body_bytes = true;
        r.body_bytes = 0;
        sl_engine_check(f.e, &r, at_s(0), &V);
        admitted += V.action == SL_ALLOW;
        T_EQ_U(V.items[0].cost, 1);
    }
    T_EQ_I(admitted, 2);
    fx_close(&f);
}

/* ---- finding 11: duplicate checks on large files ---------------------------------------- */

/* 20000 policies (every name checked against every other) and a 20000-key mapping: the
 * duplicates are still found, each at the repeat with the first's position. */
static void duplicates_in_large_files(void) {
    size_t cap = 20000 * 120;
    char *y = malloc(cap);
    if (y == NULL) return;
    size_t o = (size_t)snprintf(y, cap, "policies:\n");
    for (int p = 0; p < 20000; p++)
        o += (size_t)snprintf(y + o, cap - o, " - {name: p%d, objective: cost, key: [], "
                              "algorithm: gcra, limits: [{rate: 1/s}]}\n", p == 19999 ? 7 : p);
    refused_at(y, 20001, 11, "duplicate policy name 'p7' (first defined at 9:4");
    o = (size_t)snprintf(y, cap, "policies:\n - name: h\n   objective: cost\n   key: []\n"
                         "   algorithm: gcra\n   limits: [{rate: 1/s}]\n"
                         "   match:\n     headers:\n");
    for (int k = 0; k < 20000; k++)
        o += (size_t)snprintf(y + o, cap - o, "       x-h%d: v\n", k == 19999 ? 3 : k);
    refused_at(y, 20008, 8, "duplicate field 'x-h3' in match.headers (first at 12:8");
    free(y);
}

/* Racing replays: four threads settle the same tokens at once; each token settles
 * exactly once. */
#define RACE_TOKENS 200
static fx race_f;
static char race_tok[RACE_TOKENS][SL_TOKEN_MAX];
static int race_ok[4];

static void *race_settle(void *arg) {
    int me = (int)(intptr_t)arg;
    for (int i = 0; i < RACE_TOKENS; i++)
        if (sl_engine_settle_token(race_f.e, race_tok[i], strlen(race_tok[i]), 0, at_s(1)) ==
            SLUICE_OK)
            race_ok[me]++;
    return NULL;
}

static void tokens_single_use_under_races(void) {
    if (!fx_open(&race_f, "policies:\n"
                          "  - name: r\n"
                          "    objective: cost\n"
                          "    key: []\n"
                          "    cost: {default: 1, settle: true}\n"
                          "    algorithm: fixed_window\n"
                          "    limits: [{rate: 1000000/h}]\n"))
        return;
    for (int i = 0; i < RACE_TOKENS; i++) {
        sl_request r = req("GET", "/", NULL);
        sl_engine_check(race_f.e, &r, at_s(0), &V);
        T_CHECK(sl_verdict_token(&V, race_tok[i], SL_TOKEN_MAX) > 0);
    }
    pthread_t th[4];
    for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, race_settle, (void *)(intptr_t)t);
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    T_EQ_I(race_ok[0] + race_ok[1] + race_ok[2] + race_ok[3], RACE_TOKENS);
    fx_close(&race_f);
}

int main(void) {
    T_RUN(sliding_log_state_bounded_at_load);
    T_RUN(engine_errors_are_not_store_failures);
    T_RUN(long_paths_and_hosts_still_match);
    T_RUN(empty_descriptor_value_is_missing);
    T_RUN(silent_values_refused);
    T_RUN(config_paths_normalised);
    T_RUN(limiter_count_refused_at_load);
    T_RUN(duplicate_window_names);
    T_RUN(settle_tokens_single_use);
    T_RUN(release_tokens_single_use);
    T_RUN(token_table_bounded);
    T_RUN(refund_stays_in_its_period);
    T_RUN(count_rejected_retry_after_exact);
    T_RUN(envoy_identities_distinct);
    T_RUN(plan_identity_not_truncated);
    T_RUN(reader_error_positions);
    T_RUN(client_zero_cost_costs_one);
    T_RUN(duplicates_in_large_files);
    T_RUN(tokens_single_use_under_races);
    return T_DONE();
}
