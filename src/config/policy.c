/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.c -- one policy of the sluice format, a parser per section: identity (name,
 * description, objective), match, key and on_missing_key, cost, algorithm and limits,
 * plans, on_exceed, mode, failure and options (on_store_error, headers, leasing,
 * count_rejected), then the checks between sections (descriptor parts need a domain).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "algo/algo.h"
#include "config/compiled.h"
#include "core/path.h"
#include "store/memory/memory.h"

static const char *const policy_fields[] = {
    "name", "description", "objective", "match", "key", "on_missing_key", "cost",
    "algorithm", "limits", "plan_from", "plans", "on_exceed", "mode", "on_store_error",
    "headers", "count_rejected", "leasing", "llm", "priority_from", "classes", "on_missing_class",
    "borrow", NULL};
static const char *const match_fields[] = {"method", "path", "path_prefix", "host",
                                           "headers", "domain", "descriptor", NULL};
static const char *const objectives[] = {"protection", "fairness", "security", "cost",
                                         "plan", "contract", NULL};

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 200) return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == ':'))
            return false;
    }
    return true;
}

static bool parse_conds(sl__ctx *cx, const sl_ynode *n, const char *what, bool lower,
                        sl_hdr_cond **out, size_t *nout) {
    if (n == NULL || n->kind != SL_YMAP) {
        sl__err(cx, n, "%s must be a mapping (expected name: pattern pairs)", what);
        return false;
    }
    sl_hdr_cond *c = sl__alloc(&cx->cfg->arena, (n->n ? n->n : 1) * sizeof(*c));
    if (c == NULL) return false;
    bool ok = sl__check_dups(cx, n, what);
    for (size_t i = 0; i < n->n; i++) {
        const sl_ynode *k = n->v[2 * i], *v = n->v[2 * i + 1];
        c[i].name = lower ? sl__keep_lower(cx, k->s) : sl__keep(cx, k->s);
        if (v->kind == SL_YMAP) {
            static const char *const pf[] = {"present", NULL};
            bool present = true;
            if (!sl__check_fields(cx, v, "a header condition", pf) ||
                sl__get(v, "present") == NULL) {
                sl__err(cx, v, "bad condition (expected a pattern or {present: true|false})");
                ok = false;
                continue;
            }
            ok &= sl__get_bool(cx, sl__get(v, "present"), &present);
            c[i].present = present;
        } else if (sl__is_scalar(v)) {
            c[i].pattern = sl__keep(cx, v->s);
            c[i].present = true;
        } else {
            sl__err(cx, v, "bad condition (expected a pattern or {present: true|false})");
            ok = false;
        }
    }
    *out = c;
    *nout = n->n;
    return ok;
}

/* A path from the config, normalised exactly as request paths are (engine.c), so that
 * `/files/%7euser` or `/a//b` still match the requests they name. A '?' or '#' would be
 * cut off requests before matching, so it can never match: an error. */
static const char *keep_path(sl__ctx *cx, const sl_ynode *n) {
    size_t len = strlen(n->s);
    if (strpbrk(n->s, "?#") != NULL) {
        sl__err(cx, n, "path '%.60s' has a query or fragment, which requests are matched "
                "without (expected only the path)", n->s);
        return NULL;
    }
    char *out = sl__alloc(&cx->cfg->arena, len + 2);
    if (out == NULL) return NULL;
    const char *res;
    size_t nl = sl_path_norm(n->s, len, out, &res);
    if (res != out) memmove(out, res, nl);
    out[nl] = '\0';
    return out;
}

