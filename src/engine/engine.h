/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.h -- the decision pipeline over a loaded config, shared by every protocol:
 *   sl_engine_prepare   match -> key -> cost (no I/O: the verdict holds composed keys)
 *   sl_engine_decide    ONE all-or-nothing request to the store (enforced windows, shadow
 *                       policies, Envoy overrides and count_rejected charges together),
 *                       completed at once (memory store) or later (Redis), then the
 *                       reaction and mode
 * and HTTP rendering (no I/O). A verdict is the request's continuation: it holds keys,
 * windows and what the store answered; it must stay where it is until its completion
 * runs, and the engine (config generation) it came from must outlive that.
 * Times are nanoseconds (int64_t) unless a name says _s; costs are whole units.
 * Nothing on the decision path allocates.
 */
#ifndef SL_ENGINE_H
#define SL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "llm/llm.h"
#include "sluice.h"
#include "store/memory/override.h"
#include "store/store.h"

/* ---- requests --------------------------------------------------------------------- */

typedef struct sl_str {
    const char *p; /* not NUL-terminated necessarily; NULL = absent */
    size_t len;
} sl_str;

typedef struct sl_header {
    sl_str name; /* compared case-insensitively */
    sl_str value;
} sl_header;

typedef struct sl_entry {
    sl_str key;
    sl_str value;
} sl_entry;

/* One Envoy RLS descriptor: ordered entries, optional per-descriptor hits_addend. */
typedef struct sl_descriptor {
    const sl_entry *entries;
    size_t n;
    bool has_hits_addend;
    uint64_t hits_addend; /* explicit 0 = check only */
    /* RateLimitDescriptor.limit: when set, the config is bypassed for this descriptor and
     * this limit applies (a fixed window per unit, no shadow mode), as envoyproxy/ratelimit
     * does. unit is envoy.type.v3.RateLimitUnit: 1 SECOND, 2 MINUTE, 3 HOUR, 4 DAY,
     * 5 MONTH (30 days), 6 YEAR (365 days); another value ignores the override. */
    bool has_limit;
    uint32_t limit_requests_per_unit;
    int limit_unit;
} sl_descriptor;

#define SL_MAX_DESCRIPTORS 16

/* The attributes of one request; every field is optional (absent = NULL/0). Borrowed for
 * the duration of sl_engine_prepare (the verdict keeps what it needs: composed keys). */
typedef struct sl_request {
    sl_str method, path, host;
    sl_str client_ip;       /* textual IPv4 or IPv6 address */
    sl_str route;           /* a route name the gateway resolved; see docs/config.md */
    const sl_header *headers;
    size_t n_headers;
    bool has_body_bytes;
    uint64_t body_bytes;    /* Content-Length (cost: body_bytes) */
    /* Envoy RLS: a request with a domain is matched against envoy rules and policies
     * whose match names that domain, once per descriptor. */
    sl_str domain;
    const sl_descriptor *descriptors;
    size_t n_descriptors;
    uint64_t hits_addend;   /* request-level; 0 = 1 */
    /* A cost the caller states for the whole request (/v1/check's cost, SL.CHECKREQ's
     * COST): it replaces what the policies would compute; 0 checks without consuming. */
    bool has_cost;
    uint64_t cost;
    /* Optional scratch for normalising a path longer than SL_PATH_NORM_STACK bytes (at
     * least path.len bytes; normalising never lengthens a path). Without it such a path
     * is answered as an error (SL_ERROR, 500), never matched raw. */
    char *path_scratch;
    size_t path_scratch_len;
    /* An LLM request body as src/llm parsed it (issue 24), NULL for none: windows with
     * `counts:` take its counts, key parts llm.model / llm.user its names. */
    const sl_llm_request *llm;
} sl_request;

#define SL_PATH_NORM_STACK 16384 /* paths up to this long are normalised on the stack */

/* ---- verdicts --------------------------------------------------------------------- */

typedef enum sl_action {
    SL_ALLOW = 0,  /* forward the request */
    SL_DELAY = 1,  /* hold it for delay_ns, then forward (consumed; see `recheck`) */
    SL_REJECT = 2, /* answer 429 (or the configured status) */
    SL_FAIL = 3,   /* store unreachable and a matching policy fails closed: 503 */
    SL_ERROR = 4   /* the request could not be decided (not a store failure: too many
                      windows, keys too long, a decision the library refuses): answer 500
                      with problem+json; never admitted, whatever on_store_error says */
} sl_action;


