/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h -- internals of `sluice serve` shared by the files of src/server: options,
 * the server (listeners, workers, the current policy generation), connections, the
 * CL.THROTTLE limiter cache and metrics. Threads: one event loop per worker; the main
 * thread handles signals, periodic snapshots and frees retired generations.
 * Times: monotonic nanoseconds for timeouts; decisions use the server clock (system or
 * --test-clock manual), read once per request.
 */
#ifndef SL_SERVER_H
#define SL_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "proto/http1.h"
#include "proto/resp.h"
#include "core/loop.h"
#include "sluice.h"

/* ---- options (flags over config file settings) ---- */

typedef struct sl_server_opts {
    char config_path[SL_PATH_MAX];
    char http[SL_ADDR_MAX], resp[SL_ADDR_MAX], grpc[SL_ADDR_MAX], admin[SL_ADDR_MAX];
    char store_url[SL_PATH_MAX];
    /* the Redis store's connection settings from somewhere other than the config file
     * (envoyproxy/ratelimit's REDIS_AUTH, REDIS_TLS...: never in a URL, never printed) */
    bool store_conn_set;
    sl_redis_conn_cfg store_conn;
    unsigned workers;          /* 0: one per CPU */
    bool test_clock;
    int64_t read_timeout_ns;   /* a started request must be complete within this */
    int64_t idle_timeout_ns;   /* keep-alive connection with nothing in flight */
    int64_t write_timeout_ns;  /* pending output that does not drain */
    int64_t drain_timeout_ns;  /* SIGTERM: in-flight work gets this long */
    unsigned max_conns;        /* across all workers and listeners */
    uint64_t max_buffered;     /* bytes of connection buffers (read + write) across all
                                  connections; over it a read buffer's growth first closes
                                  the oldest stalled connections (conn.c); 0 = no budget */
    int auth_deny_status;
    bool legacy_headers;
    char admin_token[128];
    sl_http_limits http_limits;
    char log_level[16], log_format[16]; /* "" = the config's (log.level, log.format) */
    char log_file[SL_PATH_MAX];         /* "" = the config's log.file; "-" = stderr */
    /* envoyproxy/ratelimit compat (src/cli/compat.c) and listener extras */
    char prom[SL_ADDR_MAX];        /* a metrics-only listener (USE_PROMETHEUS), "" = none */
    char prom_path[128];           /* its path (PROMETHEUS_PATH); the admin one serves it too */
    char grpc_tls_cert[SL_PATH_MAX], grpc_tls_key[SL_PATH_MAX]; /* gRPC over TLS when set */
    char grpc_tls_client_ca[SL_PATH_MAX]; /* mTLS: client certificates must chain to it */
    char grpc_tls_client_san[256]; /* mTLS: and name this DNS SAN ("" = any) */
} sl_server_opts;

void sl_server_opts_default(sl_server_opts *o);

/* ---- policy generations (reload swaps them) ---- */

#define SL_MET_RESULTS 11

/* The results of sluice_decisions_total (observe.c names them). */
typedef enum sl_met_result {
    SL_MET_ALLOWED = 0,
    SL_MET_LIMITED = 1,
    SL_MET_SHADOW = 2,
    SL_MET_FAIL_OPEN = 3,
    SL_MET_ERROR = 4,
    SL_MET_ROLLOUT = 5,
    SL_MET_FAIL_CLOSED = 6,
    SL_MET_DELAYED = 7,
    SL_MET_RECHECK = 8,
    SL_MET_LOCAL = 9,        /* on_store_error: local, admitted at the instance's share */
    SL_MET_LOCAL_LIMITED = 10 /* ... refused at it */
} sl_met_result;

struct sl_obs_gen;
struct sl_obs_w;
struct sl_obs;

/* One loaded config and the engine compiled from it. Immutable once published. Freed
 * once retired (a reload replaced it), named by no worker's hazard and referenced by no
 * request still waiting for its store (refs). */
