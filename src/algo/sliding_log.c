/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c -- sliding log: one monotonic timestamp per admitted unit in a ring of `limit`
 * slots, oldest first (timestamps never decrease). Exact: admits iff the units logged in
 * (now - W, now] plus cost fit in limit. Memory is 8 bytes per unit of the limit, so the
 * limit is capped at SL_SLIDING_LOG_MAX; beyond it, sliding_window or a bucket is the
 * tool. Because the ring holds at most `limit` entries, a settle charge past the limit is
 * recorded as a full log (the excess beyond `limit` is not remembered).
 */
#include "algo_impl.h"

typedef __int128 i128;

int sl_log_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf, size_t errbuf_len) {
    if (spec->limit > SL_SLIDING_LOG_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                             "sliding_log keeps one timestamp per unit: limit %llu is above its "
                             "maximum of %d (use sliding_window or token_bucket)",
                             (unsigned long long)spec->limit, SL_SLIDING_LOG_MAX);
    out->limit = spec->limit;
    out->capacity = spec->limit;
    out->period_ns = spec->period_ns;
    out->state_size = (uint32_t)(sizeof(sl_log_state) + sizeof(int64_t) * spec->limit);
    return SLUICE_OK;
}

/* A linear copy of the live entries (oldest first). */
typedef struct {
    uint32_t n;
    int64_t ts[SL_SLIDING_LOG_MAX];
} live_log;

/* Entries still in (now - W, now]; a fresh key (NULL) has none. Entries beyond the ring
 * size of `lim` (a state from a larger limit) are not read. */
static void load(const sl_limit *lim, const void *state, int64_t now, live_log *out) {
    out->n = 0;
    if (state == NULL) return;
    const sl_log_state *s = state;
    uint32_t size = (uint32_t)lim->limit;
    uint32_t count = s->count <= size ? s->count : size;
    i128 horizon = (i128)now - lim->period_ns;
    for (uint32_t i = 0; i < count; i++) {
        int64_t t = s->ts[(s->head + i) % size];
        if (t > horizon) out->ts[out->n++] = t;
    }
}

/* Writes `l` to `next` as a ring starting at slot 0 (next may alias the stored state:
 * `l` is a separate copy). */
static void store(const live_log *l, void *next) {
    sl_log_state *n = next;
    n->head = 0;
    n->count = l->n;
    memcpy(n->ts, l->ts, sizeof(int64_t) * l->n);
}

static void report(const sl_limit *lim, const live_log *l, int64_t now, sl_result *r) {
    r->remaining = lim->limit > l->n ? lim->limit - l->n : 0;
    if (l->n == 0) {
        r->reset_after_ns = 0;
    } else {
        i128 empty_at = (i128)l->ts[l->n - 1] + lim->period_ns;
        r->reset_after_ns = empty_at > now ? (int64_t)(empty_at - now) : 0;
    }
}

/* Appends up to `k` entries at `t`, dropping the oldest when the ring is full. */
static void append(const sl_limit *lim, live_log *l, int64_t t, uint64_t k) {
    uint32_t size = (uint32_t)lim->limit;
    if (k > size) k = size;
    if (l->n + k > size) {
        uint32_t drop = (uint32_t)(l->n + k - size);
        memmove(l->ts, l->ts + drop, sizeof(int64_t) * (l->n - drop));
        l->n -= drop;
    }
    for (uint64_t i = 0; i < k; i++) l->ts[l->n++] = t;
}

bool sl_log_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                   uint64_t cost, sl_result *r) {
    int64_t t = now.mono_ns;
    live_log l;
    load(lim, state, t, &l);
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    if (cost > lim->limit) {
        r->retry_after_ns = SLUICE_NEVER;
    } else if (l.n + cost > lim->limit) {
        /* The k-th oldest live entry must leave: it does at ts + W (inclusive). */
        uint32_t k = (uint32_t)(l.n + cost - lim->limit);
        i128 at = (i128)l.ts[k - 1] + lim->period_ns;
        r->retry_after_ns = (int64_t)(at - t);
    } else {
        r->allowed = true;
        if (cost > 0) {
            append(lim, &l, t, cost);
            store(&l, next);
            report(lim, &l, t, r);
            return true;
        }
    }
    /* Unchanged: copy what was stored (or a fresh, empty log). */
    if (state == NULL) {
        live_log empty = {0};
        store(&empty, next);
    } else if (state != next) {
        memcpy(next, state, lim->state_size);
    }
    report(lim, &l, t, r);
    return false;
}

/* Refund: removes the newest live timestamps. Charge: adds timestamps at now (capped by
 * the ring, see the top of the file). */
void sl_log_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                   int64_t delta, sl_result *r) {
    int64_t t = now.mono_ns;
    live_log l;
    load(lim, state, t, &l);
    if (delta < 0) {
        uint64_t refund = (uint64_t)0 - (uint64_t)delta;
        l.n = refund >= l.n ? 0 : (uint32_t)(l.n - refund);
    } else {
        append(lim, &l, t, (uint64_t)delta);
    }
    store(&l, next);
    sl_log_decide(lim, next, next, now, 0, r);
}

/* Empty once the newest entry has left the window. */
int64_t sl_log_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    const sl_log_state *s = state;
    uint32_t size = (uint32_t)lim->limit;
    if (s->count == 0 || size == 0) return now.mono_ns;
    uint32_t count = s->count <= size ? s->count : size;
    i128 at = (i128)s->ts[(s->head + count - 1) % size] + lim->period_ns;
    return at > INT64_MAX ? INT64_MAX : (int64_t)at;
}

void sl_log_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    sl_log_state *s = state;
    uint32_t size = (uint32_t)lim->limit;
    uint32_t count = s->count <= size ? s->count : size;
    for (uint32_t i = 0; i < count; i++) {
        int64_t *p = &s->ts[(s->head + i) % size];
        i128 v = (i128)*p + delta_ns;
        *p = v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
    }
}

/* Keeps the newest min(used, new_limit) live entries: absolute usage, so raising a limit
 * and reverting it changes nothing (timestamps are absolute, so a new window length
 * applies to them as they are). */
void sl_log_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                  sluice_time now) {
    live_log l;
    load(old, state, now.mono_ns, &l);
    uint64_t used = l.n;
    if (used > lim->limit) used = lim->limit;
    uint32_t drop = l.n - (uint32_t)used;
    memmove(l.ts, l.ts + drop, sizeof(int64_t) * used);
    l.n = (uint32_t)used;
    store(&l, next);
}
