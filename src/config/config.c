/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c -- loads the sluice config format: server settings and policies, each
 * validated field by field so that a config that loads is fully valid (unknown fields,
 * bad values and inconsistencies are errors with file:line:col, never ignored).
 * The envoyproxy/ratelimit format (envoy.c) is chosen when the top level has `domain`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "algo/algo.h"
#include "config/compiled.h"
#include "core/path.h"
#include "store/memory/memory.h"

#define MAX_WINDOWS 16

/* ---- context helpers ---------------------------------------------------------------- */

sl_cpolicy *sl__new_policy(sl__ctx *cx) {
    if (cx->n_pol == cx->cap_pol) {
        size_t nc = cx->cap_pol ? cx->cap_pol * 2 : 16;
        sl_cpolicy **np = realloc(cx->pol, nc * sizeof(*np));
        if (np == NULL) {
            cx->cfg->arena.oom = true;
            return NULL;
        }
        cx->pol = np;
        cx->cap_pol = nc;
    }
    sl_cpolicy *p = sl__alloc(&cx->cfg->arena, sizeof(*p));
    if (p == NULL) return NULL;
    p->rollout_pct = 100;
    p->headers = true;
    p->cost_default = 1;
    cx->pol[cx->n_pol++] = p;
    return p;
}

sl_edomain *sl__new_domain(sl__ctx *cx) {
    if (cx->n_dom == cx->cap_dom) {
        size_t nc = cx->cap_dom ? cx->cap_dom * 2 : 4;
        sl_edomain **nd = realloc(cx->dom, nc * sizeof(*nd));
        if (nd == NULL) {
            cx->cfg->arena.oom = true;
            return NULL;
        }
        cx->dom = nd;
        cx->cap_dom = nc;
    }
    sl_edomain *d = sl__alloc(&cx->cfg->arena, sizeof(*d));
    if (d == NULL) return NULL;
    cx->dom[cx->n_dom++] = d;
    return d;
}

char *sl__keep(sl__ctx *cx, const char *s) {
    return sl__strndup(&cx->cfg->arena, s, strlen(s));
}

char *sl__keep_lower(sl__ctx *cx, const char *s) {
    char *p = sl__keep(cx, s);
    if (p != NULL)
        for (char *q = p; *q; q++)
            if (*q >= 'A' && *q <= 'Z') *q = (char)(*q - 'A' + 'a');
    return p;
}


/* ---- key parts ---------------------------------------------------------------------- */

