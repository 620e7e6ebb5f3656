/* SPDX-License-Identifier: Apache-2.0 */
/*
 * describe.c -- the engine's compiled policies in words: the effective configuration as
 * JSON (GET /v1/policies), the difference between two configs (the audit trail's
 * "changed: limits: 10/s burst 20 -> 20/s burst 40"), short window names for metric
 * labels, and the facts metrics need about a window's policy. Nothing here runs per
 * decision: it reads the immutable config and allocates freely.
 * Units: the config's (ns for durations, shown as ms or the config's own notation).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/explain.h"
#include "engine/internal.h"
#include "engine/jw.h"

/* ---- words for config values -------------------------------------------------------------- */

/* A duration the way a config writes it: "s", "min", "5min", "500ms" (rate periods). */
static void period_text(int64_t ns, bool unit_alone, char *buf, size_t len) {
    static const struct {
        int64_t ns;
        const char *u;
    } u[] = {{86400 * SLUICE_NS_PER_S, "day"}, {3600 * SLUICE_NS_PER_S, "h"},
             {60 * SLUICE_NS_PER_S, "min"},    {SLUICE_NS_PER_S, "s"},
             {SLUICE_NS_PER_MS, "ms"},         {1000, "us"}};
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
        if (ns > 0 && ns % u[i].ns == 0) {
            if (ns == u[i].ns && unit_alone)
                snprintf(buf, len, "%s", u[i].u);
            else
                snprintf(buf, len, "%lld%s", (long long)(ns / u[i].ns), u[i].u);
            return;
        }
    snprintf(buf, len, "%lldns", (long long)ns);
}

static const char *quota_period_name(sluice_period p) {
    switch (p) {
    case SLUICE_PERIOD_HOUR: return "hour";
    case SLUICE_PERIOD_DAY: return "day";
    case SLUICE_PERIOD_WEEK: return "week";
    case SLUICE_PERIOD_MONTH: return "month";
    }
    return "?";
}

static bool has_burst(sluice_algo a) {
    return a == SLUICE_TOKEN_BUCKET || a == SLUICE_GCRA || a == SLUICE_LEAKY_BUCKET;
}

/* "10/s", "50000/day", "10 concurrent": a window's rate or budget. */
static size_t spec_short(const sluice_limit_spec *s, char *buf, size_t len) {
    char per[32];
    int n;
    switch (s->algo) {
    case SLUICE_QUOTA:
        n = snprintf(buf, len, "%llu/%s", (unsigned long long)s->limit,
                     quota_period_name(s->quota_period));
        break;
    case SLUICE_CONCURRENCY:
        n = snprintf(buf, len, "%llu concurrent", (unsigned long long)s->limit);
        break;
    case SLUICE_ADAPTIVE_CONCURRENCY:
        n = snprintf(buf, len, "adaptive up to %llu concurrent", (unsigned long long)s->limit);
        break;
    default:
        period_text(s->period_ns, true, per, sizeof(per));
        n = snprintf(buf, len, "%llu/%s", (unsigned long long)s->limit, per);
    }
    if (n < 0) n = 0;
    return (size_t)n < len ? (size_t)n : (len ? len - 1 : 0);
}

/* The whole window in words, for the audit trail: "10/s burst 20", "50000/day tz
 * Europe/Madrid", "10 concurrent lease 30s", "1/s burst 10 max_delay 2s". */
static void spec_long(const sl_cwindow *cw, char *buf, size_t len) {
    const sluice_limit_spec *s = &cw->spec;
    char base[64], d[32];
    if (cw->deny_all) {
        snprintf(buf, len, "blocked (requests_per_unit 0)");
        return;
    }
    spec_short(s, base, sizeof(base));
    size_t off = (size_t)snprintf(buf, len, "%s", base);
    if (has_burst(s->algo) && s->burst && s->burst != s->limit && off < len)
        off += (size_t)snprintf(buf + off, len - off, " burst %llu", (unsigned long long)s->burst);
    if (s->algo == SLUICE_QUOTA && s->tz && off < len)
        off += (size_t)snprintf(buf + off, len - off, " tz %s", s->tz);
    if ((s->algo == SLUICE_CONCURRENCY || s->algo == SLUICE_ADAPTIVE_CONCURRENCY) && off < len) {
        period_text(s->lease_ns, false, d, sizeof(d));
        off += (size_t)snprintf(buf + off, len - off, " lease %s", d);
    }
    if (s->algo == SLUICE_LEAKY_BUCKET && s->max_delay_ns && off < len) {
        period_text(s->max_delay_ns, false, d, sizeof(d));
        off += (size_t)snprintf(buf + off, len - off, " max_delay %s", d);
    }
    if (s->algo != SLUICE_QUOTA && s->algo != SLUICE_CONCURRENCY && off < len) {
        const char *an = sluice_algo_name(s->algo);
        snprintf(buf + off, len - off, " (%s)", an ? an : "?");
    }
}

