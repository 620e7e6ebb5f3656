/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity.c -- capacity protection in the engine: the windows a policy's capacity
 * sections add (one per borrowing tier below the root, one for the penalty), the items a
 * request adds to its verdict (its priority class, the tiers on its path with their
 * shares, the penalty keyed on the offender), the reaction to a penalty's challenge, and
 * what a verdict says about them (shed class, penalty, adaptive limit). The store applies
 * the rules (store/group.c); nothing here allocates on the decision path: keys are
 * composed into the verdict, like the policy's own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

/* ---- windows ---------------------------------------------------------------------------- */

const sl_cap *sl__cap_window(const sl_cpolicy *cp, const sl_cwindow *cw, sl_cap *buf) {
    bool any = false;
    memset(buf, 0, sizeof(*buf));
    if (cw->adapt != NULL) {
        memcpy(&buf->adapt, cw->adapt, sizeof(buf->adapt));
        any = true;
    }
    if (cp->cap != NULL && cp->cap->classes) {
        memcpy(&buf->shed, &cp->cap->shed, sizeof(buf->shed));
        any = true;
    }
    if (cp->cap != NULL && cp->cap->borrow) {
        buf->tail = SL_TAIL_MARKS;
        buf->reclaim_ns = cp->cap->reclaim_ns;
        any = true;
    }
    return any ? buf : NULL;
}

typedef struct cap_names {
    char label[128];
    char limname[256];
} cap_names;

/*
 * A tier's window counts like the root's (its algorithm and period) up to the tier's cap,
 * under its own identity "POLICY#TIER" (a reload keeps its counters); the penalty's is
 * "POLICY#penalty". '#' never appears in a policy name, so no identity collides.
 */
int sl__cap_windows(sl_engine *e, sl__epol *ep, char *errbuf, size_t errlen) {
    const sl_cpolicy *cp = ep->cp;
    const sl_ccap *cc = cp->cap;
    size_t n = (cc->borrow ? cc->n_tiers : 0) + (cc->penalty ? 1 : 0);
    if (n == 0) return SLUICE_OK;
    ep->cap_win = calloc(n, sizeof(*ep->cap_win));
    ep->cap_cw = calloc(n, sizeof(*ep->cap_cw));
    cap_names *names = calloc(n, sizeof(*names));
    if (ep->cap_win == NULL || ep->cap_cw == NULL || names == NULL) {
        free(names);
        return SLUICE_ENOMEM;
    }
    ep->cap_names = names;
    size_t k = 0;
    for (size_t j = 0; cc->borrow && j < cc->n_tiers; j++, k++) {
        const sl_ctier *t = &cc->tiers[j];
        sl_cwindow *cw = &ep->cap_cw[k];
        cw->spec = cp->win[0].spec;
        cw->spec.limit = t->cap;
        cw->spec.index = 0;
        cw->line = t->line;
        cw->col = t->col;
        snprintf(names[k].label, sizeof(names[k].label), "%s.%s", cp->name, t->name);
        snprintf(names[k].limname, sizeof(names[k].limname), "%s#%s", cp->name, t->name);
        cw->label = names[k].label;
        cw->named = true;
        sl_cap cap;
        memset(&cap, 0, sizeof(cap));
        cap.tail = SL_TAIL_MARKS;
        cap.reclaim_ns = cc->reclaim_ns;
        int rc = sl__make_win(e, ep, &ep->cap_win[k], cw, names[k].limname, NULL, &cap, errbuf, errlen);
        e->all[e->n_all++] = &ep->cap_win[k];
        if (rc != SLUICE_OK) return rc;
        ep->n_tier_win++;
    }
    if (cc->penalty) {
        sl_cwindow *cw = &ep->cap_cw[k];
        cw->spec.algo = SL_ALGO_PENALTY;
        cw->spec.limit = 1;
        snprintf(names[k].label, sizeof(names[k].label), "%s.penalty", cp->name);
        snprintf(names[k].limname, sizeof(names[k].limname), "%s#penalty", cp->name);
        cw->label = names[k].label;
        cw->named = true;
        sl_cap cap;
        memset(&cap, 0, sizeof(cap));
        cap.pen = cc->pen;
        int rc = sl__make_win(e, ep, &ep->cap_win[k], cw, names[k].limname, NULL, &cap, errbuf, errlen);
        e->all[e->n_all++] = &ep->cap_win[k];
        if (rc != SLUICE_OK) return rc;
        ep->has_pen_win = true;
    }
    return SLUICE_OK;
}

