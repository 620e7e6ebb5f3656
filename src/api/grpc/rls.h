/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls.h -- Envoy's RateLimitService/ShouldRateLimit in sluice's terms, independent of the
 * encoding: a request (from protobuf or from /json's proto3 JSON) becomes an sl_request,
 * the policy engine decides it, and the answer is one status per descriptor in request
 * order plus the RateLimit/Retry-After headers and a problem+json body when over limit.
 * Return values are gRPC status codes (SL_GRPC_*); `err` explains a non-OK one.
 */
#ifndef SL_GRPC_RLS_H
#define SL_GRPC_RLS_H

#include "api/grpc/h2.h"
#include "rls.pb-c.h"

#define SL_RLS_MAX_ENTRIES 256 /* entries across the descriptors of one request */

/* RateLimitResponse.Code */
#define SL_RLS_OK 1
#define SL_RLS_OVER_LIMIT 2

typedef struct sl_rls_override {
    bool set;
    uint32_t requests_per_unit;
    int unit;                  /* envoy.type.v3.RateLimitUnit: 1 second .. 6 year */
} sl_rls_override;

typedef struct sl_rls_req {
    sl_request r;              /* domain, descriptors, hits_addend */
    sl_descriptor d[SL_MAX_DESCRIPTORS];
    sl_rls_override ov[SL_MAX_DESCRIPTORS];
    sl_entry e[SL_RLS_MAX_ENTRIES];
} sl_rls_req;

typedef struct sl_rls_status {
    int code;                  /* SL_RLS_OK / SL_RLS_OVER_LIMIT */
    bool has_limit;            /* current_limit present */
    uint32_t requests_per_unit;
    int unit;                  /* RateLimitResponse.RateLimit.Unit (WEEK = 7) */
    const char *name;          /* current_limit.name, "" for none */
    uint32_t remaining;
    int64_t reset_ns;          /* duration_until_reset; 0 = absent */
} sl_rls_status;

#define SL_RLS_MAX_HEADERS 8

/* envoy compat: one rule's hits of a call, for envoyproxy/ratelimit's statistics
 * (src/server/envoy_stats.c). */
typedef struct sl_rls_rule_hits {
    const char *path;          /* statistics path (raw; sanitised when emitted), in the verdict */
    size_t path_len;
    uint64_t hits;             /* the hits this call added */
    uint64_t before, after;    /* the counter before and after them */
    uint32_t limit;            /* requests_per_unit */
    bool local;                /* answered by the local over-limit cache */
    bool shadow;               /* shadow_mode rule */
} sl_rls_rule_hits;

#define SL_RLS_MD_MAX 4096     /* dynamic metadata (a google.protobuf.Struct), bytes */

typedef struct sl_rls_answer {
    int overall;
    size_t n;
    sl_rls_status st[SL_MAX_DESCRIPTORS];
    size_t nh;
    struct {
        const char *key, *value;
    } h[SL_RLS_MAX_HEADERS];
    char hbuf[4096];           /* rendered header lines (h[] points into it) */
    char body[1024];           /* problem+json when over limit */
    size_t body_len;
    /* envoy compat mode (sl_rls_answer_ex): what statistics and the encoding need */
    bool compat;
    bool global_shadow;        /* SHADOW_MODE turned OVER_LIMIT into OK */
    bool store_error;          /* answered UNAVAILABLE: the store failed */
    size_t nrules;
    sl_rls_rule_hits rules[SLUICE_MAX_ITEMS];
    size_t md_len;             /* dynamic_metadata, serialized Struct (0 = none) */
    uint8_t md[SL_RLS_MD_MAX];
    const char *notfound;      /* a domain no file configures (domain_not_found), or NULL */
    size_t notfound_len, notfound_n;
} sl_rls_answer;

/* What a call keeps between its decision and its answer in envoy compat mode (the gRPC
 * continuation holds it): items the local over-limit cache answered (moved past v->n, so
 * the store never sees them) and the request's part of the dynamic metadata. */
#define SL_RLS_CALL_MD 1536
typedef struct sl_rls_call {
    uint8_t nlocal;
    uint8_t notfound_n;        /* descriptors asked of a domain no file configures */
    uint8_t notfound_len;
    char notfound[120];        /* that domain (statistics; cut at 120 bytes) */
    uint16_t md_len;
    uint8_t md[SL_RLS_CALL_MD];
} sl_rls_call;

/* Validates an unpacked request and points `out` at its strings (borrowed). */
int sl_rls_from_proto(const Envoy__Service__Ratelimit__V3__RateLimitRequest *m, sl_rls_req *out,
                      char *err, size_t errlen);
/* Descriptor i's override (rq->ov[i]) as the engine reads it (sl_descriptor.has_limit). */
void sl_rls_override_apply(sl_rls_req *rq, size_t i);
/* Prepares the engine's decision of `rq` (validated: non-empty domain, 1..16 descriptors)
 * into v; a gRPC status (an unknown override unit is INVALID_ARGUMENT). */
int sl_rls_prepare(const sl_engine *e, const sl_rls_req *rq, sl_verdict *v, char *err,
                   size_t errlen);
/* The answer of a decided verdict (rc: the engine's completion) for nd descriptors. */
int sl_rls_answer_of(const sl_verdict *v, int rc, size_t nd, unsigned render_flags,
                     sl_rls_answer *a, char *err, size_t errlen);

/* ---- envoyproxy/ratelimit compat mode (the engine's config has settings.envoy.compat) */

/* Whether e answers as envoyproxy/ratelimit. */
bool sl_rls_compat(const sl_engine *e);
/* After sl_rls_prepare, before the decision: the local over-limit cache
 * (LOCAL_CACHE_SIZE_IN_BYTES) and the request's part of the dynamic metadata
 * (RESPONSE_DYNAMIC_METADATA) into call. Nothing when e is not in compat mode. */
void sl_rls_compat_prepare(const sl_engine *e, const sl_rls_req *rq, sl_verdict *v,
                           sluice_time now, sl_rls_call *call);
/* sl_rls_answer_of, with the call's compat state (NULL: none): in compat mode the answer
 * is envoyproxy/ratelimit's (statuses from each rule's count, duration_until_reset on
 * every status, quota_mode, SHADOW_MODE, its headers when enabled, no body, a store
 * failure answered UNAVAILABLE unless every rule says on_store_error). */
int sl_rls_answer_ex(const sl_verdict *v, int rc, size_t nd, unsigned render_flags,
                     const sl_rls_call *call, sl_rls_answer *a, char *err, size_t errlen);
/* In compat mode, the verdict's action made to agree with the answer (metrics, logs):
 * REJECT when the overall code is OVER_LIMIT, else ALLOW. */
void sl_rls_compat_verdict(sl_verdict *v, int status, const sl_rls_answer *a);
/* The answer as a serialized RateLimitResponse; 0 when it does not fit in cap. */
size_t sl_rls_pack(const sl_rls_answer *a, uint8_t *buf, size_t cap);

/* For tests and tools: decisions over an engine whose store answers at once (`lane` is
 * the memory store the engine was created on). */
typedef struct sl_rls_sync {
    const sl_engine *engine;
    void *lane;
    sluice_time now;
    unsigned render_flags;
} sl_rls_sync;
int sl_rls_decide_sync(const sl_rls_sync *s, const sl_rls_req *rq, sl_verdict *v, sl_rls_answer *a,
                       char *err, size_t errlen);
/* The whole answer of a call, packed into out (an env->decide that never parks). */
int sl_rls_reply_sync(const sl_rls_sync *s, const sl_rls_req *rq, sl_grpc_reply *out);
int sl_rls_json_sync(const sl_rls_sync *s, const char *body, size_t len, sl_verdict *v, char *out,
                     size_t cap, int *http);

/* /json: a proto3-JSON RateLimitRequest into rq (its strings point into the returned
 * handle, freed with sl_rls_json_free once the verdict is prepared); *status a gRPC
 * status, err why when it is not OK. */
void *sl_rls_json_parse(const char *body, size_t len, sl_rls_req *rq, int *status, char *err,
                        size_t errlen);
void sl_rls_json_free(void *handle);
/* The proto3-JSON RateLimitResponse of an answer (status OK) or of a failed call (status
 * and err) into out (NUL-terminated). Returns the body length, or -1 when it does not
 * fit; *http is 200 (OK), 429 (OVER_LIMIT), 400 (bad request) or 500. */
int sl_rls_json_render(int status, const char *err, const sl_rls_answer *a, char *out,
                       size_t cap, int *http);

#endif /* SL_GRPC_RLS_H */
