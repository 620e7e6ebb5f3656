/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_stream.c -- bidirectional gRPC streams in the HTTP/2 session (h2.c), driven by
 * an nghttp2 client session in memory playing Envoy's side of ext_proc: request messages
 * split across DATA frames and fed one byte at a time are each answered in order, without
 * END_STREAM, and the client's half-close gets the trailers; a long stream of messages
 * in both directions (more than every flow-control window) completes, so WINDOW_UPDATEs go
 * both ways; a message announced above the limit is refused from its prefix; a reset
 * stream and a destroyed session free their state (ASan), and a fake store sees one
 * settlement per reservation.
 */
#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "api/grpc/ext_proc.h"
#include "api/grpc/h2.h"
#include "ext_proc.pb-c.h"
#include "t.h"

typedef struct {
    uint8_t *data;          /* received DATA of the stream */
    size_t len, cap;
    int grpc_status;        /* from trailers (-1: none yet) */
    bool ended;             /* END_STREAM received */
    bool reset;
} sres;

#define MAXS 8
typedef struct {
    nghttp2_session *s;
    sres st[MAXS];          /* by stream index (id 1,3,5.. -> 0,1,2..) */
} cli;

static sres *res(cli *c, int32_t id) { return &c->st[(id - 1) / 2 % MAXS]; }

static int c_data(nghttp2_session *s, uint8_t f, int32_t id, const uint8_t *d, size_t n, void *ud) {
    (void)s;
    (void)f;
    sres *r = res(ud, id);
    if (r->len + n > r->cap) {
        r->cap = (r->len + n) * 2;
        r->data = realloc(r->data, r->cap);
    }
    memcpy(r->data + r->len, d, n);
    r->len += n;
    return 0;
}

static int c_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *n, size_t nl, const uint8_t *v,
                    size_t vl, uint8_t fl, void *ud) {
    (void)s;
    (void)fl;
    if (nl == 11 && memcmp(n, "grpc-status", 11) == 0) {
        char b[8] = {0};
        memcpy(b, v, vl < 7 ? vl : 7);
        res(ud, f->hd.stream_id)->grpc_status = atoi(b);
    }
    return 0;
}

static int c_frame(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    (void)s;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) && (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        res(ud, f->hd.stream_id)->ended = true;
    if (f->hd.type == NGHTTP2_RST_STREAM) res(ud, f->hd.stream_id)->reset = true;
    return 0;
}

static void cli_init(cli *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < MAXS; i++) c->st[i].grpc_status = -1;
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_data);
    nghttp2_session_callbacks_set_on_header_callback(cb, c_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, c_frame);
    nghttp2_session_client_new(&c->s, cb, c);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, NULL, 0);
}

static void cli_free(cli *c) {
    nghttp2_session_del(c->s);
    for (int i = 0; i < MAXS; i++) free(c->st[i].data);
}

/* Request bytes queued per stream, sent by a data provider that defers when empty. */
typedef struct {
    uint8_t *b;
    size_t len, off, cap;
    bool eof;
    int32_t id;
} qsrc;

static ssize_t q_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *src, void *ud) {
    (void)s;
    (void)id;
    (void)ud;
    qsrc *q = src->ptr;
    size_t n = q->len - q->off;
    if (n == 0) {
        if (q->eof) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        return NGHTTP2_ERR_DEFERRED;
    }
    if (n > length) n = length;
    if (n > 7) n = 7; /* messages split across many DATA frames */
    memcpy(buf, q->b + q->off, n);
    q->off += n;
    return (ssize_t)n;
}

static void q_put(cli *c, qsrc *q, const uint8_t *m, size_t n) {
    if (q->len + n + 5 > q->cap) {
        q->cap = (q->len + n + 5) * 2;
        q->b = realloc(q->b, q->cap);
    }
    uint8_t *p = q->b + q->len;
    p[0] = 0;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    memcpy(p + 5, m, n);
    q->len += n + 5;
    if (q->id) nghttp2_session_resume_data(c->s, q->id);
}

#define NVC(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE}

