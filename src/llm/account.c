/* SPDX-License-Identifier: Apache-2.0 */
/*
 * account.c -- LLM requests and usages to counts: what a request body reserves (model,
 * user, max_tokens, bytes / bytes_per_token as the input estimate) and what a provider's
 * usage settles to, under the counting rules of issue 24 (input = prompt - cached + cached
 * x weight, Anthropic's cache creation at weight 1, output = completion with reasoning
 * inside, total = input + output, requests = 1). Integer arithmetic only.
 */
#include <stdio.h>
#include <string.h>

#include "llm/llm.h"

void sl_llm_params_default(sl_llm_params *p) {
    p->bytes_per_token = 4;
    p->cached_weight = 0;
    p->default_max_tokens = 4096;
}

static const char *const count_names[] = {
    [SL_LLM_COUNT_NONE] = "cost",
    [SL_LLM_COUNT_REQUESTS] = "requests",
    [SL_LLM_COUNT_INPUT] = "input_tokens",
    [SL_LLM_COUNT_OUTPUT] = "output_tokens",
    [SL_LLM_COUNT_TOTAL] = "total_tokens",
    [SL_LLM_COUNT_CACHED_INPUT] = "cached_input_tokens",
};

const char *sl_llm_count_name(sl_llm_count c) {
    return (unsigned)c < sizeof(count_names) / sizeof(count_names[0]) ? count_names[c] : "?";
}

int sl_llm_count_parse(const char *s, sl_llm_count *out) {
    for (unsigned i = 0; i < sizeof(count_names) / sizeof(count_names[0]); i++)
        if (strcmp(s, count_names[i]) == 0) {
            *out = (sl_llm_count)i;
            return 0;
        }
    return -1;
}

uint64_t sl_llm_counts_get(const sl_llm_counts *c, sl_llm_count which) {
    switch (which) {
    case SL_LLM_COUNT_REQUESTS: return c->requests;
    case SL_LLM_COUNT_INPUT: return c->input;
    case SL_LLM_COUNT_OUTPUT: return c->output;
    case SL_LLM_COUNT_TOTAL: return c->total;
    case SL_LLM_COUNT_CACHED_INPUT: return c->cached_input;
    default: return 0;
    }
}

uint64_t sl_llm_estimate(uint64_t bytes, const sl_llm_params *p) {
    uint64_t r = p->bytes_per_token ? p->bytes_per_token : 4;
    return bytes / r + (bytes % r != 0);
}

const char *sl_llm_api_name(sl_llm_api a) {
    switch (a) {
    case SL_LLM_OPENAI_CHAT: return "openai.chat";
    case SL_LLM_OPENAI_RESPONSES: return "openai.responses";
    case SL_LLM_OPENAI_EMBEDDINGS: return "openai.embeddings";
    case SL_LLM_ANTHROPIC_MESSAGES: return "anthropic.messages";
    default: return "unknown";
    }
}

static int ends_with(const char *p, size_t n, const char *suf) {
    size_t l = strlen(suf);
    return n >= l && memcmp(p + n - l, suf, l) == 0;
}

