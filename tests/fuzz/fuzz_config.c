/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_config.c -- the config loader on arbitrary bytes: it must return a valid config
 * or diagnostics, never crash, leak or read out of bounds; a config that loads must
 * also compile into an engine and answer a check.
 */
#include <stdint.h>
#include <string.h>

#include "engine/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Tokens come back from the network (/v1/settle, /v1/release): the same bytes are also
 * tried as a token against a fixed engine. */
static void fuzz_token(const uint8_t *data, size_t size) {
    static sl_config *cfg;
    static sluice_store *st;
    static sl_engine *e;
    if (e == NULL) {
        static const char y[] = "policies:\n  - {name: t, objective: cost, key: [], algorithm: gcra,\n"
                                "      cost: {default: 5, settle: true}, limits: [{rate: 10/s, burst: 100}]}\n";
        int err;
        if (sl_config_load_buffer(y, sizeof(y) - 1, "t", &cfg, NULL) != SLUICE_OK) return;
        st = sluice_store_create(NULL, &err);
        e = sl_engine_create(cfg, st, &err, NULL, 0);
        if (e == NULL) return;
    }
    sluice_time now = {INT64_C(1000000000), INT64_C(1767225600000000000)};
    sl_engine_settle_token(e, (const char *)data, size, 3, now);
    sl_engine_release_token(e, (const char *)data, size, now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static sl_diag_list dl;
    fuzz_token(data, size);
    sl_config *cfg = NULL;
    int rc = sl_config_load_buffer((const char *)data, size, "fuzz.yaml", &cfg, &dl);
    if (rc != SLUICE_OK) {
        char line[600];
        for (size_t i = 0; i < dl.n; i++) sl_diag_format(&dl, i, line, sizeof(line));
        return 0;
    }
    int err;
    sluice_store_options so = {.max_keys = 1024}; /* small: a store per input */
    sluice_store *st = sluice_store_create(&so, &err);
    sl_engine *e = st ? sl_engine_create(cfg, st, &err, NULL, 0) : NULL;
    if (e != NULL) {
        static sl_verdict v;
        sl_header h[2] = {{{"x-api-key", 9}, {"k", 1}}, {{"x-plan", 6}, {"pro", 3}}};
        sl_request r = {.method = {"POST", 4}, .path = {"/v1/export", 10},
                        .client_ip = {"2001:db8::1", 11}, .headers = h, .n_headers = 2};
        sluice_time now = {INT64_C(1000000000), INT64_C(1767225600000000000)};
        sl_engine_check(e, &r, now, &v);
        char buf[2048];
        sl_render_headers(&v, buf, sizeof(buf), SL_RENDER_LEGACY);
        sl_render_problem(&v, NULL, buf, sizeof(buf));
        sl_render_json(&v, true, buf, sizeof(buf));
        sl_entry en[2] = {{{"remote_address", 14}, {"1.2.3.4", 7}}, {{"user", 4}, {"u", 1}}};
        sl_descriptor d = {.entries = en, .n = 2};
        sl_request q = {.domain = {"edge", 4}, .descriptors = &d, .n_descriptors = 1};
        sl_engine_check(e, &q, now, &v);
        sl_engine_destroy(e);
    }
    sluice_store_destroy(st);
    sl_config_destroy(cfg);
    return 0;
}