/* Static facts about one window of one policy (engine-owned, valid while it lives). */
typedef struct sl_window_info {
    const char *name;          /* RateLimit-Policy item name (sf-string) */
    const char *policy;        /* the policy (or envoy rule) name */
    const char *plan;          /* the plan whose limits these are, or NULL */
    const char *unit_name;     /* quota unit for qu= when qu == SL_QU_OTHER */
    sl_quota_unit qu;
    uint64_t quota;            /* q: the capacity a client sees */
    int64_t window_s;          /* w: 0 = not stated (calendar months) */
    uint32_t index;            /* window index inside its policy */
    int envoy_unit;            /* envoy RateLimitResponse.RateLimit.Unit, 0 if none */
    uint32_t requests_per_unit;/* envoy current_limit */
    const sluice_limiter *limiter;
    const char *objective;     /* the policy's objective (protection, fairness, ...) */
    bool detailed_metric;      /* envoy detailed_metric / value_to_metric: metrics may
                                  label this rule by the descriptor's values */
    uint8_t counts;            /* issue 24: sl_llm_count of the window (0: its cost) */
    const struct sl_cllm *llm; /* its policy's `llm:` section, NULL for none */
} sl_window_info;

#define SL_VERDICT_KEYS 4096 /* bytes of composed keys one verdict can hold */
#define SL_COUNT_ONLY_LIMIT ((UINT64_C(1) << 52) - 1) /* a count_only item's store limit */
/* The largest cost one decision takes, on every store (the Redis scripts compute exactly
 * below 2^53 and form cost products): checked once in prepare, so that every store and
 * protocol answers a larger one alike (issue 27: the memory store refused it with 429,
 * Redis answered 400 about key parts). SL_ECOST is the verdict's error: a 400. */
#define SL_COST_MAX (UINT64_C(1) << 40)
#define SL_ECOST (-64)
/* Envoy compat keys (prepare.c, compat mode): this first byte, then envoyproxy/ratelimit's
 * cache key without prefix and window ("domain_k1_v1_k2_v2_"), a NUL, and the rule's
 * statistics path for this request (src/server/envoy_stats.c). */
#define SL_ENVOY_KEY_TAG 0xfe

/* One (window, key, cost) of a decision. */
typedef struct sl_verdict_item {
    const sl_window_info *info; /* never NULL (an envoy `unlimited` rule has a pseudo-window
                                   with limiter NULL and quota 0) */
    int descriptor;             /* RLS descriptor index, -1 for attribute requests */
    uint16_t key_off, key_len;  /* the composed key inside verdict.keys */
    uint64_t cost;              /* units asked for */
    bool shadow;                /* never rejects: shadow mode, or outside the rollout */
    bool would_limit;           /* rejected by its own limit (reported, maybe shadowed) */
    bool unlimited;             /* envoy unlimited: OK, remaining = UINT32_MAX */
    bool settle;                /* cost is a reservation to settle after the response */
    bool consumed;              /* this window's cost was taken (what settle/release undo) */
    bool override;              /* a descriptor's limit override: result.limit is its
                                   requests_per_unit (info describes only the unit) */
    bool charge;                /* count_rejected: charged even when the request is rejected */
    bool count_only;            /* envoy compat (fixed windows): the store only counts (limit
                                   SL_COUNT_ONLY_LIMIT, group 0, never rejects); the answer
                                   compares the count with the rule's limit (src/api/grpc/rls.c),
                                   as envoyproxy/ratelimit's INCRBY-then-compare does */
    uint8_t group;              /* shadow items: their store group (policy and key), 1.. */
    uint32_t override_limit;    /* that requests_per_unit */
    sluice_result result;
    /* capacity protection (capacity.c): as the store item's fields (store.h), and what the
     * store said about them */
    uint8_t cls, cap, pgrp, bpath, blevel;
    bool extra;                 /* added by capacity protection (a tier, a penalty): part of
                                   its policy's application, under another key */
    uint64_t share;
    sl_cap_info x;
    /* per-key overrides (engine/override.c): set when the verdict is decided */
    uint8_t ovr_g;              /* its override group + 1 (0: none) */
    int8_t ovr_p;               /* index of its numbers in the group's lim[] (-1: own) */
    int8_t ovr_c;               /* carry: -1 none, -2 from its window's own numbers, else
                                   index in the group's from[] */
    bool blocked;               /* a block override: the policy's deny answer */
} sl_verdict_item;

