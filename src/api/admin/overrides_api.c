/* SPDX-License-Identifier: Apache-2.0 */
/*
 * overrides_api.c -- /v1/overrides on the admin listener (docs/overrides.md):
 *   PUT|GET|DELETE /v1/overrides/{policy}/{key}   one override (201/200, 200/404, 204/404)
 *   GET /v1/overrides?policy=&cursor=&limit=&orphaned=1   pages in hash order
 *   POST /v1/overrides/import   NDJSON, one override per line; GET /v1/overrides/export
 * Answers are JSON; errors problem+json with the field they name.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/admin/overrides.h"
#include "server/server.h"

#define IMPORT_REFUSED_MAX 1000 /* refused lines listed one by one (the rest counted) */

typedef struct octx {
    sl_conn *c;
    const sl_http_req *req;
    const char *path;
    size_t path_len;
    bool head;
    const char *who;
} octx;

static bool meth(const octx *x, const char *m) {
    return strlen(m) == x->req->method_len && memcmp(x->req->method, m, x->req->method_len) == 0;
}

static void send_json(octx *x, int status, json_t *o) {
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (out == NULL) {
        sl_http_problem(x->c, x->req->minor, 500, "out of memory", 1);
        return;
    }
    sl_http_reply(x->c, x->req->minor, status, NULL, "application/json", out, strlen(out), !x->head);
    free(out);
}

static void send_problem(octx *x, const sl_ovr_res *r) {
    json_t *o = json_object();
    json_object_set_new(o, "type", json_string("about:blank"));
    json_object_set_new(o, "title", json_string(sl_http1_reason(r->status)));
    json_object_set_new(o, "status", json_integer(r->status));
    json_object_set_new(o, "detail", json_string(r->detail));
    if (r->field[0]) json_object_set_new(o, "field", json_string(r->field));
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (out == NULL) {
        sl_http_problem(x->c, x->req->minor, 500, "out of memory", 1);
        return;
    }
    sl_http_reply(x->c, x->req->minor, r->status, NULL, "application/problem+json", out,
                  strlen(out), !x->head);
    free(out);
}

static void fail(octx *x, int status, const char *field, const char *detail) {
    sl_ovr_res r = {.status = status};
    snprintf(r.field, sizeof(r.field), "%s", field ? field : "");
    snprintf(r.detail, sizeof(r.detail), "%s", detail);
    send_problem(x, &r);
}

static int hexd(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into out (NUL-terminated); false on a bad escape or a NUL. */
static bool pdecode(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (o + 1 >= cap) return false;
        char ch = s[i];
        if (ch == '%') {
            int a = i + 2 < n ? hexd(s[i + 1]) : -1, b = a >= 0 ? hexd(s[i + 2]) : -1;
            if (b < 0) return false;
            ch = (char)(a * 16 + b);
            i += 2;
        }
        if (ch == '\0') return false;
        out[o++] = ch;
    }
    out[o] = '\0';
    return true;
}

static int qget(const sl_http_req *req, const char *name, char *out, size_t cap) {
    const char *q = memchr(req->target, '?', req->target_len);
    if (q == NULL) return -1;
    const char *p = q + 1, *end = req->target + req->target_len;
    size_t nl = strlen(name);
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *e = amp ? amp : end;
        if ((size_t)(e - p) > nl && memcmp(p, name, nl) == 0 && p[nl] == '=')
            return pdecode(p + nl + 1, (size_t)(e - p - nl - 1), out, cap) ? (int)strlen(out) : -2;
        if ((size_t)(e - p) == nl && memcmp(p, name, nl) == 0) {
            out[0] = '\0';
            return 0;
        }
        p = amp ? amp + 1 : end;
    }
    return -1;
}

static sluice_time now_of(octx *x) { return sluice_clock_now(x->c->w->srv->clock); }

/* ---- one override ------------------------------------------------------------------ */

