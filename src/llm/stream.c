/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stream.c -- counting and cutting a streamed LLM response (see stream.h). Events end at a
 * blank line ("\n\n" or "\r\n\r\n"); only whole events are forwarded, so a cut is always
 * between events and the bytes sent on stay valid SSE, JSON and UTF-8 whatever the chunk
 * boundaries (mid-event, mid-UTF-8).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "llm/stream.h"

int sl_llm_buf_put(sl_llm_buf *b, const void *s, size_t n) {
    if (n == 0) return 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

void sl_llm_buf_free(sl_llm_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void sl_llm_stream_init(sl_llm_stream *st, sl_llm_api api, const sl_llm_params *p, uint64_t budget,
                        const sl_llm_counts *reserved, const char *policy) {
    memset(st, 0, sizeof(*st));
    st->api = api;
    st->params = *p;
    st->budget = budget;
    if (reserved) st->reserved = *reserved;
    snprintf(st->policy, sizeof(st->policy), "%s", policy ? policy : "");
}

void sl_llm_stream_free(sl_llm_stream *st) { sl_llm_buf_free(&st->pend); }

const char *sl_llm_settle_src_name(sl_llm_settle_src s) {
    return s == SL_LLM_SETTLE_USAGE ? "usage" : s == SL_LLM_SETTLE_ESTIMATE ? "estimate" : "reservation";
}

/* The end of the first event in s[0..n): the offset past its blank line, or 0. */
static size_t event_end(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\n') continue;
        if (s[i + 1] == '\n') return i + 2;
        if (s[i + 1] == '\r' && i + 2 < n && s[i + 2] == '\n') return i + 3;
    }
    return 0;
}

/* Where an oversized event's pass-through stands (sl_llm_stream.skipping, 0: not in one). */
enum { SKIP_IN = 1, SKIP_NL = 2, SKIP_NL_CR = 3 };

/* The pass-through state after s[0..n), which holds no blank line. */
static unsigned skip_state(const char *s, size_t n) {
    if (n >= 1 && s[n - 1] == '\n') return SKIP_NL;
    if (n >= 2 && s[n - 1] == '\r' && s[n - 2] == '\n') return SKIP_NL_CR;
    return SKIP_IN;
}

typedef struct {
    const char *type;
    size_t type_len;
    int has_index;
    uint64_t index;
    uint64_t delta_bytes;
} ev_info;

static int is_delta_leaf(const sl_llm_jseg *k) {
    static const char *const leaves[] = {"content", "text", "partial_json", "thinking",
                                         "arguments", "refusal", "reasoning_content"};
    for (size_t i = 0; i < sizeof(leaves) / sizeof(leaves[0]); i++)
        if (sl_llm_key_is(k, leaves[i])) return 1;
    return 0;
}

static int ev_cb(void *ctx, const sl_llm_jseg *path, int depth, sl_llm_jtype t, const char *v,
                 size_t vl, size_t off) {
    (void)off;
    ev_info *e = ctx;
    if (depth == 1 && t == SL_LLM_J_STR && sl_llm_key_is(&path[0], "type")) {
        e->type = v;
        e->type_len = vl;
    } else if (depth == 1 && t == SL_LLM_J_NUM && sl_llm_key_is(&path[0], "index")) {
        if (sl_llm_num_tokens(v, vl, &e->index) == 0) e->has_index = 1;
    } else if (depth == 1 && t == SL_LLM_J_STR && sl_llm_key_is(&path[0], "delta")) {
        e->delta_bytes += vl; /* OpenAI responses: response.output_text.delta */
    } else if (depth >= 2 && t == SL_LLM_J_STR && is_delta_leaf(&path[depth - 1])) {
        for (int i = 0; i < depth - 1; i++)
            if (sl_llm_key_is(&path[i], "delta")) {
                e->delta_bytes += vl;
                break;
            }
    }
    return 0;
}

static int type_is(const ev_info *e, const char *lit) {
    size_t l = strlen(lit);
    return e->type && e->type_len == l && memcmp(e->type, lit, l) == 0;
}

static int put_json_str(sl_llm_buf *o, const char *s) {
    char tmp[sizeof(((sl_llm_stream *)0)->policy) * SL_JSON_UNIT_MAX];
    size_t n = sl_json_escape(tmp, sizeof(tmp), s, strlen(s), 0, NULL);
    return sl_llm_buf_put(o, "\"", 1) || sl_llm_buf_put(o, tmp, n) || sl_llm_buf_put(o, "\"", 1);
}

/* The final event(s) saying why the stream ends here. */
static int put_final(sl_llm_stream *st, sl_llm_buf *o) {
    char num[32];
    int r = 0;
    if (st->api == SL_LLM_ANTHROPIC_MESSAGES) {
        if (st->block_open) {
            snprintf(num, sizeof(num), "%llu", (unsigned long long)st->block_index);
            const char *h = "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":";
            r |= sl_llm_buf_put(o, h, strlen(h));
            r |= sl_llm_buf_put(o, num, strlen(num));
            r |= sl_llm_buf_put(o, "}\n\n", 3);
        }
        snprintf(num, sizeof(num), "%llu", (unsigned long long)st->output);
        const char *a = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                        "\"max_tokens\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":";
        r |= sl_llm_buf_put(o, a, strlen(a));
        r |= sl_llm_buf_put(o, num, strlen(num));
        const char *b = "},\"sluice\":{\"reason\":\"output token budget spent\",\"policy\":";
        r |= sl_llm_buf_put(o, b, strlen(b));
        r |= put_json_str(o, st->policy);
        const char *c = "}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        r |= sl_llm_buf_put(o, c, strlen(c));
        return r ? -1 : 0;
    }
    const char *err1 = "\"error\":{\"message\":\"output token budget spent\",\"type\":\"rate_limit_exceeded\","
                       "\"code\":\"token_budget\",\"policy\":";
    if (st->api == SL_LLM_OPENAI_RESPONSES) {
        const char *a = "event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":"
                        "{\"status\":\"incomplete\",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}},";
        r |= sl_llm_buf_put(o, a, strlen(a));
        r |= sl_llm_buf_put(o, err1, strlen(err1));
        r |= put_json_str(o, st->policy);
        r |= sl_llm_buf_put(o, "}}\n\n", 4);
        return r ? -1 : 0;
    }
    const char *a = "data: {\"id\":\"sluice-budget\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
                    "\"delta\":{},\"finish_reason\":\"length\"}],";
    r |= sl_llm_buf_put(o, a, strlen(a));
    r |= sl_llm_buf_put(o, err1, strlen(err1));
    r |= put_json_str(o, st->policy);
    r |= sl_llm_buf_put(o, "}}\n\ndata: [DONE]\n\n", 18);
    return r ? -1 : 0;
}

/* The data of an event: its "data:" lines joined by "\n" (into d). */
static int event_data(const char *s, size_t n, sl_llm_buf *d) {
    size_t i = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && s[e] != '\n') e++;
        size_t le = e;
        if (le > i && s[le - 1] == '\r') le--;
        if (le - i >= 5 && memcmp(s + i, "data:", 5) == 0) {
            size_t b = i + 5;
            if (b < le && s[b] == ' ') b++;
            if (d->len && sl_llm_buf_put(d, "\n", 1)) return -1;
            if (sl_llm_buf_put(d, s + b, le - b)) return -1;
        }
        i = e + 1;
    }
    return 0;
}

