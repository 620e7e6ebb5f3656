/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capacity.c -- the capacity sections of a policy (docs/capacity.md): adaptive
 * concurrency limits ({min, max, initial, controller, ...}), priority classes
 * (priority_from, classes, on_missing_class), borrowing between tiers (borrow) and
 * progressive penalties (on_exceed: {penalty, challenge}). Every field is checked with
 * file:line:col, and combinations that mean nothing are refused (classes on a budget that
 * cannot be shared, a share above its cap, a challenge nobody can be sent, ...).
 * Fractions are parsed exactly (parts per million); nothing here is on the decision path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "config/compiled.h"
#include "core/path.h"

static bool is_scalar(const sl_ynode *n) { return n != NULL && n->kind == SL_YSCALAR; }

static char *keep(sl__ctx *cx, const char *s) { return sl__strndup(&cx->cfg->arena, s, strlen(s)); }

/* A decimal ("0.2", "1.1", "90%") as parts per million, exactly (at most 6 decimals);
 * false with an error when malformed or above max_ppm. */
static bool get_frac(sl__ctx *cx, const sl_ynode *n, const char *what, uint64_t max_ppm, uint64_t *out) {
    const char *s = is_scalar(n) ? n->s : "";
    uint64_t ppm;
    if (!sl__parse_ppm(s, max_ppm, &ppm)) {
        sl__err(cx, n, "bad %s '%.40s' (expected a number up to %llu.%02llu, or a percentage such as 90%%)",
                what, s, (unsigned long long)(max_ppm / 1000000), (unsigned long long)(max_ppm % 1000000 / 10000));
        return false;
    }
    *out = ppm;
    return true;
}

static uint32_t ppm_q16(uint64_t ppm) { return (uint32_t)((ppm * SL_Q16 + 500000) / 1000000); }

static bool get_dur(sl__ctx *cx, const sl_ynode *n, const char *what, int64_t *ns) {
    if (!is_scalar(n) || !sl__parse_duration(n->s, ns)) {
        sl__err(cx, n, "bad %s '%.40s' (expected a number and a unit such as 100ms, 2s, 1m, 1h)", what,
                is_scalar(n) ? n->s : "");
        return false;
    }
    return true;
}

static bool get_u32(sl__ctx *cx, const sl_ynode *n, uint64_t max, uint32_t *out) {
    uint64_t v;
    if (!sl__get_u64(cx, n, max, &v)) return false;
    *out = (uint32_t)v;
    return true;
}

/* ---- adaptive limits --------------------------------------------------------------------- */

static const char *const adaptive_only[] = {SL_ADAPTIVE_FIELDS, NULL};

bool sl__no_adaptive_fields(sl__ctx *cx, const sl_ynode *n, sluice_algo a) {
    bool ok = true;
    for (size_t i = 0; adaptive_only[i] != NULL; i++) {
        const sl_ynode *x = sl__get(n, adaptive_only[i]);
        if (x == NULL) continue;
        sl__err(cx, x, "%s applies to adaptive_concurrency limits, not %s (expected algorithm: "
                "adaptive_concurrency)", adaptive_only[i], sluice_algo_name(a) ? sluice_algo_name(a) : "?");
        ok = false;
    }
    return ok;
}

/* alpha / beta: a number of slots, a percentage of the limit, or [slots, pct%]. */
static bool get_band(sl__ctx *cx, const sl_ynode *n, const char *what, uint32_t *min, uint32_t *pct) {
    const sl_ynode *items[2] = {n, NULL};
    size_t k = 1;
    if (n->kind == SL_YSEQ) {
        if (n->n < 1 || n->n > 2) {
            sl__err(cx, n, "bad %s (expected slots, a percentage, or [slots, percentage])", what);
            return false;
        }
        items[0] = n->v[0];
        items[1] = n->n == 2 ? n->v[1] : NULL;
        k = n->n;
    }
    for (size_t i = 0; i < k; i++) {
        const sl_ynode *x = items[i];
        if (is_scalar(x) && strchr(x->s, '%') != NULL) {
            uint64_t ppm;
            if (!get_frac(cx, x, what, 1000000, &ppm)) return false;
            *pct = (uint32_t)(ppm / 10000);
        } else if (!get_u32(cx, x, SL_ADAPT_LIMIT_MAX, min)) {
            return false;
        }
    }
    return true;
}

