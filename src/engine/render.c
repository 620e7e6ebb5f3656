/* SPDX-License-Identifier: Apache-2.0 */
/*
 * render.c -- the text forms of a verdict, with no I/O: the RFC 9457 problem+json body, the
 * JSON verdict for /v1/check (sl_answer_json: with the answer's headers and token, written
 * once, straight into the connection's buffer), and the answer's pairs as header lines
 * (sl_render_headers; the pairs themselves are built in answer.c).
 * Seconds are always rounded up: a client told "1" after 0.2 s is early by nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "engine/answer.h"
#include "engine/internal.h"

#define QUOTA_EXCEEDED "https://iana.org/assignments/http-problem-types#quota-exceeded"
#define REDUCED_CAPACITY "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"

int64_t sl_ceil_s(int64_t ns, int64_t min_s) {
    int64_t s = ns <= 0 ? 0 : ns / SLUICE_NS_PER_S + (ns % SLUICE_NS_PER_S != 0);
    return s < min_s ? min_s : s;
}

typedef struct wr {
    char *buf;
    size_t len, off;
    bool over;
} wr;

static void wbytes(wr *w, const char *s, size_t n) {
    if (w->over || w->off + n >= w->len) {
        w->over = true;
        return;
    }
    memcpy(w->buf + w->off, s, n);
    w->off += n;
    w->buf[w->off] = '\0';
}

static void ws(wr *w, const char *s) { wbytes(w, s, strlen(s)); }

__attribute__((format(printf, 2, 3))) static void wf(wr *w, const char *fmt, ...) {
    if (w->over) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w->buf + w->off, w->len - w->off, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= w->len - w->off) {
        w->over = true;
        if (w->len) w->buf[w->off] = '\0';
        return;
    }
    w->off += (size_t)n;
}

static int finish(wr *w) {
    if (w->over) {
        if (w->len) w->buf[0] = '\0';
        return SLUICE_ERANGE;
    }
    return (int)w->off;
}


static void wjson_str(wr *w, const char *s) {
    ws(w, "\"");
    size_t n = s ? strlen(s) : 0, i = 0;
    while (i < n) {
        size_t run = sl_json_plain(s + i, n - i, 0);
        if (run > 0) {
            wbytes(w, s + i, run);
            i += run;
            continue;
        }
        char u[SL_JSON_UNIT_MAX];
        size_t adv, k = sl_json_unit(s + i, n - i, 0, u, &adv);
        wbytes(w, u, k);
        i += adv;
    }
    ws(w, "\"");
}

static const sl_cpolicy *item_policy(const sl_verdict_item *it) { return sl__item_win(it)->cp; }

/* The answer's pairs as header text (for callers that want lines: tests, tools). */
int sl_render_headers(const sl_verdict *v, char *buf, size_t len, unsigned flags) {
    if (buf == NULL || len == 0) return SLUICE_ERANGE;
    buf[0] = '\0';
    if (v == NULL) return SLUICE_EINVAL;
    sl_answer a;
    sl_answer_build(&a, v, flags);
    sl_wbuf w;
    sl_wbuf_init(&w, buf, len - 1);
    sl_answer_http_headers(&a, &w);
    if (w.overflow || a.overflow) {
        buf[0] = '\0';
        return SLUICE_ERANGE;
    }
    buf[w.len] = '\0';
    return (int)w.len;
}

static bool hexs(const char *s, size_t n, bool allow_upper) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
              (allow_upper && c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

static bool zeros(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != '0') return false;
    return true;
}

/* W3C trace context: "vv-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", lowercase,
 * version ff invalid, all-zero ids invalid; later versions may append "-..." fields. */
