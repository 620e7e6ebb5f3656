/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_llm.c -- the LLM accounting parsers on arbitrary bytes: a request body, a usage
 * object, and a response stream fed in chunks cut where the first byte says, under a budget
 * from the second. Checked: no out-of-bounds reads, counts within SL_LLM_TOKENS_MAX, the
 * bytes sent on never longer than what came in plus the final events, the held event
 * bounded, the content sent never above the budget once the stream is cut.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llm/llm.h"
#include "llm/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (buf == NULL) return 0;
    memcpy(buf, data, size);
    char err[160];
    sl_llm_request rq;
    sl_llm_params p;
    sl_llm_params_default(&p);
    p.cached_weight = size ? data[0] * 8u : 0;
    if (sl_llm_parse_request(buf, size, SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)) == 0) {
        if (rq.model_len > SL_LLM_NAME_MAX || rq.user_len > SL_LLM_NAME_MAX) abort();
        if (rq.has_max_tokens && (rq.max_tokens > SL_LLM_TOKENS_MAX ||
                                  rq.max_tokens_off + rq.max_tokens_len > size))
            abort();
        sl_llm_counts c;
        sl_llm_reserve(&rq, &p, &c);
        if (c.total != c.input + c.output) abort();
    }
    sl_llm_usage u = {0};
    if (sl_llm_parse_usage(buf, size, &u, err, sizeof(err)) > 0) {
        if (u.prompt > SL_LLM_TOKENS_MAX || u.completion > SL_LLM_TOKENS_MAX || u.cached > SL_LLM_TOKENS_MAX)
            abort();
        sl_llm_counts c;
        sl_llm_count_usage(&u, &p, &c);
        if (c.total != c.input + c.output) abort();
    }
    size_t chunk = size > 1 ? (size_t)data[1] % 97 + 1 : 1;
    uint64_t budget = size > 2 ? (data[2] < 16 ? SL_LLM_NO_BUDGET : data[2] % 40) : SL_LLM_NO_BUDGET;
    sl_llm_api api = size > 3 ? (sl_llm_api)(data[3] % 5) : SL_LLM_OPENAI_CHAT;
    sl_llm_counts res = {.requests = 1, .input = 3, .output = 5, .total = 8};
    sl_llm_stream st;
    sl_llm_stream_init(&st, api, &p, budget, &res, "fuzz");
    sl_llm_buf out = {0};
    for (size_t off = 0; off < size; off += chunk) {
        size_t k = size - off < chunk ? size - off : chunk;
        if (sl_llm_stream_feed(&st, buf + off, k, off + k == size, &out)) break;
        if (st.pend.len > SL_LLM_EVENT_MAX + 128) abort();
    }
    if (out.len > size + 1024) abort();
    if (st.ended && budget != SL_LLM_NO_BUDGET && !st.skipping && sl_llm_estimate(st.delta_bytes, &p) > budget) abort();
    sl_llm_counts c;
    sl_llm_stream_settle(&st, 1, &c);
    sl_llm_stream_settle(&st, 0, &c);
    sl_llm_stream_free(&st);
    sl_llm_buf_free(&out);
    free(buf);
    return 0;
}
