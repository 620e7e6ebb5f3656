/* SPDX-License-Identifier: Apache-2.0 */
/*
 * explain.c -- why a request gets its answer (see explain.h). The analysis runs the real
 * pipeline (sl_engine_prepare, so the keys, costs and windows are exactly the decision's)
 * and asks prepare.c's explain hooks for the reasons it does not keep (which condition
 * failed, which key chain was complete, where the cost came from). The windows' state
 * comes from the same verdict decided through the store with every cost 0: a peek that
 * consumes nothing, takes no concurrency slot and issues no token.
 * Invariant: nothing here changes a counter; raw keys appear only with opts->raw_keys.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/path.h"
#include "engine/explain.h"
#include "engine/internal.h"
#include "engine/jw.h"

/* How a policy stood with the request, beyond prepare.c's SL_XM_* codes. */
enum {
    XM_NAMED = 100,  /* the explicit form named it */
    XM_ENVOY_RULE,   /* an Envoy rule: only RLS descriptors reach it */
    XM_DOMAIN_ONLY,  /* a policy for descriptors of a domain: not for HTTP attributes */
    XM_HTTP_ONLY,    /* an HTTP policy: a descriptor request does not reach it */
    XM_WRONG_DOMAIN, /* descriptor request of another domain */
    XM_NO_DESC,      /* an Envoy rule no descriptor of the request reached (or replaced) */
    XM_OVERRIDE      /* a descriptor carried its own limit */
};

typedef struct xpol {
    const sl_cpolicy *cp;
    int desc;   /* descriptor index, -1 */
    int match;  /* SL_XM_OK or why not */
    size_t which;
    int chain;  /* the key chain used, -1 none */
    int missing[SL_MAX_CHAINS];
    int cost_src;
    size_t cost_op;
    uint64_t cost;
    const char *plan;
    size_t first, n; /* its items in the verdict (n == 0: none) */
} xpol;

#define XECHO 256
#define XHEADERS 32 /* headers echoed (more are used, not shown: headers_cut) */

typedef struct xhdr {
    char name[XECHO], value[XECHO];
} xhdr;

struct sl_explain {
    const sl_engine *e;
    bool named;
    int prep_rc;
    char method[XECHO], path[XECHO], host[XECHO], ip[XECHO], route[XECHO];
    bool has_method, has_path, has_host, path_cut, has_ip, has_route, has_bytes, has_cost;
    uint64_t bytes, req_cost;
    xhdr *hdr; /* the request's headers as given (values are shown as keys are) */
    size_t nhdr, hdrs_given;
    char policy[256]; /* the explicit form's policy name */
    size_t n, cap;
    xpol *p;
    const char *missing_key_policy;
    uint64_t cost[SLUICE_MAX_ITEMS]; /* every item's cost before the peek zeroed it */
    /* per-key overrides: the spans prepare gave their policies (the peek rewrites them) */
    uint8_t ng;
    bool spans_fixed;
    size_t g0first[SL_VERDICT_OVR], g0n[SL_VERDICT_OVR];
    uint64_t gcost[SL_VERDICT_OVR];
    sl_verdict v;
};

static void echo(char *dst, bool *has, bool *cut, sl_str s) {
    *has = s.p != NULL;
    if (s.p == NULL) return;
    size_t n = s.len < XECHO - 1 ? s.len : XECHO - 1;
    if (cut) *cut = n < s.len;
    memcpy(dst, s.p, n);
    dst[n] = '\0';
}

static xpol *add(sl_explain *x, const sl_cpolicy *cp, int desc, int match) {
    if (x->n == x->cap) {
        size_t nc = x->cap ? x->cap * 2 : 16;
        xpol *np = realloc(x->p, nc * sizeof(*np));
        if (np == NULL) return NULL;
        x->p = np;
        x->cap = nc;
    }
    xpol *p = &x->p[x->n++];
    memset(p, 0, sizeof(*p));
    p->cp = cp;
    p->desc = desc;
    p->match = match;
    p->chain = -1;
    for (int i = 0; i < SL_MAX_CHAINS; i++) p->missing[i] = -1;
    return p;
}

/* The run of items one policy application put in the verdict: prepare.c appends a
 * policy's windows together, so a run is contiguous (same policy, descriptor, key). */
static bool find_run(const sl_verdict *v, const sl_cpolicy *cp, int desc, size_t from_run,
                     size_t *first, size_t *n) {
    size_t runs = 0;
    for (size_t i = 0; i < v->n;) {
        const sl__ewin *w = sl__item_win(&v->items[i]);
        size_t j = i + 1;
        while (j < v->n && sl__item_win(&v->items[j])->cp == w->cp &&
               v->items[j].descriptor == v->items[i].descriptor &&
               v->items[j].key_off == v->items[i].key_off)
            j++;
        if (w->cp == cp && v->items[i].descriptor == desc) {
            if (runs++ == from_run) {
                *first = i;
                *n = j - i;
                return true;
            }
        }
        i = j;
    }
    return false;
}

