/* SPDX-License-Identifier: Apache-2.0 */
/*
 * decide.c -- the second half of a decision: the prepared verdict becomes ONE request to
 * the store (enforced windows in group 0, each shadow policy and key its own group,
 * Envoy overrides with their own limit, count_rejected windows charged on a rejection),
 * and when the store answers, the reaction: allow, shape (delay), recheck, reject, or the
 * failure mode. Also settle and release (of a verdict or a token), reset, and the
 * synchronous forms over a store that answers at once.
 * Nothing is decided twice: the store reports the true state of every item with its
 * answer, so a rejection costs one store request like an admission.
 */
#include <string.h>

#include "engine/internal.h"
#include "store/decision.h"

typedef sl__ewin e_win;

enum { OP_DECIDE = 1, OP_APPLY, OP_RESET };

static void on_decided(void *ud, int rc, const sl_sresult *res);

static void batch_done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    *(int *)ud = rc;
}

/* One verdict through the general path, its completion's rc into *rc (the store must
 * answer at once). */
static void sync_done_rc(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now, int *rc) {
    *rc = SLUICE_EINVAL;
    sl_engine_decide(e, lane, v, now, batch_done, rc);
}

static const e_win *item_win(const sl_verdict_item *it) { return sl__item_win(it); }

/* Failures of the shared state itself, to which on_store_error applies; every other
 * error of a decision (ERANGE, ETOOMANY, EINVAL, ...) is the engine's and answered 500. */
static bool is_store_failure(int rc) {
    return rc == SLUICE_ESTORE || rc == SLUICE_EFULL || rc == SLUICE_ENOMEM || rc == SLUICE_EIO;
}

bool sl__admitted(const sl_verdict *v) {
    return (v->action == SL_ALLOW || (v->action == SL_DELAY && !v->recheck)) && !v->store_error;
}

void sl__complete(sl_verdict *v, int rc) {
    if (v->run.tok_rest != 0 && v->run.done != NULL) {
        /* the next operation of the token (release after settle) */
        if (rc != SLUICE_OK && v->run.chain_rc == SLUICE_OK) v->run.chain_rc = rc;
        unsigned next = (v->run.tok_rest & SL_TOK_SETTLE) ? SL_TOK_SETTLE : SL_TOK_RELEASE;
        v->run.tok_rest &= ~next;
        v->run.tok_op = next;
        sl__take_and_apply(v->run.e, v->run.lane, v, v->run.apply_now);
        return;
    }
    if (rc == SLUICE_OK && v->run.chain_rc != SLUICE_OK) rc = v->run.chain_rc;
    v->run.chain_rc = SLUICE_OK;
    sl_engine_done done = v->run.done;
    void *ud = v->run.ud;
    v->run.done = NULL;
    v->run.op = 0;
    if (done != NULL) done(ud, rc, v);
}

/* A decision's end: the token id it reserved and did not issue goes back. */
static void complete(sl_verdict *v, int rc) {
    if (v->ovr_starving) {
        sl_ovr_starving(sl_store_overrides(v->run.e->store), -1);
        v->ovr_starving = false;
    }
    if (v->run.tok_resv != 0) {
        sl__token_drop(v->run.e->tokens, v->run.tok_resv);
        v->run.tok_resv = 0;
    }
    sl__complete(v, rc);
}

/* A block-list window: an Envoy rule with requests_per_unit 0, or a descriptor's limit
 * override of 0 (upstream answers OVER_LIMIT for both): rejects, never admits. */
static bool denies(const sl_verdict_item *it) {
    const e_win *w = item_win(it);
    return (w->cw != NULL && w->cw->deny_all) || (it->override && it->override_limit == 0) ||
           it->blocked;
}

/* A block-list window's answer: rejected, nothing to wait for. */
static void deny_result(const sl_verdict_item *it, sluice_time now, sluice_result *r) {
    memset(r, 0, sizeof(*r));
    int64_t per = item_win(it)->cw->spec.period_ns;
    r->allowed = 0;
    r->retry_after_ns = SLUICE_NEVER;
    r->reset_after_ns = per > 0 ? per - (now.wall_ns % per) : 0;
}

/* ---- the answer ---------------------------------------------------------------------- */

