/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_api.c -- the HTTP endpoints: decisions (/v1/check, /v1/auth, settle, acquire,
 * release) on the data listener, and the admin endpoints (/metrics, /healthz, /readyz,
 * /v1/policies, /v1/clock, /v1/reload) on the admin listener.
 * /v1/auth and the rest of the decision path allocate nothing: attributes point into the
 * connection's read buffer, the verdict is the worker's. The JSON endpoints parse their
 * body with jansson (which allocates); that cost belongs to the JSON form, not to the
 * gateway form. Logs and metrics never carry a raw key.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/json.h"
#include "engine/answer.h"
#include "server/grpc_conn.h"
#include "api/http/llm_http.h"
#include "server/observe.h"
#include "server/pending.h"
#include "server/rejections.h"
#include "server/server.h"

#define HDRS_MAX 3072
#define reply sl_http_reply
#define problem sl_http_problem
#define BODY_MAX 16384
/* Every admin response (the console's page and its data): no inline script or style, no
 * framing, no sniffing, no referrer leaving with a URL. */
#define SL_ADMIN_SECURITY_HEADERS                                                                 \
    "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'; "        \
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "            \
    "form-action 'none'; frame-ancestors 'none'\r\n"                                            \
    "X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"

typedef struct http_ctx {
    sl_conn *c;
    const sl_http_req *req;
    const char *path;
    size_t path_len;
    const char *query;
    size_t query_len;
    int is_head;
    char why[200]; /* parse_body: why there is no body object */
} http_ctx;

/* Writes one whole response. `hdrs` holds complete header lines (or NULL). */
void sl_http_reply(sl_conn *c, int minor, int status, const char *hdrs, const char *ctype,
                   const char *body, size_t body_len, int send_body) {
    size_t hl = hdrs ? strlen(hdrs) : 0;
    size_t sec = c->kind == SL_KIND_ADMIN ? sizeof(SL_ADMIN_SECURITY_HEADERS) : 0;
    if (sl_conn_reserve(c, 256 + sec + hl + body_len) != 0) {
        c->close_after = true;
        return;
    }
    sl_wbuf wb;
    sl_conn_wbuf(c, &wb);
    sl_http1_begin(&wb, minor, status);
    sl_wbuf_puts(&wb, c->w->date);
    sl_wbuf_puts(&wb, "Server: sluice\r\n");
    if (status == 429) sl_wbuf_puts(&wb, "Cache-Control: no-store\r\n");
    if (sec) sl_wbuf_puts(&wb, SL_ADMIN_SECURITY_HEADERS); /* the console's page and data */
    if (hl) sl_wbuf_put(&wb, hdrs, hl);
    sl_http1_end(&wb, !c->close_after, minor, ctype, body, body_len, send_body);
    if (wb.overflow) c->close_after = true;
    sl_conn_commit(c, &wb);
}

/* Writes one whole decision response: the answer's pairs (and the pairs the endpoint
 * added to it) as header lines, straight into the connection's buffer: no header text
 * composed elsewhere first. */
static void reply_answer(sl_conn *c, int minor, int status, const sl_answer *a, const char *ctype,
                         const char *body, size_t body_len, int send_body) {
    if (sl_conn_reserve(c, 256 + sl_answer_http_len(a) + body_len) != 0) {
        c->close_after = true;
        return;
    }
    sl_wbuf wb;
    sl_conn_wbuf(c, &wb);
    sl_http1_begin(&wb, minor, status);
    sl_wbuf_puts(&wb, c->w->date);
    sl_wbuf_puts(&wb, "Server: sluice\r\n");
    if (status == 429) sl_wbuf_puts(&wb, "Cache-Control: no-store\r\n");
    sl_answer_http_headers(a, &wb);
    sl_http1_end(&wb, !c->close_after, minor, ctype, body, body_len, send_body);
    if (wb.overflow) c->close_after = true;
    sl_conn_commit(c, &wb);
}

void sl_http_problem(sl_conn *c, int minor, int status, const char *detail, int send_body) {
    char body[1024];
    sl_wbuf wb;
    sl_wbuf_init(&wb, body, sizeof(body));
    sl_wbuf_printf(&wb, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d",
                   sl_http1_reason(status), status);
    if (detail) {
        sl_wbuf_puts(&wb, ",\"detail\":\"");
        char esc[512];
        size_t n = sl_json_escape(esc, sizeof(esc), detail, strlen(detail), 0, NULL);
        sl_wbuf_put(&wb, esc, n);
        sl_wbuf_putc(&wb, '"');
    }
    sl_wbuf_puts(&wb, "}");
    if (wb.overflow) wb.len = 0;
    reply(c, minor, status, NULL, "application/problem+json", body, wb.len, send_body);
}

void sl_http_error(sl_conn *c, int minor, int status, const char *detail) {
    if (detail == NULL) {
        switch (status) {
        case 400: detail = "malformed HTTP request"; break;
        case 413: detail = "the request body exceeds the server's limit"; break;
        case 414: detail = "the request target exceeds the server's limit"; break;
        case 431: detail = "the request header section exceeds the server's limits"; break;
        case 501: detail = "method or transfer coding not implemented"; break;
        case 505: detail = "only HTTP/1.0 and HTTP/1.1 are served here"; break;
        default: break;
        }
    }
    c->close_after = true;
    problem(c, minor == 0 ? 0 : 1, status, detail, 1);
}

