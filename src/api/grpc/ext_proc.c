/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ext_proc.c -- see ext_proc.h. One sl_xp_call per gRPC stream, created by its first
 * message and freed when the stream goes (sl_grpc_stream_gone). Messages are unpacked on
 * the heap (a request body up to SL_H2_XP_MAX_MESSAGE); the one a decision waits for is
 * kept until its verdict comes. Invariants: one ProcessingResponse per ProcessingRequest
 * (in order: the stream is busy while a decision waits, so later messages wait behind it);
 * `settled` is set before any settlement goes out, so a reservation is settled at most
 * once whatever ends the stream (end of body, half-close, reset, session gone).
 * Units: tokens (src/llm), bytes.
 */
#include "api/grpc/ext_proc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/compiled.h"
#include "engine/answer.h"
#include "ext_proc.pb-c.h"

#define XP_MAX_HEADERS 64
#define XP_HEADER_BYTES 16384u   /* request header bytes kept for the decision */
#define XP_WHOLE_MAX (1u << 20)  /* a non-streamed response body read for its usage */

typedef Envoy__Service__ExtProc__V3__ProcessingRequest XReq;
typedef Envoy__Service__ExtProc__V3__ProcessingResponse XResp;
typedef Envoy__Service__ExtProc__V3__CommonResponse XCommon;
typedef Envoy__Service__ExtProc__V3__HeaderMutation XMut;
typedef Envoy__Config__Core__V3__HeaderValueOption XHvo;
typedef Envoy__Config__Core__V3__HeaderValue XHv;

typedef enum { XP_NONE = 0, XP_AT_HEADERS, XP_AT_BODY } xp_phase;

struct sl_xp_call {
    sl_h2 *h;
    void *call;
    const sl_xp_hooks *hk;
    void *owner;
    /* the request's headers, copied (offsets into hmem: it grows) */
    char *hmem;
    size_t hlen;
    struct { uint32_t no, nl, vo, vl; } hdr[XP_MAX_HEADERS];
    size_t nh;
    int path_i, method_i, host_i, ctype_i, xff_i; /* index into hdr, -1 none */
    bool have_headers, header_overflow;
    /* the decision */
    xp_phase waiting_phase;     /* a decision waits (XP_NONE: none) */
    XReq *held;                 /* the message it answers */
    bool observe;               /* observability_mode: nothing is answered */
    sl_llm_request lrq;
    bool has_llm;
    int attempt;                /* 0: as asked; 1: clamped */
    bool clamped;
    uint64_t orig_max, new_max;
    bool decided;
    char tok[SL_TOKEN_MAX + 1];
    size_t tl;
    bool settled;
    sl_llm_params params;
    char policy[96];
    sl_llm_counts reserved;
    /* the admitted answer's header fields (RateLimit, RateLimit-Policy, the provider
     * dialect: "name\0value\0" pairs), added to the response headers */
    char *ans;
    size_t ans_len;
    /* the response */
    bool st_init, resp_body_seen, resp_eos;
    sl_llm_stream st;
    sl_llm_buf out;
    bool whole_mode;            /* a non-streamed LLM response: read whole for its usage */
    sl_llm_buf whole;
};

/* ---- small helpers -------------------------------------------------------------------- */

/* (the generated INIT of a oneof whose first member is bytes lacks a brace level) */
static void body_mutation_init(Envoy__Service__ExtProc__V3__BodyMutation *bm) {
    memset(bm, 0, sizeof(*bm));
    envoy__service__ext_proc__v3__body_mutation__init(bm);
}

static sl_str hstr(const sl_xp_call *x, int i, bool value) {
    if (i < 0) return (sl_str){NULL, 0};
    return value ? (sl_str){x->hmem + x->hdr[i].vo, x->hdr[i].vl} : (sl_str){x->hmem + x->hdr[i].no, x->hdr[i].nl};
}

static bool name_is(const char *p, size_t n, const char *lit) {
    size_t l = strlen(lit);
    return n == l && strncasecmp(p, lit, l) == 0;
}

