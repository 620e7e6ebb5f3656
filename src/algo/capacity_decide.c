/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity.c -- capacity protection as algorithms the stores run: adaptive concurrency
 * (SLUICE_ADAPTIVE_CONCURRENCY: conc.c's leases + adaptive.c's controller + per-class
 * slots, 128 bytes), the penalty state of an offender (SL_ALGO_PENALTY), priority
 * shedding over any budget (sl_cap_decide) and the state tails (per-class slots of a
 * concurrency limit, a borrowing tier's marks) the dispatcher keeps after an algorithm's
 * own state. Pure functions like every algorithm: time passed in, integer arithmetic, no
 * allocation; callers serialise calls on one state.
 */
#include <string.h>

#include "algo_impl.h"

typedef sl_aconc_state ast;

/* A learned limit is kept this long after the last sample with nothing in flight, then
 * the state may be dropped (a store under pressure starts it again with a probe). */
#define ACONC_KEEP_NS (INT64_C(900) * SLUICE_NS_PER_S)
#define LEASE_MAX_NS (INT64_C(366) * 86400 * SLUICE_NS_PER_S)

/* ---- tails ------------------------------------------------------------------------------ */

static size_t tail_off_marks(const sl_limit *lim) {
    return lim->cap.base_size + ((lim->cap.tail & SL_TAIL_SHED) ? sizeof(sl_shed_use) : 0);
}

sl_shed_use *sl_cap_use(const sl_limit *lim, void *state) {
    if (state == NULL) return NULL;
    if (lim->algo == SLUICE_ADAPTIVE_CONCURRENCY) return &((ast *)state)->use;
    if (lim->cap.tail & SL_TAIL_SHED) return (sl_shed_use *)((unsigned char *)state + lim->cap.base_size);
    return NULL;
}

sl_borrow_mark *sl_cap_marks(const sl_limit *lim, void *state) {
    if (state == NULL || !(lim->cap.tail & SL_TAIL_MARKS)) return NULL;
    return (sl_borrow_mark *)((unsigned char *)state + tail_off_marks(lim));
}

/* Per-class counts never exceed what is in flight: slots that expired unreleased are
 * taken off the lowest classes first (their classes are not known; a later release of
 * a higher class then saturates at zero, so the counts converge back). */
static void clamp_use(const sl_shed_params *sp, sl_shed_use *u, uint64_t in_flight) {
    (void)sp; /* classes beyond nclasses hold nothing: the order alone matters */
    uint64_t sum = 0;
    for (int c = 0; c < SL_SHED_MAX_CLASSES; c++) sum += u->by_class[c];
    for (int c = SL_SHED_MAX_CLASSES - 1; c >= 0 && sum > in_flight; c--) {
        uint64_t t = sum - in_flight < u->by_class[c] ? sum - in_flight : u->by_class[c];
        u->by_class[c] -= (uint32_t)t;
        sum -= t;
    }
}

static void tail_fresh(const sl_limit *lim, void *state) {
    size_t off = lim->cap.base_size;
    memset((unsigned char *)state + off, 0, lim->state_size - off);
    sl_borrow_mark *m = sl_cap_marks(lim, state);
    if (m != NULL) m->reclaim_until_ns = m->owed_until_ns = INT64_MIN;
}

void sl__cap_tail(const sl_limit *lim, const void *state, void *next) {
    size_t off = lim->cap.base_size;
    if (state == NULL) tail_fresh(lim, next);
    else if (next != state)
        memcpy((unsigned char *)next + off, (const unsigned char *)state + off, lim->state_size - off);
    if ((lim->cap.tail & SL_TAIL_SHED) && lim->algo == SLUICE_CONCURRENCY)
        clamp_use(&lim->cap.shed, sl_cap_use(lim, next), sl__conc_in_flight(next));
}

int64_t sl__cap_tail_fresh_at(const sl_limit *lim, const void *state, int64_t at) {
    const sl_borrow_mark *m = sl_cap_marks(lim, (void *)state);
    if (m == NULL) return at;
    if (m->reclaim_until_ns > at) at = m->reclaim_until_ns;
    if (m->owed_until_ns > at) at = m->owed_until_ns;
    return at;
}

static int64_t shift(int64_t t, int64_t d) {
    if (t == INT64_MIN) return t; /* "never" stays never */
    int64_t r;
    if (__builtin_add_overflow(t, d, &r)) r = d < 0 ? INT64_MIN / 2 : INT64_MAX / 2;
    return r;
}

void sl__cap_tail_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    sl_borrow_mark *m = sl_cap_marks(lim, state);
    if (m == NULL) return;
    m->reclaim_until_ns = shift(m->reclaim_until_ns, delta_ns);
    m->owed_until_ns = shift(m->owed_until_ns, delta_ns);
}