static bool parse_match(sl__ctx *cx, const sl_ynode *m, sl_cpolicy *p) {
    if (!sl__check_fields(cx, m, "match", match_fields)) return false;
    bool ok = true;
    const sl_ynode *x;
    if ((x = sl__get(m, "method")) != NULL) {
        size_t cnt = sl__is_seq(x) ? x->n : 1;
        p->methods = sl__alloc(&cx->cfg->arena, (cnt ? cnt : 1) * sizeof(char *));
        if (p->methods == NULL) return false;
        for (size_t i = 0; i < cnt; i++) {
            const sl_ynode *e = sl__is_seq(x) ? x->v[i] : x;
            bool good = sl__is_scalar(e) && e->len > 0 && e->len < 20;
            for (size_t j = 0; good && j < e->len; j++)
                if (e->s[j] < 'A' || e->s[j] > 'Z') good = false;
            if (!good) {
                sl__err(cx, e, "bad method '%.20s' (expected an upper-case HTTP method such "
                        "as GET or POST)", sl__is_scalar(e) ? e->s : "");
                ok = false;
                continue;
            }
            p->methods[p->n_methods++] = sl__keep(cx, e->s);
        }
        if (cnt == 0) {
            sl__err(cx, x, "empty method list (expected at least one method)");
            ok = false;
        }
    }
    const sl_ynode *path = sl__get(m, "path"), *prefix = sl__get(m, "path_prefix");
    if (path != NULL && prefix != NULL) {
        sl__err(cx, prefix, "path and path_prefix both given (expected one of them)");
        ok = false;
    } else if (path != NULL || prefix != NULL) {
        const sl_ynode *e = path ? path : prefix;
        if (!sl__is_scalar(e) || e->s[0] != '/') {
            sl__err(cx, e, "bad path '%.60s' (expected a path starting with '/', '*' matching "
                    "any characters)", sl__is_scalar(e) ? e->s : "");
            ok = false;
        } else {
            p->path = keep_path(cx, e);
            if (p->path == NULL) ok = false;
            p->path_kind = prefix ? SL_PATH_PREFIX
                                  : (strchr(e->s, '*') ? SL_PATH_GLOB : SL_PATH_EXACT);
        }
    }
    if ((x = sl__get(m, "host")) != NULL) {
        const char *h = sl__get_str(cx, x, "host");
        if (h == NULL || *h == '\0') {
            ok = false;
        } else {
            /* as requests are compared: lower case, no trailing dot ("example.com.") */
            p->host = sl__keep_lower(cx, h);
            size_t hl = p->host ? strlen(p->host) : 0;
            if (hl > 1 && p->host[hl - 1] == '.') ((char *)p->host)[hl - 1] = '\0';
        }
    }
    if ((x = sl__get(m, "headers")) != NULL)
        ok &= parse_conds(cx, x, "match.headers", true, &p->hdr, &p->n_hdr);
    if ((x = sl__get(m, "domain")) != NULL) {
        const char *d = sl__get_str(cx, x, "domain");
        if (d == NULL || *d == '\0') ok = false;
        else p->domain = sl__keep(cx, d);
    }
    if ((x = sl__get(m, "descriptor")) != NULL) {
        ok &= parse_conds(cx, x, "match.descriptor", false, &p->desc, &p->n_desc);
        if (p->domain == NULL) {
            sl__err(cx, x, "match.descriptor needs match.domain (expected the Envoy domain "
                    "the descriptors arrive with)");
            ok = false;
        }
    }
    return ok;
}

static bool parse_missing(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    if (sl__is_scalar(n)) {
        if (strcmp(n->s, "skip") == 0) p->on_missing = SL_MISSING_SKIP;
        else if (strcmp(n->s, "reject") == 0) p->on_missing = SL_MISSING_REJECT;
        else {
            sl__err(cx, n, "bad on_missing_key '%.40s' (expected skip, reject or {use: "
                    "[parts], otherwise: skip|reject})", n->s);
            return false;
        }
        return true;
    }
    static const char *const f[] = {"use", "otherwise", NULL};
    if (!sl__check_fields(cx, n, "on_missing_key", f)) return false;
    bool ok = true;
    const sl_ynode *use = sl__get(n, "use"), *oth = sl__get(n, "otherwise");
    if (use == NULL) {
        sl__err(cx, n, "on_missing_key needs 'use' (expected use: [client_ip])");
        return false;
    }
    /* `use` is one fallback chain ([client_ip]) or several ([[header.x-user], [client_ip]]). */
    bool several = sl__is_seq(use) && use->n > 0 && sl__is_seq(use->v[0]);
    size_t cnt = several ? use->n : 1;
    if (p->n_chains + cnt > SL_MAX_CHAINS) {
        sl__err(cx, use, "too many fallback keys (expected at most %d chains)",
                SL_MAX_CHAINS - 1);
        return false;
    }
    for (size_t i = 0; i < cnt; i++) {
        ok &= sl__parse_chain(cx, several ? use->v[i] : use, &p->chains[p->n_chains]);
        if (p->chains[p->n_chains].n == 0) {
            sl__err(cx, use, "an empty fallback key would put every such request in one "
                    "bucket (expected parts, or on_missing_key: skip)");
            ok = false;
        }
        p->n_chains++;
    }
    p->on_missing = SL_MISSING_REJECT;
    if (oth != NULL) {
        if (sl__is_scalar(oth) && strcmp(oth->s, "skip") == 0) p->on_missing = SL_MISSING_SKIP;
        else if (!(sl__is_scalar(oth) && strcmp(oth->s, "reject") == 0)) {
            sl__err(cx, oth, "bad otherwise '%.40s' (expected skip or reject)",
                    sl__is_scalar(oth) ? oth->s : "");
            ok = false;
        }
    }
    return ok;
}

