/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_formats.c -- the flat JSON object reader (nginx escape=json formats, Envoy JSON
 * access logs) and CSV with a header line; lines are unescaped in place.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "trace_int.h"

/* ---- JSON ----------------------------------------------------------------------------------- */

static void skip_ws(char **p, char *end) {
    while (*p < end && (**p == ' ' || **p == '\t')) (*p)++;
}

static void put_utf8(char **o, uint32_t c) {
    char *w = *o;
    if (c < 0x80) {
        *w++ = (char)c;
    } else if (c < 0x800) {
        *w++ = (char)(0xc0 | (c >> 6));
        *w++ = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
        *w++ = (char)(0xe0 | (c >> 12));
        *w++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *w++ = (char)(0x80 | (c & 0x3f));
    } else {
        *w++ = (char)(0xf0 | (c >> 18));
        *w++ = (char)(0x80 | ((c >> 12) & 0x3f));
        *w++ = (char)(0x80 | ((c >> 6) & 0x3f));
        *w++ = (char)(0x80 | (c & 0x3f));
    }
    *o = w;
}

static bool hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return false;
    }
    *out = v;
    return true;
}

/* A JSON string at *p (after the quote) unescaped in place; the span in *s. */
static bool json_string(char **p, char *end, char **s, size_t *n) {
    char *r = *p, *w = *p;
    *s = *p;
    while (r < end) {
        char c = *r;
        if (c == '"') {
            *n = (size_t)(w - *s);
            *p = r + 1;
            return true;
        }
        if ((unsigned char)c < 0x20) return false;
        if (c != '\\') {
            *w++ = *r++;
            continue;
        }
        if (r + 1 >= end) return false;
        char e = r[1];
        r += 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (end - r < 4 || !hex4(r, &cp)) return false;
            r += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && end - r >= 6 && r[0] == '\\' && r[1] == 'u') {
                uint32_t lo;
                if (hex4(r + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    r += 6;
                }
            }
            put_utf8(&w, cp); /* never longer than its escape */
            break;
        }
        default: return false;
        }
    }
    return false;
}

/* Skips a nested value (object or array), strings inside included. */
static bool json_skip(char **p, char *end) {
    int depth = 0;
    while (*p < end) {
        char c = **p;
        if (c == '"') {
            (*p)++;
            while (*p < end && **p != '"') *p += **p == '\\' ? 2 : 1;
            if (*p >= end) return false;
        } else if (c == '{' || c == '[') {
            if (++depth > 64) return false;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) {
                (*p)++;
                return true;
            }
        }
        (*p)++;
    }
    return false;
}

const char *sl__trace_parse_json(sl_trace_layout *l, char *line, size_t len, fill *f) {
    char *p = line, *end = line + len;
    skip_ws(&p, end);
    if (p >= end || *p != '{') return "not a JSON object";
    p++;
    skip_ws(&p, end);
    if (p < end && *p == '}') return sl__trace_finish(l, f);
    for (;;) {
        skip_ws(&p, end);
        if (p >= end) return "truncated JSON";
        if (*p != '"') return "JSON: expected a key";
        p++;
        char *k;
        size_t kn;
        if (!json_string(&p, end, &k, &kn)) return "JSON: bad key";
        skip_ws(&p, end);
        if (p >= end || *p != ':') return "JSON: expected ':'";
        p++;
        skip_ws(&p, end);
        if (p >= end) return "truncated JSON";
        char *v = NULL;
        size_t vn = 0;
        if (*p == '"') {
            p++;
            if (!json_string(&p, end, &v, &vn)) return "JSON: bad string";
        } else if (*p == '{' || *p == '[') {
            if (!json_skip(&p, end)) return "truncated JSON";
        } else {
            v = p;
            while (p < end && *p != ',' && *p != '}' && *p != ' ' && *p != '\t') p++;
            vn = (size_t)(p - v);
            if (vn == 0) return "JSON: expected a value";
            if (field_is(v, vn, "null")) v = NULL;
        }
        if (v != NULL) sl__trace_put_resolved(f, sl__trace_resolve_cached(l, k, kn), v, vn);
        skip_ws(&p, end);
        if (p >= end) return "truncated JSON";
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '}') break;
        return "JSON: expected ',' or '}'";
    }
    return sl__trace_finish(l, f);
}

/* ---- CSV ------------------------------------------------------------------------------------ */

/* The next field of a CSV line (RFC 4180 quoting), unquoted in place. */
static int csv_field(char **p, char *end, char **v, size_t *n) {
    char *r = *p;
    if (r < end && *r == '"') {
        char *w = ++r;
        *v = w;
        for (;;) {
            if (r >= end) return -1;
            if (*r == '"') {
                if (r + 1 < end && r[1] == '"') {
                    *w++ = '"';
                    r += 2;
                    continue;
                }
                r++;
                break;
            }
            *w++ = *r++;
        }
        *n = (size_t)(w - *v);
        if (r < end && *r != ',') return -1;
    } else {
        *v = r;
        while (r < end && *r != ',') r++;
        *n = (size_t)(r - *v);
    }
    if (r < end) {
        *p = r + 1;
        return 1; /* more follow */
    }
    *p = r;
    return 0;
}

bool sl_trace_layout_header(sl_trace_layout *l, char *line, size_t len) {
    char *p = line, *end = line + len;
    size_t n = 0;
    bool time = false;
    for (;;) {
        char *v;
        size_t vn;
        int more = csv_field(&p, end, &v, &vn);
        if (more < 0 || n >= MAX_COLUMNS || vn == 0) return false;
        while (vn > 0 && v[vn - 1] == ' ') vn--;
        while (vn > 0 && *v == ' ') v++, vn--;
        for (size_t i = 0; i < vn; i++)
            if (!(isalnum((unsigned char)v[i]) || strchr("_.-@:", v[i]))) return false;
        l->cols[n++] = sl__trace_resolve(l, v, vn);
        for (size_t i = 0; i < l->cols[n - 1].n; i++) time |= l->cols[n - 1].t[i].attr == SL_A_TIME;
        if (!more) break;
    }
    l->n_cols = n;
    l->have_header = time || (l->map && l->map->n > 0);
    return l->have_header;
}

const char *sl__trace_parse_csv(sl_trace_layout *l, char *line, size_t len, fill *f) {
    if (!l->have_header) return "CSV without a header line";
    char *p = line, *end = line + len;
    for (size_t c = 0;; c++) {
        char *v;
        size_t vn;
        int more = csv_field(&p, end, &v, &vn);
        if (more < 0) return "CSV: unterminated or misplaced quote";
        if (c >= l->n_cols) return "CSV: more fields than the header names";
        sl__trace_put_resolved(f, &l->cols[c], v, vn);
        if (!more) {
            if (c + 1 < l->n_cols) return "CSV: fewer fields than the header names (truncated?)";
            break;
        }
    }
    return sl__trace_finish(l, f);
}
