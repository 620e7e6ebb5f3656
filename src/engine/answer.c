/* SPDX-License-Identifier: Apache-2.0 */
/*
 * answer.c -- a decided verdict's one answer (answer.h): RateLimit-Policy / RateLimit in
 * the draft-11 structured-field syntax, Retry-After in delay-seconds, legacy
 * X-RateLimit-*, as name/value pairs in the answer's own text, and the fields the
 * protocols read (status, retry, the window a client counts in). Seconds are always
 * rounded up: a client told "1" after 0.2 s is early by nothing.
 */
#include <string.h>
#include <strings.h>

#include "engine/answer.h"
#include "engine/internal.h"

#define SF_INT_MAX INT64_C(999999999999999) /* RFC 9651 Integer: at most 15 digits */

static int64_t sfint(uint64_t v) { return v > (uint64_t)SF_INT_MAX ? SF_INT_MAX : (int64_t)v; }

/* ---- composing one pair in the answer's text ---- */

typedef struct pw {
    sl_answer *a;
    size_t start, vstart;
} pw;

static void tput(sl_answer *a, const char *s, size_t n) {
    if (a->overflow || a->text_len + n > sizeof(a->text)) {
        a->overflow = true;
        return;
    }
    memcpy(a->text + a->text_len, s, n);
    a->text_len = (uint16_t)(a->text_len + n);
}

static void tputs(sl_answer *a, const char *s) { tput(a, s, strlen(s)); }

/* decimal digits without printf: four per request on the hot path */
static void tuint(sl_answer *a, uint64_t v) {
    char b[20];
    size_t i = sizeof(b);
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    tput(a, b + i, sizeof(b) - i);
}

static void tint(sl_answer *a, int64_t v) {
    if (v < 0) {
        tput(a, "-", 1);
        tuint(a, (uint64_t)0 - (uint64_t)v);
    } else {
        tuint(a, (uint64_t)v);
    }
}

/* sf-string: printable ASCII only, '"' and '\' escaped; anything else becomes '?' so a
 * strange rule name can never break the header. */
static void tsf(sl_answer *a, const char *s) {
    tput(a, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            tput(a, e, 2);
        } else if (c < 0x20 || c > 0x7e) {
            tput(a, "?", 1);
        } else {
            tput(a, (const char *)&c, 1);
        }
    }
    tput(a, "\"", 1);
}

static void pair_begin(pw *p, sl_answer *a, const char *name) {
    p->a = a;
    p->start = a->text_len;
    tputs(a, name);
    tput(a, ": ", 2);
    p->vstart = a->text_len;
}

/* A pair from a line "Name: value" (a challenge's configured header): the value after the
 * colon and its spaces; no colon: the whole line as a name with no value. */
static void pair_line(sl_answer *a, const char *line) {
    pw p = {a, a->text_len, 0};
    tputs(a, line);
    const char *colon = strchr(line, ':');
    if (colon == NULL) {
        p.vstart = a->text_len;
    } else {
        const char *v = colon + 1;
        while (*v == ' ') v++;
        p.vstart = p.start + (size_t)(v - line);
    }
    if (a->overflow || a->nh >= SL_ANSWER_MAX_HEADERS) {
        a->overflow = true;
        return;
    }
    sl_answer_header *h = &a->h[a->nh++];
    h->name_off = (uint16_t)p.start;
    h->name_len = (uint16_t)(colon ? (size_t)(colon - line) : strlen(line));
    h->value_off = (uint16_t)p.vstart;
    h->value_len = (uint16_t)(a->text_len - p.vstart);
}

static void pair_end(pw *p) {
    sl_answer *a = p->a;
    if (a->overflow || a->nh >= SL_ANSWER_MAX_HEADERS) {
        a->overflow = true;
        return;
    }
    sl_answer_header *h = &a->h[a->nh++];
    h->name_off = (uint16_t)p->start;
    h->name_len = (uint16_t)(p->vstart - p->start - 2);
    h->value_off = (uint16_t)p->vstart;
    h->value_len = (uint16_t)(a->text_len - p->vstart);
}

bool sl_answer_add(sl_answer *a, const char *name, size_t nlen, const char *value, size_t vlen) {
    if (a->nh >= SL_ANSWER_MAX_HEADERS || a->text_len + nlen + 2 + vlen > sizeof(a->text))
        return false;
    sl_answer_header *h = &a->h[a->nh++];
    h->name_off = a->text_len;
    h->name_len = (uint16_t)nlen;
    tput(a, name, nlen);
    tput(a, ": ", 2);
    h->value_off = a->text_len;
    h->value_len = (uint16_t)vlen;
    tput(a, value, vlen);
    return true;
}