/*
 * The controller of an adaptive limit: defaults for its controller, then each field the
 * config sets; validated by the algorithm's own check (reported at the limit). Why min is
 * required: it is the concurrency of a no-load probe, which only the operator can size.
 */
bool sl__parse_adaptive(sl__ctx *cx, const sl_ynode *n, sl_cwindow *w) {
    bool ok = true;
    const sl_ynode *x;
    sl_adapt_ctl ctl = SL_ADAPT_GRADIENT2;
    if ((x = sl__get(n, "controller")) != NULL) {
        if (is_scalar(x) && strcmp(x->s, "gradient2") == 0) ctl = SL_ADAPT_GRADIENT2;
        else if (is_scalar(x) && strcmp(x->s, "vegas") == 0) ctl = SL_ADAPT_VEGAS;
        else if (is_scalar(x) && strcmp(x->s, "aimd") == 0) ctl = SL_ADAPT_AIMD;
        else {
            sl__err(cx, x, "unknown controller '%.40s' (expected gradient2, vegas or aimd)", is_scalar(x) ? x->s : "");
            return false;
        }
    }
    uint32_t max = (uint32_t)(w->spec.limit > SL_ADAPT_LIMIT_MAX ? SL_ADAPT_LIMIT_MAX : w->spec.limit);
    uint32_t min = 0, initial = 0;
    if ((x = sl__get(n, "min")) == NULL) {
        sl__err(cx, n, "an adaptive limit needs min (expected {min: 2, max: 500, initial: 20}; min is also "
                "the concurrency of a no-load probe)");
        return false;
    }
    ok &= get_u32(cx, x, SL_ADAPT_LIMIT_MAX, &min);
    initial = min;
    if ((x = sl__get(n, "initial")) != NULL) ok &= get_u32(cx, x, SL_ADAPT_LIMIT_MAX, &initial);
    if (!ok) return false;
    sl_adapt_params *p = sl__alloc(&cx->cfg->arena, sizeof(*p));
    if (p == NULL) return false;
    sl_adapt_params_default(p, ctl, min, max, initial);
    uint64_t f;
    if ((x = sl__get(n, "window")) != NULL) ok &= get_dur(cx, x, "window", &p->window_ns);
    if ((x = sl__get(n, "min_samples")) != NULL) ok &= get_u32(cx, x, 100000, &p->min_samples);
    if ((x = sl__get(n, "smoothing")) != NULL && (ok &= get_frac(cx, x, "smoothing", 1000000, &f)))
        p->smoothing_q16 = ppm_q16(f);
    if ((x = sl__get(n, "tolerance")) != NULL && (ok &= get_frac(cx, x, "tolerance", 4000000, &f)))
        p->tolerance_q16 = ppm_q16(f);
    if ((x = sl__get(n, "queue")) != NULL) ok &= get_u32(cx, x, SL_ADAPT_LIMIT_MAX, &p->queue);
    if ((x = sl__get(n, "alpha")) != NULL) ok &= get_band(cx, x, "alpha", &p->alpha_min, &p->alpha_pct);
    if ((x = sl__get(n, "beta")) != NULL) ok &= get_band(cx, x, "beta", &p->beta_min, &p->beta_pct);
    if ((x = sl__get(n, "increase")) != NULL) ok &= get_u32(cx, x, SL_ADAPT_LIMIT_MAX, &p->increase);
    if ((x = sl__get(n, "backoff")) != NULL && (ok &= get_frac(cx, x, "backoff", 1000000, &f)))
        p->backoff_q16 = ppm_q16(f);
    if ((x = sl__get(n, "timeout")) != NULL) ok &= get_dur(cx, x, "timeout", &p->timeout_ns);
    if ((x = sl__get(n, "probe_after")) != NULL) ok &= get_u32(cx, x, 65535, &p->probe_after);
    if ((x = sl__get(n, "probe_every")) != NULL) {
        if (is_scalar(x) && strcmp(x->s, "off") == 0) p->probe_every_ns = 0;
        else ok &= get_dur(cx, x, "probe_every", &p->probe_every_ns);
    }
    if (!ok) return false;
    char msg[200];
    if (sl_adapt_params_check(p, msg, sizeof(msg)) != SLUICE_OK) {
        const sl_ynode *at = n;
        if (strstr(msg, "aimd needs a timeout") && sl__get(n, "controller")) at = sl__get(n, "controller");
        sl__err(cx, at, "%s (expected a controller the algorithm accepts)", msg);
        return false;
    }
    w->adapt = p;
    return true;
}