/* One (policy, key) of a verdict whose policy has overrides: where prepare put its items
 * (the base windows: the policy's, or the plan plan_from chose) and, once decided, what
 * override applied. At most SL_VERDICT_OVR per verdict (policies beyond that in one
 * request decide without their overrides: docs/overrides.md). */
#define SL_VERDICT_OVR 2
typedef struct sl_vovr {
    const void *ep;             /* the policy (sl__epol) */
    uint8_t first, n;           /* its items now */
    int8_t base_plan;           /* -1: the policy's windows */
    uint16_t key_off, key_len;
    uint64_t cost;
    bool shadow;
    int descriptor;
    uint8_t kind;               /* sl_ovr_kind that applied (SL_OVR_NONE: none) */
    bool guarded;
    sl_ovr_guard guard;
    char label[64];
    char plan[64];
    sl_limit lim[SL_OVR_MAX_WIN];
    sl_limit from[SL_OVR_MAX_WIN];
} sl_vovr;

typedef struct sl_engine sl_engine;
typedef struct sl_verdict sl_verdict;

/* A completion: `rc` is SLUICE_OK (the answer is in v->action) or the engine error that
 * made it SL_ERROR. Called exactly once per request, possibly before the call that
 * started it returns. */
typedef void (*sl_engine_done)(void *ud, int rc, sl_verdict *v);

struct sl_verdict {
    sl_action action;
    int status;               /* HTTP status to answer: 200, 429, 400 (missing key), 503
                                 (store failure, fail closed) or 500 (SL_ERROR);
                                 /v1/auth may answer settings.auth_deny_status instead (set
                                 it here before sl_render_problem so the body agrees) */
    bool recheck;             /* SL_DELAY from a non-shaping reaction: nothing consumed,
                                 check again after delay_ns */
    bool shadow_limited;      /* a shadow item would have limited */
    bool store_error;         /* store failed; action follows the policies' failure mode */
    bool store_local;         /* the store was unreachable and decided locally at this
                                 instance's share (on_store_error: local) */
    int error;                /* that store error, or SL_ERROR's cause (SLUICE_E*), or 0 */
    int64_t delay_ns;         /* SL_DELAY */
    int64_t retry_after_ns;   /* SL_REJECT: the deciding item's retry-after (or NEVER) */
    int deciding;             /* index into items, -1 when no enforced window matched */
    const char *missing_key_policy; /* SL_REJECT with status 400: this policy's key is
                                       missing and it says on_missing_key: reject */
    int challenge;            /* SL_REJECT by a penalty's challenge: the item's index + 1 (the
                                 status is the policy's challenge status); 0 otherwise */
    size_t n;
    sl_verdict_item items[SLUICE_MAX_ITEMS];
    size_t keys_used;
    unsigned char keys[SL_VERDICT_KEYS];
    /* single use: the id of this verdict's entry in the engine's token table (0 = nothing
     * to settle or release, or the table was full), and the decision's time (refunds go
     * only to the window that counted the reservation) */
    uint64_t token_id;
    sluice_time decided_at;
    uint8_t n_ovr;
    uint8_t ovr_tries;        /* decisions repeated because an override changed meanwhile */
    bool ovr_starving;        /* counted in the table's starving deciders (writers wait) */
    sl_vovr ovr[SL_VERDICT_OVR];
    /* engine-private: the request in flight */
    struct {
        const sl_engine *e;
        sl_engine_done done;
        void *ud;
        int prep_rc;          /* what sl_engine_prepare returned */
        int first_err;        /* settle/release fan-out: the first error */
        uint8_t pending;      /* store operations outstanding */
        uint8_t op;           /* what is in flight (decide.c) */
        bool deny;            /* an Envoy block-list rule rejects it */
        uint8_t nsi;          /* store items of the decision */
        uint8_t sidx[SLUICE_MAX_ITEMS]; /* store item -> verdict item */
        uint64_t actual;      /* settle: the actual cost */
        bool has_llm;         /* settle from a provider's usage: each window its pool (issue 24) */
        sl_llm_usage llm;
        unsigned tok_op;      /* token operation (SL_TOK_*) being applied */
        unsigned tok_rest;    /* operations to apply after it (settle, then release) */
        int chain_rc;         /* the first error of the operations applied before */
        sluice_time apply_now;
        int64_t tok_life;     /* its token's life */
        int64_t actual_now;   /* shared tokens: the wall time the operation applies at */
        void *lane;
        bool has_latency;     /* a release's sample: its latency (else now - decided_at) */
        uint8_t outcome;      /* sluice_outcome of a release */
        int64_t latency_ns;
        bool pass;            /* sl_engine_pass: a solved challenge, not a decision */
        bool capacity;        /* some item has capacity protection (classes, tiers, penalty,
                                 an adaptive limit): the store's capacity answers are read */
        uint64_t tok_resv;    /* the token id reserved for this decision (decide.c), until
                                 issued or dropped */
    } run;
};

