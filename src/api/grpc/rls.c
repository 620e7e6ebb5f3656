/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls.c -- ShouldRateLimit: request validation, preparing the engine's decision (a
 * descriptor with its own limit override is decided by the engine in the same
 * all-or-nothing request as the others), one status per descriptor in request order,
 * headers and body, and the protobuf encoding of the answer. The check path allocates
 * nothing: the response is assembled from stack structs that point into the answer and
 * packed into the caller's buffer.
 */
#include "api/grpc/rls.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/answer.h"
#include "store/decision.h"
#include "engine/internal.h" /* compat answers read the rule behind an item (sl__item_win) */

typedef Envoy__Service__Ratelimit__V3__RateLimitRequest pb_req;
typedef Envoy__Extensions__Common__Ratelimit__V3__RateLimitDescriptor pb_desc;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse pb_resp;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__DescriptorStatus pb_status;
typedef Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit pb_limit;
typedef Envoy__Config__Core__V3__HeaderValue pb_header;

/* ---- request ------------------------------------------------------------------------ */

static sl_str mkstr(const char *s) { return (sl_str){s ? s : "", s ? strlen(s) : 0}; }

int sl_rls_from_proto(const pb_req *m, sl_rls_req *out, char *err, size_t errlen) {
    memset(&out->r, 0, sizeof(out->r));
    if (m->domain == NULL || m->domain[0] == '\0') {
        snprintf(err, errlen, "rate limit domain must not be empty");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    if (m->n_descriptors == 0) {
        snprintf(err, errlen, "rate limit descriptor list must not be empty");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    if (m->n_descriptors > SL_MAX_DESCRIPTORS) {
        snprintf(err, errlen, "%zu descriptors in one request (at most %d)", m->n_descriptors,
                 SL_MAX_DESCRIPTORS);
        return SL_GRPC_INVALID_ARGUMENT;
    }
    size_t ne = 0;
    for (size_t i = 0; i < m->n_descriptors; i++) {
        const pb_desc *d = m->descriptors[i];
        sl_descriptor *sd = &out->d[i];
        memset(sd, 0, sizeof(*sd));
        memset(&out->ov[i], 0, sizeof(out->ov[i]));
        if (d->n_entries == 0) {
            snprintf(err, errlen, "descriptor %zu has no entries", i);
            return SL_GRPC_INVALID_ARGUMENT;
        }
        if (d->n_entries > SL_RLS_MAX_ENTRIES - ne) {
            snprintf(err, errlen, "more than %d descriptor entries in one request",
                     SL_RLS_MAX_ENTRIES);
            return SL_GRPC_INVALID_ARGUMENT;
        }
        sd->entries = &out->e[ne];
        for (size_t j = 0; j < d->n_entries; j++) {
            const char *k = d->entries[j]->key;
            if (k == NULL || k[0] == '\0') {
                snprintf(err, errlen, "descriptor %zu entry %zu has an empty key", i, j);
                return SL_GRPC_INVALID_ARGUMENT;
            }
            out->e[ne].key = mkstr(k);
            out->e[ne].value = mkstr(d->entries[j]->value);
            ne++;
        }
        sd->n = d->n_entries;
        if (d->hits_addend != NULL) {
            sd->has_hits_addend = true;
            sd->hits_addend = d->hits_addend->value;
        }
        if (d->limit != NULL) {
            out->ov[i].set = true;
            out->ov[i].requests_per_unit = d->limit->requests_per_unit;
            out->ov[i].unit = (int)d->limit->unit;
        }
        sl_rls_override_apply(out, i);
    }
    out->r.domain = mkstr(m->domain);
    out->r.descriptors = out->d;
    out->r.n_descriptors = m->n_descriptors;
    out->r.hits_addend = m->hits_addend;
    return SL_GRPC_OK;
}

/* ---- limit overrides ---------------------------------------------------------------- */


void sl_rls_override_apply(sl_rls_req *rq, size_t i) {
    sl_descriptor *d = &rq->d[i];
    d->has_limit = rq->ov[i].set;
    d->limit_requests_per_unit = rq->ov[i].requests_per_unit;
    d->limit_unit = rq->ov[i].unit;
}

static uint32_t clamp32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

/* ---- answer from a verdict ------------------------------------------------------------ */

static int window_unit(int64_t window_s) {
    return sl_envoy_unit_of(window_s);
}

static void status_from_item(const sl_verdict_item *it, sl_rls_status *s) {
    const sl_window_info *in = it->info;
    s->has_limit = true;
    s->name = in->name ? in->name : "";
    if (it->override) {
        s->name = "";
        s->requests_per_unit = it->override_limit;
        s->unit = in->envoy_unit;
    } else if (in->envoy_unit != 0) {
        s->requests_per_unit = in->requests_per_unit;
        s->unit = in->envoy_unit;
    } else {
        s->requests_per_unit = clamp32(in->quota);
        s->unit = window_unit(in->window_s);
    }
    bool over = !it->result.allowed && !it->shadow;
    s->code = over ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
    s->remaining = over ? 0 : clamp32(it->result.remaining);
    s->reset_ns = it->result.reset_after_ns > 0 ? it->result.reset_after_ns : 0;
}

/* Which of a descriptor's items speaks for it: the one rule (store/decision.h), an
 * enforced rejection with the longest retry, else the enforced window with the least
 * remaining share, else a shadow one. */
static unsigned rank_of(const sl_verdict_item *it) {
    return (it->result.allowed ? 0u : SL_RANK_LIMITS) | (it->shadow ? SL_RANK_SHADOW : 0u);
}

static bool better(const sl_verdict_item *a, const sl_verdict_item *b) {
    return sl_window_decides_over(&a->result, rank_of(a), &b->result, rank_of(b));
}

/* The answer's pairs as the protobuf's key/value strings: copied into hbuf, each NUL
 * terminated (protobuf-c's strings), h[] pointing at them. */
static void pairs_of(sl_rls_answer *a, const sl_answer *an) {
    size_t off = 0;
    a->nh = 0;
    for (size_t i = 0; i < an->nh && a->nh < SL_RLS_MAX_HEADERS; i++) {
        if (!sl_answer_has_value(an, i)) continue;
        size_t nl, vl;
        const char *n = sl_answer_name(an, i, &nl), *val = sl_answer_value(an, i, &vl);
        if (off + nl + vl + 2 > sizeof(a->hbuf)) break;
        char *k = a->hbuf + off;
        memcpy(k, n, nl);
        k[nl] = '\0';
        char *vv = k + nl + 1;
        memcpy(vv, val, vl);
        vv[vl] = '\0';
        off += nl + vl + 2;
        a->h[a->nh].key = k;
        a->h[a->nh].value = vv;
        a->nh++;
    }
}

int sl_rls_prepare(const sl_engine *e, const sl_rls_req *rq, sl_verdict *v, char *err,
                   size_t errlen) {
    if (e == NULL) {
        snprintf(err, errlen, "no policy loaded");
        return SL_GRPC_UNAVAILABLE;
    }
    for (size_t i = 0; i < rq->r.n_descriptors; i++) {
        const sl_rls_override *o = &rq->ov[i];
        if (o->set && sl_envoy_unit_seconds(o->unit) == 0) {
            snprintf(err, errlen, "descriptor %zu: limit override with unknown unit %d", i, o->unit);
            return SL_GRPC_INVALID_ARGUMENT;
        }
    }
    int rc = sl_engine_prepare(e, &rq->r, v);
    if (rc != SLUICE_OK) {
        snprintf(err, errlen, "decision failed: %s", sl_engine_error_text(rc));
        return rc == SLUICE_ETOOMANY || rc == SLUICE_ERANGE ? SL_GRPC_RESOURCE_EXHAUSTED
               : rc == SL_ECOST                             ? SL_GRPC_INVALID_ARGUMENT
                                                            : SL_GRPC_INTERNAL;
    }
    return SL_GRPC_OK;
}

static int compat_answer(const sl_verdict *v, int rc, size_t nd, const sl_rls_call *call,
                         sl_rls_answer *a, char *err, size_t errlen);

int sl_rls_answer_ex(const sl_verdict *v, int rc, size_t nd, unsigned render_flags,
                     const sl_rls_call *call, sl_rls_answer *a, char *err, size_t errlen) {
    a->compat = false;
    a->notfound = NULL;
    a->notfound_len = a->notfound_n = 0;
    a->global_shadow = a->store_error = false;
    a->nrules = 0;
    a->md_len = 0;
    if (v->run.e != NULL && sl_rls_compat(v->run.e))
        return compat_answer(v, rc, nd, call, a, err, errlen);
    return sl_rls_answer_of(v, rc, nd, render_flags, a, err, errlen);
}

int sl_rls_answer_of(const sl_verdict *v, int rc, size_t nd, unsigned render_flags,
                     sl_rls_answer *a, char *err, size_t errlen) {
    for (size_t i = 0; i < nd; i++) a->st[i] = (sl_rls_status){.code = SL_RLS_OK, .name = ""};
    a->n = nd;
    a->nh = 0;
    a->body_len = 0;
    a->hbuf[0] = '\0';
    if (rc != SLUICE_OK) {
        snprintf(err, errlen, "decision failed: %s", sl_engine_error_text(rc));
        return rc == SLUICE_ETOOMANY || rc == SLUICE_ERANGE || rc == SL_ETOKENS_FULL
                   ? SL_GRPC_RESOURCE_EXHAUSTED
               : rc == SL_ECOST ? SL_GRPC_INVALID_ARGUMENT
                                : SL_GRPC_INTERNAL;
    }
    bool over = v->action == SL_REJECT || v->action == SL_FAIL ||
                (v->action == SL_DELAY && v->recheck);
    /* per descriptor: the item that speaks for it */
    for (size_t k = 0; k < nd; k++) {
        const sl_verdict_item *best = NULL;
        bool unlimited = false;
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            if (it->descriptor != (int)k) continue;
            if (it->unlimited) {
                unlimited = true;
                continue;
            }
            if (best == NULL || better(it, best)) best = it;
        }
        sl_rls_status *s = &a->st[k];
        if (best != NULL) {
            status_from_item(best, s);
            if (v->store_error) {
                /* the store's state is unknown: a descriptor says what the failure mode
                 * decided (never OVER_LIMIT under an overall OK) */
                bool closed = sl__item_win(best)->cp->fail_closed;
                s->code = over && closed && !best->shadow ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
                s->remaining = 0;
                s->reset_ns = 0;
            }
        } else if (unlimited) {
            s->remaining = UINT32_MAX;
        }
    }
    a->overall = over ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
    sl_answer an;
    sl_answer_build(&an, v, render_flags);
    sl_answer_budget(&an, sizeof(a->hbuf));
    if (over && v->action != SL_REJECT && v->action != SL_FAIL && (an.retry_after_s < 0 || an.dropped) &&
        sl_answer_http_len(&an) + 40 < sizeof(a->hbuf))
        /* a recheck delay rejected: still tell the client when to retry */
        sl_answer_add_i64(&an, "Retry-After", sl_ceil_s(v->delay_ns, 1));
    if (an.delay_ms > 0 && sl_answer_http_len(&an) + 48 < sizeof(a->hbuf))
        /* A shaped admission: admitted and counted, to be forwarded after delay_ns. Envoy
         * cannot hold a request, so it is answered OK now, saying how long it was meant
         * to wait (an OVER_LIMIT would refuse a request the bucket already counted: its
         * retry would queue behind itself). config check says so for such policies. */
        sl_answer_add_i64(&an, "X-Sluice-Delay-Ms", an.delay_ms);
    pairs_of(a, &an);
    if (over) {
        int bl = sl_render_problem(v, NULL, a->body, sizeof(a->body));
        a->body_len = bl > 0 ? (size_t)bl : 0;
    }
    return SL_GRPC_OK;
}


/* ---- envoyproxy/ratelimit compat answers -----------------------------------------------
 * Each rule's status comes from its counter as upstream computes it: the store counted
 * the hits whatever the outcome (count_only items, see prepare.c) and reports the count;
 * OVER_LIMIT iff count > requests_per_unit, remaining = requests_per_unit - count,
 * duration_until_reset = unit - now mod unit on every status (a check-only hits_addend 0
 * included). Overall OVER_LIMIT iff a non-quota descriptor is over, or every quota one is
 * (quota_mode, QUOTA_MODE); SHADOW_MODE answers OK whatever. Headers only with
 * LIMIT_RESPONSE_HEADERS_ENABLED, upstream's three, from the descriptor closest to its
 * limit (or the last over one); no body. */

bool sl_rls_compat(const sl_engine *e) {
    return e != NULL && sl_config_settings(sl_engine_config(e))->envoy.compat;
}

static const sl_envoy_settings *compat_settings(const sl_engine *e) {
    return &sl_config_settings(sl_engine_config(e))->envoy;
}

/* The counter text of a compat key (after its tag, up to the NUL) and the statistics
 * path (after the NUL). */
static bool compat_parts(const sl_verdict *v, const sl_verdict_item *it, const char **txt,
                         size_t *tl, const char **path, size_t *pl) {
    const unsigned char *k = v->keys + it->key_off;
    size_t n = it->key_len;
    if (n < 2 || k[0] != SL_ENVOY_KEY_TAG) return false;
    const unsigned char *z = memchr(k + 1, 0, n - 1);
    if (z == NULL) return false;
    *txt = (const char *)k + 1;
    *tl = (size_t)(z - k) - 1;
    *path = (const char *)z + 1;
    *pl = n - (size_t)(z - k) - 1;
    return true;
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* ---- the local over-limit cache (LOCAL_CACHE_SIZE_IN_BYTES) ---- */

/* Per worker thread: keys found over their limit in a window, answered OVER_LIMIT without
 * the store until the window ends (upstream keeps them for one unit in freecache). A
 * direct-mapped table of 16-byte entries sized from the setting (a collision forgets the
 * older key: it is asked again, never wrongly answered). Allocated on first use. */
typedef struct lc_ent {
    uint64_t fp;
    int64_t until_s;
} lc_ent;
static _Thread_local lc_ent *lc_tab;
static _Thread_local size_t lc_mask;
static _Thread_local bool lc_tried;
static pthread_key_t lc_key; /* frees a worker's table when its thread ends */
static pthread_once_t lc_once = PTHREAD_ONCE_INIT;

static void lc_key_init(void) { (void)pthread_key_create(&lc_key, free); }

static lc_ent *lc_table(const sl_envoy_settings *es) {
    if (es->local_cache_bytes == 0) return NULL;
    if (!lc_tried) {
        lc_tried = true;
        size_t n = 64;
        while (n * 2 * sizeof(lc_ent) <= es->local_cache_bytes && n < ((size_t)1 << 22)) n *= 2;
        pthread_once(&lc_once, lc_key_init);
        lc_tab = calloc(n, sizeof(lc_ent));
        lc_mask = lc_tab ? n - 1 : 0;
        if (lc_tab != NULL) (void)pthread_setspecific(lc_key, lc_tab);
    }
    return lc_tab;
}

static uint64_t lc_fp(const char *txt, size_t tl, int64_t win) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < tl; i++) h = (h ^ (unsigned char)txt[i]) * 1099511628211ull;
    for (int i = 0; i < 8; i++) h = (h ^ (uint64_t)((uint64_t)win >> (8 * i) & 0xff)) * 1099511628211ull;
    return h | 1;
}

