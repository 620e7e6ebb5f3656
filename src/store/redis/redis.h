/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redis.h -- the Redis store (one node, a Redis Cluster, or a primary found through
 * sentinels): per-worker connections (conn.c: our sockets and OpenSSL, hiredis's reply
 * reader) driven by the worker's sl_loop, one Lua script (src/store/redis/lua: common + one
 * file per algorithm + main) called with EVALSHA, all limits of a decision that share a
 * slot in one call.
 * Invariants: Redis holds only keyed hashes of (limiter name, key) (never raw identities);
 * a decision that cannot be answered in time fails with SLUICE_ESTORE (the caller applies
 * its failure mode); nothing blocks the loop. Times: nanoseconds; deadlines on the
 * process's CLOCK_MONOTONIC, decision times as given by the caller (sluice_time).
 */
#ifndef SL_REDIS_H
#define SL_REDIS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"
#include "core/loop.h"
#include "sluice.h"
#include "store/store.h"

struct redisReply;

/* ---- key slots and cluster topology (slot.c, pure) ---------------------------------- */

#define SL_REDIS_SLOTS 16384
#define SL_REDIS_HOST_MAX 64

/* CRC16/XMODEM (poly 0x1021, init 0, no reflection): "123456789" -> 0x31C3. */
uint16_t sl_redis_crc16(const void *p, size_t len);
/* The cluster slot of a key, hash tags included (SPECS §8.1). */
unsigned sl_redis_keyslot(const void *key, size_t len);

/* One slot range of a topology reply and its master. host "" means "the host of the
 * connection that answered" (a NULL or empty endpoint). */
typedef struct sl_redis_range {
    uint16_t lo, hi;
    char host[SL_REDIS_HOST_MAX];
    int port;
} sl_redis_range;

/* Parses a CLUSTER SHARDS (shards = true) or CLUSTER SLOTS reply into at most `cap`
 * ranges. Returns the number of ranges, or -1 when the reply is not of that shape (a
 * range with a bad slot number or no usable master is skipped, not fatal). */
int sl_redis_parse_topology(const struct redisReply *rep, bool shards, sl_redis_range *out,
                            int cap);

/* Makes a hiredis reader refuse arrays of more than SL_REDIS_MAX_ELEMENTS (its read
 * then fails) instead of allocating what the peer announces. Every reader gets it. */
#define SL_REDIS_MAX_ELEMENTS (1 << 20)
struct redisReader;
void sl_redis_reader_guard(struct redisReader *rd);

/* Parses "MOVED 3999 host:port" / "ASK 3999 host:port" (error reply text). Returns 1 for
 * MOVED, 2 for ASK, 0 for anything else; host "" means the same host. */
int sl_redis_parse_redirect(const char *s, size_t len, unsigned *slot, char *host,
                            size_t host_cap, int *port);

/* ---- keys, script arguments and replies (codec.c, pure) --------------------------- */

#define SL_REDIS_KEY_MAX 64
#define SL_REDIS_ITEM_ARGS 9  /* per item: algo, cost, group, flags, p1..p4, x (capcodec.c) */
#define SL_REDIS_HEAD_ARGS 8  /* op, time mode, mono_s, mono_n, wall_s, wall_n, slack, flags */

/* The script: common.lua + algorithms + main.lua, and its SHA1 (40 hex + NUL). */
const char *sl_redis_script(size_t *len);
const char *sl_redis_script_sha(void);
/* The same code as a Redis 7 function library (FUNCTION LOAD REPLACE, called with FCALL
 * under sl_redis_function_name(), "sluice_<16 hex of the SHA1>"): the library's top level
 * runs once at load, the function's body (main.lua) at each call. */
const char *sl_redis_library(size_t *len);
const char *sl_redis_function_name(void);
/* SHA1 of `len` bytes as 40 lowercase hex digits + NUL (used for EVALSHA). */
void sl_redis_sha1_hex(const void *p, size_t len, char out[41]);