static void part_text(const sl_part *p, char *buf, size_t len) {
    switch (p->kind) {
    case SL_PART_CLIENT_IP:
        if (p->v6_prefix && p->v6_prefix < 128)
            snprintf(buf, len, "client_ip/%u", p->v6_prefix);
        else
            snprintf(buf, len, "client_ip");
        return;
    case SL_PART_HEADER: snprintf(buf, len, "header.%s", p->name ? p->name : ""); return;
    case SL_PART_METHOD: snprintf(buf, len, "method"); return;
    case SL_PART_PATH: snprintf(buf, len, "path"); return;
    case SL_PART_ROUTE: snprintf(buf, len, "route"); return;
    case SL_PART_HOST: snprintf(buf, len, "host"); return;
    case SL_PART_DESCRIPTOR: snprintf(buf, len, "descriptor.%s", p->name ? p->name : ""); return;
    case SL_PART_ENVOY: snprintf(buf, len, "descriptor entries"); return;
    case SL_PART_BODY_BYTES: snprintf(buf, len, "body_bytes"); return;
    case SL_PART_LLM_MODEL: snprintf(buf, len, "llm.model"); return;
    case SL_PART_LLM_USER: snprintf(buf, len, "llm.user"); return;
    }
    snprintf(buf, len, "?");
}

/* ---- facts for metrics ----------------------------------------------------------------- */

size_t sl_window_describe(const sl_window_info *info, char *buf, size_t len) {
    if (len == 0) return 0;
    buf[0] = '\0';
    if (info == NULL) return 0;
    const sl__ewin *w = (const sl__ewin *)(const void *)info;
    int n;
    if (w->cw == NULL) {
        n = snprintf(buf, len, "unlimited");
    } else if (w->cp != NULL && w->cp->envoy && w->lim != NULL && w->ep != NULL &&
               w->cp->name != NULL && strcmp(w->cp->name, "envoy-override") == 0) {
        n = snprintf(buf, len, "override/%s", info->name ? info->name : "");
    } else if (w->cw->deny_all) {
        n = snprintf(buf, len, "blocked");
    } else {
        return spec_short(&w->cw->spec, buf, len);
    }
    if (n < 0) n = 0;
    return (size_t)n < len ? (size_t)n : len - 1;
}

void sl_window_meta_get(const sl_window_info *info, sl_window_meta *m) {
    memset(m, 0, sizeof(*m));
    m->rollout_pct = 100;
    if (info == NULL) return;
    const sl__ewin *w = (const sl__ewin *)(const void *)info;
    const sl_cpolicy *cp = w->cp;
    m->policy = info->policy;
    if (cp == NULL) return;
    m->shadow = cp->react == SL_REACT_SHADOW || cp->rollout_pct == 0;
    m->rollout_pct = cp->rollout_pct;
    m->fail_closed = cp->fail_closed;
    m->delay = cp->react == SL_REACT_DELAY;
}

size_t sl_engine_windows(const sl_engine *e, const sl_window_info **out, size_t max) {
    size_t n = 0;
#define ADD(ptr)                       \
    do {                               \
        if (n < max) out[n] = (ptr);   \
        n++;                           \
    } while (0)
    for (size_t i = 0; i < e->n_pol; i++) {
        const sl__epol *ep = &e->pol[i];
        if (ep->cp->unlimited) {
            ADD(&ep->win[0].info);
            continue;
        }
        for (size_t j = 0; j < ep->nwin; j++) ADD(&ep->win[j].info);
        for (size_t k = 0; ep->plan_win != NULL && k < ep->cp->n_plans; k++)
            for (size_t j = 0; j < ep->cp->plans[k].nwin; j++) ADD(&ep->plan_win[k][j].info);
        for (size_t j = 0; j < ep->n_tier_win; j++) ADD(&ep->cap_win[j].info); /* borrowing tiers */
    }
    for (int u = 1; u < SL__OVR_UNITS; u++) ADD(&e->ovr[u].info);
#undef ADD
    return n;
}

