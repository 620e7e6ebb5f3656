/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prepare.c -- the first half of a decision, with no I/O: which policies a request
 * matches (method, path, host, headers; Envoy descriptors through the domain's tree),
 * the key each composes, the cost it pays, the plan and the rollout: a verdict whose
 * items the store then decides (decide.c). The check path allocates nothing: keys are
 * composed into the verdict.
 * Key encoding: one byte naming the chain that produced the key, then per part a tag
 * byte, a 2-byte big-endian length and the bytes, so no two part lists collide.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/hash.h"
#include "core/path.h"
#include "engine/internal.h"

typedef sl__ewin e_win;
typedef sl__epol e_pol;

/* ---- attributes --------------------------------------------------------------------- */

static bool ieq(sl_str a, const char *b, size_t blen) {
    return a.p != NULL && a.len == blen && strncasecmp(a.p, b, blen) == 0;
}

static sl_str find_header(const sl_request *r, const char *name, size_t nlen) {
    for (size_t i = 0; i < r->n_headers; i++)
        if (ieq(r->headers[i].name, name, nlen)) return r->headers[i].value;
    return (sl_str){NULL, 0};
}

static sl_str find_entry(const sl_descriptor *d, const char *name, size_t nlen) {
    if (d == NULL) return (sl_str){NULL, 0};
    for (size_t i = 0; i < d->n; i++)
        if (d->entries[i].key.p != NULL && d->entries[i].key.len == nlen &&
            memcmp(d->entries[i].key.p, name, nlen) == 0)
            return d->entries[i].value;
    return (sl_str){NULL, 0};
}

/* Host without port and trailing dot, as a span of the request (any length: a long Host
 * must not count as absent); its length is 0 when absent. Compared case-insensitively. */
static sl_str host_span(sl_str h) {
    if (h.p == NULL || h.len == 0) return (sl_str){NULL, 0};
    size_t n = h.len;
    if (h.p[0] == '[') {
        const char *rb = memchr(h.p, ']', h.len);
        if (rb != NULL) n = (size_t)(rb - h.p) + 1;
    } else {
        const char *c = memchr(h.p, ':', h.len);
        if (c != NULL && memchr(c + 1, ':', h.len - (size_t)(c - h.p) - 1) == NULL)
            n = (size_t)(c - h.p);
    }
    if (n > 1 && h.p[n - 1] == '.') n--; /* "example.com." is example.com */
    return (sl_str){n ? h.p : NULL, n};
}

static char lower_c(char ch) { return (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch; }

/* sl__glob over a host compared case-insensitively (the pattern is lowercase): '*'
 * matches any run. Iterative with one backtrack point, so linear-ish on long hosts. */
static bool host_glob(const char *pat, const char *s, size_t len) {
    size_t i = 0;
    const char *star = NULL;
    size_t star_i = 0;
    while (i < len) {
        if (*pat == '*') {
            star = pat++;
            star_i = i;
        } else if (*pat != '\0' && *pat == lower_c(s[i])) {
            pat++;
            i++;
        } else if (star != NULL) {
            pat = star + 1;
            i = ++star_i;
        } else {
            return false;
        }
    }
    while (*pat == '*') pat++;
    return *pat == '\0';
}

/* Client address in binary (4 or 16 bytes), IPv6 masked to `prefix` bits so one /64 is
 * one client; IPv4-mapped IPv6 addresses count as IPv4. 0 when absent or unparsable. */
static size_t client_ip(sl_str ip, unsigned prefix, unsigned char out[16]) {
    char buf[64];
    if (ip.p == NULL || ip.len == 0 || ip.len >= sizeof(buf)) return 0;
    size_t n = ip.len;
    const char *p = ip.p;
    if (p[0] == '[' && n > 2 && p[n - 1] == ']') {
        p++;
        n -= 2;
    }
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *pct = strchr(buf, '%');
    if (pct != NULL) *pct = '\0';
    if (inet_pton(AF_INET, buf, out) == 1) return 4;
    if (inet_pton(AF_INET6, buf, out) != 1) return 0;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(out, mapped, 12) == 0) {
        memmove(out, out + 12, 4);
        return 4;
    }
    if (prefix < 128) {
        for (unsigned bit = prefix; bit < 128; bit++) out[bit / 8] &= (unsigned char)~(0x80u >> (bit % 8));
    }
    return 16;
}

/* ---- key composition ---------------------------------------------------------------- */

typedef sl__kbuf kbuf; /* internal.h: shared with capacity.c */

static void kput(kbuf *k, unsigned char tag, const void *b, size_t n) {
    if (n > 0xffff || k->len + 3 + n > k->cap) {
        k->overflow = true;
        return;
    }
    k->p[k->len++] = tag;
    k->p[k->len++] = (unsigned char)(n >> 8);
    k->p[k->len++] = (unsigned char)n;
    if (n) memcpy(k->p + k->len, b, n);
    k->len += n;
}

typedef sl__ctxreq ctxreq;

/* Appends part `pt` of the request; false when the request does not carry it. An empty
 * value counts as missing: "" must not become one bucket shared by every such client. */
static bool put_part(kbuf *k, const ctxreq *c, const sl_cpolicy *cp, const sl_part *pt) {
    const sl_request *r = c->req;
    switch (pt->kind) {
    case SL_PART_CLIENT_IP: {
        unsigned char ip[16];
        size_t n = client_ip(r->client_ip, pt->v6_prefix, ip);
        if (n == 0) return false;
        kput(k, 'i', ip, n);
        return true;
    }
    case SL_PART_HEADER: {
        sl_str v = find_header(r, pt->name, pt->name_len);
        if (v.p == NULL || v.len == 0) return false;
        kput(k, 'h', v.p, v.len);
        return true;
    }
    case SL_PART_METHOD:
        if (r->method.p == NULL || r->method.len == 0) return false;
        kput(k, 'm', r->method.p, r->method.len);
        return true;
    case SL_PART_PATH:
        if (c->path.p == NULL || c->path.len == 0) return false;
        kput(k, 'p', c->path.p, c->path.len);
        return true;
    case SL_PART_ROUTE:
        if (r->route.p != NULL && r->route.len > 0) {
            kput(k, 'r', r->route.p, r->route.len);
            return true;
        }
        if (cp->path != NULL) {
            kput(k, 'r', cp->path, strlen(cp->path));
            return true;
        }
        return false;
    case SL_PART_HOST: {
        sl_str h = host_span(r->host);
        if (h.len == 0) return false;
        size_t at = k->len + 3;
        kput(k, 'o', h.p, h.len);
        if (!k->overflow)
            for (size_t i = 0; i < h.len; i++) k->p[at + i] = (unsigned char)lower_c(h.p[i]);
        return true;
    }
    case SL_PART_DESCRIPTOR: {
        sl_str v = find_entry(c->desc, pt->name, pt->name_len);
        if (v.p == NULL || v.len == 0) return false; /* "" would be one shared bucket */
        kput(k, 'd', v.p, v.len);
        return true;
    }
    case SL_PART_ENVOY:
        if (c->desc == NULL) return false;
        for (size_t i = 0; i < c->desc->n; i++) {
            const sl_entry *en = &c->desc->entries[i];
            kput(k, 'k', en->key.p, en->key.len);
            const sl_enode *node = c->epath ? c->epath[i] : NULL;
            /* share_threshold: every value matching the pattern shares one counter */
            if (node != NULL && node->share_threshold && node->value != NULL)
                kput(k, 'w', node->value, strlen(node->value));
            else
                kput(k, 'v', en->value.p, en->value.len);
        }
        return true;
    case SL_PART_BODY_BYTES: return false;
    case SL_PART_LLM_MODEL: /* issue 24: from the LLM request body (src/llm) */
    case SL_PART_LLM_USER: {
        const sl_llm_request *l = r->llm;
        bool m = pt->kind == SL_PART_LLM_MODEL;
        size_t n = l == NULL ? 0 : m ? l->model_len : l->user_len;
        if (n == 0) return false;
        kput(k, m ? 'l' : 'u', m ? l->model : l->user, n);
        return true;
    }
    }
    return false;
}

bool sl__put_part(sl__kbuf *k, const sl__ctxreq *c, const sl_cpolicy *cp, const sl_part *pt) {
    return put_part(k, c, cp, pt);
}

void sl__kput(sl__kbuf *k, unsigned char tag, const void *b, size_t n) { kput(k, tag, b, n); }

/* Tries each chain in order; returns the chain used, -1 when none is complete. */
static int compose_key(kbuf *k, const ctxreq *c, const sl_cpolicy *cp) {
    size_t start = k->len;
    for (size_t ch = 0; ch < cp->n_chains; ch++) {
        k->len = start;
        if (k->len >= k->cap) {
            k->overflow = true;
            return -1;
        }
        k->p[k->len++] = (unsigned char)ch;
        bool complete = true;
        for (size_t i = 0; i < cp->chains[ch].n && complete; i++)
            complete = put_part(k, c, cp, &cp->chains[ch].parts[i]);
        if (complete || k->overflow) return k->overflow ? -1 : (int)ch;
    }
    k->len = start;
    return -1;
}

static bool parse_cost_str(sl_str v, uint64_t *out) {
    if (v.p == NULL || v.len == 0 || v.len > 19) return false;
    uint64_t n = 0;
    for (size_t i = 0; i < v.len; i++) {
        if (v.p[i] < '0' || v.p[i] > '9') return false;
        n = n * 10 + (uint64_t)(v.p[i] - '0');
    }
    *out = n;
    return true;
}

/* Per-operation cost first ("POST /export": 50), then the attribute, then the default;
 * descriptor requests without a stated cost use Envoy's hits_addend. `src` (explain;
 * NULL on the decision path) receives where the cost came from (SL_XC_*), `opi` the
 * operation's index. */
static inline uint64_t request_cost_why(const ctxreq *c, const sl_cpolicy *cp, int *src,
                                        size_t *opi) {
    const sl_request *r = c->req;
    if (c->desc != NULL && !cp->cost_explicit) {
        if (src) *src = SL_XC_HITS_ADDEND;
        if (c->desc->has_hits_addend) return c->desc->hits_addend;
        return r->hits_addend ? r->hits_addend : 1;
    }
    if (r->has_cost) { /* the caller's own figure wins; 0 is a check that takes nothing */
        if (src) *src = SL_XC_CALLER;
        return r->cost;
    }
    for (size_t i = 0; i < cp->n_ops; i++) {
        const sl_op_cost *op = &cp->ops[i];
        if (op->method[0] != '*' &&
            !(r->method.p && r->method.len == strlen(op->method) &&
              memcmp(r->method.p, op->method, r->method.len) == 0))
            continue;
        if (c->path.p != NULL && sl__glob(op->path, c->path.p, c->path.len)) {
            if (src) *src = SL_XC_OPERATION, *opi = i;
            return op->cost;
        }
    }
    if (src) *src = SL_XC_ATTRIBUTE;
    if (cp->cost_from_set) {
        uint64_t v;
        /* A header or the body size is the client's to choose: 0 would turn its request
         * into a peek that consumes nothing, so such a cost is at least 1. */
        switch (cp->cost_from.kind) {
        case SL_PART_BODY_BYTES:
            if (r->has_body_bytes) return r->body_bytes ? r->body_bytes : 1;
            break;
        case SL_PART_HEADER:
            if (parse_cost_str(find_header(r, cp->cost_from.name, cp->cost_from.name_len), &v))
                return v ? v : 1;
            break;
        case SL_PART_DESCRIPTOR:
            if (parse_cost_str(find_entry(c->desc, cp->cost_from.name, cp->cost_from.name_len),
                               &v))
                return v;
            break;
        default: break;
        }
    }
    if (src) *src = SL_XC_DEFAULT;
    return cp->cost_default;
}

static uint64_t request_cost(const ctxreq *c, const sl_cpolicy *cp) {
    return request_cost_why(c, cp, NULL, NULL);
}

/* ---- matching ----------------------------------------------------------------------- */

static bool cond_ok(const sl_hdr_cond *c, sl_str v) {
    if (c->pattern == NULL) return c->present ? v.p != NULL : v.p == NULL;
    return v.p != NULL && sl__glob(c->pattern, v.p, v.len);
}

/* SL_XM_OK when the request matches cp's conditions, else the first condition that
 * failed (SL_XM_*; *which: the header condition's index). Explain reports the same. */
static int match_http_why(const sl_cpolicy *cp, const sl_request *r, sl_str path,
                          size_t *which) {
    if (cp->n_methods > 0) {
        bool any = false;
        for (size_t i = 0; i < cp->n_methods && !any; i++)
            any = r->method.p && r->method.len == strlen(cp->methods[i]) &&
                  memcmp(r->method.p, cp->methods[i], r->method.len) == 0;
        if (!any) return SL_XM_METHOD;
    }
    if (cp->path_kind != SL_PATH_ANY) {
        if (path.p == NULL) return SL_XM_PATH;
        size_t pl = path.len, n = strlen(cp->path);
        switch (cp->path_kind) {
        case SL_PATH_EXACT:
            if (pl != n || memcmp(path.p, cp->path, n) != 0) return SL_XM_PATH;
            break;
        case SL_PATH_PREFIX:
            if (pl < n || memcmp(path.p, cp->path, n) != 0) return SL_XM_PATH;
            break;
        default:
            if (!sl__glob(cp->path, path.p, pl)) return SL_XM_PATH;
        }
    }
    if (cp->host != NULL) {
        sl_str h = host_span(r->host);
        if (h.len == 0 || !host_glob(cp->host, h.p, h.len)) return SL_XM_HOST;
    }
    for (size_t i = 0; i < cp->n_hdr; i++)
        if (!cond_ok(&cp->hdr[i], find_header(r, cp->hdr[i].name, strlen(cp->hdr[i].name)))) {
            if (which) *which = i;
            return SL_XM_HEADER;
        }
    return SL_XM_OK;
}

static bool match_http(const sl_cpolicy *cp, const sl_request *r, sl_str path) {
    return match_http_why(cp, r, path, NULL) == SL_XM_OK;
}

static int match_desc_why(const sl_cpolicy *cp, const sl_descriptor *d, size_t *which) {
    for (size_t i = 0; i < cp->n_desc; i++)
        if (!cond_ok(&cp->desc[i], find_entry(d, cp->desc[i].name, strlen(cp->desc[i].name)))) {
            if (which) *which = i;
            return SL_XM_DESCRIPTOR;
        }
    return SL_XM_OK;
}

static bool match_desc(const sl_cpolicy *cp, const sl_descriptor *d) {
    return match_desc_why(cp, d, NULL) == SL_XM_OK;
}

/* ---- building a verdict ------------------------------------------------------------- */

void sl__verdict_init(sl_verdict *v) {
    v->action = SL_ALLOW;
    v->status = 200;
    v->recheck = false;
    v->shadow_limited = false;
    v->store_error = false;
    v->store_local = false;
    v->error = 0;
    v->delay_ns = 0;
    v->retry_after_ns = 0;
    v->deciding = -1;
    v->n = 0;
    v->keys_used = 0;
    v->missing_key_policy = NULL;
    v->token_id = 0;
    v->decided_at = (sluice_time){0, 0};
    v->challenge = 0;
    v->n_ovr = 0;
    v->ovr_tries = 0;
    v->ovr_starving = false;
    memset(&v->run, 0, sizeof(v->run));
}

static bool in_rollout(const sl_cpolicy *cp, const unsigned char *key, size_t len) {
    if (cp->rollout_pct >= 100) return true;
    if (cp->rollout_pct == 0) return false;
    return sl__hash64(cp->name, strlen(cp->name), key, len) % 100 < cp->rollout_pct;
}

static const sl_cplan *pick_plan(const ctxreq *c, const sl_cpolicy *cp, size_t *idx) {
    if (!cp->plan_from_set || c == NULL) return NULL;
    unsigned char buf[600];
    kbuf k = {buf, 0, sizeof(buf), false};
    if (!put_part(&k, c, cp, &cp->plan_from) || k.overflow || k.len < 3) return NULL;
    const char *val = (const char *)buf + 3;
    size_t vl = k.len - 3;
    for (size_t i = 0; i < cp->n_plans; i++)
        if (strlen(cp->plans[i].name) == vl && memcmp(cp->plans[i].name, val, vl) == 0) {
            *idx = i;
            return &cp->plans[i];
        }
    return NULL;
}

/* ---- envoy compat keys (SL_ENVOY_KEY_TAG) ----------------------------------------------
 * envoyproxy/ratelimit's cache key without its prefix and window, so the Redis store can
 * name the counter exactly as upstream does (CACHE_KEY_PREFIX + this + window start):
 * "domain_" then "key_value_" per entry (a share_threshold level writes its pattern);
 * then a NUL and the statistics path upstream would count this request under. Both are
 * functions of the rule and the entries, so the key stays a faithful identity. */

static void kraw(kbuf *k, const void *b, size_t n) {
    if (k->overflow || k->len + n > k->cap) {
        k->overflow = true;
        return;
    }
    if (n) memcpy(k->p + k->len, b, n);
    k->len += n;
}

static void kstr(kbuf *k, sl_str s) { kraw(k, s.p, s.len); }
static void kcs(kbuf *k, const char *s) { kraw(k, s, strlen(s)); }

static bool share_at(const sl_enode *n) { return n != NULL && n->share_threshold && n->wildcard; }

/*
 * The statistics path of a rule for this request (upstream's GetLimit): detailed_metric
 * writes every entry's key_value (a share_threshold level its pattern instead); otherwise
 * each level writes its key and the value it matched on: the listed value, the wildcard
 * pattern (the request's value with value_to_metric, unless share_threshold), nothing for
 * a bare key (the request's value with value_to_metric).
 */
static void stat_key(kbuf *k, const ctxreq *c, const sl_cpolicy *cp) {
    const sl_descriptor *d = c->desc;
    kstr(k, c->req->domain);
    bool shares = false;
    for (size_t i = 0; i < d->n; i++) shares |= share_at(c->epath[i]);
    for (size_t i = 0; i < d->n; i++) {
        const sl_entry *en = &d->entries[i];
        const sl_enode *node = c->epath[i];
        kcs(k, ".");
        kstr(k, en->key);
        sl_str val = {NULL, 0};
        bool always = false;
        if (cp->detailed_metric) {
            if (shares && share_at(node)) val = (sl_str){node->value, strlen(node->value)};
            else val = en->value, always = !shares; /* "key_" even for an empty value */
        } else if (node->wildcard) {
            val = share_at(node) || !node->value_to_metric ? (sl_str){node->value, strlen(node->value)}
                                                           : en->value;
        } else if (node->value != NULL || node->value_to_metric) {
            val = en->value;
        }
        if (always || val.len > 0) {
            kcs(k, "_");
            kstr(k, val);
        }
    }
}

static void envoy_key_text(kbuf *k, const ctxreq *c, bool share) {
    const sl_descriptor *d = c->desc;
    kstr(k, c->req->domain);
    kcs(k, "_");
    for (size_t i = 0; i < d->n; i++) {
        const sl_enode *node = c->epath ? c->epath[i] : NULL;
        kstr(k, d->entries[i].key);
        kcs(k, "_");
        if (share && share_at(node)) kcs(k, node->value);
        else kstr(k, d->entries[i].value);
        kcs(k, "_");
    }
}

/* The compat key of a rule matched through the tree; false when it does not fit. */
static bool envoy_compat_key(kbuf *k, const ctxreq *c, const sl_cpolicy *cp) {
    unsigned char tag = SL_ENVOY_KEY_TAG, nul = 0;
    kraw(k, &tag, 1);
    envoy_key_text(k, c, true);
    kraw(k, &nul, 1);
    stat_key(k, c, cp);
    return !k->overflow;
}

/* How compat mode counts items of an envoy rule: a fixed window counts every hit, over
 * the limit or not, shadow or not, the request rejected or not (count_only); with
 * STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT the decision is sluice's all-or-nothing (a
 * rejected request counts nothing). Other algorithms (sluice extensions) are charged. */
static void compat_mark(sl_verdict *v, size_t from, const sl_envoy_settings *cs) {
    for (size_t i = from; i < v->n; i++) {
        sl_verdict_item *it = &v->items[i];
        if (it->unlimited) continue;
        const sl__ewin *w = sl__item_win(it);
        bool fixed = w->cw != NULL && w->cw->spec.algo == SLUICE_FIXED_WINDOW;
        it->count_only = fixed && !cs->stop_increment;
        it->charge = !cs->stop_increment && (it->count_only || !it->shadow);
    }
}

/* Adds the windows of `ep` for the key already at v->keys[koff..koff+klen). */
/* issue 24: a window with `counts:` takes its share of an LLM request's reservation
 * (src/llm); a caller's own cost (a peek: 0) still wins, `requests` is 1. */
static uint64_t llm_window_cost(const ctxreq *c, const sl_cpolicy *cp, unsigned counts, uint64_t cost) {
    const sl_request *r = c ? c->req : NULL;
    if (counts == SL_LLM_COUNT_NONE || (r != NULL && r->has_cost)) return cost;
    if (counts == SL_LLM_COUNT_REQUESTS) return 1;
    if (r == NULL || r->llm == NULL) return cost;
    sl_llm_params d;
    if (cp->llm == NULL) sl_llm_params_default(&d);
    sl_llm_counts k;
    sl_llm_reserve(r->llm, cp->llm ? &cp->llm->params : &d, &k);
    return sl_llm_counts_get(&k, (sl_llm_count)counts);
}

/* Adds the windows of `ep` for the key already at v->keys[koff..koff+klen) (and, for a
 * policy with capacity protection, its class, tiers and penalty: capacity.c); `cls` names
 * the class of an explicit request (NULL: from the request's attributes). */
static int add_items(const e_pol *ep, sl_verdict *v, size_t koff, size_t klen, uint64_t cost,
                     int desc, const ctxreq *c, const char *cls) {
    const sl_cpolicy *cp = ep->cp;
    bool shadow = cp->react == SL_REACT_SHADOW || !in_rollout(cp, v->keys + koff, klen);
    e_win *wins = ep->win;
    size_t nw = ep->nwin;
    size_t pi;
    int base_plan = -1;
    if (pick_plan(c, cp, &pi) != NULL) {
        wins = ep->plan_win[pi];
        nw = cp->plans[pi].nwin;
        base_plan = (int)pi;
    }
    if (cp->unlimited) {
        if (v->n >= SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
        sl_verdict_item *it = &v->items[v->n++];
        memset(it, 0, sizeof(*it));
        it->info = &ep->win[0].info;
        it->descriptor = desc;
        it->unlimited = true;
        it->key_off = (uint16_t)koff;
        it->key_len = (uint16_t)klen;
        it->result.allowed = 1;
        it->result.remaining = UINT32_MAX;
        return SLUICE_OK;
    }
    if (v->n + nw > SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    for (size_t i = 0; i < nw; i++) {
        sl_verdict_item *it = &v->items[v->n++];
        /* x (the store's capacity answer) is written before it is read: only
         * v->run.capacity verdicts read it, and their decisions fill it */
        memset(it, 0, offsetof(sl_verdict_item, x));
        it->x.kind = 0;
        it->ovr_g = 0;
        it->blocked = false;
        it->info = &wins[i].info;
        it->descriptor = desc;
        it->key_off = (uint16_t)koff;
        it->key_len = (uint16_t)klen;
        /* a concurrency window takes one slot whatever the cost; a peek (cost 0) none */
        bool adaptive = wins[i].cw->spec.algo == SLUICE_ADAPTIVE_CONCURRENCY;
        bool conc = wins[i].cw->spec.algo == SLUICE_CONCURRENCY || adaptive;
        if (adaptive) v->run.capacity = true;
        uint64_t wc = llm_window_cost(c, cp, wins[i].cw->counts, cost);
        it->cost = conc ? (wc > 0 ? 1 : 0) : wc;
        it->shadow = shadow;
        it->settle = cp->settle && !conc;
        it->charge = cp->count_rejected && !shadow;
    }
    if (ep->ovr_n != NULL && cp->cap == NULL &&
        atomic_load_explicit(ep->ovr_n, memory_order_relaxed) != 0 &&
        !(klen > 0 && v->keys[koff] == SL_ENVOY_KEY_TAG))
        sl__ovr_note(ep, v, v->n - nw, nw, base_plan, koff, klen, cost, shadow);
    if (cp->cap != NULL) {
        v->run.capacity = true;
        return sl__cap_items(ep, v, v->n - nw, koff, klen, c, cls);
    }
    return SLUICE_OK;
}

static int add_policy(const e_pol *ep, sl_verdict *v, const ctxreq *c, int desc) {
    const sl_cpolicy *cp = ep->cp;
    kbuf k = {v->keys + v->keys_used, 0, SL_VERDICT_KEYS - v->keys_used, false};
    if (c->compat != NULL && cp->envoy && c->desc != NULL && c->epath != NULL) {
        if (!envoy_compat_key(&k, c, cp)) return SLUICE_ERANGE;
        size_t koff = v->keys_used, from = v->n;
        v->keys_used += k.len;
        int rc = add_items(ep, v, koff, k.len, request_cost(c, cp), desc, c, NULL);
        if (rc == SLUICE_OK) compat_mark(v, from, c->compat);
        return rc;
    }
    /* composed aside first: several policies keyed on the same parts (one bearer token
     * for three policies) share one copy of it in the verdict's key space */
    unsigned char scratch[SL_VERDICT_KEYS];
    kbuf ks = {scratch, 0, sizeof(scratch), false};
    int ch = compose_key(&ks, c, cp);
    if (ks.overflow) return SLUICE_ERANGE;
    if (ch < 0) {
        if (cp->on_missing == SL_MISSING_SKIP || cp->rollout_pct == 0 ||
            cp->react == SL_REACT_SHADOW)
            return SLUICE_OK;
        if (v->missing_key_policy == NULL) v->missing_key_policy = cp->name;
        return SLUICE_OK;
    }
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->key_len == ks.len && memcmp(v->keys + it->key_off, scratch, ks.len) == 0)
            return add_items(ep, v, it->key_off, ks.len, request_cost(c, cp), desc, c, NULL);
    }
    if (ks.len > k.cap) return SLUICE_ERANGE;
    memcpy(k.p, scratch, ks.len);
    size_t koff = v->keys_used;
    v->keys_used += ks.len;
    return add_items(ep, v, koff, ks.len, request_cost(c, cp), desc, c, NULL);
}

static const e_win *item_win(const sl_verdict_item *it) { return sl__item_win(it); }

/* Envoy `replaces`: a matched rule naming another rule drops that rule's items, so the
 * replaced counter is neither checked nor consumed. */
static void apply_replaces(sl_verdict *v) {
    size_t out = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_cpolicy *pi = item_win(&v->items[i])->cp;
        bool drop = false;
        if (pi->rule_name != NULL)
            for (size_t j = 0; j < v->n && !drop; j++) {
                const sl_cpolicy *pj = item_win(&v->items[j])->cp;
                if (pj == pi) continue;
                for (size_t r = 0; r < pj->n_replaces && !drop; r++)
                    drop = strcmp(pj->replaces[r], pi->rule_name) == 0;
            }
        if (!drop) v->items[out++] = v->items[i];
    }
    v->n = out;
}

