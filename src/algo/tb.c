/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tb.c -- token bucket: refilled at limit units per period_ns up to a capacity of burst
 * units (limit when burst is 0). State: tokens in micro-units at last_ns (monotonic); a
 * fresh key is a full bucket. Refill is lazy, computed from last_ns at full precision
 * (__int128) and truncated down to the micro-unit. An admission restarts the state at
 * `now`, so each admission may drop < 1 micro-unit of refill: the bucket is never faster
 * than the ideal one and at most 1e-6 unit per admission slower (conservative). Tokens
 * go below zero only through settle charges (debt, repaid by the refill).
 */
#include "algo_impl.h"

typedef __int128 i128;

/* Lowest token level (debt) kept, in micro-units; charges beyond it are dropped. */
#define TB_DEBT_MIN (-INT64_C(4000000000000000000))

static int64_t cap_u(const sl_limit *lim) { return (int64_t)lim->capacity * SL_MICRO; }

int sl_tb_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf, size_t errbuf_len) {
    (void)errbuf;
    (void)errbuf_len;
    out->limit = spec->limit;
    out->capacity = spec->burst ? spec->burst : spec->limit;
    out->period_ns = spec->period_ns;
    out->state_size = sizeof(sl_tb_state);
    return SLUICE_OK;
}

/* floor(a / b) for a >= 0, b > 0. Why: a 128-bit division is a libgcc call (__divti3)
 * even when both operands are small, the common case (ordinary rates, elapsed times far
 * below the time to fill); a 64-bit divide gives the same quotient whenever the
 * numerator fits, so only extreme values pay for the 128-bit one. */
static inline i128 div_nonneg(i128 a, i128 b) {
    if (a <= (i128)UINT64_MAX && b <= (i128)UINT64_MAX)
        return (i128)((uint64_t)a / (uint64_t)b);
    return a / b;
}

/* The smallest d (ns) whose refill, floor(d * limit * M / period), reaches need_u. */
static i128 ns_for(const sl_limit *lim, i128 need_u) {
    if (need_u <= 0) return 0;
    i128 den = (i128)lim->limit * SL_MICRO;
    return div_nonneg(need_u * lim->period_ns + den - 1, den);
}

static int64_t clamp64(i128 v) {
    if (v > INT64_MAX) return INT64_MAX;
    if (v < INT64_MIN) return INT64_MIN;
    return (int64_t)v;
}

static sl_tb_state load(const sl_limit *lim, const void *state, int64_t now) {
    if (state == NULL) return (sl_tb_state){now, cap_u(lim)};
    return *(const sl_tb_state *)state;
}

/* Tokens (micro-units) at `now`: the stored amount plus the truncated refill, capped. */
static int64_t tokens_at(const sl_limit *lim, const sl_tb_state *s, int64_t now) {
    i128 el = (i128)now - s->last_ns;
    if (el <= 0) return s->tokens_u;
    int64_t cap = cap_u(lim);
    if (s->tokens_u >= cap) return s->tokens_u > cap ? cap : s->tokens_u;
    /* Past the time to fill, the product could exceed even 128 bits: cap first. */
    if (el >= ns_for(lim, (i128)cap - s->tokens_u)) return cap;
    i128 tok = s->tokens_u + div_nonneg(el * lim->limit * SL_MICRO, lim->period_ns);
    return tok > cap ? cap : (int64_t)tok;
}

/* ns from now until the bucket is full again (0 when it is). */
static int64_t full_after(const sl_limit *lim, const sl_tb_state *s, int64_t now) {
    i128 at = (i128)s->last_ns + ns_for(lim, (i128)cap_u(lim) - s->tokens_u);
    return at > now ? clamp64(at - now) : 0;
}

static uint64_t units(int64_t tokens_u) { return tokens_u > 0 ? (uint64_t)(tokens_u / SL_MICRO) : 0; }

/* ns_for in 64 bits: false when need_u * period_ns does not fit (the caller then takes
 * the 128-bit path). ceil(p / den) as quotient + (remainder != 0): one divide, and no
 * p + den - 1 that could wrap. */
static inline bool ns_for64(uint64_t den, int64_t period_ns, int64_t need_u, int64_t *out) {
    uint64_t p;
    if (need_u <= 0) {
        *out = 0;
        return true;
    }
    if (__builtin_mul_overflow((uint64_t)need_u, (uint64_t)period_ns, &p)) return false;
    *out = (int64_t)(p / den + (p % den != 0)); /* <= p / 1e6 + 1: fits */
    return true;
}

/* full_after() in 64-bit steps (false: does not fit, nothing computed). */
static inline bool full_after64(int64_t cap, uint64_t den, int64_t period_ns, int64_t last_ns,
                                int64_t tokens_u, int64_t now, int64_t *out) {
    int64_t need, nf;
    if (__builtin_sub_overflow(cap, tokens_u, &need) || !ns_for64(den, period_ns, need, &nf))
        return false;
    i128 at = (i128)last_ns + nf; /* additions in 128 bits are cheap; divisions are not */
    *out = at > now ? clamp64(at - now) : 0;
    return true;
}

/*
 * The decision with every multiplication and division in 64 bits. Why: the 128-bit
 * version below runs three 128-bit divisions and several 128-bit products per call
 * (~200 instructions) for values that almost always fit. Same state and result,
 * bit for bit: each product is checked (or bounded, see the comments) and when one
 * might not fit, this returns false having written nothing, and the caller takes
 * the 128-bit path.
 */
