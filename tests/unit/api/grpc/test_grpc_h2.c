/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_grpc_h2.c -- the gRPC server session at the frame level: hand-built client frames
 * (preface, SETTINGS, HEADERS compressed with nghttp2's HPACK deflater, DATA) go in, the
 * frames that come out are parsed and their headers inflated. Asserts what a gRPC client
 * relies on: a normal response is HEADERS + one length-prefixed message + trailers with
 * grpc-status 0; immediate errors are Trailers-Only with the right status; calls are
 * independent streams on one connection, which stays usable after each error.
 */
#include <nghttp2/nghttp2.h>

#include "api/grpc/h2.h"
#include "api/grpc/rls.h"
#include "health.pb-c.h"
#include "t.h"

#define SEC SLUICE_NS_PER_S
#define RLS "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define HEALTH "/grpc.health.v1.Health/Check"

/* ---- a policy to decide with ---- */

static const char CONFIG[] =
    "domain: rl\n"
    "descriptors:\n"
    "  - key: k\n"
    "    value: v\n"
    "    rate_limit: {unit: minute, requests_per_unit: 10}\n"
    "  - key: two\n"
    "    rate_limit: {unit: minute, requests_per_unit: 2}\n"
    "  - key: free\n"
    "    rate_limit: {unlimited: true}\n";

typedef struct fx {
    sluice_clock *clk;
    sluice_store *st;
    sl_config *cfg;
    sl_engine *e;
    sl_grpc_env env;
} fx;

/* The decisions: the engine on a memory store, answered at once unless the test parks
 * them (waiting_calls). */
static sl_rls_sync SYNC;
static struct {
    bool park;
    void *calls[16];
    sl_grpc_reply replies[16];
    int ncalls;
    void *forgotten[16];
    int nforgotten;
    int owner;
} A;

static int fx_decide(void *ud, void *call, const sl_rls_req *rq, sl_grpc_reply *out) {
    (void)ud;
    if (!A.park) return sl_rls_reply_sync(&SYNC, rq, out);
    /* parked: decided now, delivered when the test says (as the server does once its
     * store answers) */
    if (A.ncalls < 16) {
        A.replies[A.ncalls] = *out;
        sl_rls_reply_sync(&SYNC, rq, &A.replies[A.ncalls]);
        A.calls[A.ncalls++] = call;
    }
    return 1;
}

static void fx_open(fx *f) {
    memset(f, 0, sizeof(*f));
    static sl_diag_list dl;
    T_EQ_I(sl_config_load_buffer(CONFIG, sizeof(CONFIG) - 1, "t.yaml", &f->cfg, &dl), SLUICE_OK);
    f->clk = sluice_clock_create_manual(INT64_C(1767225600) * SEC); /* a whole minute */
    int err;
    f->st = sluice_store_create(NULL, &err);
    f->e = sl_engine_create(f->cfg, f->st, &err, NULL, 0);
    T_CHECK(f->e != NULL);
    f->env.engine = f->e;
    f->env.decide = fx_decide;
    SYNC = (sl_rls_sync){.engine = f->e, .lane = f->st, .now = sluice_clock_now(f->clk)};
    f->env.mono_ns = 1000 * SEC;
}

static void fx_close(fx *f) {
    sl_engine_destroy(f->e);
    sl_config_destroy(f->cfg);
    sluice_store_destroy(f->st);
    sluice_clock_destroy(f->clk);
}

/* ---- client side: frames out ---- */

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void frame(buf *b, uint8_t type, uint8_t flags, uint32_t sid, const void *pl, size_t n) {
    uint8_t h[9] = {(uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n, type, flags,
                    (uint8_t)(sid >> 24 & 0x7f), (uint8_t)(sid >> 16), (uint8_t)(sid >> 8),
                    (uint8_t)sid};
    put(b, h, 9);
    if (n) put(b, pl, n);
}

typedef struct client {
    nghttp2_hd_deflater *def;
    nghttp2_hd_inflater *inf;
    buf out;                   /* bytes for the server */
    size_t data_in;            /* DATA payload received and not yet acknowledged */
} client;

static void client_init(client *c, bool preface) {
    memset(c, 0, sizeof(*c));
    nghttp2_hd_deflate_new(&c->def, 4096);
    nghttp2_hd_inflate_new(&c->inf);
    if (preface) {
        put(&c->out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
        frame(&c->out, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
    }
}

static void client_free(client *c) {
    nghttp2_hd_deflate_del(c->def);
    nghttp2_hd_inflate_del(c->inf);
    free(c->out.p);
}

#define MKNV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}

/* HEADERS for a call; extra headers as "name", "value" pairs ending with NULL. */
static void headers(client *c, uint32_t sid, const char *path, const char *ctype, bool end,
                    const char *const *extra) {
    nghttp2_nv nv[16] = {MKNV(":method", "POST"), MKNV(":scheme", "http"), MKNV(":path", path),
                         MKNV(":authority", "localhost"), MKNV("te", "trailers"),
                         MKNV("content-type", ctype)};
    size_t n = 6;
    for (size_t i = 0; extra && extra[i] && n < 16; i += 2) {
        nghttp2_nv x = MKNV(extra[i], extra[i + 1]);
        nv[n++] = x;
    }
    size_t bound = nghttp2_hd_deflate_bound(c->def, nv, n);
    uint8_t *blk = malloc(bound);
    ssize_t bl = nghttp2_hd_deflate_hd(c->def, blk, bound, nv, n);
    T_CHECK(bl > 0);
    frame(&c->out, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | (end ? NGHTTP2_FLAG_END_STREAM : 0),
          sid, blk, (size_t)bl);
    free(blk);
}

/* A gRPC message (prefix + bytes) split into DATA frames of at most `chunk` bytes. */
static void data(client *c, uint32_t sid, uint8_t flag, const void *msg, size_t len, bool end,
                 size_t chunk) {
    buf m = {0};
    uint8_t pre[5] = {flag, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                      (uint8_t)len};
    put(&m, pre, 5);
    if (len) put(&m, msg, len);
    size_t off = 0;
    while (off < m.len) {
        size_t n = m.len - off < chunk ? m.len - off : chunk;
        bool last = off + n == m.len;
        frame(&c->out, NGHTTP2_DATA, last && end ? NGHTTP2_FLAG_END_STREAM : 0, sid, m.p + off, n);
        off += n;
    }
    free(m.p);
}

/* ---- server output parsed ---- */

#define MAXS 128

typedef struct call_res {
    int http, grpc;            /* -1 until seen */
    char msg[256];
    char ctype[64];
    int header_frames;
    uint8_t data[70000];
    size_t dlen;
    bool end, rst;
    uint32_t rst_code;
} call_res;

typedef struct out_state {
    call_res s[MAXS];          /* by (stream id - 1) / 2 */
    int goaways, window_updates0, settings;
    uint32_t goaway_last, goaway_code;
} out_state;

static out_state O;

static call_res *res_of(uint32_t sid) {
    if (sid == 0 || sid / 2 >= MAXS) return NULL;
    return &O.s[(sid - 1) / 2];
}

static void out_reset(void) {
    memset(&O, 0, sizeof(O));
    for (int i = 0; i < MAXS; i++) O.s[i].http = O.s[i].grpc = -1;
}

static void parse_output(client *c, const uint8_t *p, size_t n) {
    size_t off = 0;
    while (off + 9 <= n) {
        size_t len = (size_t)p[off] << 16 | (size_t)p[off + 1] << 8 | p[off + 2];
        uint8_t type = p[off + 3], flags = p[off + 4];
        uint32_t sid = ((uint32_t)p[off + 5] << 24 | (uint32_t)p[off + 6] << 16 |
                        (uint32_t)p[off + 7] << 8 | p[off + 8]) & 0x7fffffffu;
        const uint8_t *pl = p + off + 9;
        T_CHECK(off + 9 + len <= n);
        if (off + 9 + len > n) return;
        call_res *r = res_of(sid);
        switch (type) {
        case NGHTTP2_SETTINGS: O.settings++; break;
        case NGHTTP2_GOAWAY:
            O.goaways++;
            O.goaway_last = ((uint32_t)pl[0] << 24 | (uint32_t)pl[1] << 16 | (uint32_t)pl[2] << 8 | pl[3]) & 0x7fffffffu;
            O.goaway_code = (uint32_t)pl[4] << 24 | (uint32_t)pl[5] << 16 | (uint32_t)pl[6] << 8 | pl[7];
            break;
        case NGHTTP2_WINDOW_UPDATE:
            if (sid == 0) O.window_updates0++;
            break;
        case NGHTTP2_RST_STREAM:
            if (r) {
                r->rst = true;
                r->rst_code = (uint32_t)pl[0] << 24 | (uint32_t)pl[1] << 16 | (uint32_t)pl[2] << 8 | pl[3];
            }
            break;
        case NGHTTP2_DATA:
            c->data_in += len; /* handed back with a WINDOW_UPDATE, as a real client does */
            if (r && r->dlen + len <= sizeof(r->data)) {
                memcpy(r->data + r->dlen, pl, len);
                r->dlen += len;
            }
            if (r && (flags & NGHTTP2_FLAG_END_STREAM)) r->end = true;
            break;
        case NGHTTP2_HEADERS: {
            T_CHECK(flags & NGHTTP2_FLAG_END_HEADERS);
            const uint8_t *in = pl;
            size_t inlen = len;
            if (r) r->header_frames++;
            for (;;) {
                nghttp2_nv nv;
                int fl = 0;
                ssize_t k = nghttp2_hd_inflate_hd2(c->inf, &nv, &fl, in, inlen, 1);
                T_CHECK(k >= 0);
                if (k < 0) break;
                in += k;
                inlen -= (size_t)k;
                if (fl & NGHTTP2_HD_INFLATE_EMIT) {
                    char v[512];
                    snprintf(v, sizeof(v), "%.*s", (int)nv.valuelen, nv.value);
                    if (r && nv.namelen == 7 && memcmp(nv.name, ":status", 7) == 0) r->http = atoi(v);
                    if (r && nv.namelen == 11 && memcmp(nv.name, "grpc-status", 11) == 0) r->grpc = atoi(v);
                    if (r && nv.namelen == 12 && memcmp(nv.name, "grpc-message", 12) == 0)
                        snprintf(r->msg, sizeof(r->msg), "%.200s", v);
                    if (r && nv.namelen == 12 && memcmp(nv.name, "content-type", 12) == 0)
                        snprintf(r->ctype, sizeof(r->ctype), "%.60s", v);
                }
                if (fl & NGHTTP2_HD_INFLATE_FINAL) {
                    nghttp2_hd_inflate_end_headers(c->inf);
                    break;
                }
                if (inlen == 0 && !(fl & NGHTTP2_HD_INFLATE_EMIT)) break;
            }
            if (r && (flags & NGHTTP2_FLAG_END_STREAM)) r->end = true;
            break;
        }
        default: break;
        }
        off += 9 + len;
    }
    T_EQ_U(off, n);
}

/* Feeds the client's pending bytes and parses everything the server answers. */
static int exchange(sl_h2 *h, client *c, const sl_grpc_env *env) {
    int rc = sl_h2_feed(h, c->out.p, c->out.len, env);
    c->out.len = 0;
    static uint8_t ob[1 << 20];
    size_t n, total = 0;
    while ((n = sl_h2_send(h, ob + total, sizeof(ob) - total)) > 0) total += n;
    parse_output(c, ob, total);
    if (c->data_in > 0) { /* the connection window for the server's responses */
        uint8_t inc[4] = {(uint8_t)(c->data_in >> 24), (uint8_t)(c->data_in >> 16),
                          (uint8_t)(c->data_in >> 8), (uint8_t)c->data_in};
        frame(&c->out, NGHTTP2_WINDOW_UPDATE, 0, 0, inc, 4);
        c->data_in = 0;
    }
    return rc;
}

/* ---- messages ---- */

/* A RateLimitRequest for `domain` with descriptors "k=v,k2=v2" (NULL-terminated). */
static size_t rls_msg(uint8_t *out, const char *domain, const char *const *descs, uint32_t hits) {
    Envoy__Service__Ratelimit__V3__RateLimitRequest rq = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    static Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d[8], *dp[8];
    static Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e[8][4], *ep[8][4];
    static char sbuf[8][4][2][64];
    size_t nd = 0;
    for (; descs && descs[nd]; nd++) {
        Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor z = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT;
        d[nd] = z;
        const char *p = descs[nd];
        size_t ne = 0;
        while (*p && ne < 4) {
            const char *eq = strchr(p, '='), *comma = strchr(p, ',');
            if (comma == NULL) comma = p + strlen(p);
            snprintf(sbuf[nd][ne][0], 64, "%.*s", (int)(eq - p), p);
            snprintf(sbuf[nd][ne][1], 64, "%.*s", (int)(comma - eq - 1), eq + 1);
            Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry ze = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT;
            e[nd][ne] = ze;
            e[nd][ne].key = sbuf[nd][ne][0];
            e[nd][ne].value = sbuf[nd][ne][1];
            ep[nd][ne] = &e[nd][ne];
            ne++;
            p = *comma ? comma + 1 : comma;
        }
        d[nd].n_entries = ne;
        d[nd].entries = ep[nd];
        dp[nd] = &d[nd];
    }
    rq.domain = (char *)domain;
    rq.n_descriptors = nd;
    rq.descriptors = dp;
    rq.hits_addend = hits;
    return envoy__service__ratelimit__v3__rate_limit_request__pack(&rq, out);
}

typedef Envoy__Service__Ratelimit__V3__RateLimitResponse resp_t;

static resp_t *decode_resp(const call_res *r) {
    T_EQ_I(r->http, 200);
    T_EQ_I(r->grpc, 0);
    T_CHECK(r->end);
    T_EQ_I(r->header_frames, 2); /* response headers, then trailers */
    if (r->dlen < 5) {
        T_FAIL("no message (%zu bytes)", r->dlen);
        return NULL;
    }
    size_t ml = (size_t)r->data[1] << 24 | (size_t)r->data[2] << 16 | (size_t)r->data[3] << 8 | r->data[4];
    T_EQ_I(r->data[0], 0);
    T_EQ_U(ml + 5, r->dlen);
    resp_t *m = envoy__service__ratelimit__v3__rate_limit_response__unpack(NULL, ml, r->data + 5);
    T_CHECK(m != NULL);
    return m;
}

static void free_resp(resp_t *m) {
    if (m) envoy__service__ratelimit__v3__rate_limit_response__free_unpacked(m, NULL);
}

/* Trailers-Only: one HEADERS frame ending the stream, no DATA. */
static void expect_status(const call_res *r, int http, int grpc) {
    T_EQ_I(r->http, http);
    T_EQ_I(r->grpc, grpc);
    T_EQ_I(r->header_frames, 1);
    T_EQ_U(r->dlen, 0);
    T_CHECK(r->end);
}

static const uint8_t WORKED[14] = {0x0a, 0x02, 0x72, 0x6c, 0x12, 0x08, 0x0a,
                                   0x06, 0x0a, 0x01, 0x6b, 0x12, 0x01, 0x76};

/* ---- cases ---- */

static void worked_request_decides(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    headers(&c, 1, RLS, "application/grpc", false, NULL);
    data(&c, 1, 0, WORKED, sizeof(WORKED), true, 16384);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_CHECK(O.settings >= 1);
    resp_t *m = decode_resp(&O.s[0]);
    if (m) {
        T_EQ_I(m->overall_code, 1);
        T_EQ_U(m->n_statuses, 1);
        if (m->n_statuses == 1) {
            T_EQ_I(m->statuses[0]->code, 1);
            T_CHECK(m->statuses[0]->current_limit != NULL);
            if (m->statuses[0]->current_limit) {
                T_EQ_U(m->statuses[0]->current_limit->requests_per_unit, 10);
                T_EQ_I(m->statuses[0]->current_limit->unit, 2); /* MINUTE */
            }
            T_EQ_U(m->statuses[0]->limit_remaining, 9);
            T_CHECK(m->statuses[0]->duration_until_reset != NULL);
            if (m->statuses[0]->duration_until_reset) {
                T_CHECK(m->statuses[0]->duration_until_reset->seconds > 0);
                T_CHECK(m->statuses[0]->duration_until_reset->seconds <= 60);
            }
        }
        /* RateLimit fields for Envoy to add */
        bool rl = false;
        for (size_t i = 0; i < m->n_response_headers_to_add; i++)
            if (strcmp(m->response_headers_to_add[i]->key, "RateLimit") == 0) rl = true;
        T_CHECK(rl);
        T_EQ_U(m->raw_body.len, 0);
    }
    free_resp(m);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* Interleaved streams, messages split mid-prefix, answered in the order they complete;
 * the third call to a 2/minute rule is over limit with Retry-After and a problem body. */
static void concurrent_streams_and_over_limit(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    uint8_t m[256];
    const char *const d[] = {"two=x", NULL};
    size_t ml = rls_msg(m, "rl", d, 0);
    headers(&c, 1, RLS, "application/grpc", false, NULL);
    headers(&c, 3, RLS, "application/grpc+proto", false, NULL);
    headers(&c, 5, RLS, "application/grpc", false, NULL);
    data(&c, 3, 0, m, ml, true, 3); /* 3-byte DATA frames: the prefix spans two */
    data(&c, 1, 0, m, ml, true, 16384);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_U(sl_h2_open_calls(h), 1);
    data(&c, 5, 0, m, ml, true, 1);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    resp_t *r3 = decode_resp(&O.s[1]), *r1 = decode_resp(&O.s[0]), *r5 = decode_resp(&O.s[2]);
    if (r3 && r1 && r5) {
        T_EQ_I(r3->overall_code, 1);
        T_EQ_U(r3->statuses[0]->limit_remaining, 1);
        T_EQ_I(r1->overall_code, 1);
        T_EQ_U(r1->statuses[0]->limit_remaining, 0);
        T_EQ_I(r5->overall_code, 2);
        T_EQ_I(r5->statuses[0]->code, 2);
        bool retry = false;
        for (size_t i = 0; i < r5->n_response_headers_to_add; i++)
            if (strcmp(r5->response_headers_to_add[i]->key, "Retry-After") == 0) retry = true;
        T_CHECK(retry);
        T_CHECK(r5->raw_body.len > 0 && memmem(r5->raw_body.data, r5->raw_body.len,
                                                "quota-exceeded", 14) != NULL);
    }
    free_resp(r1);
    free_resp(r3);
    free_resp(r5);
    T_EQ_U(sl_h2_open_calls(h), 0);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* One status per descriptor, in request order: unmatched (OK, no limit), unlimited
 * (remaining 2^32-1), matched; request hits_addend applies to each. */
static void statuses_in_order(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    uint8_t m[256];
    const char *const d[] = {"nomatch=1", "free=y", "k=v", NULL};
    size_t ml = rls_msg(m, "rl", d, 4);
    headers(&c, 1, RLS, "application/grpc", false, NULL);
    data(&c, 1, 0, m, ml, true, 16384);
    exchange(h, &c, &f.env);
    resp_t *r = decode_resp(&O.s[0]);
    if (r) {
        T_EQ_I(r->overall_code, 1);
        T_EQ_U(r->n_statuses, 3);
        if (r->n_statuses == 3) {
            T_EQ_I(r->statuses[0]->code, 1);
            T_CHECK(r->statuses[0]->current_limit == NULL);
            T_EQ_U(r->statuses[0]->limit_remaining, 0);
            T_EQ_I(r->statuses[1]->code, 1);
            T_CHECK(r->statuses[1]->current_limit == NULL);
            T_EQ_U(r->statuses[1]->limit_remaining, UINT32_MAX);
            T_EQ_I(r->statuses[2]->code, 1);
            T_EQ_U(r->statuses[2]->limit_remaining, 6); /* 10 - 4 */
            T_EQ_S(r->statuses[2]->current_limit->name, "rl/k=v");
        }
    }
    free_resp(r);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* A per-descriptor override bypasses the config: its own fixed window, hits_addend 0
 * only reads it. */
static void limit_override_and_hits(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    Envoy__Service__Ratelimit__V3__RateLimitRequest rq = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_REQUEST__INIT;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor d = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__INIT, *dp = &d;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__Entry e = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__ENTRY__INIT, *ep = &e;
    Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor__RateLimitOverride ov = ENVOY__EXTENSIONS__COMMON__RATELIMIT__V3__RATE_LIMIT_DESCRIPTOR__RATE_LIMIT_OVERRIDE__INIT;
    Google__Protobuf__UInt64Value hits = GOOGLE__PROTOBUF__UINT64_VALUE__INIT;
    e.key = "k";
    e.value = "v";
    d.n_entries = 1;
    d.entries = &ep;
    ov.requests_per_unit = 3;
    ov.unit = ENVOY__TYPE__V3__RATE_LIMIT_UNIT__HOUR;
    d.limit = &ov;
    rq.domain = "rl";
    rq.n_descriptors = 1;
    rq.descriptors = &dp;
    uint8_t m[256];
    size_t ml = envoy__service__ratelimit__v3__rate_limit_request__pack(&rq, m);
    for (uint32_t sid = 1; sid <= 7; sid += 2) {
        headers(&c, sid, RLS, "application/grpc", false, NULL);
        data(&c, sid, 0, m, ml, true, 16384);
    }
    d.hits_addend = &hits; /* explicit 0: check only */
    size_t ml0 = envoy__service__ratelimit__v3__rate_limit_request__pack(&rq, m);
    headers(&c, 9, RLS, "application/grpc", false, NULL);
    data(&c, 9, 0, m, ml0, true, 16384);
    exchange(h, &c, &f.env);
    int codes[5];
    for (int i = 0; i < 5; i++) {
        resp_t *r = decode_resp(&O.s[i]);
        codes[i] = r ? (int)r->overall_code : -1;
        if (r && i == 0) {
            T_EQ_U(r->statuses[0]->current_limit->requests_per_unit, 3);
            T_EQ_I(r->statuses[0]->current_limit->unit, 3);
            T_EQ_U(r->statuses[0]->limit_remaining, 2);
            T_CHECK(r->statuses[0]->duration_until_reset->seconds <= 3600);
        }
        free_resp(r);
    }
    T_EQ_I(codes[0], 1);
    T_EQ_I(codes[2], 1);
    T_EQ_I(codes[3], 2); /* the 4th hit on 3/hour */
    T_EQ_I(codes[4], 1); /* check only: the 3 admitted hits fill the window exactly */
    /* the configured k=v rule (10/min) was never touched */
    const char *const dd[] = {"k=v", NULL};
    ml = rls_msg(m, "rl", dd, 0);
    headers(&c, 11, RLS, "application/grpc", false, NULL);
    data(&c, 11, 0, m, ml, true, 16384);
    exchange(h, &c, &f.env);
    resp_t *r = decode_resp(&O.s[5]);
    if (r) T_EQ_U(r->statuses[0]->limit_remaining, 9);
    free_resp(r);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

static void health_checks(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    const char *svc[3] = {"", "ratelimit", "nosuch"};
    for (int i = 0; i < 3; i++) {
        Grpc__Health__V1__HealthCheckRequest rq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
        rq.service = (char *)svc[i];
        uint8_t m[64];
        size_t ml = grpc__health__v1__health_check_request__pack(&rq, m);
        headers(&c, (uint32_t)(1 + 2 * i), HEALTH, "application/grpc", false, NULL);
        data(&c, (uint32_t)(1 + 2 * i), 0, m, ml, true, 16384);
    }
    exchange(h, &c, &f.env);
    /* SERVING is exactly 00 00 00 00 02 08 01 */
    static const uint8_t serving[7] = {0, 0, 0, 0, 2, 8, 1};
    for (int i = 0; i < 2; i++) {
        T_EQ_I(O.s[i].grpc, 0);
        T_EQ_U(O.s[i].dlen, 7);
        T_CHECK(memcmp(O.s[i].data, serving, 7) == 0);
    }
    expect_status(&O.s[2], 200, SL_GRPC_NOT_FOUND);
    /* draining: NOT_SERVING */
    f.env.draining = true;
    headers(&c, 7, HEALTH, "application/grpc", false, NULL);
    data(&c, 7, 0, NULL, 0, true, 16384);
    exchange(h, &c, &f.env);
    T_EQ_U(O.s[3].dlen, 7);
    T_EQ_I(O.s[3].data[6], 2);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* Every immediate error is Trailers-Only with its status, and the next call on the same
 * connection is still answered. */
static void errors_keep_connection(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(&(sl_h2_opts){.max_message = 1000});
    client c;
    client_init(&c, true);
    uint8_t m[2048];
    /* 1: unknown method, answered at once (before any DATA) with RST_STREAM(NO_ERROR) */
    headers(&c, 1, "/envoy.service.ratelimit.v3.RateLimitService/Nope", "application/grpc", false, NULL);
    exchange(h, &c, &f.env);
    expect_status(&O.s[0], 200, SL_GRPC_UNIMPLEMENTED);
    T_CHECK(O.s[0].rst);
    T_EQ_U(O.s[0].rst_code, NGHTTP2_NO_ERROR);
    T_CHECK(strstr(O.s[0].msg, "unknown method") != NULL);
    T_EQ_S(O.s[0].ctype, "application/grpc");
    data(&c, 1, 0, WORKED, sizeof(WORKED), true, 16384); /* late data is ignored */
    /* 3: wrong content-type: HTTP 415 */
    headers(&c, 3, RLS, "application/json", false, NULL);
    /* 5: compressed flag */
    headers(&c, 5, RLS, "application/grpc", false, NULL);
    data(&c, 5, 1, WORKED, sizeof(WORKED), true, 16384);
    /* 7: above the message size limit, refused on the prefix alone */
    headers(&c, 7, RLS, "application/grpc", false, NULL);
    memset(m, 0, sizeof(m));
    data(&c, 7, 0, m, 1001, false, 16384);
    /* 9: not a RateLimitRequest (a length running past the end) */
    headers(&c, 9, RLS, "application/grpc", false, NULL);
    static const uint8_t bad[] = {0x0a, 0x7f, 0x72};
    data(&c, 9, 0, bad, sizeof(bad), true, 16384);
    /* 11: empty domain; 13: no descriptors */
    const char *const d[] = {"k=v", NULL};
    size_t ml = rls_msg(m, "", d, 0);
    headers(&c, 11, RLS, "application/grpc", false, NULL);
    data(&c, 11, 0, m, ml, true, 16384);
    ml = rls_msg(m, "rl", NULL, 0);
    headers(&c, 13, RLS, "application/grpc", false, NULL);
    data(&c, 13, 0, m, ml, true, 16384);
    /* 15: a request with no message at all; 17: two messages in a unary call */
    headers(&c, 15, RLS, "application/grpc", true, NULL);
    headers(&c, 17, RLS, "application/grpc", false, NULL);
    data(&c, 17, 0, WORKED, sizeof(WORKED), false, 16384);
    data(&c, 17, 0, WORKED, sizeof(WORKED), true, 16384);
    /* 19: GET */
    {
        nghttp2_nv nv[5] = {MKNV(":method", "GET"), MKNV(":scheme", "http"), MKNV(":path", RLS),
                            MKNV(":authority", "x"), MKNV("content-type", "application/grpc")};
        uint8_t blk[512];
        ssize_t bl = nghttp2_hd_deflate_hd(c.def, blk, sizeof(blk), nv, 5);
        frame(&c.out, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, 19, blk, (size_t)bl);
    }
    /* 21: still served */
    headers(&c, 21, RLS, "application/grpc", false, NULL);
    data(&c, 21, 0, WORKED, sizeof(WORKED), true, 16384);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    expect_status(&O.s[1], 415, SL_GRPC_INVALID_ARGUMENT);
    expect_status(&O.s[2], 200, SL_GRPC_UNIMPLEMENTED);
    expect_status(&O.s[3], 200, SL_GRPC_RESOURCE_EXHAUSTED);
    T_CHECK(O.s[3].rst);
    expect_status(&O.s[4], 200, SL_GRPC_INTERNAL);
    expect_status(&O.s[5], 200, SL_GRPC_INVALID_ARGUMENT);
    T_CHECK(strstr(O.s[5].msg, "domain") != NULL);
    expect_status(&O.s[6], 200, SL_GRPC_INVALID_ARGUMENT);
    T_CHECK(strstr(O.s[6].msg, "descriptor") != NULL);
    expect_status(&O.s[7], 200, SL_GRPC_INTERNAL);
    expect_status(&O.s[8], 200, SL_GRPC_INTERNAL);
    expect_status(&O.s[9], 405, SL_GRPC_UNIMPLEMENTED);
    resp_t *r = decode_resp(&O.s[10]);
    if (r) T_EQ_I(r->overall_code, 1);
    free_resp(r);
    T_EQ_I(O.goaways, 0);
    T_CHECK(sl_h2_alive(h));
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

static void deadlines(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    const char *const t5[] = {"grpc-timeout", "5m", NULL};
    const char *const t100[] = {"grpc-timeout", "100S", NULL};
    const char *const bad[] = {"grpc-timeout", "5x", NULL};
    headers(&c, 1, RLS, "application/grpc", false, t5);   /* body arrives too late */
    headers(&c, 3, RLS, "application/grpc", false, t5);   /* no body: tick expires it */
    headers(&c, 5, RLS, "application/grpc", false, t100); /* in time */
    headers(&c, 7, RLS, "application/grpc", false, bad);
    exchange(h, &c, &f.env);
    expect_status(&O.s[3], 200, SL_GRPC_INTERNAL);
    T_EQ_I(O.s[0].grpc, -1);
    T_EQ_I(sl_h2_next_deadline(h), f.env.mono_ns + 5 * SLUICE_NS_PER_MS);
    f.env.mono_ns += 6 * SLUICE_NS_PER_MS;
    data(&c, 1, 0, WORKED, sizeof(WORKED), true, 16384);
    data(&c, 5, 0, WORKED, sizeof(WORKED), true, 16384);
    exchange(h, &c, &f.env);
    expect_status(&O.s[0], 200, SL_GRPC_DEADLINE_EXCEEDED);
    T_EQ_I(O.s[1].grpc, -1);
    sl_h2_tick(h, &f.env);
    exchange(h, &c, &f.env);
    expect_status(&O.s[1], 200, SL_GRPC_DEADLINE_EXCEEDED);
    resp_t *r = decode_resp(&O.s[2]);
    free_resp(r);
    T_EQ_I(sl_grpc_parse_timeout("20m", 3), 20 * SLUICE_NS_PER_MS);
    T_EQ_I(sl_grpc_parse_timeout("1H", 2), 3600 * SEC);
    T_EQ_I(sl_grpc_parse_timeout("123456789S", 10), -1); /* 9 digits */
    T_EQ_I(sl_grpc_parse_timeout("S", 1), -1);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

static void header_list_limit(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(&(sl_h2_opts){.max_header_list = 1024});
    client c;
    client_init(&c, true);
    char big[1200];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    const char *const extra[] = {"x-big", big, NULL};
    headers(&c, 1, RLS, "application/grpc", false, extra);
    data(&c, 1, 0, WORKED, sizeof(WORKED), true, 16384);
    headers(&c, 3, RLS, "application/grpc", false, NULL);
    data(&c, 3, 0, WORKED, sizeof(WORKED), true, 16384);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_I(O.s[0].grpc, SL_GRPC_RESOURCE_EXHAUSTED);
    resp_t *r = decode_resp(&O.s[1]);
    free_resp(r);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* Lots of request bytes: the session hands the connection window back (WINDOW_UPDATE on
 * stream 0) so a client is never stalled by calls it already sent. */
static void flow_control(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(&(sl_h2_opts){.max_message = 1 << 20});
    client c;
    client_init(&c, true);
    size_t big = 600000;
    uint8_t *m = calloc(1, big);
    /* a valid RateLimitRequest padded with an unknown bytes field (number 15) */
    size_t ml = rls_msg(m, "rl", (const char *const[]){"k=v", NULL}, 0);
    size_t pad = big - ml - 4;
    m[ml] = 0x7a; /* field 15, LEN */
    m[ml + 1] = (uint8_t)(0x80 | (pad & 0x7f));
    m[ml + 2] = (uint8_t)(0x80 | ((pad >> 7) & 0x7f));
    m[ml + 3] = (uint8_t)(pad >> 14);
    exchange(h, &c, &f.env); /* the server's SETTINGS (1 MiB stream windows) ... */
    frame(&c.out, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0); /* ... acknowledged */
    O.window_updates0 = 0; /* the opening one that widens the connection window */
    for (uint32_t i = 0; i < 30; i++) {
        headers(&c, 1 + 2 * i, RLS, "application/grpc", false, NULL);
        data(&c, 1 + 2 * i, 0, m, big, true, 16384);
        exchange(h, &c, &f.env);
    }
    T_CHECK(O.window_updates0 > 0);
    int ok = 0;
    for (int i = 0; i < 30; i++) ok += O.s[i].grpc == 0;
    T_EQ_I(ok, 30);
    free(m);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* Drain: a shutdown notice first (last stream 2^31-1: calls already on the wire are still
 * taken), the final GOAWAY a grace later naming the last stream that arrived; calls in
 * flight finish, later streams are not served, then the session is done. */
static int n_ok;
static void count_status(void *ud, int status) {
    (void)ud;
    n_ok += status == 0;
}

/* Bytes of calls not yet decided hold the connection window; answering hands them back
 * (so a client cannot make the server buffer more than the window), early errors at once;
 * padding never leaks window (thousands of padded calls through a 1 MiB window). */
static void window_held_until_answered(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    exchange(h, &c, &f.env);
    frame(&c.out, NGHTTP2_SETTINGS, NGHTTP2_FLAG_ACK, 0, NULL, 0);
    exchange(h, &c, &f.env);
    O.window_updates0 = 0;
    static uint8_t m[65000];
    memset(m, 0, sizeof(m));
    for (uint32_t i = 0; i < 15; i++) { /* 15 x 60000 bytes of 65000-byte messages */
        headers(&c, 1 + 2 * i, RLS, "application/grpc", false, NULL);
        uint8_t pre[5] = {0, 0, 0, 0xfd, 0xe8};
        frame(&c.out, NGHTTP2_DATA, 0, 1 + 2 * i, pre, 5);
        for (int k = 0; k < 4; k++) frame(&c.out, NGHTTP2_DATA, 0, 1 + 2 * i, m, 15000);
    }
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_I(O.window_updates0, 0); /* 900 KB held for 15 undecided calls */
    T_EQ_U(sl_h2_open_calls(h), 15);
    for (uint32_t i = 0; i < 15; i++) frame(&c.out, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1 + 2 * i, m, 4995);
    exchange(h, &c, &f.env);
    for (int i = 0; i < 15; i++) T_EQ_I(O.s[i].grpc, SL_GRPC_INTERNAL); /* zeros do not parse */
    T_CHECK(O.window_updates0 > 0);
    /* an early error gives its bytes back without waiting for the rest */
    O.window_updates0 = 0;
    for (uint32_t i = 15; i < 25; i++) {
        headers(&c, 1 + 2 * i, "/no.Such/Method", "application/grpc", false, NULL);
        frame(&c.out, NGHTTP2_DATA, 0, 1 + 2 * i, m, 16384);
        frame(&c.out, NGHTTP2_DATA, 0, 1 + 2 * i, m, 16384);
        frame(&c.out, NGHTTP2_DATA, 0, 1 + 2 * i, m, 16384);
    }
    exchange(h, &c, &f.env);
    T_CHECK(O.window_updates0 > 0);
    /* padded DATA: 5000 calls of ~280 bytes each through the 1 MiB window */
    uint8_t pad[1 + 5 + sizeof(WORKED) + 255];
    memset(pad, 0, sizeof(pad));
    pad[0] = 255;
    pad[5] = sizeof(WORKED);
    memcpy(pad + 6, WORKED, sizeof(WORKED));
    f.env.on_status = count_status;
    f.env.ud = &f;
    n_ok = 0;
    for (uint32_t i = 0; i < 5000; i++) {
        uint32_t sid = 101 + 2 * i;
        headers(&c, sid, RLS, "application/grpc", false, NULL);
        frame(&c.out, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM | NGHTTP2_FLAG_PADDED, sid, pad, sizeof(pad));
        if (i % 100 == 99) {
            int rc = exchange(h, &c, &f.env);
            if (rc != 0) {
                T_FAIL("feed failed after %u calls", i);
                break;
            }
        }
    }
    T_EQ_I(n_ok, 5000);
    T_EQ_I(O.goaways, 0);
    T_CHECK(sl_h2_alive(h));
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

static void goaway_on_drain(void) {
    fx f;
    fx_open(&f);
    out_reset();
    sl_h2 *h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    headers(&c, 1, RLS, "application/grpc", false, NULL);
    exchange(h, &c, &f.env);
    sl_h2_goaway(h, f.env.mono_ns);
    exchange(h, &c, &f.env);
    T_EQ_I(O.goaways, 1);
    T_EQ_U(O.goaway_last, 0x7fffffffu);
    T_EQ_U(O.goaway_code, NGHTTP2_NO_ERROR);
    T_EQ_I(sl_h2_next_deadline(h), f.env.mono_ns + SL_H2_GOAWAY_GRACE_NS);
    /* a call the client sent before it saw the notice is still served */
    headers(&c, 3, RLS, "application/grpc", false, NULL);
    data(&c, 3, 0, WORKED, sizeof(WORKED), true, 16384);
    exchange(h, &c, &f.env);
    resp_t *r3 = decode_resp(&O.s[1]);
    free_resp(r3);
    sl_h2_tick(h, &f.env); /* before the grace: nothing */
    exchange(h, &c, &f.env);
    T_EQ_I(O.goaways, 1);
    f.env.mono_ns += SL_H2_GOAWAY_GRACE_NS;
    sl_h2_tick(h, &f.env);
    exchange(h, &c, &f.env);
    T_EQ_I(O.goaways, 2);
    T_EQ_U(O.goaway_last, 3);
    T_CHECK(sl_h2_alive(h)); /* stream 1 is still in flight */
    /* the in-flight call completes; a new stream beyond the GOAWAY is not served */
    data(&c, 1, 0, WORKED, sizeof(WORKED), true, 16384);
    headers(&c, 5, RLS, "application/grpc", false, NULL);
    data(&c, 5, 0, WORKED, sizeof(WORKED), true, 16384);
    exchange(h, &c, &f.env);
    resp_t *r = decode_resp(&O.s[0]);
    free_resp(r);
    T_EQ_I(O.s[2].grpc, -1);
    T_CHECK(!sl_h2_alive(h));
    sl_h2_goaway(h, f.env.mono_ns); /* idempotent */
    exchange(h, &c, &f.env);
    T_EQ_I(O.goaways, 2);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

static void broken_connections(void) {
    fx f;
    fx_open(&f);
    /* not HTTP/2 at all */
    sl_h2 *h = sl_h2_create(NULL);
    T_EQ_I(sl_h2_feed(h, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18, &f.env), -1);
    sl_h2_destroy(h);
    /* a protocol error (DATA on stream 0): GOAWAY(PROTOCOL_ERROR), then done */
    out_reset();
    h = sl_h2_create(NULL);
    client c;
    client_init(&c, true);
    frame(&c.out, NGHTTP2_DATA, 0, 0, "xx", 2);
    exchange(h, &c, &f.env);
    T_EQ_I(O.goaways, 1);
    T_EQ_U(O.goaway_code, NGHTTP2_PROTOCOL_ERROR);
    T_CHECK(!sl_h2_alive(h));
    sl_h2_destroy(h);
    client_free(&c);
    /* the session is destroyed with calls in flight: no leak (ASan) */
    h = sl_h2_create(NULL);
    client_init(&c, true);
    headers(&c, 1, RLS, "application/grpc", false, NULL);
    data(&c, 1, 0, WORKED, 7, false, 16384);
    exchange(h, &c, &f.env);
    T_EQ_U(sl_h2_open_calls(h), 1);
    sl_h2_destroy(h);
    client_free(&c);
    fx_close(&f);
}

/* ---- calls whose answer comes later (parked) ---- */

static void a_forget(void *owner, void *call) {
    T_CHECK(owner == &A.owner);
    if (A.nforgotten < 16) A.forgotten[A.nforgotten++] = call;
}

static int call_index(void *call) {
    for (int i = 0; i < A.ncalls; i++)
        if (A.calls[i] == call) return i;
    return -1;
}

static void waiting_calls(void) {
    fx f;
    fx_open(&f);
    out_reset();
    memset(&A, 0, sizeof(A));
    sl_h2_opts o = {.forget = a_forget, .owner = &A.owner};
    sl_h2 *h = sl_h2_create(&o);
    client c;
    client_init(&c, true);
    uint8_t m[256];
    const char *const d[] = {"free=x", NULL};
    size_t ml = rls_msg(m, "rl", d, 0);
    const char *const t5[] = {"grpc-timeout", "5m", NULL};
    /* three calls wait for their answer: nothing is answered, nothing is forgotten */
    A.park = true;
    for (uint32_t sid = 1; sid <= 5; sid += 2) {
        headers(&c, sid, RLS, "application/grpc", false, sid == 5 ? t5 : NULL);
        data(&c, sid, 0, m, ml, true, 16384);
    }
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_I(A.ncalls, 3);
    T_EQ_U(sl_h2_waiting(h), 3);
    for (int i = 0; i < 3; i++) T_EQ_I(O.s[i].grpc, -1);
    /* the session still answers other calls meanwhile */
    A.park = false;
    headers(&c, 7, HEALTH, "application/grpc", false, NULL);
    data(&c, 7, 0, NULL, 0, true, 16384);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_I(O.s[3].grpc, 0);
    /* call 3's answer arrives: it is answered, and not forgotten separately */
    sl_h2_complete(h, A.calls[1], &A.replies[1]);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    resp_t *r = decode_resp(&O.s[1]);
    T_CHECK(r != NULL && r->overall_code == 1);
    free_resp(r);
    T_EQ_U(sl_h2_waiting(h), 2);
    T_EQ_I(A.nforgotten, 0);
    /* a second answer for an answered call does nothing */
    sl_h2_complete(h, A.calls[1], &A.replies[1]);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    /* the client cancels call 1: its owner forgets it */
    uint8_t code[4] = {0, 0, 0, 8}; /* CANCEL */
    frame(&c.out, NGHTTP2_RST_STREAM, 0, 1, code, 4);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_I(A.nforgotten, 1);
    T_EQ_I(call_index(A.forgotten[0]), 0);
    T_EQ_U(sl_h2_waiting(h), 1);
    /* call 5's deadline passes while it waits: DEADLINE_EXCEEDED, forgotten */
    f.env.mono_ns += 6 * SLUICE_NS_PER_MS;
    sl_h2_tick(h, &f.env);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    expect_status(&O.s[2], 200, SL_GRPC_DEADLINE_EXCEEDED);
    T_EQ_I(A.nforgotten, 2);
    T_EQ_I(call_index(A.forgotten[1]), 2);
    T_EQ_U(sl_h2_waiting(h), 0);
    /* a call still waiting when the session goes is forgotten too: its owner must not
     * deliver into a freed call */
    A.park = true;
    headers(&c, 9, RLS, "application/grpc", false, NULL);
    data(&c, 9, 0, m, ml, true, 16384);
    T_EQ_I(exchange(h, &c, &f.env), 0);
    T_EQ_U(sl_h2_waiting(h), 1);
    sl_h2_destroy(h);
    T_EQ_I(A.nforgotten, 3);
    client_free(&c);
    fx_close(&f);
}

static void pct_encoding(void) {
    char out[64];
    sl_grpc_pct_encode("a%b\n\xc3\xa9 ok", out, sizeof(out));
    T_EQ_S(out, "a%25b%0A%C3%A9 ok");
}

int main(void) {
    T_RUN(worked_request_decides);
    T_RUN(concurrent_streams_and_over_limit);
    T_RUN(statuses_in_order);
    T_RUN(limit_override_and_hits);
    T_RUN(health_checks);
    T_RUN(errors_keep_connection);
    T_RUN(deadlines);
    T_RUN(header_list_limit);
    T_RUN(flow_control);
    T_RUN(window_held_until_answered);
    T_RUN(goaway_on_drain);
    T_RUN(broken_connections);
    T_RUN(waiting_calls);
    T_RUN(pct_encoding);
    return T_DONE();
}
