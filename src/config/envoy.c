/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envoy.c -- the envoyproxy/ratelimit config format (domain + nested descriptors) and its
 * matching rules: a descriptor of N entries only reaches rules at depth N; at each level
 * an exact key/value wins over the first matching wildcard value, which wins over the
 * bare key. Each rule with a rate_limit becomes an internal policy (fixed window per unit
 * by default, as envoyproxy/ratelimit counts), optionally with sluice's algorithm, burst
 * and extra windows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/compiled.h"

const sl_envoy_unit sl_envoy_units[SL_ENVOY_UNIT_MAX + 1] = {
    {"", 0},           {"second", 1},       {"minute", 60},      {"hour", 3600},
    {"day", 86400},    {"month", 2592000},  {"year", 31536000},  {"week", 604800},
};

int64_t sl_envoy_unit_seconds(int code) {
    return code > 0 && code <= SL_ENVOY_UNIT_MAX ? sl_envoy_units[code].secs : 0;
}

int sl_envoy_unit_of(int64_t secs) {
    for (int u = 1; u <= SL_ENVOY_UNIT_MAX; u++)
        if (sl_envoy_units[u].secs == secs) return u;
    return 0;
}

static const char *const desc_fields[] = {
    "key", "value", "rate_limit", "shadow_mode", "quota_mode", "detailed_metric",
    "value_to_metric", "share_threshold", "metadata", "descriptors", NULL};
static const char *const rl_fields[] = {"unit", "requests_per_unit", "unlimited", "name",
                                        "replaces", "algorithm", "burst", "extra_limits",
                                        "on_store_error", "leasing", NULL};

static char *keep(sl__ctx *cx, const char *s) {
    return sl__strndup(&cx->cfg->arena, s, strlen(s));
}

/* An empty or null YAML value (`descriptors:` left empty loads as no rules, as upstream). */
static bool is_null(const sl_ynode *n) {
    return n != NULL && n->kind == SL_YSCALAR && n->plain &&
           (n->len == 0 || !strcmp(n->s, "null") || !strcmp(n->s, "Null") ||
            !strcmp(n->s, "NULL") || !strcmp(n->s, "~"));
}

/* ---- metadata (free-form YAML, read as envoyproxy/ratelimit's yaml.v2 reads it) ------- */

static bool md_bool(const char *s, bool *b) {
    static const char *const t[] = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE",
                                    "on", "On", "ON", NULL};
    static const char *const f[] = {"n", "N", "no", "No", "NO", "false", "False", "FALSE",
                                    "off", "Off", "OFF", NULL};
    for (size_t i = 0; t[i]; i++)
        if (!strcmp(s, t[i])) return *b = true, true;
    for (size_t i = 0; f[i]; i++)
        if (!strcmp(s, f[i])) return *b = false, true;
    return false;
}

/* A YAML 1.1 number (decimal or 0x integer, decimal float): metadata numbers travel as
 * google.protobuf.Value number_value, a double, as upstream converts them. Config-time
 * only: nothing here is rate arithmetic. */
static bool md_number(const char *s, double *out) {
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && p[2] != '\0') {
        char *end;
        unsigned long long v = strtoull(p + 2, &end, 16);
        if (*end != '\0') return false;
        *out = s[0] == '-' ? -(double)v : (double)v;
        return true;
    }
    bool digit = false, dot = false, ex = false;
    for (const char *q = p; *q; q++) {
        if (*q >= '0' && *q <= '9') digit = true;
        else if (*q == '.' && !dot && !ex) dot = true;
        else if ((*q == 'e' || *q == 'E') && digit && !ex && (q[1] == '+' || q[1] == '-' ||
                                                            (q[1] >= '0' && q[1] <= '9'))) {
            ex = true;
            if (q[1] == '+' || q[1] == '-') q++;
        } else return false;
    }
    if (!digit) return false;
    *out = strtod(s, NULL);
    return true;
}