static void keep_headers(sl_xp_call *x, const Envoy__Config__Core__V3__HeaderMap *m) {
    x->have_headers = true;
    if (m == NULL) return;
    for (size_t i = 0; i < m->n_headers; i++) {
        const XHv *hv = m->headers[i];
        if (hv == NULL || hv->key == NULL) continue;
        const char *v = hv->raw_value.len > 0 ? (const char *)hv->raw_value.data : hv->value ? hv->value : "";
        size_t vl = hv->raw_value.len > 0 ? hv->raw_value.len : strlen(v);
        size_t kl = strlen(hv->key);
        if (x->nh >= XP_MAX_HEADERS || x->hlen + kl + vl > XP_HEADER_BYTES) {
            x->header_overflow = true; /* the rest is not seen by the policies */
            continue;
        }
        if (x->hmem == NULL && (x->hmem = malloc(XP_HEADER_BYTES)) == NULL) return;
        memcpy(x->hmem + x->hlen, hv->key, kl);
        memcpy(x->hmem + x->hlen + kl, v, vl);
        int k = (int)x->nh++;
        x->hdr[k].no = (uint32_t)x->hlen;
        x->hdr[k].nl = (uint32_t)kl;
        x->hdr[k].vo = (uint32_t)(x->hlen + kl);
        x->hdr[k].vl = (uint32_t)vl;
        x->hlen += kl + vl;
        if (name_is(hv->key, kl, ":path")) x->path_i = k;
        else if (name_is(hv->key, kl, ":method")) x->method_i = k;
        else if (name_is(hv->key, kl, ":authority")) x->host_i = k;
        else if (name_is(hv->key, kl, "content-type")) x->ctype_i = k;
        else if (name_is(hv->key, kl, "x-forwarded-for")) x->xff_i = k;
    }
}

/* The request the policies see: method, path, host, client address (the first
 * x-forwarded-for entry: Envoy appends the downstream's), headers without the pseudo ones. */
static void build_request(sl_xp_call *x, sl_request *r, sl_header *hs) {
    memset(r, 0, sizeof(*r));
    r->method = hstr(x, x->method_i, true);
    r->path = hstr(x, x->path_i, true);
    r->host = hstr(x, x->host_i, true);
    if (x->xff_i >= 0) {
        sl_str v = hstr(x, x->xff_i, true);
        size_t n = 0;
        while (n < v.len && v.p[n] != ',') n++;
        while (n > 0 && v.p[n - 1] == ' ') n--;
        r->client_ip = (sl_str){v.p, n};
    }
    size_t k = 0;
    for (size_t i = 0; i < x->nh; i++) {
        sl_str nm = hstr(x, (int)i, false);
        if (nm.len > 0 && nm.p[0] == ':') continue;
        hs[k].name = nm;
        hs[k].value = hstr(x, (int)i, true);
        k++;
    }
    r->headers = hs;
    r->n_headers = k;
    if (x->has_llm) r->llm = &x->lrq;
}

/* Packs resp as the stream's next response message (nothing in observability mode). */
static void send_resp(sl_xp_call *x, const XResp *resp) {
    if (x->observe) return;
    size_t n = envoy__service__ext_proc__v3__processing_response__get_packed_size(resp);
    uint8_t *p = sl_h2_stream_reserve(x->h, x->call, n);
    if (p == NULL) {
        sl_h2_stream_close(x->h, x->call, SL_GRPC_RESOURCE_EXHAUSTED, "response too large");
        return;
    }
    envoy__service__ext_proc__v3__processing_response__pack(resp, p);
    sl_h2_stream_commit(x->h, x->call, n);
}

/* CONTINUE for the phase `which` (ProcessingResponse's oneof case), with an optional
 * header mutation and body mutation. */
static void send_common(sl_xp_call *x, int which, XMut *mut, Envoy__Service__ExtProc__V3__BodyMutation *bm) {
    XCommon cr = ENVOY__SERVICE__EXT_PROC__V3__COMMON_RESPONSE__INIT;
    cr.header_mutation = mut;
    cr.body_mutation = bm;
    Envoy__Service__ExtProc__V3__HeadersResponse hr = ENVOY__SERVICE__EXT_PROC__V3__HEADERS_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__BodyResponse br = ENVOY__SERVICE__EXT_PROC__V3__BODY_RESPONSE__INIT;
    Envoy__Service__ExtProc__V3__TrailersResponse tr = ENVOY__SERVICE__EXT_PROC__V3__TRAILERS_RESPONSE__INIT;
    hr.response = &cr;
    br.response = &cr;
    XResp r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    r.response_case = (Envoy__Service__ExtProc__V3__ProcessingResponse__ResponseCase)which;
    switch (which) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS: r.request_headers = &hr; break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS: r.response_headers = &hr; break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY: r.request_body = &br; break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY: r.response_body = &br; break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS: r.request_trailers = &tr; break;
    default: r.response_trailers = &tr; break;
    }
    send_resp(x, &r);
}