/* Tails survive a reload that keeps them (same algorithm: same own size); a tail the old
 * limit did not have starts fresh. */
void sl__cap_tail_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                        sluice_time now) {
    if (state == NULL) {
        sl_result r;
        sl_algo_decide(lim, NULL, next, now, 0, &r); /* fresh own part and tails */
        return;
    }
    if (!lim->cap.tail) return;
    tail_fresh(lim, next);
    const sl_shed_use *ou = sl_cap_use(old, (void *)state);
    sl_shed_use *nu = sl_cap_use(lim, next);
    if (ou != NULL && nu != NULL && lim->algo != SLUICE_ADAPTIVE_CONCURRENCY) *nu = *ou;
    const sl_borrow_mark *om = sl_cap_marks(old, (void *)state);
    sl_borrow_mark *nm = sl_cap_marks(lim, next);
    if (om != NULL && nm != NULL) *nm = *om;
    if (nu != NULL && lim->algo == SLUICE_CONCURRENCY)
        clamp_use(&lim->cap.shed, nu, sl__conc_in_flight(next));
}

/* ---- adaptive concurrency ---------------------------------------------------------------- */

int sl_aconc_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf, size_t errbuf_len) {
    if (spec->limit == 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "adaptive concurrency: max must be at least 1");
    if (spec->limit > SL_ADAPT_LIMIT_MAX)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive concurrency: max %llu is above %u",
                             (unsigned long long)spec->limit, (unsigned)SL_ADAPT_LIMIT_MAX);
    if (spec->lease_ns <= 0)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "adaptive concurrency: lease must be positive");
    if (spec->lease_ns > LEASE_MAX_NS)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "adaptive concurrency: lease is above 366 days");
    uint32_t max = (uint32_t)spec->limit;
    sl_adapt_params_default(&out->cap.adapt, SL_ADAPT_GRADIENT2, 1, max, max / 4 ? max / 4 : 1);
    out->algo = SLUICE_ADAPTIVE_CONCURRENCY;
    out->limit = out->capacity = max;
    out->lease_ns = spec->lease_ns;
    out->state_size = sizeof(ast);
    out->cap.base_size = sizeof(ast);
    return SLUICE_OK;
}

/* The state at now: fresh (with the start-up probe) when absent, leases expired (each a
 * drop for the controller, which may close its window), class counts clamped. Returns
 * whether anything changed from the stored state. */
static bool aconc_load(const sl_limit *lim, const void *state, sluice_time now, ast *s) {
    const sl_adapt_params *p = &lim->cap.adapt;
    if (state == NULL) {
        memset(s, 0, sizeof(*s));
        sl__conc_norm(lim, NULL, now, &s->conc);
        sl_adapt_init(p, &s->ad, now.mono_ns);
        return true;
    }
    const ast *in = state;
    s->ad = in->ad;
    s->use = in->use;
    uint32_t expired = sl__conc_norm(lim, &in->conc, now, &s->conc);
    if (expired == 0) return memcmp(&s->conc, &in->conc, sizeof(s->conc)) != 0;
    uint64_t left = sl__conc_in_flight(&s->conc);
    uint64_t before = left + expired;
    sl_adapt_expired(p, &s->ad, now.mono_ns, expired, before > UINT32_MAX ? UINT32_MAX : (uint32_t)before);
    clamp_use(&lim->cap.shed, &s->use, left);
    return true;
}