static const sl_mdnode *md_of(sl__ctx *cx, const sl_ynode *n, int depth) {
    sl_mdnode *m = sl__alloc(&cx->cfg->arena, sizeof(*m));
    if (m == NULL) return NULL;
    if (depth > 32) {
        sl__err(cx, n, "metadata nested too deep (expected at most 32 levels)");
        return m;
    }
    if (n->kind == SL_YSCALAR) {
        if (n->plain && is_null(n)) m->kind = SL_MD_NULL;
        else if (n->plain && md_bool(n->s, &m->b)) m->kind = SL_MD_BOOL;
        else if (n->plain && md_number(n->s, &m->num)) m->kind = SL_MD_NUM;
        else {
            m->kind = SL_MD_STR;
            m->s = keep(cx, n->s);
        }
        return m;
    }
    m->kind = n->kind == SL_YMAP ? SL_MD_MAP : SL_MD_LIST;
    m->n = n->n;
    m->v = sl__alloc(&cx->cfg->arena, (n->n ? n->n : 1) * sizeof(*m->v));
    if (m->kind == SL_MD_MAP) m->keys = sl__alloc(&cx->cfg->arena, (n->n ? n->n : 1) * sizeof(*m->keys));
    if (m->v == NULL || (m->kind == SL_MD_MAP && m->keys == NULL)) return m;
    for (size_t i = 0; i < n->n; i++) {
        if (m->kind == SL_MD_MAP) {
            const sl_ynode *k = n->v[2 * i];
            if (k->kind != SL_YSCALAR) {
                sl__err(cx, k, "metadata key must be a scalar");
                continue;
            }
            m->keys[i] = keep(cx, k->s);
            m->v[i] = md_of(cx, n->v[2 * i + 1], depth + 1);
        } else {
            m->v[i] = md_of(cx, n->v[i], depth + 1);
        }
    }
    return m;
}

/* A stable limiter name for a rule: its place in the tree, so a reload finds the same
 * counters. Paths too long for a limiter name fall back to a 128-bit hash of the whole
 * path (never of a truncated one). */
static const char *rule_name(sl__ctx *cx, const char *path) {
    size_t n = strlen(path);
    if (n < 250) return keep(cx, path);
    char buf[64];
    snprintf(buf, sizeof(buf), "envoy#%016llx%016llx",
             (unsigned long long)sl__hash64(path, n, "1", 1),
             (unsigned long long)sl__hash64(path, n, "2", 1));
    return keep(cx, buf);
}

/* Appends s to the tree path with '/', '=' and '%' percent-encoded, so the path names one
 * place in the tree: a value "v/x=y" and the nested pair v, x=y spell differently. */
static size_t put_esc(char *out, const char *s) {
    size_t o = 0;
    for (; *s; s++) {
        if (*s == '/' || *s == '=' || *s == '%') {
            if (out) {
                out[o] = '%';
                out[o + 1] = "0123456789ABCDEF"[(unsigned char)*s >> 4];
                out[o + 2] = "0123456789ABCDEF"[(unsigned char)*s & 15];
            }
            o += 3;
        } else {
            if (out) out[o] = *s;
            o++;
        }
    }
    return o;
}

/* prefix + "/" + esc(key) [+ "=" + esc(value)], in the loader's temporary arena (any
 * length: nothing is truncated before hashing). */
static char *tree_path(sl__ctx *cx, const char *prefix, const char *key, const char *value) {
    size_t pl = strlen(prefix);
    size_t n = pl + 1 + put_esc(NULL, key) + (value ? 1 + put_esc(NULL, value) : 0);
    char *out = sl__alloc(&cx->tmp, n + 1);
    if (out == NULL) {
        cx->cfg->arena.oom = true;
        return NULL;
    }
    memcpy(out, prefix, pl);
    size_t o = pl;
    out[o++] = '/';
    o += put_esc(out + o, key);
    if (value) {
        out[o++] = '=';
        o += put_esc(out + o, value);
    }
    out[o] = '\0';
    return out;
}

