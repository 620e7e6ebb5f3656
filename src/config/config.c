/*
 * config.c -- loads the sluice config format: server settings and policies, each
 * validated field by field so that a config that loads is fully valid (unknown fields,
 * bad values and inconsistencies are errors with file:line:col, never ignored).
 * The envoyproxy/ratelimit format (envoy.c) is chosen when the top level has `domain`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "config/compiled.h"
#include "core/path.h"
#include "store/memory.h"

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

static char *keep(sl__ctx *cx, const char *s) {
    return sl__strndup(&cx->cfg->arena, s, strlen(s));
}

static char *keep_lower(sl__ctx *cx, const char *s) {
    char *p = keep(cx, s);
    if (p != NULL)
        for (char *q = p; *q; q++)
            if (*q >= 'A' && *q <= 'Z') *q = (char)(*q - 'A' + 'a');
    return p;
}

static bool is_seq(const sl_ynode *n) { return n != NULL && n->kind == SL_YSEQ; }
static bool is_scalar(const sl_ynode *n) { return n != NULL && n->kind == SL_YSCALAR; }

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
    "expected client_ip, client_ip/64, header.NAME, method, path, route, host or "     \
    "descriptor.NAME"

bool sl__parse_part(sl__ctx *cx, const sl_ynode *n, bool for_cost, sl_part *out) {
    memset(out, 0, sizeof(*out));
    if (!is_scalar(n)) {
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
    }
    if (strncmp(s, "header.", 7) == 0 && header_name_ok(s + 7)) {
        out->kind = SL_PART_HEADER;
        out->name = keep_lower(cx, s + 7);
        out->name_len = strlen(s + 7);
        return out->name != NULL;
    }
    if (strncmp(s, "descriptor.", 11) == 0 && s[11] != '\0') {
        out->kind = SL_PART_DESCRIPTOR;
        out->name = keep(cx, s + 11);
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

static bool parse_chain(sl__ctx *cx, const sl_ynode *n, sl_chain *c) {
    c->n = 0;
    if (is_scalar(n)) {
        c->n = 1;
        return sl__parse_part(cx, n, false, &c->parts[0]);
    }
    if (!is_seq(n)) {
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

static const char *const window_fields[] = {"name", "rate", "burst", "quota", "tz", "max",
                                            "lease", "max_delay", "algorithm", SL_ADAPTIVE_FIELDS,
                                            NULL};

static const char *algo_str(sluice_algo a) {
    const char *n = sluice_algo_name(a);
    return n ? n : "an unknown algorithm";
}

static bool algo_has_burst(sluice_algo a) {
    return a == SLUICE_TOKEN_BUCKET || a == SLUICE_GCRA || a == SLUICE_LEAKY_BUCKET;
}

static bool parse_algo(sl__ctx *cx, const sl_ynode *n, sluice_algo *out) {
    if (!is_scalar(n) || sluice_algo_parse(n->s, out) != SLUICE_OK) {
        sl__err(cx, n, "unknown algorithm '%.40s' (expected fixed_window, sliding_window, "
                "sliding_log, token_bucket, gcra, leaky_bucket, concurrency, adaptive_concurrency "
                "or quota)",
                is_scalar(n) ? n->s : "");
        return false;
    }
    return true;
}

#define SL_MAX_DELAY_NS (300 * SLUICE_NS_PER_S)

static bool get_duration(sl__ctx *cx, const sl_ynode *n, int64_t *ns) {
    if (!is_scalar(n) || !sl__parse_duration(n->s, ns)) {
        sl__err(cx, n, "bad duration '%.40s' (expected a number and a unit such as 500ms, "
                "30s, 5m, 1h, 1d)", is_scalar(n) ? n->s : "");
        return false;
    }
    return true;
}

bool sl__parse_window(sl__ctx *cx, const sl_ynode *n, sluice_algo algo, bool algo_set,
                      sl_cwindow *w) {
    memset(w, 0, sizeof(*w));
    if (!sl__check_fields(cx, n, "a limit", window_fields)) return false;
    w->line = n->line;
    w->col = n->col;
    bool ok = true;
    const sl_ynode *rate = sl__get(n, "rate"), *quota = sl__get(n, "quota"),
                   *max = sl__get(n, "max"), *an = sl__get(n, "algorithm");
    int kinds = (rate != NULL) + (quota != NULL) + (max != NULL);
    if (kinds != 1) {
        sl__err(cx, n, "%s (expected exactly one of rate: N/unit, quota: N/period, max: N)",
                kinds ? "a limit states one of rate, quota, max" : "a limit needs a size");
        return false;
    }
    sluice_algo a = algo;
    if (an != NULL) {
        if (!parse_algo(cx, an, &a)) return false;
    } else if (quota != NULL) {
        a = SLUICE_QUOTA;
    } else if (max != NULL) {
        a = algo_set && algo == SLUICE_ADAPTIVE_CONCURRENCY ? algo : SLUICE_CONCURRENCY;
    } else if (!algo_set) {
        sl__err(cx, n, "no algorithm for this rate (expected 'algorithm:' on the policy or "
                "the limit)");
        return false;
    }
    w->spec.algo = a;
    if (a == SLUICE_QUOTA) {
        if (quota == NULL) {
            sl__err(cx, n, "the quota algorithm counts per calendar period (expected quota: "
                    "N/hour, N/day, N/week or N/month)");
            return false;
        }
        if (!is_scalar(quota) ||
            !sl__parse_quota(quota->s, &w->spec.limit, &w->spec.quota_period)) {
            sl__err(cx, quota, "bad quota '%.40s' (expected N/hour, N/day, N/week or N/month, "
                    "e.g. 50000/day)", is_scalar(quota) ? quota->s : "");
            ok = false;
        }
    } else if (a == SLUICE_CONCURRENCY || a == SLUICE_ADAPTIVE_CONCURRENCY) {
        if (max == NULL) {
            sl__err(cx, n, "a concurrency limit counts requests in flight (expected max: N)");
            return false;
        }
        ok &= sl__get_u64(cx, max, UINT32_MAX, &w->spec.limit);
        w->spec.lease_ns = 60 * SLUICE_NS_PER_S;
    } else {
        if (rate == NULL) {
            sl__err(cx, n, "algorithm %s needs a rate (expected rate: N/unit such as 10/s)",
                    algo_str(a));
            return false;
        }
        if (!is_scalar(rate) || !sl__parse_rate(rate->s, &w->spec.limit, &w->spec.period_ns)) {
            sl__err(cx, rate, "bad rate '%.40s' (expected N/unit with unit s, min, h, day or "
                    "week, or N/duration such as 100/5m)", is_scalar(rate) ? rate->s : "");
            ok = false;
        } else if (w->spec.limit == 0) {
            sl__err(cx, rate, "rate %.40s admits nothing (expected a limit of at least 1)",
                    rate->s);
            ok = false;
        }
    }
    const sl_ynode *x;
    if ((x = sl__get(n, "burst")) != NULL) {
        if (!algo_has_burst(a)) {
            sl__err(cx, x, "burst applies to token_bucket, gcra and leaky_bucket, not %s "
                    "(expected no burst, or one of those algorithms)", algo_str(a));
            ok = false;
        } else {
            ok &= sl__get_u64(cx, x, UINT32_MAX, &w->spec.burst);
        }
    }
    if ((x = sl__get(n, "tz")) != NULL) {
        if (a != SLUICE_QUOTA) {
            sl__err(cx, x, "tz applies to calendar quotas only (expected quota: N/period)");
            ok = false;
        } else {
            const char *tz = sl__get_str(cx, x, "tz");
            if (tz != NULL && tz[0] == '\0') {
                sl__err(cx, x, "empty time zone (expected an IANA name such as Europe/Madrid, "
                        "or omit tz for UTC)");
                tz = NULL;
            }
            w->spec.tz = tz ? keep(cx, tz) : NULL;
            ok &= tz != NULL;
        }
    }
    if (ok) ok &= a == SLUICE_ADAPTIVE_CONCURRENCY ? sl__parse_adaptive(cx, n, w)
                                                   : sl__no_adaptive_fields(cx, n, a);
    if ((x = sl__get(n, "lease")) != NULL) {
        if (a != SLUICE_CONCURRENCY && a != SLUICE_ADAPTIVE_CONCURRENCY) {
            sl__err(cx, x, "lease applies to concurrency limits only (expected max: N)");
            ok = false;
        } else {
            ok &= get_duration(cx, x, &w->spec.lease_ns);
        }
    }
    if ((x = sl__get(n, "max_delay")) != NULL) {
        if (a != SLUICE_LEAKY_BUCKET) {
            sl__err(cx, x, "max_delay applies to leaky_bucket only (use on_exceed: {delay: "
                    "...} to delay other algorithms)");
            ok = false;
        } else {
            if (!get_duration(cx, x, &w->spec.max_delay_ns)) {
                ok = false;
            } else if (w->spec.max_delay_ns == 0) {
                /* the library reads 0 as "no bound": spelled 0s it looks like the opposite */
                sl__err(cx, x, "max_delay 0s would mean no bound at all (expected a positive "
                        "duration; omit the field for no bound)");
                ok = false;
            } else if (w->spec.max_delay_ns > SL_MAX_DELAY_NS) {
                sl__err(cx, x, "max_delay %.40s is out of range (expected at most 5m: a shaped "
                        "request holds its caller that long)", x->s);
                ok = false;
            }
        }
    }
    if ((x = sl__get(n, "name")) != NULL) {
        const char *s = sl__get_str(cx, x, "a limit name");
        if (s != NULL) {
            bool good = *s != '\0' && strlen(s) < 200;
            for (const char *p = s; *p; p++)
                if (*p < 0x21 || *p > 0x7e || *p == '"' || *p == '\\') good = false;
            if (!good) {
                sl__err(cx, x, "bad limit name '%.40s' (expected printable ASCII without "
                        "spaces or quotes)", s);
                ok = false;
            } else {
                w->label = keep(cx, s);
                w->named = true;
                w->line = x->line;
                w->col = x->col;
            }
        } else {
            ok = false;
        }
    }
    return ok;
}

