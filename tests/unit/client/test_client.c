/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_client.c -- the client helpers (include/sluice_client.h): RateLimit-Policy and
 * RateLimit against the draft-11 examples and malformed fields, the draft-03 and X-
 * fallbacks, Retry-After in its three date forms, and a paced client against the real
 * engine on a fake clock (headers rendered by the server code, parsed by the client code)
 * that is never refused after its first answer.
 */
#include "engine/engine.h"
#include "sluice_client.h"
#include "t.h"

#define MS SLUICE_NS_PER_MS
#define SEC SLUICE_NS_PER_S

static sluice_ratelimit_policy P[8];
static sluice_ratelimit_item I[8];

static int pol(const char *v) { return sluice_ratelimit_parse_policy(v, strlen(v), P, 8); }
static int items(const char *v) { return sluice_ratelimit_parse(v, strlen(v), I, 8); }

static void test_policy_draft_examples(void) {
    T_EQ_I(pol("\"burst\";q=100;w=60,\"daily\";q=1000;w=86400"), 2);
    T_EQ_S(P[0].name, "burst");
    T_EQ_U(P[0].quota, 100);
    T_EQ_I(P[0].window_s, 60);
    T_EQ_S(P[0].unit, "requests");
    T_EQ_S(P[1].name, "daily");
    T_EQ_U(P[1].quota, 1000);
    T_EQ_I(P[1].window_s, 86400);
    T_EQ_I(pol("\"peruser\";q=65535;qu=\"content-bytes\";w=10;pk=:sdfjLJUOUH==:"), 1);
    T_EQ_S(P[0].name, "peruser");
    T_EQ_U(P[0].quota, 65535);
    T_EQ_S(P[0].unit, "content-bytes");
    T_EQ_I(P[0].window_s, 10);
    T_EQ_S(P[0].partition, "sdfjLJUOUH==");
    /* optional whitespace around commas and after semicolons, unknown parameters */
    T_EQ_I(pol("  \"a\"; q=5 ; acme-burst=3 ,\t\"b\";q=0  "), -1); /* space before ';' */
    T_EQ_I(pol("\"a\";q=5;acme-burst=3 ,\t\"b\";q=0;x=?1;y=:AA==:;z=tok/en"), 2);
    T_EQ_U(P[1].quota, 0);
    T_EQ_I(P[1].window_s, 0);
    T_EQ_I(pol(""), 0);
}

static void test_ratelimit_draft_examples(void) {
    T_EQ_I(items("\"default\";r=50;t=30"), 1);
    T_EQ_S(I[0].name, "default");
    T_EQ_U(I[0].remaining, 50);
    T_EQ_I(I[0].reset_s, 30);
    T_EQ_I(items("\"default\";r=999;pk=:dHJpYWwxMjEzMjM=:"), 1);
    T_EQ_U(I[0].remaining, 999);
    T_EQ_I(I[0].reset_s, -1);
    T_EQ_S(I[0].partition, "dHJpYWwxMjEzMjM=");
    T_EQ_I(items("\"esc\\\"aped\\\\\";r=1"), 1);
    T_EQ_S(I[0].name, "esc\"aped\\");
}

