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

/* Length of the well-formed UTF-8 sequence at s (RFC 3629), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c == 0xE0) need = 3, lo = 0xA0;
    else if (c == 0xED) need = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) need = 3;
    else if (c == 0xF0) need = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 4;
    else if (c == 0xF4) need = 4, hi = 0x8F;
    else return 0;
    if (n < need) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return need;
}

static void string(sl_jw *w, const void *src, size_t n) {
    const unsigned char *s = src;
    putc_(w, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(w, e, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            char e[8];
            snprintf(e, sizeof(e), "\\u%04x", c);
            put(w, e, 6);
            i++;
        } else {
            size_t l = utf8_len(s + i, n - i);
            if (l == 0) {
                put(w, "\\ufffd", 6);
                i++;
            } else {
                put(w, s + i, l);
                i += l;
            }
        }
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
