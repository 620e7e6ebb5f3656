/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc.c -- the methods this gRPC server offers and their dispatch: ShouldRateLimit
 * (envoy.service.ratelimit.v3) and grpc.health.v1.Health/Check. Request messages are
 * unpacked by protobuf-c into a per-thread bump arena (no malloc per call; a message too
 * big for the arena falls back to the heap), replies packed into the session's buffer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/grpc/h2.h"
#include "api/grpc/ext_proc.h"
#include "api/grpc/rls.h"
#include "health.pb-c.h"

#define RLS_PATH "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
#define HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"

static bool path_is(const char *p, size_t len, const char *want) {
    return len == strlen(want) && memcmp(p, want, len) == 0;
}

bool sl_grpc_known_method(const char *path, size_t len) {
    return path_is(path, len, RLS_PATH) || path_is(path, len, HEALTH_CHECK_PATH) ||
           sl_grpc_streaming_method(path, len);
}

/* ---- unpack arena ------------------------------------------------------------------- */

#define ARENA_BYTES (128u << 10)

typedef struct arena {
    size_t off;
    bool over;
    _Alignas(16) unsigned char mem[ARENA_BYTES];
} arena;

/* One arena per thread, freed when the thread exits (workers stop before the process
 * does, and a leak checker would otherwise see the block orphaned). */
static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;
static void arena_key_init(void) { (void)pthread_key_create(&arena_key, free); }

static arena *thread_arena(void) {
    pthread_once(&arena_once, arena_key_init);
    arena *a = pthread_getspecific(arena_key);
    if (a == NULL && (a = malloc(sizeof(*a))) != NULL && pthread_setspecific(arena_key, a) != 0) {
        free(a);
        a = NULL;
    }
    return a;
}

static void *arena_alloc(void *ud, size_t n) {
    arena *a = ud;
    size_t at = (a->off + 15) & ~(size_t)15;
    if (n > ARENA_BYTES || at > ARENA_BYTES - n) {
        a->over = true;
        return NULL;
    }
    a->off = at + n;
    return a->mem + at;
}

static void arena_free(void *ud, void *p) {
    (void)ud;
    (void)p;
}

/* Unpacks msg into *out; *heap tells whether it must be freed with free_unpacked. */
static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *d, const uint8_t *msg,
                                size_t len, bool *heap) {
    *heap = false;
    arena *a = thread_arena();
    if (a != NULL) {
        a->off = 0;
        a->over = false;
        ProtobufCAllocator al = {.alloc = arena_alloc, .free = arena_free, .allocator_data = a};
        ProtobufCMessage *m = protobuf_c_message_unpack(d, &al, len, msg);
        if (m != NULL || !a->over) return m;
    }
    *heap = true;
    return protobuf_c_message_unpack(d, NULL, len, msg);
}

/* ---- methods ------------------------------------------------------------------------ */

static void health_check(const sl_grpc_env *env, const uint8_t *msg, size_t len,
                         sl_grpc_reply *out) {
    bool heap;
    Grpc__Health__V1__HealthCheckRequest *rq = (Grpc__Health__V1__HealthCheckRequest *)unpack(
        &grpc__health__v1__health_check_request__descriptor, msg, len, &heap);
    if (rq == NULL) {
        out->status = SL_GRPC_INTERNAL;
        snprintf(out->message, sizeof(out->message), "cannot parse HealthCheckRequest");
        return;
    }
    const char *svc = rq->service ? rq->service : "";
    if (svc[0] != '\0' && strcmp(svc, "ratelimit") != 0) {
        out->status = SL_GRPC_NOT_FOUND;
        snprintf(out->message, sizeof(out->message), "unknown service");
    } else {
        Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status = env->draining || env->engine == NULL
                       ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                       : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        out->len = grpc__health__v1__health_check_response__pack(&r, out->buf);
    }
    if (heap) protobuf_c_message_free_unpacked(&rq->base, NULL);
}

/* Validates the request; the decision is the caller's (env->decide), which answers now
 * or parks the call. */
static int should_rate_limit(const sl_grpc_env *env, void *call, const uint8_t *msg, size_t len,
                             sl_grpc_reply *out) {
    if (env->engine == NULL || env->decide == NULL) {
        out->status = SL_GRPC_UNAVAILABLE;
        snprintf(out->message, sizeof(out->message), "no policy loaded");
        return 0;
    }
    bool heap;
    Envoy__Service__Ratelimit__V3__RateLimitRequest *m =
        (Envoy__Service__Ratelimit__V3__RateLimitRequest *)unpack(
            &envoy__service__ratelimit__v3__rate_limit_request__descriptor, msg, len, &heap);
    if (m == NULL) {
        out->status = SL_GRPC_INTERNAL;
        snprintf(out->message, sizeof(out->message), "cannot parse RateLimitRequest");
        return 0;
    }
    static _Thread_local sl_rls_req rq;
    int parked = 0;
    out->status = sl_rls_from_proto(m, &rq, out->message, sizeof(out->message));
    /* the request's strings point into m: the decision is prepared before it goes */
    if (out->status == SL_GRPC_OK) parked = env->decide(env->ud, call, &rq, out);
    if (heap) protobuf_c_message_free_unpacked(&m->base, NULL);
    return parked;
}

int sl_grpc_call(const sl_grpc_env *env, void *call, const char *path, size_t path_len,
                 const uint8_t *msg, size_t len, sl_grpc_reply *out) {
    out->status = SL_GRPC_OK;
    out->message[0] = '\0';
    out->len = 0;
    if (path_is(path, path_len, RLS_PATH)) return should_rate_limit(env, call, msg, len, out);
    if (path_is(path, path_len, HEALTH_CHECK_PATH)) {
        health_check(env, msg, len, out);
    } else {
        out->status = SL_GRPC_UNIMPLEMENTED;
        snprintf(out->message, sizeof(out->message), "unknown method");
    }
    return 0;
}
