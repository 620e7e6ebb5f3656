/* SPDX-License-Identifier: Apache-2.0 */
/*
 * request.c -- one call of the Redis client from items to answer: items built into
 * EVALSHA groups by slot, sent, decoded into the algorithms' results by the shared
 * group rules (store/group.h), finished all-or-nothing; the over-limit cache that
 * answers rejections locally; retries (TRYAGAIN, CLUSTERDOWN), redirections (MOVED,
 * ASK, NOSCRIPT), refunds of a cross-slot decision's admitted calls, and late replies
 * after a timeout undone.
 */
#include "store/redis/client_int.h"

/* ---- local over-limit cache ------------------------------------------------------- */

uint64_t sl__redis_fp_of(const rq_item *it) {
    /* the key string already is a keyed hash: fold its bytes */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < it->klen; i++) h = (h ^ (unsigned char)it->key[i]) * 1099511628211ull;
    return h | 1;
}

static bool cacheable(sluice_algo a) {
    /* state only gets worse for other instances' decisions until the retry time; not
     * concurrency (a release frees slots at any time) */
    return a == SLUICE_GCRA || a == SLUICE_TOKEN_BUCKET || a == SLUICE_FIXED_WINDOW ||
           a == SLUICE_SLIDING_WINDOW || a == SLUICE_QUOTA;
}

/* Bumped by every reset (SL.RESET) in this process: the over-limit answers every client
 * cached before it are void (a reset is rare; the caches refill with the next rejection).
 * Other instances trust theirs for at most cache_max_ns. */
static _Atomic uint64_t g_cache_epoch;

/* Bumped, in the slot of a key's fingerprint, by every refund this process sends for the
 * key (a settle giving units back): every worker's cached refusal of a key in that slot
 * is void from then on, so the instance that refunded never answers a stale 429 after it
 * (the refund and the next decision of one worker travel on one connection, in order).
 * Other keys sharing the slot only lose their cached answer: one Redis call each. */
#define REFUND_SLOTS 4096
static _Atomic uint32_t g_refund_gen[REFUND_SLOTS];

static uint32_t refund_gen(uint64_t fp) {
    return atomic_load_explicit(&g_refund_gen[fp & (REFUND_SLOTS - 1)], memory_order_relaxed);
}

static cache_ent *cache_get(sl_redis *r, uint64_t fp) {
    if (r->cache == NULL) return NULL;
    cache_ent *e = &r->cache[fp & r->cache_mask];
    if (e->fp != fp || e->epoch != atomic_load_explicit(&g_cache_epoch, memory_order_relaxed) ||
        e->rgen != refund_gen(fp))
        return NULL;
    return e;
}

static bool capacity(const rq_item *it) {
    return (it->cx.cls | it->cx.cap | it->cx.pgrp | it->cx.bpath) != 0;
}

static void cache_put(sl_redis *r, const rq_item *it, const sluice_result *res, sluice_time now) {
    if (r->cache == NULL || !cacheable(it->lim->spec.algo) || capacity(it)) return;
    if (res->allowed || res->retry_after_ns <= 0 || res->retry_after_ns == SLUICE_NEVER) return;
    uint64_t fp = sl__redis_fp_of(it);
    cache_ent *e = &r->cache[fp & r->cache_mask];
    e->fp = fp;
    e->epoch = atomic_load_explicit(&g_cache_epoch, memory_order_relaxed);
    e->rgen = refund_gen(fp);
    e->until = now.mono_ns + res->retry_after_ns;
    e->trust = now.mono_ns + (res->retry_after_ns < r->o.cache_max_ns ? res->retry_after_ns : r->o.cache_max_ns);
    e->reset_at = now.mono_ns + res->reset_after_ns;
    e->since = now.mono_ns;
    e->min_cost = (uint64_t)it->cost;
    e->limit = res->limit;
}

/* ---- requests --------------------------------------------------------------------- */

rq *sl__redis_rq_get(sl_redis *r) {
    rq *q = r->free;
    if (q == NULL) return NULL;
    r->free = q->next_free;
    q->busy = true;
    q->gen++;
    q->failed = false;
    q->refused = false;
    q->got_time = false;
    q->leasing = false;
    q->orphans = 0;
    q->held = false;
    q->flags = 0;
    sl_dnode_init(&q->dl);
    return q;
}

void sl__redis_rq_put(sl_redis *r, rq *q) {
    sl_dnode_disarm(&q->dl);
    if (q->held)
        for (int i = 0; i < q->n; i++) sl_limiter_unref(q->it[i].lim);
    q->held = false;
    q->busy = false;
    q->gen++;
    q->next_free = r->free;
    r->free = q;
}

static void *priv_of(sl_redis *r, rq *q, int g) {
    uintptr_t idx = (uintptr_t)(q - r->pool);
    return (void *)((idx << 40) | ((uintptr_t)(q->gen & 0xFFFFFFFFu) << 8) | (uintptr_t)g);
}

static rq *rq_of(sl_redis *r, void *priv, int *g) {
    uintptr_t v = (uintptr_t)priv;
    uintptr_t idx = v >> 40;
    if (idx >= r->npool) return NULL;
    rq *q = &r->pool[idx];
    if (!q->busy || (q->gen & 0xFFFFFFFFu) != ((v >> 8) & 0xFFFFFFFFu)) return NULL;
    *g = (int)(v & 0xFF);
    return q;
}

static void on_group_reply(void *owner, redisReply *rep, void *priv);
static void late_reply(sl_redis *r, rq *q, int g, const redisReply *rep);

sl_redis_node *sl__redis_route(sl_redis *r, unsigned slot) {
    unsigned idx = r->o.cluster ? r->slotmap[slot] : 0;
    if (idx >= (unsigned)r->nnodes) idx = 0;
    return &r->nodes[idx];
}

static void split_ns(int64_t ns, int64_t *s, int64_t *n) {
    *s = ns / SLUICE_NS_PER_S;
    *n = ns % SLUICE_NS_PER_S;
    if (*n < 0) *n += SLUICE_NS_PER_S, (*s)--;
}

/* RESP bulk strings, written straight into the command buffer (no printf, no sds). */
static char *put_bulk(char *p, const char *s, size_t n) {
    *p++ = '$';
    p = sl_redis_put_u64(p, n);
    *p++ = '\r', *p++ = '\n';
    memcpy(p, s, n);
    p += n;
    *p++ = '\r', *p++ = '\n';
    return p;
}