/* After prepare: keep the real costs, then turn the verdict into a peek. */
static void make_peek(sl_explain *x) {
    x->missing_key_policy = x->v.missing_key_policy;
    x->v.missing_key_policy = NULL; /* peek every other window all the same */
    for (size_t i = 0; i < x->v.n; i++) {
        sl_verdict_item *it = &x->v.items[i];
        x->cost[i] = it->cost;
        it->cost = 0;
        it->settle = false;
        it->charge = false;
    }
    x->ng = x->v.n_ovr;
    x->spans_fixed = false;
    for (size_t g = 0; g < x->v.n_ovr; g++) {
        x->g0first[g] = x->v.ovr[g].first;
        x->g0n[g] = x->v.ovr[g].n;
        x->gcost[g] = x->v.ovr[g].cost;
        x->v.ovr[g].cost = 0; /* the override's windows are peeked too */
    }
}

/* After the peek: the policies' item spans and costs as the overrides rewrote them. */
static void fix_spans(sl_explain *x) {
    if (x->ng == 0 || x->spans_fixed) return;
    x->spans_fixed = true;
    uint64_t cost[SLUICE_MAX_ITEMS];
    size_t io = 0, in = 0;
    for (size_t g = 0; g < x->ng; g++) {
        const sl_vovr *ov = &x->v.ovr[g];
        for (; io < x->g0first[g] && in < SLUICE_MAX_ITEMS; io++) cost[in++] = x->cost[io];
        for (size_t k = 0; k < ov->n && in < SLUICE_MAX_ITEMS; k++) cost[in++] = x->gcost[g];
        io = x->g0first[g] + x->g0n[g];
    }
    for (; io < SLUICE_MAX_ITEMS && in < SLUICE_MAX_ITEMS; io++) cost[in++] = x->cost[io];
    memcpy(x->cost, cost, sizeof(cost));
    for (size_t i = 0; i < x->n; i++) {
        xpol *p = &x->p[i];
        if (p->n == 0 && p->first == 0) continue;
        long delta = 0;
        bool mine = false;
        for (size_t g = 0; g < x->ng; g++) {
            if (x->g0first[g] == p->first && x->g0n[g] == p->n && !mine) {
                p->n = x->v.ovr[g].n;
                mine = true;
                continue;
            }
            if (x->g0first[g] < p->first) delta += (long)x->v.ovr[g].n - (long)x->g0n[g];
        }
        p->first = (size_t)((long)p->first + delta);
    }
}

/* The override that applied to policy p's key, as the table holds it now. */
static void override_json(sl_jw *w, const sl_explain *x, const xpol *p) {
    for (size_t g = 0; g < x->ng; g++) {
        const sl_vovr *ov = &x->v.ovr[g];
        if (ov->kind == SL_OVR_NONE || ((const sl__epol *)ov->ep)->cp != p->cp) continue;
        static const char *const kinds[] = {"none", "plan", "limits", "block", "exempt"};
        sl_jw_key(w, "override");
        sl_jw_obj(w);
        sl_jw_kstr(w, "kind", kinds[ov->kind <= 4 ? ov->kind : 0]);
        sl_ovr_table *t = sl_store_overrides(x->e->store);
        sl_ovr_rec *r = t != NULL ? sl_ovr_get(t, ov->guard.h, x->v.decided_at.wall_ns) : NULL;
        if (ov->kind == SL_OVR_PLAN) sl_jw_kstr(w, "plan", ov->plan);
        if (r != NULL) {
            if (r->kind == SL_OVR_LIMITS && r->body) sl_jw_kstr(w, "limits", r->body);
            if (r->label) sl_jw_kstr(w, "label", r->label);
            if (r->reason) sl_jw_kstr(w, "reason", r->reason);
            sl_jw_kstr(w, "set_by", r->set_by);
            sl_jw_ki64(w, "set_at_ms", r->set_at_ns / SLUICE_NS_PER_MS);
            if (r->expires_ns) sl_jw_ki64(w, "expires_at_ms", r->expires_ns / SLUICE_NS_PER_MS);
            sl_ovr_rec_free(r);
        } else if (ov->label[0]) {
            sl_jw_kstr(w, "label", ov->label);
        }
        sl_jw_end(w);
        return;
    }
}

static void analyse(sl_explain *x, xpol *p, const sl_request *r, sl_str path) {
    const sl_descriptor *d = p->desc >= 0 && r ? &r->descriptors[p->desc] : NULL;
    if (r != NULL && p->cp->n_chains > 0)
        p->chain = sl__xkey_chains(p->cp, r, d, path, p->missing);
    if (r != NULL) {
        p->cost = sl__xcost(p->cp, r, d, path, &p->cost_src, &p->cost_op);
        p->plan = sl__xplan(p->cp, r, d, path);
    }
    find_run(&x->v, p->cp, p->desc, 0, &p->first, &p->n);
    if (p->n > 0 && p->plan == NULL) p->plan = x->v.items[p->first].info->plan;
}