/* ---- classes ------------------------------------------------------------------------------ */

static const char *const default_classes[4] = {"critical", "default", "sheddable", "batch"};

static int class_index(const sl_ccap *c, const char *name) {
    for (uint32_t i = 0; i < c->shed.nclasses; i++)
        if (strcmp(c->class_names[i], name) == 0) return (int)i;
    return -1;
}

static bool shed_algo(sluice_algo a) {
    return a == SLUICE_CONCURRENCY || a == SLUICE_ADAPTIVE_CONCURRENCY || a == SLUICE_TOKEN_BUCKET ||
           a == SLUICE_GCRA || a == SLUICE_FIXED_WINDOW || a == SLUICE_SLIDING_WINDOW;
}

static bool parse_classes(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, sl_ccap *c) {
    const sl_ynode *cl = sl__get(n, "classes"), *pf = sl__get(n, "priority_from"),
                   *om = sl__get(n, "on_missing_class");
    if (cl == NULL && pf == NULL) {
        if (om != NULL) {
            sl__err(cx, om, "on_missing_class without priority_from (expected priority_from: header.x-priority)");
            return false;
        }
        return true;
    }
    if (pf == NULL) {
        sl__err(cx, cl, "classes without priority_from: no request would ever carry a class (expected "
                "priority_from: header.x-priority or a map of operations)");
        return false;
    }
    bool ok = true;
    /* the budget must be one the classes can share */
    for (size_t i = 0; i < p->nwin; i++)
        if (!shed_algo(p->win[i].spec.algo)) {
            sl__err(cx, cl ? cl : pf, "priority classes need a budget to share, but limit '%s' is %s (expected "
                    "concurrency, adaptive_concurrency, token_bucket, gcra, fixed_window or sliding_window)",
                    p->win[i].label, sluice_algo_name(p->win[i].spec.algo));
            return false;
        }
    if (p->n_plans > 0) {
        sl__err(cx, cl ? cl : pf, "priority classes with plans (expected one or the other)");
        return false;
    }
    if (cl == NULL) {
        sl_shed_params_default(&c->shed, 4);
        for (int i = 0; i < 4; i++) c->class_names[i] = default_classes[i];
    } else {
        if (cl->kind != SL_YSEQ || cl->n < 1 || cl->n > SL_SHED_MAX_CLASSES) {
            sl__err(cx, cl, "classes must be a list of 1 to %d classes in priority order (expected - {name: "
                    "critical, fill: 100%%, reserve: 20%%})", SL_SHED_MAX_CLASSES);
            return false;
        }
        static const char *const cf[] = {"name", "fill", "reserve", NULL};
        c->shed.nclasses = (uint32_t)cl->n;
        for (size_t i = 0; i < cl->n; i++) {
            const sl_ynode *e = cl->v[i], *x;
            if (!sl__check_fields(cx, e, "a class", cf)) {
                ok = false;
                continue;
            }
            const char *name = (x = sl__get(e, "name")) != NULL ? sl__get_str(cx, x, "a class name") : NULL;
            if (name == NULL || *name == '\0' || strlen(name) > 40 || strpbrk(name, " \t\",\\") != NULL) {
                sl__err(cx, x ? x : e, "a class needs a name (expected a word such as critical, without spaces)");
                ok = false;
                continue;
            }
            c->class_names[i] = keep(cx, name);
            for (size_t j = 0; j < i; j++)
                if (c->class_names[j] != NULL && strcmp(c->class_names[j], name) == 0) {
                    sl__err(cx, x, "class '%s' is listed twice (expected unique names)", name);
                    ok = false;
                }
            uint64_t v = i == 0 ? SL_PPM : (i < 4 ? (uint64_t[]){SL_PPM, 900000, 700000, 500000}[i] : 500000);
            if ((x = sl__get(e, "fill")) != NULL) ok &= get_frac(cx, x, "fill", SL_PPM, &v);
            c->shed.cls[i].fill_ppm = (uint32_t)v;
            v = 0;
            if ((x = sl__get(e, "reserve")) != NULL) ok &= get_frac(cx, x, "reserve", SL_PPM, &v);
            c->shed.cls[i].reserve_ppm = (uint32_t)v;
        }
        if (!ok) return false;
        uint64_t reserves = 0;
        for (size_t i = 0; i < cl->n; i++) {
            const sl_shed_class *k = &c->shed.cls[i];
            if (i > 0 && k->fill_ppm > c->shed.cls[i - 1].fill_ppm) {
                sl__err(cx, sl__get(cl->v[i], "fill") ? sl__get(cl->v[i], "fill") : cl->v[i],
                        "class '%s' fills to %u.%u%%, more than '%s' above it (expected fill shares that never "
                        "grow with lower priority: a lower class would be admitted where a higher one is shed)",
                        c->class_names[i], k->fill_ppm / 10000, k->fill_ppm / 1000 % 10, c->class_names[i - 1]);
                return false;
            }
            reserves += k->reserve_ppm;
            if (reserves > SL_PPM) {
                sl__err(cx, sl__get(cl->v[i], "reserve"), "reserves add up to more than 100%% with class '%s' "
                        "(expected reserves that fit in the budget together)", c->class_names[i]);
                return false;
            }
        }
        char msg[200];
        if (sl_shed_params_check(&c->shed, msg, sizeof(msg)) != SLUICE_OK) {
            sl__err(cx, cl, "%s (expected fill shares that never grow with lower priority and reserves "
                    "adding up to at most 100%%)", msg);
            return false;
        }
    }
    /* where a request's class comes from: an attribute, or its operation */
    if (is_scalar(pf)) {
        ok &= sl__parse_part(cx, pf, false, &c->prio_part);
        c->prio_part_set = true;
    } else if (pf->kind == SL_YMAP && pf->n > 0) {
        c->prio_ops = sl__alloc(&cx->cfg->arena, pf->n * sizeof(*c->prio_ops));
        if (c->prio_ops == NULL) return false;
        for (size_t i = 0; i < pf->n; i++) {
            const sl_ynode *k = pf->v[2 * i], *v = pf->v[2 * i + 1];
            const char *sp = strchr(k->s, ' ');
            if (strcmp(k->s, "from") == 0) {
                ok &= sl__parse_part(cx, v, false, &c->prio_part);
                c->prio_part_set = true;
                continue;
            }
            size_t ml = sp ? (size_t)(sp - k->s) : 0;
            const char *path = sp ? sp + 1 : "";
            while (*path == ' ') path++;
            bool good = ml > 0 && ml < 20 && *path == '/' && strpbrk(path, "?#") == NULL;
            for (size_t j = 0; j < ml && good; j++)
                if (!((k->s[j] >= 'A' && k->s[j] <= 'Z') || (ml == 1 && k->s[j] == '*'))) good = false;
            if (!good) {
                sl__err(cx, k, "bad operation '%.60s' in priority_from (expected \"METHOD /path\": class, or "
                        "from: header.NAME)", k->s);
                ok = false;
                continue;
            }
            int ci = is_scalar(v) ? class_index(c, v->s) : -1;
            if (ci < 0) {
                sl__err(cx, v, "unknown class '%.40s' (expected one of the policy's classes)", is_scalar(v) ? v->s : "");
                ok = false;
                continue;
            }
            sl_cprio_op *op = &c->prio_ops[c->n_prio_ops++];
            op->method = sl__strndup(&cx->cfg->arena, k->s, ml);
            size_t pl = strlen(path);
            char *np = sl__alloc(&cx->cfg->arena, pl + 2);
            if (np == NULL || op->method == NULL) return false;
            const char *res;
            size_t nl = sl_path_norm(path, pl, np, &res);
            if (res != np) memmove(np, res, nl);
            np[nl] = '\0';
            op->path = np;
            op->cls = (uint8_t)ci;
        }
    } else {
        sl__err(cx, pf, "bad priority_from (expected an attribute such as header.x-priority, or a map of "
                "\"METHOD /path\": class)");
        return false;
    }
    /* a request whose class is missing or unknown gets this one */
    int mc = class_index(c, "default");
    if (mc < 0) mc = (int)c->shed.nclasses - 1;
    if (om != NULL) {
        mc = is_scalar(om) ? class_index(c, om->s) : -1;
        if (mc < 0) {
            sl__err(cx, om, "unknown class '%.40s' (expected one of the policy's classes)", is_scalar(om) ? om->s : "");
            return false;
        }
    }
    c->missing_class = (uint8_t)mc;
    c->classes = true;
    return ok;
}