/* ---- one policy as JSON ------------------------------------------------------------------ */

static const char *mode_name(const sl_cpolicy *cp) {
    if (cp->react == SL_REACT_SHADOW || cp->rollout_pct == 0) return "shadow";
    if (cp->rollout_pct < 100) return "rollout";
    return "enforce";
}

static void window_json(sl_jw *w, const sl_cwindow *cw, const char *file) {
    const sluice_limit_spec *s = &cw->spec;
    char b[128];
    sl_jw_obj(w);
    sl_jw_kstr(w, "name", cw->label);
    if (cw->deny_all) {
        sl_jw_kstr(w, "window", "blocked");
    } else {
        spec_short(s, b, sizeof(b));
        sl_jw_kstr(w, "window", b);
    }
    sl_jw_kstr(w, "algorithm", sluice_algo_name(s->algo));
    switch (s->algo) {
    case SLUICE_QUOTA:
        sl_jw_ku64(w, "quota", s->limit);
        sl_jw_kstr(w, "period", quota_period_name(s->quota_period));
        sl_jw_kstr(w, "tz", s->tz ? s->tz : "UTC");
        break;
    case SLUICE_CONCURRENCY:
    case SLUICE_ADAPTIVE_CONCURRENCY:
        sl_jw_ku64(w, "max", s->limit);
        sl_jw_key(w, "lease_ms");
        sl_jw_ms(w, s->lease_ns);
        if (cw->adapt != NULL) {
            static const char *const ctl[4] = {"?", "gradient2", "vegas", "aimd"};
            sl_jw_ku64(w, "min", cw->adapt->min);
            sl_jw_ku64(w, "initial", cw->adapt->initial);
            sl_jw_kstr(w, "controller", ctl[cw->adapt->ctl <= 3 ? cw->adapt->ctl : 0]);
        }
        break;
    default:
        period_text(s->period_ns, true, b, sizeof(b));
        sl_jw_key(w, "rate");
        sl_jw_strf(w, "%llu/%s", (unsigned long long)s->limit, b);
        sl_jw_ku64(w, "limit", s->limit);
        sl_jw_key(w, "period_ms");
        sl_jw_ms(w, s->period_ns);
        if (has_burst(s->algo)) sl_jw_ku64(w, "burst", s->burst ? s->burst : s->limit);
        if (s->algo == SLUICE_LEAKY_BUCKET) {
            sl_jw_key(w, "max_delay_ms");
            sl_jw_ms(w, s->max_delay_ns);
        }
    }
    if (cw->envoy_unit) sl_jw_ku64(w, "requests_per_unit", cw->requests_per_unit);
    if (cw->line > 0) {
        sl_jw_key(w, "source");
        sl_jw_strf(w, "%s:%d", file ? file : "", cw->line);
    }
    sl_jw_end(w);
}

static void conds_json(sl_jw *w, const sl_hdr_cond *c, size_t n) {
    sl_jw_arr(w);
    for (size_t i = 0; i < n; i++) {
        sl_jw_obj(w);
        sl_jw_kstr(w, "name", c[i].name);
        if (c[i].pattern) sl_jw_kstr(w, "pattern", c[i].pattern);
        else sl_jw_kbool(w, "present", c[i].present);
        sl_jw_end(w);
    }
    sl_jw_aend(w);
}

static const char *path_kind_name(sl_path_kind k) {
    switch (k) {
    case SL_PATH_EXACT: return "exact";
    case SL_PATH_PREFIX: return "prefix";
    case SL_PATH_GLOB: return "glob";
    default: return "any";
    }
}

