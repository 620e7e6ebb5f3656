/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.h -- what `sluice replay` measures while it runs a config over a trace, shared by
 * the run (replay.c) and the reports (replay_report.c: text, JSON, SVG, HTML).
 * Bounded: per-key state lives in one table of at most max_keys entries (the least
 * recently seen key is finalised and dropped when it is full); series have at most
 * RP_SERIES_MAX buckets (their width doubles instead); top keys are a Space-Saving
 * summary of RP_TOPK entries per window. Times in ns; counts in requests or units.
 */
#ifndef SL_REPLAY_H
#define SL_REPLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"
#include "histogram.h"
#include "trace.h"

#define RP_SERIES_MAX 1200 /* buckets per series; the bucket width doubles past it */
#define RP_SERIES_POLICIES 64 /* policies with their own series; the rest are "other" */
#define RP_TOPK 32
#define RP_SUB 8           /* a key's peak is counted over RP_SUB sub-windows of w */

/* Series per bucket: admitted, rejected (by this policy), admitted after a delay, shadow
 * "would have rejected", rejected by another policy (a policy's panel shows all it saw). */
enum { RP_ADMITTED = 0, RP_REJECTED = 1, RP_DELAYED = 2, RP_SHADOW = 3, RP_OTHER = 4, RP_NSERIES = 5 };

typedef struct rp_top {
    uint64_t h;
    uint64_t count;
    uint16_t key_len;
    unsigned char key[96]; /* the composed key, truncated (for --raw-keys only) */
} rp_top;

/* How a key's peak is measured, so it compares with the window's capacity (q):
 *   BUCKET   token bucket, GCRA, leaky bucket: the smallest burst that would have admitted
 *            every request of the key at the configured rate (exact: a virtual GCRA);
 *   FIXED    fixed window, quota: most units in one aligned window (UTC calendar);
 *   SLIDING  sliding window, sliding log: most units in any stretch of w (to w/RP_SUB);
 *   INFLIGHT concurrency: most requests of the key in flight at once. */
enum { RP_PEAK_NONE = 0, RP_PEAK_BUCKET, RP_PEAK_FIXED, RP_PEAK_SLIDING, RP_PEAK_INFLIGHT };

typedef struct rp_win {
    const sl_window_info *info;
    uint32_t policy;        /* index into rp_run.pol */
    int peak_kind;
    int64_t w_ns;           /* FIXED, SLIDING: the window; BUCKET: period of the rate */
    uint64_t rate_limit;    /* BUCKET: units per w_ns */
    int quota_period;       /* FIXED from a quota: sluice_period (0 = w_ns windows) */
    bool concurrency;       /* peak = requests in flight, not units per window */
    uint64_t requests, units;
    uint64_t admitted, rejected, rejected_other, delayed, shadow, errors;
    int64_t delay_ns;       /* total delay handed out (shaping and holds) */
    rp_hist peaks;          /* per key: units in its busiest w (or most in flight) */
    uint64_t keys, keys_touched; /* keys seen; keys this window rejected at least once */
    size_t ntop;
    rp_top top[RP_TOPK];    /* keys by rejections (Space-Saving: counts may be high by
                               at most the smallest count kept) */
} rp_win;

typedef struct rp_series {
    uint64_t v[RP_NSERIES][RP_SERIES_MAX];
} rp_series;

typedef struct rp_policy {
    const char *name;
    uint64_t requests, admitted, rejected, rejected_other, delayed, shadow, missing_key;
    rp_series *series;      /* NULL past RP_SERIES_POLICIES */
} rp_policy;

typedef struct rp_key rp_key;

typedef struct rp_run {
    /* options */
    const char *config_path;
    bool raw_keys;
    double target;          /* --suggest share of keys allowed over the limit */
    bool suggest;
    unsigned top;           /* keys shown per window */
    uint64_t max_keys;
    uint64_t store_keys;    /* --store-keys: the memory store's capacity; 0 = the config's */
    sluice_store_stats store_stats; /* at the end of the run */
    int64_t hold_ns;        /* concurrency: duration when the log has none */
    FILE *decisions;        /* --decisions: one CSV line per request, or NULL */
    const sl_trace_reader *reader; /* for file names in --decisions */
    /* engine */
    sl_config *cfg;
    sluice_store *store;
    sl_engine *engine;
    /* results */
    size_t npol;
    rp_policy *pol;
    size_t nwin, capwin;
    rp_win **win;
    rp_series *all;         /* every request: admitted, rejected, delayed, shadow */
    rp_series *other;       /* policies past RP_SERIES_POLICIES */
    int64_t t0_ns;          /* first second of the trace (series origin) */
    int64_t bucket_ns;      /* width of a series bucket */
    uint32_t nbuckets;      /* buckets in use */
    int64_t first_ns, last_ns;
    bool started;
    uint64_t requests, admitted, rejected, delayed, failed, errors, unmatched, missing_key;
    uint64_t rechecks, rechecks_exhausted, settled, released, release_failed;
    uint64_t keys_evicted;  /* key entries finalised early because the table was full */
    double seconds;         /* wall time of the run */
    double decide_seconds;  /* --bench: time in the decision loop alone */
    double decide_cpu_seconds, read_cpu_seconds; /* --bench: the same in CPU time */
    uint64_t bench_records;
    /* internals (replay.c) */
    rp_key *keys;
    uint64_t keys_cap, keys_used, evict_cursor;
    void *pending;          /* concurrency releases, a heap */
    void *retry;            /* held requests to check again, a heap */
    void *winmap;
    uint8_t salt[16];
} rp_run;

/* replay_report.c */
void rp_report_text(const rp_run *r, const sl_trace_reader *tr, FILE *out);
void rp_report_json(const rp_run *r, const sl_trace_reader *tr, FILE *out);
/* Writes DIR/replay-traffic.svg and DIR/replay-peaks.svg (creating DIR); 0 or -1. */
int rp_report_svg(const rp_run *r, const char *dir);
int rp_report_html(const rp_run *r, const sl_trace_reader *tr, const char *path);
/* "k-3fa9c1e2d04b" (a keyed hash) or, with --raw-keys, the key's parts. */
void rp_key_label(const rp_run *r, const rp_top *t, char *buf, size_t len);
/* A short description of a window's limit: "q=20 per 2s", "50 in flight". */
void rp_win_limit(const rp_win *w, char *buf, size_t len);
const char *rp_win_algo(const rp_win *w);

#endif