static char *put_bulk_i(char *p, int64_t v) {
    char num[24];
    return put_bulk(p, num, (size_t)(sl_redis_put_i64(num, v) - num));
}

/* Sends group g of q to node nd (ASKING first when asked to). The EVALSHA is formatted
 * here as RESP and appended whole to the connection's output buffer (written at the end
 * of the loop turn by sl_redis_flush, or on EPOLLOUT).
 * Returns false when the node cannot take commands now. */
bool sl__redis_send_group(sl_redis *r, rq *q, int g, sl_redis_node *nd, bool asking) {
    if (nd->c == NULL) return false;
    rq_group *gr = &q->g[g];
    gr->node = (int8_t)nd->idx;
    char *p = r->cmd;
    *p++ = '*';
    p = sl_redis_put_u64(p, 3 + (uint64_t)gr->n + SL_REDIS_HEAD_ARGS + (uint64_t)gr->n * SL_REDIS_ITEM_ARGS);
    *p++ = '\r', *p++ = '\n';
    gr->fcall = nd->fcall;
    if (nd->fcall) { /* the function library (node.c): the same code, its top level not run again */
        p = put_bulk(p, "FCALL", 5);
        p = put_bulk(p, r->fname, strlen(r->fname));
    } else {
        p = put_bulk(p, "EVALSHA", 7);
        p = put_bulk(p, r->sha, 40);
    }
    p = put_bulk_i(p, gr->n);
    for (int k = 0; k < gr->n; k++) {
        rq_item *it = &q->it[gr->idx[k]];
        p = it->xlen ? put_bulk(p, q->xk + it->xoff, it->xlen) : put_bulk(p, it->key, it->klen);
    }
    p = put_bulk(p, &q->op, 1); /* 'd', 's', 'l' or 'x' */
    p = put_bulk(p, r->o.time_mode == SL_REDIS_TIME_SERVER ? "r" : "c", 1);
    int64_t ms, mn, ws, wn;
    split_ns(q->now.mono_ns, &ms, &mn);
    split_ns(q->now.wall_ns, &ws, &wn);
    p = put_bulk_i(p, ms);
    p = put_bulk_i(p, mn);
    p = put_bulk_i(p, ws);
    p = put_bulk_i(p, wn);
    p = put_bulk_i(p, r->o.expiry_slack_ms);
    p = put_bulk_i(p, (int64_t)q->flags);
    for (int k = 0; k < gr->n; k++) {
        rq_item *it = &q->it[gr->idx[k]];
        p = put_bulk_i(p, it->xlen ? SL_REDIS_ALGO_ENVOY : it->lim != NULL ? it->lim->spec.algo : 0);
        p = put_bulk_i(p, it->cost);
        p = put_bulk_i(p, it->sgroup);
        p = put_bulk_i(p, it->sflags);
        for (int j = 0; j < 4; j++) p = put_bulk_i(p, it->p[j]);
        char xb[SL_REDIS_X_MAX]; /* capacity protection's extras ("" for a plain item) */
        size_t xl = it->lim != NULL ? sl_redis_cap_x(&it->lim->lim, &it->cx, xb, sizeof(xb)) : 0;
        p = put_bulk(p, xb, xl);
    }
    static const char *const asking_argv[1] = {"ASKING"};
    static const size_t asking_len[1] = {6};
    if (asking && sl_rconn_command(nd->c, NULL, NULL, 1, asking_argv, asking_len) != 0) return false;
    if (sl_rconn_send(nd->c, r->cmd, (size_t)(p - r->cmd), on_group_reply, priv_of(r, q, g)) != 0) return false;
    gr->sent = true;
    inc(&r->st.calls);
    return true;
}

/* The compiled parameters an item decides with (its limit override applied). */
static sl_limit item_limit(const rq_item *it) {
    sl_limit l = it->lim->lim;
    if (it->limit != 0) l.limit = l.capacity = it->limit;
    if (it->par) { /* a per-key override (src/store/redis/override.c): other numbers, same state */
        l.limit = it->par_limit, l.capacity = it->par_capacity, l.period_ns = it->par_period;
        l.max_delay_ns = it->par_delay, l.lease_ns = it->par_lease;
        l.quota_period = (sluice_period)it->par_qp, l.emission_ns = it->par_emission;
    }
    return l;
}

static bool key_same(const void *ctx, size_t a, size_t b) {
    const rq_item *const *x = ctx;
    return x[a]->lim == x[b]->lim && x[a]->klen == x[b]->klen &&
           memcmp(x[a]->key, x[b]->key, x[a]->klen) == 0;
}

/*
 * A decision's call: the script applied store/group.h's rules to the states it read and
 * returned them ("before"); the same rules run here over those states, so the results are
 * exactly the memory store's. For a decision spread over several calls (cluster slots),
 * the same states also give `alt`: the items as they stand should another call reject.
 */
