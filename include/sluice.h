/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sluice.h -- libsluice, the embeddable rate limiting, quota and throttling engine.
 *
 * Units: every time is an int64_t count of nanoseconds; costs and limits are unsigned
 * whole units. Decisions never read the clock: the caller passes `sluice_time`, which
 * carries a monotonic reading (rate windows) and a wall-clock reading (calendar quotas).
 * Errors are negative SLUICE_E* codes (see sluice_strerror); allowed/denied is a result.
 * Ownership: arguments are borrowed for the duration of the call unless a comment says
 * "takes ownership" or "copied". Whoever creates an object destroys it.
 * The library never aborts on bad input and never prints.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLUICE_VERSION "0.1.0"

/* ---- version ------------------------------------------------------------------ */

/* The version this library was built as: "0.1.0", or what `git describe` said at build
 * time ("0.1.0-12-gabc1234", "-dirty" for a modified tree), or a packager's version.
 * SLUICE_VERSION is the release the header belongs to. A static string; never NULL. */
const char *sluice_version(void);

/* ---- errors ------------------------------------------------------------------- */

enum {
    SLUICE_OK = 0,
    SLUICE_EINVAL = -1,    /* an argument or a limit specification is invalid */
    SLUICE_ENOMEM = -2,    /* out of memory (never an abort) */
    SLUICE_EFULL = -3,     /* store at capacity and configured to refuse new keys */
    SLUICE_ECORRUPT = -4,  /* snapshot corrupt, truncated or from another format */
    SLUICE_EIO = -5,       /* file system error (errno is kept) */
    SLUICE_ENOTFOUND = -6, /* no such key, lease, time zone or name */
    SLUICE_ERANGE = -7,    /* a number does not fit (cost overflow, limit too large) */
    SLUICE_ESTORE = -8,    /* shared state unreachable (the policy's failure mode applies) */
    SLUICE_ETOOMANY = -9   /* too many limits in one decision (SLUICE_MAX_ITEMS) */
};

/* A static English message for an error code; never NULL. */
const char *sluice_strerror(int err);

/* ---- time --------------------------------------------------------------------- */

/* retry_after_ns value meaning "this request can never be admitted" (cost > capacity). */
#define SLUICE_NEVER INT64_C(-1)

#define SLUICE_NS_PER_MS INT64_C(1000000)
#define SLUICE_NS_PER_S INT64_C(1000000000)

typedef struct sluice_time {
    int64_t mono_ns; /* monotonic clock: rate windows, buckets, leases */
    int64_t wall_ns; /* UTC nanoseconds since the Unix epoch: calendar quotas, snapshots */
} sluice_time;

/* A clock is either the system clock or a manual one that only its owner moves. */
typedef struct sluice_clock sluice_clock;

sluice_clock *sluice_clock_create_system(void);
/* A manual clock starting at `wall_ns`; its monotonic reading starts at 1 s and moves
 * with every set/advance (set may move wall time backwards; monotonic never goes back). */
sluice_clock *sluice_clock_create_manual(int64_t wall_ns);
void sluice_clock_destroy(sluice_clock *clock);
/* One reading of both clocks. Thread-safe. */
sluice_time sluice_clock_now(const sluice_clock *clock);
/* Manual clocks only; SLUICE_EINVAL on the system clock or a negative step
 * (SLUICE_ERANGE outside SLUICE_CLOCK_WALL_MIN_NS..MAX_NS, see the additions below). */
int sluice_clock_advance(sluice_clock *clock, int64_t delta_ns);
int sluice_clock_set_wall(sluice_clock *clock, int64_t wall_ns);

/* ---- limits ------------------------------------------------------------------- */

typedef enum sluice_algo {
    SLUICE_FIXED_WINDOW = 1,   /* count per aligned window; up to 2x at a boundary */
    SLUICE_SLIDING_WINDOW = 2, /* two-window weighted counter (approximation, see docs) */
    SLUICE_SLIDING_LOG = 3,    /* exact; one timestamp per admitted unit, limit capped */
    SLUICE_TOKEN_BUCKET = 4,   /* rate + burst, lazy refill */
    SLUICE_GCRA = 5,           /* token bucket admissions in one timestamp (redis-cell) */
    SLUICE_LEAKY_BUCKET = 6,   /* shaper: returns a delay; rejects beyond queue/delay bound */
    SLUICE_CONCURRENCY = 7,    /* in-flight count with expiring leases */
    SLUICE_QUOTA = 8,          /* budget per calendar period in an IANA time zone */
    SLUICE_ADAPTIVE_CONCURRENCY = 9 /* concurrency whose limit moves with latency and drops
                                       (issue 17: see sluice_limiter_create_adaptive) */
} sluice_algo;

