/*
 * rls.c -- ShouldRateLimit: request validation, preparing the engine's decision (a
 * descriptor with its own limit override is decided by the engine in the same
 * all-or-nothing request as the others), one status per descriptor in request order,
 * headers and body, and the protobuf encoding of the answer. The check path allocates
 * nothing: the response is assembled from stack structs that point into the answer and
 * packed into the caller's buffer.
 */
#include "grpc/rls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int64_t unit_seconds(int unit) {
    static const int64_t s[] = {0, 1, 60, 3600, 86400, 2592000, 31536000, 604800};
    return unit > 0 && unit < 8 ? s[unit] : 0;
}

void sl_rls_override_apply(sl_rls_req *rq, size_t i) {
    sl_descriptor *d = &rq->d[i];
    d->has_limit = rq->ov[i].set;
    d->limit_requests_per_unit = rq->ov[i].requests_per_unit;
    d->limit_unit = rq->ov[i].unit;
}

static uint32_t clamp32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

/* ---- answer from a verdict ------------------------------------------------------------ */

static int window_unit(int64_t window_s) {
    for (int u = 1; u < 8; u++)
        if (unit_seconds(u) == window_s) return u;
    return 0;
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

/* Which of a descriptor's items speaks for it: an enforced rejection with the longest
 * retry, else the enforced window with the least remaining share, else a shadow one. */
static bool better(const sl_verdict_item *a, const sl_verdict_item *b) {
    if (a->shadow != b->shadow) return !a->shadow;
    bool ra = !a->result.allowed, rb = !b->result.allowed;
    if (ra != rb) return ra;
    if (ra) {
        if (a->result.retry_after_ns == SLUICE_NEVER) return b->result.retry_after_ns != SLUICE_NEVER;
        if (b->result.retry_after_ns == SLUICE_NEVER) return false;
        return a->result.retry_after_ns > b->result.retry_after_ns;
    }
    return (unsigned __int128)a->result.remaining * (b->result.limit ? b->result.limit : 1) <
           (unsigned __int128)b->result.remaining * (a->result.limit ? a->result.limit : 1);
}

/* Splits the header lines sl_render_headers wrote into key/value pairs (in place). */
static void split_headers(sl_rls_answer *a) {
    char *p = a->hbuf;
    a->nh = 0;
    while (*p && a->nh < SL_RLS_MAX_HEADERS) {
        char *eol = strstr(p, "\r\n");
        if (eol == NULL) break;
        *eol = '\0';
        char *colon = strchr(p, ':');
        if (colon != NULL) {
            *colon = '\0';
            char *v = colon + 1;
            while (*v == ' ') v++;
            a->h[a->nh].key = p;
            a->h[a->nh].value = v;
            a->nh++;
        }
        p = eol + 2;
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
        if (o->set && (unit_seconds(o->unit) == 0 || o->unit == 7)) {
            snprintf(err, errlen, "descriptor %zu: limit override with unknown unit %d", i, o->unit);
            return SL_GRPC_INVALID_ARGUMENT;
        }
    }
    int rc = sl_engine_prepare(e, &rq->r, v);
    if (rc != SLUICE_OK) {
        snprintf(err, errlen, "decision failed: %s", sluice_strerror(rc));
        return rc == SLUICE_ETOOMANY || rc == SLUICE_ERANGE ? SL_GRPC_RESOURCE_EXHAUSTED
                                                            : SL_GRPC_INTERNAL;
    }
    return SL_GRPC_OK;
}

int sl_rls_answer_of(const sl_verdict *v, int rc, size_t nd, unsigned render_flags,
                     sl_rls_answer *a, char *err, size_t errlen) {
    for (size_t i = 0; i < nd; i++) a->st[i] = (sl_rls_status){.code = SL_RLS_OK, .name = ""};
    a->n = nd;
    a->nh = 0;
    a->body_len = 0;
    a->hbuf[0] = '\0';
    if (rc != SLUICE_OK) {
        snprintf(err, errlen, "decision failed: %s", sluice_strerror(rc));
        return rc == SLUICE_ETOOMANY || rc == SLUICE_ERANGE ? SL_GRPC_RESOURCE_EXHAUSTED
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
        } else if (unlimited) {
            s->remaining = UINT32_MAX;
        }
    }
    a->overall = over ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
    int hl = sl_render_headers(v, a->hbuf, sizeof(a->hbuf), render_flags);
    if (hl < 0) a->hbuf[0] = '\0';
    if (over && v->action != SL_REJECT && v->action != SL_FAIL && strstr(a->hbuf, "Retry-After") == NULL) {
        /* a recheck delay rejected: still tell the client when to retry */
        int64_t ra = v->delay_ns;
        size_t l = strlen(a->hbuf);
        snprintf(a->hbuf + l, sizeof(a->hbuf) - l, "Retry-After: %lld\r\n",
                 (long long)sl_ceil_s(ra, 1));
    }
    split_headers(a);
    if (over) {
        int bl = sl_render_problem(v, NULL, a->body, sizeof(a->body));
        a->body_len = bl > 0 ? (size_t)bl : 0;
    }
    return SL_GRPC_OK;
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
    return envoy__service__ratelimit__v3__rate_limit_response__pack(&resp, buf);
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
