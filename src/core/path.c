/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path.c -- path normalisation (see path.h). Why it exists: a limit on /login must also
 * hold for //login, /./login, /x/../login and /%6Cogin, which the backend treats as the
 * same resource; otherwise a client could side-step it by rewriting the path.
 */
#include "core/path.h"

#include <string.h>

size_t sl_path_len(const char *p, size_t len) {
    if (p == NULL) return 0;
    for (size_t i = 0; i < len; i++)
        if (p[i] == '?' || p[i] == '#') return i;
    return len;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int unreserved(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '.' || c == '_' || c == '~';
}

/*
 * Percent-encoded unreserved characters are decoded (other escapes' hex upper-cased),
 * runs of '/' collapsed, "." and ".." segments resolved. A trailing '/' is kept (it may
 * name another resource). The output is never longer than the input (an escape stays 3
 * bytes or becomes 1, and segment resolution only removes), so any length is normalised.
 */
size_t sl_path_norm(const char *in, size_t len, char *out, const char **res) {
    if (in == NULL || len == 0 || in[0] != '/') {
        *res = in;
        return sl_path_len(in, len);
    }
    /* the common case, a path already normal (no escape, no "//", no dot segment): it is
     * its own normal form, found in one pass and never copied */
    size_t n = 0;
    for (; n < len; n++) {
        char c = in[n];
        if (c == '?' || c == '#') break;
        if (c == '%' || (c == '/' && n + 1 < len && (in[n + 1] == '/' || in[n + 1] == '.'))) {
            n = sl_path_len(in, len);
            goto rewrite;
        }
    }
    *res = in;
    return n;
rewrite:;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '%' && i + 2 < n && hexval(in[i + 1]) >= 0 && hexval(in[i + 2]) >= 0) {
            int v = hexval(in[i + 1]) * 16 + hexval(in[i + 2]);
            if (unreserved(v)) {
                out[o++] = (char)v;
            } else {
                out[o++] = '%';
                out[o++] = "0123456789ABCDEF"[v >> 4];
                out[o++] = "0123456789ABCDEF"[v & 15];
            }
            i += 2;
            continue;
        }
        out[o++] = c;
    }
    /* segments, in place: the write position never passes the read position */
    size_t r = 0, w = 0;
    int dir = 0; /* the path ends as a directory ("/", "/." or "/..") */
    while (r < o) {
        if (out[r] == '/') {
            r++;
            dir = 1;
            continue;
        }
        size_t st = r;
        while (r < o && out[r] != '/') r++;
        size_t sl = r - st;
        if (sl == 1 && out[st] == '.') {
            dir = 1;
            continue;
        }
        if (sl == 2 && out[st] == '.' && out[st + 1] == '.') {
            while (w > 0 && out[w - 1] != '/') w--;
            if (w > 0) w--;
            dir = 1;
            continue;
        }
        out[w++] = '/';
        memmove(out + w, out + st, sl);
        w += sl;
        dir = 0;
    }
    if (w == 0 || dir) out[w++] = '/';
    *res = out;
    return w;
}
