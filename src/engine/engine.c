/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.c -- compiling a config into an engine: one window per limit of every policy and
 * plan (its limiter registered with the store under the identity that survives reloads:
 * policy [+ "@" plan] and window index), the Envoy override windows, the token table the
 * engines of one store share. Nothing here runs per request.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"

/* RateLimitUnit (type/v3) -> RateLimitResponse.RateLimit.Unit: the same numbers 1..6 */


static int64_t ceil_div(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/* The `w` a client is told: for buckets the time a full burst takes to refill, for
 * windows their length, for calendar quotas the nominal period (none for months). */
static int64_t window_seconds(const sl_cwindow *cw, uint64_t capacity) {
    const sluice_limit_spec *s = &cw->spec;
    if (s->algo == SL_ALGO_PENALTY) return 0; /* internal: no window a client counts in */
    switch (s->algo) {
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_GCRA:
    case SLUICE_LEAKY_BUCKET: {
        if (s->limit == 0) return ceil_div(s->period_ns, SLUICE_NS_PER_S);
        unsigned __int128 ns = (unsigned __int128)s->period_ns * capacity / s->limit;
        int64_t r = ceil_div((int64_t)(ns > (unsigned __int128)INT64_MAX ? INT64_MAX : ns),
                             SLUICE_NS_PER_S);
        return r < 1 ? 1 : r;
    }
    case SLUICE_QUOTA:
        switch (s->quota_period) {
        case SLUICE_PERIOD_HOUR: return 3600;
        case SLUICE_PERIOD_DAY: return 86400;
        case SLUICE_PERIOD_WEEK: return 604800;
        default: return 0;
        }
    case SLUICE_CONCURRENCY:
    case SLUICE_ADAPTIVE_CONCURRENCY: return 0;
    default: {
        int64_t r = ceil_div(s->period_ns, SLUICE_NS_PER_S);
        return r < 1 ? 1 : r;
    }
    }
}

static int maksl__ewin(sl_engine *e, sl__epol *ep, sl__ewin *w, const sl_cwindow *cw, const char *limname,
                    const char *plan, char *errbuf, size_t errlen) {
    sl_cap buf;
    return sl__make_win(e, ep, w, cw, limname, plan, sl__cap_window(ep->cp, cw, &buf), errbuf, errlen);
}

int sl__make_win(sl_engine *e, sl__epol *ep, sl__ewin *w, const sl_cwindow *cw, const char *limname,
                 const char *plan, const sl_cap *cap, char *errbuf, size_t errlen) {
    const sl_cpolicy *cp = ep->cp;
    w->cw = cw;
    w->cp = cp;
    w->ep = ep;
    w->info.name = cw->label;
    w->info.policy = cp->name;
    w->info.plan = plan;
    w->info.qu = cp->qu;
    w->info.unit_name = cp->unit_name;
    w->info.index = cw->spec.index;
    w->info.envoy_unit = cw->envoy_unit;
    w->info.requests_per_unit = cw->requests_per_unit;
    w->info.objective = cp->objective;
    w->info.detailed_metric = cp->detailed_metric || cp->value_to_metric;
    w->info.counts = cw->counts;
    w->info.llm = cp->llm;
    if (cw->spec.algo == SLUICE_CONCURRENCY || cw->spec.algo == SLUICE_ADAPTIVE_CONCURRENCY)
        w->info.qu = SL_QU_CONCURRENT;
    if (cw->deny_all) {
        w->info.quota = 0;
        w->info.window_s = window_seconds(cw, 0);
        return SLUICE_OK;
    }
    sluice_limit_spec s = cw->spec;
    s.name = limname;
    int err = 0;
    w->lim = sl_limiter_create_cap(&s, cap, &err, errbuf, errlen);
    if (w->lim == NULL) return err ? err : SLUICE_EINVAL;
    w->lim->lease_slice = cp->lease_slice;
    w->lim->lease_hold_ns = cp->lease_hold_ns;
    w->lim->fail_local = cp->fail_local;
    err = sluice_store_register(e->store, w->lim);
    if (err != SLUICE_OK) {
        snprintf(errbuf, errlen, "registering limit '%s' with the store: %s", limname,
                 sluice_strerror(err));
        return err;
    }
    w->info.limiter = w->lim;
    w->info.quota = sluice_limiter_capacity(w->lim);
    w->info.window_s = window_seconds(cw, w->info.quota);
    return SLUICE_OK;
}

/* The token table of each store with live engines made by sl_engine_create: a reload
 * that creates the new engine before destroying the old one keeps the table (and the
 * outstanding tokens). Create/destroy only take this lock, never a check. */
typedef struct tok_reg {
    struct tok_reg *next;
    const sluice_store *store;
    sl_token_table *table;
    size_t refs;
} tok_reg;
static tok_reg *tok_regs;
static pthread_mutex_t tok_reg_mu = PTHREAD_MUTEX_INITIALIZER;

static sl_token_table *tok_ref(const sluice_store *st, size_t capacity, int *err) {
    pthread_mutex_lock(&tok_reg_mu);
    tok_reg *r = tok_regs;
    while (r != NULL && r->store != st) r = r->next;
    if (r == NULL && (r = calloc(1, sizeof(*r))) != NULL) {
        r->table = sl_token_table_create(capacity, err);
        if (r->table == NULL) {
            free(r);
            r = NULL;
        } else {
            r->store = st;
            r->next = tok_regs;
            tok_regs = r;
        }
    } else if (r == NULL && err) {
        *err = SLUICE_ENOMEM;
    }
    if (r != NULL) r->refs++;
    pthread_mutex_unlock(&tok_reg_mu);
    return r ? r->table : NULL;
}

static void tok_unref(sl_token_table *t) {
    pthread_mutex_lock(&tok_reg_mu);
    for (tok_reg **pp = &tok_regs; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->table == t) {
            tok_reg *r = *pp;
            if (--r->refs == 0) {
                *pp = r->next;
                sl_token_table_destroy(r->table);
                free(r);
            }
            break;
        }
    pthread_mutex_unlock(&tok_reg_mu);
}

void sl_engine_destroy(sl_engine *e) {
    if (e == NULL) return;
    if (e->shared_tokens && e->tokens != NULL) tok_unref(e->tokens);
    for (int u = 1; u < SL__OVR_UNITS; u++) sluice_limiter_destroy(e->ovr[u].lim);
    for (size_t i = 0; i < e->n_all; i++)
        if (e->all[i] != NULL) sluice_limiter_destroy(e->all[i]->lim);
    for (size_t i = 0; i < e->n_pol; i++) {
        sl__cap_windows_free(&e->pol[i]);
        free(e->pol[i].win);
        if (e->pol[i].plan_win != NULL)
            for (size_t j = 0; j < e->pol[i].cp->n_plans; j++) free(e->pol[i].plan_win[j]);
        free(e->pol[i].plan_win);
    }
    free(e->pol);
    free(e->all);
    free(e);
}

static sl_engine *create(const sl_config *cfg, sluice_store *store, const sl_store_ops *ops,
                         sl_token_table *tokens, int *err, char *errbuf, size_t errbuf_len);

sl_engine *sl_engine_create(const sl_config *cfg, sluice_store *store, int *err, char *errbuf,
                            size_t errbuf_len) {
    return sl_engine_create_ops(cfg, store, NULL, err, errbuf, errbuf_len);
}

sl_engine *sl_engine_create_with(const sl_config *cfg, sluice_store *store,
                                 sl_token_table *tokens, int *err, char *errbuf,
                                 size_t errbuf_len) {
    return create(cfg, store, NULL, tokens, err, errbuf, errbuf_len);
}

sl_engine *sl_engine_create_ops(const sl_config *cfg, sluice_store *store,
                                const sl_store_ops *ops, int *err, char *errbuf,
                                size_t errbuf_len) {
    if (cfg == NULL || store == NULL)
        return create(cfg, store, ops, NULL, err, errbuf, errbuf_len);
    int terr = 0;
    sl_token_table *t = tok_ref(store, (size_t)cfg->settings.store.max_tokens, &terr);
    if (t == NULL) {
        if (err) *err = terr ? terr : SLUICE_ENOMEM;
        if (errbuf && errbuf_len) snprintf(errbuf, errbuf_len, "token table: %s",
                                           sluice_strerror(terr ? terr : SLUICE_ENOMEM));
        return NULL;
    }
    sl_engine *e = create(cfg, store, ops, t, err, errbuf, errbuf_len);
    if (e == NULL) tok_unref(t);
    else e->shared_tokens = true;
    return e;
}

static sl_engine *create(const sl_config *cfg, sluice_store *store, const sl_store_ops *ops,
                         sl_token_table *tokens, int *err, char *errbuf, size_t errbuf_len) {
    char scratch[8];
    if (errbuf == NULL || errbuf_len == 0) {
        errbuf = scratch;
        errbuf_len = sizeof(scratch);
    }
    errbuf[0] = '\0';
    int rc = SLUICE_ENOMEM;
    if (cfg == NULL || store == NULL || tokens == NULL) {
        if (err) *err = SLUICE_EINVAL;
        snprintf(errbuf, errbuf_len, "no config, no store or no token table");
        return NULL;
    }
    sl_engine *e = calloc(1, sizeof(*e));
    if (e == NULL) goto fail;
    e->cfg = cfg;
    e->store = store;
    e->ops = ops != NULL ? ops : &sl_memory_ops;
    e->tokens = tokens;
    e->pol = calloc(cfg->n_pol ? cfg->n_pol : 1, sizeof(*e->pol));
    /* every window, capacity tiers and penalties (at most SL_BORROW_MAX_DEPTH per policy) too */
    e->all = calloc(cfg->n_limiters + cfg->n_pol * (SL_BORROW_MAX_DEPTH + 1) + 1, sizeof(*e->all));
    if (e->pol == NULL || e->all == NULL) goto fail;
    e->n_pol = cfg->n_pol;
    /* override windows: registered whether or not the config has envoy domains, since an
     * override bypasses the config */
    e->ovr_pol.name = "envoy-override";
    e->ovr_pol.objective = "protection";
    e->ovr_pol.envoy = true;
    e->ovr_pol.headers = true;
    e->ovr_pol.rollout_pct = 100;
    e->ovr_ep.cp = &e->ovr_pol;
    for (int u = 1; u < SL__OVR_UNITS; u++) {
        sl_cwindow *cw = &e->ovr_cw[u];
        cw->spec.algo = SLUICE_FIXED_WINDOW;
        cw->spec.limit = UINT32_MAX;
        cw->spec.period_ns = sl_envoy_units[u].secs * SLUICE_NS_PER_S;
        cw->envoy_unit = u;
        cw->label = sl_envoy_units[u].name;
        char lname[64];
        snprintf(lname, sizeof(lname), "envoy#override.%s", sl_envoy_units[u].name);
        rc = maksl__ewin(e, &e->ovr_ep, &e->ovr[u], cw, lname, NULL, errbuf, errbuf_len);
        if (rc != SLUICE_OK) goto fail;
        rc = SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < cfg->n_pol; i++) {
        const sl_cpolicy *cp = &cfg->pol[i];
        sl__epol *ep = &e->pol[i];
        ep->cp = cp;
        ep->tok_owner = sl__hash64(cp->name, strlen(cp->name), "tokens", 6);
        if (!cp->envoy && cp->cap == NULL && sl_store_overrides(store) != NULL)
            ep->ovr_n = sl_ovr_policy_count(sl_store_overrides(store), cp->name);
        if (cp->unlimited) {
            ep->win = calloc(1, sizeof(*ep->win));
            if (ep->win == NULL) goto fail;
            ep->nwin = 0;
            ep->win->cp = cp;
            ep->win->ep = ep;
            ep->win->info.name = cp->rule_name ? cp->rule_name : cp->name;
            ep->win->info.policy = cp->name;
            ep->win->info.objective = cp->objective;
            ep->win->info.detailed_metric = cp->detailed_metric || cp->value_to_metric;
            continue;
        }
        ep->win = calloc(cp->nwin ? cp->nwin : 1, sizeof(*ep->win));
        if (ep->win == NULL) goto fail;
        ep->nwin = cp->nwin;
        for (size_t j = 0; j < cp->nwin; j++) {
            rc = maksl__ewin(e, ep, &ep->win[j], &cp->win[j], cp->name, NULL, errbuf, errbuf_len);
            e->all[e->n_all++] = &ep->win[j];
            if (rc != SLUICE_OK) goto fail;
        }
        if (cp->n_plans > 0) {
            ep->plan_win = calloc(cp->n_plans, sizeof(*ep->plan_win));
            if (ep->plan_win == NULL) goto fail;
            for (size_t k = 0; k < cp->n_plans; k++) {
                const sl_cplan *pl = &cp->plans[k];
                ep->plan_win[k] = calloc(pl->nwin ? pl->nwin : 1, sizeof(sl__ewin));
                if (ep->plan_win[k] == NULL) goto fail;
                char lname[256];
                snprintf(lname, sizeof(lname), "%s@%s", cp->name, pl->name);
                for (size_t j = 0; j < pl->nwin; j++) {
                    rc = maksl__ewin(e, ep, &ep->plan_win[k][j], &pl->win[j], lname, pl->name,
                                  errbuf, errbuf_len);
                    e->all[e->n_all++] = &ep->plan_win[k][j];
                    if (rc != SLUICE_OK) goto fail;
                }
            }
        }
        if (cp->cap != NULL && (rc = sl__cap_windows(e, ep, errbuf, errbuf_len)) != SLUICE_OK) goto fail;
        rc = SLUICE_ENOMEM;
    }
    for (size_t i = 0; e->ops->check != NULL && i < e->n_all; i++) {
        const sl__ewin *w = e->all[i];
        char why[300];
        if (w->lim != NULL && e->ops->check(w->lim, why, sizeof(why)) != SLUICE_OK) {
            snprintf(errbuf, errbuf_len, "policy '%.100s', window '%.100s': %s",
                     w->info.policy ? w->info.policy : "", w->info.name ? w->info.name : "", why);
            rc = SLUICE_ERANGE;
            goto fail;
        }
    }
    /* every policy that can hold a lease or a reservation gets an equal share of the
     * token table, so all the shares fit at once (see tokens.c) */
    size_t issuing = 0;
    for (size_t i = 0; i < e->n_pol; i++) {
        const sl_cpolicy *cp = e->pol[i].cp;
        bool any = false;
        for (size_t j = 0; j < cp->nwin && !any; j++)
            any = cp->settle || cp->win[j].spec.algo == SLUICE_CONCURRENCY ||
                  cp->win[j].spec.algo == SLUICE_ADAPTIVE_CONCURRENCY;
        for (size_t k = 0; k < cp->n_plans && !any; k++)
            for (size_t j = 0; j < cp->plans[k].nwin && !any; j++)
                any = cp->settle || cp->plans[k].win[j].spec.algo == SLUICE_CONCURRENCY ||
                      cp->plans[k].win[j].spec.algo == SLUICE_ADAPTIVE_CONCURRENCY;
        issuing += any;
    }
    e->tok_share = sl_token_table_capacity(tokens) / (issuing ? issuing : 1);
    if (e->tok_share == 0) e->tok_share = 1;
    if (err) *err = SLUICE_OK;
    return e;
fail:
    if (err) *err = rc;
    if (rc == SLUICE_ENOMEM && errbuf[0] == '\0') snprintf(errbuf, errbuf_len, "out of memory");
    sl_engine_destroy(e);
    return NULL;
}

const sl_config *sl_engine_config(const sl_engine *e) { return e ? e->cfg : NULL; }
const sl_store_ops *sl_engine_ops(const sl_engine *e) { return e ? e->ops : NULL; }
sl_token_table *sl_engine_tokens(const sl_engine *e) { return e ? e->tokens : NULL; }