/* A configured cost: 0 is refused, since a cost-0 decision is a pure peek (nothing is
 * ever consumed, so the limit would never apply). */
static bool get_cost(sl__ctx *cx, const sl_ynode *n, uint64_t *out) {
    if (!sl__get_count(cx, n, "cost", UINT32_MAX, out)) return false;
    if (*out == 0) {
        sl__err(cx, n, "cost 0 would consume nothing, so the limits would never apply "
                "(expected a cost of at least 1)");
        return false;
    }
    return true;
}

static bool parse_cost(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    p->cost_explicit = true;
    if (sl__is_scalar(n)) return get_cost(cx, n, &p->cost_default);
    if (n->kind != SL_YMAP) {
        sl__err(cx, n, "bad cost (expected a number or {default, from, settle, unit, "
                "\"METHOD /path\": N})");
        return false;
    }
    bool ok = sl__check_dups(cx, n, "cost");
    size_t nops = 0;
    for (size_t i = 0; i < n->n; i++)
        if (strchr(n->v[2 * i]->s, ' ') != NULL) nops++;
    p->ops = sl__alloc(&cx->cfg->arena, (nops ? nops : 1) * sizeof(*p->ops));
    if (p->ops == NULL) return false;
    for (size_t i = 0; i < n->n; i++) {
        const sl_ynode *k = n->v[2 * i], *v = n->v[2 * i + 1];
        const char *sp = strchr(k->s, ' ');
        if (sp != NULL) {
            sl_op_cost *op = &p->ops[p->n_ops];
            size_t ml = (size_t)(sp - k->s);
            const char *path = sp + 1;
            while (*path == ' ') path++;
            bool good = ml > 0 && ml < 20 && *path == '/';
            for (size_t j = 0; j < ml; j++)
                if (!((k->s[j] >= 'A' && k->s[j] <= 'Z') || (ml == 1 && k->s[j] == '*')))
                    good = false;
            if (!good) {
                sl__err(cx, k, "bad operation '%.60s' (expected \"METHOD /path\", e.g. "
                        "\"POST /export\"; '*' matches any characters)", k->s);
                ok = false;
                continue;
            }
            op->method = sl__strndup(&cx->cfg->arena, k->s, ml);
            sl_ynode pn = *k;
            pn.s = path;
            op->path = keep_path(cx, &pn);
            if (op->path == NULL) {
                ok = false;
                continue;
            }
            if (!get_cost(cx, v, &op->cost)) {
                ok = false;
                continue;
            }
            p->n_ops++;
        } else if (strcmp(k->s, "default") == 0) {
            ok &= get_cost(cx, v, &p->cost_default);
        } else if (strcmp(k->s, "from") == 0) {
            ok &= sl__parse_part(cx, v, true, &p->cost_from);
            p->cost_from_set = true;
        } else if (strcmp(k->s, "settle") == 0) {
            ok &= sl__get_bool(cx, v, &p->settle);
        } else if (strcmp(k->s, "unit") == 0) {
            const char *u = sl__get_str(cx, v, "cost unit");
            bool good = u != NULL && *u != '\0' && strlen(u) < 40;
            for (const char *q = u; good && *q; q++)
                if (*q < 0x21 || *q > 0x7e || *q == '"' || *q == '\\') good = false;
            if (!good) {
                sl__err(cx, v, "bad cost unit (expected a word such as requests, "
                        "content-bytes or tokens)");
                ok = false;
            } else if (strcmp(u, "requests") == 0) {
                p->qu = SL_QU_REQUESTS;
            } else if (strcmp(u, "content-bytes") == 0) {
                p->qu = SL_QU_CONTENT_BYTES;
            } else if (strcmp(u, "concurrent-requests") == 0) {
                p->qu = SL_QU_CONCURRENT;
            } else {
                p->qu = SL_QU_OTHER;
                p->unit_name = sl__keep(cx, u);
            }
        } else {
            sl__err(cx, k, "unknown field '%.60s' in cost (expected one of: default, from, "
                    "settle, unit, or an operation \"METHOD /path\")", k->s);
            ok = false;
        }
    }
    if (p->cost_from_set && p->cost_from.kind == SL_PART_BODY_BYTES && p->qu == SL_QU_REQUESTS &&
        sl__get(n, "unit") == NULL)
        p->qu = SL_QU_CONTENT_BYTES;
    return ok;
}