typedef struct sl_gen {
    sl_config *cfg;
    sl_engine *engine;
    uint64_t id;
    _Atomic int refs;
    /* settings that follow a reload (the command line's value wins when given) */
    char admin_token[128];
    int auth_deny_status;
    bool legacy_headers;
    struct sl_obs_gen *obs;   /* its windows' metric series (observe.c) */
    char sha256[65];          /* of the bytes this config was parsed from ("": a directory) */
    struct sl_gen *retired_next;
} sl_gen;

/* ---- metrics (per worker; single writer, read by the scraper) ---- */

typedef struct sl_wmetrics {
    _Atomic uint64_t http_requests, resp_commands, bad_requests, timeouts, conns_refused;
    /* requests refused because the worker's waiting records (or the connection's share
     * of them), or its explanation slots, were all taken */
    _Atomic uint64_t pending_refused, explain_refused;
    _Atomic uint64_t bad_missing_key; /* 400: a policy's key is missing (on_missing_key: reject) */
} sl_wmetrics;

static inline void sl_met_inc(_Atomic uint64_t *c, uint64_t by) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

/* ---- CL.THROTTLE limiter cache ---- */

#define SL_CELL_CAP 16384  /* table slots (a power of two) */
#define SL_CELL_MAX 12288  /* parameter sets for the life of the process (each one is a
                              family of the store, which holds 16383 and frees none) */
#define SL_CELL_SHARE 64   /* sets one client address may have in use */
#define SL_CELL_IDLE_S 60  /* a set its client has not used this long leaves its share */
#define SL_CELL_OWNERS 1024 /* client addresses counted apart (+1 shared by the rest) */

typedef struct sl_cell_entry {
    _Atomic(const sluice_limiter *) lim;
    int64_t burst, count, period;
    uint64_t owner;            /* hash of the client address that created it */
    _Atomic int64_t used_s;    /* last use, server clock seconds */
} sl_cell_entry;

typedef struct sl_cell_owner {
    uint64_t addr;      /* hash; 0 = free */
    unsigned live;      /* its sets used within SL_CELL_IDLE_S (as of recount_s) */
    int64_t recount_s;
} sl_cell_owner;

typedef struct sl_cell_cache {
    pthread_mutex_t mu; /* creation only; lookups are lock-free */
    sl_cell_entry e[SL_CELL_CAP];
    size_t used;
    sl_cell_owner owners[SL_CELL_OWNERS + 1];
    _Atomic uint64_t refused; /* new sets refused (sluice_table_refusals_total) */
} sl_cell_cache;

/* ---- connections ---- */

/* GRPC: connections of the gRPC listener, and HTTP ones that opened with the HTTP/2
 * preface (h2c prior knowledge); their bytes go to the session in src/api/grpc. */
typedef enum sl_conn_kind {
    SL_KIND_HTTP = 0,
    SL_KIND_RESP = 1,
    SL_KIND_ADMIN = 2,
    SL_KIND_GRPC = 3
} sl_conn_kind;
#define SL_KINDS 4
/* Listening sockets: one per kind, and a metrics-only one (admin kind: the
 * envoy compat PROMETHEUS_ADDR) at SL_LISTEN_PROM. */
#define SL_LISTENERS (SL_KINDS + 1)
#define SL_LISTEN_PROM SL_KINDS

struct sl_h2;

struct sl_worker;

