/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ext_proc.h -- Envoy external processing (envoy.service.ext_proc.v3.ExternalProcessor/
 * Process) as an LLM token-budget enforcer (issue 24, docs/ai-gateway.md): one state per
 * gRPC stream (one HTTP request through Envoy). Request headers are kept; the request
 * body (BUFFERED) is parsed as an LLM request and decided (reserve) through the server's
 * hooks; a short budget clamps max_tokens (a body mutation) or refuses with an
 * ImmediateResponse 429; the response body (STREAMED) flows through src/llm/stream.c,
 * cut when its output budget is spent; the end settles from the usage, the streamed
 * estimate, or keeps the reservation. Exactly one settlement per reservation.
 * The engine and the store are the server's: this file calls them through sl_xp_hooks.
 */
#ifndef SL_GRPC_EXT_PROC_H
#define SL_GRPC_EXT_PROC_H

#include <stddef.h>

#include "api/grpc/h2.h"
#include "engine/engine.h"
#include "llm/stream.h"

#define SL_XP_PATH "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
#define SL_XP_CLAMP_HEADER "x-sluice-max-tokens-clamped"

typedef struct sl_xp_call sl_xp_call;

/* How a settlement came about (metric sluice_llm_settlements_total{result}). */
typedef enum {
    SL_XP_SETTLED_USAGE = 0,        /* the provider's usage */
    SL_XP_SETTLED_ESTIMATE,         /* from what streamed (client gone, reset) */
    SL_XP_RESERVATION_KEPT,         /* complete without usage: the reservation stands */
    SL_XP_SETTLE_KINDS
} sl_xp_settle_kind;

typedef struct sl_xp_hooks {
    /* Decides r for x: the verdict goes to sl_xp_decided, inside this call (returns 0) or
     * later from the worker's loop (returns 1); -1: not started (no engine, too many
     * waiting): sl_xp_decided is not called. */
    int (*decide)(void *owner, sl_xp_call *x, const sl_request *r);
    /* x's stream went away while its decision waits: deliver nothing. */
    void (*forget)(void *owner, sl_xp_call *x);
    /* Settles a reservation (token) to usage u, answering nobody. */
    void (*settle)(void *owner, const char *tok, size_t tl, const sl_llm_usage *u);
    /* One settlement of kind k (counted; the kept reservation is logged too, with the
     * policy name and no key). */
    void (*settled)(void *owner, sl_xp_settle_kind k, const char *policy);
    /* answer rendering flags (SL_RENDER_LEGACY) */
    unsigned (*render_flags)(void *owner);
} sl_xp_hooks;

/* The verdict of x's decision (rc as the engine's completion gives it). */
void sl_xp_decided(sl_h2 *h, sl_xp_call *x, int rc, const sl_verdict *v);

/* Rewrites the number of `max_tokens` in body (clamping), or inserts the field when the
 * request named none; the result into out (cap bytes). Returns its length, or 0 when it
 * does not fit. Exposed for tests. */
size_t sl_xp_rewrite_max_tokens(const char *body, size_t n, const sl_llm_request *rq, uint64_t value,
                                char *out, size_t cap);

#endif /* SL_GRPC_EXT_PROC_H */