static void one(octx *x, const char *rest, size_t rest_len) {
    sl_server *s = x->c->w->srv;
    const sl_engine *e = x->c->w->gen->engine;
    const char *slash = memchr(rest, '/', rest_len);
    char policy[256];
    if (slash == NULL || slash == rest || !pdecode(rest, (size_t)(slash - rest), policy, sizeof(policy))) {
        fail(x, 404, "", "expected /v1/overrides/{policy}/{key}");
        return;
    }
    const char *key = slash + 1;
    size_t key_len = rest_len - (size_t)(key - rest);
    sl_ovr_res res = {0};
    sluice_time now = now_of(x);
    if (meth(x, "PUT")) {
        if (!sl_admin_may(x->c->w->gen, x->who, SL_ADMIN_OVERRIDES)) {
            fail(x, 403, "", "this token may not change overrides");
            return;
        }
        json_error_t jerr;
        json_t *body = json_loadb(x->req->body, x->req->body_len, 0, &jerr);
        if (body == NULL) {
            char d[200];
            snprintf(d, sizeof(d), "the body is not JSON: %s", jerr.text);
            fail(x, 400, "", d);
            return;
        }
        json_t *out = NULL;
        bool created = false;
        int rc = sl_ovr_set(s, e, policy, key, key_len, NULL, body, x->who, now, &out, &created, &res);
        json_decref(body);
        if (rc != 0) {
            send_problem(x, &res);
            return;
        }
        send_json(x, created ? 201 : 200, out);
        json_decref(out);
    } else if (meth(x, "GET") || x->head) {
        if (!sl_admin_may(x->c->w->gen, x->who, SL_ADMIN_READ)) {
            fail(x, 403, "", "this token may not read overrides");
            return;
        }
        json_t *o = sl_ovr_get_json(s, e, policy, key, key_len, NULL, now, &res);
        if (o == NULL) {
            send_problem(x, &res);
            return;
        }
        send_json(x, 200, o);
        json_decref(o);
    } else if (meth(x, "DELETE")) {
        if (!sl_admin_may(x->c->w->gen, x->who, SL_ADMIN_OVERRIDES)) {
            fail(x, 403, "", "this token may not change overrides");
            return;
        }
        /* an optional body {"reason": "..."}: the audit entry keeps it */
        json_t *body = NULL;
        const char *why = NULL;
        if (x->req->body_len > 0) {
            json_error_t jerr;
            body = json_loadb(x->req->body, x->req->body_len, 0, &jerr);
            json_t *jr = body != NULL ? json_object_get(body, "reason") : NULL;
            if (body == NULL || !json_is_object(body) || json_object_size(body) != (jr ? 1u : 0u) ||
                (jr != NULL && (!json_is_string(jr) || json_string_length(jr) > 1024))) {
                json_decref(body);
                fail(x, 400, "reason", "a DELETE body is {\"reason\": \"...\"} (at most 1024 bytes)");
                return;
            }
            why = jr != NULL ? json_string_value(jr) : NULL;
        }
        int drc = sl_ovr_remove_why(s, e, policy, key, key_len, NULL, x->who, why, now, &res);
        json_decref(body);
        if (drc != 0) {
            send_problem(x, &res);
            return;
        }
        sl_http_reply(x->c, x->req->minor, 204, NULL, NULL, NULL, 0, 0);
    } else {
        fail(x, 405, "", "PUT, GET or DELETE");
    }
}

/* ---- lists ------------------------------------------------------------------------ */