static bool header_name_ok(const char *s) {
    if (*s == '\0') return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

#define PART_EXPECTED                                                                   \
    "expected client_ip, client_ip/64, header.NAME, method, path, route, host, "       \
    "llm.model, llm.user or descriptor.NAME"

bool sl__parse_part(sl__ctx *cx, const sl_ynode *n, bool for_cost, sl_part *out) {
    memset(out, 0, sizeof(*out));
    if (!sl__is_scalar(n)) {
        sl__err(cx, n, "a key part must be a string (%s)", PART_EXPECTED);
        return false;
    }
    const char *s = n->s;
    if (for_cost) {
        if (strcmp(s, "body_bytes") == 0) {
            out->kind = SL_PART_BODY_BYTES;
            return true;
        }
    } else if (strcmp(s, "client_ip") == 0) {
        out->kind = SL_PART_CLIENT_IP;
        out->v6_prefix = 128;
        return true;
    } else if (strncmp(s, "client_ip/", 10) == 0) {
        char *end;
        long v = strtol(s + 10, &end, 10);
        if (*end != '\0' || v < 1 || v > 128 || s[10] < '0' || s[10] > '9') {
            sl__err(cx, n, "bad client_ip prefix '%.40s' (expected client_ip/N with N from 1 "
                    "to 128, e.g. client_ip/64 groups IPv6 clients by their /64)", s);
            return false;
        }
        out->kind = SL_PART_CLIENT_IP;
        out->v6_prefix = (unsigned)v;
        return true;
    } else if (strcmp(s, "method") == 0) {
        out->kind = SL_PART_METHOD;
        return true;
    } else if (strcmp(s, "path") == 0) {
        out->kind = SL_PART_PATH;
        return true;
    } else if (strcmp(s, "route") == 0) {
        out->kind = SL_PART_ROUTE;
        return true;
    } else if (strcmp(s, "host") == 0) {
        out->kind = SL_PART_HOST;
        return true;
    } else if (strcmp(s, "llm.model") == 0 || strcmp(s, "llm.user") == 0) {
        out->kind = s[4] == 'm' ? SL_PART_LLM_MODEL : SL_PART_LLM_USER; /* issue 24 */
        return true;
    }
    if (strncmp(s, "header.", 7) == 0 && header_name_ok(s + 7)) {
        out->kind = SL_PART_HEADER;
        out->name = sl__keep_lower(cx, s + 7);
        out->name_len = strlen(s + 7);
        return out->name != NULL;
    }
    if (strncmp(s, "descriptor.", 11) == 0 && s[11] != '\0') {
        out->kind = SL_PART_DESCRIPTOR;
        out->name = sl__keep(cx, s + 11);
        out->name_len = strlen(s + 11);
        return out->name != NULL;
    }
    if (for_cost)
        sl__err(cx, n, "bad cost attribute '%.60s' (expected header.NAME, body_bytes or "
                "descriptor.NAME)", s);
    else
        sl__err(cx, n, "bad key part '%.60s' (%s)", s, PART_EXPECTED);
    return false;
}

bool sl__parse_chain(sl__ctx *cx, const sl_ynode *n, sl_chain *c) {
    c->n = 0;
    if (sl__is_scalar(n)) {
        c->n = 1;
        return sl__parse_part(cx, n, false, &c->parts[0]);
    }
    if (!sl__is_seq(n)) {
        sl__err(cx, n, "a key must be a list of parts (%s)", PART_EXPECTED);
        return false;
    }
    if (n->n > SL_MAX_PARTS) {
        sl__err(cx, n, "a key has at most %d parts (expected fewer)", SL_MAX_PARTS);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < n->n; i++) ok &= sl__parse_part(cx, n->v[i], false, &c->parts[c->n++]);
    return ok;
}

/* ---- windows ------------------------------------------------------------------------ */

/* Two windows rendered under one RateLimit name would be indistinguishable to clients:
 * a name repeated in another policy is reported at the repeat's `name` (a hash set of
 * every label, so large configs stay linear). Within one policy or plan, parse_windows
 * already refused repeats; one policy's plans may reuse a name (one plan applies). */
static void check_labels(sl__ctx *cx) {
    sl__set set = {0};
    for (size_t i = 0; i < cx->n_pol; i++) {
        const sl_cpolicy *p = cx->pol[i];
        if (p->envoy || p->name == NULL) continue;
        for (size_t k = 0; k <= p->n_plans; k++) {
            const sl_cwindow *w = k == 0 ? p->win : p->plans[k - 1].win;
            size_t nw = k == 0 ? p->nwin : p->plans[k - 1].nwin;
            for (size_t a = 0; a < nw; a++) {
                if (w[a].label == NULL) continue;
                const void *prev;
                int r = sl__set_put(&set, w[a].label, strlen(w[a].label), p, &prev);
                if (r < 0) {
                    cx->cfg->arena.oom = true;
                    sl__set_free(&set);
                    return;
                }
                const sl_cpolicy *q = prev;
                if (r == 1 && q != p && strcmp(q->name, p->name) != 0) {
                    sl_ynode at = {.kind = SL_YSCALAR, .line = w[a].line, .col = w[a].col};
                    sl__err(cx, &at, "limit name '%s' is used twice (in policies '%s' and '%s'; "
                            "expected unique names)", w[a].label, q->name, p->name);
                }
            }
        }
    }
    sl__set_free(&set);
}

/* What one decision can hold, checked at load so the server never meets it per request:
 * - the store registers at most SL_STORE_MAX_FAMILIES limiter identities, and every
 *   engine adds OVR_LIMITERS of its own (the Envoy override windows);
 * - sliding-log states share one scratch arena per decision (src/engine/decide.c,
 *   BIG_ARENA: two full-size logs); states above SL_STORE_SMALL_STATE bytes come from it,
 *   each rounded up to 8 bytes. A request may match every policy at once (we cannot prove
 *   exclusivity of globs and headers), so the sum over policies is bounded; a policy with
 *   plans uses one plan (or its defaults) per request, so it counts its largest.
 *   Trade-off: conservative; a config whose sliding logs never meet on one request is
 *   refused too, and the message says how to fit (smaller logs, or another algorithm). */
#define OVR_LIMITERS 6 /* engine.c: envoy#override.second .. year */
#define CFG_MAX_LIMITERS (SL_STORE_MAX_FAMILIES - OVR_LIMITERS)
#define LOG_ARENA_BYTES (2 * (sizeof(sl_log_state) + sizeof(int64_t) * SL_SLIDING_LOG_MAX))

static uint64_t log_bytes(const sl_cwindow *w, size_t nw) {
    uint64_t sum = 0;
    for (size_t i = 0; i < nw; i++) {
        if (w[i].deny_all || w[i].spec.algo != SLUICE_SLIDING_LOG) continue;
        uint64_t ss = sizeof(sl_log_state) + sizeof(int64_t) * w[i].spec.limit;
        if (ss > SL_STORE_SMALL_STATE) sum += (ss + 7) & ~UINT64_C(7);
    }
    return sum;
}

/* Every limiter identity (name + index) once: two rules sharing one would share counters.
 * Names are the policy name, POLICY@PLAN, or the (escaped or hashed) Envoy tree path. */
static void check_identities(sl__ctx *cx) {
    sl__set set = {0};
    char buf[300];
    for (size_t i = 0; i < cx->n_pol; i++) {
        const sl_cpolicy *p = cx->pol[i];
        if (p->name == NULL) continue;
        for (size_t k = 0; k <= p->n_plans; k++) {
            const char *id = p->name;
            if (k > 0) {
                snprintf(buf, sizeof(buf), "%s@%s", p->name, p->plans[k - 1].name);
                id = buf;
            }
            if (strlen(id) > 255) {
                sl_ynode at = {.kind = SL_YMAP, .line = p->line, .col = p->col};
                sl__err(cx, &at, "limit identity '%.60s...' is longer than 255 bytes "
                        "(expected a shorter name)", id);
                continue;
            }
            char *kept = sl__strndup(&cx->tmp, id, strlen(id));
            const void *prev;
            int r = kept ? sl__set_put(&set, kept, strlen(kept), p, &prev) : -1;
            if (r < 0) {
                cx->cfg->arena.oom = true;
                sl__set_free(&set);
                return;
            }
            if (r == 1) {
                const sl_cpolicy *q = prev;
                sl_ynode at = {.kind = SL_YMAP, .line = p->line, .col = p->col};
                sl__err(cx, &at, "limit identity '%.80s' is also that of the rule at %d:%d: "
                        "they would share counters (expected distinct rules)", id, q->line,
                        q->col);
            }
        }
    }
    sl__set_free(&set);
}

/* ---- how many windows one request can meet ------------------------------------------ */

/* The literal part of a pattern before its first '*' (all of it for an exact one). */
static size_t literal_len(const char *s, bool glob) {
    if (!glob) return strlen(s);
    const char *star = strchr(s, '*');
    return star ? (size_t)(star - s) : strlen(s);
}

/* Whether two patterns can match one string: their literal beginnings must agree, and
 * two exact strings must be equal. Conservative: true whenever unsure. */
static bool patterns_meet(const char *a, bool aglob, const char *b, bool bglob) {
    size_t la = literal_len(a, aglob), lb = literal_len(b, bglob);
    size_t n = la < lb ? la : lb;
    if (strncmp(a, b, n) != 0) return false;
    if (!aglob && !bglob) return strcmp(a, b) == 0;
    if (!aglob && la < lb) return false; /* a is exact and shorter than b's literal part */
    if (!bglob && lb < la) return false;
    return true;
}

static bool path_glob(sl_path_kind k) { return k != SL_PATH_EXACT; }

/* Whether policies p and q (HTTP attribute policies) can match the same request. */
static bool may_overlap(const sl_cpolicy *p, const sl_cpolicy *q) {
    if (p->n_methods > 0 && q->n_methods > 0) {
        bool common = false;
        for (size_t i = 0; i < p->n_methods && !common; i++)
            for (size_t j = 0; j < q->n_methods && !common; j++)
                common = strcmp(p->methods[i], q->methods[j]) == 0;
        if (!common) return false;
    }
    if (p->path_kind != SL_PATH_ANY && q->path_kind != SL_PATH_ANY &&
        !patterns_meet(p->path, path_glob(p->path_kind), q->path, path_glob(q->path_kind)))
        return false;
    if (p->host != NULL && q->host != NULL &&
        !patterns_meet(p->host, strchr(p->host, '*') != NULL, q->host, strchr(q->host, '*') != NULL))
        return false;
    for (size_t i = 0; i < p->n_hdr; i++)
        for (size_t j = 0; j < q->n_hdr; j++) {
            const sl_hdr_cond *a = &p->hdr[i], *b = &q->hdr[j];
            if (strcmp(a->name, b->name) != 0) continue;
            bool a_absent = a->pattern == NULL && !a->present, b_absent = b->pattern == NULL && !b->present;
            if (a_absent != b_absent) return false; /* one needs it, the other its absence */
            if (a->pattern != NULL && b->pattern != NULL &&
                !patterns_meet(a->pattern, strchr(a->pattern, '*') != NULL, b->pattern,
                               strchr(b->pattern, '*') != NULL))
                return false;
        }
    return true;
}

/* The most windows one request can bring in for p (its plans' or its own). */
static size_t max_windows(const sl_cpolicy *p) {
    size_t n = p->nwin;
    for (size_t k = 0; k < p->n_plans; k++)
        if (p->plans[k].nwin > n) n = p->plans[k].nwin;
    return n;
}

/*
 * One decision holds at most SLUICE_MAX_ITEMS windows: a request matching more is an
 * error at run time (500). Refused at load instead, for attribute (HTTP) policies: for
 * each policy, its windows plus those of every policy that can match the same request
 * (a conservative test: methods, paths, hosts and header conditions that exclude each
 * other are seen, glob overlaps are assumed). Envoy descriptors are bounded per request
 * by the request itself (16 descriptors): a request over the bound gets its own error.
 */
typedef struct lit_ent {
    const char *lit; /* a path's literal beginning (the part before any '*') */
    size_t len;
    size_t pol;      /* index into cx->pol */
} lit_ent;

static int lit_cmp(const void *a, const void *b) {
    const lit_ent *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->lit, y->lit, n);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* The first entry whose literal is >= (lit, len) in sorted order. */
static size_t lit_lower(const lit_ent *e, size_t n, const char *lit, size_t len) {
    size_t lo = 0, hi = n;
    lit_ent key = {lit, len, 0};
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (lit_cmp(&e[mid], &key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Adds q's windows to p's count when they can meet; false once over the limit. */
static bool count_meet(sl__ctx *cx, size_t i, size_t j, size_t *total, size_t *others) {
    const sl_cpolicy *p = cx->pol[i], *q = cx->pol[j];
    if (j == i || q->envoy || q->domain != NULL || !may_overlap(p, q)) return true;
    *total += max_windows(q);
    (*others)++;
    return *total <= SLUICE_MAX_ITEMS;
}

/*
 * One decision holds at most SLUICE_MAX_ITEMS windows: a request matching more is an
 * error at run time (400). Refused at load instead, for attribute (HTTP) policies: for
 * each policy, its windows plus those of every policy that can match the same request
 * (a conservative test: methods, paths, hosts and header conditions that exclude each
 * other are seen, glob overlaps are assumed). Envoy descriptors are bounded per request
 * by the request itself (16 descriptors): a request over the bound gets its own error.
 * Why sorted path literals: two paths can meet only when one's literal beginning starts
 * the other's, so a policy is compared with the policies without a path, those whose
 * literal starts with its own (one range of the sorted list) and those whose literal is
 * one of its own beginnings (one lookup per length): 10,000 policies load in
 * milliseconds, where comparing every pair took seconds.
 */
static void check_overlap(sl__ctx *cx) {
    lit_ent *e = cx->n_pol ? calloc(cx->n_pol, sizeof(*e)) : NULL;
    size_t *any = cx->n_pol ? calloc(cx->n_pol, sizeof(*any)) : NULL;
    if (cx->n_pol && (e == NULL || any == NULL)) {
        free(e);
        free(any);
        cx->cfg->arena.oom = true;
        return;
    }
    size_t ne = 0, nany = 0;
    for (size_t i = 0; i < cx->n_pol; i++) {
        const sl_cpolicy *p = cx->pol[i];
        if (p->envoy || p->domain != NULL) continue;
        if (p->path_kind == SL_PATH_ANY) any[nany++] = i;
        else e[ne++] = (lit_ent){p->path, literal_len(p->path, path_glob(p->path_kind)), i};
    }
    if (ne > 1) qsort(e, ne, sizeof(*e), lit_cmp);
    for (size_t i = 0; i < cx->n_pol; i++) {
        const sl_cpolicy *p = cx->pol[i];
        if (p->envoy || p->domain != NULL) continue;
        size_t total = max_windows(p), others = 0;
        bool ok = true;
        for (size_t k = 0; k < nany && ok; k++) ok = count_meet(cx, i, any[k], &total, &others);
        if (p->path_kind == SL_PATH_ANY) { /* meets any path */
            for (size_t k = 0; k < ne && ok; k++) ok = count_meet(cx, i, e[k].pol, &total, &others);
        } else {
            const char *lit = p->path;
            size_t len = literal_len(lit, path_glob(p->path_kind));
            /* literals that start with this one (itself included) */
            for (size_t k = lit_lower(e, ne, lit, len); k < ne && ok && e[k].len >= len &&
                                                        memcmp(e[k].lit, lit, len) == 0;
                 k++)
                ok = count_meet(cx, i, e[k].pol, &total, &others);
            /* literals that are a beginning of this one */
            for (size_t l = 0; l < len && ok; l++)
                for (size_t k = lit_lower(e, ne, lit, l); k < ne && ok && e[k].len == l &&
                                                          memcmp(e[k].lit, lit, l) == 0;
                     k++)
                    ok = count_meet(cx, i, e[k].pol, &total, &others);
        }
        if (total > SLUICE_MAX_ITEMS) {
            /* the search stopped at the first count over the limit: the message gives the
             * whole count (once, for the one policy named) */
            total = max_windows(p), others = 0;
            for (size_t j = 0; j < cx->n_pol; j++)
                (void)count_meet(cx, i, j, &total, &others);
            sl_ynode at = {.kind = SL_YMAP, .line = p->line, .col = p->col};
            sl__err(cx, &at, "policy '%.60s' and %zu others can match one request: %zu windows "
                    "in one decision, more than the %d it can hold (expected narrower match "
                    "conditions, or fewer windows)", p->name ? p->name : "", others, total,
                    SLUICE_MAX_ITEMS);
            break; /* one error says it */
        }
    }
    free(e);
    free(any);
}

static void check_totals(sl__ctx *cx) {
    check_identities(cx);
    check_overlap(cx);
    size_t lims = 0;
    uint64_t logs = 0;
    bool lim_done = false, log_done = false;
    for (size_t i = 0; i < cx->n_pol; i++) {
        const sl_cpolicy *p = cx->pol[i];
        sl_ynode at = {.kind = SL_YMAP, .line = p->line, .col = p->col};
        lims += p->nwin;
        uint64_t lb = log_bytes(p->win, p->nwin);
        for (size_t k = 0; k < p->n_plans; k++) {
            lims += p->plans[k].nwin;
            uint64_t pb = log_bytes(p->plans[k].win, p->plans[k].nwin);
            if (pb > lb) lb = pb;
        }
        if (lims > CFG_MAX_LIMITERS && !lim_done) {
            sl__err(cx, &at, "too many limits: this %s brings the config to %zu limiters, more "
                    "than the store holds (expected at most %d windows and plan windows in "
                    "all)", p->envoy ? "rule" : "policy", lims, CFG_MAX_LIMITERS);
            lim_done = true;
        }
        logs += lb;
        if (logs > LOG_ARENA_BYTES && !log_done) {
            sl__err(cx, &at, "sliding_log windows too large for one decision: with this %s "
                    "they need %llu bytes of state per request, more than the %llu a "
                    "decision holds (expected a smaller sum of sliding_log limits, about %d "
                    "timestamps in all, or another algorithm such as sliding_window)",
                    p->envoy ? "rule" : "policy", (unsigned long long)logs,
                    (unsigned long long)LOG_ARENA_BYTES, 2 * SL_SLIDING_LOG_MAX);
            log_done = true;
        }
    }
}

void sl__load_root(sl__ctx *cx, const sl_ynode *root) {
    if (root->kind != SL_YMAP) {
        sl__err(cx, root, "the config must be a mapping (expected policies: [...] or domain: "
                "...)");
        return;
    }
    if (sl__get(root, "domain") != NULL || sl__get(root, "descriptors") != NULL) {
        cx->cfg->envoy_format = true;
        sl__envoy_load(cx, root);
        return;
    }
    static const char *const top[] = {"listen", "workers", "admin", "auth", "client_ip", "headers",
                                      "log", "store", "policies", "domains", "observe",
                                      "audit", "overrides", NULL};
    sl__check_fields(cx, root, "the config", top);
    sl__parse_settings(cx, root, &cx->cfg->settings);
    const sl_ynode *pols = sl__get(root, "policies"), *doms = sl__get(root, "domains");
    if (pols == NULL && doms == NULL) {
        sl__err(cx, root, "no policies (expected 'policies:' or 'domains:')");
        return;
    }
    if (pols != NULL) {
        if (!sl__is_seq(pols)) sl__err(cx, pols, "policies must be a list (expected - name: ...)");
        else
            for (size_t i = 0; i < pols->n; i++) sl__parse_policy(cx, pols->v[i]);
    }
    if (doms != NULL) {
        if (!sl__is_seq(doms))
            sl__err(cx, doms, "domains must be a list of envoyproxy/ratelimit configs "
                    "(expected - domain: ...)");
        else
            for (size_t i = 0; i < doms->n; i++) sl__envoy_load(cx, doms->v[i]);
    }
}

void sl__load_begin(sl__ctx *cx, sl_config *cfg, sl_diag_list *diags) {
    memset(cx, 0, sizeof(*cx));
    sl__settings_defaults(&cfg->settings);
    cx->cfg = cfg;
    cx->dl = diags;
}

/* The checks over everything loaded, then the config (SLUICE_OK, *out set) or the
 * errors; frees the loader's state and, on failure, cfg. */
int sl__load_end(sl__ctx *cx, bool parsed, sl_config **out) {
    sl_config *cfg = cx->cfg;
    if (parsed) check_labels(cx);
    if (parsed && cx->errors == 0) check_totals(cx);
    sl__set_free(&cx->names);
    sl__arena_free(&cx->tmp);
    if (!cfg->arena.oom && cx->errors == 0) {
        cfg->pol = sl__alloc(&cfg->arena, (cx->n_pol ? cx->n_pol : 1) * sizeof(*cfg->pol));
        cfg->domains = sl__alloc(&cfg->arena, (cx->n_dom ? cx->n_dom : 1) * sizeof(*cfg->domains));
        if (cfg->pol != NULL && cfg->domains != NULL) {
            for (size_t i = 0; i < cx->n_pol; i++) {
                cfg->pol[i] = *cx->pol[i];
                cfg->n_limiters += cfg->pol[i].nwin;
                for (size_t j = 0; j < cfg->pol[i].n_plans; j++)
                    cfg->n_limiters += cfg->pol[i].plans[j].nwin;
            }
            cfg->n_pol = cx->n_pol;
            for (size_t i = 0; i < cx->n_dom; i++) cfg->domains[i] = *cx->dom[i];
            cfg->n_domains = cx->n_dom;
        }
    }
    free(cx->pol);
    free(cx->dom);
    if (cfg->arena.oom) {
        sl_config_destroy(cfg);
        return SLUICE_ENOMEM;
    }
    if (cx->errors > 0) {
        sl_config_destroy(cfg);
        return SLUICE_EINVAL;
    }
    *out = cfg;
    return SLUICE_OK;
}

int sl_config_load_buffer(const char *buf, size_t len, const char *name, sl_config **out,
                          sl_diag_list *diags) {
    if (out != NULL) *out = NULL;
    if (diags != NULL) {
        diags->n = 0;
        diags->dropped = 0;
        snprintf(diags->file, sizeof(diags->file), "%s", name ? name : "<config>");
    }
    if (buf == NULL || out == NULL) return SLUICE_EINVAL;
    sl_config *cfg = calloc(1, sizeof(*cfg));
    if (cfg == NULL) return SLUICE_ENOMEM;
    sl__ctx cx;
    sl__load_begin(&cx, cfg, diags);
    sl_ynode *root = sl__yaml_parse(&cx, buf, len);
    if (root != NULL) sl__load_root(&cx, root);
    return sl__load_end(&cx, root != NULL, out);
}

#define MAX_CONFIG_BYTES (16u << 20)

/* Edit distance with adjacent transpositions (optimal string alignment): "burts" is one
 * edit from "burst". Words are field names (short); longer ones are cut at 63. */
static size_t edit_distance(const char *a, const char *b) {
    size_t n = strnlen(a, 63), m = strnlen(b, 63);
    unsigned char d[64][64]; /* distances <= 63 */
    for (size_t i = 0; i <= n; i++) d[i][0] = (unsigned char)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (unsigned char)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if ((size_t)d[i - 1][j] + 1 < c) c = (size_t)d[i - 1][j] + 1;
            if ((size_t)d[i][j - 1] + 1 < c) c = (size_t)d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                (size_t)d[i - 2][j - 2] + 1 < c)
                c = (size_t)d[i - 2][j - 2] + 1;
            d[i][j] = (unsigned char)c;
        }
    return d[n][m];
}

const char *sl__did_you_mean(const char *word, const char *const *known) {
    size_t len = strlen(word), best = SIZE_MAX;
    const char *pick = NULL;
    bool tie = false;
    /* close enough to be a slip: 1 edit for short words, about one in three for longer */
    size_t limit = len <= 4 ? 1 : len / 3 + 1;
    for (size_t i = 0; known[i] != NULL; i++) {
        size_t e = edit_distance(word, known[i]);
        if (e < best) best = e, pick = known[i], tie = false;
        else if (e == best) tie = true;
    }
    return pick != NULL && best > 0 && best <= limit && !tie ? pick : NULL;
}

bool sl__get_count(sl__ctx *cx, const sl_ynode *n, const char *field, uint64_t max, uint64_t *out) {
    if (n == NULL || n->kind != SL_YSCALAR) {
        sl__err(cx, n, "%s is not a number (expected a whole number >= 0)", field);
        return false;
    }
    const char *s = n->s;
    if (s[0] == '-' && s[1] >= '0' && s[1] <= '9') {
        sl__err(cx, n, "%s must be >= 0, not %.40s (expected a whole number)", field, s);
        return false;
    }
    /* digits, `_` only between two of them (as sl__get_u64 reads them) */
    uint64_t v = 0;
    bool ok = s[0] != '\0';
    for (const char *p = s; *p && ok; p++) {
        if (*p == '_') ok = p != s && p[-1] >= '0' && p[-1] <= '9' && p[1] >= '0' && p[1] <= '9';
        else if (*p < '0' || *p > '9' || v > (UINT64_MAX - 9) / 10) ok = false;
        else v = v * 10 + (uint64_t)(*p - '0');
    }
    if (!ok) {
        sl__err(cx, n, "bad number '%.40s' for %s (expected a whole number >= 0)", s, field);
        return false;
    }
    if (v > max) {
        sl__err(cx, n, "number %.40s is too large for %s (expected at most %llu)", s, field,
                (unsigned long long)max);
        return false;
    }
    *out = v;
    return true;
}

char *sl__read_file(const char *path, size_t *len, const char **why) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        /* the reason (no such file, permission denied...) is what the user acts on */
        static _Thread_local char msg[160];
        snprintf(msg, sizeof(msg), "cannot open the file: %s (expected a readable YAML file)",
                 strerror(errno));
        *why = msg;
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n == cap) {
            if (cap >= MAX_CONFIG_BYTES) break;
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0) break;
        n += r;
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (buf == NULL) {
        *why = "out of memory";
        return NULL;
    }
    if (err || n >= MAX_CONFIG_BYTES) {
        free(buf);
        *why = err ? "read error" : "file too large (expected at most 16 MiB)";
        return NULL;
    }
    *len = n;
    return buf;
}