static int32_t open_stream(cli *c, qsrc *q) {
    nghttp2_nv nva[] = {NVC(":method", "POST"), NVC(":scheme", "http"), NVC(":authority", "sluice"),
                        NVC(":path", SL_XP_PATH), NVC("content-type", "application/grpc"), NVC("te", "trailers")};
    nghttp2_data_provider prd = {.source = {.ptr = q}, .read_callback = q_read};
    q->id = nghttp2_submit_request(c->s, NULL, nva, sizeof(nva) / sizeof(nva[0]), &prd, NULL);
    return q->id;
}

/* Moves bytes both ways until neither side has more; the server is fed one byte at a time
 * when `bytewise`. */
static void pump(cli *c, sl_h2 *h, bool bytewise) {
    for (int round = 0; round < 100000; round++) {
        bool moved = false;
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(c->s, &p)) > 0) {
            moved = true;
            if (bytewise) {
                for (ssize_t i = 0; i < n; i++) T_EQ_I(sl_h2_feed(h, p + i, 1, NULL), 0);
            } else {
                T_EQ_I(sl_h2_feed(h, p, (size_t)n, NULL), 0);
            }
        }
        uint8_t out[16384];
        size_t k;
        while ((k = sl_h2_send(h, out, sizeof(out))) > 0) {
            moved = true;
            T_CHECK(nghttp2_session_mem_recv(c->s, out, k) == (ssize_t)k);
        }
        if (!moved) return;
    }
    T_FAIL("pump did not settle");
}

/* The ProcessingResponses in a stream's received bytes; returns how many, cases into kinds. */
static size_t responses(const sres *r, int *kinds, size_t max) {
    size_t off = 0, k = 0;
    while (off + 5 <= r->len) {
        uint32_t ml = (uint32_t)r->data[off + 1] << 24 | (uint32_t)r->data[off + 2] << 16 |
                      (uint32_t)r->data[off + 3] << 8 | r->data[off + 4];
        T_CHECK(off + 5 + ml <= r->len);
        Envoy__Service__ExtProc__V3__ProcessingResponse *m = envoy__service__ext_proc__v3__processing_response__unpack(
            NULL, ml, r->data + off + 5);
        T_CHECK(m != NULL);
        if (k < max) kinds[k] = (int)m->response_case;
        k++;
        envoy__service__ext_proc__v3__processing_response__free_unpacked(m, NULL);
        off += 5 + ml;
    }
    T_EQ_U(off, r->len);
    return k;
}

static size_t pack_headers(uint8_t *buf, bool eos) {
    Envoy__Config__Core__V3__HeaderValue hv = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
    hv.key = ":path";
    hv.raw_value.data = (uint8_t *)"/v1/chat/completions";
    hv.raw_value.len = 20;
    Envoy__Config__Core__V3__HeaderValue *hvs[1] = {&hv};
    Envoy__Config__Core__V3__HeaderMap hm = ENVOY__CONFIG__CORE__V3__HEADER_MAP__INIT;
    hm.n_headers = 1;
    hm.headers = hvs;
    Envoy__Service__ExtProc__V3__HttpHeaders hh = ENVOY__SERVICE__EXT_PROC__V3__HTTP_HEADERS__INIT;
    hh.headers = &hm;
    hh.end_of_stream = eos;
    Envoy__Service__ExtProc__V3__ProcessingRequest r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__INIT;
    r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_REQUEST_HEADERS;
    r.request_headers = &hh;
    return envoy__service__ext_proc__v3__processing_request__pack(&r, buf);
}

static size_t pack_resp_body(uint8_t *buf, const uint8_t *body, size_t n, bool eos) {
    Envoy__Service__ExtProc__V3__HttpBody hb = ENVOY__SERVICE__EXT_PROC__V3__HTTP_BODY__INIT;
    hb.body.data = (uint8_t *)body;
    hb.body.len = n;
    hb.end_of_stream = eos;
    Envoy__Service__ExtProc__V3__ProcessingRequest r = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__INIT;
    r.request_case = ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_REQUEST__REQUEST_RESPONSE_BODY;
    r.response_body = &hb;
    return envoy__service__ext_proc__v3__processing_request__pack(&r, buf);
}

/* ---- a fake store behind the hooks: every decision admitted with a token ---- */

static struct {
    int decides, settles, kept, estimates, usages;
} F;

