/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_conn.c -- the glue between the server's connections and the gRPC session: a
 * connection whose first bytes are the HTTP/2 client preface gets a session; its read
 * buffer is fed in whole, the session's output is copied into the connection's bounded
 * write buffer (what does not fit waits inside nghttp2 until the peer reads). Each
 * ShouldRateLimit call is decided through a continuation (pending.c): answered at once,
 * or parked while its store answers, the connection's other calls going on. Also the
 * HTTP /json and /healthcheck endpoints envoyproxy/ratelimit offers, and the metrics.
 */
#include "server/grpc_conn.h"

#include <stdio.h>
#include <string.h>

#include "api/grpc/ext_proc.h"
#include "api/grpc/rls.h"
#include "server/envoy_stats.h"
#include "server/observe.h"
#include "server/pending.h"
#include "server/rejections.h"
#include "server/server.h"

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int sl_grpc_preface(const char *buf, size_t len) {
    size_t n = len < 24 ? len : 24;
    if (memcmp(buf, PREFACE, n) != 0) return 0;
    return len >= 24 ? 1 : -1;
}

static unsigned render_flags(const sl_worker *w) {
    return w->gen->legacy_headers ? SL_RENDER_LEGACY : 0;
}

/* The client address of a call for the rejection summary: the value of its first
 * `remote_address` entry (Envoy's remote_address action), else unknown. */
static void rls_client(sl_pending *p, const sl_rls_req *rq) {
    p->client[0] = '\0';
    for (size_t i = 0; i < rq->r.n_descriptors; i++)
        for (size_t k = 0; k < rq->r.descriptors[i].n; k++) {
            const sl_entry *en = &rq->r.descriptors[i].entries[k];
            if (en->key.len == 14 && memcmp(en->key.p, "remote_address", 14) == 0 &&
                en->value.len < sizeof(p->client)) {
                memcpy(p->client, en->value.p, en->value.len);
                p->client[en->value.len] = '\0';
                return;
            }
        }
}

/* The answer of a decided call, packed into its reply buffer. */
static void answer(sl_pending *p, int rc, sl_grpc_reply *out) {
    static _Thread_local sl_rls_answer ans;
    sl_worker *w = p->w;
    out->status = sl_rls_answer_ex(&p->v, rc, p->nd, render_flags(w), &p->rls, &ans,
                                   out->message, sizeof(out->message));
    sl_rls_compat_verdict(&p->v, out->status, &ans); /* envoy compat: the answer decides */
    sl_rej_client_set(p->client, strlen(p->client));
    sl_server_count_verdict(w, rc, &p->v);
    sl_rej_client_set(NULL, 0);
    if (ans.compat) sl_envoy_stats_count(w, out->status, &ans);
    if (out->status == SL_GRPC_OK) {
        out->len = sl_rls_pack(&ans, out->buf, out->cap);
        if (out->len == 0) {
            out->status = SL_GRPC_RESOURCE_EXHAUSTED;
            snprintf(out->message, sizeof(out->message), "response too large");
        }
    }
}

static void pull_output(sl_conn *c, sl_h2 *h);

static void finish_grpc(sl_pending *p, int rc, bool later) {
    if (!later) {
        answer(p, rc, p->inline_out);
        return;
    }
    sl_conn *c = p->c;
    if (p->call == NULL || c->h2 == NULL) return; /* the call went away meanwhile */
    sl_grpc_reply r = {.status = SL_GRPC_OK, .buf = p->obuf, .cap = p->ocap};
    answer(p, rc, &r);
    sl_grpc_count_status(c->w, r.status);
    sl_h2_complete(c->h2, p->call, &r);
    pull_output(c, c->h2);
    if (!sl_h2_alive(c->h2)) c->close_after = true;
    sl_conn_flush_later(c); /* one write per connection per loop turn */
}

/* env->decide: a continuation for the call, the engine's decision through the worker's
 * store lane; 0 when answered now (*out filled), 1 when parked. */
