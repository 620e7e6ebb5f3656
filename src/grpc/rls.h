/*
 * rls.h -- Envoy's RateLimitService/ShouldRateLimit in sluice's terms, independent of the
 * encoding: a request (from protobuf or from /json's proto3 JSON) becomes an sl_request,
 * the policy engine decides it, and the answer is one status per descriptor in request
 * order plus the RateLimit/Retry-After headers and a problem+json body when over limit.
 * Return values are gRPC status codes (SL_GRPC_*); `err` explains a non-OK one.
 */
#ifndef SL_GRPC_RLS_H
#define SL_GRPC_RLS_H

#include "grpc/h2.h"
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
} sl_rls_answer;

/* Override limiters: one fixed window limiter per (requests_per_unit, unit), created on
 * first use, registered with the store, shared by every worker. */
typedef struct sl_rls_ovcache sl_rls_ovcache;
sl_rls_ovcache *sl_rls_ovcache_create(void);
void sl_rls_ovcache_destroy(sl_rls_ovcache *c);

/* Validates an unpacked request and points `out` at its strings (borrowed). */
int sl_rls_from_proto(const Envoy__Service__Ratelimit__V3__RateLimitRequest *m, sl_rls_req *out,
                      char *err, size_t errlen);
/* Decides `rq` (validated: non-empty domain, 1..16 descriptors). */
int sl_rls_decide(const sl_grpc_env *env, const sl_rls_req *rq, sl_verdict *v, sl_rls_answer *a,
                  char *err, size_t errlen);
/* The answer as a serialized RateLimitResponse; 0 when it does not fit in cap. */
size_t sl_rls_pack(const sl_rls_answer *a, uint8_t *buf, size_t cap);

/* /json: a proto3-JSON RateLimitRequest in, a proto3-JSON RateLimitResponse out (into
 * out, NUL-terminated). Returns the body length, or -1 when it does not fit; *http is
 * 200 (OK), 429 (OVER_LIMIT), 400 (bad request) or 500. */
int sl_rls_json(const sl_grpc_env *env, const char *body, size_t len, sl_verdict *v, char *out,
                size_t cap, int *http);

#endif /* SL_GRPC_RLS_H */
