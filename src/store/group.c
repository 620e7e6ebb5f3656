/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.c -- the all-or-nothing decision over loaded states (see group.h for the rules).
 * Why one function for every store: a shadow policy, an Envoy override and a
 * count_rejected window travel in the same store request as the enforced windows, and
 * what a store reports must not depend on which store it is. The capacity rules live
 * here for the same reason (the Redis script, main.lua, applies them in the same order):
 * priority classes decide with their budget (sl_cap_decide), borrowing tiers are checked
 * along their path before the items decide and may refuse one of them (a reclaim), and a
 * penalty item records a violation when another item of its group refused; marks and
 * violations are written even though the decision rejects.
 */
#include "store/group.h"

#include <string.h>

static void to_public(const sl_result *r, sluice_result *o) {
    o->allowed = r->allowed ? 1 : 0;
    o->limit = r->limit;
    o->remaining = r->remaining;
    o->reset_after_ns = r->reset_after_ns;
    o->retry_after_ns = r->retry_after_ns;
    o->delay_ns = r->delay_ns;
    o->lease = r->lease;
}

size_t sl_group_keys(size_t n, bool (*same)(const void *ctx, size_t a, size_t b),
                     const void *ctx, uint8_t *kidx) {
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && !same(ctx, j, i)) j++;
        kidx[i] = j < i ? kidx[j] : (uint8_t)nk++;
    }
    return nk;
}

/* Borrowing refusals decided before the items (borrow_check): the item's tier refuses with
 * this retry-after even though its own algorithm would admit. */
typedef struct forced {
    bool on[SLUICE_MAX_ITEMS];
    int64_t retry[SLUICE_MAX_ITEMS];
} forced;

static bool capacity_item(const sl_sitem *it, const sl_limit *l) {
    return it->cls != 0 || l->algo == SLUICE_ADAPTIVE_CONCURRENCY;
}

/* Decides the items of group `grp` on the states in cur (chaining repeats); true when
 * every item admitted. */
static bool run_group(sl_group_run *g, unsigned grp, const void **cur, bool *decided, bool *norm,
                      const forced *fz) {
    bool all = true;
    for (size_t i = 0; i < g->n; i++) {
        const sl_sitem *it = &g->items[i];
        if (it->group != grp) continue;
        unsigned k = g->kidx[i];
        sl_result r;
        const sl_limit *l = g->lims[i];
        bool ch;
        if (grp == 0 && capacity_item(it, l))
            ch = sl_cap_decide(l, cur[k], g->work[i], g->peek, g->now, it->cost, it->cls, &r, &g->res->x[i]);
        else
            ch = sl_algo_decide(l, cur[k], g->work[i], g->now, it->cost, &r);
        if (grp == 0 && fz != NULL && fz->on[i] && r.allowed) {
            r.allowed = false;
            r.lease = 0;
            r.retry_after_ns = fz->retry[i];
            ch = false;
        }
        if (r.allowed && ch && it->cost > 0) cur[k] = g->work[i];
        if (!r.allowed) all = false;
        if (norm != NULL) norm[i] = ch && !r.allowed;
        to_public(&r, &g->res->r[i]);
        decided[i] = true;
    }
    return all;
}

/* ---- capacity: writes that stand whatever the decision ---------------------------------- */

/* A state of key k the decision may write even when it stores nothing else for it: its
 * final state if that is already a scratch, else a copy of the stored one (a fresh state
 * for a new key) in the scratch of its first item. */
static void *writable(sl_group_run *g, const void **cur, unsigned k) {
    size_t i = 0;
    while (i < g->n && g->kidx[i] != k) i++;
    if (cur[k] != g->stored[k]) return (void *)cur[k];
    const sl_limit *l = g->lims[i];
    if (g->stored[k] != NULL) {
        memcpy(g->work[i], g->stored[k], l->state_size);
    } else {
        sl_result r;
        sl_algo_decide(l, NULL, g->work[i], g->now, 0, &r); /* fresh, tails included */
    }
    cur[k] = g->work[i];
    return g->work[i];
}