int sl_config_load(const char *path, sl_config **out, sl_diag_list *diags) {
    return sl_config_load_seen(path, out, diags, NULL, NULL);
}

int sl_config_load_seen(const char *path, sl_config **out, sl_diag_list *diags,
                        void (*seen)(void *ud, const char *buf, size_t len), void *ud) {
    if (out != NULL) *out = NULL;
    if (diags != NULL) {
        diags->n = 0;
        diags->dropped = 0;
        snprintf(diags->file, sizeof(diags->file), "%s", path ? path : "<config>");
    }
    if (path == NULL || out == NULL) return SLUICE_EINVAL;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return sl_config_load_dir(path, out, diags);
    size_t len = 0;
    const char *why = NULL;
    char *buf = sl__read_file(path, &len, &why);
    if (buf == NULL) {
        if (diags != NULL) {
            diags->n = 1;
            diags->items[0].line = 0;
            diags->items[0].col = 0;
            snprintf(diags->items[0].msg, sizeof(diags->items[0].msg), "%s", why);
        }
        return strcmp(why, "out of memory") == 0 ? SLUICE_ENOMEM : SLUICE_EIO;
    }
    if (seen != NULL) seen(ud, buf, len);
    char name[256];
    snprintf(name, sizeof(name), "%s", path);
    int rc = sl_config_load_buffer(buf, len, name, out, diags);
    free(buf);
    return rc;
}