static void list(octx *x) {
    sl_server *s = x->c->w->srv;
    const sl_engine *e = x->c->w->gen->engine;
    sl_ovr_table *t = sl_store_overrides(s->store);
    char pol[256], cur[64], lim[24], orph[8];
    bool has_pol = qget(x->req, "policy", pol, sizeof(pol)) > 0;
    int cl = qget(x->req, "cursor", cur, sizeof(cur));
    bool orphaned = qget(x->req, "orphaned", orph, sizeof(orph)) >= 0 && strcmp(orph, "0") != 0;
    size_t limit = 100;
    if (qget(x->req, "limit", lim, sizeof(lim)) >= 0) {
        char *end = NULL;
        unsigned long v = strtoul(lim, &end, 10);
        if (lim[0] == '\0' || *end != '\0' || v == 0 || v > 1000) {
            fail(x, 400, "limit", "limit: 1 to 1000");
            return;
        }
        limit = v;
    }
    sl_hash128 c = {0, 0};
    bool has_cur = cl > 0;
    if (has_cur && !sl_ovr_hex_hash(cur, &c)) {
        fail(x, 400, "cursor", "cursor: a next_cursor this endpoint answered");
        return;
    }
    sluice_time now = now_of(x);
    sl_ovr_sweep(t, now.wall_ns);
    json_t *items = json_array();
    bool more = false;
    sl_hash128 last = c;
    /* orphaned=1 filters pages until one is full or the table ends */
    for (int rounds = 0; rounds < 1000; rounds++) {
        sl_ovr_rec **page = NULL;
        size_t want = limit - json_array_size(items);
        size_t n = sl_ovr_page(t, has_cur, c, want, has_pol ? pol : NULL, now.wall_ns, &page, &more);
        for (size_t i = 0; i < n; i++) {
            bool orph = sl_ovr_orphaned(e, page[i]);
            if (!orphaned || orph) {
                json_t *o = sl_ovr_rec_json(page[i], true);
                if (orph) json_object_set_new(o, "orphaned", json_true());
                json_array_append_new(items, o);
            }
            last = page[i]->h;
            sl_ovr_rec_free(page[i]);
        }
        free(page);
        if (n > 0) {
            c = last;
            has_cur = true;
        }
        if (!more || json_array_size(items) >= limit || !orphaned) break;
    }
    json_t *o = json_object();
    json_object_set_new(o, "items", items);
    if (more) {
        char hx[33];
        sl_ovr_hash_hex(last, hx);
        json_object_set_new(o, "next_cursor", json_string(hx));
    } else {
        json_object_set_new(o, "next_cursor", json_null());
    }
    send_json(x, 200, o);
    json_decref(o);
}

typedef struct xbuf {
    char *p;
    size_t len, cap;
    bool oom;
} xbuf;