/* "gcra", "token_bucket", ...; NULL for an unknown value. */
const char *sluice_algo_name(sluice_algo algo);
/* Parses the names above; SLUICE_ENOTFOUND for an unknown name. */
int sluice_algo_parse(const char *name, sluice_algo *out);

typedef enum sluice_period {
    SLUICE_PERIOD_HOUR = 1,
    SLUICE_PERIOD_DAY = 2,
    SLUICE_PERIOD_WEEK = 3, /* ISO weeks: Monday 00:00 local time */
    SLUICE_PERIOD_MONTH = 4
} sluice_period;

/* The parameters of one limit. Zero-initialise it, then set the fields the algorithm
 * uses; sluice_limiter_create validates and copies it (strings included). */
typedef struct sluice_limit_spec {
    sluice_algo algo;
    /* Identity of the counters: limits with the same name (and index) share state, so
     * a reloaded limit keeps its counters. Required, at most 255 bytes. */
    const char *name;
    uint32_t index;       /* distinguishes the windows of one rule (0, 1, 2, ...) */
    uint64_t limit;       /* units per period (rate algorithms and windows), the
                             concurrency maximum, or the quota per calendar period */
    int64_t period_ns;    /* the rate's period or the window length (not quota/concurrency) */
    uint64_t burst;       /* token bucket, GCRA, leaky bucket: capacity; 0 means `limit` */
    int64_t max_delay_ns; /* leaky bucket: longest delay handed out; beyond it, reject */
    int64_t lease_ns;     /* concurrency: a lease not released by then is reclaimed */
    sluice_period quota_period; /* quota only */
    const char *tz;             /* quota only: IANA zone name ("Europe/Madrid"); NULL = UTC */
} sluice_limit_spec;

/* A compiled, immutable limit. Thread-safe to share. */
typedef struct sluice_limiter sluice_limiter;

/* Validates `spec`; on error returns NULL and sets *err (and, when errbuf is not NULL,
 * a one-line explanation such as "burst 5 is below ... "). */
sluice_limiter *sluice_limiter_create(const sluice_limit_spec *spec, int *err, char *errbuf,
                                      size_t errbuf_len);
void sluice_limiter_destroy(sluice_limiter *lim);
const sluice_limit_spec *sluice_limiter_spec(const sluice_limiter *lim);
/* The capacity a client can see: burst (buckets, GCRA), limit (windows, quota, concurrency). */
uint64_t sluice_limiter_capacity(const sluice_limiter *lim);

/* ---- decisions ---------------------------------------------------------------- */

/* The answer for one limit. */
typedef struct sluice_result {
    int allowed;            /* 1 admitted, 0 rejected */
    uint64_t limit;         /* the capacity (see sluice_limiter_capacity) */
    uint64_t remaining;     /* units still available after this decision */
    int64_t reset_after_ns; /* until the state is back to fresh (full bucket, empty window) */
    int64_t retry_after_ns; /* 0 when allowed; the exact earliest time from now at which the
                               same request would be admitted; SLUICE_NEVER when it never can */
    int64_t delay_ns;       /* leaky bucket: how long to hold the admitted request */
    uint64_t lease;         /* concurrency: the lease to release (0 otherwise) */
} sluice_result;

/* One limit applied to one key with one cost. */
typedef struct sluice_item {
    const sluice_limiter *limiter;
    const void *key; /* any bytes; not copied */
    size_t key_len;
    uint64_t cost;   /* 0 is a pure peek: nothing consumed, results still reported */
} sluice_item;

#define SLUICE_MAX_ITEMS 32

typedef struct sluice_decision {
    int allowed;    /* 1 iff every item admitted */
    int deciding;   /* index of the deciding item: on rejection the one with the longest
                       retry-after; on admission the one with the least remaining share */
    size_t n;
    sluice_result results[SLUICE_MAX_ITEMS];
} sluice_decision;