static bool parse_rate_limit(sl__ctx *cx, const sl_ynode *rl, sl_cpolicy *p, const char *label) {
    if (!sl__check_fields(cx, rl, "rate_limit", rl_fields)) return false;
    bool ok = true;
    const sl_ynode *unit = sl__get(rl, "unit"), *rpu = sl__get(rl, "requests_per_unit"),
                   *unl = sl__get(rl, "unlimited"), *x;
    bool unlimited = false;
    if (unl != NULL) ok &= sl__get_bool(cx, unl, &unlimited);
    if ((x = sl__get(rl, "name")) != NULL) {
        const char *s = sl__get_str(cx, x, "rate_limit name");
        if (s == NULL || *s == '\0') {
            sl__err(cx, x, "empty rate_limit name (expected a name other rules can replace)");
            ok = false;
        } else {
            p->rule_name = keep(cx, s);
        }
    }
    if ((x = sl__get(rl, "replaces")) != NULL) {
        if (x->kind != SL_YSEQ) {
            sl__err(cx, x, "replaces must be a list (expected - name: other_rule)");
            ok = false;
        } else {
            p->replaces = sl__alloc(&cx->cfg->arena, (x->n ? x->n : 1) * sizeof(char *));
            if (p->replaces == NULL) return false;
            for (size_t i = 0; i < x->n; i++) {
                static const char *const rf[] = {"name", NULL};
                const sl_ynode *e = x->v[i];
                if (!sl__check_fields(cx, e, "a replaces entry", rf)) {
                    ok = false;
                    continue;
                }
                const sl_ynode *nm = sl__get(e, "name");
                if (nm == NULL || nm->kind != SL_YSCALAR || nm->len == 0) {
                    sl__err(cx, e, "empty replaces entry (expected name: <rule name>)");
                    ok = false;
                    continue;
                }
                if (p->rule_name != NULL && strcmp(nm->s, p->rule_name) == 0) {
                    sl__err(cx, nm, "rule '%s' replaces itself (expected another rule's name)",
                            nm->s);
                    ok = false;
                    continue;
                }
                p->replaces[p->n_replaces++] = keep(cx, nm->s);
            }
        }
    }
    if (unlimited) {
        if (unit != NULL) {
            sl__err(cx, unit, "unit given with unlimited: true (expected no unit for an "
                    "unlimited rule)");
            ok = false;
        }
        if (rpu != NULL && !cx->cfg->settings.envoy.compat) { /* upstream ignores it */
            sl__err(cx, rpu, "requests_per_unit given with unlimited: true (expected none)");
            ok = false;
        }
        static const char *const ext[] = {"algorithm", "burst", "extra_limits",
                                          "on_store_error", "leasing", NULL};
        for (size_t i = 0; ext[i]; i++)
            if ((x = sl__get(rl, ext[i])) != NULL) {
                sl__err(cx, x, "%s given with unlimited: true (expected none)", ext[i]);
                ok = false;
            }
        p->unlimited = true;
        return ok;
    }
    /* sluice extension: the rule's failure mode when the store is unreachable */
    if ((x = sl__get(rl, "on_store_error")) != NULL) {
        p->fail_mode_set = true;
        if (x->kind == SL_YSCALAR && strcmp(x->s, "closed") == 0) {
            p->fail_closed = true;
        } else if (x->kind != SL_YSCALAR || strcmp(x->s, "open") != 0) {
            sl__err(cx, x, "bad on_store_error '%.40s' (expected open or closed)",
                    x->kind == SL_YSCALAR ? x->s : "");
            ok = false;
        }
    }
    if (unit == NULL) {
        sl__err(cx, rl, "rate_limit needs a unit (expected second, minute, hour, day, week, "
                "month or year)");
        return false;
    }
    int code = 0;
    int64_t secs = 0;
    for (int u = 1; u <= SL_ENVOY_UNIT_MAX; u++)
        if (unit->kind == SL_YSCALAR && strcasecmp(unit->s, sl_envoy_units[u].name) == 0) {
            code = u;
            secs = sl_envoy_units[u].secs;
        }
    if (code == 0) {
        sl__err(cx, unit, "invalid rate limit unit '%.40s' (expected second, minute, hour, "
                "day, week, month or year)", unit->kind == SL_YSCALAR ? unit->s : "");
        ok = false;
    }
    uint64_t n = 0;
    if (rpu == NULL && cx->cfg->settings.envoy.compat) {
        n = 0; /* upstream reads a missing requests_per_unit as 0: every request over */
    } else if (rpu == NULL) {
        sl__err(cx, rl, "rate_limit needs requests_per_unit (expected a whole number)");
        ok = false;
    } else {
        ok &= sl__get_count(cx, rpu, "requests_per_unit", UINT32_MAX, &n);
    }
    sluice_algo algo = SLUICE_FIXED_WINDOW;
    if ((x = sl__get(rl, "algorithm")) != NULL) {
        if (x->kind != SL_YSCALAR || sluice_algo_parse(x->s, &algo) != SLUICE_OK ||
            algo == SLUICE_CONCURRENCY || algo == SLUICE_QUOTA) {
            sl__err(cx, x, "bad algorithm '%.40s' for a rate_limit (expected fixed_window, "
                    "sliding_window, sliding_log, token_bucket, gcra or leaky_bucket)",
                    x->kind == SL_YSCALAR ? x->s : "");
            ok = false;
        }
    }
    const sl_ynode *extra = sl__get(rl, "extra_limits");
    size_t nextra = 0;
    if (extra != NULL) {
        if (extra->kind != SL_YSEQ || extra->n == 0 || extra->n > 15) {
            sl__err(cx, extra, "extra_limits must be a list of 1 to 15 limits (expected - "
                    "{rate: 1000/min})");
            return false;
        }
        nextra = extra->n;
    }
    if (!ok) return false;
    p->algo = algo;
    p->nwin = 1 + nextra;
    p->win = sl__alloc(&cx->cfg->arena, p->nwin * sizeof(*p->win));
    if (p->win == NULL) return false;
    sl_cwindow *w = &p->win[0];
    w->spec.algo = algo;
    w->spec.limit = n;
    w->spec.period_ns = secs * SLUICE_NS_PER_S;
    w->envoy_unit = code;
    w->requests_per_unit = (uint32_t)n;
    w->label = label;
    if (n == 0) w->deny_all = true; /* requests_per_unit: 0 blocks every request */
    if ((x = sl__get(rl, "burst")) != NULL) {
        if (algo != SLUICE_TOKEN_BUCKET && algo != SLUICE_GCRA && algo != SLUICE_LEAKY_BUCKET) {
            sl__err(cx, x, "burst needs algorithm token_bucket, gcra or leaky_bucket (the "
                    "default here is fixed_window)");
            ok = false;
        } else {
            ok &= sl__get_count(cx, x, "burst", UINT32_MAX, &w->spec.burst);
        }
    }
    ok = ok && sl__validate_spec(cx, rl, w, p->name);
    for (size_t i = 0; i < nextra; i++) {
        sl_cwindow *e = &p->win[1 + i];
        if (!sl__parse_window(cx, extra->v[i], algo, true, e)) {
            ok = false;
            continue;
        }
        e->spec.index = (uint32_t)(1 + i);
        if (e->label == NULL) {
            char lab[300];
            snprintf(lab, sizeof(lab), "%s.%zu", label, 1 + i);
            e->label = keep(cx, lab);
        }
        ok &= sl__validate_spec(cx, extra->v[i], e, p->name);
    }
    /* sluice extension: hot keys on a shared store take slices of the budget */
    if ((x = sl__get(rl, "leasing")) != NULL && ok) ok &= sl__parse_leasing(cx, x, p);
    return ok;
}