static int method_is(const http_ctx *x, const char *m) {
    return strlen(m) == x->req->method_len && memcmp(x->req->method, m, x->req->method_len) == 0;
}

static sl_str hstr(const sl_http_header *h) {
    sl_str s = {NULL, 0};
    if (h && h->value_len) {
        s.p = h->value;
        s.len = h->value_len;
    }
    return s;
}

/* Looks up `name=` in the query string; returns its value length or -1. */
static long query_param(const http_ctx *x, const char *name, const char **val) {
    size_t nl = strlen(name);
    const char *p = x->query, *end = x->query + x->query_len;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        if ((size_t)(e - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=') {
            *val = p + nl + 1;
            return (long)(e - p - (long)nl - 1);
        }
        p = amp ? amp + 1 : end;
    }
    return -1;
}


/* The request's client address kept for the rejection summary (too long: unknown). */
static void set_client(sl_pending *p, sl_str ip) {
    size_t n = ip.p != NULL && ip.len < sizeof(p->client) ? ip.len : 0;
    if (n) memcpy(p->client, ip.p, n);
    p->client[n] = '\0';
}

static int rejected(const sl_verdict *v) { return v->action == SL_REJECT || v->action == SL_FAIL; }

static void busy(sl_conn *c, int minor) {
    problem(c, minor, 503, "too many requests are waiting for the store on this worker", 1);
}

/* The answer of /v1/auth once the engine decided (see handle_auth): the engine's pairs,
 * the token or the problem added as pairs, the problem rendered once (twice only when the
 * status sent differs from the engine's: its body states the status sent). */
static void finish_auth(sl_pending *p, int rc, bool later) {
    sl_conn *c = p->c;
    sl_worker *w = c->w;
    sl_verdict *v = &p->v;
    sl_rej_client_set(p->client, strlen(p->client));
    sl_server_count_verdict_tp(w, rc, v, p->text[0] ? p->text : NULL);
    sl_rej_client_set(NULL, 0);
    unsigned rflags = w->gen->legacy_headers ? SL_RENDER_LEGACY : 0;
    if (rc == 0 && v->action == SL_DELAY && v->recheck) {
        /* "wait and try again", nothing consumed: a gateway cannot retry for its client,
         * so this is answered like a rejection with the wait as Retry-After */
        v->action = SL_REJECT;
        v->retry_after_ns = v->delay_ns;
        v->status = 429;
    }
    sl_answer a;
    sl_answer_build(&a, v, rflags);
    sl_answer_budget(&a, HDRS_MAX);
    if (rc != 0 && v->action != SL_FAIL) v->action = SL_FAIL;
    if (!rejected(v)) {
        /* the settle/release token, for the gateway to hand back when the response ends
         * (nginx: auth_request_set + post_action; see docs/gateways) */
        if (rc == 0 && sl_verdict_needs_token(v)) {
            char tok[SL_TOKEN_MAX + 1];
            int tl = sl_verdict_token(v, tok, sizeof(tok));
            if (tl > 0 && sl_answer_http_len(&a) + (size_t)tl + 32 < HDRS_MAX)
                sl_answer_add(&a, "X-Sluice-Token", 14, tok, (size_t)tl);
        }
        reply_answer(c, p->minor, 200, &a, NULL, "", 0, 0);
        /* shaping: the gateway forwards the request when we answer, so answer later */
        if (v->action == SL_DELAY) sl_conn_hold(c, v->delay_ns);
    } else {
        /* The engine's status (429, 400 for a missing key, 503 failing closed); a limited
         * request may be answered with the configured deny status, or ?status=NNN (nginx's
         * auth_request passes only 2xx/401/403 on). */
        int status = v->status >= 400 && v->status <= 599 ? v->status : (v->action == SL_FAIL ? 503 : 429);
        char body[BODY_MAX];
        sl_wbuf bw;
        sl_wbuf_init(&bw, body, sizeof(body));
        const char *tp = p->text[0] ? p->text : NULL;
        /* the problem again, as a header, with the status a client should see (nginx's
         * auth_request drops a subrequest's body but hands its headers on, and turns the
         * 403 it is given back into a 429: the gateway sends sluice's problem verbatim;
         * it is one line of ASCII JSON) */
        int pl = sl_answer_problem(v, status, tp, &bw);
        if (pl > 0 && sl_answer_http_len(&a) + (size_t)pl + 24 < HDRS_MAX && memchr(body, '\n', (size_t)pl) == NULL &&
            memchr(body, '\r', (size_t)pl) == NULL)
            sl_answer_add(&a, "X-Sluice-Problem", 16, body, (size_t)pl);
        int sent = status;
        if (v->action == SL_REJECT && sent == 429) sent = w->gen->auth_deny_status;
        if (v->action == SL_REJECT && p->status_q != 0) sent = p->status_q;
        v->status = sent; /* so the body states the status sent */
        if (sent != status || pl < 0) {
            sl_wbuf_init(&bw, body, sizeof(body));
            pl = sl_answer_problem(v, sent, tp, &bw);
        }
        if (pl < 0) pl = 0;
        reply_answer(c, p->minor, sent, &a, "application/problem+json", body, (size_t)pl, !p->is_head);
    }
    if (later) sl_conn_resume(c);
}

