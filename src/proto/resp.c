/* SPDX-License-Identifier: Apache-2.0 */
/*
 * resp.c -- RESP request parsing (multibulk and inline) and reply encoding.
 * Invariants: never reads past buf[len), never writes past scratch_cap; limits are
 * SL_RESP_MAX_ARGS arguments, SL_RESP_MAX_BULK bytes per argument and
 * SL_RESP_MAX_INLINE bytes per inline line. Error texts follow Redis's networking.c
 * so clients print what they would print against Redis.
 */
#include "proto/resp.h"

#include <stdbool.h>

#include <stdio.h>
#include <string.h>

static int perr(sl_resp_cmd *cmd, const char *msg) {
    snprintf(cmd->err, sizeof(cmd->err), "Protocol error: %s", msg);
    return SL_RESP_ERROR;
}

/* Redis string2ll: optional '-', no '+', no leading zeros, no spaces, fits int64. */
static int parse_i64(const char *s, size_t n, int64_t *out) {
    if (n == 0 || n > 20) return -1;
    size_t i = 0;
    int neg = 0;
    if (s[0] == '-') {
        neg = 1;
        i = 1;
        if (n == 1) return -1;
    }
    if (s[i] == '0') {
        if (n == i + 1 && !neg) {
            *out = 0;
            return 0;
        }
        return -1;
    }
    uint64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1) return -1;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)v;
    }
    return 0;
}

/* One "<type><int>\r\n" line at pos; returns the position after it, 0 if incomplete,
 * -1 if the line has no CRLF within `max_line` bytes. */
/*
 * A "*N" or "$N" line from `pos`: the position after its CRLF, 0 when incomplete, -1 when
 * longer than max_line without one. Digits are read as they are scanned (one pass: this
 * runs for every argument of every command); *bad is set for anything but an optional
 * '-' and digits before "\r\n", or a value past int64.
 */
static long count_line(const char *buf, size_t len, size_t pos, size_t max_line, int64_t *v,
                       int *bad) {
    size_t i = pos + 1, end = len - pos > max_line ? pos + max_line : len;
    bool neg = false;
    uint64_t n = 0;
    size_t digits = 0;
    *bad = 0;
    if (i < end && buf[i] == '-') neg = true, i++;
    for (; i < end; i++) {
        unsigned d = (unsigned)((unsigned char)buf[i] - '0');
        if (d > 9) break;
        if (n > (UINT64_MAX - d) / 10) *bad = 1;
        n = n * 10 + d;
        digits++;
    }
    if (i >= end) return len - pos > max_line ? -1 : 0;
    if (buf[i] != '\r') {
        /* not a number: find the end of the line to report it whole */
        const char *cr = memchr(buf + i, '\r', end - i);
        if (cr == NULL) return len - pos > max_line ? -1 : 0;
        i = (size_t)(cr - buf);
        *bad = 1;
    }
    if (i + 1 >= len) return 0;
    if (buf[i + 1] != '\n' || digits == 0 || digits > 20 || (neg && n == 0) ||
        (digits > 1 && buf[i - digits] == '0') || (neg ? n > (uint64_t)INT64_MAX + 1 : n > (uint64_t)INT64_MAX))
        *bad = 1;
    *v = neg ? (int64_t)(0 - n) : (int64_t)n;
    return (long)(i + 2);
}