/* ---- borrowing ------------------------------------------------------------------------------- */

/* A share or a cap: a rate with the root's period (fixed windows), or slots (concurrency). */
static bool get_amount(sl__ctx *cx, const sl_ynode *n, const sl_cwindow *root, const char *what, uint64_t *out) {
    if (root->spec.algo == SLUICE_CONCURRENCY) {
        return sl__get_u64(cx, n, UINT32_MAX, out);
    }
    int64_t per;
    if (!is_scalar(n) || !sl__parse_rate(n->s, out, &per)) {
        sl__err(cx, n, "bad %s '%.40s' (expected a rate such as 400/s, with the period of the policy's limit)",
                what, is_scalar(n) ? n->s : "");
        return false;
    }
    if (per != root->spec.period_ns) {
        sl__err(cx, n, "%s %.40s counts over another period than the policy's limit (expected N per the "
                "same period: every tier shares the root's windows)", what, n->s);
        return false;
    }
    return true;
}

static bool parse_tier(sl__ctx *cx, const sl_ynode *t, const char *name, const sl_cwindow *root, sl_ctier *out) {
    static const char *const tf[] = {"from", "share", "cap", NULL};
    if (!sl__check_fields(cx, t, "a tier", tf)) return false;
    const sl_ynode *from = sl__get(t, "from"), *share = sl__get(t, "share"), *cap = sl__get(t, "cap");
    if (from == NULL || share == NULL || cap == NULL) {
        sl__err(cx, t, "tier '%s' needs from, share and cap (expected {from: header.x-tenant, share: 50/s, "
                "cap: 200/s})", name);
        return false;
    }
    out->name = name;
    out->line = t->line;
    out->col = t->col;
    bool ok = sl__parse_part(cx, from, false, &out->from);
    ok &= get_amount(cx, cap, root, "cap", &out->cap);
    out->cap_node_line = cap->line;
    out->cap_node_col = cap->col;
    if (share->kind == SL_YMAP) {
        out->n_shares = 0;
        out->share_key = sl__alloc(&cx->cfg->arena, share->n * sizeof(char *));
        out->share_val = sl__alloc(&cx->cfg->arena, share->n * sizeof(uint64_t));
        if (out->share_key == NULL || out->share_val == NULL) return false;
        for (size_t i = 0; i < share->n; i++) {
            const sl_ynode *k = share->v[2 * i], *v = share->v[2 * i + 1];
            uint64_t amt;
            if (!get_amount(cx, v, root, "share", &amt)) {
                ok = false;
                continue;
            }
            if (amt > out->cap) {
                sl__err(cx, v, "share %.40s of tier '%s' is above its cap (expected a share <= cap)", v->s, name);
                ok = false;
            }
            if (strcmp(k->s, "default") == 0) {
                out->has_default = true;
                out->share_default = amt;
            } else {
                out->share_key[out->n_shares] = keep(cx, k->s);
                out->share_val[out->n_shares++] = amt;
            }
        }
    } else {
        uint64_t amt = 0;
        if (!get_amount(cx, share, root, "share", &amt)) return false;
        if (amt > out->cap) {
            sl__err(cx, share, "share %.40s of tier '%s' is above its cap (expected a share <= cap)", share->s, name);
            return false;
        }
        out->has_default = true;
        out->share_default = amt;
    }
    return ok;
}