static bool decode_decide(sl_redis *r, rq *q, int g, const redisReply *rep, sluice_time now) {
    rq_group *gr = &q->g[g];
    const rq_item *its[SLUICE_MAX_ITEMS];
    sl_sitem si[SLUICE_MAX_ITEMS];
    const sl_limit *lims[SLUICE_MAX_ITEMS];
    sl_limit ovr[SLUICE_MAX_ITEMS]; /* items with a limit override */
    for (int k = 0; k < gr->n; k++) {
        const rq_item *it = &q->it[gr->idx[k]];
        its[k] = it;
        si[k] = (sl_sitem){.lim = it->lim, .cost = (uint64_t)it->cost, .limit = it->limit,
                           .group = it->sgroup, .flags = it->sflags, .cls = it->cx.cls, .cap = it->cx.cap,
                           .pgrp = it->cx.pgrp, .bpath = it->cx.bpath, .blevel = it->cx.blevel,
                           .share = it->cx.share};
        if (it->limit != 0 || it->par) {
            ovr[k] = item_limit(it);
            lims[k] = &ovr[k];
        } else {
            lims[k] = &it->lim->lim;
        }
    }
    uint8_t kidx[SLUICE_MAX_ITEMS];
    size_t nk = sl_group_keys(gr->n, key_same, its, kidx);
    /* scratch: states as stored (per key) and per item, small inline, sliding logs from
     * the client's arenas (beyond what the config allows per decision: an error, as in
     * the memory store) */
    uint64_t small_st[SLUICE_MAX_ITEMS][SMALL_STATE / 8], small_w[SLUICE_MAX_ITEMS + 1][SMALL_STATE / 8];
    const void *stored[SLUICE_MAX_ITEMS];
    void *work[SLUICE_MAX_ITEMS];
    void *peek = small_w[SLUICE_MAX_ITEMS];
    size_t used0 = 0, used1 = 0;
    uint32_t peek_size = 0;
    bool seen[SLUICE_MAX_ITEMS] = {false};
    for (int k = 0; k < gr->n; k++) {
        size_t ss = lims[k]->state_size;
        if (ss > peek_size) peek_size = (uint32_t)ss;
        size_t a8 = (ss + 7) & ~(size_t)7;
        if (ss <= SMALL_STATE) {
            work[k] = small_w[k];
        } else {
            if (a8 > BIG_ARENA - used1) return false;
            work[k] = r->big[1] + used1;
            used1 += a8;
        }
        unsigned key = kidx[k];
        if (seen[key]) continue;
        seen[key] = true;
        const redisReply *b = rep->element[3 + gr->n + k];
        if (b->type != REDIS_REPLY_STRING) return false;
        void *dst;
        if (ss <= SMALL_STATE) {
            dst = small_st[key];
        } else {
            if (a8 > BIG_ARENA - used0) return false;
            dst = r->big[0] + used0;
            used0 += a8;
        }
        int pr = its[k]->xlen
                     ? sl_redis_envoy_state_parse(b->str, b->len,
                                                  sl_window_start(now.wall_ns, lims[k]->period_ns), dst)
                     : sl_redis_state_parse(its[k]->lim, b->str, b->len, dst);
        if (pr < 0) return false;
        if (pr == 1 && !its[k]->xlen) sl_redis_state_unstep(its[k]->lim, dst, now.mono_ns);
        stored[key] = pr == 1 ? dst : NULL;
    }
    if (peek_size > SMALL_STATE) {
        size_t a8 = ((size_t)peek_size + 7) & ~(size_t)7;
        if (a8 > sizeof(r->big[1]) - used1) return false;
        peek = r->big[1] + used1;
        used1 += a8;
    }
    sl_sresult *res = &r->group_scratch;
    sl_group_run run = {.items = si, .lims = lims, .n = gr->n, .flags = q->flags, .kidx = kidx,
                        .nkeys = nk, .stored = stored, .work = work, .peek = peek, .now = now,
                        .res = res};
    sl_group_decide(&run);
    gr->all_ok = res->allowed != 0;
    gr->groups_ok = res->groups_ok;
    if ((rep->element[0]->integer == 1) != gr->all_ok) inc(&r->st.mismatches);
    for (int k = 0; k < gr->n; k++) {
        q->res.r[gr->idx[k]] = res->r[k];
        q->res.x[gr->idx[k]] = res->x[k];
    }
    if (q->ngroups > 1 && gr->all_ok) {
        /* what these items report if another call rejects (their refunds undo them) */
        sl_group_run alt = run;
        alt.flags |= SL_SREQ_REJECT;
        sl_group_decide(&alt);
        for (int k = 0; k < gr->n; k++) {
            q->alt.r[gr->idx[k]] = res->r[k];
            q->alt.x[gr->idx[k]] = res->x[k];
        }
    }
    return true;
}

/* Computes the results of group g from the states the script saw, with the C algorithms
 * (so they are exactly the memory store's), chaining repeated keys. */
static bool decode_group(sl_redis *r, rq *q, int g, const redisReply *rep) {
    rq_group *gr = &q->g[g];
    size_t need = 3 + 2 * (size_t)gr->n;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != need) return false;
    for (size_t i = 0; i < 3 + (size_t)gr->n; i++)
        if (rep->element[i]->type != REDIS_REPLY_INTEGER) return false;
    int64_t ts = rep->element[1]->integer, tn = rep->element[2]->integer;
    sluice_time now = q->now;
    if (r->o.time_mode == SL_REDIS_TIME_SERVER) {
        now.mono_ns = now.wall_ns = ts * SLUICE_NS_PER_S + tn;
        q->rnow = now;
        q->got_time = true;
    }
    gr->all_ok = rep->element[0]->integer == 1;
    if (q->op == 'c') { /* a claim: no state, no limiter */
        memset(&q->res.r[0], 0, sizeof(q->res.r[0]));
        q->res.r[0].allowed = gr->all_ok;
        return true;
    }
    if (q->op == 'd') return decode_decide(r, q, g, rep, now);
    /* settle, release, reset: one operation per item, chaining repeated keys */
    uint64_t small_src[SLUICE_MAX_ITEMS][SMALL_STATE / 8], small_dst[SLUICE_MAX_ITEMS][SMALL_STATE / 8];
    void *srcp[SLUICE_MAX_ITEMS], *dstp[SLUICE_MAX_ITEMS];
    bool has[SLUICE_MAX_ITEMS], changed[SLUICE_MAX_ITEMS];
    size_t used = 0;
    for (int k = 0; k < gr->n; k++) {
        size_t ss = q->it[gr->idx[k]].lim->lim.state_size;
        if (ss <= SMALL_STATE) {
            srcp[k] = small_src[k], dstp[k] = small_dst[k];
            continue;
        }
        ss = (ss + 7) & ~(size_t)7;
        if (ss > BIG_ARENA - used) return false;
        srcp[k] = r->big[0] + used, dstp[k] = r->big[1] + used;
        used += ss;
    }
    for (int k = 0; k < gr->n; k++) {
        int i = gr->idx[k];
        rq_item *it = &q->it[i];
        const sl_limit lx = item_limit(it); /* an override's numbers, when it has some */
        const sl_limit *l = &lx;
        size_t ss = l->state_size;
        const redisReply *b = rep->element[3 + gr->n + k];
        int pk = -1;
        for (int j = k - 1; j >= 0; j--)
            if (q->it[gr->idx[j]].klen == it->klen && memcmp(q->it[gr->idx[j]].key, it->key, it->klen) == 0) {
                pk = j;
                break;
            }
        if (pk >= 0) {
            has[k] = has[pk] || changed[pk];
            if (srcp[k] != srcp[pk]) memcpy(srcp[k], changed[pk] ? dstp[pk] : srcp[pk], ss);
            else if (changed[pk]) memcpy(srcp[k], dstp[pk], ss);
        } else {
            if (b->type != REDIS_REPLY_STRING) return false;
            int pr = it->xlen ? sl_redis_envoy_state_parse(b->str, b->len,
                                                           sl_window_start(now.wall_ns, l->period_ns), srcp[k])
                              : sl_redis_state_parse(it->lim, b->str, b->len, srcp[k]);
            if (pr < 0) return false;
            if (pr == 1 && !it->xlen) sl_redis_state_unstep(it->lim, srcp[k], now.mono_ns);
            has[k] = pr == 1;
        }
        sl_result res;
        bool script_ok = rep->element[3 + k]->integer == 1;
        if (q->op == 's') {
            sl_algo_settle(l, has[k] ? srcp[k] : NULL, dstp[k], now, it->cost, &res);
            changed[k] = true;
        } else {
            memset(&res, 0, sizeof(res));
            res.allowed = script_ok;
            changed[k] = false;
        }
        sluice_result *o = &q->res.r[i];
        q->res.x[i].kind = 0;
        o->allowed = res.allowed ? 1 : 0;
        o->limit = res.limit;
        o->remaining = res.remaining;
        o->reset_after_ns = res.reset_after_ns;
        o->retry_after_ns = res.retry_after_ns;
        o->delay_ns = res.delay_ns;
        o->lease = res.lease;
    }
    return true;
}


