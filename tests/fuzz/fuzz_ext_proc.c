/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_ext_proc.c -- what sluice's ext_proc service does to bytes an Envoy sends: the
 * ProcessingRequest unpacked (Envoy's field numbers, src/api/grpc/ext_proc.proto), its
 * request body read as an LLM request and clamped (sl_xp_rewrite_max_tokens: the body
 * mutation sent back). Checked: the rewrite never writes past its buffer, a replaced
 * max_tokens reads back as the clamped value, and a rewritten body still parses.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/grpc/ext_proc.h"
#include "ext_proc.pb-c.h"
#include "llm/llm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void clamp_body(const char *body, size_t n, uint64_t value) {
    sl_llm_request rq, back;
    char err[160];
    if (sl_llm_parse_request(body, n, SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)) != 0) return;
    size_t cap = n + 96;
    char *out = malloc(cap);
    if (out == NULL) return;
    size_t len = sl_xp_rewrite_max_tokens(body, n, &rq, value, out, cap);
    if (len > cap) abort();
    if (len > 0) {
        if (sl_llm_parse_request(out, len, rq.api, &back, err, sizeof(err)) != 0) abort();
        bool replaced = rq.has_max_tokens && rq.max_tokens_len > 0;
        if (replaced && (!back.has_max_tokens || back.max_tokens != value)) abort();
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint64_t value = size > 0 ? (uint64_t)data[0] * 37u + 1u : 1u;
    Envoy__Service__ExtProc__V3__ProcessingRequest *m =
        (Envoy__Service__ExtProc__V3__ProcessingRequest *)protobuf_c_message_unpack(
            &envoy__service__ext_proc__v3__processing_request__descriptor, NULL, size, data);
    if (m != NULL) {
        if (m->request_case == ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY &&
            m->request_body != NULL)
            clamp_body((const char *)m->request_body->body.data, m->request_body->body.len, value);
        protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    /* the bytes as a body too (the corpus holds plain JSON requests) */
    char *copy = malloc(size ? size : 1);
    if (copy == NULL) return 0;
    memcpy(copy, data, size);
    clamp_body(copy, size, value);
    free(copy);
    return 0;
}