sl_explain *sl_explain_request(const sl_engine *e, const sl_request *req) {
    if (e == NULL || req == NULL) return NULL;
    sl_explain *x = calloc(1, sizeof(*x));
    if (x == NULL) return NULL;
    x->e = e;
    echo(x->method, &x->has_method, NULL, req->method);
    echo(x->host, &x->has_host, NULL, req->host);
    echo(x->ip, &x->has_ip, NULL, req->client_ip);
    echo(x->route, &x->has_route, NULL, req->route);
    x->has_bytes = req->has_body_bytes;
    x->bytes = req->body_bytes;
    x->has_cost = req->has_cost;
    x->req_cost = req->cost;
    x->hdrs_given = req->n_headers;
    size_t nh = req->n_headers < XHEADERS ? req->n_headers : XHEADERS;
    x->hdr = nh ? calloc(nh, sizeof(*x->hdr)) : NULL;
    if (nh && x->hdr == NULL) {
        free(x);
        return NULL;
    }
    for (size_t i = 0; i < nh; i++) {
        bool has;
        echo(x->hdr[i].name, &has, NULL, req->headers[i].name);
        echo(x->hdr[i].value, &has, NULL, req->headers[i].value);
    }
    x->nhdr = nh;
    /* the path as policies see it (normalised, query cut) */
    size_t pl = req->path.p ? sl_path_len(req->path.p, req->path.len) : 0;
    char *buf = malloc(pl + 1);
    if (buf == NULL) {
        free(x);
        return NULL;
    }
    sl_str npath = {NULL, 0};
    if (req->path.p != NULL) npath.len = sl_path_norm(req->path.p, req->path.len, buf, &npath.p);
    echo(x->path, &x->has_path, &x->path_cut, npath);
    x->prep_rc = sl_engine_prepare(e, req, &x->v);
    bool oom = false;
    if (req->domain.p == NULL) {
        for (size_t i = 0; i < e->n_pol && !oom; i++) {
            const sl_cpolicy *cp = e->pol[i].cp;
            size_t which = 0;
            int m = cp->envoy ? XM_ENVOY_RULE
                    : cp->domain ? XM_DOMAIN_ONLY
                                 : sl__xmatch_http(cp, req, npath, &which);
            xpol *p = add(x, cp, -1, m);
            if (p == NULL) {
                oom = true;
                break;
            }
            p->which = which;
            if (m == SL_XM_OK) analyse(x, p, req, npath);
        }
    } else {
        for (size_t i = 0; i < e->n_pol && !oom; i++) {
            const sl_cpolicy *cp = e->pol[i].cp;
            bool any = false;
            for (size_t d = 0; d < req->n_descriptors && !oom; d++) {
                size_t first, n;
                if (!find_run(&x->v, cp, (int)d, 0, &first, &n)) continue;
                any = true;
                xpol *p = add(x, cp, (int)d, SL_XM_OK);
                if (p == NULL) oom = true;
                else analyse(x, p, req, npath);
            }
            if (any || oom) continue;
            xpol *p;
            if (!cp->envoy && cp->domain == NULL) {
                p = add(x, cp, -1, XM_HTTP_ONLY);
            } else if (!cp->envoy && (strlen(cp->domain) != req->domain.len ||
                                      memcmp(cp->domain, req->domain.p, req->domain.len) != 0)) {
                p = add(x, cp, -1, XM_WRONG_DOMAIN);
            } else if (!cp->envoy) {
                /* the first descriptor's failed condition, or a key it could not compose */
                size_t which = 0;
                int m = req->n_descriptors
                            ? sl__xmatch_desc(cp, &req->descriptors[0], &which)
                            : SL_XM_DESCRIPTOR;
                p = add(x, cp, req->n_descriptors ? 0 : -1, m);
                if (p != NULL) {
                    p->which = which;
                    if (m == SL_XM_OK) analyse(x, p, req, npath);
                }
            } else {
                p = add(x, cp, -1, XM_NO_DESC);
            }
            if (p == NULL) oom = true;
        }
        /* descriptors that carried their own limit */
        for (size_t d = 0; d < req->n_descriptors && !oom; d++) {
            size_t first, n;
            if (!find_run(&x->v, &e->ovr_pol, (int)d, 0, &first, &n)) continue;
            xpol *p = add(x, &e->ovr_pol, (int)d, XM_OVERRIDE);
            if (p == NULL) oom = true;
            else p->first = first, p->n = n, p->cost = x->v.items[first].cost;
        }
    }
    free(buf);
    if (oom) {
        sl_explain_free(x);
        return NULL;
    }
    make_peek(x);
    return x;
}