/* One whole event: count it, then forward it, or cut the stream before it. */
static int one_event(sl_llm_stream *st, const char *s, size_t n, sl_llm_buf *out) {
    st->events++;
    sl_llm_buf d = {0};
    if (event_data(s, n, &d)) return -1;
    ev_info e;
    memset(&e, 0, sizeof(e));
    int is_json = 0;
    if (d.len == 6 && memcmp(d.p, "[DONE]", 6) == 0) {
        st->done = 1;
    } else if (d.len) {
        is_json = sl_llm_json_scan(d.p, d.len, ev_cb, &e, NULL) == 0;
        if (is_json) {
            char err[96];
            int u = sl_llm_parse_usage(d.p, d.len, &st->usage, err, sizeof(err));
            if (u < 0) st->usage_errors++;
            if (u > 0 && (st->usage.have & SL_LLM_U_COMPLETION)) st->usage_seen = 1;
        }
    }
    int stop = type_is(&e, "message_stop") || type_is(&e, "response.completed");
    int opens = type_is(&e, "content_block_start"), closes = type_is(&e, "content_block_stop");
    sl_llm_buf_free(&d); /* e.type pointed into it */
    e.type = NULL;
    if (stop) st->done = 1;
    if (st->ended) return 0; /* read for the usage, cleared */
    uint64_t est = sl_llm_estimate(st->delta_bytes + e.delta_bytes, &st->params);
    uint64_t now = est;
    if (st->usage_seen && st->usage.completion > now) now = st->usage.completion;
    if (e.delta_bytes > 0 && st->budget != SL_LLM_NO_BUDGET && now > st->budget) {
        st->ended = 1;
        return put_final(st, out);
    }
    st->delta_bytes += e.delta_bytes;
    st->output = now;
    if (opens) {
        st->block_open = 1;
        st->block_index = e.has_index ? e.index : 0;
    } else if (closes) {
        st->block_open = 0;
    }
    st->bytes_out += n;
    return sl_llm_buf_put(out, s, n);
}