/* The store answered (or failed): results into the items, then the reaction. */
static void send(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now);

static void on_decided(void *ud, int rc, const sl_sresult *res) {
    sl_verdict *v = ud;
    const sl_engine *e = v->run.e;
    if (rc == SL_OVR_EAGAIN && v->ovr_tries < 16) {
        /* an override changed between its lookup and the store's claim: nothing was
         * decided; look it up again. From the third try on, writers of overrides wait
         * while this decision is retried (bounded on both sides: a writer waits at most
         * 2 ms per change, a decision ends in an error after 16 tries) */
        v->ovr_tries++;
        if (v->ovr_tries == 3) {
            sl_ovr_starving(sl_store_overrides(e->store), +1);
            v->ovr_starving = true;
        }
        send(e, v->run.lane, v, v->decided_at);
        return;
    }
    if (rc == SL_OVR_EAGAIN) rc = SLUICE_ERANGE;
    sluice_time now = v->decided_at;
    size_t enf[SLUICE_MAX_ITEMS], ne = 0;
    for (size_t i = 0; i < v->n; i++)
        if (!v->items[i].shadow && !v->items[i].unlimited) enf[ne++] = i;
    if (rc != SLUICE_OK) {
        if (!is_store_failure(rc)) {
            sl__fail(v, rc);
            complete(v, rc);
            return;
        }
        bool closed = false;
        for (size_t i = 0; i < ne; i++) closed |= item_win(&v->items[enf[i]])->cp->fail_closed;
        v->store_error = true;
        v->error = rc;
        v->action = closed ? SL_FAIL : SL_ALLOW;
        v->status = closed ? 503 : 200;
        complete(v, SLUICE_OK);
        return;
    }
    bool allowed = true;
    if (res != NULL) {
        allowed = res->allowed != 0;
        v->store_local = res->local;
        for (size_t s = 0; s < v->run.nsi && s < res->n; s++) {
            sl_verdict_item *it = &v->items[v->run.sidx[s]];
            it->result = res->r[s];
            if (v->run.capacity) it->x = res->x[s];
            bool in_group = it->shadow ? (res->groups_ok >> it->group & 1u) != 0 : true;
            it->consumed = it->shadow ? (allowed && in_group) : (allowed || it->charge);
            if (!allowed && it->charge) it->settle = false; /* charged, not reserved */
            it->would_limit = !it->result.allowed;
        }
    }
    if (v->run.pass) { /* a solved challenge: nothing was decided or consumed */
        for (size_t i = 0; i < v->n; i++) v->items[i].consumed = false;
        v->action = allowed ? SL_ALLOW : SL_REJECT;
        v->status = allowed ? 200 : 404;
        complete(v, SLUICE_OK);
        return;
    }
    if (v->run.deny) allowed = false;
    if (v->run.capacity && !allowed) sl__cap_penalty_results(v);
    for (size_t i = 0; i < v->n; i++) {
        sl_verdict_item *it = &v->items[i];
        if (it->unlimited) continue;
        if (denies(it)) {
            deny_result(it, now, &it->result);
            it->would_limit = true;
            it->consumed = false;
        }
        if (it->shadow && it->would_limit) v->shadow_limited = true;
    }
    /* deciding item among the enforced ones */
    int dec = -1;
    for (size_t i = 0; i < ne; i++) {
        sl_verdict_item *it = &v->items[enf[i]];
        if (dec < 0) {
            dec = (int)enf[i];
            continue;
        }
        const sluice_result *a = &it->result, *b = &v->items[dec].result;
        if (sl_window_decides_over(a, sl_rank_of(a), b, sl_rank_of(b))) dec = (int)enf[i];
    }
    v->deciding = dec;
    if (allowed) {
        int64_t delay = 0;
        for (size_t i = 0; i < ne; i++)
            if (v->items[enf[i]].result.delay_ns > delay) delay = v->items[enf[i]].result.delay_ns;
        if (delay > 0) {
            v->action = SL_DELAY;
            v->delay_ns = delay;
        }
        sl__issue_token(e, v, now);
        complete(v, SLUICE_OK);
        return;
    }
    /* Delay instead of reject only when every rejecting policy allows a delay that long:
     * then the caller waits and checks again (nothing was consumed). A window charged by
     * count_rejected does not qualify: its attempt was counted. */
    bool can_delay = true;
    int64_t wait = 0;
    for (size_t i = 0; i < ne; i++) {
        const sl_verdict_item *it = &v->items[enf[i]];
        if (it->charge && it->consumed) can_delay = false; /* the attempt was counted */
        if (it->result.allowed) continue;
        const sl_cpolicy *cp = item_win(it)->cp;
        if (cp->react != SL_REACT_DELAY || it->result.retry_after_ns == SLUICE_NEVER ||
            it->result.retry_after_ns > cp->max_delay_ns)
            can_delay = false;
        else if (it->result.retry_after_ns > wait)
            wait = it->result.retry_after_ns;
    }
    if (can_delay && !v->run.deny) {
        /* not admitted: nothing was consumed, the caller checks again after the delay (an
         * HTTP answer is 429 with that Retry-After, unlike a shaped admission's 200) */
        v->action = SL_DELAY;
        v->recheck = true;
        v->status = 429;
        v->delay_ns = wait > 0 ? wait : 1;
        complete(v, SLUICE_OK);
        return;
    }
    v->action = SL_REJECT;
    v->status = 429;
    v->retry_after_ns = dec >= 0 ? v->items[dec].result.retry_after_ns : SLUICE_NEVER;
    if (v->run.capacity) sl__cap_answer(v); /* a penalty's challenge answers its own status */
    complete(v, SLUICE_OK);
}

