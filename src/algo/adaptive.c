/* SPDX-License-Identifier: Apache-2.0 */
/*
 * adaptive.c -- the adaptive concurrency controllers (see adaptive.h for the contract).
 * Invariants: min <= limit <= max after every call; the window's sums never overflow
 * (each latency <= 2^40 ns, at most 2^23 samples per window); all rate math is integer:
 * Q16.16 for limits and gains, unsigned __int128 for products.
 *
 * Samples are aggregated per window (average latency of ok samples, drops, highest
 * in-flight) and the limit moves once per closed window: averaging 10+ samples is the
 * first layer of smoothing, the controllers' own smoothing the second.
 *
 * The no-load latency is the lowest window average since the last probe. It follows a
 * faster backend at once, but cannot rise by itself: a window average under sustained
 * load is a loaded latency, and letting the estimate drift up to it is how a latency
 * controller ratchets its limit upwards (each accepted queue becomes the new "no load").
 * It is re-measured by a probe instead: for one window the limit is `min` and only
 * requests started after the probe began are timed. A probe runs at start, after
 * probe_after windows stuck (the limit at min, or the average latency at twice the
 * estimate: the backend got slower for good, the controller pulled the limit down and
 * only a new baseline lets it back up), and every probe_every_ns if set (vegas by
 * default: a baseline that grows by less than 2x leaves it at a low limit above min).
 * Its cost is one window at min concurrency.
 *
 * Every window latency (the probe's, the estimate's, the controllers') is robust to a
 * minority of fast samples (issue 27): an ok sample faster than 3/4 of the no-load estimate
 * (or, before there is one, 3/4 of the running latency of the window's other samples) is
 * "fast", and the window's latency leaves the fast ones out unless they are at least half
 * of its ok samples. One client reporting `LATENCY 5` against a 50 ms backend, or cache
 * hits mixed with backend calls, cannot pull the estimate below the backend's floor: a
 * minority share s moves it by at most s/4 (a lie just above the cut-off). A majority of
 * fast samples (a backend that really got faster) is followed at once as before. An
 * estimate that was wrong anyway (a majority lied, or the backend slowed down) leaves the
 * limit at min or the latency at twice the estimate: stuck, so the next probe re-measures
 * it within probe_after windows, and that probe's fast cut-off is 3/4 of the wrong estimate.
 */
#include "adaptive.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "algo/algo_impl.h"

#define MAX_WINDOW_SAMPLES (UINT32_C(1) << 23)
#define STALE_WINDOWS 16 /* a window that cannot gather min_samples is dropped after this */
#define PROBE_WINDOWS 10 /* a probe that cannot gather min_samples gives up after this */
#define FLAG_DECREASED 1 /* sl_adapt_state.flags: the last closed window backed off on drops */

void sl_adapt_params_default(sl_adapt_params *p, sl_adapt_ctl ctl, uint32_t min, uint32_t max,
                             uint32_t initial) {
    memset(p, 0, sizeof(*p));
    p->ctl = ctl;
    p->min = min;
    p->max = max;
    p->initial = initial;
    p->window_ns = 100 * SLUICE_NS_PER_MS;
    p->min_samples = 10;
    p->smoothing_q16 = ctl == SL_ADAPT_GRADIENT2 ? SL_Q16 / 5 : ctl == SL_ADAPT_VEGAS ? SL_Q16 / 2 : SL_Q16;
    p->tolerance_q16 = SL_Q16 + SL_Q16 / 10;
    p->queue = 0;
    p->alpha_min = 1;
    p->alpha_pct = 5;
    p->beta_min = 2;
    p->beta_pct = 10;
    p->increase = 1;
    p->backoff_q16 = SL_Q16 * 9 / 10;
    p->timeout_ns = 0;
    p->probe_after = 5;
    p->probe_every_ns = ctl == SL_ADAPT_VEGAS ? 60 * SLUICE_NS_PER_S : 0;
}