/* ---- engine ----------------------------------------------------------------------- */

/* Outstanding settle/release tokens: each admitted verdict holding a reservation or a
 * lease gets a random id here, removed on its first settle (and first release), so a
 * token cannot be replayed. Bounded (fixed capacity, 64 shards, thread-safe); an entry
 * expires with its reservation's window or its lease. It belongs with the store: create
 * it once, pass it to every engine on that store (reloads), destroy it after the last. */
typedef struct sl_token_table sl_token_table;
sl_token_table *sl_token_table_create(size_t capacity, int *err); /* 0 = default */
void sl_token_table_destroy(sl_token_table *t);
size_t sl_token_table_capacity(const sl_token_table *t);
/* Live tokens now, and decisions refused because a share or the table was full. */
void sl_token_table_stats(sl_token_table *t, uint64_t *held, uint64_t *refused);
/* The engine's token table (its stats for metrics). */
sl_token_table *sl_engine_tokens(const sl_engine *e);

/* Compiles `cfg` (borrowed: it must outlive the engine) and registers every limiter with
 * `store` (the limiter registry; with the memory store also where state lives). Decisions
 * go through `ops` (NULL: the memory store; its lane is `store`). The token table is the
 * one shared by every live engine on `store` (created with settings.store.max_tokens by
 * the first, destroyed with the last), so tokens survive a reload that creates the new
 * engine before destroying the old one. Reload = a new engine from a new config on the
 * same store: limiters keep their identity (name = policy [+ "@" plan], index = window
 * index), so unchanged rules keep their counters and changed ones carry over.
 * NULL with *err and errbuf on failure. */
sl_engine *sl_engine_create_ops(const sl_config *cfg, sluice_store *store,
                                const sl_store_ops *ops, int *err, char *errbuf,
                                size_t errbuf_len);
/* The memory store: sl_engine_create_ops(cfg, store, NULL, ...). */
sl_engine *sl_engine_create(const sl_config *cfg, sluice_store *store, int *err, char *errbuf,
                            size_t errbuf_len);
/* With an explicit token table (borrowed: it must outlive the engine), memory store. */
sl_engine *sl_engine_create_with(const sl_config *cfg, sluice_store *store,
                                 sl_token_table *tokens, int *err, char *errbuf,
                                 size_t errbuf_len);
void sl_engine_destroy(sl_engine *e);
const sl_config *sl_engine_config(const sl_engine *e);
const sl_store_ops *sl_engine_ops(const sl_engine *e);

/* Settle/release tokens valid on every instance sharing a store: authenticated with a key
 * derived from `secret` (the store's key_secret, the same on every instance) instead of a
 * per-process one, and made single-use by a claim in the shared store (ops->claim)
 * instead of this process's table. Call once, before any token is issued. */
void sl_engine_tokens_shared(const void *secret, size_t len);

/* ---- the pipeline, asynchronous ------------------------------------------------------- */