/* The item of path `b` at tier `level`, or -1. */
static int tier_item(const sl_group_run *g, unsigned b, unsigned level) {
    for (size_t i = 0; i < g->n; i++)
        if (g->items[i].group == 0 && g->items[i].bpath == b && g->items[i].blevel == level) return (int)i;
    return -1;
}

typedef struct mark_op {
    int parent, owner; /* items */
} mark_op;

/*
 * Borrowing: each path's tiers (leaf first) are checked with their use (limit - remaining
 * of a peek: a tier's limit is its cap, the root's its budget) and their marks before any
 * item decides. A tier over its cap refuses by its own algorithm; a reclaim refusal is
 * forced here. The reclaim marks the verdict asks for are collected, to be written
 * whatever the decision (an owner refused must start the reclaim).
 */
static size_t borrow_check(sl_group_run *g, const void **cur, forced *fz, mark_op *ops) {
    size_t nops = 0;
    for (unsigned b = 1; b < 256; b++) {
        int leaf = tier_item(g, b, 0);
        if (leaf < 0) {
            bool any = false;
            for (size_t i = 0; i < g->n && !any; i++) any = g->items[i].bpath >= b;
            if (!any) break;
            continue;
        }
        sl_borrow_tier tiers[SL_BORROW_MAX_DEPTH];
        uint64_t use[SL_BORROW_MAX_DEPTH];
        sl_borrow_mark marks[SL_BORROW_MAX_DEPTH];
        int idx[SL_BORROW_MAX_DEPTH];
        int64_t reset[SL_BORROW_MAX_DEPTH];
        unsigned depth = 0;
        for (unsigned lv = 0; lv < SL_BORROW_MAX_DEPTH; lv++) {
            int i = tier_item(g, b, lv);
            if (i < 0) break;
            const sl_limit *l = g->lims[i];
            sl_result r0;
            sl_algo_decide(l, cur[g->kidx[i]], g->peek, g->now, 0, &r0);
            use[depth] = r0.remaining >= r0.limit ? 0 : r0.limit - r0.remaining;
            const sl_borrow_mark *m = sl_cap_marks(l, g->peek);
            marks[depth] = m != NULL ? *m : (sl_borrow_mark){INT64_MIN, INT64_MIN};
            tiers[depth].cap = l->capacity;
            tiers[depth].share = g->items[i].share < l->capacity ? g->items[i].share : l->capacity;
            reset[depth] = r0.reset_after_ns > 0 ? r0.reset_after_ns : 1;
            idx[depth++] = i;
        }
        if (depth == 0) continue;
        tiers[depth - 1].share = tiers[depth - 1].cap; /* the root lends nothing upwards */
        sl_borrow_verdict v;
        sl_borrow_decide(tiers, use, marks, depth, g->now.mono_ns, g->items[leaf].cost, &v);
        for (unsigned t = 0; t < depth; t++) g->res->x[idx[t]].kind |= SL_CAPI_BORROW;
        if (!v.admit && v.level >= 0 && (unsigned)v.level < depth) {
            int i = idx[v.level];
            g->res->x[i].borrow_reason = v.reason;
            if (v.reason == SL_BORROW_RECLAIM) {
                fz->on[i] = true;
                fz->retry[i] = reset[v.level];
            }
        }
        if (v.reclaim_level >= 1 && (unsigned)v.reclaim_level < depth)
            ops[nops++] = (mark_op){idx[v.reclaim_level], idx[v.reclaim_level - 1]};
    }
    return nops;
}

static void apply_marks(sl_group_run *g, const void **cur, const mark_op *ops, size_t nops) {
    for (size_t o = 0; o < nops; o++) {
        const sl_limit *pl = g->lims[ops[o].parent], *ol = g->lims[ops[o].owner];
        sl_borrow_mark *pm = sl_cap_marks(pl, writable(g, cur, g->kidx[ops[o].parent]));
        sl_borrow_mark *om = sl_cap_marks(ol, writable(g, cur, g->kidx[ops[o].owner]));
        if (pm == NULL || om == NULL) continue;
        sl_borrow_params bp = {.window_ns = 0, .reclaim_ns = pl->cap.reclaim_ns};
        sl_borrow_mark_apply(&bp, pm, om, g->now.mono_ns);
    }
}