static char node_kind(const sl_enode *e) { return e->value == NULL ? 'b' : e->wildcard ? 'w' : 'e'; }

static uint64_t node_hash(char kind, const char *k, size_t kl, const char *v, size_t vl) {
    return sl__hash64(k, kl, v, vl) ^ ((uint64_t)(unsigned char)kind * UINT64_C(0x9e3779b97f4a7c15));
}

static bool node_is(const sl_enode *e, char kind, const char *k, size_t kl, const char *v,
                    size_t vl) {
    if (node_kind(e) != kind || strlen(e->key) != kl || memcmp(e->key, k, kl) != 0) return false;
    if (kind == 'b') return true;
    return strlen(e->value) == vl && memcmp(e->value, v, vl) == 0;
}

/* "<prefix>.<key>[_<value>]": a rule's statistics path as envoyproxy/ratelimit names it
 * (ratelimit.service.rate_limit.<path>.<stat>), from the domain down. */
static char *stat_path(sl__ctx *cx, const char *prefix, const char *key, const char *value) {
    size_t n = strlen(prefix) + 1 + strlen(key) + (value ? 1 + strlen(value) : 0);
    char *out = sl__alloc(&cx->cfg->arena, n + 1);
    if (out == NULL) return NULL;
    snprintf(out, n + 1, "%s.%s%s%s", prefix, key, value ? "_" : "", value ? value : "");
    return out;
}