static void xput(xbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void export_one(void *ud, const sl_ovr_rec *r) {
    xbuf *b = ud;
    json_t *o = sl_ovr_rec_json(r, false);
    char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (line == NULL) {
        b->oom = true;
        return;
    }
    xput(b, line, strlen(line));
    xput(b, "\n", 1);
    free(line);
}

/* The export is written as it is walked: an HTTP/1.1 chunked body (HTTP/1.0: ended by
 * closing), one chunk per piece of the table, so a million overrides never sit in the
 * output buffer at once. */
struct sl_ovr_export {
    unsigned shard;
    uint32_t slot;
    bool chunked;
};

void sl_ovr_export_free(struct sl_ovr_export *x) { free(x); }

void sl_ovr_export_more(sl_conn *c) {
    struct sl_ovr_export *ex = c->ovr_exp;
    sl_server *s = c->w->srv;
    xbuf b = {0};
    bool more = sl_ovr_scan(sl_store_overrides(s->store), &ex->shard, &ex->slot, 2000,
                            sluice_clock_now(s->clock).wall_ns, export_one, &b);
    char head[32];
    int hn = 0;
    if (ex->chunked && b.len > 0) hn = snprintf(head, sizeof(head), "%zx\r\n", b.len);
    const char *tail = !more && ex->chunked ? (b.len > 0 ? "\r\n0\r\n\r\n" : "0\r\n\r\n")
                       : ex->chunked && b.len > 0 ? "\r\n" : "";
    size_t need = (size_t)hn + b.len + strlen(tail);
    if (b.oom || sl_conn_reserve(c, need) != 0) {
        c->close_after = true; /* the body cannot go on: the client sees it cut */
        more = false;
    } else {
        sl_wbuf wb;
        sl_conn_wbuf(c, &wb);
        sl_wbuf_put(&wb, head, (size_t)hn);
        if (b.len) sl_wbuf_put(&wb, b.p, b.len);
        sl_wbuf_puts(&wb, tail);
        sl_conn_commit(c, &wb);
    }
    free(b.p);
    if (!more) {
        if (!ex->chunked) c->close_after = true;
        c->ovr_exp = NULL;
        free(ex);
    }
}

static void export_all(octx *x) {
    struct sl_ovr_export *ex = calloc(1, sizeof(*ex));
    if (ex == NULL || sl_conn_reserve(x->c, 512) != 0) {
        free(ex);
        fail(x, 500, "", "out of memory");
        return;
    }
    ex->chunked = x->req->minor >= 1;
    sl_wbuf wb;
    sl_conn_wbuf(x->c, &wb);
    sl_http1_begin(&wb, x->req->minor, 200);
    sl_wbuf_puts(&wb, x->c->w->date);
    sl_wbuf_puts(&wb, "Server: sluice\r\nContent-Type: application/x-ndjson\r\n");
    sl_wbuf_puts(&wb, ex->chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "Connection: close\r\n\r\n");
    sl_conn_commit(x->c, &wb);
    if (x->head) { /* HEAD: the head only */
        free(ex);
        return;
    }
    x->c->ovr_exp = ex; /* conn.c writes the rest as the output drains */
}

/* ---- import ----------------------------------------------------------------------- */

typedef struct imp {
    octx *x;
    uint64_t applied, refused_total, line;
    json_t *refused;
    sl_ovr_batch *b; /* the Redis store: lines written to Redis SL_OVR_BATCH at a time */
} imp;

/* Refused lines in line order (a queued line's refusal comes at its flush). */
static void refuse_at(imp *m, uint64_t line, const char *why) {
    m->refused_total++;
    if (json_array_size(m->refused) >= IMPORT_REFUSED_MAX) return;
    json_t *o = json_object();
    json_object_set_new(o, "line", json_integer((json_int_t)line));
    json_object_set_new(o, "reason", json_string(why));
    size_t at = json_array_size(m->refused);
    while (at > 0 && json_integer_value(json_object_get(json_array_get(m->refused, at - 1), "line")) >
                         (json_int_t)line)
        at--;
    json_array_insert_new(m->refused, at, o);
}

static void refuse(imp *m, const char *why) { refuse_at(m, m->line, why); }

static void flushed(void *ud, uint64_t line, const char *why) {
    imp *m = ud;
    if (why == NULL) m->applied++;
    else refuse_at(m, line, why);
}

static void flush(imp *m) {
    if (sl_ovr_batch_size(m->b) > 0)
        sl_ovr_batch_flush(m->x->c->w->srv, m->b, sluice_clock_now(m->x->c->w->srv->clock), flushed, m);
}

/* One NDJSON line (without its newline). */
static void import_line(imp *m, const char *p, size_t n) {
    m->line++;
    while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n == 0) return; /* blank lines are nothing */
    sl_server *s = m->x->c->w->srv;
    const sl_engine *e = m->x->c->w->gen->engine;
    json_error_t jerr;
    json_t *o = json_loadb(p, n, 0, &jerr);
    char why[400];
    if (o == NULL || !json_is_object(o)) {
        snprintf(why, sizeof(why), "not a JSON object%s%s", o ? "" : ": ", o ? "" : jerr.text);
        json_decref(o);
        refuse(m, why);
        return;
    }
    json_t *jp = json_object_get(o, "policy"), *jk = json_object_get(o, "key"),
           *jh = json_object_get(o, "key_hash");
    if (!json_is_string(jp)) {
        refuse(m, "policy: a string is required");
    } else if ((jk != NULL) == (jh != NULL) || (jk && !json_is_string(jk)) || (jh && !json_is_string(jh))) {
        refuse(m, "key: exactly one of key (the path form) or key_hash");
    } else {
        json_t *body = json_deep_copy(o);
        json_object_del(body, "policy");
        json_object_del(body, "key");
        json_object_del(body, "key_hash");
        json_object_del(body, "set_by");
        json_object_del(body, "set_at");
        json_object_del(body, "kind");
        json_object_del(body, "orphaned");
        sl_ovr_res res = {0};
        json_t *out = NULL;
        bool created;
        const char *key = jk ? json_string_value(jk) : NULL;
        int rc;
        for (int tries = 0;; tries++) {
            if (m->b == NULL && s->redis) m->b = sl_ovr_batch_new(); /* NULL: one at a time */
            if (m->b != NULL) {
                rc = sl_ovr_set_batched(s, e, json_string_value(jp), key, key ? json_string_length(jk) : 0,
                                        jh ? json_string_value(jh) : NULL, body, m->x->who,
                                        sluice_clock_now(s->clock), m->b, m->line, &res);
            } else {
                rc = sl_ovr_set(s, e, json_string_value(jp), key, key ? json_string_length(jk) : 0,
                                jh ? json_string_value(jh) : NULL, body, m->x->who,
                                sluice_clock_now(s->clock), &out, &created, &res);
            }
            if (rc != 2 || tries > 0) break;
            flush(m); /* full, or this key is queued: the earlier change goes first */
        }
        json_decref(body);
        json_decref(out);
        if (rc == 1) {
            /* queued: counted by the flush */
        } else if (rc == 0) {
            m->applied++;
        } else {
            snprintf(why, sizeof(why), "%d %s", res.status, res.detail);
            refuse(m, why);
        }
    }
    json_decref(o);
}