static void aconc_report(const sl_limit *lim, const ast *s, sluice_time now, sl_result *r) {
    uint64_t used = sl__conc_in_flight(&s->conc);
    uint32_t cap = sl_adapt_limit(&lim->cap.adapt, &s->ad);
    r->limit = cap;
    r->remaining = used >= cap ? 0 : cap - used;
    r->reset_after_ns = sl__conc_until_empty(lim, &s->conc, now);
    r->retry_after_ns = 0;
    r->delay_ns = 0;
    r->lease = 0;
}

bool sl_aconc_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     uint64_t cost, sl_result *r) {
    ast s;
    bool changed = aconc_load(lim, state, now, &s);
    uint64_t used = sl__conc_in_flight(&s.conc);
    uint32_t cap = sl_adapt_limit(&lim->cap.adapt, &s.ad);
    bool fits = cost <= cap && used <= cap - cost;
    if (fits && cost > 0) {
        uint64_t v = (uint64_t)s.conc.counts[SL_CONC_BUCKETS - 1] + cost;
        s.conc.counts[SL_CONC_BUCKETS - 1] = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
    }
    aconc_report(lim, &s, now, r);
    r->allowed = fits;
    if (fits && cost > 0) {
        r->lease = sl__conc_lease(lim, &s.conc, cost);
    } else if (!fits) {
        /* the limit may grow back up to max: only a cost above max can never fit */
        r->retry_after_ns = cost > lim->cap.adapt.max ? SLUICE_NEVER
                            : cost > cap            ? sl__conc_retry(lim, &s.conc, now, used)
                                                    : sl__conc_retry(lim, &s.conc, now, used + cost - cap);
        if (r->retry_after_ns == SLUICE_NEVER && cost <= lim->cap.adapt.max)
            r->retry_after_ns = lim->cap.adapt.window_ns; /* when the limit may next move */
    }
    memcpy(next, &s, sizeof(s));
    /* Like conc.c, a refusal or a peek writes nothing: expired leases are counted (once)
     * by the next decision that admits, which every store then writes. */
    (void)changed;
    return fits && cost > 0;
}

void sl_aconc_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                     int64_t delta, sl_result *r) {
    ast s;
    aconc_load(lim, state, now, &s);
    sl_conc_settle(lim, &s.conc, &s.conc, now, delta, r);
    clamp_use(&lim->cap.shed, &s.use, sl__conc_in_flight(&s.conc));
    aconc_report(lim, &s, now, r);
    r->allowed = true;
    memcpy(next, &s, sizeof(s));
}

int64_t sl_aconc_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    if (state == NULL) return now.mono_ns;
    ast s;
    aconc_load(lim, state, now, &s);
    int64_t busy = now.mono_ns + sl__conc_until_empty(lim, &s.conc, now);
    int64_t kept = s.ad.window_start_ns > INT64_MAX - ACONC_KEEP_NS ? INT64_MAX : s.ad.window_start_ns + ACONC_KEEP_NS;
    int64_t at = busy > kept ? busy : kept;
    return at > now.mono_ns ? at : now.mono_ns;
}

void sl_aconc_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    ast *s = state;
    sl_conc_rebase(lim, &s->conc, delta_ns);
    sl_adapt_rebase(&s->ad, delta_ns);
}

/* A reload keeps the slots in flight (conc.c's carry, across a lease change too), the
 * learned limit clamped into the new bounds and the no-load estimate. */
void sl_aconc_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                    sluice_time now) {
    const ast *o = state;
    ast s;
    sl_conc_carry(old, &o->conc, lim, &s.conc, now);
    s.ad = o->ad;
    s.use = o->use;
    sl_adapt_carry(&lim->cap.adapt, &s.ad);
    clamp_use(&lim->cap.shed, &s.use, sl__conc_in_flight(&s.conc));
    memcpy(next, &s, sizeof(s));
}