/* Gateway forward-auth: the original request's attributes from the forwarded headers.
 * The verdict waits in a continuation (pending.c) when the store answers later; what the
 * answer needs of the request (status parameter, traceparent) is copied into it. */
static void handle_auth(http_ctx *x) {
    sl_conn *c = x->c;
    sl_worker *w = c->w;
    const sl_http_req *req = x->req;
    sl_pending *p = sl_pending_get(w, c, finish_auth);
    if (p == NULL) {
        busy(c, req->minor);
        return;
    }
    p->minor = req->minor;
    p->is_head = x->is_head != 0;
    const char *val;
    long vl = query_param(x, "status", &val);
    if (vl == 3 && val[0] >= '4' && val[0] <= '5' && val[1] >= '0' && val[1] <= '9' &&
        val[2] >= '0' && val[2] <= '9')
        p->status_q = (val[0] - '0') * 100 + (val[1] - '0') * 10 + (val[2] - '0');
    /* one pass over the headers for everything this endpoint reads (the first of each
     * name counts; the client_ip header's lines are all kept, in order) */
    const sl_settings *st = sl_config_settings(w->gen->cfg);
    const sl_client_ip_cfg *cip = &st->client_ip;
    size_t cipl = cip->mode != SL_CIP_PEER ? strlen(cip->header) : 0, rtl = strlen(st->auth_route_header);
    enum { H_TP, H_OMETHOD, H_FMETHOD, H_OURI, H_FURI, H_FHOST, H_HOST, H_RIP, H_OLEN, H_CLEN, H_N };
    static const struct { const char *n; uint8_t l; } wanted[H_N] = {
        [H_TP] = {"traceparent", 11}, [H_OMETHOD] = {"x-original-method", 17},
        [H_FMETHOD] = {"x-forwarded-method", 18}, [H_OURI] = {"x-original-uri", 14},
        [H_FURI] = {"x-forwarded-uri", 15}, [H_FHOST] = {"x-forwarded-host", 16}, [H_HOST] = {"host", 4},
        [H_RIP] = {"x-real-ip", 9}, [H_OLEN] = {"x-original-length", 17}, [H_CLEN] = {"content-length", 14},
    };
    const sl_http_header *hv[H_N] = {0};
    const char *vals[SL_CIP_VALUES_MAX];
    size_t lens[SL_CIP_VALUES_MAX], nv = 0;
    sl_request r;
    memset(&r, 0, sizeof(r));
    sl_header hdrs[SL_HTTP_MAX_HEADERS];
    for (size_t i = 0; i < req->nheaders; i++) {
        const sl_http_header *hh = &req->headers[i];
        hdrs[i].name = (sl_str){hh->name, hh->name_len};
        hdrs[i].value = (sl_str){hh->value, hh->value_len};
        for (int k = 0; k < H_N; k++)
            if (hv[k] == NULL && hh->name_len == wanted[k].l && strncasecmp(hh->name, wanted[k].n, wanted[k].l) == 0) {
                hv[k] = hh;
                break;
            }
        if (cipl && hh->name_len == cipl && strncasecmp(hh->name, cip->header, cipl) == 0) {
            if (nv == SL_CIP_VALUES_MAX) { /* the last lines are the nearest proxies' */
                memmove(vals, vals + 1, sizeof(vals[0]) * (nv - 1));
                memmove(lens, lens + 1, sizeof(lens[0]) * (nv - 1));
                nv--;
            }
            vals[nv] = hh->value, lens[nv++] = hh->value_len;
        }
        /* the route the gateway names (auth.route_header; the recipes strip a client's own) */
        if (r.route.p == NULL && hh->name_len == rtl && strncasecmp(hh->name, st->auth_route_header, rtl) == 0 &&
            hh->value_len > 0)
            r.route = (sl_str){hh->value, hh->value_len};
    }
    const sl_http_header *tp = hv[H_TP];
    if (tp && tp->value_len < sizeof(p->text)) {
        memcpy(p->text, tp->value, tp->value_len);
        p->text[tp->value_len] = '\0';
    }
    r.headers = hdrs;
    r.n_headers = req->nheaders;
    const sl_http_header *h;
    r.method = hstr(hv[H_OMETHOD]);
    if (!r.method.p) r.method = hstr(hv[H_FMETHOD]);
    if (!r.method.p) r.method = (sl_str){req->method, req->method_len};
    sl_str uri = hstr(hv[H_OURI]);
    if (!uri.p) uri = hstr(hv[H_FURI]);
    if (!uri.p) uri = (sl_str){req->target, req->target_len};
    const char *q = memchr(uri.p, '?', uri.len);
    r.path = (sl_str){uri.p, q ? (size_t)(q - uri.p) : uri.len};
    r.host = hstr(hv[H_FHOST]);
    if (!r.host.p) r.host = hstr(hv[H_HOST]);
    /* the client: client_ip's walk over the forwarded chain (or, with no setting, the
     * left-most X-Forwarded-For, else X-Real-IP, else the peer) */
    const sl_http_header *rip = cip->mode == SL_CIP_LEGACY ? hv[H_RIP] : NULL;
    char ipbuf[SL_CIP_TEXT_MAX];
    const char *ipp;
    size_t ipn;
    sl_client_ip_pick(cip, vals, lens, nv, rip ? rip->value : NULL, rip ? rip->value_len : 0, c->peer_ip, ipbuf,
                      &ipp, &ipn);
    r.client_ip = (sl_str){ipp, ipn};
    /* the original request's size (cost: body_bytes): a gateway forwards it in
     * X-Original-Length (its auth request has no body), or sends the body itself */
    if ((h = hv[H_OLEN]) != NULL) {
        uint64_t n = 0;
        bool ok = h->value_len > 0 && h->value_len <= 19;
        for (size_t i = 0; ok && i < h->value_len; i++) {
            ok = h->value[i] >= '0' && h->value[i] <= '9';
            n = n * 10 + (uint64_t)(h->value[i] - '0');
        }
        if (ok) {
            r.has_body_bytes = true;
            r.body_bytes = n;
        }
    } else if (hv[H_CLEN] != NULL) {
        r.has_body_bytes = true;
        r.body_bytes = req->body_len;
    }
    const sl_engine *e = w->gen->engine;
    sl_engine_prepare(e, &r, &p->v);
    set_client(p, r.client_ip);
    sl_pending_submit(p);
    sl_engine_decide(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) c->suspended = true;
}

