/*
 * policy.h -- policies written once in YAML and shared by every protocol: config loading
 * (sluice format and envoyproxy/ratelimit format), the decision pipeline (match -> key ->
 * cost -> one all-or-nothing sluice_decide -> reaction/mode) and HTTP rendering (no I/O).
 * Times are nanoseconds (int64_t) unless a name says _s; costs are whole units.
 * Nothing on the check path allocates: verdicts are fixed-size and hold their own keys.
 */
#ifndef SL_POLICY_H
#define SL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* ---- diagnostics ------------------------------------------------------------------ */

#define SL_DIAG_MAX 64
#define SL_DIAG_MSG 384

/* One problem found while loading: 1-based line and column from libyaml's marks. */
typedef struct sl_diag {
    int line, col;
    char msg[SL_DIAG_MSG]; /* "unknown field 'burts' (expected one of: rate, burst, ...)" */
} sl_diag;

/* Every error of one load, in file order. `file` is the name shown in front of each
 * message (the path, or the name given to sl_config_load_buffer). */
typedef struct sl_diag_list {
    char file[256];
    size_t n;        /* entries in `items` */
    size_t dropped;  /* errors beyond SL_DIAG_MAX, counted but not kept */
    sl_diag items[SL_DIAG_MAX];
} sl_diag_list;

/* "file:line:col: message" into buf (always NUL-terminated); returns the length. */
size_t sl_diag_format(const sl_diag_list *dl, size_t i, char *buf, size_t len);

/* ---- config ----------------------------------------------------------------------- */

typedef struct sl_config sl_config;

#define SL_ADDR_MAX 128
#define SL_PATH_MAX 512

typedef enum sl_store_type {
    SL_STORE_MEMORY = 0,
    SL_STORE_REDIS = 1,
    SL_STORE_REDIS_CLUSTER = 2
} sl_store_type;

/* The Redis store's connection settings (store: username, password, password_file,
 * password_env, db, tls: {...}, sentinel: {...}; parsed by store_redis.c). Passwords
 * from a file or an environment variable are read when the config is loaded; none of
 * these is ever printed. */
typedef struct sl_redis_conn_cfg {
    char username[128];
    char password[256];         /* "" = none */
    unsigned db;
    bool tls;                   /* a tls section is present: connect with TLS */
    bool tls_insecure;          /* tls.verify: false */
    char tls_ca_file[SL_PATH_MAX];
    char tls_cert_file[SL_PATH_MAX];
    char tls_key_file[SL_PATH_MAX];
    char tls_server_name[256];
    char sentinel_master[128];  /* "" = no sentinel */
    char sentinel_addrs[512];   /* "h:p,h:p" */
    char sentinel_username[128];
    char sentinel_password[256];
} sl_redis_conn_cfg;

/* The server's settings, all parsed and validated by the loader (an empty address
 * means "listener disabled"). Defaults are the values documented in docs/config.md. */
typedef struct sl_settings {
    char listen_http[SL_ADDR_MAX];  /* "127.0.0.1:8080" */
    char listen_resp[SL_ADDR_MAX];  /* "127.0.0.1:6380" */
    char listen_grpc[SL_ADDR_MAX];  /* "" unless configured */
    char listen_admin[SL_ADDR_MAX]; /* "127.0.0.1:9090" */
    unsigned workers;               /* 0 = one per CPU */
    char admin_token[128];          /* "" = no token required on the admin listener */
    int auth_deny_status;           /* status of /v1/auth on a rejection: 429 (400-599) */
    bool legacy_headers;            /* also emit X-RateLimit-Limit/Remaining/Reset */
    bool log_raw_keys;              /* default false: keys are personal data */
    struct {
        sl_store_type type;
        uint64_t max_keys;          /* memory: 0 = library default */
        sluice_on_full on_full;     /* memory: evict_lru (default) or refuse_new */
        unsigned shards;            /* memory: 0 = library default */
        char snapshot_path[SL_PATH_MAX]; /* memory: "" = no snapshots */
        int64_t snapshot_every_ns;  /* memory: 0 = only on shutdown */
        char redis_addr[SL_ADDR_MAX];    /* redis: "host:port" (first seed for a cluster) */
        int64_t redis_timeout_ns;   /* redis: default 20 ms */
        char redis_key_secret[128]; /* redis: keyed-hash secret; "" = documented default */
        bool redis_time_local;      /* redis: time: local (the instance's clock, not TIME) */
        uint64_t max_tokens;        /* outstanding settle/release tokens; 0 = SL_TOKENS_DEFAULT */
        sl_redis_conn_cfg redis;    /* redis: credentials, TLS, sentinel */
    } store;
} sl_settings;

