/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gcra.c -- the generic cell rate algorithm, as redis-cell and go-redis/redis_rate run it
 * (SPECS.md §5, §6.2). State: one monotonic timestamp, the TAT. T = period_ns / limit
 * (ns, truncated like redis-cell); B = burst, or limit when burst is 0. Admits iff
 * new_tat - B*T <= now (diff >= 0 in ns, as redis-cell since 0.2.2 and SPECS §6.2), i.e.
 * exactly the admissions of a token bucket of B tokens refilled one per T. redis-cell's
 * max_burst=N is our burst N+1 (it admits N+1 from idle). Arithmetic is in __int128 and
 * stored times are clamped, so no input overflows.
 * `remaining` is floor((B*T - (TAT - now)) / T) in ns. redis-cell (every version through
 * 0.5) computes it from whole microseconds instead, trunc(trunc_us(B*T - ttl) /
 * trunc_us(T)), which can be one more (T = 142857142 ns is divided as 142857 us). Limits
 * made for CL.THROTTLE (sl_gcra_cell_init, lim->cell) reproduce that formula; every other
 * GCRA keeps the exact one. See docs/algorithms.md for what else differs.
 */
#include "algo_impl.h"

typedef __int128 i128;

/* The TAT is kept at most this far ahead of now (charges past the limit: debt). */
#define GCRA_MAX_AHEAD (INT64_MAX / 4)
/* Largest B*T accepted by init (29 years), and for CL.THROTTLE (146 years: redis-cell
 * takes anything whose B*T fits in an i64; the 128-bit path keeps these exact). */
#define GCRA_MAX_DVT (INT64_MAX / 8)
#define GCRA_CELL_MAX_DVT (INT64_MAX / 2)

/* floor(a / b) for a >= 0, b > 0. Why: a 128-bit division is a libgcc call (__divti3,
 * ~25-40 instructions and a slow divide) even when both operands are small, which is
 * the common case here (ns and unit counts of ordinary rates); a 64-bit divide gives
 * the same quotient whenever the numerator fits, so only huge values pay for 128 bits. */
static inline i128 div_nonneg(i128 a, int64_t b) {
    if (a <= (i128)UINT64_MAX) return (i128)((uint64_t)a / (uint64_t)b);
    return a / b;
}

static int64_t clamp64(i128 v) {
    if (v > INT64_MAX) return INT64_MAX;
    if (v < INT64_MIN) return INT64_MIN;
    return (int64_t)v;
}

int sl_gcra_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf,
                 size_t errbuf_len) {
    int64_t t = spec->period_ns / (int64_t)spec->limit;
    if (t <= 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                             "rate too high for gcra: period %lld ns / limit %llu is below 1 ns",
                             (long long)spec->period_ns, (unsigned long long)spec->limit);
    /* T is truncated to the ns (as redis-cell does), which makes the real rate
     * limit/(limit*T) a little faster than asked. Refuse parameters where that error
     * exceeds one part in 10,000 (e.g. 1e6 per 1999999 ns would run at 2x): such
     * rates want token_bucket, which keeps the exact fraction. */
    if ((i128)(spec->period_ns % (int64_t)spec->limit) * 10000 > spec->period_ns)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                             "gcra needs period/limit in whole ns to 0.01%%: %lld ns / %llu "
                             "leaves a fraction of %lld ns (use token_bucket)",
                             (long long)spec->period_ns, (unsigned long long)spec->limit,
                             (long long)(spec->period_ns % (int64_t)spec->limit));
    uint64_t b = spec->burst ? spec->burst : spec->limit;
    if ((i128)b * t > GCRA_MAX_DVT)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                             "burst %llu at one per %lld ns spans more than %lld ns",
                             (unsigned long long)b, (long long)t, (long long)GCRA_MAX_DVT);
    out->limit = spec->limit;
    out->capacity = b;
    out->period_ns = spec->period_ns;
    out->emission_ns = t;
    out->state_size = sizeof(sl_gcra_state);
    return SLUICE_OK;
}

/*
 * CL.THROTTLE parameters, as redis-cell derives them (cell/mod.rs): T = (ns as f64 /
 * count as f64) as i64, DVT = T * (max_burst + 1), limit max_burst + 1. For periods below
 * 2^53 ns (104 days) the f64 quotient truncates to floor(ns / count) exactly (a rounding
 * up to the next integer needs (count - rem) * (2^53 - 1) <= ns), which is what is used;
 * longer periods may differ by the f64 rounding of ns itself. T = 0 is redis-cell's "Zero
 * rates are not supported". No 0.01% accuracy check: redis-cell's T is truncated too.
 */
