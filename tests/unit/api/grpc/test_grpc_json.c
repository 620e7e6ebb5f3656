/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_json.c -- the /json converter: proto3 JSON RateLimitRequest in (camelCase and
 * proto field names, 64-bit values as strings), decided as ShouldRateLimit, proto3 JSON
 * RateLimitResponse out with 200 (OK) / 429 (OVER_LIMIT) / 400 (bad request).
 */
#include <jansson.h>

#include "api/grpc/rls.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S

static const char CONFIG[] =
    "domain: rl\n"
    "descriptors:\n"
    "  - key: k\n"
    "    value: v\n"
    "    rate_limit: {unit: second, requests_per_unit: 2}\n";

static sluice_clock *clk;
static sluice_store *st;
static sl_config *cfg;
static sl_engine *eng;
static sl_verdict V;

/* A slow, obviously correct base64 decoder (RFC 4648, padded): the reference for rawBody. */
static size_t unb64(const char *in, char *out, size_t cap) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    if (n % 4 != 0) return (size_t)-1;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            const char *p = in[i + k] == '=' ? NULL : strchr(t, in[i + k]);
            if (in[i + k] == '=') pad++;
            else if (p == NULL || pad) return (size_t)-1;
            v = v << 6 | (p ? (uint32_t)(p - t) : 0);
        }
        for (int k = 0; k < 3 - pad; k++) {
            if (o == cap) return (size_t)-1;
            out[o++] = (char)(v >> (16 - 8 * k) & 0xff);
        }
    }
    return o;
}

static json_t *call(const char *body, int *http) {
    sl_rls_sync env = {.engine = eng, .lane = st, .now = sluice_clock_now(clk)};
    static char out[16384];
    int n = sl_rls_json_sync(&env, body, strlen(body), &V, out, sizeof(out), http);
    T_CHECK(n > 0);
    json_t *j = n > 0 ? json_loads(out, 0, NULL) : NULL;
    T_CHECK(j != NULL);
    return j;
}

static const char *sget(json_t *o, const char *path0, const char *k) {
    json_t *x = path0 ? json_object_get(o, path0) : o;
    const char *s = json_string_value(json_object_get(x, k));
    return s ? s : "(absent)";
}

static void ok_then_over(void) {
    int http = 0;
    const char *req = "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"value\":\"v\"}]}]}";
    json_t *j = call(req, &http);
    T_EQ_I(http, 200);
    T_EQ_S(sget(j, NULL, "overallCode"), "OK");
    json_t *s0 = json_array_get(json_object_get(j, "statuses"), 0);
    T_EQ_S(sget(s0, NULL, "code"), "OK");
    T_EQ_I(json_integer_value(json_object_get(s0, "limitRemaining")), 1);
    T_EQ_S(sget(s0, "currentLimit", "unit"), "SECOND");
    T_EQ_I(json_integer_value(json_object_get(json_object_get(s0, "currentLimit"), "requestsPerUnit")), 2);
    T_EQ_S(sget(s0, NULL, "durationUntilReset"), "1s");
    T_CHECK(json_object_get(j, "rawBody") == NULL);
    json_decref(j);
    /* proto field names and a string hits_addend are accepted too */
    j = call("{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"value\":\"v\"}],"
             "\"hits_addend\":\"1\"}]}", &http);
    T_EQ_I(http, 200);
    s0 = json_array_get(json_object_get(j, "statuses"), 0);
    T_CHECK(json_object_get(s0, "limitRemaining") == NULL); /* 0 is omitted in proto3 JSON */
    json_decref(j);
    j = call(req, &http);
    T_EQ_I(http, 429);
    T_EQ_S(sget(j, NULL, "overallCode"), "OVER_LIMIT");
    s0 = json_array_get(json_object_get(j, "statuses"), 0);
    T_EQ_S(sget(s0, NULL, "code"), "OVER_LIMIT");
    T_CHECK(json_object_get(j, "rawBody") != NULL);
    /* rawBody round-trips: base64 of the problem+json body the HTTP answer carries */
    char body[2048];
    size_t bl = unb64(sget(j, NULL, "rawBody"), body, sizeof(body) - 1);
    T_CHECK(bl != (size_t)-1 && bl > 0);
    if (bl != (size_t)-1) {
        body[bl] = 0;
        json_t *pb = json_loads(body, 0, NULL);
        T_CHECK(pb != NULL && json_object_get(pb, "status") != NULL);
        json_decref(pb);
    }
    bool retry = false;
    json_t *hs = json_object_get(j, "responseHeadersToAdd");
    for (size_t i = 0; i < json_array_size(hs); i++)
        if (strcmp(sget(json_array_get(hs, i), NULL, "key"), "Retry-After") == 0) retry = true;
    T_CHECK(retry);
    json_decref(j);
}

static void bad_requests(void) {
    static const char *const bad[] = {
        "not json",
        "[1]",
        "{\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"value\":\"v\"}]}]}",
        "{\"domain\":\"rl\"}",
        "{\"domain\":\"rl\",\"descriptors\":[]}",
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[]}]}",
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"\",\"value\":\"v\"}]}]}",
        "{\"domain\":\"rl\",\"hitsAddend\":-1,\"descriptors\":[{\"entries\":[{\"key\":\"k\"}]}]}",
        "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"k\"}],\"limit\":{\"unit\":\"FORTNIGHT\"}}]}",
        "{\"domain\":5,\"descriptors\":[{\"entries\":[{\"key\":\"k\"}]}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int http = 0;
        json_t *j = call(bad[i], &http);
        if (http != 400) T_FAIL("case %zu: http %d", i, http);
        T_EQ_I(json_integer_value(json_object_get(j, "code")), SL_GRPC_INVALID_ARGUMENT);
        json_decref(j);
    }
}

static void override_by_json(void) {
    int http = 0;
    const char *req = "{\"domain\":\"rl\",\"descriptors\":[{\"entries\":[{\"key\":\"x\",\"value\":\"y\"}],"
                      "\"limit\":{\"requestsPerUnit\":1,\"unit\":\"MINUTE\"}}]}";
    json_t *j = call(req, &http);
    T_EQ_I(http, 200);
    json_t *s0 = json_array_get(json_object_get(j, "statuses"), 0);
    T_EQ_S(sget(s0, "currentLimit", "unit"), "MINUTE");
    json_decref(j);
    j = call(req, &http);
    T_EQ_I(http, 429);
    json_decref(j);
}

int main(void) {
    static sl_diag_list dl;
    if (sl_config_load_buffer(CONFIG, sizeof(CONFIG) - 1, "t.yaml", &cfg, &dl) != SLUICE_OK) return 1;
    clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC);
    int err;
    st = sluice_store_create(NULL, &err);
    eng = sl_engine_create(cfg, st, &err, NULL, 0);
    T_RUN(ok_then_over);
    T_RUN(bad_requests);
    T_RUN(override_by_json);
    sl_engine_destroy(eng);
    sl_config_destroy(cfg);
    sluice_store_destroy(st);
    sluice_clock_destroy(clk);
    return T_DONE();
}
