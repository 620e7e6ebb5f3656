/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jw.c -- the engine's JSON writer (see jw.h). Commas are placed by the writer: every
 * value and every container start sets `comma`, every container start clears it for its
 * first member, so callers write members in order and never think about separators.
 */
#include "engine/jw.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

void sl_jw_init(sl_jw *w) { memset(w, 0, sizeof(*w)); }

void sl_jw_free(sl_jw *w) {
    free(w->p);
    memset(w, 0, sizeof(*w));
}

char *sl_jw_finish(sl_jw *w, size_t *len) {
    if (w->oom || w->p == NULL) {
        sl_jw_free(w);
        return NULL;
    }
    char *p = w->p;
    if (len) *len = w->len;
    w->p = NULL;
    return p;
}

static void put(sl_jw *w, const void *s, size_t n) {
    if (w->oom) return;
    if (w->len + n + 1 > w->cap) {
        size_t nc = w->cap ? w->cap : 1024;
        while (w->len + n + 1 > nc) nc *= 2;
        char *np = realloc(w->p, nc);
        if (np == NULL) {
            w->oom = true;
            return;
        }
        w->p = np;
        w->cap = nc;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
    w->p[w->len] = '\0';
}

static void putc_(sl_jw *w, char c) { put(w, &c, 1); }

static void sep(sl_jw *w) {
    if (w->comma) putc_(w, ',');
    w->comma = true;
}

void sl_jw_obj(sl_jw *w) {
    sep(w);
    putc_(w, '{');
    w->comma = false;
}
void sl_jw_end(sl_jw *w) {
    putc_(w, '}');
    w->comma = true;
}
void sl_jw_arr(sl_jw *w) {
    sep(w);
    putc_(w, '[');
    w->comma = false;
}
void sl_jw_aend(sl_jw *w) {
    putc_(w, ']');
    w->comma = true;
}

static void string(sl_jw *w, const void *src, size_t n) {
    const unsigned char *s = src;
    putc_(w, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = sl_json_plain(s + i, n - i, 0);
        if (run > 0) {
            put(w, s + i, run);
            i += run;
            continue;
        }
        char u[SL_JSON_UNIT_MAX];
        size_t adv, k = sl_json_unit(s + i, n - i, 0, u, &adv);
        put(w, u, k);
        i += adv;
    }
    putc_(w, '"');
}

void sl_jw_key(sl_jw *w, const char *k) {
    sep(w);
    string(w, k, strlen(k));
    putc_(w, ':');
    w->comma = false;
}

void sl_jw_str(sl_jw *w, const char *s) {
    if (s == NULL) {
        sl_jw_null(w);
        return;
    }
    sl_jw_strn(w, s, strlen(s));
}

void sl_jw_strn(sl_jw *w, const void *s, size_t n) {
    sep(w);
    string(w, s, n);
}

void sl_jw_strf(sl_jw *w, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof(buf)) n = (int)sizeof(buf) - 1;
    sl_jw_strn(w, buf, (size_t)n);
}

void sl_jw_u64(sl_jw *w, uint64_t v) {
    char b[24];
    int n = snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
    sep(w);
    put(w, b, (size_t)n);
}

void sl_jw_i64(sl_jw *w, int64_t v) {
    char b[24];
    int n = snprintf(b, sizeof(b), "%lld", (long long)v);
    sep(w);
    put(w, b, (size_t)n);
}

void sl_jw_bool(sl_jw *w, bool b) {
    sep(w);
    put(w, b ? "true" : "false", b ? 4 : 5);
}

void sl_jw_null(sl_jw *w) {
    sep(w);
    put(w, "null", 4);
}

void sl_jw_ms(sl_jw *w, int64_t ns) {
    if (ns < 0) {
        sl_jw_i64(w, -1);
        return;
    }
    sl_jw_i64(w, ns / 1000000 + (ns % 1000000 != 0));
}

void sl_jw_kstr(sl_jw *w, const char *k, const char *s) {
    sl_jw_key(w, k);
    sl_jw_str(w, s);
}
void sl_jw_ku64(sl_jw *w, const char *k, uint64_t v) {
    sl_jw_key(w, k);
    sl_jw_u64(w, v);
}
void sl_jw_ki64(sl_jw *w, const char *k, int64_t v) {
    sl_jw_key(w, k);
    sl_jw_i64(w, v);
}
void sl_jw_kbool(sl_jw *w, const char *k, bool b) {
    sl_jw_key(w, k);
    sl_jw_bool(w, b);
}
