/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_llm.c -- LLM accounting (src/llm): request bodies of both providers, usage objects
 * and streamed usage events, the counting rules of issue 24, hostile numbers, a 100 MB
 * body, and the stream cut at the output budget over the recorded fixtures
 * (tests/integration/fixtures/llm), fed in chunks split mid-event and mid-UTF-8.
 */
#include <stdint.h>

#include "json.h"
#include "llm/dialect.h"
#include "llm/llm.h"
#include "llm/stream.h"
#include "t.h"

static sl_llm_params P(uint32_t weight) {
    sl_llm_params p;
    sl_llm_params_default(&p);
    p.cached_weight = weight;
    return p;
}

static char *slurp(const char *name, size_t *n) {
    const char *src = getenv("SLUICE_SRC");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/integration/fixtures/llm/%s", src ? src : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        T_FAIL("cannot open %s", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1);
    *n = fread(b, 1, (size_t)l, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

static void test_request_openai(void) {
    const char *b = "{\"model\":\"gpt-4o-mini\",\"user\":\"u-1\",\"stream\":true,"
                    "\"stream_options\":{\"include_usage\":true},\"max_tokens\":300,"
                    "\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\"}]}";
    sl_llm_request rq;
    char err[128];
    T_EQ_I(sl_llm_parse_request(b, strlen(b), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    T_EQ_S(rq.model, "gpt-4o-mini");
    T_EQ_S(rq.user, "u-1");
    T_EQ_I(rq.api, SL_LLM_OPENAI_CHAT);
    T_EQ_I(rq.stream, 1);
    T_EQ_I(rq.include_usage, 1);
    T_EQ_U(rq.max_tokens, 300);
    T_EQ_S(rq.max_tokens_field, "max_tokens");
    T_CHECK(memcmp(b + rq.max_tokens_off, "300", 3) == 0 && rq.max_tokens_len == 3);
    sl_llm_params p = P(0);
    sl_llm_counts c;
    sl_llm_reserve(&rq, &p, &c);
    T_EQ_U(c.input, (strlen(b) + 3) / 4);
    T_EQ_U(c.output, 300);
    T_EQ_U(c.total, c.input + 300);
    T_EQ_U(c.requests, 1);
    /* both max_tokens and max_completion_tokens: the smaller holds */
    const char *b2 = "{\"model\":\"o3\",\"max_completion_tokens\":50,\"max_tokens\":900,\"messages\":[]}";
    T_EQ_I(sl_llm_parse_request(b2, strlen(b2), SL_LLM_OPENAI_CHAT, &rq, err, sizeof(err)), 0);
    T_EQ_U(rq.max_tokens, 50);
    T_EQ_S(rq.max_tokens_field, "max_completion_tokens");
    /* no max_tokens: the default */
    const char *b3 = "{\"model\":\"gpt-4o\",\"messages\":[]}";
    T_EQ_I(sl_llm_parse_request(b3, strlen(b3), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    sl_llm_reserve(&rq, &p, &c);
    T_EQ_U(c.output, p.default_max_tokens);
}

static void test_request_others(void) {
    sl_llm_request rq;
    char err[128];
    const char *a = "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":1024,\"system\":\"x\","
                    "\"metadata\":{\"user_id\":\"acct-9\"},\"messages\":[]}";
    T_EQ_I(sl_llm_parse_request(a, strlen(a), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    T_EQ_I(rq.api, SL_LLM_ANTHROPIC_MESSAGES);
    T_EQ_S(rq.user, "acct-9");
    T_EQ_U(rq.max_tokens, 1024);
    const char *r = "{\"model\":\"gpt-4.1\",\"input\":\"hello\",\"max_output_tokens\":77}";
    T_EQ_I(sl_llm_parse_request(r, strlen(r), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    T_EQ_I(rq.api, SL_LLM_OPENAI_RESPONSES);
    T_EQ_S(rq.max_tokens_field, "max_output_tokens");
    T_EQ_U(rq.max_tokens, 77);
    const char *e = "{\"model\":\"text-embedding-3-small\",\"input\":[\"a\",\"b\"]}";
    T_EQ_I(sl_llm_parse_request(e, strlen(e), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    T_EQ_I(rq.api, SL_LLM_OPENAI_EMBEDDINGS);
    sl_llm_params p = P(0);
    sl_llm_counts c;
    sl_llm_reserve(&rq, &p, &c);
    T_EQ_U(c.output, 0);
    T_EQ_I(sl_llm_api_from_path("/v1/chat/completions?x=1", 24), SL_LLM_OPENAI_CHAT);
    T_EQ_I(sl_llm_api_from_path("/v1/messages", 12), SL_LLM_ANTHROPIC_MESSAGES);
    T_EQ_I(sl_llm_api_from_path("/v1/responses/", 14), SL_LLM_OPENAI_RESPONSES);
    T_EQ_I(sl_llm_api_from_path("/v1/embeddings", 14), SL_LLM_OPENAI_EMBEDDINGS);
    T_EQ_I(sl_llm_api_from_path("/other", 6), SL_LLM_API_UNKNOWN);
}

static void test_request_hostile(void) {
    static const char *const bad[] = {
        "{\"model\":\"m\",\"max_tokens\":-1}",
        "{\"model\":\"m\",\"max_tokens\":9223372036854775808}",
        "{\"model\":\"m\",\"max_tokens\":18446744073709551616}",
        "{\"model\":\"m\",\"max_tokens\":1.5}",
        "{\"model\":\"m\",\"max_tokens\":1e3}",
        "{\"model\":\"m\",\"max_tokens\":\"100\"}",
        "{\"model\":\"m\",\"max_tokens\":10",
        "[1,2]",
        "{\"model\":\"m\"} x",
        "{\"model\":\"\xff\"}",
        "{\"model\":\"\xe6\x97\"}",
        "{\"model\":\"m\",}",
        "",
    };
    sl_llm_request rq;
    char err[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        int r = sl_llm_parse_request(bad[i], strlen(bad[i]), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err));
        if (r != -1) T_FAIL("accepted: %s", bad[i]);
        T_CHECK(err[0] != 0);
    }
    /* a model name longer than 128 bytes */
    char longm[300];
    snprintf(longm, sizeof(longm), "{\"model\":\"%0200d\"}", 0);
    T_EQ_I(sl_llm_parse_request(longm, strlen(longm), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), -1);
    /* nesting beyond the cap: refused, no stack overflow */
    size_t dn = 200000;
    char *deep = malloc(dn);
    memset(deep, '[', dn);
    T_EQ_I(sl_llm_parse_request(deep, dn, SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), -1);
    free(deep);
}

/* A 100 MB body scans in the caller's buffer: the scan allocates nothing (checked by
 * the parse succeeding with a fixed-size result; ASan would flag any overrun). */
static void test_request_100mb(void) {
    size_t n = 100u << 20;
    char *b = malloc(n);
    const char *head = "{\"model\":\"gpt-4o\",\"max_tokens\":10,\"messages\":[{\"role\":\"user\",\"content\":\"";
    const char *tail = "\"}]}";
    size_t hl = strlen(head), tl = strlen(tail);
    memcpy(b, head, hl);
    memset(b + hl, 'a', n - hl - tl);
    memcpy(b + n - tl, tail, tl);
    sl_llm_request rq;
    char err[128];
    T_EQ_I(sl_llm_parse_request(b, n, SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    sl_llm_params p = P(0);
    sl_llm_counts c;
    sl_llm_reserve(&rq, &p, &c);
    T_EQ_U(c.input, n / 4);
    free(b);
}

static void test_usage_openai(void) {
    const char *u = "{\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":200,"
                    "\"total_tokens\":1200,\"prompt_tokens_details\":{\"cached_tokens\":400},"
                    "\"completion_tokens_details\":{\"reasoning_tokens\":150}}}";
    sl_llm_usage us = {0};
    char err[128];
    T_EQ_I(sl_llm_parse_usage(u, strlen(u), &us, err, sizeof(err)), 1);
    T_EQ_U(us.prompt, 1000);
    T_EQ_U(us.cached, 400);
    T_EQ_U(us.reasoning, 150);
    sl_llm_params p0 = P(0), p1 = P(100), pw = P(1000);
    sl_llm_counts c;
    sl_llm_count_usage(&us, &p0, &c);
    T_EQ_U(c.input, 600);
    T_EQ_U(c.output, 200); /* reasoning never added */
    T_EQ_U(c.total, 800);
    T_EQ_U(c.cached_input, 400);
    T_EQ_U(c.requests, 1);
    sl_llm_count_usage(&us, &p1, &c);
    T_EQ_U(c.input, 640);
    sl_llm_count_usage(&us, &pw, &c);
    T_EQ_U(c.input, 1000);
    /* the usage object by itself, responses API names */
    const char *r = "{\"input_tokens\":50,\"output_tokens\":7,\"input_tokens_details\":{\"cached_tokens\":3},"
                    "\"output_tokens_details\":{\"reasoning_tokens\":2}}";
    sl_llm_usage ur = {0};
    T_EQ_I(sl_llm_parse_usage(r, strlen(r), &ur, err, sizeof(err)), 1);
    sl_llm_count_usage(&ur, &p0, &c);
    T_EQ_U(c.input, 47);
    T_EQ_U(c.output, 7);
    /* response.completed event */
    const char *rc = "{\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":9,"
                     "\"output_tokens\":4,\"total_tokens\":13}}}";
    sl_llm_usage u3 = {0};
    T_EQ_I(sl_llm_parse_usage(rc, strlen(rc), &u3, err, sizeof(err)), 1);
    T_EQ_U(u3.prompt, 9);
    T_EQ_U(u3.completion, 4);
    /* a chunk without usage */
    const char *nu = "{\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}";
    sl_llm_usage u4 = {0};
    T_EQ_I(sl_llm_parse_usage(nu, strlen(nu), &u4, err, sizeof(err)), 0);
    T_EQ_U(u4.have, 0);
}

static void test_usage_anthropic(void) {
    sl_llm_usage us = {0};
    char err[128];
    const char *st = "{\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":100,"
                     "\"cache_creation_input_tokens\":50,\"cache_read_input_tokens\":300,\"output_tokens\":1}}}";
    const char *dl = "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":20}}";
    T_EQ_I(sl_llm_parse_usage(st, strlen(st), &us, err, sizeof(err)), 1);
    T_EQ_I(sl_llm_parse_usage(dl, strlen(dl), &us, err, sizeof(err)), 1);
    sl_llm_params p0 = P(0), p1 = P(100);
    sl_llm_counts c;
    sl_llm_count_usage(&us, &p0, &c);
    T_EQ_U(c.input, 150); /* 100 + creation 50 at weight 1 + reads at 0 */
    T_EQ_U(c.output, 20);
    T_EQ_U(c.total, 170);
    T_EQ_U(c.cached_input, 300);
    sl_llm_count_usage(&us, &p1, &c);
    T_EQ_U(c.input, 180);
    /* a plain message response */
    const char *m = "{\"id\":\"msg\",\"type\":\"message\",\"usage\":{\"input_tokens\":12,\"output_tokens\":3}}";
    sl_llm_usage um = {0};
    T_EQ_I(sl_llm_parse_usage(m, strlen(m), &um, err, sizeof(err)), 1);
    sl_llm_count_usage(&um, &p0, &c);
    T_EQ_U(c.input, 12);
    T_EQ_U(c.output, 3);
}

static void test_usage_hostile(void) {
    static const char *const bad[] = {
        "{\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":1}}",
        "{\"usage\":{\"prompt_tokens\":9223372036854775808,\"completion_tokens\":1}}",
        "{\"usage\":{\"completion_tokens\":1.0}}",
        "{\"usage\":{\"completion_tokens\":\"7\"}}",
        "{\"input_tokens\":1000000000001}",
        "{\"usage\":{\"prompt_tokens\":1,",
        "{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":-1}}}",
    };
    char err[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sl_llm_usage u = {.have = SL_LLM_U_PROMPT, .prompt = 42};
        err[0] = 0;
        if (sl_llm_parse_usage(bad[i], strlen(bad[i]), &u, err, sizeof(err)) != -1) T_FAIL("accepted: %s", bad[i]);
        T_EQ_U(u.prompt, 42); /* unchanged */
        T_CHECK(err[0] != 0);
    }
    /* a cache larger than the prompt counts as the prompt, never below zero */
    const char *c = "{\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":99}}}";
    sl_llm_usage u = {0};
    T_EQ_I(sl_llm_parse_usage(c, strlen(c), &u, err, sizeof(err)), 1);
    sl_llm_params p = P(0);
    sl_llm_counts k;
    sl_llm_count_usage(&u, &p, &k);
    T_EQ_U(k.input, 0);
    T_EQ_U(k.cached_input, 10);
}

/* Every event of an SSE text: its data parses as JSON (or is [DONE]); returns the count,
 * -1 if one does not, and the last event's data in last. */
static int check_sse(const char *s, size_t n, char *last, size_t lastcap, uint64_t *content) {
    int count = 0;
    size_t i = 0;
    *content = 0;
    while (i < n) {
        const char *e = strstr(s + i, "\n\n");
        if (!e || (size_t)(e - s) >= n) return -1;
        size_t end = (size_t)(e - s) + 2;
        const char *d = strstr(s + i, "data: ");
        if (!d || d >= e) return -1;
        size_t dl = (size_t)(e - (d + 6));
        if (!(dl == 6 && memcmp(d + 6, "[DONE]", 6) == 0)) {
            if (sl_llm_json_scan(d + 6, dl, NULL, NULL, NULL) != 0) return -1;
        }
        snprintf(last, lastcap, "%.*s", (int)dl, d + 6);
        /* valid UTF-8 throughout */
        for (size_t k = i; k < end;) {
            size_t l = sl_utf8_len(s + k, end - k);
            if (l == 0) return -1;
            k += l;
        }
        const char *c = strstr(s + i, "\"content\":\"");
        if (c && c < e) {
            const char *q = strchr(c + 11, '"');
            *content += (uint64_t)(q - (c + 11));
        }
        const char *t = strstr(s + i, "\"text\":\"");
        if (t && t < e) {
            const char *q = strchr(t + 8, '"');
            *content += (uint64_t)(q - (t + 8));
        }
        count++;
        i = end;
    }
    return count;
}

static void run_stream(const char *fixture, sl_llm_api api, uint64_t budget, size_t chunk, int stop_at,
                       sl_llm_stream *st, sl_llm_buf *out) {
    size_t n = 0;
    char *f = slurp(fixture, &n);
    if (!f) return;
    sl_llm_params p = P(0);
    sl_llm_counts res = {.requests = 1, .input = 77, .output = budget, .total = 77 + budget};
    sl_llm_stream_init(st, api, &p, budget, &res, "tier-1 \"gpt\"");
    size_t lim = stop_at >= 0 ? (size_t)stop_at : n;
    for (size_t off = 0; off < lim;) {
        size_t k = chunk < lim - off ? chunk : lim - off;
        T_EQ_I(sl_llm_stream_feed(st, f + off, k, stop_at < 0 && off + k == n, out), 0);
        off += k;
    }
    free(f);
}

static void test_stream_openai(void) {
    for (size_t chunk = 1; chunk <= 4096; chunk = chunk * 3 + 1) {
        /* no budget: everything through, settled to the usage */
        sl_llm_stream st;
        sl_llm_buf out = {0};
        size_t n = 0;
        char *f = slurp("openai_chat_stream.sse", &n);
        run_stream("openai_chat_stream.sse", SL_LLM_OPENAI_CHAT, SL_LLM_NO_BUDGET, chunk, -1, &st, &out);
        T_CHECK(out.len == n && memcmp(out.p, f, n) == 0);
        T_EQ_I(st.done, 1);
        T_EQ_I(st.ended, 0);
        sl_llm_counts c;
        T_EQ_I(sl_llm_stream_settle(&st, 1, &c), SL_LLM_SETTLE_USAGE);
        T_EQ_U(c.input, 1200 - 1024);
        T_EQ_U(c.output, 52);
        T_EQ_U(c.total, 1200 - 1024 + 52);
        sl_llm_stream_free(&st);
        sl_llm_buf_free(&out);
        free(f);

        /* a budget of 10 tokens: cut at the last whole event within it */
        run_stream("openai_chat_stream.sse", SL_LLM_OPENAI_CHAT, 10, chunk, -1, &st, &out);
        T_EQ_I(st.ended, 1);
        char last[512];
        uint64_t content = 0;
        sl_llm_buf_put(&out, "", 1); /* NUL for strstr */
        out.len--;
        int evs = check_sse(out.p, out.len, last, sizeof(last), &content);
        T_CHECK(evs > 2);
        T_EQ_S(last, "[DONE]");
        T_CHECK(content <= 10 * 4 && content > 6 * 4);
        T_CHECK(st.output <= 10);
        T_CHECK(strstr(out.p, "\"finish_reason\":\"length\"") != NULL);
        T_CHECK(strstr(out.p, "\"policy\":\"tier-1 \\\"gpt\\\"\"") != NULL);
        /* later chunks cleared, but the usage still read: settled to it */
        T_EQ_I(sl_llm_stream_settle(&st, 1, &c), SL_LLM_SETTLE_USAGE);
        T_EQ_U(c.output, 52);
        sl_llm_stream_free(&st);
        sl_llm_buf_free(&out);
    }
}

static void test_stream_anthropic(void) {
    for (size_t chunk = 1; chunk <= 4096; chunk = chunk * 5 + 2) {
        sl_llm_stream st;
        sl_llm_buf out = {0};
        run_stream("anthropic_messages_stream.sse", SL_LLM_ANTHROPIC_MESSAGES, SL_LLM_NO_BUDGET, chunk, -1, &st, &out);
        sl_llm_counts c;
        T_EQ_I(sl_llm_stream_settle(&st, 1, &c), SL_LLM_SETTLE_USAGE);
        T_EQ_U(c.input, 410 + 200);
        T_EQ_U(c.cached_input, 3000);
        T_EQ_U(c.output, 55);
        sl_llm_stream_free(&st);
        sl_llm_buf_free(&out);

        run_stream("anthropic_messages_stream.sse", SL_LLM_ANTHROPIC_MESSAGES, 12, chunk, -1, &st, &out);
        char last[512];
        uint64_t content = 0;
        sl_llm_buf_put(&out, "", 1); /* NUL for strstr */
        out.len--;
        int evs = check_sse(out.p, out.len, last, sizeof(last), &content);
        T_CHECK(evs > 4);
        T_EQ_S(last, "{\"type\":\"message_stop\"}");
        T_CHECK(content <= 12 * 4);
        T_CHECK(strstr(out.p, "\"stop_reason\":\"max_tokens\"") != NULL);
        T_CHECK(strstr(out.p, "event: content_block_stop") != NULL);
        T_CHECK(strstr(out.p, "end_turn") == NULL); /* the provider's own end was cleared */
        sl_llm_stream_free(&st);
        sl_llm_buf_free(&out);
    }
}

static void test_stream_settle_rules(void) {
    /* gone mid-stream: the estimate of what streamed; Anthropic's input from message_start */
    sl_llm_stream st;
    sl_llm_buf out = {0};
    run_stream("anthropic_messages_stream.sse", SL_LLM_ANTHROPIC_MESSAGES, SL_LLM_NO_BUDGET, 100, 2500, &st, &out);
    sl_llm_counts c;
    T_EQ_I(sl_llm_stream_settle(&st, 0, &c), SL_LLM_SETTLE_ESTIMATE);
    T_EQ_U(c.input, 610);
    T_CHECK(c.output > 0 && c.output < 55);
    T_EQ_U(c.output, st.output);
    sl_llm_stream_free(&st);
    sl_llm_buf_free(&out);
    /* OpenAI gone mid-stream: input = the reservation's estimate */
    run_stream("openai_chat_stream.sse", SL_LLM_OPENAI_CHAT, SL_LLM_NO_BUDGET, 100, 3000, &st, &out);
    T_EQ_I(sl_llm_stream_settle(&st, 0, &c), SL_LLM_SETTLE_ESTIMATE);
    T_EQ_U(c.input, 77);
    T_CHECK(c.output > 0);
    sl_llm_stream_free(&st);
    sl_llm_buf_free(&out);
    /* complete without usage: the reservation stands */
    const char *s = "data: {\"choices\":[{\"delta\":{\"content\":\"abcdefgh\"}}]}\n\ndata: [DONE]\n\n";
    sl_llm_params p = P(0);
    sl_llm_counts res = {.requests = 1, .input = 5, .output = 100, .total = 105};
    sl_llm_stream_init(&st, SL_LLM_OPENAI_CHAT, &p, SL_LLM_NO_BUDGET, &res, "p");
    T_EQ_I(sl_llm_stream_feed(&st, s, strlen(s), 1, &out), 0);
    T_EQ_I(sl_llm_stream_settle(&st, 1, &c), SL_LLM_SETTLE_RESERVATION);
    T_EQ_U(c.output, 100);
    T_EQ_U(st.output, 2);
    sl_llm_stream_free(&st);
    sl_llm_buf_free(&out);
    /* an oversized event passes unparsed, counted as output; memory stays bounded */
    size_t big = SL_LLM_EVENT_MAX * 3;
    char *b = malloc(big + 2);
    memcpy(b, "data: {\"x\":\"", 12);
    memset(b + 12, 'y', big - 14);
    memcpy(b + big - 2, "\"}", 2);
    memcpy(b + big, "\n\n", 2);
    sl_llm_stream_init(&st, SL_LLM_OPENAI_CHAT, &p, SL_LLM_NO_BUDGET, &res, "p");
    for (size_t off = 0; off < big + 2; off += 1000) {
        size_t k = big + 2 - off < 1000 ? big + 2 - off : 1000;
        T_EQ_I(sl_llm_stream_feed(&st, b + off, k, 0, &out), 0);
        T_CHECK(st.pend.cap <= 2 * SL_LLM_EVENT_MAX + 2048);
    }
    T_EQ_U(out.len, big + 2);
    T_EQ_I(st.skipping, 0);
    const char *after = "data: {\"choices\":[{\"delta\":{\"content\":\"z\"}}]}\n\n";
    size_t before = st.delta_bytes;
    T_EQ_I(sl_llm_stream_feed(&st, after, strlen(after), 1, &out), 0);
    T_EQ_U(st.delta_bytes, before + 1);
    free(b);
    sl_llm_stream_free(&st);
    sl_llm_buf_free(&out);
    /* the same with CRLF line ends, the blank line split across chunks at every position
     * (a usage event after it must still be read) */
    for (size_t cut = 0; cut <= 4; cut++) {
        size_t bl = SL_LLM_EVENT_MAX * 2;
        char *c = malloc(bl + 4);
        memcpy(c, "data: {\"x\":\"", 12);
        memset(c + 12, 'y', bl - 14);
        memcpy(c + bl - 2, "\"}", 2);
        memcpy(c + bl, "\r\n\r\n", 4);
        sl_llm_stream_init(&st, SL_LLM_OPENAI_CHAT, &p, SL_LLM_NO_BUDGET, &res, "p");
        size_t first = bl - 1000 + cut;
        T_EQ_I(sl_llm_stream_feed(&st, c, first, 0, &out), 0);
        T_EQ_I(sl_llm_stream_feed(&st, c + first, 1000, 0, &out), 0); /* up to bl + cut */
        T_EQ_I(sl_llm_stream_feed(&st, c + first + 1000, 4 - cut, 0, &out), 0);
        T_EQ_I(st.skipping, 0);
        const char *u = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,"
                        "\"completion_tokens\":9,\"total_tokens\":16}}\r\n\r\n";
        T_EQ_I(sl_llm_stream_feed(&st, u, strlen(u), 1, &out), 0);
        sl_llm_counts cc;
        T_EQ_I(sl_llm_stream_settle(&st, 1, &cc), SL_LLM_SETTLE_USAGE);
        T_EQ_U(cc.output, 9);
        free(c);
        sl_llm_stream_free(&st);
        sl_llm_buf_free(&out);
    }
}

/* 10,000 streams at once, their chunks interleaved (each cut at a different size, so every
 * stream holds a partial event between rounds): each settles exactly once to its own
 * fixture's usage, and what is held stays bounded by one event per stream. */
static void test_stream_many(void) {
    size_t n1 = 0, n2 = 0;
    char *f1 = slurp("openai_chat_stream.sse", &n1), *f2 = slurp("anthropic_messages_stream.sse", &n2);
    if (!f1 || !f2) return;
    enum { N = 10000 };
    sl_llm_stream *st = calloc(N, sizeof(*st));
    size_t *off = calloc(N, sizeof(size_t));
    sl_llm_params p = P(0);
    sl_llm_counts res = {.requests = 1, .input = 1, .output = 100, .total = 101};
    for (int i = 0; i < N; i++)
        sl_llm_stream_init(&st[i], i % 2 ? SL_LLM_ANTHROPIC_MESSAGES : SL_LLM_OPENAI_CHAT, &p,
                           SL_LLM_NO_BUDGET, &res, "many");
    sl_llm_buf out = {0};
    int open = N;
    size_t held_max = 0;
    while (open > 0) {
        size_t held = 0;
        for (int i = 0; i < N; i++) {
            const char *f = i % 2 ? f2 : f1;
            size_t n = i % 2 ? n2 : n1;
            if (off[i] >= n) continue;
            size_t k = (size_t)(i % 97) + 13;
            if (k > n - off[i]) k = n - off[i];
            out.len = 0;
            T_EQ_I(sl_llm_stream_feed(&st[i], f + off[i], k, off[i] + k == n, &out), 0);
            off[i] += k;
            if (off[i] == n) open--;
            held += st[i].pend.cap;
        }
        if (held > held_max) held_max = held;
    }
    T_CHECK(held_max <= (size_t)N * 4096); /* a held event, not a stream */
    for (int i = 0; i < N; i++) {
        sl_llm_counts c;
        T_EQ_I(sl_llm_stream_settle(&st[i], 1, &c), SL_LLM_SETTLE_USAGE);
        if (i % 2) {
            if (c.output != 55 || c.input != 610) T_FAIL("stream %d: %llu/%llu", i, (unsigned long long)c.input, (unsigned long long)c.output);
        } else if (c.output != 52 || c.input != 176) {
            T_FAIL("stream %d: %llu/%llu", i, (unsigned long long)c.input, (unsigned long long)c.output);
        }
        T_EQ_U(st[i].bytes_out, i % 2 ? n2 : n1);
        sl_llm_stream_free(&st[i]);
    }
    sl_llm_buf_free(&out);
    free(st);
    free(off);
    free(f1);
    free(f2);
}

static void test_count_names(void) {
    sl_llm_count c;
    T_EQ_I(sl_llm_count_parse("input_tokens", &c), 0);
    T_EQ_I(c, SL_LLM_COUNT_INPUT);
    T_EQ_I(sl_llm_count_parse("cached_input_tokens", &c), 0);
    T_EQ_S(sl_llm_count_name(c), "cached_input_tokens");
    T_EQ_I(sl_llm_count_parse("tokens", &c), -1);
}

static void test_dialect_text(void) {
    char b[40];
    static const struct { int64_t ns; const char *want; } d[] = {
        {0, "0s"}, {-5, "0s"}, {1, "1ms"}, {20000000, "20ms"}, {999000000, "999ms"},
        {1000000000, "1s"}, {1500000000, "1.5s"}, {1234000000, "1.234s"}, {360000000000, "6m0s"},
        {3723000000000, "1h2m3s"}, {3600000000000, "1h0m0s"}, {59999000001, "1m0s"}};
    for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++) {
        sl_llm_go_duration(d[i].ns, b, sizeof(b));
        T_EQ_S(b, d[i].want);
    }
    sl_llm_rfc3339(1764810000000000000ll, b, sizeof(b));
    T_EQ_S(b, "2025-12-04T01:00:00Z");
    sl_llm_rfc3339(1764810000000000001ll, b, sizeof(b)); /* a reset is never early */
    T_EQ_S(b, "2025-12-04T01:00:01Z");
}

int main(void) {
    T_RUN(test_request_openai);
    T_RUN(test_request_others);
    T_RUN(test_request_hostile);
    T_RUN(test_request_100mb);
    T_RUN(test_usage_openai);
    T_RUN(test_usage_anthropic);
    T_RUN(test_usage_hostile);
    T_RUN(test_stream_openai);
    T_RUN(test_stream_anthropic);
    T_RUN(test_stream_settle_rules);
    T_RUN(test_stream_many);
    T_RUN(test_count_names);
    T_RUN(test_dialect_text);
    return T_DONE();
}