/* Derives the 16-byte hashing key from the configured secret (any bytes). */
sl_hash_key sl_redis_secret_key(const void *secret, size_t len);
/* "sl:{<32 hex>}:<index>.<algo>": the tag is SipHash-128(secret, name NUL key), shared by
 * every window (index) of one rule and one key, so they land in one slot. Returns the
 * length (always < SL_REDIS_KEY_MAX). */
size_t sl_redis_key(const sl_hash_key *sk, const sluice_limiter *lim, const void *key,
                    size_t key_len, char out[SL_REDIS_KEY_MAX]);
/* envoyproxy/ratelimit's counter layout (compat mode, src/store/redis/lua/envoy_counter.lua):
 * an item whose key starts with SL_REDIS_ENVOY_TAG (the engine's SL_ENVOY_KEY_TAG) is the
 * plain integer at <prefix><key text up to its NUL><window start, unix seconds>, decided by
 * script algorithm SL_REDIS_ALGO_ENVOY. The key into out (NUL-terminated); its length, 0
 * when it is not such a key or does not fit in cap. */
/* Whole numbers separated by spaces (a stored state): how many (at most max), -1 when
 * malformed (codec.c; capcodec.c reads the capacity tails with it). */
int sl_redis_ints(const char *s, size_t len, int64_t *v, int max);

#define SL_REDIS_ENVOY_TAG 0xfe
#define SL_REDIS_ALGO_ENVOY 101
#define SL_REDIS_ENVOY_KEY_MAX 1024
size_t sl_redis_envoy_key(const char *prefix, const void *key, size_t key_len, int64_t window_s,
                          char *out, size_t cap);
/* Its stored value (a count) as the fixed window state of the window starting then. */
int sl_redis_envoy_state_parse(const char *s, size_t len, int64_t window_start_ns, void *state);
/* Decimal digits of v at p (no NUL); returns the end. At most 20 (21 signed) bytes. */
char *sl_redis_put_u64(char *p, uint64_t v);
char *sl_redis_put_i64(char *p, int64_t v);
/* The algorithm parameters the script needs (p[0..3]). SLUICE_EINVAL for an unknown
 * algorithm, SLUICE_ERANGE when a
 * parameter would exceed the scripts' exact range (values and products below 2^52). */
int sl_redis_params(const sluice_limiter *lim, sluice_time now, int64_t p[4]);
/* The same for compiled parameters (a limit override applied to a copy). */
struct sl_limit;
int sl_redis_params_of(const struct sl_limit *l, sluice_time now, int64_t p[4]);
/* Parses one stored state string into the C state of `lim` (state buffer of
 * lim's state_size, up to 8 + 8 * SL_SLIDING_LOG_MAX bytes for a sliding log).
 * Returns 1 parsed, 0 absent (empty), -1 malformed. */
int sl_redis_state_parse(const sluice_limiter *lim, const char *s, size_t len, void *state);
/* A parsed state as the scripts see it at now_ns after a clock stepped back (the script's
 * clock: Redis's, or the instances' wall clocks): a token or leaky bucket's last update,
 * a sliding log's newest entry or a penalty's last violation later than now is moved to
 * now (the log's entries and the block's end with it), exactly as the Lua does, so the
 * answer's retry-after is the one the script will honour. Fixed and sliding windows,
 * quotas and concurrency buckets are moved by their algorithms; GCRA's state carries no
 * time of its last update and is left as stored (docs/redis.md). */
void sl_redis_state_unstep(const sluice_limiter *lim, void *state, int64_t now_ns);

/* ---- capacity protection (capcodec.c) ------------------------------------------------ */

/* What an item carries beyond an algorithm's parameters (store.h's sl_sitem fields). */
typedef struct sl_redis_capx {
    uint8_t cls, cap, pgrp, bpath, blevel, outcome;
    uint64_t share;
    int64_t latency_ns;
} sl_redis_capx;

#define SL_REDIS_X_MAX 1024 /* the longest x argument (an adaptive limit with 8 classes) */

/* Parameters of the capacity algorithms (adaptive concurrency, penalty), for
 * sl_redis_params_of; SLUICE_ERANGE beyond the scripts' exact range (durations below
 * 2^52 ns, 52 days). */