static inline bool decide64(const sl_limit *lim, const void *state, void *next, int64_t t,
                            uint64_t cost, sl_result *r, bool *changed) {
    int64_t cap, den, P = lim->period_ns;
    if (cost > lim->capacity || lim->capacity > (uint64_t)INT64_MAX ||
        lim->limit > (uint64_t)INT64_MAX)
        return false;
    if (__builtin_mul_overflow((int64_t)lim->capacity, SL_MICRO, &cap) ||
        __builtin_mul_overflow((int64_t)lim->limit, SL_MICRO, &den) || P <= 0 || den <= 0)
        return false;
    sl_tb_state s = state ? *(const sl_tb_state *)state : (sl_tb_state){t, cap};
    int64_t el, tok;
    if (__builtin_sub_overflow(t, s.last_ns, &el)) return false;
    if (el <= 0) {
        tok = s.tokens_u;
    } else if (s.tokens_u >= cap) {
        tok = cap;
    } else {
        /* Full again iff el >= ns_for(need) = ceil(need*P / den), i.e. iff el*den >=
         * need*P: the same test as tokens_at() without its division (a product too big
         * for 64 bits is above need*P). Otherwise el*den < need*P fits, and the refill
         * floor(el*den / P) is below need: the sum stays below cap. */
        int64_t need;
        uint64_t fill, have;
        if (__builtin_sub_overflow(cap, s.tokens_u, &need) ||
            __builtin_mul_overflow((uint64_t)need, (uint64_t)P, &fill))
            return false;
        if (__builtin_mul_overflow((uint64_t)el, (uint64_t)den, &have) || have >= fill)
            tok = cap;
        else
            tok = s.tokens_u + (int64_t)(have / (uint64_t)P);
    }
    int64_t need = (int64_t)cost * SL_MICRO; /* cost <= capacity: <= cap */
    sl_tb_state ns = s;
    int64_t retry = 0, reset;
    bool ok = tok >= need;
    if (!ok) {
        int64_t miss, nf;
        if (__builtin_sub_overflow(need, s.tokens_u, &miss) ||
            !ns_for64((uint64_t)den, P, miss, &nf))
            return false;
        retry = clamp64((i128)s.last_ns + nf - t);
    } else if (cost > 0) {
        ns.last_ns = t;
        ns.tokens_u = tok - need;
        tok = ns.tokens_u;
    }
    if (!full_after64(cap, (uint64_t)den, P, ns.last_ns, ns.tokens_u, t, &reset)) return false;
    *(sl_tb_state *)next = ns;
    r->allowed = ok;
    r->limit = lim->capacity;
    r->remaining = units(tok);
    r->reset_after_ns = reset;
    r->retry_after_ns = retry;
    r->delay_ns = 0;
    r->lease = 0;
    *changed = ok && cost > 0;
    return true;
}

bool sl_tb_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                  uint64_t cost, sl_result *r) {
    bool changed;
    if (decide64(lim, state, next, now.mono_ns, cost, r, &changed)) return changed;
    int64_t t = now.mono_ns;
    sl_tb_state s = load(lim, state, t);
    int64_t tok = tokens_at(lim, &s, t);
    sl_tb_state *n = next;
    memset(r, 0, sizeof(*r));
    r->limit = lim->capacity;
    if (cost > lim->capacity) {
        *n = s;
        r->retry_after_ns = SLUICE_NEVER;
        r->remaining = units(tok);
        r->reset_after_ns = full_after(lim, &s, t);
        return false;
    }
    int64_t need = (int64_t)cost * SL_MICRO;
    if (tok < need) {
        /* Denied, state unchanged. The same request is next decided from this stored
         * state, whose refill from last_ns reaches `need` first at last_ns + ns_for(). */
        *n = s;
        i128 at = (i128)s.last_ns + ns_for(lim, (i128)need - s.tokens_u);
        r->retry_after_ns = clamp64(at - t);
        r->remaining = units(tok);
        r->reset_after_ns = full_after(lim, &s, t);
        return false;
    }
    r->allowed = true;
    if (cost == 0) {
        *n = s;
        r->remaining = units(tok);
        r->reset_after_ns = full_after(lim, &s, t);
        return false;
    }
    n->last_ns = t;
    n->tokens_u = tok - need;
    r->remaining = units(n->tokens_u);
    r->reset_after_ns = full_after(lim, n, t);
    return true;
}

/* Refund adds tokens up to the capacity; charge takes them even below zero (debt). */
void sl_tb_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                  int64_t delta, sl_result *r) {
    int64_t t = now.mono_ns;
    sl_tb_state s = load(lim, state, t);
    i128 tok = (i128)tokens_at(lim, &s, t) - (i128)delta * SL_MICRO;
    if (tok > cap_u(lim)) tok = cap_u(lim);
    if (tok < TB_DEBT_MIN) tok = TB_DEBT_MIN;
    sl_tb_state *n = next;
    n->last_ns = t;
    n->tokens_u = (int64_t)tok;
    sl_tb_decide(lim, next, next, now, 0, r);
}

int64_t sl_tb_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    const sl_tb_state *s = state;
    return clamp64((i128)s->last_ns + ns_for(lim, (i128)cap_u(lim) - s->tokens_u));
}

void sl_tb_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim;
    sl_tb_state *s = state;
    s->last_ns = clamp64((i128)s->last_ns + delta_ns);
}

/* used = capacity - tokens (consumed tokens, debt included) at now under the old rate,
 * kept as an absolute amount clamped to the new capacity: raising a limit and reverting
 * it changes nothing; debt beyond the new capacity is forgiven. */
void sl_tb_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                 sluice_time now) {
    int64_t t = now.mono_ns;
    sl_tb_state s = load(old, state, t);
    i128 used = (i128)cap_u(old) - tokens_at(old, &s, t);
    if (used > cap_u(lim)) used = cap_u(lim);
    i128 tok = (i128)cap_u(lim) - used;
    sl_tb_state *n = next;
    n->last_ns = t;
    n->tokens_u = (int64_t)tok;
}