#define LEASE_HOLD_DEFAULT_NS (100 * SLUICE_NS_PER_MS)
#define LEASE_HOLD_MAX_NS (60 * SLUICE_NS_PER_S)

static bool leasable_algo(sluice_algo a) {
    return a == SLUICE_GCRA || a == SLUICE_TOKEN_BUCKET || a == SLUICE_FIXED_WINDOW ||
           a == SLUICE_SLIDING_WINDOW;
}

/* Why only rates: a slice is units taken now and spent later, which a rate's budget
 * allows (what is not spent goes back); a quota's period, a concurrency slot or a
 * shaper's queue position cannot be held by an instance on another's behalf. */
static bool lease_fits(sl__ctx *cx, const sl_ynode *at, const sl_cpolicy *p, const sl_cwindow *w,
                       size_t nw) {
    bool ok = true;
    for (size_t i = 0; i < nw; i++) {
        if (!leasable_algo(w[i].spec.algo)) {
            sl__err(cx, at, "leasing needs rate limits, but limit '%s' is %s (expected gcra, "
                    "token_bucket, fixed_window or sliding_window)", w[i].label,
                    sl__algo_str(w[i].spec.algo));
            ok = false;
        } else if (p->lease_slice > sl__window_capacity(&w[i])) {
            sl__err(cx, at, "leasing slice %u is above the capacity %llu of limit '%s' (expected "
                    "a slice of at most %llu)", p->lease_slice,
                    (unsigned long long)sl__window_capacity(&w[i]), w[i].label,
                    (unsigned long long)sl__window_capacity(&w[i]));
            ok = false;
        }
    }
    return ok;
}

bool sl__parse_leasing(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    if (sl__is_scalar(n) && strcmp(n->s, "off") == 0) {
        p->lease_slice = 0;
        return true;
    }
    static const char *const f[] = {"slice", "hold", NULL};
    if (!sl__check_fields(cx, n, "leasing", f)) return false;
    const sl_ynode *sn = sl__get(n, "slice"), *hn = sl__get(n, "hold");
    uint64_t slice = 0;
    if (sn == NULL) {
        sl__err(cx, n, "leasing needs a slice (expected leasing: {slice: 10, hold: 100ms})");
        return false;
    }
    if (!sl__get_count(cx, sn, "slice", UINT32_MAX, &slice)) return false;
    if (slice < 2) {
        sl__err(cx, sn, "leasing slice %llu takes nothing ahead (expected at least 2, or "
                "leasing: off)", (unsigned long long)slice);
        return false;
    }
    int64_t hold = LEASE_HOLD_DEFAULT_NS;
    if (hn != NULL) {
        if (!sl__get_duration(cx, hn, &hold)) return false;
        if (hold <= 0 || hold > LEASE_HOLD_MAX_NS) {
            sl__err(cx, hn, "leasing hold must be above 0 and at most 60s (expected e.g. 100ms)");
            return false;
        }
    }
    p->lease_slice = (uint32_t)slice;
    p->lease_hold_ns = hold;
    bool ok = lease_fits(cx, n, p, p->win, p->nwin);
    for (size_t j = 0; j < p->n_plans; j++)
        ok &= lease_fits(cx, n, p, p->plans[j].win, p->plans[j].nwin);
    if (!ok) p->lease_slice = 0;
    return ok;
}