/* Match, key and cost: fills v's items (nothing decided). Returns SLUICE_OK, or an error
 * (SLUICE_ETOOMANY when more than SLUICE_MAX_ITEMS windows match, SLUICE_ERANGE when keys
 * overflow the verdict, SLUICE_EINVAL) with v->action = SL_ERROR and v->status 500: answer
 * 500, never admit. Thread-safe, no allocation. */
int sl_engine_prepare(const sl_engine *e, const sl_request *req, sl_verdict *v);
/* Explicit form (SL.CHECK, /v1/check with a policy name): the named policy's windows on
 * `key` (bytes, its own key namespace) with `cost` (has_cost false = the policy's
 * default cost; concurrency windows take 1 slot, or none for a cost of 0: a peek).
 * SLUICE_ENOTFOUND (v->status 404) for an unknown policy. */
int sl_engine_prepare_named(const sl_engine *e, const char *policy, const void *key,
                            size_t key_len, bool has_cost, uint64_t cost, sl_verdict *v);
/* The explicit form with a priority class by name (NULL: the policy's on_missing_class);
 * a class the policy does not have is its on_missing_class too. */
int sl_engine_prepare_named_class(const sl_engine *e, const char *policy, const void *key,
                                  size_t key_len, bool has_cost, uint64_t cost, const char *cls,
                                  sl_verdict *v);
/* A solved challenge (POST /v1/challenge/pass, SL.PASS) for a verdict prepared like a
 * check: each penalty in a challenge period ends it. v->action is SL_ALLOW when one did,
 * SL_REJECT (status 404) when no penalty was in a challenge (nothing to pass: a block
 * cannot be solved away). */
void sl_engine_pass(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                    sl_engine_done done, void *ud);
/* Decides a prepared verdict with one request to the store through `lane` (the store's
 * per-thread handle: the sluice_store for memory, a worker's client for Redis). A store
 * failure is not an error: see v->store_error and the policies' on_store_error. done is
 * called exactly once (at once when the verdict was not prepared successfully). */
void sl_engine_decide(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                      sl_engine_done done, void *ud);
/* n prepared verdicts decided in order, each as sl_engine_decide would, their completions'
 * rc in rcs[i]; only for a store that answers at once (sl_store_ops.immediate). Simple
 * one-window decisions go through the store's batch (a pipeline's requests: their memory
 * fetched ahead of their turn). */
#define SL_ENGINE_BATCH 32
void sl_engine_decide_batch(const sl_engine *e, void *lane, sl_verdict *const *vs, size_t n,
                            sluice_time now, int *rcs);
/* Settles every consumed `settle` item of an admitted verdict from its reservation
 * (item.cost) to `actual`, refunding only into the window that counted the reservation;
 * SLUICE_EINVAL for a verdict that reserved nothing, SLUICE_ENOTFOUND when it was
 * already settled (single use, shared with its token). */
void sl_engine_settle_async(const sl_engine *e, void *lane, sl_verdict *v, uint64_t actual,
                            sluice_time now, sl_engine_done done, void *ud);
/* Releases every lease an admitted verdict holds (SLUICE_ENOTFOUND: one had expired, or
 * the verdict was released already). */
void sl_engine_release_async(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                             sl_engine_done done, void *ud);
/* A settle (op SL_TOKEN_SETTLE, with `actual`) or release (SL_TOKEN_RELEASE), or both
 * (settle, then release: a gateway's "the response is over"), from a token another
 * connection received: the token is authenticated and loaded into `v` (the
 * continuation), its single use taken (a claim in the store when tokens are shared), then
 * applied. rc: SLUICE_OK, SLUICE_EINVAL (forged, malformed), SLUICE_ENOTFOUND (used,
 * expired, unknown), or a store error. */
/* A token used for an operation it holds nothing for (SL.RELEASE on a settle token, or
 * SL.SETTLE on a lease token): the caller's mistake, said as such (not done). */
#define SL_ETOKEN_OP (-100)
/* A decision that would hold a lease or a reservation while its policy holds its whole
 * share of the token table (or the table is full): refused before the store is asked,
 * nothing charged (HTTP 503, RESP -ERR). */
#define SL_ETOKENS_FULL (-101)
#define SL_TOKEN_SETTLE 1u
#define SL_TOKEN_RELEASE 2u
void sl_engine_token(const sl_engine *e, void *lane, const char *token, size_t len,
                     unsigned op, uint64_t actual, sluice_time now, sl_verdict *v,
                     sl_engine_done done, void *ud);