int sl_adapt_params_check(const sl_adapt_params *p, char *errbuf, size_t errbuf_len) {
    if (p->ctl != SL_ADAPT_GRADIENT2 && p->ctl != SL_ADAPT_VEGAS && p->ctl != SL_ADAPT_AIMD)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "adaptive: controller must be gradient2, vegas or aimd");
    if (p->min < 1)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "adaptive: min must be at least 1");
    if (p->max > SL_ADAPT_LIMIT_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: max %u is above %u", p->max,
                    (unsigned)SL_ADAPT_LIMIT_MAX);
    if (p->min > p->initial || p->initial > p->max)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "adaptive: need min <= initial <= max (%u, %u, %u)",
                    p->min, p->initial, p->max);
    if (p->window_ns < SLUICE_NS_PER_MS || p->window_ns > 3600 * SLUICE_NS_PER_S)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: window must be within [1ms, 1h]");
    if (p->min_samples < 1 || p->min_samples > 100000)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: min_samples must be within [1, 100000]");
    if (p->smoothing_q16 < SL_Q16 / 16 || p->smoothing_q16 > SL_Q16)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: smoothing must be within [0.0625, 1]");
    if (p->tolerance_q16 < SL_Q16 || p->tolerance_q16 > 4 * SL_Q16)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: tolerance must be within [1, 4]");
    if (p->queue > p->max)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: queue %u is above max %u", p->queue, p->max);
    if (p->alpha_pct > 100 || p->beta_pct > 100 || p->alpha_min > p->beta_min || p->alpha_pct > p->beta_pct)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                    "adaptive: vegas needs alpha <= beta (min and pct) and percentages <= 100");
    if (p->increase < 1 || p->increase > p->max)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: increase must be within [1, max]");
    if (p->backoff_q16 < SL_Q16 / 2 || p->backoff_q16 >= SL_Q16)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: backoff must be within [0.5, 1)");
    if (p->timeout_ns < 0 || p->timeout_ns > SL_ADAPT_LATENCY_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: timeout must be within [0, 18 min]");
    if (p->ctl == SL_ADAPT_AIMD && p->timeout_ns == 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                    "adaptive: aimd needs a timeout (its only latency signal)");
    if (p->probe_after > 65535)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: probe_after must be <= 65535");
    if (p->probe_every_ns < 0 || (p->probe_every_ns != 0 && p->probe_every_ns < 2 * p->window_ns))
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive: probe_every must be 0 or at least 2 windows");
    return SLUICE_OK;
}

static uint64_t q16(uint32_t slots) {
    return (uint64_t)slots << 16;
}

static uint64_t clamp_limit(const sl_adapt_params *p, uint64_t l) {
    if (l < q16(p->min)) return q16(p->min);
    if (l > q16(p->max)) return q16(p->max);
    return l;
}

static void reset_window(sl_adapt_state *s, int64_t now_ns) {
    s->window_start_ns = now_ns;
    s->sum_ns = 0;
    s->ok = s->drops = s->max_inflight = 0;
    s->fast_sum_ns = 0;
    s->fast_ok = 0;
}

/* Whether an ok sample is "fast": below 3/4 of the no-load estimate, or before there is
 * one, below 3/4 of the running latency of the window's samples that are not fast (the
 * first sample of a first probe is never fast). */
static bool fast_sample(const sl_adapt_state *s, int64_t latency_ns) {
    int64_t ref = s->noload_ns;
    if (ref == 0) {
        uint32_t n = s->ok - s->fast_ok;
        if (n == 0) return false;
        ref = (int64_t)((s->sum_ns - s->fast_sum_ns) / n);
    }
    return latency_ns < ref / 4 * 3;
}

/* The window's latency: the average of its ok samples, leaving the fast ones out while
 * they are a minority (fewer than half of them). 0 without ok samples. */
