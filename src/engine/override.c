/* SPDX-License-Identifier: Apache-2.0 */
/*
 * override.c -- per-key overrides in a decision (docs/overrides.md): prepare notes each
 * (policy, key) whose policy has overrides; when the verdict is decided (the time is
 * known) one table lookup per noted key rewrites its items: a plan's windows, its own
 * numbers on the policy's windows (same counters), a block, an exemption, and the carry
 * of the key's counters when the override changed since they were last written. No
 * allocation: everything copied from the table lives in the verdict.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "store/memory/override.h"

typedef sl__ewin e_win;
typedef sl__epol e_pol;

void sl__ovr_note(const sl__epol *ep, sl_verdict *v, size_t first, size_t n, int base_plan,
                  size_t koff, size_t klen, uint64_t cost, bool shadow) {
    if (v->n_ovr >= SL_VERDICT_OVR) return; /* beyond the bound: decided without (docs) */
    sl_vovr *g = &v->ovr[v->n_ovr++];
    g->ep = ep;
    g->first = (uint8_t)first;
    g->n = (uint8_t)n;
    g->base_plan = (int8_t)base_plan;
    g->key_off = (uint16_t)koff;
    g->key_len = (uint16_t)klen;
    g->cost = cost;
    g->shadow = shadow;
    g->descriptor = n > 0 ? v->items[first].descriptor : -1;
    g->kind = SL_OVR_NONE;
    g->guarded = false;
}

/* The identity of a composed key: its parts' values (an address as text), the explicit
 * form's key as one part. False for keys that have none (envoy compat keys). */
bool sl__ovr_identity(const char *policy, const unsigned char *k, size_t n, sl_ovr_hasher *hs) {
    sl_ovr_hash_begin(hs, policy, strlen(policy));
    if (n == 0) return false;
    if (k[0] == 0xff) {
        if (n < 4 || k[1] != 'x') return false;
        size_t l = (size_t)k[2] << 8 | k[3];
        if (4 + l > n) return false;
        sl_ovr_hash_part(hs, k + 4, l);
        return !hs->overflow;
    }
    if (k[0] == SL_ENVOY_KEY_TAG || k[0] >= SL_MAX_CHAINS) return false;
    size_t i = 1;
    while (i + 3 <= n) {
        unsigned char tag = k[i];
        size_t l = (size_t)k[i + 1] << 8 | k[i + 2];
        const unsigned char *p = k + i + 3;
        if (i + 3 + l > n) return false;
        if (tag == 'i' && (l == 4 || l == 16)) {
            char txt[INET6_ADDRSTRLEN];
            if (inet_ntop(l == 4 ? AF_INET : AF_INET6, p, txt, sizeof(txt)) == NULL) return false;
            sl_ovr_hash_part(hs, txt, strlen(txt));
        } else {
            sl_ovr_hash_part(hs, p, l);
        }
        i += 3 + l;
    }
    return i == n && !hs->overflow;
}

/* An item of policy ep's window w for group g, as add_items makes it. */
static void mk_item(const sl_vovr *g, const e_win *w, sl_verdict_item *it, uint8_t gi) {
    const sl_cpolicy *cp = w->cp;
    memset(it, 0, sizeof(*it));
    it->info = &w->info;
    it->descriptor = g->descriptor;
    it->key_off = g->key_off;
    it->key_len = g->key_len;
    bool conc = w->cw->spec.algo == SLUICE_CONCURRENCY ||
                w->cw->spec.algo == SLUICE_ADAPTIVE_CONCURRENCY;
    it->cost = conc ? (g->cost > 0 ? 1 : 0) : g->cost;
    it->shadow = g->shadow;
    it->settle = cp->settle && !conc;
    it->charge = cp->count_rejected && !g->shadow;
    it->ovr_g = gi;
    it->ovr_p = -1;
    it->ovr_c = -1;
}

/* The policy window's numbers with an override's in place of its own. */
static void patch(const sl_limit *base, const sl_ovr_num *n, sl_limit *out) {
    *out = *base;
    out->limit = n->limit;
    out->capacity = n->capacity;
    out->period_ns = n->period_ns;
    out->max_delay_ns = n->max_delay_ns;
    out->lease_ns = n->lease_ns;
    out->quota_period = (sluice_period)n->quota_period;
    out->emission_ns = n->emission_ns;
}

static bool fits(const e_win *w, const sl_ovr_num *n) {
    return w->lim != NULL && w->lim->lim.algo == (sluice_algo)n->algo &&
           w->lim->lim.state_size == n->state_size;
}

