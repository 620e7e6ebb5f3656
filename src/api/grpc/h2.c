/* SPDX-License-Identifier: Apache-2.0 */
/*
 * h2.c -- the HTTP/2 side of the gRPC server: an nghttp2 server session driven through
 * memory buffers (mem_recv/mem_send, no I/O), one stream record per call, gRPC framing
 * (1-byte compressed flag + 4-byte big-endian length) reassembled across DATA frames.
 * Invariants: a stream record is on the session's active list from its first HEADERS
 * until nghttp2 closes the stream; at most one reply is submitted per stream; request
 * bytes are buffered only up to 5 + the declared length, which never exceeds max_message.
 * Flow control bounds memory: a call's request bytes are handed back to the windows
 * (WINDOW_UPDATE) only once the call is answered, so a connection holds at most its
 * connection window (SL_H2_CONN_WINDOW) of bytes for calls not yet decided; bytes for a
 * call already answered (an early error) are handed back at once.
 */
#include "api/grpc/h2.h"

#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H2_PATH_MAX 128
#define H2_REPLY_CAP 32768u   /* serialized response bound (16 descriptors fit easily) */
#define H2_POOL_MAX 64        /* stream records kept for reuse */
#define H2_KEEP_RBUF 16384u   /* request buffers larger than this are not pooled */
#define SL_H2_CONN_WINDOW (1u << 20) /* undecided request bytes per connection (at least
                                         one stream window) */

typedef struct h2_stream {
    int32_t id;
    struct h2_stream *next, *prev; /* active list */
    char path[H2_PATH_MAX];
    size_t path_len;
    bool path_long, post, ct_ok, bad_timeout, hdr_too_big;
    bool answered, ended;
    bool waiting;                  /* handled, its answer waits for the store (async) */
    size_t hdr_bytes;
    int64_t deadline_ns;           /* 0 = none */
    uint8_t *rbuf;                 /* framed request: prefix + message */
    size_t rlen, rcap;
    uint32_t mlen;                 /* declared message length once rlen >= 5 */
    size_t unconsumed;             /* DATA bytes not yet handed back to the windows */
    uint8_t *wbuf;                 /* framed response message */
    size_t wlen, woff;
    /* streaming calls (ext_proc): each request message is handed over as it completes;
     * responses are queued in obuf and sent without END_STREAM, then trailers */
    bool streaming;
    bool busy;                     /* the handler waits (store): the current message stays
                                      at rbuf+roff, later ones wait behind it */
    bool resp_started, deferred, want_trailers;
    int close_status;
    char close_msg[160];
    size_t roff;                   /* bytes of rbuf already handled */
    size_t cur;                    /* framed length of the message the busy handler holds */
    void *app;                     /* the handler's per-stream state */
    uint8_t *obuf;                 /* framed response messages not yet sent */
    size_t olen, ooff, ocap;
} h2_stream;

struct sl_h2 {
    nghttp2_session *s;
    sl_h2_opts o;
    const sl_grpc_env *env;        /* valid during feed/tick only */
    h2_stream *active;
    size_t nactive;
    size_t ndeadlines;             /* unanswered calls with a deadline (tick is O(1) at 0) */
    size_t nwaiting;               /* calls whose answer waits for the store */
    h2_stream *pool;
    size_t npool;
    const uint8_t *pend;           /* output chunk from nghttp2 not yet copied out */
    size_t pend_len;
    bool fatal;
    bool xp_window;                /* the connection window was raised for streaming calls */
    bool notice_sent, goaway_sent;  /* drain: shutdown notice, then the final GOAWAY */
    int64_t notice_ns;
};

static void stream_pump(sl_h2 *h, struct h2_stream *st);

/* ---- stream records ---------------------------------------------------------------- */

static h2_stream *stream_new(sl_h2 *h, int32_t id) {
    h2_stream *st = h->pool;
    if (st != NULL) {
        h->pool = st->next;
        h->npool--;
        uint8_t *rb = st->rbuf, *wb = st->wbuf;
        size_t rc = st->rcap;
        memset(st, 0, sizeof(*st));
        st->rbuf = rb;
        st->rcap = rc;
        st->wbuf = wb;
    } else {
        st = calloc(1, sizeof(*st));
        if (st == NULL) return NULL;
    }
    st->id = id;
    st->next = h->active;
    if (h->active) h->active->prev = st;
    h->active = st;
    h->nactive++;
    return st;
}