/* The limiters go with e->all (engine.c destroys every window it lists). */
void sl__cap_windows_free(sl__epol *ep) {
    free(ep->cap_names);
    ep->cap_names = NULL;
    free(ep->cap_cw);
    free(ep->cap_win);
    ep->cap_cw = NULL;
    ep->cap_win = NULL;
}

/* ---- a request's items --------------------------------------------------------------------- */

static int class_named(const sl_ccap *cc, const char *p, size_t n) {
    for (uint32_t i = 0; i < cc->shed.nclasses; i++)
        if (strlen(cc->class_names[i]) == n && memcmp(cc->class_names[i], p, n) == 0) return (int)i;
    return -1;
}

/* A request's class: its operation's, else the one its attribute names, else the policy's
 * on_missing_class (also for a name the policy does not have: a client cannot promote
 * itself by inventing a class, and an unknown one is not an error worth a 400). */
static uint8_t class_of(const sl__epol *ep, const sl__ctxreq *c, const char *name) {
    const sl_ccap *cc = ep->cp->cap;
    if (name != NULL) {
        int i = class_named(cc, name, strlen(name));
        return (uint8_t)(i >= 0 ? i : cc->missing_class);
    }
    if (c == NULL) return cc->missing_class;
    const sl_request *r = c->req;
    for (size_t i = 0; i < cc->n_prio_ops; i++) {
        const sl_cprio_op *op = &cc->prio_ops[i];
        if (op->method[0] != '*' &&
            !(r->method.p && r->method.len == strlen(op->method) && memcmp(r->method.p, op->method, r->method.len) == 0))
            continue;
        if (c->path.p != NULL && sl__glob(op->path, c->path.p, c->path.len)) return op->cls;
    }
    if (cc->prio_part_set) {
        unsigned char buf[300];
        sl__kbuf k = {buf, 0, sizeof(buf), false};
        if (sl__put_part(&k, c, ep->cp, &cc->prio_part) && !k.overflow && k.len >= 3) {
            int i = class_named(cc, (const char *)buf + 3, k.len - 3);
            if (i >= 0) return (uint8_t)i;
        }
    }
    return cc->missing_class;
}

static uint8_t next_id(const sl_verdict *v, bool path) {
    uint8_t m = 0;
    for (size_t i = 0; i < v->n; i++) {
        uint8_t x = path ? v->items[i].bpath : v->items[i].pgrp;
        if (x > m) m = x;
    }
    return (uint8_t)(m + 1);
}

static sl_verdict_item *new_item(sl_verdict *v, const sl__ewin *w, const sl_verdict_item *like) {
    sl_verdict_item *it = &v->items[v->n++];
    memset(it, 0, sizeof(*it));
    it->info = &w->info;
    it->descriptor = like->descriptor;
    it->extra = true;
    return it;
}

/* The share a tier guarantees to the value `val` (its listed share, else the default; no
 * default: nothing guaranteed, it may only borrow). */
static uint64_t share_of(const sl_ctier *t, const unsigned char *val, size_t n) {
    for (size_t i = 0; i < t->n_shares; i++)
        if (strlen(t->share_key[i]) == n && memcmp(t->share_key[i], val, n) == 0) return t->share_val[i];
    return t->has_default ? t->share_default : 0;
}