static int find_num(const sl_ovr_num *nums, size_t n, unsigned target) {
    for (size_t i = 0; i < n; i++)
        if (nums[i].target == target) return (int)i;
    return -1;
}

static int plan_index(const sl_cpolicy *cp, const char *name) {
    for (size_t i = 0; i < cp->n_plans; i++)
        if (strcmp(cp->plans[i].name, name) == 0) return (int)i;
    return -1;
}

/* Emits group g's items into out[*no..] at `now`. */
static int resolve(sl_ovr_table *t, sl_vovr *g, uint8_t gi, const sl_ovr_view *vwp,
                   sl_hash128 h, sl_verdict_item *out, size_t *no) {
    const e_pol *ep = g->ep;
    const sl_cpolicy *cp = ep->cp;
    const e_win *wins = g->base_plan >= 0 ? ep->plan_win[g->base_plan] : ep->win;
    size_t nw = g->base_plan >= 0 ? cp->plans[g->base_plan].nwin : ep->nwin;
    const sl_ovr_view vw0 = {.found = false}, *vwq = vwp->found ? vwp : &vw0;
#define vw (*vwq)
    bool live = vw.found && vw.live;
    int pi = -1;
    if (live && vw.kind == SL_OVR_PLAN && (pi = plan_index(cp, vw.plan)) < 0) live = false;
    if (live && vw.kind == SL_OVR_LIMITS) { /* dormant when the policy's windows moved on */
        for (size_t j = 0; j < vw.nwin && live; j++)
            live = vw.win[j].target < ep->nwin && fits(&ep->win[vw.win[j].target], &vw.win[j]);
    }
    if (vw.found) {
        g->guard = (sl_ovr_guard){t, h, vw.ver, vw.applied, vw.applied};
    }
    if (live) {
        g->kind = vw.kind;
        memcpy(g->label, vw.label, sizeof(g->label));
        memcpy(g->plan, vw.plan, sizeof(g->plan));
    }
    if (live && vw.kind == SL_OVR_EXEMPT) return SLUICE_OK;
    if (live && vw.kind == SL_OVR_PLAN) {
        wins = ep->plan_win[pi];
        nw = cp->plans[pi].nwin;
    }
    if (live && vw.kind == SL_OVR_LIMITS) {
        if (*no + vw.nwin > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
        bool carry = vw.applied != vw.ver;
        for (size_t j = 0; j < vw.nwin; j++) {
            const e_win *w = &ep->win[vw.win[j].target];
            sl_verdict_item *it = &out[(*no)++];
            mk_item(g, w, it, gi);
            patch(&w->lim->lim, &vw.win[j], &g->lim[j]);
            it->ovr_p = (int8_t)j;
            if (carry) {
                int k = vw.applied != 0 ? find_num(vw.from, vw.nfrom, vw.win[j].target) : -1;
                if (k >= 0) {
                    patch(&w->lim->lim, &vw.from[k], &g->from[k]);
                    it->ovr_c = (int8_t)k;
                } else {
                    it->ovr_c = -2; /* its counters are under the window's own numbers */
                }
            }
        }
        if (carry) {
            g->guard.next = vw.ver;
            g->guarded = true;
        }
        return SLUICE_OK;
    }
    if (*no + nw > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    /* the policy's own windows while the key's counters are in another regime: back */
    bool back = vw.found && vw.applied != 0 && wins == ep->win;
    const sl_ovr_num *src = NULL;
    size_t nsrc = 0;
    if (back) {
        if (vw.applied == vw.ver && vw.kind == SL_OVR_LIMITS) {
            src = vw.win;
            nsrc = vw.nwin;
        } else if (vw.applied == vw.from_ver) {
            src = vw.from;
            nsrc = vw.nfrom;
        }
        g->guard.next = 0;
        g->guarded = true;
    }
    for (size_t j = 0; j < nw; j++) {
        const e_win *w = &wins[j];
        sl_verdict_item *it = &out[(*no)++];
        mk_item(g, w, it, gi);
        if (live && vw.kind == SL_OVR_BLOCK) it->blocked = true;
        int k = back ? find_num(src, nsrc, (unsigned)j) : -1;
        if (k >= 0 && fits(w, &src[k])) {
            patch(&w->lim->lim, &src[k], &g->from[k]);
            it->ovr_c = (int8_t)k;
        }
    }
    return SLUICE_OK;
}

#undef vw

int sl__ovr_apply(const sl_engine *e, sl_verdict *v, sluice_time now) {
    if (v->n_ovr == 0) return SLUICE_OK;
    /* one probe per noted key first: a key without an override (the common case) keeps
     * the items prepare made, and nothing is rebuilt or copied */
    sl_ovr_table *t = sl_store_overrides(e->store);
    sl_ovr_view vws[SL_VERDICT_OVR];
    sl_hash128 hh[SL_VERDICT_OVR];
    bool any = false;
    for (uint8_t gi = 0; gi < v->n_ovr; gi++) {
        sl_vovr *g = &v->ovr[gi];
        g->kind = SL_OVR_NONE;
        g->guarded = false;
        g->label[0] = g->plan[0] = '\0';
        vws[gi].found = false;
        sl_ovr_hasher hs;
        if (t != NULL && sl__ovr_identity(((const e_pol *)g->ep)->cp->name, v->keys + g->key_off,
                                          g->key_len, &hs)) {
            hh[gi] = sl_ovr_hash_end(t, &hs);
            any |= sl_ovr_lookup(t, hh[gi], now.wall_ns, &vws[gi]);
        }
    }
    if (!any) return SLUICE_OK;
    sl_verdict_item out[SLUICE_MAX_ITEMS];
    size_t no = 0, i = 0;
    for (uint8_t gi = 0; gi < v->n_ovr; gi++) {
        sl_vovr *g = &v->ovr[gi];
        size_t first = g->first, n = g->n;
        if (first < i || first + n > v->n) return SLUICE_EINVAL; /* not reached */
        for (; i < first; i++) out[no++] = v->items[i];
        size_t at = no;
        int rc = resolve(t, g, (uint8_t)(gi + 1), &vws[gi], hh[gi], out, &no);
        if (rc != SLUICE_OK) return rc;
        g->first = (uint8_t)at;
        g->n = (uint8_t)(no - at);
        i = first + n;
        if (no + (v->n - i) > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    }
    for (; i < v->n; i++) out[no++] = v->items[i];
    memcpy(v->items, out, no * sizeof(out[0]));
    v->n = no;
    return SLUICE_OK;
}

const sl_vovr *sl_verdict_override(const sl_verdict *v) {
    for (size_t i = 0; i < v->n_ovr; i++)
        if (v->ovr[i].kind != SL_OVR_NONE) return &v->ovr[i];
    return NULL;
}

/* ---- admin side: compiling an override's windows ------------------------------------- */

int sl_engine_ovr_compile(const sl_engine *e, const char *policy, const sl_cwindow *wins,
                          const char *const *names, size_t n, sl_ovr_num *out, char *why,
                          size_t whylen) {
    const e_pol *ep = NULL;
    for (size_t i = 0; i < e->n_pol && ep == NULL; i++)
        if (strcmp(e->pol[i].cp->name, policy) == 0) ep = &e->pol[i];
    if (ep == NULL) {
        snprintf(why, whylen, "no such policy");
        return SLUICE_ENOTFOUND;
    }
    if (ep->ovr_n == NULL) {
        snprintf(why, whylen, "policy %s cannot take limits overrides (capacity protection or "
                 "an envoy rule)", policy);
        return SLUICE_EINVAL;
    }
    if (n == 0 || n > SL_OVR_MAX_WIN || n > ep->nwin) {
        snprintf(why, whylen, "limits: between 1 and %zu windows (the policy has %zu)",
                 ep->nwin < SL_OVR_MAX_WIN ? ep->nwin : (size_t)SL_OVR_MAX_WIN, ep->nwin);
        return SLUICE_EINVAL;
    }
    bool used[SLUICE_MAX_ITEMS] = {false};
    for (size_t j = 0; j < n; j++) {
        /* the identity: the policy window of that name, else the one at that position */
        size_t target = j;
        if (names[j] != NULL && names[j][0] != '\0') {
            target = SIZE_MAX;
            for (size_t k = 0; k < ep->nwin; k++)
                if (ep->win[k].cw->label != NULL && strcmp(ep->win[k].cw->label, names[j]) == 0)
                    target = k;
            if (target == SIZE_MAX) {
                snprintf(why, whylen, "limits[%zu].name: the policy has no window named %.60s", j,
                         names[j]);
                return SLUICE_EINVAL;
            }
        }
        if (used[target]) {
            snprintf(why, whylen, "limits[%zu]: two windows replace the policy's window %zu", j,
                     target);
            return SLUICE_EINVAL;
        }
        used[target] = true;
        const e_win *w = &ep->win[target];
        if (w->lim == NULL) {
            snprintf(why, whylen, "limits[%zu]: the policy's window %zu has no numbers", j, target);
            return SLUICE_EINVAL;
        }
        if (wins[j].spec.algo != w->cw->spec.algo) {
            snprintf(why, whylen, "limits[%zu].algorithm: an override changes numbers, not "
                     "algorithms (the policy's window is %s)", j, sluice_algo_name(w->cw->spec.algo));
            return SLUICE_EINVAL;
        }
        if (w->cw->spec.algo == SLUICE_SLIDING_LOG || w->cw->spec.algo == SLUICE_ADAPTIVE_CONCURRENCY) {
            snprintf(why, whylen, "limits[%zu]: %s windows cannot be overridden (their state "
                     "follows their numbers)", j, sluice_algo_name(w->cw->spec.algo));
            return SLUICE_EINVAL;
        }
        sluice_limit_spec s = w->cw->spec;
        s.name = policy;
        s.limit = wins[j].spec.limit;
        s.period_ns = wins[j].spec.period_ns;
        s.burst = wins[j].spec.burst;
        if (wins[j].spec.max_delay_ns) s.max_delay_ns = wins[j].spec.max_delay_ns;
        if (wins[j].spec.lease_ns) s.lease_ns = wins[j].spec.lease_ns;
        s.quota_period = wins[j].spec.quota_period;
        sl_limit l;
        char eb[160];
        if (sl_limit_init(&l, &s, w->lim->lim.tz, eb, sizeof(eb)) != SLUICE_OK) {
            snprintf(why, whylen, "limits[%zu]: %s", j, eb);
            return SLUICE_EINVAL;
        }
        if (l.state_size != w->lim->lim.state_size) {
            snprintf(why, whylen, "limits[%zu]: these numbers need another state size", j);
            return SLUICE_EINVAL;
        }
        out[j] = (sl_ovr_num){.target = (uint8_t)target, .algo = (uint32_t)l.algo,
                              .state_size = l.state_size, .quota_period = (uint32_t)l.quota_period,
                              .limit = l.limit, .capacity = l.capacity, .period_ns = l.period_ns,
                              .max_delay_ns = l.max_delay_ns, .lease_ns = l.lease_ns,
                              .emission_ns = l.emission_ns};
    }
    return SLUICE_OK;
}

/* Whether policy `policy` exists (1), can take overrides, and whether it has plan `plan`. */
int sl_engine_ovr_policy(const sl_engine *e, const char *policy, const char *plan,
                         size_t *nparts) {
    for (size_t i = 0; i < e->n_pol; i++) {
        const sl__epol *ep = &e->pol[i];
        if (strcmp(ep->cp->name, policy) != 0) continue;
        if (nparts != NULL)
            *nparts = ep->cp->n_chains > 0 ? ep->cp->chains[0].n : 0;
        if (ep->ovr_n == NULL) return -2;
        if (plan != NULL && plan_index(ep->cp, plan) < 0) return -3;
        return 1;
    }
    return 0;
}

/* ---- keys in the admin API's path form ------------------------------------------- */

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool sl_ovr_key_hash(const sl_ovr_table *t, const char *policy, const char *key, size_t key_len,
                     sl_hash128 *h) {
    if (key_len == 0) return false;
    char *buf = malloc(key_len);
    if (buf == NULL) return false;
    const void *parts[SL_MAX_PARTS];
    size_t lens[SL_MAX_PARTS], np = 0, o = 0, start = 0;
    bool ok = true;
    for (size_t i = 0; i <= key_len && ok; i++) {
        if (i == key_len || key[i] == '|') {
            if (np == SL_MAX_PARTS) {
                ok = false;
                break;
            }
            parts[np] = buf + start;
            lens[np++] = o - start;
            start = o;
            continue;
        }
        if (key[i] == '%') {
            int a = i + 2 < key_len ? hexv(key[i + 1]) : -1, b = a >= 0 ? hexv(key[i + 2]) : -1;
            if (b < 0) {
                ok = false;
                break;
            }
            buf[o++] = (char)(a * 16 + b);
            i += 2;
        } else {
            buf[o++] = key[i];
        }
    }
    if (ok) *h = sl_ovr_hash_parts(t, policy, parts, lens, np);
    free(buf);
    return ok;
}