/* The memory store: a bounded, sharded, thread-safe table of per-key state. */
typedef struct sluice_store sluice_store;

typedef enum sluice_on_full {
    SLUICE_EVICT_LRU = 0,  /* evict the least recently used key (counted) */
    SLUICE_REFUSE_NEW = 1  /* refuse decisions for new keys with SLUICE_EFULL (counted) */
} sluice_on_full;

typedef struct sluice_store_options {
    uint64_t max_keys;      /* capacity across all limits; 0 = 1,000,000 */
    sluice_on_full on_full;
    unsigned shards;        /* power of two; 0 = default (256) */
    const uint8_t *seed;    /* 16 bytes of hash seed; NULL = random per process */
} sluice_store_options;

typedef struct sluice_store_stats {
    uint64_t keys;          /* entries held now */
    uint64_t capacity;
    uint64_t bytes;         /* memory held by the tables */
    uint64_t expired;       /* dropped because equivalent to fresh */
    uint64_t evicted;       /* evicted by LRU under pressure */
    uint64_t refused;       /* new keys refused under pressure */
} sluice_store_stats;

sluice_store *sluice_store_create(const sluice_store_options *opt, int *err);
void sluice_store_destroy(sluice_store *st);
void sluice_store_stats_get(sluice_store *st, sluice_store_stats *out);

/* Decides `items` all-or-nothing: every limit is checked under its key and, only if all
 * admit, all are consumed. Thread-safe; takes only the shard locks of the keys involved.
 * Returns SLUICE_OK (see out->allowed) or an error (nothing consumed). */
int sluice_decide(sluice_store *st, const sluice_item *items, size_t n, sluice_time now,
                  sluice_decision *out);

/* Decides n independent one-item decisions: item i is decided exactly
 * as sluice_decide(st, &items[i], 1, now, ...) would, in order (a later item on the same
 * key sees the earlier ones), with its result in out[i]. Faster than n calls for callers
 * that have several requests at hand (pipelined clients, event loops): every key is
 * hashed and its memory fetched a few items ahead of its decision. Not all-or-nothing:
 * each item stands alone. Thread-safe, same locking as sluice_decide.
 * Returns the number of items decided (n when all were). A return k < n means items[k]
 * could not be decided (an unregistered limiter or NULL key: SLUICE_EINVAL; no room for
 * a new key: SLUICE_EFULL, as sluice_decide would return for it): nothing from k on was
 * decided or consumed and out[k..] is unchanged. SLUICE_EINVAL (negative) for a NULL
 * store, NULL items/out with n > 0, or n > INT32_MAX. */
int sluice_decide_batch(sluice_store *st, const sluice_item *items, size_t n, sluice_time now,
                        sluice_result *out);

/* Reserve-then-settle: after a decision that consumed `reserved`, settle to `actual`.
 * The difference is refunded (never above capacity, never into a window that has passed)
 * or charged (even past the limit: the work was done). Nothing is counted twice. */
int sluice_settle(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                  uint64_t reserved, uint64_t actual, sluice_time now, sluice_result *out);

/* sluice_settle for a reservation made at `reserved_at` (the time passed to the decision
 * that reserved): a refund is applied only while the window or calendar period that
 * counted the reservation is still current (a reservation made before midnight cannot
 * make room in the next day); charges always apply. */
int sluice_settle_at(sluice_store *st, const sluice_limiter *lim, const void *key,
                     size_t key_len, uint64_t reserved, uint64_t actual, sluice_time reserved_at,
                     sluice_time now, sluice_result *out);

/* Concurrency: releases a lease returned by a decision. SLUICE_ENOTFOUND when the lease
 * has already expired (its slot was reclaimed) or the key is unknown. */
int sluice_release(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len,
                   uint64_t lease, sluice_time now);

/* Forgets the state of one key under one limit. */
int sluice_reset(sluice_store *st, const sluice_limiter *lim, const void *key, size_t key_len);

/* Limiters must be registered with the store that holds their state (so snapshots can
 * name them and capacity can be shared). A limiter registered under an existing
 * name+index with different parameters carries the existing state over (see docs). */
int sluice_store_register(sluice_store *st, const sluice_limiter *lim);