/* Indexes node i of `nodes` in the level being built; false when an equal node is there. */
static bool index_node(sl_enode *nodes, size_t i, uint32_t *idx, size_t cap, uint32_t *other,
                       size_t *n_other) {
    const sl_enode *e = &nodes[i];
    char kind = node_kind(e);
    size_t kl = strlen(e->key), vl = e->value ? strlen(e->value) : 0;
    size_t slot = node_hash(kind, e->key, kl, e->value ? e->value : "", vl) & (cap - 1);
    while (idx[slot] != 0) {
        if (node_is(&nodes[idx[slot] - 1], kind, e->key, kl, e->value, vl)) return false;
        slot = (slot + 1) & (cap - 1);
    }
    idx[slot] = (uint32_t)(i + 1);
    if (kind != 'e') other[(*n_other)++] = (uint32_t)i;
    return true;
}

/* Builds one level from `list`; with `prev` (MERGE_DOMAIN_CONFIG: the same domain in
 * another file) the level starts with prev's nodes and a repeat of one of them is the
 * duplicate envoyproxy/ratelimit reports. */
static void load_level(sl__ctx *cx, const sl_ynode *list, const char *domain,
                       const char *prefix, const char *stprefix, int depth, sl_elevel *out,
                       const sl_elevel *prev) {
    size_t np = prev ? prev->n : 0;
    memset(out, 0, sizeof(*out));
    if (is_null(list)) list = NULL; /* `descriptors:` left empty: no rules */
    if (list != NULL && list->kind != SL_YSEQ) {
        sl__err(cx, list, "descriptors must be a list (expected - key: ...)");
        return;
    }
    if (depth > 16) {
        sl__err(cx, list, "descriptors nested too deep (expected at most 16 levels)");
        return;
    }
    size_t ln = list ? list->n : 0, total = np + ln;
    sl_enode *nodes = sl__alloc(&cx->cfg->arena, (total ? total : 1) * sizeof(*nodes));
    size_t cap = 2;
    while (cap < 2 * total) cap *= 2;
    uint32_t *idx = sl__alloc(&cx->cfg->arena, cap * sizeof(*idx));
    uint32_t *other = sl__alloc(&cx->cfg->arena, (total ? total : 1) * sizeof(*other));
    if (nodes == NULL || idx == NULL || other == NULL || total >= UINT32_MAX) return;
    size_t cnt = 0, n_other = 0;
    for (size_t i = 0; i < np; i++) {
        nodes[cnt] = prev->v[i];
        if (index_node(nodes, cnt, idx, cap, other, &n_other)) cnt++;
    }
    for (size_t i = 0; i < ln; i++) {
        const sl_ynode *d = list->v[i];
        if (!sl__check_fields(cx, d, "a descriptor", desc_fields) && d->kind != SL_YMAP)
            continue;
        const sl_ynode *k = sl__get(d, "key"), *v = sl__get(d, "value"), *x;
        if (k == NULL || k->kind != SL_YSCALAR || k->len == 0) {
            sl__err(cx, k ? k : d, "descriptor key must not be empty (expected key: <name>)");
            continue;
        }
        if (v != NULL && v->kind != SL_YSCALAR) {
            sl__err(cx, v, "descriptor value must be a string (expected value: <text>)");
            continue;
        }
        sl_enode *e = &nodes[cnt];
        e->key = keep(cx, k->s);
        e->value = v && v->len ? keep(cx, v->s) : NULL;
        e->wildcard = e->value && strchr(e->value, '*') != NULL;
        e->policy = -1;
        /* one index over every node finds duplicates; exact ones are also looked up by it */
        if (!index_node(nodes, cnt, idx, cap, other, &n_other)) {
            sl__err(cx, k, "duplicate descriptor '%s%s%s' at this level (expected unique "
                    "key/value pairs%s)", e->key, e->value ? "_" : "", e->value ? e->value : "",
                    prev ? "; MERGE_DOMAIN_CONFIG merges domains, not their descriptors" : "");
            continue;
        }
        char *path = tree_path(cx, prefix, e->key, e->value);
        char *spath = stat_path(cx, stprefix, e->key, e->value);
        if (path == NULL || spath == NULL) return;
        bool share = false;
        if ((x = sl__get(d, "share_threshold")) != NULL && sl__get_bool(cx, x, &share) && share &&
            !e->wildcard)
            sl__err(cx, x, "share_threshold needs a wildcard value (expected a value with '*')");
        e->share_threshold = share;
        bool quota = false;
        if ((x = sl__get(d, "quota_mode")) != NULL) sl__get_bool(cx, x, &quota);
        const sl_mdnode *md = NULL;
        if ((x = sl__get(d, "metadata")) != NULL && !is_null(x)) {
            if (x->kind != SL_YMAP)
                sl__err(cx, x, "metadata must be a mapping (expected metadata: {name: value})");
            else
                md = md_of(cx, x, 0);
        }
        const sl_ynode *rl = sl__get(d, "rate_limit");
        if (rl != NULL) {
            sl_cpolicy *p = sl__new_policy(cx);
            if (p == NULL) return;
            p->envoy = true;
            p->line = d->line;
            p->col = d->col;
            p->name = rule_name(cx, path);
            p->objective = "protection";
            p->domain = domain;
            p->n_chains = 1;
            p->chains[0].n = 1;
            p->chains[0].parts[0].kind = SL_PART_ENVOY;
            p->on_missing = SL_MISSING_SKIP;
            p->stat_key = spath;
            p->quota_mode = quota;
            p->metadata = md;
            const sl_ynode *nm = rl->kind == SL_YMAP ? sl__get(rl, "name") : NULL;
            const char *label = nm && nm->kind == SL_YSCALAR && nm->len ? keep(cx, nm->s)
                                                                        : p->name;
            parse_rate_limit(cx, rl, p, label);
            bool shadow = false;
            if ((x = sl__get(d, "shadow_mode")) != NULL && sl__get_bool(cx, x, &shadow) && shadow)
                p->rollout_pct = 0;
            if ((x = sl__get(d, "detailed_metric")) != NULL)
                sl__get_bool(cx, x, &p->detailed_metric);
            if ((x = sl__get(d, "value_to_metric")) != NULL)
                sl__get_bool(cx, x, &p->value_to_metric);
            e->policy = (int)(cx->n_pol - 1);
        } else {
            static const char *const only_rl[] = {"shadow_mode", "detailed_metric",
                                                  "value_to_metric", NULL};
            bool b;
            for (size_t j = 0; only_rl[j]; j++)
                if ((x = sl__get(d, only_rl[j])) != NULL) sl__get_bool(cx, x, &b);
        }
        /* value_to_metric on a level without a rate_limit still shapes the metric path of
         * the rules below it (see envoy_stats.c) */
        if ((x = sl__get(d, "value_to_metric")) != NULL) {
            bool b = false;
            if (sl__get_bool(cx, x, &b)) e->value_to_metric = b;
        }
        if ((x = sl__get(d, "descriptors")) != NULL)
            load_level(cx, x, domain, path, spath, depth + 1, &e->children, NULL);
        cnt++;
    }
    out->v = nodes;
    out->n = cnt;
    out->idx = idx;
    out->cap = cap;
    out->other = other;
    out->n_other = n_other;
}