void sl_config_destroy(sl_config *cfg) {
    if (cfg == NULL) return;
    sl__arena_free(&cfg->arena);
    free(cfg);
}

const sl_settings *sl_config_settings(const sl_config *cfg) { return cfg ? &cfg->settings : NULL; }
size_t sl_config_policy_count(const sl_config *cfg) { return cfg ? cfg->n_pol : 0; }
const char *sl_config_policy_name(const sl_config *cfg, size_t i) {
    return cfg && i < cfg->n_pol ? cfg->pol[i].name : NULL;
}
size_t sl_config_limiter_count(const sl_config *cfg) { return cfg ? cfg->n_limiters : 0; }
bool sl_config_is_envoy(const sl_config *cfg) { return cfg && cfg->envoy_format; }
size_t sl_config_domain_count(const sl_config *cfg) { return cfg ? cfg->n_domains : 0; }
bool sl_config_policy_fails_closed(const sl_config *cfg, size_t i) {
    return cfg != NULL && i < cfg->n_pol && cfg->pol[i].fail_closed;
}

static bool keys_on_client_ip(const sl_cpolicy *cp) {
    for (size_t c = 0; c < cp->n_chains; c++)
        for (size_t k = 0; k < cp->chains[c].n; k++)
            if (cp->chains[c].parts[k].kind == SL_PART_CLIENT_IP) return true;
    if (cp->cap != NULL && cp->cap->pen_key_set)
        for (size_t k = 0; k < cp->cap->pen_key.n; k++)
            if (cp->cap->pen_key.parts[k].kind == SL_PART_CLIENT_IP) return true;
    return false;
}