/* Every group answered (or the request failed): refund what must be, answer, recycle. */

void sl__redis_finish(sl_redis *r, rq *q, int rc) {
    if (q->op == 'd') {
        bool all = !q->failed;
        uint32_t groups_ok = 0;
        for (int g = 0; g < q->ngroups; g++) {
            if (!q->g[g].all_ok) all = false;
            groups_ok |= q->g[g].groups_ok;
        }
        /* a slice that did not fit: refund what the groups took, decide what was asked */
        if (!all && !q->failed && q->leasing && sl__redis_lease_retry(r, q)) return;
        if (!all && q->ngroups > 1) {
            /* calls that admitted while another rejected (or failed) are undone; their
             * items report the state the refund leaves */
            sl__redis_send_refunds(r, q);
            for (int g = 0; g < q->ngroups && !q->failed; g++)
                if (q->g[g].done && !q->g[g].failed && q->g[g].all_ok)
                    for (int k = 0; k < q->g[g].n; k++) {
                        q->res.r[q->g[g].idx[k]] = q->alt.r[q->g[g].idx[k]];
                        q->res.x[q->g[g].idx[k]] = q->alt.x[q->g[g].idx[k]];
                    }
        }
        if (q->leasing) sl__redis_lease_settle(r, q, all);
        if (!q->failed) sl__redis_local_seen(r, q);
        if (!q->failed) {
            q->res.allowed = all ? 1 : 0;
            q->res.groups_ok = all ? groups_ok : groups_ok; /* reported either way */
            q->res.n = q->n;
            sluice_time t = q->now;
            for (int i = 0; i < q->n; i++)
                if (q->it[i].lease != LEASE_LOCAL && q->it[i].sgroup == 0)
                    cache_put(r, &q->it[i], &q->res.r[i], t);
        }
    }
    if (q->op != 'd') { /* settle, release, reset, claim: whether every call applied */
        bool all = !q->failed;
        for (int g = 0; g < q->ngroups; g++)
            if (!q->g[g].all_ok) all = false;
        q->res.allowed = all ? 1 : 0;
    }
    sl_redis_cb cb = q->cb;
    void *ud = q->ud;
    const sl_sresult *d = &q->res;
    if (q->failed && rc == SLUICE_OK) rc = SLUICE_ESTORE;
    /* on_store_error: local: Redis could not decide; this instance does, at its share */
    static __thread sl_sresult lres;
    if (rc != SLUICE_OK && q->op == 'd' && cb != NULL && sl__redis_local_decide(r, q, &lres)) {
        rc = SLUICE_OK;
        d = &lres;
    }
    q->res.n = q->n;
    /* the callback may start new decisions: keep q out of the free list until it returns */
    sl_dnode_disarm(&q->dl);
    if (cb) cb(ud, rc, rc == SLUICE_OK ? d : NULL);
    if (q->orphans > 0) { /* answered; what is still in flight may yet be applied */
        q->cb = NULL;
        sl_dlist_arm(&r->orphans, &q->dl, mono_now());
        sl__redis_arm(r, q->dl.deadline_ns);
        return;
    }
    sl__redis_rq_put(r, q);
}

void sl__redis_group_fail(sl_redis *r, rq *q, int g) {
    rq_group *gr = &q->g[g];
    if (gr->done) return;
    gr->done = gr->failed = true;
    q->failed = true;
    if (--q->pending == 0) sl__redis_finish(r, q, SLUICE_ESTORE);
}

/* Sends group g again after a pause that doubles with each try, if the decision's
 * deadline leaves room for it (the timer sends it: see send_retries). */
static bool retry_later(sl_redis *r, rq *q, int g) {
    rq_group *gr = &q->g[g];
    if (++gr->redirects > MAX_RETRIES || r->nretries >= RETRY_SLOTS) return false;
    int shift = gr->redirects - 1 > 5 ? 5 : gr->redirects - 1;
    int64_t at = mono_now() + (RETRY_MIN_NS << shift);
    if (q->dl.list < 0 || at + RETRY_MIN_NS >= q->dl.deadline_ns) return false;
    r->retries[r->nretries++] = (retry_ent){q, q->gen, (uint8_t)g, at};
    sl__redis_arm(r, at);
    return true;
}

static bool starts(const redisReply *rep, const char *s) {
    size_t n = strlen(s);
    return rep->len >= n && memcmp(rep->str, s, n) == 0;
}

