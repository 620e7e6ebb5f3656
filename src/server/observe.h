/* SPDX-License-Identifier: Apache-2.0 */
/*
 * observe.h -- what `sluice serve` tells about itself: the logger and its events, decisions
 * counted under every policy that saw them (result, deciding window, near-limit, admitted
 * cost), store latency, hot keys per policy, the audit trail of config changes, and the
 * watchers that turn store statistics into events (eviction pressure, Redis outages).
 * Counting runs on the decision path: per worker, single writer, no lock, no allocation,
 * no clock read (latency is sampled 1 in 16 and reads the clock then). Series are keyed
 * by (policy, window) names from the config, never by keys, paths or hosts.
 */
#ifndef SL_SERVER_OBSERVE_H
#define SL_SERVER_OBSERVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/audit.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/prom.h"
#include "core/topk.h"
#include "server/server.h"

#define SL_OBS_SERIES 1024 /* (policy, window) pairs counted; more share series 0 */
#define SL_OBS_STORE_ERRS 5 /* unavailable, full, memory, io, other */
#define SL_OBS_OPS 5        /* decide, settle, release, reset, claim */
#define SL_OBS_LAT_BOUNDS 18
#define SL_OBS_REQ_BOUNDS 14
#define SL_OBS_SOURCES 4    /* startup, sighup, admin-api, file-change */
#define SL_OBS_EXPLAINS 16  /* explanations one worker has waiting for the store */

struct sl_pending;
struct sl_explain;

/* One worker's counters (single writer: its thread; read by scrapes). */
typedef struct sl_obs_w {
    _Atomic uint64_t dec[SL_OBS_SERIES][SL_MET_RESULTS];
    _Atomic uint64_t near[SL_OBS_SERIES];
    _Atomic uint64_t cost[SL_OBS_SERIES];
    _Atomic uint64_t store_err[SL_OBS_STORE_ERRS];
    _Atomic uint64_t refused[SL_KINDS];
    sl_prom_hist req_lat;
    sl_prom_hist store_lat[SL_OBS_OPS];
    /* explanations waiting for their peek (explain_api.c) */
    struct sl_explain *xs_x[SL_OBS_EXPLAINS];
    struct sl_pending *xs_p[SL_OBS_EXPLAINS];
    int xs_tok[SL_OBS_EXPLAINS];
    int xs_next;
    struct sl_rej_w *rej; /* the rejection summary's counters (rejections.c) */
} sl_obs_w;

/* A (policy, window) series: names copied once, never removed (counters keep their
 * values across reloads, as Prometheus expects of counters). */
typedef struct sl_obs_series {
    char policy[128];
    char window[128]; /* the window's name (sl_obs_window_label); "" for the policy's own */
    char rate[48];    /* the window's rate text ("10/s"), for sluice_window_info */
} sl_obs_series;

/* Per generation: engine window (or policy name pointer) -> series, for counting. */
typedef struct sl_obs_gen_ent {
    const void *key;   /* a sl_window_info*, or a policy's name (missing-key counts) */
    uint16_t series;   /* (policy, this window) */
    uint16_t pseries;  /* (policy, "") */
    uint8_t flags;     /* SL_OBSF_* */
} sl_obs_gen_ent;

#define SL_OBSF_SHADOW 0x1u
#define SL_OBSF_ROLLOUT 0x2u
#define SL_OBSF_CLOSED 0x4u
#define SL_OBSF_DELAY 0x8u

typedef struct sl_obs_gen {
    size_t cap; /* a power of two */
    sl_obs_gen_ent *ent;
} sl_obs_gen;

struct sl_obs {
    sl_server *srv;
    sl_log *log;
    sl_audit *audit;
    sl_hash_key hkey;          /* key hashes shown in logs, /v1/top, explain */
    unsigned nworkers;
    /* settings (reload changes the atomic ones) */
    _Atomic uint32_t near_ppm;
    _Atomic int raw_keys;
    _Atomic int dec_on;        /* the decision log is on (a copy: one load when off) */
    unsigned hot_counters, hot_top;
    int64_t hot_interval_ns;
    char log_file[SL_PATH_MAX];
    int log_format;
    /* series */
    pthread_mutex_t mu;
    sl_obs_series series[SL_OBS_SERIES];
    _Atomic unsigned nseries;
    /* hot keys: per policy series, one sketch per worker (NULL until the policy exists) */
    _Atomic(sl_topk **) topk[SL_OBS_SERIES];
    /* reloads by source and outcome (0 ok, 1 refused) */
    _Atomic uint64_t reloads[SL_OBS_SOURCES][2];
    /* watchers (main thread) */
    int64_t next_store_check_ns;
    sluice_store_stats last_stats;
    /* keys and evictions per policy: the store's per-family counters, read per scrape */
    pthread_mutex_t census_mu;
    struct sl_fam_count *census;
    int ncensus, ncensus_cap;
};

typedef struct sl_obs sl_obs;

/* ---- lifetime (server.c) ------------------------------------------------------------- */