bool sl_answer_add_i64(sl_answer *a, const char *name, int64_t value) {
    size_t nl = strlen(name);
    if (a->nh >= SL_ANSWER_MAX_HEADERS || a->text_len + nl + 2 + 21 > sizeof(a->text)) return false;
    sl_answer_header *h = &a->h[a->nh++];
    h->name_off = a->text_len;
    h->name_len = (uint16_t)nl;
    tput(a, name, nl);
    tput(a, ": ", 2);
    h->value_off = a->text_len;
    tint(a, value);
    h->value_len = (uint16_t)(a->text_len - h->value_off);
    return true;
}

/* ---- which windows a client is told about ---- */

static const sl_cpolicy *item_policy(const sl_verdict_item *it) { return sl__item_win(it)->cp; }

/* The items a client is told about: enforced, limited, from policies that show headers;
 * one per window (several descriptors may hit one rule: the lowest remaining wins). */
static size_t visible(const sl_verdict *v, uint8_t *out) {
    size_t n = 0;
    for (size_t i = 0; i < v->n; i++) {
        const sl_verdict_item *it = &v->items[i];
        if (it->shadow || it->unlimited || it->info == NULL || !item_policy(it)->headers ||
            (it->cap & SL_SIC_PENALTY)) /* a penalty is no window a client counts in */
            continue;
        bool dup = false;
        for (size_t j = 0; j < n && !it->override; j++)
            if (v->items[out[j]].info == it->info) {
                dup = true;
                if (it->result.remaining < v->items[out[j]].result.remaining) out[j] = (uint8_t)i;
            }
        if (!dup) out[n++] = (uint8_t)i;
    }
    return n;
}

static int64_t item_t(const sl_verdict_item *it) {
    const sluice_result *r = &it->result;
    if (!r->allowed && r->retry_after_ns != SLUICE_NEVER) return sl_ceil_s(r->retry_after_ns, 1);
    return sl_ceil_s(r->reset_after_ns, 0);
}