static bool trace_id(const char *tp, char out[33]) {
    if (tp == NULL) return false;
    size_t n = strlen(tp);
    if (n < 55 || !hexs(tp, 2, false) || (tp[0] == 'f' && tp[1] == 'f')) return false;
    if (tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return false;
    if (!hexs(tp + 3, 32, false) || !hexs(tp + 36, 16, false) || !hexs(tp + 53, 2, false))
        return false;
    if (zeros(tp + 3, 32) || zeros(tp + 36, 16)) return false;
    if (tp[0] == '0' && tp[1] == '0' && n != 55) return false;
    if (n > 55 && tp[55] != '-') return false;
    memcpy(out, tp + 3, 32);
    out[32] = '\0';
    return true;
}

/* What capacity protection adds to a refusal's problem+json: the class shed and why, the
 * penalty's level and action. */
static void cap_fields(wr *w, const sl_verdict *v) {
    const char *reason, *cls = sl_verdict_shed(v, &reason);
    if (cls != NULL) {
        ws(w, ",\"shed_class\":");
        wjson_str(w, cls);
        ws(w, ",\"reason\":");
        wjson_str(w, reason);
    }
    unsigned lvl;
    const char *act;
    if (sl_verdict_penalty(v, &lvl, &act, NULL)) {
        wf(w, ",\"penalty\":{\"level\":%u,\"action\":", lvl);
        wjson_str(w, act);
        ws(w, "}");
    }
}

/* nanoseconds as milliseconds with three decimals (integers only) */
static void wms3(wr *w, const char *name, int64_t ns) {
    if (ns < 0) ns = 0;
    int64_t us = ns / 1000;
    wf(w, ",\"%s\":%lld.%03lld", name, (long long)(us / 1000), (long long)(us % 1000));
}

/* ,"source":"override","override":{...}: the override that applied (never its key). */
static void override_field(wr *w, const sl_verdict *v) {
    const sl_vovr *ov = sl_verdict_override(v);
    if (ov == NULL) return;
    static const char *const kinds[] = {"none", "plan", "limits", "block", "exempt"};
    ws(w, ",\"source\":\"override\",\"override\":{\"policy\":");
    wjson_str(w, ((const sl__epol *)ov->ep)->cp->name);
    wf(w, ",\"kind\":\"%s\"", kinds[ov->kind <= 4 ? ov->kind : 0]);
    if (ov->kind == SL_OVR_PLAN) {
        ws(w, ",\"plan\":");
        wjson_str(w, ov->plan);
    }
    if (ov->label[0]) {
        ws(w, ",\"label\":");
        wjson_str(w, ov->label);
    }
    ws(w, "}");
}

/* The problem of v as it stands, `status` as the status sent (v->status for
 * sl_render_problem). */
static int problem(const sl_verdict *v, int status, const char *traceparent, char *buf, size_t len) {
    wr w = {buf, len, 0, false};
    if (buf == NULL || len == 0) return SLUICE_ERANGE;
    buf[0] = '\0';
    /* a recheck (on_exceed: delay, nothing consumed) is refused for now: gRPC answers it
     * OVER_LIMIT, with the same body as a rejection */
    bool recheck = v != NULL && v->action == SL_DELAY && v->recheck;
    if (v == NULL || (v->action != SL_REJECT && v->action != SL_FAIL && v->action != SL_ERROR && !recheck))
        return SLUICE_EINVAL;
    const int64_t retry_ns = recheck ? v->delay_ns : v->retry_after_ns;
    char tid[33];
    bool has_tid = trace_id(traceparent, tid);
    const char *names[SLUICE_MAX_ITEMS];
    size_t nn = 0;
    if (v->action == SL_ERROR || (v->action == SL_FAIL && (status == 500 || v->error == SL_ETOKENS_FULL))) {
        /* not a store failure: the engine could not decide this request (a server that
         * turned SL_ERROR into SL_FAIL keeps status 500, so the body still agrees) */
        int st = v->action == SL_ERROR && (status == 404 || status == 400) ? status
                 : v->error == SL_ETOKENS_FULL                                    ? 503
                                                                                  : 500;
        const char *title = st == 404 ? "Not Found" : st == 400 ? "Bad Request"
                            : st == 503 ? "Service Unavailable" : "Internal Server Error";
        wf(&w, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d,"
               "\"detail\":\"The request could not be decided: %s.\"",
           title, st, sl_engine_error_text(v->error));
    } else if (v->action == SL_FAIL) {
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            if (it->shadow || it->unlimited || !item_policy(it)->fail_closed) continue;
            bool dup = false;
            for (size_t j = 0; j < nn; j++) dup |= strcmp(names[j], it->info->policy) == 0;
            if (!dup) names[nn++] = it->info->policy;
        }
        ws(&w, "{\"type\":\"" REDUCED_CAPACITY "\",\"title\":\"Temporary Reduced Capacity\","
               "\"status\":503,\"detail\":\"The rate limit state is unreachable and ");
        ws(&w, nn ? "a policy of this request fails closed" : "the request could not be decided");
        ws(&w, "; try again later.\"");
    } else if (v->missing_key_policy != NULL) {
        /* about:blank: the title is the reason phrase of the status actually sent (a
         * gateway may ask for 403 because nginx auth_request only passes 401/403). */
        int st = status >= 400 && status <= 599 ? status : 400;
        const char *title = st == 401 ? "Unauthorized" : st == 403 ? "Forbidden"
                          : st == 429 ? "Too Many Requests" : st == 400 ? "Bad Request"
                          : "Request Refused";
        wf(&w, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d,\"detail\":", title, st);
        char d[300];
        snprintf(d, sizeof(d), "The request does not carry the key that policy '%s' counts by.",
                 v->missing_key_policy);
        wjson_str(&w, d);
        names[nn++] = v->missing_key_policy;
    } else if (v->challenge) {
        /* a penalty's challenge: the policy's status, its reason phrase as the title */
        int st = status >= 400 && status <= 599 ? status : 401;
        const char *title = st == 401 ? "Unauthorized" : st == 403 ? "Forbidden"
                          : st == 429 ? "Too Many Requests" : "Challenge Required";
        unsigned lvl = 0;
        const char *act;
        sl_verdict_penalty(v, &lvl, &act, NULL);
        wf(&w, "{\"type\":\"about:blank\",\"title\":\"%s\",\"status\":%d,\"detail\":", title, st);
        char d[200];
        snprintf(d, sizeof(d), "Repeated violations: solve the challenge to go on (penalty level %u).", lvl);
        wjson_str(&w, d);
        const sl_verdict_item *it = &v->items[v->challenge - 1];
        names[nn++] = it->info->policy;
    } else {
        for (size_t i = 0; i < v->n; i++) {
            const sl_verdict_item *it = &v->items[i];
            if (it->shadow || it->unlimited || it->result.allowed) continue;
            bool dup = false;
            for (size_t j = 0; j < nn; j++) dup |= strcmp(names[j], it->info->name) == 0;
            if (!dup) names[nn++] = it->info->name;
        }
        wf(&w, "{\"type\":\"" QUOTA_EXCEEDED "\",\"title\":\"Quota Exceeded\",\"status\":%d,"
               "\"detail\":", status ? status : 429);
        char d[400];
        const char *who = v->deciding >= 0 ? v->items[v->deciding].info->name
                                           : (nn ? names[0] : "?");
        const char *why, *shed = sl_verdict_shed(v, &why);
        unsigned plvl;
        const char *pact;
        const sl_vovr *ov = sl_verdict_override(v);
        if (ov != NULL && ov->kind == SL_OVR_BLOCK)
            snprintf(d, sizeof(d), "This key is blocked by an override of policy '%s'%s%s%s.",
                     ((const sl__epol *)ov->ep)->cp->name, ov->label[0] ? " (" : "",
                     ov->label, ov->label[0] ? ")" : "");
        else if (shed != NULL)
            snprintf(d, sizeof(d), "Requests of class '%s' are shed: limit '%s' is %s%s.", shed, who,
                     strcmp(why, "full") == 0 ? "full" : "filled beyond that class's share",
                     strcmp(why, "reserved") == 0 ? " (what is left is reserved for other classes)" : "");
        else if (sl_verdict_penalty(v, &plvl, &pact, NULL) && retry_ns != SLUICE_NEVER)
            snprintf(d, sizeof(d), "Repeated violations: blocked for %lld s (penalty level %u).",
                     (long long)sl_ceil_s(retry_ns, 1), plvl);
        else if (retry_ns == SLUICE_NEVER)
            snprintf(d, sizeof(d), "The request costs more than limit '%s' can ever admit.", who);
        else
            snprintf(d, sizeof(d), "Limit '%s' is exhausted; retry after %lld s.", who,
                     (long long)sl_ceil_s(retry_ns, 1));
        wjson_str(&w, d);
    }
    ws(&w, ",\"violated-policies\":[");
    for (size_t i = 0; i < nn; i++) {
        if (i) ws(&w, ",");
        wjson_str(&w, names[i]);
    }
    ws(&w, "]");
    if (v->action == SL_REJECT && !v->missing_key_policy) cap_fields(&w, v);
    if (v->action == SL_REJECT) override_field(&w, v);
    if (has_tid) wf(&w, ",\"trace_id\":\"%s\"", tid);
    ws(&w, "}");
    return finish(&w);
}