typedef struct sl_conn {
    sl_io io;
    struct sl_worker *w;
    sl_conn_kind kind;
    sl_conn_kind listener;  /* the listener that accepted it (kind may become GRPC) */
    bool authed;            /* RESP: AUTH given with the admin token */
    uint64_t auth_tag[2];   /* RESP: a keyed hash of that token, checked against the
                               tokens in force at each command (a reload may revoke it) */
    char auth_name[64];     /* RESP: that token's name ("admin", an admin.tokens name) */
    sl_dnode timer;
    char *rbuf;
    size_t rlen, rcap;
    char *wbuf;
    size_t wlen, woff, wcap;
    bool close_after;   /* close once the output is written */
    bool want_out;      /* EPOLLOUT armed (else EPOLLIN, or nothing while held) */
    bool held_armed;    /* interest cleared while held */
    int64_t hold_until_ns; /* /v1/auth shaping: the reply leaves at this monotonic time */
    bool sent_continue; /* 100 Continue already sent for the request being read */
    int proto;          /* RESP protocol version: 2 or 3 */
    char peer_ip[64];
    struct sl_conn *next_all, *prev_all;
    struct sl_h2 *h2;   /* the HTTP/2 session of a GRPC connection (src/api/grpc), or NULL */
    struct sl_ovr_stream *ovr_imp; /* POST /v1/overrides/import being streamed, or NULL */
    struct sl_ovr_export *ovr_exp; /* GET /v1/overrides/export being written, or NULL */
    struct sl_tls *tls; /* TLS under the reads and writes (tls.c), or NULL */
    bool proto_known;   /* HTTP: the first bytes were checked for the HTTP/2 preface */
    bool goaway_sent;   /* GRPC: drain already announced */
    bool suspended;     /* a decision waits for the shared store: input not processed */
    struct sl_pending *parked; /* its requests waiting for the store (pending.c) */
    unsigned nwait;            /* pending records it holds (at most SL_PENDING_CONN) */
    bool broken;        /* close without flushing */
    bool flush_queued;  /* on its worker's flushq (answers resumed this loop turn) */
    bool closed;        /* closed during this loop turn, freed at its end (w->dead) */
    struct sl_conn *next_dead;
} sl_conn;

#define SL_TL_READ 0
#define SL_TL_IDLE 1
#define SL_TL_WRITE 2

typedef struct sl_server sl_server;

typedef struct sl_listen_ctx {
    struct sl_worker *w;
    sl_conn_kind kind;
    int fd;
} sl_listen_ctx;

typedef struct sl_worker {
    sl_server *srv;
    unsigned id;
    pthread_t th;
    sl_loop loop;
    sl_io listen_io[SL_LISTENERS];
    sl_listen_ctx lctx[SL_LISTENERS];
    bool listening;
    _Atomic bool listening_flag; /* read by the main thread while draining */
    bool done;
    _Atomic(sl_gen *) hazard; /* the generation this worker may be using */
    sl_gen *gen;              /* == hazard while handling events */
    sl_dlist tl[3];
    sl_conn *conns;           /* all connections of this worker */
    size_t nconns;
    int64_t now_ns;           /* loop time (monotonic), for timeouts only */
    sluice_time batch_now;    /* decision time of the requests read together */
    bool have_batch_now;
    uint32_t seq;             /* requests handled, for latency sampling */
    size_t ngrpc;             /* GRPC connections (their deadlines are checked per tick) */
    size_t nheld;             /* connections holding a delayed reply (shaping) */
    sl_conn *flushq[32];      /* gRPC connections with answers resumed this turn: one write
                                 each at the end of the turn, not one per answer */
    unsigned nflushq;
    sl_conn *dead;            /* connections closed this turn, freed by sl_worker_reap */
    void *lane;               /* the store's handle for this thread (store.h) */
    struct sl_resp_batch *rbatch; /* pipelined RESP checks (resp_cmds.c) */
    struct sl_pending *pfree, *pchunks; /* the continuation pool (pending.c) */
    size_t pcount, pmax, nparked;
    struct sl_pending *ready, *ready_tail; /* answers arrived, to finish this turn */
    int64_t accept_paused_until; /* out of file descriptors: listeners off until then */
    char date[40];            /* "Date: <IMF-fixdate>\r\n", refreshed once a second */
    int64_t date_at_ns;
    sl_wmetrics *met;
    struct sl_obs_w *obs;     /* decisions by policy, latency (observe.c) */
    struct sl_series_w *series; /* the console's per-second ring (series.c), or NULL */
    char scratch[SL_RESP_MAX_INLINE + 16];
    char *body_buf;           /* chunked bodies are decoded here */
} sl_worker;