/* ---- JSON endpoints ---- */

/* The body as a JSON object, or NULL with why in x->why (the parser's own words and
 * place: "integer overflow near '9223372036854775808' at line 1 column 42"). */
static json_t *parse_body(http_ctx *x) {
    x->why[0] = '\0';
    if (x->req->body_len == 0) {
        snprintf(x->why, sizeof(x->why), "the body is empty");
        return NULL;
    }
    json_error_t err;
    json_t *j = json_loadb(x->req->body, x->req->body_len, 0, &err);
    if (j == NULL) {
        snprintf(x->why, sizeof(x->why), "invalid JSON: %.120s at line %d column %d", err.text, err.line,
                 err.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        snprintf(x->why, sizeof(x->why), "the body is JSON but not an object");
        return NULL;
    }
    return j;
}

static int json_u64(json_t *o, const char *k, uint64_t *out, int *present) {
    json_t *v = json_object_get(o, k);
    *present = v != NULL;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* The /v1/check answer: the verdict's JSON with "headers" (the pairs a gateway should
 * send) and "token", written once from the answer (no text parsed back, no jansson). */
static void verdict_reply(sl_conn *c, int minor, bool is_head, int rc, sl_verdict *v) {
    sl_worker *w = c->w;
    sl_answer a;
    sl_answer_build(&a, v, w->gen->legacy_headers ? SL_RENDER_LEGACY : 0);
    sl_answer_budget(&a, HDRS_MAX);
    char tok[SL_TOKEN_MAX + 1];
    int tl = rc == 0 && sl_verdict_needs_token(v) ? sl_verdict_token(v, tok, sizeof(tok)) : 0;
    char body[BODY_MAX];
    sl_wbuf bw;
    sl_wbuf_init(&bw, body, sizeof(body));
    int bl = sl_answer_json(&a, rc, tok, tl > 0 ? (size_t)tl : 0, &bw);
    /* An engine error (SL_ERROR: 500, or 404 for an unknown policy) is not a store
     * failure (503); the verdict says which. */
    int status = rc != 0 ? (v->action == SL_ERROR && v->status >= 400 ? v->status
                            : rc == SLUICE_ENOTFOUND                  ? 404
                                                                      : 503)
                 : (v->status >= 200 && v->status <= 599) ? v->status
                 : v->action == SL_FAIL   ? 503
                 : v->action == SL_REJECT ? 429
                                          : 200;
    if (bl > 0)
        reply_answer(c, minor, status, &a, "application/json", body, (size_t)bl, !is_head);
    else
        problem(c, minor, 500, "the answer does not fit in its buffer", 1);
}

static int json_str(json_t *o, const char *k, const char **p, size_t *n) {
    json_t *v = json_object_get(o, k);
    if (!v || !json_is_string(v)) return -1;
    *p = json_string_value(v);
    *n = json_string_length(v);
    return 0;
}

sl_str sl_http_json_str(const json_t *o, const char *k) {
    sl_str s = {NULL, 0};
    json_t *v = json_object_get(o, k);
    if (v && json_is_string(v)) {
        s.p = json_string_value(v);
        s.len = json_string_length(v);
    }
    return s;
}
#define jstr sl_http_json_str

void sl_http_json_request(const json_t *body, sl_request *r, sl_header *hdrs) {
    const json_t *a = json_object_get(body, "request");
    if (!json_is_object(a)) a = body;
    memset(r, 0, sizeof(*r));
    r->method = jstr(a, "method");
    r->path = jstr(a, "path");
    r->host = jstr(a, "host");
    r->client_ip = jstr(a, "client_ip");
    if (!r->client_ip.p) r->client_ip = jstr(a, "ip");
    r->route = jstr(a, "route");
    json_t *hj = json_object_get(a, "headers");
    if (json_is_object(hj)) {
        const char *hk;
        json_t *hv;
        json_object_foreach(hj, hk, hv) {
            if (r->n_headers >= SL_HTTP_MAX_HEADERS || !json_is_string(hv)) continue;
            hdrs[r->n_headers].name = (sl_str){hk, strlen(hk)};
            hdrs[r->n_headers].value = (sl_str){json_string_value(hv), json_string_length(hv)};
            r->n_headers++;
        }
    }
    r->headers = hdrs;
    json_t *bb = json_object_get(a, "body_bytes");
    if (json_is_integer(bb) && json_integer_value(bb) >= 0) {
        r->has_body_bytes = true;
        r->body_bytes = (uint64_t)json_integer_value(bb);
    }
}

static void finish_check(sl_pending *p, int rc, bool later) {
    sl_conn *c = p->c;
    if (rc == SLUICE_ENOTFOUND && p->v.action == SL_ERROR) {
        problem(c, p->minor, 404, "no such policy", 1);
    } else if (p->v.run.pass && rc == 0) {
        bool ok = p->v.action == SL_ALLOW;
        const char *b = ok ? "{\"passed\":true}" : "{\"passed\":false}";
        if (ok) reply(c, p->minor, 200, NULL, "application/json", b, strlen(b), 1);
        else problem(c, p->minor, 404, "no challenge to pass for this key (none running, or a block)", 1);
    } else {
        sl_rej_client_set(p->client, strlen(p->client));
        sl_server_count_verdict(c->w, rc, &p->v);
        sl_rej_client_set(NULL, 0);
        verdict_reply(c, p->minor, p->is_head, rc, &p->v);
    }
    if (later) sl_conn_resume(c);
}

/* What POST /v1/check, /v1/acquire and /v1/challenge/pass ask of the engine. */
typedef enum check_kind { CHECK_DECIDE, CHECK_ACQUIRE, CHECK_PASS } check_kind;

/* The common body of /v1/check, {"policy": "...", "key": "...", "cost": N, "class": "..."}
 * in any order, read without jansson (issue 28: jansson was most of the endpoint's CPU):
 * plain strings (no escapes, ASCII), non-negative integers below 10^18, each name at most
 * once, nothing else. Anything else (the request form, escapes, other values or names, a
 * malformed body) returns false and goes through jansson, whose answers (and errors) are
 * the endpoint's: both read a body of this form alike. */
typedef struct fast_check {
    sl_str policy, key, cls;
    bool has_cost, has_cls;
    uint64_t cost;
} fast_check;

static const char *jws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *jplain(const char *p, const char *e, sl_str *out) {
    if (p >= e || *p != '"') return NULL;
    const char *s = ++p;
    while (p < e && *p != '"') {
        unsigned char ch = (unsigned char)*p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x80) return NULL;
        p++;
    }
    if (p >= e) return NULL;
    *out = (sl_str){s, (size_t)(p - s)};
    return p + 1;
}