static void scope_json(sl_jw *w, const sl_cpolicy *cp) {
    sl_jw_obj(w);
    if (cp->envoy) {
        sl_jw_kstr(w, "envoy_rule", cp->name);
    } else if (cp->domain) {
        sl_jw_kstr(w, "domain", cp->domain);
        if (cp->n_desc) {
            sl_jw_key(w, "descriptor");
            conds_json(w, cp->desc, cp->n_desc);
        }
    } else {
        if (cp->n_methods) {
            sl_jw_key(w, "methods");
            sl_jw_arr(w);
            for (size_t i = 0; i < cp->n_methods; i++) sl_jw_str(w, cp->methods[i]);
            sl_jw_aend(w);
        }
        if (cp->path_kind != SL_PATH_ANY) {
            sl_jw_kstr(w, "path", cp->path);
            sl_jw_kstr(w, "path_match", path_kind_name(cp->path_kind));
        }
        if (cp->host) sl_jw_kstr(w, "host", cp->host);
        if (cp->n_hdr) {
            sl_jw_key(w, "headers");
            conds_json(w, cp->hdr, cp->n_hdr);
        }
        if (!cp->n_methods && cp->path_kind == SL_PATH_ANY && !cp->host && !cp->n_hdr)
            sl_jw_kbool(w, "every_request", true);
    }
    sl_jw_end(w);
}

static void key_json(sl_jw *w, const sl_cpolicy *cp) {
    char b[160];
    sl_jw_arr(w);
    for (size_t c = 0; c < cp->n_chains; c++) {
        sl_jw_arr(w);
        for (size_t i = 0; i < cp->chains[c].n; i++) {
            part_text(&cp->chains[c].parts[i], b, sizeof(b));
            sl_jw_str(w, b);
        }
        sl_jw_aend(w);
    }
    sl_jw_aend(w);
}

static void policy_json(sl_jw *w, const sl_cpolicy *cp, const char *file) {
    char b[160];
    sl_jw_obj(w);
    sl_jw_kstr(w, "name", cp->name);
    sl_jw_kstr(w, "objective", cp->objective);
    if (cp->line > 0) {
        sl_jw_key(w, "source");
        sl_jw_strf(w, "%s:%d", file ? file : "", cp->line);
    }
    sl_jw_kstr(w, "format", cp->envoy ? "envoy" : "sluice");
    sl_jw_key(w, "scope");
    scope_json(w, cp);
    sl_jw_key(w, "key");
    key_json(w, cp);
    /* key: the chains tried in order (the first complete one is the key); then this */
    sl_jw_kstr(w, "when_no_key", cp->on_missing == SL_MISSING_SKIP ? "skip" : "reject (400)");
    sl_jw_key(w, "cost");
    sl_jw_obj(w);
    sl_jw_ku64(w, "default", cp->cost_default);
    if (cp->n_ops) {
        sl_jw_key(w, "operations");
        sl_jw_arr(w);
        for (size_t i = 0; i < cp->n_ops; i++) {
            sl_jw_obj(w);
            sl_jw_kstr(w, "method", cp->ops[i].method);
            sl_jw_kstr(w, "path", cp->ops[i].path);
            sl_jw_ku64(w, "cost", cp->ops[i].cost);
            sl_jw_end(w);
        }
        sl_jw_aend(w);
    }
    if (cp->cost_from_set) {
        part_text(&cp->cost_from, b, sizeof(b));
        sl_jw_kstr(w, "from", b);
    }
    sl_jw_kbool(w, "settle", cp->settle);
    sl_jw_end(w);
    if (!cp->unlimited) sl_jw_kstr(w, "algorithm", sluice_algo_name(cp->algo));
    sl_jw_key(w, "windows");
    sl_jw_arr(w);
    for (size_t i = 0; i < cp->nwin; i++) window_json(w, &cp->win[i], file);
    sl_jw_aend(w);
    if (cp->n_plans) {
        part_text(&cp->plan_from, b, sizeof(b));
        sl_jw_kstr(w, "plan_from", b);
        sl_jw_key(w, "plans");
        sl_jw_arr(w);
        for (size_t k = 0; k < cp->n_plans; k++) {
            sl_jw_obj(w);
            sl_jw_kstr(w, "name", cp->plans[k].name);
            sl_jw_key(w, "windows");
            sl_jw_arr(w);
            for (size_t i = 0; i < cp->plans[k].nwin; i++) window_json(w, &cp->plans[k].win[i], file);
            sl_jw_aend(w);
            sl_jw_end(w);
        }
        sl_jw_aend(w);
    }
    sl_jw_kstr(w, "mode", mode_name(cp));
    sl_jw_ku64(w, "rollout_percent", cp->react == SL_REACT_SHADOW ? 0 : cp->rollout_pct);
    sl_jw_kstr(w, "on_exceed", cp->react == SL_REACT_DELAY    ? "delay"
                               : cp->react == SL_REACT_SHADOW ? "shadow"
                                                              : "reject");
    if (cp->react == SL_REACT_DELAY) {
        sl_jw_key(w, "max_delay_ms");
        sl_jw_ms(w, cp->max_delay_ns);
    }
    sl_jw_kstr(w, "on_store_error", cp->fail_local ? "local" : cp->fail_closed ? "closed" : "open");
    sl_jw_key(w, "leasing");
    if (cp->lease_slice) {
        sl_jw_obj(w);
        sl_jw_ku64(w, "slice", cp->lease_slice);
        sl_jw_key(w, "hold_ms");
        sl_jw_ms(w, cp->lease_hold_ns);
        sl_jw_end(w);
    } else {
        sl_jw_null(w);
    }
    sl_jw_kbool(w, "headers", cp->headers);
    sl_jw_kbool(w, "count_rejected", cp->count_rejected);
    if (cp->envoy) {
        sl_jw_kbool(w, "unlimited", cp->unlimited);
        if (cp->rule_name) sl_jw_kstr(w, "rule_name", cp->rule_name);
        if (cp->n_replaces) {
            sl_jw_key(w, "replaces");
            sl_jw_arr(w);
            for (size_t i = 0; i < cp->n_replaces; i++) sl_jw_str(w, cp->replaces[i]);
            sl_jw_aend(w);
        }
    }
    sl_jw_end(w);
}