int sl_redis_cap_params(const struct sl_limit *l, sluice_time now, int64_t p[4]);
/* An item's x argument: "" for a plain item, else "F T ..." (see capacity.lua); returns
 * its length. */
size_t sl_redis_cap_x(const struct sl_limit *l, const sl_redis_capx *cx, char *out, size_t cap);
/* Whether lim's stored state is a capacity one (its own algorithm or a tail), and its
 * parse (sl_redis_state_parse's contract). */
bool sl_redis_cap_state(const sluice_limiter *lim);
/* The numbers of algorithm algo's own part in a stored state of n numbers (the rest are
 * tails a limit with classes or borrowing keeps, or a previous configuration's). */
int sl_redis_own_len(int algo, int n);
int sl_redis_cap_state_parse(const sluice_limiter *lim, const char *s, size_t len, void *state);

/* ---- the client (client.c, node.c, request.c, lease.c) ------------------------------ */

typedef enum sl_redis_time {
    SL_REDIS_TIME_SERVER = 0, /* redis.call('TIME') inside the script (default) */
    SL_REDIS_TIME_CALLER = 1  /* the caller's sluice_time (time: local, tests) */
} sl_redis_time;

/* TLS settings (conn.c). Verification is on unless `insecure` (verify: false). */
#define SL_REDIS_FILE_MAX 512
typedef struct sl_redis_tls {
    bool on;
    bool insecure;            /* no certificate or name check (warned at start) */
    char ca_file[SL_REDIS_FILE_MAX];   /* "" = the system's trust store */
    char cert_file[SL_REDIS_FILE_MAX]; /* client certificate (mTLS), PEM, chain allowed */
    char key_file[SL_REDIS_FILE_MAX];  /* its key; "" = in cert_file */
    char server_name[256];    /* SNI and the name checked; "" = the host connected to */
} sl_redis_tls;

#define SL_REDIS_USER_MAX 128
#define SL_REDIS_PASS_MAX 256
#define SL_REDIS_UNIX_MAX 108 /* sun_path */

typedef struct sl_redis_opts {
    char seeds[512];          /* "host:port" or, for a cluster, "h:p,h:p,..."; IPv6 as
                                 "[::1]:6379"; with `sentinel`, the sentinels */
    bool cluster;
    /* ---- connection (conn.c, url.c, sentinel.c) ---- */
    char unix_path[SL_REDIS_UNIX_MAX]; /* a unix socket instead of seeds (one node) */
    char username[SL_REDIS_USER_MAX];  /* ACL user ("" = default); never printed */
    char password[SL_REDIS_PASS_MAX];  /* "" = none; never printed */
    unsigned db;              /* SELECT after connecting (not in a cluster) */
    sl_redis_tls tls;
    bool sentinel;            /* seeds are sentinels; `master` names the primary */
    char master[128];
    char sentinel_username[SL_REDIS_USER_MAX];
    char sentinel_password[SL_REDIS_PASS_MAX];
    /* connection events worth a log line (a node's error, its recovery), already free of
     * credentials; NULL = silent (the library never prints) */
    void (*log)(void *ud, const char *line);
    void *log_ud;
    bool per_slot;            /* a single node: still one call per cluster slot, as a
                                 cluster needs (default: every limit of a decision in one
                                 call); tests use it to reach the cross-slot path */
    sl_redis_time time_mode;
    int64_t timeout_ns;       /* per decision; 0 = 20 ms */
    const void *secret;       /* key hashing secret; NULL/0 = the documented default */
    size_t secret_len;
    int64_t expiry_slack_ms;  /* keys live this long past fresh; 0 = 1 s (server time)
                                 or 1 h (caller time: its clock may not follow Redis's) */
    int64_t cache_max_ns;     /* an over-limit answer is reused for at most this long
                                 (then Redis is asked again: another instance may have
                                 reset the key or refunded units); 0 = 1 s */
    unsigned cache_slots;     /* local over-limit cache entries (power of two); 0 = 4096;
                                 1 disables the cache */
    unsigned breaker_failures;/* consecutive failures of a node that open its breaker; 0 = 5 */
    int64_t breaker_open_ns;  /* how long it stays open before a probe; 0 = 200 ms */
    int64_t backoff_min_ns;   /* reconnection backoff; 0 = 20 ms */
    int64_t backoff_max_ns;   /* 0 = 320 ms (a restarted Redis is found within a second) */
    unsigned max_pending;     /* decisions in flight per client; 0 = 1024 */
    /* Leasing (hot keys), the default for limiters that set none (a policy's `leasing`
     * sets its limiters' own): a rate limit (gcra, token bucket, fixed or sliding
     * window) takes `lease_slice` units in one call and spends them locally for up to
     * `lease_ns`; the unused rest is given back when the lease ends (unless its window
     * has passed). 0 = off (strict: one call per decision). Overshoot bound: clients
     * (instances x workers) x slice units per window (units taken near the end of a
     * window or bucket period and spent after it); never more than the limit is taken
     * from Redis at any moment. See lease.c. */
    unsigned lease_slice;
    int64_t lease_ns;         /* 0 = 100 ms */
    /* envoyproxy/ratelimit's counters (--compat envoy-ratelimit): SL_REDIS_ENVOY_TAG items
     * under CACHE_KEY_PREFIX, living one unit plus a random 0..jitter-1 seconds
     * (EXPIRATION_JITTER_MAX_SECONDS), as upstream's INCRBY + EXPIRE leave them */
    bool envoy_keys;
    char envoy_prefix[128];
    int64_t envoy_jitter_s;
} sl_redis_opts;