/* Why across algorithms: switching a policy from a fixed to an adaptive limit (or back)
 * while requests run must not forget them. A fresh state would admit up to the new limit
 * on top of the requests still in flight, and the releases of their leases (whose buckets
 * the new state also uses) would free the new requests' slots. Both algorithms count
 * slots with conc.c's buckets, so they carry as across a lease change; the adaptive
 * controller starts afresh (with its probe). */
bool sl__cap_conc_cross(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                        sluice_time now) {
    bool to_adapt = old->algo == SLUICE_CONCURRENCY && lim->algo == SLUICE_ADAPTIVE_CONCURRENCY;
    bool to_conc = old->algo == SLUICE_ADAPTIVE_CONCURRENCY && lim->algo == SLUICE_CONCURRENCY;
    if (state == NULL || !(to_adapt || to_conc)) return false;
    if (to_adapt) {
        ast s;
        aconc_load(lim, NULL, now, &s);
        sl_conc_carry(old, state, lim, &s.conc, now); /* conc.c's state leads a concurrency one */
        const sl_shed_use *ou = sl_cap_use(old, (void *)state);
        if (ou != NULL) s.use = *ou;
        clamp_use(&lim->cap.shed, &s.use, sl__conc_in_flight(&s.conc));
        memcpy(next, &s, sizeof(s));
        return true;
    }
    const ast *o = state;
    sl_conc_carry(old, &o->conc, lim, next, now);
    if (lim->cap.tail) {
        tail_fresh(lim, next);
        sl_shed_use *nu = sl_cap_use(lim, next);
        if (nu != NULL) {
            *nu = o->use;
            clamp_use(&lim->cap.shed, nu, sl__conc_in_flight(next));
        }
    }
    return true;
}

/* ---- the penalty of an offender ------------------------------------------------------------ */

int sl_pen_init(sl_limit *out, const sluice_limit_spec *spec, char *errbuf, size_t errbuf_len) {
    (void)spec;
    (void)errbuf;
    (void)errbuf_len;
    sl_penalty_params_default(&out->cap.pen);
    out->algo = SL_ALGO_PENALTY;
    out->limit = out->capacity = 1;
    out->state_size = sizeof(sl_penalty_state);
    out->cap.base_size = sizeof(sl_penalty_state);
    return SLUICE_OK;
}

/* Admits unless the key is in a block or challenge period; never changes the state (a
 * violation is recorded by the store's decision rules once the limit refused). */
bool sl_pen_decide(const sl_limit *lim, const void *state, void *next, sluice_time now,
                       uint64_t cost, sl_result *r) {
    (void)cost;
    const sl_penalty_state *s = state;
    sl_penalty_result pr;
    sl_penalty_check(&lim->cap.pen, s, now.mono_ns, &pr);
    memset(r, 0, sizeof(*r));
    r->allowed = pr.action == SL_PENALTY_NONE;
    r->limit = 1;
    r->remaining = r->allowed ? 1 : 0;
    r->retry_after_ns = pr.retry_after_ns;
    r->reset_after_ns = sl_penalty_fresh_at(&lim->cap.pen, s, now.mono_ns) - now.mono_ns;
    if (s == NULL) memset(next, 0, sizeof(sl_penalty_state));
    else if (next != state) memcpy(next, s, sizeof(*s));
    return false;
}

void sl_pen_settle(const sl_limit *lim, const void *state, void *next, sluice_time now,
                       int64_t delta, sl_result *r) {
    (void)delta;
    sl_pen_decide(lim, state, next, now, 0, r);
    r->allowed = true;
}

int64_t sl_pen_fresh_at(const sl_limit *lim, const void *state, sluice_time now) {
    return sl_penalty_fresh_at(&lim->cap.pen, state, now.mono_ns);
}

void sl_pen_rebase(const sl_limit *lim, void *state, int64_t delta_ns) {
    (void)lim;
    sl_penalty_rebase(state, delta_ns);
}

void sl_pen_carry(const sl_limit *old, const void *state, const sl_limit *lim, void *next,
                      sluice_time now) {
    (void)old;
    (void)lim;
    (void)now;
    memcpy(next, state, sizeof(sl_penalty_state));
}