int sl__cap_items(const sl__epol *ep, sl_verdict *v, size_t first, size_t koff, size_t klen,
                  const sl__ctxreq *c, const char *cls) {
    const sl_ccap *cc = ep->cp->cap;
    size_t nw = v->n - first;
    if (cc->classes) {
        uint8_t k = class_of(ep, c, cls);
        for (size_t i = first; i < first + nw; i++) v->items[i].cls = (uint8_t)(k + 1);
    }
    if (cc->borrow && nw == 1 && c != NULL) {
        /* each tier's key: the path so far (the policy's key, then each tier's value) */
        size_t depth = 0, toff[SL_BORROW_MAX_DEPTH], tlen[SL_BORROW_MAX_DEPTH];
        uint64_t tshare[SL_BORROW_MAX_DEPTH];
        size_t prev_off = koff, prev_len = klen;
        for (size_t j = 0; j < cc->n_tiers && j < ep->n_tier_win; j++) {
            if (v->keys_used + prev_len + 3 > SL_VERDICT_KEYS) return SLUICE_ERANGE;
            sl__kbuf k = {v->keys + v->keys_used, 0, SL_VERDICT_KEYS - v->keys_used, false};
            memmove(k.p, v->keys + prev_off, prev_len);
            k.len = prev_len;
            size_t at = k.len;
            if (!sl__put_part(&k, c, ep->cp, &cc->tiers[j].from)) break; /* the path ends here */
            if (k.overflow) return SLUICE_ERANGE;
            tshare[depth] = share_of(&cc->tiers[j], k.p + at + 3, k.len - at - 3);
            toff[depth] = v->keys_used;
            tlen[depth] = k.len;
            v->keys_used += k.len;
            prev_off = toff[depth];
            prev_len = tlen[depth];
            depth++;
        }
        if (depth > 0) {
            if (v->n + depth > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
            sl_verdict_item *root = &v->items[first];
            uint8_t b = next_id(v, true);
            root->bpath = b;
            root->blevel = (uint8_t)depth;
            root->share = root->info->quota;
            for (size_t j = 0; j < depth; j++) {
                sl_verdict_item *it = new_item(v, &ep->cap_win[j], root);
                it->key_off = (uint16_t)toff[j];
                it->key_len = (uint16_t)tlen[j];
                it->cost = root->cost;
                it->bpath = b;
                it->blevel = (uint8_t)(depth - 1 - j);
                it->share = tshare[j];
            }
        }
    }
    if (cc->penalty && ep->has_pen_win) {
        size_t pkoff = koff, pklen = klen;
        if (cc->pen_key_set && c != NULL) {
            /* keyed on the offender: its own key, from the request */
            sl__kbuf k = {v->keys + v->keys_used, 0, SL_VERDICT_KEYS - v->keys_used, false};
            if (k.cap == 0) return SLUICE_ERANGE;
            k.p[k.len++] = 0xfe; /* a namespace of its own */
            bool complete = true;
            for (size_t i = 0; i < cc->pen_key.n && complete; i++)
                complete = sl__put_part(&k, c, ep->cp, &cc->pen_key.parts[i]);
            if (k.overflow) return SLUICE_ERANGE;
            if (!complete) return SLUICE_OK; /* no offender to hold to account */
            pkoff = v->keys_used;
            pklen = k.len;
            v->keys_used += k.len;
        }
        if (v->n >= SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
        uint8_t g = next_id(v, false);
        for (size_t i = first; i < v->n; i++) v->items[i].pgrp = g;
        sl_verdict_item *it = new_item(v, &ep->cap_win[ep->n_tier_win], &v->items[first]);
        it->key_off = (uint16_t)pkoff;
        it->key_len = (uint16_t)pklen;
        it->cost = 1;
        it->cap = SL_SIC_PENALTY;
        it->pgrp = g;
    }
    return SLUICE_OK;
}

/* ---- the answer --------------------------------------------------------------------------- */

static bool is_penalty(const sl_verdict_item *it) { return (it->cap & SL_SIC_PENALTY) != 0; }

/* Why: the block, not the window, is what keeps the key out. Reported as the window, a
 * blocked key saw the window's own state (a window reset during the block: r=3, t=0; a
 * cost above the limit: retry-after "never"), on every protocol, and clients retried
 * into the block. So while a penalty item refuses (a block or challenge running, or the
 * violation that starts one), every window of its policy (same pgrp) reports refused,
 * remaining 0, and a retry-after no earlier than the block's end (later when the window
 * itself refuses for longer). Nothing stored changes: this is only what is reported. */
void sl__cap_penalty_results(sl_verdict *v) {
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *p = &v->items[i];
        if (!is_penalty(p) || p->result.allowed || !(p->x.kind & SL_CAPI_PENALTY) ||
            p->x.pen_action == SL_PENALTY_NONE || p->pgrp == 0)
            continue;
        int64_t until = p->result.retry_after_ns;
        for (size_t j = 0; j < v->n; j++) {
            sl_verdict_item *w = &v->items[j];
            if (j == i || is_penalty(w) || w->pgrp != p->pgrp || w->shadow || w->unlimited) continue;
            w->result.allowed = 0;
            w->result.remaining = 0;
            if (until != SLUICE_NEVER &&
                (w->result.retry_after_ns == SLUICE_NEVER || w->result.retry_after_ns < until))
                w->result.retry_after_ns = until;
            w->would_limit = true;
        }
    }
}

/* A refusal by a penalty's challenge answers the policy's challenge status (a gateway maps
 * it to a CAPTCHA or a step-up); a hard block anywhere stays a 429. */
void sl__cap_answer(sl_verdict *v) {
    int challenge = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!is_penalty(it) || it->result.allowed || !(it->x.kind & SL_CAPI_PENALTY)) continue;
        if (it->x.pen_action == SL_PENALTY_BLOCK) return;
        if (it->x.pen_action == SL_PENALTY_CHALLENGE && challenge == 0) challenge = (int)i + 1;
    }
    if (challenge == 0) return;
    const sl_cpolicy *cp = sl__item_win(&v->items[challenge - 1])->cp;
    v->challenge = challenge;
    v->status = cp->cap != NULL ? cp->cap->challenge_status : 401;
}