bool sl__validate_spec(sl__ctx *cx, const sl_ynode *at, sl_cwindow *w, const char *name) {
    if (w->deny_all) return true;
    sluice_limit_spec s = w->spec;
    s.name = name;
    int err = 0;
    char msg[200];
    sluice_limiter *l = sluice_limiter_create(&s, &err, msg, sizeof(msg));
    if (l != NULL) {
        sluice_limiter_destroy(l);
        return true;
    }
    if (err == SLUICE_ENOTFOUND && s.tz != NULL)
        sl__err(cx, sl__get(at, "tz") ? sl__get(at, "tz") : at, "unknown time zone '%.60s' (expected an IANA name such as "
                "Europe/Madrid)", s.tz);
    else if (err == SLUICE_ENOMEM)
        cx->cfg->arena.oom = true;
    else
        sl__err(cx, at, "invalid limit: %s (expected a limit the algorithm accepts)",
                msg[0] ? msg : sluice_strerror(err));
    return false;
}

/* ---- policies ----------------------------------------------------------------------- */

static const char *const policy_fields[] = {
    "name", "description", "objective", "match", "key", "on_missing_key", "cost",
    "algorithm", "limits", "plan_from", "plans", "on_exceed", "mode", "on_store_error",
    "headers", "count_rejected", "leasing", "priority_from", "classes", "on_missing_class",
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
        c[i].name = lower ? keep_lower(cx, k->s) : keep(cx, k->s);
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
        } else if (is_scalar(v)) {
            c[i].pattern = keep(cx, v->s);
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
        size_t cnt = is_seq(x) ? x->n : 1;
        p->methods = sl__alloc(&cx->cfg->arena, (cnt ? cnt : 1) * sizeof(char *));
        if (p->methods == NULL) return false;
        for (size_t i = 0; i < cnt; i++) {
            const sl_ynode *e = is_seq(x) ? x->v[i] : x;
            bool good = is_scalar(e) && e->len > 0 && e->len < 20;
            for (size_t j = 0; good && j < e->len; j++)
                if (e->s[j] < 'A' || e->s[j] > 'Z') good = false;
            if (!good) {
                sl__err(cx, e, "bad method '%.20s' (expected an upper-case HTTP method such "
                        "as GET or POST)", is_scalar(e) ? e->s : "");
                ok = false;
                continue;
            }
            p->methods[p->n_methods++] = keep(cx, e->s);
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
        if (!is_scalar(e) || e->s[0] != '/') {
            sl__err(cx, e, "bad path '%.60s' (expected a path starting with '/', '*' matching "
                    "any characters)", is_scalar(e) ? e->s : "");
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
            p->host = keep_lower(cx, h);
            size_t hl = p->host ? strlen(p->host) : 0;
            if (hl > 1 && p->host[hl - 1] == '.') ((char *)p->host)[hl - 1] = '\0';
        }
    }
    if ((x = sl__get(m, "headers")) != NULL)
        ok &= parse_conds(cx, x, "match.headers", true, &p->hdr, &p->n_hdr);
    if ((x = sl__get(m, "domain")) != NULL) {
        const char *d = sl__get_str(cx, x, "domain");
        if (d == NULL || *d == '\0') ok = false;
        else p->domain = keep(cx, d);
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
    if (is_scalar(n)) {
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
    bool several = is_seq(use) && use->n > 0 && is_seq(use->v[0]);
    size_t cnt = several ? use->n : 1;
    if (p->n_chains + cnt > SL_MAX_CHAINS) {
        sl__err(cx, use, "too many fallback keys (expected at most %d chains)",
                SL_MAX_CHAINS - 1);
        return false;
    }
    for (size_t i = 0; i < cnt; i++) {
        ok &= parse_chain(cx, several ? use->v[i] : use, &p->chains[p->n_chains]);
        if (p->chains[p->n_chains].n == 0) {
            sl__err(cx, use, "an empty fallback key would put every such request in one "
                    "bucket (expected parts, or on_missing_key: skip)");
            ok = false;
        }
        p->n_chains++;
    }
    p->on_missing = SL_MISSING_REJECT;
    if (oth != NULL) {
        if (is_scalar(oth) && strcmp(oth->s, "skip") == 0) p->on_missing = SL_MISSING_SKIP;
        else if (!(is_scalar(oth) && strcmp(oth->s, "reject") == 0)) {
            sl__err(cx, oth, "bad otherwise '%.40s' (expected skip or reject)",
                    is_scalar(oth) ? oth->s : "");
            ok = false;
        }
    }
    return ok;
}

/* A configured cost: 0 is refused, since a cost-0 decision is a pure peek (nothing is
 * ever consumed, so the limit would never apply). */
static bool get_cost(sl__ctx *cx, const sl_ynode *n, uint64_t *out) {
    if (!sl__get_u64(cx, n, UINT32_MAX, out)) return false;
    if (*out == 0) {
        sl__err(cx, n, "cost 0 would consume nothing, so the limits would never apply "
                "(expected a cost of at least 1)");
        return false;
    }
    return true;
}

static bool parse_cost(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    p->cost_explicit = true;
    if (is_scalar(n)) return get_cost(cx, n, &p->cost_default);
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
                p->unit_name = keep(cx, u);
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

static bool parse_windows(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p, sluice_algo algo,
                          bool algo_set, sl_cwindow **out, size_t *nout) {
    if (!is_seq(n) || n->n == 0) {
        sl__err(cx, n, "limits must be a non-empty list (expected - {rate: 10/s, burst: 20})");
        return false;
    }
    if (n->n > MAX_WINDOWS) {
        sl__err(cx, n, "too many limits in one policy (expected at most %d)", MAX_WINDOWS);
        return false;
    }
    sl_cwindow *w = sl__alloc(&cx->cfg->arena, n->n * sizeof(*w));
    if (w == NULL) return false;
    bool ok = true;
    for (size_t i = 0; i < n->n; i++) {
        if (!sl__parse_window(cx, n->v[i], algo, algo_set, &w[i])) {
            ok = false;
            continue;
        }
        /* The identity of a window's counters: its name when it has one (so reordering
         * or inserting windows keeps each one's counters, and a reload carries state to
         * the window of the same name), else its position. Named identities have the top
         * bit set, so they never meet positional ones. */
        w[i].spec.index = (uint32_t)i;
        if (w[i].named) {
            uint32_t h = 2166136261u;
            for (const char *c = w[i].label; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
            w[i].spec.index = 0x80000000u | (h & 0x7fffffffu);
        }
        if (w[i].label == NULL) {
            char lab[256];
            if (n->n == 1) snprintf(lab, sizeof(lab), "%s", p->name ? p->name : "policy");
            else snprintf(lab, sizeof(lab), "%s.%zu", p->name ? p->name : "policy", i);
            w[i].label = keep(cx, lab);
        }
        ok &= sl__validate_spec(cx, n->v[i], &w[i], p->name ? p->name : "policy");
        for (size_t j = 0; j < i; j++) {
            if (w[j].label != NULL && strcmp(w[j].label, w[i].label) == 0) {
                sl__err(cx, sl__get(n->v[i], "name") ? sl__get(n->v[i], "name") : n->v[i],
                        "limit name '%s' is used twice in this list (first at %d:%d; expected "
                        "unique names: clients tell windows apart by them)", w[i].label,
                        w[j].line, w[j].col);
                ok = false;
                break;
            }
            if (w[j].spec.index == w[i].spec.index && w[i].named) {
                sl__err(cx, sl__get(n->v[i], "name"), "limit names '%s' and '%s' hash to one "
                        "counter identity (expected another name for one of them)", w[j].label,
                        w[i].label);
                ok = false;
                break;
            }
        }
    }
    *out = w;
    *nout = n->n;
    return ok;
}

/* The capacity a client could ever get from window w: a cost above it can never be
 * admitted, which is a config error rather than a permanent 429. */
static uint64_t window_capacity(const sl_cwindow *w) {
    if (algo_has_burst(w->spec.algo) && w->spec.burst) return w->spec.burst;
    return w->spec.limit;
}

static void check_costs(sl__ctx *cx, const sl_ynode *cost_node, const sl_cpolicy *p,
                        const sl_cwindow *w, size_t nw) {
    for (size_t i = 0; i < nw; i++) {
        if (w[i].spec.algo == SLUICE_CONCURRENCY || w[i].spec.algo == SLUICE_ADAPTIVE_CONCURRENCY)
            continue; /* one slot per request, whatever the cost */
        uint64_t cap = window_capacity(&w[i]);
        const char *what = algo_has_burst(w[i].spec.algo) ? "burst" : "limit";
        if (!p->cost_from_set && p->cost_default > cap)
            sl__err(cx, cost_node, "%s %llu of limit '%s' is below the cost %llu: such "
                    "requests could never be admitted (expected %s >= %llu)", what,
                    (unsigned long long)cap, w[i].label, (unsigned long long)p->cost_default,
                    what, (unsigned long long)p->cost_default);
        for (size_t j = 0; j < p->n_ops; j++)
            if (p->ops[j].cost > cap)
                sl__err(cx, cost_node, "%s %llu of limit '%s' is below the cost %llu of '%s "
                        "%s': such requests could never be admitted (expected %s >= %llu)",
                        what, (unsigned long long)cap, w[i].label,
                        (unsigned long long)p->ops[j].cost, p->ops[j].method, p->ops[j].path,
                        what, (unsigned long long)p->ops[j].cost);
    }
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
                    algo_str(w[i].spec.algo));
            ok = false;
        } else if (p->lease_slice > window_capacity(&w[i])) {
            sl__err(cx, at, "leasing slice %u is above the capacity %llu of limit '%s' (expected "
                    "a slice of at most %llu)", p->lease_slice,
                    (unsigned long long)window_capacity(&w[i]), w[i].label,
                    (unsigned long long)window_capacity(&w[i]));
            ok = false;
        }
    }
    return ok;
}

bool sl__parse_leasing(sl__ctx *cx, const sl_ynode *n, sl_cpolicy *p) {
    if (is_scalar(n) && strcmp(n->s, "off") == 0) {
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
    if (!sl__get_u64(cx, sn, UINT32_MAX, &slice)) return false;
    if (slice < 2) {
        sl__err(cx, sn, "leasing slice %llu takes nothing ahead (expected at least 2, or "
                "leasing: off)", (unsigned long long)slice);
        return false;
    }
    int64_t hold = LEASE_HOLD_DEFAULT_NS;
    if (hn != NULL) {
        if (!get_duration(cx, hn, &hold)) return false;
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

static bool parse_policy(sl__ctx *cx, const sl_ynode *n) {
    if (!sl__check_fields(cx, n, "a policy", policy_fields)) {
        if (n == NULL || n->kind != SL_YMAP) return false;
    }
    sl_cpolicy *p = sl__new_policy(cx);
    if (p == NULL) return false;
    p->line = n->line;
    p->col = n->col;
    bool ok = true;
    const sl_ynode *x;

    if ((x = sl__get(n, "name")) == NULL) {
        sl__err(cx, n, "a policy needs a name (expected name: api)");
        ok = false;
    } else if (!is_scalar(x) || !name_ok(x->s)) {
        sl__err(cx, x, "bad policy name '%.60s' (expected letters, digits, '-', '_', '.', ':' "
                "and at most 200 of them)", is_scalar(x) ? x->s : "");
        ok = false;
    } else {
        p->name = keep(cx, x->s);
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
            if (is_scalar(x) && strcmp(x->s, objectives[i]) == 0) known = true;
        if (!known) {
            sl__err(cx, x, "unknown objective '%.40s' (expected protection, fairness, "
                    "security, cost, plan or contract)", is_scalar(x) ? x->s : "");
            ok = false;
        } else {
            p->objective = keep(cx, x->s);
        }
    }
    if ((x = sl__get(n, "match")) != NULL) ok &= parse_match(cx, x, p);

    if ((x = sl__get(n, "key")) == NULL) {
        sl__err(cx, n, "policy '%s' needs a key (expected key: [client_ip], or key: [] for one "
                "global counter)", p->name ? p->name : "?");
        ok = false;
    } else {
        ok &= parse_chain(cx, x, &p->chains[0]);
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
    const sl_ynode *cost_node = sl__get(n, "cost");
    if (cost_node != NULL) ok &= parse_cost(cx, cost_node, p);

    bool algo_set = false, algo_bad = false;
    if ((x = sl__get(n, "algorithm")) != NULL) {
        algo_bad = !parse_algo(cx, x, &p->algo);
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
        ok &= parse_windows(cx, x, p, p->algo, algo_set, &p->win, &p->nwin);
        if (ok) check_costs(cx, cost_node ? cost_node : x, p, p->win, p->nwin);
    }
    for (size_t i = 0; i < p->nwin; i++)
        if ((p->win[i].spec.algo == SLUICE_CONCURRENCY ||
             p->win[i].spec.algo == SLUICE_ADAPTIVE_CONCURRENCY) && p->qu == SL_QU_REQUESTS)
            p->qu = SL_QU_CONCURRENT;

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
                cp->name = keep(cx, k->s);
                for (size_t j = 0; j + 1 < p->n_plans; j++)
                    if (strcmp(p->plans[j].name, cp->name) == 0) {
                        sl__err(cx, k, "duplicate plan '%s' (expected unique plan names)", cp->name);
                        ok = false;
                    }
                sluice_algo pa = p->algo;
                bool pa_set = algo_set;
                if (sl__get(v, "algorithm") != NULL) {
                    ok &= parse_algo(cx, sl__get(v, "algorithm"), &pa);
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
                bool wok = parse_windows(cx, lim, p, pa, pa_set, &cp->win, &cp->nwin);
                p->name = saved;
                ok &= wok;
                if (wok) check_costs(cx, cost_node ? cost_node : lim, p, cp->win, cp->nwin);
            }
        }
    }

    if ((x = sl__get(n, "on_exceed")) != NULL) {
        if (is_scalar(x) && strcmp(x->s, "reject") == 0) {
            p->react = SL_REACT_REJECT;
        } else if (is_scalar(x) && strcmp(x->s, "shadow") == 0) {
            p->react = SL_REACT_SHADOW;
            p->rollout_pct = 0;
        } else if (x->kind == SL_YMAP) {
            /* penalty and challenge: capacity.c (with the rest of capacity protection) */
            static const char *const df[] = {"delay", "penalty", "challenge", NULL};
            bool fields = sl__check_fields(cx, x, "on_exceed", df);
            if (fields && sl__get(x, "delay") == NULL && (sl__get(x, "penalty") || sl__get(x, "challenge"))) {
                p->react = SL_REACT_REJECT;
            } else if (fields && sl__get(x, "delay") != NULL) {
                p->react = SL_REACT_DELAY;
                const sl_ynode *d = sl__get(x, "delay");
                if (get_duration(cx, d, &p->max_delay_ns) &&
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
                    is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    if ((x = sl__get(n, "mode")) != NULL) {
        if (is_scalar(x) && strcmp(x->s, "enforce") == 0) {
            if (p->react == SL_REACT_SHADOW) {
                sl__err(cx, x, "mode enforce contradicts on_exceed: shadow (expected one)");
                ok = false;
            }
        } else if (is_scalar(x) && strcmp(x->s, "shadow") == 0) {
            p->rollout_pct = 0;
        } else if (x->kind == SL_YMAP) {
            static const char *const rf[] = {"rollout", NULL};
            const sl_ynode *r = sl__get(x, "rollout");
            if (!sl__check_fields(cx, x, "mode", rf) || r == NULL || !is_scalar(r)) {
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
                    is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    if ((x = sl__get(n, "on_store_error")) != NULL) {
        if (is_scalar(x) && strcmp(x->s, "open") == 0) p->fail_closed = false;
        else if (is_scalar(x) && strcmp(x->s, "closed") == 0) p->fail_closed = true;
        else {
            sl__err(cx, x, "bad on_store_error '%.40s' (expected open or closed)",
                    is_scalar(x) ? x->s : "");
            ok = false;
        }
    }
    if ((x = sl__get(n, "headers")) != NULL) ok &= sl__get_bool(cx, x, &p->headers);
    if ((x = sl__get(n, "leasing")) != NULL && ok) ok &= sl__parse_leasing(cx, x, p);
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
    if (ok) ok &= sl__parse_capacity(cx, n, p);
    return ok;
}

/* ---- settings ----------------------------------------------------------------------- */

static bool addr_ok(const char *s) {
    if (strncmp(s, "unix:", 5) == 0) return s[5] == '/';
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s) return false;
    if (s[0] == '[' && colon[-1] != ']') return false;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return *end == '\0' && colon[1] != '\0' && port >= 0 && port <= 65535;
}

static void get_addr(sl__ctx *cx, const sl_ynode *n, char *out, size_t len) {
    if (n->kind == SL_YSCALAR && (n->plain && (n->len == 0 || !strcmp(n->s, "null") ||
                                               !strcmp(n->s, "~") || !strcmp(n->s, "off")))) {
        out[0] = '\0';
        return;
    }
    if (n->kind != SL_YSCALAR || !addr_ok(n->s) || n->len >= len) {
        sl__err(cx, n, "bad listen address '%.60s' (expected host:port such as 127.0.0.1:8080, "
                "[::1]:8080, unix:/path, or off)", n->kind == SL_YSCALAR ? n->s : "");
        return;
    }
    memcpy(out, n->s, n->len + 1);
}

static void copy_str(sl__ctx *cx, const sl_ynode *n, const char *what, char *out, size_t len) {
    const char *s = sl__get_str(cx, n, what);
    if (s == NULL) return;
    if (strlen(s) >= len) {
        sl__err(cx, n, "%s is too long (expected at most %zu bytes)", what, len - 1);
        return;
    }
    memcpy(out, s, strlen(s) + 1);
}

static void parse_store(sl__ctx *cx, const sl_ynode *n, sl_settings *st) {
    static const char *const f[] = {"type", "max_keys", "on_full", "shards", "snapshot",
                                    "addr", "timeout", "key_secret", "time", "max_tokens",
                                    "unready_when_down", SL_STORE_REDIS_FIELDS, NULL};
    if (!sl__check_fields(cx, n, "store", f) && n->kind != SL_YMAP) return;
    const sl_ynode *x = sl__get(n, "type");
    if (x != NULL) {
        if (is_scalar(x) && !strcmp(x->s, "memory")) st->store.type = SL_STORE_MEMORY;
        else if (is_scalar(x) && !strcmp(x->s, "redis")) st->store.type = SL_STORE_REDIS;
        else if (is_scalar(x) && !strcmp(x->s, "redis-cluster"))
            st->store.type = SL_STORE_REDIS_CLUSTER;
        else {
            sl__err(cx, x, "unknown store type '%.40s' (expected memory, redis or "
                    "redis-cluster)", is_scalar(x) ? x->s : "");
            return;
        }
    }
    bool mem = st->store.type == SL_STORE_MEMORY;
    static const char *const memf[] = {"max_keys", "on_full", "shards", "snapshot", NULL};
    static const char *const redf[] = {"addr", "timeout", "key_secret", "time", "unready_when_down",
                                       SL_STORE_REDIS_FIELDS, NULL};
    const char *const *wrong = mem ? redf : memf;
    for (size_t i = 0; wrong[i]; i++)
        if ((x = sl__get(n, wrong[i])) != NULL)
            sl__err(cx, x, "field '%s' does not apply to a %s store (expected it only with "
                    "type: %s)", wrong[i], mem ? "memory" : "redis", mem ? "redis" : "memory");
    /* outstanding settle/release tokens (both store types; see sl_token_table) */
    if ((x = sl__get(n, "max_tokens")) != NULL &&
        sl__get_u64(cx, x, UINT64_C(1) << 26, &st->store.max_tokens) && st->store.max_tokens == 0)
        sl__err(cx, x, "max_tokens 0 would refuse every settle and release (expected at least "
                "1, or omit it for %d)", SL_TOKENS_DEFAULT);
    if ((x = sl__get(n, "max_keys")) != NULL && mem)
        sl__get_u64(cx, x, UINT64_C(1) << 40, &st->store.max_keys);
    if ((x = sl__get(n, "on_full")) != NULL && mem) {
        if (is_scalar(x) && !strcmp(x->s, "evict_lru")) st->store.on_full = SLUICE_EVICT_LRU;
        else if (is_scalar(x) && !strcmp(x->s, "refuse_new"))
            st->store.on_full = SLUICE_REFUSE_NEW;
        else
            sl__err(cx, x, "bad on_full '%.40s' (expected evict_lru or refuse_new)",
                    is_scalar(x) ? x->s : "");
    }
    if ((x = sl__get(n, "shards")) != NULL && mem) {
        uint64_t v = 0;
        if (sl__get_u64(cx, x, 65536, &v)) {
            if (v == 0 || (v & (v - 1)) != 0)
                sl__err(cx, x, "shards %llu is not a power of two (expected 1, 2, 4, ... "
                        "65536)", (unsigned long long)v);
            else
                st->store.shards = (unsigned)v;
        }
    }
    if ((x = sl__get(n, "snapshot")) != NULL && mem) {
        static const char *const sf[] = {"path", "every", "on_damaged", NULL};
        if (sl__check_fields(cx, x, "store.snapshot", sf)) {
            const sl_ynode *p = sl__get(x, "path"), *e = sl__get(x, "every");
            const sl_ynode *d = sl__get(x, "on_damaged");
            if (p == NULL) {
                sl__err(cx, x, "snapshot needs a path (expected path: sluice.state)");
            } else {
                copy_str(cx, p, "snapshot path", st->store.snapshot_path, SL_PATH_MAX);
                st->store.snapshot_line = p->line;
                st->store.snapshot_col = p->col;
            }
            if (e != NULL) get_duration(cx, e, &st->store.snapshot_every_ns);
            if (d != NULL) {
                if (is_scalar(d) && !strcmp(d->s, "refuse")) st->store.snapshot_start_empty = false;
                else if (is_scalar(d) && !strcmp(d->s, "start_empty")) st->store.snapshot_start_empty = true;
                else
                    sl__err(cx, d, "bad on_damaged '%.40s' (expected refuse, the default: do not start "
                            "on a damaged snapshot, or start_empty: move it aside and start with no "
                            "state)", is_scalar(d) ? d->s : "");
            }
        }
    }
    if (!mem) {
        sl__parse_store_redis(cx, n, st); /* credentials, tls, sentinel (store_redis.c) */
        if ((x = sl__get(n, "addr")) == NULL) {
            if (!st->store.redis.sentinel_master[0])
                sl__err(cx, n, "a redis store needs addr (expected addr: 127.0.0.1:6379)");
        } else if (!is_scalar(x) || !addr_ok(x->s) || x->len >= SL_ADDR_MAX)
            sl__err(cx, x, "bad redis address '%.60s' (expected host:port)",
                    is_scalar(x) ? x->s : "");
        else
            memcpy(st->store.redis_addr, x->s, x->len + 1);
        if ((x = sl__get(n, "timeout")) != NULL) get_duration(cx, x, &st->store.redis_timeout_ns);
        if ((x = sl__get(n, "key_secret")) != NULL)
            copy_str(cx, x, "key_secret", st->store.redis_key_secret,
                     sizeof(st->store.redis_key_secret));
        if ((x = sl__get(n, "unready_when_down")) != NULL)
            sl__get_bool(cx, x, &st->store.unready_when_down);
        if ((x = sl__get(n, "time")) != NULL) {
            if (is_scalar(x) && !strcmp(x->s, "local")) st->store.redis_time_local = true;
            else if (is_scalar(x) && !strcmp(x->s, "redis")) st->store.redis_time_local = false;
            else
                sl__err(cx, x, "bad store time '%.40s' (expected redis, the Redis server's TIME, "
                        "or local, this instance's clock)", is_scalar(x) ? x->s : "");
        }
    }
}

static void settings_defaults(sl_settings *st) {
    memset(st, 0, sizeof(*st));
    snprintf(st->listen_http, sizeof(st->listen_http), "127.0.0.1:8080");
    snprintf(st->listen_resp, sizeof(st->listen_resp), "127.0.0.1:6380");
    snprintf(st->listen_admin, sizeof(st->listen_admin), "127.0.0.1:9090");
    snprintf(st->listen_grpc, sizeof(st->listen_grpc), "127.0.0.1:8081");
    st->auth_deny_status = 429;
    st->store.redis_timeout_ns = 20 * SLUICE_NS_PER_MS;
    st->log.level = 2; /* info */
    st->log.decisions_rejections_only = true;
    st->log.decisions_sample_ppm = 1000000;
    st->log.decisions_per_s = 100;
    st->log.decisions_burst = 100;
    st->observe.near_limit_ppm = 800000;
    st->observe.hot_counters = 64;
    st->observe.hot_interval_ns = 10 * SLUICE_NS_PER_S;
    st->observe.hot_top = 5;
    st->audit.keep = 64;
}

/* A fraction 0..1 ("0.1", "1", "10%") as parts per million, exactly (no floating point:
 * at most 6 decimals). */
static bool get_ppm(sl__ctx *cx, const sl_ynode *n, const char *what, uint32_t *out) {
    const char *s = is_scalar(n) ? n->s : "";
    uint64_t whole = 0, frac = 0, scale = 1000000;
    const char *p = s;
    bool digits = false;
    while (*p >= '0' && *p <= '9' && whole <= 100) whole = whole * 10 + (uint64_t)(*p++ - '0'), digits = true;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            if (scale > 1) {
                scale /= 10;
                frac += (uint64_t)(*p - '0') * scale;
            }
            p++;
            digits = true;
        }
    }
    uint64_t ppm = whole * 1000000 + frac;
    if (*p == '%' && p[1] == '\0') {
        ppm /= 100;
        p++;
    }
    if (!digits || *p != '\0' || ppm > 1000000) {
        sl__err(cx, n, "bad %s '%.40s' (expected a fraction from 0 to 1, such as 0.1, or a "
                "percentage such as 10%%)", what, s);
        return false;
    }
    *out = (uint32_t)ppm;
    return true;
}

static void parse_log(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    static const char *const f[] = {"raw_keys", "level", "format", "file", "decisions", NULL};
    if (!sl__check_fields(cx, x, "log", f)) return;
    const sl_ynode *y;
    if ((y = sl__get(x, "raw_keys")) != NULL) sl__get_bool(cx, y, &st->log_raw_keys);
    if ((y = sl__get(x, "level")) != NULL) {
        static const char *const lv[] = {"error", "warn", "info", "debug", NULL};
        int i = 0;
        while (lv[i] && !(is_scalar(y) && strcmp(y->s, lv[i]) == 0)) i++;
        if (lv[i] == NULL)
            sl__err(cx, y, "bad log level '%.40s' (expected error, warn, info or debug)",
                    is_scalar(y) ? y->s : "");
        else
            st->log.level = i;
    }
    if ((y = sl__get(x, "format")) != NULL) {
        if (is_scalar(y) && strcmp(y->s, "text") == 0) st->log.format = 0;
        else if (is_scalar(y) && strcmp(y->s, "json") == 0) st->log.format = 1;
        else
            sl__err(cx, y, "bad log format '%.40s' (expected text or json)",
                    is_scalar(y) ? y->s : "");
    }
    if ((y = sl__get(x, "file")) != NULL && !(is_scalar(y) && y->plain && y->len == 0))
        copy_str(cx, y, "log file", st->log.file, sizeof(st->log.file));
    if ((y = sl__get(x, "decisions")) != NULL) {
        static const char *const df[] = {"enabled", "rejections_only", "sample", "max_per_s",
                                         "burst", NULL};
        if (!sl__check_fields(cx, y, "log.decisions", df)) return;
        const sl_ynode *z;
        uint64_t v;
        if ((z = sl__get(y, "enabled")) != NULL) sl__get_bool(cx, z, &st->log.decisions);
        if ((z = sl__get(y, "rejections_only")) != NULL)
            sl__get_bool(cx, z, &st->log.decisions_rejections_only);
        if ((z = sl__get(y, "sample")) != NULL)
            get_ppm(cx, z, "decision sample", &st->log.decisions_sample_ppm);
        if ((z = sl__get(y, "max_per_s")) != NULL && sl__get_u64(cx, z, 1000000, &v)) {
            if (v == 0)
                sl__err(cx, z, "max_per_s 0 would log nothing (expected at least 1, or "
                        "enabled: false)");
            else
                st->log.decisions_per_s = (uint32_t)v;
        }
        if ((z = sl__get(y, "burst")) != NULL && sl__get_u64(cx, z, 1000000, &v))
            st->log.decisions_burst = (uint32_t)(v ? v : 1);
    }
}

static void parse_observe(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    static const char *const f[] = {"near_limit", "hot_keys", NULL};
    if (!sl__check_fields(cx, x, "observe", f)) return;
    const sl_ynode *y;
    if ((y = sl__get(x, "near_limit")) != NULL &&
        get_ppm(cx, y, "near_limit ratio", &st->observe.near_limit_ppm) &&
        st->observe.near_limit_ppm == 0)
        sl__err(cx, y, "near_limit 0 would count every admission (expected a ratio such as "
                "0.8)");
    if ((y = sl__get(x, "hot_keys")) != NULL) {
        if (is_scalar(y) && (strcmp(y->s, "off") == 0 || strcmp(y->s, "false") == 0)) {
            st->observe.hot_counters = 0;
            return;
        }
        static const char *const hf[] = {"counters", "interval", "top", NULL};
        if (!sl__check_fields(cx, y, "observe.hot_keys", hf)) return;
        const sl_ynode *z;
        uint64_t v;
        if ((z = sl__get(y, "counters")) != NULL && sl__get_u64(cx, z, 4096, &v)) {
            if (v != 0 && v < 8)
                sl__err(cx, z, "hot_keys counters %llu is too few (expected 0 to turn it "
                        "off, or 8 to 4096)", (unsigned long long)v);
            else
                st->observe.hot_counters = (unsigned)v;
        }
        if ((z = sl__get(y, "interval")) != NULL &&
            get_duration(cx, z, &st->observe.hot_interval_ns) &&
            st->observe.hot_interval_ns <= 0)
            sl__err(cx, z, "hot_keys interval must be above 0 (expected e.g. 10s)");
        if ((z = sl__get(y, "top")) != NULL && sl__get_u64(cx, z, 20, &v))
            st->observe.hot_top = (unsigned)v;
    }
}

static void parse_audit(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    static const char *const f[] = {"file", "keep", NULL};
    if (!sl__check_fields(cx, x, "audit", f)) return;
    const sl_ynode *y;
    uint64_t v;
    if ((y = sl__get(x, "file")) != NULL && !(is_scalar(y) && y->plain && y->len == 0))
        copy_str(cx, y, "audit file", st->audit.file, sizeof(st->audit.file));
    if ((y = sl__get(x, "keep")) != NULL && sl__get_u64(cx, y, 4096, &v))
        st->audit.keep = (unsigned)(v ? v : 1);
}

/* admin.tokens: [{name, token}]: names say who changed the config in the audit trail. */
static void parse_admin_tokens(sl__ctx *cx, const sl_ynode *x, sl_settings *st) {
    if (!is_seq(x)) {
        sl__err(cx, x, "admin.tokens must be a list (expected - {name: deploy-bot, token: ...})");
        return;
    }
    if (x->n > SL_ADMIN_TOKENS) {
        sl__err(cx, x, "too many admin tokens (expected at most %d)", SL_ADMIN_TOKENS);
        return;
    }
    static const char *const tf[] = {"name", "token", NULL};
    for (size_t i = 0; i < x->n; i++) {
        const sl_ynode *t = x->v[i];
        if (!sl__check_fields(cx, t, "admin token", tf)) continue;
        const sl_ynode *nm = sl__get(t, "name"), *tk = sl__get(t, "token");
        if (nm == NULL || tk == NULL) {
            sl__err(cx, t, "an admin token needs a name and a token (expected {name: "
                    "deploy-bot, token: ...})");
            continue;
        }
        unsigned k = st->n_admin_tokens;
        copy_str(cx, nm, "admin token name", st->admin_tokens[k].name,
                 sizeof(st->admin_tokens[k].name));
        copy_str(cx, tk, "admin token", st->admin_tokens[k].token,
                 sizeof(st->admin_tokens[k].token));
        if (st->admin_tokens[k].token[0] == '\0' || st->admin_tokens[k].name[0] == '\0') {
            sl__err(cx, t, "an admin token and its name must not be empty");
            continue;
        }
        for (unsigned j = 0; j < k; j++)
            if (strcmp(st->admin_tokens[j].name, st->admin_tokens[k].name) == 0)
                sl__err(cx, nm, "admin token name '%s' is used twice (expected unique names: "
                        "the audit trail tells callers apart by them)", st->admin_tokens[k].name);
        st->n_admin_tokens = k + 1;
    }
}

static void parse_settings(sl__ctx *cx, const sl_ynode *root, sl_settings *st) {
    const sl_ynode *x;
    if ((x = sl__get(root, "listen")) != NULL) {
        static const char *const f[] = {"http", "resp", "grpc", "admin", NULL};
        if (sl__check_fields(cx, x, "listen", f)) {
            const sl_ynode *a;
            if ((a = sl__get(x, "http")) != NULL) get_addr(cx, a, st->listen_http, SL_ADDR_MAX);
            if ((a = sl__get(x, "resp")) != NULL) get_addr(cx, a, st->listen_resp, SL_ADDR_MAX);
            if ((a = sl__get(x, "grpc")) != NULL) get_addr(cx, a, st->listen_grpc, SL_ADDR_MAX);
            if ((a = sl__get(x, "admin")) != NULL)
                get_addr(cx, a, st->listen_admin, SL_ADDR_MAX);
        }
    }
    if ((x = sl__get(root, "workers")) != NULL) {
        uint64_t v;
        if (sl__get_u64(cx, x, 1024, &v)) st->workers = (unsigned)v;
    }
    if ((x = sl__get(root, "admin")) != NULL) {
        static const char *const f[] = {"token", "tokens", NULL};
        if (sl__check_fields(cx, x, "admin", f) && sl__get(x, "token") != NULL)
            copy_str(cx, sl__get(x, "token"), "admin token", st->admin_token,
                     sizeof(st->admin_token));
        if (sl__get(x, "tokens") != NULL) parse_admin_tokens(cx, sl__get(x, "tokens"), st);
    }
    if ((x = sl__get(root, "auth")) != NULL) {
        static const char *const f[] = {"deny_status", NULL};
        uint64_t v;
        if (sl__check_fields(cx, x, "auth", f) && sl__get(x, "deny_status") != NULL &&
            sl__get_u64(cx, sl__get(x, "deny_status"), 999, &v)) {
            if (v < 400 || v > 599)
                sl__err(cx, sl__get(x, "deny_status"), "deny_status %llu is not an error "
                        "status (expected 400 to 599, usually 429)", (unsigned long long)v);
            else
                st->auth_deny_status = (int)v;
        }
    }
    if ((x = sl__get(root, "headers")) != NULL) {
        static const char *const f[] = {"legacy", NULL};
        if (sl__check_fields(cx, x, "headers", f) && sl__get(x, "legacy") != NULL)
            sl__get_bool(cx, sl__get(x, "legacy"), &st->legacy_headers);
    }
    if ((x = sl__get(root, "log")) != NULL) parse_log(cx, x, st);
    if ((x = sl__get(root, "observe")) != NULL) parse_observe(cx, x, st);
    if ((x = sl__get(root, "audit")) != NULL) parse_audit(cx, x, st);
    if ((x = sl__get(root, "store")) != NULL) parse_store(cx, x, st);
}

/* ---- load --------------------------------------------------------------------------- */

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
static void check_overlap(sl__ctx *cx) {
    for (size_t i = 0; i < cx->n_pol; i++) {
        const sl_cpolicy *p = cx->pol[i];
        if (p->envoy || p->domain != NULL) continue;
        size_t total = max_windows(p), others = 0;
        for (size_t j = 0; j < cx->n_pol; j++) {
            const sl_cpolicy *q = cx->pol[j];
            if (j == i || q->envoy || q->domain != NULL || !may_overlap(p, q)) continue;
            total += max_windows(q);
            others++;
        }
        if (total > SLUICE_MAX_ITEMS) {
            sl_ynode at = {.kind = SL_YMAP, .line = p->line, .col = p->col};
            sl__err(cx, &at, "policy '%.60s' and %zu others can match one request: %zu windows "
                    "in one decision, more than the %d it can hold (expected narrower match "
                    "conditions, or fewer windows)", p->name ? p->name : "", others, total,
                    SLUICE_MAX_ITEMS);
            return; /* one error says it */
        }
    }
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

static void load_root(sl__ctx *cx, const sl_ynode *root) {
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
    static const char *const top[] = {"listen", "workers", "admin", "auth", "headers",
                                      "log", "store", "policies", "domains", "observe",
                                      "audit", NULL};
    sl__check_fields(cx, root, "the config", top);
    parse_settings(cx, root, &cx->cfg->settings);
    const sl_ynode *pols = sl__get(root, "policies"), *doms = sl__get(root, "domains");
    if (pols == NULL && doms == NULL) {
        sl__err(cx, root, "no policies (expected 'policies:' or 'domains:')");
        return;
    }
    if (pols != NULL) {
        if (!is_seq(pols)) sl__err(cx, pols, "policies must be a list (expected - name: ...)");
        else
            for (size_t i = 0; i < pols->n; i++) parse_policy(cx, pols->v[i]);
    }
    if (doms != NULL) {
        if (!is_seq(doms))
            sl__err(cx, doms, "domains must be a list of envoyproxy/ratelimit configs "
                    "(expected - domain: ...)");
        else
            for (size_t i = 0; i < doms->n; i++) sl__envoy_load(cx, doms->v[i]);
    }
    check_labels(cx);
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
    settings_defaults(&cfg->settings);
    sl__ctx cx = {.cfg = cfg, .dl = diags};
    sl_ynode *root = sl__yaml_parse(&cx, buf, len);
    if (root != NULL) load_root(&cx, root);
    if (root != NULL && cx.errors == 0) check_totals(&cx);
    sl__set_free(&cx.names);
    sl__arena_free(&cx.tmp);
    if (!cfg->arena.oom && cx.errors == 0) {
        cfg->pol = sl__alloc(&cfg->arena, (cx.n_pol ? cx.n_pol : 1) * sizeof(*cfg->pol));
        cfg->domains = sl__alloc(&cfg->arena, (cx.n_dom ? cx.n_dom : 1) * sizeof(*cfg->domains));
        if (cfg->pol != NULL && cfg->domains != NULL) {
            for (size_t i = 0; i < cx.n_pol; i++) {
                cfg->pol[i] = *cx.pol[i];
                cfg->n_limiters += cfg->pol[i].nwin;
                for (size_t j = 0; j < cfg->pol[i].n_plans; j++)
                    cfg->n_limiters += cfg->pol[i].plans[j].nwin;
            }
            cfg->n_pol = cx.n_pol;
            for (size_t i = 0; i < cx.n_dom; i++) cfg->domains[i] = *cx.dom[i];
            cfg->n_domains = cx.n_dom;
        }
    }
    free(cx.pol);
    free(cx.dom);
    if (cfg->arena.oom) {
        sl_config_destroy(cfg);
        return SLUICE_ENOMEM;
    }
    if (cx.errors > 0) {
        sl_config_destroy(cfg);
        return SLUICE_EINVAL;
    }
    *out = cfg;
    return SLUICE_OK;
}

#define MAX_CONFIG_BYTES (16u << 20)

int sl_config_load(const char *path, sl_config **out, sl_diag_list *diags) {
    if (out != NULL) *out = NULL;
    if (diags != NULL) {
        diags->n = 0;
        diags->dropped = 0;
        snprintf(diags->file, sizeof(diags->file), "%s", path ? path : "<config>");
    }
    if (path == NULL || out == NULL) return SLUICE_EINVAL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (diags != NULL) {
            diags->n = 1;
            diags->items[0].line = 0;
            diags->items[0].col = 0;
            snprintf(diags->items[0].msg, sizeof(diags->items[0].msg),
                     "cannot open the file (expected a readable YAML file)");
        }
        return SLUICE_EIO;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (len == cap) {
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
        size_t r = fread(buf + len, 1, cap - len, f);
        if (r == 0) break;
        len += r;
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (buf == NULL) return SLUICE_ENOMEM;
    if (err || len >= MAX_CONFIG_BYTES) {
        free(buf);
        if (diags != NULL) {
            diags->n = 1;
            diags->items[0].line = 0;
            diags->items[0].col = 0;
            snprintf(diags->items[0].msg, sizeof(diags->items[0].msg), "%s",
                     err ? "read error" : "file too large (expected at most 16 MiB)");
        }
        return SLUICE_EIO;
    }
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
bool sl_config_policy_fails_closed(const sl_config *cfg, size_t i) {
    return cfg != NULL && i < cfg->n_pol && cfg->pol[i].fail_closed;
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
