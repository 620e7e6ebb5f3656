/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.c -- a validating JSON scan that builds nothing: each value is reported to a
 * callback with the path of keys above it, then skipped. Memory: the path array on the
 * stack (SL_LLM_DEPTH segments); recursion is bounded by the same depth. Used for request
 * bodies and usage objects, whatever their size (a 100 MB body costs time, not memory).
 */
#include <string.h>

#include "json.h"
#include "llm/llm.h"

typedef struct {
    const char *s;
    size_t n, i;
    sl_llm_jcb cb;
    void *ctx;
    sl_llm_jseg path[SL_LLM_DEPTH + 1];
    int stop;
} scan;

static void ws(scan *c) {
    while (c->i < c->n) {
        char ch = c->s[c->i];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') break;
        c->i++;
    }
}

static int hexd(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* A string at the quote s[i]: on success c->i is past the closing quote, *b and *e bound the content. */
static int str(scan *c, size_t *b, size_t *e) {
    c->i++;
    *b = c->i;
    while (c->i < c->n) {
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') {
            *e = c->i++;
            return 0;
        }
        if (ch < 0x20) return -1;
        if (ch == '\\') {
            if (c->i + 1 >= c->n) return -1;
            char x = c->s[c->i + 1];
            if (x == 'u') {
                if (c->i + 6 > c->n) return -1;
                for (int k = 2; k < 6; k++)
                    if (!hexd(c->s[c->i + k])) return -1;
                c->i += 6;
            } else if (strchr("\"\\/bfnrt", x) != NULL && x != 0) {
                c->i += 2;
            } else {
                return -1;
            }
            continue;
        }
        if (ch < 0x80) {
            c->i++;
            continue;
        }
        size_t l = sl_utf8_len(c->s + c->i, c->n - c->i);
        if (l == 0) return -1;
        c->i += l;
    }
    return -1;
}

static int num(scan *c) {
    size_t st = c->i;
    if (c->i < c->n && c->s[c->i] == '-') c->i++;
    if (c->i >= c->n) return -1;
    if (c->s[c->i] == '0') {
        c->i++;
    } else if (c->s[c->i] >= '1' && c->s[c->i] <= '9') {
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
    } else {
        return -1;
    }
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        size_t d = c->i;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
        if (c->i == d) return -1;
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        size_t d = c->i;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
        if (c->i == d) return -1;
    }
    return c->i > st ? 0 : -1;
}

static int lit(scan *c, const char *w) {
    size_t l = strlen(w);
    if (c->n - c->i < l || memcmp(c->s + c->i, w, l) != 0) return -1;
    c->i += l;
    return 0;
}

static int report(scan *c, int depth, sl_llm_jtype t, size_t b, size_t e) {
    if (c->cb == NULL) return 0;
    int r = c->cb(c->ctx, c->path, depth, t, c->s + b, e - b, b);
    if (r) c->stop = r;
    return r;
}

static int value(scan *c, int depth) {
    ws(c);
    if (c->i >= c->n) return -1;
    char ch = c->s[c->i];
    size_t b = c->i, e;
    if (ch == '{' || ch == '[') {
        if (depth >= SL_LLM_DEPTH) return -1;
        if (report(c, depth, ch == '{' ? SL_LLM_J_OBJ : SL_LLM_J_ARR, b, b + 1)) return 1;
        char close = ch == '{' ? '}' : ']';
        c->i++;
        ws(c);
        if (c->i < c->n && c->s[c->i] == close) {
            c->i++;
            return 0;
        }
        for (;;) {
            ws(c);
            if (ch == '{') {
                size_t kb, ke;
                if (c->i >= c->n || c->s[c->i] != '"' || str(c, &kb, &ke) != 0) return -1;
                c->path[depth].k = c->s + kb;
                c->path[depth].kl = ke - kb;
                ws(c);
                if (c->i >= c->n || c->s[c->i] != ':') return -1;
                c->i++;
            } else {
                c->path[depth].k = NULL;
                c->path[depth].kl = 0;
            }
            int r = value(c, depth + 1);
            if (r) return r;
            ws(c);
            if (c->i >= c->n) return -1;
            if (c->s[c->i] == ',') {
                c->i++;
                continue;
            }
            if (c->s[c->i] == close) {
                c->i++;
                return 0;
            }
            return -1;
        }
    }
    sl_llm_jtype t;
    if (ch == '"') {
        if (str(c, &b, &e) != 0) return -1;
        t = SL_LLM_J_STR;
    } else if (ch == 't') {
        if (lit(c, "true")) return -1;
        e = c->i;
        t = SL_LLM_J_TRUE;
    } else if (ch == 'f') {
        if (lit(c, "false")) return -1;
        e = c->i;
        t = SL_LLM_J_FALSE;
    } else if (ch == 'n') {
        if (lit(c, "null")) return -1;
        e = c->i;
        t = SL_LLM_J_NULL;
    } else {
        if (num(c)) return -1;
        e = c->i;
        t = SL_LLM_J_NUM;
    }
    return report(c, depth, t, b, e) ? 1 : 0;
}

int sl_llm_json_scan(const char *s, size_t n, sl_llm_jcb cb, void *ctx, size_t *at) {
    scan c = {.s = s, .n = n, .cb = cb, .ctx = ctx};
    int r = value(&c, 0);
    if (r == 0) {
        ws(&c);
        if (c.i != n) r = -1;
    }
    if (r > 0) return c.stop;
    if (r < 0 && at) *at = c.i;
    return r;
}

int sl_llm_num_tokens(const char *v, size_t vl, uint64_t *out) {
    if (vl == 0 || vl > 20) return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        x = x * 10 + (uint64_t)(v[i] - '0');
        if (x > SL_LLM_TOKENS_MAX) return -1;
    }
    *out = x;
    return 0;
}

int sl_llm_key_is(const sl_llm_jseg *s, const char *lit) {
    size_t l = strlen(lit);
    return s->k != NULL && s->kl == l && memcmp(s->k, lit, l) == 0;
}