/* The window of a compat item at `now_s`: start and length in seconds (0 when none). */
static int64_t item_window(const sl_verdict_item *it, int64_t now_s, int64_t *len) {
    *len = sl_envoy_unit_seconds(it->info->envoy_unit);
    return *len > 0 ? floor_div(now_s, *len) * *len : 0;
}

/* ---- dynamic metadata: google.protobuf.Struct, hand-encoded ---- */

typedef struct mbuf {
    uint8_t *p;
    size_t len, cap;
    bool over;
} mbuf;

static void m_put(mbuf *m, const void *b, size_t n) {
    if (m->over || m->len + n > m->cap) {
        m->over = true;
        return;
    }
    if (m->p != NULL) memcpy(m->p + m->len, b, n);
    m->len += n;
}

static void m_varint(mbuf *m, uint64_t v) {
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) b[n] |= 0x80;
        n++;
    } while (v);
    m_put(m, b, n);
}

static void m_bytes(mbuf *m, uint8_t tag, const void *s, size_t n) {
    m_put(m, &tag, 1);
    m_varint(m, n);
    m_put(m, s, n);
}

typedef void (*m_fn)(mbuf *m, const void *arg);

/* A length-delimited field whose content `fn` writes: measured first, then written. */
static void m_msg(mbuf *m, uint8_t tag, m_fn fn, const void *arg) {
    mbuf probe = {NULL, 0, SIZE_MAX, false};
    fn(&probe, arg);
    m_put(m, &tag, 1);
    m_varint(m, probe.len);
    fn(m, arg);
}