/* The largest share a value of this tier can get. */
static uint64_t max_share(const sl_ctier *t) {
    uint64_t m = t->has_default ? t->share_default : 0;
    for (size_t i = 0; i < t->n_shares; i++)
        if (t->share_val[i] > m) m = t->share_val[i];
    return m;
}

static bool parse_borrow(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, sl_ccap *c) {
    const sl_ynode *b = sl__get(n, "borrow");
    if (b == NULL) return true;
    if (b->kind != SL_YMAP) {
        sl__err(cx, b, "borrow must be a mapping (expected {tiers: [platform, product, tenant], product: {...}, "
                "tenant: {...}, reclaim: 1s})");
        return false;
    }
    const sl_ynode *tiers = sl__get(b, "tiers");
    if (tiers == NULL || tiers->kind != SL_YSEQ || tiers->n < 2 || tiers->n > SL_BORROW_MAX_DEPTH) {
        sl__err(cx, tiers ? tiers : b, "borrow needs tiers: a list of 2 to %d names, the root first (expected "
                "tiers: [platform, product, tenant])", SL_BORROW_MAX_DEPTH);
        return false;
    }
    if (p->nwin != 1 || (p->win[0].spec.algo != SLUICE_FIXED_WINDOW && p->win[0].spec.algo != SLUICE_CONCURRENCY)) {
        sl__err(cx, b, "borrowing needs exactly one limit, fixed_window or concurrency, the root's budget "
                "(expected limits: [{rate: 1000/s}] with algorithm: fixed_window)");
        return false;
    }
    if (p->n_plans > 0 || p->lease_slice > 0) {
        sl__err(cx, b, "borrowing with %s (expected one or the other)", p->n_plans ? "plans" : "leasing");
        return false;
    }
    const sl_cwindow *root = &p->win[0];
    bool ok = true;
    for (size_t i = 0; i < tiers->n; i++)
        if (!is_scalar(tiers->v[i]) || tiers->v[i]->s[0] == '\0') {
            sl__err(cx, tiers->v[i], "a tier name must be a word (expected tiers: [platform, product, tenant])");
            return false;
        }
    for (size_t i = 0; i < b->n; i++) {
        const char *k = b->v[2 * i]->s;
        bool known = strcmp(k, "tiers") == 0 || strcmp(k, "reclaim") == 0;
        for (size_t j = 1; j < tiers->n && !known; j++) known = strcmp(k, tiers->v[j]->s) == 0;
        if (!known) {
            sl__err(cx, b->v[2 * i], "unknown field '%.40s' in borrow (expected tiers, reclaim, or the name of a "
                    "tier below the root)", k);
            ok = false;
        }
    }
    c->root_name = keep(cx, tiers->v[0]->s);
    for (size_t j = 1; j < tiers->n; j++) {
        const char *name = tiers->v[j]->s;
        const sl_ynode *t = sl__get(b, name);
        if (t == NULL) {
            sl__err(cx, tiers->v[j], "tier '%s' is not described (expected %s: {from: ..., share: ..., cap: ...})",
                    name, name);
            ok = false;
            continue;
        }
        if (!parse_tier(cx, t, keep(cx, name), root, &c->tiers[c->n_tiers])) {
            ok = false;
            continue;
        }
        c->n_tiers++;
    }
    if (!ok) return false;
    /* shares and caps never above the parent's: the root's budget is its limit */
    uint64_t parent_share = root->spec.limit, parent_cap = root->spec.limit;
    for (size_t j = 0; j < c->n_tiers; j++) {
        const sl_ctier *t = &c->tiers[j];
        const sl_ynode *tn = sl__get(b, t->name);
        uint64_t ms = max_share(t);
        if (ms > parent_share) {
            sl__err(cx, sl__get(tn, "share"), "a share of tier '%s' is above its parent's share %llu (expected "
                    "shares that fit in the parent's)", t->name, (unsigned long long)parent_share);
            ok = false;
        }
        if (t->cap > parent_cap) {
            sl__err(cx, sl__get(tn, "cap"), "cap of tier '%s' is above its parent's %llu (expected a cap the "
                    "parent can hold)", t->name, (unsigned long long)parent_cap);
            ok = false;
        }
        uint64_t listed = 0;
        for (size_t i = 0; i < t->n_shares; i++) listed += t->share_val[i];
        if (listed > parent_share) {
            sl__err(cx, sl__get(tn, "share"), "the listed shares of tier '%s' add up to %llu, above its parent's "
                    "share %llu (expected guarantees the parent can keep)", t->name, (unsigned long long)listed,
                    (unsigned long long)parent_share);
            ok = false;
        }
        parent_share = ms;
        parent_cap = t->cap;
    }
    c->reclaim_ns = root->spec.algo == SLUICE_FIXED_WINDOW ? root->spec.period_ns : SLUICE_NS_PER_S;
    const sl_ynode *rc = sl__get(b, "reclaim");
    if (rc != NULL && get_dur(cx, rc, "reclaim", &c->reclaim_ns)) {
        if (c->reclaim_ns <= 0 || (root->spec.algo == SLUICE_FIXED_WINDOW && c->reclaim_ns < root->spec.period_ns)) {
            sl__err(cx, rc, "reclaim %.40s is shorter than a window (expected at least the limit's period, so an "
                    "owner's reclaim spans a window boundary)", rc->s);
            ok = false;
        }
    } else if (rc != NULL) {
        ok = false;
    }
    c->borrow = ok;
    return ok;
}