int sl_llm_stream_feed(sl_llm_stream *st, const char *in, size_t n, int eos, sl_llm_buf *out) {
    st->bytes_in += n;
    if (eos) st->eos = 1;
    while (st->skipping && n > 0) {
        /* inside an oversized event: pass through up to its blank line ("\n\n" or
         * "\n\r\n", split anywhere across chunks), unparsed */
        size_t stop = 0;
        unsigned state = st->skipping;
        for (size_t i = 0; i < n && stop == 0; i++) {
            char c = in[i];
            if (c == '\n' && state >= SKIP_NL) stop = i + 1;
            else if (c == '\n') state = SKIP_NL;
            else if (c == '\r' && state == SKIP_NL) state = SKIP_NL_CR;
            else state = SKIP_IN;
        }
        size_t take = stop ? stop : n;
        if (!st->ended) {
            st->delta_bytes += take;
            st->output = sl_llm_estimate(st->delta_bytes, &st->params);
            st->bytes_out += take;
            if (sl_llm_buf_put(out, in, take)) return -1;
        }
        st->skipping = stop ? 0 : state;
        in += take;
        n -= take;
    }
    if (sl_llm_buf_put(&st->pend, in, n)) return -1;
    size_t off = 0, end;
    while ((end = event_end(st->pend.p + off, st->pend.len - off)) > 0) {
        if (one_event(st, st->pend.p + off, end, out)) return -1;
        off += end;
    }
    size_t rest = st->pend.len - off;
    if (rest && (eos || rest > SL_LLM_EVENT_MAX)) {
        if (eos) {
            if (one_event(st, st->pend.p + off, rest, out)) return -1;
        } else {
            /* an event beyond the cap: forwarded unparsed, its bytes counted as output;
             * under a budget it cannot be weighed before it is sent, so the stream ends */
            if (!st->ended && st->budget != SL_LLM_NO_BUDGET) {
                st->ended = 1;
                if (put_final(st, out)) return -1;
            } else if (!st->ended) {
                st->delta_bytes += rest;
                st->output = sl_llm_estimate(st->delta_bytes, &st->params);
                st->bytes_out += rest;
                if (sl_llm_buf_put(out, st->pend.p + off, rest)) return -1;
            }
            st->skipping = skip_state(st->pend.p, st->pend.len);
        }
        off = st->pend.len;
        rest = 0;
    }
    if (off) {
        memmove(st->pend.p, st->pend.p + off, rest);
        st->pend.len = rest;
    }
    if (eos) sl_llm_buf_free(&st->pend);
    return 0;
}

sl_llm_settle_src sl_llm_stream_settle(const sl_llm_stream *st, int complete, sl_llm_counts *out) {
    if (complete && st->usage_seen) {
        sl_llm_count_usage(&st->usage, &st->params, out);
        if (!(st->usage.have & SL_LLM_U_PROMPT)) {
            out->input = st->reserved.input;
            out->total = out->input + out->output;
        }
        return SL_LLM_SETTLE_USAGE;
    }
    if (complete) {
        *out = st->reserved;
        return SL_LLM_SETTLE_RESERVATION;
    }
    /* gone mid-stream: input from the provider when it said (Anthropic's message_start),
     * else the estimate; output what streamed */
    if (st->usage.have & SL_LLM_U_PROMPT) {
        sl_llm_count_usage(&st->usage, &st->params, out);
    } else {
        memset(out, 0, sizeof(*out));
        out->requests = 1;
        out->input = st->reserved.input;
    }
    out->output = st->output;
    out->total = out->input + out->output;
    return SL_LLM_SETTLE_ESTIMATE;
}