sl_explain *sl_explain_named(const sl_engine *e, const char *policy, const void *key,
                             size_t key_len, bool has_cost, uint64_t cost) {
    if (e == NULL || policy == NULL) return NULL;
    sl_explain *x = calloc(1, sizeof(*x));
    if (x == NULL) return NULL;
    x->e = e;
    x->named = true;
    snprintf(x->policy, sizeof(x->policy), "%s", policy);
    x->prep_rc = sl_engine_prepare_named(e, policy, key, key_len, has_cost, cost, &x->v);
    for (size_t i = 0; i < e->n_pol; i++) {
        const sl_cpolicy *cp = e->pol[i].cp;
        if (strcmp(cp->name, policy) != 0) continue;
        xpol *p = add(x, cp, -1, XM_NAMED);
        if (p == NULL) {
            sl_explain_free(x);
            return NULL;
        }
        p->cost = has_cost ? cost : cp->cost_default;
        p->cost_src = has_cost ? SL_XC_ATTRIBUTE : SL_XC_DEFAULT;
        p->chain = 0;
        find_run(&x->v, cp, -1, 0, &p->first, &p->n);
        break;
    }
    make_peek(x);
    return x;
}

sl_verdict *sl_explain_verdict(sl_explain *x) { return x ? &x->v : NULL; }

void sl_explain_free(sl_explain *x) {
    if (x == NULL) return;
    free(x->p);
    free(x->hdr);
    free(x);
}

/* ---- keys ----------------------------------------------------------------------------- */

void sl_key_hash_text(const sl_hash_key *k, const void *key, size_t len, char out[19]) {
    static const sl_hash_key zero = {0, 0};
    sl_hash128 h = sl_hash128_of(k ? k : &zero, key, len);
    static const char hex[] = "0123456789abcdef";
    out[0] = 'k';
    out[1] = ':';
    for (int i = 0; i < 16; i++) out[2 + i] = hex[(h.lo >> (60 - 4 * i)) & 15];
    out[18] = '\0';
}

/* Decodes prepare.c's key encoding (chain byte, then tag + 2-byte length + bytes). */
size_t sl_key_text(const void *key, size_t len, char *buf, size_t cap) {
    const unsigned char *k = key;
    size_t off = 0;
    if (cap == 0) return 0;
    buf[0] = '\0';
#define PUT(s_, n_)                                          \
    do {                                                     \
        size_t m_ = (n_);                                    \
        if (off + m_ >= cap) m_ = cap - 1 - off;             \
        memcpy(buf + off, (s_), m_);                         \
        off += m_;                                           \
        buf[off] = '\0';                                     \
    } while (0)
    size_t i = 1;
    bool first = true;
    while (len > 0 && i + 3 <= len && off + 1 < cap) {
        unsigned char tag = k[i];
        size_t n = (size_t)k[i + 1] << 8 | k[i + 2];
        i += 3;
        if (i + n > len) break;
        const unsigned char *v = k + i;
        i += n;
        if (tag == 'v' || tag == 'w') {
            PUT("=", 1);
        } else if (!first) {
            PUT("|", 1);
        }
        first = false;
        if (tag == 'i' && (n == 4 || n == 16)) {
            char ip[INET6_ADDRSTRLEN];
            if (inet_ntop(n == 4 ? AF_INET : AF_INET6, v, ip, sizeof(ip)) != NULL)
                PUT(ip, strlen(ip));
        } else {
            PUT(v, n);
        }
    }
#undef PUT
    return off;
}

/* ---- rendering ----------------------------------------------------------------------------- */

static const char *part_name(const sl_part *p, char *b, size_t len) {
    switch (p->kind) {
    case SL_PART_CLIENT_IP:
        if (p->v6_prefix && p->v6_prefix < 128) snprintf(b, len, "client_ip/%u", p->v6_prefix);
        else snprintf(b, len, "client_ip");
        break;
    case SL_PART_HEADER: snprintf(b, len, "header.%s", p->name); break;
    case SL_PART_METHOD: snprintf(b, len, "method"); break;
    case SL_PART_PATH: snprintf(b, len, "path"); break;
    case SL_PART_ROUTE: snprintf(b, len, "route"); break;
    case SL_PART_HOST: snprintf(b, len, "host"); break;
    case SL_PART_DESCRIPTOR: snprintf(b, len, "descriptor.%s", p->name); break;
    case SL_PART_ENVOY: snprintf(b, len, "descriptor entries"); break;
    case SL_PART_BODY_BYTES: snprintf(b, len, "body_bytes"); break;
    case SL_PART_LLM_MODEL: snprintf(b, len, "llm.model"); break;
    case SL_PART_LLM_USER: snprintf(b, len, "llm.user"); break;
    }
    return b;
}

static const char *path_kind(sl_path_kind k) {
    return k == SL_PATH_EXACT ? "exactly" : k == SL_PATH_PREFIX ? "as a prefix" : "as a glob";
}