char *sl_engine_policies_json(const sl_engine *e, const char *file, size_t *len) {
    sl_jw w;
    sl_jw_init(&w);
    sl_jw_arr(&w);
    for (size_t i = 0; e != NULL && i < e->n_pol; i++) policy_json(&w, e->pol[i].cp, file);
    sl_jw_aend(&w);
    return sl_jw_finish(&w, len);
}

/* ---- the difference between two configs ------------------------------------------------ */

/* One aspect of a policy as canonical text: two policies differ in an aspect iff their
 * texts differ, and the text is what the audit trail shows. */
typedef void (*aspect_fn)(const sl_cpolicy *cp, char *buf, size_t len);

static size_t cat(char *buf, size_t len, size_t off, const char *s) {
    if (off >= len) return off;
    int n = snprintf(buf + off, len - off, "%s", s);
    return n < 0 ? off : off + (size_t)n;
}

static void windows_text(const sl_cwindow *win, size_t n, char *buf, size_t len) {
    size_t off = 0;
    char b[160];
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        spec_long(&win[i], b, sizeof(b));
        if (i) off = cat(buf, len, off, ", ");
        off = cat(buf, len, off, b);
    }
}

static void a_limits(const sl_cpolicy *cp, char *buf, size_t len) {
    if (cp->unlimited) snprintf(buf, len, "unlimited");
    else windows_text(cp->win, cp->nwin, buf, len);
}

static void a_plans(const sl_cpolicy *cp, char *buf, size_t len) {
    size_t off = 0;
    char b[512], p[160];
    buf[0] = '\0';
    if (cp->n_plans == 0) {
        snprintf(buf, len, "none");
        return;
    }
    part_text(&cp->plan_from, p, sizeof(p));
    off = cat(buf, len, off, "from ");
    off = cat(buf, len, off, p);
    for (size_t k = 0; k < cp->n_plans; k++) {
        windows_text(cp->plans[k].win, cp->plans[k].nwin, b, sizeof(b));
        off = cat(buf, len, off, k ? "; " : ": ");
        off = cat(buf, len, off, cp->plans[k].name);
        off = cat(buf, len, off, " ");
        off = cat(buf, len, off, b);
    }
}