static int parse_multibulk(const char *buf, size_t len, sl_resp_cmd *cmd) {
    int64_t count;
    int bad;
    long p = count_line(buf, len, 0, SL_RESP_MAX_INLINE, &count, &bad);
    if (p < 0) return perr(cmd, "too big mbulk count string");
    if (p == 0) return SL_RESP_INCOMPLETE;
    if (bad || count > 1024 * 1024) return perr(cmd, "invalid multibulk length");
    if (count <= 0) return (int)p; /* "*0" and "*-1": nothing to run */
    if (count > SL_RESP_MAX_ARGS) return perr(cmd, "invalid multibulk length");
    size_t pos = (size_t)p;
    for (int64_t i = 0; i < count; i++) {
        if (pos >= len) return SL_RESP_INCOMPLETE;
        if (buf[pos] != '$') {
            unsigned char c = (unsigned char)buf[pos];
            char m[40];
            if (c >= 0x20 && c < 0x7f)
                snprintf(m, sizeof(m), "expected '$', got '%c'", c);
            else
                snprintf(m, sizeof(m), "expected '$', got '\\x%02x'", c);
            return perr(cmd, m);
        }
        int64_t blen;
        p = count_line(buf, len, pos, SL_RESP_MAX_INLINE, &blen, &bad);
        if (p < 0) return perr(cmd, "too big bulk count string");
        if (p == 0) return SL_RESP_INCOMPLETE;
        if (bad || blen < 0 || blen > SL_RESP_MAX_BULK) return perr(cmd, "invalid bulk length");
        pos = (size_t)p;
        if (len - pos < (size_t)blen + 2) return SL_RESP_INCOMPLETE;
        cmd->argv[cmd->argc] = buf + pos;
        cmd->argl[cmd->argc] = (size_t)blen;
        cmd->argc++;
        pos += (size_t)blen + 2; /* like Redis, the CRLF after the data is not checked */
    }
    return (int)pos;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c |= 0x20;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\0'; }

/* Splits an inline line with redis-cli's quoting rules (sdssplitargs). */
static int split_inline(const char *l, size_t n, sl_resp_cmd *cmd, char *scratch, size_t cap) {
    size_t i = 0, out = 0;
    for (;;) {
        while (i < n && is_space(l[i])) i++;
        if (i >= n) return 0;
        if (cmd->argc >= SL_RESP_MAX_ARGS) return perr(cmd, "too many arguments in inline request");
        size_t start = out;
        int inq = 0, insq = 0, done = 0;
        while (!done) {
            if (out >= cap) return perr(cmd, "too big inline request");
            if (inq) {
                if (i >= n) return perr(cmd, "unbalanced quotes in request");
                if (l[i] == '\\' && i + 3 < n && l[i + 1] == 'x' && hexval((unsigned char)l[i + 2]) >= 0 &&
                    hexval((unsigned char)l[i + 3]) >= 0) {
                    scratch[out++] = (char)(hexval((unsigned char)l[i + 2]) * 16 + hexval((unsigned char)l[i + 3]));
                    i += 4;
                } else if (l[i] == '\\' && i + 1 < n) {
                    char c = l[i + 1];
                    switch (c) {
                    case 'n': c = '\n'; break;
                    case 'r': c = '\r'; break;
                    case 't': c = '\t'; break;
                    case 'b': c = '\b'; break;
                    case 'a': c = '\a'; break;
                    default: break;
                    }
                    scratch[out++] = c;
                    i += 2;
                } else if (l[i] == '"') {
                    if (i + 1 < n && !is_space(l[i + 1])) return perr(cmd, "unbalanced quotes in request");
                    i++;
                    done = 1;
                } else {
                    scratch[out++] = l[i++];
                }
            } else if (insq) {
                if (i >= n) return perr(cmd, "unbalanced quotes in request");
                if (l[i] == '\\' && i + 1 < n && l[i + 1] == '\'') {
                    scratch[out++] = '\'';
                    i += 2;
                } else if (l[i] == '\'') {
                    if (i + 1 < n && !is_space(l[i + 1])) return perr(cmd, "unbalanced quotes in request");
                    i++;
                    done = 1;
                } else {
                    scratch[out++] = l[i++];
                }
            } else {
                if (i >= n || is_space(l[i])) {
                    done = 1;
                } else if (l[i] == '"') {
                    inq = 1;
                    i++;
                } else if (l[i] == '\'') {
                    insq = 1;
                    i++;
                } else {
                    scratch[out++] = l[i++];
                }
            }
        }
        cmd->argv[cmd->argc] = scratch + start;
        cmd->argl[cmd->argc] = out - start;
        cmd->argc++;
    }
}

int sl_resp_parse(const char *buf, size_t len, sl_resp_cmd *cmd, char *scratch,
                  size_t scratch_cap) {
    cmd->argc = 0;
    cmd->inline_form = 0;
    cmd->err[0] = '\0';
    if (len == 0) return SL_RESP_INCOMPLETE;
    if (buf[0] == '*') return parse_multibulk(buf, len, cmd);
    cmd->inline_form = 1;
    const char *lf = memchr(buf, '\n', len);
    if (lf == NULL) {
        if (len > SL_RESP_MAX_INLINE) return perr(cmd, "too big inline request");
        return SL_RESP_INCOMPLETE;
    }
    size_t n = (size_t)(lf - buf);
    if (n > SL_RESP_MAX_INLINE) return perr(cmd, "too big inline request");
    size_t consumed = n + 1;
    if (n > 0 && buf[n - 1] == '\r') n--;
    int rc = split_inline(buf, n, cmd, scratch, scratch_cap);
    if (rc < 0) return rc;
    return (int)consumed;
}

int sl_resp_arg_is(const sl_resp_cmd *cmd, size_t i, const char *name) {
    if (i >= cmd->argc) return 0;
    size_t n = strlen(name);
    if (cmd->argl[i] != n) return 0;
    for (size_t k = 0; k < n; k++) {
        int a = (unsigned char)cmd->argv[i][k], b = (unsigned char)name[k];
        if (a >= 'A' && a <= 'Z') a += 32;
        if (b >= 'A' && b <= 'Z') b += 32;
        if (a != b) return 0;
    }
    return 1;
}

int sl_resp_arg_i64(const sl_resp_cmd *cmd, size_t i, int64_t *out) {
    if (i >= cmd->argc) return -1;
    return parse_i64(cmd->argv[i], cmd->argl[i], out);
}

/* ---- encoders ---- */

static void line(sl_wbuf *w, char type, const char *s) {
    sl_wbuf_putc(w, type);
    /* a simple string or error cannot hold CR or LF: replace them */
    for (const char *p = s; *p; p++) sl_wbuf_putc(w, (*p == '\r' || *p == '\n') ? ' ' : *p);
    sl_wbuf_put(w, "\r\n", 2);
}

void sl_resp_simple(sl_wbuf *w, const char *s) { line(w, '+', s); }
void sl_resp_error(sl_wbuf *w, const char *s) { line(w, '-', s); }

static void typed_int(sl_wbuf *w, char type, int64_t v) {
    sl_wbuf_putc(w, type);
    sl_wbuf_i64(w, v);
    sl_wbuf_put(w, "\r\n", 2);
}

void sl_resp_int(sl_wbuf *w, int64_t v) { typed_int(w, ':', v); }

void sl_resp_bulk(sl_wbuf *w, const void *p, size_t n) {
    typed_int(w, '$', (int64_t)n);
    sl_wbuf_put(w, p, n);
    sl_wbuf_put(w, "\r\n", 2);
}

void sl_resp_bulk_str(sl_wbuf *w, const char *s) { sl_resp_bulk(w, s, strlen(s)); }

void sl_resp_null(sl_wbuf *w, int proto) { sl_wbuf_puts(w, proto == 3 ? "_\r\n" : "$-1\r\n"); }

void sl_resp_array(sl_wbuf *w, size_t n) { typed_int(w, '*', (int64_t)n); }

void sl_resp_map(sl_wbuf *w, int proto, size_t npairs) {
    if (proto == 3)
        typed_int(w, '%', (int64_t)npairs);
    else
        typed_int(w, '*', (int64_t)(2 * npairs));
}

void sl_resp_bool(sl_wbuf *w, int proto, int v) {
    if (proto == 3)
        sl_wbuf_puts(w, v ? "#t\r\n" : "#f\r\n");
    else
        sl_resp_int(w, v ? 1 : 0);
}

void sl_resp_fixed(sl_wbuf *w, int proto, int64_t units, int64_t scale) {
    char tmp[48];
    int n;
    uint64_t mag = units < 0 ? (uint64_t)0 - (uint64_t)units : (uint64_t)units;
    uint64_t sc = scale > 0 ? (uint64_t)scale : 1;
    if (sc == 1) {
        n = snprintf(tmp, sizeof(tmp), "%s%llu", units < 0 ? "-" : "", (unsigned long long)mag);
    } else {
        int digits = 0;
        for (uint64_t s = sc; s > 1; s /= 10) digits++;
        n = snprintf(tmp, sizeof(tmp), "%s%llu.%0*llu", units < 0 ? "-" : "",
                     (unsigned long long)(mag / sc), digits, (unsigned long long)(mag % sc));
    }
    if (n < 0) n = 0;
    if (proto == 3) {
        sl_wbuf_putc(w, ',');
        sl_wbuf_put(w, tmp, (size_t)n);
        sl_wbuf_put(w, "\r\n", 2);
    } else {
        sl_resp_bulk(w, tmp, (size_t)n);
    }
}

void sl_resp_verbatim(sl_wbuf *w, int proto, const char *s, size_t n) {
    if (proto == 3) {
        typed_int(w, '=', (int64_t)(n + 4));
        sl_wbuf_put(w, "txt:", 4);
        sl_wbuf_put(w, s, n);
        sl_wbuf_put(w, "\r\n", 2);
    } else {
        sl_resp_bulk(w, s, n);
    }
}