/* A set of header options built on the stack (names/values borrowed). */
typedef struct {
    XHv hv[SL_ANSWER_MAX_HEADERS + 4];
    XHvo o[SL_ANSWER_MAX_HEADERS + 4];
    XHvo *op[SL_ANSWER_MAX_HEADERS + 4];
    char names[SL_ANSWER_MAX_HEADERS + 4][64];
    size_t n;
    XMut m;
} hset;

static void hset_init(hset *s) {
    s->n = 0;
    XMut m = ENVOY__SERVICE__EXT_PROC__V3__HEADER_MUTATION__INIT;
    s->m = m;
}

/* Adds one header (name lower-cased, as HTTP/2 wants; value as raw_value). */
static void hset_add(hset *s, const char *name, size_t nl, const char *val, size_t vl) {
    if (s->n >= sizeof(s->o) / sizeof(s->o[0]) || nl >= sizeof(s->names[0])) return;
    size_t i = s->n++;
    for (size_t k = 0; k < nl; k++) {
        char c = name[k];
        s->names[i][k] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    s->names[i][nl] = '\0';
    XHv hv = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    hv.key = s->names[i];
    hv.raw_value.data = (uint8_t *)val;
    hv.raw_value.len = vl;
    s->hv[i] = hv;
    XHvo o = ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__INIT;
    o.header = &s->hv[i];
    o.append_action = ENVOY__CONFIG__CORE__V3__HEADER_VALUE_OPTION__HEADER_APPEND_ACTION__OVERWRITE_IF_EXISTS_OR_ADD;
    s->o[i] = o;
    s->op[i] = &s->o[i];
    s->m.n_set_headers = s->n;
    s->m.set_headers = s->op;
}

/* An ImmediateResponse: status, the headers in hs, a body, details for Envoy's log. */
static void send_immediate(sl_xp_call *x, int status, hset *hs, const char *body, size_t bl, const char *details) {
    Envoy__Type__V3__HttpStatus st = ENVOY__TYPE__V3__HTTP_STATUS__INIT;
    st.code = (Envoy__Type__V3__StatusCode)status;
    Envoy__Service__ExtProc__V3__ImmediateResponse ir = ENVOY__SERVICE__EXT_PROC__V3__IMMEDIATE_RESPONSE__INIT;
    ir.status = &st;
    ir.headers = hs->n ? &hs->m : NULL;
    ir.body.data = (uint8_t *)body;
    ir.body.len = bl;
    ir.details = (char *)details;
    XResp r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__INIT;
    r.response_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE;
    r.immediate_response = &ir;
    send_resp(x, &r);
}

/* A problem+json ImmediateResponse for a request refused before any decision. */
static void refuse_plain(sl_xp_call *x, int status, const char *title, const char *detail) {
    char body[640];
    int n = snprintf(body, sizeof(body),
                     "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d,\"detail\":\"", title, status);
    for (const char *p = detail; *p && n < (int)sizeof(body) - 4; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') body[n++] = '\\';
        body[n++] = (c < 0x20) ? ' ' : (char)c;
    }
    n += snprintf(body + n, sizeof(body) - (size_t)n, "\"}");
    hset hs;
    hset_init(&hs);
    hset_add(&hs, "content-type", 12, "application/problem+json", 24);
    send_immediate(x, status, &hs, body, (size_t)n, "sluice_refused");
}

/* The answer of a refused or failed verdict: its status, RateLimit fields (and the
 * provider dialect the policy asks for), the problem+json body. */
static void refuse_verdict(sl_xp_call *x, int rc, const sl_verdict *v) {
    static _Thread_local sl_answer a;
    unsigned flags = x->hk && x->hk->render_flags ? x->hk->render_flags(x->owner) : 0;
    sl_answer_build(&a, v, flags);
    int status = v->status >= 400 && v->status <= 599 ? v->status : (v->action == SL_FAIL ? 503 : rc != 0 ? 500 : 429);
    char body[2048];
    sl_wbuf bw;
    sl_wbuf_init(&bw, body, sizeof(body));
    int pl = sl_answer_problem(v, status, NULL, &bw);
    if (pl < 0) {
        refuse_plain(x, status, status == 429 ? "Too Many Requests" : "Service Unavailable",
                     "refused by the rate limit policy");
        return;
    }
    hset hs;
    hset_init(&hs);
    hset_add(&hs, "content-type", 12, "application/problem+json", 24);
    for (size_t i = 0; i < a.nh; i++) {
        if (!sl_answer_has_value(&a, i)) continue;
        size_t nl, vl;
        const char *nm = sl_answer_name(&a, i, &nl);
        const char *vv = sl_answer_value(&a, i, &vl);
        hset_add(&hs, nm, nl, vv, vl);
    }
    send_immediate(x, status, &hs, body, (size_t)pl, status == 429 ? "sluice_rate_limited" : "sluice_refused");
}

/* ---- clamping ------------------------------------------------------------------------- */

/* Why from the refused verdict: each window counting output (or total) says what is left
 * for output (total: minus the request's input share); a refusal by any other window
 * (requests, input) cannot be cured by asking for fewer output tokens. 0 when none is. */
static uint64_t output_left(const sl_xp_call *x, const sl_verdict *v) {
    uint64_t left = UINT64_MAX;
    bool any = false;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->shadow) continue;
        unsigned c = it->info->counts;
        if (c == SL_LLM_COUNT_OUTPUT || c == SL_LLM_COUNT_TOTAL) {
            uint64_t other = c == SL_LLM_COUNT_TOTAL && it->cost > x->orig_max ? it->cost - x->orig_max : 0;
            uint64_t l = it->result.remaining > other ? it->result.remaining - other : 0;
            if (l < left) left = l;
            any = true;
        } else if (!it->result.allowed) {
            return 0;
        }
    }
    return any ? left : 0;
}

