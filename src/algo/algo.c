/* SPDX-License-Identifier: Apache-2.0 */
/*
 * algo.c -- the dispatcher: validates what every limit shares, then hands each call to
 * the algorithm named by lim->algo (one file per algorithm, contracts in algo_impl.h).
 * Nothing here keeps state; the functions are as pure as the algorithms they call.
 */
#include <stdarg.h>
#include <stdio.h>

#include "algo_impl.h"
#include "tz.h"

typedef struct algo_ops {
    int (*init)(sl_limit *, const sluice_limit_spec *, char *, size_t);
    bool (*decide)(const sl_limit *, const void *, void *, sluice_time, uint64_t, sl_result *);
    void (*settle)(const sl_limit *, const void *, void *, sluice_time, int64_t, sl_result *);
    int64_t (*fresh_at)(const sl_limit *, const void *, sluice_time);
    void (*rebase)(const sl_limit *, void *, int64_t);
    void (*carry)(const sl_limit *, const void *, const sl_limit *, void *, sluice_time);
    bool rate; /* a rate algorithm: limit per period_ns, "used" comparable across them */
} algo_ops;

#define SL_OPS(X, rate)                                                                   \
    {sl_##X##_init,     sl_##X##_decide, sl_##X##_settle, sl_##X##_fresh_at, sl_##X##_rebase, \
     sl_##X##_carry, rate}

static const algo_ops ops_table[] = {
    [SLUICE_FIXED_WINDOW] = SL_OPS(fixed, true),
    [SLUICE_SLIDING_WINDOW] = SL_OPS(sliding, true),
    [SLUICE_SLIDING_LOG] = SL_OPS(log, true),
    [SLUICE_TOKEN_BUCKET] = SL_OPS(tb, true),
    [SLUICE_GCRA] = SL_OPS(gcra, true),
    [SLUICE_LEAKY_BUCKET] = SL_OPS(leaky, true),
    [SLUICE_CONCURRENCY] = SL_OPS(conc, false),
    [SLUICE_QUOTA] = SL_OPS(quota, false),
    [SLUICE_ADAPTIVE_CONCURRENCY] = SL_OPS(aconc, false),
};

/* An internal algorithm, outside the public numbering. */
static const algo_ops penalty_ops = SL_OPS(pen, false);

/* The operations of `algo`, or NULL for an unknown algorithm. (The references are strong
 * on purpose: a weak one would not pull conc.o or quota.o out of the static archive.) */
static const algo_ops *ops_of(sluice_algo algo) {
    if ((unsigned)algo >= sizeof(ops_table) / sizeof(ops_table[0]))
        return algo == SL_ALGO_PENALTY ? &penalty_ops : NULL;
    const algo_ops *o = &ops_table[algo];
    return o->init != NULL ? o : NULL;
}

int sl_algo_error(char *errbuf, size_t errbuf_len, int code, const char *fmt, ...) {
    if (errbuf != NULL && errbuf_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errbuf_len, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Largest limit or burst of the rate algorithms: units * SL_MICRO (1e18) and the
 * products with nanosecond durations stay within int64 / unsigned __int128. */
#define SL_UNITS_MAX UINT64_C(1000000000000)

int sl_limit_init(sl_limit *out, const sluice_limit_spec *spec, const struct sl_tz *tz,
                  char *errbuf, size_t errbuf_len) {
    if (errbuf != NULL && errbuf_len > 0) errbuf[0] = '\0';
    if (out == NULL || spec == NULL)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "no limit specification");
    memset(out, 0, sizeof(*out));
    if (spec->name == NULL || spec->name[0] == '\0')
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "a limit needs a name");
    size_t name_len = strnlen(spec->name, 256);
    if (name_len > 255)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                             "limit name is longer than 255 bytes");
    const char *algo_name = spec->algo == SL_ALGO_PENALTY ? "penalty" : sluice_algo_name(spec->algo);
    if (algo_name == NULL)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                             "limit '%s': unknown algorithm %d", spec->name, (int)spec->algo);
    const algo_ops *o = ops_of(spec->algo);
    if (o == NULL)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                             "limit '%s': algorithm %s is not available",
                             spec->name, algo_name);
    if (o->rate) {
        /* What the six rate algorithms share: limit units per period_ns. */
        if (spec->limit == 0)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                 "limit '%s': %s needs a limit of at least 1", spec->name,
                                 algo_name);
        if (spec->limit > SL_UNITS_MAX)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                                 "limit '%s': limit %llu is above the maximum %llu", spec->name,
                                 (unsigned long long)spec->limit,
                                 (unsigned long long)SL_UNITS_MAX);
        if (spec->burst > SL_UNITS_MAX)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                                 "limit '%s': burst %llu is above the maximum %llu", spec->name,
                                 (unsigned long long)spec->burst,
                                 (unsigned long long)SL_UNITS_MAX);
        if (spec->period_ns <= 0)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                 "limit '%s': %s needs a period above 0 ns (got %lld)",
                                 spec->name, algo_name, (long long)spec->period_ns);
    }
    char msg[200];
    msg[0] = '\0';
    int rc = o->init(out, spec, msg, sizeof(msg));
    if (rc != SLUICE_OK) {
        memset(out, 0, sizeof(*out));
        return sl_algo_error(errbuf, errbuf_len, rc, "limit '%s': %s", spec->name,
                             msg[0] ? msg : sluice_strerror(rc));
    }
    out->algo = spec->algo;
    out->tz = spec->algo == SLUICE_QUOTA ? tz : NULL;
    return SLUICE_OK;
}