static int64_t window_avg(const sl_adapt_state *s) {
    if (s->ok == 0) return 0;
    uint64_t sum = s->sum_ns, n = s->ok;
    if ((uint64_t)s->fast_ok * 2 < n) {
        sum -= s->fast_sum_ns;
        n -= s->fast_ok;
    }
    int64_t avg = (int64_t)(sum / n);
    return avg < 1 ? 1 : avg;
}

void sl_adapt_init(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns) {
    memset(s, 0, sizeof(*s));
    s->limit_q16 = clamp_limit(p, q16(p->initial));
    s->probing = 1;
    s->probe_ns = now_ns;
    reset_window(s, now_ns);
}

uint32_t sl_adapt_limit(const sl_adapt_params *p, const sl_adapt_state *s) {
    if (s->probing) return p->min;
    return (uint32_t)(clamp_limit(p, s->limit_q16) >> 16);
}

void sl_adapt_view_of(const sl_adapt_params *p, const sl_adapt_state *s, sl_adapt_view *v) {
    v->limit = sl_adapt_limit(p, s);
    v->limit_q16 = s->limit_q16;
    v->noload_ns = s->noload_ns;
    v->last_avg_ns = s->last_avg_ns;
    v->probing = s->probing != 0;
}

static uint32_t isqrt32(uint32_t v) {
    uint32_t r = 0;
    for (uint32_t bit = UINT32_C(1) << 30; bit != 0; bit >>= 2) {
        if (v >= r + bit) {
            v -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
    }
    return r;
}

/* limit + (target - limit) x smoothing, in Q16 with signed steps. */
static uint64_t smooth(const sl_adapt_params *p, uint64_t limit, uint64_t target) {
    if (target >= limit)
        return limit + (uint64_t)(((unsigned __int128)(target - limit) * p->smoothing_q16) >> 16);
    uint64_t down = (uint64_t)(((unsigned __int128)(limit - target) * p->smoothing_q16) >> 16);
    return down >= limit ? 0 : limit - down;
}

/* Whether the window saw the limit in use: a limit that is not reached says nothing about
 * capacity, so it must not grow on such a window (an idle period would otherwise inflate
 * it to max and the next burst would meet no limit at all). */
static bool app_limited(const sl_adapt_state *s) {
    return (uint64_t)s->max_inflight * 2 < (s->limit_q16 >> 16);
}

/* Gradient2 (after Netflix's Gradient2Limit, with two deliberate changes): the gradient
 * g = clamp(noload x tolerance / avg, 0.5, 1) measures queueing; without queueing (g == 1)
 * the limit grows by `queue`, with queueing it is pulled to g x limit, and either step is
 * smoothed. Netflix adds the queue allowance in both cases, which puts the fixed point at
 * knee x tolerance + queue / (1 - g), tens of percent above the knee for small limits;
 * adding it only when no queueing is seen puts it at knee x tolerance. Its no-load
 * latency is the probed minimum (see the file comment), not a long-term average that
 * drifts up under sustained load. */
static uint64_t gradient2(const sl_adapt_params *p, const sl_adapt_state *s, int64_t avg) {
    uint64_t l = s->limit_q16;
    uint64_t g = (uint64_t)(((unsigned __int128)(uint64_t)s->noload_ns * p->tolerance_q16) / (uint64_t)avg);
    if (g > SL_Q16) g = SL_Q16;
    if (g < SL_Q16 / 2) g = SL_Q16 / 2;
    uint64_t target;
    if (g == SL_Q16) {
        if (app_limited(s)) return l;
        uint32_t q = p->queue ? p->queue : isqrt32((uint32_t)(l >> 16));
        target = l + q16(q ? q : 1);
    } else {
        target = (uint64_t)(((unsigned __int128)l * g) >> 16);
    }
    return smooth(p, l, target);
}

/* Vegas: the queue the backend holds is estimated as limit x (1 - noload / avg) (Little's
 * law: what runs beyond the no-load throughput waits). Below alpha the limit moves up by
 * the distance to alpha, above beta down by the distance to beta, in between it holds:
 * the band is the hysteresis that keeps it still. Steps are smoothed. Netflix's version
 * steps by log10(limit) and jumps by beta when the queue is tiny, which overshoots by
 * beta at small limits; moving by the measured distance converges without overshoot. */
static uint64_t vegas(const sl_adapt_params *p, const sl_adapt_state *s, int64_t avg) {
    uint64_t l = s->limit_q16;
    uint64_t queue = 0;
    if (avg > s->noload_ns)
        queue = (uint64_t)(((unsigned __int128)l * (uint64_t)(avg - s->noload_ns)) / (uint64_t)avg);
    uint64_t alpha = l * p->alpha_pct / 100, beta = l * p->beta_pct / 100;
    if (alpha < q16(p->alpha_min)) alpha = q16(p->alpha_min);
    if (beta < q16(p->beta_min)) beta = q16(p->beta_min);
    uint64_t target = l;
    if (queue < alpha) {
        if (app_limited(s)) return l;
        target = l + (alpha - queue);
    } else if (queue > beta) {
        target = queue - beta >= l ? 0 : l - (queue - beta);
    }
    return smooth(p, l, target);
}

/* AIMD: one slot (increase) more per window that reached the limit without a drop; the
 * multiplicative decrease on drops is common to all controllers (close_window). Its only
 * latency signal is the timeout, which turns slow samples into drops. */
static uint64_t aimd(const sl_adapt_params *p, const sl_adapt_state *s) {
    if (app_limited(s)) return s->limit_q16;
    return s->limit_q16 + q16(p->increase);
}

static int64_t window_len(const sl_adapt_params *p, const sl_adapt_state *s) {
    int64_t w = p->window_ns;
    if (s->last_avg_ns > w / 2) w = 2 * s->last_avg_ns; /* <= 2^41: no overflow */
    return w;
}

static void start_probe(sl_adapt_state *s, int64_t now_ns) {
    s->probing = 1;
    s->probe_ns = now_ns;
    s->stuck = 0;
    reset_window(s, now_ns);
}

/* Closes the window when it is due and holds enough samples, moving the limit. */
static bool close_window(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns) {
    int64_t w = window_len(p, s);
    /* Full also when the latency sum reaches 2^52 ns (52 days of summed latency: only
     * pathological samples), so the Redis script's sums stay exact in doubles. */
    bool full = s->ok >= MAX_WINDOW_SAMPLES || s->sum_ns >= (UINT64_C(1) << 52);
    if (now_ns - s->window_start_ns < w && !full) return false;
    int64_t avg = window_avg(s);

    if (s->probing) {
        /* 4 x min_samples: at min concurrency samples are few, and an estimate low by a
         * few percent reads as a standing queue to vegas (its band is that narrow). */
        if (s->ok >= 4 * p->min_samples || full) {
            s->noload_ns = avg;
            s->last_avg_ns = avg;
        } else if (now_ns - s->probe_ns < PROBE_WINDOWS * w) {
            return false; /* keep measuring */
        } else if (s->ok >= p->min_samples || (s->noload_ns == 0 && s->ok > 0)) {
            /* Out of time (slow requests at min: 40 samples of 50 ms at 2 in flight take
             * the whole 1 s): a window's worth of samples, or a thin first measurement,
             * beats keeping an estimate the probe was started to correct. */
            s->noload_ns = avg;
            s->last_avg_ns = avg;
        }
        s->probing = 0;
        s->probe_ns = now_ns;
        reset_window(s, now_ns);
        return true;
    }

    if (s->ok + (uint64_t)s->drops < p->min_samples && !full) {
        if (now_ns - s->window_start_ns >= STALE_WINDOWS * w) reset_window(s, now_ns);
        return false;
    }

    uint64_t l = s->limit_q16;
    if (s->ok > 0) {
        s->last_avg_ns = avg;
        if (s->noload_ns == 0 || avg < s->noload_ns) s->noload_ns = avg;
    }
    s->flags &= (uint8_t)~FLAG_DECREASED;
    if (s->drops > 0) {
        l = (uint64_t)(((unsigned __int128)l * p->backoff_q16) >> 16);
        s->flags |= FLAG_DECREASED;
    } else if (s->ok > 0) {
        switch (p->ctl) {
        case SL_ADAPT_GRADIENT2: l = gradient2(p, s, avg); break;
        case SL_ADAPT_VEGAS: l = vegas(p, s, avg); break;
        case SL_ADAPT_AIMD: l = aimd(p, s); break;
        }
    }
    s->limit_q16 = clamp_limit(p, l);
    /* Stuck: the controller cannot go lower, or the latency stays at twice the no-load
     * estimate whatever the limit (no queue of our own making holds that long at the
     * limit a controller chose; vegas, whose floor is where limit x (1 - noload/avg)
     * fits its band, never reaches min when the baseline moved). */
    if ((s->limit_q16 >> 16) <= p->min || (s->ok > 0 && avg / 2 >= s->noload_ns)) {
        if (s->stuck < UINT16_MAX) s->stuck++;
    } else {
        s->stuck = 0;
    }
    reset_window(s, now_ns);
    if ((p->probe_after != 0 && s->stuck >= p->probe_after) ||
        (p->probe_every_ns != 0 && now_ns - s->probe_ns >= p->probe_every_ns))
        start_probe(s, now_ns);
    return true;
}

bool sl_adapt_sample(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns,
                     int64_t latency_ns, sl_adapt_outcome outcome, uint32_t inflight) {
    if (latency_ns < 0) latency_ns = 0;
    if (latency_ns > SL_ADAPT_LATENCY_MAX) latency_ns = SL_ADAPT_LATENCY_MAX;
    /* A probe times only requests that started under it (they ran at <= min in flight). */
    if (s->probing && now_ns - latency_ns < s->probe_ns) return close_window(p, s, now_ns);
    if (outcome == SL_ADAPT_DROPPED || (outcome == SL_ADAPT_OK && p->timeout_ns != 0 && latency_ns > p->timeout_ns)) {
        /* One decrease per flight (as TCP does): a request that started before the last
         * decrease ran under the old limit, and its drop is already answered. */
        bool answered = (s->flags & FLAG_DECREASED) && now_ns - latency_ns < s->window_start_ns;
        if (!answered && s->drops < UINT32_MAX) s->drops++;
    } else if (outcome == SL_ADAPT_OK) {
        if (fast_sample(s, latency_ns)) {
            s->fast_sum_ns += (uint64_t)latency_ns;
            s->fast_ok++;
        }
        s->sum_ns += (uint64_t)latency_ns;
        s->ok++;
    }
    if (inflight > s->max_inflight) s->max_inflight = inflight;
    return close_window(p, s, now_ns);
}

bool sl_adapt_expired(const sl_adapt_params *p, sl_adapt_state *s, int64_t now_ns, uint32_t n,
                      uint32_t inflight) {
    if (n == 0) return false;
    if (!s->probing) s->drops = s->drops > UINT32_MAX - n ? UINT32_MAX : s->drops + n;
    if (inflight > s->max_inflight) s->max_inflight = inflight;
    return close_window(p, s, now_ns);
}

static int64_t shift(int64_t t, int64_t d) {
    int64_t r;
    if (__builtin_add_overflow(t, d, &r)) r = d < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
    return r;
}

void sl_adapt_rebase(sl_adapt_state *s, int64_t delta_ns) {
    s->window_start_ns = shift(s->window_start_ns, delta_ns);
    s->probe_ns = shift(s->probe_ns, delta_ns);
}

void sl_adapt_carry(const sl_adapt_params *np, sl_adapt_state *s) {
    s->limit_q16 = clamp_limit(np, s->limit_q16);
    s->stuck = 0;
}