void sl_redis_opts_default(sl_redis_opts *o);

/* ---- store URLs (url.c) ---------------------------------------------------------------
 *   redis://[user[:pass]@]host[:port][/db][?opts]       rediss:// = TLS
 *   redis+unix://[user[:pass]@]/path[?db=N&...]          unix:///path[?db=N]
 *   redis-cluster://[user[:pass]@]h:p,h:p[?opts]         rediss-cluster:// or ?tls=1
 *   redis-sentinel://[user[:pass]@]h:p,h:p/master[/db][?sentinel_password=...]
 * IPv6 hosts in brackets; user and password percent-decoded; default port 6379 (26379
 * for sentinels). Options: timeout_ms, time=local|redis, lease, db, tls, tls_verify,
 * tls_ca_file (ca_file), tls_cert_file (cert_file), tls_key_file (key_file),
 * tls_server_name (server_name, sni), sentinel_username, sentinel_password. */
/* Fills o from url (fields the URL does not name are left as they are). SLUICE_EINVAL
 * with err = "column N: what is wrong" (1-based; err may be NULL). */
int sl_redis_url_parse(const char *url, sl_redis_opts *o, char *err, size_t errlen);
/* The same without the message. */
int sl_redis_parse_url(const char *url, sl_redis_opts *o);
/* Whether `url` uses one of the schemes above. */
bool sl_redis_url_is_redis(const char *url);
/* Whether `url` carries a password (the caller warns: a command line is visible in ps). */
bool sl_redis_url_has_password(const char *url);
/* "redis 127.0.0.1:6379 db 2 (TLS, user alice)": what o connects to, never a password. */
void sl_redis_opts_describe(const sl_redis_opts *o, char *out, size_t cap);
/* Checks what can be checked before connecting (files of the TLS settings, options that
 * cannot go together). SLUICE_EINVAL with a message. */
int sl_redis_opts_check(const sl_redis_opts *o, char *err, size_t errlen);
/* The options of a server's Redis store: the config file's connection settings `cs`
 * (may be NULL), then the command line's `url` (NULL, "" or "redis:" = none: `addr`
 * and `cluster` from the config file instead, where addr may be host:port, [v6]:port,
 * unix:/path or a URL), then sl_redis_opts_check. Warnings (a password on the command
 * line, verification off) go to o->log. SLUICE_EINVAL with a message that never repeats
 * the URL. */