static int f_decide(void *owner, sl_xp_call *x, const sl_request *r) {
    (void)owner;
    (void)r;
    F.decides++;
    static sl_verdict v; /* large: not on the stack */
    memset(&v, 0, sizeof(v));
    v.action = SL_ALLOW;
    v.status = 200;
    /* no items: nothing to settle (no token); the stream passes through */
    sl_xp_decided(NULL, x, 0, &v);
    return 0;
}
static void f_forget(void *o, sl_xp_call *x) {
    (void)o;
    (void)x;
}
static void f_settle(void *o, const char *t, size_t tl, const sl_llm_usage *u) {
    (void)o;
    (void)t;
    (void)tl;
    (void)u;
    F.settles++;
}
static void f_settled(void *o, sl_xp_settle_kind k, const char *p) {
    (void)o;
    (void)p;
    if (k == SL_XP_RESERVATION_KEPT) F.kept++;
    if (k == SL_XP_SETTLED_ESTIMATE) F.estimates++;
    if (k == SL_XP_SETTLED_USAGE) F.usages++;
}
static const sl_xp_hooks HOOKS = {.decide = f_decide, .forget = f_forget, .settle = f_settle, .settled = f_settled};

static sl_h2 *server(void) {
    sl_h2_opts o = {.xp = &HOOKS};
    sl_h2 *h = sl_h2_create(&o);
    T_CHECK(h != NULL);
    return h;
}

/* ---- tests ---- */

static void messages_split_bytewise_answered_in_order(void) {
    sl_h2 *h = server();
    cli c;
    cli_init(&c);
    qsrc q = {0};
    int32_t id = open_stream(&c, &q);
    uint8_t m[256];
    for (int i = 0; i < 3; i++) q_put(&c, &q, m, pack_headers(m, false));
    uint8_t body[] = "data: {}\n\n";
    q_put(&c, &q, m, pack_resp_body(m, body, sizeof(body) - 1, false));
    pump(&c, h, true);
    sres *r = res(&c, id);
    int kinds[8];
    T_EQ_U(responses(r, kinds, 8), 4);
    T_EQ_I(kinds[0], ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_REQUEST_HEADERS);
    T_EQ_I(kinds[3], ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_RESPONSE_BODY);
    T_CHECK(!r->ended); /* responses go without END_STREAM */
    T_EQ_I(r->grpc_status, -1);
    q.eof = true; /* the client half-closes: trailers end the call */
    nghttp2_session_resume_data(c.s, id);
    pump(&c, h, false);
    T_CHECK(r->ended);
    T_EQ_I(r->grpc_status, 0);
    T_EQ_U(sl_h2_open_calls(h), 0);
    cli_free(&c);
    free(q.b);
    sl_h2_destroy(h);
}

static void long_stream_needs_window_updates_both_ways(void) {
    sl_h2 *h = server();
    cli c;
    cli_init(&c);
    qsrc q = {0};
    int32_t id = open_stream(&c, &q);
    /* 3000 messages of 2 KiB: 6 MB, beyond the stream and connection windows (1 MiB + 4 KiB,
     * 2 MiB + 8 KiB) and the client's receive window (64 KiB), in a few rounds */
    static uint8_t body[2048], m[4096];
    memset(body, 'x', sizeof(body));
    uint8_t hm[256];
    q_put(&c, &q, hm, pack_headers(hm, false));
    size_t total = 0;
    for (int round = 0; round < 30; round++) {
        for (int i = 0; i < 100; i++) q_put(&c, &q, m, pack_resp_body(m, body, sizeof(body), false));
        total += 100;
        pump(&c, h, false);
    }
    q.eof = true;
    nghttp2_session_resume_data(c.s, id);
    pump(&c, h, false);
    sres *r = res(&c, id);
    int kinds[4];
    T_EQ_U(responses(r, kinds, 4), total + 1);
    T_CHECK(r->ended);
    T_EQ_I(r->grpc_status, 0);
    cli_free(&c);
    free(q.b);
    sl_h2_destroy(h);
}