size_t sl_xp_rewrite_max_tokens(const char *body, size_t n, const sl_llm_request *rq, uint64_t value,
                                char *out, size_t cap) {
    char num[24];
    int nl = snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
    if (rq->has_max_tokens && rq->max_tokens_len > 0 && rq->max_tokens_off + rq->max_tokens_len <= n) {
        size_t len = n - rq->max_tokens_len + (size_t)nl;
        if (len > cap) return 0;
        memcpy(out, body, rq->max_tokens_off);
        memcpy(out + rq->max_tokens_off, num, (size_t)nl);
        memcpy(out + rq->max_tokens_off + (size_t)nl, body + rq->max_tokens_off + rq->max_tokens_len,
               n - rq->max_tokens_off - rq->max_tokens_len);
        return len;
    }
    /* no max_tokens in the request: the field goes first in the object */
    const char *field = rq->api == SL_LLM_OPENAI_RESPONSES ? "max_output_tokens" : "max_tokens";
    size_t i = 0;
    while (i < n && body[i] != '{') i++;
    if (i == n) return 0;
    size_t j = i + 1;
    while (j < n && (body[j] == ' ' || body[j] == '\t' || body[j] == '\r' || body[j] == '\n')) j++;
    bool empty = j < n && body[j] == '}';
    char ins[64];
    int il = snprintf(ins, sizeof(ins), "\"%s\":%s%s", field, num, empty ? "" : ",");
    if (n + (size_t)il > cap) return 0;
    memcpy(out, body, i + 1);
    memcpy(out + i + 1, ins, (size_t)il);
    memcpy(out + i + 1 + il, body + i + 1, n - i - 1);
    return n + (size_t)il;
}

/* ---- settling --------------------------------------------------------------------------- */

static void usage_of_counts(const sl_llm_counts *c, sl_llm_usage *u) {
    memset(u, 0, sizeof(*u));
    u->have = SL_LLM_U_PROMPT | SL_LLM_U_COMPLETION;
    u->prompt = c->input;
    u->completion = c->output;
}

/* The one settlement of x's reservation. complete: the response body's end was seen
 * (else the client went away, or the stream was reset). */
static void settle_once(sl_xp_call *x, bool complete) {
    if (x->tl == 0 || x->settled || x->hk == NULL) return;
    x->settled = true;
    sl_llm_usage u;
    sl_xp_settle_kind k;
    if (x->st_init) {
        sl_llm_counts c;
        sl_llm_settle_src src = sl_llm_stream_settle(&x->st, complete, &c);
        if (src == SL_LLM_SETTLE_USAGE) {
            u = x->st.usage;
            k = SL_XP_SETTLED_USAGE;
        } else if (src == SL_LLM_SETTLE_ESTIMATE) {
            usage_of_counts(&c, &u);
            k = SL_XP_SETTLED_ESTIMATE;
        } else {
            k = SL_XP_RESERVATION_KEPT;
        }
    } else if (x->whole_mode) {
        memset(&u, 0, sizeof(u));
        char why[128];
        if (complete && sl_llm_parse_usage(x->whole.p ? x->whole.p : "", x->whole.len, &u, why, sizeof(why)) == 1 &&
            (u.have & SL_LLM_U_COMPLETION)) {
            k = SL_XP_SETTLED_USAGE;
        } else if (complete) {
            k = SL_XP_RESERVATION_KEPT;
        } else {
            sl_llm_counts c = x->reserved;
            c.output = sl_llm_estimate(x->whole.len, &x->params);
            usage_of_counts(&c, &u);
            k = SL_XP_SETTLED_ESTIMATE;
        }
    } else if (complete || !x->resp_body_seen) {
        /* no response body came: a kept reservation when the exchange ended normally,
         * else (reset before any output) the input estimate and no output */
        if (complete) {
            k = SL_XP_RESERVATION_KEPT;
        } else {
            sl_llm_counts c = x->reserved;
            c.output = 0;
            usage_of_counts(&c, &u);
            k = SL_XP_SETTLED_ESTIMATE;
        }
    } else {
        k = SL_XP_RESERVATION_KEPT;
    }
    if (k != SL_XP_RESERVATION_KEPT) x->hk->settle(x->owner, x->tok, x->tl, &u);
    if (x->hk->settled) x->hk->settled(x->owner, k, x->policy);
}