static void test_malformed_fields(void) {
    /* not a List at all: the whole field is invalid */
    const char *bad[] = {
        "\"a\";q=1,",                 /* trailing comma */
        "\"a;q=1",                    /* unterminated string */
        "\"a\";Q=1",                  /* upper-case key */
        "\"a\";q=1234567890123456",   /* 16 digits */
        "\"a\\x\";q=1",               /* bad escape */
        "\"a\";q=1 \"b\";q=2",        /* missing comma */
        "\"a\";q=:not base64!:",
        "\"caf\xc3\xa9\";q=1",        /* non-ASCII in a string */
        ",\"a\";q=1",
        "\"a\";q=1;;w=2",
        "\"a\";q=1.",                 /* decimal without fraction */
        "\"a\";q=?2",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (pol(bad[i]) != SLUICE_EINVAL) T_FAIL("accepted: %s", bad[i]);
    }
    /* valid Lists whose members are not usable: skipped, the others kept */
    T_EQ_I(pol("a;q=1,\"b\";q=2"), 1);               /* a token, not a string */
    T_EQ_S(P[0].name, "b");
    T_EQ_I(pol("\"a\";q=-1,\"b\";q=1.5,\"c\";w=5,\"d\";q=1;w=0,\"e\";q=\"1\""), 0);
    T_EQ_I(pol("(\"a\" \"b\");q=1,\"c\";q=3"), 1);   /* an inner list */
    T_EQ_I(items("\"a\";t=3,\"b\";r=2;t=-1,\"c\";r=4"), 1);
    T_EQ_S(I[0].name, "c");
    char longname[200];
    memset(longname, 'n', sizeof(longname));
    longname[0] = '"';
    strcpy(longname + 100, "\";r=1");
    T_EQ_I(items(longname), 0); /* a name we cannot keep is not guessed at */
    /* more members than room: counted, only cap written */
    T_EQ_I(sluice_ratelimit_parse_policy("\"a\";q=1,\"b\";q=2,\"c\";q=3", 23, P, 2), 3);
}

