/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pending.h -- a request's continuation while its store answers: the verdict the engine
 * fills, the connection (or gRPC call) the answer goes to, what the protocol needs to
 * write it, and the config generation it was decided with (held while it waits).
 * Records come from a per-worker pool (bounded; allocated in chunks on first need, never
 * on the decision path once warm). With the memory store a record is taken and given
 * back within the call; with Redis it waits until the answer is handled from the
 * worker's loop.
 */
#ifndef SL_SERVER_PENDING_H
#define SL_SERVER_PENDING_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "api/grpc/rls.h"

struct sl_conn;
struct sl_worker;
struct sl_gen;
struct sl_pending;

/* Writes the answer. `later`: false when the store answered inside the call that started
 * the decision (write where the handler is), true when it runs from the worker's loop
 * (the connection waits for it: it is resumed after). Not called when the connection or
 * call went away meanwhile. */
typedef void (*sl_pending_fn)(struct sl_pending *p, int rc, bool later);

typedef enum sl_pstate { SL_P_FREE = 0, SL_P_PREP, SL_P_SUBMIT, SL_P_INLINE, SL_P_PARKED, SL_P_READY } sl_pstate;

typedef struct sl_pending {
    sl_verdict v;
    struct sl_worker *w;
    struct sl_conn *c;          /* NULL once the connection went away */
    struct sl_gen *gen;         /* a reference is held while parked */
    sl_pending_fn finish;
    sl_pstate state;
    int rc;
    struct sl_pending *next;    /* free list, or the worker's ready queue */
    struct sl_pending *cprev, *cnext; /* the connection's parked records */
    /* protocol data, copied out of the request (its bytes may move meanwhile) */
    int minor;
    bool is_head, close_after;
    int status_q;               /* /v1/auth?status=NNN, 0 = none */
    unsigned op;                /* token operation, command kind */
    char text[256];             /* policy name (RESP errors), traceparent (/v1/auth) */
    char client[48];            /* the request's client address ("": unknown), for the
                                   rejection summary (rejections.c) */
    void *call;                 /* gRPC: the session's call, NULL once it went away */
    uint8_t *obuf;              /* gRPC: the call's reply buffer */
    size_t ocap;
    size_t nd;                  /* gRPC: descriptors of the request */
    void *inline_out;           /* gRPC: where an inline answer goes (sl_grpc_reply) */
    sl_rls_call rls;            /* gRPC and /json in envoy compat mode (rls.c) */
    sl_sitem item;              /* CL.THROTTLE */
    sl_sresult sres;
} sl_pending;

/* A record for a decision of connection c (NULL when the worker has `max` waiting: the
 * caller answers as the store being unavailable). */
sl_pending *sl_pending_get(struct sl_worker *w, struct sl_conn *c, sl_pending_fn finish);
/* Gives back a record that was never submitted. */
void sl_pending_put(sl_pending *p);
/* Call before starting the store operation whose completion is sl_pending_done. */
void sl_pending_submit(sl_pending *p);
/* The engine's completion for every record (ud = the record). */
void sl_pending_done(void *ud, int rc, sl_verdict *v);
/* The store's completion for direct store calls (CL.THROTTLE). */
void sl_pending_store_done(void *ud, int rc, const sl_sresult *res);
/* Right after the operation was started: when it completed inline, runs finish (later =
 * false), frees the record and returns false; otherwise the record waits (holding its
 * generation, listed on its connection) and true is returned. */
bool sl_pending_park(sl_pending *p);
/* From the worker's loop: finishes the records whose answer arrived. */
void sl_worker_run_ready(struct sl_worker *w);
/* The connection closes: its waiting records answer nobody. */
void sl_pending_conn_gone(struct sl_conn *c);
/* A gRPC call went away: its record delivers nothing. */
void sl_pending_call_gone(struct sl_conn *c, void *call);
/* Frees the worker's pool (after its loop ended). Records still waiting are kept until
 * their answers come, which cannot happen any more: their memory goes with the pool. */
void sl_pending_pool_free(struct sl_worker *w);

#endif /* SL_SERVER_PENDING_H */