void sl_answer_build(sl_answer *a, const sl_verdict *v, unsigned flags) {
    a->v = v;
    a->nh = 0;
    a->text_len = 0;
    a->overflow = a->dropped = false;
    a->nvis = 0;
    a->has_window = false;
    a->deciding = -1;
    a->limit = a->remaining = 0;
    a->reset_s = 0;
    a->retry_after_s = -1;
    a->delay_ms = 0;
    a->status = v ? v->status : 500;
    a->action = v ? v->action : SL_ERROR;
    a->allowed = v && (v->action == SL_ALLOW || (v->action == SL_DELAY && !v->recheck));
    if (v == NULL) return;
    if (v->action == SL_DELAY && !v->recheck && v->delay_ns > 0)
        a->delay_ms = (v->delay_ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS;
    /* nothing when the store's state is unknown: a fail-open admission telling clients
     * r=0 would make cooperative ones back off for nothing */
    size_t n = (v->action == SL_FAIL || v->action == SL_ERROR || v->missing_key_policy || v->store_error)
                   ? 0 : visible(v, a->vis);
    a->nvis = (uint8_t)n;
    pw p;
    if (n > 0 && !(flags & SL_RENDER_NO_POLICY)) {
        pair_begin(&p, a, "RateLimit-Policy");
        for (size_t i = 0; i < n; i++) {
            const sl_verdict_item *it = &v->items[a->vis[i]];
            const sl_window_info *in = it->info;
            if (i) tput(a, ", ", 2);
            tsf(a, in->name);
            /* a per-key override's numbers are the effective quota (its window: w= below) */
            const sl_limit *ol = it->ovr_g && it->ovr_p >= 0
                                     ? &v->ovr[it->ovr_g - 1].lim[it->ovr_p] : NULL;
            tputs(a, ";q="); /* decided locally (on_store_error: local): this instance's share */
            tint(a, sfint(v->store_local ? it->result.limit
                          : it->override ? it->override_limit : ol ? ol->capacity : in->quota));
            switch (in->qu) {
            case SL_QU_CONTENT_BYTES: tputs(a, ";qu=\"content-bytes\""); break;
            case SL_QU_CONCURRENT: tputs(a, ";qu=\"concurrent-requests\""); break;
            case SL_QU_OTHER:
                tputs(a, ";qu=");
                tsf(a, in->unit_name ? in->unit_name : "units");
                break;
            default: break;
            }
            if (ol != NULL && ol->period_ns > 0 && in->window_s > 0) {
                tputs(a, ";w=");
                tint(a, sfint((uint64_t)sl_ceil_s(ol->period_ns, 1)));
            } else if (in->window_s > 0) {
                tputs(a, ";w=");
                tint(a, sfint((uint64_t)in->window_s));
            }
            if (v->store_local) tputs(a, ";fallback=\"local\""); /* the shared store is down */
        }
        pair_end(&p);
    }
    if (n > 0) {
        pair_begin(&p, a, "RateLimit");
        for (size_t i = 0; i < n; i++) {
            const sl_verdict_item *it = &v->items[a->vis[i]];
            if (i) tput(a, ", ", 2);
            tsf(a, it->info->name);
            tputs(a, ";r=");
            tint(a, sfint(it->result.allowed ? it->result.remaining : 0));
            if (it->info->qu != SL_QU_CONCURRENT) {
                tputs(a, ";t=");
                tint(a, sfint((uint64_t)item_t(it)));
            }
        }
        pair_end(&p);
    }
    int64_t ra = -1;
    if (v->action == SL_REJECT && v->retry_after_ns != SLUICE_NEVER && !v->missing_key_policy)
        ra = sl_ceil_s(v->retry_after_ns, 1);
    else if (v->action == SL_DELAY && v->recheck) /* nothing consumed: ask again then */
        ra = sl_ceil_s(v->delay_ns, 1);
    else if (v->action == SL_FAIL && v->store_error) /* the shared store is down: try again soon */
        ra = 1;
    if (ra >= 0) {
        pair_begin(&p, a, "Retry-After");
        tint(a, ra);
        pair_end(&p);
        a->retry_after_s = ra;
    }
    if (v->action == SL_REJECT && !v->missing_key_policy) {
        /* capacity protection: the class shed, a penalty's challenge */
        const char *reason, *cls = sl_verdict_shed(v, &reason);
        if (cls != NULL) {
            pair_begin(&p, a, "X-Sluice-Shed");
            tputs(a, cls);
            pair_end(&p);
        }
        const char *hdr = NULL, *act;
        unsigned lvl;
        if (v->challenge && sl_verdict_penalty(v, &lvl, &act, &hdr) && hdr != NULL) pair_line(a, hdr);
    }
    if (n > 0) {
        const sl_verdict_item *it = &v->items[a->vis[0]];
        int idx = a->vis[0];
        for (size_t i = 0; i < n; i++)
            if (v->deciding >= 0 && a->vis[i] == (size_t)v->deciding) {
                it = &v->items[a->vis[i]];
                idx = a->vis[i];
            }
        a->has_window = true;
        a->deciding = idx;
        a->limit = v->store_local ? it->result.limit : it->override ? it->override_limit : it->info->quota;
        a->remaining = it->result.allowed ? it->result.remaining : 0;
        a->reset_s = item_t(it);
        if (flags & SL_RENDER_LEGACY) {
            pair_begin(&p, a, "X-RateLimit-Limit");
            tuint(a, a->limit);
            pair_end(&p);
            pair_begin(&p, a, "X-RateLimit-Remaining");
            tuint(a, a->remaining);
            pair_end(&p);
            pair_begin(&p, a, "X-RateLimit-Reset");
            tint(a, a->reset_s);
            pair_end(&p);
        }
    }
    if (a->nvis > 0) sl__answer_dialect(a, v); /* issue 24: provider dialects (llm_answer.c) */
    if (a->overflow) { /* as the header text did: all or nothing (adapters may still add) */
        a->nh = 0;
        a->text_len = 0;
        a->overflow = false;
        a->dropped = true;
    }
}

void sl_answer_http_headers(const sl_answer *a, sl_wbuf *w) {
    for (size_t i = 0; i < a->nh; i++) {
        const sl_answer_header *h = &a->h[i];
        sl_wbuf_put(w, a->text + h->name_off, (size_t)(h->value_off - h->name_off) + h->value_len);
        sl_wbuf_put(w, "\r\n", 2);
    }
}

size_t sl_answer_http_len(const sl_answer *a) {
    size_t n = 0;
    for (size_t i = 0; i < a->nh; i++)
        n += (size_t)(a->h[i].value_off - a->h[i].name_off) + a->h[i].value_len + 2;
    return n;
}

int sl_answer_find(const sl_answer *a, const char *name) {
    size_t nl = strlen(name);
    for (size_t i = 0; i < a->nh; i++)
        if (a->h[i].name_len == nl && strncasecmp(a->text + a->h[i].name_off, name, nl) == 0) return (int)i;
    return -1;
}

void sl_answer_budget(sl_answer *a, size_t budget) {
    if (sl_answer_http_len(a) >= budget) {
        a->nh = 0;
        a->text_len = 0;
        a->dropped = true;
    }
}
