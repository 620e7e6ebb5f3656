/*
 * grpc_conn.c -- the glue between the server's connections and the gRPC session: a
 * connection whose first bytes are the HTTP/2 client preface gets a session; its read
 * buffer is fed in whole, the session's output is copied into the connection's bounded
 * write buffer (what does not fit waits inside nghttp2 until the peer reads). Also the
 * HTTP /json and /healthcheck endpoints envoyproxy/ratelimit offers, and the metrics
 * hook that counts gRPC decisions like HTTP ones.
 */
#include "grpc/grpc_conn.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "grpc/rls.h"
#include "redis/bridge.h"
#include "server/server.h"

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int sl_grpc_preface(const char *buf, size_t len) {
    size_t n = len < 24 ? len : 24;
    if (memcmp(buf, PREFACE, n) != 0) return 0;
    return len >= 24 ? 1 : -1;
}

/* One override cache per process: entries name the store they were registered with, so
 * a store created later (tests, a restart in-process) never sees another's limiters. */
static pthread_once_t ov_once = PTHREAD_ONCE_INIT;
static sl_rls_ovcache *ov_cache;
static void ov_init(void) { ov_cache = sl_rls_ovcache_create(); }

void sl_grpc_fini(void) {
    if (ov_cache != NULL) sl_rls_ovcache_destroy(ov_cache);
    ov_cache = NULL;
}

/* Metrics: the same decision counters as HTTP (deciding policy x result), plus the
 * outcome of every call by gRPC status. */
static void count_decision(sl_worker *w, const sl_verdict *v) {
    sl_met_result r = SL_MET_ERROR;
    unsigned slot = 0;
    if (v != NULL) {
        if (v->deciding >= 0 && (size_t)v->deciding < v->n && v->items[v->deciding].info)
            slot = sl_gen_slot(w->gen, v->items[v->deciding].info->policy);
        if (v->action == SL_FAIL)
            r = SL_MET_ERROR;
        else if (v->action == SL_REJECT || (v->action == SL_DELAY && v->recheck))
            r = SL_MET_LIMITED;
        else if (v->store_error)
            r = SL_MET_FAIL_OPEN;
        else if (v->shadow_limited)
            r = SL_MET_SHADOW;
        else
            r = SL_MET_ALLOWED;
    }
    if (v != NULL) sl_server_count(w, slot, r);
}

static void observe(void *ud, const sl_verdict *v, int status) {
    (void)status;
    if (sl_redis_bridge_pending()) return; /* counted when the call is handled again */
    count_decision(ud, v);
}

/* With the Redis store a call waits for its answer without holding up the connection's
 * other calls: the session parks it, and sl_conn_resume hands it back. */
static const sl_h2_async redis_async = {sl_redis_bridge_enter_owned, sl_redis_bridge_leave,
                                        sl_redis_bridge_forget};

static void on_status(void *ud, int status) { sl_grpc_count_status(ud, status); }

static void env_of(sl_conn *c, sl_grpc_env *env) {
    sl_worker *w = c->w;
    sl_server *s = w->srv;
    pthread_once(&ov_once, ov_init);
    memset(env, 0, sizeof(*env));
    env->engine = w->gen ? w->gen->engine : NULL;
    env->store = s->store;
    env->ov = ov_cache;
    env->now = sl_worker_now(w); /* once per read (the server's batch time), not per call */
    env->mono_ns = w->now_ns;
    env->render_flags = s->opt.legacy_headers ? SL_RENDER_LEGACY : 0;
    env->draining = atomic_load_explicit(&s->draining, memory_order_relaxed) != 0;
    env->observe = observe;
    env->on_status = on_status; /* not called by /json: its calls are HTTP requests */
    env->ud = w;
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

int sl_grpc_conn_feed(sl_conn *c, sl_h2 **hp) {
    if (*hp == NULL) {
        sl_h2_opts o = {.async = sl_redis_bridge_enabled() ? &redis_async : NULL, .owner = c};
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

void sl_grpc_conn_resume(sl_conn *c, sl_h2 *h, void *call) {
    sl_grpc_env env;
    env_of(c, &env);
    sl_h2_resume(h, call, &env);
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

void sl_grpc_http_json(sl_conn *c, const sl_http_req *req) {
    static _Thread_local char out[32768];
    sl_grpc_env env;
    env_of(c, &env);
    int http = 500;
    int n = sl_rls_json(&env, req->body ? req->body : "", req->body_len, &c->w->verdict, out,
                        sizeof(out), &http);
    if (n < 0) {
        static const char e[] = "{\"code\":13,\"message\":\"response too large\"}";
        http_reply(c, req, 500, "application/json", e, sizeof(e) - 1);
        return;
    }
    http_reply(c, req, http, "application/json", out, (size_t)n);
}

void sl_grpc_http_healthcheck(sl_conn *c, const sl_http_req *req) {
    bool draining = atomic_load(&c->w->srv->draining) != 0;
    if (draining)
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
}
