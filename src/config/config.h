/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h -- loading and validating a config file (sluice format and envoyproxy/ratelimit
 * format) into an immutable sl_config: the server's settings and the compiled policies the
 * engine (src/engine) decides with. Diagnostics carry file:line:col. No I/O beyond reading
 * the file; nothing here is on the decision path.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/client_ip.h"

#include "sluice.h"

/* ---- diagnostics ------------------------------------------------------------------ */

#define SL_DIAG_MAX 64
#define SL_DIAG_MSG 384

/* One problem found while loading: 1-based line and column from libyaml's marks. */
typedef struct sl_diag {
    int line, col;
    char msg[SL_DIAG_MSG]; /* "unknown field 'burts' (expected one of: rate, burst, ...)" */
    char file[160];        /* a config directory: the file it is in ("" = the list's) */
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
#define SL_TOKENS_DEFAULT 65536 /* outstanding settle/release tokens (store.max_tokens) */
#define SL_PATH_MAX 512
#define SL_ADMIN_TOKENS 16 /* named admin tokens */

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

/* envoyproxy/ratelimit compatibility (`sluice serve --compat envoy-ratelimit`, its
 * environment read by src/cli/compat.c): set once, before the first load, with
 * sl_config_set_envoy, and copied into every config loaded afterwards (reloads too), so
 * the loader, the engine and the server read it from the config they use. */
typedef struct sl_envoy_settings {
    bool compat;                /* answers, metrics and Redis counters as envoyproxy/ratelimit */
    bool merge_domains;         /* MERGE_DOMAIN_CONFIG: one domain in several files merges */
    bool ignore_dotfiles;       /* RUNTIME_IGNOREDOTFILES (a sluice directory always skips them) */
    bool headers;               /* LIMIT_RESPONSE_HEADERS_ENABLED */
    char header_limit[64], header_remaining[64], header_reset[64];
    bool stop_increment;        /* STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT */
    bool shadow;                /* SHADOW_MODE: overall OK whatever the descriptors say */
    bool quota;                 /* QUOTA_MODE: every rule in quota mode */
    bool dynamic_metadata;      /* RESPONSE_DYNAMIC_METADATA */
    bool healthy_with_config;   /* HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED */
    bool health_active_conn;    /* REDIS_HEALTH_CHECK_ACTIVE_CONNECTION */
    float near_ratio;           /* NEAR_LIMIT_RATIO (a float32, as upstream computes with it) */
    char key_prefix[128];       /* CACHE_KEY_PREFIX (Redis keys of the compat layout) */
    int64_t jitter_s;           /* EXPIRATION_JITTER_MAX_SECONDS */
    uint64_t local_cache_bytes; /* LOCAL_CACHE_SIZE_IN_BYTES: over-limit keys answered locally */
} sl_envoy_settings;

/* The server's settings, all parsed and validated by the loader (an empty address
 * means "listener disabled"). Defaults are the values documented in docs/config.md. */
typedef struct sl_settings {
    char listen_http[SL_ADDR_MAX];  /* "127.0.0.1:8080" */
    char listen_resp[SL_ADDR_MAX];  /* "127.0.0.1:6380" */
    char listen_grpc[SL_ADDR_MAX];  /* "" unless configured */
    char listen_admin[SL_ADDR_MAX]; /* "127.0.0.1:8082" */
    unsigned workers;               /* 0 = one per CPU */
    char admin_token[128];          /* "" = no token required on the admin listener */
    int auth_deny_status;           /* status of /v1/auth on a rejection: 429 (400-599) */
    bool auth_finish;               /* auth.finish: the gateway calls /v1/finish (config
                                     * check then does not warn about policies needing it) */
    char auth_route_header[64];     /* /v1/auth: the route name's header, lowercase ("x-sluice-route") */
    sl_client_ip_cfg client_ip;     /* who the client is behind proxies (client_ip.h) */
    bool legacy_headers;            /* also emit X-RateLimit-Limit/Remaining/Reset */
    bool log_raw_keys;              /* default false: keys are personal data */
    /* Named admin tokens (admin.tokens): the audit trail names the caller by its token's
     * name. admin.token is the token named "admin". */
    unsigned n_admin_tokens;
    struct {
        char name[64];
        char token[128];
        bool read_only;             /* role: read (GET only); default role: act */
    } admin_tokens[SL_ADMIN_TOKENS];
    bool admin_ui;                  /* admin.ui: the console at /ui/ (default true) */
    /* Logs (docs/observability.md); level and format as sl_log_level / sl_log_format. */
    struct {
        int level;                  /* 0 error, 1 warn, 2 info (default), 3 debug */
        int format;                 /* 0 text (default), 1 json */
        char file[SL_PATH_MAX];     /* "" = stderr */
        bool decisions;             /* the decision log: off by default */
        bool decisions_rejections_only; /* default true */
        uint32_t decisions_sample_ppm;  /* eligible decisions logged, per million (1000000) */
        uint32_t decisions_per_s;   /* lines per second at most (100) */
        uint32_t decisions_burst;   /* (100) */
        /* The rejection summary (log.rejections): one line per policy that refused, every
         * rejections_every_ns (10 s; 0 = off), with its rejections_top keys and addresses. */
        int64_t rejections_every_ns;
        uint32_t rejections_top;    /* (3, at most 4) */
    } log;
    /* Metrics and hot keys (observe:). */
    struct {
        uint32_t near_limit_ppm;    /* near-limit ratio, per million (800000 = 80 % used) */
        unsigned hot_counters;      /* hot-key counters per policy and worker; 0 = off (64) */
        int64_t hot_interval_ns;    /* one hot-key epoch (10 s) */
        unsigned hot_top;           /* keys per policy in sluice_hot_key_share (5) */
        unsigned series_seconds;    /* per-second ring of /v1/series, seconds; 0 = off (900) */
        unsigned series_max;        /* (policy, window) series the ring holds (64) */
    } observe;
    /* Audit trail of configuration changes (audit:). */
    struct {
        char file[SL_PATH_MAX];     /* JSON lines; "" = memory only */
        unsigned keep;              /* entries kept for GET /v1/audit (64) */
    } audit;
    struct {
        sl_store_type type;
        uint64_t max_keys;          /* memory: 0 = library default */
        sluice_on_full on_full;     /* memory: evict_lru (default) or refuse_new */
        unsigned shards;            /* memory: 0 = library default */
        char snapshot_path[SL_PATH_MAX]; /* memory: "" = no snapshots */
        int64_t snapshot_every_ns;  /* memory: 0 = only on shutdown */
        bool snapshot_start_empty;  /* memory: snapshot.on_damaged: start_empty (default refuse) */
        int snapshot_line, snapshot_col; /* where snapshot.path is written (config check) */
        char redis_addr[SL_ADDR_MAX];    /* redis: "host:port" (first seed for a cluster) */
        int64_t redis_timeout_ns;   /* redis: default 20 ms */
        char redis_key_secret[128]; /* redis: keyed-hash secret; "" = documented default */
        bool redis_time_local;      /* redis: time: local (the instance's clock, not TIME) */
        bool unready_when_down;     /* redis: /readyz answers 503 while the store is down and
                                       a policy fails closed (default: degraded, still 200) */
        uint64_t max_tokens;        /* outstanding settle/release tokens; 0 = SL_TOKENS_DEFAULT */
        sl_redis_conn_cfg redis;    /* redis: credentials, TLS, sentinel */
        struct {                    /* redis: store.local (on_store_error: local) */
            unsigned instances;     /* instances when no heartbeat view was read; 0 = none */
            uint32_t floor_ppm;     /* an instance's least share; 0 = 1/(2N) */
            int64_t heartbeat_ns;   /* heartbeat period (default 1 s; TTL 3 periods) */
        } local;
    } store;
    uint64_t overrides_max;         /* overrides.max: per-key overrides kept; 0 = 1,000,000 */
    sl_envoy_settings envoy;        /* process-wide (sl_config_set_envoy), not from the file */
} sl_settings;

/* Envoy's RateLimitResponse.RateLimit.Unit (rls.proto): the one table of codes, names and
 * lengths, for the config's `unit:`, limit overrides and answers. Code 0 is UNKNOWN. */
#define SL_ENVOY_UNIT_MAX 7 /* SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6, WEEK 7 */
typedef struct sl_envoy_unit {
    const char *name; /* as the config writes it: "second" ... "week" ("" for 0) */
    int64_t secs;     /* its length: a month is 30 days, a year 365 (as upstream) */
} sl_envoy_unit;
extern const sl_envoy_unit sl_envoy_units[SL_ENVOY_UNIT_MAX + 1];
/* The length of unit `code` in seconds, 0 for UNKNOWN or an unknown code. */
int64_t sl_envoy_unit_seconds(int code);
/* The unit whose length is `secs`, 0 when none. */
int sl_envoy_unit_of(int64_t secs);

/* Sets the envoyproxy/ratelimit settings every later load copies (not thread-safe: call
 * once at start, before any load). */
void sl_config_set_envoy(const sl_envoy_settings *e);
const sl_envoy_settings *sl_config_envoy(void);
/* The envoyproxy/ratelimit rules of cfg as upstream's /rlconfig prints them (malloc'd
 * text, one line per rule; "" when there are none; NULL without memory). */
char *sl_config_envoy_dump(const sl_config *cfg, size_t *len);

/* Loads and validates a config file. On success *out is a fully valid config and 0 is
 * returned; on failure every error found is in `diags` (may be NULL), *out is NULL and
 * SLUICE_EINVAL (or SLUICE_EIO, SLUICE_ENOMEM) is returned. The format (sluice or
 * envoyproxy/ratelimit) is detected from the top-level keys. */
int sl_config_load(const char *path, sl_config **out, sl_diag_list *diags);
/* The same, and `seen` (when not NULL) is given the bytes of a single file exactly as
 * they were read, before they are parsed (the server's audit trail hashes them: hashing
 * the file again later would name whatever a deploy wrote since). Not called for a
 * directory, nor when the file cannot be read. */
int sl_config_load_seen(const char *path, sl_config **out, sl_diag_list *diags,
                        void (*seen)(void *ud, const char *buf, size_t len), void *ud);
/* A directory (dir.c): every *.yaml / *.yml file in it, in name order (dotfiles skipped,
 * unless envoy compat mode says otherwise), each an envoyproxy/ratelimit document (one
 * domain; a domain in two files is an error unless merge_domains) or a sluice file (at
 * most one of them with server settings). Diagnostics name their file. sl_config_load
 * calls it for a directory. */
int sl_config_load_dir(const char *path, sl_config **out, sl_diag_list *diags);
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
size_t sl_config_domain_count(const sl_config *cfg); /* envoy domains (files' `domain:`) */
/* Policy i answers 503 when its store is unreachable (on_store_error: closed). */
bool sl_config_policy_fails_closed(const sl_config *cfg, size_t i);
/* Whether policy i holds something only the end of a response gives back (a concurrency
 * slot, a settle-later cost): behind a forward-auth gateway that cannot call /v1/finish
 * it behaves as a rate. msg receives the warning (config check prints it), line/col where
 * the policy is written. */
bool sl_config_policy_needs_finish(const sl_config *cfg, size_t i, char *msg, size_t len, int *line,
                                   int *col);

/* Whether policy i shapes (a leaky_bucket window, or on_exceed: delay) and is reachable
 * over gRPC (match.domain): Envoy cannot hold a request; msg says what it gets instead. */
bool sl_config_policy_grpc_shaping(const sl_config *cfg, size_t i, char *msg, size_t len, int *line,
                                   int *col);
/* Whether a policy keys on client_ip while /v1/auth reads it from a header with no
 * trusted proxy (no client_ip setting, or `client_ip: HEADER`): a client choosing its own
 * key. msg receives the warning (config check prints it), line/col where it applies. */
bool sl_config_client_ip_warning(const sl_config *cfg, char *msg, size_t len, int *line, int *col);

/* The unit a policy counts in (RateLimit-Policy qu=). */
typedef enum sl_quota_unit {
    SL_QU_REQUESTS = 0,
    SL_QU_CONTENT_BYTES = 1,
    SL_QU_CONCURRENT = 2,
    SL_QU_OTHER = 3 /* e.g. tokens: rendered as qu="<unit name>" */
} sl_quota_unit;

#endif /* SL_CONFIG_H */