static const sl_edomain *find_domain(const sl_config *cfg, sl_str d) {
    for (size_t i = 0; i < cfg->n_domains; i++)
        if (strlen(cfg->domains[i].domain) == d.len &&
            memcmp(cfg->domains[i].domain, d.p, d.len) == 0)
            return &cfg->domains[i];
    return NULL;
}

/* A request the engine could not decide (not a store failure): an error answered 500,
 * never admitted, whatever on_store_error says. */
const char *sl_engine_error_text(int rc) {
    switch (rc) {
    case SLUICE_ERANGE:
        return "the request's key parts are too long for one decision (at most 4096 bytes of "
               "keys, each part at most 65535)";
    case SLUICE_ETOOMANY: return "the request matches more windows than one decision holds (32)";
    case SL_ECOST: return "the request's cost is above 1099511627776 (2^40), the most one decision takes";
    case SLUICE_ENOTFOUND: return "no such policy";
    case SL_ETOKENS_FULL:
        return "the settle/release token table is full: this policy holds its whole share of "
               "store.max_tokens in outstanding leases and reservations (release or settle "
               "some, or wait for them to expire)";
    default: return sluice_strerror(rc);
    }
}

int sl__fail(sl_verdict *v, int rc) {
    v->action = SL_ERROR;
    /* the request's fault (an unknown policy name; keys or descriptors beyond what one
     * decision holds) is a 4xx, the server's a 500 */
    v->status = rc == SLUICE_ENOTFOUND                                           ? 404
                : rc == SLUICE_ERANGE || rc == SLUICE_ETOOMANY || rc == SLUICE_EINVAL || rc == SL_ECOST ? 400
                : rc == SL_ETOKENS_FULL                                               ? 503
                                                                             : 500;
    v->store_error = false;
    v->store_local = false;
    v->error = rc;
    v->run.prep_rc = rc;
    return rc;
}