/* name (unique), description, objective. */
static bool parse_identity(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    bool ok = true;
    const sl_ynode *x;
    if ((x = sl__get(n, "name")) == NULL) {
        sl__err(cx, n, "a policy needs a name (expected name: api)");
        ok = false;
    } else if (!sl__is_scalar(x) || !name_ok(x->s)) {
        sl__err(cx, x, "bad policy name '%.60s' (expected letters, digits, '-', '_', '.', ':' "
                "and at most 200 of them)", sl__is_scalar(x) ? x->s : "");
        ok = false;
    } else {
        p->name = sl__keep(cx, x->s);
        const void *prev = NULL;
        int r = p->name ? sl__set_put(&cx->names, p->name, strlen(p->name), p, &prev) : -1;
        if (r < 0) {
            cx->cfg->arena.oom = true;
        } else if (r == 1) {
            const sl_cpolicy *q = prev;
            sl__err(cx, x, "duplicate policy name '%s' (first defined at %d:%d; expected "
                    "unique names)", p->name, q->line, q->col);
            ok = false;
        }
    }
    if ((x = sl__get(n, "description")) != NULL && sl__get_str(cx, x, "description") == NULL)
        ok = false;
    if ((x = sl__get(n, "objective")) == NULL) {
        /* optional: it documents the policy and labels its metrics; no peer asks for it */
        p->objective = "unspecified";
    } else {
        bool known = false;
        for (size_t i = 0; objectives[i]; i++)
            if (sl__is_scalar(x) && strcmp(x->s, objectives[i]) == 0) known = true;
        if (!known) {
            sl__err(cx, x, "unknown objective '%.40s' (expected protection, fairness, "
                    "security, cost, plan or contract)", sl__is_scalar(x) ? x->s : "");
            ok = false;
        } else {
            p->objective = sl__keep(cx, x->s);
        }
    }
    return ok;
}

/* key (one chain of parts, or [] for one global counter) and on_missing_key. */
static bool parse_key(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    bool ok = true;
    const sl_ynode *x;
    if ((x = sl__get(n, "key")) == NULL) {
        sl__err(cx, n, "policy '%s' needs a key (expected key: [client_ip], or key: [] for one "
                "global counter)", p->name ? p->name : "?");
        ok = false;
    } else {
        ok &= sl__parse_chain(cx, x, &p->chains[0]);
        p->n_chains = 1;
    }
    if ((x = sl__get(n, "on_missing_key")) != NULL) {
        if (p->chains[0].n == 0) {
            sl__err(cx, x, "on_missing_key with a global key (expected key parts that can be "
                    "missing)");
            ok = false;
        }
        ok &= parse_missing(cx, x, p);
    }
    return ok;
}

/* algorithm and limits (the windows), their costs checked against what each window can
 * ever give; *algo_set and *algo_bad tell the plans what the policy said. */
static bool parse_limits(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, const sl_ynode *cost_node,
                         bool *algo_set_out, bool *algo_bad_out) {
    bool ok = true, algo_set = false, algo_bad = false;
    const sl_ynode *x;
    if ((x = sl__get(n, "algorithm")) != NULL) {
        algo_bad = !sl__parse_algo(cx, x, &p->algo);
        ok &= !algo_bad;
        algo_set = true;
    }
    if (algo_bad) {
        /* the limits cannot be checked against an unknown algorithm: one error is enough */
    } else if ((x = sl__get(n, "limits")) == NULL) {
        sl__err(cx, n, "policy '%s' needs limits (expected limits: [{rate: 10/s, burst: 20}])",
                p->name ? p->name : "?");
        ok = false;
    } else {
        ok &= sl__parse_windows(cx, x, p, p->algo, algo_set, &p->win, &p->nwin);
        if (ok) sl__check_costs(cx, cost_node ? cost_node : x, p, p->win, p->nwin);
    }
    /* a concurrency window counts concurrent requests (sl__make_win says so per window);
     * the policy's unit becomes it only when every window is one, so a rate window beside
     * a concurrency window keeps its own unit and reset in RateLimit-Policy / RateLimit */
    bool all_conc = p->nwin > 0;
    for (size_t i = 0; i < p->nwin; i++)
        if (p->win[i].spec.algo != SLUICE_CONCURRENCY && p->win[i].spec.algo != SLUICE_ADAPTIVE_CONCURRENCY)
            all_conc = false;
    if (all_conc && p->qu == SL_QU_REQUESTS) p->qu = SL_QU_CONCURRENT;
    *algo_set_out = algo_set;
    *algo_bad_out = algo_bad;
    return ok;
}