static void md_value(mbuf *m, const sl_mdnode *n);
static void md_value_fn(mbuf *m, const void *arg) { md_value(m, arg); }

/* One Struct field: a map entry {key, value} whose Value content `val` writes. */
typedef struct kv_arg {
    const char *key;
    m_fn val;
    const void *varg;
} kv_arg;

static void kv_fn(mbuf *m, const void *arg) {
    const kv_arg *k = arg;
    m_bytes(m, 0x0a, k->key, strlen(k->key));
    m_msg(m, 0x12, k->val, k->varg);
}

static void md_kv(mbuf *m, const char *key, m_fn val, const void *varg) {
    kv_arg k = {key, val, varg};
    m_msg(m, 0x0a, kv_fn, &k);
}

typedef struct md_maps {
    const sl_mdnode *const *maps;
    size_t n;
} md_maps;

static void md_struct(mbuf *m, const void *arg);
static void md_merged_fn(mbuf *m, const void *arg) { m_msg(m, 0x2a, md_struct, arg); }

#define MD_MAX_MERGE 16

/* Struct{fields} of several maps merged as upstream's mergeMetadata: a key keeps its first
 * value; maps under one key merge. */
static void md_struct(mbuf *m, const void *arg) {
    const md_maps *mm = arg;
    for (size_t a = 0; a < mm->n; a++) {
        const sl_mdnode *map = mm->maps[a];
        for (size_t i = 0; i < map->n; i++) {
            const char *k = map->keys[i];
            if (k == NULL || map->v[i] == NULL) continue;
            bool seen = false; /* written already from an earlier map (or earlier in this one) */
            for (size_t b = 0; b <= a && !seen; b++)
                for (size_t j = 0; j < (b == a ? i : mm->maps[b]->n) && !seen; j++)
                    seen = mm->maps[b]->keys[j] != NULL && !strcmp(mm->maps[b]->keys[j], k);
            if (seen) continue;
            const sl_mdnode *sub[MD_MAX_MERGE];
            size_t ns = 0;
            if (map->v[i]->kind == SL_MD_MAP)
                for (size_t b = a; b < mm->n && ns < MD_MAX_MERGE; b++)
                    for (size_t j = 0; j < mm->maps[b]->n; j++)
                        if (mm->maps[b]->keys[j] != NULL && !strcmp(mm->maps[b]->keys[j], k) &&
                            mm->maps[b]->v[j] != NULL && mm->maps[b]->v[j]->kind == SL_MD_MAP) {
                            sub[ns++] = mm->maps[b]->v[j];
                            break;
                        }
            md_maps sm = {sub, ns};
            if (ns > 1) md_kv(m, k, md_merged_fn, &sm);
            else md_kv(m, k, md_value_fn, map->v[i]);
        }
    }
}