#define SL_MAX_WORKERS 64

#define SL_PENDING_MAX 4096 /* requests one worker lets wait for its store */
#define SL_PENDING_CONN 64 /* of which one connection may hold (gRPC streams; RESP and
                              HTTP/1 wait one at a time): 16 connections stay within the
                              Redis client's 1024 calls in flight */
#define SL_ADMIN_MAX_CONNS 64 /* the admin listener's connections, apart from max_conns */

struct sl_server {
    sl_server_opts opt;
    sluice_clock *clock;
    sluice_store *store;      /* the limiter registry; with the memory store its state */
    const sl_store_ops *ops;  /* where decisions go (memory or Redis) */
    bool redis;
    char snapshot_path[SL_PATH_MAX];
    int64_t snapshot_every_ns;
    bool snapshot_start_empty;      /* store.snapshot.on_damaged: start_empty */
    /* snapshots as the operator must see them (metrics, /readyz): written by the main
     * thread, read by any under snap_mu */
    pthread_mutex_t snap_mu;
    uint64_t snap_ok, snap_failed, snap_damaged;
    int64_t snap_last_ok_wall_ns;   /* 0: none written by this process */
    char snap_error[320];           /* the last write failure ("" once a write succeeds) */
    char snap_started_empty[512];   /* why the state was not restored ("" when it was) */
    int lfd[SL_LISTENERS];    /* listening sockets per kind (+ SL_LISTEN_PROM), -1 when off */
    struct sl_tls_ctx *grpc_tls; /* the gRPC listener's TLS, NULL for plain h2c */
    _Atomic bool store_seen;  /* the store answered once (envoy compat /healthcheck) */
    unsigned nworkers;
    sl_worker *workers[SL_MAX_WORKERS];
    _Atomic(sl_gen *) gen;
    pthread_mutex_t reload_mu; /* serialises reloads and retirement */
    sl_gen *retired;
    uint64_t next_gen_id;
    _Atomic uint64_t reloads_ok, reloads_failed;
    _Atomic int draining;
    _Atomic int stop_now;
    _Atomic unsigned nconns;  /* data listeners, across workers, for the connection cap */
    _Atomic uint64_t buffered; /* bytes of every connection's read and write buffers */
    _Atomic uint64_t evicted;  /* stalled connections closed to keep `buffered` in budget */
    _Atomic unsigned nconns_admin; /* the admin listener's own (SL_ADMIN_MAX_CONNS) */
    int64_t started_wall_ns;
    struct sl_obs *obs;       /* logger, metrics series, hot keys, audit (observe.c) */
    const sl_store_ops *inner_ops; /* the store's own operations (ops wraps them) */
    sl_cell_cache cell;
    unsigned cell_slot;       /* metrics series of CL.THROTTLE decisions */
    unsigned series_seconds, series_max; /* observe.series at start (series.c) */
};

/* The decision time for the request being handled: read once per batch of requests
 * that arrived in one read (pipelined requests share their arrival time), so the clock
 * is read at most once per decision. SL.CLOCK/POST /v1/clock invalidate it. */
static inline sluice_time sl_worker_now(sl_worker *w) {
    if (!w->have_batch_now) {
        w->batch_now = sluice_clock_now(w->srv->clock);
        w->have_batch_now = true;
    }
    return w->batch_now;
}