/* sl_engine_token with a release's sample for adaptive limits: its latency (has_latency
 * false: the time since the decision, from the token) and outcome (sluice_outcome). */
void sl_engine_token_sample(const sl_engine *e, void *lane, const char *token, size_t len,
                            unsigned op, uint64_t actual, bool has_latency, int64_t latency_ns,
                            unsigned outcome, sluice_time now, sl_verdict *v,
                            sl_engine_done done, void *ud);
/* issue 24: a settle whose actual comes from a provider's usage object (src/llm): each
 * window with `counts:` settles to its pool (input, output, total, cached, requests 1),
 * any other window to the total. */
void sl_engine_token_usage(const sl_engine *e, void *lane, const char *token, size_t len, unsigned op,
                           const sl_llm_usage *u, sluice_time now, sl_verdict *v,
                           sl_engine_done done, void *ud);
/* Forgets the state of every window of a verdict prepared with sl_engine_prepare_named
 * (SL.RESET); v->n tells how many windows. */
void sl_engine_reset(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                     sl_engine_done done, void *ud);

/* ---- the pipeline, synchronous (a store that answers at once: the memory store) ------- */

/* prepare + decide on the engine's own store; SLUICE_EINVAL when its store answers
 * later (use the asynchronous form). Returns the completion's rc. */
int sl_engine_check(const sl_engine *e, const sl_request *req, sluice_time now, sl_verdict *out);
int sl_engine_check_named(const sl_engine *e, const char *policy, const void *key,
                          size_t key_len, bool has_cost, uint64_t cost, sluice_time now,
                          sl_verdict *out);
/* Concurrency policies: acquire = check_named with cost 1 (lease in items[i].result.lease). */
int sl_engine_acquire(const sl_engine *e, const char *policy, const void *key, size_t key_len,
                      sluice_time now, sl_verdict *out);
int sl_engine_release(const sl_engine *e, sl_verdict *v, sluice_time now);
int sl_engine_settle(const sl_engine *e, sl_verdict *v, uint64_t actual, sluice_time now);
int sl_engine_settle_token(const sl_engine *e, const char *token, size_t len, uint64_t actual,
                           sluice_time now);
int sl_engine_release_token(const sl_engine *e, const char *token, size_t len, sluice_time now);

/* A verdict travels between a check and a later settle/release (another connection) as
 * a token: printable ASCII (URL-safe base64), at most SL_TOKEN_MAX bytes. It holds its
 * single-use id, the decision time, limiters, keys, reserved costs and leases, only for
 * windows that consumed, sealed with ChaCha20-Poly1305 under a per-process random key (or
 * one derived from the shared secret): it shows none of them, and a forged or altered
 * token is refused. A token settles once and releases once. Valid across reloads, not
 * restarts (unless shared). */
#define SL_TOKEN_MAX 2048
int sl_verdict_token(const sl_verdict *v, char *buf, size_t len); /* bytes or SLUICE_ERANGE */
/* Whether an admitted verdict holds something a token could settle or release. */
bool sl_verdict_needs_token(const sl_verdict *v);

/* Envoy RLS: the status of request descriptor `d` (DescriptorStatus): NO_LIMIT when no
 * rule matched it (code OK, no current_limit), else OK or OVER_LIMIT with *item the window
 * to report (current_limit, limit_remaining, duration_until_reset); an over-limit shadow
 * window reports OK, an `unlimited` rule OK with remaining UINT32_MAX. */
typedef enum sl_desc_code { SL_DESC_NO_LIMIT = 0, SL_DESC_OK = 1, SL_DESC_OVER_LIMIT = 2 } sl_desc_code;
sl_desc_code sl_verdict_descriptor(const sl_verdict *v, size_t d, const sl_verdict_item **item);

/* ---- capacity protection: what a verdict says (capacity.c) ------------------------------- */

/* The class shed by a refusal: its name and why ("priority", "reserved", "full"); NULL
 * when no class was shed. */