static void md_list(mbuf *m, const void *arg) {
    const sl_mdnode *n = arg;
    for (size_t i = 0; i < n->n; i++)
        if (n->v[i] != NULL) m_msg(m, 0x0a, md_value_fn, n->v[i]);
}

static void m_double(mbuf *m, double d) {
    uint64_t bits;
    memcpy(&bits, &d, 8);
    uint8_t b[9] = {0x11};
    for (int i = 0; i < 8; i++) b[1 + i] = (uint8_t)(bits >> (8 * i));
    m_put(m, b, 9);
}

/* The content of a google.protobuf.Value. */
static void md_value(mbuf *m, const sl_mdnode *n) {
    uint8_t t;
    switch (n->kind) {
    case SL_MD_NULL: m_put(m, "\x08\x00", 2); break;
    case SL_MD_NUM: m_double(m, n->num); break;
    case SL_MD_STR: m_bytes(m, 0x1a, n->s, strlen(n->s)); break;
    case SL_MD_BOOL:
        t = n->b;
        m_put(m, "\x20", 1);
        m_put(m, &t, 1);
        break;
    case SL_MD_MAP: {
        const sl_mdnode *one[1] = {n};
        md_maps mm = {one, 1};
        m_msg(m, 0x2a, md_struct, &mm);
        break;
    }
    case SL_MD_LIST: m_msg(m, 0x32, md_list, n); break;
    }
}

typedef struct str_arg {
    const char *s;
    size_t n;
} str_arg;

static void str_fn(mbuf *m, const void *arg) {
    const str_arg *a = arg;
    m_bytes(m, 0x1a, a->s, a->n);
}

static void num_fn(mbuf *m, const void *arg) { m_double(m, *(const double *)arg); }

