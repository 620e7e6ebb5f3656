/*
 * rls.c -- ShouldRateLimit: request validation, the decision (the policy engine, plus
 * fixed windows for descriptors that carry their own limit override), one status per
 * descriptor in request order, headers and body, and the protobuf encoding of the answer.
 * The check path allocates nothing: the response is assembled from stack structs that
 * point into the answer and packed into the caller's buffer.
 */
#include "grpc/rls.h"

#include <pthread.h>
#include <stdatomic.h>
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
    }
    out->r.domain = mkstr(m->domain);
    out->r.descriptors = out->d;
    out->r.n_descriptors = m->n_descriptors;
    out->r.hits_addend = m->hits_addend;
    return SL_GRPC_OK;
}

/* ---- limit overrides ---------------------------------------------------------------- */

#define OV_CAP 64

struct sl_rls_ovcache {
    pthread_mutex_t mu; /* creation only; lookups read published entries */
    struct {
        _Atomic(sluice_limiter *) lim;
        uint32_t rpu;
        int unit;
        sluice_store *store;
    } e[OV_CAP];
    size_t used;
};

sl_rls_ovcache *sl_rls_ovcache_create(void) {
    sl_rls_ovcache *c = calloc(1, sizeof(*c));
    if (c) pthread_mutex_init(&c->mu, NULL);
    return c;
}