/* How long a token of v would live if v is admitted (0: v can hold nothing to settle or
 * release), and the policy whose share it counts in. */
static int64_t token_need(const sl_verdict *v, const sl__epol **owner) {
    int64_t life = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        const e_win *w = item_win(it);
        if (it->unlimited || w->lim == NULL || w->cw == NULL || denies(it)) continue;
        bool conc = w->cw->spec.algo == SLUICE_CONCURRENCY ||
                    w->cw->spec.algo == SLUICE_ADAPTIVE_CONCURRENCY;
        if (!it->settle && (!conc || it->cost == 0)) continue; /* a peek takes no slot */
        if (life == 0) *owner = w->ep;
        int64_t l = sl__item_life(w, it->settle, conc);
        if (l > life) life = l;
    }
    return life;
}

/*
 * Why the token is reserved before the store is asked: an admission whose token cannot
 * be recorded would hold a lease or a reservation nobody can give back (the old failure:
 * a token with no id, refused at release, its slot held until the lease ended). Reserved
 * first, a full share refuses the request with nothing charged. False: refused (v failed
 * with SL_ETOKENS_FULL). Shared tokens are claimed in the store instead: nothing here.
 */
static bool reserve_token(const sl_engine *e, sl_verdict *v, sluice_time now) {
    if (sl__tokens_shared() || v->run.pass) return true;
    const sl__epol *ep = NULL;
    int64_t life = token_need(v, &ep);
    if (life == 0 || ep == NULL) return true;
    int64_t margin = 60 * SLUICE_NS_PER_S; /* the store's answer comes well within it */
    int64_t exp = now.mono_ns > INT64_MAX - life - margin ? INT64_MAX : now.mono_ns + life + margin;
    uint64_t id = sl__token_reserve(e->tokens, ep->tok_owner, e->tok_share, exp, now.mono_ns);
    if (id == 0) {
        sl__fail(v, SL_ETOKENS_FULL);
        return false;
    }
    v->run.tok_resv = id;
    return true;
}

/*
 * The store request: every item a store decides, in verdict order. Shadow items get a
 * group per (policy, key): the windows of one shadow policy are all-or-nothing among
 * themselves and never block the others.
 */
void sl_engine_decide(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                      sl_engine_done done, void *ud) {
    v->run.e = e;
    v->run.done = done;
    v->run.ud = ud;
    v->run.op = OP_DECIDE;
    v->run.lane = lane;
    v->decided_at = now;
    if (e == NULL || v->run.prep_rc != SLUICE_OK || v->action == SL_ERROR) {
        int rc = v->run.prep_rc != SLUICE_OK ? v->run.prep_rc : SLUICE_EINVAL;
        sl__fail(v, rc);
        complete(v, rc);
        return;
    }
    if (v->missing_key_policy != NULL) {
        v->action = SL_REJECT;
        v->status = 400;
        complete(v, SLUICE_OK);
        return;
    }
    send(e, lane, v, now);
}