/* ---- limits with capacity parameters -------------------------------------------------------- */

static bool shed_budget(sluice_algo a) {
    return a == SLUICE_CONCURRENCY || a == SLUICE_ADAPTIVE_CONCURRENCY || a == SLUICE_TOKEN_BUCKET ||
           a == SLUICE_GCRA || a == SLUICE_FIXED_WINDOW || a == SLUICE_SLIDING_WINDOW;
}

int sl_cap_init(sl_limit *out, const sluice_limit_spec *spec, const sl_cap *cap, char *errbuf,
                size_t errbuf_len) {
    (void)spec;
    if (cap == NULL) return SLUICE_OK;
    char msg[160];
    int rc;
    if (out->algo == SLUICE_ADAPTIVE_CONCURRENCY && cap->adapt.ctl != 0) {
        if ((rc = sl_adapt_params_check(&cap->adapt, msg, sizeof(msg))) != SLUICE_OK)
            return sl_algo_error(errbuf, errbuf_len, rc, "%s", msg);
        memcpy(&out->cap.adapt, &cap->adapt, sizeof(cap->adapt));
        out->limit = out->capacity = cap->adapt.max;
    }
    if (out->algo == SL_ALGO_PENALTY && cap->pen.first_ns != 0) {
        if ((rc = sl_penalty_params_check(&cap->pen, msg, sizeof(msg))) != SLUICE_OK)
            return sl_algo_error(errbuf, errbuf_len, rc, "%s", msg);
        memcpy(&out->cap.pen, &cap->pen, sizeof(cap->pen));
    }
    uint32_t own = out->state_size;
    out->cap.base_size = (uint16_t)own;
    if (cap->shed.nclasses != 0) {
        if (!shed_budget(out->algo))
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                 "priority classes need a budget to share (concurrency, adaptive "
                                 "concurrency, token bucket, GCRA, fixed or sliding window)");
        if ((rc = sl_shed_params_check(&cap->shed, msg, sizeof(msg))) != SLUICE_OK)
            return sl_algo_error(errbuf, errbuf_len, rc, "%s", msg);
        memcpy(&out->cap.shed, &cap->shed, sizeof(cap->shed));
        if (out->algo == SLUICE_CONCURRENCY) out->cap.tail |= SL_TAIL_SHED;
    }
    if (cap->tail & SL_TAIL_MARKS) {
        if (out->algo != SLUICE_FIXED_WINDOW && out->algo != SLUICE_CONCURRENCY)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL,
                                 "borrowing needs fixed_window or concurrency limits");
        if (cap->reclaim_ns <= 0 || cap->reclaim_ns > LEASE_MAX_NS)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_ERANGE, "borrow: reclaim must be within (0, 366 days]");
        out->cap.tail |= SL_TAIL_MARKS;
        out->cap.reclaim_ns = cap->reclaim_ns;
    }
    if (out->cap.tail & SL_TAIL_SHED) out->state_size += sizeof(sl_shed_use);
    if (out->cap.tail & SL_TAIL_MARKS) out->state_size += sizeof(sl_borrow_mark);
    return SLUICE_OK;
}

static bool is_conc(const sl_limit *lim) {
    return lim->algo == SLUICE_CONCURRENCY || lim->algo == SLUICE_ADAPTIVE_CONCURRENCY;
}

void sl_cap_view(const sl_limit *lim, const void *state, sluice_time now, sl_cap_info *x) {
    if (lim->algo == SLUICE_ADAPTIVE_CONCURRENCY) {
        ast s;
        aconc_load(lim, state, now, &s);
        x->kind |= SL_CAPI_ADAPT;
        x->limit = sl_adapt_limit(&lim->cap.adapt, &s.ad);
        x->noload_ns = s.ad.noload_ns;
        uint64_t f = sl__conc_in_flight(&s.conc);
        x->in_flight = f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
    } else if (lim->algo == SLUICE_CONCURRENCY) {
        sl_conc_state c;
        sl__conc_norm(lim, state, now, &c);
        uint64_t f = sl__conc_in_flight(&c);
        x->in_flight = f > UINT32_MAX ? UINT32_MAX : (uint32_t)f;
    }
}