static void import_body(octx *x) {
    if (!sl_admin_may(x->c->w->gen, x->who, SL_ADMIN_OVERRIDES)) {
        fail(x, 403, "", "this token may not change overrides");
        return;
    }
    imp m = {.x = x, .refused = json_array()};
    const char *p = x->req->body, *end = p + x->req->body_len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        import_line(&m, p, (size_t)(e - p));
        p = nl ? nl + 1 : end;
    }
    flush(&m);
    sl_ovr_batch_free(m.b);
    json_t *o = json_object();
    json_object_set_new(o, "applied", json_integer((json_int_t)m.applied));
    json_object_set_new(o, "refused", m.refused);
    if (m.refused_total > json_array_size(m.refused))
        json_object_set_new(o, "refused_total", json_integer((json_int_t)m.refused_total));
    send_json(x, 200, o);
    json_decref(o);
}

/* ---- the streamed import (conn.c hands over the body as it arrives) ------------------- */

#define STREAM_LINE_MAX (1u << 20) /* one NDJSON line; a longer one is refused, skipped */

struct sl_ovr_stream {
    imp m;
    octx x;
    char who[128];
    int minor;
    bool keep_alive, skipping, head;
    uint64_t left; /* body bytes still to come */
    char *line;
    size_t len, cap;
};

bool sl_ovr_stream_begin(sl_conn *c, const sl_http_req *req) {
    static const char path[] = "/v1/overrides/import";
    if (req->method_len != 4 || memcmp(req->method, "POST", 4) != 0 || req->chunked ||
        req->target_len < sizeof(path) - 1 || memcmp(req->target, path, sizeof(path) - 1) != 0 ||
        (req->target_len > sizeof(path) - 1 && req->target[sizeof(path) - 1] != '?'))
        return false;
    const sl_http_header *cl = sl_http1_header(req, "content-length");
    if (cl == NULL || cl->value_len == 0 || cl->value_len > 19) return false;
    uint64_t n = 0;
    for (size_t i = 0; i < cl->value_len; i++) {
        if (cl->value[i] < '0' || cl->value[i] > '9') return false;
        n = n * 10 + (uint64_t)(cl->value[i] - '0');
    }
    const char *who = sl_admin_caller(c, req);
    if (who == NULL || sl_admin_cross_site(req) || !sl_admin_may(c->w->gen, who, SL_ADMIN_OVERRIDES))
        return false; /* answered by the ordinary path (401, 403 also cross-site, 501, or 413 if too large) */
    struct sl_ovr_stream *st = calloc(1, sizeof(*st));
    if (st == NULL) return false;
    snprintf(st->who, sizeof(st->who), "%s", who);
    st->minor = req->minor;
    st->keep_alive = req->keep_alive != 0;
    st->left = n;
    st->m.refused = json_array();
    /* the context the line importer reads: the connection and the caller; the request
     * object is not kept (its bytes are gone once the head is consumed) */
    st->x.c = c;
    st->x.who = st->who;
    st->m.x = &st->x;
    c->ovr_imp = st;
    if (req->expect_continue) {
        const char *cont = req->minor == 0 ? "HTTP/1.0 100 Continue\r\n\r\n" : "HTTP/1.1 100 Continue\r\n\r\n";
        sl_http_raw(c, cont);
    }
    return true;
}