/* server.c */
/* Every policy can be answered by its store as configured (the memory store always). */
bool sl_server_store_ready(const sl_server *s);
/* /readyz: its status (200 ready or degraded, 503 draining or unready) and body. */
int sl_server_readiness(const sl_server *s, const sl_gen *g, char *body, size_t len);
int sl_server_create(const sl_server_opts *opt, sl_server **out, char *err, size_t errlen);
int sl_server_run(sl_server *s); /* until SIGTERM/SIGINT; returns the exit status */
void sl_server_destroy(sl_server *s);
/* Loads the config file again; on failure the old config stays and `err` holds every
 * error (one per line). Thread-safe; called from SIGHUP and POST /v1/reload. The reload
 * is logged and audited under `source` (SL_AUDIT_*) and `caller` (an admin token's name,
 * or NULL); `notes` (may be NULL) receives the changed settings that only a restart
 * applies (listeners, workers, store), comma separated, "" when none (also logged).
 * sl_server_reload is the admin API's without a caller. */
int sl_server_reload_from(sl_server *s, int source, const char *caller, char *err, size_t errlen,
                          char *notes, size_t noteslen);
int sl_server_reload(sl_server *s, char *err, size_t errlen);
/* The generation for the next request: publishes a hazard so it is not freed. */
sl_gen *sl_worker_pin(sl_worker *w);
/* Drops a reference a waiting request held (pending.c). */
void sl_gen_release(sl_gen *g);
/* observe.c: one result under a metrics series (CL.THROTTLE's). */
void sl_server_count(sl_worker *w, unsigned series, sl_met_result r);
/* Counts one decision (rc and verdict from the engine) under every policy that saw it,
 * each with its own result and deciding window (observe.c), feeds the hot-key sketches
 * and the decision log. `traceparent` (may be NULL) gives the decision log a trace id. */
void sl_server_count_verdict(sl_worker *w, int rc, const sl_verdict *v);
void sl_server_count_verdict_tp(sl_worker *w, int rc, const sl_verdict *v,
                                const char *traceparent);
/* A settle after the response: units charged above the reservation count as admitted. */
void sl_server_count_settle(sl_worker *w, int rc, const sl_verdict *v);
void sl_server_observe_latency(sl_worker *w, int64_t ns);

/* conn.c */
void sl_conn_accept(sl_worker *w, int lfd, sl_conn_kind kind);
void sl_worker_tick(sl_worker *w);
void sl_worker_close_all(sl_worker *w);
void sl_worker_drain(sl_worker *w);
/* Room for n more output bytes (grows the buffer up to a bound); 0 or -1. */
int sl_conn_reserve(sl_conn *c, size_t n);
/* A writer over the free part of the output buffer; commit what was written. */
void sl_conn_wbuf(sl_conn *c, sl_wbuf *wb);
void sl_conn_commit(sl_conn *c, const sl_wbuf *wb);

/* Holds c's pending reply (and the requests after it) until delay_ns from now: shaping
 * through a forward-auth gateway, which forwards the request when the answer arrives. */
void sl_conn_hold(sl_conn *c, int64_t delay_ns);

/* The answer a suspended connection waited for has been written: go on with its input. */
void sl_conn_resume(sl_conn *c);
/* Queues a gRPC connection whose calls were answered this turn for one write at the end
 * of the turn. */
void sl_conn_flush_later(sl_conn *c);
/* End of a loop turn: writes what resumed calls queued on their connections. */
void sl_worker_flush_resumed(sl_worker *w);
/* End of a loop turn: frees the connections closed during it. */
void sl_worker_reap(sl_worker *w);

/* http_api.c: handles one parsed request; the reply goes to c's output. */
void sl_http_handle(sl_conn *c, const sl_http_req *req);
/* The status and problem+json reply for a request that could not be parsed. */
void sl_http_error(sl_conn *c, int minor, int status, const char *detail);
/* One whole response into c's output (`hdrs`: complete header lines, or NULL). */
void sl_http_reply(sl_conn *c, int minor, int status, const char *hdrs, const char *ctype,
                   const char *body, size_t body_len, int send_body);
/* POST /v1/overrides/import streamed (overrides_api.c): whether the request whose head is
 * parsed in `req` (its body still arriving, or beyond the body limit) is one; then the
 * connection takes its body as it comes (sl_ovr_stream_feed), in bounded memory. */