/* Loads and validates a config file. On success *out is a fully valid config and 0 is
 * returned; on failure every error found is in `diags` (may be NULL), *out is NULL and
 * SLUICE_EINVAL (or SLUICE_EIO, SLUICE_ENOMEM) is returned. The format (sluice or
 * envoyproxy/ratelimit) is detected from the top-level keys. */
int sl_config_load(const char *path, sl_config **out, sl_diag_list *diags);
/* The same from memory; `name` is used in diagnostics. */
int sl_config_load_buffer(const char *buf, size_t len, const char *name, sl_config **out,
                          sl_diag_list *diags);
void sl_config_destroy(sl_config *cfg);

const sl_settings *sl_config_settings(const sl_config *cfg);
size_t sl_config_policy_count(const sl_config *cfg); /* sluice policies + envoy rules */
/* Names of the policies, in file order (envoy rules as "domain/key=value/..."). */
const char *sl_config_policy_name(const sl_config *cfg, size_t i);
/* Total limiters (windows, plans included) the engine will register. */
size_t sl_config_limiter_count(const sl_config *cfg);
bool sl_config_is_envoy(const sl_config *cfg); /* loaded from an envoy-format file */

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
 * the duration of sl_engine_check. */
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
    /* Optional scratch for normalising a path longer than SL_PATH_NORM_STACK bytes (at
     * least path.len bytes; normalising never lengthens a path). Without it such a path
     * is answered as an error (SL_ERROR, 500), never matched raw. */
    char *path_scratch;
    size_t path_scratch_len;
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

typedef enum sl_quota_unit {
    SL_QU_REQUESTS = 0,
    SL_QU_CONTENT_BYTES = 1,
    SL_QU_CONCURRENT = 2,
    SL_QU_OTHER = 3 /* e.g. tokens: rendered as qu="<unit name>" */
} sl_quota_unit;

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
} sl_window_info;

#define SL_VERDICT_KEYS 4096 /* bytes of composed keys one verdict can hold */

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
    uint32_t override_limit;    /* that requests_per_unit */
    sluice_result result;
} sl_verdict_item;

typedef struct sl_verdict {
    sl_action action;
    int status;               /* HTTP status to answer: 200, 429, 400 (missing key), 503
                                 (store failure, fail closed) or 500 (SL_ERROR);
                                 /v1/auth may answer settings.auth_deny_status instead (set
                                 it here before sl_render_problem so the body agrees) */
    bool recheck;             /* SL_DELAY from a non-shaping reaction: nothing consumed,
                                 check again after delay_ns */
    bool shadow_limited;      /* a shadow item would have limited */
    bool store_error;         /* store failed; action follows the policies' failure mode */
    int error;                /* that store error, or SL_ERROR's cause (SLUICE_E*), or 0 */
    int64_t delay_ns;         /* SL_DELAY */
    int64_t retry_after_ns;   /* SL_REJECT: the deciding item's retry-after (or NEVER) */
    int deciding;             /* index into items, -1 when no enforced window matched */
    const char *missing_key_policy; /* SL_REJECT with status 400: this policy's key is
                                       missing and it says on_missing_key: reject */
    size_t n;
    sl_verdict_item items[SLUICE_MAX_ITEMS];
    size_t keys_used;
    unsigned char keys[SL_VERDICT_KEYS];
    /* single use: the id of this verdict's entry in the engine's token table (0 = nothing
     * to settle or release, or the table was full), and the decision's time (refunds go
     * only to the window that counted the reservation: sluice_settle_at) */
    uint64_t token_id;
    sluice_time decided_at;
} sl_verdict;

/* ---- engine ----------------------------------------------------------------------- */

typedef struct sl_engine sl_engine;

/* Outstanding settle/release tokens: each admitted verdict holding a reservation or a
 * lease gets a random id here, removed on its first settle (and first release), so a
 * token cannot be replayed. Bounded (fixed capacity, 64 shards, thread-safe); an entry
 * expires with its reservation's window or its lease. It belongs with the store: create
 * it once, pass it to every engine on that store (reloads), destroy it after the last. */
