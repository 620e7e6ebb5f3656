/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sliding.c -- sliding window counter (Cloudflare's approximation, SPECS.md §7.2) in
 * integers: counts of the current and the previous fixed window (wall-aligned as in
 * fixed.c); at `elapsed` ns into the current window the estimated use is
 * prev * (W - elapsed) / W + cur, and a request is admitted iff
 *   prev * (W - elapsed) + (cur + cost) * W <= limit * W.
 * Error bound: the estimate assumes the previous window's traffic was uniform. Over any
 * window (t - W, t] with t at `elapsed` into window k, the admitted count is at most
 *   limit + (A - prev * (W - elapsed) / W)
 * where A is what window k-1 admitted in its last W - elapsed ns: the overshoot is how
 * far that tail is above uniform, so it is 0 for uniform traffic and below limit (total
 * < 2 * limit) when all of a full previous window sits at its very end. Symmetrically it
 * refuses early when the previous window's traffic was front-loaded.
 * Time steps: windows follow the wall clock (calendar alignment). A step forward ends
 * them early (at most one fresh window gained). A stored window later than the wall
 * clock's (a step back, or a snapshot from a host whose clock was ahead) is state from
 * the future: both counts are kept but moved to the windows in force now, and that
 * clamped state is written back by the next decision, so no key waits for the wall clock
 * to catch up (the longest wait stays what the estimator gives: below 2 windows).
 */
#include "algo_impl.h"

typedef __int128 i128;

/* Counts are kept below this (settle charges saturate), so prev * W + cur * W fits in
 * a signed 128-bit product for any period. */
#define SLIDING_COUNT_MAX (UINT64_C(1) << 62)

int sl_sliding_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf,
                    size_t errbuf_len) {
    (void)errbuf;
    (void)errbuf_len;
    return sl_window_init(out, spec, sizeof(sl_sliding_state));
}

static int64_t clamp64(i128 v) {
    if (v > INT64_MAX) return INT64_MAX;
    if (v < INT64_MIN) return INT64_MIN;
    return (int64_t)v;
}

/* The two windows in force at `now`. A stored window later than the wall clock's (it
 * stepped back) is state from the future: its counts move to the windows in force. */
static sl_sliding_state current(const sl_limit *lim, const void *state, sluice_time now) {
    int64_t ws = sl_window_start(now.wall_ns, lim->period_ns);
    sl_sliding_state w = {ws, 0, 0};
    if (state == NULL) return w;
    const sl_sliding_state *s = state;
    if (s->window_start_ns >= ws) w.cur = s->cur, w.prev = s->prev;
    else if ((i128)s->window_start_ns + lim->period_ns == ws) w.prev = s->cur;
    if (w.cur > SLIDING_COUNT_MAX) w.cur = SLIDING_COUNT_MAX;
    if (w.prev > SLIDING_COUNT_MAX) w.prev = SLIDING_COUNT_MAX;
    return w;
}

static int64_t elapsed_in(const sl_sliding_state *w, sluice_time now) {
    i128 e = (i128)now.wall_ns - w->window_start_ns;
    return e > 0 ? (int64_t)e : 0;
}

/* prev*(W-e) + (cur+cost)*W <= limit*W, all in 128 bits. */
static bool fits(const sl_limit *lim, uint64_t prev, uint64_t cur, uint64_t cost, int64_t e) {
    i128 w = lim->period_ns;
    i128 used = (i128)prev * (w - e) + ((i128)cur + cost) * w;
    return used <= (i128)lim->limit * w;
}

/*
 * The earliest elapsed e in [0, W) of a window with counts (prev, cur) at which `cost`
 * fits, or -1. With X = limit - cur - cost >= 0 the condition is prev*(W-e) <= X*W, i.e.
 * W - e <= floor(X*W/prev): e = W - floor(X*W/prev) (the ceiling of §7.2's elapsed').
 */
static int64_t earliest(const sl_limit *lim, uint64_t prev, uint64_t cur, uint64_t cost) {
    if ((i128)cur + cost > lim->limit) return -1;
    if (prev == 0) return 0;
    i128 x = (i128)lim->limit - cur - cost;
    i128 room = x * lim->period_ns / prev;
    if (room >= lim->period_ns) return 0;
    if (room == 0) return -1;
    return (int64_t)(lim->period_ns - room);
}