void sl__envoy_load(sl__ctx *cx, const sl_ynode *doc) {
    static const char *const top[] = {"domain", "descriptors", NULL};
    if (!sl__check_fields(cx, doc, "an envoyproxy/ratelimit config", top) &&
        doc->kind != SL_YMAP)
        return;
    const sl_ynode *d = sl__get(doc, "domain"), *ds = sl__get(doc, "descriptors");
    if (d == NULL || d->kind != SL_YSCALAR || d->len == 0) {
        sl__err(cx, d ? d : doc, "domain must not be empty (expected domain: <name>)");
        return;
    }
    sl_edomain *dom = NULL;
    for (size_t i = 0; i < cx->n_dom; i++)
        if (strcmp(cx->dom[i]->domain, d->s) == 0) {
            if (!cx->cfg->settings.envoy.merge_domains) {
                sl__err(cx, d, "duplicate domain '%s' (expected each domain once, or "
                        "MERGE_DOMAIN_CONFIG=true to merge files of one domain)", d->s);
                return;
            }
            dom = cx->dom[i]; /* MERGE_DOMAIN_CONFIG: this file's rules join the domain */
        }
    bool merging = dom != NULL;
    if (dom == NULL) {
        dom = sl__new_domain(cx);
        if (dom == NULL) return;
        dom->domain = keep(cx, d->s);
    }
    if (ds == NULL) return; /* a domain with no rules limits nothing, as upstream */
    char *root = sl__alloc(&cx->tmp, put_esc(NULL, dom->domain) + 1);
    if (root == NULL) {
        cx->cfg->arena.oom = true;
        return;
    }
    root[put_esc(root, dom->domain)] = '\0';
    sl_elevel prev = dom->roots;
    load_level(cx, ds, dom->domain, root, dom->domain, 0, &dom->roots, merging ? &prev : NULL);
}

