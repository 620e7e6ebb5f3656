/* SPDX-License-Identifier: Apache-2.0 */
/*
 * adaptive.h -- adaptive concurrency: controllers that move a concurrency limit within
 * [min, max] from the latency and outcome of finished requests (gradient2, vegas, aimd).
 * Pure state transitions over caller-owned state with time passed in; the limit and the
 * gains are Q16.16 fixed point, latencies nanoseconds; no floating point, no allocation.
 *
 * Thread-safety: none inside. Every call on one sl_adapt_state must be serialised by the
 * caller (the memory store holds the key's shard lock around decide/release; the Redis
 * store runs the update inside one script). Parameters are immutable and shareable.
 */
#ifndef SL_ALGO_ADAPTIVE_H
#define SL_ALGO_ADAPTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Q16.16: 1.0 == SL_Q16. Resolution 1/65536 (1.5e-5): the smallest step any controller
 * takes is smoothing x 1 slot >= 1/16 slot (smoothing >= 1/16), so rounding never stalls
 * a move, and a limit of at most SL_ADAPT_LIMIT_MAX (2^24 - 1) needs 40 bits. */
#define SL_Q16 UINT32_C(65536)
#define SL_ADAPT_LIMIT_MAX UINT32_C(16777215)      /* the concurrency algorithm's slot cap */
#define SL_ADAPT_LATENCY_MAX (INT64_C(1) << 40)     /* ~18 min; longer samples are clamped */

typedef enum sl_adapt_ctl {
    SL_ADAPT_GRADIENT2 = 1, /* latency gradient against the no-load latency, smoothed */
    SL_ADAPT_VEGAS = 2,     /* estimated queue kept inside a band [alpha, beta] */
    SL_ADAPT_AIMD = 3       /* loss based: +increase per window, x backoff on a drop */
} sl_adapt_ctl;

typedef enum sl_adapt_outcome {
    SL_ADAPT_OK = 0,      /* the backend answered: the latency is a sample */
    SL_ADAPT_ERROR = 1,   /* an application error: says nothing about capacity, not timed */
    SL_ADAPT_DROPPED = 2  /* overload: timeout, 503, refused, or a lease that expired */
} sl_adapt_outcome;

/* Compiled parameters. sl_adapt_params_default fills every field; config overrides some,
 * then sl_adapt_params_check validates. */
typedef struct sl_adapt_params {
    sl_adapt_ctl ctl;
    uint32_t min, max, initial; /* slots: 1 <= min <= initial <= max <= SL_ADAPT_LIMIT_MAX;
                                   min is also the concurrency of a no-load probe */
    int64_t window_ns;          /* the limit moves at most once per window (default 100 ms;
                                   stretched to 2 x the last average latency when longer) */
    uint32_t min_samples;       /* a window closes with at least this many samples (10; a
                                   no-load probe with 4 x as many) */
    uint32_t smoothing_q16;     /* share of a step taken per window, (0, 1]: gradient2 0.2,
                                   vegas 0.5, aimd 1.0 (aimd ignores it) */
    uint32_t tolerance_q16;     /* gradient2: average latency up to noload x tolerance counts as
                                   "no queueing" (1.1); in [1, 4] */
    uint32_t queue;             /* gradient2: growth per window without queueing, slots; 0 =
                                   isqrt(limit) */
    uint32_t alpha_min, alpha_pct; /* vegas: grow while the estimated queue < max(alpha_min,
                                      limit x alpha_pct%) (1, 5 %) */
    uint32_t beta_min, beta_pct;   /* vegas: shrink while it is > max(beta_min, limit x
                                      beta_pct%) (2, 10 %) */
    uint32_t increase;          /* aimd: slots added per window when not app-limited (1) */
    uint32_t backoff_q16;       /* every controller, on a window with drops: limit x backoff
                                   (0.9); in [0.5, 1) */
    int64_t timeout_ns;         /* an ok sample slower than this counts as a drop; 0 = none
                                   (aimd needs it: it is aimd's only latency signal) */
    uint32_t probe_after;       /* windows stuck (limit at min, or average latency at least
                                   2 x the no-load estimate) before re-measuring it (5);
                                   0 = never for that reason */
    int64_t probe_every_ns;     /* also re-measure it this often; 0 = only when stuck
                                   (default 0; vegas 60 s) */
} sl_adapt_params;

