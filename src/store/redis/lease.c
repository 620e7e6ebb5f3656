/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lease.c -- leasing for hot keys: a worker takes a slice of a limit in one call and
 * admits from it locally; at most one slice request in flight per key per worker
 * (decisions arriving meanwhile go to Redis), unspent units given back when the slice
 * lapses or its window ends.
 */
#include "store/redis/client_int.h"

/* ---- leasing (hot keys) -------------------------------------------------------------
 * A rate limit with a lease slice S (the policy's `leasing`, else the store URL's
 * ?lease=S) takes S units in one call instead of the cost asked, and spends the rest
 * from this client's lease table for up to its hold time, without a round trip; what is
 * not spent goes back (a settle with a negative delta) when the slice expires, unless
 * its window has passed. In a decision of several limits, items covered by a held slice
 * are reserved here and the others go to Redis; the reservations stand only if Redis
 * admits the rest (all-or-nothing). Overshoot bound: every client (one per worker and
 * instance) holds at most one slice per key, so at most clients x S units beyond the
 * limit can be admitted (units taken near a window's end and spent after it); held
 * slices can as well make the others under-admit by as much.
 */

static bool leasable(const sluice_limiter *l) {
    sluice_algo a = l->spec.algo;
    return a == SLUICE_GCRA || a == SLUICE_TOKEN_BUCKET || a == SLUICE_FIXED_WINDOW ||
           a == SLUICE_SLIDING_WINDOW;
}

/* The slice of l's leases (0: none) and their hold time. */
static uint32_t slice_of(const sl_redis *r, const sluice_limiter *l, int64_t *hold) {
    if (!leasable(l)) return 0;
    *hold = l->lease_hold_ns > 0 ? l->lease_hold_ns : r->o.lease_ns;
    return l->lease_slice ? l->lease_slice : r->o.lease_slice;
}

void sl__redis_held_add(sl_redis *r, int64_t units) {
    r->held = (uint64_t)((int64_t)r->held + units);
    atomic_store_explicit(&r->st.lease_held, r->held, memory_order_relaxed);
}

/* Gives `units` of `it` back (settle with a negative delta), fire and forget; nothing
 * when the window or period that counted them has passed (`taken`: when they were). */
static void give_back(sl_redis *r, const rq_item *it, uint64_t units, sluice_time taken, sluice_time now) {
    if (units == 0) return;
    if (!sl_algo_refundable(&it->lim->lim, taken, now)) {
        atomic_store_explicit(&r->st.lease_lapsed,
                              atomic_load_explicit(&r->st.lease_lapsed, memory_order_relaxed) + units,
                              memory_order_relaxed);
        return;
    }
    rq *f = sl__redis_rq_get(r);
    if (f == NULL) return;
    f->op = 's';
    f->cb = NULL;
    f->n = 1;
    f->now = now;
    f->it[0] = *it;
    f->it[0].cost = -(int64_t)units;
    f->it[0].lease = LEASE_NONE;
    f->res.n = 1;
    rq_hold(f);
    sl__redis_regroup(r, f);
    atomic_store_explicit(&r->st.lease_returned,
                          atomic_load_explicit(&r->st.lease_returned, memory_order_relaxed) + units,
                          memory_order_relaxed);
    sl__redis_launch(r, f);
}

/* Ends a lease: its unspent units go back. */
static void lease_end(sl_redis *r, lease_ent *e, sluice_time now) {
    uint64_t left = e->left;
    e->left = 0;
    e->fp = 0;
    sl__redis_held_add(r, -(int64_t)left);
    give_back(r, &e->it, left, e->taken, now);
    sl_limiter_unref(e->lim); /* the lease's reference (the give-back holds its own) */
    e->lim = NULL;
}

/* The live lease of `it` (same key and limiter, not expired), or NULL; an expired one
 * found on the way is ended. */
static lease_ent *lease_find(sl_redis *r, const rq_item *it, sluice_time now) {
    lease_ent *e = &r->leases[sl__redis_fp_of(it) & (LEASE_SLOTS - 1)];
    if (e->fp != sl__redis_fp_of(it) || e->lim != it->lim) return NULL;
    if (now.mono_ns < e->expires) return e;
    lease_end(r, e, now);
    return NULL;
}

/* Before a decision goes out: items a held slice covers are reserved from it (and not
 * sent); leasable items without one ask for a slice instead of their cost. Returns true
 * when every item was covered (the decision is admitted without a round trip). */
bool sl__redis_lease_plan(sl_redis *r, rq *q) {
    bool all_local = q->n > 0;
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        int64_t hold = 0;
        /* enforced items of their own limit only: a shadow group, a charge or an override
         * decides in Redis */
        uint32_t slice = it->sgroup == 0 && it->sflags == 0 && it->limit == 0 && !it->par && it->xlen == 0
                             ? slice_of(r, it->lim, &hold) : 0;
        if (slice == 0 || it->cost <= 0) {
            all_local = false;
            continue;
        }
        lease_ent *e = lease_find(r, it, q->now);
        if (e != NULL && e->left >= (uint64_t)it->cost) {
            e->left -= (uint64_t)it->cost;
            sl__redis_held_add(r, -it->cost);
            it->lease = LEASE_LOCAL;
            it->lent = (uint32_t)(e - r->leases);
            q->leasing = true;
            continue;
        }
        all_local = false;
        uint64_t fp = sl__redis_fp_of(it);
        lease_ent *slot = &r->leases[fp & (LEASE_SLOTS - 1)];
        /* Why one slice request at a time: decisions that arrive while a slice is on its
         * way would each take one and the client would hold several (merged when they
         * come back), past the documented bound. They decide their own cost instead. */
        if (slot->taking != 0) continue;
        if (e != NULL) lease_end(r, e, q->now); /* too small: give the rest back, take anew */
        if ((uint64_t)slice > (uint64_t)it->cost && slice <= sluice_limiter_capacity(it->lim)) {
            it->lease = LEASE_TAKE;
            it->cost = slice;
            slot->taking = fp;
            q->leasing = true;
        }
    }
    if (q->leasing) sl__redis_regroup(r, q);
    return all_local;
}

