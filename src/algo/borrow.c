/* SPDX-License-Identifier: Apache-2.0 */
/*
 * borrow.c -- borrowing between tiers (see borrow.h for the contract).
 * Invariants after every apply/release: use <= cap at every tier, the root's use <= its
 * share, lent == sum over the children of max(0, use - share) (exact when every decision
 * is applied along the full path). Rate budgets count per window aligned to multiples of
 * window_ns; a state from an older window reads as empty (its marks survive: they are
 * times, not counts).
 *
 * Worst case for an owner (a tier asking within its share while siblings hold borrowed
 * units): its first refused attempt marks the parent, which then refuses every request
 * that would go beyond its share below it, so the borrowed units only flow back; the mark
 * lasts while the owner keeps asking or using its share (each such request renews it for
 * reclaim_ns). With a rate budget the units come back at the next window boundary: the
 * owner waits at most until the end of the current window (< one window) and has its
 * whole share in every later window while it stays active (reclaim_ns >= window_ns keeps
 * the mark over the boundary). With concurrency they come back as borrowed requests
 * finish: at most the longest borrowed request in flight (bounded by its lease).
 * The price: while a parent reclaims, it lends nothing at all, not even the part of the
 * owner's share the owner leaves idle; lending resumes reclaim_ns after the owner's last
 * in-share request.
 */
#include "borrow.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "algo/algo_impl.h"

int sl_borrow_path_check(const sl_borrow_tier *tiers, unsigned depth, char *errbuf,
                         size_t errbuf_len) {
    if (depth < 1 || depth > SL_BORROW_MAX_DEPTH)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "borrow: between 1 and %d tiers", SL_BORROW_MAX_DEPTH);
    for (unsigned i = 0; i < depth; i++) {
        if (tiers[i].share > tiers[i].cap)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "borrow: tier %u: share above cap", i);
        if (i + 1 < depth && tiers[i].share > tiers[i + 1].share)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "borrow: tier %u: share above its parent's", i);
        if (i + 1 < depth && tiers[i].cap > tiers[i + 1].cap)
            return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "borrow: tier %u: cap above its parent's", i);
    }
    if (tiers[depth - 1].cap != tiers[depth - 1].share)
        return sl_algo_error(errbuf, errbuf_len, SLUICE_EINVAL, "borrow: the root has nobody to borrow from (cap must equal share)");
    return SLUICE_OK;
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t window_of(const sl_borrow_params *p, int64_t now_ns) {
    return p->window_ns > 0 ? floor_div(now_ns, p->window_ns) * p->window_ns : 0;
}

/* The state as seen at now: fresh when absent, emptied when its window has passed. */
static sl_borrow_state view(const sl_borrow_params *p, const sl_borrow_state *s, int64_t now_ns) {
    sl_borrow_state v;
    int64_t w = window_of(p, now_ns);
    if (s == NULL) {
        memset(&v, 0, sizeof(v));
        v.window_start_ns = w;
        v.mark.reclaim_until_ns = v.mark.owed_until_ns = INT64_MIN;
        return v;
    }
    v = *s;
    if (p->window_ns > 0 && v.window_start_ns != w) {
        v.window_start_ns = w;
        v.use = v.lent = 0;
    }
    return v;
}

static uint64_t over(uint64_t use, uint64_t share) {
    return use > share ? use - share : 0;
}

/* Why: the check walks from the leaf up. A tier refuses when it would pass its cap (the
 * root: its share), or when it would go beyond its share while its parent is reclaiming.
 * The first tier the request takes beyond its share is where it borrows. A refusal of a
 * request that was within its share at every tier below the refusing one means an owner
 * is kept out by borrowers (the shares below a tier add up to at most its share, so only
 * borrowed units can fill it): that tier must reclaim for the child on the path. An
 * admitted in-share request of an owner being repaid renews the reclaim, so borrowing
 * stays stopped while the owner is active, not only for one reclaim_ns after its first
 * refusal (else borrowers would take its share again early in every other window). Only
 * the owner renews: an in-share sibling must not keep the parent from ever lending. */
void sl_borrow_decide(const sl_borrow_tier *tiers, const uint64_t *use, const sl_borrow_mark *marks,
                      unsigned depth, int64_t now_ns, uint64_t cost, sl_borrow_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->level = v->reclaim_level = v->borrow_level = -1;
    if (depth < 1 || depth > SL_BORROW_MAX_DEPTH) {
        v->reason = SL_BORROW_FULL;
        v->level = 0;
        return;
    }
    bool in_share_below = true; /* within share at every tier below i */
    for (unsigned i = 0; i < depth; i++) {
        bool root = i + 1 == depth;
        uint64_t u = use[i], room_cap = u >= tiers[i].cap ? 0 : tiers[i].cap - u;
        bool within = u <= tiers[i].share && cost <= tiers[i].share - u;
        bool reclaiming = !root && now_ns < marks[i + 1].reclaim_until_ns;
        int reason = SL_BORROW_ADMIT;
        if (cost > room_cap) reason = root ? SL_BORROW_FULL : SL_BORROW_CAP;
        else if (!within && reclaiming) reason = SL_BORROW_RECLAIM;
        if (reason != SL_BORROW_ADMIT) {
            v->reason = (uint8_t)reason;
            v->level = (int8_t)i;
            if (in_share_below && reason != SL_BORROW_RECLAIM && i > 0) v->reclaim_level = (int8_t)i;
            break;
        }
        if (within && in_share_below && reclaiming && v->reclaim_level < 0 && now_ns < marks[i].owed_until_ns)
            v->reclaim_level = (int8_t)(i + 1);
        if (!within && v->borrow_level < 0) {
            v->borrow_level = (int8_t)i;
            v->borrowed = cost - (u >= tiers[i].share ? 0 : tiers[i].share - u);
        }
        if (!within) in_share_below = false;
    }
    v->admit = v->level < 0;
}