static int grpc_decide(void *ud, void *call, const sl_rls_req *rq, sl_grpc_reply *out) {
    sl_conn *c = ud;
    sl_worker *w = c->w;
    sl_pending *p = sl_pending_get(w, c, finish_grpc);
    if (p == NULL) {
        out->status = SL_GRPC_UNAVAILABLE;
        snprintf(out->message, sizeof(out->message), "too many calls are waiting for the store");
        return 0;
    }
    const sl_engine *e = w->gen->engine;
    int st = sl_rls_prepare(e, rq, &p->v, out->message, sizeof(out->message));
    if (st != SL_GRPC_OK) {
        out->status = st;
        sl_server_count_verdict(w, p->v.run.prep_rc ? p->v.run.prep_rc : SLUICE_EINVAL, &p->v);
        sl_pending_put(p);
        return 0;
    }
    p->call = call;
    p->obuf = out->buf;
    p->ocap = out->cap;
    p->nd = rq->r.n_descriptors;
    p->inline_out = out;
    rls_client(p, rq);
    sl_rls_compat_prepare(e, rq, &p->v, sl_worker_now(w), &p->rls);
    sl_pending_submit(p);
    sl_engine_decide(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (!sl_pending_park(p)) return 0;
    p->inline_out = NULL;
    return 1;
}

/* A parked call the session dropped (reset by the client, deadline, connection end). */
static void grpc_forget(void *owner, void *call) { sl_pending_call_gone(owner, call); }

static void on_status(void *ud, int status) {
    sl_worker *w = ((sl_conn *)ud)->w;
    sl_grpc_count_status(w, status);
    /* envoy compat: a request refused before its decision is upstream's service_error */
    if (status == SL_GRPC_INVALID_ARGUMENT && w->gen != NULL && sl_rls_compat(w->gen->engine))
        sl_envoy_stats_service_error(w);
}

static bool compat_healthy(sl_conn *c);

static void env_of(sl_conn *c, sl_grpc_env *env) {
    sl_worker *w = c->w;
    sl_server *s = w->srv;
    memset(env, 0, sizeof(*env));
    env->engine = w->gen ? w->gen->engine : NULL;
    env->mono_ns = w->now_ns;
    env->draining = atomic_load_explicit(&s->draining, memory_order_relaxed) != 0;
    /* envoy compat: grpc.health.v1 says what /healthcheck says, as upstream's checker */
    if (!env->draining && w->gen != NULL && sl_rls_compat(w->gen->engine) && !compat_healthy(c))
        env->draining = true;
    env->decide = grpc_decide;
    env->on_status = on_status; /* not called by /json: its calls are HTTP requests */
    env->ud = c;
}

/* Copies the session's pending output into the connection, growing its buffer up to
 * the connection's bound. */
static void pull_output(sl_conn *c, sl_h2 *h) {
    for (;;) {
        if (sl_conn_reserve(c, 16384) != 0) {
            if (c->wcap - c->wlen == 0) return; /* full: the rest waits in nghttp2 */
        }
        size_t n = sl_h2_send(h, (uint8_t *)c->wbuf + c->wlen, c->wcap - c->wlen);
        if (n == 0) return;
        c->wlen += n;
    }
}


/* ---- ext_proc (issue 24): the engine and the store behind api/grpc/ext_proc.c ---- */

#define XP_KINDS SL_XP_SETTLE_KINDS
static _Atomic uint64_t xp_settled[SL_MAX_WORKERS][XP_KINDS];

/* A decision whose stream went away before its verdict came: nothing was forwarded, so
 * what it reserved is given back (a usage of no tokens; the request still counts). */
static void xp_orphan(sl_pending *p, int rc);

static void finish_xp(sl_pending *p, int rc, bool later) {
    sl_conn *c = p->c;
    sl_server_count_verdict(p->w, rc, &p->v);
    if (p->call == NULL || c == NULL || c->h2 == NULL) {
        xp_orphan(p, rc);
        return;
    }
    sl_xp_decided(c->h2, p->call, rc, &p->v);
    if (!later) return; /* inline: the feed that started it pulls the output */
    pull_output(c, c->h2);
    if (!sl_h2_alive(c->h2)) c->close_after = true;
    sl_conn_flush_later(c);
}

static int xp_decide(void *owner, sl_xp_call *x, const sl_request *r) {
    sl_conn *c = owner;
    sl_worker *w = c->w;
    if (w->gen == NULL || w->gen->engine == NULL) return -1;
    sl_pending *p = sl_pending_get(w, c, finish_xp);
    if (p == NULL) return -1;
    const sl_engine *e = w->gen->engine;
    p->call = x;
    p->client[0] = '\0';
    sl_engine_prepare(e, r, &p->v);
    sl_pending_submit(p);
    sl_engine_decide(e, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    return sl_pending_park(p) ? 1 : 0;
}

static void xp_forget(void *owner, sl_xp_call *x) { sl_pending_call_gone(owner, x); }

static void finish_xp_settle(sl_pending *p, int rc, bool later) {
    (void)later;
    sl_server_count_settle(p->w, rc, &p->v);
}

/* Fire and forget: the record answers nobody (no connection), so a settle survives the
 * stream and the connection that asked for it. */
static void xp_settle_on(sl_worker *w, const char *tok, size_t tl, const sl_llm_usage *u) {
    if (w->gen == NULL || w->gen->engine == NULL) return;
    sl_pending *p = sl_pending_get(w, NULL, finish_xp_settle);
    if (p == NULL) return; /* refused (counted): the reservation stands until it expires */
    p->op = SL_TOKEN_SETTLE;
    sl_pending_submit(p);
    sl_engine_token_usage(w->gen->engine, w->lane, tok, tl, SL_TOKEN_SETTLE, u, sl_worker_now(w), &p->v,
                          sl_pending_done, p);
    (void)sl_pending_park(p);
}

static void xp_settle(void *owner, const char *tok, size_t tl, const sl_llm_usage *u) {
    xp_settle_on(((sl_conn *)owner)->w, tok, tl, u);
}

static void xp_orphan(sl_pending *p, int rc) {
    sl_verdict *v = &p->v;
    if (rc != 0 || (v->action != SL_ALLOW && v->action != SL_DELAY) || !sl_verdict_needs_token(v)) return;
    char tok[SL_TOKEN_MAX + 1];
    int tl = sl_verdict_token(v, tok, sizeof(tok));
    if (tl <= 0) return;
    sl_llm_usage u = {.have = SL_LLM_U_PROMPT | SL_LLM_U_COMPLETION};
    xp_settle_on(p->w, tok, (size_t)tl, &u);
}

static void xp_settled_count(void *owner, sl_xp_settle_kind k, const char *policy) {
    sl_worker *w = ((sl_conn *)owner)->w;
    if (w->id < SL_MAX_WORKERS && (unsigned)k < XP_KINDS) sl_met_inc(&xp_settled[w->id][k], 1);
    if (k == SL_XP_RESERVATION_KEPT) {
        sl_log *log = w->srv->obs ? w->srv->obs->log : NULL;
        SL_LOG(log, SL_LOG_INFO, "llm_reservation_kept",
               "an LLM response ended without a usage: its reservation stands",
               SL_LOG_STR("policy", policy ? policy : ""));
    }
}

static unsigned xp_render_flags(void *owner) { return render_flags(((sl_conn *)owner)->w); }

static const sl_xp_hooks xp_hooks = {
    .decide = xp_decide,
    .forget = xp_forget,
    .settle = xp_settle,
    .settled = xp_settled_count,
    .render_flags = xp_render_flags,
};

int sl_grpc_conn_feed(sl_conn *c, sl_h2 **hp) {
    if (*hp == NULL) {
        sl_h2_opts o = {.forget = grpc_forget, .owner = c, .xp = &xp_hooks};
        *hp = sl_h2_create(&o);
        if (*hp == NULL) {
            c->close_after = true;
            c->rlen = 0;
            return -1;
        }
    }
    sl_grpc_env env;
    env_of(c, &env);
    int rc = sl_h2_feed(*hp, (const uint8_t *)c->rbuf, c->rlen, &env);
    c->rlen = 0;
    pull_output(c, *hp);
    if (rc != 0 || !sl_h2_alive(*hp)) c->close_after = true;
    return rc;
}

void sl_grpc_conn_output(sl_conn *c, sl_h2 *h) {
    pull_output(c, h);
    if (!sl_h2_alive(h)) c->close_after = true;
}

void sl_grpc_conn_tick(sl_conn *c, sl_h2 *h) {
    int64_t d = sl_h2_next_deadline(h);
    if (d == 0 || d > c->w->now_ns) {
        /* a drained session finishes between reads: its last output went out on an
         * earlier tick, and nothing will read from it again */
        if (!sl_h2_alive(h)) c->close_after = true;
        return;
    }
    sl_grpc_env env;
    env_of(c, &env);
    sl_h2_tick(h, &env);
    pull_output(c, h);
    if (!sl_h2_alive(h)) c->close_after = true;
}

void sl_grpc_conn_drain(sl_conn *c, sl_h2 *h) {
    sl_h2_goaway(h, c->w->now_ns);
    pull_output(c, h);
    if (!sl_h2_alive(h)) c->close_after = true;
}

void sl_grpc_conn_free(sl_h2 *h) { sl_h2_destroy(h); }

/* ---- HTTP endpoints of envoyproxy/ratelimit ---- */

static void http_reply(sl_conn *c, const sl_http_req *req, int status, const char *ctype,
                       const char *body, size_t len) {
    if (sl_conn_reserve(c, len + 512) != 0) {
        c->close_after = true;
        return;
    }
    sl_wbuf wb;
    sl_conn_wbuf(c, &wb);
    sl_http1_begin(&wb, req->minor, status);
    sl_wbuf_puts(&wb, "Server: sluice\r\n");
    sl_http1_end(&wb, !c->close_after, req->minor, ctype, body, len, 1);
    if (wb.overflow) c->close_after = true;
    sl_conn_commit(c, &wb);
}

static void json_reply(sl_conn *c, int minor, int status, const char *err, const sl_rls_answer *a) {
    static _Thread_local char out[32768];
    int http = 500;
    int n = sl_rls_json_render(status, err, a, out, sizeof(out), &http);
    sl_http_req req = {.minor = minor};
    if (n < 0) {
        static const char e[] = "{\"code\":13,\"message\":\"response too large\"}";
        http_reply(c, &req, 500, "application/json", e, sizeof(e) - 1);
        return;
    }
    http_reply(c, &req, http, "application/json", out, (size_t)n);
}

static void finish_json(sl_pending *p, int rc, bool later) {
    static _Thread_local sl_rls_answer ans;
    sl_conn *c = p->c;
    char err[160] = "";
    int st = sl_rls_answer_ex(&p->v, rc, p->nd, render_flags(c->w), &p->rls, &ans, err, sizeof(err));
    sl_rls_compat_verdict(&p->v, st, &ans);
    sl_rej_client_set(p->client, strlen(p->client));
    sl_server_count_verdict(c->w, rc, &p->v);
    sl_rej_client_set(NULL, 0);
    if (ans.compat) sl_envoy_stats_count(c->w, st, &ans);
    json_reply(c, p->minor, st, err, &ans);
    if (later) sl_conn_resume(c);
}

void sl_grpc_http_json(sl_conn *c, const sl_http_req *req) {
    static _Thread_local sl_rls_req rq;
    sl_worker *w = c->w;
    char err[160] = "";
    int st = SL_GRPC_OK;
    void *root = sl_rls_json_parse(req->body ? req->body : "", req->body_len, &rq, &st, err, sizeof(err));
    sl_pending *p = NULL;
    if (st == SL_GRPC_OK && (p = sl_pending_get(w, c, finish_json)) == NULL) {
        st = SL_GRPC_UNAVAILABLE;
        snprintf(err, sizeof(err), "too many requests are waiting for the store");
    }
    if (st == SL_GRPC_OK) st = sl_rls_prepare(w->gen ? w->gen->engine : NULL, &rq, &p->v, err, sizeof(err));
    if (st == SL_GRPC_OK) sl_rls_compat_prepare(w->gen->engine, &rq, &p->v, sl_worker_now(w), &p->rls);
    if (st == SL_GRPC_OK) rls_client(p, &rq); /* before the strings it borrows are freed */
    sl_rls_json_free(root); /* the verdict (and p->rls) hold what it needs */
    if (st != SL_GRPC_OK) {
        if (p != NULL) sl_pending_put(p);
        json_reply(c, req->minor, st, err, NULL);
        return;
    }
    p->minor = req->minor;
    p->nd = rq.r.n_descriptors;
    sl_pending_submit(p);
    sl_engine_decide(w->gen->engine, w->lane, &p->v, sl_worker_now(w), sl_pending_done, p);
    if (sl_pending_park(p)) c->suspended = true;
}

/* envoyproxy/ratelimit's health: unhealthy until its store has answered once (and while
 * it is down, with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION), with no domain loaded when
 * HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, and from SIGTERM on. */
static bool compat_healthy(sl_conn *c) {
    sl_server *s = c->w->srv;
    const sl_envoy_settings *es = &sl_config_settings(c->w->gen->cfg)->envoy;
    bool ready = sl_server_store_ready(s);
    if (ready) atomic_store(&s->store_seen, true);
    if (!atomic_load(&s->store_seen) || (es->health_active_conn && !ready)) return false;
    return !es->healthy_with_config || sl_config_domain_count(c->w->gen->cfg) > 0;
}

void sl_grpc_http_healthcheck(sl_conn *c, const sl_http_req *req) {
    bool draining = atomic_load(&c->w->srv->draining) != 0;
    if (!draining && c->w->gen != NULL && sl_rls_compat(c->w->gen->engine) && !compat_healthy(c))
        http_reply(c, req, 500, "text/plain", "", 0);
    else if (draining)
        http_reply(c, req, 500, "text/plain", "draining", 8);
    else
        http_reply(c, req, 200, "text/plain", "OK", 2);
}

/* ---- metrics ---- */

#define GRPC_CODES 17

/* Per worker slot, one writer each (the worker's thread); the scraper sums them. Kept
 * here rather than in the worker's metrics struct so gRPC adds no field to it. */
static _Atomic uint64_t grpc_calls[SL_MAX_WORKERS][GRPC_CODES];

void sl_grpc_count_status(sl_worker *w, int status) {
    if (w->id >= SL_MAX_WORKERS || status < 0 || status >= GRPC_CODES) return;
    sl_met_inc(&grpc_calls[w->id][status], 1);
}

void sl_grpc_metrics_render(const sl_server *s, sl_wbuf *out) {
    sl_wbuf_puts(out, "# HELP sluice_grpc_calls_total gRPC calls answered, by grpc-status code.\n"
                      "# TYPE sluice_grpc_calls_total counter\n");
    for (int k = 0; k < GRPC_CODES; k++) {
        uint64_t t = 0;
        for (unsigned i = 0; i < s->nworkers && i < SL_MAX_WORKERS; i++)
            t += atomic_load_explicit(&grpc_calls[i][k], memory_order_relaxed);
        if (t == 0 && k != 0) continue;
        sl_wbuf_printf(out, "sluice_grpc_calls_total{code=\"%d\"} %llu\n", k, (unsigned long long)t);
    }
    static const char *const kinds[XP_KINDS] = {"usage", "estimate", "reservation_kept"};
    sl_wbuf_puts(out, "# HELP sluice_llm_settlements_total LLM reservations ended through ext_proc, by how: "
                      "the provider's usage, an estimate of what streamed, or the reservation kept.\n"
                      "# TYPE sluice_llm_settlements_total counter\n");
    for (int k = 0; k < XP_KINDS; k++) {
        uint64_t t = 0;
        for (unsigned i = 0; i < s->nworkers && i < SL_MAX_WORKERS; i++)
            t += atomic_load_explicit(&xp_settled[i][k], memory_order_relaxed);
        sl_wbuf_printf(out, "sluice_llm_settlements_total{result=\"%s\"} %llu\n", kinds[k], (unsigned long long)t);
    }
}