struct sl_redis_conn_cfg;
int sl_redis_opts_configure(sl_redis_opts *o, const char *url, const char *addr, bool cluster,
                            const struct sl_redis_conn_cfg *cs, char *err, size_t errlen);
/* A log function for opts.log that writes to stderr, one line per distinct message per
 * ten seconds over the whole process (every worker's client reports the same event). */
void sl_redis_log_stderr(void *ud, const char *line);

/* Counters of one client (one worker), single writer, read by anyone (relaxed). Every
 * decision that did not get a normal Redis answer is counted in exactly one of
 * timeouts, errors, breaker_open, node_down, pool_full. */
typedef struct sl_redis_stats {
    _Atomic uint64_t decisions;    /* decisions asked of the client */
    _Atomic uint64_t calls;        /* EVALSHA commands sent (retries and refunds included) */
    _Atomic uint64_t local_rejects;/* answered by the over-limit cache (no round trip) */
    _Atomic uint64_t never_rejects;/* kept at 0: a cost above capacity goes to the script (issue 27) */
    _Atomic uint64_t timeouts;     /* no answer within timeout_ns */
    _Atomic uint64_t errors;       /* error replies, lost connections, bad replies */
    _Atomic uint64_t breaker_open; /* refused at once: its node's breaker open */
    _Atomic uint64_t node_down;    /* refused at once: the node is not connected */
    _Atomic uint64_t pool_full;    /* refused at once: max_pending in flight */
    _Atomic uint64_t refunds;      /* cross-slot refund calls sent */
    _Atomic uint64_t moved, ask, noscript, tryagain;
    _Atomic uint64_t reconnects;   /* connections (re)established */
    _Atomic uint64_t topology;     /* slot map refreshes applied */
    _Atomic uint64_t mismatches;   /* script and C disagreed on an admission (0 expected) */
    _Atomic uint64_t leases;       /* slices taken */
    _Atomic uint64_t lease_local;  /* decisions admitted from a held slice (no round trip) */
    _Atomic uint64_t lease_returned; /* units given back */
    _Atomic uint64_t lease_lapsed; /* units not given back: their window had passed */
    _Atomic uint64_t late_refunds; /* timed-out decisions Redis applied later: given back */
    _Atomic uint64_t late_unknown; /* timed-out decisions whose outcome never came back */
    _Atomic uint64_t lease_held;   /* units held in leases now (a gauge): this client's
                                      share of the overshoot bound at this moment */
    /* connections (conn.c): failures while connecting, by cause */
    _Atomic uint64_t auth_failures;   /* AUTH refused (WRONGPASS...), NOAUTH */
    _Atomic uint64_t tls_failures;    /* TLS handshake, certificate or name check */
    _Atomic uint64_t connect_failures;/* refused, unreachable, timed out, SELECT/ROLE */
    _Atomic uint64_t clusterdown;     /* CLUSTERDOWN replies (retried like TRYAGAIN) */
    _Atomic uint64_t cluster_retries; /* calls sent again after TRYAGAIN/CLUSTERDOWN */
    _Atomic uint64_t failovers;       /* primary address changed (sentinel) */
} sl_redis_stats;

/* The health of one node as the metrics show it (copied under the client's lock). */
typedef struct sl_redis_node_health {
    char addr[SL_REDIS_UNIX_MAX + 8]; /* "host:port", "[v6]:port" or the socket path */
    int state;                 /* 0 down, 1 connecting, 2 up */
    bool not_answering;        /* connected, but its breaker is open: failures in a row */
    uint64_t auth_failures, tls_failures;
    char last_error[200];      /* "" = none since it was last up; never a credential */
} sl_redis_node_health;

typedef struct sl_redis sl_redis;

/* Completions are the store interface's (store.h): `rc` SLUICE_OK with the answer, or
 * SLUICE_ESTORE (or another error) with res NULL; res is valid during the call only. */
typedef sl_store_cb sl_redis_cb;