static void stream_free_mem(h2_stream *st) {
    free(st->rbuf);
    free(st->wbuf);
    free(st->obuf);
    free(st);
}

/* A streaming call's handler learns that its stream is over (reset, closed, session
 * gone): it settles what it must and frees its state. */
static void app_gone(sl_h2 *h, h2_stream *st) {
    if (st->streaming && st->app != NULL) {
        void *a = st->app;
        st->app = NULL;
        sl_grpc_stream_gone(h, st, a);
    }
}

/* The call no longer waits for its answer: the owner forgets it. */
static void stop_waiting(sl_h2 *h, h2_stream *st) {
    if (!st->waiting) return;
    st->waiting = false;
    h->nwaiting--;
    if (h->o.forget != NULL) h->o.forget(h->o.owner, st);
}

static void stream_release(sl_h2 *h, h2_stream *st) {
    stop_waiting(h, st);
    app_gone(h, st);
    free(st->obuf); /* streaming output is never pooled */
    st->obuf = NULL;
    st->ocap = st->olen = st->ooff = 0;
    if (!st->answered && st->deadline_ns != 0) h->ndeadlines--;
    if (st->unconsumed > 0) nghttp2_session_consume_connection(h->s, st->unconsumed);
    if (st->prev)
        st->prev->next = st->next;
    else
        h->active = st->next;
    if (st->next) st->next->prev = st->prev;
    h->nactive--;
    if (h->npool >= H2_POOL_MAX) {
        stream_free_mem(st);
        return;
    }
    if (st->rcap > H2_KEEP_RBUF) {
        free(st->rbuf);
        st->rbuf = NULL;
        st->rcap = 0;
    }
    st->next = h->pool;
    h->pool = st;
    h->npool++;
}

/* ---- replies ----------------------------------------------------------------------- */

/* Hands `n` received bytes of stream `id` back to the flow-control windows. For a stream
 * nghttp2 no longer knows, only the connection window is counted. */
static void give_back(sl_h2 *h, int32_t id, size_t n) {
    if (n > 0) nghttp2_session_consume(h->s, id, n);
}

static void set_answered(sl_h2 *h, h2_stream *st, int status) {
    stop_waiting(h, st);
    if (!st->answered && st->deadline_ns != 0) h->ndeadlines--;
    st->answered = true;
    give_back(h, st->id, st->unconsumed);
    st->unconsumed = 0;
    if (h->env != NULL && h->env->on_status != NULL) h->env->on_status(h->env->ud, status);
}

#define NV(n, v, vl) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE}

/* Trailers-Only (or, with http_status != 200, an HTTP-level refusal that still carries a
 * grpc-status so gRPC clients report something useful). */