/* A descriptor carrying its own limit: counted under domain + entries in the unit's
 * override window, with Envoy's hits_addend as the cost. */
static int add_override(const sl_engine *e, sl_verdict *v, const sl_request *req,
                        const sl_descriptor *desc, int d, const sl_envoy_settings *compat) {
    if (v->n >= SLUICE_MAX_ITEMS) return SLUICE_ETOOMANY;
    kbuf k = {v->keys + v->keys_used, 0, SL_VERDICT_KEYS - v->keys_used, false};
    if (k.cap == 0) return SLUICE_ERANGE;
    if (compat != NULL) {
        /* upstream's key for the descriptor, and its statistics path domain.k_v.k2 */
        unsigned char tag = SL_ENVOY_KEY_TAG, nul = 0;
        ctxreq c = {req, desc, NULL, {NULL, 0}, compat};
        kraw(&k, &tag, 1);
        envoy_key_text(&k, &c, false);
        kraw(&k, &nul, 1);
        kstr(&k, req->domain);
        for (size_t i = 0; i < desc->n; i++) {
            kcs(&k, ".");
            kstr(&k, desc->entries[i].key);
            if (desc->entries[i].value.len > 0) {
                kcs(&k, "_");
                kstr(&k, desc->entries[i].value);
            }
        }
    } else {
        k.p[k.len++] = 0;
        kput(&k, 'D', req->domain.p, req->domain.len);
        for (size_t i = 0; i < desc->n; i++) {
            kput(&k, 'k', desc->entries[i].key.p, desc->entries[i].key.len);
            kput(&k, 'v', desc->entries[i].value.p, desc->entries[i].value.len);
        }
    }
    if (k.overflow) return SLUICE_ERANGE;
    sl_verdict_item *it = &v->items[v->n++];
    memset(it, 0, sizeof(*it));
    it->info = &e->ovr[desc->limit_unit].info;
    it->descriptor = d;
    it->key_off = (uint16_t)v->keys_used;
    it->key_len = (uint16_t)k.len;
    v->keys_used += k.len;
    it->cost = desc->has_hits_addend ? desc->hits_addend
                                     : (req->hits_addend ? req->hits_addend : 1);
    it->override = true;
    it->override_limit = desc->limit_requests_per_unit;
    if (compat != NULL) {
        it->count_only = !compat->stop_increment;
        it->charge = !compat->stop_increment;
    }
    return SLUICE_OK;
}

