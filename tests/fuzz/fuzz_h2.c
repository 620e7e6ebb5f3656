/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_h2.c -- the HTTP/2 request path on arbitrary bytes after a valid client preface
 * and SETTINGS: frames of any kind, HPACK blocks, gRPC prefixes and messages reach the
 * session (in two feeds, split where the first byte says), its output is drained, a
 * deadline tick and a GOAWAY run, and the session is destroyed with whatever is open.
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
    "    rate_limit: {unit: minute, requests_per_unit: 5}\n";

static sl_grpc_env env;
static sl_rls_sync sync;

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
    env.mono_ns = 1000 * SLUICE_NS_PER_S;
    sluice_clock_destroy(clk);
}

static void drain(sl_h2 *h) {
    static uint8_t out[1 << 16];
    for (int i = 0; i < 1024 && sl_h2_send(h, out, sizeof(out)) > 0; i++) {
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (env.engine == NULL) setup();
    static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
                                     "\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    sl_h2 *h = sl_h2_create(&(sl_h2_opts){.max_message = 4096, .max_header_list = 2048});
    if (h == NULL) return 0;
    env.mono_ns = 1000 * SLUICE_NS_PER_S;
    int rc = sl_h2_feed(h, preface, sizeof(preface) - 1, &env);
    if (rc != 0) abort();
    drain(h);
    size_t split = size ? data[0] % (size + 1) : 0;
    if (sl_h2_feed(h, data, split, &env) == 0) {
        drain(h);
        env.mono_ns += SLUICE_NS_PER_S;
        sl_h2_feed(h, data + split, size - split, &env);
    }
    drain(h);
    env.mono_ns += 3600 * SLUICE_NS_PER_S;
    sl_h2_tick(h, &env);
    sl_h2_goaway(h, env.mono_ns);
    env.mono_ns += SL_H2_GOAWAY_GRACE_NS;
    sl_h2_tick(h, &env);
    drain(h);
    (void)sl_h2_alive(h);
    sl_h2_destroy(h);
    return 0;
}