/* A client bound to `loop` (it adds a timerfd and its connections to it). Connecting is
 * asynchronous: creating succeeds while Redis is down. NULL with *err on bad options. */
sl_redis *sl_redis_create(sl_loop *loop, const sl_redis_opts *o, int *err);
/* Destroying answers every call still waiting (SLUICE_ESTORE) and drops what the client
 * held (slices, references to limiters). */
void sl_redis_destroy(sl_redis *r);
const sl_redis_stats *sl_redis_stats_get(const sl_redis *r);
/* True when every known node is connected and its breaker is closed. */
bool sl_redis_ready(const sl_redis *r);
/* Copies the health of at most `cap` nodes (any thread); returns how many. With a
 * sentinel, the primary (once known) comes first, then the sentinel in use. */
int sl_redis_health(const sl_redis *r, sl_redis_node_health *out, int cap);

/* Decides `items` as one all-or-nothing decision with the rules of store/group.h (items
 * and keys are copied; the limiters are referenced until the client is done with them,
 * late replies and lease slices included). `now` is the caller's time. The callback runs
 * later from the loop, or at once for answers that need no round trip. Returns SLUICE_OK
 * when the callback was or will be called, or an argument error (no callback). */
int sl_redis_decide(sl_redis *r, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                    sl_redis_cb cb, void *ud);
/* Settles one reservation (delta = actual - reserved units; res->r[0] the state after),
 * releases a concurrency lease (res->allowed 0: it had expired). */
int sl_redis_settle(sl_redis *r, const sl_sitem *item, int64_t delta, sluice_time now,
                    sl_redis_cb cb, void *ud);
int sl_redis_release(sl_redis *r, const sl_sitem *item, uint64_t lease, sluice_time now,
                     sl_redis_cb cb, void *ud);
/* Claims operation `op` (a bit) of settle/release token `id` for `ttl_ns`: res->allowed is
 * 1 for the first claim anywhere, 0 when it was claimed already (by any instance sharing
 * this Redis). */
int sl_redis_claim(sl_redis *r, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now, sl_redis_cb cb,
                   void *ud);
/* Deletes the state of every item (limiter and key; costs ignored): SL.RESET. This
 * process's over-limit caches and this client's slices of those keys are dropped; other
 * instances may answer from theirs for at most cache_max_ns. */
int sl_redis_reset(sl_redis *r, const sl_sitem *items, size_t n, sluice_time now, sl_redis_cb cb,
                   void *ud);

/* Sends the commands queued during this loop turn now (call before the loop sleeps;
 * without it they go out on the next EPOLLOUT), and frees the connections the turn
 * closed: call it between loop turns, never from a callback of r's loop. */
void sl_redis_flush(sl_redis *r);

/* For tests and tools: decide (group 0, no flags) and run the loop until the answer (or
 * twice the timeout) arrives; the answer as the public API reports it. */
int sl_redis_decide_sync(sl_redis *r, const sluice_item *items, size_t n, sluice_time now,
                         sluice_decision *out);
/* The same for any call: `issue` starts it (arguments in `arg`, answer to cb/ud); the
 * answer, or after twice the timeout SLUICE_ESTORE. */
typedef int (*sl_redis_issue_fn)(sl_redis *r, const void *arg, sluice_time now, sl_redis_cb cb, void *ud);
int sl_redis_wait(sl_redis *r, sl_redis_issue_fn issue, const void *arg, sluice_time now,
                  sluice_decision *out);
/* The arguments of the calls above, for sl_redis_issue: items (decide 'd', reset 'x') or
 * a token claim ('c'). */
typedef struct sl_redis_args {
    char op;
    const sluice_item *items;
    size_t n;
    uint64_t id;    /* claim */
    unsigned bit;   /* claim */
    int64_t ttl_ns; /* claim */
} sl_redis_args;
int sl_redis_issue(sl_redis *r, const void *args, sluice_time now, sl_redis_cb cb, void *ud);
/* Runs the loop for up to `ms` milliseconds (tests: let connections settle). */
void sl_redis_run(sl_redis *r, int ms);

#endif /* SL_REDIS_H */