typedef struct sl_token_table sl_token_table;
#define SL_TOKENS_DEFAULT 65536
sl_token_table *sl_token_table_create(size_t capacity, int *err); /* 0 = default */
void sl_token_table_destroy(sl_token_table *t);
size_t sl_token_table_capacity(const sl_token_table *t);

/* sl_engine_create with an explicit token table (borrowed: it must outlive the engine). */
sl_engine *sl_engine_create_with(const sl_config *cfg, sluice_store *store,
                                 sl_token_table *tokens, int *err, char *errbuf,
                                 size_t errbuf_len);

/* Compiles `cfg` (borrowed: it must outlive the engine) and registers every limiter with
 * `store`. The token table is the one shared by every live engine on `store` (created
 * with settings.store.max_tokens by the first, destroyed with the last), so tokens
 * survive a reload that creates the new engine before destroying the old one. Reload = a new engine from a new config on the same store: limiters keep their
 * identity (name = policy [+ "@" plan], index = window index), so unchanged rules keep
 * their counters and changed ones carry over. NULL with *err and errbuf on failure. */
sl_engine *sl_engine_create(const sl_config *cfg, sluice_store *store, int *err, char *errbuf,
                            size_t errbuf_len);
void sl_engine_destroy(sl_engine *e);
const sl_config *sl_engine_config(const sl_engine *e);

/* The full pipeline on request attributes. Thread-safe, no allocation. Returns SLUICE_OK
 * with the decision in *out (out->action), or an error (SLUICE_ETOOMANY when more than
 * SLUICE_MAX_ITEMS windows match, SLUICE_ERANGE when keys overflow the verdict or the
 * decision's state does not fit, SLUICE_EINVAL) with out->action = SL_ERROR and
 * out->status = 500: answer 500, never admit. A store failure (SLUICE_ESTORE, EFULL,
 * ENOMEM, EIO) is not an error: see out->store_error and on_store_error. */
int sl_engine_check(const sl_engine *e, const sl_request *req, sluice_time now, sl_verdict *out);

/* Store hooks: when set for the calling thread, the engine's decisions, settles and
 * releases go through them instead of the memory store (the Redis store sets them in each
 * worker thread). NULL (the default) = the memory store, unchanged. */
typedef struct sl_store_hooks {
    void *ctx;
    int (*decide)(void *ctx, const sluice_item *items, size_t n, sluice_time now,
                  sluice_decision *out);
    int (*settle)(void *ctx, const sluice_limiter *lim, const void *key, size_t key_len,
                  uint64_t reserved, uint64_t actual, sluice_time now, sluice_result *out);
    int (*release)(void *ctx, const sluice_limiter *lim, const void *key, size_t key_len,
                   uint64_t lease, sluice_time now);
    /* forgets the items' state (costs ignored); may be NULL: the memory store's */
    int (*reset)(void *ctx, const sluice_item *items, size_t n, sluice_time now);
    /* claims operation `op` (SL_TOK_*) of token `id` for ttl_ns in the shared store:
     * SLUICE_OK the first time anywhere, SLUICE_ENOTFOUND after; used once tokens are
     * shared (sl_engine_tokens_shared); may be NULL */
    int (*claim)(void *ctx, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now);
} sl_store_hooks;
void sl_engine_thread_hooks(const sl_store_hooks *h);
/* Settle/release tokens valid on every instance sharing a store: authenticated with a key
 * derived from `secret` (the store's key_secret, the same on every instance) instead of a
 * per-process one, and made single-use by a claim in the shared store (hooks' claim)
 * instead of this process's table. Call once, before any token is issued. */
void sl_engine_tokens_shared(const void *secret, size_t len);
/* sluice_decide through this thread's hooks (for callers outside the engine). */
int sl_store_decide(sluice_store *st, const sluice_item *items, size_t n, sluice_time now,
                    sluice_decision *out);
/* sluice_reset of every item through this thread's hooks; returns SLUICE_OK, or the
 * first error (SLUICE_ENOTFOUND, a key that held no state, is not one). */
int sl_store_reset(sluice_store *st, const sluice_item *items, size_t n, sluice_time now);

/* Explicit form (SL.CHECK, /v1/check with a policy name): the named policy's windows on
 * `key` (bytes, its own key namespace) with `cost` (has_cost false = the policy's
 * default cost). SLUICE_ENOTFOUND for an unknown policy. */
int sl_engine_check_named(const sl_engine *e, const char *policy, const void *key,
                          size_t key_len, bool has_cost, uint64_t cost, sluice_time now,
                          sl_verdict *out);