/* A decision under a limit sl_limit_init never accepted (an unknown algorithm): never
 * admits. */
static bool unavailable(const sl_limit *lim, sl_result *r) {
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    r->retry_after_ns = SLUICE_NEVER;
    return false;
}

bool sl_algo_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    uint64_t cost, sl_result *r) {
    const algo_ops *o = ops_of(lim->algo);
    if (o == NULL) return unavailable(lim, r);
    bool ch = o->decide(lim, state, next, now, cost, r);
    if (lim->cap.tail) sl__cap_tail(lim, state, next);
    return ch;
}

void sl_algo_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    int64_t delta, sl_result *r) {
    const algo_ops *o = ops_of(lim->algo);
    if (o == NULL) {
        unavailable(lim, r);
        return;
    }
    o->settle(lim, state, next, now, delta, r);
    if (lim->cap.tail) sl__cap_tail(lim, state, next);
}

/* Whether a reservation made at `reserved_at` may still be refunded at `now`: only while
 * the window or calendar period that counted it is still the current one, so a refund
 * can never create room in a window that never held the reservation. Buckets have no
 * windows: their refunds are always valid (and capped at capacity). */
bool sl_algo_refundable(const sl_limit *lim, sluice_time reserved_at, sluice_time now) {
    switch (lim->algo) {
    case SLUICE_FIXED_WINDOW:
    case SLUICE_SLIDING_WINDOW:
        return sl_window_start(reserved_at.wall_ns, lim->period_ns) ==
               sl_window_start(now.wall_ns, lim->period_ns);
    case SLUICE_SLIDING_LOG:
        return now.mono_ns - reserved_at.mono_ns < lim->period_ns;
    case SLUICE_QUOTA: {
        int64_t a = reserved_at.wall_ns / SLUICE_NS_PER_S, b = now.wall_ns / SLUICE_NS_PER_S;
        return sl_cal_period_start(lim->tz, lim->quota_period, a) ==
               sl_cal_period_start(lim->tz, lim->quota_period, b);
    }
    default:
        return true;
    }
}

int64_t sl_algo_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    const algo_ops *o = ops_of(lim->algo);
    if (o == NULL) return now.mono_ns;
    int64_t at = o->fresh_at(lim, state, now);
    if (lim->cap.tail && state != NULL) at = sl__cap_tail_fresh_at(lim, state, at);
    return at;
}

void sl_algo_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    const algo_ops *o = ops_of(lim->algo);
    if (o != NULL && state != NULL) {
        o->rebase(lim, state, delta_ns);
        if (lim->cap.tail) sl__cap_tail_rebase(lim, state, delta_ns);
    }
}

/* Big enough for any rate algorithm's state (the sliding log is the largest). */
typedef union {
    int64_t align;
    unsigned char bytes[sizeof(sl_log_state) + sizeof(int64_t) * SL_SLIDING_LOG_MAX];
} state_buf;

/*
 * Same algorithm: the algorithm's own carry (it knows what "used" means for it).
 * Different rate algorithms: "used" is taken as capacity - remaining of a peek under the
 * old limit, clamped to the new capacity by the same rule (absolute usage, so raising a
 * limit and reverting it changes nothing) and charged onto a fresh state of the new one
 * at `now`. Anything else (to or from concurrency or quota, whose usage is not a rate)
 * starts fresh.
 */
void sl_algo_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                   sluice_time now) {
    const algo_ops *o = ops_of(lim->algo);
    if (o == NULL) return;
    const algo_ops *oo = ops_of(old->algo);
    sl_result r;
    if (oo == o && state != NULL) {
        o->carry(old, state, lim, next, now);
        if (lim->cap.tail || old->cap.tail) sl__cap_tail_carry(old, state, lim, next, now);
        return;
    }
    if (sl__cap_conc_cross(old, state, lim, next, now)) return; /* slots in flight kept */
    if (lim->cap.tail) { /* a fresh state of the new limit, tails included */
        sl__cap_tail_carry(old, NULL, lim, next, now);
    }
    o->decide(lim, NULL, next, now, 0, &r); /* writes the fresh state */
    if (oo == NULL || !oo->rate || !o->rate || state == NULL) return;
    state_buf tmp;
    oo->decide(old, state, tmp.bytes, now, 0, &r);
    uint64_t used = r.remaining < old->capacity ? old->capacity - r.remaining : 0;
    uint64_t new_used = used < lim->capacity ? used : lim->capacity;
    if (new_used > 0) {
        if (new_used > (uint64_t)INT64_MAX) new_used = (uint64_t)INT64_MAX;
        o->settle(lim, next, next, now, (int64_t)new_used, &r);
    }
}
