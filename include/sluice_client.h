/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice_client.h -- libsluice's helpers for HTTP clients of a rate-limited API: read the
 * limits a server publishes (RateLimit-Policy and RateLimit of
 * draft-ietf-httpapi-ratelimit-headers-11, the older RateLimit-Limit/-Remaining/-Reset and
 * X-RateLimit-* fields, Retry-After), pace requests from them, and decide retries with
 * capped, budgeted, fully jittered exponential backoff.
 *
 * Units: times are int64_t nanoseconds. `now_ns` is the caller's monotonic clock and
 * `now_wall_ns` UTC nanoseconds since the Unix epoch (only an HTTP-date or an epoch-second
 * reset needs it). Nothing here reads a clock, sleeps, prints or does I/O: the caller
 * passes the time in and sleeps for the delays it is given. Errors are negative SLUICE_E*
 * codes (sluice.h). Strings are borrowed for the duration of a call.
 */
#ifndef SLUICE_CLIENT_H
#define SLUICE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- published limits ----------------------------------------------------------- */

#define SLUICE_CLIENT_NAME_MAX 64     /* policy names and partition keys kept (with NUL) */
#define SLUICE_CLIENT_MAX_POLICIES 16 /* policies and items kept from one response */

/* One member of RateLimit-Policy: `"burst";q=100;w=60`. */
typedef struct sluice_ratelimit_policy {
    char name[SLUICE_CLIENT_NAME_MAX];      /* the sf-string, unescaped ("" from legacy fields) */
    uint64_t quota;                         /* q: units the policy allows per window */
    char unit[32];                          /* qu: "requests" when absent */
    int64_t window_s;                       /* w: seconds; 0 when absent */
    char partition[SLUICE_CLIENT_NAME_MAX]; /* pk as its base64 text; "" when absent */
} sluice_ratelimit_policy;

/* One member of RateLimit: `"burst";r=50;t=30`. */
typedef struct sluice_ratelimit_item {
    char name[SLUICE_CLIENT_NAME_MAX];
    uint64_t remaining;                     /* r: units still available */
    int64_t reset_s;                        /* t: seconds (the effective window); -1 absent */
    char partition[SLUICE_CLIENT_NAME_MAX];
} sluice_ratelimit_item;

/* Parses one RateLimit-Policy field value (a structured-field List). Writes at most `cap`
 * policies and returns how many members were valid policies (possibly more than cap).
 * A member whose value is not a String or that lacks a valid q is skipped (the draft says
 * to ignore it); a name or pk longer than SLUICE_CLIENT_NAME_MAX-1 skips the member too.
 * Returns SLUICE_EINVAL when the value is not a valid List: the whole field must then be
 * ignored (RFC 9651: a parse failure invalidates the field). */
int sluice_ratelimit_parse_policy(const char *value, size_t len, sluice_ratelimit_policy *out,
                                  size_t cap);

/* Parses one RateLimit field value; the same rules, with r required. */
int sluice_ratelimit_parse(const char *value, size_t len, sluice_ratelimit_item *out,
                           size_t cap);

/* Retry-After (RFC 9110 10.2.3): delay-seconds, or an HTTP-date in IMF-fixdate, RFC 850 or
 * asctime form, relative to now_wall_ns (a date in the past gives 0). *delay_ns is set
 * on success; SLUICE_EINVAL for anything else (the field is then ignored). */
int sluice_client_retry_after(const char *value, size_t len, int64_t now_wall_ns,
                              int64_t *delay_ns);

/* Where the limits of one response came from (first present wins, in this order). */
typedef enum sluice_ratelimit_source {
    SLUICE_RL_NONE = 0,
    SLUICE_RL_DRAFT11 = 1,  /* RateLimit-Policy / RateLimit */
    SLUICE_RL_DRAFT03 = 2,  /* RateLimit-Limit / -Remaining / -Reset */
    SLUICE_RL_X = 3         /* X-RateLimit-* or X-Rate-Limit-* */
} sluice_ratelimit_source;

/* Everything one response said about its limits. Fill it with sluice_client_info_init,
 * one sluice_client_info_header per response header line, then sluice_client_info_finish.
 * Fields named legacy_* are the raw fallbacks, kept for the finishing step. */
typedef struct sluice_ratelimit_info {
    sluice_ratelimit_source source;
    size_t n_policies;
    sluice_ratelimit_policy policies[SLUICE_CLIENT_MAX_POLICIES];
    size_t n_items;
    sluice_ratelimit_item items[SLUICE_CLIENT_MAX_POLICIES];
    int has_retry_after;
    int64_t retry_after_ns;
    unsigned invalid;       /* SLUICE_RL_BAD_* bits: fields present but malformed (ignored) */
    /* fallbacks: [0] draft-03 RateLimit-*, [1] X-RateLimit-* */
    int legacy_has[2][3];   /* limit, remaining, reset present */
    uint64_t legacy_limit[2], legacy_remaining[2];
    int64_t legacy_window_s[2]; /* from "10, 10;w=1" in the limit field; 0 absent */
    int64_t legacy_reset_s[2];  /* delta seconds (an epoch value converted at parse) */
    int bad_policy_line, bad_item_line; /* a malformed line seen: the whole field is ignored */
} sluice_ratelimit_info;

#define SLUICE_RL_BAD_POLICY 0x1u      /* RateLimit-Policy */
#define SLUICE_RL_BAD_RATELIMIT 0x2u   /* RateLimit */
#define SLUICE_RL_BAD_RETRY_AFTER 0x4u
#define SLUICE_RL_BAD_LEGACY 0x8u      /* a draft-03 or X- field */