/* Writes every live entry to `path` (temporary file, fsync, rename). */
int sluice_store_snapshot(sluice_store *st, const char *path, sluice_time now);
/* Loads a snapshot written by sluice_store_snapshot into an empty store whose limiters
 * are registered. All or nothing: a corrupt or truncated file loads nothing and returns
 * SLUICE_ECORRUPT with a message in errbuf. Entries of limiters no longer registered are
 * skipped and counted in *skipped (may be NULL). */
int sluice_store_restore(sluice_store *st, const char *path, sluice_time now, uint64_t *skipped,
                         char *errbuf, size_t errbuf_len);

/* ---- additions (issue 12): manual clock range, per-limiter pressure, snapshot care -- */

/* The wall readings a manual clock accepts: 1970-01-01 to 2200-01-01 UTC, in ns. Outside
 * that range sluice_clock_set_wall/_advance return SLUICE_ERANGE and change nothing
 * (sluice_clock_create_manual returns NULL); the monotonic reading is bounded too. */
#define SLUICE_CLOCK_WALL_MIN_NS INT64_C(0)
#define SLUICE_CLOCK_WALL_MAX_NS (INT64_C(7258118400) * SLUICE_NS_PER_S)

/* sluice_clock_set_wall / sluice_clock_advance with milliseconds, range-checked before
 * any conversion (a caller can pass a client's integer as it is): SLUICE_ERANGE outside
 * the range above (e.g. 9223372036855 ms), SLUICE_EINVAL on the system clock or a
 * negative step. */
int sluice_clock_set_wall_ms(sluice_clock *clock, int64_t wall_ms);
int sluice_clock_advance_ms(sluice_clock *clock, int64_t delta_ms);

/* What memory pressure did to one limiter (its name + index: every limiter object
 * registered under them shares these). Under pressure the store drops fresh-equivalent
 * keys first, then evicts the cheapest (a key seen once before one used repeatedly,
 * exhausted and recently active keys last, least recently used first); each limiter is
 * guaranteed `share` keys (max_keys divided among the limiters that hold keys) and
 * borrows free room beyond it, and a limiter at or over its share only ever evicts its
 * own keys. See docs/algorithms.md, "Memory pressure". */
typedef struct sluice_limiter_stats {
    uint64_t keys;     /* entries held now */
    uint64_t share;    /* keys guaranteed to it under pressure, at the moment */
    uint64_t evicted;  /* its keys evicted while their state was not fresh (each a reset) */
    uint64_t expired;  /* its fresh-equivalent keys dropped (no behaviour change) */
    uint64_t refused;  /* its new keys refused for lack of room */
} sluice_limiter_stats;

/* SLUICE_EINVAL for a NULL argument or a limiter never registered with `st`. */
int sluice_store_limiter_stats(sluice_store *st, const sluice_limiter *lim,
                               sluice_limiter_stats *out);

/* sluice_store_snapshot that says what failed: on error *sys_errno (may be NULL) is the
 * errno of the failing system call (0 when none, e.g. SLUICE_ENOMEM) and errbuf a
 * one-line message naming the step ("cannot create a temporary file in DIR: ..."). */
int sluice_store_snapshot_ex(sluice_store *st, const char *path, sluice_time now,
                             int *sys_errno, char *errbuf, size_t errbuf_len);

/* Moves a damaged snapshot aside, never overwriting anything: renames `path` to
 * "PATH.damaged-<unix_s>" (or "...-<unix_s>.N" when that exists). On success the new
 * name is written to aside (when not NULL and large enough). SLUICE_ENOTFOUND when
 * `path` does not exist; SLUICE_EIO with *sys_errno set otherwise. */
int sluice_snapshot_move_aside(const char *path, int64_t unix_s, char *aside,
                               size_t aside_len, int *sys_errno);

/* Checks that snapshots can be written at `path`: its directory exists and a file can be
 * created, written, synced and removed in it (the file itself is not touched).
 * SLUICE_OK, or SLUICE_EIO with *sys_errno and a message in errbuf. */
int sluice_snapshot_check_dir(const char *path, int *sys_errno, char *errbuf,
                              size_t errbuf_len);


/* ---- additions (issue 17): adaptive concurrency ----------------------------------- */