/* Resolves the verdict's overrides, reserves its token (once: a retry after an override
 * changed keeps it) and sends its store request. */
static void send(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now) {
    if (v->n_ovr > 0) {
        int orc = sl__ovr_apply(e, v, now);
        if (orc != SLUICE_OK) {
            sl__fail(v, orc);
            complete(v, orc);
            return;
        }
    }
    if (v->run.tok_resv == 0 && !reserve_token(e, v, now)) {
        complete(v, SL_ETOKENS_FULL);
        return;
    }
    sl_sitem si[SLUICE_MAX_ITEMS];
    size_t n = 0;
    unsigned groups = 0;
    const void *gkey[SL_SGROUPS];
    const sl__epol *gpol[SL_SGROUPS];
    v->run.deny = false;
    for (size_t i = 0; i < v->n; i++) {
        sl_verdict_item *it = &v->items[i];
        if (it->unlimited) continue;
        const e_win *w = item_win(it);
        if (denies(it)) {
            if (!it->shadow) v->run.deny = true;
            continue;
        }
        uint8_t grp = 0;
        if (it->shadow && !it->count_only) { /* a count-only item never rejects: group 0 */
            unsigned g = 0;
            while (g < groups && !(gpol[g] == w->ep && gkey[g] == (const void *)(v->keys + it->key_off)))
                g++;
            if (g == groups) {
                if (groups + 1 >= SL_SGROUPS) continue; /* more shadow groups than a store
                                                           request carries: not counted */
                gpol[g] = w->ep;
                gkey[g] = v->keys + it->key_off;
                groups++;
            }
            grp = (uint8_t)(g + 1);
        }
        it->group = grp;
        si[n] = (sl_sitem){.lim = w->lim,
                           .key = v->keys + it->key_off,
                           .key_len = it->key_len,
                           .cost = it->cost,
                           .limit = it->count_only ? SL_COUNT_ONLY_LIMIT
                                    : it->override ? it->override_limit : 0,
                           .group = grp,
                           .flags = (uint8_t)(it->charge && grp == 0 ? SL_SI_CHARGE : 0)};
        if (it->ovr_g != 0) {
            const sl_vovr *og = &v->ovr[it->ovr_g - 1];
            if (it->ovr_p >= 0) si[n].params = &og->lim[it->ovr_p];
            if (it->ovr_c == -2) si[n].carry = &w->lim->lim;
            else if (it->ovr_c >= 0) si[n].carry = &og->from[it->ovr_c];
            if (og->guarded) si[n].guard = &og->guard;
        }
        if (v->run.capacity && grp == 0) {
            si[n].cls = it->cls;
            si[n].cap = it->cap;
            si[n].pgrp = it->pgrp;
            si[n].bpath = it->bpath;
            si[n].blevel = it->blevel;
            si[n].share = it->share;
        }
        v->run.sidx[n++] = (uint8_t)i;
    }
    v->run.nsi = (uint8_t)n;
    if (n == 0) {
        on_decided(v, SLUICE_OK, NULL);
        return;
    }
    e->ops->decide(lane, si, n, (v->run.deny ? SL_SREQ_REJECT : 0) | (v->run.pass ? SL_SREQ_PASS : 0), now,
                   on_decided, v);
}

void sl_engine_pass(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                    sl_engine_done done, void *ud) {
    v->run.pass = true;
    sl_engine_decide(e, lane, v, now, done, ud);
}

/* ---- several decisions at once ----------------------------------------------------- */

/* A verdict the store's batch can decide: one enforced item of its own limit, nothing
 * else to carry (no shadow, charge, override, block-list, missing key). */
static bool batchable(const sl_verdict *v) {
    if (v->run.prep_rc != SLUICE_OK || v->action == SL_ERROR || v->missing_key_policy != NULL ||
        v->n != 1)
        return false;
    const sl_verdict_item *it = &v->items[0];
    const e_win *w = item_win(it);
    const sl__epol *owner = NULL;
    return !it->shadow && !it->unlimited && !it->charge && !it->override && w->lim != NULL &&
           !denies(it) && !v->run.capacity && !v->run.pass && v->n_ovr == 0 &&
           (sl__tokens_shared() || token_need(v, &owner) == 0); /* a token is reserved first */
}

