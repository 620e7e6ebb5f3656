/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rls_json.c -- envoyproxy/ratelimit's HTTP /json endpoint: a RateLimitRequest in proto3
 * JSON (camelCase or the proto's own field names, 64-bit integers as numbers or strings,
 * enums by name or number) decided exactly as ShouldRateLimit, answered as a proto3 JSON
 * RateLimitResponse (default values omitted, durations as "Ns", bytes as base64).
 * Unknown fields are ignored rather than refused, so newer clients keep working.
 */
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/grpc/rls.h"

static json_t *field(json_t *o, const char *camel, const char *snake) {
    json_t *v = json_object_get(o, camel);
    return v != NULL ? v : json_object_get(o, snake);
}

/* uint64 from a JSON number or a decimal string (proto3 JSON writes 64-bit as strings) */
static bool get_u64(json_t *v, uint64_t max, uint64_t *out) {
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 0 || (uint64_t)n > max) return false;
        *out = (uint64_t)n;
        return true;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t l = json_string_length(v);
        if (l == 0 || l > 20) return false;
        uint64_t n = 0;
        for (size_t i = 0; i < l; i++) {
            if (s[i] < '0' || s[i] > '9') return false;
            uint64_t d = (uint64_t)(s[i] - '0');
            if (n > (UINT64_MAX - d) / 10) return false;
            n = n * 10 + d;
        }
        if (n > max) return false;
        *out = n;
        return true;
    }
    return false;
}

static const char *const unit_names[] = {"UNKNOWN", "SECOND", "MINUTE", "HOUR",
                                         "DAY",     "MONTH",  "YEAR",   "WEEK"};

static bool get_unit(json_t *v, int *out) {
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 0 || n > 6) return false;
        *out = (int)n;
        return true;
    }
    if (json_is_string(v)) {
        for (int i = 0; i < 7; i++)
            if (strcmp(json_string_value(v), unit_names[i]) == 0) {
                *out = i;
                return true;
            }
    }
    return false;
}

static sl_str jstr(json_t *v) {
    if (!json_is_string(v)) return (sl_str){"", 0};
    return (sl_str){json_string_value(v), json_string_length(v)};
}