/* The request's part of upstream's dynamic metadata: domain, descriptors ({entries:
 * ["k=v"...], limit?, hitsAddend?}), hitsAddend. */
typedef struct md_desc_arg {
    const sl_rls_req *rq;
    size_t i;
} md_desc_arg;

static const char *const resp_unit_names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY",
                                              "MONTH", "YEAR", "WEEK"};

static void md_entries(mbuf *m, const void *arg) {
    const md_desc_arg *a = arg;
    const sl_descriptor *d = &a->rq->d[a->i];
    for (size_t j = 0; j < d->n; j++) {
        char kv[512];
        int n = snprintf(kv, sizeof(kv), "%.*s=%.*s", (int)d->entries[j].key.len,
                         d->entries[j].key.p, (int)d->entries[j].value.len, d->entries[j].value.p);
        str_arg sa = {kv, n < 0 ? 0 : (size_t)n < sizeof(kv) ? (size_t)n : sizeof(kv) - 1};
        m_msg(m, 0x0a, str_fn, &sa);
    }
}

static void md_entries_value(mbuf *m, const void *arg) { m_msg(m, 0x32, md_entries, arg); }

static void md_desc_struct(mbuf *m, const void *arg) {
    const md_desc_arg *a = arg;
    md_kv(m, "entries", md_entries_value, arg);
    const sl_rls_override *o = &a->rq->ov[a->i];
    if (o->set) {
        /* upstream writes the Go text form of the RateLimitOverride */
        char lim[96];
        int n = snprintf(lim, sizeof(lim), "requests_per_unit:%u unit:%s", o->requests_per_unit,
                         o->unit >= 0 && o->unit < 8 ? resp_unit_names[o->unit] : "UNKNOWN");
        str_arg sa = {lim, n > 0 ? (size_t)n : 0};
        md_kv(m, "limit", str_fn, &sa);
    }
    const sl_descriptor *d = &a->rq->d[a->i];
    if (d->has_hits_addend) {
        double h = (double)d->hits_addend;
        md_kv(m, "hitsAddend", num_fn, &h);
    }
}

static void md_desc_value(mbuf *m, const void *arg) { m_msg(m, 0x2a, md_desc_struct, arg); }

static void md_descs(mbuf *m, const void *arg) {
    const sl_rls_req *rq = arg;
    for (size_t i = 0; i < rq->r.n_descriptors; i++) {
        md_desc_arg a = {rq, i};
        m_msg(m, 0x0a, md_desc_value, &a);
    }
}

static void md_descs_value(mbuf *m, const void *arg) { m_msg(m, 0x32, md_descs, arg); }

void sl_rls_compat_prepare(const sl_engine *e, const sl_rls_req *rq, sl_verdict *v,
                           sluice_time now, sl_rls_call *call) {
    call->nlocal = 0;
    call->md_len = 0;
    call->notfound_n = call->notfound_len = 0;
    if (!sl_rls_compat(e) || v->action == SL_ERROR) return;
    const sl_envoy_settings *es = compat_settings(e);
    const sl_config *cfg = sl_engine_config(e);
    bool known = false;
    for (size_t i = 0; i < cfg->n_domains && !known; i++)
        known = strlen(cfg->domains[i].domain) == rq->r.domain.len &&
                memcmp(cfg->domains[i].domain, rq->r.domain.p, rq->r.domain.len) == 0;
    if (!known) { /* upstream counts <domain>.domain_not_found once per descriptor */
        size_t l = rq->r.domain.len < sizeof(call->notfound) ? rq->r.domain.len : sizeof(call->notfound);
        memcpy(call->notfound, rq->r.domain.p, l);
        call->notfound_len = (uint8_t)l;
        call->notfound_n = (uint8_t)rq->r.n_descriptors;
    }
    if (es->dynamic_metadata) {
        mbuf m = {call->md, 0, sizeof(call->md), false};
        str_arg dom = {rq->r.domain.p, rq->r.domain.len};
        md_kv(&m, "domain", str_fn, &dom);
        md_kv(&m, "descriptors", md_descs_value, rq);
        if (rq->r.hits_addend != 0) {
            double h = (double)rq->r.hits_addend;
            md_kv(&m, "hitsAddend", num_fn, &h);
        }
        call->md_len = m.over ? 0 : (uint16_t)m.len;
    }
    lc_ent *tab = lc_table(es);
    if (tab == NULL) return;
    /* items whose key is known over in this window move past v->n: not counted, answered
     * OVER_LIMIT (upstream's over_limit_with_local_cache) */
    int64_t now_s = floor_div(now.wall_ns, SLUICE_NS_PER_S);
    sl_verdict_item local[SLUICE_MAX_ITEMS];
    size_t nl = 0, keep = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        const char *txt, *path;
        size_t tl, pl;
        int64_t len;
        bool hit = false;
        if (!it->unlimited && it->count_only && compat_parts(v, it, &txt, &tl, &path, &pl)) {
            int64_t win = item_window(it, now_s, &len);
            uint64_t fp = lc_fp(txt, tl, win);
            const lc_ent *le = &tab[fp & lc_mask];
            hit = len > 0 && le->fp == fp && le->until_s > now_s;
        }
        if (hit) local[nl++] = *it;
        else v->items[keep++] = *it;
    }
    if (nl == 0) return;
    memcpy(&v->items[keep], local, nl * sizeof(local[0]));
    v->n = keep;
    call->nlocal = (uint8_t)nl;
}

