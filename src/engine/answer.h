/* SPDX-License-Identifier: Apache-2.0 */
/*
 * answer.h -- one answer per decision (issue 25): what every protocol says about a decided
 * verdict, built once, without allocation, as header name/value pairs and fields; each
 * protocol encodes it directly (HTTP writes the pairs and a body, gRPC fills protobuf
 * fields from the pairs, RESP writes its reply from the fields). Nothing on a decision
 * path renders text to parse it again.
 *
 * Ownership: an sl_answer is a value on the caller's stack (or in a continuation); its
 * pairs point into its own text[] by offset, so it may be copied. It reads the verdict
 * only while sl_answer_build / sl_answer_problem / sl_answer_json run (and through
 * `a->v`, the per-window detail, which the caller keeps alive as long as it uses it).
 */
#ifndef SL_ENGINE_ANSWER_H
#define SL_ENGINE_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "proto/wbuf.h"

#define SL_ANSWER_MAX_HEADERS 24   /* pairs of one answer (room for provider dialects) */
#define SL_ANSWER_TEXT 4096        /* their bytes, "Name: value" each (gRPC's header budget) */

/* One header: text[name_off, +name_len) and text[value_off, +value_len); the HTTP line is
 * text[name_off, value_off + value_len) (the separator as the source wrote it). */
typedef struct sl_answer_header {
    uint16_t name_off, name_len, value_off, value_len;
} sl_answer_header;

typedef struct sl_answer {
    const sl_verdict *v;      /* the per-window detail: v->items[0 .. v->n) */
    int status;               /* the engine's HTTP status (v->status at build time) */
    sl_action action;         /* the action at build time */
    bool allowed;             /* admitted (allow, or a shaped delay) */
    int64_t retry_after_s;    /* the Retry-After value sent, -1 for none */
    int64_t delay_ms;         /* a shaped admission's delay, ceil ms (0: none) */
    /* the window a client counts in (the legacy X-RateLimit-* one: the deciding window
     * among the visible ones, else the first visible), when has_window */
    bool has_window;
    int deciding;             /* its item index (-1: none) */
    uint64_t limit, remaining;
    int64_t reset_s;          /* its t= (retry on a refusal, else reset), ceil seconds */
    uint8_t nvis;             /* the items the RateLimit fields list, in order */
    uint8_t vis[SLUICE_MAX_ITEMS];
    uint8_t nh;
    bool overflow;            /* (while building) the text is full */
    bool dropped;             /* the engine's headers did not fit: none are sent (as before) */
    sl_answer_header h[SL_ANSWER_MAX_HEADERS];
    uint16_t text_len;
    char text[SL_ANSWER_TEXT];
} sl_answer;

/* Builds the answer of decided verdict `v` (flags: SL_RENDER_LEGACY, SL_RENDER_NO_POLICY):
 * the pairs RateLimit-Policy, RateLimit, Retry-After, X-Sluice-Shed, a challenge's header,
 * X-RateLimit-* with SL_RENDER_LEGACY, and the fields above. No I/O, no allocation. */
void sl_answer_build(sl_answer *a, const sl_verdict *v, unsigned flags);

/* Appends one pair (false, nothing added, when it does not fit: the pairs already there
 * stay). For adapters adding their own headers (tokens, provider dialects). */
bool sl_answer_add(sl_answer *a, const char *name, size_t nlen, const char *value, size_t vlen);
bool sl_answer_add_i64(sl_answer *a, const char *name, int64_t value);
/* issue 24: the provider dialect pairs (`headers: openai|anthropic`), engine/llm_answer.c. */
void sl__answer_dialect(sl_answer *a, const sl_verdict *v);

static inline const char *sl_answer_name(const sl_answer *a, size_t i, size_t *len) {
    *len = a->h[i].name_len;
    return a->text + a->h[i].name_off;
}
static inline const char *sl_answer_value(const sl_answer *a, size_t i, size_t *len) {
    *len = a->h[i].value_len;
    return a->text + a->h[i].value_off;
}
/* False for a configured header line with no colon (HTTP sends it as it is; the other
 * protocols, which need a name and a value, skip it). */
static inline bool sl_answer_has_value(const sl_answer *a, size_t i) {
    return a->h[i].value_off != a->h[i].name_off + a->h[i].name_len;
}
/* The pairs as HTTP/1.1 header lines ("Name: value\r\n" each) into w. */
void sl_answer_http_headers(const sl_answer *a, sl_wbuf *w);
/* Bytes sl_answer_http_headers writes (a budget check before adding a pair). */
size_t sl_answer_http_len(const sl_answer *a);
/* Drops every pair when their header lines would take `budget` bytes or more (a protocol's
 * header budget: all or nothing, as the header text always was). */
void sl_answer_budget(sl_answer *a, size_t budget);
/* The pair named `name` (ASCII case-insensitive), or -1. */
int sl_answer_find(const sl_answer *a, const char *name);

/* The RFC 9457 problem+json body of verdict v as it stands (v->action, and `status` as
 * the status sent: the title of an about:blank problem is its reason phrase); the same
 * bytes as sl_render_problem. Returns bytes written, or SLUICE_EINVAL (not a refusal) /
 * SLUICE_ERANGE (w overflowed). */
int sl_answer_problem(const sl_verdict *v, int status, const char *traceparent, sl_wbuf *w);

/* /v1/check's JSON object: the verdict (sl_render_json's fields, per window), "headers"
 * from the pairs, "token" when given (tok, tl > 0); rc != 0: {"allowed","error",
 * "headers"}. Written straight into w; SLUICE_ERANGE when it did not fit. */
int sl_answer_json(const sl_answer *a, int rc, const char *tok, size_t tl, sl_wbuf *w);

#endif /* SL_ENGINE_ANSWER_H */