static void oversized_message_refused_from_its_prefix(void) {
    sl_h2 *h = server();
    cli c;
    cli_init(&c);
    qsrc q = {0};
    int32_t id = open_stream(&c, &q);
    uint8_t pre[5] = {0, 0x10, 0, 0, 0}; /* 256 MiB announced */
    if (q.len + 5 > q.cap) {
        q.cap = 64;
        q.b = realloc(q.b, q.cap);
    }
    memcpy(q.b, pre, 5);
    q.len = 5;
    pump(&c, h, false);
    sres *r = res(&c, id);
    int kinds[2];
    T_EQ_U(responses(r, kinds, 2), 1);
    T_EQ_I(kinds[0], ENVOY__SERVICE__EXT_PROC__V3__PROCESSING_RESPONSE__RESPONSE_IMMEDIATE_RESPONSE);
    T_CHECK(r->ended);
    T_EQ_I(r->grpc_status, 0);
    cli_free(&c);
    free(q.b);
    sl_h2_destroy(h);
}

static void reset_and_destroy_free_stream_state(void) {
    sl_h2 *h = server();
    cli c;
    cli_init(&c);
    qsrc q1 = {0}, q2 = {0};
    int32_t a = open_stream(&c, &q1);
    int32_t b = open_stream(&c, &q2);
    uint8_t m[256];
    q_put(&c, &q1, m, pack_headers(m, false));
    q_put(&c, &q2, m, pack_headers(m, true)); /* decided on its headers (fake store) */
    pump(&c, h, false);
    T_EQ_I(F.decides, 1);
    T_EQ_U(sl_h2_open_calls(h), 2);
    nghttp2_submit_rst_stream(c.s, NGHTTP2_FLAG_NONE, a, NGHTTP2_CANCEL);
    pump(&c, h, false);
    T_EQ_U(sl_h2_open_calls(h), 1);
    (void)b;
    cli_free(&c);
    free(q1.b);
    free(q2.b);
    sl_h2_destroy(h); /* b's state goes with the session (ASan: no leak) */
    T_EQ_I(F.settles, 0); /* no reservation was made: nothing to settle */
}

static void concurrent_stream_cap_announced(void) {
    sl_h2 *h = server();
    cli c;
    cli_init(&c);
    pump(&c, h, false);
    T_EQ_U(nghttp2_session_get_remote_settings(c.s, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS), 1024);
    cli_free(&c);
    sl_h2_destroy(h);
}

static void rewrite_max_tokens(void) {
    const char *b = "{\"model\":\"m\",\"max_tokens\": 400 ,\"stream\":true}";
    sl_llm_request rq;
    char err[128];
    T_EQ_I(sl_llm_parse_request(b, strlen(b), SL_LLM_API_UNKNOWN, &rq, err, sizeof(err)), 0);
    char out[128];
    size_t n = sl_xp_rewrite_max_tokens(b, strlen(b), &rq, 12, out, sizeof(out));
    T_CHECK(n > 0);
    out[n] = '\0';
    T_CHECK(strcmp(out, "{\"model\":\"m\",\"max_tokens\": 12 ,\"stream\":true}") == 0);
    const char *e = " { } ";
    memset(&rq, 0, sizeof(rq));
    n = sl_xp_rewrite_max_tokens(e, strlen(e), &rq, 7, out, sizeof(out));
    out[n] = '\0';
    T_CHECK(strcmp(out, " {\"max_tokens\":7 } ") == 0);
    rq.api = SL_LLM_OPENAI_RESPONSES;
    const char *r = "{\"model\":\"m\"}";
    n = sl_xp_rewrite_max_tokens(r, strlen(r), &rq, 7, out, sizeof(out));
    out[n] = '\0';
    T_CHECK(strcmp(out, "{\"max_output_tokens\":7,\"model\":\"m\"}") == 0);
    T_EQ_U(sl_xp_rewrite_max_tokens(r, strlen(r), &rq, 7, out, 10), 0); /* no room */
}

int main(void) {
    T_RUN(messages_split_bytewise_answered_in_order);
    T_RUN(long_stream_needs_window_updates_both_ways);
    T_RUN(oversized_message_refused_from_its_prefix);
    T_RUN(reset_and_destroy_free_stream_state);
    T_RUN(concurrent_stream_cap_announced);
    T_RUN(rewrite_max_tokens);
    return T_DONE();
}