static void on_group_reply(void *owner, redisReply *rep, void *priv) {
    sl_redis_node *nd = owner;
    sl_redis *r = nd->r;
    int g;
    rq *q = rq_of(r, priv, &g);
    if (q != NULL && g < q->ngroups && q->g[g].late) {
        late_reply(r, q, g, rep);
        return;
    }
    if (q == NULL || g >= q->ngroups || q->g[g].done) return; /* timed out already */
    rq_group *gr = &q->g[g];
    if (rep == NULL) { /* connection lost */
        inc(&r->st.errors);
        sl__redis_note_fail(r, nd);
        sl__redis_group_fail(r, q, g);
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        unsigned slot;
        char host[SL_REDIS_HOST_MAX];
        int port;
        int kind = sl_redis_parse_redirect(rep->str, rep->len, &slot, host, sizeof(host), &port);
        if (kind != 0 && ++gr->redirects <= MAX_REDIRECTS) {
            int idx = sl__redis_node_find(r, host[0] ? host : nd->host, port, true);
            if (idx >= 0) {
                if (kind == 1) {
                    inc(&r->st.moved);
                    r->slotmap[slot] = (uint8_t)idx;
                    sl__redis_refresh_topology(r, false);
                } else {
                    inc(&r->st.ask);
                }
                if (sl__redis_send_group(r, q, g, &r->nodes[idx], kind == 2)) return;
            }
        } else if (rep->len >= 8 && memcmp(rep->str, "NOSCRIPT", 8) == 0 && ++gr->redirects <= MAX_REDIRECTS) {
            inc(&r->st.noscript);
            sl__redis_queue_script_load(nd);
            if (sl__redis_send_group(r, q, g, nd, false)) return;
        } else if (gr->fcall &&
                   (starts(rep, "ERR Function not found") || starts(rep, "ERR unknown command") ||
                    (starts(rep, "NOPERM") && !nd->fcall)) && /* an ACL denying FUNCTION and FCALL */
                   ++gr->redirects <= MAX_REDIRECTS) {
            /* nothing ran: the library is not there (FUNCTION FLUSH or DELETE under a live
             * connection; or no FUNCTION at all, its load failed: node.c). This call goes
             * again as EVALSHA (SCRIPT LOAD queued first, once); after a flush the library
             * is loaded again and FCALL resumes when its reply is in. */
            inc(&r->st.noscript);
            if (nd->fcall) {
                nd->fcall = false;
                sl__redis_queue_script_load(nd);
                if (nd->fn_ok) sl__redis_queue_function_load(nd);
            }
            if (sl__redis_send_group(r, q, g, nd, false)) return;
        } else if (starts(rep, "TRYAGAIN") || starts(rep, "CLUSTERDOWN")) {
            /* nothing was applied; the cluster is moving slots or electing: try again
             * shortly, and if time runs out fail without counting toward the breaker */
            inc(starts(rep, "TRYAGAIN") ? &r->st.tryagain : &r->st.clusterdown);
            if (starts(rep, "CLUSTERDOWN")) sl__redis_refresh_topology(r, false);
            if (retry_later(r, q, g)) return;
            snprintf(r->last_error, sizeof(r->last_error), "%.120s", rep->str);
            inc(&r->st.errors);
            sl__redis_group_fail(r, q, g);
            return;
        } else if (r->sen != NULL && (starts(rep, "READONLY") || starts(rep, "MASTERDOWN"))) {
            /* behind sentinels: this node is a replica now; find the primary (nothing
             * was written: the script's first write was refused) */
            sl_sentinel_refresh(r->sen);
        } else if (starts(rep, "NOAUTH") || starts(rep, "NOPERM") || starts(rep, "WRONGPASS")) {
            /* credentials changed under a live connection (ACL edited, password rotated) */
            char msg[200];
            snprintf(msg, sizeof(msg), "%.180s", rep->str);
            if (nd->c != NULL) sl_rconn_fail(nd->c, SL_CONN_EAUTH, msg);
        }
        snprintf(r->last_error, sizeof(r->last_error), "%.120s", rep->str);
        inc(&r->st.errors);
        sl__redis_note_fail(r, nd);
        sl__redis_group_fail(r, q, g);
        return;
    }
    if (!decode_group(r, q, g, rep)) {
        snprintf(r->last_error, sizeof(r->last_error), "unexpected script reply");
        inc(&r->st.errors);
        sl__redis_note_fail(r, nd);
        sl__redis_group_fail(r, q, g);
        return;
    }
    sl__redis_note_ok(r, nd);
    gr->done = true;
    if (--q->pending == 0) sl__redis_finish(r, q, SLUICE_OK);
}

/* Issues every group of q; a group whose node is down fails at once (no waiting). */
void sl__redis_launch(sl_redis *r, rq *q) {
    q->pending = q->ngroups;
    sl_dlist_arm(&r->deadlines, &q->dl, mono_now());
    sl__redis_arm(r, q->dl.deadline_ns);
    int ng = q->ngroups;
    for (int g = 0; g < ng; g++) {
        if (!q->busy) return; /* finished inside the loop (all failed) */
        sl_redis_node *nd = sl__redis_route(r, q->g[g].slot);
        q->g[g].node = -1;
        /* a node whose breaker is open refuses at once; a connecting node queues the call
         * (bounded by the deadline); a down one fails at once. Neither counts toward a
         * breaker: nothing was waited for. Each refused decision is counted once. */
        if (q->cb != NULL && !sl__redis_breaker_allows(r, nd)) { /* refunds and returns nobody waits for go anyway */
            if (!q->refused) inc(&r->st.breaker_open);
            q->refused = true;
            sl__redis_group_fail(r, q, g);
        } else if (nd->state == 0 || !sl__redis_send_group(r, q, g, nd, false)) {
            if (!q->refused) inc(&r->st.node_down);
            q->refused = true;
            sl__redis_group_fail(r, q, g);
        }
    }
}

/* An envoy compat item: upstream's key for the window `now` is in (the instance's clock,
 * as upstream reads its own), a plain integer counter living one unit plus a jitter. */
static int envoy_item(sl_redis *r, rq *q, rq_item *it, const sl_sitem *in, const sl_limit *l,
                      sluice_time now) {
    int64_t per_s = l->period_ns / SLUICE_NS_PER_S;
    if (per_s <= 0) return SLUICE_EINVAL;
    int64_t win = sl_window_start(now.wall_ns, per_s * SLUICE_NS_PER_S) / SLUICE_NS_PER_S;
    char *out = q->xk + q->xk_used;
    size_t n = sl_redis_envoy_key(r->o.envoy_prefix, in->key, in->key_len, win, out,
                                  XKEY_ARENA - q->xk_used);
    if (n == 0 || n > SL_REDIS_ENVOY_KEY_MAX) return SLUICE_ERANGE;
    it->xoff = (uint16_t)q->xk_used;
    it->xlen = (uint16_t)n;
    q->xk_used += n;
    /* the item's identity (repeats, caches) is a hash of the whole name */
    it->klen = (uint8_t)sl_redis_key(&r->sk, it->lim, out, n, it->key);
    it->slot = (uint16_t)sl_redis_keyslot(out, n);
    int64_t ttl = per_s;
    if (r->o.envoy_jitter_s > 0) {
        uint64_t x = r->jitter_rng;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        r->jitter_rng = x;
        ttl += (int64_t)(x % (uint64_t)r->o.envoy_jitter_s);
    }
    it->p[0] = (int64_t)l->limit;
    it->p[1] = ttl * 1000; /* ms */
    it->p[2] = it->p[3] = 0;
    it->lease = LEASE_NONE;
    it->want = it->cost;
    return SLUICE_OK;
}