/* Exact retry-after: this window, else the next (prev' = cur), else the one after
 * (both empty, so cost <= limit fits at its start). */
static int64_t retry_after(const sl_limit *lim, const sl_sliding_state *w, sluice_time now,
                           uint64_t cost) {
    i128 start = w->window_start_ns;
    int64_t e = earliest(lim, w->prev, w->cur, cost);
    if (e < 0) {
        start += lim->period_ns;
        e = earliest(lim, w->cur, 0, cost);
        if (e < 0) {
            start += lim->period_ns;
            e = 0;
        }
    }
    return clamp64(start + e - now.wall_ns);
}

static void report(const sl_limit *lim, const sl_sliding_state *w, sluice_time now,
                   sl_result *r) {
    i128 wl = lim->period_ns;
    int64_t e = elapsed_in(w, now);
    i128 room = (i128)lim->limit * wl - (i128)w->prev * (wl - e) - (i128)w->cur * wl;
    r->remaining = room > 0 ? (uint64_t)(room / wl) : 0;
    /* Back to fresh when both counts have slid out. */
    i128 fresh = w->cur > 0 ? (i128)w->window_start_ns + 2 * wl
                 : w->prev > 0 ? (i128)w->window_start_ns + wl
                               : (i128)now.wall_ns;
    r->reset_after_ns = fresh > now.wall_ns ? clamp64(fresh - now.wall_ns) : 0;
}

bool sl_sliding_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                       uint64_t cost, sl_result *r) {
    sl_sliding_state w = current(lim, state, now);
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    if (cost > lim->limit) {
        r->retry_after_ns = SLUICE_NEVER;
    } else if (!fits(lim, w.prev, w.cur, cost, elapsed_in(&w, now))) {
        r->retry_after_ns = retry_after(lim, &w, now, cost);
    } else {
        r->allowed = true;
        if (cost > 0) {
            w.cur += cost;
            *(sl_sliding_state *)next = w;
            report(lim, &w, now, r);
            return true;
        }
    }
    report(lim, &w, now, r);
    /* A state from the future is written back clamped (see the top of the file). */
    if (state != NULL && ((const sl_sliding_state *)state)->window_start_ns > w.window_start_ns) {
        *(sl_sliding_state *)next = w;
        return true;
    }
    if (state == NULL)
        *(sl_sliding_state *)next = w;
    else if (state != next)
        *(sl_sliding_state *)next = *(const sl_sliding_state *)state;
    return false;
}

/* Refunds come only out of the current window's count (the previous window has passed);
 * charges go into it. */
void sl_sliding_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                       int64_t delta, sl_result *r) {
    sl_sliding_state w = current(lim, state, now);
    if (delta < 0) {
        uint64_t refund = (uint64_t)0 - (uint64_t)delta;
        w.cur = w.cur > refund ? w.cur - refund : 0;
    } else {
        uint64_t d = (uint64_t)delta;
        w.cur = d >= SLIDING_COUNT_MAX - w.cur ? SLIDING_COUNT_MAX : w.cur + d;
    }
    *(sl_sliding_state *)next = w;
    sl_sliding_decide(lim, next, next, now, 0, r);
}

int64_t sl_sliding_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    sl_sliding_state w = current(lim, state, now);
    const sl_sliding_state *s = &w;
    i128 fresh = s->cur > 0 ? (i128)s->window_start_ns + 2 * (i128)lim->period_ns
                 : s->prev > 0 ? (i128)s->window_start_ns + lim->period_ns
                               : (i128)now.wall_ns;
    if (fresh <= now.wall_ns) return now.mono_ns;
    return clamp64((i128)now.mono_ns + (fresh - now.wall_ns));
}

void sl_sliding_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim;
    (void)state;
    (void)delta_ns;
}

/* Both counts kept as they are, clamped to the new limit (absolute usage: raising a
 * limit and reverting it changes nothing). With a new window length the counts are
 * placed in the new windows containing now and the one before. */
void sl_sliding_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                      sluice_time now) {
    sl_sliding_state w = current(old, state, now);
    if (w.cur > lim->limit) w.cur = lim->limit;
    if (w.prev > lim->limit) w.prev = lim->limit;
    if (lim->period_ns != old->period_ns) w.window_start_ns = sl_window_start(now.wall_ns, lim->period_ns);
    *(sl_sliding_state *)next = w;
}