/* Per-key state (80 bytes). */
typedef struct sl_adapt_state {
    uint64_t limit_q16;      /* the estimated limit, Q16.16, within [min, max] */
    int64_t noload_ns;       /* estimated no-load latency: the lowest robust window latency
                                since the last probe (a probe sets it); 0 = not measured yet */
    int64_t last_avg_ns;     /* average latency of the last closed window (0 = none) */
    int64_t window_start_ns; /* start of the sampling window */
    uint64_t sum_ns;         /* sum of the window's ok latencies (< 2^63: <= 2^23 samples of
                                <= 2^40 ns each, the window closes early at 2^23) */
    int64_t probe_ns;        /* probing: when the probe began; else when the last one ended */
    uint32_t ok;             /* ok samples in the window */
    uint32_t drops;          /* drops in the window (saturating) */
    uint32_t max_inflight;   /* highest in-flight count reported in the window */
    uint16_t stuck;          /* consecutive windows closed stuck (see probe_after) */
    uint8_t probing;         /* 1 while the no-load latency is being measured at min */
    uint8_t flags;           /* adaptive.c's FLAG_* */
    uint64_t fast_sum_ns;    /* the part of sum_ns from "fast" ok samples: below half the
                                no-load estimate (adaptive.c: robust window latency) */
    uint32_t fast_ok;        /* how many of `ok` they are */
    uint32_t pad;            /* 0 */
} sl_adapt_state;

/* What a decision, a metric or a log line shows about the controller. */
typedef struct sl_adapt_view {
    uint32_t limit;        /* the limit to enforce now */
    uint64_t limit_q16;    /* with its fraction */
    int64_t noload_ns;     /* estimated no-load latency */
    int64_t last_avg_ns;   /* last window's average latency */
    bool probing;
} sl_adapt_view;

/* Defaults for `ctl` (see the field comments) with the given bounds. */
void sl_adapt_params_default(sl_adapt_params *p, sl_adapt_ctl ctl, uint32_t min, uint32_t max,
                             uint32_t initial);

/* SLUICE_OK or SLUICE_EINVAL/SLUICE_ERANGE with a one-line reason in errbuf. */
int sl_adapt_params_check(const sl_adapt_params *p, char *errbuf, size_t errbuf_len);

/* A fresh state: limit `initial`, starting with a no-load probe at `min` (the first window
 * measures the no-load latency, so a start above the knee cannot pass for "no load"). */
void sl_adapt_init(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns);

/* The concurrency to enforce now: min while probing, else floor(limit). */
uint32_t sl_adapt_limit(const sl_adapt_params *p, const sl_adapt_state *s);

void sl_adapt_view_of(const sl_adapt_params *p, const sl_adapt_state *s, sl_adapt_view *v);

/* Records one finished request: its latency, its outcome and the in-flight count when it
 * was released (or acquired: it only serves to see whether the limit is reached). Returns
 * true when a window closed (the limit may have moved). Negative latencies count as 0. */
bool sl_adapt_sample(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns,
                     int64_t latency_ns, sl_adapt_outcome outcome, uint32_t inflight);

/* `n` leases expired unreleased: n drops (their latency is unknown, at least the lease). */
bool sl_adapt_expired(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns, uint32_t n,
                      uint32_t inflight);

/* Shifts the state's monotonic times by delta_ns (snapshot restore). */
void sl_adapt_rebase(sl_adapt_state *s, int64_t delta_ns);

/* Reload: keeps the learned limit and no-load latency, clamped into the new bounds. */
void sl_adapt_carry(const sl_adapt_params *np, sl_adapt_state *s);

#endif /* SL_ALGO_ADAPTIVE_H */