int sl_render_problem(const sl_verdict *v, const char *traceparent, char *buf, size_t len) {
    return problem(v, v ? v->status : 0, traceparent, buf, len);
}

int sl_answer_problem(const sl_verdict *v, int status, const char *traceparent, sl_wbuf *w) {
    if (w->overflow || w->cap - w->len < 2) return SLUICE_ERANGE;
    int n = problem(v, status, traceparent, w->data + w->len, w->cap - w->len);
    if (n >= 0) w->len += (size_t)n;
    return n;
}

static const char *action_name(const sl_verdict *v) {
    switch (v->action) {
    case SL_ALLOW: return "allow";
    case SL_DELAY: return v->recheck ? "recheck" : "delay";
    case SL_REJECT: return "reject";
    case SL_ERROR: return "error";
    default: return "fail";
    }
}

static void wms(wr *w, const char *name, int64_t ns) {
    if (ns == SLUICE_NEVER) {
        wf(w, ",\"%s\":null", name);
        return;
    }
    int64_t ms = ns <= 0 ? 0 : ns / SLUICE_NS_PER_MS + (ns % SLUICE_NS_PER_MS != 0);
    wf(w, ",\"%s\":%lld", name, (long long)ms);
}

int sl_render_json(const sl_verdict *v, bool with_keys, char *buf, size_t len) {
    wr w = {buf, len, 0, false};
    if (buf == NULL || len == 0) return SLUICE_ERANGE;
    buf[0] = '\0';
    if (v == NULL) return SLUICE_EINVAL;
    bool allowed = v->action == SL_ALLOW || (v->action == SL_DELAY && !v->recheck);
    wf(&w, "{\"allowed\":%s,\"action\":\"%s\",\"status\":%d", allowed ? "true" : "false",
       action_name(v), v->status);
    wms(&w, "delay_ms", v->delay_ns);
    wms(&w, "retry_after_ms", v->retry_after_ns);
    wf(&w, ",\"recheck\":%s,\"shadow_limited\":%s,\"store_error\":%s",
       v->recheck ? "true" : "false", v->shadow_limited ? "true" : "false",
       v->store_error ? "true" : "false");
    ws(&w, ",\"deciding\":");
    if (v->deciding >= 0) wjson_str(&w, v->items[v->deciding].info->name);
    else ws(&w, "null");
    if (v->missing_key_policy) {
        ws(&w, ",\"missing_key_policy\":");
        wjson_str(&w, v->missing_key_policy);
    }
    sl_cap_info ax;
    if (sl_verdict_adaptive(v, &ax, NULL)) {
        wf(&w, ",\"adaptive\":{\"limit\":%u", ax.limit);
        wms3(&w, "noload_ms", ax.noload_ns);
        wf(&w, ",\"in_flight\":%u}", ax.in_flight);
    }
    if (v->action == SL_REJECT && !v->missing_key_policy) cap_fields(&w, v);
    if (v->challenge) ws(&w, ",\"challenge\":true");
    override_field(&w, v);
    ws(&w, ",\"limits\":[");
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        const sluice_result *r = &it->result;
        if (i) ws(&w, ",");
        ws(&w, "{\"name\":");
        wjson_str(&w, it->info->name);
        ws(&w, ",\"policy\":");
        wjson_str(&w, it->info->policy);
        if (it->info->plan) {
            ws(&w, ",\"plan\":");
            wjson_str(&w, it->info->plan);
        }
        if (it->descriptor >= 0) wf(&w, ",\"descriptor\":%d", it->descriptor);
        wf(&w, ",\"allowed\":%s,\"shadow\":%s,\"would_limit\":%s",
           r->allowed ? "true" : "false", it->shadow ? "true" : "false",
           it->would_limit ? "true" : "false");
        if (it->unlimited) ws(&w, ",\"unlimited\":true");
        if (it->cls) {
            const sl_cpolicy *cp = sl__item_win(it)->cp;
            if (cp->cap != NULL && it->cls - 1u < cp->cap->shed.nclasses) {
                ws(&w, ",\"class\":");
                wjson_str(&w, cp->cap->class_names[it->cls - 1]);
            }
        }
        if (it->cap & SL_SIC_PENALTY) ws(&w, ",\"penalty\":true");
        if (it->bpath) wf(&w, ",\"tier_level\":%u,\"share\":%llu", it->blevel, (unsigned long long)it->share);
        wf(&w, ",\"cost\":%llu,\"limit\":%llu,\"remaining\":%llu", (unsigned long long)it->cost,
           (unsigned long long)r->limit, (unsigned long long)r->remaining);
        wms(&w, "reset_after_ms", r->reset_after_ns);
        wms(&w, "retry_after_ms", r->retry_after_ns);
        if (r->delay_ns) wms(&w, "delay_ms", r->delay_ns);
        if (r->lease) wf(&w, ",\"lease\":%llu", (unsigned long long)r->lease);
        if (it->settle) ws(&w, ",\"settle\":true");
        if (with_keys) {
            ws(&w, ",\"key\":\"");
            static const char hx[] = "0123456789abcdef";
            for (size_t k = 0; k < it->key_len; k++) {
                char two[2] = {hx[v->keys[it->key_off + k] >> 4], hx[v->keys[it->key_off + k] & 15]};
                wbytes(&w, two, 2);
            }
            ws(&w, "\"");
        }
        ws(&w, "}");
    }
    ws(&w, "]}");
    return finish(&w);
}