/*
 * Decides n prepared verdicts in order, as n sl_engine_decide calls would (a later one on
 * the same key sees the earlier ones), each completing at once into rcs[i]: the store
 * must answer at once. Runs of verdicts its batch can take go through it in one call (a
 * pipeline's decisions: their keys' memory fetched ahead of their turn); the others one
 * by one, in their place.
 */
void sl_engine_decide_batch(const sl_engine *e, void *lane, sl_verdict *const *vs, size_t n,
                            sluice_time now, int *rcs) {
    sluice_item items[SL_ENGINE_BATCH];
    sluice_result out[SL_ENGINE_BATCH];
    size_t i = 0;
    while (i < n) {
        size_t m = 0;
        while (i + m < n && m < SL_ENGINE_BATCH && e->ops->decide_batch != NULL && batchable(vs[i + m])) {
            const sl_verdict *v = vs[i + m];
            items[m] = (sluice_item){item_win(&v->items[0])->lim, v->keys + v->items[0].key_off,
                                     v->items[0].key_len, v->items[0].cost};
            m++;
        }
        if (m < 2) { /* nothing to batch: the general path */
            sync_done_rc(e, lane, vs[i], now, &rcs[i]);
            i++;
            continue;
        }
        int k = e->ops->decide_batch(lane, items, m, now, out);
        size_t done = k < 0 ? 0 : (size_t)k;
        for (size_t j = 0; j < done; j++) {
            sl_verdict *v = vs[i + j];
            v->run.e = e;
            v->run.done = batch_done;
            v->run.ud = &rcs[i + j];
            v->run.op = OP_DECIDE;
            v->run.lane = lane;
            v->decided_at = now;
            v->run.nsi = 1;
            v->run.sidx[0] = 0;
            v->items[0].group = 0;
            sl_sresult res; /* only what on_decided reads (a zeroed one is ~3 KiB) */
            res.allowed = out[j].allowed;
            res.groups_ok = 0;
            res.local = false;
            res.n = 1;
            res.r[0] = out[j];
            res.x[0].kind = 0;
            on_decided(v, SLUICE_OK, &res);
        }
        if (done < m) { /* item `done` failed in the batch: the general path says why */
            sync_done_rc(e, lane, vs[i + done], now, &rcs[i + done]);
            done++;
        }
        i += done;
    }
}

/* ---- settle and release ---------------------------------------------------------------- */

int64_t sl__item_life(const e_win *w, bool settle, bool lease) {
    const sluice_limit_spec *sp = &w->cw->spec;
    int64_t life = SLUICE_NS_PER_S;
    if (settle) {
        if (sp->period_ns > life) life = sp->period_ns;
        if (w->info.window_s > 0 && w->info.window_s * SLUICE_NS_PER_S > life)
            life = w->info.window_s * SLUICE_NS_PER_S;
        uint64_t cap = sluice_limiter_capacity(w->lim);
        if (sp->limit > 0 && cap > sp->limit) {
            unsigned __int128 refill = (unsigned __int128)cap * (uint64_t)sp->period_ns / sp->limit;
            if (refill > (unsigned __int128)life) life = refill > INT64_MAX ? INT64_MAX : (int64_t)refill;
        }
    }
    if (lease && sp->lease_ns > life) life = sp->lease_ns;
    return life;
}

static int64_t verdict_life(const sl_verdict *v) {
    int64_t life = SLUICE_NS_PER_S;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->unlimited || !it->consumed || item_win(it)->lim == NULL) continue;
        int64_t l = sl__item_life(item_win(it), it->settle, it->result.lease != 0);
        if (l > life) life = l;
    }
    return life;
}

static bool applies(const sl_verdict *v, const sl_verdict_item *it) {
    if (it->unlimited || !it->consumed || item_win(it)->lim == NULL) return false;
    if (v->run.tok_op == SL_TOK_SETTLE) return it->settle;
    return it->result.lease != 0;
}