static void reply_status(sl_h2 *h, h2_stream *st, int http_status, int status, const char *msg) {
    if (st->answered) return;
    set_answered(h, st, status);
    char hs[8], gs[8], enc[512];
    int hl = snprintf(hs, sizeof(hs), "%d", http_status);
    int gl = snprintf(gs, sizeof(gs), "%d", status);
    size_t el = msg && *msg ? sl_grpc_pct_encode(msg, enc, sizeof(enc)) : 0;
    nghttp2_nv nva[4] = {
        NV(":status", hs, (size_t)hl),
        NV("content-type", "application/grpc", 16),
        NV("grpc-status", gs, (size_t)gl),
        NV("grpc-message", enc, el),
    };
    if (nghttp2_submit_response(h->s, st->id, nva, el ? 4 : 3, NULL) != 0)
        nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *ud) {
    (void)ud;
    h2_stream *st = src->ptr;
    size_t n = st->wlen - st->woff;
    if (n > length) n = length;
    memcpy(buf, st->wbuf + st->woff, n);
    st->woff += n;
    if (st->woff == st->wlen) {
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        nghttp2_nv tr[1] = {NV("grpc-status", "0", 1)};
        if (nghttp2_submit_trailer(s, id, tr, 1) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

/* A normal response: HEADERS, the framed message in DATA, trailers with grpc-status 0. */
static void reply_message(sl_h2 *h, h2_stream *st, size_t len) {
    set_answered(h, st, SL_GRPC_OK);
    st->wbuf[0] = 0;
    st->wbuf[1] = (uint8_t)(len >> 24);
    st->wbuf[2] = (uint8_t)(len >> 16);
    st->wbuf[3] = (uint8_t)(len >> 8);
    st->wbuf[4] = (uint8_t)len;
    st->wlen = 5 + len;
    st->woff = 0;
    nghttp2_nv nva[2] = {NV(":status", "200", 3), NV("content-type", "application/grpc", 16)};
    nghttp2_data_provider prd = {.source = {.ptr = st}, .read_callback = read_body};
    if (nghttp2_submit_response(h->s, st->id, nva, 2, &prd) != 0)
        nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

static void answer(sl_h2 *h, h2_stream *st, const sl_grpc_reply *r) {
    if (r->status == SL_GRPC_OK)
        reply_message(h, st, r->len);
    else
        reply_status(h, st, 200, r->status, r->message);
}

/* Handles a complete call: answered now, or parked until sl_h2_complete (its request
 * bytes were read into the decision already; only its reply buffer stays in use). */
static void run_call(sl_h2 *h, h2_stream *st) {
    const sl_grpc_env *env = h->env;
    sl_grpc_reply r = {.status = SL_GRPC_OK, .buf = st->wbuf + 5, .cap = H2_REPLY_CAP - 5};
    if (env == NULL) {
        r.status = SL_GRPC_UNAVAILABLE;
        snprintf(r.message, sizeof(r.message), "no decision context");
    } else if (sl_grpc_call(env, st, st->path, st->path_len, st->rbuf + 5, st->mlen, &r) == 1) {
        st->waiting = true;
        h->nwaiting++;
        return;
    }
    answer(h, st, &r);
}

/* The request has ended: check the message, decide, answer. */
static void finish_call(sl_h2 *h, h2_stream *st) {
    st->ended = true;
    if (st->answered) return;
    if (st->streaming) { /* the client half-closed: its handler ends the call */
        stream_pump(h, st);
        return;
    }
    const sl_grpc_env *env = h->env;
    if (st->deadline_ns != 0 && env != NULL && env->mono_ns >= st->deadline_ns) {
        reply_status(h, st, 200, SL_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
        return;
    }
    if (st->rlen < 5 || st->rlen < 5 + (size_t)st->mlen) {
        reply_status(h, st, 200, SL_GRPC_INTERNAL,
                     st->rlen == 0 ? "no request message" : "truncated request message");
        return;
    }
    if (st->wbuf == NULL && (st->wbuf = malloc(H2_REPLY_CAP)) == NULL) {
        reply_status(h, st, 200, SL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    run_call(h, st);
}

/* Appends DATA payload to the call's framed request, enforcing one message of at most
 * max_message bytes with the compressed flag clear. */
static void take_data(sl_h2 *h, h2_stream *st, const uint8_t *p, size_t len) {
    while (len > 0 && !st->answered) {
        size_t want;
        if (st->rlen < 5) {
            want = 5 - st->rlen;
        } else {
            want = 5 + (size_t)st->mlen - st->rlen;
            if (want == 0) {
                reply_status(h, st, 200, SL_GRPC_INTERNAL, "more than one request message in a unary call");
                return;
            }
        }
        size_t take = len < want ? len : want;
        size_t need = st->rlen + take;
        if (need > st->rcap) {
            size_t cap = st->rlen < 5 ? 5 : 5 + (size_t)st->mlen;
            if (cap < 64) cap = 64;
            uint8_t *nb = realloc(st->rbuf, cap);
            if (nb == NULL) {
                reply_status(h, st, 200, SL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
                return;
            }
            st->rbuf = nb;
            st->rcap = cap;
        }
        memcpy(st->rbuf + st->rlen, p, take);
        st->rlen += take;
        p += take;
        len -= take;
        if (st->rlen == 5) {
            uint32_t ml = (uint32_t)st->rbuf[1] << 24 | (uint32_t)st->rbuf[2] << 16 |
                          (uint32_t)st->rbuf[3] << 8 | st->rbuf[4];
            if (st->rbuf[0] != 0) {
                reply_status(h, st, 200, SL_GRPC_UNIMPLEMENTED,
                             "compressed messages are not supported (send identity)");
                return;
            }
            if (ml > h->o.max_message) {
                char m[96];
                snprintf(m, sizeof(m), "request message of %u bytes is above the limit of %u",
                         ml, h->o.max_message);
                reply_status(h, st, 200, SL_GRPC_RESOURCE_EXHAUSTED, m);
                return;
            }
            st->mlen = ml;
        }
    }
}

/* ---- streaming calls ----------------------------------------------------------------- */

/* Why the bytes of a streaming call are given back to the windows only once its handler
 * is done with their message: a peer then holds at most one stream window (SL_H2_XP_WINDOW)
 * of unhandled bytes per stream and the connection window per connection, whatever it
 * sends, and a handler that waits for its store needs no copy of the message it holds. */
static void stream_pump(sl_h2 *h, h2_stream *st) {
    while (!st->busy && !st->answered) {
        size_t avail = st->rlen - st->roff;
        if (avail < 5) break;
        const uint8_t *p = st->rbuf + st->roff;
        uint32_t ml = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        if (p[0] != 0) {
            sl_h2_stream_close(h, st, SL_GRPC_UNIMPLEMENTED, "compressed messages are not supported (send identity)");
            break;
        }
        if (ml > SL_H2_XP_MAX_MESSAGE) {
            /* refused from its prefix: the rest is never buffered */
            sl_grpc_stream_oversize(h, st, &st->app, ml);
            if (!st->answered) sl_h2_stream_close(h, st, SL_GRPC_RESOURCE_EXHAUSTED, "message too large");
            break;
        }
        if (avail < 5 + (size_t)ml) break;
        st->cur = 5 + (size_t)ml;
        if (sl_grpc_stream_message(h, st, &st->app, p + 5, ml) == 1) {
            st->busy = true; /* sl_h2_stream_resume hands the message back */
            return;
        }
        st->roff += st->cur;
        if (!st->answered) {
            give_back(h, st->id, st->cur);
            st->unconsumed -= st->cur;
        }
        st->cur = 0;
    }
    if (st->roff > 0 && st->roff == st->rlen) st->roff = st->rlen = 0;
    if (!st->busy && !st->answered && st->ended && st->rlen - st->roff < 5) {
        if (st->rlen != st->roff)
            sl_h2_stream_close(h, st, SL_GRPC_INTERNAL, "truncated request message");
        else
            sl_grpc_stream_halfclose(h, st, &st->app);
    }
}

static void take_stream_data(sl_h2 *h, h2_stream *st, const uint8_t *p, size_t len) {
    if (st->roff > 0 && !st->busy) { /* compact: what is handled goes */
        memmove(st->rbuf, st->rbuf + st->roff, st->rlen - st->roff);
        st->rlen -= st->roff;
        st->roff = 0;
    }
    if (st->rlen + len > st->rcap) {
        size_t cap = st->rcap ? st->rcap : 256;
        while (cap < st->rlen + len) cap *= 2;
        uint8_t *nb = realloc(st->rbuf, cap);
        if (nb == NULL) {
            sl_h2_stream_close(h, st, SL_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        st->rbuf = nb;
        st->rcap = cap;
    }
    memcpy(st->rbuf + st->rlen, p, len);
    st->rlen += len;
    stream_pump(h, st);
}

static ssize_t read_stream(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                           uint32_t *flags, nghttp2_data_source *src, void *ud) {
    (void)ud;
    h2_stream *st = src->ptr;
    size_t n = st->olen - st->ooff;
    if (n == 0) {
        if (!st->want_trailers) {
            st->deferred = true;
            return NGHTTP2_ERR_DEFERRED;
        }
        *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        char gs[8], enc[512];
        int gl = snprintf(gs, sizeof(gs), "%d", st->close_status);
        size_t el = st->close_msg[0] ? sl_grpc_pct_encode(st->close_msg, enc, sizeof(enc)) : 0;
        nghttp2_nv tr[2] = {NV("grpc-status", gs, (size_t)gl), NV("grpc-message", enc, el)};
        if (nghttp2_submit_trailer(s, id, tr, el ? 2 : 1) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        return 0;
    }
    if (n > length) n = length;
    memcpy(buf, st->obuf + st->ooff, n);
    st->ooff += n;
    if (st->ooff == st->olen) st->ooff = st->olen = 0;
    return (ssize_t)n;
}

/* Starts the response (HEADERS, then DATA as messages are queued) or wakes its data
 * provider. */
static void stream_kick(sl_h2 *h, h2_stream *st) {
    if (!st->resp_started) {
        st->resp_started = true;
        nghttp2_nv nva[2] = {NV(":status", "200", 3), NV("content-type", "application/grpc", 16)};
        nghttp2_data_provider prd = {.source = {.ptr = st}, .read_callback = read_stream};
        if (nghttp2_submit_response(h->s, st->id, nva, 2, &prd) != 0)
            nghttp2_submit_rst_stream(h->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    } else if (st->deferred) {
        st->deferred = false;
        nghttp2_session_resume_data(h->s, st->id);
    }
}

uint8_t *sl_h2_stream_reserve(sl_h2 *h, void *call, size_t max) {
    (void)h;
    h2_stream *st = call;
    if (st->answered || st->want_trailers) return NULL;
    if (st->olen - st->ooff + 5 + max > SL_H2_XP_OUT_MAX) return NULL;
    if (st->ooff > 0) {
        memmove(st->obuf, st->obuf + st->ooff, st->olen - st->ooff);
        st->olen -= st->ooff;
        st->ooff = 0;
    }
    if (st->olen + 5 + max > st->ocap) {
        size_t cap = st->olen + 5 + max;
        if (cap < 1024) cap = 1024;
        uint8_t *nb = realloc(st->obuf, cap);
        if (nb == NULL) return NULL;
        st->obuf = nb;
        st->ocap = cap;
    }
    return st->obuf + st->olen + 5;
}

void sl_h2_stream_commit(sl_h2 *h, void *call, size_t len) {
    h2_stream *st = call;
    uint8_t *f = st->obuf + st->olen;
    f[0] = 0;
    f[1] = (uint8_t)(len >> 24);
    f[2] = (uint8_t)(len >> 16);
    f[3] = (uint8_t)(len >> 8);
    f[4] = (uint8_t)len;
    st->olen += 5 + len;
    stream_kick(h, st);
}

void sl_h2_stream_close(sl_h2 *h, void *call, int status, const char *msg) {
    h2_stream *st = call;
    if (st->answered) return;
    if (!st->resp_started) { /* nothing sent: Trailers-Only */
        reply_status(h, st, 200, status, msg);
        return;
    }
    set_answered(h, st, status);
    st->want_trailers = true;
    st->close_status = status;
    snprintf(st->close_msg, sizeof(st->close_msg), "%s", msg ? msg : "");
    stream_kick(h, st);
}

void sl_h2_stream_resume(sl_h2 *h, void *call) {
    h2_stream *st = call;
    if (!st->busy) return;
    st->busy = false;
    st->roff += st->cur;
    if (!st->answered) {
        give_back(h, st->id, st->cur);
        st->unconsumed -= st->cur;
    }
    st->cur = 0;
    stream_pump(h, st);
}

const uint8_t *sl_h2_stream_current(sl_h2 *h, void *call, size_t *len) {
    (void)h;
    h2_stream *st = call;
    if (!st->busy || st->cur < 5) {
        *len = 0;
        return NULL;
    }
    *len = st->cur - 5;
    return st->rbuf + st->roff + 5;
}

const sl_h2_opts *sl_h2_options(const sl_h2 *h) { return &h->o; }

/* ---- nghttp2 callbacks -------------------------------------------------------------- */

static h2_stream *stream_of(sl_h2 *h, int32_t id) {
    return nghttp2_session_get_stream_user_data(h->s, id);
}

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    (void)s;
    sl_h2 *h = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    h2_stream *st = stream_new(h, f->hd.stream_id);
    if (st == NULL) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    nghttp2_session_set_stream_user_data(h->s, f->hd.stream_id, st);
    return 0;
}

static bool eq(const uint8_t *a, size_t al, const char *b) {
    size_t bl = strlen(b);
    return al == bl && memcmp(a, b, bl) == 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t nl, const uint8_t *val, size_t vl, uint8_t flags, void *ud) {
    (void)s;
    (void)flags;
    sl_h2 *h = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    h2_stream *st = stream_of(h, f->hd.stream_id);
    if (st == NULL || st->hdr_too_big) return 0;
    st->hdr_bytes += nl + vl + 32;
    if (st->hdr_bytes > h->o.max_header_list) {
        st->hdr_too_big = true;
        return 0;
    }
    if (eq(name, nl, ":method")) {
        st->post = eq(val, vl, "POST");
    } else if (eq(name, nl, ":path")) {
        if (vl >= sizeof(st->path)) {
            st->path_long = true;
        } else {
            memcpy(st->path, val, vl);
            st->path[vl] = '\0';
            st->path_len = vl;
        }
    } else if (eq(name, nl, "content-type")) {
        st->ct_ok = vl >= 16 && memcmp(val, "application/grpc", 16) == 0 &&
                    (vl == 16 || val[16] == '+' || val[16] == ';');
    } else if (eq(name, nl, "grpc-timeout")) {
        int64_t t = sl_grpc_parse_timeout((const char *)val, vl);
        if (t < 0) {
            st->bad_timeout = true;
        } else if (h->env != NULL) {
            int64_t now = h->env->mono_ns;
            if (st->deadline_ns == 0) h->ndeadlines++;
            st->deadline_ns = t > INT64_MAX - now ? INT64_MAX : now + t;
            if (st->deadline_ns == 0) st->deadline_ns = 1;
        }
    }
    return 0;
}

/* Headers complete: refuse what cannot be a call before any message arrives. */
static void begin_call(sl_h2 *h, h2_stream *st, bool end_stream) {
    if (st->hdr_too_big)
        reply_status(h, st, 200, SL_GRPC_RESOURCE_EXHAUSTED, "request header list too large");
    else if (!st->post)
        reply_status(h, st, 405, SL_GRPC_UNIMPLEMENTED, "gRPC requires POST");
    else if (!st->ct_ok)
        reply_status(h, st, 415, SL_GRPC_INVALID_ARGUMENT,
                     "content-type must be application/grpc");
    else if (st->bad_timeout)
        reply_status(h, st, 200, SL_GRPC_INTERNAL, "malformed grpc-timeout");
    else if (st->path_long || !sl_grpc_known_method(st->path, st->path_len)) {
        char m[H2_PATH_MAX + 32];
        snprintf(m, sizeof(m), "unknown method %s", st->path_long ? "(too long)" : st->path);
        reply_status(h, st, 200, SL_GRPC_UNIMPLEMENTED, m);
    } else if (st->deadline_ns != 0 && h->env != NULL && h->env->mono_ns >= st->deadline_ns)
        reply_status(h, st, 200, SL_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
    else if (sl_grpc_streaming_method(st->path, st->path_len)) {
        /* a stream window that holds one whole message of a streaming call */
        st->streaming = true;
        nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, st->id, (int32_t)SL_H2_XP_WINDOW);
        /* and, from the first streaming call on, a connection window with room for two
         * whole messages, so one stream's unhandled message never holds the others back
         * (a connection of unary calls only keeps its 1 MiB) */
        if (!h->xp_window) {
            h->xp_window = true;
            nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, (int32_t)(2 * SL_H2_XP_WINDOW));
        }
    }
    if (end_stream) finish_call(h, st);
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    (void)s;
    sl_h2 *h = ud;
    bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    h2_stream *st;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if ((st = stream_of(h, f->hd.stream_id)) == NULL) break;
        if (f->headers.cat == NGHTTP2_HCAT_REQUEST)
            begin_call(h, st, end);
        else if (end)
            finish_call(h, st); /* client trailers end the request */
        break;
    case NGHTTP2_DATA:
        if (end && (st = stream_of(h, f->hd.stream_id)) != NULL) finish_call(h, st);
        break;
    default: break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
                         size_t len, void *ud) {
    (void)s;
    (void)flags;
    sl_h2 *h = ud;
    h2_stream *st = stream_of(h, id);
    if (st == NULL || st->answered) {
        give_back(h, id, len);
        return 0;
    }
    st->unconsumed += len; /* an answer (even one take_data gives now) hands it back */
    if (st->streaming)
        take_stream_data(h, st, data, len);
    else
        take_data(h, st, data, len);
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
    (void)code;
    sl_h2 *h = ud;
    h2_stream *st = stream_of(h, id);
    if (st != NULL) {
        nghttp2_session_set_stream_user_data(s, id, NULL);
        stream_release(h, st);
    }
    return 0;
}

/* The server answered before the client finished sending (an early error): tell the
 * client to stop with RST_STREAM(NO_ERROR), as the gRPC HTTP/2 mapping asks. */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *ud) {
    sl_h2 *h = ud;
    if ((f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    h2_stream *st = stream_of(h, f->hd.stream_id);
    if (st != NULL && !st->ended)
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

/* ---- session ----------------------------------------------------------------------- */

sl_h2 *sl_h2_create(const sl_h2_opts *opts) {
    sl_h2 *h = calloc(1, sizeof(*h));
    if (h == NULL) return NULL;
    if (opts) h->o = *opts;
    if (h->o.max_streams == 0) h->o.max_streams = 1024;
    if (h->o.max_header_list == 0) h->o.max_header_list = 8192;
    if (h->o.max_message == 0) h->o.max_message = 65536;
    nghttp2_session_callbacks *cb;
    if (nghttp2_session_callbacks_new(&cb) != 0) {
        free(h);
        return NULL;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    /* Unary calls need no priority tree: closed streams are not kept for it, and
     * SETTINGS_NO_RFC7540_PRIORITIES below tells the client not to send priorities. */
    nghttp2_option *opt = NULL;
    int rc = nghttp2_option_new(&opt);
    if (rc == 0) {
        nghttp2_option_set_no_closed_streams(opt, 1);
        nghttp2_option_set_no_auto_window_update(opt, 1);
        rc = nghttp2_session_server_new2(&h->s, cb, h, opt);
        nghttp2_option_del(opt);
    }
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) {
        free(h);
        return NULL;
    }
    /* a stream window holds one whole message, so a call never waits for a WINDOW_UPDATE */
    uint64_t sw = (uint64_t)h->o.max_message + 5;
    uint32_t stream_window = sw < 65535 ? 65535 : sw > INT32_MAX ? INT32_MAX : (uint32_t)sw;
    uint32_t conn_window = stream_window > SL_H2_CONN_WINDOW ? stream_window : SL_H2_CONN_WINDOW;
    nghttp2_settings_entry iv[4] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, h->o.max_streams},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, h->o.max_header_list},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, stream_window},
        {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
    };
    nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, 4);
    /* The connection window: many small calls in flight at once, and the bound on the
     * bytes held for undecided calls. */
    nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, (int32_t)conn_window);
    return h;
}

void sl_h2_destroy(sl_h2 *h) {
    if (h == NULL) return;
    nghttp2_session_del(h->s); /* does not call stream close callbacks */
    while (h->active) {
        h2_stream *st = h->active;
        h->active = st->next;
        if (st->waiting && h->o.forget != NULL) h->o.forget(h->o.owner, st); /* never delivered */
        app_gone(h, st);
        stream_free_mem(st);
    }
    while (h->pool) {
        h2_stream *st = h->pool;
        h->pool = st->next;
        stream_free_mem(st);
    }
    free(h);
}

int sl_h2_feed(sl_h2 *h, const uint8_t *in, size_t len, const sl_grpc_env *env) {
    if (h->fatal) return -1;
    h->env = env;
    ssize_t n = nghttp2_session_mem_recv(h->s, in, len);
    h->env = NULL;
    if (n < 0) {
        h->fatal = true;
        /* a GOAWAY for the peer when nghttp2 can still frame one */
        if (n != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
            nghttp2_session_terminate_session(h->s, NGHTTP2_PROTOCOL_ERROR);
        return -1;
    }
    return 0;
}

size_t sl_h2_send(sl_h2 *h, uint8_t *dst, size_t cap) {
    size_t off = 0;
    while (off < cap) {
        if (h->pend_len == 0) {
            const uint8_t *p = NULL;
            ssize_t n = nghttp2_session_mem_send(h->s, &p);
            if (n <= 0) {
                if (n < 0) h->fatal = true;
                break;
            }
            h->pend = p;
            h->pend_len = (size_t)n;
        }
        size_t k = h->pend_len < cap - off ? h->pend_len : cap - off;
        memcpy(dst + off, h->pend, k);
        h->pend += k;
        h->pend_len -= k;
        off += k;
    }
    return off;
}

static void final_goaway(sl_h2 *h) {
    h->goaway_sent = true;
    nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->s),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

void sl_h2_tick(sl_h2 *h, const sl_grpc_env *env) {
    if (h->notice_sent && !h->goaway_sent && !h->fatal &&
        env->mono_ns - h->notice_ns >= SL_H2_GOAWAY_GRACE_NS)
        final_goaway(h);
    if (h->ndeadlines == 0) return;
    h->env = env;
    for (h2_stream *st = h->active; st != NULL; st = st->next)
        if (!st->answered && st->deadline_ns != 0 && env->mono_ns >= st->deadline_ns) {
            if (st->streaming)
                sl_h2_stream_close(h, st, SL_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
            else
                reply_status(h, st, 200, SL_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
        }
    h->env = NULL;
}

/* Why two steps: a client may have calls on the wire when the server decides to stop;
 * a GOAWAY naming the last stream seen would refuse them. The notice tells the client to
 * open no more streams, and the final GOAWAY, a grace later (well above a loopback or
 * in-datacenter round trip), names the last stream that really arrived. */
void sl_h2_goaway(sl_h2 *h, int64_t now_ns) {
    if (h->goaway_sent || h->fatal) return;
    if (!h->notice_sent) {
        h->notice_sent = true;
        h->notice_ns = now_ns;
        if (nghttp2_submit_shutdown_notice(h->s) != 0) final_goaway(h);
        return;
    }
    if (now_ns - h->notice_ns >= SL_H2_GOAWAY_GRACE_NS) final_goaway(h);
}

void sl_h2_complete(sl_h2 *h, void *call, const sl_grpc_reply *r) {
    /* a call that went away was forgotten by its owner, which then completes nothing */
    h2_stream *st = call;
    if (h->fatal || !st->waiting || st->answered) return;
    st->waiting = false;
    h->nwaiting--;
    answer(h, st, r);
}

size_t sl_h2_waiting(const sl_h2 *h) { return h->nwaiting; }

bool sl_h2_alive(const sl_h2 *h) {
    if (h->pend_len > 0) return true;
    if (h->fatal) return nghttp2_session_want_write(h->s) != 0;
    return nghttp2_session_want_read(h->s) || nghttp2_session_want_write(h->s);
}

size_t sl_h2_open_calls(const sl_h2 *h) { return h->nactive; }

int64_t sl_h2_next_deadline(const sl_h2 *h) {
    int64_t d = 0;
    if (h->notice_sent && !h->goaway_sent && !h->fatal) d = h->notice_ns + SL_H2_GOAWAY_GRACE_NS;
    if (h->ndeadlines == 0) return d;
    for (const h2_stream *st = h->active; st != NULL; st = st->next)
        if (!st->answered && st->deadline_ns != 0 && (d == 0 || st->deadline_ns < d))
            d = st->deadline_ns;
    return d;
}

/* ---- small protocol helpers --------------------------------------------------------- */

int64_t sl_grpc_parse_timeout(const char *v, size_t len) {
    if (len < 2 || len > 9) return -1;
    int64_t n = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        n = n * 10 + (v[i] - '0');
    }
    int64_t mul;
    switch (v[len - 1]) {
    case 'H': mul = 3600 * SLUICE_NS_PER_S; break;
    case 'M': mul = 60 * SLUICE_NS_PER_S; break;
    case 'S': mul = SLUICE_NS_PER_S; break;
    case 'm': mul = SLUICE_NS_PER_MS; break;
    case 'u': mul = 1000; break;
    case 'n': mul = 1; break;
    default: return -1;
    }
    /* 8 digits of hours overflow int64 nanoseconds: saturate (an endless deadline) */
    if (n > INT64_MAX / mul) return INT64_MAX;
    return n * mul;
}

size_t sl_grpc_pct_encode(const char *in, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    if (cap == 0) return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        if (*p >= 0x20 && *p <= 0x7e && *p != '%') {
            if (o + 1 >= cap) break;
            out[o++] = (char)*p;
        } else {
            if (o + 3 >= cap) break;
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
    return o;
}