sl_llm_api sl_llm_api_from_path(const char *path, size_t n) {
    const char *q = memchr(path, '?', n);
    if (q) n = (size_t)(q - path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (ends_with(path, n, "/chat/completions")) return SL_LLM_OPENAI_CHAT;
    if (ends_with(path, n, "/responses")) return SL_LLM_OPENAI_RESPONSES;
    if (ends_with(path, n, "/embeddings")) return SL_LLM_OPENAI_EMBEDDINGS;
    if (ends_with(path, n, "/messages")) return SL_LLM_ANTHROPIC_MESSAGES;
    return SL_LLM_API_UNKNOWN;
}

/* A JSON string's content (escaped form) into a C string: the simple escapes and \u00XX up
 * to 0x7f are decoded; anything else escaped is refused (names are plain in practice). */
static int unescape(const char *v, size_t vl, char *out, size_t cap, size_t *outl) {
    size_t o = 0;
    for (size_t i = 0; i < vl; i++) {
        char ch = v[i];
        if (ch == '\\') {
            char x = v[++i];
            switch (x) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'u': {
                unsigned cp = 0;
                for (int k = 1; k <= 4; k++) {
                    char h = v[i + (size_t)k];
                    cp = cp * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                if (cp == 0 || cp > 0x7f) return -1;
                ch = (char)cp;
                i += 4;
                break;
            }
            default: ch = x; break;
            }
        }
        if (o >= cap) return -1;
        out[o++] = ch;
    }
    out[o] = 0;
    *outl = o;
    return 0;
}

typedef struct {
    sl_llm_request *rq;
    int has_messages, has_input, has_system, has_instructions;
    const char *err;
} req_ctx;

static int req_cb(void *ctx, const sl_llm_jseg *path, int depth, sl_llm_jtype t, const char *v,
                  size_t vl, size_t off) {
    req_ctx *c = ctx;
    sl_llm_request *rq = c->rq;
    if (depth == 0) {
        if (t != SL_LLM_J_OBJ) {
            c->err = "the body is not a JSON object";
            return 2;
        }
        return 0;
    }
    const sl_llm_jseg *k = &path[depth - 1];
    if (depth == 1) {
        if (sl_llm_key_is(k, "model") && t == SL_LLM_J_STR) {
            if (unescape(v, vl, rq->model, SL_LLM_NAME_MAX, &rq->model_len)) {
                c->err = "model: longer than 128 bytes or escaped beyond ASCII";
                return 2;
            }
        } else if (sl_llm_key_is(k, "user") && t == SL_LLM_J_STR) {
            if (unescape(v, vl, rq->user, SL_LLM_NAME_MAX, &rq->user_len)) {
                c->err = "user: longer than 128 bytes or escaped beyond ASCII";
                return 2;
            }
        } else if (sl_llm_key_is(k, "max_tokens") || sl_llm_key_is(k, "max_completion_tokens") ||
                   sl_llm_key_is(k, "max_output_tokens")) {
            if (t == SL_LLM_J_NULL) return 0;
            uint64_t x;
            if (t != SL_LLM_J_NUM || sl_llm_num_tokens(v, vl, &x)) {
                c->err = "max_tokens: not a whole number of tokens between 0 and 10^12";
                return 2;
            }
            /* max_completion_tokens supersedes the deprecated max_tokens in OpenAI's chat;
             * when both are given the smaller holds (what the upstream honours). */
            if (!rq->has_max_tokens || x < rq->max_tokens) {
                rq->max_tokens = x;
                rq->max_tokens_off = off;
                rq->max_tokens_len = vl;
                rq->max_tokens_field = sl_llm_key_is(k, "max_tokens") ? "max_tokens"
                                       : sl_llm_key_is(k, "max_completion_tokens")
                                           ? "max_completion_tokens"
                                           : "max_output_tokens";
            }
            rq->has_max_tokens = 1;
        } else if (sl_llm_key_is(k, "stream")) {
            rq->stream = t == SL_LLM_J_TRUE;
        } else if (sl_llm_key_is(k, "messages")) {
            c->has_messages = 1;
        } else if (sl_llm_key_is(k, "input")) {
            c->has_input = 1;
        } else if (sl_llm_key_is(k, "system")) {
            c->has_system = 1;
        } else if (sl_llm_key_is(k, "instructions")) {
            c->has_instructions = 1;
        }
    } else if (depth == 2) {
        const sl_llm_jseg *p = &path[0];
        if (sl_llm_key_is(p, "stream_options") && sl_llm_key_is(k, "include_usage")) {
            rq->include_usage = t == SL_LLM_J_TRUE;
        } else if (sl_llm_key_is(p, "metadata") && sl_llm_key_is(k, "user_id") && t == SL_LLM_J_STR &&
                   rq->user_len == 0) {
            if (unescape(v, vl, rq->user, SL_LLM_NAME_MAX, &rq->user_len)) {
                c->err = "metadata.user_id: longer than 128 bytes or escaped beyond ASCII";
                return 2;
            }
        }
    }
    return 0;
}

int sl_llm_parse_request(const char *body, size_t n, sl_llm_api api_hint, sl_llm_request *rq,
                         char *err, size_t errcap) {
    memset(rq, 0, sizeof(*rq));
    req_ctx c = {.rq = rq};
    size_t at = 0;
    int r = sl_llm_json_scan(body, n, req_cb, &c, &at);
    if (r != 0) {
        if (err && errcap) {
            if (r < 0)
                snprintf(err, errcap, "broken JSON at byte %zu", at);
            else
                snprintf(err, errcap, "%s", c.err);
        }
        memset(rq, 0, sizeof(*rq));
        return -1;
    }
    rq->body_bytes = n;
    rq->api = api_hint;
    if (rq->api == SL_LLM_API_UNKNOWN) {
        /* no path to go by: Anthropic's messages carry a top-level system or a claude model */
        if (c.has_messages)
            rq->api = (c.has_system || strncmp(rq->model, "claude", 6) == 0) ? SL_LLM_ANTHROPIC_MESSAGES
                                                                            : SL_LLM_OPENAI_CHAT;
        else if (c.has_input)
            rq->api = (strstr(rq->model, "embed") != NULL && !c.has_instructions && !rq->has_max_tokens)
                          ? SL_LLM_OPENAI_EMBEDDINGS
                          : SL_LLM_OPENAI_RESPONSES;
    }
    return 0;
}

void sl_llm_reserve(const sl_llm_request *rq, const sl_llm_params *p, sl_llm_counts *out) {
    memset(out, 0, sizeof(*out));
    out->requests = 1;
    out->input = sl_llm_estimate(rq->body_bytes, p);
    if (rq->api == SL_LLM_OPENAI_EMBEDDINGS)
        out->output = 0;
    else
        out->output = rq->has_max_tokens ? rq->max_tokens : p->default_max_tokens;
    out->total = out->input + out->output;
}

/* ---- usage ---- */

typedef struct {
    sl_llm_usage u;
    uint64_t anth_input;
    int has_anth_input;
    const char *err;
} use_ctx;

/* Whether the segment at path[i] is where a usage field may live: under a "usage" key, or
 * at the root (the usage object given by itself). */
static int usage_parent(const sl_llm_jseg *path, int i) {
    return i < 0 || sl_llm_key_is(&path[i], "usage");
}

static int use_cb(void *ctx, const sl_llm_jseg *path, int depth, sl_llm_jtype t, const char *v,
                  size_t vl, size_t off) {
    (void)off;
    use_ctx *c = ctx;
    if (depth == 1 && t == SL_LLM_J_STR && sl_llm_key_is(&path[0], "type") && vl >= 8 &&
        memcmp(v, "message_", 8) == 0)
        c->u.have |= SL_LLM_U_ANTHROPIC;
    if (depth < 1 || t == SL_LLM_J_NULL) return 0;
    const sl_llm_jseg *k = &path[depth - 1];
    unsigned bit = 0;
    uint64_t *dst = NULL;
    int anth = 0, anth_input = 0;
    if (usage_parent(path, depth - 2)) {
        if (sl_llm_key_is(k, "prompt_tokens")) {
            bit = SL_LLM_U_PROMPT, dst = &c->u.prompt;
        } else if (sl_llm_key_is(k, "input_tokens")) {
            anth_input = 1;
        } else if (sl_llm_key_is(k, "completion_tokens") || sl_llm_key_is(k, "output_tokens")) {
            bit = SL_LLM_U_COMPLETION, dst = &c->u.completion;
        } else if (sl_llm_key_is(k, "cache_read_input_tokens")) {
            bit = SL_LLM_U_CACHED, dst = &c->u.cached, anth = 1;
        } else if (sl_llm_key_is(k, "cache_creation_input_tokens")) {
            bit = SL_LLM_U_CREATION, dst = &c->u.creation, anth = 1;
        } else {
            return 0;
        }
    } else if (depth >= 2 && usage_parent(path, depth - 3)) {
        const sl_llm_jseg *p = &path[depth - 2];
        if ((sl_llm_key_is(p, "prompt_tokens_details") || sl_llm_key_is(p, "input_tokens_details")) &&
            sl_llm_key_is(k, "cached_tokens"))
            bit = SL_LLM_U_CACHED, dst = &c->u.cached;
        else if ((sl_llm_key_is(p, "completion_tokens_details") ||
                  sl_llm_key_is(p, "output_tokens_details")) &&
                 sl_llm_key_is(k, "reasoning_tokens"))
            bit = SL_LLM_U_REASONING, dst = &c->u.reasoning;
        else
            return 0;
    } else {
        return 0;
    }
    uint64_t x;
    if (t != SL_LLM_J_NUM || sl_llm_num_tokens(v, vl, &x)) {
        c->err = "usage: a token count that is not a whole number between 0 and 10^12";
        return 2;
    }
    if (anth_input) {
        c->anth_input = x;
        c->has_anth_input = 1;
        return 0;
    }
    *dst = x;
    c->u.have |= bit;
    if (anth) c->u.have |= SL_LLM_U_ANTHROPIC;
    return 0;
}

int sl_llm_parse_usage(const char *json, size_t n, sl_llm_usage *u, char *err, size_t errcap) {
    use_ctx c;
    memset(&c, 0, sizeof(c));
    size_t at = 0;
    int r = sl_llm_json_scan(json, n, use_cb, &c, &at);
    if (r != 0) {
        if (err && errcap) {
            if (r < 0)
                snprintf(err, errcap, "broken JSON at byte %zu", at);
            else
                snprintf(err, errcap, "%s", c.err);
        }
        return -1;
    }
    if (c.has_anth_input) {
        /* "input_tokens": OpenAI's responses count it with the cache inside, Anthropic
         * without; both are kept as prompt, the ANTHROPIC flag says which. */
        c.u.prompt = c.anth_input;
        c.u.have |= SL_LLM_U_PROMPT;
    }
    if (c.u.have == 0 || c.u.have == SL_LLM_U_ANTHROPIC) {
        if (c.u.have) u->have |= SL_LLM_U_ANTHROPIC;
        return 0;
    }
    /* merge: fields found replace */
    if (c.u.have & SL_LLM_U_PROMPT) u->prompt = c.u.prompt;
    if (c.u.have & SL_LLM_U_COMPLETION) u->completion = c.u.completion;
    if (c.u.have & SL_LLM_U_CACHED) u->cached = c.u.cached;
    if (c.u.have & SL_LLM_U_CREATION) u->creation = c.u.creation;
    if (c.u.have & SL_LLM_U_REASONING) u->reasoning = c.u.reasoning;
    u->have |= c.u.have;
    return 1;
}

void sl_llm_count_usage(const sl_llm_usage *u, const sl_llm_params *p, sl_llm_counts *out) {
    memset(out, 0, sizeof(*out));
    out->requests = 1;
    uint64_t cached = u->cached;
    uint64_t uncached;
    if (u->have & SL_LLM_U_ANTHROPIC) {
        /* Anthropic's input_tokens exclude cache reads and cache writes; a write is input
         * at weight 1 (it is billed above the base rate, never below) */
        uncached = u->prompt + u->creation;
    } else {
        if (cached > u->prompt) cached = u->prompt; /* a cache larger than the prompt: capped */
        uncached = u->prompt - cached;
    }
    uint64_t w = (uint64_t)p->cached_weight;
    uint64_t weighted = (cached * w + SL_LLM_WEIGHT_ONE - 1) / SL_LLM_WEIGHT_ONE;
    out->input = uncached + weighted;
    out->output = u->completion; /* reasoning is inside completion: never added */
    out->total = out->input + out->output;
    out->cached_input = cached;
}