static uint64_t share_of(uint64_t capacity, uint32_t ppm) {
    return (uint64_t)(((unsigned __int128)capacity * ppm) / SL_PPM);
}

/*
 * Why shedding is decided here, next to the algorithm: the budget's use and the admission
 * must be one step under the state's lock (or script), else two classes could both see
 * room that only one of them has. A concurrency budget counts its slots per class (they
 * come back by release or expiry): shed.c decides with them. A rate budget has no
 * per-class use, so every other class's reserve is a floor the class cannot take; its
 * rule (used + k <= capacity x fill, used + k + others' reserves <= capacity) is asked of
 * the algorithm itself as peeks of larger costs (a bucket admits k exactly when k units
 * remain), so no algorithm's "remaining" has to be reproduced by the Redis scripts, which
 * ask the same peeks.
 */
bool sl_cap_decide(const sl_limit *lim, const void *state, void *next, void *peek, sluice_time now,
                   uint64_t cost, uint32_t cls, sl_result *r, sl_cap_info *x) {
    memset(x, 0, sizeof(*x));
    if (cls == 0 || lim->cap.shed.nclasses == 0) {
        bool ch = sl_algo_decide(lim, state, next, now, cost, r);
        if (is_conc(lim)) sl_cap_view(lim, next, now, x);
        return ch;
    }
    const sl_shed_params *sp = &lim->cap.shed;
    uint32_t c = cls - 1 < sp->nclasses ? cls - 1 : sp->nclasses - 1;
    x->kind |= SL_CAPI_SHED;
    x->shed_cls = (uint8_t)c;
    sl_result r0;
    bool ch0 = sl_algo_decide(lim, state, next, now, 0, &r0); /* next: the state as it stands */
    uint8_t reason = SL_SHED_ADMIT;
    int64_t retry = 0;
    if (is_conc(lim)) {
        uint64_t used = sl__conc_in_flight((const sl_conc_state *)next);
        sl_shed_verdict v;
        sl_shed_decide(sp, r0.limit, used, sl_cap_use(lim, next), c, cost, &v);
        if (!v.admit || cost > SL_LEASE_CLASS_SLOTS) {
            reason = v.admit ? SL_SHED_FULL : v.reason;
            /* fits once `need` more slots are free (expiry; a release frees them sooner) */
            uint64_t cmax = lim->algo == SLUICE_ADAPTIVE_CONCURRENCY ? lim->cap.adapt.max : lim->capacity;
            if (cost > cmax || cost > SL_LEASE_CLASS_SLOTS) retry = SLUICE_NEVER;
            else retry = sl__conc_retry(lim, (const sl_conc_state *)next, now, cost > v.room ? cost - v.room : 1);
            if (retry == SLUICE_NEVER && cost <= cmax && cost <= SL_LEASE_CLASS_SLOTS)
                retry = lim->algo == SLUICE_ADAPTIVE_CONCURRENCY ? lim->cap.adapt.window_ns : SLUICE_NEVER;
        }
    } else {
        uint64_t capacity = lim->capacity, others = 0;
        for (uint32_t j = 0; j < sp->nclasses; j++)
            if (j != c) others += share_of(capacity, sp->cls[j].reserve_ppm);
        uint64_t k_fill = cost + (capacity - share_of(capacity, sp->cls[c].fill_ppm)), k_res = cost + others;
        sl_result rp;
        const uint64_t ks[3] = {cost, k_res, k_fill};
        const uint8_t why[3] = {SL_SHED_FULL, SL_SHED_RESERVED, SL_SHED_PRIORITY};
        for (int t = 0; t < 3 && reason == SL_SHED_ADMIT; t++) {
            if (t > 0 && ks[t] == cost) continue;
            sl_algo_decide(lim, state, peek, now, ks[t], &rp);
            if (!rp.allowed) reason = why[t], retry = rp.retry_after_ns;
        }
    }
    if (reason != SL_SHED_ADMIT) {
        x->shed_reason = reason;
        *r = r0;
        r->allowed = false;
        r->lease = 0;
        r->retry_after_ns = retry == 0 ? 1 : retry;
        if (is_conc(lim)) sl_cap_view(lim, next, now, x);
        return ch0;
    }
    /* A concurrency limit decides from the state just normalised (its class counts
     * clamped to what is still in flight), so the new slots' class is added on top. */
    bool ch = lim->algo == SLUICE_CONCURRENCY ? sl_algo_decide(lim, next, next, now, cost, r)
                                              : sl_algo_decide(lim, state, next, now, cost, r);
    if (r->allowed && cost > 0 && is_conc(lim)) {
        sl_shed_take(sl_cap_use(lim, next), c, (uint32_t)cost);
        r->lease |= (uint64_t)c << SL_LEASE_CLASS_SHIFT;
    }
    if (is_conc(lim)) sl_cap_view(lim, next, now, x);
    return ch;
}