static bool is_penalty(const sl_group_run *g, size_t i) {
    return (g->items[i].cap & SL_SIC_PENALTY) && g->lims[i]->algo == SL_ALGO_PENALTY &&
           g->items[i].group == 0;
}

static void penalty_info(sl_group_run *g, size_t i, const void *state) {
    sl_penalty_result pr;
    sl_penalty_check(&g->lims[i]->cap.pen, state, g->now.mono_ns, &pr);
    sl_cap_info *x = &g->res->x[i];
    x->kind |= SL_CAPI_PENALTY;
    x->pen_action = pr.action;
    x->pen_level = (uint16_t)(pr.level > UINT16_MAX ? UINT16_MAX : pr.level);
}

/* A refused decision: every penalty item that admitted (its offender was in no period)
 * while another item of its group refused records a violation. */
static void penalty_violations(sl_group_run *g, const void **cur) {
    for (size_t i = 0; i < g->n; i++) {
        if (!is_penalty(g, i) || !g->res->r[i].allowed || g->items[i].pgrp == 0) continue;
        bool refused = false;
        for (size_t j = 0; j < g->n && !refused; j++)
            refused = j != i && g->items[j].group == 0 && g->items[j].pgrp == g->items[i].pgrp &&
                      !is_penalty(g, j) && !g->res->r[j].allowed;
        if (!refused) continue;
        unsigned k = g->kidx[i];
        const void *before = g->stored[k];
        sl_penalty_state *next = writable(g, cur, k);
        sl_penalty_result pr;
        sl_penalty_violation(&g->lims[i]->cap.pen, before, next, g->now.mono_ns, &pr);
        sluice_result *o = &g->res->r[i];
        o->allowed = 0;
        o->remaining = 0;
        o->retry_after_ns = pr.retry_after_ns;
        penalty_info(g, i, next);
        g->res->x[i].violation = 1;
    }
}

/* SL_SREQ_PASS: a solved challenge ends each penalty item's challenge period; nothing
 * else is decided (the others report their state). */
static void pass_challenges(sl_group_run *g, const void **cur) {
    g->res->allowed = 0;
    for (size_t i = 0; i < g->n; i++) {
        unsigned k = g->kidx[i];
        sl_result r;
        sl_algo_decide(g->lims[i], cur[k], g->peek, g->now, 0, &r);
        to_public(&r, &g->res->r[i]);
        if (!is_penalty(g, i)) continue;
        sl_penalty_state next;
        bool ok = sl_penalty_pass(&g->lims[i]->cap.pen, g->stored[k], &next, g->now.mono_ns);
        if (ok) {
            memcpy(writable(g, cur, k), &next, sizeof(next));
            g->res->allowed = 1;
        }
        g->res->r[i].allowed = ok ? 1 : 0;
        penalty_info(g, i, cur[k]);
    }
    for (size_t k = 0; k < g->nkeys; k++) g->final[k] = cur[k];
}