static void on_applied(void *ud, int rc, const sl_sresult *res) {
    sl_verdict *v = ud;
    if (rc == SLUICE_OK && res != NULL && v->run.tok_op == SL_TOK_RELEASE && !res->allowed)
        rc = SLUICE_ENOTFOUND; /* the lease had expired: its slot was reclaimed */
    if (rc != SLUICE_OK && v->run.first_err == SLUICE_OK) v->run.first_err = rc;
    if (--v->run.pending == 0) complete(v, v->run.first_err);
}

/*
 * Sends one settle or release per item of v that holds one (the single use was taken
 * already), and completes when the store has answered them all. Why every answer is
 * awaited: a release into an expired lease, or a store that is down, must reach the
 * caller (404, 503) rather than be reported as done.
 */
/* issue 24: a settle from a provider's usage gives each window its pool's count under its
 * policy's counting parameters (src/llm); otherwise every item settles to run.actual. */
static bool item_pooled(const sl_verdict_item *it) {
    const sl__ewin *w = item_win(it);
    return w->cw && w->cw->counts && w->cw->counts != SL_LLM_COUNT_TOTAL;
}

static uint64_t item_actual(const sl_verdict *v, const sl_verdict_item *it) {
    if (!v->run.has_llm) return v->run.actual;
    const sl__ewin *w = item_win(it);
    sl_llm_params d;
    sl_llm_params_default(&d);
    sl_llm_counts k;
    sl_llm_count_usage(&v->run.llm, w->cp && w->cp->llm ? &w->cp->llm->params : &d, &k);
    return w->cw && w->cw->counts ? sl_llm_counts_get(&k, (sl_llm_count)w->cw->counts) : k.total;
}

void sl__apply(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now) {
    v->run.first_err = SLUICE_OK;
    v->run.pending = 1; /* held until every operation is out */
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!applies(v, it)) continue;
        /* a bare actual is a total: the requests, input, output and cached pools keep what
         * they reserved (only a usage object says how a total splits) */
        if (v->run.tok_op == SL_TOK_SETTLE && !v->run.has_llm && item_pooled(it)) continue;
        sl_sitem si = {.lim = item_win(it)->lim, .key = v->keys + it->key_off,
                       .key_len = it->key_len, .cost = it->cost};
        if (v->run.tok_op == SL_TOK_RELEASE) { /* a sample for an adaptive limit */
            si.cap = SL_SIC_SAMPLE;
            si.outcome = v->run.outcome;
            si.latency_ns = v->run.has_latency ? v->run.latency_ns : now.mono_ns - v->decided_at.mono_ns;
        }
        v->run.pending++;
        if (v->run.tok_op == SL_TOK_SETTLE)
            e->ops->settle(lane, &si, item_actual(v, it), v->decided_at, now, on_applied, v);
        else
            e->ops->release(lane, &si, it->result.lease, now, on_applied, v);
    }
    on_applied(v, SLUICE_OK, NULL);
}

static void start_apply(const sl_engine *e, void *lane, sl_verdict *v, unsigned op,
                        uint64_t actual, sluice_time now, sl_engine_done done, void *ud) {
    v->run.e = e;
    v->run.done = done;
    v->run.ud = ud;
    v->run.op = OP_APPLY;
    v->run.lane = lane;
    v->run.tok_op = op;
    v->run.tok_rest = 0;
    v->run.chain_rc = SLUICE_OK;
    v->run.actual = actual;
    bool any = false;
    if (sl__admitted(v))
        for (size_t i = 0; i < v->n; i++) any |= applies(v, &v->items[i]);
    if (!any) { /* a settle of nothing reserved is an error; a release of nothing, a no-op */
        complete(v, op == SL_TOK_SETTLE ? SLUICE_EINVAL : SLUICE_OK);
        return;
    }
    v->run.tok_life = verdict_life(v);
    sl__take_and_apply(e, lane, v, now);
}

void sl_engine_settle_async(const sl_engine *e, void *lane, sl_verdict *v, uint64_t actual,
                            sluice_time now, sl_engine_done done, void *ud) {
    start_apply(e, lane, v, SL_TOK_SETTLE, actual, now, done, ud);
}

void sl_engine_release_async(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                             sl_engine_done done, void *ud) {
    start_apply(e, lane, v, SL_TOK_RELEASE, 0, now, done, ud);
}

/* ---- reset --------------------------------------------------------------------------- */