static void why_text(sl_jw *w, const sl_explain *x, const xpol *p) {
    const sl_cpolicy *cp = p->cp;
    switch (p->match) {
    case SL_XM_OK:
        if (p->desc >= 0) {
            sl_jw_strf(w, "descriptor %d reached it", p->desc);
        } else if (!cp->n_methods && cp->path_kind == SL_PATH_ANY && !cp->host && !cp->n_hdr) {
            sl_jw_str(w, "no match conditions: it applies to every request");
        } else {
            char b[512];
            size_t off = 0;
            b[0] = '\0';
            if (cp->n_methods && off < sizeof(b))
                off += (size_t)snprintf(b + off, sizeof(b) - off, "method %s; ", x->method);
            if (cp->path_kind != SL_PATH_ANY && off < sizeof(b))
                off += (size_t)snprintf(b + off, sizeof(b) - off, "path matches %s %s; ",
                                        cp->path, path_kind(cp->path_kind));
            if (cp->host && off < sizeof(b))
                off += (size_t)snprintf(b + off, sizeof(b) - off, "host matches %s; ", cp->host);
            if (cp->n_hdr && off < sizeof(b))
                off += (size_t)snprintf(b + off, sizeof(b) - off, "%zu header condition%s hold; ",
                                        cp->n_hdr, cp->n_hdr > 1 ? "s" : "");
            if (off >= 2 && off < sizeof(b)) b[off - 2] = '\0';
            sl_jw_str(w, b);
        }
        return;
    case SL_XM_METHOD: {
        char b[256];
        size_t off = 0;
        b[0] = '\0';
        for (size_t i = 0; i < cp->n_methods && off < sizeof(b); i++)
            off += (size_t)snprintf(b + off, sizeof(b) - off, "%s%s", i ? ", " : "", cp->methods[i]);
        sl_jw_strf(w, "method %s is not %s%s", x->has_method ? x->method : "(none)",
                   cp->n_methods > 1 ? "one of " : "", b);
        return;
    }
    case SL_XM_PATH:
        sl_jw_strf(w, "path %s does not match %s %s", x->has_path ? x->path : "(none)", cp->path,
                   path_kind(cp->path_kind));
        return;
    case SL_XM_HOST:
        sl_jw_strf(w, "host %s does not match %s", x->has_host ? x->host : "(none)", cp->host);
        return;
    case SL_XM_HEADER: {
        const sl_hdr_cond *c = &cp->hdr[p->which];
        if (c->pattern)
            sl_jw_strf(w, "header %s is absent or does not match %s", c->name, c->pattern);
        else
            sl_jw_strf(w, "header %s is %s", c->name, c->present ? "absent" : "present");
        return;
    }
    case SL_XM_DESCRIPTOR: {
        if (cp->n_desc == 0) {
            sl_jw_str(w, "the request has no descriptor");
            return;
        }
        const sl_hdr_cond *c = &cp->desc[p->which];
        if (c->pattern)
            sl_jw_strf(w, "descriptor entry %s is absent or does not match %s", c->name, c->pattern);
        else
            sl_jw_strf(w, "descriptor entry %s is %s", c->name, c->present ? "absent" : "present");
        return;
    }
    case XM_NAMED: sl_jw_str(w, "named explicitly (policy and key given)"); return;
    case XM_ENVOY_RULE: sl_jw_str(w, "an Envoy rule: only descriptors of its domain reach it"); return;
    case XM_DOMAIN_ONLY: sl_jw_strf(w, "applies to descriptors of domain %s only", cp->domain); return;
    case XM_HTTP_ONLY: sl_jw_str(w, "an HTTP policy: a descriptor request does not reach it"); return;
    case XM_WRONG_DOMAIN: sl_jw_strf(w, "applies to domain %s, not this request's", cp->domain); return;
    case XM_NO_DESC:
        sl_jw_str(w, "no descriptor of the request reached this rule (or a rule that replaces it "
                     "did)");
        return;
    case XM_OVERRIDE:
        sl_jw_strf(w, "descriptor %d carries its own limit (the config is bypassed for it)", p->desc);
        return;
    }
    sl_jw_str(w, "?");
}

static const char *mode_text(const sl_cpolicy *cp, char *b, size_t len) {
    if (cp->react == SL_REACT_SHADOW || cp->rollout_pct == 0) snprintf(b, len, "shadow");
    else if (cp->rollout_pct < 100) snprintf(b, len, "rollout %u%%", cp->rollout_pct);
    else snprintf(b, len, "enforce");
    return b;
}

/* Whether window item i would admit the request's own cost, from its peeked state. */
static bool would_admit(const sl_explain *x, size_t i) {
    const sl_verdict_item *it = &x->v.items[i];
    if (it->unlimited) return true;
    const sl__ewin *w = sl__item_win(it);
    if (w->cw != NULL && w->cw->deny_all) return false;
    return it->result.remaining >= x->cost[i];
}

static bool peek_ok(const sl_explain *x, int rc) {
    return rc == SLUICE_OK && x->prep_rc == SLUICE_OK && !x->v.store_error &&
           x->v.action != SL_ERROR;
}

typedef struct xres {
    const char *result;
    bool limits;   /* an enforced policy that would reject */
    bool delay;    /* ... whose reaction is to delay (wait and check again) */
} xres;