/* ---- penalties ------------------------------------------------------------------------------- */

static bool parse_penalty(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, sl_ccap *c) {
    const sl_ynode *oe = sl__get(n, "on_exceed");
    const sl_ynode *pn = oe != NULL && oe->kind == SL_YMAP ? sl__get(oe, "penalty") : NULL;
    const sl_ynode *ch = oe != NULL && oe->kind == SL_YMAP ? sl__get(oe, "challenge") : NULL;
    if (pn == NULL && ch == NULL) return true;
    bool ok = true;
    if (pn == NULL) {
        sl__err(cx, ch, "a challenge without a penalty is never sent (expected on_exceed: {penalty: {...}, "
                "challenge: {...}})");
        return false;
    }
    static const char *const pf[] = {"first", "factor", "max", "forgive_after", "key", "challenge", NULL};
    if (!sl__check_fields(cx, pn, "penalty", pf)) return false;
    sl_penalty_params_default(&c->pen);
    const sl_ynode *x;
    if ((x = sl__get(pn, "first")) != NULL) ok &= get_dur(cx, x, "first", &c->pen.first_ns);
    if ((x = sl__get(pn, "max")) != NULL) ok &= get_dur(cx, x, "max", &c->pen.max_ns);
    if ((x = sl__get(pn, "forgive_after")) != NULL) ok &= get_dur(cx, x, "forgive_after", &c->pen.forgive_after_ns);
    uint64_t f;
    if ((x = sl__get(pn, "factor")) != NULL && (ok &= get_frac(cx, x, "factor", 64000000, &f)))
        c->pen.factor_q16 = f > 16000000 ? 17u << 16 : ppm_q16(f);
    if ((x = sl__get(pn, "challenge")) != NULL) {
        if (is_scalar(x) && strcmp(x->s, "always") == 0) c->pen.challenge_levels = SL_PENALTY_CHALLENGE_ALL;
        else ok &= get_u32(cx, x, SL_PENALTY_LEVEL_MAX, &c->pen.challenge_levels);
    }
    if ((x = sl__get(pn, "key")) != NULL) {
        c->pen_key.n = 0;
        if (is_scalar(x)) {
            c->pen_key.n = 1;
            ok &= sl__parse_part(cx, x, false, &c->pen_key.parts[0]);
        } else if (x->kind == SL_YSEQ && x->n >= 1 && x->n <= SL_MAX_PARTS) {
            for (size_t i = 0; i < x->n; i++) ok &= sl__parse_part(cx, x->v[i], false, &c->pen_key.parts[c->pen_key.n++]);
        } else {
            sl__err(cx, x, "bad penalty key (expected a list of 1 to %d key parts, such as [client_ip])", SL_MAX_PARTS);
            ok = false;
        }
        c->pen_key_set = true;
    }
    if (!ok) return false;
    char msg[200];
    if (sl_penalty_params_check(&c->pen, msg, sizeof(msg)) != SLUICE_OK) {
        const sl_ynode *at = pn;
        if (strstr(msg, "factor") && sl__get(pn, "factor")) at = sl__get(pn, "factor");
        else if (strstr(msg, "max") && sl__get(pn, "max")) at = sl__get(pn, "max");
        else if (strstr(msg, "forgive") && sl__get(pn, "forgive_after")) at = sl__get(pn, "forgive_after");
        else if (strstr(msg, "first") && sl__get(pn, "first")) at = sl__get(pn, "first");
        sl__err(cx, at, "%s (expected first <= max, a factor from 1 to 16, forgive_after above 0)", msg);
        return false;
    }
    if (p->react == SL_REACT_DELAY) {
        sl__err(cx, pn, "a penalty with a delay (expected one reaction: a delayed request is not refused, so "
                "it never escalates)");
        return false;
    }
    if (p->rollout_pct < 100 || p->react == SL_REACT_SHADOW) {
        sl__err(cx, ch ? ch : pn, "a %s on a policy in shadow mode or a partial rollout (expected mode: enforce: "
                "a shadow policy refuses nobody, so there is nothing to escalate or answer)",
                ch ? "challenge" : "penalty");
        return false;
    }
    c->challenge_status = 401;
    c->challenge_header = NULL;
    if (ch != NULL) {
        if (c->pen.challenge_levels == 0) {
            sl__err(cx, ch, "a challenge reaction but the penalty never challenges (expected penalty: "
                    "{challenge: always} or {challenge: N levels})");
            return false;
        }
        static const char *const cf[] = {"status", "header", NULL};
        if (!sl__check_fields(cx, ch, "challenge", cf)) return false;
        uint64_t st;
        if ((x = sl__get(ch, "status")) != NULL) {
            if (!sl__get_u64(cx, x, 599, &st) || st < 400) {
                if (st < 400) sl__err(cx, x, "challenge status %.20s is not an error (expected 400 to 599)", x->s);
                return false;
            }
            c->challenge_status = (int)st;
        }
        if ((x = sl__get(ch, "header")) != NULL) {
            const char *h = sl__get_str(cx, x, "a challenge header");
            const char *colon = h ? strchr(h, ':') : NULL;
            bool good = colon != NULL && colon > h && strlen(h) < 200;
            for (const char *q = h; good && q < colon; q++)
                if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-'))
                    good = false;
            for (const char *q = colon; good && *q; q++)
                if ((unsigned char)*q < 0x20 || (unsigned char)*q == 0x7f) good = false;
            if (!good) {
                sl__err(cx, x, "bad challenge header '%.60s' (expected \"Name: value\", such as \"X-Challenge: "
                        "captcha\")", h ? h : "");
                return false;
            }
            c->challenge_header = keep(cx, h);
        }
    }
    c->penalty = true;
    return true;
}