static bool fast_body(const char *b, size_t n, fast_check *f) {
    memset(f, 0, sizeof(*f));
    const char *p = jws(b, b + n), *e = b + n;
    if (p >= e || *p != '{') return false;
    p = jws(p + 1, e);
    bool seen[4] = {false, false, false, false};
    for (;;) {
        sl_str k;
        if ((p = jplain(p, e, &k)) == NULL) return false;
        p = jws(p, e);
        if (p >= e || *p != ':') return false;
        p = jws(p + 1, e);
        int slot = k.len == 6 && memcmp(k.p, "policy", 6) == 0 ? 0
                 : k.len == 3 && memcmp(k.p, "key", 3) == 0    ? 1
                 : k.len == 4 && memcmp(k.p, "cost", 4) == 0   ? 2
                 : k.len == 5 && memcmp(k.p, "class", 5) == 0  ? 3
                                                               : -1;
        if (slot < 0 || seen[slot]) return false;
        seen[slot] = true;
        if (slot == 2) {
            const char *d = p;
            uint64_t v = 0;
            while (p < e && *p >= '0' && *p <= '9') v = v * 10 + (uint64_t)(*p++ - '0');
            size_t nd = (size_t)(p - d);
            if (nd == 0 || nd > 18 || (nd > 1 && *d == '0') || (p < e && (*p == '.' || *p == 'e' || *p == 'E')))
                return false;
            f->has_cost = true;
            f->cost = v;
        } else {
            sl_str v;
            if ((p = jplain(p, e, &v)) == NULL) return false;
            if (slot == 0) f->policy = v;
            else if (slot == 1) f->key = v;
            else f->cls = v, f->has_cls = true;
        }
        p = jws(p, e);
        if (p < e && *p == ',') {
            p = jws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}') break;
        return false;
    }
    return jws(p + 1, e) == e && seen[0] && seen[1];
}