static int build(sl_redis *r, rq *q, const sl_sitem *items, size_t n, unsigned flags, sluice_time now) {
    q->n = (uint8_t)n;
    q->xk_used = 0;
    q->ngroups = 0;
    q->now = now;
    q->flags = flags;
    q->res.n = n;
    q->res.allowed = 1;
    q->res.groups_ok = 0;
    for (size_t i = 0; i < n; i++) {
        rq_item *it = &q->it[i];
        if (items[i].lim == NULL || (items[i].key == NULL && items[i].key_len > 0)) return SLUICE_EINVAL;
        if (items[i].cost > (uint64_t)EXACT_COST_MAX) return SLUICE_ERANGE;
        if (items[i].limit != 0 && items[i].lim->spec.algo != SLUICE_FIXED_WINDOW) return SLUICE_EINVAL;
        it->lim = items[i].lim;
        it->cost = (int64_t)items[i].cost;
        it->limit = items[i].limit;
        it->par = items[i].params != NULL;
        if (it->par) {
            const sl_limit *pl = items[i].params;
            it->par_limit = pl->limit, it->par_capacity = pl->capacity, it->par_period = pl->period_ns;
            it->par_delay = pl->max_delay_ns, it->par_lease = pl->lease_ns;
            it->par_qp = (uint32_t)pl->quota_period, it->par_emission = pl->emission_ns;
        }
        it->sgroup = items[i].group;
        it->sflags = items[i].flags;
        it->cx = (sl_redis_capx){.cls = items[i].cls, .cap = items[i].cap, .pgrp = items[i].pgrp,
                                 .bpath = items[i].bpath, .blevel = items[i].blevel,
                                 .outcome = items[i].outcome, .share = items[i].share,
                                 .latency_ns = items[i].latency_ns};
        sl_limit l = item_limit(it);
        int rc = sl_redis_params_of(&l, now, it->p);
        if (rc != SLUICE_OK) return rc;
        it->xoff = it->xlen = 0;
        if (r->o.envoy_keys && q->xk != NULL && items[i].key_len > 1 &&
            ((const unsigned char *)items[i].key)[0] == SL_REDIS_ENVOY_TAG &&
            it->lim->spec.algo == SLUICE_FIXED_WINDOW) {
            rc = envoy_item(r, q, it, &items[i], &l, now);
            if (rc != SLUICE_OK) return rc;
            continue;
        }
        it->klen = (uint8_t)sl_redis_key(&r->sk, it->lim, items[i].key != NULL ? items[i].key : "",
                                         items[i].key_len, it->key);
        it->slot = (uint16_t)sl_redis_keyslot(it->key, it->klen);
        it->lease = LEASE_NONE;
        it->want = it->cost;
    }
    sl__redis_regroup(r, q);
    return SLUICE_OK;
}

/* One group per cluster slot over the items that go to Redis (not those served from a
 * held slice), in item order. A single node has no slots to respect: one group, one
 * call, every limit of the decision in one atomic script. */
void sl__redis_regroup(const sl_redis *r, rq *q) {
    q->ngroups = 0;
    for (int i = 0; i < q->n; i++) {
        rq_item *it = &q->it[i];
        if (it->lease == LEASE_LOCAL) {
            it->group = -1;
            continue;
        }
        int g = -1;
        for (int k = 0; k < q->ngroups; k++)
            if (q->g[k].slot == it->slot || !(r->o.cluster || r->o.per_slot)) g = k;
        if (g < 0) {
            g = q->ngroups++;
            memset(&q->g[g], 0, sizeof(q->g[g]));
            q->g[g].slot = it->slot;
        }
        it->group = (int8_t)g;
        q->g[g].idx[q->g[g].n++] = (uint8_t)i;
    }
}


/* Gives back what call g of q applied to the items whose bit (position in the call) is
 * in `mask` (a settle of -cost each), fire and forget. */
static void refund_group(sl_redis *r, rq *q, int g, uint32_t mask) {
    rq_group *gr = &q->g[g];
    rq *f = sl__redis_rq_get(r);
    if (f == NULL) return;
    f->op = 's';
    f->cb = NULL;
    f->n = 0;
    f->xk_used = 0;
    f->ngroups = 1;
    f->now = q->got_time ? q->rnow : q->now;
    memset(&f->g[0], 0, sizeof(f->g[0]));
    f->g[0].slot = gr->slot;
    for (int k = 0; k < gr->n; k++) {
        rq_item *it = &q->it[gr->idx[k]];
        if (it->cost == 0 || !(mask >> k & 1u)) continue;
        f->it[f->n] = *it;
        if (it->xlen) { /* an envoy compat counter: its name moves to f's arena */
            if (f->xk == NULL || f->xk_used + it->xlen > XKEY_ARENA) continue;
            memcpy(f->xk + f->xk_used, q->xk + it->xoff, it->xlen);
            f->it[f->n].xoff = (uint16_t)f->xk_used;
            f->xk_used += it->xlen;
        }
        f->it[f->n].cost = -it->cost;
        f->it[f->n].limit = 0;
        f->it[f->n].sgroup = 0;
        f->it[f->n].sflags = 0;
        f->it[f->n].cx = (sl_redis_capx){0};
        f->g[0].idx[f->g[0].n++] = f->n;
        f->n++;
    }
    f->res.n = f->n;
    if (f->n == 0) {
        sl__redis_rq_put(r, f);
        return;
    }
    rq_hold(f);
    sl__redis_launch(r, f);
}

/* The items of call g that an admitting call consumed: group 0 and the shadow groups
 * that committed with it; `charges` whether count_rejected charges count too. */
static uint32_t consumed_mask(const rq *q, int g, uint32_t groups_ok, bool charges) {
    const rq_group *gr = &q->g[g];
    uint32_t m = 0;
    for (int k = 0; k < gr->n; k++) {
        const rq_item *it = &q->it[gr->idx[k]];
        bool took = it->sgroup == 0 ? (charges || !(it->sflags & SL_SI_CHARGE))
                                    : (groups_ok >> it->sgroup & 1u) != 0;
        if (took) m |= 1u << k;
    }
    return m;
}

/* A decision over several calls that one of them rejected (or failed): the calls that
 * admitted are undone, but for what count_rejected charges (the attempt counts). */
