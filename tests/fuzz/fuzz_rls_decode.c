/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_rls_decode.c -- the ShouldRateLimit request path on arbitrary bytes: protobuf-c
 * unpacking (heap and the per-thread arena), validation, the decision and the packed
 * response, plus the /json converter and Health/Check on the same input. Checks that
 * every accepted request gets one status per descriptor and an explicit overall code.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/grpc/rls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char CONFIG[] =
    "domain: rl\n"
    "descriptors:\n"
    "  - key: k\n"
    "    value: v\n"
    "    rate_limit: {unit: minute, requests_per_unit: 10}\n"
    "  - key: k\n"
    "    value: \"w*\"\n"
    "    rate_limit: {unit: second, requests_per_unit: 1}\n"
    "  - key: k\n"
    "    descriptors:\n"
    "      - key: user\n"
    "        rate_limit: {unit: hour, requests_per_unit: 3, name: per_user}\n"
    "        shadow_mode: true\n"
    "  - key: free\n"
    "    rate_limit: {unlimited: true}\n"
    "  - key: block\n"
    "    rate_limit: {unit: second, requests_per_unit: 0}\n";

static sl_rls_sync sync;
static sl_grpc_env env;
static sl_verdict V;

static int decide(void *ud, void *call, const sl_rls_req *rq, sl_grpc_reply *out) {
    (void)ud;
    (void)call;
    return sl_rls_reply_sync(&sync, rq, out);
}

static void setup(void) {
    static sl_diag_list dl;
    static sl_config *cfg;
    if (sl_config_load_buffer(CONFIG, sizeof(CONFIG) - 1, "fuzz.yaml", &cfg, &dl) != 0) abort();
    int err;
    sluice_store *st = sluice_store_create(NULL, &err);
    sluice_clock *clk = sluice_clock_create_manual(INT64_C(1767225600) * SLUICE_NS_PER_S);
    env.engine = sl_engine_create(cfg, st, &err, NULL, 0);
    if (env.engine == NULL) abort();
    env.decide = decide;
    sync = (sl_rls_sync){.engine = env.engine, .lane = st, .now = sluice_clock_now(clk)};
    sluice_clock_destroy(clk);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (env.engine == NULL) setup();
    static sl_rls_req rq;
    static sl_rls_answer ans;
    static uint8_t out[32768];
    char err[160];
    Envoy__Service__Ratelimit__V3__RateLimitRequest *m =
        envoy__service__ratelimit__v3__rate_limit_request__unpack(NULL, size, data);
    if (m != NULL) {
        int st = sl_rls_from_proto(m, &rq, err, sizeof(err));
        if (st == SL_GRPC_OK) st = sl_rls_decide_sync(&sync, &rq, &V, &ans, err, sizeof(err));
        if (st == SL_GRPC_OK) {
            if (ans.overall != SL_RLS_OK && ans.overall != SL_RLS_OVER_LIMIT) abort();
            if (ans.n != m->n_descriptors) abort();
            size_t n = sl_rls_pack(&ans, out, sizeof(out));
            if (n == 0) abort();
            Envoy__Service__Ratelimit__V3__RateLimitResponse *r =
                envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, n, out);
            if (r == NULL || r->n_statuses != m->n_descriptors || r->overall_code == 0) abort();
            envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(r, NULL);
        }
        envoy__service__ratelimit__v3__rate_limit_request__free_unpacked(m, NULL);
    }
    sl_grpc_reply rep = {.buf = out, .cap = sizeof(out)};
    if (sl_grpc_call(&env, NULL, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 61,
                     data, size, &rep) != 0)
        abort(); /* this decide never parks */
    if (rep.status == SL_GRPC_OK && rep.len == 0) abort(); /* overall_code is never omitted */
    sl_grpc_call(&env, NULL, "/grpc.health.v1.Health/Check", 28, data, size, &rep);
    static char js[32768];
    int http = 0;
    int n = sl_rls_json_sync(&sync, (const char *)data, size, &V, js, sizeof(js), &http);
    if (n >= 0 && http != 200 && http != 429 && http != 400 && http != 500) abort();
    return 0;
}