/* ---- phases ------------------------------------------------------------------------------ */

static void free_held(sl_xp_call *x) {
    if (x->held != NULL) protobuf_c_message_free_unpacked(&x->held->base, NULL);
    x->held = NULL;
}

/* Starts x's decision for phase ph; returns true when it waits (the stream is busy). */
static bool start_decision(sl_xp_call *x, xp_phase ph) {
    sl_request r;
    sl_header hs[XP_MAX_HEADERS];
    build_request(x, &r, hs);
    x->waiting_phase = ph;
    int rc = x->hk && x->hk->decide ? x->hk->decide(x->owner, x, &r) : -1;
    if (rc < 0) {
        x->waiting_phase = XP_NONE;
        free_held(x);
        refuse_plain(x, 503, "Service Unavailable", "no policy loaded, or too many requests wait for the store");
        return false;
    }
    return x->waiting_phase != XP_NONE; /* inline: sl_xp_decided ran already */
}

/* The policy facts of an admitted verdict: the LLM parameters and the policy's name of
 * its first LLM window (defaults when none). */
static void take_policy(sl_xp_call *x, const sl_verdict *v) {
    sl_llm_params_default(&x->params);
    x->policy[0] = '\0';
    for (size_t i = 0; i < v->n; i++) {
        const sl_window_info *in = v->items[i].info;
        if (in->llm != NULL || in->counts != SL_LLM_COUNT_NONE) {
            if (in->llm != NULL) x->params = in->llm->params;
            snprintf(x->policy, sizeof(x->policy), "%s", in->policy ? in->policy : "");
            return;
        }
    }
    if (v->n > 0 && v->items[0].info->policy) snprintf(x->policy, sizeof(x->policy), "%s", v->items[0].info->policy);
}

static const sl_cllm *llm_of(const sl_verdict *v) {
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i].info->llm != NULL) return v->items[i].info->llm;
    return NULL;
}

/* An admitted verdict's header fields, kept for the response headers (what a refusal
 * sends in its ImmediateResponse: RateLimit, RateLimit-Policy, the provider dialect).
 * The last admitted decision's (the body phase's after the headers phase's). */
static void keep_answer(sl_xp_call *x, const sl_verdict *v) {
    static _Thread_local sl_answer a;
    unsigned flags = x->hk && x->hk->render_flags ? x->hk->render_flags(x->owner) : 0;
    sl_answer_build(&a, v, flags);
    size_t need = 0;
    for (size_t i = 0; i < a.nh; i++) {
        if (!sl_answer_has_value(&a, i)) continue;
        size_t nl, vl;
        sl_answer_name(&a, i, &nl);
        sl_answer_value(&a, i, &vl);
        need += nl + vl + 2;
    }
    if (need == 0 || need > 4096) return; /* none, or more than a response should carry */
    char *b = malloc(need);
    if (b == NULL) return;
    size_t at = 0;
    for (size_t i = 0; i < a.nh; i++) {
        if (!sl_answer_has_value(&a, i)) continue;
        size_t nl, vl;
        const char *nm = sl_answer_name(&a, i, &nl);
        const char *vv = sl_answer_value(&a, i, &vl);
        memcpy(b + at, nm, nl);
        b[at + nl] = '\0';
        memcpy(b + at + nl + 1, vv, vl);
        b[at + nl + 1 + vl] = '\0';
        at += nl + vl + 2;
    }
    free(x->ans);
    x->ans = b;
    x->ans_len = at;
}