void sl__redis_send_refunds(sl_redis *r, rq *q) {
    for (int g = 0; g < q->ngroups; g++) {
        rq_group *gr = &q->g[g];
        if (!gr->done || gr->failed || !gr->all_ok) continue;
        inc(&r->st.refunds);
        refund_group(r, q, g, consumed_mask(q, g, gr->groups_ok, false));
    }
}

/* The reply of a call whose decision timed out: the caller was answered as if nothing
 * had been applied (its failure mode), so what the script did apply is given back: an
 * admission's items (and its shadow groups that committed), or a rejection's charges.
 * A lost connection leaves the outcome unknown (counted). */
static void late_reply(sl_redis *r, rq *q, int g, const redisReply *rep) {
    rq_group *gr = &q->g[g];
    gr->late = false;
    if (rep == NULL) {
        inc(&r->st.late_unknown);
    } else if (q->op == 'd' && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 + 2 * (size_t)gr->n &&
               rep->element[0]->type == REDIS_REPLY_INTEGER) {
        bool all = rep->element[0]->integer == 1;
        uint32_t mask = 0;
        if (all) {
            /* a shadow group committed when each of its items was admitted */
            uint32_t bad = 0;
            for (int k = 0; k < gr->n; k++) {
                const redisReply *ok = rep->element[3 + k];
                if (ok->type != REDIS_REPLY_INTEGER || ok->integer != 1) bad |= 1u << q->it[gr->idx[k]].sgroup;
            }
            mask = consumed_mask(q, g, ~bad, true);
        } else {
            for (int k = 0; k < gr->n; k++) {
                const rq_item *it = &q->it[gr->idx[k]];
                if (it->sgroup == 0 && (it->sflags & SL_SI_CHARGE)) mask |= 1u << k;
            }
        }
        if (mask != 0) {
            inc(&r->st.late_refunds);
            refund_group(r, q, g, mask);
        }
    }
    if (--q->orphans == 0) sl__redis_rq_put(r, q);
}

/* A decision certain to be rejected, answered without Redis: an enforced item still
 * inside the retry time of an earlier rejection of at most this cost (trusted for at most
 * cache_max_ns). A cost above the item's capacity goes to the script like any other: its
 * answer says what is left, as the memory store's does (answered here it said 0;
 * issue 27), and it is refused there without a change. `b` holds the items
 * as build() prepared them. Trade-off: a rejection answered here charges no
 * count_rejected window (a fixed window or quota already over its limit stays so until
 * it ends: what a client is told does not change). */
static bool answer_locally(sl_redis *r, const rq *b, sluice_time now, sl_sresult *d) {
    int hit = -1;
    int64_t retry = 0, reset = 0;
    if (r->cache == NULL) return false;
    /* capacity protection decides in Redis: a penalty records its violation there, a
     * class's or a tier's refusal is no exhausted key */
    for (int i = 0; i < b->n; i++)
        if (capacity(&b->it[i])) return false;
    for (int i = 0; i < b->n && hit < 0; i++) {
        const rq_item *it = &b->it[i];
        if (it->sgroup != 0) continue;
        if (!cacheable(it->lim->spec.algo) || it->limit != 0 || it->par) continue;
        cache_ent *e = cache_get(r, sl__redis_fp_of(it));
        if (e != NULL && now.mono_ns >= e->since && now.mono_ns < e->trust &&
            (uint64_t)it->cost >= e->min_cost && it->cost > 0) {
            hit = i, retry = e->until - now.mono_ns;
            reset = e->reset_at > now.mono_ns ? e->reset_at - now.mono_ns : 0;
            inc(&r->st.local_rejects);
        }
    }
    if (hit < 0) return false;
    /* Only the rejecting item is known; the others are reported at their capacity
     * (their state was not read: nothing was consumed anywhere). */
    d->n = b->n;
    d->allowed = 0;
    d->groups_ok = 0;
    for (int i = 0; i < b->n; i++) {
        sluice_result *o = &d->r[i];
        memset(o, 0, sizeof(*o));
        o->limit = b->it[i].limit != 0 ? b->it[i].limit
                   : b->it[i].par ? b->it[i].par_capacity : sluice_limiter_capacity(b->it[i].lim);
        o->allowed = i != hit;
        o->remaining = i != hit ? o->limit : 0;
    }
    d->r[hit].retry_after_ns = retry;
    d->r[hit].reset_after_ns = reset;
    return true;
}

/* A pooled request for a call of `op`, or NULL when max_pending calls are in flight:
 * then the callback has already been told (SLUICE_ESTORE) and the degraded call counted.
 * (Breakers are per node: sl__redis_launch() applies them.) */
static rq *rq_start(sl_redis *r, char op, sl_redis_cb cb, void *ud) {
    rq *q = sl__redis_rq_get(r);
    if (q == NULL) {
        inc(&r->st.pool_full);
        if (cb) cb(ud, SLUICE_ESTORE, NULL);
        return NULL;
    }
    q->op = op;
    q->cb = cb;
    q->ud = ud;
    return q;
}

/* Copies what build() prepared in the scratch request into a pooled one. */
static void rq_take_built(rq *q, const rq *b) {
    q->n = b->n;
    q->ngroups = b->ngroups;
    q->now = b->now;
    q->flags = b->flags;
    q->res.n = b->res.n;
    q->res.allowed = b->res.allowed;
    q->res.groups_ok = 0;
    memcpy(q->it, b->it, b->n * sizeof(b->it[0]));
    memcpy(q->g, b->g, b->ngroups * sizeof(b->g[0]));
    q->xk_used = b->xk_used;
    if (b->xk_used > 0) memcpy(q->xk, b->xk, b->xk_used);
    rq_hold(q);
}