static void a_scope(const sl_cpolicy *cp, char *buf, size_t len) {
    size_t off = 0;
    buf[0] = '\0';
    if (cp->domain) {
        off = cat(buf, len, off, "domain ");
        off = cat(buf, len, off, cp->domain);
    }
    for (size_t i = 0; i < cp->n_methods; i++) {
        off = cat(buf, len, off, i ? "|" : (off ? " method " : "method "));
        off = cat(buf, len, off, cp->methods[i]);
    }
    if (cp->path_kind != SL_PATH_ANY) {
        off = cat(buf, len, off, off ? " path " : "path ");
        off = cat(buf, len, off, cp->path);
        if (cp->path_kind == SL_PATH_PREFIX) off = cat(buf, len, off, "*");
    }
    if (cp->host) {
        off = cat(buf, len, off, off ? " host " : "host ");
        off = cat(buf, len, off, cp->host);
    }
    const sl_hdr_cond *c = cp->domain ? cp->desc : cp->hdr;
    size_t nc = cp->domain ? cp->n_desc : cp->n_hdr;
    for (size_t i = 0; i < nc; i++) {
        off = cat(buf, len, off, off ? " " : "");
        off = cat(buf, len, off, cp->domain ? "entry " : "header ");
        off = cat(buf, len, off, c[i].name);
        off = cat(buf, len, off, c[i].pattern ? "=" : (c[i].present ? " present" : " absent"));
        if (c[i].pattern) off = cat(buf, len, off, c[i].pattern);
    }
    if (off == 0) snprintf(buf, len, "every request");
}

static void a_key(const sl_cpolicy *cp, char *buf, size_t len) {
    size_t off = 0;
    char p[160];
    buf[0] = '\0';
    for (size_t c = 0; c < cp->n_chains; c++) {
        if (c) off = cat(buf, len, off, " else ");
        off = cat(buf, len, off, "[");
        for (size_t i = 0; i < cp->chains[c].n; i++) {
            part_text(&cp->chains[c].parts[i], p, sizeof(p));
            if (i) off = cat(buf, len, off, ", ");
            off = cat(buf, len, off, p);
        }
        off = cat(buf, len, off, "]");
    }
    cat(buf, len, off, cp->on_missing == SL_MISSING_SKIP ? ", skip when missing"
                                                         : ", reject when missing");
}

static void a_cost(const sl_cpolicy *cp, char *buf, size_t len) {
    char p[160];
    size_t off = (size_t)snprintf(buf, len, "%llu", (unsigned long long)cp->cost_default);
    for (size_t i = 0; i < cp->n_ops && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, ", %s %s: %llu", cp->ops[i].method,
                                cp->ops[i].path, (unsigned long long)cp->ops[i].cost);
    if (cp->cost_from_set) {
        part_text(&cp->cost_from, p, sizeof(p));
        off = cat(buf, len, off, ", from ");
        off = cat(buf, len, off, p);
    }
    if (cp->settle) cat(buf, len, off, ", settled");
}

static void a_mode(const sl_cpolicy *cp, char *buf, size_t len) {
    if (cp->react == SL_REACT_SHADOW || cp->rollout_pct == 0) snprintf(buf, len, "shadow");
    else if (cp->rollout_pct < 100) snprintf(buf, len, "rollout %u%%", cp->rollout_pct);
    else snprintf(buf, len, "enforce");
}

static void a_exceed(const sl_cpolicy *cp, char *buf, size_t len) {
    char d[32];
    if (cp->react == SL_REACT_DELAY) {
        period_text(cp->max_delay_ns, false, d, sizeof(d));
        snprintf(buf, len, "delay up to %s", d);
    } else {
        snprintf(buf, len, "%s", cp->react == SL_REACT_SHADOW ? "shadow" : "reject");
    }
}

static void a_store_error(const sl_cpolicy *cp, char *buf, size_t len) {
    snprintf(buf, len, "%s", cp->fail_local ? "local" : cp->fail_closed ? "closed" : "open");
}

static void a_leasing(const sl_cpolicy *cp, char *buf, size_t len) {
    char d[32];
    if (!cp->lease_slice) {
        snprintf(buf, len, "off");
        return;
    }
    period_text(cp->lease_hold_ns, false, d, sizeof(d));
    snprintf(buf, len, "slice %u hold %s", cp->lease_slice, d);
}

static void a_algorithm(const sl_cpolicy *cp, char *buf, size_t len) {
    const char *n = cp->unlimited ? "none" : sluice_algo_name(cp->algo);
    snprintf(buf, len, "%s", n ? n : "?");
}

static void a_objective(const sl_cpolicy *cp, char *buf, size_t len) {
    snprintf(buf, len, "%s", cp->objective ? cp->objective : "");
}