/* (the inline part of sl_wbuf only: the engine library links without src/proto) */
static void wbuf_puts(sl_wbuf *w, const char *s) { sl_wbuf_put(w, s, strlen(s)); }

/* A JSON string of n bytes into w (escaped as every JSON writer here escapes). */
static void wbuf_jstr(sl_wbuf *w, const char *s, size_t n) {
    sl_wbuf_putc(w, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = sl_json_plain(s + i, n - i, 0);
        if (run > 0) {
            sl_wbuf_put(w, s + i, run);
            i += run;
            continue;
        }
        char u[SL_JSON_UNIT_MAX];
        size_t adv, k = sl_json_unit(s + i, n - i, 0, u, &adv);
        sl_wbuf_put(w, u, k);
        i += adv;
    }
    sl_wbuf_putc(w, '"');
}

int sl_answer_json(const sl_answer *a, int rc, const char *tok, size_t tl, sl_wbuf *w) {
    const sl_verdict *v = a->v;
    size_t start = w->len;
    int bl = -1;
    if (rc == 0 && v != NULL && !w->overflow && w->cap - w->len > 2) {
        bl = sl_render_json(v, false, w->data + w->len, w->cap - w->len);
        if (bl > 0) w->len += (size_t)bl - 1; /* reopened: its closing brace comes last */
    }
    if (bl <= 0) {
        /* an engine error decides nothing: never "allowed" */
        bool ok = v != NULL && v->action != SL_ERROR && v->action != SL_REJECT && v->action != SL_FAIL;
        wbuf_puts(w, ok ? "{\"allowed\":true" : "{\"allowed\":false");
        if (rc != 0) {
            wbuf_puts(w, ",\"error\":");
            const char *e = sl_engine_error_text(rc);
            wbuf_jstr(w, e, strlen(e));
        }
    }
    wbuf_puts(w, ",\"headers\":{");
    bool first = true;
    for (size_t i = 0; i < a->nh; i++) {
        if (!sl_answer_has_value(a, i)) continue;
        size_t nl, vl;
        const char *nm = sl_answer_name(a, i, &nl), *val = sl_answer_value(a, i, &vl);
        if (!first) sl_wbuf_putc(w, ',');
        first = false;
        wbuf_jstr(w, nm, nl);
        sl_wbuf_putc(w, ':');
        wbuf_jstr(w, val, vl);
    }
    sl_wbuf_putc(w, '}');
    if (rc == 0 && tok != NULL && tl > 0) {
        wbuf_puts(w, ",\"token\":");
        wbuf_jstr(w, tok, tl);
    }
    sl_wbuf_putc(w, '}');
    if (w->overflow) {
        w->len = start;
        return SLUICE_ERANGE;
    }
    return (int)(w->len - start);
}

/* Why per descriptor: Envoy's response carries one status per request descriptor, in
 * order, while the overall code is the OR of them (our action). */
sl_desc_code sl_verdict_descriptor(const sl_verdict *v, size_t d, const sl_verdict_item **item) {
    const sl_verdict_item *best = NULL;
    bool over = false;
    if (item != NULL) *item = NULL;
    if (v == NULL) return SL_DESC_NO_LIMIT;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->descriptor < 0 || (size_t)it->descriptor != d) continue;
        bool rej = !it->shadow && !it->unlimited && !it->result.allowed;
        if (rej && (!over || (best->result.retry_after_ns != SLUICE_NEVER &&
                              (it->result.retry_after_ns == SLUICE_NEVER ||
                               it->result.retry_after_ns > best->result.retry_after_ns)))) {
            best = it;
            over = true;
        } else if (!over && (best == NULL || it->result.remaining < best->result.remaining)) {
            best = it;
        }
    }
    if (item != NULL) *item = best;
    if (best == NULL) return SL_DESC_NO_LIMIT;
    return over ? SL_DESC_OVER_LIMIT : SL_DESC_OK;
}