/* How a request that held a concurrency slot ended, for the adaptive controller. */
typedef enum sluice_outcome {
    SLUICE_OUTCOME_OK = 0,      /* the backend answered: its latency is a sample */
    SLUICE_OUTCOME_ERROR = 1,   /* an application error: counted, not timed */
    SLUICE_OUTCOME_DROPPED = 2  /* overload: timeout, 503, refused connection */
} sluice_outcome;

typedef enum sluice_controller {
    SLUICE_GRADIENT2 = 1, /* latency gradient against the no-load latency (the default) */
    SLUICE_VEGAS = 2,     /* estimated queue kept inside a band */
    SLUICE_AIMD = 3       /* +increase per window, x backoff on drops; needs timeout_ns */
} sluice_controller;

/* The parameters of an adaptive concurrency limit (docs/capacity.md). Zero-initialise it
 * and set min, max and initial; every other field left 0 takes its default. */
typedef struct sluice_adaptive_spec {
    sluice_controller controller; /* 0 = SLUICE_GRADIENT2 */
    uint32_t min, max, initial;   /* slots: 1 <= min <= initial <= max <= 2^24 - 1 */
    int64_t window_ns;            /* the limit moves at most once per window (100 ms) */
    uint32_t min_samples;         /* samples a window needs (10) */
    uint32_t smoothing_ppm;       /* share of a step taken per window (gradient2 0.2, vegas 0.5) */
    uint32_t tolerance_ppm;       /* gradient2: latency up to noload x this is no queue (1.1) */
    uint32_t queue;               /* gradient2: growth per window without queueing (sqrt(limit)) */
    uint32_t alpha_min, alpha_pct, beta_min, beta_pct; /* vegas band (1, 5 %; 2, 10 %) */
    uint32_t increase;            /* aimd: slots per window (1) */
    uint32_t backoff_ppm;         /* every controller, on drops (0.9) */
    int64_t timeout_ns;           /* an ok sample slower than this is a drop (none; aimd: required) */
    uint32_t probe_after;         /* windows stuck before a no-load probe (5); SLUICE_NO_PROBE: never */
    int64_t probe_every_ns;       /* periodic probe (off; vegas 60 s); -1: off */
} sluice_adaptive_spec;

#define SLUICE_NO_PROBE UINT32_MAX

/* An adaptive concurrency limiter: spec->algo must be SLUICE_ADAPTIVE_CONCURRENCY and
 * spec->lease_ns set (spec->limit is ignored: the limit moves within [min, max]). A plain
 * sluice_limiter_create of that algorithm uses gradient2 with min 1, max spec->limit and
 * initial max/4 (at least 1). Errors as sluice_limiter_create. */
sluice_limiter *sluice_limiter_create_adaptive(const sluice_limit_spec *spec,
                                               const sluice_adaptive_spec *adaptive, int *err,
                                               char *errbuf, size_t errbuf_len);

/* Releases a lease of a concurrency limit with what happened to the request: for an
 * adaptive limit, its latency (negative: unknown, the outcome still counts) and outcome
 * are a sample for the controller; for a fixed one, the same as sluice_release.
 * SLUICE_ENOTFOUND when the lease had expired (an expired lease already counted as a
 * drop) or the key is unknown. */
int sluice_release_sample(sluice_store *st, const sluice_limiter *lim, const void *key,
                          size_t key_len, uint64_t lease, int64_t latency_ns,
                          sluice_outcome outcome, sluice_time now);

/* What an adaptive limit stands at for one key (nothing changes). */
typedef struct sluice_adaptive_state {
    uint32_t limit;        /* the concurrency enforced now (min while probing) */
    uint32_t in_flight;    /* slots held now */
    int64_t noload_ns;     /* estimated no-load latency (0: not measured yet) */
    int64_t last_avg_ns;   /* average latency of the last closed window */
    int probing;           /* 1 while the no-load latency is being measured at min */
} sluice_adaptive_state;

/* SLUICE_EINVAL for a limiter that is not adaptive or not registered; a key never seen
 * reports the fresh state (initial, nothing in flight). */
int sluice_adaptive_get(sluice_store *st, const sluice_limiter *lim, const void *key,
                        size_t key_len, sluice_time now, sluice_adaptive_state *out);


/* ---- additions (issues 25, 21): the policy engine ---------------------------------- */