static void a_flags(const sl_cpolicy *cp, char *buf, size_t len) {
    snprintf(buf, len, "headers %s, count_rejected %s", cp->headers ? "on" : "off",
             cp->count_rejected ? "on" : "off");
}

static void ppm_text(uint32_t ppm, char *buf, size_t len) {
    if (ppm % 10000 == 0) snprintf(buf, len, "%u%%", ppm / 10000);
    else snprintf(buf, len, "%u.%04u%%", ppm / 10000, ppm % 10000);
}

/* Classes, borrowing, penalty: what capacity protection adds to a policy ("none"). */
static void a_capacity(const sl_cpolicy *cp, char *buf, size_t len) {
    const sl_ccap *c = cp->cap;
    size_t off = 0;
    char t[64], u[64];
    buf[0] = '\0';
    if (c == NULL || (!c->classes && !c->borrow && !c->penalty)) {
        snprintf(buf, len, "none");
        return;
    }
    if (c->classes) {
        off = cat(buf, len, off, "classes");
        if (c->prio_part_set) {
            part_text(&c->prio_part, t, sizeof(t));
            off = cat(buf, len, off, " from ");
            off = cat(buf, len, off, t);
        }
        for (uint32_t i = 0; i < c->shed.nclasses; i++) {
            ppm_text(c->shed.cls[i].fill_ppm, t, sizeof(t));
            ppm_text(c->shed.cls[i].reserve_ppm, u, sizeof(u));
            off = cat(buf, len, off, i ? ", " : " ");
            off = cat(buf, len, off, c->class_names[i] ? c->class_names[i] : "?");
            off = cat(buf, len, off, " (fill ");
            off = cat(buf, len, off, t);
            if (c->shed.cls[i].reserve_ppm) {
                off = cat(buf, len, off, ", reserve ");
                off = cat(buf, len, off, u);
            }
            off = cat(buf, len, off, ")");
        }
        off = cat(buf, len, off, "; missing: ");
        off = cat(buf, len, off, c->class_names[c->missing_class] ? c->class_names[c->missing_class] : "?");
    }
    if (c->borrow) {
        off = cat(buf, len, off, off ? "; borrow " : "borrow ");
        off = cat(buf, len, off, c->root_name ? c->root_name : "root");
        for (size_t i = 0; i < c->n_tiers; i++) {
            snprintf(t, sizeof(t), " > %s (cap %llu)", c->tiers[i].name ? c->tiers[i].name : "?",
                     (unsigned long long)c->tiers[i].cap);
            off = cat(buf, len, off, t);
        }
    }
    if (c->penalty) {
        char a[32], b[32], f[32];
        period_text(c->pen.first_ns, false, a, sizeof(a));
        period_text(c->pen.max_ns, false, b, sizeof(b));
        period_text(c->pen.forgive_after_ns, false, f, sizeof(f));
        snprintf(t, sizeof(t), "%u.%02u", c->pen.factor_q16 >> 16,
                 (unsigned)(((uint64_t)(c->pen.factor_q16 & 0xffff) * 100 + 32768) >> 16));
        off = cat(buf, len, off, off ? "; penalty first " : "penalty first ");
        off = cat(buf, len, off, a);
        off = cat(buf, len, off, ", factor ");
        off = cat(buf, len, off, t);
        off = cat(buf, len, off, ", max ");
        off = cat(buf, len, off, b);
        off = cat(buf, len, off, ", forgive after ");
        off = cat(buf, len, off, f);
        snprintf(t, sizeof(t), ", challenge levels %u", c->pen.challenge_levels);
        off = cat(buf, len, off, t);
    }
}