static void handle_check(http_ctx *x, check_kind kind) {
    sl_conn *c = x->c;
    sl_worker *w = c->w;
    fast_check f;
    char pbuf[256], cbuf[128];
    if (x->req->body_len > 0 && fast_body(x->req->body, x->req->body_len, &f) && f.policy.len < sizeof(pbuf) &&
        f.cls.len < sizeof(cbuf)) {
        memcpy(pbuf, f.policy.p, f.policy.len);
        pbuf[f.policy.len] = '\0';
        if (f.has_cls) {
            memcpy(cbuf, f.cls.p, f.cls.len);
            cbuf[f.cls.len] = '\0';
        }
        sl_pending *p = sl_pending_get(w, c, finish_check);
        if (p == NULL) {
            busy(c, x->req->minor);
            return;
        }
        p->minor = x->req->minor;
        p->is_head = x->is_head != 0;
        set_client(p, (sl_str){NULL, 0});
        const sl_engine *e = w->gen->engine;
        bool one = kind != CHECK_DECIDE;
        sl_engine_prepare_named_class(e, pbuf, f.key.p, f.key.len, one || f.has_cost, one ? 1 : f.cost,
                                      f.has_cls ? cbuf : NULL, &p->v);
        sl_pending_submit(p);
        if (kind == CHECK_PASS)
            sl_engine_pass(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
        else
            sl_engine_decide(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
        if (sl_pending_park(p)) c->suspended = true;
        return;
    }
    json_t *j = parse_body(x);
    if (j == NULL) {
        char d[320];
        snprintf(d, sizeof(d), "the body must be a JSON object: %s", x->why);
        problem(c, x->req->minor, 400, d, 1);
        return;
    }
    const char *policy, *key;
    size_t pl, kl;
    uint64_t cost = 0;
    int has_cost = 0;
    if (json_u64(j, "cost", &cost, &has_cost) != 0) {
        json_decref(j);
        problem(c, x->req->minor, 400, "\"cost\" must be a non-negative integer", 1);
        return;
    }
    bool named = json_str(j, "policy", &policy, &pl) == 0;
    if (!named && json_object_get(j, "policy") != NULL) {
        json_decref(j);
        problem(c, x->req->minor, 400, "\"policy\" must be a string (a policy's name)", 1);
        return;
    }
    const char *cls = NULL;
    size_t cll = 0;
    if (json_object_get(j, "class") != NULL && json_str(j, "class", &cls, &cll) != 0) {
        json_decref(j);
        problem(c, x->req->minor, 400, "\"class\" must be a string (a priority class of the policy)", 1);
        return;
    }
    if (named && json_str(j, "key", &key, &kl) != 0) {
        json_decref(j);
        problem(c, x->req->minor, 400, "\"key\" (a string) is required with \"policy\"", 1);
        return;
    }
    if (!named && kind == CHECK_ACQUIRE) {
        json_decref(j);
        problem(c, x->req->minor, 400, "\"policy\" and \"key\" are required", 1);
        return;
    }
    sl_llm_request lrq; /* issue 24: an LLM request body (server/llm_http.c) */
    char lerr[200];
    int has_llm = named ? 0 : sl_http_llm_request(j, &lrq, lerr, sizeof(lerr));
    if (has_llm < 0) {
        json_decref(j);
        problem(c, x->req->minor, 400, lerr, 1);
        return;
    }
    sl_pending *p = sl_pending_get(w, c, finish_check);
    if (p == NULL) {
        json_decref(j);
        busy(c, x->req->minor);
        return;
    }
    p->minor = x->req->minor;
    p->is_head = x->is_head != 0;
    const sl_engine *e = w->gen->engine;
    set_client(p, (sl_str){NULL, 0});
    if (named) {
        /* an acquire (and a challenge's pass) takes one unit, a check what it says */
        bool one = kind != CHECK_DECIDE;
        sl_engine_prepare_named_class(e, policy, key, kl, one || has_cost, one ? 1 : cost, cls, &p->v);
    } else {
        sl_request r;
        sl_header hdrs[SL_HTTP_MAX_HEADERS];
        sl_http_json_request(j, &r, hdrs);
        if (has_llm) r.llm = &lrq;
        if (has_cost) { /* the request's cost (an Envoy request's hits_addend too) */
            r.has_cost = true;
            r.cost = r.hits_addend = cost;
        }
        sl_engine_prepare(e, &r, &p->v);
        set_client(p, r.client_ip);
    }
    json_decref(j); /* the verdict holds what it needs (keys are copied) */
    sl_pending_submit(p);
    if (kind == CHECK_PASS) /* POST /v1/challenge/pass: a solved challenge, not a decision */
        sl_engine_pass(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    else
        sl_engine_decide(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) c->suspended = true;
}

static void finish_token(sl_pending *p, int rc, bool later) {
    sl_conn *c = p->c;
    sl_server_count_settle(c->w, rc, &p->v); /* units charged above a reservation */
    if (rc == 0) {
        const char *b = p->op == SL_TOKEN_SETTLE   ? "{\"settled\":true}"
                        : p->op == SL_TOKEN_RELEASE ? "{\"released\":true}"
                                                    : "{\"settled\":true,\"released\":true}";
        reply(c, p->minor, 200, NULL, "application/json", b, strlen(b), 1);
    } else if (rc == SLUICE_ENOTFOUND) {
        problem(c, p->minor, 404, "token already used, expired or unknown", 1);
    } else if (rc == SLUICE_EINVAL) {
        problem(c, p->minor, 400, "invalid token (altered, forged, or sealed by another instance or "
                                  "before a restart: only a shared store.key_secret carries tokens over)", 1);
    } else if (rc == SL_ETOKEN_OP) {
        problem(c, p->minor, 400, p->op == SL_TOKEN_SETTLE ? "this token holds no reservation to settle"
                                                          : "this token holds no lease to release", 1);
    } else {
        problem(c, p->minor, 503, sluice_strerror(rc), 1);
    }
    if (later) sl_conn_resume(c);
}

/* A decimal from a header (X-Sluice-Actual), false when absent or malformed. */
static bool header_u64(const sl_http_req *req, const char *name, uint64_t *out) {
    const sl_http_header *h = sl_http1_header(req, name);
    if (h == NULL || h->value_len == 0 || h->value_len > 19) return false;
    uint64_t n = 0;
    for (size_t i = 0; i < h->value_len; i++) {
        if (h->value[i] < '0' || h->value[i] > '9') return false;
        n = n * 10 + (uint64_t)(h->value[i] - '0');
    }
    *out = n;
    return true;
}

/* POST /v1/settle {"token", "actual"} and /v1/release {"token"}; a gateway that cannot
 * build JSON sends the token in X-Sluice-Token and the actual cost in X-Sluice-Actual
 * (nginx's post_action, with no body at all). */
/* POST /v1/settle, /v1/release, /v1/finish */
typedef enum token_kind { TOKEN_RELEASE, TOKEN_SETTLE, TOKEN_FINISH } token_kind;

static void handle_token(http_ctx *x, token_kind settle) {
    sl_conn *c = x->c;
    sl_worker *w = c->w;
    const sl_http_header *th = sl_http1_header(x->req, "x-sluice-token");
    json_t *j = th != NULL && x->req->body_len == 0 ? json_object() : parse_body(x);
    const char *tok = NULL;
    size_t tl = 0;
    uint64_t actual = 0;
    int has_actual = 0;
    if (j != NULL && th != NULL) {
        tok = th->value;
        tl = th->value_len;
        has_actual = header_u64(x->req, "x-sluice-actual", &actual);
    }
    sl_llm_usage usage; /* issue 24: the provider's usage object as is (api/http/llm_http.c) */
    char uerr[200];
    int has_usage = j != NULL && settle != 0 ? sl_http_llm_usage(j, &usage, uerr, sizeof(uerr)) : 0;
    if (has_usage < 0) {
        json_decref(j);
        problem(c, x->req->minor, 400, uerr, 1);
        return;
    }
    if (has_usage) has_actual = 1;
    if (j == NULL || (tok == NULL && json_str(j, "token", &tok, &tl) != 0) ||
        (!has_actual && json_u64(j, "actual", &actual, &has_actual) != 0) || (settle == TOKEN_SETTLE && !has_actual)) {
        if (j) json_decref(j);
        problem(c, x->req->minor, 400,
                settle == TOKEN_SETTLE ? "expected {\"token\": \"...\", \"actual\": N}" : "expected {\"token\": \"...\"}", 1);
        return;
    }
    /* a release's sample for adaptive limits: latency_ms (a number, fractions allowed; else
     * the time since the decision) and outcome (ok, error, dropped; else ok) */
    bool has_lat = false;
    int64_t lat_ns = 0;
    unsigned outcome = SLUICE_OUTCOME_OK;
    json_t *lj = json_object_get(j, "latency_ms"), *oj = json_object_get(j, "outcome");
    if (lj != NULL) {
        if (!json_is_number(lj) || json_number_value(lj) < 0 || json_number_value(lj) > 1e9) {
            json_decref(j);
            problem(c, x->req->minor, 400, "\"latency_ms\" must be a number of milliseconds", 1);
            return;
        }
        has_lat = true;
        /* the only floating point on this path: a client's decimal, turned into whole ns */
        lat_ns = (int64_t)(json_number_value(lj) * 1e6 + 0.5);
    }
    if (oj != NULL) {
        const char *os = json_is_string(oj) ? json_string_value(oj) : "";
        if (strcmp(os, "ok") == 0) outcome = SLUICE_OUTCOME_OK;
        else if (strcmp(os, "error") == 0) outcome = SLUICE_OUTCOME_ERROR;
        else if (strcmp(os, "dropped") == 0) outcome = SLUICE_OUTCOME_DROPPED;
        else {
            json_decref(j);
            problem(c, x->req->minor, 400, "\"outcome\" must be ok, error or dropped", 1);
            return;
        }
    }
    sl_pending *p = sl_pending_get(w, c, finish_token);
    if (p == NULL) {
        json_decref(j);
        busy(c, x->req->minor);
        return;
    }
    p->minor = x->req->minor;
    /* /v1/finish: the response is over: settle (when an actual cost came) and release */
    p->op = settle == TOKEN_SETTLE ? SL_TOKEN_SETTLE
          : settle == TOKEN_FINISH ? (has_actual ? SL_TOKEN_SETTLE | SL_TOKEN_RELEASE : SL_TOKEN_RELEASE)
                        : SL_TOKEN_RELEASE;
    sl_pending_submit(p);
    if (has_usage)
        sl_engine_token_usage(w->gen->engine, w->lane, tok, tl, p->op, &usage, sl_worker_now(w), &p->v,
                              sl_pending_done, p);
    else
        sl_engine_token_sample(w->gen->engine, w->lane, tok, tl, p->op, actual, has_lat, lat_ns, outcome,
                               sl_worker_now(w), &p->v, sl_pending_done, p);
    json_decref(j); /* the token was read into the verdict before anything went out */
    if (sl_pending_park(p)) c->suspended = true;
}

static void route_auth(http_ctx *x) { handle_auth(x); }
static void route_check(http_ctx *x) { handle_check(x, CHECK_DECIDE); }
static void route_acquire(http_ctx *x) { handle_check(x, CHECK_ACQUIRE); }
static void route_pass(http_ctx *x) { handle_check(x, CHECK_PASS); } /* capacity protection */
static void route_settle(http_ctx *x) { handle_token(x, TOKEN_SETTLE); }
static void route_release(http_ctx *x) { handle_token(x, TOKEN_RELEASE); }
static void route_finish(http_ctx *x) { handle_token(x, TOKEN_FINISH); }
static void route_explain(http_ctx *x) { sl_explain_http(x->c, x->req); } /* explain_api.c */
static void route_healthz(http_ctx *x) { reply(x->c, x->req->minor, 200, NULL, "text/plain", "ok\n", 3, !x->is_head); }
static void route_json(http_ctx *x) { sl_grpc_http_json(x->c, x->req); } /* envoyproxy/ratelimit's JSON form */
static void route_healthcheck(http_ctx *x) { sl_grpc_http_healthcheck(x->c, x->req); }

/* What a route is for. */
typedef enum route_role {
    ROUTE_DECISION, /* decides (check, auth, acquire, a challenge's pass) */
    ROUTE_TOKEN,    /* settles or releases what a decision reserved */
    ROUTE_OBSERVE,  /* explains, nothing consumed */
    ROUTE_HEALTH,   /* liveness for load balancers */
    ROUTE_ENVOY,    /* envoyproxy/ratelimit's HTTP forms */
} route_role;

/* The data listener's routes, listed once: path, the only method served (NULL: any),
 * handler, role, and what another method gets (405 with Allow, or 404 as an unknown
 * path: /json is POST-only and says nothing else). The admin listener's are admin_api.c's. */
typedef struct http_route {
    const char *path;
    uint8_t path_len;
    const char *method;
    void (*fn)(http_ctx *x);
    route_role role;
    bool other_405;
} http_route;

#define ROUTE(p, m, f, r, o) {p, sizeof(p) - 1, m, f, r, o}
static const http_route routes[] = {
    ROUTE("/v1/auth", NULL, route_auth, ROUTE_DECISION, false),
    ROUTE("/v1/check", "POST", route_check, ROUTE_DECISION, true),
    ROUTE("/v1/acquire", "POST", route_acquire, ROUTE_DECISION, true),
    ROUTE("/v1/settle", "POST", route_settle, ROUTE_TOKEN, true),
    ROUTE("/v1/release", "POST", route_release, ROUTE_TOKEN, true),
    ROUTE("/v1/finish", "POST", route_finish, ROUTE_TOKEN, true),
    ROUTE("/v1/challenge/pass", "POST", route_pass, ROUTE_DECISION, true),
    ROUTE("/v1/explain", "POST", route_explain, ROUTE_OBSERVE, true),
    ROUTE("/healthz", NULL, route_healthz, ROUTE_HEALTH, false),
    ROUTE("/json", "POST", route_json, ROUTE_ENVOY, false),
    ROUTE("/healthcheck", NULL, route_healthcheck, ROUTE_ENVOY, false),
};
#undef ROUTE

void sl_http_handle(sl_conn *c, const sl_http_req *req) {
    http_ctx x = {.c = c, .req = req, .path = req->target, .path_len = req->target_len};
    const char *q = memchr(req->target, '?', req->target_len);
    if (q) {
        x.path_len = (size_t)(q - req->target);
        x.query = q + 1;
        x.query_len = req->target_len - x.path_len - 1;
    }
    x.is_head = method_is(&x, "HEAD");
    if (c->kind == SL_KIND_ADMIN) {
        sl_admin_handle(c, req, x.path, x.path_len, x.is_head != 0);
        return;
    }
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const http_route *r = &routes[i];
        if (r->path_len != x.path_len || memcmp(r->path, x.path, x.path_len) != 0) continue;
        if (r->method == NULL || method_is(&x, r->method)) {
            r->fn(&x);
            return;
        }
        if (r->other_405) {
            static const char b405[] =
                "{\"type\":\"about:blank\",\"title\":\"Method Not Allowed\",\"status\":405}";
            reply(c, req->minor, 405, "Allow: POST\r\n", "application/problem+json", b405,
                  sizeof(b405) - 1, !x.is_head);
            return;
        }
        break;
    }
    problem(c, req->minor, 404, "no such endpoint", !x.is_head);
}