/*
 * A sluice configuration (the YAML of `sluice serve -c`, docs/config.md) loaded into an
 * engine that decides requests against its own memory store, as the server does: match
 * the request's attributes, compose keys, decide every window all-or-nothing, and answer
 * with the status, the header pairs and the numbers the server sends.
 *
 * Threads: every function taking a sluice_engine is thread-safe and may run concurrently
 * with a reload; a decision takes only the store's shard locks of its keys. A
 * sluice_verdict is one thread's at a time (one per request in flight, or one per thread
 * reused for every decision: deciding into it again forgets the previous answer).
 * Ownership: the engine owns its configuration, generations and store; the caller owns
 * each verdict (sluice_verdict_create/_destroy) and what it passes in (borrowed for the
 * call). An answer, its headers and body belong to the verdict and stay valid until the
 * verdict decides again or is destroyed. Override records returned by
 * sluice_override_get are the caller's (sluice_override_info_free); those passed to an
 * iteration callback are valid during the call only.
 * Nothing on the decision path allocates. Errors are SLUICE_E* codes as above.
 */
typedef struct sluice_engine sluice_engine;
typedef struct sluice_verdict sluice_verdict;

/* Loads a configuration file (a file, or a directory of *.yaml as `serve -c` reads) or
 * a configuration given as text (`name` is what messages call it; NULL: "config"). On
 * error NULL, *err set and errbuf holds the same "file:line:col: message" lines as
 * `sluice config check` prints (one per line, as many as fit). The configuration must
 * use the memory store (`store: memory:`, the default): SLUICE_EINVAL otherwise. */
sluice_engine *sluice_engine_load_file(const char *path, int *err, char *errbuf,
                                       size_t errbuf_len);
sluice_engine *sluice_engine_load_string(const char *text, size_t len, const char *name,
                                         int *err, char *errbuf, size_t errbuf_len);
/* Replaces the configuration, keeping every counter whose window keeps its identity
 * (policy, plan and window index: as the server's reload). All or nothing: on error the
 * configuration in force stays and errbuf says why as above. Decisions running meanwhile
 * finish on the configuration they started with. The store's own settings (max_keys,
 * shards, on_full) are the first configuration's. */
int sluice_engine_reload_file(sluice_engine *e, const char *path, char *errbuf,
                              size_t errbuf_len);
int sluice_engine_reload_string(sluice_engine *e, const char *text, size_t len,
                                const char *name, char *errbuf, size_t errbuf_len);
/* Destroys the engine, its store and every configuration it held. No call on it, and no
 * settle/release of its verdicts, may run or follow. */
void sluice_engine_destroy(sluice_engine *e);
/* The memory store the engine decides on (borrowed: stats, snapshots, sluice_reset). */
sluice_store *sluice_engine_store(sluice_engine *e);
/* Reloads applied so far (0 after loading). */
uint64_t sluice_engine_generation(const sluice_engine *e);

/* A string that need not be NUL-terminated; p NULL = absent. */
typedef struct sluice_str {
    const char *p;
    size_t len;
} sluice_str;

/* A header of a request (names compared case-insensitively) or of an answer (there both
 * point into the verdict's answer and are not NUL-terminated: use len). */
typedef struct sluice_header {
    sluice_str name;
    sluice_str value;
} sluice_header;

/* The attributes of one request (every field optional; borrowed for the call). */
typedef struct sluice_request {
    sluice_str method, path, host;
    sluice_str client_ip;      /* textual IPv4 or IPv6 (the peer, or from client_ip rules) */
    sluice_str route;          /* a route name the caller resolved (docs/config.md) */
    const sluice_header *headers;
    size_t n_headers;
    int has_body_bytes;        /* 1: body_bytes is the request's Content-Length */
    uint64_t body_bytes;
    int has_cost;              /* 1: `cost` replaces what the policies compute (0 = peek) */
    uint64_t cost;
} sluice_request;

/* What to do with the request. */
typedef enum sluice_action {
    SLUICE_ACTION_ALLOW = 0,  /* forward it */
    SLUICE_ACTION_DELAY = 1,  /* hold it delay_ns, then forward (a shaping policy) */
    SLUICE_ACTION_REJECT = 2, /* answer `status` (429, or 400 for a missing key) */
    SLUICE_ACTION_FAIL = 3,   /* the store failed and the policy fails closed: 503 */
    SLUICE_ACTION_ERROR = 4   /* the request could not be decided (too many windows, keys
                                 too long): 500, never admitted */
} sluice_action;