static const struct {
    const char *name;
    aspect_fn fn;
} aspects[] = {
    {"limits", a_limits},       {"algorithm", a_algorithm}, {"plans", a_plans},
    {"match", a_scope},         {"key", a_key},             {"cost", a_cost},
    {"mode", a_mode},           {"on_exceed", a_exceed},    {"on_store_error", a_store_error},
    {"leasing", a_leasing},     {"objective", a_objective}, {"options", a_flags},
    {"capacity", a_capacity},
};

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* A config's policies sorted by name, for lookups in O(log n): a diff of two configs of
 * 10,000 policies compared every pair before (a second of a worker's time per reload). */
typedef struct by_name {
    const sl_cpolicy **p;
    size_t n;
} by_name;

static int cmp_pol(const void *a, const void *b) {
    return strcmp((*(const sl_cpolicy *const *)a)->name, (*(const sl_cpolicy *const *)b)->name);
}

static bool index_names(const sl_config *c, by_name *ix) {
    ix->n = c ? c->n_pol : 0;
    ix->p = ix->n ? malloc(ix->n * sizeof(*ix->p)) : NULL;
    if (ix->n && ix->p == NULL) return false;
    for (size_t i = 0; i < ix->n; i++) ix->p[i] = &c->pol[i];
    if (ix->n) qsort(ix->p, ix->n, sizeof(*ix->p), cmp_pol);
    return true;
}

static const sl_cpolicy *find(const by_name *ix, const char *name) {
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ix->p[mid]->name, name);
        if (c == 0) return ix->p[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

void sl_config_diff_free(sl_config_diff *d) {
    for (size_t i = 0; i < d->nadded; i++) free(d->added[i]);
    for (size_t i = 0; i < d->nremoved; i++) free(d->removed[i]);
    for (size_t i = 0; i < d->nchanged; i++) {
        free(d->changed[i].policy);
        free(d->changed[i].how);
    }
    free(d->added);
    free(d->removed);
    free(d->changed);
    memset(d, 0, sizeof(*d));
}

/* Why aspect by aspect: "what changed" must name the change an operator made (a rate,
 * a mode) rather than "policy differs"; an aspect's text is short and canonical, so equal
 * texts mean equal behaviour for that aspect (with one exception: Envoy descriptor trees,
 * compared by the rules they compile into). Quadratic in policies, fine at reload time. */
int sl_config_diff_make(const sl_config *old, const sl_config *cur, sl_config_diff *d) {
    memset(d, 0, sizeof(*d));
    size_t nn = cur ? cur->n_pol : 0, no = old ? old->n_pol : 0;
    d->added = calloc(nn + 1, sizeof(char *));
    d->removed = calloc(no + 1, sizeof(char *));
    d->changed = calloc(nn + 1, sizeof(sl_config_change));
    if (d->added == NULL || d->removed == NULL || d->changed == NULL) goto oom;
    enum { TEXT = 2048 };
    char *a = malloc(TEXT), *b = malloc(TEXT), *how = malloc(8192);
    if (a == NULL || b == NULL || how == NULL) {
        free(a), free(b), free(how);
        goto oom;
    }
    by_name oix = {0}, cix = {0};
    bool ok = index_names(old, &oix) && index_names(cur, &cix);
    for (size_t i = 0; i < nn && ok; i++) {
        const sl_cpolicy *np = &cur->pol[i];
        const sl_cpolicy *op = find(&oix, np->name);
        if (op == NULL) {
            ok = (d->added[d->nadded] = dupstr(np->name)) != NULL;
            d->nadded += ok;
            continue;
        }
        size_t off = 0;
        how[0] = '\0';
        for (size_t k = 0; k < sizeof(aspects) / sizeof(aspects[0]); k++) {
            aspects[k].fn(op, a, TEXT);
            aspects[k].fn(np, b, TEXT);
            if (strcmp(a, b) == 0) continue;
            if (off) off = cat(how, 8192, off, "; ");
            off = cat(how, 8192, off, aspects[k].name);
            off = cat(how, 8192, off, ": ");
            off = cat(how, 8192, off, a);
            off = cat(how, 8192, off, " -> ");
            off = cat(how, 8192, off, b);
        }
        if (off == 0) continue;
        sl_config_change *ch = &d->changed[d->nchanged];
        ch->policy = dupstr(np->name);
        ch->how = dupstr(how);
        ok = ch->policy != NULL && ch->how != NULL;
        d->nchanged++;
    }
    for (size_t i = 0; i < no && ok; i++)
        if (find(&cix, old->pol[i].name) == NULL) {
            ok = (d->removed[d->nremoved] = dupstr(old->pol[i].name)) != NULL;
            d->nremoved += ok;
        }
    free(a), free(b), free(how);
    free(oix.p), free(cix.p);
    if (ok) return SLUICE_OK;
oom:
    sl_config_diff_free(d);
    return SLUICE_ENOMEM;
}