bool sl_cap_release(const sl_limit *lim, const void *state, void *next, sluice_time now,
                    uint64_t lease, bool has_sample, int64_t latency_ns, unsigned outcome,
                    sl_cap_info *x) {
    if (x != NULL) memset(x, 0, sizeof(*x));
    if (state == NULL) return false;
    uint32_t cls = sl__conc_classes(lim) ? (uint32_t)((lease >> SL_LEASE_CLASS_SHIFT) & 7u) : 0;
    uint64_t slots = lease & (sl__conc_classes(lim) ? SL_LEASE_CLASS_SLOTS : ((UINT64_C(1) << 24) - 1));
    if (lim->algo == SLUICE_CONCURRENCY) {
        if (!sl_conc_release(lim, state, next, now, lease)) return false;
        if (lim->cap.tail) {
            /* the class gives its slots back first, then the counts are clamped to what
             * is still in flight (expired leases of unknown classes) */
            size_t off = lim->cap.base_size;
            if (next != state)
                memcpy((unsigned char *)next + off, (const unsigned char *)state + off, lim->state_size - off);
            sl_shed_use *u = sl_cap_use(lim, next);
            if (u != NULL) {
                sl_shed_give(u, cls, (uint32_t)slots);
                clamp_use(&lim->cap.shed, u, sl__conc_in_flight(next));
            }
        }
        return true;
    }
    if (lim->algo != SLUICE_ADAPTIVE_CONCURRENCY) return false;
    ast s;
    aconc_load(lim, state, now, &s);
    uint64_t before = sl__conc_in_flight(&s.conc);
    sl_conc_state c = s.conc;
    if (!sl_conc_release(lim, &s.conc, &c, now, lease)) return false;
    s.conc = c;
    sl_shed_give(&s.use, cls, (uint32_t)slots);
    if (has_sample) {
        sl_adapt_outcome oc = outcome == SLUICE_OUTCOME_DROPPED ? SL_ADAPT_DROPPED
                              : outcome == SLUICE_OUTCOME_ERROR ? SL_ADAPT_ERROR
                                                                : SL_ADAPT_OK;
        /* an ok answer of unknown latency says the backend is alive, not how fast */
        if (oc == SL_ADAPT_OK && latency_ns < 0) oc = SL_ADAPT_ERROR;
        sl_adapt_sample(&lim->cap.adapt, &s.ad, now.mono_ns, latency_ns, oc,
                        before > UINT32_MAX ? UINT32_MAX : (uint32_t)before);
    }
    memcpy(next, &s, sizeof(s));
    if (x != NULL) sl_cap_view(lim, next, now, x);
    return true;
}

/* ---- capacity parameters in a snapshot ----------------------------------------------------- */

bool sl_cap_present(const sl_limit *lim) {
    return lim->algo == SLUICE_ADAPTIVE_CONCURRENCY || lim->algo == SL_ALGO_PENALTY || lim->cap.tail != 0 ||
           lim->cap.shed.nclasses != 0;
}