void sl_group_decide(sl_group_run *g) {
    const void *cur[SLUICE_MAX_ITEMS];
    bool decided[SLUICE_MAX_ITEMS] = {false};
    unsigned maxg = 0;
    bool capacity = false;
    for (size_t k = 0; k < g->nkeys; k++) cur[k] = g->stored[k];
    for (size_t i = 0; i < g->n; i++) {
        g->consumed[i] = false;
        g->res->x[i].kind = 0;
        if (g->items[i].group > maxg) maxg = g->items[i].group;
        capacity |= g->items[i].cap != 0 || g->items[i].bpath != 0;
    }
    g->res->n = g->n;
    g->res->groups_ok = 0;
    if (capacity || (g->flags & SL_SREQ_PASS)) memset(g->res->x, 0, g->n * sizeof(g->res->x[0]));
    if (g->flags & SL_SREQ_PASS) {
        pass_challenges(g, cur);
        return;
    }
    forced fz;
    mark_op ops[SLUICE_MAX_ITEMS];
    size_t nops = 0;
    if (capacity) {
        memset(fz.on, 0, sizeof(fz.on));
        nops = borrow_check(g, cur, &fz, ops);
    }
    bool norm[SLUICE_MAX_ITEMS] = {false};
    bool all = run_group(g, 0, cur, decided, norm, capacity ? &fz : NULL) && !(g->flags & SL_SREQ_REJECT);
    if (capacity)
        for (size_t i = 0; i < g->n; i++)
            if (is_penalty(g, i)) penalty_info(g, i, cur[g->kidx[i]]);
    g->res->allowed = all ? 1 : 0;
    if (!all) {
        /* nothing of group 0 stands; charges are counted on the stored states. A refused
         * item whose algorithm normalised its key's state (a state from the future, after
         * a clock step, clamped into the window in force) keeps that, so the clamp is
         * done once, not again at every decision: only for a key decided by that one item
         * (nothing else of it to keep apart) and not charged. */
        for (size_t k = 0; k < g->nkeys; k++) cur[k] = g->stored[k];
        for (size_t i = 0; i < g->n; i++) {
            const sl_sitem *it = &g->items[i];
            if (!norm[i] || it->group != 0 || (it->flags & SL_SI_CHARGE)) continue;
            bool alone = true;
            for (size_t j = 0; j < g->n && alone; j++) alone = j == i || g->kidx[j] != g->kidx[i];
            if (alone) cur[g->kidx[i]] = g->work[i];
        }
        for (size_t i = 0; i < g->n; i++) {
            const sl_sitem *it = &g->items[i];
            if (it->group != 0 || !(it->flags & SL_SI_CHARGE) || it->cost == 0) continue;
            unsigned k = g->kidx[i];
            sl_result r;
            sl_algo_settle(g->lims[i], cur[k], g->work[i], g->now,
                           it->cost > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)it->cost, &r);
            cur[k] = g->work[i];
            g->consumed[i] = true;
        }
    } else {
        for (size_t i = 0; i < g->n; i++) g->consumed[i] = g->items[i].group == 0;
    }
    /* shadow groups: decided on what group 0 left, committed only when the decision
     * admits; on a rejection they are still decided (not kept) so they report whether
     * they would have limited */
    for (unsigned grp = 1; grp <= maxg && grp < SL_SGROUPS; grp++) {
        const void *save[SLUICE_MAX_ITEMS];
        memcpy(save, cur, g->nkeys * sizeof(cur[0]));
        bool ok = run_group(g, grp, cur, decided, NULL, NULL);
        if (ok) g->res->groups_ok |= 1u << grp;
        if (ok && all) {
            for (size_t i = 0; i < g->n; i++)
                if (g->items[i].group == grp) g->consumed[i] = true;
        } else {
            memcpy(cur, save, g->nkeys * sizeof(cur[0]));
        }
    }
    if (capacity) {
        if (!all) penalty_violations(g, cur);
        apply_marks(g, cur, ops, nops);
    }
    for (size_t k = 0; k < g->nkeys; k++) g->final[k] = cur[k];
    /* what was not consumed reports the true state after the call */
    for (size_t i = 0; i < g->n; i++) {
        const sl_sitem *it = &g->items[i];
        sluice_result *o = &g->res->r[i];
        const void *st = cur[g->kidx[i]];
        sl_result r;
        if (!decided[i]) { /* a group beyond SL_SGROUPS: reported, never decided */
            sl_algo_decide(g->lims[i], st, g->peek, g->now, 0, &r);
            to_public(&r, o);
            continue;
        }
        if (g->consumed[i] && !(it->group == 0 && !all)) continue;
        if (g->consumed[i]) { /* a charge: can the same cost pass now? */
            sl_algo_decide(g->lims[i], st, g->peek, g->now, it->cost, &r);
            to_public(&r, o);
            if (!r.allowed) continue;
        }
        /* a rejecting item keeps its verdict and retry-after (from its chained decision);
         * every item reports the state as the call left it */
        sl_algo_decide(g->lims[i], st, g->peek, g->now, 0, &r);
        o->remaining = r.remaining;
        o->reset_after_ns = r.reset_after_ns;
        o->lease = 0;
        o->delay_ns = 0;
    }
}