static void on_reset(void *ud, int rc, const sl_sresult *res) {
    (void)res;
    complete(ud, rc);
}

void sl_engine_reset(const sl_engine *e, void *lane, sl_verdict *v, sluice_time now,
                     sl_engine_done done, void *ud) {
    v->run.e = e;
    v->run.done = done;
    v->run.ud = ud;
    v->run.op = OP_RESET;
    v->run.lane = lane;
    if (e == NULL || v->run.prep_rc != SLUICE_OK) {
        complete(v, v->run.prep_rc != SLUICE_OK ? v->run.prep_rc : SLUICE_EINVAL);
        return;
    }
    sl_sitem si[SLUICE_MAX_ITEMS];
    size_t n = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->unlimited || item_win(it)->lim == NULL) continue;
        si[n++] = (sl_sitem){.lim = item_win(it)->lim, .key = v->keys + it->key_off,
                             .key_len = it->key_len};
    }
    v->n = n;
    e->ops->reset(lane, si, n, now, on_reset, v);
}

/* ---- synchronous forms --------------------------------------------------------------- */

typedef struct sync_wait {
    bool done;
    int rc;
} sync_wait;

static void sync_done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    sync_wait *w = ud;
    w->done = true;
    w->rc = rc;
}

static int sync_end(const sync_wait *w) { return w->done ? w->rc : SLUICE_EINVAL; }

int sl_engine_check(const sl_engine *e, const sl_request *req, sluice_time now, sl_verdict *out) {
    if (out == NULL) return SLUICE_EINVAL;
    if (e != NULL && !e->ops->immediate) return sl__fail(out, SLUICE_EINVAL);
    sl_engine_prepare(e, req, out);
    sync_wait w = {false, 0};
    sl_engine_decide(e, e ? e->store : NULL, out, now, sync_done, &w);
    return sync_end(&w);
}

int sl_engine_check_named(const sl_engine *e, const char *policy, const void *key,
                          size_t key_len, bool has_cost, uint64_t cost, sluice_time now,
                          sl_verdict *out) {
    if (out == NULL) return SLUICE_EINVAL;
    if (e != NULL && !e->ops->immediate) return sl__fail(out, SLUICE_EINVAL);
    sl_engine_prepare_named(e, policy, key, key_len, has_cost, cost, out);
    sync_wait w = {false, 0};
    sl_engine_decide(e, e ? e->store : NULL, out, now, sync_done, &w);
    return sync_end(&w);
}

int sl_engine_acquire(const sl_engine *e, const char *policy, const void *key, size_t key_len,
                      sluice_time now, sl_verdict *out) {
    return sl_engine_check_named(e, policy, key, key_len, true, 1, now, out);
}

int sl_engine_release(const sl_engine *e, sl_verdict *v, sluice_time now) {
    if (e == NULL || v == NULL || !e->ops->immediate) return SLUICE_EINVAL;
    sync_wait w = {false, 0};
    sl_engine_release_async(e, e->store, v, now, sync_done, &w);
    return sync_end(&w);
}

int sl_engine_settle(const sl_engine *e, sl_verdict *v, uint64_t actual, sluice_time now) {
    if (e == NULL || v == NULL || !e->ops->immediate) return SLUICE_EINVAL;
    sync_wait w = {false, 0};
    sl_engine_settle_async(e, e->store, v, actual, now, sync_done, &w);
    return sync_end(&w);
}

static int token_sync(const sl_engine *e, const char *token, size_t len, unsigned op,
                      uint64_t actual, sluice_time now) {
    if (e == NULL || !e->ops->immediate) return SLUICE_EINVAL;
    static _Thread_local sl_verdict v;
    sync_wait w = {false, 0};
    sl_engine_token(e, e->store, token, len, op, actual, now, &v, sync_done, &w);
    return sync_end(&w);
}

int sl_engine_settle_token(const sl_engine *e, const char *token, size_t len, uint64_t actual,
                           sluice_time now) {
    return token_sync(e, token, len, SL_TOKEN_SETTLE, actual, now);
}

int sl_engine_release_token(const sl_engine *e, const char *token, size_t len, sluice_time now) {
    return token_sync(e, token, len, SL_TOKEN_RELEASE, 0, now);
}
