/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fixed.c -- fixed window: a count per window of period_ns, windows aligned on wall-clock
 * multiples of period_ns since the Unix epoch (as envoyproxy/ratelimit does), so every
 * instance and every restart agree on the boundaries. The state holds the window start in
 * wall ns: rebase (monotonic) leaves it alone, fresh_at converts through `now`.
 * Admits iff count + cost <= limit. Known flaw, by design: a client may spend the whole
 * limit at the end of one window and again at the start of the next, so up to 2x the
 * limit passes within period_ns around a boundary. Use it for long windows, not bursts.
 * Time steps: windows are calendar alignment, so they follow the wall clock. A step
 * forward ends the stored window early (the key gains at most one fresh window). A
 * stored window later than the wall clock's (the clock stepped back, or a snapshot from a
 * host whose clock was ahead) is state from the future: its count is kept but moved into
 * the window in force now, so the key waits at most until that window ends (<= period)
 * instead of until the wall clock catches up with the stored one.
 */
#include "algo_impl.h"

typedef __int128 i128;

int sl_fixed_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf,
                  size_t errbuf_len) {
    (void)errbuf;
    (void)errbuf_len;
    return sl_window_init(out, spec, sizeof(sl_fixed_state));
}

/* The window in force at `now` and its count. A stored window from the future (the
 * wall clock stepped back) is clamped to the current window with its count: nothing is
 * forgotten, and nothing waits longer than one period. */
static sl_fixed_state current(const sl_limit *lim, const void *state, sluice_time now) {
    sl_fixed_state w = {sl_window_start(now.wall_ns, lim->period_ns), 0};
    if (state != NULL) {
        const sl_fixed_state *s = state;
        if (s->window_start_ns >= w.window_start_ns) w.count = s->count;
    }
    return w;
}

static int64_t window_left(const sl_limit *lim, const sl_fixed_state *w, sluice_time now) {
    i128 left = (i128)w->window_start_ns + lim->period_ns - now.wall_ns;
    return left > INT64_MAX ? INT64_MAX : (int64_t)left;
}

static void report(const sl_limit *lim, const sl_fixed_state *w, sluice_time now,
                   sl_result *r) {
    r->remaining = w->count < lim->limit ? lim->limit - w->count : 0;
    r->reset_after_ns = w->count > 0 ? window_left(lim, w, now) : 0;
}

static void keep(const void *state, void *next, const sl_fixed_state *w) {
    if (state == NULL)
        *(sl_fixed_state *)next = *w;
    else if (state != next)
        *(sl_fixed_state *)next = *(const sl_fixed_state *)state;
}

/* Whether `state` is from the future at `now` (current() moved its count). */
static bool from_future(const sl_limit *lim, const void *state, sluice_time now) {
    return state != NULL && ((const sl_fixed_state *)state)->window_start_ns >
                                sl_window_start(now.wall_ns, lim->period_ns);
}

/* A rejection or a peek writes back what is stored, except a state from the future: its
 * clamped form is written (and true returned) so that the store keeps it, and the count
 * expires with the current window instead of being moved into every window until the
 * wall clock catches up. */
bool sl_fixed_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     uint64_t cost, sl_result *r) {
    sl_fixed_state w = current(lim, state, now);
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    if (cost > lim->limit) {
        r->retry_after_ns = SLUICE_NEVER;
    } else if (w.count > lim->limit - cost) {
        /* The next window starts empty, and cost <= limit fits in it. */
        r->retry_after_ns = window_left(lim, &w, now);
    } else {
        r->allowed = true;
        if (cost > 0) {
            w.count += cost;
            *(sl_fixed_state *)next = w;
            report(lim, &w, now, r);
            return true;
        }
    }
    report(lim, &w, now, r);
    if (from_future(lim, state, now)) {
        *(sl_fixed_state *)next = w;
        return true;
    }
    keep(state, next, &w);
    return false;
}

/* A refund comes only out of the window in force (a window that has passed keeps what it
 * counted); a charge is added to the window in force, past the limit if need be. */
void sl_fixed_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     int64_t delta, sl_result *r) {
    sl_fixed_state w = current(lim, state, now);
    if (delta < 0) {
        uint64_t refund = (uint64_t)0 - (uint64_t)delta;
        w.count = w.count > refund ? w.count - refund : 0;
    } else {
        w.count = w.count > UINT64_MAX - (uint64_t)delta ? UINT64_MAX : w.count + (uint64_t)delta;
    }
    *(sl_fixed_state *)next = w;
    sl_fixed_decide(lim, next, next, now, 0, r);
}

/* Fresh once the window in force has passed (or at once when it counted nothing). */
int64_t sl_fixed_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    sl_fixed_state w = current(lim, state, now);
    if (w.count == 0) return now.mono_ns;
    i128 at = (i128)now.mono_ns + ((i128)w.window_start_ns + lim->period_ns - now.wall_ns);
    if (at < now.mono_ns) return now.mono_ns;
    return at > INT64_MAX ? INT64_MAX : (int64_t)at;
}

/* Only wall-clock times inside: nothing to shift. */
void sl_fixed_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim;
    (void)state;
    (void)delta_ns;
}

/* The count of the window in force, clamped to the new limit (absolute usage: raising a
 * limit and reverting it changes nothing), in the window of the new period containing
 * now. */
void sl_fixed_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                    sluice_time now) {
    sl_fixed_state w = current(old, state, now);
    uint64_t used = w.count < lim->limit ? w.count : lim->limit;
    sl_fixed_state n = {sl_window_start(now.wall_ns, lim->period_ns), used};
    if (lim->period_ns == old->period_ns) n.window_start_ns = w.window_start_ns;
    *(sl_fixed_state *)next = n;
}