void sl_rls_ovcache_destroy(sl_rls_ovcache *c) {
    if (c == NULL) return;
    for (size_t i = 0; i < OV_CAP; i++) sluice_limiter_destroy(atomic_load(&c->e[i].lim));
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static int64_t unit_seconds(int unit) {
    static const int64_t s[] = {0, 1, 60, 3600, 86400, 2592000, 31536000, 604800};
    return unit > 0 && unit < 8 ? s[unit] : 0;
}

/* The fixed window limiter of an override, as envoyproxy/ratelimit counts one. Entries
 * are only appended (never removed: another worker may be using one), so lookups take
 * no lock; beyond OV_CAP distinct overrides new ones are refused. */
static const sluice_limiter *ov_get(sl_rls_ovcache *c, sluice_store *st, uint32_t rpu, int unit) {
    for (size_t i = 0; i < OV_CAP; i++) {
        sluice_limiter *l = atomic_load_explicit(&c->e[i].lim, memory_order_acquire);
        if (l == NULL) break;
        if (c->e[i].rpu == rpu && c->e[i].unit == unit && c->e[i].store == st) return l;
    }
    pthread_mutex_lock(&c->mu);
    sluice_limiter *found = NULL;
    for (size_t i = 0; i < c->used && found == NULL; i++)
        if (c->e[i].rpu == rpu && c->e[i].unit == unit && c->e[i].store == st)
            found = atomic_load(&c->e[i].lim);
    if (found == NULL && c->used < OV_CAP) {
        char name[64];
        snprintf(name, sizeof(name), "envoy-override/%u/%d", rpu, unit);
        sluice_limit_spec s;
        memset(&s, 0, sizeof(s));
        s.algo = SLUICE_FIXED_WINDOW;
        s.name = name;
        s.limit = rpu;
        s.period_ns = unit_seconds(unit) * SLUICE_NS_PER_S;
        int e = 0;
        sluice_limiter *l = sluice_limiter_create(&s, &e, NULL, 0);
        if (l != NULL && sluice_store_register(st, l) != SLUICE_OK) {
            sluice_limiter_destroy(l);
            l = NULL;
        }
        if (l != NULL) {
            size_t i = c->used++;
            c->e[i].rpu = rpu;
            c->e[i].unit = unit;
            c->e[i].store = st;
            atomic_store_explicit(&c->e[i].lim, l, memory_order_release);
            found = l;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* Key of an override counter: domain and every entry, each length-prefixed, behind a
 * tag byte no engine key starts with. */
static size_t ov_key(const sl_rls_req *rq, size_t d, unsigned char *buf, size_t cap) {
    size_t o = 0;
    buf[o++] = 0xfe;
    const sl_str *parts[1 + 2 * 17];
    size_t np = 0;
    parts[np++] = &rq->r.domain;
    for (size_t i = 0; i < rq->d[d].n && np + 2 <= sizeof(parts) / sizeof(parts[0]); i++) {
        parts[np++] = &rq->d[d].entries[i].key;
        parts[np++] = &rq->d[d].entries[i].value;
    }
    for (size_t i = 0; i < np; i++) {
        size_t l = parts[i]->len;
        if (o + 2 + l > cap) return 0;
        buf[o++] = (unsigned char)(l >> 8);
        buf[o++] = (unsigned char)l;
        memcpy(buf + o, parts[i]->p, l);
        o += l;
    }
    return o;
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
    if (in->envoy_unit != 0) {
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

int sl_rls_decide(const sl_grpc_env *env, const sl_rls_req *rq, sl_verdict *v, sl_rls_answer *a,
                  char *err, size_t errlen) {
    size_t nd = rq->r.n_descriptors;
    /* descriptors with an override bypass the config (as envoyproxy/ratelimit does):
     * the engine sees the others, renumbered */
    sl_descriptor eng[SL_MAX_DESCRIPTORS];
    int map[SL_MAX_DESCRIPTORS];
    size_t ne = 0, nov = 0;
    for (size_t i = 0; i < nd; i++) {
        if (rq->ov[i].set) {
            nov++;
            continue;
        }
        map[ne] = (int)i;
        eng[ne++] = rq->d[i];
    }
    for (size_t i = 0; i < nd; i++) {
        a->st[i] = (sl_rls_status){.code = SL_RLS_OK, .name = ""};
    }
    a->n = nd;
    a->nh = 0;
    a->body_len = 0;
    a->hbuf[0] = '\0';
    sl_request r = rq->r;
    r.descriptors = eng;
    r.n_descriptors = ne;
    int rc = sl_engine_check(env->engine, &r, env->now, v);
    if (rc != SLUICE_OK) {
        snprintf(err, errlen, "decision failed: %s", sluice_strerror(rc));
        return rc == SLUICE_ETOOMANY || rc == SLUICE_ERANGE ? SL_GRPC_RESOURCE_EXHAUSTED
                                                            : SL_GRPC_INTERNAL;
    }
    bool over = v->action == SL_REJECT || v->action == SL_FAIL ||
                (v->action == SL_DELAY && v->recheck);
    /* per descriptor: the item that speaks for it */
    for (size_t k = 0; k < ne; k++) {
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
        sl_rls_status *s = &a->st[map[k]];
        if (best != NULL) {
            status_from_item(best, s);
        } else if (unlimited) {
            s->remaining = UINT32_MAX;
        }
    }
    /* overrides: their own fixed windows, decided together after the engine; when the
     * engine already rejected they are only read (cost 0). Trade-off: the two groups are
     * not one all-or-nothing decision, so a request the override rejects still used the
     * engine's windows -- envoyproxy/ratelimit counts every descriptor anyway. */
    if (nov > 0) {
        if (env->ov == NULL || env->store == NULL) {
            snprintf(err, errlen, "limit overrides are not available here");
            return SL_GRPC_UNIMPLEMENTED;
        }
        sluice_item items[SL_MAX_DESCRIPTORS];
        size_t idx[SL_MAX_DESCRIPTORS], m = 0;
        unsigned char keys[SL_MAX_DESCRIPTORS][512];
        bool deny_all = false;
        for (size_t i = 0; i < nd; i++) {
            if (!rq->ov[i].set) continue;
            const sl_rls_override *o = &rq->ov[i];
            sl_rls_status *s = &a->st[i];
            s->has_limit = true;
            s->requests_per_unit = o->requests_per_unit;
            s->unit = o->unit;
            if (unit_seconds(o->unit) == 0 || o->unit == 7) {
                snprintf(err, errlen, "descriptor %zu: limit override with unknown unit %d", i,
                         o->unit);
                return SL_GRPC_INVALID_ARGUMENT;
            }
            if (o->requests_per_unit == 0) { /* blocks everything, like a 0 in the config */
                s->code = SL_RLS_OVER_LIMIT;
                int64_t per = unit_seconds(o->unit) * SLUICE_NS_PER_S;
                s->reset_ns = per - env->now.wall_ns % per;
                deny_all = true;
                continue;
            }
            const sluice_limiter *l = ov_get(env->ov, env->store, o->requests_per_unit, o->unit);
            size_t kl = ov_key(rq, i, keys[m], sizeof(keys[m]));
            if (l == NULL || kl == 0) {
                snprintf(err, errlen, "descriptor %zu: limit override unavailable", i);
                return SL_GRPC_RESOURCE_EXHAUSTED;
            }
            const sl_descriptor *d = &rq->d[i];
            uint64_t cost = d->has_hits_addend ? d->hits_addend
                                               : (rq->r.hits_addend ? rq->r.hits_addend : 1);
            items[m] = (sluice_item){.limiter = l, .key = keys[m], .key_len = kl, .cost = cost};
            idx[m++] = i;
        }
        if (m > 0) {
            if (over || deny_all)
                for (size_t i = 0; i < m; i++) items[i].cost = 0;
            sluice_decision dec;
            rc = sl_store_decide(env->store, items, m, env->now, &dec); /* shared when Redis is */
            if (rc != SLUICE_OK) {
                snprintf(err, errlen, "override decision failed: %s", sluice_strerror(rc));
                return SL_GRPC_UNAVAILABLE;
            }
            for (size_t i = 0; i < m; i++) {
                sl_rls_status *s = &a->st[idx[i]];
                const sluice_result *res = &dec.results[i];
                bool o = !res->allowed;
                s->code = o ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
                s->remaining = o ? 0 : clamp32(res->remaining);
                s->reset_ns = res->reset_after_ns > 0 ? res->reset_after_ns : 0;
            }
            if (!dec.allowed) over = true;
        }
        if (deny_all) over = true;
    }
    a->overall = over ? SL_RLS_OVER_LIMIT : SL_RLS_OK;
    /* headers: the engine's windows (override windows are not named in them) */
    int hl = sl_render_headers(v, a->hbuf, sizeof(a->hbuf), env->render_flags);
    if (hl < 0) a->hbuf[0] = '\0';
    if (over && v->action != SL_REJECT && v->action != SL_FAIL && strstr(a->hbuf, "Retry-After") == NULL) {
        /* an override or a recheck delay rejected: still tell the client when to retry */
        int64_t ra = 0;
        for (size_t i = 0; i < nd; i++)
            if (a->st[i].code == SL_RLS_OVER_LIMIT && a->st[i].reset_ns > ra) ra = a->st[i].reset_ns;
        if (v->action == SL_DELAY && v->delay_ns > ra) ra = v->delay_ns;
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