static void test_retry_after(void) {
    int64_t now = INT64_C(784111777) * SEC; /* Sun, 06 Nov 1994 08:49:37 GMT */
    int64_t d = -5;
    T_EQ_I(sluice_client_retry_after("120", 3, now, &d), SLUICE_OK);
    T_EQ_I(d, 120 * SEC);
    T_EQ_I(sluice_client_retry_after(" 0 ", 3, now, &d), SLUICE_OK);
    T_EQ_I(d, 0);
    const char *imf = "Sun, 06 Nov 1994 08:50:07 GMT";
    T_EQ_I(sluice_client_retry_after(imf, strlen(imf), now, &d), SLUICE_OK);
    T_EQ_I(d, 30 * SEC);
    const char *rfc850 = "Sunday, 06-Nov-94 08:49:47 GMT";
    T_EQ_I(sluice_client_retry_after(rfc850, strlen(rfc850), now, &d), SLUICE_OK);
    T_EQ_I(d, 10 * SEC);
    const char *asc = "Sun Nov  6 08:49:57 1994";
    T_EQ_I(sluice_client_retry_after(asc, strlen(asc), now, &d), SLUICE_OK);
    T_EQ_I(d, 20 * SEC);
    /* a date in the past is "now"; a fraction of the current second is not waited twice */
    T_EQ_I(sluice_client_retry_after(imf, strlen(imf), now + 100 * SEC, &d), SLUICE_OK);
    T_EQ_I(d, 0);
    T_EQ_I(sluice_client_retry_after(imf, strlen(imf), now + 250 * MS, &d), SLUICE_OK);
    T_EQ_I(d, 30 * SEC - 250 * MS);
    /* the RFC's leap-year arithmetic: 2024-02-29 and 2100-03-01 */
    const char *leap = "Thu, 29 Feb 2024 00:00:00 GMT";
    T_EQ_I(sluice_client_retry_after(leap, strlen(leap), INT64_C(1709164800) * SEC - SEC, &d),
           SLUICE_OK);
    T_EQ_I(d, SEC);
    const char *far = "Mon, 01 Mar 2100 00:00:00 GMT";
    T_EQ_I(sluice_client_retry_after(far, strlen(far), INT64_C(4107542400) * SEC, &d), SLUICE_OK);
    T_EQ_I(d, 0);
    T_EQ_I(sluice_client_retry_after(far, strlen(far), INT64_C(4107542399) * SEC, &d), SLUICE_OK);
    T_EQ_I(d, SEC);
    const char *bad[] = {"", "-1", "1.5", "12s", "Sun, 06 Nov 1994 08:49:37 UTC",
                         "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT",
                         "Sunday, 06 Nov 1994 08:49:37 GMT", "Sun Nov 06 08:49:37 94"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (sluice_client_retry_after(bad[i], strlen(bad[i]), now, &d) != SLUICE_EINVAL)
            T_FAIL("accepted Retry-After: '%s'", bad[i]);
}

static void feed(sluice_ratelimit_info *info, const char *name, const char *value, int64_t now) {
    sluice_client_info_header(info, name, strlen(name), value, strlen(value), now);
}

static void test_info_sources(void) {
    sluice_ratelimit_info info;
    int64_t now = INT64_C(1372700000) * SEC;
    /* two lines of one field combine; case does not matter */
    sluice_client_info_init(&info);
    feed(&info, "ratelimit-policy", "\"burst\";q=100;w=60", now);
    feed(&info, "RateLimit-Policy", "\"daily\";q=1000;w=86400", now);
    feed(&info, "RATELIMIT", "\"burst\";r=3;t=5", now);
    feed(&info, "X-RateLimit-Remaining", "7", now); /* lower precedence */
    feed(&info, "Content-Type", "text/plain", now);
    sluice_client_info_finish(&info);
    T_EQ_I(info.source, SLUICE_RL_DRAFT11);
    T_EQ_U(info.n_policies, 2);
    T_EQ_U(info.n_items, 1);
    T_EQ_U(info.items[0].remaining, 3);
    T_EQ_I(info.has_retry_after, 0);
    /* one malformed line makes the whole field invalid */
    sluice_client_info_init(&info);
    feed(&info, "RateLimit-Policy", "\"burst\";q=100;w=60", now);
    feed(&info, "RateLimit-Policy", "\"daily\";q=1000;w=", now);
    feed(&info, "RateLimit-Policy", "\"other\";q=5", now);
    feed(&info, "Retry-After", "soon", now);
    sluice_client_info_finish(&info);
    T_EQ_U(info.n_policies, 0);
    T_CHECK(info.invalid & SLUICE_RL_BAD_POLICY);
    T_CHECK(info.invalid & SLUICE_RL_BAD_RETRY_AFTER);
    T_EQ_I(info.source, SLUICE_RL_NONE);
    /* draft-03 with the policies inside the limit field */
    sluice_client_info_init(&info);
    feed(&info, "RateLimit-Limit", "10, 10;w=1, 50;w=60", now);
    feed(&info, "RateLimit-Remaining", "4", now);
    feed(&info, "RateLimit-Reset", "1", now);
    feed(&info, "Retry-After", "2", now);
    sluice_client_info_finish(&info);
    T_EQ_I(info.source, SLUICE_RL_DRAFT03);
    T_EQ_U(info.policies[0].quota, 10);
    T_EQ_I(info.policies[0].window_s, 1);
    T_EQ_U(info.items[0].remaining, 4);
    T_EQ_I(info.items[0].reset_s, 1);
    T_EQ_I(info.retry_after_ns, 2 * SEC);
    /* GitHub: reset as epoch seconds; Twitter's spelling */
    sluice_client_info_init(&info);
    feed(&info, "x-ratelimit-limit", "5000", now);
    feed(&info, "x-ratelimit-remaining", "0", now);
    feed(&info, "x-ratelimit-reset", "1372700873", now);
    sluice_client_info_finish(&info);
    T_EQ_I(info.source, SLUICE_RL_X);
    T_EQ_U(info.policies[0].quota, 5000);
    T_EQ_I(info.items[0].reset_s, 873);
    sluice_client_info_init(&info);
    feed(&info, "x-rate-limit-remaining", "12", now);
    feed(&info, "x-rate-limit-reset", "1372700010000", now); /* epoch ms */
    sluice_client_info_finish(&info);
    T_EQ_U(info.n_policies, 0);
    T_EQ_U(info.items[0].remaining, 12);
    T_EQ_I(info.items[0].reset_s, 10);
    sluice_client_info_init(&info);
    feed(&info, "X-RateLimit-Remaining", "many", now);
    sluice_client_info_finish(&info);
    T_EQ_I(info.source, SLUICE_RL_NONE);
    T_CHECK(info.invalid & SLUICE_RL_BAD_LEGACY);
}

/* ---- the pacer against the real engine --------------------------------------------------- */

typedef struct srv {
    sl_config *cfg;
    sluice_store *st;
    sl_engine *e;
} srv;

static bool srv_open(srv *s, const char *yaml) {
    memset(s, 0, sizeof(*s));
    static sl_diag_list dl;
    if (sl_config_load_buffer(yaml, strlen(yaml), "t.yaml", &s->cfg, &dl) != SLUICE_OK) {
        T_FAIL("load: %s", dl.n ? dl.items[0].msg : "?");
        return false;
    }
    int err;
    s->st = sluice_store_create(NULL, &err);
    s->e = sl_engine_create(s->cfg, s->st, &err, NULL, 0);
    T_CHECK(s->e != NULL);
    return s->e != NULL;
}

static void srv_close(srv *s) {
    sl_engine_destroy(s->e);
    sluice_store_destroy(s->st);
    sl_config_destroy(s->cfg);
}

/* Decides one request at `at` and turns the rendered headers into `info` as a client
 * would read them off the wire. Returns the HTTP status. */
static int srv_answer(srv *s, int64_t at, sluice_ratelimit_info *info) {
    static sl_verdict v;
    static char h[4096];
    sl_header hd = {{"x-api-key", 9}, {"client-1", 8}};
    sl_request rq = {.method = {"GET", 3}, .path = {"/v1/x", 5}, .headers = &hd, .n_headers = 1};
    sluice_time now = {at, INT64_C(1767225600) * SEC + at};
    T_EQ_I(sl_engine_check(s->e, &rq, now, &v), SLUICE_OK);
    T_CHECK(sl_render_headers(&v, h, sizeof(h), 0) >= 0);
    sluice_client_info_init(info);
    for (char *line = h; *line;) {
        char *colon = strchr(line, ':'), *eol = strstr(line, "\r\n");
        if (colon == NULL || eol == NULL) break;
        sluice_client_info_header(info, line, (size_t)(colon - line), colon + 2,
                                  (size_t)(eol - colon - 2), now.wall_ns);
        line = eol + 2;
    }
    sluice_client_info_finish(info);
    return v.action == SL_REJECT ? 429 : 200;
}

/* A client that would like 50 requests/s, `conc` at a time, with a 4 ms round trip
 * (decided 2 ms after sending), against 10/s burst 20: after its first answer it is never
 * refused, and it still gets close to the 10/s it is allowed. */
static void paced_run(const char *yaml, int conc, int64_t run_ns, uint64_t *sent,
                      uint64_t *refused_after_first) {
    srv s;
    if (!srv_open(&s, yaml)) return;
    sluice_client_pacer *p = sluice_client_pacer_create(NULL);
    int64_t t = SEC, end = SEC + run_ns;
    int64_t want_gap = 20 * MS;
    int64_t next_free[8] = {0};
    bool answered = false;
    *sent = *refused_after_first = 0;
    typedef struct pending { int64_t at; int status; sluice_ratelimit_info info; } pending;
    static pending q[8];
    int nq = 0;
    while (t < end) {
        /* deliver answers that have arrived by t, in order */
        for (;;) {
            int first = -1;
            for (int i = 0; i < nq; i++)
                if (q[i].at <= t && (first < 0 || q[i].at < q[first].at)) first = i;
            if (first < 0) break;
            sluice_client_pacer_update(p, q[first].status, &q[first].info, q[first].at);
            if (q[first].status == 429 && answered) ++*refused_after_first;
            answered = true;
            q[first] = q[--nq];
        }
        int slot = -1;
        for (int i = 0; i < conc; i++)
            if (next_free[i] <= t) slot = i;
        int64_t w = sluice_client_pacer_wait(p, 1, t);
        if (slot < 0 || w > 0 || nq >= conc) {
            t += w > 0 && w < MS ? w : MS;
            continue;
        }
        sluice_client_pacer_sent(p, 1, t);
        ++*sent;
        q[nq].status = srv_answer(&s, t + 2 * MS, &q[nq].info);
        q[nq].at = t + 4 * MS;
        nq++;
        next_free[slot] = t + want_gap;
        t += 1;
    }
    sluice_client_pacer_destroy(p);
    srv_close(&s);
}

static const char *TB =
    "policies:\n  - name: api\n    objective: fairness\n    key: [header.x-api-key]\n"
    "    algorithm: token_bucket\n    limits: [ { rate: 10/s, burst: 20 } ]\n";
static const char *FW =
    "policies:\n  - name: api\n    objective: fairness\n    key: [header.x-api-key]\n"
    "    algorithm: fixed_window\n    limits: [ { rate: 10/s }, { rate: 100/min } ]\n";

static void test_pacer_against_engine(void) {
    uint64_t sent, refused;
    paced_run(TB, 1, 10 * SEC, &sent, &refused);
    T_EQ_U(refused, 0);
    /* the server would take 20 at once, then 10/s: 120 in 10 s. The draft's rule (at most
     * r within t) makes the pacer wait out t after spending its burst, so it keeps to the
     * long-run rate instead: about 100, never above 120 */
    if (sent < 90 || sent > 121) T_FAIL("token bucket, 1 in flight: sent %llu", (unsigned long long)sent);
    paced_run(TB, 4, 10 * SEC, &sent, &refused);
    T_EQ_U(refused, 0);
    if (sent < 90 || sent > 121) T_FAIL("token bucket, 4 in flight: sent %llu", (unsigned long long)sent);
    /* fixed windows: 10/s and 100/min; the minute allows 100, the pacer must not exceed it */
    paced_run(FW, 2, 30 * SEC, &sent, &refused);
    T_EQ_U(refused, 0);
    if (sent < 90 || sent > 100) T_FAIL("fixed windows: sent %llu", (unsigned long long)sent);
}

static void test_pacer_rules(void) {
    sluice_client_pacer *p = sluice_client_pacer_create(NULL);
    T_EQ_I(sluice_client_pacer_wait(p, 1, 0), 0); /* nothing known: go */
    sluice_ratelimit_info info;
    sluice_client_info_init(&info);
    feed(&info, "RateLimit-Policy", "\"a\";q=10;w=1", 0);
    feed(&info, "RateLimit", "\"a\";r=0;t=1", 0);
    sluice_client_info_finish(&info);
    sluice_client_pacer_sent(p, 1, 0);
    sluice_client_pacer_update(p, 200, &info, 10 * MS);
    /* r=0 within t=1 s: wait until t has passed, though the bucket refills sooner */
    T_EQ_I(sluice_client_pacer_wait(p, 1, 10 * MS), SEC);
    T_EQ_I(sluice_client_pacer_wait(p, 1, SEC + 10 * MS), 0);
    /* Retry-After takes precedence over everything else */
    sluice_client_info_init(&info);
    feed(&info, "RateLimit", "\"a\";r=5", 0);
    feed(&info, "Retry-After", "3", 0);
    sluice_client_info_finish(&info);
    sluice_client_pacer_sent(p, 1, 2 * SEC);
    sluice_client_pacer_update(p, 429, &info, 2 * SEC);
    T_EQ_I(sluice_client_pacer_wait(p, 1, 2 * SEC), 3 * SEC);
    /* a refusal without any hint holds one second */
    sluice_client_pacer_sent(p, 1, 10 * SEC);
    sluice_client_pacer_update(p, 503, NULL, 10 * SEC);
    T_EQ_I(sluice_client_pacer_wait(p, 1, 10 * SEC), SEC);
    /* bucket refill: q=10 per 1 s, empty -> 100 ms per unit; 5 units -> 500 ms */
    sluice_client_info_init(&info);
    feed(&info, "RateLimit", "\"a\";r=0", 0);
    sluice_client_info_finish(&info);
    sluice_client_pacer_sent(p, 1, 20 * SEC);
    sluice_client_pacer_update(p, 200, &info, 20 * SEC);
    T_EQ_I(sluice_client_pacer_wait(p, 1, 20 * SEC), 100 * MS);
    T_EQ_I(sluice_client_pacer_wait(p, 5, 20 * SEC), 500 * MS);
    T_EQ_I(sluice_client_pacer_wait(p, 50, 20 * SEC), SEC); /* above q: a full bucket */
    sluice_client_pacer_destroy(p);
}

/* ---- retries --------------------------------------------------------------------------- */

static uint64_t seeded(void *ctx) { return t_rand((uint64_t *)ctx); }

static void test_retry_full_jitter(void) {
    uint64_t seed = t_seed();
    sluice_client_retry_options o = {.base_ns = 100 * MS, .cap_ns = 1 * SEC, .max_attempts = 8,
                                     .budget_ns = 3600 * SEC, .random = seeded,
                                     .random_ctx = &seed};
    sluice_client_retry *r = sluice_client_retry_create(&o, NULL);
    /* for each retry n the delay is uniform on [0, min(cap, base * 2^n)] */
    enum { N = 20000 };
    for (unsigned n = 0; n < 6; n++) {
        int64_t ceil = 100 * MS << n;
        if (ceil > SEC) ceil = SEC;
        double sum = 0, sumsq = 0;
        int below_quarter = 0, above_3q = 0;
        int64_t lo = INT64_MAX, hi = 0;
        for (int i = 0; i < N; i++) {
            sluice_client_retry_start(r, 1, 0);
            int64_t d = -1;
            for (unsigned k = 0; k <= n; k++)
                T_EQ_I(sluice_client_retry_next(r, 503, -1, 0, &d), SLUICE_CLIENT_RETRY);
            if (d < lo) lo = d;
            if (d > hi) hi = d;
            sum += (double)d / ceil;
            sumsq += ((double)d / ceil) * ((double)d / ceil);
            below_quarter += d < ceil / 4;
            above_3q += d > ceil / 4 * 3;
        }
        double mean = sum / N, var = sumsq / N - mean * mean;
        T_CHECK(lo >= 0 && hi <= ceil);
        /* uniform on [0,1]: mean 1/2, variance 1/12, quarters 1/4 each (about 5 sigma) */
        if (mean < 0.49 || mean > 0.51) T_FAIL("retry %u: mean %.4f of the ceiling", n, mean);
        if (var < 0.0800 || var > 0.0867) T_FAIL("retry %u: variance %.4f", n, var);
        if (below_quarter < N / 4 - 300 || below_quarter > N / 4 + 300)
            T_FAIL("retry %u: %d below a quarter", n, below_quarter);
        if (above_3q < N / 4 - 300 || above_3q > N / 4 + 300)
            T_FAIL("retry %u: %d above three quarters", n, above_3q);
        if (hi < ceil - ceil / 100) T_FAIL("retry %u: the ceiling is never approached", n);
    }
    sluice_client_retry_destroy(r);
}

static void test_retry_limits(void) {
    uint64_t seed = t_seed();
    sluice_client_retry_options o = {.base_ns = SEC, .cap_ns = 8 * SEC, .max_attempts = 4,
                                     .budget_ns = 10 * SEC, .random = seeded, .random_ctx = &seed};
    sluice_client_retry *r = sluice_client_retry_create(&o, NULL);
    int64_t d;
    /* what is not retried */
    sluice_client_retry_start(r, 1, 0);
    T_EQ_I(sluice_client_retry_next(r, 200, -1, 0, &d), SLUICE_CLIENT_DONE);
    T_EQ_I(sluice_client_retry_next(r, 404, -1, 0, &d), SLUICE_CLIENT_DONE);
    T_EQ_I(sluice_client_retry_next(r, 500, -1, 0, &d), SLUICE_CLIENT_DONE);
    sluice_client_retry_start(r, sluice_client_is_idempotent("POST"), 0);
    T_EQ_I(sluice_client_retry_next(r, 503, -1, 0, &d), SLUICE_CLIENT_NOT_IDEMPOTENT);
    T_EQ_I(sluice_client_retry_next(r, 0, -1, 0, &d), SLUICE_CLIENT_NOT_IDEMPOTENT);
    T_CHECK(sluice_client_is_idempotent("PUT") && sluice_client_is_idempotent("GET"));
    T_CHECK(!sluice_client_is_idempotent("PATCH"));
    /* attempts: 4 in all, so three retries */
    for (int rep = 0; rep < 200; rep++) {
        sluice_client_retry_start(r, 1, 0);
        int64_t now = 0;
        int retries = 0;
        sluice_client_retry_verdict v;
        while ((v = sluice_client_retry_next(r, 429, -1, now, &d)) == SLUICE_CLIENT_RETRY) {
            now += d;
            retries++;
            /* every retry starts within the budget */
            T_CHECK(now <= 10 * SEC);
        }
        T_CHECK(retries <= 3);
        T_CHECK(v == SLUICE_CLIENT_NO_ATTEMPTS || v == SLUICE_CLIENT_NO_BUDGET);
        if (retries < 3) T_EQ_I(v, SLUICE_CLIENT_NO_BUDGET);
    }
    /* Retry-After is a floor; jitter comes on top, within the budget */
    for (int rep = 0; rep < 200; rep++) {
        sluice_client_retry_start(r, 1, 0);
        T_EQ_I(sluice_client_retry_next(r, 429, 4 * SEC, 0, &d), SLUICE_CLIENT_RETRY);
        T_CHECK(d >= 4 * SEC && d <= 5 * SEC);
        T_EQ_I(sluice_client_retry_next(r, 429, 8 * SEC, 3 * SEC, &d), SLUICE_CLIENT_NO_BUDGET);
        T_EQ_I(sluice_client_retry_next(r, 429, 6 * SEC, 3 * SEC, &d), SLUICE_CLIENT_RETRY);
        T_CHECK(d >= 6 * SEC && d <= 7 * SEC);
    }
    /* a budget already spent */
    sluice_client_retry_start(r, 1, 0);
    T_EQ_I(sluice_client_retry_next(r, 503, -1, 10 * SEC, &d), SLUICE_CLIENT_NO_BUDGET);
    sluice_client_retry_destroy(r);
    int err = 0;
    o.cap_ns = -1;
    T_CHECK(sluice_client_retry_create(&o, &err) == NULL && err == SLUICE_EINVAL);
    /* the built-in generator: two helpers do not draw the same delays */
    sluice_client_retry *a = sluice_client_retry_create(NULL, NULL);
    sluice_client_retry *b = sluice_client_retry_create(NULL, NULL);
    int same = 0;
    for (int i = 0; i < 16; i++) {
        int64_t da, db;
        sluice_client_retry_start(a, 1, 0);
        sluice_client_retry_start(b, 1, 0);
        sluice_client_retry_next(a, 503, -1, 0, &da);
        sluice_client_retry_next(b, 503, -1, 0, &db);
        same += da == db;
    }
    T_CHECK(same < 4);
    sluice_client_retry_destroy(a);
    sluice_client_retry_destroy(b);
    T_EQ_S(sluice_client_retry_verdict_name(SLUICE_CLIENT_NO_BUDGET), "budget spent");
}

int main(void) {
    T_RUN(test_policy_draft_examples);
    T_RUN(test_ratelimit_draft_examples);
    T_RUN(test_malformed_fields);
    T_RUN(test_retry_after);
    T_RUN(test_info_sources);
    T_RUN(test_pacer_rules);
    T_RUN(test_pacer_against_engine);
    T_RUN(test_retry_full_jitter);
    T_RUN(test_retry_limits);
    return T_DONE();
}