typedef struct citem {
    bool have, over;
    uint32_t limit, remaining;
    int unit;
    int64_t reset_ns;
    const char *name;
    bool quota;
    const sl_mdnode *md;
} citem;

static int compat_answer(const sl_verdict *v, int rc, size_t nd, const sl_rls_call *call,
                         sl_rls_answer *a, char *err, size_t errlen) {
    const sl_envoy_settings *es = compat_settings(v->run.e);
    a->compat = true;
    a->notfound = NULL;
    a->notfound_len = a->notfound_n = 0;
    if (call != NULL && call->notfound_len > 0) {
        a->notfound = call->notfound;
        a->notfound_len = call->notfound_len;
        a->notfound_n = call->notfound_n;
    }
    for (size_t i = 0; i < nd; i++) a->st[i] = (sl_rls_status){.code = SL_RLS_OK, .name = ""};
    a->n = nd;
    a->nh = 0;
    a->body_len = 0;
    a->hbuf[0] = '\0';
    a->overall = SL_RLS_OK;
    if (rc != SLUICE_OK) {
        snprintf(err, errlen, "decision failed: %s", sl_engine_error_text(rc));
        return rc == SLUICE_ETOOMANY || rc == SLUICE_ERANGE || rc == SL_ETOKENS_FULL
                   ? SL_GRPC_RESOURCE_EXHAUSTED
               : rc == SL_ECOST ? SL_GRPC_INVALID_ARGUMENT
                                : SL_GRPC_INTERNAL;
    }
    size_t nall = v->n + (call ? call->nlocal : 0);
    int64_t now_s = floor_div(v->decided_at.wall_ns, SLUICE_NS_PER_S);
    bool unl[SL_MAX_DESCRIPTORS] = {false};
    citem best[SL_MAX_DESCRIPTORS];
    memset(best, 0, sizeof(best));
    lc_ent *tab = lc_table(es);
    /* a failed store: upstream answers an error (Envoy's failure_mode_deny decides),
     * unless every rule says what to do (sluice's on_store_error) */
    if (v->store_error) {
        bool all_set = false;
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            if (it->unlimited) continue;
            all_set = sl__item_win(it)->cp->fail_mode_set;
            if (!all_set) break;
        }
        for (size_t i = 0; i < v->n; i++) { /* upstream counts total_hits before Redis */
            const sl_verdict_item *it = &v->items[i];
            const char *txt, *path;
            size_t tl, pl;
            if (it->unlimited || a->nrules >= SLUICE_MAX_ITEMS ||
                !compat_parts(v, it, &txt, &tl, &path, &pl))
                continue;
            a->rules[a->nrules++] = (sl_rls_rule_hits){.path = path, .path_len = pl,
                                                       .hits = it->cost, .limit = UINT32_MAX,
                                                       .local = false, .shadow = true};
        }
        if (!all_set) {
            a->store_error = true;
            snprintf(err, errlen, "the rate limit store is unavailable: %s",
                     sluice_strerror(v->error ? v->error : SLUICE_ESTORE));
            return SL_GRPC_UNAVAILABLE;
        }
        bool closed = v->action == SL_FAIL;
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            if (it->descriptor < 0 || (size_t)it->descriptor >= nd) continue;
            if (it->unlimited) {
                unl[it->descriptor] = true;
                continue;
            }
            const sl__ewin *w = sl__item_win(it);
            citem *b = &best[it->descriptor];
            b->have = true;
            b->over = b->over || (w->cp->fail_closed && !it->shadow);
            b->limit = it->override ? it->override_limit : w->info.requests_per_unit;
            b->unit = w->info.envoy_unit;
            b->name = w->cp->rule_name ? w->cp->rule_name : "";
        }
        for (size_t k = 0; k < nd; k++) {
            sl_rls_status *s = &a->st[k];
            if (unl[k]) s->remaining = UINT32_MAX;
            if (!best[k].have || unl[k]) continue;
            s->has_limit = true;
            s->requests_per_unit = best[k].limit;
            s->unit = best[k].unit;
            s->name = best[k].name;
            s->code = best[k].over ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
        }
        a->overall = closed ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
        return SL_GRPC_OK;
    }
    for (size_t i = 0; i < nall; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->descriptor < 0 || (size_t)it->descriptor >= nd) continue;
        if (it->unlimited) {
            unl[it->descriptor] = true;
            continue;
        }
        const sl__ewin *w = sl__item_win(it);
        const sl_cpolicy *cp = w->cp;
        bool local = i >= v->n;
        uint64_t hits = it->cost, after, before;
        uint32_t limit;
        int unit;
        if (cp->envoy) {
            limit = it->override ? it->override_limit : w->info.requests_per_unit;
            unit = w->info.envoy_unit;
        } else {
            limit = clamp32(w->info.quota);
            unit = window_unit(w->info.window_s);
        }
        bool over;
        if (local) {
            over = true;
            before = after = limit; /* (not used: a local answer adds no count) */
        } else if (it->count_only && it->result.limit == SL_COUNT_ONLY_LIMIT) {
            after = SL_COUNT_ONLY_LIMIT - it->result.remaining;
            before = after >= hits ? after - hits : 0;
            over = after > limit;
        } else if (it->count_only) { /* a block-list rule (requests_per_unit 0) */
            over = true;
            before = 0;
            after = hits;
        } else {
            /* all-or-nothing (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, sluice algorithms):
             * the item's own verdict; its count as far as the answer tells it */
            over = !it->result.allowed;
            uint64_t rem = it->result.remaining < limit ? it->result.remaining : limit;
            after = over ? (uint64_t)limit + hits : (uint64_t)limit - rem;
            before = after >= hits ? after - hits : 0;
        }
        uint32_t remaining = over ? 0 : clamp32(limit - after);
        if (!cp->envoy && !over) remaining = clamp32(it->result.remaining);
        int64_t ulen = sl_envoy_unit_seconds(unit);
        int64_t reset = ulen > 0 ? (ulen - (now_s % ulen + ulen) % ulen) * SLUICE_NS_PER_S : 0;
        const char *txt, *path;
        size_t tl, pl;
        if (compat_parts(v, it, &txt, &tl, &path, &pl)) {
            if (a->nrules < SLUICE_MAX_ITEMS)
                a->rules[a->nrules++] = (sl_rls_rule_hits){
                    .path = path, .path_len = pl, .hits = hits, .before = before, .after = after,
                    .limit = limit, .local = local, .shadow = it->shadow};
            if (over && !local && tab != NULL && it->count_only && ulen > 0) {
                int64_t win = floor_div(now_s, ulen) * ulen;
                uint64_t fp = lc_fp(txt, tl, win);
                tab[fp & lc_mask] = (lc_ent){fp, win + ulen};
            }
        }
        citem c = {.have = true,
                   .over = over && !it->shadow,
                   .limit = limit,
                   .remaining = remaining,
                   .unit = unit,
                   .reset_ns = reset,
                   .name = cp->envoy ? (cp->rule_name ? cp->rule_name : "")
                                     : (it->info->name ? it->info->name : ""),
                   .quota = cp->quota_mode,
                   .md = cp->metadata};
        if (it->override) c.name = "", c.quota = false, c.md = NULL;
        citem *b = &best[it->descriptor];
        /* one rule per descriptor upstream; with sluice's extra windows, the over one (else
         * the one with the least left) speaks for it */
        if (!b->have || (c.over && !b->over) || (c.over == b->over && c.remaining < b->remaining))
            *b = c;
    }
    /* statuses, overall code, headers (upstream's shouldRateLimitWorker) */
    uint32_t min_rem = UINT32_MAX;
    int min_d = -1;
    size_t failed_rl = 0, failed_quota = 0, total_quota = 0;
    const sl_mdnode *passed_md[SL_MAX_DESCRIPTORS];
    size_t npassed = 0;
    for (size_t k = 0; k < nd; k++) {
        sl_rls_status *s = &a->st[k];
        if (best[k].have && !unl[k]) {
            s->has_limit = true;
            s->requests_per_unit = best[k].limit;
            s->unit = best[k].unit;
            s->name = best[k].name;
            s->remaining = best[k].remaining;
            s->reset_ns = best[k].reset_ns > 0 ? best[k].reset_ns : 0;
            s->code = best[k].over ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
        }
        if (es->headers && s->has_limit && !unl[k] && s->remaining < min_rem) {
            min_rem = s->remaining;
            min_d = (int)k;
        }
        if (unl[k]) {
            *s = (sl_rls_status){.code = SL_RLS_OK, .name = "", .remaining = UINT32_MAX};
            continue;
        }
        bool quota = es->quota || (best[k].have && best[k].quota);
        if (s->code == SL_RLS_OVER_LIMIT) {
            if (quota) {
                failed_quota++;
            } else {
                failed_rl++;
                min_d = (int)k;
                min_rem = 0;
            }
        } else if (best[k].have && best[k].md != NULL && npassed < SL_MAX_DESCRIPTORS) {
            passed_md[npassed++] = best[k].md;
        }
        if (quota) total_quota++;
    }
    a->overall = failed_rl > 0 || (total_quota > 0 && total_quota == failed_quota) ? SL_RLS_OVER_LIMIT
                                                                                     : SL_RLS_OK;
    if (es->headers && min_d >= 0) {
        const sl_rls_status *s = &a->st[min_d];
        int64_t ulen = sl_envoy_unit_seconds(s->unit);
        int64_t reset = ulen > 0 ? ulen - (now_s % ulen + ulen) % ulen : 0;
        sl_answer an;
        an.nh = 0;
        an.text_len = 0;
        an.overflow = false;
        sl_answer_add_i64(&an, es->header_limit, s->requests_per_unit);
        sl_answer_add_i64(&an, es->header_remaining, s->remaining);
        sl_answer_add_i64(&an, es->header_reset, reset);
        pairs_of(a, &an);
    }
    if (a->overall == SL_RLS_OVER_LIMIT && es->shadow) {
        a->overall = SL_RLS_OK;
        a->global_shadow = true;
    }
    if (es->dynamic_metadata && call != NULL && call->md_len > 0) {
        mbuf m = {a->md, 0, sizeof(a->md), false};
        m_put(&m, call->md, call->md_len);
        if (npassed > 0) {
            md_maps mm = {passed_md, npassed};
            md_kv(&m, "metadata", md_merged_fn, &mm);
        }
        a->md_len = m.over ? 0 : m.len;
    }
    return SL_GRPC_OK;
}