bool sl_ovr_stream_begin(sl_conn *c, const sl_http_req *req);
/* Consumes body bytes of the streamed import (returns how many); answers and ends the
 * stream when the body is complete. */
size_t sl_ovr_stream_feed(sl_conn *c, const char *p, size_t n);
void sl_ovr_stream_free(struct sl_ovr_stream *st);
/* The streamed export: its next piece into c's output (conn.c calls it whenever the
 * output drained; it frees itself and clears c->ovr_exp after the last). */
void sl_ovr_export_more(sl_conn *c);
void sl_ovr_export_free(struct sl_ovr_export *x);
/* Bytes written to c's output as they are (an interim 100 Continue). */
void sl_http_raw(sl_conn *c, const char *s);
/* The admin caller's token name ("" with no token configured), NULL when unauthorized. */
const char *sl_admin_caller(sl_conn *c, const sl_http_req *req);
/* A browser request from a page of another origin (admin_api.c): refused on state changes. */
bool sl_admin_cross_site(const sl_http_req *req);
/* /v1/overrides on the admin listener (overrides_api.c); `who` is the caller's token name. */
void sl_overrides_http(sl_conn *c, const sl_http_req *req, const char *path, size_t path_len,
                       bool is_head, const char *who);
/* An application/problem+json response. */
void sl_http_problem(sl_conn *c, int minor, int status, const char *detail, int send_body);
/* /v1/check's and /v1/explain's request form: the attributes of body's "request" object
 * (or of body itself) into r, its headers into hdrs (SL_HTTP_MAX_HEADERS entries);
 * strings point into body. A cost is the caller's to add. */
struct json_t;
void sl_http_json_request(const struct json_t *body, sl_request *r, sl_header *hdrs);
/* The string member k of o, or {NULL, 0}. */
sl_str sl_http_json_str(const struct json_t *o, const char *k);

/* admin_api.c: a request on the admin listener (path without its query). */
void sl_admin_handle(sl_conn *c, const sl_http_req *req, const char *path, size_t path_len,
                     bool is_head);

/* resp_cmds.c */
void sl_resp_handle(sl_conn *c, const sl_resp_cmd *cmd);
/* Pipelined SL.CHECK/SL.PEEK of one read, decided together: take adds a command (false:
 * not batchable, handle it in its place after a flush); flush decides and answers what
 * was taken (before anything else is written, and before the read buffer moves). */
typedef struct sl_resp_batch sl_resp_batch;
sl_resp_batch *sl_resp_batch_create(void);
void sl_resp_batch_destroy(sl_resp_batch *b);
bool sl_resp_batch_take(sl_conn *c, const sl_resp_cmd *cmd);
void sl_resp_batch_flush(sl_conn *c);

/* cell.c */
void sl_cell_init(sl_cell_cache *cc);
void sl_cell_deinit(sl_cell_cache *cc);
/* The GCRA limiter for CL.THROTTLE's parameters, created and registered on first use. */
/* The limiter of a parameter set for client address `client` at server time now_ns;
 * NULL with *err SLUICE_EFULL (the client holds its share of sets in use: *why 1; or the
 * process has made SL_CELL_MAX sets: *why 2) or another error. */
const sluice_limiter *sl_cell_get(sl_server *s, const char *client, int64_t max_burst,
                                  int64_t count, int64_t period_s, int64_t now_ns, int *err,
                                  int *why);
/* New parameter sets refused so far. */
uint64_t sl_cell_refused(sl_server *s);
/* redis-cell's rounding of a duration to whole seconds: truncate, +1 if >= 1 ms left. */
int64_t sl_cell_round_s(int64_t ns);

/* metrics.c: the Prometheus text exposition into a heap buffer (caller frees). */
char *sl_metrics_render(sl_server *s, size_t *len);

#endif /* SL_SERVER_H */
