/* SPDX-License-Identifier: Apache-2.0 */
/*
 * explain_api.c -- POST /v1/explain and the server side of SL.EXPLAIN: the engine's
 * explanation of a request (src/engine/explain.c) with the windows' state read through
 * the store (a peek, answered later with Redis). Explain counts nothing (no metrics, no
 * hot keys, no decision log) and consumes nothing.
 * Lifetime: the explanation (heap, it holds the peek's verdict) belongs to the worker's
 * slot table until the record's finish renders it, or until the record is seen reused
 * or free (its connection went away and the store's answer was dropped); the worker's
 * counters free what is left when it stops.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/explain.h"
#include "server/observe.h"
#include "server/pending.h"
#include "server/server.h"

#define TOKEN_BASE 1000 /* above any HTTP status /v1/auth keeps in status_q */

/* A free slot, reclaiming those whose record moved on without rendering them. */
static int slot_take(sl_obs_w *ow) {
    for (int i = 0; i < SL_OBS_EXPLAINS; i++) {
        sl_pending *p = ow->xs_p[i];
        if (ow->xs_x[i] != NULL && p != NULL &&
            (p->state == SL_P_FREE || p->status_q != ow->xs_tok[i])) {
            sl_explain_free(ow->xs_x[i]);
            ow->xs_x[i] = NULL;
        }
        if (ow->xs_x[i] == NULL) return i;
    }
    return -1;
}

int sl_obs_explain_start(sl_pending *p, sl_explain *x) {
    sl_worker *w = p->w;
    sl_obs_w *ow = w->obs;
    int i = ow ? slot_take(ow) : -1;
    if (i < 0) { /* every slot waits for the store: the new explanation is refused, counted */
        sl_met_inc(&w->met->explain_refused, 1);
        return -1;
    }
    if (ow->xs_next < TOKEN_BASE || ow->xs_next >= 0x7ffffff0) ow->xs_next = TOKEN_BASE;
    int tok = ++ow->xs_next;
    ow->xs_x[i] = x;
    ow->xs_p[i] = p;
    ow->xs_tok[i] = tok;
    p->status_q = tok;
    sl_pending_submit(p);
    sl_engine_decide(w->gen->engine, w->lane, sl_explain_verdict(x), sl_worker_now(w),
                     sl_pending_done, p);
    return 0;
}

char *sl_obs_explain_finish(sl_pending *p, int rc, size_t *len) {
    sl_worker *w = p->w;
    sl_obs_w *ow = w->obs;
    sl_server *s = w->srv;
    for (int i = 0; ow && i < SL_OBS_EXPLAINS; i++) {
        if (ow->xs_p[i] != p || ow->xs_tok[i] != p->status_q || ow->xs_x[i] == NULL) continue;
        sl_explain_opts o = {.raw_keys = atomic_load(&s->obs->raw_keys) != 0,
                             .hash_key = &s->obs->hkey,
                             .store = s->inner_ops ? s->inner_ops->name : "memory"};
        char *out = sl_explain_render(ow->xs_x[i], rc, &o, len);
        sl_explain_free(ow->xs_x[i]);
        ow->xs_x[i] = NULL;
        ow->xs_p[i] = NULL;
        return out;
    }
    return NULL;
}

/* ---- POST /v1/explain -------------------------------------------------------------------- */


static void finish_http(sl_pending *p, int rc, bool later) {
    sl_conn *c = p->c;
    size_t n = 0;
    char *out = sl_obs_explain_finish(p, rc, &n);
    if (out != NULL) {
        sl_http_reply(c, p->minor, 200, NULL, "application/json", out, n, !p->is_head);
        free(out);
    } else {
        sl_http_problem(c, p->minor, 500, "out of memory", 1);
    }
    if (later) sl_conn_resume(c);
}

/* The body of /v1/check: {"policy", "key", "cost"} (the explicit form) or the request's
 * attributes, at the top level or under "request" (method, path, host, client_ip, route,
 * headers, body_bytes; "cost": the request's own cost, 0 a check). */
void sl_explain_http(sl_conn *c, const sl_http_req *req) {
    sl_worker *w = c->w;
    json_error_t jerr;
    json_t *j = req->body_len ? json_loadb(req->body, req->body_len, 0, &jerr) : NULL;
    if (j == NULL || !json_is_object(j)) {
        if (j) json_decref(j);
        sl_http_problem(c, req->minor, 400, "the body must be a JSON object (the body of /v1/check)", 1);
        return;
    }
    json_t *jc = json_object_get(j, "cost");
    if (jc && (!json_is_integer(jc) || json_integer_value(jc) < 0)) {
        json_decref(j);
        sl_http_problem(c, req->minor, 400, "\"cost\" must be a non-negative integer", 1);
        return;
    }
    const sl_engine *e = w->gen->engine;
    sl_explain *x;
    sl_str pol = sl_http_json_str(j, "policy");
    if (pol.p != NULL) {
        sl_str key = sl_http_json_str(j, "key");
        if (key.p == NULL || strlen(pol.p) != pol.len) {
            json_decref(j);
            sl_http_problem(c, req->minor, 400, "\"key\" (a string) is required with \"policy\"", 1);
            return;
        }
        x = sl_explain_named(e, pol.p, key.p, key.len, jc != NULL,
                             jc ? (uint64_t)json_integer_value(jc) : 0);
    } else {
        sl_request r;
        sl_header hdrs[SL_HTTP_MAX_HEADERS];
        sl_http_json_request(j, &r, hdrs);
        if (jc) r.hits_addend = r.cost = (uint64_t)json_integer_value(jc), r.has_cost = true;
        x = sl_explain_request(e, &r);
    }
    json_decref(j); /* the explanation copied what it needs */
    if (x == NULL) {
        sl_http_problem(c, req->minor, 500, "out of memory", 1);
        return;
    }
    sl_pending *p = sl_pending_get(w, c, finish_http);
    if (p == NULL) {
        sl_explain_free(x);
        sl_http_problem(c, req->minor, 503, "too many requests are waiting for the store", 1);
        return;
    }
    p->minor = req->minor;
    p->is_head = false;
    if (sl_obs_explain_start(p, x) != 0) {
        sl_explain_free(x);
        sl_pending_put(p);
        sl_http_problem(c, req->minor, 503, "too many explanations in progress on this worker", 1);
        return;
    }
    if (sl_pending_park(p)) c->suspended = true;
}