static xres policy_result(const sl_explain *x, const xpol *p, int rc) {
    xres r = {"allowed", false, false};
    const sl_cpolicy *cp = p->cp;
    bool shadow_pol = cp->react == SL_REACT_SHADOW || cp->rollout_pct == 0;
    if (p->n == 0) {
        if (p->match != SL_XM_OK && p->match != XM_NAMED) return (xres){NULL, false, false};
        if (x->prep_rc != SLUICE_OK) return (xres){"error", false, false};
        if (x->missing_key_policy != NULL && strcmp(x->missing_key_policy, cp->name) == 0)
            return (xres){"missing_key", true, false};
        return (xres){"skipped", false, false};
    }
    if (!peek_ok(x, rc)) {
        if (x->v.store_error) return (xres){cp->fail_closed && !shadow_pol ? "fail_closed" : "fail_open", false, false};
        return (xres){"error", false, false};
    }
    bool lim = false;
    for (size_t i = p->first; i < p->first + p->n; i++) lim |= !would_admit(x, i);
    if (!lim) return r;
    bool shadow_item = x->v.items[p->first].shadow;
    if (shadow_item) return (xres){shadow_pol ? "shadow_limited" : "rollout_limited", false, false};
    return (xres){cp->react == SL_REACT_DELAY ? "recheck" : "limited", true, cp->react == SL_REACT_DELAY};
}

static void key_json(sl_jw *w, const sl_explain *x, const xpol *p, const sl_explain_opts *o) {
    const sl_cpolicy *cp = p->cp;
    char b[160];
    sl_jw_obj(w);
    if (p->n > 0) {
        const sl_verdict_item *it = &x->v.items[p->first];
        const unsigned char *k = x->v.keys + it->key_off;
        char h[19];
        sl_key_hash_text(o ? o->hash_key : NULL, k, it->key_len, h);
        sl_jw_kstr(w, "hash", h);
        if (o && o->raw_keys) {
            char t[1024];
            size_t n = sl_key_text(k, it->key_len, t, sizeof(t));
            sl_jw_key(w, "raw");
            sl_jw_strn(w, t, n);
        }
    } else {
        sl_jw_kbool(w, "missing", true);
        sl_jw_kstr(w, "when_missing", cp->on_missing == SL_MISSING_SKIP ? "skip"
                                      : (cp->react == SL_REACT_SHADOW || cp->rollout_pct == 0)
                                          ? "skip (a shadow policy never rejects)"
                                          : "reject (400)");
    }
    if (p->match == XM_OVERRIDE) {
        sl_jw_kstr(w, "from", "domain and descriptor entries");
    } else if (x->named) {
        sl_jw_kstr(w, "from", "the key given (its own namespace)");
    } else if (cp->n_chains > 0) {
        if (p->chain >= 0) {
            sl_jw_kbool(w, "fallback", p->chain > 0);
            sl_jw_ki64(w, "chain", p->chain);
        }
        sl_jw_key(w, "chains");
        sl_jw_arr(w);
        for (size_t c = 0; c < cp->n_chains; c++) {
            sl_jw_obj(w);
            sl_jw_key(w, "parts");
            sl_jw_arr(w);
            for (size_t i = 0; i < cp->chains[c].n; i++)
                sl_jw_str(w, part_name(&cp->chains[c].parts[i], b, sizeof(b)));
            sl_jw_aend(w);
            bool tried = p->chain < 0 || (int)c <= p->chain;
            if (!tried) {
                sl_jw_kstr(w, "status", "not needed");
            } else if (p->missing[c] >= 0) {
                sl_jw_kstr(w, "status", "incomplete");
                sl_jw_kstr(w, "missing", part_name(&cp->chains[c].parts[p->missing[c]], b, sizeof(b)));
            } else {
                sl_jw_kstr(w, "status", "used");
            }
            sl_jw_end(w);
        }
        sl_jw_aend(w);
    } else {
        sl_jw_kstr(w, "from", "one key for every request (key: [])");
    }
    sl_jw_end(w);
}

static void cost_json(sl_jw *w, const xpol *p) {
    const sl_cpolicy *cp = p->cp;
    char b[160];
    sl_jw_obj(w);
    sl_jw_ku64(w, "units", p->cost);
    sl_jw_key(w, "from");
    switch (p->cost_src) {
    case SL_XC_OPERATION:
        sl_jw_strf(w, "operation %s %s", cp->ops[p->cost_op].method, cp->ops[p->cost_op].path);
        break;
    case SL_XC_ATTRIBUTE:
        if (p->match == XM_NAMED) sl_jw_str(w, "the cost given");
        else sl_jw_strf(w, "attribute %s", part_name(&cp->cost_from, b, sizeof(b)));
        break;
    case SL_XC_HITS_ADDEND: sl_jw_str(w, "the descriptor's hits_addend (1 when unset)"); break;
    case SL_XC_CALLER: sl_jw_str(w, "the cost the caller gave for the request"); break;
    default:
        sl_jw_str(w, cp->cost_from_set ? "default (the attribute was absent or not a number)"
                                       : "default");
    }
    if (cp->settle) sl_jw_kstr(w, "settle", "a reservation, settled after the response");
    sl_jw_end(w);
}