static int submit(sl_redis *r, char op, const sl_sitem *items, size_t n, unsigned flags,
                  sluice_time now, sl_redis_cb cb, void *ud, uint64_t lease) {
    if (r == NULL || (items == NULL && n > 0)) return SLUICE_EINVAL;
    if (n > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    /* the items are prepared once (keys hashed, parameters, slots), in the scratch
     * request, so that a local answer needs no pooled request */
    rq *b = &r->scratch;
    int rc = build(r, b, items, n, flags, now);
    if (rc != SLUICE_OK) return rc;
    if (op == 'd') {
        inc(&r->st.decisions);
        sl__redis_local_count(r, b);
        static __thread sl_sresult local;
        if (answer_locally(r, b, now, &local)) {
            if (cb) cb(ud, SLUICE_OK, &local);
            return SLUICE_OK;
        }
    }
    rq *q = rq_start(r, op, cb, ud);
    if (q == NULL) return SLUICE_OK;
    rq_take_built(q, b);
    if (op == 'd' && sl__redis_lease_plan(r, q)) {
        /* every item spent from a held slice: admitted here, no round trip */
        sl__redis_lease_settle(r, q, true);
        sl_sresult *d = &r->lease_scratch;
        memcpy(d->r, q->res.r, n * sizeof(d->r[0]));
        d->n = n;
        d->allowed = 1;
        d->groups_ok = 0;
        sl__redis_rq_put(r, q);
        if (cb) cb(ud, SLUICE_OK, d);
        return SLUICE_OK;
    }
    if (op == 'l') {
        /* release: cost = the lease's bucket number (mod 2^40), p[3] = its slots */
        q->it[0].cost = (int64_t)(lease >> 24);
        q->it[0].p[3] = (int64_t)(lease & 0xFFFFFF);
    }
    if (n == 0) {
        q->pending = 0;
        sl__redis_finish(r, q, SLUICE_OK);
        return SLUICE_OK;
    }
    sl__redis_launch(r, q);
    return SLUICE_OK;
}

int sl_redis_decide(sl_redis *r, const sl_sitem *items, size_t n, unsigned flags, sluice_time now,
                    sl_redis_cb cb, void *ud) {
    return submit(r, 'd', items, n, flags, now, cb, ud, 0);
}

int sl_redis_settle(sl_redis *r, const sl_sitem *item, int64_t delta, sluice_time now,
                    sl_redis_cb cb, void *ud) {
    if (delta > EXACT_COST_MAX || delta < -EXACT_COST_MAX) return SLUICE_ERANGE;
    if (r == NULL || item == NULL || item->lim == NULL) return SLUICE_EINVAL;
    sl_sitem it = *item;
    it.cost = 0; /* build() takes costs from items; the signed delta is patched in after */
    it.limit = 0;
    rq *q = rq_start(r, 's', cb, ud);
    if (q == NULL) return SLUICE_OK;
    int rc = build(r, q, &it, 1, 0, now);
    if (rc != SLUICE_OK) {
        sl__redis_rq_put(r, q);
        return rc;
    }
    rq_hold(q);
    q->it[0].cost = delta;
    if (delta < 0)
        atomic_fetch_add_explicit(&g_refund_gen[sl__redis_fp_of(&q->it[0]) & (REFUND_SLOTS - 1)], 1,
                                  memory_order_relaxed);
    sl__redis_launch(r, q);
    return SLUICE_OK;
}

int sl_redis_reset(sl_redis *r, const sl_sitem *items, size_t n, sluice_time now, sl_redis_cb cb,
                   void *ud) {
    if (r == NULL || n > SLUICE_MAX_ITEMS || (items == NULL && n > 0)) return SLUICE_EINVAL;
    atomic_fetch_add_explicit(&g_cache_epoch, 1, memory_order_relaxed);
    /* this client's slices of those keys are dropped, not given back (nothing to give
     * back to: the state is gone) */
    for (size_t i = 0; i < n; i++) {
        if (items[i].lim == NULL) return SLUICE_EINVAL;
        rq_item it;
        it.lim = items[i].lim;
        it.klen = (uint8_t)sl_redis_key(&r->sk, it.lim, items[i].key ? items[i].key : "", items[i].key_len,
                                        it.key);
        lease_ent *e = &r->leases[sl__redis_fp_of(&it) & (LEASE_SLOTS - 1)];
        if (e->fp == sl__redis_fp_of(&it) && e->lim == it.lim) {
            sl__redis_held_add(r, -(int64_t)e->left);
            sl_limiter_unref(e->lim);
            e->left = 0, e->fp = 0, e->lim = NULL;
        }
    }
    sl_sitem zero[SLUICE_MAX_ITEMS];
    for (size_t i = 0; i < n; i++) zero[i] = (sl_sitem){.lim = items[i].lim, .key = items[i].key,
                                                        .key_len = items[i].key_len};
    return submit(r, 'x', zero, n, 0, now, cb, ud, 0);
}

int sl_redis_claim(sl_redis *r, uint64_t id, unsigned op, int64_t ttl_ns, sluice_time now, sl_redis_cb cb,
                   void *ud) {
    if (r == NULL || id == 0 || ttl_ns <= 0) return SLUICE_EINVAL;
    rq *q = rq_start(r, 'c', cb, ud);
    if (q == NULL) return SLUICE_OK;
    q->n = 1;
    q->now = now;
    q->flags = 0;
    q->res.n = 1;
    q->res.allowed = 0;
    rq_item *it = &q->it[0];
    memset(it, 0, sizeof(*it));
    /* "sl:{t<id>}:<op>": its own slot; the hash tag keeps the name cluster-safe */
    static const char hex[16] = "0123456789abcdef";
    char *p = it->key;
    memcpy(p, "sl:{t", 5), p += 5;
    for (int i = 60; i >= 0; i -= 4) *p++ = hex[(id >> i) & 0xF];
    memcpy(p, "}:", 2), p += 2;
    p = sl_redis_put_u64(p, op);
    it->klen = (uint8_t)(p - it->key);
    it->slot = (uint16_t)sl_redis_keyslot(it->key, it->klen);
    int64_t ms = (ttl_ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS;
    it->cost = ms > EXACT_COST_MAX ? EXACT_COST_MAX : ms;
    it->want = it->cost;
    sl__redis_regroup(r, q);
    sl__redis_launch(r, q);
    return SLUICE_OK;
}

int sl_redis_release(sl_redis *r, const sl_sitem *item, uint64_t lease, sluice_time now,
                     sl_redis_cb cb, void *ud) {
    if (item == NULL || item->lim == NULL ||
        (item->lim->spec.algo != SLUICE_CONCURRENCY && item->lim->spec.algo != SLUICE_ADAPTIVE_CONCURRENCY))
        return SLUICE_EINVAL;
    /* an adaptive limit's sample travels with the release (the item's x argument) */
    sl_sitem it = {.lim = item->lim, .key = item->key, .key_len = item->key_len, .cap = item->cap,
                   .outcome = item->outcome, .latency_ns = item->latency_ns};
    return submit(r, 'l', &it, 1, 0, now, cb, ud, sl__conc_lease_plain(&item->lim->lim, lease));
}
