/* SPDX-License-Identifier: Apache-2.0 */
/*
 * llm.c -- the LLM parts of a policy (issue 24, docs/ai-gateway.md): the `llm:` section
 * (bytes_per_token, cached_weight as a decimal with up to 3 places, default_max_tokens,
 * on_short: clamp|reject, min_output), a window's `counts:` (requests, input_tokens,
 * output_tokens, total_tokens, cached_input_tokens), and `headers:` taking a dialect
 * (openai, anthropic) besides true/false. Errors at the node's file:line:col.
 */
#include <stdio.h>
#include <string.h>

#include "config/compiled.h"

static const char *const llm_fields[] = {"bytes_per_token", "cached_weight", "default_max_tokens",
                                         "on_short", "min_output", NULL};

/* "0", "1", "0.25", "1.5": thousandths, at most 10 (10000) */
static bool weight(const char *s, uint32_t *out) {
    uint32_t v = 0, frac = 0, places = 0;
    const char *p = s;
    if (*p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (uint32_t)(*p++ - '0');
        if (v > 10) return false;
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') return false;
        while (*p >= '0' && *p <= '9') {
            if (++places > 3) return false;
            frac = frac * 10 + (uint32_t)(*p++ - '0');
        }
    }
    if (*p != 0) return false;
    while (places < 3) frac *= 10, places++;
    *out = v * SL_LLM_WEIGHT_ONE + frac;
    return *out <= 10 * SL_LLM_WEIGHT_ONE;
}

bool sl__parse_llm(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    if (n->kind != SL_YMAP) {
        sl__err(cx, n, "llm must be a map (expected bytes_per_token, cached_weight, "
                "default_max_tokens, on_short, min_output)");
        return false;
    }
    if (!sl__check_fields(cx, n, "llm", llm_fields)) return false;
    sl_cllm *l = sl__alloc(&cx->cfg->arena, sizeof(*l));
    if (l == NULL) return false;
    sl_llm_params_default(&l->params);
    l->min_output = 1;
    bool ok = true;
    const sl_ynode *x;
    uint64_t v;
    if ((x = sl__get(n, "bytes_per_token")) != NULL) {
        if (!sl__get_u64(cx, x, 1000, &v)) {
            ok = false;
        } else if (v < 1) {
            sl__err(cx, x, "bytes_per_token must be at least 1 (expected 1 to 1000; 4 suits English)");
            ok = false;
        } else {
            l->params.bytes_per_token = (uint32_t)v;
        }
    }
    if ((x = sl__get(n, "cached_weight")) != NULL) {
        if (!sl__is_scalar(x) || !weight(x->s, &l->params.cached_weight)) {
            sl__err(cx, x, "bad cached_weight '%.40s' (expected a decimal from 0 to 10 with at "
                    "most 3 places, e.g. 0, 0.1, 0.25, 1)", sl__is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    if ((x = sl__get(n, "default_max_tokens")) != NULL) {
        if (sl__get_u64(cx, x, SL_LLM_TOKENS_MAX, &v)) l->params.default_max_tokens = v;
        else ok = false;
    }
    if ((x = sl__get(n, "min_output")) != NULL) {
        if (sl__get_u64(cx, x, SL_LLM_TOKENS_MAX, &v)) l->min_output = v;
        else ok = false;
    }
    if ((x = sl__get(n, "on_short")) != NULL) {
        if (sl__is_scalar(x) && strcmp(x->s, "clamp") == 0) l->reject_short = false;
        else if (sl__is_scalar(x) && strcmp(x->s, "reject") == 0) l->reject_short = true;
        else {
            sl__err(cx, x, "bad on_short '%.40s' (expected clamp or reject)",
                    sl__is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    p->llm = l;
    return ok;
}

bool sl__parse_counts(sl__ctx *cx, const sl_ynode *n, sl_cwindow *w) {
    sl_llm_count c;
    if (!sl__is_scalar(n) || sl_llm_count_parse(n->s, &c) != 0 || c == SL_LLM_COUNT_NONE) {
        sl__err(cx, n, "bad counts '%.40s' (expected requests, input_tokens, output_tokens, "
                "total_tokens or cached_input_tokens)", sl__is_scalar(n) ? n->s : "");
        return false;
    }
    w->counts = (uint8_t)c;
    return true;
}

bool sl__parse_headers_opt(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    if (sl__is_scalar(n) && strcmp(n->s, "openai") == 0) {
        p->headers = true;
        p->dialect = SL_DIALECT_OPENAI;
        return true;
    }
    if (sl__is_scalar(n) && strcmp(n->s, "anthropic") == 0) {
        p->headers = true;
        p->dialect = SL_DIALECT_ANTHROPIC;
        return true;
    }
    return sl__get_bool(cx, n, &p->headers); /* anything else: the boolean it always was */
}