/* Walks descriptor `desc` down the domain's tree (SPECS §4.2): the rule it reaches, or
 * NULL; path[i] receives the node matched at level i. */
static const sl_enode *envoy_match(const sl_edomain *dom, const sl_descriptor *desc,
                                   const sl_enode **path) {
    if (dom == NULL || desc == NULL || desc->n == 0 || desc->n > SL_ENVOY_DEPTH) return NULL;
    const sl_elevel *lv = &dom->roots;
    const sl_enode *hit = NULL;
    for (size_t i = 0; i < desc->n; i++) {
        const sl_entry *en = &desc->entries[i];
        if (en->key.p == NULL) return NULL;
        hit = sl__envoy_child(lv, en->key.p, en->key.len, en->value.p, en->value.len);
        if (hit == NULL) return NULL;
        if (path != NULL) path[i] = hit;
        lv = &hit->children;
    }
    return hit;
}

/* Every item's cost within what every store takes (SL_COST_MAX), before any store sees
 * it: one answer for every store and protocol. */
static int check_costs(const sl_verdict *v) {
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i].cost > SL_COST_MAX) return SL_ECOST;
    return SLUICE_OK;
}

int sl_engine_prepare(const sl_engine *e, const sl_request *req, sl_verdict *out) {
    if (out == NULL) return SLUICE_EINVAL;
    sl__verdict_init(out);
    if (e == NULL || req == NULL) return sl__fail(out, SLUICE_EINVAL);
    int rc = SLUICE_OK;
    /* one normalised path for both kinds of request (keys, per-operation costs, match) */
    char np[SL_PATH_NORM_STACK];
    char *buf = np;
    size_t pl = req->path.len <= sizeof(np) ? 0 : sl_path_len(req->path.p, req->path.len);
    if (pl > sizeof(np)) {
        if (req->path_scratch == NULL || req->path_scratch_len < pl)
            return sl__fail(out, SLUICE_ERANGE); /* never matched raw */
        buf = req->path_scratch;
    }
    sl_str npath = {NULL, 0};
    if (req->path.p != NULL) npath.len = sl_path_norm(req->path.p, req->path.len, buf, &npath.p);
    if (req->domain.p != NULL) {
        const sl_edomain *dom = find_domain(e->cfg, req->domain);
        const sl_envoy_settings *compat = e->cfg->settings.envoy.compat ? &e->cfg->settings.envoy : NULL;
        for (size_t d = 0; d < req->n_descriptors && rc == SLUICE_OK; d++) {
            const sl_descriptor *desc = &req->descriptors[d];
            const sl_enode *path[SL_ENVOY_DEPTH];
            ctxreq c = {req, desc, path, npath, compat};
            if (desc->has_limit && desc->limit_unit > 0 && desc->limit_unit < SL__OVR_UNITS) {
                /* envoyproxy/ratelimit looks the domain up first: an override in a domain it
                 * does not know limits nothing */
                if (compat != NULL && dom == NULL) continue;
                rc = add_override(e, out, req, desc, (int)d, compat);
                continue; /* the config is bypassed for this descriptor */
            }
            const sl_enode *hit = envoy_match(dom, desc, path);
            if (hit != NULL && hit->policy >= 0)
                rc = add_policy(&e->pol[hit->policy], out, &c, (int)d);
            for (size_t i = 0; i < e->n_pol && rc == SLUICE_OK; i++) {
                const sl_cpolicy *cp = e->pol[i].cp;
                if (cp->envoy || cp->domain == NULL || strlen(cp->domain) != req->domain.len ||
                    memcmp(cp->domain, req->domain.p, req->domain.len) != 0 ||
                    !match_desc(cp, desc))
                    continue;
                ctxreq c2 = {req, desc, NULL, npath, NULL};
                rc = add_policy(&e->pol[i], out, &c2, (int)d);
            }
        }
        if (rc == SLUICE_OK) apply_replaces(out);
    } else {
        ctxreq c = {req, NULL, NULL, npath, NULL};
        for (size_t i = 0; i < e->n_pol && rc == SLUICE_OK; i++) {
            const sl_cpolicy *cp = e->pol[i].cp;
            if (cp->envoy || cp->domain != NULL || !match_http(cp, req, c.path)) continue;
            rc = add_policy(&e->pol[i], out, &c, -1);
        }
    }
    if (rc == SLUICE_OK) rc = check_costs(out);
    if (rc != SLUICE_OK) return sl__fail(out, rc);
    return SLUICE_OK;
}