bool sl_config_client_ip_warning(const sl_config *cfg, char *msg, size_t len, int *line, int *col) {
    if (cfg == NULL) return false;
    const sl_client_ip_cfg *c = &cfg->settings.client_ip;
    const sl_cpolicy *cp = NULL;
    for (size_t i = 0; i < cfg->n_pol && cp == NULL; i++)
        if (!cfg->pol[i].envoy && keys_on_client_ip(&cfg->pol[i])) cp = &cfg->pol[i];
    if (cp == NULL) return false;
    if (c->mode == SL_CIP_LEGACY || c->mode == SL_CIP_PLAIN) {
        *line = c->mode == SL_CIP_LEGACY ? cp->line : c->line;
        *col = c->mode == SL_CIP_LEGACY ? cp->col : c->col;
        snprintf(msg, len,
                 "policy '%.100s' keys on client_ip, read on /v1/auth from %s with no trusted proxies: "
                 "a client that sends its own %s chooses its key (behind a gateway that appends, such "
                 "as nginx's $proxy_add_x_forwarded_for); set client_ip: {header: %s, trusted: [the "
                 "gateway's address]} or client_ip: peer (docs/operations.md)",
                 cp->name, c->mode == SL_CIP_LEGACY ? "the left-most X-Forwarded-For (else X-Real-IP)" : c->header,
                 c->mode == SL_CIP_LEGACY ? "X-Forwarded-For" : c->header,
                 c->mode == SL_CIP_LEGACY ? "X-Forwarded-For" : c->header);
        return true;
    }
    if (c->mode == SL_CIP_PEER && c->mapping) {
        /* {header: X} alone: nothing trusted, so the header is never read */
        *line = c->line;
        *col = c->col;
        snprintf(msg, len,
                 "policy '%.100s' keys on client_ip, but client_ip trusts no proxy (no trusted:, no "
                 "hops:): %s is never read and /v1/auth counts the peer, so every client behind one "
                 "gateway shares a key; add trusted: [the gateway's address] (or write client_ip: peer)",
                 cp->name, c->header);
        return true;
    }
    return false;
}