/* JSON object -> sl_rls_req (strings borrowed from `root`); a gRPC status. */
static int from_json(json_t *root, sl_rls_req *rq, char *err, size_t errlen) {
    memset(&rq->r, 0, sizeof(rq->r));
    if (!json_is_object(root)) {
        snprintf(err, errlen, "the body must be a JSON object (a RateLimitRequest)");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    json_t *dom = field(root, "domain", "domain"), *ds = field(root, "descriptors", "descriptors");
    json_t *ha = field(root, "hitsAddend", "hits_addend");
    if (dom != NULL && !json_is_string(dom)) {
        snprintf(err, errlen, "domain must be a string");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    if (ds != NULL && !json_is_array(ds)) {
        snprintf(err, errlen, "descriptors must be a list");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    uint64_t hits = 0;
    if (ha != NULL && !json_is_null(ha) && !get_u64(ha, UINT32_MAX, &hits)) {
        snprintf(err, errlen, "hitsAddend must be a whole number below 2^32");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    sl_str d = jstr(dom);
    if (d.len == 0) {
        snprintf(err, errlen, "rate limit domain must not be empty");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    size_t nd = ds ? json_array_size(ds) : 0;
    if (nd == 0) {
        snprintf(err, errlen, "rate limit descriptor list must not be empty");
        return SL_GRPC_INVALID_ARGUMENT;
    }
    if (nd > SL_MAX_DESCRIPTORS) {
        snprintf(err, errlen, "%zu descriptors in one request (at most %d)", nd, SL_MAX_DESCRIPTORS);
        return SL_GRPC_INVALID_ARGUMENT;
    }
    size_t ne = 0;
    for (size_t i = 0; i < nd; i++) {
        json_t *jd = json_array_get(ds, i);
        sl_descriptor *sd = &rq->d[i];
        memset(sd, 0, sizeof(*sd));
        memset(&rq->ov[i], 0, sizeof(rq->ov[i]));
        json_t *en = json_is_object(jd) ? field(jd, "entries", "entries") : NULL;
        size_t n = json_is_array(en) ? json_array_size(en) : 0;
        if (n == 0) {
            snprintf(err, errlen, "descriptor %zu has no entries", i);
            return SL_GRPC_INVALID_ARGUMENT;
        }
        if (n > SL_RLS_MAX_ENTRIES - ne) {
            snprintf(err, errlen, "more than %d descriptor entries in one request",
                     SL_RLS_MAX_ENTRIES);
            return SL_GRPC_INVALID_ARGUMENT;
        }
        sd->entries = &rq->e[ne];
        for (size_t j = 0; j < n; j++) {
            json_t *e = json_array_get(en, j);
            json_t *k = json_is_object(e) ? json_object_get(e, "key") : NULL;
            json_t *v = json_is_object(e) ? json_object_get(e, "value") : NULL;
            if (!json_is_string(k) || json_string_length(k) == 0 ||
                (v != NULL && !json_is_string(v))) {
                snprintf(err, errlen, "descriptor %zu entry %zu needs a non-empty string key "
                         "and a string value", i, j);
                return SL_GRPC_INVALID_ARGUMENT;
            }
            rq->e[ne].key = jstr(k);
            rq->e[ne].value = jstr(v);
            ne++;
        }
        sd->n = n;
        json_t *dh = field(jd, "hitsAddend", "hits_addend");
        if (dh != NULL && !json_is_null(dh)) {
            /* UInt64Value in proto3 JSON is the bare number (or string) */
            json_t *inner = json_is_object(dh) ? json_object_get(dh, "value") : dh;
            uint64_t x = 0;
            if (inner != NULL && !get_u64(inner, UINT64_MAX, &x)) {
                snprintf(err, errlen, "descriptor %zu: hitsAddend must be a whole number", i);
                return SL_GRPC_INVALID_ARGUMENT;
            }
            sd->has_hits_addend = true;
            sd->hits_addend = x;
        }
        json_t *lim = field(jd, "limit", "limit");
        if (lim != NULL && !json_is_null(lim)) {
            json_t *rpu = json_is_object(lim) ? field(lim, "requestsPerUnit", "requests_per_unit")
                                              : NULL;
            json_t *un = json_is_object(lim) ? json_object_get(lim, "unit") : NULL;
            uint64_t r = 0;
            int u = 0;
            if (!json_is_object(lim) || (rpu != NULL && !get_u64(rpu, UINT32_MAX, &r)) ||
                (un != NULL && !get_unit(un, &u))) {
                snprintf(err, errlen, "descriptor %zu: limit needs requestsPerUnit and a unit "
                         "(SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", i);
                return SL_GRPC_INVALID_ARGUMENT;
            }
            rq->ov[i] = (sl_rls_override){.set = true, .requests_per_unit = (uint32_t)r, .unit = u};
        }
        sl_rls_override_apply(rq, i);
    }
    rq->r.domain = d;
    rq->r.descriptors = rq->d;
    rq->r.n_descriptors = nd;
    rq->r.hits_addend = hits;
    return SL_GRPC_OK;
}

/* Standard base64 with padding (proto3 JSON's bytes), by OpenSSL's encoder (libcrypto is
 * linked already). `out` holds 4 * ceil(n / 3) + 1 bytes. */
static char *b64(const char *in, size_t n, char *out) {
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)in, (int)n);
    return out;
}

static const char *code_name(int c) {
    return c == SL_RLS_OVER_LIMIT ? "OVER_LIMIT" : c == SL_RLS_OK ? "OK" : "UNKNOWN";
}

static json_t *to_json(const sl_rls_answer *a) {
    json_t *o = json_object();
    json_object_set_new(o, "overallCode", json_string(code_name(a->overall)));
    json_t *sts = json_array();
    for (size_t i = 0; i < a->n; i++) {
        const sl_rls_status *s = &a->st[i];
        json_t *j = json_object();
        json_object_set_new(j, "code", json_string(code_name(s->code)));
        if (s->has_limit) {
            json_t *l = json_object();
            if (s->name && s->name[0]) json_object_set_new(l, "name", json_string(s->name));
            if (s->requests_per_unit)
                json_object_set_new(l, "requestsPerUnit", json_integer(s->requests_per_unit));
            if (s->unit > 0 && s->unit < 8)
                json_object_set_new(l, "unit", json_string(unit_names[s->unit]));
            json_object_set_new(j, "currentLimit", l);
        }
        if (s->remaining) json_object_set_new(j, "limitRemaining", json_integer(s->remaining));
        if (s->reset_ns > 0) {
            char d[32];
            snprintf(d, sizeof(d), "%llds", (long long)sl_ceil_s(s->reset_ns, 0));
            json_object_set_new(j, "durationUntilReset", json_string(d));
        }
        json_array_append_new(sts, j);
    }
    json_object_set_new(o, "statuses", sts);
    if (a->nh > 0) {
        json_t *hs = json_array();
        for (size_t i = 0; i < a->nh; i++) {
            json_t *h = json_object();
            json_object_set_new(h, "key", json_string(a->h[i].key));
            json_object_set_new(h, "value", json_string(a->h[i].value));
            json_array_append_new(hs, h);
        }
        json_object_set_new(o, "responseHeadersToAdd", hs);
    }
    if (a->body_len > 0) {
        char enc[sizeof(a->body) * 4 / 3 + 8];
        json_object_set_new(o, "rawBody", json_string(b64(a->body, a->body_len, enc)));
    }
    return o;
}

void *sl_rls_json_parse(const char *body, size_t len, sl_rls_req *rq, int *status, char *err,
                        size_t errlen) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        *status = SL_GRPC_INVALID_ARGUMENT;
        snprintf(err, errlen, "invalid JSON: %.100s", je.text);
        return NULL;
    }
    *status = from_json(root, rq, err, errlen);
    return root;
}

void sl_rls_json_free(void *handle) { json_decref(handle); }

int sl_rls_json_render(int st, const char *err, const sl_rls_answer *a, char *out, size_t cap,
                       int *http) {
    json_t *res;
    if (st == SL_GRPC_OK) {
        res = to_json(a);
        *http = a->overall == SL_RLS_OVER_LIMIT ? 429 : 200;
    } else {
        res = json_object();
        json_object_set_new(res, "code", json_integer(st));
        json_object_set_new(res, "message", json_string(err ? err : ""));
        *http = st == SL_GRPC_INVALID_ARGUMENT ? 400 : 500;
    }
    int n = -1;
    char *s = res ? json_dumps(res, JSON_COMPACT) : NULL;
    json_decref(res);
    if (s != NULL) {
        size_t l = strlen(s);
        if (l < cap) {
            memcpy(out, s, l + 1);
            n = (int)l;
        }
        free(s);
    }
    return n;
}

int sl_rls_json_sync(const sl_rls_sync *s, const char *body, size_t len, sl_verdict *v, char *out,
                     size_t cap, int *http) {
    static _Thread_local sl_rls_req rq;
    static _Thread_local sl_rls_answer ans;
    char err[160] = "";
    int st = SL_GRPC_OK;
    void *root = sl_rls_json_parse(body, len, &rq, &st, err, sizeof(err));
    if (st == SL_GRPC_OK) st = sl_rls_decide_sync(s, &rq, v, &ans, err, sizeof(err));
    sl_rls_json_free(root);
    return sl_rls_json_render(st, err, &ans, out, cap, http);
}