void sluice_client_info_init(sluice_ratelimit_info *info);
/* Feeds one header line. Names are case-insensitive; several lines of one field combine
 * as one List (RFC 9110 5.3). Recognised: RateLimit-Policy, RateLimit, RateLimit-Limit,
 * RateLimit-Remaining, RateLimit-Reset, X-RateLimit-{Limit,Remaining,Reset},
 * X-Rate-Limit-{Limit,Remaining,Reset}, Retry-After. A legacy reset of 1e9 or more is read
 * as epoch seconds (GitHub, Twitter) and 1e12 or more as epoch milliseconds, and turned
 * into a delta from now_wall_ns. Returns 1 when the header was one of these, else 0. */
int sluice_client_info_header(sluice_ratelimit_info *info, const char *name, size_t name_len,
                              const char *value, size_t value_len, int64_t now_wall_ns);
/* Resolves the sources after the last header: draft-11 fields when present, else the
 * draft-03 fields, else X-RateLimit-*, each turned into one unnamed policy and item. */
void sluice_client_info_finish(sluice_ratelimit_info *info);

/* ---- pacing ----------------------------------------------------------------------- */

/* A client-side model of the server's limits: for each published policy a token bucket
 * of q units refilled at q per w seconds, synchronised on every response with its r
 * (minus the requests still in flight), and the draft's rule that at most r units are
 * used within the next t seconds. Retry-After takes precedence over both. A 429 or 503
 * without Retry-After or t holds the next request for 1 s. Not thread-safe: one pacer per
 * client (or a lock around it). */
typedef struct sluice_client_pacer sluice_client_pacer;

sluice_client_pacer *sluice_client_pacer_create(int *err);
void sluice_client_pacer_destroy(sluice_client_pacer *p);
/* How long to wait before sending a request of `cost` units (0 = send now). Consumes
 * nothing; a cost above a policy's q waits for a full bucket, then goes. */
int64_t sluice_client_pacer_wait(const sluice_client_pacer *p, uint64_t cost, int64_t now_ns);
/* The request was sent at now_ns: its cost is taken from every known policy. */
void sluice_client_pacer_sent(sluice_client_pacer *p, uint64_t cost, int64_t now_ns);
/* The answer to one sent request arrived at now_ns (status 0: no answer, e.g. a timeout:
 * only the in-flight count changes). `info` may be NULL. */
void sluice_client_pacer_update(sluice_client_pacer *p, int status,
                                const sluice_ratelimit_info *info, int64_t now_ns);

/* ---- retrying ----------------------------------------------------------------------- */

typedef struct sluice_client_retry_options {
    int64_t base_ns;       /* backoff ceiling of the first retry; 0 = 100 ms */
    int64_t cap_ns;        /* the ceiling never grows past this; 0 = 20 s */
    unsigned max_attempts; /* attempts in all, the first included; 0 = 5 */
    int64_t budget_ns;     /* time from the first attempt within which every retry must
                              start; 0 = 30 s */
    /* Uniform 64-bit random numbers (tests inject a seeded one); NULL = a generator seeded
     * from getrandom(2) at create. */
    uint64_t (*random)(void *ctx);
    void *random_ctx;
} sluice_client_retry_options;

typedef enum sluice_client_retry_verdict {
    SLUICE_CLIENT_RETRY = 0,          /* wait *delay_ns, then send again */
    SLUICE_CLIENT_DONE = 1,           /* the status is not one to retry (success included) */
    SLUICE_CLIENT_NOT_IDEMPOTENT = 2, /* retryable status, but repeating it is not safe */
    SLUICE_CLIENT_NO_ATTEMPTS = 3,    /* max_attempts used */
    SLUICE_CLIENT_NO_BUDGET = 4       /* the next attempt would start after the budget */
} sluice_client_retry_verdict;

typedef struct sluice_client_retry sluice_client_retry;

/* NULL options = the defaults. SLUICE_EINVAL for negative times. */
sluice_client_retry *sluice_client_retry_create(const sluice_client_retry_options *opt, int *err);
void sluice_client_retry_destroy(sluice_client_retry *r);
/* Starts one logical request, whose first attempt is sent at now_ns. `idempotent`: the
 * method is idempotent (sluice_client_is_idempotent) or the request carries an
 * idempotency key (Idempotency-Key), so sending it twice does no harm. */
void sluice_client_retry_start(sluice_client_retry *r, int idempotent, int64_t now_ns);
/* After an attempt answered `status` (0 = no answer: connection failure or timeout) with
 * Retry-After `retry_after_ns` (-1 when absent), at now_ns. Retried: 0, 408, 429, 502,
 * 503, 504. On SLUICE_CLIENT_RETRY *delay_ns is the wait: retry_after (when given) plus a
 * uniform draw from [0, min(cap, base * 2^(retries so far), time left in the budget after
 * retry_after)] ("full jitter"). A Retry-After that ends past the budget stops. */
sluice_client_retry_verdict sluice_client_retry_next(sluice_client_retry *r, int status,
                                                     int64_t retry_after_ns, int64_t now_ns,
                                                     int64_t *delay_ns);
/* 1 for GET, HEAD, OPTIONS, TRACE, PUT and DELETE (RFC 9110 9.2.2), else 0. */
int sluice_client_is_idempotent(const char *method);
/* "retry", "done", "not idempotent", "attempts used", "budget spent". */
const char *sluice_client_retry_verdict_name(sluice_client_retry_verdict v);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_CLIENT_H */