void sl_rls_compat_verdict(sl_verdict *v, int status, const sl_rls_answer *a) {
    if (!a->compat || v->action == SL_ERROR) return;
    if (status != SL_GRPC_OK) {
        if (a->store_error) v->action = SL_FAIL, v->status = 503;
        return;
    }
    bool over = a->overall == SL_RLS_OVER_LIMIT;
    if (v->store_error) return; /* on_store_error already decided */
    v->action = over ? SL_REJECT : SL_ALLOW;
    v->status = over ? 429 : 200;
    v->recheck = false;
    v->delay_ns = 0;
    if (a->global_shadow) v->shadow_limited = true;
}

/* ---- encoding ----------------------------------------------------------------------- */

size_t sl_rls_pack(const sl_rls_answer *a, uint8_t *buf, size_t cap) {
    pb_resp resp = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__INIT;
    pb_status st[SL_MAX_DESCRIPTORS], *stp[SL_MAX_DESCRIPTORS];
    pb_limit lim[SL_MAX_DESCRIPTORS];
    Google__Protobuf__Duration dur[SL_MAX_DESCRIPTORS];
    pb_header hv[SL_RLS_MAX_HEADERS], *hvp[SL_RLS_MAX_HEADERS];
    resp.overall_code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)a->overall;
    for (size_t i = 0; i < a->n; i++) {
        const sl_rls_status *s = &a->st[i];
        pb_status z = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__DESCRIPTOR_STATUS__INIT;
        st[i] = z;
        st[i].code = (Envoy__Service__Ratelimit__V3__RateLimitResponse__Code)s->code;
        st[i].limit_remaining = s->remaining;
        if (s->has_limit) {
            pb_limit zl = ENVOY__SERVICE__RATELIMIT__V3__RATE_LIMIT_RESPONSE__RATE_LIMIT__INIT;
            lim[i] = zl;
            lim[i].name = (char *)s->name;
            lim[i].requests_per_unit = s->requests_per_unit;
            lim[i].unit = (Envoy__Service__Ratelimit__V3__RateLimitResponse__RateLimit__Unit)s->unit;
            st[i].current_limit = &lim[i];
        }
        if (s->reset_ns > 0) {
            Google__Protobuf__Duration zd = GOOGLE__PROTOBUF__DURATION__INIT;
            dur[i] = zd;
            /* whole seconds, rounded up, as envoyproxy/ratelimit reports them */
            dur[i].seconds = sl_ceil_s(s->reset_ns, 0);
            st[i].duration_until_reset = &dur[i];
        }
        stp[i] = &st[i];
    }
    resp.n_statuses = a->n;
    resp.statuses = stp;
    for (size_t i = 0; i < a->nh; i++) {
        pb_header zh = ENVOY__CONFIG__CORE__V3__HEADER_VALUE__INIT;
        hv[i] = zh;
        hv[i].key = (char *)a->h[i].key;
        hv[i].value = (char *)a->h[i].value;
        hvp[i] = &hv[i];
    }
    resp.n_response_headers_to_add = a->nh;
    resp.response_headers_to_add = hvp;
    if (a->body_len > 0) {
        resp.raw_body.data = (uint8_t *)a->body;
        resp.raw_body.len = a->body_len;
    }
    size_t need = envoy__service__ratelimit__v3__rate_limit_response__get_packed_size(&resp);
    if (need > cap) return 0;
    size_t n = envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, buf);
    if (a->md_len > 0) {
        /* dynamic_metadata (field 6), already a serialized Struct: appended as its field
         * (a message's fields may come in any order) */
        uint8_t hdr[12];
        size_t h = 0;
        hdr[h++] = 0x32;
        for (uint64_t l = a->md_len; ; l >>= 7) {
            hdr[h++] = (uint8_t)((l & 0x7f) | (l > 0x7f ? 0x80 : 0));
            if (l <= 0x7f) break;
        }
        if (n + h + a->md_len > cap) return 0;
        memcpy(buf + n, hdr, h);
        memcpy(buf + n + h, a->md, a->md_len);
        n += h + a->md_len;
    }
    return n;
}