/* The slice request of `it` is over (answered, refused, failed): others may ask again. */
void sl__redis_taking_done(sl_redis *r, const rq_item *it) {
    lease_ent *slot = &r->leases[sl__redis_fp_of(it) & (LEASE_SLOTS - 1)];
    if (slot->taking == sl__redis_fp_of(it)) slot->taking = 0;
}

/* A rejected decision that asked for slices: when every rejected item was a slice
 * larger than its cost, refund what the other groups took and decide the costs asked
 * (a second round trip, only on the way to a rejection; later ones are answered from
 * the over-limit cache). Returns true when the decision went out again. */
bool sl__redis_lease_retry(sl_redis *r, rq *q) {
    bool any = false;
    for (int i = 0; i < q->n; i++) {
        const rq_item *it = &q->it[i];
        if (it->lease == LEASE_LOCAL || q->res.r[i].allowed || it->sgroup != 0) continue;
        if (it->lease != LEASE_TAKE || it->cost <= it->want) return false; /* a real rejection */
        any = true;
    }
    if (!any) return false;
    if (q->ngroups > 1) sl__redis_send_refunds(r, q);
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        if (it->lease != LEASE_TAKE) continue;
        sl__redis_taking_done(r, it);
        it->lease = LEASE_NONE;
        it->cost = it->want;
    }
    sl__redis_regroup(r, q);
    sl__redis_launch(r, q);
    return true;
}

/* The decision is over: on admission the slices taken go to the lease table and items
 * served locally report what their lease holds; otherwise the local reservations go
 * back to their leases. */
void sl__redis_lease_settle(sl_redis *r, rq *q, bool admitted) {
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        sluice_result *o = &q->res.r[i];
        if (it->lease == LEASE_LOCAL) {
            lease_ent *e = &r->leases[it->lent];
            bool same = e->lim == it->lim && e->fp == sl__redis_fp_of(it);
            if (!admitted) {
                if (same) e->left += (uint64_t)it->cost, sl__redis_held_add(r, it->cost);
                else give_back(r, it, (uint64_t)it->cost, q->now, q->now); /* its lease ended meanwhile */
            } else {
                inc(&r->st.lease_local);
            }
            memset(o, 0, sizeof(*o));
            o->allowed = 1;
            o->limit = sluice_limiter_capacity(it->lim);
            o->remaining = same ? e->left : 0;
            continue;
        }
        if (it->lease == LEASE_TAKE) sl__redis_taking_done(r, it);
        if (it->lease != LEASE_TAKE || !admitted) continue;
        int64_t hold = 0;
        slice_of(r, it->lim, &hold);
        uint64_t fp = sl__redis_fp_of(it), extra = (uint64_t)(it->cost - it->want);
        lease_ent *e = &r->leases[fp & (LEASE_SLOTS - 1)];
        if (e->fp == fp && e->lim == it->lim) {
            e->left += extra; /* the same key twice in one decision */
        } else {
            if (e->lim != NULL) lease_end(r, e, q->now); /* another key held this slot */
            e->fp = fp;
            e->lim = it->lim;
            sl_limiter_ref(e->lim); /* outlives the engine that made it if need be */
            e->left = extra;
            e->it = *it;
            e->it.lease = LEASE_NONE;
        }
        e->taken = q->now;
        e->expires = q->now.mono_ns + hold;
        e->sweep_at = mono_now() + hold;
        sl__redis_held_add(r, (int64_t)extra);
        if (r->lease_sweep_at == 0 || e->sweep_at < r->lease_sweep_at) {
            r->lease_sweep_at = e->sweep_at;
            sl__redis_arm(r, e->sweep_at);
        }
        inc(&r->st.leases);
        /* the caller sees what it would have seen plus what this client holds */
        o->remaining += e->left;
    }
}

/* From the timer: ends the leases whose hold has passed (a key that went quiet gives its
 * units back within its hold time, not when it is next decided). */
void sl__redis_lease_sweep(sl_redis *r, int64_t t) {
    if (r->lease_sweep_at == 0 || t < r->lease_sweep_at) return;
    int64_t next = 0;
    for (unsigned i = 0; i < LEASE_SLOTS; i++) {
        lease_ent *e = &r->leases[i];
        if (e->lim == NULL) continue;
        if (t >= e->sweep_at) {
            /* the caller's time now, for the give-back's window check */
            int64_t el = t - (e->sweep_at - (e->expires - e->taken.mono_ns));
            sluice_time at = {.mono_ns = e->taken.mono_ns + el, .wall_ns = e->taken.wall_ns + el};
            lease_end(r, e, at);
        } else if (next == 0 || e->sweep_at < next) {
            next = e->sweep_at;
        }
    }
    r->lease_sweep_at = next;
    if (next) sl__redis_arm(r, next);
}