static int64_t later(int64_t t, int64_t now_ns, int64_t span) {
    int64_t until;
    if (__builtin_add_overflow(now_ns, span, &until)) until = INT64_MAX;
    return until > t ? until : t;
}

void sl_borrow_mark_apply(const sl_borrow_params *p, sl_borrow_mark *parent, sl_borrow_mark *owner,
                          int64_t now_ns) {
    parent->reclaim_until_ns = later(parent->reclaim_until_ns, now_ns, p->reclaim_ns);
    owner->owed_until_ns = later(owner->owed_until_ns, now_ns, p->reclaim_ns);
}

void sl_borrow_check(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                     const sl_borrow_state *const *states, unsigned depth, int64_t now_ns,
                     uint64_t cost, sl_borrow_verdict *v) {
    uint64_t use[SL_BORROW_MAX_DEPTH];
    sl_borrow_mark marks[SL_BORROW_MAX_DEPTH];
    unsigned n = depth <= SL_BORROW_MAX_DEPTH ? depth : 0;
    for (unsigned i = 0; i < n; i++) {
        sl_borrow_state st = view(p, states[i], now_ns);
        use[i] = st.use;
        marks[i] = st.mark;
    }
    sl_borrow_decide(tiers, use, marks, n, now_ns, cost, v);
    if (!v->admit && p->window_ns > 0) v->retry_after_ns = window_of(p, now_ns) + p->window_ns - now_ns;
}

void sl_borrow_apply(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                     sl_borrow_state *const *states, unsigned depth, int64_t now_ns, uint64_t cost,
                     const sl_borrow_verdict *v) {
    if (depth < 1 || depth > SL_BORROW_MAX_DEPTH) return;
    if (v->reclaim_level >= 1 && (unsigned)v->reclaim_level < depth) {
        sl_borrow_state *ps = states[v->reclaim_level], *os = states[v->reclaim_level - 1];
        *ps = view(p, ps, now_ns);
        *os = view(p, os, now_ns);
        sl_borrow_mark_apply(p, &ps->mark, &os->mark, now_ns);
    }
    if (!v->admit) return;
    for (unsigned i = 0; i < depth; i++) {
        sl_borrow_state *s = states[i];
        *s = view(p, s, now_ns);
        uint64_t before = over(s->use, tiers[i].share);
        s->use = s->use > UINT64_MAX - cost ? UINT64_MAX : s->use + cost;
        if (i + 1 < depth) {
            sl_borrow_state *ps = states[i + 1];
            *ps = view(p, ps, now_ns);
            ps->lent += over(s->use, tiers[i].share) - before;
        }
    }
}

void sl_borrow_release(const sl_borrow_params *p, const sl_borrow_tier *tiers,
                       sl_borrow_state *const *states, unsigned depth, int64_t now_ns,
                       uint64_t cost) {
    if (depth < 1 || depth > SL_BORROW_MAX_DEPTH) return;
    for (unsigned i = 0; i < depth; i++) {
        sl_borrow_state *s = states[i];
        *s = view(p, s, now_ns);
        uint64_t before = over(s->use, tiers[i].share);
        s->use = s->use > cost ? s->use - cost : 0;
        if (i + 1 < depth) {
            sl_borrow_state *ps = states[i + 1];
            *ps = view(p, ps, now_ns);
            uint64_t d = before - over(s->use, tiers[i].share);
            ps->lent = ps->lent > d ? ps->lent - d : 0;
        }
    }
}

int64_t sl_borrow_fresh_at(const sl_borrow_params *p, const sl_borrow_state *s, int64_t now_ns) {
    if (s == NULL) return now_ns;
    sl_borrow_state v = view(p, s, now_ns);
    int64_t at = now_ns;
    if (v.use > 0) {
        if (p->window_ns <= 0) return INT64_MAX; /* held slots: only a release frees them */
        at = v.window_start_ns + p->window_ns;
    }
    if (v.mark.reclaim_until_ns > at) at = v.mark.reclaim_until_ns;
    if (v.mark.owed_until_ns > at) at = v.mark.owed_until_ns;
    return at;
}