const char *sl_verdict_shed(const sl_verdict *v, const char **reason);
/* A penalty that refused (or was recorded by) this decision: its level, "block" or
 * "challenge", and the challenge header line ("Name: value", NULL for none); false when
 * no penalty applies. */
bool sl_verdict_penalty(const sl_verdict *v, unsigned *level, const char **action,
                        const char **challenge_header);
/* The first adaptive limit of the verdict: its limit, no-load latency and slots in flight
 * (the window's info in *win); false when it has none. */
bool sl_verdict_adaptive(const sl_verdict *v, sl_cap_info *out, const sl_window_info **win);

/* The name of class `cls` (an index) of policy `policy`, NULL when it has no such class. */
const char *sl_engine_class_name(const sl_engine *e, const char *policy, unsigned cls);

/* ---- per-key overrides (override.c; docs/overrides.md) ---------------------------------- */

/* The hash of (policy, key) for a key in the admin API's path form (its parts in the
 * policy's order, each percent-encoded, joined by '|'), as the store keys overrides:
 * one function for the admin API, RESP and the library. False when the key is empty,
 * has more than SL_MAX_PARTS parts or a bad %XX, or memory runs out. */
bool sl_ovr_key_hash(const sl_ovr_table *t, const char *policy, const char *key, size_t key_len,
                     sl_hash128 *h);

/* The first override that applied to a decided verdict (NULL: none). */
const sl_vovr *sl_verdict_override(const sl_verdict *v);
/* The identity hash input of a composed key of `policy` (false: a key with none). */
bool sl__ovr_identity(const char *policy, const unsigned char *k, size_t n, sl_ovr_hasher *hs);
/* An override's windows (parsed in the config's syntax) compiled against policy `policy`'s
 * windows: identities by name (names[j], may be NULL) else position; the same algorithm
 * and state size. SLUICE_ENOTFOUND (no policy) or SLUICE_EINVAL with `why` naming the field. */
struct sl_cwindow;
int sl_engine_ovr_compile(const sl_engine *e, const char *policy, const struct sl_cwindow *wins,
                          const char *const *names, size_t n, sl_ovr_num *out, char *why,
                          size_t whylen);
/* 1: policy exists and takes overrides (and has plan `plan` when not NULL); 0: no such
 * policy; -2: it cannot take overrides; -3: no such plan. *nparts: its key's parts. */
int sl_engine_ovr_policy(const sl_engine *e, const char *policy, const char *plan,
                         size_t *nparts);

/* ---- rendering (no I/O) ----------------------------------------------------------- */

/* What an engine error (a verdict's SL_ERROR) means for the caller, in words: keys too
 * long for one decision, more windows than one decision holds, an unknown policy... */
const char *sl_engine_error_text(int rc);

#define SL_RENDER_LEGACY 0x1u    /* add X-RateLimit-Limit/Remaining/Reset */
#define SL_RENDER_NO_POLICY 0x2u /* omit RateLimit-Policy (it rarely changes) */

/* Header lines, each "Name: value\r\n": RateLimit-Policy, RateLimit (draft-11 lists of
 * every enforced window of policies with headers on), Retry-After on SL_REJECT (ceil
 * seconds, >= 1; none when the request can never be admitted), legacy X-RateLimit-* of the
 * deciding window with `flags`. Nothing for SL_FAIL, a missing key or a fail-open
 * admission (the store's state is unknown). Returns bytes written (NUL-terminated) or
 * SLUICE_ERANGE (buf then ""). */
int sl_render_headers(const sl_verdict *v, char *buf, size_t len, unsigned flags);
/* RFC 9457 body (application/problem+json): quota-exceeded (429) or, for SL_FAIL,
 * temporary-reduced-capacity (503); `traceparent` (may be NULL) adds its trace-id when it
 * is a valid W3C traceparent. Returns bytes written or SLUICE_ERANGE. */
int sl_render_problem(const sl_verdict *v, const char *traceparent, char *buf, size_t len);
/* The verdict as one JSON object for /v1/check (no raw keys unless `with_keys`). */
int sl_render_json(const sl_verdict *v, bool with_keys, char *buf, size_t len);

/* Seconds for a header: ceil(ns / 1e9), and at least `min_s`. */
int64_t sl_ceil_s(int64_t ns, int64_t min_s);

#endif /* SL_ENGINE_H */