static void windows_json(sl_jw *w, const sl_explain *x, const xpol *p, int rc) {
    char b[64];
    bool ok = peek_ok(x, rc);
    sl_jw_arr(w);
    for (size_t i = p->first; i < p->first + p->n; i++) {
        const sl_verdict_item *it = &x->v.items[i];
        sl_jw_obj(w);
        sl_jw_kstr(w, "name", it->info->name);
        sl_window_describe(it->info, b, sizeof(b));
        sl_jw_kstr(w, "window", b);
        const sl__ewin *ew = sl__item_win(it);
        if (ew->cw != NULL) sl_jw_kstr(w, "algorithm", sluice_algo_name(ew->cw->spec.algo));
        sl_jw_ku64(w, "cost", x->cost[i]);
        if (it->unlimited) {
            sl_jw_kbool(w, "unlimited", true);
        } else if (ok) {
            sl_jw_ku64(w, "limit", it->override ? it->override_limit : it->result.limit);
            sl_jw_ku64(w, "remaining", it->result.remaining);
            sl_jw_key(w, "reset_after_ms");
            sl_jw_ms(w, it->result.reset_after_ns);
        }
        if (ok || it->unlimited) sl_jw_kbool(w, "would_admit", would_admit(x, i));
        sl_jw_end(w);
    }
    sl_jw_aend(w);
}

/* remaining after the cost, over the limit, below that of b's (cross-multiplied) */
static bool tighter(const sl_explain *x, size_t a, size_t b) {
    const sluice_result *ra = &x->v.items[a].result, *rb = &x->v.items[b].result;
    uint64_t la = ra->remaining - (ra->remaining >= x->cost[a] ? x->cost[a] : ra->remaining);
    uint64_t lb = rb->remaining - (rb->remaining >= x->cost[b] ? x->cost[b] : rb->remaining);
    return (unsigned __int128)la * (rb->limit ? rb->limit : 1) <
           (unsigned __int128)lb * (ra->limit ? ra->limit : 1);
}

static void answer_json(sl_jw *w, const sl_explain *x, int rc) {
    sl_jw_obj(w);
    if (x->prep_rc != SLUICE_OK || (rc != SLUICE_OK && !x->v.store_error)) {
        int e = x->prep_rc != SLUICE_OK ? x->prep_rc : rc;
        sl_jw_kstr(w, "action", "error");
        sl_jw_ki64(w, "status", e == SLUICE_ENOTFOUND ? 404 : 500);
        sl_jw_kstr(w, "error", sluice_strerror(e));
        sl_jw_end(w);
        return;
    }
    if (x->missing_key_policy != NULL) {
        sl_jw_kstr(w, "action", "reject");
        sl_jw_ki64(w, "status", 400);
        sl_jw_kstr(w, "why", "a matching policy's key is missing and it rejects such requests");
        sl_jw_kstr(w, "policy", x->missing_key_policy);
        sl_jw_end(w);
        return;
    }
    if (x->v.store_error) {
        bool closed = false;
        for (size_t i = 0; i < x->v.n; i++)
            if (!x->v.items[i].shadow && !x->v.items[i].unlimited)
                closed |= sl__item_win(&x->v.items[i])->cp->fail_closed;
        sl_jw_kstr(w, "action", closed ? "fail" : "allow");
        sl_jw_ki64(w, "status", closed ? 503 : 200);
        sl_jw_kstr(w, "why", closed ? "the store is unreachable and a matching policy fails closed"
                                    : "the store is unreachable and the policies fail open");
        sl_jw_kstr(w, "error", sluice_strerror(x->v.error));
        sl_jw_end(w);
        return;
    }
    int dec = -1;
    bool reject = false, all_delay = true;
    for (size_t i = 0; i < x->v.n; i++) {
        const sl_verdict_item *it = &x->v.items[i];
        if (it->shadow || it->unlimited) continue;
        if (!would_admit(x, i)) {
            if (!reject) dec = -1;
            reject = true;
            if (sl__item_win(it)->cp->react != SL_REACT_DELAY) all_delay = false;
            if (dec < 0 || it->result.reset_after_ns > x->v.items[dec].result.reset_after_ns)
                dec = (int)i;
        } else if (!reject && (dec < 0 || tighter(x, i, (size_t)dec))) {
            dec = (int)i;
        }
    }
    if (!reject) {
        sl_jw_kstr(w, "action", "allow");
        sl_jw_ki64(w, "status", 200);
    } else if (all_delay) {
        sl_jw_kstr(w, "action", "recheck");
        sl_jw_ki64(w, "status", 429);
        sl_jw_kstr(w, "why", "every policy that would limit delays instead: the caller is "
                             "told to wait and check again");
    } else {
        sl_jw_kstr(w, "action", "reject");
        sl_jw_ki64(w, "status", 429);
    }
    sl_jw_key(w, "deciding");
    if (dec >= 0) {
        char b[64];
        const sl_verdict_item *it = &x->v.items[dec];
        sl_jw_obj(w);
        sl_jw_kstr(w, "policy", it->info->policy);
        sl_jw_kstr(w, "name", it->info->name);
        sl_window_describe(it->info, b, sizeof(b));
        sl_jw_kstr(w, "window", b);
        sl_jw_kstr(w, "rule", reject ? "the window that would limit with the longest reset "
                                       "(an estimate: a peek does not compute retry-after)"
                                     : "the window closest to exhaustion after this cost");
        sl_jw_end(w);
    } else {
        sl_jw_null(w);
    }
    sl_jw_end(w);
}

