/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.c -- JSON string escaping (see json.h). No allocation, no locale: byte rules only.
 */
#include "core/json.h"

#include <string.h>

size_t sl_utf8_len(const void *src, size_t n) {
    const unsigned char *s = src;
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] > 0x9F) return 0; /* UTF-16 surrogates */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] > 0x8F) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

static int plain(unsigned c, unsigned flags) {
    return c >= 0x20 && c < 0x7F && c != '\\' && (c != '"' || (flags & SL_JSON_BARE));
}

size_t sl_json_plain(const void *src, size_t n, unsigned flags) {
    const unsigned char *s = src;
    size_t i = 0;
    while (i < n && plain(s[i], flags)) i++;
    return i;
}

size_t sl_json_unit(const void *src, size_t n, unsigned flags, char out[SL_JSON_UNIT_MAX], size_t *adv) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = src;
    unsigned c = s[0];
    *adv = 1;
    if (plain(c, flags)) {
        out[0] = (char)c;
        return 1;
    }
    if (c == '"' || c == '\\') {
        out[0] = '\\', out[1] = (char)c;
        return 2;
    }
    if (c < 0x20 || c == 0x7F) {
        const char *short_ = c == '\n' ? "n" : c == '\r' ? "r" : c == '\t' ? "t" : c == '\b' ? "b" : c == '\f' ? "f" : NULL;
        out[0] = '\\';
        if (short_ != NULL) {
            out[1] = short_[0];
            return 2;
        }
        memcpy(out + 1, "u00", 3);
        out[4] = hex[c >> 4], out[5] = hex[c & 15];
        return 6;
    }
    if (flags & SL_JSON_BYTES) {
        memcpy(out, "\\u00", 4);
        out[4] = hex[c >> 4], out[5] = hex[c & 15];
        return 6;
    }
    size_t k = sl_utf8_len(s, n);
    if (k == 0) {
        memcpy(out, "\xEF\xBF\xBD", 3); /* U+FFFD for one bad byte */
        return 3;
    }
    if (k == 3 && c == 0xE2 && s[1] == 0x80 && (s[2] == 0xA8 || s[2] == 0xA9)) {
        memcpy(out, s[2] == 0xA8 ? "\\u2028" : "\\u2029", 6);
        *adv = 3;
        return 6;
    }
    memcpy(out, s, k);
    *adv = k;
    return k;
}

size_t sl_json_escape(char *dst, size_t cap, const void *src, size_t n, unsigned flags, size_t *used) {
    const unsigned char *s = src;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t run = sl_json_plain(s + i, n - i, flags);
        if (run > 0) {
            if (run > cap - o) run = cap - o;
            memcpy(dst + o, s + i, run);
            o += run, i += run;
            if (o == cap) break;
            continue;
        }
        char u[SL_JSON_UNIT_MAX];
        size_t adv, k = sl_json_unit(s + i, n - i, flags, u, &adv);
        if (k > cap - o) break;
        memcpy(dst + o, u, k);
        o += k, i += adv;
    }
    if (used != NULL) *used = i;
    return o;
}