/* The body phase admitted: CONTINUE, with the clamped body when max_tokens was clamped. */
static void admit_body(sl_xp_call *x, const sl_verdict *v) {
    take_policy(x, v);
    if (sl_verdict_needs_token(v)) {
        int tl = sl_verdict_token(v, x->tok, sizeof(x->tok));
        x->tl = tl > 0 ? (size_t)tl : 0;
    }
    if (x->has_llm) sl_llm_reserve(&x->lrq, &x->params, &x->reserved);
    if (!x->clamped) {
        send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY, NULL, NULL);
        return;
    }
    const ProtobufCBinaryData *b = &x->held->request_body->body;
    size_t cap = b->len + 64;
    char *nb = malloc(cap);
    size_t nl = nb ? sl_xp_rewrite_max_tokens((const char *)b->data, b->len, &x->lrq, x->new_max, nb, cap) : 0;
    if (nl == 0) { /* cannot happen with the room above; refuse rather than overshoot */
        free(nb);
        refuse_plain(x, 500, "Internal Server Error", "max_tokens could not be rewritten");
        return;
    }
    Envoy__Service__ExtProc__V3__BodyMutation bm;
    body_mutation_init(&bm);
    bm.mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_BODY;
    bm.body.data = (uint8_t *)nb;
    bm.body.len = nl;
    hset hs;
    hset_init(&hs);
    char cl[24], cv[48];
    int cll = snprintf(cl, sizeof(cl), "%zu", nl);
    int cvl = snprintf(cv, sizeof(cv), "%llu->%llu", (unsigned long long)x->orig_max, (unsigned long long)x->new_max);
    hset_add(&hs, "content-length", 14, cl, (size_t)cll);
    hset_add(&hs, SL_XP_CLAMP_HEADER, strlen(SL_XP_CLAMP_HEADER), cv, (size_t)cvl);
    send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY, &hs.m, &bm);
    free(nb);
}

void sl_xp_decided(sl_h2 *h, sl_xp_call *x, int rc, const sl_verdict *v) {
    (void)h;
    xp_phase ph = x->waiting_phase;
    x->waiting_phase = XP_NONE;
    bool was_busy = ph != XP_NONE;
    if (ph == XP_NONE) return;
    bool admitted = rc == 0 && (v->action == SL_ALLOW || v->action == SL_DELAY);
    if (!admitted && rc == 0 && v->action == SL_REJECT && ph == XP_AT_BODY && x->has_llm && x->attempt == 0) {
        const sl_cllm *cl = llm_of(v);
        uint64_t minout = cl ? cl->min_output : 1;
        if (!x->lrq.has_max_tokens) { /* reserved: the policy's default_max_tokens */
            sl_llm_params d;
            sl_llm_params_default(&d);
            x->orig_max = cl ? cl->params.default_max_tokens : d.default_max_tokens;
        }
        bool clamp_ok = cl == NULL || !cl->reject_short;
        uint64_t left = clamp_ok ? output_left(x, v) : 0;
        if (clamp_ok && left >= minout && left < x->orig_max) {
            /* ask again for what is left (another request may take it meanwhile: then the
             * second decision refuses) */
            x->attempt = 1;
            x->clamped = true;
            x->new_max = left;
            x->lrq.has_max_tokens = 1;
            x->lrq.max_tokens = left;
            if (start_decision(x, XP_AT_BODY)) return;
            goto done;
        }
    }
    x->decided = true;
    if (!admitted) {
        x->clamped = false;
        refuse_verdict(x, rc, v);
    } else if (ph == XP_AT_BODY) {
        keep_answer(x, v);
        admit_body(x, v);
    } else {
        keep_answer(x, v);
        take_policy(x, v);
        if (sl_verdict_needs_token(v)) {
            int tl = sl_verdict_token(v, x->tok, sizeof(x->tok));
            x->tl = tl > 0 ? (size_t)tl : 0;
        }
        send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS, NULL, NULL);
    }
    free_held(x);
done:
    /* a decision that waited: the stream's next messages follow (a no-op inline) */
    if (was_busy && x->waiting_phase == XP_NONE) sl_h2_stream_resume(x->h, x->call);
}

static bool is_json_type(sl_str ct) {
    size_t n = 0;
    while (n < ct.len && ct.p[n] != ';') n++;
    while (n > 0 && (ct.p[n - 1] == ' ' || ct.p[n - 1] == '\t')) n--;
    return (n == 16 && strncasecmp(ct.p, "application/json", 16) == 0) ||
           (n > 5 && strncasecmp(ct.p + n - 5, "+json", 5) == 0);
}