char *sl_explain_render(const sl_explain *x, int rc, const sl_explain_opts *o, size_t *len) {
    if (x == NULL) return NULL;
    fix_spans((sl_explain *)x); /* once: the rendering reads the spans as the peek left them */
    sl_jw w;
    sl_jw_init(&w);
    char b[64];
    sl_jw_obj(&w);
    sl_jw_key(&w, "request");
    sl_jw_obj(&w);
    if (x->named) {
        sl_jw_kstr(&w, "policy", x->policy);
        if (x->prep_rc == SLUICE_OK && x->v.n > 0) {
            const sl_verdict_item *it = &x->v.items[0];
            char h[19];
            sl_key_hash_text(o ? o->hash_key : NULL, x->v.keys + it->key_off, it->key_len, h);
            sl_jw_kstr(&w, "key_hash", h);
        }
    } else {
        if (x->has_method) sl_jw_kstr(&w, "method", x->method);
        if (x->has_path) {
            sl_jw_kstr(&w, "path", x->path);
            if (x->path_cut) sl_jw_kbool(&w, "path_cut", true);
        }
        if (x->has_host) sl_jw_kstr(&w, "host", x->host);
        /* the address and header values may be keys: shown as keys are (hashed unless
         * raw keys are allowed) */
        bool raw = o != NULL && o->raw_keys;
        char h[19];
        if (x->has_ip) {
            if (raw) {
                sl_jw_kstr(&w, "ip", x->ip);
            } else {
                sl_key_hash_text(o ? o->hash_key : NULL, x->ip, strlen(x->ip), h);
                sl_jw_kstr(&w, "ip_hash", h);
            }
        }
        if (x->has_route) sl_jw_kstr(&w, "route", x->route);
        if (x->hdrs_given > 0) {
            sl_jw_key(&w, "headers");
            sl_jw_arr(&w);
            for (size_t i = 0; i < x->nhdr; i++) {
                sl_jw_obj(&w);
                sl_jw_kstr(&w, "name", x->hdr[i].name);
                if (raw) {
                    sl_jw_kstr(&w, "value", x->hdr[i].value);
                } else {
                    sl_key_hash_text(o ? o->hash_key : NULL, x->hdr[i].value, strlen(x->hdr[i].value), h);
                    sl_jw_kstr(&w, "value_hash", h);
                }
                sl_jw_end(&w);
            }
            sl_jw_aend(&w);
            if (x->hdrs_given > x->nhdr) sl_jw_ki64(&w, "headers_cut", (int64_t)(x->hdrs_given - x->nhdr));
        }
        if (x->has_bytes) sl_jw_ki64(&w, "bytes", (int64_t)(x->bytes > INT64_MAX ? INT64_MAX : x->bytes));
        if (x->has_cost) sl_jw_ki64(&w, "cost", (int64_t)(x->req_cost > INT64_MAX ? INT64_MAX : x->req_cost));
    }
    sl_jw_end(&w);
    if (o && o->store) sl_jw_kstr(&w, "store", o->store);
    sl_jw_key(&w, "policies");
    sl_jw_arr(&w);
    for (size_t i = 0; i < x->n; i++) {
        const xpol *p = &x->p[i];
        bool matched = p->match == SL_XM_OK || p->match == XM_NAMED || p->match == XM_OVERRIDE;
        sl_jw_obj(&w);
        sl_jw_kstr(&w, "policy", p->cp->name);
        if (p->desc >= 0 && matched) sl_jw_ki64(&w, "descriptor", p->desc);
        sl_jw_kbool(&w, "matched", matched);
        if (matched) override_json(&w, x, p);
        sl_jw_key(&w, "why");
        why_text(&w, x, p);
        if (matched) {
            sl_jw_kstr(&w, "mode", mode_text(p->cp, b, sizeof(b)));
            if (p->n > 0 && p->cp->rollout_pct > 0 && p->cp->rollout_pct < 100 &&
                p->cp->react != SL_REACT_SHADOW)
                sl_jw_kbool(&w, "in_rollout", !x->v.items[p->first].shadow);
            sl_jw_kstr(&w, "plan", p->plan);
            sl_jw_key(&w, "key");
            key_json(&w, x, p, o);
            sl_jw_key(&w, "cost");
            cost_json(&w, p);
            sl_jw_key(&w, "windows");
            windows_json(&w, x, p, rc);
            xres r = policy_result(x, p, rc);
            sl_jw_kstr(&w, "result", r.result);
        }
        sl_jw_end(&w);
    }
    sl_jw_aend(&w);
    sl_jw_key(&w, "answer");
    answer_json(&w, x, rc);
    sl_jw_kbool(&w, "consumed", false);
    sl_jw_end(&w);
    return sl_jw_finish(&w, len);
}