int sl_gcra_cell_init(sl_limit *out, int64_t max_burst, int64_t count, int64_t period_s,
                      char *errbuf, size_t errbuf_len) {
    if (out == NULL) return SLUICE_EINVAL;
    memset(out, 0, sizeof(*out));
    if (max_burst < 0 || count <= 0 || period_s <= 0 || max_burst >= INT64_MAX - 1 ||
        period_s > INT64_MAX / SLUICE_NS_PER_S)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                             "CL.THROTTLE needs max_burst >= 0, count >= 1 and period >= 1");
    int64_t p = period_s * SLUICE_NS_PER_S, t = p / count;
    if (t <= 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "Zero rates are not supported");
    if ((i128)(max_burst + 1) * t > GCRA_CELL_MAX_DVT)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE,
                             "burst %lld at one per %lld ns spans more than %lld ns",
                             (long long)(max_burst + 1), (long long)t,
                             (long long)GCRA_CELL_MAX_DVT);
    out->algo = SLUICE_GCRA;
    out->limit = (uint64_t)count;
    out->capacity = (uint64_t)max_burst + 1;
    out->period_ns = p;
    out->emission_ns = t;
    out->state_size = sizeof(sl_gcra_state);
    out->cell = true;
    return SLUICE_OK;
}

/*
 * redis-cell's remaining (cell/mod.rs, unchanged from 0.2 to 0.5): next = DVT - ttl, and
 * if next > -T, (next.whole_microseconds() as f64 / T.whole_microseconds() as f64) as i64,
 * else 0. Both operands are below 2^53 (next <= DVT <= 2^62 ns: in us, below 2^53), so the f64
 * quotient truncates to the integer quotient exactly (same argument as above); a T below
 * 1 us divides by zero in f64: +inf saturates to INT64_MAX, NaN (0/0) casts to 0. Here
 * ttl is reset_after_ns (TAT - now, or new TAT - now when admitted).
 */
__attribute__((noinline, cold)) static void cell_remaining(const sl_limit *lim, sl_result *r) {
    int64_t T = lim->emission_ns;
    i128 next = (i128)lim->capacity * T - r->reset_after_ns;
    if (next <= -(i128)T) {
        r->remaining = 0;
        return;
    }
    int64_t a = (int64_t)(next / 1000), b = T / 1000; /* whole_microseconds: toward zero */
    if (b == 0) r->remaining = a > 0 ? (uint64_t)INT64_MAX : 0;
    else r->remaining = a > 0 ? (uint64_t)(a / b) : 0;
}

/* The stored TAT, or now for a fresh key or a TAT already in the past. */
static i128 tat_at(const void *state, int64_t now) {
    int64_t tat = state ? ((const sl_gcra_state *)state)->tat_ns : now;
    return tat < now ? now : tat;
}

/* remaining = floor((B*T - (tat - now)) / T), 0 when negative (redis-cell). */
static uint64_t remaining_of(const sl_limit *lim, i128 tat, int64_t now) {
    i128 room = (i128)lim->capacity * lim->emission_ns - (tat - now);
    return room > 0 ? (uint64_t)div_nonneg(room, lim->emission_ns) : 0;
}

/*
 * The decision in 64-bit arithmetic, times taken relative to now: d = TAT - now,
 * nd = new_tat - now, diff = B*T - nd (= now - allow_at). Why: the 128-bit version below
 * costs ~115 instructions per call for values that nearly always fit in 64 bits. It
 * gives exactly the same state and result; when any intermediate value might leave
 * int64 (cost > B, B*T or TAT - now overflowing) it returns false having written
 * nothing, and the caller takes the 128-bit path.
 */
static inline bool decide64(const sl_limit *lim, const void *state, void *next, int64_t t,
                            uint64_t cost, sl_result *r, bool *changed) {
    int64_t T = lim->emission_ns, dvt, inc, d, nd;
    if (cost > lim->capacity || lim->capacity > (uint64_t)INT64_MAX) return false;
    if (__builtin_mul_overflow((int64_t)lim->capacity, T, &dvt)) return false;
    inc = (int64_t)cost * T; /* cost <= B: no overflow */
    int64_t stored = state ? ((const sl_gcra_state *)state)->tat_ns : t;
    int64_t tat = stored < t ? t : stored;
    if (__builtin_sub_overflow(tat, t, &d) || __builtin_add_overflow(d, inc, &nd)) return false;
    int64_t diff = dvt - nd; /* both in [0, INT64_MAX]: no overflow */
    r->limit = lim->capacity;
    r->delay_ns = 0;
    r->lease = 0;
    sl_gcra_state *n = next;
    if (diff < 0) {
        r->allowed = false;
        r->retry_after_ns = -diff;
        r->reset_after_ns = d;
        r->remaining = dvt > d ? (uint64_t)(dvt - d) / (uint64_t)T : 0;
        n->tat_ns = stored;
        *changed = false;
        return true;
    }
    r->allowed = true;
    r->retry_after_ns = 0;
    r->reset_after_ns = nd;
    r->remaining = (uint64_t)diff / (uint64_t)T;
    if (cost == 0) {
        n->tat_ns = stored;
        *changed = false;
        return true;
    }
    int64_t nt;
    n->tat_ns = __builtin_add_overflow(t, nd, &nt) ? INT64_MAX : nt; /* clamp64(new_tat) */
    *changed = true;
    return true;
}