/* ---- what a verdict says ----------------------------------------------------------------- */

static const char *const reasons[] = {"admitted", "priority", "reserved", "full"};

const char *sl_verdict_shed(const sl_verdict *v, const char **reason) {
    if (v == NULL || !v->run.capacity) return NULL;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!(it->x.kind & SL_CAPI_SHED) || it->x.shed_reason == 0 || it->result.allowed) continue;
        const sl_cpolicy *cp = sl__item_win(it)->cp;
        if (cp->cap == NULL || it->x.shed_cls >= cp->cap->shed.nclasses) continue;
        if (reason != NULL) *reason = it->x.shed_reason < 4 ? reasons[it->x.shed_reason] : "full";
        return cp->cap->class_names[it->x.shed_cls];
    }
    return NULL;
}

bool sl_verdict_penalty(const sl_verdict *v, unsigned *level, const char **action,
                        const char **challenge_header) {
    if (v == NULL || !v->run.capacity) return false;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!is_penalty(it) || !(it->x.kind & SL_CAPI_PENALTY) || it->x.pen_action == SL_PENALTY_NONE) continue;
        const sl_cpolicy *cp = sl__item_win(it)->cp;
        if (level) *level = it->x.pen_level;
        if (action) *action = it->x.pen_action == SL_PENALTY_CHALLENGE ? "challenge" : "block";
        if (challenge_header)
            *challenge_header = it->x.pen_action == SL_PENALTY_CHALLENGE && cp->cap ? cp->cap->challenge_header : NULL;
        return true;
    }
    return false;
}

bool sl_verdict_adaptive(const sl_verdict *v, sl_cap_info *out, const sl_window_info **win) {
    if (v == NULL || !v->run.capacity) return false;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (!(it->x.kind & SL_CAPI_ADAPT)) continue;
        if (out) *out = it->x;
        if (win) *win = it->info;
        return true;
    }
    return false;
}

const char *sl_engine_class_name(const sl_engine *e, const char *policy, unsigned cls) {
    for (size_t i = 0; e != NULL && policy != NULL && i < e->n_pol; i++) {
        const sl_cpolicy *cp = e->pol[i].cp;
        if (strcmp(cp->name, policy) != 0) continue;
        if (cp->cap == NULL || !cp->cap->classes || cls >= cp->cap->shed.nclasses) return NULL;
        return cp->cap->class_names[cls];
    }
    return NULL;
}