/* Returns true when the stream waits for a decision; *took: m is the decision's (freed by
 * it), else the caller frees m. */
static bool on_request_body(sl_xp_call *x, XReq *m, bool *took) {
    *took = false;
    const Envoy__Service__ExtProc__V3__HttpBody *b = m->request_body;
    if (x->decided || x->waiting_phase != XP_NONE) { /* a body after the decision: as is */
        send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_BODY, NULL, NULL);
        return false;
    }
    if (!b->end_of_stream) {
        refuse_plain(x, 500, "Internal Server Error",
                     "sluice's ext_proc needs the whole request body: set request_body_mode: BUFFERED");
        return false;
    }
    sl_str ct = hstr(x, x->ctype_i, true);
    if (b->body.len > 0 && (x->ctype_i < 0 || is_json_type(ct))) {
        sl_str path = hstr(x, x->path_i, true);
        sl_llm_api hint = path.p ? sl_llm_api_from_path(path.p, path.len) : SL_LLM_API_UNKNOWN;
        char why[128];
        if (sl_llm_parse_request((const char *)b->body.data, b->body.len, hint, &x->lrq, why, sizeof(why)) != 0) {
            char d[200];
            snprintf(d, sizeof(d), "request body: %s", why);
            refuse_plain(x, 400, "Bad Request", d);
            return false;
        }
        x->has_llm = true;
        x->orig_max = x->lrq.has_max_tokens ? x->lrq.max_tokens : 0;
    }
    x->held = m;
    *took = true;
    return start_decision(x, XP_AT_BODY);
}

/* The response headers: the admitted answer's RateLimit fields (as of the decision) and
 * the clamp header when max_tokens was clamped. */
static void on_response_headers(sl_xp_call *x) {
    const int which = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_HEADERS;
    if (!x->clamped && x->ans_len == 0) {
        send_common(x, which, NULL, NULL);
        return;
    }
    hset hs;
    hset_init(&hs);
    for (size_t at = 0; at < x->ans_len;) {
        const char *nm = x->ans + at;
        size_t nl = strlen(nm);
        const char *vv = nm + nl + 1;
        size_t vl = strlen(vv);
        hset_add(&hs, nm, nl, vv, vl);
        at += nl + vl + 2;
    }
    char cv[48];
    if (x->clamped) {
        int cvl = snprintf(cv, sizeof(cv), "%llu->%llu", (unsigned long long)x->orig_max,
                           (unsigned long long)x->new_max);
        hset_add(&hs, SL_XP_CLAMP_HEADER, strlen(SL_XP_CLAMP_HEADER), cv, (size_t)cvl);
    }
    send_common(x, which, &hs.m, NULL);
}

/* A response body chunk (STREAMED): through the stream cutter; the chunk is replaced when
 * what goes on differs from what came. */