static bool decide128(const sl_limit *lim, const void *state, void *next, sluice_time now,
                      uint64_t cost, sl_result *r);

/* The 64-bit path first (nearly every call); the 128-bit one and redis-cell's remaining
 * are kept out of line so that the common path stays as short as it was without them. */
bool sl_gcra_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    uint64_t cost, sl_result *r) {
    bool changed;
    if (__builtin_expect(!decide64(lim, state, next, now.mono_ns, cost, r, &changed), 0))
        changed = decide128(lim, state, next, now, cost, r);
    if (__builtin_expect(lim->cell, 0)) cell_remaining(lim, r);
    return changed;
}

/* The same decision in 128-bit arithmetic, for values decide64 refuses. */
__attribute__((noinline)) static bool decide128(const sl_limit *lim, const void *state,
                                                void *next, sluice_time now, uint64_t cost,
                                                sl_result *r) {
    int64_t t = now.mono_ns;
    i128 tat = tat_at(state, t);
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    sl_gcra_state *n = next;
    int64_t stored = state ? ((const sl_gcra_state *)state)->tat_ns : t;

    if (cost > lim->capacity) { /* inc > DVT: can never fit */
        n->tat_ns = stored;
        r->retry_after_ns = SLUICE_NEVER;
        r->reset_after_ns = clamp64(tat - t);
        r->remaining = remaining_of(lim, tat, t);
        return false;
    }
    i128 new_tat = tat + (i128)cost * lim->emission_ns;
    i128 allow_at = new_tat - (i128)lim->capacity * lim->emission_ns;
    i128 diff = (i128)t - allow_at;
    if (diff < 0) { /* deny, state unchanged; at now - diff, diff is exactly 0 */
        n->tat_ns = stored;
        r->retry_after_ns = clamp64(-diff);
        r->reset_after_ns = clamp64(tat - t);
        r->remaining = remaining_of(lim, tat, t);
        return false;
    }
    r->allowed = true;
    r->reset_after_ns = clamp64(new_tat - t);
    r->remaining = (uint64_t)div_nonneg(diff, lim->emission_ns);
    if (cost == 0) { /* peek */
        n->tat_ns = stored;
        return false;
    }
    n->tat_ns = clamp64(new_tat);
    return true;
}

/* Charge: TAT += delta*T (from max(TAT, now)); refund: TAT -= delta*T, never below now. */
void sl_gcra_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    int64_t delta, sl_result *r) {
    int64_t t = now.mono_ns;
    i128 tat = tat_at(state, t) + (i128)delta * lim->emission_ns;
    if (tat < t) tat = t;
    if (tat > (i128)t + GCRA_MAX_AHEAD) tat = (i128)t + GCRA_MAX_AHEAD;
    ((sl_gcra_state *)next)->tat_ns = clamp64(tat);
    sl_gcra_decide(lim, next, next, now, 0, r);
}

/* TAT <= now is a fresh key. */
int64_t sl_gcra_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    (void)lim;
    return state ? ((const sl_gcra_state *)state)->tat_ns : now.mono_ns;
}

void sl_gcra_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim;
    sl_gcra_state *s = state;
    s->tat_ns = clamp64((i128)s->tat_ns + delta_ns);
}

/*
 * "Used" is the TAT debt d = TAT - now, i.e. u = d/T_old units (fractions kept). It is
 * carried as an absolute amount clamped to the new capacity: a debt of min(u, B_new)
 * times T_new (truncated to the ns), so raising a limit and reverting it changes nothing.
 */
void sl_gcra_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                   sluice_time now) {
    int64_t t = now.mono_ns;
    i128 d = tat_at(state, t) - t;
    i128 cap = (i128)lim->capacity * lim->emission_ns;
    /* d <= GCRA_MAX_AHEAD and T_new <= GCRA_MAX_DVT: the product fits in 128 bits */
    i128 keep = d * lim->emission_ns / old->emission_ns;
    if (keep > cap) keep = cap;
    ((sl_gcra_state *)next)->tat_ns = clamp64((i128)t + keep);
}
