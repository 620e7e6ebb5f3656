/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sf.c -- the structured-field List reader (RFC 9651 4.2): lists, inner lists, parameters
 * and every bare item (integer, decimal, string, token, byte sequence, boolean, date,
 * display string), with the RFC's limits (15 integer digits, 12.3 decimals). Strict: any
 * deviation makes the whole field invalid, as the RFC requires of a parser.
 */
#include "sf.h"

#include <string.h>

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_lcalpha(char c) { return c >= 'a' && c <= 'z'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* tchar of RFC 9110, plus ':' and '/' which tokens also allow */
static bool is_tchar(char c) {
    if (is_alpha(c) || is_digit(c)) return true;
    return c != 0 && strchr("!#$%&'*+-.^_`|~:/", c) != NULL;
}

static void skip_sp(sl_sf_list *l) {
    while (l->p < l->end && *l->p == ' ') l->p++;
}

static void skip_ows(sl_sf_list *l) {
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t')) l->p++;
}

static bool parse_number(sl_sf_list *l, sl_sf_value *v) {
    int64_t sign = 1;
    if (l->p < l->end && *l->p == '-') {
        sign = -1;
        l->p++;
    }
    if (l->p >= l->end || !is_digit(*l->p)) return false;
    int64_t ip = 0;
    int digits = 0;
    while (l->p < l->end && is_digit(*l->p)) {
        if (++digits > 15) return false;
        ip = ip * 10 + (*l->p++ - '0');
    }
    if (l->p < l->end && *l->p == '.') {
        if (digits > 12) return false;
        l->p++;
        int frac = 0;
        int64_t f = 0;
        while (l->p < l->end && is_digit(*l->p)) {
            if (++frac > 3) return false;
            f = f * 10 + (*l->p++ - '0');
        }
        if (frac == 0) return false;
        for (int i = frac; i < 3; i++) f *= 10;
        v->type = SL_SF_DECIMAL;
        v->integer = sign * (ip * 1000 + f);
        return true;
    }
    v->type = SL_SF_INTEGER;
    v->integer = sign * ip;
    return true;
}

static bool parse_bare(sl_sf_list *l, sl_sf_value *v) {
    if (l->p >= l->end) return false;
    char c = *l->p;
    memset(v, 0, sizeof(*v));
    if (c == '-' || is_digit(c)) return parse_number(l, v);
    if (c == '"') {
        const char *s = ++l->p;
        while (l->p < l->end) {
            char d = *l->p;
            if (d == '\\') {
                if (l->p + 1 >= l->end || (l->p[1] != '"' && l->p[1] != '\\')) return false;
                l->p += 2;
            } else if (d == '"') {
                v->type = SL_SF_STRING;
                v->p = s;
                v->len = (size_t)(l->p - s);
                l->p++;
                return true;
            } else if ((unsigned char)d < 0x20 || (unsigned char)d > 0x7e) {
                return false;
            } else {
                l->p++;
            }
        }
        return false;
    }
    if (c == '*' || is_alpha(c)) {
        const char *s = l->p++;
        while (l->p < l->end && is_tchar(*l->p)) l->p++;
        v->type = SL_SF_TOKEN;
        v->p = s;
        v->len = (size_t)(l->p - s);
        return true;
    }
    if (c == ':') {
        const char *s = ++l->p;
        while (l->p < l->end && *l->p != ':') {
            char d = *l->p;
            if (!(is_alpha(d) || is_digit(d) || d == '+' || d == '/' || d == '=')) return false;
            l->p++;
        }
        if (l->p >= l->end) return false;
        v->type = SL_SF_BYTES;
        v->p = s;
        v->len = (size_t)(l->p - s);
        l->p++;
        return true;
    }
    if (c == '?') {
        l->p++;
        if (l->p >= l->end || (*l->p != '0' && *l->p != '1')) return false;
        v->type = SL_SF_BOOLEAN;
        v->integer = *l->p++ == '1';
        return true;
    }
    if (c == '@') {
        l->p++;
        if (!parse_number(l, v) || v->type != SL_SF_INTEGER) return false;
        v->type = SL_SF_DATE;
        return true;
    }
    if (c == '%') {
        l->p++;
        if (l->p >= l->end || *l->p != '"') return false;
        const char *s = ++l->p;
        while (l->p < l->end && *l->p != '"') {
            unsigned char d = (unsigned char)*l->p;
            if (d < 0x20 || d > 0x7e) return false;
            if (d == '%') {
                if (l->end - l->p < 3) return false;
                for (int i = 1; i <= 2; i++) {
                    char h = l->p[i];
                    if (!(is_digit(h) || (h >= 'a' && h <= 'f'))) return false;
                }
                l->p += 3;
            } else {
                l->p++;
            }
        }
        if (l->p >= l->end) return false;
        v->type = SL_SF_DISPLAY;
        v->p = s;
        v->len = (size_t)(l->p - s);
        l->p++;
        return true;
    }
    return false;
}

/* Parameters after an item or inner list: (";" *SP key ["=" bare-item])*. */
static bool parse_params(sl_sf_list *l, sl_sf_member *m) {
    while (l->p < l->end && *l->p == ';') {
        l->p++;
        skip_sp(l);
        if (l->p >= l->end || !(is_lcalpha(*l->p) || *l->p == '*')) return false;
        const char *k = l->p++;
        while (l->p < l->end && (is_lcalpha(*l->p) || is_digit(*l->p) || *l->p == '_' ||
                                 *l->p == '-' || *l->p == '.' || *l->p == '*'))
            l->p++;
        sl_sf_param prm = {.key = k, .key_len = (size_t)(l->p - k)};
        if (l->p < l->end && *l->p == '=') {
            l->p++;
            if (!parse_bare(l, &prm.v)) return false;
        } else {
            prm.v.type = SL_SF_BOOLEAN;
            prm.v.integer = 1;
        }
        if (m == NULL) continue;
        if (m->n_params < SL_SF_MAX_PARAMS)
            m->params[m->n_params++] = prm;
        else
            m->params_dropped = true;
    }
    return true;
}

void sl_sf_list_init(sl_sf_list *l, const char *value, size_t len) {
    l->p = value;
    l->end = value + len;
    l->started = false;
    /* field values arrive with surrounding whitespace possibly still on them */
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t')) l->p++;
    while (l->end > l->p && (l->end[-1] == ' ' || l->end[-1] == '\t')) l->end--;
}

int sl_sf_list_next(sl_sf_list *l, sl_sf_member *m) {
    if (l->p >= l->end) return 0;
    if (l->started) {
        skip_ows(l);
        if (l->p >= l->end || *l->p != ',') return -1;
        l->p++;
        skip_ows(l);
        if (l->p >= l->end) return -1; /* a trailing comma */
    }
    l->started = true;
    memset(m, 0, sizeof(*m));
    if (*l->p == '(') {
        l->p++;
        for (;;) {
            skip_sp(l);
            if (l->p >= l->end) return -1;
            if (*l->p == ')') {
                l->p++;
                break;
            }
            sl_sf_value inner;
            if (!parse_bare(l, &inner) || !parse_params(l, NULL)) return -1;
            if (l->p >= l->end || (*l->p != ' ' && *l->p != ')')) return -1;
        }
        m->v.type = SL_SF_INNER;
    } else if (!parse_bare(l, &m->v)) {
        return -1;
    }
    if (!parse_params(l, m)) return -1;
    skip_ows(l);
    if (l->p < l->end && *l->p != ',') return -1;
    return 1;
}

const sl_sf_value *sl_sf_param_get(const sl_sf_member *m, const char *key) {
    size_t kl = strlen(key);
    const sl_sf_value *found = NULL;
    for (size_t i = 0; i < m->n_params; i++)
        if (m->params[i].key_len == kl && memcmp(m->params[i].key, key, kl) == 0)
            found = &m->params[i].v;
    return found;
}

bool sl_sf_string_copy(const sl_sf_value *v, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->p[i];
        if (c == '\\') c = v->p[++i];
        if (o + 1 >= cap) return false;
        buf[o++] = c;
    }
    if (cap == 0) return false;
    buf[o] = '\0';
    return true;
}
