/* SPDX-License-Identifier: Apache-2.0 */
/*
 * redact.c -- see redact.h. Text is cut into words (whitespace, quotes, brackets and
 * commas end one, as a URL is written in a message or a log field); in each word the
 * userinfo before its last '@' and the values of credential parameters are replaced.
 */
#include "core/redact.h"

#include <stdbool.h>
#include <string.h>

static bool is_delim(char c) {
    return c == '\0' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\'' ||
           c == '`' || c == ',' || c == '(' || c == ')' || c == '[' || c == ']' || c == '{' ||
           c == '}' || c == '<' || c == '>';
}

/* Replaces s[from, to) with SL_REDACTED, moving the tail (cut at cap); returns the
 * offset just past the replacement. */
static size_t replace(char *s, size_t cap, size_t from, size_t to) {
    size_t rl = sizeof(SL_REDACTED) - 1, len = strlen(s);
    if (to - from == rl && memcmp(s + from, SL_REDACTED, rl) == 0) return to;
    size_t tail = len - to;
    size_t nto = from + rl;
    if (nto >= cap) { /* no room even for the mark: cut the text here */
        s[from] = '\0';
        return from;
    }
    if (nto + tail >= cap) tail = cap - 1 - nto;
    memmove(s + nto, s + to, tail);
    memcpy(s + from, SL_REDACTED, rl);
    s[nto + tail] = '\0';
    return nto;
}

static const char *const params[] = {"password=", "sentinel_password=", "token=", "auth_token=",
                                     "passwd=", NULL};

/* Redacts one word s[b, *e); *e follows the changes. */
static size_t word(char *s, size_t cap, size_t b, size_t *e) {
    size_t n = 0;
    /* the userinfo: up to the last '@' of the word (a password may hold '@' and '/') */
    size_t at = *e;
    for (size_t i = b; i < *e; i++)
        if (s[i] == '@') at = i;
    if (at < *e) {
        size_t start = b;
        bool scheme = false;
        for (size_t i = b; i + 2 < at; i++)
            if (s[i] == ':' && s[i + 1] == '/' && s[i + 2] == '/') {
                start = i + 3;
                scheme = true;
                break;
            }
        if (!scheme) /* user:PW@host after a key= of a log field */
            for (size_t i = b; i < at; i++)
                if (s[i] == '=') start = i + 1;
        size_t colon = at;
        for (size_t i = start; i < at; i++)
            if (s[i] == ':') {
                colon = i;
                break;
            }
        size_t from = colon < at ? colon + 1 : scheme ? start : at;
        if (from < at) {
            size_t before = strlen(s);
            size_t past = replace(s, cap, from, at);
            n++;
            if (past == from) { /* cut there */
                *e = from;
                return n;
            }
            *e = *e + strlen(s) - before;
        }
    }
    /* credential parameters: ?password=PW&... */
    for (size_t i = b; i < *e; i++) {
        if (i != b && s[i - 1] != '?' && s[i - 1] != '&' && s[i - 1] != ';') continue;
        for (size_t k = 0; params[k]; k++) {
            size_t pl = strlen(params[k]);
            if (i + pl > *e || strncmp(s + i, params[k], pl) != 0) continue;
            size_t v = i + pl, ve = v;
            while (ve < *e && s[ve] != '&' && s[ve] != ';') ve++;
            if (ve > v) {
                size_t before = strlen(s);
                replace(s, cap, v, ve);
                *e = *e + strlen(s) - before;
                n++;
            }
            break;
        }
    }
    return n;
}

size_t sl_redact(char *s, size_t cap) {
    if (s == NULL || cap == 0) return 0;
    size_t n = 0, i = 0;
    while (s[i] != '\0' && i < cap) {
        while (s[i] != '\0' && is_delim(s[i])) i++;
        if (s[i] == '\0') break;
        size_t e = i;
        while (!is_delim(s[e])) e++;
        n += word(s, cap, i, &e);
        i = e;
    }
    return n;
}

/* Why a cut copy needs more: the '@' that ends a userinfo may lie past the cut, leaving
 * "scheme://user:PASSW" with nothing to show it is one. Then the cut word is redacted
 * from its userinfo on. */
char *sl_redact_copy(const char *in, char *out, size_t cap) {
    if (out == NULL || cap == 0) return out;
    size_t l = in ? strnlen(in, cap - 1) : 0;
    if (l) memcpy(out, in, l);
    out[l] = '\0';
    if (l > 0 && in[l] != '\0' && !is_delim(in[l])) {
        size_t b = l;
        while (b > 0 && !is_delim(out[b - 1])) b--;
        bool at_later = false;
        for (size_t i = l; !is_delim(in[i]); i++) at_later |= in[i] == '@';
        if (at_later && memchr(out + b, '@', l - b) == NULL) {
            size_t from = b;
            const char *sch = strstr(out + b, "://");
            if (sch != NULL) from = (size_t)(sch - out) + 3;
            const char *colon = memchr(out + from, ':', l - from);
            if (colon != NULL) from = (size_t)(colon - out) + 1;
            else if (sch == NULL) from = b;
            out[from] = '\0';
            if (from + sizeof(SL_REDACTED) <= cap) memcpy(out + from, SL_REDACTED, sizeof(SL_REDACTED));
        }
    }
    sl_redact(out, cap);
    return out;
}