/* ---- lookup ------------------------------------------------------------------------- */

static bool key_is(const char *a, const char *k, size_t kl) {
    return strlen(a) == kl && memcmp(a, k, kl) == 0;
}

/* The child of `lv` an entry (key, value) reaches: an exact key/value node, else the
 * first wildcard whose pattern matches the value, else a bare-key node (SPECS §4.2). */
const sl_enode *sl__envoy_child(const sl_elevel *lv, const char *k, size_t kl, const char *v,
                                size_t vl) {
    if (lv == NULL || lv->n == 0 || k == NULL) return NULL;
    if (v != NULL && vl > 0) {
        size_t slot = node_hash('e', k, kl, v, vl) & (lv->cap - 1);
        while (lv->idx[slot] != 0) {
            const sl_enode *c = &lv->v[lv->idx[slot] - 1];
            if (node_is(c, 'e', k, kl, v, vl)) return c;
            slot = (slot + 1) & (lv->cap - 1);
        }
    }
    const sl_enode *bare = NULL;
    for (size_t j = 0; j < lv->n_other; j++) {
        const sl_enode *c = &lv->v[lv->other[j]];
        if (!key_is(c->key, k, kl)) continue;
        if (c->value == NULL) {
            if (bare == NULL) bare = c;
        } else if (v != NULL && sl__glob(c->value, v, vl)) {
            return c;
        }
    }
    return bare;
}

/* ---- the loaded rules as text (the debug port's /rlconfig) --------------------------- */

/* One line per rule with a rate_limit, as envoyproxy/ratelimit's debug endpoint prints
 * its config: "<domain.key_value...>: unit=<UNIT> requests_per_unit=<N>, shadow_mode:
 * <bool>", in file order (upstream walks Go maps: no order). An unlimited rule has unit
 * UNKNOWN and 0, as upstream's zero-valued limit. */
char *sl_config_envoy_dump(const sl_config *cfg, size_t *len) {
    size_t cap = 256, n = 0;
    char *out = malloc(cap);
    if (out == NULL) return NULL;
    out[0] = '\0';
    for (size_t i = 0; cfg != NULL && i < cfg->n_pol; i++) {
        const sl_cpolicy *p = &cfg->pol[i];
        if (!p->envoy || p->stat_key == NULL) continue;
        int code = 0;
        uint32_t rpu = 0;
        if (!p->unlimited && p->nwin > 0) {
            code = p->win[0].envoy_unit;
            rpu = p->win[0].requests_per_unit;
        }
        char unit[16];
        const char *un = code > 0 && code <= SL_ENVOY_UNIT_MAX ? sl_envoy_units[code].name : "unknown";
        size_t k = 0;
        for (; un[k] && k + 1 < sizeof(unit); k++)
            unit[k] = (char)(un[k] >= 'a' && un[k] <= 'z' ? un[k] - 'a' + 'A' : un[k]);
        unit[k] = '\0';
        for (;;) {
            int w = snprintf(out + n, cap - n, "%s: unit=%s requests_per_unit=%u, shadow_mode: %s\n",
                             p->stat_key, unit, rpu, p->rollout_pct == 0 ? "true" : "false");
            if (w < 0) break;
            if ((size_t)w < cap - n) {
                n += (size_t)w;
                break;
            }
            char *nb = realloc(out, cap * 2 + (size_t)w);
            if (nb == NULL) {
                free(out);
                return NULL;
            }
            out = nb;
            cap = cap * 2 + (size_t)w;
        }
    }
    *len = n;
    return out;
}