#define SLUICE_ANSWER_HEADERS 24

/* The answer of one decision, built once when it is decided (no allocation): what the
 * server's /v1/check and /v1/auth answer. limit/remaining/reset/retry-after/window are
 * those of the deciding window (the rejecting one with the longest retry-after, else the
 * one with the least remaining share); `window` NULL (and the numbers 0) when no enforced
 * window matched the request. */
typedef struct sluice_answer {
    sluice_action action;
    int status;               /* HTTP status: 200, 429, 400, 503, 500 */
    int error;                /* SLUICE_E* behind FAIL/ERROR (or a store error), else 0 */
    uint64_t limit;           /* the deciding window's quota (what RateLimit-Policy says) */
    uint64_t remaining;
    int64_t reset_ns;         /* until its state is fresh again */
    int64_t retry_after_ns;   /* REJECT: earliest retry (SLUICE_NEVER: never), else 0 */
    int64_t delay_ns;         /* DELAY */
    int recheck;              /* DELAY without consuming: wait delay_ns, then decide again */
    const char *policy;       /* the deciding window's policy (engine-owned, NUL-terminated) */
    const char *window;       /* its RateLimit-Policy item name */
    uint32_t window_index;    /* its index inside the policy */
    const char *plan;         /* the plan whose limits decided, or NULL */
    int overridden;           /* 1: a per-key override decided (sluice_override_set) */
    int shadow_limited;       /* 1: a shadow window would have limited */
    size_t n_windows;         /* windows the request was decided on */
    /* Response headers as pairs (RateLimit-Policy, RateLimit, Retry-After, X-Sluice-Shed,
     * a challenge's header): the engine's one answer, the pairs the server sends. */
    size_t n_headers;
    const sluice_header *headers;
    /* REJECT/FAIL/ERROR: an RFC 9457 body (application/problem+json); else len 0. */
    sluice_str body;
    const char *content_type; /* "application/problem+json", or NULL without a body */
} sluice_answer;

/* A verdict: room for one decision (its keys, windows, answer; about 20 KiB). Create it
 * once and reuse it: deciding allocates nothing. NULL when out of memory. */
sluice_verdict *sluice_verdict_create(void);
void sluice_verdict_destroy(sluice_verdict *v);

/* Decides a request from its attributes (the server's /v1/auth and /v1/check request
 * form): returns SLUICE_OK with the answer in v (sluice_verdict_answer), or an error with
 * an answer of action ERROR (status 500). A store failure is not an error: see the
 * answer's action (the policies' on_store_error). */
int sluice_engine_decide(sluice_engine *e, const sluice_request *req, sluice_time now,
                         sluice_verdict *v);
/* The policy/key form (SL.CHECK, /v1/check {"policy","key"}): policy `policy`'s windows on
 * `key` (any bytes, as the policy's composed key), `cost` units when has_cost (else the
 * policy's default cost). SLUICE_ENOTFOUND (status 404) for an unknown policy. */
int sluice_engine_decide_key(sluice_engine *e, const char *policy, const void *key,
                             size_t key_len, int has_cost, uint64_t cost, sluice_time now,
                             sluice_verdict *v);
/* The answer of the verdict's last decision (never NULL; before any, an ERROR answer). */
const sluice_answer *sluice_verdict_answer(const sluice_verdict *v);

/* Reserve-then-settle: windows with `settle` reserved their cost; settle the admitted
 * verdict to what the request really cost (refunds only into the window that counted the
 * reservation). SLUICE_EINVAL when it reserved nothing, SLUICE_ENOTFOUND when already
 * settled. Releases every concurrency lease the admitted verdict holds
 * (SLUICE_ENOTFOUND: expired, or released already). Each is single use. */
