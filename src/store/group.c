/*
 * group.c -- the all-or-nothing decision over loaded states (see group.h for the rules).
 * Why one function for every store: a shadow policy, an Envoy override and a
 * count_rejected window travel in the same store request as the enforced windows, and
 * what a store reports must not depend on which store it is.
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

/* Decides the items of group `grp` on the states in cur (chaining repeats); true when
 * every item admitted. */
static bool run_group(sl_group_run *g, unsigned grp, const void **cur, bool *decided, bool *norm) {
    bool all = true;
    for (size_t i = 0; i < g->n; i++) {
        const sl_sitem *it = &g->items[i];
        if (it->group != grp) continue;
        unsigned k = g->kidx[i];
        sl_result r;
        bool ch = sl_algo_decide(&g->lims[i], cur[k], g->work[i], g->now, it->cost, &r);
        if (r.allowed && ch && it->cost > 0) cur[k] = g->work[i];
        if (!r.allowed) all = false;
        if (norm != NULL) norm[i] = ch && !r.allowed;
        to_public(&r, &g->res.r[i]);
        decided[i] = true;
    }
    return all;
}

void sl_group_decide(sl_group_run *g) {
    const void *cur[SLUICE_MAX_ITEMS];
    bool decided[SLUICE_MAX_ITEMS] = {false};
    unsigned maxg = 0;
    for (size_t k = 0; k < g->nkeys; k++) cur[k] = g->stored[k];
    for (size_t i = 0; i < g->n; i++) {
        g->consumed[i] = false;
        if (g->items[i].group > maxg) maxg = g->items[i].group;
    }
    g->res.n = g->n;
    g->res.groups_ok = 0;
    bool norm[SLUICE_MAX_ITEMS] = {false};
    bool all = run_group(g, 0, cur, decided, norm) && !(g->flags & SL_SREQ_REJECT);
    g->res.allowed = all ? 1 : 0;
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
            sl_algo_settle(&g->lims[i], cur[k], g->work[i], g->now,
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
        bool ok = run_group(g, grp, cur, decided, NULL);
        if (ok) g->res.groups_ok |= 1u << grp;
        if (ok && all) {
            for (size_t i = 0; i < g->n; i++)
                if (g->items[i].group == grp) g->consumed[i] = true;
        } else {
            memcpy(cur, save, g->nkeys * sizeof(cur[0]));
        }
    }
    for (size_t k = 0; k < g->nkeys; k++) g->final[k] = cur[k];
    /* what was not consumed reports the true state after the call */
    for (size_t i = 0; i < g->n; i++) {
        const sl_sitem *it = &g->items[i];
        sluice_result *o = &g->res.r[i];
        const void *st = cur[g->kidx[i]];
        sl_result r;
        if (!decided[i]) { /* a group beyond SL_SGROUPS: reported, never decided */
            sl_algo_decide(&g->lims[i], st, g->peek, g->now, 0, &r);
            to_public(&r, o);
            continue;
        }
        if (g->consumed[i] && !(it->group == 0 && !all)) continue;
        if (g->consumed[i]) { /* a charge: can the same cost pass now? */
            sl_algo_decide(&g->lims[i], st, g->peek, g->now, it->cost, &r);
            to_public(&r, o);
            if (!r.allowed) continue;
        }
        /* a rejecting item keeps its verdict and retry-after (from its chained decision);
         * every item reports the state as the call left it */
        sl_algo_decide(&g->lims[i], st, g->peek, g->now, 0, &r);
        o->remaining = r.remaining;
        o->reset_after_ns = r.reset_after_ns;
        o->lease = 0;
        o->delay_ns = 0;
    }
}