/* Field by field, in a fixed order (not the struct's bytes: a snapshot outlives a build). */
size_t sl_cap_encode(const sl_limit *lim, uint64_t w[SL_CAP_WORDS]) {
    const sl_cap *c = &lim->cap;
    size_t n = 0;
    w[n++] = c->tail;
    w[n++] = (uint64_t)c->reclaim_ns;
    w[n++] = c->shed.nclasses;
    for (int i = 0; i < SL_SHED_MAX_CLASSES; i++) {
        w[n++] = c->shed.cls[i].fill_ppm;
        w[n++] = c->shed.cls[i].reserve_ppm;
    }
    const sl_adapt_params *a = &c->adapt;
    uint64_t av[] = {(uint64_t)a->ctl, a->min, a->max, a->initial, (uint64_t)a->window_ns, a->min_samples,
                     a->smoothing_q16, a->tolerance_q16, a->queue, a->alpha_min, a->alpha_pct, a->beta_min,
                     a->beta_pct, a->increase, a->backoff_q16, (uint64_t)a->timeout_ns, a->probe_after,
                     (uint64_t)a->probe_every_ns};
    for (size_t i = 0; i < sizeof(av) / sizeof(av[0]); i++) w[n++] = av[i];
    const sl_penalty_params *p = &c->pen;
    w[n++] = (uint64_t)p->first_ns;
    w[n++] = p->factor_q16;
    w[n++] = (uint64_t)p->max_ns;
    w[n++] = (uint64_t)p->forgive_after_ns;
    w[n++] = p->challenge_levels;
    return n;
}

int sl_cap_decode(const uint64_t *w, size_t n, sl_cap *c) {
    memset(c, 0, sizeof(*c));
    if (n != SL_CAP_WORDS) return SLUICE_ECORRUPT;
    for (size_t i = 0; i < n; i++)
        if (w[i] > (uint64_t)INT64_MAX) return SLUICE_ECORRUPT;
    size_t k = 0;
    c->tail = (uint8_t)(w[k++] & (SL_TAIL_SHED | SL_TAIL_MARKS));
    c->reclaim_ns = (int64_t)w[k++];
    uint64_t nc = w[k++];
    if (nc > SL_SHED_MAX_CLASSES) return SLUICE_ECORRUPT;
    c->shed.nclasses = (uint32_t)nc;
    for (int i = 0; i < SL_SHED_MAX_CLASSES; i++) {
        if (w[k] > SL_PPM || w[k + 1] > SL_PPM) return SLUICE_ECORRUPT;
        c->shed.cls[i].fill_ppm = (uint32_t)w[k++];
        c->shed.cls[i].reserve_ppm = (uint32_t)w[k++];
    }
    sl_adapt_params *a = &c->adapt;
    uint32_t *u32[] = {&a->min, &a->max, &a->initial, NULL, &a->min_samples, &a->smoothing_q16,
                       &a->tolerance_q16, &a->queue, &a->alpha_min, &a->alpha_pct, &a->beta_min,
                       &a->beta_pct, &a->increase, &a->backoff_q16, NULL, &a->probe_after};
    if (w[k] > 3) return SLUICE_ECORRUPT;
    a->ctl = (sl_adapt_ctl)w[k++];
    for (size_t i = 0; i < sizeof(u32) / sizeof(u32[0]); i++, k++) {
        if (u32[i] == NULL) continue;
        if (w[k] > UINT32_MAX) return SLUICE_ECORRUPT;
        *u32[i] = (uint32_t)w[k];
    }
    a->window_ns = (int64_t)w[k - 13];
    a->timeout_ns = (int64_t)w[k - 2];
    a->probe_every_ns = (int64_t)w[k++];
    sl_penalty_params *p = &c->pen;
    p->first_ns = (int64_t)w[k++];
    if (w[k] > UINT32_MAX || w[k + 3] > UINT32_MAX) return SLUICE_ECORRUPT;
    p->factor_q16 = (uint32_t)w[k++];
    p->max_ns = (int64_t)w[k++];
    p->forgive_after_ns = (int64_t)w[k++];
    p->challenge_levels = (uint32_t)w[k++];
    return SLUICE_OK;
}