int sluice_engine_settle(sluice_engine *e, sluice_verdict *v, uint64_t actual, sluice_time now);
int sluice_engine_release(sluice_engine *e, sluice_verdict *v, sluice_time now);
/* A verdict as a printable token (URL-safe base64, at most SLUICE_TOKEN_MAX bytes, sealed:
 * it shows no key), for a settle or release from elsewhere (another thread, a later
 * callback): bytes written (NUL-terminated), 0 when the verdict holds nothing to settle
 * or release, or SLUICE_ERANGE. Valid across reloads, not across engines. */
#define SLUICE_TOKEN_MAX 2048
int sluice_verdict_token(const sluice_verdict *v, char *buf, size_t len);
int sluice_engine_settle_token(sluice_engine *e, const char *token, size_t len,
                               uint64_t actual, sluice_time now);
int sluice_engine_release_token(sluice_engine *e, const char *token, size_t len,
                                sluice_time now);

/* ---- per-key overrides (issue 21, docs/overrides.md) -------------------------------- */

typedef enum sluice_override_kind {
    SLUICE_OVERRIDE_PLAN = 1,   /* one of the policy's plans */
    SLUICE_OVERRIDE_LIMITS = 2, /* its own numbers (same algorithm as the policy) */
    SLUICE_OVERRIDE_BLOCK = 3,  /* always the policy's deny answer */
    SLUICE_OVERRIDE_EXEMPT = 4  /* never limited */
} sluice_override_kind;

/* An override to set (borrowed). Zero-initialise it and set kind and what it uses. */
typedef struct sluice_override {
    sluice_override_kind kind;
    const char *plan;           /* PLAN: the plan's name */
    const char *const *limits;  /* LIMITS: 1..4 windows, each a JSON object in the config's
                                   syntax: "{\"rate\": \"3000/min\"}", "{\"quota\": \"1M/month\"}" */
    size_t n_limits;
    int64_t expires_wall_ns;    /* 0: never; else UTC ns, after `now` */
    const char *reason;         /* optional, at most 1024 bytes */
    const char *label;          /* optional: what lists show for the key (at most 256) */
} sluice_override;

/* A stored override (read-only; from sluice_override_get or an iteration). */
typedef struct sluice_override_info {
    const char *policy;
    const char *key;            /* the key as set (path form), or NULL when raw keys are not
                                   kept (the default: keys are personal data, log.raw_keys) */
    size_t key_len;
    char key_hash[33];          /* the keyed hash naming it: 32 hex digits */
    sluice_override_kind kind;
    const char *plan;           /* PLAN, else NULL */
    const char *limits;         /* LIMITS: the windows as a JSON list, else NULL */
    int64_t expires_wall_ns;    /* 0: never */
    int64_t set_wall_ns;
    const char *reason, *label; /* NULL when not given */
} sluice_override_info;

/* Sets the override of (policy, key): `key` is the key as the policy composes it, a
 * composite key's parts in the policy's order, each percent-encoded, joined by '|' (the
 * admin API's path form). Counters carry over as on a reload. *created (may be NULL) is
 * 1 when there was none. SLUICE_ENOTFOUND: no such policy; SLUICE_EINVAL: a bad plan,
 * window, expiry or key, or a policy that cannot take overrides (errbuf says which);
 * SLUICE_EFULL: overrides.max are set. */
int sluice_override_set(sluice_engine *e, const char *policy, const char *key, size_t key_len,
                        const sluice_override *o, sluice_time now, int *created, char *errbuf,
                        size_t errbuf_len);
/* The live override, copied into one allocation the caller frees with
 * sluice_override_info_free; SLUICE_ENOTFOUND (and *out NULL) when none or expired. */
int sluice_override_get(sluice_engine *e, const char *policy, const char *key, size_t key_len,
                        sluice_time now, sluice_override_info **out);
void sluice_override_info_free(sluice_override_info *info);
/* Removes it: SLUICE_OK, SLUICE_ENOTFOUND. */
int sluice_override_remove(sluice_engine *e, const char *policy, const char *key,
                           size_t key_len, sluice_time now);
/* Calls fn for each live override (of `policy` only, unless NULL) in a stable order;
 * fn returns 0 to go on, anything else to stop. Not a snapshot: overrides set or removed
 * meanwhile may be seen or not. Returns how many fn saw (or SLUICE_EINVAL). */
int sluice_override_each(sluice_engine *e, const char *policy, sluice_time now,
                         int (*fn)(void *ud, const sluice_override_info *info), void *ud);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_H */
