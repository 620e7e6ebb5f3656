/* SPDX-License-Identifier: Apache-2.0 */
/*
 * retry.c -- when and whether to send a failed request again: exponential backoff with
 * full jitter (a uniform draw from [0, min(cap, base * 2^n)], AWS's "full jitter"), after
 * the server's Retry-After when it gave one, within a number of attempts and a total
 * time budget, and never for a request that is not safe to repeat. Times in ns.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sluice_client.h"

struct sluice_client_retry {
    sluice_client_retry_options o;
    uint64_t rng;       /* the built-in generator's state (xorshift64*) */
    unsigned attempts;  /* attempts sent in the current request */
    int64_t started_ns;
    bool idempotent;
};

static uint64_t builtin_random(void *ctx) {
    uint64_t *s = ctx;
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

sluice_client_retry *sluice_client_retry_create(const sluice_client_retry_options *opt, int *err) {
    sluice_client_retry_options o;
    memset(&o, 0, sizeof(o));
    if (opt != NULL) o = *opt;
    if (o.base_ns < 0 || o.cap_ns < 0 || o.budget_ns < 0) {
        if (err != NULL) *err = SLUICE_EINVAL;
        return NULL;
    }
    if (o.base_ns == 0) o.base_ns = 100 * SLUICE_NS_PER_MS;
    if (o.cap_ns == 0) o.cap_ns = 20 * SLUICE_NS_PER_S;
    if (o.max_attempts == 0) o.max_attempts = 5;
    if (o.budget_ns == 0) o.budget_ns = 30 * SLUICE_NS_PER_S;
    sluice_client_retry *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        if (err != NULL) *err = SLUICE_ENOMEM;
        return NULL;
    }
    r->o = o;
    if (r->o.random == NULL) {
        /* clients started together must not draw the same delays: seed from the kernel */
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
            seed = (uint64_t)(uintptr_t)r ^ UINT64_C(0x9e3779b97f4a7c15);
        r->rng = seed ? seed : 1;
        r->o.random = builtin_random;
        r->o.random_ctx = &r->rng;
    }
    if (err != NULL) *err = SLUICE_OK;
    return r;
}

void sluice_client_retry_destroy(sluice_client_retry *r) { free(r); }

void sluice_client_retry_start(sluice_client_retry *r, int idempotent, int64_t now_ns) {
    if (r == NULL) return;
    r->attempts = 1;
    r->started_ns = now_ns;
    r->idempotent = idempotent != 0;
}

static bool retryable(int status) {
    return status == 0 || status == 408 || status == 429 || status == 502 || status == 503 ||
           status == 504;
}

/* A uniform draw from [0, hi] without modulo bias worth speaking of (hi < 2^63). */
static int64_t uniform(sluice_client_retry *r, int64_t hi) {
    if (hi <= 0) return 0;
    unsigned __int128 x = (unsigned __int128)r->o.random(r->o.random_ctx) * ((uint64_t)hi + 1);
    return (int64_t)(x >> 64);
}

sluice_client_retry_verdict sluice_client_retry_next(sluice_client_retry *r, int status,
                                                     int64_t retry_after_ns, int64_t now_ns,
                                                     int64_t *delay_ns) {
    if (delay_ns != NULL) *delay_ns = 0;
    if (r == NULL || !retryable(status)) return SLUICE_CLIENT_DONE;
    if (!r->idempotent) return SLUICE_CLIENT_NOT_IDEMPOTENT;
    if (r->attempts >= r->o.max_attempts) return SLUICE_CLIENT_NO_ATTEMPTS;
    int64_t left = r->started_ns + r->o.budget_ns - now_ns;
    int64_t ra = retry_after_ns > 0 ? retry_after_ns : 0;
    if (left <= 0 || ra > left) return SLUICE_CLIENT_NO_BUDGET;
    /* ceiling: base * 2^(retries so far), at most cap and what the budget leaves */
    unsigned n = r->attempts - 1;
    int64_t ceil = r->o.cap_ns;
    if (n < 62 && r->o.base_ns <= (r->o.cap_ns >> n)) ceil = r->o.base_ns << n;
    if (ceil > left - ra) ceil = left - ra;
    int64_t d = ra + uniform(r, ceil);
    r->attempts++;
    if (delay_ns != NULL) *delay_ns = d;
    return SLUICE_CLIENT_RETRY;
}

int sluice_client_is_idempotent(const char *method) {
    static const char *const m[] = {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"};
    if (method == NULL) return 0;
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
        if (strcmp(method, m[i]) == 0) return 1;
    return 0;
}

const char *sluice_client_retry_verdict_name(sluice_client_retry_verdict v) {
    switch (v) {
    case SLUICE_CLIENT_RETRY: return "retry";
    case SLUICE_CLIENT_DONE: return "done";
    case SLUICE_CLIENT_NOT_IDEMPOTENT: return "not idempotent";
    case SLUICE_CLIENT_NO_ATTEMPTS: return "attempts used";
    case SLUICE_CLIENT_NO_BUDGET: return "budget spent";
    }
    return "unknown";
}