static void on_response_body(sl_xp_call *x, const Envoy__Service__ExtProc__V3__HttpBody *b) {
    x->resp_body_seen = true;
    const int which = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY;
    if (x->tl == 0 || x->settled || !x->has_llm) { /* nothing to count: as is */
        send_common(x, which, NULL, NULL);
        return;
    }
    if (!x->st_init && !x->whole_mode) {
        if (x->lrq.stream) {
            sl_llm_stream_init(&x->st, x->lrq.api, &x->params, x->reserved.output, &x->reserved, x->policy);
            x->st_init = true;
        } else {
            x->whole_mode = true;
        }
    }
    if (x->whole_mode) {
        if (x->whole.len + b->body.len <= XP_WHOLE_MAX) (void)sl_llm_buf_put(&x->whole, b->body.data, b->body.len);
        send_common(x, which, NULL, NULL);
        if (b->end_of_stream) {
            x->resp_eos = true;
            settle_once(x, true);
        }
        return;
    }
    x->out.len = 0;
    if (sl_llm_stream_feed(&x->st, (const char *)b->body.data, b->body.len, b->end_of_stream, &x->out) != 0) {
        sl_h2_stream_close(x->h, x->call, SL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (x->out.len == b->body.len && (b->body.len == 0 || memcmp(x->out.p, b->body.data, b->body.len) == 0)) {
        send_common(x, which, NULL, NULL);
    } else {
        Envoy__Service__ExtProc__V3__BodyMutation bm;
    body_mutation_init(&bm);
        if (x->out.len == 0) {
            bm.mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_CLEAR_BODY;
            bm.clear_body = 1;
        } else {
            bm.mutation_case = ENVOY__SERVICE__EXT_PROC__V3__BODY_MUTATION__MUTATION_BODY;
            bm.body.data = (uint8_t *)x->out.p;
            bm.body.len = x->out.len;
        }
        send_common(x, which, NULL, &bm);
    }
    if (x->out.cap > 65536) sl_llm_buf_free(&x->out); /* a big chunk's room is not kept */
    if (b->end_of_stream) {
        x->resp_eos = true;
        settle_once(x, true);
    }
}

/* ---- the streaming method ------------------------------------------------------------------ */

bool sl_grpc_streaming_method(const char *path, size_t len) {
    return len == sizeof(SL_XP_PATH) - 1 && memcmp(path, SL_XP_PATH, len) == 0;
}

static sl_xp_call *call_of(sl_h2 *h, void *call, void **app) {
    if (*app != NULL) return *app;
    sl_xp_call *x = calloc(1, sizeof(*x));
    if (x == NULL) return NULL;
    x->h = h;
    x->call = call;
    const sl_h2_opts *o = sl_h2_options(h);
    x->hk = o->xp;
    x->owner = o->owner;
    x->path_i = x->method_i = x->host_i = x->ctype_i = x->xff_i = -1;
    *app = x;
    return x;
}

int sl_grpc_stream_message(sl_h2 *h, void *call, void **app, const uint8_t *msg, size_t len) {
    sl_xp_call *x = call_of(h, call, app);
    if (x == NULL) {
        sl_h2_stream_close(h, call, SL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return 0;
    }
    XReq *m = (XReq *)protobuf_c_message_unpack(&envoy__service__ext_proc__v3__processing_request__descriptor, NULL,
                                                len, msg);
    if (m == NULL) {
        sl_h2_stream_close(h, call, SL_GRPC_INVALID_ARGUMENT, "cannot parse ProcessingRequest");
        return 0;
    }
    x->observe = m->observability_mode != 0;
    bool held = false;
    switch (m->request_case) {
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS:
        keep_headers(x, m->request_headers->headers);
        if (m->request_headers->end_of_stream && !x->decided) {
            x->held = m; /* no body: decided on the headers */
            held = true;
            if (start_decision(x, XP_AT_HEADERS)) return 1;
        } else {
            send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS, NULL, NULL);
        }
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_BODY:
        if (on_request_body(x, m, &held)) return 1;
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_HEADERS:
        on_response_headers(x);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY:
        on_response_body(x, m->response_body);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_TRAILERS:
        send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_TRAILERS, NULL, NULL);
        break;
    case ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_TRAILERS:
        send_common(x, ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_TRAILERS, NULL, NULL);
        break;
    default:
        sl_h2_stream_close(h, call, SL_GRPC_INVALID_ARGUMENT, "ProcessingRequest names no phase");
        break;
    }
    /* a held message was freed by its decision (free_held); any other goes now */
    if (!held) protobuf_c_message_free_unpacked(&m->base, NULL);
    return 0;
}

void sl_grpc_stream_oversize(sl_h2 *h, void *call, void **app, uint32_t declared) {
    sl_xp_call *x = call_of(h, call, app);
    if (x == NULL) return;
    char d[160];
    snprintf(d, sizeof(d), "a message of %u bytes is above sluice's ext_proc limit of %u bytes", declared,
             (unsigned)SL_H2_XP_MAX_MESSAGE);
    refuse_plain(x, 413, "Content Too Large", d);
    sl_h2_stream_close(h, call, SL_GRPC_OK, NULL);
}

void sl_grpc_stream_halfclose(sl_h2 *h, void *call, void **app) {
    sl_xp_call *x = *app;
    /* Envoy ends the stream when the exchange is over: a response that sent no body to
     * be seen is complete as far as sluice can tell (its reservation stands); one whose
     * body stopped midway is settled from what streamed */
    if (x != NULL) settle_once(x, x->resp_eos || !x->resp_body_seen);
    sl_h2_stream_close(h, call, SL_GRPC_OK, NULL);
}

void sl_grpc_stream_gone(sl_h2 *h, void *call, void *app) {
    (void)h;
    (void)call;
    sl_xp_call *x = app;
    if (x->waiting_phase != XP_NONE && x->hk && x->hk->forget) x->hk->forget(x->owner, x);
    x->waiting_phase = XP_NONE;
    settle_once(x, x->resp_eos);
    free_held(x);
    if (x->st_init) sl_llm_stream_free(&x->st);
    sl_llm_buf_free(&x->out);
    sl_llm_buf_free(&x->whole);
    free(x->hmem);
    free(x->ans);
    free(x);
}