/* The logger (flags in opt override the config's settings), audit trail and counters.
 * 0, or -1 with err (the log file cannot be opened, no memory). The logger becomes the
 * process default (sl_log_default) for code that is not handed one. */
int sl_obs_create(sl_server *s, const sl_settings *st, char *err, size_t errlen);
void sl_obs_destroy(sl_server *s);
/* The log format of the last logger sl_obs_create made (-1: none yet): a start that fails
 * after the config was read says why in that format. */
int sl_obs_last_format(void);
/* A worker's counters (NULL without memory) and their release. */
sl_obs_w *sl_obs_worker_new(void);
void sl_obs_worker_free(sl_obs_w *ow);
/* In the worker's thread before its loop: sampled store latency is counted there. */
void sl_obs_thread_attach(sl_worker *w);
/* The store operations with sampled latency around each call (every store call of the
 * server goes through it). */
const sl_store_ops *sl_obs_wrap_ops(const sl_store_ops *inner);
/* Per generation: series for every window (hot-key sketches for new policies). NULL
 * without memory. */
sl_obs_gen *sl_obs_gen_create(sl_server *s, const sl_engine *e);
void sl_obs_gen_destroy(sl_obs_gen *g);

/* A reload happened (under the reload lock; old/cur are the generations before and
 * after, cur NULL when it was refused with `error`): the event line, the audit entry,
 * counters, and the log settings that can change at run time. */
void sl_obs_reload(sl_server *s, sl_audit_source src, const char *caller, const sl_gen *old,
                   const sl_gen *cur, const char *error, int64_t started_ns);
/* The start and stop lines (main thread). */
void sl_obs_started(sl_server *s);
void sl_obs_stopped(sl_server *s);
/* Main thread, every ~100 ms: eviction pressure, Redis readiness and breaker. */
void sl_obs_tick(sl_server *s);

/* The `window` label of a window: its name (`name:` in the config; unnamed: the policy's
 * name when it has one window, "<policy>.<i>" by position from 0 when it has several; an
 * Envoy rule's rate_limit name, else its path), "<plan>/<name>" for a plan's window, and
 * "override/<unit>" for an Envoy descriptor's own limit. Cut at 127 bytes. */
void sl_obs_window_label(const sl_window_info *wi, char *out, size_t cap);
/* The series name of policy="" : requests no policy or rule matched, and errors before
 * any policy was reached. */
#define SL_OBS_NO_RULE "(no rule)"

/* ---- counting ------------------------------------------------------------------------ */

/* The (policy, window) series, added when new (reload time only; 0 when full). */
unsigned sl_obs_series_for(sl_obs *o, const char *policy, const char *window);
/* The generation the calling thread may use (a worker's pinned one; else the current). */
sl_gen *sl_obs_gen_now(sl_server *s);
/* Whether the configuration has a policy of that name (scrape time). */
bool sl_obs_in_config(const sl_config *cfg, const char *policy);
/* The series of (policy, "") if the policy was ever seen, else -1 (scrape time). */
int sl_obs_policy_series(sl_obs *o, const char *policy);
/* A refused connection on listener `kind` (counted, summarised in the log). */
void sl_obs_conn_refused(sl_worker *w, sl_conn_kind kind);

/* ---- explain (explain_api.c) ---------------------------------------------------------- */

/* Starts the peek of explanation x for record p (taken for p's connection with the
 * caller's finish): 0 (submitted: park p), or -1 (no slot: the caller frees x, puts p
 * back and answers an error). */
int sl_obs_explain_start(struct sl_pending *p, struct sl_explain *x);
/* In p's finish: the explanation as JSON (malloc'd; NULL without memory); frees it. */
char *sl_obs_explain_finish(struct sl_pending *p, int rc, size_t *len);
/* POST /v1/explain (the data listener). */
void sl_explain_http(sl_conn *c, const sl_http_req *req);

/* ---- reports (admin_api.c, metrics.c) -------------------------------------------------- */

/* GET /v1/top?policy=NAME as JSON (malloc'd): NULL with *status 404 (unknown policy),
 * 409 (hot keys off) or 500. */
char *sl_obs_top_json(sl_server *s, const char *policy, size_t max, int *status, size_t *len);
/* sluice_hot_key_share and sluice_keys into p. */
void sl_obs_prom_hot_keys(sl_server *s, sl_prom *p);
void sl_obs_prom_keys(sl_server *s, sl_prom *p);
/* The latency bounds (ns) of sluice_store_latency_seconds and the request histogram. */
extern const int64_t sl_obs_lat_bounds[SL_OBS_LAT_BOUNDS];
extern const int64_t sl_obs_req_bounds[SL_OBS_REQ_BOUNDS];
extern const char *const sl_obs_op_names[SL_OBS_OPS];
extern const char *const sl_obs_store_err_names[SL_OBS_STORE_ERRS];
extern const char *const sl_obs_result_names[SL_MET_RESULTS];

#endif /* SL_SERVER_OBSERVE_H */