bool sl_config_policy_grpc_shaping(const sl_config *cfg, size_t i, char *msg, size_t len, int *line,
                                   int *col) {
    if (cfg == NULL || i >= cfg->n_pol) return false;
    const sl_cpolicy *cp = &cfg->pol[i];
    if (cp->envoy || cp->domain == NULL) return false; /* only a domain policy meets gRPC */
    bool leaky = cp->algo == SLUICE_LEAKY_BUCKET;
    for (size_t w = 0; w < cp->nwin; w++) leaky |= cp->win[w].spec.algo == SLUICE_LEAKY_BUCKET;
    bool react = cp->react == SL_REACT_DELAY;
    if (!leaky && !react) return false;
    if (line) *line = cp->line;
    if (col) *col = cp->col;
    if (msg != NULL && len > 0)
        snprintf(msg, len,
                 "policy '%.100s' (domain '%.60s') %s: over gRPC Envoy cannot hold a request, so %s",
                 cp->name, cp->domain, leaky ? "shapes with a leaky_bucket" : "delays with on_exceed: delay",
                 leaky ? "a delayed admission is answered OK at once (counted, not held) with "
                         "X-Sluice-Delay-Ms in response_headers_to_add: the rate holds only as a burst "
                         "of the bucket's size; for a hard rate use token_bucket or gcra"
                       : "the delay is answered OVER_LIMIT with Retry-After and a problem body "
                         "(nothing counted): the client retries, Envoy does not wait");
    return true;
}

bool sl_config_policy_needs_finish(const sl_config *cfg, size_t i, char *msg, size_t len, int *line,
                                   int *col) {
    if (cfg == NULL || i >= cfg->n_pol) return false;
    const sl_cpolicy *cp = &cfg->pol[i];
    bool conc = cp->algo == SLUICE_CONCURRENCY;
    if (!conc && !cp->settle) return false;
    if (line) *line = cp->line;
    if (col) *col = cp->col;
    if (msg != NULL && len > 0)
        snprintf(msg, len,
                 "policy '%.100s' %s: behind a forward-auth gateway (nginx auth_request, Traefik "
                 "forwardAuth, Caddy forward_auth, HAProxy) this works only if the gateway calls "
                 "/v1/finish with the X-Sluice-Token when the response ends (examples/nginx/"
                 "sluice-finish.conf); otherwise it behaves as a rate: %s",
                 cp->name, conc ? "holds a concurrency slot per request" : "settles its cost after the response",
                 conc ? "each request holds its slot for the whole lease" : "every request is charged the reserved cost");
    return true;
}