/* plan_from and plans: per plan, its own limits (and algorithm), labelled POLICY@PLAN. */
static bool parse_plans(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, const sl_ynode *cost_node,
                        bool algo_set, bool algo_bad) {
    bool ok = true;
    const sl_ynode *pf = sl__get(n, "plan_from"), *pl = sl__get(n, "plans");
    if ((pf != NULL) != (pl != NULL)) {
        const sl_ynode *at = n;
        for (size_t i = 0; i < n->n; i++)
            if (n->v[2 * i + 1] == (pf ? pf : pl)) at = n->v[2 * i];
        sl__err(cx, at, "plans and plan_from go together (expected plan_from: "
                "header.x-plan and plans: {pro: {limits: [...]}})");
        ok = false;
    } else if (pl != NULL) {
        ok &= sl__parse_part(cx, pf, false, &p->plan_from);
        p->plan_from_set = true;
        if (pl->kind != SL_YMAP || pl->n == 0) {
            sl__err(cx, pl, "plans must be a mapping of plan name to {limits: [...]}");
            ok = false;
        } else {
            p->plans = sl__alloc(&cx->cfg->arena, pl->n * sizeof(*p->plans));
            if (p->plans == NULL) return false;
            for (size_t i = 0; i < pl->n; i++) {
                const sl_ynode *k = pl->v[2 * i], *v = pl->v[2 * i + 1];
                static const char *const plf[] = {"limits", "algorithm", NULL};
                if (!name_ok(k->s)) {
                    sl__err(cx, k, "bad plan name '%.40s' (expected letters, digits, '-', "
                            "'_', '.')", k->s);
                    ok = false;
                    continue;
                }
                if (!sl__check_fields(cx, v, "a plan", plf)) {
                    ok = false;
                    continue;
                }
                if (p->name != NULL && strlen(p->name) + 1 + strlen(k->s) > 255) {
                    /* the limiter identity is POLICY@PLAN, at most 255 bytes: a longer one
                     * would have to be cut, and two plans could then share counters */
                    sl__err(cx, k, "policy and plan name '%s@%.40s...' are %zu bytes together, "
                            "more than a limit's identity holds (expected at most 254 for both "
                            "names)", p->name, k->s, strlen(p->name) + strlen(k->s));
                    ok = false;
                    continue;
                }
                sl_cplan *cp = &p->plans[p->n_plans++];
                cp->name = sl__keep(cx, k->s);
                for (size_t j = 0; j + 1 < p->n_plans; j++)
                    if (strcmp(p->plans[j].name, cp->name) == 0) {
                        sl__err(cx, k, "duplicate plan '%s' (expected unique plan names)", cp->name);
                        ok = false;
                    }
                sluice_algo pa = p->algo;
                bool pa_set = algo_set;
                if (sl__get(v, "algorithm") != NULL) {
                    ok &= sl__parse_algo(cx, sl__get(v, "algorithm"), &pa);
                    pa_set = true;
                }
                const sl_ynode *lim = sl__get(v, "limits");
                if (algo_bad && sl__get(v, "algorithm") == NULL) continue; /* reported */
                if (lim == NULL) {
                    sl__err(cx, v, "plan '%s' needs limits (expected limits: [...])", cp->name);
                    ok = false;
                    continue;
                }
                char pname[256];
                snprintf(pname, sizeof(pname), "%s@%s", p->name ? p->name : "policy", cp->name);
                const char *saved = p->name;
                p->name = pname; /* labels and validation name the plan */
                bool wok = sl__parse_windows(cx, lim, p, pa, pa_set, &cp->win, &cp->nwin);
                p->name = saved;
                ok &= wok;
                if (wok) sl__check_costs(cx, cost_node ? cost_node : lim, p, cp->win, cp->nwin);
            }
        }
    }
    return ok;
}