bool sl__parse_capacity(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    sl_ccap c;
    memset(&c, 0, sizeof(c));
    bool ok = parse_classes(cx, n, p, &c);
    ok &= parse_borrow(cx, n, p, &c);
    ok &= parse_penalty(cx, n, p, &c);
    if (!ok) return false;
    if (c.borrow && c.classes) {
        sl__err(cx, sl__get(n, "borrow"), "borrowing with priority classes (expected one or the other in a policy)");
        return false;
    }
    if ((c.borrow || c.classes) && (p->rollout_pct < 100 || p->react == SL_REACT_SHADOW)) {
        sl__err(cx, sl__get(n, c.borrow ? "borrow" : "priority_from"), "%s on a policy in shadow mode or a partial "
                "rollout (expected mode: enforce)", c.borrow ? "borrowing" : "priority classes");
        return false;
    }
    if ((c.borrow || c.classes || c.penalty) && p->lease_slice > 0) {
        sl__err(cx, sl__get(n, "leasing"), "leasing with capacity protection (expected leasing: off)");
        return false;
    }
    if (!c.borrow && !c.classes && !c.penalty) return true;
    p->cap = sl__alloc(&cx->cfg->arena, sizeof(*p->cap));
    if (p->cap == NULL) return false;
    *p->cap = c;
    return true;
}