static const e_pol *find_policy(const sl_engine *e, const char *name) {
    if (name == NULL) return NULL;
    for (size_t i = 0; i < e->n_pol; i++)
        if (strcmp(e->pol[i].cp->name, name) == 0) return &e->pol[i];
    return NULL;
}

int sl_engine_prepare_named(const sl_engine *e, const char *policy, const void *key,
                            size_t key_len, bool has_cost, uint64_t cost, sl_verdict *out) {
    return sl_engine_prepare_named_class(e, policy, key, key_len, has_cost, cost, NULL, out);
}

int sl_engine_prepare_named_class(const sl_engine *e, const char *policy, const void *key,
                                  size_t key_len, bool has_cost, uint64_t cost, const char *cls,
                                  sl_verdict *out) {
    if (out == NULL) return SLUICE_EINVAL;
    sl__verdict_init(out);
    if (e == NULL || (key == NULL && key_len > 0)) return sl__fail(out, SLUICE_EINVAL);
    const e_pol *ep = find_policy(e, policy);
    if (ep == NULL) return sl__fail(out, SLUICE_ENOTFOUND);
    /* The explicit form has its own key namespace (chain byte 0xff): a caller naming keys
     * cannot collide with keys composed from request attributes. */
    kbuf k = {out->keys, 0, SL_VERDICT_KEYS, false};
    k.p[k.len++] = 0xff;
    kput(&k, 'x', key, key_len);
    if (k.overflow) return sl__fail(out, SLUICE_ERANGE);
    out->keys_used = k.len;
    uint64_t c = has_cost ? cost : ep->cp->cost_default;
    int rc = add_items(ep, out, 0, k.len, c, -1, NULL, cls);
    if (rc == SLUICE_OK) rc = check_costs(out);
    if (rc != SLUICE_OK) return sl__fail(out, rc);
    return SLUICE_OK;
}


