/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pending.c -- continuations of requests whose store answers later (pending.h).
 * Lifetimes: a parked record holds a reference on the generation it was prepared with,
 * so a reload that retires that generation frees it only after the answer was written;
 * the connection lists its parked records so that closing it makes them answer nobody
 * (the store's answer still arrives and is dropped here). Everything runs on the
 * worker's thread.
 */
#include "server/pending.h"

#include <stdlib.h>
#include <string.h>

#include "server/server.h"

#define POOL_CHUNK 64

/* Why a share per connection: the records are the worker's, and one gRPC connection may
 * open 1024 streams; with a slow store a few connections would take every record and
 * every other client of the worker would be refused. A connection over its share is
 * refused its *new* request (503 / UNAVAILABLE / -ERR, counted), the others keep theirs. */
static sl_pending *refuse(sl_worker *w) {
    sl_met_inc(&w->met->pending_refused, 1);
    return NULL;
}

sl_pending *sl_pending_get(sl_worker *w, sl_conn *c, sl_pending_fn finish) {
    if (c != NULL && c->nwait >= SL_PENDING_CONN) return refuse(w);
    if (w->pfree == NULL) {
        if (w->pcount + POOL_CHUNK > w->pmax) return refuse(w);
        /* a chunk, kept until the worker stops (chunks are listed for freeing) */
        sl_pending *chunk = calloc(POOL_CHUNK + 1, sizeof(*chunk));
        if (chunk == NULL) return refuse(w);
        chunk[0].next = w->pchunks; /* the first record of a chunk links the chunks */
        w->pchunks = chunk;
        for (size_t i = POOL_CHUNK; i >= 1; i--) {
            chunk[i].next = w->pfree;
            w->pfree = &chunk[i];
        }
        w->pcount += POOL_CHUNK;
    }
    sl_pending *p = w->pfree;
    w->pfree = p->next;
    p->next = NULL;
    p->w = w;
    p->c = c;
    if (c != NULL) c->nwait++;
    p->gen = w->gen;
    p->finish = finish;
    p->state = SL_P_PREP;
    p->rc = 0;
    p->cprev = p->cnext = NULL;
    p->call = NULL;
    p->inline_out = NULL;
    p->status_q = 0;
    p->text[0] = '\0';
    return p;
}

void sl_pending_put(sl_pending *p) {
    sl_worker *w = p->w;
    if (p->c != NULL && p->c->nwait > 0) p->c->nwait--;
    p->state = SL_P_FREE;
    p->c = NULL;
    p->next = w->pfree;
    w->pfree = p;
}

void sl_pending_submit(sl_pending *p) { p->state = SL_P_SUBMIT; }

/* The answer: written now when the call that started the operation is still on the
 * stack, else queued for the worker's loop (never handled from inside the store's own
 * callback, which may be in the middle of its bookkeeping). */
static void arrived(sl_pending *p, int rc) {
    p->rc = rc;
    if (p->state == SL_P_SUBMIT) {
        p->state = SL_P_INLINE;
        return;
    }
    p->state = SL_P_READY;
    sl_worker *w = p->w;
    p->next = NULL;
    if (w->ready_tail != NULL)
        w->ready_tail->next = p;
    else
        w->ready = p;
    w->ready_tail = p;
}

void sl_pending_done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    arrived(ud, rc);
}

void sl_pending_store_done(void *ud, int rc, const sl_sresult *res) {
    sl_pending *p = ud;
    if (res != NULL) p->sres = *res;
    arrived(p, rc);
}

static void unlist(sl_pending *p) {
    sl_conn *c = p->c;
    if (c == NULL) return;
    if (p->cprev != NULL)
        p->cprev->cnext = p->cnext;
    else if (c->parked == p)
        c->parked = p->cnext;
    if (p->cnext != NULL) p->cnext->cprev = p->cprev;
    p->cprev = p->cnext = NULL;
}

bool sl_pending_park(sl_pending *p) {
    if (p->state == SL_P_INLINE) {
        p->finish(p, p->rc, false);
        sl_pending_put(p);
        return false;
    }
    /* still waiting (SL_P_SUBMIT): it will arrive from the loop */
    p->state = SL_P_PARKED;
    atomic_fetch_add_explicit(&p->gen->refs, 1, memory_order_relaxed);
    sl_conn *c = p->c;
    if (c != NULL) {
        p->cnext = c->parked;
        if (c->parked != NULL) c->parked->cprev = p;
        c->parked = p;
    }
    p->w->nparked++;
    return true;
}

void sl_worker_run_ready(sl_worker *w) {
    while (w->ready != NULL) {
        sl_pending *p = w->ready;
        w->ready = p->next;
        if (w->ready == NULL) w->ready_tail = NULL;
        unlist(p);
        sl_gen *g = p->gen;
        if (p->c != NULL) p->finish(p, p->rc, true);
        w->nparked--;
        sl_pending_put(p);
        sl_gen_release(g);
    }
}

void sl_pending_conn_gone(sl_conn *c) {
    for (sl_pending *p = c->parked, *n; p != NULL; p = n) {
        n = p->cnext;
        p->cprev = p->cnext = NULL;
        p->c = NULL;
        p->call = NULL;
    }
    c->parked = NULL;
    c->nwait = 0;
}

void sl_pending_call_gone(sl_conn *c, void *call) {
    for (sl_pending *p = c->parked; p != NULL; p = p->cnext)
        if (p->call == call) {
            p->call = NULL;
            return;
        }
}

void sl_pending_pool_free(sl_worker *w) {
    while (w->pchunks != NULL) {
        sl_pending *chunk = w->pchunks;
        w->pchunks = chunk[0].next;
        free(chunk);
    }
    w->pfree = NULL;
    w->ready = w->ready_tail = NULL;
    w->pcount = 0;
}