/* ---- synchronous forms (tests, tools: an engine whose store answers at once) -------- */

static void sync_done(void *ud, int rc, sl_verdict *v) {
    (void)v;
    *(int *)ud = rc;
}

int sl_rls_decide_sync(const sl_rls_sync *s, const sl_rls_req *rq, sl_verdict *v, sl_rls_answer *a,
                       char *err, size_t errlen) {
    int st = sl_rls_prepare(s->engine, rq, v, err, errlen);
    if (st != SL_GRPC_OK) return st;
    int rc = SLUICE_EINVAL;
    if (!sl_engine_ops(s->engine)->immediate) return SL_GRPC_INTERNAL;
    sl_engine_decide(s->engine, s->lane, v, s->now, sync_done, &rc);
    return sl_rls_answer_of(v, rc, rq->r.n_descriptors, s->render_flags, a, err, errlen);
}

int sl_rls_reply_sync(const sl_rls_sync *s, const sl_rls_req *rq, sl_grpc_reply *out) {
    static _Thread_local sl_verdict v;
    static _Thread_local sl_rls_answer a;
    out->status = sl_rls_decide_sync(s, rq, &v, &a, out->message, sizeof(out->message));
    if (out->status == SL_GRPC_OK) {
        out->len = sl_rls_pack(&a, out->buf, out->cap);
        if (out->len == 0) {
            out->status = SL_GRPC_RESOURCE_EXHAUSTED;
            snprintf(out->message, sizeof(out->message), "response too large");
        }
    }
    return 0;
}