/* ---- explain hooks (explain.c): the same steps with their reasons ------------------------ */

int sl__xmatch_http(const sl_cpolicy *cp, const sl_request *r, sl_str path, size_t *which) {
    return match_http_why(cp, r, path, which);
}

int sl__xmatch_desc(const sl_cpolicy *cp, const sl_descriptor *d, size_t *which) {
    return match_desc_why(cp, d, which);
}

int sl__xkey_chains(const sl_cpolicy *cp, const sl_request *r, const sl_descriptor *d,
                    sl_str path, int missing[SL_MAX_CHAINS]) {
    ctxreq c = {r, d, NULL, path, NULL}; /* explain shows sluice keys, also in compat mode */
    unsigned char buf[SL_VERDICT_KEYS];
    int used = -1;
    for (size_t ch = 0; ch < cp->n_chains && ch < SL_MAX_CHAINS; ch++) {
        missing[ch] = -1;
        for (size_t i = 0; i < cp->chains[ch].n; i++) {
            kbuf k = {buf, 0, sizeof(buf), false};
            if (!put_part(&k, &c, cp, &cp->chains[ch].parts[i])) {
                missing[ch] = (int)i;
                break;
            }
        }
        if (missing[ch] < 0 && used < 0) used = (int)ch;
    }
    return used;
}

uint64_t sl__xcost(const sl_cpolicy *cp, const sl_request *r, const sl_descriptor *d,
                   sl_str path, int *src, size_t *opi) {
    ctxreq c = {r, d, NULL, path, NULL}; /* explain shows sluice keys, also in compat mode */
    *src = SL_XC_DEFAULT;
    *opi = 0;
    return request_cost_why(&c, cp, src, opi);
}

const char *sl__xplan(const sl_cpolicy *cp, const sl_request *r, const sl_descriptor *d,
                      sl_str path) {
    ctxreq c = {r, d, NULL, path, NULL}; /* explain shows sluice keys, also in compat mode */
    size_t i;
    const sl_cplan *pl = pick_plan(&c, cp, &i);
    return pl ? pl->name : NULL;
}

bool sl__xin_rollout(const sl_cpolicy *cp, const void *key, size_t len) {
    return in_rollout(cp, key, len);
}