/* Concurrency policies: acquire = check_named with cost 1 (lease in items[i].result.lease). */
int sl_engine_acquire(const sl_engine *e, const char *policy, const void *key, size_t key_len,
                      sluice_time now, sl_verdict *out);
/* Releases every lease an admitted verdict holds (a rejected one holds none). Returns
 * SLUICE_OK or the first error (SLUICE_ENOTFOUND: a lease had already expired, or the
 * verdict was already released: single use, shared with its token). */
int sl_engine_release(const sl_engine *e, const sl_verdict *v, sluice_time now);
/* Settles every consumed `settle` item of an admitted verdict from its reservation
 * (item.cost) to `actual`, refunds only into the window that counted the reservation
 * (sluice_settle_at with v->decided_at); SLUICE_EINVAL for a verdict that consumed
 * nothing, SLUICE_ENOTFOUND when it was already settled (single use, shared with its
 * token) or its reservation's window has ended. */
int sl_engine_settle(const sl_engine *e, const sl_verdict *v, uint64_t actual, sluice_time now);

/* A verdict travels between a check and a later settle/release (another connection) as
 * a token: printable ASCII, at most SL_TOKEN_MAX bytes. It names its single-use id, the
 * decision time, limiters, keys (hex), reserved costs and leases (so it is as personal as
 * the keys), only for windows that consumed, and ends in a MAC under a per-process random
 * key: a forged or altered token is refused with SLUICE_EINVAL. A token settles once and
 * releases once: a replayed, expired or unknown one is refused with SLUICE_ENOTFOUND
 * (nothing refunded or released; answer 404). Valid across reloads, not restarts. */
#define SL_TOKEN_MAX 2048
int sl_verdict_token(const sl_verdict *v, char *buf, size_t len); /* bytes or SLUICE_ERANGE */
int sl_engine_settle_token(const sl_engine *e, const char *token, size_t len, uint64_t actual,
                           sluice_time now);
int sl_engine_release_token(const sl_engine *e, const char *token, size_t len, sluice_time now);

/* Envoy RLS: the status of request descriptor `d` (DescriptorStatus): NO_LIMIT when no
 * rule matched it (code OK, no current_limit), else OK or OVER_LIMIT with *item the window
 * to report (current_limit, limit_remaining, duration_until_reset); an over-limit shadow
 * window reports OK, an `unlimited` rule OK with remaining UINT32_MAX. */
typedef enum sl_desc_code { SL_DESC_NO_LIMIT = 0, SL_DESC_OK = 1, SL_DESC_OVER_LIMIT = 2 } sl_desc_code;
sl_desc_code sl_verdict_descriptor(const sl_verdict *v, size_t d, const sl_verdict_item **item);

/* ---- rendering (no I/O) ----------------------------------------------------------- */

#define SL_RENDER_LEGACY 0x1u    /* add X-RateLimit-Limit/Remaining/Reset */
#define SL_RENDER_NO_POLICY 0x2u /* omit RateLimit-Policy (it rarely changes) */

/* Header lines, each "Name: value\r\n": RateLimit-Policy, RateLimit (draft-11 lists of
 * every enforced window of policies with headers on), Retry-After on SL_REJECT (ceil
 * seconds, >= 1; none when the request can never be admitted), legacy X-RateLimit-* of the
 * deciding window with `flags`. Nothing for SL_FAIL or a missing key. Returns bytes written
 * (NUL-terminated) or SLUICE_ERANGE (buf then ""). */
int sl_render_headers(const sl_verdict *v, char *buf, size_t len, unsigned flags);
/* RFC 9457 body (application/problem+json): quota-exceeded (429) or, for SL_FAIL,
 * temporary-reduced-capacity (503); `traceparent` (may be NULL) adds its trace-id when it
 * is a valid W3C traceparent. Returns bytes written or SLUICE_ERANGE. */
int sl_render_problem(const sl_verdict *v, const char *traceparent, char *buf, size_t len);
/* The verdict as one JSON object for /v1/check (no raw keys unless `with_keys`). */
int sl_render_json(const sl_verdict *v, bool with_keys, char *buf, size_t len);

/* Seconds for a header: ceil(ns / 1e9), and at least `min_s`. */
int64_t sl_ceil_s(int64_t ns, int64_t min_s);

#endif /* SL_POLICY_H */