/* on_exceed: reject, shadow or {delay: D} (1 ms to 5 min). */
static bool parse_on_exceed(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    bool ok = true;
    const sl_ynode *x;
    if ((x = sl__get(n, "on_exceed")) != NULL) {
        if (sl__is_scalar(x) && strcmp(x->s, "reject") == 0) {
            p->react = SL_REACT_REJECT;
        } else if (sl__is_scalar(x) && strcmp(x->s, "shadow") == 0) {
            p->react = SL_REACT_SHADOW;
            p->rollout_pct = 0;
        } else if (x->kind == SL_YMAP) {
            /* penalty and challenge: capacity.c (with the rest of capacity protection) */
            static const char *const df[] = {"delay", "penalty", "challenge", NULL};
            bool fields = sl__check_fields(cx, x, "on_exceed", df);
            if (fields && sl__get(x, "delay") == NULL &&
                (sl__get(x, "penalty") || sl__get(x, "challenge"))) {
                p->react = SL_REACT_REJECT;
            } else if (fields && sl__get(x, "delay") != NULL) {
                p->react = SL_REACT_DELAY;
                const sl_ynode *d = sl__get(x, "delay");
                if (sl__get_duration(cx, d, &p->max_delay_ns) &&
                    (p->max_delay_ns < SLUICE_NS_PER_MS || p->max_delay_ns > SL_MAX_DELAY_NS)) {
                    /* a delay holds the caller (a gateway's connection) that long: 0 would
                     * never delay, days would be a connection held for days */
                    sl__err(cx, d, "delay %.40s is out of range (expected 1ms to 5m; beyond "
                            "that, reject and let the client retry)", d->s);
                    ok = false;
                } else if (p->max_delay_ns == 0) {
                    ok = false;
                }
            } else {
                sl__err(cx, x, "bad on_exceed (expected reject, shadow or {delay: 2s})");
                ok = false;
            }
        } else {
            sl__err(cx, x, "bad on_exceed '%.40s' (expected reject, shadow or {delay: 2s})",
                    sl__is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    return ok;
}

/* mode: enforce, shadow or {rollout: P%} (never together with on_exceed: shadow). */
static bool parse_mode(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    bool ok = true;
    const sl_ynode *x;
    if ((x = sl__get(n, "mode")) != NULL) {
        if (sl__is_scalar(x) && strcmp(x->s, "enforce") == 0) {
            if (p->react == SL_REACT_SHADOW) {
                sl__err(cx, x, "mode enforce contradicts on_exceed: shadow (expected one)");
                ok = false;
            }
        } else if (sl__is_scalar(x) && strcmp(x->s, "shadow") == 0) {
            p->rollout_pct = 0;
        } else if (x->kind == SL_YMAP) {
            static const char *const rf[] = {"rollout", NULL};
            const sl_ynode *r = sl__get(x, "rollout");
            if (!sl__check_fields(cx, x, "mode", rf) || r == NULL || !sl__is_scalar(r)) {
                sl__err(cx, x, "bad mode (expected enforce, shadow or {rollout: 25%%})");
                ok = false;
            } else {
                char buf[16];
                snprintf(buf, sizeof(buf), "%s", r->s);
                size_t bl = strlen(buf);
                if (bl > 0 && buf[bl - 1] == '%') buf[bl - 1] = '\0';
                uint64_t pct;
                sl_ynode tmp = *r;
                tmp.s = buf;
                if (!sl__get_u64(cx, &tmp, 100, &pct)) {
                    ok = false;
                } else if (p->react == SL_REACT_SHADOW) {
                    /* shadow never rejects anyone: a rollout share would be ignored */
                    sl__err(cx, x, "mode {rollout: ...} contradicts on_exceed: shadow, which "
                            "enforces on nobody (expected one of them)");
                    ok = false;
                } else {
                    p->rollout_pct = (unsigned)pct;
                }
            }
        } else {
            sl__err(cx, x, "bad mode '%.40s' (expected enforce, shadow or {rollout: 25%%})",
                    sl__is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    return ok;
}

/* on_store_error, headers, leasing, count_rejected (fixed windows and quotas only). */
static bool parse_options(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, bool ok_so_far) {
    bool ok = true;
    const sl_ynode *x;
    if ((x = sl__get(n, "on_store_error")) != NULL) {
        if (sl__is_scalar(x) && strcmp(x->s, "open") == 0) p->fail_closed = false;
        else if (sl__is_scalar(x) && strcmp(x->s, "closed") == 0) p->fail_closed = true;
        else if (sl__is_scalar(x) && strcmp(x->s, "local") == 0) /* closed when it cannot */
            p->fail_closed = p->fail_local = true;
        else {
            sl__err(cx, x, "bad on_store_error '%.40s' (expected open, closed or local)",
                    sl__is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    if ((x = sl__get(n, "headers")) != NULL) ok &= sl__parse_headers_opt(cx, x, p);
    if ((x = sl__get(n, "leasing")) != NULL && ok && ok_so_far) ok &= sl__parse_leasing(cx, x, p);
    if ((x = sl__get(n, "count_rejected")) != NULL) {
        ok &= sl__get_bool(cx, x, &p->count_rejected);
        /* Charging a rejected request moves a bucket's retry time, which the rejection
         * already reported; window ends and period ends do not move, so only those
         * algorithms keep Retry-After exact. */
        bool fits = true;
        for (size_t i = 0; i < p->nwin; i++)
            if (p->win[i].spec.algo != SLUICE_FIXED_WINDOW && p->win[i].spec.algo != SLUICE_QUOTA)
                fits = false;
        for (size_t j = 0; j < p->n_plans; j++)
            for (size_t i = 0; i < p->plans[j].nwin; i++)
                if (p->plans[j].win[i].spec.algo != SLUICE_FIXED_WINDOW &&
                    p->plans[j].win[i].spec.algo != SLUICE_QUOTA)
                    fits = false;
        if (p->count_rejected && !fits) {
            sl__err(cx, x, "count_rejected needs fixed_window or quota limits (expected those "
                    "algorithms, whose Retry-After stays exact when rejections count)");
            ok = false;
        }
    }
    return ok;
}

/* Descriptors exist only on requests with a domain: without match.domain a descriptor
 * part (key, cost, plan_from) would silently never apply. */
static bool check_descriptor_parts(sl__ctx *cx, const sl_ynode *n, const sl_cpolicy *p) {
    bool ok = true;
    if (p->domain == NULL) {
        /* descriptors exist only on requests with a domain: without match.domain such a
         * part would silently never apply */
        if (p->plan_from_set && p->plan_from.kind == SL_PART_DESCRIPTOR) {
            sl__err(cx, sl__get(n, "plan_from"), "plan_from descriptor.%s needs match.domain "
                    "(expected an Envoy domain)", p->plan_from.name);
            ok = false;
        }
        if (p->cost_from_set && p->cost_from.kind == SL_PART_DESCRIPTOR) {
            const sl_ynode *cn = sl__get(n, "cost");
            sl__err(cx, cn && cn->kind == SL_YMAP && sl__get(cn, "from") ? sl__get(cn, "from") : cn,
                    "cost from descriptor.%s needs match.domain (expected an Envoy domain)",
                    p->cost_from.name);
            ok = false;
        }
        for (size_t c = 0; c < p->n_chains; c++)
            for (size_t i = 0; i < p->chains[c].n; i++)
                if (p->chains[c].parts[i].kind == SL_PART_DESCRIPTOR) {
                    sl__err(cx, sl__get(n, "key"), "key part descriptor.%s needs match.domain "
                            "(expected an Envoy domain)", p->chains[c].parts[i].name);
                    ok = false;
                }
    }
    return ok;
}

bool sl__parse_policy(sl__ctx *cx, const sl_ynode *n) {
    if (!sl__check_fields(cx, n, "a policy", policy_fields)) {
        if (n == NULL || n->kind != SL_YMAP) return false;
    }
    sl_cpolicy *p = sl__new_policy(cx);
    if (p == NULL) return false;
    p->line = n->line;
    p->col = n->col;
    const sl_ynode *x, *cost_node = sl__get(n, "cost");
    bool ok = parse_identity(cx, n, p), algo_set = false, algo_bad = false;
    if ((x = sl__get(n, "match")) != NULL) ok &= parse_match(cx, x, p);
    ok &= parse_key(cx, n, p);
    if (cost_node != NULL) ok &= parse_cost(cx, cost_node, p);
    ok &= parse_limits(cx, n, p, cost_node, &algo_set, &algo_bad);
    ok &= parse_plans(cx, n, p, cost_node, algo_set, algo_bad);
    ok &= parse_on_exceed(cx, n, p);
    ok &= parse_mode(cx, n, p);
    ok &= parse_options(cx, n, p, ok);
    if ((x = sl__get(n, "llm")) != NULL) ok &= sl__parse_llm(cx, x, p); /* config/llm.c */
    ok &= check_descriptor_parts(cx, n, p);
    if (ok) ok &= sl__parse_capacity(cx, n, p);
    return ok;
}