static void stream_line(struct sl_ovr_stream *st) {
    if (st->skipping) {
        st->m.line++;
        refuse(&st->m, "a line longer than 1 MiB");
    } else {
        import_line(&st->m, st->line, st->len);
    }
    st->len = 0;
    st->skipping = false;
}

size_t sl_ovr_stream_feed(sl_conn *c, const char *p, size_t n) {
    struct sl_ovr_stream *st = c->ovr_imp;
    size_t take = n < st->left ? n : (size_t)st->left;
    for (size_t i = 0; i < take;) {
        const char *nl = memchr(p + i, '\n', take - i);
        size_t k = nl ? (size_t)(nl - (p + i)) : take - i;
        if (!st->skipping) {
            if (st->len + k > STREAM_LINE_MAX) {
                st->skipping = true;
                st->len = 0;
            } else {
                if (st->len + k > st->cap) {
                    size_t cap = st->cap ? st->cap : 4096;
                    while (cap < st->len + k) cap *= 2;
                    char *b = realloc(st->line, cap);
                    if (b == NULL) {
                        st->skipping = true;
                        st->len = 0;
                    } else {
                        st->line = b;
                        st->cap = cap;
                    }
                }
                if (!st->skipping) {
                    memcpy(st->line + st->len, p + i, k);
                    st->len += k;
                }
            }
        }
        i += k;
        if (nl != NULL) {
            stream_line(st);
            i++;
        }
    }
    st->left -= take;
    flush(&st->m); /* what came in this read is in Redis before more is read */
    if (st->left > 0) return take;
    if (st->len > 0 || st->skipping) stream_line(st); /* the last line without its newline */
    flush(&st->m);
    json_t *o = json_object();
    json_object_set_new(o, "applied", json_integer((json_int_t)st->m.applied));
    json_object_set_new(o, "refused", st->m.refused);
    st->m.refused = NULL;
    if (st->m.refused_total > json_array_size(json_object_get(o, "refused")))
        json_object_set_new(o, "refused_total", json_integer((json_int_t)st->m.refused_total));
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!st->keep_alive) c->close_after = true;
    if (out != NULL) {
        sl_http_reply(c, st->minor, 200, NULL, "application/json", out, strlen(out), 1);
        free(out);
    } else {
        sl_http_problem(c, st->minor, 500, "out of memory", 1);
    }
    c->ovr_imp = NULL;
    sl_ovr_stream_free(st);
    return take;
}

void sl_ovr_stream_free(struct sl_ovr_stream *st) {
    if (st == NULL) return;
    json_decref(st->m.refused);
    sl_ovr_batch_free(st->m.b);
    free(st->line);
    free(st);
}

void sl_overrides_http(sl_conn *c, const sl_http_req *req, const char *path, size_t path_len,
                       bool is_head, const char *who) {
    octx x = {c, req, path, path_len, is_head, who};
    const char *rest = path + strlen("/v1/overrides");
    size_t rest_len = path_len - strlen("/v1/overrides");
    if (rest_len == 0 || (rest_len == 1 && rest[0] == '/')) {
        if (!(meth(&x, "GET") || is_head)) {
            fail(&x, 405, "", "GET lists overrides; PUT /v1/overrides/{policy}/{key} sets one");
            return;
        }
        if (!sl_admin_may(c->w->gen, who, SL_ADMIN_READ)) {
            fail(&x, 403, "", "this token may not read overrides");
            return;
        }
        list(&x);
        return;
    }
    rest++;
    rest_len--;
    if (rest_len == 6 && memcmp(rest, "import", 6) == 0) {
        if (!meth(&x, "POST")) fail(&x, 405, "", "POST an NDJSON body");
        else import_body(&x);
        return;
    }
    if (rest_len == 6 && memcmp(rest, "export", 6) == 0) {
        if (!(meth(&x, "GET") || is_head)) fail(&x, 405, "", "GET");
        else if (!sl_admin_may(c->w->gen, who, SL_ADMIN_READ)) fail(&x, 403, "", "this token may not read overrides");
        else export_all(&x);
        return;
    }
    one(&x, rest, rest_len);
}
